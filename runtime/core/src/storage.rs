//! Tensors whose bytes lie in storages named by key: the contract between an engine that
//! reads metadata naming storages (a pickle's persistent ids) and the container that
//! holds the metadata and the storages (an archive's members).
//!
//! The container implements [`Storages`]; the metadata engine asks it for the content
//! of a metadata entry, then for the location of each storage its metadata names
//! ([`StorageRef`]: which entry of the format, which key, from which byte).

use std::borrow::Cow;

use crate::error::{Error, Result};
use crate::tensor::DataLocation;

/// Where a tensor's bytes start: storage `key` of the format's entry number `entry`,
/// `skip` bytes into it. The tensor's bytes run from there to the storage's end (a view
/// may use fewer of them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorageRef<'a> {
    /// The position of the storages' entry among the format's entries.
    pub entry: usize,
    /// The storage's key (`0`, `1`, ...), borrowed from the metadata when it can be.
    pub key: Cow<'a, str>,
    /// The byte offset of the tensor's first element in the storage.
    pub skip: u64,
}

/// Where [`Storages::locate`] found a storage.
#[derive(Debug, Clone)]
pub struct Located<'a> {
    /// The bytes from the reference's `skip` to the storage's end.
    pub location: DataLocation,
    /// The name of the entry that holds the storage (errors about the tensor's extent
    /// name it), when the storage is an entry of its own.
    pub entry: Option<&'a str>,
}

/// The content of a metadata entry ([`Storages::metadata`]).
#[derive(Debug, Clone)]
pub struct Metadata<'a> {
    /// The entry's bytes, borrowed from the source when they can be.
    pub bytes: Cow<'a, [u8]>,
    /// The entry's name (errors about its content name it).
    pub entry: &'a str,
    /// The offset of `bytes` in the file when they lie there as they are (a stored
    /// member), so that values the metadata holds can be located in the file; `None`
    /// when they were decoded (a compressed member).
    pub offset: Option<u64>,
}

/// A container of metadata entries and of the storages they name (see the module docs).
pub trait Storages {
    /// The content of the format's entry number `entry` (a metadata entry, such as a
    /// pickle member) with that entry's name; `None` when the entry is optional and
    /// absent. Errors name the entry; the file is added by [`Storages::in_file`].
    fn metadata(&self, entry: usize) -> Result<Option<Metadata<'_>>>;

    /// Where the bytes of `storage` are, for the tensor named `tensor` (in messages).
    /// Fails with [`ErrorKind::NotFound`](crate::ErrorKind::NotFound) when the container
    /// has no such storage and [`ErrorKind::SizeMismatch`](crate::ErrorKind::SizeMismatch)
    /// when `skip` lies beyond its end.
    fn locate(&self, storage: &StorageRef<'_>, tensor: &str) -> Result<Located<'_>>;

    /// `e`, located in the container's file when it has one.
    fn in_file(&self, e: Error) -> Error;
}
