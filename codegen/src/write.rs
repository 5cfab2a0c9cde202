//! Layout writers, from the IR and its write plan (`ir::plan`): each layout's `write`
//! (and `put`, for layouts nested in others) lays out the fields in order into a
//! `rt::LayoutBuf`: codec texts encoded first (with their `spare` spaces), values known
//! before layout computed next, each in the order its rule needs, then every field —
//! magic, computed numbers (conditional widths; a slot reserved for a value known only
//! once a later field is laid out, patched then), given bytes, text, codec records and
//! nested layouts, repeated fields item by item (a given list, or the list a `write`
//! rule gives), `at`, `align` and `pad` — and the `check`s once the values they read are
//! known. A count or size given apart from the value written (a constant, another list's
//! length) is checked against it (`check_count`, `check_size`), as the reader trusts it. The payload, the last field, is
//! streamed after the bytes before it.

use proc_macro2::{Ident, Literal, TokenStream};
use quote::{format_ident, quote};
use tensorfmt_schema::ir::plan::{self, WritePlan};
use tensorfmt_schema::ir::{
    self, Builtin, ByteOrder, Codec, Const, ExprKind, FieldKind, Ir, LayoutId, Type,
};

use crate::lower::{storage_ty, Env, Form, Lower, Unlowered, Val};
use crate::model::rs_ident;

type R<T> = Result<T, Unlowered>;

/// A local of the writer: `<field>_<what>` (`__<field>_<what>` where a field has that
/// name).
pub(crate) fn local(l: &ir::Layout, f: &ir::Field, what: &str) -> Ident {
    let name = format!("{}_{what}", f.name);
    if l.fields.iter().any(|g| g.name == name) {
        format_ident!("__{name}")
    } else {
        format_ident!("{name}")
    }
}

/// Names in reach while a layout is written.
struct WriteEnv<'a> {
    ir: &'a Ir,
    layout: LayoutId,
    plan: &'a WritePlan,
    /// Computed fields whose value is bound.
    known: Vec<bool>,
    /// Codec texts are encoded.
    texts: bool,
    /// The writer takes the alignment the save asks for (`write_align`).
    write_align: bool,
}

impl Env for WriteEnv<'_> {
    fn field(&self, l: LayoutId, f: ir::FieldId) -> Option<Val> {
        if l != self.layout {
            return None;
        }
        let i = f.index();
        let field = self.ir.field(l, f);
        let id = rs_ident(&field.name);
        if !self.plan.computed[i] {
            return Some(match (&field.kind, &field.ty) {
                (FieldKind::Magic(b), _) => {
                    let b = Literal::byte_string(b);
                    Val::value(quote!(#b.as_slice()), Type::Bytes)
                }
                (_, Type::Payload) => {
                    let len = local(self.ir.layout(self.layout), field, "len");
                    Val::value(quote!((0, #len)), Type::Payload)
                }
                (_, Type::Bytes | Type::Str | Type::Bool) => {
                    Val::value(quote!(#id), field.ty.clone())
                }
                // Numbers are given by value (in their storage type).
                (_, ty @ (Type::Int(_) | Type::Float(_))) => Val::place(quote!(#id), ty.clone()),
                (_, ty) => Val::reference(quote!(#id), ty.clone()),
            });
        }
        if let (None, Some(c)) = (&field.write, &field.implied) {
            return Some(Val::value(const_ts(c), field.ty.clone()));
        }
        if !self.known[i] {
            return None;
        }
        let w = field.write.as_ref()?;
        Some(match w.ty {
            Type::List(_) | Type::Tuple(_) => Val::reference(quote!(#id), w.ty.clone()),
            _ => Val::value(quote!(#id), w.ty.clone()),
        })
    }

    fn builtin(&self, func: Builtin, args: &[ir::Arg]) -> Option<Val> {
        let ExprKind::Field(l, g) = args.first()?.value.kind else {
            return None;
        };
        let f = self.ir.field(l, g);
        let coded = matches!(f.codec, Some(Codec::PyDict { .. } | Codec::Json { .. }))
            && f.repeat.is_none();
        Some(match func {
            Builtin::Len | Builtin::Size if f.ty == Type::Payload => {
                let len = local(self.ir.layout(l), f, "len");
                Val::value(quote!(i128::from(#len)), Type::INT)
            }
            Builtin::Len if coded && self.texts => {
                let t = local(self.ir.layout(l), f, "text");
                Val::value(quote!(rt::expr::len(#t.as_bytes())), Type::INT)
            }
            Builtin::Latin1 if coded && self.texts => {
                let t = local(self.ir.layout(l), f, "text");
                Val::value(quote!(rt::expr::latin1(&#t)), Type::Bool)
            }
            Builtin::Size => Val::value(
                local(self.ir.layout(l), f, "size").into_token_stream(),
                Type::INT,
            ),
            _ => return None,
        })
    }

    fn write_align(&self) -> Option<TokenStream> {
        self.write_align.then(|| quote!(write_align))
    }
}

trait IntoTs {
    fn into_token_stream(self) -> TokenStream;
}

impl IntoTs for Ident {
    fn into_token_stream(self) -> TokenStream {
        quote!(#self)
    }
}

fn const_ts(c: &Const) -> TokenStream {
    match c {
        Const::Int(v) => {
            let l = Literal::i128_unsuffixed(*v);
            if *v < 0 {
                quote!((#l))
            } else {
                quote!(#l)
            }
        }
        Const::Str(s) => quote!(#s),
        Const::Bool(b) => quote!(#b),
        _ => quote!(0),
    }
}

/// The Rust parameter type of a given field.
fn param_ty(ir: &Ir, f: &ir::Field) -> Option<TokenStream> {
    let item = match &f.item_ty {
        Type::Bytes if f.repeat.is_none() => return Some(quote!(&[u8])),
        Type::Str if f.repeat.is_none() => return Some(quote!(&str)),
        Type::Bool if f.repeat.is_none() => return Some(quote!(bool)),
        Type::Payload => return Some(quote!(u64)),
        // Numbers by value, as the mapping's inverse computes them.
        t @ (Type::Int(_) | Type::Float(_)) if f.repeat.is_none() => return storage_ty(ir, t),
        t => storage_ty(ir, t)?,
    };
    Some(if f.repeat.is_some() {
        quote!(&[#item])
    } else {
        quote!(&#item)
    })
}

/// The given fields of layout `l` with their plan (payload last, as a length).
fn given(ir: &Ir, l: LayoutId, p: &WritePlan) -> Vec<usize> {
    let layout = ir.layout(l);
    (0..layout.fields.len())
        .filter(|&i| !p.computed[i] && !matches!(layout.fields[i].kind, FieldKind::Magic(_)))
        .collect()
}

/// The arguments of `Inner::put` for a nested record `v`: its given fields.
pub(crate) fn nested_args(ir: &Ir, inner: LayoutId, v: &TokenStream) -> Vec<TokenStream> {
    let p = plan_of(ir, inner);
    given(ir, inner, &p)
        .into_iter()
        .map(|i| {
            let f = &ir.layout(inner).fields[i];
            let id = rs_ident(&f.name);
            match (&f.item_ty, &f.repeat) {
                // Numbers by value, as `param_ty` takes them.
                (Type::Bool | Type::Int(_) | Type::Float(_), None) => quote!(#v.#id),
                (Type::Payload, _) => quote!(#v.#id.1),
                _ => quote!(&#v.#id),
            }
        })
        .collect()
}

/// The plan of a layout of a checked schema (which lowering has verified).
pub(crate) fn plan_of(ir: &Ir, l: LayoutId) -> WritePlan {
    plan::write_plan(ir, l).unwrap_or_else(|_| {
        unreachable!(
            "lowering checks the write plan of every layout written (ir::lower write_plans)"
        )
    })
}

/// True when layout `l` is a field of another layout, or a case of a `match`.
fn nested(ir: &Ir, l: LayoutId) -> bool {
    ir.layouts.iter().any(|x| {
        x.fields.iter().any(|f| {
            f.item_ty == Type::Layout(l)
                || matches!(&f.kind, FieldKind::Match { cases, .. }
                    if cases.iter().any(|c| c.ty == Type::Layout(l)))
        })
    })
}

/// `impl L { put, write }` of one layout. `src` is the text of the file that declares
/// it (for the checks' messages).
pub(crate) fn gen_writer(ir: &Ir, id: LayoutId, src: &str) -> R<TokenStream> {
    let l = ir.layout(id);
    let p = plan_of(ir, id);
    let ident = rs_ident(&l.name);
    let mut params = Vec::new();
    let mut args = Vec::new();
    let mut payload = None;
    for i in given(ir, id, &p) {
        let f = &l.fields[i];
        let t = param_ty(ir, f)
            .expect("the checker's rule layout_fields: a layout's fields have a storage type");
        if f.ty == Type::Payload {
            let (data, len) = (rs_ident(&f.name), local(l, f, "len"));
            params.push(quote!(#len: #t));
            args.push(quote!(#len));
            payload = Some((data, len, f.name.clone()));
        } else {
            // A nested record of constants is passed for symmetry with its readers, and
            // not looked at.
            let constants = match &f.ty {
                Type::Layout(inner) => given(ir, *inner, &plan_of(ir, *inner)).is_empty(),
                _ => false,
            };
            let id = if constants {
                format_ident!("_{}", f.name)
            } else {
                rs_ident(&f.name)
            };
            params.push(quote!(#id: #t));
            args.push(quote!(#id));
        }
    }
    let body = put_body(ir, id, &p, src)?;
    let mut docs: Vec<String> = given(ir, id, &p)
        .into_iter()
        .map(|i| format!("`{}`", l.fields[i].name))
        .collect();
    if let Some((_, len, _)) = &payload {
        docs.pop();
        docs.push(format!("`{len}` bytes of payload"));
    }
    let aligned = ir.layout_reads_write_align(id);
    if aligned {
        docs.push("`write_align`, the alignment the save asks for".to_string());
    }
    let of = if docs.is_empty() {
        String::new()
    } else {
        format!(" of {}", docs.join(", "))
    };
    let wdoc = format!(
        " Writes a `{}`{of}, computing every other field; returns the number of bytes written.",
        l.name
    );
    let (mut wparams, finish) = match &payload {
        Some((data, len, name)) => {
            let mut w = params.clone();
            w.insert(w.len() - 1, quote!(#data: rt::Payload<'_>));
            (
                w,
                quote! {
                    #data.write_to(w, #len, #name)?;
                    Ok(prefix.len() as u64 + #len)
                },
            )
        }
        None => (params.clone(), quote!(Ok(prefix.len() as u64))),
    };
    wparams.insert(0, quote!(w: &mut W));
    // The alignment the save asks for, last (`write_align(..)`).
    if aligned {
        for ps in [&mut params, &mut wparams] {
            ps.push(quote!(write_align: Option<u64>));
        }
        args.push(quote!(write_align));
    }
    let (put, fill) = if nested(ir, id) {
        let pdoc = format!(" Lays out a `{}`{of} into `buf`, computing every other field (the payload's bytes excepted).", l.name);
        (
            quote! {
                #[doc = #pdoc]
                pub fn put(buf: &mut rt::LayoutBuf, #(#params),*) -> rt::Result<()> {
                    #body
                    Ok(())
                }
            },
            quote!(#ident::put(buf, #(#args),*)?;),
        )
    } else {
        (quote!(), body)
    };
    Ok(quote! {
        impl #ident {
            #put
            #[doc = #wdoc]
            pub fn write<W: ::std::io::Write + ?Sized>(#(#wparams),*) -> rt::Result<u64> {
                let mut out = rt::LayoutBuf::new(0);
                let buf = &mut out;
                #fill
                let prefix = out.into_vec();
                w.write_all(&prefix)?;
                #finish
            }
        }
    })
}

/// The statements laying out a layout into `buf`.
fn put_body(ir: &Ir, id: LayoutId, p: &WritePlan, src: &str) -> R<TokenStream> {
    let l = ir.layout(id);
    let mut env = WriteEnv {
        ir,
        layout: id,
        plan: p,
        known: vec![false; l.fields.len()],
        texts: false,
        write_align: ir.layout_reads_write_align(id),
    };
    let mut out = Vec::new();
    // What is measured, and whether positions are relative to the layout's start.
    let mut sized = vec![false; l.fields.len()];
    let mut positioned = false;
    for f in &l.fields {
        positioned |= f.at.is_some() || f.align.is_some() || f.pad.is_some();
        let mut exprs: Vec<&ir::Expr> = f.checks.iter().chain(f.write.iter()).collect();
        exprs.extend(f.at.iter().chain(f.align.iter()));
        if let FieldKind::Cond { cond, .. } = &f.kind {
            exprs.push(cond);
        }
        for e in exprs {
            e.walk(&mut |x| {
                if let ExprKind::Call {
                    func: Builtin::Size,
                    args,
                } = &x.kind
                {
                    if let Some(ExprKind::Field(fl, g)) = args.first().map(|a| &a.value.kind) {
                        if *fl == id {
                            sized[g.index()] = true;
                        }
                    }
                }
            });
        }
    }
    if positioned {
        out.push(quote!(let start = buf.pos();));
    }
    // Codec texts, with their spare spaces.
    for (i, f) in l.fields.iter().enumerate() {
        if f.repeat.is_some() || p.computed[i] {
            continue;
        }
        let t = local(l, f, "text");
        let v = rs_ident(&f.name);
        let name = &f.name;
        match &f.codec {
            Some(Codec::PyDict {
                spare,
                trailing_comma,
                ..
            }) => {
                let enc = quote!(rt::pydict::literal(#v, #trailing_comma));
                match spare {
                    Some(s) => {
                        let n = Lower { ir, env: &env }.expr(s)?.scalar();
                        out.push(quote! {
                            let mut #t = #enc;
                            rt::expr::push_spaces(&mut #t, #n).map_err(|e| e.in_field(#name))?;
                        });
                    }
                    None => out.push(quote!(let #t = #enc;)),
                }
            }
            Some(Codec::Json { .. }) => {
                out.push(quote! {
                    let #t = rt::pydict::json::encode_dict(#v).map_err(|e| e.in_field(#name))?;
                });
            }
            _ => {}
        }
    }
    env.texts = true;
    // Values known before layout, then their checks.
    for &i in &p.eager {
        compute(&mut env, i, &mut out, false)?;
    }
    checks_at(&env, None, src, &mut out)?;
    for (i, f) in l.fields.iter().enumerate() {
        let name = f.name.as_str();
        let lower = Lower { ir, env: &env };
        let int = |e: &ir::Expr| -> R<TokenStream> { Ok(lower.expr(e)?.scalar()) };
        if let Some(at) = &f.at {
            let at = int(at)?;
            out.push(quote!(buf.fill_to(#name, start, #at)?;));
        }
        if let Some(a) = &f.align {
            let a = int(a)?;
            out.push(quote!(buf.align_from(#name, start, #a)?;));
        }
        let measured = sized[i] && f.ty != Type::Payload;
        if measured {
            let s = local(l, f, "start");
            out.push(quote!(let #s = buf.pos();));
        }
        if let Some(check) = count_check(&env, i, f) {
            out.push(check);
        }
        out.push(place(&env, i, f, l.endian)?);
        if measured {
            let (s, n) = (local(l, f, "start"), local(l, f, "size"));
            out.push(quote!(let #n = i128::from(buf.pos() - #s);));
        }
        for &k in &p.after[i] {
            compute(&mut env, k, &mut out, true)?;
        }
        checks_at(&env, Some(i), src, &mut out)?;
    }
    Ok(quote!(#(#out)*))
}

/// Binds computed field `i` (and patches its slot when it was laid out before).
fn compute(env: &mut WriteEnv<'_>, i: usize, out: &mut Vec<TokenStream>, late: bool) -> R<()> {
    let l = env.ir.layout(env.layout);
    let f = &l.fields[i];
    env.known[i] = true;
    let Some(w) = &f.write else {
        return Ok(());
    };
    let id = rs_ident(&f.name);
    let lower = Lower {
        ir: env.ir,
        env: &*env,
    };
    match (&w.kind, &w.ty) {
        // A list literal is a borrowed array of its items (no vector for a constant list).
        (ExprKind::List(items), _) => {
            let items = items
                .iter()
                .map(|x| Ok(lower.expr(x)?.scalar()))
                .collect::<R<Vec<_>>>()?;
            out.push(quote!(let #id = &[#(#items),*];));
        }
        (_, Type::List(_) | Type::Tuple(_)) => {
            let v = lower.expr(w)?.by_ref();
            out.push(quote!(let #id = #v;));
        }
        _ => {
            let v = lower.expr(w)?;
            if v.ty == Type::Str && v.form == Form::Owned {
                // A text built by the rule (`str(n) + "d"`) is owned here, then read as a
                // `&str`.
                let ts = &v.ts;
                out.push(quote!(let #id = #ts; let #id = #id.as_str();));
            } else {
                let v = v.scalar();
                out.push(quote!(let #id = #v;));
            }
        }
    }
    if late && env.plan.ready[i].is_some_and(|k| k >= i) {
        let slot = local(l, f, "slot");
        let big = endian_of(f, l.endian) == ByteOrder::Big;
        let m = if big {
            quote!(patch_be)
        } else {
            quote!(patch_le)
        };
        out.push(quote!(buf.#m(#slot, #id)?;));
    }
    Ok(())
}

fn endian_of(f: &ir::Field, layout: ByteOrder) -> ByteOrder {
    match &f.item_ty {
        Type::Int(i) => i.endian.unwrap_or(layout),
        Type::Float(x) => x.endian.unwrap_or(layout),
        _ => layout,
    }
}

/// The checks that can run once `ready` is reached.
fn checks_at(
    env: &WriteEnv<'_>,
    ready: Option<usize>,
    src: &str,
    out: &mut Vec<TokenStream>,
) -> R<()> {
    let l = env.ir.layout(env.layout);
    for (i, f) in l.fields.iter().enumerate() {
        for &(c, r) in &env.plan.checks[i] {
            if r != ready {
                continue;
            }
            let e = &f.checks[c];
            let lower = Lower { ir: env.ir, env };
            let ok = lower.expr(e)?.scalar();
            let value = match env.field(env.layout, ir::FieldId(i as u32)) {
                Some(v) if matches!(v.ty, Type::Int(_) | Type::Float(_) | Type::Bool) => v.scalar(),
                Some(v) => {
                    let r = v.by_ref();
                    quote!(format_args!("{:?}", #r))
                }
                None => quote!("?"),
            };
            let name = &f.name;
            let text = src.get(e.span.start..e.span.end).unwrap_or("");
            out.push(quote!(rt::expr::check_on_write(#name, #ok, #text, #value)?;));
        }
    }
    Ok(())
}

/// The `LayoutBuf` method for a number: `int_u16_le`, `put_f32_be`.
pub(crate) fn num_method(prefix: &str, ty: &Type, e: ByteOrder) -> Ident {
    let (k, bytes) = match ty {
        Type::Int(i) => (if i.signed { "i" } else { "u" }, i.bytes.unwrap_or(8)),
        Type::Float(f) => ("f", f.bytes),
        _ => ("u", 1),
    };
    if bytes == 1 {
        format_ident!("{prefix}{k}8")
    } else {
        let s = if e == ByteOrder::Big { "be" } else { "le" };
        format_ident!("{prefix}{k}{}_{s}", bytes as u32 * 8)
    }
}

/// Laying out field `i`.
fn place(env: &WriteEnv<'_>, i: usize, f: &ir::Field, endian: ByteOrder) -> R<TokenStream> {
    let ir = env.ir;
    let name = f.name.as_str();
    let id = rs_ident(name);
    let e = endian_of(f, endian);
    if let FieldKind::Magic(b) = &f.kind {
        let b = Literal::byte_string(b);
        return Ok(quote!(buf.put_bytes(#b);));
    }
    let lower = Lower { ir, env };
    // One item laid out (the value itself when the field does not repeat).
    let one = |item: TokenStream| -> R<TokenStream> {
        // A number of a width chosen by a condition, given by the tensor mapping.
        if let FieldKind::Cond {
            cond,
            then,
            otherwise,
        } = &f.kind
        {
            let c = lower.expr(cond)?.scalar();
            let a = num_method("int_", &Type::Int(*then), then.endian.unwrap_or(endian));
            let b = num_method(
                "int_",
                &Type::Int(*otherwise),
                otherwise.endian.unwrap_or(endian),
            );
            return Ok(quote! {
                if #c {
                    buf.#a(#name, i128::from(#item))?;
                } else {
                    buf.#b(#name, i128::from(#item))?;
                }
            });
        }
        Ok(match (&f.item_ty, &f.codec) {
            (Type::Payload, _) => quote!(),
            (
                _,
                Some(Codec::PyDict {
                    encoding,
                    trailing_comma,
                    ..
                }),
            ) => {
                let enc = match encoding {
                    Some(x) => lower.expr(x)?.scalar(),
                    None => quote!("utf8"),
                };
                let pad = pad(&lower, f)?;
                if f.repeat.is_none() {
                    let t = local(env.ir.layout(env.layout), f, "text");
                    quote!(buf.put_text(#name, &#t, #enc)?; #pad)
                } else {
                    quote! {
                        let text = rt::pydict::literal(#item, #trailing_comma);
                        buf.put_text(#name, &text, #enc)?;
                        #pad
                    }
                }
            }
            (_, Some(Codec::Json { .. })) => {
                let pad = pad(&lower, f)?;
                if f.repeat.is_none() {
                    let t = local(env.ir.layout(env.layout), f, "text");
                    quote!(buf.put_text(#name, &#t, "utf8")?; #pad)
                } else {
                    quote! {
                        let text = rt::pydict::json::encode_dict(#item).map_err(|e| e.in_field(#name))?;
                        buf.put_text(#name, &text, "utf8")?;
                        #pad
                    }
                }
            }
            (Type::Layout(inner), None) => {
                let t = rs_ident(&ir.layout(*inner).name);
                let args = nested_args(ir, *inner, &item);
                quote!(#t::put(buf, #(#args),*).map_err(|e| e.in_field(#name))?;)
            }
            (Type::Union(..), None) => {
                let FieldKind::Match { tag, .. } = &f.kind else {
                    unreachable!("a union is the type of a `match` field");
                };
                let tag = lower.expr(tag)?.scalar();
                quote!(#item.put(buf, #tag).map_err(|e| e.in_field(#name))?;)
            }
            (Type::Bytes, None) => {
                let pad = pad(&lower, f)?;
                quote!(buf.put_bytes(#item); #pad)
            }
            (Type::Str, None) => {
                let pad = pad(&lower, f)?;
                quote!(buf.put_bytes(#item.as_bytes()); #pad)
            }
            (Type::Bool, None) => quote!(buf.put_u8(u8::from(#item));),
            // A number the tensor mapping gives (a dtype code, a dimension).
            (t @ (Type::Int(_) | Type::Float(_)), None) => {
                let m = num_method("put_", t, e);
                quote!(buf.#m(#item);)
            }
            _ => unreachable!(
                "the checker's rule layout_fields: a layout lays out numbers, text, bytes, \
                 payloads, layouts and dicts with a codec"
            ),
        })
    };
    // A field of a size given apart from its value fills it (each item, when it repeats).
    let size = given_size(env, i, f);
    let fill = |body: TokenStream| match &size {
        Some(n) => {
            let s = local(env.ir.layout(env.layout), f, "item_start");
            quote! {
                let #s = buf.pos();
                #body
                buf.check_size(#name, #s, #n)?;
            }
        }
        None => body,
    };
    if env.plan.computed[i] {
        let value = match env.field(env.layout, ir::FieldId(i as u32)) {
            Some(v) if env.plan.ready[i].is_none_or(|k| k < i) => v,
            _ => {
                // Known only later: a slot, patched then.
                let slot = local(env.ir.layout(env.layout), f, "slot");
                let width =
                    |t: &ir::IntTy| Literal::usize_unsuffixed(usize::from(t.bytes.unwrap_or(8)));
                return Ok(match &f.kind {
                    FieldKind::Cond {
                        cond,
                        then,
                        otherwise,
                    } => {
                        let c = lower.expr(cond)?.scalar();
                        let (a, b) = (width(then), width(otherwise));
                        quote! {
                            let #slot = if #c {
                                buf.reserve(#name, #a)
                            } else {
                                buf.reserve(#name, #b)
                            };
                        }
                    }
                    _ => {
                        let w = match &f.item_ty {
                            Type::Int(t) => width(t),
                            Type::Float(x) => Literal::usize_unsuffixed(usize::from(x.bytes)),
                            _ => Literal::usize_unsuffixed(8),
                        };
                        quote!(let #slot = buf.reserve(#name, #w);)
                    }
                });
            }
        };
        let repeated = !matches!(
            (&f.kind, &f.item_ty),
            (FieldKind::Value, Type::Int(_) | Type::Float(_))
        );
        if f.repeat.is_some() && repeated {
            // A list the write rule gives, laid out item by item.
            let list = value.by_ref();
            let item = match &f.item_ty {
                Type::Bool | Type::Int(_) => quote!(*item),
                _ => quote!(item),
            };
            let body = fill(one(item)?);
            return Ok(quote! {
                for item in #list.iter() {
                    #body
                }
            });
        }
        return Ok(fill(match (&f.kind, &f.item_ty) {
            (
                FieldKind::Cond {
                    cond,
                    then,
                    otherwise,
                },
                _,
            ) => {
                let c = lower.expr(cond)?.scalar();
                let v = value.scalar();
                let (a, b) = (
                    num_method("int_", &Type::Int(*then), then.endian.unwrap_or(endian)),
                    num_method(
                        "int_",
                        &Type::Int(*otherwise),
                        otherwise.endian.unwrap_or(endian),
                    ),
                );
                quote! {
                    if #c {
                        buf.#a(#name, #v)?;
                    } else {
                        buf.#b(#name, #v)?;
                    }
                }
            }
            (_, t @ Type::Float(_)) => {
                let m = num_method("put_", t, e);
                let v = value.scalar();
                if f.repeat.is_some() {
                    let list = value.by_ref();
                    quote!(for &x in #list.iter() { buf.#m(x as _); })
                } else {
                    quote!(buf.#m(#v as _);)
                }
            }
            (_, t @ Type::Int(_)) => {
                let m = num_method("int_", t, e);
                if f.repeat.is_some() {
                    let list = value.by_ref();
                    quote! {
                        for &x in #list.iter() {
                            buf.#m(#name, i128::from(x))?;
                        }
                    }
                } else if let (Some(Const::Int(c)), None) = (&f.implied, &f.write) {
                    // A constant that fits is written as such.
                    let m = num_method("put_", t, e);
                    let fits = match t {
                        Type::Int(x) => {
                            let bits = 8 * u32::from(x.bytes.unwrap_or(8));
                            if x.signed {
                                *c >= -(1i128 << (bits - 1)) && *c < (1i128 << (bits - 1))
                            } else {
                                *c >= 0 && *c < (1i128 << bits)
                            }
                        }
                        _ => false,
                    };
                    if fits {
                        let lit = Literal::i128_unsuffixed(*c);
                        let lit = if *c < 0 { quote!((#lit)) } else { quote!(#lit) };
                        quote!(buf.#m(#lit);)
                    } else {
                        let m = num_method("int_", t, e);
                        let v = value.scalar();
                        quote!(buf.#m(#name, #v)?;)
                    }
                } else {
                    let v = value.scalar();
                    quote!(buf.#m(#name, #v)?;)
                }
            }
            (_, Type::Str) => {
                let v = value.scalar();
                quote!(buf.put_bytes(#v.as_bytes());)
            }
            (_, Type::Bool) => {
                let v = value.scalar();
                quote!(buf.put_u8(u8::from(#v));)
            }
            _ => {
                let v = value.scalar();
                quote!(buf.put_bytes(#v);)
            }
        }));
    }
    Ok(if f.repeat.is_some() {
        let item = match &f.item_ty {
            Type::Bool | Type::Int(_) | Type::Float(_) => quote!(*item),
            _ => quote!(item),
        };
        let body = fill(one(item)?);
        quote! {
            for item in #id {
                #body
            }
        }
    } else {
        fill(one(quote!(#id))?)
    })
}

/// True when `e` reads field `i` of layout `l`, itself or through the write rules of the
/// fields it reads (`name_len: u16 write = len(name);`).
fn derived(ir: &Ir, l: LayoutId, e: &ir::Expr, i: usize, seen: &mut Vec<usize>) -> bool {
    let mut fields = Vec::new();
    e.walk(&mut |x| {
        if let ExprKind::Field(fl, g) = &x.kind {
            if *fl == l {
                fields.push(g.index());
            }
        }
    });
    fields.into_iter().any(|g| {
        if g == i {
            return true;
        }
        if seen.contains(&g) {
            return false;
        }
        seen.push(g);
        ir.layout(l).fields[g]
            .write
            .as_ref()
            .is_some_and(|w| derived(ir, l, w, i, seen))
    })
}

/// The size field `i` (text, bytes, a codec's text or a nested layout) must fill when
/// written: its `size`, where that is given apart from its value (a constant, a given number, a number computed from neither) and known when
/// the field is laid out. A size computed from the field itself (`len(name)`,
/// `size(header)`) holds by construction.
fn given_size(env: &WriteEnv<'_>, i: usize, f: &ir::Field) -> Option<TokenStream> {
    let size = f.size.as_ref()?;
    if !matches!(
        f.item_ty,
        Type::Bytes | Type::Str | Type::Dict(_) | Type::Layout(_)
    ) || derived(env.ir, env.layout, size, i, &mut Vec::new())
    {
        return None;
    }
    let lower = Lower { ir: env.ir, env };
    lower.expr(size).ok().map(|v| v.scalar())
}

/// A repeated field of a count given apart from its items (a constant, another list's
/// length) has that many: `buf.check_count(..)` before its items are laid out. A count
/// computed from the field itself (`n: u32 write = len(dims);`) holds by construction.
fn count_check(env: &WriteEnv<'_>, i: usize, f: &ir::Field) -> Option<TokenStream> {
    let Some(ir::Repeat::Count(n)) = &f.repeat else {
        return None;
    };
    if derived(env.ir, env.layout, n, i, &mut Vec::new()) {
        return None;
    }
    let list = env.field(env.layout, ir::FieldId(i as u32))?.by_ref();
    let n = Lower { ir: env.ir, env }.expr(n).ok()?.scalar();
    let name = &f.name;
    Some(quote!(buf.check_count(#name, #list.len(), #n)?;))
}

/// `pad(..)` after a field's bytes.
fn pad(lower: &Lower<'_>, f: &ir::Field) -> R<TokenStream> {
    let Some(p) = &f.pad else {
        return Ok(quote!());
    };
    let lit_or = |e: &ir::Expr, what: &str| -> R<TokenStream> {
        Ok(match &e.kind {
            ExprKind::Const(Const::Int(v)) if *v >= 0 && *v <= i128::from(u32::MAX) => {
                let l = Literal::u64_unsuffixed(*v as u64);
                quote!(#l)
            }
            _ => {
                let v = lower.expr(e)?.scalar();
                quote!(rt::expr::to_u64(#v, #what)?)
            }
        })
    };
    let align = lit_or(&p.align, "the padding's alignment")?;
    let fill = byte_char(p.fill);
    let last = match p.last {
        Some(b) => {
            let b = byte_char(b);
            quote!(Some(#b))
        }
        None => quote!(None),
    };
    let min = match &p.min {
        Some(m) => lit_or(m, "the padding's minimum")?,
        None => quote!(0),
    };
    Ok(quote!(buf.pad_from(start, #align, #fill, #last, #min);))
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
