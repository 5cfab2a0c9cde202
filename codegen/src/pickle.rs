//! Pickle declarations and the zip engine around a pickled object: `pickle P { ... }`
//! compiles into an `rt::pickle::Rules` constructor and one `is_<kind>` predicate per
//! call kind; a `zip` format whose entry has `codec pickle(P)` gets an `index` that reads
//! that member, finds every object of the mapped kind (`pickle.content.tensors`), and
//! maps each with the tensor mapping, whose expressions are compiled here over pickle
//! values (`t.size`, `t.storage.key`), text entries (`byteorder.content`), tables and
//! entry lookups (`storage(key = ..)`).

use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use tensorfmt_schema::ast::*;

use crate::expr::{self, Cx};
use crate::model::{rs_ident, Fmt, GResult, Model};

mod file;
pub(crate) use file::{gen_file_pickle, is_pickle_file};

/// The runtime kind of a declared kind name; `None` for a call.
fn builtin_kind(name: &str) -> Option<TokenStream> {
    Some(match name {
        "dict" => quote!(rt::pickle::Kind::Dict),
        "list" => quote!(rt::pickle::Kind::List),
        "set" => quote!(rt::pickle::Kind::Set),
        "tuple" => quote!(rt::pickle::Kind::Tuple),
        "class" => quote!(rt::pickle::Kind::Class),
        "object" => quote!(rt::pickle::Kind::Object),
        _ => return None,
    })
}

/// `<name>_rules()` and `is_<name>_<kind>(o)` for every call kind.
pub(crate) fn gen_pickle(cx: &Cx<'_>, p: &Pickle) -> GResult<TokenStream> {
    let mut allow = Vec::new();
    let mut kinds: Vec<(String, Vec<(String, String)>)> = Vec::new();
    let mut protocol = None;
    let mut persistent = false;
    for item in &p.items {
        match item {
            PickleItem::Protocol(v, _) => protocol = Some(*v as u8),
            PickleItem::Persistent { .. } => persistent = true,
            PickleItem::Global {
                path, kind, params, ..
            } => {
                let Some((module, name)) = path.value.rsplit_once('.') else {
                    return Err(cx.err(path.span, "a global is written \"module.name\""));
                };
                let k = match builtin_kind(&kind.name) {
                    Some(k) => {
                        if !params.is_empty() {
                            return Err(cx.err(
                                kind.span,
                                format!("the kind `{}` takes no parameters", kind.name),
                            ));
                        }
                        k
                    }
                    None => {
                        let ps = params.iter().map(|i| &i.name);
                        match kinds.iter_mut().find(|(k, _)| *k == kind.name) {
                            Some((_, g)) => g.push((module.to_string(), name.to_string())),
                            None => kinds.push((
                                kind.name.clone(),
                                vec![(module.to_string(), name.to_string())],
                            )),
                        }
                        quote!(rt::pickle::Kind::Call {
                            params: ::std::vec![#(#ps.to_string()),*].into()
                        })
                    }
                };
                // `"module.*"`: every global of the module and its submodules.
                allow.push(if name == "*" {
                    quote!(.allow_module(#module, #k))
                } else {
                    quote!(.allow(#module, #name, #k))
                });
            }
        }
    }
    let protocols = match protocol {
        Some(v) => quote!(.protocols(0..=#v)),
        None => quote!(),
    };
    let f = format_ident!("{}_rules", p.name.name.to_lowercase());
    let doc = format!(
        " What a `{}` pickle may contain: the declared globals, {}persistent ids{} (built once).",
        p.name.name,
        if persistent { "" } else { "no " },
        protocol
            .map(|v| format!(", protocols 0 to {v}"))
            .unwrap_or_default()
    );
    let preds = kinds.iter().map(|(k, globals)| {
        let f = format_ident!("is_{}_{}", p.name.name.to_lowercase(), k);
        let pats = globals.iter().map(|(m, n)| quote!((#m, #n)));
        let doc = format!(" True when `o` is a call that builds a `{k}`.");
        quote! {
            #[doc = #doc]
            pub fn #f(o: &rt::pickle::Object) -> bool {
                matches!((&*o.global.module, &*o.global.name), #(#pats)|*)
            }
        }
    });
    Ok(quote! {
        #[doc = #doc]
        pub fn #f() -> &'static rt::pickle::Rules {
            static RULES: ::std::sync::OnceLock<rt::pickle::Rules> = ::std::sync::OnceLock::new();
            RULES.get_or_init(|| {
                rt::pickle::Rules::new()
                    #(#allow)*
                    .persistent_ids(#persistent)
                    #protocols
            })
        }
        #(#preds)*
    })
}

/// Every entry whose content is a pickle, with the declaration it names, in schema order.
fn pickle_entries<'s>(fmt: &Fmt<'s>) -> Vec<(&'s Entry, &'s Ident)> {
    fmt.entries
        .iter()
        .copied()
        .filter_map(|e| {
            e.props
                .iter()
                .find_map(|p| match (&*p.name.name, &p.value) {
                    ("codec", Some(v)) => match &v.kind {
                        ExprKind::Call { callee, args }
                            if callee.len() == 1 && callee[0].name == "pickle" =>
                        {
                            match args.as_slice() {
                                [a] => match &a.value.kind {
                                    ExprKind::Path(p) if p.len() == 1 => Some((e, &p[0])),
                                    _ => None,
                                },
                                _ => None,
                            }
                        }
                        _ => None,
                    },
                    _ => None,
                })
        })
        .collect()
}

/// The entry whose content is a pickle (the first), with the declaration it names.
fn pickle_entry<'s>(fmt: &Fmt<'s>) -> Option<(&'s Entry, &'s Ident)> {
    pickle_entries(fmt).into_iter().next()
}

/// True when a zip format has an entry decoded by the pickle codec.
pub(crate) fn is_pickle_zip(fmt: &Fmt<'_>) -> bool {
    pickle_entry(fmt).is_some()
}

/// The type of a compiled mapping expression.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum T {
    /// `Option<&rt::pickle::Value>`: a pickle value, absent when not given.
    Obj,
    /// `Option<&str>`: an optional text entry's content.
    OptStr,
    /// `&str`.
    Str,
    /// `u64`.
    Int,
    /// `bool`.
    Bool,
    /// `(rt::DType, Option<rt::ByteOrder>)`.
    DType,
    /// `rt::ByteOrder`.
    ByteOrder,
    /// `none`.
    None,
    /// `(member, skip)`: a zip member from a byte offset to its end.
    Data,
    /// `(offset, len)`: a byte range of the file (a `payload` field of a record).
    Range,
}

struct V {
    ts: TokenStream,
    t: T,
}

fn v(ts: TokenStream, t: T) -> GResult<V> {
    Ok(V { ts, t })
}

/// What the mapping's names refer to.
struct PScope<'a, 's> {
    fmt: &'a Fmt<'s>,
    binding: &'a str,
    /// Parameters of the mapped call kind.
    params: Vec<String>,
    /// Persistent id items by name.
    persistent: Vec<String>,
    /// Text entries (their content is `entry_<name>`).
    texts: Vec<&'s Entry>,
    /// Entries with captures besides the pickle's (looked up by `E(capture = v)`).
    lookups: Vec<&'s Entry>,
    /// Whether `dtype` is in reach (after the dtype is computed).
    dtype: bool,
    /// Tables of visible formats: `(format, table, module, key kind)`.
    ext_tables: Vec<(String, &'s Table, proc_macro2::Ident)>,
    /// Around a layout (`file` engine): `File.storages.bytes[index_of(File.keys, k)]`.
    records: Option<file::RecordsRef>,
}

impl PScope<'_, '_> {
    fn compile(&self, cx: &mut Cx<'_>, e: &Expr) -> GResult<V> {
        let text = cx.text(e.span);
        match &e.kind {
            ExprKind::None => v(quote!(()), T::None),
            ExprKind::Str(s) => v(quote!(#s), T::Str),
            ExprKind::Int(i) => {
                let i = u64::try_from(*i).map_err(|_| cx.err(e.span, "an integer out of range"))?;
                v(quote!(#i), T::Int)
            }
            ExprKind::Path(p) => self.path(cx, e, p),
            ExprKind::If {
                cond,
                then,
                otherwise,
            } => {
                let c = self.compile(cx, cond)?;
                self.expect(cx, cond, &c, T::Bool)?;
                let a = self.compile(cx, then)?;
                let b = self.compile(cx, otherwise)?;
                if a.t != b.t {
                    return Err(cx.err(e.span, format!("the branches of `{text}` differ in type")));
                }
                let (c, a2, b2) = (&c.ts, &a.ts, &b.ts);
                v(quote!(if #c { #a2 } else { #b2 }), a.t)
            }
            ExprKind::Binary { op, lhs, rhs } => self.binary(cx, e, *op, lhs, rhs),
            ExprKind::In { expr: x, list } => {
                let a = self.compile(cx, x)?;
                let mut lits = Vec::new();
                for i in list {
                    match &i.kind {
                        ExprKind::Str(s) => lits.push(s.clone()),
                        _ => {
                            return Err(cx.unsupported(i.span, "an `in` list of other than strings"))
                        }
                    }
                }
                let a2 = &a.ts;
                match a.t {
                    T::Str => v(quote!(matches!(#a2, #(#lits)|*)), T::Bool),
                    T::OptStr => v(quote!(matches!(#a2, Some(#(#lits)|*))), T::Bool),
                    _ => Err(cx.unsupported(e.span, "`in` over something other than text")),
                }
            }
            ExprKind::Index { base, index } => {
                if let Some(r) = self.records.as_ref().and_then(|r| r.matches(base, index)) {
                    let k = self.compile(cx, r)?;
                    let key = self.name_text(cx, r, &k)?;
                    return v(
                        quote!({
                            let key = #key;
                            *records.get(key).ok_or_else(|| {
                                rt::Error::from(rt::ErrorKind::NotFound(format!("storage {:?} is not in the key list", key)))
                            })?
                        }),
                        T::Range,
                    );
                }
                let (table, module) = match &base.kind {
                    ExprKind::Path(p) if p.len() == 1 => (self.fmt.table(&p[0].name), None),
                    ExprKind::Path(p) if p.len() == 2 => match self
                        .ext_tables
                        .iter()
                        .find(|(f, t, _)| *f == p[0].name && t.name.name == p[1].name)
                    {
                        Some((_, t, m)) => (Some(*t), Some(m)),
                        None => (None, None),
                    },
                    _ => (None, None),
                };
                let Some(table) = table else {
                    return Err(cx.unsupported(e.span, "indexing other than a table lookup"));
                };
                if table.key_kind != KeyKind::Str {
                    return Err(cx.unsupported(e.span, "an integer-keyed table here"));
                }
                let k = self.compile(cx, index)?;
                let key = self.name_text(cx, index, &k)?;
                let f = rs_ident(&table.name.name);
                let f = match module {
                    Some(m) => quote!(super::#m::#f),
                    None => quote!(#f),
                };
                let what = cx.text(index.span);
                v(
                    quote!({
                        let key = #key;
                        #f(key).ok_or_else(|| rt::Error::from(rt::ErrorKind::UnknownDType(key.to_string())).in_field(#what))?
                    }),
                    T::DType,
                )
            }
            ExprKind::Call { callee, args } => self.call(cx, e, callee, args),
            _ => Err(cx.unsupported(e.span, &format!("`{text}` in a mapping over a pickle"))),
        }
    }

    fn expect(&self, cx: &Cx<'_>, e: &Expr, got: &V, t: T) -> GResult<()> {
        if got.t == t {
            Ok(())
        } else {
            Err(cx.err(
                e.span,
                format!("`{}` is {:?}, expected {:?}", cx.text(e.span), got.t, t),
            ))
        }
    }

    /// A pickle value or string as text: a global's `module.name`, a string, an integer.
    fn name_text(&self, cx: &Cx<'_>, e: &Expr, x: &V) -> GResult<TokenStream> {
        let what = cx.text(e.span);
        let msg = format!("`{what}` is not a name");
        let ts = &x.ts;
        match x.t {
            T::Str => Ok(quote!(#ts)),
            T::Obj => Ok(quote!(&{
                let v: ::std::option::Option<&rt::pickle::Value> = #ts;
                match v {
                    Some(rt::pickle::Value::Global(g)) => ::std::borrow::Cow::Borrowed(&*g.path),
                    Some(rt::pickle::Value::Str(s)) => ::std::borrow::Cow::Borrowed(&**s),
                    Some(rt::pickle::Value::Int(i)) => ::std::borrow::Cow::Owned(i.to_string()),
                    _ => return Err(rt::Error::from(rt::ErrorKind::Invalid(#msg.to_string())).in_field(#what)),
                }
            }[..])),
            _ => Err(cx.err(e.span, format!("`{what}` is not text"))),
        }
    }

    /// A pickle value as a non-negative integer.
    fn int(&self, cx: &Cx<'_>, e: &Expr, x: &V) -> GResult<TokenStream> {
        let what = cx.text(e.span);
        let msg = format!("`{what}` is not a non-negative integer");
        let ts = &x.ts;
        match x.t {
            T::Int => Ok(ts.clone()),
            T::Obj => Ok(quote!(#ts
                .and_then(rt::pickle::Value::as_i64)
                .and_then(|i| u64::try_from(i).ok())
                .ok_or_else(|| rt::Error::from(rt::ErrorKind::Invalid(#msg.to_string())).in_field(#what))?)),
            _ => Err(cx.err(e.span, format!("`{what}` is not an integer"))),
        }
    }

    /// A pickle value as a list of integers (`shape`, `strides`).
    fn int_list(&self, cx: &Cx<'_>, e: &Expr, x: &V, unsigned: bool) -> GResult<TokenStream> {
        let what = cx.text(e.span);
        let ts = &x.ts;
        if x.t != T::Obj {
            return Err(cx.err(e.span, format!("`{what}` is not a list of integers")));
        }
        let msg = format!("`{what}` is not a tuple of integers");
        let list = quote!(#ts
            .and_then(rt::pickle::Value::as_int_list)
            .ok_or_else(|| rt::Error::from(rt::ErrorKind::Invalid(#msg.to_string())).in_field(#what))?);
        Ok(if unsigned {
            let neg = format!("`{what}` has a negative item");
            quote!(#list
                .into_iter()
                .map(u64::try_from)
                .collect::<::std::result::Result<::std::vec::Vec<u64>, _>>()
                .map_err(|_| rt::Error::from(rt::ErrorKind::Invalid(#neg.to_string())).in_field(#what))?)
        } else {
            list
        })
    }

    fn path(&self, cx: &mut Cx<'_>, e: &Expr, p: &[Ident]) -> GResult<V> {
        let first = p[0].name.as_str();
        let text = expr::join(p);
        if first == self.binding {
            match p.get(1).map(|i| i.name.as_str()) {
                Some("path") if p.len() == 2 => return v(quote!(path.as_str()), T::Str),
                Some(param) if self.params.iter().any(|x| x == param) => {
                    let arg = quote!(o.arg(#param));
                    return match p.get(2) {
                        None => v(arg, T::Obj),
                        Some(item) if p.len() == 3 => {
                            let Some(i) = self.persistent.iter().position(|x| *x == item.name)
                            else {
                                return Err(cx.err(
                                    item.span,
                                    format!("persistent ids have no item `{}`", item.name),
                                ));
                            };
                            v(
                                quote!(match #arg {
                                    Some(rt::pickle::Value::Persistent(id)) => id.as_seq().and_then(|s| s.get(#i)),
                                    _ => None,
                                }),
                                T::Obj,
                            )
                        }
                        _ => Err(cx.unsupported(e.span, &format!("the path `{text}`"))),
                    };
                }
                _ => {
                    return Err(cx.err(
                        e.span,
                        format!("`{text}`: the mapped objects have no such argument"),
                    ))
                }
            }
        }
        if p.len() == 2 && p[1].name == "content" {
            if let Some(t) = self.texts.iter().find(|t| t.name.name == first) {
                let var = format_ident!("entry_{}", t.name.name);
                return if t.is_optional() {
                    v(quote!(#var.as_deref()), T::OptStr)
                } else {
                    v(quote!(#var.as_str()), T::Str)
                };
            }
        }
        match (first, p.len()) {
            ("le" | "little", 1) => v(quote!(rt::ByteOrder::Little), T::ByteOrder),
            ("be" | "big", 1) => v(quote!(rt::ByteOrder::Big), T::ByteOrder),
            ("dtype", 1) if self.dtype => v(quote!(dtype), T::DType),
            _ => Err(cx.err(e.span, format!("unknown name `{text}`"))),
        }
    }

    fn binary(
        &self,
        cx: &mut Cx<'_>,
        e: &Expr,
        op: BinaryOp,
        lhs: &Expr,
        rhs: &Expr,
    ) -> GResult<V> {
        let a = self.compile(cx, lhs)?;
        let b = self.compile(cx, rhs)?;
        match op {
            BinaryOp::Eq | BinaryOp::Ne => {
                let neg = op == BinaryOp::Ne;
                let (x, y) = if a.t == T::None || a.t == T::Str {
                    (&b, &a)
                } else {
                    (&a, &b)
                };
                let xs = &x.ts;
                let ys = &y.ts;
                let test = match (x.t, y.t) {
                    (T::Obj, T::None) => {
                        quote!(matches!(#xs, None | Some(rt::pickle::Value::None)))
                    }
                    (T::OptStr, T::None) => quote!(#xs.is_none()),
                    (T::OptStr, T::Str) => quote!(#xs == Some(#ys)),
                    (T::Str, T::Str) => quote!(#xs == #ys),
                    (T::Obj, T::Str) => {
                        quote!(#xs.and_then(rt::pickle::Value::as_str) == Some(#ys))
                    }
                    (T::Int, T::Int) => quote!(#xs == #ys),
                    _ => return Err(cx.unsupported(e.span, "this comparison")),
                };
                v(if neg { quote!(!(#test)) } else { test }, T::Bool)
            }
            BinaryOp::Add if a.t == T::Str && b.t == T::Str => {
                let (x, y) = (&a.ts, &b.ts);
                v(quote!(&::std::format!("{}{}", #x, #y)), T::Str)
            }
            BinaryOp::Add | BinaryOp::Mul => {
                cx.needs_overflow = true;
                let x = self.int(cx, lhs, &a)?;
                let y = self.int(cx, rhs, &b)?;
                let what = cx.text(e.span);
                let m = if op == BinaryOp::Add {
                    quote!(checked_add)
                } else {
                    quote!(checked_mul)
                };
                v(
                    quote!((#x).#m(#y).ok_or_else(|| overflow(#what, #what))?),
                    T::Int,
                )
            }
            _ => Err(cx.unsupported(e.span, "this operator in a mapping over a pickle")),
        }
    }

    fn call(&self, cx: &mut Cx<'_>, e: &Expr, callee: &[Ident], args: &[Arg]) -> GResult<V> {
        let name = expr::join(callee);
        match (name.as_str(), args) {
            ("itemsize", [a]) if a.name.is_none() => {
                let x = self.compile(cx, &a.value)?;
                self.expect(cx, &a.value, &x, T::DType)?;
                let xs = &x.ts;
                v(quote!((#xs).0.itemsize().unwrap_or(0) as u64), T::Int)
            }
            ("slice", [d, start, end]) if self.records.is_some() => {
                let dv = self.compile(cx, &d.value)?;
                self.expect(cx, &d.value, &dv, T::Range)?;
                if !matches!(end.value.kind, ExprKind::None) {
                    return Err(cx.unsupported(end.value.span, "a slice end other than `none`"));
                }
                let s = self.compile(cx, &start.value)?;
                let s = self.int(cx, &start.value, &s)?;
                let ds = &dv.ts;
                v(
                    quote!({
                        let (offset, len): (u64, u64) = #ds;
                        let skip: u64 = #s;
                        let rest = len.checked_sub(skip).ok_or_else(|| {
                            rt::Error::from(rt::ErrorKind::SizeMismatch(format!(
                                "tensor '{}' starts at byte {} of its storage, which holds {}", name, skip, len
                            )))
                        })?;
                        (offset + skip, rest)
                    }),
                    T::Range,
                )
            }
            ("slice", [d, start, end]) => {
                let dv = self.compile(cx, &d.value)?;
                self.expect(cx, &d.value, &dv, T::Data)?;
                if !matches!(end.value.kind, ExprKind::None) {
                    return Err(cx.unsupported(end.value.span, "a slice end other than `none`"));
                }
                let s = self.compile(cx, &start.value)?;
                let s = self.int(cx, &start.value, &s)?;
                let ds = &dv.ts;
                v(
                    quote!({ let (m, skip) = #ds; (m, skip.checked_add(#s).ok_or_else(|| overflow("data", "slice start"))?) }),
                    T::Data,
                )
            }
            _ => {
                let Some(entry) = self
                    .lookups
                    .iter()
                    .find(|x| callee.len() == 1 && x.name.name == callee[0].name)
                else {
                    return Err(
                        cx.unsupported(e.span, &format!("`{name}(..)` in a mapping over a pickle"))
                    );
                };
                let caps = entry.captures();
                let [a] = args else {
                    return Err(
                        cx.unsupported(e.span, "an entry lookup with other than one capture")
                    );
                };
                let Some(cap) = a
                    .name
                    .as_ref()
                    .filter(|n| caps.iter().any(|c| *c == n.name))
                else {
                    return Err(cx.err(
                        e.span,
                        format!(
                            "`{name}(capture = value)` names a capture of `{}`",
                            entry.pattern.value
                        ),
                    ));
                };
                cx.needs_overflow = true;
                let x = self.compile(cx, &a.value)?;
                let key = self.name_text(cx, &a.value, &x)?;
                let capname = &cap.name;
                let pat = &entry.pattern.value;
                let ename = &entry.name.name;
                let missing = format!("the `{ename}` member {{}} (`{capname}` {{:?}}) is missing");
                v(
                    quote!({
                        let key = #key;
                        let member_name = captures.format(#pat, #capname, key)?;
                        let m = zip.find(&member_name).ok_or_else(|| {
                            rt::Error::from(rt::ErrorKind::NotFound(format!(#missing, member_name, key)))
                        })?;
                        (m, 0u64)
                    }),
                    T::Data,
                )
            }
        }
    }
}

/// The call kind that `name` (`tensor` or its plural `tensors`) names in `pdecl`.
pub(crate) fn resolve_kind(cx: &Cx<'_>, pdecl: &Pickle, name: &Ident) -> GResult<String> {
    let known = |n: &str| {
        pdecl
            .items
            .iter()
            .any(|i| matches!(i, PickleItem::Global { kind, .. } if kind.name == n))
    };
    if known(&name.name) {
        Ok(name.name.clone())
    } else if let Some(s) = name.name.strip_suffix('s').filter(|s| known(s)) {
        Ok(s.to_string())
    } else {
        Err(cx.err(
            name.span,
            format!("`{}` declares no kind `{}`", pdecl.name.name, name.name),
        ))
    }
}

/// The parameter names of every global of call kind `kind` (in first-seen order), and the
/// item names of the declaration's persistent ids.
pub(crate) fn kind_params(pdecl: &Pickle, kind: &str) -> (Vec<String>, Vec<String>) {
    let mut params = Vec::new();
    let mut persistent = Vec::new();
    for i in &pdecl.items {
        match i {
            PickleItem::Global {
                kind: k,
                params: ps,
                ..
            } if k.name == kind => {
                for p in ps {
                    if !params.contains(&p.name) {
                        params.push(p.name.clone());
                    }
                }
            }
            PickleItem::Persistent { params: ps, .. } => {
                persistent = ps.iter().map(|p| p.name.clone()).collect()
            }
            _ => {}
        }
    }
    (params, persistent)
}

/// `index` and `structure`, both over the generated `read_index(src, limits,
/// with_structure)`; `index_doc` documents `index`, `of` names what the tree is of.
pub(crate) fn index_and_structure(index_doc: &str, of: &str) -> TokenStream {
    let sdoc = format!(" The object tree of {of}, its tensors named as [`index`] names them.");
    let rdoc = format!(" The tensors, and with `with_structure` the object tree of {of}.");
    quote! {
        #[doc = #index_doc]
        pub fn index(src: &rt::Source, limits: &rt::Limits) -> rt::Result<::std::vec::Vec<rt::TensorInfo>> {
            Ok(read_index(src, limits, false)?.0)
        }

        #[doc = #sdoc]
        pub fn structure(src: &rt::Source, limits: &rt::Limits) -> rt::Result<::std::option::Option<rt::Node>> {
            Ok(read_index(src, limits, true)?.1)
        }

        #[doc = #rdoc]
        fn read_index(
            src: &rt::Source,
            limits: &rt::Limits,
            with_structure: bool,
        ) -> rt::Result<(::std::vec::Vec<rt::TensorInfo>, ::std::option::Option<rt::Node>)>
    }
}

/// The object tree of the pickle value `value`, naming each tensor object as the index
/// did (`names_of`: object address → the names it was listed under, in walk order).
pub(crate) fn tree_of(value: TokenStream) -> TokenStream {
    quote! {
        rt::pickle::to_tree(&#value, &mut |o| {
            let q = names_of.get_mut(&(o as *const rt::pickle::Object as usize))?;
            if q.len() > 1 { q.pop_front() } else { q.front().cloned() }
        }, limits)
    }
}

/// `index` and `Writer` of a zip format around a pickled object.
/// The tables of the formats `fmt`'s file `use`s: `(format, table, module)`.
fn visible_tables<'s>(
    model: &Model<'s>,
    fmt: &Fmt<'s>,
) -> Vec<(String, &'s Table, proc_macro2::Ident)> {
    let mut out = Vec::new();
    for u in &model.files[fmt.file].uses {
        if let Some(of) = model.format(&u.name) {
            for t in &of.tables {
                out.push((u.name.clone(), *t, of.module.clone()));
            }
        }
    }
    out
}

pub(crate) fn gen_zip_pickle(
    cx: &mut Cx<'_>,
    model: &Model<'_>,
    fmt: &Fmt<'_>,
) -> GResult<TokenStream> {
    let pickles = pickle_entries(fmt);
    let (pentry, decl) = pickles[0];
    let Some(pdecl) = fmt.ast.pickles().find(|p| p.name.name == decl.name) else {
        return Err(cx.err(decl.span, format!("unknown pickle `{}`", decl.name)));
    };
    if fmt.tensors.is_empty() {
        return Err(cx.unsupported(fmt.ast.name.span, "a `zip` format without a tensor mapping"));
    }
    // Entries: the pickle's captures are shared by all; text entries are read; others
    // are looked up by their remaining captures.
    let pcaps: Vec<String> = pentry.captures().iter().map(|s| s.to_string()).collect();
    let mut texts = Vec::new();
    let mut lookups = Vec::new();
    let mut entry_checks = Vec::new();
    let mut methods_ok = Vec::new();
    for e in &fmt.entries {
        if pickles.iter().any(|(p, _)| std::ptr::eq(*e, *p)) {
            if !e.captures().iter().all(|c| pcaps.iter().any(|p| p == c)) {
                return Err(cx.unsupported(
                    e.pattern.span,
                    "a second pickle entry with captures beyond the first's",
                ));
            }
            continue;
        }
        let mut text = false;
        for p in &e.props {
            match (p.name.name.as_str(), &p.value) {
                ("text", None) => text = true,
                ("optional" | "repeated" | "compression" | "align" | "write" | "preferred", _) => {}
                ("check", Some(_)) => {}
                (other, _) => {
                    return Err(
                        cx.unsupported(p.span, &format!("the entry property `{other}` here"))
                    )
                }
            }
        }
        let extra: Vec<&str> = e
            .captures()
            .into_iter()
            .filter(|c| !pcaps.iter().any(|p| p == c))
            .collect();
        if text {
            if !extra.is_empty() {
                return Err(cx.unsupported(
                    e.pattern.span,
                    "a text entry with captures beyond the pickle's",
                ));
            }
            texts.push(*e);
        } else if extra.len() == 1 {
            lookups.push(*e);
        } else {
            return Err(cx.unsupported(
                e.pattern.span,
                "an entry with other than one capture beyond the pickle's",
            ));
        }
    }
    let mut scope = PScope {
        fmt,
        binding: &fmt.tensors[0].binding.name,
        params: Vec::new(),
        persistent: Vec::new(),
        texts,
        lookups,
        dtype: false,
        ext_tables: visible_tables(model, fmt),
        records: None,
    };
    // Text entries: read, then checked.
    for t in &scope.texts {
        let var = format_ident!("entry_{}", t.name.name);
        let pat = &t.pattern.value;
        let ename = &t.name.name;
        let read = quote!(rt::zip::read_text(src.data(), m, limits)
            .map_err(|e| in_file(e.in_entry(m.name.as_str())))?);
        // The member, or why it is missing: under the `preferred` name when there is
        // one, else the pattern's (`name`).
        let find = match t.prop_value("preferred").map(|v| &v.kind) {
            Some(ExprKind::Str(pref)) => {
                let msg = format!("the `{ename}` member {{}} is missing (and so is {{}})");
                quote! {{
                    let preferred = captures.format_all(#pref)?;
                    match zip.find(&preferred) {
                        Some(m) => Ok(m),
                        None => zip.find(&name).ok_or_else(|| format!(#msg, name, preferred)),
                    }
                }}
            }
            _ => {
                let msg = format!("the `{ename}` member {{}} is missing");
                quote!(zip.find(&name).ok_or_else(|| format!(#msg, name)))
            }
        };
        if t.is_optional() {
            entry_checks.push(quote! {
                let #var: ::std::option::Option<::std::string::String> = {
                    let name = captures.format_all(#pat)?;
                    match #find {
                        Ok(m) => Some(#read),
                        Err(_) => None,
                    }
                };
                let _ = &#var;
            });
        } else {
            entry_checks.push(quote! {
                let #var: ::std::string::String = {
                    let name = captures.format_all(#pat)?;
                    let m = #find.map_err(|why| in_file(rt::Error::from(rt::ErrorKind::NotFound(why))))?;
                    #read
                };
                let _ = &#var;
            });
        }
        for p in &t.props {
            if let ("check", Some(c)) = (p.name.name.as_str(), &p.value) {
                // In a check, the entry's own name is its content.
                let c2 = rename(c, &t.name.name);
                let cv = scope.compile(cx, &c2)?;
                scope.expect(cx, c, &cv, T::Bool)?;
                let cts = &cv.ts;
                let msg = format!("check failed: {}", cx.text(c.span));
                let pat = &t.pattern.value;
                // The checks of an optional entry hold for its content when it is there.
                let present = if t.is_optional() {
                    quote!(#var.is_some() &&)
                } else {
                    quote!()
                };
                entry_checks.push(quote! {
                    if #present !(#cts) {
                        return Err(in_file(rt::Error::from(rt::ErrorKind::Invalid(#msg.to_string())).in_entry(captures.format_all(#pat)?)));
                    }
                });
            }
        }
    }
    for e in &fmt.entries {
        for p in &e.props {
            if let ("compression", Some(v)) = (p.name.name.as_str(), &p.value) {
                let ExprKind::List(items) = &v.kind else {
                    return Err(cx.err(v.span, "`compression` takes a list: `[stored, deflate]`"));
                };
                let mut ms = Vec::new();
                for i in items {
                    match &i.kind {
                        ExprKind::Path(p) if p.len() == 1 && p[0].name == "stored" => {
                            ms.push(quote!(rt::Compression::Stored))
                        }
                        ExprKind::Path(p) if p.len() == 1 && p[0].name == "deflate" => {
                            ms.push(quote!(rt::Compression::Deflate))
                        }
                        _ => return Err(cx.unsupported(i.span, "this compression")),
                    }
                }
                let pat = &e.pattern.value;
                methods_ok.push(quote!((#pat, &[#(#ms),*])));
            }
        }
    }

    // The mappings, each over the objects of one pickle entry.
    let mut blocks = Vec::new();
    let mut writer_spec = None;
    for map in &fmt.tensors {
        // `tensor from <entry>.content.<kind>s as t`
        let (mentry, mdecl) = match &map.source.kind {
            ExprKind::Path(p) if p.len() == 3 && p[1].name == "content" => {
                match pickles.iter().find(|(e, _)| e.name.name == p[0].name) {
                    Some(&(e, d)) => (e, d),
                    None => {
                        return Err(cx.unsupported(
                            map.source.span,
                            "a tensor mapping over other than `<pickle entry>.content.<kind>s`",
                        ))
                    }
                }
            }
            _ => {
                return Err(cx.unsupported(
                    map.source.span,
                    "a tensor mapping over other than `<pickle entry>.content.<kind>s`",
                ))
            }
        };
        let Some(mpdecl) = fmt.ast.pickles().find(|p| p.name.name == mdecl.name) else {
            return Err(cx.err(mdecl.span, format!("unknown pickle `{}`", mdecl.name)));
        };
        let ExprKind::Path(src_path) = &map.source.kind else {
            unreachable!("matched above")
        };
        let kind = resolve_kind(cx, mpdecl, &src_path[2])?;
        if let Some(w) = &map.filter {
            return Err(cx.unsupported(w.span, "a `where` filter on a tensor mapping"));
        }
        let (params, persistent) = kind_params(mpdecl, &kind);
        scope.binding = &map.binding.name;
        scope.params = params;
        scope.persistent = persistent;
        scope.dtype = false;
        let mut name = None;
        let mut dtype = None;
        let mut shape = None;
        let mut strides = None;
        let mut byte_order = None;
        let mut data = None;
        let mut write = None;
        for st in &map.stmts {
            match st {
                TensorStmt::Include(i) => {
                    return Err(cx.unsupported(i.span, "`include` in a mapping over a pickle"))
                }
                TensorStmt::Assign { key, value, span } => {
                    let slot = match key.name.as_str() {
                        "name" => &mut name,
                        "dtype" => &mut dtype,
                        "shape" => &mut shape,
                        "strides" => &mut strides,
                        "byte_order" => &mut byte_order,
                        "data" => &mut data,
                        "write" => &mut write,
                        other => {
                            return Err(cx.unsupported(
                                *span,
                                &format!("`{other}` in a mapping over a pickle"),
                            ))
                        }
                    };
                    if slot.is_some() {
                        return Err(cx.err(*span, format!("`{}` is assigned twice", key.name)));
                    }
                    *slot = Some(value);
                }
            }
        }
        fn need<'e>(
            cx: &Cx<'_>,
            map: &TensorMap,
            x: Option<&'e Expr>,
            what: &str,
        ) -> GResult<&'e Expr> {
            x.ok_or_else(|| cx.err(map.span, format!("the tensor mapping needs `{what} = ..;`")))
        }
        let (name, dtype, shape, data) = (
            need(cx, map, name, "name")?,
            need(cx, map, dtype, "dtype")?,
            need(cx, map, shape, "shape")?,
            need(cx, map, data, "data")?,
        );
        let name_v = scope.compile(cx, name)?;
        scope.expect(cx, name, &name_v, T::Str)?;
        let dtype_v = scope.compile(cx, dtype)?;
        scope.expect(cx, dtype, &dtype_v, T::DType)?;
        scope.dtype = true;
        let shape_v = scope.compile(cx, shape)?;
        let shape_ts = scope.int_list(cx, shape, &shape_v, true)?;
        let strides_ts = match strides {
            Some(s) => {
                let sv = scope.compile(cx, s)?;
                scope.int_list(cx, s, &sv, false)?
            }
            None => quote!(rt::contiguous_strides(&shape, rt::Order::C)?),
        };
        let bo_ts = match byte_order {
            Some(b) => {
                let bv = scope.compile(cx, b)?;
                scope.expect(cx, b, &bv, T::ByteOrder)?;
                bv.ts
            }
            None => quote!(dtype.1.unwrap_or(rt::ByteOrder::Little)),
        };
        let data_v = scope.compile(cx, data)?;
        scope.expect(cx, data, &data_v, T::Data)?;

        let (name_ts, dtype_ts, data_ts) = (&name_v.ts, &dtype_v.ts, &data_v.ts);
        let rules = format_ident!("{}_rules", mpdecl.name.name.to_lowercase());
        let is_kind = format_ident!("is_{}_{}", mpdecl.name.name.to_lowercase(), kind);
        let primary = std::ptr::eq(mentry, pentry);
        let member = if primary {
            quote!()
        } else {
            let pat = &mentry.pattern.value;
            let missing = format!("the `{}` member {{}} is missing", mentry.name.name);
            let absent = if mentry.is_optional() {
                quote!(None => ::std::option::Option::None,)
            } else {
                quote!(None => return Err(in_file(rt::Error::from(rt::ErrorKind::NotFound(format!(#missing, name))))),)
            };
            quote! {
                let name = captures.format_all(#pat)?;
                let pm: &rt::ZipMember = match zip.find(&name) {
                    Some(m) => m,
                    #absent
                };
            }
        };
        let tree = if primary {
            let tree = tree_of(quote!(value));
            quote! {
                if with_structure {
                    structure = Some(#tree.map_err(|e| in_file(e.in_entry(pm.name.as_str())))?);
                }
            }
        } else {
            quote!()
        };
        let body = quote! {
            #member
            let content = rt::zip::member_bytes(src.data(), pm, limits).map_err(|e| in_file(e.in_entry(pm.name.as_str())))?;
            let value = rt::pickle::read(&content, #rules(), limits).map_err(|e| in_file(e.in_entry(pm.name.as_str())))?;
            let objects = rt::pickle::find_objects(&value, &#is_kind, limits).map_err(|e| in_file(e.in_entry(pm.name.as_str())))?;
            let mut names_of: ::std::collections::HashMap<usize, ::std::collections::VecDeque<::std::string::String>> = ::std::collections::HashMap::new();
            for (path, o) in objects {
                let t = (|| -> rt::Result<rt::TensorInfo> {
                    let name: &str = #name_ts;
                    let dtype: (rt::DType, ::std::option::Option<rt::ByteOrder>) = #dtype_ts;
                    let shape: ::std::vec::Vec<u64> = #shape_ts;
                    let strides: ::std::vec::Vec<i64> = #strides_ts;
                    let byte_order: rt::ByteOrder = #bo_ts;
                    let (m, skip): (&rt::ZipMember, u64) = #data_ts;
                    let len = m.size.checked_sub(skip).ok_or_else(|| {
                        rt::Error::from(rt::ErrorKind::SizeMismatch(format!(
                            "tensor '{}' starts at byte {} of its storage, which holds {}", name, skip, m.size
                        )))
                    })?;
                    rt::TensorInfo::strided(name, dtype.0, shape, strides, byte_order, rt::zip::location(&zip, m, skip, len))
                        .map_err(|e| e.in_entry(m.name.as_str()))
                })()
                .map_err(|e| {
                    let e = if e.location.entry.is_none() { e.in_entry(pm.name.as_str()) } else { e };
                    in_file(e.in_field(if path.is_empty() { "<root>" } else { path.as_str() }))
                })?;
                if with_structure {
                    names_of.entry(o as *const rt::pickle::Object as usize).or_default().push_back(t.name.clone());
                }
                tensors.push(t);
            }
            #tree
        };
        // A secondary, optional pickle that is absent maps nothing.
        blocks.push(if !primary && mentry.is_optional() {
            quote!(#[allow(clippy::redundant_closure_call)] (|| -> rt::Result<()> { #body Ok(()) })()?;)
        } else {
            quote!({ #body })
        });
        if fmt.tensors.len() == 1 {
            writer_spec = Some((mpdecl, map, byte_order, data, write));
        } else if let Some(w) = write {
            return Err(cx.unsupported(w.span, "writing a format with several tensor mappings"));
        }
    }
    let ppat = &pentry.pattern.value;
    let public = fmt.public_name();
    let esc = ppat.replace('{', "{{").replace('}', "}}");
    let several = format!("{public}: several members match `{esc}`: {{}} and {{}}");
    let none = format!("{public}: no member matches `{ppat}`");
    let compressed = format!("{public} members may not be compressed with {{:?}}");
    let writer = match writer_spec {
        Some((pdecl, map, byte_order, data, write)) => gen_writer(
            cx,
            fmt,
            &scope,
            Spec {
                pentry,
                pdecl,
                map,
                byte_order,
                data,
                write,
            },
        )?,
        None => refusing_writer(public, true),
    };
    let _ = pdecl;
    let pconst = format_ident!("{}_PATTERN", pentry.name.name.to_uppercase());
    let entry_points = index_and_structure(
        " Lists the tensors of `src` without reading their bytes: reads the pickle members\n (with the declared globals only), then maps every object of the mapped kinds.",
        "the first pickle member",
    );
    Ok(quote! {
        #[doc = " The name pattern of the pickle member; its captures name every other member."]
        pub const #pconst: &str = #ppat;

        #entry_points {
            let in_file = |e: rt::Error| match src.path() {
                Some(p) => e.in_file(p),
                None => e,
            };
            let zip = rt::zip::index(src, limits).map_err(in_file)?;
            let methods: &[(&str, &[rt::Compression])] = &[#(#methods_ok),*];
            let methods = methods
                .iter()
                .map(|(pat, ok)| Ok((rt::Pattern::new(pat)?, *ok)))
                .collect::<rt::Result<::std::vec::Vec<_>>>()?;
            for m in zip.members().iter().filter(|m| m.compression != rt::Compression::Stored) {
                for (pat, ok) in &methods {
                    if !ok.contains(&m.compression) && pat.is_match(&m.name) {
                        return Err(in_file(rt::Error::from(rt::ErrorKind::Unsupported(format!(#compressed, m.compression))).in_entry(m.name.as_str())));
                    }
                }
            }
            let pattern = rt::Pattern::new(#pconst)?;
            let mut found: ::std::option::Option<(&rt::ZipMember, rt::Captures)> = None;
            for m in zip.members() {
                if let Some(values) = pattern.matches(&m.name) {
                    if let Some((prev, _)) = &found {
                        if prev.name != m.name {
                            return Err(in_file(rt::Error::from(rt::ErrorKind::Invalid(format!(#several, prev.name, m.name)))));
                        }
                    }
                    found = Some((m, rt::Captures::new(&pattern, values)));
                }
            }
            let Some((pm, captures)) = found else {
                return Err(in_file(rt::Error::from(rt::ErrorKind::NotFound(#none.to_string()))));
            };
            #(#entry_checks)*
            let mut tensors = ::std::vec::Vec::new();
            let mut structure: ::std::option::Option<rt::Node> = None;
            #(#blocks)*
            let _ = &mut structure;
            Ok((tensors, structure))
        }

        #writer
    })
}

/// `e` with the bare name `entry` replaced by `entry.content`.
fn rename(e: &Expr, entry: &str) -> Expr {
    let mut e = e.clone();
    fn go(e: &mut Expr, entry: &str) {
        match &mut e.kind {
            ExprKind::Path(p) if p.len() == 1 && p[0].name == entry => {
                let mut c = p[0].clone();
                c.name = "content".to_string();
                p.push(c);
            }
            ExprKind::Binary { lhs, rhs, .. } => {
                go(lhs, entry);
                go(rhs, entry);
            }
            ExprKind::Unary { expr, .. } => go(expr, entry),
            ExprKind::In { expr, .. } => go(expr, entry),
            _ => {}
        }
    }
    go(&mut e, entry);
    e
}

/// What the writer is generated from.
struct Spec<'s> {
    pentry: &'s Entry,
    pdecl: &'s Pickle,
    map: &'s TensorMap,
    byte_order: Option<&'s Expr>,
    data: &'s Expr,
    write: Option<&'s Expr>,
}

/// The value of an entry property.
fn prop<'e>(e: &'e Entry, name: &str) -> Option<&'e Expr> {
    e.props
        .iter()
        .find(|p| p.name.name == name)
        .and_then(|p| p.value.as_ref())
}

/// The compression methods an entry lists (stored when none).
fn methods(cx: &Cx<'_>, e: &Entry) -> GResult<Vec<TokenStream>> {
    let mut out = Vec::new();
    if let Some(v) = prop(e, "compression") {
        let ExprKind::List(items) = &v.kind else {
            return Err(cx.err(v.span, "`compression` takes a list: `[stored, deflate]`"));
        };
        for i in items {
            match &i.kind {
                ExprKind::Path(p) if p.len() == 1 && p[0].name == "stored" => {
                    out.push(quote!(rt::Compression::Stored))
                }
                ExprKind::Path(p) if p.len() == 1 && p[0].name == "deflate" => {
                    out.push(quote!(rt::Compression::Deflate))
                }
                _ => return Err(cx.unsupported(i.span, "this compression")),
            }
        }
    }
    if out.is_empty() {
        out.push(quote!(rt::Compression::Stored));
    }
    Ok(out)
}

/// An entry's `align` on write (1 when not given).
fn entry_align(cx: &Cx<'_>, e: &Entry) -> GResult<proc_macro2::Literal> {
    match prop(e, "align").map(|v| &v.kind) {
        None => Ok(proc_macro2::Literal::u16_unsuffixed(1)),
        Some(ExprKind::Int(n)) if *n >= 1 && *n <= i128::from(u16::MAX) => {
            Ok(proc_macro2::Literal::u16_unsuffixed(*n as u16))
        }
        Some(_) => Err(cx.unsupported(
            prop(e, "align").unwrap().span,
            "an entry alignment other than a literal in 1..=65535",
        )),
    }
}

/// Types of write-rule values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum W {
    /// `rt::pickle::Value`.
    Val,
    /// `&str`.
    Str,
    /// `Option<&'static str>`: a reverse table lookup.
    OptStr,
    /// `i128`.
    Int,
    /// `bool`.
    Bool,
    /// `none`.
    None,
    /// `rt::DType`.
    DType,
}

/// What write rules may name: the pickle's globals and persistent id.
struct WScope<'a> {
    fmt: &'a Fmt<'a>,
    /// `(module.name, kind, params)` of every declared global.
    globals: Vec<(String, String, Vec<String>)>,
    /// The persistent kind and its items.
    persistent: Option<(String, Vec<String>)>,
    /// Whether per-tensor names (`index`, `shape`, ...) are in reach.
    tensor: bool,
}

struct WV {
    ts: TokenStream,
    t: W,
    /// The table of a `key_of` lookup.
    table: Option<String>,
}

fn wv(ts: TokenStream, t: W) -> GResult<WV> {
    Ok(WV { ts, t, table: None })
}

fn global_value(path: &str) -> TokenStream {
    let (m, n) = path.rsplit_once('.').unwrap_or(("", path));
    quote!(rt::pickle::Value::Global(rt::pickle::Global::new(#m, #n)))
}

impl WScope<'_> {
    fn global(&self, path: &str) -> Option<&(String, String, Vec<String>)> {
        self.globals.iter().find(|g| g.0 == path)
    }

    fn to_val(&self, cx: &Cx<'_>, e: &Expr, x: WV) -> GResult<TokenStream> {
        let ts = x.ts;
        Ok(match x.t {
            W::Val => ts,
            W::Str => quote!(rt::pickle::Value::str(#ts)),
            W::Int => quote!(rt::pickle::Value::int(#ts)),
            W::Bool => quote!(rt::pickle::Value::Bool(#ts)),
            W::None => quote!(rt::pickle::Value::None),
            W::OptStr | W::DType => {
                return Err(cx.err(
                    e.span,
                    format!("`{}` is not a pickle value", cx.text(e.span)),
                ))
            }
        })
    }

    fn compile(&self, cx: &Cx<'_>, e: &Expr) -> GResult<WV> {
        let text = cx.text(e.span);
        match &e.kind {
            ExprKind::None => wv(quote!(()), W::None),
            ExprKind::Bool(b) => wv(quote!(#b), W::Bool),
            ExprKind::Str(s) => wv(quote!(#s), W::Str),
            ExprKind::Int(i) => {
                let l = proc_macro2::Literal::i128_suffixed(*i);
                wv(quote!(#l), W::Int)
            }
            ExprKind::If {
                cond,
                then,
                otherwise,
            } => {
                let c = self.compile(cx, cond)?;
                if c.t != W::Bool {
                    return Err(cx.err(cond.span, "a condition must be boolean"));
                }
                let a = self.compile(cx, then)?;
                let b = self.compile(cx, otherwise)?;
                let (a, b, t) = if a.t == b.t {
                    (a.ts, b.ts, a.t)
                } else {
                    (
                        self.to_val(cx, then, a)?,
                        self.to_val(cx, otherwise, b)?,
                        W::Val,
                    )
                };
                let c = c.ts;
                wv(quote!(if #c { #a } else { #b }), t)
            }
            ExprKind::Binary {
                op: op @ (BinaryOp::Eq | BinaryOp::Ne),
                lhs,
                rhs,
            } => {
                let a = self.compile(cx, lhs)?;
                let b = self.compile(cx, rhs)?;
                let x = match (a.t, b.t) {
                    (W::OptStr, W::None) => a.ts,
                    (W::None, W::OptStr) => b.ts,
                    _ => return Err(cx.unsupported(e.span, "this comparison in a write rule")),
                };
                if *op == BinaryOp::Eq {
                    wv(quote!((#x).is_none()), W::Bool)
                } else {
                    wv(quote!((#x).is_some()), W::Bool)
                }
            }
            ExprKind::Path(p) => {
                let path = expr::join(p);
                if self.tensor && p.len() == 1 {
                    match path.as_str() {
                        "index" => return wv(quote!(i128::from(index)), W::Int),
                        "offset" => return wv(quote!(i128::from(offset)), W::Int),
                        "numel" => return wv(quote!(i128::from(numel)), W::Int),
                        "nbytes" => return wv(quote!(i128::from(nbytes)), W::Int),
                        "dtype" => return wv(quote!(meta.dtype), W::DType),
                        "shape" => {
                            return wv(
                                quote!(rt::pickle::Value::tuple(
                                    meta.shape
                                        .iter()
                                        .map(|&d| rt::pickle::Value::int(i128::from(d)))
                                        .collect()
                                )),
                                W::Val,
                            )
                        }
                        "strides" => {
                            return wv(
                                quote!(rt::pickle::Value::tuple(
                                    strides
                                        .iter()
                                        .map(|&d| rt::pickle::Value::int(i128::from(d)))
                                        .collect()
                                )),
                                W::Val,
                            )
                        }
                        _ => {}
                    }
                }
                match self.global(&path) {
                    Some(_) => wv(global_value(&path), W::Val),
                    None => {
                        Err(cx.err(e.span, format!("`{path}` is not a declared pickle global")))
                    }
                }
            }
            ExprKind::Call { callee, args } => self.call(cx, e, callee, args),
            _ => Err(cx.unsupported(e.span, &format!("`{text}` in a pickle write rule"))),
        }
    }

    fn call(&self, cx: &Cx<'_>, e: &Expr, callee: &[Ident], args: &[Arg]) -> GResult<WV> {
        let name = expr::join(callee);
        let public = self.fmt.public_name();
        match (name.as_str(), args) {
            ("str", [a]) => {
                let x = self.compile(cx, &a.value)?;
                if x.t != W::Int {
                    return Err(cx.err(a.value.span, "`str` takes an integer"));
                }
                let ts = x.ts;
                wv(quote!(rt::pickle::Value::str(&(#ts).to_string())), W::Val)
            }
            ("key_of", [t, d]) => {
                let table = match t.value.as_path() {
                    Some([n]) => self.fmt.table(&n.name),
                    _ => None,
                };
                let Some(table) = table else {
                    return Err(cx.err(t.value.span, "`key_of` takes a table of this format"));
                };
                if table.key_kind != KeyKind::Str {
                    return Err(
                        cx.unsupported(t.value.span, "`key_of` over an integer-keyed table")
                    );
                }
                let dv = self.compile(cx, &d.value)?;
                if dv.t != W::DType {
                    return Err(cx.err(d.value.span, "`key_of(TABLE, dtype)`"));
                }
                let rev = format_ident!("{}_for", table.name.name);
                let dts = dv.ts;
                Ok(WV {
                    ts: quote!(#rev(#dts, byte_order)),
                    t: W::OptStr,
                    table: Some(table.name.name.clone()),
                })
            }
            ("global", [a]) => {
                let x = self.compile(cx, &a.value)?;
                match x.t {
                    W::Str => {
                        let ExprKind::Str(s) = &a.value.kind else {
                            return Err(cx.unsupported(a.value.span, "a computed global name"));
                        };
                        if self.global(s).is_none() {
                            return Err(cx.err(
                                a.value.span,
                                format!("\"{s}\" is not a declared pickle global"),
                            ));
                        }
                        wv(global_value(s), W::Val)
                    }
                    W::OptStr => {
                        let tname = x.table.clone().unwrap_or_default();
                        if let Some(t) = self.fmt.table(&tname) {
                            for row in &t.rows {
                                if let TableKey::Str(k) = &row.key {
                                    if self.global(k).is_none() {
                                        return Err(cx.err(
                                            row.span,
                                            format!("`global(key_of({tname}, ..))`: \"{k}\" is not a declared pickle global"),
                                        ));
                                    }
                                }
                            }
                        }
                        let msg = format!(
                            "{public} has no `{tname}` key for dtype {{}} ({{:?}} byte order)"
                        );
                        let ts = x.ts;
                        wv(
                            quote!({
                                let k: &str = (#ts).ok_or_else(|| rt::Error::from(rt::ErrorKind::Unsupported(format!(#msg, meta.dtype, byte_order))))?;
                                let (m, n) = k.rsplit_once('.').unwrap_or(("", k));
                                rt::pickle::Value::Global(rt::pickle::Global::new(m, n))
                            }),
                            W::Val,
                        )
                    }
                    _ => Err(cx.err(a.value.span, "`global` takes a name")),
                }
            }
            _ => {
                if let Some((kind, items)) = self.persistent.as_ref().filter(|p| p.0 == name) {
                    let names: Vec<&str> = args
                        .iter()
                        .map(|a| a.name.as_ref().map_or("", |n| n.name.as_str()))
                        .collect();
                    if names != items.iter().map(|s| s.as_str()).collect::<Vec<_>>() {
                        return Err(cx.err(
                            e.span,
                            format!(
                                "a `{kind}` persistent id names its items in order: {}",
                                items.join(", ")
                            ),
                        ));
                    }
                    let mut vals = Vec::new();
                    for a in args {
                        let x = self.compile(cx, &a.value)?;
                        vals.push(self.to_val(cx, &a.value, x)?);
                    }
                    return wv(
                        quote!(rt::pickle::Value::Persistent(::std::sync::Arc::new(
                            rt::pickle::Value::tuple(vec![#(#vals),*])
                        ))),
                        W::Val,
                    );
                }
                let Some((path, kind, params)) = self.global(&name) else {
                    return Err(cx.err(e.span, format!("`{name}` is not a declared pickle global")));
                };
                let (m, n) = path.rsplit_once('.').unwrap_or(("", path));
                let g = quote!(rt::pickle::Global::new(#m, #n));
                if let Some(k) = builtin_kind(kind) {
                    if kind == "class" {
                        return Err(cx.err(
                            e.span,
                            format!("`{name}` is declared `class`: it cannot be called"),
                        ));
                    }
                    if !args.is_empty() {
                        return Err(cx.unsupported(e.span, "a container call with arguments"));
                    }
                    return wv(
                        quote!(rt::pickle::Value::object(rt::pickle::Object::new(#g, #k))),
                        W::Val,
                    );
                }
                if args.len() != params.len() || args.iter().any(|a| a.name.is_some()) {
                    return Err(cx.err(
                        e.span,
                        format!(
                            "`{name}` takes {} positional arguments ({})",
                            params.len(),
                            params.join(", ")
                        ),
                    ));
                }
                let mut vals = Vec::new();
                for a in args {
                    let x = self.compile(cx, &a.value)?;
                    vals.push(self.to_val(cx, &a.value, x)?);
                }
                wv(
                    quote!(rt::pickle::Value::object(
                        rt::pickle::Object::new(#g, rt::pickle::Kind::Call { params: ::std::vec![#(#params.to_string()),*].into() })
                            .with_args(vec![#(#vals),*])
                    )),
                    W::Val,
                )
            }
        }
    }
}

/// True when `e` names the mapping's binding anywhere.
fn uses_binding(e: &Expr, binding: &str) -> bool {
    match &e.kind {
        ExprKind::Path(p) => p[0].name == binding,
        ExprKind::If {
            cond,
            then,
            otherwise,
        } => {
            uses_binding(cond, binding)
                || uses_binding(then, binding)
                || uses_binding(otherwise, binding)
        }
        ExprKind::Binary { lhs, rhs, .. } => {
            uses_binding(lhs, binding) || uses_binding(rhs, binding)
        }
        ExprKind::Unary { expr, .. } | ExprKind::In { expr, .. } => uses_binding(expr, binding),
        ExprKind::Call { args, .. } => args.iter().any(|a| uses_binding(&a.value, binding)),
        ExprKind::Index { base, index } => {
            uses_binding(base, binding) || uses_binding(index, binding)
        }
        _ => false,
    }
}

/// The streaming `Writer`: tensors go to storage members as they come (the mapping's
/// `data` run backwards: the member its object's persistent id names), the pickled root
/// object (the pickle entry's `write`, a dict-kind call getting `name -> object` items)
/// and the text entries' `write` contents are written by `finish`.
fn gen_writer(
    cx: &mut Cx<'_>,
    fmt: &Fmt<'_>,
    scope: &PScope<'_, '_>,
    sp: Spec<'_>,
) -> GResult<TokenStream> {
    let public = fmt.public_name();
    let pentry = sp.pentry;
    let Some(write) = sp.write else {
        return Ok(refusing_writer(public, true));
    };
    let mut globals = Vec::new();
    let mut persistent = None;
    for i in &sp.pdecl.items {
        match i {
            PickleItem::Global {
                path, kind, params, ..
            } => globals.push((
                path.value.clone(),
                kind.name.clone(),
                params.iter().map(|p| p.name.clone()).collect(),
            )),
            PickleItem::Persistent { kind, params, .. } => {
                persistent = Some((
                    kind.name.clone(),
                    params.iter().map(|p| p.name.clone()).collect(),
                ))
            }
            PickleItem::Protocol(..) => {}
        }
    }
    let mut ws = WScope {
        fmt,
        globals,
        persistent,
        tensor: true,
    };
    // The per-tensor object.
    let obj = ws.compile(cx, write)?;
    let obj_ts = ws.to_val(cx, write, obj)?;
    // The root: a call of a dict-kind global.
    ws.tensor = false;
    let Some(root) = prop(pentry, "write") else {
        return Err(cx.err(
            pentry.span,
            "the pickle entry needs `write = <dict-kind global>();` (the root object)",
        ));
    };
    let root_ts = match &root.kind {
        ExprKind::Call { callee, args } if args.is_empty() => {
            let name = expr::join(callee);
            match ws.global(&name) {
                Some((path, kind, _)) if kind == "dict" => {
                    let (m, n) = path.rsplit_once('.').unwrap_or(("", path));
                    quote!(rt::pickle::Object::new(rt::pickle::Global::new(#m, #n), rt::pickle::Kind::Dict))
                }
                _ => return Err(cx.err(root.span, format!("`{name}` is not a `dict` global"))),
            }
        }
        _ => {
            return Err(cx.unsupported(
                root.span,
                "a root object other than a call of a `dict` global with no arguments",
            ))
        }
    };
    let Some(wname) = prop(pentry, "write_name") else {
        return Err(cx.err(
            pentry.span,
            "the pickle entry needs `write_name = \"...\";`",
        ));
    };
    let ExprKind::Str(wname) = &wname.kind else {
        return Err(cx.err(wname.span, "`write_name` is a string"));
    };
    let pconst = format_ident!("{}_PATTERN", pentry.name.name.to_uppercase());
    let pmethod = &methods(cx, pentry)?[0];
    let palign = entry_align(cx, pentry)?;
    // Text entries: their written content.
    let mut text_bind = Vec::new();
    let mut text_write = Vec::new();
    for t in &scope.texts {
        let var = format_ident!("entry_{}", t.name.name);
        let content = match prop(t, "write").map(|v| &v.kind) {
            Some(ExprKind::Str(s)) => Some(s.clone()),
            Some(_) => {
                return Err(cx.unsupported(
                    prop(t, "write").unwrap().span,
                    "a text entry's `write` other than a string",
                ))
            }
            None if t.is_optional() => None,
            None => {
                return Err(cx.err(
                    t.span,
                    format!("the text entry `{}` needs `write = \"...\";`", t.name.name),
                ))
            }
        };
        match (&content, t.is_optional()) {
            (Some(c), true) => text_bind.push(quote!(let #var: ::std::option::Option<::std::string::String> = Some(#c.to_string());)),
            (None, _) => text_bind.push(quote!(let #var: ::std::option::Option<::std::string::String> = None;)),
            (Some(c), false) => text_bind.push(quote!(let #var: ::std::string::String = #c.to_string();)),
        }
        text_bind.push(quote!(let _ = &#var;));
        if let Some(c) = content {
            let pat = &t.pattern.value;
            let m = &methods(cx, t)?[0];
            let a = entry_align(cx, t)?;
            text_write.push(quote! {
                let name = captures.format_all(#pat)?;
                self.zip.start_member(&name, #m, #a)?;
                ::std::io::Write::write_all(&mut self.zip, #c.as_bytes()).map_err(|e| rt::Error::from(e).in_entry(name.as_str()))?;
            });
        }
    }
    // The byte order written: the mapping's, over the text entries as written.
    let bo_ts = match sp.byte_order {
        Some(b) => {
            if uses_binding(b, &sp.map.binding.name) {
                return Err(cx.unsupported(
                    b.span,
                    "writing a byte order that depends on the pickled object",
                ));
            }
            let bv = scope.compile(cx, b)?;
            scope.expect(cx, b, &bv, T::ByteOrder)?;
            bv.ts
        }
        None => quote!(rt::ByteOrder::Little),
    };
    // `data` backwards: `slice(E(capture = x), start, none)` or `E(capture = x)`.
    let (lookup, start) = match &sp.data.kind {
        ExprKind::Call { callee, args }
            if callee.len() == 1 && callee[0].name == "slice" && args.len() == 3 =>
        {
            (&args[0].value, Some(&args[1].value))
        }
        _ => (sp.data, None),
    };
    let (entry, cap, key_expr) = match &lookup.kind {
        ExprKind::Call { callee, args } if callee.len() == 1 => {
            match (
                scope.lookups.iter().find(|l| l.name.name == callee[0].name),
                args.as_slice(),
            ) {
                (Some(en), [a]) if a.name.is_some() => {
                    (*en, a.name.as_ref().unwrap().name.clone(), &a.value)
                }
                _ => {
                    return Err(
                        cx.unsupported(lookup.span, "writing a `data` other than `E(capture = x)`")
                    )
                }
            }
        }
        _ => {
            return Err(cx.unsupported(lookup.span, "writing a `data` other than `E(capture = x)`"))
        }
    };
    let kv = scope.compile(cx, key_expr)?;
    let key_ts = scope.name_text(cx, key_expr, &kv)?;
    let start_check = match start {
        Some(s) => {
            let sv = scope.compile(cx, s)?;
            let sts = scope.int(cx, s, &sv)?;
            let msg = format!(
                "the written object's `{}` is not the view's byte offset",
                cx.text(s.span)
            );
            quote! {
                let start: u64 = #sts;
                if ::std::option::Option::Some(start) != offset.checked_mul(meta.dtype.itemsize().unwrap_or(0) as u64) {
                    return Err(rt::Error::from(rt::ErrorKind::Invalid(#msg.to_string())));
                }
            }
        }
        None => quote!(),
    };
    let spat = &entry.pattern.value;
    let smethods = methods(cx, entry)?;
    let sdefault = &smethods[0];
    let salign = entry_align(cx, entry)?;
    let compressed = format!("{public} members may not be compressed with {{:?}}");
    let dup = format!("{public}: the tensor name '{{}}' is given twice");
    let no_match = format!("{public}: `write_name` \"{wname}\" does not match its entry's pattern");
    let not_obj = format!("{public}: a tensor's write rule does not build an object");
    let unplaced =
        format!("{public}: the tensor '{{}}' was added but the structure given does not hold it");
    let unknown =
        format!("{public}: the structure given holds the tensor '{{}}', which was not added");
    let wdoc = format!(
        " Streaming writer of `{public}` files: each tensor's bytes go to its own `{spat}` member as it is added; [`Writer::finish`] writes `{wname}` (the pickled object) and the fixed members."
    );
    let tr = crate::engine::tensor_writer_impl(true);
    let desc = crate::engine::desc(true);
    let _ = cap;
    Ok(quote! {
        #[doc = " The member name the writer gives the pickle; its captures name every other member."]
        pub const WRITE_NAME: &str = #wname;

        #[doc = #wdoc]
        pub struct Writer<W: ::std::io::Write + ::std::io::Seek> {
            zip: rt::ZipWriter<W>,
            compression: rt::Compression,
            tensors: ::std::vec::Vec<(rt::pickle::Value, rt::pickle::Value)>,
            names: ::std::collections::HashSet<::std::string::String>,
            structure: ::std::option::Option<rt::Node>,
            /// Storages written: the caller's id → (member index, dtype, bytes).
            storages: ::std::collections::HashMap<u64, (u64, rt::DType, u64)>,
            /// Members written so far (one per storage).
            members: u64,
        }

        impl<W: ::std::io::Write + ::std::io::Seek> Writer<W> {
            /// A writer into `w`; storage members are compressed as `options` asks, by default as the schema's first listed method.
            pub fn new(w: W, options: &rt::WriteOptions) -> rt::Result<Self> {
                let compression = options.compression.unwrap_or(#sdefault);
                if !matches!(compression, #(#smethods)|*) {
                    return Err(rt::Error::from(rt::ErrorKind::Unsupported(format!(#compressed, compression))));
                }
                Ok(Writer { zip: rt::ZipWriter::new(w), compression, tensors: ::std::vec::Vec::new(), names: ::std::collections::HashSet::new(), structure: None, storages: ::std::collections::HashMap::new(), members: 0 })
            }

            fn captures() -> rt::Result<rt::Captures> {
                let pattern = rt::Pattern::new(#pconst)?;
                let values = pattern
                    .matches(WRITE_NAME)
                    .ok_or_else(|| rt::Error::from(rt::ErrorKind::Invalid(#no_match.to_string())))?;
                Ok(rt::Captures::new(&pattern, values))
            }

            /// Adds one tensor: `data` holds exactly `meta.nbytes()` bytes in `meta`'s order and byte order; they are byte-swapped when the format's byte order differs. The tensor gets a storage of its own.
            pub fn add(&mut self, meta: &rt::TensorMeta, data: rt::Payload<'_>) -> rt::Result<()> {
                let in_tensor = |e: rt::Error| e.in_field(meta.name.as_str());
                let strides: ::std::vec::Vec<i64> = rt::contiguous_strides(&meta.shape, meta.order).map_err(in_tensor)?;
                let nbytes: u64 = meta.nbytes().map_err(in_tensor)?;
                let index = self.members;
                self.put(meta, strides, 0, index, nbytes, Some(data))?;
                self.members += 1;
                Ok(())
            }

            /// Adds one tensor that views a storage: `storage` holds the storage's bytes the first time `view.storage` is given (in `meta`'s byte order), `None` after; every view of one storage has one dtype. The storage is one member, shared by its views.
            pub fn add_view(&mut self, meta: &rt::TensorMeta, view: &rt::StorageView, storage: ::std::option::Option<rt::Payload<'_>>) -> rt::Result<()> {
                let in_tensor = |e: rt::Error| e.in_field(meta.name.as_str());
                let invalid = |m: ::std::string::String| in_tensor(rt::Error::from(rt::ErrorKind::Invalid(m)));
                // The view must lie inside its storage.
                rt::TensorInfo::strided(
                    meta.name.as_str(),
                    meta.dtype,
                    meta.shape.clone(),
                    view.strides.clone(),
                    meta.byte_order,
                    rt::DataLocation::Range {
                        offset: 0,
                        len: view
                            .storage_nbytes
                            .checked_sub(view.offset.saturating_mul(meta.dtype.itemsize().unwrap_or(0) as u64))
                            .ok_or_else(|| invalid(format!("offset {} lies beyond its storage of {} bytes", view.offset, view.storage_nbytes)))?,
                    },
                )
                .map_err(in_tensor)?;
                let (index, fresh) = match (self.storages.get(&view.storage), &storage) {
                    (Some(&(index, dtype, nbytes)), None) => {
                        if dtype != meta.dtype || nbytes != view.storage_nbytes {
                            return Err(invalid(format!(
                                "storage {} is {} bytes of {}, viewed here as {} bytes of {}",
                                view.storage, nbytes, dtype, view.storage_nbytes, meta.dtype
                            )));
                        }
                        (index, false)
                    }
                    (Some(_), Some(_)) => return Err(invalid(format!("the bytes of storage {} are given twice", view.storage))),
                    (None, None) => return Err(invalid(format!("storage {} is viewed before its bytes are given", view.storage))),
                    (None, Some(_)) => (self.members, true),
                };
                self.put(meta, view.strides.clone(), view.offset, index, view.storage_nbytes, storage)?;
                if fresh {
                    self.storages.insert(view.storage, (index, meta.dtype, view.storage_nbytes));
                    self.members += 1;
                }
                Ok(())
            }

            /// One tensor of storage member `index` (of `nbytes` bytes) at element `offset` with `strides`; writes the member when `data` is given.
            fn put(&mut self, meta: &rt::TensorMeta, strides: ::std::vec::Vec<i64>, offset: u64, index: u64, nbytes: u64, data: ::std::option::Option<rt::Payload<'_>>) -> rt::Result<()> {
                let in_tensor = |e: rt::Error| e.in_field(meta.name.as_str());
                if self.names.contains(&meta.name) {
                    return Err(rt::Error::from(rt::ErrorKind::Invalid(format!(#dup, meta.name))));
                }
                let captures = Self::captures()?;
                #(#text_bind)*
                let byte_order: rt::ByteOrder = #bo_ts;
                let item = meta.dtype.itemsize().ok_or_else(|| in_tensor(rt::Error::from(rt::ErrorKind::Unsupported("string tensors have no fixed byte size".to_string()))))? as u64;
                if item == 0 || nbytes % item != 0 {
                    return Err(in_tensor(rt::Error::from(rt::ErrorKind::SizeMismatch(format!("a storage of {} bytes is not a whole number of {}-byte elements", nbytes, item)))));
                }
                let numel: u64 = nbytes / item;
                let obj: rt::pickle::Value = (|| -> rt::Result<rt::pickle::Value> { Ok(#obj_ts) })().map_err(in_tensor)?;
                let name = (|| -> rt::Result<::std::string::String> {
                    let o: &rt::pickle::Object = match &obj {
                        rt::pickle::Value::Object(o) => o,
                        _ => return Err(rt::Error::from(rt::ErrorKind::Invalid(#not_obj.to_string()))),
                    };
                    let dtype = (meta.dtype, Some(byte_order));
                    let _ = &dtype;
                    #start_check
                    let key: &str = #key_ts;
                    captures.format(#spat, #cap, key)
                })()
                .map_err(in_tensor)?;
                if let Some(data) = data {
                    self.zip.start_member(&name, self.compression, #salign)?;
                    let written = if meta.byte_order == byte_order {
                        data.write_to(&mut self.zip, nbytes, "data")
                    } else {
                        data.write_swapped_to(&mut self.zip, nbytes, meta.dtype.swap_unit().unwrap_or(1), "data")
                    };
                    written.map_err(|e| e.in_entry(name.as_str()))?;
                }
                self.names.insert(meta.name.clone());
                self.tensors.push((rt::pickle::Value::str(&meta.name), obj));
                Ok(())
            }

            /// Writes the tensors inside `tree` instead of a flat dict: its dicts, lists,
            /// tuples, numbers and strings as they are (a dict at the root as the schema's
            /// root object), each [`rt::Node::Tensor`] leaf as the tensor added under that
            /// name. Every tensor added must be named in it, and every name added; checked
            /// by [`Writer::finish`].
            pub fn set_structure(&mut self, tree: &rt::Node) -> rt::Result<bool> {
                self.structure = Some(tree.clone());
                Ok(true)
            }

            /// Writes the pickled object and the fixed members, then the central directory; returns the output.
            pub fn finish(mut self) -> rt::Result<W> {
                let captures = Self::captures()?;
                let entries = ::std::mem::take(&mut self.tensors);
                let root = match self.structure.take() {
                    None => rt::pickle::Value::object(#root_ts.with_entries(entries)),
                    Some(tree) => {
                        let named: ::std::collections::HashSet<&str> = tree.tensor_names().into_iter().collect();
                        let mut by_name = ::std::collections::HashMap::new();
                        for (k, v) in entries {
                            let k = k.as_str().unwrap_or_default().to_string();
                            if !named.contains(k.as_str()) {
                                return Err(rt::Error::from(rt::ErrorKind::Invalid(format!(#unplaced, k))));
                            }
                            by_name.insert(k, v);
                        }
                        let value = rt::pickle::from_tree(&tree, &mut |n| {
                            by_name.get(n).cloned().ok_or_else(|| rt::Error::from(rt::ErrorKind::NotFound(format!(#unknown, n))))
                        })?;
                        match value {
                            rt::pickle::Value::Dict(d) => rt::pickle::Value::object(#root_ts.with_entries(d.to_vec())),
                            other => other,
                        }
                    }
                };
                let bytes = rt::pickle::write(&root)?;
                self.zip.start_member(WRITE_NAME, #pmethod, #palign)?;
                ::std::io::Write::write_all(&mut self.zip, &bytes).map_err(|e| rt::Error::from(e).in_entry(WRITE_NAME))?;
                #(#text_write)*
                self.zip.finish()
            }
        }

        #tr
        #desc
    })
}

/// A writer constructor that refuses (a mapping without a `write` rule).
fn refusing_writer(public: &str, structure: bool) -> TokenStream {
    let no_write =
        format!("writing {public} files is not supported (the tensor mapping has no `write` rule)");
    crate::engine::read_only_desc(&no_write, structure)
}
