//! A tensor's bytes inside a zip member ([`location`]), read by the core through
//! [`Encoded`]: stored members viewed in place or pushed with their CRC-32 checked in the
//! same pass, compressed ones inflated and checked as they stream.

use std::io::Read;
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
        read_member(src, info, self.part(part)?, skip, len, sink, opts)
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

fn read_member(
    src: &Source,
    info: &TensorInfo,
    member: &ZipMember,
    skip: u64,
    len: u64,
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
