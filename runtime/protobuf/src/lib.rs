//! The protobuf wire format: a zero-copy reader that reports where every field lies in the
//! file, and the encoding primitives writers need.
//!
//! Reading walks a message's fields in place ([`fields`]): scalars are decoded, and a
//! length-delimited field (bytes, string, embedded message, packed repeated scalars) is a
//! slice of the input with its absolute offset, so that large `bytes` fields (ONNX's
//! `raw_data`) are located, never copied. Every length is checked against the bytes that
//! remain before it is used; groups (wire types 3 and 4, deprecated) are refused. Nesting
//! depth is the caller's to count (generated readers pass it down) against
//! [`tensorfmt_core::Limits::max_depth`].
#![warn(missing_docs)]

pub mod doc;
/// The `prost` crate that generated message types derive from (through
/// `#[prost(prost_path = "::tensorfmt_runtime::gen::protobuf::prost")]`), so that a crate
/// holding generated code needs no `prost` dependency of its own.
pub use prost;
mod location;
mod map;
mod view;
pub use location::FieldValues;
pub use map::{
    dims, elements, external, index, ints, key_of, located, lookup, map_items, named, narrow,
    present,
};
/// `#[derive(View)]`: a message view's `View` impl from its attributes (see [`View`]).
pub use tensorfmt_protobuf_derive::View;
pub use view::{is_message, is_message_at, only_fields, read, Span, View};

/// What the expansion of `#[derive(View)]` names, reached through this crate.
#[doc(hidden)]
pub mod __private {
    pub use tensorfmt_core::error::Result;
    pub use tensorfmt_core::Limits;
}

use tensorfmt_core::error::{Error, ErrorKind, Location, Result};

/// The codec name used in errors.
pub const CODEC: &str = "protobuf";

/// A protobuf wire type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireType {
    /// 0: a varint (`int32`, `int64`, `uint32`, `uint64`, `sint*`, `bool`, enums).
    Varint,
    /// 1: eight bytes (`fixed64`, `sfixed64`, `double`).
    I64,
    /// 2: a length and that many bytes (`string`, `bytes`, messages, packed scalars).
    Len,
    /// 5: four bytes (`fixed32`, `sfixed32`, `float`).
    I32,
}

impl WireType {
    /// The wire type's number.
    pub fn number(self) -> u8 {
        match self {
            WireType::Varint => 0,
            WireType::I64 => 1,
            WireType::Len => 2,
            WireType::I32 => 5,
        }
    }
}

/// A field's value as it lies on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value<'a> {
    /// A varint.
    Varint(u64),
    /// Eight little-endian bytes.
    I64(u64),
    /// Four little-endian bytes.
    I32(u32),
    /// A length-delimited value: its bytes and the absolute offset of the first one.
    Len(&'a [u8], u64),
}

impl Value<'_> {
    /// The wire type of the value.
    pub fn wire_type(&self) -> WireType {
        match self {
            Value::Varint(_) => WireType::Varint,
            Value::I64(_) => WireType::I64,
            Value::I32(_) => WireType::I32,
            Value::Len(..) => WireType::Len,
        }
    }
}

/// One field of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field<'a> {
    /// The field number.
    pub number: u32,
    /// The value.
    pub value: Value<'a>,
    /// Absolute offset of the field's tag.
    pub offset: u64,
}

/// An error of the wire format at absolute offset `at`.
pub fn error(at: u64, message: impl Into<String>) -> Error {
    Error::new(
        ErrorKind::Codec {
            codec: CODEC,
            message: message.into(),
        },
        Location::default().with_offset(at),
    )
}

/// Reads a varint at `pos` of `bytes`; returns it and the position after it. At most 10
/// bytes; a varint that runs past the end or past 64 bits is an error (`base` is the
/// absolute offset of `bytes[0]`, for the error).
///
/// A one-byte varint (tags of fields 1 to 15, small lengths and values: most of them) is
/// read inline; longer ones out of line.
#[inline]
pub fn read_varint(bytes: &[u8], pos: usize, base: u64) -> Result<(u64, usize)> {
    match bytes.get(pos) {
        Some(&b) if b < 0x80 => Ok((u64::from(b), pos + 1)),
        _ => read_long_varint(bytes, pos, base),
    }
}

/// [`read_varint`] past its first byte: the varints of two bytes or more, and the errors.
#[inline(never)]
fn read_long_varint(bytes: &[u8], pos: usize, base: u64) -> Result<(u64, usize)> {
    let mut v: u64 = 0;
    let mut shift = 0u32;
    let mut i = pos;
    loop {
        let Some(&b) = bytes.get(i) else {
            return Err(error(
                base + pos as u64,
                "a varint runs past the end of its message",
            ));
        };
        if shift == 63 && b > 1 {
            return Err(error(base + pos as u64, "a varint longer than 64 bits"));
        }
        v |= ((b & 0x7f) as u64) << shift;
        i += 1;
        if b & 0x80 == 0 {
            return Ok((v, i));
        }
        shift += 7;
        if shift > 63 {
            return Err(error(base + pos as u64, "a varint longer than 10 bytes"));
        }
    }
}

/// The fields of the message held in `bytes`, whose first byte is at absolute offset
/// `base`, in wire order. Fields may repeat; a field after an error is not read.
#[inline]
pub fn fields(bytes: &[u8], base: u64) -> Fields<'_> {
    Fields {
        bytes,
        base,
        pos: 0,
    }
}

/// Iterator of [`fields`].
///
/// Its step is inlined where a message is walked (the field's value stays in registers
/// on its way to the caller's `match` on its number); the errors are built out of line.
#[derive(Debug, Clone)]
pub struct Fields<'a> {
    bytes: &'a [u8],
    base: u64,
    /// The position of the next field; past the end after an error.
    pos: usize,
}

impl<'a> Fields<'a> {
    #[inline]
    fn next_field(&mut self) -> Result<Field<'a>> {
        let at = self.pos;
        let abs = self.base + at as u64;
        let (tag, mut pos) = read_varint(self.bytes, at, self.base)?;
        let number = tag >> 3;
        if number == 0 || number > (1 << 29) - 1 {
            return Err(number_out_of_range(abs, number));
        }
        let number = number as u32;
        let value = match tag & 7 {
            0 => {
                let (v, p) = read_varint(self.bytes, pos, self.base)?;
                pos = p;
                Value::Varint(v)
            }
            1 => {
                let Some(b) = self.bytes.get(pos..pos + 8) else {
                    return Err(fixed_past_end(abs, number, 8));
                };
                pos += 8;
                Value::I64(u64::from_le_bytes(b.try_into().expect("8 bytes")))
            }
            2 => {
                let (len, p) = read_varint(self.bytes, pos, self.base)?;
                let remaining = (self.bytes.len() - p) as u64;
                if len > remaining {
                    return Err(len_past_end(abs, number, len, remaining));
                }
                let start = p;
                pos = p + len as usize;
                Value::Len(&self.bytes[start..pos], self.base + start as u64)
            }
            5 => {
                let Some(b) = self.bytes.get(pos..pos + 4) else {
                    return Err(fixed_past_end(abs, number, 4));
                };
                pos += 4;
                Value::I32(u32::from_le_bytes(b.try_into().expect("4 bytes")))
            }
            w => return Err(bad_wire_type(abs, number, w)),
        };
        self.pos = pos;
        Ok(Field {
            number,
            value,
            offset: abs,
        })
    }
}

#[cold]
#[inline(never)]
fn number_out_of_range(abs: u64, number: u64) -> Error {
    error(abs, format!("field number {number} is out of range"))
}

#[cold]
#[inline(never)]
fn fixed_past_end(abs: u64, number: u32, width: u8) -> Error {
    error(
        abs,
        format!("field {number}: {width} bytes run past the end of its message"),
    )
}

#[cold]
#[inline(never)]
fn len_past_end(abs: u64, number: u32, len: u64, remaining: u64) -> Error {
    Error::new(
        ErrorKind::Truncated {
            needed: len,
            available: remaining,
        },
        Location::default()
            .with_offset(abs)
            .with_field(format!("protobuf field {number}")),
    )
}

#[cold]
#[inline(never)]
fn bad_wire_type(abs: u64, number: u32, wire: u64) -> Error {
    match wire {
        3 | 4 => error(
            abs,
            format!("field {number} is a group (wire types 3 and 4 are not supported)"),
        ),
        w => error(abs, format!("field {number} has the unknown wire type {w}")),
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<Field<'a>>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.pos >= self.bytes.len() {
            return None;
        }
        let r = self.next_field();
        if r.is_err() {
            self.pos = usize::MAX;
        }
        Some(r)
    }
}

/// The varints packed in `bytes` (a packed repeated field), decoded.
pub fn packed_varints(bytes: &[u8], base: u64) -> impl Iterator<Item = Result<u64>> + '_ {
    let mut pos = 0;
    let mut failed = false;
    std::iter::from_fn(move || {
        if failed || pos >= bytes.len() {
            return None;
        }
        match read_varint(bytes, pos, base) {
            Ok((v, p)) => {
                pos = p;
                Some(Ok(v))
            }
            Err(e) => {
                failed = true;
                Some(Err(e))
            }
        }
    })
}

/// How many varints are packed in `bytes` (every byte without its high bit ends one);
/// an error when the last one is cut off.
pub fn count_varints(bytes: &[u8], base: u64) -> Result<u64> {
    match bytes.last() {
        Some(b) if b & 0x80 != 0 => Err(error(
            base + bytes.len() as u64 - 1,
            "a packed varint runs past the end of its field",
        )),
        _ => Ok(bytes.iter().filter(|b| *b & 0x80 == 0).count() as u64),
    }
}

/// `bytes` (a string field at absolute offset `at`) as UTF-8; an error naming `field`
/// otherwise.
#[inline]
pub fn utf8<'a>(bytes: &'a [u8], at: u64, field: &str) -> Result<&'a str> {
    std::str::from_utf8(bytes).map_err(|_| error(at, format!("`{field}` is not UTF-8 text")))
}

/// The error for field `field` found with a wire type its declaration does not allow.
#[cold]
pub fn wrong_wire_type(f: &Field<'_>, field: &str) -> Error {
    error(
        f.offset,
        format!(
            "`{field}` has wire type {}, which its type does not use",
            f.value.wire_type().number()
        ),
    )
}

/// The integer values of the repeated varint field `number` of the message `msg` (packed
/// or not, every occurrence), as `i64` (two's complement, as `int64` stores them).
pub fn int_values(msg: Span<'_>, number: u32) -> Result<Vec<i64>> {
    let Span { bytes, base } = msg;
    let span = element_span(bytes, base, number, Elements::Varint { width: 8 })?;
    // Each value took at least one byte of the message: the count is bounded by it.
    let mut out = Vec::with_capacity(span.count as usize);
    decode_elements(
        bytes,
        base,
        number,
        Elements::Varint { width: 8 },
        1 << 16,
        &mut |b| {
            out.extend(
                b.chunks_exact(8)
                    .map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes"))),
            );
            Ok(())
        },
    )?;
    Ok(out)
}

/// How the values of a repeated scalar field become a tensor's elements (ONNX's typed
/// fields, Caffe2's `TensorProto` data fields).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Elements {
    /// `fixed32`/`fixed64` values (`float`, `double`), little-endian bytes as they are;
    /// `width` is 4 or 8.
    Fixed {
        /// Bytes per value.
        width: u8,
    },
    /// Varints, each truncated to its low `width` bytes, little-endian (an `int32` field
    /// carrying 16-bit float patterns, small integers or booleans; `int64`; `uint64`).
    Varint {
        /// Bytes per element, 1 to 8.
        width: u8,
    },
    /// Zigzag varints (`sint32`, `sint64`), each decoded and truncated to its low
    /// `width` bytes, little-endian.
    Zigzag {
        /// Bytes per element, 1 to 8.
        width: u8,
    },
    /// Length-delimited values (strings): each element as its length (u64,
    /// little-endian) then its bytes.
    Bytes,
}

impl Elements {
    /// `fixed32` and `float` values: 4 bytes each.
    pub const FIXED32: Elements = Elements::Fixed { width: 4 };
    /// `fixed64` and `double` values: 8 bytes each.
    pub const FIXED64: Elements = Elements::Fixed { width: 8 };
}

/// The value of a zigzag varint (`sint32`, `sint64`).
pub fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// What the occurrences of field `number` of a message hold as elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ElementSpan {
    /// Number of elements.
    pub count: u64,
    /// Number of element bytes they make.
    pub bytes: u64,
    /// The absolute range of those bytes in the message when they lie there as they are
    /// (one packed occurrence of fixed-width values): a zero-copy view.
    pub plain: Option<(u64, u64)>,
}

fn wrong_wire(number: u32, f: &Field<'_>, elements: Elements) -> Error {
    error(
        f.offset,
        format!(
            "field {number} has wire type {}, which does not hold {elements:?} elements",
            f.value.wire_type().number()
        ),
    )
}

/// Counts the elements of field `number` of the message `bytes` (first byte at absolute
/// offset `base`), as `elements` reads them, packed or not, over every occurrence.
pub fn element_span(
    bytes: &[u8],
    base: u64,
    number: u32,
    elements: Elements,
) -> Result<ElementSpan> {
    let mut count = 0u64;
    let mut out = 0u64;
    let mut occurrences = 0;
    let mut plain = None;
    for f in fields(bytes, base) {
        let f = f?;
        if f.number != number {
            continue;
        }
        occurrences += 1;
        match (elements, f.value) {
            (Elements::Fixed { width }, Value::Len(b, at)) => {
                if b.len() % width as usize != 0 {
                    return Err(error(
                        at,
                        format!(
                            "field {number}: {} packed bytes are not a whole number of {width}-byte values",
                            b.len()
                        ),
                    ));
                }
                count += (b.len() / width as usize) as u64;
                out += b.len() as u64;
                plain = Some((at, b.len() as u64));
            }
            (Elements::Fixed { width: 4 }, Value::I32(_))
            | (Elements::Fixed { width: 8 }, Value::I64(_)) => {
                count += 1;
                out += match elements {
                    Elements::Fixed { width } => width as u64,
                    _ => 0,
                };
                plain = None;
            }
            (Elements::Varint { width } | Elements::Zigzag { width }, Value::Len(b, at)) => {
                let n = count_varints(b, at)?;
                count += n;
                out += n * width as u64;
            }
            (Elements::Varint { width } | Elements::Zigzag { width }, Value::Varint(_)) => {
                count += 1;
                out += width as u64;
            }
            (Elements::Bytes, Value::Len(b, _)) => {
                count += 1;
                out += 8 + b.len() as u64;
            }
            _ => return Err(wrong_wire(number, &f, elements)),
        }
    }
    Ok(ElementSpan {
        count,
        bytes: out,
        plain: if occurrences == 1 { plain } else { None },
    })
}

/// Streams the element bytes of field `number` (see [`element_span`]) to `out`, in pieces
/// of at most `chunk` bytes for decoded values; returns how many bytes were produced.
pub fn decode_elements(
    bytes: &[u8],
    base: u64,
    number: u32,
    elements: Elements,
    chunk: usize,
    out: &mut dyn FnMut(&[u8]) -> Result<()>,
) -> Result<u64> {
    let chunk = chunk.max(16);
    let mut buf: Vec<u8> = Vec::with_capacity(chunk.min(bytes.len() * 8 + 16));
    let mut produced = 0u64;
    fn flush(
        buf: &mut Vec<u8>,
        produced: &mut u64,
        out: &mut dyn FnMut(&[u8]) -> Result<()>,
    ) -> Result<()> {
        if !buf.is_empty() {
            *produced += buf.len() as u64;
            out(buf)?;
            buf.clear();
        }
        Ok(())
    }
    for f in fields(bytes, base) {
        let f = f?;
        if f.number != number {
            continue;
        }
        match (elements, f.value) {
            (Elements::Fixed { .. }, Value::Len(b, _)) => {
                flush(&mut buf, &mut produced, out)?;
                for piece in b.chunks(chunk) {
                    produced += piece.len() as u64;
                    out(piece)?;
                }
            }
            (Elements::Fixed { width: 4 }, Value::I32(v)) => {
                buf.extend_from_slice(&v.to_le_bytes())
            }
            (Elements::Fixed { width: 8 }, Value::I64(v)) => {
                buf.extend_from_slice(&v.to_le_bytes())
            }
            (Elements::Varint { width }, Value::Len(b, at)) => {
                for v in packed_varints(b, at) {
                    buf.extend_from_slice(&v?.to_le_bytes()[..width as usize]);
                    if buf.len() + 8 > chunk {
                        flush(&mut buf, &mut produced, out)?;
                    }
                }
            }
            (Elements::Varint { width }, Value::Varint(v)) => {
                buf.extend_from_slice(&v.to_le_bytes()[..width as usize])
            }
            (Elements::Zigzag { width }, Value::Len(b, at)) => {
                for v in packed_varints(b, at) {
                    buf.extend_from_slice(&unzigzag(v?).to_le_bytes()[..width as usize]);
                    if buf.len() + 8 > chunk {
                        flush(&mut buf, &mut produced, out)?;
                    }
                }
            }
            (Elements::Zigzag { width }, Value::Varint(v)) => {
                buf.extend_from_slice(&unzigzag(v).to_le_bytes()[..width as usize])
            }
            (Elements::Bytes, Value::Len(b, _)) => {
                buf.extend_from_slice(&(b.len() as u64).to_le_bytes());
                if buf.len() + b.len() > chunk {
                    flush(&mut buf, &mut produced, out)?;
                    for piece in b.chunks(chunk) {
                        produced += piece.len() as u64;
                        out(piece)?;
                    }
                } else {
                    buf.extend_from_slice(b);
                }
            }
            _ => return Err(wrong_wire(number, &f, elements)),
        }
        if buf.len() + 16 > chunk {
            flush(&mut buf, &mut produced, out)?;
        }
    }
    flush(&mut buf, &mut produced, out)?;
    Ok(produced)
}

/// Appends the varint encoding of `v` to `out`.
pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// The number of bytes the varint encoding of `v` takes.
pub fn varint_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

/// Appends the tag of field `number` with wire type `wire` to `out`.
pub fn put_tag(out: &mut Vec<u8>, number: u32, wire: WireType) {
    put_varint(out, ((number as u64) << 3) | wire.number() as u64);
}

/// Appends the tag and length of a length-delimited field of `len` bytes (the bytes
/// themselves follow, written by the caller).
pub fn put_len_header(out: &mut Vec<u8>, number: u32, len: u64) {
    put_tag(out, number, WireType::Len);
    put_varint(out, len);
}

/// Appends the length-delimited field `number` holding `bytes` (an embedded message, a
/// string, bytes).
pub fn put_len_field(out: &mut Vec<u8>, number: u32, bytes: &[u8]) {
    put_len_header(out, number, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// The number of bytes a length-delimited field of `len` bytes takes, tag and length
/// included.
pub fn len_field_size(number: u32, len: u64) -> u64 {
    varint_len((number as u64) << 3) as u64 + varint_len(len) as u64 + len
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_and_sizes() {
        for v in [
            0u64,
            1,
            127,
            128,
            300,
            16383,
            16384,
            u32::MAX as u64,
            u64::MAX,
        ] {
            let mut b = Vec::new();
            put_varint(&mut b, v);
            assert_eq!(b.len(), varint_len(v), "{v}");
            assert_eq!(read_varint(&b, 0, 0).unwrap(), (v, b.len()));
        }
        // Overlong encodings are accepted, as protobuf parsers do (up to 10 bytes).
        assert_eq!(read_varint(&[0x80, 0x80, 0x00], 0, 0).unwrap(), (0, 3));
        // Past 64 bits or 10 bytes, or cut off: errors with the offset.
        assert!(read_varint(&[0xff; 10], 0, 0).is_err());
        assert!(read_varint(&[0x80; 11], 0, 0).is_err());
        let e = read_varint(&[0x80, 0x80], 0, 100).unwrap_err();
        assert_eq!(e.location.offset, Some(100));
    }

    #[test]
    fn fields_with_absolute_offsets() {
        // field 1 varint 150; field 2 "hi"; field 3 fixed32; field 4 fixed64.
        let mut m = vec![0x08, 0x96, 0x01];
        put_len_header(&mut m, 2, 2);
        m.extend_from_slice(b"hi");
        put_tag(&mut m, 3, WireType::I32);
        m.extend_from_slice(&7u32.to_le_bytes());
        put_tag(&mut m, 4, WireType::I64);
        m.extend_from_slice(&9u64.to_le_bytes());
        let got: Vec<Field> = fields(&m, 1000).collect::<Result<_>>().unwrap();
        assert_eq!(got.len(), 4);
        assert_eq!((got[0].number, got[0].value), (1, Value::Varint(150)));
        assert_eq!(got[1].value, Value::Len(b"hi", 1005));
        assert_eq!(got[1].offset, 1003);
        assert_eq!(got[2].value, Value::I32(7));
        assert_eq!(got[3].value, Value::I64(9));
        assert_eq!(len_field_size(2, 2), 4);
    }

    #[test]
    fn damaged_messages_are_errors_never_panics() {
        // A length beyond the message.
        let e = fields(&[0x12, 0x05, b'a'], 10).next().unwrap().unwrap_err();
        assert!(
            matches!(
                e.kind,
                ErrorKind::Truncated {
                    needed: 5,
                    available: 1
                }
            ),
            "{e}"
        );
        assert_eq!(e.location.offset, Some(10));
        // Groups, unknown wire types, field 0.
        for bad in [&[0x0b][..], &[0x0e, 0], &[0x00, 0x01], &[0x0d, 1, 2]] {
            let r: Result<Vec<Field>> = fields(bad, 0).collect();
            assert!(r.is_err(), "{bad:?}");
        }
        // Every truncation of a valid message fails or yields fewer fields.
        let mut m = Vec::new();
        put_len_header(&mut m, 9, 300);
        m.extend(std::iter::repeat_n(7u8, 300));
        m.extend_from_slice(&[0x08, 0xff, 0xff, 0x03]);
        for cut in 0..m.len() {
            let _ = fields(&m[..cut], 0).collect::<Result<Vec<_>>>();
        }
        // An error ends the iteration.
        let mut it = fields(&[0x12, 0x7f], 0);
        assert!(it.next().unwrap().is_err());
        assert!(it.next().is_none());
    }

    fn decoded(m: &[u8], number: u32, e: Elements, chunk: usize) -> Vec<u8> {
        let mut out = Vec::new();
        let n = decode_elements(m, 0, number, e, chunk, &mut |b| {
            out.extend_from_slice(b);
            Ok(())
        })
        .unwrap();
        assert_eq!(n as usize, out.len());
        out
    }

    #[test]
    fn repeated_fields_as_elements() {
        // Field 5: packed varints (a negative int32 takes ten bytes), then one unpacked;
        // field 4: packed floats; field 6: two strings; field 1 in between.
        let mut packed = Vec::new();
        for v in [1i64, -2, 0x3c00, 300] {
            put_varint(&mut packed, v as u64);
        }
        let mut m = Vec::new();
        put_len_header(&mut m, 5, packed.len() as u64);
        m.extend_from_slice(&packed);
        put_tag(&mut m, 1, WireType::Varint);
        put_varint(&mut m, 7);
        put_tag(&mut m, 5, WireType::Varint);
        put_varint(&mut m, (-1i64) as u64);
        let floats: Vec<u8> = [1.5f32, -2.0]
            .iter()
            .flat_map(|f| f.to_le_bytes())
            .collect();
        let float_at = m.len() as u64 + 2;
        put_len_header(&mut m, 4, 8);
        m.extend_from_slice(&floats);
        for s in [&b"ab"[..], b""] {
            put_len_header(&mut m, 6, s.len() as u64);
            m.extend_from_slice(s);
        }

        let i16s = Elements::Varint { width: 2 };
        let span = element_span(&m, 0, 5, i16s).unwrap();
        assert_eq!((span.count, span.bytes, span.plain), (5, 10, None));
        for chunk in [1, 16, 1 << 20] {
            let got = decoded(&m, 5, i16s, chunk);
            let want: Vec<u8> = [1i16, -2, 0x3c00, 300, -1]
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect();
            assert_eq!(got, want, "chunk {chunk}");
        }
        let i64s = decoded(&m, 5, Elements::Varint { width: 8 }, 64);
        assert_eq!(&i64s[8..16], &(-2i64).to_le_bytes());

        let f32s = Elements::Fixed { width: 4 };
        let span = element_span(&m, 0, 4, f32s).unwrap();
        assert_eq!(
            (span.count, span.bytes, span.plain),
            (2, 8, Some((float_at, 8)))
        );
        assert_eq!(decoded(&m, 4, f32s, 64), floats);

        let span = element_span(&m, 0, 6, Elements::Bytes).unwrap();
        assert_eq!((span.count, span.bytes), (2, 8 + 2 + 8));
        let mut want = 2u64.to_le_bytes().to_vec();
        want.extend_from_slice(b"ab");
        want.extend_from_slice(&0u64.to_le_bytes());
        assert_eq!(decoded(&m, 6, Elements::Bytes, 64), want);

        // A field absent: no elements. A wire type that cannot hold them: an error.
        assert_eq!(element_span(&m, 0, 9, f32s).unwrap().count, 0);
        assert!(element_span(&m, 0, 1, f32s).is_err());
        assert!(element_span(&m, 0, 1, Elements::Bytes).is_err());
        // Packed fixed bytes that are not whole values.
        let mut bad = Vec::new();
        put_len_header(&mut bad, 4, 3);
        bad.extend_from_slice(&[1, 2, 3]);
        assert!(element_span(&bad, 0, 4, f32s).is_err());
    }

    #[test]
    fn packed_varints_and_counts() {
        let mut b = Vec::new();
        for v in [1u64, 300, 0, u64::MAX] {
            put_varint(&mut b, v);
        }
        assert_eq!(count_varints(&b, 0).unwrap(), 4);
        let v: Vec<u64> = packed_varints(&b, 0).collect::<Result<_>>().unwrap();
        assert_eq!(v, [1, 300, 0, u64::MAX]);
        assert!(count_varints(&b[..b.len() - 1], 0).is_err());
        assert!(packed_varints(&b[..b.len() - 1], 0)
            .collect::<Result<Vec<_>>>()
            .is_err());
    }
}

/// How a repeated field holds the elements [`put_elements`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holder {
    /// `float` (packed): four bytes each, the element's own bits.
    Float,
    /// `double` (packed): eight bytes each.
    Double,
    /// `int32`/`int64`/`uint32`/`uint64`/`bool`/enums (packed): a varint each, the
    /// element widened as its type says (signed types sign-extended, float16 and
    /// bfloat16 as their 16-bit pattern, bool 0/1).
    Varint,
    /// `bytes`/`string`, not repeated: the elements' bytes as they are.
    Bytes,
    /// `bytes`/`string`, repeated: one value per element of a string tensor.
    Strings,
}

impl Holder {
    /// The elements `data` (`dtype`, little-endian) held this way, for [`append`].
    pub fn elements(self, dtype: tensorfmt_core::DType, data: &[u8]) -> Extra<'_> {
        Extra::Elements(self, dtype, data)
    }
}

/// Writes the elements `data` (little-endian, `dtype`; a string tensor as each element's
/// u64-LE length then its bytes) as field `number` held as `holder` says. Refuses
/// element types the holder cannot hold (a float tensor in a varint field).
pub fn put_elements(
    out: &mut Vec<u8>,
    number: u32,
    holder: Holder,
    dtype: tensorfmt_core::DType,
    data: &[u8],
) -> Result<()> {
    use tensorfmt_core::DType as D;
    let bad = || {
        Error::from(ErrorKind::Unsupported(format!(
            "{dtype} elements in a {holder:?} field"
        )))
    };
    if data.is_empty() && holder != Holder::Bytes {
        // No elements: no field (as protobuf writes an empty repeated field).
        return Ok(());
    }
    match holder {
        Holder::Float | Holder::Double => {
            let ok = matches!(
                (holder, dtype),
                (Holder::Float, D::F32 | D::C64) | (Holder::Double, D::F64 | D::C128)
            );
            if !ok {
                return Err(bad());
            }
            put_len_header(out, number, data.len() as u64);
            out.extend_from_slice(data);
        }
        Holder::Bytes => {
            put_len_header(out, number, data.len() as u64);
            out.extend_from_slice(data);
        }
        Holder::Strings => {
            if dtype != D::String {
                return Err(bad());
            }
            let mut pos = 0usize;
            while pos < data.len() {
                let n = data
                    .get(pos..pos + 8)
                    .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
                    .ok_or_else(|| {
                        Error::from(ErrorKind::Invalid("a string element is cut".into()))
                    })?;
                let start = pos + 8;
                let end = usize::try_from(n)
                    .ok()
                    .and_then(|n| start.checked_add(n))
                    .filter(|&e| e <= data.len())
                    .ok_or_else(|| {
                        Error::from(ErrorKind::Invalid("a string element is cut".into()))
                    })?;
                put_len_header(out, number, (end - start) as u64);
                out.extend_from_slice(&data[start..end]);
                pos = end;
            }
        }
        Holder::Varint => {
            let item = dtype.itemsize().ok_or_else(bad)?;
            if item == 0 || data.len() % item != 0 {
                return Err(bad());
            }
            let mut packed = Vec::with_capacity(data.len() * 2);
            for e in data.chunks_exact(item) {
                let v: u64 = match dtype {
                    D::Bool => u64::from(e[0] != 0),
                    D::U8 => u64::from(e[0]),
                    D::I8 => e[0] as i8 as i64 as u64,
                    D::U16 | D::F16 | D::BF16 => u64::from(u16::from_le_bytes([e[0], e[1]])),
                    D::I16 => i16::from_le_bytes([e[0], e[1]]) as i64 as u64,
                    D::I32 => i32::from_le_bytes(e.try_into().expect("4 bytes")) as i64 as u64,
                    D::U32 => u64::from(u32::from_le_bytes(e.try_into().expect("4 bytes"))),
                    D::I64 | D::U64 => u64::from_le_bytes(e.try_into().expect("8 bytes")),
                    D::F8E4M3FN | D::F8E5M2 => u64::from(e[0]),
                    _ => return Err(bad()),
                };
                put_varint(&mut packed, v);
            }
            put_len_header(out, number, packed.len() as u64);
            out.extend_from_slice(&packed);
        }
    }
    Ok(())
}

/// A field [`append`] adds to an encoded message.
#[derive(Debug, Clone, Copy)]
pub enum Extra<'a> {
    /// A tensor's elements (`dtype`, little-endian bytes) held as [`put_elements`] writes
    /// them.
    Elements(Holder, tensorfmt_core::DType, &'a [u8]),
    /// An embedded message, encoded already.
    Message(&'a [u8]),
}

/// The encoded message `message` with the fields `extras` (numbers and values) appended,
/// in order: what a writer adds to a message its fields were encoded into (the tensor's
/// elements, written from its bytes without a copy per element). Errors: elements the
/// holder cannot hold ([`put_elements`]).
pub fn append<const N: usize>(
    mut message: Vec<u8>,
    extras: [(u32, Extra<'_>); N],
) -> Result<Vec<u8>> {
    for (number, extra) in extras {
        match extra {
            Extra::Elements(holder, dtype, data) => {
                put_elements(&mut message, number, holder, dtype, data)?
            }
            Extra::Message(bytes) => put_len_field(&mut message, number, bytes),
        }
    }
    Ok(message)
}
