//! `tensorfmt scan` against the real tools: no benign fixture of the repository is
//! dangerous, its weights-only verdicts agree with the pinned torch's
//! `torch.load(weights_only=True)`, every payload of the attack corpus
//! (`tests/fixtures/scan/make.py`) is dangerous, and scanning or inspecting a canary
//! payload runs nothing.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use tensorfmt_tests::{assert_generator_writes, fixtures, python};

/// The command line, run as a child process: its exit code and stdout.
fn tensorfmt(args: &[&Path], cwd: Option<&Path>) -> (i32, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tensorfmt-cli"));
    cmd.args(args);
    if let Some(dir) = cwd {
        cmd.current_dir(dir);
    }
    let out = cmd.output().expect("running tensorfmt-cli");
    (
        out.status.code().expect("an exit code"),
        String::from_utf8(out.stdout).expect("utf-8 output"),
    )
}

/// `tensorfmt scan --json PATHS`: the exit code and the document.
fn scan_json(paths: &[PathBuf]) -> (i32, serde_json::Value) {
    let mut args: Vec<&Path> = vec![Path::new("scan"), Path::new("--json")];
    args.extend(paths.iter().map(PathBuf::as_path));
    let (code, out) = tensorfmt(&args, None);
    let doc = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    (code, doc)
}

/// The files of `dir` whose extension is one of `exts` (sorted).
fn files(dir: &Path, exts: &[&str]) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .map(|e| e.expect("an entry").path())
        .filter(|p| {
            p.is_file()
                && p.extension()
                    .is_some_and(|x| exts.contains(&x.to_string_lossy().as_ref()))
        })
        .collect();
    out.sort();
    out
}

/// Every benign fixture that holds pickles: PyTorch checkpoints, NumPy pickles,
/// torch.distributed checkpoints, the pickle codec's valid pickles, and the pickles of
/// whole objects (`objects/`, when made).
fn benign() -> Vec<PathBuf> {
    let f = fixtures();
    let mut all = files(&f.join("pytorch"), &["pt", "pth"]);
    all.extend(files(&f.join("numpy_pickle"), &["pkl"]));
    all.extend(files(&f.join("pickle/valid"), &["pkl"]));
    all.extend(["world2", "world4"].map(|w| f.join("dcp").join(w)));
    let objects = [
        "pt", "pth", "pkl", "joblib", "sav", "ckpt", "pickle", "bin", "gz", "z",
    ];
    all.extend(files(&f.join("objects"), &objects));
    all
}

/// The files of the JSON document, by path.
fn by_path(doc: &serde_json::Value) -> Vec<(String, serde_json::Value)> {
    doc["files"]
        .as_array()
        .expect("files")
        .iter()
        .map(|f| (f["path"].as_str().expect("path").to_string(), f.clone()))
        .collect()
}

#[test]
fn benign_fixtures_are_never_dangerous() {
    let paths = benign();
    assert!(paths.len() > 30, "{paths:?}");
    let (code, doc) = scan_json(&paths);
    assert!(code < 2, "exit code {code}: {doc:#}");
    let own = |p: &str| !p.contains("/objects/");
    for (path, f) in by_path(&doc) {
        let verdict = f["verdict"].as_str().unwrap();
        assert_ne!(verdict, "dangerous", "{path}: {f:#}");
        if own(&path) {
            assert_ne!(verdict, "cannot verify", "{path}: {f:#}");
        }
    }
}

/// Whether the pinned torch loads each path with `torch.load(weights_only=True)`, and
/// whether its weights-only unpickler reads the first pickle of each file.
fn torch_accepts(paths: &[PathBuf]) -> serde_json::Value {
    let code = r#"
import json, os, sys, warnings
import torch, torch._weights_only_unpickler as wo
warnings.simplefilter("ignore")
out = {}
for p in sys.argv[1:]:
    r = {}
    try:
        torch.load(p, weights_only=True)
        r["torch_load"] = True
    except Exception:
        r["torch_load"] = False
    if os.path.isfile(p):
        try:
            with open(p, "rb") as f:
                wo.Unpickler(f, encoding="utf-8").load()
            r["unpickler"] = True
        except Exception:
            r["unpickler"] = False
    out[p] = r
print(json.dumps(out))
"#;
    let out = Command::new(python())
        .arg("-c")
        .arg(code)
        .args(paths)
        .output()
        .expect("running python");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("json")
}

#[test]
fn weights_only_agrees_with_torch() {
    let paths = benign();
    let (_, doc) = scan_json(&paths);
    let torch = torch_accepts(&paths);
    let mut checked = BTreeSet::new();
    for (path, f) in by_path(&doc) {
        let t = &torch[&path];
        let verdict = f["verdict"].as_str().unwrap();
        let safe = matches!(verdict, "data only" | "weights-only");
        if let Some(ours) = f["torch_weights_only"].as_bool() {
            // A PyTorch checkpoint: torch.load itself.
            let loads = t["torch_load"]
                .as_bool()
                .unwrap_or_else(|| panic!("{path}: {t}"));
            assert_eq!(ours, loads, "{path}: torch.load says {loads}: {f:#}");
            assert_eq!(safe, loads, "{path}: {verdict} but torch.load says {loads}");
            checked.insert(path.clone());
        } else if f["kind"] == "pickle" {
            // A pickle file: torch's weights-only unpickler on its first pickle.
            let reads = t["unpickler"]
                .as_bool()
                .unwrap_or_else(|| panic!("{path}: {t}"));
            let ours = f["pickles"][0]["torch_weights_only"].as_bool().unwrap();
            assert_eq!(ours, reads, "{path}: the unpickler says {reads}: {f:#}");
            if verdict == "weights-only" {
                assert!(reads, "{path}");
            }
            checked.insert(path.clone());
        }
    }
    // torch-made state-dict checkpoints are weights-only.
    for name in [
        "module_state_dict.pt",
        "all_dtypes.pt",
        "parameters.pt",
        "legacy.pt",
    ] {
        let p = fixtures().join("pytorch").join(name);
        let (_, doc) = scan_json(std::slice::from_ref(&p));
        assert_eq!(doc["verdict"], "weights-only", "{name}: {doc:#}");
    }
    assert!(checked.len() > 30, "{checked:?}");
}

/// The attack corpus: the top-level paths its manifest names.
fn corpus() -> Vec<PathBuf> {
    let dir = fixtures().join("scan");
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap();
    let tops: BTreeSet<String> = manifest
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            e["path"]
                .as_str()
                .unwrap()
                .split('/')
                .next()
                .unwrap()
                .to_string()
        })
        .collect();
    tops.into_iter().map(|t| dir.join(t)).collect()
}

#[test]
fn every_payload_is_dangerous() {
    let paths = corpus();
    assert!(paths.len() >= 60, "{}", paths.len());
    let (code, doc) = scan_json(&paths);
    assert_eq!(code, 2);
    for (path, f) in by_path(&doc) {
        assert_eq!(f["verdict"], "dangerous", "{path}: {f:#}");
    }
    for p in &paths {
        let (code, out) = tensorfmt(&[Path::new("scan"), p], None);
        assert_eq!(code, 2, "{}: {out}", p.display());
        assert!(out.contains("DANGEROUS"), "{}: {out}", p.display());
    }
}

#[test]
fn corpus_is_what_the_generator_writes() {
    let made = tempfile::tempdir().unwrap();
    let mut generator = Command::new(python());
    generator
        .arg(fixtures().join("scan/make.py"))
        .arg(made.path());
    let committed = fixtures().join("scan");
    assert_generator_writes(
        generator,
        made.path(),
        &committed,
        &["make.py", "dcp_metadata"],
    );
    for f in [".metadata", "__0_0.distcp"] {
        let a = std::fs::read(made.path().join("dcp_metadata").join(f)).unwrap();
        assert!(
            a == std::fs::read(committed.join("dcp_metadata").join(f)).unwrap(),
            "{f}"
        );
    }
}

#[test]
fn canary_is_never_created() {
    let dir = fixtures().join("scan");
    let canaries = [dir.join("canary.pkl"), dir.join("zip_canary.pt")];
    let cwd = tempfile::tempdir().unwrap();
    for c in &canaries {
        let (code, out) = tensorfmt(&[Path::new("scan"), c], Some(cwd.path()));
        assert_eq!(code, 2, "{out}");
        assert!(out.contains("builtins.exec"), "{out}");
        let _ = tensorfmt(&[Path::new("inspect"), c], Some(cwd.path()));
        let _ = tensorfmt(
            &[Path::new("inspect"), Path::new("--json"), c],
            Some(cwd.path()),
        );
    }
    assert!(!cwd.path().join("canary_created").exists());
    // The canaries are live: Python's own loaders create the file.
    let live = tempfile::tempdir().unwrap();
    let load = "import pickle, sys, torch\n\
                pickle.load(open(sys.argv[1], 'rb'))\n\
                torch.load(sys.argv[2], weights_only=False)";
    let status = Command::new(python())
        .arg("-c")
        .arg(load)
        .args(&canaries)
        .current_dir(live.path())
        .output()
        .expect("running python");
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    assert!(live.path().join("canary_created").exists());
}

#[test]
fn exit_codes() {
    let f = fixtures();
    let code = |p: &Path| tensorfmt(&[Path::new("scan"), p], None).0;
    assert_eq!(code(&f.join("pytorch/module_state_dict.pt")), 0);
    assert_eq!(code(&f.join("pickle/valid/sample_p4.pkl")), 0);
    assert_eq!(code(&f.join("numpy_pickle/p2_arrays.pkl")), 1);
    assert_eq!(code(&f.join("pickle/hostile/empty.pkl")), 2);
    assert_eq!(code(&f.join("no such file.pkl")), 2);
    // Usage errors are told apart from verdicts.
    assert_eq!(tensorfmt(&[Path::new("scan")], None).0, 64);
    assert_eq!(
        tensorfmt(&[Path::new("scan"), Path::new("--bogus")], None).0,
        64
    );
    assert_eq!(
        tensorfmt(&[Path::new("scan"), Path::new("--help")], None).0,
        0
    );
    // The worst file decides.
    let both = [
        Path::new("scan"),
        &f.join("pytorch/module_state_dict.pt"),
        &f.join("numpy_pickle/p2_arrays.pkl"),
    ];
    assert_eq!(tensorfmt(&both, None).0, 1);
}

#[test]
fn table_names_globals_and_offsets() {
    let p = fixtures().join("scan/stack_global_memo.pkl");
    let (code, out) = tensorfmt(&[Path::new("scan"), &p], None);
    assert_eq!(code, 2);
    assert!(out.contains(": dangerous (pickle, 1 pickle)"), "{out}");
    assert!(
        out.contains("global  os.system  x1  at 24  DANGEROUS"),
        "{out}"
    );
    assert!(
        out.contains("call    REDUCE os.system  x1  at 30  DANGEROUS"),
        "{out}"
    );
}
