//! The values of a `file` format that are not tensors, from the IR: its `value` mappings
//! (`value from File.kv as k { name = k.key; data = k.value; }`) become the format's
//! `structure` — one dict, each value under its name, then each tensor as a
//! `Node::Tensor` leaf under its own — and the records and tagged unions those values
//! hold implement `rt::ToNode`: a record is the node of the one field its writer is given
//! (GGUF's `Text` is its text; an `Array`, whose other given field is the tag of its
//! items, is the list of them), or a dict of its given fields by name; a union is the
//! node of its case.

use proc_macro2::TokenStream;
use quote::quote;
use tensorfmt_schema::ir::{self, ExprKind, FieldKind, FormatId, Ir, LayoutId, Member, Type};

use crate::file::{root_layout, MapEnv};
use crate::lower::{Lower, Unlowered, Val};
use crate::model::rs_ident;

/// True when the format has `value` mappings, and so a `structure`.
pub(crate) fn has_values(ir: &Ir, fid: FormatId) -> bool {
    !ir.format(fid).values.is_empty()
}

/// `structure` of a `file` format with `value` mappings, and the `rt::ToNode` impls of
/// what they hold; nothing for a format without.
pub(crate) fn gen_values(ir: &Ir, fid: FormatId) -> Result<TokenStream, Unlowered> {
    let fmt = ir.format(fid);
    let Some(&first) = fmt.values.first() else {
        return Ok(quote!());
    };
    let layout = root_layout(&ir.mapping(first).source).expect(
        "the checker's rule file_values: a `value` mapping iterates a list or map of the record",
    );
    let lname = rs_ident(&ir.layout(layout).name);
    let mut loops = Vec::new();
    let mut records = Vec::new();
    for &m in &fmt.values {
        let map = ir.mapping(m);
        loops.push(value_loop(ir, map, layout)?);
        if let Some(d) = map.key(ir::TensorKey::Data) {
            reachable(ir, &d.ty, &mut records);
        }
    }
    let impls = records.iter().map(|r| to_node_impl(ir, r));
    let doc = format!(
        " The values of a `{}` that are not tensors (its `value` mappings), each under its name, then its tensors as leaves under theirs: the format's structure.",
        ir.layout(layout).name
    );
    Ok(quote! {
        #[doc = #doc]
        pub fn structure(src: &rt::Source, limits: &rt::Limits) -> rt::Result<Option<rt::Node>> {
            let mut c = rt::Cursor::new(src.data(), src.location());
            let f = #lname::read(&mut c, limits).map_err(|e| src.in_file(e))?;
            let mut out = ::std::vec::Vec::new();
            #(#loops)*
            for t in index(src, limits)? {
                out.push((rt::Node::str(&t.name), rt::Node::Tensor(t.name)));
            }
            Ok(Some(rt::Node::Dict(out)))
        }

        #(#impls)*
    })
}

/// The loop adding one mapping's values to `out`; over an optional key of a dict
/// (`File.header.__metadata__`), nothing when it is absent.
fn value_loop(ir: &Ir, map: &ir::Mapping, layout: LayoutId) -> Result<TokenStream, Unlowered> {
    let env = MapEnv {
        layout,
        binding: Val::reference(quote!(t), map.binding_ty.clone()),
        position: false,
        keys: Vec::new(),
        name: quote!(name),
    };
    let lower = Lower { ir, env: &env };
    let name = map
        .key(ir::TensorKey::Name)
        .expect("the checker requires `name` and `data` in a `value` mapping");
    let data = map
        .key(ir::TensorKey::Data)
        .expect("the checker requires `name` and `data` in a `value` mapping");
    let name = lower.expr(name)?.scalar();
    let data = lower.expr(data)?.by_ref();
    let filter = match &map.filter {
        Some(w) => {
            let ok = lower.expr(w)?.scalar();
            quote!(if !(#ok) { continue; })
        }
        None => quote!(),
    };
    let body = quote! {
        #filter
        out.push((rt::Node::str(#name), rt::ToNode::to_node(#data)));
    };
    // An optional key of a dict: iterated when present.
    if let ExprKind::Member {
        base,
        member: Member::DictKey(d, k),
    } = &map.source.kind
    {
        let key = &ir.dict(*d).keys[k.index()];
        if key.optional {
            let b = lower.expr(base)?.ts;
            let id = rs_ident(&key.key);
            return Ok(quote! {
                if let Some(values) = &#b.#id {
                    for t in values.iter() {
                        #body
                    }
                }
            });
        }
    }
    let items = lower.expr(&map.source)?.by_ref();
    Ok(quote! {
        let values = #items;
        for t in values.iter() {
            #body
        }
    })
}

/// A record or tagged union a value holds.
#[derive(Clone, Copy, PartialEq)]
enum Record {
    Layout(LayoutId),
    Union(LayoutId, ir::FieldId),
}

/// Adds the records and unions `ty` holds to `out`, each once.
fn reachable(ir: &Ir, ty: &Type, out: &mut Vec<Record>) {
    match ty {
        Type::List(t) | Type::Tuple(t) => reachable(ir, t, out),
        Type::Map(k, v) => {
            reachable(ir, k, out);
            reachable(ir, v, out);
        }
        Type::Layout(l) => {
            if out.contains(&Record::Layout(*l)) {
                return;
            }
            out.push(Record::Layout(*l));
            for f in given(ir, *l) {
                reachable(ir, &ir.field(*l, f).ty, out);
            }
        }
        Type::Union(l, f) => {
            if out.contains(&Record::Union(*l, *f)) {
                return;
            }
            out.push(Record::Union(*l, *f));
            if let FieldKind::Match { cases, .. } = &ir.field(*l, *f).kind {
                for c in cases {
                    reachable(ir, &c.ty, out);
                }
            }
        }
        _ => {}
    }
}

/// The fields of layout `l` its writer is given (not computed, no magic, no payload),
/// less the tag of a `match` field among them (the union's case says it).
fn given(ir: &Ir, l: LayoutId) -> Vec<ir::FieldId> {
    let layout = ir.layout(l);
    let ids = |pred: &dyn Fn(&ir::Field) -> bool| -> Vec<ir::FieldId> {
        (0..layout.fields.len())
            .map(|i| ir::FieldId(i as u32))
            .filter(|&f| pred(ir.field(l, f)))
            .collect()
    };
    let all = ids(&|f| {
        !ir::plan::is_computed(f)
            && !matches!(f.kind, FieldKind::Magic(_))
            && f.item_ty != Type::Payload
    });
    let tags: Vec<ir::FieldId> = all
        .iter()
        .filter_map(|&f| match &ir.field(l, f).kind {
            FieldKind::Match { tag, .. } => match tag.kind {
                ExprKind::Field(tl, t) if tl == l => Some(t),
                _ => None,
            },
            _ => None,
        })
        .collect();
    all.into_iter().filter(|f| !tags.contains(f)).collect()
}

/// `impl rt::ToNode` of a record or union.
fn to_node_impl(ir: &Ir, r: &Record) -> TokenStream {
    match *r {
        Record::Layout(l) => {
            let name = rs_ident(&ir.layout(l).name);
            let fields = given(ir, l);
            let body = match fields.as_slice() {
                [] => quote!(rt::Node::None),
                [f] => {
                    let id = rs_ident(&ir.field(l, *f).name);
                    quote!(rt::ToNode::to_node(&self.#id))
                }
                fs => {
                    let items = fs.iter().map(|f| {
                        let text = &ir.field(l, *f).name;
                        let id = rs_ident(text);
                        quote!((rt::Node::str(#text), rt::ToNode::to_node(&self.#id)))
                    });
                    quote!(rt::Node::Dict(vec![#(#items),*]))
                }
            };
            let doc = format!(
                " A `{}` as a value of the format's structure.",
                ir.layout(l).name
            );
            quote! {
                #[doc = #doc]
                impl rt::ToNode for #name {
                    fn to_node(&self) -> rt::Node {
                        #body
                    }
                }
            }
        }
        Record::Union(l, f) => {
            let name = crate::union::union_ident(ir, l, f);
            let FieldKind::Match { cases, .. } = &ir.field(l, f).kind else {
                unreachable!("a union type is the type of a `match` field");
            };
            let arms = cases.iter().map(|c| {
                let v = crate::union::variant(ir, &c.ty);
                quote!(#name::#v(v) => rt::ToNode::to_node(v))
            });
            quote! {
                /// The value of the case, as a value of the format's structure.
                impl rt::ToNode for #name {
                    fn to_node(&self) -> rt::Node {
                        match self {
                            #(#arms,)*
                        }
                    }
                }
            }
        }
    }
}
