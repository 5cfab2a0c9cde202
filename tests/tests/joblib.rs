//! joblib's files (`formats/src/joblib`): every joblib fixture of
//! `tests/fixtures/objects` (made by `generate.py` with joblib 1.6: uncompressed, each of
//! joblib's six compressors, pickle protocol 2, scikit-learn estimators, object and
//! string arrays) lists, under `inspect --json --sha256`, the tensors `joblib.load` gives
//! back (`expected.json`), and converts to an npz that NumPy loads to the same tensors;
//! a `.pkl` opens as `joblib` or `pickle` by what wrote it; an uncompressed file's
//! arrays are ranges of the file; a damaged or truncated file, and a compressed stream
//! past the budget of decompressed bytes, are refused naming the file, where and why,
//! before the memory is spent.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use tensorfmt::{DataLocation, ErrorKind, Limits, OpenOptions, TensorFile};
use tensorfmt_tests::{alloc, cli, fixtures, inspect_json, json, numpy_json, python_snippet};

#[global_allocator]
static GLOBAL: alloc::Counting = alloc::Counting;

fn dir() -> PathBuf {
    fixtures().join("objects")
}

fn path_str(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// `expected.json`'s entries of the files `joblib.dump` wrote.
fn expected() -> Vec<(String, serde_json::Value)> {
    let text = std::fs::read_to_string(dir().join("expected.json")).expect("expected.json");
    let all = json(&text);
    let files: Vec<(String, serde_json::Value)> = all
        .as_object()
        .expect("expected.json is an object")
        .iter()
        .filter(|(f, e)| {
            e["made_by"]
                .as_str()
                .is_some_and(|m| m.starts_with("joblib.dump"))
                && !f.is_empty()
        })
        .map(|(f, e)| (f.clone(), e.clone()))
        .collect();
    assert!(
        files.len() >= 10,
        "joblib files of expected.json: {files:?}"
    );
    files
}

/// The tensors of a description as (name, dtype, shape, sha256), in order.
fn tensors(d: &serde_json::Value) -> Vec<serde_json::Value> {
    d["tensors"]
        .as_array()
        .expect("tensors")
        .iter()
        .map(|t| {
            serde_json::json!({
                "name": t["name"], "dtype": t["dtype"], "shape": t["shape"], "sha256": t["sha256"],
            })
        })
        .collect()
}

#[test]
fn every_joblib_fixture_lists_what_joblib_load_gives() {
    for (file, want) in expected() {
        let got = inspect_json(&dir().join(&file));
        assert_eq!(got["format"], "joblib", "{file}");
        assert_eq!(tensors(&got), tensors(&want), "{file}");
    }
}

#[test]
fn converted_to_npz_numpy_loads_the_same_tensors() {
    let tmp = tempfile::tempdir().unwrap();
    for (file, want) in expected() {
        let out = tmp.path().join(format!("{file}.npz"));
        let (code, text) = cli(&["convert", path_str(&dir().join(&file)), path_str(&out)]);
        assert_eq!(code, ExitCode::SUCCESS, "{file}: {text}");
        assert_eq!(tensors(&numpy_json(&out)), tensors(&want), "{file}");
    }
}

#[test]
fn a_pkl_opens_as_what_wrote_it() {
    let tmp = tempfile::tempdir().unwrap();
    let format = |p: &Path| inspect_json(p)["format"].as_str().unwrap().to_string();
    // pickle.dump and joblib.dump of the same estimators; NumPy arrays pickled alone.
    assert_eq!(format(&dir().join("sklearn.pkl")), "pickle");
    assert_eq!(format(&dir().join("joblib_p2.pkl")), "joblib");
    let numpy = fixtures().join("numpy_pickle/p4_arrays.pkl");
    assert_eq!(format(&numpy), "pickle");
    // A compressed joblib file under `.pkl` and `.sav`, and one under no extension.
    for name in ["zlib.pkl", "xz.sav", "lz4"] {
        let p = tmp.path().join(name);
        let from = if name == "lz4" {
            "joblib_lz4.joblib"
        } else {
            "joblib_zlib.joblib"
        };
        std::fs::copy(dir().join(from), &p).unwrap();
        assert_eq!(format(&p), "joblib", "{name}");
    }
    // `--weights-only` reads arrays alone, and refuses the estimators' classes.
    let plain = dir().join("joblib_plain.joblib");
    let (code, text) = cli(&["inspect", "--weights-only", path_str(&plain)]);
    assert_eq!(code, ExitCode::SUCCESS, "{text}");
    let sk = dir().join("sklearn.joblib");
    let (code, text) = cli(&["inspect", "--weights-only", path_str(&sk)]);
    assert_ne!(code, ExitCode::SUCCESS, "{text}");
}

#[test]
fn arrays_are_ranges_of_the_file_or_of_the_inflated_stream() {
    let plain = TensorFile::open(dir().join("joblib_plain.joblib")).unwrap();
    assert!(!plain.tensors().is_empty());
    for t in plain.tensors() {
        match &t.location {
            // joblib 1.2 and later align each array's data to 16 bytes of the file.
            DataLocation::Range { offset, .. } => assert_eq!(offset % 16, 0, "{}", t.name),
            other => panic!("{}: {other:?}", t.name),
        }
    }
    let zlib = TensorFile::open(dir().join("joblib_zlib.joblib")).unwrap();
    for t in zlib.tensors() {
        assert!(
            matches!(t.location, DataLocation::Encoded { .. }),
            "{}",
            t.name
        );
    }
    // Values and objects beside the arrays: the estimators, inert.
    let (code, text) = cli(&[
        "inspect",
        "--values",
        path_str(&dir().join("sklearn.joblib")),
    ]);
    assert_eq!(code, ExitCode::SUCCESS, "{text}");
    assert!(text.contains("sklearn."), "{text}");
}

fn open_err(path: &Path, limits: Limits) -> tensorfmt::Error {
    let options = OpenOptions {
        format: Some("joblib".into()),
        limits,
        ..Default::default()
    };
    match TensorFile::open_with(path, &options) {
        Ok(f) => panic!("{} opened: {:?}", path.display(), f.tensors().len()),
        Err(e) => e,
    }
}

#[test]
fn damaged_files_are_refused_naming_where() {
    let tmp = tempfile::tempdir().unwrap();
    // Cut inside the data of the first array (past the first wrapper's BUILD).
    let plain = std::fs::read(dir().join("joblib_plain.joblib")).unwrap();
    let cut = tmp.path().join("cut.joblib");
    let first = TensorFile::open(dir().join("joblib_plain.joblib")).unwrap();
    let DataLocation::Range { offset, .. } = first.tensors()[0].location else {
        panic!("a range")
    };
    std::fs::write(&cut, &plain[..offset as usize + 4]).unwrap();
    let e = open_err(&cut, Limits::default()).to_string();
    assert!(e.contains("cut.joblib") && e.contains("byte"), "{e}");
    // A file of joblib before 0.10: its arrays are `.npy` files beside it.
    let legacy = tmp.path().join("legacy.pkl");
    let bytes = b"\x80\x02}q\x00X\x01\x00\x00\x00aq\x01cjoblib.numpy_pickle_compat\nNDArrayWrapper\nq\x02)\x81q\x03}q\x04X\x08\x00\x00\x00filenameq\x05X\x05\x00\x00\x00x.npyq\x06sbs.";
    std::fs::write(&legacy, bytes).unwrap();
    let e = open_err(&legacy, Limits::default()).to_string();
    assert!(
        e.contains("legacy.pkl") && e.contains("before 0.10") && e.contains("'a'"),
        "{e}"
    );
    // Each compressor's stream cut short.
    for c in ["zlib", "gzip", "bz2", "lzma", "xz", "lz4"] {
        let z = std::fs::read(dir().join(format!("joblib_{c}.joblib"))).unwrap();
        let p = tmp.path().join(format!("{c}.joblib"));
        std::fs::write(&p, &z[..z.len() - 7]).unwrap();
        let e = open_err(&p, Limits::default());
        let text = e.to_string();
        assert!(
            text.contains(&format!("{c}.joblib")) && text.contains(c) && text.contains("byte"),
            "{c}: {text}"
        );
    }
}

#[test]
fn a_stream_past_the_inflate_budget_is_refused_before_the_memory_is_spent() {
    let tmp = tempfile::tempdir().unwrap();
    let bomb = tmp.path().join("bomb.joblib");
    // 256 MiB of zeros in one zlib stream (about 250 KB), as `compress=3` writes.
    let (ok, out) = python_snippet(
        "import sys, zlib\n\
         c = zlib.compressobj(3)\n\
         with open(sys.argv[1], 'wb') as f:\n\
         \x20   for _ in range(256):\n\
         \x20       f.write(c.compress(bytes(1 << 20)))\n\
         \x20   f.write(c.flush())\n",
        &[path_str(&bomb)],
    );
    assert!(ok, "{out}");
    let limits = Limits {
        max_inflated_bytes: Some(16 << 20),
        ..Limits::default()
    };
    let (e, peak) = alloc::peak(|| open_err(&bomb, limits));
    assert!(
        matches!(e.kind, ErrorKind::Limit { limit, .. } if limit == 16 << 20),
        "{e}"
    );
    let text = e.to_string();
    assert!(
        text.contains("bomb.joblib") && text.contains("--max-inflated-bytes"),
        "{text}"
    );
    assert!(peak < 20 << 20, "held {peak} bytes");
    // The command line refuses it too (its error goes to stderr).
    let (code, _) = cli(&[
        "inspect",
        "--max-inflated-bytes",
        "1000000",
        path_str(&bomb),
    ]);
    assert_eq!(code, ExitCode::from(1));
}
