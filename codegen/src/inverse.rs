//! The writing side of the `file` engine, from the IR: the tensor mapping run backwards
//! (`ir::plan::inverse`) into the layout's given fields, and the streaming `Writer`.
//!
//! One tensor per file (`tensor from File as f`, npy): `<field>_for(meta)` builds each
//! dict field from the tensor's metadata, `write_tensor` writes the layout with the
//! tensor's bytes as its payload (a container includes it for each member: npz), and
//! the `Writer` takes exactly one tensor. Several tensors (`tensor from File.header.rest
//! as t`, safetensors): the `Writer` adds an item per tensor to the record's list or map
//! (names as map keys, dtypes by reverse table lookup, `slice` bounds as running offsets
//! in the payload) and holds the tensors' bytes in a `rt::Spool` (a temporary file:
//! memory holds the header alone), and `finish` writes the layout, whose header precedes
//! the bytes and describes every tensor, then streams the spool as the payload.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use tensorfmt_schema::ir::plan::{self, Inv, Inverse, Step};
use tensorfmt_schema::ir::{
    self, Const, ExprKind, FormatId, Ir, KeyKind, TensorKey, Type, WriteVar,
};

use crate::lower::{storage_ty, Env, Lower, Unlowered, Val};
use crate::model::rs_ident;
use crate::write::plan_of;

type R<T> = Result<T, Unlowered>;

/// No names in reach: the mapping's constants.
struct NoEnv;

/// A field of a struct expression: `id: v`, or `id` alone where `v` is that name.
fn init(id: &proc_macro2::Ident, v: TokenStream) -> TokenStream {
    if *id == v.to_string() {
        quote!(#id)
    } else {
        quote!(#id: #v)
    }
}

impl Env for NoEnv {
    fn field(&self, _l: ir::LayoutId, _f: ir::FieldId) -> Option<Val> {
        None
    }
}

/// The several-tensor writer's own fields, as the record (`File.kv` is `self.kv`).
struct Held(ir::LayoutId);

impl Env for Held {
    fn field(&self, _l: ir::LayoutId, _f: ir::FieldId) -> Option<Val> {
        None
    }

    fn layout(&self, l: ir::LayoutId) -> Option<Val> {
        (l == self.0).then(|| Val::place(quote!(self), Type::Layout(l)))
    }
}

struct Gen<'a> {
    ir: &'a Ir,
    inv: &'a Inverse,
    public: &'a str,
    /// Statements before the values: reverse lookups, the rank.
    pre: Vec<TokenStream>,
}

impl Gen<'_> {
    /// The value a place receives, of the place's storage type.
    fn value(&mut self, inv: &Inv, ty: &Type) -> R<TokenStream> {
        let t = storage_ty(self.ir, ty).unwrap_or_else(|| quote!(i128));
        let int = |v: TokenStream, ty: &Type| match ty {
            Type::Int(i) if i.bytes == Some(8) && !i.signed => quote!(#v),
            _ => {
                let name = ty_name(ty);
                quote!(rt::expr::narrow::<#t>(i128::from(#v), #name)?)
            }
        };
        Ok(match inv {
            Inv::Name => match ty {
                Type::Bytes => quote!(meta.name.as_bytes().to_vec()),
                _ => quote!(meta.name.clone()),
            },
            Inv::Dtype(table) => {
                let tb = self.ir.table(*table);
                let t = rs_ident(&crate::table::const_name(&tb.name));
                let code = format_ident!("{}", tb.name);
                let public = self.public;
                self.pre.push(quote! {
                    let #code = *#t.require_key(#public, meta.dtype, meta.byte_order)?;
                });
                match tb.key {
                    KeyKind::Str => quote!(#code.to_string()),
                    KeyKind::Int => int(quote!(#code), ty),
                }
            }
            Inv::Shape => match ty.element() {
                Some(Type::Int(i)) if i.bytes == Some(8) && !i.signed => quote!(meta.shape.clone()),
                Some(e) => {
                    let et = storage_ty(self.ir, e).unwrap_or_else(|| quote!(i128));
                    let name = ty_name(e);
                    quote!(rt::expr::ints::<#et>(&meta.shape, #name)?)
                }
                None => quote!(meta.shape.clone()),
            },
            Inv::ReversedShape => {
                let et = ty
                    .element()
                    .and_then(|e| storage_ty(self.ir, e))
                    .unwrap_or_else(|| quote!(i128));
                let name = ty.element().map_or_else(|| "the field".into(), ty_name);
                quote!(rt::expr::ints_reversed::<#et>(&meta.shape, #name)?)
            }
            Inv::Dim(i) => int(quote!(meta.shape[#i]), ty),
            Inv::Is(key, c) => {
                let prop = match key {
                    TensorKey::Order => quote!(meta.order),
                    _ => quote!(meta.byte_order),
                };
                let c = const_of(c);
                quote!(#prop == #c)
            }
            Inv::Begin => int(quote!(begin), ty),
            Inv::End => int(quote!(end), ty),
        })
    }

    /// A value of type `ty` for `place`, from what the mapping sets in or under it.
    fn build(&mut self, place: &[Step], ty: &Type) -> R<TokenStream> {
        let sets: Vec<(Vec<Step>, Inv)> = self
            .inv
            .sets
            .iter()
            .filter(|(p, _)| p.starts_with(place))
            .cloned()
            .collect();
        if let Some((_, inv)) = sets.iter().find(|(p, _)| p.len() == place.len()) {
            return self.value(inv, ty);
        }
        Ok(match ty {
            Type::Dict(d) => {
                let dict = self.ir.dict(*d);
                let name = rs_ident(&dict.name);
                let mut inits = Vec::new();
                for (k, key) in dict.keys.iter().enumerate() {
                    let mut p = place.to_vec();
                    p.push(Step::Key(*d, ir::KeyId(k as u32)));
                    let id = rs_ident(&key.key);
                    let set = sets.iter().any(|(s, _)| s.starts_with(&p));
                    let v = if !set && key.rest {
                        quote!(rt::pydict::Map(::std::vec::Vec::new()))
                    } else if !set && self.inv.items.as_deref() == Some(&p[..]) {
                        quote!(::std::vec::Vec::new())
                    } else if !set && key.optional {
                        quote!(None)
                    } else if key.optional {
                        let v = self.build(&p, &key.ty)?;
                        quote!(Some(#v))
                    } else {
                        self.build(&p, &key.ty)?
                    };
                    inits.push(init(&id, v));
                }
                quote!(#name { #(#inits),* })
            }
            Type::List(e) | Type::Tuple(e) => {
                let n = sets
                    .iter()
                    .filter_map(|(p, _)| match p.get(place.len()) {
                        Some(Step::Item(i)) => Some(*i + 1),
                        _ => None,
                    })
                    .max()
                    .unwrap_or(0);
                let mut items = Vec::new();
                for i in 0..n {
                    let mut p = place.to_vec();
                    p.push(Step::Item(i));
                    items.push(self.build(&p, e)?);
                }
                quote!(vec![#(#items),*])
            }
            Type::MapItem(k, v) => {
                let mut pk = place.to_vec();
                pk.push(Step::MapKey);
                let mut pv = place.to_vec();
                pv.push(Step::MapValue);
                let (k, v) = (self.build(&pk, k)?, self.build(&pv, v)?);
                quote!((#k, #v))
            }
            Type::Layout(inner) => {
                let lay = self.ir.layout(*inner);
                let p = plan_of(self.ir, *inner);
                let name = rs_ident(&lay.name);
                let mut inits = Vec::new();
                for (i, f) in lay.fields.iter().enumerate() {
                    if matches!(f.kind, ir::FieldKind::Magic(_)) {
                        continue;
                    }
                    let id = rs_ident(&f.name);
                    let v = if p.computed[i] || f.ty == Type::Payload {
                        // Computed again by the writer.
                        quote!(::std::default::Default::default())
                    } else {
                        let mut at = place.to_vec();
                        at.push(Step::Field(ir::FieldId(i as u32)));
                        self.build(&at, &f.ty)?
                    };
                    inits.push(init(&id, v));
                }
                quote!(#name { #(#inits),* })
            }
            _ => quote!(::std::default::Default::default()),
        })
    }

    /// The checks of what the mapping gives as constants.
    fn requires(&self) -> R<Vec<TokenStream>> {
        let mut out = Vec::new();
        let public = self.public;
        for (key, e) in &self.inv.requires {
            let v = Lower {
                ir: self.ir,
                env: &NoEnv,
            }
            .expr(e)?
            .scalar();
            let (test, what) = match key {
                TensorKey::Dtype => (
                    quote!(
                        meta.dtype != required.0
                            || required.1.is_some_and(|b| b != meta.byte_order)
                    ),
                    "dtype",
                ),
                TensorKey::Order => (quote!(meta.order != required), "order"),
                TensorKey::ByteOrder => (quote!(meta.byte_order != required), "byte order"),
                _ => continue,
            };
            let msg = format!("{public} stores only tensors of the {what} {{:?}}");
            // A dtype is a pair whose byte order may be a bare `None`.
            let ty = match key {
                TensorKey::Dtype => quote!(: (rt::DType, Option<rt::ByteOrder>)),
                _ => quote!(),
            };
            out.push(quote! {
                let required #ty = #v;
                if #test {
                    return Err(rt::Error::from(rt::ErrorKind::Unsupported(format!(#msg, required))));
                }
            });
        }
        if let Some((rank, fixed)) = &self.inv.rank {
            let msg = format!("{public} stores only tensors of {rank} dimensions");
            let dims = fixed.iter().map(|(i, v)| {
                let v = *v as u64;
                quote!(|| meta.shape[#i] != #v)
            });
            out.push(quote! {
                if meta.shape.len() != #rank #(#dims)* {
                    return Err(rt::Error::from(rt::ErrorKind::Unsupported(#msg.to_string())));
                }
            });
        }
        Ok(out)
    }
}

fn ty_name(t: &Type) -> String {
    match t {
        Type::Int(i) => i.name(),
        _ => "the field".into(),
    }
}

fn const_of(c: &Const) -> TokenStream {
    match c {
        Const::Order(ir::Order::C) => quote!(rt::Order::C),
        Const::Order(ir::Order::Fortran) => quote!(rt::Order::Fortran),
        Const::ByteOrder(b) => crate::lower::byte_order_path(*b),
        Const::Bool(b) => quote!(#b),
        _ => quote!(()),
    }
}

/// The byte order the bytes of a tensor are stored in, when the format fixes none (no
/// `byte_order` in the mapping, a table row without one for a multi-byte dtype): little,
/// as the reading side takes them. `None` when the tensor's own is stored.
fn swaps(ir: &Ir, m: &ir::Mapping, inv: &Inverse) -> bool {
    if m.key(TensorKey::ByteOrder).is_some() {
        return false;
    }
    inv.sets.iter().any(|(_, i)| match i {
        Inv::Dtype(t) => ir.table(*t).rows.iter().any(|r| {
            r.endian.is_none()
                && !matches!(
                    r.dtype.name(),
                    "u8" | "i8" | "bool" | "f8e4m3fn" | "f8e5m2" | "string"
                )
        }),
        _ => false,
    }) || inv.requires.iter().any(|(k, _)| *k == TensorKey::Dtype)
}

/// The doc comment of a `file` format's `DESC`.
const DESC_DOC: &str =
    " This format for the registry: name, extensions, detector, indexer and writer.";

/// The inverse functions and the `Writer` of a `file` format.
pub(crate) fn gen_file_writer(ir: &Ir, fid: FormatId) -> R<TokenStream> {
    let fmt = ir.format(fid);
    let Some(&m) = fmt.mappings.first() else {
        unreachable!("a `file` format without a mapping is generated by `gen_file_without_tensors`")
    };
    let m = ir.mapping(m);
    let inv = plan::inverse(ir, m)
        .expect("lowering reports every gap of a `file` mapping's inverse (ir::plan::inverse)");
    let l = ir.layout(inv.layout);
    let lname = rs_ident(&l.name);
    let p = plan_of(ir, inv.layout);
    let mut g = Gen {
        ir,
        inv: &inv,
        public: &fmt.public_name,
        pre: Vec::new(),
    };
    let requires = g.requires()?;
    let swap = swaps(ir, m, &inv);
    // A mapping that gives no `order` reads C order: the format stores only that.
    let c_only = !m.stmts.iter().any(|s| {
        matches!(
            s,
            ir::MappingStmt::Set {
                key: TensorKey::Order,
                ..
            }
        )
    });
    let payload = &l.fields[inv.payload.index()];
    let pname = &payload.name;
    // The given fields: built from the tensor (one per file) or held by the writer.
    let given: Vec<usize> = (0..l.fields.len())
        .filter(|&i| !p.computed[i] && !matches!(l.fields[i].kind, ir::FieldKind::Magic(_)))
        .collect();
    if inv.items.is_none() {
        let mut fns = Vec::new();
        let mut args = Vec::new();
        for &i in &given {
            let f = &l.fields[i];
            let place = [Step::Field(ir::FieldId(i as u32))];
            if i == inv.payload.index() {
                args.push(quote!(data));
                args.push(quote!(meta.nbytes()?));
                continue;
            }
            g.pre.clear();
            let v = g.build(&place, &f.ty)?;
            let pre = std::mem::take(&mut g.pre);
            match &f.ty {
                Type::Dict(d) => {
                    let dname = rs_ident(&ir.dict(*d).name);
                    let fname = format_ident!("{}_for", f.name);
                    let doc = format!(
                        " The `{}` describing a tensor to write: the inverse of [`tensor`].",
                        ir.dict(*d).name
                    );
                    fns.push(quote! {
                        #[doc = #doc]
                        pub fn #fname(meta: &rt::TensorMeta) -> rt::Result<#dname> {
                            #(#pre)*
                            Ok(#v)
                        }
                    });
                    args.push(quote!(&#fname(meta)?));
                }
                Type::Bytes | Type::Str => {
                    let t = if f.ty == Type::Str {
                        quote!(as_str)
                    } else {
                        quote!(as_slice)
                    };
                    args.push(quote!({ #(#pre)* #v }.#t()));
                }
                Type::Layout(_) => args.push(quote!(&{ #(#pre)* #v })),
                // A list, borrowed: the shape itself when it is one of `u64`.
                _ if f.repeat.is_some() => {
                    let whole_shape = g
                        .inv
                        .sets
                        .iter()
                        .any(|(at, inv)| at[..] == place[..] && matches!(inv, Inv::Shape))
                        && matches!(f.ty.element(), Some(Type::Int(i)) if i.bytes == Some(8) && !i.signed);
                    args.push(if whole_shape {
                        quote!(&meta.shape)
                    } else if pre.is_empty() {
                        quote!(&#v)
                    } else {
                        quote!(&{ #(#pre)* #v })
                    });
                }
                _ if pre.is_empty() => args.push(v),
                _ => args.push(quote!({ #(#pre)* #v })),
            }
        }
        let refuse_big = swap.then(|| {
            let msg = format!("{} stores little-endian tensors", fmt.public_name);
            quote! {
                if meta.byte_order == rt::ByteOrder::Big && meta.dtype.swap_unit().unwrap_or(1) > 1 {
                    return Err(rt::Error::from(rt::ErrorKind::Unsupported(#msg.to_string())));
                }
            }
        });
        let wdoc = format!(
            " Writes one tensor as a `{}`: `meta` gives the header, `data` holds exactly `meta.nbytes()` bytes in `meta`'s order and byte order. Returns the number of bytes written.",
            l.name
        );
        let desc = crate::engine::desc_ordered(
            quote! {
                let _ = options;
                Ok(::std::boxed::Box::new(writer(w)))
            },
            DESC_DOC,
            c_only,
            !ir.format(fid).values.is_empty(),
            false,
        );
        return Ok(quote! {
            #(#fns)*
            #[doc = #wdoc]
            pub fn write_tensor(
                w: &mut dyn ::std::io::Write,
                meta: &rt::TensorMeta,
                data: rt::Payload<'_>,
            ) -> rt::Result<u64> {
                #(#requires)*
                #refuse_big
                #lname::write(w, #(#args),*)
            }
            /// A streaming writer of these files: exactly one tensor, written by [`write_tensor`] as it is added.
            pub fn writer<W: ::std::io::Write + ::std::io::Seek>(w: W) -> rt::SingleTensorWriter<W> {
                rt::SingleTensorWriter::new(w, NAME, write_tensor)
            }
            #desc
        });
    }
    // Several tensors: the writer holds the given fields and fills in the items. The
    // mapping's places are an item's, not the record's: the fields start from no place.
    let items = inv.items.clone().unwrap_or_default();
    let record = Inverse {
        sets: Vec::new(),
        ..inv.clone()
    };
    let mut held = Gen {
        ir,
        inv: &record,
        public: g.public,
        pre: Vec::new(),
    };
    let mut fields = Vec::new();
    let mut inits = Vec::new();
    let mut args = Vec::new();
    let mut access = Vec::new();
    for &i in &given {
        let f = &l.fields[i];
        let id = rs_ident(&f.name);
        if i == inv.payload.index() {
            args.push(quote!(rt::Payload::Reader(&mut data)));
            args.push(quote!(len));
            continue;
        }
        let t = storage_ty(ir, &f.ty)
            .expect("the checker's rule layout_fields: a layout's fields have a storage type");
        let v = held.build(&[Step::Field(ir::FieldId(i as u32))], &f.ty)?;
        fields.push(quote!(#id: #t,));
        inits.push(init(&id, v));
        args.push(quote!(&self.#id));
        let doc = format!(
            " The `{}` written by [`Writer::finish`], with an item per tensor added: what the tensor mapping does not give (an optional key) may be set here.",
            f.name
        );
        access.push(quote! {
            #[doc = #doc]
            pub fn #id(&mut self) -> &mut #t {
                &mut self.#id
            }
        });
    }
    // The alignment the save asks for, held by the writer where the schema reads it
    // (`write_align`): passed to the layout's writer, read by the order's keys.
    let aligns = ir.format_reads_write_align(fid);
    if ir.layout_reads_write_align(inv.layout) {
        args.push(quote!(self.align));
    }
    let (align_field, align_init) = if aligns {
        (
            quote!(align: Option<u64>,),
            quote!(align: options.checked_align()?,),
        )
    } else {
        (quote!(), quote!())
    };
    // The place of the items, from the writer.
    let mut path = quote!(self);
    let mut map = false;
    let mut within = inv.layout;
    for s in &items {
        match s {
            Step::Field(f) => {
                let field = ir.field(within, *f);
                let id = rs_ident(&field.name);
                path = quote!(#path.#id);
                if let Type::Layout(inner) = field.item_ty {
                    within = inner;
                }
            }
            Step::Key(d, k) => {
                let key = &ir.dict(*d).keys[k.index()];
                let id = rs_ident(&key.key);
                path = quote!(#path.#id);
                map = matches!(key.ty, Type::Map(..));
            }
            _ => {}
        }
    }
    let push_to = if map { quote!(#path.0) } else { path };
    g.pre.clear();
    let item = g.build(&[], &m.binding_ty)?;
    let pre = std::mem::take(&mut g.pre);
    let unit = if swap {
        quote!(if meta.byte_order == rt::ByteOrder::Big {
            meta.dtype.swap_unit().unwrap_or(1)
        } else {
            1
        })
    } else {
        quote!(1)
    };
    // Each tensor's bytes start, and end, at a multiple of the alignment.
    let of_writer = Lower {
        ir,
        env: &Held(inv.layout),
    };
    let align = inv
        .align
        .as_ref()
        .map(|a| of_writer.expr(a))
        .transpose()?
        .map(|a| a.scalar());
    let (pad_before, pad_after) = match &align {
        Some(a) => (
            quote! {
                let align = rt::expr::to_u64(#a, "the alignment")?;
                let begin = self.data.pad_to(align)?;
            },
            quote!(self.data.pad_to(align)?;),
        ),
        None => (quote!(let begin = self.data.len();), quote!()),
    };
    // The end, where the item stores it.
    let end = inv.sets.iter().any(|(_, i)| *i == Inv::End).then(|| {
        quote! {
            let end = begin.checked_add(len).ok_or_else(|| {
                rt::Error::from(rt::ErrorKind::Overflow("the tensors' bytes".to_string()))
            })?;
        }
    });
    let public = &fmt.public_name;
    let dup = format!("{public} holds one tensor per name");
    let (names_field, names_init, dup_check) = if map {
        (
            quote!(names: ::std::collections::HashSet<::std::string::String>,),
            quote!(names: ::std::collections::HashSet::new(),),
            quote! {
                if !self.names.insert(meta.name.clone()) {
                    return Err(rt::Error::from(rt::ErrorKind::Invalid(#dup.to_string())));
                }
            },
        )
    } else {
        (quote!(), quote!(), quote!())
    };
    // `write_order`: `add` spools the bytes and keeps the tensor's keys and metadata;
    // `finish` builds the items in the keys' order, then streams the bytes in that order.
    let (order_field, order_init, add_body, place_items) = match &m.write_order {
        Some(ir::Expr {
            kind: ExprKind::List(keys),
            ..
        }) => {
            let env = OrderEnv { ir, fid, aligns };
            let lower = Lower { ir, env: &env };
            let mut ks = Vec::new();
            for k in keys {
                let v = lower.expr(k)?.scalar();
                ks.push(match k.ty {
                    Type::Str => quote!(rt::expr::SortKey::text(#v)),
                    Type::Bool => quote!(rt::expr::SortKey::Bool(#v)),
                    _ => quote!(rt::expr::SortKey::Int(#v)),
                });
            }
            (
                quote!(order: ::std::vec::Vec<(::std::vec::Vec<rt::expr::SortKey>, rt::TensorMeta, u64, u64)>,),
                quote!(order: ::std::vec::Vec::new(),),
                quote! {
                    let len = meta.nbytes()?;
                    let at = self.data.len();
                    let keys = vec![#(#ks),*];
                    self.data.add(data, len, #unit, #pname)?;
                    self.order.push((keys, meta.clone(), at, len));
                },
                quote! {
                    let mut order = ::std::mem::take(&mut self.order);
                    order.sort_by(|a, b| a.0.cmp(&b.0));
                    let mut begin = 0u64;
                    for &(_, ref meta, _, len) in &order {
                        #end
                        #(#pre)*
                        let item = #item;
                        #push_to.push(item);
                        begin += len;
                    }
                    let len = self.data.len();
                    let ranges = order.iter().map(|o| (o.2, o.3)).collect();
                    let mut data = self.data.into_ranges(ranges)?;
                },
            )
        }
        _ => (
            quote!(),
            quote!(),
            quote! {
                #pad_before
                let len = meta.nbytes()?;
                #end
                #(#pre)*
                let item = #item;
                self.data.add(data, len, #unit, #pname)?;
                #pad_after
                #push_to.push(item);
            },
            quote! {
                let len = self.data.len();
                let mut data = self.data.into_reader()?;
            },
        ),
    };
    // The format's values, set before the first tensor where its alignment is among them.
    let added = match &m.write_order {
        Some(_) => quote!(!self.order.is_empty()),
        None => quote!(!#push_to.is_empty()),
    };
    let held_align = align.is_some_and(|a| crate::engine::mentions(&a, "self"));
    let added = held_align.then_some(added);
    let (set_structure, set_value, values_doc) = crate::values::gen_set_structure(ir, fid, added)?;
    let wdoc = format!(
        " Streaming writer of `{public}` files: the tensors' bytes wait in a spool (a temporary file beside the destination), so that [`Writer::finish`] can write the `{}` — whose header, before the bytes, describes every tensor — and then stream them: memory holds the header alone.{values_doc}",
        l.name
    );
    let desc = crate::engine::desc_ordered(
        quote!(Ok(::std::boxed::Box::new(Writer::new(w, options)?))),
        DESC_DOC,
        c_only,
        !ir.format(fid).values.is_empty(),
        aligns,
    );
    let desc = match header_limit(ir, inv.layout, &items) {
        Some((limit, json)) => crate::engine::with_names_total(desc, limit, json),
        None => desc,
    };
    Ok(quote! {
        #[doc = #wdoc]
        pub struct Writer<W: ::std::io::Write + ::std::io::Seek> {
            out: W,
            #(#fields)*
            #names_field
            #order_field
            #align_field
            data: rt::Spool,
        }

        impl<W: ::std::io::Write + ::std::io::Seek> Writer<W> {
            /// A writer into `w` (written from its current position when finished).
            pub fn new(w: W, options: &rt::WriteOptions) -> rt::Result<Self> {
                Ok(Writer {
                    out: w,
                    #(#inits,)*
                    #names_init
                    #order_init
                    #align_init
                    data: rt::Spool::new(options.destination.as_deref())?,
                })
            }

            #(#access)*

            #set_value

            /// Adds a tensor: its item, and its bytes after the previous tensor's.
            pub fn add(&mut self, meta: &rt::TensorMeta, data: rt::Payload<'_>) -> rt::Result<()> {
                #(#requires)*
                #dup_check
                #add_body
                Ok(())
            }

            /// Writes the layout, then the tensors' bytes; returns the output.
            pub fn finish(mut self) -> rt::Result<W> {
                #place_items
                #lname::write(&mut self.out, #(#args),*)?;
                self.out.flush()?;
                Ok(self.out)
            }
        }

        impl<W: ::std::io::Write + ::std::io::Seek> rt::TensorWriter for Writer<W> {
            fn add(&mut self, meta: &rt::TensorMeta, data: rt::Payload<'_>) -> rt::Result<()> {
                Writer::add(self, meta, data).map_err(|e| e.in_entry(meta.name.as_str()))
            }

            fn finish(self: ::std::boxed::Box<Self>) -> rt::Result<()> {
                Writer::finish(*self)?;
                Ok(())
            }

            #set_structure
        }

        #desc
    })
}

/// The tensor being added, for the keys of `write_order`: its `name`, `dtype`, `shape`
/// and `nbytes`, `index_of(TABLE, dtype)`, the position of its dtype's row, and
/// `write_align(n)`, from the alignment the writer holds (`aligns`).
struct OrderEnv<'a> {
    ir: &'a Ir,
    fid: ir::FormatId,
    aligns: bool,
}

impl Env for OrderEnv<'_> {
    fn field(&self, _l: ir::LayoutId, _f: ir::FieldId) -> Option<Val> {
        None
    }
    fn format(&self) -> Option<ir::FormatId> {
        Some(self.fid)
    }
    fn write_var(&self, v: WriteVar) -> Option<Val> {
        Some(match v {
            WriteVar::Name => Val::place(quote!(meta.name), Type::Str),
            WriteVar::Dtype => Val::value(quote!((meta.dtype, Some(meta.byte_order))), Type::Dtype),
            WriteVar::Shape => Val::place(quote!(meta.shape), v.ty()),
            WriteVar::Nbytes => Val::value(quote!(i128::from(len)), Type::INT),
            _ => return None,
        })
    }
    fn write_align(&self) -> Option<TokenStream> {
        self.aligns.then(|| quote!(self.align))
    }
    fn builtin(&self, func: ir::Builtin, args: &[ir::Arg]) -> Option<Val> {
        let (ir::Builtin::IndexOf, [t, d]) = (func, args) else {
            return None;
        };
        let ExprKind::Table(t) = t.value.kind else {
            return None;
        };
        let lower = Lower {
            ir: self.ir,
            env: self,
        };
        let table = lower.table_path(t);
        let d = match d.value.kind {
            ExprKind::WriteVar(WriteVar::Dtype) => quote!(meta.dtype),
            _ => {
                let d = lower.expr(&d.value).ok()?.scalar();
                quote!(#d.0)
            }
        };
        let public = &self.ir.format(self.fid).public_name;
        Some(Val::value(quote!(#table.row_of(#public, #d)?), Type::INT))
    }
}

/// The most bytes of the encoded field that holds every tensor's item (`items`, from the
/// layout `layout`: safetensors' JSON `header`), where that field's size is a field
/// checked against a constant (`header_len: u64 check header_len <= 100_000_000`): as
/// the names are in it, they take at most that much together; and whether the field is
/// JSON (its names written as JSON strings).
fn header_limit(ir: &Ir, layout: ir::LayoutId, items: &[Step]) -> Option<(u64, bool)> {
    use tensorfmt_schema::ast::BinaryOp;
    let Some(Step::Field(f)) = items.first() else {
        return None;
    };
    let field = ir.field(layout, *f);
    let json = matches!(field.codec.as_ref()?, ir::Codec::Json { .. });
    let ExprKind::Field(sl, sf) = &field.size.as_ref()?.kind else {
        return None;
    };
    let limit = ir
        .field(*sl, *sf)
        .checks
        .iter()
        .find_map(|c| match &c.kind {
            ExprKind::Binary { op, lhs, rhs } => match (&lhs.kind, &rhs.kind) {
                (ExprKind::Field(l, f), ExprKind::Const(Const::Int(n))) if (l, f) == (sl, sf) => {
                    match op {
                        BinaryOp::Le => u64::try_from(*n).ok(),
                        BinaryOp::Lt => u64::try_from(*n - 1).ok(),
                        _ => None,
                    }
                }
                _ => None,
            },
            _ => None,
        })?;
    Some((limit, json))
}
