use std::path::PathBuf;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The six built-in schema files: the two compiled today and the four design drafts.
pub fn all_files() -> Vec<PathBuf> {
    let r = root();
    vec![
        r.join("formats/fmt/npy.fmt"),
        r.join("formats/fmt/npz.fmt"),
        r.join("docs/formats/safetensors.fmt"),
        r.join("docs/formats/pytorch.fmt"),
        r.join("docs/formats/onnx.fmt"),
        r.join("docs/formats/caffe2.fmt"),
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
