//! Tables, from the typed IR: `key → (dtype, byte order)` rows as a `const`
//! `rt::Table`, which the runtime looks up both ways (reading and writing).

use proc_macro2::{Literal, TokenStream};
use quote::quote;
use tensorfmt_schema::ir::{Ir, KeyKind, TableId, TableKey};

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

/// The name of the `const` holding table `name` (`descr` → `DESCR`).
pub(crate) fn const_name(name: &str) -> String {
    name.to_uppercase()
}

/// The table as a `const` [`rt::Table`] of its rows in schema order: the runtime looks
/// keys up and finds the key of a dtype (the first row that matches, both ways).
pub(crate) fn gen_table(ir: &Ir, id: TableId) -> TokenStream {
    let t = ir.table(id);
    let name = rs_ident(&const_name(&t.name));
    let key_ty = match t.key {
        KeyKind::Str => quote!(&str),
        KeyKind::Int => quote!(i64),
    };
    let rows = t.rows.iter().map(|row| {
        let k = key(&row.key);
        let d = dtype_path(row.dtype);
        let o = match row.endian {
            Some(e) => {
                let o = byte_order_path(e);
                quote!(Some(#o))
            }
            None => quote!(None),
        };
        quote!((#k, #d, #o))
    });
    let doc = docs(&t.docs);
    let tname = &t.name;
    quote! {
        #doc
        pub const #name: rt::Table<#key_ty> = rt::Table {
            name: #tname,
            rows: &[#(#rows),*],
        };
    }
}
