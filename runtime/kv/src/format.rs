//! What every key-value format's generated module needs besides its mapping: reading a
//! file of records with the format's `Record` layout, the streaming writer of such files,
//! and the detector and record list of a database folder read by a named backend.
//!
//! Generated code passes these the format's own functions (its `Record` reader, its
//! record writer, its `encode_parts`), so that the loops are written once here.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tensorfmt_core::cursor::Cursor;
use tensorfmt_core::db::{EncodeFn, Record};
use tensorfmt_core::error::{Error, ErrorKind, Result};
use tensorfmt_core::registry::{Payload, TensorWriter, WriteSeek};

use tensorfmt_core::source::{check_range, RandomAccess, Source};
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

/// How far into a file [`detect_records`] reads: records are read until one would need a
/// byte past the first 128 KiB (and 4 KiB beyond, so that a record starting near the end
/// of the first 64 KiB reads whole).
pub const DETECT_PREFIX: u64 = 132 << 10;

/// True when `src` starts as a file of records does: `records` (the format's reader of a
/// whole file, [`read_records`]) reads every record it meets until one would need a byte
/// past [`DETECT_PREFIX`], or the end of the file, at least one record whole, with keys of
/// at most 64 KiB. Nothing past the prefix is read and no key longer than 64 KiB is
/// copied, whatever the file's size (a 1 GiB checkpoint is refused after its first bytes,
/// not walked as records); each value is checked to lie inside the file.
pub fn detect_records(
    src: &Source,
    limits: &Limits,
    records: fn(&Source, &Limits) -> Result<Vec<Record>>,
) -> bool {
    let len = src.data().len();
    if len == 0 {
        return false;
    }
    let readable = DETECT_PREFIX.min(len);
    // The map's bytes shared; a stream's first bytes read (at most the prefix).
    let head = match src.bytes() {
        Some(b) => Head::Shared(b.clone(), readable as usize),
        None => {
            let mut v = vec![0u8; readable as usize];
            if src.data().read_exact_at(0, &mut v).is_err() {
                return false;
            }
            Head::Read(v)
        }
    };
    let past = Arc::new(AtomicBool::new(false));
    let prefix = Prefix {
        head,
        len,
        past: past.clone(),
    };
    let bounded = Source::from_random_access(Box::new(prefix), src.path().map(Into::into));
    let limits = Limits {
        max_header_bytes: limits.max_header_bytes.min(64 << 10),
        ..limits.clone()
    };
    match records(&bounded, &limits) {
        Ok(r) => !r.is_empty(),
        // A record reaching past the prefix: those before it read (a key is at most 64 KiB
        // and the prefix twice that, so the first record always ends inside it).
        Err(_) => past.load(Ordering::Relaxed),
    }
}

/// The first bytes of a file of `len` bytes: reads past them fail (and say so in `past`),
/// while value ranges are still checked against the whole file.
struct Prefix {
    head: Head,
    len: u64,
    past: Arc<AtomicBool>,
}

impl RandomAccess for Prefix {
    fn len(&self) -> u64 {
        self.len
    }

    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        check_range(offset, buf.len() as u64, self.len)?;
        let head = match &self.head {
            Head::Shared(b, n) => &b.as_bytes()[..*n],
            Head::Read(v) => v,
        };
        if let Err(e) = check_range(offset, buf.len() as u64, head.len() as u64) {
            self.past.store(true, Ordering::Relaxed);
            return Err(e);
        }
        let at = offset as usize;
        buf.copy_from_slice(&head[at..at + buf.len()]);
        Ok(())
    }
}

/// The bytes of a [`Prefix`]: the first `n` of a map or buffer, or those read of a stream.
enum Head {
    Shared(tensorfmt_core::source::Bytes, usize),
    Read(Vec<u8>),
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
