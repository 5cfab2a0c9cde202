//! Layouts: the struct, its reader (fields in order, checks after each field) and its
//! writer (codec texts first, then computed fields, reserved slots back-patched once the
//! sized fields are laid out, then the payload streamed).

use proc_macro2::{Ident as RsIdent, Literal, TokenStream};
use quote::{format_ident, quote};
use tensorfmt_schema::ast::*;

use crate::dict;
use crate::expr::{self, Cx, Scope, Ty, Val};
use crate::model::{rs_ident, Fmt, GResult};

/// A fixed-width number type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Prim {
    /// `u8`..`i64`, `f32`, `f64`.
    pub name: &'static str,
    /// Width in bytes.
    pub bytes: u8,
    /// Signed integer.
    pub signed: bool,
    /// Floating point.
    pub float: bool,
}

impl Prim {
    fn by_name(name: &str) -> Option<Prim> {
        let (name, bytes, signed, float) = match name {
            "u8" => ("u8", 1, false, false),
            "u16" => ("u16", 2, false, false),
            "u32" => ("u32", 4, false, false),
            "u64" => ("u64", 8, false, false),
            "i8" => ("i8", 1, true, false),
            "i16" => ("i16", 2, true, false),
            "i32" => ("i32", 4, true, false),
            "i64" => ("i64", 8, true, false),
            "f32" => ("f32", 4, false, true),
            "f64" => ("f64", 8, false, true),
            _ => return None,
        };
        Some(Prim {
            name,
            bytes,
            signed,
            float,
        })
    }

    /// The Rust type.
    pub fn ty(self) -> RsIdent {
        format_ident!("{}", self.name)
    }

    /// An unsigned integer, usable in expressions.
    fn unsigned(self) -> bool {
        !self.signed && !self.float
    }

    /// The cursor / buffer method suffix: `u8`, `u16_le`, `f64_be`.
    fn method(self, prefix: &str, big: bool) -> RsIdent {
        if self.bytes == 1 {
            format_ident!("{}{}", prefix, self.name)
        } else if big {
            format_ident!("{}{}_be", prefix, self.name)
        } else {
            format_ident!("{}{}_le", prefix, self.name)
        }
    }
}

/// The encodings a codec may decode its text with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Encoding {
    Latin1,
    Utf8,
}

/// What a layout field is.
pub(crate) enum Kind<'s> {
    /// Fixed bytes.
    Magic(&'s BytesLit),
    /// A number.
    Num(Prim),
    /// A number whose width depends on earlier fields; held as the widest branch.
    Cond {
        cond: &'s Expr,
        then: Prim,
        otherwise: Prim,
        wide: Prim,
    },
    /// Bytes sized by an expression.
    Bytes { size: &'s Expr },
    /// A dict decoded by the `pydict` codec from sized text.
    Dict {
        dict: &'s Dict,
        size: &'s Expr,
        encoding: Option<&'s Expr>,
        /// Spaces appended to the encoded text on write (`spare = ..`).
        spare: Option<&'s Expr>,
    },
    /// The payload: the rest of the source, or a sized span.
    Payload { size: Option<&'s Expr> },
}

/// `pad(align = .., fill = .., last = .., min = ..)`.
pub(crate) struct Pad {
    align: u64,
    fill: u8,
    last: Option<u8>,
    /// The fewest pad bytes written.
    min: u64,
}

/// A classified layout field.
pub(crate) struct FieldM<'s> {
    /// The declaration.
    pub ast: &'s Field,
    /// Its Rust name.
    pub ident: RsIdent,
    /// What it is.
    pub kind: Kind<'s>,
    /// `check` conditions.
    pub checks: Vec<&'s Expr>,
    /// `write =` rule.
    pub write: Option<&'s Expr>,
    /// Padding on write.
    pub pad: Option<Pad>,
}

impl FieldM<'_> {
    fn name(&self) -> &str {
        &self.ast.name.name
    }
}

/// A classified layout.
pub(crate) struct LayoutM<'s> {
    /// The declaration.
    pub ast: &'s Layout,
    /// Its Rust name.
    pub ident: RsIdent,
    /// Big-endian numbers.
    pub big: bool,
    /// Its fields.
    pub fields: Vec<FieldM<'s>>,
}

const RESERVED: &[&str] = &["c", "limits", "w", "buf"];

/// Classifies `layout`'s fields, rejecting what the generator does not support.
pub(crate) fn classify<'s>(cx: &Cx<'_>, fmt: &Fmt<'s>, layout: &'s Layout) -> GResult<LayoutM<'s>> {
    let mut fields = Vec::new();
    let n = layout.fields.len();
    for (i, f) in layout.fields.iter().enumerate() {
        let name = f.name.name.as_str();
        if RESERVED.contains(&name) {
            return Err(cx.err(
                f.name.span,
                format!("the field name `{name}` is reserved by the code generator"),
            ));
        }
        let mut checks = Vec::new();
        let mut write = None;
        let mut size = None;
        let mut rest = false;
        let mut pad = None;
        let mut codec = None;
        for m in &f.modifiers {
            match m {
                Modifier::Check(e) => checks.push(e),
                Modifier::Write(e) => write = Some(e),
                Modifier::Size(e) => size = Some(e),
                Modifier::Rest(_) => rest = true,
                Modifier::Codec { name, args, span } => codec = Some((name, args, *span)),
                Modifier::Pad { args, span } => pad = Some(parse_pad(cx, args, *span)?),
                Modifier::Repeat(r) => {
                    let span = match r {
                        Repeat::UntilEof(s) => *s,
                        Repeat::Count(e) => e.span,
                    };
                    return Err(cx.unsupported(span, "`repeat`"));
                }
                Modifier::Align(e) => {
                    return Err(cx.unsupported(e.span, "`align` on a layout field"))
                }
                Modifier::At(e) => return Err(cx.unsupported(e.span, "`at`")),
            }
        }
        let kind = match &f.ty {
            FieldType::Magic(b) => Kind::Magic(b),
            FieldType::Cond {
                cond,
                then,
                otherwise,
                span,
            } => {
                let (t, o) = (prim_of(cx, fmt, then)?, prim_of(cx, fmt, otherwise)?);
                if t.float || o.float || t.signed != o.signed {
                    return Err(cx.unsupported(
                        *span,
                        "a conditional type whose branches are not integers of the same signedness",
                    ));
                }
                let wide = if t.bytes >= o.bytes { t } else { o };
                Kind::Cond {
                    cond,
                    then: t,
                    otherwise: o,
                    wide,
                }
            }
            FieldType::Named(t) if t.path.len() == 1 && t.args.is_empty() => {
                let tn = t.path[0].name.as_str();
                if let Some(p) = Prim::by_name(tn) {
                    Kind::Num(p)
                } else if tn == "payload" {
                    if i + 1 != n {
                        return Err(
                            cx.unsupported(f.span, "a payload field that is not the last field")
                        );
                    }
                    if rest {
                        Kind::Payload { size: None }
                    } else if let Some(s) = size {
                        Kind::Payload { size: Some(s) }
                    } else {
                        return Err(cx.err(f.span, "a payload needs `rest` or `size`"));
                    }
                } else if tn == "bytes" {
                    match size {
                        Some(s) if !rest => Kind::Bytes { size: s },
                        _ => return Err(cx.unsupported(f.span, "a `bytes` field without `size`")),
                    }
                } else if let Some(d) = fmt.dict(tn) {
                    let Some(size) = size else {
                        return Err(cx.unsupported(f.span, "a dict field without `size`"));
                    };
                    let Some((cname, cargs, cspan)) = codec else {
                        return Err(cx.err(f.span, "a dict field needs a `codec`"));
                    };
                    if cname.name != "pydict" {
                        return Err(cx.unsupported(cspan, &format!("the `{}` codec", cname.name)));
                    }
                    let mut encoding = None;
                    let mut spare = None;
                    for a in cargs {
                        match &a.name {
                            Some(n) if n.name == "encoding" => encoding = Some(&a.value),
                            Some(n) if n.name == "spare" => spare = Some(&a.value),
                            _ => return Err(cx.err(
                                a.span,
                                "`pydict` takes the arguments `encoding = \"latin1\" | \"utf8\"` and `spare = N`",
                            )),
                        }
                    }
                    Kind::Dict {
                        dict: d,
                        size,
                        encoding,
                        spare,
                    }
                } else if fmt.layout(tn).is_some() {
                    return Err(cx.unsupported(t.span, "a nested layout field"));
                } else {
                    return Err(cx.err(t.span, format!("unknown field type `{tn}`")));
                }
            }
            FieldType::Named(t) => {
                return Err(cx.unsupported(t.span, &format!("the field type `{}`", cx.text(t.span))))
            }
        };
        // Modifiers that do not apply to the kind.
        let is_num = matches!(kind, Kind::Num(_) | Kind::Cond { .. });
        if !is_num {
            if let Some(c) = checks.first() {
                return Err(cx.unsupported(c.span, "`check` on a field that is not a number"));
            }
            if let Some(w) = write {
                return Err(cx.unsupported(w.span, "`write =` on a field that is not a number"));
            }
        } else if let Some(s) = size {
            return Err(cx.err(s.span, "`size` does not apply to a number"));
        }
        if let (Some(w), Kind::Num(p)) = (write, &kind) {
            if !p.unsigned() {
                return Err(cx.unsupported(w.span, "`write =` on a signed or float field"));
            }
        }
        if let (Some((_, _, span)), false) = (codec, matches!(kind, Kind::Dict { .. })) {
            return Err(cx.unsupported(span, "a codec on a field that is not a dict"));
        }
        if pad.is_some() && !matches!(kind, Kind::Dict { .. } | Kind::Bytes { .. }) {
            return Err(cx.unsupported(f.span, "`pad` on a field that is not sized"));
        }
        if rest && !matches!(kind, Kind::Payload { .. }) {
            return Err(cx.unsupported(f.span, "`rest` on a field that is not a payload"));
        }
        fields.push(FieldM {
            ast: f,
            ident: rs_ident(name),
            kind,
            checks,
            write,
            pad,
        });
    }
    Ok(LayoutM {
        ast: layout,
        ident: rs_ident(&layout.name.name),
        big: layout.endian == Endian::Big,
        fields,
    })
}

fn prim_of(cx: &Cx<'_>, _fmt: &Fmt<'_>, t: &TypeRef) -> GResult<Prim> {
    match t.path.as_slice() {
        [one] if t.args.is_empty() => Prim::by_name(&one.name)
            .ok_or_else(|| cx.unsupported(t.span, "a conditional type other than numbers")),
        _ => Err(cx.unsupported(t.span, "a conditional type other than numbers")),
    }
}

fn parse_pad(cx: &Cx<'_>, args: &[Arg], span: Span) -> GResult<Pad> {
    let mut pad = Pad {
        align: 0,
        fill: 0,
        last: None,
        min: 0,
    };
    for a in args {
        let name = a.name.as_ref().map(|n| n.name.as_str());
        match (name, &a.value.kind) {
            (Some("align"), ExprKind::Int(v)) if *v > 0 && *v <= i128::from(u32::MAX) => {
                pad.align = *v as u64
            }
            (Some("fill"), ExprKind::Bytes(b)) if b.len() == 1 => pad.fill = b[0],
            (Some("last"), ExprKind::Bytes(b)) if b.len() == 1 => pad.last = Some(b[0]),
            (Some("min"), ExprKind::Int(v)) if *v >= 0 && *v <= i128::from(u32::MAX) => {
                pad.min = *v as u64
            }
            _ => {
                return Err(cx.unsupported(
                    a.span,
                    "a `pad` argument other than `align = N`, `fill = b\"x\"`, `last = b\"x\"`, `min = N`",
                ))
            }
        }
    }
    if pad.align == 0 {
        return Err(cx.err(span, "`pad` needs `align = N`"));
    }
    Ok(pad)
}

fn byte_lit(b: &[u8]) -> TokenStream {
    let l = Literal::byte_string(b);
    quote!(#l)
}

/// `u64::from(x)`, or `x` for a `u64`.
fn widen(p: Prim, x: TokenStream) -> TokenStream {
    if p.name == "u64" {
        x
    } else {
        quote!(u64::from(#x))
    }
}

trait IntoTs {
    fn into_ts(self) -> TokenStream;
}

impl IntoTs for RsIdent {
    fn into_ts(self) -> TokenStream {
        quote!(#self)
    }
}

/// The value of a numeric field or of a dict key in an expression. `access` gives the
/// Rust expression of the field's value.
pub(crate) fn field_value(
    cx: &mut Cx<'_>,
    e: &Expr,
    f: &FieldM<'_>,
    path: &[Ident],
    access: impl Fn(&FieldM<'_>) -> TokenStream,
) -> GResult<Val> {
    match (&f.kind, path.len()) {
        (Kind::Num(p) | Kind::Cond { wide: p, .. }, 1) if p.unsigned() => {
            Ok(Val::atom(widen(*p, access(f)), Ty::Int))
        }
        (Kind::Num(_) | Kind::Cond { .. }, 1) => {
            Err(cx.unsupported(e.span, "a signed or float field in an expression"))
        }
        (Kind::Dict { dict, .. }, 2) => dict::key_value(cx, e, dict, access(f), &path[1]),
        _ => Err(cx.unsupported(e.span, &format!("`{}` in an expression", expr::join(path)))),
    }
}

/// The layout's `write` (its struct and `read` come from the IR: `crate::read`).
pub(crate) fn gen_layout(cx: &mut Cx<'_>, fmt: &Fmt<'_>, l: &LayoutM<'_>) -> GResult<TokenStream> {
    let ident = &l.ident;
    let write = gen_write(cx, fmt, l)?;
    Ok(quote! {
        impl #ident {
            #write
        }
    })
}

fn by_encoding(
    cx: &mut Cx<'_>,
    scope: &dyn Scope,
    e: Option<&Expr>,
    leaf: &dyn Fn(Encoding) -> TokenStream,
) -> GResult<TokenStream> {
    let Some(e) = e else {
        return Ok(leaf(Encoding::Utf8));
    };
    match &e.kind {
        ExprKind::Str(s) => match s.as_str() {
            "latin1" => Ok(leaf(Encoding::Latin1)),
            "utf8" => Ok(leaf(Encoding::Utf8)),
            other => Err(cx.unsupported(e.span, &format!("the text encoding \"{other}\""))),
        },
        ExprKind::If {
            cond,
            then,
            otherwise,
        } => {
            let c = expr::cond(cx, scope, cond, false)?.ts;
            let t = by_encoding(cx, scope, Some(then), leaf)?;
            let o = by_encoding(cx, scope, Some(otherwise), leaf)?;
            let o = if matches!(otherwise.kind, ExprKind::If { .. }) {
                o
            } else {
                quote!({ #o })
            };
            Ok(quote!(if #c { #t } else #o))
        }
        _ => Err(cx.unsupported(
            e.span,
            "an encoding that is not a literal or an `if` over literals",
        )),
    }
}

/// How a numeric field gets its value on write.
enum Rule<'s> {
    /// Computed before layout from this expression.
    Eager(&'s Expr),
    /// Computed after layout (the expression uses `size(..)`).
    Deferred(&'s Expr),
    /// A constant implied by `check x == N`.
    Const(u64),
    /// `size(field)` of the field sized by this one.
    SizeOf(usize),
    /// Given by the caller.
    Param,
}

/// Names in reach while writing.
struct WriteScope<'a, 's> {
    layout: &'a LayoutM<'s>,
    rules: &'a [Rule<'s>],
    /// The field whose rule or check is compiled.
    at: usize,
    /// Compiling after layout (sizes known).
    deferred: bool,
    /// Compiling a codec's `spare`, before any computed field or encoded length is known.
    in_text: bool,
}

impl WriteScope<'_, '_> {
    fn find(&self, cx: &Cx<'_>, e: &Expr, name: &Ident) -> GResult<(usize, &FieldM<'_>)> {
        self.layout
            .fields
            .iter()
            .enumerate()
            .find(|(_, f)| f.name() == name.name)
            .ok_or_else(|| {
                cx.err(
                    e.span,
                    format!("`{}` is not a field of this layout", name.name),
                )
            })
    }
}

impl Scope for WriteScope<'_, '_> {
    fn path(&self, cx: &mut Cx<'_>, e: &Expr, path: &[Ident]) -> GResult<Val> {
        let (i, f) = self.find(cx, e, &path[0])?;
        if matches!(f.kind, Kind::Num(_) | Kind::Cond { .. }) {
            match &self.rules[i] {
                Rule::Param => {}
                Rule::Eager(_) | Rule::Deferred(_) | Rule::SizeOf(_) if self.in_text => {
                    return Err(cx.err(
                        e.span,
                        format!(
                            "using `{}`, computed once the codec texts are encoded, in `spare` \
                             is not possible: `spare` lengthens the text it is computed from",
                            f.name()
                        ),
                    ))
                }
                Rule::Const(v) => {
                    let lit = Literal::u64_unsuffixed(*v);
                    return Ok(Val {
                        ts: quote!(#lit),
                        ty: Ty::Int,
                        prec: expr::prec::ATOM,
                        lit: Some(*v),
                    });
                }
                Rule::Deferred(_) | Rule::SizeOf(_) if !self.deferred || i > self.at => {
                    return Err(cx.unsupported(
                        e.span,
                        &format!(
                            "using `{}`, known only once the layout is laid out, here",
                            f.name()
                        ),
                    ))
                }
                _ if i > self.at => {
                    return Err(cx.unsupported(
                        e.span,
                        &format!("using `{}` before it is computed", f.name()),
                    ))
                }
                _ => {
                    // Computed values are held as `u64`.
                    return Ok(Val::atom(f.ident.clone().into_ts(), Ty::Int));
                }
            }
        }
        field_value(cx, e, f, path, |f| f.ident.clone().into_ts())
    }

    fn call(&self, cx: &mut Cx<'_>, e: &Expr, callee: &[Ident], args: &[Arg]) -> GResult<Val> {
        let fname = callee[0].name.as_str();
        if self.in_text {
            return Err(cx.unsupported(e.span, &format!("`{}(..)` in `spare`", expr::join(callee))));
        }
        if callee.len() != 1 || !matches!(fname, "len" | "size" | "latin1") {
            return Err(cx.unsupported(e.span, &format!("`{}(..)`", expr::join(callee))));
        }
        let arg = expr::one_arg(cx, e, callee, args)?;
        let ExprKind::Path(p) = &arg.kind else {
            return Err(cx.err(arg.span, format!("`{fname}` takes a field name")));
        };
        let (_, f) = self.find(cx, arg, &p[0])?;
        if p.len() != 1 {
            return Err(cx.err(arg.span, format!("`{fname}` takes a field name")));
        }
        let payload_len = format_ident!("{}_len", f.ident.to_string().trim_start_matches("r#"));
        let cast = |ts: TokenStream| Val {
            ts: quote!(#ts as u64),
            ty: Ty::Int,
            prec: 8,
            lit: None,
        };
        match (fname, &f.kind) {
            ("len" | "size", Kind::Payload { .. }) => Ok(Val::atom(quote!(#payload_len), Ty::Int)),
            ("len", Kind::Bytes { .. }) => {
                let id = &f.ident;
                Ok(cast(quote!(#id.len())))
            }
            ("len", Kind::Dict { .. }) => {
                let t = text_local(f);
                Ok(cast(quote!(#t.len())))
            }
            ("latin1", Kind::Dict { .. }) => {
                let t = text_local(f);
                Ok(Val::atom(
                    quote!(#t.chars().all(|ch| u32::from(ch) < 0x100)),
                    Ty::Bool,
                ))
            }
            ("size", _) if self.deferred => {
                let s = size_local(f);
                Ok(Val::atom(quote!(#s), Ty::Int))
            }
            ("size", _) => Err(cx.unsupported(e.span, "`size(..)` outside a `write =` rule")),
            _ => Err(cx.unsupported(e.span, &format!("`{fname}` of the field `{}`", f.name()))),
        }
    }

    fn field(&self) -> String {
        self.layout.fields[self.at].name().to_string()
    }
}

fn text_local(f: &FieldM<'_>) -> RsIdent {
    format_ident!("__{}_text", f.ident.to_string().trim_start_matches("r#"))
}

fn size_local(f: &FieldM<'_>) -> RsIdent {
    format_ident!("__{}_size", f.ident.to_string().trim_start_matches("r#"))
}

fn spare_local(f: &FieldM<'_>) -> RsIdent {
    format_ident!("__{}_spare", f.ident.to_string().trim_start_matches("r#"))
}

fn at_local(f: &FieldM<'_>) -> RsIdent {
    format_ident!("__{}_at", f.ident.to_string().trim_start_matches("r#"))
}

/// The rule of each field on write.
fn rules<'s>(cx: &Cx<'_>, l: &LayoutM<'s>) -> GResult<Vec<Rule<'s>>> {
    let mut rules = Vec::new();
    for (i, f) in l.fields.iter().enumerate() {
        let rule = match &f.kind {
            Kind::Num(p) | Kind::Cond { wide: p, .. } if p.unsigned() => {
                if let Some(w) = f.write {
                    if expr::calls(w, "size") {
                        Rule::Deferred(w)
                    } else {
                        Rule::Eager(w)
                    }
                } else if let Some(v) = f.checks.iter().find_map(|c| implied_const(f, c)) {
                    Rule::Const(v)
                } else if let Some(j) = l.fields.iter().position(|g| sized_by(g, f.name())) {
                    if j <= i {
                        return Err(cx.err(f.ast.span, "a size must come before what it sizes"));
                    }
                    Rule::SizeOf(j)
                } else {
                    Rule::Param
                }
            }
            _ => Rule::Param,
        };
        rules.push(rule);
    }
    Ok(rules)
}

/// `N` when `check` is `field == N`.
fn implied_const(f: &FieldM<'_>, check: &Expr) -> Option<u64> {
    if let ExprKind::Binary {
        op: BinaryOp::Eq,
        lhs,
        rhs,
    } = &check.kind
    {
        if let (ExprKind::Path(p), ExprKind::Int(v)) = (&lhs.kind, &rhs.kind) {
            if p.len() == 1 && p[0].name == f.name() {
                return u64::try_from(*v).ok();
            }
        }
    }
    None
}

/// True when `g`'s size is the field `name`.
fn sized_by(g: &FieldM<'_>, name: &str) -> bool {
    let size = match &g.kind {
        Kind::Bytes { size } | Kind::Dict { size, .. } | Kind::Payload { size: Some(size) } => size,
        _ => return false,
    };
    matches!(&size.kind, ExprKind::Path(p) if p.len() == 1 && p[0].name == name)
}

/// `Self::write`.
fn gen_write(cx: &mut Cx<'_>, _fmt: &Fmt<'_>, l: &LayoutM<'_>) -> GResult<TokenStream> {
    let rules = rules(cx, l)?;
    let mut params = Vec::new();
    let mut param_docs = Vec::new();
    let mut texts = Vec::new();
    let mut eager = Vec::new();
    let mut place = Vec::new();
    let mut patch = Vec::new();
    let mut payload = None;
    // Sizes that rules use.
    let mut sized: Vec<String> = Vec::new();
    for r in &rules {
        if let Rule::Deferred(e) = r {
            collect_size_args(e, &mut sized);
        }
    }
    for (j, r) in rules.iter().enumerate() {
        if let Rule::SizeOf(k) = r {
            let _ = j;
            sized.push(l.fields[*k].name().to_string());
        }
    }

    for (i, f) in l.fields.iter().enumerate() {
        let name = f.name();
        let id = &f.ident;
        let scope = WriteScope {
            layout: l,
            rules: &rules,
            at: i,
            deferred: false,
            in_text: false,
        };
        match (&f.kind, &rules[i]) {
            (Kind::Magic(b), _) => {
                let b = byte_lit(&b.value);
                place.push(quote!(buf.put_bytes(#b);));
            }
            (Kind::Num(p) | Kind::Cond { wide: p, .. }, Rule::Param) => {
                let t = p.ty();
                params.push(quote!(#id: #t));
                param_docs.push(format!("`{name}`"));
            }
            (Kind::Num(_) | Kind::Cond { .. }, Rule::Eager(e)) => {
                let v = expr::int(cx, &scope, e)?.ts;
                eager.push(quote!(let #id: u64 = #v;));
            }
            (Kind::Num(p), Rule::Const(v)) => {
                if !fits(*p, *v) {
                    return Err(cx.err(f.ast.span, format!("{v} does not fit in {}", p.name)));
                }
            }
            (
                Kind::Cond {
                    then, otherwise, ..
                },
                Rule::Const(v),
            ) => {
                if !fits(*then, *v) || !fits(*otherwise, *v) {
                    return Err(cx.err(
                        f.ast.span,
                        format!("{v} does not fit in every width of `{name}`"),
                    ));
                }
            }
            (Kind::Num(_) | Kind::Cond { .. }, _) => {}
            (Kind::Bytes { .. }, _) => {
                params.push(quote!(#id: &[u8]));
                param_docs.push(format!("`{name}`"));
            }
            (Kind::Dict { dict, spare, .. }, _) => {
                let d = rs_ident(&dict.name.name);
                let t = text_local(f);
                params.push(quote!(#id: &#d));
                param_docs.push(format!("`{name}`"));
                match spare {
                    None => {
                        texts.push(quote!(let #t = rt::pydict::encode_numpy_dict(&#id.to_py());))
                    }
                    Some(e) => {
                        // The spare spaces are part of the text: `len(..)` and `latin1(..)`
                        // see them, as NumPy's header length does.
                        let scope = WriteScope {
                            in_text: true,
                            ..scope
                        };
                        let v = expr::int(cx, &scope, e)?.ts;
                        let n = spare_local(f);
                        cx.needs_overflow = true;
                        let what = format!("the `spare` of {name} is over u32::MAX");
                        texts.push(quote! {
                            let mut #t = rt::pydict::encode_numpy_dict(&#id.to_py());
                            let #n: u64 = #v;
                            let #n = u32::try_from(#n)
                                .ok()
                                .and_then(|n| usize::try_from(n).ok())
                                .ok_or_else(|| overflow(#name, #what))?;
                            #t.push_str(&" ".repeat(#n));
                        });
                    }
                }
            }
            (Kind::Payload { .. }, _) => {
                let len = format_ident!("{}_len", id.to_string().trim_start_matches("r#"));
                params.push(quote!(#id: rt::Payload<'_>));
                params.push(quote!(#len: u64));
                param_docs.push(format!("`{len}` bytes of `{name}`"));
                payload = Some((id.clone(), len, name.to_string()));
            }
        }
        // Checks, once the value is known (not for constants they imply).
        if matches!(rules[i], Rule::Eager(_) | Rule::Param)
            && matches!(f.kind, Kind::Num(_) | Kind::Cond { .. })
        {
            for check in &f.checks {
                let p = match &f.kind {
                    Kind::Num(p) | Kind::Cond { wide: p, .. } => *p,
                    _ => unreachable!(),
                };
                if !p.unsigned() {
                    return Err(cx.unsupported(check.span, "`check` on a signed or float field"));
                }
                eager.push(write_check(cx, &scope, f, check)?);
            }
        }

        // Placement.
        match &f.kind {
            Kind::Num(p) => match &rules[i] {
                Rule::Deferred(_) | Rule::SizeOf(_) => {
                    let at = at_local(f);
                    let w = Literal::usize_unsuffixed(p.bytes as usize);
                    place.push(quote!(let #at = buf.reserve(#name, #w);));
                }
                Rule::Param => {
                    let m = p.method("put_", l.big);
                    place.push(quote!(buf.#m(#id);));
                }
                _ => {
                    let m = p.method("put_", l.big);
                    let narrow = narrow(cx, &rules[i], *p, id);
                    place.push(quote!(buf.#m(#narrow);));
                }
            },
            Kind::Cond {
                cond,
                then,
                otherwise,
                wide,
            } => {
                let c = expr::cond(cx, &scope, cond, false)?.ts;
                match &rules[i] {
                    Rule::Deferred(_) | Rule::SizeOf(_) => {
                        let at = at_local(f);
                        let (tw, ow) = (
                            Literal::usize_unsuffixed(then.bytes as usize),
                            Literal::usize_unsuffixed(otherwise.bytes as usize),
                        );
                        place.push(quote! {
                            let #at = if #c {
                                buf.reserve(#name, #tw)
                            } else {
                                buf.reserve(#name, #ow)
                            };
                        });
                    }
                    rule => {
                        let mut put = |p: &Prim| {
                            let m = p.method("put_", l.big);
                            let v = if matches!(rule, Rule::Param) {
                                if p == wide {
                                    quote!(#id)
                                } else {
                                    // The wide value must fit the narrow branch.
                                    let t = p.ty();
                                    cx.needs_overflow = true;
                                    let what = format!("{name} does not fit in {}", p.name);
                                    quote!(#t::try_from(#id).map_err(|_| overflow(#name, #what))?)
                                }
                            } else {
                                narrow(cx, &rules[i], *p, id)
                            };
                            quote!(buf.#m(#v);)
                        };
                        let (t, o) = (put(then), put(otherwise));
                        place.push(quote!(if #c { #t } else { #o }));
                    }
                }
            }
            Kind::Bytes { .. } | Kind::Dict { .. } => {
                let start = format_ident!("__{}_start", id.to_string().trim_start_matches("r#"));
                let want_size = sized.iter().any(|s| s == name);
                if want_size {
                    place.push(quote!(let #start = buf.pos();));
                }
                match &f.kind {
                    Kind::Bytes { .. } => place.push(quote!(buf.put_bytes(#id);)),
                    Kind::Dict { encoding, .. } => {
                        let t = text_local(f);
                        let field_name = name.to_string();
                        let enc = by_encoding(cx, &scope, *encoding, &|enc| match enc {
                            Encoding::Utf8 => quote!(buf.put_bytes(#t.as_bytes());),
                            Encoding::Latin1 => quote! {
                                for ch in #t.chars() {
                                    let b = u8::try_from(u32::from(ch)).map_err(|_| {
                                        rt::Error::from(rt::ErrorKind::Invalid(format!(
                                            "{ch:?} cannot be written in Latin-1"
                                        )))
                                        .in_field(#field_name)
                                    })?;
                                    buf.put_u8(b);
                                }
                            },
                        })?;
                        place.push(enc);
                    }
                    _ => unreachable!(),
                }
                if let Some(pad) = &f.pad {
                    let align = Literal::u64_unsuffixed(pad.align);
                    let fill = byte_char(pad.fill);
                    let last = match pad.last {
                        Some(b) => {
                            let b = byte_char(b);
                            quote!(Some(#b))
                        }
                        None => quote!(None),
                    };
                    if pad.min == 0 {
                        place.push(quote!(buf.pad_to(#align, #fill, #last);));
                    } else {
                        let min = Literal::u64_unsuffixed(pad.min);
                        place.push(quote!(buf.pad_to_min(#align, #fill, #last, #min);));
                    }
                }
                if want_size {
                    let s = size_local(f);
                    place.push(quote!(let #s = buf.pos() - #start;));
                }
            }
            Kind::Magic(_) | Kind::Payload { .. } => {}
        }
    }

    // Values known once laid out, back-patched.
    for (i, f) in l.fields.iter().enumerate() {
        let (expr_ts, p) = match (&rules[i], &f.kind) {
            (Rule::Deferred(e), Kind::Num(p) | Kind::Cond { wide: p, .. }) => {
                let scope = WriteScope {
                    layout: l,
                    rules: &rules,
                    at: i,
                    deferred: true,
                    in_text: false,
                };
                (expr::int(cx, &scope, e)?.ts, *p)
            }
            (Rule::SizeOf(k), Kind::Num(p) | Kind::Cond { wide: p, .. }) => {
                let g = &l.fields[*k];
                let ts = match &g.kind {
                    Kind::Payload { .. } => {
                        let len =
                            format_ident!("{}_len", g.ident.to_string().trim_start_matches("r#"));
                        quote!(#len)
                    }
                    _ => {
                        let s = size_local(g);
                        quote!(#s)
                    }
                };
                (ts, *p)
            }
            _ => continue,
        };
        let id = &f.ident;
        let at = at_local(f);
        patch.push(quote!(let #id: u64 = #expr_ts;));
        let scope = WriteScope {
            layout: l,
            rules: &rules,
            at: i,
            deferred: true,
            in_text: false,
        };
        for check in &f.checks {
            patch.push(write_check(cx, &scope, f, check)?);
        }
        let patch_with = |p: &Prim| {
            let m = p.method("patch_", l.big);
            quote!(buf.#m(#at, #id)?;)
        };
        match &f.kind {
            Kind::Cond {
                cond,
                then,
                otherwise,
                ..
            } => {
                let c = expr::cond(cx, &scope, cond, false)?.ts;
                let (t, o) = (patch_with(then), patch_with(otherwise));
                patch.push(quote!(if #c { #t } else { #o }));
            }
            _ => patch.push(patch_with(&p)),
        }
    }

    let mut doc = format!(" Writes a `{}`", l.ast.name.name);
    if !param_docs.is_empty() {
        doc.push_str(" of ");
        doc.push_str(&param_docs.join(", "));
    }
    doc.push_str(", computing every other field; returns the number of bytes written.");
    let finish = match &payload {
        Some((id, len, name)) => quote! {
            let __prefix = buf.into_vec();
            w.write_all(&__prefix)?;
            #id.write_to(w, #len, #name)?;
            Ok(__prefix.len() as u64 + #len)
        },
        None => quote! {
            let __prefix = buf.into_vec();
            w.write_all(&__prefix)?;
            Ok(__prefix.len() as u64)
        },
    };
    Ok(quote! {
        #[doc = #doc]
        pub fn write<W: ::std::io::Write + ?Sized>(w: &mut W, #(#params),*) -> rt::Result<u64> {
            #(#texts)*
            #(#eager)*
            let mut buf = rt::LayoutBuf::new(0);
            #(#place)*
            #(#patch)*
            #finish
        }
    })
}

/// A `u64` computed value narrowed to the field's type.
fn narrow(cx: &mut Cx<'_>, rule: &Rule<'_>, p: Prim, id: &RsIdent) -> TokenStream {
    if let Rule::Const(v) = rule {
        let v = Literal::u64_unsuffixed(*v);
        return quote!(#v);
    }
    if p.name == "u64" {
        return quote!(#id);
    }
    cx.needs_overflow = true;
    let t = p.ty();
    let name = id.to_string();
    let what = format!("{name} does not fit in {}", p.name);
    quote!(#t::try_from(#id).map_err(|_| overflow(#name, #what))?)
}

/// True when `v` fits the unsigned type `p`.
fn fits(p: Prim, v: u64) -> bool {
    p.bytes >= 8 || v < (1u64 << (8 * p.bytes as u32))
}

/// A check evaluated on write.
fn write_check(
    cx: &mut Cx<'_>,
    scope: &WriteScope<'_, '_>,
    f: &FieldM<'_>,
    check: &Expr,
) -> GResult<TokenStream> {
    let failed = expr::cond(cx, scope, check, true)?;
    let failed = failed.ts;
    let name = f.name();
    let id = &f.ident;
    let text = cx.text(check.span);
    let fmt = format!("check `{text}` failed: {name} would be {{}}");
    Ok(quote! {
        if #failed {
            return Err(rt::Error::from(rt::ErrorKind::Invalid(format!(#fmt, #id))).in_field(#name));
        }
    })
}

fn collect_size_args(e: &Expr, out: &mut Vec<String>) {
    match &e.kind {
        ExprKind::Call { callee, args } => {
            if callee.len() == 1 && callee[0].name == "size" {
                for a in args {
                    if let ExprKind::Path(p) = &a.value.kind {
                        out.push(p[0].name.clone());
                    }
                }
            }
            for a in args {
                collect_size_args(&a.value, out);
            }
        }
        ExprKind::Unary { expr, .. } => collect_size_args(expr, out),
        ExprKind::Binary { lhs, rhs, .. } => {
            collect_size_args(lhs, out);
            collect_size_args(rhs, out);
        }
        ExprKind::If {
            cond,
            then,
            otherwise,
        } => {
            collect_size_args(cond, out);
            collect_size_args(then, out);
            collect_size_args(otherwise, out);
        }
        ExprKind::In { expr, list } => {
            collect_size_args(expr, out);
            list.iter().for_each(|x| collect_size_args(x, out));
        }
        _ => {}
    }
}

/// `b' '` for printable ASCII and newline, `0x00u8` otherwise.
fn byte_char(b: u8) -> TokenStream {
    let l = if b.is_ascii_graphic() || b == b' ' || b == b'\n' {
        Literal::byte_character(b)
    } else {
        Literal::u8_suffixed(b)
    };
    quote!(#l)
}

/// The (single) dict field of a layout, if any.
pub(crate) fn dict_fields<'a, 's>(l: &'a LayoutM<'s>) -> Vec<&'a FieldM<'s>> {
    l.fields
        .iter()
        .filter(|f| matches!(f.kind, Kind::Dict { .. }))
        .collect()
}

/// True when the layout's writer takes other parameters than its dicts and payload.
pub(crate) fn writer_params_beyond_dicts(l: &LayoutM<'_>, cx: &Cx<'_>) -> GResult<bool> {
    let rules = rules(cx, l)?;
    Ok(l.fields.iter().zip(&rules).any(|(f, r)| {
        matches!(
            (&f.kind, r),
            (Kind::Num(_) | Kind::Cond { .. }, Rule::Param) | (Kind::Bytes { .. }, _)
        )
    }))
}
