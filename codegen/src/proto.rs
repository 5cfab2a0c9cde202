//! The `protobuf` engine: the whole source is one protobuf message
//! (`engine protobuf(root = ModelProto);`). Every declared message becomes a view type
//! implementing `rt::protobuf::View`: one `match` arm per declared field that decodes it
//! in place (scalars decoded, strings borrowed, `bytes` fields located, embedded
//! messages read recursively with the depth checked by `rt::protobuf::read`); repeated
//! scalars are left where they are for the mapping to read (`elements(f)`,
//! `shape = t.dims`), fields the schema does not declare skipped.
//!
//! A mapping becomes small functions over the format's data: the first mapping over a
//! message gets a parts function (its dtype, shape and data, which `include`s of it call),
//! each mapping an item function (one item to its tensor), and `index` walks the path of
//! messages to the items and hands them to `rt::protobuf::map_items`. The loops, the
//! external data and element location rules, and the document writer and rewriter
//! (`rt::protodoc`) are the runtime's.

use proc_macro2::{Literal, TokenStream};
use quote::quote;
use tensorfmt_schema::ast::*;

use crate::expr::{self, Cx};
use crate::model::{docs, rs_ident, Fmt, GResult, Model};

/// How a declared field lies on the wire and what its view holds.
#[derive(Debug, Clone, PartialEq)]
enum Kind {
    /// A varint (integers, bools, enums), held as `i64`.
    Varint,
    /// `float`: four bytes, held as `f32`.
    Float,
    /// `double`: eight bytes, held as `f64`.
    Double,
    /// `string`, held as `&str`.
    Str,
    /// `bytes`, held as the slice and its absolute offset.
    Bytes,
    /// An embedded message of this format.
    Msg(String),
}

fn kind(cx: &Cx<'_>, fmt: &Fmt<'_>, msg: &Message, f: &MessageField) -> GResult<Kind> {
    let [name] = f.ty.path.as_slice() else {
        // `TensorProto.DataLocation`: a nested enum.
        let last = f.ty.path.last().map(|i| i.name.as_str()).unwrap_or("");
        if msg.enums.iter().any(|e| e.name.name == last)
            || fmt.ast.message(&f.ty.path[0].name).is_some()
        {
            return Ok(Kind::Varint);
        }
        return Err(cx.unsupported(f.ty.span, "a field of this type"));
    };
    Ok(match name.name.as_str() {
        "int32" | "int64" | "uint32" | "uint64" | "bool" => Kind::Varint,
        "float" => Kind::Float,
        "double" => Kind::Double,
        "string" => Kind::Str,
        "bytes" => Kind::Bytes,
        other if msg.enums.iter().any(|e| e.name.name == other) => Kind::Varint,
        other if fmt.ast.enum_decl(other).is_some() => Kind::Varint,
        other if fmt.ast.message(other).is_some() => Kind::Msg(other.to_string()),
        _ => return Err(cx.unsupported(f.ty.span, &format!("a field of type `{}`", name.name))),
    })
}

/// The view type of one message and its `rt::protobuf::View` impl: a field of the view
/// per declared field (repeated scalars are left where they are, for the mapping to read),
/// one `match` arm each that decodes it.
pub(crate) fn gen_message(cx: &Cx<'_>, fmt: &Fmt<'_>, m: &Message) -> GResult<TokenStream> {
    if let Some(n) = m.messages.first() {
        return Err(cx.unsupported(n.span, "a nested message"));
    }
    let ty = rs_ident(&m.name.name);
    let doc = docs(&m.docs);
    let mut fields = Vec::new();
    let mut arms = Vec::new();
    let mut nested = false;
    for f in &m.fields {
        let k = kind(cx, fmt, m, f)?;
        let id = rs_ident(&f.name.name);
        let num = Literal::u32_unsuffixed(f.tag);
        let fdoc = if f.docs.is_empty() {
            let d = format!(" Field {} (`{}`).", f.tag, f.name.name);
            quote!(#[doc = #d])
        } else {
            docs(&f.docs)
        };
        let what = format!("{}.{}", m.name.name, f.name.name);
        let repeated = f.label == Label::Repeated;
        let (held, value) = match &k {
            // Read where they are, by the mapping.
            Kind::Varint | Kind::Float | Kind::Double if repeated => continue,
            Kind::Varint => (quote!(i64), quote!(f.varint(#what)?)),
            Kind::Float => (quote!(f32), quote!(f.float(#what)?)),
            Kind::Double => (quote!(f64), quote!(f.double(#what)?)),
            Kind::Str => (quote!(&'a str), quote!(f.str(#what)?)),
            Kind::Bytes => (quote!((&'a [u8], u64)), quote!(f.bytes(#what)?)),
            Kind::Msg(name) => {
                nested = true;
                let sub = rs_ident(name);
                (quote!(#sub<'a>), quote!(f.message(#what, depth, limits)?))
            }
        };
        if repeated {
            fields.push(quote!(#fdoc pub #id: Vec<#held>,));
            arms.push((num, quote!(self.#id.push(#value))));
        } else if matches!(k, Kind::Msg(_)) {
            // A message given more than once: the last one (this reader does not merge
            // them).
            fields.push(quote!(#fdoc pub #id: Option<Box<#held>>,));
            arms.push((num, quote!(self.#id = Some(Box::new(#value)))));
        } else {
            fields.push(quote!(#fdoc pub #id: Option<#held>,));
            arms.push((num, quote!(self.#id = Some(#value))));
        }
    }
    // One field: an `if` (a one-arm `match` reads as one).
    let (f, dispatch) = match arms.as_slice() {
        [] => (quote!(_f), quote!()),
        [(num, set)] => (quote!(f), quote!(if f.number == #num { #set; })),
        _ => {
            let arms = arms.iter().map(|(num, set)| quote!(#num => #set,));
            (quote!(f), quote!(match f.number { #(#arms)* _ => {} }))
        }
    };
    let name = &m.name.name;
    let (depth, limits) = if nested {
        (quote!(depth), quote!(limits))
    } else {
        (quote!(_depth), quote!(_limits))
    };
    Ok(quote! {
        #doc
        #[derive(Debug, Clone, Default)]
        pub struct #ty<'a> {
            /// The message's bytes.
            pub bytes: &'a [u8],
            /// Absolute offset of its first byte.
            pub base: u64,
            #(#fields)*
        }

        impl<'a> rt::protobuf::View<'a> for #ty<'a> {
            const NAME: &'static str = #name;

            fn empty(bytes: &'a [u8], base: u64) -> Self {
                #ty { bytes, base, ..Default::default() }
            }

            fn field(&mut self, #f: &rt::protobuf::Field<'a>, #depth: u64, #limits: &rt::Limits) -> rt::Result<()> {
                #dispatch
                Ok(())
            }
        }
    })
}

/// `DATA_LOCATION` → `DataLocation`, as prost names enum values.
fn camel(name: &str) -> String {
    name.split('_')
        .filter(|w| !w.is_empty())
        .map(|w| {
            let mut c = w.chars();
            match c.next() {
                Some(f) => f.to_ascii_uppercase().to_string() + &c.as_str().to_ascii_lowercase(),
                None => String::new(),
            }
        })
        .collect()
}

/// `TensorProto` → `tensor_proto`, the module of a message's nested enums.
fn snake(name: &str) -> String {
    let mut out = String::new();
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// An enum as a `prost::Enumeration`.
fn gen_prost_enum(e: &EnumDecl) -> TokenStream {
    let ty = rs_ident(&e.name.name);
    let doc = if e.docs.is_empty() {
        let d = format!(" `{}` values.", e.name.name);
        quote!(#[doc = #d])
    } else {
        docs(&e.docs)
    };
    let variants = e.values.iter().map(|(name, n)| {
        let v = rs_ident(&camel(&name.name));
        let d = format!(" `{}` ({n}).", name.name);
        let n = Literal::i64_unsuffixed(*n);
        quote!(#[doc = #d] #v = #n,)
    });
    quote! {
        #doc
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, ::prost::Enumeration)]
        #[repr(i32)]
        pub enum #ty {
            #(#variants)*
        }
    }
}

/// The owned `prost` message types of every declared message (module `messages`):
/// the declared fields only, for building and decoding messages with prost. The
/// readers and writers of the format work on the wire in place and keep undeclared
/// fields; these types drop them.
pub(crate) fn gen_prost(cx: &Cx<'_>, fmt: &Fmt<'_>) -> GResult<TokenStream> {
    let mut items = Vec::new();
    for m in fmt.ast.messages() {
        let ty = rs_ident(&m.name.name);
        let doc = docs(&m.docs);
        let module = snake(&m.name.name);
        let mod_id = rs_ident(&module);
        let mut fields = Vec::new();
        for f in &m.fields {
            let id = rs_ident(&f.name.name);
            let tag = f.tag.to_string();
            let fdoc = if f.docs.is_empty() {
                let d = format!(" Field {} (`{}`).", f.tag, f.name.name);
                quote!(#[doc = #d])
            } else {
                docs(&f.docs)
            };
            let last = f.ty.path.last().map(|i| i.name.as_str()).unwrap_or("");
            let nested_enum = m.enums.iter().any(|e| e.name.name == last);
            let top_enum = f.ty.path.len() == 1 && fmt.ast.enum_decl(last).is_some();
            let (attr_ty, rust_ty): (TokenStream, TokenStream) = if nested_enum || top_enum {
                let path = if nested_enum {
                    format!("{module}::{last}")
                } else {
                    last.to_string()
                };
                (quote!(enumeration = #path), quote!(i32))
            } else if f.ty.path.len() == 2 {
                // `Message.Enum` of another message.
                let path = format!("{}::{}", snake(&f.ty.path[0].name), last);
                (quote!(enumeration = #path), quote!(i32))
            } else {
                match last {
                    "int32" => (quote!(int32), quote!(i32)),
                    "int64" => (quote!(int64), quote!(i64)),
                    "uint32" => (quote!(uint32), quote!(u32)),
                    "uint64" => (quote!(uint64), quote!(u64)),
                    "bool" => (quote!(bool), quote!(bool)),
                    "float" => (quote!(float), quote!(f32)),
                    "double" => (quote!(double), quote!(f64)),
                    "string" => (quote!(string), quote!(::prost::alloc::string::String)),
                    "bytes" => (quote!(bytes = "vec"), quote!(::prost::alloc::vec::Vec<u8>)),
                    other if fmt.ast.message(other).is_some() => {
                        let t = rs_ident(other);
                        (quote!(message), quote!(#t))
                    }
                    _ => {
                        return Err(
                            cx.unsupported(f.ty.span, "a field of this type in a prost message")
                        )
                    }
                }
            };
            let is_msg = attr_ty.to_string() == "message";
            let scalar = !is_msg && !matches!(last, "string" | "bytes");
            let packed = f
                .options
                .iter()
                .any(|a| a.name.is_none() && a.value.to_string() == "packed");
            let (label, rust_ty) = match f.label {
                Label::Optional => (quote!(optional), quote!(::core::option::Option<#rust_ty>)),
                Label::Required if is_msg => {
                    (quote!(required), quote!(::core::option::Option<#rust_ty>))
                }
                Label::Required => (quote!(required), rust_ty),
                Label::Repeated if scalar => {
                    let p = if packed { "true" } else { "false" };
                    (
                        quote!(repeated, packed = #p),
                        quote!(::prost::alloc::vec::Vec<#rust_ty>),
                    )
                }
                Label::Repeated => (quote!(repeated), quote!(::prost::alloc::vec::Vec<#rust_ty>)),
            };
            fields.push(quote! {
                #fdoc
                #[prost(#attr_ty, #label, tag = #tag)]
                pub #id: #rust_ty,
            });
        }
        let enums: Vec<TokenStream> = m.enums.iter().map(gen_prost_enum).collect();
        let enum_mod = if enums.is_empty() {
            quote!()
        } else {
            let d = format!(" Enums nested in `{}`.", m.name.name);
            quote! {
                #[doc = #d]
                pub mod #mod_id {
                    #(#enums)*
                }
            }
        };
        items.push(quote! {
            #doc
            #[derive(Clone, PartialEq, ::prost::Message)]
            pub struct #ty {
                #(#fields)*
            }
            #enum_mod
        });
    }
    for e in fmt.ast.enums() {
        items.push(gen_prost_enum(e));
    }
    let doc = format!(
        " The messages of `{}` as owned `prost` types, their declared fields only (encode and decode with `prost::Message`; undeclared fields are dropped on decode, where the format's own reader and writer keep them).",
        fmt.ast.name.name
    );
    Ok(quote! {
        #[doc = #doc]
        pub mod messages {
            #(#items)*
        }
    })
}

/// A value in a mapping.
#[derive(Debug, Clone)]
enum T {
    /// A message view (`&M`).
    Msg(String),
    /// An optional message (`Option<&M>`).
    OptMsg(String),
    /// Repeated messages (`&[M]`).
    Msgs(String),
    /// An integer (`i64`).
    Int,
    /// Text that may be absent (`Option<&str>`).
    OptStr,
    /// Located bytes that may be absent (`Option<(&[u8], u64)>`).
    OptBytes,
    /// Text made by the mapping (`String`).
    Owned,
    /// Repeated strings (`&[&str]`).
    Strs,
    /// A repeated scalar field left in its message: (message expression, number, kind).
    Field(TokenStream, u32, Kind),
    /// A boolean.
    Bool,
    /// The mapped dtype or a dtype name (`rt::DType`).
    Dtype,
    /// A string literal.
    Lit,
    /// Where the tensor's bytes are (`rt::DataLocation`, with the element count when
    /// they are strings).
    Data,
}

impl T {
    /// Whether `self` is of the same kind as `other` (message names ignored).
    fn is(&self, other: &T) -> bool {
        std::mem::discriminant(self) == std::mem::discriminant(other)
    }
}

struct V {
    ts: TokenStream,
    t: T,
}

struct Scope<'f, 's> {
    fmt: &'f Fmt<'s>,
    /// Bindings of the mappings that include this one (`n` of the mapping whose
    /// `include onnx.tensor(n.attribute["value"].t)` compiles this one), with their
    /// message types.
    outer: Vec<(String, String)>,
    binding: String,
    binding_msg: String,
    /// Whether `dtype` is defined yet.
    dtype: bool,
    /// Entries of a `kv` format in scope: their name, value message and captures.
    entries: Vec<EntryBind>,
    /// The parts functions `include`s call.
    parts: Vec<PartsFn>,
}

/// An entry of a `kv` format as a mapping sees it: `blob.value` (its message),
/// `blob.name` (a capture of its key pattern).
#[derive(Debug, Clone)]
pub(crate) struct EntryBind {
    pub(crate) name: String,
    pub(crate) msg: String,
    pub(crate) captures: Vec<String>,
}

fn dtype_variant(name: &str) -> Option<TokenStream> {
    let v = match name {
        "f16" => quote!(F16),
        "bf16" => quote!(BF16),
        "f32" => quote!(F32),
        "f64" => quote!(F64),
        "i8" => quote!(I8),
        "i16" => quote!(I16),
        "i32" => quote!(I32),
        "i64" => quote!(I64),
        "u8" => quote!(U8),
        "u16" => quote!(U16),
        "u32" => quote!(U32),
        "u64" => quote!(U64),
        "bool" => quote!(Bool),
        "c64" => quote!(C64),
        "c128" => quote!(C128),
        "f8e4m3fn" => quote!(F8E4M3FN),
        "f8e5m2" => quote!(F8E5M2),
        "string" => quote!(String),
        _ => return None,
    };
    Some(quote!(rt::DType::#v))
}

/// `ts`, the code of `e`, as an operand of `op` (`Eq` also stands for `!`): in parentheses
/// when `e` is an operation that binds less tightly (text joined by `+` is a `format!`).
fn operand(op: BinaryOp, e: &Expr, ts: TokenStream) -> TokenStream {
    use BinaryOp as B;
    let paren = match (&e.kind, op) {
        (ExprKind::If { .. }, _) => true,
        (ExprKind::Binary { op: B::Add, .. }, _) => false,
        (ExprKind::Binary { op: B::And, .. }, B::And | B::Or) => false,
        (ExprKind::Binary { op: B::Or, .. }, B::Or) => false,
        (ExprKind::Binary { op: inner, .. }, B::And | B::Or) => {
            !matches!(inner, B::Eq | B::Ne | B::Lt | B::Le | B::Gt | B::Ge)
        }
        (ExprKind::Binary { .. }, _) => true,
        _ => false,
    };
    if paren {
        quote!((#ts))
    } else {
        ts
    }
}

/// `if cond { a } else { b }`, or `else if` when `b` (the code of `otherwise`) is an `if`.
fn if_else(cond: &TokenStream, a: &TokenStream, otherwise: &Expr, b: &TokenStream) -> TokenStream {
    if matches!(otherwise.kind, ExprKind::If { .. }) {
        quote!(if #cond { #a } else #b)
    } else {
        quote!(if #cond { #a } else { #b })
    }
}

/// Whether `ts` names `ident` (a variable: not a field after `.`).
pub(crate) fn mentions(ts: &TokenStream, ident: &str) -> bool {
    let mut after_dot = false;
    for tt in ts.clone() {
        match &tt {
            proc_macro2::TokenTree::Ident(i) if !after_dot && i == ident => return true,
            proc_macro2::TokenTree::Group(g) if mentions(&g.stream(), ident) => return true,
            _ => {}
        }
        after_dot = matches!(&tt, proc_macro2::TokenTree::Punct(p) if p.as_char() == '.');
    }
    false
}

impl Scope<'_, '_> {
    /// The value of field `name` of `base`, a message (`&M`) or an optional message
    /// (`Option<&M>`, whose absent fields read as absent, or as the protobuf default for
    /// integers).
    fn member(&self, cx: &Cx<'_>, e: &Expr, base: &V, name: &Ident) -> GResult<V> {
        let (msg, optional) = match &base.t {
            T::Msg(m) => (m.clone(), false),
            T::OptMsg(m) => (m.clone(), true),
            _ => return Err(cx.unsupported(name.span, "a member of a value that is not a message")),
        };
        let Some(m) = self.fmt.ast.message(&msg) else {
            return Err(cx.err(e.span, format!("unknown message `{msg}`")));
        };
        let Some(f) = m.fields.iter().find(|f| f.name.name == name.name) else {
            return Err(cx.err(name.span, format!("`{msg}` has no field `{}`", name.name)));
        };
        let k = kind(cx, self.fmt, m, f)?;
        let b = &base.ts;
        let id = rs_ident(&f.name.name);
        let repeated = f.label == Label::Repeated;
        let v = |ts: TokenStream, t: T| Ok(V { ts, t });
        if optional {
            return match (k, repeated) {
                (Kind::Msg(n), false) => v(quote!(#b.and_then(|x| x.#id.as_deref())), T::OptMsg(n)),
                (Kind::Varint, false) => v(quote!(#b.and_then(|x| x.#id).unwrap_or(0)), T::Int),
                (Kind::Str, false) => v(quote!(#b.and_then(|x| x.#id)), T::OptStr),
                (Kind::Bytes, false) => v(quote!(#b.and_then(|x| x.#id)), T::OptBytes),
                _ => Err(cx.unsupported(
                    name.span,
                    "a repeated field of an optional message in a mapping",
                )),
            };
        }
        match (k, repeated) {
            (Kind::Msg(n), false) => v(quote!(#b.#id.as_deref()), T::OptMsg(n)),
            (Kind::Msg(n), true) => v(quote!(#b.#id), T::Msgs(n)),
            // Absent: the protobuf default.
            (Kind::Varint, false) => v(quote!(#b.#id.unwrap_or(0)), T::Int),
            (Kind::Str, false) => v(quote!(#b.#id), T::OptStr),
            (Kind::Str, true) => v(quote!(#b.#id), T::Strs),
            (Kind::Bytes, false) => v(quote!(#b.#id), T::OptBytes),
            (k @ (Kind::Varint | Kind::Float | Kind::Double | Kind::Bytes), true) => {
                v(quote!(#b), T::Field(quote!(#b), f.tag, k))
            }
            _ => Err(cx.unsupported(name.span, "this field in a mapping")),
        }
    }

    /// `base.a.b...`: the members `segs` of `base`.
    fn members(&self, cx: &Cx<'_>, e: &Expr, mut v: V, segs: &[Ident]) -> GResult<V> {
        for seg in segs {
            v = self.member(cx, e, &v, seg)?;
        }
        Ok(v)
    }

    fn path(&self, cx: &Cx<'_>, e: &Expr, p: &[Ident]) -> GResult<V> {
        let first = p[0].name.as_str();
        if let Some(en) = self.entries.iter().find(|x| x.name == first) {
            let b = rs_ident(first);
            let Some(seg) = p.get(1) else {
                return Err(cx.unsupported(e.span, "an entry as a value"));
            };
            if seg.name == "value" {
                let v = V {
                    ts: quote!(#b.value),
                    t: T::Msg(en.msg.clone()),
                };
                return self.members(cx, e, v, &p[2..]);
            }
            if en.captures.contains(&seg.name) && p.len() == 2 {
                let c = rs_ident(&seg.name);
                return Ok(V {
                    ts: quote!(#b.#c),
                    t: T::Lit,
                });
            }
            return Err(cx.err(
                seg.span,
                format!("entry `{first}` has no member `{}`", seg.name),
            ));
        }
        if p.len() == 1 && first == "position" {
            return Ok(V {
                ts: quote!(position as i64),
                t: T::Int,
            });
        }
        let bound = self
            .outer
            .iter()
            .find(|(b, _)| b == first)
            .map(|(_, m)| m.clone())
            .or_else(|| (first == self.binding).then(|| self.binding_msg.clone()));
        if let Some(msg) = bound {
            let b = rs_ident(first);
            let v = V {
                ts: quote!(#b),
                t: T::Msg(msg),
            };
            return self.members(cx, e, v, &p[1..]);
        }
        if p.len() == 1 && first == "dtype" {
            if !self.dtype {
                return Err(cx.err(e.span, "`dtype` is used before it is assigned"));
            }
            return Ok(V {
                ts: quote!(dtype),
                t: T::Dtype,
            });
        }
        if p.len() == 1 {
            if let Some(d) = dtype_variant(first) {
                return Ok(V { ts: d, t: T::Dtype });
            }
        }
        // `Message.Enum.VALUE`.
        if let [m, en, val] = p {
            let n = self
                .fmt
                .ast
                .message(&m.name)
                .and_then(|msg| msg.enums.iter().find(|x| x.name.name == en.name))
                .and_then(|decl| decl.values.iter().find(|(i, _)| i.name == val.name));
            if let Some((_, n)) = n {
                let l = Literal::i64_unsuffixed(*n);
                return Ok(V {
                    ts: quote!(#l),
                    t: T::Int,
                });
            }
        }
        Err(cx.unsupported(
            e.span,
            &format!("the name `{}` in this mapping", cx.text(e.span)),
        ))
    }

    /// `repeated_kv["key"]` (the value of the last entry with that key, as a map keeps
    /// it), `repeated_named["name"]` (the last message with that name) or
    /// `repeated_strings[i]`.
    fn index(&self, cx: &Cx<'_>, e: &Expr, base: &Expr, index: &Expr) -> GResult<V> {
        let b = self.compile(cx, base)?;
        let k = self.compile(cx, index)?;
        let (bts, kts) = (&b.ts, &k.ts);
        if let (T::Strs, T::Int) = (&b.t, &k.t) {
            let ts = match &index.kind {
                ExprKind::Int(0) => quote!(#bts.first().copied()),
                ExprKind::Int(i) if usize::try_from(*i).is_ok() => {
                    let i = Literal::usize_unsuffixed(*i as usize);
                    quote!(#bts.get(#i).copied())
                }
                _ => quote!(usize::try_from(#kts).ok().and_then(|i| #bts.get(i).copied())),
            };
            return Ok(V { ts, t: T::OptStr });
        }
        let T::Msgs(m) = &b.t else {
            return Err(cx.unsupported(e.span, "this lookup"));
        };
        let Some(decl) = self.fmt.ast.message(m) else {
            return Err(cx.err(e.span, format!("unknown message `{m}`")));
        };
        if !k.t.is(&T::Lit) {
            return Err(cx.unsupported(index.span, "a lookup key that is not a string"));
        }
        let has = |n: &str| decl.fields.iter().any(|f| f.name.name == n);
        if has("key") && has("value") {
            return Ok(V {
                ts: quote!(rt::protobuf::lookup(&#bts, #kts, |x| (x.key, x.value))),
                t: T::OptStr,
            });
        }
        if has("name") {
            return Ok(V {
                ts: quote!(rt::protobuf::named(&#bts, #kts, |x| x.name)),
                t: T::OptMsg(m.clone()),
            });
        }
        Err(cx.unsupported(
            e.span,
            "a lookup in messages without `key` and `value` or `name`",
        ))
    }

    fn compile(&self, cx: &Cx<'_>, e: &Expr) -> GResult<V> {
        match &e.kind {
            ExprKind::Str(s) => Ok(V {
                ts: quote!(#s),
                t: T::Lit,
            }),
            ExprKind::Path(p) => self.path(cx, e, p),
            ExprKind::Member { base, field } => {
                let b = self.compile(cx, base)?;
                self.member(cx, e, &b, field)
            }
            ExprKind::Int(i) => {
                let v = i64::try_from(*i)
                    .map_err(|_| cx.unsupported(e.span, "an integer outside the i64 range"))?;
                let l = Literal::i64_unsuffixed(v);
                Ok(V {
                    ts: quote!(#l),
                    t: T::Int,
                })
            }
            ExprKind::Unary {
                op: UnaryOp::Not,
                expr,
            } => {
                let v = self.compile(cx, expr)?;
                if !v.t.is(&T::Bool) {
                    return Err(cx.err(expr.span, "`!` of a value that is not a boolean"));
                }
                let ts = operand(BinaryOp::Eq, expr, v.ts);
                Ok(V {
                    ts: quote!(!#ts),
                    t: T::Bool,
                })
            }
            ExprKind::Index { base, index } => self.index(cx, e, base, index),
            ExprKind::Call { callee, args } if callee.len() == 1 => {
                let name = callee[0].name.as_str();
                match (name, args.as_slice()) {
                    ("has", [a]) => {
                        let v = self.compile(cx, &a.value)?;
                        let ts = &v.ts;
                        match v.t {
                            T::OptStr | T::OptBytes | T::OptMsg(_) => Ok(V {
                                ts: quote!(#ts.is_some()),
                                t: T::Bool,
                            }),
                            _ => {
                                Err(cx.unsupported(a.span, "`has` of a value that is always there"))
                            }
                        }
                    }
                    ("elements", [a]) => self.elements(cx, &a.value),
                    ("str", [a]) => {
                        let v = self.compile(cx, &a.value)?;
                        if !v.t.is(&T::Int) {
                            return Err(cx.err(a.span, "`str` takes an integer"));
                        }
                        let ts = operand(BinaryOp::Eq, &a.value, v.ts);
                        Ok(V {
                            ts: quote!(#ts.to_string()),
                            t: T::Owned,
                        })
                    }
                    ("external", args) => self.external(cx, e, args),
                    _ => Err(cx.unsupported(e.span, &format!("`{name}(..)` in this mapping"))),
                }
            }
            ExprKind::Binary {
                op: BinaryOp::Add, ..
            } => {
                // Text joined, in one `format!`: absent text reads as "".
                let mut text = String::new();
                let mut parts = Vec::new();
                self.text_parts(cx, e, &mut text, &mut parts)?;
                Ok(V {
                    ts: quote!(format!(#text, #(#parts),*)),
                    t: T::Owned,
                })
            }
            ExprKind::Binary { op, lhs, rhs } => {
                let (l, r) = (self.compile(cx, lhs)?, self.compile(cx, rhs)?);
                let same = matches!(
                    (&l.t, &r.t),
                    (T::Int, T::Int) | (T::Dtype, T::Dtype) | (T::Bool, T::Bool)
                );
                let bools = l.t.is(&T::Bool) && r.t.is(&T::Bool);
                let (lt, rt_) = (operand(*op, lhs, l.ts), operand(*op, rhs, r.ts));
                // Text against a literal: an absent field reads as its default, "".
                let text = match (&l.t, &r.t) {
                    (T::OptStr, T::Lit) => Some(quote!(#lt.unwrap_or("") == #rt_)),
                    (T::Lit, T::OptStr) => Some(quote!(#lt == #rt_.unwrap_or(""))),
                    _ => None,
                };
                let ts = match (op, text) {
                    (BinaryOp::Eq, Some(ts)) => ts,
                    (BinaryOp::Ne, Some(ts)) => quote!(!(#ts)),
                    (BinaryOp::Eq, None) if same => quote!(#lt == #rt_),
                    (BinaryOp::Ne, None) if same => quote!(#lt != #rt_),
                    (BinaryOp::And, _) if bools => quote!(#lt && #rt_),
                    (BinaryOp::Or, _) if bools => quote!(#lt || #rt_),
                    _ => return Err(cx.unsupported(e.span, "this operation in a mapping")),
                };
                Ok(V { ts, t: T::Bool })
            }
            ExprKind::In { expr, list } => {
                let mut v = self.compile(cx, expr)?;
                if v.t.is(&T::OptStr) {
                    // Text: an absent field reads as "".
                    let ts = v.ts;
                    v = V {
                        ts: quote!(#ts.unwrap_or("")),
                        t: T::Lit,
                    };
                }
                let mut items = Vec::new();
                for x in list {
                    let xv = self.compile(cx, x)?;
                    if !xv.t.is(&v.t) || !matches!(v.t, T::Dtype | T::Int | T::Lit) {
                        return Err(cx.unsupported(x.span, "this `in` list"));
                    }
                    items.push(xv.ts);
                }
                let ts = &v.ts;
                Ok(V {
                    ts: if items.is_empty() {
                        quote!(false)
                    } else {
                        quote!(matches!(#ts, #(#items)|*))
                    },
                    t: T::Bool,
                })
            }
            ExprKind::If {
                cond,
                then,
                otherwise,
            } => {
                let c = self.compile(cx, cond)?;
                if !c.t.is(&T::Bool) {
                    return Err(cx.err(cond.span, "the condition is not a boolean"));
                }
                let a = self.data(cx, then)?;
                let b = self.data(cx, otherwise)?;
                if !a.t.is(&T::Data) || !b.t.is(&T::Data) {
                    return Err(
                        cx.unsupported(e.span, "an `if` whose branches are not tensor data")
                    );
                }
                let (cts, ats, bts) = (&c.ts, &a.ts, &b.ts);
                Ok(V {
                    ts: if_else(cts, ats, otherwise, bts),
                    t: T::Data,
                })
            }
            _ => Err(cx.unsupported(e.span, &format!("`{}` in this mapping", cx.text(e.span)))),
        }
    }

    /// The pieces of `a + b + ...`, in order: literals into the format string `text`,
    /// the other values as its arguments.
    fn text_parts(
        &self,
        cx: &Cx<'_>,
        e: &Expr,
        text: &mut String,
        args: &mut Vec<TokenStream>,
    ) -> GResult<()> {
        match &e.kind {
            ExprKind::Binary {
                op: BinaryOp::Add,
                lhs,
                rhs,
            } => {
                self.text_parts(cx, lhs, text, args)?;
                return self.text_parts(cx, rhs, text, args);
            }
            ExprKind::Str(s) => {
                text.push_str(&s.replace('{', "{{").replace('}', "}}"));
                return Ok(());
            }
            // `str(i)`: the integer as it displays.
            ExprKind::Call { callee, args: a } if callee.len() == 1 && callee[0].name == "str" => {
                if let [a] = a.as_slice() {
                    let v = self.compile(cx, &a.value)?;
                    if v.t.is(&T::Int) {
                        text.push_str("{}");
                        args.push(match &a.value.kind {
                            ExprKind::Path(p) if p.len() == 1 && p[0].name == "position" => {
                                quote!(position)
                            }
                            _ => v.ts,
                        });
                        return Ok(());
                    }
                }
            }
            _ => {}
        }
        let v = self.compile(cx, e)?;
        let ts = v.ts;
        text.push_str("{}");
        args.push(match v.t {
            T::Lit | T::Owned => ts,
            T::OptStr => quote!(#ts.unwrap_or("")),
            _ => return Err(cx.unsupported(e.span, "`+` of a value that is not text")),
        });
        Ok(())
    }

    /// `e` as tensor data: a `bytes` field is its byte range in the source.
    fn data(&self, cx: &Cx<'_>, e: &Expr) -> GResult<V> {
        let v = self.compile(cx, e)?;
        if !v.t.is(&T::OptBytes) {
            return Ok(v);
        }
        let ts = v.ts;
        let what = cx.text(e.span);
        Ok(V {
            ts: quote!(rt::protobuf::located(#ts, #what)?),
            t: T::Data,
        })
    }

    /// `elements(t.f)`: the repeated field's values as the tensor's elements.
    fn elements(&self, cx: &Cx<'_>, e: &Expr) -> GResult<V> {
        let v = self.compile(cx, e)?;
        let T::Field(msg, number, k) = v.t else {
            return Err(cx.err(e.span, "`elements` takes a repeated scalar field"));
        };
        let n = Literal::u32_unsuffixed(number);
        let elements = match k {
            Kind::Float => quote!(rt::protobuf::Elements::Fixed { width: 4 }),
            Kind::Double => quote!(rt::protobuf::Elements::Fixed { width: 8 }),
            Kind::Bytes => quote!(rt::protobuf::Elements::Bytes),
            _ => quote!(rt::protobuf::Elements::varints(dtype)),
        };
        Ok(V {
            ts: quote!(rt::protobuf::elements(#msg.bytes, #msg.base, #n, #elements)?),
            t: T::Data,
        })
    }

    /// `external(location = , offset = , length = )`: bytes in a file beside the source.
    fn external(&self, cx: &Cx<'_>, e: &Expr, args: &[Arg]) -> GResult<V> {
        let mut loc = None;
        let mut off = quote!(None);
        let mut len = quote!(None);
        for a in args {
            let Some(n) = &a.name else {
                return Err(cx.err(a.span, "`external` takes named arguments"));
            };
            let v = self.compile(cx, &a.value)?;
            if !v.t.is(&T::OptStr) {
                return Err(cx.err(a.span, format!("`{}` is not text", n.name)));
            }
            let ts = v.ts;
            match n.name.as_str() {
                "location" => loc = Some(ts),
                "offset" => off = ts,
                "length" => len = ts,
                other => {
                    return Err(cx.err(n.span, format!("`external` has no argument `{other}`")))
                }
            }
        }
        let Some(loc) = loc else {
            return Err(cx.err(e.span, "`external` needs a `location`"));
        };
        Ok(V {
            ts: quote!(rt::protobuf::external(src, #loc, #off, #len)?),
            t: T::Data,
        })
    }
}

/// The fields from where a mapping's source starts to its items, each with whether it
/// is repeated.
pub(crate) type Steps = Vec<(Ident, bool)>;

/// Where a mapping's source starts: the document's root message, or the value of an
/// entry of a `kv` format (`blob.value.tensor`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Origin {
    /// `root.a.b`.
    Root,
    /// `entry.value.a.b`: the entry's name.
    Entry(String),
}

/// The message a mapping's source yields, the steps to it from where it starts (each a
/// field and whether it is repeated), and where it starts.
pub(crate) fn mapping_source(
    cx: &Cx<'_>,
    fmt: &Fmt<'_>,
    root: &str,
    map: &TensorMap,
    entries: &[EntryBind],
) -> GResult<(String, Steps, Origin)> {
    let ExprKind::Path(p) = &map.source.kind else {
        return Err(cx.unsupported(map.source.span, "this mapping source"));
    };
    let first = p.first().map(|i| i.name.as_str()).unwrap_or("");
    let (mut msg, rest, origin) = if first == "root" {
        (root.to_string(), &p[1..], Origin::Root)
    } else if let Some(en) = entries.iter().find(|e| e.name == first) {
        if p.get(1).map(|i| i.name.as_str()) != Some("value") {
            return Err(cx.unsupported(
                map.source.span,
                "a mapping over an entry other than its value (`entry.value...`)",
            ));
        }
        (en.msg.clone(), &p[2..], Origin::Entry(en.name.clone()))
    } else {
        return Err(cx.unsupported(
            map.source.span,
            "a mapping source outside `root` (or a `kv` entry's value)",
        ));
    };
    let mut steps: Vec<(Ident, bool)> = Vec::new();
    for seg in rest {
        let Some(m) = fmt.ast.message(&msg) else {
            return Err(cx.err(seg.span, format!("unknown message `{msg}`")));
        };
        let Some(f) = m.fields.iter().find(|f| f.name.name == seg.name) else {
            return Err(cx.err(seg.span, format!("`{msg}` has no field `{}`", seg.name)));
        };
        let Kind::Msg(next) = kind(cx, fmt, m, f)? else {
            return Err(cx.unsupported(seg.span, "a mapping over values that are not messages"));
        };
        steps.push((seg.clone(), f.label == Label::Repeated));
        msg = next;
    }
    Ok((msg, steps, origin))
}

/// What a mapping's statements compile to: Rust expressions for its properties, and
/// statements that bind what they use (an included mapping's item).
#[derive(Default)]
struct Props {
    prelude: Vec<TokenStream>,
    /// The name, and whether it is a `String` made by the mapping (else a `&str`).
    name: Option<(TokenStream, bool)>,
    dtype: Option<TokenStream>,
    shape: Option<TokenStream>,
    data: Option<TokenStream>,
    segment: Option<TokenStream>,
    /// Everything but the name from the parts function of an included mapping (an
    /// `rt::TensorParts`).
    parts: Option<TokenStream>,
}

/// The function that reads the dtype, shape, data (and segment) of the items of the first
/// mapping over a message, which `include`s of that mapping call.
#[derive(Debug, Clone)]
pub(crate) struct PartsFn {
    msg: String,
    /// The mapping's position in the format.
    map: usize,
    name: proc_macro2::Ident,
    /// Whether it takes the source (external data).
    src: bool,
}

/// Compiles the statements of `map` (whose item is bound as `scope.binding`) into
/// `props`, later assignments overriding earlier ones, leaving out the assignments to
/// `skip` (properties an including mapping assigns after: they need not compile here,
/// where its names are not bound); `include F.tensor(x)` calls the parts function of
/// this format's mapping over `x`'s message type, or compiles it in place, `depth`
/// includes deep.
#[allow(clippy::too_many_arguments)]
fn compile_stmts(
    cx: &Cx<'_>,
    fmt: &Fmt<'_>,
    root: &str,
    scope: &mut Scope<'_, '_>,
    map: &TensorMap,
    props: &mut Props,
    depth: usize,
    skip: &[String],
) -> GResult<()> {
    for (i, s) in map.stmts.iter().enumerate() {
        let (key, value) = match s {
            TensorStmt::Assign { key, value, .. } => (key, value),
            TensorStmt::Include(e) => {
                // What this mapping assigns after the include overrides it.
                let later: Vec<String> = map.stmts[i + 1..]
                    .iter()
                    .filter_map(|s| match s {
                        TensorStmt::Assign { key, .. } if key.name != "write" => {
                            Some(key.name.clone())
                        }
                        _ => None,
                    })
                    .chain(skip.iter().cloned())
                    .collect();
                include(cx, fmt, root, scope, e, props, depth, &later)?;
                continue;
            }
        };
        if skip.contains(&key.name) {
            continue;
        }
        match key.name.as_str() {
            "name" => {
                let v = scope.compile(cx, value)?;
                let ts = v.ts;
                let what = cx.text(value.span);
                props.name = Some(match v.t {
                    T::OptStr => (quote!(rt::protobuf::present(#ts, #what)?), false),
                    T::Owned => (ts, true),
                    T::Lit => (ts, false),
                    _ => return Err(cx.err(value.span, "`name` is not text")),
                });
            }
            "segment" => {
                let v = scope.compile(cx, value)?;
                let T::OptMsg(m) = &v.t else {
                    return Err(cx.err(value.span, "`segment` is not an optional message"));
                };
                let has = |n: &str| {
                    fmt.ast
                        .message(m)
                        .is_some_and(|d| d.fields.iter().any(|f| f.name.name == n))
                };
                if !(has("begin") && has("end")) {
                    return Err(cx.err(
                        value.span,
                        "`segment` needs a message with `begin` and `end`",
                    ));
                }
                let ts = v.ts;
                props.segment =
                    Some(quote!(#ts.map(|s| (s.begin.unwrap_or(0), s.end.unwrap_or(0)))));
                props.parts = None;
            }
            "dtype" => {
                props.dtype = Some(dtype_choice(cx, fmt, scope, value)?);
                props.parts = None;
                scope.dtype = true;
            }
            "shape" => {
                let v = scope.compile(cx, value)?;
                let T::Field(m, number, Kind::Varint) = v.t else {
                    return Err(cx.err(value.span, "`shape` is not a repeated integer field"));
                };
                let n = Literal::u32_unsuffixed(number);
                let what = cx.text(value.span);
                props.shape = Some(quote!(rt::protobuf::dims(#m.bytes, #m.base, #n, #what)?));
                props.parts = None;
            }
            "data" => {
                if !scope.dtype {
                    return Err(cx.err(value.span, "`data` comes after `dtype`"));
                }
                let v = scope.data(cx, value)?;
                if !v.t.is(&T::Data) {
                    return Err(cx.err(value.span, "`data` is not tensor data"));
                }
                props.data = Some(v.ts);
                props.parts = None;
            }
            "write" => {
                // The write side (the protobuf writer).
            }
            other => {
                return Err(cx.unsupported(key.span, &format!("`{other}` in a protobuf mapping")))
            }
        }
    }
    Ok(())
}

/// A `dtype`: a dtype name, a table lookup, or an `if` of them; `(rt::DType,
/// Option<rt::ByteOrder>)`.
fn dtype_choice(
    cx: &Cx<'_>,
    fmt: &Fmt<'_>,
    scope: &Scope<'_, '_>,
    e: &Expr,
) -> GResult<TokenStream> {
    match &e.kind {
        ExprKind::If {
            cond,
            then,
            otherwise,
        } => {
            let c = scope.compile(cx, cond)?;
            if !c.t.is(&T::Bool) {
                return Err(cx.err(cond.span, "the condition is not a boolean"));
            }
            let (ct, a, b) = (
                c.ts,
                dtype_choice(cx, fmt, scope, then)?,
                dtype_choice(cx, fmt, scope, otherwise)?,
            );
            Ok(if_else(&ct, &a, otherwise, &b))
        }
        ExprKind::Path(p) if p.len() == 1 && dtype_variant(&p[0].name).is_some() => {
            let d = dtype_variant(&p[0].name).expect("checked");
            Ok(quote!((#d, None)))
        }
        ExprKind::Index { base, index } => {
            let ExprKind::Path(tp) = &base.kind else {
                return Err(cx.unsupported(base.span, "this table"));
            };
            let Some(table) = fmt.table(&tp[0].name).filter(|_| tp.len() == 1) else {
                return Err(cx.err(base.span, format!("unknown table `{}`", cx.text(base.span))));
            };
            if table.key_kind != KeyKind::Int {
                return Err(cx.unsupported(base.span, "a table with text keys here"));
            }
            let k = scope.compile(cx, index)?;
            if !k.t.is(&T::Int) {
                return Err(cx.err(index.span, "the key is not an integer"));
            }
            let f = rs_ident(&table.name.name);
            let kts = k.ts;
            Ok(quote!(rt::protobuf::dtype(#f, #kts)?))
        }
        _ => Err(cx.unsupported(
            e.span,
            "this `dtype`: a dtype name, a table lookup or an `if` of them",
        )),
    }
}

/// `include F.tensor(x)`, F this format: the mapping whose items are `x`'s message type,
/// applied to `x` (which must be present), leaving out what the includer assigns after
/// (`skip`): a call of its parts function when the includer assigns only the name after,
/// else its statements compiled in place.
#[allow(clippy::too_many_arguments)]
fn include(
    cx: &Cx<'_>,
    fmt: &Fmt<'_>,
    root: &str,
    scope: &mut Scope<'_, '_>,
    e: &Expr,
    props: &mut Props,
    depth: usize,
    skip: &[String],
) -> GResult<()> {
    let ExprKind::Call { callee, args } = &e.kind else {
        return Err(cx.unsupported(e.span, "this `include`"));
    };
    let own =
        callee.len() == 2 && callee[1].name == "tensor" && callee[0].name == fmt.ast.name.name;
    let ([arg], true) = (args.as_slice(), own) else {
        return Err(cx.unsupported(
            e.span,
            "an `include` in a protobuf mapping other than `this_format.tensor(message)`",
        ));
    };
    if depth >= 8 {
        return Err(cx.err(e.span, "`include`s nest more than 8 deep"));
    }
    let v = scope.compile(cx, &arg.value)?;
    let (msg, present) = match &v.t {
        T::Msg(m) => (m.clone(), v.ts.clone()),
        T::OptMsg(m) => {
            let ts = &v.ts;
            let what = cx.text(arg.value.span);
            (m.clone(), quote!(rt::protobuf::present(#ts, #what)?))
        }
        _ => return Err(cx.err(arg.value.span, "`include` takes a message")),
    };
    let mut target = None;
    for m in &fmt.tensors {
        if mapping_source(cx, fmt, root, m, &scope.entries)?.0 == msg {
            target = Some(m);
            break;
        }
    }
    let Some(target) = target else {
        return Err(cx.err(
            e.span,
            format!("no mapping of `{}` maps `{msg}` items", fmt.ast.name.name),
        ));
    };
    let name_only = skip.iter().any(|s| s == "name") && skip.iter().all(|s| s == "name");
    if let Some(f) = scope
        .parts
        .iter()
        .find(|f| f.msg == msg)
        .filter(|_| name_only)
    {
        let (name, src) = (&f.name, f.src.then(|| quote!(src,)));
        props.parts = Some(quote!(#name(#src #present)?));
        (props.dtype, props.shape, props.data, props.segment) = (None, None, None, None);
        scope.dtype = true;
        return Ok(());
    }
    let inner = target.binding.name.clone();
    if inner == scope.binding || scope.outer.iter().any(|(b, _)| *b == inner) {
        return Err(cx.unsupported(
            e.span,
            &format!("an included mapping whose binding `{inner}` is already bound"),
        ));
    }
    let id = rs_ident(&inner);
    let ty = rs_ident(&msg);
    props.prelude.push(quote!(let #id: &#ty<'_> = #present;));
    let mut outer = scope.outer.clone();
    outer.push((scope.binding.clone(), scope.binding_msg.clone()));
    let mut sub = Scope {
        fmt,
        outer,
        binding: inner,
        binding_msg: msg,
        dtype: scope.dtype,
        entries: scope.entries.clone(),
        parts: scope.parts.clone(),
    };
    compile_stmts(cx, fmt, root, &mut sub, target, props, depth + 1, skip)?;
    scope.dtype |= sub.dtype;
    Ok(())
}

/// The statements that compute `parts` (an `rt::TensorParts`) from `props`.
fn parts_stmts(cx: &Cx<'_>, map: &TensorMap, props: &Props) -> GResult<TokenStream> {
    if let Some(call) = &props.parts {
        return Ok(quote!(let parts = #call;));
    }
    let (Some(dtype), Some(shape), Some(data)) = (&props.dtype, &props.shape, &props.data) else {
        return Err(cx.err(
            map.span,
            "a protobuf mapping assigns name, dtype, shape and data",
        ));
    };
    let segment = props.segment.clone().unwrap_or_else(|| quote!(None));
    Ok(quote! {
        let (dtype, byte_order) = #dtype;
        let shape = #shape;
        let data = #data;
        let parts = rt::TensorParts { dtype, byte_order, shape, data, segment: #segment };
    })
}

/// The parts functions of `fmt`'s mappings: one for the first mapping over each message
/// whose dtype, shape and data read the item alone (no `include`, no other binding), for
/// its own item function and the `include`s of it to call.
pub(crate) fn parts_fns(
    cx: &Cx<'_>,
    fmt: &Fmt<'_>,
    root: &str,
    entries: &[EntryBind],
) -> GResult<(Vec<PartsFn>, Vec<TokenStream>)> {
    let mut fns: Vec<PartsFn> = Vec::new();
    let mut items = Vec::new();
    let mut seen = Vec::new();
    for (i, map) in fmt.tensors.iter().enumerate() {
        let (msg, _, _) = mapping_source(cx, fmt, root, map, entries)?;
        let includes = map
            .stmts
            .iter()
            .any(|s| matches!(s, TensorStmt::Include(_)));
        if seen.contains(&msg) {
            continue;
        }
        seen.push(msg.clone());
        if includes {
            continue;
        }
        let mut scope = Scope {
            fmt,
            outer: Vec::new(),
            binding: map.binding.name.clone(),
            binding_msg: msg.clone(),
            dtype: false,
            entries: Vec::new(),
            parts: Vec::new(),
        };
        let mut props = Props::default();
        let skip = ["name".to_string()];
        if compile_stmts(cx, fmt, root, &mut scope, map, &mut props, 0, &skip).is_err() {
            continue;
        }
        let Ok(body) = parts_stmts(cx, map, &props) else {
            continue;
        };
        let name = rs_ident(&snake(&msg));
        let src = mentions(&body, "src");
        let src_param = src.then(|| quote!(src: &rt::Source,));
        let (binding, ty) = (rs_ident(&map.binding.name), rs_ident(&msg));
        let doc = format!(
            " The dtype, shape and data of a `{msg}` as the mapping `tensor from {} as {}` reads them (and every `include` of it).",
            cx.text(map.source.span),
            map.binding.name
        );
        items.push(quote! {
            #[doc = #doc]
            fn #name(#src_param #binding: &#ty<'_>) -> rt::Result<rt::TensorParts> {
                #body
                Ok(parts)
            }
        });
        fns.push(PartsFn {
            msg,
            map: i,
            name,
            src,
        });
    }
    Ok((fns, items))
}

/// What a mapping's generated block adds its items to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Output {
    /// `rt::TensorInfo`s, one per item.
    Tensors,
}

/// The struct of a `kv` entry's record: `blob` → `BlobEntry`.
pub(crate) fn entry_struct(name: &str) -> proc_macro2::Ident {
    let camel: String = name
        .split('_')
        .filter(|w| !w.is_empty())
        .map(|w| {
            let mut ch = w.chars();
            match ch.next() {
                Some(f) => f.to_ascii_uppercase().to_string() + ch.as_str(),
                None => String::new(),
            }
        })
        .collect();
    rs_ident(&format!("{camel}Entry"))
}

/// The items a mapping walks to, from `start` (the root message or an entry's value):
/// an iterator (or an option, or a list) of `&M`.
fn items_expr(start: TokenStream, steps: &Steps) -> TokenStream {
    // What `cur` is: 0 the start (a message), 1 an `Option<&M>`, 2 a `&Vec<M>`, 3 an
    // iterator.
    let (mut cur, mut what) = (start, 0);
    for (seg, repeated) in steps {
        let id = rs_ident(&seg.name);
        (cur, what) = match (what, repeated) {
            (0, true) => (quote!(&#cur.#id), 2),
            (0, false) => (quote!(#cur.#id.as_deref()), 1),
            (1, true) => (quote!(#cur.into_iter().flat_map(|x| &x.#id)), 3),
            (1, false) => (quote!(#cur.and_then(|x| x.#id.as_deref())), 1),
            (2, true) => (quote!(#cur.iter().flat_map(|x| &x.#id)), 3),
            (2, false) => (quote!(#cur.iter().filter_map(|x| x.#id.as_deref())), 3),
            (_, true) => (quote!(#cur.flat_map(|x| &x.#id)), 3),
            (_, false) => (quote!(#cur.filter_map(|x| x.#id.as_deref())), 3),
        };
    }
    if what == 0 {
        quote!([&#cur])
    } else {
        cur
    }
}

/// One mapping: its item function (`fn graph_initializer(..)`: an item to its tensor or
/// chunk, `None` where `where` leaves it out), and the statement that maps the items
/// with it (`rt::protobuf::map_items`), for the function that has the root message (or
/// the entry's record) in scope.
pub(crate) struct Mapping {
    pub(crate) item_fn: TokenStream,
    pub(crate) call: TokenStream,
}

/// The tensors of one mapping.
pub(crate) fn gen_mapping(
    cx: &Cx<'_>,
    fmt: &Fmt<'_>,
    root: &str,
    map: &TensorMap,
    entries: &[EntryBind],
    parts: &[PartsFn],
    output: Output,
) -> GResult<Mapping> {
    let (msg, steps, origin) = mapping_source(cx, fmt, root, map, entries)?;
    let (start, mut fn_name) = match &origin {
        Origin::Root => (quote!(root), String::new()),
        Origin::Entry(e) => (quote!(value), e.clone()),
    };
    for (seg, _) in &steps {
        if !fn_name.is_empty() {
            fn_name.push('_');
        }
        fn_name.push_str(&seg.name);
    }
    if fn_name.is_empty() {
        fn_name = format!("{}_item", snake(&msg));
    }
    let mut scope = Scope {
        fmt,
        outer: Vec::new(),
        binding: map.binding.name.clone(),
        binding_msg: msg.clone(),
        dtype: false,
        entries: entries.to_vec(),
        parts: parts.to_vec(),
    };
    let filter = match &map.filter {
        Some(f) => {
            let v = scope.compile(cx, f)?;
            if !v.t.is(&T::Bool) {
                return Err(cx.err(f.span, "`where` is not a boolean"));
            }
            let ts = operand(BinaryOp::Eq, f, v.ts);
            quote!(if !#ts { return Ok(None); })
        }
        None => quote!(),
    };
    let mut props = Props::default();
    // The mapping's own parts function, when it has one.
    match parts.iter().find(|f| std::ptr::eq(fmt.tensors[f.map], map)) {
        Some(f) => {
            let skip: Vec<String> = map
                .stmts
                .iter()
                .filter_map(|s| match s {
                    TensorStmt::Assign { key, .. } if key.name != "name" => Some(key.name.clone()),
                    _ => None,
                })
                .collect();
            compile_stmts(cx, fmt, root, &mut scope, map, &mut props, 0, &skip)?;
            let (name, b) = (&f.name, rs_ident(&map.binding.name));
            let src = f.src.then(|| quote!(src,));
            props.parts = Some(quote!(#name(#src #b)?));
        }
        _ => compile_stmts(cx, fmt, root, &mut scope, map, &mut props, 0, &[])?,
    }
    let Some((name, _)) = props.name.clone() else {
        return Err(cx.err(
            map.span,
            "a protobuf mapping assigns name, dtype, shape and data",
        ));
    };
    let parts_stmts = parts_stmts(cx, map, &props)?;
    let prelude = &props.prelude;
    let finish = match output {
        Output::Tensors => {
            if props.segment.is_some() {
                return Err(cx.unsupported(map.span, "`segment` outside a `kv` format"));
            }
            quote!(parts.info(name).map(Some))
        }
    };
    let body = quote! {
        #filter
        #(#prelude)*
        let name = #name;
        #parts_stmts
        #finish
    };
    // Parameters: what the body uses, then the item.
    let mut params = Vec::new();
    let mut args = Vec::new();
    if mentions(&body, "src") {
        params.push(quote!(src: &rt::Source));
        args.push(quote!(src));
    }
    let out_ty = match output {
        Output::Tensors => quote!(rt::TensorInfo),
    };
    for en in entries {
        if mentions(&body, &en.name) {
            let (id, st) = (rs_ident(&en.name), entry_struct(&en.name));
            params.push(quote!(#id: &#st<'_, '_>));
            args.push(quote!(&#id));
        }
    }
    let position = mentions(&body, "position");
    if position {
        params.push(quote!(position: usize));
        args.push(quote!(position));
    }
    let binding = rs_ident(&map.binding.name);
    let item_ty = rs_ident(&msg);
    params.push(quote!(#binding: &#item_ty<'_>));
    args.push(quote!(#binding));
    let fn_id = rs_ident(&fn_name);
    let doc = format!(
        " The mapping `tensor from {} as {}`: the tensor of one item{}.",
        cx.text(map.source.span),
        map.binding.name,
        if map.filter.is_some() {
            " (`None`: its `where` leaves it out)"
        } else {
            ""
        }
    );
    let item_fn = quote! {
        #[doc = #doc]
        fn #fn_id(#(#params),*) -> rt::Result<Option<#out_ty>> {
            #body
        }
    };
    // An item's name for errors: the `name` field where the message has one.
    let has_name = fmt.ast.message(&msg).is_some_and(|m| {
        m.fields
            .iter()
            .any(|f| f.name.name == "name" && f.label != Label::Repeated)
    });
    let (name_of, prefix) = if has_name {
        (quote!(|x| x.name), String::new())
    } else {
        (quote!(|_| None), cx.text(map.source.span))
    };
    let items = items_expr(start, &steps);
    let pos = if position {
        quote!(position)
    } else {
        quote!(_)
    };
    let call = quote! {
        rt::protobuf::map_items(#items, #name_of, #prefix, out, |#binding, #pos| #fn_id(#(#args),*))?;
    };
    Ok(Mapping { item_fn, call })
}

/// The `protobuf` engine: message views, `detect`, `index` and a read-only writer.
pub(crate) fn gen_protobuf(
    cx: &Cx<'_>,
    _model: &Model<'_>,
    fmt: &Fmt<'_>,
    root: &Ident,
) -> GResult<TokenStream> {
    let Some(root_msg) = fmt.ast.message(&root.name) else {
        return Err(cx.err(root.span, format!("unknown message `{}`", root.name)));
    };
    let mut items = Vec::new();
    for m in fmt.ast.messages() {
        items.push(gen_message(cx, fmt, m)?);
    }
    items.push(gen_prost(cx, fmt)?);
    let (parts, parts_items) = parts_fns(cx, fmt, &root.name, &[])?;
    let mut item_fns = Vec::new();
    let mut calls = Vec::new();
    for map in &fmt.tensors {
        let m = gen_mapping(cx, fmt, &root.name, map, &[], &parts, Output::Tensors)?;
        item_fns.push(m.item_fn);
        calls.push(m.call);
    }
    let root_ty = rs_ident(&root.name);
    // Detection: the whole source walks as a message whose declared fields have their
    // declared wire types, with at least one of them present.
    let mut checks = Vec::new();
    let mut root_tags = Vec::new();
    for f in &root_msg.fields {
        let k = kind(cx, fmt, root_msg, f)?;
        let n = Literal::u32_unsuffixed(f.tag);
        let wire = match (&k, f.label == Label::Repeated) {
            (Kind::Varint, false) => quote!(Varint),
            (Kind::Float, false) => quote!(I32),
            (Kind::Double, false) => quote!(I64),
            _ => quote!(Len),
        };
        checks.push(quote!((#n, rt::protobuf::WireType::#wire)));
        root_tags.push(n);
    }
    let public = fmt.public_name().to_string();
    let writer = gen_writer(cx, fmt, &root.name)?;
    let desc = match &writer {
        Some(_) => crate::engine::desc_full(
            quote!(Ok(::std::boxed::Box::new(Writer::new(w, options)?))),
            " This format for the registry: name, extensions, detector, indexer, writer and rewriter.",
            false,
            true,
            None,
        ),
        None => {
            let read_only = format!("{public} is read-only");
            crate::engine::read_only_desc(&read_only, false)
        }
    };
    let detect_doc = format!(
        " True when the whole source reads as a `{}` message: every field it declares with its declared wire type, at least one of them present.",
        root.name
    );
    Ok(quote! {
        #(#items)*

        #[doc = #detect_doc]
        pub fn detect(src: &rt::Source, _limits: &rt::Limits) -> bool {
            src.bytes().is_some_and(|b| rt::protobuf::is_message(b.as_bytes(), &[#(#checks),*]))
        }

        /// Lists the tensors of `src` without reading their bytes: reads the root message in
        /// place, then maps its items.
        pub fn index(src: &rt::Source, limits: &rt::Limits) -> rt::Result<Vec<rt::TensorInfo>> {
            rt::protobuf::index(src, limits, |bytes, out| {
                let root: #root_ty<'_> = rt::protobuf::read(bytes, 0, 0, limits)?;
                #(#calls)*
                Ok(())
            })
        }

        #(#parts_items)*

        #(#item_fns)*

        #writer

        #desc
    })
}

// ---------------------------------------------------------------------------------------
// Writing

/// A value of a write rule.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum W {
    /// An integer (`i64`).
    Int,
    /// Text (`&str` or `String`).
    Str,
    /// A boolean.
    Bool,
    /// A dtype (`rt::DType`).
    Dtype,
    /// The shape (`&[u64]`).
    Shape,
    /// The tensor's bytes: the field they go to is the payload field.
    Data,
    /// A message under construction: `(messages::M, Option<u32>)` at the top of a rule,
    /// `messages::M` inside another.
    Msg(String),
    /// Items of a list (their type).
    List(Box<W>),
    /// A message already encoded (`Vec<u8>`): it holds the tensor's elements in a
    /// field that is encoded from them (`float_data = data`).
    Encoded(String),
}

pub(crate) struct WV {
    pub(crate) ts: TokenStream,
    pub(crate) t: W,
    /// The values an integer can take, when they are known here (literals, table keys).
    pub(crate) range: Option<(i64, i64)>,
}

/// Compiles write rules: the mapping's `write = ...` (with the tensor's `name`, `dtype`,
/// `shape`, `data` and its placement: `external`, `location`, `offset`, `nbytes`) and the
/// `[write = ...]` options of message fields (literals and messages only).
pub(crate) struct WriteCx<'f, 's> {
    pub(crate) fmt: &'f Fmt<'s>,
    pub(crate) tensor: bool,
    /// The top message's `bytes` field given `data` is streamed after it (ONNX's
    /// `raw_data`); otherwise `data` is encoded into its field in memory (`data` is then
    /// a `&[u8]` in scope, and `begin`, `end` the elements it holds).
    pub(crate) stream: bool,
}

impl WriteCx<'_, '_> {
    pub(crate) fn compile(&self, cx: &Cx<'_>, e: &Expr, top: bool) -> GResult<WV> {
        let atom = |ts: TokenStream, t: W| Ok(WV { ts, t, range: None });
        match &e.kind {
            ExprKind::Int(i) => {
                let v = i64::try_from(*i)
                    .map_err(|_| cx.unsupported(e.span, "an integer outside the i64 range"))?;
                let l = Literal::i64_unsuffixed(v);
                Ok(WV {
                    ts: quote!(#l),
                    t: W::Int,
                    range: Some((v, v)),
                })
            }
            ExprKind::Str(s) => atom(quote!(#s), W::Str),
            ExprKind::Bool(b) => atom(quote!(#b), W::Bool),
            ExprKind::Path(p) => {
                let names: Vec<&str> = p.iter().map(|i| i.name.as_str()).collect();
                if self.tensor {
                    match names.as_slice() {
                        ["name"] => return atom(quote!(meta.name), W::Str),
                        ["dtype"] => return atom(quote!(meta.dtype), W::Dtype),
                        ["shape"] => return atom(quote!(meta.shape), W::Shape),
                        ["data"] => return atom(quote!(()), W::Data),
                        ["external"] => return atom(quote!(place.external), W::Bool),
                        ["location"] => return atom(quote!(place.location), W::Str),
                        ["offset"] => return atom(quote!(place.offset as i64), W::Int),
                        ["nbytes"] => return atom(quote!(place.nbytes as i64), W::Int),
                        ["begin"] if !self.stream => return atom(quote!(begin as i64), W::Int),
                        ["end"] if !self.stream => return atom(quote!(end as i64), W::Int),
                        _ => {}
                    }
                }
                if let [one] = names.as_slice() {
                    if let Some(d) = dtype_variant(one) {
                        return atom(d, W::Dtype);
                    }
                }
                if let [m, en, val] = p.as_slice() {
                    if let Some(msg) = self.fmt.ast.message(&m.name) {
                        if let Some(decl) = msg.enums.iter().find(|x| x.name.name == en.name) {
                            if let Some((_, n)) =
                                decl.values.iter().find(|(i, _)| i.name == val.name)
                            {
                                let l = Literal::i64_unsuffixed(*n);
                                return Ok(WV {
                                    ts: quote!(#l),
                                    t: W::Int,
                                    range: Some((*n, *n)),
                                });
                            }
                        }
                    }
                }
                Err(cx.unsupported(
                    e.span,
                    &format!("the name `{}` in a write rule", cx.text(e.span)),
                ))
            }
            ExprKind::List(items) => {
                let mut ts = Vec::new();
                let mut t = None;
                for x in items {
                    let v = self.compile(cx, x, false)?;
                    if t.as_ref().is_some_and(|t| *t != v.t) {
                        return Err(cx.err(x.span, "list items of different kinds"));
                    }
                    t = Some(v.t);
                    ts.push(v.ts);
                }
                Ok(WV {
                    ts: quote!(Vec::from([#(#ts),*])),
                    t: W::List(Box::new(t.unwrap_or(W::Int))),
                    range: None,
                })
            }
            ExprKind::Unary {
                op: UnaryOp::Not,
                expr,
            } => {
                let v = self.compile(cx, expr, false)?;
                if v.t != W::Bool {
                    return Err(cx.err(expr.span, "`!` of a value that is not a boolean"));
                }
                let ts = operand(BinaryOp::Eq, expr, v.ts);
                atom(quote!(!#ts), W::Bool)
            }
            ExprKind::Binary { op, lhs, rhs } => {
                let (l, r) = (self.compile(cx, lhs, false)?, self.compile(cx, rhs, false)?);
                let (lt, rt_) = (&l.ts, &r.ts);
                let same = l.t == r.t && matches!(l.t, W::Int | W::Dtype | W::Bool | W::Str);
                let (lt, rt_) = (
                    operand(*op, lhs, lt.clone()),
                    operand(*op, rhs, rt_.clone()),
                );
                let ts = match op {
                    BinaryOp::Eq if same => quote!(#lt == #rt_),
                    BinaryOp::Ne if same => quote!(#lt != #rt_),
                    BinaryOp::And if l.t == W::Bool && r.t == W::Bool => quote!(#lt && #rt_),
                    BinaryOp::Or if l.t == W::Bool && r.t == W::Bool => quote!(#lt || #rt_),
                    _ => return Err(cx.unsupported(e.span, "this operation in a write rule")),
                };
                atom(ts, W::Bool)
            }
            ExprKind::In { expr, list } => {
                let v = self.compile(cx, expr, false)?;
                let mut items = Vec::new();
                for x in list {
                    let xv = self.compile(cx, x, false)?;
                    if xv.t != v.t || !matches!(v.t, W::Dtype | W::Int) {
                        return Err(cx.unsupported(x.span, "this `in` list"));
                    }
                    items.push(xv.ts);
                }
                let ts = &v.ts;
                atom(quote!(matches!(#ts, #(#items)|*)), W::Bool)
            }
            ExprKind::If {
                cond,
                then,
                otherwise,
            } => {
                let c = self.compile(cx, cond, false)?;
                if c.t != W::Bool {
                    return Err(cx.err(cond.span, "the condition is not a boolean"));
                }
                let a = self.compile(cx, then, top)?;
                let b = self.compile(cx, otherwise, top)?;
                if a.t != b.t {
                    return Err(cx.err(e.span, "the branches of this `if` differ in kind"));
                }
                let (cts, ats, bts) = (&c.ts, &a.ts, &b.ts);
                Ok(WV {
                    ts: if_else(cts, ats, otherwise, bts),
                    t: a.t,
                    range: None,
                })
            }
            ExprKind::Call { callee, args } => {
                let name = expr::join(callee);
                match (name.as_str(), args.as_slice()) {
                    ("str", [a]) => {
                        let v = self.compile(cx, &a.value, false)?;
                        if v.t != W::Int {
                            return Err(cx.err(a.span, "`str` takes an integer"));
                        }
                        let ts = v.ts;
                        let ts = if ts.to_string().contains(" as ") {
                            quote!((#ts))
                        } else {
                            ts
                        };
                        atom(quote!(#ts.to_string()), W::Str)
                    }
                    ("key_of", [t, d]) => self.key_of(cx, e, &t.value, &d.value),
                    _ if callee.len() == 1 && self.fmt.ast.message(&name).is_some() => {
                        self.message(cx, &name, args, top)
                    }
                    _ => Err(cx.unsupported(e.span, &format!("`{name}(..)` in a write rule"))),
                }
            }
            _ => Err(cx.unsupported(e.span, &format!("`{}` in a write rule", cx.text(e.span)))),
        }
    }

    /// `key_of(T, dtype)`: the key of the first row of table `T` with the dtype (stored
    /// little-endian, as protobuf formats write elements), by the table's reverse lookup.
    fn key_of(&self, cx: &Cx<'_>, e: &Expr, t: &Expr, d: &Expr) -> GResult<WV> {
        let ExprKind::Path(tp) = &t.kind else {
            return Err(cx.err(t.span, "`key_of` takes a table"));
        };
        let Some(table) = self.fmt.table(&tp[0].name).filter(|_| tp.len() == 1) else {
            return Err(cx.err(t.span, format!("unknown table `{}`", cx.text(t.span))));
        };
        if table.key_kind != KeyKind::Int {
            return Err(cx.unsupported(e.span, "`key_of` of a table with text keys here"));
        }
        let dv = self.compile(cx, d, false)?;
        if dv.t != W::Dtype {
            return Err(cx.err(d.span, "`key_of` takes a dtype"));
        }
        let table_name = table.name.name.clone();
        let rev = rs_ident(&format!("{table_name}_for"));
        let dts = dv.ts;
        let keys = table.rows.iter().filter_map(|r| match r.key {
            TableKey::Int(k) => i64::try_from(k).ok(),
            _ => None,
        });
        let range = keys.clone().min().zip(keys.max());
        Ok(WV {
            ts: quote!(rt::protobuf::key_of(#rev, #table_name, #dts)?),
            t: W::Int,
            range,
        })
    }

    /// `M(field = value, ...)`: the prost message with those fields set; with the
    /// tensor's elements in one of its fields (or in a message in one), the message
    /// encoded.
    fn message(&self, cx: &Cx<'_>, name: &str, args: &[Arg], top: bool) -> GResult<WV> {
        let m = self.fmt.ast.message(name).expect("checked");
        let ty = rs_ident(name);
        let mut sets = Vec::new();
        // What is added to the encoded message: elements, and messages encoded already
        // (bound first).
        let mut extras: Vec<(Literal, TokenStream)> = Vec::new();
        let mut lets = Vec::new();
        let mut payload = None;
        for a in args {
            let Some(n) = &a.name else {
                return Err(cx.err(a.span, "a message takes named fields: `M(field = value)`"));
            };
            let Some(f) = m.fields.iter().find(|f| f.name.name == n.name) else {
                return Err(cx.err(n.span, format!("`{name}` has no field `{}`", n.name)));
            };
            let id = rs_ident(&f.name.name);
            let tag = Literal::u32_unsuffixed(f.tag);
            let v = self.compile(cx, &a.value, false)?;
            let k = kind(cx, self.fmt, m, f)?;
            let repeated = f.label == Label::Repeated;
            match &v.t {
                W::Data if self.stream => {
                    if !top {
                        return Err(cx.unsupported(a.span, "`data` in a nested message"));
                    }
                    if repeated || k != Kind::Bytes {
                        return Err(cx.unsupported(a.span, "`data` in a field that is not `bytes`"));
                    }
                    payload = Some(tag);
                }
                W::Data => {
                    let holder = match (&k, repeated) {
                        (Kind::Float, true) => quote!(rt::protobuf::Holder::Float),
                        (Kind::Double, true) => quote!(rt::protobuf::Holder::Double),
                        (Kind::Varint, true) => quote!(rt::protobuf::Holder::Varint),
                        (Kind::Bytes | Kind::Str, false) => quote!(rt::protobuf::Holder::Bytes),
                        (Kind::Bytes | Kind::Str, true) => quote!(rt::protobuf::Holder::Strings),
                        _ => {
                            return Err(cx.unsupported(
                                a.span,
                                "`data` in a field that cannot hold elements",
                            ))
                        }
                    };
                    extras.push((
                        tag,
                        quote!(rt::protobuf::Extra::Elements(#holder, meta.dtype, data)),
                    ));
                }
                W::Encoded(inner) => {
                    if repeated || k != Kind::Msg(inner.clone()) {
                        return Err(cx.err(
                            a.span,
                            format!("this value does not fit field `{name}.{}`", n.name),
                        ));
                    }
                    let vts = v.ts;
                    lets.push(quote!(let #id = #vts;));
                    extras.push((tag, quote!(rt::protobuf::Extra::Message(&#id))));
                }
                _ => sets.push(self.assign(cx, m, f, &id, v, a.span)?),
            }
        }
        let rest = if sets.len() < m.fields.len() {
            quote!(..Default::default())
        } else {
            quote!()
        };
        let build = quote!(messages::#ty {
            #(#sets)*
            #rest
        });
        if !extras.is_empty() {
            let encoded = quote!(::prost::Message::encode_to_vec(&#build));
            let adds = extras.iter().map(|(tag, add)| quote!((#tag, #add)));
            let mut ts = quote!(rt::protobuf::append(#encoded, [#(#adds),*])?);
            if !lets.is_empty() {
                ts = quote!({ #(#lets)* #ts });
            }
            return Ok(WV {
                ts,
                t: W::Encoded(name.to_string()),
                range: None,
            });
        }
        if top && self.stream {
            let p = match payload {
                Some(n) => quote!(Some(#n)),
                None => quote!(None),
            };
            Ok(WV {
                ts: quote!((#build, #p)),
                t: W::Msg(name.to_string()),
                range: None,
            })
        } else {
            Ok(WV {
                ts: build,
                t: W::Msg(name.to_string()),
                range: None,
            })
        }
    }

    /// `m.field = v`, converted to the prost field's type.
    fn assign(
        &self,
        cx: &Cx<'_>,
        m: &Message,
        f: &MessageField,
        id: &proc_macro2::Ident,
        v: WV,
        span: Span,
    ) -> GResult<TokenStream> {
        let k = kind(cx, self.fmt, m, f)?;
        let last = f.ty.path.last().map(|i| i.name.as_str()).unwrap_or("");
        let what = format!("{}.{}", m.name.name, f.name.name);
        let vts = v.ts;
        // An integer literal, checked here against the field's type.
        let literal = vts
            .to_string()
            .trim_end_matches("i64")
            .trim()
            .parse::<i64>()
            .ok();
        let fits = |n: i64| match last {
            "int64" => true,
            "uint32" => u32::try_from(n).is_ok(),
            "uint64" => n >= 0,
            _ => i32::try_from(n).is_ok(),
        };
        let value = match (&k, f.label == Label::Repeated, &v.t) {
            (Kind::Varint, false, W::Int) if last == "bool" => quote!(#vts != 0),
            (Kind::Varint, false, W::Bool) if last == "bool" => quote!(#vts),
            (Kind::Varint, false, W::Int) if literal.is_some_and(fits) => {
                let l = Literal::i64_unsuffixed(literal.unwrap_or_default());
                quote!(#l)
            }
            // A table's key: converted by `key_of` to the field's type.
            (Kind::Varint, false, W::Int)
                if vts.to_string().starts_with("rt :: protobuf :: key_of") =>
            {
                vts
            }
            // Every value it can take fits: converted as it is.
            (Kind::Varint, false, W::Int)
                if last != "int64" && v.range.is_some_and(|(a, b)| fits(a) && fits(b)) =>
            {
                let ty = match last {
                    "uint32" => quote!(u32),
                    "uint64" => quote!(u64),
                    _ => quote!(i32),
                };
                quote!(#vts as #ty)
            }
            (Kind::Varint, false, W::Int) if last == "int64" => quote!(#vts),
            (Kind::Varint, false, W::Int) => quote!(rt::protobuf::narrow(#vts, #what)?),
            (Kind::Str, false, W::Str) if vts.to_string().ends_with("to_string ()") => vts,
            (Kind::Str, false, W::Str) => quote!(#vts.to_string()),
            (Kind::Bytes, false, W::Str) => quote!(#vts.as_bytes().to_vec()),
            (Kind::Varint, true, W::Shape) => quote!(rt::protobuf::ints(&#vts, #what)?),
            (Kind::Msg(n), false, W::Msg(got)) if n == got => quote!(#vts),
            (Kind::Msg(n), true, W::List(t)) if matches!(&**t, W::Msg(got) if got == n) => {
                quote!(#vts)
            }
            _ => return Err(cx.err(span, format!("this value does not fit field `{what}`"))),
        };
        let optional = f.label == Label::Optional;
        Ok(if optional {
            quote!(#id: Some(#value),)
        } else {
            quote!(#id: #value,)
        })
    }
}

/// The `write = ...` option of a message field.
fn field_write(f: &MessageField) -> Option<&Expr> {
    f.options
        .iter()
        .find(|a| a.name.as_ref().is_some_and(|n| n.name == "write"))
        .map(|a| &a.value)
}

/// The writer of a protobuf format whose (first) mapping has a `write` rule: a new
/// document holds the messages on the mapping's path with their fields' `[write = ...]`
/// values and one item per tensor; `rewrite` replaces items of an existing document.
fn gen_writer(cx: &Cx<'_>, fmt: &Fmt<'_>, root: &str) -> GResult<Option<TokenStream>> {
    let Some(map) = fmt.tensors.first() else {
        return Ok(None);
    };
    let Some(rule) = map.stmts.iter().find_map(|s| match s {
        TensorStmt::Assign { key, value, .. } if key.name == "write" => Some(value),
        _ => None,
    }) else {
        return Ok(None);
    };
    let (item_msg, steps, _) = mapping_source(cx, fmt, root, map, &[])?;
    let Some((last, repeated)) = steps.last() else {
        return Err(cx.unsupported(map.source.span, "writing tensors at the root"));
    };
    if !repeated {
        return Err(cx.unsupported(last.span, "writing tensors to a field that is not repeated"));
    }
    let wcx = WriteCx {
        fmt,
        tensor: true,
        stream: true,
    };
    let rule_v = wcx.compile(cx, rule, true)?;
    if rule_v.t != W::Msg(item_msg.clone()) {
        return Err(cx.err(
            rule.span,
            format!("the write rule does not make a `{item_msg}`"),
        ));
    }
    let rule_ts = rule_v.ts;
    let item_ty = rs_ident(&item_msg);

    // The messages on the path: a constructor each, with the `[write = ...]` fields.
    let fields_cx = WriteCx {
        fmt,
        tensor: false,
        stream: true,
    };
    let mut ctors = Vec::new();
    let mut opens = Vec::new();
    let mut numbers = Vec::new();
    let mut msg = root.to_string();
    for (i, (seg, _)) in steps.iter().enumerate() {
        let m = fmt.ast.message(&msg).expect("checked by mapping_source");
        let f = m
            .fields
            .iter()
            .find(|f| f.name.name == seg.name)
            .expect("checked");
        let mut sets = Vec::new();
        for g in &m.fields {
            if let Some(e) = field_write(g) {
                let v = fields_cx.compile(cx, e, false)?;
                let id = rs_ident(&g.name.name);
                sets.push(fields_cx.assign(cx, m, g, &id, v, e.span)?);
            }
        }
        let ty = rs_ident(&msg);
        let fn_name = rs_ident(&format!("new_{}", snake(&msg)));
        let doc = format!(
            " A new `{}`: its fields with a `write` option, before its `{}` field.",
            msg, seg.name
        );
        let rest = if sets.len() < m.fields.len() {
            quote!(..Default::default())
        } else {
            quote!()
        };
        ctors.push(quote! {
            #[doc = #doc]
            pub fn #fn_name() -> rt::Result<messages::#ty> {
                Ok(messages::#ty {
                    #(#sets)*
                    #rest
                })
            }
        });
        let n = Literal::u32_unsuffixed(f.tag);
        numbers.push(n.clone());
        if i + 1 < steps.len() {
            opens.push(quote! {
                doc.raw(&::prost::Message::encode_to_vec(&#fn_name()?))?;
                doc.open(#n)?;
            });
        } else {
            opens.push(quote! {
                doc.raw(&::prost::Message::encode_to_vec(&#fn_name()?))?;
            });
        }
        let Kind::Msg(next) = kind(cx, fmt, m, f)? else {
            unreachable!("checked by mapping_source")
        };
        msg = next;
    }
    let items_n = numbers.pop().expect("one step at least");
    let depth = Literal::u64_unsuffixed(steps.len() as u64);
    let public = fmt.public_name().to_string();
    let writer_doc = format!(
        " A streaming writer of `{public}` documents: the messages down to `{}` with their `write` values, then one item per tensor (its `write` rule), payloads streamed inline or to external files as `WriteOptions::external` says.",
        cx.text(map.source.span)
    );
    let path = numbers.clone();
    let tensors_doc = format!(
        " Where `{public}` documents keep their tensors: the items of `{}`.",
        cx.text(map.source.span)
    );
    Ok(Some(quote! {
        #(#ctors)*

        #[doc = #tensors_doc]
        pub const TENSORS: rt::protodoc::TensorField = rt::protodoc::TensorField {
            path: &[#(#path),*],
            items: #items_n,
            format: NAME,
        };

        /// The item written for one tensor placed at `place` (the mapping's `write` rule),
        /// encoded without its payload, and the field its bytes go to when they are
        /// inline.
        pub fn tensor_item(
            meta: &rt::TensorMeta,
            place: &rt::protodoc::Placement,
        ) -> rt::Result<(Vec<u8>, Option<u32>)> {
            let (item, payload): (messages::#item_ty, Option<u32>) = #rule_ts;
            Ok((::prost::Message::encode_to_vec(&item), payload))
        }

        #[doc = #writer_doc]
        pub struct Writer<'a> {
            doc: rt::protodoc::DocWriter<'a>,
        }

        impl<'a> Writer<'a> {
            /// Starts a new document on `w`.
            pub fn new(
                w: Box<dyn rt::WriteSeek + 'a>,
                options: &rt::WriteOptions,
            ) -> rt::Result<Self> {
                let mut doc = rt::protodoc::DocWriter::new(w, options.external.clone(), options.destination.clone());
                #(#opens)*
                Ok(Writer { doc })
            }
        }

        impl rt::TensorWriter for Writer<'_> {
            fn add(&mut self, meta: &rt::TensorMeta, data: rt::Payload<'_>) -> rt::Result<()> {
                self.doc.add_tensor(&TENSORS, meta, data, &tensor_item)
            }

            fn finish(self: Box<Self>) -> rt::Result<()> {
                self.doc.finish()
            }
        }

        /// Rewrites the document `src` to `w`: every field is copied as it is, except the
        /// tensors for which `replace` (given each tensor's name) returns a replacement,
        /// written where `options.external` places them. Returns the external files
        /// written, synced, for the caller to commit before the document.
        pub fn rewrite<'a, 'b>(
            src: &rt::Source,
            w: Box<dyn rt::WriteSeek + 'a>,
            options: &rt::WriteOptions,
            limits: &rt::Limits,
            replace: &mut dyn FnMut(&str) -> rt::Result<Option<rt::protodoc::Replacement<'b>>>,
        ) -> rt::Result<Vec<rt::AtomicFile>> {
            let name_of = |b: &[u8], at: u64| -> rt::Result<String> {
                let item: #item_ty<'_> = rt::protobuf::read(b, at, #depth, limits)?;
                Ok(item.name.unwrap_or("").to_string())
            };
            rt::protodoc::rewrite_tensors(src, w, options, &TENSORS, replace, &name_of, &tensor_item)
        }
    }))
}
