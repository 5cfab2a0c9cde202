//! Caffe2's operations over its databases: Save → Load round trips of every dtype
//! through MiniDB, LMDB and LevelDB, chunked and not; every error case of Load; Save's
//! argument checks; Checkpoint's pattern, interval and pruning; DBExists; and the
//! prefetching input pipeline against a straightforward reference loop.

use std::path::Path;

use tensorfmt::caffe2::{self, ChunkSize, DbInput, DbInputOptions, LoadOptions, SaveOptions};
use tensorfmt::generated::caffe2_lmdb::messages::{BlobProto, Segment, TensorProto, TensorProtos};
use tensorfmt::prost::Message;
use tensorfmt::runtime::kv::{self, Db, Mode};
use tensorfmt::{DType, TensorMeta};
use tensorfmt_tests::meta;

use tensorfmt_tests::alloc;

#[global_allocator]
static GLOBAL: alloc::Counting = alloc::Counting;

const DBS: [&str; 3] = ["minidb", "lmdb", "leveldb"];

/// Deterministic bytes for every Caffe2 dtype (bool as 0/1), and a string tensor.
fn tensors() -> Vec<(TensorMeta, Vec<u8>)> {
    let mut out = Vec::new();
    let mut x: u32 = 12345;
    let mut next = move || {
        x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
        (x >> 8) as u8
    };
    for (i, d) in [
        DType::F32,
        DType::F64,
        DType::I32,
        DType::I64,
        DType::I16,
        DType::U16,
        DType::I8,
        DType::U8,
        DType::Bool,
        DType::F16,
        DType::BF16,
    ]
    .into_iter()
    .enumerate()
    {
        let shape = [2u64, 3 + i as u64];
        let n = (shape[0] * shape[1]) as usize * d.itemsize().unwrap();
        let mut b: Vec<u8> = (0..n).map(|_| next()).collect();
        if d == DType::Bool {
            b.iter_mut().for_each(|v| *v &= 1);
        }
        if matches!(d, DType::F32 | DType::F64 | DType::F16 | DType::BF16) {
            // Finite values (any bits would do for the bytes, but keep them ordinary).
            for c in b.chunks_mut(d.itemsize().unwrap()) {
                *c.last_mut().unwrap() &= 0x3f;
            }
        }
        out.push((meta(&format!("t_{d}"), d, &shape), b));
    }
    out.push((meta("scalar", DType::I64, &[]), 7i64.to_le_bytes().to_vec()));
    out.push((meta("empty", DType::F32, &[0, 4]), Vec::new()));
    let mut s = Vec::new();
    for w in ["a", "", "héllo", "x\0y"] {
        s.extend((w.len() as u64).to_le_bytes());
        s.extend(w.as_bytes());
    }
    out.push((meta("strings", DType::String, &[2, 2]), s));
    out
}

/// What Caffe2's Load gives for a tensor saved as `dtype` with bytes `b`: the same, but
/// bf16, stored as FMT_BFLOAT16, is widened to float32 (each bfloat16 the high half of
/// its float32).
fn as_loaded(dtype: DType, b: &[u8]) -> (DType, Vec<u8>) {
    if dtype != DType::BF16 {
        return (dtype, b.to_vec());
    }
    let wide = b.chunks(2).flat_map(|h| [0, 0, h[0], h[1]]).collect();
    (DType::F32, wide)
}

fn db_path(dir: &Path, db: &str) -> std::path::PathBuf {
    dir.join(format!("w.{db}"))
}

#[test]
fn save_then_load_round_trips_every_dtype_chunked_or_not() {
    let tmp = tempfile::tempdir().unwrap();
    let all = tensors();
    let refs: Vec<(TensorMeta, &[u8])> = all.iter().map(|(m, b)| (m.clone(), &b[..])).collect();
    let names: Vec<&str> = all.iter().map(|(m, _)| m.name.as_str()).collect();
    for db in DBS {
        for (i, chunk) in [
            ChunkSize::Default,
            ChunkSize::NoChunking,
            ChunkSize::Elements(4),
        ]
        .into_iter()
        .enumerate()
        {
            let p = db_path(tmp.path(), &format!("{db}{i}"));
            let opts = SaveOptions {
                chunk_size: chunk,
                ..Default::default()
            };
            caffe2::save(db, &p, &refs, &opts).unwrap_or_else(|e| panic!("{db} {chunk:?}: {e}"));
            let loaded = caffe2::load(db, &[&p], &names, &LoadOptions::default()).unwrap();
            assert_eq!(loaded.len(), all.len());
            for ((m, b), t) in all.iter().zip(&loaded) {
                assert_eq!(t.info.name, m.name);
                let (dtype, b) = as_loaded(m.dtype, b);
                assert_eq!(
                    (t.info.dtype, &t.info.shape),
                    (dtype, &m.shape),
                    "{db} {}",
                    m.name
                );
                // Strings come back as they are written: each a u64-LE length, then it.
                assert_eq!(t.data.as_bytes(), &b[..], "{db} {chunk:?} {}", m.name);
            }
            // Chunked: a 6-element tensor in parts of 4 is two records.
            if chunk == ChunkSize::Elements(4) && db == "minidb" {
                let f = tensorfmt::TensorFile::open(&p).unwrap();
                let t = f.tensor("t_f32").unwrap();
                assert!(matches!(&t.location, tensorfmt::DataLocation::Pieces(p) if p.len() == 2));
            }
        }
    }
}

#[test]
fn save_checks_its_arguments() {
    let tmp = tempfile::tempdir().unwrap();
    let b = [0u8; 8];
    let two = [
        (meta("model/a", DType::F32, &[2]), &b[..]),
        (meta("other/a", DType::F32, &[2]), &b[..]),
    ];
    let p = tmp.path().join("x.minidb");
    let e = caffe2::save(
        "minidb",
        &p,
        &two,
        &SaveOptions {
            strip_prefix: Some("/".into()),
            ..Default::default()
        },
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("Duplicated input: a"), "{e}");
    let e = caffe2::save(
        "minidb",
        &p,
        &two,
        &SaveOptions {
            blob_name_overrides: Some(vec!["x".into()]),
            ..Default::default()
        },
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("blob_name_overrides has 1 names for 2 inputs"),
        "{e}"
    );
    let e = caffe2::save("rocksdb", &p, &two, &Default::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("unknown db_type 'rocksdb'"), "{e}");
    // Overrides rename; strip_prefix keeps what follows the first occurrence.
    caffe2::save(
        "minidb",
        &p,
        &two,
        &SaveOptions {
            blob_name_overrides: Some(vec!["x".into(), "y".into()]),
            ..Default::default()
        },
    )
    .unwrap();
    let t = caffe2::load("minidb", &[&p], &["x", "y"], &Default::default()).unwrap();
    assert_eq!(t.len(), 2);
    // LMDB and LevelDB refuse to save over an existing database (NEW mode).
    for db in ["lmdb", "leveldb"] {
        let p = tmp.path().join(db);
        caffe2::save(db, &p, &two[..1], &Default::default()).unwrap();
        assert!(
            caffe2::save(db, &p, &two[..1], &Default::default()).is_err(),
            "{db}"
        );
    }
}

/// Writes `records` (key, value) into a new database of `db` at `p`.
fn write_db(db: &str, p: &Path, records: &[(Vec<u8>, Vec<u8>)]) {
    let desc = caffe2::db_format(db).unwrap().db.unwrap();
    let mut d: Box<dyn Db> = (desc.open)(p, Mode::New).unwrap();
    {
        let mut t = d.transaction().unwrap();
        for (k, v) in records {
            t.put(k, v).unwrap();
        }
        t.commit().unwrap();
    }
    d.close().unwrap();
}

fn part(name: &str, total: i64, begin: i64, end: i64, segment: bool) -> (Vec<u8>, Vec<u8>) {
    let b = BlobProto {
        name: Some(name.into()),
        r#type: Some("Tensor".into()),
        tensor: Some(TensorProto {
            dims: vec![total],
            data_type: Some(2),
            int32_data: (begin..end).map(|x| x as i32).collect(),
            segment: segment.then_some(Segment { begin, end }),
            ..Default::default()
        }),
        ..Default::default()
    };
    (format!("{name}#%{begin}").into_bytes(), b.encode_to_vec())
}

#[test]
fn every_load_error_of_caffe2_is_reproduced() {
    let tmp = tempfile::tempdir().unwrap();
    for db in DBS {
        let d = tmp.path().join(db);
        std::fs::create_dir_all(&d).unwrap();
        let err = |records: &[(Vec<u8>, Vec<u8>)], name: &str| {
            let p = d.join(format!("{name}.db"));
            write_db(db, &p, records);
            caffe2::load(db, &[&p], &["w"], &Default::default())
                .unwrap_err()
                .to_string()
        };
        let e = err(
            &[part("w", 4, 0, 4, true), part("w", 4, 2, 4, true)],
            "extra",
        );
        assert!(
            e.contains("Found an extra part for an already filled tensor: w"),
            "{db}: {e}"
        );
        let e = err(
            &[part("w", 4, 0, 3, true), part("w", 4, 1, 4, true)],
            "bigger",
        );
        assert!(
            e.contains("Tensor parts are bigger than target size for tensor: w"),
            "{db}: {e}"
        );
        let e = err(&[part("w", 6, 0, 3, true)], "mismatch");
        assert!(
            e.contains("Data size mismatch for blob w. Expected: 6 Read: 3"),
            "{db}: {e}"
        );
        let e = err(
            &[part("w", 4, 0, 2, true), part("w", 4, 2, 4, false)],
            "nosegment",
        );
        assert!(
            e.contains("Partial tensor must have a segment") || e.contains("Found an extra part"),
            "{db}: {e}"
        );
        let e = err(&[part("v", 2, 0, 2, true)], "missing");
        assert!(
            e.contains("Expected to load 1 blobs, got 0 only"),
            "{db}: {e}"
        );
        // Chunks in any order join.
        let p = d.join("ok.db");
        write_db(
            db,
            &p,
            &[
                part("w", 6, 4, 6, true),
                part("w", 6, 0, 2, true),
                part("w", 6, 2, 4, true),
            ],
        );
        let t = caffe2::load(db, &[&p], &["w"], &Default::default()).unwrap();
        let want: Vec<u8> = (0..6i32).flat_map(|x| x.to_le_bytes()).collect();
        assert_eq!(t[0].data.as_bytes(), &want[..]);
        // The same blob in two databases.
        let q = d.join("ok2.db");
        write_db(db, &q, &[part("w", 2, 0, 2, true)]);
        let e = caffe2::load(db, &[&p, &q], &["w"], &Default::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("Duplicate Key w is found!"), "{db}: {e}");
        // allow_incomplete: what is there is loaded.
        let opts = LoadOptions {
            allow_incomplete: true,
            ..Default::default()
        };
        let t = caffe2::load(db, &[&p], &["w", "nope"], &opts).unwrap();
        assert_eq!(t.len(), 1);
        // load_all: every blob; an output not among them is an error.
        let opts = LoadOptions {
            load_all: true,
            ..Default::default()
        };
        let t = caffe2::load(db, &[&q], &[], &opts).unwrap();
        assert_eq!(t[0].info.name, "w");
        let e = caffe2::load(db, &[&q], &["z"], &opts)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("Output blob name z does not exist in the db(s)."),
            "{e}"
        );
        // source_blob_names, prefixes, and the expected shape and dtype.
        let opts = LoadOptions {
            source_blob_names: Some(vec!["w".into()]),
            ..Default::default()
        };
        let t = caffe2::load(db, &[&q], &["renamed"], &opts).unwrap();
        assert_eq!(t[0].info.name, "renamed");
        let opts = LoadOptions {
            add_prefix: Some("gpu_0/".into()),
            ..Default::default()
        };
        assert_eq!(
            caffe2::load(db, &[&q], &["gpu_0/w"], &opts).unwrap().len(),
            1
        );
        let mut opts = LoadOptions::default();
        opts.expect.insert("w".into(), (DType::F32, vec![2]));
        let e = caffe2::load(db, &[&q], &["w"], &opts)
            .unwrap_err()
            .to_string();
        assert!(e.contains("blob w is i32 [2], expected f32 [2]"), "{e}");
    }
}

#[test]
fn checkpoint_formats_its_pattern_saves_the_counter_and_keeps_the_last() {
    assert_eq!(
        caffe2::format_pattern("c_%08d.db", 42).unwrap(),
        "c_00000042.db"
    );
    assert_eq!(
        caffe2::format_pattern("c_%d", 1 << 40).unwrap(),
        "c_1099511627776"
    );
    assert_eq!(caffe2::format_pattern("%-4d|%%", 7).unwrap(), "7   |%");
    assert_eq!(caffe2::format_pattern("%+05d", 7).unwrap(), "+0007");
    assert!(caffe2::format_pattern("%d_%d", 7).is_err());
    assert!(caffe2::format_pattern("no_conversion", 1).is_err());
    assert!(caffe2::format_pattern("%s", 1).is_err());
    let tmp = tempfile::tempdir().unwrap();
    let w = [1u8, 2, 3, 4];
    let t = [(meta("w", DType::U8, &[4]), &w[..])];
    for db in DBS {
        let pattern = tmp
            .path()
            .join(format!("{db}_%06d"))
            .to_string_lossy()
            .into_owned();
        let opts = caffe2::CheckpointOptions {
            pattern: pattern.clone(),
            every: 2,
            keep_last: Some(2),
            ..Default::default()
        };
        for it in 0..7 {
            let r = caffe2::checkpoint(db, it, &t, &opts).unwrap();
            assert_eq!(r.is_some(), it % 2 == 0, "{db} {it}");
        }
        let mut left: Vec<String> = std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(db))
            .collect();
        left.sort();
        assert_eq!(
            left,
            [format!("{db}_000004"), format!("{db}_000006")],
            "{db}"
        );
        let p = tmp.path().join(format!("{db}_000006"));
        let got = caffe2::load(db, &[&p], &["iter", "w"], &Default::default()).unwrap();
        assert_eq!(got[0].data.as_bytes(), 6i64.to_le_bytes());
        assert_eq!(got[0].info.shape, [1]);
        assert_eq!(got[1].data.as_bytes(), w);
    }
    let e = caffe2::checkpoint("minidb", 0, &t, &Default::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("integer conversion"), "{e}");
}

#[test]
fn db_exists_answers_for_known_types_and_refuses_unknown_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let w = [1u8];
    for db in DBS {
        let p = tmp.path().join(db);
        assert!(!caffe2::db_exists(db, &p).unwrap());
        caffe2::save(
            db,
            &p,
            &[(meta("w", DType::U8, &[1]), &w[..])],
            &Default::default(),
        )
        .unwrap();
        assert!(caffe2::db_exists(db, &p).unwrap(), "{db}");
    }
    assert!(caffe2::db_exists("zmqdb", tmp.path()).is_err());
}

/// A dataset of `n` records: an image-like u8 [3, 4, 4] and an i32 label each.
fn dataset(db: &str, p: &Path, n: usize) {
    let records: Vec<(Vec<u8>, Vec<u8>)> = (0..n)
        .map(|i| {
            let protos = TensorProtos {
                protos: vec![
                    TensorProto {
                        dims: vec![3, 4, 4],
                        data_type: Some(6),
                        byte_data: Some((0..48).map(|j| (i * 7 + j) as u8).collect()),
                        ..Default::default()
                    },
                    TensorProto {
                        dims: vec![],
                        data_type: Some(2),
                        int32_data: vec![i as i32],
                        ..Default::default()
                    },
                ],
            };
            (format!("{i:08}").into_bytes(), protos.encode_to_vec())
        })
        .collect();
    write_db(db, p, &records);
}

#[test]
fn the_input_pipeline_yields_what_a_reference_loop_yields() {
    let tmp = tempfile::tempdir().unwrap();
    for db in DBS {
        let p = tmp.path().join(format!("data.{db}"));
        dataset(db, &p, 23);
        let records = caffe2::dataset_records(&p).unwrap();
        assert_eq!(records.len(), 23);
        for num_shards in [1usize, 2, 3] {
            for shard_id in 0..num_shards {
                for batch in [0usize, 1, 4, 7] {
                    for prefetch in [0usize, 1, 3] {
                        let opts = DbInputOptions {
                            batch_size: batch,
                            num_shards,
                            shard_id,
                            prefetch,
                            epochs: Some(2),
                            outputs: Some(2),
                            ..Default::default()
                        };
                        let got: Vec<_> = DbInput::open(&p, &opts)
                            .unwrap()
                            .map(|b| b.unwrap())
                            .collect();
                        // The reference: the shard's records, two epochs, in batches.
                        let mine: Vec<usize> = (shard_id..23).step_by(num_shards).collect();
                        let order: Vec<usize> = mine.iter().chain(mine.iter()).copied().collect();
                        let per = batch.max(1);
                        let batches: Vec<&[usize]> = order.chunks_exact(per).collect();
                        assert_eq!(
                            got.len(),
                            batches.len(),
                            "{db} {num_shards}/{shard_id} b{batch} q{prefetch}"
                        );
                        for (b, want) in got.iter().zip(batches) {
                            for (slot, got_slot) in b.tensors.iter().enumerate() {
                                let bytes: Vec<u8> = want
                                    .iter()
                                    .flat_map(|&r| records[r][slot].data.as_bytes().to_vec())
                                    .collect();
                                assert_eq!(got_slot.data.as_bytes(), &bytes[..]);
                                if batch > 0 {
                                    let mut shape = vec![batch as u64];
                                    shape.extend(&records[want[0]][slot].info.shape);
                                    assert_eq!(got_slot.info.shape, shape);
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn the_pipeline_refuses_records_that_disagree() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("bad.minidb");
    let rec = |dims: Vec<i64>| {
        TensorProtos {
            protos: vec![TensorProto {
                dims: dims.clone(),
                data_type: Some(6),
                byte_data: Some(vec![0; dims.iter().product::<i64>() as usize]),
                ..Default::default()
            }],
        }
        .encode_to_vec()
    };
    write_db(
        "minidb",
        &p,
        &[(b"a".to_vec(), rec(vec![2])), (b"b".to_vec(), rec(vec![3]))],
    );
    let opts = DbInputOptions {
        batch_size: 2,
        prefetch: 1,
        ..Default::default()
    };
    let e = DbInput::open(&p, &opts)
        .unwrap()
        .next()
        .unwrap()
        .unwrap_err()
        .to_string();
    assert!(e.contains("every record of a batch must agree"), "{e}");
    let opts = DbInputOptions {
        num_shards: 2,
        shard_id: 2,
        ..Default::default()
    };
    assert!(DbInput::open(&p, &opts).is_err());
    let _ = kv::Mode::Read;
}

#[test]
fn batches_go_to_any_sink() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("d.lmdb");
    dataset("lmdb", &p, 5);
    let opts = DbInputOptions {
        batch_size: 2,
        ..Default::default()
    };
    let mut input = DbInput::open(&p, &opts).unwrap();
    let mut sink = tensorfmt::runtime::sink::OwnedSink::new();
    input.next_into(&mut sink).unwrap().unwrap();
    let got = sink.into_tensors();
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].info.shape, [2, 3, 4, 4]);
    assert_eq!(
        got[1].data.as_bytes(),
        [0i32.to_le_bytes(), 1i32.to_le_bytes()].concat()
    );
}

#[test]
fn recycled_buffers_give_the_same_batches() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("d.leveldb");
    dataset("leveldb", &p, 17);
    for prefetch in [0usize, 2] {
        let opts = DbInputOptions {
            batch_size: 4,
            prefetch,
            epochs: Some(3),
            ..Default::default()
        };
        let fresh: Vec<Vec<u8>> = DbInput::open(&p, &opts)
            .unwrap()
            .map(|b| b.unwrap().tensors[0].data.as_bytes().to_vec())
            .collect();
        let mut input = DbInput::open(&p, &opts).unwrap();
        let mut recycled = Vec::new();
        while let Some(b) = input.next() {
            let b = b.unwrap();
            recycled.push(b.tensors[0].data.as_bytes().to_vec());
            input.recycle(b);
        }
        assert_eq!(recycled, fresh, "prefetch {prefetch}");
        assert_eq!(fresh.len(), 17 * 3 / 4);
    }
}

/// A plain loop over the input (each batch dropped at the end of its iteration) reuses
/// the batches' buffers: after the first batches, reading allocates nothing the size of
/// a batch (the buffers of dropped batches go back to the pipeline).
#[test]
fn dropped_batches_give_their_buffers_back() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("d.lmdb");
    dataset("lmdb", &p, 40);
    // Output 0 of a batch: 64 records of 48 bytes.
    let batch_bytes = 64 * 48;
    for prefetch in [0usize, 1] {
        let opts = DbInputOptions {
            batch_size: 64,
            prefetch,
            epochs: Some(40),
            ..Default::default()
        };
        let mut input = DbInput::open(&p, &opts).unwrap();
        // The first batches, while buffers are in flight, allocate.
        for _ in 0..4 {
            input.next().unwrap().unwrap();
        }
        if prefetch == 0 {
            let (n, largest) = alloc::armed(|| {
                let mut n = 0;
                for b in input.by_ref() {
                    n += b.unwrap().tensors[0].info.shape[0];
                }
                n
            });
            assert_eq!(n, 40 * 40 / 64 * 64 - 4 * 64);
            assert!(
                largest < batch_bytes,
                "a batch-sized allocation ({largest} bytes) in the loop"
            );
        } else {
            // The reading thread takes the buffers back: the same few buffers all along.
            let mut seen = std::collections::HashSet::new();
            for b in input.by_ref() {
                seen.insert(b.unwrap().tensors[0].data.as_bytes().as_ptr() as usize);
            }
            assert!(seen.len() <= 8, "{} distinct buffers", seen.len());
        }
    }
}

/// A `std::string` blob; chunked ones keyed `<name>#%<chunk id>`.
fn object(key: &str, content: &[u8], chunks: Option<(i32, i32)>) -> (Vec<u8>, Vec<u8>) {
    let record_key = match chunks {
        Some((_, id)) => format!("{key}#%{id}"),
        None => key.to_string(),
    };
    let b = BlobProto {
        name: Some(key.into()),
        r#type: Some("std::string".into()),
        content: Some(content.to_vec()),
        content_num_chunks: chunks.map(|c| c.0),
        content_chunk_id: chunks.map(|c| c.1),
        ..Default::default()
    };
    (record_key.into_bytes(), b.encode_to_vec())
}

#[test]
fn blobs_that_are_not_tensors_load_as_strings_with_caffe2s_chunk_checks() {
    let tmp = tempfile::tempdir().unwrap();
    let string_tensor = |s: &[u8]| {
        let mut v = (s.len() as u64).to_le_bytes().to_vec();
        v.extend_from_slice(s);
        v
    };
    for db in DBS {
        let d = tmp.path().join(db);
        std::fs::create_dir_all(&d).unwrap();
        let p = d.join("ok.db");
        write_db(
            db,
            &p,
            &[
                object("note", b"hello", None),
                object("big", b"wor", Some((2, 1))),
                object("big", b"hel", Some((2, 0))),
                part("w", 2, 0, 2, true),
            ],
        );
        let got = caffe2::load(db, &[&p], &["note", "big", "w"], &Default::default()).unwrap();
        assert_eq!(got[0].info.dtype, DType::String);
        assert_eq!(got[0].info.shape, Vec::<u64>::new());
        assert_eq!(got[0].data.as_bytes(), string_tensor(b"hello"));
        assert_eq!(got[1].data.as_bytes(), string_tensor(b"helwor"), "{db}");
        let err = |records: &[(Vec<u8>, Vec<u8>)], name: &str, want: &[&str]| {
            let p = d.join(format!("{name}.db"));
            write_db(db, &p, records);
            caffe2::load(db, &[&p], want, &Default::default())
                .unwrap_err()
                .to_string()
        };
        // MiniDB keeps duplicate keys; LMDB and LevelDB keep the last value of a key.
        if db == "minidb" {
            let e = err(
                &[object("s", b"a", None), object("s", b"b", None)],
                "dup",
                &["s"],
            );
            assert!(e.contains("Blob duplicated: s"), "{e}");
            let e = err(
                &[
                    object("s", b"a", Some((2, 0))),
                    object("s", b"b", Some((2, 0))),
                ],
                "twice",
                &["s"],
            );
            assert!(
                e.contains("Chunk with the same id has occurred twice for: s"),
                "{e}"
            );
        }
        let e = err(&[object("s", b"a", Some((2, 5)))], "range", &["s"]);
        assert!(
            e.contains("chunk id 5 of s is not below its 2 chunks"),
            "{e}"
        );
        let e = err(&[object("s", b"a", Some((3, 0)))], "short", &["s"]);
        assert!(
            e.contains("Data size mismatch for blob s. Expected: 3 Read: 1"),
            "{e}"
        );
    }
}

/// A dataset whose float outputs are stored as FMT_BFLOAT16 is batched as Caffe2's
/// TensorProtosDBInput gives it: float32, each bfloat16 widened.
#[test]
fn bfloat16_dataset_records_are_batched_as_float32() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("bf.lmdb");
    let value = |i: usize, j: usize| (i * 4 + j) as f32 * 0.5 - 3.0;
    let records: Vec<(Vec<u8>, Vec<u8>)> = (0..6)
        .map(|i| {
            let raw: Vec<u8> = (0..4)
                .flat_map(|j| {
                    let b = value(i, j).to_bits().to_le_bytes();
                    [b[2], b[3]]
                })
                .collect();
            let protos = TensorProtos {
                protos: vec![TensorProto {
                    dims: vec![2, 2],
                    data_type: Some(1),
                    raw_data: Some(raw),
                    data_format: Some(1),
                    ..Default::default()
                }],
            };
            (format!("{i:08}").into_bytes(), protos.encode_to_vec())
        })
        .collect();
    write_db("lmdb", &p, &records);
    let opts = DbInputOptions {
        batch_size: 3,
        epochs: Some(1),
        ..Default::default()
    };
    let batches: Vec<_> = DbInput::open(&p, &opts)
        .unwrap()
        .map(|b| b.unwrap())
        .collect();
    assert_eq!(batches.len(), 2);
    for (k, b) in batches.iter().enumerate() {
        let t = &b.tensors[0];
        assert_eq!(
            (t.info.dtype, &t.info.shape[..]),
            (DType::F32, &[3u64, 2, 2][..])
        );
        // The values are exactly representable as bfloat16: widened, they are the same.
        let want: Vec<u8> = (0..3)
            .flat_map(|r| (0..4).flat_map(move |j| value(k * 3 + r, j).to_le_bytes()))
            .collect();
        assert_eq!(t.data.as_bytes(), &want[..], "batch {k}");
    }
}
