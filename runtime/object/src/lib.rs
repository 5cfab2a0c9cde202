//! Objects in object storage as tensorfmt's sources and destinations, through the
//! `object_store` crate (S3 and S3-compatible stores, GCS, Azure, HTTP; one feature per
//! backend).
//!
//! Reading ([`open`]): an object is a [`RandomAccess`] source whose reads are ranged GETs,
//! so that every format's reader works on it unchanged and reads only what it needs.
//! Small reads (headers, a zip's central directory, a pickle) are served from blocks of
//! [`BLOCK`] bytes fetched whole and kept (at most [`MAX_BLOCKS`]): a zip's end records
//! and central directory come with one suffix read, a safetensors or npy header with one
//! prefix read. Large reads (payloads) fetch a window of at least [`WINDOW`] bytes from
//! where they start, in parts of [`PART`] bytes fetched concurrently, so that the next
//! reads of a sequential scan are served from memory and neighbouring small tensors
//! share one window: memory stays bounded by the window and the blocks, never by the
//! object. Every GET after the first asks for the version it first saw (`If-Match` on
//! its ETag), so that an object replaced while it is read is an error, not a mix.
//!
//! Writing ([`Upload`]): the file is written to an anonymous temporary file (formats'
//! writers seek back to patch headers), then sent as a multipart upload that is completed
//! only once every part is in: until then the previous object stays as it was, and an
//! upload that fails is aborted. A process killed during the upload leaves an incomplete
//! multipart upload, invisible to readers, for the store's lifecycle rules to remove.
//!
//! The API is synchronous: its futures run on a runtime of its own (two worker
//! threads), from any thread, a tokio runtime's included.
//!
//! Locations: `s3://bucket/key` (credentials, region and an endpoint for S3-compatible
//! stores from the `AWS_*` environment variables: `AWS_ENDPOINT`, `AWS_ALLOW_HTTP`, ...),
//! `gs://bucket/key` (`GOOGLE_*`), `az://container/key` and `abfs://` (`AZURE_*`),
//! `http(s)://host/path` (read only).
#![warn(missing_docs)]

use std::io::{Read, Seek, SeekFrom, Write};
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path as ObjectPath;
use object_store::{GetOptions, GetRange, ObjectStore, ObjectStoreExt, WriteMultipart};
use tensorfmt_core::error::{Error, ErrorKind, Location as ErrorLocation, Result};
use tensorfmt_core::source::{check_range, RandomAccess, Source};

/// Bytes of one block of small reads.
pub const BLOCK: u64 = 256 << 10;
/// Blocks of small reads kept per object (16 MiB).
pub const MAX_BLOCKS: usize = 64;
/// Least bytes a large read fetches from where it starts (the read-ahead window).
pub const WINDOW: u64 = 64 << 20;
/// Bytes of each concurrent GET of a window, and of each part of an upload.
pub const PART: u64 = 8 << 20;
/// GETs (or upload parts) in flight at once.
pub const CONCURRENCY: usize = 8;

pub use tensorfmt_core::source::is_url;

/// The runtime the object store's futures run on.
fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("tensorfmt-object")
            .enable_all()
            .build()
            .expect("a tokio runtime for object storage")
    })
}

/// Runs `f` to completion on this crate's runtime, from any thread: from a thread that
/// is a runtime's (where blocking on another would panic), on a thread of its own.
pub fn block_on<F>(f: F) -> F::Output
where
    F: std::future::Future + Send,
    F::Output: Send,
{
    if tokio::runtime::Handle::try_current().is_ok() {
        std::thread::scope(|s| {
            s.spawn(|| runtime().block_on(f))
                .join()
                .expect("object storage thread")
        })
    } else {
        runtime().block_on(f)
    }
}

/// An object's store and path, and its URL (what errors name).
#[derive(Debug, Clone)]
pub struct Location {
    store: Arc<dyn ObjectStore>,
    path: ObjectPath,
    url: String,
}

impl Location {
    /// The URL the location was given as.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// An error located at this object.
    fn error(&self, e: object_store::Error) -> Error {
        let kind = match e {
            object_store::Error::NotFound { .. } => {
                ErrorKind::NotFound(format!("object {} ({e})", self.url))
            }
            object_store::Error::Precondition { .. } => ErrorKind::Invalid(
                "the object changed while it was read (its ETag is not the one first read): \
                 what was read from it cannot be trusted; read it again"
                    .into(),
            ),
            other => ErrorKind::Io(std::io::Error::other(other.to_string())),
        };
        Error::new(kind, ErrorLocation::file(&self.url))
    }

    /// The location of `name` (a relative path, checked by the caller) under this
    /// location taken as a folder.
    fn beside_child(&self, name: &str) -> Location {
        let mut parts: Vec<String> = self.path.parts().map(|p| p.as_ref().to_string()).collect();
        parts.extend(name.split('/').map(str::to_string));
        Location {
            store: self.store.clone(),
            path: ObjectPath::from_iter(parts),
            url: format!("{}/{name}", self.url.trim_end_matches('/')),
        }
    }

    /// The location of `name`, a path relative to this object's "folder" (the shards of
    /// a sharded checkpoint beside its index): refused when it is absolute or has a `..`
    /// component.
    pub fn beside(&self, name: &str) -> Result<Location> {
        if tensorfmt_core::source::outside_folder(name).is_some() || name.contains('\\') {
            return Err(Error::new(
                ErrorKind::Invalid(format!(
                    "'{name}' is not a path inside the folder of {}",
                    self.url
                )),
                ErrorLocation::file(&self.url),
            ));
        }
        let mut parts: Vec<String> = self.path.parts().map(|p| p.as_ref().to_string()).collect();
        parts.pop();
        parts.extend(
            name.split('/')
                .filter(|p| !p.is_empty() && *p != ".")
                .map(str::to_string),
        );
        let path = ObjectPath::from_iter(parts);
        let url = match self.url.rsplit_once('/') {
            Some((folder, _)) => format!("{folder}/{name}"),
            None => name.to_string(),
        };
        Ok(Location {
            store: self.store.clone(),
            path,
            url,
        })
    }
}

/// The store and path `url` names. Backends this build lacks are refused, naming the
/// feature that adds them.
// A build without a backend refuses every scheme: what the arms build goes unused there.
#[cfg_attr(
    not(any(feature = "aws", feature = "gcp", feature = "azure", feature = "http")),
    allow(unused_variables, unreachable_code)
)]
pub fn locate(url: &str) -> Result<Location> {
    let at = || ErrorLocation::file(url);
    let parsed = url::Url::parse(url)
        .map_err(|e| Error::new(ErrorKind::Invalid(format!("not a URL: {e}")), at()))?;
    let built = |r: std::result::Result<Arc<dyn ObjectStore>, object_store::Error>| {
        r.map_err(|e| {
            Error::new(
                ErrorKind::Invalid(format!("the object store cannot be reached: {e}")),
                at(),
            )
        })
    };
    let missing = |feature: &str| {
        Err(Error::new(
            ErrorKind::Unsupported(format!(
                "{} locations: this build has no `{feature}` feature",
                parsed.scheme()
            )),
            at(),
        ))
    };
    let path = ObjectPath::from_url_path(parsed.path())
        .map_err(|e| Error::new(ErrorKind::Invalid(format!("not an object path: {e}")), at()))?;
    let store: Arc<dyn ObjectStore> = match parsed.scheme() {
        "s3" | "s3a" => {
            #[cfg(feature = "aws")]
            {
                built(
                    object_store::aws::AmazonS3Builder::from_env()
                        .with_url(url)
                        .build()
                        .map(|s| Arc::new(s) as Arc<dyn ObjectStore>),
                )?
            }
            #[cfg(not(feature = "aws"))]
            return missing("s3");
        }
        "gs" => {
            #[cfg(feature = "gcp")]
            {
                built(
                    object_store::gcp::GoogleCloudStorageBuilder::from_env()
                        .with_url(url)
                        .build()
                        .map(|s| Arc::new(s) as Arc<dyn ObjectStore>),
                )?
            }
            #[cfg(not(feature = "gcp"))]
            return missing("gcs");
        }
        "az" | "abfs" | "abfss" | "azure" | "adl" => {
            #[cfg(feature = "azure")]
            {
                built(
                    object_store::azure::MicrosoftAzureBuilder::from_env()
                        .with_url(url)
                        .build()
                        .map(|s| Arc::new(s) as Arc<dyn ObjectStore>),
                )?
            }
            #[cfg(not(feature = "azure"))]
            return missing("azure");
        }
        "http" | "https" => {
            #[cfg(feature = "http")]
            {
                let origin = parsed.origin().ascii_serialization();
                built(
                    object_store::http::HttpBuilder::new()
                        .with_url(origin)
                        .build()
                        .map(|s| Arc::new(s) as Arc<dyn ObjectStore>),
                )?
            }
            #[cfg(not(feature = "http"))]
            return missing("http");
        }
        other => {
            return Err(Error::new(
                ErrorKind::Unsupported(format!(
                    "{other}:// locations (s3, gs, az, abfs, http and https are known)"
                )),
                at(),
            ))
        }
    };
    Ok(Location {
        store,
        path,
        url: url.to_string(),
    })
}

/// What reading an object cost.
#[derive(Debug, Default)]
pub struct Stats {
    requests: AtomicU64,
    bytes: AtomicU64,
}

impl Stats {
    /// Requests made (HEAD and ranged GETs).
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }
    /// Bytes received.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }
}

/// What an object's reads keep: small reads' blocks (most recent last) and the window of
/// the last large read.
#[derive(Default)]
struct Kept {
    blocks: Vec<(u64, Bytes)>,
    window: Option<(u64, Vec<Bytes>)>,
}

/// An object read by ranged GETs (see the crate's documentation).
pub struct RemoteObject {
    loc: Location,
    len: u64,
    etag: Option<String>,
    kept: Mutex<Kept>,
    stats: Arc<Stats>,
}

impl RemoteObject {
    /// Fetches `ranges` of the object, concurrently, in order.
    fn fetch(&self, ranges: Vec<Range<u64>>) -> Result<Vec<Bytes>> {
        let loc = &self.loc;
        let etag = &self.etag;
        let stats = &self.stats;
        block_on(async move {
            futures::stream::iter(ranges.into_iter().map(|r| async move {
                stats.requests.fetch_add(1, Ordering::Relaxed);
                let options = GetOptions {
                    range: Some(GetRange::Bounded(r.clone())),
                    if_match: etag.clone(),
                    ..Default::default()
                };
                let got = loc.store.get_opts(&loc.path, options).await?;
                let bytes = got.bytes().await?;
                stats.bytes.fetch_add(bytes.len() as u64, Ordering::Relaxed);
                if bytes.len() as u64 != r.end - r.start {
                    return Err(object_store::Error::Generic {
                        store: "tensorfmt",
                        source: format!(
                            "asked for bytes {}..{}, received {}",
                            r.start,
                            r.end,
                            bytes.len()
                        )
                        .into(),
                    });
                }
                Ok(bytes)
            }))
            .buffered(CONCURRENCY)
            .try_collect::<Vec<Bytes>>()
            .await
        })
        .map_err(|e| loc.error(e))
    }
}

/// Copies what `pieces` (consecutive, the first at `start`) hold of `offset..` into
/// `buf`; false when they do not hold all of it.
fn copy_from(pieces: &[Bytes], start: u64, offset: u64, buf: &mut [u8]) -> bool {
    let total: u64 = pieces.iter().map(|p| p.len() as u64).sum();
    if offset < start || offset + buf.len() as u64 > start + total {
        return false;
    }
    let mut at = start;
    let mut filled = 0usize;
    for p in pieces {
        let (lo, hi) = (at, at + p.len() as u64);
        at = hi;
        let want = offset + filled as u64;
        if filled == buf.len() {
            break;
        }
        if want >= hi {
            continue;
        }
        let from = (want - lo) as usize;
        let n = (p.len() - from).min(buf.len() - filled);
        buf[filled..filled + n].copy_from_slice(&p[from..from + n]);
        filled += n;
    }
    filled == buf.len()
}

impl RandomAccess for RemoteObject {
    fn len(&self) -> u64 {
        self.len
    }

    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        check_range(offset, buf.len() as u64, self.len)?;
        if buf.is_empty() {
            return Ok(());
        }
        let end = offset + buf.len() as u64;
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((start, parts)) = &kept.window {
            if copy_from(parts, *start, offset, buf) {
                return Ok(());
            }
        }
        if (buf.len() as u64) < BLOCK {
            let first = offset / BLOCK;
            let last = (end - 1) / BLOCK;
            let missing: Vec<u64> = (first..=last)
                .filter(|b| !kept.blocks.iter().any(|(k, _)| k == b))
                .collect();
            if let (Some(&lo), Some(&hi)) = (missing.first(), missing.last()) {
                let r = lo * BLOCK..((hi + 1) * BLOCK).min(self.len);
                let got = self.fetch(vec![r.clone()])?.pop().unwrap_or_default();
                for b in lo..=hi {
                    let s = ((b - lo) * BLOCK) as usize;
                    let e = (s + BLOCK as usize).min(got.len());
                    kept.blocks.retain(|(k, _)| *k != b);
                    kept.blocks.push((b, got.slice(s..e)));
                }
            }
            // Most recently used last; the oldest go.
            for b in first..=last {
                if let Some(i) = kept.blocks.iter().position(|(k, _)| *k == b) {
                    let entry = kept.blocks.remove(i);
                    kept.blocks.push(entry);
                }
            }
            let excess = kept
                .blocks
                .len()
                .saturating_sub(MAX_BLOCKS.max((last - first + 1) as usize));
            kept.blocks.drain(..excess);
            let pieces: Vec<Bytes> = (first..=last)
                .filter_map(|b| {
                    kept.blocks
                        .iter()
                        .find(|(k, _)| *k == b)
                        .map(|(_, v)| v.clone())
                })
                .collect();
            if copy_from(&pieces, first * BLOCK, offset, buf) {
                return Ok(());
            }
            return Err(Error::new(
                ErrorKind::Truncated {
                    needed: buf.len() as u64,
                    available: 0,
                },
                ErrorLocation::file(&self.loc.url).with_offset(offset),
            ));
        }
        // A large read: a window from here, fetched in parts at once.
        kept.window = None;
        let stop = end.max(offset.saturating_add(WINDOW)).min(self.len);
        let ranges: Vec<Range<u64>> = (offset..stop)
            .step_by(PART as usize)
            .map(|s| s..(s + PART).min(stop))
            .collect();
        let parts = self.fetch(ranges)?;
        let copied = copy_from(&parts, offset, offset, buf);
        kept.window = Some((offset, parts));
        if copied {
            Ok(())
        } else {
            Err(Error::new(
                ErrorKind::Truncated {
                    needed: buf.len() as u64,
                    available: 0,
                },
                ErrorLocation::file(&self.loc.url).with_offset(offset),
            ))
        }
    }
}

/// Opens the object at `url` as a source (one HEAD request: its size and version), named
/// by its URL in errors, with the counters of what reading it costs.
pub fn open(url: &str) -> Result<(Source, Arc<Stats>)> {
    let loc = locate(url)?;
    open_at(loc)
}

/// [`open`] for a location already made ([`Location::beside`]).
pub fn open_at(loc: Location) -> Result<(Source, Arc<Stats>)> {
    let stats = Arc::new(Stats::default());
    let url = loc.url.clone();
    let object = remote(loc, stats.clone())?;
    Ok((
        Source::from_random_access(Box::new(object), Some(url.into())),
        stats,
    ))
}

/// The object at `loc` as random-access bytes read by ranged GETs (one HEAD request
/// now), its requests counted in `stats`: the objects beside another one (a DCP
/// checkpoint's `.distcp` files beside its `.metadata`), counted together.
pub fn open_shared(loc: Location, stats: Arc<Stats>) -> Result<Arc<dyn RandomAccess>> {
    Ok(Arc::new(remote(loc, stats)?))
}

fn remote(loc: Location, stats: Arc<Stats>) -> Result<RemoteObject> {
    stats.requests.fetch_add(1, Ordering::Relaxed);
    let meta = block_on(loc.store.head(&loc.path)).map_err(|e| loc.error(e))?;
    Ok(RemoteObject {
        len: meta.size,
        etag: meta.e_tag,
        loc,
        kept: Mutex::new(Kept::default()),
        stats,
    })
}

/// The whole object at `loc`, in memory (a sharded checkpoint's index).
pub fn read_whole(loc: &Location, limit: u64) -> Result<Vec<u8>> {
    let (src, _) = open_at(loc.clone())?;
    let len = src.data().len();
    if len > limit {
        return Err(Error::new(
            ErrorKind::Limit {
                what: "object size",
                limit,
                actual: len,
            },
            ErrorLocation::file(&loc.url),
        ));
    }
    Ok(src.whole()?.into_owned())
}

/// The objects under the "folder" `loc` names (its path as a prefix: `s3://b/ckpt` holds
/// `s3://b/ckpt/.metadata`), by their names relative to it, with their sizes; at most
/// `limit` of them.
pub fn list(loc: &Location, limit: usize) -> Result<Vec<(String, u64)>> {
    let prefix = loc.path.clone();
    let found: Vec<object_store::ObjectMeta> = block_on(async {
        loc.store
            .list(Some(&prefix))
            .take(limit.saturating_add(1))
            .try_collect()
            .await
    })
    .map_err(|e| loc.error(e))?;
    if found.len() > limit {
        return Err(Error::new(
            ErrorKind::Limit {
                what: "objects in the folder",
                limit: limit as u64,
                actual: found.len() as u64,
            },
            ErrorLocation::file(&loc.url),
        ));
    }
    let mut names = Vec::with_capacity(found.len());
    for meta in found {
        let Some(rest) = meta.location.prefix_match(&prefix) else {
            continue;
        };
        let parts: Vec<String> = rest.map(|p| p.as_ref().to_string()).collect();
        names.push((parts.join("/"), meta.size));
    }
    names.sort();
    Ok(names)
}

/// A folder of objects copied to a local temporary folder ([`download`]), removed when
/// dropped: what formats whose files are found through a folder (DCP checkpoints,
/// LMDB and LevelDB databases) read from a store.
#[derive(Debug)]
pub struct Staged {
    dir: tempfile::TempDir,
}

impl Staged {
    /// An empty temporary folder (what a folder written for a store is written into
    /// before [`upload_dir`]).
    pub fn new() -> Result<Staged> {
        let dir = tempfile::Builder::new()
            .prefix("tensorfmt-staged-")
            .tempdir()
            .map_err(|e| Error::from(ErrorKind::Io(e)))?;
        Ok(Staged { dir })
    }

    /// The local folder.
    pub fn path(&self) -> &std::path::Path {
        self.dir.path()
    }
}

/// Copies every object under `loc` (at most `limit` of them) into a new temporary
/// folder, each streamed to disk as it arrives. Names that would leave the folder (a `..`
/// part) are refused.
pub fn download(loc: &Location, limit: usize) -> Result<Staged> {
    let staged = Staged::new()?;
    let names = list(loc, limit)?;
    if names.is_empty() {
        return Err(Error::new(
            ErrorKind::NotFound(format!("no object at or under {}", loc.url)),
            ErrorLocation::file(&loc.url),
        ));
    }
    for (name, _) in names {
        if name.is_empty()
            || name
                .split('/')
                .any(|p| p.is_empty() || p == "." || p == "..")
        {
            return Err(Error::new(
                ErrorKind::Invalid(format!("the object name '{name}' cannot be a local file")),
                ErrorLocation::file(&loc.url),
            ));
        }
        let target = staged.path().join(&name);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(|e| Error::from(ErrorKind::Io(e)))?;
        }
        let object = loc.beside_child(&name);
        let mut out = std::fs::File::create(&target).map_err(|e| Error::from(ErrorKind::Io(e)))?;
        block_on(async {
            let got = object
                .store
                .get(&object.path)
                .await
                .map_err(|e| object.error(e))?;
            let mut stream = got.into_stream();
            while let Some(piece) = stream.next().await {
                let piece = piece.map_err(|e| object.error(e))?;
                out.write_all(&piece)
                    .map_err(|e| Error::new(ErrorKind::Io(e), ErrorLocation::file(&object.url)))?;
            }
            Ok::<(), Error>(())
        })?;
    }
    Ok(staged)
}

/// Uploads every file under the local folder `dir` as the objects under `loc` (names
/// relative to both), each a multipart upload completed last; the files whose names
/// `last` accepts (what makes the folder a checkpoint: DCP's `.metadata`, a sharded
/// checkpoint's index) go after all the others, so that a reader finds them only once
/// what they name is there. Objects are not replaced together: a folder rewritten in place
/// may be read, in between, with some of its files new.
pub fn upload_dir(
    dir: &std::path::Path,
    loc: &Location,
    last: &dyn Fn(&str) -> bool,
) -> Result<()> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).map_err(|e| Error::from(ErrorKind::Io(e)))? {
            let e = e.map_err(|e| Error::from(ErrorKind::Io(e)))?;
            let kind = e.file_type().map_err(|e| Error::from(ErrorKind::Io(e)))?;
            if kind.is_dir() {
                stack.push(e.path());
            } else if kind.is_file() {
                let rel = e
                    .path()
                    .strip_prefix(dir)
                    .map(|p| {
                        p.components()
                            .map(|c| c.as_os_str().to_string_lossy().into_owned())
                            .collect::<Vec<_>>()
                            .join("/")
                    })
                    .unwrap_or_default();
                files.push((e.path(), rel));
            }
        }
    }
    files.sort_by_key(|(_, rel)| (last(rel), rel.clone()));
    for (path, rel) in files {
        let mut up = Upload {
            file: std::fs::File::open(&path).map_err(|e| Error::from(ErrorKind::Io(e)))?,
            loc: loc.beside_child(&rel),
        };
        up.file
            .seek(SeekFrom::End(0))
            .map_err(|e| Error::from(ErrorKind::Io(e)))?;
        up.commit()?;
    }
    Ok(())
}

/// A file being written for an object: bytes go to an anonymous temporary file, and
/// [`Upload::commit`] sends them as a multipart upload completed last (see the crate's
/// documentation). Dropped without a commit, nothing is sent.
pub struct Upload {
    file: std::fs::File,
    loc: Location,
}

impl Upload {
    /// Starts writing the object at `url`.
    pub fn create(url: &str) -> Result<Upload> {
        let loc = locate(url)?;
        let file = tempfile::tempfile()
            .map_err(|e| Error::new(ErrorKind::Io(e), ErrorLocation::file(url)))?;
        Ok(Upload { file, loc })
    }

    /// The URL written.
    pub fn url(&self) -> &str {
        &self.loc.url
    }

    /// Sends the file as a multipart upload, completed once every part is in; on an
    /// error the upload is aborted and the object left as it was.
    pub fn commit(mut self) -> Result<()> {
        let at =
            |e: std::io::Error| Error::new(ErrorKind::Io(e), ErrorLocation::file(&self.loc.url));
        self.file.flush().map_err(at)?;
        self.file.seek(SeekFrom::Start(0)).map_err(at)?;
        let loc = &self.loc;
        let file = &mut self.file;
        block_on(async move {
            let upload = loc
                .store
                .put_multipart(&loc.path)
                .await
                .map_err(|e| loc.error(e))?;
            let mut w = WriteMultipart::new_with_chunk_size(upload, PART as usize);
            let mut buf = vec![0u8; PART as usize];
            let sent: Result<()> = async {
                loop {
                    let n = file
                        .read(&mut buf)
                        .map_err(|e| Error::new(ErrorKind::Io(e), ErrorLocation::file(&loc.url)))?;
                    if n == 0 {
                        break;
                    }
                    w.wait_for_capacity(CONCURRENCY)
                        .await
                        .map_err(|e| loc.error(e))?;
                    w.write(&buf[..n]);
                }
                Ok(())
            }
            .await;
            match sent {
                Ok(()) => w.finish().await.map(|_| ()).map_err(|e| loc.error(e)),
                Err(e) => {
                    let _ = w.abort().await;
                    Err(e)
                }
            }
        })
    }
}

impl Write for Upload {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.file.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

impl Seek for Upload {
    fn seek(&mut self, pos: SeekFrom) -> std::io::Result<u64> {
        self.file.seek(pos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_paths() {
        for url in [
            "s3://b/k",
            "gs://b/k.pt",
            "https://h/x",
            "az://c/p",
            "s3a://b/k",
        ] {
            assert!(is_url(url), "{url}");
        }
        for path in [
            "/tmp/x.pt",
            "x.pt",
            "C:\\x.pt",
            "dir/s3://x",
            "://x",
            "1s://x",
        ] {
            assert!(!is_url(path), "{path}");
        }
    }

    #[test]
    fn pieces_copy_what_they_hold() {
        let pieces = vec![Bytes::from_static(b"abcd"), Bytes::from_static(b"efgh")];
        let mut buf = [0u8; 5];
        assert!(copy_from(&pieces, 10, 12, &mut buf));
        assert_eq!(&buf, b"cdefg");
        assert!(!copy_from(&pieces, 10, 9, &mut buf));
        assert!(!copy_from(&pieces, 10, 15, &mut buf));
        let mut one = [0u8; 1];
        assert!(copy_from(&pieces, 10, 17, &mut one));
        assert_eq!(&one, b"h");
    }

    #[test]
    fn unknown_schemes_are_refused() {
        let e = locate("ftp://h/x").unwrap_err().to_string();
        assert!(e.contains("ftp:// locations"), "{e}");
    }
}
