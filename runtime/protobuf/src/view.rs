//! Message views read in place: the trait generated view types implement ([`View`],
//! derived with `#[derive(View)]`), the reader that walks a message into one ([`read`]),
//! and the typed accessors of a field's value ([`Field::varint`], [`Field::str`],
//! [`Field::message`], ...) that check its wire type and name the field in errors.

use tensorfmt_core::error::{Error, ErrorKind, Location, Result};
use tensorfmt_core::Limits;

use crate::{fields, utf8, wrong_wire_type, Field, Value, WireType};

/// A message's bytes in the input and the absolute offset of the first: what a view keeps
/// of its message, for the fields it leaves in place (repeated numbers, read by
/// [`crate::dims`] and [`crate::elements`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Span<'a> {
    /// The message's bytes.
    pub bytes: &'a [u8],
    /// Absolute offset of the first.
    pub base: u64,
}

/// A message read in place: a view type generated for a declared message, holding its
/// declared fields (scalars decoded, strings and bytes borrowed from the input, embedded
/// messages as views) and its own bytes.
///
/// Implemented with `#[derive(View)]` (the derive of the same name, from
/// `tensorfmt-protobuf-derive`), which writes `field` as one `match` arm per field from
/// the struct's attributes:
///
/// ```
/// use tensorfmt_core::Limits;
/// use tensorfmt_protobuf::{read, Span, View};
///
/// /// `message Pair { optional string key = 1; repeated bytes values = 2; }`
/// #[derive(Debug, Default, View)]
/// #[view(name = "Pair", crate = "tensorfmt_protobuf")]
/// struct Pair<'a> {
///     #[view(span)]
///     span: Span<'a>,
///     #[view(1, string)]
///     key: Option<&'a str>,
///     #[view(2, bytes, repeated)]
///     values: Vec<(&'a [u8], u64)>,
/// }
///
/// let bytes = [0x0a, 0x01, b'k', 0x12, 0x02, 7, 8];
/// let pair: Pair<'_> = read(&bytes, 0, 0, &Limits::default()).unwrap();
/// assert_eq!(pair.key, Some("k"));
/// assert_eq!(pair.values, [(&[7u8, 8][..], 5)]);
/// assert_eq!(pair.span.bytes.len(), 7);
/// ```
///
/// (Generated code leaves out `crate = ..`: the derive names the runtime as
/// `::tensorfmt_runtime::gen::protobuf` by default.)
pub trait View<'a>: Sized {
    /// The message's name, for errors.
    const NAME: &'static str;

    /// The view of a message with no field set, whose bytes are `span`.
    fn empty(span: Span<'a>) -> Self;

    /// Takes in one field of the message, which is `depth` messages deep: a declared
    /// field is decoded into the view (a later occurrence of a singular field replaces
    /// an earlier one; a repeated field adds to its list), others are ignored. Errors: a
    /// wire type the field's declaration does not use, text that is not UTF-8, and the
    /// errors of embedded messages.
    fn field(&mut self, f: &Field<'a>, depth: u64, limits: &Limits) -> Result<()>;
}

/// Reads the message `bytes` (its first byte at absolute offset `base`, `depth` messages
/// deep) as the view `M`: every field in wire order handed to [`View::field`]. Errors: a
/// depth past `limits.max_depth` (an [`ErrorKind::Limit`] at `base`, naming the message),
/// and those of the wire format and of the view's fields.
#[inline]
pub fn read<'a, M: View<'a>>(bytes: &'a [u8], base: u64, depth: u64, limits: &Limits) -> Result<M> {
    if depth > limits.max_depth {
        return Err(too_deep(M::NAME, base, depth, limits));
    }
    let mut m = M::empty(Span { bytes, base });
    for f in fields(bytes, base) {
        m.field(&f?, depth, limits)?;
    }
    Ok(m)
}

/// The error of a message `depth` deep, past `limits.max_depth`.
#[cold]
#[inline(never)]
fn too_deep(name: &str, base: u64, depth: u64, limits: &Limits) -> Error {
    Error::new(
        ErrorKind::Limit {
            what: "protobuf message nesting depth",
            limit: limits.max_depth,
            actual: depth,
        },
        Location::default()
            .with_offset(base)
            .with_field(name.to_string()),
    )
}

impl<'a> Field<'a> {
    /// The value of a varint field (integers, bools, enums) as `i64` (two's complement,
    /// as `int64` stores it); an error naming `field` for another wire type.
    #[inline]
    pub fn varint(&self, field: &str) -> Result<i64> {
        match self.value {
            Value::Varint(v) => Ok(v as i64),
            _ => Err(wrong_wire_type(self, field)),
        }
    }

    /// The value of a `sint32`/`sint64` field (a zigzag varint); an error naming `field`
    /// for another wire type.
    #[inline]
    pub fn zigzag(&self, field: &str) -> Result<i64> {
        match self.value {
            Value::Varint(v) => Ok(crate::unzigzag(v)),
            _ => Err(wrong_wire_type(self, field)),
        }
    }

    /// The value of a `fixed32` field; an error naming `field` for another wire type.
    #[inline]
    pub fn fixed32(&self, field: &str) -> Result<i64> {
        match self.value {
            Value::I32(v) => Ok(i64::from(v)),
            _ => Err(wrong_wire_type(self, field)),
        }
    }

    /// The value of an `sfixed32` field; an error naming `field` for another wire type.
    #[inline]
    pub fn sfixed32(&self, field: &str) -> Result<i64> {
        match self.value {
            Value::I32(v) => Ok(i64::from(v as i32)),
            _ => Err(wrong_wire_type(self, field)),
        }
    }

    /// The value of a `fixed64`/`sfixed64` field as `i64` (two's complement); an error
    /// naming `field` for another wire type.
    #[inline]
    pub fn fixed64(&self, field: &str) -> Result<i64> {
        match self.value {
            Value::I64(v) => Ok(v as i64),
            _ => Err(wrong_wire_type(self, field)),
        }
    }

    /// The value of a `float` field; an error naming `field` for another wire type.
    #[inline]
    pub fn float(&self, field: &str) -> Result<f32> {
        match self.value {
            Value::I32(v) => Ok(f32::from_bits(v)),
            _ => Err(wrong_wire_type(self, field)),
        }
    }

    /// The value of a `double` field; an error naming `field` for another wire type.
    #[inline]
    pub fn double(&self, field: &str) -> Result<f64> {
        match self.value {
            Value::I64(v) => Ok(f64::from_bits(v)),
            _ => Err(wrong_wire_type(self, field)),
        }
    }

    /// The text of a `string` field, borrowed; an error naming `field` for another wire
    /// type or text that is not UTF-8.
    #[inline]
    pub fn str(&self, field: &str) -> Result<&'a str> {
        match self.value {
            Value::Len(b, at) => utf8(b, at, field),
            _ => Err(wrong_wire_type(self, field)),
        }
    }

    /// The bytes of a `bytes` field and the absolute offset of the first; an error
    /// naming `field` for another wire type.
    #[inline]
    pub fn bytes(&self, field: &str) -> Result<(&'a [u8], u64)> {
        match self.value {
            Value::Len(b, at) => Ok((b, at)),
            _ => Err(wrong_wire_type(self, field)),
        }
    }

    /// The embedded message of a message field, read as `M` one level deeper than
    /// `depth`, the depth of the message holding the field ([`read`]); an error naming
    /// `field` for another wire type.
    #[inline]
    pub fn message<M: View<'a>>(&self, field: &str, depth: u64, limits: &Limits) -> Result<M> {
        let (b, at) = self.bytes(field)?;
        read(b, at, depth + 1, limits)
    }

    /// [`Field::message`] of a singular message field, `held` when the message already
    /// gave the field a value. A second occurrence is refused rather than read: protobuf
    /// merges it into the first (repeated fields concatenated, scalars last-wins), so
    /// keeping either one alone would read the message differently from protobuf and
    /// the tools built on it (`onnx.load`).
    #[inline]
    pub fn message_once<M: View<'a>>(
        &self,
        held: bool,
        field: &str,
        depth: u64,
        limits: &Limits,
    ) -> Result<M> {
        if held {
            return Err(crate::error(
                self.offset,
                format!(
                    "`{field}` appears twice; protobuf would merge the two messages, which \
                     this reader refuses to guess at (write the message once)"
                ),
            ));
        }
        self.message(field, depth, limits)
    }

    /// [`Field::message`] of an item of a repeated message field that holds `held` items
    /// already. The items of the formats' repeated messages are tensors or what describes
    /// them (a record's tensors, a graph's initializers and nodes): at most
    /// `limits.max_tensors` are read, each view taking memory for a few bytes of input
    /// (an empty message takes two), past them an [`ErrorKind::Limit`] at the item.
    #[inline]
    pub fn message_item<M: View<'a>>(
        &self,
        held: usize,
        field: &str,
        depth: u64,
        limits: &Limits,
    ) -> Result<M> {
        if held as u64 >= limits.max_tensors {
            return Err(Error::new(
                ErrorKind::Limit {
                    what: "items of a repeated message field (`Limits::max_tensors`)",
                    limit: limits.max_tensors,
                    actual: held as u64 + 1,
                },
                Location::default()
                    .with_offset(self.offset)
                    .with_field(field.to_string()),
            ));
        }
        self.message(field, depth, limits)
    }
}

/// Whether every field of the message `bytes` (first byte at `base`) is well formed and
/// has one of the `numbers` (a record value that holds nothing but the fields of the
/// message it is read as).
pub fn only_fields(bytes: &[u8], base: u64, numbers: &[u32]) -> bool {
    fields(bytes, base).all(|f| matches!(f, Ok(f) if numbers.contains(&f.number)))
}

/// Whether `bytes` reads as a message whose fields `declared` (numbers and wire types)
/// have their declared wire types, at least one of them present, every field well formed
/// (the detector of a document format).
pub fn is_message(bytes: &[u8], declared: &[(u32, WireType)]) -> bool {
    let mut known = false;
    for f in fields(bytes, 0) {
        let Ok(f) = f else {
            return false;
        };
        if let Some((_, wire)) = declared.iter().find(|(n, _)| *n == f.number) {
            if f.value.wire_type() != *wire {
                return false;
            }
            known = true;
        }
    }
    known
}

/// [`is_message`] over any random-access source: for bytes in memory, that; otherwise
/// only each top-level field's tag and length are read (a few bytes each), never its
/// value, so that a document in object storage is recognised from the blocks that hold
/// its fields' headers. At most 2^20 fields are walked.
pub fn is_message_at(
    src: &dyn tensorfmt_core::source::RandomAccess,
    declared: &[(u32, WireType)],
) -> bool {
    if let Some(bytes) = src.as_slice() {
        return is_message(bytes, declared);
    }
    let len = src.len();
    let (mut pos, mut known, mut steps) = (0u64, false, 0u32);
    let mut head = [0u8; 20];
    while pos < len {
        steps += 1;
        if steps > 1 << 20 {
            return false;
        }
        let n = (len - pos).min(head.len() as u64) as usize;
        let head = &mut head[..n];
        if src.read_exact_at(pos, head).is_err() {
            return false;
        }
        let Ok((tag, p)) = crate::read_varint(head, 0, 0) else {
            return false;
        };
        let number = tag >> 3;
        if number == 0 || number > (1 << 29) - 1 {
            return false;
        }
        let (wire, size) = match tag & 7 {
            0 => match crate::read_varint(head, p, 0) {
                Ok((_, q)) => (WireType::Varint, q as u64),
                Err(_) => return false,
            },
            1 => (WireType::I64, p as u64 + 8),
            2 => match crate::read_varint(head, p, 0) {
                Ok((l, q)) => match (q as u64).checked_add(l) {
                    Some(size) => (WireType::Len, size),
                    None => return false,
                },
                Err(_) => return false,
            },
            5 => (WireType::I32, p as u64 + 4),
            _ => return false,
        };
        if size > len - pos {
            return false;
        }
        if let Some((_, want)) = declared.iter().find(|(k, _)| u64::from(*k) == number) {
            if *want != wire {
                return false;
            }
            known = true;
        }
        pos += size;
    }
    known
}

#[cfg(test)]
mod tests {
    use crate::{Field, Value};

    #[test]
    fn messages_are_told_from_their_headers_alone() {
        use crate::WireType::{Len, Varint};
        let declared = [(1, Varint), (7, Len)];
        let mut doc = Vec::new();
        crate::put_tag(&mut doc, 1, Varint);
        crate::put_varint(&mut doc, 8);
        crate::put_len_field(&mut doc, 7, &[0u8; 300]);
        crate::put_len_field(&mut doc, 20, b"unknown field");
        // Read through a stream: only headers are read.
        let stream = |b: &[u8]| {
            tensorfmt_core::source::Stream::new(std::io::Cursor::new(b.to_vec())).unwrap()
        };
        for (bytes, want) in [
            (doc.clone(), true),
            (doc[..doc.len() - 1].to_vec(), false),
            (b"\x08".to_vec(), false),
            (vec![0x0b], false),
            (vec![], false),
        ] {
            assert_eq!(
                super::is_message_at(&stream(&bytes), &declared),
                want,
                "{bytes:?}"
            );
            assert_eq!(super::is_message(&bytes, &declared), want, "{bytes:?}");
        }
        // A declared field of another wire type.
        let mut wrong = Vec::new();
        crate::put_len_field(&mut wrong, 1, b"x");
        assert!(!super::is_message_at(&stream(&wrong), &declared));
    }

    fn field(value: Value<'_>) -> Field<'_> {
        Field {
            number: 1,
            value,
            offset: 0,
        }
    }

    #[test]
    fn zigzag_and_fixed_values() {
        assert_eq!(field(Value::Varint(0)).zigzag("f").unwrap(), 0);
        assert_eq!(field(Value::Varint(1)).zigzag("f").unwrap(), -1);
        assert_eq!(field(Value::Varint(4)).zigzag("f").unwrap(), 2);
        assert_eq!(
            field(Value::Varint(u64::MAX)).zigzag("f").unwrap(),
            i64::MIN
        );
        let v = field(Value::I32(u32::MAX));
        assert_eq!(v.fixed32("f").unwrap(), i64::from(u32::MAX));
        assert_eq!(v.sfixed32("f").unwrap(), -1);
        assert_eq!(field(Value::I64(u64::MAX)).fixed64("f").unwrap(), -1);
        assert!(field(Value::Varint(1)).fixed64("f").is_err());
        assert!(field(Value::I64(1)).zigzag("f").is_err());
        assert!(field(Value::I64(1)).sfixed32("f").is_err());
    }
}
