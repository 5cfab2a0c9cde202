//! Tagged unions (`match` fields), from the IR: a plain enum per `match` field of a
//! layout, one variant per case, named after the case's type (`U8(u8)`, `Str(Str)`); its
//! `tag` (the tag of the variant), `read` (the case the tag selects, read in place; an
//! unknown tag is an error naming the field, the tag and the offset; a case that is a
//! layout is read one level deeper, bounded by `Limits::max_depth`, so that a union
//! holding itself cannot exhaust the stack) and `put` (the variant's value laid out,
//! checked against the tag written). A layout case that holds the union again other than
//! through a list is boxed.

use proc_macro2::{Ident, Literal, TokenStream};
use quote::{format_ident, quote};
use tensorfmt_schema::ir::{self, ByteOrder, FieldId, FieldKind, Ir, LayoutId, MatchCase, Type};

use crate::model::{rs_ident, upper_camel};

/// The enum of `match` field `f` of layout `l`: the layout's name and the field's, in
/// upper camel case (`KvValue`).
pub(crate) fn union_ident(ir: &Ir, l: LayoutId, f: FieldId) -> Ident {
    let layout = ir.layout(l);
    let field = ir.field(l, f);
    let camel = upper_camel(&field.name);
    format_ident!("{}{camel}", rs_ident(&layout.name).to_string())
}

/// The variant of a case: its type's name (`U8`, `F32`, `Bool`, the layout's name).
pub(crate) fn variant(ir: &Ir, ty: &Type) -> Ident {
    match ty {
        Type::Int(i) => format_ident!("{}", i.name().to_ascii_uppercase()),
        Type::Float(x) => format_ident!("F{}", u32::from(x.bytes) * 8),
        Type::Bool => format_ident!("Bool"),
        Type::Layout(l) => format_ident!("{}", rs_ident(&ir.layout(*l).name).to_string()),
        _ => unreachable!(
            "the checker's rule layout_fields (match_field): a case is a number, `bool` or a layout"
        ),
    }
}

/// True when a value of `ty` holds a value of union `u` in place (not through a list):
/// a variant of that type must be boxed.
fn holds(ir: &Ir, ty: &Type, u: (LayoutId, FieldId), seen: &mut Vec<LayoutId>) -> bool {
    match ty {
        Type::Union(l, f) if (*l, *f) == u => true,
        Type::Union(l, f) => match &ir.field(*l, *f).kind {
            FieldKind::Match { cases, .. } => cases.iter().any(|c| holds(ir, &c.ty, u, seen)),
            _ => false,
        },
        Type::Layout(l) => {
            if seen.contains(l) {
                return false;
            }
            seen.push(*l);
            ir.layout(*l)
                .fields
                .iter()
                .filter(|g| g.repeat.is_none())
                .any(|g| holds(ir, &g.item_ty, u, seen))
        }
        _ => false,
    }
}

/// The enums of the `match` fields of layout `id`, with `tag`, `read` and `put`.
pub(crate) fn gen_unions(ir: &Ir, id: LayoutId) -> TokenStream {
    let l = ir.layout(id);
    let mut out = Vec::new();
    for (i, f) in l.fields.iter().enumerate() {
        if let FieldKind::Match { cases, .. } = &f.kind {
            out.push(gen_union(ir, id, FieldId(i as u32), f, cases, l.endian));
        }
    }
    quote!(#(#out)*)
}

fn gen_union(
    ir: &Ir,
    l: LayoutId,
    fid: FieldId,
    f: &ir::Field,
    cases: &[MatchCase],
    endian: ByteOrder,
) -> TokenStream {
    let ident = union_ident(ir, l, fid);
    let name = f.name.as_str();
    let mut variants = Vec::new();
    let mut tags = Vec::new();
    let mut reads = Vec::new();
    let mut puts = Vec::new();
    let mut deep = false;
    for c in cases {
        let v = variant(ir, &c.ty);
        let tag = Literal::i128_unsuffixed(c.tag);
        let tag = if c.tag < 0 {
            quote!((#tag))
        } else {
            quote!(#tag)
        };
        let pat = Literal::i128_unsuffixed(c.tag.abs());
        let pat = if c.tag < 0 {
            quote!(-#pat)
        } else {
            quote!(#pat)
        };
        tags.push(quote!(#ident::#v(_) => #tag,));
        let (t, read, put) = match &c.ty {
            Type::Layout(inner) => {
                deep = true;
                let t = rs_ident(&ir.layout(*inner).name);
                let boxed = holds(ir, &c.ty, (l, fid), &mut Vec::new());
                let args = crate::write::nested_args(ir, *inner, &quote!(v));
                let read = quote!(#t::read(c, &inner).map_err(|e| c.wrap(#name, e))?);
                let put = quote!(#t::put(buf, #(#args),*)?);
                if boxed {
                    (
                        quote!(::std::boxed::Box<#t>),
                        quote!(::std::boxed::Box::new(#read)),
                        put,
                    )
                } else {
                    (quote!(#t), read, put)
                }
            }
            Type::Bool => (
                quote!(bool),
                quote!(c.u8(#name)? != 0),
                quote!(buf.put_u8(u8::from(*v))),
            ),
            t => {
                let st = crate::lower::storage_ty(ir, t).expect("numbers have a storage type");
                let e = match t {
                    Type::Int(i) => i.endian.unwrap_or(endian),
                    Type::Float(x) => x.endian.unwrap_or(endian),
                    _ => endian,
                };
                let r = crate::read::num(name, t, e);
                let m = crate::write::num_method("put_", t, e);
                (st, r, quote!(buf.#m(*v)))
            }
        };
        variants.push(quote!(#v(#t),));
        reads.push(if matches!(c.ty, Type::Layout(_)) {
            // A layout is read one level deeper.
            quote!(#pat => {
                let inner = limits.deeper().map_err(|e| c.wrap(#name, e))?;
                Ok(#ident::#v(#read))
            })
        } else {
            quote!(#pat => Ok(#ident::#v(#read)),)
        });
        puts.push(quote!(#ident::#v(v) => #put,));
    }
    // The value as an integer, for `lookup(list, key, 32)` over records of this union.
    let ints: Vec<TokenStream> = cases
        .iter()
        .filter(|c| matches!(c.ty, Type::Int(_)))
        .map(|c| {
            let v = variant(ir, &c.ty);
            quote!(#ident::#v(v) => Some(i128::from(*v)),)
        })
        .collect();
    let others = (ints.len() < cases.len()).then(|| quote!(_ => None,));
    let int = looked_up(ir, l, fid).then(|| {
        quote! {
            /// The value as an integer when its case is an integer (`None` for the others).
            pub fn int(&self) -> Option<i128> {
                match self {
                    #(#ints)*
                    #others
                }
            }
        }
    });
    let limits = if deep {
        quote!(limits)
    } else {
        quote!(_limits)
    };
    let doc = format!(
        " A value of `{}.{name}`: the case its tag selects.",
        ir.layout(l).name
    );
    let rdoc = format!(
        " Reads the case of `{name}` that `tag` selects, at the cursor; an unknown tag is an error."
    );

    // A read-only format's layouts have no writer to lay a case out with.
    let put = (!ir.format(ir.layout(l).format).read_only).then(|| {
        quote! {
            /// Lays out the value into `buf`, checking that its case is the one `tag` (the tag
            /// written) selects.
            pub fn put(&self, buf: &mut rt::LayoutBuf, tag: i128) -> rt::Result<()> {
                if tag != self.tag() {
                    return Err(rt::Error::from(rt::ErrorKind::Invalid(format!(
                        "a value of tag {} written under the tag {tag}",
                        self.tag()
                    ))));
                }
                match self {
                    #(#puts)*
                }
                Ok(())
            }
        }
    });
    quote! {
        #[doc = #doc]
        #[derive(Debug, Clone, PartialEq)]
        pub enum #ident {
            #(#variants)*
        }

        impl #ident {
            /// The tag of this value's case.
            pub fn tag(&self) -> i128 {
                match self {
                    #(#tags)*
                }
            }

            #[doc = #rdoc]
            pub fn read(c: &mut rt::Cursor<'_>, #limits: &rt::Limits, tag: i128) -> rt::Result<Self> {
                match tag {
                    #(#reads)*
                    _ => Err(c.error(#name, rt::ErrorKind::Invalid(format!("unknown tag {tag}")))),
                }
            }

            #int

            #put
        }
    }
}

/// True when an integer `lookup(..)` reads values of union `f` of layout `l`.
fn looked_up(ir: &Ir, l: LayoutId, f: FieldId) -> bool {
    ir.exprs().iter().any(|e| match &e.kind {
        ir::ExprKind::Call {
            func: ir::Builtin::Lookup,
            args,
        } if matches!(e.ty, Type::Int(_)) => match args.first().map(|a| &a.value.ty) {
            Some(Type::List(t)) => match **t {
                Type::Layout(r) => ir
                    .layout(r)
                    .fields
                    .iter()
                    .any(|g| g.name == "value" && g.ty == Type::Union(l, f)),
                _ => false,
            },
            _ => false,
        },
        _ => false,
    })
}
