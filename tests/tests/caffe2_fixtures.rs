//! Caffe2 databases made by the real tools: every fixture (tests/fixtures/caffe2) and
//! databases made afresh each run read with the names, dtypes, shapes and hashes the
//! Python side computes; databases tensorfmt writes (Save, `convert`) are decoded by the
//! real `lmdb`, `plyvel` and protobuf and agree.

use std::path::{Path, PathBuf};

use tensorfmt_tests::{cli, fixtures, inspect_json, json, run_seed};

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

fn tfcheck_caffe2(args: &[&str]) -> String {
    let out = std::process::Command::new(tensorfmt_tests::python())
        .arg(tensorfmt_tests::repo_root().join("tests/py/tfcheck_caffe2.py"))
        .args(args)
        .output()
        .expect("running tfcheck_caffe2.py");
    assert!(
        out.status.success(),
        "tfcheck_caffe2.py {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

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
