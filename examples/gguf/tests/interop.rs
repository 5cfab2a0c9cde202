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

    // A file with a custom alignment converted to GGUF: tensors kept, bytes aligned to
    // the default 32 (the key/values are not carried by `convert`).
    let aligned = Path::new(&files[1]);
    let copy = dir.path().join("copy.gguf");
    assert_eq!(cli(&["convert", s(aligned), s(&copy)]).0, ExitCode::SUCCESS);
    let (_, a) = tool(&py, &["describe", s(aligned)]);
    let (_, b) = tool(&py, &["describe", s(&copy)]);
    assert_eq!(json(&a)["tensors"], json(&b)["tensors"]);
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
