//! Reading tensor payloads into sinks: zero-copy views where the bytes lie plain in
//! memory, chunked reads otherwise, zip members streamed and checksummed.

use std::io::Read;

use crate::error::{Error, ErrorKind, Result};
use crate::limits::Limits;
use crate::sink::{Flow, Sink};
use crate::source::{check_range, Source};
use crate::tensor::{DataLocation, TensorInfo};
use crate::zip::{Compression, ZipMember};

/// How payloads are read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadOptions {
    /// Check the CRC-32 of zip members (default true). Stored members viewed zero-copy are
    /// checksummed over their whole content before the view is offered.
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

/// Largest piece checksummed and then pushed in one step when a stored member's CRC-32
/// is checked as its bytes pass: small enough to be read from the cache by the copy.
const CHECKED_PIECE: usize = 256 << 10;

/// Smallest chunk buffer used for compressed content (see [`read_tensor`]).
const MIN_INFLATE_CHUNK: u64 = 32 << 10;

/// Reads one tensor's bytes into `sink`.
///
/// Calls [`Sink::begin`]; returns its answer at once if it is [`Flow::Skip`] or
/// [`Flow::Stop`]. Otherwise, when the bytes lie plain in memory (`src.bytes()` and a
/// plain range or a stored zip member) offers them with [`Sink::view`], and if that is
/// declined (or the bytes are not in memory) pushes them with [`Sink::chunk`] in pieces of
/// at most `opts.chunk_size` bytes. Compressed zip members are streamed through
/// [`crate::zip::member_reader`]: the bytes before the tensor are discarded and, when
/// `opts.verify_checksums`, the bytes after it are drained so that the member's CRC-32 is
/// checked. Returns what [`Sink::end`] returns.
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
    match src.path() {
        Some(p) => e.in_file(p),
        None => e,
    }
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
fn read_location(
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
        DataLocation::ZipMember { member, skip, len } => {
            read_member(src, info, member, *skip, *len, sink, opts)?
        }
        DataLocation::Field {
            offset,
            message_len,
            number,
            elements,
            len,
        } => read_field(
            src,
            *offset,
            *message_len,
            *number,
            *elements,
            *len,
            sink,
            opts,
        )?,
        DataLocation::External { path, offset, len } => {
            let bytes = src.external(path)?;
            offer(&bytes, info, *offset, *len, sink, opts)
                .map_err(|e| e.in_field(&format!("external file '{path}'")))?;
        }
    }
    Ok(())
}

/// `n` as a `usize`, or an overflow error.
fn to_usize(n: u64, what: &str) -> Result<usize> {
    usize::try_from(n).map_err(|_| ErrorKind::Overflow(format!("{what} of {n} bytes")).into())
}

/// The chunk size in force (at least 1).
fn chunk_size(opts: &ReadOptions) -> usize {
    opts.chunk_size.max(1)
}

/// Offers `memory[start..start + len]` of the source as a view, then pushes it in chunks
/// if declined; false when the source is not in memory.
fn view_or_push(
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
fn offer(
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

fn read_member(
    src: &Source,
    info: &TensorInfo,
    member: &ZipMember,
    skip: u64,
    len: u64,
    sink: &mut dyn Sink,
    opts: &ReadOptions,
) -> Result<()> {
    let member_err = |kind: ErrorKind| {
        Error::new(
            kind,
            crate::error::Location::default().with_entry(&member.name),
        )
    };
    match skip.checked_add(len) {
        Some(end) if end <= member.size => {}
        _ => {
            return Err(member_err(ErrorKind::Truncated {
                needed: len,
                available: member.size.saturating_sub(skip),
            }))
        }
    }
    let data = src.data();
    if member.compression == Compression::Stored && src.bytes().is_some() {
        if member.compressed_size != member.size {
            return Err(member_err(ErrorKind::SizeMismatch(format!(
                "stored member records {} bytes compressed and {} uncompressed",
                member.compressed_size, member.size
            ))));
        }
        let data_offset = member.data_offset(data)?;
        check_range(data_offset, member.size, data.len()).map_err(|e| e.in_entry(&member.name))?;
        let whole = data
            .as_slice()
            .and_then(|s| {
                let a = usize::try_from(data_offset).ok()?;
                s.get(a..a.checked_add(usize::try_from(member.size).ok()?)?)
            })
            .ok_or_else(|| member_err(ErrorKind::SizeMismatch("member range".into())))?;
        let check = |actual: u32| {
            if actual == member.crc32 {
                Ok(())
            } else {
                Err(member_err(ErrorKind::Checksum {
                    expected: member.crc32,
                    actual,
                }))
            }
        };
        if opts.verify_checksums && !sink.keeps_views() {
            // One pass: each piece is checksummed just before the sink copies it, while
            // it is still in the cache; the member's bytes around the tensor are
            // checksummed too. A mismatch fails the read once the tensor is pushed.
            let (start, end) = (skip as usize, (skip + len) as usize);
            let mut hasher = crc32fast::Hasher::new();
            hasher.update(&whole[..start]);
            for piece in whole[start..end].chunks(chunk_size(opts).min(CHECKED_PIECE)) {
                hasher.update(piece);
                sink.chunk(piece)?;
            }
            hasher.update(&whole[end..]);
            check(hasher.finalize())?;
            return Ok(());
        }
        if opts.verify_checksums {
            check(crc32fast::hash(whole))?;
        }
        if view_or_push(src, info, data_offset + skip, len, sink, opts)? {
            return Ok(());
        }
    }

    let io = crate::zip::io_to_error;
    let mut reader = crate::zip::member_reader(data, member, &opts.limits)?;
    let mut cap = (chunk_size(opts) as u64).min(len.max(1));
    if member.compression != Compression::Stored {
        cap = cap.min(member.compressed_size.max(MIN_INFLATE_CHUNK));
    }
    let mut buf = vec![0u8; to_usize(cap, "chunk")?];

    // Discard the bytes before the tensor.
    let skipped = std::io::copy(&mut (&mut reader).take(skip), &mut std::io::sink()).map_err(io)?;
    if skipped != skip {
        return Err(member_err(ErrorKind::Truncated {
            needed: skip,
            available: skipped,
        }));
    }
    // The tensor.
    let mut left = len;
    while left > 0 {
        let want = left.min(cap) as usize;
        let n = read_full(&mut reader, &mut buf[..want]).map_err(io)?;
        if n == 0 {
            return Err(member_err(ErrorKind::Truncated {
                needed: len,
                available: len - left,
            }));
        }
        sink.chunk(&buf[..n])?;
        left -= n as u64;
    }
    // The rest, so that the CRC-32 is checked at the end of the content.
    if opts.verify_checksums {
        let mut drain = [0u8; 8192];
        loop {
            match reader.read(&mut drain) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io(e)),
            }
        }
    }
    Ok(())
}

/// Decodes the elements of field `number` of the message at `offset` and pushes them;
/// they must make exactly `len` bytes.
#[allow(clippy::too_many_arguments)]
fn read_field(
    src: &Source,
    offset: u64,
    message_len: u64,
    number: u32,
    elements: crate::protobuf::Elements,
    len: u64,
    sink: &mut dyn Sink,
    opts: &ReadOptions,
) -> Result<()> {
    let data = src.data();
    check_range(offset, message_len, data.len())?;
    let owned;
    let message: &[u8] = match data.as_slice() {
        Some(s) => &s[offset as usize..(offset + message_len) as usize],
        None => {
            let mut v = vec![0u8; to_usize(message_len, "message")?];
            data.read_exact_at(offset, &mut v)?;
            owned = v;
            &owned
        }
    };
    let produced = crate::protobuf::decode_elements(
        message,
        offset,
        number,
        elements,
        chunk_size(opts),
        &mut |b| sink.chunk(b),
    )?;
    if produced != len {
        return Err(ErrorKind::SizeMismatch(format!(
            "field {number} holds {produced} bytes of elements, the tensor needs {len}"
        ))
        .into());
    }
    Ok(())
}

/// Reads until `buf` is full or the stream ends; returns the bytes read.
fn read_full(r: &mut dyn Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::sink::{OwnedSink, TensorData, ViewSink};
    use crate::tensor::{ByteOrder, Order};
    use crate::zip::{ZipIndex, ZipWriter};
    use std::io::Write;

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

    /// A zip holding `a` (stored, 64-aligned) and `b` (deflated), each 16 header bytes
    /// followed by 1000 payload bytes.
    fn zip_file() -> (Vec<u8>, Vec<u8>) {
        let payload: Vec<u8> = (0..1000u32).map(|i| (i * 7 % 251) as u8).collect();
        let mut content = vec![b'H'; 16];
        content.extend_from_slice(&payload);
        let mut w = ZipWriter::new(std::io::Cursor::new(Vec::new()));
        w.start_member("a.npy", Compression::Stored, 64).unwrap();
        w.write_all(&content).unwrap();
        w.start_member("b.npy", Compression::Deflate, 0).unwrap();
        w.write_all(&content).unwrap();
        (w.finish().unwrap().into_inner(), payload)
    }

    fn member_infos(file: &[u8]) -> Vec<TensorInfo> {
        let idx = ZipIndex::read(
            &crate::source::Bytes::Owned(file.into()),
            &Limits::default(),
        )
        .unwrap();
        idx.members()
            .iter()
            .map(|m| {
                let mut i = range_info(m.name.trim_end_matches(".npy"), 0, 1000);
                i.location = DataLocation::ZipMember {
                    member: m.clone(),
                    skip: 16,
                    len: 1000,
                };
                i
            })
            .collect()
    }

    #[test]
    fn zip_members_read_from_memory_and_stream() {
        let (file, payload) = zip_file();
        let infos = member_infos(&file);
        let opts = ReadOptions {
            chunk_size: 100,
            ..Default::default()
        };
        let mem = Source::from_bytes(file.clone());
        let mut s = ViewSink::default();
        read_all(&mem, &infos, &mut s, &opts).unwrap();
        assert!(s.tensors[0].data.is_mapped());
        assert!(!s.tensors[1].data.is_mapped());
        for t in &s.tensors {
            assert_eq!(t.data.as_bytes(), &payload[..], "{}", t.info.name);
        }
        let stream = Source::from_reader(std::io::Cursor::new(file)).unwrap();
        let mut s = OwnedSink::default();
        read_all(&stream, &infos, &mut s, &opts).unwrap();
        for t in &s.tensors {
            assert_eq!(t.data.as_bytes(), &payload[..], "{}", t.info.name);
        }
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

    #[test]
    fn protobuf_fields_are_decoded_into_elements() {
        use crate::protobuf::{put_len_header, put_varint, Elements};
        // A message at offset 3 of the file: field 5 packs four f16 bit patterns as
        // varints (as ONNX's int32_data does).
        let halves = [0x3c00u16, 0xc000, 0x0001, 0x7bff];
        let mut packed = Vec::new();
        for h in halves {
            put_varint(&mut packed, h as u64);
        }
        let mut msg = Vec::new();
        put_len_header(&mut msg, 5, packed.len() as u64);
        msg.extend_from_slice(&packed);
        let mut file = b"abc".to_vec();
        file.extend_from_slice(&msg);
        let want: Vec<u8> = halves.iter().flat_map(|h| h.to_le_bytes()).collect();
        let mut info = TensorInfo::dense(
            "h",
            DType::F16,
            vec![4],
            Order::C,
            ByteOrder::Little,
            DataLocation::Field {
                offset: 3,
                message_len: msg.len() as u64,
                number: 5,
                elements: Elements::Varint { width: 2 },
                len: 8,
            },
        )
        .unwrap();
        for src in [
            Source::from_bytes(file.clone()),
            Source::from_reader(std::io::Cursor::new(file.clone())).unwrap(),
        ] {
            let mut s = OwnedSink::default();
            read_tensor(&src, &info, &mut s, &ReadOptions::default()).unwrap();
            assert_eq!(s.tensors[0].data.as_bytes(), &want[..]);
        }
        // The field holding other than the tensor's bytes: an error naming the tensor.
        if let DataLocation::Field { elements, .. } = &mut info.location {
            *elements = Elements::Varint { width: 1 };
        }
        let e = read_tensor(
            &Source::from_bytes(file),
            &info,
            &mut OwnedSink::default(),
            &ReadOptions::default(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("'h'"), "{e}");
    }

    #[test]
    fn zip_checksums_are_verified() {
        let (file, _) = zip_file();
        let mut infos = member_infos(&file);
        for info in &mut infos {
            if let DataLocation::ZipMember { member, .. } = &mut info.location {
                member.crc32 ^= 1;
            }
        }
        for src in [
            Source::from_bytes(file.clone()).with_path("m.npz"),
            Source::from_reader(std::io::Cursor::new(file.clone()))
                .unwrap()
                .with_path("m.npz"),
        ] {
            for info in &infos {
                let mut s = OwnedSink::default();
                let e = read_tensor(&src, info, &mut s, &ReadOptions::default()).unwrap_err();
                assert!(matches!(e.kind, ErrorKind::Checksum { .. }), "{e}");
                assert!(e.to_string().contains("m.npz"), "{e}");
                assert!(
                    e.location.entry.as_deref().unwrap().contains(&info.name),
                    "{e}"
                );
                let opts = ReadOptions {
                    verify_checksums: false,
                    ..Default::default()
                };
                read_tensor(&src, info, &mut s, &opts).unwrap();
            }
        }
    }

    #[test]
    fn zip_tensor_beyond_member_is_an_error() {
        let (file, _) = zip_file();
        let mut infos = member_infos(&file);
        for info in &mut infos {
            if let DataLocation::ZipMember { skip, .. } = &mut info.location {
                *skip = 17;
            }
        }
        let src = Source::from_bytes(file);
        for info in &infos {
            let mut s = OwnedSink::default();
            let e = read_tensor(&src, info, &mut s, &ReadOptions::default()).unwrap_err();
            assert!(matches!(e.kind, ErrorKind::Truncated { .. }), "{e}");
        }
    }
}
