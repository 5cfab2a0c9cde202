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
        text.contains("pub const DESC: ::tensorfmt_runtime::gen::FormatDesc = numpy_file::DESC;"),
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

    // npz builds on npy: a build script's job, reported as such.
    let uses = tensorfmt_codegen::derive::expand(quote! {
        #[tensorfmt(schema = "../formats/fmt/npz.fmt")]
        struct C;
    })
    .to_string();
    assert!(uses.contains("compile_error"), "{uses}");
    assert!(uses.contains("build script"), "{uses}");
}
