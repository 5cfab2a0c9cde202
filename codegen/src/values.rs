//! The values of a `file` format that are not tensors, from the IR: its `value` mappings
//! (`value from File.kv as k { name = k.key; data = k.value; }`) become the format's
//! `structure` — one dict, each value under its name, then each tensor as a
//! `Node::Tensor` leaf under its own — and the records and tagged unions those values
//! hold implement `rt::ToNode`: a record is the node of the one field its writer is given
//! (GGUF's `Text` is its text; an `Array`, whose other given field is the tag of its
//! items, is the list of them), or a dict of its given fields by name; a union is the
//! node of its case, with the case's tag ([`rt::Node::Typed`]: a GGUF value keeps its type).
//! Backwards, for the writer: those records and unions implement `rt::FromNode` (an
//! untagged node takes the first case that holds it, wider numbers first, signed before
//! unsigned), and `set_structure` (see [`gen_set_structure`]) runs the mappings backwards,
//! each value of a structure into the list or map the mapping iterates.

use proc_macro2::{Literal, TokenStream};
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
    let impls = records
        .iter()
        .map(|r| [to_node_impl(ir, r), from_node_impl(ir, r)]);
    // The tensors of the record read, or of `src` read again where the format has one.
    let tensors =
        crate::file::tensors_of_record(ir, fid).unwrap_or_else(|| quote!(index(src, limits)?));
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
            for t in #tensors {
                out.push((rt::Node::str(&t.name), rt::Node::Tensor(t.name)));
            }
            Ok(Some(rt::Node::Dict(out)))
        }

        #(#(#impls)*)*
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
    let all: Vec<ir::FieldId> = (0..ir.layout(l).fields.len())
        .map(|i| ir::FieldId(i as u32))
        .filter(|&f| ir::plan::is_given(ir.field(l, f)))
        .collect();
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
                [f] => field_node(ir, l, *f),
                fs => {
                    let items = fs.iter().map(|f| {
                        let text = &ir.field(l, *f).name;
                        let v = field_node(ir, l, *f);
                        quote!((rt::Node::str(#text), #v))
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
                let tag = Literal::i128_unsuffixed(c.tag);
                quote!(#name::#v(v) => rt::Node::typed(#tag, rt::ToNode::to_node(v)))
            });
            quote! {
                /// The value of the case, with its tag, as a value of the format's structure.
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

/// The tag field of `match` field `f` of layout `l` when the writer is given it (an
/// `Array`'s `kind`, which the items share), not computed from the value.
fn given_tag(ir: &Ir, l: LayoutId, f: ir::FieldId) -> Option<ir::FieldId> {
    let FieldKind::Match { tag, .. } = &ir.field(l, f).kind else {
        return None;
    };
    match tag.kind {
        ExprKind::Field(tl, t) if tl == l && !ir::plan::is_computed(ir.field(l, t)) => Some(t),
        _ => None,
    }
}

/// The node of field `f` of `self`: a list of a union's values that share a given tag
/// carries that tag, so that an empty list keeps it.
fn field_node(ir: &Ir, l: LayoutId, f: ir::FieldId) -> TokenStream {
    let id = rs_ident(&ir.field(l, f).name);
    match given_tag(ir, l, f).filter(|_| ir.field(l, f).repeat.is_some()) {
        Some(t) => {
            let tag = rs_ident(&ir.field(l, t).name);
            quote!(rt::Node::typed(i128::from(self.#tag), rt::ToNode::to_node(&self.#id)))
        }
        None => quote!(rt::ToNode::to_node(&self.#id)),
    }
}

/// `impl rt::FromNode` of a record or union: the inverse of [`to_node_impl`].
fn from_node_impl(ir: &Ir, r: &Record) -> TokenStream {
    match *r {
        Record::Layout(l) => {
            let name = rs_ident(&ir.layout(l).name);
            let fields = given(ir, l);
            // Each given field from its node; the record's other fields: a given tag from
            // its value, the rest computed when written.
            let mut lets = Vec::new();
            let mut tags: Vec<(ir::FieldId, TokenStream)> = Vec::new();
            for &f in &fields {
                let field = ir.field(l, f);
                let id = rs_ident(&field.name);
                let node = match fields.as_slice() {
                    [_] => quote!(node),
                    _ => {
                        let text = &field.name;
                        quote!(rt::dict_item(node, #text)?)
                    }
                };
                let Some(t) = given_tag(ir, l, f) else {
                    lets.push(quote!(let #id = rt::FromNode::from_node(#node)?;));
                    continue;
                };
                let tag = rs_ident(&ir.field(l, t).name);
                let u = crate::union::union_ident(ir, l, f);
                if field.repeat.is_some() {
                    lets.push(quote! {
                        let (#tag, #id) = rt::tagged_items(
                            #node,
                            |n| #u::from_node(n).map(|v| v.tag()),
                            #u::from_case,
                        )?;
                    });
                } else {
                    lets.push(quote!(let #id: #u = rt::FromNode::from_node(#node)?;));
                    lets.push(quote!(let #tag = #id.tag();));
                }
                tags.push((t, quote!(#tag)));
            }
            let inits = ir.layout(l).fields.iter().enumerate().filter_map(|(i, f)| {
                let fid = ir::FieldId(i as u32);
                let id = rs_ident(&f.name);
                if matches!(f.kind, FieldKind::Magic(_)) {
                    None
                } else if let Some((_, t)) = tags.iter().find(|(t, _)| *t == fid) {
                    Some(quote!(#id: #t.try_into().ok()?))
                } else if fields.contains(&fid) {
                    Some(quote!(#id))
                } else {
                    Some(quote!(#id: ::std::default::Default::default()))
                }
            });
            let doc = format!(
                " A `{}` from a value of a structure, its fields computed when written.",
                ir.layout(l).name
            );
            quote! {
                #[doc = #doc]
                impl rt::FromNode for #name {
                    fn from_node(node: &rt::Node) -> Option<Self> {
                        #(#lets)*
                        Some(#name { #(#inits),* })
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
                let tag = Literal::i128_unsuffixed(c.tag);
                quote!(#tag => rt::FromNode::from_node(node).map(#name::#v))
            });
            // An untagged value: the first case that holds it, wider numbers first, signed
            // integers before unsigned, then the cases in order.
            let mut order: Vec<&ir::MatchCase> = cases.iter().collect();
            order.sort_by_key(|c| match &c.ty {
                Type::Int(i) => (0, !i.signed, -i64::from(i.bytes.unwrap_or(16))),
                Type::Float(x) => (1, false, -i64::from(x.bytes)),
                _ => (2, false, 0),
            });
            let order = order.iter().map(|c| Literal::i128_unsuffixed(c.tag));
            quote! {
                /// The case a value of a structure carries the tag of; for a value without
                /// one, the first case that holds it (wider numbers first, signed before unsigned).
                impl rt::FromNode for #name {
                    fn from_node(node: &rt::Node) -> Option<Self> {
                        rt::case_of(node, &[#(#order),*], #name::from_case)
                    }
                }

                impl #name {
                    /// The case `tag` holding the value of `node`, if it can.
                    pub fn from_case(tag: i128, node: &rt::Node) -> Option<Self> {
                        let node = node.as_case(tag)?;
                        match tag {
                            #(#arms,)*
                            _ => None,
                        }
                    }
                }
            }
        }
    }
}

/// `set_structure` of the writer of a format with `value` mappings (nothing for one
/// without): each value of a structure (an entry of its top dict that holds no tensor)
/// becomes an item of the list or map the first mapping that can hold it iterates, the
/// mapping run backwards (`name = k.key; data = k.value` → a `Kv` of that key and value,
/// replacing one of the same key); the others are dropped and their paths returned.
/// `added`: true once a tensor is added, when the format's alignment is read from these
/// values (GGUF's `general.alignment`), which must then be set first. The method of the
/// writer's `rt::TensorWriter` impl, the writer's `set_value` it calls (one value into
/// its place, replacing one of the same name; `None` when the place cannot hold it), and
/// a sentence for the writer's doc saying where the values go.
pub(crate) fn gen_set_structure(
    ir: &Ir,
    fid: FormatId,
    added: Option<TokenStream>,
) -> Result<(TokenStream, TokenStream, String), Unlowered> {
    let fmt = ir.format(fid);
    if fmt.values.is_empty() {
        return Ok((quote!(), quote!(), String::new()));
    }
    let mut tries = Vec::new();
    let mut places = Vec::new();
    for &m in &fmt.values {
        let map = ir.mapping(m);
        let (path, place) = place_path(
            ir,
            &map.source,
            !matches!(map.binding_ty, Type::MapItem(..)),
        );
        places.push(format!("`{place}`"));
        let data = map
            .key(ir::TensorKey::Data)
            .expect("the checker requires `name` and `data` in a `value` mapping");
        let t = crate::lower::storage_ty(ir, &data.ty)
            .expect("the checker's rule file_values: a value's `data` has a storage type");
        // The mapping's setting, as the last tried (an `Option<()>`) and as one tried before
        // others (returning when it holds the value).
        let (last, early) = match &map.binding_ty {
            Type::MapItem(..) => {
                let set = quote!(rt::pydict::SetValue::set_value(&mut #path, name, node));
                (set.clone(), quote!(if #set.is_some() { return Some(()); }))
            }
            Type::Layout(l) => {
                let field_of = |k| {
                    let e = map
                        .key(k)
                        .expect("the checker requires `name` and `data` in a `value` mapping");
                    match e.kind {
                        ExprKind::Member {
                            member: Member::Field(_, f),
                            ..
                        } => f,
                        _ => unreachable!(
                            "the checker's rule file_values: a written value is a field of the item"
                        ),
                    }
                };
                let (n, d) = (field_of(ir::TensorKey::Name), field_of(ir::TensorKey::Data));
                let rname = rs_ident(&ir.layout(*l).name);
                let nid = rs_ident(&ir.field(*l, n).name);
                let inits = ir
                    .layout(*l)
                    .fields
                    .iter()
                    .enumerate()
                    .filter_map(|(i, f)| {
                        let id = rs_ident(&f.name);
                        let fid = ir::FieldId(i as u32);
                        match &f.kind {
                            FieldKind::Magic(_) => None,
                            _ if fid == n => Some(quote!(#id: name.to_string())),
                            _ if fid == d && f.name == "value" => Some(quote!(value)),
                            _ if fid == d => Some(quote!(#id: value)),
                            _ => Some(quote!(#id: ::std::default::Default::default())),
                        }
                    });
                let set = quote! {
                    let item = #rname { #(#inits),* };
                    rt::set_item(&mut #path, item, |r| r.#nid == name);
                };
                (
                    quote! {
                        let value = rt::FromNode::from_node(node)?;
                        #set
                        Some(())
                    },
                    quote! {
                        if let Some(value) = <#t as rt::FromNode>::from_node(node) {
                            #set
                            return Some(());
                        }
                    },
                )
            }
            _ => unreachable!(
                "the checker's rule file_values: a value mapping iterates a list or map"
            ),
        };
        tries.push((last, early));
    }
    // Each mapping but the last takes what it can hold; the last, what is left.
    let (last, _) = tries.pop().expect("the format has `value` mappings");
    let tries = tries.iter().map(|(_, early)| early);
    let refuse = added.map(|added| {
        let msg = format!(
            "{}: set the values before the first tensor (its tensors' alignment is among them)",
            fmt.public_name
        );
        quote!(rt::refuse_if(#added, #msg)?;)
    });
    Ok((
        quote! {
            fn set_structure(&mut self, tree: &rt::Node) -> rt::Result<rt::StructureKept> {
                #refuse
                Ok(rt::set_values(tree, |name, node| self.set_value(name, node)))
            }
        },
        quote! {
            fn set_value(&mut self, name: &str, node: &rt::Node) -> Option<()> {
                #(#tries)*
                #last
            }
        },
        format!(
            " The values of a structure (`set_structure`) go to {}.",
            places.join(" or ")
        ),
    ))
}

/// The writer's place of what a `value` mapping iterates (`self.kv`; an optional map
/// inserted where absent, `self.header.__metadata__.get_or_insert_with(..)`, or left
/// optional when it is the place itself and not `unwrap`), and its path in the schema
/// (`File.kv`).
fn place_path(ir: &Ir, e: &ir::Expr, unwrap: bool) -> (TokenStream, String) {
    match &e.kind {
        ExprKind::Member { base, member } => {
            let (b, text) = place_path(ir, base, true);
            let (key, optional) = match member {
                Member::Field(l, f) => (&ir.field(*l, *f).name, false),
                Member::DictKey(d, k) => {
                    let key = &ir.dict(*d).keys[k.index()];
                    (&key.key, key.optional)
                }
                _ => unreachable!("the checker's rule file_values: a value mapping iterates a place of the record"),
            };
            let id = rs_ident(key);
            let path = if optional && unwrap {
                quote!(#b.#id.get_or_insert_with(::std::default::Default::default))
            } else {
                quote!(#b.#id)
            };
            (path, format!("{text}.{key}"))
        }
        ExprKind::Layout(l) => (quote!(self), ir.layout(*l).name.clone()),
        _ => unreachable!(
            "the checker's rule file_values: a value mapping iterates a place of the record"
        ),
    }
}
