//! What every generated format module exports for the high-level API: a descriptor with
//! its name, extensions, detector, indexer and writer constructor.

use std::io::{Read, Seek, Write};

use crate::error::Result;
use crate::limits::Limits;
use crate::source::Source;
use crate::tensor::{TensorInfo, TensorMeta, WriteOptions};

/// A writable, seekable byte sink.
pub trait WriteSeek: Write + Seek {}

impl<T: Write + Seek> WriteSeek for T {}

/// A streaming writer of one container: tensors are added one at a time, each from a
/// reader yielding exactly `meta.nbytes()` bytes in `meta`'s order and byte order.
pub trait TensorWriter {
    /// Appends one tensor.
    fn add(&mut self, meta: &TensorMeta, data: &mut dyn Read) -> Result<()>;
    /// Writes whatever the container needs after its last tensor (central directory,
    /// trailers) and flushes.
    fn finish(self: Box<Self>) -> Result<()>;
}

/// Builds a writer over an output.
pub type WriterCtor =
    for<'a> fn(Box<dyn WriteSeek + 'a>, &WriteOptions) -> Result<Box<dyn TensorWriter + 'a>>;

/// A format as the generated code describes it.
#[derive(Clone, Copy)]
pub struct FormatDesc {
    /// Public name (CLI `--to`, JSON `format`).
    pub name: &'static str,
    /// File extensions, without the dot, that map to this format.
    pub extensions: &'static [&'static str],
    /// True when the source looks like this format (magic, container entries).
    pub detect: fn(&Source, &Limits) -> bool,
    /// All tensor metadata, without reading payloads.
    pub index: fn(&Source, &Limits) -> Result<Vec<TensorInfo>>,
    /// A streaming writer.
    pub writer: WriterCtor,
}

impl std::fmt::Debug for FormatDesc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FormatDesc")
            .field("name", &self.name)
            .field("extensions", &self.extensions)
            .finish()
    }
}
