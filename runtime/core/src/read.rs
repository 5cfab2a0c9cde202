//! Reading tensor payloads into sinks: zero-copy views where the bytes lie plain in
//! memory, chunked reads otherwise; bytes a container engine encodes
//! ([`DataLocation::Encoded`]: zip members, protobuf fields) are read by that engine.

use crate::error::{Error, ErrorKind, Result};
use crate::limits::Limits;
use crate::sink::{Flow, Sink};
use crate::source::{check_range, Source};
use crate::tensor::{DataLocation, TensorInfo};

/// How payloads are read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadOptions {
    /// Check the CRC-32 of zip members (default true). Stored members viewed zero-copy are
    /// checksummed over their whole content before the view is offered; a stored member
    /// of a map is checksummed the first time it is read, not again for its other views.
    pub verify_checksums: bool,
    /// Largest chunk pushed to a sink, in bytes (default 4 MiB).
    pub chunk_size: usize,
    /// Limits applied while reading (decompression bounds).
    pub limits: Limits,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions {
            verify_checksums: true,
            chunk_size: 4 << 20,
            limits: Limits::default(),
        }
    }
}

/// Largest piece checksummed and then pushed in one step when bytes are checksummed as
/// they pass (a stored zip member's CRC-32): small enough to be read from the cache by
/// the copy.
pub const CHECKED_PIECE: usize = 256 << 10;

/// Reads one tensor's bytes into `sink`.
///
/// Calls [`Sink::begin`]; returns its answer at once if it is [`Flow::Skip`] or
/// [`Flow::Stop`]. Otherwise, when the bytes lie plain in memory (`src.bytes()` and a
/// plain range or a stored zip member) offers them with [`Sink::view`], and if that is
/// declined (or the bytes are not in memory) pushes them with [`Sink::chunk`] in pieces of
/// at most `opts.chunk_size` bytes. Bytes an engine encodes are read by it
/// ([`crate::tensor::Encoded::read`]: the zip engine streams compressed members and checks
/// their CRC-32). Returns what [`Sink::end`] returns.
///
/// Buffers are bounded by the tensor's size (and, for compressed content, by the
/// compressed size), never by `opts.chunk_size` alone. Errors name the tensor as their
/// entry and the source's file.
pub fn read_tensor(
    src: &Source,
    info: &TensorInfo,
    sink: &mut dyn Sink,
    opts: &ReadOptions,
) -> Result<Flow> {
    read_inner(src, info, sink, opts).map_err(|e| locate(e, src, info))
}

/// Reads every tensor of `infos` into `sink`, in order, honouring [`Flow::Skip`] (from
/// `begin`) and [`Flow::Stop`] (from `begin` or `end`).
pub fn read_all(
    src: &Source,
    infos: &[TensorInfo],
    sink: &mut dyn Sink,
    opts: &ReadOptions,
) -> Result<()> {
    for info in infos {
        if read_tensor(src, info, sink, opts)? == Flow::Stop {
            break;
        }
    }
    Ok(())
}

/// Names the tensor (as the entry) and the file in `e`. An entry already set by a lower
/// layer (a zip member's name) is kept alongside the tensor's name.
fn locate(mut e: Error, src: &Source, info: &TensorInfo) -> Error {
    match e.location.entry.take() {
        Some(entry) if entry != info.name => {
            e.location.entry = Some(format!("{} in {entry}", info.name));
        }
        _ => e.location.entry = Some(info.name.clone()),
    }
    src.in_file(e)
}

fn read_inner(
    src: &Source,
    info: &TensorInfo,
    sink: &mut dyn Sink,
    opts: &ReadOptions,
) -> Result<Flow> {
    match sink.begin(info)? {
        Flow::Continue => {}
        other => return Ok(other),
    }
    read_location(src, info, &info.location, sink, opts)?;
    sink.end(info)
}

/// Pushes the bytes of one piece to the sink it wraps, as chunks (no views: the tensor
/// is made of several).
struct PieceSink<'a> {
    inner: &'a mut dyn Sink,
}

impl Sink for PieceSink<'_> {
    fn begin(&mut self, _: &TensorInfo) -> Result<Flow> {
        Ok(Flow::Continue)
    }
    fn chunk(&mut self, bytes: &[u8]) -> Result<()> {
        self.inner.chunk(bytes)
    }
    fn end(&mut self, _: &TensorInfo) -> Result<Flow> {
        Ok(Flow::Continue)
    }
}

/// Reads the bytes at `location` (of `info`) into `sink`, between its `begin` and `end`.
pub(crate) fn read_location(
    src: &Source,
    info: &TensorInfo,
    location: &DataLocation,
    sink: &mut dyn Sink,
    opts: &ReadOptions,
) -> Result<()> {
    match location {
        DataLocation::Pieces(pieces) if pieces.len() == 1 => {
            read_location(src, info, &pieces[0], sink, opts)?
        }
        DataLocation::Pieces(pieces) => {
            let mut s = PieceSink { inner: sink };
            for (i, p) in pieces.iter().enumerate() {
                read_location(src, info, p, &mut s, opts)
                    .map_err(|e| e.in_field(&format!("piece {i}")))?;
            }
        }
        DataLocation::Range { offset, len } => read_range(src, info, *offset, *len, sink, opts)?,
        DataLocation::Encoded {
            content,
            part,
            skip,
            len,
        } => content.read(src, info, *part, (*skip, *len), sink, opts)?,
        DataLocation::External { path, offset, len } => {
            let bytes = src.external(path)?;
            offer(&bytes, info, *offset, *len, sink, opts)
                .map_err(|e| e.in_field(&format!("external file '{path}'")))?;
        }
    }
    Ok(())
}

/// `n` as a `usize`, or an overflow error naming `what`.
pub fn to_usize(n: u64, what: &str) -> Result<usize> {
    usize::try_from(n).map_err(|_| ErrorKind::Overflow(format!("{what} of {n} bytes")).into())
}

/// The chunk size in force (at least 1).
pub fn chunk_size(opts: &ReadOptions) -> usize {
    opts.chunk_size.max(1)
}

/// Offers `memory[start..start + len]` of the source as a view, then pushes it in chunks
/// if declined; false when the source is not in memory.
pub fn view_or_push(
    src: &Source,
    info: &TensorInfo,
    start: u64,
    len: u64,
    sink: &mut dyn Sink,
    opts: &ReadOptions,
) -> Result<bool> {
    let Some(bytes) = src.bytes() else {
        return Ok(false);
    };
    offer(bytes, info, start, len, sink, opts)?;
    Ok(true)
}

/// Offers `bytes[start..start + len]` (checked) as a view, then pushes it in chunks if
/// declined.
pub fn offer(
    bytes: &crate::source::Bytes,
    info: &TensorInfo,
    start: u64,
    len: u64,
    sink: &mut dyn Sink,
    opts: &ReadOptions,
) -> Result<()> {
    check_range(start, len, bytes.as_bytes().len() as u64)?;
    let start = to_usize(start, "offset")?;
    let end = start + to_usize(len, "tensor")?;
    if !sink.view(info, bytes, start..end)? {
        let slice = bytes
            .as_bytes()
            .get(start..end)
            .ok_or_else(|| Error::from(ErrorKind::SizeMismatch("tensor range".into())))?;
        for c in slice.chunks(chunk_size(opts)) {
            sink.chunk(c)?;
        }
    }
    Ok(())
}

fn read_range(
    src: &Source,
    info: &TensorInfo,
    offset: u64,
    len: u64,
    sink: &mut dyn Sink,
    opts: &ReadOptions,
) -> Result<()> {
    let data = src.data();
    check_range(offset, len, data.len())?;
    if view_or_push(src, info, offset, len, sink, opts)? {
        return Ok(());
    }
    let cap = (chunk_size(opts) as u64).min(len);
    let mut buf = vec![0u8; to_usize(cap, "chunk")?];
    let mut pos = offset;
    let end = offset + len;
    while pos < end {
        let n = (end - pos).min(cap) as usize;
        let b = &mut buf[..n];
        data.read_exact_at(pos, b)?;
        sink.chunk(b)?;
        pos += n as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::sink::{OwnedSink, TensorData, ViewSink};
    use crate::tensor::{ByteOrder, Order};

    /// Records every call.
    #[derive(Default)]
    struct Recorder {
        begin: Flow,
        take_view: bool,
        views: usize,
        chunks: Vec<Vec<u8>>,
        ends: usize,
    }

    impl Sink for Recorder {
        fn begin(&mut self, _info: &TensorInfo) -> Result<Flow> {
            Ok(self.begin)
        }
        fn view(
            &mut self,
            _info: &TensorInfo,
            _bytes: &crate::source::Bytes,
            _range: std::ops::Range<usize>,
        ) -> Result<bool> {
            self.views += 1;
            Ok(self.take_view)
        }
        fn chunk(&mut self, bytes: &[u8]) -> Result<()> {
            self.chunks.push(bytes.to_vec());
            Ok(())
        }
        fn end(&mut self, _info: &TensorInfo) -> Result<Flow> {
            self.ends += 1;
            Ok(Flow::Continue)
        }
    }

    fn range_info(name: &str, offset: u64, len: u64) -> TensorInfo {
        TensorInfo::dense(
            name,
            DType::U8,
            vec![len],
            Order::C,
            ByteOrder::Little,
            DataLocation::Range { offset, len },
        )
        .unwrap()
    }

    fn file_bytes() -> Vec<u8> {
        (0u8..100).collect()
    }

    #[test]
    fn range_from_memory_is_viewed() {
        let src = Source::from_bytes(file_bytes());
        let info = range_info("t", 10, 20);
        let mut s = ViewSink::default();
        read_tensor(&src, &info, &mut s, &ReadOptions::default()).unwrap();
        let t = &s.tensors[0];
        assert!(matches!(t.data, TensorData::Mapped { .. }));
        assert_eq!(t.data.as_bytes(), &file_bytes()[10..30]);
    }

    #[test]
    fn declined_view_falls_back_to_chunks() {
        let src = Source::from_bytes(file_bytes());
        let info = range_info("t", 10, 20);
        let mut r = Recorder::default();
        let opts = ReadOptions {
            chunk_size: 7,
            ..Default::default()
        };
        read_tensor(&src, &info, &mut r, &opts).unwrap();
        assert_eq!(r.views, 1);
        assert_eq!(
            r.chunks.iter().map(Vec::len).collect::<Vec<_>>(),
            vec![7, 7, 6]
        );
        assert_eq!(r.chunks.concat(), &file_bytes()[10..30]);
        assert_eq!(r.ends, 1);
    }

    #[test]
    fn range_from_stream_is_chunked() {
        let src = Source::from_reader(std::io::Cursor::new(file_bytes())).unwrap();
        let info = range_info("t", 90, 10);
        let mut r = Recorder {
            take_view: true,
            ..Default::default()
        };
        let opts = ReadOptions {
            chunk_size: 4,
            ..Default::default()
        };
        read_tensor(&src, &info, &mut r, &opts).unwrap();
        assert_eq!(r.views, 0);
        assert_eq!(r.chunks.concat(), &file_bytes()[90..]);
        assert_eq!(r.chunks.len(), 3);
    }

    #[test]
    fn out_of_range_names_tensor_and_file() {
        let src = Source::from_bytes(file_bytes()).with_path("dir/f.bin");
        let info = range_info("weights", 90, 20);
        let mut s = OwnedSink::default();
        let e = read_tensor(&src, &info, &mut s, &ReadOptions::default()).unwrap_err();
        assert!(matches!(e.kind, ErrorKind::Truncated { .. }), "{e}");
        assert_eq!(e.location.entry.as_deref(), Some("weights"));
        assert!(e.to_string().contains("f.bin"), "{e}");
        // Nothing was allocated from the bogus length, and the stream path fails too.
        let src = Source::from_reader(std::io::Cursor::new(file_bytes())).unwrap();
        assert!(read_tensor(&src, &info, &mut s, &ReadOptions::default()).is_err());
        assert!(s.tensors.is_empty());
    }

    #[test]
    fn skip_and_stop() {
        let src = Source::from_bytes(file_bytes());
        let infos = vec![range_info("a", 0, 1), range_info("b", 1, 1)];
        let mut r = Recorder {
            begin: Flow::Skip,
            ..Default::default()
        };
        read_all(&src, &infos, &mut r, &ReadOptions::default()).unwrap();
        assert_eq!((r.views, r.chunks.len(), r.ends), (0, 0, 0));
        let mut r = Recorder {
            begin: Flow::Stop,
            ..Default::default()
        };
        assert_eq!(
            read_tensor(&src, &infos[0], &mut r, &ReadOptions::default()).unwrap(),
            Flow::Stop
        );
        let mut s = OwnedSink::default();
        read_all(&src, &infos, &mut s, &ReadOptions::default()).unwrap();
        assert_eq!(s.tensors.len(), 2);
    }

    #[test]
    fn external_ranges_are_views_of_their_own_file() {
        let dir = tempfile::tempdir().unwrap();
        let model = dir.path().join("m.onnx");
        std::fs::write(&model, b"header").unwrap();
        let payload: Vec<u8> = (0..1000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(dir.path().join("w.data"), &payload).unwrap();
        let src = Source::open(&model).unwrap();
        let mut info = range_info("w", 0, 200);
        info.location = DataLocation::External {
            path: "w.data".into(),
            offset: 100,
            len: 200,
        };
        let mut views = ViewSink::default();
        read_tensor(&src, &info, &mut views, &ReadOptions::default()).unwrap();
        assert!(views.tensors[0].data.is_mapped());
        assert_eq!(views.tensors[0].data.as_bytes(), &payload[100..300]);
        let mut owned = OwnedSink::default();
        let opts = ReadOptions {
            chunk_size: 7,
            ..Default::default()
        };
        read_tensor(&src, &info, &mut owned, &opts).unwrap();
        assert_eq!(owned.tensors[0].data.as_bytes(), &payload[100..300]);
        // A range past the file's end, and a path out of the folder: errors naming the
        // tensor, the file and the external file.
        info.location = DataLocation::External {
            path: "w.data".into(),
            offset: 900,
            len: 200,
        };
        let e = read_tensor(&src, &info, &mut OwnedSink::default(), &opts).unwrap_err();
        assert!(matches!(e.kind, ErrorKind::Truncated { .. }), "{e}");
        let text = e.to_string();
        assert!(
            text.contains("m.onnx") && text.contains("'w'") && text.contains("w.data"),
            "{text}"
        );
        info.location = DataLocation::External {
            path: "../w.data".into(),
            offset: 0,
            len: 1,
        };
        let e = read_tensor(&src, &info, &mut OwnedSink::default(), &opts).unwrap_err();
        assert!(matches!(e.kind, ErrorKind::Invalid(_)), "{e}");
    }
}
