//! Pickle declarations and the zip engine around a pickled object: `pickle P { ... }`
//! compiles into an `rt::pickle::Rules` constructor and one `is_<kind>` predicate per
//! call kind; a `zip` format whose entry has `codec pickle(P)` gets its entries as data
//! (`ENTRIES`, read by `rt::zip::Archive`), one mapping function per tensor mapping
//! (`fn pickle_tensor(path, t, ..) -> rt::pickle::Mapped`: the mapping's expressions
//! compiled over the call's arguments `t.size`, `t.storage.key`, text entries
//! `byteorder.content`, tables and entry lookups `storage(key = ..)`), and an `index`
//! that hands them to the runtime's loop (`rt::pickle::Index`). Its writer keeps the
//! storages and the root object in `rt::pickle::Objects` and the members in
//! `rt::zip::ArchiveWriter`; what is generated is the `write` rule (`tensor_object`).

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
                        let path = &path.value;
                        allow.push(quote!(.allow_call(#path, &[#(#ps),*])));
                        continue;
                    }
                };
                // `"module.*"`: every global of the module and its submodules.
                let path = &path.value;
                allow.push(if name == "*" {
                    quote!(.allow_module(#module, #k))
                } else {
                    quote!(.allow_path(#path, #k))
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
    /// `String`: text made by the mapping.
    String,
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
    /// A storage from a byte offset to its end (`rt::StorageRef`, see [`Data`]).
    Data,
}

/// A storage reference: the position of its entry among the format's storages, its key
/// (a `Cow<str>` expression) and the byte offset (a `u64` expression).
#[derive(Clone)]
struct Data {
    entry: usize,
    key: TokenStream,
    skip: Option<TokenStream>,
}

impl Data {
    fn tokens(&self) -> TokenStream {
        let (entry, key) = (
            proc_macro2::Literal::usize_unsuffixed(self.entry),
            &self.key,
        );
        let skip = self.skip.clone().unwrap_or_else(|| quote!(0));
        quote!(rt::StorageRef { entry: #entry, key: #key, skip: #skip })
    }
}

struct V {
    ts: TokenStream,
    t: T,
    data: Option<Data>,
}

fn v(ts: TokenStream, t: T) -> GResult<V> {
    Ok(V { ts, t, data: None })
}

/// What the mapping's names refer to.
struct PScope<'a, 's> {
    fmt: &'a Fmt<'s>,
    binding: &'a str,
    /// Parameters of the mapped call kind.
    params: Vec<String>,
    /// Persistent id items by name.
    persistent: Vec<String>,
    /// Text entries with their positions among the format's entries (their contents are
    /// `texts[position]`).
    texts: Vec<(&'s Entry, usize)>,
    /// Entries with captures besides the pickle's (looked up by `E(capture = v)`), with
    /// their positions.
    lookups: Vec<(&'s Entry, usize)>,
    /// Whether `dtype` is in reach (after the dtype is computed).
    dtype: bool,
    /// Tables of visible formats: `(format, table, module, key kind)`.
    ext_tables: Vec<(String, &'s Table, proc_macro2::Ident)>,
    /// Around a layout (`file` engine): `File.storages.bytes[index_of(File.keys, k)]`.
    records: Option<file::RecordsRef>,
    /// Set when a compiled expression reads the text entries.
    uses_texts: std::cell::Cell<bool>,
}

impl PScope<'_, '_> {
    fn binding_ident(&self) -> proc_macro2::Ident {
        rs_ident(self.binding)
    }

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
                if a.t != b.t || a.t == T::Data {
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
                    let data = Data {
                        entry: 0,
                        key,
                        skip: None,
                    };
                    return Ok(V {
                        ts: quote!(),
                        t: T::Data,
                        data: Some(data),
                    });
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
                let f = rs_ident(&table.name.name);
                let f = match module {
                    Some(m) => quote!(super::#m::#f),
                    None => quote!(#f),
                };
                let what = cx.text(index.span);
                let ks = &k.ts;
                let ts = match k.t {
                    T::Obj => quote!(rt::pickle::lookup(#f, #ks, #what)?),
                    T::Str => quote!(#f(#ks).ok_or_else(|| {
                        rt::Error::from(rt::ErrorKind::UnknownDType(#ks.to_string())).in_field(#what)
                    })?),
                    _ => return Err(cx.err(index.span, format!("`{what}` is not text"))),
                };
                v(ts, T::DType)
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

    /// A pickle value or text as a storage key (a `Cow<str>`): a global's `module.name`,
    /// a string, an integer.
    fn name_text(&self, cx: &Cx<'_>, e: &Expr, x: &V) -> GResult<TokenStream> {
        let what = cx.text(e.span);
        let ts = &x.ts;
        match x.t {
            T::Str => Ok(quote!(::std::borrow::Cow::Borrowed(#ts))),
            T::String => Ok(quote!(::std::borrow::Cow::Owned(#ts))),
            T::Obj => Ok(quote!(rt::pickle::name(#ts, #what)?)),
            _ => Err(cx.err(e.span, format!("`{what}` is not text"))),
        }
    }

    /// A pickle value as a non-negative integer.
    fn int(&self, cx: &Cx<'_>, e: &Expr, x: &V) -> GResult<TokenStream> {
        let what = cx.text(e.span);
        let ts = &x.ts;
        match x.t {
            T::Int => Ok(ts.clone()),
            T::Obj => Ok(quote!(rt::pickle::uint(#ts, #what)?)),
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
        Ok(if unsigned {
            quote!(rt::pickle::dims(#ts, #what)?)
        } else {
            quote!(rt::pickle::ints(#ts, #what)?)
        })
    }

    fn path(&self, cx: &mut Cx<'_>, e: &Expr, p: &[Ident]) -> GResult<V> {
        let first = p[0].name.as_str();
        let text = expr::join(p);
        if first == self.binding {
            let b = self.binding_ident();
            match p.get(1).map(|i| i.name.as_str()) {
                Some("path") if p.len() == 2 => return v(quote!(path), T::Str),
                Some(param) if self.params.iter().any(|x| x == param) => {
                    let arg = quote!(#b.arg(#param));
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
                            let i = proc_macro2::Literal::usize_unsuffixed(i);
                            v(quote!(rt::pickle::item(#arg, #i)), T::Obj)
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
            if let Some((t, i)) = self.texts.iter().find(|(t, _)| t.name.name == first) {
                self.uses_texts.set(true);
                let i = proc_macro2::Literal::usize_unsuffixed(*i);
                return if t.is_optional() {
                    v(quote!(texts[#i].as_deref()), T::OptStr)
                } else {
                    v(quote!(texts[#i].as_deref().unwrap_or_default()), T::Str)
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
                let eq = op == BinaryOp::Eq;
                let (x, y) = if a.t == T::None || a.t == T::Str {
                    (&b, &a)
                } else {
                    (&a, &b)
                };
                let xs = &x.ts;
                let ys = &y.ts;
                let cmp = if eq { quote!(==) } else { quote!(!=) };
                let test = match (x.t, y.t) {
                    (T::Obj, T::None) if eq => quote!(rt::pickle::is_none(#xs)),
                    (T::Obj, T::None) => quote!(!rt::pickle::is_none(#xs)),
                    (T::OptStr, T::None) if eq => quote!(#xs.is_none()),
                    (T::OptStr, T::None) => quote!(#xs.is_some()),
                    (T::OptStr, T::Str) => quote!(#xs #cmp Some(#ys)),
                    (T::Str | T::String, T::Str) | (T::Int, T::Int) => quote!(#xs #cmp #ys),
                    (T::Obj, T::Str) => {
                        quote!(#xs.and_then(rt::pickle::Value::as_str) #cmp Some(#ys))
                    }
                    _ => return Err(cx.unsupported(e.span, "this comparison")),
                };
                v(test, T::Bool)
            }
            BinaryOp::Add
                if matches!(a.t, T::Str | T::String) && matches!(b.t, T::Str | T::String) =>
            {
                let y = &b.ts;
                match &lhs.kind {
                    ExprKind::Str(s) => {
                        let f = format!("{}{{}}", s.replace('{', "{{").replace('}', "}}"));
                        v(quote!(::std::format!(#f, #y)), T::String)
                    }
                    _ => {
                        let x = &a.ts;
                        v(quote!(::std::format!("{}{}", #x, #y)), T::String)
                    }
                }
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
                    quote!(#x.#m(#y).ok_or_else(|| overflow(#what, #what))?),
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
                v(quote!(#xs.0.itemsize().unwrap_or(0) as u64), T::Int)
            }
            ("slice", [d, start, end]) => {
                let dv = self.compile(cx, &d.value)?;
                self.expect(cx, &d.value, &dv, T::Data)?;
                if !matches!(end.value.kind, ExprKind::None) {
                    return Err(cx.unsupported(end.value.span, "a slice end other than `none`"));
                }
                let s = self.compile(cx, &start.value)?;
                let s = self.int(cx, &start.value, &s)?;
                let mut data = dv.data.expect("a storage has its reference");
                data.skip = Some(match data.skip {
                    None => s,
                    Some(skip) => {
                        cx.needs_overflow = true;
                        quote!(#skip.checked_add(#s).ok_or_else(|| overflow("data", "slice start"))?)
                    }
                });
                Ok(V {
                    ts: quote!(),
                    t: T::Data,
                    data: Some(data),
                })
            }
            _ => {
                let Some(&(entry, position)) = self
                    .lookups
                    .iter()
                    .find(|(x, _)| callee.len() == 1 && x.name.name == callee[0].name)
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
                if !a
                    .name
                    .as_ref()
                    .is_some_and(|n| caps.iter().any(|c| *c == n.name))
                {
                    return Err(cx.err(
                        e.span,
                        format!(
                            "`{name}(capture = value)` names a capture of `{}`",
                            entry.pattern.value
                        ),
                    ));
                }
                let x = self.compile(cx, &a.value)?;
                let key = self.name_text(cx, &a.value, &x)?;
                let data = Data {
                    entry: position,
                    key,
                    skip: None,
                };
                Ok(V {
                    ts: quote!(),
                    t: T::Data,
                    data: Some(data),
                })
            }
        }
    }
}

/// The statements of a tensor mapping over a pickle's calls, by key.
struct MapStmts<'e> {
    name: &'e Expr,
    dtype: &'e Expr,
    shape: &'e Expr,
    strides: Option<&'e Expr>,
    byte_order: Option<&'e Expr>,
    data: &'e Expr,
    write: Option<&'e Expr>,
}

/// The statements of `map` (`write` only where `writable`).
fn map_stmts<'e>(cx: &Cx<'_>, map: &'e TensorMap, writable: bool) -> GResult<MapStmts<'e>> {
    const KEYS: [&str; 7] = [
        "name",
        "dtype",
        "shape",
        "strides",
        "byte_order",
        "data",
        "write",
    ];
    let mut slots: [Option<&Expr>; 7] = Default::default();
    for st in &map.stmts {
        match st {
            TensorStmt::Include(i) => {
                return Err(cx.unsupported(i.span, "`include` in a mapping over a pickle"))
            }
            TensorStmt::Assign { key, value, span } => {
                let Some(k) = KEYS
                    .iter()
                    .position(|k| *k == key.name)
                    .filter(|&k| k < 6 || writable)
                else {
                    return Err(cx.unsupported(
                        *span,
                        &format!("`{}` in a mapping over a pickle", key.name),
                    ));
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
    Ok(MapStmts {
        name: need(0)?,
        dtype: need(1)?,
        shape: need(2)?,
        strides: slots[3],
        byte_order: slots[4],
        data: need(5)?,
        write: slots[6],
    })
}

/// A generated mapping function: `fn <name><'v>(path: &str, <binding>: &'v
/// rt::pickle::Object[, texts]) -> rt::Result<rt::pickle::Mapped<'v>>`.
struct MapFn {
    ts: TokenStream,
    /// Whether it takes the text entries' contents.
    texts: bool,
    /// The storage function, when one was asked for: `fn <name>_storage<'v>(<binding>,
    /// dtype) -> rt::Result<rt::StorageRef<'v>>`.
    storage: Option<proc_macro2::Ident>,
    /// The position of the storages' entry the mapping's `data` names.
    entry: usize,
}

/// The mapping function `name` of `map` (documented `doc`); with `storage_fn`, the
/// mapping's `data` is a function of its own (the writer reads it back).
fn gen_map_fn(
    cx: &mut Cx<'_>,
    scope: &mut PScope<'_, '_>,
    s: &MapStmts<'_>,
    name: &proc_macro2::Ident,
    doc: &str,
    storage_fn: bool,
) -> GResult<MapFn> {
    scope.dtype = false;
    scope.uses_texts.set(false);
    let name_v = scope.compile(cx, s.name)?;
    let name_ts = match name_v.t {
        T::Str => {
            let n = &name_v.ts;
            quote!(#n.to_string())
        }
        T::String => name_v.ts,
        _ => return Err(cx.err(s.name.span, "a tensor name is text")),
    };
    let dtype_v = scope.compile(cx, s.dtype)?;
    scope.expect(cx, s.dtype, &dtype_v, T::DType)?;
    scope.dtype = true;
    let shape_v = scope.compile(cx, s.shape)?;
    let shape_ts = scope.int_list(cx, s.shape, &shape_v, true)?;
    let bo_ts = match s.byte_order {
        Some(b) => {
            let bv = scope.compile(cx, b)?;
            scope.expect(cx, b, &bv, T::ByteOrder)?;
            bv.ts
        }
        None => quote!(dtype.1.unwrap_or(rt::ByteOrder::Little)),
    };
    let texts_before_data = scope.uses_texts.get();
    scope.uses_texts.set(false);
    let data_v = scope.compile(cx, s.data)?;
    scope.expect(cx, s.data, &data_v, T::Data)?;
    let data_ref = data_v.data.expect("a storage has its reference");
    let data = data_ref.tokens();
    let data_texts = scope.uses_texts.get();
    let (shape_field, strides_field) = match s.strides {
        Some(st) => {
            let sv = scope.compile(cx, st)?;
            let ts = scope.int_list(cx, st, &sv, false)?;
            (quote!(shape: #shape_ts,), quote!(strides: #ts,))
        }
        None => (
            quote!(shape,),
            quote!(strides: rt::contiguous_strides(&shape, rt::Order::C)?,),
        ),
    };
    let shape_let = match s.strides {
        Some(_) => quote!(),
        None => quote!(let shape: ::std::vec::Vec<u64> = #shape_ts;),
    };
    let texts = texts_before_data || scope.uses_texts.get();
    let b = scope.binding_ident();
    let dtype_ts = &dtype_v.ts;
    let (storage, storage_ts, storage_item) = if storage_fn {
        if data_texts {
            return Err(cx.unsupported(
                s.data.span,
                "writing a `data` that depends on the text entries",
            ));
        }
        let f = format_ident!("{}_storage", name);
        let uses_dtype = data.to_string().contains("dtype");
        let dparam = if uses_dtype {
            quote!(dtype)
        } else {
            quote!(_dtype)
        };
        let sdoc = " Where the bytes of the tensor that `t` builds start (the mapping's `data`), the tensor's dtype being `dtype`.".replace("`t`", &format!("`{}`", scope.binding));
        let item = quote! {
            #[doc = #sdoc]
            fn #f<'v>(#b: &'v rt::pickle::Object, #dparam: (rt::DType, ::std::option::Option<rt::ByteOrder>)) -> rt::Result<rt::StorageRef<'v>> {
                Ok(#data)
            }
        };
        (Some(f.clone()), quote!(#f(#b, dtype)?), item)
    } else {
        (None, data, quote!())
    };
    let texts_param = if texts {
        quote!(, texts: &[::std::option::Option<::std::string::String>])
    } else {
        quote!()
    };
    let path = if name_ts.to_string().contains("path") {
        quote!(path)
    } else {
        quote!(_path)
    };
    Ok(MapFn {
        ts: quote! {
            #[doc = #doc]
            fn #name<'v>(#path: &str, #b: &'v rt::pickle::Object #texts_param) -> rt::Result<rt::pickle::Mapped<'v>> {
                let dtype: (rt::DType, ::std::option::Option<rt::ByteOrder>) = #dtype_ts;
                #shape_let
                Ok(rt::pickle::Mapped {
                    name: #name_ts,
                    dtype: dtype.0,
                    #strides_field
                    #shape_field
                    byte_order: #bo_ts,
                    storage: #storage_ts,
                })
            }

            #storage_item
        },
        texts,
        storage,
        entry: data_ref.entry,
    })
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

/// The `rt::zip::Entry` of a zip around a pickle: `kind` is its constructor call.
fn entry_const(cx: &Cx<'_>, e: &Entry, kind: TokenStream) -> GResult<TokenStream> {
    let mut ts = kind;
    if e.has_flag("optional") {
        ts = quote!(#ts.optional());
    }
    if prop(e, "compression").is_some() {
        let ms = methods(cx, e)?;
        ts = quote!(#ts.methods(&[#(#ms),*]));
    }
    let align = entry_align(cx, e)?;
    if align.to_string() != "1" {
        ts = quote!(#ts.align(#align));
    }
    Ok(ts)
}

/// The `rt::zip::Entry` of a text entry: its preferred name, the values its `check`
/// allows (`check name in ["a", "b"];`) and its written content.
fn text_const(cx: &Cx<'_>, e: &Entry) -> GResult<TokenStream> {
    let (name, pat) = (&e.name.name, &e.pattern.value);
    let mut ts = entry_const(cx, e, quote!(rt::zip::Entry::text(#name, #pat)))?;
    if let Some(v) = e.prop_value("preferred") {
        let ExprKind::Str(p) = &v.kind else {
            return Err(cx.err(v.span, "`preferred` is a pattern"));
        };
        ts = quote!(#ts.preferred(#p));
    }
    for p in &e.props {
        if let ("check", Some(c)) = (p.name.name.as_str(), &p.value) {
            let values = match &c.kind {
                ExprKind::In { expr: x, list } if matches!(&x.kind, ExprKind::Path(p) if p.len() == 1 && p[0].name == *name) => {
                    list.iter()
                        .map(|i| match &i.kind {
                            ExprKind::Str(s) => Some(s.clone()),
                            _ => None,
                        })
                        .collect::<Option<Vec<_>>>()
                }
                _ => None,
            };
            let Some(values) = values else {
                return Err(cx.unsupported(
                    c.span,
                    &format!("a text entry check other than `{name} in [\"..\", ..]`"),
                ));
            };
            ts = quote!(#ts.one_of(&[#(#values),*]));
        }
    }
    match prop(e, "write").map(|v| &v.kind) {
        Some(ExprKind::Str(s)) => ts = quote!(#ts.written(#s)),
        Some(_) => {
            return Err(cx.unsupported(
                prop(e, "write").unwrap().span,
                "a text entry's `write` other than a string",
            ))
        }
        None => {}
    }
    Ok(ts)
}

pub(crate) fn gen_zip_pickle(
    cx: &mut Cx<'_>,
    model: &Model<'_>,
    fmt: &Fmt<'_>,
) -> GResult<TokenStream> {
    let pickles = pickle_entries(fmt);
    let (pentry, _) = pickles[0];
    if fmt.tensors.is_empty() {
        return Err(cx.unsupported(fmt.ast.name.span, "a `zip` format without a tensor mapping"));
    }
    // The entries, the first pickle first (its captures name the others), then the others
    // in schema order: pickles read whole, text entries read and checked, storages looked
    // up by their one capture beyond the pickle's.
    let pcaps: Vec<String> = pentry.captures().iter().map(|s| s.to_string()).collect();
    let order: Vec<&Entry> = std::iter::once(pentry)
        .chain(
            fmt.entries
                .iter()
                .copied()
                .filter(|e| !std::ptr::eq(*e, pentry)),
        )
        .collect();
    let mut texts = Vec::new();
    let mut lookups = Vec::new();
    let mut consts = Vec::new();
    for (i, e) in order.iter().copied().enumerate() {
        let (name, pat) = (&e.name.name, &e.pattern.value);
        let extra: Vec<&str> = e
            .captures()
            .into_iter()
            .filter(|c| !pcaps.iter().any(|p| p == c))
            .collect();
        if pickles.iter().any(|(p, _)| std::ptr::eq(e, *p)) {
            if !extra.is_empty() {
                return Err(cx.unsupported(
                    e.pattern.span,
                    "a second pickle entry with captures beyond the first's",
                ));
            }
            consts.push(entry_const(
                cx,
                e,
                quote!(rt::zip::Entry::member(#name, #pat)),
            )?);
            continue;
        }
        for p in &e.props {
            match p.name.name.as_str() {
                "text" | "optional" | "repeated" | "compression" | "align" | "write"
                | "preferred" | "check" => {}
                other => {
                    return Err(
                        cx.unsupported(p.span, &format!("the entry property `{other}` here"))
                    )
                }
            }
        }
        if e.has_flag("text") {
            if !extra.is_empty() {
                return Err(cx.unsupported(
                    e.pattern.span,
                    "a text entry with captures beyond the pickle's",
                ));
            }
            texts.push((e, i));
            consts.push(text_const(cx, e)?);
        } else if let [cap] = extra.as_slice() {
            lookups.push((e, i));
            consts.push(entry_const(
                cx,
                e,
                quote!(rt::zip::Entry::storages(#name, #pat, #cap)),
            )?);
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
        uses_texts: Default::default(),
    };

    // The mappings, each over the objects of one pickle entry.
    let mut fns = Vec::new();
    let mut reads = Vec::new();
    let mut writer_spec = None;
    let mut any_texts = false;
    for (j, map) in fmt.tensors.iter().enumerate() {
        // `tensor from <entry>.content.<kind>s as t`
        let found = match &map.source.kind {
            ExprKind::Path(p) if p.len() == 3 && p[1].name == "content" => pickles
                .iter()
                .find(|(e, _)| e.name.name == p[0].name)
                .map(|&(e, d)| (e, d, &p[2])),
            _ => None,
        };
        let Some((mentry, mdecl, kinds)) = found else {
            return Err(cx.unsupported(
                map.source.span,
                "a tensor mapping over other than `<pickle entry>.content.<kind>s`",
            ));
        };
        let Some(mpdecl) = fmt.ast.pickles().find(|p| p.name.name == mdecl.name) else {
            return Err(cx.err(mdecl.span, format!("unknown pickle `{}`", mdecl.name)));
        };
        let kind = resolve_kind(cx, mpdecl, kinds)?;
        if let Some(w) = &map.filter {
            return Err(cx.unsupported(w.span, "a `where` filter on a tensor mapping"));
        }
        let (params, persistent) = kind_params(mpdecl, &kind);
        scope.binding = &map.binding.name;
        scope.params = params;
        scope.persistent = persistent;
        let s = map_stmts(cx, map, true)?;
        let writable = fmt.tensors.len() == 1 && s.write.is_some();
        if let (Some(w), false) = (s.write, writable) {
            return Err(cx.unsupported(w.span, "writing a format with several tensor mappings"));
        }
        let taken = fmt.tensors[..j]
            .iter()
            .any(|m| m.source.as_path().map(|p| &p[0].name) == Some(&mentry.name.name));
        let f = match taken {
            false => format_ident!("{}_tensor", mentry.name.name),
            true => format_ident!("{}_tensor_{}", mentry.name.name, j),
        };
        let doc = format!(
            " The tensor that a `{kind}` call of `{}` builds (`{}` at `path`): the mapping `tensor from {}`.",
            mentry.name.name,
            map.binding.name,
            cx.text(map.source.span),
        );
        let mf = gen_map_fn(cx, &mut scope, &s, &f, &doc, writable)?;
        let position = order
            .iter()
            .position(|e| std::ptr::eq(*e, mentry))
            .expect("every entry is in the list");
        let rules = format_ident!("{}_rules", mpdecl.name.name.to_lowercase());
        let is_kind = format_ident!("is_{}_{}", mpdecl.name.name.to_lowercase(), kind);
        let map_arg = if mf.texts {
            any_texts = true;
            quote!(|path, t| #f(path, t, texts))
        } else {
            quote!(#f)
        };
        let position = proc_macro2::Literal::usize_unsuffixed(position);
        reads.push(quote!(index.read(#position, #rules(), #is_kind, #map_arg)?;));
        fns.push(mf.ts);
        if writable {
            writer_spec = Some((mpdecl, s, mf.storage, rules, mf.entry));
        }
    }
    let public = fmt.public_name();
    let writer = match writer_spec {
        Some((pdecl, s, storage, rules, storages)) => gen_writer(
            cx,
            fmt,
            &scope,
            Spec {
                pentry,
                pdecl,
                stmts: s,
                storage: storage.expect("a writable mapping has a storage function"),
                rules,
                storages,
            },
        )?,
        None => refusing_writer(public, true),
    };
    let texts = any_texts.then(|| quote!(let texts = archive.texts();));
    let entry_points = index_and_structure(
        " Lists the tensors of `src` without reading their bytes: reads the pickle members\n (with the declared globals only), then maps every object of the mapped kinds.",
        "the first pickle member",
    );
    let edoc = format!(
        " The members of a `{public}` archive: `{}` first, whose captures name the others.",
        pentry.name.name
    );
    Ok(quote! {
        #[doc = #edoc]
        pub const ENTRIES: &[rt::zip::Entry] = &[#(#consts),*];

        #entry_points {
            let archive = rt::zip::Archive::open(src, limits, NAME, ENTRIES)?;
            #texts
            let mut index = rt::pickle::Index::new(&archive, limits, with_structure);
            #(#reads)*
            Ok(index.finish())
        }

        #(#fns)*

        #writer
    })
}

/// What the writer is generated from.
struct Spec<'s, 'e> {
    pentry: &'s Entry,
    pdecl: &'s Pickle,
    stmts: MapStmts<'e>,
    /// The mapping's storage function (its `data`).
    storage: proc_macro2::Ident,
    /// The pickle's rules function.
    rules: proc_macro2::Ident,
    /// The position of the storages' entry.
    storages: usize,
}

/// The value of an entry property.
fn prop<'e>(e: &'e Entry, name: &str) -> Option<&'e Expr> {
    e.props
        .iter()
        .find(|p| p.name.name == name)
        .and_then(|p| p.value.as_ref())
}

/// The compression methods an entry lists.
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
    /// The pickle's rules function.
    rules: &'a proc_macro2::Ident,
    /// `(module.name, kind, params)` of every declared global.
    globals: Vec<(String, String, Vec<String>)>,
    /// The persistent kind and its items.
    persistent: Option<(String, Vec<String>)>,
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

    fn vals(&self, cx: &Cx<'_>, args: &[Arg]) -> GResult<Vec<TokenStream>> {
        let mut vals = Vec::new();
        for a in args {
            let x = self.compile(cx, &a.value)?;
            vals.push(self.to_val(cx, &a.value, x)?);
        }
        Ok(vals)
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
                    wv(quote!(#x.is_none()), W::Bool)
                } else {
                    wv(quote!(#x.is_some()), W::Bool)
                }
            }
            ExprKind::Path(p) => {
                let path = expr::join(p);
                if p.len() == 1 {
                    let int = |f: &str| {
                        let f = format_ident!("{}", f);
                        wv(quote!(i128::from(s.#f)), W::Int)
                    };
                    match path.as_str() {
                        "index" | "offset" | "numel" | "nbytes" => return int(&path),
                        "dtype" => return wv(quote!(meta.dtype), W::DType),
                        "shape" => {
                            return wv(quote!(rt::pickle::Value::int_tuple(&meta.shape)), W::Val)
                        }
                        "strides" => {
                            return wv(quote!(rt::pickle::Value::int_tuple(&s.strides)), W::Val)
                        }
                        _ => {}
                    }
                }
                match self.global(&path) {
                    Some(_) => wv(quote!(rt::pickle::Value::global(#path)), W::Val),
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
        match (name.as_str(), args) {
            ("str", [a]) => {
                // A number the writer keeps (`index`) is written as it is.
                if let Some([n]) = a.value.as_path() {
                    if matches!(n.name.as_str(), "index" | "offset" | "numel" | "nbytes") {
                        let f = format_ident!("{}", n.name);
                        return wv(quote!(rt::pickle::Value::str(&s.#f.to_string())), W::Val);
                    }
                }
                let x = self.compile(cx, &a.value)?;
                if x.t != W::Int {
                    return Err(cx.err(a.value.span, "`str` takes an integer"));
                }
                let ts = x.ts;
                wv(quote!(rt::pickle::Value::str(&#ts.to_string())), W::Val)
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
                        wv(quote!(rt::pickle::Value::global(#s)), W::Val)
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
                        let ts = x.ts;
                        wv(
                            quote!(rt::pickle::table_global(#ts, NAME, #tname, meta.dtype, byte_order)?),
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
                    let vals = self.vals(cx, args)?;
                    return wv(quote!(rt::pickle::Value::persistent([#(#vals),*])), W::Val);
                }
                let Some((path, kind, params)) = self.global(&name) else {
                    return Err(cx.err(e.span, format!("`{name}` is not a declared pickle global")));
                };
                let rules = self.rules;
                if builtin_kind(kind).is_some() {
                    if kind == "class" {
                        return Err(cx.err(
                            e.span,
                            format!("`{name}` is declared `class`: it cannot be called"),
                        ));
                    }
                    if !args.is_empty() {
                        return Err(cx.unsupported(e.span, "a container call with arguments"));
                    }
                    return wv(quote!(rt::pickle::call(#rules(), #path, [])?), W::Val);
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
                let vals = self.vals(cx, args)?;
                wv(
                    quote!(rt::pickle::call(#rules(), #path, [#(#vals),*])?),
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

/// The streaming `Writer`: tensors go to storage members as they come (where the
/// mapping's `data`, read back from the object the `write` rule builds, puts them), the
/// pickled root object (the pickle entry's `write`, a dict-kind call getting
/// `name -> object` items) and the text entries' `write` contents are written by `finish`.
fn gen_writer(
    cx: &mut Cx<'_>,
    fmt: &Fmt<'_>,
    scope: &PScope<'_, '_>,
    sp: Spec<'_, '_>,
) -> GResult<TokenStream> {
    let public = fmt.public_name();
    let pentry = sp.pentry;
    let Some(write) = sp.stmts.write else {
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
    let ws = WScope {
        fmt,
        rules: &sp.rules,
        globals,
        persistent,
    };
    // The per-tensor object.
    let obj = ws.compile(cx, write)?;
    let obj_ts = ws.to_val(cx, write, obj)?;
    // The root: a call of a dict-kind global.
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
                    let rules = &sp.rules;
                    quote!(rt::pickle::call(#rules(), #path, [])?)
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
    // Text entries: their written content (in `ENTRIES`).
    for (t, _) in &scope.texts {
        if prop(t, "write").is_none() && !t.is_optional() {
            return Err(cx.err(
                t.span,
                format!("the text entry `{}` needs `write = \"...\";`", t.name.name),
            ));
        }
    }
    // The byte order written: the mapping's, over the text entries as written.
    scope.uses_texts.set(false);
    let bo_ts = match sp.stmts.byte_order {
        Some(b) => {
            if uses_binding(b, scope.binding) {
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
    let texts = scope
        .uses_texts
        .get()
        .then(|| quote!(let texts = self.archive.texts();));
    // The storages' entry: where the mapping's `data` puts the bytes.
    let storages = proc_macro2::Literal::usize_unsuffixed(sp.storages);
    let storage = &sp.storage;
    let bo_param = if obj_ts.to_string().contains("byte_order") {
        quote!(byte_order)
    } else {
        quote!(_byte_order)
    };
    let wdoc = format!(
        " Streaming writer of `{public}` files: each storage's bytes go to its own member as they come; [`Writer::finish`] writes `{wname}` (the pickled object) and the fixed members."
    );
    let tr = crate::engine::tensor_writer_impl(true);
    let desc = crate::engine::desc(true);
    Ok(quote! {
        #[doc = " The member name the writer gives the pickle; its captures name every other member."]
        pub const WRITE_NAME: &str = #wname;

        #[doc = #wdoc]
        pub struct Writer<W: ::std::io::Write + ::std::io::Seek> {
            archive: rt::zip::ArchiveWriter<W>,
            objects: rt::pickle::Objects,
        }

        impl<W: ::std::io::Write + ::std::io::Seek> Writer<W> {
            /// A writer into `w`; storage members are compressed as `options` asks, by default as the schema's first listed method.
            pub fn new(w: W, options: &rt::WriteOptions) -> rt::Result<Self> {
                Ok(Writer {
                    archive: rt::zip::ArchiveWriter::new(w, options, NAME, ENTRIES, WRITE_NAME, #storages)?,
                    objects: rt::pickle::Objects::new(NAME),
                })
            }

            /// Adds one tensor: `data` holds exactly `meta.nbytes()` bytes in `meta`'s order and byte order; they are byte-swapped when the format's byte order differs. The tensor gets a storage of its own.
            pub fn add(&mut self, meta: &rt::TensorMeta, data: rt::Payload<'_>) -> rt::Result<()> {
                let storage = self.objects.whole(meta)?;
                self.put(meta, &storage, Some(data))
            }

            /// Adds one tensor that views a storage: `storage` holds the storage's bytes the first time `view.storage` is given (in `meta`'s byte order), `None` after; every view of one storage has one dtype. The storage is one member, shared by its views.
            pub fn add_view(&mut self, meta: &rt::TensorMeta, view: &rt::StorageView, storage: ::std::option::Option<rt::Payload<'_>>) -> rt::Result<()> {
                let s = self.objects.view(meta, view, storage.is_some())?;
                self.put(meta, &s, storage)
            }

            /// The tensor `meta` in storage `s`, whose bytes are written when `data` is given.
            fn put(&mut self, meta: &rt::TensorMeta, s: &rt::pickle::Storage, data: ::std::option::Option<rt::Payload<'_>>) -> rt::Result<()> {
                #texts
                let byte_order = #bo_ts;
                let object = tensor_object(meta, s, byte_order).map_err(|e| e.in_field(&meta.name))?;
                let dtype = (meta.dtype, Some(byte_order));
                let (entry, key) = self.objects.add(meta, s, object, |t| #storage(t, dtype))?;
                match data {
                    Some(data) => self.archive.storage(entry, &key, meta, data, s.nbytes, byte_order),
                    None => Ok(()),
                }
            }

            /// Writes the tensors inside `tree` instead of a flat dict: its dicts, lists,
            /// tuples, numbers and strings as they are (a dict at the root as the schema's
            /// root object), each [`rt::Node::Tensor`] leaf as the tensor added under that
            /// name. Every tensor added must be named in it, and every name added; checked
            /// by [`Writer::finish`].
            pub fn set_structure(&mut self, tree: &rt::Node) -> rt::Result<bool> {
                self.objects.set_structure(tree);
                Ok(true)
            }

            /// Writes the pickled object and the fixed members, then the central directory; returns the output.
            pub fn finish(mut self) -> rt::Result<W> {
                let root = #root_ts;
                let content = self.objects.finish(root)?;
                self.archive.finish(&content)
            }
        }

        /// The object that rebuilds the tensor `meta` in storage `s`, its bytes in `byte_order` (the mapping's `write` rule).
        fn tensor_object(meta: &rt::TensorMeta, s: &rt::pickle::Storage, #bo_param: rt::ByteOrder) -> rt::Result<rt::pickle::Value> {
            Ok(#obj_ts)
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
