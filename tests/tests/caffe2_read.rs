//! Caffe2 databases: MiniDB files, LMDB and LevelDB folders of BlobProto records (Save's
//! weights, chunks joined) and TensorProtos records (datasets), read through the schema
//! in `formats/fmt/caffe2.fmt`.

use tensorfmt::generated::caffe2_lmdb::messages::{
    BlobProto, DeviceOption, Segment, TensorProto, TensorProtos,
};
use tensorfmt::prost::Message;
use tensorfmt::runtime::kv::{self, Db, Mode};
use tensorfmt::TensorFile;

fn f32_chunk(name: &str, dims: &[i64], begin: i64, vals: &[f32]) -> BlobProto {
    BlobProto {
        name: Some(name.into()),
        r#type: Some("Tensor".into()),
        tensor: Some(TensorProto {
            dims: dims.to_vec(),
            data_type: Some(1),
            float_data: vals.to_vec(),
            name: Some(name.into()),
            device_detail: Some(DeviceOption {
                device_type: Some(0),
                ..Default::default()
            }),
            segment: Some(Segment {
                begin,
                end: begin + vals.len() as i64,
            }),
            data_format: Some(0),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Records of a small weight DB: `w` in three chunks out of order, `b` (int8 in
/// int32_data) whole, a string blob, and a dataset record.
fn records() -> Vec<(Vec<u8>, Vec<u8>)> {
    let w: Vec<f32> = (0..10).map(|i| i as f32 * 0.5).collect();
    let mut out = vec![
        (
            b"w#%2".to_vec(),
            f32_chunk("w", &[2, 5], 8, &w[8..]).encode_to_vec(),
        ),
        (
            b"w#%0".to_vec(),
            f32_chunk("w", &[2, 5], 0, &w[..4]).encode_to_vec(),
        ),
    ];
    let b = BlobProto {
        name: Some("b".into()),
        r#type: Some("Tensor".into()),
        tensor: Some(TensorProto {
            dims: vec![3],
            data_type: Some(7),
            int32_data: vec![-1, 127, -128],
            segment: Some(Segment { begin: 0, end: 3 }),
            ..Default::default()
        }),
        ..Default::default()
    };
    out.push((b"b#%0".to_vec(), b.encode_to_vec()));
    out.push((
        b"w#%1".to_vec(),
        f32_chunk("w", &[2, 5], 4, &w[4..8]).encode_to_vec(),
    ));
    let s = BlobProto {
        name: Some("note".into()),
        r#type: Some("std::string".into()),
        content: Some(b"hello".to_vec()),
        ..Default::default()
    };
    out.push((b"note".to_vec(), s.encode_to_vec()));
    let rec = TensorProtos {
        protos: vec![TensorProto {
            dims: vec![2],
            data_type: Some(10),
            int64_data: vec![7, -9],
            ..Default::default()
        }],
    };
    out.push((b"00000001".to_vec(), rec.encode_to_vec()));
    out
}

fn check(path: &std::path::Path, format: &str) {
    let f = TensorFile::open(path).unwrap_or_else(|e| panic!("{format}: {e}"));
    assert_eq!(f.format(), format);
    let names: Vec<&str> = f.tensors().iter().map(|t| t.name.as_str()).collect();
    let w = f.load("w").unwrap();
    let want: Vec<u8> = (0..10)
        .flat_map(|i| (i as f32 * 0.5).to_le_bytes())
        .collect();
    assert_eq!(w.data.as_bytes(), want.as_slice(), "{format}");
    assert_eq!(w.info.shape, [2, 5]);
    let b = f.load("b").unwrap();
    assert_eq!(b.data.as_bytes(), [0xff, 0x7f, 0x80]);
    let r = f.load("00000001/0").unwrap();
    assert_eq!(
        r.data.as_bytes(),
        [7i64.to_le_bytes(), (-9i64).to_le_bytes()].concat()
    );
    assert_eq!(names.len(), 3, "{names:?}");
}

#[test]
fn minidb_lmdb_and_leveldb_read_alike() {
    let tmp = tempfile::tempdir().unwrap();
    let recs = records();
    let mut mini = Vec::new();
    for (k, v) in &recs {
        mini.extend((k.len() as i32).to_le_bytes());
        mini.extend((v.len() as i32).to_le_bytes());
        mini.extend(k);
        mini.extend(v);
    }
    let p = tmp.path().join("w.minidb");
    std::fs::write(&p, &mini).unwrap();
    check(&p, "caffe2-minidb");

    let p = tmp.path().join("lmdb");
    let mut db = kv::lmdb::open(&p, Mode::New).unwrap();
    {
        let mut t = db.transaction().unwrap();
        for (k, v) in &recs {
            t.put(k, v).unwrap();
        }
        t.commit().unwrap();
    }
    Box::new(db).close().unwrap();
    check(&p, "caffe2-lmdb");

    let p = tmp.path().join("leveldb");
    let mut db = kv::leveldb::open(&p, Mode::New).unwrap();
    {
        let mut t = db.transaction().unwrap();
        for (k, v) in &recs {
            t.put(k, v).unwrap();
        }
        t.commit().unwrap();
    }
    Box::new(db).close().unwrap();
    check(&p, "caffe2-leveldb");
}

fn minidb(records: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (k, v) in records {
        out.extend((k.len() as i32).to_le_bytes());
        out.extend((v.len() as i32).to_le_bytes());
        out.extend(k);
        out.extend(v);
    }
    out
}

fn open_err(path: &std::path::Path) -> String {
    tensorfmt_tests::open_err_as(path, "caffe2-minidb")
}

#[test]
fn damaged_minidbs_give_clear_errors_with_the_record_and_offset() {
    let tmp = tempfile::tempdir().unwrap();
    let good = minidb(&records());
    let p = tmp.path().join("bad.minidb");
    // Every truncation: an error (or, cut between records, fewer records), never a panic.
    for cut in 1..good.len() {
        std::fs::write(&p, &good[..cut]).unwrap();
        let _ = TensorFile::open(&p)
            .map(|f| f.read_all(&mut tensorfmt::runtime::hash::HashSink::new()));
    }
    std::fs::write(&p, &good[..good.len() - 5]).unwrap();
    let e = open_err(&p);
    assert!(
        e.contains("bad.minidb") && e.contains("record 5") && e.contains("byte"),
        "{e}"
    );
    // Zero and negative lengths, and a length beyond the file.
    let mut bad = good.clone();
    bad[0..4].copy_from_slice(&0i32.to_le_bytes());
    std::fs::write(&p, &bad).unwrap();
    let e = open_err(&p);
    assert!(e.contains("key_len") && e.contains("record 0"), "{e}");
    bad[0..4].copy_from_slice(&(-1i32).to_le_bytes());
    std::fs::write(&p, &bad).unwrap();
    assert!(open_err(&p).contains("key_len"));
    let mut bad = good.clone();
    bad[4..8].copy_from_slice(&i32::MAX.to_le_bytes());
    std::fs::write(&p, &bad).unwrap();
    let e = open_err(&p);
    assert!(e.contains("value") && e.contains("truncated"), "{e}");
    // An undecodable value under a blob key names the key.
    std::fs::write(&p, minidb(&[(b"w#%0".to_vec(), vec![0x0a, 0xff, 0xff])])).unwrap();
    let e = open_err(&p);
    assert!(e.contains("w#%0"), "{e}");
    // Elements that do not fill the dims.
    let mut short = f32_chunk("w", &[3], 0, &[1.0, 2.0]);
    short.tensor.as_mut().unwrap().segment = None;
    std::fs::write(&p, minidb(&[(b"w#%0".to_vec(), short.encode_to_vec())])).unwrap();
    let e = open_err(&p);
    assert!(
        e.contains('w') && (e.contains("bytes") || e.contains("size")),
        "{e}"
    );
    // A missing chunk, and one given twice.
    let a = f32_chunk("w", &[4], 0, &[1.0, 2.0]);
    std::fs::write(&p, minidb(&[(b"w#%0".to_vec(), a.encode_to_vec())])).unwrap();
    assert!(open_err(&p).contains("Data size mismatch for blob w. Expected: 4 Read: 2"));
    std::fs::write(
        &p,
        minidb(&[
            (b"w#%0".to_vec(), a.encode_to_vec()),
            (
                b"w#%1".to_vec(),
                f32_chunk("w", &[4], 2, &[3.0, 4.0]).encode_to_vec(),
            ),
            (
                b"w#%1".to_vec(),
                f32_chunk("w", &[4], 2, &[3.0, 4.0]).encode_to_vec(),
            ),
        ]),
    )
    .unwrap();
    let e = open_err(&p);
    assert!(
        e.contains("Found an extra part for an already filled tensor: w") && e.contains("w#%1"),
        "{e}"
    );
}

/// A FLOAT blob serialized as FMT_BFLOAT16 (`raw_data` holding bfloat16), in `parts`
/// chunks, with `data_type` and `data_format` as given.
fn bf16_blob(data_type: i32, data_format: u32, raw: &[u8], begin: i64, dims: &[i64]) -> Vec<u8> {
    BlobProto {
        name: Some("h".into()),
        r#type: Some("Tensor".into()),
        tensor: Some(TensorProto {
            dims: dims.to_vec(),
            data_type: Some(data_type),
            raw_data: Some(raw.to_vec()),
            segment: Some(Segment {
                begin,
                end: begin + raw.len() as i64 / 2,
            }),
            data_format: Some(data_format),
            ..Default::default()
        }),
        ..Default::default()
    }
    .encode_to_vec()
}

#[test]
fn fmt_bfloat16_reads_as_caffe2_load_widens_it() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("h.minidb");
    let values = [1.0f32, -2.5, 3.140625, f32::INFINITY, -0.0, 1.0e-38];
    let raw: Vec<u8> = values
        .iter()
        .flat_map(|v| {
            let b = v.to_bits().to_le_bytes();
            [b[2], b[3]]
        })
        .collect();
    let widened: Vec<u8> = values
        .iter()
        .flat_map(|v| f32::from_bits(v.to_bits() & 0xffff_0000).to_le_bytes())
        .collect();
    // Whole, and in two chunks out of order (each chunk widened on its own).
    for records in [
        vec![(b"h#%0".to_vec(), bf16_blob(1, 1, &raw, 0, &[2, 3]))],
        vec![
            (b"h#%1".to_vec(), bf16_blob(1, 1, &raw[6..], 3, &[2, 3])),
            (b"h#%0".to_vec(), bf16_blob(1, 1, &raw[..6], 0, &[2, 3])),
        ],
    ] {
        std::fs::write(&p, minidb(&records)).unwrap();
        let f = TensorFile::open(&p).unwrap();
        let t = f.load("h").unwrap();
        assert_eq!(
            (t.info.dtype, &t.info.shape[..]),
            (tensorfmt::DType::F32, &[2u64, 3][..])
        );
        assert_eq!(t.data.as_bytes(), widened.as_slice());
        assert_eq!(t.info.location.len(), 24);
    }
    // What Caffe2's Load refuses: FMT_BFLOAT16 for a type other than FLOAT, a format
    // number it does not know, and bfloat16 bytes that are not whole elements.
    for (data_type, data_format, raw, want) in [
        (2, 1, &raw[..], "bf16 read as i32"),
        (1, 2, &raw[..], "data_format"),
        (1, 1, &raw[..5], "not a whole number of bf16"),
    ] {
        let dims = [raw.len() as i64 / 2];
        std::fs::write(
            &p,
            minidb(&[(
                b"h#%0".to_vec(),
                bf16_blob(data_type, data_format, raw, 0, &dims),
            )]),
        )
        .unwrap();
        let e = match TensorFile::open(&p).and_then(|f| f.load("h")) {
            Ok(t) => panic!(
                "format {data_format}, type {data_type}: read as {:?}",
                t.info.dtype
            ),
            Err(e) => e.to_string(),
        };
        assert!(e.contains("h.minidb") && e.contains(want), "{e}");
    }
}
