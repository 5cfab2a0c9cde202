//! The `file` engine around pickles: a layout whose fields are self-delimiting pickles
//! (`bytes codec pickle(P)`, read back to back with `rt::pickle::read_prefix`), then
//! records repeated once per item of one of them (`R repeat count(len(keys))`). The
//! mapping is over the objects one pickle builds (`File.object.tensors`), like the zip
//! engine's; its data is a record's `payload` field looked up by key
//! (`File.storages.bytes[index_of(File.keys, t.storage.key)]`).
//!
//! In a record layout, `dtype` is the dtype of the tensors whose data is that record (the
//! mapping's `data` inverted): they must agree on the element size, and a record that no
//! tensor uses cannot be sized. A record field named like an item of the persistent ids
//! (`numel`) must equal that item of every persistent id naming the record.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use tensorfmt_schema::ast::*;

use super::{PScope, T};
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

/// A check over a pickle field's value: `name == 0x..`, `name != "x"`, `&&`, `||`.
fn pickle_check(
    cx: &Cx<'_>,
    var: &proc_macro2::Ident,
    field: &str,
    e: &Expr,
) -> GResult<TokenStream> {
    match &e.kind {
        ExprKind::Binary { op, lhs, rhs } => match op {
            BinaryOp::And | BinaryOp::Or => {
                let a = pickle_check(cx, var, field, lhs)?;
                let b = pickle_check(cx, var, field, rhs)?;
                Ok(if *op == BinaryOp::And {
                    quote!((#a && #b))
                } else {
                    quote!((#a || #b))
                })
            }
            BinaryOp::Eq | BinaryOp::Ne => {
                if !matches!(&lhs.kind, ExprKind::Path(p) if p.len() == 1 && p[0].name == field) {
                    return Err(cx.unsupported(
                        lhs.span,
                        "a pickle field check over other than the field itself",
                    ));
                }
                let test = match &rhs.kind {
                    ExprKind::Int(i) => quote!((#var.as_i128() == Some(#i))),
                    ExprKind::Str(s) => quote!((#var.as_str() == Some(#s))),
                    _ => {
                        return Err(cx.unsupported(
                            rhs.span,
                            "a pickle field compared with other than a literal",
                        ))
                    }
                };
                Ok(if *op == BinaryOp::Ne {
                    quote!(!(#test))
                } else {
                    test
                })
            }
            _ => Err(cx.unsupported(e.span, "this operator in a pickle field check")),
        },
        _ => Err(cx.unsupported(e.span, "this pickle field check")),
    }
}

/// An integer expression over a record's fields (`i128` locals) and `dtype`.
fn rec_int(cx: &mut Cx<'_>, fields: &[String], e: &Expr) -> GResult<TokenStream> {
    match &e.kind {
        ExprKind::Int(i) => Ok(quote!(#i)),
        ExprKind::Path(p) if p.len() == 1 && fields.contains(&p[0].name) => {
            let v = format_ident!("f_{}", p[0].name);
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

/// A condition over a record's fields.
fn rec_cond(cx: &mut Cx<'_>, fields: &[String], e: &Expr) -> GResult<TokenStream> {
    match &e.kind {
        ExprKind::Binary { op, lhs, rhs } => {
            if matches!(op, BinaryOp::And | BinaryOp::Or) {
                let a = rec_cond(cx, fields, lhs)?;
                let b = rec_cond(cx, fields, rhs)?;
                return Ok(if *op == BinaryOp::And {
                    quote!((#a && #b))
                } else {
                    quote!((#a || #b))
                });
            }
            let a = rec_int(cx, fields, lhs)?;
            let b = rec_int(cx, fields, rhs)?;
            Ok(match op {
                BinaryOp::Eq => quote!((#a == #b)),
                BinaryOp::Ne => quote!((#a != #b)),
                BinaryOp::Lt => quote!((#a < #b)),
                BinaryOp::Le => quote!((#a <= #b)),
                BinaryOp::Gt => quote!((#a > #b)),
                BinaryOp::Ge => quote!((#a >= #b)),
                _ => return Err(cx.unsupported(e.span, "this operator in a record check")),
            })
        }
        _ => Err(cx.unsupported(e.span, "this record check")),
    }
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
    let mut steps = Vec::new();
    let mut pickle_fields: Vec<String> = Vec::new();
    let mut records: Option<(&Field, &Layout, String)> = None;
    for (i, f) in layout.fields.iter().enumerate() {
        let name = &f.name.name;
        if let Some(d) = pickle_codec(f) {
            if !matches!(&f.ty, FieldType::Named(t) if t.name() == "bytes") {
                return Err(cx.unsupported(f.span, "a pickle field of other than `bytes`"));
            }
            let Some(pd) = fmt.ast.pickles().find(|p| p.name.name == d.name) else {
                return Err(cx.err(d.span, format!("unknown pickle `{}`", d.name)));
            };
            let rules = format_ident!("{}_rules", pd.name.name.to_lowercase());
            let var = format_ident!("p_{}", name);
            let mut checks = Vec::new();
            for c in f.checks() {
                let test = pickle_check(cx, &var, name, c)?;
                let msg = format!("check failed: {}", cx.text(c.span));
                checks.push(quote! {
                    #[allow(unused_parens)]
                    let ok: bool = #test;
                    if !ok {
                        return Err(in_file(rt::Error::from(rt::ErrorKind::Invalid(#msg.to_string())).in_field(#name)).with_offset_at(start));
                    }
                });
            }
            steps.push(quote! {
                let start = pos;
                let #var: rt::pickle::Value = {
                    let n = (total - pos).min(limits.max_header_bytes);
                    let owned;
                    let window: &[u8] = match src.data().as_slice() {
                        Some(all) => &all[pos as usize..(pos + n) as usize],
                        None => {
                            let mut v = vec![0u8; n as usize];
                            src.data().read_exact_at(pos, &mut v).map_err(in_file)?;
                            owned = v;
                            &owned
                        }
                    };
                    let (value, used) = rt::pickle::read_prefix(window, #rules(), limits).map_err(|mut e| {
                        e.location.offset = Some(e.location.offset.unwrap_or(0) + start);
                        in_file(e.in_field(#name))
                    })?;
                    pos += used as u64;
                    value
                };
                let _ = &#var;
                #(#checks)*
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

    let ext_tables = super::visible_tables(model, fmt);
    let mut scope = PScope {
        fmt,
        binding: &map.binding.name,
        params,
        persistent: persistent.clone(),
        texts: Vec::new(),
        lookups: Vec::new(),
        dtype: false,
        ext_tables,
        records: Some(rref),
    };

    // The mapping's statements.
    let mut slots: [Option<&Expr>; 6] = Default::default();
    const KEYS: [&str; 6] = ["name", "dtype", "shape", "strides", "byte_order", "data"];
    for st in &map.stmts {
        match st {
            TensorStmt::Include(i) => {
                return Err(cx.unsupported(i.span, "`include` in a mapping over a pickle"))
            }
            TensorStmt::Assign { key, value, span } => {
                let Some(k) = KEYS.iter().position(|k| *k == key.name) else {
                    return Err(cx.unsupported(*span, &format!("`{}` in this mapping", key.name)));
                };
                if slots[k].is_some() {
                    return Err(cx.err(*span, format!("`{}` is assigned twice", key.name)));
                }
                slots[k] = Some(value);
            }
        }
    }
    let need = |k: usize| {
        slots[k].ok_or_else(|| {
            cx.err(
                map.span,
                format!("the tensor mapping needs `{} = ..;`", KEYS[k]),
            )
        })
    };
    let (name, dtype, shape, data) = (need(0)?, need(1)?, need(2)?, need(5)?);
    let name_v = scope.compile(cx, name)?;
    scope.expect(cx, name, &name_v, T::Str)?;
    let dtype_v = scope.compile(cx, dtype)?;
    scope.expect(cx, dtype, &dtype_v, T::DType)?;
    let kv = scope.compile(cx, &key_expr)?;
    let key_ts = scope.name_text(cx, &key_expr, &kv)?;
    scope.dtype = true;
    let shape_v = scope.compile(cx, shape)?;
    let shape_ts = scope.int_list(cx, shape, &shape_v, true)?;
    let strides_ts = match slots[3] {
        Some(s) => {
            let sv = scope.compile(cx, s)?;
            scope.int_list(cx, s, &sv, false)?
        }
        None => quote!(rt::contiguous_strides(&shape, rt::Order::C)?),
    };
    let bo_ts = match slots[4] {
        Some(b) => {
            let bv = scope.compile(cx, b)?;
            scope.expect(cx, b, &bv, T::ByteOrder)?;
            bv.ts
        }
        None => quote!(dtype.1.unwrap_or(rt::ByteOrder::Little)),
    };
    let data_v = scope.compile(cx, data)?;
    scope.expect(cx, data, &data_v, T::Range)?;
    let (name_ts, dtype_ts, data_ts) = (&name_v.ts, &dtype_v.ts, &data_v.ts);

    // The record reader.
    let rname = &rfield.name.name;
    let mut int_fields: Vec<String> = Vec::new();
    let mut rsteps = Vec::new();
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
                let range = c.span(#path, size).map_err(in_file)?;
            });
            continue;
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
        let var = format_ident!("f_{}", fname);
        rsteps.push(quote!(let #var: i128 = c.#m(#path).map_err(in_file)? as i128;));
        for ch in f.checks() {
            let t = rec_cond(
                cx,
                &int_fields
                    .iter()
                    .cloned()
                    .chain([fname.clone()])
                    .collect::<Vec<_>>(),
                ch,
            )?;
            let msg = format!("check failed: {}", cx.text(ch.span));
            rsteps.push(quote! {
                #[allow(unused_parens)]
                let ok: bool = #t;
                if !ok {
                    return Err(in_file(c.error(#path, rt::ErrorKind::Invalid(#msg.to_string()))));
                }
            });
        }
        // Agreement with the persistent ids' item of the same name.
        if let (Some(i), Some(_)) = (persistent.iter().position(|p| p == fname), &id_param) {
            let msg = format!("storage {{:?}} has wrong byte size: its record holds {fname} {{}}, its persistent id says {{}}");
            rsteps.push(quote! {
                if let Some(&d) = declared.get(&(key.to_string(), #i)) {
                    if d != #var {
                        return Err(in_file(c.error(#path, rt::ErrorKind::SizeMismatch(format!(#msg, key, #var, d)))));
                    }
                }
            });
        }
        int_fields.push(fname.clone());
    }
    // Items of the persistent ids collected for the agreement checks.
    let collect_declared = match &id_param {
        Some(param) => {
            let idx: Vec<usize> = rlayout
                .fields
                .iter()
                .filter_map(|f| persistent.iter().position(|p| *p == f.name.name))
                .collect();
            quote! {
                if let Some(rt::pickle::Value::Persistent(id)) = o.arg(#param) {
                    for i in [#(#idx),*] {
                        if let Some(n) = id.as_seq().and_then(|s| s.get(i)).and_then(|v| v.as_i128()) {
                            declared.insert((key.to_string(), i), n);
                        }
                    }
                }
            }
        }
        None => quote!(),
    };

    let ovar = format_ident!("p_{}", objfield.name);
    let kvar = format_ident!("p_{}", keys);
    let is_kind = format_ident!("is_{}_{}", pdecl.name.name.to_lowercase(), kind);
    let not_list = format!("`{keys}` is not a list of storage keys");
    let unused =
        format!("{rname}: storage {{:?}} is used by no tensor, so its element size is unknown");
    let mixed = "storage {:?} is viewed with element sizes {} and {}";
    let trailing = format!("{{}} bytes follow the last record of `{rname}`");
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
    let tree = super::tree_of(quote!(#ovar));
    let desc = crate::engine::read_only_desc(&read_only, true);
    Ok(quote! {
        #entry_points {
            trait At { fn with_offset_at(self, at: u64) -> Self; }
            impl At for rt::Error {
                fn with_offset_at(mut self, at: u64) -> Self {
                    self.location.offset = Some(at);
                    self
                }
            }
            let in_file = |e: rt::Error| match src.path() {
                Some(p) => e.in_file(p),
                None => e,
            };
            let total = src.data().len();
            let mut pos: u64 = 0;
            #(#steps)*
            let keys: ::std::vec::Vec<::std::string::String> = #kvar
                .as_seq()
                .ok_or_else(|| in_file(rt::Error::from(rt::ErrorKind::Invalid(#not_list.to_string()))))?
                .iter()
                .map(|k| match k {
                    rt::pickle::Value::Str(s) => Some(s.to_string()),
                    rt::pickle::Value::Int(i) => Some(i.to_string()),
                    _ => None,
                })
                .collect::<::std::option::Option<_>>()
                .ok_or_else(|| in_file(rt::Error::from(rt::ErrorKind::Invalid(#not_list.to_string()))))?;
            let objects = rt::pickle::find_objects(&#ovar, &#is_kind, limits).map_err(in_file)?;
            // The records' dtypes: those of the tensors using them.
            let mut rec_dtype: ::std::collections::HashMap<::std::string::String, rt::DType> = ::std::collections::HashMap::new();
            let mut declared: ::std::collections::HashMap<(::std::string::String, usize), i128> = ::std::collections::HashMap::new();
            for (path, o) in &objects {
                (|| -> rt::Result<()> {
                    let dtype: (rt::DType, ::std::option::Option<rt::ByteOrder>) = #dtype_ts;
                    let key: &str = #key_ts;
                    if let Some(prev) = rec_dtype.get(key) {
                        if prev.itemsize() != dtype.0.itemsize() {
                            return Err(rt::Error::from(rt::ErrorKind::Invalid(format!(#mixed, key, prev, dtype.0))));
                        }
                    } else {
                        rec_dtype.insert(key.to_string(), dtype.0);
                    }
                    #collect_declared
                    Ok(())
                })()
                .map_err(|e| in_file(e.in_field(if path.is_empty() { "<root>" } else { path.as_str() })))?;
            }
            // The records, one per key.
            let mut records: ::std::collections::HashMap<&str, (u64, u64)> = ::std::collections::HashMap::new();
            let mut c = rt::Cursor::new(src.data(), src.location()).starting_at(pos).map_err(in_file)?;
            for key in &keys {
                let key: &str = key.as_str();
                let dtype = *rec_dtype.get(key).ok_or_else(|| {
                    in_file(rt::Error::from(rt::ErrorKind::Invalid(format!(#unused, key))))
                })?;
                #(#rsteps)*
                records.insert(key, range);
            }
            if c.remaining() != 0 {
                return Err(in_file(c.error(#rname, rt::ErrorKind::Invalid(format!(#trailing, c.remaining())))));
            }
            let mut tensors = ::std::vec::Vec::with_capacity(objects.len());
            let mut names_of: ::std::collections::HashMap<usize, ::std::collections::VecDeque<::std::string::String>> = ::std::collections::HashMap::new();
            for (path, o) in objects {
                let t = (|| -> rt::Result<rt::TensorInfo> {
                    let name: &str = #name_ts;
                    let dtype: (rt::DType, ::std::option::Option<rt::ByteOrder>) = #dtype_ts;
                    let shape: ::std::vec::Vec<u64> = #shape_ts;
                    let strides: ::std::vec::Vec<i64> = #strides_ts;
                    let byte_order: rt::ByteOrder = #bo_ts;
                    let (offset, len): (u64, u64) = #data_ts;
                    rt::TensorInfo::strided(name, dtype.0, shape, strides, byte_order, rt::DataLocation::Range { offset, len })
                })()
                .map_err(|e| in_file(e.in_field(if path.is_empty() { "<root>" } else { path.as_str() })))?;
                if with_structure {
                    names_of.entry(o as *const rt::pickle::Object as usize).or_default().push_back(t.name.clone());
                }
                tensors.push(t);
            }
            let structure = if with_structure {
                Some(#tree.map_err(in_file)?)
            } else {
                None
            };
            Ok((tensors, structure))
        }

        #desc
    })
}
