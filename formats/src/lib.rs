//! # tensorfmt
//!
//! Read and write the tensor files of deep learning — PyTorch checkpoints, NumPy
//! `.npy`/`.npz`/`.pkl`, safetensors, ONNX, Caffe2 databases, sharded and
//! torch.distributed checkpoints — from one declarative description per format. Files are
//! memory-mapped and indexed without reading a payload; tensors stored plain are
//! zero-copy views of the map; saves are atomic.
//!
//! ## Open any file
//!
//! The format is found by content, then extension; [`TensorFile::tensors`] lists every
//! tensor without reading its bytes.
//!
//! ```
//! # let dir = tempfile::tempdir()?; std::env::set_current_dir(dir.path())?;
//! # tensorfmt::save("weights.safetensors", None,
//! #     [(tensorfmt::TensorMeta { name: "w".into(), dtype: tensorfmt::DType::F32, shape: vec![2, 3],
//! #       order: tensorfmt::Order::C, byte_order: tensorfmt::ByteOrder::Little }, &[0u8; 24][..])],
//! #     &Default::default())?;
//! let file = tensorfmt::TensorFile::open("weights.safetensors")?;
//! for t in file.tensors() {
//!     println!("{} {} {:?}", t.name, t.dtype, t.shape);
//! }
//! let w = file.load("w")?; // a view of the map: no copy
//! let values: Vec<f32> = w.to_vec()?;
//! assert_eq!(values.len(), 6);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## Load into ndarray (the `ndarray` feature)
//!
//! ```
//! # #[cfg(feature = "ndarray")] {
//! # let dir = tempfile::tempdir()?; std::env::set_current_dir(dir.path())?;
//! use tensorfmt::{nd, ndarray::Array2};
//! let a = Array2::from_shape_fn((2, 3), |(i, j)| (i * 3 + j) as f32);
//! tensorfmt::Saver::create("a.npy", None, &Default::default()).and_then(|mut s| {
//!     let t = nd::from_array("a", &a)?;
//!     s.add_bytes(&t.meta().unwrap(), t.data.as_bytes())?;
//!     s.commit()
//! })?;
//! let file = tensorfmt::TensorFile::open("a.npy")?;
//! let t = file.load_info(&file.tensors()[0])?;
//! let view = nd::view::<f32>(&t)?; // borrows the file's bytes
//! assert_eq!(view, a.into_dyn());
//! # }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## Load a struct of tensors
//!
//! [`StateDict`] (derived) loads a model's weights by their dotted names from any
//! format, with PyTorch's report of missing and unexpected keys ([`state`]).
//!
//! ```
//! # #[cfg(feature = "derive")] {
//! # let dir = tempfile::tempdir()?; std::env::set_current_dir(dir.path())?;
//! use tensorfmt::{StateDict, Tensor};
//!
//! #[derive(StateDict)]
//! struct Linear { weight: Tensor, bias: Option<Tensor> }
//!
//! #[derive(StateDict)]
//! struct Model { layers: Vec<Linear>, epoch: u64 }
//!
//! let model = Model {
//!     layers: vec![Linear { weight: Tensor::from_slice("", &[2, 2], &[1f32, 0., 0., 1.])?, bias: None }],
//!     epoch: 3,
//! };
//! model.save("model.pt", None)?; // {"layers": [{"weight": tensor}], "epoch": 3}
//! let back = Model::load("model.pt")?; // strict: every key, nothing more
//! assert_eq!(back.layers[0].weight.to_vec::<f32>()?, [1., 0., 0., 1.]);
//! assert_eq!(back.epoch, 3);
//! # }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## Convert
//!
//! Any readable format to any writable one, a tensor at a time.
//!
//! ```
//! # let dir = tempfile::tempdir()?; std::env::set_current_dir(dir.path())?;
//! # let meta = tensorfmt::TensorMeta { name: "w".into(), dtype: tensorfmt::DType::F32, shape: vec![2],
//! #     order: tensorfmt::Order::C, byte_order: tensorfmt::ByteOrder::Little };
//! # tensorfmt::save("weights.npz", None, [(meta, &[0u8; 8][..])], &Default::default())?;
//! let summary = tensorfmt::convert("weights.npz", "weights.safetensors", &Default::default(), |_, _| {})?;
//! println!("{} tensors", summary.tensors);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## Save a checkpoint
//!
//! A [`Saver`] streams tensors into a temporary file and renames it into place on
//! [`Saver::commit`]; [`Saver::set_structure`] keeps a PyTorch checkpoint's nesting and
//! values.
//!
//! ```
//! # let dir = tempfile::tempdir()?; std::env::set_current_dir(dir.path())?;
//! use tensorfmt::{Node, Saver, Tensor};
//! let w = Tensor::from_slice("model.w", &[2], &[0.5f32, 1.5])?;
//! let mut saver = Saver::create("ckpt.pt", None, &Default::default())?;
//! saver.set_structure(&Node::Dict(vec![
//!     (Node::str("model"), Node::Dict(vec![(Node::str("w"), Node::Tensor("model.w".into()))])),
//!     (Node::str("epoch"), Node::Int(3)),
//! ]))?;
//! saver.add_bytes(&w.meta().unwrap(), w.data.as_bytes())?;
//! saver.commit()?; // torch.load gives {"model": {"w": tensor([0.5, 1.5])}, "epoch": 3}
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## Caffe2's input pipeline (the `caffe2` feature)
//!
//! Batches of a database of `TensorProtos` records, sharded and prefetched by a thread,
//! as Caffe2's `TensorProtosDBInput` gives them.
//!
//! ```
//! # #[cfg(feature = "caffe2")] {
//! # let dir = tempfile::tempdir()?; let path = dir.path().join("train.minidb");
//! # use tensorfmt::generated::caffe2_lmdb::messages::{TensorProto, TensorProtos};
//! # use tensorfmt::prost::Message;
//! # let desc = tensorfmt::caffe2::db_format("minidb")?.db.unwrap();
//! # let mut db = (desc.open)(&path, tensorfmt::runtime::db::Mode::New)?;
//! # { let mut t = db.transaction()?;
//! #   for i in 0..10u8 {
//! #     let p = TensorProtos { protos: vec![
//! #         TensorProto { dims: vec![4], data_type: Some(6), byte_data: Some(vec![i; 4]), ..Default::default() },
//! #         TensorProto { dims: vec![], data_type: Some(2), int32_data: vec![i.into()], ..Default::default() }] };
//! #     t.put(format!("{i:04}").as_bytes(), &p.encode_to_vec())?; }
//! #   t.commit()?; }
//! # db.close()?;
//! use tensorfmt::caffe2::{DbInput, DbInputOptions};
//! let options = DbInputOptions { batch_size: 5, epochs: Some(1), ..Default::default() };
//! let mut batches = 0;
//! for batch in DbInput::open(&path, &options)? {
//!     let batch = batch?; // batch.tensors[i]: [5] + the record's dims
//!     assert_eq!(batch.tensors[0].info.shape, [5, 4]);
//!     batches += 1;
//! }
//! assert_eq!(batches, 2);
//! # }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## Features
//!
//! The default covers the common case with no C library and no network client: `npy`,
//! `npz`, `safetensors`, `pickle`, `pytorch`, `onnx` and `derive`. Off by default:
//! `caffe2` (MiniDB; LMDB read by tensorfmt's own reader), `lmdb` (LMDB written, through
//! liblmdb), `leveldb`, `full` (every format and backend), `ndarray`, `half`, `candle`,
//! `cuda` (device sinks), and object storage: `s3`, `gcs`, `azure`, `http`.
//!
//! ## Formats of your own
//!
//! Formats of a user's own crate — generated from its `.fmt` schemas by
//! [`#[derive(TensorFormat)]`](TensorFormat) or by `tensorfmt_codegen::compile` in its
//! build script, reaching the runtime through [`runtime::gen`] —
//! join the built-in ones in a [`Registry`], which [`OpenOptions`], [`Saver::create_in`],
//! [`convert`] and [`cli::run_with`] take.
#![warn(missing_docs)]

use std::cell::RefCell;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;

/// The `candle_core` crate the [`candle`] interop is built on (the `candle` feature).
#[cfg(feature = "candle")]
pub use candle_core;
/// The `ndarray` crate the [`nd`] interop is built on (the `ndarray` feature).
#[cfg(feature = "ndarray")]
pub use ndarray;
/// The `prost` crate the generated message types (`generated::onnx::messages`) derive
/// from: `use tensorfmt::prost::Message;` to encode and decode them.
#[cfg(any(feature = "onnx", feature = "caffe2"))]
pub use prost;
pub use tensorfmt_runtime as runtime;
/// The `half` crate, whose `f16` and `bf16` are [`Element`]s (the `half` feature).
#[cfg(feature = "half")]
pub use tensorfmt_runtime::half;
pub use tensorfmt_runtime::registry::{FormatDesc, Payload, StorageView, StructureKept};
pub use tensorfmt_runtime::sink::{Flow, Sink, Tensor, TensorData};
pub use tensorfmt_runtime::tree::Node;
pub use tensorfmt_runtime::Compression;
pub use tensorfmt_runtime::{
    ByteOrder, DType, DataLocation, Element, Error, ErrorKind, Limits, Location, Order, Result,
    Source, TensorInfo, TensorMeta, WriteOptions,
};

use tensorfmt_runtime::limits::InflateBudget;
use tensorfmt_runtime::output::{AtomicDir, AtomicFile};
use tensorfmt_runtime::read::{read_tensor, ReadOptions};
use tensorfmt_runtime::registry::TensorWriter;
use tensorfmt_runtime::sink::ViewSink;

#[cfg(feature = "caffe2")]
pub mod caffe2;
#[cfg(feature = "candle")]
pub mod candle;
pub mod cli;
#[cfg(feature = "pytorch")]
pub mod dcp;
#[cfg(feature = "joblib")]
pub mod joblib;
#[cfg(feature = "ndarray")]
pub mod nd;
#[cfg(object_storage)]
pub mod object;
mod registry;
mod rewrite;
#[cfg(feature = "pytorch")]
pub mod scan;
pub mod sharded;
pub mod state;
#[cfg(feature = "pytorch")]
pub mod torch_pickle;

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

pub use state::{LoadOptions, LoadReport, SaveOptions, StateDict};
/// `#[derive(StateDict)]`: a struct of tensors that loads from and saves to any format
/// ([`state`]; the trait is [`state::StateDict`]).
#[cfg(feature = "derive")]
pub use tensorfmt_derive::StateDict;

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
    /// Decompressed bytes that tensors loaded from this file hold at once
    /// ([`Limits::inflated_budget`] of the file's size).
    inflated: Arc<InflateBudget>,
    /// The files of a checkpoint saved in several, when this is one: `source` is then its
    /// index, and every tensor is read from the shard that holds it.
    shards: Option<Box<sharded::Shards>>,
    /// What the file's bytes need kept while it is open (the local copy of a folder read
    /// from object storage).
    #[allow(dead_code)]
    keep: Option<Box<dyn std::any::Any + Send + Sync>>,
    /// The tensors by name, made on the first lookup ([`TensorFile::tensor`]).
    by_name: NameIndex,
}

/// Positions of a list's items sorted by name, made once, on the first lookup: a lookup
/// by name is then a binary search, at 4 bytes per item. Of items that share a name, the
/// first in the list is found.
#[derive(Debug, Default)]
pub(crate) struct NameIndex(std::sync::OnceLock<Vec<u32>>);

impl NameIndex {
    /// The first item of `items` whose name (`name_of`) is `name`. `items` must be the
    /// same list at every call.
    pub(crate) fn find<'a, T>(
        &self,
        items: &'a [T],
        name_of: impl Fn(&T) -> &str,
        name: &str,
    ) -> Option<&'a T> {
        if u32::try_from(items.len()).is_err() {
            return items.iter().find(|t| name_of(t) == name);
        }
        let sorted = self.0.get_or_init(|| {
            let mut sorted: Vec<u32> = (0..items.len() as u32).collect();
            // Stable: of equal names, the first in the list comes first.
            sorted.sort_by(|&a, &b| name_of(&items[a as usize]).cmp(name_of(&items[b as usize])));
            sorted
        });
        let at = sorted.partition_point(|&i| name_of(&items[i as usize]) < name);
        let &i = sorted.get(at)?;
        let item = &items[i as usize];
        (name_of(item) == name).then_some(item)
    }
}

impl std::fmt::Debug for TensorFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TensorFile")
            .field("path", &self.source.path())
            .field("format", &self.format.name)
            .field("tensors", &self.tensors.len())
            .field(
                "shards",
                &self.shards.as_ref().map_or(0, |s| s.shards.len()),
            )
            .finish()
    }
}

impl TensorFile {
    /// Memory-maps `path`, detects its format and indexes its tensors.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(path, &OpenOptions::default())
    }

    /// [`TensorFile::open`] with options: among others, the [`Registry`] of formats the
    /// file may be of.
    ///
    /// A sharded checkpoint opens as one file: its index (`model.safetensors.index.json`,
    /// `pytorch_model.bin.index.json`), or the folder holding one, lists every tensor of
    /// every shard, each shard opened once ([`sharded`]; [`TensorFile::shards`]). A
    /// folder holding no index but a checkpoint of one file, `model.safetensors` (or
    /// else `pytorch_model.bin`), as Hugging Face saves a model that fits one shard,
    /// opens as that file. Any other folder is read as the LMDB or LevelDB database it
    /// holds.
    pub fn open_with(path: impl AsRef<Path>, options: &OpenOptions) -> Result<Self> {
        let path = path.as_ref();
        if sharded::is_index_name(path) {
            return Self::open_sharded(path, options);
        }
        if let Some(url) = remote(path) {
            return Self::open_remote(url, options);
        }
        let source = match Source::open(path) {
            Ok(source) => source,
            // Only a path that is not a regular file is looked at again.
            Err(_) if path.is_dir() => {
                #[cfg(feature = "pytorch")]
                if path.join(dcp::METADATA).is_file() {
                    return Self::open_with(path.join(dcp::METADATA), options);
                }
                if let Some(index) = sharded::find_index(path)? {
                    return Self::open_sharded(&index, options);
                }
                if let Some(single) = sharded::single_file(path) {
                    return Self::open_with(single, options);
                }
                open_folder(path)?
            }
            Err(e) => return Err(e),
        };
        Self::from_source(source, options)
    }

    /// The object at `url`, in a build with object storage ([`object`]).
    #[cfg(object_storage)]
    fn open_remote(url: &str, options: &OpenOptions) -> Result<Self> {
        object::open(url, options).map(|(file, _)| file)
    }

    /// The object at `url`: refused by a build without object storage.
    #[cfg(not(object_storage))]
    fn open_remote(url: &str, _: &OpenOptions) -> Result<Self> {
        Err(no_object_storage(url))
    }

    /// The sharded checkpoint whose index is `index`.
    fn open_sharded(index: &Path, options: &OpenOptions) -> Result<Self> {
        let (source, tensors, shards) = sharded::open(index, options)?;
        let format = shards.shards[0].file.format_desc();
        let size: u64 = shards
            .shards
            .iter()
            .map(|s| s.file.source().data().len())
            .sum();
        let mut file = Self::indexed(source, format, tensors, options);
        file.inflated = InflateBudget::new(options.limits.inflated_budget(size));
        file.shards = Some(Box::new(shards));
        Ok(file)
    }

    /// The shards of a checkpoint saved in several files (a Hugging Face sharded
    /// checkpoint opened by its index or folder), each opened once, in the order of their
    /// names; `None` for a single file.
    pub fn shards(&self) -> Option<&[sharded::Shard]> {
        self.shards.as_deref().map(|s| s.shards.as_slice())
    }

    /// The index of a sharded checkpoint: every tensor's shard file and the index's
    /// `metadata`; `None` for a single file.
    pub fn shard_index(&self) -> Option<&sharded::Index> {
        self.shards.as_deref().map(|s| &s.index)
    }

    /// The shard that holds `info`'s bytes, for a sharded checkpoint: `None` for a single
    /// file, an error for a tensor that no shard holds.
    fn shard_of(&self, info: &TensorInfo) -> Result<Option<&TensorFile>> {
        let Some(shards) = &self.shards else {
            return Ok(None);
        };
        shards.holding(&info.name).map(Some).ok_or_else(|| {
            Error::new(
                ErrorKind::NotFound(format!("tensor '{}' in any shard", info.name)),
                self.source.location(),
            )
        })
    }

    /// Indexes an already opened source (a buffer, a stream, or a map).
    ///
    /// The tensors it may list are bounded by its size ([`Limits::for_input`]).
    pub fn from_source(source: Source, options: &OpenOptions) -> Result<Self> {
        let options = &sized_for(options, &source);
        let (format, tensors) = Self::resolve(&source, options, |f| {
            (f.index)(&source, &options.limits).map_err(|e| tensor_bound(e, &options.limits))
        })?;
        source.check_unchanged()?;
        Ok(Self::indexed(source, format, tensors, options))
    }

    /// Opens the database at `path` as [`TensorFile::open_with`] does, and keeps what its
    /// format's mapping found beside the tensors: the records that hold them and the
    /// values that are not tensors. `None` for a format that is not a database's.
    #[cfg(feature = "caffe2")]
    pub(crate) fn open_mapped(
        path: &Path,
        options: &OpenOptions,
    ) -> Result<(Self, Option<tensorfmt_runtime::kv::Mapped>)> {
        let source = open_source(path)?;
        let options = &sized_for(options, &source);
        let bound = |e| tensor_bound(e, &options.limits);
        let (format, (tensors, mapped)) = Self::resolve(&source, options, |f| match f.db {
            Some(db) => {
                let mut mapped = (db.map)(&source, &options.limits).map_err(bound)?;
                Ok((std::mem::take(&mut mapped.tensors), Some(mapped)))
            }
            None => Ok(((f.index)(&source, &options.limits).map_err(bound)?, None)),
        })?;
        Ok((Self::indexed(source, format, tensors, options), mapped))
    }

    /// The format `options` names, or the first of those that recognise `source`
    /// ([`Registry::candidates`]) that `read` reads it as, with what `read` made of it.
    /// A file no detector recognises is read as the formats of its extension, so that a
    /// damaged file gets its format's own error (entry, offset, reason); when every
    /// candidate fails, the error names each and what failed in it.
    fn resolve<T>(
        source: &Source,
        options: &OpenOptions,
        mut read: impl FnMut(&'static FormatDesc) -> Result<T>,
    ) -> Result<(&'static FormatDesc, T)> {
        let registry = &options.registry;
        if let Some(name) = &options.format {
            let f = registry.require(name).map_err(|e| source.in_file(e))?;
            return read(f).map(|t| (f, t)).map_err(|e| source.in_file(e));
        }
        let mut tried = registry.candidates(source, &options.limits);
        let detected = !tried.is_empty();
        if !detected {
            tried = source
                .path()
                .map(|p| registry.all_for_path(p))
                .unwrap_or_default();
        }
        let mut failed = Vec::new();
        for f in tried {
            match read(f) {
                Ok(t) if detected => return Ok((f, t)),
                // Read by its extension, but not recognised: the detector decides.
                Ok(_) => failed.push((
                    f,
                    Error::from(ErrorKind::Unsupported(format!(
                        "it reads, but its first bytes are not those of the format's files \
                         (give `--format {}` to read it as one)",
                        f.name
                    ))),
                )),
                Err(e) => failed.push((f, source.in_file(e))),
            }
        }
        if detected && failed.len() == 1 {
            return Err(failed.pop().map(|(_, e)| e).expect("one error"));
        }
        let each: Vec<String> = failed
            .into_iter()
            .map(|(f, mut e)| {
                e.location.file = None;
                format!("as {}: {e}", f.name)
            })
            .collect();
        let why = if detected {
            format!(
                "recognised by {} formats, read by none ({})",
                each.len(),
                each.join("; ")
            )
        } else if each.is_empty() {
            format!(
                "not a file of any known tensor format: none of {} recognises its first \
                 bytes (give the format, `--format NAME` or `OpenOptions::format`, to see \
                 why that one refuses it)",
                registry.names().join(", ")
            )
        } else {
            format!(
                "not a file of any known tensor format: no format recognises its first bytes, \
                 and read as the formats of its extension it is refused ({})",
                each.join("; ")
            )
        };
        Err(Error::new(ErrorKind::Unsupported(why), source.location()))
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
        let inflated = InflateBudget::new(options.limits.inflated_budget(source.data().len()));
        TensorFile {
            source,
            format,
            tensors,
            read_options,
            inflated,
            shards: None,
            keep: None,
            by_name: NameIndex::default(),
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
        if let Some(shards) = &self.shards {
            return sharded::merged_structure(&shards.shards);
        }
        (self.format.structure)(&self.source, &self.read_options.limits)
            .map_err(|e| self.source.in_file(e))
    }

    /// Metadata of every tensor, in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// Metadata of the tensor named `name` (the first of that name). The first call
    /// sorts the names once; every lookup is then a binary search.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.by_name.find(&self.tensors, |t| &t.name, name)
    }

    /// The underlying source.
    pub fn source(&self) -> &Source {
        &self.source
    }

    /// Streams one tensor's bytes into `sink`.
    pub fn read_into(&self, info: &TensorInfo, sink: &mut dyn Sink) -> Result<Flow> {
        if let Some(shard) = self.shard_of(info)? {
            return shard.read_into(info, sink);
        }
        let flow = read_tensor(&self.source, info, sink, &self.read_options)
            .map_err(|e| self.source.in_file(e));
        self.source.check_unchanged()?;
        flow
    }

    /// Streams every tensor into `sink`, in file order, honouring `Skip` and `Stop`.
    pub fn read_all(&self, sink: &mut dyn Sink) -> Result<()> {
        if self.shards.is_some() {
            for info in &self.tensors {
                if self.read_into(info, sink)? == Flow::Stop {
                    break;
                }
            }
            return Ok(());
        }
        let done = tensorfmt_runtime::read::read_all(
            &self.source,
            &self.tensors,
            sink,
            &self.read_options,
        )
        .map_err(|e| self.source.in_file(e));
        self.source.check_unchanged()?;
        done
    }

    /// The tensor named `name`: a zero-copy view of the memory map where its bytes are
    /// stored plain, an owned 64-byte-aligned copy otherwise.
    ///
    /// The bytes of deflated tensors that loads from this file hold at once are bounded
    /// by [`Limits::inflated_budget`] of the file's size (by default the larger of
    /// 256 MiB and 2048 times the file's size): each growth of a tensor's buffer is
    /// charged before it is allocated, past the budget the load fails with
    /// [`ErrorKind::Limit`], and dropping a loaded tensor gives its charge back.
    pub fn load(&self, name: &str) -> Result<Tensor> {
        let info = self.tensor(name).ok_or_else(|| {
            Error::new(
                ErrorKind::NotFound(format!("tensor '{name}'")),
                self.source.location(),
            )
        })?;
        self.load_info(info)
    }

    /// The box of tensor `info` that starts at `offsets` and spans `sizes` elements along
    /// each dimension, as a tensor of shape `sizes` in C order: what a rank of another
    /// world size loads of a sharded tensor. For a tensor of a torch.distributed
    /// checkpoint only the chunks the box overlaps are opened, and of each only the rows
    /// that meet the box are copied (their zip members' CRC-32s, which cover whole
    /// chunks, are not checked); any other tensor is read whole and the box cut from it.
    ///
    /// ```no_run
    /// let ckpt = tensorfmt::TensorFile::open("checkpoint_dir")?; // a DCP folder
    /// let w = ckpt.tensor("model.layers.0.weight").unwrap();
    /// // Rank 1 of 4, sharded along dimension 0:
    /// let rows = w.shape[0] / 4;
    /// let mine = ckpt.load_slice(w, &[rows, 0], &[rows, w.shape[1]])?;
    /// # Ok::<(), tensorfmt::Error>(())
    /// ```
    #[cfg(feature = "pytorch")]
    pub fn load_slice(&self, info: &TensorInfo, offsets: &[u64], sizes: &[u64]) -> Result<Tensor> {
        let holder = self.shard_of(info)?.unwrap_or(self);
        let data = dcp::read_box(holder, info, offsets, sizes)
            .map_err(|e| holder.source.in_file(e.in_entry(&info.name)))?;
        let n = data.len() as u64;
        let slice = TensorInfo::dense(
            info.name.clone(),
            info.dtype,
            sizes.to_vec(),
            Order::C,
            info.byte_order,
            DataLocation::Range { offset: 0, len: n },
        )?;
        Ok(Tensor {
            info: slice,
            data: TensorData::Mapped {
                bytes: tensorfmt_runtime::source::Bytes::Owned(data.into()),
                range: 0..n as usize,
            },
        })
    }

    /// Like [`TensorFile::load`], for a tensor of this file's index.
    pub fn load_info(&self, info: &TensorInfo) -> Result<Tensor> {
        let mut sink = ViewSink::default().with_budget(self.inflated.clone());
        self.read_into(info, &mut sink)?;
        sink.tensors.pop().ok_or_else(|| {
            Error::new(
                ErrorKind::Sink(format!("no data for tensor '{}'", info.name)),
                self.source.location(),
            )
        })
    }

    /// The elements of `info` in C order, in its stored dtype and byte order, as a stream
    /// of exactly `info.nbytes()` bytes: what [`TensorFile::load_info`] gives, reordered,
    /// without holding the tensor.
    ///
    /// Memory: the bytes of a deflated zip member are inflated as they are read (a
    /// buffer's worth at a time, the member's CRC-32 checked when its end is reached);
    /// bytes stored plain are viewed in the memory map; a tensor laid out in another
    /// order than C (a strided view, Fortran order) holds its storage and streams its
    /// elements from there ([`runtime::convert::COrder`]). A view whose elements take
    /// more than its storage and more than [`Limits::max_view_bytes`] is refused here,
    /// before anything is read. Errors met while streaming come as `std::io::Error`s
    /// that carry this crate's [`Error`] (naming the file and tensor).
    pub fn elements(&self, info: &TensorInfo) -> Result<Box<dyn Read + '_>> {
        if let Some(shard) = self.shard_of(info)? {
            return shard.elements(info);
        }
        let in_file = |e: Error| self.source.in_file(e.in_entry(&info.name));
        let nbytes = info.nbytes().map_err(in_file)?;
        if nbytes == 0 || info.order() == Some(Order::C) {
            return self.stored(info, nbytes);
        }
        tensorfmt_runtime::convert::check_view(
            info,
            info.location.len(),
            self.read_options.limits.max_view_bytes,
        )
        .map_err(in_file)?;
        let storage = self.load_info(info)?;
        let elements = tensorfmt_runtime::convert::COrder::new(info, Held(storage, usize::MAX))
            .map_err(in_file)?;
        Ok(Box::new(elements))
    }

    /// The first `n` stored bytes of `info` as a stream: inflated as read for a deflated
    /// zip member, viewed or loaded otherwise.
    fn stored(&self, info: &TensorInfo, n: u64) -> Result<Box<dyn Read + '_>> {
        #[cfg(zip_formats)]
        if info.location.compressed_len().is_some() {
            if let Some((member, skip, len)) = tensorfmt_runtime::zip::member_of(&info.location) {
                if n <= len {
                    let inner = tensorfmt_runtime::zip::member_reader(
                        self.source.data(),
                        member,
                        &self.read_options.limits,
                    )
                    .map_err(|e| self.source.in_file(e.in_entry(&info.name)))?;
                    return Ok(Box::new(MemberWindow {
                        inner,
                        skip,
                        left: n,
                        file: self.source.location(),
                        name: info.name.clone(),
                    }));
                }
            }
        }
        let t = self.load_info(info)?;
        let n = usize::try_from(n)
            .ok()
            .filter(|&n| n <= t.data.as_bytes().len())
            .ok_or_else(|| {
                self.source.in_file(Error::new(
                    ErrorKind::SizeMismatch(format!(
                        "tensor '{}' needs {n} bytes, its data holds {}",
                        info.name,
                        t.data.as_bytes().len()
                    )),
                    Location::default().with_entry(&info.name),
                ))
            })?;
        Ok(Box::new(std::io::Cursor::new(Held(t, n))))
    }

    /// Checks the container beyond what the tensors use: for a zip archive, every member's
    /// local header and CRC-32, metadata members and members no tensor refers to
    /// included. Returns the number of members checked (0 when the file is not a zip
    /// archive). [`TensorFile::read_all`] checks the tensors' own bytes.
    #[cfg(zip_formats)]
    pub fn verify_container(&self) -> Result<usize> {
        if let Some(shards) = &self.shards {
            return shards
                .shards
                .iter()
                .map(|s| s.file.verify_container())
                .sum();
        }
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

/// A loaded tensor's first bytes (all of them with `usize::MAX`), for streams over them.
struct Held(Tensor, usize);

impl AsRef<[u8]> for Held {
    fn as_ref(&self) -> &[u8] {
        let b = self.0.data.as_bytes();
        &b[..self.1.min(b.len())]
    }
}

/// A window of a zip member's content, inflated as it is read: `skip` bytes passed over,
/// `left` bytes given, the rest read through with the last of them so that the member's
/// size and CRC-32 are checked before the window's last bytes are given.
#[cfg(zip_formats)]
struct MemberWindow<'a> {
    inner: Box<dyn Read + 'a>,
    skip: u64,
    left: u64,
    file: Location,
    name: String,
}

#[cfg(zip_formats)]
impl Read for MemberWindow<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let located = |e: std::io::Error| {
            let e = tensorfmt_runtime::zip::io_to_error(e);
            let mut e = e.in_entry(&self.name);
            if e.location.file.is_none() {
                e.location.file = self.file.file.clone();
            }
            std::io::Error::other(e)
        };
        if self.skip > 0 {
            let skipped =
                std::io::copy(&mut (&mut self.inner).take(self.skip), &mut std::io::sink())
                    .map_err(located)?;
            if skipped < self.skip {
                return Err(located(std::io::Error::from(
                    std::io::ErrorKind::UnexpectedEof,
                )));
            }
            self.skip = 0;
        }
        if self.left == 0 {
            std::io::copy(&mut self.inner, &mut std::io::sink()).map_err(located)?;
            return Ok(0);
        }
        let want = self.left.min(buf.len() as u64) as usize;
        let n = self.inner.read(&mut buf[..want]).map_err(located)?;
        if n == 0 && want > 0 {
            return Err(located(std::io::Error::from(
                std::io::ErrorKind::UnexpectedEof,
            )));
        }
        self.left -= n as u64;
        if self.left == 0 {
            // The last bytes of the window: the member's end and CRC-32 are checked
            // before they are given (a writer stops reading at the tensor's size).
            std::io::copy(&mut self.inner, &mut std::io::sink()).map_err(located)?;
        }
        Ok(n)
    }
}

/// The URL `path` is, when it names an object in a store (`s3://bucket/key`,
/// `gs://...`, `http(s)://...`): what [`object`] opens in a build with a backend.
pub(crate) fn remote(path: &Path) -> Option<&str> {
    path.to_str()
        .filter(|t| tensorfmt_runtime::source::is_url(t))
}

/// The error of a build without object storage given a URL.
#[cfg(not(object_storage))]
pub(crate) fn no_object_storage(url: &str) -> Error {
    Error::new(
        ErrorKind::Unsupported(
            "object storage locations: this build has none of the features s3, gcs, azure, \
             http"
                .into(),
        ),
        Location::file(url),
    )
}

/// `options` for reading `source`: the tensors it may list bounded by its size
/// ([`Limits::for_input`]).
fn sized_for(options: &OpenOptions, source: &Source) -> OpenOptions {
    OpenOptions {
        limits: options.limits.for_input(source.data().len()),
        ..options.clone()
    }
}

/// `e`, said to be the bound that [`Limits::for_input`] puts on a file's tensors when it
/// is the limit on tensors of `sized` and that is the budget's, not `max_tensors`.
fn tensor_bound(mut e: Error, sized: &Limits) -> Error {
    let what = match e.kind {
        ErrorKind::Limit { limit, .. }
            if limit == sized.max_tensors && limit < Limits::default().max_tensors =>
        {
            if sized.max_tensor_bytes.is_some() {
                "tensors (each charged 2 KiB of the budget that --max-tensor-bytes, \
                 `Limits::max_tensor_bytes`, sets)"
            } else {
                "tensors for a file of this size (65,536 and one per 128 bytes of the file: \
                 each is charged 2 KiB of a budget of 128 MiB and 16 bytes per byte of the \
                 file; --max-tensor-bytes, `Limits::max_tensor_bytes`, raises it)"
            }
        }
        _ => return e,
    };
    if let ErrorKind::Limit { what: w, .. } = &mut e.kind {
        *w = what;
    }
    e
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

/// A folder that is no sharded or distributed checkpoint: the database it holds, or an
/// error saying what was looked for.
fn open_folder(path: &Path) -> Result<Source> {
    #[cfg(feature = "caffe2")]
    if tensorfmt_runtime::kv::names_a_database(path) {
        return tensorfmt_runtime::kv::open_dir(path);
    }
    let (databases, note) = if cfg!(feature = "caffe2") {
        (
            ", an LMDB environment (data.mdb) or a LevelDB database (CURRENT, MANIFEST-*)",
            "",
        )
    } else {
        (
            "",
            " (LMDB and LevelDB databases are read in a build with the `caffe2` feature)",
        )
    };
    Err(Error::new(
        ErrorKind::Unsupported(format!(
            "a folder holding nothing tensorfmt reads as one checkpoint: it looked for a \
             sharded checkpoint's index (model.safetensors.index.json, \
             pytorch_model.bin.index.json), model.safetensors or pytorch_model.bin, a \
             torch.distributed checkpoint (.metadata){databases}; name a file inside it to \
             read that file{note}"
        )),
        Location::file(path),
    ))
}

/// An output (an [`AtomicFile`], an object store upload) shared between a format writer
/// and the saver that commits it.
struct Shared<T>(Rc<RefCell<T>>);

impl<T: Write> Write for Shared<T> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.borrow_mut().write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.borrow_mut().flush()
    }
}

impl<T: Seek> Seek for Shared<T> {
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
    /// The bytes of the names added so far ([`FormatDesc::check_name`]).
    names: u64,
}

/// Where a [`Saver`] writes: a file through the format's writer, or a database folder
/// (LMDB, LevelDB) through its backend.
enum SaverOut {
    File {
        file: Rc<RefCell<AtomicFile>>,
        writer: Box<dyn TensorWriter>,
    },
    /// An object in a store, uploaded on commit.
    #[cfg(object_storage)]
    Remote {
        file: Rc<RefCell<tensorfmt_object::Upload>>,
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
        if let Some(url) = remote(path) {
            return Self::create_remote(url, format, options);
        }
        if let Some(desc) = format.db.filter(|d| d.backend != "records") {
            // A database folder: written beside and renamed into place by `commit`
            // under the rule of folder outputs (`db_folder`), so that it appears whole
            // or not at all; checked here to fail before anything is written, and by the
            // commit again.
            let tmp = AtomicDir::new(path)?;
            tmp.check(&db_folder(&desc))?;
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
                names: 0,
            });
        }
        existing_output(path)?;
        let file = Rc::new(RefCell::new(
            AtomicFile::create(path).map_err(|e| e.in_file(path))?,
        ));
        let mut options = options.clone();
        options.destination = Some(path.to_path_buf());
        options.save_tag = Some(file.borrow().save_tag());
        let writer = (format.writer)(Box::new(Shared(file.clone())), &options)
            .map_err(|e| e.in_file(path))?;
        Ok(Saver {
            out: SaverOut::File { file, writer },
            path: path.to_path_buf(),
            format,
            names: 0,
        })
    }

    /// A save to the object at `url`: written to a temporary file, uploaded on commit.
    #[cfg(object_storage)]
    fn create_remote(
        url: &str,
        format: &'static FormatDesc,
        options: &WriteOptions,
    ) -> Result<Self> {
        if format.db.is_some_and(|d| d.backend != "records") {
            return Err(Error::new(
                ErrorKind::Unsupported(format!(
                    "{} databases in object storage (write to a folder)",
                    format.name
                )),
                Location::file(url),
            ));
        }
        let file = Rc::new(RefCell::new(tensorfmt_object::Upload::create(url)?));
        let mut options = options.clone();
        // Files beside the output (ONNX external data) cannot be placed in a store.
        options.external = match options.external {
            ExternalData::Auto => ExternalData::Inline,
            ExternalData::Inline => ExternalData::Inline,
            ExternalData::External { .. } => {
                return Err(Error::new(
                    ErrorKind::Unsupported(
                        "external data files beside a model in object storage".into(),
                    ),
                    Location::file(url),
                ))
            }
        };
        let writer = (format.writer)(Box::new(Shared(file.clone())), &options)
            .map_err(|e| e.in_file(url))?;
        Ok(Saver {
            out: SaverOut::Remote { file, writer },
            path: url.into(),
            format,
            names: 0,
        })
    }

    /// A save to the object at `url`: refused by a build without object storage.
    #[cfg(not(object_storage))]
    fn create_remote(url: &str, _: &'static FormatDesc, _: &WriteOptions) -> Result<Self> {
        Err(no_object_storage(url))
    }

    /// The format being written.
    pub fn format(&self) -> &'static str {
        self.format.name
    }

    /// The descriptor of the format being written.
    pub fn format_desc(&self) -> &'static FormatDesc {
        self.format
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
        // A tree nested past what the readers take is refused before a writer walks it.
        tensorfmt_runtime::tree::check_depth(tree, Limits::default().max_depth)
            .map_err(|e| e.in_file(&self.path))?;
        match &mut self.out {
            SaverOut::File { writer, .. } => writer
                .set_structure(tree)
                .map_err(|e| e.in_file(&self.path)),
            #[cfg(object_storage)]
            SaverOut::Remote { writer, .. } => writer
                .set_structure(tree)
                .map_err(|e| e.in_file(&self.path)),
            SaverOut::Db { .. } => Ok(StructureKept::default()),
        }
    }

    /// Adds a tensor whose `meta.nbytes()` bytes `data` yields, copied through a bounded
    /// buffer. A name the format cannot store ([`FormatDesc::check_name`]) is refused
    /// before anything of the tensor is written.
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
        // Counted once the view is written: a tensor not taken as a view is added again.
        let mut names = self.names;
        self.format
            .check_name(&meta.name, &mut names)
            .map_err(|e| e.in_file(&self.path))?;
        let kept = match &mut self.out {
            SaverOut::File { writer, .. } => writer
                .add_view(meta, view, storage.map(Payload::Bytes))
                .map_err(|e| e.in_file(&self.path).in_entry(&meta.name)),
            #[cfg(object_storage)]
            SaverOut::Remote { writer, .. } => writer
                .add_view(meta, view, storage.map(Payload::Bytes))
                .map_err(|e| e.in_file(&self.path).in_entry(&meta.name)),
            SaverOut::Db { .. } => Ok(false),
        }?;
        if kept {
            self.names = names;
        }
        Ok(kept)
    }

    /// Adds a tensor from bytes in memory, written straight from there.
    pub fn add_bytes(&mut self, meta: &TensorMeta, data: &[u8]) -> Result<()> {
        self.add_payload(meta, Payload::Bytes(data))
    }

    fn add_payload(&mut self, meta: &TensorMeta, data: Payload<'_>) -> Result<()> {
        self.format
            .check_name(&meta.name, &mut self.names)
            .map_err(|e| e.in_file(&self.path))?;
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
            #[cfg(object_storage)]
            SaverOut::Remote { writer, .. } => writer.add(meta, data),
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

    /// Finishes the container and atomically replaces the destination. A document with
    /// external data (ONNX) commits its data files first, under names of their own, then
    /// itself, then removes the data files the document it replaced had under names of
    /// this scheme (see [`ExternalData`]).
    pub fn commit(self) -> Result<()> {
        let Saver {
            out, path, format, ..
        } = self;
        let (file, writer) = match out {
            SaverOut::File { file, writer } => (file, writer),
            #[cfg(object_storage)]
            SaverOut::Remote { file, writer } => {
                writer.finish().map_err(|e| e.in_file(&path))?;
                return unshared(file, &path)?.commit();
            }
            SaverOut::Db {
                db, mut tmp, desc, ..
            } => {
                db.close().map_err(|e| e.in_file(&path))?;
                return tmp.commit_folder(&db_folder(&desc));
            }
        };
        let tag = file.borrow().save_tag();
        if let Err(e) = writer.finish() {
            sweep_data_files(&path, format, &tag, true, &Default::default());
            return Err(e.in_file(&path));
        }
        let file = unshared(file, &path)?;
        let old = own_data_files(&path, format);
        if let Err(e) = file.commit() {
            sweep_data_files(&path, format, &tag, true, &Default::default());
            return Err(e.in_file(&path));
        }
        remove_data_files(&old, &Default::default());
        sweep_data_files(&path, format, &tag, false, &Default::default());
        Ok(())
    }
}

/// Removes the data files named for the document `dest` ([`named_for`]) that no one
/// needs: with `failed`, those of the save `tag` that failed (unless the document at
/// `dest` names them: a failure after its rename); else those of saves by processes no
/// longer running that the document at `dest` does not name (left by a save killed
/// between its data files' commit and its document's, or between the document's commit
/// and the removal of the data it replaced). Files in `keep` stay. Best effort.
pub(crate) fn sweep_data_files(
    dest: &Path,
    format: &'static FormatDesc,
    tag: &str,
    failed: bool,
    keep: &std::collections::HashSet<PathBuf>,
) {
    if format.rewrite.is_none() {
        return;
    }
    let Some(name) = dest.file_name().and_then(|n| n.to_str()) else {
        return;
    };
    let dir = match dest.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let named: Vec<String> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|n| named_for(n, name))
        .collect();
    if named.is_empty() {
        return;
    }
    let current: std::collections::HashSet<PathBuf> =
        own_data_files(dest, format).into_iter().collect();
    for n in named {
        let path = dir.join(&n);
        if current.contains(&path) || keep.contains(&path) {
            continue;
        }
        let Some((pid, save)) = tensorfmt_runtime::output::tagged_for(&n, name) else {
            continue;
        };
        let ours = save == tag;
        let gone = !tensorfmt_runtime::output::running(pid);
        if (failed && ours) || (!failed && !ours && gone) {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// What a save to a file does with an output that exists: a file (or a symbolic link,
/// which is replaced by the new file, what it points to left as it was) is replaced,
/// whole and atomically when the save commits; anything else there (a folder, a fifo or
/// device) is refused, naming it, and left as it was. Folder outputs follow the rule of
/// [`tensorfmt_runtime::output::FolderKind`].
fn existing_output(path: &Path) -> Result<()> {
    let refuse = |what: &str| {
        Err(Error::new(
            ErrorKind::Invalid(format!(
                "the output exists and is {what}: an existing output is replaced only by one \
                 of its kind (remove it or choose another path)"
            )),
            Location::file(path),
        ))
    };
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Ok(());
    };
    let target = if meta.file_type().is_symlink() {
        std::fs::metadata(path).ok()
    } else {
        Some(meta)
    };
    match target {
        Some(m) if m.is_dir() => refuse("a folder"),
        Some(m) if !m.is_file() => refuse("not a regular file"),
        _ => Ok(()),
    }
}

/// The rule of a database folder of `desc`'s backend at a save's destination (see
/// [`tensorfmt_runtime::output::FolderKind`]): its files replaced when they are such a
/// database, every other file kept. In a build without the key-value crate, no folder
/// but an empty one is replaced.
pub(crate) fn db_folder(
    desc: &tensorfmt_runtime::db::DbDesc,
) -> tensorfmt_runtime::output::FolderKind<'static> {
    #[cfg(feature = "caffe2")]
    if let Some(kind) = tensorfmt_runtime::kv::folder_kind(desc.backend) {
        return kind;
    }
    let _ = desc;
    tensorfmt_runtime::output::FolderKind {
        what: "a database",
        owns: &|_| false,
        check: &|_| Ok(()),
        adopts: false,
    }
}

/// Whether `a` and `b` name the same file or folder: one path, a symbolic link to the
/// other, or a hard link of it (same device and inode on unix). False when either is
/// missing.
pub fn same_file(a: impl AsRef<Path>, b: impl AsRef<Path>) -> bool {
    let (Ok(ma), Ok(mb)) = (std::fs::metadata(a.as_ref()), std::fs::metadata(b.as_ref())) else {
        return false;
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        ma.dev() == mb.dev() && ma.ino() == mb.ino()
    }
    #[cfg(not(unix))]
    {
        let _ = (ma, mb);
        match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
            (Ok(x), Ok(y)) => x == y,
            _ => false,
        }
    }
}

/// Refuses an `output` that is `input` (the same path, a symbolic link to it or a hard
/// link of it): a save never writes over its input.
pub(crate) fn refuse_input_as_output(input: &Path, output: &Path) -> Result<()> {
    if same_file(input, output) {
        return Err(Error::new(
            ErrorKind::Invalid(format!(
                "the output is the input {} (or a link to it): write to another path",
                input.display()
            )),
            Location::file(output),
        ));
    }
    Ok(())
}

/// Whether `location` (an external data file's name) is one a save to the document named
/// `name` gave it, beside it: `{name}.{pid}-{random}.…` ([`WriteOptions::save_tag`]).
fn named_for(location: &str, name: &str) -> bool {
    !location.contains(['/', '\\'])
        && tensorfmt_runtime::output::tagged_for(location, name).is_some()
}

/// The external data files of the document at `dest` (when it is one of `format`, a
/// document format) named for a save to it ([`named_for`]): the ones to remove once a new
/// document has replaced it. Empty when `dest` is absent or not such a document.
pub(crate) fn own_data_files(dest: &Path, format: &'static FormatDesc) -> Vec<PathBuf> {
    if format.rewrite.is_none() || !dest.is_file() {
        return Vec::new();
    }
    let Some(name) = dest.file_name().and_then(|n| n.to_str()) else {
        return Vec::new();
    };
    let options = OpenOptions {
        registry: Registry::builtin().with(format),
        format: Some(format.name.to_string()),
        ..Default::default()
    };
    let Ok(old) = TensorFile::open_with(dest, &options) else {
        return Vec::new();
    };
    let dir = dest.parent().unwrap_or_else(|| Path::new(""));
    let mut files: Vec<PathBuf> = old
        .tensors()
        .iter()
        .filter_map(|t| match &t.location {
            DataLocation::External { path, .. } if named_for(path, name) => Some(dir.join(path)),
            _ => None,
        })
        .collect();
    files.sort();
    files.dedup();
    files
}

/// Removes `files` (data files of a replaced document) but those in `keep`; best effort.
pub(crate) fn remove_data_files(files: &[PathBuf], keep: &std::collections::HashSet<PathBuf>) {
    for f in files {
        if !keep.contains(f) {
            let _ = std::fs::remove_file(f);
        }
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
    /// Write a sharded checkpoint as Hugging Face does, shards of at most this many bytes
    /// ([`sharded::plan`]): the output is then a folder, or an index in one
    /// (`dir/model.safetensors.index.json`); see [`sharded::write`]. An output that
    /// names an index is written sharded at the default 5 GB without this.
    pub max_shard_size: Option<u64>,
    /// Write a torch.distributed checkpoint (format `torch-dcp`, a folder) as the ranks
    /// of a job of this many processes save one, each tensor sharded along its first
    /// dimension ([`dcp::write`]); by default 1, a single writer's.
    pub world_size: Option<u64>,
    /// The most bytes of tensor data the output may hold. By default the larger of
    /// [`MIN_OUTPUT_BUDGET`] and [`OUTPUT_PER_PAYLOAD_BYTE`] times the input's payload
    /// ([`TensorFile::payload_bytes`]: bytes that several tensors share counted once), so
    /// that a small input whose tensors all view the same bytes (one array referenced
    /// thousands of times through a pickle's memo) cannot fill a disk. Checked before
    /// anything is written; raise it for an output that is meant to be that large.
    pub max_output_bytes: Option<u64>,
}

/// The least default budget of a conversion's output ([`ConvertOptions::max_output_bytes`]):
/// 256 MiB.
pub const MIN_OUTPUT_BUDGET: u64 = 256 << 20;

/// The default budget of a conversion's output per byte of the input's payload
/// ([`ConvertOptions::max_output_bytes`]): 16, room for the widest cast (`bool` to `c128`)
/// of tensors that share nothing, or for a few tensors tied to one storage cast wider.
pub const OUTPUT_PER_PAYLOAD_BYTE: u64 = 16;

impl ConvertOptions {
    /// The most bytes of tensor data a conversion of an input whose payload is
    /// `payload` bytes writes: [`ConvertOptions::max_output_bytes`] when set, else the
    /// larger of [`MIN_OUTPUT_BUDGET`] and [`OUTPUT_PER_PAYLOAD_BYTE`] times `payload`.
    pub fn output_budget(&self, payload: u64) -> u64 {
        self.max_output_bytes.unwrap_or_else(|| {
            payload
                .saturating_mul(OUTPUT_PER_PAYLOAD_BYTE)
                .max(MIN_OUTPUT_BUDGET)
        })
    }
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
    /// The tensors the output reads back as another dtype than the one written, by name:
    /// (name, written, read). A bf16 tensor written to a Caffe2 database is stored as
    /// FMT_BFLOAT16, which Caffe2's Load (and tensorfmt) reads as f32 of the same values.
    pub retyped: Vec<(String, DType, DType)>,
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
    #[cfg(object_storage)]
    if let Some(url) = remote(output.as_ref()) {
        let registry = &options.open.registry;
        let format = match options.to.as_deref() {
            Some(name) => registry.named(name),
            None => registry.for_path(output.as_ref()),
        };
        let folder = options.world_size.is_some()
            || options.max_shard_size.is_some()
            || sharded::is_index_name(output.as_ref())
            || format.is_some_and(|f| f.name == "torch-dcp")
            || format.is_some_and(|f| f.db.is_some_and(|d| d.backend != "records"));
        if folder {
            return object::convert_to_folder(input.as_ref(), url, options, &mut progress);
        }
    }
    #[cfg(feature = "pytorch")]
    if options.world_size.is_some() || options.to.as_deref() == Some(dcp::DESC.name) {
        // The output folder is replaced in one step once complete; the input is read
        // from its own files.
        refuse_input_as_output(input.as_ref(), output.as_ref())?;
        let file = TensorFile::open_with(input.as_ref(), &options.open)?;
        check_conversion(&file, Some(&dcp::DESC), output.as_ref(), options, false)?;
        let world = options.world_size.unwrap_or(1);
        return dcp::write(&file, output.as_ref(), options, world, &mut progress);
    }
    if options.max_shard_size.is_some() || sharded::is_index_name(output.as_ref()) {
        // The output folder may hold the input: it is replaced in one step, once the
        // new checkpoint is complete, and the input's files are not written to.
        let file = TensorFile::open_with(input.as_ref(), &options.open)?;
        let registry = &options.open.registry;
        let shard_format = match options.to.as_deref() {
            Some(name) => registry.named(name),
            None => registry.named("safetensors"),
        };
        check_conversion(&file, shard_format, output.as_ref(), options, false)?;
        return sharded::write(&file, output.as_ref(), options, &mut progress);
    }
    refuse_input_as_output(input.as_ref(), output.as_ref())?;
    let file = TensorFile::open_with(input.as_ref(), &options.open)?;
    let registry = &options.open.registry;
    let target = match options.to.as_deref() {
        Some(name) => registry.named(name),
        None => registry.for_path(output.as_ref()),
    };
    if let Some(target) = target.filter(|t| t.name == file.format() && t.rewrite.is_some()) {
        if let Some(url) = remote(output.as_ref()) {
            return Err(Error::new(
                ErrorKind::Unsupported(format!(
                    "rewriting a {} document in object storage (convert it to a local file)",
                    target.name
                )),
                Location::file(url),
            ));
        }
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
            retyped: Vec::new(),
        });
    }
    let tree = file.structure()?;
    let values_beside = file.format_desc().values;
    // Storages are members of their own in formats around a stored object (PyTorch,
    // TorchScript); an npz member is an npy file, not a storage, and values beside the
    // tensors hold none.
    let mut keep_layout =
        options.keep_layout && options.dtype.is_none() && tree.is_some() && !values_beside;
    let budget = check_conversion(&file, target, output.as_ref(), options, keep_layout)?;
    let mut saver = Saver::create_in(registry, &output, options.to.as_deref(), &options.write)?;
    // A format's values beside its tensors (safetensors `__metadata__`, GGUF key/values)
    // go to formats of such values alone: an object format would store them in the
    // object its tensors are in. They are set before the first tensor (GGUF's alignment
    // is among them); those the output cannot hold are noted.
    let mut kept = StructureKept::default();
    if !options.flatten && (!values_beside || saver.format.values) {
        if let Some(tree) = tree.as_ref().filter(|t| t.is_plain()) {
            kept = saver.set_structure(tree)?;
        }
    }
    let dropped = match tree.as_ref() {
        Some(tree) if !kept.stored => values_left_out(tree, values_beside),
        _ => kept.dropped,
    };
    let total = file.tensors().len();
    let mut bytes = 0u64;
    let mut storages: std::collections::HashMap<String, u64> = std::collections::HashMap::new();
    for (i, info) in file.tensors().iter().enumerate() {
        if keep_layout {
            if let Some((meta, view, member)) = storage_view(info, &mut storages) {
                let whole = match member {
                    Some(m) => {
                        within_budget(bytes, m.location.len(), budget, output.as_ref())?;
                        Some(file.load_info(&m)?)
                    }
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
        // The output as planned was checked; this holds it to the budget whatever the
        // writer does (views it could not keep, written dense).
        let next = written_bytes(info, options.dtype);
        within_budget(bytes, next, budget, output.as_ref())?;
        bytes += write_tensor(&file, &mut saver, info, options.dtype)?;
        progress(i + 1, total);
    }
    let to = saver.format();
    saver.commit()?;
    let retyped = retyped(registry, to, file.tensors(), options.dtype);
    Ok(ConvertSummary {
        from: file.format(),
        to,
        tensors: total,
        bytes,
        dropped,
        retyped,
    })
}

/// Refuses a conversion of `file` to `output` (in `format`, where it is known) before
/// anything is written: a tensor name longer than the format stores
/// ([`FormatDesc::check_name`]), or an output of more bytes of tensor data than
/// [`ConvertOptions::output_budget`] allows for the input's payload (each tensor's bytes
/// in the dtype written; with `keep_layout`, each storage viewed once). Returns the
/// budget.
fn check_conversion(
    file: &TensorFile,
    format: Option<&FormatDesc>,
    output: &Path,
    options: &ConvertOptions,
    keep_layout: bool,
) -> Result<u64> {
    if let Some(format) = format {
        let mut names = 0;
        for t in file.tensors() {
            format
                .check_name(&t.name, &mut names)
                .map_err(|e| e.in_file(output))?;
        }
    }
    let budget = options.output_budget(file.payload_bytes());
    let mut storages = std::collections::HashMap::new();
    let mut planned = 0u64;
    for info in file.tensors() {
        let view = if keep_layout {
            storage_view(info, &mut storages)
        } else {
            None
        };
        let n = match view {
            Some((_, _, whole)) => whole.map_or(0, |m| m.location.len()),
            None => written_bytes(info, options.dtype),
        };
        planned = planned.saturating_add(n);
    }
    within_budget(0, planned, budget, output)?;
    Ok(budget)
}

/// The bytes of `info`'s data a conversion writes: its elements in `dtype` when given,
/// else in its own (a string tensor's stored bytes).
fn written_bytes(info: &TensorInfo, dtype: Option<DType>) -> u64 {
    let Some(own) = info.dtype.itemsize() else {
        return info.location.len();
    };
    let size = dtype.and_then(|d| d.itemsize()).unwrap_or(own);
    info.numel()
        .map_or(info.location.len(), |n| n.saturating_mul(size as u64))
}

/// Refuses `more` bytes of tensor data on top of the `done` written to `output` when they
/// pass `budget` ([`ConvertOptions::max_output_bytes`]).
fn within_budget(done: u64, more: u64, budget: u64, output: &Path) -> Result<()> {
    let total = done.saturating_add(more);
    if total <= budget {
        return Ok(());
    }
    Err(Error::new(
        ErrorKind::Limit {
            what: "the bytes of tensor data written (by default the larger of 256 MiB and 16 \
                   times the input's tensor data, bytes that tensors share counted once; \
                   --max-output-bytes raises it)",
            limit: budget,
            actual: total,
        },
        Location::file(output),
    ))
}

impl TensorFile {
    /// The bytes this file's tensors are read from, each stored byte counted once however
    /// many tensors share it (views of one storage, an array a pickle references again
    /// and again through its memo): the union of the tensors' byte ranges in the file, in
    /// each external file and in each part of content stored in a container's own
    /// encoding (a zip member, at its decompressed size). A checkpoint in several files
    /// adds up its shards'.
    pub fn payload_bytes(&self) -> u64 {
        if let Some(shards) = &self.shards {
            return shards
                .shards
                .iter()
                .map(|s| s.file.payload_bytes())
                .fold(0, u64::saturating_add);
        }
        let mut spans = Vec::with_capacity(self.tensors.len());
        let mut files = std::collections::HashMap::new();
        for t in &self.tensors {
            byte_spans(&t.location, &mut files, &mut spans);
        }
        union_len(spans)
    }
}

/// A byte range of one space, the container file, an external file (by number) or a part
/// of encoded content (by the content's address and the part): (space, start, end).
type Span = ((u8, u64, u64), u64, u64);

/// Pushes the byte ranges `loc` reads to `spans`, numbering external files in `files`.
fn byte_spans<'a>(
    loc: &'a DataLocation,
    files: &mut std::collections::HashMap<&'a str, u64>,
    spans: &mut Vec<Span>,
) {
    let (space, start, len) = match loc {
        DataLocation::Range { offset, len } => ((0, 0, 0), *offset, *len),
        DataLocation::External { path, offset, len } => {
            let next = files.len() as u64;
            let file = *files.entry(path.as_str()).or_insert(next);
            ((1, file, 0), *offset, *len)
        }
        DataLocation::Encoded {
            content,
            part,
            skip,
            len,
        } => {
            let at = Arc::as_ptr(&content.0) as *const () as usize as u64;
            ((2, at, *part), *skip, *len)
        }
        DataLocation::Pieces(pieces) => {
            for p in pieces {
                byte_spans(p, files, spans);
            }
            return;
        }
    };
    if len > 0 {
        spans.push((space, start, start.saturating_add(len)));
    }
}

/// The bytes that `spans` cover together, overlaps counted once.
fn union_len(mut spans: Vec<Span>) -> u64 {
    spans.sort_unstable();
    let mut total = 0u64;
    let mut open: Option<Span> = None;
    for (space, start, end) in spans {
        match &mut open {
            Some((s, _, e)) if *s == space && start <= *e => *e = (*e).max(end),
            _ => {
                if let Some((_, s, e)) = open {
                    total = total.saturating_add(e - s);
                }
                open = Some((space, start, end));
            }
        }
    }
    if let Some((_, s, e)) = open {
        total = total.saturating_add(e - s);
    }
    total
}

/// The names of every value of `tree` that an output storing none of them leaves out:
/// a format's values beside its tensors (`values_beside`: safetensors `__metadata__`,
/// GGUF key/values) by key, else every non-tensor value of the stored object by path
/// (the output stores tensors alone: npz, a database, safetensors without text values,
/// or `--flatten` asked for them alone).
pub(crate) fn values_left_out(tree: &Node, values_beside: bool) -> Vec<String> {
    if values_beside {
        let mut dropped = Vec::new();
        let values = tree.top_values(&mut dropped);
        return values
            .into_iter()
            .map(|(name, _)| name)
            .chain(dropped)
            .collect();
    }
    tree.values()
        .into_iter()
        .map(|(path, _)| {
            if path.is_empty() {
                "(the whole object)".to_string()
            } else {
                path
            }
        })
        .collect()
}

/// The tensors of `tensors`, written to format `to` (as `dtype` when given), that it
/// reads back as another dtype: (name, written, read) ([`ConvertSummary::retyped`]).
pub(crate) fn retyped(
    registry: &Registry,
    to: &'static str,
    tensors: &[TensorInfo],
    dtype: Option<DType>,
) -> Vec<(String, DType, DType)> {
    let written: Vec<(&str, DType)> = tensors
        .iter()
        .map(|t| (t.name.as_str(), dtype.unwrap_or(t.dtype)))
        .collect();
    let read_as = read_back_dtypes(registry, to, written.iter().map(|&(_, d)| d));
    written
        .into_iter()
        .filter_map(|(name, d)| match read_as.get(&d) {
            Some(&r) if r != d => Some((name.to_string(), d, r)),
            _ => None,
        })
        .collect()
}

/// The output of a save that the writer still shares, or an error naming `path`.
fn unshared<T>(shared: Rc<RefCell<T>>, path: &Path) -> Result<T> {
    Rc::try_unwrap(shared)
        .map(RefCell::into_inner)
        .map_err(|_| {
            Error::new(
                ErrorKind::Sink("writer still holds the output".into()),
                Location::file(path),
            )
        })
}

/// The dtype format `to` reads back a tensor of each of `dtypes` as (a bf16 tensor
/// written to a Caffe2 database reads as f32), found by saving one element of each to a
/// probe in the temporary folder and opening it: a few bytes, whatever the size of the
/// real output, which is not read again. A dtype whose probe cannot be written or read
/// (strings, a format that writes what it does not read) is left out.
fn read_back_dtypes(
    registry: &Registry,
    to: &'static str,
    dtypes: impl Iterator<Item = DType>,
) -> std::collections::HashMap<DType, DType> {
    let mut kinds: Vec<DType> = dtypes.filter(|d| d.itemsize().is_some()).collect();
    kinds.sort_by_key(|d| d.name());
    kinds.dedup();
    let mut read_as = std::collections::HashMap::new();
    if kinds.is_empty() {
        return read_as;
    }
    let mut probe = || -> Result<()> {
        // A fresh hidden folder, removed when `dir` is dropped (and, left by a killed
        // process, by the next probe).
        let dir = AtomicDir::new(std::env::temp_dir().join("tensorfmt-dtype-probe"))?;
        std::fs::create_dir(dir.path())?;
        let path = dir.path().join("probe");
        let mut saver = Saver::create_in(registry, &path, Some(to), &WriteOptions::default())?;
        for (i, &d) in kinds.iter().enumerate() {
            let meta = TensorMeta {
                name: format!("p{i}"),
                dtype: d,
                shape: vec![1],
                order: Order::C,
                byte_order: ByteOrder::Little,
            };
            saver.add_bytes(&meta, &vec![0u8; d.itemsize().unwrap_or(0)])?;
        }
        saver.commit()?;
        let options = OpenOptions {
            format: Some(to.to_string()),
            registry: registry.clone(),
            ..OpenOptions::default()
        };
        let back = TensorFile::open_with(&path, &options)?;
        for (i, &d) in kinds.iter().enumerate() {
            if let Some(t) = back.tensor(&format!("p{i}")) {
                read_as.insert(d, t.dtype);
            }
        }
        Ok(())
    };
    let _ = probe();
    read_as
}

/// What `info` is when its elements are laid out in C order (its name, dtype, shape and
/// byte order).
fn c_order_meta(info: &TensorInfo) -> TensorMeta {
    TensorMeta {
        name: info.name.clone(),
        dtype: info.dtype,
        shape: info.shape.clone(),
        order: Order::C,
        byte_order: info.byte_order,
    }
}

/// Writes one tensor of `file` to `saver`, cast to `dtype` if given; returns the payload
/// bytes written.
///
/// Bytes stored plain and already laid out as the writer takes them (C or Fortran order,
/// no cast) are handed over from the memory map. Everything else streams: a deflated
/// member inflated as the writer reads it, a strided view's elements gathered in C order
/// from its storage, a cast made a block at a time ([`TensorFile::elements`]); memory is
/// bounded by buffers, and by the storage for a view, unless the output format needs the
/// whole tensor at once (a database record, a Fortran-order tensor written to a C-order
/// format). A view whose C-order size is beyond [`Limits::max_view_bytes`] is refused.
fn write_tensor(
    file: &TensorFile,
    saver: &mut Saver,
    info: &TensorInfo,
    dtype: Option<DType>,
) -> Result<u64> {
    use tensorfmt_runtime::convert::CastReader;
    let in_file = |e: Error| file.source().in_file(e.in_entry(&info.name));
    if info.dtype.itemsize().is_none() {
        // Strings have no fixed size: their encoded bytes go to the writer whole.
        let tensor = file.load_info(info)?;
        let (meta, data) =
            prepare_for_write(info, tensor.data.as_bytes(), dtype).map_err(in_file)?;
        saver.add_bytes(&meta, &data)?;
        return Ok(data.len() as u64);
    }
    let cast = dtype.filter(|&d| d != info.dtype);
    let compressed = info.location.compressed_len().is_some();
    let (mut meta, reader) = match TensorMeta::from_info(info) {
        Some(meta) if cast.is_none() && !compressed => {
            let tensor = file.load_info(info)?;
            let data = tensor.data.as_bytes();
            let n = usize::try_from(meta.nbytes().map_err(in_file)?)
                .ok()
                .filter(|&n| n <= data.len())
                .ok_or_else(|| {
                    in_file(Error::from(ErrorKind::SizeMismatch(format!(
                        "tensor '{}' holds {} bytes, fewer than its shape needs",
                        info.name,
                        data.len()
                    ))))
                })?;
            saver.add_bytes(&meta, &data[..n])?;
            return Ok(n as u64);
        }
        Some(meta) => {
            let n = meta.nbytes().map_err(in_file)?;
            (meta, file.stored(info, n)?)
        }
        None => (c_order_meta(info), file.elements(info)?),
    };
    let mut reader: Box<dyn Read + '_> = match cast {
        Some(to) => {
            meta.dtype = to;
            meta.byte_order = ByteOrder::Little;
            Box::new(CastReader::new(reader, info.dtype, info.byte_order, to).map_err(in_file)?)
        }
        None => reader,
    };
    let n = meta.nbytes().map_err(in_file)?;
    saver.add(&meta, &mut reader)?;
    Ok(n)
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
    let meta = c_order_meta(info);
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

#[cfg(test)]
mod tensor_budget_tests {
    use super::*;
    use tensorfmt_runtime::limits::{
        MIN_TENSOR_BUDGET, TENSOR_BUDGET_PER_INPUT_BYTE, TENSOR_CHARGE,
    };

    /// A safetensors file of `n` empty tensors.
    fn empty_tensors(n: usize) -> Source {
        let entry = r#"{"dtype":"F32","shape":[0],"data_offsets":[0,0]}"#;
        let items: Vec<String> = (0..n).map(|i| format!("\"t{i}\":{entry}")).collect();
        let mut header = format!("{{{}}}", items.join(",")).into_bytes();
        header.resize(header.len().next_multiple_of(8), b' ');
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend(header);
        Source::from_bytes(bytes)
    }

    /// A file lists the tensors its budget pays for: `max_tensor_bytes` over 2 KiB each,
    /// by default 128 MiB and 16 bytes per byte of it; past them it is refused, the error
    /// naming the option that raises the budget.
    #[test]
    fn the_tensors_a_file_lists_are_paid_by_its_budget() {
        // The numbers `tensor_bound` and the CLI's help give.
        assert_eq!(TENSOR_CHARGE, 2048);
        assert_eq!(MIN_TENSOR_BUDGET / TENSOR_CHARGE, 65_536);
        assert_eq!(TENSOR_CHARGE / TENSOR_BUDGET_PER_INPUT_BYTE, 128);
        let options = |budget: u64| OpenOptions {
            limits: Limits {
                max_tensor_bytes: Some(budget),
                ..Limits::default()
            },
            ..OpenOptions::default()
        };
        let file = TensorFile::from_source(empty_tensors(5), &options(5 * TENSOR_CHARGE)).unwrap();
        assert_eq!(file.tensors().len(), 5);
        let e = TensorFile::from_source(empty_tensors(6), &options(5 * TENSOR_CHARGE)).unwrap_err();
        assert!(
            matches!(
                e.kind,
                ErrorKind::Limit {
                    limit: 5,
                    actual: 6,
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("--max-tensor-bytes"), "{e}");
        let default = TensorFile::from_source(empty_tensors(6), &OpenOptions::default()).unwrap();
        assert_eq!(default.tensors().len(), 6);
    }
}
