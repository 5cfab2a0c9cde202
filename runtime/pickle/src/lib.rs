//! The pickle codec: a restricted pickle reader ([`read`], [`read_prefix`]) and a
//! writer of protocol 2 or 4 ([`write()`], [`Writer`]) that can take byte strings from
//! a source as it writes them ([`Value::Stream`], [`Streams`]).
//!
//! Nothing here is specific to one framework. What a pickle may name is data: a
//! [`Rules`] value lists the allowed globals (`module.name`) and what calling each one
//! builds (a [`Kind`]), whether persistent ids are accepted, and the protocol range. The
//! schema's `pickle` declarations supply it. Any `GLOBAL` or `STACK_GLOBAL` that the rules
//! do not list is refused at that opcode, before anything else happens; `REDUCE`,
//! `NEWOBJ` and `BUILD` apply only to allowed callables, and `INST`, `OBJ` and `EXT*` are
//! always refused. Nothing is ever imported or run: the result is a [`Value`] tree that
//! records calls as [`Object`]s.
//!
//! Around the codec, what formats that keep tensors in pickles share, generic over the
//! format's data: the conversions of a matched call's arguments ([`name`], [`dims`],
//! [`lookup`], ...); indexing the tensors a pickle's calls describe, their bytes located
//! in storages by the container ([`Index`] over a zip archive's members, [`read_file`]
//! for pickles read back to back followed by records); and the bookkeeping of a writer
//! ([`Objects`]: storages shared by views, the root object, its pickle; [`Arrays`]: a
//! file that is one pickle holding its arrays' bytes, spooled until the tree is done).
//!
//! Pickles whose byte strings are array data (NumPy's) are read with
//! [`Rules::byte_ranges`]: their byte strings stay in the file ([`Value::Range`]), and
//! [`data`] gives a tensor's location in it, so nothing of an array is copied at index
//! time.
//!
//! Values that the pickle memoizes are shared (`Arc`), never copied, so a pickle that
//! references one big object a million times costs memory in proportion to its
//! references. The tree is therefore a DAG: code that walks it should not assume every
//! node is visited once.
#![warn(missing_docs)]

mod args;
mod arrays;
mod data;
mod detect;
mod escape;
mod index;
mod numpy;
mod objects;
mod read;
mod repr;
mod rules;
mod scan;
mod tree;
mod value;
mod walk;
mod write;

pub use args::{attr, dims, index, ints, is_none, item, len, lookup, name, state, uint};
pub use arrays::{Arrays, ArraysWriter, ObjectFn};
pub use data::{data, data_len, Held, Latin1Text};
pub use detect::{names_global, starts_as_pickle, starts_naming};
pub use index::{
    place_array, read_file, read_one, Check, Field, FileSpec, Index, Mapped, OneKind, OneSpec,
    Place, Record, TensorNames,
};
pub use numpy::is_value_array;
pub use objects::{build, call, table_global, table_key, tuple, Objects, Storage};
pub use read::{read, read_prefix};
pub use rules::{InlineFn, Kind, Rules};
pub use scan::{
    scan_pickle, ByteData, CallKind, CallRef, Callee, Capture, Fault, FaultKind, GlobalRef, Inline,
    InlineData, PickleScan, ScanHooks, ScanOptions, StorageId, SymValue, Unresolved, Verdict,
    Watch, MAX_NESTED, MAX_NODES, MAX_OFFSETS,
};
pub use tree::{from_tree, to_tree};
pub use value::{ByteRange, Global, Object, Stream, Value};
pub use walk::find_objects;

/// The default memory a pickle of `input_len` bytes may take: its objects as the reader
/// makes them ([`read`]: the stack, memo, containers, calls and strings, and the value
/// made of them), then that value and its object tree ([`to_tree`]), and the names of
/// the tensors a walk lists ([`find_objects`]): 128 MiB and a byte per byte of the
/// pickle. The readers use
/// [`Limits::tree_budget`](tensorfmt_core::limits::Limits::tree_budget), which is this
/// unless `Limits::max_tree_bytes` is set. Memo-shared values are expanded at each
/// reference by the walk and the tree, so a small pickle that references a value a
/// billion times ("billion laughs") is refused when its expansion reaches this budget,
/// before it is allocated.
pub fn memory_budget(input_len: usize) -> u64 {
    tensorfmt_core::limits::Limits::default().tree_budget(input_len as u64)
}

/// Refused when `spent` bytes would exceed `budget`.
fn over_budget(what: &'static str, budget: u64, spent: u64) -> tensorfmt_core::error::Error {
    tensorfmt_core::error::ErrorKind::Limit {
        what,
        limit: budget,
        actual: spent,
    }
    .into()
}
pub use write::{write, write_to, Streams, Writer};

const CODEC: &str = "pickle";

fn codec_error(offset: usize, message: impl Into<String>) -> tensorfmt_core::error::Error {
    tensorfmt_core::error::Error::new(
        tensorfmt_core::error::ErrorKind::Codec {
            codec: CODEC,
            message: message.into(),
        },
        tensorfmt_core::error::Location::default().with_offset(offset as u64),
    )
}
