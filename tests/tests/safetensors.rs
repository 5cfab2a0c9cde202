//! safetensors, built in (`formats/fmt/safetensors.fmt`): `tensorfmt inspect --json
//! --sha256` on every fixture the real `safetensors` package made gives what the package
//! describes (`tests/fixtures/safetensors/expected/*.json`), and so do files it makes
//! afresh each run; files tensorfmt writes load in the package equal to their source, and
//! are byte for byte what the package writes for the same tensors in the same order;
//! every other format converts to and from safetensors; hostile files get clear errors.

use std::path::{Path, PathBuf};

use tensorfmt::generated::safetensors as st;
use tensorfmt_tests::{
    cli, convert, fixtures, inspect_json, json, meta, run_seed, safetensors_bytes as file_of,
    tensors_by_name, tfcheck_safetensors as tfcheck_ok,
};

fn dir() -> PathBuf {
    fixtures().join("safetensors")
}

/// The fixtures of `tests/fixtures/safetensors`.
const FIXTURES: &[&str] = &[
    "all_dtypes.safetensors",
    "numpy_model.safetensors",
    "scalars_and_empty.safetensors",
    "no_tensors.safetensors",
];

fn path_str(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// A description without its format: the tensors alone.
fn tensors_of(mut d: serde_json::Value) -> serde_json::Value {
    d["tensors"].take()
}

#[test]
fn every_fixture_matches_the_package() {
    for f in FIXTURES {
        let expected =
            std::fs::read_to_string(dir().join("expected").join(format!("{f}.json"))).unwrap();
        assert_eq!(inspect_json(&dir().join(f)), json(&expected), "{f}");
    }
}

#[test]
fn unseen_files_made_by_the_package_read_the_same() {
    let tmp = tempfile::tempdir().unwrap();
    let seed = run_seed();
    let listed = tfcheck_ok(&["make-random", path_str(tmp.path()), &seed, "24"]);
    let paths: Vec<&str> = listed.lines().collect();
    assert_eq!(paths.len(), 24);
    let described = tfcheck_ok(&[&["describe"], &paths[..]].concat());
    for (p, line) in paths.iter().zip(described.lines()) {
        assert_eq!(inspect_json(Path::new(p)), json(line), "{p} (seed {seed})");
    }
}

#[test]
fn detected_by_content_indexed_without_reading_and_loaded_in_place() {
    let tmp = tempfile::tempdir().unwrap();
    let renamed = tmp.path().join("weights.bin");
    std::fs::copy(dir().join("numpy_model.safetensors"), &renamed).unwrap();
    for p in [dir().join("numpy_model.safetensors"), renamed] {
        let file = tensorfmt::TensorFile::open(&p).unwrap();
        assert_eq!(file.format(), "safetensors", "{}", p.display());
        assert_eq!(file.tensors().len(), 6);
        let t = file.load("model.layer.0.bias").unwrap();
        assert!(t.data.is_mapped(), "the bytes are a view of the map");
        let values: Vec<f32> = t
            .data
            .as_bytes()
            .chunks(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        assert_eq!(values, [0.0, 1.0, 2.0, 3.0]);
    }
    // Every tensor's bytes start 8-byte aligned in the file (the header is padded).
    let file = tensorfmt::TensorFile::open(dir().join("all_dtypes.safetensors")).unwrap();
    let first = file.tensors().iter().filter_map(|t| match t.location {
        tensorfmt::DataLocation::Range { offset, .. } => Some(offset),
        _ => None,
    });
    assert_eq!(first.min().unwrap() % 8, 0);
}

#[test]
fn metadata_reads_as_the_package_gives_it() {
    for f in FIXTURES {
        let p = dir().join(f);
        let want = json(&tfcheck_ok(&["metadata", path_str(&p)]));
        let src = tensorfmt::Source::open(&p).unwrap();
        let mut c = tensorfmt::runtime::gen::Cursor::new(src.data(), src.location());
        let file = st::File::read(&mut c, &tensorfmt::Limits::default()).unwrap();
        let got = match file.header.__metadata__ {
            None => serde_json::Value::Null,
            Some(m) => serde_json::Value::Object(
                m.0.into_iter()
                    .map(|(k, v)| (k, serde_json::Value::String(v)))
                    .collect(),
            ),
        };
        assert_eq!(got, want, "{f}");
    }
}

/// `__metadata__` is the format's structure (`value from File.header.__metadata__`):
/// `inspect --json --values` lists each of its keys with its text, as the package gives
/// them, and nothing for a file without; the tensors are leaves beside them.
#[test]
fn metadata_is_the_structure_inspect_shows() {
    for f in FIXTURES {
        let p = dir().join(f);
        let want = json(&tfcheck_ok(&["metadata", path_str(&p)]));
        let (code, out) = cli(&["inspect", "--json", "--values", path_str(&p)]);
        assert_eq!(code, std::process::ExitCode::SUCCESS, "{out}");
        let values = json(&out)["values"].clone();
        let got: serde_json::Map<String, serde_json::Value> = values
            .as_array()
            .unwrap()
            .iter()
            .map(|v| (v["name"].as_str().unwrap().to_string(), v["value"].clone()))
            .collect();
        match want {
            serde_json::Value::Null => assert!(got.is_empty(), "{f}: {got:?}"),
            want => assert_eq!(serde_json::Value::Object(got), want, "{f}"),
        }
        let file = tensorfmt::TensorFile::open(&p).unwrap();
        let tree = file.structure().unwrap().unwrap();
        let names: Vec<&str> = file.tensors().iter().map(|t| t.name.as_str()).collect();
        assert_eq!(tree.tensor_names(), names, "{f}");
    }
}

/// Writes the tensors of `from`, in its order, with the generated writer, `__metadata__`
/// as `metadata`.
fn rewrite_with_metadata(from: &Path, to: &Path, metadata: Option<Vec<(String, String)>>) {
    let file = tensorfmt::TensorFile::open(from).unwrap();
    let options = tensorfmt::WriteOptions {
        destination: Some(to.to_path_buf()),
        ..Default::default()
    };
    let mut w = st::Writer::new(std::fs::File::create(to).unwrap(), &options).unwrap();
    w.header().__metadata__ = metadata.map(tensorfmt::runtime::gen::pydict::Map);
    for t in file.tensors() {
        let loaded = file.load_info(t).unwrap();
        let meta = tensorfmt::TensorMeta::from_info(t).expect("a C-order tensor");
        w.add(&meta, tensorfmt::Payload::Bytes(loaded.data.as_bytes()))
            .unwrap();
    }
    w.finish().unwrap();
}

#[test]
fn written_files_are_byte_identical_to_the_package_s_for_tensors_in_its_order() {
    let tmp = tempfile::tempdir().unwrap();
    // Without metadata: `convert` keeps the order, and so the package's bytes.
    for f in ["all_dtypes.safetensors", "scalars_and_empty.safetensors"] {
        let out = tmp.path().join(f);
        convert(&dir().join(f), &out, &[]);
        assert_eq!(
            std::fs::read(&out).unwrap(),
            std::fs::read(dir().join(f)).unwrap(),
            "{f}"
        );
    }
    // With `__metadata__`, written first, as the package does.
    for (f, metadata) in [
        ("numpy_model.safetensors", vec![("format", "np")]),
        ("no_tensors.safetensors", vec![("note", "none")]),
    ] {
        let out = tmp.path().join(f);
        let metadata = metadata
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        rewrite_with_metadata(&dir().join(f), &out, Some(metadata));
        assert_eq!(
            std::fs::read(&out).unwrap(),
            std::fs::read(dir().join(f)).unwrap(),
            "{f}"
        );
    }
    // The package's `save_file` of the tensors tensorfmt read from its own file.
    let npz = tmp.path().join("m.npz");
    convert(&dir().join("numpy_model.safetensors"), &npz, &[]);
    let again = tmp.path().join("again.safetensors");
    tfcheck_ok(&["save", path_str(&npz), path_str(&again), "format=np"]);
    assert_eq!(
        std::fs::read(&again).unwrap(),
        std::fs::read(dir().join("numpy_model.safetensors")).unwrap()
    );
}

/// `convert` carries `__metadata__` (the `value` mapping run backwards): every fixture
/// converted to safetensors is its own bytes again, `__metadata__` first as the package
/// writes it; converted to a format without such values, its keys are reported dropped.
#[test]
fn convert_carries_metadata_byte_identical_to_the_package() {
    let tmp = tempfile::tempdir().unwrap();
    for f in FIXTURES {
        let out = tmp.path().join(f);
        let summary =
            tensorfmt::convert(dir().join(f), &out, &Default::default(), |_, _| {}).unwrap();
        assert!(summary.dropped.is_empty(), "{f}: {:?}", summary.dropped);
        assert_eq!(
            std::fs::read(&out).unwrap(),
            std::fs::read(dir().join(f)).unwrap(),
            "{f}"
        );
        assert_eq!(
            json(&tfcheck_ok(&["metadata", path_str(&out)])),
            json(&tfcheck_ok(&["metadata", path_str(&dir().join(f))])),
            "{f}"
        );
    }
    let npz = tmp.path().join("m.npz");
    let summary = tensorfmt::convert(
        dir().join("numpy_model.safetensors"),
        &npz,
        &Default::default(),
        |_, _| {},
    )
    .unwrap();
    assert_eq!(summary.dropped, ["format"]);
}

/// A PyTorch checkpoint's top-level text values become `__metadata__`; its other values
/// (numbers, values beside tensors) are left out and reported.
#[test]
fn checkpoint_text_values_become_metadata() {
    use tensorfmt::{DType, Node, Saver};
    let tmp = tempfile::tempdir().unwrap();
    let pt = tmp.path().join("ckpt.pt");
    let mut saver = Saver::create(&pt, None, &Default::default()).unwrap();
    let kept = saver
        .set_structure(&Node::Dict(vec![
            (
                Node::str("model"),
                Node::Dict(vec![
                    (Node::str("w"), Node::Tensor("model.w".into())),
                    (Node::str("scale"), Node::Float(0.5)),
                ]),
            ),
            (Node::str("arch"), Node::str("mlp")),
            (Node::str("epoch"), Node::Int(3)),
            (Node::str("note"), Node::str("it's")),
        ]))
        .unwrap();
    assert!(kept.stored);
    saver
        .add_bytes(&meta("model.w", DType::F32, &[2]), &[0u8; 8])
        .unwrap();
    saver.commit().unwrap();
    let out = tmp.path().join("ckpt.safetensors");
    let summary = tensorfmt::convert(&pt, &out, &Default::default(), |_, _| {}).unwrap();
    assert_eq!(summary.dropped, ["model.scale", "epoch"]);
    assert_eq!(
        json(&tfcheck_ok(&["metadata", path_str(&out)])),
        serde_json::json!({"arch": "mlp", "note": "it's"})
    );
    // The safetensors writer itself: the same values, in order.
    let mut saver = Saver::create(
        tmp.path().join("direct.safetensors"),
        None,
        &Default::default(),
    )
    .unwrap();
    let kept = saver
        .set_structure(&Node::Dict(vec![
            (Node::str("b"), Node::Bool(true)),
            (Node::str("a"), Node::str("x")),
        ]))
        .unwrap();
    assert!(kept.stored);
    assert_eq!(kept.dropped, ["b"]);
}

/// Tensors given in any order are written as the package writes them (by dtype, then
/// name): the same bytes as its `save_file` of the same arrays. (Arrays in C order: the
/// package's `safetensors.numpy.save_file` writes a Fortran-order array's memory as it
/// lies, under its C-order shape, so that the file does not load equal to the array;
/// tensorfmt reorders it.)
#[test]
fn tensors_in_any_order_are_written_as_the_package_writes_them() {
    use tensorfmt::{DType, TensorMeta};
    let tmp = tempfile::tempdir().unwrap();
    let tensors: Vec<(TensorMeta, Vec<u8>)> = vec![
        (meta("z.last", DType::U8, &[3]), vec![1, 2, 3]),
        (
            meta("b", DType::F32, &[2]),
            vec![0, 0, 128, 63, 0, 0, 0, 64],
        ),
        (meta("a", DType::F32, &[1]), vec![0, 0, 64, 64]),
        (meta("e", DType::F16, &[0, 2]), vec![]),
        (meta("i", DType::I64, &[1]), 7i64.to_le_bytes().to_vec()),
        (meta("m", DType::Bool, &[2]), vec![1, 0]),
    ];
    let npz = tmp.path().join("t.npz");
    tensorfmt::save(
        &npz,
        None,
        tensors.iter().map(|(m, b)| (m.clone(), &b[..])),
        &Default::default(),
    )
    .unwrap();
    let ours = tmp.path().join("ours.safetensors");
    tensorfmt::save(
        &ours,
        None,
        tensors.iter().map(|(m, b)| (m.clone(), &b[..])),
        &Default::default(),
    )
    .unwrap();
    let theirs = tmp.path().join("theirs.safetensors");
    tfcheck_ok(&["save", path_str(&npz), path_str(&theirs)]);
    assert!(
        std::fs::read(&ours).unwrap() == std::fs::read(&theirs).unwrap(),
        "not the package's bytes"
    );
}

/// The other formats convert to safetensors and back with the same tensors: an ONNX
/// model's initializers (and back to ONNX), a MiniDB's blob, a PyTorch checkpoint's
/// tensors; a dtype safetensors has no code for (c128) is refused by name.
#[test]
fn onnx_caffe2_and_pytorch_convert_to_and_from_safetensors() {
    let tmp = tempfile::tempdir().unwrap();
    for (src, back_ext) in [
        (fixtures().join("onnx/mlp.onnx"), "onnx"),
        (fixtures().join("caffe2/spec_example.minidb"), "npz"),
        (fixtures().join("pytorch/checkpoint_adam.pt"), "pt"),
    ] {
        let name = src.file_name().unwrap().to_string_lossy().into_owned();
        let st = tmp.path().join(format!("{name}.safetensors"));
        convert(&src, &st, &[]);
        let back = tmp.path().join(format!("{name}.back.{back_ext}"));
        convert(&st, &back, &[]);
        for p in [&st, &back] {
            assert_eq!(
                tensors_by_name(&inspect_json(p)),
                tensors_by_name(&inspect_json(&src)),
                "{name} → {}",
                p.display()
            );
        }
    }
    let out = tmp.path().join("c128.safetensors");
    let c128 = meta("z", tensorfmt::DType::C128, &[1]);
    let e = tensorfmt::save(&out, None, [(c128, &[0u8; 16][..])], &Default::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("'z'") && e.contains("safetensors cannot store c128 tensors"),
        "{e}"
    );
    assert!(!out.exists(), "nothing is left at the destination");
}

#[test]
fn every_npz_fixture_written_as_safetensors_loads_equal_in_the_package() {
    let tmp = tempfile::tempdir().unwrap();
    for f in [
        "savez_stored.npz",
        "savez_compressed.npz",
        "single.npz",
        "empty.npz",
    ] {
        let src = fixtures().join("npz").join(f);
        let out = tmp.path().join(format!("{f}.safetensors"));
        convert(&src, &out, &[]);
        tfcheck_ok(&["compare-npz", path_str(&out), path_str(&src)]);
        // And back: the same tensors as the source, by tensorfmt (in the order the
        // package writes, by dtype then name, as the file holds them).
        let back = tmp.path().join(format!("{f}.back.npz"));
        convert(&out, &back, &[]);
        assert_eq!(
            tensors_by_name(&inspect_json(&back)),
            tensors_by_name(&inspect_json(&src)),
            "{f}"
        );
    }
}

#[test]
fn pytorch_and_npy_fixtures_convert_to_safetensors_and_back() {
    let tmp = tempfile::tempdir().unwrap();
    // safetensors has no c128: refused, naming the tensor and the dtype.
    for src in [
        fixtures().join("npz/all_dtypes.npz"),
        fixtures().join("pytorch/all_dtypes.pt"),
    ] {
        let out = tmp.path().join("c128.safetensors");
        let (code, text) = cli(&["convert", path_str(&src), path_str(&out)]);
        assert_ne!(code, std::process::ExitCode::SUCCESS, "{text}");
        assert!(!out.exists());
    }
    for src in [
        fixtures().join("pytorch/parameters.pt"),
        fixtures().join("pytorch/noncontiguous.pt"),
        fixtures().join("pytorch/module_state_dict.pt"),
        fixtures().join("npy/dtype_f32.npy"),
        fixtures().join("npy/fortran_2d.npy"),
    ] {
        let name = src.file_name().unwrap().to_str().unwrap().to_string();
        let out = tmp.path().join(format!("{name}.safetensors"));
        convert(&src, &out, &[]);
        // The package describes what tensorfmt wrote as tensorfmt describes the source.
        let described = json(&tfcheck_ok(&["describe", path_str(&out)]));
        let want = tensors_by_name(&inspect_json(&src));
        let got = tensors_by_name(&described);
        assert_eq!(got, want, "{name}");
    }
    // Each safetensors fixture to npz (which has no bf16 nor float8) and pt, and back.
    for f in FIXTURES {
        let exts: &[&str] = if *f == "all_dtypes.safetensors" {
            &["pt"]
        } else {
            &["npz", "pt"]
        };
        for ext in exts {
            let there = tmp.path().join(format!("{f}.{ext}"));
            convert(&dir().join(f), &there, &[]);
            let back = tmp.path().join(format!("{f}.{ext}.safetensors"));
            convert(&there, &back, &[]);
            assert_eq!(
                tensors_of(inspect_json(&back)),
                tensors_of(inspect_json(&dir().join(f))),
                "{f} via {ext}"
            );
        }
    }
}

#[test]
fn hostile_files_are_refused_with_the_place() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("bad.safetensors");
    let err = |bytes: &[u8]| -> String {
        std::fs::write(&p, bytes).unwrap();
        let e = tensorfmt_tests::open_err_as(&p, "safetensors");
        assert!(e.contains("bad.safetensors"), "{e}");
        e
    };
    let entry = |name: &str, dtype: &str, shape: &str, begin: u64, end: u64| {
        format!(r#""{name}":{{"dtype":"{dtype}","shape":{shape},"data_offsets":[{begin},{end}]}}"#)
    };
    // A header length beyond the file, 2^63, and over the crate's 100 MB.
    for n in [1000u64, 1 << 63, u64::MAX, 100_000_008] {
        let mut b = file_of(b"{}", &[]);
        b[..8].copy_from_slice(&n.to_le_bytes());
        let e = err(&b);
        assert!(e.contains("header"), "{n}: {e}");
    }
    // shape x dtype size != the span.
    let e = err(&file_of(
        format!("{{{}}}", entry("w", "F32", "[3]", 0, 8)).as_bytes(),
        &[0; 8],
    ));
    assert!(e.contains("'w'") && e.contains("12 bytes"), "{e}");
    // A span past the data, and an end before its begin.
    for (b, e_) in [(0, 400), (8, 4)] {
        let e = err(&file_of(
            format!("{{{}}}", entry("w", "U8", "[4]", b, e_)).as_bytes(),
            &[0; 8],
        ));
        assert!(e.contains("w") && e.contains("byte range"), "{e}");
    }
    // A dimension product that overflows.
    let e = err(&file_of(
        format!(
            "{{{}}}",
            entry("w", "F64", "[4294967296,4294967296,4294967296]", 0, 8)
        )
        .as_bytes(),
        &[0; 8],
    ));
    assert!(e.contains("w"), "{e}");
    // Non-UTF-8 text in the header, a dtype the table lacks, broken JSON.
    let mut bad = format!("{{{}}}", entry("wX", "U8", "[1]", 0, 1)).into_bytes();
    let at = bad.iter().position(|&c| c == b'X').unwrap();
    bad[at] = 0xff;
    let e = err(&file_of(&bad, &[0]));
    assert!(e.contains("header") && e.contains("json"), "{e}");
    let e = err(&file_of(
        format!("{{{}}}", entry("w", "F4", "[1]", 0, 1)).as_bytes(),
        &[0],
    ));
    assert!(e.contains("F4") && e.contains("w"), "{e}");
    let e = err(&file_of(b"{\"w\": [1, 2", &[]));
    assert!(e.contains("json"), "{e}");
    // Data offsets that leave a hole, overlap, or leave bytes after the last tensor, as
    // the safetensors crate refuses them (in the order of their starts, whatever the
    // header's order).
    let two = |a: (u64, u64), b: (u64, u64), data: usize| {
        let h = format!(
            "{{{},{}}}",
            entry("b", "U8", &format!("[{}]", b.1 - b.0), b.0, b.1),
            entry("a", "U8", &format!("[{}]", a.1 - a.0), a.0, a.1)
        );
        err(&file_of(h.as_bytes(), &vec![0; data]))
    };
    let e = two((0, 4), (6, 8), 8);
    assert!(
        e.contains("bytes 4..6") && e.contains("hole after 'a'"),
        "{e}"
    );
    let e = two((0, 4), (2, 8), 8);
    assert!(
        e.contains("'b'") && e.contains("overlaps") && e.contains("'a'"),
        "{e}"
    );
    let e = two((0, 4), (4, 8), 12);
    assert!(e.contains("bytes 8..12 at the end"), "{e}");
    let e = two((2, 4), (4, 8), 8);
    assert!(
        e.contains("bytes 0..2") && e.contains("before the first tensor"),
        "{e}"
    );
    // A tensor named twice, and a key repeated in a tensor's entry: refused by name, as
    // the crate refuses them (Python's `json` would keep the last).
    let h = format!(
        "{{{},{}}}",
        entry("w", "U8", "[4]", 0, 4),
        entry("w", "U8", "[4]", 4, 8)
    );
    let e = err(&file_of(h.as_bytes(), &[0; 8]));
    assert!(e.contains("\"w\" appears twice"), "{e}");
    let h = r#"{"w":{"dtype":"U8","dtype":"F32","shape":[4],"data_offsets":[0,4]}}"#;
    let e = err(&file_of(h.as_bytes(), &[0; 4]));
    assert!(e.contains("\"dtype\" appears twice"), "{e}");
    // Tiled in another order than the header's, and empty tensors between: read.
    std::fs::write(
        &p,
        file_of(
            format!(
                "{{{},{},{}}}",
                entry("b", "U8", "[4]", 4, 8),
                entry("e", "U8", "[0]", 4, 4),
                entry("a", "U8", "[4]", 0, 4)
            )
            .as_bytes(),
            &[1; 8],
        ),
    )
    .unwrap();
    assert_eq!(tensorfmt::TensorFile::open(&p).unwrap().tensors().len(), 3);
}

#[test]
fn every_truncation_and_byte_flip_is_an_error_or_a_file_never_a_panic() {
    let tmp = tempfile::tempdir().unwrap();
    let good = std::fs::read(dir().join("numpy_model.safetensors")).unwrap();
    let p = tmp.path().join("cut.safetensors");
    let header_end = 8 + u64::from_le_bytes(good[..8].try_into().unwrap()) as usize;
    for n in 0..good.len() {
        std::fs::write(&p, &good[..n]).unwrap();
        let opened = tensorfmt::TensorFile::open_with(
            &p,
            &tensorfmt::OpenOptions {
                format: Some("safetensors".into()),
                ..Default::default()
            },
        );
        // Cut anywhere, the header or the last tensor's span no longer fits.
        assert!(opened.is_err(), "cut at {n}");
    }
    for i in 0..header_end {
        let mut b = good.clone();
        b[i] ^= 0x5a;
        std::fs::write(&p, &b).unwrap();
        if let Ok(f) = tensorfmt::TensorFile::open_with(
            &p,
            &tensorfmt::OpenOptions {
                format: Some("safetensors".into()),
                ..Default::default()
            },
        ) {
            let _ = f.read_all(&mut tensorfmt::runtime::hash::HashSink::new());
        }
    }
}

/// Tensors of every alignment class: sizes that are multiples of 64 and 4096 and sizes
/// that are not (odd `u8`, `f16`, `bf16`), a scalar and an empty tensor. With `bf16`
/// when `bf16` (NumPy's npz cannot hold it).
fn alignment_tensors(bf16: bool) -> Vec<(tensorfmt::TensorMeta, Vec<u8>)> {
    use tensorfmt::DType;
    let bytes = |n: usize, seed: u8| -> Vec<u8> {
        (0..n)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    };
    let mut v = vec![
        (meta("odd.u8", DType::U8, &[3]), bytes(3, 1)),
        (meta("u8.64", DType::U8, &[64]), bytes(64, 2)),
        (meta("f16.odd", DType::F16, &[5]), bytes(10, 3)),
        (meta("f16.64", DType::F16, &[2, 16]), bytes(64, 4)),
        (meta("f32.odd", DType::F32, &[7]), bytes(28, 5)),
        (meta("f32.4096", DType::F32, &[1024]), bytes(4096, 6)),
        (meta("f64.odd", DType::F64, &[3]), bytes(24, 7)),
        (meta("f64.64", DType::F64, &[8]), bytes(64, 8)),
        (meta("i64.one", DType::I64, &[1]), bytes(8, 9)),
        (meta("mask", DType::Bool, &[5]), vec![1, 0, 1, 1, 0]),
        (meta("scalar", DType::F32, &[]), bytes(4, 10)),
        (meta("empty", DType::F16, &[0, 2]), vec![]),
        (meta("u8.4096", DType::U8, &[4096]), bytes(4096, 11)),
    ];
    if bf16 {
        v.push((meta("bf16.odd", DType::BF16, &[3]), bytes(6, 12)));
        v.push((meta("bf16.4096", DType::BF16, &[2048]), bytes(4096, 13)));
    }
    v
}

/// Checks from a file's bytes that it is aligned to `n` as `--align n` promises: the data
/// starts at a multiple of max(8, n); every tensor whose size is a multiple of `n` starts
/// at an absolute offset that is one; every tensor at a multiple of its element size; the
/// tensors cover the data exactly (what the package's reader requires).
fn assert_aligned(path: &Path, n: u64) {
    let bytes = std::fs::read(path).unwrap();
    let len = u64::from_le_bytes(bytes[..8].try_into().unwrap());
    let start = 8 + len;
    assert_eq!(start % n.max(8), 0, "{}: data at {start}", path.display());
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..start as usize]).unwrap();
    let mut ranges = Vec::new();
    for (name, e) in header.as_object().unwrap() {
        if name == "__metadata__" {
            continue;
        }
        let (b, end) = (
            e["data_offsets"][0].as_u64().unwrap(),
            e["data_offsets"][1].as_u64().unwrap(),
        );
        let item = match e["dtype"].as_str().unwrap() {
            "BOOL" | "U8" | "I8" => 1,
            "F16" | "BF16" => 2,
            "F32" => 4,
            "F64" | "I64" => 8,
            other => panic!("dtype {other}"),
        };
        let (at, size) = (start + b, end - b);
        if size % n == 0 {
            assert_eq!(
                at % n,
                0,
                "{}: '{name}' of {size} bytes at {at}",
                path.display()
            );
        }
        assert_eq!(at % item, 0, "{}: '{name}' at {at}", path.display());
        ranges.push((b, end));
    }
    ranges.sort();
    let mut next = 0;
    for (b, e) in ranges {
        assert_eq!(b, next, "{}: a hole or an overlap", path.display());
        next = e;
    }
    assert_eq!(start + next, bytes.len() as u64, "{}", path.display());
}

/// `--align N` (`WriteOptions::align`): the data and the tensors whose size is a multiple
/// of N start at multiples of N, every other tensor at a multiple of its element size,
/// and the package reads every tensor equal to its source — through the API, through
/// `convert --align` from npz (`safetensors.numpy.load_file` against the arrays NumPy
/// loads) and from safetensors (`safe_open(framework="pt")` against the package's own
/// file of the same tensors).
#[test]
fn aligned_files_are_aligned_and_load_equal_in_the_package() {
    let tmp = tempfile::tempdir().unwrap();
    let save = |path: &Path, tensors: &[(tensorfmt::TensorMeta, Vec<u8>)], align| {
        let options = tensorfmt::WriteOptions {
            align,
            ..Default::default()
        };
        tensorfmt::save(
            path,
            None,
            tensors.iter().map(|(m, b)| (m.clone(), &b[..])),
            &options,
        )
        .unwrap();
    };
    // The source files: npz (NumPy's side), and safetensors with bf16 as the package
    // writes it (the same bytes, the existing tests say).
    let npz = tmp.path().join("src.npz");
    save(&npz, &alignment_tensors(false), None);
    let plain = tmp.path().join("plain.safetensors");
    save(&plain, &alignment_tensors(true), None);
    let theirs = tfcheck_ok(&["describe", path_str(&plain)]);
    let want = tensors_by_name(&json(&theirs));
    for n in [64u64, 4096] {
        let api = tmp.path().join(format!("api{n}.safetensors"));
        save(&api, &alignment_tensors(true), Some(n));
        let from_npz = tmp.path().join(format!("npz{n}.safetensors"));
        let from_st = tmp.path().join(format!("st{n}.safetensors"));
        for (src, out) in [(&npz, &from_npz), (&plain, &from_st)] {
            let (code, text) = cli(&[
                "convert",
                path_str(src),
                path_str(out),
                "--align",
                &n.to_string(),
            ]);
            assert_eq!(code, std::process::ExitCode::SUCCESS, "{text}");
        }
        for p in [&api, &from_npz, &from_st] {
            assert_aligned(p, n);
        }
        tfcheck_ok(&["compare-npz", path_str(&from_npz), path_str(&npz)]);
        for p in [&api, &from_st] {
            let got = tensors_by_name(&json(&tfcheck_ok(&["describe", path_str(p)])));
            assert_eq!(got, want, "{}", p.display());
            assert_eq!(tensors_by_name(&inspect_json(p)), want, "{}", p.display());
        }
    }
    // Without `--align`, the package's bytes (as before).
    let again = tmp.path().join("again.safetensors");
    convert(&plain, &again, &[]);
    assert!(std::fs::read(&again).unwrap() == std::fs::read(&plain).unwrap());
}

/// An alignment that is not a power of two (or past 1 GiB) is refused naming it, and so
/// is one asked of a format that does not align its tensors (npz), naming the format and
/// the formats that do; nothing is written.
#[test]
fn alignments_that_mean_nothing_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let src = dir().join("numpy_model.safetensors");
    let convert_err = |out: &Path, align: u64| -> String {
        let options = tensorfmt::ConvertOptions {
            write: tensorfmt::WriteOptions {
                align: Some(align),
                ..Default::default()
            },
            ..Default::default()
        };
        let e = tensorfmt::convert(&src, out, &options, |_, _| {})
            .unwrap_err()
            .to_string();
        assert!(!out.exists(), "{}", out.display());
        e
    };
    let out = tmp.path().join("bad.safetensors");
    for bad in [3u64, 0, 96, 1 << 31] {
        let e = convert_err(&out, bad);
        assert!(
            e.contains(&format!("alignment {bad}")) && e.contains("power of two"),
            "{e}"
        );
    }
    let npz = tmp.path().join("bad.npz");
    let e = convert_err(&npz, 64);
    assert!(
        e.contains("npz does not align its tensors' data; --align applies to safetensors"),
        "{e}"
    );
    // The command line: the same refusals, exit code 1, nothing written.
    for (out, n) in [(&out, "3"), (&npz, "64")] {
        let (code, _) = cli(&["convert", path_str(&src), path_str(out), "--align", n]);
        assert_eq!(code, std::process::ExitCode::from(1));
        assert!(!out.exists());
    }
}
