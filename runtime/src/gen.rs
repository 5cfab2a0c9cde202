//! The generated-code boundary: the one module through which code that
//! `tensorfmt-codegen` generates from `.fmt` schemas reaches the runtime.
//!
//! Generated modules import it as `rt` (`use ::tensorfmt_runtime::gen as rt;`) and name
//! nothing else of the runtime, so that everything they depend on is listed here, and the
//! rest of the runtime may change without regenerating code:
//!
//! - metadata: [`DType`], [`ByteOrder`], [`Order`], [`TensorInfo`], [`DataLocation`],
//!   [`TensorMeta`], [`WriteOptions`];
//! - errors: [`Error`], [`ErrorKind`], [`Location`], [`Result`], and [`Limits`];
//! - input: [`Source`], [`RandomAccess`], [`Window`], [`Bytes`], and [`Cursor`], which
//!   reads a layout field by field with every length checked;
//! - output: [`LayoutBuf`] and [`Patch`], which build the bytes preceding a payload, and
//!   the registry contract ([`FormatDesc`], [`TensorWriter`], [`WriteSeek`]);
//! - containers and codecs: the [`zip`] engine ([`ZipIndex`], [`ZipWriter`],
//!   [`ZipMember`], [`Compression`]), entry-name [`Pattern`]s and the [`Captures`] shared by an archive's entries, and the [`pydict`]
//!   (Python literal) codec, and the restricted [`pickle`] codec;
//! - object trees: [`Node`], what a container holds besides its tensors
//!   ([`FormatDesc::structure`], [`TensorWriter::set_structure`]).

pub use crate::cursor::Cursor;
pub use crate::dtype::DType;
pub use crate::error::{Error, ErrorKind, Location, Result};
pub use crate::layout_writer::{LayoutBuf, Patch};
pub use crate::limits::Limits;
pub use crate::output::AtomicFile;
pub use crate::pattern::{Captures, Pattern};
pub use crate::registry::{
    no_structure, FormatDesc, Payload, RewriteFn, StorageView, TensorWriter, WriteSeek,
};
pub use crate::source::{Bytes, RandomAccess, Source, Window};
pub use crate::tensor::{
    contiguous_strides, numel, ByteOrder, DataLocation, Order, TensorInfo, TensorMeta, WriteOptions,
};
pub use crate::tree::Node;
pub use crate::zip::{Compression, ZipIndex, ZipMember, ZipWriter};
pub use crate::{kv, pickle, protobuf, protodoc, pydict, zip};
