//! The `file` engine around pickles: a layout whose fields are self-delimiting pickles
//! (`bytes codec pickle(P)`, read back to back with `rt::pickle::read_prefix`), then
//! records repeated once per item of one of them (`R repeat count(len(keys))`). The
//! mapping is over the objects one pickle builds (`File.object.tensors`), like the zip
//! engine's; its data is a record's `payload` field looked up by key
//! (`File.storages.bytes[index_of(File.keys, t.storage.key)]`). What is generated is
//! data and small functions: the file's pickles and their checks (`FILE`, an
//! `rt::pickle::FileSpec`), the mapping of one call and the reader of one record; the
//! runtime's `rt::pickle::read_file` reads the file with them.
//!
//! In a record layout, `dtype` is the dtype of the tensors whose data is that record (the
//! mapping's `data` inverted): they must agree on the element size, and a record that no
//! tensor uses cannot be sized. A record field named like an item of the persistent ids
//! (`numel`) must equal that item of every persistent id naming the record.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use tensorfmt_schema::ast::*;

use super::PScope;
use crate::expr::{self, Cx};
use crate::model::{Fmt, GResult, Model};

/// `L.records.payload[index_of(L.keys, k)]`.
pub(crate) struct RecordsRef {
    layout: String,
    records: String,
    payload: String,
    keys: String,
}

impl RecordsRef {
    /// The key expression `k` when `base[index]` is this lookup.
    pub(crate) fn matches<'e>(&self, base: &Expr, index: &'e Expr) -> Option<&'e Expr> {
        let ExprKind::Path(b) = &base.kind else {
            return None;
        };
        let names: Vec<&str> = b.iter().map(|i| i.name.as_str()).collect();
        if names != [&*self.layout, &*self.records, &*self.payload] {
            return None;
        }
        let ExprKind::Call { callee, args } = &index.kind else {
            return None;
        };
        if expr::join(callee) != "index_of" {
            return None;
        }
        match args.as_slice() {
            [l, k] if l.name.is_none() && k.name.is_none() => match &l.value.kind {
                ExprKind::Path(p)
                    if p.len() == 2 && p[0].name == self.layout && p[1].name == self.keys =>
                {
                    Some(&k.value)
                }
                _ => None,
            },
            _ => None,
        }
    }
}

/// The pickle declaration a field decodes with (`codec pickle(P)`).
fn pickle_codec(f: &Field) -> Option<&Ident> {
    let (name, args) = f.codec()?;
    if name.name != "pickle" {
        return None;
    }
    match args {
        [a] if a.name.is_none() => match &a.value.kind {
            ExprKind::Path(p) if p.len() == 1 => Some(&p[0]),
            _ => None,
        },
        _ => None,
    }
}

/// True when a `file` format has a layout field decoded by the pickle codec.
pub(crate) fn is_pickle_file(fmt: &Fmt<'_>) -> bool {
    fmt.layouts
        .iter()
        .any(|l| l.fields.iter().any(|f| pickle_codec(f).is_some()))
}

/// A check over a pickle field's value `v`: `name == 0x..`, `name != "x"`, `&&`, `||`.
fn pickle_check(cx: &Cx<'_>, field: &str, e: &Expr) -> GResult<TokenStream> {
    match &e.kind {
        ExprKind::Binary { op, lhs, rhs } => match op {
            BinaryOp::And | BinaryOp::Or => {
                let nested = |x: &Expr| -> GResult<TokenStream> {
                    let t = pickle_check(cx, field, x)?;
                    Ok(match &x.kind {
                        ExprKind::Binary {
                            op: BinaryOp::And | BinaryOp::Or,
                            ..
                        } => quote!((#t)),
                        _ => t,
                    })
                };
                let (a, b) = (nested(lhs)?, nested(rhs)?);
                Ok(if *op == BinaryOp::And {
                    quote!(#a && #b)
                } else {
                    quote!(#a || #b)
                })
            }
            BinaryOp::Eq | BinaryOp::Ne => {
                if !matches!(&lhs.kind, ExprKind::Path(p) if p.len() == 1 && p[0].name == field) {
                    return Err(cx.unsupported(
                        lhs.span,
                        "a pickle field check over other than the field itself",
                    ));
                }
                let cmp = if *op == BinaryOp::Eq {
                    quote!(==)
                } else {
                    quote!(!=)
                };
                match &rhs.kind {
                    ExprKind::Int(i) => Ok(quote!(v.as_i128() #cmp Some(#i))),
                    ExprKind::Str(s) => Ok(quote!(v.as_str() #cmp Some(#s))),
                    _ => Err(cx.unsupported(
                        rhs.span,
                        "a pickle field compared with other than a literal",
                    )),
                }
            }
            _ => Err(cx.unsupported(e.span, "this operator in a pickle field check")),
        },
        _ => Err(cx.unsupported(e.span, "this pickle field check")),
    }
}

/// The local a record field is read into.
fn rec_var(name: &str) -> proc_macro2::Ident {
    match name {
        "c" | "r" | "dtype" | "size" => format_ident!("f_{}", name),
        _ => format_ident!("{}", name),
    }
}

/// An integer expression over a record's fields (`i128` locals) and `dtype`.
fn rec_int(cx: &mut Cx<'_>, fields: &[String], e: &Expr) -> GResult<TokenStream> {
    match &e.kind {
        ExprKind::Int(i) => Ok(quote!(#i)),
        ExprKind::Path(p) if p.len() == 1 && fields.contains(&p[0].name) => {
            let v = rec_var(&p[0].name);
            Ok(quote!(#v))
        }
        ExprKind::Call { callee, args } if expr::join(callee) == "itemsize" => {
            match args.as_slice() {
                [a] if matches!(&a.value.kind, ExprKind::Path(p) if p.len() == 1 && p[0].name == "dtype") => {
                    Ok(quote!(i128::from(dtype.itemsize().unwrap_or(0) as u32)))
                }
                _ => Err(cx.unsupported(e.span, "`itemsize` of other than `dtype` in a record")),
            }
        }
        ExprKind::Binary { op, lhs, rhs } => {
            let a = rec_int(cx, fields, lhs)?;
            let b = rec_int(cx, fields, rhs)?;
            let m = match op {
                BinaryOp::Add => quote!(checked_add),
                BinaryOp::Sub => quote!(checked_sub),
                BinaryOp::Mul => quote!(checked_mul),
                _ => return Err(cx.unsupported(e.span, "this operator in a record expression")),
            };
            cx.needs_overflow = true;
            let what = cx.text(e.span);
            Ok(quote!(#a.#m(#b).ok_or_else(|| overflow(#what, #what))?))
        }
        _ => Err(cx.unsupported(e.span, "this expression in a record")),
    }
}

/// The negation of a condition over a record's fields: true when the check fails.
fn rec_fails(cx: &mut Cx<'_>, fields: &[String], e: &Expr) -> GResult<TokenStream> {
    let ExprKind::Binary { op, lhs, rhs } = &e.kind else {
        return Err(cx.unsupported(e.span, "this record check"));
    };
    if matches!(op, BinaryOp::And | BinaryOp::Or) {
        let a = rec_fails(cx, fields, lhs)?;
        let b = rec_fails(cx, fields, rhs)?;
        // Not (a and b) is (not a) or (not b), and the other way round.
        return Ok(if *op == BinaryOp::And {
            quote!((#a) || (#b))
        } else {
            quote!((#a) && (#b))
        });
    }
    let a = rec_int(cx, fields, lhs)?;
    let b = rec_int(cx, fields, rhs)?;
    Ok(match op {
        BinaryOp::Eq => quote!(#a != #b),
        BinaryOp::Ne => quote!(#a == #b),
        BinaryOp::Lt => quote!(#a >= #b),
        BinaryOp::Le => quote!(#a > #b),
        BinaryOp::Gt => quote!(#a <= #b),
        BinaryOp::Ge => quote!(#a < #b),
        _ => return Err(cx.unsupported(e.span, "this operator in a record check")),
    })
}

/// `snake_case` of a layout's `CamelCase` name.
fn snake(name: &str) -> String {
    let mut out = String::new();
    for (i, ch) in name.chars().enumerate() {
        if ch.is_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.extend(ch.to_lowercase());
        } else {
            out.push(ch);
        }
    }
    out
}

/// `index` and a refusing writer of a `file` format around pickles.
pub(crate) fn gen_file_pickle(
    cx: &mut Cx<'_>,
    model: &Model<'_>,
    fmt: &Fmt<'_>,
) -> GResult<TokenStream> {
    let public = fmt.public_name();
    let [map] = fmt.tensors.as_slice() else {
        return Err(cx.unsupported(
            fmt.ast.name.span,
            "a format without exactly one tensor mapping",
        ));
    };
    // `tensor from L.object.<kind>s as t`
    let ExprKind::Path(src) = &map.source.kind else {
        return Err(cx.unsupported(map.source.span, "this mapping source"));
    };
    let [lname, objfield, kinds] = src.as_slice() else {
        return Err(cx.unsupported(
            map.source.span,
            "a mapping over other than `<layout>.<pickle field>.<kind>s`",
        ));
    };
    let Some(layout) = fmt.layout(&lname.name) else {
        return Err(cx.err(lname.span, format!("unknown layout `{}`", lname.name)));
    };
    let Some(ofield) = layout.field(&objfield.name) else {
        return Err(cx.err(
            objfield.span,
            format!("`{}` has no field `{}`", lname.name, objfield.name),
        ));
    };
    let Some(decl) = pickle_codec(ofield) else {
        return Err(cx.err(
            objfield.span,
            format!("`{}` is not a pickle field", objfield.name),
        ));
    };
    let Some(pdecl) = fmt.ast.pickles().find(|p| p.name.name == decl.name) else {
        return Err(cx.err(decl.span, format!("unknown pickle `{}`", decl.name)));
    };
    let kind = super::resolve_kind(cx, pdecl, kinds)?;
    if let Some(w) = &map.filter {
        return Err(cx.unsupported(w.span, "a `where` filter on a tensor mapping"));
    }
    let (params, persistent) = super::kind_params(pdecl, &kind);

    // The layout: pickle fields, then the repeated records (last).
    let mut fields = Vec::new();
    let mut pickle_fields: Vec<String> = Vec::new();
    let mut records: Option<(&Field, &Layout, String)> = None;
    for (i, f) in layout.fields.iter().enumerate() {
        let name = &f.name.name;
        if let Some(d) = pickle_codec(f) {
            if !matches!(&f.ty, FieldType::Named(t) if t.name() == "bytes") {
                return Err(cx.unsupported(f.span, "a pickle field of other than `bytes`"));
            }
            if d.name != decl.name {
                return Err(cx.unsupported(d.span, "pickle fields of several declarations"));
            }
            let mut tests = Vec::new();
            let mut texts = Vec::new();
            for c in f.checks() {
                tests.push(pickle_check(cx, name, c)?);
                texts.push(cx.text(c.span));
            }
            fields.push(if tests.is_empty() {
                quote!(rt::pickle::Field::new(#name))
            } else {
                let text = texts.join(" && ");
                quote!(rt::pickle::Field::checked(#name, |v| #(#tests)&&*, #text))
            });
            pickle_fields.push(name.clone());
            continue;
        }
        let (FieldType::Named(t), Some(Repeat::Count(count))) = (&f.ty, f.repeat()) else {
            return Err(cx.unsupported(
                f.span,
                "a field of this layout other than a pickle or counted records",
            ));
        };
        if i + 1 != layout.fields.len() {
            return Err(cx.unsupported(f.span, "records other than the last field"));
        }
        let Some(rl) = fmt.layout(&t.name()) else {
            return Err(cx.unsupported(t.span, "records of other than a layout of this format"));
        };
        let keys = match &count.kind {
            ExprKind::Call { callee, args } if expr::join(callee) == "len" => match args.as_slice()
            {
                [a] => match &a.value.kind {
                    ExprKind::Path(p) if p.len() == 1 && pickle_fields.contains(&p[0].name) => {
                        p[0].name.clone()
                    }
                    _ => String::new(),
                },
                _ => String::new(),
            },
            _ => String::new(),
        };
        if keys.is_empty() {
            return Err(cx.unsupported(
                count.span,
                "a record count other than `len(<earlier pickle field>)`",
            ));
        }
        records = Some((f, rl, keys));
    }
    let Some((rfield, rlayout, keys)) = records else {
        return Err(cx.unsupported(layout.span, "a layout of pickles without counted records"));
    };
    let payloads: Vec<&Field> = rlayout
        .fields
        .iter()
        .filter(|f| matches!(&f.ty, FieldType::Named(t) if t.name() == "payload"))
        .collect();
    let [payload] = payloads.as_slice() else {
        return Err(cx.unsupported(
            rlayout.span,
            "a record layout without exactly one `payload` field",
        ));
    };
    let rref = RecordsRef {
        layout: lname.name.clone(),
        records: rfield.name.name.clone(),
        payload: payload.name.name.clone(),
        keys: keys.clone(),
    };
    // The key expression and the persistent-id argument it reads.
    let mut key_expr = None;
    for st in &map.stmts {
        if let TensorStmt::Assign { key, value, .. } = st {
            if key.name == "data" {
                value.walk(&mut |e| {
                    if let ExprKind::Index { base, index } = &e.kind {
                        if let Some(k) = rref.matches(base, index) {
                            key_expr = Some(k.clone());
                        }
                    }
                });
            }
        }
    }
    let Some(key_expr) = key_expr else {
        return Err(cx.unsupported(
            map.span,
            &format!(
                "a mapping whose `data` is not `{0}.{1}.{2}[index_of({0}.{3}, key)]`",
                rref.layout, rref.records, rref.payload, rref.keys
            ),
        ));
    };
    let id_param = match &key_expr.kind {
        ExprKind::Path(p) if p.len() == 3 && p[0].name == map.binding.name => {
            Some(p[1].name.clone())
        }
        _ => None,
    };

    let mut scope = PScope {
        fmt,
        binding: &map.binding.name,
        params,
        persistent: persistent.clone(),
        texts: Vec::new(),
        lookups: Vec::new(),
        dtype: false,
        ext_tables: super::visible_tables(model, fmt),
        records: Some(rref),
        uses_texts: Default::default(),
    };
    let s = super::map_stmts(cx, map, false)?;
    let mf = format_ident!("{}_tensor", snake(&lname.name));
    let doc = format!(
        " The tensor that a `{kind}` call builds (`{}` at `path`): the mapping `tensor from {}`.",
        map.binding.name,
        cx.text(map.source.span),
    );
    let mapping = super::gen_map_fn(cx, &mut scope, &s, &mf, &doc, false)?;

    // The record reader.
    let rname = &rfield.name.name;
    let mut int_fields: Vec<String> = Vec::new();
    let mut rsteps = Vec::new();
    let mut range = None;
    let little = !matches!(rlayout.endian, Endian::Big);
    for f in &rlayout.fields {
        let fname = &f.name.name;
        let path = format!("{rname}.{fname}");
        if std::ptr::eq(f, *payload) {
            let Some(size) = f.size() else {
                return Err(cx.unsupported(f.span, "a payload without `size`"));
            };
            let s = rec_int(cx, &int_fields, size)?;
            let neg = format!("the size of `{path}` is negative: {{}}");
            rsteps.push(quote! {
                let size: i128 = #s;
                let size = u64::try_from(size).map_err(|_| {
                    c.error(#path, rt::ErrorKind::Invalid(format!(#neg, size)))
                })?;
            });
            range = Some(quote!(c.span(#path, size)));
            continue;
        }
        if range.is_some() {
            return Err(cx.unsupported(f.span, "a record field after its payload"));
        }
        let FieldType::Named(t) = &f.ty else {
            return Err(cx.unsupported(f.span, "this record field"));
        };
        let m = match (t.name().as_str(), little) {
            (n @ ("u8" | "i8"), _) => n.to_string(),
            (n @ ("u16" | "u32" | "u64" | "i16" | "i32" | "i64"), true) => format!("{n}_le"),
            (n @ ("u16" | "u32" | "u64" | "i16" | "i32" | "i64"), false) => format!("{n}_be"),
            _ => {
                return Err(cx.unsupported(
                    f.span,
                    "a record field of other than an integer type or `payload`",
                ))
            }
        };
        let m = format_ident!("{}", m);
        let var = rec_var(fname);
        rsteps.push(quote!(let #var = i128::from(c.#m(#path)?);));
        let known: Vec<String> = int_fields.iter().cloned().chain([fname.clone()]).collect();
        for ch in f.checks() {
            let fails = rec_fails(cx, &known, ch)?;
            let msg = format!("check failed: {}", cx.text(ch.span));
            rsteps.push(quote! {
                if #fails {
                    return Err(c.error(#path, rt::ErrorKind::Invalid(#msg.to_string())));
                }
            });
        }
        // Agreement with the persistent ids' item of the same name.
        if let (Some(i), Some(_)) = (persistent.iter().position(|p| p == fname), &id_param) {
            let i = proc_macro2::Literal::usize_unsuffixed(i);
            rsteps.push(quote!(r.agrees(c, #path, #fname, #i, #var)?;));
        }
        int_fields.push(fname.clone());
    }
    let range = range.expect("the record has a payload");
    let uses_r = rsteps.iter().any(|t| t.to_string().contains("r ."));
    let r = if uses_r { quote!(r) } else { quote!(_r) };
    let dtype_let = rsteps
        .iter()
        .any(|t| t.to_string().contains("dtype"))
        .then(|| quote!(let dtype = r.dtype;));
    let r = if dtype_let.is_some() { quote!(r) } else { r };

    let position = |name: &str| {
        layout
            .fields
            .iter()
            .position(|f| f.name.name == name)
            .expect("a field of the layout")
    };
    let (object, keys_at) = (
        proc_macro2::Literal::usize_unsuffixed(position(&objfield.name)),
        proc_macro2::Literal::usize_unsuffixed(position(&keys)),
    );
    let persistent_arg = id_param.unwrap_or_default();
    let rules = format_ident!("{}_rules", pdecl.name.name.to_lowercase());
    let is_kind = format_ident!("is_{}_{}", pdecl.name.name.to_lowercase(), kind);
    let rf = format_ident!("{}", snake(&rlayout.name.name));
    let rdoc = format!(
        " One `{}` of `{rname}`: the byte range of its `{}`, `r.dtype` being the dtype of the tensors whose bytes it holds.",
        rlayout.name.name, payload.name.name
    );
    let fdoc = format!(
        " The `{}` layout: its pickles, read back to back, then the `{rname}` records, and the tensor mapping.",
        lname.name
    );
    let read_only = match model.files[fmt.file]
        .uses
        .first()
        .and_then(|u| model.format(&u.name))
    {
        Some(o) => format!("{public} is read-only; write {} instead", o.public_name()),
        None => format!("{public} is read-only"),
    };
    let entry_points = super::index_and_structure(
        " Lists the tensors of `src` without reading their bytes: reads the pickles, maps\n every object of the mapped kind, then sizes each record by the tensors using it.",
        "the pickled object",
    );
    let desc = crate::engine::read_only_desc(&read_only, true);
    let mapping = mapping.ts;
    Ok(quote! {
        #[doc = #fdoc]
        pub const FILE: rt::pickle::FileSpec = rt::pickle::FileSpec {
            fields: &[#(#fields),*],
            object: #object,
            keys: #keys_at,
            records: #rname,
            persistent: #persistent_arg,
            rules: #rules,
            is_target: #is_kind,
            map: #mf,
            record: #rf,
        };

        #entry_points {
            rt::pickle::read_file(src, limits, &FILE, with_structure)
        }

        #mapping

        #[doc = #rdoc]
        fn #rf(c: &mut rt::Cursor<'_>, #r: &rt::pickle::Record<'_>) -> rt::Result<(u64, u64)> {
            #dtype_let
            #(#rsteps)*
            #range
        }

        #desc
    })
}
