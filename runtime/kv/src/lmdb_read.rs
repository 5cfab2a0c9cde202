//! A bounds-checked, read-only reader of LMDB's `data.mdb`, in Rust: reading never hands
//! the file to liblmdb, which trusts it (a truncated or corrupted file makes it read out of
//! its map and crash the process).
//!
//! LMDB's on-disk format (`mdb.c`, the 64-bit layout every build of LMDB writes): pages
//! of the size the meta page gives; pages 0 and 1 are meta pages, the one with the larger
//! transaction id current; it holds the main database's root page. A page starts with a
//! 16-byte header (page number u64, pad u16, flags u16, then `lower`/`upper` u16 — or,
//! for the first of a run of overflow pages, the run's length u32). Branch and leaf pages
//! hold `(lower - 16) / 2` u16 offsets of their nodes; a node is `lo` u16, `hi` u16,
//! `flags` u16, `ksize` u16, the key, then (leaf) the value, of `lo | hi << 16` bytes, in
//! the page or (`F_BIGDATA`) in overflow pages whose first page number is the node's
//! data; a branch node's child page is `lo | hi << 16 | flags << 32`.
//!
//! Every page number, offset and length is checked against the file before it is used;
//! every page is visited at most once (a cycle is an error, not a hang); keys must come in
//! strictly increasing order. Duplicate-sorted databases (`F_DUPDATA`), which no Caffe2
//! database uses, are refused.

use std::path::Path;

use tensorfmt_core::db::Record;
use tensorfmt_core::error::{Error, ErrorKind, Location, Result};

/// The page header's size.
const HEADER: usize = 16;
/// A node's header's size.
const NODE: usize = 8;
const P_BRANCH: u16 = 0x01;
const P_LEAF: u16 = 0x02;
const P_OVERFLOW: u16 = 0x04;
const P_META: u16 = 0x08;
const F_BIGDATA: u16 = 0x01;
const F_DUPDATA: u16 = 0x04;
const MAGIC: u32 = 0xBEEF_C0DE;
/// LMDB's `MDB_DUPSORT` database flag.
const DUPSORT: u16 = 0x04;
/// Deeper trees than this cannot be in a file of 2^64 bytes (each branch page has at
/// least two children).
const MAX_DEPTH: usize = 64;

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// An LMDB database tree (`MDB_db`) as the meta page gives it.
#[derive(Debug, Clone, Copy)]
pub struct Tree {
    /// `md_flags`.
    pub flags: u16,
    /// `md_depth`.
    pub depth: u16,
    /// `md_entries`.
    pub entries: u64,
    /// `md_root` (`u64::MAX`: empty).
    pub root: u64,
}

/// The current meta page of a `data.mdb`.
#[derive(Debug, Clone, Copy)]
pub struct Meta {
    /// The page size.
    pub psize: usize,
    /// The free-page tree.
    pub free: Tree,
    /// The main (unnamed) database's tree.
    pub main: Tree,
    /// The transaction that wrote it.
    pub txnid: u64,
}

fn tree_at(b: &[u8], at: usize) -> Option<Tree> {
    Some(Tree {
        flags: u16_at(b, at + 4)?,
        depth: u16_at(b, at + 6)?,
        entries: u64_at(b, at + 32)?,
        root: u64_at(b, at + 40)?,
    })
}

/// A reader of one `data.mdb`, all of whose bytes are `all`.
pub struct Reader<'a> {
    all: &'a [u8],
    path: &'a Path,
    meta: Meta,
    pages: u64,
}

impl<'a> Reader<'a> {
    /// Reads the meta pages of `all` (the bytes of `path`, for errors) and picks the
    /// current one as LMDB does (valid magic and version, the larger transaction id).
    pub fn new(path: &'a Path, all: &'a [u8]) -> Result<Reader<'a>> {
        let err = |msg: String, at: u64| {
            Error::new(
                ErrorKind::Invalid(msg),
                Location::file(path).with_offset(at),
            )
        };
        if all.len() < 2 * 512 {
            return Err(Error::new(
                ErrorKind::Truncated {
                    needed: 2 * 512,
                    available: all.len() as u64,
                },
                Location::file(path),
            ));
        }
        // The page size is in the first meta page (`mm_psize`, at byte 40); the second
        // meta page is the second page.
        let psize = u32_at(all, 40).unwrap_or(0) as usize;
        if !(psize.is_power_of_two() && (512..=1 << 16).contains(&psize)) {
            return Err(err(
                format!(
                    "not an LMDB data.mdb: its meta page gives the page size {psize} (a power \
                     of two from 512 to 65536 is expected)"
                ),
                40,
            ));
        }
        let read_meta = |at: usize| -> Option<Meta> {
            let page = all.get(at..at.checked_add(psize)?)?;
            let flags = u16_at(page, 10)?;
            if flags & P_META == 0 || u32_at(page, 16)? != MAGIC || u32_at(page, 20)? != 1 {
                return None;
            }
            Some(Meta {
                psize,
                free: tree_at(page, 40)?,
                main: tree_at(page, 88)?,
                txnid: u64_at(page, 144)?,
            })
        };
        let meta = match (read_meta(0), read_meta(psize)) {
            (Some(a), Some(b)) => {
                if a.txnid < b.txnid {
                    b
                } else {
                    a
                }
            }
            (Some(a), None) | (None, Some(a)) => a,
            (None, None) => {
                return Err(err(
                    format!(
                        "not an LMDB data.mdb ({} bytes): neither meta page (bytes 0 and {psize}) \
                         has LMDB's magic 0xBEEFC0DE and format version 1",
                        all.len()
                    ),
                    16,
                ))
            }
        };
        Ok(Reader {
            all,
            path,
            meta,
            pages: (all.len() / psize) as u64,
        })
    }

    /// The current meta page.
    pub fn meta(&self) -> &Meta {
        &self.meta
    }

    fn err(&self, msg: String, at: u64) -> Error {
        Error::new(
            ErrorKind::Invalid(format!("corrupted LMDB data.mdb: {msg}")),
            Location::file(self.path).with_offset(at),
        )
    }

    /// The bytes of page `pgno` (checked within the file and numbered `pgno`).
    fn page(&self, pgno: u64, from: u64) -> Result<&'a [u8]> {
        let psize = self.meta.psize;
        if pgno < 2 || pgno >= self.pages {
            return Err(self.err(
                format!(
                    "page {pgno} is not a data page of the file ({} pages of {psize} bytes)",
                    self.pages
                ),
                from,
            ));
        }
        let at = pgno as usize * psize;
        let page = &self.all[at..at + psize];
        if u64_at(page, 0) != Some(pgno) {
            return Err(self.err(
                format!("page {pgno} does not hold its own number"),
                at as u64,
            ));
        }
        Ok(page)
    }

    /// Every record of the main database, in key order: its key and where its value is
    /// in the file.
    pub fn records(&self) -> Result<Vec<Record>> {
        let main = self.meta.main;
        if main.flags & DUPSORT != 0 {
            return Err(Error::new(
                ErrorKind::Unsupported("an LMDB database with duplicate keys (MDB_DUPSORT)".into()),
                Location::file(self.path),
            ));
        }
        let mut out = Vec::new();
        self.walk(main, |key, at, len| {
            out.push(Record {
                key: key.to_vec(),
                offset: at,
                len,
            });
            Ok(())
        })?;
        Ok(out)
    }

    /// Checks every page the main database and the free-page tree use (what LMDB reads
    /// and writes when it opens the file to write).
    pub fn check(&self) -> Result<()> {
        self.walk(self.meta.free, |_, _, _| Ok(()))?;
        self.walk(self.meta.main, |_, _, _| Ok(()))
    }

    /// Walks the tree `tree` in key order, giving each record's key, value offset and
    /// value length to `f`.
    fn walk(&self, tree: Tree, mut f: impl FnMut(&[u8], u64, u64) -> Result<()>) -> Result<()> {
        if tree.root == u64::MAX {
            return Ok(());
        }
        let psize = self.meta.psize;
        let mut seen = vec![false; self.pages as usize];
        // Pages to visit: (page, depth, where its number was read).
        let mut stack: Vec<(u64, usize, u64)> = vec![(tree.root, 1, 0)];
        let mut last: Option<&[u8]> = None;
        let mut count = 0u64;
        while let Some((pgno, depth, from)) = stack.pop() {
            let page = self.page(pgno, from)?;
            let base = pgno * psize as u64;
            if std::mem::replace(&mut seen[pgno as usize], true) {
                return Err(self.err(format!("page {pgno} is reached twice"), from));
            }
            if depth > MAX_DEPTH {
                return Err(self.err(format!("the tree is deeper than {MAX_DEPTH}"), base));
            }
            let flags = u16_at(page, 10).unwrap_or(0);
            let branch = flags & P_BRANCH != 0;
            if flags & (P_BRANCH | P_LEAF) == 0 || flags & (P_OVERFLOW | P_META) != 0 {
                return Err(self.err(
                    format!("page {pgno} is not a branch or leaf page (flags {flags:#x})"),
                    base + 10,
                ));
            }
            let lower = u16_at(page, 12).unwrap_or(0) as usize;
            let upper = u16_at(page, 14).unwrap_or(0) as usize;
            if lower < HEADER || lower > upper || upper > psize || (lower - HEADER) % 2 != 0 {
                return Err(self.err(
                    format!("page {pgno} has the free space [{lower}, {upper})"),
                    base + 12,
                ));
            }
            let n = (lower - HEADER) / 2;
            if branch && n == 0 {
                return Err(self.err(format!("branch page {pgno} is empty"), base + 12));
            }
            let mut children = Vec::new();
            for i in 0..n {
                let slot = HEADER + 2 * i;
                let at = u16_at(page, slot).unwrap_or(0) as usize;
                let node_at = base + at as u64;
                let node = page
                    .get(at..)
                    .filter(|_| at >= upper)
                    .and_then(|rest| rest.get(..NODE).map(|h| (h, rest)));
                let Some((h, rest)) = node else {
                    return Err(self.err(
                        format!("node {i} of page {pgno} is at {at}, outside [{upper}, {psize})"),
                        base + slot as u64,
                    ));
                };
                let lo = u16::from_le_bytes([h[0], h[1]]) as u64;
                let hi = u16::from_le_bytes([h[2], h[3]]) as u64;
                let nflags = u16::from_le_bytes([h[4], h[5]]);
                let ksize = u16::from_le_bytes([h[6], h[7]]) as usize;
                let Some(key) = rest.get(NODE..NODE + ksize) else {
                    return Err(self.err(
                        format!(
                            "the key of node {i} of page {pgno} ({ksize} bytes) runs past the page"
                        ),
                        node_at,
                    ));
                };
                if branch {
                    children.push((lo | hi << 16 | (nflags as u64) << 32, node_at));
                    continue;
                }
                if nflags & F_DUPDATA != 0 {
                    return Err(Error::new(
                        ErrorKind::Unsupported(
                            "an LMDB database with duplicate keys (F_DUPDATA)".into(),
                        ),
                        Location::file(self.path).with_offset(node_at),
                    ));
                }
                if last.is_some_and(|l| l >= key) {
                    return Err(
                        self.err(format!("the keys of page {pgno} are out of order"), node_at)
                    );
                }
                last = Some(key);
                let len = lo | hi << 16;
                let data_at = node_at + (NODE + ksize) as u64;
                let value_at = if nflags & F_BIGDATA != 0 {
                    let Some(first) = rest.get(NODE + ksize..).and_then(|d| u64_at(d, 0)) else {
                        return Err(self.err(
                            format!("the overflow page number of node {i} of page {pgno} runs past the page"),
                            data_at,
                        ));
                    };
                    self.overflow(first, len, data_at, &mut seen)?
                } else {
                    if rest.len() < NODE + ksize + len as usize {
                        return Err(self.err(
                            format!("the value of node {i} of page {pgno} ({len} bytes) runs past the page"),
                            data_at,
                        ));
                    }
                    data_at
                };
                count += 1;
                f(key, value_at, len)?;
            }
            // In key order: the first child on top.
            for &(child, at) in children.iter().rev() {
                stack.push((child, depth + 1, at));
            }
        }
        if count != tree.entries && tree.flags & DUPSORT == 0 {
            return Err(self.err(
                format!(
                    "the meta page counts {} records, the tree holds {count}",
                    tree.entries
                ),
                0,
            ));
        }
        Ok(())
    }

    /// Where a value of `len` bytes in the overflow pages starting at `first` is.
    fn overflow(&self, first: u64, len: u64, from: u64, seen: &mut [bool]) -> Result<u64> {
        let page = self.page(first, from)?;
        let psize = self.meta.psize as u64;
        let base = first * psize;
        let flags = u16_at(page, 10).unwrap_or(0);
        let count = u32_at(page, 12).unwrap_or(0) as u64;
        if flags & P_OVERFLOW == 0 {
            return Err(self.err(
                format!("page {first} is not an overflow page (flags {flags:#x})"),
                base + 10,
            ));
        }
        let room = count.saturating_mul(psize).saturating_sub(HEADER as u64);
        if count == 0 || first.saturating_add(count) > self.pages || len > room {
            return Err(self.err(
                format!(
                    "a value of {len} bytes in {count} overflow pages from page {first} does not \
                     fit the file ({} pages)",
                    self.pages
                ),
                base + 12,
            ));
        }
        for p in first..first + count {
            if std::mem::replace(&mut seen[p as usize], true) {
                return Err(self.err(format!("page {p} is reached twice"), from));
            }
        }
        Ok(base + HEADER as u64)
    }
}
