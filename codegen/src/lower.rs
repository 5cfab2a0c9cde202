//! The lowering of typed IR expressions ([`ir::Expr`]) to Rust, for every engine that
//! reads the IR.
//!
//! An expression's Rust form depends only on its IR type and on where its names live,
//! which the engine says through [`Env`]. Integers are `i128` values computed with the
//! runtime's checked arithmetic (`rt::expr`); strings are `&str`, byte strings `&[u8]`,
//! payloads `(offset, len)`, dtypes `(rt::DType, Option<rt::ByteOrder>)`. Compound
//! values (records, lists, maps) are places or references, passed by reference.

use proc_macro2::{Literal, TokenStream};
use quote::quote;
use tensorfmt_schema::ast::{BinaryOp, Span, UnaryOp};
use tensorfmt_schema::ir::{
    self, Builtin, Const, EntryId, Expr, ExprKind, FieldId, IndexKind, Ir, LayoutId, Member,
    TensorKey, Type, WriteVar,
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
}

impl Val {
    /// A value of the type's value form.
    pub fn value(ts: TokenStream, ty: Type) -> Val {
        Val {
            ts,
            ty,
            form: Form::Value,
        }
    }

    /// A place of the storage type.
    pub fn place(ts: TokenStream, ty: Type) -> Val {
        Val {
            ts,
            ty,
            form: Form::Place,
        }
    }

    /// A reference to the storage type.
    pub fn reference(ts: TokenStream, ty: Type) -> Val {
        Val {
            ts,
            ty,
            form: Form::Ref,
        }
    }

    /// A reference to the value (`&place`, or the reference itself).
    pub fn by_ref(&self) -> TokenStream {
        let ts = &self.ts;
        match self.form {
            Form::Place => quote!(&#ts),
            Form::Ref | Form::Value => ts.clone(),
        }
    }

    /// The place itself (`*r` for a reference).
    pub fn deref(&self) -> TokenStream {
        let ts = &self.ts;
        match self.form {
            Form::Ref => quote!((*#ts)),
            _ => ts.clone(),
        }
    }

    /// The value form of a scalar: `i128::from(x)`, `x.as_str()`, `x`.
    pub fn scalar(&self) -> TokenStream {
        if self.form == Form::Value {
            return self.ts.clone();
        }
        let p = self.deref();
        match &self.ty {
            Type::Int(_) => quote!(i128::from(#p)),
            Type::Float(_) => quote!(f64::from(#p)),
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
    /// An engine's own reading of a builtin (`len(header)` of an encoded text, `size(x)`
    /// on write); `None` for the generic lowering.
    fn builtin(&self, _func: Builtin, _args: &[ir::Arg]) -> Option<Val> {
        None
    }
    /// An entry as a value (a kv record in reach).
    fn entry(&self, _e: EntryId) -> Option<Val> {
        None
    }
    /// A member the engine reads itself (a protobuf message's field, a kv record's value
    /// or capture), given its base lowered; `None` for the generic lowering.
    fn member(&self, _base: &Val, _member: &Member, _ty: &Type) -> Option<Val> {
        None
    }
    /// A value of the tensor being written, in a write rule.
    fn write_var(&self, _v: WriteVar) -> Option<Val> {
        None
    }
}

/// A construct that this lowering cannot express where it is used.
#[derive(Debug, Clone)]
pub(crate) struct Unlowered {
    /// Where.
    pub span: Span,
    /// What.
    pub what: String,
}

type R<T> = Result<T, Unlowered>;

fn no(e: &Expr, what: impl Into<String>) -> Unlowered {
    Unlowered {
        span: e.span,
        what: what.into(),
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
        _ => return None,
    })
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
        "bool" => "Bool".to_string(),
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
        let ty = e.ty.clone();
        Ok(match &e.kind {
            ExprKind::Const(c) => Val::value(self.constant(e, c)?, ty),
            ExprKind::Field(l, f) => self
                .env
                .field(*l, *f)
                .ok_or_else(|| no(e, "a field that is not in reach here"))?,
            ExprKind::Binding => self
                .env
                .binding()
                .ok_or_else(|| no(e, "the binding outside a mapping"))?,
            ExprKind::Position => self
                .env
                .position()
                .ok_or_else(|| no(e, "a position outside a mapping over a list"))?,
            ExprKind::TensorKey(k) => self
                .env
                .tensor_key(*k)
                .ok_or_else(|| no(e, format!("`{}` here", k.name())))?,
            ExprKind::Layout(l) => self
                .env
                .layout(*l)
                .ok_or_else(|| no(e, "a layout as a value outside a mapping over it"))?,
            ExprKind::Entry(en) => self
                .env
                .entry(*en)
                .ok_or_else(|| no(e, "an entry that is not in reach here"))?,
            ExprKind::WriteVar(v) => self
                .env
                .write_var(*v)
                .ok_or_else(|| no(e, format!("`{}` outside a write rule", v.name())))?,
            ExprKind::EnumValue(en, i) => {
                Val::value(int_lit(i128::from(self.ir.enum_(*en).values[*i].1)), ty)
            }
            ExprKind::Member { base, member } => self.member(e, base, member)?,
            ExprKind::Lookup { table, key } => {
                let t = self.ir.table(*table);
                let f = rs_ident(&t.name);
                let k = self.expr(key)?;
                let key_ts = match t.key {
                    ir::KeyKind::Str => k.scalar(),
                    // A place of a type that converts to `i64` without loss, as it is.
                    ir::KeyKind::Int
                        if k.form == Form::Place
                            && k.ty == Type::Int(ir::IntTy::sized(8, true)) =>
                    {
                        k.ts.clone()
                    }
                    ir::KeyKind::Int => {
                        let k = k.scalar();
                        quote!(rt::expr::narrow::<i64>(#k, "i64")?)
                    }
                };
                Val::value(quote!(rt::expr::dtype(#f(#key_ts), #key_ts)?), ty)
            }
            ExprKind::Index { base, index, how } => {
                if *how != IndexKind::Position {
                    return Err(no(e, "a keyed lookup outside a protobuf or pickle"));
                }
                let b = self.expr(base)?;
                let i = self.expr(index)?.scalar();
                let list = b.by_ref();
                let item_ty = b.ty.element().cloned().unwrap_or(Type::Error);
                Val::reference(quote!(rt::expr::item(#list, #i)?), item_ty)
            }
            ExprKind::Call { func, args } => self.call(e, *func, args)?,
            ExprKind::Unary { op, expr } => {
                let v = self.expr(expr)?.scalar();
                match op {
                    UnaryOp::Not => Val::value(quote!(!#v), ty),
                    UnaryOp::Neg => Val::value(quote!(rt::expr::sub(0, #v)?), ty),
                }
            }
            ExprKind::Binary { op, lhs, rhs } => self.binary(e, *op, lhs, rhs)?,
            ExprKind::In { expr, list } if expr.ty == Type::Dtype => {
                // Dtypes compare by dtype, byte orders apart.
                let x = dtype_part(&self.expr(expr)?);
                let items = list
                    .iter()
                    .map(|i| Ok(dtype_part(&self.expr(i)?)))
                    .collect::<R<Vec<_>>>()?;
                Val::value(quote!(matches!(#x, #(#items)|*)), ty)
            }
            ExprKind::In { expr, list } => {
                let x = self.expr(expr)?;
                let consts: Option<Vec<TokenStream>> = list
                    .iter()
                    .map(|i| match &i.kind {
                        ExprKind::Const(Const::Int(v)) => Some(int_lit(*v)),
                        ExprKind::Const(Const::Str(s)) => Some(quote!(#s)),
                        _ => None,
                    })
                    .collect();
                let xs = x.scalar();
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
                let t = self.expr(then)?.scalar();
                let o = self.expr(otherwise)?.scalar();
                Val::value(if_else(&c, &t, otherwise, &o), ty)
            }
            ExprKind::List(items) => {
                let items = items
                    .iter()
                    .map(|i| Ok(self.expr(i)?.scalar()))
                    .collect::<R<Vec<_>>>()?;
                Val::place(quote!(vec![#(#items),*]), Type::List(Box::new(Type::INT)))
            }
            ExprKind::Source => {
                return Err(no(
                    e,
                    "`source` alone (use `source.stem`, `.name` or `.path`)",
                ))
            }
            _ => return Err(no(e, "this expression in this engine")),
        })
    }

    /// The negation of a boolean expression, written as a person would: comparisons
    /// flipped, `!x` for the rest.
    pub fn negated(&self, e: &Expr) -> R<TokenStream> {
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
            let part = |x: &Expr| -> R<TokenStream> {
                let n = self.negated(x)?;
                Ok(match &x.kind {
                    ExprKind::Binary {
                        op: BinaryOp::And | BinaryOp::Or,
                        ..
                    } => quote!((#n)),
                    _ => n,
                })
            };
            match op {
                BinaryOp::And => {
                    let (a, b) = (part(lhs)?, part(rhs)?);
                    return Ok(quote!(#a || #b));
                }
                BinaryOp::Or => {
                    let (a, b) = (part(lhs)?, part(rhs)?);
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

    fn constant(&self, e: &Expr, c: &Const) -> R<TokenStream> {
        Ok(match c {
            Const::Int(v) => int_lit(*v),
            Const::Str(s) => quote!(#s),
            Const::Bytes(b) => {
                let l = Literal::byte_string(b);
                quote!(#l.as_slice())
            }
            Const::Bool(b) => quote!(#b),
            Const::None => return Err(no(e, "`none` outside `slice(..)`")),
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
        if let Member::SourceStem | Member::SourceName | Member::SourcePath = member {
            let src = self
                .env
                .source()
                .ok_or_else(|| no(e, "`source` where no file is in reach"))?;
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
        if let Some(v) = self.env.member(&b, member, &ty) {
            return Ok(v);
        }
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
            _ => return Err(no(e, "this member outside its engine")),
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
            let a = args
                .get(i)
                .ok_or_else(|| no(e, format!("`{}` without its arguments", func.name())))?;
            self.expr(&a.value)
        };
        Ok(match func {
            Builtin::Len => {
                let a = arg(0)?;
                match a.ty {
                    Type::Str | Type::Bytes => {
                        let s = a.scalar();
                        Val::value(quote!((#s.len() as i128)), ty)
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
                Val::value(quote!(rt::expr::slice(#data, #start, #end)?), ty)
            }
            Builtin::Str => {
                let v = arg(0)?.scalar();
                Val::value(quote!(#v.to_string().as_str()), ty)
            }
            Builtin::Digits => {
                let v = arg(0)?.scalar();
                Val::value(quote!(rt::expr::digits(#v)?), ty)
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
                Val::reference(quote!(rt::expr::#f(#l)?), item_ty)
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
            other => return Err(no(e, format!("`{}(..)` in this engine", other.name()))),
        })
    }

    /// The pieces of `a + b + ...` (text), in order: literals into the format string
    /// `text`, the other values as its arguments.
    fn text_parts(&self, e: &Expr, text: &mut String, args: &mut Vec<TokenStream>) -> R<()> {
        match &e.kind {
            ExprKind::Binary {
                op: BinaryOp::Add,
                lhs,
                rhs,
            } if e.ty == Type::Str => {
                self.text_parts(lhs, text, args)?;
                self.text_parts(rhs, text, args)
            }
            ExprKind::Const(Const::Str(s)) => {
                text.push_str(&s.replace('{', "{{").replace('}', "}}"));
                Ok(())
            }
            // `str(i)`: the integer as it displays.
            ExprKind::Call {
                func: Builtin::Str,
                args: a,
            } if a.len() == 1 && self.env.builtin(Builtin::Str, a).is_none() => {
                let v = self.expr(&a[0].value)?;
                text.push_str("{}");
                args.push(match v.form {
                    Form::Value => unwidened(&v.ts),
                    _ => v.deref(),
                });
                Ok(())
            }
            _ => {
                let v = self.expr(e)?;
                text.push_str("{}");
                args.push(match v.form {
                    Form::Value => v.ts,
                    _ => v.deref(),
                });
                Ok(())
            }
        }
    }

    /// The value of an integer constant (a literal, an enum value).
    fn const_int(&self, e: &Expr) -> Option<i128> {
        match &e.kind {
            ExprKind::Const(Const::Int(v)) => Some(*v),
            ExprKind::EnumValue(en, i) => Some(i128::from(self.ir.enum_(*en).values[*i].1)),
            _ => None,
        }
    }

    fn binary(&self, e: &Expr, op: BinaryOp, lhs: &Expr, rhs: &Expr) -> R<Val> {
        let ty = e.ty.clone();
        if op == BinaryOp::Add && lhs.ty == Type::Str {
            // Text joined in one `format!`.
            let (mut text, mut args) = (String::new(), Vec::new());
            self.text_parts(e, &mut text, &mut args)?;
            return Ok(Val::place(quote!(format!(#text, #(#args),*)), ty));
        }
        let l = self.expr(lhs)?;
        let r = self.expr(rhs)?;
        let (a, b) = (l.scalar(), r.scalar());
        let arith = |f: TokenStream| Val::value(quote!(rt::expr::#f(#a, #b)?), ty.clone());
        Ok(match op {
            BinaryOp::Add if l.ty == Type::Str => {
                Val::value(quote!(format!("{}{}", #a, #b).as_str()), ty)
            }
            BinaryOp::Add => arith(quote!(add)),
            BinaryOp::Sub => arith(quote!(sub)),
            BinaryOp::Mul => arith(quote!(mul)),
            BinaryOp::Div => arith(quote!(div)),
            BinaryOp::Rem => arith(quote!(rem)),
            BinaryOp::And => Val::value(quote!(#a && #b), ty),
            BinaryOp::Or => Val::value(quote!(#a || #b), ty),
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
                    let (a, b) = (dtype_part(&l), dtype_part(&r));
                    return Ok(Val::value(quote!(#a #o #b), ty));
                }
                // An integer place against a literal: the place as it is stored.
                let (a, b) = match (self.const_int(lhs), self.const_int(rhs)) {
                    (_, Some(v)) if fits(&l, v) => (l.ts.clone(), b),
                    (Some(v), _) if fits(&r, v) => (a, r.ts.clone()),
                    _ => (a, b),
                };
                Val::value(quote!(#a #o #b), ty)
            }
        })
    }
}

/// `if cond { a } else { b }`, or `else if` when `otherwise` (whose code is `b`) is an
/// `if`.
pub(crate) fn if_else(
    cond: &TokenStream,
    a: &TokenStream,
    otherwise: &Expr,
    b: &TokenStream,
) -> TokenStream {
    if matches!(otherwise.kind, ExprKind::If { .. }) {
        quote!(if #cond { #a } else #b)
    } else {
        quote!(if #cond { #a } else { #b })
    }
}

/// The dtype of a dtype value (`(rt::DType, Option<rt::ByteOrder>)`): the first item of a
/// tuple written out, else `.0`.
fn dtype_part(v: &Val) -> TokenStream {
    if let Some(first) = tuple_first(&v.ts) {
        return first;
    }
    let ts = &v.ts;
    quote!(#ts.0)
}

/// `a` of the tuple expression `(a, b)`.
fn tuple_first(ts: &TokenStream) -> Option<TokenStream> {
    let mut it = ts.clone().into_iter();
    let (Some(proc_macro2::TokenTree::Group(g)), None) = (it.next(), it.next()) else {
        return None;
    };
    if g.delimiter() != proc_macro2::Delimiter::Parenthesis {
        return None;
    }
    let inner: Vec<_> = g.stream().into_iter().collect();
    let comma = inner
        .iter()
        .position(|t| matches!(t, proc_macro2::TokenTree::Punct(p) if p.as_char() == ','))?;
    Some(inner[..comma].iter().cloned().collect())
}

/// `x` of `(x as i128)`, an integer widened for arithmetic (it displays the same).
fn unwidened(ts: &TokenStream) -> TokenStream {
    let mut it = ts.clone().into_iter();
    if let (Some(proc_macro2::TokenTree::Group(g)), None) = (it.next(), it.next()) {
        let inner: Vec<_> = g.stream().into_iter().collect();
        if let [x, proc_macro2::TokenTree::Ident(a), proc_macro2::TokenTree::Ident(t)] =
            inner.as_slice()
        {
            if g.delimiter() == proc_macro2::Delimiter::Parenthesis && a == "as" && t == "i128" {
                return quote!(#x);
            }
        }
    }
    ts.clone()
}

/// Whether the integer literal `v` may be compared with the place `p` as it is stored.
fn fits(p: &Val, v: i128) -> bool {
    let Type::Int(t) = &p.ty else {
        return false;
    };
    if p.form != Form::Place {
        return false;
    }
    match (t.bytes, t.signed) {
        (Some(b), true) => {
            let half = 1i128 << (b as u32 * 8 - 1);
            (-half..half).contains(&v)
        }
        (Some(b), false) => (0..(1i128 << (b as u32 * 8))).contains(&v),
        (None, _) => false,
    }
}
