//! The write side never loses or leaks data: a save never writes over its input, over
//! the input's external data, over files it did not create (files named after tensors,
//! another model's data), nor outside the output's folder; zip outputs get member names
//! that extract inside the extraction folder; an existing output is replaced only by one
//! of its kind; the temporary files of killed saves are removed by the next save.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use tensorfmt::{DType, DataLocation, ExternalData, Saver, TensorFile};
use tensorfmt_tests::{cli, fixtures, inspect_json, meta, python_snippet, safetensors_bytes};

/// Every file under `dir` (not following links) with its bytes.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let kind = e.file_type().unwrap();
        if kind.is_dir() {
            out.extend(snapshot(&e.path()));
        } else if kind.is_file() {
            out.insert(e.path(), std::fs::read(e.path()).unwrap());
        }
    }
    out
}

/// The names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn run(args: &[&str]) -> (ExitCode, String) {
    cli(args)
}

/// The error of converting `input` to `output` (to format `to`, external data as
/// `external` says) with the library, which the command line prints.
fn convert_err(input: &Path, output: &Path, to: Option<&str>, external: ExternalData) -> String {
    let options = tensorfmt::ConvertOptions {
        to: to.map(Into::into),
        write: tensorfmt::WriteOptions {
            external,
            ..Default::default()
        },
        ..Default::default()
    };
    match tensorfmt::convert(input, output, &options, |_, _| {}) {
        Ok(_) => panic!("{} → {}: converted", input.display(), output.display()),
        Err(e) => e.to_string(),
    }
}

/// One external file, `location`, for every tensor.
fn one_file_at(location: &str) -> ExternalData {
    ExternalData::External {
        per_tensor: false,
        location: Some(location.into()),
        threshold: 0,
        align: 4096,
    }
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The external files a model names.
fn data_files(model: &Path) -> Vec<String> {
    let mut v: Vec<String> = TensorFile::open(model)
        .unwrap()
        .tensors()
        .iter()
        .filter_map(|t| match &t.location {
            DataLocation::External { path, .. } => Some(path.clone()),
            _ => None,
        })
        .collect();
    v.sort();
    v.dedup();
    v
}

/// The ONNX fixture with one external data file, copied into `dir`.
fn model_with_external_data(dir: &Path) -> PathBuf {
    for n in ["external_single.onnx", "external_single.data"] {
        std::fs::copy(fixtures().join("onnx").join(n), dir.join(n)).unwrap();
    }
    dir.join("external_single.onnx")
}

#[test]
fn onnx_convert_and_replace_in_the_same_folder_never_touch_the_inputs_data() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let model = model_with_external_data(d);
    let expected = inspect_json(&model);
    let before = snapshot(d);
    // Every policy that writes external data, with the data of the input in the folder.
    for (i, extra) in [
        vec![],
        vec!["--external", "one-file", "--external-threshold", "0"],
        vec!["--external", "per-tensor", "--external-threshold", "0"],
    ]
    .into_iter()
    .enumerate()
    {
        let copy = d.join(format!("copy{i}.onnx"));
        let args = [&["convert", s(&model), s(&copy)], &extra[..]].concat();
        let (code, out) = run(&args);
        assert_eq!(code, ExitCode::SUCCESS, "{args:?}: {out}");
        for (p, h) in &before {
            assert_eq!(
                snapshot(d).get(p),
                Some(h),
                "{args:?} changed {}",
                p.display()
            );
        }
        assert_eq!(
            inspect_json(&model),
            expected,
            "{args:?}: the input reads as before"
        );
        assert_eq!(
            inspect_json(&copy)["tensors"],
            expected["tensors"],
            "{args:?}"
        );
        for f in data_files(&copy) {
            assert!(f.starts_with(&format!("copy{i}.onnx.")), "{args:?}: {f}");
        }
    }
    // `replace` beside the model, with the model's own weights.
    let weights = d.join("weights.pt");
    let (code, out) = run(&["convert", s(&model), s(&weights)]);
    assert_eq!(code, ExitCode::SUCCESS, "{out}");
    let before = snapshot(d);
    let tuned = d.join("tuned.onnx");
    let (code, out) = run(&["replace", s(&model), s(&weights), s(&tuned)]);
    assert_eq!(code, ExitCode::SUCCESS, "{out}");
    for (p, h) in &before {
        assert_eq!(
            snapshot(d).get(p),
            Some(h),
            "replace changed {}",
            p.display()
        );
    }
    assert_eq!(inspect_json(&tuned)["tensors"], expected["tensors"]);
    assert!(!data_files(&tuned).contains(&"external_single.data".to_string()));
}

#[test]
fn saving_a_model_again_removes_the_data_its_last_save_wrote_and_nothing_else() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let model = model_with_external_data(d);
    let out = d.join("out.onnx");
    let args = [
        "convert",
        s(&model),
        s(&out),
        "--external",
        "one-file",
        "--external-threshold",
        "0",
    ];
    assert_eq!(run(&args).0, ExitCode::SUCCESS);
    let first = data_files(&out);
    assert_eq!(first.len(), 1, "{first:?}");
    // A second save names a new data file, and removes the first once the model is in.
    assert_eq!(run(&args).0, ExitCode::SUCCESS);
    let second = data_files(&out);
    assert_eq!(second.len(), 1);
    assert_ne!(first, second);
    assert!(!d.join(&first[0]).exists());
    assert_eq!(
        names(d),
        [
            "external_single.data",
            "external_single.onnx",
            "out.onnx",
            second[0].as_str()
        ]
    );
}

#[test]
fn per_tensor_external_data_never_overwrites_files_named_like_tensors() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    // A model whose per-tensor data files are named after its tensors (`w1`, `b1`, ...),
    // converted per tensor into its own folder; an npz whose tensors are named after
    // files in the output folder (`.bashrc`, the input `in.npz` itself, another model's
    // data `w1`).
    for n in names(&fixtures().join("onnx/external_per_tensor")) {
        std::fs::copy(
            fixtures().join("onnx/external_per_tensor").join(&n),
            d.join(&n),
        )
        .unwrap();
    }
    std::fs::write(d.join(".bashrc"), b"export PATH=/usr/bin\n").unwrap();
    let npz = d.join("in.npz");
    let data = [7u8; 4096];
    let mut saver = Saver::create(&npz, None, &Default::default()).unwrap();
    for n in [".bashrc", "in.npz", "w1", "model.onnx"] {
        saver
            .add_bytes(&meta(n, DType::U8, &[4096]), &data)
            .unwrap();
    }
    saver.commit().unwrap();
    let model = d.join("model.onnx");
    let model_tensors = inspect_json(&model);
    let before = snapshot(d);
    for (input, out) in [(&model, "again.onnx"), (&npz, "from_npz.onnx")] {
        let out = d.join(out);
        let (code, text) = run(&[
            "convert",
            s(input),
            s(&out),
            "--external",
            "per-tensor",
            "--external-threshold",
            "0",
        ]);
        assert_eq!(code, ExitCode::SUCCESS, "{text}");
        let now = snapshot(d);
        for (p, h) in &before {
            assert_eq!(now.get(p), Some(h), "{} was written over", p.display());
        }
        assert!(data_files(&out).len() >= 4);
    }
    assert_eq!(inspect_json(&model), model_tensors);
}

#[cfg(unix)]
#[test]
fn external_data_is_never_written_through_a_symlinked_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let d = tmp.path();
    std::os::unix::fs::symlink(elsewhere.path(), d.join("sub")).unwrap();
    let out = d.join("m.onnx");
    // Written anew (from npz) and rewritten (from onnx).
    let npz = tmp.path().join("w.npz");
    std::fs::copy(fixtures().join("npz/single.npz"), &npz).unwrap();
    for src in [fixtures().join("onnx/mlp.onnx"), npz.clone()] {
        let text = convert_err(&src, &out, None, one_file_at("sub/w.bin"));
        assert!(
            text.contains("symbolic link") && text.contains("sub"),
            "{text}"
        );
    }
    std::fs::remove_file(&npz).unwrap();
    assert!(names(elsewhere.path()).is_empty());
    assert_eq!(names(d), ["sub"]);
}

#[test]
fn an_existing_external_location_is_refused_and_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    std::fs::write(d.join("important.txt"), b"keep me").unwrap();
    let npz = tmp.path().join("w.npz");
    std::fs::copy(fixtures().join("npz/single.npz"), &npz).unwrap();
    for src in [fixtures().join("onnx/mlp.onnx"), npz.clone()] {
        let text = convert_err(&src, &d.join("m.onnx"), None, one_file_at("important.txt"));
        assert!(
            text.contains("important.txt") && text.contains("exists"),
            "{text}"
        );
    }
    std::fs::remove_file(&npz).unwrap();
    assert_eq!(std::fs::read(d.join("important.txt")).unwrap(), b"keep me");
    assert_eq!(names(d), ["important.txt"]);
}

#[test]
fn zip_outputs_get_member_names_that_extract_inside_the_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    // A safetensors file whose tensor names are paths that escape, as a hostile file
    // would name them.
    let names_in = ["../../evil", "/abs/x", "a\\b", "C:/w", "ok"];
    let mut header = String::from("{");
    for (i, n) in names_in.iter().enumerate() {
        if i > 0 {
            header.push(',');
        }
        let n = serde_json::to_string(n).unwrap();
        header.push_str(&format!(
            "{n}:{{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[{},{}]}}",
            2 * i,
            2 * i + 2
        ));
    }
    header.push('}');
    let data: Vec<u8> = (0..2 * names_in.len() as u8).collect();
    let src = d.join("in.safetensors");
    std::fs::write(&src, safetensors_bytes(header.as_bytes(), &data)).unwrap();
    for out in ["out.npz", "out.pt"] {
        let out = d.join(out);
        let (code, text) = run(&["convert", s(&src), s(&out)]);
        assert_eq!(code, ExitCode::SUCCESS, "{text}");
    }
    let (ok, text) = python_snippet(
        r#"
import sys, zipfile, numpy as np
for path in sys.argv[1:]:
    names = zipfile.ZipFile(path).namelist()
    for n in names:
        assert not n.startswith("/") and "\\" not in n and ":" not in n, (path, n)
        assert ".." not in n.split("/") and "" not in n.split("/"), (path, n)
z = np.load(sys.argv[1])
print(sorted(z.files))
print(int(z["__/__/evil"][1]))
"#,
        &[s(&d.join("out.npz")), s(&d.join("out.pt"))],
    );
    assert!(ok, "{text}");
    assert!(
        text.contains("['C_/w', '__/__/evil', 'a/b', 'abs/x', 'ok']") && text.contains("\n1\n"),
        "{text}"
    );
}

#[cfg(unix)]
#[test]
fn an_output_that_is_the_input_or_links_to_it_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let a = d.join("a.npz");
    std::fs::copy(fixtures().join("npz/single.npz"), &a).unwrap();
    std::os::unix::fs::symlink(&a, d.join("sym.npz")).unwrap();
    std::fs::hard_link(&a, d.join("hard.npz")).unwrap();
    let before = std::fs::read(&a).unwrap();
    for out in ["a.npz", "sym.npz", "hard.npz"] {
        let (code, _) = run(&["convert", s(&a), s(&d.join(out))]);
        assert_ne!(code, ExitCode::SUCCESS, "{out}");
        let text = convert_err(&a, &d.join(out), None, ExternalData::Auto);
        assert!(
            text.contains("is the input") && text.contains(out),
            "{text}"
        );
        assert_eq!(std::fs::read(&a).unwrap(), before, "{out}");
    }
    // `replace` refuses to write over its weights.
    let model = d.join("m.onnx");
    std::fs::copy(fixtures().join("onnx/mlp.onnx"), &model).unwrap();
    let w = d.join("w.onnx");
    std::fs::copy(&model, &w).unwrap();
    let before = std::fs::read(&w).unwrap();
    let (code, _) = run(&["replace", s(&model), s(&w), s(&w)]);
    assert_ne!(code, ExitCode::SUCCESS);
    assert_eq!(std::fs::read(&w).unwrap(), before);
    assert_eq!(
        names(d),
        ["a.npz", "hard.npz", "m.onnx", "sym.npz", "w.onnx"]
    );
}

#[test]
fn an_existing_output_is_replaced_only_by_one_of_its_kind() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let src = fixtures().join("npz/single.npz");
    // A database replaced by a database of its format, whole.
    for ext in ["lmdb", "leveldb"] {
        let db = d.join(format!("db.{ext}"));
        let fmt = format!("caffe2-{ext}");
        let args = ["convert", s(&src), s(&db), "--to", fmt.as_str()];
        assert_eq!(run(&args).0, ExitCode::SUCCESS, "{ext}");
        let (code, text) = run(&args);
        assert_eq!(code, ExitCode::SUCCESS, "{ext} replaced: {text}");
        assert_eq!(
            inspect_json(&db)["tensors"],
            inspect_json(&src)["tensors"],
            "{ext}"
        );
        // A folder that is no such database, and a file, are refused and kept.
        let other = d.join(format!("notes.{ext}"));
        std::fs::create_dir(&other).unwrap();
        std::fs::write(other.join("notes.txt"), b"mine").unwrap();
        let file = d.join(format!("file.{ext}"));
        std::fs::write(&file, b"mine").unwrap();
        for out in [&other, &file] {
            let text = convert_err(&src, out, Some(fmt.as_str()), ExternalData::Auto);
            assert!(text.contains("exists"), "{text}");
        }
        assert_eq!(std::fs::read(other.join("notes.txt")).unwrap(), b"mine");
        assert_eq!(std::fs::read(&file).unwrap(), b"mine");
    }
    // A folder where a file goes is refused.
    let folder = d.join("x.npy");
    std::fs::create_dir(&folder).unwrap();
    let text = convert_err(&src, &folder, None, ExternalData::Auto);
    assert!(
        text.contains("a folder") && text.contains("x.npy"),
        "{text}"
    );
    assert!(folder.is_dir());
    let leftovers: Vec<String> = names(d)
        .into_iter()
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[cfg(unix)]
#[test]
fn temporaries_of_killed_saves_are_removed_by_the_next_save_to_the_same_output() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let mut c = std::process::Command::new("true").spawn().unwrap();
    let dead = c.id();
    c.wait().unwrap();
    let me = std::process::id();
    // What a kill leaves: a file's temporary file, a database's temporary folder, and a
    // model's data file committed before the model itself was.
    let stale = [
        format!(".out.pt.{dead}.0123456789abcdef.tmp"),
        format!(".out.lmdb.{dead}.0123456789abcdef.tmp"),
        format!(".out.onnx.{dead}.0123456789abcdef.tmp"),
        format!("out.onnx.{dead}-0123456789abcdef.data"),
    ];
    for n in &stale {
        if n.contains("lmdb") {
            std::fs::create_dir(d.join(n)).unwrap();
            std::fs::write(d.join(n).join("data.mdb"), vec![0u8; 4096]).unwrap();
        } else {
            std::fs::write(d.join(n), vec![0u8; 4096]).unwrap();
        }
    }
    // A running save's: kept.
    let live = format!(".out.pt.{me}.fedcba9876543210.tmp");
    std::fs::write(d.join(&live), b"busy").unwrap();
    let src = fixtures().join("npz/single.npz");
    for (out, to) in [("out.pt", "pytorch"), ("out.lmdb", "caffe2-lmdb")] {
        let (code, text) = run(&["convert", s(&src), s(&d.join(out)), "--to", to]);
        assert_eq!(code, ExitCode::SUCCESS, "{text}");
    }
    let (code, text) = run(&[
        "convert",
        s(&fixtures().join("onnx/mlp.onnx")),
        s(&d.join("out.onnx")),
    ]);
    assert_eq!(code, ExitCode::SUCCESS, "{text}");
    std::fs::remove_file(d.join(&live)).unwrap();
    assert_eq!(names(d), ["out.lmdb", "out.onnx", "out.pt"]);
}
