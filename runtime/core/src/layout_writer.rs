//! Building the bytes of a layout that precede a payload, for generated writers: numbers in
//! either byte order, byte strings, reserved slots patched once their values are known
//! (sizes, offsets), and padding to an absolute alignment.

use crate::error::{Error, ErrorKind, Location, Result};

/// A reserved slot for a number whose value is known only later; fill it with one of the
/// `patch_*` methods of [`LayoutBuf`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "a reserved slot must be patched"]
pub struct Patch {
    field: String,
    at: usize,
    width: usize,
}

impl Patch {
    /// The field the slot stands for.
    pub fn field(&self) -> &str {
        &self.field
    }

    /// Its position, relative to the buffer's start.
    pub fn pos(&self) -> u64 {
        self.at as u64
    }

    /// Its width in bytes.
    pub fn width(&self) -> usize {
        self.width
    }
}

/// The bytes of a layout being written, which will start at `base_offset` of the output
/// (so that padding can align absolute offsets).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LayoutBuf {
    base: u64,
    buf: Vec<u8>,
}

macro_rules! put_num {
    ($($(#[$doc:meta])* $name:ident: $ty:ty, $conv:ident;)*) => {
        $(
            $(#[$doc])*
            pub fn $name(&mut self, v: $ty) {
                self.buf.extend_from_slice(&v.$conv());
            }
        )*
    };
}

macro_rules! patch_num {
    ($($(#[$doc:meta])* $name:ident: $ty:ty, $conv:ident;)*) => {
        $(
            $(#[$doc])*
            pub fn $name(&mut self, p: Patch, value: u64) -> Result<()> {
                let v = <$ty>::try_from(value).map_err(|_| {
                    self.overflow_at(&p.field, p.at, format!(
                        "{} is {value}, which does not fit in {}",
                        p.field,
                        stringify!($ty)
                    ))
                })?;
                self.patch_bytes(&p, &v.$conv())
            }
        )*
    };
}

macro_rules! checked {
    ($($(#[$doc:meta])* $name:ident: $ty:ty;)*) => {
        $(
            $(#[$doc])*
            pub fn $name(&self, field: &str, value: u64) -> Result<$ty> {
                <$ty>::try_from(value).map_err(|_| {
                    self.overflow_at(field, self.buf.len(), format!(
                        "{field} is {value}, which does not fit in {}",
                        stringify!($ty)
                    ))
                })
            }
        )*
    };
}

macro_rules! put_int {
    ($($(#[$doc:meta])* $name:ident: $ty:ty, $conv:ident;)*) => {
        $(
            $(#[$doc])*
            pub fn $name(&mut self, field: &str, v: i128) -> Result<()> {
                let x = <$ty>::try_from(v).map_err(|_| {
                    self.overflow_at(field, self.buf.len(), format!(
                        "{field} is {v}, which does not fit in {}",
                        stringify!($ty)
                    ))
                })?;
                self.buf.extend_from_slice(&x.$conv());
                Ok(())
            }
        )*
    };
}

impl LayoutBuf {
    /// An empty buffer whose first byte will be at `base_offset` of the output.
    pub fn new(base_offset: u64) -> Self {
        LayoutBuf {
            base: base_offset,
            buf: Vec::new(),
        }
    }

    /// Bytes written so far (the position relative to the buffer's start).
    pub fn pos(&self) -> u64 {
        self.buf.len() as u64
    }

    /// The absolute output offset of the next byte.
    pub fn abs_pos(&self) -> u64 {
        self.base.saturating_add(self.pos())
    }

    /// The bytes written so far.
    pub fn as_slice(&self) -> &[u8] {
        &self.buf
    }

    /// The bytes.
    pub fn into_vec(self) -> Vec<u8> {
        self.buf
    }

    /// Appends bytes.
    pub fn put_bytes(&mut self, b: &[u8]) {
        self.buf.extend_from_slice(b);
    }

    put_num! {
        /// Appends a byte.
        put_u8: u8, to_le_bytes;
        /// Appends a signed byte.
        put_i8: i8, to_le_bytes;
        /// Appends a little-endian `u16`.
        put_u16_le: u16, to_le_bytes;
        /// Appends a big-endian `u16`.
        put_u16_be: u16, to_be_bytes;
        /// Appends a little-endian `u32`.
        put_u32_le: u32, to_le_bytes;
        /// Appends a big-endian `u32`.
        put_u32_be: u32, to_be_bytes;
        /// Appends a little-endian `u64`.
        put_u64_le: u64, to_le_bytes;
        /// Appends a big-endian `u64`.
        put_u64_be: u64, to_be_bytes;
        /// Appends a little-endian `i16`.
        put_i16_le: i16, to_le_bytes;
        /// Appends a big-endian `i16`.
        put_i16_be: i16, to_be_bytes;
        /// Appends a little-endian `i32`.
        put_i32_le: i32, to_le_bytes;
        /// Appends a big-endian `i32`.
        put_i32_be: i32, to_be_bytes;
        /// Appends a little-endian `i64`.
        put_i64_le: i64, to_le_bytes;
        /// Appends a big-endian `i64`.
        put_i64_be: i64, to_be_bytes;
        /// Appends a little-endian `f32`.
        put_f32_le: f32, to_le_bytes;
        /// Appends a big-endian `f32`.
        put_f32_be: f32, to_be_bytes;
        /// Appends a little-endian `f64`.
        put_f64_le: f64, to_le_bytes;
        /// Appends a big-endian `f64`.
        put_f64_be: f64, to_be_bytes;
    }

    put_int! {
        /// Appends a computed value as a byte ([`ErrorKind::Overflow`] naming `field`
        /// when it does not fit).
        int_u8: u8, to_le_bytes;
        /// Appends a computed value as a signed byte.
        int_i8: i8, to_le_bytes;
        /// Appends a computed value as a little-endian `u16`.
        int_u16_le: u16, to_le_bytes;
        /// Appends a computed value as a big-endian `u16`.
        int_u16_be: u16, to_be_bytes;
        /// Appends a computed value as a little-endian `u32`.
        int_u32_le: u32, to_le_bytes;
        /// Appends a computed value as a big-endian `u32`.
        int_u32_be: u32, to_be_bytes;
        /// Appends a computed value as a little-endian `u64`.
        int_u64_le: u64, to_le_bytes;
        /// Appends a computed value as a big-endian `u64`.
        int_u64_be: u64, to_be_bytes;
        /// Appends a computed value as a little-endian `i16`.
        int_i16_le: i16, to_le_bytes;
        /// Appends a computed value as a big-endian `i16`.
        int_i16_be: i16, to_be_bytes;
        /// Appends a computed value as a little-endian `i32`.
        int_i32_le: i32, to_le_bytes;
        /// Appends a computed value as a big-endian `i32`.
        int_i32_be: i32, to_be_bytes;
        /// Appends a computed value as a little-endian `i64`.
        int_i64_le: i64, to_le_bytes;
        /// Appends a computed value as a big-endian `i64`.
        int_i64_be: i64, to_be_bytes;
    }

    /// Appends text encoded as `encoding`: `"utf8"`, or `"latin1"` (every character
    /// below U+0100, one byte each; another is an error naming `field`).
    pub fn put_text(&mut self, field: &str, text: &str, encoding: &str) -> Result<()> {
        match encoding {
            "latin1" => {
                for ch in text.chars() {
                    let b = u8::try_from(u32::from(ch)).map_err(|_| {
                        Error::from(ErrorKind::Invalid(format!(
                            "{ch:?} cannot be written in Latin-1"
                        )))
                        .in_field(field)
                    })?;
                    self.buf.push(b);
                }
            }
            "utf8" => self.buf.extend_from_slice(text.as_bytes()),
            other => {
                return Err(Error::from(ErrorKind::Unsupported(format!(
                    "the text encoding \"{other}\" (known: \"latin1\", \"utf8\")"
                )))
                .in_field(field))
            }
        }
        Ok(())
    }

    /// Checks that the bytes laid out since `start` (a [`pos`](Self::pos) of this buffer,
    /// where a field began) are `size` bytes: a field whose size is given apart from its
    /// value (a constant, another field) fills it exactly, or what is written would not
    /// read back; an error naming `field` otherwise.
    pub fn check_size(&self, field: &str, start: u64, size: i128) -> Result<()> {
        let n = self.pos().saturating_sub(start);
        if i128::from(n) == size {
            return Ok(());
        }
        Err(Error::new(
            ErrorKind::Invalid(format!("{field} is {n} bytes, but its size is {size}")),
            self.loc(field, usize::try_from(start).unwrap_or(usize::MAX)),
        ))
    }

    /// Checks that a repeated field of a count given apart from its items (a constant,
    /// another list's length) has `count` items; an error naming `field` otherwise.
    pub fn check_count(&self, field: &str, items: usize, count: i128) -> Result<()> {
        if i128::try_from(items).is_ok_and(|n| n == count) {
            return Ok(());
        }
        Err(Error::new(
            ErrorKind::Invalid(format!(
                "{field} has {items} items, but its count is {count}"
            )),
            self.loc(field, self.buf.len()),
        ))
    }

    /// Appends zero bytes up to `at` bytes after `start` (a field's `at`, from its
    /// layout's start); an error naming `field` when the bytes already written reach
    /// past it.
    pub fn fill_to(&mut self, field: &str, start: u64, at: i128) -> Result<()> {
        let want = i128::from(start) + at;
        let pos = i128::from(self.pos());
        if at < 0 || want < pos {
            return Err(Error::new(
                ErrorKind::Invalid(format!(
                    "{field} is to start at offset {at}, but {} bytes of its layout precede it",
                    pos - i128::from(start)
                )),
                self.loc(field, self.buf.len()),
            ));
        }
        let n = usize::try_from(want - pos).map_err(|_| {
            self.overflow_at(
                field,
                self.buf.len(),
                format!("the offset {at} is too large"),
            )
        })?;
        self.buf.resize(self.buf.len() + n, 0);
        Ok(())
    }

    /// Appends zero bytes up to the next multiple of `align` from `start` (a field's
    /// `align`); an error naming `field` for an alignment below 1.
    pub fn align_from(&mut self, field: &str, start: u64, align: i128) -> Result<()> {
        let a = u64::try_from(align)
            .ok()
            .filter(|&a| a > 0)
            .ok_or_else(|| {
                self.overflow_at(
                    field,
                    self.buf.len(),
                    format!("the alignment {align} is not positive"),
                )
            })?;
        let rel = self.pos() - start;
        self.fill_to(field, start, i128::from(rel.next_multiple_of(a)))
    }

    /// [`pad_to_min`](Self::pad_to_min) counting from `start` (a position of this buffer:
    /// where the padded field's layout starts) rather than from the output's start.
    pub fn pad_from(
        &mut self,
        start: u64,
        align: u64,
        fill: impl PadByte,
        last: Option<u8>,
        min: u64,
    ) {
        let rel = self.pos().saturating_sub(start);
        self.pad_at(rel, align, fill.pad_byte(), last, min);
    }

    /// Fills a reserved slot with a computed value, little-endian, in the slot's width: an
    /// [`ErrorKind::Overflow`] naming the field when it fits neither the unsigned nor the
    /// signed integers of that width.
    pub fn patch_le(&mut self, p: Patch, v: i128) -> Result<()> {
        let bytes = self.slot_bytes(&p, v)?;
        self.patch_bytes(&p, &bytes[..p.width])
    }

    /// [`patch_le`](Self::patch_le), big-endian.
    pub fn patch_be(&mut self, p: Patch, v: i128) -> Result<()> {
        let mut bytes = self.slot_bytes(&p, v)?[..p.width].to_vec();
        bytes.reverse();
        self.patch_bytes(&p, &bytes)
    }

    fn slot_bytes(&self, p: &Patch, v: i128) -> Result<[u8; 16]> {
        let bits = 8 * p.width.min(16) as u32;
        let fits = bits >= 128 || (v >= -(1i128 << (bits - 1)) && v < (1i128 << bits));
        if !fits {
            return Err(self.overflow_at(
                &p.field,
                p.at,
                format!(
                    "{} is {v}, which does not fit in {} bytes",
                    p.field, p.width
                ),
            ));
        }
        Ok(v.to_le_bytes())
    }

    /// Reserves `width_bytes` zero bytes for `field`, to be patched later.
    pub fn reserve(&mut self, field: &str, width_bytes: usize) -> Patch {
        let at = self.buf.len();
        self.buf.resize(at + width_bytes, 0);
        Patch {
            field: field.to_string(),
            at,
            width: width_bytes,
        }
    }

    patch_num! {
        /// Fills a 2-byte slot with `value` as a little-endian `u16`
        /// ([`ErrorKind::Overflow`] naming the field when it does not fit).
        patch_u16_le: u16, to_le_bytes;
        /// Fills a 2-byte slot with `value` as a big-endian `u16`.
        patch_u16_be: u16, to_be_bytes;
        /// Fills a 4-byte slot with `value` as a little-endian `u32`.
        patch_u32_le: u32, to_le_bytes;
        /// Fills a 4-byte slot with `value` as a big-endian `u32`.
        patch_u32_be: u32, to_be_bytes;
        /// Fills an 8-byte slot with `value` as a little-endian `u64`.
        patch_u64_le: u64, to_le_bytes;
        /// Fills an 8-byte slot with `value` as a big-endian `u64`.
        patch_u64_be: u64, to_be_bytes;
        /// Fills a 1-byte slot with `value`.
        patch_u8: u8, to_le_bytes;
    }

    checked! {
        /// `value` as a `u8`, or [`ErrorKind::Overflow`] naming `field`.
        checked_u8: u8;
        /// `value` as a `u16`, or [`ErrorKind::Overflow`] naming `field`.
        checked_u16: u16;
        /// `value` as a `u32`, or [`ErrorKind::Overflow`] naming `field`.
        checked_u32: u32;
    }

    /// Pads with `fill` so that the absolute offset (base + position) after the padding is
    /// a multiple of `align`. With `last`, the final pad byte is `last` and at least one
    /// pad byte is always written (a whole `align` of them if already aligned), as NumPy
    /// pads its header with spaces and a newline. An `align` of 0 counts as 1. `fill`
    /// is a byte, or a byte string whose first byte is used (0 if empty).
    pub fn pad_to(&mut self, align: u64, fill: impl PadByte, last: Option<u8>) {
        self.pad_to_min(align, fill, last, 0);
    }

    /// [`pad_to`](Self::pad_to) writing at least `min` pad bytes: the smallest count
    /// `n >= min` (`n >= 1` with `last`) that ends the padding at a multiple of `align`.
    /// NumPy's header padding is `pad_to_min(64, b' ', Some(b'\n'), 2)`: between 2 and 65
    /// bytes. A count over `u32::MAX` writes nothing.
    pub fn pad_to_min(&mut self, align: u64, fill: impl PadByte, last: Option<u8>, min: u64) {
        self.pad_at(self.abs_pos(), align, fill.pad_byte(), last, min);
    }

    /// Pads as [`pad_to_min`](Self::pad_to_min) does, the next byte being at `at`.
    fn pad_at(&mut self, at: u64, align: u64, fill: u8, last: Option<u8>, min: u64) {
        let align = align.max(1);
        let min = if last.is_some() { min.max(1) } else { min };
        let rem = at.wrapping_add(min) % align;
        let n = if rem == 0 {
            Some(min)
        } else {
            min.checked_add(align - rem)
        };
        // Refuse absurd requests (over 4 GiB of padding) by writing nothing rather than
        // allocating without bound.
        let Some(n) = n
            .filter(|&n| n <= u64::from(u32::MAX))
            .and_then(|n| usize::try_from(n).ok())
        else {
            return;
        };
        match last {
            Some(l) => {
                self.buf.resize(self.buf.len() + n - 1, fill);
                self.buf.push(l);
            }
            None => self.buf.resize(self.buf.len() + n, fill),
        }
    }

    fn patch_bytes(&mut self, p: &Patch, bytes: &[u8]) -> Result<()> {
        if bytes.len() != p.width {
            return Err(Error::new(
                ErrorKind::Invalid(format!(
                    "slot of {} bytes patched with a {}-byte value",
                    p.width,
                    bytes.len()
                )),
                self.loc(&p.field, p.at),
            ));
        }
        let dst =
            p.at.checked_add(p.width)
                .and_then(|end| self.buf.get_mut(p.at..end))
                .ok_or_else(|| {
                    Error::new(
                        ErrorKind::Invalid("slot outside the buffer".into()),
                        Location::default().with_field(p.field.as_str()),
                    )
                })?;
        dst.copy_from_slice(bytes);
        Ok(())
    }

    fn loc(&self, field: &str, at: usize) -> Location {
        Location::default()
            .with_field(field)
            .with_offset(self.base.saturating_add(at as u64))
    }

    fn overflow_at(&self, field: &str, at: usize, msg: String) -> Error {
        Error::new(ErrorKind::Overflow(msg), self.loc(field, at))
    }
}

/// A padding byte: a `u8`, or a byte string whose first byte is used (0 if empty).
pub trait PadByte {
    /// The byte.
    fn pad_byte(&self) -> u8;
}

impl PadByte for u8 {
    fn pad_byte(&self) -> u8 {
        *self
    }
}

impl PadByte for &[u8] {
    fn pad_byte(&self) -> u8 {
        self.first().copied().unwrap_or(0)
    }
}

impl<const N: usize> PadByte for &[u8; N] {
    fn pad_byte(&self) -> u8 {
        self.first().copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_field_of_a_given_size_fills_it() {
        let mut b = LayoutBuf::new(10);
        b.put_u8(1);
        let start = b.pos();
        b.put_bytes(b"ab");
        assert!(b.check_size("name", start, 2).is_ok());
        let e = b.check_size("name", start, 4).unwrap_err().to_string();
        assert!(e.contains("name is 2 bytes, but its size is 4"), "{e}");
        assert!(b.check_count("dims", 2, 2).is_ok());
        let e = b.check_count("dims", 3, 2).unwrap_err().to_string();
        assert!(e.contains("dims has 3 items, but its count is 2"), "{e}");
    }

    #[test]
    fn numbers_and_bytes() {
        let mut b = LayoutBuf::new(0);
        b.put_bytes(b"\x93NUMPY");
        b.put_u8(1);
        b.put_i8(-1);
        b.put_u16_le(0x0102);
        b.put_u16_be(0x0102);
        b.put_u32_be(7);
        b.put_i64_le(-2);
        b.put_f32_le(1.0);
        b.put_f64_be(2.0);
        let v = b.into_vec();
        let mut want = b"\x93NUMPY\x01\xff\x02\x01\x01\x02\x00\x00\x00\x07".to_vec();
        want.extend_from_slice(&(-2i64).to_le_bytes());
        want.extend_from_slice(&1.0f32.to_le_bytes());
        want.extend_from_slice(&2.0f64.to_be_bytes());
        assert_eq!(v, want);
    }

    #[test]
    fn patches() {
        let mut b = LayoutBuf::new(100);
        b.put_u8(9);
        let p16 = b.reserve("header_len", 2);
        let p32 = b.reserve("n", 4);
        let p64 = b.reserve("size", 8);
        b.put_u8(9);
        b.patch_u16_le(p16.clone(), 0x0304).unwrap();
        b.patch_u32_be(p32.clone(), 5).unwrap();
        b.patch_u64_le(p64, u64::MAX).unwrap();
        let e = b.patch_u16_le(p16.clone(), 70_000).unwrap_err();
        assert!(matches!(e.kind, ErrorKind::Overflow(_)));
        assert_eq!(e.location.field.as_deref(), Some("header_len"));
        assert_eq!(e.location.offset, Some(101));
        assert!(e.to_string().contains("70000"), "{e}");
        // Width mismatch is an error, not a panic.
        assert!(b.patch_u32_le(p16, 1).is_err());
        let v = b.into_vec();
        assert_eq!(&v[..3], &[9, 4, 3]);
        assert_eq!(&v[3..7], &[0, 0, 0, 5]);
        assert_eq!(&v[7..15], &[0xff; 8]);
        assert_eq!(v[15], 9);
    }

    #[test]
    fn checked_conversions() {
        let b = LayoutBuf::new(0);
        assert_eq!(b.checked_u8("x", 255).unwrap(), 255);
        assert!(b.checked_u8("x", 256).is_err());
        assert_eq!(b.checked_u16("x", 65535).unwrap(), 65535);
        let e = b.checked_u32("count", 1 << 32).unwrap_err();
        assert_eq!(e.location.field.as_deref(), Some("count"));
    }

    #[test]
    fn padding_is_absolute() {
        // NumPy: magic(6) + version(2) + len(2) + header, padded to 64 with '\n' last.
        let mut b = LayoutBuf::new(0);
        b.put_bytes(&[0; 10]);
        b.put_bytes(b"{'descr': '<f4'}");
        b.pad_to(64, b' ', Some(b'\n'));
        let v = b.into_vec();
        assert_eq!(v.len(), 64);
        assert_eq!(v[63], b'\n');
        assert_eq!(v[62], b' ');
        // Already aligned with `last`: a whole block is added.
        let mut b = LayoutBuf::new(0);
        b.put_bytes(&[1; 64]);
        b.pad_to(64, &b" "[..], Some(b'\n'));
        assert_eq!(b.pos(), 128);
        // Without `last`, aligned stays as is; the base counts.
        let mut b = LayoutBuf::new(60);
        b.pad_to(64, 0u8, None);
        assert_eq!(b.pos(), 4);
        b.pad_to(64, 0u8, None);
        assert_eq!(b.pos(), 4);
        b.pad_to(0, b"", None);
        assert_eq!(b.pos(), 4);
        b.pad_to(1, b"x", Some(b'\n'));
        assert_eq!(b.as_slice(), &[0, 0, 0, 0, b'\n']);
    }

    #[test]
    fn padding_with_a_minimum() {
        // NumPy: between 2 and 65 pad bytes (spaces, then '\n').
        for (len, want) in [(0usize, 64usize), (52, 64), (53, 128), (54, 128), (61, 128)] {
            let mut b = LayoutBuf::new(0);
            b.put_bytes(&vec![b'x'; 10 + len]);
            b.pad_to_min(64, b' ', Some(b'\n'), 2);
            let v = b.into_vec();
            assert_eq!(v.len(), want, "header text of {len} bytes");
            assert_eq!(v[want - 1], b'\n');
            assert!(v[10 + len..want - 1].iter().all(|&c| c == b' '));
            assert!(want - 10 - len >= 2 && want - 10 - len <= 65);
        }
        // 1 byte before the boundary: 64 spaces and the newline, not just the newline.
        let mut b = LayoutBuf::new(0);
        b.put_bytes(&[b'x'; 63]);
        b.pad_to_min(64, b' ', Some(b'\n'), 2);
        assert_eq!(b.pos(), 128);
        // Without `last`, `min` still counts; the base counts too.
        let mut b = LayoutBuf::new(60);
        b.pad_to_min(8, 0u8, None, 0);
        assert_eq!(b.pos(), 4);
        b.pad_to_min(8, 0u8, None, 3);
        assert_eq!(b.pos(), 12);
        b.pad_to_min(8, 0u8, None, 8);
        assert_eq!(b.pos(), 20);
        // `min` 0 or 1 with `last` is `pad_to`.
        let mut a = LayoutBuf::new(3);
        let mut c = LayoutBuf::new(3);
        a.pad_to_min(16, b' ', Some(b'\n'), 0);
        c.pad_to(16, b' ', Some(b'\n'));
        assert_eq!(a, c);
        // An absurd minimum writes nothing rather than overflowing.
        let mut b = LayoutBuf::new(0);
        b.pad_to_min(64, b' ', None, u64::MAX);
        assert_eq!(b.pos(), 0);
        b.pad_to_min(1, b' ', Some(b'\n'), u64::MAX);
        assert_eq!(b.pos(), 0);
    }
}
