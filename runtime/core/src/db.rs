//! The key-value database interface, with Caffe2's semantics (`caffe2/core/db.h`): a
//! database is opened in a [`Mode`] (`Read`, `Write` appends, `New` creates), read
//! through a [`Cursor`] and written through [`Transaction`]s; [`DbDesc`] is how a format
//! of records (Caffe2's MiniDB, LMDB, LevelDB) opens one and turns a tensor into
//! records. The backends live in the key-value engine crate (`tensorfmt-kv`); a
//! database read whole is a [`crate::Source`] with its [`Records`] attached.

use std::path::Path;

use crate::error::{Error, ErrorKind, Result};

/// How a database is opened, as Caffe2's `db::Mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Read an existing database.
    Read,
    /// Add to a database, creating it when missing (MiniDB appends).
    Write,
    /// Create a new database: MiniDB truncates the file, LMDB and LevelDB refuse an
    /// existing one.
    New,
}

/// A position in a database, in the backend's order (file order for record files,
/// bytewise key order for LMDB and LevelDB).
pub trait Cursor {
    /// Goes back to the first record.
    fn seek_to_first(&mut self) -> Result<()>;
    /// Moves to the next record (past the last: not [`Cursor::valid`]).
    fn next(&mut self) -> Result<()>;
    /// Whether the cursor is on a record.
    fn valid(&self) -> bool;
    /// The current record's key.
    fn key(&self) -> &[u8];
    /// The current record's value.
    fn value(&self) -> &[u8];
    /// Whether [`Cursor::seek`] works (LMDB and LevelDB; not record files).
    fn supports_seek(&self) -> bool {
        false
    }
    /// Moves to the first record whose key is at least `key`.
    fn seek(&mut self, key: &[u8]) -> Result<()> {
        let _ = key;
        Err(Error::from(ErrorKind::Unsupported(
            "this database does not support seeking".into(),
        )))
    }
}

/// A batch of writes, applied by [`Transaction::commit`].
pub trait Transaction {
    /// Adds (or, in LMDB and LevelDB, replaces) a record.
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()>;
    /// Makes the writes so far durable as the backend does (Caffe2: MiniDB flushes, LMDB
    /// commits its transaction, LevelDB writes its batch).
    fn commit(&mut self) -> Result<()>;
}

/// An open database.
pub trait Db {
    /// A cursor on the first record (databases opened to read).
    fn cursor(&mut self) -> Result<Box<dyn Cursor + '_>>;
    /// A transaction (databases opened to write).
    fn transaction(&mut self) -> Result<Box<dyn Transaction + '_>>;
    /// Closes the database, committing what it must (a record file written atomically
    /// appears here).
    fn close(self: Box<Self>) -> Result<()>;
}

/// One record of a database read whole: its key and where its value is in the
/// [`Source`](crate::source::Source) it was read with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The key.
    pub key: Vec<u8>,
    /// Absolute offset of the value in the source.
    pub offset: u64,
    /// The value's length.
    pub len: u64,
}

/// Every record of a database, in its order, with the backend that read them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Records {
    /// `lmdb` or `leveldb`.
    pub backend: &'static str,
    /// The records.
    pub records: Vec<Record>,
}

/// What a database format provides for writing and operating on databases (Caffe2's
/// Save, Load, DBReader): its backend, how to open one, and how a tensor becomes records.
#[derive(Clone, Copy)]
pub struct DbDesc {
    /// `records` (a file), `lmdb` or `leveldb` (folders).
    pub backend: &'static str,
    /// Opens a database of the format in a mode.
    pub open: fn(&Path, Mode) -> Result<Box<dyn Db>>,
    /// A tensor's records: `(meta, bytes, elements per record (None: the format's
    /// default), put(key, value))`.
    pub encode: EncodeFn,
    /// The format's default number of elements per record.
    pub split: u64,
    /// Maps a database read whole (a source with its records, or a file of records): its
    /// tensors, which records hold them, and its values that are not tensors.
    pub map: MapFn,
}

/// See [`DbDesc::map`].
pub type MapFn = fn(&crate::Source, &crate::Limits) -> Result<Mapped>;

/// A database mapped by its format: the tensors (what indexing gives), the records that
/// hold them, and the pieces of the values that are not tensors (a `value` mapping's),
/// joined by name on demand (`tensorfmt_kv::join_values`).
#[derive(Debug, Clone, Default)]
pub struct Mapped {
    /// The tensors, each listed where its first part is.
    pub tensors: Vec<crate::TensorInfo>,
    /// Per record that holds tensors, in the database's order: what it holds.
    pub records: Vec<MappedRecord>,
    /// The tensor indices of the records, one after the other ([`Mapped::tensors_of`]).
    pub held: Vec<usize>,
    /// The pieces of values found, in record order.
    pub values: Vec<ValuePiece>,
}

impl Mapped {
    /// The indices (in [`Mapped::tensors`]) of the tensors record `r` holds parts of, in
    /// the record's order.
    pub fn tensors_of(&self, r: &MappedRecord) -> &[usize] {
        self.held.get(r.tensors.clone()).unwrap_or_default()
    }
}

/// What one record of a database holds of its tensors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MappedRecord {
    /// Where its tensors' indices are in [`Mapped::held`].
    pub tensors: std::ops::Range<usize>,
    /// Whether they are the items of a list (a mapping over a repeated field: a dataset
    /// record), not tensors of their own (a blob).
    pub items: bool,
}

/// One record's piece of a value that is not a tensor (a `value` mapping's item): the
/// value's name, where its bytes are in the source, and which of its numbered parts it
/// is, if it was saved in parts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValuePiece {
    /// The value's name.
    pub name: String,
    /// The record's key, for errors.
    pub key: String,
    /// Absolute offset of the piece's bytes in the source.
    pub offset: u64,
    /// Their length.
    pub len: u64,
    /// `(part, parts)`: the piece is part number `part` of `parts`; `None`: the value
    /// whole.
    pub part: Option<(i64, i64)>,
}

/// A value that is not a tensor, its pieces joined: its name and its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Value {
    /// The name.
    pub name: String,
    /// The bytes.
    pub data: Vec<u8>,
}

/// Takes one record (key, value) a tensor is encoded into.
pub type PutFn<'a> = dyn FnMut(&[u8], &[u8]) -> Result<()> + 'a;

/// See [`DbDesc::encode`].
pub type EncodeFn = fn(&crate::TensorMeta, &[u8], Option<u64>, &mut PutFn<'_>) -> Result<()>;
