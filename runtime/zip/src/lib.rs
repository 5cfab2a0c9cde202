//! The zip engine: an index of members with the absolute offsets of their data (so stored
//! members can be memory-mapped), member content access, and a streaming writer.
//!
//! Reading parses the end-of-central-directory records and the central directory itself,
//! bounds-checking every count, size and offset against the archive before anything is
//! allocated (ZIP64 included). Writing goes through the `zip` crate (flate2 deflate at the
//! default level, ZIP64 extra fields always, optional alignment of member data).
//!
//! Formats whose members a pattern names ([`Entry`]) open an archive as an [`Archive`]
//! (the member whose captures name the others, text members read and checked, storages
//! located for the engine that reads the metadata) and write one with an
//! [`ArchiveWriter`].
#![warn(missing_docs)]

// `Error` is large by design (it carries a full location); boxing it is a crate-wide
// decision, not this module's.

use std::borrow::Cow;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::sync::Mutex;

use tensorfmt_core::error::{Error, ErrorKind, Location, Result};
use tensorfmt_core::limits::Limits;
use tensorfmt_core::source::{check_range, RandomAccess, Window};

pub use tensorfmt_core::Compression;

mod archive;
mod location;
pub use archive::{Archive, ArchiveWriter, Entry, EntryKind};
pub use location::{index, location, member_of, members_match, Members};

/// One member of a zip archive, as its central directory describes it.
///
/// Where the member's data starts depends on its local header (whose name and extra field
/// may differ in length from the central directory's): [`ZipMember::data_offset`] reads
/// it when the data is first needed, so indexing an archive touches only its central
/// directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZipMember {
    /// The member's name.
    pub name: String,
    /// Absolute offset of the member's local header in the archive.
    pub local_offset: u64,
    /// Absolute offset that the member (local header and data) must end by: the next
    /// member's local header, or the central directory for the last one.
    pub end_bound: u64,
    /// Size of the compressed data.
    pub compressed_size: u64,
    /// Size of the uncompressed content.
    pub size: u64,
    /// Compression method.
    pub compression: Compression,
    /// CRC-32 of the uncompressed content.
    pub crc32: u32,
}

impl ZipMember {
    /// The absolute offset of the member's (compressed) data in `src`: just past its local
    /// header, whose signature and name are checked, and whose data must end by
    /// [`ZipMember::end_bound`] (so that no two members share bytes).
    pub fn data_offset(&self, src: &dyn RandomAccess) -> Result<u64> {
        let at = |offset: u64| {
            Location::default()
                .with_entry(self.name.clone())
                .with_offset(offset)
        };
        let local = self.local_offset;
        let fixed_end = local.checked_add(LOCAL_LEN);
        if fixed_end.is_none_or(|end| end > self.end_bound || end > src.len()) {
            return Err(Error::new(
                ErrorKind::Invalid(format!(
                    "local header at byte {local} runs past the member's space (byte {})",
                    self.end_bound
                )),
                at(local),
            ));
        }
        let mut lh = [0u8; LOCAL_LEN as usize];
        src.read_exact_at(local, &mut lh)
            .map_err(|e| e.in_entry(&self.name))?;
        if le32(&lh, 0) != LOCAL_SIG {
            return Err(Error::new(
                ErrorKind::BadMagic {
                    expected: LOCAL_SIG.to_le_bytes().to_vec(),
                    found: lh[0..4].to_vec(),
                },
                at(local),
            ));
        }
        let name_len = le16(&lh, 26) as u64;
        let extra_len = le16(&lh, 28) as u64;
        let data_offset = local + LOCAL_LEN + name_len + extra_len;
        if data_offset
            .checked_add(self.compressed_size)
            .is_none_or(|end| end > self.end_bound)
        {
            return Err(Error::new(
                ErrorKind::Invalid(format!(
                    "member data ({} bytes at byte {data_offset}) runs past byte {}, where the next member or the central directory starts",
                    self.compressed_size, self.end_bound
                )),
                at(local),
            ));
        }
        let same_name = match src.as_slice() {
            Some(s) => {
                s.get((local + LOCAL_LEN) as usize..(local + LOCAL_LEN + name_len) as usize)
                    == Some(self.name.as_bytes())
            }
            None => read_vec(src, local + LOCAL_LEN, name_len)? == self.name.as_bytes(),
        };
        if !same_name {
            let local_name = read_vec(src, local + LOCAL_LEN, name_len)?;
            return Err(Error::new(
                ErrorKind::Invalid(format!(
                    "local header names the member {:?}, the central directory {:?}",
                    String::from_utf8_lossy(&local_name),
                    self.name
                )),
                at(local),
            ));
        }
        Ok(data_offset)
    }
}

const EOCD_SIG: u32 = 0x0605_4b50;
const EOCD64_SIG: u32 = 0x0606_4b50;
const LOCATOR64_SIG: u32 = 0x0706_4b50;
const CENTRAL_SIG: u32 = 0x0201_4b50;
const LOCAL_SIG: u32 = 0x0403_4b50;
const EOCD_LEN: u64 = 22;
const EOCD64_LEN: u64 = 56;
const LOCATOR64_LEN: u64 = 20;
const CENTRAL_LEN: u64 = 46;
const LOCAL_LEN: u64 = 30;

/// True when `src` begins as a zip archive does: with a member's local header, or, for an
/// archive without members, with the end-of-central-directory record. A cheap test made
/// before [`ZipIndex::read`] when sniffing formats.
pub fn starts_like_zip(src: &dyn RandomAccess) -> bool {
    let mut sig = [0u8; 4];
    src.read_exact_at(0, &mut sig).is_ok()
        && matches!(u32::from_le_bytes(sig), LOCAL_SIG | EOCD_SIG)
}
const MAX_COMMENT: u64 = 0xffff;
const U32_MAX: u64 = 0xffff_ffff;
/// The longest member name a zip archive holds, in bytes: its length is a 16-bit field of
/// the local and central headers.
pub const MAX_NAME_BYTES: u64 = 0xffff;
/// Output block of the lazily decompressing source, and input chunk of both readers.
const BLOCK: usize = 64 << 10;
/// Members whose declared size is at most this are never refused for their compression
/// ratio (tiny members legitimately compress far better than any sane ratio).
const RATIO_FREE_BYTES: u64 = 64 << 10;

fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn le64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

fn invalid_at(message: impl Into<String>, offset: u64) -> Error {
    Error::new(
        ErrorKind::Invalid(message.into()),
        Location::default().with_offset(offset),
    )
}

/// Reads `len` bytes at `offset` into a new buffer (callers bound `len`).
fn read_vec(src: &dyn RandomAccess, offset: u64, len: u64) -> Result<Vec<u8>> {
    check_range(offset, len, src.len())?;
    let mut buf = vec![0u8; len as usize];
    src.read_exact_at(offset, &mut buf)?;
    Ok(buf)
}

/// `len` bytes at `offset`: a view when `src` is in memory, else read into a new buffer
/// (callers bound `len`).
fn read_cow(src: &dyn RandomAccess, offset: u64, len: u64) -> Result<Cow<'_, [u8]>> {
    check_range(offset, len, src.len())?;
    match src
        .as_slice()
        .and_then(|s| s.get(offset as usize..(offset + len) as usize))
    {
        Some(s) => Ok(Cow::Borrowed(s)),
        None => read_vec(src, offset, len).map(Cow::Owned),
    }
}

/// The members of a zip archive, in central-directory order, with a lookup by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ZipIndex {
    members: Vec<ZipMember>,
    /// Indices of `members`, sorted by name.
    by_name: Vec<u32>,
    /// The stored members whose CRC-32 was checked in full from the map: read again
    /// (another view of the same storage), they are not hashed again.
    checked: location::Checked,
}

/// What the end-of-central-directory records say.
struct CentralDirectory {
    /// Absolute offset of the first central header.
    start: u64,
    /// Absolute offset just past the central directory (where the EOCD64 or EOCD starts).
    end: u64,
    /// Entry count.
    entries: u64,
    /// Bytes that precede the archive proper (a self-extractor stub), added to every
    /// offset the archive records.
    archive_offset: u64,
}

impl ZipIndex {
    /// Indexes the archive in `src` from its central directory: every member's name,
    /// the absolute offset of its local header, sizes, method and CRC-32. Local headers
    /// are read when a member's data is needed ([`ZipMember::data_offset`]).
    ///
    /// Every count, size and offset is checked against the archive before it is used, so
    /// a forged record produces an error, never a huge allocation. Fails with
    /// [`ErrorKind::Limit`] when the archive declares more than `limits.max_entries`
    /// members, [`ErrorKind::Unsupported`] for encrypted members, methods other than
    /// stored and deflate, and multi-disk archives, and [`ErrorKind::Invalid`] for damaged
    /// structures and names that are not UTF-8.
    ///
    /// Archives whose members are ambiguous are refused ([`ErrorKind::Invalid`]): two
    /// members whose local headers and data overlap (two central entries sharing bytes,
    /// the shape of non-recursive zip bombs; Python's `zipfile` refuses them too, since
    /// 3.12, with "Overlapped entries: ... (possible zip bomb)"), and a name that appears more than once
    /// (readers disagree on which one counts: Python's `zipfile` takes the last, torch's
    /// miniz-based reader whichever its binary search meets). Each member's
    /// [`ZipMember::end_bound`] is where the next one starts; its local header is held to
    /// it when read.
    pub fn read(src: &dyn RandomAccess, limits: &Limits) -> Result<ZipIndex> {
        let cd = find_central_directory(src, limits)?;
        // At least 46 bytes per entry were checked to be there.
        let mut members = Vec::with_capacity(cd.entries as usize);
        // The directory itself: a view of the map, or read once from a stream.
        let directory = read_cow(src, cd.start, cd.end - cd.start)?;
        let mut pos = 0usize;
        for _ in 0..cd.entries {
            let (member, next) = read_central_header(&directory, &cd, pos)?;
            members.push(member);
            pos = next;
        }
        let by_name = check_unambiguous(&mut members, cd.start)?;
        Ok(ZipIndex {
            members,
            by_name,
            checked: Default::default(),
        })
    }

    /// An index of one member (a member located apart from its archive's index).
    fn of_one(member: ZipMember) -> ZipIndex {
        ZipIndex {
            members: vec![member],
            by_name: vec![0],
            checked: Default::default(),
        }
    }

    /// The position of `member` among the members, when it is one of them (this index's
    /// own value, as [`ZipIndex::members`] and [`ZipIndex::find`] give: found by its
    /// address, not compared).
    pub fn position(&self, member: &ZipMember) -> Option<usize> {
        let size = std::mem::size_of::<ZipMember>();
        let offset =
            (member as *const ZipMember as usize).checked_sub(self.members.as_ptr() as usize)?;
        let i = offset / size;
        (offset % size == 0 && i < self.members.len()).then_some(i)
    }

    /// The members, in central-directory order.
    pub fn members(&self) -> &[ZipMember] {
        &self.members
    }

    /// The member named `name` ([`ZipIndex::read`] refuses archives that hold a name
    /// more than once).
    pub fn find(&self, name: &str) -> Option<&ZipMember> {
        let i = self
            .by_name
            .binary_search_by(|&i| self.members[i as usize].name.as_str().cmp(name))
            .ok()?;
        self.members.get(self.by_name[i] as usize)
    }

    /// The member named `parts` joined (a storage's name: the part of its pattern before
    /// the key, the key, the part after), found without building the name.
    pub fn find_joined(&self, parts: [&str; 3]) -> Option<&ZipMember> {
        let i = self
            .by_name
            .binary_search_by(|&i| cmp_joined(&self.members[i as usize].name, parts))
            .ok()?;
        self.members.get(self.by_name[i] as usize)
    }
}

/// How `name` compares to `parts` joined, byte by byte (as `str`s compare).
fn cmp_joined(name: &str, parts: [&str; 3]) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    let mut rest = name.as_bytes();
    for part in parts {
        let part = part.as_bytes();
        let n = part.len().min(rest.len());
        match rest[..n].cmp(&part[..n]) {
            Ordering::Equal if rest.len() < part.len() => return Ordering::Less,
            Ordering::Equal => rest = &rest[n..],
            other => return other,
        }
    }
    if rest.is_empty() {
        Ordering::Equal
    } else {
        Ordering::Greater
    }
}

/// Refuses overlapping members and repeated names (see [`ZipIndex::read`]), sets each
/// member's `end_bound`, and returns the member indices sorted by name. A member occupies
/// at least its local header's fixed part, its name (the local header repeats the
/// central directory's) and its data: `local_offset + 30 + name + compressed_size`; the
/// local extra field is held to the bound when the header is read.
fn check_unambiguous(members: &mut [ZipMember], cd_start: u64) -> Result<Vec<u32>> {
    let min_end =
        |m: &ZipMember| m.local_offset + LOCAL_LEN + m.name.len() as u64 + m.compressed_size;
    let mut order: Vec<u32> = (0..members.len() as u32).collect();
    order.sort_unstable_by_key(|&i| members[i as usize].local_offset);
    for k in 0..order.len() {
        let i = order[k] as usize;
        let bound = match order.get(k + 1) {
            Some(&j) => {
                let (a, b) = (&members[i], &members[j as usize]);
                // Checked when the member was read: its minimal extent ends before the
                // directory.
                let a_end = min_end(a);
                if b.local_offset < a_end {
                    return Err(Error::new(
                        ErrorKind::Invalid(format!(
                            "overlapped entries (possible zip bomb): members '{}' \
                             (bytes {}..{}) and '{}' (from byte {}) overlap",
                            a.name, a.local_offset, a_end, b.name, b.local_offset
                        )),
                        Location::default()
                            .with_entry(b.name.clone())
                            .with_offset(b.local_offset),
                    ));
                }
                b.local_offset
            }
            None => cd_start,
        };
        members[i].end_bound = bound;
    }
    // Stable: a repeated name's later occurrence (in directory order) follows the earlier.
    order.sort_by(|&a, &b| members[a as usize].name.cmp(&members[b as usize].name));
    for pair in order.windows(2) {
        let (a, b) = (&members[pair[0] as usize], &members[pair[1] as usize]);
        if a.name == b.name {
            let later = if pair[1] > pair[0] { b } else { a };
            return Err(Error::new(
                ErrorKind::Invalid(format!(
                    "the member name '{}' appears more than once in the central directory",
                    later.name
                )),
                Location::default()
                    .with_entry(later.name.clone())
                    .with_offset(later.local_offset),
            ));
        }
    }
    Ok(order)
}

/// Finds and checks the end-of-central-directory record (and the ZIP64 one).
fn find_central_directory(src: &dyn RandomAccess, limits: &Limits) -> Result<CentralDirectory> {
    let len = src.len();
    if len < EOCD_LEN {
        return Err(invalid_at(
            format!("not a zip archive: {len} bytes is too short for an end-of-central-directory record"),
            0,
        ));
    }
    // The EOCD is the last 22 bytes plus a comment of at most 65535 bytes.
    let tail_len = len.min(EOCD_LEN + MAX_COMMENT);
    let tail_start = len - tail_len;
    let tail = read_cow(src, tail_start, tail_len)?;
    let mut found = None;
    let mut i = tail.len() - EOCD_LEN as usize;
    loop {
        if le32(&tail, i) == EOCD_SIG {
            let comment = le16(&tail, i + 20) as usize;
            if i + EOCD_LEN as usize + comment <= tail.len() {
                found = Some(i);
                break;
            }
        }
        if i == 0 {
            break;
        }
        i -= 1;
    }
    let Some(i) = found else {
        return Err(invalid_at(
            format!(
                "not a zip archive (or a truncated one): no end-of-central-directory record in the last {tail_len} bytes"
            ),
            tail_start,
        ));
    };
    let eocd_pos = tail_start + i as u64;
    let e = &tail[i..i + EOCD_LEN as usize];
    let disk = le16(e, 4) as u64;
    let cd_disk = le16(e, 6) as u64;
    let mut entries = le16(e, 10) as u64;
    let mut cd_size = le32(e, 12) as u64;
    let mut cd_offset = le32(e, 16) as u64;
    let maxed = entries == 0xffff || cd_size == U32_MAX || cd_offset == U32_MAX;
    let mut cd_end = eocd_pos;
    let mut multi_disk = disk != 0 || cd_disk != 0;

    // ZIP64: a locator right before the EOCD points at the ZIP64 EOCD record.
    if eocd_pos >= LOCATOR64_LEN {
        let loc_pos = eocd_pos - LOCATOR64_LEN;
        let loc = read_vec(src, loc_pos, LOCATOR64_LEN)?;
        if le32(&loc, 0) == LOCATOR64_SIG {
            let recorded = le64(&loc, 8);
            let total_disks = le32(&loc, 16);
            // Where the locator says (relative to the archive), or right before the
            // locator (as Python looks, which also works with prepended data).
            let candidates = [Some(recorded), loc_pos.checked_sub(EOCD64_LEN)];
            let mut record = None;
            for at in candidates.into_iter().flatten() {
                if at.checked_add(EOCD64_LEN).is_some_and(|end| end <= loc_pos) {
                    let r = read_vec(src, at, EOCD64_LEN)?;
                    if le32(&r, 0) == EOCD64_SIG {
                        record = Some((at, r));
                        break;
                    }
                }
            }
            match record {
                Some((at, r)) => {
                    multi_disk |= le32(&r, 16) != 0 || le32(&r, 20) != 0 || total_disks > 1;
                    entries = le64(&r, 32);
                    cd_size = le64(&r, 40);
                    cd_offset = le64(&r, 48);
                    cd_end = at;
                }
                None if maxed => {
                    return Err(invalid_at(
                        "the ZIP64 end-of-central-directory locator points at no ZIP64 record",
                        loc_pos,
                    ))
                }
                None => {}
            }
        }
    }
    if multi_disk {
        return Err(Error::new(
            ErrorKind::Unsupported("multi-disk (split) zip archives".into()),
            Location::default().with_offset(eocd_pos),
        ));
    }
    if entries > limits.max_entries {
        return Err(Error::new(
            ErrorKind::Limit {
                what: "zip entries",
                limit: limits.max_entries,
                actual: entries,
            },
            Location::default().with_offset(eocd_pos),
        ));
    }
    let min_cd = entries.checked_mul(CENTRAL_LEN);
    if min_cd.is_none_or(|min| min > cd_size) {
        return Err(invalid_at(
            format!(
                "the end-of-central-directory record declares {entries} entries, which cannot fit in a central directory of {cd_size} bytes"
            ),
            eocd_pos,
        ));
    }
    let Some(cd_start) = cd_end.checked_sub(cd_size) else {
        return Err(invalid_at(
            format!(
                "the central directory ({cd_size} bytes) does not fit before its end record at byte {cd_end}"
            ),
            eocd_pos,
        ));
    };
    let Some(archive_offset) = cd_start.checked_sub(cd_offset) else {
        return Err(invalid_at(
            format!(
                "the central directory offset {cd_offset} is past where the directory can start ({cd_start})"
            ),
            eocd_pos,
        ));
    };
    Ok(CentralDirectory {
        start: cd_start,
        end: cd_end,
        entries,
        archive_offset,
    })
}

fn method_name(method: u16) -> String {
    match method {
        1 => "shrink".into(),
        6 => "implode".into(),
        9 => "deflate64".into(),
        12 => "bzip2".into(),
        14 => "lzma".into(),
        93 => "zstd".into(),
        95 => "xz".into(),
        98 => "ppmd".into(),
        99 => "AES encryption".into(),
        m => format!("method {m}"),
    }
}

/// Parses the central header at `pos` of `directory` (the central directory's bytes,
/// which start at `cd.start` in the archive); returns the member and the position of the
/// next central header.
fn read_central_header(
    directory: &[u8],
    cd: &CentralDirectory,
    pos: usize,
) -> Result<(ZipMember, usize)> {
    let abs = |p: usize| cd.start + p as u64;
    let truncated = |what: &str| {
        invalid_at(
            format!(
                "central directory ends inside {what} (it ends at byte {})",
                cd.end
            ),
            abs(pos),
        )
    };
    let Some(h) = directory.get(pos..pos + CENTRAL_LEN as usize) else {
        return Err(truncated("a central header"));
    };
    if le32(h, 0) != CENTRAL_SIG {
        return Err(Error::new(
            ErrorKind::BadMagic {
                expected: CENTRAL_SIG.to_le_bytes().to_vec(),
                found: h[0..4].to_vec(),
            },
            Location::default().with_offset(abs(pos)),
        ));
    }
    let flags = le16(h, 8);
    let method = le16(h, 10);
    let crc32 = le32(h, 16);
    let mut compressed_size = le32(h, 20) as u64;
    let mut size = le32(h, 24) as u64;
    let name_len = le16(h, 28) as usize;
    let extra_len = le16(h, 30) as usize;
    let comment_len = le16(h, 32) as usize;
    let disk = le16(h, 34);
    let mut header_offset = le32(h, 42) as u64;
    let var_start = pos + CENTRAL_LEN as usize;
    let next = var_start + name_len + extra_len + comment_len;
    if next > directory.len() {
        return Err(truncated("a central header's name, extra field or comment"));
    }
    let name_raw = &directory[var_start..var_start + name_len];
    let extra = &directory[var_start + name_len..var_start + name_len + extra_len];
    let name = match std::str::from_utf8(name_raw) {
        Ok(n) => n.to_string(),
        Err(_) => {
            return Err(invalid_at(
                format!(
                    "member name {:?} is not UTF-8",
                    String::from_utf8_lossy(name_raw)
                ),
                abs(var_start),
            ))
        }
    };
    let at = |offset: u64| {
        Location::default()
            .with_entry(name.clone())
            .with_offset(offset)
    };

    // ZIP64 extended information (id 1): 8-byte values for the 32-bit fields that are
    // maxed out, in the order size, compressed size, offset. Some writers (the `zip`
    // crate with `large_file`) always write size and compressed size; a field of 24 or
    // more bytes is therefore read positionally, as the `zip` crate does.
    let mut disk_wide = disk as u64;
    let mut e = 0usize;
    while e + 4 <= extra.len() {
        let id = le16(extra, e);
        let len = le16(extra, e + 2) as usize;
        let body_start = e + 4;
        let body_end = body_start + len;
        if body_end > extra.len() {
            return Err(Error::new(
                ErrorKind::Invalid("extra field runs past its extra-field block".into()),
                at(abs(var_start + name_len + e)),
            ));
        }
        if id == 1 {
            let body = &extra[body_start..body_end];
            let positional = body.len() >= 24;
            let mut cursor = 0usize;
            let mut take = |maxed: bool, slot: usize| -> Option<Option<u64>> {
                let read_at = if positional { slot * 8 } else { cursor };
                if !maxed && !positional {
                    return Some(None);
                }
                if read_at + 8 > body.len() {
                    return if maxed { None } else { Some(None) };
                }
                cursor = read_at + 8;
                Some(if maxed {
                    Some(le64(body, read_at))
                } else {
                    None
                })
            };
            let bad = || {
                Error::new(
                    ErrorKind::Invalid("ZIP64 extra field is too short".into()),
                    at(abs(var_start + name_len + e)),
                )
            };
            if let Some(v) = take(size == U32_MAX, 0).ok_or_else(bad)? {
                size = v;
            }
            if let Some(v) = take(compressed_size == U32_MAX, 1).ok_or_else(bad)? {
                compressed_size = v;
            }
            if let Some(v) = take(header_offset == U32_MAX, 2).ok_or_else(bad)? {
                header_offset = v;
            }
            if disk == 0xffff {
                let d_at = if positional { 24 } else { cursor };
                if d_at + 4 <= body.len() {
                    disk_wide = le32(body, d_at) as u64;
                }
            }
        }
        e = body_end;
    }
    if disk_wide != 0 {
        return Err(Error::new(
            ErrorKind::Unsupported("multi-disk (split) zip archives".into()),
            at(abs(pos)),
        ));
    }
    if flags & 1 != 0 {
        return Err(Error::new(
            ErrorKind::Unsupported(format!("member '{name}' is encrypted")),
            at(abs(pos)),
        ));
    }
    let compression = match method {
        0 => Compression::Stored,
        8 => Compression::Deflate,
        m => {
            return Err(Error::new(
                ErrorKind::Unsupported(format!(
                    "member '{name}' is compressed with {} (only stored and deflate are supported)",
                    method_name(m)
                )),
                at(abs(pos)),
            ))
        }
    };
    if compression == Compression::Stored && compressed_size != size {
        return Err(Error::new(
            ErrorKind::Invalid(format!(
                "stored member has compressed size {compressed_size} but size {size}"
            )),
            at(abs(pos)),
        ));
    }

    // The member's local header, its name (repeated there) and its data must all lie in
    // the member area, before the central directory.
    let local = cd.archive_offset.checked_add(header_offset);
    let local = match local {
        Some(l) if l.checked_add(LOCAL_LEN).is_some_and(|end| end <= cd.start) => l,
        _ => {
            return Err(Error::new(
                ErrorKind::Invalid(format!(
                    "local header offset {header_offset} lies outside the archive's member area"
                )),
                at(abs(pos)),
            ))
        }
    };
    let data_min = local + LOCAL_LEN + name_len as u64;
    if data_min
        .checked_add(compressed_size)
        .is_none_or(|end| end > cd.start)
    {
        return Err(Error::new(
            ErrorKind::Invalid(format!(
                "member data ({compressed_size} bytes after the local header at byte {local}) runs past the start of the central directory (byte {})",
                cd.start
            )),
            at(local),
        ));
    }
    Ok((
        ZipMember {
            name,
            local_offset: local,
            end_bound: cd.start,
            compressed_size,
            size,
            compression,
            crc32,
        },
        next,
    ))
}

/// Checks what member access relies on (stored sizes agree, the declared size passes the
/// decompression limits, the local header is sound and the data range lies inside `src`)
/// and returns the absolute offset of the member's data.
fn check_member(src: &dyn RandomAccess, m: &ZipMember, limits: &Limits) -> Result<u64> {
    let at = || Location::default().with_entry(m.name.clone());
    match m.compression {
        Compression::Stored => {
            if m.compressed_size != m.size {
                return Err(Error::new(
                    ErrorKind::Invalid(format!(
                        "stored member has compressed size {} but size {}",
                        m.compressed_size, m.size
                    )),
                    at().with_offset(m.local_offset),
                ));
            }
        }
        Compression::Deflate => {
            if m.size > limits.max_decompressed_bytes {
                return Err(Error::new(
                    ErrorKind::Limit {
                        what: "decompressed bytes of a zip member",
                        limit: limits.max_decompressed_bytes,
                        actual: m.size,
                    },
                    at(),
                ));
            }
            let allowed = m
                .compressed_size
                .saturating_mul(limits.max_compression_ratio)
                .max(RATIO_FREE_BYTES);
            if m.size > allowed {
                return Err(Error::new(
                    ErrorKind::Limit {
                        what: "compression ratio of a zip member",
                        limit: limits.max_compression_ratio,
                        actual: m.size / m.compressed_size.max(1),
                    },
                    at(),
                ));
            }
        }
    }
    let data_offset = m.data_offset(src)?;
    check_range(data_offset, m.compressed_size, src.len()).map_err(|e| e.in_entry(&m.name))?;
    Ok(data_offset)
}

/// Wraps a runtime error for transport through `std::io` (undone by [`io_to_error`]).
fn to_io(e: Error) -> io::Error {
    io::Error::other(e)
}

/// The runtime [`Error`] carried inside `e` by the readers of this module (checksum,
/// decompression, size errors), or `e` itself as [`ErrorKind::Io`].
pub fn io_to_error(e: io::Error) -> Error {
    if !e.get_ref().is_some_and(|inner| inner.is::<Error>()) {
        return Error::from(e);
    }
    let kind = e.kind();
    match e.into_inner() {
        Some(inner) => match inner.downcast::<Error>() {
            Ok(err) => *err,
            Err(other) => Error::from(io::Error::new(kind, other)),
        },
        None => Error::from(io::Error::from(kind)),
    }
}

/// Sequential reads of a byte range of a source.
struct RangeReader<'a> {
    src: &'a dyn RandomAccess,
    pos: u64,
    end: u64,
}

impl Read for RangeReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = (self.end - self.pos).min(buf.len() as u64) as usize;
        if n == 0 {
            return Ok(0);
        }
        self.src
            .read_exact_at(self.pos, &mut buf[..n])
            .map_err(to_io)?;
        self.pos += n as u64;
        Ok(n)
    }
}

/// Counts, bounds and checksums a member's content stream.
struct CheckedReader<'a> {
    inner: Box<dyn Read + 'a>,
    deflate: bool,
    name: String,
    size: u64,
    crc32: u32,
    produced: u64,
    hasher: crc32fast::Hasher,
    done: bool,
}

impl CheckedReader<'_> {
    fn fail(&self, kind: ErrorKind) -> io::Error {
        let mut loc = Location::default().with_entry(self.name.clone());
        if self.deflate {
            loc = loc.with_offset(self.produced);
        }
        to_io(Error::new(kind, loc))
    }

    fn inner_error(&self, e: io::Error) -> io::Error {
        if e.get_ref().is_some_and(|i| i.is::<Error>()) {
            return to_io(io_to_error(e).in_entry(&self.name));
        }
        if self.deflate && e.kind() != io::ErrorKind::Interrupted {
            return self.fail(ErrorKind::Decompress(e.to_string()));
        }
        e
    }

    fn read_inner(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.inner.read(buf) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(self.inner_error(e)),
                Ok(n) => return Ok(n),
            }
        }
    }
}

impl Read for CheckedReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.done || buf.is_empty() {
            return Ok(0);
        }
        let remaining = self.size - self.produced;
        if remaining == 0 {
            // The stream must end here, and the content must match its CRC.
            let mut probe = [0u8; 1];
            if self.read_inner(&mut probe)? > 0 {
                return Err(self.fail(ErrorKind::SizeMismatch(format!(
                    "member content is longer than its recorded size of {} bytes",
                    self.size
                ))));
            }
            let actual = self.hasher.clone().finalize();
            if actual != self.crc32 {
                return Err(self.fail(ErrorKind::Checksum {
                    expected: self.crc32,
                    actual,
                }));
            }
            self.done = true;
            return Ok(0);
        }
        let want = remaining.min(buf.len() as u64) as usize;
        let n = self.read_inner(&mut buf[..want])?;
        if n == 0 {
            return Err(self.fail(ErrorKind::SizeMismatch(format!(
                "member content ends after {} bytes; its recorded size is {}",
                self.produced, self.size
            ))));
        }
        self.hasher.update(&buf[..n]);
        self.produced += n as u64;
        Ok(n)
    }
}

/// Streams the uncompressed content of `m` (stored: plain range reads; deflate: raw
/// inflate of the compressed range).
///
/// The stream yields exactly `m.size` bytes: content that decodes longer or shorter is an
/// error ([`ErrorKind::SizeMismatch`]), and at the end the CRC-32 is checked
/// ([`ErrorKind::Checksum`]). Corrupt deflate data gives [`ErrorKind::Decompress`]. These
/// arrive as `io::Error`s wrapping the runtime [`Error`] (naming the member); unwrap them
/// with [`io_to_error`]. Deflated members over `limits.max_decompressed_bytes` or beyond
/// `limits.max_compression_ratio` are refused up front ([`ErrorKind::Limit`]); callers
/// summing several members against a per-file total do so themselves.
pub fn member_reader<'a>(
    src: &'a dyn RandomAccess,
    m: &ZipMember,
    limits: &Limits,
) -> Result<Box<dyn Read + 'a>> {
    let data_offset = check_member(src, m, limits)?;
    let raw = RangeReader {
        src,
        pos: data_offset,
        end: data_offset + m.compressed_size,
    };
    let (inner, deflate): (Box<dyn Read + 'a>, bool) = match m.compression {
        Compression::Stored => (Box::new(raw), false),
        Compression::Deflate => (
            Box::new(flate2::read::DeflateDecoder::new_with_buf(
                raw,
                vec![0; BLOCK],
            )),
            true,
        ),
    };
    Ok(Box::new(CheckedReader {
        inner,
        deflate,
        name: m.name.clone(),
        size: m.size,
        crc32: m.crc32,
        produced: 0,
        hasher: crc32fast::Hasher::new(),
        done: false,
    }))
}

/// Random access to the uncompressed content of `m`, for parsing headers inside members.
///
/// Stored members give a zero-copy [`Window`] on `src` (no CRC check: read the member with
/// [`member_reader`] to verify it). Deflated members give a source that inflates forward
/// only as far as the highest offset requested so far (at most one 64 KiB block beyond),
/// keeping the inflated prefix in memory; once a read reaches the end of the content the
/// CRC-32 and the stream's end are checked. Either way `len()` is `m.size` and a read
/// beyond it fails with [`ErrorKind::Truncated`]. Limits as for [`member_reader`].
pub fn member_source<'a>(
    src: &'a dyn RandomAccess,
    m: &ZipMember,
    limits: &Limits,
) -> Result<Box<dyn RandomAccess + 'a>> {
    let data_offset = check_member(src, m, limits)?;
    match m.compression {
        Compression::Stored => Ok(Box::new(
            Window::new(src, data_offset, m.size).map_err(|e| e.in_entry(&m.name))?,
        )),
        Compression::Deflate => Ok(Box::new(LazyInflate::new(src, m, data_offset))),
    }
}

/// Refuses a metadata member larger than `limits.max_header_bytes`.
fn check_metadata_size(m: &ZipMember, limits: &Limits) -> Result<()> {
    if m.size > limits.max_header_bytes {
        return Err(Error::new(
            ErrorKind::Limit {
                what: "metadata member size",
                limit: limits.max_header_bytes,
                actual: m.size,
            },
            Location::default().with_entry(&m.name),
        ));
    }
    Ok(())
}

/// The whole uncompressed content of `m`, for metadata members (a pickle, a text
/// record): refused beyond `limits.max_header_bytes`; the CRC-32 is checked.
pub fn read_member(src: &dyn RandomAccess, m: &ZipMember, limits: &Limits) -> Result<Vec<u8>> {
    check_metadata_size(m, limits)?;
    // The limits are checked before anything is reserved.
    let mut reader = member_reader(src, m, limits)?;
    let mut out = Vec::with_capacity(initial_capacity(m) as usize);
    reader.read_to_end(&mut out).map_err(io_to_error)?;
    Ok(out)
}

/// The whole uncompressed content of `m`, as [`read_member`] gives it, but without a copy
/// when the member is stored and `src` is in memory: a view of its bytes, whose CRC-32
/// is checked.
pub fn member_bytes<'a>(
    src: &'a dyn RandomAccess,
    m: &ZipMember,
    limits: &Limits,
) -> Result<Cow<'a, [u8]>> {
    if m.compression != Compression::Stored || src.as_slice().is_none() {
        return read_member(src, m, limits).map(Cow::Owned);
    }
    check_metadata_size(m, limits)?;
    let data_offset = check_member(src, m, limits)?;
    let bytes = read_cow(src, data_offset, m.size).map_err(|e| e.in_entry(&m.name))?;
    let actual = crc32fast::hash(&bytes);
    if actual != m.crc32 {
        return Err(Error::new(
            ErrorKind::Checksum {
                expected: m.crc32,
                actual,
            },
            Location::default().with_entry(&m.name),
        ));
    }
    Ok(bytes)
}

/// What [`read_member`] reserves before reading `m`. A stored member's size is its byte
/// count in the archive (checked by the index); a deflated one's is only a claim, so no
/// more than its compressed size (or one block) is reserved up front, and the buffer
/// grows with the content actually inflated.
fn initial_capacity(m: &ZipMember) -> u64 {
    match m.compression {
        Compression::Stored => m.size,
        Compression::Deflate => m.size.min(m.compressed_size.max(BLOCK as u64)),
    }
}

/// The content of `m` as UTF-8 text (see [`read_member`]).
pub fn read_text(src: &dyn RandomAccess, m: &ZipMember, limits: &Limits) -> Result<String> {
    String::from_utf8(read_member(src, m, limits)?).map_err(|_| {
        Error::new(
            ErrorKind::Invalid("the member is not UTF-8 text".into()),
            Location::default().with_entry(&m.name),
        )
    })
}

/// A data error that poisons a [`LazyInflate`]; kept to report again on later reads.
#[derive(Debug, Clone)]
enum Failure {
    Decompress(String, u64),
    Size(String),
    Checksum(u32, u32),
}

struct InflateState {
    z: flate2::Decompress,
    /// The inflated prefix of the content.
    out: Vec<u8>,
    /// Buffered compressed input and the position in it.
    input: Vec<u8>,
    input_pos: usize,
    /// Offset (in the compressed data) of the next input chunk to fetch.
    next_in: u64,
    hasher: crc32fast::Hasher,
    stream_ended: bool,
    verified: bool,
    failed: Option<Failure>,
}

/// A deflated member, inflated lazily (see [`member_source`]).
struct LazyInflate<'a> {
    src: &'a dyn RandomAccess,
    name: String,
    data_offset: u64,
    compressed_size: u64,
    size: u64,
    crc32: u32,
    state: Mutex<InflateState>,
}

impl<'a> LazyInflate<'a> {
    fn new(src: &'a dyn RandomAccess, m: &ZipMember, data_offset: u64) -> Self {
        LazyInflate {
            src,
            name: m.name.clone(),
            data_offset,
            compressed_size: m.compressed_size,
            size: m.size,
            crc32: m.crc32,
            state: Mutex::new(InflateState {
                z: flate2::Decompress::new(false),
                out: Vec::new(),
                input: Vec::new(),
                input_pos: 0,
                next_in: 0,
                hasher: crc32fast::Hasher::new(),
                stream_ended: false,
                verified: false,
                failed: None,
            }),
        }
    }

    fn error(&self, f: &Failure) -> Error {
        let loc = Location::default().with_entry(self.name.clone());
        match f {
            Failure::Decompress(msg, at) => {
                Error::new(ErrorKind::Decompress(msg.clone()), loc.with_offset(*at))
            }
            Failure::Size(msg) => Error::new(ErrorKind::SizeMismatch(msg.clone()), loc),
            Failure::Checksum(expected, actual) => Error::new(
                ErrorKind::Checksum {
                    expected: *expected,
                    actual: *actual,
                },
                loc,
            ),
        }
    }

    /// Fetches the next compressed chunk when the buffered input is used up. Returns
    /// false when all compressed data has been consumed.
    fn refill(&self, s: &mut InflateState) -> Result<bool> {
        if s.input_pos < s.input.len() {
            return Ok(true);
        }
        if s.next_in >= self.compressed_size {
            return Ok(false);
        }
        let n = (self.compressed_size - s.next_in).min(BLOCK as u64);
        // Read into a fresh buffer so a failed read leaves the state intact.
        let mut chunk = vec![0u8; n as usize];
        self.src
            .read_exact_at(self.data_offset + s.next_in, &mut chunk)
            .map_err(|e| e.in_entry(&self.name))?;
        s.input = chunk;
        s.input_pos = 0;
        s.next_in += n;
        Ok(true)
    }

    /// One inflate step of at most one block of output.
    fn step(
        &self,
        s: &mut InflateState,
        out_space: usize,
    ) -> Result<std::result::Result<(), Failure>> {
        let have_input = self.refill(s)?;
        let old = s.out.len();
        s.out.resize(old + out_space, 0);
        let (in_before, out_before) = (s.z.total_in(), s.z.total_out());
        let status = s.z.decompress(
            &s.input[s.input_pos..],
            &mut s.out[old..],
            flate2::FlushDecompress::None,
        );
        let consumed = (s.z.total_in() - in_before) as usize;
        let produced = (s.z.total_out() - out_before) as usize;
        s.input_pos += consumed;
        s.out.truncate(old + produced);
        let InflateState { out, hasher, .. } = s;
        hasher.update(&out[old..]);
        match status {
            Err(e) => Ok(Err(Failure::Decompress(e.to_string(), old as u64))),
            Ok(flate2::Status::StreamEnd) => {
                s.stream_ended = true;
                if (s.out.len() as u64) < self.size {
                    return Ok(Err(Failure::Size(format!(
                        "deflate stream ends after {} bytes; the member's recorded size is {}",
                        s.out.len(),
                        self.size
                    ))));
                }
                Ok(Ok(()))
            }
            Ok(_) if consumed == 0 && produced == 0 => Ok(Err(Failure::Decompress(
                if have_input {
                    "deflate stream makes no progress".to_string()
                } else {
                    "compressed data ends before the deflate stream does".to_string()
                },
                s.out.len() as u64,
            ))),
            Ok(_) => Ok(Ok(())),
        }
    }

    /// Inflates until `end` bytes are available; at the end of the content, checks that
    /// the stream ends there and the CRC.
    fn fill_to(&self, s: &mut InflateState, end: u64) -> Result<std::result::Result<(), Failure>> {
        while (s.out.len() as u64) < end {
            let space = (self.size - s.out.len() as u64).min(BLOCK as u64) as usize;
            if let Err(f) = self.step(s, space)? {
                return Ok(Err(f));
            }
        }
        if s.out.len() as u64 == self.size && !s.verified {
            // Nothing may follow the content.
            let mut probe = [0u8; 1];
            while !s.stream_ended {
                let have_input = self.refill(s)?;
                let (in_before, out_before) = (s.z.total_in(), s.z.total_out());
                let status = s.z.decompress(
                    &s.input[s.input_pos..],
                    &mut probe,
                    flate2::FlushDecompress::None,
                );
                let consumed = (s.z.total_in() - in_before) as usize;
                let produced = s.z.total_out() - out_before;
                s.input_pos += consumed;
                match status {
                    Err(e) => return Ok(Err(Failure::Decompress(e.to_string(), self.size))),
                    _ if produced > 0 => {
                        return Ok(Err(Failure::Size(format!(
                            "member content is longer than its recorded size of {} bytes",
                            self.size
                        ))))
                    }
                    Ok(flate2::Status::StreamEnd) => s.stream_ended = true,
                    Ok(_) if consumed == 0 => {
                        return Ok(Err(Failure::Decompress(
                            if have_input {
                                "deflate stream makes no progress".to_string()
                            } else {
                                "compressed data ends before the deflate stream does".to_string()
                            },
                            self.size,
                        )))
                    }
                    Ok(_) => {}
                }
            }
            let actual = s.hasher.clone().finalize();
            if actual != self.crc32 {
                return Ok(Err(Failure::Checksum(self.crc32, actual)));
            }
            s.verified = true;
        }
        Ok(Ok(()))
    }
}

impl RandomAccess for LazyInflate<'_> {
    fn len(&self) -> u64 {
        self.size
    }

    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        check_range(offset, buf.len() as u64, self.size).map_err(|e| e.in_entry(&self.name))?;
        let end = offset + buf.len() as u64;
        let mut s = self.state.lock().map_err(|_| {
            Error::new(
                ErrorKind::Invalid("inflate state poisoned by a panic".into()),
                Location::default().with_entry(self.name.clone()),
            )
        })?;
        if let Some(f) = &s.failed {
            return Err(self.error(f));
        }
        if let Err(f) = self.fill_to(&mut s, end)? {
            let e = self.error(&f);
            s.failed = Some(f);
            return Err(e);
        }
        buf.copy_from_slice(&s.out[offset as usize..end as usize]);
        Ok(())
    }
}

/// `name` as a member name that extracts inside the extraction folder everywhere (no
/// zip-slip for whoever unpacks the archive): backslashes become `/`, empty and `.`
/// components are dropped (so a leading `/` too), `..` components become `__`, and a
/// drive letter's colon (`C:`) becomes `_`; an empty result is `_`. Names that are safe
/// already are returned as they are. NumPy writes such names as given and `numpy.load`
/// lists a member under its name less `.npy`, so a tensor named `../../w` is read back as
/// `__/__/w`.
pub fn safe_member_name(name: &str) -> std::borrow::Cow<'_, str> {
    let drive = |c: &str| {
        let b = c.as_bytes();
        b.len() >= 2 && b[0].is_ascii_alphabetic() && b[1] == b':'
    };
    let safe = !name.is_empty()
        && !name.contains('\\')
        && !drive(name)
        && name
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != "..");
    if safe {
        return std::borrow::Cow::Borrowed(name);
    }
    let unified = name.replace('\\', "/");
    let mut parts: Vec<String> = Vec::new();
    for c in unified.split('/') {
        match c {
            "" | "." => {}
            ".." => parts.push("__".into()),
            c if parts.is_empty() && drive(c) => parts.push(format!("{}_{}", &c[..1], &c[2..])),
            c => parts.push(c.into()),
        }
    }
    if parts.is_empty() {
        parts.push("_".into());
    }
    std::borrow::Cow::Owned(parts.join("/"))
}

/// A streaming zip writer: members are added one at a time and their content written
/// through [`Write`]; CRC and sizes are computed on the fly and patched into the local
/// header, so memory stays bounded whatever the member sizes. Every member carries ZIP64
/// fields (as NumPy forces), so members over 4 GiB work.
///
/// Dropped unfinished (a save that failed, a disk that is full), the archive is
/// abandoned: nothing more is written to `w` (the zip library's own completion on drop
/// writes into the void), so that a failing output is never written to again.
pub struct ZipWriter<W: Write + Seek> {
    /// `None` once finished.
    inner: Option<zip::ZipWriter<Void<W>>>,
    current: Option<String>,
    abandoned: std::rc::Rc<std::cell::Cell<bool>>,
}

/// The output of a [`ZipWriter`]: `w`, until the archive is abandoned (dropped
/// unfinished, or at the first error of `w`); then a sink that accepts everything and
/// writes nothing (positions tracked, far past any real one).
struct Void<W> {
    w: W,
    abandoned: std::rc::Rc<std::cell::Cell<bool>>,
    pos: u64,
    end: u64,
}

/// Where an abandoned archive's positions start: past any offset it wrote.
const VOID_START: u64 = 1 << 62;

impl<W: Write> Write for Void<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.abandoned.get() {
            self.pos += buf.len() as u64;
            self.end = self.end.max(self.pos);
            return Ok(buf.len());
        }
        let r = self.w.write(buf);
        self.abandon_on_error(r)
    }
    fn flush(&mut self) -> io::Result<()> {
        if self.abandoned.get() {
            return Ok(());
        }
        let r = self.w.flush();
        self.abandon_on_error(r)
    }
}

impl<W> Void<W> {
    /// `r`, abandoning the archive when it is an error.
    fn abandon_on_error<T>(&self, r: io::Result<T>) -> io::Result<T> {
        if r.is_err() {
            self.abandoned.set(true);
        }
        r
    }
}

impl<W: Seek> Seek for Void<W> {
    fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
        if !self.abandoned.get() {
            let r = self.w.seek(pos);
            return self.abandon_on_error(r);
        }
        self.pos = match pos {
            SeekFrom::Start(n) => n.max(VOID_START),
            SeekFrom::Current(d) => self.pos.saturating_add_signed(d),
            SeekFrom::End(d) => self.end.saturating_add_signed(d),
        };
        self.end = self.end.max(self.pos);
        Ok(self.pos)
    }
}

impl<W: Write + Seek> Drop for ZipWriter<W> {
    fn drop(&mut self) {
        // Unfinished: abandoned (see the type's documentation).
        self.abandoned.set(true);
    }
}

fn zip_error(e: zip::result::ZipError, name: Option<&str>) -> Error {
    let kind = match e {
        zip::result::ZipError::Io(e) => ErrorKind::Io(e),
        zip::result::ZipError::UnsupportedArchive(m) => ErrorKind::Unsupported(m.to_string()),
        zip::result::ZipError::InvalidArchive(m) => ErrorKind::Invalid(m.into_owned()),
        other => ErrorKind::Invalid(other.to_string()),
    };
    let mut loc = Location::default();
    if let Some(n) = name {
        loc = loc.with_entry(n);
    }
    Error::new(kind, loc)
}

impl<W: Write + Seek> ZipWriter<W> {
    /// A writer producing an archive into `w` (written from its current position).
    pub fn new(w: W) -> Self {
        let abandoned = std::rc::Rc::new(std::cell::Cell::new(false));
        ZipWriter {
            inner: Some(zip::ZipWriter::new(Void {
                w,
                abandoned: abandoned.clone(),
                pos: VOID_START,
                end: VOID_START,
            })),
            current: None,
            abandoned,
        }
    }

    /// Finishes the current member (if any) and starts `name`, made a safe relative
    /// name first ([`safe_member_name`]). With `align` > 1 the member's data starts at a
    /// multiple of `align` bytes in the archive (padding goes into the local header's
    /// extra field); this is what makes stored members mappable. Deflate uses the default
    /// level (6). A name longer than [`MAX_NAME_BYTES`] is refused, naming it, before anything of the
    /// member is written.
    pub fn start_member(&mut self, name: &str, compression: Compression, align: u16) -> Result<()> {
        let name = &*safe_member_name(name);
        if name.len() as u64 > MAX_NAME_BYTES {
            return Err(Error::new(
                ErrorKind::Unsupported(format!(
                    "a zip member name of {} bytes: zip archives hold names of at most \
                     {MAX_NAME_BYTES} bytes",
                    name.len()
                )),
                Location::default().with_entry(name),
            ));
        }
        let method = match compression {
            Compression::Stored => zip::CompressionMethod::Stored,
            Compression::Deflate => zip::CompressionMethod::Deflated,
        };
        let mut options = zip::write::SimpleFileOptions::default()
            .compression_method(method)
            .large_file(true)
            .last_modified_time(zip::DateTime::default())
            .unix_permissions(0o644);
        if align > 1 {
            options = options.with_alignment(align);
        }
        self.current = None;
        self.zip()?
            .start_file(name, options)
            .map_err(|e| zip_error(e, Some(name)))?;
        self.current = Some(name.to_string());
        Ok(())
    }

    /// Finishes the last member and writes the central directory; returns the sink.
    pub fn finish(mut self) -> Result<W> {
        let name = self.current.take();
        let inner = self.zip_taken()?;
        let out = inner.finish().map_err(|e| zip_error(e, name.as_deref()))?;
        Ok(out.w)
    }

    /// The zip library's writer (an error once finished, which `finish` taking `self`
    /// rules out).
    fn zip(&mut self) -> Result<&mut zip::ZipWriter<Void<W>>> {
        self.inner.as_mut().ok_or_else(finished)
    }

    fn zip_taken(&mut self) -> Result<zip::ZipWriter<Void<W>>> {
        self.inner.take().ok_or_else(finished)
    }
}

fn finished() -> Error {
    Error::new(
        ErrorKind::Invalid("zip writer: the archive is finished".into()),
        Location::default(),
    )
}

impl<W: Write + Seek> Write for ZipWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.current.is_none() {
            return Err(to_io(Error::new(
                ErrorKind::Invalid("zip writer: content written before start_member".into()),
                Location::default(),
            )));
        }
        self.zip().map_err(to_io)?.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.zip().map_err(to_io)?.flush()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn member_names_are_made_safe() {
        use super::safe_member_name as safe;
        for (given, want) in [
            ("w.npy", "w.npy"),
            ("a/b.npy", "a/b.npy"),
            ("..x.npy", "..x.npy"),
            ("../../evil.npy", "__/__/evil.npy"),
            ("/abs/x.npy", "abs/x.npy"),
            ("a\\b.npy", "a/b.npy"),
            ("C:/w.npy", "C_/w.npy"),
            ("C:w.npy", "C_w.npy"),
            ("a//./b.npy", "a/b.npy"),
            ("", "_"),
            ("/", "_"),
        ] {
            assert_eq!(safe(given), want, "{given:?}");
        }
    }

    use super::*;
    use std::io::Cursor;
    use std::sync::Arc;
    use tensorfmt_core::source::{Bytes, Source};

    #[test]
    fn joined_names_compare_as_the_name_would() {
        use std::cmp::Ordering;
        let names = [
            "",
            "a",
            "a/data/0",
            "a/data/1",
            "a/data/10",
            "a/data/2",
            "a/datb",
            "b",
        ];
        let parts: [[&str; 3]; 6] = [
            ["a/data/", "1", ""],
            ["a/data/", "10", ""],
            ["a/", "data", "/2"],
            ["", "a", ""],
            ["a/data/", "0", "x"],
            ["", "", ""],
        ];
        for name in names {
            for p in parts {
                let joined = p.concat();
                assert_eq!(
                    cmp_joined(name, p),
                    name.cmp(joined.as_str()),
                    "{name} {p:?}"
                );
            }
        }
        assert_eq!(
            cmp_joined("a/data/1", ["a/data/", "1", ""]),
            Ordering::Equal
        );
    }

    fn bytes(v: Vec<u8>) -> Bytes {
        Bytes::Owned(Arc::from(v))
    }

    /// Deterministic, poorly compressible-to-compressible content.
    fn content(n: usize, seed: u64) -> Vec<u8> {
        let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        (0..n)
            .map(|i| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                if i % 3 == 0 {
                    (i % 251) as u8
                } else {
                    (s & 0x0f) as u8
                }
            })
            .collect()
    }

    fn members() -> Vec<(&'static str, Compression, u16, Vec<u8>)> {
        vec![
            ("a.npy", Compression::Stored, 64, content(1000, 1)),
            ("b.npy", Compression::Deflate, 0, content(200_000, 2)),
            ("dir/c.npy", Compression::Stored, 64, Vec::new()),
            ("d.npy", Compression::Deflate, 0, Vec::new()),
            ("e.npy", Compression::Stored, 64, content(70_001, 3)),
            ("zeros.npy", Compression::Deflate, 0, vec![0u8; 300_000]),
            ("é ü.npy", Compression::Stored, 4096, content(10, 4)),
        ]
    }

    fn build(members: &[(&str, Compression, u16, Vec<u8>)]) -> Vec<u8> {
        let mut w = ZipWriter::new(Cursor::new(Vec::new()));
        for (name, c, align, data) in members {
            w.start_member(name, *c, *align).unwrap();
            // Write in uneven chunks.
            for chunk in data.chunks(7777) {
                w.write_all(chunk).unwrap();
            }
        }
        w.finish().unwrap().into_inner()
    }

    fn read_all(src: &dyn RandomAccess, m: &ZipMember) -> Result<Vec<u8>> {
        let mut r = member_reader(src, m, &Limits::default())?;
        let mut out = Vec::new();
        r.read_to_end(&mut out).map_err(io_to_error)?;
        Ok(out)
    }

    fn read_source(src: &dyn RandomAccess, m: &ZipMember) -> Result<Vec<u8>> {
        let s = member_source(src, m, &Limits::default())?;
        let mut out = vec![0u8; s.len() as usize];
        s.read_exact_at(0, &mut out)?;
        Ok(out)
    }

    #[test]
    fn roundtrip_index_reader_source() {
        let ms = members();
        let archive = build(&ms);
        let src = bytes(archive.clone());
        let index = ZipIndex::read(&src, &Limits::default()).unwrap();
        assert_eq!(index.members().len(), ms.len());
        // The zip crate, as an independent reader, agrees on every data offset.
        let mut oracle = ::zip::ZipArchive::new(Cursor::new(archive.clone())).unwrap();
        for (i, ((name, c, align, data), m)) in ms.iter().zip(index.members()).enumerate() {
            assert_eq!(m.name, *name);
            assert_eq!(m.compression, *c);
            assert_eq!(m.size, data.len() as u64);
            assert_eq!(m.crc32, crc32fast::hash(data));
            let data_offset = m.data_offset(&src).unwrap();
            if *c == Compression::Stored {
                assert_eq!(data_offset % *align as u64, 0, "{name}");
                assert_eq!(m.compressed_size, m.size);
                assert_eq!(
                    &archive[data_offset as usize..(data_offset + m.size) as usize],
                    &data[..]
                );
            }
            let f = oracle.by_index_raw(i).unwrap();
            assert_eq!(f.data_start(), data_offset, "{name}");
            assert_eq!(f.compressed_size(), m.compressed_size, "{name}");
            drop(f);
            assert_eq!(&read_all(&src, m).unwrap(), data, "{name}");
            assert_eq!(&read_source(&src, m).unwrap(), data, "{name}");
        }
        assert_eq!(index.find("b.npy").unwrap().name, "b.npy");
        assert!(index.find("nope").is_none());
        // Deflate really compressed the zeros.
        assert!(index.find("zeros.npy").unwrap().compressed_size < 2000);
    }

    #[test]
    fn stream_sources_work_too() {
        let ms = members();
        let archive = build(&ms);
        let source = Source::from_reader(Cursor::new(archive)).unwrap();
        let src = source.data();
        assert!(src.as_slice().is_none());
        let index = ZipIndex::read(src, &Limits::default()).unwrap();
        for ((_, _, _, data), m) in ms.iter().zip(index.members()) {
            assert_eq!(&read_all(src, m).unwrap(), data);
            assert_eq!(&read_source(src, m).unwrap(), data);
        }
    }

    #[test]
    fn stored_source_is_a_zero_copy_window() {
        let ms = members();
        let src = bytes(build(&ms));
        let index = ZipIndex::read(&src, &Limits::default()).unwrap();
        let m = index.find("a.npy").unwrap();
        let s = member_source(&src, m, &Limits::default()).unwrap();
        let slice = s.as_slice().unwrap();
        assert_eq!(slice, &ms[0].3[..]);
        assert_eq!(
            slice.as_ptr(),
            src.as_bytes()[m.data_offset(&src).unwrap() as usize..].as_ptr()
        );
    }

    #[test]
    fn lazy_inflate_decompresses_only_what_is_asked() {
        let data = content(1_000_000, 9);
        let src = bytes(build(&[("big", Compression::Deflate, 0, data.clone())]));
        let index = ZipIndex::read(&src, &Limits::default()).unwrap();
        let m = &index.members()[0];
        let lazy = LazyInflate::new(&src, m, m.data_offset(&src).unwrap());
        assert_eq!(lazy.len(), 1_000_000);
        let mut buf = [0u8; 10];
        lazy.read_exact_at(5, &mut buf).unwrap();
        assert_eq!(&buf, &data[5..15]);
        let have = lazy.state.lock().unwrap().out.len();
        assert!(have <= BLOCK, "{have}");
        lazy.read_exact_at(300_000, &mut buf).unwrap();
        assert_eq!(&buf, &data[300_000..300_010]);
        let have = lazy.state.lock().unwrap().out.len();
        assert!((300_010..300_010 + BLOCK).contains(&have), "{have}");
        // Earlier offsets come from the kept prefix.
        lazy.read_exact_at(0, &mut buf).unwrap();
        assert_eq!(&buf, &data[..10]);
        assert!(!lazy.state.lock().unwrap().verified);
        // Reading the tail verifies the CRC.
        lazy.read_exact_at(999_990, &mut buf).unwrap();
        assert_eq!(&buf, &data[999_990..]);
        assert!(lazy.state.lock().unwrap().verified);
        let e = lazy.read_exact_at(999_995, &mut buf).unwrap_err();
        assert!(matches!(e.kind, ErrorKind::Truncated { .. }), "{e}");
        assert_eq!(e.location.entry.as_deref(), Some("big"));
        lazy.read_exact_at(1_000_000, &mut []).unwrap();
    }

    #[test]
    fn checksum_errors_name_the_member() {
        let ms = members();
        let archive = build(&ms);
        let src = bytes(archive.clone());
        let index = ZipIndex::read(&src, &Limits::default()).unwrap();
        // A wrong recorded CRC, for stored and deflated members, through both readers.
        for name in ["a.npy", "b.npy"] {
            let mut m = ZipMember::clone(index.find(name).unwrap());
            m.crc32 ^= 1;
            let e = read_all(&src, &m).unwrap_err();
            assert!(
                matches!(e.kind, ErrorKind::Checksum { expected, .. } if expected == m.crc32),
                "{e}"
            );
            assert_eq!(e.location.entry.as_deref(), Some(name));
            if m.compression == Compression::Deflate {
                let e = read_source(&src, &m).unwrap_err();
                assert!(matches!(e.kind, ErrorKind::Checksum { .. }), "{e}");
                assert_eq!(e.location.entry.as_deref(), Some(name));
            }
        }
        // A flipped byte in stored data.
        let m = index.find("e.npy").unwrap();
        let mut damaged = archive.clone();
        damaged[m.data_offset(&bytes(archive.clone())).unwrap() as usize + 1234] ^= 0x40;
        let dsrc = bytes(damaged);
        let e = read_all(&dsrc, m).unwrap_err();
        assert!(matches!(e.kind, ErrorKind::Checksum { .. }), "{e}");
        assert!(e.to_string().contains("entry 'e.npy'"), "{e}");
    }

    #[test]
    fn corrupt_deflate_streams() {
        let ms = members();
        let archive = build(&ms);
        let index = ZipIndex::read(&bytes(archive.clone()), &Limits::default()).unwrap();
        let m = index.find("b.npy").unwrap();
        let data_offset = m.data_offset(&bytes(archive.clone())).unwrap() as usize;
        // BFINAL=1, BTYPE=11 (reserved): invalid from the first byte.
        let mut damaged = archive.clone();
        damaged[data_offset] = 0xff;
        let src = bytes(damaged);
        let e = read_all(&src, m).unwrap_err();
        assert!(matches!(e.kind, ErrorKind::Decompress(_)), "{e}");
        assert_eq!(e.location.entry.as_deref(), Some("b.npy"));
        let s = member_source(&src, m, &Limits::default()).unwrap();
        let e = s.read_exact_at(0, &mut [0u8; 4]).unwrap_err();
        assert!(matches!(e.kind, ErrorKind::Decompress(_)), "{e}");
        // The failure is sticky.
        let e = s.read_exact_at(0, &mut [0u8; 4]).unwrap_err();
        assert!(matches!(e.kind, ErrorKind::Decompress(_)), "{e}");

        // Garbage in the middle: some error, never a panic or wrong data.
        for pos in [10usize, 1000, 5000, 20_000] {
            let mut damaged = archive.clone();
            for b in &mut damaged[data_offset + pos..data_offset + pos + 64] {
                *b = b.wrapping_mul(31).wrapping_add(7);
            }
            let src = bytes(damaged);
            let e = read_all(&src, m).unwrap_err();
            assert!(
                matches!(
                    e.kind,
                    ErrorKind::Decompress(_)
                        | ErrorKind::Checksum { .. }
                        | ErrorKind::SizeMismatch(_)
                ),
                "{e}"
            );
            let e = read_source(&src, m).unwrap_err();
            assert!(
                matches!(
                    e.kind,
                    ErrorKind::Decompress(_)
                        | ErrorKind::Checksum { .. }
                        | ErrorKind::SizeMismatch(_)
                ),
                "{e}"
            );
        }

        // Compressed data cut short (the recorded compressed size shrunk).
        let mut short = ZipMember::clone(m);
        short.compressed_size /= 2;
        let src = bytes(archive.clone());
        let e = read_all(&src, &short).unwrap_err();
        assert!(
            matches!(
                e.kind,
                ErrorKind::Decompress(_) | ErrorKind::SizeMismatch(_)
            ),
            "{e}"
        );
        let e = read_source(&src, &short).unwrap_err();
        assert!(matches!(e.kind, ErrorKind::Decompress(_)), "{e}");
    }

    #[test]
    fn content_longer_or_shorter_than_recorded() {
        let ms = members();
        let src = bytes(build(&ms));
        let index = ZipIndex::read(&src, &Limits::default()).unwrap();
        let m = index.find("b.npy").unwrap();
        let mut shorter = ZipMember::clone(m);
        shorter.size -= 1;
        let e = read_all(&src, &shorter).unwrap_err();
        assert!(matches!(e.kind, ErrorKind::SizeMismatch(_)), "{e}");
        let e = read_source(&src, &shorter).unwrap_err();
        assert!(matches!(e.kind, ErrorKind::SizeMismatch(_)), "{e}");
        let mut longer = ZipMember::clone(m);
        longer.size += 1;
        let e = read_all(&src, &longer).unwrap_err();
        assert!(matches!(e.kind, ErrorKind::SizeMismatch(_)), "{e}");
        let e = read_source(&src, &longer).unwrap_err();
        assert!(matches!(e.kind, ErrorKind::SizeMismatch(_)), "{e}");
        // The reader never hands out more than the recorded size.
        let mut r = member_reader(&src, &shorter, &Limits::default()).unwrap();
        let mut got = vec![0u8; m.size as usize + 100];
        let mut n = 0;
        loop {
            match r.read(&mut got[n..]) {
                Ok(0) => panic!("must fail"),
                Ok(k) => n += k,
                Err(_) => break,
            }
        }
        assert_eq!(n as u64, shorter.size);
        // Stored members whose sizes disagree are refused.
        let mut bad = ZipMember::clone(index.find("a.npy").unwrap());
        bad.size += 1;
        assert!(matches!(
            member_reader(&src, &bad, &Limits::default())
                .err()
                .unwrap()
                .kind,
            ErrorKind::Invalid(_)
        ));
        // Data ranges outside the member's space or the source are refused.
        let mut out = ZipMember::clone(index.find("a.npy").unwrap());
        out.local_offset = src.len() - 10;
        let e = member_source(&src, &out, &Limits::default()).err().unwrap();
        assert!(matches!(e.kind, ErrorKind::Invalid(_)), "{e}");
        assert_eq!(e.location.entry.as_deref(), Some("a.npy"));
        out.end_bound = u64::MAX;
        let e = member_source(&src, &out, &Limits::default()).err().unwrap();
        assert!(matches!(e.kind, ErrorKind::Invalid(_)), "{e}");
        let mut out = ZipMember::clone(index.find("a.npy").unwrap());
        out.size = src.len();
        out.compressed_size = src.len();
        out.end_bound = u64::MAX;
        let e = member_source(&src, &out, &Limits::default()).err().unwrap();
        assert!(matches!(e.kind, ErrorKind::Truncated { .. }), "{e}");
        assert_eq!(e.location.entry.as_deref(), Some("a.npy"));
    }

    #[test]
    fn decompression_limits() {
        let ms = members();
        let src = bytes(build(&ms));
        let index = ZipIndex::read(&src, &Limits::default()).unwrap();
        let zeros = index.find("zeros.npy").unwrap();
        let ratio = Limits {
            max_compression_ratio: 10,
            ..Limits::default()
        };
        for e in [
            member_reader(&src, zeros, &ratio).err().unwrap(),
            member_source(&src, zeros, &ratio).err().unwrap(),
        ] {
            assert!(
                matches!(e.kind, ErrorKind::Limit { what, .. } if what.contains("ratio")),
                "{e}"
            );
            assert_eq!(e.location.entry.as_deref(), Some("zeros.npy"));
        }
        let total = Limits {
            max_decompressed_bytes: 1000,
            ..Limits::default()
        };
        let e = member_reader(&src, zeros, &total).err().unwrap();
        assert!(matches!(e.kind, ErrorKind::Limit { .. }), "{e}");
        // A forged size claiming a 1 TB member from a few bytes.
        let mut bomb = ZipMember::clone(zeros);
        bomb.size = 1 << 40;
        let e = member_source(&src, &bomb, &Limits::default())
            .err()
            .unwrap();
        assert!(matches!(e.kind, ErrorKind::Limit { .. }), "{e}");
        // Stored members are not subject to decompression limits.
        assert!(member_reader(&src, index.find("e.npy").unwrap(), &total).is_ok());
    }

    /// Byte offset of the central header naming `name`.
    fn central_header_of(archive: &[u8], name: &str) -> usize {
        (0..archive.len() - 46)
            .find(|&i| {
                archive[i..i + 4] == CENTRAL_SIG.to_le_bytes()
                    && archive[i + 46..].starts_with(name.as_bytes())
            })
            .unwrap()
    }

    fn eocd_of(archive: &[u8]) -> usize {
        (0..archive.len() - 21)
            .rev()
            .find(|&i| archive[i..i + 4] == EOCD_SIG.to_le_bytes())
            .unwrap()
    }

    fn index_err(archive: Vec<u8>) -> Error {
        ZipIndex::read(&bytes(archive), &Limits::default()).unwrap_err()
    }

    #[test]
    fn unsupported_methods_encryption_and_bad_names() {
        let archive = build(&members());
        let cd = central_header_of(&archive, "b.npy");
        let mut a = archive.clone();
        a[cd + 10..cd + 12].copy_from_slice(&12u16.to_le_bytes());
        let e = index_err(a);
        assert!(
            matches!(&e.kind, ErrorKind::Unsupported(m) if m.contains("'b.npy'") && m.contains("bzip2")),
            "{e}"
        );
        assert_eq!(e.location.entry.as_deref(), Some("b.npy"));

        let mut a = archive.clone();
        a[cd + 8] |= 1;
        let e = index_err(a);
        assert!(
            matches!(&e.kind, ErrorKind::Unsupported(m) if m.contains("encrypted")),
            "{e}"
        );

        let mut a = archive.clone();
        a[cd + 46] = 0xff;
        let e = index_err(a);
        assert!(
            matches!(&e.kind, ErrorKind::Invalid(m) if m.contains("not UTF-8")),
            "{e}"
        );
        assert_eq!(e.location.offset, Some(cd as u64 + 46));

        // A local header whose name differs from the central directory's.
        let m = ZipIndex::read(&bytes(archive.clone()), &Limits::default())
            .unwrap()
            .find("b.npy")
            .unwrap()
            .clone();
        let mut a = archive.clone();
        let local_name = m.local_offset as usize + 30;
        assert_eq!(&a[local_name..local_name + 5], b"b.npy");
        a[local_name] = b'x';
        // The index reads the central directory only; the local header is checked when
        // the member's data is first needed.
        let src = bytes(a);
        let m = ZipIndex::read(&src, &Limits::default())
            .unwrap()
            .find("b.npy")
            .unwrap()
            .clone();
        for e in [
            m.data_offset(&src).unwrap_err(),
            read_all(&src, &m).unwrap_err(),
            read_source(&src, &m).unwrap_err(),
        ] {
            assert!(
                matches!(&e.kind, ErrorKind::Invalid(m) if m.contains("local header names the member \"x.npy\"")),
                "{e}"
            );
            assert_eq!(e.location.entry.as_deref(), Some("b.npy"));
            assert_eq!(e.location.offset, Some(m.local_offset));
        }
    }

    #[test]
    fn truncated_archives_fail_cleanly() {
        let archive = build(&members());
        let limits = Limits::default();
        for cut in (0..archive.len())
            .step_by(97)
            .chain(archive.len() - 30..archive.len())
        {
            let e = ZipIndex::read(&bytes(archive[..cut].to_vec()), &limits).unwrap_err();
            assert!(
                matches!(
                    e.kind,
                    ErrorKind::Invalid(_)
                        | ErrorKind::BadMagic { .. }
                        | ErrorKind::Truncated { .. }
                ),
                "cut {cut}: {e}"
            );
        }
        let e = index_err(Vec::new());
        assert!(e.to_string().contains("not a zip archive"), "{e}");
        let e = index_err(vec![0u8; 100_000]);
        assert!(e.to_string().contains("no end-of-central-directory"), "{e}");
    }

    #[test]
    fn forged_counts_and_offsets() {
        let archive = build(&members());
        let eocd = eocd_of(&archive);
        let limits = Limits::default();
        // The archive has a ZIP64 EOCD only when needed; this one is small: plain EOCD.
        let mut a = archive.clone();
        a[eocd + 8..eocd + 12].copy_from_slice(&[0xfe, 0xff, 0xfe, 0xff]);
        // Refused from the end records alone, before any entry is read.
        let e = ZipIndex::read(&bytes(a), &limits).unwrap_err();
        assert!(
            matches!(&e.kind, ErrorKind::Invalid(m) if m.contains("65534 entries")),
            "{e}"
        );
        // A directory size larger than what precedes it.
        let mut a = archive.clone();
        a[eocd + 12..eocd + 16].copy_from_slice(&0x7fff_fff0u32.to_le_bytes());
        let e = ZipIndex::read(&bytes(a), &limits).unwrap_err();
        assert!(matches!(&e.kind, ErrorKind::Invalid(_)), "{e}");
        // A directory offset past the directory.
        let mut a = archive.clone();
        a[eocd + 16..eocd + 20].copy_from_slice(&0x7fff_fff0u32.to_le_bytes());
        let e = ZipIndex::read(&bytes(a), &limits).unwrap_err();
        assert!(matches!(&e.kind, ErrorKind::Invalid(_)), "{e}");
        // Fewer entries than recorded is fine for the count check but the directory
        // then ends early or holds junk.
        let mut a = archive.clone();
        a[eocd + 8..eocd + 12].copy_from_slice(&[8, 0, 8, 0]);
        assert!(ZipIndex::read(&bytes(a), &limits).is_err());
        // The entry limit.
        let few = Limits {
            max_entries: 3,
            ..Limits::default()
        };
        let e = ZipIndex::read(&bytes(archive.clone()), &few).unwrap_err();
        assert!(matches!(e.kind, ErrorKind::Limit { actual: 7, .. }), "{e}");
        // A forged ZIP64 record: 2^60 entries.
        let mut z = archive[..eocd].to_vec();
        let cd_start = u32::from_le_bytes(archive[eocd + 16..eocd + 20].try_into().unwrap());
        let cd_size = u32::from_le_bytes(archive[eocd + 12..eocd + 16].try_into().unwrap());
        let eocd64_pos = z.len() as u64;
        z.extend_from_slice(&EOCD64_SIG.to_le_bytes());
        z.extend_from_slice(&44u64.to_le_bytes());
        z.extend_from_slice(&[45, 0, 45, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        z.extend_from_slice(&(1u64 << 60).to_le_bytes());
        z.extend_from_slice(&(1u64 << 60).to_le_bytes());
        z.extend_from_slice(&(cd_size as u64).to_le_bytes());
        z.extend_from_slice(&(cd_start as u64).to_le_bytes());
        z.extend_from_slice(&LOCATOR64_SIG.to_le_bytes());
        z.extend_from_slice(&0u32.to_le_bytes());
        z.extend_from_slice(&eocd64_pos.to_le_bytes());
        z.extend_from_slice(&1u32.to_le_bytes());
        z.extend_from_slice(&archive[eocd..]);
        let n = z.len();
        z[n - 12..n - 2].copy_from_slice(&[0xff; 10]);
        let e = ZipIndex::read(&bytes(z.clone()), &limits).unwrap_err();
        assert!(matches!(e.kind, ErrorKind::Limit { .. }), "{e}");
        let unlimited = Limits {
            max_entries: u64::MAX,
            ..Limits::default()
        };
        let e = ZipIndex::read(&bytes(z.clone()), &unlimited).unwrap_err();
        assert!(
            matches!(&e.kind, ErrorKind::Invalid(m) if m.contains("cannot fit")),
            "{e}"
        );
        // The same hand-made ZIP64 record with the true count indexes correctly.
        let count_at = eocd64_pos as usize + 24;
        z[count_at..count_at + 8].copy_from_slice(&7u64.to_le_bytes());
        z[count_at + 8..count_at + 16].copy_from_slice(&7u64.to_le_bytes());
        let index = ZipIndex::read(&bytes(z), &limits).unwrap();
        assert_eq!(index.members().len(), 7);
    }

    #[test]
    fn overlapping_members_and_repeated_names_are_refused() {
        let archive = build(&members());
        let index = ZipIndex::read(&bytes(archive.clone()), &Limits::default()).unwrap();
        let (a, b) = (index.find("a.npy").unwrap(), index.find("b.npy").unwrap());
        let b_local = b.local_offset as usize;
        let a_data = a.data_offset(&bytes(archive.clone())).unwrap();
        let a_extra = a_data - a.local_offset - 30 - 5;
        assert!(a_extra > 1, "a.npy's local header has an extra field");

        // a.npy (stored) recorded as running over b.npy's local header, past anything
        // its own local extra field could hold: refused by the index.
        let mut z = archive.clone();
        let cd = central_header_of(&z, "a.npy");
        let grown = (b_local as u64 + 200 - a_data) as u32;
        z[cd + 20..cd + 24].copy_from_slice(&grown.to_le_bytes());
        z[cd + 24..cd + 28].copy_from_slice(&grown.to_le_bytes());
        let e = index_err(z);
        assert!(
            matches!(&e.kind, ErrorKind::Invalid(m) if m.contains("'a.npy'") && m.contains("'b.npy'") && m.contains("overlap")),
            "{e}"
        );
        assert_eq!(e.location.offset, Some(b_local as u64));

        // Running one byte into it: only a.npy's local header (its extra field) shows
        // the overlap, so it is refused when its data is read.
        let mut z = archive.clone();
        let grown = (b_local as u64 + 1 - a_data) as u32;
        z[cd + 20..cd + 24].copy_from_slice(&grown.to_le_bytes());
        z[cd + 24..cd + 28].copy_from_slice(&grown.to_le_bytes());
        let src = bytes(z);
        let index = ZipIndex::read(&src, &Limits::default()).unwrap();
        let a = index.find("a.npy").unwrap();
        assert_eq!(a.end_bound, b_local as u64);
        for e in [
            read_all(&src, a).unwrap_err(),
            read_source(&src, a).unwrap_err(),
        ] {
            assert!(
                matches!(&e.kind, ErrorKind::Invalid(m) if m.contains(&format!("runs past byte {b_local}"))),
                "{e}"
            );
            assert_eq!(e.location.entry.as_deref(), Some("a.npy"));
        }
        assert!(read_all(&src, index.find("b.npy").unwrap()).is_ok());

        // A second central entry for b.npy's local header: overlap (one header, two
        // entries) is found before the repeated name.
        let eocd = eocd_of(&archive);
        let cd_b = central_header_of(&archive, "b.npy");
        let cd_len =
            46 + 5 + le16(&archive, cd_b + 30) as usize + le16(&archive, cd_b + 32) as usize;
        let mut z = archive[..eocd].to_vec();
        z.extend_from_slice(&archive[cd_b..cd_b + cd_len]);
        let mut end = archive[eocd..eocd + 22].to_vec();
        for at in [8, 10] {
            let n = u16::from_le_bytes([end[at], end[at + 1]]) + 1;
            end[at..at + 2].copy_from_slice(&n.to_le_bytes());
        }
        let size = u32::from_le_bytes(end[12..16].try_into().unwrap()) + cd_len as u32;
        end[12..16].copy_from_slice(&size.to_le_bytes());
        z.extend_from_slice(&end);
        let e = index_err(z);
        assert!(
            matches!(&e.kind, ErrorKind::Invalid(m) if m.contains("overlap")),
            "{e}"
        );

        // The same name twice, each with its own local header and data.
        // (The writer refuses to repeat a name: z.npy is renamed in both its headers.)
        let mut dup = build(&[
            ("x.npy", Compression::Stored, 0, content(100, 1)),
            ("y.npy", Compression::Deflate, 0, content(100, 2)),
            ("z.npy", Compression::Stored, 0, content(100, 3)),
        ]);
        let z_local = ZipIndex::read(&bytes(dup.clone()), &Limits::default())
            .unwrap()
            .find("z.npy")
            .unwrap()
            .local_offset as usize;
        let z_central = central_header_of(&dup, "z.npy");
        dup[z_local + 30] = b'x';
        dup[z_central + 46] = b'x';
        let e = index_err(dup);
        assert!(
            matches!(&e.kind, ErrorKind::Invalid(m) if m.contains("'x.npy' appears more than once")),
            "{e}"
        );
        assert_eq!(e.location.entry.as_deref(), Some("x.npy"));
        // Members of zero bytes still occupy their local headers: no false overlap.
        let empties = build(&[
            ("e1", Compression::Stored, 0, Vec::new()),
            ("e2", Compression::Deflate, 0, Vec::new()),
            ("e3", Compression::Stored, 64, Vec::new()),
        ]);
        assert_eq!(
            ZipIndex::read(&bytes(empties), &Limits::default())
                .unwrap()
                .members()
                .len(),
            3
        );
    }

    #[test]
    fn metadata_reads_reserve_what_the_archive_holds_not_what_it_claims() {
        let claim = |compression, compressed_size, size| ZipMember {
            name: "data.pkl".into(),
            local_offset: 0,
            end_bound: u64::MAX,
            compressed_size,
            size,
            compression,
            crc32: 0,
        };
        assert_eq!(initial_capacity(&claim(Compression::Stored, 300, 300)), 300);
        assert_eq!(
            initial_capacity(&claim(Compression::Deflate, 200, 900)),
            900
        );
        // 200 compressed bytes declaring 100 MiB: one block is reserved, not 100 MiB.
        assert_eq!(
            initial_capacity(&claim(Compression::Deflate, 200, 100 << 20)),
            BLOCK as u64
        );
        assert_eq!(
            initial_capacity(&claim(Compression::Deflate, 1 << 20, 100 << 20)),
            1 << 20
        );
        // And such a member is refused for its ratio (and its content checked), whatever
        // was reserved.
        let archive = build(&[("m", Compression::Deflate, 0, b"short".repeat(40))]);
        let mut z = archive.clone();
        let cd = central_header_of(&z, "m");
        // The writer records sizes in a ZIP64 extra field (size first).
        assert_eq!(le32(&z, cd + 24), u32::MAX);
        let extra = cd + 46 + 1;
        assert_eq!(le16(&z, extra), 1, "ZIP64 extra field first");
        z[extra + 4..extra + 12].copy_from_slice(&((100u64 << 20) - 1).to_le_bytes());
        let src = bytes(z);
        let index = ZipIndex::read(&src, &Limits::default()).unwrap();
        let e = read_member(&src, &index.members()[0], &Limits::default()).unwrap_err();
        assert!(matches!(e.kind, ErrorKind::Limit { .. }), "{e}");
        let lax = Limits {
            max_compression_ratio: u64::MAX,
            ..Limits::default()
        };
        let e = read_member(&src, &index.members()[0], &lax).unwrap_err();
        assert!(matches!(e.kind, ErrorKind::SizeMismatch(_)), "{e}");
    }

    #[test]
    fn random_damage_never_panics() {
        let archive = build(&[
            ("a.npy", Compression::Stored, 64, content(1000, 1)),
            ("b.npy", Compression::Deflate, 0, content(3000, 2)),
            ("c.npy", Compression::Stored, 0, Vec::new()),
            ("d.npy", Compression::Deflate, 0, Vec::new()),
        ]);
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let limits = Limits::default();
        for _ in 0..10_000 {
            let mut a = archive.clone();
            for _ in 0..4 {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                // Bias towards the directory and headers.
                let pos = if state & 1 == 0 {
                    a.len() - 1 - ((state >> 8) as usize % 400).min(a.len() - 1)
                } else {
                    (state >> 8) as usize % a.len()
                };
                a[pos] = (state >> 40) as u8;
            }
            let src = bytes(a);
            if let Ok(index) = ZipIndex::read(&src, &limits) {
                for m in index.members() {
                    let _ = read_all(&src, m);
                    let _ = read_source(&src, m);
                }
            }
        }
    }

    #[test]
    fn zip64_entry_count_from_the_zip_crate() {
        // More than 65535 members forces the ZIP64 end records.
        let mut w = ZipWriter::new(Cursor::new(Vec::new()));
        let n = 65_540;
        for i in 0..n {
            w.start_member(&format!("{i}"), Compression::Stored, 0)
                .unwrap();
            w.write_all(&[i as u8]).unwrap();
        }
        let archive = w.finish().unwrap().into_inner();
        let src = bytes(archive);
        let index = ZipIndex::read(&src, &Limits::default()).unwrap();
        assert_eq!(index.members().len(), n);
        let last = index.find("65539").unwrap();
        assert_eq!(read_all(&src, last).unwrap(), vec![65539u32 as u8]);
    }

    #[test]
    fn writer_misuse() {
        let mut w = ZipWriter::new(Cursor::new(Vec::new()));
        let e = w.write(b"x").unwrap_err();
        assert!(matches!(io_to_error(e).kind, ErrorKind::Invalid(_)));
        w.start_member("a", Compression::Stored, 0).unwrap();
        let e = w.start_member("a", Compression::Stored, 0).unwrap_err();
        assert_eq!(e.location.entry.as_deref(), Some("a"));
        // Plain io errors pass through io_to_error as Io.
        let e = io_to_error(io::Error::new(io::ErrorKind::UnexpectedEof, "eof"));
        assert!(matches!(e.kind, ErrorKind::Io(_)));
    }

    #[test]
    fn member_names_past_the_zip_limit_are_refused_without_a_panic() {
        let at_limit = "a".repeat(MAX_NAME_BYTES as usize);
        let over = "\u{20ac}".repeat(21_846); // 65,538 bytes in 21,846 characters
        let mut w = ZipWriter::new(Cursor::new(Vec::new()));
        w.start_member("first", Compression::Stored, 64).unwrap();
        w.write_all(b"1").unwrap();
        let e = w.start_member(&over, Compression::Deflate, 64).unwrap_err();
        assert!(e.to_string().contains("65538 bytes"), "{e}");
        assert_eq!(e.location.entry.as_deref(), Some(over.as_str()));
        w.start_member(&at_limit, Compression::Stored, 64).unwrap();
        w.write_all(b"2").unwrap();
        let archive = w.finish().unwrap().into_inner();
        let index = ZipIndex::read(&bytes(archive), &Limits::default()).unwrap();
        assert_eq!(index.members().len(), 2);
        assert_eq!(index.members()[1].name, at_limit);
        // Dropped after the refusal, unfinished: no panic either.
        let mut w = ZipWriter::new(Cursor::new(Vec::new()));
        assert!(w.start_member(&over, Compression::Stored, 0).is_err());
        drop(w);
    }

    fn python() -> Option<&'static str> {
        let ok = std::process::Command::new("python3")
            .args(["-c", "import zipfile"])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        if ok {
            Some("python3")
        } else {
            println!("skipped: python3 not available");
            None
        }
    }

    #[test]
    fn python_written_archives_index() {
        let Some(py) = python() else { return };
        let dir = tempfile::tempdir().unwrap();
        // A plain archive, one with ZIP64 forced everywhere (as NumPy's savez does for
        // members, plus ZIP64 end records by lowering the module's thresholds), and one
        // written to an unseekable stream (data descriptors).
        let script = r#"
import sys, zipfile, io
d = sys.argv[1]
def fill(z, force):
    z.writestr(zipfile.ZipInfo('a.npy'), bytes(range(256)) * 4)
    with z.open('b.npy', 'w', force_zip64=force) as f:
        f.write(b'hello world ' * 5000)
    zi = zipfile.ZipInfo('c/é.npy'); zi.compress_type = zipfile.ZIP_DEFLATED
    z.writestr(zi, b'x' * 100000)
    z.writestr('empty', b'', compress_type=zipfile.ZIP_DEFLATED)
with zipfile.ZipFile(d + '/plain.zip', 'w') as z:
    fill(z, False)
zipfile.ZIP64_LIMIT = 10
zipfile.ZIP_FILECOUNT_LIMIT = 1
with zipfile.ZipFile(d + '/zip64.zip', 'w', compression=zipfile.ZIP_DEFLATED) as z:
    fill(z, True)
class Unseekable(io.RawIOBase):
    def __init__(self, f): self.f = f
    def writable(self): return True
    def write(self, b): return self.f.write(b)
with open(d + '/stream.zip', 'wb') as raw:
    with zipfile.ZipFile(Unseekable(raw), 'w', compression=zipfile.ZIP_DEFLATED) as z:
        fill(z, True)
with open(d + '/prefixed.zip', 'wb') as f:
    f.write(b'#!/bin/sh\nstub\n' * 10 + open(d + '/zip64.zip', 'rb').read())
"#;
        let out = std::process::Command::new(py)
            .args(["-c", script, dir.path().to_str().unwrap()])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let want: Vec<(&str, Vec<u8>)> = vec![
            ("a.npy", (0..=255u8).collect::<Vec<_>>().repeat(4)),
            ("b.npy", b"hello world ".repeat(5000)),
            ("c/é.npy", vec![b'x'; 100_000]),
            ("empty", Vec::new()),
        ];
        for file in ["plain.zip", "zip64.zip", "stream.zip", "prefixed.zip"] {
            let source = Source::open(dir.path().join(file)).unwrap();
            let src = source.data();
            let index =
                ZipIndex::read(src, &Limits::default()).unwrap_or_else(|e| panic!("{file}: {e}"));
            let names: Vec<&str> = index.members().iter().map(|m| m.name.as_str()).collect();
            assert_eq!(names, ["a.npy", "b.npy", "c/é.npy", "empty"], "{file}");
            for ((name, data), m) in want.iter().zip(index.members()) {
                assert_eq!(m.size, data.len() as u64, "{file} {name}");
                assert_eq!(&read_all(src, m).unwrap(), data, "{file} {name}");
                assert_eq!(&read_source(src, m).unwrap(), data, "{file} {name}");
            }
            if file == "plain.zip" {
                assert_eq!(index.members()[0].compression, Compression::Stored);
                assert_eq!(index.members()[2].compression, Compression::Deflate);
            }
        }
    }

    #[test]
    fn python_reads_our_archives() {
        let Some(py) = python() else { return };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ours.zip");
        let ms = members();
        std::fs::write(&path, build(&ms)).unwrap();
        let script = r#"
import sys, zipfile, hashlib
with zipfile.ZipFile(sys.argv[1]) as z:
    assert z.testzip() is None
    for i in z.infolist():
        print(i.filename, i.compress_type, i.file_size, hashlib.sha256(z.read(i)).hexdigest())
"#;
        let out = std::process::Command::new(py)
            .args(["-c", script, path.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), ms.len());
        for ((name, c, _, data), line) in ms.iter().zip(lines) {
            let method = if *c == Compression::Stored { 0 } else { 8 };
            let prefix = format!("{name} {method} {} ", data.len());
            assert!(line.starts_with(&prefix), "{line} vs {prefix}");
        }
    }
}
