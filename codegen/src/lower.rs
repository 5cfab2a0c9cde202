//! The lowering of typed IR expressions ([`ir::Expr`]) to Rust, for every engine that
//! reads the IR.
//!
//! An expression's Rust form depends only on its IR type and on where its names live,
//! which the engine says through [`Env`]. Integers are `i128` values computed with the
//! runtime's checked arithmetic (`rt::expr`); strings are `&str`, byte strings `&[u8]`,
//! payloads `(offset, len)`, dtypes `(rt::DType, Option<rt::ByteOrder>)`. Compound
//! values (records, lists, maps) are places or references, passed by reference.
//!
//! Values decoded from a pickle ([`Type::Pickled`]) are `Option<&rt::pickle::Value>`
//! (absent when a call was not given that argument); they become integers, names and
//! dtypes where an expression needs one, through the runtime's conversions that name
//! the argument (`rt::pickle::uint(t.arg("offset"), "t.offset")`). Objects a pickle
//! write rule builds are `rt::pickle::Value`s ([`Lower::pickle_value`]).

use proc_macro2::{Literal, TokenStream};
use quote::quote;
use tensorfmt_schema::ast::{BinaryOp, UnaryOp};
use tensorfmt_schema::ir::{
    self, Builtin, Const, EntryId, Expr, ExprKind, FieldId, FormatId, IndexKind, Ir, LayoutId,
    Member, PickleId, TensorKey, Type, WriteVar,
};

use crate::model::rs_ident;

/// How a lowered value is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Form {
    /// A value of the expression type's value form (`i128`, `bool`, `&str`, `&[u8]`...).
    Value,
    /// A place holding the value in its storage type (`header_len: u32`, `f.header`).
    Place,
    /// A reference to the storage type (`t: &(String, TensorEntry)`).
    Ref,
    /// A temporary of the storage type (`format!(..)`: a `String`), owned by the
    /// expression.
    Owned,
    /// An `Option` of the value form: absent (an optional entry's content, a reverse
    /// table lookup). `== none` tests it; compared with a value, absent is unequal.
    Opt,
    /// An `Option` of the storage type, absent reading as the type's default (a
    /// protobuf field that may be absent: `t.name: Option<&str>`).
    Optional,
}

/// A lowered expression.
#[derive(Debug, Clone)]
pub(crate) struct Val {
    /// The Rust expression.
    pub ts: TokenStream,
    /// Its IR type.
    pub ty: Type,
    /// How it is held.
    pub form: Form,
    /// The `Option` a value with a default is read from (a protobuf field with
    /// `[default = ..]`: `t.version.unwrap_or(3)` from `t.version`): what `has(x)` and
    /// `x == none` test, the field's presence on the wire.
    pub presence: Option<TokenStream>,
}

impl Val {
    /// A value of the type's value form.
    pub fn value(ts: TokenStream, ty: Type) -> Val {
        Val {
            ts,
            ty,
            form: Form::Value,
            presence: None,
        }
    }

    /// A place of the storage type.
    pub fn place(ts: TokenStream, ty: Type) -> Val {
        Val {
            ts,
            ty,
            form: Form::Place,
            presence: None,
        }
    }

    /// A reference to the storage type.
    pub fn reference(ts: TokenStream, ty: Type) -> Val {
        Val {
            ts,
            ty,
            form: Form::Ref,
            presence: None,
        }
    }

    /// A temporary of the storage type (see [`Form::Owned`]).
    pub fn owned(ts: TokenStream, ty: Type) -> Val {
        Val {
            ts,
            ty,
            form: Form::Owned,
            presence: None,
        }
    }

    /// An optional value (see [`Form::Opt`]).
    pub fn opt(ts: TokenStream, ty: Type) -> Val {
        Val {
            ts,
            ty,
            form: Form::Opt,
            presence: None,
        }
    }

    /// An `Option` of the storage type, absent reading as the type's default.
    pub fn optional(ts: TokenStream, ty: Type) -> Val {
        Val {
            ts,
            ty,
            form: Form::Optional,
            presence: None,
        }
    }

    /// The same value, read from `option` when present and as a default otherwise (see
    /// [`Val::presence`]).
    pub fn with_presence(self, option: TokenStream) -> Val {
        Val {
            presence: Some(option),
            ..self
        }
    }

    /// A reference to the value (`&place`, or the reference itself).
    pub fn by_ref(&self) -> TokenStream {
        let ts = &self.ts;
        match self.form {
            Form::Place | Form::Owned => quote!(&#ts),
            Form::Ref | Form::Value | Form::Opt | Form::Optional => ts.clone(),
        }
    }

    /// The value in its storage type (`t.data_type.unwrap_or(0)`, `header_len`).
    pub fn scalar_stored(&self) -> TokenStream {
        self.stored()
    }

    /// The value in its storage type (`t.data_type.unwrap_or(0)`, `header_len`), for
    /// comparisons with literals and displays that need no `i128`.
    fn stored(&self) -> TokenStream {
        match self.form {
            Form::Optional => {
                let ts = &self.ts;
                match &self.ty {
                    Type::Str => quote!(#ts.unwrap_or("")),
                    Type::Float(_) => quote!(#ts.unwrap_or(0.0)),
                    Type::Bool => quote!(#ts.unwrap_or(false)),
                    Type::Bytes => quote!(#ts.unwrap_or_default().0),
                    _ => quote!(#ts.unwrap_or(0)),
                }
            }
            _ => self.deref(),
        }
    }

    /// The place itself (`*r` for a reference).
    fn deref(&self) -> TokenStream {
        let ts = &self.ts;
        match self.form {
            Form::Ref => quote!((*#ts)),
            _ => ts.clone(),
        }
    }

    /// Text as an owned `String`: the temporary itself, or a copy.
    pub fn owned_string(&self) -> TokenStream {
        match self.form {
            Form::Owned => self.ts.clone(),
            _ => {
                let s = self.scalar();
                quote!(#s.to_string())
            }
        }
    }

    /// A value to display (`{}`): integers as stored (`(position as i128)` as
    /// `position`).
    pub fn display(&self) -> TokenStream {
        match (&self.ty, self.form) {
            (Type::Int(_), Form::Place | Form::Ref | Form::Optional) => self.stored(),
            (Type::Int(_), Form::Value) => {
                let mut it = self.ts.clone().into_iter();
                if let (Some(proc_macro2::TokenTree::Group(g)), None) = (it.next(), it.next()) {
                    let inner: Vec<_> = g.stream().into_iter().collect();
                    if let [x @ .., proc_macro2::TokenTree::Ident(a), proc_macro2::TokenTree::Ident(t)] =
                        inner.as_slice()
                    {
                        if a == "as" && t == "i128" && !x.is_empty() {
                            return x.iter().cloned().collect();
                        }
                    }
                }
                self.ts.clone()
            }
            _ => self.scalar(),
        }
    }

    /// The value form of a scalar: `i128::from(x)`, `x.as_str()`, `x`.
    pub fn scalar(&self) -> TokenStream {
        if self.form == Form::Value {
            return self.ts.clone();
        }
        if self.form == Form::Opt {
            let ts = &self.ts;
            return quote!(#ts.unwrap_or_default());
        }
        let p = self.stored();
        if self.form == Form::Optional {
            return match &self.ty {
                Type::Int(_) => quote!(i128::from(#p)),
                Type::Float(_) => quote!(f64::from(#p)),
                _ => p,
            };
        }
        let ts = &self.ts;
        let arg = match self.form {
            Form::Ref => quote!(*#ts),
            _ => ts.clone(),
        };
        match &self.ty {
            Type::Int(_) => quote!(i128::from(#arg)),
            Type::Float(_) => quote!(f64::from(#arg)),
            Type::Str => quote!(#p.as_str()),
            Type::Bytes => quote!(#p.as_slice()),
            _ => p,
        }
    }
}

/// Where an expression's names live: what the engine's generated code has in reach.
pub(crate) trait Env {
    /// A field of a layout (its value as read, or as being written).
    fn field(&self, l: LayoutId, f: FieldId) -> Option<Val>;
    /// The mapping's binding.
    fn binding(&self) -> Option<Val> {
        None
    }
    /// A layout as a value: the record being mapped.
    fn layout(&self, _l: LayoutId) -> Option<Val> {
        None
    }
    /// The item's position in a mapping over a list.
    fn position(&self) -> Option<Val> {
        None
    }
    /// A tensor property the mapping sets, in reach.
    fn tensor_key(&self, _k: TensorKey) -> Option<Val> {
        None
    }
    /// The source (`source.stem`).
    fn source(&self) -> Option<TokenStream> {
        None
    }
    /// An engine's own lowering of `e` (its names and constructs: message fields,
    /// entries, keyed lookups, its builtins, the values of a write rule), given the
    /// lowering to lower its operands with; `None` for the generic lowering.
    fn lower(&self, _l: &Lower<'_>, _e: &Expr) -> Option<R<Val>> {
        None
    }
    /// An engine's own reading of a builtin (`len(header)` of an encoded text, `size(x)`
    /// on write); `None` for the generic lowering.
    fn builtin(&self, _func: Builtin, _args: &[ir::Arg]) -> Option<Val> {
        None
    }
    /// The format whose module the code is generated in: items of other formats (tables,
    /// pickle rules) are reached through `super::<format>::`.
    fn format(&self) -> Option<FormatId> {
        None
    }
    /// The content of an entry (`byteorder.content`).
    fn entry_content(&self, _e: EntryId) -> Option<Val> {
        None
    }
    /// The path of the pickled object being mapped (`t.path`).
    fn pickle_path(&self) -> Option<Val> {
        None
    }
    /// A value of the tensor being written, in a write rule.
    fn write_var(&self, _v: WriteVar) -> Option<Val> {
        None
    }
    /// In a record layout: the dtype of the tensors whose bytes the record holds.
    fn record_dtype(&self) -> Option<Val> {
        None
    }
    /// The alignment the save asks for (an `Option<u64>`), where a writer holding the
    /// save's options computes the expression (`write_align(n)`).
    fn write_align(&self) -> Option<TokenStream> {
        None
    }
}

/// What a lowering fails with: nothing. The checker rejects, at its span with a help
/// line, every construct an engine cannot mean (`tensorfmt_schema`'s engine rules), so
/// every expression of a checked schema is lowered; the lowering functions return
/// [`R`] so that the engines compose them with `?`, and no value of this type exists.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Unlowered {}

/// A lowering's result (never an error: see [`Unlowered`]).
pub(crate) type R<T> = Result<T, Unlowered>;

/// The value of a lowering's result, which is never an error.
pub(crate) fn lowered<T>(r: R<T>) -> T {
    match r {
        Ok(t) => t,
        Err(never) => match never {},
    }
}

/// The Rust storage type of an IR type: how a field or dict key holds it.
pub(crate) fn storage_ty(ir: &Ir, ty: &Type) -> Option<TokenStream> {
    Some(match ty {
        Type::Int(i) => match i.bytes {
            Some(b) => {
                let id =
                    quote::format_ident!("{}{}", if i.signed { "i" } else { "u" }, b as u32 * 8);
                quote!(#id)
            }
            None => quote!(i128),
        },
        Type::Float(f) if f.bytes == 4 => quote!(f32),
        Type::Float(_) => quote!(f64),
        Type::Bool => quote!(bool),
        Type::Str => quote!(::std::string::String),
        Type::Bytes => quote!(::std::vec::Vec<u8>),
        Type::Payload => quote!((u64, u64)),
        Type::Dtype => quote!((rt::DType, ::std::option::Option<rt::ByteOrder>)),
        Type::List(t) | Type::Tuple(t) => {
            let t = storage_ty(ir, t)?;
            quote!(::std::vec::Vec<#t>)
        }
        Type::Map(k, v) if **k == Type::Str => {
            let v = storage_ty(ir, v)?;
            quote!(rt::pydict::Map<#v>)
        }
        Type::Layout(l) => {
            let id = rs_ident(&ir.layout(*l).name);
            quote!(#id)
        }
        Type::Dict(d) => {
            let id = rs_ident(&ir.dict(*d).name);
            quote!(#id)
        }
        Type::Union(l, f) => {
            let id = crate::union::union_ident(ir, *l, *f);
            quote!(#id)
        }
        _ => return None,
    })
}

/// An item of a list, given a reference to it: text and bytes as `&str` and `&[u8]`
/// whether the list holds owned values (a dict's `String`s) or borrowed ones (a message
/// view's `&str`s); other items by reference.
fn item_of(r: TokenStream, ty: Type) -> Val {
    match ty {
        Type::Str => Val::value(quote!(rt::expr::text(#r)), ty),
        Type::Bytes => Val::value(quote!(rt::expr::bytes(#r)), ty),
        _ => Val::reference(r, ty),
    }
}

/// An `i128` literal.
fn int_lit(v: i128) -> TokenStream {
    let l = Literal::i128_unsuffixed(v);
    if v < 0 {
        quote!((#l))
    } else {
        quote!(#l)
    }
}

/// `rt::DType::F32`.
pub(crate) fn dtype_path(d: ir::Dtype) -> TokenStream {
    let v = quote::format_ident!("{}", dtype_variant(d.name()));
    quote!(rt::DType::#v)
}

fn dtype_variant(name: &str) -> String {
    match name {
        "f8e4m3fn" => "F8E4M3FN".to_string(),
        "bool" => "Bool".to_string(),
        "f8e5m2" => "F8E5M2".to_string(),
        "bf16" => "BF16".to_string(),
        "string" => "String".to_string(),
        other => other.to_uppercase(),
    }
}

/// `rt::ByteOrder::Little`.
pub(crate) fn byte_order_path(b: ir::ByteOrder) -> TokenStream {
    match b {
        ir::ByteOrder::Little => quote!(rt::ByteOrder::Little),
        ir::ByteOrder::Big => quote!(rt::ByteOrder::Big),
    }
}

/// The lowering of expressions over an [`Ir`], in one engine's [`Env`].
pub(crate) struct Lower<'a> {
    /// The schema.
    pub ir: &'a Ir,
    /// The names in reach.
    pub env: &'a dyn Env,
}

impl Lower<'_> {
    /// An expression of any type.
    pub fn expr(&self, e: &Expr) -> R<Val> {
        if let Some(v) = self.env.lower(self, e) {
            return v;
        }
        let ty = e.ty.clone();
        Ok(match &e.kind {
            ExprKind::Const(c) => Val::value(self.constant(c)?, ty),
            ExprKind::EnumValue(en, i) => {
                let (_, v) = &self.ir.enum_(*en).values[*i];
                Val::value(int_lit(i128::from(*v)), ty)
            }
            ExprKind::Field(l, f) => self.env.field(*l, *f).unwrap_or_else(|| {
                unreachable!("a layout's fields are named in its own expressions, after the fields they read (rules `refers to .., which comes later`, the write plan's order)")
            }),
            ExprKind::Binding => self.env.binding().unwrap_or_else(|| {
                unreachable!("the binding is named in its mapping, whose lowering binds it")
            }),
            ExprKind::Position => self.env.position().unwrap_or_else(|| {
                unreachable!("the checker keeps `position` to mappings over lists (`mapping_reach`)")
            }),
            ExprKind::TensorKey(k) => self.env.tensor_key(*k).unwrap_or_else(|| {
                unreachable!("the checker keeps a tensor property's reads after the statement computing it (`mapping_reach`)")
            }),
            ExprKind::Layout(l) => self.env.layout(*l).unwrap_or_else(|| {
                unreachable!("the checker keeps a layout as a value to the mappings of `file` formats over it (`layout_reach`, `mapping_reach`, the inverse's places, the engines over messages)")
            }),
            ExprKind::Member { base, member } => self.member(e, base, member)?,
            ExprKind::Lookup { table, key } => {
                let t = self.ir.table(*table);
                let f = self.table_path(*table);
                let k = self.expr(key)?;
                if let Type::Pickled(_) = k.ty {
                    let (k, what) = (&k.ts, self.text(key));
                    return Ok(Val::value(quote!(rt::pickle::lookup(&#f, #k, #what)?), ty));
                }
                let key_ts = match (t.key, &k.ty) {
                    (ir::KeyKind::Str, _) => k.scalar(),
                    // Enums and `i64`s as they are stored.
                    (ir::KeyKind::Int, Type::Enum(_)) => k.scalar(),
                    (ir::KeyKind::Int, Type::Int(i))
                        if k.form != Form::Value && i.bytes == Some(8) && i.signed =>
                    {
                        k.stored()
                    }
                    (ir::KeyKind::Int, _) => {
                        let k = k.scalar();
                        quote!(rt::expr::narrow::<i64>(#k, "i64")?)
                    }
                };
                let key_ts = match t.key {
                    ir::KeyKind::Str => key_ts,
                    ir::KeyKind::Int => quote!(&#key_ts),
                };
                Val::value(quote!(#f.lookup(#key_ts)?), ty)
            }
            ExprKind::Index { base, index, how } => {
                let b = self.expr(base)?;
                if *how == IndexKind::Pickled {
                    // An item of a pickled tuple or list (from its end when negative).
                    let (list, i) = (&b.ts, self.expr(index)?.scalar());
                    return Ok(Val::value(quote!(rt::pickle::index(#list, #i)), ty));
                }
                if *how != IndexKind::Position {
                    unreachable!("keyed lookups are read in the engines over messages (`Env::lower`), the only ones whose values the IR keys")
                }
                let i = self.expr(index)?.scalar();
                let list = b.by_ref();
                let item_ty = b.ty.element().cloned().unwrap_or(Type::Error);
                item_of(quote!(rt::expr::item(#list, #i)?), item_ty)
            }
            ExprKind::Call { func, args } => self.call(e, *func, args)?,
            ExprKind::WriteVar(v) => self.env.write_var(*v).unwrap_or_else(|| {
                unreachable!("the values of the tensor written are named in write rules, whose lowering gives each")
            }),
            ExprKind::RecordDtype => self
                .env
                .record_dtype()
                .unwrap_or_else(|| {
                    unreachable!("the checker keeps `dtype` in layouts to the records of a file of pickles (`layout_reach`)")
                }),
            ExprKind::PickleGlobal { pickle, global } => {
                let path = &self.ir.pickle(*pickle).globals[*global].path;
                Val::value(quote!(rt::pickle::Value::global(#path)), ty)
            }
            ExprKind::PickleCall {
                pickle,
                global,
                args,
            } => {
                let rules = self.rules(*pickle);
                let path = &self.ir.pickle(*pickle).globals[*global].path;
                let args = args
                    .iter()
                    .map(|a| self.pickle_value(a))
                    .collect::<R<Vec<_>>>()?;
                Val::value(quote!(rt::pickle::call(#rules(), #path, [#(#args),*])?), ty)
            }
            ExprKind::PersistentId { items, .. } => {
                let items = items
                    .iter()
                    .map(|a| self.pickle_value(a))
                    .collect::<R<Vec<_>>>()?;
                Val::value(quote!(rt::pickle::Value::persistent([#(#items),*])), ty)
            }
            ExprKind::Unary { op, expr } => {
                let v = self.expr(expr)?.scalar();
                let v = match &expr.kind {
                    ExprKind::Binary { .. } | ExprKind::If { .. } => quote!((#v)),
                    _ => v,
                };
                match op {
                    UnaryOp::Not => Val::value(quote!(!#v), ty),
                    UnaryOp::Neg => Val::value(quote!(rt::expr::sub(0, #v)?), ty),
                }
            }
            ExprKind::Binary { op, lhs, rhs } => self.binary(e, *op, lhs, rhs)?,
            ExprKind::In { expr, list } if expr.ty == Type::Dtype => {
                let x = dtype_of(&self.expr(expr)?);
                let items = list
                    .iter()
                    .map(|i| Ok(dtype_of(&self.expr(i)?)))
                    .collect::<R<Vec<_>>>()?;
                Val::value(quote!(matches!(#x, #(#items)|*)), ty)
            }
            ExprKind::In { expr, list } => {
                let x = self.expr(expr)?;
                if x.form == Form::Opt || matches!(x.ty, Type::Pickled(_)) {
                    let consts = list
                        .iter()
                        .map(|i| match &i.kind {
                            ExprKind::Const(Const::Str(s)) => Ok(quote!(#s)),
                            ExprKind::Const(Const::Int(v)) => Ok(int_lit(*v)),
                            _ => unreachable!("the checker keeps `in` on a value that may be absent to literals (`in_on_absent_values`)"),
                        })
                        .collect::<R<Vec<_>>>()?;
                    let xs = self.optional(&x, list.first().map(|i| &i.ty));
                    return Ok(Val::value(quote!(matches!(#xs, Some(#(#consts)|*))), ty));
                }
                let consts: Option<Vec<TokenStream>> = list
                    .iter()
                    .map(|i| match &i.kind {
                        ExprKind::Const(Const::Int(v)) => Some(int_lit(*v)),
                        ExprKind::Const(Const::Str(s)) => Some(quote!(#s)),
                        _ => None,
                    })
                    .collect();
                let xs = match &x.ty {
                    Type::Str => x.stored(),
                    _ => x.scalar(),
                };
                let ints: Option<Vec<i128>> = list
                    .iter()
                    .map(|i| match &i.kind {
                        ExprKind::Const(Const::Int(v)) => Some(*v),
                        _ => None,
                    })
                    .collect();
                match (consts, ints) {
                    (_, Some(v)) if v.len() > 2 && v.windows(2).all(|w| w[1] == w[0] + 1) => {
                        let (a, b) = (int_lit(v[0]), int_lit(v[v.len() - 1]));
                        Val::value(quote!(matches!(#xs, #a..=#b)), ty)
                    }
                    (Some(c), _) if !c.is_empty() => Val::value(quote!(matches!(#xs, #(#c)|*)), ty),
                    _ => {
                        let items = list
                            .iter()
                            .map(|i| Ok(self.expr(i)?.scalar()))
                            .collect::<R<Vec<_>>>()?;
                        Val::value(quote!([#(#items),*].contains(&#xs)), ty)
                    }
                }
            }
            ExprKind::If {
                cond,
                then,
                otherwise,
            } => {
                let c = self.expr(cond)?.scalar();
                let (t, o) = (self.expr(then)?, self.expr(otherwise)?);
                // Text built by either branch (`format!(..)`) is owned by the `if`.
                let owned = t.form == Form::Owned || o.form == Form::Owned;
                let (t, o) = if owned {
                    (t.owned_string(), o.owned_string())
                } else {
                    (t.scalar(), o.scalar())
                };
                // `else if`, not `else { if .. }`.
                let o = match otherwise.kind {
                    ExprKind::If { .. } => o,
                    _ => quote!({ #o }),
                };
                let ts = quote!(if #c { #t } else #o);
                if owned {
                    Val::owned(ts, ty)
                } else {
                    Val::value(ts, ty)
                }
            }
            ExprKind::List(items) => {
                let items = items
                    .iter()
                    .map(|i| Ok(self.expr(i)?.scalar()))
                    .collect::<R<Vec<_>>>()?;
                Val::place(quote!(vec![#(#items),*]), Type::List(Box::new(Type::INT)))
            }
            ExprKind::Source => {
                unreachable!("the IR reads `source` through its members (`source` is read as a value)")
            }
            _ => unreachable!(
                "the engine that reads {:?} lowers it (`Env::lower`): the checker keeps roots, entries, tables, entry lookups, messages and other formats' mappings to their engines",
                e.kind
            ),
        })
    }

    /// `has(v)`, or its negation (`absent`): an optional value is there, a list is not
    /// empty; anything else is always there.
    fn has(&self, v: &Val, absent: bool) -> TokenStream {
        let ts = v.presence.as_ref().unwrap_or(&v.ts);
        let form = match v.presence {
            Some(_) => Form::Optional,
            None => v.form,
        };
        match (form, &v.ty, absent) {
            (Form::Optional | Form::Opt, _, false) => quote!(#ts.is_some()),
            (Form::Optional | Form::Opt, _, true) => quote!(#ts.is_none()),
            (_, Type::Pickled(_), false) => quote!(!rt::pickle::is_none(#ts)),
            (_, Type::Pickled(_), true) => quote!(rt::pickle::is_none(#ts)),
            (_, Type::List(_), false) => quote!(!#ts.is_empty()),
            (_, Type::List(_), true) => quote!(#ts.is_empty()),
            _ => {
                let there = !absent;
                quote!(#there)
            }
        }
    }

    /// The negation of a boolean expression, written as a person would: comparisons
    /// flipped, `!x` for the rest, `!(!x)` as `x`, `!has(x)` as `x.is_none()`.
    pub fn negated(&self, e: &Expr) -> R<TokenStream> {
        match &e.kind {
            ExprKind::Unary {
                op: UnaryOp::Not,
                expr,
            } => {
                return Ok(self.expr(expr)?.scalar());
            }
            ExprKind::Call {
                func: Builtin::Has,
                args,
            } => {
                let v = self.expr(&args[0].value)?;
                return Ok(self.has(&v, true));
            }
            _ => {}
        }
        if let ExprKind::Binary { op, lhs, rhs } = &e.kind {
            let flipped = match op {
                BinaryOp::Eq => Some(BinaryOp::Ne),
                BinaryOp::Ne => Some(BinaryOp::Eq),
                BinaryOp::Lt => Some(BinaryOp::Ge),
                BinaryOp::Le => Some(BinaryOp::Gt),
                BinaryOp::Gt => Some(BinaryOp::Le),
                BinaryOp::Ge => Some(BinaryOp::Lt),
                _ => None,
            };
            if let Some(op) = flipped {
                return Ok(self.binary(e, op, lhs, rhs)?.ts);
            }
            // De Morgan: `!(a && b)` is `!a || !b`.
            let is = |x: &Expr, which: BinaryOp| matches!(&x.kind, ExprKind::Binary { op, .. } if *op == which);
            // Whether the negation of `x` is a `||` chain: it needs parentheses inside `&&`.
            let negated_is_or = |x: &Expr| match &x.kind {
                ExprKind::Unary {
                    op: UnaryOp::Not,
                    expr,
                } => is(expr, BinaryOp::Or),
                _ => is(x, BinaryOp::And),
            };
            let part = |x: &Expr, inside_and: bool| -> R<TokenStream> {
                let n = self.negated(x)?;
                Ok(if inside_and && negated_is_or(x) {
                    quote!((#n))
                } else {
                    n
                })
            };
            match op {
                BinaryOp::And => {
                    let (a, b) = (part(lhs, false)?, part(rhs, false)?);
                    return Ok(quote!(#a || #b));
                }
                BinaryOp::Or => {
                    let (a, b) = (part(lhs, true)?, part(rhs, true)?);
                    return Ok(quote!(#a && #b));
                }
                _ => {}
            }
        }
        let v = self.expr(e)?.scalar();
        Ok(match &e.kind {
            ExprKind::Binary { .. } | ExprKind::If { .. } => quote!(!(#v)),
            _ => quote!(!#v),
        })
    }

    fn constant(&self, c: &Const) -> R<TokenStream> {
        Ok(match c {
            Const::Int(v) => int_lit(*v),
            Const::Str(s) => quote!(#s),
            Const::Bytes(b) => {
                let l = Literal::byte_string(b);
                quote!(#l.as_slice())
            }
            Const::Bool(b) => quote!(#b),
            Const::None => quote!(None),
            Const::Dtype(d) => {
                let d = dtype_path(*d);
                quote!((#d, None))
            }
            Const::ByteOrder(b) => byte_order_path(*b),
            Const::Order(ir::Order::C) => quote!(rt::Order::C),
            Const::Order(ir::Order::Fortran) => quote!(rt::Order::Fortran),
        })
    }

    fn member(&self, e: &Expr, base: &Expr, member: &Member) -> R<Val> {
        let ty = e.ty.clone();
        match member {
            Member::EntryContent(x) if matches!(base.kind, ExprKind::Entry(_)) => {
                return Ok(self.env.entry_content(*x).unwrap_or_else(|| {
                    unreachable!("the checker keeps an entry's content to text entries of pickle containers and their pickle (`mapping_reach`)")
                }));
            }
            Member::PicklePath => {
                return Ok(self.env.pickle_path().unwrap_or_else(|| {
                    unreachable!("`.path` is a member of the objects a mapping over pickles binds")
                }));
            }
            Member::PickleParam(p) => {
                let b = self.expr(base)?.ts;
                return Ok(Val::value(quote!(#b.arg(#p)), ty));
            }
            Member::PickleState => {
                let b = self.expr(base)?.ts;
                return Ok(Val::value(
                    match &base.ty {
                        Type::PickleCall(..) => quote!(#b.state.as_ref()),
                        _ => quote!(rt::pickle::state(#b)),
                    },
                    ty,
                ));
            }
            Member::PickleAttr(a) => {
                let b = self.expr(base)?.ts;
                let item = match &base.ty {
                    Type::Pickled(p) => self
                        .ir
                        .pickle(*p)
                        .persistent
                        .as_ref()
                        .and_then(|(_, items)| items.iter().position(|i| i == a)),
                    _ => None,
                };
                return Ok(Val::value(
                    match item {
                        Some(i) => {
                            let i = Literal::usize_unsuffixed(i);
                            quote!(rt::pickle::item(#b, #i))
                        }
                        None => quote!(rt::pickle::attr(#b, #a)),
                    },
                    ty,
                ));
            }
            _ => {}
        }
        if let Member::SourceStem | Member::SourceName | Member::SourcePath = member {
            let src = self.env.source().unwrap_or_else(|| {
                unreachable!("the checker keeps `source` to the mappings of `file` formats over layouts (`source_in_reach`)")
            });
            return Ok(Val::value(
                match member {
                    Member::SourceStem => quote!(#src.stem().as_str()),
                    Member::SourceName => quote!(#src.name().as_str()),
                    _ => quote!(#src.path_text().as_str()),
                },
                ty,
            ));
        }
        let b = self.expr(base)?;
        let name = match member {
            Member::Field(l, f) => rs_ident(&self.ir.field(*l, *f).name),
            Member::DictKey(d, k) => {
                let key = &self.ir.dict(*d).keys[k.index()];
                let id = rs_ident(&key.key);
                if key.optional {
                    let p = &b.ts;
                    let text = &key.key;
                    return Ok(Val::reference(
                        quote!(rt::expr::present(&#p.#id, #text)?),
                        ty,
                    ));
                }
                id
            }
            Member::MapKey => {
                let p = &b.ts;
                return Ok(Val::place(quote!(#p.0), ty));
            }
            Member::MapValue => {
                let p = &b.ts;
                return Ok(Val::place(quote!(#p.1), ty));
            }
            _ => unreachable!(
                "the engine whose values have {member:?} lowers it (`Env::lower`); the checker keeps entries' names and captures to kv mappings (`mapping_reach`)"
            ),
        };
        if matches!(b.ty, Type::List(_) | Type::Tuple(_)) {
            // A projection: that member of every item.
            let list = b.by_ref();
            return Ok(Val::place(
                quote!(#list.iter().map(|x| x.#name.clone()).collect::<::std::vec::Vec<_>>()),
                ty,
            ));
        }
        let p = &b.ts;
        Ok(Val::place(quote!(#p.#name), ty))
    }

    fn call(&self, e: &Expr, func: Builtin, args: &[ir::Arg]) -> R<Val> {
        if let Some(v) = self.env.builtin(func, args) {
            return Ok(v);
        }
        let ty = e.ty.clone();
        let arg = |i: usize| -> R<Val> {
            let a = args.get(i).unwrap_or_else(|| {
                unreachable!("the checker gives a builtin the arguments of its arity (`builtin_argument_count`)")
            });
            self.expr(&a.value)
        };
        Ok(match func {
            Builtin::Len => {
                let a = arg(0)?;
                match a.ty {
                    Type::Pickled(_) => {
                        let (v, what) = (&a.ts, self.text(&args[0].value));
                        Val::value(quote!(rt::pickle::len(#v, #what)?), ty)
                    }
                    Type::Str => {
                        let s = a.scalar();
                        Val::value(quote!(rt::expr::len(#s.as_bytes())), ty)
                    }
                    Type::Bytes => {
                        let s = a.scalar();
                        Val::value(quote!(rt::expr::len(#s)), ty)
                    }
                    _ => {
                        let l = a.by_ref();
                        Val::value(quote!(rt::expr::len(#l)), ty)
                    }
                }
            }
            Builtin::Align => {
                let (n, a) = (arg(0)?.scalar(), arg(1)?.scalar());
                Val::value(quote!(rt::expr::align(#n, #a)?), ty)
            }
            Builtin::Itemsize => {
                let d = arg(0)?.scalar();
                Val::value(quote!(rt::expr::itemsize(#d.0)?), ty)
            }
            Builtin::Slice => {
                let data = arg(0)?.scalar();
                let start = arg(1)?.scalar();
                let end = match args.get(2).map(|a| &a.value.kind) {
                    None | Some(ExprKind::Const(Const::None)) => quote!(None),
                    Some(_) => {
                        let v = arg(2)?.scalar();
                        quote!(Some(#v))
                    }
                };
                // A start that must be a multiple of `align = A`.
                let start = match ir::named_arg(args, "align") {
                    Some(a) => {
                        let a = self.expr(&a.value)?.scalar();
                        quote!(rt::expr::aligned(#start, #a)?)
                    }
                    None => start,
                };
                Val::value(quote!(rt::expr::slice(#data, #start, #end)?), ty)
            }
            Builtin::Product | Builtin::Sum => {
                let l = arg(0)?.by_ref();
                let f = if func == Builtin::Product {
                    quote!(product)
                } else {
                    quote!(sum)
                };
                Val::value(quote!(rt::expr::#f(#l)?), ty)
            }
            Builtin::Reverse => {
                let l = arg(0)?.by_ref();
                Val::owned(quote!(rt::expr::reverse(#l)), ty)
            }
            Builtin::Lookup => {
                let l = arg(0)?.by_ref();
                let (k, d) = (arg(1)?.scalar(), arg(2)?.scalar());
                let value = match &args[0].value.ty {
                    Type::List(t) => match **t {
                        Type::Layout(r) => self.ir.layout(r).fields.iter().find(|f| f.name == "value").map(|f| f.ty.clone()),
                        _ => None,
                    },
                    _ => None,
                };
                match (&ty, value) {
                    (Type::Str, _) => Val::value(
                        quote!(rt::expr::lookup_text(#l, #k, #d, |r| (r.key.as_str(), r.value.as_str()))),
                        ty,
                    ),
                    (_, Some(Type::Union(..))) => Val::value(
                        quote!(rt::expr::lookup_int(#l, #k, #d, |r| (r.key.as_str(), r.value.int()))?),
                        ty,
                    ),
                    _ => Val::value(
                        quote!(rt::expr::lookup_int(#l, #k, #d, |r| (r.key.as_str(), Some(i128::from(r.value))))?),
                        ty,
                    ),
                }
            }
            Builtin::Str => {
                let a = arg(0)?;
                // The decimal text of a number is the same in any integer type.
                let v = match &a.ty {
                    Type::Pickled(_) => self.int_of(&a, &args[0].value),
                    _ => a.display(),
                };
                Val::owned(quote!(#v.to_string()), ty)
            }
            Builtin::Has => Val::value(self.has(&arg(0)?, false), ty),
            Builtin::Tag => {
                let v = arg(0)?.by_ref();
                Val::value(quote!(#v.tag()), ty)
            }
            Builtin::Digits => {
                let v = arg(0)?.scalar();
                Val::value(quote!(rt::expr::digits(#v)?), ty)
            }
            Builtin::First | Builtin::Last if matches!(args[0].value.ty, Type::Pickled(_)) => {
                let l = arg(0)?.ts;
                let i = if func == Builtin::First {
                    quote!(0)
                } else {
                    quote!(-1)
                };
                Val::value(quote!(rt::pickle::index(#l, #i)), ty)
            }
            Builtin::First | Builtin::Last => {
                let l = arg(0)?;
                let item_ty = l.ty.element().cloned().unwrap_or(Type::Error);
                let l = l.by_ref();
                let f = if func == Builtin::First {
                    quote!(first)
                } else {
                    quote!(last)
                };
                item_of(quote!(rt::expr::#f(#l)?), item_ty)
            }
            Builtin::IndexOf => {
                let l = arg(0)?.by_ref();
                let x = arg(1)?;
                let x = match x.form {
                    Form::Value => {
                        let t = &x.ts;
                        quote!(&#t)
                    }
                    _ => x.by_ref(),
                };
                Val::value(quote!(rt::expr::index_of(#l, #x)?), ty)
            }
            Builtin::WriteAlign => {
                let asked = self.env.write_align().unwrap_or_else(|| {
                    unreachable!("the checker keeps `write_align` to a several-tensor `file` writer's layout and `write_order` (`write_align_outside_writer`)")
                });
                let n = arg(0)?.scalar();
                Val::value(quote!(rt::expr::write_align(#asked, #n)), ty)
            }
            Builtin::Tuple => {
                let items = args
                    .iter()
                    .map(|a| self.pickle_value(&a.value))
                    .collect::<R<Vec<_>>>()?;
                Val::value(quote!(rt::pickle::tuple([#(#items),*])), ty)
            }
            Builtin::Build => {
                let (object, state) = (arg(0)?.ts, self.pickle_value(&args[1].value)?);
                Val::value(quote!(rt::pickle::build(#object, #state)?), ty)
            }
            other => unreachable!(
                "`{}(..)` is lowered by the engine where the checker keeps it (`size`/`latin1` in layout write rules, `elements`/`external` in the data of mappings over messages, `key_of`/`global` in write rules)",
                other.name()
            ),
        })
    }

    fn binary(&self, e: &Expr, op: BinaryOp, lhs: &Expr, rhs: &Expr) -> R<Val> {
        let ty = e.ty.clone();
        if op == BinaryOp::Add && lhs.ty == Type::Str {
            // Text joined, in one `format!`.
            let (mut text, mut args) = (String::new(), Vec::new());
            self.join_text(e, &mut text, &mut args)?;
            return Ok(Val::owned(quote!(format!(#text, #(#args),*)), ty));
        }
        let l = self.expr(lhs)?;
        let r = self.expr(rhs)?;
        if matches!(op, BinaryOp::Eq | BinaryOp::Ne) {
            if let Some(test) = self.optional_eq(op, (lhs, &l), (rhs, &r)) {
                return Ok(Val::value(test, ty));
            }
        }
        let (a, b) = (self.int_of(&l, lhs), self.int_of(&r, rhs));
        let arith = |f: TokenStream| Val::value(quote!(rt::expr::#f(#a, #b)?), ty.clone());
        Ok(match op {
            BinaryOp::Add => arith(quote!(add)),
            BinaryOp::Sub => arith(quote!(sub)),
            BinaryOp::Mul => arith(quote!(mul)),
            BinaryOp::Div => arith(quote!(div)),
            BinaryOp::Rem => arith(quote!(rem)),
            BinaryOp::And | BinaryOp::Or => {
                let (a, b) = (paren(op, lhs, a), paren(op, rhs, b));
                if op == BinaryOp::And {
                    Val::value(quote!(#a && #b), ty)
                } else {
                    Val::value(quote!(#a || #b), ty)
                }
            }
            cmp => {
                let o = match cmp {
                    BinaryOp::Eq => quote!(==),
                    BinaryOp::Ne => quote!(!=),
                    BinaryOp::Lt => quote!(<),
                    BinaryOp::Le => quote!(<=),
                    BinaryOp::Gt => quote!(>),
                    _ => quote!(>=),
                };
                if l.ty == Type::Dtype || r.ty == Type::Dtype {
                    // Dtypes compare by dtype; byte orders are compared apart.
                    let (a, b) = (dtype_of(&l), dtype_of(&r));
                    return Ok(Val::value(quote!(#a #o #b), ty));
                }
                // A stored integer against a literal that fits its type: as stored.
                if let Some((a, b)) = literal_operands(self.ir, &l, lhs, &r, rhs) {
                    return Ok(Val::value(quote!(#a #o #b), ty));
                }
                let (a, b) = (paren(op, lhs, a), paren(op, rhs, b));
                Val::value(quote!(#a #o #b), ty)
            }
        })
    }

    /// An equality test where one side may be absent: a pickled value, an optional
    /// value, `none`. `None` when neither side is.
    fn optional_eq(&self, op: BinaryOp, l: (&Expr, &Val), r: (&Expr, &Val)) -> Option<TokenStream> {
        let is_none = |e: &Expr| matches!(e.kind, ExprKind::Const(Const::None));
        let maybe = |v: &Val| v.form == Form::Opt || matches!(v.ty, Type::Pickled(_));
        let eq = op == BinaryOp::Eq;
        // The side that may be absent first.
        let (x, (ye, y)) = if is_none(r.0) || maybe(l.1) && !is_none(l.0) {
            (l.1, r)
        } else if is_none(l.0) || maybe(r.1) {
            (r.1, l)
        } else {
            return None;
        };
        if is_none(ye) && x.ty == Type::None {
            return Some(quote!(#eq));
        }
        if is_none(ye) {
            let xs = &x.ts;
            let optional = matches!(x.form, Form::Opt | Form::Optional);
            return Some(match (&x.ty, eq) {
                // A value read with a default is `none` when absent on the wire.
                _ if x.presence.is_some() => self.has(x, eq),
                (Type::Pickled(_), true) => quote!(rt::pickle::is_none(#xs)),
                (Type::Pickled(_), false) => quote!(!rt::pickle::is_none(#xs)),
                _ if optional && eq => quote!(#xs.is_none()),
                _ if optional => quote!(#xs.is_some()),
                // A value that is always there is never `none`.
                _ => {
                    let v = !eq;
                    quote!(#v)
                }
            });
        }
        if !maybe(x) {
            return None;
        }
        let xs = self.optional(x, Some(&y.ty));
        let ys = y.scalar();
        let cmp = if eq { quote!(==) } else { quote!(!=) };
        Some(quote!(#xs #cmp Some(#ys)))
    }

    /// A value that may be absent as an `Option` of the value form of `like` (a pickled
    /// value read as text, a global as its dotted path, or an integer).
    fn optional(&self, x: &Val, like: Option<&Type>) -> TokenStream {
        let xs = &x.ts;
        match (&x.ty, like) {
            (Type::Pickled(_), Some(Type::Int(_))) => {
                quote!(#xs.and_then(rt::pickle::Value::as_i128))
            }
            (Type::Pickled(_), Some(Type::Bool)) => {
                quote!(#xs.and_then(rt::pickle::Value::as_bool))
            }
            (Type::Pickled(_), _) => quote!(#xs.and_then(rt::pickle::Value::as_name)),
            _ => xs.clone(),
        }
    }

    /// An integer operand: a pickled value must be a non-negative integer (the error names
    /// it as written, `t.offset`).
    pub fn int_of(&self, v: &Val, e: &Expr) -> TokenStream {
        match v.ty {
            Type::Pickled(_) => {
                let (ts, what) = (&v.ts, self.text(e));
                quote!(i128::from(rt::pickle::uint(#ts, #what)?))
            }
            _ => v.scalar(),
        }
    }

    /// `e` as written in the schema, for messages, less the name the schema gives the
    /// mapped object (its binding): `t.storage.key` reads `storage.key`, `t.offset *
    /// itemsize(dtype)` reads `offset * itemsize(dtype)`, in the words of the call or
    /// message the file holds.
    pub fn text(&self, e: &Expr) -> String {
        let Some(f) = self.env.format() else {
            return String::new();
        };
        let source = self.ir.text(f, e.span);
        // The binding where a member of it is read (`t` of `t.size`): cut with its dot.
        let mut cuts = Vec::new();
        e.walk(&mut |x| {
            if let ExprKind::Member { base, .. } = &x.kind {
                if matches!(base.kind, ExprKind::Binding) {
                    cuts.push(base.span);
                }
            }
        });
        cuts.sort_by_key(|s| s.start);
        let mut out = String::new();
        let mut at = e.span.start;
        for c in cuts {
            let end = c.end + 1;
            if c.start < at
                || end > e.span.end
                || source.get(c.end - e.span.start..end - e.span.start) != Some(".")
            {
                continue;
            }
            out.push_str(&source[at - e.span.start..c.start - e.span.start]);
            at = end;
        }
        out.push_str(&source[at - e.span.start..]);
        out
    }

    /// The path of item `name` of format `fmt`: `name` in its own module, `super::fmt::name`
    /// from another format's.
    pub fn item_path(&self, fmt: FormatId, name: &str) -> TokenStream {
        let id = rs_ident(name);
        match self.env.format() {
            Some(cur) if cur != fmt => {
                let m = rs_ident(&self.ir.format(fmt).name);
                quote!(super::#m::#id)
            }
            _ => quote!(#id),
        }
    }

    /// The `const` of table `t` (`DESCR`, or `super::npy::DESCR` from another format).
    pub fn table_path(&self, t: ir::TableId) -> TokenStream {
        let table = self.ir.table(t);
        self.item_path(table.format, &crate::table::const_name(&table.name))
    }

    /// The rules function of pickle declaration `p` (`checkpoint_rules`).
    pub fn rules(&self, p: PickleId) -> TokenStream {
        let pk = self.ir.pickle(p);
        self.item_path(pk.format, &format!("{}_rules", pk.name.to_lowercase()))
    }

    /// A write rule's value as an `rt::pickle::Value`: objects as built, numbers, text,
    /// booleans and lists of integers converted.
    pub fn pickle_value(&self, e: &Expr) -> R<TokenStream> {
        match e.kind {
            ExprKind::Const(Const::None) => return Ok(quote!(rt::pickle::Value::None)),
            // A literal that fits is the pickle's integer as it is (`Value::Int(-1)`).
            ExprKind::Const(Const::Int(v)) if i64::try_from(v).is_ok() => {
                let l = Literal::i128_unsuffixed(v);
                return Ok(quote!(rt::pickle::Value::Int(#l)));
            }
            _ => {}
        }
        let v = self.expr(e)?;
        Ok(match &v.ty {
            Type::PickleObject(_) | Type::PickleGlobal(_) => v.ts,
            Type::Int(_) => {
                let x = v.scalar();
                quote!(rt::pickle::Value::int(#x))
            }
            // A table's key for the tensor's dtype (`key_of(descr, dtype)`): an
            // `unsupported` error naming the dtype when the table has none. Pickle write
            // rules are lowered where the tensor (`meta`) and its `byte_order` are in reach.
            Type::Str if v.form == Form::Opt => {
                let ExprKind::Call {
                    func: Builtin::KeyOf,
                    args,
                } = &e.kind
                else {
                    unreachable!("the text a pickle write rule may lack is `key_of`'s")
                };
                let ExprKind::Table(t) = args[0].value.kind else {
                    unreachable!("the checker gives `key_of` a table (`pickle_key_of`)")
                };
                let (x, table) = (&v.ts, &self.ir.table(t).name);
                quote!(rt::pickle::table_key(#x, NAME, #table, meta.dtype, byte_order)?)
            }
            Type::Str => {
                let x = match v.form {
                    Form::Owned => v.by_ref(),
                    _ => v.scalar(),
                };
                quote!(rt::pickle::Value::str(#x))
            }
            Type::Bool => {
                let x = v.scalar();
                quote!(rt::pickle::Value::Bool(#x))
            }
            // The tensor's bytes: the stream of them (a `Value::Stream`) the writer gives.
            Type::Bytes if matches!(e.kind, ExprKind::WriteVar(_)) => v.ts,
            Type::Bytes => {
                let x = v.scalar();
                quote!(rt::pickle::Value::bytes(#x))
            }
            Type::List(t) | Type::Tuple(t) if t.is_int() => {
                let x = v.by_ref();
                quote!(rt::pickle::Value::int_tuple(#x))
            }
            _ => unreachable!(
                "the checker keeps a pickle write rule's values to globals, calls, numbers, text, booleans and the tensor's integers (`pickle_write`)"
            ),
        })
    }

    /// The pieces of text joined by `+`: literals into the format string `text`, the
    /// other values as its arguments (`str(n)` as the integer itself).
    fn join_text(&self, e: &Expr, text: &mut String, args: &mut Vec<TokenStream>) -> R<()> {
        match &e.kind {
            ExprKind::Binary {
                op: BinaryOp::Add,
                lhs,
                rhs,
            } => {
                self.join_text(lhs, text, args)?;
                return self.join_text(rhs, text, args);
            }
            ExprKind::Const(Const::Str(s)) => {
                text.push_str(&s.replace('{', "{{").replace('}', "}}"));
                return Ok(());
            }
            ExprKind::Call {
                func: Builtin::Str,
                args: a,
            } if a.len() == 1 => {
                let v = self.expr(&a[0].value)?;
                text.push_str("{}");
                args.push(match v.ty {
                    Type::Pickled(_) => self.pickled_text(&v, &a[0].value),
                    _ => v.display(),
                });
                return Ok(());
            }
            _ => {}
        }
        let v = self.expr(e)?;
        text.push_str("{}");
        args.push(match v.ty {
            Type::Pickled(_) => self.pickled_text(&v, e),
            _ => v.scalar(),
        });
        Ok(())
    }

    /// A pickled value as text: a string, a global's `module.name`, an integer's digits
    /// (failing with an error naming `e` otherwise).
    fn pickled_text(&self, v: &Val, e: &Expr) -> TokenStream {
        let (ts, what) = (&v.ts, self.text(e));
        quote!(rt::pickle::name(#ts, #what)?)
    }
}

/// An operand of `op` in parentheses where it binds less tightly.
fn paren(op: BinaryOp, e: &Expr, ts: TokenStream) -> TokenStream {
    let inner = match &e.kind {
        ExprKind::Binary { op, .. } => *op,
        ExprKind::If { .. } => return quote!((#ts)),
        _ => return ts,
    };
    let loose = match op {
        BinaryOp::And => inner == BinaryOp::Or,
        BinaryOp::Or => false,
        _ => matches!(
            inner,
            BinaryOp::And
                | BinaryOp::Or
                | BinaryOp::Eq
                | BinaryOp::Ne
                | BinaryOp::Lt
                | BinaryOp::Le
                | BinaryOp::Gt
                | BinaryOp::Ge
        ),
    };
    if loose {
        quote!((#ts))
    } else {
        ts
    }
}

/// The integer a literal operand is (a constant or an enum value).
pub(crate) fn literal(ir: &Ir, e: &Expr) -> Option<i128> {
    match &e.kind {
        ExprKind::Const(Const::Int(v)) => Some(*v),
        ExprKind::EnumValue(en, i) => Some(i128::from(ir.enum_(*en).values[*i].1)),
        _ => None,
    }
}

/// `(stored, literal)` operands of a comparison of a stored integer with a literal that
/// fits its storage type, in their order.
fn literal_operands(
    ir: &Ir,
    l: &Val,
    lhs: &Expr,
    r: &Val,
    rhs: &Expr,
) -> Option<(TokenStream, TokenStream)> {
    let fits = |v: &Val, n: i128| match (&v.ty, v.form) {
        (_, Form::Value) => false,
        (Type::Int(i), _) => match i.bytes {
            Some(b) if i.signed => {
                let half = 1i128 << (b as u32 * 8 - 1);
                (-half..half).contains(&n)
            }
            Some(b) => (0..(1i128 << (b as u32 * 8))).contains(&n),
            None => false,
        },
        _ => false,
    };
    match (literal(ir, lhs), literal(ir, rhs)) {
        (None, Some(n)) if fits(l, n) => Some((l.stored(), int_lit(n))),
        (Some(n), None) if fits(r, n) => Some((int_lit(n), r.stored())),
        _ => None,
    }
}

/// The `rt::DType` of a dtype value `(dtype, byte_order)`: its first element when it is
/// written as a pair, else `.0`.
pub(crate) fn dtype_of(v: &Val) -> TokenStream {
    let ts = v.scalar();
    let mut it = ts.clone().into_iter();
    if let (Some(proc_macro2::TokenTree::Group(g)), None) = (it.next(), it.next()) {
        if g.delimiter() == proc_macro2::Delimiter::Parenthesis {
            let mut first = Vec::new();
            let mut commas = 0;
            for t in g.stream() {
                match &t {
                    proc_macro2::TokenTree::Punct(p) if p.as_char() == ',' => commas += 1,
                    _ if commas == 0 => first.push(t),
                    _ => {}
                }
            }
            if commas == 1 {
                return first.into_iter().collect();
            }
        }
    }
    quote!(#ts.0)
}
