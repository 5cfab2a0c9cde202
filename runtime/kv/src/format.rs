//! What every key-value format's generated module needs besides its mapping: reading a
//! file of records with the format's `Record` layout, the streaming writer of such files,
//! and the detector and record list of a database folder read by a named backend.
//!
//! Generated code passes these the format's own functions (its `Record` reader, its
//! record writer, its `encode_parts`), so that the loops are written once here.

use tensorfmt_core::cursor::Cursor;
use tensorfmt_core::db::{EncodeFn, Record};
use tensorfmt_core::error::{Error, ErrorKind, Result};
use tensorfmt_core::registry::{Payload, TensorWriter, WriteSeek};
use tensorfmt_core::source::{RandomAccess, Source};
use tensorfmt_core::tensor::{ByteOrder, TensorMeta, WriteOptions};
use tensorfmt_core::Limits;

/// Reads one record at the cursor: its key, and where its value is (`(offset, len)`).
pub type ReadRecordFn = fn(&mut Cursor<'_>, &Limits) -> Result<(Vec<u8>, (u64, u64))>;

/// Writes one record (key, value); returns the bytes written.
pub type WriteRecordFn = fn(&mut dyn std::io::Write, &[u8], &[u8]) -> Result<u64>;

/// Every record of a file of records, in file order, each read by `read` until the end
/// of the source; an error names the record (`record 3`) where one does not read. At
/// most `limits.max_tensors × 1024` records.
pub fn read_records(src: &Source, limits: &Limits, read: ReadRecordFn) -> Result<Vec<Record>> {
    let mut c = Cursor::new(src.data(), src.location());
    let mut out = Vec::new();
    let most = limits.max_tensors.saturating_mul(1024);
    while !c.at_end() {
        let (key, (offset, len)) =
            read(&mut c, limits).map_err(|e| e.in_entry(format!("record {}", out.len())))?;
        out.push(Record { key, offset, len });
        if out.len() as u64 > most {
            return Err(Error::from(ErrorKind::Limit {
                what: "records",
                limit: most,
                actual: out.len() as u64,
            }));
        }
    }
    Ok(out)
}

/// How far into a file [`detect_records`] looks for the records it checks: those that
/// start in the first 64 KiB.
pub const DETECT_PREFIX: u64 = 64 << 10;

/// True when `src` starts as a file of records does: every record that starts in its first
/// [`DETECT_PREFIX`] bytes reads with `read` (at least one), each key at most
/// `DETECT_PREFIX` bytes, each value inside the file. A bounded prefix is read and no key
/// longer than it is copied, whatever the file's size (a 1 GiB checkpoint is refused
/// after its first bytes, not walked as records); the index ([`read_records`]) reads the
/// rest.
pub fn detect_records(src: &Source, limits: &Limits, read: ReadRecordFn) -> bool {
    let len = src.data().len();
    if len == 0 {
        return false;
    }
    let limits = Limits {
        max_header_bytes: limits.max_header_bytes.min(DETECT_PREFIX),
        ..limits.clone()
    };
    // A record starting in the prefix may end past it: its key (at most the prefix) and
    // its fixed fields are readable, nothing further.
    let prefix = Prefix {
        inner: src.data(),
        len,
        readable: (2 * DETECT_PREFIX + 4096).min(len),
    };
    let mut c = Cursor::new(&prefix, src.location());
    let mut any = false;
    while c.pos() < DETECT_PREFIX.min(len) {
        if read(&mut c, &limits).is_err() {
            return false;
        }
        any = true;
    }
    any
}

/// A source of `len` bytes of which only the first `readable` may be read: value ranges
/// are checked against the whole file while nothing past the prefix is touched.
struct Prefix<'a> {
    inner: &'a dyn RandomAccess,
    len: u64,
    readable: u64,
}

impl RandomAccess for Prefix<'_> {
    fn len(&self) -> u64 {
        self.len
    }

    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        tensorfmt_core::source::check_range(offset, buf.len() as u64, self.readable)?;
        self.inner.read_exact_at(offset, buf)
    }
}

/// A streaming writer of a file of records: each tensor added becomes the records
/// `encode` makes of it (at most `split` elements each), written by `write` as they come.
pub struct RecordWriter<'a> {
    w: Box<dyn WriteSeek + 'a>,
    split: Option<u64>,
    write: WriteRecordFn,
    encode: EncodeFn,
}

impl<'a> RecordWriter<'a> {
    /// A writer on `w`, splitting tensors as `options.chunk_elements` says.
    pub fn new(
        w: Box<dyn WriteSeek + 'a>,
        options: &WriteOptions,
        write: WriteRecordFn,
        encode: EncodeFn,
    ) -> Self {
        RecordWriter {
            w,
            split: options.chunk_elements,
            write,
            encode,
        }
    }
}

impl TensorWriter for RecordWriter<'_> {
    fn add(&mut self, meta: &TensorMeta, data: Payload<'_>) -> Result<()> {
        let mut owned = Vec::new();
        let bytes: &[u8] = match data {
            Payload::Bytes(b) => b,
            Payload::Reader(r) => {
                std::io::Read::read_to_end(r, &mut owned)?;
                &owned
            }
        };
        if meta.byte_order == ByteOrder::Big && meta.dtype.swap_unit().unwrap_or(1) > 1 {
            return Err(Error::from(ErrorKind::Unsupported(
                "big-endian tensors (write them little-endian)".to_string(),
            )));
        }
        let (w, write) = (&mut self.w, self.write);
        (self.encode)(meta, bytes, self.split, &mut |k, v| {
            write(w, k, v).map(|_| ())
        })
    }

    fn finish(mut self: Box<Self>) -> Result<()> {
        std::io::Write::flush(&mut self.w)?;
        Ok(())
    }
}

/// True when `src` is a database folder whose records the backend `backend` read.
pub fn is_backend(src: &Source, backend: &str) -> bool {
    src.records().is_some_and(|r| r.backend == backend)
}

/// The records of `src`, a database folder read by the backend `backend`; an error when
/// it is anything else.
pub fn backend_records<'s>(src: &'s Source, backend: &str) -> Result<&'s [Record]> {
    src.records()
        .filter(|r| r.backend == backend)
        .map(|r| r.records.as_slice())
        .ok_or_else(|| {
            Error::from(ErrorKind::Invalid(format!(
                "not a database read by the {backend} backend"
            )))
        })
}

/// The writer constructor of database formats written as folders: they have no streaming
/// writer on one file (a `Saver` opens the folder through the format's `DbDesc`).
pub fn folder_writer<'a>(
    _w: Box<dyn WriteSeek + 'a>,
    _options: &WriteOptions,
) -> Result<Box<dyn TensorWriter + 'a>> {
    Err(Error::from(ErrorKind::Unsupported(
        "a database folder is written through its DbDesc (Saver opens it)".to_string(),
    )))
}
