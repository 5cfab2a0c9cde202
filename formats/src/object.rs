//! Tensor files in object storage: `s3://bucket/key`, `gs://`, `az://`, `http(s)://`
//! locations open and save like paths ([`TensorFile::open`], [`crate::Saver::create`],
//! [`crate::convert`], the command line), through the `object_store` crate
//! (`tensorfmt_object`: ranged, concurrent, memory-bounded reads; multipart uploads
//! completed last). A sharded checkpoint's index in a store opens with its shards, each
//! read from the store.
//!
//! What this build cannot do in a store (an error says so): ONNX external data files,
//! torch.distributed checkpoints and database folders (their files are found through a
//! local folder), sharded or DCP outputs, and rewriting an ONNX model into a store (a
//! new model of its initializers is written instead only on request: convert to a local
//! file). An ONNX document is read whole to be indexed (protobuf has no index), and a
//! MiniDB file is fetched whole (its records are read from memory).
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
    let (source, stats) = tensorfmt_object::open(url)?;
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
