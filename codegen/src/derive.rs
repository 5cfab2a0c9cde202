//! The expansion of `#[derive(TensorFormat)]` (the `tensorfmt-derive` crate only forwards
//! here; the `tensorfmt` crate re-exports the derive as `tensorfmt::TensorFormat`).
//!
//! ```ignore
//! #[derive(tensorfmt::TensorFormat)]
//! #[tensorfmt(schema = "fmt/myformat.fmt")] // relative to CARGO_MANIFEST_DIR
//! pub struct MyFormat;
//! // → `pub mod my_format { ... }` with the format's generated items, and
//! //   `impl MyFormat { pub const DESC: FormatDesc = my_format::DESC; }`
//! ```
//!
//! The schema defines one format. It may `use` built-in formats (`use npy;` with
//! `include npy.tensor(..)`): their schemas are embedded in the generator, and their
//! modules are generated beside the format's, in a hidden module the format's module is
//! re-exported from. The generated code reaches the runtime through the `tensorfmt`
//! crate (`::tensorfmt::runtime::gen`), or the path `runtime = ".."` gives
//! (`#[tensorfmt(schema = "..", runtime = "::tensorfmt_runtime::gen")]` in a crate that
//! depends on the runtime crate itself).

use std::path::PathBuf;

use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use syn::spanned::Spanned;

use crate::model::{docs, Model};

/// Expands `#[derive(TensorFormat)]` on `input` (the item's tokens). Never panics: every
/// error (no or bad `#[tensorfmt(schema = "..")]` attribute, an unreadable or invalid
/// schema) becomes a `compile_error!` at the attribute.
pub fn expand(input: TokenStream) -> TokenStream {
    expand_inner(input).unwrap_or_else(|e| e.to_compile_error())
}

fn expand_inner(input: TokenStream) -> syn::Result<TokenStream> {
    let item: syn::DeriveInput = syn::parse2(input)?;
    let mut schema: Option<syn::LitStr> = None;
    let mut runtime: Option<syn::LitStr> = None;
    let mut attr_span = item.ident.span();
    for attr in &item.attrs {
        if !attr.path().is_ident("tensorfmt") {
            continue;
        }
        attr_span = attr.span();
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("schema") {
                schema = Some(meta.value()?.parse()?);
                Ok(())
            } else if meta.path.is_ident("runtime") {
                runtime = Some(meta.value()?.parse()?);
                Ok(())
            } else {
                Err(meta.error(
                    "unknown `tensorfmt` option; expected `schema = \"path/to/format.fmt\"` or `runtime = \"::path::to::gen\"`",
                ))
            }
        })?;
    }
    let Some(lit) = schema else {
        return Err(syn::Error::new(
            attr_span,
            "`#[derive(TensorFormat)]` needs `#[tensorfmt(schema = \"path/to/format.fmt\")]`",
        ));
    };
    let runtime: syn::Path = match &runtime {
        Some(r) => r.parse()?,
        None => syn::parse_str(crate::Compiler::DEFAULT_RUNTIME)?,
    };
    let base = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_default();
    let path = base.join(lit.value());
    let err = |msg: String| syn::Error::new(lit.span(), msg);
    let loaded = crate::schemas::load_with_builtins(std::slice::from_ref(&path)).map_err(err)?;
    let schema = &loaded.schema;
    let file = &schema.files[loaded.builtin_files];
    if file.formats.len() != 1 {
        return Err(err(format!(
            "{}: the derive needs a schema defining exactly one format, this one defines {}",
            path.display(),
            file.formats.len()
        )));
    }
    let model = Model::new(&schema.files);
    let ir = schema.ir();
    let ident = &item.ident;
    let vis = &item.vis;
    let m = format_ident!("{}", snake(&ident.to_string()));
    let fmt = &model.formats[model.formats.len() - 1];
    // One module per format, the derived one named after the item.
    let module = |i: usize, fmt: &crate::model::Fmt<'_>, vis: TokenStream| {
        let fid = tensorfmt_schema::ir::FormatId(i as u32);
        let items = crate::format_items(&model, fmt, &ir, fid, &runtime);
        let (name, doc) = if fmt.file == loaded.builtin_files {
            (m.clone(), docs(&fmt.ast.docs))
        } else {
            let d = format!(
                " The built-in `{}` format, which `{ident}` uses.",
                fmt.public_name()
            );
            (fmt.module.clone(), quote!(#[doc = #d]))
        };
        quote! {
            #doc
            #vis mod #name {
                use #runtime as rt;
                #items
            }
        }
    };
    let formats = if loaded.builtin_files == 0 {
        // One self-contained format: its module alone, as visible as the item.
        module(0, fmt, quote!(#vis))
    } else {
        // Formats that refer to each other as siblings (`super::npy::File`), in a hidden
        // module the derived one is re-exported from.
        let hidden = format_ident!("__{}_formats", m);
        let modules = model
            .formats
            .iter()
            .enumerate()
            .map(|(i, f)| module(i, f, quote!(pub)));
        quote! {
            #[doc(hidden)]
            mod #hidden {
                #(#modules)*
            }
            #vis use #hidden::#m;
        }
    };
    let (impl_g, ty_g, where_c) = item.generics.split_for_impl();
    let abs = path.to_string_lossy().into_owned();
    let desc_doc = format!(
        " The `{}` format, generated from `{}`.",
        fmt.public_name(),
        lit.value()
    );
    Ok(quote! {
        #formats

        impl #impl_g #ident #ty_g #where_c {
            #[doc = #desc_doc]
            pub const DESC: #runtime::FormatDesc = #m::DESC;
        }

        const _: &str = include_str!(#abs);
    })
}

/// `MyFormat` → `my_format`.
fn snake(name: &str) -> String {
    let mut out = String::new();
    let chars: Vec<char> = name.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        if c.is_uppercase() {
            let prev_lower =
                i > 0 && (chars[i - 1].is_lowercase() || chars[i - 1].is_ascii_digit());
            let next_lower = chars.get(i + 1).is_some_and(|n| n.is_lowercase());
            if i > 0 && (prev_lower || (next_lower && chars[i - 1].is_uppercase())) {
                out.push('_');
            }
            out.extend(c.to_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::snake;

    #[test]
    fn snake_case() {
        assert_eq!(snake("MyFormat"), "my_format");
        assert_eq!(snake("NPYFile"), "npy_file");
        assert_eq!(snake("Npy"), "npy");
        assert_eq!(snake("Gguf2Format"), "gguf2_format");
    }
}
