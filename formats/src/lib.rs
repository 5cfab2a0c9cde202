//! # tensorfmt
//!
//! Read and write the tensor files of deep learning from one declarative description per
//! format. Every built-in format is a `.fmt` schema under `formats/fmt/`, compiled at build
//! time into the readers and writers of [`generated`]; this crate adds the high-level API:
//! open any file (format detected by content, then extension), list its tensors without
//! reading their bytes, read them into any sink (zero-copy from the memory map where the
//! bytes are stored plain), save atomically, and convert between formats.
//!
//! ```no_run
//! let file = tensorfmt::TensorFile::open("weights.npz")?;
//! for t in file.tensors() {
//!     println!("{} {} {:?}", t.name, t.dtype, t.shape);
//! }
//! let first = file.load(&file.tensors()[0].name)?;
//! println!("{} bytes", first.data.as_bytes().len());
//! # Ok::<(), tensorfmt::Error>(())
//! ```
//!
//! Formats of a user's own crate — generated from its `.fmt` schemas by
//! [`#[derive(TensorFormat)]`](TensorFormat) or by `tensorfmt_codegen::compile` in its
//! build script, reaching the runtime through [`runtime::gen`] —
//! join the built-in ones in a [`Registry`], which [`OpenOptions`], [`Saver::create_in`],
//! [`convert`] and [`cli::run_with`] take.
#![warn(missing_docs)]

use std::cell::RefCell;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::rc::Rc;

/// The `prost` crate the generated message types (`generated::onnx::messages`) derive
/// from: `use tensorfmt::prost::Message;` to encode and decode them.
#[cfg(any(feature = "onnx", feature = "caffe2"))]
pub use prost;
pub use tensorfmt_runtime as runtime;
pub use tensorfmt_runtime::registry::{FormatDesc, Payload, StorageView, StructureKept};
pub use tensorfmt_runtime::sink::{Flow, Sink, Tensor, TensorData};
pub use tensorfmt_runtime::tree::Node;
pub use tensorfmt_runtime::Compression;
pub use tensorfmt_runtime::{
    ByteOrder, DType, DataLocation, Error, ErrorKind, Limits, Location, Order, Result, Source,
    TensorInfo, TensorMeta, WriteOptions,
};

use tensorfmt_runtime::output::{AtomicDir, AtomicFile, DirPolicy};
use tensorfmt_runtime::read::{read_tensor, ReadOptions};
use tensorfmt_runtime::registry::TensorWriter;
use tensorfmt_runtime::sink::ViewSink;

#[cfg(feature = "caffe2")]
pub mod caffe2;
pub mod cli;
mod registry;
mod rewrite;

pub use registry::Registry;
/// `#[derive(TensorFormat)]`: a user's format generated from its `.fmt` schema, which may
/// `use` built-in formats, reaching the runtime through [`runtime::gen`].
///
/// ```ignore
/// #[derive(tensorfmt::TensorFormat)]
/// #[tensorfmt(schema = "fmt/myformat.fmt")] // relative to CARGO_MANIFEST_DIR
/// pub struct MyFormat;
/// // → `pub mod my_format { ... }` (its reader, writer, `index`, ...) and `MyFormat::DESC`:
/// let registry = tensorfmt::Registry::builtin().with(&MyFormat::DESC);
/// ```
#[cfg(feature = "derive")]
pub use tensorfmt_derive::TensorFormat;

pub use rewrite::{
    can_rewrite, replace_tensors, rewrite, rewrite_storage, RewriteOptions, RewriteSummary,
};
pub use tensorfmt_runtime::ExternalData;

/// Readers and writers generated from the built-in `.fmt` schemas.
pub mod generated {
    include!(concat!(env!("OUT_DIR"), "/formats.rs"));
}

/// Every built-in format, in schema order.
pub fn formats() -> &'static [FormatDesc] {
    generated::REGISTRY
}

/// The built-in format with this public name (`npy`, `npz`, ...); see
/// [`Registry::named`] for a registry's.
pub fn format_named(name: &str) -> Option<&'static FormatDesc> {
    Registry::builtin().named(name)
}

/// The built-in format a path's extension maps to by default; see [`Registry::for_path`]
/// for a registry's.
pub fn format_for_path(path: &Path) -> Option<&'static FormatDesc> {
    Registry::builtin().for_path(path)
}

/// The built-in format of `source`, by content: every format whose detector accepts it,
/// preferring the one its path's extension names when several do; see
/// [`Registry::detect`] for a registry's.
pub fn detect(source: &Source, limits: &Limits) -> Option<&'static FormatDesc> {
    Registry::builtin().detect(source, limits)
}

/// How to open a file.
///
/// ```no_run
/// use tensorfmt::{OpenOptions, Registry, TensorFile};
/// # let my_format: &'static tensorfmt::FormatDesc = tensorfmt::format_named("npy").unwrap();
/// // A user's format (a generated `&MyFormat::DESC`) beside the built-in ones:
/// let options = OpenOptions { registry: Registry::builtin().with(my_format), ..Default::default() };
/// let file = TensorFile::open_with("weights.myf", &options)?;
/// # Ok::<(), tensorfmt::Error>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct OpenOptions {
    /// The formats a file may be of (by default the built-in ones): detection and
    /// [`OpenOptions::format`] look here. [`convert`] writes a format of this registry too.
    pub registry: Registry,
    /// Read as this format (a name of [`OpenOptions::registry`]) instead of detecting it.
    pub format: Option<String>,
    /// Limits applied to the file's contents.
    pub limits: Limits,
    /// Do not verify checksums (zip CRC-32) while reading tensor bytes (they are verified
    /// by default).
    pub skip_checksums: bool,
}

/// An opened tensor file: its format and the metadata of every tensor, indexed without
/// reading any payload.
pub struct TensorFile {
    source: Source,
    format: &'static FormatDesc,
    tensors: Vec<TensorInfo>,
    read_options: ReadOptions,
}

impl std::fmt::Debug for TensorFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TensorFile")
            .field("path", &self.source.path())
            .field("format", &self.format.name)
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

impl TensorFile {
    /// Memory-maps `path`, detects its format and indexes its tensors.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(path, &OpenOptions::default())
    }

    /// [`TensorFile::open`] with options: among others, the [`Registry`] of formats the
    /// file may be of. A folder is read as the LMDB or LevelDB database it holds.
    pub fn open_with(path: impl AsRef<Path>, options: &OpenOptions) -> Result<Self> {
        Self::from_source(open_source(path.as_ref())?, options)
    }

    /// Indexes an already opened source (a buffer, a stream, or a map).
    pub fn from_source(source: Source, options: &OpenOptions) -> Result<Self> {
        let format = Self::format_of(&source, options)?;
        let tensors = (format.index)(&source, &options.limits).map_err(|e| source.in_file(e))?;
        Ok(Self::indexed(source, format, tensors, options))
    }

    /// Opens the database at `path` as [`TensorFile::open_with`] does, and keeps what its
    /// format's mapping found beside the tensors: the records that hold them and the
    /// values that are not tensors. `None` for a format that is not a database's.
    pub(crate) fn open_mapped(
        path: &Path,
        options: &OpenOptions,
    ) -> Result<(Self, Option<tensorfmt_runtime::kv::Mapped>)> {
        let source = open_source(path)?;
        let format = Self::format_of(&source, options)?;
        let Some(db) = format.db else {
            return Ok((Self::from_source(source, options)?, None));
        };
        let mut mapped = (db.map)(&source, &options.limits).map_err(|e| source.in_file(e))?;
        let tensors = std::mem::take(&mut mapped.tensors);
        Ok((
            Self::indexed(source, format, tensors, options),
            Some(mapped),
        ))
    }

    /// The format `options` names, or the one detected.
    fn format_of(source: &Source, options: &OpenOptions) -> Result<&'static FormatDesc> {
        match &options.format {
            Some(name) => options.registry.require(name),
            None => options
                .registry
                .detect(source, &options.limits)
                .ok_or_else(|| {
                    Error::new(
                        ErrorKind::Unsupported("not a file of any known tensor format".into()),
                        source.location(),
                    )
                }),
        }
    }

    /// The file of `source`, read as `format`, whose tensors are `tensors`.
    fn indexed(
        source: Source,
        format: &'static FormatDesc,
        tensors: Vec<TensorInfo>,
        options: &OpenOptions,
    ) -> Self {
        let read_options = ReadOptions {
            verify_checksums: !options.skip_checksums,
            limits: options.limits.clone(),
            ..ReadOptions::default()
        };
        TensorFile {
            source,
            format,
            tensors,
            read_options,
        }
    }

    /// The format's public name.
    pub fn format(&self) -> &'static str {
        self.format.name
    }

    /// The format's descriptor.
    pub fn format_desc(&self) -> &'static FormatDesc {
        self.format
    }

    /// The object the tensors are stored in, for formats that store one: a PyTorch
    /// checkpoint's pickled object (`{"model": {...}, "optimizer": {...}, "epoch": 3}`), a
    /// TorchScript module's attributes; `None` for formats that store tensors alone. Its
    /// [`Node::Tensor`] leaves carry the names of [`TensorFile::tensors`], and
    /// [`Node::values`] lists everything else (hyperparameters, counters). Decoded on
    /// each call.
    pub fn structure(&self) -> Result<Option<Node>> {
        (self.format.structure)(&self.source, &self.read_options.limits)
            .map_err(|e| self.source.in_file(e))
    }

    /// Metadata of every tensor, in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// Metadata of the tensor named `name`.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// The underlying source.
    pub fn source(&self) -> &Source {
        &self.source
    }

    /// Streams one tensor's bytes into `sink`.
    pub fn read_into(&self, info: &TensorInfo, sink: &mut dyn Sink) -> Result<Flow> {
        read_tensor(&self.source, info, sink, &self.read_options)
            .map_err(|e| self.source.in_file(e))
    }

    /// Streams every tensor into `sink`, in file order, honouring `Skip` and `Stop`.
    pub fn read_all(&self, sink: &mut dyn Sink) -> Result<()> {
        tensorfmt_runtime::read::read_all(&self.source, &self.tensors, sink, &self.read_options)
            .map_err(|e| self.source.in_file(e))
    }

    /// The tensor named `name`: a zero-copy view of the memory map where its bytes are
    /// stored plain, an owned 64-byte-aligned copy otherwise.
    pub fn load(&self, name: &str) -> Result<Tensor> {
        let info = self.tensor(name).ok_or_else(|| {
            Error::new(
                ErrorKind::NotFound(format!("tensor '{name}'")),
                self.source.location(),
            )
        })?;
        self.load_info(info)
    }

    /// Like [`TensorFile::load`], for a tensor of this file's index.
    pub fn load_info(&self, info: &TensorInfo) -> Result<Tensor> {
        let mut sink = ViewSink::default();
        self.read_into(info, &mut sink)?;
        sink.tensors.pop().ok_or_else(|| {
            Error::new(
                ErrorKind::Sink(format!("no data for tensor '{}'", info.name)),
                self.source.location(),
            )
        })
    }

    /// Checks the container beyond what the tensors use: for a zip archive, every member's
    /// local header and CRC-32, metadata members and members no tensor refers to
    /// included. Returns the number of members checked (0 when the file is not a zip
    /// archive). [`TensorFile::read_all`] checks the tensors' own bytes.
    #[cfg(zip_formats)]
    pub fn verify_container(&self) -> Result<usize> {
        let data = self.source.data();
        if !tensorfmt_runtime::zip::starts_like_zip(data) {
            return Ok(0);
        }
        let limits = &self.read_options.limits;
        let zip = tensorfmt_runtime::zip::index(&self.source, limits)
            .map_err(|e| self.source.in_file(e))?;
        for m in zip.members() {
            let mut reader = tensorfmt_runtime::zip::member_reader(data, m, limits)
                .map_err(|e| self.source.in_file(e))?;
            std::io::copy(&mut reader, &mut std::io::sink())
                .map_err(|e| self.source.in_file(tensorfmt_runtime::zip::io_to_error(e)))?;
        }
        Ok(zip.members().len())
    }

    /// Checks the container beyond what the tensors use: 0, as this build reads no zip
    /// archives.
    #[cfg(not(zip_formats))]
    pub fn verify_container(&self) -> Result<usize> {
        Ok(0)
    }

    /// Every tensor, loaded as [`TensorFile::load`] does.
    pub fn load_all(&self) -> Result<Vec<Tensor>> {
        self.tensors.iter().map(|t| self.load_info(t)).collect()
    }
}

/// Opens `path` as a [`Source`]: a file memory-mapped, a folder read as the key-value
/// database it holds (where the build reads databases).
pub fn open_source(path: &Path) -> Result<Source> {
    match Source::open(path) {
        // `Source::open` refuses a folder after the one `fstat` every open makes; only
        // then is the path looked at again, as a database folder (no extra system call
        // on the common path).
        #[cfg(feature = "caffe2")]
        Err(_) if path.is_dir() => tensorfmt_runtime::kv::open_dir(path),
        opened => opened,
    }
}

/// An [`AtomicFile`] shared between a format writer and the saver that commits it.
struct Shared(Rc<RefCell<AtomicFile>>);

impl Write for Shared {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.borrow_mut().write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.borrow_mut().flush()
    }
}

impl Seek for Shared {
    fn seek(&mut self, pos: SeekFrom) -> std::io::Result<u64> {
        self.0.borrow_mut().seek(pos)
    }
}

/// A streaming, atomic save to a path: tensors are added one at a time, and the file
/// appears (replacing any previous one) only on [`Saver::commit`]. Dropped without a
/// commit, it leaves the old file as it was.
pub struct Saver {
    out: SaverOut,
    path: std::path::PathBuf,
    format: &'static FormatDesc,
}

/// Where a [`Saver`] writes: a file through the format's writer, or a database folder
/// (LMDB, LevelDB) through its backend.
enum SaverOut {
    File {
        file: Rc<RefCell<AtomicFile>>,
        writer: Box<dyn TensorWriter>,
    },
    Db {
        db: Box<dyn tensorfmt_runtime::db::Db>,
        desc: tensorfmt_runtime::db::DbDesc,
        split: Option<u64>,
        tmp: AtomicDir,
    },
}

impl Saver {
    /// Starts saving to `path` in `format` (a built-in format's name), or the built-in
    /// format its extension maps to.
    pub fn create(
        path: impl AsRef<Path>,
        format: Option<&str>,
        options: &WriteOptions,
    ) -> Result<Self> {
        Self::create_in(&Registry::builtin(), path, format, options)
    }

    /// [`Saver::create`] with the formats of `registry`: `format` names one of them, or
    /// `path`'s extension maps to one.
    ///
    /// ```no_run
    /// use tensorfmt::{ByteOrder, DType, Order, Registry, Saver, TensorMeta};
    /// # let my_format: &'static tensorfmt::FormatDesc = tensorfmt::format_named("npy").unwrap();
    /// // A user's format (a generated `&MyFormat::DESC`) beside the built-in ones:
    /// let registry = Registry::builtin().with(my_format);
    /// let mut saver = Saver::create_in(&registry, "out.myf", None, &Default::default())?;
    /// let meta = TensorMeta { name: "w".into(), dtype: DType::F32, shape: vec![2],
    ///                         order: Order::C, byte_order: ByteOrder::Little };
    /// saver.add_bytes(&meta, &[0u8; 8])?;
    /// saver.commit()?;
    /// # Ok::<(), tensorfmt::Error>(())
    /// ```
    pub fn create_in(
        registry: &Registry,
        path: impl AsRef<Path>,
        format: Option<&str>,
        options: &WriteOptions,
    ) -> Result<Self> {
        let path = path.as_ref();
        let format = match format {
            Some(name) => registry.require(name)?,
            None => registry.for_path(path).ok_or_else(|| {
                Error::new(
                    ErrorKind::Unsupported("no format given and the extension maps to none".into()),
                    Location::file(path),
                )
            })?,
        };
        check_align(registry, format, options).map_err(|e| e.in_file(path))?;
        if let Some(desc) = format.db.filter(|d| d.backend != "records") {
            // A database folder: created (it must not exist, as Caffe2's NEW mode), written
            // beside and renamed into place by `commit` (`AtomicDir`, create-new policy:
            // the check and the rename are one step there), so that it appears whole or
            // not at all. Checked here too, to fail before anything is written.
            if path.exists() {
                return Err(Error::new(
                    ErrorKind::Invalid(
                        "the database exists (databases are created, not replaced)".into(),
                    ),
                    Location::file(path),
                ));
            }
            let tmp = AtomicDir::new(path)?;
            let db = (desc.open)(tmp.path(), tensorfmt_runtime::db::Mode::New)
                .map_err(|e| e.in_file(path))?;
            return Ok(Saver {
                out: SaverOut::Db {
                    db,
                    desc,
                    split: options.chunk_elements,
                    tmp,
                },
                path: path.to_path_buf(),
                format,
            });
        }
        let file = Rc::new(RefCell::new(
            AtomicFile::create(path).map_err(|e| e.in_file(path))?,
        ));
        let mut options = options.clone();
        options.destination = Some(path.to_path_buf());
        let writer = (format.writer)(Box::new(Shared(file.clone())), &options)
            .map_err(|e| e.in_file(path))?;
        Ok(Saver {
            out: SaverOut::File { file, writer },
            path: path.to_path_buf(),
            format,
        })
    }

    /// The format being written.
    pub fn format(&self) -> &'static str {
        self.format.name
    }

    /// Writes the tensors inside `tree` (nested dicts, lists, tuples, numbers, strings,
    /// bytes and `None`, tensors as [`Node::Tensor`] leaves named as they are added) instead
    /// of a flat name → tensor dict, for formats that store such an object (`pytorch`;
    /// checked on [`Saver::commit`]: every tensor added must be in the tree, and every
    /// tensor of the tree added). Formats of values beside their tensors (`safetensors`
    /// `__metadata__`, GGUF key/values) take the entries of its top dict that hold no
    /// tensor, each under its name, before the first tensor is added where the values hold
    /// the alignment (GGUF); what they cannot hold is left out and listed in
    /// [`StructureKept::dropped`]. Formats that store tensors alone keep nothing and
    /// change nothing.
    ///
    /// ```no_run
    /// use tensorfmt::{Node, Saver, TensorMeta, DType, Order, ByteOrder};
    /// let mut saver = Saver::create("ckpt.pt", None, &Default::default())?;
    /// saver.set_structure(&Node::Dict(vec![
    ///     (Node::str("model"), Node::Dict(vec![(Node::str("w"), Node::Tensor("model.w".into()))])),
    ///     (Node::str("epoch"), Node::Int(3)),
    /// ]))?;
    /// let meta = TensorMeta { name: "model.w".into(), dtype: DType::F32, shape: vec![2],
    ///                         order: Order::C, byte_order: ByteOrder::Little };
    /// saver.add_bytes(&meta, &[0u8; 8])?;
    /// saver.commit()?;
    /// # Ok::<(), tensorfmt::Error>(())
    /// ```
    pub fn set_structure(&mut self, tree: &Node) -> Result<StructureKept> {
        match &mut self.out {
            SaverOut::File { writer, .. } => writer
                .set_structure(tree)
                .map_err(|e| e.in_file(&self.path)),
            SaverOut::Db { .. } => Ok(StructureKept::default()),
        }
    }

    /// Adds a tensor whose `meta.nbytes()` bytes `data` yields, copied through a bounded
    /// buffer.
    pub fn add(&mut self, meta: &TensorMeta, data: &mut dyn Read) -> Result<()> {
        self.add_payload(meta, Payload::Reader(data))
    }

    /// Adds a tensor that views a storage shared with other tensors (a `torch.save`
    /// storage viewed at an offset with strides), for formats that store views
    /// (`pytorch`): `storage` holds the storage's bytes the first time `view.storage` is
    /// given, `None` after. Returns false, and writes nothing, for formats that store dense
    /// tensors only: add the tensor contiguous instead.
    pub fn add_view(
        &mut self,
        meta: &TensorMeta,
        view: &StorageView,
        storage: Option<&[u8]>,
    ) -> Result<bool> {
        match &mut self.out {
            SaverOut::File { writer, .. } => writer
                .add_view(meta, view, storage.map(Payload::Bytes))
                .map_err(|e| e.in_file(&self.path).in_entry(&meta.name)),
            SaverOut::Db { .. } => Ok(false),
        }
    }

    /// Adds a tensor from bytes in memory, written straight from there.
    pub fn add_bytes(&mut self, meta: &TensorMeta, data: &[u8]) -> Result<()> {
        self.add_payload(meta, Payload::Bytes(data))
    }

    fn add_payload(&mut self, meta: &TensorMeta, data: Payload<'_>) -> Result<()> {
        let fortran =
            meta.order == Order::Fortran && meta.shape.iter().filter(|&&d| d > 1).count() > 1;
        if (self.format.c_order_only || self.format.db.is_some()) && fortran {
            // Reordered in memory: the tensor's bytes, once.
            let n = meta.nbytes()?;
            let mut owned = Vec::new();
            let bytes: &[u8] = match data {
                Payload::Bytes(b) => b,
                Payload::Reader(r) => {
                    r.take(n).read_to_end(&mut owned)?;
                    &owned
                }
            };
            let info = TensorInfo::dense(
                meta.name.clone(),
                meta.dtype,
                meta.shape.clone(),
                Order::Fortran,
                meta.byte_order,
                DataLocation::Range {
                    offset: 0,
                    len: bytes.len() as u64,
                },
            )?;
            let c = tensorfmt_runtime::convert::to_c_order(&info, bytes)?;
            let meta = TensorMeta {
                order: Order::C,
                ..meta.clone()
            };
            return self.add_to_output(&meta, Payload::Bytes(&c));
        }
        let swapped = meta.byte_order == ByteOrder::Big && meta.dtype.swap_unit().unwrap_or(1) > 1;
        if self.format.db.is_some() && swapped {
            // Database formats hold little-endian elements.
            let mut owned = Vec::new();
            let bytes: &[u8] = match data {
                Payload::Bytes(b) => b,
                Payload::Reader(r) => {
                    r.take(meta.nbytes()?).read_to_end(&mut owned)?;
                    &owned
                }
            };
            let le =
                tensorfmt_runtime::convert::cast(bytes, meta.dtype, ByteOrder::Big, meta.dtype)?;
            let meta = TensorMeta {
                byte_order: ByteOrder::Little,
                ..meta.clone()
            };
            return self.add_to_output(&meta, Payload::Bytes(&le));
        }
        self.add_to_output(meta, data)
    }

    fn add_to_output(&mut self, meta: &TensorMeta, data: Payload<'_>) -> Result<()> {
        let path = &self.path;
        match &mut self.out {
            SaverOut::File { writer, .. } => writer.add(meta, data),
            SaverOut::Db {
                db, desc, split, ..
            } => {
                let mut owned = Vec::new();
                let bytes: &[u8] = match data {
                    Payload::Bytes(b) => b,
                    Payload::Reader(r) => {
                        r.read_to_end(&mut owned)?;
                        &owned
                    }
                };
                // One transaction per record, committed, as Caffe2's Save does.
                (desc.encode)(meta, bytes, *split, &mut |k, v| {
                    let mut t = db.transaction()?;
                    t.put(k, v)?;
                    t.commit()
                })
            }
        }
        .map_err(|e| e.in_file(path).in_entry(&meta.name))
    }

    /// Finishes the container and atomically replaces the destination.
    pub fn commit(self) -> Result<()> {
        let Saver { out, path, .. } = self;
        let (file, writer) = match out {
            SaverOut::File { file, writer } => (file, writer),
            SaverOut::Db { db, mut tmp, .. } => {
                db.close().map_err(|e| e.in_file(&path))?;
                return tmp.commit(DirPolicy::CreateNew);
            }
        };
        writer.finish().map_err(|e| e.in_file(&path))?;
        let file = Rc::try_unwrap(file)
            .map_err(|_| {
                Error::new(
                    ErrorKind::Sink("writer still holds the output".into()),
                    Location::file(&path),
                )
            })?
            .into_inner();
        file.commit().map_err(|e| e.in_file(&path))
    }
}

/// Refuses a save that asks for an alignment ([`WriteOptions::align`]) that is not a power
/// of two from 1 to 1 GiB, or of a format whose writer does not align its tensors' data
/// (naming those of `registry` that do).
pub(crate) fn check_align(
    registry: &Registry,
    format: &FormatDesc,
    options: &WriteOptions,
) -> Result<()> {
    if options.checked_align()?.is_none() || format.aligns {
        return Ok(());
    }
    let aligning: Vec<&str> = registry
        .formats()
        .filter(|f| f.aligns)
        .map(|f| f.name)
        .collect();
    let applies = if aligning.is_empty() {
        "no format of this build aligns".to_string()
    } else {
        format!("--align applies to {}", aligning.join(", "))
    };
    Err(Error::from(ErrorKind::Unsupported(format!(
        "{} does not align its tensors' data; {applies}",
        format.name
    ))))
}

/// Saves tensors given as metadata and bytes to `path`, atomically.
pub fn save<'a>(
    path: impl AsRef<Path>,
    format: Option<&str>,
    tensors: impl IntoIterator<Item = (TensorMeta, &'a [u8])>,
    options: &WriteOptions,
) -> Result<()> {
    let mut saver = Saver::create(path, format, options)?;
    for (meta, bytes) in tensors {
        saver.add_bytes(&meta, bytes)?;
    }
    saver.commit()
}

/// Options of [`convert`].
#[derive(Debug, Clone, Default)]
pub struct ConvertOptions {
    /// Output format by name (of `open.registry`); by default the output extension's.
    pub to: Option<String>,
    /// Cast every tensor to this dtype.
    pub dtype: Option<DType>,
    /// Options for the writer.
    pub write: WriteOptions,
    /// Write the tensors flat (name → tensor) even when the input stores them in an object
    /// the output format can hold too. By default a PyTorch checkpoint converted to
    /// PyTorch keeps its nested dicts, lists and non-tensor values; an object that holds
    /// more than dicts, lists, tuples, numbers, strings and tensors (a TorchScript
    /// module) is written flat.
    pub flatten: bool,
    /// Keep each tensor's layout where both formats can hold it: tensors viewing one
    /// storage (zip members of a PyTorch checkpoint) stay views of one shared storage,
    /// with their offsets and strides, and the storage is copied whole. By default every
    /// tensor is written contiguous, holding only its own elements. Ignored with a
    /// `dtype` cast, for inputs that store no object around their tensors (npy, npz),
    /// and for tensors whose storage is not a member of its own (legacy checkpoints),
    /// which are written contiguous.
    pub keep_layout: bool,
    /// How to open the input; its registry holds the output's format too.
    pub open: OpenOptions,
}

/// What [`convert`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConvertSummary {
    /// Input format.
    pub from: &'static str,
    /// Output format.
    pub to: &'static str,
    /// Tensors written.
    pub tensors: usize,
    /// Payload bytes written.
    pub bytes: u64,
    /// The values of the input beside its tensors that the output could not hold, by
    /// path: the keys of safetensors `__metadata__` or GGUF key/values written to a format
    /// without such values, a checkpoint's values that are not text written to
    /// safetensors, and every non-tensor value of a checkpoint or pickle (`epoch`,
    /// `optimizer.param_groups`) written to a format of tensors alone (npz, a Caffe2
    /// database) or with [`ConvertOptions::flatten`].
    pub dropped: Vec<String>,
}

/// Converts `input` to `output`, one tensor at a time (memory bounded by the largest
/// tensor), atomically. `progress` is called after each tensor with (done, total). Both
/// formats are looked up in `options.open.registry` (by default the built-in formats).
pub fn convert(
    input: impl AsRef<Path>,
    output: impl AsRef<Path>,
    options: &ConvertOptions,
    mut progress: impl FnMut(usize, usize),
) -> Result<ConvertSummary> {
    let file = TensorFile::open_with(input.as_ref(), &options.open)?;
    let registry = &options.open.registry;
    let target = match options.to.as_deref() {
        Some(name) => registry.named(name),
        None => registry.for_path(output.as_ref()),
    };
    if let Some(target) = target.filter(|t| t.name == file.format() && t.rewrite.is_some()) {
        // A document that holds more than tensors (an ONNX graph) converted to its own
        // format: rewritten, everything but the moved tensors kept.
        let total = file.tensors().len();
        let bytes = file.tensors().iter().map(|t| t.nbytes().unwrap_or(0)).sum();
        let from = file.format();
        drop(file);
        let rewrite_options = RewriteOptions {
            open: options.open.clone(),
            write: options.write.clone(),
            allow_reshape: false,
            dtype: options.dtype,
        };
        rewrite::rewrite(
            input.as_ref(),
            output.as_ref(),
            std::iter::empty(),
            &rewrite_options,
        )?;
        progress(total, total);
        return Ok(ConvertSummary {
            from,
            to: target.name,
            tensors: total,
            bytes,
            dropped: Vec::new(),
        });
    }
    let mut saver = Saver::create_in(registry, output, options.to.as_deref(), &options.write)?;
    let tree = file.structure()?;
    // A format's values beside its tensors (safetensors `__metadata__`, GGUF key/values)
    // go to formats of such values alone: an object format would store them in the
    // object its tensors are in. They are set before the first tensor (GGUF's alignment
    // is among them); those the output cannot hold are noted.
    let values_beside = file.format_desc().values;
    let mut kept = StructureKept::default();
    if !options.flatten && (!values_beside || saver.format.values) {
        if let Some(tree) = tree.as_ref().filter(|t| t.is_plain()) {
            kept = saver.set_structure(tree)?;
        }
    }
    let dropped = match tree.as_ref() {
        Some(tree) if values_beside && !kept.stored => {
            let mut dropped = Vec::new();
            let values = tree.top_values(&mut dropped);
            values
                .into_iter()
                .map(|(name, _)| name)
                .chain(dropped)
                .collect()
        }
        // The output stores tensors alone (npz, safetensors without text values, a
        // database), or `--flatten` asked for them alone: every value of the object is
        // left out.
        Some(tree) if !kept.stored => tree
            .values()
            .into_iter()
            .map(|(path, _)| {
                if path.is_empty() {
                    "(the whole object)".to_string()
                } else {
                    path
                }
            })
            .collect(),
        _ => kept.dropped,
    };
    let total = file.tensors().len();
    let mut bytes = 0u64;
    // Storages are members of their own in formats around a stored object (PyTorch,
    // TorchScript); an npz member is an npy file, not a storage, and values beside the
    // tensors hold none.
    let mut keep_layout =
        options.keep_layout && options.dtype.is_none() && tree.is_some() && !values_beside;
    let mut storages: std::collections::HashMap<String, u64> = std::collections::HashMap::new();
    for (i, info) in file.tensors().iter().enumerate() {
        if keep_layout {
            if let Some((meta, view, member)) = storage_view(info, &mut storages) {
                let whole = match member {
                    Some(m) => Some(file.load_info(&m)?),
                    None => None,
                };
                if saver.add_view(&meta, &view, whole.as_ref().map(|t| t.data.as_bytes()))? {
                    bytes += whole.map_or(0, |t| t.data.as_bytes().len() as u64);
                    progress(i + 1, total);
                    continue;
                }
                // The output stores dense tensors only.
                keep_layout = false;
                storages.clear();
            }
        }
        let tensor = file.load_info(info)?;
        let (meta, data) = prepare_for_write(info, tensor.data.as_bytes(), options.dtype)
            .map_err(|e| file.source().in_file(e.in_entry(&info.name)))?;
        bytes += data.len() as u64;
        saver.add_bytes(&meta, &data)?;
        progress(i + 1, total);
    }
    let to = saver.format();
    saver.commit()?;
    Ok(ConvertSummary {
        from: file.format(),
        to,
        tensors: total,
        bytes,
        dropped,
    })
}

/// How `info` views a storage of its own: never, where this build reads no zip archives.
#[cfg(not(zip_formats))]
fn storage_view(
    _: &TensorInfo,
    _: &mut std::collections::HashMap<String, u64>,
) -> Option<(TensorMeta, StorageView, Option<TensorInfo>)> {
    None
}

/// How `info` views a storage of its own (a zip member): its metadata, its view (the
/// storage's id from `ids`, by member name) and, the first time a member is seen, a tensor
/// that reads the whole member. `None` when its bytes are not a whole member's suffix.
#[cfg(zip_formats)]
fn storage_view(
    info: &TensorInfo,
    ids: &mut std::collections::HashMap<String, u64>,
) -> Option<(TensorMeta, StorageView, Option<TensorInfo>)> {
    let DataLocation::Encoded {
        content,
        part,
        skip,
        ..
    } = &info.location
    else {
        return None;
    };
    let (member, _, _) = tensorfmt_runtime::zip::member_of(&info.location)?;
    let item = info.dtype.itemsize()? as u64;
    if item == 0 || skip % item != 0 || member.size % item != 0 {
        return None;
    }
    let next = ids.len() as u64;
    let mut first = false;
    let id = *ids.entry(member.name.clone()).or_insert_with(|| {
        first = true;
        next
    });
    let whole = if first {
        Some(
            TensorInfo::strided(
                member.name.clone(),
                DType::U8,
                vec![member.size],
                vec![1],
                ByteOrder::Little,
                content.clone().window(*part, 0, member.size),
            )
            .ok()?,
        )
    } else {
        None
    };
    let meta = TensorMeta {
        name: info.name.clone(),
        dtype: info.dtype,
        shape: info.shape.clone(),
        order: Order::C,
        byte_order: info.byte_order,
    };
    let view = StorageView {
        storage: id,
        storage_nbytes: member.size,
        offset: skip / item,
        strides: info.strides.clone(),
    };
    Some((meta, view, whole))
}

/// The metadata and bytes to hand a writer for a tensor read as `info`: unchanged when
/// its layout is contiguous and no cast is asked for; otherwise reordered to C order and
/// cast (little-endian output).
pub fn prepare_for_write<'a>(
    info: &TensorInfo,
    bytes: &'a [u8],
    dtype: Option<DType>,
) -> Result<(TensorMeta, std::borrow::Cow<'a, [u8]>)> {
    use tensorfmt_runtime::convert;
    let contiguous = TensorMeta::from_info(info);
    match (contiguous, dtype) {
        (Some(meta), None) => Ok((meta, std::borrow::Cow::Borrowed(bytes))),
        (Some(mut meta), Some(d)) if d == info.dtype => {
            meta.dtype = d;
            Ok((meta, std::borrow::Cow::Borrowed(bytes)))
        }
        (contig, target) => {
            let (order, data) = match contig {
                Some(m) => (m.order, std::borrow::Cow::Borrowed(bytes)),
                None => (Order::C, convert::to_c_order(info, bytes)?),
            };
            let (dtype, byte_order, data) = match target {
                Some(d) => (
                    d,
                    ByteOrder::Little,
                    std::borrow::Cow::Owned(convert::cast(&data, info.dtype, info.byte_order, d)?),
                ),
                None => (info.dtype, info.byte_order, data),
            };
            let meta = TensorMeta {
                name: info.name.clone(),
                dtype,
                shape: info.shape.clone(),
                order,
                byte_order,
            };
            Ok((meta, data))
        }
    }
}
