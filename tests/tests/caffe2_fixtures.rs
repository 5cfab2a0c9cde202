//! Caffe2 databases made by the real tools: every fixture (tests/fixtures/caffe2) and
//! databases made afresh each run read with the names, dtypes, shapes and hashes the
//! Python side computes; databases tensorfmt writes (Save, `convert`) are decoded by the
//! real `lmdb`, `plyvel` and protobuf and agree.

use std::path::{Path, PathBuf};

use tensorfmt_tests::{cli, fixtures, inspect_json, json, run_seed, tfcheck_caffe2};

fn dir() -> PathBuf {
    fixtures().join("caffe2")
}

const FIXTURES: &[(&str, &str)] = &[
    ("minidb", "weights.minidb"),
    ("lmdb", "weights.lmdb"),
    ("leveldb", "weights.leveldb"),
    ("lmdb", "dataset.lmdb"),
    ("leveldb", "dataset.leveldb"),
    ("minidb", "dataset.minidb"),
    ("minidb", "spec_example.minidb"),
];

/// A copy of a fixture to read (LevelDB writes into its folder when opened).
fn copy_of(src: &Path, tmp: &Path) -> PathBuf {
    let dst = tmp.join(src.file_name().unwrap());
    if src.is_dir() {
        std::fs::create_dir_all(&dst).unwrap();
        for e in std::fs::read_dir(src).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), dst.join(e.file_name())).unwrap();
        }
    } else {
        std::fs::copy(src, &dst).unwrap();
    }
    dst
}

#[test]
fn every_fixture_matches_the_python_side() {
    let tmp = tempfile::tempdir().unwrap();
    for (_, f) in FIXTURES {
        let expected = json(
            &std::fs::read_to_string(dir().join("expected").join(format!("{f}.json"))).unwrap(),
        );
        let p = copy_of(&dir().join(f), tmp.path());
        assert_eq!(inspect_json(&p), expected, "{f}");
    }
}

#[test]
fn unseen_databases_made_by_the_python_side_read_the_same() {
    let tmp = tempfile::tempdir().unwrap();
    let seed = run_seed();
    let listed = tfcheck_caffe2(&["make-random", tmp.path().to_str().unwrap(), &seed, "24"]);
    let mut n = 0;
    for line in listed.lines() {
        let (db, p) = line.split_once(' ').unwrap();
        let expected = json(&tfcheck_caffe2(&["describe", db, p]));
        assert_eq!(inspect_json(Path::new(p)), expected, "{p} (seed {seed})");
        n += 1;
    }
    assert_eq!(n, 24);
}

#[test]
fn databases_tensorfmt_writes_decode_the_same_in_python() {
    let tmp = tempfile::tempdir().unwrap();
    // Sources: the weight fixtures (every Caffe2 dtype, strings, bfloat16), and NumPy and
    // torch files of the dtypes Caffe2 has.
    let sources = [
        dir().join("weights.minidb"),
        fixtures().join("onnx/mlp.onnx"),
        fixtures().join("pytorch/parameters.pt"),
        fixtures().join("npy/be_i64.npy"),
        fixtures().join("npy/fortran_2d.npy"),
    ];
    for (i, src) in sources.iter().enumerate() {
        let expected = inspect_json(src)["tensors"].clone();
        for db in ["minidb", "lmdb", "leveldb"] {
            for chunk in [None, Some("3")] {
                let out = tmp
                    .path()
                    .join(format!("{i}-{db}-{}", chunk.unwrap_or("d")));
                let w = tensorfmt::TensorFile::open(src).unwrap();
                let all = w.load_all().unwrap();
                let metas: Vec<(tensorfmt::TensorMeta, &[u8])> = all
                    .iter()
                    .map(|t| {
                        (
                            tensorfmt::TensorMeta::from_info(&t.info).unwrap(),
                            t.data.as_bytes(),
                        )
                    })
                    .collect();
                let opts = tensorfmt::caffe2::SaveOptions {
                    chunk_size: match chunk {
                        Some(n) => tensorfmt::caffe2::ChunkSize::Elements(n.parse().unwrap()),
                        None => tensorfmt::caffe2::ChunkSize::Default,
                    },
                    ..Default::default()
                };
                tensorfmt::caffe2::save(db, &out, &metas, &opts)
                    .unwrap_or_else(|e| panic!("{} -> {db}: {e}", src.display()));
                let mut got = json(&tfcheck_caffe2(&["describe", db, out.to_str().unwrap()]));
                let mut want = expected.clone();
                // LMDB and LevelDB list in key order.
                let sort = |v: &mut serde_json::Value| {
                    v.as_array_mut()
                        .unwrap()
                        .sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()))
                };
                sort(&mut got["tensors"]);
                sort(&mut want);
                assert_eq!(got["tensors"], want, "{} as {db} {chunk:?}", src.display());
            }
        }
    }
    // And through the command line.
    let out = tmp.path().join("cli.lmdb");
    let (code, text) = cli(&[
        "convert",
        fixtures().join("onnx/mlp.onnx").to_str().unwrap(),
        out.to_str().unwrap(),
        "--to",
        "caffe2-lmdb",
    ]);
    assert_eq!(code, std::process::ExitCode::SUCCESS, "{text}");
    let got = json(&tfcheck_caffe2(&[
        "describe",
        "lmdb",
        out.to_str().unwrap(),
    ]));
    assert_eq!(got["tensors"].as_array().unwrap().len(), 4);
    let (code, _) = cli(&["verify", out.to_str().unwrap()]);
    assert_eq!(code, std::process::ExitCode::SUCCESS);
}

/// The rule for bf16 sources: a bf16 tensor written to a Caffe2 database is stored as
/// FMT_BFLOAT16 (nothing rounded), and reads back — in Python, as Caffe2's Load reads it,
/// and in tensorfmt — as f32 of the same values; `convert` reports the change.
#[test]
fn bf16_sources_are_stored_as_fmt_bfloat16_and_read_back_as_float32() {
    let tmp = tempfile::tempdir().unwrap();
    let bf16: Vec<u8> = [1.0f32, -2.5, 3.140625, 65280.0]
        .iter()
        .flat_map(|v| {
            let b = v.to_bits().to_le_bytes();
            [b[2], b[3]]
        })
        .collect();
    let widened: Vec<u8> = bf16.chunks(2).flat_map(|h| [0, 0, h[0], h[1]]).collect();
    let src = tmp.path().join("h.safetensors");
    std::fs::write(
        &src,
        tensorfmt_tests::safetensors_bytes(
            br#"{"w":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]}}"#,
            &bf16,
        ),
    )
    .unwrap();
    for db in ["minidb", "lmdb", "leveldb"] {
        let out = tmp.path().join(format!("h.{db}"));
        let summary = tensorfmt::convert(
            &src,
            &out,
            &tensorfmt::ConvertOptions {
                to: Some(format!("caffe2-{db}")),
                ..Default::default()
            },
            |_, _| {},
        )
        .unwrap();
        assert_eq!(
            summary.retyped,
            [(
                "w".to_string(),
                tensorfmt::DType::BF16,
                tensorfmt::DType::F32
            )],
            "{db}"
        );
        let f = tensorfmt::TensorFile::open(&out).unwrap();
        let t = f.load("w").unwrap();
        assert_eq!(
            (t.info.dtype, t.data.as_bytes()),
            (tensorfmt::DType::F32, &widened[..])
        );
        let python = json(&tfcheck_caffe2(&["describe", db, out.to_str().unwrap()]));
        assert_eq!(python["tensors"], inspect_json(&out)["tensors"], "{db}");
        assert_eq!(python["tensors"][0]["dtype"], "f32", "{db}");
    }
    // A format that keeps bf16 reports nothing.
    let out = tmp.path().join("same.safetensors");
    let summary =
        tensorfmt::convert(&src, &out, &tensorfmt::ConvertOptions::default(), |_, _| {}).unwrap();
    assert!(summary.retyped.is_empty(), "{:?}", summary.retyped);
}
