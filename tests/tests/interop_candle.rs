//! The `candle` feature against files the real tools made: a struct of candle tensors
//! loaded from a torch checkpoint holds what candle's own safetensors loader reads from
//! the safetensors file of the same weights; candle tensors saved as PyTorch load in torch
//! as the same values, dtypes included.

use tensorfmt::candle_core::{self, DType as CDType, Device};
use tensorfmt::{candle as tc, LoadOptions, StateDict, TensorFile};
use tensorfmt_tests::{fixtures, python_snippet};

#[derive(StateDict)]
struct Linear {
    weight: candle_core::Tensor,
    bias: candle_core::Tensor,
}

#[derive(StateDict)]
struct Attention {
    qkv: Linear,
    proj: Linear,
}

#[derive(StateDict)]
struct Block {
    attn: Attention,
}

#[derive(StateDict)]
struct Partial {
    layers: Vec<Block>,
}

fn same(a: &candle_core::Tensor, b: &candle_core::Tensor) {
    assert_eq!(a.dims(), b.dims());
    assert_eq!(a.dtype(), b.dtype());
    let (a, b) = (
        a.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
        b.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
    );
    assert_eq!(a, b);
}

#[test]
fn a_struct_of_candle_tensors_holds_what_candle_reads_itself() {
    let dir = fixtures().join("state_dict");
    let theirs =
        candle_core::safetensors::load(dir.join("tiny.safetensors"), &Device::Cpu).unwrap();
    let (ours, report) = Partial::load_with(dir.join("tiny.pt"), &LoadOptions::partial()).unwrap();
    assert!(report.missing.is_empty(), "{report}");
    assert_eq!(ours.layers.len(), 2);
    for (i, b) in ours.layers.iter().enumerate() {
        same(
            &b.attn.qkv.weight,
            &theirs[&format!("layers.{i}.attn.qkv.weight")],
        );
        same(
            &b.attn.qkv.bias,
            &theirs[&format!("layers.{i}.attn.qkv.bias")],
        );
        same(
            &b.attn.proj.weight,
            &theirs[&format!("layers.{i}.attn.proj.weight")],
        );
    }
    // An update keeps each field's dtype: another one is a mismatch, or converted when
    // asked.
    let mut ours = ours;
    ours.layers[0].attn.qkv.weight = ours.layers[0]
        .attn
        .qkv
        .weight
        .to_dtype(CDType::F16)
        .unwrap();
    let st = dir.join("tiny.safetensors");
    let err = match ours.update(&st, &LoadOptions::partial()) {
        Err(e) => e.to_string(),
        Ok(r) => panic!("loaded f32 into f16: {r}"),
    };
    assert!(
        err.contains(
            "mismatch for \"layers.0.attn.qkv.weight\": the file has f32, the struct expects f16"
        ),
        "{err}"
    );
    let options = LoadOptions {
        convert_dtype: true,
        ..LoadOptions::partial()
    };
    let report = ours.update(&st, &options).unwrap();
    assert_eq!(report.converted, ["layers.0.attn.qkv.weight"]);
    let w = &ours.layers[0].attn.qkv.weight;
    assert_eq!(w.dtype(), CDType::F16);
    same(
        &w.to_dtype(CDType::F32).unwrap(),
        &theirs["layers.0.attn.qkv.weight"]
            .to_dtype(CDType::F16)
            .unwrap()
            .to_dtype(CDType::F32)
            .unwrap(),
    );

    // One tensor at a time too, on the device candle is given.
    let file = TensorFile::open(dir.join("tiny.npz")).unwrap();
    let e = tc::to_candle(&file.load("embed.weight").unwrap(), &Device::Cpu).unwrap();
    same(&e, &theirs["embed.weight"]);
}

#[test]
fn candle_tensors_saved_as_pytorch_load_in_torch() {
    let tmp = tempfile::tempdir().unwrap();
    let dev = Device::Cpu;
    let w = candle_core::Tensor::arange(0f32, 6., &dev)
        .unwrap()
        .reshape((2, 3))
        .unwrap();
    let tensors = [
        ("f32", w.clone()),
        ("bf16", w.to_dtype(CDType::BF16).unwrap()),
        ("f16", w.to_dtype(CDType::F16).unwrap()),
        ("i64", w.to_dtype(CDType::I64).unwrap()),
        ("u8", w.to_dtype(CDType::U8).unwrap()),
        // A transposed view: saved in C order.
        ("t", w.t().unwrap()),
    ];
    let path = tmp.path().join("c.pt");
    let mut saver = tensorfmt::Saver::create(&path, None, &Default::default()).unwrap();
    for (name, t) in &tensors {
        let ours = tc::from_candle(name, t).unwrap();
        saver
            .add_bytes(&ours.meta().unwrap(), ours.data.as_bytes())
            .unwrap();
    }
    saver.commit().unwrap();
    let code = r#"
import sys, torch
d = torch.load(sys.argv[1], weights_only=True)
w = torch.arange(6, dtype=torch.float32).reshape(2, 3)
want = {"f32": w, "bf16": w.bfloat16(), "f16": w.half(), "i64": w.long(), "u8": w.to(torch.uint8), "t": w.t()}
for k, v in want.items():
    assert d[k].dtype == v.dtype and torch.equal(d[k], v), (k, d[k], v)
print("ok")
"#;
    let (ok, out) = python_snippet(code, &[path.to_str().unwrap()]);
    assert!(ok && out.trim_end().ends_with("ok"), "{out}");
    // And back into candle.
    let file = TensorFile::open(&path).unwrap();
    for (name, t) in &tensors {
        let back = tc::to_candle(&file.load(name).unwrap(), &dev).unwrap();
        assert_eq!(back.dtype(), t.dtype(), "{name}");
        same(
            &back.to_dtype(CDType::F32).unwrap(),
            &t.to_dtype(CDType::F32).unwrap(),
        );
    }
}
