//! ONNX models: `tensorfmt inspect --json --sha256` on every fixture gives exactly what the
//! onnx package computed (`tests/fixtures/onnx/expected/*.json`), models made afresh by
//! onnx each run are read the same, and damaged or hostile models give clear errors.

use std::path::{Path, PathBuf};

use tensorfmt_tests::{fixtures, inspect_json, json, python, run_seed};

fn dir() -> PathBuf {
    fixtures().join("onnx")
}

/// The fixtures, relative to `tests/fixtures/onnx`.
const FIXTURES: &[&str] = &[
    "raw_all_dtypes.onnx",
    "typed_all_dtypes.onnx",
    "scalars_and_empty.onnx",
    "external_single.onnx",
    "external_per_tensor/model.onnx",
    "mlp.onnx",
    "constant_nodes.onnx",
    "torch_export.onnx",
];

#[test]
fn every_fixture_matches_onnx() {
    for f in FIXTURES {
        let expected = json(
            &std::fs::read_to_string(
                dir()
                    .join("expected")
                    .join(format!("{}.json", f.replace('/', "__"))),
            )
            .unwrap(),
        );
        assert_eq!(inspect_json(&dir().join(f)), expected, "{f}");
    }
}

#[test]
fn raw_and_fixed_width_typed_data_are_views_of_the_map() {
    let file = tensorfmt::TensorFile::open(dir().join("raw_all_dtypes.onnx")).unwrap();
    assert_eq!(file.format(), "onnx");
    let t = file.load("f32").unwrap();
    assert!(t.data.is_mapped(), "raw_data is viewed in place");
    let file = tensorfmt::TensorFile::open(dir().join("typed_all_dtypes.onnx")).unwrap();
    // float_data holds f32 as it is: a view; int32_data holds f16 as varints: decoded.
    assert!(file.load("f32").unwrap().data.is_mapped());
    assert!(!file.load("f16").unwrap().data.is_mapped());
    let file = tensorfmt::TensorFile::open(dir().join("external_single.onnx")).unwrap();
    assert!(
        file.load("w1").unwrap().data.is_mapped(),
        "external data is mapped too"
    );
}

/// `tfcheck_onnx.py ARGS` with the test environment's Python; its stdout.
fn tfcheck_onnx(args: &[&str]) -> String {
    let out = std::process::Command::new(python())
        .arg(tensorfmt_tests::repo_root().join("tests/py/tfcheck_onnx.py"))
        .args(args)
        .output()
        .expect("running tfcheck_onnx.py");
    assert!(
        out.status.success(),
        "tfcheck_onnx.py {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn unseen_models_made_by_onnx_read_the_same() {
    let tmp = tempfile::tempdir().unwrap();
    let seed = run_seed();
    let listed = tfcheck_onnx(&["make-random", tmp.path().to_str().unwrap(), &seed, "30"]);
    let paths: Vec<&str> = listed.lines().collect();
    assert_eq!(paths.len(), 30);
    let described = tfcheck_onnx(&[&["describe"], &paths[..]].concat());
    for (p, line) in paths.iter().zip(described.lines()) {
        assert_eq!(inspect_json(Path::new(p)), json(line), "{p} (seed {seed})");
    }
}

fn open_err(path: &std::path::Path) -> String {
    tensorfmt_tests::open_err_as(path, "onnx")
}

#[test]
fn damaged_and_hostile_models_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let raw = std::fs::read(dir().join("raw_all_dtypes.onnx")).unwrap();
    // Every truncation: an error (or, cut between top-level fields, fewer tensors), never
    // a panic.
    for cut in (0..raw.len()).step_by(7) {
        let p = tmp.path().join("cut.onnx");
        std::fs::write(&p, &raw[..cut]).unwrap();
        let _ = tensorfmt::TensorFile::open_with(
            &p,
            &tensorfmt::OpenOptions {
                format: Some("onnx".into()),
                ..Default::default()
            },
        )
        .map(|f| f.read_all(&mut tensorfmt::runtime::hash::HashSink::new()));
    }
    // A length beyond the file.
    let mut bad = raw.clone();
    bad.truncate(raw.len() - 3);
    let p = tmp.path().join("short.onnx");
    std::fs::write(&p, &bad).unwrap();
    let e = open_err(&p);
    assert!(
        e.contains("short.onnx") && e.contains("byte") && e.contains("truncated"),
        "{e}"
    );

    // External data that leaves the model's folder, or lies past its file's end.
    let model = std::fs::read(dir().join("external_single.onnx")).unwrap();
    let data = std::fs::read(dir().join("external_single.data")).unwrap();
    let find = |hay: &[u8], needle: &[u8]| hay.windows(needle.len()).position(|w| w == needle);
    let loc = b"external_single.data";
    let at = find(&model, loc).unwrap();
    let sub = tmp.path().join("m");
    std::fs::create_dir(&sub).unwrap();
    std::fs::write(tmp.path().join("xternal_single.data"), &data).unwrap();
    let mut escaping = model.clone();
    // Same length: "../xternal_single.dat" is not it; use a path of equal length.
    let evil = b"../xternal_single.da";
    assert_eq!(evil.len(), loc.len());
    escaping[at..at + loc.len()].copy_from_slice(evil);
    let p = sub.join("escape.onnx");
    std::fs::write(&p, &escaping).unwrap();
    let e = open_err(&p);
    assert!(e.contains("leaves the model's folder"), "{e}");

    std::fs::write(sub.join("external_single.data"), &data[..data.len() / 2]).unwrap();
    let p = sub.join("short_data.onnx");
    std::fs::write(&p, &model).unwrap();
    let e = open_err(&p);
    assert!(e.contains("external_single.data") && e.contains("w"), "{e}");
}

#[test]
fn prost_types_from_the_schema_decode_and_encode_models() {
    use tensorfmt::generated::onnx::messages::{
        attribute_proto::AttributeType, tensor_proto::DataLocation, GraphProto, ModelProto,
        OperatorSetIdProto, TensorProto,
    };
    use tensorfmt::prost::Message;
    let bytes = std::fs::read(dir().join("constant_nodes.onnx")).unwrap();
    let m = ModelProto::decode(&bytes[..]).unwrap();
    let g = m.graph.as_ref().unwrap();
    let names: Vec<_> = g.initializer.iter().map(|t| t.name()).collect();
    assert_eq!(names, ["W", "B"]);
    let constants: Vec<_> = g
        .node
        .iter()
        .filter(|n| n.op_type() == "Constant")
        .collect();
    assert_eq!(constants.len(), 4);
    let value = constants[0]
        .attribute
        .iter()
        .find(|a| a.name() == "value")
        .unwrap();
    assert_eq!(value.r#type(), AttributeType::Tensor);
    assert_eq!(value.t.as_ref().unwrap().data_type(), 1);

    // A model built with the prost types reads back through the schema's reader.
    let model = ModelProto {
        ir_version: Some(10),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(21),
        }],
        graph: Some(GraphProto {
            name: Some("g".into()),
            initializer: vec![
                TensorProto {
                    name: Some("a".into()),
                    data_type: Some(7),
                    dims: vec![2],
                    int64_data: vec![-1, 5],
                    ..Default::default()
                },
                TensorProto {
                    name: Some("x".into()),
                    data_type: Some(1),
                    dims: vec![1],
                    data_location: Some(DataLocation::External as i32),
                    ..Default::default()
                },
            ],
            ..Default::default()
        }),
        ..Default::default()
    };
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("m.onnx");
    let mut only_a = model.clone();
    only_a.graph.as_mut().unwrap().initializer.truncate(1);
    std::fs::write(&path, only_a.encode_to_vec()).unwrap();
    let f = tensorfmt::TensorFile::open(&path).unwrap();
    assert_eq!(f.tensors().len(), 1);
    let a = f.load("a").unwrap();
    assert_eq!(
        a.data.as_bytes(),
        [(-1i64).to_le_bytes(), 5i64.to_le_bytes()].concat()
    );
    // External data without a location: refused, naming the tensor.
    std::fs::write(&path, model.encode_to_vec()).unwrap();
    let e = tensorfmt::TensorFile::open(&path).unwrap_err().to_string();
    assert!(e.contains("without a location") && e.contains('x'), "{e}");
}
