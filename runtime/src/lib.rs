//! # tensorfmt-runtime
//!
//! The runtime that code generated from `.fmt` schemas runs on, as one crate: the core
//! ([`tensorfmt_core`]: dtypes, tensor metadata, byte sources, sinks, reads, errors,
//! limits, hashing, atomic output, the registry contract) re-exported at this crate's
//! root, and each engine behind its feature, as a module of the same name:
//!
//! | module | crate | feature |
//! |---|---|---|
//! | [`zip`] | `tensorfmt-zip` | `zip` |
//! | [`pickle`] | `tensorfmt-pickle` | `pickle` |
//! | [`pydict`] | `tensorfmt-pylit` | `pylit` |
//! | [`protobuf`], [`protodoc`] | `tensorfmt-protobuf` | `protobuf` |
//! | [`kv`] | `tensorfmt-kv` | `kv` (record files), `lmdb`, `leveldb` |
//! | `cuda` | `tensorfmt-cuda` | `cuda` |
//!
//! It knows nothing of the schema language. Generated code reaches the runtime only
//! through [`gen`].
#![warn(missing_docs)]

pub use tensorfmt_core::half;
pub use tensorfmt_core::{
    convert, cursor, db, dtype, element, error, hash, layout_writer, limits, mapguard, output,
    pattern, read, registry, sink, source, storage, tensor, tree,
};
pub use tensorfmt_core::{
    ByteOrder, Bytes, Compression, DType, DataLocation, Element, Encoded, Error, ErrorKind,
    ExternalData, Limits, Location, Order, RandomAccess, Result, Source, TensorInfo, TensorMeta,
    WriteOptions,
};

#[cfg(feature = "cuda")]
pub use tensorfmt_cuda as cuda;
#[cfg(feature = "kv")]
pub use tensorfmt_kv as kv;
#[cfg(feature = "pickle")]
pub use tensorfmt_pickle as pickle;
#[cfg(feature = "protobuf")]
pub use tensorfmt_protobuf as protobuf;
#[cfg(feature = "protobuf")]
pub use tensorfmt_protobuf::doc as protodoc;
#[cfg(feature = "pylit")]
pub use tensorfmt_pylit as pydict;
#[cfg(feature = "zip")]
pub use tensorfmt_zip as zip;

pub mod gen;
