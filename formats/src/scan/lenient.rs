//! The members of a zip archive that the project's zip reader refuses (flag bits, a
//! local header that disagrees with the central directory, two names alike), located
//! as a tolerant reader finds them: the central directory's entries when it can be
//! read, and every local header from the start of the file, their flags, checksums and
//! names not held against each other. Torch's own reader loads such archives, so the
//! scanner must see their pickles. Hand-written with the scanner (see `scan.rs`): a
//! second, deliberately permissive zip parser has no place in the format engines.

use std::collections::BTreeMap;

use crate::{Compression, Limits};
use tensorfmt_runtime::zip::ZipMember;

const LOCAL: &[u8; 4] = b"PK\x03\x04";
const CENTRAL: &[u8; 4] = b"PK\x01\x02";
const EOCD: &[u8; 4] = b"PK\x05\x06";
const LOCATOR64: &[u8; 4] = b"PK\x06\x07";
const EOCD64: &[u8; 4] = b"PK\x06\x06";

/// What the central directory says of a member.
#[derive(Clone, Copy)]
struct Entry {
    method: u16,
    crc: u32,
    csize: u64,
    size: u64,
}

/// A local header.
struct Local<'b> {
    name: &'b [u8],
    flags: u16,
    method: u16,
    crc: u32,
    csize: u64,
    size: u64,
    data: usize,
}

/// The `len` bytes at `at`, when they are all there (offsets read from the file may be
/// anything).
fn slice(b: &[u8], at: usize, len: usize) -> Option<&[u8]> {
    b.get(at..at.checked_add(len)?)
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(slice(b, at, 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(slice(b, at, 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(slice(b, at, 8)?.try_into().ok()?))
}

/// The members, by the offsets of their local headers.
pub(super) fn members(bytes: &[u8], limits: &Limits) -> Vec<ZipMember> {
    let max = usize::try_from(limits.max_entries).unwrap_or(usize::MAX);
    let mut at: BTreeMap<u64, Option<Entry>> = BTreeMap::new();
    for (local, e) in central(bytes, max) {
        at.insert(local, Some(e));
    }
    let mut pos = 0;
    while at.len() < max {
        let Some(i) = find(&bytes[pos.min(bytes.len())..], LOCAL) else {
            break;
        };
        at.entry((pos + i) as u64).or_insert(None);
        pos += i + 4;
    }
    let offsets: Vec<u64> = at.keys().copied().collect();
    let mut out = Vec::new();
    for (k, &off) in offsets.iter().enumerate() {
        let Some(h) = local(bytes, off as usize) else {
            continue;
        };
        let end_bound = offsets.get(k + 1).copied().unwrap_or(bytes.len() as u64);
        let e = at[&off];
        let described = e.map(|e| (e.method, e.crc, e.csize, e.size));
        let (method, crc, mut csize, mut size) =
            described.unwrap_or((h.method, h.crc, h.csize, h.size));
        if e.is_none() && h.flags & 8 != 0 && csize == 0 {
            // Sizes in a data descriptor: the data runs to the next header at most.
            csize = end_bound.saturating_sub(h.data as u64);
            size = csize.saturating_mul(limits.max_compression_ratio.min(1 << 10));
        }
        let compression = match method {
            0 => Compression::Stored,
            8 => Compression::Deflate,
            _ => continue,
        };
        out.push(ZipMember {
            name: String::from_utf8_lossy(h.name).into_owned(),
            local_offset: off,
            end_bound,
            compressed_size: csize,
            size: if method == 0 { csize } else { size },
            compression,
            crc32: crc,
        });
    }
    out
}

/// The first offset of `needle` in `hay`.
fn find(hay: &[u8], needle: &[u8; 4]) -> Option<usize> {
    hay.windows(4).position(|w| w == needle)
}

/// The local header at `off`.
fn local(b: &[u8], off: usize) -> Option<Local<'_>> {
    if slice(b, off, 30)?.get(..4)? != LOCAL {
        return None;
    }
    let nlen = u16_at(b, off + 26)? as usize;
    let elen = u16_at(b, off + 28)? as usize;
    let name = slice(b, off + 30, nlen)?;
    let extra = slice(b, off + 30 + nlen, elen)?;
    let (mut csize, mut size) = (u32_at(b, off + 18)? as u64, u32_at(b, off + 22)? as u64);
    if let Some(z) = zip64(extra) {
        let mut vals = z
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])));
        if size == 0xffff_ffff {
            size = vals.next().unwrap_or(size);
        }
        if csize == 0xffff_ffff {
            csize = vals.next().unwrap_or(csize);
        }
    }
    Some(Local {
        name,
        flags: u16_at(b, off + 6)?,
        method: u16_at(b, off + 8)?,
        crc: u32_at(b, off + 14)?,
        csize,
        size,
        data: off + 30 + nlen + elen,
    })
}

/// The ZIP64 extra field's data in `extra`.
fn zip64(extra: &[u8]) -> Option<&[u8]> {
    let mut pos = 0;
    while pos + 4 <= extra.len() {
        let id = u16_at(extra, pos)?;
        let len = u16_at(extra, pos + 2)? as usize;
        let data = extra.get(pos + 4..pos + 4 + len)?;
        if id == 1 {
            return Some(data);
        }
        pos += 4 + len;
    }
    None
}

/// Where the central directory starts and how many entries it has.
fn directory(b: &[u8]) -> Option<(usize, usize)> {
    let from = b.len().saturating_sub(22 + 0xffff);
    let eocd = from + b[from..].windows(4).rposition(|w| w == EOCD)?;
    let (mut count, mut start) = (u16_at(b, eocd + 10)? as u64, u32_at(b, eocd + 16)? as u64);
    if (count == 0xffff || start == 0xffff_ffff)
        && eocd >= 20
        && slice(b, eocd - 20, 4)? == LOCATOR64
    {
        let at = usize::try_from(u64_at(b, eocd - 12)?).ok()?;
        if slice(b, at, 4)? == EOCD64 {
            count = u64_at(b, at + 32)?;
            start = u64_at(b, at + 48)?;
        }
    }
    Some((usize::try_from(start).ok()?, usize::try_from(count).ok()?))
}

/// The central directory's entries, by the offsets of their local headers.
fn central(b: &[u8], max: usize) -> Vec<(u64, Entry)> {
    let mut out = Vec::new();
    let Some((mut pos, count)) = directory(b) else {
        return out;
    };
    for _ in 0..count.min(max) {
        match central_entry(b, pos) {
            Some((local, e, next)) => {
                out.push((local, e));
                pos = next;
            }
            None => break,
        }
    }
    out
}

/// The central entry at `pos`: its local header's offset, what it says, the next entry.
fn central_entry(b: &[u8], pos: usize) -> Option<(u64, Entry, usize)> {
    if slice(b, pos, 46)?.get(..4)? != CENTRAL {
        return None;
    }
    let nlen = u16_at(b, pos + 28)? as usize;
    let elen = u16_at(b, pos + 30)? as usize;
    let clen = u16_at(b, pos + 32)? as usize;
    let extra = slice(b, pos + 46 + nlen, elen)?;
    let mut e = Entry {
        method: u16_at(b, pos + 10)?,
        crc: u32_at(b, pos + 16)?,
        csize: u32_at(b, pos + 20)? as u64,
        size: u32_at(b, pos + 24)? as u64,
    };
    let mut local = u32_at(b, pos + 42)? as u64;
    if let Some(z) = zip64(extra) {
        let mut vals = z
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])));
        if e.size == 0xffff_ffff {
            e.size = vals.next().unwrap_or(e.size);
        }
        if e.csize == 0xffff_ffff {
            e.csize = vals.next().unwrap_or(e.csize);
        }
        if local == 0xffff_ffff {
            local = vals.next().unwrap_or(local);
        }
    }
    Some((local, e, pos + 46 + nlen + elen + clen))
}

/// A stored member's bytes, where its local header says they are (its name not checked).
pub(super) fn stored(bytes: &[u8], m: &ZipMember) -> Option<Vec<u8>> {
    if m.compression != Compression::Stored {
        return None;
    }
    let h = local(bytes, usize::try_from(m.local_offset).ok()?)?;
    let end = h
        .data
        .checked_add(usize::try_from(m.compressed_size).ok()?)?;
    Some(bytes.get(h.data..end.min(bytes.len()))?.to_vec())
}
