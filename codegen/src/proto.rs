//! The `protobuf` engine, from the IR: the whole source is one protobuf message
//! (`engine protobuf(root = ModelProto);`). Every declared message (nested ones included)
//! becomes a view: a plain struct deriving `rt::protobuf::View`, whose attributes give the
//! derive one `match` arm per declared field that decodes it in place (scalars decoded,
//! strings borrowed, `bytes` fields located, embedded messages read recursively with the
//! depth checked by `rt::protobuf::read`); repeated numbers are left where they are for the mapping to
//! read (`elements(f)`, `shape = t.dims`), fields the schema does not declare skipped.
//! Every message also gets an owned `prost` type (module `messages`).
//!
//! A mapping becomes small functions over the format's data: the first mapping over a
//! message gets a parts function (its dtype, shape and data, which `include`s of it
//! call), each mapping an item function (one item to its tensor), and `index` walks the
//! path of messages to the items and hands them to `rt::protobuf::map_items`.
//! Expressions are lowered by [`crate::lower`]; [`MapEnv`] says what a mapping has in
//! reach (its binding, the entries of a `kv` format, message fields as views hold them,
//! keyed lookups, `elements`, `external`). Writing lowers the mapping's `write` rule and
//! the messages' `[write = ...]` options to `prost` messages ([`WriteCx`]). The loops,
//! the external data and element location rules, and the document writer and rewriter
//! (`rt::protodoc`) are the runtime's. The `kv` engine reuses the views, the mappings
//! and the write rules. Generated functions are named with a fixed word around the
//! user's name (`parts_of_<message>`, `item_<path>`, `new_<message>_message`), so that
//! entry, message and field names never make two items of one name.

use std::cell::RefCell;

use proc_macro2::{Ident, Literal, TokenStream};
use quote::{format_ident, quote};
use tensorfmt_schema::ast::Label;
use tensorfmt_schema::ir::{
    self, Builtin, EntryId, Expr, ExprKind, FormatId, IndexKind, IntTy, Ir, MappingId, MappingStmt,
    Member, MessageField, MessageId, ProtoScalar, ProtoType, TensorKey, Type, WriteVar,
};

use crate::lower::{Env, Form, Lower, Val, R};
use crate::model::{docs, rs_ident};

// ---------------------------------------------------------------------------------------
// Names

/// One of the engine's own names in the code of mappings over messages (`r`, `out`,
/// `src`, `limits`, `value`, `position`): as it is, or `__`-prefixed where an entry or a
/// mapping's binding of the schema is spelled alike, so that no name from the schema hides
/// it or makes two parameters of one name.
pub(crate) fn word(ir: &Ir, w: &str) -> Ident {
    let taken =
        ir.entries.iter().any(|e| e.name == w) || ir.mappings.iter().any(|m| m.binding == w);
    if taken {
        format_ident!("__{w}")
    } else {
        format_ident!("{w}")
    }
}

/// The Rust name of a message's view and `prost` types: its dotted path without the dots
/// (`TensorProto.Segment` → `TensorProtoSegment`).
pub(crate) fn view_name(ir: &Ir, m: MessageId) -> String {
    ir.message(m).path.replace('.', "")
}

fn view_ident(ir: &Ir, m: MessageId) -> Ident {
    rs_ident(&view_name(ir, m))
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

/// The struct of a `kv` entry's record: `blob` → `BlobEntry`.
pub(crate) fn entry_struct(ir: &Ir, name: &str) -> Ident {
    let camel = crate::model::upper_camel(name);
    // `BlobEntry`, unless a message's view (in any format: `schema = F` shares them) has
    // that name; then `BlobEntryRecord`.
    let st = format!("{camel}Entry");
    if (0..ir.messages.len()).any(|m| view_name(ir, MessageId(m as u32)) == st) {
        rs_ident(&format!("{st}Record"))
    } else {
        rs_ident(&st)
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

/// An expression in the file's own words, for errors and docs: the fields read from the
/// mapped message by their names (`name`, `segment.begin`, `attribute["value"].t`), the
/// schema's name for the message (its binding, `t`) left out; `binding` is that name,
/// written where the binding is used alone.
fn text(ir: &Ir, e: &Expr, binding: &str) -> String {
    match &e.kind {
        ExprKind::Binding => binding.to_string(),
        ExprKind::Root(_) => "root".to_string(),
        ExprKind::Entry(en) => ir.entry(*en).name.clone(),
        ExprKind::Position => "position".to_string(),
        ExprKind::Const(ir::Const::Str(s)) => format!("{s:?}"),
        ExprKind::Const(ir::Const::Int(v)) => v.to_string(),
        ExprKind::Member { base, member } => {
            let b = text(ir, base, binding);
            let m = match member {
                Member::MessageField(m, i) => ir.message(*m).fields[*i].name.clone(),
                Member::EntryValue(_) => "value".to_string(),
                Member::EntryContent(_) => "content".to_string(),
                Member::EntryName(_) => "name".to_string(),
                Member::Capture(_, c) => c.clone(),
                _ => "..".to_string(),
            };
            if matches!(base.kind, ExprKind::Binding) {
                m
            } else {
                format!("{b}.{m}")
            }
        }
        ExprKind::Index { base, index, .. } => {
            format!("{}[{}]", text(ir, base, binding), text(ir, index, binding))
        }
        _ => "..".to_string(),
    }
}

// ---------------------------------------------------------------------------------------
// Views and prost types

/// How a field's values lie on the wire, and what a view holds of one.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Wire {
    /// A varint read as `i64` (integers, enums).
    Varint,
    /// A varint read as `bool`.
    Bool,
    /// A zigzag varint (`sint32`, `sint64`), read as `i64`.
    Zigzag,
    /// Four bytes read as an integer (`fixed32`, `sfixed32`).
    Fixed32 {
        /// `sfixed32`.
        signed: bool,
    },
    /// Eight bytes read as an integer (`fixed64`, `sfixed64`).
    Fixed64,
    /// `float`.
    Float,
    /// `double`.
    Double,
    /// `string`, borrowed.
    Str,
    /// `bytes`, located.
    Bytes,
    /// An embedded message.
    Msg(MessageId),
}

fn wire(f: &MessageField) -> Wire {
    use ProtoScalar as S;
    match f.proto {
        ProtoType::Message(m) => Wire::Msg(m),
        ProtoType::Enum(_) => Wire::Varint,
        ProtoType::Scalar(s) => match s {
            S::Int32 | S::Int64 | S::Uint32 | S::Uint64 => Wire::Varint,
            S::Bool => Wire::Bool,
            S::Sint32 | S::Sint64 => Wire::Zigzag,
            S::Fixed32 => Wire::Fixed32 { signed: false },
            S::Sfixed32 => Wire::Fixed32 { signed: true },
            S::Fixed64 | S::Sfixed64 => Wire::Fixed64,
            S::Float => Wire::Float,
            S::Double => Wire::Double,
            S::String => Wire::Str,
            S::Bytes => Wire::Bytes,
        },
    }
}

/// Whether the view holds the field (repeated numbers are left in the message).
fn held(f: &MessageField) -> bool {
    f.label != Label::Repeated || matches!(wire(f), Wire::Str | Wire::Bytes | Wire::Msg(_))
}

/// The view type of one message: a plain struct deriving `rt::protobuf::View`, a field
/// per declared field it holds, each with the attribute (number, wire kind, how it is
/// held) the derive writes its `match` arm from.
pub(crate) fn gen_message(ir: &Ir, mid: MessageId) -> TokenStream {
    let m = ir.message(mid);
    let ty = view_ident(ir, mid);
    let doc = docs(&m.docs);
    let mut fields = Vec::new();
    for f in &m.fields {
        if !held(f) {
            continue;
        }
        let id = rs_ident(&f.name);
        let num = Literal::u32_unsuffixed(f.tag);
        let fdoc = field_doc(f);
        let (ty_ts, kind) = match wire(f) {
            Wire::Varint => (quote!(i64), quote!(varint)),
            Wire::Bool => (quote!(bool), quote!(bool)),
            Wire::Zigzag => (quote!(i64), quote!(zigzag)),
            Wire::Fixed32 { signed: false } => (quote!(i64), quote!(fixed32)),
            Wire::Fixed32 { signed: true } => (quote!(i64), quote!(sfixed32)),
            Wire::Fixed64 => (quote!(i64), quote!(fixed64)),
            Wire::Float => (quote!(f32), quote!(float)),
            Wire::Double => (quote!(f64), quote!(double)),
            Wire::Str => (quote!(&'a str), quote!(string)),
            Wire::Bytes => (quote!((&'a [u8], u64)), quote!(bytes)),
            Wire::Msg(sub) => {
                let sub = view_ident(ir, sub);
                (quote!(#sub<'a>), quote!(message))
            }
        };
        fields.push(if f.label == Label::Repeated {
            quote!(#fdoc #[view(#num, #kind, repeated)] pub #id: Vec<#ty_ts>,)
        } else if matches!(wire(f), Wire::Msg(_)) {
            // A message given more than once: the last one (this reader does not merge
            // them); boxed, as a message may hold itself.
            quote!(#fdoc #[view(#num, #kind, boxed)] pub #id: Option<Box<#ty_ts>>,)
        } else {
            quote!(#fdoc #[view(#num, #kind)] pub #id: Option<#ty_ts>,)
        });
    }
    let name = &m.name;
    // The message's name, for errors, where the view's differs (nested messages).
    let name_attr = (ty != name).then(|| quote!(#[view(name = #name)]));
    quote! {
        #doc
        #[derive(Debug, Clone, Default, rt::protobuf::View)]
        #name_attr
        pub struct #ty<'a> {
            /// The message's bytes.
            #[view(span)]
            pub span: rt::protobuf::Span<'a>,
            #(#fields)*
        }
    }
}

fn field_doc(f: &MessageField) -> TokenStream {
    if f.docs.is_empty() {
        let d = format!(" Field {} (`{}`).", f.tag, f.name);
        quote!(#[doc = #d])
    } else {
        docs(&f.docs)
    }
}

/// Every message of format `fid`, nested ones included, in declaration order.
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

/// The view types of every message of format `fid`, then their `prost` types (deriving
/// prost's traits through `runtime`, the path of the runtime's `gen` module).
pub(crate) fn gen_messages(ir: &Ir, fid: FormatId, runtime: &syn::Path) -> TokenStream {
    let views = messages_of(ir, fid).into_iter().map(|m| gen_message(ir, m));
    let prost = gen_prost(ir, fid, runtime);
    quote!(#(#views)* #prost)
}

/// The path of an enum's `prost` type in module `messages`: `tensor_proto::DataLocation`.
fn enum_path(ir: &Ir, e: ir::EnumId) -> String {
    let en = ir.enum_(e);
    match en.parent {
        Some(p) => format!("{}::{}", snake(&view_name(ir, p)), en.name),
        None => en.name.clone(),
    }
}

/// An enum as a `prost::Enumeration`; `prost`: the path of the runtime's `prost`.
fn gen_prost_enum(ir: &Ir, e: ir::EnumId, prost: &TokenStream) -> TokenStream {
    let en = ir.enum_(e);
    let ty = rs_ident(&en.name);
    let doc = if en.docs.is_empty() {
        let d = format!(" `{}` values.", en.name);
        quote!(#[doc = #d])
    } else {
        docs(&en.docs)
    };
    let variants = en.values.iter().map(|(name, n)| {
        let v = rs_ident(&camel(name));
        let d = format!(" `{name}` ({n}).");
        let n = Literal::i64_unsuffixed(*n);
        quote!(#[doc = #d] #v = #n,)
    });
    let path = prost_path(prost);
    quote! {
        #doc
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, #prost::Enumeration)]
        #[prost(prost_path = #path)]
        #[repr(i32)]
        pub enum #ty {
            #(#variants)*
        }
    }
}

/// The Rust type of a `prost` field's value (`i32`, `String`, `messages::M`) and its
/// `#[prost(..)]` type attribute.
fn prost_ty(ir: &Ir, f: &MessageField) -> (TokenStream, TokenStream) {
    use ProtoScalar as S;
    match f.proto {
        ProtoType::Message(m) => {
            let t = view_ident(ir, m);
            (quote!(#t), quote!(message))
        }
        ProtoType::Enum(e) => {
            let path = enum_path(ir, e);
            (quote!(i32), quote!(enumeration = #path))
        }
        ProtoType::Scalar(s) => match s {
            S::Int32 => (quote!(i32), quote!(int32)),
            S::Int64 => (quote!(i64), quote!(int64)),
            S::Uint32 => (quote!(u32), quote!(uint32)),
            S::Uint64 => (quote!(u64), quote!(uint64)),
            S::Sint32 => (quote!(i32), quote!(sint32)),
            S::Sint64 => (quote!(i64), quote!(sint64)),
            S::Fixed32 => (quote!(u32), quote!(fixed32)),
            S::Fixed64 => (quote!(u64), quote!(fixed64)),
            S::Sfixed32 => (quote!(i32), quote!(sfixed32)),
            S::Sfixed64 => (quote!(i64), quote!(sfixed64)),
            S::Bool => (quote!(bool), quote!(bool)),
            S::Float => (quote!(f32), quote!(float)),
            S::Double => (quote!(f64), quote!(double)),
            S::String => (quote!(::std::string::String), quote!(string)),
            S::Bytes => (quote!(::std::vec::Vec<u8>), quote!(bytes = "vec")),
        },
    }
}

/// The owned `prost` message types of every declared message (module `messages`):
/// the declared fields only, for building and decoding messages with prost. The
/// readers and writers of the format work on the wire in place and keep undeclared
/// fields; these types drop them.
fn gen_prost(ir: &Ir, fid: FormatId, runtime: &syn::Path) -> TokenStream {
    // The derives' paths are absolute: `messages` and its modules do not see `rt`.
    let prost = quote!(#runtime::protobuf::prost);
    let path = prost_path(&prost);
    let mut items = Vec::new();
    for mid in messages_of(ir, fid) {
        let m = ir.message(mid);
        let ty = view_ident(ir, mid);
        let doc = docs(&m.docs);
        let mut fields = Vec::new();
        for f in &m.fields {
            let id = rs_ident(&f.name);
            let tag = f.tag.to_string();
            let fdoc = field_doc(f);
            let (rust_ty, attr_ty) = prost_ty(ir, f);
            let is_msg = matches!(f.proto, ProtoType::Message(_));
            let scalar = !is_msg && !matches!(wire(f), Wire::Str | Wire::Bytes);
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
                        quote!(::std::vec::Vec<#rust_ty>),
                    )
                }
                Label::Repeated => (quote!(repeated), quote!(::std::vec::Vec<#rust_ty>)),
            };
            fields.push(quote! {
                #fdoc
                #[prost(#attr_ty, #label, tag = #tag)]
                pub #id: #rust_ty,
            });
        }
        let enums: Vec<TokenStream> = m
            .enums
            .iter()
            .map(|&e| gen_prost_enum(ir, e, &prost))
            .collect();
        let enum_mod = if enums.is_empty() {
            quote!()
        } else {
            let mod_id = rs_ident(&snake(&view_name(ir, mid)));
            let d = format!(" Enums nested in `{}`.", m.path);
            quote! {
                #[doc = #d]
                pub mod #mod_id {
                    #(#enums)*
                }
            }
        };
        items.push(quote! {
            #doc
            #[derive(Clone, PartialEq, #prost::Message)]
            #[prost(prost_path = #path)]
            pub struct #ty {
                #(#fields)*
            }
            #enum_mod
        });
    }
    for &e in &ir.format(fid).enums {
        items.push(gen_prost_enum(ir, e, &prost));
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

/// The `prost_path` of a prost derive: `prost` as a string (`"::tensorfmt_runtime::gen::protobuf::prost"`).
fn prost_path(prost: &TokenStream) -> String {
    prost.to_string().replace(' ', "")
}

// ---------------------------------------------------------------------------------------
// Mappings

/// The names a mapping's expressions have in reach: its binding (a message view), the
/// entries of a `kv` format (`blob: &BlobEntry`), the item's position, the dtype once
/// assigned.
pub(crate) struct MapEnv<'a> {
    ir: &'a Ir,
    /// The binding's variable.
    binding: Ident,
    /// Its name in the schema (for errors).
    binding_name: String,
    /// The binding's message.
    msg: MessageId,
    /// Whether `dtype` is bound.
    dtype: bool,
    /// Inside `widen(data, stored)`'s data: elements are decoded as the stored dtype (the
    /// variable `stored`), not the tensor's.
    in_widen: bool,
}

impl Env for MapEnv<'_> {
    fn field(&self, _l: ir::LayoutId, _f: ir::FieldId) -> Option<Val> {
        None
    }
    fn binding(&self) -> Option<Val> {
        let b = &self.binding;
        Some(Val::reference(quote!(#b), Type::Message(self.msg)))
    }
    fn position(&self) -> Option<Val> {
        let position = word(self.ir, "position");
        Some(Val::value(quote!((#position as i128)), Type::INT))
    }
    fn tensor_key(&self, k: TensorKey) -> Option<Val> {
        (k == TensorKey::Dtype && self.dtype)
            .then(|| Val::value(quote!((dtype, byte_order)), Type::Dtype))
    }
    fn lower(&self, l: &Lower<'_>, e: &Expr) -> Option<R<Val>> {
        Some(match &e.kind {
            ExprKind::Entry(en) => {
                let id = rs_ident(&self.ir.entry(*en).name);
                Ok(Val::reference(quote!(#id), Type::Entry(*en)))
            }
            ExprKind::Member { base, member } => match member {
                Member::MessageField(m, i) => {
                    l.expr(base).and_then(|b| self.message_field(e, &b, *m, *i))
                }
                Member::EntryValue(_) => l.expr(base).map(|b| {
                    let ts = &b.ts;
                    Val::reference(quote!(#ts.value), e.ty.clone())
                }),
                Member::Capture(_, c) => l.expr(base).map(|b| {
                    let (ts, c) = (&b.ts, rs_ident(c));
                    Val::value(quote!(#ts.#c), Type::Str)
                }),
                _ => return None,
            },
            ExprKind::Index { base, index, how } => self.index(l, e, base, index, how),
            ExprKind::Call {
                func: Builtin::Elements,
                args,
            } => match args.as_slice() {
                [a] => self.elements(l, &a.value),
                _ => return None,
            },
            ExprKind::Call {
                func: Builtin::External,
                args,
            } => self.external(l, args),
            ExprKind::Call {
                func: Builtin::Widen,
                args,
            } => match args.as_slice() {
                [a, d] => self.widen(l, &a.value, &d.value),
                _ => return None,
            },
            ExprKind::If { .. } if e.ty == Type::TensorData => self.data(l, e),
            // A dtype by an integer table, the key as the view holds it.
            ExprKind::Lookup { table, key } if self.ir.table(*table).key == ir::KeyKind::Int => {
                l.expr(key).map(|k| {
                    let t = rs_ident(&crate::table::const_name(&self.ir.table(*table).name));
                    let k = match (&k.ty, k.form) {
                        (Type::Int(_) | Type::Enum(_), Form::Optional) => k.scalar_stored(),
                        _ => {
                            let s = k.scalar();
                            quote!(rt::expr::narrow::<i64>(#s, "i64")?)
                        }
                    };
                    // A key read from a field: the error names the field, as the file
                    // calls it.
                    let field = match &key.kind {
                        ExprKind::Member {
                            member: Member::MessageField(m, i),
                            ..
                        } => Some(self.ir.message(*m).fields[*i].name.clone()),
                        _ => None,
                    };
                    match field {
                        Some(f) => Val::value(
                            quote!(#t.lookup(&#k).map_err(|e| e.in_field(#f))?),
                            Type::Dtype,
                        ),
                        None => Val::value(quote!(#t.lookup(&#k)?), Type::Dtype),
                    }
                })
            }
            _ => return None,
        })
    }
}

impl MapEnv<'_> {
    fn text(&self, e: &Expr) -> String {
        text(self.ir, e, &self.binding_name)
    }

    /// Field `i` of message `m` of `base` (a view, or an optional view whose absent
    /// fields are absent): singular fields as `Option`s, repeated ones as the view's
    /// list, or (numbers, which the view does not hold) their values read from the
    /// message.
    fn message_field(&self, e: &Expr, base: &Val, m: MessageId, i: usize) -> R<Val> {
        let f = &self.ir.message(m).fields[i];
        let id = rs_ident(&f.name);
        let b = &base.ts;
        let item_ty = self.stored_ty(f);
        let optional = base.form == Form::Optional;
        if f.label != Label::Repeated {
            let ts = match (optional, wire(f)) {
                (false, Wire::Msg(_)) => quote!(#b.#id.as_deref()),
                (false, _) => quote!(#b.#id),
                (true, Wire::Msg(_)) => quote!(#b.and_then(|x| x.#id.as_deref())),
                (true, _) => quote!(#b.and_then(|x| x.#id)),
            };
            // An absent field with a `[default = ..]` reads as its default.
            let default = f.default.as_ref().and_then(|d| match &d.kind {
                ExprKind::Const(ir::Const::Str(s)) => Some(quote!(#s)),
                ExprKind::Const(ir::Const::Bool(v)) => Some(quote!(#v)),
                _ => crate::lower::literal(self.ir, d).map(|n| {
                    let n = Literal::i64_unsuffixed(n as i64);
                    quote!(#n)
                }),
            });
            return Ok(match default {
                Some(d) => Val::place(quote!(#ts.unwrap_or(#d)), item_ty).with_presence(ts),
                None => Val::optional(ts, item_ty),
            });
        }
        let list_ty = Type::List(Box::new(item_ty));
        if held(f) {
            return Ok(if optional {
                Val::reference(quote!(#b.map_or(&[][..], |x| &x.#id[..])), list_ty)
            } else {
                Val::place(quote!(#b.#id), list_ty)
            });
        }
        let msg = self.message_of(base, e);
        let n = Literal::u32_unsuffixed(f.tag);
        match wire(f) {
            Wire::Varint | Wire::Bool => Ok(Val::place(
                quote!(rt::protobuf::int_values(#msg.span, #n)?),
                Type::List(Box::new(Type::Int(IntTy::sized(8, true)))),
            )),
            _ => unreachable!("the checker reads other repeated numbers by `elements` alone"),
        }
    }

    /// A message view from `base`: itself, or an optional one required present.
    fn message_of(&self, base: &Val, e: &Expr) -> TokenStream {
        let b = &base.ts;
        if base.form == Form::Optional {
            let what = match &e.kind {
                ExprKind::Member { base, .. } => self.text(base),
                _ => self.text(e),
            };
            quote!(rt::protobuf::present(#b, #what)?)
        } else {
            b.clone()
        }
    }

    /// The type a view holds a value of field `f` in, as expressions see it.
    fn stored_ty(&self, f: &MessageField) -> Type {
        match (f.proto, wire(f)) {
            (ProtoType::Enum(e), _) => Type::Enum(e),
            (_, Wire::Msg(m)) => Type::Message(m),
            (_, Wire::Varint | Wire::Zigzag | Wire::Fixed32 { .. } | Wire::Fixed64) => {
                Type::Int(IntTy::sized(8, true))
            }
            (_, Wire::Bool) => Type::Bool,
            (_, Wire::Float) => Type::Float(ir::FloatTy {
                bytes: 4,
                endian: None,
            }),
            (_, Wire::Double) => Type::Float(ir::FloatTy {
                bytes: 8,
                endian: None,
            }),
            (_, Wire::Str) => Type::Str,
            (_, Wire::Bytes) => Type::Bytes,
        }
    }

    /// `kv["key"]` (the value of the last item with that key, as a map keeps it),
    /// `named["name"]` (the last message with that name), `list[i]` (absent past the end).
    fn index(&self, l: &Lower<'_>, e: &Expr, base: &Expr, index: &Expr, how: &IndexKind) -> R<Val> {
        let b = l.expr(base)?;
        let k = l.expr(index)?;
        let (bts, kts) = (b.by_ref(), k.scalar());
        Ok(match how {
            IndexKind::KeyValue {
                message,
                key,
                value,
            } => {
                let fields = &self.ir.message(*message).fields;
                let (kid, vid) = (rs_ident(&fields[*key].name), rs_ident(&fields[*value].name));
                Val::optional(
                    quote!(rt::protobuf::lookup(#bts, #kts, |x| (x.#kid, x.#vid))),
                    e.ty.clone(),
                )
            }
            IndexKind::Named { message, name } => {
                let nid = rs_ident(&self.ir.message(*message).fields[*name].name);
                Val::optional(
                    quote!(rt::protobuf::named(#bts, #kts, |x| x.#nid)),
                    Type::Message(*message),
                )
            }
            IndexKind::Position => {
                let bts = &b.ts;
                let item_ty = b.ty.element().cloned().unwrap_or(Type::Error);
                let copied = match item_ty {
                    Type::Message(_) => quote!(),
                    _ => quote!(.copied()),
                };
                let ts = match &index.kind {
                    ExprKind::Const(ir::Const::Int(0)) => quote!(#bts.first()#copied),
                    ExprKind::Const(ir::Const::Int(i)) if usize::try_from(*i).is_ok() => {
                        let i = Literal::usize_unsuffixed(*i as usize);
                        quote!(#bts.get(#i)#copied)
                    }
                    _ => quote!(usize::try_from(#kts).ok().and_then(|i| #bts.get(i)#copied)),
                };
                Val::optional(ts, item_ty)
            }
            IndexKind::Pickled => unreachable!(
                "rule `messages` keeps layouts, whose fields alone hold pickles here, out of mappings over messages"
            ),
        })
    }

    /// `elements(t.f)`: the repeated field's values as the tensor's elements.
    fn elements(&self, l: &Lower<'_>, arg: &Expr) -> R<Val> {
        let ExprKind::Member {
            base,
            member: Member::MessageField(m, i),
        } = &arg.kind
        else {
            unreachable!("the IR lowering takes `elements` of a repeated field alone")
        };
        let f = &self.ir.message(*m).fields[*i];
        let b = l.expr(base)?;
        let msg = self.message_of(&b, arg);
        let n = Literal::u32_unsuffixed(f.tag);
        let elements = match wire(f) {
            Wire::Float | Wire::Fixed32 { .. } => quote!(rt::protobuf::Elements::FIXED32),
            Wire::Double | Wire::Fixed64 => quote!(rt::protobuf::Elements::FIXED64),
            Wire::Bytes | Wire::Str => quote!(rt::protobuf::Elements::Bytes),
            // Varints are cut to the element width: the stored dtype's inside `widen`.
            Wire::Zigzag | Wire::Varint | Wire::Bool | Wire::Msg(_) => {
                let dtype = if self.in_widen {
                    let stored = word(self.ir, "stored");
                    quote!(#stored.0)
                } else {
                    quote!(dtype)
                };
                if wire(f) == Wire::Zigzag {
                    quote!(rt::protobuf::Elements::zigzags(#dtype))
                } else {
                    quote!(rt::protobuf::Elements::varints(#dtype))
                }
            }
        };
        Ok(Val::value(
            quote!(rt::protobuf::elements(#msg.span, #n, #elements)?),
            Type::TensorData,
        ))
    }

    /// `external(location = , offset = , length = )`: bytes in a file beside the source.
    fn external(&self, l: &Lower<'_>, args: &[ir::Arg]) -> R<Val> {
        let arg = |n: &str| -> R<TokenStream> {
            match args.iter().find(|a| a.name.as_deref() == Some(n)) {
                None => Ok(quote!(None)),
                Some(a) => {
                    let v = l.expr(&a.value)?;
                    Ok(match v.form {
                        Form::Optional => v.ts,
                        _ => {
                            let s = v.scalar();
                            quote!(Some(#s))
                        }
                    })
                }
            }
        };
        let (loc, off, len) = (arg("location")?, arg("offset")?, arg("length")?);
        let src = word(self.ir, "src");
        Ok(Val::value(
            quote!(rt::protobuf::external(#src, #loc, #off, #len)?),
            Type::TensorData,
        ))
    }

    /// `e` as tensor data: a `bytes` field is its byte range in the source; an `if` of
    /// tensor data chooses one.
    /// `widen(data, stored)`: the data, its elements stored as the dtype `stored`, read as
    /// the tensor's dtype (computed before the data: `dtype`, `byte_order`).
    fn widen(&self, l: &Lower<'_>, data: &Expr, stored: &Expr) -> R<Val> {
        let s = l.expr(stored)?.scalar();
        let sub = MapEnv {
            in_widen: true,
            binding: self.binding.clone(),
            binding_name: self.binding_name.clone(),
            ..*self
        };
        let inner = sub
            .data(
                &Lower {
                    ir: self.ir,
                    env: &sub,
                },
                data,
            )?
            .ts;
        let stored = word(self.ir, "stored");
        Ok(Val::value(
            quote!({
                let #stored = #s;
                rt::widen(#inner, #stored, (dtype, byte_order))?
            }),
            Type::TensorData,
        ))
    }

    fn data(&self, l: &Lower<'_>, e: &Expr) -> R<Val> {
        if let ExprKind::If {
            cond,
            then,
            otherwise,
        } = &e.kind
        {
            let c = l.expr(cond)?.scalar();
            let a = self.data(l, then)?.ts;
            let b = self.data(l, otherwise)?.ts;
            let ts = if matches!(otherwise.kind, ExprKind::If { .. }) {
                quote!(if #c { #a } else #b)
            } else {
                quote!(if #c { #a } else { #b })
            };
            return Ok(Val::value(ts, Type::TensorData));
        }
        let v = l.expr(e)?;
        if v.ty != Type::Bytes {
            return Ok(v);
        }
        let what = self.text(e);
        let ts = match v.form {
            Form::Optional => v.ts,
            _ => {
                let t = &v.ts;
                quote!(Some(#t))
            }
        };
        Ok(Val::value(
            quote!(rt::protobuf::located(#ts, #what)?),
            Type::TensorData,
        ))
    }
}

/// Where a mapping's source starts: the document's root message, or the value of an
/// entry of a `kv` format (`blob.value.tensor`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Origin {
    /// `root.a.b`.
    Root,
    /// `entry.value.a.b`.
    Entry(EntryId),
}

/// What a mapping iterates: the item message, the fields from where the source starts
/// to the items (each with its number and whether it is repeated), and where it starts.
pub(crate) struct SourcePath {
    /// The items' message.
    pub msg: MessageId,
    /// Field name, number, repeated.
    pub steps: Vec<(String, u32, bool)>,
    /// The messages the steps are fields of, in order.
    pub through: Vec<MessageId>,
    /// Where it starts.
    pub origin: Origin,
}

/// The path of a mapping's source.
pub(crate) fn mapping_source(ir: &Ir, map: MappingId) -> SourcePath {
    let m = ir.mapping(map);
    let Type::Message(msg) = m.binding_ty else {
        unreachable!("the checker makes every protobuf mapping iterate messages")
    };
    let mut steps = Vec::new();
    let mut through = Vec::new();
    let mut e = &m.source;
    let origin = loop {
        match &e.kind {
            ExprKind::Root(_) => break Origin::Root,
            ExprKind::Member {
                base,
                member: Member::EntryValue(en),
            } if matches!(base.kind, ExprKind::Entry(_)) => break Origin::Entry(*en),
            ExprKind::Member {
                base,
                member: Member::MessageField(mm, i),
            } => {
                let f = &ir.message(*mm).fields[*i];
                steps.push((f.name.clone(), f.tag, f.label == Label::Repeated));
                through.push(*mm);
                e = base;
            }
            _ => unreachable!(
                "a mapping iterates a path from `root`, a layout or an entry (checker); rule `messages` keeps layouts out of mappings over messages, rule `kv` makes a kv source a path into an entry's value"
            ),
        }
    };
    steps.reverse();
    through.reverse();
    SourcePath {
        msg,
        steps,
        through,
        origin,
    }
}

/// What a mapping's statements compile to: the statements that bind what they use (an
/// included mapping's item), then its properties.
#[derive(Default)]
struct Props {
    prelude: Vec<TokenStream>,
    /// The name, and whether it is a `String` made by the mapping (else a `&str`).
    name: Option<(TokenStream, bool)>,
    dtype: Option<TokenStream>,
    shape: Option<TokenStream>,
    data: Option<TokenStream>,
    segment: Option<TokenStream>,
    /// A `value` mapping's `part` and `parts` (`Option<i64>`s).
    part: Option<TokenStream>,
    parts_of: Option<TokenStream>,
    /// Everything but the name from the parts function of an included mapping (an
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
    /// Whether it takes the source (external data).
    src: bool,
}

/// The keys a mapping's statements assign after statement `i` (the includer's
/// overrides).
fn keys_after(stmts: &[MappingStmt], i: usize) -> Vec<TensorKey> {
    stmts[i + 1..]
        .iter()
        .filter_map(|s| match s {
            MappingStmt::Set { key, .. } => Some(*key),
            _ => None,
        })
        .collect()
}

/// Compiles the statements of mapping `map` (whose item is bound as `env.binding`) into
/// `props`, later assignments overriding earlier ones, leaving out the assignments to
/// `skip` (what an including mapping assigns after); `include F.tensor(x)` calls the
/// parts function of the mapping over `x`'s message, or compiles it in place.
fn compile_stmts(
    ir: &Ir,
    env: &mut MapEnv<'_>,
    map: MappingId,
    props: &mut Props,
    parts: &[PartsFn],
    skip: &[TensorKey],
    taken: &mut Vec<String>,
) -> R<()> {
    let stmts = &ir.mapping(map).stmts;
    for (i, s) in stmts.iter().enumerate() {
        let (key, value) = match s {
            MappingStmt::Set { key, value } => (*key, value),
            MappingStmt::Include { mapping, arg, .. } => {
                let mut later = keys_after(stmts, i);
                later.extend_from_slice(skip);
                include(ir, env, *mapping, arg, props, parts, &later, taken)?;
                continue;
            }
        };
        if skip.contains(&key) {
            continue;
        }
        let l = Lower { ir, env: &*env };
        match key {
            TensorKey::Name => {
                let v = l.expr(value)?;
                let ts = &v.ts;
                props.name = Some(match v.form {
                    Form::Optional => {
                        let what = env.text(value);
                        (quote!(rt::protobuf::present(#ts, #what)?), false)
                    }
                    Form::Place | Form::Owned => (ts.clone(), true),
                    _ => (v.scalar(), false),
                });
            }
            TensorKey::Segment => {
                let v = l.expr(value)?;
                let ts = &v.ts;
                let ts = match v.form {
                    Form::Optional => ts.clone(),
                    _ => quote!(Some(#ts)),
                };
                // The checker keeps `segment` to kv formats, a message with integer
                // `begin` and `end`.
                let fields: &[MessageField] = match v.ty {
                    Type::Message(m) => &ir.message(m).fields,
                    _ => &[],
                };
                let bound = |n: &str| -> TokenStream {
                    let id = rs_ident(n);
                    match fields.iter().find(|f| f.name == n) {
                        Some(_) => quote!(s.#id.unwrap_or(0)),
                        None => quote!(0),
                    }
                };
                let (b, e) = (bound("begin"), bound("end"));
                props.segment = Some(quote!(#ts.map(|s| (#b, #e))));
                props.parts = None;
            }
            TensorKey::Dtype => {
                props.dtype = Some(l.expr(value)?.scalar());
                props.parts = None;
                env.dtype = true;
            }
            TensorKey::Shape => {
                props.shape = Some(shape(&l, env, value)?);
                props.parts = None;
            }
            TensorKey::Data if ir.format(ir.mapping(map).format).values.contains(&map) => {
                props.data = Some(optional(l.expr(value)?));
            }
            TensorKey::Data => {
                props.data = Some(env.data(&l, value)?.ts);
                props.parts = None;
            }
            TensorKey::Part => props.part = Some(optional_int(l.expr(value)?)),
            TensorKey::Parts => props.parts_of = Some(optional_int(l.expr(value)?)),
            _ => {}
        }
    }
    Ok(())
}

/// A value as an `Option` of what the view holds (an absent field is `None`).
fn optional(v: Val) -> TokenStream {
    let ts = &v.ts;
    match v.form {
        Form::Optional => ts.clone(),
        _ => quote!(Some(#ts)),
    }
}

/// An integer as an `Option<i64>` (an absent field is `None`).
fn optional_int(v: Val) -> TokenStream {
    match (&v.ty, v.form) {
        (Type::Int(_) | Type::Enum(_), Form::Optional) => v.ts,
        _ => {
            let s = v.scalar();
            quote!(Some(rt::expr::narrow::<i64>(#s, "i64")?))
        }
    }
}

/// A shape: a repeated integer field's values (`t.dims`), or any list of integers.
fn shape(l: &Lower<'_>, env: &MapEnv<'_>, e: &Expr) -> R<TokenStream> {
    if let ExprKind::Member {
        base,
        member: Member::MessageField(m, i),
    } = &e.kind
    {
        let f = &l.ir.message(*m).fields[*i];
        if !held(f) && matches!(wire(f), Wire::Varint) {
            let b = l.expr(base)?;
            let msg = env.message_of(&b, e);
            let n = Literal::u32_unsuffixed(f.tag);
            let what = env.text(e);
            return Ok(quote!(rt::protobuf::dims(#msg.span, #n, #what)?));
        }
    }
    let v = l.expr(e)?;
    let list = v.by_ref();
    Ok(quote!(rt::expr::dims(#list)?))
}

/// `include F.tensor(x)`: the mapping `target` applied to `x` (which must be present),
/// leaving out what the includer assigns after (`skip`): a call of its parts function
/// when the includer assigns only the name after, else its statements compiled in place.
#[allow(clippy::too_many_arguments)]
fn include(
    ir: &Ir,
    env: &mut MapEnv<'_>,
    target: MappingId,
    arg: &Expr,
    props: &mut Props,
    parts: &[PartsFn],
    skip: &[TensorKey],
    taken: &mut Vec<String>,
) -> R<()> {
    let v = Lower { ir, env: &*env }.expr(arg)?;
    let Type::Message(msg) = v.ty else {
        unreachable!(
            "an `include` takes the mapping whose binding has its argument's type (IR lowering): a message's, as the values a mapping over messages reaches are no layout, entry, dict item or pickle"
        )
    };
    let present = match v.form {
        Form::Optional => {
            let (ts, what) = (&v.ts, env.text(arg));
            quote!(rt::protobuf::present(#ts, #what)?)
        }
        _ => v.by_ref(),
    };
    let name_only = skip.contains(&TensorKey::Name) && skip.iter().all(|k| *k == TensorKey::Name);
    if let Some(f) = parts
        .iter()
        .find(|f| f.map == target && f.msg == msg)
        .filter(|_| name_only)
    {
        let src = word(ir, "src");
        let (name, src) = (&f.name, f.src.then(|| quote!(#src,)));
        props.parts = Some(quote!(#name(#src #present)?));
        (props.dtype, props.shape, props.data, props.segment) = (None, None, None, None);
        env.dtype = true;
        return Ok(());
    }
    // Its binding, named as the included mapping names it (renamed when taken).
    let mut name = ir.mapping(target).binding.clone();
    while taken.contains(&name) {
        name.push('_');
    }
    taken.push(name.clone());
    let id = rs_ident(&name);
    let ty = view_ident(ir, msg);
    props.prelude.push(quote!(let #id: &#ty<'_> = #present;));
    let mut sub = MapEnv {
        ir,
        binding: id,
        binding_name: name,
        msg,
        dtype: env.dtype,
        in_widen: false,
    };
    compile_stmts(ir, &mut sub, target, props, parts, skip, taken)?;
    env.dtype |= sub.dtype;
    Ok(())
}

/// The statements that compute `parts` (an `rt::TensorParts`) from `props`.
fn parts_stmts(props: &Props) -> TokenStream {
    if let Some(call) = &props.parts {
        return quote!(let parts = #call;);
    }
    let (Some(dtype), Some(shape), Some(data)) = (&props.dtype, &props.shape, &props.data) else {
        unreachable!(
            "the checker makes a tensor mapping set dtype, shape and data, or include them"
        )
    };
    let segment = props.segment.clone().unwrap_or_else(|| quote!(None));
    quote! {
        let (dtype, byte_order) = #dtype;
        let shape = #shape;
        let data = #data;
        let parts = rt::TensorParts { dtype, byte_order, shape, data, segment: #segment };
    }
}

/// Whether `e` reads nothing but the binding (no entry, position or outer name).
fn item_alone(e: &Expr) -> bool {
    let mut alone = true;
    e.walk(&mut |x| {
        if matches!(x.kind, ExprKind::Entry(_) | ExprKind::Position) {
            alone = false;
        }
    });
    alone
}

/// The parts functions of format `fid`'s mappings: one for the first mapping over each
/// message whose dtype, shape, data and segment read the item alone (no `include`), for
/// its own item function and the `include`s of it to call.
pub(crate) fn parts_fns(ir: &Ir, fid: FormatId) -> R<(Vec<PartsFn>, Vec<TokenStream>)> {
    let mut fns: Vec<PartsFn> = Vec::new();
    let mut items = Vec::new();
    let mut seen = Vec::new();
    for &mid in &ir.format(fid).mappings {
        let map = ir.mapping(mid);
        let src = mapping_source(ir, mid);
        if seen.contains(&src.msg) {
            continue;
        }
        seen.push(src.msg);
        let alone = map.stmts.iter().all(|s| match s {
            MappingStmt::Include { .. } => false,
            MappingStmt::Set { key, value } => *key == TensorKey::Name || item_alone(value),
        });
        if !alone {
            continue;
        }
        let mut env = MapEnv {
            ir,
            binding: crate::model::binding_ident(&map.binding),
            binding_name: map.binding.clone(),
            msg: src.msg,
            dtype: false,
            in_widen: false,
        };
        let mut props = Props::default();
        let mut taken = vec![map.binding.clone()];
        compile_stmts(
            ir,
            &mut env,
            mid,
            &mut props,
            &[],
            &[TensorKey::Name],
            &mut taken,
        )?;
        let body = parts_stmts(&props);
        let name = rs_ident(&format!("parts_of_{}", snake(&view_name(ir, src.msg))));
        let src_id = word(ir, "src");
        let uses_src = mentions(&body, &src_id.to_string());
        let src_param = uses_src.then(|| quote!(#src_id: &rt::Source,));
        let (binding, ty) = (
            crate::model::binding_ident(&map.binding),
            view_ident(ir, src.msg),
        );
        let doc = format!(
            " The dtype, shape and data of a `{}` as the mapping `tensor from {} as {}` reads them (and every `include` of it).",
            ir.message(src.msg).name,
            text(ir, &map.source, &map.binding),
            map.binding
        );
        items.push(quote! {
            #[doc = #doc]
            fn #name(#src_param #binding: &#ty<'_>) -> rt::Result<rt::TensorParts> {
                #body
                Ok(parts)
            }
        });
        fns.push(PartsFn {
            msg: src.msg,
            map: mid,
            name,
            src: uses_src,
        });
    }
    Ok((fns, items))
}

/// What a mapping's generated block adds its items to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Output {
    /// `rt::TensorInfo`s, one per item.
    Tensors,
    /// `rt::kv::Chunk`s of the record `r`, parts joined by name afterwards (`segment`).
    Chunks,
    /// `rt::kv::ValuePiece`s of the record `r` (a `value` mapping), joined by name when
    /// asked for (`part` of `parts`).
    Values,
}

/// The items a mapping walks to, from `start` (the root message or an entry's value):
/// an iterator (or an option, or a list) of `&M`.
fn items_expr(start: TokenStream, steps: &[(String, u32, bool)]) -> TokenStream {
    // What `cur` is: 0 the start (a message), 1 an `Option<&M>`, 2 a `&Vec<M>`, 3 an
    // iterator.
    let (mut cur, mut what) = (start, 0);
    for (seg, _, repeated) in steps {
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

/// One mapping: its item function (`fn graph_initializer(..)`: an item to its tensor or
/// chunk, `None` where `where` leaves it out), and the statement that maps the items
/// with it (`rt::protobuf::map_items`), for the function that has the root message (or
/// the entry's record) in scope.
pub(crate) struct MappingFns {
    pub(crate) item_fn: TokenStream,
    pub(crate) call: TokenStream,
    /// The entries whose records the item function takes (a `kv` format's).
    pub(crate) entries: Vec<EntryId>,
}

/// The item function and the `map_items` call of mapping `mid`.
pub(crate) fn gen_mapping(
    ir: &Ir,
    mid: MappingId,
    parts: &[PartsFn],
    output: Output,
) -> R<MappingFns> {
    let map = ir.mapping(mid);
    let src = mapping_source(ir, mid);
    let (start, mut fn_name) = match src.origin {
        Origin::Root => (quote!(root), String::new()),
        Origin::Entry(e) => {
            let value = word(ir, "value");
            (quote!(#value), ir.entry(e).name.clone())
        }
    };
    let (r, out, src_id, position) = (
        word(ir, "r"),
        word(ir, "out"),
        word(ir, "src"),
        word(ir, "position"),
    );
    for (seg, _, _) in &src.steps {
        if !fn_name.is_empty() {
            fn_name.push('_');
        }
        fn_name.push_str(seg);
    }
    if fn_name.is_empty() {
        fn_name = snake(&view_name(ir, src.msg));
    }
    let fn_name = match output {
        Output::Values => format!("value_{fn_name}"),
        _ => format!("item_{fn_name}"),
    };
    let mut env = MapEnv {
        ir,
        binding: crate::model::binding_ident(&map.binding),
        binding_name: map.binding.clone(),
        msg: src.msg,
        dtype: false,
        in_widen: false,
    };
    let filter = match &map.filter {
        // The items for which the condition does not hold are left out: its negation,
        // as a person would write it (`!c` as `c`, `a && b` as `!a || !b`).
        Some(f) => {
            let n = Lower { ir, env: &env }.negated(f)?;
            quote!(if #n { return Ok(None); })
        }
        None => quote!(),
    };
    let mut props = Props::default();
    let mut taken = vec![map.binding.clone()];
    // The mapping's own parts function, when it has one.
    match parts.iter().find(|f| f.map == mid) {
        Some(f) => {
            let skip: Vec<TensorKey> = map
                .stmts
                .iter()
                .filter_map(|s| match s {
                    MappingStmt::Set { key, .. } if *key != TensorKey::Name => Some(*key),
                    _ => None,
                })
                .collect();
            compile_stmts(ir, &mut env, mid, &mut props, parts, &skip, &mut taken)?;
            let (name, b) = (&f.name, crate::model::binding_ident(&map.binding));
            let src = word(ir, "src");
            let src = f.src.then(|| quote!(#src,));
            props.parts = Some(quote!(#name(#src #b)?));
        }
        None => compile_stmts(ir, &mut env, mid, &mut props, parts, &[], &mut taken)?,
    }
    let Some((name, owned)) = props.name.clone() else {
        unreachable!("the checker makes a tensor or value mapping set its name, or include it")
    };
    let parts_stmts = match output {
        Output::Values => quote!(),
        _ => parts_stmts(&props),
    };
    let prelude = &props.prelude;
    let by_ref = if owned { quote!(&name) } else { quote!(name) };
    let finish = match output {
        Output::Tensors => quote!(parts.info(name).map(Some)),
        Output::Chunks => quote!(rt::kv::Chunk::new(#by_ref, #r.key, parts).map(Some)),
        Output::Values => {
            let none = quote!(None);
            let data = props.data.as_ref().unwrap_or(&none);
            let part = props.part.as_ref().unwrap_or(&none);
            let parts = props.parts_of.as_ref().unwrap_or(&none);
            quote!(Ok(Some(#r.value(#by_ref, #data, #part, #parts))))
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
    if mentions(&body, &src_id.to_string()) {
        params.push(quote!(#src_id: &rt::Source));
        args.push(quote!(#src_id));
    }
    let out_ty = match output {
        Output::Tensors => quote!(rt::TensorInfo),
        Output::Chunks => {
            params.push(quote!(#r: &rt::kv::Matched<'_>));
            args.push(quote!(#r));
            quote!(rt::kv::Chunk)
        }
        Output::Values => {
            params.push(quote!(#r: &rt::kv::Matched<'_>));
            args.push(quote!(#r));
            quote!(rt::kv::ValuePiece)
        }
    };
    // The entries the body reads: a name of the body spelled like a binding in it is the
    // binding's.
    let mut entries = Vec::new();
    for &en in &ir.format(map.format).entries {
        let n = &ir.entry(en).name;
        if mentions(&body, n) && !taken.contains(n) {
            entries.push(en);
            let (id, st) = (rs_ident(n), entry_struct(ir, n));
            params.push(quote!(#id: &#st<'_, '_>));
            args.push(quote!(&#id));
        }
    }
    let uses_position = mentions(&body, &position.to_string());
    if uses_position {
        params.push(quote!(#position: usize));
        args.push(quote!(#position));
    }
    let binding = crate::model::binding_ident(&map.binding);
    let item_ty = view_ident(ir, src.msg);
    params.push(quote!(#binding: &#item_ty<'_>));
    args.push(quote!(#binding));
    let fn_id = rs_ident(&fn_name);
    let source_text = text(ir, &map.source, &map.binding);
    let (kw, what) = match output {
        Output::Values => ("value", "value piece"),
        _ => ("tensor", "tensor"),
    };
    let doc = format!(
        " The mapping `{kw} from {} as {}`: the {what} of one item{}.",
        source_text,
        map.binding,
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
    let has_name = ir
        .message(src.msg)
        .fields
        .iter()
        .any(|f| f.name == "name" && f.label != Label::Repeated && wire(f) == Wire::Str);
    let (name_of, prefix) = if has_name {
        (quote!(|x| x.name), String::new())
    } else {
        (quote!(|_| None), source_text)
    };
    let items = items_expr(start, &src.steps);
    let pos = if uses_position {
        quote!(#position)
    } else {
        quote!(_)
    };
    let out = match output {
        Output::Tensors => quote!(#out),
        Output::Chunks => quote!(&mut #out.chunks),
        Output::Values => quote!(&mut #out.values),
    };
    let call = quote! {
        rt::protobuf::map_items(#items, #name_of, #prefix, #out, |#binding, #pos| #fn_id(#(#args),*))?;
    };
    Ok(MappingFns {
        item_fn,
        call,
        entries,
    })
}

// ---------------------------------------------------------------------------------------
// The engine

/// The `protobuf` engine of format `fid`: message views, `detect`, `index`, and the
/// writer and rewriter when its first mapping has a `write` rule.
pub(crate) fn gen_protobuf(
    ir: &Ir,
    fid: FormatId,
    root: MessageId,
    runtime: &syn::Path,
) -> R<TokenStream> {
    let fmt = ir.format(fid);
    let messages = gen_messages(ir, fid, runtime);
    let (parts, parts_items) = parts_fns(ir, fid)?;
    let mut item_fns = Vec::new();
    let mut calls = Vec::new();
    for &map in &fmt.mappings {
        let m = gen_mapping(ir, map, &parts, Output::Tensors)?;
        item_fns.push(m.item_fn);
        calls.push(m.call);
    }
    let root_ty = view_ident(ir, root);
    let (src, out) = (word(ir, "src"), word(ir, "out"));
    // Detection: the whole source walks as a message whose declared fields have their
    // declared wire types, with at least one of them present.
    let checks = ir.message(root).fields.iter().map(|f| {
        let n = Literal::u32_unsuffixed(f.tag);
        let wire = match (wire(f), f.label == Label::Repeated) {
            (Wire::Varint | Wire::Bool | Wire::Zigzag, false) => quote!(Varint),
            (Wire::Float | Wire::Fixed32 { .. }, false) => quote!(I32),
            (Wire::Double | Wire::Fixed64, false) => quote!(I64),
            _ => quote!(Len),
        };
        quote!((#n, rt::protobuf::WireType::#wire))
    });
    let writer = gen_writer(ir, fid, root)?;
    let desc = match &writer {
        Some(_) => crate::engine::desc_full(
            Some(quote!(Ok(::std::boxed::Box::new(rt::protodoc::Writer::new(w, options, &DOC)?)))),
            " This format for the registry: name, extensions, detector, indexer, writer and rewriter.",
            false,
            true,
            None,
        ),
        None => {
            let read_only = format!("{} is read-only", fmt.public_name);
            crate::engine::read_only_desc(&read_only, false)
        }
    };
    let detect_doc = format!(
        " True when the whole source reads as a `{}` message: every field it declares with its declared wire type, at least one of them present (read from the fields' headers alone where the source is not in memory).",
        ir.message(root).name
    );
    Ok(quote! {
        #messages

        #[doc = #detect_doc]
        pub fn detect(src: &rt::Source, _limits: &rt::Limits) -> bool {
            rt::protobuf::is_message_at(src.data(), &[#(#checks),*])
        }

        /// Lists the tensors of `src` without reading their bytes: reads the root message in
        /// place, then maps its items.
        pub fn index(#src: &rt::Source, limits: &rt::Limits) -> rt::Result<Vec<rt::TensorInfo>> {
            rt::protobuf::index(#src, limits, |bytes, #out| {
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

/// The values a write rule has in reach: the tensor (`meta`), where the writer put it
/// (`place`, for documents) or the elements a record holds (`begin`, `end`, for `kv`).
struct WriteEnv {
    /// Whether the tensor's values are in reach (a mapping's rule, not a field option).
    tensor: bool,
}

impl Env for WriteEnv {
    fn field(&self, _l: ir::LayoutId, _f: ir::FieldId) -> Option<Val> {
        None
    }
    fn lower(&self, _l: &Lower<'_>, e: &Expr) -> Option<R<Val>> {
        let ExprKind::WriteVar(v) = e.kind else {
            return None;
        };
        if !self.tensor {
            return None;
        }
        let u64_ty = Type::Int(IntTy::sized(8, false));
        Some(Ok(match v {
            WriteVar::Name => Val::place(quote!(meta.name), Type::Str),
            WriteVar::Dtype => Val::value(quote!((meta.dtype, None)), Type::Dtype),
            WriteVar::Shape => Val::place(quote!(meta.shape), Type::List(Box::new(u64_ty))),
            WriteVar::External => Val::value(quote!(place.external), Type::Bool),
            WriteVar::Location => Val::place(quote!(place.location), Type::Str),
            WriteVar::Offset => Val::place(quote!(place.offset), u64_ty),
            WriteVar::Nbytes => Val::place(quote!(place.nbytes), u64_ty),
            WriteVar::Begin => Val::place(quote!(begin), u64_ty),
            WriteVar::End => Val::place(quote!(end), u64_ty),
            WriteVar::Data
            | WriteVar::Strides
            | WriteVar::Index
            | WriteVar::Numel
            | WriteVar::PickleData
            | WriteVar::Order
            | WriteVar::ByteOrder => {
                unreachable!(
                    "a protobuf write rule names no pickle variable (IR lowering), and `data` only as a field's whole value (check.rs `proto_data`), which `message` writes"
                )
            }
        }))
    }
}

/// A message built by a write rule.
pub(crate) enum Built {
    /// A `prost` message (`messages::M { .. }`); at the top of a document's rule, a pair
    /// with the number of the field its payload is streamed to.
    Msg(TokenStream),
    /// A message encoded already (`Vec<u8>`): it holds the tensor's elements in a field
    /// encoded from them (`float_data = data`).
    Encoded(TokenStream),
}

/// Lowers write rules: the mapping's `write = ...` and the `[write = ...]` options of
/// message fields.
pub(crate) struct WriteCx<'a> {
    pub(crate) ir: &'a Ir,
    /// The top message's `bytes` field given `data` is streamed after it (ONNX's
    /// `raw_data`); otherwise `data` is encoded into its field in memory (`data` is then
    /// a `&[u8]` in scope, and `begin`, `end` the elements it holds).
    pub(crate) stream: bool,
    env: WriteEnv,
    /// The names bound so far for the fields that the branches of a conditional message
    /// share.
    bases: RefCell<Vec<String>>,
}

impl<'a> WriteCx<'a> {
    /// The lowering of a mapping's write rule (`tensor`) or of field options.
    pub(crate) fn new(ir: &'a Ir, stream: bool, tensor: bool) -> Self {
        WriteCx {
            ir,
            stream,
            env: WriteEnv { tensor },
            bases: RefCell::default(),
        }
    }

    fn lower(&self) -> Lower<'_> {
        Lower {
            ir: self.ir,
            env: &self.env,
        }
    }

    /// A message-valued rule: `M(..)`, or an `if` of them; what it binds first (encoded
    /// messages, the fields the branches of an `if` share) in a block before it.
    pub(crate) fn build(&self, e: &Expr, top: bool) -> R<Built> {
        let (pre, built) = self.build_apart(e, top)?;
        Ok(if pre.is_empty() {
            built
        } else {
            match built {
                Built::Msg(ts) => Built::Msg(quote!({ #(#pre)* #ts })),
                Built::Encoded(ts) => Built::Encoded(quote!({ #(#pre)* #ts })),
            }
        })
    }

    /// [`build`](Self::build) apart: the statements that bind what the value needs
    /// first, and the value.
    pub(crate) fn build_apart(&self, e: &Expr, top: bool) -> R<(Vec<TokenStream>, Built)> {
        let mut pre = Vec::new();
        let built = self.build_in(e, top, &mut pre)?;
        Ok((pre, built))
    }

    /// [`build`](Self::build), adding the statements the value needs first to `pre`.
    fn build_in(&self, e: &Expr, top: bool, pre: &mut Vec<TokenStream>) -> R<Built> {
        match &e.kind {
            ExprKind::If { .. } => self.choice(e, top, pre),
            ExprKind::NewMessage { message, fields } => {
                self.message(*message, fields, top, None, pre)
            }
            _ => unreachable!("the checker makes every write rule build a message"),
        }
    }

    /// `if a { M(..) } else if b { .. } else { .. }`. When every branch builds the same
    /// message, the fields every branch sets alike are set once, before the `if` (in
    /// `pre`), and each branch gives only its own (`..tensor_proto`).
    fn choice(&self, e: &Expr, top: bool, pre: &mut Vec<TokenStream>) -> R<Built> {
        let mut conds = Vec::new();
        let mut branches = Vec::new();
        let mut cur = e;
        while let ExprKind::If {
            cond,
            then,
            otherwise,
        } = &cur.kind
        {
            conds.push(self.lower().expr(cond)?.scalar());
            branches.push(&**then);
            cur = otherwise;
        }
        branches.push(cur);
        let base = self.common(&branches, pre)?;
        let mut built = Vec::new();
        for b in &branches {
            let mut own = Vec::new();
            let v = match (&b.kind, &base) {
                (ExprKind::NewMessage { message, fields }, Some((id, common))) => {
                    let rest: Vec<(usize, Expr)> = fields
                        .iter()
                        .filter(|(i, _)| !common.contains(i))
                        .cloned()
                        .collect();
                    self.message(*message, &rest, top, Some(id), &mut own)?
                }
                _ => self.build_in(b, top, &mut own)?,
            };
            built.push((own, v));
        }
        // Every branch of one kind: encoded when one is.
        let encoded = built.iter().any(|(_, v)| matches!(v, Built::Encoded(_)));
        let code: Vec<TokenStream> = built
            .into_iter()
            .map(|(own, v)| {
                let ts = match v {
                    Built::Msg(ts) if encoded => {
                        quote!(rt::protobuf::prost::Message::encode_to_vec(&#ts))
                    }
                    Built::Msg(ts) | Built::Encoded(ts) => ts,
                };
                if own.is_empty() {
                    ts
                } else {
                    quote!({ #(#own)* #ts })
                }
            })
            .collect();
        let (last, firsts) = code.split_last().expect("an `if` has an else branch");
        let mut ts = quote!({ #last });
        for (c, b) in conds.iter().zip(firsts).rev() {
            ts = quote!(if #c { #b } else #ts);
        }
        Ok(if encoded {
            Built::Encoded(ts)
        } else {
            Built::Msg(ts)
        })
    }

    /// The fields that every branch sets alike, when every branch builds the same
    /// message: bound in `pre` as a message of those fields, its name and the fields.
    fn common(
        &self,
        branches: &[&Expr],
        pre: &mut Vec<TokenStream>,
    ) -> R<Option<(Ident, Vec<usize>)>> {
        let mut msgs = Vec::new();
        for b in branches {
            match &b.kind {
                ExprKind::NewMessage { message, fields }
                    if msgs.first().is_none_or(|(m, _)| m == message) =>
                {
                    msgs.push((*message, fields));
                }
                _ => return Ok(None),
            }
        }
        let mid = msgs[0].0;
        // Each branch's plain fields, by their code.
        let mut sets = Vec::new();
        for (_, fields) in &msgs {
            let mut set = Vec::new();
            for (i, v) in fields.iter() {
                if let Some(code) = self.plain_set(mid, *i, v)? {
                    set.push((*i, code.to_string()));
                }
            }
            sets.push(set);
        }
        let common: Vec<usize> = sets[0]
            .iter()
            .filter(|f| sets[1..].iter().all(|s| s.contains(f)))
            .map(|(i, _)| *i)
            .collect();
        if common.is_empty() {
            return Ok(None);
        }
        let fields: Vec<(usize, Expr)> = msgs[0]
            .1
            .iter()
            .filter(|(i, _)| common.contains(i))
            .cloned()
            .collect();
        let Built::Msg(shared) = self.message(mid, &fields, false, None, pre)? else {
            return Ok(None);
        };
        let id = self.fresh(&snake(&view_name(self.ir, mid)));
        pre.push(quote!(let #id = #shared;));
        Ok(Some((id, common)))
    }

    /// A name for a binding from `base`, unlike the rule's other names.
    fn fresh(&self, base: &str) -> Ident {
        const TAKEN: &[&str] = &["meta", "data", "begin", "end", "place", "name", "doc"];
        let mut bases = self.bases.borrow_mut();
        let mut name = base.to_string();
        let mut i = 1;
        while TAKEN.contains(&name.as_str()) || bases.contains(&name) {
            i += 1;
            name = format!("{base}_{i}");
        }
        bases.push(name.clone());
        rs_ident(&name)
    }

    /// The code of `field = value` of message `mid` when it is plain (no tensor
    /// elements, no message encoded or bound first), to compare branches by.
    fn plain_set(&self, mid: MessageId, i: usize, value: &Expr) -> R<Option<TokenStream>> {
        let f = &self.ir.message(mid).fields[i];
        let id = rs_ident(&f.name);
        if matches!(value.kind, ExprKind::WriteVar(WriteVar::Data)) {
            return Ok(None);
        }
        if let (ProtoType::Message(_), false) = (f.proto, f.label == Label::Repeated) {
            let mut pre = Vec::new();
            return Ok(match self.build_in(value, false, &mut pre)? {
                Built::Msg(ts) if pre.is_empty() => Some(quote!(#id: Some(#ts),)),
                _ => None,
            });
        }
        let v = self.assign(mid, i, value)?;
        Ok(Some(quote!(#id: #v,)))
    }

    /// `M(field = value, ...)`: the prost message with those fields set (the others from
    /// `base`, or their defaults); with the tensor's elements in one of its fields (or in
    /// a message in one), the message encoded, the messages encoded already that it
    /// holds bound first (in `pre`).
    fn message(
        &self,
        mid: MessageId,
        args: &[(usize, Expr)],
        top: bool,
        base: Option<&Ident>,
        pre: &mut Vec<TokenStream>,
    ) -> R<Built> {
        let m = self.ir.message(mid);
        let ty = view_ident(self.ir, mid);
        let mut sets = Vec::new();
        // What is added to the encoded message: elements, and messages encoded already
        // (bound first).
        let mut extras: Vec<(Literal, TokenStream)> = Vec::new();
        let mut payload = None;
        for (i, value) in args {
            let f = &m.fields[*i];
            let id = rs_ident(&f.name);
            let tag = Literal::u32_unsuffixed(f.tag);
            let repeated = f.label == Label::Repeated;
            if matches!(value.kind, ExprKind::WriteVar(WriteVar::Data)) {
                if self.stream {
                    // A repeated field holds a string tensor's elements, one value each.
                    payload = Some(if repeated {
                        quote!(#tag | rt::protodoc::REPEATED)
                    } else {
                        quote!(#tag)
                    });
                    continue;
                }
                let holder = match (wire(f), repeated) {
                    (Wire::Float, true) => quote!(Float),
                    (Wire::Double, true) => quote!(Double),
                    (Wire::Bytes | Wire::Str, false) => quote!(Bytes),
                    (Wire::Bytes | Wire::Str, true) => quote!(Strings),
                    _ => quote!(Varint),
                };
                extras.push((
                    tag,
                    quote!(rt::protobuf::Holder::#holder.elements(meta.dtype, data)),
                ));
                continue;
            }
            if let (ProtoType::Message(_), false) = (f.proto, repeated) {
                match self.build_in(value, false, pre)? {
                    Built::Encoded(ts) => {
                        pre.push(quote!(let #id = #ts;));
                        extras.push((tag, quote!(rt::protobuf::Extra::Message(&#id))));
                    }
                    Built::Msg(ts) => sets.push(quote!(#id: Some(#ts),)),
                }
                continue;
            }
            let v = self.assign(mid, *i, value)?;
            sets.push(quote!(#id: #v,));
        }
        let build = match base {
            Some(b) if sets.is_empty() => quote!(#b),
            Some(b) => quote!(messages::#ty { #(#sets)* ..#b }),
            None if sets.len() < m.fields.len() => {
                quote!(messages::#ty { #(#sets)* ..Default::default() })
            }
            None => quote!(messages::#ty { #(#sets)* }),
        };
        if !extras.is_empty() {
            let encoded = quote!(rt::protobuf::prost::Message::encode_to_vec(&#build));
            let adds = extras.iter().map(|(tag, add)| quote!((#tag, #add)));
            return Ok(Built::Encoded(
                quote!(rt::protobuf::append(#encoded, [#(#adds),*])?),
            ));
        }
        if top && self.stream {
            let p = match payload {
                Some(n) => quote!(Some(#n)),
                None => quote!(None),
            };
            return Ok(Built::Msg(quote!((#build, #p))));
        }
        Ok(Built::Msg(build))
    }

    /// The value of field `i` of message `mid` given `e`, as the prost field's type.
    fn assign(&self, mid: MessageId, i: usize, e: &Expr) -> R<TokenStream> {
        let m = self.ir.message(mid);
        let f = &m.fields[i];
        let what = format!("{}.{}", m.name, f.name);
        let (rust_ty, _) = prost_ty(self.ir, f);
        let value = match (f.label, &e.kind) {
            (Label::Repeated, ExprKind::List(items)) => {
                let items = items
                    .iter()
                    .map(|x| self.item(f, &rust_ty, &what, x))
                    .collect::<R<Vec<_>>>()?;
                return Ok(quote!(Vec::from([#(#items),*])));
            }
            (Label::Repeated, _) => {
                let v = self.lower().expr(e)?;
                let list = v.by_ref();
                return Ok(match v.ty.element() {
                    Some(Type::Int(_)) if v.form != Form::Value => {
                        quote!(rt::protobuf::ints(#list, #what)?)
                    }
                    _ => quote!(#list.to_vec()),
                });
            }
            _ => self.item(f, &rust_ty, &what, e)?,
        };
        Ok(
            if f.label == Label::Optional || matches!(f.proto, ProtoType::Message(_)) {
                quote!(Some(#value))
            } else {
                value
            },
        )
    }

    /// One value of field `f` (of Rust type `rust_ty`) given `e`.
    fn item(
        &self,
        f: &MessageField,
        rust_ty: &TokenStream,
        what: &str,
        e: &Expr,
    ) -> R<TokenStream> {
        if let ProtoType::Message(_) = f.proto {
            return match self.build(e, false)? {
                Built::Msg(ts) => Ok(ts),
                Built::Encoded(_) => unreachable!(
                    "rule `messages` keeps `data` out of the items of a list of messages"
                ),
            };
        }
        // Integers: literals checked here, `key_of` typed by the field, others narrowed.
        let int_field = matches!(
            wire(f),
            Wire::Varint | Wire::Zigzag | Wire::Fixed32 { .. } | Wire::Fixed64
        );
        if int_field {
            match &e.kind {
                ExprKind::Call {
                    func: Builtin::KeyOf,
                    args,
                } => {
                    if let (Some(ExprKind::Table(t)), Some(d)) =
                        (args.first().map(|a| &a.value.kind), args.get(1))
                    {
                        let table = rs_ident(&crate::table::const_name(&self.ir.table(*t).name));
                        let d = self.lower().expr(&d.value)?;
                        let d = crate::lower::dtype_of(&d);
                        return Ok(quote!(rt::protobuf::key_of(&#table, #d)?));
                    }
                }
                ExprKind::Const(ir::Const::Int(_)) | ExprKind::EnumValue(..) => {
                    let v = self.lower().expr(e)?.scalar();
                    let n = crate::lower::literal(self.ir, e).unwrap_or_default();
                    let fits = match rust_ty.to_string().as_str() {
                        "i32" => i32::try_from(n).is_ok(),
                        "u32" => u32::try_from(n).is_ok(),
                        "u64" => u64::try_from(n).is_ok(),
                        _ => i64::try_from(n).is_ok(),
                    };
                    if fits {
                        return Ok(v);
                    }
                }
                _ => {}
            }
            let v = self.lower().expr(e)?;
            let v = match v.form {
                Form::Value => v.scalar(),
                _ => v.scalar_stored(),
            };
            return Ok(quote!(rt::protobuf::narrow(#v, #what)?));
        }
        let v = self.lower().expr(e)?;
        Ok(match wire(f) {
            Wire::Bool if v.ty == Type::Bool => v.scalar(),
            Wire::Bool => {
                let s = v.scalar();
                quote!(#s != 0)
            }
            Wire::Float => {
                let s = v.scalar();
                quote!(#s as f32)
            }
            Wire::Double => {
                let s = v.scalar();
                quote!(#s as f64)
            }
            Wire::Str => match (&e.kind, v.form) {
                // Text made by the rule is owned already.
                (_, Form::Owned) => v.ts,
                (_, Form::Place) => {
                    let ts = &v.ts;
                    quote!(#ts.clone())
                }
                _ => {
                    let s = v.scalar();
                    quote!(#s.to_string())
                }
            },
            _ => {
                let s = v.scalar();
                match v.ty {
                    Type::Str => quote!(#s.as_bytes().to_vec()),
                    _ => quote!(#s.to_vec()),
                }
            }
        })
    }
}

/// The writer of a protobuf format whose (first) mapping has a `write` rule: a new
/// document holds the messages on the mapping's path with their fields' `[write = ...]`
/// values and one item per tensor; `rewrite` replaces items of an existing document.
fn gen_writer(ir: &Ir, fid: FormatId, root: MessageId) -> R<Option<TokenStream>> {
    let fmt = ir.format(fid);
    let Some(&mid) = fmt.mappings.first() else {
        return Ok(None);
    };
    let map = ir.mapping(mid);
    let Some(rule) = &map.write else {
        return Ok(None);
    };
    let src = mapping_source(ir, mid);
    let wcx = WriteCx::new(ir, true, true);
    let (rule_pre, rule_ts) = match wcx.build_apart(rule, true)? {
        (pre, Built::Msg(ts)) => (pre, ts),
        (_, Built::Encoded(_)) => {
            unreachable!(
                "a document streams `data` (`WriteCx::stream`): no message it builds is encoded"
            )
        }
    };
    // Where the tensor is placed matters only to a rule that says so (external data).
    let place = if mentions(&rule_ts, "place") {
        quote!(place)
    } else {
        quote!(_)
    };
    let item_ty = view_ident(ir, src.msg);

    // The messages on the path: a constructor each, with the `[write = ...]` fields.
    let fields_cx = WriteCx::new(ir, true, false);
    let mut ctors = Vec::new();
    let mut opens = Vec::new();
    let mut numbers = Vec::new();
    let _ = root;
    for ((seg, tag, _), &msg) in src.steps.iter().zip(&src.through) {
        let m = ir.message(msg);
        let mut sets = Vec::new();
        for (j, g) in m.fields.iter().enumerate() {
            if let Some(e) = &g.write {
                let id = rs_ident(&g.name);
                let v = fields_cx.assign(msg, j, e)?;
                sets.push(quote!(#id: #v,));
            }
        }
        let ty = view_ident(ir, msg);
        let fn_name = rs_ident(&format!("new_{}_message", snake(&view_name(ir, msg))));
        let doc = format!(
            " A new `{}`: its fields with a `write` option, before its `{}` field.",
            m.name, seg
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
        numbers.push(Literal::u32_unsuffixed(*tag));
        opens.push(quote!(rt::protobuf::prost::Message::encode_to_vec(&#fn_name()?)));
    }
    let (Some(items_n), Some((_, _, true))) = (numbers.pop(), src.steps.last()) else {
        unreachable!("the checker makes a written document's tensors items of a repeated field")
    };
    let depth = Literal::u64_unsuffixed(src.steps.len() as u64);
    let public = &fmt.public_name;
    let source_text = text(ir, &map.source, &map.binding);
    let doc_doc = format!(
        " How `{public}` documents are written: the messages down to `{source_text}` with their `write` values, then one item per tensor (the mapping's `write` rule) among the items of `{source_text}`, payloads inline or in external files as `WriteOptions::external` says.",
    );
    let path = numbers;
    let name_of = if ir
        .message(src.msg)
        .fields
        .iter()
        .any(|f| f.name == "name" && f.label != Label::Repeated && wire(f) == Wire::Str)
    {
        quote!(item.name.unwrap_or(""))
    } else {
        quote!("")
    };
    Ok(Some(quote! {
        #(#ctors)*

        #[doc = #doc_doc]
        pub const DOC: rt::protodoc::DocFormat = rt::protodoc::DocFormat {
            tensors: rt::protodoc::TensorField { path: &[#(#path),*], items: #items_n, format: NAME },
            head,
            item: tensor_item,
            name_of: item_name,
        };

        /// The messages written before the tensors, root first.
        fn head() -> rt::Result<Vec<Vec<u8>>> {
            Ok(vec![#(#opens),*])
        }

        /// The item written for one tensor placed at `place` (the mapping's `write` rule),
        /// encoded without its payload, and the field its bytes go to when they are
        /// inline.
        pub fn tensor_item(
            meta: &rt::TensorMeta,
            #place: &rt::protodoc::Placement,
        ) -> rt::Result<(Vec<u8>, Option<u32>)> {
            #(#rule_pre)*
            let (item, payload): (messages::#item_ty, Option<u32>) = #rule_ts;
            Ok((rt::protobuf::prost::Message::encode_to_vec(&item), payload))
        }

        /// The name of the item at `at`, for rewriting.
        fn item_name(b: &[u8], at: u64, limits: &rt::Limits) -> rt::Result<String> {
            let item: #item_ty<'_> = rt::protobuf::read(b, at, #depth, limits)?;
            Ok(#name_of.to_string())
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
            rt::protodoc::rewrite_doc(src, w, options, limits, replace, &DOC)
        }
    }))
}
