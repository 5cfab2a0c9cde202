//! Snapshots of the code generated for the built-in schemas.

use std::path::PathBuf;

fn schema(files: &[&str]) -> tensorfmt_schema::Schema {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let paths: Vec<PathBuf> = files.iter().map(|f| root.join(f)).collect();
    tensorfmt_schema::load(&paths).unwrap_or_else(|d| panic!("{d}"))
}

#[test]
fn npy_and_npz() {
    let s = schema(&["formats/fmt/npy.fmt", "formats/fmt/npz.fmt"]);
    let code = tensorfmt_codegen::generate_file(&s)
        .unwrap_or_else(|d| panic!("{}", d.with_sources(&s.files)));
    insta::assert_snapshot!("npy_npz", code);
}

#[test]
fn pytorch() {
    let s = schema(&["formats/fmt/pytorch.fmt"]);
    let code = tensorfmt_codegen::generate_file(&s)
        .unwrap_or_else(|d| panic!("{}", d.with_sources(&s.files)));
    insta::assert_snapshot!("pytorch", code);
}

#[test]
fn pytorch_legacy() {
    let s = schema(&["formats/fmt/pytorch.fmt", "formats/fmt/pytorch_legacy.fmt"]);
    let code = tensorfmt_codegen::generate_file(&s)
        .unwrap_or_else(|d| panic!("{}", d.with_sources(&s.files)));
    insta::assert_snapshot!("pytorch_legacy", code);
}

#[test]
fn onnx() {
    let s = schema(&["formats/fmt/onnx.fmt"]);
    let code = tensorfmt_codegen::generate_file(&s)
        .unwrap_or_else(|d| panic!("{}", d.with_sources(&s.files)));
    insta::assert_snapshot!("onnx", code);
}

#[test]
fn torchscript() {
    let s = schema(&["formats/fmt/pytorch.fmt", "formats/fmt/torchscript.fmt"]);
    let code = tensorfmt_codegen::generate_file(&s)
        .unwrap_or_else(|d| panic!("{}", d.with_sources(&s.files)));
    insta::assert_snapshot!("torchscript", code);
}

/// The checker's diagnostics of `src`, which it must reject.
fn rejected(src: &str) -> String {
    let f = tensorfmt_schema::parse(std::path::Path::new("test.fmt"), src)
        .unwrap_or_else(|d| panic!("{d}"));
    let files = vec![f];
    let d = tensorfmt_schema::check(&files);
    assert!(!d.is_empty(), "the checker accepts it");
    d.with_sources(&files)
}

#[test]
fn a_mapping_the_writer_cannot_invert_is_a_diagnostic() {
    // A format may not silently become read-only: the data, the payload from a
    // constant offset on, is not the layout's payload between two places.
    let text = rejected(
        r#"
format records {
    engine file;
    layout Rec little {
        n: u32 write = 1;
        items: payload rest;
    }
    tensor from Rec as r {
        name = source.stem;
        dtype = t[r.n];
        shape = [r.n];
        data = slice(r.items, 4, none);
    }
    table t: int -> dtype { 1 => f32 }
}
"#,
    );
    assert!(
        text.contains("the writer cannot run `data = ...` backwards"),
        "{text}"
    );
}

#[test]
fn kv_engine_needs_what_its_backend_reads() {
    // The checker says so: the generator is never given such a schema.
    let text = rejected(
        r#"
format kvish {
    engine kv(backend = records);
    message Rec { name: optional string = 1; }
    entry r "{k}" { repeated; value Rec; }
}
"#,
    );
    assert!(
        text.contains("the `records` backend reads the format's `layout Record`"),
        "{text}"
    );
}

#[test]
fn caffe2() {
    let s = schema(&["formats/fmt/caffe2.fmt", "formats/fmt/minidb.fmt"]);
    let code = tensorfmt_codegen::generate_file(&s)
        .unwrap_or_else(|d| panic!("{}", d.with_sources(&s.files)));
    insta::assert_snapshot!("caffe2", code);
}

#[test]
fn spare_is_computed_before_the_computed_fields() {
    // `spare` lengthens the text that `len(d)` measures, so it cannot use `n`, computed
    // from that length.
    let text = rejected(
        r#"
format sp {
    engine file;
    dict D { shape: tuple<u64>; }
    layout L little {
        k: u8 write = len(d);
        n: u32 write = size(d);
        d: D size n codec pydict(spare = k) pad(align = 8, fill = b" ", min = 3);
        data: payload rest;
    }
    table t: str -> dtype { "f4" => f32 }
    tensor from L as l {
        name = source.stem;
        dtype = t["f4"];
        shape = l.d.shape;
        data = l.data;
    }
}
"#,
    );
    assert!(
        text.contains("using `k`, computed once the codec texts are encoded, in `spare`"),
        "{text}"
    );
}
