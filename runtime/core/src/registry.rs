//! What every generated format module exports for the high-level API: a descriptor with
//! its name, extensions, detector, indexer and writer constructor.

use std::io::{Read, Seek, Write};

use crate::error::{Error, ErrorKind, Result};
use crate::limits::Limits;
use crate::source::Source;
use crate::tensor::{TensorInfo, TensorMeta, WriteOptions};
use crate::tree::Node;

/// A writable, seekable byte sink.
pub trait WriteSeek: Write + Seek {}

impl<T: Write + Seek> WriteSeek for T {}

/// The bytes of one tensor handed to a writer: exactly `meta.nbytes()` bytes in the
/// tensor's order and byte order, in memory or from a stream.
pub enum Payload<'a> {
    /// Bytes in memory (a map, a buffer): written straight from there, with no copy.
    Bytes(&'a [u8]),
    /// A stream, copied through a bounded buffer.
    Reader(&'a mut dyn Read),
}

/// Largest buffer used to copy a streamed payload.
const COPY_BUFFER: u64 = 4 << 20;

impl Payload<'_> {
    /// Writes exactly `len` bytes of the payload to `w`; fewer (or, for bytes in memory,
    /// a different number) is an error naming `field`.
    pub fn write_to<W: Write + ?Sized>(self, w: &mut W, len: u64, field: &str) -> Result<()> {
        let short = |available: u64| {
            Error::from(ErrorKind::Truncated {
                needed: len,
                available,
            })
            .in_field(field)
        };
        match self {
            Payload::Bytes(b) => {
                if b.len() as u64 != len {
                    return Err(Error::from(ErrorKind::SizeMismatch(format!(
                        "{len} bytes expected, {} given",
                        b.len()
                    )))
                    .in_field(field));
                }
                w.write_all(b)?;
            }
            Payload::Reader(r) => {
                let mut buf = vec![0u8; len.min(COPY_BUFFER) as usize];
                let mut done = 0u64;
                while done < len {
                    let want = (len - done).min(buf.len() as u64) as usize;
                    let n = match r.read(&mut buf[..want]) {
                        Ok(0) => return Err(short(done)),
                        Ok(n) => n,
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                        Err(e) => return Err(e.into()),
                    };
                    w.write_all(&buf[..n])?;
                    done += n as u64;
                }
            }
        }
        Ok(())
    }
}

impl Payload<'_> {
    /// Writes exactly `len` bytes of the payload to `w` with the bytes of every
    /// `unit`-sized group reversed (a byte-order swap), through a bounded buffer.
    pub fn write_swapped_to<W: Write + ?Sized>(
        self,
        w: &mut W,
        len: u64,
        unit: usize,
        field: &str,
    ) -> Result<()> {
        if unit <= 1 {
            return self.write_to(w, len, field);
        }
        if len % unit as u64 != 0 {
            return Err(Error::from(ErrorKind::SizeMismatch(format!(
                "{len} bytes are not a whole number of {unit}-byte units"
            )))
            .in_field(field));
        }
        let cap = (len.min(COPY_BUFFER) as usize / unit).max(1) * unit;
        let mut buf = vec![0u8; cap.min(len as usize)];
        match self {
            Payload::Bytes(b) => {
                if b.len() as u64 != len {
                    return Err(Error::from(ErrorKind::SizeMismatch(format!(
                        "{len} bytes expected, {} given",
                        b.len()
                    )))
                    .in_field(field));
                }
                for chunk in b.chunks(cap) {
                    let out = &mut buf[..chunk.len()];
                    out.copy_from_slice(chunk);
                    crate::convert::swap_in_place(out, unit);
                    w.write_all(out)?;
                }
            }
            Payload::Reader(r) => {
                let mut done = 0u64;
                while done < len {
                    let want = (len - done).min(buf.len() as u64) as usize;
                    r.read_exact(&mut buf[..want]).map_err(|e| {
                        if e.kind() == std::io::ErrorKind::UnexpectedEof {
                            Error::from(ErrorKind::Truncated {
                                needed: len,
                                available: done,
                            })
                            .in_field(field)
                        } else {
                            e.into()
                        }
                    })?;
                    crate::convert::swap_in_place(&mut buf[..want], unit);
                    w.write_all(&buf[..want])?;
                    done += want as u64;
                }
            }
        }
        Ok(())
    }
}

/// What a writer kept of a structure given to it ([`TensorWriter::set_structure`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StructureKept {
    /// The format stores the structure, or the values of it listed nowhere below.
    pub stored: bool,
    /// The paths of the values the format cannot hold, left out (a number where
    /// safetensors' `__metadata__` holds text alone).
    pub dropped: Vec<String>,
}

impl StructureKept {
    /// The whole structure kept.
    pub fn all() -> Self {
        StructureKept {
            stored: true,
            dropped: Vec::new(),
        }
    }

    /// The structure kept but for the values at these paths.
    pub fn dropping(dropped: Vec<String>) -> Self {
        StructureKept {
            stored: true,
            dropped,
        }
    }
}

/// A structure stored whole (`true`) or not at all.
impl From<bool> for StructureKept {
    fn from(stored: bool) -> Self {
        StructureKept {
            stored,
            dropped: Vec::new(),
        }
    }
}

/// Where a tensor added as a view ([`TensorWriter::add_view`]) lies in a storage that
/// several tensors may share: a `torch.save` storage viewed at an offset with strides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorageView {
    /// The caller's id of the storage: views with the same id share one storage, whose
    /// bytes are given with the first of them.
    pub storage: u64,
    /// The storage's size in bytes (a whole number of the tensor's elements).
    pub storage_nbytes: u64,
    /// Where the tensor's first element is, in elements from the storage's start.
    pub offset: u64,
    /// The tensor's strides in elements (0 allowed, negative refused).
    pub strides: Vec<i64>,
}

/// A streaming writer of one container: tensors are added one at a time.
pub trait TensorWriter {
    /// Appends one tensor whose bytes `data` holds.
    fn add(&mut self, meta: &TensorMeta, data: Payload<'_>) -> Result<()>;
    /// Writes whatever the container needs after its last tensor (central directory,
    /// trailers) and flushes.
    fn finish(self: Box<Self>) -> Result<()>;
    /// Gives the object the tensors are to be written in (nested dicts, lists, tuples,
    /// numbers and strings whose [`Node::Tensor`] leaves name the tensors added), for
    /// formats that store one (PyTorch; checked when the writer finishes), or the values
    /// to write beside them, for formats of values beside their tensors (safetensors
    /// `__metadata__`, GGUF key/values: each entry of the top dict that holds no tensor).
    /// Says what the format kept: nothing, and nothing changed, where it stores tensors
    /// alone (the default).
    fn set_structure(&mut self, tree: &Node) -> Result<StructureKept> {
        let _ = tree;
        Ok(StructureKept::default())
    }
    /// Adds a tensor that views a storage at an offset with strides, for formats that
    /// store views (PyTorch): `storage` holds the storage's `view.storage_nbytes` bytes
    /// the first time its id is given, and must be `None` after (the storage is written
    /// once, shared by its views). `meta`'s order is ignored: `view.strides` says the
    /// layout. Returns false, and writes nothing, where the format stores dense tensors
    /// only (the default): the caller then adds the tensor contiguous.
    fn add_view(
        &mut self,
        meta: &TensorMeta,
        view: &StorageView,
        storage: Option<Payload<'_>>,
    ) -> Result<bool> {
        let _ = (meta, view, storage);
        Ok(false)
    }
}

/// Writes one tensor as a whole file of a format that holds one tensor per file (npy's
/// generated `write_tensor`): the header from `meta`, then `data`'s bytes. Returns the
/// number of bytes written.
pub type WriteOneFn = fn(&mut dyn Write, &TensorMeta, Payload<'_>) -> Result<u64>;

/// The streaming writer of a format that holds exactly one tensor per file: the tensor is
/// written by the format's [`WriteOneFn`] as it is added; a second tensor, or none, is an
/// error naming the format.
pub struct SingleTensorWriter<W> {
    out: W,
    format: &'static str,
    write: WriteOneFn,
    written: bool,
}

impl<W: Write + Seek> SingleTensorWriter<W> {
    /// A writer of `format`'s files into `out` (written from its current position).
    pub fn new(out: W, format: &'static str, write: WriteOneFn) -> Self {
        SingleTensorWriter {
            out,
            format,
            write,
            written: false,
        }
    }

    /// Writes the tensor: `data` holds exactly `meta.nbytes()` bytes in `meta`'s order and
    /// byte order.
    pub fn add(&mut self, meta: &TensorMeta, data: Payload<'_>) -> Result<()> {
        if self.written {
            return Err(Error::from(ErrorKind::Unsupported(format!(
                "{} holds exactly one tensor",
                self.format
            ))));
        }
        (self.write)(&mut self.out, meta, data).map_err(|e| e.in_entry(meta.name.as_str()))?;
        self.written = true;
        Ok(())
    }

    /// Flushes and returns the output; an error when no tensor was added.
    pub fn finish(mut self) -> Result<W> {
        if !self.written {
            return Err(Error::from(ErrorKind::Invalid(format!(
                "{} holds exactly one tensor; none was added",
                self.format
            ))));
        }
        self.out.flush()?;
        Ok(self.out)
    }
}

impl<W: Write + Seek> TensorWriter for SingleTensorWriter<W> {
    fn add(&mut self, meta: &TensorMeta, data: Payload<'_>) -> Result<()> {
        SingleTensorWriter::add(self, meta, data)
    }

    fn finish(self: Box<Self>) -> Result<()> {
        SingleTensorWriter::finish(*self)?;
        Ok(())
    }
}

/// The [`FormatDesc::structure`] of formats that store tensors alone.
pub fn no_structure(_: &Source, _: &Limits) -> Result<Option<Node>> {
    Ok(None)
}

/// Builds a writer over an output.
pub type WriterCtor =
    for<'a> fn(Box<dyn WriteSeek + 'a>, &WriteOptions) -> Result<Box<dyn TensorWriter + 'a>>;

/// Rewrites a document of the format (`src`) into an output, field by field, handing each
/// tensor's name to the callback: `None` copies the tensor as it is, a
/// [`Replacement`] writes that instead (where the options place it).
/// Returns the external files written, synced but not committed
/// (the protobuf engine's `doc::commit_external`), for the caller to commit before the document.
pub type RewriteFn = for<'a, 'b> fn(
    &Source,
    Box<dyn WriteSeek + 'a>,
    &WriteOptions,
    &Limits,
    &mut dyn FnMut(&str) -> Result<Option<Replacement<'b>>>,
) -> Result<Vec<crate::output::AtomicFile>>;

/// A format as the generated code describes it.
#[derive(Clone, Copy)]
pub struct FormatDesc {
    /// Public name (CLI `--to`, JSON `format`).
    pub name: &'static str,
    /// File extensions, without the dot, that map to this format.
    pub extensions: &'static [&'static str],
    /// True when the source looks like this format (magic, container entries).
    pub detect: fn(&Source, &Limits) -> bool,
    /// All tensor metadata, without reading payloads.
    pub index: fn(&Source, &Limits) -> Result<Vec<TensorInfo>>,
    /// The object the tensors are stored in, for formats that store one (a PyTorch
    /// checkpoint's pickled object): its [`Node::Tensor`] leaves carry the names `index`
    /// gives. `None` for formats that store tensors alone.
    pub structure: fn(&Source, &Limits) -> Result<Option<Node>>,
    /// The structure is the format's values beside its tensors (a `file` format's `value`
    /// mappings: safetensors `__metadata__`, GGUF key/values), not an object they are
    /// stored in: `convert` hands it to formats of values alone.
    pub values: bool,
    /// A streaming writer.
    pub writer: WriterCtor,
    /// The format stores C-order tensors only: the high-level API reorders Fortran-order
    /// tensors before handing them to the writer.
    pub c_order_only: bool,
    /// Databases of records (Caffe2's MiniDB, LMDB, LevelDB): how to open one and how a
    /// tensor becomes records; `None` for other formats.
    pub db: Option<crate::db::DbDesc>,
    /// Rewrites a document with some tensors replaced and everything else kept, for
    /// formats whose documents hold more than tensors (ONNX graphs); `None` elsewhere.
    pub rewrite: Option<RewriteFn>,
    /// The format's writer aligns its tensors' data as [`WriteOptions::align`] asks (its
    /// schema uses `write_align`); a save of another format that asks for an alignment
    /// is refused.
    pub aligns: bool,
    /// The longest tensor name the format can store, where it bounds names itself (a zip
    /// member or database key holding the name); `None` where only the size of the file
    /// does. A save checks every name against it before writing the tensor
    /// ([`FormatDesc::check_name`]).
    pub max_name: Option<NameLimit>,
    /// The most bytes the names of one file's tensors take together, where one block of
    /// the file holds them all and is bounded (safetensors' JSON header, of at most
    /// 100,000,000 bytes); `None` elsewhere. Checked as [`FormatDesc::max_name`] is.
    pub max_names_total: Option<NameLimit>,
}

/// The longest tensor name a format stores: a number of bytes of the name as the format
/// writes it, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NameLimit {
    /// The most bytes of a name.
    pub bytes: u64,
    /// What holds the name and its own limit, in the user's words ("a zip member name,
    /// `{name}.npy`, of at most 65,535 bytes").
    pub why: &'static str,
    /// How the format writes a name, which gives its size.
    pub text: NameText,
}

/// How a format writes a tensor's name, for [`NameLimit`]: what its size is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameText {
    /// As UTF-8, byte for byte.
    Utf8,
    /// As the content of a JSON string: `"` and `\` take 2 bytes, and control
    /// characters 2 (`\n`) or 6 (`\u001b`).
    Json,
}

impl NameText {
    /// The bytes `name` takes written this way.
    pub fn len(self, name: &str) -> u64 {
        match self {
            NameText::Utf8 => name.len() as u64,
            NameText::Json => name
                .bytes()
                .map(|b| match b {
                    b'"' | b'\\' | 0x08 | 0x09 | 0x0a | 0x0c | 0x0d => 2u64,
                    0..=0x1f => 6,
                    _ => 1,
                })
                .sum(),
        }
    }
}

impl NameLimit {
    /// The limit on a name that `pattern` (a [`crate::pattern::Pattern`] such as
    /// `{name}.npy` or `{name}#%{chunk}`) turns into a string of at most `limit` bytes:
    /// `limit` less the pattern's own characters and [`NameLimit::OTHER_CAPTURE`] bytes for
    /// every capture after the first, which holds the name (a part's number).
    pub const fn in_pattern(limit: u64, pattern: &str, why: &'static str) -> NameLimit {
        let b = pattern.as_bytes();
        let (mut i, mut fixed, mut captures, mut open) = (0, 0u64, 0u64, false);
        while i < b.len() {
            match (open, b[i]) {
                (false, b'{') => {
                    open = true;
                    captures += 1;
                }
                (true, b'}') => open = false,
                (false, _) => fixed += 1,
                (true, _) => {}
            }
            i += 1;
        }
        let others = captures.saturating_sub(1);
        let used = fixed.saturating_add(others.saturating_mul(NameLimit::OTHER_CAPTURE));
        NameLimit {
            bytes: limit.saturating_sub(used),
            why,
            text: NameText::Utf8,
        }
    }

    /// The bytes a capture other than the name may take in a pattern: a part's number,
    /// 20 digits at most.
    pub const OTHER_CAPTURE: u64 = 20;
}

impl FormatDesc {
    /// A format of tensors alone, without a writer (a save refused): no object
    /// `structure`, Fortran order accepted, not a database, no rewriter. Generated `DESC`s
    /// start from it and set what their format has, one builder call each
    /// (`FormatDesc::new(..).writer(..).structure(structure)`).
    pub const fn new(
        name: &'static str,
        extensions: &'static [&'static str],
        detect: fn(&Source, &Limits) -> bool,
        index: fn(&Source, &Limits) -> Result<Vec<TensorInfo>>,
    ) -> Self {
        FormatDesc {
            name,
            extensions,
            detect,
            index,
            structure: no_structure,
            values: false,
            writer: no_writer,
            c_order_only: false,
            db: None,
            rewrite: None,
            aligns: false,
            max_name: None,
            max_names_total: None,
        }
    }

    /// The format whose names take at most `limit` together
    /// ([`FormatDesc::max_names_total`]).
    pub const fn max_names_total(self, limit: NameLimit) -> Self {
        FormatDesc {
            max_names_total: Some(limit),
            ..self
        }
    }

    /// The format whose names are at most `limit` long ([`FormatDesc::max_name`]).
    pub const fn max_name(self, limit: NameLimit) -> Self {
        FormatDesc {
            max_name: Some(limit),
            ..self
        }
    }

    /// Refuses a tensor name longer than the format stores ([`FormatDesc::max_name`]), or
    /// one that takes the names of a file past what it holds of them together
    /// ([`FormatDesc::max_names_total`]), with an error naming the tensor and the limit.
    /// `total` is the bytes of the names checked before in the same file; this name's
    /// are added to it.
    pub fn check_name(&self, name: &str, total: &mut u64) -> Result<()> {
        if let Some(limit) = self.max_names_total {
            *total = total.saturating_add(limit.text.len(name));
        }
        if let Some(limit) = self.max_name {
            let len = limit.text.len(name);
            if len > limit.bytes {
                return Err(name_error(
                    name,
                    format!(
                        "a tensor name of {len} bytes: {} stores names of at most {} bytes ({})",
                        self.name, limit.bytes, limit.why
                    ),
                ));
            }
        }
        if let Some(limit) = self.max_names_total.filter(|l| *total > l.bytes) {
            return Err(name_error(
                name,
                format!(
                    "the tensors' names take {} bytes with this one as written: {} stores \
                     names of at most {} bytes together ({})",
                    *total, self.name, limit.bytes, limit.why
                ),
            ));
        }
        Ok(())
    }

    /// The format with its streaming writer.
    pub const fn writer(self, writer: WriterCtor) -> Self {
        FormatDesc { writer, ..self }
    }

    /// The format with the object its tensors are stored in ([`FormatDesc::structure`]).
    pub const fn structure(self, structure: fn(&Source, &Limits) -> Result<Option<Node>>) -> Self {
        FormatDesc { structure, ..self }
    }

    /// The format with values beside its tensors, given as its structure
    /// ([`FormatDesc::values`]).
    pub const fn values(self, structure: fn(&Source, &Limits) -> Result<Option<Node>>) -> Self {
        FormatDesc {
            structure,
            values: true,
            ..self
        }
    }

    /// The format storing C-order tensors only.
    pub const fn c_order_only(self) -> Self {
        FormatDesc {
            c_order_only: true,
            ..self
        }
    }

    /// The format whose writer aligns its tensors' data ([`FormatDesc::aligns`]).
    pub const fn aligns(self) -> Self {
        FormatDesc {
            aligns: true,
            ..self
        }
    }

    /// The format with its document rewriter.
    pub const fn rewrite(self, rewrite: RewriteFn) -> Self {
        FormatDesc {
            rewrite: Some(rewrite),
            ..self
        }
    }

    /// The format as a database of records.
    pub const fn db(self, db: crate::db::DbDesc) -> Self {
        FormatDesc {
            db: Some(db),
            ..self
        }
    }
}

/// An error about the name of tensor `name`: `message`, at the tensor.
fn name_error(name: &str, message: String) -> Error {
    Error::new(
        ErrorKind::Unsupported(message),
        crate::error::Location::default().with_entry(name),
    )
}

/// The writer of a [`FormatDesc`] that was given none: refuses to write.
fn no_writer<'a>(
    _: Box<dyn WriteSeek + 'a>,
    _: &WriteOptions,
) -> Result<Box<dyn TensorWriter + 'a>> {
    Err(Error::from(ErrorKind::Unsupported(
        "writing: the format has no writer".to_string(),
    )))
}

impl std::fmt::Debug for FormatDesc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FormatDesc")
            .field("name", &self.name)
            .field("extensions", &self.extensions)
            .finish()
    }
}

/// A tensor to write in place of one a document holds (see
/// [`RewriteFn`]).
pub struct Replacement<'b> {
    /// The tensor's metadata (C order, little-endian).
    pub meta: TensorMeta,
    /// Its `meta.nbytes()` bytes.
    pub data: Box<dyn AsRef<[u8]> + 'b>,
    /// The external file the tensor was in, kept with [`crate::tensor::ExternalData::Auto`].
    pub keep_location: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn detect(_: &Source, _: &Limits) -> bool {
        false
    }

    fn index(_: &Source, _: &Limits) -> Result<Vec<TensorInfo>> {
        Ok(Vec::new())
    }

    #[test]
    fn a_pattern_leaves_its_limit_less_its_own_characters_to_the_name() {
        let zip = NameLimit::in_pattern(65_535, "{name}.npy", "zip");
        assert_eq!(zip.bytes, 65_531);
        let key = NameLimit::in_pattern(511, "{name}#%{chunk}", "lmdb");
        assert_eq!(key.bytes, 511 - 2 - NameLimit::OTHER_CAPTURE);
        assert_eq!(NameLimit::in_pattern(3, "abcd{name}", "x").bytes, 0);
    }

    #[test]
    fn names_past_a_format_limit_are_refused_naming_the_tensor() {
        let desc = FormatDesc::new("f", &[], detect, index)
            .max_name(NameLimit::in_pattern(10, "{name}.x", "a 10-byte field"))
            .max_names_total(NameLimit {
                bytes: 20,
                why: "a 20-byte header",
                text: NameText::Json,
            });
        let mut total = 0;
        desc.check_name("12345678", &mut total).unwrap();
        let e = desc.check_name("123456789", &mut total).unwrap_err();
        assert_eq!(e.location.entry.as_deref(), Some("123456789"));
        assert!(
            e.to_string().contains(
                "a tensor name of 9 bytes: f stores names of at most 8 bytes (a 10-byte field)"
            ),
            "{e}"
        );
        // Together: 8 + 9 + 4 (two escapes of 2, `"` and `\\`) + 6 (`\u001b`) bytes.
        let mut total = 8 + 9;
        let e = desc.check_name("\"\\\x1b", &mut total).unwrap_err();
        assert_eq!(total, 27);
        assert!(e.to_string().contains("take 27 bytes with this one as written: f stores names of at most 20 bytes together"), "{e}");
        assert_eq!(NameText::Json.len("a\nb\u{61c}"), 1 + 2 + 1 + 2);
    }
}
