//! A tensor's bytes inside a zip member ([`location`]), read by the core through
//! [`Encoded`]: stored members viewed in place or pushed with their CRC-32 checked in the
//! same pass, compressed ones inflated and checked as they stream.

use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tensorfmt_core::error::{Error, ErrorKind, Location, Result};
use tensorfmt_core::limits::Limits;
use tensorfmt_core::pattern::Pattern;
use tensorfmt_core::read::{chunk_size, to_usize, view_or_push, ReadOptions, CHECKED_PIECE};
use tensorfmt_core::sink::Sink;
use tensorfmt_core::source::{check_range, RandomAccess, Source};
use tensorfmt_core::tensor::{DataLocation, Encoded, EncodedBytes, TensorInfo};

use crate::{io_to_error, member_reader, Compression, ZipIndex, ZipMember};

/// Smallest chunk buffer used for compressed content.
const MIN_INFLATE_CHUNK: u64 = 32 << 10;

/// The location of `len` bytes of `member`'s content, `skip` bytes into it, where
/// `member` is one of `index`'s members: the tensor holds the index (shared by every
/// tensor of the archive) and the member's position, so nothing is allocated or copied.
/// A member of another index is located in an index of its own.
pub fn location(index: &Arc<ZipIndex>, member: &ZipMember, skip: u64, len: u64) -> DataLocation {
    match index.position(member) {
        Some(i) => EncodedBytes(index.clone()).window(i as u64, skip, len),
        None => EncodedBytes::new(ZipIndex::of_one(member.clone())).window(0, skip, len),
    }
}

/// The zip member a tensor's bytes are in, and the window of its content (skip, len),
/// when they are in one.
pub fn member_of(location: &DataLocation) -> Option<(&ZipMember, u64, u64)> {
    let (index, part, skip, len) = location.encoded::<ZipIndex>()?;
    Some((index.members().get(usize::try_from(part).ok()?)?, skip, len))
}

/// The bytes of `src` indexed as a zip archive ([`ZipIndex::read`]), made once and shared
/// by every later call with the same `limits.max_entries` (format detection and indexing
/// ask for it several times).
pub fn index(src: &Source, limits: &Limits) -> Result<Arc<ZipIndex>> {
    src.memo(limits.max_entries, |s| ZipIndex::read(s.data(), limits))
}

/// Which members a detection rule asks to match its pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Members {
    /// Every member (an archive without members passes).
    All,
    /// At least one member.
    Any,
    /// No member.
    None,
}

/// True when `src` is a zip archive (it starts like one and indexes) whose member names
/// pass every rule: `(which members, entry-name pattern)`. The archive is indexed once
/// and kept by the source, for the indexer that follows.
pub fn members_match(src: &Source, limits: &Limits, rules: &[(Members, &str)]) -> bool {
    if !crate::starts_like_zip(src.data()) {
        return false;
    }
    let Ok(zip) = index(src, limits) else {
        return false;
    };
    rules.iter().all(|&(which, pattern)| {
        let Ok(pattern) = Pattern::new(pattern) else {
            return false;
        };
        let mut names = zip.members().iter().map(|m| pattern.is_match(&m.name));
        match which {
            Members::All => names.all(|m| m),
            Members::Any => names.any(|m| m),
            Members::None => !names.any(|m| m),
        }
    })
}

impl ZipIndex {
    /// Member number `part`.
    fn part(&self, part: u64) -> Result<&ZipMember> {
        usize::try_from(part)
            .ok()
            .and_then(|i| self.members().get(i))
            .ok_or_else(|| {
                Error::from(ErrorKind::Invalid(format!(
                    "no member {part} in an archive of {}",
                    self.members().len()
                )))
            })
    }
}

impl Encoded for ZipIndex {
    fn plain_offset(&self, src: &dyn RandomAccess, part: u64) -> Result<Option<u64>> {
        let member = self.part(part)?;
        if member.compression != Compression::Stored {
            return Ok(None);
        }
        member.data_offset(src).map(Some)
    }

    fn compressed_len(&self, part: u64) -> Option<u64> {
        let member = self.part(part).ok()?;
        (member.compression != Compression::Stored).then_some(member.compressed_size)
    }

    fn read(
        &self,
        src: &Source,
        info: &TensorInfo,
        part: u64,
        (skip, len): (u64, u64),
        sink: &mut dyn Sink,
        opts: &ReadOptions,
    ) -> Result<()> {
        let member = self.part(part)?;
        let checked = (&self.checked, self.members().len());
        read_member(src, info, (member, part), checked, (skip, len), sink, opts)
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn same(&self, other: &dyn Encoded) -> bool {
        other
            .as_any()
            .downcast_ref::<ZipIndex>()
            .is_some_and(|o| std::ptr::eq(o, self) || o == self)
    }
}

/// The members of an index whose CRC-32 was checked in full ([`ZipIndex`]'s `checked`):
/// a flag per member, made at the first check. A copy of the index checks again; two
/// indexes compare equal whatever they checked.
#[derive(Default)]
pub(crate) struct Checked(std::sync::OnceLock<Box<[AtomicBool]>>);

impl Checked {
    /// True when member `part` was checked.
    fn is(&self, part: u64) -> bool {
        self.0
            .get()
            .and_then(|f| f.get(usize::try_from(part).ok()?))
            .is_some_and(|f| f.load(Ordering::Relaxed))
    }

    /// Notes that member `part` of `members` members was checked.
    fn set(&self, part: u64, members: usize) {
        let flags = self
            .0
            .get_or_init(|| (0..members).map(|_| AtomicBool::new(false)).collect());
        if let Some(f) = usize::try_from(part).ok().and_then(|i| flags.get(i)) {
            f.store(true, Ordering::Relaxed);
        }
    }
}

impl Clone for Checked {
    fn clone(&self) -> Self {
        Checked::default()
    }
}

impl PartialEq for Checked {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for Checked {}

impl std::fmt::Debug for Checked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Checked")
    }
}

/// Pushes `len` bytes of `member` (number `part` of its index), `skip` bytes into its
/// content, into `sink`. A stored member of a map has its CRC-32 checked in full the first
/// time it is read (`checked`, of the index's `members` members, remembers it), so that
/// many views of one storage hash it once.
fn read_member(
    src: &Source,
    info: &TensorInfo,
    (member, part): (&ZipMember, u64),
    (checked, members): (&Checked, usize),
    (skip, len): (u64, u64),
    sink: &mut dyn Sink,
    opts: &ReadOptions,
) -> Result<()> {
    let member_err =
        |kind: ErrorKind| Error::new(kind, Location::default().with_entry(&member.name));
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
        let verify = opts.verify_checksums && !checked.is(part);
        if verify && !sink.keeps_views() {
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
            checked.set(part, members);
            return Ok(());
        }
        if verify {
            check(crc32fast::hash(whole))?;
            checked.set(part, members);
        }
        if view_or_push(src, info, data_offset + skip, len, sink, opts)? {
            return Ok(());
        }
    }

    let io = io_to_error;
    let mut reader = member_reader(data, member, &opts.limits)?;
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
    use std::io::{Cursor, Write};

    use tensorfmt_core::read::read_tensor;
    use tensorfmt_core::sink::{OwnedSink, ViewSink};
    use tensorfmt_core::{ByteOrder, DType, Order};

    use super::*;
    use crate::ZipWriter;

    /// An archive of one stored member of 4096 bytes, its data from `data_offset`.
    fn archive() -> (Vec<u8>, u64) {
        let mut w = ZipWriter::new(Cursor::new(Vec::new()));
        w.start_member("data/0", Compression::Stored, 64).unwrap();
        w.write_all(&(0..4096u32).map(|i| i as u8).collect::<Vec<_>>())
            .unwrap();
        let bytes = w.finish().unwrap().into_inner();
        let src = Source::from_bytes(bytes.clone());
        let zip = index(&src, &Limits::default()).unwrap();
        let at = zip.members()[0].data_offset(src.data()).unwrap();
        (bytes, at)
    }

    /// Reads the 16 bytes at `skip` of the member as a tensor, into a copy or as a view.
    fn read(src: &Source, skip: u64, views: bool) -> Result<()> {
        let zip = index(src, &Limits::default())?;
        let loc = location(&zip, &zip.members()[0], skip, 16);
        let info = TensorInfo::dense("t", DType::U8, vec![16], Order::C, ByteOrder::Little, loc)?;
        let opts = ReadOptions::default();
        if views {
            read_tensor(src, &info, &mut ViewSink::new(), &opts).map(|_| ())
        } else {
            read_tensor(src, &info, &mut OwnedSink::new(), &opts).map(|_| ())
        }
    }

    /// Many views of one stored member check its CRC-32 once: the first read that checks
    /// it in full marks it, the next ones push their window alone; a damaged member is
    /// never marked, and every read of it fails.
    #[test]
    fn a_member_is_checksummed_once_for_all_its_views() {
        for views in [false, true] {
            let (bytes, _) = archive();
            let src = Source::from_bytes(bytes);
            let zip = index(&src, &Limits::default()).unwrap();
            assert!(!zip.checked.is(0));
            read(&src, 0, views).unwrap();
            assert!(zip.checked.is(0));
            read(&src, 4000, views).unwrap();

            let (mut bytes, at) = archive();
            bytes[at as usize + 100] ^= 1;
            let src = Source::from_bytes(bytes);
            for skip in [0, 200] {
                let e = read(&src, skip, views).unwrap_err();
                assert!(matches!(e.kind, ErrorKind::Checksum { .. }), "{e}");
            }
            assert!(!index(&src, &Limits::default()).unwrap().checked.is(0));
        }
    }
}
