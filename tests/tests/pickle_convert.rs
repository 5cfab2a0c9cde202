//! Writing `.pkl` files of NumPy arrays (`formats/fmt/pickle.fmt`'s write rule, the
//! generated writer over `pickle::Arrays`) through `tensorfmt convert`, against CPython,
//! NumPy and torch in the pinned environment: npz, safetensors and a PyTorch checkpoint
//! with nested dicts converted to `.pkl` at protocols 2 and 4 load with `pickle.load`
//! equal to their source (arrays equal in dtype, shape and values, nesting kept); such a
//! `.pkl` converted to PyTorch loads with `torch.load(weights_only=True)`; bf16 is refused
//! by name with nothing written; tensorfmt reads each `.pkl` back equal to its source.

use std::path::Path;
use std::process::ExitCode;

use tensorfmt_tests::{cli, convert, inspect_json, python_snippet};

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// Runs `code` with `args`, panicking with its output when it fails.
fn py(code: &str, args: &[&str]) -> String {
    let (ok, out) = python_snippet(code, args);
    assert!(ok, "python failed:\n{out}");
    out
}

/// Name → sha256 and dtype and shape of every tensor of `inspect --json --sha256`.
fn described(path: &Path) -> Vec<(String, String, String, String)> {
    let j = inspect_json(path);
    let mut v: Vec<_> = j["tensors"]
        .as_array()
        .expect("tensors")
        .iter()
        .map(|t| {
            (
                t["name"].to_string(),
                t["dtype"].to_string(),
                t["shape"].to_string(),
                t["sha256"].to_string(),
            )
        })
        .collect();
    v.sort();
    v
}

/// Makes the npz `argv[1]` with every NumPy dtype of the format (no complex ones when
/// `argv[2]` is `real`), big-endian, Fortran, 0-d and empty arrays.
const MAKE_NPZ: &str = r#"
import sys, numpy as np
r = np.random.default_rng(7)
arrays = {}
complex = [] if sys.argv[2] == "real" else ["c8", "c16"]
for d in ["f2", "f4", "f8", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8"] + complex:
    arrays["a_" + d] = (r.standard_normal((3, 4)) * 50).astype(d)
arrays["b1"] = r.standard_normal(5) > 0
arrays["big"] = np.arange(6, dtype=">i4").reshape(2, 3)
arrays["fortran"] = np.asfortranarray(np.arange(12, dtype="f4").reshape(3, 4))
arrays["scalar"] = np.array(2.5)
arrays["empty"] = np.zeros((0, 3), "f4")
np.savez(sys.argv[1], **arrays)
"#;

/// Compares the pickle `argv[1]` (loaded with `pickle.load`) with the npz `argv[2]`:
/// a dict of the same names, arrays equal in dtype, shape and values.
const SAME_AS_NPZ: &str = r#"
import sys, pickle, numpy as np
with open(sys.argv[1], "rb") as f:
    got = pickle.load(f)
want = np.load(sys.argv[2])
assert isinstance(got, dict), type(got)
assert sorted(got) == sorted(want.files), (sorted(got), want.files)
for k in want.files:
    a, b = got[k], want[k]
    assert isinstance(a, np.ndarray), (k, type(a))
    assert a.dtype.newbyteorder("=") == b.dtype.newbyteorder("=") and a.shape == b.shape, (k, a.dtype, b.dtype, a.shape, b.shape)
    assert np.array_equal(a, b), k
print("ok", len(want.files))
"#;

#[test]
fn npz_and_safetensors_convert_to_pickles_that_pickle_load_reads_equal() {
    let dir = tempfile::tempdir().unwrap();
    let npz = dir.path().join("a.npz");
    py(MAKE_NPZ, &[s(&npz), "all"]);
    for protocol in ["2", "4"] {
        let pkl = dir.path().join(format!("a{protocol}.pkl"));
        convert(&npz, &pkl, &["--pickle-protocol", protocol]);
        let out = py(SAME_AS_NPZ, &[s(&pkl), s(&npz)]);
        assert!(out.starts_with("ok"), "{out}");
        // Read back by tensorfmt: the same tensors and bytes as the source.
        assert_eq!(described(&pkl), described(&npz), "protocol {protocol}");
        // The header says the protocol: PROTO 2 or 4.
        let bytes = std::fs::read(&pkl).unwrap();
        assert_eq!(bytes[..2], [0x80, protocol.parse::<u8>().unwrap()]);
    }
    // safetensors (little-endian, C order, no complex dtypes) → pkl.
    let real = dir.path().join("real.npz");
    py(MAKE_NPZ, &[s(&real), "real"]);
    let st = dir.path().join("a.safetensors");
    convert(&real, &st, &[]);
    let pkl = dir.path().join("st.pkl");
    convert(&st, &pkl, &[]);
    let out = py(SAME_AS_NPZ, &[s(&pkl), s(&real)]);
    assert!(out.starts_with("ok"), "{out}");
    assert_eq!(described(&pkl), described(&st));
}

#[test]
fn a_checkpoint_with_nested_dicts_converts_to_a_pickle_and_back_to_torch() {
    let dir = tempfile::tempdir().unwrap();
    let pt = dir.path().join("ckpt.pt");
    py(
        r#"
import sys, torch
torch.manual_seed(3)
ckpt = {
    "model": {"layer": {"w": torch.randn(3, 4), "b": torch.arange(4, dtype=torch.int64)}},
    "optimizer": {"state": {0: {"exp_avg": torch.randn(2, 2, dtype=torch.float64)}}, "lr": 0.5},
    "step": 7,
}
torch.save(ckpt, sys.argv[1])
"#,
        &[s(&pt)],
    );
    for protocol in ["2", "4"] {
        let pkl = dir.path().join(format!("ckpt{protocol}.pkl"));
        convert(&pt, &pkl, &["--pickle-protocol", protocol]);
        let out = py(
            r#"
import sys, pickle, numpy as np, torch
with open(sys.argv[1], "rb") as f:
    got = pickle.load(f)
want = torch.load(sys.argv[2], weights_only=True)
def same(a, b, path):
    if isinstance(b, torch.Tensor):
        assert isinstance(a, np.ndarray), (path, type(a))
        assert a.shape == tuple(b.shape), path
        assert np.array_equal(a, b.numpy()), path
    elif isinstance(b, dict):
        assert isinstance(a, dict) and sorted(map(str, a)) == sorted(map(str, b)), (path, a, b)
        for k in b:
            same(a[k], b[k], path + "." + str(k))
    else:
        assert a == b, (path, a, b)
same(got, want, "")
print("ok")
"#,
            &[s(&pkl), s(&pt)],
        );
        assert_eq!(out.trim(), "ok");
        assert_eq!(described(&pkl), described(&pt), "protocol {protocol}");
        // The pickle back to PyTorch: torch.load(weights_only=True) reads the same tensors.
        let back = dir.path().join(format!("back{protocol}.pt"));
        convert(&pkl, &back, &[]);
        let out = py(
            r#"
import sys, torch
a = torch.load(sys.argv[1], weights_only=True)
b = torch.load(sys.argv[2], weights_only=True)
def flat(x, p, out):
    if isinstance(x, torch.Tensor):
        out[p] = x
    elif isinstance(x, dict):
        for k, v in x.items():
            flat(v, p + "." + str(k) if p else str(k), out)
    return out
fa, fb = flat(a, "", {}), flat(b, "", {})
assert sorted(fa) == sorted(fb), (sorted(fa), sorted(fb))
for k in fa:
    assert torch.equal(fa[k], fb[k]), k
print("ok")
"#,
            &[s(&back), s(&pt)],
        );
        assert_eq!(out.trim(), "ok");
    }
}

#[test]
fn bf16_is_refused_by_name_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let npz = dir.path().join("a.npz");
    py(
        "import sys, numpy as np; np.savez(sys.argv[1], w=np.ones((2, 2), 'f4'))",
        &[s(&npz)],
    );
    let st = dir.path().join("bf.safetensors");
    convert(&npz, &st, &["--dtype", "bf16"]);
    let pkl = dir.path().join("bf.pkl");
    let (code, _) = cli(&["convert", s(&st), s(&pkl)]);
    assert_ne!(code, ExitCode::SUCCESS);
    let err = tensorfmt::convert(&st, &pkl, &Default::default(), |_, _| {}).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("bf16") && text.contains("pickle"), "{text}");
    assert!(!pkl.exists(), "a file was left at the destination");
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left.len(), 2, "files left: {left:?}");
}
