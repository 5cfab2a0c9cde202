//! The scanner's symbolic values: what it keeps of the objects a pickle builds (strings,
//! numbers, containers of them, globals, the objects calls make) so that names built at
//! load time (`STACK_GLOBAL` of memoized strings) resolve, and the few states a caller
//! asks about (a joblib array wrapper's) can be read. Hand-written with the scanner: no
//! format description says what an arbitrary pickle builds.

use std::borrow::Cow;
use std::sync::Arc;

/// A value on the scanner's stack, in its memo or in a container: 16 bytes, copied freely.
/// Containers and strings live in the walker's arenas and are named by index.
#[derive(Clone, Copy, Debug)]
pub(super) enum S {
    /// A value made up after a fault, or inert data (an array read inline): calling it
    /// fails in Python, so it adds nothing to the verdict.
    Inert,
    /// A value the scanner cannot name (an unresolved `STACK_GLOBAL`, an `EXT` code):
    /// using it as a callable is dangerous.
    Opaque,
    /// What `persistent_load` returns for a persistent id.
    Persistent,
    None,
    Bool(bool),
    Int(i64),
    /// An integer past 64 bits.
    BigInt,
    Float,
    /// A text: its index in the walker's leaves.
    Text(u32),
    /// A byte string: its index in the walker's leaves.
    Bytes(u32),
    /// A global: its index in the scan's globals.
    Global(u32),
    /// A container or an object made by a call: its index in the walker's objects.
    Obj(u32),
}

/// How the bytes of a text or byte string are held.
#[derive(Clone, Debug)]
pub(super) enum Leaf {
    /// UTF-8 text in the pickle at `offset` (checked when read).
    Utf8 { offset: usize, len: usize },
    /// A Python 2 `str` in the pickle, one character per byte (as `encoding='latin1'`).
    Latin1 { offset: usize, len: usize },
    /// Text decoded from escapes (protocol 0 `UNICODE`).
    Text(Arc<str>),
    /// Bytes in the pickle.
    Range { offset: usize, len: usize },
    /// A Python 2 `str` decoded from escapes (protocol 0 `STRING`): bytes, and text one
    /// character per byte.
    Owned(Arc<[u8]>),
}

impl Leaf {
    /// The text of a text leaf (a Python 2 `str` read as Latin-1, as
    /// `encoding='latin1'` reads it).
    pub(super) fn text<'d>(&'d self, data: &'d [u8]) -> Option<Cow<'d, str>> {
        match self {
            Leaf::Utf8 { offset, len } => std::str::from_utf8(&data[*offset..*offset + *len])
                .ok()
                .map(Cow::Borrowed),
            Leaf::Latin1 { offset, len } => Some(Cow::Owned(
                data[*offset..*offset + *len]
                    .iter()
                    .map(|&b| b as char)
                    .collect(),
            )),
            Leaf::Text(t) => Some(Cow::Borrowed(t)),
            Leaf::Owned(b) => Some(Cow::Owned(b.iter().map(|&c| c as char).collect())),
            Leaf::Range { .. } => None,
        }
    }

    /// The bytes of a byte string leaf (a Python 2 `str` is one too).
    pub(super) fn bytes(&self) -> Option<ByteData> {
        match self {
            Leaf::Range { offset, len } | Leaf::Latin1 { offset, len } => Some(ByteData::Range {
                offset: *offset,
                len: *len,
            }),
            Leaf::Owned(b) => Some(ByteData::Owned(b.clone())),
            Leaf::Utf8 { .. } | Leaf::Text(_) => None,
        }
    }

    /// What the leaf holds in memory beyond its slot.
    pub(super) fn heap(&self) -> u64 {
        match self {
            Leaf::Text(t) => t.len() as u64 + 16,
            Leaf::Owned(b) => b.len() as u64 + 16,
            _ => 0,
        }
    }
}

/// An object of the walker: a container, or what a call made.
#[derive(Debug)]
pub(super) enum Obj {
    Tuple(Vec<S>),
    List(Vec<S>),
    Dict(Vec<(S, S)>),
    Set(Vec<S>),
    FrozenSet(Vec<S>),
    Made(Made),
}

/// An object made by a call (`REDUCE`, `NEWOBJ`, `NEWOBJ_EX`, `INST`, `OBJ`).
#[derive(Debug)]
pub(super) struct Made {
    /// What was called.
    pub(super) callee: S,
    /// The argument tuple (or [`S::Inert`] when it was not one).
    pub(super) args: S,
    /// The state a `BUILD` gave it, the last one.
    pub(super) state: Option<S>,
}

/// Bytes a pickle holds: a range of the scanned buffer, or decoded bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ByteData {
    /// `len` bytes at `offset` of the buffer that was scanned.
    Range {
        /// Offset in the buffer.
        offset: usize,
        /// Length in bytes.
        len: usize,
    },
    /// Bytes decoded from the pickle's text (escapes, `_codecs.encode(text, 'latin1')`).
    Owned(Arc<[u8]>),
}

impl ByteData {
    /// The bytes, given the buffer that was scanned.
    pub fn get<'d>(&'d self, data: &'d [u8]) -> &'d [u8] {
        match self {
            ByteData::Range { offset, len } => data.get(*offset..*offset + *len).unwrap_or(&[]),
            ByteData::Owned(b) => b,
        }
    }

    /// The number of bytes.
    pub fn len(&self) -> usize {
        match self {
            ByteData::Range { len, .. } => *len,
            ByteData::Owned(b) => b.len(),
        }
    }

    /// Whether there are no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A value of the pickle as the scanner understood it, copied out of its arenas for a
/// caller ([`crate::ScanHooks`], a pickle's result): containers nested at most
/// `Limits::max_depth` deep and at most [`MAX_NODES`] values in all, the rest
/// [`SymValue::Unknown`].
#[derive(Clone, Debug, PartialEq)]
pub enum SymValue {
    /// A value the scanner did not follow, or past the bounds of the copy.
    Unknown,
    /// `None`.
    None,
    /// A boolean.
    Bool(bool),
    /// An integer that fits 64 bits.
    Int(i64),
    /// An integer past 64 bits.
    BigInt,
    /// A float.
    Float,
    /// A text.
    Str(String),
    /// A byte string (and `_codecs.encode(text, 'latin1')`, as Python makes it).
    Bytes(ByteData),
    /// A global, by module and name.
    Global {
        /// Its module.
        module: String,
        /// Its name.
        name: String,
    },
    /// A tuple.
    Tuple(Vec<SymValue>),
    /// A list.
    List(Vec<SymValue>),
    /// A dict's items in order.
    Dict(Vec<(SymValue, SymValue)>),
    /// A set or frozenset.
    Set(Vec<SymValue>),
    /// An object a call made: what was called, its arguments, its `BUILD` state.
    Object {
        /// What was called (a [`SymValue::Global`] when it was one).
        callee: Box<SymValue>,
        /// The argument tuple.
        args: Box<SymValue>,
        /// The state `BUILD` gave it.
        state: Option<Box<SymValue>>,
    },
}

/// Most values one copy ([`SymValue`]) holds.
pub const MAX_NODES: usize = 1 << 16;

impl SymValue {
    /// The text, when this is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            SymValue::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The integer, when this is one (a boolean is one, as in Python).
    pub fn as_int(&self) -> Option<i64> {
        match self {
            SymValue::Int(i) => Some(*i),
            SymValue::Bool(b) => Some(*b as i64),
            _ => None,
        }
    }

    /// The value of `key` (a text) in a dict.
    pub fn get(&self, key: &str) -> Option<&SymValue> {
        match self {
            SymValue::Dict(items) => items
                .iter()
                .rev()
                .find(|(k, _)| k.as_str() == Some(key))
                .map(|(_, v)| v),
            _ => None,
        }
    }

    /// The items of a tuple or list.
    pub fn items(&self) -> Option<&[SymValue]> {
        match self {
            SymValue::Tuple(v) | SymValue::List(v) => Some(v),
            _ => None,
        }
    }

    /// `module.name` of a global, or of the callee of an object.
    pub fn global_path(&self) -> Option<String> {
        match self {
            SymValue::Global { module, name } => Some(format!("{module}.{name}")),
            SymValue::Object { callee, .. } => callee.global_path(),
            _ => None,
        }
    }
}
