//! Formats a user writes in `.fmt` and compiles with `#[derive(TensorFormat)]`, read on
//! bytes laid out as their specification says and written back: the safetensors design
//! of the reference (`docs/formats/safetensors.fmt`: a JSON header with a map of entries
//! and an optional `__metadata__` map, several tensors in one `file` format), and the
//! test formats of `tests/fmt/` (repeated records, nested layouts, `align`, `at`, JSON,
//! conditional widths).

use tensorfmt_derive::TensorFormat;
use tensorfmt_runtime::gen as rt;
use tensorfmt_tests::{meta, safetensors_bytes};

/// The safetensors design.
#[derive(TensorFormat)]
#[tensorfmt(schema = "../docs/formats/safetensors.fmt")]
pub struct Safetensors;

/// Several tensors: a counted list of records, then the data, aligned.
#[derive(TensorFormat)]
#[tensorfmt(schema = "fmt/tarc.fmt")]
pub struct Tarc;

/// One tensor: a conditional width, a nested record, JSON, data at an offset.
#[derive(TensorFormat)]
#[tensorfmt(schema = "fmt/onearr.fmt")]
pub struct Onearr;

fn write(dir: &tempfile::TempDir, name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let p = dir.path().join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

fn range(t: &rt::TensorInfo) -> (u64, u64) {
    match &t.location {
        rt::DataLocation::Range { offset, len } => (*offset, *len),
        other => panic!("{other:?}"),
    }
}

#[test]
fn safetensors_design_reads_every_tensor_and_skips_metadata() {
    let dir = tempfile::tempdir().unwrap();
    let header = r#"{"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},"b":{"dtype":"I64","shape":[3],"data_offsets":[16,40]},"e":{"dtype":"BF16","shape":[0],"data_offsets":[40,40]}}"#;
    let bytes = safetensors_bytes(header.as_bytes(), &[7u8; 40]);
    let p = write(&dir, "m.safetensors", &bytes);
    let src = rt::Source::open(&p).unwrap();
    let ts = safetensors::index(&src, &rt::Limits::default()).unwrap();
    let base = bytes.len() as u64 - 40;
    let got: Vec<_> = ts
        .iter()
        .map(|t| (t.name.as_str(), t.dtype, t.shape.clone(), range(t)))
        .collect();
    assert_eq!(
        got,
        vec![
            ("w", rt::DType::F32, vec![2, 2], (base, 16)),
            ("b", rt::DType::I64, vec![3], (base + 16, 24)),
            ("e", rt::DType::BF16, vec![0], (base + 40, 0)),
        ]
    );
}

#[test]
fn safetensors_design_refuses_bad_headers_with_the_place() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            r#"{"w":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}}"#,
            "F33",
        ),
        (
            r#"{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}"#,
            "w",
        ),
        (
            r#"{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,400]}}"#,
            "w",
        ),
        (
            r#"{"w":{"dtype":"F32","shape":"x","data_offsets":[0,4]}}"#,
            "shape",
        ),
        (r#"{"w":{"dtype":"F32","shape":[1]}}"#, "data_offsets"),
        (r#"{"w": [1, 2"#, "json"),
    ];
    for (header, want) in cases {
        let p = write(
            &dir,
            "bad.safetensors",
            &safetensors_bytes(header.as_bytes(), &[0u8; 4]),
        );
        let src = rt::Source::open(&p).unwrap();
        let e = safetensors::index(&src, &rt::Limits::default()).unwrap_err();
        let text = format!("{e}");
        assert!(text.contains(want), "{header}: {text}");
        assert!(text.contains("bad.safetensors"), "{header}: {text}");
    }
    // A header length past the end of the file.
    let mut bytes = safetensors_bytes(b"{}", &[]);
    bytes[..8].copy_from_slice(&u64::MAX.to_le_bytes());
    let p = write(&dir, "long.safetensors", &bytes);
    let src = rt::Source::open(&p).unwrap();
    assert!(safetensors::index(&src, &rt::Limits::default()).is_err());
}

#[test]
fn safetensors_design_survives_every_truncation_and_byte_flip() {
    let dir = tempfile::tempdir().unwrap();
    let header =
        r#"{"__metadata__":{"k":"v"},"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}}"#;
    let good = safetensors_bytes(header.as_bytes(), &[3u8; 16]);
    let p = dir.path().join("m.safetensors");
    for n in 0..good.len() {
        std::fs::write(&p, &good[..n]).unwrap();
        let src = rt::Source::open(&p).unwrap();
        // The data (the last 16 bytes) may be cut without the header noticing; the size
        // check of the tensor's range against the data refuses it.
        assert!(
            safetensors::index(&src, &rt::Limits::default()).is_err(),
            "cut at {n}"
        );
    }
    for i in 0..good.len() - 16 {
        let mut b = good.clone();
        b[i] ^= 0x5a;
        std::fs::write(&p, &b).unwrap();
        let src = rt::Source::open(&p).unwrap();
        // Some flips keep a valid file (inside a string); none panics.
        let _ = safetensors::index(&src, &rt::Limits::default());
    }
}

/// Three tensors of the safetensors design: their metadata and bytes.
fn three() -> Vec<(rt::TensorMeta, Vec<u8>)> {
    vec![
        (meta("w", rt::DType::F32, &[2, 2]), (0..16u8).collect()),
        (meta("b", rt::DType::I64, &[3]), (100..124u8).collect()),
        (meta("e", rt::DType::BF16, &[0]), Vec::new()),
    ]
}

/// Writes `tensors` with the generated safetensors writer, `metadata` as `__metadata__`.
fn write_safetensors(
    path: &std::path::Path,
    tensors: &[(rt::TensorMeta, Vec<u8>)],
    metadata: Option<Vec<(String, String)>>,
) {
    let options = rt::WriteOptions {
        destination: Some(path.to_path_buf()),
        ..Default::default()
    };
    let mut w = safetensors::Writer::new(std::fs::File::create(path).unwrap(), &options).unwrap();
    w.header().__metadata__ = metadata.map(rt::pydict::Map);
    for (m, bytes) in tensors {
        w.add(m, rt::Payload::Bytes(bytes)).unwrap();
    }
    w.finish().unwrap();
}

#[test]
fn safetensors_design_writes_what_its_specification_lays_out() {
    let dir = tempfile::tempdir().unwrap();
    for metadata in [None, Some(vec![("format".to_string(), "pt".to_string())])] {
        let p = dir.path().join("m.safetensors");
        write_safetensors(&p, &three(), metadata.clone());
        let bytes = std::fs::read(&p).unwrap();
        // The header: compact JSON, entries in the order added, data contiguous in that
        // order, padded with spaces so that the data starts at a multiple of 8.
        let entries = r#""w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},"b":{"dtype":"I64","shape":[3],"data_offsets":[16,40]},"e":{"dtype":"BF16","shape":[0],"data_offsets":[40,40]}"#;
        let header = match &metadata {
            None => format!("{{{entries}}}"),
            Some(_) => format!(r#"{{"__metadata__":{{"format":"pt"}},{entries}}}"#),
        };
        let mut data: Vec<u8> = (0..16u8).collect();
        data.extend(100..124u8);
        assert_eq!(bytes, safetensors_bytes(header.as_bytes(), &data));
        let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        assert_eq!((8 + n) % 8, 0);
        // Read back: the same tensors, the same bytes.
        let src = rt::Source::open(&p).unwrap();
        let ts = safetensors::index(&src, &rt::Limits::default()).unwrap();
        for (t, (m, b)) in ts.iter().zip(three()) {
            assert_eq!((&t.name, t.dtype, &t.shape), (&m.name, m.dtype, &m.shape));
            let (off, len) = range(t);
            assert_eq!(&bytes[off as usize..(off + len) as usize], &b[..]);
        }
        let mut c = rt::Cursor::new(src.data(), src.location());
        let f = safetensors::File::read(&mut c, &rt::Limits::default()).unwrap();
        assert_eq!(f.header.__metadata__.map(|m| m.0), metadata);
    }
}

#[test]
fn safetensors_design_writer_refuses_what_it_cannot_store() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("m.safetensors");
    let mut w =
        safetensors::Writer::new(std::fs::File::create(&p).unwrap(), &Default::default()).unwrap();
    w.add(
        &meta("a", rt::DType::F32, &[1]),
        rt::Payload::Bytes(&[0; 4]),
    )
    .unwrap();
    // A name given twice, a dtype without a code, bytes of the wrong size.
    let e = w
        .add(
            &meta("a", rt::DType::F32, &[1]),
            rt::Payload::Bytes(&[0; 4]),
        )
        .unwrap_err();
    assert!(e.to_string().contains("one tensor per name"), "{e}");
    let e = w
        .add(
            &meta("s", rt::DType::C128, &[1]),
            rt::Payload::Bytes(&[0; 16]),
        )
        .unwrap_err();
    assert!(e.to_string().contains("cannot store c128 tensors"), "{e}");
    let e = w
        .add(
            &meta("c", rt::DType::F32, &[2]),
            rt::Payload::Bytes(&[0; 4]),
        )
        .unwrap_err();
    assert!(e.to_string().contains("8 bytes expected"), "{e}");
}

#[test]
fn safetensors_design_stores_big_endian_tensors_little_endian() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("m.safetensors");
    let mut m = meta("x", rt::DType::U16, &[2]);
    m.byte_order = rt::ByteOrder::Big;
    write_safetensors(&p, &[(m, vec![0x01, 0x02, 0x03, 0x04])], None);
    let bytes = std::fs::read(&p).unwrap();
    assert_eq!(&bytes[bytes.len() - 4..], &[0x02, 0x01, 0x04, 0x03]);
}

#[test]
fn repeated_nested_records_with_json_and_alignment_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a.tarc");
    let tensors = three()
        .into_iter()
        .map(|(mut m, b)| {
            if m.dtype == rt::DType::BF16 {
                m.dtype = rt::DType::U8;
            }
            (m, b)
        })
        .collect::<Vec<_>>();
    let mut w = tarc::Writer::new(std::fs::File::create(&p).unwrap(), &Default::default()).unwrap();
    for (m, b) in &tensors {
        w.add(m, rt::Payload::Bytes(b)).unwrap();
    }
    w.finish().unwrap();
    let bytes = std::fs::read(&p).unwrap();
    assert_eq!(&bytes[..9], b"TARC\x01\x03\0\0\0");
    let src = rt::Source::open(&p).unwrap();
    let ts = tarc::index(&src, &rt::Limits::default()).unwrap();
    assert_eq!(ts.len(), 3);
    let data_at = bytes.len() as u64 - 40;
    assert_eq!(data_at % 16, 0);
    for (t, (m, b)) in ts.iter().zip(&tensors) {
        assert_eq!((&t.name, t.dtype, &t.shape), (&m.name, m.dtype, &m.shape));
        let (off, len) = range(t);
        assert!(off >= data_at);
        assert_eq!(&bytes[off as usize..(off + len) as usize], &b[..]);
    }
    // Each record's JSON is padded with spaces to end at a multiple of 4 from the record's
    // start.
    let mut c = rt::Cursor::new(src.data(), src.location());
    let f = tarc::File::read(&mut c, &rt::Limits::default()).unwrap();
    assert!(f
        .entries
        .iter()
        .all(|e| (2 + u64::from(e.name_len) + 4 + u64::from(e.meta_len)) % 4 == 0));
    assert_eq!(f.entries[1].meta.begin, 16);
}

#[test]
fn conditional_widths_nested_constants_and_offsets_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    for (name, dims, order) in [
        ("small", vec![2u64, 3], rt::Order::C),
        ("fortran", vec![3u64, 2], rt::Order::Fortran),
        (
            "long",
            (1..=60).map(|_| 1).collect::<Vec<u64>>(),
            rt::Order::C,
        ),
    ] {
        let p = dir.path().join(format!("{name}.onearr"));
        let m = rt::TensorMeta {
            name: name.into(),
            dtype: rt::DType::F32,
            shape: dims.clone(),
            order,
            byte_order: rt::ByteOrder::Little,
        };
        let n = m.nbytes().unwrap() as usize;
        let data: Vec<u8> = (0..n).map(|i| i as u8).collect();
        let mut out = Vec::new();
        onearr::write_tensor(&mut out, &m, rt::Payload::Bytes(&data)).unwrap();
        std::fs::write(&p, &out).unwrap();
        assert_eq!(&out[..3], b"ONE");
        // The nested record: its magic and its constant, big-endian.
        assert_eq!(&out[5..9], b"ST\x02\x01");
        // The data at offset 256.
        assert_eq!(out.len(), 256 + n);
        assert_eq!(&out[256..], &data[..]);
        let wide = out[3] == 1;
        assert_eq!(wide, name == "long");
        let src = rt::Source::open(&p).unwrap();
        let ts = onearr::index(&src, &rt::Limits::default()).unwrap();
        assert_eq!((ts[0].dtype, &ts[0].shape), (rt::DType::F32, &dims));
        if name != "long" {
            assert_eq!(ts[0].order(), Some(order));
        }
        assert_eq!(range(&ts[0]), (256, n as u64));
    }
    // A dtype stored in one byte order only, and a header too long for the data offset.
    let mut m = meta("x", rt::DType::U16, &[1]);
    let e = onearr::write_tensor(&mut Vec::new(), &m, rt::Payload::Bytes(&[0; 2])).unwrap_err();
    assert!(
        e.to_string()
            .contains("onearr cannot store u16 in little-endian byte order, only big-endian"),
        "{e}"
    );
    m.byte_order = rt::ByteOrder::Big;
    onearr::write_tensor(&mut Vec::new(), &m, rt::Payload::Bytes(&[0; 2])).unwrap();
    let big = meta("x", rt::DType::U8, &vec![1; 100]);
    let e = onearr::write_tensor(&mut Vec::new(), &big, rt::Payload::Bytes(&[0])).unwrap_err();
    assert!(e.to_string().contains("data"), "{e}");
}

#[test]
fn safetensors_design_files_interoperate_with_the_safetensors_library() {
    let dir = tempfile::tempdir().unwrap();
    // Ours, read by safetensors.numpy (NumPy has no bfloat16: the empty tensor is u8).
    let ours = dir.path().join("ours.safetensors");
    let mut tensors = three();
    tensors[2].0.dtype = rt::DType::U8;
    write_safetensors(
        &ours,
        &tensors,
        Some(vec![("format".to_string(), "np".to_string())]),
    );
    let (ok, out) = tensorfmt_tests::python_snippet(
        "import sys, json\n\
         from safetensors import safe_open\n\
         from safetensors.numpy import load_file\n\
         t = load_file(sys.argv[1])\n\
         meta = safe_open(sys.argv[1], 'np').metadata()\n\
         print(json.dumps({'meta': meta, 'w': t['w'].tobytes().hex(), 'b': t['b'].tobytes().hex(),\n\
                           'shapes': {k: list(v.shape) for k, v in t.items()},\n\
                           'dtypes': {k: str(v.dtype) for k, v in t.items()}}))",
        &[ours.to_str().unwrap()],
    );
    assert!(ok, "{out}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let hex = |r: std::ops::Range<u8>| r.map(|x| format!("{x:02x}")).collect::<String>();
    assert_eq!(v["meta"], serde_json::json!({"format": "np"}));
    assert_eq!(v["w"], serde_json::json!(hex(0..16)));
    assert_eq!(v["b"], serde_json::json!(hex(100..124)));
    assert_eq!(
        v["shapes"],
        serde_json::json!({"w": [2, 2], "b": [3], "e": [0]})
    );
    assert_eq!(
        v["dtypes"],
        serde_json::json!({"w": "float32", "b": "int64", "e": "uint8"})
    );
    // Theirs, read by the generated reader.
    let theirs = dir.path().join("theirs.safetensors");
    let (ok, out) = tensorfmt_tests::python_snippet(
        "import sys, numpy as np\n\
         from safetensors.numpy import save_file\n\
         save_file({'a': np.arange(6, dtype='<f8').reshape(2, 3), 'z': np.array([1, 2], dtype='<u2')},\n\
                   sys.argv[1], metadata={'k': 'v'})",
        &[theirs.to_str().unwrap()],
    );
    assert!(ok, "{out}");
    let bytes = std::fs::read(&theirs).unwrap();
    let src = rt::Source::open(&theirs).unwrap();
    let ts = safetensors::index(&src, &rt::Limits::default()).unwrap();
    let mut got: Vec<_> = ts
        .iter()
        .map(|t| {
            let (off, len) = range(t);
            (
                t.name.clone(),
                t.dtype,
                t.shape.clone(),
                bytes[off as usize..(off + len) as usize].to_vec(),
            )
        })
        .collect();
    got.sort();
    let a: Vec<u8> = (0..6).flat_map(|i| (i as f64).to_le_bytes()).collect();
    assert_eq!(
        got,
        vec![
            ("a".to_string(), rt::DType::F64, vec![2, 3], a),
            ("z".to_string(), rt::DType::U16, vec![2], vec![1, 0, 2, 0]),
        ]
    );
}
