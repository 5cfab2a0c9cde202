//! Tables, from the typed IR: `key → (dtype, byte order)` as a `match`, and the reverse
//! lookup used on write.

use proc_macro2::{Literal, TokenStream};
use quote::{format_ident, quote};
use tensorfmt_schema::ir::{ByteOrder, Dtype, Ir, KeyKind, TableId, TableKey};

use crate::lower::{byte_order_path, dtype_path};
use crate::model::{docs, rs_ident};

/// A key literal (the checker keeps integer keys within `i64`, and each key of its
/// table's kind).
fn key(k: &TableKey) -> TokenStream {
    match k {
        TableKey::Str(s) => quote!(#s),
        TableKey::Int(i) => {
            let l = Literal::i128_unsuffixed(*i);
            quote!(#l)
        }
    }
}

/// The lookup `fn <table>(key)` and the reverse `fn <table>_for(dtype, order)`.
pub(crate) fn gen_table(ir: &Ir, id: TableId) -> TokenStream {
    let t = ir.table(id);
    let name = rs_ident(&t.name);
    let rev = format_ident!("{}_for", t.name);
    let (key_ty, out_ty) = match t.key {
        KeyKind::Str => (quote!(&str), quote!(&'static str)),
        KeyKind::Int => (quote!(i64), quote!(i64)),
    };
    let mut arms = Vec::new();
    let mut seen_keys: Vec<&TableKey> = Vec::new();
    let mut rev_arms = Vec::new();
    // (dtype, little covered, big covered)
    let mut covered: Vec<(Dtype, bool, bool)> = Vec::new();
    for row in &t.rows {
        let k = key(&row.key);
        let d = dtype_path(row.dtype);
        if !seen_keys.contains(&&row.key) {
            seen_keys.push(&row.key);
            let o = match row.endian {
                Some(e) => {
                    let o = byte_order_path(e);
                    quote!(Some(#o))
                }
                None => quote!(None),
            };
            arms.push(quote!(#k => Some((#d, #o)),));
        }
        // Reverse: the first row for each dtype and byte order.
        let i = match covered.iter().position(|c| c.0 == row.dtype) {
            Some(i) => i,
            None => {
                covered.push((row.dtype, false, false));
                covered.len() - 1
            }
        };
        let c = &mut covered[i];
        let (pat, new) = match row.endian {
            Some(ByteOrder::Little) => (quote!(rt::ByteOrder::Little), !c.1),
            Some(ByteOrder::Big) => (quote!(rt::ByteOrder::Big), !c.2),
            None => (quote!(_), !(c.1 && c.2)),
        };
        match row.endian {
            Some(ByteOrder::Little) => c.1 = true,
            Some(ByteOrder::Big) => c.2 = true,
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
    let complete = covered.len() == Dtype::ALL.len() && covered.iter().all(|c| c.1 && c.2);
    let rest = if complete {
        quote!()
    } else {
        quote!(_ => None,)
    };
    let doc = docs(&t.docs);
    let tname = &t.name;
    let lookup_doc = " The dtype a key names, and its byte order when the key fixes one (keys of one-byte dtypes do not).";
    let rev_doc = format!(
        " The `{tname}` key of `dtype` stored in `order`: the first row of the table for that dtype whose byte order matches (rows without a byte order match any)."
    );
    quote! {
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
    }
}
