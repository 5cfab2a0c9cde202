//! Object storage (`tensorfmt::object`, the `s3` feature) against a real S3-protocol
//! server on 127.0.0.1 (`tensorfmt_tests::s3`: s3s-fs, in process): files the real tools
//! made, uploaded as they are, read from the store as from disk; every format's writer
//! saves to the store and reads back the same; indexing a checkpoint costs a few ranged
//! requests, not the object; a sharded checkpoint's index in the store opens with its
//! shards; a torch.distributed checkpoint in the store is read in place, a rank's slice
//! fetching only its own `.distcp` ranges; a save killed at any moment of its upload leaves the previous object whole.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use tensorfmt::{DType, TensorFile, TensorMeta};
use tensorfmt_tests::kill::{Harness, Rng};
use tensorfmt_tests::s3::server;
use tensorfmt_tests::{cli, fixtures, inspect_json, json, meta, tensors_by_name};

/// Uploads the local file `path` as it is to `url`.
fn put(path: &Path, url: &str) {
    let mut up = tensorfmt::object::Upload::create(url).unwrap();
    std::io::Write::write_all(&mut up, &std::fs::read(path).unwrap()).unwrap();
    up.commit().unwrap();
}

fn inspect_url(url: &str) -> serde_json::Value {
    let (code, out) = cli(&["inspect", "--json", "--sha256", url]);
    assert_eq!(code, ExitCode::SUCCESS, "inspect {url}");
    json(&out)
}

/// Files of every readable format, as the real tools wrote them.
fn made_by_the_tools() -> Vec<PathBuf> {
    let f = fixtures();
    vec![
        f.join("npy/dtype_f32.npy"),
        f.join("npy/fortran_2d_be.npy"),
        f.join("npz/savez_compressed.npz"),
        f.join("pytorch/checkpoint_adam.pt"),
        f.join("pytorch/legacy.pt"),
        f.join("pytorch/torchscript.pt"),
        f.join("onnx/mlp.onnx"),
        f.join("safetensors/all_dtypes.safetensors"),
        f.join("numpy_pickle/detectron_py2.pkl"),
        f.join("caffe2/dataset.minidb"),
    ]
}

#[test]
fn files_the_tools_made_read_from_the_store_as_from_disk() {
    let s3 = server();
    for (i, path) in made_by_the_tools().iter().enumerate() {
        let name = path.file_name().unwrap().to_str().unwrap();
        let url = s3.url(&format!("made/{i}/{name}"));
        put(path, &url);
        assert_eq!(inspect_url(&url), inspect_json(path), "{name}");
    }
}

#[test]
fn every_writer_saves_to_the_store() {
    let s3 = server();
    let source = fixtures().join("pytorch/checkpoint_adam.pt");
    let want = tensors_by_name(&inspect_json(&source));
    for ext in ["npz", "pt", "safetensors", "onnx", "pkl", "minidb", "npy"] {
        let input = if ext == "npy" {
            fixtures().join("npy/dtype_f64.npy")
        } else {
            source.clone()
        };
        let url = s3.url(&format!("written/out.{ext}"));
        let (code, out) = cli(&["convert", input.to_str().unwrap(), &url]);
        assert_eq!(code, ExitCode::SUCCESS, "{ext}: {out}");
        let got = inspect_url(&url);
        if ext == "npy" {
            // An npy's tensor is named by its file's stem.
            let mut want = inspect_json(&input)["tensors"][0].clone();
            want["name"] = "out".into();
            assert_eq!(got["tensors"][0], want);
        } else {
            assert_eq!(tensors_by_name(&got), want, "{ext}");
        }
        // The object is what a local save writes: the bytes were uploaded whole.
        let local = tempfile::tempdir().unwrap();
        let copy = local.path().join(format!("out.{ext}"));
        let (code, _) = cli(&["convert", &url, copy.to_str().unwrap()]);
        assert_eq!(code, ExitCode::SUCCESS);
        assert_eq!(tensors_by_name(&inspect_json(&copy)), tensors_by_name(&got));
    }
    // Converting between two objects.
    let a = s3.url("written/out.safetensors");
    let b = s3.url("written/again.pt");
    let (code, _) = cli(&["convert", &a, &b]);
    assert_eq!(code, ExitCode::SUCCESS);
    assert_eq!(tensors_by_name(&inspect_url(&b)), want);
}

/// A checkpoint of `n` tensors of `elems` f32 each, saved locally.
fn big_checkpoint(dir: &Path, n: usize, elems: usize) -> PathBuf {
    let path = dir.join("big.pt");
    let data: Vec<u8> = (0..elems * 4).map(|i| (i % 251) as u8).collect();
    let tensors: Vec<(TensorMeta, &[u8])> = (0..n)
        .map(|i| {
            (
                meta(&format!("layers.{i}.weight"), DType::F32, &[elems as u64]),
                &data[..],
            )
        })
        .collect();
    tensorfmt::save(&path, None, tensors, &Default::default()).unwrap();
    path
}

#[test]
fn indexing_costs_a_few_requests_and_reading_is_ranged() {
    let s3 = server();
    let tmp = tempfile::tempdir().unwrap();
    // 300 tensors of 256 KiB: 75 MiB.
    let local = big_checkpoint(tmp.path(), 300, 1 << 16);
    let size = std::fs::metadata(&local).unwrap().len();
    let url = s3.url("ranged/big.pt");
    put(&local, &url);
    let (file, stats) = tensorfmt::object::open(&url, &Default::default()).unwrap();
    assert_eq!(file.tensors().len(), 300);
    let (requests, bytes) = (stats.requests(), stats.bytes());
    println!("index: {requests} requests, {bytes} of {size} bytes");
    assert!(requests <= 4, "{requests} requests to index");
    assert!(bytes <= 1 << 20, "{bytes} bytes read to index");
    // One tensor: its bytes (and a window after them), not the object.
    let t = file.load("layers.150.weight").unwrap();
    assert_eq!(t.data.as_bytes().len(), 1 << 18);
    assert!(
        stats.bytes() < bytes + (80 << 20).min(size),
        "{}",
        stats.bytes()
    );
    // Every tensor, with the CRC-32s checked: the same digests as from disk.
    let from_disk = inspect_json(&local);
    assert_eq!(inspect_url(&url), from_disk);
    let (_, read_all) = tensorfmt::object::open(&url, &Default::default()).unwrap();
    let whole = TensorFile::open(&url).unwrap();
    let mut sink = tensorfmt::runtime::hash::HashSink::new();
    whole.read_all(&mut sink).unwrap();
    drop(read_all);
}

#[test]
fn a_dcp_checkpoint_in_the_store_is_read_in_place_by_ranges() {
    let s3 = server();
    let tmp = tempfile::tempdir().unwrap();
    // 8 tensors of 1024 x 1024 f32 (4 MiB each), saved as 4 ranks do: each rank's file
    // holds a quarter of every tensor's rows.
    let data: Vec<u8> = (0..4usize << 20).map(|i| (i % 253) as u8).collect();
    let tensors: Vec<(TensorMeta, &[u8])> = (0..8)
        .map(|i| (meta(&format!("w{i}"), DType::F32, &[1024, 1024]), &data[..]))
        .collect();
    let pt = tmp.path().join("w.pt");
    tensorfmt::save(&pt, None, tensors, &Default::default()).unwrap();
    let local = tmp.path().join("ckpt");
    let (code, text) = cli(&[
        "convert",
        pt.to_str().unwrap(),
        local.to_str().unwrap(),
        "--to",
        "torch-dcp",
        "--world-size",
        "4",
    ]);
    assert_eq!(code, ExitCode::SUCCESS, "{text}");
    let url = s3.url("dcp/ranged");
    put_folder(&local, &url);
    let total: u64 = std::fs::read_dir(&local)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();

    let (file, stats) = tensorfmt::object::open(&url, &Default::default()).unwrap();
    assert_eq!(file.format(), "torch-dcp");
    assert_eq!(file.tensors().len(), 8);
    let indexed = stats.bytes();
    assert!(indexed < 1 << 20, "{indexed} bytes read to index");
    // Rank 0's rows of one tensor: from rank 0's file only.
    let info = file.tensor("w5").unwrap().clone();
    let slice = file.load_slice(&info, &[0, 0], &[256, 1024]).unwrap();
    let disk = TensorFile::open(&local).unwrap();
    let want = disk
        .load_slice(disk.tensor("w5").unwrap(), &[0, 0], &[256, 1024])
        .unwrap();
    assert_eq!(slice.data.as_bytes(), want.data.as_bytes());
    assert_eq!(&slice.data.as_bytes()[..1 << 20], &data[..1 << 20]);
    let (requests, bytes) = (stats.requests(), stats.bytes());
    println!("dcp slice: {requests} requests, {bytes} of {total} bytes");
    assert!(bytes < total / 2, "{bytes} of {total} bytes for a slice");
    assert!(requests <= 12, "{requests} requests for a slice");
    // The whole checkpoint, values and structure included: what it is on disk.
    assert_eq!(inspect_url(&url), inspect_json(&local));
}

#[test]
fn a_sharded_checkpoint_in_the_store_opens_by_its_index() {
    let s3 = server();
    let folder = fixtures().join("sharded/safetensors_shards");
    for e in std::fs::read_dir(&folder).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        put(&e.path(), &s3.url(&format!("sharded/{name}")));
    }
    let want = json(
        &std::fs::read_to_string(fixtures().join("sharded/expected/safetensors_shards.json"))
            .unwrap(),
    );
    assert_eq!(
        inspect_url(&s3.url("sharded/model.safetensors.index.json")),
        want
    );
    // An index naming a shard outside its folder is refused.
    let tmp = tempfile::tempdir().unwrap();
    let bad = tmp.path().join("model.safetensors.index.json");
    std::fs::write(
        &bad,
        b"{\"weight_map\": {\"w\": \"../secret.safetensors\"}}",
    )
    .unwrap();
    put(&bad, &s3.url("bad/model.safetensors.index.json"));
    let e = TensorFile::open(s3.url("bad/model.safetensors.index.json"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("not a path inside the folder"), "{e}");
}

#[test]
fn missing_objects_and_unknown_schemes_are_clear_errors() {
    let s3 = server();
    let e = TensorFile::open(s3.url("nothing/here.pt"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("not found") && e.contains("nothing/here.pt"),
        "{e}"
    );
    let e = TensorFile::open("ftp://host/x.pt").unwrap_err().to_string();
    assert!(e.contains("ftp:// locations"), "{e}");
}

// ---------------------------------------------------------------------------------------
// A save killed during its upload.

const JOB: &str = "S3_CRASH_CHILD";
const HARNESS: Harness = Harness {
    job: JOB,
    dir: "S3_CRASH_DIR",
    first: "S3_CRASH_FIRST",
};
const LEN: usize = 3 << 20;

/// Generation `g`: `gen` and a 12 MiB tensor of its bytes.
fn generation(g: i64) -> Vec<(TensorMeta, Vec<u8>)> {
    vec![
        (meta("gen", DType::I64, &[1]), g.to_le_bytes().to_vec()),
        (
            meta("a", DType::F32, &[LEN as u64]),
            vec![(g % 251) as u8; LEN * 4],
        ),
    ]
}

/// The child: saves generation after generation to the object the parent names.
#[test]
fn child() {
    let Ok(url) = std::env::var(JOB) else {
        return;
    };
    let first: i64 = std::env::var("S3_CRASH_FIRST").unwrap().parse().unwrap();
    println!("ready");
    for g in first.. {
        println!("start {g}");
        let t = generation(g);
        let refs: Vec<(TensorMeta, &[u8])> = t.iter().map(|(m, b)| (m.clone(), &b[..])).collect();
        tensorfmt::save(&url, None, refs, &Default::default()).unwrap();
        println!("committed {g}");
    }
}

#[cfg(unix)]
#[test]
fn a_killed_upload_leaves_the_previous_object_whole() {
    let s3 = server();
    let url = s3.url("crash/out.pt");
    let dir = tempfile::tempdir().unwrap();
    let seed: u64 = tensorfmt_tests::run_seed().parse().unwrap();
    let mut rng = Rng(seed | 1);
    // The child's job is the URL (its environment points at this process's server).
    let one = HARNESS.one_save(&url);
    let (mut committed, mut started) = (None, None);
    let mut first = 0;
    let (mut old, mut new) = (0, 0);
    for kill in 0..4 {
        let delay = Duration::from_millis(rng.between(5, (3 * one.as_millis() as u64).max(150)));
        let p = HARNESS.run_and_kill(&url, dir.path(), first, delay);
        started = p.started.or(started);
        committed = p.committed.or(committed);
        match TensorFile::open(&url) {
            Ok(f) => {
                let g =
                    i64::from_le_bytes(f.load("gen").unwrap().data.as_bytes().try_into().unwrap());
                let a = f.load("a").unwrap();
                assert!(
                    a.data.as_bytes() == &generation(g)[1].1[..],
                    "kill {kill}: the object mixes saves"
                );
                let lo = committed.unwrap_or(i64::MIN);
                assert!(
                    (lo..=started.unwrap()).contains(&g),
                    "kill {kill}: generation {g}"
                );
                if Some(g) == committed {
                    old += 1
                } else {
                    new += 1
                }
            }
            Err(e) => {
                assert_eq!(committed, None, "kill {kill}: {e}");
                old += 1;
            }
        }
        first = started.map_or(0, |s| s + 1);
    }
    println!("s3 upload: 4 kills: old {old} new {new} mix 0, one save {one:?}");
}

/// Uploads every file of the local folder `dir` under `url`.
fn put_folder(dir: &Path, url: &str) {
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        if e.file_type().unwrap().is_file() {
            put(&e.path(), &format!("{url}/{name}"));
        }
    }
}

#[test]
fn folder_formats_round_trip_through_the_store() {
    let s3 = server();
    let source = fixtures().join("pytorch/checkpoint_adam.pt");
    let want = tensors_by_name(&inspect_json(&source));
    // Folders the tools made, uploaded file by file, read by their folder's URL.
    for (folder, name) in [
        (fixtures().join("dcp/world4"), "world4"),
        (fixtures().join("caffe2/weights.lmdb"), "weights.lmdb"),
        (fixtures().join("caffe2/weights.leveldb"), "weights.leveldb"),
    ] {
        let url = s3.url(&format!("folders/made/{name}"));
        put_folder(&folder, &url);
        assert_eq!(inspect_url(&url), inspect_json(&folder), "{name}");
        assert_eq!(
            inspect_url(&format!("{url}/")),
            inspect_json(&folder),
            "{name}/"
        );
    }
    // Folders tensorfmt writes to the store: a DCP checkpoint of 2 ranks, databases, a
    // sharded checkpoint.
    for (out, extra) in [
        (
            "folders/written/ckpt",
            &["--to", "torch-dcp", "--world-size", "2"][..],
        ),
        ("folders/written/w.lmdb", &["--to", "caffe2-lmdb"][..]),
        ("folders/written/w.leveldb", &["--to", "caffe2-leveldb"][..]),
        (
            "folders/written/sharded/model.safetensors.index.json",
            &["--max-shard-size", "40"][..],
        ),
    ] {
        let url = s3.url(out);
        let args = [
            &["convert", source.to_str().unwrap(), url.as_str()][..],
            extra,
        ]
        .concat();
        let (code, text) = cli(&args);
        assert_eq!(code, ExitCode::SUCCESS, "{out}: {text}");
        assert_eq!(tensors_by_name(&inspect_url(&url)), want, "{out}");
    }
    // The checkpoints' files are all there: the shards the index names, DCP's metadata.
    assert!(s3.file("folders/written/ckpt/.metadata").exists());
    let index = json(
        &std::fs::read_to_string(s3.file("folders/written/sharded/model.safetensors.index.json"))
            .unwrap(),
    );
    let shards: std::collections::BTreeSet<&str> = index["weight_map"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(shards.len() > 1, "{shards:?}");
    for shard in shards {
        assert!(
            s3.file(&format!("folders/written/sharded/{shard}"))
                .exists(),
            "{shard}"
        );
    }
}
