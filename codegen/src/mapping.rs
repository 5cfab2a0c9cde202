//! The inverse of a tensor mapping over a layout (`tensor from File as f { ... }`):
//! `<dict field>_for` builds the dict that describes a tensor to write, and
//! `write_tensor` writes one tensor as the layout. (Reading, `tensor`, is generated from
//! the IR: `crate::file`.)

use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use tensorfmt_schema::ast::*;

use crate::expr::{self, Cx, Scope, Ty, Val};
use crate::layout::{self, field_value, Kind, LayoutM};
use crate::model::{rs_ident, Fmt, GResult};

/// The statements of a mapping, by key.
pub(crate) struct Stmts<'s> {
    pub name: Option<&'s Expr>,
    pub dtype: Option<&'s Expr>,
    pub shape: Option<&'s Expr>,
    pub order: Option<&'s Expr>,
    pub byte_order: Option<&'s Expr>,
    pub data: Option<&'s Expr>,
    pub includes: Vec<&'s Expr>,
}

/// Sorts a mapping's statements, rejecting duplicates and unsupported keys.
pub(crate) fn stmts<'s>(cx: &Cx<'_>, map: &'s TensorMap) -> GResult<Stmts<'s>> {
    let mut s = Stmts {
        name: None,
        dtype: None,
        shape: None,
        order: None,
        byte_order: None,
        data: None,
        includes: Vec::new(),
    };
    if let Some(w) = &map.filter {
        return Err(cx.unsupported(w.span, "a `where` filter on a tensor mapping"));
    }
    for st in &map.stmts {
        match st {
            TensorStmt::Include(e) => s.includes.push(e),
            TensorStmt::Assign { key, value, span } => {
                let slot = match key.name.as_str() {
                    "name" => &mut s.name,
                    "dtype" => &mut s.dtype,
                    "shape" => &mut s.shape,
                    "order" => &mut s.order,
                    "byte_order" => &mut s.byte_order,
                    "data" => &mut s.data,
                    "strides" => return Err(cx.unsupported(*span, "`strides` in a tensor mapping")),
                    other => {
                        return Err(cx.err(key.span, format!("unknown tensor property `{other}`")))
                    }
                };
                if slot.is_some() {
                    return Err(cx.err(*span, format!("`{}` is assigned twice", key.name)));
                }
                *slot = Some(value);
            }
        }
    }
    Ok(s)
}

/// Names in reach in a mapping over a layout: the binding's fields, `source.stem`, and
/// the constants `c`, `fortran`, `le`, `be`.
pub(crate) struct MapScope<'a, 's> {
    pub binding: &'a str,
    pub layout: &'a LayoutM<'s>,
}

impl Scope for MapScope<'_, '_> {
    fn path(&self, cx: &mut Cx<'_>, e: &Expr, path: &[Ident]) -> GResult<Val> {
        let first = path[0].name.as_str();
        if first == self.binding && path.len() >= 2 {
            let Some(f) = self
                .layout
                .fields
                .iter()
                .find(|f| f.ast.name.name == path[1].name)
            else {
                return Err(cx.err(
                    path[1].span,
                    format!(
                        "`{}` has no field `{}`",
                        self.layout.ast.name.name, path[1].name
                    ),
                ));
            };
            if let Kind::Payload { .. } = f.kind {
                if path.len() == 2 {
                    let id = &f.ident;
                    return Ok(Val::atom(quote!(f.#id), Ty::Span));
                }
            }
            return field_value(cx, e, f, &path[1..], |f| {
                let id = &f.ident;
                quote!(f.#id)
            });
        }
        let v = match (first, path.len()) {
            ("source", 2) if path[1].name == "stem" => Val::atom(quote!(name.as_str()), Ty::Str),
            ("c", 1) => Val::atom(quote!(rt::Order::C), Ty::Order),
            ("fortran", 1) => Val::atom(quote!(rt::Order::Fortran), Ty::Order),
            ("le" | "little", 1) => Val::atom(quote!(rt::ByteOrder::Little), Ty::ByteOrder),
            ("be" | "big", 1) => Val::atom(quote!(rt::ByteOrder::Big), Ty::ByteOrder),
            _ => return Err(cx.err(e.span, format!("unknown name `{}`", expr::join(path)))),
        };
        Ok(v)
    }

    fn field(&self) -> String {
        self.binding.to_string()
    }
}

/// The field path of `f.header.descr` without the binding: `header.descr`.
fn field_path<'e>(binding: &str, e: &'e Expr) -> Option<Vec<&'e Ident>> {
    match &e.kind {
        ExprKind::Path(p) if p.len() >= 2 && p[0].name == binding => Some(p[1..].iter().collect()),
        _ => None,
    }
}

/// The inverse of a mapping over layout `l`: what the writer needs to write one tensor.
pub(crate) fn gen_layout_mapping(
    cx: &mut Cx<'_>,
    fmt: &Fmt<'_>,
    map: &TensorMap,
    l: &LayoutM<'_>,
) -> GResult<TokenStream> {
    let s = stmts(cx, map)?;
    if let Some(i) = s.includes.first() {
        return Err(cx.unsupported(i.span, "`include` in a mapping over a layout"));
    }
    let binding = map.binding.name.as_str();
    let scope = MapScope { binding, layout: l };
    let missing = |cx: &Cx<'_>, what: &str| {
        cx.err(map.span, format!("the tensor mapping needs `{what} = ..;`"))
    };

    // name
    let name = s.name.ok_or_else(|| missing(cx, "name"))?;
    if !matches!(&name.kind, ExprKind::Path(p) if expr::join(p) == "source.stem") {
        return Err(cx.unsupported(
            name.span,
            "a tensor name other than `source.stem` in a mapping over a layout",
        ));
    }
    // dtype = table[key]
    let dtype = s.dtype.ok_or_else(|| missing(cx, "dtype"))?;
    let ExprKind::Index { base, index } = &dtype.kind else {
        return Err(cx.unsupported(
            dtype.span,
            "a dtype that is not a table lookup `table[key]`",
        ));
    };
    let table = match &base.kind {
        ExprKind::Path(p) if p.len() == 1 => fmt
            .table(&p[0].name)
            .ok_or_else(|| cx.err(base.span, format!("unknown table `{}`", p[0].name)))?,
        _ => return Err(cx.unsupported(base.span, "a table that is not a name")),
    };
    if table.key_kind == KeyKind::Int {
        return Err(cx.unsupported(
            index.span,
            "an integer-keyed table lookup in a mapping over a layout",
        ));
    }
    let table_fn = rs_ident(&table.name.name);
    let shape = s.shape.ok_or_else(|| missing(cx, "shape"))?;
    // The writer streams the tensor's bytes as the payload field: `data` must be that
    // field, whole.
    let data = s.data.ok_or_else(|| missing(cx, "data"))?;
    let whole_payload = field_path(binding, data).is_some_and(|p| {
        p.len() == 1
            && l.fields
                .iter()
                .any(|f| f.ast.name.name == p[0].name && matches!(f.kind, Kind::Payload { .. }))
    });
    if !whole_payload {
        return Err(cx.unsupported(
            data.span,
            "writing tensor data that is not a whole payload field of the layout",
        ));
    }
    let lname = &l.ident;
    // The inverse: every dict key the mapping reads, from the tensor's metadata.
    let dict_fields = layout::dict_fields(l);
    let mut assigns: Vec<(String, String, TokenStream)> = Vec::new(); // (field, key, value)
    let mut pre = Vec::new();
    let public = fmt.public_name();
    let tname = &table.name.name;
    let target = |cx: &Cx<'_>, e: &Expr, what: &str| -> GResult<(String, String)> {
        match field_path(binding, e).as_deref() {
            Some([f, k]) if dict_fields.iter().any(|d| d.ast.name.name == f.name) => {
                Ok((f.name.clone(), k.name.clone()))
            }
            _ => Err(cx.unsupported(
                e.span,
                &format!("writing a {what} that is not a key of a dict field"),
            )),
        }
    };
    {
        let (f, k) = target(cx, index, "dtype")?;
        let table_for = format_ident!("{}_for", table.name.name);
        let msg = format!("{public} has no `{tname}` code for dtype {{}} in {{:?}} byte order");
        pre.push(quote! {
            let #table_fn = #table_for(meta.dtype, meta.byte_order).ok_or_else(|| {
                rt::Error::from(rt::ErrorKind::Unsupported(format!(#msg, meta.dtype, meta.byte_order)))
            })?;
        });
        assigns.push((f, k, quote!(#table_fn.to_string())));
    }
    {
        let (f, k) = target(cx, shape, "shape")?;
        assigns.push((f, k, quote!(meta.shape.clone())));
    }
    for (e, meta_field, what) in [
        (s.order, quote!(order), "order"),
        (s.byte_order, quote!(byte_order), "byte order"),
    ] {
        let Some(e) = e else { continue };
        match &e.kind {
            ExprKind::If {
                cond,
                then,
                otherwise,
            } => {
                let (c, negated) = match &cond.kind {
                    ExprKind::Unary {
                        op: UnaryOp::Not,
                        expr,
                    } => (&**expr, true),
                    _ => (&**cond, false),
                };
                let (f, k) = target(cx, c, what)?;
                let t = expr::compile(cx, &scope, then)?.ts;
                let _ = expr::compile(cx, &scope, otherwise)?;
                let op = if negated { quote!(!=) } else { quote!(==) };
                assigns.push((f, k, quote!(meta.#meta_field #op #t)));
            }
            _ => {
                // A constant: the writer can only write that.
                let v = expr::compile(cx, &scope, e)?.ts;
                let msg = format!("{public} stores only {} {what}", cx.text(e.span));
                pre.push(quote! {
                    if meta.#meta_field != #v {
                        return Err(rt::Error::from(rt::ErrorKind::Unsupported(#msg.to_string())));
                    }
                });
            }
        }
    }
    let mut inverse = Vec::new();
    let mut write_args = Vec::new();
    for f in l.fields.iter() {
        match &f.kind {
            Kind::Dict { dict: d, .. } => {
                let fname = &f.ast.name.name;
                let fn_name = format_ident!("{}_for", fname);
                let dname = rs_ident(&d.name.name);
                let mut inits = Vec::new();
                for key in &d.fields {
                    let k = rs_ident(&key.key);
                    match assigns.iter().find(|(ff, kk, _)| ff == fname && *kk == key.key) {
                        Some((_, _, v)) => inits.push(quote!(#k: #v)),
                        None if key.optional => inits.push(quote!(#k: None)),
                        None => {
                            return Err(cx.unsupported(
                                key.key_span,
                                &format!(
                                    "writing the dict key `{}`, which the tensor mapping does not determine,",
                                    key.key
                                ),
                            ))
                        }
                    }
                }
                let doc = format!(
                    " The `{}` describing a tensor to write: the inverse of [`tensor`]. A dtype without a code in `{tname}` is an [`rt::ErrorKind::Unsupported`] error.",
                    d.name.name
                );
                inverse.push(quote! {
                    #[doc = #doc]
                    pub fn #fn_name(meta: &rt::TensorMeta) -> rt::Result<#dname> {
                        #(#pre)*
                        Ok(#dname { #(#inits),* })
                    }
                });
                write_args.push(quote!(&#fn_name(meta)?));
            }
            Kind::Payload { .. } => {
                write_args.push(quote!(data));
                write_args.push(quote!(meta.nbytes()?));
            }
            _ => {}
        }
    }
    if layout::writer_params_beyond_dicts(l, cx)? {
        return Err(cx.unsupported(
            l.ast.name.span,
            "writing a layout with fields that neither a rule nor the tensor mapping computes",
        ));
    }
    let wdoc = format!(
        " Writes one tensor as a `{}`: `meta` gives the header, `data` holds exactly `meta.nbytes()` bytes in `meta`'s order and byte order. Returns the number of bytes written.",
        l.ast.name.name
    );
    Ok(quote! {
        #(#inverse)*
        #[doc = #wdoc]
        pub fn write_tensor<W: ::std::io::Write + ?Sized>(
            w: &mut W,
            meta: &rt::TensorMeta,
            data: rt::Payload<'_>,
        ) -> rt::Result<u64> {
            #lname::write(w, #(#write_args),*)
        }
    })
}
