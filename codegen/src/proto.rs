//! The `protobuf` engine: the whole source is one protobuf message
//! (`engine protobuf(root = ModelProto);`). Every declared message becomes a view type
//! whose reader walks the message in place (the runtime's `protobuf::fields`): scalars
//! are decoded, strings borrowed, `bytes` fields located (a slice and its absolute
//! offset), embedded messages read recursively with the depth checked, repeated scalars
//! left where they are for the mapping to read (`elements(f)`, `shape = t.dims`).
//! Fields the schema does not declare are skipped.

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

/// The view type and reader of one message.
pub(crate) fn gen_message(cx: &Cx<'_>, fmt: &Fmt<'_>, m: &Message) -> GResult<TokenStream> {
    if let Some(n) = m.messages.first() {
        return Err(cx.unsupported(n.span, "a nested message"));
    }
    let ty = rs_ident(&m.name.name);
    let doc = docs(&m.docs);
    let mut fields = Vec::new();
    let mut inits = Vec::new();
    let mut bodies: Vec<(Literal, TokenStream)> = Vec::new();
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
        let wrong = quote!(_ => return Err(rt::protobuf::wrong_wire_type(&f, #what)),);
        match (&k, repeated) {
            (Kind::Varint | Kind::Float | Kind::Double, true) => {
                // Read where they are, by the mapping.
                continue;
            }
            (Kind::Varint, false) => {
                fields.push(quote!(#fdoc pub #id: ::std::option::Option<i64>,));
                inits.push(quote!(#id: None,));
                bodies.push((
                    num.clone(),
                    quote!(match f.value {
                        rt::protobuf::Value::Varint(v) => m.#id = Some(v as i64),
                        #wrong
                    }),
                ));
            }
            (Kind::Float, false) => {
                fields.push(quote!(#fdoc pub #id: ::std::option::Option<f32>,));
                inits.push(quote!(#id: None,));
                bodies.push((
                    num.clone(),
                    quote!(match f.value {
                        rt::protobuf::Value::I32(v) => m.#id = Some(f32::from_bits(v)),
                        #wrong
                    }),
                ));
            }
            (Kind::Double, false) => {
                fields.push(quote!(#fdoc pub #id: ::std::option::Option<f64>,));
                inits.push(quote!(#id: None,));
                bodies.push((
                    num.clone(),
                    quote!(match f.value {
                        rt::protobuf::Value::I64(v) => m.#id = Some(f64::from_bits(v)),
                        #wrong
                    }),
                ));
            }
            (Kind::Str, false) => {
                fields.push(quote!(#fdoc pub #id: ::std::option::Option<&'a str>,));
                inits.push(quote!(#id: None,));
                bodies.push((num.clone(), quote!(match f.value {
                    rt::protobuf::Value::Len(b, at) => m.#id = Some(rt::protobuf::utf8(b, at, #what)?),
                    #wrong
                })));
            }
            (Kind::Str, true) => {
                fields.push(quote!(#fdoc pub #id: ::std::vec::Vec<&'a str>,));
                inits.push(quote!(#id: ::std::vec::Vec::new(),));
                bodies.push((num.clone(), quote!(match f.value {
                    rt::protobuf::Value::Len(b, at) => m.#id.push(rt::protobuf::utf8(b, at, #what)?),
                    #wrong
                })));
            }
            (Kind::Bytes, false) => {
                fields.push(quote!(#fdoc pub #id: ::std::option::Option<(&'a [u8], u64)>,));
                inits.push(quote!(#id: None,));
                bodies.push((
                    num.clone(),
                    quote!(match f.value {
                        rt::protobuf::Value::Len(b, at) => m.#id = Some((b, at)),
                        #wrong
                    }),
                ));
            }
            (Kind::Bytes, true) => {
                fields.push(quote!(#fdoc pub #id: ::std::vec::Vec<(&'a [u8], u64)>,));
                inits.push(quote!(#id: ::std::vec::Vec::new(),));
                bodies.push((
                    num.clone(),
                    quote!(match f.value {
                        rt::protobuf::Value::Len(b, at) => m.#id.push((b, at)),
                        #wrong
                    }),
                ));
            }
            (Kind::Msg(name), rep) => {
                let sub = rs_ident(name);
                if rep {
                    fields.push(quote!(#fdoc pub #id: ::std::vec::Vec<#sub<'a>>,));
                    inits.push(quote!(#id: ::std::vec::Vec::new(),));
                    bodies.push((num.clone(), quote!(match f.value {
                        rt::protobuf::Value::Len(b, at) => m.#id.push(#sub::read(b, at, depth + 1, limits)?),
                        #wrong
                    })));
                } else {
                    // A message given more than once: the last one (this reader does not
                    // merge them).
                    fields.push(
                        quote!(#fdoc pub #id: ::std::option::Option<::std::boxed::Box<#sub<'a>>>,),
                    );
                    inits.push(quote!(#id: None,));
                    bodies.push((num.clone(), quote!(match f.value {
                        rt::protobuf::Value::Len(b, at) => m.#id = Some(::std::boxed::Box::new(#sub::read(b, at, depth + 1, limits)?)),
                        #wrong
                    })));
                }
            }
        }
    }
    let arms: Vec<TokenStream> = bodies
        .iter()
        .map(|(num, body)| quote!(#num => #body,))
        .collect();
    // One field: an `if` (a one-arm `match` reads as one).
    let dispatch = if bodies.len() == 1 {
        let (num, arm) = &bodies[0];
        quote!(if f.number == #num { #arm })
    } else {
        quote!(match f.number {
            #(#arms)*
            _ => {}
        })
    };
    let read_doc = format!(
        " Reads a `{}` from `bytes`, whose first byte is at absolute offset `base`, `depth` messages deep (at most `limits.max_depth`).",
        m.name.name
    );
    let deep = format!("{} nesting depth", m.name.name);
    Ok(quote! {
        #doc
        #[derive(Debug, Clone)]
        pub struct #ty<'a> {
            /// The message's bytes.
            pub bytes: &'a [u8],
            /// Absolute offset of its first byte.
            pub base: u64,
            #(#fields)*
        }

        impl<'a> #ty<'a> {
            #[doc = #read_doc]
            pub fn read(bytes: &'a [u8], base: u64, depth: u64, limits: &rt::Limits) -> rt::Result<Self> {
                if depth > limits.max_depth {
                    return Err(rt::Error::new(
                        rt::ErrorKind::Limit { what: #deep, limit: limits.max_depth, actual: depth },
                        rt::Location::default().with_offset(base),
                    ));
                }
                let mut m = #ty { bytes, base, #(#inits)* };
                for f in rt::protobuf::fields(bytes, base) {
                    let f = f?;
                    #dispatch
                }
                Ok(m)
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
        if optional {
            return Ok(match (k, repeated) {
                (Kind::Msg(n), false) => V {
                    ts: quote!((#b).and_then(|x| x.#id.as_deref())),
                    t: T::OptMsg(n),
                },
                (Kind::Varint, false) => V {
                    ts: quote!((#b).and_then(|x| x.#id).unwrap_or(0)),
                    t: T::Int,
                },
                (Kind::Str, false) => V {
                    ts: quote!((#b).and_then(|x| x.#id)),
                    t: T::OptStr,
                },
                (Kind::Bytes, false) => V {
                    ts: quote!((#b).and_then(|x| x.#id)),
                    t: T::OptBytes,
                },
                _ => {
                    return Err(cx.unsupported(
                        name.span,
                        "a repeated field of an optional message in a mapping",
                    ))
                }
            });
        }
        Ok(match (k, repeated) {
            (Kind::Msg(n), false) => V {
                ts: quote!((#b).#id.as_deref()),
                t: T::OptMsg(n),
            },
            (Kind::Msg(n), true) => V {
                ts: quote!((#b).#id),
                t: T::Msgs(n),
            },
            (Kind::Varint, false) => V {
                // Absent: the protobuf default.
                ts: quote!((#b).#id.unwrap_or(0)),
                t: T::Int,
            },
            (Kind::Str, false) => V {
                ts: quote!((#b).#id),
                t: T::OptStr,
            },
            (Kind::Str, true) => V {
                ts: quote!((#b).#id),
                t: T::Strs,
            },
            (Kind::Bytes, false) => V {
                ts: quote!((#b).#id),
                t: T::OptBytes,
            },
            (k @ (Kind::Varint | Kind::Float | Kind::Double | Kind::Bytes), true) => V {
                ts: quote!(#b),
                t: T::Field(quote!(#b), f.tag, k),
            },
            _ => return Err(cx.unsupported(name.span, "this field in a mapping")),
        })
    }

    fn compile(&self, cx: &Cx<'_>, e: &Expr) -> GResult<V> {
        match &e.kind {
            ExprKind::Str(s) => Ok(V {
                ts: quote!(#s),
                t: T::Lit,
            }),

            ExprKind::Path(p) => {
                let first = p[0].name.as_str();
                if let Some(en) = self.entries.iter().find(|x| x.name == first) {
                    let b = rs_ident(first);
                    let Some(seg) = p.get(1) else {
                        return Err(cx.unsupported(e.span, "an entry as a value"));
                    };
                    if seg.name == "value" {
                        let mut v = V {
                            ts: quote!(#b.value),
                            t: T::Msg(en.msg.clone()),
                        };
                        for seg in &p[2..] {
                            v = self.member(cx, e, &v, seg)?;
                        }
                        return Ok(v);
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
                if let Some((_, outer_msg)) = self.outer.iter().find(|(b, _)| b == first) {
                    let b = rs_ident(first);
                    let mut v = V {
                        ts: quote!(#b),
                        t: T::Msg(outer_msg.clone()),
                    };
                    for seg in &p[1..] {
                        v = self.member(cx, e, &v, seg)?;
                    }
                    return Ok(v);
                }
                if first == self.binding {
                    let b = rs_ident(&self.binding);
                    let mut v = V {
                        ts: quote!(#b),
                        t: T::Msg(self.binding_msg.clone()),
                    };
                    for seg in &p[1..] {
                        v = self.member(cx, e, &v, seg)?;
                    }
                    return Ok(v);
                }
                if p.len() == 1 && first == "dtype" {
                    if !self.dtype {
                        return Err(cx.err(e.span, "`dtype` is used before it is assigned"));
                    }
                    return Ok(V {
                        ts: quote!(dtype.0),
                        t: T::Dtype,
                    });
                }
                if p.len() == 1 {
                    if let Some(d) = dtype_variant(first) {
                        return Ok(V { ts: d, t: T::Dtype });
                    }
                }
                // `Message.Enum.VALUE`.
                if let [m, en, val] = p.as_slice() {
                    if let Some(msg) = self.fmt.ast.message(&m.name) {
                        if let Some(decl) = msg.enums.iter().find(|x| x.name.name == en.name) {
                            if let Some((_, n)) =
                                decl.values.iter().find(|(i, _)| i.name == val.name)
                            {
                                let l = Literal::i64_unsuffixed(*n);
                                return Ok(V {
                                    ts: quote!(#l),
                                    t: T::Int,
                                });
                            }
                        }
                    }
                }
                Err(cx.unsupported(
                    e.span,
                    &format!("the name `{}` in this mapping", cx.text(e.span)),
                ))
            }
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
                let ts = v.ts;
                Ok(V {
                    ts: quote!(!(#ts)),
                    t: T::Bool,
                })
            }
            ExprKind::Index { base, index } => {
                // `table[int]` is the dtype statement's; here: `repeated_kv["key"]` (the
                // value of the last entry with that key, as a map keeps it),
                // `repeated_named["name"]` (the last message with that name) or
                // `repeated_strings[i]`.
                let b = self.compile(cx, base)?;
                let k = self.compile(cx, index)?;
                let (bts, kts) = (&b.ts, &k.ts);
                if let (T::Strs, T::Int) = (&b.t, &k.t) {
                    return Ok(V {
                        ts: quote!(usize::try_from(#kts).ok().and_then(|i| #bts.get(i).copied())),
                        t: T::OptStr,
                    });
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
                        ts: quote!(#bts.iter().rev().find(|x| x.key == Some(#kts)).and_then(|x| x.value)),
                        t: T::OptStr,
                    });
                }
                if has("name") {
                    return Ok(V {
                        ts: quote!(#bts.iter().rev().find(|x| x.name == Some(#kts))),
                        t: T::OptMsg(m.clone()),
                    });
                }
                Err(cx.unsupported(
                    e.span,
                    "a lookup in messages without `key` and `value` or `name`",
                ))
            }
            ExprKind::Call { callee, args } if callee.len() == 1 => {
                let name = callee[0].name.as_str();
                match (name, args.as_slice()) {
                    ("has", [a]) => {
                        let v = self.compile(cx, &a.value)?;
                        let ts = &v.ts;
                        match v.t {
                            T::OptStr | T::OptBytes | T::OptMsg(_) => Ok(V {
                                ts: quote!((#ts).is_some()),
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
                        let ts = v.ts;
                        Ok(V {
                            ts: quote!(::std::string::ToString::to_string(&(#ts))),
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
                let mut parts = Vec::new();
                self.text_parts(cx, e, &mut parts)?;
                let fmt_str = "{}".repeat(parts.len());
                Ok(V {
                    ts: quote!(format!(#fmt_str, #(#parts),*)),
                    t: T::Owned,
                })
            }
            ExprKind::Binary { op, lhs, rhs } => {
                let (l, r) = (self.compile(cx, lhs)?, self.compile(cx, rhs)?);
                let (lt, rt_) = (&l.ts, &r.ts);
                let same = matches!(
                    (&l.t, &r.t),
                    (T::Int, T::Int) | (T::Dtype, T::Dtype) | (T::Bool, T::Bool)
                );
                // Text against a literal: an absent field reads as its default, "".
                let text = match (&l.t, &r.t) {
                    (T::OptStr, T::Lit) => Some(quote!((#lt).unwrap_or("") == #rt_)),
                    (T::Lit, T::OptStr) => Some(quote!(#lt == (#rt_).unwrap_or(""))),
                    _ => None,
                };
                match op {
                    BinaryOp::Eq | BinaryOp::Ne if text.is_some() => {
                        let ts = text.unwrap_or_default();
                        let ts = if *op == BinaryOp::Eq {
                            ts
                        } else {
                            quote!(!(#ts))
                        };
                        Ok(V { ts, t: T::Bool })
                    }
                    BinaryOp::Eq | BinaryOp::Ne if same => {
                        let ts = if *op == BinaryOp::Eq {
                            quote!((#lt) == (#rt_))
                        } else {
                            quote!((#lt) != (#rt_))
                        };
                        Ok(V { ts, t: T::Bool })
                    }
                    BinaryOp::And if l.t.is(&T::Bool) && r.t.is(&T::Bool) => Ok(V {
                        ts: quote!((#lt) && (#rt_)),
                        t: T::Bool,
                    }),
                    BinaryOp::Or if l.t.is(&T::Bool) && r.t.is(&T::Bool) => Ok(V {
                        ts: quote!((#lt) || (#rt_)),
                        t: T::Bool,
                    }),
                    _ => Err(cx.unsupported(e.span, "this operation in a mapping")),
                }
            }
            ExprKind::In { expr, list } => {
                let mut v = self.compile(cx, expr)?;
                if v.t.is(&T::OptStr) {
                    // Text: an absent field reads as "".
                    let ts = v.ts;
                    v = V {
                        ts: quote!((#ts).unwrap_or("")),
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
                    ts: quote!(if #cts { #ats } else { #bts }),
                    t: T::Data,
                })
            }
            _ => Err(cx.unsupported(e.span, &format!("`{}` in this mapping", cx.text(e.span)))),
        }
    }

    /// The text pieces of `a + b + ...`, in order.
    fn text_parts(&self, cx: &Cx<'_>, e: &Expr, out: &mut Vec<TokenStream>) -> GResult<()> {
        if let ExprKind::Binary {
            op: BinaryOp::Add,
            lhs,
            rhs,
        } = &e.kind
        {
            self.text_parts(cx, lhs, out)?;
            return self.text_parts(cx, rhs, out);
        }
        let v = self.compile(cx, e)?;
        let ts = v.ts;
        out.push(match v.t {
            T::Lit | T::Owned => ts,
            T::OptStr => quote!((#ts).unwrap_or("")),
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
        let missing = format!("`{}` is missing", cx.text(e.span));
        Ok(V {
            ts: quote!(match #ts {
                Some((b, at)) => (rt::DataLocation::Range { offset: at, len: b.len() as u64 }, u64::MAX),
                None => return Err(rt::Error::from(rt::ErrorKind::Invalid(#missing.to_string()))),
            }),
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
            _ => quote!(rt::protobuf::Elements::Varint {
                width: dtype.0.itemsize().unwrap_or(8).clamp(1, 8) as u8
            }),
        };
        Ok(V {
            ts: quote!({
                let m = #msg;
                let elements = #elements;
                let span = rt::protobuf::element_span(m.bytes, m.base, #n, elements)?;
                let location = match (elements, span.plain) {
                    (rt::protobuf::Elements::Fixed { .. }, Some((offset, len))) => rt::DataLocation::Range { offset, len },
                    _ => rt::protobuf::FieldValues {
                        offset: m.base,
                        message_len: m.bytes.len() as u64,
                        number: #n,
                        elements,
                        len: span.bytes,
                    }
                    .location(),
                };
                (location, span.count)
            }),
            t: T::Data,
        })
    }

    /// `external(location = , offset = , length = )`: bytes in a file beside the source.
    fn external(&self, cx: &Cx<'_>, e: &Expr, args: &[Arg]) -> GResult<V> {
        let mut loc = None;
        let mut off = quote!(None::<&str>);
        let mut len = quote!(None::<&str>);
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
            ts: quote!({
                let path = (#loc).ok_or_else(|| rt::Error::from(rt::ErrorKind::Invalid(
                    "external data without a location".to_string())))?;
                let number = |s: ::std::option::Option<&str>, what: &str| -> rt::Result<::std::option::Option<u64>> {
                    s.map(|s| s.trim().parse::<u64>().map_err(|_| rt::Error::from(rt::ErrorKind::Invalid(
                        format!("external data {what} {s:?} is not a non-negative integer")))))
                        .transpose()
                };
                let file = src.external(path)?;
                let size = file.as_bytes().len() as u64;
                let offset = number(#off, "offset")?.unwrap_or(0);
                let len = match number(#len, "length")? {
                    Some(n) => n,
                    None => size.checked_sub(offset).ok_or_else(|| rt::Error::from(rt::ErrorKind::Invalid(
                        format!("external data offset {offset} is past the end of '{path}' ({size} bytes)"))))?,
                };
                match offset.checked_add(len) {
                    Some(end) if end <= size => {}
                    _ => return Err(rt::Error::from(rt::ErrorKind::Truncated { needed: len, available: size.saturating_sub(offset) })
                        .in_field(&format!("external file '{path}' at offset {offset}"))),
                }
                (rt::DataLocation::External { path: path.to_string(), offset, len }, u64::MAX)
            }),
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
    name: Option<TokenStream>,
    dtype: Option<TokenStream>,
    shape: Option<TokenStream>,
    data: Option<TokenStream>,
    segment: Option<TokenStream>,
}

/// Compiles the statements of `map` (whose item is bound as `scope.binding`) into
/// `props`, later assignments overriding earlier ones; `include F.tensor(x)` compiles
/// this format's mapping over `x`'s message type in place, `depth` includes deep.
fn compile_stmts(
    cx: &Cx<'_>,
    fmt: &Fmt<'_>,
    root: &str,
    scope: &mut Scope<'_, '_>,
    map: &TensorMap,
    props: &mut Props,
    depth: usize,
) -> GResult<()> {
    compile_stmts_skipping(cx, fmt, root, scope, map, props, depth, &[])
}

/// [`compile_stmts`], leaving out the assignments to `skip` (properties the including
/// mapping assigns after: they need not compile here, where its names are not bound).
#[allow(clippy::too_many_arguments)]
fn compile_stmts_skipping(
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
                        TensorStmt::Assign { key, .. } => Some(key.name.clone()),
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
                let what = format!("`{}` is missing", cx.text(value.span));
                props.name = Some(match v.t {
                    T::OptStr => {
                        quote!((#ts).ok_or_else(|| rt::Error::from(rt::ErrorKind::Invalid(#what.to_string())))?)
                    }
                    T::Owned => quote!(&#ts),
                    T::Lit => quote!(#ts),
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
                    Some(quote!((#ts).map(|s| (s.begin.unwrap_or(0), s.end.unwrap_or(0)))));
            }
            "dtype" if matches!(value.kind, ExprKind::If { .. }) => {
                props.dtype = Some(dtype_choice(cx, fmt, scope, value)?);
                scope.dtype = true;
            }
            "dtype" => {
                let ExprKind::Index { base, index } = &value.kind else {
                    return Err(cx.unsupported(value.span, "a `dtype` that is not a table lookup"));
                };
                let ExprKind::Path(tp) = &base.kind else {
                    return Err(cx.unsupported(base.span, "this table"));
                };
                let Some(table) = fmt.table(&tp[0].name).filter(|_| tp.len() == 1) else {
                    return Err(
                        cx.err(base.span, format!("unknown table `{}`", cx.text(base.span)))
                    );
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
                props.dtype = Some(quote!({
                    let key: i64 = #kts;
                    #f(key).ok_or_else(|| rt::Error::from(rt::ErrorKind::UnknownDType(key.to_string())))?
                }));
                scope.dtype = true;
            }
            "shape" => {
                let v = scope.compile(cx, value)?;
                let T::Field(m, number, Kind::Varint) = v.t else {
                    return Err(cx.err(value.span, "`shape` is not a repeated integer field"));
                };
                let n = Literal::u32_unsuffixed(number);
                let neg = format!("`{}` has a negative item", cx.text(value.span));
                props.shape = Some(quote!({
                    let m = #m;
                    rt::protobuf::int_values(m.bytes, m.base, #n)?
                        .into_iter()
                        .map(u64::try_from)
                        .collect::<::std::result::Result<::std::vec::Vec<u64>, _>>()
                        .map_err(|_| rt::Error::from(rt::ErrorKind::Invalid(#neg.to_string())))?
                }));
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

/// A `dtype` chosen by `if`: each branch a dtype name or a table lookup.
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
            Ok(quote!(if #ct { #a } else { #b }))
        }
        ExprKind::Path(p) if p.len() == 1 && dtype_variant(&p[0].name).is_some() => {
            let d = dtype_variant(&p[0].name).expect("checked");
            Ok(quote!((#d, ::std::option::Option::None)))
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
            Ok(quote!({
                let key: i64 = #kts;
                #f(key).ok_or_else(|| rt::Error::from(rt::ErrorKind::UnknownDType(key.to_string())))?
            }))
        }
        _ => Err(cx.unsupported(
            e.span,
            "this `dtype`: a dtype name, a table lookup or an `if` of them",
        )),
    }
}

/// `include F.tensor(x)`, F this format: the mapping whose items are `x`'s message type,
/// applied to `x` (which must be present), leaving out what the includer assigns after
/// (`skip`).
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
            let missing = format!("`{}` is missing", cx.text(arg.value.span));
            (
                m.clone(),
                quote!((#ts).ok_or_else(|| rt::Error::from(rt::ErrorKind::Invalid(#missing.to_string())))?),
            )
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
    };
    compile_stmts_skipping(cx, fmt, root, &mut sub, target, props, depth + 1, skip)?;
    scope.dtype |= sub.dtype;
    Ok(())
}

/// What a mapping's generated block adds its items to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Output {
    /// `tensors: Vec<rt::TensorInfo>`, one per item.
    Tensors,
    /// `chunks: Vec<rt::kv::Chunk>`, parts joined by name afterwards (`segment`); the
    /// record's key is `key`.
    Chunks,
}

/// The tensors of one mapping.
pub(crate) fn gen_mapping(
    cx: &Cx<'_>,
    fmt: &Fmt<'_>,
    root: &str,
    map: &TensorMap,
    entries: &[EntryBind],
    output: Output,
) -> GResult<TokenStream> {
    let (msg, steps, origin) = mapping_source(cx, fmt, root, map, entries)?;
    // Nested loops down to the items.
    let start = match &origin {
        Origin::Root => quote!(root),
        Origin::Entry(e) => {
            let id = rs_ident(e);
            quote!(#id.value)
        }
    };
    let mut body = quote!(items.push(x););
    for (i, (seg, repeated)) in steps.iter().enumerate().rev() {
        let id = rs_ident(&seg.name);
        let parent = if i == 0 { start.clone() } else { quote!(x) };
        body = if *repeated {
            quote!(for x in &(#parent).#id { #body })
        } else {
            quote!(if let Some(x) = (#parent).#id.as_deref() { #body })
        };
    }
    if steps.is_empty() {
        body = quote!(items.push(&#start););
    }
    let item_ty = rs_ident(&msg);
    let mut scope = Scope {
        fmt,
        outer: Vec::new(),
        binding: map.binding.name.clone(),
        binding_msg: msg.clone(),
        dtype: false,
        entries: entries.to_vec(),
    };
    let filter = match &map.filter {
        Some(f) => {
            let v = scope.compile(cx, f)?;
            if !v.t.is(&T::Bool) {
                return Err(cx.err(f.span, "`where` is not a boolean"));
            }
            let ts = v.ts;
            quote!(if !(#ts) { continue; })
        }
        None => quote!(),
    };
    let mut props = Props::default();
    compile_stmts(cx, fmt, root, &mut scope, map, &mut props, 0)?;
    let Props {
        prelude,
        name: Some(name),
        dtype: Some(dtype),
        shape: Some(shape),
        data: Some(data),
        segment,
    } = props
    else {
        return Err(cx.err(
            map.span,
            "a protobuf mapping assigns name, dtype, shape and data",
        ));
    };
    let binding = rs_ident(&map.binding.name);
    // An item's name for errors: the `name` field where the message has one.
    let has_name = fmt.ast.message(&msg).is_some_and(|m| {
        m.fields
            .iter()
            .any(|f| f.name.name == "name" && f.label != Label::Repeated)
    });
    let what = if has_name {
        quote!(match #binding.name {
            Some(n) if !n.is_empty() => n.to_string(),
            _ => format!("#{position}"),
        })
    } else {
        let prefix = format!("{}#", cx.text(map.source.span));
        quote!(format!("{}{position}", #prefix))
    };
    let (result_ty, finish, push) = match output {
        Output::Tensors => {
            if segment.is_some() {
                return Err(cx.unsupported(map.span, "`segment` outside a `kv` format"));
            }
            (
                quote!(rt::TensorInfo),
                quote! {
                    if dtype.0 == rt::DType::String {
                        if count == u64::MAX {
                            return Err(rt::Error::from(rt::ErrorKind::Unsupported(
                                "string tensors outside the message".to_string())));
                        }
                        rt::TensorInfo::strings(name, shape, count, location)
                    } else {
                        rt::TensorInfo::dense(name, dtype.0, shape, rt::Order::C, dtype.1.unwrap_or(rt::ByteOrder::Little), location)
                    }
                },
                quote!(tensors.push(info);),
            )
        }
        Output::Chunks => {
            let segment = segment.unwrap_or_else(|| quote!(::std::option::Option::None));
            (
                quote!(rt::kv::Chunk),
                quote! {
                    if dtype.0 == rt::DType::String && count == u64::MAX {
                        return Err(rt::Error::from(rt::ErrorKind::Unsupported(
                            "string tensors outside the message".to_string())));
                    }
                    let segment: ::std::option::Option<(i64, i64)> = #segment;
                    Ok(rt::kv::Chunk {
                        name: name.to_string(),
                        dtype: dtype.0,
                        byte_order: dtype.1.unwrap_or(rt::ByteOrder::Little),
                        shape,
                        location,
                        count,
                        segment,
                        key: key.to_string(),
                    })
                },
                quote!(chunks.push(info);),
            )
        }
    };
    Ok(quote! {
        {
            let mut items: ::std::vec::Vec<&#item_ty<'_>> = ::std::vec::Vec::new();
            #body
            for (position, #binding) in items.into_iter().enumerate() {
                #filter
                let info = (|| -> rt::Result<#result_ty> {
                    #(#prelude)*
                    let name: &str = #name;
                    let dtype: (rt::DType, ::std::option::Option<rt::ByteOrder>) = #dtype;
                    let shape: ::std::vec::Vec<u64> = #shape;
                    let (location, count): (rt::DataLocation, u64) = #data;
                    #finish
                })()
                .map_err(|e| {
                    let what = #what;
                    in_file(e.in_entry(&what))
                })?;
                #push
            }
        }
    })
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
    let mut maps = Vec::new();
    for map in &fmt.tensors {
        maps.push(gen_mapping(cx, fmt, &root.name, map, &[], Output::Tensors)?);
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
            (Kind::Varint, false) => quote!(rt::protobuf::WireType::Varint),
            (Kind::Float, false) => quote!(rt::protobuf::WireType::I32),
            (Kind::Double, false) => quote!(rt::protobuf::WireType::I64),
            _ => quote!(rt::protobuf::WireType::Len),
        };
        checks.push(quote!(#n => f.value.wire_type() == #wire,));
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
        pub fn detect(src: &rt::Source, limits: &rt::Limits) -> bool {
            let _ = limits;
            let Some(bytes) = src.bytes() else {
                return false;
            };
            let mut known = false;
            for f in rt::protobuf::fields(bytes.as_bytes(), 0) {
                let Ok(f) = f else {
                    return false;
                };
                let ok = match f.number {
                    #(#checks)*
                    _ => true,
                };
                if !ok {
                    return false;
                }
                known |= matches!(f.number, #(#root_tags)|*);
            }
            known
        }

        /// Lists the tensors of `src` without reading their bytes: reads the root message in
        /// place, then maps its items.
        pub fn index(src: &rt::Source, limits: &rt::Limits) -> rt::Result<::std::vec::Vec<rt::TensorInfo>> {
            let in_file = |e: rt::Error| match src.path() {
                Some(p) => e.in_file(p),
                None => e,
            };
            let whole = src.whole().map_err(in_file)?;
            let bytes: &[u8] = &whole;
            let root = #root_ty::read(bytes, 0, 0, limits).map_err(in_file)?;
            let mut tensors = ::std::vec::Vec::new();
            #(#maps)*
            if tensors.len() as u64 > limits.max_tensors {
                return Err(in_file(rt::Error::from(rt::ErrorKind::Limit { what: "tensors", limit: limits.max_tensors, actual: tensors.len() as u64 })));
            }
            Ok(tensors)
        }

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
        let atom = |ts: TokenStream, t: W| Ok(WV { ts, t });
        match &e.kind {
            ExprKind::Int(i) => {
                let v = i64::try_from(*i)
                    .map_err(|_| cx.unsupported(e.span, "an integer outside the i64 range"))?;
                let l = Literal::i64_suffixed(v);
                atom(quote!(#l), W::Int)
            }
            ExprKind::Str(s) => atom(quote!(#s), W::Str),
            ExprKind::Bool(b) => atom(quote!(#b), W::Bool),
            ExprKind::Path(p) => {
                let names: Vec<&str> = p.iter().map(|i| i.name.as_str()).collect();
                if self.tensor {
                    match names.as_slice() {
                        ["name"] => return atom(quote!(meta.name.as_str()), W::Str),
                        ["dtype"] => return atom(quote!(meta.dtype), W::Dtype),
                        ["shape"] => return atom(quote!(meta.shape), W::Shape),
                        ["data"] => return atom(quote!(()), W::Data),
                        ["external"] => return atom(quote!(place.external), W::Bool),
                        ["location"] => return atom(quote!(place.location.as_str()), W::Str),
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
                                let l = Literal::i64_suffixed(*n);
                                return atom(quote!(#l), W::Int);
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
                    ts: quote!(::std::vec![#(#ts),*]),
                    t: W::List(Box::new(t.unwrap_or(W::Int))),
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
                let ts = v.ts;
                atom(quote!(!(#ts)), W::Bool)
            }
            ExprKind::Binary { op, lhs, rhs } => {
                let (l, r) = (self.compile(cx, lhs, false)?, self.compile(cx, rhs, false)?);
                let (lt, rt_) = (&l.ts, &r.ts);
                let same = l.t == r.t && matches!(l.t, W::Int | W::Dtype | W::Bool | W::Str);
                let ts = match op {
                    BinaryOp::Eq if same => quote!((#lt) == (#rt_)),
                    BinaryOp::Ne if same => quote!((#lt) != (#rt_)),
                    BinaryOp::And if l.t == W::Bool && r.t == W::Bool => quote!((#lt) && (#rt_)),
                    BinaryOp::Or if l.t == W::Bool && r.t == W::Bool => quote!((#lt) || (#rt_)),
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
                    ts: quote!(if #cts { #ats } else { #bts }),
                    t: a.t,
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
                        atom(quote!(::std::string::ToString::to_string(&(#ts))), W::Str)
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

    /// `key_of(T, dtype)`: the first key of table `T` whose row has the dtype.
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
        let mut seen = Vec::new();
        let mut arms = Vec::new();
        for row in &table.rows {
            let TableKey::Int(k) = &row.key else { continue };
            if seen.contains(&row.dtype.name) {
                continue;
            }
            seen.push(row.dtype.name.clone());
            let Some(v) = dtype_variant(&row.dtype.name) else {
                return Err(cx.err(row.dtype.span, "unknown dtype"));
            };
            let k = Literal::i64_suffixed(*k as i64);
            arms.push(quote!(#v => #k,));
        }
        let table_name = table.name.name.clone();
        let dts = dv.ts;
        Ok(WV {
            ts: quote!(match #dts {
                #(#arms)*
                #[allow(unreachable_patterns)]
                other => return Err(rt::Error::from(rt::ErrorKind::Unsupported(format!(
                    "{other} has no `{}` key", #table_name)))),
            }),
            t: W::Int,
        })
    }

    /// `M(field = value, ...)`: the prost message with those fields set; with the
    /// tensor's elements in one of its fields (or in a message in one), the message
    /// encoded.
    fn message(&self, cx: &Cx<'_>, name: &str, args: &[Arg], top: bool) -> GResult<WV> {
        let m = self.fmt.ast.message(name).expect("checked");
        let ty = rs_ident(name);
        let mut sets = Vec::new();
        let mut extras = Vec::new();
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
                    extras.push(quote!(rt::protobuf::put_elements(&mut b, #tag, #holder, meta.dtype, data)?;));
                }
                W::Encoded(inner) => {
                    if repeated || k != Kind::Msg(inner.clone()) {
                        return Err(cx.err(
                            a.span,
                            format!("this value does not fit field `{name}.{}`", n.name),
                        ));
                    }
                    let vts = v.ts;
                    extras.push(quote! {
                        let inner: ::std::vec::Vec<u8> = #vts;
                        rt::protobuf::put_len_header(&mut b, #tag, inner.len() as u64);
                        b.extend_from_slice(&inner);
                    });
                }
                _ => sets.push(self.assign(cx, m, f, &id, v, a.span)?),
            }
        }
        let rest = if sets.len() < m.fields.len() {
            quote!(..::core::default::Default::default())
        } else {
            quote!()
        };
        let build = quote!(messages::#ty {
            #(#sets)*
            #rest
        });
        if !extras.is_empty() {
            return Ok(WV {
                ts: quote!({
                    let mut b = ::prost::Message::encode_to_vec(&#build);
                    #(#extras)*
                    b
                }),
                t: W::Encoded(name.to_string()),
            });
        }
        if top && self.stream {
            let p = match payload {
                Some(n) => quote!(::std::option::Option::Some(#n)),
                None => quote!(::std::option::Option::None),
            };
            Ok(WV {
                ts: quote!((#build, #p)),
                t: W::Msg(name.to_string()),
            })
        } else {
            Ok(WV {
                ts: build,
                t: W::Msg(name.to_string()),
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
        let int_ty = match last {
            "int64" => quote!(i64),
            "uint32" => quote!(u32),
            "uint64" => quote!(u64),
            "bool" => quote!(bool),
            _ => quote!(i32),
        };
        let what = format!("{}.{}", m.name.name, f.name.name);
        let vts = v.ts;
        let value = match (&k, f.label == Label::Repeated, &v.t) {
            (Kind::Varint, false, W::Int) if last == "bool" => quote!((#vts) != 0),
            (Kind::Varint, false, W::Bool) if last == "bool" => quote!(#vts),
            (Kind::Varint, false, W::Int) if last == "int64" => quote!(#vts),
            (Kind::Varint, false, W::Int) => quote!(
                <#int_ty>::try_from(#vts).map_err(|_| rt::Error::from(rt::ErrorKind::Overflow(#what.to_string())))?
            ),
            (Kind::Str, false, W::Str) => quote!(::std::string::ToString::to_string(&#vts)),
            (Kind::Bytes, false, W::Str) => quote!((#vts).as_bytes().to_vec()),
            (Kind::Varint, true, W::Shape) => quote!(
                (#vts).iter().map(|&d| <#int_ty>::try_from(d))
                    .collect::<::std::result::Result<::std::vec::Vec<_>, _>>()
                    .map_err(|_| rt::Error::from(rt::ErrorKind::Overflow(#what.to_string())))?
            ),
            (Kind::Msg(n), false, W::Msg(got)) if n == got => quote!(#vts),
            (Kind::Msg(n), true, W::List(t)) if matches!(&**t, W::Msg(got) if got == n) => {
                quote!(#vts)
            }
            _ => return Err(cx.err(span, format!("this value does not fit field `{what}`"))),
        };
        let optional = f.label == Label::Optional;
        Ok(if optional {
            quote!(#id: ::std::option::Option::Some(#value),)
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
            quote!(..::core::default::Default::default())
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
    Ok(Some(quote! {
        #(#ctors)*

        /// The item written for one tensor placed at `place` (the mapping's `write` rule),
        /// and the field its bytes go to when they are inline.
        pub fn tensor_message(
            meta: &rt::TensorMeta,
            place: &rt::protodoc::Placement,
        ) -> rt::Result<(messages::#item_ty, ::std::option::Option<u32>)> {
            Ok(#rule_ts)
        }

        /// What a tensor's item takes in the document besides its payload, at most (for
        /// deciding where it goes before it is encoded).
        fn item_overhead(meta: &rt::TensorMeta) -> u64 {
            meta.name.len() as u64 + 11 * meta.shape.len() as u64 + 256
        }

        fn check_writable(meta: &rt::TensorMeta) -> rt::Result<()> {
            if meta.dtype == rt::DType::String {
                return Err(rt::Error::from(rt::ErrorKind::Unsupported(format!(
                    "writing string tensors to {}", NAME))));
            }
            if meta.shape.iter().filter(|&&d| d > 1).count() > 1 && meta.order != rt::Order::C {
                return Err(rt::Error::from(rt::ErrorKind::Unsupported(format!(
                    "{} stores C-order tensors only", NAME))));
            }
            Ok(())
        }

        #[doc = #writer_doc]
        pub struct Writer<'a> {
            doc: rt::protodoc::DocWriter<'a>,
        }

        impl<'a> Writer<'a> {
            /// Starts a new document on `w`.
            pub fn new(
                w: ::std::boxed::Box<dyn rt::WriteSeek + 'a>,
                options: &rt::WriteOptions,
            ) -> rt::Result<Self> {
                let mut doc = rt::protodoc::DocWriter::new(w, options.external.clone(), options.destination.clone());
                #(#opens)*
                Ok(Writer { doc })
            }

            /// Appends one tensor.
            pub fn add(&mut self, meta: &rt::TensorMeta, data: rt::Payload<'_>) -> rt::Result<()> {
                check_writable(meta)?;
                let nbytes = meta.nbytes()?;
                let place = self.doc.place(&meta.name, nbytes, None, item_overhead(meta))?;
                let (m, payload) = tensor_message(meta, &place)?;
                let unit = if meta.byte_order == rt::ByteOrder::Big {
                    meta.dtype.swap_unit().unwrap_or(1)
                } else {
                    1
                };
                let header = ::prost::Message::encode_to_vec(&m);
                self.doc.item(#items_n, &header, payload, &place, data, unit, &meta.name)
            }

            /// Closes the document and commits its external files.
            pub fn finish(self) -> rt::Result<()> {
                self.doc.finish()
            }
        }

        impl rt::TensorWriter for Writer<'_> {
            fn add(&mut self, meta: &rt::TensorMeta, data: rt::Payload<'_>) -> rt::Result<()> {
                Writer::add(self, meta, data)
            }

            fn finish(self: ::std::boxed::Box<Self>) -> rt::Result<()> {
                Writer::finish(*self)
            }
        }

        /// Rewrites the document `src` to `w`: every field is copied as it is, except the
        /// tensors for which `replace` (given each tensor's name) returns a replacement,
        /// written where `options.external` places them. Returns the external files
        /// written, synced, for the caller to commit before the document.
        pub fn rewrite<'a, 'b>(
            src: &rt::Source,
            w: ::std::boxed::Box<dyn rt::WriteSeek + 'a>,
            options: &rt::WriteOptions,
            limits: &rt::Limits,
            replace: &mut dyn FnMut(&str) -> rt::Result<::std::option::Option<rt::protodoc::Replacement<'b>>>,
        ) -> rt::Result<::std::vec::Vec<rt::AtomicFile>> {
            let in_file = |e: rt::Error| match src.path() {
                Some(p) => e.in_file(p),
                None => e,
            };
            let whole = src.whole().map_err(in_file)?;
            let bytes: &[u8] = &whole;
            let mut doc = rt::protodoc::DocWriter::new(w, options.external.clone(), options.destination.clone());
            rt::protodoc::rewrite(&mut doc, bytes, &[#(#numbers),*], #items_n, &mut |doc, b, at| {
                let item = #item_ty::read(b, at, #depth, limits)?;
                let name = item.name.unwrap_or("");
                let Some(r) = replace(name)? else {
                    return Ok(rt::protodoc::ItemAction::Keep);
                };
                check_writable(&r.meta)?;
                if r.meta.byte_order == rt::ByteOrder::Big && r.meta.dtype.swap_unit().unwrap_or(1) > 1 {
                    return Err(rt::Error::from(rt::ErrorKind::Unsupported(
                        "big-endian replacement tensors".to_string())).in_entry(name));
                }
                let nbytes = r.meta.nbytes()?;
                if (*r.data).as_ref().len() as u64 != nbytes {
                    return Err(rt::Error::from(rt::ErrorKind::SizeMismatch(format!(
                        "{nbytes} bytes expected, {} given", (*r.data).as_ref().len()))).in_entry(name));
                }
                let place = doc.place(name, nbytes, r.keep_location.as_deref(), item_overhead(&r.meta))?;
                let (m, payload) = tensor_message(&r.meta, &place)?;
                Ok(rt::protodoc::ItemAction::Write {
                    header: ::prost::Message::encode_to_vec(&m),
                    payload_field: payload,
                    placement: place,
                    data: r.data,
                })
            })
            .map_err(in_file)?;
            doc.finish_pending().map_err(in_file)
        }
    }))
}
