use std::path::PathBuf;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The built-in schema files: the compiled ones and the safetensors design.
pub fn all_files() -> Vec<PathBuf> {
    let r = root();
    vec![
        r.join("formats/fmt/npy.fmt"),
        r.join("formats/fmt/npz.fmt"),
        r.join("docs/formats/safetensors.fmt"),
        r.join("formats/fmt/pytorch.fmt"),
        r.join("formats/fmt/pytorch_legacy.fmt"),
        r.join("formats/fmt/onnx.fmt"),
        r.join("formats/fmt/caffe2.fmt"),
        r.join("formats/fmt/minidb.fmt"),
    ]
}

#[test]
fn every_builtin_file_parses() {
    for p in all_files() {
        let src = std::fs::read_to_string(&p).unwrap();
        if let Err(d) = tensorfmt_schema::parse(&p, &src) {
            panic!("{}", d.render_with(|_| Some(src.as_str())));
        }
    }
}

#[test]
fn every_builtin_file_checks_clean() {
    match tensorfmt_schema::load(&all_files()) {
        Ok(schema) => {
            let names: Vec<&str> = schema.formats().map(|(_, f)| f.public_name()).collect();
            assert_eq!(
                names,
                [
                    "npy",
                    "npz",
                    "safetensors",
                    "pytorch",
                    "pytorch-legacy",
                    "onnx",
                    "caffe2-lmdb",
                    "caffe2-leveldb",
                    "caffe2-minidb"
                ]
            );
            assert!(schema.format("npz").is_some());
            assert!(schema.format_by_public_name("caffe2-minidb").is_some());
        }
        Err(d) => panic!("{d}"),
    }
}

#[test]
fn npy_and_npz_check_alone() {
    let files = all_files();
    tensorfmt_schema::load(&files[..2]).unwrap();
    tensorfmt_schema::load(&files[3..4]).unwrap();
    // npz alone cannot resolve `use npy;`.
    let d = tensorfmt_schema::load(&files[1..2]).unwrap_err();
    assert!(d.0[0].message.contains("unknown format 'npy'"), "{d}");
}
