//! `#[derive(StateDict)]`: a small transformer's struct loaded from the files torch,
//! safetensors, NumPy and torch.onnx made of the same weights
//! (tests/fixtures/state_dict/generate.py), the load report as `load_state_dict` gives
//! it, and the struct saved back and read by torch, safetensors and NumPy.

use std::collections::BTreeMap;
use std::path::PathBuf;

use tensorfmt::runtime::hash::{hex, tensor_sha256};
use tensorfmt::state::Key;
use tensorfmt::{DType, LoadOptions, SaveOptions, StateDict, Tensor};
use tensorfmt_tests::{fixtures, python_snippet};

#[derive(StateDict, Clone)]
struct Linear {
    weight: Tensor,
    bias: Tensor,
}

#[derive(StateDict, Clone)]
struct LayerNorm {
    weight: Tensor,
    bias: Tensor,
}

#[derive(StateDict, Clone)]
struct Embedding {
    weight: Tensor,
}

#[derive(StateDict, Clone)]
struct Attention {
    qkv: Linear,
    proj: Linear,
}

#[derive(StateDict, Clone)]
struct Mlp {
    fc: Linear,
    out: Linear,
}

#[derive(StateDict, Clone)]
struct Block {
    ln1: LayerNorm,
    attn: Attention,
    ln2: LayerNorm,
    mlp: Mlp,
}

#[derive(StateDict, Clone)]
struct Tiny {
    embed: Embedding,
    layers: Vec<Block>,
    norm: LayerNorm,
}

/// `torch.save({"model": state_dict, "epoch": 7, "best_loss": 0.25})`.
#[derive(StateDict)]
struct Checkpoint {
    model: Tiny,
    epoch: u64,
    best_loss: f64,
}

/// The weights at the top level with the counter safetensors keeps as `__metadata__`.
#[derive(StateDict)]
struct WithEpoch {
    #[state(flatten)]
    model: Tiny,
    epoch: u64,
}

fn dir() -> PathBuf {
    fixtures().join("state_dict")
}

/// Every tensor of `value` by key: (dtype, shape, SHA-256), as expected.json has them.
fn digests<T: StateDict>(value: &T) -> BTreeMap<String, (String, Vec<u64>, String)> {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("all.safetensors");
    value.save(&path, None).unwrap();
    let file = tensorfmt::TensorFile::open(&path).unwrap();
    let mut out = BTreeMap::new();
    for info in file.tensors() {
        let t = file.load_info(info).unwrap();
        let sha = hex(&tensor_sha256(&t.info, t.data.as_bytes()).unwrap());
        out.insert(
            info.name.clone(),
            (info.dtype.to_string(), info.shape.clone(), sha),
        );
    }
    out
}

fn expected() -> BTreeMap<String, (String, Vec<u64>, String)> {
    let text = std::fs::read_to_string(dir().join("expected.json")).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    json["tensors"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| {
            let dtype = match v["dtype"].as_str().unwrap() {
                "float32" => "f32",
                other => panic!("unexpected dtype {other}"),
            };
            let shape = v["shape"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_u64().unwrap())
                .collect();
            (
                k.clone(),
                (
                    dtype.to_string(),
                    shape,
                    v["sha256"].as_str().unwrap().to_string(),
                ),
            )
        })
        .collect()
}

/// The keys of `model.state_dict()`, in its order.
fn torch_order() -> Vec<String> {
    let text = std::fs::read_to_string(dir().join("expected.json")).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    json["tensors"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect()
}

#[test]
fn the_struct_loads_the_same_weights_from_every_format_the_real_tools_wrote() {
    let want = expected();
    assert_eq!(want.len(), 1 + 2 * 12 + 2, "embed, 2 blocks of 12, norm");
    for file in ["tiny.pt", "tiny.safetensors", "tiny.npz", "tiny.onnx"] {
        let path = dir().join(file);
        // The ONNX model holds the graph's constants beside the parameters: a partial
        // load, whose unexpected keys are those and only those.
        let (model, report) = if file.ends_with(".onnx") {
            Tiny::load_with(&path, &LoadOptions::partial()).unwrap()
        } else {
            (
                Tiny::load(&path).unwrap_or_else(|e| panic!("{file}: {e}")),
                Default::default(),
            )
        };
        assert!(
            report.missing.is_empty() && report.mismatched.is_empty(),
            "{file}: {report}"
        );
        for name in &report.unexpected {
            assert!(
                !want.contains_key(name),
                "{file}: a parameter left unexpected: {name}"
            );
        }
        assert_eq!(model.layers.len(), 2, "{file}");
        assert_eq!(digests(&model), want, "{file}: the struct's tensors");
        let keys = model.keys().unwrap();
        assert_eq!(
            keys,
            torch_order(),
            "{file}: the struct's keys in state_dict()'s order"
        );
    }
    // Bytes stored plain are views of the file's map, not copies.
    let model = Tiny::load(dir().join("tiny.safetensors")).unwrap();
    assert!(model.embed.weight.data.is_mapped());
    assert_eq!(model.embed.weight.info.name, "embed.weight");
}

#[test]
fn sharded_and_distributed_checkpoints_load_as_one_file() {
    let tmp = tempfile::tempdir().unwrap();
    // Hugging Face shards of at most 2 KB, and a torch.distributed checkpoint of two
    // ranks, both written from the torch checkpoint.
    let shards = tmp.path().join("shards");
    let options = tensorfmt::ConvertOptions {
        max_shard_size: Some(2000),
        ..Default::default()
    };
    let summary = tensorfmt::convert(dir().join("tiny.pt"), &shards, &options, |_, _| {});
    summary.unwrap_or_else(|e| panic!("{e}"));
    let dcp = tmp.path().join("dcp");
    let options = tensorfmt::ConvertOptions {
        world_size: Some(2),
        ..Default::default()
    };
    tensorfmt::convert(dir().join("tiny.pt"), &dcp, &options, |_, _| {}).unwrap();
    for path in [&shards, &dcp] {
        let file = tensorfmt::TensorFile::open(path).unwrap();
        if path == &shards {
            assert!(file.shards().unwrap().len() > 2, "{path:?}");
        }
        let model = Tiny::load(path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
        assert_eq!(digests(&model), expected(), "{path:?}");
    }
}

#[test]
fn a_checkpoint_of_nested_dicts_and_values_and_a_prefix_map() {
    let path = dir().join("tiny_checkpoint.pt");
    let ckpt = Checkpoint::load(&path).unwrap();
    assert_eq!((ckpt.epoch, ckpt.best_loss), (7, 0.25));
    assert_eq!(digests(&ckpt.model), expected());

    // The state dict under `model.` read as the top level's: the counters are values,
    // never unexpected.
    let options = LoadOptions::default().map_prefix("model.", "");
    let (tiny, report) = Tiny::load_with(&path, &options).unwrap();
    assert!(report.is_exact(), "{report}");
    assert_eq!(digests(&tiny), expected());
    // Without the map, every key is missing and every tensor unexpected.
    let err = Tiny::load(&path).err().unwrap().to_string();
    assert!(err.contains("missing keys: \"embed.weight\""), "{err}");
    assert!(
        err.contains("unexpected keys: \"model.embed.weight\""),
        "{err}"
    );
    assert!(err.contains("LoadOptions::map_prefix"), "{err}");

    // safetensors keeps the counter as text in `__metadata__`.
    let st = WithEpoch::load(dir().join("tiny.safetensors")).unwrap();
    assert_eq!(st.epoch, 7);
    // npz has no values: the counter is missing.
    let err = WithEpoch::load(dir().join("tiny.npz"))
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("missing keys: \"epoch\""), "{err}");
}

#[test]
fn missing_and_unexpected_keys_are_reported_strict_and_partial() {
    let bad = dir().join("tiny_missing_extra.pt");
    // Strict (the default): an error naming both.
    #[derive(StateDict)]
    struct TwoLayers {
        embed: Embedding,
        layers: [Block; 2],
        norm: LayerNorm,
    }
    let err = TwoLayers::load(&bad).err().unwrap().to_string();
    assert!(err.contains("tiny_missing_extra.pt"), "{err}");
    assert!(
        err.ends_with(
            "missing keys: \"layers.1.mlp.fc.bias\"\nunexpected keys: \"layers.2.attn.qkv.weight\""
        ),
        "{err}"
    );
    // A `Vec` takes the entries the file has: a third block, with one tensor of twelve.
    let err = Tiny::load(&bad).err().unwrap().to_string();
    assert!(
        err.contains("missing keys: \"layers.1.mlp.fc.bias\", \"layers.2.ln1.weight\""),
        "{err}"
    );

    // Partial, into an existing value: the report, and the missing tensor keeps its value.
    let mut model = Tiny::load(dir().join("tiny.npz")).unwrap();
    let kept = model.layers[1].mlp.fc.bias.to_vec::<f32>().unwrap();
    let before = model.layers[0].attn.qkv.weight.to_vec::<f32>().unwrap();
    model.layers[0].attn.qkv.weight = Tensor::from_slice("w", &[24, 8], &[0f32; 24 * 8]).unwrap();
    let report = model.update(&bad, &LoadOptions::partial()).unwrap();
    assert_eq!(report.missing, ["layers.1.mlp.fc.bias"]);
    assert_eq!(report.unexpected, ["layers.2.attn.qkv.weight"]);
    assert!(report.mismatched.is_empty());
    assert_eq!(model.layers[1].mlp.fc.bias.to_vec::<f32>().unwrap(), kept);
    assert_eq!(
        model.layers[0].attn.qkv.weight.to_vec::<f32>().unwrap(),
        before,
        "loaded"
    );
    assert_eq!(
        report.to_string(),
        "missing keys: \"layers.1.mlp.fc.bias\"\nunexpected keys: \"layers.2.attn.qkv.weight\""
    );

    // Strict into an existing value: the same error.
    let err = model
        .update(&bad, &LoadOptions::default())
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("missing keys: \"layers.1.mlp.fc.bias\""),
        "{err}"
    );

    // A fresh partial load cannot build the struct without the key.
    let err = Tiny::load_with(&bad, &LoadOptions::partial())
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("cannot be built without its missing keys"),
        "{err}"
    );

    // An optional field is no missing key.
    #[derive(StateDict)]
    struct WithOptional {
        #[state(flatten)]
        model: Tiny,
        head: Option<Linear>,
    }
    let m = WithOptional::load(dir().join("tiny.pt")).unwrap();
    assert!(m.head.is_none());
}

#[test]
fn shapes_and_dtypes_are_checked_and_converted_only_when_asked() {
    let tmp = tempfile::tempdir().unwrap();
    let mut model = Tiny::load(dir().join("tiny.pt")).unwrap();
    let mut other = model.clone();
    other.norm.weight = Tensor::from_slice("", &[4], &[1f32; 4]).unwrap();
    other.norm.bias = Tensor::from_slice("", &[8], &[2f64; 8]).unwrap();
    let path = tmp.path().join("other.npz");
    other.save(&path, None).unwrap();

    let err = model
        .update(&path, &LoadOptions::partial())
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains(
            "mismatch for \"norm.weight\": the file has shape [4], the struct expects shape [8]"
        ),
        "{err}"
    );
    assert!(
        err.contains("mismatch for \"norm.bias\": the file has f64, the struct expects f32"),
        "{err}"
    );

    other.norm.weight = model.norm.weight.clone();
    other.save(&path, None).unwrap();
    let options = LoadOptions {
        convert_dtype: true,
        ..Default::default()
    };
    let report = model.update(&path, &options).unwrap();
    assert_eq!(report.converted, ["norm.bias"]);
    assert_eq!(model.norm.bias.info.dtype, DType::F32);
    assert_eq!(model.norm.bias.to_vec::<f32>().unwrap(), [2f32; 8]);
}

#[test]
fn the_struct_saved_as_pytorch_loads_in_torch_as_the_same_nested_state_dict() {
    let tmp = tempfile::tempdir().unwrap();
    let ckpt = Checkpoint::load(dir().join("tiny_checkpoint.pt")).unwrap();
    let nested = tmp.path().join("nested.pt");
    ckpt.save(&nested, None).unwrap();
    let flat = tmp.path().join("flat.pt");
    let options = SaveOptions {
        nested: false,
        ..Default::default()
    };
    ckpt.model.save_with(&flat, &options).unwrap();

    let code = r#"
import sys, torch
nested = torch.load(sys.argv[1], weights_only=True)
flat = torch.load(sys.argv[2], weights_only=True)
sd = torch.load(sys.argv[3], weights_only=True)
assert sorted(nested) == ["best_loss", "epoch", "model"], sorted(nested)
assert nested["epoch"] == 7 and nested["best_loss"] == 0.25
m = nested["model"]
assert isinstance(m["layers"], list) and len(m["layers"]) == 2, type(m["layers"])
def walk(node, path, out):
    if isinstance(node, torch.Tensor):
        out[path] = node
    elif isinstance(node, dict):
        for k, v in node.items():
            walk(v, f"{path}.{k}" if path else k, out)
    else:
        for i, v in enumerate(node):
            walk(v, f"{path}.{i}", out)
    return out
got = walk(m, "", {})
assert list(got) == list(sd), (list(got), list(sd))
assert all(torch.equal(got[k], sd[k]) for k in sd)
# The flat save is what state_dict() gives: the keys in order, load_state_dict takes it.
assert list(flat) == list(sd)
assert all(torch.equal(flat[k], sd[k]) for k in sd)
print("ok")
"#;
    let sd = dir().join("tiny.pt");
    let (ok, out) = python_snippet(
        code,
        &[
            nested.to_str().unwrap(),
            flat.to_str().unwrap(),
            sd.to_str().unwrap(),
        ],
    );
    assert!(ok && out.trim_end().ends_with("ok"), "{out}");

    // And back: the nested checkpoint loads into the struct.
    let again = Checkpoint::load(&nested).unwrap();
    assert_eq!(digests(&again.model), expected());
    assert_eq!(again.epoch, 7);
}

/// `(name, sha256)` of each tensor in a description the Python side printed (one JSON
/// object per line, each with `tensors`).
fn described(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .flat_map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["tensors"].as_array().unwrap().clone()
        })
        .map(|t| {
            let name = t["name"].as_str().unwrap().to_string();
            (name, t["sha256"].as_str().unwrap().to_string())
        })
        .collect()
}

#[test]
fn the_struct_saved_as_onnx_and_lmdb_reads_in_onnx_and_lmdb() {
    let tmp = tempfile::tempdir().unwrap();
    let model = Tiny::load(dir().join("tiny.pt")).unwrap();
    let want: BTreeMap<String, String> = expected()
        .into_iter()
        .map(|(k, (_, _, sha))| (k, sha))
        .collect();
    // ONNX initializers, read by onnx.load.
    let onnx = tmp.path().join("tiny.onnx");
    model.save(&onnx, None).unwrap();
    let text = tensorfmt_tests::tfcheck_onnx(&["describe", onnx.to_str().unwrap()]);
    assert_eq!(described(&text), want, "onnx");
    // A Caffe2 LMDB database, read by the lmdb package and protobuf.
    let lmdb = tmp.path().join("tiny.lmdb");
    model.save(&lmdb, Some("caffe2-lmdb")).unwrap();
    let text = tensorfmt_tests::tfcheck_caffe2(&["describe", "lmdb", lmdb.to_str().unwrap()]);
    assert_eq!(described(&text), want, "lmdb");
    // And back into the struct.
    for path in [&onnx, &lmdb] {
        assert_eq!(digests(&Tiny::load(path).unwrap()), expected(), "{path:?}");
    }
}

#[test]
fn values_go_where_the_format_can_hold_them() {
    let tmp = tempfile::tempdir().unwrap();
    let st = WithEpoch::load(dir().join("tiny.safetensors")).unwrap();
    let s = tmp.path().join("w.safetensors");
    st.save(&s, None).unwrap();
    let npz = tmp.path().join("w.npz");
    st.save(&npz, None).unwrap();
    let code = r#"
import sys, numpy as np
from safetensors import safe_open
with safe_open(sys.argv[1], "np") as f:
    assert f.metadata() == {"epoch": "7"}, f.metadata()
    assert "layers.1.mlp.out.bias" in f.keys()
z = np.load(sys.argv[2])
assert z["epoch"].shape == () and z["epoch"].dtype == np.int64 and int(z["epoch"]) == 7
print("ok")
"#;
    let (ok, out) = python_snippet(code, &[s.to_str().unwrap(), npz.to_str().unwrap()]);
    assert!(ok && out.trim_end().ends_with("ok"), "{out}");
    // Both load back, the npz's counter from its 0-d tensor.
    assert_eq!(WithEpoch::load(&s).unwrap().epoch, 7);
    assert_eq!(WithEpoch::load(&npz).unwrap().epoch, 7);

    // Text has no place in a format of tensors alone.
    #[derive(StateDict)]
    struct Named {
        w: Tensor,
        name: String,
    }
    let n = Named {
        w: Tensor::from_slice("", &[1], &[1f32]).unwrap(),
        name: "tiny".into(),
    };
    let err = n
        .save(tmp.path().join("n.npz"), None)
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("the value \"name\""), "{err}");
    assert!(!tmp.path().join("n.npz").exists());
    n.save(tmp.path().join("n.pt"), None).unwrap();
    assert_eq!(Named::load(tmp.path().join("n.pt")).unwrap().name, "tiny");
}

#[test]
fn keys_of_renamed_flattened_skipped_and_prefixed_fields() {
    #[derive(StateDict)]
    #[state(prefix = "model")]
    struct Outer {
        #[state(rename = "self_attn.o")]
        attn: Option<Tensor>,
        #[state(skip)]
        scratch: Vec<u8>,
        experts: [Option<Tensor>; 2],
        by_name: BTreeMap<String, Tensor>,
    }
    let t = || Some(Tensor::from_slice("", &[1], &[0f32]).unwrap());
    let mut by_name = BTreeMap::new();
    by_name.insert("up".to_string(), t().unwrap());
    let o = Outer {
        attn: t(),
        scratch: vec![1],
        experts: [t(), None],
        by_name,
    };
    assert_eq!(
        o.keys().unwrap(),
        ["model.self_attn.o", "model.experts.0", "model.by_name.up"]
    );
    assert_eq!(Key::root().field("a.b").index(3).name(), "a.b.3");
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("o.safetensors");
    o.save(&p, None).unwrap();
    let back = Outer::load(&p).unwrap();
    assert!(back.attn.is_some() && back.experts[0].is_some() && back.experts[1].is_none());
    assert_eq!(back.by_name.keys().collect::<Vec<_>>(), ["up"]);
    assert!(back.scratch.is_empty());
}

#[test]
fn files_built_to_hurt_give_errors_not_panics() {
    // A struct that asks for tensors, values and maps of whatever the file holds.
    #[derive(StateDict)]
    struct Probe {
        #[state(rename = "model")]
        model: Option<BTreeMap<String, Tensor>>,
        embed: Option<Embedding>,
        layers: Vec<Block>,
        epoch: Option<u64>,
        #[state(flatten)]
        rest: BTreeMap<String, Tensor>,
    }
    let root = tensorfmt_tests::fixtures().join("hostile");
    let mut probed = 0;
    for kind in ["inputs", "kv", "pickle", "views", "zip"] {
        for name in tensorfmt_tests::corpus_files(&root.join(kind), &[]) {
            let path = root.join(kind).join(&name);
            if name.ends_with(".py") || name.ends_with(".md") || name.ends_with(".txt") {
                continue;
            }
            let started = std::time::Instant::now();
            let outcome = std::panic::catch_unwind(|| {
                Probe::load_with(&path, &LoadOptions::partial()).map(|(_, r)| r)
            });
            assert!(outcome.is_ok(), "{kind}/{name}: a panic");
            assert!(
                started.elapsed() < std::time::Duration::from_secs(20),
                "{kind}/{name}: {:?}",
                started.elapsed()
            );
            probed += 1;
        }
    }
    assert!(probed >= 50, "{probed} files probed");
}
