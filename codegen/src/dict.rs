//! Dicts: records a codec decodes (the npy header). A struct with one field per key,
//! `from_py` (missing key or wrong type → an error naming the key) and `to_py` (keys in
//! declared order).

use proc_macro2::TokenStream;
use quote::quote;
use tensorfmt_schema::ast::*;

use crate::expr::{Cx, Ty, Val};
use crate::model::{docs, rs_ident, GResult};

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

fn rust_ty(t: DictTy, optional: bool) -> TokenStream {
    let t = match t {
        DictTy::Str => quote!(::std::string::String),
        DictTy::Bool => quote!(bool),
        DictTy::U64 => quote!(u64),
        DictTy::I64 => quote!(i64),
        DictTy::U64Seq { .. } => quote!(::std::vec::Vec<u64>),
    };
    if optional {
        quote!(::std::option::Option<#t>)
    } else {
        t
    }
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

/// The struct and `impl` of a dict.
pub(crate) fn gen_dict(cx: &Cx<'_>, d: &Dict) -> GResult<TokenStream> {
    let ident = rs_ident(&d.name.name);
    let doc = docs(&d.docs);
    let mut fields = Vec::new();
    let mut reads = Vec::new();
    let mut inits = Vec::new();
    let mut items = Vec::new();
    let any_optional = d.fields.iter().any(|f| f.optional);
    for f in &d.fields {
        let t = dict_ty(cx, f)?;
        let k = rs_ident(&f.key);
        let key = &f.key;
        let rt_ty = rust_ty(t, f.optional);
        let fdoc = docs(&f.docs);
        fields.push(quote!(#fdoc pub #k: #rt_ty,));
        // Read.
        let convert = |v: TokenStream| {
            let (opt, expected, then) = match t {
                DictTy::Str => (quote!(#v.as_str()), "str", quote!(.to_string())),
                DictTy::Bool => (quote!(#v.as_bool()), "bool", quote!()),
                DictTy::U64 => (
                    quote!(#v.as_int().and_then(|i| u64::try_from(i).ok())),
                    "non-negative int",
                    quote!(),
                ),
                DictTy::I64 => (
                    quote!(#v.as_int().and_then(|i| i64::try_from(i).ok())),
                    "64-bit int",
                    quote!(),
                ),
                DictTy::U64Seq { .. } => (
                    quote!(#v.as_u64_seq()),
                    "tuple of non-negative ints",
                    quote!(),
                ),
            };
            quote!(#opt.ok_or_else(|| wrong_type(#key, #expected, #v))? #then)
        };
        if f.optional {
            let c = convert(quote!(v));
            reads.push(quote! {
                let #k = match value.dict_get(#key) {
                    None | Some(rt::pydict::PyValue::None) => None,
                    Some(v) => Some(#c),
                };
            });
        } else {
            let c = convert(quote!(#k));
            reads.push(quote! {
                let #k = rt::pydict::require(value, #key)?;
                let #k = #c;
            });
        }
        inits.push(quote!(#k));
        // Write. `x` is the value as a place (`self.k`), or a reference when `by_ref`.
        let to = |x: TokenStream, by_ref: bool| {
            let copy = if by_ref { quote!(*#x) } else { x.clone() };
            match t {
                DictTy::Str => quote!(rt::pydict::PyValue::Str(#x.clone())),
                DictTy::Bool => quote!(rt::pydict::PyValue::Bool(#copy)),
                DictTy::U64 | DictTy::I64 => quote!(rt::pydict::PyValue::Int(i128::from(#copy))),
                DictTy::U64Seq { list } => {
                    let ctor = if list { quote!(List) } else { quote!(Tuple) };
                    quote!(rt::pydict::PyValue::#ctor(
                        #x.iter().map(|&d| rt::pydict::PyValue::Int(i128::from(d))).collect()
                    ))
                }
            }
        };
        if f.optional {
            let v = to(quote!(v), true);
            items.push(quote! {
                if let Some(v) = &self.#k {
                    items.push((#key, #v));
                }
            });
        } else {
            let v = to(quote!(self.#k), false);
            items.push(if any_optional {
                quote!(items.push((#key, #v));)
            } else {
                quote!((#key, #v),)
            });
        }
    }
    let to_py_body = if any_optional {
        quote! {
            let mut items = ::std::vec::Vec::new();
            #(#items)*
            items
        }
    } else {
        quote!(vec![#(#items)*])
    };
    let name = &d.name.name;
    let from_doc = format!(
        " Reads a `{name}` from a decoded dict: a missing key or a value of the wrong type is an error naming the key."
    );
    let to_doc = format!(" The items of this `{name}`, in declared order, for encoding.");
    Ok(quote! {
        #doc
        #[derive(Debug, Clone, PartialEq)]
        pub struct #ident {
            #(#fields)*
        }

        impl #ident {
            #[doc = #from_doc]
            pub fn from_py(value: &rt::pydict::PyValue) -> rt::Result<Self> {
                #(#reads)*
                Ok(#ident { #(#inits),* })
            }

            #[doc = #to_doc]
            pub fn to_py(&self) -> ::std::vec::Vec<(&'static str, rt::pydict::PyValue)> {
                #to_py_body
            }
        }
    })
}

/// The module's `wrong_type` helper.
pub(crate) fn helper() -> TokenStream {
    quote! {
        /// The error for a dict value of the wrong type: names the key and what was found.
        fn wrong_type(key: &str, expected: &str, found: &rt::pydict::PyValue) -> rt::Error {
            rt::Error::from(rt::ErrorKind::Invalid(format!(
                "expected a {expected}, found a {}",
                found.type_name()
            )))
            .in_field(key)
        }
    }
}
