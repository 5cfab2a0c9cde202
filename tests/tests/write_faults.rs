//! A failing disk: every write, fsync and rename of a save is made to fail in turn
//! (`ENOSPC`, then `EIO`, through the output layer's fault injection), for each writer;
//! each failure must be an error naming the file, leaving the old output as it was and
//! nothing beside it. One test function: the injection is process-wide.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tensorfmt::caffe2::{self, CheckpointOptions};
use tensorfmt::{DType, ExternalData, Saver, TensorMeta, WriteOptions};
use tensorfmt_runtime::output::fault;
use tensorfmt_tests::meta;

/// Linux's `ENOSPC` and `EIO`.
const ENOSPC: i32 = 28;
const EIO: i32 = 5;

/// Every entry under `dir` with its bytes (folders as `None`), not following links.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Option<Vec<u8>>> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            out.insert(e.path(), None);
            out.extend(snapshot(&e.path()));
        } else {
            out.insert(e.path(), Some(std::fs::read(e.path()).unwrap()));
        }
    }
    out
}

/// Saves generation `g` to `dir` with `writer`; returns what errors must name.
fn save(writer: &str, dir: &Path, g: u8) -> (tensorfmt::Result<()>, &'static str) {
    let tensors: Vec<(TensorMeta, Vec<u8>)> = vec![
        (meta("gen", DType::U8, &[1]), vec![g]),
        (meta("a", DType::F32, &[70_000]), vec![g; 280_000]),
        (meta("b", DType::U8, &[5000]), vec![g.wrapping_mul(7); 5000]),
    ];
    if writer == "checkpoint" {
        let refs: Vec<(TensorMeta, &[u8])> =
            tensors.iter().map(|(m, b)| (m.clone(), &b[..])).collect();
        let opts = CheckpointOptions {
            pattern: dir.join("ckpt_%d").to_string_lossy().into_owned(),
            keep_last: Some(1),
            ..Default::default()
        };
        let r = caffe2::checkpoint("lmdb", 7, &refs, &opts).map(|_| ());
        return (r, "ckpt_7");
    }
    let (name, format, external) = match writer {
        "npy" => ("out.npy", "npy", ExternalData::Auto),
        "npz" => ("out.npz", "npz", ExternalData::Auto),
        "pt" => ("out.pt", "pytorch", ExternalData::Auto),
        "safetensors" => ("out.safetensors", "safetensors", ExternalData::Auto),
        "onnx" => ("out.onnx", "onnx", ExternalData::one_file()),
        "onnx-per-tensor" => ("out.onnx", "onnx", ExternalData::per_tensor()),
        "lmdb" => ("out.lmdb", "caffe2-lmdb", ExternalData::Auto),
        _ => ("out.leveldb", "caffe2-leveldb", ExternalData::Auto),
    };
    let options = WriteOptions {
        external,
        ..Default::default()
    };
    let r = (|| {
        let mut s = Saver::create(dir.join(name), Some(format), &options)?;
        for (m, b) in &tensors {
            if writer == "npy" && m.name != "a" {
                continue;
            }
            s.add_bytes(m, b)?;
        }
        s.commit()
    })();
    (r, name)
}

#[test]
fn every_failing_write_fsync_and_rename_is_an_error_that_leaves_nothing() {
    let mut report = Vec::new();
    for writer in [
        "npy",
        "npz",
        "pt",
        "safetensors",
        "onnx",
        "onnx-per-tensor",
        "lmdb",
        "leveldb",
        "checkpoint",
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let (r, _) = save(writer, dir, 1);
        r.unwrap();
        for (g, (code, what)) in (2..).zip([(ENOSPC, "ENOSPC"), (EIO, "EIO")]) {
            let before = snapshot(dir);
            let mut failures = 0;
            for n in 1.. {
                assert!(n < 10_000, "{writer}: the save never ends");
                fault::arm(n, code);
                let (r, name) = save(writer, dir, g);
                let (_, injected) = fault::disarm();
                if !injected {
                    r.unwrap_or_else(|e| panic!("{writer}: {e}"));
                    break;
                }
                failures += 1;
                let e = match r {
                    Ok(()) => panic!("{writer} {what} at operation {n}: the save succeeded"),
                    Err(e) => e.to_string(),
                };
                assert!(e.contains(name), "{writer} {what} at {n}: {e}");
                let after = snapshot(dir);
                assert!(
                    after == before,
                    "{writer} {what} at operation {n} ({e}): the folder changed: {:?} → {:?}",
                    before.keys().collect::<Vec<_>>(),
                    after.keys().collect::<Vec<_>>()
                );
            }
            assert!(failures > 1, "{writer}: {failures} failures injected");
            report.push(format!("{writer} {what}: {failures} failing operations"));
        }
    }
    println!("{}", report.join("\n"));
}
