//! Dict keys as the layout writer sees them (their types and values in write rules); the
//! dict structs themselves come from the IR (`crate::read`).

use proc_macro2::TokenStream;
use quote::quote;
use tensorfmt_schema::ast::*;

use crate::expr::{Cx, Ty, Val};
use crate::model::{rs_ident, GResult};

/// The value type of a dict key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DictTy {
    /// `str` → `String`.
    Str,
    /// `bool` → `bool`.
    Bool,
    /// `u64` → `u64`.
    U64,
    /// `i64` → `i64`.
    I64,
    /// `tuple<u64>` / `list<u64>` → `Vec<u64>`.
    U64Seq {
        /// Written as a Python list rather than a tuple.
        list: bool,
    },
}

/// The type of a dict key, or an error for types the generator does not support.
pub(crate) fn dict_ty(cx: &Cx<'_>, f: &DictField) -> GResult<DictTy> {
    let t = &f.ty;
    fn name(t: &TypeRef) -> Option<&str> {
        match t.path.as_slice() {
            [one] => Some(one.name.as_str()),
            _ => None,
        }
    }
    let ty = match (name(t), t.args.as_slice()) {
        (Some("str"), []) => Some(DictTy::Str),
        (Some("bool"), []) => Some(DictTy::Bool),
        (Some("u64"), []) => Some(DictTy::U64),
        (Some("i64"), []) => Some(DictTy::I64),
        (Some(seq @ ("tuple" | "list")), [arg])
            if name(arg) == Some("u64") && arg.args.is_empty() =>
        {
            Some(DictTy::U64Seq {
                list: seq == "list",
            })
        }
        _ => None,
    };
    ty.ok_or_else(|| {
        cx.unsupported(
            t.span,
            &format!("the dict value type `{}`", cx.text(t.span)),
        )
    })
}

/// The key of `dict` called `key`.
pub(crate) fn find_key<'d>(dict: &'d Dict, key: &str) -> Option<&'d DictField> {
    dict.fields.iter().find(|f| f.key == key)
}

/// `access.key` in an expression.
pub(crate) fn key_value(
    cx: &mut Cx<'_>,
    e: &Expr,
    dict: &Dict,
    access: TokenStream,
    key: &Ident,
) -> GResult<Val> {
    let Some(f) = find_key(dict, &key.name) else {
        return Err(cx.err(
            key.span,
            format!("`{}` has no key `{}`", dict.name.name, key.name),
        ));
    };
    if f.optional {
        return Err(cx.unsupported(e.span, "an optional dict key in an expression"));
    }
    let k = rs_ident(&f.key);
    Ok(match dict_ty(cx, f)? {
        DictTy::Str => Val::atom(quote!(#access.#k.as_str()), Ty::Str),
        DictTy::Bool => Val::atom(quote!(#access.#k), Ty::Bool),
        DictTy::U64 => Val::atom(quote!(#access.#k), Ty::Int),
        DictTy::U64Seq { .. } => Val::atom(quote!(#access.#k), Ty::IntList),
        DictTy::I64 => return Err(cx.unsupported(e.span, "a signed dict value in an expression")),
    })
}
