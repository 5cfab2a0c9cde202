//! The `file` engine around pickles, from the IR: a layout whose fields are
//! self-delimiting pickles (`bytes codec pickle(P)`, read back to back with
//! `rt::pickle::read_prefix`), then records repeated once per item of one of them
//! (`R repeat count(len(keys))`). The mapping is over the objects one pickle builds
//! (`File.object.tensors`), like the zip engine's; its data is a record's `payload` field
//! looked up by key (`File.storages.bytes[index_of(File.keys, t.storage.key)]`). Further
//! mappings over that pickle whose `data` is a pickled byte string (NumPy arrays,
//! `data = a.state[4]`) read tensors the pickle holds itself, in the same walk (`placed`).
//! What is generated is data and small functions: the file's pickles and their checks
//! (`FILE`, an `rt::pickle::FileSpec`), the mapping of one call (and of each placed kind)
//! and the reader of one record; the
//! runtime's `rt::pickle::read_file` reads the file with them.
//!
//! In a record layout, `dtype` is the dtype of the tensors whose data is that record (the
//! mapping's `data` inverted): they must agree on the element size, and a record that no
//! tensor uses cannot be sized. A record field named like an item of the persistent ids
//! (`numel`) must equal that item of every persistent id naming the record.

use std::cell::Cell;

use proc_macro2::{Literal, TokenStream};
use quote::{format_ident, quote};
use tensorfmt_schema::ir::{
    self, Builtin, Codec, Expr, ExprKind, FieldId, FormatId, Ir, LayoutId, Member, Repeat, Type,
};

use super::{gen_map_fn, Locate, R};
use crate::lower::{Env, Lower, Val};

/// True when a `file` format has a layout field decoded by the pickle codec.
pub(crate) fn is_pickle_file(ir: &Ir, fid: FormatId) -> bool {
    let f = ir.format(fid);
    f.engine == ir::Engine::File
        && f.layouts.iter().any(|&l| {
            ir.layout(l)
                .fields
                .iter()
                .any(|x| matches!(x.codec, Some(Codec::Pickle(_))))
        })
}

/// The value of a pickle field in its checks: `v`, the pickle's value.
struct CheckEnv {
    layout: LayoutId,
    field: FieldId,
    fid: FormatId,
    ty: Type,
}

impl Env for CheckEnv {
    fn field(&self, l: LayoutId, f: FieldId) -> Option<Val> {
        (l == self.layout && f == self.field).then(|| Val::value(quote!(v), self.ty.clone()))
    }
    fn format(&self) -> Option<FormatId> {
        Some(self.fid)
    }
}

/// Names in reach in a record layout: its integer fields read so far (locals) and the
/// dtype of the tensors whose bytes it holds (`r.dtype`).
struct RecordEnv<'a> {
    layout: LayoutId,
    fid: FormatId,
    /// The fields read so far: position, local, type.
    known: Vec<(FieldId, proc_macro2::Ident, Type)>,
    dtype: &'a Cell<bool>,
}

impl Env for RecordEnv<'_> {
    fn field(&self, l: LayoutId, f: FieldId) -> Option<Val> {
        if l != self.layout {
            return None;
        }
        let (_, var, ty) = self.known.iter().find(|k| k.0 == f)?;
        Some(Val::place(quote!(#var), ty.clone()))
    }
    fn format(&self) -> Option<FormatId> {
        Some(self.fid)
    }
    fn record_dtype(&self) -> Option<Val> {
        self.dtype.set(true);
        Some(Val::value(quote!((r.dtype, None)), Type::Dtype))
    }
    fn builtin(&self, func: Builtin, args: &[ir::Arg]) -> Option<Val> {
        match (func, args) {
            (Builtin::Itemsize, [a]) if matches!(a.value.kind, ExprKind::RecordDtype) => {
                self.dtype.set(true);
                Some(Val::value(quote!(rt::expr::itemsize(r.dtype)?), Type::INT))
            }
            _ => None,
        }
    }
}

/// The local a record field is read into.
fn rec_var(name: &str) -> proc_macro2::Ident {
    match name {
        "c" | "r" | "dtype" | "size" => format_ident!("f_{}", name),
        _ => crate::model::rs_ident(name),
    }
}

/// `snake_case` of a layout's `CamelCase` name.
fn snake(name: &str) -> String {
    let mut out = String::new();
    for (i, ch) in name.chars().enumerate() {
        if ch.is_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.extend(ch.to_lowercase());
        } else {
            out.push(ch);
        }
    }
    out
}

/// `FILE`, `index`, the mapping of one call and the record reader of a `file` format
/// around pickles.
pub(crate) fn gen_file_pickle(ir: &Ir, fid: FormatId) -> R<TokenStream> {
    let fmt = ir.format(fid);
    let public = &fmt.public_name;
    // The mapping over the records, and those over calls whose bytes the object pickle
    // holds (`data` a pickled byte string: NumPy arrays), read in the same walk.
    let placed = |m: &ir::Mapping| m.data_in_pickle();
    let Some(&first) = fmt.mappings.first() else {
        unreachable!("checker rule file_pickle: a file of pickles has a tensor mapping");
    };
    let m = match fmt.mappings.iter().find(|&&m| !placed(ir.mapping(m))) {
        Some(&m) => m,
        // A file that is one pickle: every mapping's tensors lie in it.
        None => first,
    };
    let map = ir.mapping(m);
    // `tensor from L.object.<kind>s as t`
    let objects = match &map.source.kind {
        ExprKind::Member {
            base,
            member: Member::PickleObjects(p, kind),
        } => base.field_of().map(|(l, f)| (l, f, *p, kind.as_str())),
        _ => None,
    };
    let Some((lid, object, pid, kind)) = objects else {
        unreachable!(
            "checker rule file_pickle: the mapping iterates the objects of a pickle field of the layout"
        );
    };
    let layout = ir.layout(lid);
    if layout.fields.len() == 1 {
        return gen_file_one(ir, fid, lid);
    }
    let pk = ir.pickle(pid);

    // The layout: pickle fields, then the repeated records (last).
    let mut fields = Vec::new();
    let mut records = None;
    for (i, f) in layout.fields.iter().enumerate() {
        let name = &f.name;
        if let Some(Codec::Pickle(_)) = f.codec {
            let env = CheckEnv {
                layout: lid,
                field: FieldId(i as u32),
                fid,
                ty: f.ty.clone(),
            };
            let lower = Lower { ir, env: &env };
            let tests = f
                .checks
                .iter()
                .map(|c| Ok(lower.expr(c)?.scalar()))
                .collect::<R<Vec<_>>>()?;
            let texts: Vec<&str> = f.checks.iter().map(|c| ir.text(fid, c.span)).collect();
            fields.push(if tests.is_empty() {
                quote!(rt::pickle::Field::new(#name))
            } else {
                let text = texts.join(" && ");
                quote!(rt::pickle::Field::checked(#name, |v| #(#tests)&&*, #text))
            });
            continue;
        }
        let (Type::Layout(rl), Some(Repeat::Count(count))) = (&f.item_ty, &f.repeat) else {
            unreachable!(
                "checker rule file_pickle: a file of pickles is its pickles, then counted records"
            );
        };
        let keys = match &count.kind {
            ExprKind::Call {
                func: Builtin::Len,
                args,
            } => args.first().and_then(|a| a.value.field_of()),
            _ => None,
        };
        let Some((_, keys)) = keys else {
            unreachable!("checker rule file_pickle: records are counted by `len(<pickle field>)`");
        };
        records = Some((FieldId(i as u32), *rl, keys));
    }
    let Some((rfield, rlid, keys)) = records else {
        unreachable!("checker rule file_pickle: a file of pickles ends with counted records");
    };
    let rlayout = ir.layout(rlid);
    // A record is integers, then its sized payload, last (checker rule file_pickle).
    let (payload_field, ints) = rlayout
        .fields
        .split_last()
        .expect("checker rule file_pickle: a record ends with its payload");
    let payload = FieldId(ints.len() as u32);

    // The key of the storage `data` names, and the call's argument holding the persistent
    // id it is an item of (`t.storage.key`: `storage`).
    let persistent_arg = Cell::new(String::new());
    let locate = super::locator(|e: &Expr| {
        let ExprKind::Index { base, index, .. } = &e.kind else {
            return None;
        };
        let ExprKind::Member {
            base: records_of,
            member: Member::Field(_, p),
        } = &base.kind
        else {
            return None;
        };
        if *p != payload || records_of.field_of() != Some((lid, rfield)) {
            return None;
        }
        let ExprKind::Call {
            func: Builtin::IndexOf,
            args,
        } = &index.kind
        else {
            return None;
        };
        let [list, key] = args.as_slice() else {
            return None;
        };
        if list.value.field_of() != Some((lid, keys)) {
            return None;
        }
        if let ExprKind::Member {
            base,
            member: Member::PickleAttr(_),
        } = &key.value.kind
        {
            if let ExprKind::Member {
                member: Member::PickleParam(p),
                ..
            } = &base.kind
            {
                persistent_arg.set(p.clone());
            }
        }
        Some((0, &key.value))
    });
    let locate: &Locate<'_> = &locate;
    let mf = format_ident!("{}_tensor", snake(&layout.name));
    let doc = format!(
        " The tensor that a `{kind}` call builds (`{}` at `path`): the mapping `tensor from {}`.",
        map.binding,
        ir.text(fid, map.source.span),
    );
    let mapping = gen_map_fn(ir, fid, map, &[], (&mf, &doc), false, locate)?;
    let persistent_arg = persistent_arg.take();
    let mut placed_kinds = Vec::new();
    let mut placed_fns = Vec::new();
    for &pm in fmt.mappings.iter().filter(|&&x| placed(ir.mapping(x))) {
        let pmap = ir.mapping(pm);
        let ExprKind::Member {
            member: Member::PickleObjects(pp, pkind),
            ..
        } = &pmap.source.kind
        else {
            unreachable!("checker rule file_pickle: a mapping iterates the objects of the pickle");
        };
        let f = format_ident!("{}_{}", snake(&layout.name), pkind);
        let is_kind = format_ident!("is_{}_{}", ir.pickle(*pp).name.to_lowercase(), pkind);
        placed_fns.push(gen_place_fn(ir, fid, pmap, &f, pkind)?);
        placed_kinds.push(quote!((#is_kind, #f)));
    }

    // The record reader.
    let rname = &layout.fields[rfield.index()].name;
    let dtype_used = Cell::new(false);
    let mut env = RecordEnv {
        layout: rlid,
        fid,
        known: Vec::new(),
        dtype: &dtype_used,
    };
    let mut rsteps = Vec::new();
    let mut agrees = false;
    for (i, f) in ints.iter().enumerate() {
        let fname = &f.name;
        let path = format!("{rname}.{fname}");
        let Type::Int(it) = &f.ty else {
            unreachable!(
                "checker rule file_pickle: a record's fields before its payload are integers"
            );
        };
        let var = rec_var(fname);
        let m = match (it.bytes.unwrap_or(8), it.signed) {
            (1, s) => format_ident!("{}8", if s { "i" } else { "u" }),
            (b, s) => {
                let e = match it.endian.unwrap_or(rlayout.endian) {
                    ir::ByteOrder::Big => "be",
                    ir::ByteOrder::Little => "le",
                };
                format_ident!("{}{}_{}", if s { "i" } else { "u" }, b as u32 * 8, e)
            }
        };
        rsteps.push(quote!(let #var = c.#m(#path)?;));
        env.known
            .push((FieldId(i as u32), var.clone(), f.ty.clone()));
        for ch in &f.checks {
            let fails = Lower { ir, env: &env }.negated(ch)?;
            let msg = format!("check failed: {}", ir.text(fid, ch.span));
            rsteps.push(quote! {
                if #fails {
                    return Err(c.error(#path, rt::ErrorKind::Invalid(#msg.to_string())));
                }
            });
        }
        // Agreement with the persistent ids' item of the same name.
        let item = pk
            .persistent
            .as_ref()
            .and_then(|(_, items)| items.iter().position(|p| p == fname));
        if let (Some(i), false) = (item, persistent_arg.is_empty()) {
            let i = Literal::usize_unsuffixed(i);
            rsteps.push(quote!(r.agrees(c, #path, #fname, #i, i128::from(#var))?;));
            agrees = true;
        }
    }
    // The payload, sized.
    let path = format!("{rname}.{}", payload_field.name);
    let size = payload_field
        .size
        .as_ref()
        .expect("checker rule file_pickle: a record's payload is sized");
    let s = Lower { ir, env: &env }.expr(size)?.scalar();
    let what = format!("the size of `{path}`");
    rsteps.push(quote!(let size = rt::expr::to_u64(#s, #what)?;));
    let range = quote!(c.span(#path, size));
    let uses_r = dtype_used.get() || agrees;
    let r = if uses_r { quote!(r) } else { quote!(_r) };

    let position = |f: FieldId| Literal::usize_unsuffixed(f.index());
    let (object_at, keys_at) = (position(object), position(keys));
    let rules = format_ident!("{}_rules", pk.name.to_lowercase());
    let is_kind = format_ident!("is_{}_{}", pk.name.to_lowercase(), kind);
    let rf = format_ident!("{}", snake(&rlayout.name));
    let rdoc = format!(
        " One `{}` of `{rname}`: the byte range of its `{}`, `r.dtype` being the dtype of the tensors whose bytes it holds.",
        rlayout.name,
        payload_field.name
    );
    let fdoc = format!(
        " The `{}` layout: its pickles, read back to back, then the `{rname}` records, and the tensor mapping.",
        layout.name
    );
    let read_only = match fmt.uses.first() {
        Some(&o) => format!(
            "{public} is read-only; write {} instead",
            ir.format(o).public_name
        ),
        None => format!("{public} is read-only"),
    };
    let entry_points = super::index_and_structure(
        " Lists the tensors of `src` without reading their bytes: reads the pickles, maps\n every object of the mapped kind, then sizes each record by the tensors using it.",
        "the pickled object",
    );
    let desc = crate::engine::read_only_desc(&read_only, true);
    let mapping = mapping.ts;
    Ok(quote! {
        #[doc = #fdoc]
        pub const FILE: rt::pickle::FileSpec = rt::pickle::FileSpec {
            fields: &[#(#fields),*],
            object: #object_at,
            keys: #keys_at,
            records: #rname,
            persistent: #persistent_arg,
            rules: #rules,
            is_target: #is_kind,
            placed: &[#(#placed_kinds),*],
            map: #mf,
            record: #rf,
        };

        #entry_points {
            rt::pickle::read_file(src, limits, &FILE, with_structure)
        }

        #mapping

        #(#placed_fns)*

        #[doc = #rdoc]
        fn #rf(c: &mut rt::Cursor<'_>, #r: &rt::pickle::Record<'_>) -> rt::Result<(u64, u64)> {
            #(#rsteps)*
            #range
        }

        #desc
    })
}

/// `FILE` (an `rt::pickle::OneSpec`), `index` and one mapping function per tensor
/// mapping of a `file` that is one pickle holding its arrays' bytes (`layout File {
/// object: bytes codec pickle(P); }`): each call of a mapped kind becomes a dense tensor
/// whose `data`, a pickled byte string, is located in the file by `rt::pickle::data`.
fn gen_file_one(ir: &Ir, fid: FormatId, lid: LayoutId) -> R<TokenStream> {
    let fmt = ir.format(fid);
    let field = &ir.layout(lid).fields[0];
    let Some(Codec::Pickle(pid)) = field.codec else {
        unreachable!(
            "checker rule file_pickle: the field of a file that is one pickle is a pickle"
        );
    };
    let pk = ir.pickle(pid);
    let lower_name = pk.name.to_lowercase();
    let mut kinds = Vec::new();
    let mut fns = Vec::new();
    let mut fn_names = Vec::new();
    for (j, &m) in fmt.mappings.iter().enumerate() {
        let map = ir.mapping(m);
        let ExprKind::Member {
            member: Member::PickleObjects(_, kind),
            ..
        } = &map.source.kind
        else {
            unreachable!("checker rule file_pickle: a mapping iterates the objects of the pickle");
        };
        let f = match j {
            0 => format_ident!("{}_{}", snake(&ir.layout(lid).name), kind),
            _ => format_ident!("{}_{}_{}", snake(&ir.layout(lid).name), kind, j),
        };
        let is_kind = format_ident!("is_{}_{}", lower_name, kind);
        kinds.push(quote!((#is_kind, #f)));
        fns.push(gen_place_fn(ir, fid, map, &f, kind)?);
        fn_names.push(f);
    }
    let name = &field.name;
    let rules = format_ident!("{}_rules", lower_name);
    let fdoc = format!(
        " The `{}` layout: one pickle, `{name}`, holding its arrays' bytes, and the calls mapped to tensors.",
        ir.layout(lid).name
    );
    let index_doc = " Lists the tensors of `src` without reading their bytes: reads the pickle (its byte\n strings left in the file), then maps every object of the mapped kinds.";
    let sdoc = " The object tree of the pickled object, its tensors named as [`index`] names them.";
    let written = fmt.mappings.iter().enumerate().find_map(|(j, &m)| {
        let w = ir.mapping(m).write.as_ref()?;
        Some((j, m, w))
    });
    let writer = match written {
        _ if fmt.read_only => {
            crate::engine::read_only_desc(&format!("{} is read-only", fmt.public_name), true)
        }
        Some((j, m, w)) => {
            gen_one_writer(ir, fid, pid, m, w, &format_ident!("{}_object", fn_names[j]))?
        }
        None => {
            let no_write = format!(
                "writing {} files is not supported (no tensor mapping has a `write` rule)",
                fmt.public_name
            );
            crate::engine::read_only_desc(&no_write, true)
        }
    };
    Ok(quote! {
        #[doc = #fdoc]
        pub const FILE: rt::pickle::OneSpec = rt::pickle::OneSpec {
            field: #name,
            rules: #rules,
            kinds: &[#(#kinds),*],
        };

        #[doc = #index_doc]
        pub fn index(src: &rt::Source, limits: &rt::Limits) -> rt::Result<::std::vec::Vec<rt::TensorInfo>> {
            Ok(rt::pickle::read_one(src, limits, &FILE, false)?.0)
        }

        #[doc = #sdoc]
        pub fn structure(src: &rt::Source, limits: &rt::Limits) -> rt::Result<::std::option::Option<rt::Node>> {
            Ok(rt::pickle::read_one(src, limits, &FILE, true)?.1)
        }

        #(#fns)*

        #writer
    })
}

/// The writer of a file that is one pickle: the runtime's `rt::pickle::ArraysWriter`
/// (each array's bytes spooled as they come, pickled in a dict by name or the structure
/// given at `finish`) around the `write` rule of mapping `m`, generated as the function
/// `object_fn` that builds each array's object around the stream of its bytes (a
/// `Value::Stream`).
fn gen_one_writer(
    ir: &Ir,
    fid: FormatId,
    pid: ir::PickleId,
    m: ir::MappingId,
    write: &Expr,
    object_fn: &proc_macro2::Ident,
) -> R<TokenStream> {
    let public = &ir.format(fid).public_name;
    let env = super::WriteEnv {
        ir,
        fid,
        pickle: pid,
        texts: &[],
        uses_texts: Cell::new(false),
        uses_byte_order: Cell::new(false),
        one_pickle: true,
    };
    let body = super::returned(Lower { ir, env: &env }.pickle_value(write)?);
    let bo = if env.uses_byte_order.get() {
        quote!(byte_order)
    } else {
        quote!(_byte_order)
    };
    let map = ir.mapping(m);
    let wdoc = format!(
        " Streaming writer of `{public}` files: each array's object is [`{object_fn}`], its bytes spooled as they come; `finish` pickles the arrays (a dict by name, or the structure given) with their bytes."
    );
    let odoc = format!(
        " The object of the array `meta`, its bytes the byte string `data` in `byte_order` (the `write` rule of `tensor from {}`).",
        ir.text(fid, map.source.span)
    );
    let desc = crate::engine::desc_around(
        quote!(Ok(::std::boxed::Box::new(Writer::new(w, NAME, options, #object_fn)?))),
        " This format for the registry: name, extensions, detector, indexer and writer.",
        true,
    );
    Ok(quote! {
        #[doc = #wdoc]
        pub type Writer<W> = rt::pickle::ArraysWriter<W>;

        #[doc = #odoc]
        pub fn #object_fn(meta: &rt::TensorMeta, data: &rt::pickle::Value, #bo: rt::ByteOrder) -> rt::Result<rt::pickle::Value> {
            #body
        }

        #desc
    })
}

/// The mapping function `name` of `map` over the `kind` calls of a pickle holding their
/// bytes (a file that is one pickle, or a zip's pickle member): `fn <name>(path,
/// <binding>, base) -> rt::Result<rt::TensorInfo>`, `base` the pickle's offset in the
/// file.
pub(super) fn gen_place_fn(
    ir: &Ir,
    fid: FormatId,
    map: &ir::Mapping,
    name: &proc_macro2::Ident,
    kind: &str,
) -> R<TokenStream> {
    let env = super::MapEnv {
        fid,
        binding: map,
        texts: &[],
        uses_texts: Cell::new(false),
        uses_path: Cell::new(false),
        dtype: Cell::new(false),
    };
    let lower = Lower { ir, env: &env };
    let need = |k: ir::TensorKey| {
        map.key(k).unwrap_or_else(|| {
            unreachable!(
                "checker rules: a mapping over pickled objects sets `{}` itself",
                k.name()
            )
        })
    };
    let name_e = need(ir::TensorKey::Name);
    let name_v = lower.expr(name_e)?;
    let name_ts = match name_v.ty {
        Type::Pickled(_) => {
            let (x, what) = (&name_v.ts, lower.text(name_e));
            quote!(rt::pickle::name(#x, #what)?.into_owned())
        }
        _ => name_v.owned_string(),
    };
    let dtype_ts = lower.expr(need(ir::TensorKey::Dtype))?.scalar();
    env.dtype.set(true);
    let shape_ts = super::int_list(&lower, need(ir::TensorKey::Shape), true)?;
    let order_ts = match map.key(ir::TensorKey::Order) {
        Some(o) => lower.expr(o)?.scalar(),
        None => quote!(rt::Order::C),
    };
    let bo_ts = match map.key(ir::TensorKey::ByteOrder) {
        Some(b) => lower.expr(b)?.scalar(),
        None => quote!(dtype.1.unwrap_or(rt::ByteOrder::Little)),
    };
    let data_e = need(ir::TensorKey::Data);
    let data_v = lower.expr(data_e)?.ts;
    let data_what = lower.text(data_e);
    let b = crate::model::binding_ident(&map.binding);
    let path = if env.uses_path.get() {
        quote!(path)
    } else {
        quote!(_path)
    };
    let doc = format!(
        " The tensor that a `{kind}` call builds (`{}` at `path`, the pickle at `base`): the mapping `tensor from {}`.",
        map.binding,
        ir.text(fid, map.source.span),
    );
    Ok(quote! {
        #[doc = #doc]
        fn #name(#path: &str, #b: &rt::pickle::Object, base: u64) -> rt::Result<rt::TensorInfo> {
            let dtype: (rt::DType, ::std::option::Option<rt::ByteOrder>) = #dtype_ts;
            let data = rt::pickle::data(#data_v, base, #data_what)?;
            rt::TensorInfo::dense(#name_ts, dtype.0, #shape_ts, #order_ts, #bo_ts, data)
        }
    })
}
