//! Random-access byte sources: a memory-mapped file, an in-memory buffer, or any
//! `Read + Seek` stream, behind one trait.

use std::any::Any;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::error::{Error, ErrorKind, Location, Result};

/// Bytes that can be read at any offset.
pub trait RandomAccess: Send + Sync {
    /// Total length in bytes.
    fn len(&self) -> u64;

    /// True when the source holds no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Fills `buf` with the bytes at `offset`; errors if they are not all there.
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()>;

    /// The whole source as one slice, when it lives in memory (a map or a buffer).
    fn as_slice(&self) -> Option<&[u8]> {
        None
    }
}

/// Whether `text` names an object by URL (`s3://bucket/key`, `gs://`, `http(s)://`):
/// `scheme://...` with a scheme of a letter then letters, digits, `+`, `-` and `.` (a
/// path never reads so on the platforms tensorfmt runs on).
pub fn is_url(text: &str) -> bool {
    text.split_once("://").is_some_and(|(scheme, _)| {
        scheme.starts_with(|c: char| c.is_ascii_alphabetic())
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
    })
}

/// A shared source (a neighbour [`Source::neighbour`] opened) reads as the source it holds.
impl<T: RandomAccess + ?Sized> RandomAccess for Arc<T> {
    fn len(&self) -> u64 {
        (**self).len()
    }
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        (**self).read_exact_at(offset, buf)
    }
    fn as_slice(&self) -> Option<&[u8]> {
        (**self).as_slice()
    }
}

/// Checks that `len` bytes at `offset` lie inside a source of `total` bytes.
pub fn check_range(offset: u64, len: u64, total: u64) -> Result<()> {
    match offset.checked_add(len) {
        Some(end) if end <= total => Ok(()),
        _ => Err(Error::new(
            ErrorKind::Truncated {
                needed: len,
                available: total.saturating_sub(offset),
            },
            Location::default().with_offset(offset),
        )),
    }
}

/// Opens `path` for reading if it is a regular file: opened without blocking, so that a
/// FIFO or a device is refused rather than waited on (no effect on regular files), then
/// checked. Every input file is opened through here (files beside a document too).
pub fn open_regular(path: &Path) -> Result<(std::fs::File, std::fs::Metadata)> {
    let loc = || Location::file(path);
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(&mut options, libc::O_NONBLOCK);
    let file = options
        .open(path)
        .map_err(|e| Error::new(ErrorKind::Io(e), loc()))?;
    let meta = file
        .metadata()
        .map_err(|e| Error::new(ErrorKind::Io(e), loc()))?;
    if !meta.is_file() {
        let what = if meta.is_dir() {
            "a folder (a database folder is opened by the key-value engine's `open_dir`)"
        } else {
            "not a regular file"
        };
        return Err(Error::new(ErrorKind::Unsupported(what.into()), loc()));
    }
    Ok((file, meta))
}

/// Shared bytes in memory: a memory map or an owned buffer.
#[derive(Clone)]
pub enum Bytes {
    /// A read-only memory map of a file, guarded against the file shrinking while it is
    /// read ([`crate::mapguard`]).
    Mapped(Arc<crate::mapguard::Mapping>),
    /// An owned buffer.
    Owned(Arc<[u8]>),
    /// A window of other bytes ([`Bytes::window`]): a file stored inside another (an item
    /// of a torch.distributed checkpoint's `.distcp` file), read where it lies.
    Window(Arc<(Bytes, std::ops::Range<usize>)>),
}

impl Bytes {
    /// The bytes.
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            Bytes::Mapped(m) => m,
            Bytes::Owned(b) => b,
            Bytes::Window(w) => &w.0.as_bytes()[w.1.clone()],
        }
    }

    /// The `len` bytes at `offset` of these, shared (nothing copied); an error when they
    /// are not all there.
    pub fn window(&self, offset: u64, len: u64) -> Result<Bytes> {
        check_range(offset, len, self.as_bytes().len() as u64)?;
        let start = usize::try_from(offset)
            .map_err(|_| Error::from(ErrorKind::Overflow("window offset".into())))?;
        let end = start + len as usize;
        Ok(Bytes::Window(Arc::new((self.clone(), start..end))))
    }

    /// Whether the file these bytes map shrank while mapped ([`crate::mapguard`]).
    fn changed(&self) -> bool {
        match self {
            Bytes::Mapped(m) => m.changed(),
            Bytes::Owned(_) => false,
            Bytes::Window(w) => w.0.changed(),
        }
    }
}

impl std::fmt::Debug for Bytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Bytes::Mapped(m) => write!(f, "Bytes::Mapped({} bytes)", m.len()),
            Bytes::Owned(b) => write!(f, "Bytes::Owned({} bytes)", b.len()),
            Bytes::Window(w) => write!(f, "Bytes::Window({:?} of {:?})", w.1, w.0),
        }
    }
}

impl RandomAccess for Bytes {
    fn len(&self) -> u64 {
        self.as_bytes().len() as u64
    }
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        check_range(offset, buf.len() as u64, self.len())?;
        let start = offset as usize;
        buf.copy_from_slice(&self.as_bytes()[start..start + buf.len()]);
        Ok(())
    }
    fn as_slice(&self) -> Option<&[u8]> {
        Some(self.as_bytes())
    }
}

/// A `Read + Seek` stream used as a random-access source (reads are serialized).
pub struct Stream<R> {
    inner: Mutex<R>,
    len: u64,
}

impl<R: Read + Seek> Stream<R> {
    /// Wraps `reader`, measuring its length by seeking to the end.
    pub fn new(mut reader: R) -> Result<Self> {
        let len = reader.seek(SeekFrom::End(0))?;
        Ok(Stream {
            inner: Mutex::new(reader),
            len,
        })
    }
}

impl<R: Read + Seek + Send> RandomAccess for Stream<R> {
    fn len(&self) -> u64 {
        self.len
    }
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        check_range(offset, buf.len() as u64, self.len)?;
        let mut r = self
            .inner
            .lock()
            .map_err(|_| ErrorKind::Sink("stream lock poisoned".into()))?;
        r.seek(SeekFrom::Start(offset))?;
        r.read_exact(buf)?;
        Ok(())
    }
}

/// A sub-range of another source, addressed from 0.
pub struct Window<'a> {
    inner: &'a dyn RandomAccess,
    offset: u64,
    len: u64,
}

impl<'a> Window<'a> {
    /// The `len` bytes of `inner` at `offset` (checked).
    pub fn new(inner: &'a dyn RandomAccess, offset: u64, len: u64) -> Result<Self> {
        check_range(offset, len, inner.len())?;
        Ok(Window { inner, offset, len })
    }
}

impl RandomAccess for Window<'_> {
    fn len(&self) -> u64 {
        self.len
    }
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        check_range(offset, buf.len() as u64, self.len)?;
        self.inner.read_exact_at(self.offset + offset, buf)
    }
    fn as_slice(&self) -> Option<&[u8]> {
        self.inner
            .as_slice()
            .map(|s| &s[self.offset as usize..(self.offset + self.len) as usize])
    }
}

impl SharedWindow {
    /// The same window, borrowing its source.
    fn view(&self) -> Window<'_> {
        Window {
            inner: &*self.inner,
            offset: self.offset,
            len: self.len,
        }
    }
}

/// Why a name read from a file cannot name a file inside the file's folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameOutside {
    /// Empty, absolute, or holding a NUL.
    NotRelative,
    /// A component other than a plain name or `.` (a `..`).
    Leaves,
}

/// Whether `name` (a path relative to a folder, read from a file: ONNX external data,
/// a shard, a DCP item, an object beside another) stays out of that folder, by its text
/// alone; `None` when it stays inside (symbolic links are [`resolve_beside`]'s to check).
pub fn outside_folder(name: &str) -> Option<NameOutside> {
    let rel = Path::new(name);
    if name.is_empty() || rel.is_absolute() || name.contains('\0') {
        return Some(NameOutside::NotRelative);
    }
    rel.components()
        .any(|c| {
            !matches!(
                c,
                std::path::Component::Normal(_) | std::path::Component::CurDir
            )
        })
        .then_some(NameOutside::Leaves)
}

/// The file that `name`, a path relative to the folder of `container`, names there,
/// resolved through symbolic links: a file an index or a document refers to (ONNX
/// external data, the shards of a sharded checkpoint). The name must stay inside the
/// folder: an empty or absolute name, a `..` component, or one that resolves (through
/// symbolic links) outside the folder is refused with [`ErrorKind::Invalid`], saying
/// "`{what} '{name}'` ... `{folder}` folder"; a file that cannot be found is an
/// [`ErrorKind::Io`] error. Errors carry no location: the caller's names the container.
pub fn resolve_beside(container: &Path, name: &str, what: &str, folder: &str) -> Result<PathBuf> {
    let refuse = |why: String| Error::from(ErrorKind::Invalid(format!("{what} '{name}' {why}")));
    match outside_folder(name) {
        Some(NameOutside::NotRelative) => return Err(refuse("is not a relative path".into())),
        Some(NameOutside::Leaves) => return Err(refuse(format!("leaves the {folder} folder"))),
        None => {}
    }
    let dir = match container.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let io = |e: std::io::Error| {
        Error::from(ErrorKind::Io(std::io::Error::new(
            e.kind(),
            format!("{what} '{name}': {e}"),
        )))
    };
    let real_dir = dir.canonicalize().map_err(io)?;
    let real = dir.join(name).canonicalize().map_err(io)?;
    if !real.starts_with(&real_dir) {
        return Err(refuse(format!("resolves outside the {folder} folder")));
    }
    Ok(real)
}

/// One value of [`Source::memo`].
struct Memo {
    key: u64,
    value: Arc<dyn Any + Send + Sync>,
}

/// An opened input: its bytes and, when it came from a path, the path.
pub struct Source {
    data: Box<dyn RandomAccess>,
    mapped: Option<Bytes>,
    path: Option<PathBuf>,
    /// What engines made of these bytes and keep for later calls ([`Source::memo`]): a
    /// zip archive's index, say, asked for by every detector and the indexer.
    memo: Mutex<Vec<Memo>>,
    /// Files beside this one already mapped ([`Source::external`]), by the name used.
    external: Mutex<Vec<(String, Bytes)>>,
    /// The records of a key-value database read whole (the key-value engine's `open_dir`).
    records: Option<Arc<crate::db::Records>>,
    /// How files beside this one are opened when they are not local files
    /// ([`Source::with_neighbours`]), and those opened, by the name used.
    neighbours: Option<(OpenNeighbour, Neighbours)>,
}

/// The files beside a source that it opened ([`Source::neighbour`]), by the name used.
type Neighbours = Mutex<Vec<(String, Arc<dyn RandomAccess>)>>;

/// Opens a file beside a source that is not a local file, by its name relative to the
/// source's folder (an object beside another in its store): see
/// [`Source::with_neighbours`].
pub type OpenNeighbour = Arc<dyn Fn(&str) -> Result<Arc<dyn RandomAccess>> + Send + Sync>;

/// A sub-range of a shared source, addressed from 0 (a `.distcp` item in an object).
pub struct SharedWindow {
    inner: Arc<dyn RandomAccess>,
    offset: u64,
    len: u64,
}

impl SharedWindow {
    /// The `len` bytes of `inner` at `offset` (checked).
    pub fn new(inner: Arc<dyn RandomAccess>, offset: u64, len: u64) -> Result<Self> {
        check_range(offset, len, inner.len())?;
        Ok(SharedWindow { inner, offset, len })
    }
}

impl RandomAccess for SharedWindow {
    fn len(&self) -> u64 {
        self.len
    }
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.view().read_exact_at(offset, buf)
    }
    fn as_slice(&self) -> Option<&[u8]> {
        let s = self.inner.as_slice()?;
        Some(&s[self.offset as usize..(self.offset + self.len) as usize])
    }
}

impl Source {
    /// Opens `path` and memory-maps it (constant time whatever the size).
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let loc = || Location::file(path);
        let (file, meta) = open_regular(path)?;
        let len = meta.len();
        let bytes = if len == 0 {
            Bytes::Owned(Arc::from(Vec::new()))
        } else {
            // SAFETY: the map is read-only. Another process truncating the file while it
            // is mapped is caught by the guard: the pages past the new end read as zeros
            // and `Source::check_unchanged` reports it.
            let map = unsafe { memmap2::Mmap::map(&file) }
                .map_err(|e| Error::new(ErrorKind::Io(e), loc()))?;
            Bytes::Mapped(Arc::new(crate::mapguard::Mapping::new(map)))
        };
        Ok(Source {
            data: Box::new(bytes.clone()),
            mapped: Some(bytes),
            path: Some(path.to_path_buf()),
            memo: Mutex::new(Vec::new()),
            external: Mutex::new(Vec::new()),
            records: None,
            neighbours: None,
        })
    }

    /// An in-memory buffer.
    pub fn from_bytes(bytes: impl Into<Arc<[u8]>>) -> Self {
        let b = Bytes::Owned(bytes.into());
        Source {
            data: Box::new(b.clone()),
            mapped: Some(b),
            path: None,
            memo: Mutex::new(Vec::new()),
            external: Mutex::new(Vec::new()),
            records: None,
            neighbours: None,
        }
    }

    /// Any `Read + Seek` stream.
    pub fn from_reader<R: Read + Seek + Send + 'static>(reader: R) -> Result<Self> {
        Ok(Source {
            data: Box::new(Stream::new(reader)?),
            mapped: None,
            path: None,
            memo: Mutex::new(Vec::new()),
            external: Mutex::new(Vec::new()),
            records: None,
            neighbours: None,
        })
    }

    /// Any random-access bytes, named by `path` when given (a view an engine makes of
    /// another source: the bounded prefix detection reads).
    pub fn from_random_access(data: Box<dyn RandomAccess>, path: Option<PathBuf>) -> Self {
        Source {
            data,
            mapped: None,
            path,
            memo: Mutex::new(Vec::new()),
            external: Mutex::new(Vec::new()),
            records: None,
            neighbours: None,
        }
    }

    /// Bytes already mapped (or held), named by `path`.
    pub fn from_mapped(bytes: Bytes, path: impl Into<PathBuf>) -> Self {
        Source {
            data: Box::new(bytes.clone()),
            mapped: Some(bytes),
            path: Some(path.into()),
            memo: Mutex::new(Vec::new()),
            external: Mutex::new(Vec::new()),
            records: None,
            neighbours: None,
        }
    }

    /// Has the files beside this one opened by `open` ([`Source::neighbour`]) rather than
    /// mapped from the local folder: a source in object storage opens its neighbours
    /// as objects of its store, read by ranged GETs.
    pub fn with_neighbours(mut self, open: OpenNeighbour) -> Self {
        self.neighbours = Some((open, Mutex::new(Vec::new())));
        self
    }

    /// The file `name` beside this one (relative to its folder) when this source opens
    /// its neighbours itself ([`Source::with_neighbours`]), opened once and shared by
    /// later calls; `None` when it does not (local files: [`Source::external`]). An
    /// empty or absolute name, or one with a `..` component, is refused.
    pub fn neighbour(&self, name: &str) -> Result<Option<Arc<dyn RandomAccess>>> {
        let Some((open, opened)) = &self.neighbours else {
            return Ok(None);
        };
        let loc = || self.location().with_field(format!("file '{name}'"));
        // A backslash is a separator on one platform and a key's character on another.
        if outside_folder(name).is_some() || name.contains('\\') {
            return Err(Error::new(
                ErrorKind::Invalid(format!("'{name}' is not a path inside the folder")),
                loc(),
            ));
        }
        let mut opened = opened.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, data)) = opened.iter().find(|(n, _)| n == name) {
            return Ok(Some(data.clone()));
        }
        let data = open(name)?;
        opened.push((name.to_string(), data.clone()));
        Ok(Some(data))
    }

    /// Attaches the records of a key-value database whose values are in these bytes.
    pub fn with_records(mut self, records: Arc<crate::db::Records>) -> Self {
        self.records = Some(records);
        self
    }

    /// The records of a key-value database, when the source is one read whole.
    pub fn records(&self) -> Option<&crate::db::Records> {
        self.records.as_deref()
    }

    /// All the bytes: borrowed when they are in memory (a map or a buffer), else read
    /// whole from the stream.
    pub fn whole(&self) -> Result<std::borrow::Cow<'_, [u8]>> {
        if let Some(b) = &self.mapped {
            return Ok(std::borrow::Cow::Borrowed(b.as_bytes()));
        }
        let n = usize::try_from(self.data.len())
            .map_err(|_| Error::from(ErrorKind::Overflow("source size".to_string())))?;
        let mut v = vec![0u8; n];
        self.data.read_exact_at(0, &mut v)?;
        Ok(std::borrow::Cow::Owned(v))
    }

    /// Names the source (used in error messages and for `source.stem`).
    pub fn with_path(mut self, path: impl Into<PathBuf>) -> Self {
        self.path = Some(path.into());
        self
    }

    /// The bytes, as a random-access source.
    pub fn data(&self) -> &dyn RandomAccess {
        &*self.data
    }

    /// What `make` makes of these bytes, made once per type `T` and `key` and shared by
    /// every later call: engines keep here what several callers ask for (a zip archive's
    /// index is asked for by every detector and the indexer; `key` holds the limit it was
    /// made under). An error is not kept: the next call makes it anew.
    pub fn memo<T: Any + Send + Sync>(
        &self,
        key: u64,
        make: impl FnOnce(&Self) -> Result<T>,
    ) -> Result<Arc<T>> {
        let find = |memo: &[Memo]| {
            memo.iter().find_map(|m| {
                (m.key == key && m.value.is::<T>())
                    .then(|| m.value.clone().downcast::<T>().ok())
                    .flatten()
            })
        };
        if let Some(v) = find(&self.memo.lock().unwrap_or_else(|e| e.into_inner())) {
            return Ok(v);
        }
        let v = Arc::new(make(self)?);
        let mut memo = self.memo.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(kept) = find(&memo) {
            return Ok(kept);
        }
        memo.push(Memo {
            key,
            value: v.clone(),
        });
        Ok(v)
    }

    /// A file beside this one, named `name` relative to this file's folder (ONNX external
    /// data), memory-mapped once and shared by every later call.
    ///
    /// The name must stay inside the folder: an absolute path, a `..` component, or a
    /// path that resolves (through symbolic links) outside the folder is refused with
    /// [`ErrorKind::Invalid`], as is a source without a path.
    pub fn external(&self, name: &str) -> Result<Bytes> {
        let loc = || {
            self.location()
                .with_field(format!("external file '{name}'"))
        };
        let mut cache = self.external.lock().map_err(|_| {
            Error::new(
                ErrorKind::Invalid("external file cache poisoned".into()),
                loc(),
            )
        })?;
        if let Some((_, b)) = cache.iter().find(|(n, _)| n == name) {
            return Ok(b.clone());
        }
        let Some(path) = &self.path else {
            return Err(Error::new(
                ErrorKind::Invalid(format!(
                    "external file '{name}' cannot be found: the source has no path"
                )),
                loc(),
            ));
        };
        let real = resolve_beside(path, name, "external file", "model's")
            .map_err(|e| Error::new(e.kind, loc()))?;
        let refuse = |why: &str| {
            Error::new(
                ErrorKind::Invalid(format!("external file '{name}' {why}")),
                loc(),
            )
        };
        let bytes = Source::open(&real).map_err(|e| Error::new(e.kind, loc()))?;
        let b = bytes.mapped.ok_or_else(|| refuse("could not be mapped"))?;
        cache.push((name.to_string(), b.clone()));
        Ok(b)
    }

    /// An error when the file, or an external file beside it already mapped, shrank while
    /// it was read ([`crate::mapguard`]): what was read since may be zeros in place of the
    /// file's bytes. The high-level API checks this after indexing and after every read.
    pub fn check_unchanged(&self) -> Result<()> {
        let changed = |b: &Bytes| b.changed();
        let mut which = None;
        if self.mapped.as_ref().is_some_and(changed) {
            which = Some(self.location());
        } else if let Ok(cache) = self.external.lock() {
            if let Some((name, _)) = cache.iter().find(|(_, b)| changed(b)) {
                which = Some(
                    self.location()
                        .with_field(format!("external file '{name}'")),
                );
            }
        }
        match which {
            None => Ok(()),
            Some(loc) => Err(Error::new(
                ErrorKind::Invalid(
                    "the file changed while it was read (it was truncated): what was read \
                     from it cannot be trusted; read it again once nothing is writing it"
                        .into(),
                ),
                loc,
            )),
        }
    }

    /// The shared in-memory bytes, when the source is a map or a buffer.
    pub fn bytes(&self) -> Option<&Bytes> {
        self.mapped.as_ref()
    }

    /// The path, when the source came from one.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The file name without its last extension (`model` for `dir/model.npy`), or
    /// `"tensor"` when the source has no path.
    pub fn stem(&self) -> String {
        self.path
            .as_deref()
            .and_then(|p| p.file_stem())
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "tensor".to_string())
    }

    /// The file name (`model.npy` for `dir/model.npy`), or `"tensor"` when the source has
    /// no path.
    pub fn name(&self) -> String {
        self.path
            .as_deref()
            .and_then(|p| p.file_name())
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "tensor".to_string())
    }

    /// The path as text, or `""` when the source has no path.
    pub fn path_text(&self) -> String {
        self.path
            .as_deref()
            .map(|p| p.display().to_string())
            .unwrap_or_default()
    }

    /// True when the source holds `magic` at byte `at`.
    pub fn has_magic(&self, at: u64, magic: &[u8]) -> bool {
        let mut buf = [0u8; 32];
        let mut at = at;
        magic.chunks(buf.len()).all(|want| {
            let got = &mut buf[..want.len()];
            let same = self.data().read_exact_at(at, got).is_ok() && got == want;
            at = at.saturating_add(want.len() as u64);
            same
        })
    }

    /// `e`, located in this source's file when the source has a path.
    pub fn in_file(&self, e: crate::error::Error) -> crate::error::Error {
        match self.path() {
            Some(p) => e.in_file(p),
            None => e,
        }
    }

    /// A location naming this source's file, for errors.
    pub fn location(&self) -> Location {
        Location {
            file: self.path.clone(),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind_text(e: &Error) -> String {
        e.to_string()
    }

    #[test]
    fn magic_at_any_offset_and_length() {
        let bytes: Vec<u8> = (0..100u8).collect();
        let src = Source::from_bytes(bytes.clone());
        assert!(src.has_magic(0, &bytes[..6]));
        assert!(src.has_magic(10, &bytes[10..80]), "longer than one chunk");
        assert!(!src.has_magic(10, &bytes[11..80]));
        assert!(src.has_magic(95, &bytes[95..]));
        assert!(
            !src.has_magic(95, &[95, 96, 97, 98, 99, 100]),
            "past the end"
        );
        assert!(src.has_magic(100, b""));
    }

    #[cfg(unix)]
    #[test]
    fn folders_and_fifos_are_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let e = Source::open(dir.path()).err().expect("a folder is refused");
        assert!(matches!(e.kind, ErrorKind::Unsupported(_)), "{e}");
        let fifo = dir.path().join("pipe");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path that outlives the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // No writer: a blocking open would wait forever.
        let e = Source::open(&fifo).err().expect("a FIFO is refused");
        assert!(e.to_string().contains("not a regular file"), "{e}");
    }

    #[test]
    fn neighbours_are_named_inside_the_folder_and_opened_once() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let opened = Arc::new(AtomicUsize::new(0));
        let count = opened.clone();
        let src = Source::from_bytes(vec![1u8, 2, 3])
            .with_path("s3://b/ckpt/.metadata")
            .with_neighbours(Arc::new(move |_name: &str| {
                count.fetch_add(1, Ordering::Relaxed);
                Ok(Arc::new(Bytes::Owned(Arc::from(vec![7u8; 8]))) as Arc<dyn RandomAccess>)
            }));
        for bad in [
            "",
            "/etc/passwd",
            "../x.distcp",
            "a/../../x",
            "a\\..\\x",
            "a\0b",
        ] {
            let e = src
                .neighbour(bad)
                .err()
                .unwrap_or_else(|| panic!("{bad:?} accepted"));
            assert!(
                e.to_string().contains("is not a path inside the folder"),
                "{e}"
            );
        }
        assert_eq!(
            opened.load(Ordering::Relaxed),
            0,
            "nothing opened for a bad name"
        );
        let a = src.neighbour("__0_0.distcp").unwrap().unwrap();
        let b = src.neighbour("__0_0.distcp").unwrap().unwrap();
        assert_eq!((a.len(), b.len()), (8, 8));
        assert_eq!(opened.load(Ordering::Relaxed), 1, "opened once");
        // A window past the neighbour's end is refused before any read.
        assert!(SharedWindow::new(a.clone(), 4, 5).is_err());
        let w = SharedWindow::new(a, 2, 4).unwrap();
        assert_eq!(w.as_slice(), Some(&[7u8; 4][..]));
        // A local source has no neighbours of its own: `external` maps them.
        assert!(Source::from_bytes(vec![0u8])
            .neighbour("x")
            .unwrap()
            .is_none());
    }

    #[test]
    fn external_files_stay_in_the_folder() {
        let dir = tempfile::tempdir().unwrap();
        let model = dir.path().join("model.onnx");
        std::fs::write(&model, b"model").unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub").join("w.bin"), b"0123456789").unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), b"secret").unwrap();
        let src = Source::open(&model).unwrap();

        let a = src.external("sub/w.bin").unwrap();
        assert_eq!(a.as_bytes(), b"0123456789");
        // Mapped once: the same bytes come back.
        let b = src.external("sub/w.bin").unwrap();
        assert_eq!(a.as_bytes().as_ptr(), b.as_bytes().as_ptr());
        assert_eq!(
            src.external("./sub/w.bin").unwrap().as_bytes(),
            b"0123456789"
        );

        let secret = outside.path().join("secret");
        for bad in [
            "",
            "../secret",
            "sub/../../secret",
            secret.to_str().unwrap(),
            "/etc/passwd",
        ] {
            let e = src.external(bad).unwrap_err();
            assert!(matches!(e.kind, ErrorKind::Invalid(_)), "{bad:?}: {e}");
            assert!(kind_text(&e).contains("model.onnx"), "{e}");
        }
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(&secret, dir.path().join("link")).unwrap();
            let e = src.external("link").unwrap_err();
            assert!(e.to_string().contains("outside the model's folder"), "{e}");
        }
        let e = src.external("missing.bin").unwrap_err();
        assert!(matches!(e.kind, ErrorKind::Io(_)), "{e}");
        assert!(e.to_string().contains("missing.bin"), "{e}");
        // A source with no path has no folder.
        let e = Source::from_bytes(b"x".to_vec())
            .external("w.bin")
            .unwrap_err();
        assert!(e.to_string().contains("no path"), "{e}");
    }
}
