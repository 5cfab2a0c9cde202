//! Files tensorfmt writes are read by `numpy.load(allow_pickle=False)` with identical
//! contents, and files NumPy writes that the tests have never seen are read exactly.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use tensorfmt::{ByteOrder, DType, Order, TensorMeta, WriteOptions};
use tensorfmt_tests::{cli, fixtures, inspect_json, numpy_json, python_snippet, run_seed, tfcheck};

fn all_fixtures() -> Vec<PathBuf> {
    let mut v = Vec::new();
    for dir in ["npy", "npz"] {
        for e in std::fs::read_dir(fixtures().join(dir)).unwrap() {
            v.push(e.unwrap().path());
        }
    }
    v.sort();
    v
}

fn convert(args: &[&str]) {
    let (code, out) = cli(&[&["convert"], args].concat());
    assert_eq!(code, ExitCode::SUCCESS, "convert {args:?} failed: {out}");
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn converted_fixtures_load_identically_in_numpy() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = 0;
    for (i, src) in all_fixtures().iter().enumerate() {
        let stored = dir.path().join(format!("{i}.npz"));
        convert(&[s(src), s(&stored)]);
        tfcheck(&["compare", s(src), s(&stored)]);
        let deflated = dir.path().join(format!("{i}-z.npz"));
        convert(&[s(src), s(&deflated), "--compress"]);
        tfcheck(&["compare", s(src), s(&deflated)]);
        // Back to a single .npy where the source holds one array, under its own name.
        let count = inspect_json(src)["tensors"].as_array().unwrap().len();
        if count == 1 {
            let name = inspect_json(src)["tensors"][0]["name"]
                .as_str()
                .unwrap()
                .replace('/', "_");
            let npy = dir.path().join(format!("{i}/{name}.npy"));
            std::fs::create_dir_all(npy.parent().unwrap()).unwrap();
            convert(&[s(&stored), s(&npy), "--to", "npy"]);
            tfcheck(&["compare", s(src), s(&npy)]);
        }
        n += 1;
    }
    assert!(n >= 10);
}

#[test]
fn unseen_numpy_files_are_read_exactly_and_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    // A new seed every run (printed, and settable with TENSORFMT_SEED to reproduce one).
    let seed = run_seed();
    let made = tfcheck(&["make-random", s(dir.path()), &seed, "40"]);
    let paths: Vec<PathBuf> = made
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(PathBuf::from)
        .collect();
    assert!(paths.len() >= 40, "make-random made {} files", paths.len());
    for (i, p) in paths.iter().enumerate() {
        assert_eq!(
            inspect_json(p),
            numpy_json(p),
            "inspect of unseen file {}",
            p.display()
        );
        let out = dir.path().join(format!("rt{i}.npz"));
        convert(&[s(p), s(&out)]);
        tfcheck(&["compare", s(p), s(&out)]);
    }
}

#[test]
fn dtype_cast_matches_numpy_astype() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src.npz");
    let (ok, out) = python_snippet(
        "import numpy as np, sys\n\
         r = np.random.default_rng(7)\n\
         np.savez(sys.argv[1], a=r.standard_normal((4, 5)) * 100, b=np.asfortranarray(r.integers(-300, 300, (3, 4)).astype('>i4')), c=np.arange(6, dtype=np.uint16).reshape(2, 3))\n",
        &[s(&src)],
    );
    assert!(ok, "{out}");
    for target in ["f16", "f32", "i16", "u8", "f64", "bool", "c64"] {
        let dst = dir.path().join(format!("{target}.npz"));
        convert(&[s(&src), s(&dst), "--dtype", target]);
        let np_name = match target {
            "f16" => "float16",
            "f32" => "float32",
            "f64" => "float64",
            "i16" => "int16",
            "u8" => "uint8",
            "bool" => "bool",
            "c64" => "complex64",
            _ => unreachable!(),
        };
        let (ok, out) = python_snippet(
            "import numpy as np, sys, warnings\n\
             warnings.simplefilter('ignore')\n\
             a = np.load(sys.argv[1], allow_pickle=False); b = np.load(sys.argv[2], allow_pickle=False)\n\
             for k in a.files:\n\
             \x20   want = a[k].astype(sys.argv[3]); got = b[k]\n\
             \x20   assert got.dtype == want.dtype, (k, got.dtype, want.dtype)\n\
             \x20   assert got.shape == want.shape, (k, got.shape, want.shape)\n\
             \x20   assert np.array_equal(got, want), (k, got, want)\n\
             print('ok')\n",
            &[s(&src), s(&dst), np_name],
        );
        assert!(ok, "cast to {target}: {out}");
    }
}

fn le_bytes(dtype: DType, n: usize, seed: u8) -> Vec<u8> {
    let size = dtype.itemsize().unwrap();
    (0..n * size)
        .map(|i| match dtype {
            DType::Bool => ((i as u8) ^ seed) & 1,
            _ => (i as u8).wrapping_mul(31).wrapping_add(seed),
        })
        .collect()
}

#[test]
fn files_saved_through_the_api_load_in_numpy() {
    let dir = tempfile::tempdir().unwrap();
    // Every dtype NumPy has: all but bf16, the 8-bit floats and strings.
    let dtypes: Vec<DType> = DType::ALL
        .into_iter()
        .filter(|d| {
            !matches!(
                d,
                DType::BF16 | DType::F8E4M3FN | DType::F8E5M2 | DType::String
            )
        })
        .collect();
    let mut tensors = Vec::new();
    for (i, &d) in dtypes.iter().enumerate() {
        let (shape, order, bo) = match i % 4 {
            0 => (vec![2, 3], Order::C, ByteOrder::Little),
            1 => (vec![3, 2, 2], Order::Fortran, ByteOrder::Little),
            2 => (vec![], Order::C, ByteOrder::Big),
            _ => (vec![4, 0], Order::C, ByteOrder::Little),
        };
        let n: u64 = shape.iter().product();
        let name = format!("layer.{i}/w.{}", d.name());
        tensors.push((
            TensorMeta {
                name,
                dtype: d,
                shape,
                order,
                byte_order: bo,
            },
            le_bytes(d, n as usize, i as u8),
        ));
    }
    for (fmt, compression) in [
        ("npz", None),
        ("npz", Some(tensorfmt::Compression::Deflate)),
    ] {
        let path = dir
            .path()
            .join(format!("api-{}.npz", compression.is_some()));
        let opts = WriteOptions {
            compression,
            ..Default::default()
        };
        tensorfmt::save(
            &path,
            Some(fmt),
            tensors.iter().map(|(m, b)| (m.clone(), b.as_slice())),
            &opts,
        )
        .unwrap();
        assert_eq!(inspect_json(&path), numpy_json(&path));
    }
    for (m, b) in &tensors {
        let path = dir.path().join(format!("{}.npy", m.name.replace('/', "_")));
        tensorfmt::save(
            &path,
            None,
            [(m.clone(), b.as_slice())],
            &WriteOptions::default(),
        )
        .unwrap();
        assert_eq!(inspect_json(&path), numpy_json(&path));
    }
}

#[test]
fn written_npy_headers_are_byte_identical_to_numpy() {
    // NumPy's own writer and ours agree on the whole file, header padding included.
    let dir = tempfile::tempdir().unwrap();
    for f in std::fs::read_dir(fixtures().join("npy")).unwrap() {
        let src = f.unwrap().path();
        let ours = dir.path().join(src.file_name().unwrap());
        convert(&[s(&src), s(&ours)]);
        let (ok, out) = python_snippet(
            "import numpy as np, sys, io\n\
             a = np.load(sys.argv[1], allow_pickle=False)\n\
             buf = io.BytesIO(); np.save(buf, a)\n\
             mine = open(sys.argv[2], 'rb').read()\n\
             assert buf.getvalue() == mine, (buf.getvalue()[:128], mine[:128])\n",
            &[s(&src), s(&ours)],
        );
        assert!(ok, "{}: {out}", src.display());
    }
}
