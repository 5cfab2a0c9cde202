//! # tensorfmt-runtime
//!
//! The runtime shared by all code that `tensorfmt-codegen` generates from `.fmt` schemas:
//! dtypes, tensor metadata, byte sources, push-style sinks, the zip engine, embedded
//! codecs, checksums, limits and errors. It knows nothing of the schema language.
//!
//! Generated code reaches the runtime only through [`gen`].
#![warn(missing_docs)]

pub mod convert;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod cursor;
pub mod dtype;
pub mod error;
pub mod gen;
pub mod hash;
pub mod kv;
pub mod layout_writer;
pub mod limits;
pub mod output;
pub mod pattern;
pub mod pickle;
pub mod protobuf;
pub mod protodoc;
pub mod pydict;
pub mod read;
pub mod registry;
pub mod sink;
pub mod source;
pub mod tensor;
pub mod tree;
pub mod zip;

pub use dtype::DType;
pub use error::{Error, ErrorKind, Location, Result};
pub use limits::Limits;
pub use source::{Bytes, RandomAccess, Source};
pub use tensor::{ByteOrder, DataLocation, Order, TensorInfo, TensorMeta, WriteOptions};
