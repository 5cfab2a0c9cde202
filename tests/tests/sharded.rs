//! Hugging Face sharded checkpoints (`formats/src/sharded.rs`): every fixture
//! `huggingface_hub` wrote, and checkpoints it writes afresh each run in both shard
//! formats, list as its loader reads them (`inspect --json --sha256` of the folder or the
//! index); what `convert --max-shard-size` writes is byte for byte what
//! `save_torch_state_dict` writes for the same state dict and loads in
//! `load_torch_model`; sharded checkpoints convert to every format and back; the output
//! folder keeps what is not the checkpoint; hostile indexes get clear errors.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use tensorfmt_tests::{
    cli, convert, fixtures, inspect_json, json, run_seed, tensors_by_name, tfcheck_sharded,
};

fn dir() -> PathBuf {
    fixtures().join("sharded")
}

/// The fixtures: folder and index file name.
const FIXTURES: [(&str, &str); 3] = [
    ("safetensors_shards", "model.safetensors.index.json"),
    ("pytorch_shards", "pytorch_model.bin.index.json"),
    ("model_folder", "model.safetensors.index.json"),
];

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

fn expected(folder: &str) -> serde_json::Value {
    json(&std::fs::read_to_string(dir().join("expected").join(format!("{folder}.json"))).unwrap())
}

/// The files of a folder, sorted, hidden ones included.
fn files(d: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn every_fixture_reads_as_huggingface_reads_it() {
    for (folder, index) in FIXTURES {
        let want = expected(folder);
        assert_eq!(inspect_json(&dir().join(folder)), want, "{folder}");
        assert_eq!(
            inspect_json(&dir().join(folder).join(index)),
            want,
            "{folder}/{index}"
        );
    }
    // The text listing says how many shards.
    let (code, out) = cli(&["inspect", s(&dir().join("pytorch_shards"))]);
    assert_eq!(code, ExitCode::SUCCESS);
    assert!(out.contains(": pytorch in 4 shards (10 tensors)"), "{out}");
}

#[test]
fn unseen_checkpoints_in_both_shard_formats() {
    let tmp = tempfile::tempdir().unwrap();
    let seed: u64 = run_seed().parse().unwrap();
    for i in 0..3u64 {
        for format in ["safetensors", "pytorch"] {
            let out = tmp.path().join(format!("{format}-{i}"));
            std::fs::create_dir(&out).unwrap();
            let case = (seed + i).to_string();
            tfcheck_sharded(&["make", s(&out), &case, format]);
            let want = json(&tfcheck_sharded(&["describe", s(&out)]));
            assert!(want["shards"].as_array().unwrap().len() > 1, "{want}");
            assert_eq!(inspect_json(&out), want, "{format} seed {case}");
        }
    }
}

/// `convert`s `input` to a sharded checkpoint in `out` with `extra` flags.
fn shard(input: &Path, out: &Path, extra: &[&str]) {
    convert(input, out, extra);
}

#[test]
fn written_byte_for_byte_as_huggingface_hub_writes() {
    let tmp = tempfile::tempdir().unwrap();
    // A state dict in one file, in the fixture's order (torch.load keeps it).
    let pt = tmp.path().join("sd.pt");
    convert(&dir().join("safetensors_shards"), &pt, &[]);
    for (format, size) in [
        ("safetensors", "4KB"),
        ("safetensors", "1.5KB"),
        ("pytorch", "4KB"),
    ] {
        let hf = tmp.path().join(format!("hf-{format}-{size}"));
        let ours = tmp.path().join(format!("ours-{format}-{size}"));
        std::fs::create_dir(&hf).unwrap();
        tfcheck_sharded(&["save", s(&pt), s(&hf), format, size]);
        shard(&pt, &ours, &["--max-shard-size", size, "--to", format]);
        assert_eq!(files(&ours), files(&hf), "{format} {size}");
        for name in files(&hf) {
            let (a, b) = (
                std::fs::read(ours.join(&name)).unwrap(),
                std::fs::read(hf.join(&name)).unwrap(),
            );
            if format == "safetensors" || name.ends_with(".json") {
                assert!(
                    a == b,
                    "{format} {size}: {name} differs from huggingface_hub's"
                );
            }
        }
        // Read back by Hugging Face's loader: the same tensors.
        let loaded = json(&tfcheck_sharded(&["load", s(&ours), format]));
        assert_eq!(
            tensors_by_name(&loaded),
            tensors_by_name(&inspect_json(&pt)),
            "{format} {size}"
        );
    }
}

#[test]
fn huggingface_loads_what_tensorfmt_shards() {
    let tmp = tempfile::tempdir().unwrap();
    let inputs = [
        dir().join("safetensors_shards"),
        dir().join("pytorch_shards"),
        fixtures().join("pytorch").join("module_state_dict.pt"),
        fixtures().join("npz").join("savez_compressed.npz"),
    ];
    for (i, input) in inputs.iter().enumerate() {
        let source = inspect_json(input);
        for format in ["safetensors", "pytorch"] {
            // npz names with slashes are no module's: only the shards are checked there.
            let out = tmp.path().join(format!("{i}-{format}"));
            shard(input, &out, &["--max-shard-size", "100", "--to", format]);
            let written = inspect_json(&out);
            assert_eq!(
                tensors_by_name(&written),
                tensors_by_name(&source),
                "{} as {format}",
                input.display()
            );
            let described = json(&tfcheck_sharded(&["describe", s(&out)]));
            assert_eq!(described, written, "{} as {format}", input.display());
            if !input.to_string_lossy().ends_with(".npz") {
                let loaded = json(&tfcheck_sharded(&["load", s(&out), format]));
                assert_eq!(loaded, written, "{} as {format}", input.display());
            }
        }
    }
}

#[test]
fn sharded_converts_to_every_format_and_back() {
    let tmp = tempfile::tempdir().unwrap();
    let source = dir().join("safetensors_shards");
    for name in ["one.safetensors", "one.pt", "one.onnx"] {
        let single = tmp.path().join(name);
        convert(&source, &single, &[]);
        let (code, out) = cli(&["diff", s(&source), s(&single)]);
        assert_eq!(code, ExitCode::SUCCESS, "{name}: {out}");
        let again = tmp.path().join(format!("{name}.shards"));
        shard(&single, &again, &["--max-shard-size", "3KB"]);
        let (code, out) = cli(&["diff", s(&single), s(&again)]);
        assert_eq!(code, ExitCode::SUCCESS, "{name}: {out}");
        assert!(files(&again).len() > 2, "{name}: {:?}", files(&again));
    }
}

#[cfg(unix)]
#[test]
fn the_output_folder_keeps_what_is_not_the_checkpoint() {
    use std::os::unix::fs::MetadataExt;
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("repo");
    std::fs::create_dir_all(out.join("tokenizer")).unwrap();
    std::fs::write(out.join("config.json"), b"{\"model_type\": \"tiny\"}").unwrap();
    std::fs::write(out.join("tokenizer").join("vocab.txt"), b"a\nb\n").unwrap();
    std::os::unix::fs::symlink("config.json", out.join("link.json")).unwrap();
    // An earlier save of more shards and a single-file checkpoint beside them: files of
    // the name pattern, which a save replaces (each must be what its name says: a file of
    // such a name that is no shard is in the way, and the save refused); then a
    // checkpoint of the other format.
    shard(
        &dir().join("safetensors_shards"),
        &out,
        &["--max-shard-size", "1.5KB"],
    );
    convert(
        &dir().join("safetensors_shards"),
        &out.join("model.safetensors"),
        &[],
    );
    shard(
        &dir().join("pytorch_shards"),
        &out,
        &["--max-shard-size", "4KB", "--to", "pytorch"],
    );
    let config_inode = std::fs::metadata(out.join("config.json")).unwrap().ino();
    shard(
        &dir().join("pytorch_shards"),
        &out,
        &["--max-shard-size", "4KB"],
    );
    assert_eq!(
        files(&out),
        [
            "config.json",
            "link.json",
            "model-00001-of-00004.safetensors",
            "model-00002-of-00004.safetensors",
            "model-00003-of-00004.safetensors",
            "model-00004-of-00004.safetensors",
            "model.safetensors.index.json",
            "pytorch_model-00001-of-00004.bin",
            "pytorch_model-00002-of-00004.bin",
            "pytorch_model-00003-of-00004.bin",
            "pytorch_model-00004-of-00004.bin",
            "pytorch_model.bin.index.json",
            "tokenizer",
        ]
    );
    assert_eq!(
        std::fs::metadata(out.join("config.json")).unwrap().ino(),
        config_inode,
        "config.json is carried over, not copied"
    );
    assert_eq!(
        std::fs::read_link(out.join("link.json")).unwrap(),
        Path::new("config.json")
    );
    assert_eq!(
        std::fs::read(out.join("tokenizer/vocab.txt")).unwrap(),
        b"a\nb\n"
    );
    // The safetensors index is the folder's checkpoint now, and holds what the input did.
    let want = expected("pytorch_shards");
    let got = inspect_json(&out);
    assert_eq!(got["format"], "safetensors");
    assert_eq!(tensors_by_name(&got), tensors_by_name(&want));
    // Re-sharded in place: the input is the output folder's own checkpoint.
    shard(
        &out.join("model.safetensors.index.json"),
        &out.join("model.safetensors.index.json"),
        &["--max-shard-size", "16KB"],
    );
    assert!(
        out.join("model-00001-of-00002.safetensors").exists(),
        "{:?}",
        files(&out)
    );
    assert!(!out.join("model-00003-of-00004.safetensors").exists());
    assert_eq!(tensors_by_name(&inspect_json(&out)), tensors_by_name(&want));
}

#[test]
fn one_shard_is_one_file_unless_an_index_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let one = tmp.path().join("one");
    shard(
        &dir().join("safetensors_shards"),
        &one,
        &["--max-shard-size", "1GB"],
    );
    assert_eq!(files(&one), ["model.safetensors"]);
    // The folder opens as its one file, as Hugging Face's loaders read it.
    let want = expected("safetensors_shards");
    let got = inspect_json(&one);
    assert_eq!(got["format"], "safetensors");
    assert_eq!(tensors_by_name(&got), tensors_by_name(&want));
    let named = tmp.path().join("named");
    std::fs::create_dir(&named).unwrap();
    let index = named.join("model.safetensors.index.json");
    shard(&dir().join("safetensors_shards"), &index, &[]);
    assert_eq!(
        files(&named),
        [
            "model-00001-of-00001.safetensors",
            "model.safetensors.index.json"
        ]
    );
    assert_eq!(
        tensors_by_name(&inspect_json(&index)),
        tensors_by_name(&want)
    );
}

/// A copy of the safetensors fixture in a fresh folder, its index replaced by `index`.
fn with_index(tmp: &Path, name: &str, index: &str) -> PathBuf {
    let d = tmp.join(name);
    std::fs::create_dir(&d).unwrap();
    for f in files(&dir().join("safetensors_shards")) {
        std::fs::copy(dir().join("safetensors_shards").join(&f), d.join(&f)).unwrap();
    }
    std::fs::write(d.join("model.safetensors.index.json"), index).unwrap();
    d
}

/// The error of opening and hashing the sharded checkpoint in `d`.
fn open_err(d: &Path) -> String {
    let (code, out) = cli(&["inspect", "--sha256", s(d)]);
    assert_ne!(
        code,
        ExitCode::SUCCESS,
        "{} was accepted: {out}",
        d.display()
    );
    let r = tensorfmt::TensorFile::open(d).and_then(|f| {
        f.read_all(&mut tensorfmt::runtime::hash::HashSink::new())
            .map(|_| f)
    });
    r.expect_err("refused").to_string()
}

#[test]
fn hostile_indexes_get_clear_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let index = |map: &str| format!("{{\"metadata\": {{}}, \"weight_map\": {{{map}}}}}");
    let good =
        std::fs::read_to_string(dir().join("safetensors_shards/model.safetensors.index.json"))
            .unwrap();
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "not_json",
            "{\"weight_map\": {".into(),
            "the index is not JSON",
        ),
        ("no_map", "{\"metadata\": {}}".into(), "has no `weight_map`"),
        (
            "number",
            index("\"lm_head.weight\": 3"),
            "not to a shard's file name",
        ),
        (
            "parent",
            index("\"lm_head.weight\": \"../x.safetensors\""),
            "leaves the checkpoint's folder",
        ),
        (
            "absolute",
            index("\"lm_head.weight\": \"/etc/passwd\""),
            "is not a relative path",
        ),
        (
            "missing",
            index("\"lm_head.weight\": \"model-00009-of-00009.safetensors\""),
            "model-00009-of-00009.safetensors",
        ),
        (
            "wrong_shard",
            good.replace(
                "\"lm_head.weight\": \"model-00003-of-00004.safetensors\"",
                "\"lm_head.weight\": \"model-00001-of-00004.safetensors\"",
            ),
            "puts the tensor in shard 'model-00001-of-00004.safetensors', which does not hold it",
        ),
        (
            "itself",
            index("\"lm_head.weight\": \"model.safetensors.index.json\""),
            "model.safetensors.index.json",
        ),
        ("empty", index(""), "names no shard"),
    ];
    for (name, text, why) in &cases {
        let d = with_index(t, name, text);
        let e = open_err(&d);
        assert!(e.contains(why), "{name}: {e}");
        assert!(
            e.contains("model.safetensors.index.json"),
            "{name}: the index is named: {e}"
        );
    }
    // A tensor in two shards.
    let d = with_index(t, "twice", &good);
    std::fs::copy(
        d.join("model-00003-of-00004.safetensors"),
        d.join("model-00005-of-00005.safetensors"),
    )
    .unwrap();
    let twice = good.replace(
        "\"model.norm.weight\": \"model-00004-of-00004.safetensors\"",
        "\"model.norm.weight\": \"model-00004-of-00004.safetensors\", \"x\": \"model-00005-of-00005.safetensors\"",
    );
    std::fs::write(d.join("model.safetensors.index.json"), twice).unwrap();
    let e = open_err(&d);
    assert!(
        e.contains("in two shards") && e.contains("lm_head.weight"),
        "{e}"
    );
    // Shards of two formats.
    let d = with_index(t, "mixed", &good);
    convert(
        &d.join("model-00004-of-00004.safetensors"),
        &d.join("other.pt"),
        &[],
    );
    let mixed = good.replace(
        "\"model.norm.weight\": \"model-00004-of-00004.safetensors\"",
        "\"model.norm.weight\": \"other.pt\"",
    );
    std::fs::write(d.join("model.safetensors.index.json"), mixed).unwrap();
    let e = open_err(&d);
    assert!(e.contains("different formats"), "{e}");
    // A link out of the folder.
    #[cfg(unix)]
    {
        let outside = t.join("outside.safetensors");
        std::fs::copy(
            dir().join("safetensors_shards/model-00003-of-00004.safetensors"),
            &outside,
        )
        .unwrap();
        let d = with_index(t, "link", &good);
        std::fs::remove_file(d.join("model-00003-of-00004.safetensors")).unwrap();
        std::os::unix::fs::symlink(&outside, d.join("model-00003-of-00004.safetensors")).unwrap();
        let e = open_err(&d);
        assert!(
            e.contains("resolves outside the checkpoint's folder"),
            "{e}"
        );
    }
    // An index over the limit on headers is not read.
    let options = tensorfmt::OpenOptions {
        limits: tensorfmt::Limits {
            max_header_bytes: 100,
            ..Default::default()
        },
        ..Default::default()
    };
    let e = tensorfmt::TensorFile::open_with(dir().join("safetensors_shards"), &options)
        .expect_err("over the limit");
    assert!(e.to_string().contains("index size"), "{e}");
    // Two indexes of one kind in a folder.
    let d = with_index(t, "two", &good);
    std::fs::write(d.join("other.safetensors.index.json"), &good).unwrap();
    let e = open_err(&d);
    assert!(e.contains("2 indexes"), "{e}");
    // The output of a sharded save is a folder.
    let file = t.join("file");
    std::fs::write(&file, b"x").unwrap();
    let (code, out) = cli(&[
        "convert",
        s(&dir().join("safetensors_shards")),
        s(&file),
        "--max-shard-size",
        "1KB",
    ]);
    assert_ne!(code, ExitCode::SUCCESS, "{out}");
    assert_eq!(std::fs::read(&file).unwrap(), b"x");
    let (code, _) = cli(&[
        "convert",
        s(&dir().join("safetensors_shards")),
        s(&t.join("x.npz")),
        "--max-shard-size",
        "1KB",
    ]);
    assert_ne!(code, ExitCode::SUCCESS);
    let (code, _) = cli(&[
        "convert",
        s(&dir().join("safetensors_shards")),
        s(&t.join("out")),
        "--max-shard-size",
        "1KB",
        "--to",
        "npz",
    ]);
    assert_ne!(code, ExitCode::SUCCESS);
    assert!(!t.join("out").exists());
}
