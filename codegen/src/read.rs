//! Records and their readers, from the IR: a plain struct per dict (read through
//! `rt::pydict::Dict`, key by key) and per layout, and each layout's `read`, field by
//! field, every construct of the language: numbers in either byte order, conditional
//! widths, magic, sized bytes and text, codec fields (Python literal, JSON), nested
//! layouts (sized or not), payloads, `repeat count(..)` and `repeat until_eof`, `at`,
//! `align`, and the `check`s after each field.

use proc_macro2::{Literal, TokenStream};
use quote::{format_ident, quote};
use tensorfmt_schema::ir::{self, ByteOrder, Codec, DictId, FieldKind, Ir, LayoutId, Repeat, Type};

use crate::lower::{storage_ty, Env, Form, Lower, Unlowered, Val};
use crate::model::{docs, rs_ident};

/// The struct of a dict, with `rt::pydict::Dict`: its keys, `read` (a `match` arm per
/// key; the runtime reads dicts through it, key by key as a Python literal or JSON text is
/// parsed, or from a value tree) and
/// `items` (its items in declared order, which the runtime's `ToPy` and encoders write;
/// with a `rest` key also `each_item`, the same one at a time).
pub(crate) fn gen_dict(ir: &Ir, id: DictId) -> Result<TokenStream, Unlowered> {
    let d = ir.dict(id);
    let ident = rs_ident(&d.name);
    let doc = docs(&d.docs);
    let mut fields = Vec::new();
    let mut keys = Vec::new();
    let mut sets = Vec::new();
    let mut items = Vec::new();
    let mut each = Vec::new();
    for (i, k) in d.keys.iter().enumerate() {
        let t = storage_ty(ir, &k.ty)
            .expect("the checker's rule dict_values: a dict's values are Python or JSON values");
        let id = rs_ident(&k.key);
        let key = &k.key;
        let fdoc = docs(&k.docs);
        let to = |x: TokenStream| {
            if matches!(k.ty, Type::List(_)) {
                quote!(rt::pydict::to_list(#x))
            } else {
                quote!(rt::pydict::ToPy::to_py(#x))
            }
        };
        let i = Literal::usize_unsuffixed(i);
        if k.rest {
            fields.push(quote!(#fdoc pub #id: #t,));
            keys.push(quote!(rt::pydict::Key::Rest));
            sets.push((
                i,
                quote!(self.#id.0.push((key.to_string(), rt::ItemValue::get(v)?))),
            ));
            let v = to(quote!(v));
            items.push(quote! {
                for (k, v) in self.#id.iter() {
                    items.push((k.as_str(), #v));
                }
            });
            each.push(quote! {
                for (k, v) in self.#id.iter() {
                    f(k.as_str(), #v)?;
                }
            });
        } else if k.optional {
            fields.push(quote!(#fdoc pub #id: ::std::option::Option<#t>,));
            keys.push(quote!(rt::pydict::Key::Optional(#key)));
            sets.push((i, quote!(self.#id = rt::ItemValue::get(v)?)));
            let v = to(quote!(v));
            items.push(quote! {
                if let Some(v) = &self.#id {
                    items.push((#key, #v));
                }
            });
            each.push(quote! {
                if let Some(v) = &self.#id {
                    f(#key, #v)?;
                }
            });
        } else {
            fields.push(quote!(#fdoc pub #id: #t,));
            keys.push(quote!(rt::pydict::Key::Required(#key)));
            sets.push((i, quote!(self.#id = rt::ItemValue::get(v)?)));
            let v = to(quote!(&self.#id));
            items.push(quote!(items.push((#key, #v));));
            each.push(quote!(f(#key, #v)?;));
        }
    }
    let plain = d.keys.iter().all(|k| !k.optional && !k.rest);
    let items_body = if plain {
        let pairs = d.keys.iter().map(|k| {
            let id = rs_ident(&k.key);
            let key = &k.key;
            let v = if matches!(k.ty, Type::List(_)) {
                quote!(rt::pydict::to_list(&self.#id))
            } else {
                quote!(rt::pydict::ToPy::to_py(&self.#id))
            };
            quote!((#key, #v))
        });
        quote!(vec![#(#pairs),*])
    } else {
        quote! {
            let mut items = ::std::vec::Vec::new();
            #(#items)*
            items
        }
    };
    // A dict with a `rest` key (a header of an entry per tensor) hands its items over one
    // at a time, for the encoder; the others keep the default, through `items`.
    let each_item = if d.keys.iter().any(|k| k.rest) {
        quote! {
            fn each_item<'a>(
                &'a self,
                f: &mut dyn FnMut(&'a str, rt::PyValue) -> rt::Result<()>,
            ) -> rt::Result<()> {
                #(#each)*
                Ok(())
            }
        }
    } else {
        quote!()
    };
    // The key of an undeclared item, which only a `rest` key reads.
    let key_arg = if d.keys.iter().any(|k| k.rest) {
        quote!(key)
    } else {
        quote!(_key)
    };
    let (v, dispatch) = match sets.as_slice() {
        [] => (quote!(_v), quote!()),
        // One key: an `if` (a `match` of one arm is not how it would be written).
        [(i, set)] => (quote!(v), quote!(if i == #i { #set; })),
        _ => {
            let arms = sets.iter().map(|(i, set)| quote!(#i => #set,));
            (quote!(v), quote!(match i { #(#arms)* _ => {} }))
        }
    };
    Ok(quote! {
        #doc
        #[derive(Debug, Clone, Default, PartialEq)]
        pub struct #ident {
            #(#fields)*
        }

        impl rt::pydict::Dict for #ident {
            const KEYS: &'static [rt::pydict::Key] = &[#(#keys),*];

            fn read<V: rt::ItemValue>(&mut self, i: usize, #key_arg: &str, #v: V) -> rt::Got<V> {
                #dispatch
                Ok(())
            }

            fn items(&self) -> ::std::vec::Vec<(&str, rt::PyValue)> {
                #items_body
            }

            #each_item
        }
    })
}

/// Names in reach while a layout is read: the fields read so far, as locals.
struct ReadEnv<'a> {
    ir: &'a Ir,
    layout: LayoutId,
    /// Fields `..reach` are in reach.
    reach: usize,
}

impl Env for ReadEnv<'_> {
    fn field(&self, l: LayoutId, f: ir::FieldId) -> Option<Val> {
        if l != self.layout || f.index() >= self.reach {
            return None;
        }
        let field = self.ir.field(l, f);
        Some(Val::place(
            {
                let id = rs_ident(&field.name);
                quote!(#id)
            },
            field.ty.clone(),
        ))
    }
}

/// The struct of a layout and its `read`.
/// `src` is the text of the file that declares the layout (for the checks' messages).
pub(crate) fn gen_layout(ir: &Ir, id: LayoutId, src: &str) -> Result<TokenStream, Unlowered> {
    let l = ir.layout(id);
    let ident = rs_ident(&l.name);
    let doc = docs(&l.docs);
    let mut fields = Vec::new();
    let mut body = Vec::new();
    let mut inits = Vec::new();
    let positioned = l.fields.iter().any(|f| f.at.is_some() || f.align.is_some());
    if positioned {
        body.push(quote!(let start = c.pos();));
    }
    for (i, f) in l.fields.iter().enumerate() {
        let fid = rs_ident(&f.name);
        let name = f.name.as_str();
        let env = ReadEnv {
            ir,
            layout: id,
            reach: i + 1,
        };
        let before = ReadEnv {
            ir,
            layout: id,
            reach: i,
        };
        let lower = Lower { ir, env: &before };
        let int = |e: &ir::Expr, what: &str| -> Result<TokenStream, Unlowered> {
            let v = lower.expr(e)?;
            // An unsigned field read is a byte count as it is; anything else is checked.
            if let (Type::Int(t), Form::Place | Form::Ref) = (&v.ty, v.form) {
                if !t.signed && t.bytes.is_some_and(|b| b <= 8) {
                    let v = v.scalar_stored();
                    return Ok(if t.bytes == Some(8) {
                        v
                    } else {
                        quote!(u64::from(#v))
                    });
                }
            }
            let v = v.scalar();
            Ok(quote!(rt::expr::to_u64(#v, #what).map_err(|e| c.wrap(#name, e))?))
        };
        if let Some(at) = &f.at {
            let at = int(at, "the offset")?;
            body.push(quote!(c.seek(#name, start, #at)?;));
        }
        if let Some(a) = &f.align {
            let a = int(a, "the alignment")?;
            body.push(quote!(c.align_from(#name, start, #a)?;));
        }
        let endian = |e: Option<ByteOrder>| e.unwrap_or(l.endian);
        let one = match &f.kind {
            FieldKind::Magic(b) => {
                let b = Literal::byte_string(b);
                body.push(quote!(c.magic(#name, #b)?;));
                continue;
            }
            FieldKind::Cond {
                cond,
                then,
                otherwise,
            } => {
                let c = lower.expr(cond)?.scalar();
                // The item's type: a repeated field is a list of them.
                let wide = storage_ty(ir, &f.item_ty).expect("integers have a storage type");
                let widen = |t: &ir::IntTy| {
                    let r = num(name, &Type::Int(*t), endian(t.endian));
                    if Type::Int(*t).same_kind(&f.item_ty)
                        && storage_ty(ir, &Type::Int(*t)).map(|x| x.to_string())
                            == Some(wide.to_string())
                    {
                        r
                    } else {
                        quote!(#wide::from(#r))
                    }
                };
                let (t, o) = (widen(then), widen(otherwise));
                quote!(if #c { #t } else { #o })
            }
            FieldKind::Match { tag, .. } => {
                let tag = lower.expr(tag)?.scalar();
                let t = crate::union::union_ident(ir, id, ir::FieldId(i as u32));
                quote!(#t::read(c, limits, #tag)?)
            }
            FieldKind::Value => {
                let size = match &f.size {
                    Some(s) => Some(int(s, "the size")?),
                    // Text, bytes or a codec's text over every remaining byte.
                    None if f.rest
                        && matches!(f.item_ty, Type::Bytes | Type::Str | Type::Dict(_)) =>
                    {
                        let len = crate::write::local(l, f, "len");
                        body.push(quote!(let #len = c.remaining();));
                        Some(quote!(#len))
                    }
                    None => None,
                };
                value(ir, f, size, &lower, l.endian)?
            }
        };
        let t = storage_ty(ir, &f.ty)
            .expect("the checker's rule layout_fields: a layout's fields have a storage type");
        let read = match &f.repeat {
            None => quote!(let #fid: #t = #one;),
            Some(Repeat::Count(n)) => {
                let n = int(n, "the count")?;
                let min = match &f.kind {
                    FieldKind::Cond {
                        then, otherwise, ..
                    } => u64::from(then.bytes.unwrap_or(1).min(otherwise.bytes.unwrap_or(1))),
                    _ => min_bytes(ir, &f.item_ty),
                };
                let min = Literal::u64_unsuffixed(min);
                // Named after the field, so that it hides no field of the layout.
                let count = crate::write::local(l, f, "count");
                quote! {
                    let #count = c.count(#name, #n, #min, limits.max_entries)?;
                    let mut #fid: #t = ::std::vec::Vec::with_capacity(#count);
                    for _ in 0..#count {
                        #fid.push(#one);
                    }
                }
            }
            Some(Repeat::UntilEof) => quote! {
                let mut #fid: #t = ::std::vec::Vec::new();
                while c.more(#name, #fid.len(), limits.max_entries)? {
                    #fid.push(#one);
                }
            },
        };
        body.push(read);
        let lower = Lower { ir, env: &env };
        for check in &f.checks {
            let ok = lower.expr(check)?.scalar();
            let text = src.get(check.span.start..check.span.end).unwrap_or("");
            body.push(quote!(c.check(#name, #ok, #text, &#fid)?;));
        }
        let mut fdoc = f.docs.clone();
        if f.ty == Type::Payload {
            if !fdoc.is_empty() {
                fdoc.push(String::new());
            }
            fdoc.push(
                " `(offset, len)`: where the payload is in the layout's source (absolute offset)."
                    .into(),
            );
        }
        if let FieldKind::Cond {
            then, otherwise, ..
        } = &f.kind
        {
            if !fdoc.is_empty() {
                fdoc.push(String::new());
            }
            fdoc.push(format!(
                " Stored as `{}` or `{}`, held as the wider type.",
                then.name(),
                otherwise.name()
            ));
        }
        let fdoc = docs(&fdoc);
        fields.push(quote!(#fdoc pub #fid: #t,));
        inits.push(fid);
    }
    let limits = if body.iter().any(|b| b.to_string().contains("limits")) {
        quote!(limits)
    } else {
        quote!(_limits)
    };
    let rdoc = format!(
        " Reads a `{}` at the cursor, field by field, checking each field as it is read.",
        l.name
    );
    Ok(quote! {
        #doc
        #[derive(Debug, Clone, PartialEq)]
        pub struct #ident {
            #(#fields)*
        }

        impl #ident {
            #[doc = #rdoc]
            pub fn read(c: &mut rt::Cursor<'_>, #limits: &rt::Limits) -> rt::Result<Self> {
                #(#body)*
                Ok(#ident { #(#inits),* })
            }
        }
    })
}

/// Reading one number: `c.u32_le("name")?`.
pub(crate) fn num(name: &str, ty: &Type, e: ByteOrder) -> TokenStream {
    let (prefix, bytes) = match ty {
        Type::Int(i) => (if i.signed { "i" } else { "u" }, i.bytes.unwrap_or(8)),
        Type::Float(f) => ("f", f.bytes),
        _ => ("u", 1),
    };
    let m = if bytes == 1 {
        format_ident!("{prefix}8")
    } else {
        let suffix = if e == ByteOrder::Big { "be" } else { "le" };
        format_ident!("{prefix}{}_{suffix}", bytes as u32 * 8)
    };
    quote!(c.#m(#name)?)
}

/// The least bytes an item of `ty` takes (at least 1), bounding repetition counts.
fn min_bytes(ir: &Ir, ty: &Type) -> u64 {
    let own = match ty {
        Type::Int(i) => u64::from(i.bytes.unwrap_or(1)),
        Type::Float(x) => u64::from(x.bytes),
        Type::Bool => 1,
        Type::Layout(l) => ir
            .layout(*l)
            .fields
            .iter()
            .filter(|g| g.repeat.is_none() && g.size.is_none())
            .map(|g| match &g.kind {
                FieldKind::Magic(b) => b.len() as u64,
                FieldKind::Cond {
                    then, otherwise, ..
                } => u64::from(then.bytes.unwrap_or(1).min(otherwise.bytes.unwrap_or(1))),
                FieldKind::Value => match &g.ty {
                    Type::Int(i) => u64::from(i.bytes.unwrap_or(1)),
                    Type::Float(x) => u64::from(x.bytes),
                    Type::Bool => 1,
                    _ => 0,
                },
                FieldKind::Match { .. } => 0,
            })
            .sum(),
        _ => 0,
    };
    own.max(1)
}

/// Reading one value of a `Value` field (an item, when the field repeats).
fn value(
    ir: &Ir,
    f: &ir::Field,
    size: Option<TokenStream>,
    lower: &Lower<'_>,
    layout_endian: ByteOrder,
) -> Result<TokenStream, Unlowered> {
    let name = f.name.as_str();
    let ty = &f.item_ty;
    let sized = || {
        size.clone().expect(
            "the checker's rule layout_fields: text, bytes and codecs have a size or `rest`",
        )
    };
    Ok(match (ty, &f.codec) {
        (Type::Int(i), None) => num(name, ty, i.endian.unwrap_or(layout_endian)),
        (Type::Float(x), None) => num(name, ty, x.endian.unwrap_or(layout_endian)),
        (Type::Bool, None) => quote!((c.u8(#name)? != 0)),
        (Type::Payload, None) => match size {
            Some(n) => quote!(c.span(#name, #n)?),
            None => quote!(c.rest(#name)?),
        },
        (Type::Bytes, None) => {
            let n = sized();
            quote!(c.bytes(#name, #n, limits.max_header_bytes)?.into_owned())
        }
        (Type::Str, None) => {
            let n = sized();
            quote!(c.text(#name, #n, limits.max_header_bytes)?)
        }
        (Type::Layout(inner), None) => {
            let t = rs_ident(&ir.layout(*inner).name);
            match size {
                Some(n) => quote!(#t::read(&mut c.window(#name, #n)?, limits)
                    .map_err(|e| c.wrap(#name, e))?),
                None => quote!(#t::read(c, limits).map_err(|e| c.wrap(#name, e))?),
            }
        }
        (Type::Dict(d), Some(Codec::PyDict { encoding, .. })) => {
            let n = sized();
            let t = rs_ident(&ir.dict(*d).name);
            let enc = match encoding {
                Some(e) => lower.expr(e)?.scalar(),
                None => quote!("utf8"),
            };
            quote!(rt::pydict::read::<#t>(c, #name, #n, #enc, limits)?)
        }
        (Type::Dict(d), Some(Codec::Json { unique_keys })) => {
            let n = sized();
            let t = rs_ident(&ir.dict(*d).name);
            if *unique_keys {
                quote!(rt::pydict::read_json_unique::<#t>(c, #name, #n, limits)?)
            } else {
                quote!(rt::pydict::read_json::<#t>(c, #name, #n, limits)?)
            }
        }
        _ => unreachable!(
            "the checker's rule layout_fields: a layout lays out numbers, text, bytes, \
             payloads, layouts and dicts with a codec"
        ),
    })
}
