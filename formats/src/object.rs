//! Tensor files in object storage: `s3://bucket/key`, `gs://`, `az://`, `http(s)://`
//! locations open and save like paths ([`TensorFile::open`], [`crate::Saver::create`],
//! [`crate::convert`], the command line), through the `object_store` crate
//! (`tensorfmt_object`: ranged, concurrent, memory-bounded reads; multipart uploads
//! completed last). A sharded checkpoint's index in a store opens with its shards, each
//! read from the store.
//!
//! A folder in a store (a URL with no object, or ending in `/`) holding a
//! torch.distributed checkpoint is read in place: its `.metadata` object, then the byte
//! ranges of the `.distcp` objects the reads need ([`crate::Source::with_neighbours`]).
//! LMDB and LevelDB databases are read from a store by copying the folder's objects to a
//! local temporary folder first. Folder formats are written to a store by writing them locally, then uploading their files,
//! what makes them a checkpoint (`.metadata`, an index, LevelDB's `CURRENT`) last; so are
//! sharded outputs. The objects of a folder are not replaced together. Not in a store:
//! ONNX external data files, and rewriting an ONNX model into a store. An ONNX document
//! is read whole to be indexed (protobuf has no index), and a MiniDB file is fetched
//! whole (its records are read from memory).
//!
//! The API is synchronous; [`open_async`] and [`convert_async`] run it off a tokio
//! runtime's workers for callers already in one.
//!
//! ```no_run
//! // S3-compatible store: AWS_ENDPOINT, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, ...
//! let (file, stats) = tensorfmt::object::open("s3://models/llama/model.safetensors",
//!                                             &Default::default())?;
//! println!("{} tensors, {} requests", file.tensors().len(), stats.requests());
//! # Ok::<(), tensorfmt::Error>(())
//! ```

use std::path::Path;
use std::sync::Arc;

pub use tensorfmt_object::{is_url, Stats, Upload};

use crate::{ConvertOptions, ConvertSummary, OpenOptions, Result, TensorFile};

/// Opens the object at `url` as [`TensorFile::open_with`] opens a path, with the
/// counters of the requests and bytes its reads cost (those of its shards not counted,
/// for a sharded checkpoint's index).
pub fn open(url: &str, options: &OpenOptions) -> Result<(TensorFile, Arc<Stats>)> {
    if crate::sharded::is_index_name(Path::new(url)) {
        let file = TensorFile::open_with(url, options)?;
        return Ok((file, Arc::new(Stats::default())));
    }
    if url.ends_with('/') {
        return open_folder(url.trim_end_matches('/'), options);
    }
    let (source, stats) = match tensorfmt_object::open(url) {
        Ok(opened) => opened,
        // No object there (or a store that fails to say so: s3s-fs answers a HEAD on a
        // "folder" with an error): a folder of objects (a DCP checkpoint, a database)?
        Err(e) => {
            return open_folder(url, options).map_err(|folder| match folder.kind {
                crate::ErrorKind::NotFound(_) => e,
                _ => folder,
            })
        }
    };
    // Formats of records (Caffe2's MiniDB) are read from memory: the object is fetched
    // whole for them.
    let format = match &options.format {
        Some(name) => options.registry.named(name),
        None => options.registry.detect(&source, &options.limits),
    };
    if format.is_some_and(|f| f.db.is_some()) {
        let whole = source.whole()?.into_owned();
        let source = crate::Source::from_bytes(whole).with_path(url);
        return Ok((TensorFile::from_source(source, options)?, stats));
    }
    Ok((TensorFile::from_source(source, options)?, stats))
}

/// Most objects a folder copied from a store may hold.
const MAX_FOLDER_OBJECTS: usize = 1 << 16;

/// The folder of objects under `url`: a torch.distributed checkpoint (a `.metadata`
/// object there) is read in place, its `.metadata` and then the `.distcp` byte ranges
/// its tensors need by ranged GETs (the requests of all its objects counted together);
/// any other folder (a database) is copied to a local temporary folder that the file
/// keeps (and removes when dropped), opened as [`TensorFile::open_with`] opens a folder.
fn open_folder(url: &str, options: &OpenOptions) -> Result<(TensorFile, Arc<Stats>)> {
    let folder = url.trim_end_matches('/');
    let dcp_name = crate::dcp::DESC.name;
    if options.format.as_deref().is_none_or(|f| f == dcp_name) {
        let meta_url = format!("{folder}/.metadata");
        let meta = tensorfmt_object::locate(&meta_url)?;
        let stats = Arc::new(Stats::default());
        match tensorfmt_object::open_shared(meta.clone(), stats.clone()) {
            Ok(data) => {
                let counted = stats.clone();
                let open: crate::runtime::source::OpenNeighbour = Arc::new(move |name: &str| {
                    tensorfmt_object::open_shared(meta.beside(name)?, counted.clone())
                });
                let source = crate::Source::from_random_access(Box::new(data), None)
                    .with_path(meta_url)
                    .with_neighbours(open);
                let options = OpenOptions {
                    format: Some(dcp_name.to_string()),
                    ..options.clone()
                };
                return Ok((TensorFile::from_source(source, &options)?, stats));
            }
            // No `.metadata` there: not a DCP checkpoint.
            Err(e) if matches!(e.kind, crate::ErrorKind::NotFound(_)) => {}
            Err(e) => return Err(e),
        }
    }
    let loc = tensorfmt_object::locate(url)?;
    let staged = tensorfmt_object::download(&loc, MAX_FOLDER_OBJECTS)?;
    let mut file = TensorFile::open_with(staged.path(), options)
        .map_err(|e| e.in_entry(format!("the copy of {url}")))?;
    file.keep = Some(Box::new(staged));
    Ok((file, Arc::new(Stats::default())))
}

/// Converts `input` to a folder format in a store (a DCP checkpoint, a sharded
/// checkpoint, a database): written to a local temporary folder as [`crate::convert`]
/// writes one, then uploaded file by file, what makes it a checkpoint (`.metadata`, the
/// index, LevelDB's `CURRENT`) last.
pub(crate) fn convert_to_folder(
    input: &Path,
    url: &str,
    options: &ConvertOptions,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<ConvertSummary> {
    let staged = tensorfmt_object::Staged::new()?;
    let index = crate::sharded::is_index_name(Path::new(url));
    let (local, folder_url) = if index {
        let (folder, name) = url.rsplit_once('/').unwrap_or((url, url));
        let dir = staged.path().join("out");
        std::fs::create_dir(&dir).map_err(|e| crate::Error::from(crate::ErrorKind::Io(e)))?;
        (dir.join(name), folder.to_string())
    } else {
        (
            staged.path().join("out"),
            url.trim_end_matches('/').to_string(),
        )
    };
    let summary = crate::convert(input, &local, options, progress)?;
    let loc = tensorfmt_object::locate(&folder_url)?;
    let last =
        |name: &str| name == ".metadata" || name.ends_with(".index.json") || name == "CURRENT";
    tensorfmt_object::upload_dir(&staged.path().join("out"), &loc, &last)?;
    Ok(summary)
}

/// [`TensorFile::open_with`] for callers in a tokio runtime: the opening runs on a
/// blocking thread, the runtime's workers stay free.
pub async fn open_async(path: String, options: OpenOptions) -> Result<TensorFile> {
    tokio::task::spawn_blocking(move || TensorFile::open_with(path, &options))
        .await
        .map_err(|e| crate::Error::from(crate::ErrorKind::Io(std::io::Error::other(e))))?
}

/// [`crate::convert`] for callers in a tokio runtime, run on a blocking thread.
pub async fn convert_async(
    input: String,
    output: String,
    options: ConvertOptions,
) -> Result<ConvertSummary> {
    tokio::task::spawn_blocking(move || crate::convert(input, output, &options, |_, _| {}))
        .await
        .map_err(|e| crate::Error::from(crate::ErrorKind::Io(std::io::Error::other(e))))?
}
