//! Pickle declarations and the `zip` engine around pickled objects, from the IR.
//!
//! `pickle P { ... }` compiles into an `rt::pickle::Rules` constructor and one
//! `is_<p>_<kind>` predicate per call kind. A `zip` format with an entry of `codec
//! pickle(P)` gets its entries as data (`ENTRIES`, read by `rt::zip::Archive`), one
//! mapping function per tensor mapping (`fn pickle_tensor(path, t, ..) ->
//! rt::pickle::Mapped`: the mapping's expressions lowered by [`crate::lower`] over the
//! call's arguments `t.size`, `t.storage.key`, the text entries' contents
//! `byteorder.content`, tables and the storage lookup `storage(key = ..)`), and an
//! `index` that hands them to the runtime's loop (`rt::pickle::Index`). Its writer keeps
//! the storages and the root object in `rt::pickle::Objects` and the members in
//! `rt::zip::ArchiveWriter`; what is generated is the `write` rule (`tensor_object`),
//! lowered as a pickled value.

use std::cell::Cell;

use proc_macro2::{Literal, TokenStream};
use quote::{format_ident, quote};
use tensorfmt_schema::ir::{
    self, Builtin, Codec, Compression, Const, Content, EntryId, Expr, ExprKind, FormatId,
    GlobalKind, IntTy, Ir, Mapping, Member, PickleId, TensorKey, Type, WriteVar,
};

use crate::lower::{Env, Lower, Unlowered, Val};

mod file;
pub(crate) use file::{gen_file_pickle, is_pickle_file};

type R<T> = Result<T, Unlowered>;

/// `<name>_rules()` and `is_<name>_<kind>(o)` for every call kind of pickle `p`.
pub(crate) fn gen_pickle(ir: &Ir, p: PickleId) -> TokenStream {
    let pk = ir.pickle(p);
    let mut allow = Vec::new();
    let mut kinds: Vec<(&str, Vec<(&str, &str)>)> = Vec::new();
    for g in &pk.globals {
        let path = &g.path;
        let (module, name) = path.rsplit_once('.').unwrap_or(("", path));
        let k = match &g.kind {
            GlobalKind::Dict => quote!(rt::pickle::Kind::Dict),
            GlobalKind::List => quote!(rt::pickle::Kind::List),
            GlobalKind::Set => quote!(rt::pickle::Kind::Set),
            GlobalKind::Tuple => quote!(rt::pickle::Kind::Tuple),
            GlobalKind::Class => quote!(rt::pickle::Kind::Class),
            GlobalKind::Object => quote!(rt::pickle::Kind::Object),
            GlobalKind::Apply { params } => {
                let at = |n: &str| params.iter().position(|p| p == n).unwrap_or(0);
                let (func, args) = (at("func"), at("args"));
                quote!(rt::pickle::Kind::Apply { func: #func, args: #args })
            }
            GlobalKind::Call { kind, params } => {
                match kinds.iter_mut().find(|(k, _)| k == kind) {
                    Some((_, gs)) => gs.push((module, name)),
                    None => kinds.push((kind, vec![(module, name)])),
                }
                allow.push(quote!(.allow_call(#path, &[#(#params),*])));
                continue;
            }
        };
        // `"module.*"`: every global of the module and its submodules.
        allow.push(if g.wildcard {
            quote!(.allow_module(#module, #k))
        } else {
            quote!(.allow_path(#path, #k))
        });
    }
    let persistent = pk.persistent.is_some();
    let persistent_rule = match &pk.persistent {
        Some((kind, items)) => {
            let items = items.join(", ");
            quote!(.persistent_form(#kind, #items))
        }
        None => quote!(.persistent_ids(false)),
    };
    // 0 to 5 is the rules' default.
    let protocols = pk
        .protocol
        .filter(|&v| v < 5)
        .map(|v| quote!(.protocols(0..=#v)));
    let codecs = pk.codecs_encode.then(|| quote!(.allow_codecs_encode()));
    let ranges = pk.byte_ranges.then(|| quote!(.byte_ranges(true)));
    let lower = pk.name.to_lowercase();
    let f = format_ident!("{}_rules", lower);
    let doc = format!(
        " What a `{}` pickle may contain: the declared globals, {}persistent ids{} (built once).",
        pk.name,
        if persistent { "" } else { "no " },
        pk.protocol
            .map(|v| format!(", protocols 0 to {v}"))
            .unwrap_or_default()
    );
    let preds = kinds.iter().map(|(k, globals)| {
        let f = format_ident!("is_{}_{}", lower, k);
        let pats = globals.iter().map(|(m, n)| quote!((#m, #n)));
        let doc = format!(" True when `o` is a call that builds a `{k}`.");
        quote! {
            #[doc = #doc]
            pub fn #f(o: &rt::pickle::Object) -> bool {
                matches!((&*o.global.module, &*o.global.name), #(#pats)|*)
            }
        }
    });
    quote! {
        #[doc = #doc]
        pub fn #f() -> &'static rt::pickle::Rules {
            static RULES: ::std::sync::OnceLock<rt::pickle::Rules> = ::std::sync::OnceLock::new();
            RULES.get_or_init(|| {
                rt::pickle::Rules::new()
                    #(#allow)*
                    #persistent_rule
                    #protocols
                    #codecs
                    #ranges
            })
        }
        #(#preds)*
    }
}

/// The pickle declaration an entry's content is decoded with.
fn entry_pickle(ir: &Ir, e: EntryId) -> Option<PickleId> {
    match ir.entry(e).content {
        Content::Codec(Codec::Pickle(p)) => Some(p),
        _ => None,
    }
}

/// True when format `fid` is a zip archive with an entry decoded by the pickle codec.
pub(crate) fn is_pickle_zip(ir: &Ir, fid: FormatId) -> bool {
    let f = ir.format(fid);
    f.engine == ir::Engine::Zip && f.entries.iter().any(|&e| entry_pickle(ir, e).is_some())
}

/// A text entry whose content expressions read: its position in `ENTRIES` (its content
/// is `texts[position]`) and whether it may be absent.
#[derive(Clone, Copy)]
struct Text {
    id: EntryId,
    position: usize,
    optional: bool,
}

/// The content of a text entry, from the archive's `texts`.
fn text_content(texts: &[Text], e: EntryId, used: &Cell<bool>) -> Option<Val> {
    let t = texts.iter().find(|t| t.id == e)?;
    used.set(true);
    let i = Literal::usize_unsuffixed(t.position);
    Some(if t.optional {
        Val::opt(quote!(texts[#i].as_deref()), Type::Str)
    } else {
        Val::value(quote!(texts[#i].as_deref().unwrap_or_default()), Type::Str)
    })
}

/// Names in reach in a mapping over the calls of a pickle: the call (`t`), its path,
/// the text entries, and `dtype` once it is computed.
struct MapEnv<'a> {
    fid: FormatId,
    binding: &'a Mapping,
    texts: &'a [Text],
    uses_texts: Cell<bool>,
    uses_path: Cell<bool>,
    dtype: Cell<bool>,
}

impl Env for MapEnv<'_> {
    fn field(&self, _l: ir::LayoutId, _f: ir::FieldId) -> Option<Val> {
        None
    }
    fn binding(&self) -> Option<Val> {
        let b = crate::model::binding_ident(&self.binding.binding);
        Some(Val::value(quote!(#b), self.binding.binding_ty.clone()))
    }
    fn tensor_key(&self, k: TensorKey) -> Option<Val> {
        (k == TensorKey::Dtype && self.dtype.get()).then(|| Val::value(quote!(dtype), Type::Dtype))
    }
    fn format(&self) -> Option<FormatId> {
        Some(self.fid)
    }
    fn entry_content(&self, e: EntryId) -> Option<Val> {
        text_content(self.texts, e, &self.uses_texts)
    }
    fn pickle_path(&self) -> Option<Val> {
        self.uses_path.set(true);
        Some(Val::value(quote!(path), Type::Str))
    }
}

/// Where a mapping's `data` names a storage: the position of the storages' entry among
/// the container's, and the expression of the storage's key.
type Locate<'a> = dyn for<'e> Fn(&'e Expr) -> Option<(usize, &'e Expr)> + 'a;

/// `f` as a [`Locate`] (a closure's signature, for the borrow checker).
fn locator<F: for<'e> Fn(&'e Expr) -> Option<(usize, &'e Expr)>>(f: F) -> F {
    f
}

/// A generated mapping function: `fn <name><'v>(path: &str, <binding>: &'v
/// rt::pickle::Object[, texts]) -> rt::Result<rt::pickle::Mapped<'v>>`.
struct MapFn {
    ts: TokenStream,
    /// Whether it takes the text entries' contents.
    texts: bool,
    /// The storage function, when one was asked for: `fn <name>_storage<'v>(<binding>,
    /// dtype) -> rt::Result<rt::StorageRef<'v>>`.
    storage: Option<proc_macro2::Ident>,
    /// Whether the mapping's `data` reads the text entries.
    data_texts: bool,
    /// The position of the storages' entry the mapping's `data` names.
    entry: usize,
}

/// A list of integers of a mapping (`shape`, `strides`) as a `Vec<u64>` (`unsigned`) or
/// `Vec<i64>`.
fn int_list(lower: &Lower<'_>, e: &Expr, unsigned: bool) -> R<TokenStream> {
    let v = lower.expr(e)?;
    let what = lower.text(e);
    Ok(match (&v.ty, &e.kind) {
        (Type::Pickled(_), _) => {
            let x = &v.ts;
            if unsigned {
                quote!(rt::pickle::dims(#x, #what)?)
            } else {
                quote!(rt::pickle::ints(#x, #what)?)
            }
        }
        (_, ExprKind::List(items)) => {
            let items = items
                .iter()
                .map(|i| {
                    let x = lower.int_of(&lower.expr(i)?, i);
                    Ok(if unsigned {
                        quote!(rt::expr::to_u64(#x, "a dimension")?)
                    } else {
                        quote!(rt::expr::narrow::<i64>(#x, "i64")?)
                    })
                })
                .collect::<R<Vec<_>>>()?;
            quote!(vec![#(#items),*])
        }
        (Type::List(_) | Type::Tuple(_), _) if unsigned => {
            let l = v.by_ref();
            quote!(rt::expr::dims(#l)?)
        }
        (Type::List(_) | Type::Tuple(_), _) => {
            let l = v.by_ref();
            quote! {
                #l.iter().map(|&d| rt::expr::narrow::<i64>(i128::from(d), "i64")).collect::<rt::Result<_>>()?
            }
        }
        _ => unreachable!(
            "checker rule pickle_mapping: `shape` and `strides` are lists of integers, got `{what}`"
        ),
    })
}

/// A storage a mapping's `data` names: the position of its entry, its key (a
/// `Cow<str>` expression) and the offset of the tensor's first byte in it (an `i128`
/// expression and its text, `None` for 0).
type StorageRef = (usize, TokenStream, Option<(TokenStream, String)>);

/// The storage `e` names and the offset of the tensor's first byte in it (an `i128`
/// expression and its text, `None` for 0): a storage (`storage(key = k)`), or
/// `slice(x, start, none)` of one.
fn storage_ref(lower: &Lower<'_>, e: &Expr, locate: &Locate<'_>) -> R<StorageRef> {
    if let ExprKind::Call {
        func: Builtin::Slice,
        args,
    } = &e.kind
    {
        if let [d, start, rest @ ..] = args.as_slice() {
            if rest
                .iter()
                .all(|a| matches!(a.value.kind, ExprKind::Const(Const::None)))
            {
                let (entry, key, skip) = storage_ref(lower, &d.value, locate)?;
                let s = lower.expr(&start.value)?;
                let s = lower.int_of(&s, &start.value);
                let skip = match skip {
                    None => s,
                    Some((k, _)) => quote!(rt::expr::add(#k, #s)?),
                };
                return Ok((entry, key, Some((skip, lower.text(&start.value)))));
            }
        }
    }
    let Some((entry, key)) = locate(e) else {
        unreachable!(
            "checker rule pickle_mapping: the `data` of a pickled tensor is a storage, or a slice of one to its end"
        );
    };
    let k = lower.expr(key)?;
    let ts = &k.ts;
    let key = match (&k.ty, k.form) {
        (Type::Pickled(_), _) => {
            let what = lower.text(key);
            quote!(rt::pickle::name(#ts, #what)?)
        }
        (_, crate::lower::Form::Owned) => quote!(::std::borrow::Cow::Owned(#ts)),
        (Type::Int(_), _) => {
            let s = k.scalar();
            quote!(::std::borrow::Cow::Owned(#s.to_string()))
        }
        _ => {
            let s = k.scalar();
            quote!(::std::borrow::Cow::Borrowed(#s))
        }
    };
    Ok((entry, key, None))
}

/// The mapping function `name` of `map` (documented `doc`); with `storage_fn`, the
/// mapping's `data` is a function of its own (the writer reads it back).
fn gen_map_fn(
    ir: &Ir,
    fid: FormatId,
    map: &Mapping,
    texts: &[Text],
    (name, doc): (&proc_macro2::Ident, &str),
    storage_fn: bool,
    locate: &Locate<'_>,
) -> R<MapFn> {
    let env = MapEnv {
        fid,
        binding: map,
        texts,
        uses_texts: Cell::new(false),
        uses_path: Cell::new(false),
        dtype: Cell::new(false),
    };
    let lower = Lower { ir, env: &env };
    // The checker's mapping rules: every mapping sets these or takes them by `include`,
    // and a mapping over pickled objects has no `include` (rule pickle_mapping).
    let need = |k: TensorKey| {
        map.key(k).unwrap_or_else(|| {
            unreachable!(
                "checker rules: a mapping over pickled objects sets `{}` itself",
                k.name()
            )
        })
    };
    let name_e = need(TensorKey::Name);
    let name_v = lower.expr(name_e)?;
    let name_ts = match name_v.ty {
        Type::Pickled(_) => {
            let (x, what) = (&name_v.ts, lower.text(name_e));
            quote!(rt::pickle::name(#x, #what)?.into_owned())
        }
        _ => name_v.owned_string(),
    };
    let dtype_ts = lower.expr(need(TensorKey::Dtype))?.scalar();
    env.dtype.set(true);
    let shape_ts = int_list(&lower, need(TensorKey::Shape), true)?;
    let strides = map
        .key(TensorKey::Strides)
        .map(|s| int_list(&lower, s, false))
        .transpose()?;
    let bo_ts = match map.key(TensorKey::ByteOrder) {
        Some(b) => lower.expr(b)?.scalar(),
        None => quote!(dtype.1.unwrap_or(rt::ByteOrder::Little)),
    };
    let texts_before_data = env.uses_texts.replace(false);
    let data = need(TensorKey::Data);
    let (entry, key, skip) = storage_ref(&lower, data, locate)?;
    let data_texts = env.uses_texts.get();
    let skip = match skip {
        Some((s, what)) => quote!(rt::expr::to_u64(#s, #what)?),
        None => quote!(0),
    };
    let e = Literal::usize_unsuffixed(entry);
    let data_ts = quote!(rt::StorageRef { entry: #e, key: #key, skip: #skip });
    let (shape_field, strides_field, shape_let) = match strides {
        Some(ts) => (quote!(shape: #shape_ts,), quote!(strides: #ts,), quote!()),
        None => (
            quote!(shape,),
            quote!(strides: rt::contiguous_strides(&shape, rt::Order::C)?,),
            quote!(let shape: ::std::vec::Vec<u64> = #shape_ts;),
        ),
    };
    let b = crate::model::binding_ident(&map.binding);
    let (storage, storage_ts, storage_item) = if storage_fn {
        let f = format_ident!("{}_storage", name);
        let dparam = if data_ts.to_string().contains("dtype") {
            quote!(dtype)
        } else {
            quote!(_dtype)
        };
        let sdoc = format!(
            " Where the bytes of the tensor that `{}` builds start (the mapping's `data`), the tensor's dtype being `dtype`.",
            map.binding
        );
        let item = quote! {
            #[doc = #sdoc]
            fn #f<'v>(#b: &'v rt::pickle::Object, #dparam: (rt::DType, ::std::option::Option<rt::ByteOrder>)) -> rt::Result<rt::StorageRef<'v>> {
                Ok(#data_ts)
            }
        };
        (Some(f.clone()), quote!(#f(#b, dtype)?), item)
    } else {
        (None, data_ts, quote!())
    };
    let texts_used = texts_before_data || data_texts;
    let texts_param =
        texts_used.then(|| quote!(, texts: &[::std::option::Option<::std::string::String>]));
    let path = if env.uses_path.get() {
        quote!(path)
    } else {
        quote!(_path)
    };
    Ok(MapFn {
        ts: quote! {
            #[doc = #doc]
            fn #name<'v>(#path: &str, #b: &'v rt::pickle::Object #texts_param) -> rt::Result<rt::pickle::Mapped<'v>> {
                let dtype: (rt::DType, ::std::option::Option<rt::ByteOrder>) = #dtype_ts;
                #shape_let
                Ok(rt::pickle::Mapped {
                    name: #name_ts,
                    dtype: dtype.0,
                    #strides_field
                    #shape_field
                    byte_order: #bo_ts,
                    storage: #storage_ts,
                })
            }

            #storage_item
        },
        texts: texts_used,
        storage,
        data_texts,
        entry,
    })
}

/// The pickle entry and call kind a mapping iterates (`pickle.content.tensors`).
fn mapped_objects(source: &Expr) -> Option<(EntryId, PickleId, &str)> {
    let ExprKind::Member {
        base,
        member: Member::PickleObjects(p, kind),
    } = &source.kind
    else {
        return None;
    };
    match &base.kind {
        ExprKind::Member {
            member: Member::EntryContent(e),
            ..
        } => Some((*e, *p, kind)),
        _ => None,
    }
}

/// `index` and `structure`, both over the generated `read_index(src, limits,
/// with_structure)`; `index_doc` documents `index`, `of` names what the tree is of.
pub(crate) fn index_and_structure(index_doc: &str, of: &str) -> TokenStream {
    let sdoc = format!(" The object tree of {of}, its tensors named as [`index`] names them.");
    let rdoc = format!(" The tensors, and with `with_structure` the object tree of {of}.");
    quote! {
        #[doc = #index_doc]
        pub fn index(src: &rt::Source, limits: &rt::Limits) -> rt::Result<::std::vec::Vec<rt::TensorInfo>> {
            Ok(read_index(src, limits, false)?.0)
        }

        #[doc = #sdoc]
        pub fn structure(src: &rt::Source, limits: &rt::Limits) -> rt::Result<::std::option::Option<rt::Node>> {
            Ok(read_index(src, limits, true)?.1)
        }

        #[doc = #rdoc]
        fn read_index(
            src: &rt::Source,
            limits: &rt::Limits,
            with_structure: bool,
        ) -> rt::Result<(::std::vec::Vec<rt::TensorInfo>, ::std::option::Option<rt::Node>)>
    }
}

/// An entry's `align` on write, when it is not 1.
pub(crate) fn entry_align(e: &ir::Entry) -> Option<Literal> {
    // The checker allows literals in 1..=65535 alone.
    match e.align.as_ref().map(|a| &a.kind) {
        Some(ExprKind::Const(Const::Int(n))) if *n > 1 => {
            u16::try_from(*n).ok().map(Literal::u16_unsuffixed)
        }
        _ => None,
    }
}

/// `rt::Compression::Stored`, ...
pub(crate) fn compression(c: Compression) -> TokenStream {
    match c {
        Compression::Stored => quote!(rt::Compression::Stored),
        Compression::Deflate => quote!(rt::Compression::Deflate),
    }
}

/// The `rt::zip::Entry` of an entry of a zip around a pickle: `kind` is its constructor
/// call.
fn entry_const(e: &ir::Entry, kind: TokenStream) -> TokenStream {
    let mut ts = kind;
    if e.optional {
        ts = quote!(#ts.optional());
    }
    if !e.compression.is_empty() {
        let ms = e.compression.iter().map(|c| compression(*c));
        ts = quote!(#ts.methods(&[#(#ms),*]));
    }
    if let Some(align) = entry_align(e) {
        ts = quote!(#ts.align(#align));
    }
    ts
}

/// The `rt::zip::Entry` of a text entry: its preferred name, the values its `check`
/// allows (`check name in ["a", "b"];`) and its written content.
fn text_const(e: &ir::Entry) -> TokenStream {
    let (name, pat) = (&e.name, &e.pattern.text);
    let mut ts = entry_const(e, quote!(rt::zip::Entry::text(#name, #pat)));
    if let Some(p) = &e.preferred {
        let p = &p.text;
        ts = quote!(#ts.preferred(#p));
    }
    if let Some(c) = &e.check {
        let values = match &c.kind {
            ExprKind::In { list, .. } => list
                .iter()
                .map(|i| match &i.kind {
                    ExprKind::Const(Const::Str(s)) => Some(s.clone()),
                    _ => None,
                })
                .collect::<Option<Vec<_>>>(),
            _ => None,
        };
        let Some(values) = values else {
            unreachable!(
                "checker rule text_entry: a text entry's `check` lists the strings it allows"
            );
        };
        ts = quote!(#ts.one_of(&[#(#values),*]));
    }
    match e.write.as_ref().map(|w| (w, &w.kind)) {
        Some((_, ExprKind::Const(Const::Str(s)))) => ts = quote!(#ts.written(#s)),
        Some(_) => unreachable!("checker rule text_entry: a text entry's `write` is a string"),
        None => {}
    }
    ts
}

/// The entries of a zip around pickles in `ENTRIES` order: the first pickle entry (whose
/// captures name the others), then the others in schema order.
fn entry_order(ir: &Ir, fid: FormatId) -> Vec<EntryId> {
    let all = &ir.format(fid).entries;
    let first = all.iter().copied().find(|&e| entry_pickle(ir, e).is_some());
    first
        .into_iter()
        .chain(all.iter().copied().filter(|&e| Some(e) != first))
        .collect()
}

/// `ENTRIES`, `index`, the mapping functions and the writer of a zip format around pickles.
pub(crate) fn gen_zip_pickle(ir: &Ir, fid: FormatId) -> R<TokenStream> {
    let fmt = ir.format(fid);
    let order = entry_order(ir, fid);
    let pentry = ir.entry(order[0]);
    let mut texts = Vec::new();
    let mut consts = Vec::new();
    for (i, &id) in order.iter().enumerate() {
        let e = ir.entry(id);
        let (name, pat) = (&e.name, &e.pattern.text);
        match &e.content {
            Content::Codec(Codec::Pickle(_)) => {
                consts.push(entry_const(e, quote!(rt::zip::Entry::member(#name, #pat))))
            }
            Content::Text => {
                texts.push(Text {
                    id,
                    position: i,
                    optional: e.optional,
                });
                consts.push(text_const(e));
            }
            _ => {
                let extra: Vec<&String> = e
                    .pattern
                    .captures
                    .iter()
                    .filter(|c| !pentry.pattern.captures.contains(c))
                    .collect();
                let [cap] = extra.as_slice() else {
                    unreachable!(
                        "checker rule zip_pickle: a storage entry names one storage by one capture beyond the pickle's"
                    );
                };
                consts.push(entry_const(
                    e,
                    quote!(rt::zip::Entry::storages(#name, #pat, #cap)),
                ));
            }
        }
    }
    let locate = locator(|e: &Expr| match &e.kind {
        ExprKind::EntryLookup { entry, captures } => match captures.as_slice() {
            [(_, key)] => order.iter().position(|x| x == entry).map(|i| (i, key)),
            _ => None,
        },
        _ => None,
    });

    // The mappings, each over the objects of one pickle entry: over storages, or over
    // calls whose bytes the pickle holds (`data` a pickled byte string), read in the
    // same walk as the entry's first mapping over storages.
    let mut fns = Vec::new();
    let mut stored_reads = Vec::new();
    // Per pickle entry (its position) read for placed kinds: its rules and those kinds.
    let mut placed_kinds: Vec<(usize, proc_macro2::Ident, Vec<TokenStream>)> = Vec::new();
    let mut writer_spec = None;
    let mut any_texts = false;
    // The checker allows a `write` rule with one mapping over storages alone.
    let writable = fmt
        .mappings
        .iter()
        .filter(|&&m| !ir.mapping(m).data_in_pickle())
        .count()
        == 1;
    for (j, &m) in fmt.mappings.iter().enumerate() {
        let map = ir.mapping(m);
        let Some((mentry, pid, kind)) = mapped_objects(&map.source) else {
            unreachable!(
                "checker rule zip_pickle: a mapping iterates the objects of a pickle entry"
            );
        };
        let ename = &ir.entry(mentry).name;
        let position = order
            .iter()
            .position(|&e| e == mentry)
            .expect("every entry is in the list");
        let pk = ir.pickle(pid);
        let rules = format_ident!("{}_rules", pk.name.to_lowercase());
        let is_kind = format_ident!("is_{}_{}", pk.name.to_lowercase(), kind);
        if map.data_in_pickle() {
            let f = format_ident!("{}_{}", ename, kind);
            fns.push(file::gen_place_fn(ir, fid, map, &f, kind)?);
            match placed_kinds.iter_mut().find(|(p, ..)| *p == position) {
                Some((.., kinds)) => kinds.push(quote!((#is_kind, #f))),
                None => placed_kinds.push((position, rules, vec![quote!((#is_kind, #f))])),
            }
            continue;
        }
        let taken = fmt.mappings[..j]
            .iter()
            .any(|&o| mapped_objects(&ir.mapping(o).source).map(|x| x.0) == Some(mentry));
        let f = match taken {
            false => format_ident!("{}_tensor", ename),
            true => format_ident!("{}_tensor_{}", ename, j),
        };
        let doc = format!(
            " The tensor that a `{kind}` call of `{ename}` builds (`{}` at `path`): the mapping `tensor from {}`.",
            map.binding,
            ir.text(fid, map.source.span),
        );
        let write = map.write.as_ref().filter(|_| writable);
        let mf = gen_map_fn(ir, fid, map, &texts, (&f, &doc), write.is_some(), &locate)?;
        let map_arg = if mf.texts {
            any_texts = true;
            quote!(|path, t| #f(path, t, texts))
        } else {
            quote!(#f)
        };
        stored_reads.push((position, rules, is_kind, map_arg));
        fns.push(mf.ts);
        if let (Some(w), Some(storage)) = (write, mf.storage) {
            writer_spec = Some(Spec {
                pickle: pid,
                map,
                write: w,
                storage,
                storages: mf.entry,
                data_texts: mf.data_texts,
            });
        }
    }
    let mut reads = Vec::new();
    for (position, rules, is_kind, map_arg) in stored_reads {
        let p = Literal::usize_unsuffixed(position);
        match placed_kinds.iter().position(|(q, ..)| *q == position) {
            Some(i) => {
                let kinds = placed_kinds.remove(i).2;
                reads.push(
                    quote!(index.read_with(#p, #rules(), (#is_kind, #map_arg), &[#(#kinds),*])?;),
                );
            }
            None => reads.push(quote!(index.read(#p, #rules(), #is_kind, #map_arg)?;)),
        }
    }
    for (position, rules, kinds) in placed_kinds {
        let p = Literal::usize_unsuffixed(position);
        reads.push(quote!(index.read_placed(#p, #rules(), &[#(#kinds),*])?;));
    }
    let public = &fmt.public_name;
    let writer = match writer_spec {
        Some(spec) => gen_writer(ir, fid, order[0], &texts, spec)?,
        None => refusing_writer(public),
    };
    let texts = any_texts.then(|| quote!(let texts = archive.texts();));
    let entry_points = index_and_structure(
        " Lists the tensors of `src` without reading their bytes: reads the pickle members\n (with the declared globals only), then maps every object of the mapped kinds.",
        "the first pickle member",
    );
    let edoc = format!(
        " The members of a `{public}` archive: `{}` first, whose captures name the others.",
        pentry.name
    );
    Ok(quote! {
        #[doc = #edoc]
        pub const ENTRIES: &[rt::zip::Entry] = &[#(#consts),*];

        #entry_points {
            let archive = rt::zip::Archive::open(src, limits, NAME, ENTRIES)?;
            #texts
            let mut index = rt::pickle::Index::new(&archive, limits, with_structure);
            #(#reads)*
            Ok(index.finish())
        }

        #(#fns)*

        #writer
    })
}

/// What the writer is generated from.
struct Spec<'a> {
    /// The declaration of the objects written.
    pickle: PickleId,
    /// The mapping inverted.
    map: &'a Mapping,
    /// Its `write` rule.
    write: &'a Expr,
    /// The mapping's storage function (its `data`).
    storage: proc_macro2::Ident,
    /// The position of the storages' entry.
    storages: usize,
    /// Whether the mapping's `data` reads the text entries.
    data_texts: bool,
}

/// Names in reach in a pickle write rule: the tensor written (`meta`), its storage (`s`),
/// the byte order written, the text entries as written; `key_of(T, dtype)` and
/// `global(..)` read the dtype and byte order written. In a file that is one pickle
/// (`one_pickle`), no storage but the stream of the tensor's bytes (`data`, a
/// `Value::Stream`) and its order.
struct WriteEnv<'a> {
    ir: &'a Ir,
    fid: FormatId,
    pickle: PickleId,
    texts: &'a [Text],
    uses_texts: Cell<bool>,
    uses_byte_order: Cell<bool>,
    one_pickle: bool,
}

impl Env for WriteEnv<'_> {
    fn field(&self, _l: ir::LayoutId, _f: ir::FieldId) -> Option<Val> {
        None
    }
    fn format(&self) -> Option<FormatId> {
        Some(self.fid)
    }
    fn entry_content(&self, e: EntryId) -> Option<Val> {
        text_content(self.texts, e, &self.uses_texts)
    }
    fn write_var(&self, v: WriteVar) -> Option<Val> {
        let u64_ = Type::Int(IntTy::sized(8, false));
        if self.one_pickle {
            return Some(match v {
                WriteVar::PickleData => Val::value(quote!(data.clone()), Type::Bytes),
                WriteVar::Order => Val::value(quote!(meta.order), Type::Order),
                WriteVar::ByteOrder => {
                    self.uses_byte_order.set(true);
                    Val::value(quote!(byte_order), Type::ByteOrder)
                }
                WriteVar::Shape => Val::place(quote!(meta.shape), v.ty()),
                WriteVar::Dtype => {
                    self.uses_byte_order.set(true);
                    Val::value(quote!((meta.dtype, Some(byte_order))), Type::Dtype)
                }
                _ => return None,
            });
        }
        Some(match v {
            WriteVar::Index => Val::place(quote!(s.index), u64_),
            WriteVar::Offset => Val::place(quote!(s.offset), u64_),
            WriteVar::Numel => Val::place(quote!(s.numel), u64_),
            WriteVar::Nbytes => Val::place(quote!(s.nbytes), u64_),
            WriteVar::Shape => Val::place(quote!(meta.shape), v.ty()),
            WriteVar::Strides => Val::place(quote!(s.strides), v.ty()),
            WriteVar::Dtype => {
                self.uses_byte_order.set(true);
                Val::value(quote!((meta.dtype, Some(byte_order))), Type::Dtype)
            }
            _ => return None,
        })
    }
    fn builtin(&self, func: Builtin, args: &[ir::Arg]) -> Option<Val> {
        let lower = Lower {
            ir: self.ir,
            env: self,
        };
        match (func, args) {
            (Builtin::Itemsize, [a])
                if matches!(a.value.kind, ExprKind::WriteVar(WriteVar::Dtype)) =>
            {
                Some(Val::value(
                    quote!(rt::expr::itemsize(meta.dtype)?),
                    Type::INT,
                ))
            }
            // The table's key for the dtype written, when there is one.
            (Builtin::KeyOf, [t, _]) => {
                let ExprKind::Table(t) = t.value.kind else {
                    return None;
                };
                let f = lower.table_path(t);
                self.uses_byte_order.set(true);
                Some(Val::opt(
                    quote!(#f.key_for(meta.dtype, byte_order).copied()),
                    Type::Str,
                ))
            }
            (Builtin::Global, [a]) => {
                let ty = Type::PickleGlobal(self.pickle);
                let table = match &a.value.kind {
                    ExprKind::Const(Const::Str(s)) => {
                        return Some(Val::value(quote!(rt::pickle::Value::global(#s)), ty))
                    }
                    ExprKind::Call {
                        func: Builtin::KeyOf,
                        args,
                    } => match args.first().map(|t| &t.value.kind) {
                        Some(ExprKind::Table(t)) => *t,
                        _ => return None,
                    },
                    _ => return None,
                };
                let key = crate::lower::lowered(lower.expr(&a.value)).ts;
                let tname = &self.ir.table(table).name;
                Some(Val::value(
                    quote!(rt::pickle::table_global(#key, NAME, #tname, meta.dtype, byte_order)?),
                    ty,
                ))
            }
            _ => None,
        }
    }
}

/// The body of a function returning the value `ts`: `call(..)?` as it is, anything else
/// in `Ok(..)`.
fn returned(ts: TokenStream) -> TokenStream {
    let mut toks: Vec<proc_macro2::TokenTree> = ts.clone().into_iter().collect();
    match toks.last() {
        Some(proc_macro2::TokenTree::Punct(p)) if p.as_char() == '?' => {
            toks.pop();
            toks.into_iter().collect()
        }
        _ => quote!(Ok(#ts)),
    }
}

/// The streaming `Writer`: tensors go to storage members as they come (where the
/// mapping's `data`, read back from the object the `write` rule builds, puts them), the
/// pickled root object (the pickle entry's `write`, a dict-kind call getting
/// `name -> object` items) and the text entries' `write` contents are written by `finish`.
fn gen_writer(
    ir: &Ir,
    fid: FormatId,
    pentry: EntryId,
    texts: &[Text],
    sp: Spec<'_>,
) -> R<TokenStream> {
    let public = &ir.format(fid).public_name;
    let pentry = ir.entry(pentry);
    let env = WriteEnv {
        ir,
        fid,
        pickle: sp.pickle,
        texts,
        uses_texts: Cell::new(false),
        uses_byte_order: Cell::new(false),
        one_pickle: false,
    };
    let lower = Lower { ir, env: &env };
    // The per-tensor object.
    let obj_body = returned(lower.pickle_value(sp.write)?);
    let uses_bo = env.uses_byte_order.get();
    // The root: a call of a dict-kind global.
    let Some(root) = &pentry.write else {
        unreachable!(
            "checker rule pickle_writer: the pickle entry of a writable format has `write`"
        );
    };
    let root_ts = lower.pickle_value(root)?;
    let Some(wname) = &pentry.write_name else {
        unreachable!(
            "checker rule pickle_writer: the pickle entry of a writable format has `write_name`"
        );
    };
    if sp.data_texts {
        unreachable!("checker rule pickle_writer: a written `data` does not read the text entries");
    }
    // The byte order written: the mapping's, over the text entries as written.
    env.uses_texts.set(false);
    let bo_ts = match sp.map.key(TensorKey::ByteOrder) {
        Some(b) => lower.expr(b)?.scalar(),
        None => quote!(rt::ByteOrder::Little),
    };
    let texts = env
        .uses_texts
        .get()
        .then(|| quote!(let texts = self.archive.texts();));
    // The storages' entry: where the mapping's `data` puts the bytes.
    let storages = Literal::usize_unsuffixed(sp.storages);
    let storage = &sp.storage;
    let bo_param = if uses_bo {
        quote!(byte_order)
    } else {
        quote!(_byte_order)
    };
    let wdoc = format!(
        " Streaming writer of `{public}` files: each storage's bytes go to its own member as they come; [`Writer::finish`] writes `{wname}` (the pickled object) and the fixed members."
    );
    let tr = crate::engine::tensor_writer_impl(true);
    let desc = crate::engine::desc(true);
    Ok(quote! {
        #[doc = " The member name the writer gives the pickle; its captures name every other member."]
        pub const WRITE_NAME: &str = #wname;

        #[doc = #wdoc]
        pub struct Writer<W: ::std::io::Write + ::std::io::Seek> {
            archive: rt::zip::ArchiveWriter<W>,
            objects: rt::pickle::Objects,
        }

        impl<W: ::std::io::Write + ::std::io::Seek> Writer<W> {
            /// A writer into `w`; storage members are compressed as `options` asks, by default as the schema's first listed method.
            pub fn new(w: W, options: &rt::WriteOptions) -> rt::Result<Self> {
                Ok(Writer {
                    archive: rt::zip::ArchiveWriter::new(w, options, NAME, ENTRIES, WRITE_NAME, #storages)?,
                    objects: rt::pickle::Objects::new(NAME),
                })
            }

            /// Adds one tensor: `data` holds exactly `meta.nbytes()` bytes in `meta`'s order and byte order; they are byte-swapped when the format's byte order differs. The tensor gets a storage of its own.
            pub fn add(&mut self, meta: &rt::TensorMeta, data: rt::Payload<'_>) -> rt::Result<()> {
                let storage = self.objects.whole(meta)?;
                self.put(meta, &storage, Some(data))
            }

            /// Adds one tensor that views a storage: `storage` holds the storage's bytes the first time `view.storage` is given (in `meta`'s byte order), `None` after; every view of one storage has one dtype. The storage is one member, shared by its views.
            pub fn add_view(&mut self, meta: &rt::TensorMeta, view: &rt::StorageView, storage: ::std::option::Option<rt::Payload<'_>>) -> rt::Result<()> {
                let s = self.objects.view(meta, view, storage.is_some())?;
                self.put(meta, &s, storage)
            }

            /// The tensor `meta` in storage `s`, whose bytes are written when `data` is given.
            fn put(&mut self, meta: &rt::TensorMeta, s: &rt::pickle::Storage, data: ::std::option::Option<rt::Payload<'_>>) -> rt::Result<()> {
                #texts
                let byte_order = #bo_ts;
                let object = tensor_object(meta, s, byte_order).map_err(|e| e.in_field(&meta.name))?;
                let dtype = (meta.dtype, Some(byte_order));
                let (entry, key) = self.objects.add(meta, s, object, |t| #storage(t, dtype))?;
                match data {
                    Some(data) => self.archive.storage(entry, &key, meta, data, s.nbytes, byte_order),
                    None => Ok(()),
                }
            }

            /// Writes the tensors inside `tree` instead of a flat dict: its dicts, lists,
            /// tuples, numbers and strings as they are (a dict at the root as the schema's
            /// root object), each [`rt::Node::Tensor`] leaf as the tensor added under that
            /// name. Every tensor added must be named in it, and every name added; checked
            /// by [`Writer::finish`].
            pub fn set_structure(&mut self, tree: &rt::Node) -> rt::Result<bool> {
                self.objects.set_structure(tree);
                Ok(true)
            }

            /// Writes the pickled object and the fixed members, then the central directory; returns the output.
            pub fn finish(mut self) -> rt::Result<W> {
                let root = #root_ts;
                let content = self.objects.finish(root)?;
                self.archive.finish(&content)
            }
        }

        /// The object that rebuilds the tensor `meta` in storage `s`, its bytes in `byte_order` (the mapping's `write` rule).
        fn tensor_object(meta: &rt::TensorMeta, s: &rt::pickle::Storage, #bo_param: rt::ByteOrder) -> rt::Result<rt::pickle::Value> {
            #obj_body
        }

        #tr
        #desc
    })
}

/// A writer constructor that refuses (a mapping without a `write` rule).
fn refusing_writer(public: &str) -> TokenStream {
    let no_write = format!("writing {public} files is not supported: tensorfmt reads them only");
    crate::engine::read_only_desc(&no_write, true)
}
