//! Writing a pickled object around tensors whose bytes go to storages of their own: the
//! bookkeeping of a streaming writer ([`Objects`]: which storage each tensor is in, the
//! object that rebuilds it, the root object around them all), and the values a format's
//! write rule builds ([`call`], [`table_global`]).

use std::collections::{HashMap, HashSet};

use super::rules::{Kind, Rules};
use super::tree::from_tree;
use super::value::{Global, Object, Value};
use super::write::write;
use tensorfmt_core::dtype::DType;
use tensorfmt_core::error::{Error, ErrorKind, Result};
use tensorfmt_core::registry::StorageView;
use tensorfmt_core::storage::StorageRef;
use tensorfmt_core::tensor::{contiguous_strides, ByteOrder, DataLocation, TensorInfo, TensorMeta};
use tensorfmt_core::tree::Node;

/// A call of the global `path` (`module.name`) with `args`, as `rules` say calling it
/// builds: a [`Kind::Call`] or [`Kind::Object`] keeps the arguments, a container kind
/// (`collections.OrderedDict`) takes none and is empty. Fails with
/// [`ErrorKind::Invalid`] when `rules` do not allow the global, or it is a class, or a
/// container is given arguments.
pub fn call<const N: usize>(rules: &Rules, path: &str, args: [Value; N]) -> Result<Value> {
    let (module, name) = path.rsplit_once('.').unwrap_or(("", path));
    let refuse = |why: &str| Error::from(ErrorKind::Invalid(format!("`{path}` {why}")));
    let kind = rules
        .kind(module, name)
        .ok_or_else(|| refuse("is not an allowed global"))?
        .clone();
    match kind {
        Kind::Class => Err(refuse("is a class: it cannot be called")),
        Kind::Call { .. } | Kind::Object => Ok(Value::object(
            Object::new(Global::new(module, name), kind).with_args(Vec::from(args)),
        )),
        _ if N > 0 => Err(refuse("is a container: it takes no arguments here")),
        _ => Ok(Value::object(Object::new(Global::new(module, name), kind))),
    }
}

/// The global that `key` (a reverse table lookup: the table's key for a dtype, such as a
/// storage class) names. Fails with [`ErrorKind::Unsupported`] when there is no key:
/// `format` cannot store `dtype` in `order` (the schema's table name, `_table`, is not a
/// user's word and stays out of the message).
pub fn table_global(
    key: Option<&str>,
    format: &str,
    _table: &str,
    dtype: DType,
    order: ByteOrder,
) -> Result<Value> {
    Ok(Value::global(found_key(key, format, dtype, order)?))
}

/// The text `key` (a reverse table lookup: the table's key for a dtype, such as NumPy's
/// `descr`), as a value. Fails as [`table_global`] when there is no key.
pub fn table_key(
    key: Option<&str>,
    format: &str,
    _table: &str,
    dtype: DType,
    order: ByteOrder,
) -> Result<Value> {
    Ok(Value::str(found_key(key, format, dtype, order)?))
}

/// `key`, or the [`ErrorKind::Unsupported`] error naming the dtype that has none.
fn found_key<'k>(
    key: Option<&'k str>,
    format: &str,
    dtype: DType,
    order: ByteOrder,
) -> Result<&'k str> {
    key.ok_or_else(|| {
        Error::from(ErrorKind::Unsupported(format!(
            "{format} cannot store {dtype} tensors ({} byte order)",
            tensorfmt_core::table::byte_order_name(order)
        )))
    })
}

/// The tuple of `items` (a write rule's `tuple(..)`).
pub fn tuple<const N: usize>(items: [Value; N]) -> Value {
    Value::tuple(Vec::from(items))
}

/// The object `object` (what [`call`] built) with the state `state`, as pickle's `BUILD`
/// gives it; fails when `object` is not a call's object or has a state already.
pub fn build(object: Value, state: Value) -> Result<Value> {
    match object {
        Value::Object(o) if o.state.is_none() => Ok(Value::object(
            std::sync::Arc::unwrap_or_clone(o).with_state(state),
        )),
        other => Err(Error::from(ErrorKind::Invalid(format!(
            "`build` of {}, not the object of a call without state",
            other.type_name()
        )))),
    }
}

/// The storage a written tensor is in, as a write rule names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Storage {
    /// The storage's number among those written (0, 1, ...), which names its entry.
    pub index: u64,
    /// Where the tensor's first element is, in elements from the storage's start.
    pub offset: u64,
    /// The storage's size in elements.
    pub numel: u64,
    /// The storage's size in bytes.
    pub nbytes: u64,
    /// The tensor's strides in elements.
    pub strides: Vec<i64>,
    /// Whether this tensor brings the storage's bytes (the storage is new).
    pub fresh: bool,
    /// The caller's id of the storage ([`StorageView::storage`]), for a view.
    id: Option<u64>,
}

/// The objects of a pickled checkpoint being written: one per tensor added, each in a
/// storage (its own, or one shared by views), and the root object that holds them, in
/// a flat dict named by the tensors' names or in the object tree given
/// ([`Objects::set_structure`]). Storages are numbered in the order their bytes come.
#[derive(Debug)]
pub struct Objects {
    format: &'static str,
    tensors: Vec<(Value, Value)>,
    names: HashSet<String>,
    structure: Option<Node>,
    /// Storages of views: the caller's id → (number, dtype, bytes).
    storages: HashMap<u64, (u64, DType, u64)>,
    /// Storages so far.
    count: u64,
}

impl Objects {
    /// No objects yet; `format` names the format in messages.
    pub fn new(format: &'static str) -> Self {
        Objects {
            format,
            tensors: Vec::new(),
            names: HashSet::new(),
            structure: None,
            storages: HashMap::new(),
            count: 0,
        }
    }

    /// A new storage holding the whole of the tensor `meta` (in `meta`'s order).
    pub fn whole(&self, meta: &TensorMeta) -> Result<Storage> {
        let in_tensor = |e: Error| e.in_field(&meta.name);
        let strides = contiguous_strides(&meta.shape, meta.order).map_err(in_tensor)?;
        let nbytes = meta.nbytes().map_err(in_tensor)?;
        storage(meta, self.count, 0, nbytes, strides, None)
    }

    /// The storage of the view `view` of the tensor `meta`: a new one when its bytes are
    /// given (`bytes_given`), which must be the first time its id is, else the one
    /// its id names, which must have the same dtype and size. The view must lie inside.
    pub fn view(
        &self,
        meta: &TensorMeta,
        view: &StorageView,
        bytes_given: bool,
    ) -> Result<Storage> {
        let invalid = |m: String| Error::from(ErrorKind::Invalid(m)).in_field(&meta.name);
        let start = view
            .offset
            .saturating_mul(meta.dtype.itemsize().unwrap_or(0) as u64);
        let len = view.storage_nbytes.checked_sub(start).ok_or_else(|| {
            invalid(format!(
                "offset {} lies beyond its storage of {} bytes",
                view.offset, view.storage_nbytes
            ))
        })?;
        TensorInfo::strided(
            meta.name.as_str(),
            meta.dtype,
            meta.shape.clone(),
            view.strides.clone(),
            meta.byte_order,
            DataLocation::Range { offset: 0, len },
        )
        .map_err(|e| e.in_field(&meta.name))?;
        let index = match (self.storages.get(&view.storage), bytes_given) {
            (Some(&(index, dtype, nbytes)), false) => {
                if dtype != meta.dtype || nbytes != view.storage_nbytes {
                    return Err(invalid(format!(
                        "storage {} is {} bytes of {}, viewed here as {} bytes of {}",
                        view.storage, nbytes, dtype, view.storage_nbytes, meta.dtype
                    )));
                }
                return storage(
                    meta,
                    index,
                    view.offset,
                    nbytes,
                    view.strides.clone(),
                    Some(view.storage),
                )
                .map(|s| Storage { fresh: false, ..s });
            }
            (Some(_), true) => {
                return Err(invalid(format!(
                    "the bytes of storage {} are given twice",
                    view.storage
                )))
            }
            (None, false) => {
                return Err(invalid(format!(
                    "storage {} is viewed before its bytes are given",
                    view.storage
                )))
            }
            (None, true) => self.count,
        };
        storage(
            meta,
            index,
            view.offset,
            view.storage_nbytes,
            view.strides.clone(),
            Some(view.storage),
        )
    }

    /// Adds the tensor `meta` in storage `s`, rebuilt by `object` (what the format's
    /// write rule made of them), and returns the storage reference `data` reads back
    /// from the object (the format's mapping: which entry, which key), so that the
    /// caller writes a fresh storage's bytes under that key. Fails when the name was
    /// added before, `object` is not a call, or the reference does not start at the
    /// tensor's offset in `s`.
    pub fn add<F>(
        &mut self,
        meta: &TensorMeta,
        s: &Storage,
        object: Value,
        data: F,
    ) -> Result<(usize, String)>
    where
        F: for<'v> FnOnce(&'v Object) -> Result<StorageRef<'v>>,
    {
        if self.names.contains(&meta.name) {
            return Err(Error::from(ErrorKind::Invalid(format!(
                "{}: the tensor name '{}' is given twice",
                self.format, meta.name
            ))));
        }
        let Value::Object(o) = &object else {
            return Err(Error::from(ErrorKind::Invalid(format!(
                "{}: a tensor's write rule does not build an object",
                self.format
            ))));
        };
        let at = data(o).map_err(|e| e.in_field(&meta.name))?;
        let expected = s
            .offset
            .checked_mul(meta.dtype.itemsize().unwrap_or(0) as u64);
        if expected != Some(at.skip) {
            return Err(Error::from(ErrorKind::Invalid(format!(
                "{}: the written object's data starts at byte {} of its storage, not at the view's offset ({} elements)",
                self.format, at.skip, s.offset
            )))
            .in_field(&meta.name));
        }
        let placed = (at.entry, at.key.into_owned());
        if s.fresh {
            if let Some(id) = s.id {
                self.storages.insert(id, (s.index, meta.dtype, s.nbytes));
            }
            self.count += 1;
        }
        self.names.insert(meta.name.clone());
        self.tensors.push((Value::str(&meta.name), object));
        Ok(placed)
    }

    /// Writes the tensors inside `tree` instead of a flat dict (see
    /// [`Objects::finish`]).
    pub fn set_structure(&mut self, tree: &Node) {
        self.structure = Some(tree.clone());
    }

    /// The pickle of the root object: `root` (an empty dict-kind object) holding each
    /// tensor's object under its name, in the order added; or, when a structure was
    /// given, that tree with its [`Node::Tensor`] leaves replaced by the tensors' objects
    /// (a dict at its root becomes `root` with its entries). Every tensor added must be
    /// named in the tree, and every tensor the tree names added.
    pub fn finish(&mut self, root: Value) -> Result<Vec<u8>> {
        let entries = std::mem::take(&mut self.tensors);
        let value = root_tree(self.format, &root, entries, self.structure.take())?;
        write(&value)
    }
}

/// The object a writer pickles: `root` (an empty dict-kind object, or `None` for a
/// plain dict) holding `tensors` (name → the object that rebuilds it) in the order
/// given; or, with a `structure`, that tree with its [`Node::Tensor`] leaves replaced by
/// the tensors' objects (a dict at its root becomes `root` with its entries). Every
/// tensor given must be named in the tree, and every tensor the tree names given;
/// `format` names the format in messages.
pub(crate) fn root_tree(
    format: &str,
    root: &Value,
    tensors: Vec<(Value, Value)>,
    structure: Option<Node>,
) -> Result<Value> {
    let with_entries = |entries: Vec<(Value, Value)>| match root {
        Value::Object(o) => Value::object(Object::clone(o).with_entries(entries)),
        _ => Value::dict(entries),
    };
    let Some(tree) = structure else {
        return Ok(with_entries(tensors));
    };
    let named: HashSet<&str> = tree.tensor_names().into_iter().collect();
    let mut by_name = HashMap::new();
    for (k, v) in tensors {
        let k = k.as_str().unwrap_or_default().to_string();
        if !named.contains(k.as_str()) {
            return Err(Error::from(ErrorKind::Invalid(format!(
                "{format}: the tensor '{k}' was added but the structure given does not hold it"
            ))));
        }
        by_name.insert(k, v);
    }
    let value = from_tree(&tree, &mut |n| {
        by_name.get(n).cloned().ok_or_else(|| {
            Error::from(ErrorKind::NotFound(format!(
                "{format}: the structure given holds the tensor '{n}', which was not added"
            )))
        })
    })?;
    Ok(match value {
        Value::Dict(d) => with_entries(d.to_vec()),
        other => other,
    })
}

/// Storage number `index` of `nbytes` bytes, holding the tensor `meta` from element
/// `offset` with `strides`: its size must be a whole number of elements.
fn storage(
    meta: &TensorMeta,
    index: u64,
    offset: u64,
    nbytes: u64,
    strides: Vec<i64>,
    id: Option<u64>,
) -> Result<Storage> {
    let in_tensor = |e: Error| e.in_field(&meta.name);
    let item = meta.dtype.itemsize().ok_or_else(|| {
        in_tensor(Error::from(ErrorKind::Unsupported(
            "string tensors have no fixed byte size".to_string(),
        )))
    })? as u64;
    if item == 0 || nbytes % item != 0 {
        return Err(in_tensor(Error::from(ErrorKind::SizeMismatch(format!(
            "a storage of {nbytes} bytes is not a whole number of {item}-byte elements"
        )))));
    }
    Ok(Storage {
        index,
        offset,
        numel: nbytes / item,
        nbytes,
        strides,
        fresh: true,
        id,
    })
}
