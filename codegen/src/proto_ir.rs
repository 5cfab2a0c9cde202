//! Protobuf messages from the typed IR, for the engines that read them (`kv` today): a
//! view type per message read in place (`rt::protobuf::View`), the owned `prost` types
//! (module `messages`), the tensor mappings over messages (a parts function per message
//! that `include`s call, an item function per mapping and the `rt::protobuf::map_items`
//! call that runs it) and the write rules that build messages (`M(field = value, ...)`).
//!
//! Expressions are lowered by [`crate::lower`]; this module's [`Env`]s say what is in
//! reach: the mapping's binding (a view `&M`), a kv record's entry (`blob.value`, its key's
//! captures), the item's position, the mapped `dtype`, and in write rules the tensor
//! being written (`meta`, `data`, `begin`, `end`). A message value is a view reference
//! ([`Form::Ref`]) or, when it may be absent, an `Option<&M>` ([`Form::Value`]).

use proc_macro2::{Ident, Literal, TokenStream};
use quote::quote;
use tensorfmt_schema::ast::{Label, SchemaFile, Span};
use tensorfmt_schema::ir::{
    self, Builtin, Const, EntryId, Expr, ExprKind, FormatId, IntTy, Ir, MappingId, MappingStmt,
    Member, MessageId, ProtoScalar, ProtoType, TensorKey, Type, WriteVar,
};

use crate::lower::{if_else, Env, Form, Lower, Unlowered, Val};
use crate::model::{docs, rs_ident};

type R<T> = Result<T, Unlowered>;

fn no(span: Span, what: impl Into<String>) -> Unlowered {
    Unlowered {
        span,
        what: what.into(),
    }
}

/// The schema and its sources (for the text of expressions in error messages).
#[derive(Clone, Copy)]
pub(crate) struct Src<'a> {
    /// The IR.
    pub ir: &'a Ir,
    /// The schema's files.
    pub files: &'a [SchemaFile],
}

impl Src<'_> {
    /// The text of `span` in the file of format `fid`.
    fn text(&self, fid: FormatId, span: Span) -> String {
        let src = &self.files[self.ir.format(fid).file].source;
        src.get(span.start..span.end).unwrap_or("").to_string()
    }
}

/// How a declared field lies on the wire and what its view holds.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    /// A varint read as `i64` (integers, bools, enums).
    Varint,
    /// A zigzag varint (`sint32`, `sint64`).
    Sint,
    /// Four bytes (`fixed32`; signed: `sfixed32`).
    Fixed32(bool),
    /// Eight bytes (`fixed64`, `sfixed64`).
    Fixed64,
    /// `float`.
    Float,
    /// `double`.
    Double,
    /// `string`, held as `&str`.
    Str,
    /// `bytes`, held as the slice and its absolute offset.
    Bytes,
    /// An embedded message.
    Msg(MessageId),
}

fn kind(p: ProtoType) -> Kind {
    use ProtoScalar as S;
    match p {
        ProtoType::Message(m) => Kind::Msg(m),
        ProtoType::Enum(_) => Kind::Varint,
        ProtoType::Scalar(s) => match s {
            S::Int32 | S::Int64 | S::Uint32 | S::Uint64 | S::Bool => Kind::Varint,
            S::Sint32 | S::Sint64 => Kind::Sint,
            S::Fixed32 => Kind::Fixed32(false),
            S::Sfixed32 => Kind::Fixed32(true),
            S::Fixed64 | S::Sfixed64 => Kind::Fixed64,
            S::Float => Kind::Float,
            S::Double => Kind::Double,
            S::String => Kind::Str,
            S::Bytes => Kind::Bytes,
        },
    }
}

/// A message's type name: its name, or for a nested message its dotted path run
/// together (`TensorProto.Segment` → `TensorProtoSegment`).
fn type_name(ir: &Ir, m: MessageId) -> String {
    let msg = ir.message(m);
    match msg.parent {
        None => msg.name.clone(),
        Some(_) => msg.path.replace('.', ""),
    }
}

/// `TensorProto` → `tensor_proto`.
pub(crate) fn snake(name: &str) -> String {
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

/// The path of message `m`'s view from the module of format `here`.
pub(crate) fn view_path(ir: &Ir, here: FormatId, m: MessageId) -> TokenStream {
    let id = rs_ident(&type_name(ir, m));
    let f = ir.message(m).format;
    if f == here {
        quote!(#id)
    } else {
        let module = rs_ident(&ir.format(f).name);
        quote!(super::#module::#id)
    }
}

/// The path of message `m`'s prost type from the module of format `here` (`nested`:
/// from its `messages` module).
fn prost_path(ir: &Ir, here: FormatId, m: MessageId, nested: bool) -> TokenStream {
    let id = rs_ident(&type_name(ir, m));
    let f = ir.message(m).format;
    match (f == here, nested) {
        (true, true) => quote!(#id),
        (true, false) => quote!(messages::#id),
        (false, true) => {
            let module = rs_ident(&ir.format(f).name);
            quote!(super::super::#module::messages::#id)
        }
        (false, false) => {
            let module = rs_ident(&ir.format(f).name);
            quote!(super::#module::messages::#id)
        }
    }
}

/// Every message of format `fid`, nested ones after their parent, in declaration order.
pub(crate) fn messages_of(ir: &Ir, fid: FormatId) -> Vec<MessageId> {
    fn walk(ir: &Ir, m: MessageId, out: &mut Vec<MessageId>) {
        out.push(m);
        for &n in &ir.message(m).messages {
            walk(ir, n, out);
        }
    }
    let mut out = Vec::new();
    for &m in &ir.format(fid).messages {
        walk(ir, m, &mut out);
    }
    out
}

fn field_doc(docs_: &[String], tag: u32, name: &str) -> TokenStream {
    if docs_.is_empty() {
        let d = format!(" Field {tag} (`{name}`).");
        quote!(#[doc = #d])
    } else {
        docs(docs_)
    }
}

/// The view type of message `m` and its `rt::protobuf::View` impl: a field of the view
/// per declared field (repeated numbers are left where they are, for the mapping to
/// read), one `match` arm each that decodes it.
pub(crate) fn gen_view(ir: &Ir, m: MessageId) -> TokenStream {
    let msg = ir.message(m);
    let ty = rs_ident(&type_name(ir, m));
    let doc = docs(&msg.docs);
    let mut fields = Vec::new();
    let mut arms = Vec::new();
    let mut nested = false;
    for f in &msg.fields {
        let k = kind(f.proto);
        let id = rs_ident(&f.name);
        let num = Literal::u32_unsuffixed(f.tag);
        let fdoc = field_doc(&f.docs, f.tag, &f.name);
        let what = format!("{}.{}", msg.name, f.name);
        let repeated = f.label == Label::Repeated;
        let (held, value) = match k {
            Kind::Str => (quote!(&'a str), quote!(f.str(#what)?)),
            Kind::Bytes => (quote!((&'a [u8], u64)), quote!(f.bytes(#what)?)),
            Kind::Msg(sub) => {
                nested = true;
                let sub = view_path(ir, msg.format, sub);
                (quote!(#sub<'a>), quote!(f.message(#what, depth, limits)?))
            }
            // Read where they are, by the mapping.
            _ if repeated => continue,
            Kind::Varint => (quote!(i64), quote!(f.varint(#what)?)),
            Kind::Sint => (quote!(i64), quote!(f.sint(#what)?)),
            Kind::Fixed32(signed) => (quote!(i64), quote!(f.fixed32(#what, #signed)?)),
            Kind::Fixed64 => (quote!(i64), quote!(f.fixed64(#what)?)),
            Kind::Float => (quote!(f32), quote!(f.float(#what)?)),
            Kind::Double => (quote!(f64), quote!(f.double(#what)?)),
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
    let name = &msg.name;
    let (depth, limits) = if nested {
        (quote!(depth), quote!(limits))
    } else {
        (quote!(_depth), quote!(_limits))
    };
    quote! {
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
    }
}

/// An enum as a `prost::Enumeration`.
fn gen_prost_enum(e: &ir::Enum) -> TokenStream {
    let ty = rs_ident(&e.name);
    let doc = if e.docs.is_empty() {
        let d = format!(" `{}` values.", e.name);
        quote!(#[doc = #d])
    } else {
        docs(&e.docs)
    };
    let variants = e.values.iter().map(|(name, n)| {
        let v = rs_ident(&camel(name));
        let d = format!(" `{name}` ({n}).");
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

/// The prost attribute path of enum `e` from the `messages` module of format `here`.
fn prost_enum_path(ir: &Ir, here: FormatId, e: ir::EnumId) -> String {
    let en = ir.enum_(e);
    let local = match en.parent {
        Some(p) => format!("{}::{}", snake(&type_name(ir, p)), en.name),
        None => en.name.clone(),
    };
    if en.format == here {
        local
    } else {
        format!(
            "super::super::{}::messages::{local}",
            ir.format(en.format).name
        )
    }
}

/// The owned `prost` message types of every message of format `fid` (module
/// `messages`): the declared fields only, for building and decoding messages with prost.
/// The readers and writers of the format work on the wire in place and keep undeclared
/// fields; these types drop them.
pub(crate) fn gen_prost(ir: &Ir, fid: FormatId) -> TokenStream {
    use ProtoScalar as S;
    let mut items = Vec::new();
    for m in messages_of(ir, fid) {
        let msg = ir.message(m);
        let ty = rs_ident(&type_name(ir, m));
        let doc = docs(&msg.docs);
        let mut fields = Vec::new();
        for f in &msg.fields {
            let id = rs_ident(&f.name);
            let tag = f.tag.to_string();
            let fdoc = field_doc(&f.docs, f.tag, &f.name);
            let (attr_ty, rust_ty): (TokenStream, TokenStream) = match f.proto {
                ProtoType::Enum(e) => {
                    let path = prost_enum_path(ir, fid, e);
                    (quote!(enumeration = #path), quote!(i32))
                }
                ProtoType::Message(sub) => (quote!(message), prost_path(ir, fid, sub, true)),
                ProtoType::Scalar(s) => match s {
                    S::Int32 => (quote!(int32), quote!(i32)),
                    S::Int64 => (quote!(int64), quote!(i64)),
                    S::Uint32 => (quote!(uint32), quote!(u32)),
                    S::Uint64 => (quote!(uint64), quote!(u64)),
                    S::Sint32 => (quote!(sint32), quote!(i32)),
                    S::Sint64 => (quote!(sint64), quote!(i64)),
                    S::Fixed32 => (quote!(fixed32), quote!(u32)),
                    S::Fixed64 => (quote!(fixed64), quote!(u64)),
                    S::Sfixed32 => (quote!(sfixed32), quote!(i32)),
                    S::Sfixed64 => (quote!(sfixed64), quote!(i64)),
                    S::Bool => (quote!(bool), quote!(bool)),
                    S::Float => (quote!(float), quote!(f32)),
                    S::Double => (quote!(double), quote!(f64)),
                    S::String => (quote!(string), quote!(::prost::alloc::string::String)),
                    S::Bytes => (quote!(bytes = "vec"), quote!(::prost::alloc::vec::Vec<u8>)),
                },
            };
            let is_msg = matches!(f.proto, ProtoType::Message(_));
            let scalar = !is_msg
                && !matches!(
                    f.proto,
                    ProtoType::Scalar(ProtoScalar::String | ProtoScalar::Bytes)
                );
            let (label, rust_ty) = match f.label {
                Label::Optional => (quote!(optional), quote!(::core::option::Option<#rust_ty>)),
                Label::Required if is_msg => {
                    (quote!(required), quote!(::core::option::Option<#rust_ty>))
                }
                Label::Required => (quote!(required), rust_ty),
                Label::Repeated if scalar => {
                    let p = if f.packed { "true" } else { "false" };
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
        let enums: Vec<TokenStream> = msg
            .enums
            .iter()
            .map(|&e| gen_prost_enum(ir.enum_(e)))
            .collect();
        let enum_mod = if enums.is_empty() {
            quote!()
        } else {
            let mod_id = rs_ident(&snake(&type_name(ir, m)));
            let d = format!(" Enums nested in `{}`.", msg.name);
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
    for &e in &ir.format(fid).enums {
        items.push(gen_prost_enum(ir.enum_(e)));
    }
    let doc = format!(
        " The messages of `{}` as owned `prost` types, their declared fields only (encode and decode with `prost::Message`; undeclared fields are dropped on decode, where the format's own reader and writer keep them).",
        ir.format(fid).name
    );
    quote! {
        #[doc = #doc]
        pub mod messages {
            #(#items)*
        }
    }
}

// ---------------------------------------------------------------------------------------
// Mappings

/// The struct of a `kv` entry's record: `blob` → `BlobEntry`.
pub(crate) fn entry_struct(name: &str) -> Ident {
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

/// What a mapping's source walks: the entry whose value it starts at, and the message
/// fields from there to the items (each with whether it is repeated).
pub(crate) struct Source {
    /// The entry.
    pub entry: EntryId,
    /// The fields walked.
    pub steps: Vec<(String, bool)>,
    /// The items' message.
    pub item: MessageId,
}

/// The source of a mapping over a kv entry's value (`blob.value.tensor`); `None` for
/// another source (which the checker rejects in a kv format).
pub(crate) fn source(ir: &Ir, e: &Expr) -> Option<Source> {
    let mut steps = Vec::new();
    let mut cur = e;
    loop {
        let ExprKind::Member { base, member } = &cur.kind else {
            return None;
        };
        match member {
            Member::MessageField(m, i) => {
                let f = &ir.message(*m).fields[*i];
                steps.push((f.name.clone(), f.label == Label::Repeated));
                cur = base;
            }
            Member::EntryValue(en) if matches!(base.kind, ExprKind::Entry(x) if x == *en) => {
                steps.reverse();
                let item = match e.ty.element().unwrap_or(&e.ty) {
                    Type::Message(m) => *m,
                    _ => return None,
                };
                return Some(Source {
                    entry: *en,
                    steps,
                    item,
                });
            }
            _ => return None,
        }
    }
}

/// The names a mapping's expressions have in reach.
#[derive(Clone)]
struct MapEnv<'a> {
    src: Src<'a>,
    fid: FormatId,
    /// The binding's variable and message.
    binding: Option<(Ident, MessageId)>,
    /// The entry whose record is in reach (its struct is the variable of its name).
    entry: Option<EntryId>,
    /// Whether the item's position is in reach.
    position: bool,
    /// Whether `dtype` is assigned yet.
    dtype: bool,
}

impl MapEnv<'_> {
    fn lower(&self) -> Lower<'_> {
        Lower {
            ir: self.src.ir,
            env: self,
        }
    }

    fn text(&self, e: &Expr) -> String {
        self.src.text(self.fid, e.span)
    }

    /// Field `i` of message `m`, of the message value `base`, as the view holds it: an
    /// `Option` of the held type, or the list of a repeated field.
    fn raw_field(&self, base: &Val, m: MessageId, i: usize) -> TokenStream {
        let id = rs_ident(&self.src.ir.message(m).fields[i].name);
        let b = &base.ts;
        if base.form == Form::Value {
            quote!(#b.and_then(|x| x.#id))
        } else {
            quote!(#b.#id)
        }
    }

    /// `e` as tensor data (an `rt::StoredData`): a `bytes` field is its byte range in the
    /// source, `elements(f)` the values of a repeated field, an `if` of them.
    fn data(&self, e: &Expr) -> R<TokenStream> {
        let l = self.lower();
        match &e.kind {
            ExprKind::If {
                cond,
                then,
                otherwise,
            } => {
                let c = l.expr(cond)?.scalar();
                let (a, b) = (self.data(then)?, self.data(otherwise)?);
                Ok(if_else(&c, &a, otherwise, &b))
            }
            ExprKind::Member {
                base,
                member: Member::MessageField(m, i),
            } if e.ty == Type::Bytes => {
                let b = l.expr(base)?;
                let f = self.raw_field(&b, *m, *i);
                let what = self.text(e);
                Ok(quote!(rt::protobuf::located(#f, #what)?))
            }
            ExprKind::Call {
                func: Builtin::Elements,
                args,
            } => {
                let a = &args[0].value;
                let ExprKind::Member {
                    base,
                    member: Member::MessageField(m, i),
                } = &a.kind
                else {
                    return Err(no(a.span, "`elements` of a value that is not a field"));
                };
                let b = l.expr(base)?;
                if b.form == Form::Value {
                    return Err(no(a.span, "`elements` of a field of an optional message"));
                }
                let f = &self.src.ir.message(*m).fields[*i];
                let n = Literal::u32_unsuffixed(f.tag);
                let elements = match kind(f.proto) {
                    Kind::Float | Kind::Fixed32(_) => {
                        quote!(rt::protobuf::Elements::Fixed { width: 4 })
                    }
                    Kind::Double | Kind::Fixed64 => {
                        quote!(rt::protobuf::Elements::Fixed { width: 8 })
                    }
                    Kind::Bytes | Kind::Str => quote!(rt::protobuf::Elements::Bytes),
                    Kind::Varint | Kind::Sint => quote!(rt::protobuf::Elements::varints(dtype)),
                    Kind::Msg(_) => return Err(no(a.span, "`elements` of messages")),
                };
                let bts = &b.ts;
                Ok(quote!(rt::protobuf::elements(#bts.bytes, #bts.base, #n, #elements)?))
            }
            _ => Ok(l.expr(e)?.ts),
        }
    }

    /// `shape = e`: a repeated integer field read where it is, or a list.
    fn shape(&self, e: &Expr) -> R<TokenStream> {
        let l = self.lower();
        if let ExprKind::Member {
            base,
            member: Member::MessageField(m, i),
        } = &e.kind
        {
            let f = &self.src.ir.message(*m).fields[*i];
            let b = l.expr(base)?;
            if f.label == Label::Repeated && b.form != Form::Value {
                let n = Literal::u32_unsuffixed(f.tag);
                let what = self.text(e);
                let bts = &b.ts;
                return Ok(quote!(rt::protobuf::dims(#bts.bytes, #bts.base, #n, #what)?));
            }
        }
        let v = l.expr(e)?.by_ref();
        Ok(quote!(rt::expr::dims(#v)?))
    }

    /// `segment = e`: an optional message with `begin` and `end`, as `(begin, end)`.
    fn segment(&self, e: &Expr) -> R<TokenStream> {
        let v = self.lower().expr(e)?;
        let Type::Message(m) = v.ty else {
            return Err(no(e.span, "a `segment` that is not a message"));
        };
        let msg = self.src.ir.message(m);
        let (Some(b), Some(en)) = (msg.field_index("begin"), msg.field_index("end")) else {
            return Err(no(e.span, "a `segment` without `begin` and `end`"));
        };
        let s = Val::reference(quote!(s), Type::Message(m));
        let (b, en) = (self.field(&s, m, b)?, self.field(&s, m, en)?);
        let (b, en) = (b.ts, en.ts);
        let ts = &v.ts;
        Ok(match v.form {
            Form::Value => quote!(#ts.map(|s| (#b, #en))),
            _ => quote!(Some((#ts.#b, #ts.#en))),
        })
    }

    /// Field `i` of message `m` of `base` as a value: absent numbers read as the field's
    /// default (or 0), absent text as "".
    fn field(&self, base: &Val, m: MessageId, i: usize) -> R<Val> {
        let ir = self.src.ir;
        let f = &ir.message(m).fields[i];
        let id = rs_ident(&f.name);
        let b = &base.ts;
        let opt = base.form == Form::Value;
        let raw = self.raw_field(base, m, i);
        let repeated = f.label == Label::Repeated;
        let i64_ty = Type::Int(IntTy::sized(8, true));
        let default = match f.default.as_ref().map(|d| &d.kind) {
            Some(ExprKind::Const(Const::Int(v))) => Literal::i128_unsuffixed(*v),
            Some(ExprKind::EnumValue(e, k)) => Literal::i64_unsuffixed(ir.enum_(*e).values[*k].1),
            _ => Literal::i64_unsuffixed(0),
        };
        Ok(match (kind(f.proto), repeated) {
            (Kind::Msg(n), false) if opt => {
                Val::value(quote!(#b.and_then(|x| x.#id.as_deref())), Type::Message(n))
            }
            (Kind::Msg(n), false) => Val::value(quote!(#b.#id.as_deref()), Type::Message(n)),
            (Kind::Msg(_), true) if !opt => Val::place(quote!(#b.#id), f.ty.clone()),
            (Kind::Varint | Kind::Sint | Kind::Fixed32(_) | Kind::Fixed64, false) => {
                if f.proto == ProtoType::Scalar(ProtoScalar::Bool) {
                    Val::value(quote!(#raw.is_some_and(|v| v != 0)), Type::Bool)
                } else {
                    Val::place(quote!(#raw.unwrap_or(#default)), i64_ty)
                }
            }
            (Kind::Float | Kind::Double, false) => {
                Val::value(quote!(f64::from(#raw.unwrap_or_default())), f.ty.clone())
            }
            (Kind::Str, false) => Val::value(quote!(#raw.unwrap_or("")), Type::Str),
            (Kind::Bytes, false) => Val::value(quote!(#raw.map_or(&[][..], |v| v.0)), Type::Bytes),
            (Kind::Varint, true) if !opt => {
                let n = Literal::u32_unsuffixed(f.tag);
                Val::place(
                    quote!(rt::protobuf::int_values(#b.bytes, #b.base, #n)?),
                    Type::List(Box::new(i64_ty)),
                )
            }
            _ => {
                return Err(no(
                    f.span,
                    "a repeated field of this type as a value in a mapping",
                ))
            }
        })
    }
}

impl Env for MapEnv<'_> {
    fn field(&self, _l: ir::LayoutId, _f: ir::FieldId) -> Option<Val> {
        None
    }
    fn binding(&self) -> Option<Val> {
        let (id, m) = self.binding.as_ref()?;
        Some(Val::reference(quote!(#id), Type::Message(*m)))
    }
    fn position(&self) -> Option<Val> {
        self.position
            .then(|| Val::value(quote!((position as i128)), Type::INT))
    }
    fn tensor_key(&self, k: TensorKey) -> Option<Val> {
        (k == TensorKey::Dtype && self.dtype)
            .then(|| Val::value(quote!((dtype, byte_order)), Type::Dtype))
    }
    fn entry(&self, e: EntryId) -> Option<Val> {
        (self.entry == Some(e)).then(|| {
            let id = rs_ident(&self.src.ir.entry(e).name);
            Val::reference(quote!(#id), Type::Entry(e))
        })
    }
    fn member(&self, base: &Val, member: &Member, _ty: &Type) -> Option<Val> {
        let b = &base.ts;
        match member {
            Member::EntryValue(e) => {
                let ir::Content::Value(ty) = &self.src.ir.entry(*e).content else {
                    return None;
                };
                Some(Val::reference(quote!(#b.value), ty.clone()))
            }
            Member::Capture(_, c) => {
                let c = rs_ident(c);
                Some(Val::value(quote!(#b.#c), Type::Str))
            }
            Member::EntryName(_) => Some(Val::value(quote!(r.key), Type::Str)),
            Member::MessageField(m, i) => self.field(base, *m, *i).ok(),
            _ => None,
        }
    }
    fn builtin(&self, func: Builtin, args: &[ir::Arg]) -> Option<Val> {
        if func != Builtin::Has {
            return None;
        }
        let ExprKind::Member {
            base,
            member: Member::MessageField(m, i),
        } = &args.first()?.value.kind
        else {
            return None;
        };
        let b = self.lower().expr(base).ok()?;
        let f = self.raw_field(&b, *m, *i);
        let repeated = self.src.ir.message(*m).fields[*i].label == Label::Repeated;
        Some(if repeated {
            Val::value(quote!(!#f.is_empty()), Type::Bool)
        } else {
            Val::value(quote!(#f.is_some()), Type::Bool)
        })
    }
}

/// What a mapping's statements compile to.
#[derive(Default)]
struct Props {
    /// Statements that bind what the others use (an included mapping's item).
    prelude: Vec<TokenStream>,
    name: Option<Val>,
    dtype: Option<TokenStream>,
    shape: Option<TokenStream>,
    data: Option<TokenStream>,
    segment: Option<TokenStream>,
    /// Everything but the name, from the parts function of an included mapping (an
    /// `rt::TensorParts`).
    parts: Option<TokenStream>,
}

/// The function that reads the dtype, shape, data (and segment) of the items of the first
/// mapping over a message, which `include`s of that mapping call.
#[derive(Debug, Clone)]
pub(crate) struct PartsFn {
    msg: MessageId,
    map: MappingId,
    name: Ident,
}

/// The mappings' generator for one format.
pub(crate) struct Mappings<'a> {
    src: Src<'a>,
    fid: FormatId,
    parts: Vec<PartsFn>,
}

impl<'a> Mappings<'a> {
    /// The parts functions of format `fid`'s mappings: one for the first mapping over
    /// each message whose dtype, shape and data read the item alone (no `include`, no
    /// entry or position), for its own item function and the `include`s of it to call;
    /// with their code.
    pub(crate) fn new(src: Src<'a>, fid: FormatId) -> (Mappings<'a>, Vec<TokenStream>) {
        let ir = src.ir;
        let mut g = Mappings {
            src,
            fid,
            parts: Vec::new(),
        };
        let mut items = Vec::new();
        let mut seen = Vec::new();
        for &mid in &ir.format(fid).mappings {
            let map = ir.mapping(mid);
            let Type::Message(msg) = map.binding_ty else {
                continue;
            };
            if seen.contains(&msg) {
                continue;
            }
            seen.push(msg);
            if map
                .stmts
                .iter()
                .any(|s| matches!(s, MappingStmt::Include { .. }))
            {
                continue;
            }
            let binding = rs_ident(&map.binding);
            let mut env = MapEnv {
                src,
                fid,
                binding: Some((binding.clone(), msg)),
                entry: None,
                position: false,
                dtype: false,
            };
            let mut props = Props::default();
            if g.stmts(&mut env, mid, &mut props, &[TensorKey::Name], 0)
                .is_err()
            {
                continue;
            }
            let Ok(body) = parts_stmts(map.span, &props) else {
                continue;
            };
            let name = rs_ident(&snake(&type_name(ir, msg)));
            let ty = view_path(ir, fid, msg);
            let doc = format!(
                " The dtype, shape and data of a `{}` as the mapping `tensor from {} as {}` reads them (and every `include` of it).",
                ir.message(msg).name,
                src.text(fid, map.source.span),
                map.binding
            );
            items.push(quote! {
                #[doc = #doc]
                fn #name(#binding: &#ty<'_>) -> rt::Result<rt::TensorParts> {
                    #body
                    Ok(parts)
                }
            });
            g.parts.push(PartsFn {
                msg,
                map: mid,
                name,
            });
        }
        (g, items)
    }

    /// Compiles the statements of mapping `mid` into `props`, later assignments
    /// overriding earlier ones, leaving out the assignments to `skip` (properties an
    /// including mapping assigns after); `include F.tensor(x)` calls the parts function of
    /// the included mapping, or compiles it in place, `depth` includes deep.
    fn stmts(
        &self,
        env: &mut MapEnv<'a>,
        mid: MappingId,
        props: &mut Props,
        skip: &[TensorKey],
        depth: usize,
    ) -> R<()> {
        let map = self.src.ir.mapping(mid);
        for (i, s) in map.stmts.iter().enumerate() {
            let (key, value) = match s {
                MappingStmt::Include { mapping, arg, .. } => {
                    // What this mapping assigns after the include overrides it.
                    let later: Vec<TensorKey> = map.stmts[i + 1..]
                        .iter()
                        .filter_map(|s| match s {
                            MappingStmt::Set { key, .. } => Some(*key),
                            MappingStmt::Include { .. } => None,
                        })
                        .chain(skip.iter().copied())
                        .collect();
                    self.include(env, *mapping, arg, props, &later, depth)?;
                    continue;
                }
                MappingStmt::Set { key, value } => (*key, value),
            };
            if skip.contains(&key) {
                continue;
            }
            let l = env.lower();
            if key != TensorKey::Name {
                props.parts = None;
            }
            match key {
                TensorKey::Name => props.name = Some(l.expr(value)?),
                TensorKey::Dtype => {
                    props.dtype = Some(l.expr(value)?.scalar());
                    env.dtype = true;
                }
                TensorKey::Shape => props.shape = Some(env.shape(value)?),
                TensorKey::Data => props.data = Some(env.data(value)?),
                TensorKey::Segment => props.segment = Some(env.segment(value)?),
                other => {
                    return Err(no(
                        value.span,
                        format!("`{}` in a mapping over messages", other.name()),
                    ))
                }
            }
        }
        Ok(())
    }

    /// `include F.tensor(x)`: mapping `target` applied to `arg` (which must be present),
    /// leaving out what the includer assigns after (`skip`): a call of its parts function
    /// when the includer assigns only the name after, else its statements compiled in
    /// place.
    fn include(
        &self,
        env: &mut MapEnv<'a>,
        target: MappingId,
        arg: &Expr,
        props: &mut Props,
        skip: &[TensorKey],
        depth: usize,
    ) -> R<()> {
        if depth >= 8 {
            return Err(no(arg.span, "`include`s nested more than 8 deep"));
        }
        let v = env.lower().expr(arg)?;
        let Type::Message(msg) = v.ty else {
            return Err(no(
                arg.span,
                "an `include` of a value that is not a message",
            ));
        };
        let ts = &v.ts;
        let present = if v.form == Form::Value {
            let what = env.text(arg);
            quote!(rt::protobuf::present(#ts, #what)?)
        } else {
            ts.clone()
        };
        let name_only = skip.iter().all(|k| *k == TensorKey::Name);
        if let Some(f) = self
            .parts
            .iter()
            .find(|f| f.map == target && f.msg == msg)
            .filter(|_| name_only)
        {
            let name = &f.name;
            props.parts = Some(quote!(#name(#present)?));
            (props.dtype, props.shape, props.data, props.segment) = (None, None, None, None);
            env.dtype = true;
            return Ok(());
        }
        let t = self.src.ir.mapping(target);
        let id = rs_ident(&format!("{}_{}", t.binding, depth + 1));
        let ty = view_path(self.src.ir, self.fid, msg);
        props.prelude.push(quote!(let #id: &#ty<'_> = #present;));
        let mut sub = MapEnv {
            binding: Some((id, msg)),
            entry: None,
            position: false,
            ..env.clone()
        };
        self.stmts(&mut sub, target, props, skip, depth + 1)?;
        env.dtype |= sub.dtype;
        Ok(())
    }

    /// One mapping over a kv entry's value: its item function (an item to its part of a
    /// tensor, `None` where `where` leaves it out), and the statement that maps the items
    /// with it (`rt::protobuf::map_items`) in the function that reads the entry's record.
    pub(crate) fn mapping(&self, mid: MappingId) -> R<(TokenStream, TokenStream)> {
        let ir = self.src.ir;
        let map = ir.mapping(mid);
        let Some(source) = source(ir, &map.source) else {
            return Err(no(
                map.source.span,
                "a mapping source outside an entry's value",
            ));
        };
        let entry = ir.entry(source.entry);
        let mut fn_name = entry.name.clone();
        for (seg, _) in &source.steps {
            fn_name.push('_');
            fn_name.push_str(seg);
        }
        let binding = rs_ident(&map.binding);
        let mut env = MapEnv {
            src: self.src,
            fid: self.fid,
            binding: Some((binding.clone(), source.item)),
            entry: Some(source.entry),
            position: true,
            dtype: false,
        };
        let filter = match &map.filter {
            Some(f) => {
                let n = env.lower().negated(f)?;
                quote!(if #n { return Ok(None); })
            }
            None => quote!(),
        };
        let mut props = Props::default();
        // The mapping's own parts function, when it has one.
        match self.parts.iter().find(|f| f.map == mid) {
            Some(f) => {
                let skip: Vec<TensorKey> = map
                    .stmts
                    .iter()
                    .filter_map(|s| match s {
                        MappingStmt::Set { key, .. } if *key != TensorKey::Name => Some(*key),
                        _ => None,
                    })
                    .collect();
                self.stmts(&mut env, mid, &mut props, &skip, 0)?;
                let name = &f.name;
                props.parts = Some(quote!(#name(#binding)?));
            }
            None => self.stmts(&mut env, mid, &mut props, &[], 0)?,
        }
        let Some(name) = props.name.take() else {
            return Err(no(map.span, "a mapping without a `name`"));
        };
        let parts_stmts = parts_stmts(map.span, &props)?;
        let prelude = &props.prelude;
        let (name_ts, name_arg) = match name.form {
            Form::Value => (name.ts, quote!(name)),
            _ => (name.deref(), quote!(&name)),
        };
        let body = quote! {
            #filter
            #(#prelude)*
            let name = #name_ts;
            #parts_stmts
            rt::kv::Chunk::new(#name_arg, r.key, parts).map(Some)
        };
        // Parameters: what the body uses, then the item.
        let mut params = vec![quote!(r: &rt::kv::Matched<'_>)];
        let mut args = vec![quote!(r)];
        if mentions(&body, &entry.name) {
            let (id, st) = (rs_ident(&entry.name), entry_struct(&entry.name));
            params.push(quote!(#id: &#st<'_, '_>));
            args.push(quote!(&#id));
        }
        let position = mentions(&body, "position");
        if position {
            params.push(quote!(position: usize));
            args.push(quote!(position));
        }
        let item_ty = view_path(ir, self.fid, source.item);
        params.push(quote!(#binding: &#item_ty<'_>));
        args.push(quote!(#binding));
        let fn_id = rs_ident(&fn_name);
        let source_text = self.src.text(self.fid, map.source.span);
        let doc = format!(
            " The mapping `tensor from {source_text} as {}`: the tensor of one item{}.",
            map.binding,
            if map.filter.is_some() {
                " (`None`: its `where` leaves it out)"
            } else {
                ""
            }
        );
        let item_fn = quote! {
            #[doc = #doc]
            fn #fn_id(#(#params),*) -> rt::Result<Option<rt::kv::Chunk>> {
                #body
            }
        };
        // An item's name for errors: the `name` field where the message has one.
        let has_name = ir.message(source.item).fields.iter().any(|f| {
            f.name == "name"
                && f.label != Label::Repeated
                && f.proto == ProtoType::Scalar(ProtoScalar::String)
        });
        let (name_of, prefix) = if has_name {
            (quote!(|x| x.name), String::new())
        } else {
            (quote!(|_| None), source_text)
        };
        let items = items_expr(quote!(value), &source.steps);
        let pos = if position {
            quote!(position)
        } else {
            quote!(_)
        };
        let call = quote! {
            rt::protobuf::map_items(#items, #name_of, #prefix, out, |#binding, #pos| #fn_id(#(#args),*))?;
        };
        Ok((item_fn, call))
    }
}

/// The statements that compute `parts` (an `rt::TensorParts`) from `props`.
fn parts_stmts(span: Span, props: &Props) -> R<TokenStream> {
    if let Some(call) = &props.parts {
        return Ok(quote!(let parts = #call;));
    }
    let (Some(dtype), Some(shape), Some(data)) = (&props.dtype, &props.shape, &props.data) else {
        return Err(no(span, "a mapping without its dtype, shape and data"));
    };
    let segment = props.segment.clone().unwrap_or_else(|| quote!(None));
    Ok(quote! {
        let (dtype, byte_order) = #dtype;
        let shape = #shape;
        let data = #data;
        let parts = rt::TensorParts { dtype, byte_order, shape, data, segment: #segment };
    })
}

/// The items a mapping walks to, from `start` (an entry's value): an iterator (or an
/// option, or a list) of `&M`.
fn items_expr(start: TokenStream, steps: &[(String, bool)]) -> TokenStream {
    // What `cur` is: 0 the start (a message), 1 an `Option<&M>`, 2 a `&Vec<M>`, 3 an
    // iterator.
    let (mut cur, mut what) = (start, 0);
    for (seg, repeated) in steps {
        let id = rs_ident(seg);
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

// ---------------------------------------------------------------------------------------
// Write rules

/// The names a write rule has in reach: the tensor being written (`meta`), the part's
/// bytes (`data`) and the elements it holds (`begin`, `end`).
struct WriteEnv<'a> {
    ir: &'a Ir,
}

impl Env for WriteEnv<'_> {
    fn field(&self, _l: ir::LayoutId, _f: ir::FieldId) -> Option<Val> {
        None
    }
    fn write_var(&self, v: WriteVar) -> Option<Val> {
        let u64_ty = Type::Int(IntTy::sized(8, false));
        Some(match v {
            WriteVar::Name => Val::place(quote!(meta.name), Type::Str),
            WriteVar::Dtype => Val::value(quote!((meta.dtype, None)), Type::Dtype),
            WriteVar::Shape => Val::place(quote!(meta.shape), Type::List(Box::new(u64_ty))),
            WriteVar::Begin => Val::place(quote!(begin), u64_ty),
            WriteVar::End => Val::place(quote!(end), u64_ty),
            _ => return None,
        })
    }
    fn builtin(&self, func: Builtin, args: &[ir::Arg]) -> Option<Val> {
        if func != Builtin::KeyOf {
            return None;
        }
        let ExprKind::Table(t) = args.first()?.value.kind else {
            return None;
        };
        let name = &self.ir.table(t).name;
        let rev = rs_ident(&format!("{name}_for"));
        let l = Lower {
            ir: self.ir,
            env: self,
        };
        let d = l.expr(&args.get(1)?.value).ok()?;
        let d = match tuple_first(&d.ts) {
            Some(first) => first,
            None => {
                let ts = d.ts;
                quote!(#ts.0)
            }
        };
        // Converted to the type of the field it is written to.
        Some(Val::value(
            quote!(rt::protobuf::key_of(#rev, #name, #d)?),
            Type::INT,
        ))
    }
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

/// A value of a write rule.
enum W {
    /// A prost message (`messages::M { .. }`).
    Msg,
    /// A message encoded already (`Vec<u8>`; `true`: a `rt::Result` of it, as
    /// `rt::protobuf::append(..)` makes it): it holds the tensor's elements, or a message
    /// that does.
    Encoded(bool),
    /// The part's bytes.
    Data,
    /// Any other value.
    Val(Val),
}

/// A lowered value of a write rule and the statements that must run before it, in the
/// same scope.
struct WVal {
    pre: Vec<TokenStream>,
    ts: TokenStream,
    w: W,
}

/// The write rule of a kv mapping: the body of `fn <entry>_value(meta, data, begin, end)
/// -> rt::Result<Vec<u8>>`, the record's value for the elements `begin` to `end`.
pub(crate) struct Writer<'a> {
    ir: &'a Ir,
    fid: FormatId,
    /// Names bound so far (common parts of conditional messages).
    names: std::cell::RefCell<Vec<String>>,
}

impl<'a> Writer<'a> {
    /// The writer of format `fid`'s rules.
    pub(crate) fn new(ir: &'a Ir, fid: FormatId) -> Self {
        Writer {
            ir,
            fid,
            names: Default::default(),
        }
    }

    /// The body of the function that encodes the value `rule` makes (a message).
    pub(crate) fn body(&self, rule: &Expr) -> R<TokenStream> {
        let v = self.value(rule)?;
        let pre = &v.pre;
        let ts = &v.ts;
        Ok(match v.w {
            W::Encoded(true) => quote!(#(#pre)* #ts),
            W::Encoded(false) => quote!(#(#pre)* Ok(#ts)),
            W::Msg => quote!(#(#pre)* Ok(::prost::Message::encode_to_vec(&#ts))),
            _ => return Err(no(rule.span, "a write rule that does not make a message")),
        })
    }

    fn lower(&self) -> (WriteEnv<'a>, &'a Ir) {
        (WriteEnv { ir: self.ir }, self.ir)
    }

    fn value(&self, e: &Expr) -> R<WVal> {
        let (env, ir) = self.lower();
        let l = Lower { ir, env: &env };
        match &e.kind {
            ExprKind::NewMessage { message, fields } => self.message(*message, fields, None),
            ExprKind::WriteVar(WriteVar::Data) => Ok(WVal {
                pre: Vec::new(),
                ts: quote!(data),
                w: W::Data,
            }),
            ExprKind::If { .. } if matches!(e.ty, Type::Message(_)) => self.choice(e),
            _ => Ok(WVal {
                pre: Vec::new(),
                ts: TokenStream::new(),
                w: W::Val(l.expr(e)?),
            }),
        }
    }

    /// A fresh name for a binding, from `base`.
    fn fresh(&self, base: &str) -> Ident {
        let mut names = self.names.borrow_mut();
        let mut name = base.to_string();
        let mut i = 1;
        while names.contains(&name) {
            i += 1;
            name = format!("{base}_{i}");
        }
        names.push(name.clone());
        rs_ident(&name)
    }

    /// An `if` whose branches are messages. When every branch builds the same message,
    /// the fields every branch sets alike are set once, before the `if`, and each
    /// branch gives only what differs (`..base`).
    fn choice(&self, e: &Expr) -> R<WVal> {
        let (env, ir) = self.lower();
        let l = Lower { ir, env: &env };
        // The chain `if a {..} else if b {..} else {..}`: conditions and branches.
        let mut conds = Vec::new();
        let mut branches = Vec::new();
        let mut cur = e;
        while let ExprKind::If {
            cond,
            then,
            otherwise,
        } = &cur.kind
        {
            conds.push(l.expr(cond)?.scalar());
            branches.push(&**then);
            cur = otherwise;
        }
        branches.push(cur);
        let Type::Message(m) = e.ty else {
            return Err(no(e.span, "a conditional value that is not a message"));
        };
        let msgs: Option<Vec<&Vec<(usize, Expr)>>> = branches
            .iter()
            .map(|b| match &b.kind {
                ExprKind::NewMessage { message, fields } if *message == m => Some(fields),
                _ => None,
            })
            .collect();
        let mut pre = Vec::new();
        let mut base = None;
        if let Some(msgs) = msgs {
            // The fields set alike in every branch (by their code).
            let sets: Vec<Vec<(usize, Option<String>)>> = msgs
                .iter()
                .map(|fields| {
                    fields
                        .iter()
                        .map(|(i, v)| {
                            let code = self.plain_set(m, *i, v).ok().flatten();
                            (*i, code.map(|c| c.to_string()))
                        })
                        .collect()
                })
                .collect();
            let common: Vec<usize> = sets[0]
                .iter()
                .filter(|(i, code)| {
                    code.is_some() && sets[1..].iter().all(|s| s.contains(&(*i, code.clone())))
                })
                .map(|(i, _)| *i)
                .collect();
            if !common.is_empty() {
                let fields: Vec<(usize, Expr)> = msgs[0]
                    .iter()
                    .filter(|(i, _)| common.contains(i))
                    .cloned()
                    .collect();
                let shared = self.message(m, &fields, None)?;
                let id = self.fresh(&snake(&type_name(ir, m)));
                pre.extend(shared.pre);
                let ts = shared.ts;
                pre.push(quote!(let #id = #ts;));
                base = Some((id, common));
            }
        }
        let mut vals = Vec::new();
        for b in &branches {
            vals.push(match (&b.kind, &base) {
                (ExprKind::NewMessage { fields, .. }, Some((id, common))) => {
                    let own: Vec<(usize, Expr)> = fields
                        .iter()
                        .filter(|(i, _)| !common.contains(i))
                        .cloned()
                        .collect();
                    self.message(m, &own, Some(id))?
                }
                _ => self.value(b)?,
            });
        }
        // Every branch of one kind: encoded when one is.
        let encoded = vals.iter().any(|v| matches!(v.w, W::Encoded(_)));
        let code: Vec<TokenStream> = vals
            .into_iter()
            .map(|v| {
                let (p, ts) = (v.pre, v.ts);
                let ts = match v.w {
                    W::Msg if encoded => quote!(::prost::Message::encode_to_vec(&#ts)),
                    W::Encoded(true) => quote!(#ts?),
                    _ => ts,
                };
                if p.is_empty() {
                    ts
                } else {
                    quote!({ #(#p)* #ts })
                }
            })
            .collect();
        let (last, firsts) = code.split_last().expect("an else branch");
        let mut ts = quote!({ #last });
        for (c, b) in conds.iter().zip(firsts).rev() {
            ts = quote!(if #c { #b } else #ts);
        }
        Ok(WVal {
            pre,
            ts,
            w: if encoded { W::Encoded(false) } else { W::Msg },
        })
    }

    /// The code of `field = value` of message `m` when it is a plain assignment (no
    /// tensor elements, no encoded message), for comparing branches.
    fn plain_set(&self, m: MessageId, i: usize, value: &Expr) -> R<Option<TokenStream>> {
        let v = self.value(value)?;
        if !v.pre.is_empty() {
            return Ok(None);
        }
        let f = &self.ir.message(m).fields[i];
        Ok(match v.w {
            W::Msg => {
                let ts = v.ts;
                Some(quote!(Some(#ts)))
            }
            W::Val(val) => Some(self.assign(m, i, &val, value)?),
            W::Data | W::Encoded(_) => None,
        }
        .map(|c| {
            let id = rs_ident(&f.name);
            quote!(#id: #c,)
        }))
    }

    /// `M(field = value, ...)`: the prost message with those fields set (the rest from
    /// `base`, or their defaults); with the tensor's elements in one of its fields (or in
    /// a message in one), the message encoded.
    fn message(&self, m: MessageId, fields: &[(usize, Expr)], base: Option<&Ident>) -> R<WVal> {
        let ir = self.ir;
        let msg = ir.message(m);
        let ty = prost_path(ir, self.fid, m, false);
        let mut sets = Vec::new();
        let mut extras: Vec<(Literal, TokenStream)> = Vec::new();
        let mut pre = Vec::new();
        for (i, value) in fields {
            let f = &msg.fields[*i];
            let id = rs_ident(&f.name);
            let tag = Literal::u32_unsuffixed(f.tag);
            let v = self.value(value)?;
            pre.extend(v.pre);
            let repeated = f.label == Label::Repeated;
            match v.w {
                W::Data => {
                    let holder = match (kind(f.proto), repeated) {
                        (Kind::Float, true) => quote!(rt::protobuf::Holder::Float),
                        (Kind::Double, true) => quote!(rt::protobuf::Holder::Double),
                        (Kind::Varint, true) => quote!(rt::protobuf::Holder::Varint),
                        (Kind::Bytes | Kind::Str, false) => quote!(rt::protobuf::Holder::Bytes),
                        (Kind::Bytes | Kind::Str, true) => quote!(rt::protobuf::Holder::Strings),
                        _ => {
                            return Err(no(
                                value.span,
                                "`data` in a field that cannot hold elements",
                            ))
                        }
                    };
                    extras.push((tag, quote!(#holder.elements(meta.dtype, data))));
                }
                W::Encoded(fallible) => {
                    let ts = v.ts;
                    pre.push(if fallible {
                        quote!(let #id = #ts?;)
                    } else {
                        quote!(let #id = #ts;)
                    });
                    extras.push((tag, quote!(rt::protobuf::Extra::Message(&#id))));
                }
                W::Msg => {
                    let ts = v.ts;
                    sets.push(if repeated {
                        quote!(#id: vec![#ts],)
                    } else {
                        quote!(#id: Some(#ts),)
                    });
                }
                W::Val(val) => {
                    let c = self.assign(m, *i, &val, value)?;
                    sets.push(quote!(#id: #c,));
                }
            }
        }
        let build = match base {
            Some(b) if sets.is_empty() => quote!(#b),
            Some(b) => quote!(#ty { #(#sets)* ..#b }),
            None if sets.len() < msg.fields.len() => {
                quote!(#ty { #(#sets)* ..Default::default() })
            }
            None => quote!(#ty { #(#sets)* }),
        };
        if extras.is_empty() {
            return Ok(WVal {
                pre,
                ts: build,
                w: W::Msg,
            });
        }
        let adds = extras.iter().map(|(tag, add)| quote!((#tag, #add)));
        Ok(WVal {
            pre,
            ts: quote!(rt::protobuf::append(::prost::Message::encode_to_vec(&#build), [#(#adds),*])),
            w: W::Encoded(true),
        })
    }

    /// The value `v` (of the rule's expression `e`) for field `i` of message `m`, as the
    /// prost field holds it.
    fn assign(&self, m: MessageId, i: usize, v: &Val, e: &Expr) -> R<TokenStream> {
        use ProtoScalar as S;
        let msg = self.ir.message(m);
        let f = &msg.fields[i];
        let what = format!("{}.{}", msg.name, f.name);
        let repeated = f.label == Label::Repeated;
        let key_of = matches!(
            e.kind,
            ExprKind::Call {
                func: Builtin::KeyOf,
                ..
            }
        );
        let ts = &v.ts;
        let value = match (f.proto, repeated) {
            (ProtoType::Scalar(S::Bool), false) => match v.ty {
                Type::Bool => v.scalar(),
                _ => {
                    let s = v.scalar();
                    quote!(#s != 0)
                }
            },
            (ProtoType::Scalar(S::String), false) => match v.form {
                Form::Value => quote!(#ts.to_string()),
                _ => {
                    let p = v.deref();
                    quote!(#p.to_string())
                }
            },
            (ProtoType::Scalar(S::Bytes), false) => {
                let s = v.scalar();
                match v.ty {
                    Type::Str => quote!(#s.as_bytes().to_vec()),
                    _ => quote!(#s.to_vec()),
                }
            }
            (ProtoType::Scalar(S::Float | S::Double), false) => {
                let s = v.scalar();
                let t = if f.proto == ProtoType::Scalar(S::Float) {
                    quote!(f32)
                } else {
                    quote!(f64)
                };
                match (&e.kind, v.ty.is_int()) {
                    (ExprKind::Const(Const::Int(n)), _) => {
                        let l = Literal::f64_unsuffixed(*n as f64);
                        quote!(#l)
                    }
                    (_, true) => quote!(rt::expr::narrow::<i64>(#s, #what)? as #t),
                    _ => quote!(#s as #t),
                }
            }
            // A table's key: converted by `key_of` to the field's type.
            (_, false) if key_of => ts.clone(),
            (p, false) => {
                let t = int_ty(p);
                match const_int(self.ir, e) {
                    Some(n) if literal_fits(p, n) => {
                        let l = Literal::i128_unsuffixed(n);
                        quote!(#l)
                    }
                    _ => {
                        let s = v.scalar();
                        quote!(rt::expr::narrow::<#t>(#s, #what)?)
                    }
                }
            }
            (ProtoType::Scalar(_) | ProtoType::Enum(_), true) => match &e.kind {
                ExprKind::WriteVar(WriteVar::Shape) => {
                    quote!(rt::protobuf::ints(&#ts, #what)?)
                }
                _ => {
                    let t = int_ty(f.proto);
                    let p = v.by_ref();
                    quote!(#p.iter().map(|&x| rt::expr::narrow::<#t>(x.into(), #what)).collect::<rt::Result<Vec<_>>>()?)
                }
            },
            (ProtoType::Message(_), true) => {
                return Err(no(e.span, "a list of messages in a write rule"))
            }
        };
        Ok(if f.label == Label::Optional {
            quote!(Some(#value))
        } else {
            value
        })
    }
}

/// The integer constant `e` (a literal or an enum value).
fn const_int(ir: &Ir, e: &Expr) -> Option<i128> {
    match &e.kind {
        ExprKind::Const(Const::Int(n)) => Some(*n),
        ExprKind::EnumValue(en, k) => Some(i128::from(ir.enum_(*en).values[*k].1)),
        _ => None,
    }
}

/// The Rust type of an integer protobuf field.
fn int_ty(p: ProtoType) -> TokenStream {
    use ProtoScalar as S;
    match p {
        ProtoType::Scalar(S::Int64 | S::Sint64 | S::Sfixed64) => quote!(i64),
        ProtoType::Scalar(S::Uint32 | S::Fixed32) => quote!(u32),
        ProtoType::Scalar(S::Uint64 | S::Fixed64) => quote!(u64),
        _ => quote!(i32),
    }
}

/// Whether the integer `n` fits an integer protobuf field.
fn literal_fits(p: ProtoType, n: i128) -> bool {
    use ProtoScalar as S;
    match p {
        ProtoType::Scalar(S::Int64 | S::Sint64 | S::Sfixed64) => i64::try_from(n).is_ok(),
        ProtoType::Scalar(S::Uint32 | S::Fixed32) => u32::try_from(n).is_ok(),
        ProtoType::Scalar(S::Uint64 | S::Fixed64) => u64::try_from(n).is_ok(),
        _ => i32::try_from(n).is_ok(),
    }
}
