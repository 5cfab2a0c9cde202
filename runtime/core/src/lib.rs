//! # tensorfmt-core
//!
//! What every part of tensorfmt shares, and nothing format- or container-specific:
//! dtypes, tensor metadata and where a tensor's bytes are ([`DataLocation`]), byte
//! sources ([`Source`]: a memory map, a buffer or a stream), push-style sinks and reading
//! into them ([`read`]), element conversions, tensor SHA-256, atomic output, the layout
//! cursor and buffer that generated layouts use, entry-name patterns, object trees,
//! limits, errors, and the contracts engines and generated code implement: the
//! [`registry`] of formats, the key-value database interface ([`db`]),
//! [`Encoded`] bytes (a zip member's content, a protobuf field's values) that an
//! engine crate knows how to read, and [`storage`] (a container that locates the
//! storages a metadata engine's tensors name by key).
//!
//! Engine crates (zip, pickle, Python literals, protobuf, key-value databases, CUDA)
//! depend on this crate and on nothing else of tensorfmt.
#![warn(missing_docs)]

pub mod convert;
pub mod cursor;
pub mod db;
pub mod dtype;
pub mod element;
pub mod error;
pub mod expr;
pub mod hash;
pub mod layout_writer;
pub mod limits;
pub mod mapguard;
pub mod output;
pub mod parts;
pub mod pattern;
pub mod read;
pub mod registry;
pub mod sink;
pub mod source;
pub mod storage;
pub mod table;
pub mod tensor;
pub mod tree;
pub mod widen;

pub use dtype::DType;
pub use element::Element;
pub use error::{Error, ErrorKind, Location, Result};
/// The `half` crate, whose `f16` and `bf16` are [`Element`]s.
pub use half;
pub use limits::Limits;
pub use source::{Bytes, RandomAccess, Source};
pub use tensor::{
    ByteOrder, Compression, DataLocation, Encoded, ExternalData, Order, TensorInfo, TensorMeta,
    WriteOptions,
};
