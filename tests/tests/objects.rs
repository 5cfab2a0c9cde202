//! Pickles of whole objects, made by the real tools (`tests/fixtures/objects/`:
//! `torch.save(model)`, Ultralytics checkpoints, scikit-learn, joblib, users' classes,
//! `pickle.dump` of tensors, Lightning): every tensor tensorfmt lists, by name, dtype,
//! shape and SHA-256, equals what the unsafe load (`torch.load(weights_only=False)`,
//! `pickle.load`, `joblib.load`) gives, named by the rules of README.md (*Pickles of
//! whole objects*), as `expected.json` records them; converted, the state dicts load in
//! `torch.load(weights_only=True)`, safetensors and NumPy equal to it; and a pickle that
//! would create a file if it were run creates none.

use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::Value;
use tensorfmt::runtime::hash::{hex, tensor_sha256};
use tensorfmt_tests::{cli, convert, fixtures, json, python, tfcheck_objects};

/// Fixtures whose tensors tensorfmt does not list yet, and why (README.md, *Pickles of
/// whole objects*): read with `--format pickle`, they must open and list none, so that
/// support landing shows here.
const NOT_YET: &[(&str, &str)] = &[];

fn dir() -> PathBuf {
    fixtures().join("objects")
}

fn expected() -> serde_json::Map<String, Value> {
    let text = std::fs::read_to_string(dir().join("expected.json")).expect("expected.json");
    match json(&text) {
        Value::Object(m) => m,
        other => panic!("expected.json is not an object: {other}"),
    }
}

/// The tensors of a description as `(name, dtype, shape, sha256)` lines, in order.
fn lines(tensors: &Value) -> Vec<String> {
    tensors
        .as_array()
        .expect("a list of tensors")
        .iter()
        .map(|t| {
            format!(
                "{} {} {} {}",
                t["name"], t["dtype"], t["shape"], t["sha256"]
            )
        })
        .collect()
}

/// `tensors` with their names made unique as README.md says: the first keeps a name,
/// each later one takes it with `#2`, `#3`, ... (the first such name not taken).
fn unique(tensors: &Value) -> Value {
    let mut list = tensors.as_array().expect("a list of tensors").clone();
    let mut taken: std::collections::HashSet<String> = std::collections::HashSet::new();
    let names: Vec<String> = list
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect();
    let mut seen = std::collections::HashSet::new();
    let firsts: Vec<bool> = names.iter().map(|n| seen.insert(n.clone())).collect();
    taken.extend(names.iter().cloned());
    for (t, (name, first)) in list.iter_mut().zip(names.iter().zip(firsts)) {
        if first {
            continue;
        }
        let new = (2..)
            .map(|k| format!("{name}#{k}"))
            .find(|n| !taken.contains(n))
            .expect("a free name");
        taken.insert(new.clone());
        t["name"] = Value::String(new);
    }
    Value::Array(list)
}

/// What differs between two lists of tensor lines, for a message.
fn diff(got: &[String], want: &[String]) -> String {
    let missing: Vec<&String> = want.iter().filter(|w| !got.contains(w)).collect();
    let extra: Vec<&String> = got.iter().filter(|g| !want.contains(g)).collect();
    format!(
        "{} listed, {} expected; missing {:?}; not expected {:?}",
        got.len(),
        want.len(),
        missing.iter().take(5).collect::<Vec<_>>(),
        extra.iter().take(5).collect::<Vec<_>>()
    )
}

#[test]
fn every_tensor_equals_what_the_unsafe_load_gives() {
    let mut problems = Vec::new();
    let all = expected();
    assert!(all.len() >= 20, "only {} fixtures", all.len());
    for (file, want) in &all {
        let path = dir().join(file);
        if NOT_YET.iter().any(|(f, _)| f == file) {
            let p = path.to_str().unwrap();
            let (code, out) = cli(&["inspect", "--json", "--format", "pickle", p]);
            if code != ExitCode::SUCCESS || json(&out)["tensors"] != Value::Array(vec![]) {
                problems.push(format!("{file}: listed as not read yet, but: {out}"));
            }
            continue;
        }
        let (code, out) = cli(&["inspect", "--json", "--sha256", path.to_str().unwrap()]);
        if code != ExitCode::SUCCESS {
            problems.push(format!("{file}: inspect failed: {out}"));
            continue;
        }
        let (got, want) = (
            lines(&json(&out)["tensors"]),
            lines(&unique(&want["tensors"])),
        );
        if got != want {
            problems.push(format!("{file}: {}", diff(&got, &want)));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Loads each of `paths` with the real tool `how` (`tests/py/tfcheck_objects.py`, one
/// process for them all).
fn load(how: &str, paths: &[PathBuf]) -> Vec<Value> {
    let args: Vec<&str> = std::iter::once(how)
        .chain(paths.iter().map(|p| p.to_str().expect("utf-8 path")))
        .collect();
    tfcheck_objects(&args).lines().map(json).collect()
}

#[test]
fn converted_state_dicts_load_in_the_real_tools_unchanged() {
    let _ = python();
    let scratch = tempfile::tempdir().unwrap();
    let mut problems = Vec::new();
    for (ext, how) in [
        ("pt", "load-weights-only"),
        ("safetensors", "load-safetensors"),
        ("npz", "load-npz"),
    ] {
        let mut cases: Vec<(String, Vec<String>, PathBuf)> = Vec::new();
        for (file, want) in expected() {
            let not_yet = NOT_YET.iter().any(|(f, _)| *f == file);
            let want = lines(&want["tensors"]);
            // safetensors has no c128, npy no bf16.
            let complex = want.iter().any(|t| t.contains("\"c128\""));
            let bf16 = want.iter().any(|t| t.contains("\"bf16\""));
            let state_dict = expected()[&file]["state_dict"] == Value::Bool(true);
            let unstorable = (complex && ext == "safetensors") || (bf16 && ext == "npz");
            if not_yet || !state_dict || unstorable {
                continue;
            }
            let out = scratch.path().join(format!("{file}.{ext}"));
            convert(&dir().join(&file), &out, &[]);
            cases.push((file, want, out));
        }
        let outs: Vec<PathBuf> = cases.iter().map(|c| c.2.clone()).collect();
        for ((file, want, _), got) in cases.iter().zip(load(how, &outs)) {
            let mut got = lines(&got["tensors"]);
            let mut want = want.clone();
            if ext != "pt" {
                // safetensors sorts its tensors by name; compare as sets of lines.
                got.sort();
                want.sort();
            }
            if got != want {
                problems.push(format!("{file} as .{ext}: {}", diff(&got, &want)));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The parameters of a `torch.nn.Conv2d` or `Linear`.
#[derive(tensorfmt::StateDict)]
struct Affine {
    weight: tensorfmt::Tensor,
    bias: tensorfmt::Tensor,
}

/// A `torch.nn.BatchNorm2d`'s state dict.
#[derive(tensorfmt::StateDict)]
struct BatchNorm {
    weight: tensorfmt::Tensor,
    bias: tensorfmt::Tensor,
    running_mean: tensorfmt::Tensor,
    running_var: tensorfmt::Tensor,
    num_batches_tracked: i64,
}

/// The generator's `TinyNet`, loaded by the names of its `state_dict()` from
/// `torch.save(model)` (the model pickled whole, read inertly).
#[derive(tensorfmt::StateDict)]
struct TinyNet {
    offset: tensorfmt::Tensor,
    conv: Affine,
    bn: BatchNorm,
    body: Body,
    head: Conv,
}

/// `TinyNet.body`, an `nn.Sequential` whose layers 0 and 2 hold parameters.
#[derive(tensorfmt::StateDict)]
struct Body {
    #[state(rename = "0")]
    first: Affine,
    #[state(rename = "2")]
    last: Affine,
}

/// The first convolution of a YOLO checkpoint's model, under the checkpoint's own path.
#[derive(tensorfmt::StateDict)]
#[state(prefix = "model.model.0")]
struct YoloStem {
    conv: Conv,
    bn: BatchNorm,
}

/// A layer of weights only (YOLO's convolutions, a `Linear(bias=False)`).
#[derive(tensorfmt::StateDict)]
struct Conv {
    weight: tensorfmt::Tensor,
}

#[test]
fn a_struct_loads_from_the_whole_model_by_its_state_dict_names() {
    use tensorfmt::StateDict;
    let want = expected();
    let digest = |file: &str, name: &str| {
        want[file]["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .map(|t| t["sha256"].as_str().unwrap().to_string())
            .unwrap_or_else(|| panic!("{file} has no {name}"))
    };
    let sha = |t: &tensorfmt::Tensor| hex(&tensor_sha256(&t.info, t.data.as_bytes()).unwrap());
    for file in ["torch_model.pt", "torch_model_p4.pt"] {
        let net = TinyNet::load(dir().join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(sha(&net.conv.weight), digest(file, "conv.weight"), "{file}");
        assert_eq!(
            sha(&net.bn.running_var),
            digest(file, "bn.running_var"),
            "{file}"
        );
        assert_eq!(
            sha(&net.body.last.bias),
            digest(file, "body.2.bias"),
            "{file}"
        );
    }
    // The struct names a part of the checkpoint: the rest is reported as unexpected.
    let (stem, report) =
        YoloStem::load_with(dir().join("yolo.pt"), &tensorfmt::LoadOptions::partial()).unwrap();
    assert!(report.missing.is_empty(), "{:?}", report.missing);
    assert_eq!(
        sha(&stem.conv.weight),
        digest("yolo.pt", "model.model.0.conv.weight")
    );
    assert_eq!(
        sha(&stem.bn.running_mean),
        digest("yolo.pt", "model.model.0.bn.running_mean")
    );
}

#[test]
fn weights_only_refuses_what_torch_refuses_and_names_the_flag() {
    let path = dir().join("yolo.pt");
    let p = path.to_str().unwrap();
    let (code, _) = cli(&["inspect", "--weights-only", p]);
    assert_eq!(code, ExitCode::from(1));
    let mut options = tensorfmt::OpenOptions::default();
    options.limits.weights_only = true;
    let e = tensorfmt::TensorFile::open_with(&path, &options)
        .expect_err("refused")
        .to_string();
    assert!(e.contains("ultralytics.nn.tasks.DetectionModel"), "{e}");
    assert!(
        tensorfmt::TensorFile::open(&path).is_ok(),
        "read by default, inertly"
    );
}

/// Python that writes a pickle of `{"w": array, "x": os.system("touch CANARY")}` (as
/// `pickle.dumps` would write it, built by hand so that nothing runs) to a `.pkl`, and
/// the same object as a torch zip checkpoint's `data.pkl`.
const CANARY: &str = r#"
import io, pickle, sys, zipfile
import numpy as np
out, canary = sys.argv[1], sys.argv[2]

class Touch:
    def __reduce__(self):
        import os
        return (os.system, ("touch " + canary,))

data = pickle.dumps({"w": np.arange(3, dtype=np.float32), "x": Touch()}, protocol=2)
assert b"system" in data
open(out + "/canary.pkl", "wb").write(data)
with zipfile.ZipFile(out + "/canary.pt", "w") as z:
    z.writestr("canary/data.pkl", pickle.dumps({"x": Touch(), "epoch": 3}, protocol=2))
    z.writestr("canary/version", "3\n")
"#;

#[test]
fn a_canary_pickle_creates_nothing() {
    let scratch = tempfile::tempdir().unwrap();
    let canary = scratch.path().join("CANARY");
    let out = scratch.path().to_str().unwrap();
    let (ok, text) = tensorfmt_tests::python_snippet(CANARY, &[out, canary.to_str().unwrap()]);
    assert!(ok, "{text}");
    for file in ["canary.pkl", "canary.pt"] {
        let path = scratch.path().join(file);
        let p = path.to_str().unwrap();
        for args in [
            vec!["inspect", "--values", p],
            vec!["inspect", "--sha256", "--json", "--values", p],
        ] {
            let (code, text) = cli(&args);
            assert_eq!(code, ExitCode::SUCCESS, "{args:?}: {text}");
            assert!(
                text.contains("posix.system") || text.contains("os.system"),
                "{text}"
            );
        }
        let converted = scratch.path().join(format!("{file}.safetensors"));
        if file == "canary.pkl" {
            convert(&path, &converted, &[]);
        }
        assert!(!canary.exists(), "{file}: the canary was created");
    }
}
