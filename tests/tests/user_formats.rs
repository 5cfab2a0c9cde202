//! Formats a user writes in `.fmt` and compiles with `#[derive(TensorFormat)]`, read on
//! bytes laid out as their specification says: the safetensors design of the reference
//! (`docs/formats/safetensors.fmt`: a JSON header with a map of entries and an optional
//! `__metadata__` map, several tensors in one `file` format).

use tensorfmt_derive::TensorFormat;
use tensorfmt_runtime::gen as rt;

/// The safetensors design.
#[derive(TensorFormat)]
#[tensorfmt(schema = "../docs/formats/safetensors.fmt")]
pub struct Safetensors;

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

/// A safetensors file as the format's specification lays it out: the header length, the
/// JSON header padded with spaces to 8 bytes, the data.
fn safetensors_bytes(header: &str, data: &[u8]) -> Vec<u8> {
    let mut h = header.as_bytes().to_vec();
    while !h.len().is_multiple_of(8) {
        h.push(b' ');
    }
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&h);
    out.extend_from_slice(data);
    out
}

#[test]
fn safetensors_design_reads_every_tensor_and_skips_metadata() {
    let dir = tempfile::tempdir().unwrap();
    let header = r#"{"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},"b":{"dtype":"I64","shape":[3],"data_offsets":[16,40]},"e":{"dtype":"BF16","shape":[0],"data_offsets":[40,40]}}"#;
    let bytes = safetensors_bytes(header, &[7u8; 40]);
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
            &safetensors_bytes(header, &[0u8; 4]),
        );
        let src = rt::Source::open(&p).unwrap();
        let e = safetensors::index(&src, &rt::Limits::default()).unwrap_err();
        let text = format!("{e}");
        assert!(text.contains(want), "{header}: {text}");
        assert!(text.contains("bad.safetensors"), "{header}: {text}");
    }
    // A header length past the end of the file.
    let mut bytes = safetensors_bytes("{}", &[]);
    bytes[..8].copy_from_slice(&u64::MAX.to_le_bytes());
    let p = write(&dir, "long.safetensors", &bytes);
    let src = rt::Source::open(&p).unwrap();
    assert!(safetensors::index(&src, &rt::Limits::default()).is_err());
    // Writing is not generated for it yet: a clear error, not a file.
    let out = dir.path().join("o.safetensors");
    let w = std::fs::File::create(&out).unwrap();
    let e = (safetensors::DESC.writer)(Box::new(w), &rt::WriteOptions::default())
        .err()
        .expect("read-only");
    assert!(e.to_string().contains("writing is not generated"), "{e}");
}

#[test]
fn safetensors_design_survives_every_truncation_and_byte_flip() {
    let dir = tempfile::tempdir().unwrap();
    let header =
        r#"{"__metadata__":{"k":"v"},"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}}"#;
    let good = safetensors_bytes(header, &[3u8; 16]);
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
