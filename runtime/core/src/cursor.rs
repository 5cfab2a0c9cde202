//! The byte-layout reader used by generated code: reads fixed fields, byte strings and
//! payload spans of a layout, field by field, checking every length against the bytes
//! that remain before reading or allocating. Every error names the field and the byte
//! offset where it starts.

use std::borrow::Cow;

use crate::error::{Error, ErrorKind, Location, Result};
use crate::source::RandomAccess;

/// Sequential, checked reads of a layout in a random-access source.
///
/// Positions: the cursor reads `src` from a start offset (0 unless
/// [`Cursor::starting_at`]) up to an end (the source's length unless
/// [`Cursor::limited_to`]). [`Cursor::pos`] is relative to the start (the layout's first
/// byte); [`Cursor::abs_pos`] adds the base, the absolute offset of the source's byte 0 in
/// the file (0 unless [`Cursor::with_base`], for example for a window on a stored zip
/// member), and is what errors report and [`Cursor::span`] returns.
pub struct Cursor<'a> {
    src: &'a dyn RandomAccess,
    loc: Location,
    base: u64,
    start: u64,
    pos: u64,
    end: u64,
    /// The field last read and where it started (source offset), so that errors raised
    /// after reading a field point at its first byte.
    last_field: String,
    last_start: u64,
}

impl std::fmt::Debug for Cursor<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cursor")
            .field("loc", &self.loc)
            .field("base", &self.base)
            .field("start", &self.start)
            .field("pos", &self.pos)
            .field("end", &self.end)
            .finish()
    }
}

macro_rules! read_num {
    ($($(#[$doc:meta])* $name:ident: $ty:ty, $n:literal, $conv:ident;)*) => {
        $(
            $(#[$doc])*
            pub fn $name(&mut self, field: &str) -> Result<$ty> {
                let mut b = [0u8; $n];
                self.fill(field, &mut b)?;
                Ok(<$ty>::$conv(b))
            }
        )*
    };
}

impl<'a> Cursor<'a> {
    /// A cursor over all of `src`, at its first byte. `loc` names the file and entry for
    /// errors (its field and offset are ignored).
    pub fn new(src: &'a dyn RandomAccess, loc: Location) -> Self {
        let end = src.len();
        Cursor {
            src,
            loc: Location {
                field: None,
                offset: None,
                ..loc
            },
            base: 0,
            start: 0,
            pos: 0,
            end,
            last_field: String::new(),
            last_start: 0,
        }
    }

    /// Sets the absolute offset of the source's byte 0 in the file (reported in errors
    /// and returned by [`Cursor::span`]).
    pub fn with_base(mut self, base: u64) -> Self {
        self.base = base;
        self
    }

    /// Starts the layout at `offset` of the source (checked); [`Cursor::pos`] counts from
    /// there.
    pub fn starting_at(mut self, offset: u64) -> Result<Self> {
        if offset > self.end {
            return Err(self.error_at(
                "",
                offset.min(self.end),
                ErrorKind::Truncated {
                    needed: offset,
                    available: self.end,
                },
            ));
        }
        self.start = offset;
        self.pos = offset;
        Ok(self)
    }

    /// Ends the layout `len` bytes after the current position (checked).
    pub fn limited_to(mut self, len: u64) -> Result<Self> {
        self.check_len("", len)?;
        self.end = self.pos + len;
        Ok(self)
    }

    /// The location (file, entry) errors are reported in.
    pub fn location(&self) -> &Location {
        &self.loc
    }

    /// Position relative to the layout's first byte.
    pub fn pos(&self) -> u64 {
        self.pos - self.start
    }

    /// Absolute position (the base plus the offset in the source).
    pub fn abs_pos(&self) -> u64 {
        self.base.saturating_add(self.pos)
    }

    /// Bytes left before the end.
    pub fn remaining(&self) -> u64 {
        self.end - self.pos
    }

    /// True when no bytes remain.
    pub fn at_end(&self) -> bool {
        self.pos >= self.end
    }

    /// An error about `field` at the current position — or, when `field` is the field
    /// just read, at that field's first byte — in the cursor's file and entry.
    pub fn error(&self, field: &str, kind: ErrorKind) -> Error {
        let at = if !field.is_empty() && field == self.last_field {
            self.last_start
        } else {
            self.pos
        };
        self.error_at(field, at, kind)
    }

    /// Places an error from a nested decoder (a codec, a sub-layout) in `field`: the
    /// cursor's file and entry are filled in where missing, `field` is prefixed to the
    /// error's field path, and the offset is set to the field's start if it has none.
    pub fn wrap(&self, field: &str, e: Error) -> Error {
        let at = if field == self.last_field {
            self.last_start
        } else {
            self.pos
        };
        let mut e = e;
        if e.location.offset.is_none() {
            e.location.offset = Some(self.base.saturating_add(at));
        }
        if let Some(file) = &self.loc.file {
            e = e.in_file(file.clone());
        }
        if let Some(entry) = &self.loc.entry {
            e = e.in_entry(entry.clone());
        }
        if field.is_empty() {
            e
        } else {
            e.in_field(field)
        }
    }

    fn error_at(&self, field: &str, at: u64, kind: ErrorKind) -> Error {
        let mut loc = self.loc.clone().with_offset(self.base.saturating_add(at));
        if !field.is_empty() {
            loc = loc.with_field(field);
        }
        Error::new(kind, loc)
    }

    /// Records that `field` starts at the current position.
    fn mark(&mut self, field: &str) {
        self.last_field.clear();
        self.last_field.push_str(field);
        self.last_start = self.pos;
    }

    /// Checks that `len` bytes remain.
    fn check_len(&self, field: &str, len: u64) -> Result<()> {
        if len > self.remaining() {
            return Err(self.error_at(
                field,
                self.pos,
                ErrorKind::Truncated {
                    needed: len,
                    available: self.remaining(),
                },
            ));
        }
        Ok(())
    }

    /// Reads exactly `buf.len()` bytes for `field`.
    fn fill(&mut self, field: &str, buf: &mut [u8]) -> Result<()> {
        self.mark(field);
        let n = buf.len() as u64;
        self.check_len(field, n)?;
        self.src
            .read_exact_at(self.pos, buf)
            .map_err(|e| self.relocate(field, e))?;
        self.pos += n;
        Ok(())
    }

    /// An error of the source, placed at the current field.
    fn relocate(&self, field: &str, mut e: Error) -> Error {
        e.location.offset = Some(self.abs_pos());
        if !field.is_empty() {
            e.location.field = Some(field.to_string());
        }
        if let Some(file) = &self.loc.file {
            e = e.in_file(file.clone());
        }
        if let Some(entry) = &self.loc.entry {
            e = e.in_entry(entry.clone());
        }
        e
    }

    /// Reads `expected.len()` bytes and checks that they are `expected`:
    /// [`ErrorKind::BadMagic`] showing the bytes found (even when fewer remain) if they
    /// differ, [`ErrorKind::Truncated`] if the data ends within a matching prefix.
    pub fn magic(&mut self, field: &str, expected: &[u8]) -> Result<()> {
        self.mark(field);
        let n = (expected.len() as u64).min(self.remaining());
        let mut found = vec![0u8; n as usize];
        self.src
            .read_exact_at(self.pos, &mut found)
            .map_err(|e| self.relocate(field, e))?;
        if found.len() < expected.len() && expected.starts_with(&found) {
            // What is there matches: the data just ends too early.
            return Err(self.error(
                field,
                ErrorKind::Truncated {
                    needed: expected.len() as u64,
                    available: n,
                },
            ));
        }
        if found != expected {
            return Err(self.error(
                field,
                ErrorKind::BadMagic {
                    expected: expected.to_vec(),
                    found,
                },
            ));
        }
        self.pos += n;
        Ok(())
    }

    read_num! {
        /// Reads an unsigned byte.
        u8: u8, 1, from_le_bytes;
        /// Reads a signed byte.
        i8: i8, 1, from_le_bytes;
        /// Reads a little-endian `u16`.
        u16_le: u16, 2, from_le_bytes;
        /// Reads a big-endian `u16`.
        u16_be: u16, 2, from_be_bytes;
        /// Reads a little-endian `u32`.
        u32_le: u32, 4, from_le_bytes;
        /// Reads a big-endian `u32`.
        u32_be: u32, 4, from_be_bytes;
        /// Reads a little-endian `u64`.
        u64_le: u64, 8, from_le_bytes;
        /// Reads a big-endian `u64`.
        u64_be: u64, 8, from_be_bytes;
        /// Reads a little-endian `i16`.
        i16_le: i16, 2, from_le_bytes;
        /// Reads a big-endian `i16`.
        i16_be: i16, 2, from_be_bytes;
        /// Reads a little-endian `i32`.
        i32_le: i32, 4, from_le_bytes;
        /// Reads a big-endian `i32`.
        i32_be: i32, 4, from_be_bytes;
        /// Reads a little-endian `i64`.
        i64_le: i64, 8, from_le_bytes;
        /// Reads a big-endian `i64`.
        i64_be: i64, 8, from_be_bytes;
        /// Reads a little-endian `f32`.
        f32_le: f32, 4, from_le_bytes;
        /// Reads a big-endian `f32`.
        f32_be: f32, 4, from_be_bytes;
        /// Reads a little-endian `f64`.
        f64_le: f64, 8, from_le_bytes;
        /// Reads a big-endian `f64`.
        f64_be: f64, 8, from_be_bytes;
    }

    /// Reads `len` bytes for `field`, after checking that they remain and that `len` is
    /// at most `limit` (so nothing is allocated from a bogus length). Borrows from the
    /// source when it lives in memory, copies otherwise.
    pub fn bytes(&mut self, field: &str, len: u64, limit: u64) -> Result<Cow<'a, [u8]>> {
        self.mark(field);
        self.check_len(field, len)?;
        if len > limit {
            return Err(self.error(
                field,
                ErrorKind::Limit {
                    what: "field length",
                    limit,
                    actual: len,
                },
            ));
        }
        let n = usize::try_from(len).map_err(|_| {
            self.error(
                field,
                ErrorKind::Overflow(format!("{len} bytes do not fit in memory")),
            )
        })?;
        let src: &'a dyn RandomAccess = self.src;
        let out = match src.as_slice() {
            Some(all) => {
                let slice = usize::try_from(self.pos)
                    .ok()
                    .and_then(|p| all.get(p..p.checked_add(n)?))
                    .ok_or_else(|| {
                        self.error(
                            field,
                            ErrorKind::Truncated {
                                needed: len,
                                available: (all.len() as u64).saturating_sub(self.pos),
                            },
                        )
                    })?;
                Cow::Borrowed(slice)
            }
            None => {
                let mut v = vec![0u8; n];
                self.src
                    .read_exact_at(self.pos, &mut v)
                    .map_err(|e| self.relocate(field, e))?;
                Cow::Owned(v)
            }
        };
        self.pos += len;
        Ok(out)
    }

    /// Checks that `len` bytes remain and skips them without reading; returns their
    /// absolute offset and length (a payload's location).
    pub fn span(&mut self, field: &str, len: u64) -> Result<(u64, u64)> {
        self.mark(field);
        self.check_len(field, len)?;
        let at = self.abs_pos();
        self.pos += len;
        Ok((at, len))
    }

    /// Skips to the end; returns the absolute offset and length of what was skipped.
    /// Never fails (a `Result` so that generated code treats it like [`Cursor::span`]).
    pub fn rest(&mut self, field: &str) -> Result<(u64, u64)> {
        let len = self.remaining();
        self.span(field, len)
    }

    /// Skips `n` bytes (checked).
    pub fn skip(&mut self, field: &str, n: u64) -> Result<()> {
        self.span(field, n).map(|_| ())
    }

    /// A `check` after `field` was read: `Ok` when `ok`, else the error `check `text` failed:
    /// field is value`, at the field's first byte.
    pub fn check(
        &self,
        field: &str,
        ok: bool,
        text: &str,
        value: &impl std::fmt::Debug,
    ) -> Result<()> {
        if ok {
            return Ok(());
        }
        Err(self.error(
            field,
            ErrorKind::Invalid(format!("check `{text}` failed: {field} is {value:?}")),
        ))
    }

    /// Moves to `at` bytes after `start` (a [`Cursor::pos`], normally where the layout
    /// began): the `at` of a field. Backwards or forwards, within the layout's bytes.
    pub fn seek(&mut self, field: &str, start: u64, at: u64) -> Result<()> {
        self.mark(field);
        let target = self
            .start
            .checked_add(start)
            .and_then(|s| s.checked_add(at))
            .filter(|t| *t <= self.end)
            .ok_or_else(|| {
                self.error(
                    field,
                    ErrorKind::Truncated {
                        needed: at,
                        available: self.end.saturating_sub(self.start.saturating_add(start)),
                    },
                )
            })?;
        self.pos = target;
        Ok(())
    }

    /// Skips padding so that the position is a multiple of `n` bytes after `start` (a
    /// [`Cursor::pos`], normally where the layout began): the `align` of a field
    /// (checked; `n` of 0 or 1 skips nothing).
    pub fn align_from(&mut self, field: &str, start: u64, n: u64) -> Result<()> {
        if n <= 1 {
            return Ok(());
        }
        let rem = self.pos().wrapping_sub(start) % n;
        let pad = if rem == 0 { 0 } else { n - rem };
        self.skip(field, pad)
    }

    /// A cursor over the next `len` bytes (checked), which this cursor then skips: a
    /// sized nested layout reads its bytes, and no more, through it. Positions of the
    /// new cursor count from its first byte.
    pub fn window(&mut self, field: &str, len: u64) -> Result<Cursor<'a>> {
        self.mark(field);
        self.check_len(field, len)?;
        let w = Cursor {
            src: self.src,
            loc: self.loc.clone(),
            base: self.base,
            start: self.pos,
            pos: self.pos,
            end: self.pos + len,
            last_field: String::new(),
            last_start: self.pos,
        };
        self.pos += len;
        Ok(w)
    }

    /// Reads `len` bytes of UTF-8 text for `field` (at most `limit` bytes; an error naming
    /// the field when the text is not UTF-8).
    pub fn text(&mut self, field: &str, len: u64, limit: u64) -> Result<String> {
        let b = self.bytes(field, len, limit)?;
        match std::str::from_utf8(&b) {
            Ok(s) => Ok(s.to_string()),
            Err(e) => Err(self.error(
                field,
                ErrorKind::Invalid(format!("the text is not UTF-8: {e}")),
            )),
        }
    }

    /// For `repeat until_eof`: true while bytes remain, after checking that the `count`
    /// items read so far are fewer than `limit`.
    pub fn more(&self, field: &str, count: usize, limit: u64) -> Result<bool> {
        if self.at_end() {
            return Ok(false);
        }
        if count as u64 >= limit {
            return Err(self.error(
                field,
                ErrorKind::Limit {
                    what: "repetitions",
                    limit,
                    actual: count as u64 + 1,
                },
            ));
        }
        Ok(true)
    }

    /// Checks a repetition count before anything is allocated for it: each item takes at
    /// least `min_item_bytes` bytes (at least 1 is assumed, since an empty item would
    /// repeat without reading), so at most `remaining / min_item_bytes` items fit; and no
    /// more than `limit` items. Returns the count as a `usize`.
    pub fn count(&self, field: &str, n: u64, min_item_bytes: u64, limit: u64) -> Result<usize> {
        let fit = self.remaining() / min_item_bytes.max(1);
        if n > fit {
            return Err(self.error(
                field,
                ErrorKind::Truncated {
                    needed: n.saturating_mul(min_item_bytes.max(1)),
                    available: self.remaining(),
                },
            ));
        }
        if n > limit {
            return Err(self.error(
                field,
                ErrorKind::Limit {
                    what: "repetitions",
                    limit,
                    actual: n,
                },
            ));
        }
        usize::try_from(n).map_err(|_| {
            self.error(
                field,
                ErrorKind::Overflow(format!("{n} items do not fit in memory")),
            )
        })
    }

    /// Skips padding up to the next absolute offset that is a multiple of `n` (checked;
    /// `n` of 0 or 1 skips nothing).
    pub fn align(&mut self, field: &str, n: u64) -> Result<()> {
        if n <= 1 {
            return Ok(());
        }
        let rem = self.abs_pos() % n;
        let pad = if rem == 0 { 0 } else { n - rem };
        self.skip(field, pad)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::{Bytes, Stream, Window};

    fn mem(v: &[u8]) -> Bytes {
        Bytes::Owned(v.to_vec().into())
    }

    fn loc() -> Location {
        Location::file("f.bin").with_entry("e")
    }

    #[test]
    fn repetition_counts_are_bounded_before_allocating() {
        let b = mem(&[0u8; 16]);
        let c = Cursor::new(&b, loc());
        // 16 bytes hold at most 4 items of 4 bytes.
        assert_eq!(c.count("v", 4, 4, 100).unwrap(), 4);
        let e = c.count("v", 5, 4, 100).unwrap_err();
        assert!(matches!(e.kind, ErrorKind::Truncated { .. }), "{e}");
        assert_eq!(e.location.field.as_deref(), Some("v"));
        // 2^60 items of "no fixed size" count as one byte each: refused, not allocated.
        assert!(c.count("v", 1 << 60, 0, u64::MAX).is_err());
        // The limit applies even when the bytes would hold them.
        let e = c.count("v", 10, 1, 3).unwrap_err();
        assert!(matches!(e.kind, ErrorKind::Limit { .. }), "{e}");
        // until_eof: stops at the end, and after `limit` items.
        assert!(c.more("v", 0, 10).unwrap());
        assert!(c.more("v", 10, 10).is_err());
        let mut end = Cursor::new(&b, loc());
        end.skip("x", 16).unwrap();
        assert!(!end.more("v", 1_000_000, 10).unwrap());
    }

    #[test]
    fn windows_seeks_and_relative_alignment_stay_within_the_layout() {
        let b = mem(b"abcdefghij");
        let mut c = Cursor::new(&b, loc());
        c.skip("x", 1).unwrap();
        let mut w = c.window("inner", 4).unwrap();
        assert_eq!(&*w.bytes("i", 4, 100).unwrap(), b"bcde");
        // The window ends where it was cut: nothing past it is read.
        assert!(w.u8("j").is_err());
        assert_eq!(c.pos(), 5);
        assert!(c.window("big", 6).is_err());
        // Alignment counts from the given start, not from the source's first byte.
        c.align_from("a", 1, 3).unwrap();
        assert_eq!(c.pos(), 7);
        c.seek("at", 0, 2).unwrap();
        assert_eq!(c.u8("c").unwrap(), b'c');
        let e = c.seek("at", 0, 11).unwrap_err();
        assert!(matches!(e.kind, ErrorKind::Truncated { .. }), "{e}");
        assert!(c.seek("at", u64::MAX, u64::MAX).is_err());
        // Text must be UTF-8 and within the limit.
        let bad = mem(&[0xff, 0xfe]);
        let mut t = Cursor::new(&bad, loc());
        assert!(t.text("name", 2, 100).is_err());
        let mut t = Cursor::new(&b, loc());
        assert!(t.text("name", 10, 4).is_err());
        assert_eq!(t.text("name", 3, 100).unwrap(), "abc");
    }

    #[test]
    fn numbers_both_orders() {
        let mut data = vec![0xAB, 0xFF];
        data.extend_from_slice(&0x1234u16.to_le_bytes());
        data.extend_from_slice(&0x1234u16.to_be_bytes());
        data.extend_from_slice(&0xDEADBEEFu32.to_le_bytes());
        data.extend_from_slice(&0xDEADBEEFu32.to_be_bytes());
        data.extend_from_slice(&(-5i64).to_le_bytes());
        data.extend_from_slice(&(-5i64).to_be_bytes());
        data.extend_from_slice(&1.5f32.to_be_bytes());
        data.extend_from_slice(&(-2.25f64).to_le_bytes());
        data.extend_from_slice(&(-3i16).to_be_bytes());
        data.extend_from_slice(&(-7i32).to_le_bytes());
        let b = mem(&data);
        let mut c = Cursor::new(&b, loc());
        assert_eq!(c.u8("a").unwrap(), 0xAB);
        assert_eq!(c.i8("b").unwrap(), -1);
        assert_eq!(c.u16_le("c").unwrap(), 0x1234);
        assert_eq!(c.u16_be("d").unwrap(), 0x1234);
        assert_eq!(c.u32_le("e").unwrap(), 0xDEADBEEF);
        assert_eq!(c.u32_be("f").unwrap(), 0xDEADBEEF);
        assert_eq!(c.i64_le("g").unwrap(), -5);
        assert_eq!(c.i64_be("h").unwrap(), -5);
        assert_eq!(c.f32_be("i").unwrap(), 1.5);
        assert_eq!(c.f64_le("j").unwrap(), -2.25);
        assert_eq!(c.i16_be("k").unwrap(), -3);
        assert_eq!(c.i32_le("l").unwrap(), -7);
        assert!(c.at_end());
        let e = c.u8("m").unwrap_err();
        assert!(matches!(
            e.kind,
            ErrorKind::Truncated {
                needed: 1,
                available: 0
            }
        ));
        assert_eq!(e.location.field.as_deref(), Some("m"));
        assert_eq!(e.location.offset, Some(data.len() as u64));
        assert_eq!(e.location.entry.as_deref(), Some("e"));
        assert!(e.to_string().contains("f.bin"));
    }

    #[test]
    fn magic_shows_found_bytes() {
        let b = mem(b"\x93NUMPX");
        let mut c = Cursor::new(&b, loc());
        let e = c.magic("magic", b"\x93NUMPY").unwrap_err();
        match &e.kind {
            ErrorKind::BadMagic { found, .. } => assert_eq!(found, b"\x93NUMPX"),
            k => panic!("{k}"),
        }
        assert_eq!(e.location.offset, Some(0));
        assert_eq!(c.pos(), 0);
        let short = mem(b"\x93X");
        let mut c = Cursor::new(&short, loc());
        let e = c.magic("magic", b"\x93NUMPY").unwrap_err();
        assert!(matches!(&e.kind, ErrorKind::BadMagic { found, .. } if found == b"\x93X"));
        let cut = mem(b"\x93N");
        let mut c = Cursor::new(&cut, loc());
        let e = c.magic("magic", b"\x93NUMPY").unwrap_err();
        assert!(
            matches!(
                e.kind,
                ErrorKind::Truncated {
                    needed: 6,
                    available: 2
                }
            ),
            "{e}"
        );
        let ok = mem(b"PK\x03\x04");
        let mut c = Cursor::new(&ok, loc());
        c.magic("sig", b"PK\x03\x04").unwrap();
        assert!(c.at_end());
    }

    #[test]
    fn bytes_check_before_allocating() {
        let b = mem(b"0123456789");
        let mut c = Cursor::new(&b, loc());
        c.skip("pad", 2).unwrap();
        assert!(matches!(
            c.bytes("hdr", 3, 10).unwrap(),
            Cow::Borrowed(b"234")
        ));
        let e = c.bytes("hdr", u64::MAX, u64::MAX).unwrap_err();
        assert!(matches!(e.kind, ErrorKind::Truncated { .. }));
        assert_eq!(e.location.offset, Some(5));
        let e = c.bytes("hdr", 4, 3).unwrap_err();
        assert!(matches!(
            e.kind,
            ErrorKind::Limit {
                limit: 3,
                actual: 4,
                ..
            }
        ));
        assert_eq!(c.pos(), 5);
        // A stream source copies.
        let s = Stream::new(std::io::Cursor::new(b"abcdef".to_vec())).unwrap();
        let mut c = Cursor::new(&s, loc());
        assert!(matches!(c.bytes("x", 4, 4).unwrap(), Cow::Owned(v) if v == b"abcd"));
        assert!(c.bytes("x", 3, 4).is_err());
    }

    #[test]
    fn spans_rest_align_and_base() {
        let file = mem(&[0u8; 100]);
        let w = Window::new(&file, 40, 60).unwrap();
        let mut c = Cursor::new(&w, loc()).with_base(40).starting_at(3).unwrap();
        assert_eq!((c.pos(), c.abs_pos(), c.remaining()), (0, 43, 57));
        c.align("pad", 16).unwrap();
        assert_eq!(c.abs_pos(), 48);
        assert_eq!(c.pos(), 5);
        assert_eq!(c.span("data", 10).unwrap(), (48, 10));
        let e = c.span("data", 100).unwrap_err();
        assert_eq!(e.location.offset, Some(58));
        assert_eq!(c.rest("tail").unwrap(), (58, 42));
        assert!(c.at_end());
        assert_eq!(c.rest("tail").unwrap(), (100, 0));
        assert!(c.align("pad", 0).is_ok());
        assert!(Cursor::new(&w, loc()).starting_at(61).is_err());
        let mut c = Cursor::new(&w, loc()).limited_to(4).unwrap();
        assert_eq!(c.remaining(), 4);
        assert!(c.u64_le("x").is_err());
    }

    #[test]
    fn errors_point_at_the_field_start() {
        let b = mem(&7u32.to_le_bytes());
        let mut c = Cursor::new(&b, loc());
        let v = c.u32_le("version").unwrap();
        let e = c.error("version", ErrorKind::Invalid(format!("version is {v}")));
        assert_eq!(e.location.offset, Some(0));
        assert_eq!(e.location.field.as_deref(), Some("version"));
        let inner = Error::from(ErrorKind::Invalid("bad key".into())).in_field("descr");
        let e = c.wrap("version", inner);
        assert_eq!(e.location.field.as_deref(), Some("version.descr"));
        assert_eq!(e.location.offset, Some(0));
        assert_eq!(
            e.location.file.as_deref(),
            Some(std::path::Path::new("f.bin"))
        );
        let e = c.error("other", ErrorKind::Invalid("x".into()));
        assert_eq!(e.location.offset, Some(4));
    }
}
