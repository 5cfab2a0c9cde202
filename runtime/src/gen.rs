//! The generated-code boundary: the one module through which code that
//! `tensorfmt-codegen` generates from `.fmt` schemas reaches the runtime.
//!
//! Generated modules import it as `rt` (`use ::tensorfmt_runtime::gen as rt;`) and name
//! nothing else of the runtime, so that everything they depend on is listed here, and the
//! rest of the runtime may change without regenerating code:
//!
//! - metadata: [`DType`], [`ByteOrder`], [`Order`], [`TensorInfo`], [`DataLocation`],
//!   [`TensorMeta`], [`WriteOptions`], and what an engine finds of a tensor before it is
//!   named and checked ([`TensorParts`], [`StoredData`]), and elements stored narrower
//!   than the tensor's dtype, widened as they are read ([`widen`]);
//! - errors: [`Error`], [`ErrorKind`], [`Location`], [`Result`], and [`Limits`];
//! - input: [`Source`], [`RandomAccess`], [`Window`], [`Bytes`], and [`Cursor`], which
//!   reads a layout field by field with every length checked;
//! - [`expr`]: the checked `i128` arithmetic, list access and conversions of generated
//!   expressions;
//! - output: [`LayoutBuf`] and [`Patch`], which build the bytes preceding a payload,
//!   [`Spool`], which holds tensor bytes while a header that precedes them is built, and
//!   the registry contract ([`FormatDesc`], [`TensorWriter`], [`WriteSeek`]);
//! - containers and codecs, each behind the runtime feature of its engine: the `zip`
//!   engine (`ZipIndex`, `ZipWriter`, `ZipMember`), the `pydict` (Python literal) codec and its
//!   [`PyValue`],
//!   the restricted `pickle` codec, `protobuf` and `protodoc`, key-value databases
//!   (`kv`, and the interface every backend implements: [`db`]); entry-name
//!   [`Pattern`]s and the [`Captures`] shared by an archive's entries; [`Compression`];
//! - storages named by key ([`StorageRef`], [`Storages`]), which a pickle's tensors
//!   point into and a container (a zip archive) locates;
//! - object trees: [`Node`], what a container holds besides its tensors, and
//!   [`ToNode`], which turns a generated record's values into nodes
//!   ([`FormatDesc::structure`], [`TensorWriter::set_structure`]).

pub use tensorfmt_core::cursor::Cursor;
pub use tensorfmt_core::db::{self, DbDesc, Mode, Records};
pub use tensorfmt_core::dtype::DType;
pub use tensorfmt_core::error::{Error, ErrorKind, Location, Result};
pub use tensorfmt_core::expr;
pub use tensorfmt_core::layout_writer::{LayoutBuf, Patch};
pub use tensorfmt_core::limits::Limits;
pub use tensorfmt_core::output::{AtomicFile, Spool, SpoolRanges};
pub use tensorfmt_core::parts::{StoredData, TensorParts};
pub use tensorfmt_core::pattern::{Captures, Pattern};
pub use tensorfmt_core::registry::{
    no_structure, FormatDesc, NameLimit, NameText, Payload, Replacement, RewriteFn,
    SingleTensorWriter, StorageView, StructureKept, TensorWriter, WriteOneFn, WriteSeek,
};
pub use tensorfmt_core::source::{Bytes, RandomAccess, Source, Window};
pub use tensorfmt_core::storage::{Located, Metadata, StorageRef, Storages};
pub use tensorfmt_core::table::Table;
pub use tensorfmt_core::tensor::{
    contiguous_strides, numel, ByteOrder, Compression, DataLocation, Order, TensorInfo, TensorMeta,
    WriteOptions,
};
pub use tensorfmt_core::tree::{
    case_of, dict_item, refuse_if, set_item, set_values, tagged_items, FromNode, Node, ToNode,
};
pub use tensorfmt_core::widen::widen;

#[cfg(feature = "kv")]
pub use crate::kv;
#[cfg(feature = "pickle")]
pub use crate::pickle;
#[cfg(feature = "protobuf")]
pub use crate::protobuf;
#[cfg(feature = "protobuf")]
pub use crate::protodoc;
#[cfg(feature = "pylit")]
pub use crate::pydict;
#[cfg(feature = "pylit")]
pub use crate::pydict::{Got, ItemValue, PyValue};
#[cfg(feature = "zip")]
pub use crate::zip;
#[cfg(feature = "zip")]
pub use crate::zip::{ZipIndex, ZipMember, ZipWriter};
