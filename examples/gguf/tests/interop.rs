//! GGUF files made by llama.cpp's own `gguf` package (`py/gguf_tool.py`, the package pinned
//! in `requirements.txt`, installed by `scripts/pyenv.sh`) read as the package reads them,
//! and files this crate writes read back by the package, equal to their source.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The python of this example's environment (made once per machine, outside the clone).
fn python() -> PathBuf {
    let out = Command::new("bash")
        .arg(root().join("scripts/pyenv.sh"))
        .env("TENSORFMT_REQUIREMENTS", "examples/gguf/requirements.txt")
        .current_dir(root())
        .stdin(std::process::Stdio::null())
        .output()
        .expect("running scripts/pyenv.sh");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "scripts/pyenv.sh failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(text.lines().last().expect("a python path").trim())
}

/// Runs `gguf_tool.py ARGS`: its stdout and whether it succeeded.
fn tool(py: &Path, args: &[&str]) -> (bool, String) {
    let out = Command::new(py)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("py/gguf_tool.py"))
        .args(args)
        .output()
        .expect("running gguf_tool.py");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.trim().is_empty() || out.status.success(),
        "gguf_tool.py {args:?}: {err}"
    );
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// Runs this crate's command line: its exit code and output.
fn cli(args: &[&str]) -> (ExitCode, String) {
    let mut out = Vec::new();
    let args = std::iter::once("tensorfmt-gguf")
        .chain(args.iter().copied())
        .map(std::ffi::OsString::from);
    let code = tensorfmt::cli::run_with(&tensorfmt_example_gguf::registry(), args, &mut out);
    (code, String::from_utf8_lossy(&out).into_owned())
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// The error opening `path` with this crate's registry.
fn refusal(path: &Path) -> String {
    let options = tensorfmt::OpenOptions {
        registry: tensorfmt_example_gguf::registry(),
        ..Default::default()
    };
    match tensorfmt::TensorFile::open_with(path, &options) {
        Ok(_) => panic!("{} opened", path.display()),
        Err(e) => e.to_string(),
    }
}

/// A seed per run, printed; `TENSORFMT_SEED` repeats a run.
fn seed() -> String {
    let seed = std::env::var("TENSORFMT_SEED").unwrap_or_else(|_| {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap();
        (t.as_nanos() % 1_000_000_007).to_string()
    });
    println!("seed {seed} (TENSORFMT_SEED={seed} repeats this run)");
    seed
}

/// Files made afresh by the package: `inspect --json --sha256` prints what the package's
/// reader describes (names, dtypes, NumPy shapes — GGUF stores dimensions fastest first —
/// and the bytes' SHA-256), and `verify` passes; the quantized tensor is refused by name.
#[test]
fn files_made_by_the_gguf_package_read_as_the_package_reads_them() {
    let py = python();
    let dir = tempfile::tempdir().unwrap();
    let (ok, made) = tool(&py, &["make", s(dir.path()), &seed()]);
    assert!(ok);
    let files: Vec<String> = serde_json::from_str(&made).unwrap();
    assert_eq!(files.len(), 3);
    for f in &files {
        if f.ends_with("quantized.gguf") {
            assert_ne!(cli(&["inspect", f]).0, ExitCode::SUCCESS);
            let e = refusal(Path::new(f));
            assert!(
                e.contains("'q.weight'") && e.contains("unknown dtype 8"),
                "{e}"
            );
            continue;
        }
        let (code, ours) = cli(&["inspect", "--json", "--sha256", f]);
        assert_eq!(code, ExitCode::SUCCESS, "{ours}");
        let (ok, theirs) = tool(&py, &["describe", f]);
        assert!(ok);
        assert_eq!(json(&ours), json(&theirs), "{f}");
        let (code, out) = cli(&["verify", f]);
        assert_eq!(code, ExitCode::SUCCESS, "{f}: {out}");
    }
}

/// `inspect --json --values` lists the key/values as the package's reader gives them:
/// numbers, text and arrays as natural JSON, in the file's order (`GGUFReader`'s
/// `contents()` flattens an array of arrays, which tensorfmt keeps nested).
#[test]
fn key_values_are_the_values_inspect_shows() {
    let py = python();
    let dir = tempfile::tempdir().unwrap();
    let (ok, made) = tool(&py, &["make", s(dir.path()), &seed()]);
    assert!(ok);
    let files: Vec<String> = serde_json::from_str(&made).unwrap();
    for f in files.iter().filter(|f| !f.ends_with("quantized.gguf")) {
        let (code, ours) = cli(&["inspect", "--json", "--values", f]);
        assert_eq!(code, ExitCode::SUCCESS, "{ours}");
        let (ok, theirs) = tool(&py, &["metadata", f]);
        assert!(ok);
        let theirs = json(&theirs);
        let ours = json(&ours);
        let values = ours["values"].as_array().unwrap();
        let names: Vec<&str> = values.iter().map(|v| v["name"].as_str().unwrap()).collect();
        let keys: Vec<&str> = theirs
            .as_object()
            .unwrap()
            .keys()
            .map(|k| k.as_str())
            .collect();
        assert_eq!(names, keys, "{f}");
        for v in values {
            let name = v["name"].as_str().unwrap();
            let mut value = v["value"].clone();
            if name == "t.nested" {
                assert_eq!(value, serde_json::json!([[1, 2], [3]]));
                value = serde_json::json!([1, 2, 3]);
            }
            assert_eq!(value, theirs[name], "{f}: {name}");
        }
    }
}

/// An npz made by this crate's own writer converted to GGUF: the package reads every tensor
/// equal to the npz's; a GGUF file of the package converted to GGUF and to npz keeps its
/// tensors.
#[test]
fn files_this_crate_writes_load_in_the_gguf_package() {
    let py = python();
    let dir = tempfile::tempdir().unwrap();
    let (ok, made) = tool(&py, &["make", s(dir.path()), &seed()]);
    assert!(ok);
    let files: Vec<String> = serde_json::from_str(&made).unwrap();
    let all = Path::new(&files[0]);
    assert!(s(all).ends_with("all_types.gguf"));

    // GGUF → npz → GGUF: the package reads the last one equal to the npz.
    let npz = dir.path().join("all.npz");
    let back = dir.path().join("back.gguf");
    assert_eq!(cli(&["convert", s(all), s(&npz)]).0, ExitCode::SUCCESS);
    assert_eq!(cli(&["convert", s(&npz), s(&back)]).0, ExitCode::SUCCESS);
    let (ok, out) = tool(&py, &["check", s(&back), s(&npz)]);
    assert!(ok, "{out}");
    // And describes it as it describes the file it made.
    let (_, a) = tool(&py, &["describe", s(all)]);
    let (_, b) = tool(&py, &["describe", s(&back)]);
    assert_eq!(json(&a)["tensors"], json(&b)["tensors"]);

    // GGUF → GGUF: `convert` carries the key/values, each with its stored type, set
    // before the tensors: a custom alignment aligns the copy's tensors as it did the
    // source's.
    for f in &files[..2] {
        let copy = dir.path().join("copy.gguf");
        assert_eq!(cli(&["convert", f, s(&copy)]).0, ExitCode::SUCCESS);
        for what in ["describe", "metadata", "types"] {
            let (_, a) = tool(&py, &[what, f]);
            let (_, b) = tool(&py, &[what, s(&copy)]);
            assert_eq!(json(&a), json(&b), "{f}: {what}");
        }
        if !f.ends_with("all_types.gguf") {
            let (_, types) = tool(&py, &["types", s(&copy)]);
            assert_eq!(
                json(&types)["general.alignment"],
                serde_json::json!(["UINT32"])
            );
        }
    }

    // GGUF → npz: the key/values are reported dropped, never an error.
    let options = tensorfmt::ConvertOptions {
        open: tensorfmt::OpenOptions {
            registry: tensorfmt_example_gguf::registry(),
            ..Default::default()
        },
        ..Default::default()
    };
    let summary = tensorfmt::convert(&files[1], &npz, &options, |_, _| {}).unwrap();
    assert!(summary.dropped.contains(&"general.alignment".to_string()));
}

/// Values given to the writer as a structure: a node tagged with a GGUF type is stored
/// with it (an empty array keeps its item type), an untagged one as the widest type that
/// holds it; what GGUF cannot hold (`None`) is reported. Values set after a tensor are
/// refused: the tensors' alignment is among them.
#[test]
fn values_are_set_before_the_first_tensor() {
    use tensorfmt::Node;
    let py = python();
    let dir = tempfile::tempdir().unwrap();
    let registry = tensorfmt_example_gguf::registry();
    let path = dir.path().join("v.gguf");
    // One tensor, saved after the values and, refused, before them.
    let meta = tensorfmt::TensorMeta {
        name: "w".into(),
        dtype: tensorfmt::DType::F32,
        shape: vec![1],
        order: tensorfmt::Order::C,
        byte_order: tensorfmt::ByteOrder::Little,
    };
    let mut saver =
        tensorfmt::Saver::create_in(&registry, &path, None, &Default::default()).unwrap();
    let kept = saver
        .set_structure(&Node::Dict(vec![
            (
                Node::str("general.alignment"),
                Node::typed(4, Node::Int(64)),
            ),
            (
                Node::str("t.empty"),
                Node::typed(9, Node::typed(5, Node::List(Vec::new()))),
            ),
            (Node::str("t.int"), Node::Int(-3)),
            (Node::str("t.text"), Node::str("x")),
            (
                Node::str("t.list"),
                Node::List(vec![Node::Float(0.5), Node::Float(1.5)]),
            ),
            (Node::str("t.none"), Node::None),
        ]))
        .unwrap();
    assert_eq!(kept.dropped, ["t.none"]);
    saver.add_bytes(&meta, &[0u8; 4]).unwrap();
    saver.commit().unwrap();
    let (_, types) = tool(&py, &["types", s(&path)]);
    assert_eq!(
        json(&types),
        serde_json::json!({
            "general.alignment": ["UINT32"],
            "t.empty": ["ARRAY", "INT32"],
            "t.int": ["INT64"],
            "t.text": ["STRING"],
            "t.list": ["ARRAY", "FLOAT64"],
        })
    );
    let (_, values) = tool(&py, &["metadata", s(&path)]);
    assert_eq!(json(&values)["t.empty"], serde_json::json!([]));

    let mut saver = tensorfmt::Saver::create_in(
        &registry,
        dir.path().join("x.gguf"),
        None,
        &Default::default(),
    )
    .unwrap();
    saver.add_bytes(&meta, &[0u8; 4]).unwrap();
    let tree = Node::Dict(vec![(Node::str("general.alignment"), Node::Int(64))]);
    let e = saver.set_structure(&tree).unwrap_err().to_string();
    assert!(e.contains("before the first tensor"), "{e}");
}

/// Damaged files get an error naming the file, never a panic or a huge allocation.
#[test]
fn damaged_files_are_refused_with_an_error() {
    let py = python();
    let dir = tempfile::tempdir().unwrap();
    let (_, made) = tool(&py, &["make", s(dir.path()), "7"]);
    let files: Vec<String> = serde_json::from_str(&made).unwrap();
    let bytes = std::fs::read(&files[0]).unwrap();
    let bad = dir.path().join("bad.gguf");
    // Every truncation of the header and the tables, and one of the data.
    let mut cuts: Vec<usize> = (4..bytes.len().min(600)).step_by(7).collect();
    cuts.push(bytes.len() - 1);
    for cut in cuts {
        std::fs::write(&bad, &bytes[..cut]).unwrap();
        let (code, _) = cli(&["inspect", "--sha256", s(&bad)]);
        assert_ne!(code, ExitCode::SUCCESS, "truncated at {cut}");
    }
    // Counts far beyond the file.
    let mut huge = bytes.clone();
    huge[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
    std::fs::write(&bad, &huge).unwrap();
    let e = refusal(&bad);
    assert!(e.contains("bad.gguf") && e.contains("n_tensors"), "{e}");
}
