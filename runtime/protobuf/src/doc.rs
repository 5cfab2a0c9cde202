//! Writing protobuf documents whose tensors sit in one repeated field (ONNX's
//! `graph.initializer`), streamed with bounded memory, their payloads inline or in
//! external data files beside the document.
//!
//! A [`DocWriter`] writes the document front to back: the header fields of each message
//! on the way to the tensors (encoded by the caller), then one item per tensor (its
//! message without the payload, then the payload field streamed from the caller's
//! bytes). The lengths of the messages that hold the items are not known until the end:
//! each is reserved as a five-byte varint (a valid, non-minimal encoding that every
//! protobuf parser accepts) and back-patched by [`DocWriter::finish`]. Where a tensor's
//! bytes go is decided per tensor by [`ExternalData`] ([`DocWriter::place`]); external
//! files are written atomically beside the document and committed when it is finished,
//! before the document itself is.
//!
//! [`rewrite`] copies an existing document field by field, byte for byte, except the
//! items of the tensor field, which the caller may replace one by one: what a weight
//! replacement or a move between inline and external storage needs.

use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::{self as protobuf, Value, WireType};
use tensorfmt_core::error::{Error, ErrorKind, Location, Result};
use tensorfmt_core::output::AtomicFile;
use tensorfmt_core::registry::{Payload, TensorWriter, WriteSeek};
use tensorfmt_core::source::Source;
use tensorfmt_core::tensor::{ByteOrder, Order, TensorMeta, WriteOptions};
use tensorfmt_core::DType;
use tensorfmt_core::Limits;

/// Largest protobuf message: 2 GiB - 1 bytes (protobuf's own limit; ONNX models beyond it
/// must keep tensors in external data).
pub const MAX_MESSAGE: u64 = (1 << 31) - 1;

/// The bytes of a reserved length: a five-byte varint holds any message size below 2^35.
const SLOT: usize = 5;

pub use tensorfmt_core::ExternalData;

/// Where one tensor's bytes go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// In an external file (else in the document).
    pub external: bool,
    /// The external file's name, relative to the document's folder.
    pub location: String,
    /// Where the bytes start in it.
    pub offset: u64,
    /// How many bytes.
    pub nbytes: u64,
}

struct ExtFile {
    file: AtomicFile,
    len: u64,
}

/// A streaming writer of one protobuf document; see the module documentation.
pub struct DocWriter<'a> {
    out: Box<dyn WriteSeek + 'a>,
    pos: u64,
    /// Reserved lengths: where the slot is and where the message's content starts.
    open: Vec<(u64, u64)>,
    policy: ExternalData,
    dest: Option<PathBuf>,
    files: Vec<(String, ExtFile)>,
    by_location: HashMap<String, usize>,
    names: HashMap<String, usize>,
    tensors: u64,
    /// This save's tag, in the names of its external files.
    tag: String,
}

fn invalid(msg: String) -> Error {
    Error::from(ErrorKind::Invalid(msg))
}

/// Whether `name` can be a file name beside the document as it is.
fn safe_file_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 200
        && name != "."
        && name != ".."
        && !name
            .chars()
            .any(|c| c.is_control() || "<>:;,?\"*|/\\".contains(c))
}

impl<'a> DocWriter<'a> {
    /// A writer over `out`; `dest` is the document's path (external files go beside it),
    /// `None` for a stream, which can hold inline tensors only.
    pub fn new(out: Box<dyn WriteSeek + 'a>, policy: ExternalData, dest: Option<PathBuf>) -> Self {
        DocWriter {
            out,
            pos: 0,
            open: Vec::new(),
            policy,
            dest,
            files: Vec::new(),
            by_location: HashMap::new(),
            names: HashMap::new(),
            tensors: 0,
            tag: fresh_tag(),
        }
    }

    /// Names this save's external files with `tag` ([`WriteOptions::save_tag`]) instead
    /// of a fresh one.
    pub fn with_tag(mut self, tag: Option<String>) -> Self {
        if let Some(t) = tag {
            self.tag = t;
        }
        self
    }

    /// Bytes written to the document so far.
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// Writes `bytes` (encoded fields) as they are.
    pub fn raw(&mut self, bytes: &[u8]) -> Result<()> {
        self.out.write_all(bytes)?;
        self.pos += bytes.len() as u64;
        Ok(())
    }

    /// Starts the embedded message field `number`; its length is reserved and written by
    /// [`DocWriter::close`].
    pub fn open(&mut self, number: u32) -> Result<()> {
        let mut tag = Vec::with_capacity(5);
        protobuf::put_tag(&mut tag, number, WireType::Len);
        self.raw(&tag)?;
        let slot = self.pos;
        self.raw(&[0x80, 0x80, 0x80, 0x80, 0x00])?;
        self.open.push((slot, self.pos));
        Ok(())
    }

    /// Ends the message [`DocWriter::open`] started last, writing its length.
    pub fn close(&mut self) -> Result<()> {
        let Some((slot, start)) = self.open.pop() else {
            return Err(invalid("no open message to close".into()));
        };
        let len = self.pos - start;
        if len > MAX_MESSAGE {
            return Err(Error::from(ErrorKind::Limit {
                what: "protobuf message size (tensors over 2 GiB need external data)",
                limit: MAX_MESSAGE,
                actual: len,
            }));
        }
        let mut b = [0u8; SLOT];
        let mut v = len;
        for (i, x) in b.iter_mut().enumerate() {
            *x = (v & 0x7f) as u8 | if i + 1 < SLOT { 0x80 } else { 0 };
            v >>= 7;
        }
        self.out.seek(SeekFrom::Start(slot))?;
        self.out.write_all(&b)?;
        self.out.seek(SeekFrom::Start(self.pos))?;
        Ok(())
    }

    /// Decides where a tensor of `nbytes` bytes named `name` goes. `keep` is the external
    /// file a rewritten tensor came from, kept with [`ExternalData::Auto`] (its bytes go to
    /// a file of that name beside the new document); `item_overhead` is what its message
    /// takes in the document besides the payload.
    pub fn place(
        &mut self,
        name: &str,
        nbytes: u64,
        keep: Option<&str>,
        item_overhead: u64,
    ) -> Result<Placement> {
        self.tensors += 1;
        let inline = Placement {
            external: false,
            location: String::new(),
            offset: 0,
            nbytes,
        };
        let (location, align) = match (&self.policy, keep) {
            (ExternalData::Inline, _) => return Ok(inline),
            // A tensor that was external stays external, in this save's own file (never
            // in the file it came from: that may be the input's).
            (ExternalData::Auto, Some(_)) => (self.default_location()?, 4096),
            (ExternalData::Auto, None) => {
                let after = self.pos + item_overhead + nbytes + 16;
                if after <= MAX_MESSAGE {
                    return Ok(inline);
                }
                (self.default_location()?, 4096)
            }
            (
                ExternalData::External {
                    per_tensor,
                    location,
                    threshold,
                    align,
                },
                _,
            ) => {
                if nbytes < *threshold {
                    return Ok(inline);
                }
                if *per_tensor {
                    (self.tensor_file_name(name), 1)
                } else {
                    match location {
                        Some(l) => (l.clone(), *align),
                        None => (self.default_location()?, *align),
                    }
                }
            }
        };
        let i = self.ext_file(&location)?;
        let f = &mut self.files[i].1;
        let offset = if align > 1 {
            f.len.div_ceil(align) * align
        } else {
            f.len
        };
        Ok(Placement {
            external: true,
            location,
            offset,
            nbytes,
        })
    }

    fn default_location(&self) -> Result<String> {
        let dest = self.dest.as_ref().ok_or_else(|| {
            Error::from(ErrorKind::Unsupported(
                "external data needs the document's path (write to a file)".into(),
            ))
        })?;
        let name = dest
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| invalid(format!("{} has no file name", dest.display())))?;
        Ok(format!("{name}.{}.data", self.tag))
    }

    fn tensor_file_name(&mut self, name: &str) -> String {
        let base = if safe_file_name(name) {
            name.to_string()
        } else {
            format!("tensor_{}", self.tensors - 1)
        };
        let n = self.names.entry(base.clone()).or_insert(0);
        *n += 1;
        let doc = self
            .dest
            .as_ref()
            .and_then(|d| d.file_name())
            .and_then(|n| n.to_str())
            .unwrap_or("model");
        let base = if *n == 1 { base } else { format!("{base}.{n}") };
        format!("{doc}.{}.{base}", self.tag)
    }

    /// The external file named `location`, created (empty) the first time.
    fn ext_file(&mut self, location: &str) -> Result<usize> {
        if let Some(&i) = self.by_location.get(location) {
            return Ok(i);
        }
        if !safe_relative(location) {
            return Err(invalid(format!(
                "external data location {location:?} is not a file name in the document's folder"
            )));
        }
        let dest = self.dest.as_ref().ok_or_else(|| {
            Error::from(ErrorKind::Unsupported(
                "external data needs the document's path (write to a file)".into(),
            ))
        })?;
        let dir = dest.parent().unwrap_or_else(|| Path::new("."));
        let path = dir.join(location);
        in_folder(dir, location).map_err(|e| e.in_file(&path))?;
        if path == *dest {
            return Err(invalid(format!(
                "external data location {location:?} is the document itself"
            )));
        }
        let file = AtomicFile::create(&path).map_err(|e| e.in_file(&path))?;
        self.files
            .push((location.to_string(), ExtFile { file, len: 0 }));
        let i = self.files.len() - 1;
        self.by_location.insert(location.to_string(), i);
        Ok(i)
    }

    /// Writes one item of the repeated field `number`: `header` (the item's message
    /// without its payload) and, when `placement` is inline, the payload as field
    /// `payload_field` (length-delimited); else the payload goes to its external file at
    /// its offset and `header` must say where. `unit` > 1 swaps the bytes of every
    /// `unit`-sized element on the way (a big-endian tensor written little-endian).
    #[allow(clippy::too_many_arguments)]
    pub fn item(
        &mut self,
        number: u32,
        header: &[u8],
        payload_field: Option<u32>,
        placement: &Placement,
        data: Payload<'_>,
        unit: usize,
        what: &str,
    ) -> Result<()> {
        let n = placement.nbytes;
        if placement.external {
            let i = self.ext_file(&placement.location)?;
            {
                let f = &mut self.files[i].1;
                tensorfmt_core::output::fault::check(tensorfmt_core::output::fault::Op::Write)
                    .map_err(|e| Error::from(e).in_file(f.file.dest()))?;
                let file = f.file.file();
                let mut w = std::io::BufWriter::with_capacity(1 << 20, file);
                w.seek(SeekFrom::Start(placement.offset))?;
                data.write_swapped_to(&mut w, n, unit, what)?;
                w.flush()?;
                f.len = f.len.max(placement.offset + n);
            }
            let mut h = Vec::with_capacity(header.len() + 10);
            protobuf::put_len_header(&mut h, number, header.len() as u64);
            h.extend_from_slice(header);
            return self.raw(&h);
        }
        let Some(pf) = payload_field else {
            return Err(Error::from(ErrorKind::Unsupported(format!(
                "{what}: the schema has no field for inline bytes"
            ))));
        };
        let body = header.len() as u64 + protobuf::len_field_size(pf, n);
        let mut h = Vec::with_capacity(header.len() + 20);
        protobuf::put_len_header(&mut h, number, body);
        h.extend_from_slice(header);
        protobuf::put_len_header(&mut h, pf, n);
        self.raw(&h)?;
        let mut w = std::io::BufWriter::with_capacity(1 << 20, &mut self.out);
        data.write_swapped_to(&mut w, n, unit, what)?;
        w.flush()?;
        drop(w);
        self.pos += n;
        Ok(())
    }

    /// Closes every open message, checks the document's size, flushes it and commits
    /// the external files (the caller commits the document after).
    pub fn finish(self) -> Result<()> {
        for f in self.finish_pending()? {
            commit_external(f)?;
        }
        Ok(())
    }

    /// [`DocWriter::finish`] without committing the external files: they are returned,
    /// written and synced, for the caller to commit ([`commit_external`]) when it has
    /// checked what it needs to (dropped, they are removed).
    pub fn finish_pending(mut self) -> Result<Vec<AtomicFile>> {
        while !self.open.is_empty() {
            self.close()?;
        }
        if self.pos > MAX_MESSAGE {
            return Err(Error::from(ErrorKind::Limit {
                what: "protobuf document size (tensors over 2 GiB need external data)",
                limit: MAX_MESSAGE,
                actual: self.pos,
            }));
        }
        self.out.flush()?;
        let mut out = Vec::with_capacity(self.files.len());
        for (_, f) in self.files {
            let path = f.file.dest().to_path_buf();
            f.file
                .file()
                .set_len(f.len)
                .map_err(|e| Error::from(e).in_file(&path))?;
            out.push(f.file);
        }
        Ok(out)
    }
}

/// Commits an external data file [`DocWriter::finish_pending`] returned, under its own
/// name: a file there already is an error (a save writes over no file).
pub fn commit_external(f: AtomicFile) -> Result<()> {
    let path = f.dest().to_path_buf();
    f.commit_new()
        .map_err(|e| e.in_field(&format!("external data file {}", path.display())))
}

/// A tag for a save's external files when none is given: `{pid}-{random}`.
fn fresh_tag() -> String {
    use std::collections::hash_map::RandomState;
    use std::hash::{BuildHasher, Hasher};
    let mut h = RandomState::new().build_hasher();
    if let Ok(t) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        h.write_u128(t.as_nanos());
    }
    format!("{}-{:016x}", std::process::id(), h.finish())
}

/// Checks that the folders of `location` (a relative path checked by `safe_relative`)
/// under `dir` are folders, not symbolic links: a write stays in the document's folder,
/// as the read side requires of external data.
fn in_folder(dir: &Path, location: &str) -> Result<()> {
    let mut at = dir.to_path_buf();
    let parts: Vec<_> = Path::new(location).components().collect();
    for c in &parts[..parts.len().saturating_sub(1)] {
        at.push(c);
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(invalid(format!(
                    "external data location {location:?} goes through the symbolic link {}: \
                     external data is written in the document's folder only",
                    at.display()
                )))
            }
            Ok(m) if !m.is_dir() => {
                return Err(invalid(format!(
                    "external data location {location:?}: {} is not a folder",
                    at.display()
                )))
            }
            Ok(_) => {}
            Err(e) => return Err(Error::from(e)),
        }
    }
    Ok(())
}

/// Whether `location` is a plain relative path that stays in the document's folder.
fn safe_relative(location: &str) -> bool {
    let p = Path::new(location);
    !location.is_empty()
        && p.is_relative()
        && p.components()
            .all(|c| matches!(c, std::path::Component::Normal(_)))
}

pub use tensorfmt_core::registry::Replacement;

/// The callback of [`rewrite`]: given the writer, an item's bytes and their absolute
/// offset, what to write for it.
pub type ItemFn<'f, 'b> = dyn FnMut(&mut DocWriter<'_>, &[u8], u64) -> Result<ItemAction<'b>> + 'f;

/// What [`rewrite`] does with one item of the tensor field.
pub enum ItemAction<'b> {
    /// Copy the item's bytes as they are.
    Keep,
    /// Write this instead: the item's message without the payload, the payload's field,
    /// where the payload goes, and the payload.
    Write {
        /// The new item's encoded message, payload field excluded.
        header: Vec<u8>,
        /// The field that holds inline bytes.
        payload_field: Option<u32>,
        /// Where the bytes go ([`DocWriter::place`]).
        placement: Placement,
        /// The bytes.
        data: Box<dyn AsRef<[u8]> + 'b>,
    },
}

/// Copies the protobuf document `bytes` to `doc`, field by field, except the message
/// fields along `path` (field numbers from the root), which are copied with their items
/// of field `items` (the last message's repeated field) handed to `item`: given the
/// writer (to place tensors), the item's bytes and their absolute offset, it says what to
/// write. `depth` limits how deep the path goes (checked by the caller's reader already).
pub fn rewrite<'b>(
    doc: &mut DocWriter<'_>,
    bytes: &[u8],
    path: &[u32],
    items: u32,
    item: &mut ItemFn<'_, 'b>,
) -> Result<()> {
    copy_message(doc, bytes, 0, path, items, item)
}

fn copy_message<'b>(
    doc: &mut DocWriter<'_>,
    bytes: &[u8],
    base: u64,
    path: &[u32],
    items: u32,
    item: &mut ItemFn<'_, 'b>,
) -> Result<()> {
    let mut fields = protobuf::fields(bytes, base).peekable();
    while let Some(f) = fields.next() {
        let f = f?;
        let start = (f.offset - base) as usize;
        let end = match fields.peek() {
            Some(Ok(next)) => (next.offset - base) as usize,
            Some(Err(_)) => {
                // Reported on the next turn.
                bytes.len()
            }
            None => bytes.len(),
        };
        let whole = &bytes[start..end.min(bytes.len())];
        match (path.first(), f.value) {
            (Some(&n), Value::Len(b, at)) if n == f.number => {
                doc.open(n)?;
                copy_message(doc, b, at, &path[1..], items, item)?;
                doc.close()?;
            }
            (None, Value::Len(b, at)) if f.number == items => match item(doc, b, at)? {
                ItemAction::Keep => doc.raw(whole)?,
                ItemAction::Write {
                    header,
                    payload_field,
                    placement,
                    data,
                } => {
                    let bytes = (*data).as_ref();
                    doc.item(
                        items,
                        &header,
                        payload_field,
                        &placement,
                        Payload::Bytes(bytes),
                        1,
                        "tensor",
                    )?;
                }
            },
            _ => doc.raw(whole)?,
        }
    }
    Ok(())
}

/// The error of a document whose tensor field is not where the schema says.
pub fn not_found(what: &str) -> Error {
    Error::new(
        ErrorKind::Invalid(format!("{what} not found in the document")),
        Location::default(),
    )
}

/// Where a document format keeps its tensors: the message fields from the root down to
/// the message that holds them (`path`), the repeated field of that message whose items
/// they are (`items`), and the format's name (for errors).
#[derive(Debug, Clone, Copy)]
pub struct TensorField {
    /// The field numbers from the root to the message holding the items.
    pub path: &'static [u32],
    /// The repeated field of the items.
    pub items: u32,
    /// The format's name.
    pub format: &'static str,
}

/// Set on the payload field number a [`MakeItemFn`] returns when that field is a
/// repeated `bytes`/`string` field (ONNX's `string_data`): a string tensor's elements
/// are written there one value each. Other tensors are refused such a field.
pub const REPEATED: u32 = 1 << 31;

/// The item of a tensor placed at a [`Placement`] (see [`DocFormat::item`]).
pub type MakeItemFn = fn(&TensorMeta, &Placement) -> Result<(Vec<u8>, Option<u32>)>;

/// A document format as generated code describes it for writing: where its tensors go,
/// the messages written before them, how a tensor's item is made and how an item's name
/// is read back (for rewriting).
#[derive(Debug, Clone, Copy)]
pub struct DocFormat {
    /// Where the tensors go.
    pub tensors: TensorField,
    /// The messages from the root down to the one holding the items, root first, each
    /// encoded with the fields its `write` options give and without the next one (one
    /// more than `tensors.path` has numbers).
    pub head: fn() -> Result<Vec<Vec<u8>>>,
    /// The item of a tensor placed at a [`Placement`]: its message encoded without the
    /// payload, and the field of the payload when it is inline.
    pub item: MakeItemFn,
    /// The name of the item whose bytes are given (their first byte at an absolute
    /// offset).
    pub name_of: fn(&[u8], u64, &Limits) -> Result<String>,
}

/// The streaming writer of a [`DocFormat`]'s documents: the head messages, then one item
/// per tensor added, payloads inline or in external files as the options say.
pub struct Writer<'a> {
    doc: DocWriter<'a>,
    format: &'static DocFormat,
}

impl<'a> Writer<'a> {
    /// Starts a new document of `format` on `w`: writes its head messages.
    pub fn new(
        w: Box<dyn WriteSeek + 'a>,
        options: &WriteOptions,
        format: &'static DocFormat,
    ) -> Result<Self> {
        let mut doc = DocWriter::new(w, options.external.clone(), options.destination.clone())
            .with_tag(options.save_tag.clone());
        for (i, m) in (format.head)()?.iter().enumerate() {
            doc.raw(m)?;
            if let Some(&n) = format.tensors.path.get(i) {
                doc.open(n)?;
            }
        }
        Ok(Writer { doc, format })
    }
}

impl TensorWriter for Writer<'_> {
    fn add(&mut self, meta: &TensorMeta, data: Payload<'_>) -> Result<()> {
        let f = self.format;
        self.doc.add_tensor(&f.tensors, meta, data, f.item)
    }

    fn finish(self: Box<Self>) -> Result<()> {
        self.doc.finish()
    }
}

/// What an item of the tensor `meta` takes in the document besides its payload, at most
/// (for deciding where it goes before it is encoded): its name, a varint per dimension,
/// and room for the other fields.
pub fn item_overhead(meta: &TensorMeta) -> u64 {
    meta.name.len() as u64 + 11 * meta.shape.len() as u64 + 256
}

/// Refuses the tensors a document of `format` cannot hold: strings, and tensors stored in
/// another order than C (with more than one dimension longer than 1).
pub fn check_writable(meta: &TensorMeta, format: &str) -> Result<()> {
    if meta.dtype == DType::String {
        return Err(Error::from(ErrorKind::Unsupported(format!(
            "writing string tensors to {format}"
        ))));
    }
    if meta.shape.iter().filter(|&&d| d > 1).count() > 1 && meta.order != Order::C {
        return Err(Error::from(ErrorKind::Unsupported(format!(
            "{format} stores C-order tensors only"
        ))));
    }
    Ok(())
}

impl DocWriter<'_> {
    /// Appends the tensor `meta` (bytes `data`) as an item of `field`: refused when the
    /// format cannot hold it ([`check_writable`]), placed ([`DocWriter::place`]), its
    /// message made by `item`, and its bytes streamed inline or to its external file,
    /// swapped to little-endian when they are big-endian.
    pub fn add_tensor(
        &mut self,
        field: &TensorField,
        meta: &TensorMeta,
        data: Payload<'_>,
        item: MakeItemFn,
    ) -> Result<()> {
        if meta.dtype == DType::String {
            return self.add_strings(field, meta, data, item);
        }
        check_writable(meta, field.format)?;
        let nbytes = meta.nbytes()?;
        let place = self.place(&meta.name, nbytes, None, item_overhead(meta))?;
        let (header, payload) = item(meta, &place)?;
        if payload.is_some_and(|p| p & REPEATED != 0) {
            return Err(Error::from(ErrorKind::Unsupported(format!(
                "{} elements in a repeated bytes field of {}",
                meta.dtype, field.format
            )))
            .in_entry(&meta.name));
        }
        let unit = if meta.byte_order == ByteOrder::Big {
            meta.dtype.swap_unit().unwrap_or(1)
        } else {
            1
        };
        self.item(
            field.items,
            &header,
            payload,
            &place,
            data,
            unit,
            &meta.name,
        )
    }
}

impl DocWriter<'_> {
    /// Appends the string tensor `meta` (its elements in `data`, each a u64-LE length and
    /// the bytes) as an item of `field`, always inline: its message made by `item`, whose
    /// payload field must be a repeated bytes field ([`REPEATED`]), holding one value per
    /// element (as onnx's `numpy_helper.from_array` writes `string_data`).
    fn add_strings(
        &mut self,
        field: &TensorField,
        meta: &TensorMeta,
        data: Payload<'_>,
        item: MakeItemFn,
    ) -> Result<()> {
        let mut read = Vec::new();
        let bytes: &[u8] = match data {
            Payload::Bytes(b) => b,
            Payload::Reader(r) => {
                r.take(MAX_MESSAGE).read_to_end(&mut read)?;
                &read
            }
        };
        let place = Placement {
            external: false,
            location: String::new(),
            offset: 0,
            nbytes: bytes.len() as u64,
        };
        self.tensors += 1;
        let (header, payload) = item(meta, &place)?;
        let Some(number) = payload.filter(|p| p & REPEATED != 0).map(|p| p & !REPEATED) else {
            return Err(Error::from(ErrorKind::Unsupported(format!(
                "writing string tensors to {}: its schema gives them no repeated bytes field",
                field.format
            )))
            .in_entry(&meta.name));
        };
        // The bytes must hold exactly the shape's number of elements.
        let numel = tensorfmt_core::tensor::numel(&meta.shape)?;
        let (mut pos, mut count) = (0usize, 0u64);
        while pos < bytes.len() {
            let len = bytes
                .get(pos..pos + 8)
                .and_then(|b| usize::try_from(u64::from_le_bytes(b.try_into().ok()?)).ok())
                .and_then(|n| (pos + 8).checked_add(n))
                .filter(|&end| end <= bytes.len());
            let Some(end) = len else {
                return Err(Error::from(ErrorKind::Invalid(format!(
                    "string element {count} is cut at byte {pos} of {}",
                    bytes.len()
                )))
                .in_entry(&meta.name));
            };
            pos = end;
            count += 1;
        }
        if count != numel {
            return Err(Error::from(ErrorKind::SizeMismatch(format!(
                "a string tensor of shape {:?} holds {count} strings, {numel} expected",
                meta.shape
            )))
            .in_entry(&meta.name));
        }
        let mut body = header;
        protobuf::put_elements(
            &mut body,
            number,
            protobuf::Holder::Strings,
            meta.dtype,
            bytes,
        )
        .map_err(|e| e.in_entry(&meta.name))?;
        let mut h = Vec::with_capacity(body.len() + 10);
        protobuf::put_len_header(&mut h, field.items, body.len() as u64);
        h.extend_from_slice(&body);
        self.raw(&h)
    }
}

/// Rewrites the document `src` of `format` to `w` ([`rewrite`]): every field is copied as
/// it is, except the items of `format.tensors` whose name (`format.name_of`) `replace`
/// returns a replacement for, written as `format.item` makes them,
/// where `options.external` places them (a replacement may keep the external file its
/// tensor came from). Returns the external files written, synced, for the caller to
/// commit before the document. Errors: replacements the format cannot hold, big-endian
/// ones, bytes that are not the replacement's size (naming the tensor), and those of the
/// document and of writing; every error is given `src`'s path.
pub fn rewrite_doc<'a, 'b>(
    src: &Source,
    w: Box<dyn WriteSeek + 'a>,
    options: &WriteOptions,
    limits: &Limits,
    replace: &mut dyn FnMut(&str) -> Result<Option<Replacement<'b>>>,
    format: &DocFormat,
) -> Result<Vec<AtomicFile>> {
    let (field, item) = (&format.tensors, format.item);
    let name_of = |b: &[u8], at: u64| (format.name_of)(b, at, limits);
    let in_file = |e: Error| src.in_file(e);
    let whole = src.whole().map_err(in_file)?;
    let mut doc = DocWriter::new(w, options.external.clone(), options.destination.clone())
        .with_tag(options.save_tag.clone());
    let mut each = |doc: &mut DocWriter<'_>, b: &[u8], at: u64| -> Result<ItemAction<'b>> {
        let name = name_of(b, at)?;
        let Some(r) = replace(&name)? else {
            return Ok(ItemAction::Keep);
        };
        check_writable(&r.meta, field.format)?;
        if r.meta.byte_order == ByteOrder::Big && r.meta.dtype.swap_unit().unwrap_or(1) > 1 {
            return Err(Error::from(ErrorKind::Unsupported(
                "big-endian replacement tensors".to_string(),
            ))
            .in_entry(&name));
        }
        let nbytes = r.meta.nbytes()?;
        let given = (*r.data).as_ref().len();
        if given as u64 != nbytes {
            return Err(Error::from(ErrorKind::SizeMismatch(format!(
                "{nbytes} bytes expected, {given} given"
            )))
            .in_entry(&name));
        }
        let place = doc.place(
            &name,
            nbytes,
            r.keep_location.as_deref(),
            item_overhead(&r.meta),
        )?;
        let (header, payload_field) = item(&r.meta, &place)?;
        Ok(ItemAction::Write {
            header,
            payload_field,
            placement: place,
            data: r.data,
        })
    };
    rewrite(&mut doc, &whole, field.path, field.items, &mut each).map_err(in_file)?;
    doc.finish_pending().map_err(in_file)
}
