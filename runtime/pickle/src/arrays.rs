//! Writing a file that is one pickle holding its arrays' bytes (what `pickle.dump` of a
//! dict of NumPy arrays writes): the loop of a streaming writer ([`Arrays`]).
//!
//! The pickle wants every array's bytes inside it, in the order of the object tree,
//! and the tree is complete only when the last tensor is added. So each tensor's bytes
//! go to a [`Spool`] (a temporary file beside the destination) as they come, and its
//! object (what the format's write rule builds) holds a [`Value::Stream`] of them;
//! [`Arrays::finish`] pickles the tree and the [`Writer`] streams each tensor's bytes
//! from the spool when it reaches its [`Value::Stream`]. Memory is bounded by the
//! objects (a few hundred bytes per tensor) and the writer's buffers, never by a
//! tensor's or the file's size.
//!
//! A write rule builds each tensor's object afresh; CPython pickles one object once
//! and refers back to it (a NumPy dtype, a one-character string). So the objects added
//! share what equals a part of an earlier one ([`share`]), and the pickle of a dict of
//! arrays is byte for byte what `pickle.dumps` writes.
//!
//! [`ArraysWriter`] is the streaming writer of a format that is one such pickle: the
//! format gives it the function that builds each array's object (its `write` rule).

use std::collections::HashSet;
use std::io::{Read, Seek, SeekFrom, Write};

use super::objects::root_tree;
use super::value::{Stream, Value};
use super::write::Writer;
use tensorfmt_core::error::{Error, ErrorKind, Result};
use tensorfmt_core::output::Spool;
use tensorfmt_core::registry::{Payload, StructureKept, TensorWriter};
use tensorfmt_core::tensor::{ByteOrder, TensorMeta, WriteOptions};
use tensorfmt_core::tree::Node;

/// The tensors of a pickle being written: their objects, by name, and their bytes,
/// spooled until [`Arrays::finish`] writes the pickle.
#[derive(Debug)]
pub struct Arrays {
    format: &'static str,
    protocol: u8,
    spool: Spool,
    /// Per stream (in the order added): where its bytes are in the spool.
    ranges: Vec<(u64, u64)>,
    /// Name → object, in the order added.
    tensors: Vec<(Value, Value)>,
    names: HashSet<String>,
    structure: Option<Node>,
    /// The parts of the objects added that later ones share.
    shared: Vec<Value>,
}

impl Arrays {
    /// No tensors yet; the pickle will be of protocol `options.pickle_protocol` (4 when
    /// not given; 2 and 4 are written, others refused with [`ErrorKind::Unsupported`]),
    /// the bytes spooled beside `options.destination`. `format` names the format in
    /// messages.
    pub fn new(format: &'static str, options: &WriteOptions) -> Result<Arrays> {
        let protocol = options.pickle_protocol.unwrap_or(4);
        if !matches!(protocol, 2 | 4) {
            return Err(Error::from(ErrorKind::Unsupported(format!(
                "{format}: pickle protocol {protocol} is not written (2 and 4 are)"
            ))));
        }
        Ok(Arrays {
            format,
            protocol,
            spool: Spool::new(options.destination.as_deref())?,
            ranges: Vec::new(),
            tensors: Vec::new(),
            names: HashSet::new(),
            structure: None,
            shared: Vec::new(),
        })
    }

    /// The protocol written.
    pub fn protocol(&self) -> u8 {
        self.protocol
    }

    /// The [`Value::Stream`] of the bytes of the tensor `meta` when it is the next one
    /// added: what its object holds as its data.
    pub fn data(&self, meta: &TensorMeta) -> Result<Value> {
        let len = meta.nbytes().map_err(|e| e.in_field(&meta.name))?;
        Ok(Value::stream(self.ranges.len(), len))
    }

    /// Adds the tensor `meta`, rebuilt by `object` (which holds [`Arrays::data`] of it),
    /// its bytes `data` (exactly `meta.nbytes()`, in `meta`'s order and byte order)
    /// spooled, each element byte-swapped when `byte_order`, the order the object gives
    /// them, is not `meta`'s. Fails, spooling nothing, when the name was added before.
    pub fn add(
        &mut self,
        meta: &TensorMeta,
        object: Value,
        data: Payload<'_>,
        byte_order: ByteOrder,
    ) -> Result<()> {
        if self.names.contains(&meta.name) {
            return Err(Error::from(ErrorKind::Invalid(format!(
                "{}: the tensor name '{}' is given twice",
                self.format, meta.name
            ))));
        }
        let len = meta.nbytes().map_err(|e| e.in_field(&meta.name))?;
        let swap = match byte_order == meta.byte_order {
            true => 1,
            false => meta.dtype.swap_unit().unwrap_or(1),
        };
        let start = self.spool.len();
        self.spool.add(data, len, swap, &meta.name)?;
        self.ranges.push((start, len));
        self.names.insert(meta.name.clone());
        let object = share(object, &mut self.shared);
        self.tensors.push((Value::str(&meta.name), object));
        Ok(())
    }

    /// Writes the tensors inside `tree` instead of a flat dict: its dicts, lists,
    /// tuples, numbers and strings as they are, each [`Node::Tensor`] leaf as the object
    /// of the tensor added under that name. Every tensor added must be named in it, and
    /// every name added; checked by [`Arrays::finish`].
    pub fn set_structure(&mut self, tree: &Node) {
        self.structure = Some(tree.clone());
    }

    /// Writes the pickle to `w`: `root` (an empty dict-kind object, or any other value
    /// for a plain dict) holding each tensor's object under its name in the order added,
    /// or the structure given, each [`Value::Stream`] of a tensor's bytes streamed from
    /// the spool. Returns `w`.
    pub fn finish<W: Write>(self, root: Value, mut w: W) -> Result<W> {
        let value = root_tree(self.format, &root, self.tensors, self.structure)?;
        let mut file = self.spool.into_reader()?;
        let ranges = self.ranges;
        let mut streams = |st: Stream, out: &mut dyn Write| -> Result<()> {
            let Some(&(offset, len)) = ranges.get(st.index).filter(|r| r.1 == st.len) else {
                return Err(Error::from(ErrorKind::Invalid(format!(
                    "byte string {} of {} bytes is not a tensor's bytes",
                    st.index, st.len
                ))));
            };
            file.seek(SeekFrom::Start(offset))?;
            let copied = std::io::copy(&mut (&mut file).take(len), out)?;
            if copied != len {
                return Err(Error::from(ErrorKind::Invalid(format!(
                    "the spool ended inside byte string {}",
                    st.index
                ))));
            }
            Ok(())
        };
        Writer::new()
            .protocol(self.protocol)
            .write_streamed(&value, &mut w, &mut streams)?;
        Ok(w)
    }
}

/// The object of the array `meta` whose bytes are the byte string `data` in `byte_order`
/// (a format's `write` rule).
pub type ObjectFn = fn(&TensorMeta, &Value, ByteOrder) -> Result<Value>;

/// The streaming writer of a file that is one pickle holding its arrays' bytes: each
/// array's object is built by the format's [`ObjectFn`] around [`Arrays::data`], its
/// bytes spooled as they come, in the tensor's own order and byte order;
/// [`ArraysWriter::finish`] pickles a dict of the arrays by name (or the structure given).
#[derive(Debug)]
pub struct ArraysWriter<W: Write> {
    w: W,
    arrays: Arrays,
    object: ObjectFn,
}

impl<W: Write> ArraysWriter<W> {
    /// A writer into `w` of the format `format`, whose arrays' objects `object` builds;
    /// the protocol and the spool's folder as [`Arrays::new`] takes them from `options`.
    pub fn new(
        w: W,
        format: &'static str,
        options: &WriteOptions,
        object: ObjectFn,
    ) -> Result<Self> {
        Ok(ArraysWriter {
            w,
            arrays: Arrays::new(format, options)?,
            object,
        })
    }

    /// Adds one array: `data` holds exactly `meta.nbytes()` bytes in `meta`'s order and
    /// byte order, written as they are. A dtype the format cannot name fails here, naming
    /// it, before any byte is spooled.
    pub fn add(&mut self, meta: &TensorMeta, data: Payload<'_>) -> Result<()> {
        let bytes = self.arrays.data(meta)?;
        let object =
            (self.object)(meta, &bytes, meta.byte_order).map_err(|e| e.in_field(&meta.name))?;
        self.arrays.add(meta, object, data, meta.byte_order)
    }

    /// Writes the arrays inside `tree` instead of a flat dict ([`Arrays::set_structure`]).
    pub fn set_structure(&mut self, tree: &Node) {
        self.arrays.set_structure(tree);
    }

    /// Writes the pickle, every array's bytes streamed from the spool; returns `w`.
    pub fn finish(self) -> Result<W> {
        self.arrays.finish(Value::None, self.w)
    }
}

impl<W: Write> TensorWriter for ArraysWriter<W> {
    fn add(&mut self, meta: &TensorMeta, data: Payload<'_>) -> Result<()> {
        ArraysWriter::add(self, meta, data)
    }

    fn finish(self: Box<Self>) -> Result<()> {
        ArraysWriter::finish(*self).map(drop)
    }

    fn set_structure(&mut self, tree: &Node) -> Result<StructureKept> {
        ArraysWriter::set_structure(self, tree);
        Ok(StructureKept::all())
    }
}

/// `v` with every part that CPython would pickle once and refer back to replaced by an
/// equal part seen before (in `seen`, to which new ones are added), so that the writer
/// memoizes it: calls that hold no streamed bytes (a NumPy dtype and its state), text of
/// one character and byte strings of one byte (CPython keeps one object of each).
fn share(v: Value, seen: &mut Vec<Value>) -> Value {
    let v = match v {
        Value::Object(o) => {
            let o = std::sync::Arc::unwrap_or_clone(o);
            let mut parts = |vs: Vec<Value>| vs.into_iter().map(|x| share(x, seen)).collect();
            let args = parts(o.args);
            let items = parts(o.items);
            let state = o.state.map(|x| share(x, seen));
            let entries = o
                .entries
                .into_iter()
                .map(|(k, x)| (share(k, seen), share(x, seen)))
                .collect();
            let o = super::value::Object {
                args,
                items,
                state,
                entries,
                ..o
            };
            match Value::object(o) {
                v if streams(&v) => return v,
                v => v,
            }
        }
        Value::Tuple(t) => {
            return Value::tuple(t.iter().map(|x| share(x.clone(), seen)).collect());
        }
        Value::Str(ref t) if t.chars().count() == 1 => v,
        Value::Bytes(ref b) if b.len() == 1 => v,
        other => return other,
    };
    match seen.iter().find(|s| **s == v) {
        Some(s) => s.clone(),
        None => {
            seen.push(v.clone());
            v
        }
    }
}

/// True when `v` holds a streamed byte string.
fn streams(v: &Value) -> bool {
    match v {
        Value::Stream(_) => true,
        Value::Tuple(t) | Value::List(t) | Value::Set(t) | Value::FrozenSet(t) => {
            t.iter().any(streams)
        }
        Value::Dict(d) => d.iter().any(|(k, x)| streams(k) || streams(x)),
        Value::Persistent(p) => streams(p),
        Value::Object(o) => {
            o.args.iter().chain(&o.items).any(streams)
                || o.state.as_ref().is_some_and(streams)
                || o.kwargs
                    .iter()
                    .chain(&o.entries)
                    .any(|(k, x)| streams(k) || streams(x))
        }
        _ => false,
    }
}
