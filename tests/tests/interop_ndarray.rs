//! The `ndarray` and `half` features against files NumPy and torch made: arrays and
//! views of C, Fortran and big-endian `.npy` fixtures, f16/bf16 elements, arrays as
//! `StateDict` fields, and arrays written back that NumPy reads as the same values.

use tensorfmt::half::{bf16, f16};
use tensorfmt::ndarray::{self, Array1, Array2, ArrayD, IxDyn};
use tensorfmt::{nd, StateDict, TensorFile};
use tensorfmt_tests::{fixtures, python_snippet};

fn npy(name: &str) -> tensorfmt::Tensor {
    let file = TensorFile::open(fixtures().join("npy").join(name)).unwrap();
    let first = file.tensors()[0].clone();
    file.load_info(&first).unwrap()
}

/// NumPy's own reading of a fixture: its values as f64, in C order, and its shape.
fn numpy_values(name: &str) -> (Vec<f64>, Vec<usize>) {
    let code = r#"
import sys, numpy as np
a = np.load(sys.argv[1])
print(" ".join(str(d) for d in a.shape))
print(" ".join(repr(float(x)) for x in a.astype("f8").ravel(order="C")))
"#;
    let path = fixtures().join("npy").join(name);
    let (ok, out) = python_snippet(code, &[path.to_str().unwrap()]);
    assert!(ok, "{out}");
    let mut lines = out.lines();
    let s = lines
        .next()
        .unwrap()
        .split_whitespace()
        .map(|d| d.parse().unwrap())
        .collect();
    let v = lines
        .next()
        .unwrap_or("")
        .split_whitespace()
        .map(|x| x.parse().unwrap())
        .collect();
    (v, s)
}

fn c_order(a: &ArrayD<f64>) -> Vec<f64> {
    a.iter().copied().collect()
}

#[test]
fn arrays_of_c_fortran_and_big_endian_files_hold_numpys_values() {
    for (file, borrowed) in [
        ("dtype_f32.npy", true),
        ("fortran_2d.npy", true),
        ("fortran_3d.npy", true),
        ("be_f32.npy", false),
        ("fortran_2d_be.npy", false),
    ] {
        let t = npy(file);
        let (want, shape) = numpy_values(file);
        let a = match t.info.dtype {
            tensorfmt::DType::F32 => nd::to_array::<f32>(&t).unwrap().mapv(f64::from),
            tensorfmt::DType::F64 => nd::to_array::<f64>(&t).unwrap(),
            tensorfmt::DType::I64 => nd::to_array::<i64>(&t).unwrap().mapv(|x| x as f64),
            tensorfmt::DType::I32 => nd::to_array::<i32>(&t).unwrap().mapv(f64::from),
            other => panic!("{file}: {other}"),
        };
        assert_eq!(a.shape(), &shape[..], "{file}");
        let got = c_order(&a);
        assert_eq!(got.len(), want.len(), "{file}");
        for (g, w) in got.iter().zip(&want) {
            assert!(
                g == w || (g.is_nan() && w.is_nan()),
                "{file}: {got:?} != {want:?}"
            );
        }
        // A view borrows where the bytes allow it, and then agrees with the copy.
        let viewed = match t.info.dtype {
            tensorfmt::DType::F32 => nd::view::<f32>(&t).map(|v| v.mapv(f64::from)),
            tensorfmt::DType::F64 => nd::view::<f64>(&t).map(|v| v.to_owned()),
            tensorfmt::DType::I64 => nd::view::<i64>(&t).map(|v| v.mapv(|x| x as f64)),
            tensorfmt::DType::I32 => nd::view::<i32>(&t).map(|v| v.mapv(f64::from)),
            _ => unreachable!(),
        };
        assert_eq!(viewed.is_ok(), borrowed, "{file}");
        if let Ok(v) = viewed {
            let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&c_order(&v)), bits(&got), "{file}");
        }
    }
}

#[test]
fn half_elements_read_as_numpy_and_torch_wrote_them() {
    let t = npy("dtype_f16.npy");
    let (want, _) = numpy_values("dtype_f16.npy");
    let got: Vec<f64> = t
        .to_vec::<f16>()
        .unwrap()
        .iter()
        .map(|x| x.to_f64())
        .collect();
    for (g, w) in got.iter().zip(&want) {
        assert!(g == w || (g.is_nan() && w.is_nan()), "{got:?} != {want:?}");
    }
    // bf16 from a torch checkpoint, against torch's float() of it.
    let dir = tempfile::tempdir().unwrap();
    let pt = dir.path().join("b.pt");
    let code = r#"
import sys, torch
t = torch.tensor([1.0, -2.5, 3.140625, 1e30, -0.0]).to(torch.bfloat16)
torch.save({"b": t}, sys.argv[1])
print(" ".join(repr(float(x)) for x in t.float()))
"#;
    let (ok, out) = python_snippet(code, &[pt.to_str().unwrap()]);
    assert!(ok, "{out}");
    let want: Vec<f64> = out.split_whitespace().map(|x| x.parse().unwrap()).collect();
    let file = TensorFile::open(&pt).unwrap();
    let b = file.load("b").unwrap();
    let got: Vec<f64> = b
        .to_vec::<bf16>()
        .unwrap()
        .iter()
        .map(|x| x.to_f64())
        .collect();
    assert_eq!(got, want);
    let arr = nd::to_array::<bf16>(&b).unwrap();
    assert_eq!(arr.len(), 5);
    assert!(
        b.to_vec::<f16>().is_err(),
        "another dtype is refused, not reinterpreted"
    );
}

#[test]
fn arrays_written_back_read_in_numpy_as_the_same_values_and_order() {
    let dir = tempfile::tempdir().unwrap();
    let c = Array2::from_shape_fn((3, 4), |(i, j)| (i * 10 + j) as f32);
    let f = c.t().as_standard_layout().into_owned(); // the transpose copied in C order
    let fortran = c.clone().reversed_axes(); // the transpose in place: Fortran order
    let tensors = [
        nd::from_array("c", &c).unwrap(),
        nd::from_array("f", &f).unwrap(),
        nd::from_array("fortran", &fortran).unwrap(),
        nd::from_array("strided", &c.slice(ndarray::s![.., ..;2])).unwrap(),
    ];
    assert_eq!(tensors[2].info.order(), Some(tensorfmt::Order::Fortran));
    let path = dir.path().join("a.npz");
    let mut saver = tensorfmt::Saver::create(&path, None, &Default::default()).unwrap();
    for t in &tensors {
        saver
            .add_bytes(&t.meta().unwrap(), t.data.as_bytes())
            .unwrap();
    }
    saver.commit().unwrap();
    let code = r#"
import sys, numpy as np
z = np.load(sys.argv[1])
c = np.arange(3)[:, None] * 10 + np.arange(4)[None, :]
assert np.array_equal(z["c"], c) and z["c"].flags.c_contiguous
assert np.array_equal(z["f"], c.T)
assert np.array_equal(z["fortran"], c.T) and z["fortran"].flags.f_contiguous
assert np.array_equal(z["strided"], c[:, ::2])
print("ok")
"#;
    let (ok, out) = python_snippet(code, &[path.to_str().unwrap()]);
    assert!(ok && out.trim_end().ends_with("ok"), "{out}");
}

#[test]
fn arrays_are_state_dict_fields() {
    #[derive(StateDict)]
    struct Net {
        w: Array2<f32>,
        b: Array1<f32>,
        any: ArrayD<f64>,
    }
    let net = Net {
        w: Array2::from_shape_fn((2, 3), |(i, j)| (i + j) as f32).reversed_axes(),
        b: Array1::from(vec![1.0, 2.0]),
        any: ArrayD::from_elem(IxDyn(&[2, 2, 1]), 0.5),
    };
    let dir = tempfile::tempdir().unwrap();
    for name in ["n.npz", "n.safetensors", "n.pt"] {
        let path = dir.path().join(name);
        net.save(&path, None).unwrap();
        let back = Net::load(&path).unwrap();
        assert_eq!(back.w, net.w, "{name}");
        assert_eq!(back.b, net.b, "{name}");
        assert_eq!(back.any, net.any, "{name}");
    }
    // A 2-d field refuses a 1-d tensor.
    #[derive(StateDict)]
    struct Wrong {
        #[state(rename = "b")]
        w: Array2<f32>,
    }
    let path = dir.path().join("n.npz");
    let err = match Wrong::load_with(&path, &tensorfmt::LoadOptions::partial()) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("a 1-d tensor loaded as 2-d"),
    };
    assert!(
        err.contains("mismatch for \"b\": the file has shape [2], the struct expects 2 dimensions"),
        "{err}"
    );
}
