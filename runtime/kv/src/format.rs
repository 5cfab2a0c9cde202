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
use tensorfmt_core::source::Source;
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
