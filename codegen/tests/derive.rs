//! `derive::expand`, as `#[derive(TensorFormat)]` calls it.

use quote::quote;

#[test]
fn expands_npy() {
    let out = tensorfmt_codegen::derive::expand(quote! {
        #[tensorfmt(schema = "../formats/fmt/npy.fmt")]
        pub struct NumpyFile;
    });
    let file: syn::File = syn::parse2(out).expect("the expansion parses as items");
    let text = prettyplease::unparse(&file);
    assert!(text.contains("pub mod numpy_file {"), "{text}");
    assert!(text.contains("pub fn index("), "{text}");
    assert!(text.contains("impl NumpyFile {"), "{text}");
    assert!(
        text.contains("pub const DESC: ::tensorfmt::runtime::gen::FormatDesc = numpy_file::DESC;"),
        "{text}"
    );
    assert!(text.contains("const _: &str = include_str!("), "{text}");
    assert!(!text.contains("compile_error"), "{text}");
}

#[test]
fn errors_are_compile_errors() {
    let missing = tensorfmt_codegen::derive::expand(quote!(
        struct A;
    ))
    .to_string();
    assert!(missing.contains("compile_error"), "{missing}");
    assert!(missing.contains("tensorfmt(schema"), "{missing}");

    let absent = tensorfmt_codegen::derive::expand(quote! {
        #[tensorfmt(schema = "no/such/file.fmt")]
        struct B;
    })
    .to_string();
    assert!(absent.contains("compile_error"), "{absent}");
    assert!(absent.contains("cannot read the schema file"), "{absent}");

    // An error of the schema: rendered with its place.
    let dir = std::env::temp_dir().join(format!("tensorfmt-derive-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.fmt");
    std::fs::write(&bad, "use nosuch;\nformat bad { engine file; }\n").unwrap();
    let path = bad.to_str().unwrap();
    let unknown = tensorfmt_codegen::derive::expand(quote! {
        #[tensorfmt(schema = #path)]
        struct C;
    })
    .to_string();
    assert!(unknown.contains("compile_error"), "{unknown}");
    assert!(unknown.contains("unknown format 'nosuch'"), "{unknown}");
}

#[test]
fn a_schema_built_on_a_built_in_format_gets_its_module_beside() {
    // npz builds on npy: npy's schema is the built-in one, generated beside npz's in a
    // hidden module.
    let out = tensorfmt_codegen::derive::expand(quote! {
        #[tensorfmt(schema = "../formats/fmt/npz.fmt")]
        pub struct Archive;
    });
    let file: syn::File = syn::parse2(out).expect("the expansion parses as items");
    let text = prettyplease::unparse(&file);
    assert!(!text.contains("compile_error"), "{text}");
    assert!(text.contains("mod __archive_formats {"), "{text}");
    assert!(text.contains("pub mod npy {"), "{text}");
    assert!(text.contains("pub mod archive {"), "{text}");
    assert!(
        text.contains("pub use __archive_formats::archive;"),
        "{text}"
    );
    assert!(text.contains("super::npy::"), "{text}");
}

#[test]
fn the_runtime_path_is_configurable() {
    let out = tensorfmt_codegen::derive::expand(quote! {
        #[tensorfmt(schema = "../formats/fmt/onnx.fmt", runtime = "crate::rt_gen")]
        pub struct Model;
    })
    .to_string()
    .replace(' ', "");
    assert!(out.contains("usecrate::rt_genasrt;"), "{out}");
    assert!(
        out.contains("crate::rt_gen::protobuf::prost::Message"),
        "{out}"
    );
    assert!(out.contains("\"crate::rt_gen::protobuf::prost\""), "{out}");
    assert!(!out.contains("tensorfmt_runtime"), "{out}");
}
