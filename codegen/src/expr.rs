//! Schema expressions compiled to plain Rust: integers as `u64` with checked arithmetic,
//! comparisons, `in` as `matches!`, `if`/`else`. Names, calls and indexing are resolved by
//! a [`Scope`] that knows what is in reach where the expression is evaluated.

use proc_macro2::{Literal, TokenStream};
use quote::quote;
use tensorfmt_schema::ast::*;

use crate::model::{GResult, GenError};

/// The type of a compiled expression.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ty {
    /// A `u64`.
    Int,
    /// A `bool`.
    Bool,
    /// A `&str`.
    Str,
    /// An `rt::Order`.
    Order,
    /// An `rt::ByteOrder`.
    ByteOrder,
    /// A `Vec<u64>`.
    IntList,
    /// A payload `(offset, len)`.
    Span,
}

impl Ty {
    fn name(self) -> &'static str {
        match self {
            Ty::Int => "an integer",
            Ty::Bool => "a boolean",
            Ty::Str => "a string",
            Ty::Order => "a memory order",
            Ty::ByteOrder => "a byte order",
            Ty::IntList => "a list of integers",
            Ty::Span => "a payload",
        }
    }
}

/// Operator precedence of generated Rust, to parenthesize only where needed.
pub(crate) mod prec {
    /// `if .. else ..`
    pub const IF: u8 = 0;
    /// `||`
    pub const OR: u8 = 1;
    /// `&&`
    pub const AND: u8 = 2;
    /// comparisons
    pub const CMP: u8 = 3;
    /// prefix `!`
    pub const UNARY: u8 = 9;
    /// paths, literals, calls, method calls, macros
    pub const ATOM: u8 = 10;
}

/// A compiled expression.
#[derive(Debug, Clone)]
pub(crate) struct Val {
    /// The Rust expression.
    pub ts: TokenStream,
    /// Its type.
    pub ty: Ty,
    /// Its precedence.
    pub prec: u8,
    /// The value of an integer literal.
    pub lit: Option<u64>,
}

impl Val {
    /// An atomic value.
    pub fn atom(ts: TokenStream, ty: Ty) -> Self {
        Val {
            ts,
            ty,
            prec: prec::ATOM,
            lit: None,
        }
    }

    /// The expression, parenthesized unless its precedence is at least `min`.
    pub fn at(&self, min: u8) -> TokenStream {
        let ts = &self.ts;
        if self.prec >= min {
            ts.clone()
        } else {
            quote!((#ts))
        }
    }

    /// The expression as the receiver of a method call (integer literals get a suffix).
    pub fn receiver(&self) -> TokenStream {
        match self.lit {
            Some(v) => {
                let l = Literal::u64_suffixed(v);
                quote!(#l)
            }
            None => self.at(prec::ATOM),
        }
    }
}

/// What a name, call or index means where an expression is evaluated.
pub(crate) trait Scope {
    /// A name or dotted path.
    fn path(&self, cx: &mut Cx<'_>, e: &Expr, path: &[Ident]) -> GResult<Val>;

    /// A call of something other than the common builtins (`align`).
    fn call(&self, cx: &mut Cx<'_>, e: &Expr, callee: &[Ident], args: &[Arg]) -> GResult<Val> {
        let _ = args;
        Err(cx.unsupported(e.span, &format!("`{}(..)` here", join(callee))))
    }

    /// `base[index]`.
    fn index(&self, cx: &mut Cx<'_>, e: &Expr, base: &Expr, index: &Expr) -> GResult<Val> {
        let _ = (base, index);
        Err(cx.unsupported(e.span, "indexing here"))
    }

    /// The field (path) named in runtime errors of this expression.
    fn field(&self) -> String;
}

/// Compilation context: which file the expressions come from, and what helpers the
/// generated module needs.
pub(crate) struct Cx<'a> {
    /// Index of the file.
    pub file: usize,
    /// The file's text.
    pub src: &'a str,
    /// Set when generated code calls the module's `overflow` helper.
    pub needs_overflow: bool,
}

impl Cx<'_> {
    /// The source text of `span`, whitespace collapsed.
    pub fn text(&self, span: Span) -> String {
        self.src
            .get(span.start..span.end)
            .unwrap_or("")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// An error at `span`.
    pub fn err(&self, span: Span, message: impl Into<String>) -> GenError {
        GenError {
            file: self.file,
            span,
            message: message.into(),
        }
    }

    /// "`what` is not supported by the code generator" at `span`.
    pub fn unsupported(&self, span: Span, what: &str) -> GenError {
        self.err(
            span,
            format!("{what} is not supported by the code generator"),
        )
    }

    /// An error that the expression has the wrong type.
    pub fn expect(&self, e: &Expr, v: &Val, ty: Ty) -> GResult<()> {
        if v.ty == ty {
            Ok(())
        } else {
            Err(self.err(
                e.span,
                format!(
                    "`{}` is {}, expected {}",
                    self.text(e.span),
                    v.ty.name(),
                    ty.name()
                ),
            ))
        }
    }
}

/// Joins a dotted path.
pub(crate) fn join(path: &[Ident]) -> String {
    path.iter()
        .map(|i| i.name.as_str())
        .collect::<Vec<_>>()
        .join(".")
}

/// True when `e` calls `name(..)` anywhere.
pub(crate) fn calls(e: &Expr, name: &str) -> bool {
    match &e.kind {
        ExprKind::Call { callee, args } => {
            (callee.len() == 1 && callee[0].name == name)
                || args.iter().any(|a| calls(&a.value, name))
        }
        ExprKind::Index { base, index } => calls(base, name) || calls(index, name),
        ExprKind::Member { base, .. } => calls(base, name),
        ExprKind::Unary { expr, .. } => calls(expr, name),
        ExprKind::Binary { lhs, rhs, .. } => calls(lhs, name) || calls(rhs, name),
        ExprKind::In { expr, list } => calls(expr, name) || list.iter().any(|x| calls(x, name)),
        ExprKind::If {
            cond,
            then,
            otherwise,
        } => calls(cond, name) || calls(then, name) || calls(otherwise, name),
        ExprKind::List(l) => l.iter().any(|x| calls(x, name)),
        _ => false,
    }
}

/// The single positional argument of a builtin call.
pub(crate) fn one_arg<'e>(
    cx: &Cx<'_>,
    e: &Expr,
    callee: &[Ident],
    args: &'e [Arg],
) -> GResult<&'e Expr> {
    match args {
        [a] if a.name.is_none() => Ok(&a.value),
        _ => Err(cx.err(
            e.span,
            format!("`{}` takes one positional argument", join(callee)),
        )),
    }
}

/// Compiles `e`.
pub(crate) fn compile(cx: &mut Cx<'_>, scope: &dyn Scope, e: &Expr) -> GResult<Val> {
    match &e.kind {
        ExprKind::Int(i) => {
            let v = u64::try_from(*i).map_err(|_| {
                cx.unsupported(e.span, "an integer outside 0..=u64::MAX in an expression")
            })?;
            let lit = Literal::u64_unsuffixed(v);
            Ok(Val {
                ts: quote!(#lit),
                ty: Ty::Int,
                prec: prec::ATOM,
                lit: Some(v),
            })
        }
        ExprKind::Str(s) => Ok(Val::atom(quote!(#s), Ty::Str)),
        ExprKind::Bool(b) => Ok(Val::atom(quote!(#b), Ty::Bool)),
        ExprKind::Bytes(_) => Err(cx.unsupported(e.span, "a byte string in an expression")),
        ExprKind::None => Err(cx.unsupported(e.span, "`none` in an expression")),
        ExprKind::List(_) => Err(cx.unsupported(e.span, "a list outside `in [..]`")),
        ExprKind::Path(p) => scope.path(cx, e, p),
        ExprKind::Index { base, index } => scope.index(cx, e, base, index),
        ExprKind::Member { .. } => Err(cx.unsupported(
            e.span,
            "a field of an indexed value outside a protobuf mapping",
        )),
        ExprKind::Call { callee, args } if callee.len() == 1 && callee[0].name == "align" => {
            let [n, a] = args.as_slice() else {
                return Err(cx.err(e.span, "`align` takes two arguments: align(n, multiple)"));
            };
            let n = int(cx, scope, &n.value)?;
            let a = int(cx, scope, &a.value)?;
            let at = n.receiver();
            let a = &a.ts;
            let of = overflow(cx, scope, e);
            Ok(Val::atom(
                quote!(#at.checked_next_multiple_of(#a).ok_or_else(#of)?),
                Ty::Int,
            ))
        }
        ExprKind::Call { callee, args } if callee.len() == 1 => builtin(cx, scope, e, callee, args),
        ExprKind::Call { callee, args } => scope.call(cx, e, callee, args),
        ExprKind::Unary {
            op: UnaryOp::Not, ..
        } => cond(cx, scope, e, false),
        ExprKind::Unary {
            op: UnaryOp::Neg, ..
        } => Err(cx.unsupported(e.span, "negation")),
        ExprKind::Binary { op, lhs, rhs } => binary(cx, scope, e, *op, lhs, rhs),
        ExprKind::In { .. } => cond(cx, scope, e, false),
        ExprKind::If {
            cond: c,
            then,
            otherwise,
        } => {
            let c = cond(cx, scope, c, false)?.ts;
            let t = compile(cx, scope, then)?;
            let o = compile(cx, scope, otherwise)?;
            cx.expect(otherwise, &o, t.ty)?;
            let (tt, ot) = (&t.ts, &o.ts);
            // `else if` chains stay flat.
            let else_branch = if matches!(otherwise.kind, ExprKind::If { .. }) {
                quote!(#ot)
            } else {
                quote!({ #ot })
            };
            Ok(Val {
                ts: quote!(if #c { #tt } else #else_branch),
                ty: t.ty,
                prec: prec::IF,
                lit: None,
            })
        }
    }
}

/// The builtins every scope shares: `digits(n)`, `first(list)`, `last(list)` and
/// `len(list)` of a list value (`len(header.shape)`); `len(field)` and other calls go to the
/// scope.
fn builtin(
    cx: &mut Cx<'_>,
    scope: &dyn Scope,
    e: &Expr,
    callee: &[Ident],
    args: &[Arg],
) -> GResult<Val> {
    match callee[0].name.as_str() {
        "digits" => {
            let n = int(cx, scope, one_arg(cx, e, callee, args)?)?;
            let recv = n.receiver();
            // `checked_ilog10` is `None` for 0, which has one digit.
            Ok(Val::atom(
                quote!(#recv.checked_ilog10().map_or(1, |d| u64::from(d) + 1)),
                Ty::Int,
            ))
        }
        name @ ("first" | "last") => {
            let arg = one_arg(cx, e, callee, args)?;
            let l = compile(cx, scope, arg)?;
            cx.expect(arg, &l, Ty::IntList)?;
            let recv = l.at(prec::ATOM);
            let method = if name == "first" {
                quote!(first)
            } else {
                quote!(last)
            };
            let field = scope.field();
            let msg = format!("`{}`: the list is empty", cx.text(e.span));
            Ok(Val::atom(
                quote!(#recv.#method().copied().ok_or_else(|| {
                    rt::Error::from(rt::ErrorKind::Invalid(#msg.to_string())).in_field(#field)
                })?),
                Ty::Int,
            ))
        }
        "len" => {
            let arg = one_arg(cx, e, callee, args)?;
            // `len(field)` is the scope's: the length of a field's content.
            if matches!(&arg.kind, ExprKind::Path(p) if p.len() == 1) {
                return scope.call(cx, e, callee, args);
            }
            let l = compile(cx, scope, arg)?;
            cx.expect(arg, &l, Ty::IntList)?;
            let recv = l.at(prec::ATOM);
            // Parenthesized: `x as u64 < y` would not parse.
            Ok(Val::atom(quote!((#recv.len() as u64)), Ty::Int))
        }
        _ => scope.call(cx, e, callee, args),
    }
}

/// Compiles `e`, which must be an integer.
pub(crate) fn int(cx: &mut Cx<'_>, scope: &dyn Scope, e: &Expr) -> GResult<Val> {
    let v = compile(cx, scope, e)?;
    cx.expect(e, &v, Ty::Int)?;
    Ok(v)
}

/// `|| overflow("field", "expr text")`, noting that the module needs the helper.
fn overflow(cx: &mut Cx<'_>, scope: &dyn Scope, e: &Expr) -> TokenStream {
    cx.needs_overflow = true;
    let field = scope.field();
    let text = cx.text(e.span);
    quote!(|| overflow(#field, #text))
}

fn binary(
    cx: &mut Cx<'_>,
    scope: &dyn Scope,
    e: &Expr,
    op: BinaryOp,
    lhs: &Expr,
    rhs: &Expr,
) -> GResult<Val> {
    use BinaryOp::*;
    match op {
        Or | And | Eq | Ne | Lt | Le | Gt | Ge => cond(cx, scope, e, false),
        Add | Sub | Mul | Div | Rem => {
            let l = int(cx, scope, lhs)?;
            let r = int(cx, scope, rhs)?;
            let method = match op {
                Add => quote!(checked_add),
                Sub => quote!(checked_sub),
                Mul => quote!(checked_mul),
                Div => quote!(checked_div),
                _ => quote!(checked_rem),
            };
            let recv = l.receiver();
            let r = &r.ts;
            let of = overflow(cx, scope, e);
            Ok(Val::atom(
                quote!(#recv.#method(#r).ok_or_else(#of)?),
                Ty::Int,
            ))
        }
    }
}

/// Compiles the condition `e` (negated when `negate`), pushing negation inward so that the
/// generated code reads `minor != 0` rather than `!(minor == 0)`.
pub(crate) fn cond(cx: &mut Cx<'_>, scope: &dyn Scope, e: &Expr, negate: bool) -> GResult<Val> {
    use BinaryOp::*;
    let bool_val = |ts: TokenStream, prec: u8| Val {
        ts,
        ty: Ty::Bool,
        prec,
        lit: None,
    };
    match &e.kind {
        ExprKind::Unary {
            op: UnaryOp::Not,
            expr,
        } => cond(cx, scope, expr, !negate),
        ExprKind::Binary {
            op: op @ (Or | And),
            lhs,
            rhs,
        } => {
            // De Morgan when negated.
            let rust_or = matches!((op, negate), (Or, false) | (And, true));
            let p = if rust_or { prec::OR } else { prec::AND };
            let l = cond(cx, scope, lhs, negate)?.at(p);
            let r = cond(cx, scope, rhs, negate)?.at(p + 1);
            Ok(if rust_or {
                bool_val(quote!(#l || #r), p)
            } else {
                bool_val(quote!(#l && #r), p)
            })
        }
        ExprKind::Binary {
            op: op @ (Eq | Ne | Lt | Le | Gt | Ge),
            lhs,
            rhs,
        } => {
            let l = compile(cx, scope, lhs)?;
            let r = compile(cx, scope, rhs)?;
            cx.expect(rhs, &r, l.ty)?;
            let ordered = matches!(op, Lt | Le | Gt | Ge);
            if ordered && l.ty != Ty::Int {
                return Err(cx.err(e.span, "`<`, `<=`, `>` and `>=` compare integers only"));
            }
            if matches!(l.ty, Ty::IntList | Ty::Span) {
                return Err(cx.unsupported(e.span, "comparing lists or payloads"));
            }
            let op = match (op, negate) {
                (Eq, false) | (Ne, true) => quote!(==),
                (Ne, false) | (Eq, true) => quote!(!=),
                (Lt, false) | (Ge, true) => quote!(<),
                (Le, false) | (Gt, true) => quote!(<=),
                (Gt, false) | (Le, true) => quote!(>),
                _ => quote!(>=),
            };
            let (l, r) = (l.at(prec::CMP + 1), r.at(prec::CMP + 1));
            Ok(bool_val(quote!(#l #op #r), prec::CMP))
        }
        ExprKind::In { expr, list } => {
            let x = compile(cx, scope, expr)?;
            if !matches!(x.ty, Ty::Int | Ty::Str) {
                return Err(
                    cx.unsupported(e.span, "`in` over values other than integers and strings")
                );
            }
            let mut items = Vec::new();
            let mut all_lit = true;
            for item in list {
                let v = compile(cx, scope, item)?;
                cx.expect(item, &v, x.ty)?;
                all_lit &= matches!(item.kind, ExprKind::Int(_) | ExprKind::Str(_));
                items.push(v);
            }
            if items.is_empty() {
                return Ok(bool_val(quote!(#negate), prec::ATOM));
            }
            if all_lit {
                let xs = &x.ts;
                let mut ints: Vec<u64> = items.iter().filter_map(|v| v.lit).collect();
                ints.sort_unstable();
                ints.dedup();
                let contiguous = ints.len() >= 2
                    && ints.len() == items.len()
                    && ints.windows(2).all(|w| w[1] == w[0] + 1);
                let m = if contiguous {
                    let (lo, hi) = (
                        Literal::u64_unsuffixed(ints[0]),
                        Literal::u64_unsuffixed(ints[ints.len() - 1]),
                    );
                    quote!(matches!(#xs, #lo..=#hi))
                } else {
                    let pats = items.iter().map(|v| &v.ts);
                    quote!(matches!(#xs, #(#pats)|*))
                };
                Ok(if negate {
                    bool_val(quote!(!#m), prec::UNARY)
                } else {
                    bool_val(m, prec::ATOM)
                })
            } else {
                let xs = x.at(prec::CMP + 1);
                let parts = items.iter().map(|v| {
                    let v = v.at(prec::CMP + 1);
                    if negate {
                        quote!(#xs != #v)
                    } else {
                        quote!(#xs == #v)
                    }
                });
                let p = if items.len() == 1 {
                    prec::CMP
                } else if negate {
                    prec::AND
                } else {
                    prec::OR
                };
                Ok(if negate {
                    bool_val(quote!(#(#parts)&&*), p)
                } else {
                    bool_val(quote!(#(#parts)||*), p)
                })
            }
        }
        _ => {
            let v = compile(cx, scope, e)?;
            cx.expect(e, &v, Ty::Bool)?;
            if negate {
                let t = v.at(prec::UNARY);
                Ok(bool_val(quote!(!#t), prec::UNARY))
            } else {
                Ok(v)
            }
        }
    }
}
