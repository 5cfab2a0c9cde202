//! Tables: `key → (dtype, byte order)` as a `match`, and the reverse lookup used on write.

use proc_macro2::{Literal, TokenStream};
use quote::{format_ident, quote};
use tensorfmt_schema::ast::*;

use crate::expr::Cx;
use crate::model::{docs, rs_ident, GResult};

/// The `rt::DType` variant of a canonical dtype name.
pub(crate) fn dtype_variant(cx: &Cx<'_>, id: &Ident) -> GResult<TokenStream> {
    let v = match id.name.as_str() {
        "f16" => "F16",
        "bf16" => "BF16",
        "f32" => "F32",
        "f64" => "F64",
        "i8" => "I8",
        "i16" => "I16",
        "i32" => "I32",
        "i64" => "I64",
        "u8" => "U8",
        "u16" => "U16",
        "u32" => "U32",
        "u64" => "U64",
        "bool" => "Bool",
        "c64" => "C64",
        "c128" => "C128",
        "f8e4m3fn" => "F8E4M3FN",
        "f8e5m2" => "F8E5M2",
        "string" => "String",
        other => return Err(cx.err(id.span, format!("unknown dtype `{other}`"))),
    };
    let v = format_ident!("{v}");
    Ok(quote!(rt::DType::#v))
}

fn order_variant(e: Endian) -> TokenStream {
    match e {
        Endian::Little => quote!(rt::ByteOrder::Little),
        Endian::Big => quote!(rt::ByteOrder::Big),
    }
}

/// The Rust key type and a key literal.
fn key(cx: &Cx<'_>, t: &Table, k: &TableKey, span: Span) -> GResult<TokenStream> {
    match (t.key_kind, k) {
        (KeyKind::Str, TableKey::Str(s)) => Ok(quote!(#s)),
        (KeyKind::Int, TableKey::Int(i)) => {
            let i = i64::try_from(*i)
                .map_err(|_| cx.unsupported(span, "a table key outside the range of i64"))?;
            let l = Literal::i64_unsuffixed(i);
            Ok(quote!(#l))
        }
        _ => Err(cx.err(span, "the key does not have the table's key type")),
    }
}

/// The lookup `fn <table>(key)` and the reverse `fn <table>_for(dtype, order)`.
pub(crate) fn gen_table(cx: &Cx<'_>, t: &Table) -> GResult<TokenStream> {
    let name = rs_ident(&t.name.name);
    let rev = format_ident!("{}_for", t.name.name);
    let key_ty = match t.key_kind {
        KeyKind::Str => quote!(&str),
        KeyKind::Int => quote!(i64),
    };
    let out_ty = match t.key_kind {
        KeyKind::Str => quote!(&'static str),
        KeyKind::Int => quote!(i64),
    };
    let mut arms = Vec::new();
    let mut seen_keys: Vec<&TableKey> = Vec::new();
    let mut rev_arms = Vec::new();
    // (dtype, little covered, big covered)
    let mut covered: Vec<(String, bool, bool)> = Vec::new();
    for row in &t.rows {
        let k = key(cx, t, &row.key, row.span)?;
        let d = dtype_variant(cx, &row.dtype)?;
        if !seen_keys.contains(&&row.key) {
            seen_keys.push(&row.key);
            let o = match row.endian {
                Some(e) => {
                    let o = order_variant(e);
                    quote!(Some(#o))
                }
                None => quote!(None),
            };
            arms.push(quote!(#k => Some((#d, #o)),));
        }
        // Reverse: the first row for each dtype and byte order.
        let i = match covered.iter().position(|c| c.0 == row.dtype.name) {
            Some(i) => i,
            None => {
                covered.push((row.dtype.name.clone(), false, false));
                covered.len() - 1
            }
        };
        let c = &mut covered[i];
        let (pat, new) = match row.endian {
            Some(Endian::Little) => (quote!(rt::ByteOrder::Little), !c.1),
            Some(Endian::Big) => (quote!(rt::ByteOrder::Big), !c.2),
            None => (quote!(_), !(c.1 && c.2)),
        };
        match row.endian {
            Some(Endian::Little) => c.1 = true,
            Some(Endian::Big) => c.2 = true,
            None => {
                c.1 = true;
                c.2 = true;
            }
        }
        if new {
            rev_arms.push(quote!((#d, #pat) => Some(#k),));
        }
    }
    // A table that names every dtype in both byte orders leaves nothing for a last arm.
    let every = tensorfmt_schema::DTYPES
        .iter()
        .all(|d| covered.iter().any(|c| c.0 == *d && c.1 && c.2));
    let rest = (!every).then(|| quote!(_ => None,));
    let doc = docs(&t.docs);
    let tname = &t.name.name;
    let lookup_doc = " The dtype a key names, and its byte order when the key fixes one (keys of one-byte dtypes do not).";
    let rev_doc = format!(
        " The `{tname}` key of `dtype` stored in `order`: the first row of the table for that dtype whose byte order matches (rows without a byte order match any)."
    );
    Ok(quote! {
        #doc
        #[doc = ""]
        #[doc = #lookup_doc]
        pub fn #name(key: #key_ty) -> ::std::option::Option<(rt::DType, ::std::option::Option<rt::ByteOrder>)> {
            match key {
                #(#arms)*
                _ => None,
            }
        }

        #[doc = #rev_doc]
        pub fn #rev(dtype: rt::DType, order: rt::ByteOrder) -> ::std::option::Option<#out_ty> {
            match (dtype, order) {
                #(#rev_arms)*
                #rest
            }
        }
    })
}
