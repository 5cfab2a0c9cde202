//! Key-value databases, behind one interface with Caffe2's semantics (`caffe2/core/db.h`):
//! a database is opened in a [`Mode`] (`Read`, `Write` appends, `New` creates), read
//! through a [`Cursor`] and written through [`Transaction`]s. Backends here: LMDB
//! ([`lmdb`], with `heed`) and LevelDB ([`leveldb`], with `rusty-leveldb`, which reads
//! and writes the files real LevelDB does), opened as a format's [`OpenOptions`] say (its
//! engine arguments: Caffe2's map size, write buffer, ...). Files are untrusted: LMDB is
//! read by a bounds-checked reader of `data.mdb` ([`lmdb_read`]; liblmdb, which trusts
//! its file, only writes), LevelDB through a read-only view of its folder
//! ([`leveldb_env`]) with the library's panics turned into errors. Record-file databases whose
//! record layout a schema describes (Caffe2's MiniDB) implement the same traits in
//! generated code.
//!
//! For reading tensors a whole database is taken as a [`Source`] and its [`Records`]:
//! LMDB's `data.mdb` is memory-mapped and every value located by its offset in the file
//! (zero-copy); LevelDB's values, stored in compressed blocks, are copied once into one
//! buffer.
#![warn(missing_docs)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use format::{
    backend_records, detect_records, folder_writer, is_backend, read_records, ReadRecordFn,
    RecordWriter, WriteRecordFn, DETECT_PREFIX,
};
pub use tensorfmt_core::db::{
    Cursor, Db, DbDesc, EncodeFn, MapFn, Mapped, MappedRecord, Mode, PutFn, Record, Records,
    Transaction, Value, ValuePiece,
};
use tensorfmt_core::error::{Error, ErrorKind, Location, Result};

/// The longest key an LMDB database takes, in bytes: liblmdb's `MDB_MAXKEYSIZE` as it is
/// built by default (and by heed), which `mdb_env_get_maxkeysize` reports; a longer key
/// fails to be put. A format over LMDB bounds its tensors' names by it
/// (`FormatDesc::max_name`).
pub const LMDB_MAX_KEY_BYTES: u64 = 511;
use tensorfmt_core::output::FolderKind;
use tensorfmt_core::parts::TensorParts;
use tensorfmt_core::pattern::Pattern;
use tensorfmt_core::source::Source;

mod format;
#[cfg(feature = "leveldb")]
pub mod leveldb_env;
pub mod lmdb_read;

fn db_error(path: &Path, what: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::Invalid(what.to_string()), Location::file(path))
}

/// Whether `dir` looks like an LMDB environment (`data.mdb` inside).
pub fn is_lmdb(dir: &Path) -> bool {
    dir.join("data.mdb").is_file()
}

/// Whether `dir` looks like a LevelDB database (`CURRENT` and a `MANIFEST-*` inside).
pub fn is_leveldb(dir: &Path) -> bool {
    dir.join("CURRENT").is_file()
        && std::fs::read_dir(dir).is_ok_and(|mut it| {
            it.any(|e| e.is_ok_and(|e| e.file_name().to_string_lossy().starts_with("MANIFEST-")))
        })
}

/// Whether `dir` holds a file named as a database's (`data.mdb`, `CURRENT`), whatever it
/// is: such a folder is opened by [`open_dir`], which names a member that is not a
/// regular file.
pub fn names_a_database(dir: &Path) -> bool {
    ["data.mdb", "CURRENT"]
        .iter()
        .any(|f| std::fs::symlink_metadata(dir.join(f)).is_ok())
}

/// Whether `name` is one of the files the backend `backend` writes in its folder:
/// LMDB's `data.mdb` and `lock.mdb`; LevelDB's `CURRENT`, `LOCK`, `LOG`, `LOG.old`,
/// `MANIFEST-N`, `N.log`, `N.ldb`, `N.sst` and `N.dbtmp` (`N` digits).
pub fn owns_file(backend: &str, name: &str) -> bool {
    match backend {
        "lmdb" => lmdb_owns(name),
        "leveldb" => leveldb_owns(name),
        _ => false,
    }
}

fn lmdb_owns(name: &str) -> bool {
    name == "data.mdb" || name == "lock.mdb"
}

fn leveldb_owns(name: &str) -> bool {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if let Some(n) = name.strip_prefix("MANIFEST-") {
        return digits(n);
    }
    match name.split_once('.') {
        _ if matches!(name, "CURRENT" | "LOCK" | "LOG" | "LOG.old") => true,
        Some((n, ext)) => digits(n) && matches!(ext, "log" | "ldb" | "sst" | "dbtmp"),
        None => false,
    }
}

/// Checks that the database files in `dir` are a database of the backend `backend`
/// (`lmdb`, `leveldb`) by their headers, without opening it (opening LevelDB may write to
/// it): LMDB's `data.mdb` has a valid meta page; LevelDB's `CURRENT` names a
/// `MANIFEST-N` file of the folder. The error says what is wrong.
pub fn check_database(dir: &Path, backend: &str) -> Result<()> {
    match backend {
        "lmdb" => check_lmdb(dir),
        "leveldb" => check_leveldb(dir),
        other => Err(db_error(dir, format!("no database backend `{other}`"))),
    }
}

fn check_lmdb(dir: &Path) -> Result<()> {
    let data = dir.join("data.mdb");
    if !std::fs::symlink_metadata(&data).is_ok_and(|m| m.is_file()) {
        return Err(db_error(dir, "no data.mdb"));
    }
    let source = Source::open(&data)?;
    let bytes = source
        .bytes()
        .ok_or_else(|| db_error(&data, "data.mdb could not be mapped"))?;
    lmdb_read::Reader::new(&data, bytes.as_bytes()).map(|_| ())
}

fn check_leveldb(dir: &Path) -> Result<()> {
    let current = dir.join("CURRENT");
    let is_file = |p: &Path| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_file());
    if !is_file(&current) {
        return Err(db_error(dir, "no CURRENT file"));
    }
    // CURRENT holds the name of the manifest and a newline: a few bytes.
    let mut head = Vec::new();
    std::io::Read::read_to_end(
        &mut std::io::Read::take(
            std::fs::File::open(&current).map_err(|e| Error::from(e).in_file(&current))?,
            64,
        ),
        &mut head,
    )
    .map_err(|e| Error::from(e).in_file(&current))?;
    let named = std::str::from_utf8(&head)
        .ok()
        .and_then(|t| t.strip_suffix('\n'))
        .filter(|m| m.starts_with("MANIFEST-") && leveldb_owns(m));
    match named {
        Some(m) if is_file(&dir.join(m)) => Ok(()),
        Some(m) => Err(db_error(
            &current,
            format!("it names {m}, which is not there"),
        )),
        None => Err(db_error(&current, "it does not name a MANIFEST file")),
    }
}

/// The rule of a database folder of the backend `backend` at a save's destination
/// ([`FolderKind`]): its files are those of [`owns_file`], a database when
/// [`check_database`] says so; other files beside a database are kept; a folder holding
/// no database is refused unless empty. `None` for a backend of no folder.
pub fn folder_kind(backend: &str) -> Option<FolderKind<'static>> {
    match backend {
        "lmdb" => Some(FolderKind {
            what: "an LMDB environment",
            owns: &lmdb_owns,
            check: &check_lmdb,
            adopts: false,
        }),
        "leveldb" => Some(FolderKind {
            what: "a LevelDB database",
            owns: &leveldb_owns,
            check: &check_leveldb,
            adopts: false,
        }),
        _ => None,
    }
}

/// Reads the database folder `dir` whole (LMDB or LevelDB, by its files): the source its
/// values are in, with its records attached ([`Source::records`]).
pub fn open_dir(dir: &Path) -> Result<Source> {
    only_files_and_folders(dir)?;
    if is_lmdb(dir) {
        return lmdb_snapshot(dir);
    }
    if is_leveldb(dir) {
        #[cfg(feature = "leveldb")]
        return leveldb::snapshot(dir);
        #[cfg(not(feature = "leveldb"))]
        return Err(without("a LevelDB database", "leveldb", dir));
    }
    Err(Error::new(
        ErrorKind::Unsupported(
            "a folder that is neither an LMDB environment (data.mdb) nor a LevelDB \
             database (CURRENT, MANIFEST-*)"
                .into(),
        ),
        Location::file(dir),
    ))
}

/// Refuses a database folder holding a FIFO, a device or a socket: the backends open
/// their files blocking, and a FIFO with no writer would hang the open.
fn only_files_and_folders(dir: &Path) -> Result<()> {
    let io = |e: std::io::Error| Error::new(ErrorKind::Io(e), Location::file(dir));
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let entry = entry.map_err(io)?;
        // Followed through symbolic links: what the backend would open.
        let Ok(meta) = std::fs::metadata(entry.path()) else {
            continue;
        };
        if !meta.is_file() && !meta.is_dir() {
            let name = entry.file_name().to_string_lossy().into_owned();
            return Err(Error::new(
                ErrorKind::Unsupported(format!(
                    "the database folder's member '{}' is not a regular file",
                    tensorfmt_core::error::escape_name(&name)
                )),
                Location::file(dir),
            ));
        }
    }
    Ok(())
}

/// The error for a database whose backend this build leaves out: `what` it cannot do,
/// and the feature that adds it.
#[cfg(any(not(feature = "leveldb"), not(feature = "lmdb")))]
fn without(what: &str, feature: &str, dir: &Path) -> Error {
    Error::new(
        ErrorKind::Unsupported(format!(
            "{what}, which this build does without: enable tensorfmt's `{feature}` feature"
        )),
        Location::file(dir),
    )
}

/// A cursor over records whose values are in memory (a map or a buffer), in order.
pub struct RecordsCursor {
    bytes: tensorfmt_core::source::Bytes,
    records: Vec<Record>,
    pos: usize,
    seek: bool,
}

impl RecordsCursor {
    /// A cursor on the first of `records`, whose values are in `bytes` (checked when
    /// read); `seek`: the records are in key order and [`Cursor::seek`] works.
    pub fn new(bytes: tensorfmt_core::source::Bytes, records: Vec<Record>, seek: bool) -> Self {
        RecordsCursor {
            bytes,
            records,
            pos: 0,
            seek,
        }
    }
}

impl Cursor for RecordsCursor {
    fn seek_to_first(&mut self) -> Result<()> {
        self.pos = 0;
        Ok(())
    }
    fn next(&mut self) -> Result<()> {
        self.pos = (self.pos + 1).min(self.records.len());
        Ok(())
    }
    fn valid(&self) -> bool {
        self.pos < self.records.len()
    }
    fn key(&self) -> &[u8] {
        self.records.get(self.pos).map_or(&[], |r| &r.key)
    }
    fn value(&self) -> &[u8] {
        self.records
            .get(self.pos)
            .and_then(|r| {
                let start = usize::try_from(r.offset).ok()?;
                let end = start.checked_add(usize::try_from(r.len).ok()?)?;
                self.bytes.as_bytes().get(start..end)
            })
            .unwrap_or_default()
    }
    fn supports_seek(&self) -> bool {
        self.seek
    }
    fn seek(&mut self, key: &[u8]) -> Result<()> {
        if !self.seek {
            return Err(Error::from(ErrorKind::Unsupported(
                "this database does not support seeking".into(),
            )));
        }
        self.pos = self.records.partition_point(|r| r.key.as_slice() < key);
        Ok(())
    }
}

/// What the code generated for a file of records provides: every record of a source,
/// and one record written.
#[derive(Clone, Copy)]
pub struct RecordCodec {
    /// Every record of the source, in file order.
    pub read: fn(&Source, &tensorfmt_core::Limits) -> Result<Vec<Record>>,
    /// Writes one record; returns the bytes written.
    pub write: fn(&mut dyn std::io::Write, &[u8], &[u8]) -> Result<u64>,
}

/// A file of records (Caffe2's MiniDB) whose layout generated code reads and writes:
/// `New` writes a new file atomically (it appears, replacing any old one, on
/// [`Db::close`]), `Write` appends, `Read` reads it whole (memory-mapped).
pub struct RecordFile {
    path: PathBuf,
    mode: Mode,
    codec: RecordCodec,
    new: Option<std::io::BufWriter<tensorfmt_core::output::AtomicFile>>,
    append: Option<std::io::BufWriter<std::fs::File>>,
}

/// Opens the record file `path` in `mode`.
pub fn open_record_file(path: &Path, mode: Mode, codec: RecordCodec) -> Result<RecordFile> {
    let (mut new, mut append) = (None, None);
    match mode {
        Mode::New => {
            let f =
                tensorfmt_core::output::AtomicFile::create(path).map_err(|e| e.in_file(path))?;
            new = Some(std::io::BufWriter::with_capacity(1 << 20, f));
        }
        Mode::Write => {
            let f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| Error::from(e).in_file(path))?;
            append = Some(std::io::BufWriter::with_capacity(1 << 20, f));
        }
        Mode::Read => {
            if !path.is_file() {
                return Err(db_error(path, "Cannot open file: no such file"));
            }
        }
    }
    Ok(RecordFile {
        path: path.to_path_buf(),
        mode,
        codec,
        new,
        append,
    })
}

struct RecordFileTxn<'a> {
    file: &'a mut RecordFile,
}

impl Transaction for RecordFileTxn<'_> {
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        let path = self.file.path.clone();
        let w: &mut dyn std::io::Write = match (&mut self.file.new, &mut self.file.append) {
            (Some(w), _) => w,
            (_, Some(w)) => w,
            _ => {
                return Err(db_error(
                    &path,
                    "a database opened to read takes no transaction",
                ))
            }
        };
        (self.file.codec.write)(w, key, value)
            .map(|_| ())
            .map_err(|e| e.in_file(&path))
    }
    fn commit(&mut self) -> Result<()> {
        use std::io::Write;
        if let Some(w) = self.file.new.as_mut() {
            w.flush()?;
        }
        if let Some(w) = self.file.append.as_mut() {
            w.flush()?;
        }
        Ok(())
    }
}

impl Db for RecordFile {
    fn cursor(&mut self) -> Result<Box<dyn Cursor + '_>> {
        if self.mode != Mode::Read {
            return Err(db_error(
                &self.path,
                "a cursor needs a database opened to read",
            ));
        }
        let src = Source::open(&self.path)?;
        let records = (self.codec.read)(&src, &tensorfmt_core::Limits::default())
            .map_err(|e| e.in_file(&self.path))?;
        let bytes = src
            .bytes()
            .cloned()
            .ok_or_else(|| db_error(&self.path, "the file could not be mapped"))?;
        Ok(Box::new(RecordsCursor::new(bytes, records, false)))
    }
    fn transaction(&mut self) -> Result<Box<dyn Transaction + '_>> {
        if self.mode == Mode::Read {
            return Err(db_error(
                &self.path,
                "a database opened to read takes no transaction",
            ));
        }
        Ok(Box::new(RecordFileTxn { file: self }))
    }
    fn close(self: Box<Self>) -> Result<()> {
        let RecordFile {
            path, new, append, ..
        } = *self;
        if let Some(w) = new {
            let f = w
                .into_inner()
                .map_err(|e| Error::from(e.into_error()).in_file(&path))?;
            f.commit().map_err(|e| e.in_file(&path))?;
        }
        if let Some(w) = append {
            let f = w
                .into_inner()
                .map_err(|e| Error::from(e.into_error()).in_file(&path))?;
            f.sync_all().map_err(|e| Error::from(e).in_file(&path))?;
        }
        Ok(())
    }
}

/// How a backend opens a database: a kv format's engine arguments (`engine kv(backend =
/// lmdb, map_size = N)`), each of one backend; `None`: the backend's default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpenOptions {
    /// LMDB: the map size in bytes, the most a written environment grows to (address
    /// space, not disk), rounded up to 64 KiB. Reading maps what `data.mdb` holds
    /// whatever it says.
    pub map_size: Option<u64>,
    /// LevelDB: bytes written to the log before they are sorted into a table.
    pub write_buffer_size: Option<u64>,
    /// LevelDB: the most table files kept open at once.
    pub max_open_files: Option<u64>,
    /// LevelDB: the size of a table's blocks, in bytes.
    pub block_size: Option<u64>,
}

impl OpenOptions {
    /// Every backend's defaults.
    pub const DEFAULT: OpenOptions = OpenOptions {
        map_size: None,
        write_buffer_size: None,
        max_open_files: None,
        block_size: None,
    };
}

/// A database opened (what [`DbDesc::open`] returns).
pub type OpenResult = Result<Box<dyn Db>>;

/// An option's value as a `usize`, for the backend's library.
#[cfg(any(feature = "lmdb", feature = "leveldb"))]
fn option_size(path: &Path, name: &str, value: u64) -> Result<usize> {
    usize::try_from(value).map_err(|_| {
        db_error(
            path,
            format!("{name} {value} is too large for this machine"),
        )
    })
}

#[cfg(feature = "lmdb")]
/// Opens an LMDB environment with LMDB's defaults as a [`Db`] (for [`DbDesc::open`]).
pub fn open_lmdb(path: &Path, mode: Mode) -> Result<Box<dyn Db>> {
    Ok(Box::new(lmdb::open(path, mode)?))
}

#[cfg(feature = "lmdb")]
/// Opens an LMDB environment as `options` say, as a [`Db`] (for a format's open function).
pub fn open_lmdb_with(path: &Path, mode: Mode, options: &OpenOptions) -> OpenResult {
    Ok(Box::new(lmdb::open_with(path, mode, options)?))
}

/// Opens an LMDB environment to read, in a build without liblmdb (the `lmdb` feature):
/// read by [`lmdb_read`] as with it; writing is refused, naming the feature.
#[cfg(not(feature = "lmdb"))]
pub fn open_lmdb(path: &Path, mode: Mode) -> Result<Box<dyn Db>> {
    open_lmdb_with(path, mode, &OpenOptions::DEFAULT)
}

/// [`open_lmdb`] with a format's options (which only a written environment uses).
#[cfg(not(feature = "lmdb"))]
pub fn open_lmdb_with(path: &Path, mode: Mode, _options: &OpenOptions) -> OpenResult {
    if mode != Mode::Read {
        return Err(without("writing an LMDB environment", "lmdb", path));
    }
    if !is_lmdb(path) {
        return Err(db_error(path, "not an LMDB environment (no data.mdb)"));
    }
    // Checked now, as the build with liblmdb checks it when opened.
    locate(path)?;
    Ok(Box::new(ReadOnlyLmdb(path.to_path_buf())))
}

/// An LMDB environment opened to read without liblmdb.
#[cfg(not(feature = "lmdb"))]
struct ReadOnlyLmdb(PathBuf);

#[cfg(not(feature = "lmdb"))]
impl Db for ReadOnlyLmdb {
    fn cursor(&mut self) -> Result<Box<dyn Cursor + '_>> {
        let (bytes, records) = locate(&self.0)?;
        Ok(Box::new(RecordsCursor::new(bytes, records, true)))
    }
    fn transaction(&mut self) -> Result<Box<dyn Transaction + '_>> {
        Err(db_error(
            &self.0,
            "a database opened to read takes no transaction",
        ))
    }
    fn close(self: Box<Self>) -> Result<()> {
        Ok(())
    }
}

/// Refuses a LevelDB database in a build without the LevelDB backend, naming the
/// feature that adds it.
#[cfg(not(feature = "leveldb"))]
pub fn open_leveldb(path: &Path, _mode: Mode) -> Result<Box<dyn Db>> {
    Err(without("a LevelDB database", "leveldb", path))
}

/// [`open_leveldb`] with a format's options.
#[cfg(not(feature = "leveldb"))]
pub fn open_leveldb_with(path: &Path, _mode: Mode, _options: &OpenOptions) -> OpenResult {
    Err(without("a LevelDB database", "leveldb", path))
}

#[cfg(feature = "leveldb")]
/// Opens a LevelDB database with LevelDB's defaults as a [`Db`] (for [`DbDesc::open`]).
pub fn open_leveldb(path: &Path, mode: Mode) -> Result<Box<dyn Db>> {
    Ok(Box::new(leveldb::open(path, mode)?))
}

#[cfg(feature = "leveldb")]
/// Opens a LevelDB database as `options` say, as a [`Db`] (for a format's open function).
pub fn open_leveldb_with(path: &Path, mode: Mode, options: &OpenOptions) -> OpenResult {
    Ok(Box::new(leveldb::open_with(path, mode, options)?))
}

/// The LMDB backend (as Caffe2's `caffe2/db/lmdb.cc`): the environment's unnamed
/// database, keys in bytewise order; read by [`lmdb_read`], not liblmdb (a reader writes
/// nothing in the folder and a damaged file is an error, not a crash), written through
/// liblmdb (heed), whose write transactions are not tied to a thread.
#[cfg(feature = "lmdb")]
pub mod lmdb {
    use super::*;
    use heed::types::Bytes as HBytes;
    use heed::{Database, Env, EnvOpenOptions, WithoutTls};

    /// What map sizes are rounded up to: a multiple of every OS page size.
    const MAP_UNIT: u64 = 64 << 10;

    fn heed_error(path: &Path, e: heed::Error) -> Error {
        db_error(path, format!("LMDB: {e}"))
    }

    /// An LMDB environment.
    pub struct Lmdb {
        /// liblmdb's environment, to write (`None`: opened to read, without liblmdb).
        env: Option<Env<WithoutTls>>,
        db: Option<Database<HBytes, HBytes>>,
        path: PathBuf,
        mode: Mode,
    }

    /// Opens (`Read`, `Write`) or creates (`New`: the folder must not exist) the
    /// environment in folder `path`, with LMDB's defaults.
    pub fn open(path: &Path, mode: Mode) -> Result<Lmdb> {
        open_with(path, mode, &OpenOptions::DEFAULT)
    }

    /// Opens (`Read`, `Write`) or creates (`New`: the folder must not exist) the
    /// environment in folder `path`, with `options.map_size` when written (unset: the
    /// environment's own, or LMDB's default for a new one). Read, `data.mdb` is
    /// mapped whole and its meta pages checked, without liblmdb ([`lmdb_read`]).
    pub fn open_with(path: &Path, mode: Mode, options: &OpenOptions) -> Result<Lmdb> {
        match mode {
            Mode::New => {
                if path.exists() {
                    return Err(db_error(
                        path,
                        "cannot create an LMDB database: the folder exists",
                    ));
                }
                std::fs::create_dir_all(path).map_err(|e| Error::from(e).in_file(path))?;
            }
            Mode::Write => {
                std::fs::create_dir_all(path).map_err(|e| Error::from(e).in_file(path))?
            }
            Mode::Read => {
                if !is_lmdb(path) {
                    return Err(db_error(path, "not an LMDB environment (no data.mdb)"));
                }
            }
        }
        if mode == Mode::Read {
            // Read without liblmdb: the file is checked page by page as it is walked.
            let source = Source::open(path.join("data.mdb"))?;
            let bytes = source
                .bytes()
                .ok_or_else(|| db_error(path, "data.mdb could not be mapped"))?;
            lmdb_read::Reader::new(&path.join("data.mdb"), bytes.as_bytes())?;
            return Ok(Lmdb {
                env: None,
                db: None,
                path: path.to_path_buf(),
                mode,
            });
        }
        if mode == Mode::Write {
            // liblmdb trusts the file it appends to: every page it may read is checked
            // first.
            let data = path.join("data.mdb");
            if data.is_file() {
                let source = Source::open(&data)?;
                if let Some(bytes) = source.bytes().filter(|b| !b.as_bytes().is_empty()) {
                    lmdb_read::Reader::new(&data, bytes.as_bytes())?.check()?;
                }
            }
        }
        let mut opts = EnvOpenOptions::new().read_txn_without_tls();
        opts.max_dbs(0);
        if let Some(size) = options.map_size {
            let size = size.max(1).div_ceil(MAP_UNIT).saturating_mul(MAP_UNIT);
            opts.map_size(option_size(path, "map_size", size)?);
        }
        if mode == Mode::New {
            // A new environment holds nothing to lose until it is closed, which syncs it
            // (`force_sync`): its commits (one per record, as Caffe2's Save makes them)
            // are not flushed one by one, which would cost a disk flush per tensor.
            // SAFETY: NO_SYNC only delays durability to `close`; a crash of the system
            // before then loses a database that was never complete.
            unsafe {
                opts.flags(heed::EnvFlags::NO_SYNC);
            }
        }
        // SAFETY: the map is used through heed's API only, and the file is not truncated
        // while open by this process (LMDB's own requirement); an existing file was
        // checked above.
        let env = unsafe { opts.open(path) }.map_err(|e| heed_error(path, e))?;
        let db = {
            let mut wtxn = env.write_txn().map_err(|e| heed_error(path, e))?;
            let db = env
                .create_database::<HBytes, HBytes>(&mut wtxn, None)
                .map_err(|e| heed_error(path, e))?;
            wtxn.commit().map_err(|e| heed_error(path, e))?;
            Some(db)
        };
        Ok(Lmdb {
            env: Some(env),
            db,
            path: path.to_path_buf(),
            mode,
        })
    }

    impl Lmdb {
        /// `data.mdb` mapped, and every record's key and value location in it.
        fn locate(&self) -> Result<(tensorfmt_core::source::Bytes, Vec<Record>)> {
            locate(&self.path)
        }
    }

    struct LmdbTxn<'a> {
        db: &'a Lmdb,
        txn: Option<heed::RwTxn<'a>>,
    }

    impl Transaction for LmdbTxn<'_> {
        fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
            let path = &self.db.path;
            if self.txn.is_none() {
                let Some(env) = self.db.env.as_ref() else {
                    return Err(db_error(path, "no database to write"));
                };
                self.txn = Some(env.write_txn().map_err(|e| heed_error(path, e))?);
            }
            let (Some(txn), Some(db)) = (self.txn.as_mut(), self.db.db) else {
                return Err(db_error(path, "no database to write"));
            };
            db.put(txn, key, value).map_err(|e| heed_error(path, e))
        }
        fn commit(&mut self) -> Result<()> {
            if let Some(txn) = self.txn.take() {
                txn.commit().map_err(|e| heed_error(&self.db.path, e))?;
            }
            Ok(())
        }
    }

    impl Drop for LmdbTxn<'_> {
        fn drop(&mut self) {
            // Caffe2's transaction commits when destroyed.
            let _ = self.commit();
        }
    }

    impl Db for Lmdb {
        fn cursor(&mut self) -> Result<Box<dyn Cursor + '_>> {
            let (bytes, records) = self.locate()?;
            Ok(Box::new(RecordsCursor::new(bytes, records, true)))
        }
        fn transaction(&mut self) -> Result<Box<dyn Transaction + '_>> {
            if self.mode == Mode::Read {
                return Err(db_error(
                    &self.path,
                    "a database opened to read takes no transaction",
                ));
            }
            Ok(Box::new(LmdbTxn {
                db: self,
                txn: None,
            }))
        }
        fn close(self: Box<Self>) -> Result<()> {
            if let Some(env) = &self.env {
                env.force_sync().map_err(|e| heed_error(&self.path, e))?;
            }
            Ok(())
        }
    }

    /// The environment in `dir` read whole: `data.mdb` memory-mapped, every record's value
    /// located in it (LMDB keeps each value contiguous in the map, in a leaf or in
    /// overflow pages).
    pub fn snapshot(dir: &Path) -> Result<Source> {
        lmdb_snapshot(dir)
    }
}

/// `data.mdb` of the LMDB environment in `dir` mapped, and every record's key and the
/// location of its value in it, read by the bounds-checked reader ([`lmdb_read`]), not
/// liblmdb.
fn locate(dir: &Path) -> Result<(tensorfmt_core::source::Bytes, Vec<Record>)> {
    let data = dir.join("data.mdb");
    let source = Source::open(&data)?;
    let bytes = source
        .bytes()
        .ok_or_else(|| db_error(&data, "data.mdb could not be mapped"))?
        .clone();
    let records = lmdb_read::Reader::new(&data, bytes.as_bytes())?.records()?;
    Ok((bytes, records))
}

/// The LMDB environment in `dir` read whole: `data.mdb` memory-mapped, every record's
/// value located in it (LMDB keeps each value contiguous, in a leaf page or in overflow
/// pages). Reading needs no liblmdb: every page is checked as it is walked.
pub fn lmdb_snapshot(dir: &Path) -> Result<Source> {
    if !is_lmdb(dir) {
        return Err(db_error(dir, "not an LMDB environment (no data.mdb)"));
    }
    let (bytes, records) = locate(dir)?;
    Ok(
        Source::from_mapped(bytes, dir).with_records(Arc::new(Records {
            backend: "lmdb",
            records,
        })),
    )
}

/// The LevelDB backend (as Caffe2's `caffe2/db/leveldb.cc`), on `rusty-leveldb`: bytewise
/// key order; a transaction is a write batch written without sync.
#[cfg(feature = "leveldb")]
pub mod leveldb {
    use super::*;
    use rusty_leveldb::{LdbIterator, Options, WriteBatch, DB};

    fn ldb_error(path: &Path, e: rusty_leveldb::Status) -> Error {
        db_error(path, format!("LevelDB: {e}"))
    }

    fn ldb_options(path: &Path, mode: Mode, given: &OpenOptions) -> Result<Options> {
        let mut o = Options {
            create_if_missing: mode != Mode::Read,
            // Read, the folder is left as it is: what the library writes stays in memory.
            env: if mode == Mode::Read {
                std::rc::Rc::new(Box::new(crate::leveldb_env::ReadOnlyEnv::new()))
            } else {
                Options::default().env
            },
            // Checked by `open` as LevelDB does (a database exists when it has a
            // CURRENT file): rusty-leveldb asks whether the folder exists.
            error_if_exists: false,
            ..Options::default()
        };
        let mut compressors = rusty_leveldb::CompressorList::new();
        compressors.set_with_id(0, rusty_leveldb::compressor::NoneCompressor);
        compressors.set_with_id(1, BoundedSnappy);
        o.compressor_list = std::rc::Rc::new(compressors);
        let set = [
            (
                "write_buffer_size",
                given.write_buffer_size,
                &mut o.write_buffer_size,
            ),
            (
                "max_open_files",
                given.max_open_files,
                &mut o.max_open_files,
            ),
            ("block_size", given.block_size, &mut o.block_size),
        ];
        for (name, value, slot) in set {
            if let Some(v) = value {
                *slot = option_size(path, name, v)?;
            }
        }
        Ok(o)
    }

    /// A LevelDB database.
    pub struct LevelDb {
        db: DB,
        path: PathBuf,
        mode: Mode,
    }

    /// Opens (`Read`, `Write`) or creates (`New`: refused when it exists) the database
    /// in folder `path`, with LevelDB's defaults.
    pub fn open(path: &Path, mode: Mode) -> Result<LevelDb> {
        open_with(path, mode, &OpenOptions::DEFAULT)
    }

    /// Opens (`Read`, `Write`) or creates (`New`: refused when it exists) the database
    /// in folder `path`, with `options`' write buffer, open files and block size.
    pub fn open_with(path: &Path, mode: Mode, options: &OpenOptions) -> Result<LevelDb> {
        if mode == Mode::Read && !is_leveldb(path) {
            return Err(db_error(
                path,
                "not a LevelDB database (no CURRENT or MANIFEST)",
            ));
        }
        if mode == Mode::New && path.join("CURRENT").exists() {
            return Err(db_error(
                path,
                "cannot create a LevelDB database: it exists",
            ));
        }
        if mode == Mode::Read {
            check_tables(path)?;
        }
        let opts = ldb_options(path, mode, options)?;
        let db = guarded(path, || DB::open(path, opts))?.map_err(|e| ldb_error(path, e))?;
        Ok(LevelDb {
            db,
            path: path.to_path_buf(),
            mode,
        })
    }

    thread_local! {
        /// Set while this thread is inside [`guarded`]: its panics are errors, not news.
        static GUARDED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }

    /// Installs, once, a panic hook that stays silent for the panics [`guarded`] turns
    /// into errors and passes every other panic to the hook that was there before.
    fn quiet_guarded_panics() {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            let previous = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                if !GUARDED.with(|g| g.get()) {
                    previous(info);
                }
            }));
        });
    }

    /// A LevelDB varint64 at `*at` of `b`, advancing `at`.
    fn varint(b: &[u8], at: &mut usize) -> Option<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = *b.get(*at)?;
            *at += 1;
            v |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }

    /// Checks every table of the folder `dir` before rusty-leveldb reads it: its footer,
    /// the index and meta-index blocks it points to, and every block those point to
    /// (the data blocks, the filter block) must lie within the file — rusty-leveldb
    /// allocates a block's declared size before reading it, so a damaged handle could
    /// ask for any amount of memory — and every data block must have its checksum right
    /// and, when compressed, decompress within Snappy's bound: rusty-leveldb's iterator
    /// skips a block it cannot read without saying so, which would list a damaged
    /// database as one with fewer records.
    fn check_tables(dir: &Path) -> Result<()> {
        use std::io::{Read, Seek, SeekFrom};
        const FOOTER: u64 = 48;
        const MAGIC: u64 = 0xdb47_7524_8b80_fb57;
        let entries = std::fs::read_dir(dir).map_err(|e| Error::from(e).in_file(dir))?;
        for e in entries {
            let p = e.map_err(|e| Error::from(e).in_file(dir))?.path();
            if !p.extension().is_some_and(|x| x == "ldb" || x == "sst") {
                continue;
            }
            let mut f = std::fs::File::open(&p).map_err(|e| Error::from(e).in_file(&p))?;
            let len = f.metadata().map_err(|e| Error::from(e).in_file(&p))?.len();
            if len < FOOTER {
                return Err(db_error(
                    &p,
                    format!("a LevelDB table of {len} bytes, shorter than its 48-byte footer"),
                ));
            }
            let mut footer = [0u8; FOOTER as usize];
            f.seek(SeekFrom::Start(len - FOOTER))
                .and_then(|_| f.read_exact(&mut footer))
                .map_err(|e| Error::from(e).in_file(&p))?;
            let bad = |what: &str| {
                Error::new(
                    ErrorKind::Invalid(format!("damaged LevelDB table: {what}")),
                    Location::file(&p).with_offset(len - FOOTER),
                )
            };
            if u64::from_le_bytes(footer[40..].try_into().expect("8 bytes")) != MAGIC {
                return Err(bad("its footer lacks LevelDB's magic number"));
            }
            let mut at = 0;
            for name in ["meta-index", "index"] {
                let (Some(offset), Some(size)) =
                    (varint(&footer, &mut at), varint(&footer, &mut at))
                else {
                    return Err(bad(&format!("its footer's {name} block handle is cut")));
                };
                within(offset, size, len - FOOTER).map_err(|()| {
                    bad(&format!(
                        "its {name} block ({size} bytes at {offset}) is not within its {len} bytes"
                    ))
                })?;
                // The blocks these two point to (data blocks, the filter block) are
                // read the same way: every handle they hold is checked too.
                let (data, kind, _) = read_block(&mut f, offset, size)
                    .map_err(|why| bad(&format!("its {name} block {why}")))?;
                let block = match kind {
                    0 => data,
                    1 => bounded_snappy(&data)
                        .map_err(|why| bad(&format!("its {name} block {why}")))?,
                    // rusty-leveldb refuses what it cannot decode.
                    _ => continue,
                };
                let handles = block_handles(&block).ok_or_else(|| {
                    bad(&format!(
                        "its {name} block ({size} bytes at {offset}) is damaged"
                    ))
                })?;
                for (o, n) in handles {
                    within(o, n, len - FOOTER).map_err(|()| {
                        bad(&format!(
                            "its {name} block points to a block of {n} bytes at {o}, \
                             not within its {len} bytes"
                        ))
                    })?;
                    if name == "index" {
                        check_block(&mut f, o, n).map_err(|why| {
                            Error::new(
                                ErrorKind::Invalid(format!(
                                    "damaged LevelDB table: its data block of {n} bytes at {o} {why}"
                                )),
                                Location::file(&p).with_offset(o),
                            )
                        })?;
                    }
                }
            }
        }
        Ok(())
    }

    /// The block of `size` bytes at `offset` of table `f` (within the file), its type
    /// byte (0 plain, 1 Snappy), and whether its masked CRC-32C (over its bytes and type
    /// byte) is right.
    fn read_block(
        f: &mut std::fs::File,
        offset: u64,
        size: u64,
    ) -> std::result::Result<(Vec<u8>, u8, bool), String> {
        use std::io::{Read, Seek, SeekFrom};
        let mut b = vec![0u8; size as usize + 5];
        f.seek(SeekFrom::Start(offset))
            .and_then(|_| f.read_exact(&mut b))
            .map_err(|e| format!("cannot be read: {e}"))?;
        let stored = u32::from_le_bytes(b[size as usize + 1..].try_into().expect("4 bytes"));
        let crc = crc32c::crc32c(&b[..size as usize + 1]);
        // LevelDB stores its CRCs masked (rotated, plus a constant).
        let crc_ok = crc.rotate_right(15).wrapping_add(0xa282_ead8) == stored;
        let kind = b[size as usize];
        b.truncate(size as usize);
        Ok((b, kind, crc_ok))
    }

    /// Checks the data block of `size` bytes at `offset` of table `f` as rusty-leveldb
    /// reads it ([`read_block`]): its checksum, its type, and for a Snappy block its
    /// declared size ([`snappy_len`]).
    fn check_block(
        f: &mut std::fs::File,
        offset: u64,
        size: u64,
    ) -> std::result::Result<(), String> {
        let (data, kind, crc_ok) = read_block(f, offset, size)?;
        if !crc_ok {
            return Err("has a wrong checksum".to_string());
        }
        match kind {
            0 => Ok(()),
            1 => snappy_len(&data).map(|_| ()),
            k => Err(format!(
                "has the compression type {k}, which LevelDB does not define"
            )),
        }
    }

    /// Ok when a block of `size` bytes at `offset`, followed by its type byte and CRC-32
    /// (5 bytes), ends within the first `end` bytes of its table.
    fn within(offset: u64, size: u64, end: u64) -> std::result::Result<(), ()> {
        match offset.checked_add(size).and_then(|e| e.checked_add(5)) {
            Some(last) if last <= end => Ok(()),
            _ => Err(()),
        }
    }

    /// The block handles (offset, size) that the entries of an index or meta-index
    /// block hold as their values; `None` when the block is not well formed (its
    /// restart array, an entry's lengths, a handle).
    fn block_handles(block: &[u8]) -> Option<Vec<(u64, u64)>> {
        let n = block.len();
        let restarts = u32::from_le_bytes(block.get(n.checked_sub(4)?..)?.try_into().ok()?);
        let entries_end = n
            .checked_sub(4)?
            .checked_sub((restarts as usize).checked_mul(4)?)?;
        let mut at = 0;
        let mut out = Vec::new();
        while at < entries_end {
            let _shared = varint(block, &mut at)?;
            let unshared = usize::try_from(varint(block, &mut at)?).ok()?;
            let value_len = usize::try_from(varint(block, &mut at)?).ok()?;
            at = at.checked_add(unshared)?;
            let end = at.checked_add(value_len)?;
            let value = block.get(at..end.min(entries_end))?;
            if end > entries_end {
                return None;
            }
            let mut v = 0;
            out.push((varint(value, &mut v)?, varint(value, &mut v)?));
            at = end;
        }
        Some(out)
    }

    /// The most a Snappy block can expand: a 3-byte copy tag makes at most 64 bytes.
    const SNAPPY_MAX_RATIO: usize = 22;

    /// The size Snappy block `block` declares once decompressed, refused when it is more
    /// than Snappy can make of the block's size (which a decoder would allocate first).
    fn snappy_len(block: &[u8]) -> std::result::Result<usize, String> {
        let declared =
            snap::raw::decompress_len(block).map_err(|e| format!("is not Snappy: {e}"))?;
        if declared
            > block
                .len()
                .saturating_mul(SNAPPY_MAX_RATIO)
                .saturating_add(32)
        {
            return Err(format!(
                "declares {declared} bytes once decompressed, more than its {} bytes can hold",
                block.len()
            ));
        }
        Ok(declared)
    }

    /// `block` decompressed by Snappy, its declared size checked first ([`snappy_len`]).
    fn bounded_snappy(block: &[u8]) -> std::result::Result<Vec<u8>, String> {
        snappy_len(block)?;
        snap::raw::Decoder::new()
            .decompress_vec(block)
            .map_err(|e| format!("cannot be decompressed: {e}"))
    }

    /// rusty-leveldb's Snappy, with the declared size of each block checked before the
    /// decoder allocates it ([`bounded_snappy`]): a table's blocks are read through it.
    struct BoundedSnappy;

    impl rusty_leveldb::Compressor for BoundedSnappy {
        fn encode(&self, block: Vec<u8>) -> rusty_leveldb::Result<Vec<u8>> {
            snap::raw::Encoder::new().compress_vec(&block).map_err(|e| {
                rusty_leveldb::Status::new(
                    rusty_leveldb::StatusCode::CompressionError,
                    &e.to_string(),
                )
            })
        }

        fn decode(&self, block: Vec<u8>) -> rusty_leveldb::Result<Vec<u8>> {
            bounded_snappy(&block).map_err(|why| {
                rusty_leveldb::Status::new(
                    rusty_leveldb::StatusCode::Corruption,
                    &format!("a Snappy block {why}"),
                )
            })
        }
    }

    /// Runs `f`, a call into rusty-leveldb, turning a panic (a damaged file can make it
    /// slice past a buffer's end or fail an assertion) into an error naming the folder.
    fn guarded<T>(path: &Path, f: impl FnOnce() -> T) -> Result<T> {
        quiet_guarded_panics();
        let outer = GUARDED.with(|g| g.replace(true));
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        GUARDED.with(|g| g.set(outer));
        result.map_err(|p| {
            let why = p
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| p.downcast_ref::<&str>().copied())
                .unwrap_or("");
            db_error(
                path,
                format!("LevelDB: the database is damaged (a table or log cannot be read: {why})"),
            )
        })
    }

    fn all_records(db: &mut DB, path: &Path) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        guarded(path, || {
            let mut it = db.new_iter().map_err(|e| ldb_error(path, e))?;
            let mut out = Vec::new();
            while let Some((k, v)) = LdbIterator::next(&mut it) {
                out.push((k, v));
            }
            Ok(out)
        })?
    }

    struct LdbTxn<'a> {
        db: &'a mut LevelDb,
        batch: WriteBatch,
        pending: bool,
    }

    impl Transaction for LdbTxn<'_> {
        fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
            self.batch.put(key, value);
            self.pending = true;
            Ok(())
        }
        fn commit(&mut self) -> Result<()> {
            if self.pending {
                let batch = std::mem::take(&mut self.batch);
                self.pending = false;
                self.db
                    .db
                    .write(batch, false)
                    .map_err(|e| ldb_error(&self.db.path, e))?;
            }
            Ok(())
        }
    }

    impl Drop for LdbTxn<'_> {
        fn drop(&mut self) {
            let _ = self.commit();
        }
    }

    impl Db for LevelDb {
        fn cursor(&mut self) -> Result<Box<dyn Cursor + '_>> {
            let (bytes, records) = in_one_buffer(all_records(&mut self.db, &self.path)?);
            Ok(Box::new(RecordsCursor::new(bytes, records, true)))
        }
        fn transaction(&mut self) -> Result<Box<dyn Transaction + '_>> {
            if self.mode == Mode::Read {
                return Err(db_error(
                    &self.path,
                    "a database opened to read takes no transaction",
                ));
            }
            Ok(Box::new(LdbTxn {
                db: self,
                batch: WriteBatch::default(),
                pending: false,
            }))
        }
        fn close(mut self: Box<Self>) -> Result<()> {
            let path = self.path.clone();
            guarded(&path, || self.db.close())?.map_err(|e| ldb_error(&path, e))
        }
    }

    /// Records' values copied one after the other into one buffer, and where each is.
    fn in_one_buffer(all: Vec<(Vec<u8>, Vec<u8>)>) -> (tensorfmt_core::source::Bytes, Vec<Record>) {
        let mut buf = Vec::with_capacity(all.iter().map(|r| r.1.len()).sum());
        let mut records = Vec::with_capacity(all.len());
        for (k, v) in all {
            records.push(Record {
                key: k,
                offset: buf.len() as u64,
                len: v.len() as u64,
            });
            buf.extend_from_slice(&v);
        }
        (
            tensorfmt_core::source::Bytes::Owned(Arc::from(buf)),
            records,
        )
    }

    /// The database in `dir` read whole: its values copied, in key order, into one
    /// buffer.
    pub fn snapshot(dir: &Path) -> Result<Source> {
        let mut db = open(dir, Mode::Read)?;
        let (bytes, records) = in_one_buffer(all_records(&mut db.db, dir)?);
        guarded(dir, || db.db.close())?.map_err(|e| ldb_error(dir, e))?;
        Ok(
            Source::from_mapped(bytes, dir).with_records(Arc::new(Records {
                backend: "leveldb",
                records,
            })),
        )
    }
}

/// One record's part of a tensor, as a mapping reads it: the whole tensor's dtype and
/// shape, and the elements `[begin, end)` this part holds (`parts.segment`; `None`: all).
#[derive(Debug, Clone)]
pub struct Chunk {
    /// The tensor's name.
    pub name: String,
    /// The record's key, for errors.
    pub key: String,
    /// What the record holds of the tensor.
    pub parts: TensorParts,
}

impl Chunk {
    /// The part `parts` of tensor `name`, read from the record `key`. Fails when the
    /// parts are strings that were not counted ([`TensorParts::check_strings`]).
    pub fn new(name: &str, key: &str, parts: TensorParts) -> Result<Chunk> {
        parts.check_strings()?;
        Ok(Chunk {
            name: name.to_string(),
            key: key.to_string(),
            parts,
        })
    }
}

/// A record whose key matched one of a format's entries ([`map_records`]).
#[derive(Debug)]
pub struct Matched<'r> {
    /// The entry's position in the format's list.
    pub entry: usize,
    /// The key, as text (bytes that are not UTF-8 replaced).
    pub key: &'r str,
    /// The values of the entry's key-pattern captures, in the pattern's order.
    pub captures: Vec<String>,
    /// The value's bytes.
    pub value: &'r [u8],
    /// The absolute offset of the value's first byte in the source.
    pub base: u64,
}

impl Matched<'_> {
    /// A `value` mapping's item: the piece of value `name` that this record holds, its
    /// bytes (and their absolute offset in the source; absent: empty), and, when the value
    /// was saved in numbered parts, which part it is of how many (`parts` absent: the
    /// value whole; `part` absent: part 0).
    pub fn value(
        &self,
        name: &str,
        data: Option<(&[u8], u64)>,
        part: Option<i64>,
        parts: Option<i64>,
    ) -> ValuePiece {
        let (offset, len) = data.map_or((0, 0), |(b, at)| (at, b.len() as u64));
        ValuePiece {
            name: name.to_string(),
            key: self.key.to_string(),
            offset,
            len,
            part: parts.map(|n| (part.unwrap_or(0), n)),
        }
    }

    /// The value read by `read` (given its bytes and their offset) as the message
    /// `message`; an error is given the record as its entry (`record "key" as
    /// message`).
    pub fn read<'v, T>(
        &'v self,
        message: &str,
        read: impl FnOnce(&'v [u8], u64) -> Result<T>,
    ) -> Result<T> {
        read(self.value, self.base)
            .map_err(|e| e.in_entry(format!("record {:?} as {message}", self.key)))
    }
}

/// A format's entry, as [`map_records`] matches records against it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// The key pattern (`"{name}#%{chunk}"`).
    pub pattern: &'static str,
    /// Whether the tensors of its records are the items of a list (a mapping over a
    /// repeated field: a dataset record), not tensors of their own.
    pub items: bool,
}

/// What the mappings over one record add to ([`map_records`]).
#[derive(Debug, Default)]
pub struct Found {
    /// The parts of tensors (a `tensor` mapping's items).
    pub chunks: Vec<Chunk>,
    /// The pieces of values that are not tensors (a `value` mapping's items).
    pub values: Vec<ValuePiece>,
}

/// Maps the records of a database (their keys, and where their values are in `src`,
/// which holds them in memory). Each record's key is matched against the `entries` in
/// order; for the first that matches, `map` is given the matched record and what was found
/// so far, and adds the record's tensor parts and value pieces; it returns whether the
/// record is of that entry (`false`: the next matching entry is tried; a record no entry
/// takes is skipped). The parts of each tensor are then joined ([`join_segments`]); the
/// value pieces are kept as found, to be joined by [`join_values`]. Every error is given
/// `src`'s path; a value outside the source is [`ErrorKind::Truncated`] naming its key;
/// more parts than `limits.max_tensors` is an [`ErrorKind::Limit`].
pub fn map_records(
    src: &Source,
    records: &[Record],
    limits: &tensorfmt_core::Limits,
    entries: &[Entry],
    mut map: impl FnMut(&Matched<'_>, &mut Found) -> Result<bool>,
) -> Result<Mapped> {
    let in_file = |e: Error| src.in_file(e);
    let Some(all) = src.bytes().map(|b| b.as_bytes()) else {
        return Err(in_file(Error::from(ErrorKind::Unsupported(
            "a database that is not in memory".to_string(),
        ))));
    };
    let patterns = entries
        .iter()
        .map(|e| Pattern::new(e.pattern))
        .collect::<Result<Vec<_>>>()?;
    let mut found = Found::default();
    // Per record holding tensor parts: the range of its chunks, and whether they are items.
    let mut held: Vec<(std::ops::Range<usize>, bool)> = Vec::new();
    for rec in records {
        let key = String::from_utf8_lossy(&rec.key);
        let key: &str = &key;
        let value = usize::try_from(rec.offset)
            .ok()
            .and_then(|o| all.get(o..o.checked_add(usize::try_from(rec.len).ok()?)?))
            .ok_or_else(|| {
                in_file(
                    Error::from(ErrorKind::Truncated {
                        needed: rec.len,
                        available: (all.len() as u64).saturating_sub(rec.offset),
                    })
                    .in_entry(key),
                )
            })?;
        let start = found.chunks.len();
        for (entry, pattern) in patterns.iter().enumerate() {
            let Some(captures) = pattern.matches(key) else {
                continue;
            };
            let matched = Matched {
                entry,
                key,
                captures,
                value,
                base: rec.offset,
            };
            if map(&matched, &mut found).map_err(in_file)? {
                if found.chunks.len() > start {
                    held.push((start..found.chunks.len(), entries[entry].items));
                }
                break;
            }
        }
        // Counted record by record, before the next one adds to them.
        if found.chunks.len() as u64 > limits.max_tensors {
            return Err(in_file(Error::from(ErrorKind::Limit {
                what: "tensors",
                limit: limits.max_tensors,
                actual: found.chunks.len() as u64,
            })));
        }
    }
    let (tensors, of_chunk) = join_indexed(found.chunks).map_err(in_file)?;
    let mut ids = Vec::with_capacity(of_chunk.len());
    let mut records = Vec::with_capacity(held.len());
    // The last record (plus one) each tensor was listed for: a tensor with several parts
    // in one record is listed once, in linear time whatever a record holds.
    let mut listed_in = vec![0usize; tensors.len()];
    for (r, (chunks, items)) in held.into_iter().enumerate() {
        let start = ids.len();
        for c in chunks {
            let t = of_chunk[c];
            if listed_in[t] != r + 1 {
                listed_in[t] = r + 1;
                ids.push(t);
            }
        }
        records.push(MappedRecord {
            tensors: start..ids.len(),
            items,
        });
    }
    Ok(Mapped {
        tensors,
        records,
        held: ids,
        values: found.values,
    })
}

/// A value being joined: its name, its number of parts (if in parts), its parts by number.
type Joining<'a> = (
    String,
    Option<i64>,
    std::collections::BTreeMap<i64, &'a [u8]>,
);

/// Joins the pieces of each value by name: what a `value` mapping's `part` and `parts`
/// mean, for any format whose records hold values that are not tensors. Pieces of one
/// name come in any order, interleaved with others'; their bytes are read from `src`.
/// Counted in order: a piece without parts is the value whole, and no other piece may
/// have its name; a piece with parts is part `part` of `parts` (`0 <= part < parts`),
/// every piece of the name gives the same number of parts, and no part comes twice; and
/// every value in parts must have them all. The values are listed where their first piece
/// is, their bytes the parts' in part order.
///
/// These are the checks of Caffe2's Load (`load_save_op_util.cc`, BlobState, for blobs
/// that are not tensors), the reader of the one built-in format with `value` mappings,
/// made in the same order; the errors carry its words ("Blob duplicated: s", "Chunk with
/// the same id has occurred twice for: s", "Data size mismatch for blob s. Expected: 3
/// Read: 1") with the value's name.
pub fn join_values(
    src: &Source,
    pieces: impl IntoIterator<Item = ValuePiece>,
) -> Result<Vec<Value>> {
    let invalid = |msg: String| Error::from(ErrorKind::Invalid(msg));
    let all = src.bytes().map(|b| b.as_bytes()).unwrap_or_default();
    let bytes_of = |p: &ValuePiece| -> Result<&[u8]> {
        usize::try_from(p.offset)
            .ok()
            .and_then(|o| all.get(o..o.checked_add(usize::try_from(p.len).ok()?)?))
            .ok_or_else(|| {
                Error::from(ErrorKind::Truncated {
                    needed: p.len,
                    available: (all.len() as u64).saturating_sub(p.offset),
                })
                .in_entry(&p.key)
            })
    };
    let mut joined: Vec<Joining<'_>> = Vec::new();
    // Where each name is in `joined`: linear time whatever the number of values.
    let mut by_name: std::collections::HashMap<String, usize> = Default::default();
    for p in pieces {
        let at = by_name.get(&p.name).copied();
        let data = bytes_of(&p)?;
        let Some((id, n)) = p.part else {
            if at.is_some() {
                return Err(invalid(format!("Blob duplicated: {}", p.name)));
            }
            by_name.insert(p.name.clone(), joined.len());
            joined.push((p.name, None, [(0, data)].into()));
            continue;
        };
        if n <= 0 || id < 0 || id >= n {
            return Err(invalid(format!(
                "chunk id {id} of {} is not below its {n} chunks",
                p.name
            )));
        }
        let v = match at {
            Some(i) => &mut joined[i],
            None => {
                by_name.insert(p.name.clone(), joined.len());
                joined.push((p.name.clone(), Some(n), Default::default()));
                joined.last_mut().expect("pushed")
            }
        };
        if v.1 != Some(n) {
            return Err(invalid(format!(
                "Blob duplicated: {} (its parts disagree on their number of chunks)",
                p.name
            )));
        }
        if v.2.insert(id, data).is_some() {
            return Err(invalid(format!(
                "Chunk with the same id has occurred twice for: {}",
                p.name
            )));
        }
    }
    let mut out = Vec::with_capacity(joined.len());
    for (name, n, parts) in joined {
        if let Some(n) = n.filter(|&n| parts.len() as i64 != n) {
            return Err(invalid(format!(
                "Data size mismatch for blob {name}. Expected: {n} Read: {}",
                parts.len()
            )));
        }
        out.push(Value {
            name,
            data: parts.into_values().flatten().copied().collect(),
        });
    }
    Ok(out)
}

/// Writes the tensor `meta`, whose bytes are `all`, as records of an entry whose key
/// pattern is `pattern`: parts of at most `split` elements (at least one; an empty tensor
/// is one part), each part's value made by `value` (given the tensor, the part's bytes
/// and the elements `[begin, end)` it holds) and put under the key the pattern makes,
/// the capture `name_capture` given the tensor's name and any other the part's index.
/// Errors: bytes that do not hold the tensor's elements, a pattern that cannot make the
/// key, and those of `value` and `put`.
pub fn encode_parts(
    meta: &tensorfmt_core::TensorMeta,
    all: &[u8],
    split: u64,
    pattern: &str,
    name_capture: &str,
    put: &mut PutFn<'_>,
    mut value: impl FnMut(&tensorfmt_core::TensorMeta, &[u8], u64, u64) -> Result<Vec<u8>>,
) -> Result<()> {
    let numel = tensorfmt_core::tensor::numel(&meta.shape)?;
    let split = split.max(1);
    let pattern = Pattern::new(pattern)?;
    let offsets = element_offsets(meta.dtype, all, numel)?;
    let mut begin = 0u64;
    let mut part = 0u64;
    loop {
        let end = begin.saturating_add(split).min(numel);
        let data = &all[offsets(begin)..offsets(end)];
        let bytes = value(meta, data, begin, end)?;
        let index = part.to_string();
        let values: Vec<&str> = pattern
            .captures()
            .map(|c| {
                if c == name_capture {
                    meta.name.as_str()
                } else {
                    index.as_str()
                }
            })
            .collect();
        let key = pattern.format(&values)?;
        put(key.as_bytes(), &bytes)?;
        part += 1;
        begin = end;
        if begin >= numel {
            break;
        }
    }
    Ok(())
}

/// Joins the parts of each tensor: what a mapping's `segment` key means, for any format
/// whose records hold parts of tensors. The parts of one name come in any order,
/// interleaved with others' records; each holds the elements `[begin, end)` of the whole
/// tensor its segment gives, or the whole tensor when it has none. Counted in record
/// order, the first part sets the dtype and shape, which every other part repeats; a part
/// without a segment can only be the first; no part may add to a tensor already complete
/// or take it past its size; in element order, the parts must cover every element exactly
/// once, each holding the bytes (or the strings) of its elements; and every tensor must
/// be complete. A tensor is listed where its first part is, its bytes the parts' byte
/// ranges in element order (no copy).
///
/// These are the checks of Caffe2's Load (`load_save_op_util.cc`, BlobState), the
/// reader of the one built-in format with segments, made in the same order; the errors
/// carry its words ("Found an extra part for an already filled tensor: w") with the
/// record's key, so that they read as Caffe2's users know them.
pub fn join_segments(chunks: Vec<Chunk>) -> Result<Vec<tensorfmt_core::TensorInfo>> {
    join_indexed(chunks).map(|(tensors, _)| tensors)
}

/// [`join_segments`], and for each chunk the index of the tensor it is a part of.
///
/// Memory: a few words per chunk besides the chunks (no list per tensor, no name copied),
/// so that a record of a million one-part tensors costs what its tensors do.
fn join_indexed(chunks: Vec<Chunk>) -> Result<(Vec<tensorfmt_core::TensorInfo>, Vec<usize>)> {
    // The tensor of each chunk, tensors numbered in the order their names first appear.
    let mut of_chunk = Vec::with_capacity(chunks.len());
    let mut count = 0usize;
    {
        let mut at: std::collections::HashMap<&str, usize> = Default::default();
        for c in &chunks {
            let i = *at.entry(c.name.as_str()).or_insert(count);
            count += usize::from(i == count);
            of_chunk.push(i);
        }
    }
    // The chunks of each tensor together, in record order (a stable sort).
    let mut order: Vec<usize> = (0..chunks.len()).collect();
    order.sort_by_key(|&c| of_chunk[c]);
    let mut chunks: Vec<Option<Chunk>> = chunks.into_iter().map(Some).collect();
    let mut tensors = Vec::with_capacity(count);
    for run in order.chunk_by(|&a, &b| of_chunk[a] == of_chunk[b]) {
        let parts: Vec<Chunk> = run.iter().filter_map(|&c| chunks[c].take()).collect();
        let name = parts[0].name.clone();
        tensors.push(join_one(&name, parts)?);
    }
    Ok((tensors, of_chunk))
}

fn join_one(name: &str, mut parts: Vec<Chunk>) -> Result<tensorfmt_core::TensorInfo> {
    let first = &parts[0].parts;
    let err = |key: &str, msg: String| {
        Error::new(ErrorKind::Invalid(msg), Location::default()).in_entry(key)
    };
    let total = tensorfmt_core::tensor::numel(&first.shape)?;
    let mut current: u64 = 0;
    for (i, c) in parts.iter().enumerate() {
        let p = &c.parts;
        if p.dtype != first.dtype || p.shape != first.shape {
            return Err(err(
                &c.key,
                format!(
                    "a part of tensor {name} is {} {:?}, an earlier part {} {:?}",
                    p.dtype, p.shape, first.dtype, first.shape
                ),
            ));
        }
        let n = match p.segment {
            None if i == 0 => total,
            None => {
                return Err(err(
                    &c.key,
                    format!("Partial tensor must have a segment: {name}"),
                ))
            }
            Some((b, e)) => {
                if b < 0 || e < b {
                    return Err(err(
                        &c.key,
                        format!("tensor {name} has the invalid segment [{b}, {e})"),
                    ));
                }
                (e - b) as u64
            }
        };
        if i > 0 && current == total {
            return Err(err(
                &c.key,
                format!("Found an extra part for an already filled tensor: {name}"),
            ));
        }
        current = current
            .checked_add(n)
            .filter(|&c| c <= total)
            .ok_or_else(|| {
                err(
                    &c.key,
                    format!("Tensor parts are bigger than target size for tensor: {name}"),
                )
            })?;
    }
    if current != total {
        return Err(err(
            &parts[0].key,
            format!("Data size mismatch for blob {name}. Expected: {total} Read: {current}"),
        ));
    }
    // The parts in element order, tiling [0, total) exactly.
    parts.sort_by_key(|c| c.parts.segment.map_or(0, |s| s.0));
    let mut at = 0u64;
    for c in &parts {
        let p = &c.parts;
        let (b, e) = p.segment.map_or((0, total), |(b, e)| (b as u64, e as u64));
        if b != at {
            return Err(err(
                &c.key,
                format!("the parts of tensor {name} overlap or leave a gap at element {at}"),
            ));
        }
        let item = p.dtype.itemsize();
        let want = match item {
            Some(s) => (e - b).checked_mul(s as u64),
            None => None,
        };
        if let Some(want) = want {
            if p.data.location.len() != want {
                return Err(err(
                    &c.key,
                    format!(
                        "a part of tensor {name} holds {} bytes for elements [{b}, {e}), which need {want}",
                        p.data.location.len()
                    ),
                ));
            }
        } else if p.data.strings != Some(e - b) {
            return Err(err(
                &c.key,
                format!(
                    "a part of string tensor {name} holds {} strings for elements [{b}, {e})",
                    p.data.strings.unwrap_or(0)
                ),
            ));
        }
        at = e;
    }
    let first = &parts[0].parts;
    let (dtype, byte_order, shape) = (first.dtype, first.byte_order, first.shape.clone());
    let count: u64 = parts
        .iter()
        .map(|c| c.parts.data.strings.unwrap_or(0))
        .fold(0u64, |a, c| a.saturating_add(c));
    let location = if parts.len() == 1 {
        parts
            .pop()
            .map(|c| c.parts.data.location)
            .expect("one part")
    } else {
        tensorfmt_core::DataLocation::Pieces(
            parts.into_iter().map(|c| c.parts.data.location).collect(),
        )
    };
    if dtype == tensorfmt_core::DType::String {
        tensorfmt_core::TensorInfo::strings(name, shape, count, location)
    } else {
        tensorfmt_core::TensorInfo::dense(
            name,
            dtype,
            shape,
            tensorfmt_core::Order::C,
            byte_order.unwrap_or(tensorfmt_core::ByteOrder::Little),
            location,
        )
    }
}

/// Where each element of a tensor's bytes starts: `offsets(i)` for `i` in `0..=numel` (a
/// string tensor's elements are each a u64-LE length and the bytes).
pub fn element_offsets(
    dtype: tensorfmt_core::DType,
    data: &[u8],
    numel: u64,
) -> Result<Box<dyn Fn(u64) -> usize + '_>> {
    if let Some(item) = dtype.itemsize() {
        let need = numel.checked_mul(item as u64);
        if need != Some(data.len() as u64) {
            return Err(Error::from(ErrorKind::SizeMismatch(format!(
                "{numel} elements of {dtype} need {} bytes, {} given",
                numel.saturating_mul(item as u64),
                data.len()
            ))));
        }
        return Ok(Box::new(move |i| i as usize * item));
    }
    let mut starts = Vec::with_capacity(numel as usize + 1);
    let mut pos = 0usize;
    for _ in 0..numel {
        starts.push(pos);
        let n = data
            .get(pos..pos + 8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
            .and_then(|n| usize::try_from(n).ok())
            .and_then(|n| (pos + 8).checked_add(n))
            .filter(|&e| e <= data.len())
            .ok_or_else(|| Error::from(ErrorKind::Invalid("a string element is cut".into())))?;
        pos = n;
    }
    if pos != data.len() {
        return Err(Error::from(ErrorKind::SizeMismatch(format!(
            "{numel} strings take {pos} bytes, {} given",
            data.len()
        ))));
    }
    starts.push(pos);
    Ok(Box::new(move |i| starts[i as usize]))
}
