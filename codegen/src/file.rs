//! The reading side of the `file` engine, from the IR: the tensor mapping over the
//! format's layout, and `index`.
//!
//! A mapping over the layout itself (`tensor from File as f`) gives one tensor per file:
//! `tensor(f, name, locate)`, which a container format includes for each of its members
//! (npz). A mapping over a list or map inside it (`tensor from File.header.rest as t`,
//! `tensor from File.infos as t`) gives one tensor per item: `tensors(f, src, limits)`.
//! A format without a mapping (layouts other formats name) lists no tensor, and its
//! writer refuses one.

use proc_macro2::TokenStream;
use quote::quote;
use tensorfmt_schema::ir::{
    self, Expr, ExprKind, FormatId, Ir, LayoutId, Mapping, Member, TensorKey, Type,
};

use crate::lower::{storage_ty, Env, Lower, Unlowered, Val};
use crate::model::{docs, rs_ident};

/// Names in reach in a mapping: the record (`f`), the binding (`t`), the item's
/// position, the source, and the properties set so far.
pub(crate) struct MapEnv {
    pub(crate) layout: LayoutId,
    pub(crate) binding: Val,
    pub(crate) position: bool,
    pub(crate) keys: Vec<TensorKey>,
    /// The tensor's name as a `&str`.
    pub(crate) name: TokenStream,
}

impl Env for MapEnv {
    fn field(&self, _l: LayoutId, _f: ir::FieldId) -> Option<Val> {
        None
    }
    fn binding(&self) -> Option<Val> {
        Some(self.binding.clone())
    }
    fn layout(&self, l: LayoutId) -> Option<Val> {
        (l == self.layout).then(|| Val::reference(quote!(f), Type::Layout(l)))
    }
    fn position(&self) -> Option<Val> {
        self.position
            .then(|| Val::value(quote!((position as i128)), Type::INT))
    }
    fn tensor_key(&self, k: TensorKey) -> Option<Val> {
        if !self.keys.contains(&k) {
            return None;
        }
        Some(match k {
            TensorKey::Name => Val::value(self.name.clone(), Type::Str),
            TensorKey::Dtype => Val::value(quote!((dtype, byte_order)), Type::Dtype),
            TensorKey::Shape => Val::place(quote!(shape), k.ty()),
            _ => return None,
        })
    }
    fn source(&self) -> Option<TokenStream> {
        Some(quote!(src))
    }
}

/// The dotted path of a member chain from the record or binding (`header.descr`), for
/// errors.
fn path_text(ir: &Ir, e: &Expr) -> Option<String> {
    match &e.kind {
        ExprKind::Binding | ExprKind::Layout(_) => Some(String::new()),
        ExprKind::Member { base, member } => {
            let name = match member {
                Member::Field(l, f) => ir.field(*l, *f).name.clone(),
                Member::DictKey(d, k) => ir.dict(*d).keys[k.index()].key.clone(),
                Member::MapKey => "key".into(),
                Member::MapValue => "value".into(),
                _ => return None,
            };
            let b = path_text(ir, base)?;
            Some(if b.is_empty() {
                name
            } else {
                format!("{b}.{name}")
            })
        }
        _ => None,
    }
}

/// `index` and `Writer` of a `file` format that maps no tensor (its layouts are named by
/// other formats): indexing lists no tensor; the writer writes nothing, and adding a
/// tensor is an error naming the format.
pub(crate) fn gen_file_without_tensors(ir: &Ir, fid: FormatId) -> TokenStream {
    let public = &ir.format(fid).public_name;
    let refusal = format!("{public} files hold no tensor: the format maps none");
    let wdoc = format!(" Writer of `{public}` files, which hold no tensor.");
    let tr = crate::engine::tensor_writer_impl(false);
    let desc = crate::engine::desc(false);
    quote! {
        /// Lists the tensors of `src`: none, as the format maps none.
        pub fn index(src: &rt::Source, limits: &rt::Limits) -> rt::Result<::std::vec::Vec<rt::TensorInfo>> {
            let _ = (src, limits);
            Ok(::std::vec::Vec::new())
        }

        #[doc = #wdoc]
        pub struct Writer<W: ::std::io::Write + ::std::io::Seek> {
            w: W,
        }

        impl<W: ::std::io::Write + ::std::io::Seek> Writer<W> {
            /// A writer into `w` (it writes nothing, so `options` change nothing).
            pub fn new(w: W, options: &rt::WriteOptions) -> rt::Result<Self> {
                let _ = options;
                Ok(Writer { w })
            }

            /// Refuses: the format maps no tensor, so its files hold none.
            pub fn add(&mut self, meta: &rt::TensorMeta, data: rt::Payload<'_>) -> rt::Result<()> {
                let _ = (meta, data);
                Err(rt::Error::from(rt::ErrorKind::Unsupported(#refusal.to_string())))
            }

            /// Returns the output, to which nothing was written.
            pub fn finish(self) -> rt::Result<W> {
                Ok(self.w)
            }
        }

        #tr
        #desc
    }
}

/// A property every checked `file` mapping sets: the checker requires `name`, `dtype`,
/// `shape` and `data` unless an `include` gives them, and a `file` mapping has no
/// `include` (its inverse refuses one).
fn required(map: &Mapping, k: TensorKey) -> &Expr {
    map.key(k).unwrap_or_else(|| {
        unreachable!(
            "the checker requires `{}` in a `file` mapping, which has no `include`",
            k.name()
        )
    })
}

/// The statements computing a tensor's properties (`name` already bound), ending with
/// `(offset, len)` of its data bound.
fn properties(ir: &Ir, map: &Mapping, env: &mut MapEnv) -> Result<TokenStream, Unlowered> {
    let mut out = Vec::new();
    env.keys.push(TensorKey::Name);
    // dtype
    let dtype = required(map, TensorKey::Dtype);
    match &dtype.kind {
        ExprKind::Lookup { table, key } => {
            let t = ir.table(*table);
            let tf = rs_ident(&crate::table::const_name(&t.name));
            let k = Lower { ir, env: &*env }.expr(key)?.scalar();
            let k = match t.key {
                ir::KeyKind::Str => k,
                ir::KeyKind::Int => quote!(&rt::expr::narrow::<i64>(#k, "i64")?),
            };
            let place = match path_text(ir, key) {
                Some(p) if !p.is_empty() => quote!(.map_err(|e| e.in_field(#p))),
                _ => quote!(),
            };
            out.push(quote!(let (dtype, byte_order) = #tf.lookup(#k)#place?;));
        }
        _ => {
            let d = Lower { ir, env: &*env }.expr(dtype)?.scalar();
            out.push(quote!(let (dtype, byte_order) = #d;));
        }
    }
    env.keys.push(TensorKey::Dtype);
    // shape
    let shape = required(map, TensorKey::Shape);
    let shape_ts = match &shape.kind {
        ExprKind::List(items) => {
            let lower = Lower { ir, env: &*env };
            let dims = items
                .iter()
                .map(|i| {
                    let v = lower.expr(i)?.scalar();
                    Ok(quote!(rt::expr::to_u64(#v, "a dimension")?))
                })
                .collect::<Result<Vec<_>, Unlowered>>()?;
            quote!(vec![#(#dims),*])
        }
        // Stored last dimension first: reversed as it is converted.
        ExprKind::Call {
            func: ir::Builtin::Reverse,
            args,
        } => {
            let v = Lower { ir, env: &*env }.expr(&args[0].value)?;
            let l = v.by_ref();
            quote!(rt::expr::dims_reversed(#l)?)
        }
        _ => {
            let v = Lower { ir, env: &*env }.expr(shape)?;
            let l = v.by_ref();
            quote!(rt::expr::dims(#l)?)
        }
    };
    out.push(quote!(let shape: ::std::vec::Vec<u64> = #shape_ts;));
    env.keys.push(TensorKey::Shape);
    let lower = Lower { ir, env: &*env };
    let order = match map.key(TensorKey::Order) {
        Some(o) => lower.expr(o)?.scalar(),
        None => quote!(rt::Order::C),
    };
    out.push(quote!(let order = #order;));
    let byte_order = match map.key(TensorKey::ByteOrder) {
        Some(b) => lower.expr(b)?.scalar(),
        None => quote!(byte_order.unwrap_or(rt::ByteOrder::Little)),
    };
    out.push(quote!(let byte_order = #byte_order;));
    let data = required(map, TensorKey::Data);
    let data = lower.expr(data)?.scalar();
    out.push(quote!(let (offset, len) = #data;));
    Ok(quote!(#(#out)*))
}

/// The mapping functions and `index` of a `file` format whose tensors come from a layout.
pub(crate) fn gen_file(ir: &Ir, fid: FormatId) -> Result<TokenStream, Unlowered> {
    let fmt = ir.format(fid);
    let mid = match fmt.mappings.as_slice() {
        [mid] => mid,
        _ => unreachable!(
            "the checker's engine rules give a `file` format one tensor mapping at most, and \
             one without any is generated by `gen_file_without_tensors`"
        ),
    };
    let map = ir.mapping(*mid);
    let layout = root_layout(&map.source).expect(
        "the checker roots a `file` format's mapping at a layout (entries and `root` belong to other engines)",
    );
    let lname = rs_ident(&ir.layout(layout).name);
    let doc = docs(&map.docs);
    let in_file = crate::engine::in_file();
    if matches!(map.source.kind, ExprKind::Layout(_)) {
        // One tensor per file.
        let mut env = MapEnv {
            layout,
            binding: Val::reference(quote!(f), Type::Layout(layout)),
            position: false,
            keys: Vec::new(),
            name: quote!(name.as_str()),
        };
        let props = properties(ir, map, &mut env)?;
        let name = required(map, TensorKey::Name);
        let name_env = MapEnv {
            keys: Vec::new(),
            ..env
        };
        let name = Lower { ir, env: &name_env }.expr(name)?.scalar();
        let tdoc = format!(
            " The tensor a `{}` holds. `name` is its name (what the mapping gives, or what an including format gives); `locate` turns the payload's `(offset, len)` in the layout's source into a data location. The byte size of dtype and shape is checked against the payload.",
            ir.layout(layout).name
        );
        return Ok(quote! {
            #doc
            #[doc = ""]
            #[doc = #tdoc]
            pub fn tensor(
                f: &#lname,
                name: ::std::string::String,
                locate: &dyn Fn(u64, u64) -> rt::DataLocation,
            ) -> rt::Result<rt::TensorInfo> {
                #props
                rt::TensorInfo::dense(name, dtype, shape, order, byte_order, locate(offset, len))
            }

            /// Lists the tensors of `src` without reading their bytes.
            pub fn index(src: &rt::Source, limits: &rt::Limits) -> rt::Result<::std::vec::Vec<rt::TensorInfo>> {
                #in_file
                let mut c = rt::Cursor::new(src.data(), src.location());
                let f = #lname::read(&mut c, limits).map_err(in_file)?;
                let name = #name.to_string();
                let t = tensor(&f, name, &rt::DataLocation::range).map_err(in_file)?;
                Ok(vec![t])
            }
        });
    }
    // One tensor per item of a list or map in the record.
    let item_ty = match &map.binding_ty {
        Type::MapItem(k, v) => {
            let k = storage_ty(ir, k);
            let v = storage_ty(ir, v);
            k.zip(v).map(|(k, v)| quote!((#k, #v)))
        }
        t => storage_ty(ir, t),
    }
    .expect(
        "the checker's rules layout_fields and dict_values: items of a layout's lists and of \
         a dict's maps have a storage type",
    );
    let uses_position = mentions(map, &|e| matches!(e.kind, ExprKind::Position));
    let uses_source = uses_source(map);
    let mut env = MapEnv {
        layout,
        binding: Val::reference(quote!(t), map.binding_ty.clone()),
        position: uses_position,
        keys: Vec::new(),
        name: quote!(name),
    };
    let source_env = MapEnv {
        layout,
        binding: Val::reference(quote!(t), map.binding_ty.clone()),
        position: false,
        keys: Vec::new(),
        name: quote!(name),
    };
    let items = Lower {
        ir,
        env: &source_env,
    }
    .expr(&map.source)?
    .by_ref();
    let filter = match &map.filter {
        Some(w) => {
            let ok = Lower { ir, env: &env }.expr(w)?.scalar();
            quote! {
                if !(#ok) {
                    continue;
                }
            }
        }
        None => quote!(),
    };
    let name = required(map, TensorKey::Name);
    let name = Lower { ir, env: &env }.expr(name)?.scalar();
    // `slice(DATA, .., tile = true)`: the items' slices cover DATA exactly.
    let tiled = match &required(map, TensorKey::Data).kind {
        ExprKind::Call {
            func: ir::Builtin::Slice,
            args,
        } if ir::named_arg(args, "tile").is_some() => {
            let data = Lower {
                ir,
                env: &source_env,
            }
            .expr(&args[0].value)?
            .scalar();
            quote!(rt::expr::tiled(&out, #data)?;)
        }
        _ => quote!(),
    };
    let props = properties(ir, map, &mut env)?;
    let (pos_param, pos_arg) = if uses_position {
        (quote!(position: usize,), quote!(position,))
    } else {
        (quote!(), quote!())
    };
    let (src_param, src_arg) = if uses_source {
        (quote!(src: &rt::Source,), quote!(src,))
    } else {
        (quote!(), quote!())
    };
    let (enumerate, pattern) = if uses_position {
        (quote!(.enumerate()), quote!((position, t)))
    } else {
        (quote!(), quote!(t))
    };
    let tdoc = format!(
        " The tensors a `{}` holds, in order: one per item, data as byte ranges of the file.",
        ir.layout(layout).name
    );
    Ok(quote! {
        #doc
        #[doc = ""]
        #[doc = #tdoc]
        pub fn tensors(f: &#lname, #src_param limits: &rt::Limits) -> rt::Result<::std::vec::Vec<rt::TensorInfo>> {
            let items = #items;
            rt::expr::within(items.len(), limits.max_tensors, "tensors")?;
            let mut out = ::std::vec::Vec::with_capacity(items.len());
            for #pattern in items.iter()#enumerate {
                #filter
                let name = #name;
                out.push(tensor_at(f, t, name, #pos_arg #src_arg).map_err(|e| e.in_entry(name))?);
            }
            #tiled
            Ok(out)
        }

        /// The tensor of one item, named `name`.
        fn tensor_at(f: &#lname, t: &#item_ty, name: &str, #pos_param #src_param) -> rt::Result<rt::TensorInfo> {
            #props
            rt::TensorInfo::dense_range(name, dtype, shape, order, byte_order, offset, len)
        }

        /// Lists the tensors of `src` without reading their bytes.
        pub fn index(src: &rt::Source, limits: &rt::Limits) -> rt::Result<::std::vec::Vec<rt::TensorInfo>> {
            #in_file
            let mut c = rt::Cursor::new(src.data(), src.location());
            let f = #lname::read(&mut c, limits).map_err(in_file)?;
            tensors(&f, #src_arg limits).map_err(in_file)
        }
    })
}

/// True when mapping `map` names its source (`src.stem`): `tensors` is then given `src`.
fn uses_source(map: &Mapping) -> bool {
    mentions(map, &|e| {
        matches!(
            e.kind,
            ExprKind::Member {
                member: Member::SourceStem | Member::SourceName | Member::SourcePath,
                ..
            }
        )
    })
}

/// The tensors of the record `f` read from `src` (`tensors(&f, limits)`), where the
/// format's mapping iterates a list or map of it; `None` for one tensor per file, whose
/// tensors only `index` lists.
pub(crate) fn tensors_of_record(ir: &Ir, fid: FormatId) -> Option<TokenStream> {
    let map = ir.mapping(*ir.format(fid).mappings.first()?);
    if matches!(map.source.kind, ExprKind::Layout(_)) {
        return None;
    }
    let src = uses_source(map).then(|| quote!(src,));
    Some(quote!(tensors(&f, #src limits).map_err(|e| src.in_file(e))?))
}

/// The layout a mapping's source starts at (`File`, `File.header.rest`).
pub(crate) fn root_layout(e: &Expr) -> Option<LayoutId> {
    match &e.kind {
        ExprKind::Layout(l) => Some(*l),
        ExprKind::Member { base, .. } => root_layout(base),
        _ => None,
    }
}

/// True when some expression of the mapping satisfies `p`.
fn mentions(map: &Mapping, p: &dyn Fn(&Expr) -> bool) -> bool {
    let mut found = false;
    let mut visit = |e: &Expr| {
        e.walk(&mut |x| found |= p(x));
    };
    if let Some(w) = &map.filter {
        visit(w);
    }
    for s in &map.stmts {
        if let ir::MappingStmt::Set { value, .. } = s {
            visit(value);
        }
    }
    found
}
