//! Pickled NumPy arrays, built in (`formats/fmt/pickle.fmt`): `tensorfmt inspect --json
//! --sha256` on every fixture of `tests/fixtures/numpy_pickle` (`pickle.dump` at protocols
//! 2, 4 and 5, a Python 2 Detectron pickle) and on pickles Python makes afresh each run
//! gives what Python describes (`tfcheck.py describe`: `pickle.load(f, encoding='latin1')`);
//! those files are detected as `pickle` by content, and other files are not; every file of
//! the hostile corpus (`tests/fixtures/numpy_pickle/hostile`, written by
//! `make_hostile.py`) is refused with the error its `manifest.json` expects, naming the
//! file: never a panic, a hang, or an allocation out of proportion to the file.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use tensorfmt::runtime::hash::HashSink;
use tensorfmt::{OpenOptions, TensorFile};
use tensorfmt_tests::{
    alloc, assert_generator_writes, cli, corpus_files, fixtures, inspect_json, json, python,
    python_snippet, run_seed, tfcheck,
};

#[global_allocator]
static GLOBAL: alloc::Counting = alloc::Counting;

fn dir() -> PathBuf {
    fixtures().join("numpy_pickle")
}

fn hostile_dir() -> PathBuf {
    dir().join("hostile")
}

fn path_str(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// The `.pkl` fixtures made by the real tools, sorted.
fn fixture_files() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir())
        .expect("tests/fixtures/numpy_pickle exists")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "pkl"))
        .collect();
    v.sort();
    v
}

/// `inspect --json --sha256` of each of `paths` equals Python's description of it.
fn assert_described_alike(paths: &[&str], context: &str) {
    let described = tfcheck(&[&["describe"], paths].concat());
    let lines: Vec<&str> = described.lines().collect();
    assert_eq!(lines.len(), paths.len(), "{context}: {described}");
    for (p, line) in paths.iter().zip(lines) {
        assert_eq!(inspect_json(Path::new(p)), json(line), "{p} ({context})");
    }
}

#[test]
fn every_fixture_matches_python() {
    let files = fixture_files();
    assert!(files.len() >= 5, "only {} fixtures", files.len());
    let paths: Vec<&str> = files.iter().map(|p| path_str(p)).collect();
    assert_described_alike(&paths, "fixture");
    // Big-endian, Fortran, 0-d and empty arrays are among them.
    let d = inspect_json(&dir().join("p2_arrays.pkl"));
    let names: BTreeSet<&str> = d["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    for n in [
        "be_c16",
        "fortran_be",
        "scalar0d",
        "empty",
        "nested.conv.w",
        "seq.1.0",
    ] {
        assert!(names.contains(n), "p2_arrays.pkl lacks {n}: {names:?}");
    }
}

/// A NumPy scalar (`np.int64(42)`, pickled as `numpy._core.multiarray.scalar(dtype,
/// bytes)`) is shown as its number by `inspect --values`, in text and JSON, at every
/// protocol.
#[test]
fn numpy_scalars_are_shown_as_numbers() {
    for f in ["p2_arrays.pkl", "p4_arrays.pkl", "p5_arrays.pkl"] {
        let p = dir().join(f);
        let (code, text) = cli(&["inspect", "--values", path_str(&p)]);
        assert_eq!(code, ExitCode::SUCCESS, "{f}: {text}");
        assert!(text.contains("  step = 42\n"), "{f}: {text}");
        let (code, text) = cli(&["inspect", "--json", "--values", path_str(&p)]);
        assert_eq!(code, ExitCode::SUCCESS, "{f}: {text}");
        let v = json(&text);
        let step = v["values"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["name"] == "step")
            .unwrap_or_else(|| panic!("{f}: no step in {text}"));
        assert_eq!(step["value"], serde_json::json!(42), "{f}");
    }
}

#[test]
fn unseen_pickles_made_by_python_read_the_same() {
    let tmp = tempfile::tempdir().unwrap();
    let seed = run_seed();
    let listed = tfcheck(&["make-random-pickle", path_str(tmp.path()), &seed, "24"]);
    let paths: Vec<&str> = listed.lines().collect();
    assert_eq!(paths.len(), 24, "seed {seed}");
    assert_described_alike(&paths, &format!("seed {seed}"));
}

/// Pickles whose arrays NumPy reads by its own rules read as NumPy reads them (elements,
/// shape, name alike): a state's `is_fortran` of 7, -1 or `True` is Fortran order, a
/// state of 4 items is version 0, a byte order given as bytes (`b'>'`) holds, the
/// transposed arrays NumPy 2 pickles at protocol 5 (`order='K'` with `axis_order`) are
/// transposed; and arrays under keys that are not text are named by the key's `repr`,
/// two that would take one name told apart (`#2`).
#[test]
fn numpy_s_own_rules_and_every_key_read_as_python_reads_them() {
    let tmp = tempfile::tempdir().unwrap();
    let (ok, out) = python_snippet(
        r#"
import pickle, sys, numpy as np
from numpy._core.multiarray import _reconstruct
class R:
    def __init__(self, f, args, state=None): self.f, self.args, self.state = f, args, state
    def __reduce__(self):
        return (self.f, self.args) if self.state is None else (self.f, self.args, self.state)
def array(state): return R(_reconstruct, (np.ndarray, (0,), b'b'), state)
le, be = np.arange(12, dtype='<i4').tobytes(), np.arange(12, dtype='>i4').tobytes()
be_dt = R(np.dtype, ('i4', False, True), (3, b'>', None, None, None, -1, -1, 0))
x = np.arange(60, dtype='<f8').reshape(3, 4, 5)
files = {
  'fortran.pkl': ({'seven': array((1, (3, 4), np.dtype('<i4'), 7, le)),
                   'minus_one': array((1, (3, 4), np.dtype('<i4'), -1, le)),
                   'true': array((1, (3, 4), np.dtype('<i4'), True, le)),
                   'four_items': array(((3, 4), np.dtype('<i4'), 1, le)),
                   'bytes_order': array((1, (3, 4), be_dt, 1, be))}, 4),
  'transposed.pkl': ({'t': x.transpose(2, 0, 1), 'u': x.transpose(1, 0, 2)[:, ::-1].T,
                      'f': np.asfortranarray(x)}, 5),
  'keys.pkl': ({(1, 'x'): x[0], b'k': x[1], 1.5: x[2], None: x[0], 7: x[1], '7': x[2],
                frozenset({2}): x[0], (): x[1], "it's": {(0, 1): x[2]}}, 4),
}
for name, (obj, protocol) in files.items():
    with open(sys.argv[1] + '/' + name, 'wb') as f:
        pickle.dump(obj, f, protocol=protocol)
"#,
        &[path_str(tmp.path())],
    );
    assert!(ok, "{out}");
    let paths: Vec<String> = ["fortran.pkl", "transposed.pkl", "keys.pkl"]
        .iter()
        .map(|f| path_str(&tmp.path().join(f)).to_string())
        .collect();
    let paths: Vec<&str> = paths.iter().map(String::as_str).collect();
    assert_described_alike(&paths, "NumPy's rules and keys");
    let names: Vec<String> = inspect_json(&tmp.path().join("keys.pkl"))["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        names,
        [
            "(1, 'x')",
            "b'k'",
            "1.5",
            "None",
            "7",
            "7#2",
            "frozenset({2})",
            "()",
            "it's.(0, 1)"
        ]
    );
}

/// The format `TensorFile::open` detects for `path`, or the error.
fn detected(path: &Path) -> Result<String, String> {
    TensorFile::open(path)
        .map(|f| f.format().to_string())
        .map_err(|e| e.to_string())
}

#[test]
fn detected_by_content_and_claiming_nothing_else() {
    let tmp = tempfile::tempdir().unwrap();
    for f in fixture_files() {
        assert_eq!(detected(&f).as_deref(), Ok("pickle"), "{}", f.display());
        let renamed = tmp.path().join("weights.bin");
        std::fs::copy(&f, &renamed).unwrap();
        assert_eq!(
            detected(&renamed).as_deref(),
            Ok("pickle"),
            "{} renamed",
            f.display()
        );
    }
    for (f, format) in [
        ("pytorch/legacy.pt", "pytorch-legacy"),
        ("pytorch/numpy_values_legacy.pt", "pytorch-legacy"),
        ("pytorch/all_dtypes.pt", "pytorch"),
        ("safetensors/numpy_model.safetensors", "safetensors"),
    ] {
        assert_eq!(detected(&fixtures().join(f)).as_deref(), Ok(format), "{f}");
    }
    let npy = std::fs::read_dir(fixtures().join("npy"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "npy"))
        .expect("an npy fixture");
    assert_eq!(detected(&npy).as_deref(), Ok("npy"), "{}", npy.display());
    // Plain pickles of no array, `.pkl` and not, at protocols 2 and 4.
    for (name, protocol) in [("plain.pkl", 4), ("plain2.pkl", 2), ("plain.bin", 4)] {
        let p = tmp.path().join(name);
        let (ok, out) = python_snippet(
            "import pickle, sys\n\
             with open(sys.argv[1], 'wb') as f:\n    \
                 pickle.dump({'a': 1, 'lr': 0.1, 'names': ['x']}, f, protocol=int(sys.argv[2]))",
            &[path_str(&p), &protocol.to_string()],
        );
        assert!(ok, "{out}");
        let e = detected(&p).expect_err("a pickle of no array is no tensor file");
        assert!(
            e.contains("not a file of any known tensor format") && e.contains(name),
            "{name}: {e}"
        );
        let (code, _) = cli(&["inspect", path_str(&p)]);
        assert_eq!(code, ExitCode::from(1), "{name}");
    }
}

/// One entry of `hostile/manifest.json`.
struct Case {
    file: String,
    what: String,
    error: String,
    /// Whether the index alone refuses the file (else only reading its data does).
    index: bool,
    /// Refused only under `--weights-only` (a global outside the allowlist); read by
    /// default, the global an inert object.
    weights_only: bool,
    /// Read, its array a value and not a tensor: no tensor is listed.
    value: bool,
}

fn manifest() -> Vec<Case> {
    let text = std::fs::read_to_string(hostile_dir().join("manifest.json")).expect("manifest");
    let v = json(&text);
    let field = |e: &serde_json::Value, k: &str| -> String {
        e[k].as_str()
            .unwrap_or_else(|| panic!("manifest entry without a string '{k}': {e}"))
            .to_string()
    };
    v.as_array()
        .expect("manifest.json is a list")
        .iter()
        .map(|e| Case {
            file: field(e, "file"),
            what: field(e, "what"),
            error: field(e, "error"),
            index: e["index"]
                .as_bool()
                .expect("manifest entry without 'index'"),
            weights_only: e["weights_only"].as_bool().unwrap_or(false),
            value: e["value"].as_bool().unwrap_or(false),
        })
        .collect()
}

/// The most one allocation may take while reading a file of `size` bytes: a small
/// multiple of the file (the pickle machine's stack and values) and a few buffers;
/// whatever the file *declares* (lengths, shapes) must not count.
fn bound(size: usize) -> usize {
    64 * size + (1 << 16)
}

/// Wall-clock time one file may take (every way of reading it), generous for debug
/// builds on a loaded machine: a hang or a blow-up takes far longer.
const TIME_LIMIT: Duration = Duration::from_secs(10);

/// Opens `path` (as `pickle` when `named`) and, when `data`, hashes every tensor; the
/// error text, or `Err` saying it was accepted.
fn open_err(path: &Path, named: bool, data: bool, weights_only: bool) -> Result<String, String> {
    let mut options = OpenOptions {
        format: named.then(|| "pickle".to_string()),
        ..Default::default()
    };
    options.limits.weights_only = weights_only;
    let r = TensorFile::open_with(path, &options).and_then(|f| {
        if data {
            f.read_all(&mut HashSink::default())?;
        }
        Ok(f.tensors().len())
    });
    match r {
        Ok(n) => Err(format!("accepted ({n} tensors)")),
        Err(e) => Ok(e.to_string()),
    }
}

/// Everything wrong with how `case` is handled, as lines (empty when all is well).
fn check(case: &Case) -> Vec<String> {
    let path = hostile_dir().join(&case.file);
    let size = std::fs::metadata(&path).unwrap().len() as usize;
    let shown = path.display().to_string();
    if case.value {
        return value_case(case, &path);
    }
    let mut problems = Vec::new();
    let start = Instant::now();
    for (how, named, data) in [
        ("detected, index", false, false),
        ("detected, data", false, true),
        ("named, index", true, false),
        ("named, data", true, true),
    ] {
        let (got, largest) = alloc::armed(|| open_err(&path, named, data, case.weights_only));
        if case.weights_only {
            // Read by default: the global is an inert object, never called.
            if let Ok(msg) = open_err(&path, named, data, false) {
                problems.push(format!("{how}: refused without --weights-only: {msg}"));
            }
        }
        match got {
            Err(accepted) if data || case.index => problems.push(format!("{how}: {accepted}")),
            Err(_) => {}
            Ok(msg) if !data && !case.index => {
                problems.push(format!("{how}: the index refuses it: {msg}"))
            }
            Ok(msg) => {
                if !msg.contains(&case.file) {
                    problems.push(format!("{how}: the error does not name the file: {msg}"));
                }
                if !msg.replace(&shown, "").contains(&case.error) {
                    problems.push(format!("{how}: the error lacks {:?}: {msg}", case.error));
                }
            }
        }
        if largest > bound(size) {
            problems.push(format!(
                "{how}: one allocation of {largest} bytes for a {size}-byte file"
            ));
        }
    }
    let want = |refused: bool| {
        if refused {
            ExitCode::from(1)
        } else {
            ExitCode::SUCCESS
        }
    };
    let strict: &[&str] = if case.weights_only {
        &["--weights-only"]
    } else {
        &[]
    };
    let (code, out) = cli(&[&["inspect", path_str(&path)], strict].concat());
    if code != want(case.index) {
        problems.push(format!("inspect exits {code:?}: {out}"));
    }
    let (code, out) = cli(&[&["inspect", "--sha256", path_str(&path)], strict].concat());
    if code != want(true) {
        problems.push(format!("inspect --sha256 exits {code:?}: {out}"));
    }
    let took = start.elapsed();
    if took > TIME_LIMIT {
        problems.push(format!("took {took:?}"));
    }
    problems
        .into_iter()
        .map(|p| format!("{} ({}): {p}", case.file, case.what))
        .collect()
}

/// A case whose array is a value: every way of reading it succeeds and lists no tensor.
fn value_case(case: &Case, path: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    for (how, named, data) in [("detected, data", false, true), ("named, data", true, true)] {
        match open_err(path, named, data, false) {
            Err(accepted) if accepted.contains("(0 tensors)") => {}
            Err(accepted) => problems.push(format!("{how}: {accepted}, not 0 tensors")),
            Ok(msg) => problems.push(format!("{how}: refused: {msg}")),
        }
    }
    let (code, out) = cli(&["inspect", "--sha256", "--values", path_str(path)]);
    if code != ExitCode::SUCCESS || !out.contains("'w': numpy") {
        problems.push(format!("inspect exits {code:?}, w not a value: {out}"));
    }
    problems
        .into_iter()
        .map(|p| format!("{} ({}): {p}", case.file, case.what))
        .collect()
}

#[test]
fn every_hostile_pickle_is_refused_with_its_error() {
    let cases = manifest();
    assert!(cases.len() >= 25, "only {} cases", cases.len());
    let failures: Vec<String> = cases.iter().flat_map(check).collect();
    assert!(
        failures.is_empty(),
        "{} problems:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn manifest_lists_exactly_the_files_of_the_folder() {
    let cases = manifest();
    let listed: BTreeSet<String> = cases.iter().map(|c| c.file.clone()).collect();
    assert_eq!(listed.len(), cases.len(), "a file is listed twice");
    assert_eq!(corpus_files(&hostile_dir(), &[]), listed);
    for c in &cases {
        assert!(
            !c.error.is_empty() && !c.what.is_empty(),
            "{}: empty text",
            c.file
        );
    }
}

#[test]
fn committed_corpus_is_what_the_generator_writes() {
    let tmp = tempfile::tempdir().unwrap();
    let mut generator = Command::new(python());
    generator.arg(dir().join("make_hostile.py")).arg(tmp.path());
    assert_generator_writes(generator, tmp.path(), &hostile_dir(), &[]);
}
