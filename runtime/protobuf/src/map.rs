//! What the code generated for a mapping over messages calls: the loop over a message's
//! items ([`map_items`]) and over a document ([`index`]), and the pieces of one item's
//! tensor — a required value ([`present`]), its dtype by a table ([`dtype`]), its shape
//! ([`dims`]), and where its elements are: a `bytes` field ([`located`]), a repeated
//! field's values ([`elements`]) or a file beside the document ([`external`]).

use tensorfmt_core::error::{Error, ErrorKind, Result};
use tensorfmt_core::parts::StoredData;
use tensorfmt_core::source::Source;
use tensorfmt_core::table::Table;
use tensorfmt_core::{ByteOrder, DType, DataLocation, Limits, TensorInfo};

use crate::{element_span, int_values, Elements, FieldValues, Span};

/// Lists the tensors of the document `src`: `map` is given its bytes (whole, read once)
/// and the list to add to. Every error is given `src`'s path; more tensors than
/// `limits.max_tensors` is an [`ErrorKind::Limit`].
pub fn index(
    src: &Source,
    limits: &Limits,
    map: impl FnOnce(&[u8], &mut Vec<TensorInfo>) -> Result<()>,
) -> Result<Vec<TensorInfo>> {
    let in_file = |e: Error| src.in_file(e);
    let whole = src.whole().map_err(in_file)?;
    let mut tensors = Vec::new();
    map(&whole, &mut tensors).map_err(in_file)?;
    if tensors.len() as u64 > limits.max_tensors {
        return Err(in_file(Error::from(ErrorKind::Limit {
            what: "tensors",
            limit: limits.max_tensors,
            actual: tensors.len() as u64,
        })));
    }
    Ok(tensors)
}

/// Maps `items` in order: `map` is given each item and its position, and returns what it
/// makes of it (`None`: the item is not a tensor), which is added to `out`. An error of
/// an item is given the item as its entry: its name (`name_of`) when it has a non-empty
/// one, else `{prefix}#{position}`.
pub fn map_items<'i, M: 'i, T>(
    items: impl IntoIterator<Item = &'i M>,
    name_of: impl Fn(&'i M) -> Option<&'i str>,
    prefix: &str,
    out: &mut Vec<T>,
    mut map: impl FnMut(&'i M, usize) -> Result<Option<T>>,
) -> Result<()> {
    let items = items.into_iter();
    // Most items are tensors: one allocation for the list instead of one per doubling.
    out.reserve(items.size_hint().0);
    for (position, item) in items.enumerate() {
        match map(item, position) {
            Ok(Some(t)) => out.push(t),
            Ok(None) => {}
            Err(e) => {
                let what = match name_of(item) {
                    Some(n) if !n.is_empty() => n.to_string(),
                    _ => format!("{prefix}#{position}"),
                };
                return Err(e.in_entry(&what));
            }
        }
    }
    Ok(())
}

/// `value`, which the mapping requires: an error saying that `what` (the schema's words
/// for it) is missing when it is absent.
pub fn present<T>(value: Option<T>, what: &str) -> Result<T> {
    value.ok_or_else(|| Error::from(ErrorKind::Invalid(format!("`{what}` is missing"))))
}

/// A shape: the values of the repeated integer field `number` of the message `msg`,
/// packed or not; an error naming `what` when one is negative.
pub fn dims(msg: Span<'_>, number: u32, what: &str) -> Result<Vec<u64>> {
    int_values(msg, number)?
        .into_iter()
        .map(u64::try_from)
        .collect::<std::result::Result<Vec<u64>, _>>()
        .map_err(|_| Error::from(ErrorKind::Invalid(format!("`{what}` has a negative item"))))
}

/// The elements held as they are in a `bytes` field (its bytes and their absolute
/// offset): a zero-copy range of the source; an error saying that `what` is missing when
/// the field is absent.
pub fn located(field: Option<(&[u8], u64)>, what: &str) -> Result<StoredData> {
    let (b, at) = present(field, what)?;
    Ok(StoredData::bytes(DataLocation::Range {
        offset: at,
        len: b.len() as u64,
    }))
}

/// The elements held as the values of the repeated field `number` of the message `msg`,
/// read as `elements` says: a zero-copy
/// range when they are fixed-width values packed in one occurrence, else values decoded
/// when the tensor is read ([`FieldValues`]); strings are counted. Errors: wire types
/// that cannot hold such elements, packed bytes that are not whole values.
pub fn elements(msg: Span<'_>, number: u32, elements: Elements) -> Result<StoredData> {
    let Span { bytes, base } = msg;
    let span = element_span(bytes, base, number, elements)?;
    let location = match (elements, span.plain) {
        (Elements::Fixed { .. }, Some((offset, len))) => DataLocation::Range { offset, len },
        _ => FieldValues {
            offset: base,
            message_len: bytes.len() as u64,
            number,
            elements,
            len: span.bytes,
        }
        .location(),
    };
    Ok(StoredData {
        location,
        strings: (elements == Elements::Bytes).then_some(span.count),
    })
}

/// The elements held in a file beside the document (ONNX's external data): the file
/// `location` names (relative to the document's folder, [`Source::external`]), from byte
/// `offset` (default 0), `length` bytes (default: to the end of the file); offset and
/// length are decimal text. Errors: no location, a number that is not a non-negative
/// integer, a file that cannot be opened, and a range past the end of the file (naming
/// the file and the offset).
pub fn external(
    src: &Source,
    location: Option<&str>,
    offset: Option<&str>,
    length: Option<&str>,
) -> Result<StoredData> {
    let path = location.ok_or_else(|| {
        Error::from(ErrorKind::Invalid(
            "external data without a location".to_string(),
        ))
    })?;
    let number = |s: Option<&str>, what: &str| -> Result<Option<u64>> {
        s.map(|s| {
            s.trim().parse::<u64>().map_err(|_| {
                Error::from(ErrorKind::Invalid(format!(
                    "external data {what} {s:?} is not a non-negative integer"
                )))
            })
        })
        .transpose()
    };
    let file = src.external(path)?;
    let size = file.as_bytes().len() as u64;
    let offset = number(offset, "offset")?.unwrap_or(0);
    let len = match number(length, "length")? {
        Some(n) => n,
        None => size.checked_sub(offset).ok_or_else(|| {
            Error::from(ErrorKind::Invalid(format!(
                "external data offset {offset} is past the end of '{path}' ({size} bytes)"
            )))
        })?,
    };
    match offset.checked_add(len) {
        Some(end) if end <= size => {}
        _ => {
            return Err(Error::from(ErrorKind::Truncated {
                needed: len,
                available: size.saturating_sub(offset),
            })
            .in_field(&format!("external file '{path}' at offset {offset}")))
        }
    }
    Ok(StoredData::bytes(DataLocation::External {
        path: path.to_string(),
        offset,
        len,
    }))
}

/// The value of the last of `items` whose key is `key`, as a map field keeps it (`entry`
/// gives an item's key and value); `None` when no item has that key or it has no value.
pub fn lookup<'m, M>(
    items: &'m [M],
    key: &str,
    entry: impl Fn(&'m M) -> (Option<&'m str>, Option<&'m str>),
) -> Option<&'m str> {
    items
        .iter()
        .rev()
        .map(entry)
        .find(|(k, _)| *k == Some(key))
        .and_then(|(_, v)| v)
}

/// The last of `items` whose name (`name_of`) is `name`.
pub fn named<'m, M>(
    items: &'m [M],
    name: &str,
    name_of: impl Fn(&'m M) -> Option<&'m str>,
) -> Option<&'m M> {
    items.iter().rev().find(|x| name_of(x) == Some(name))
}

/// The key the table `table` gives `dtype` on write (for elements stored little-endian,
/// as protobuf formats write them), as the integer type of the field it goes to. Errors:
/// an [`ErrorKind::Unsupported`] listing the dtypes the table stores when it has no key
/// for the dtype ([`Table::cannot_store`]), an
/// [`ErrorKind::Overflow`] when the key does not fit the field.
pub fn key_of<T: TryFrom<i64>>(table: &Table<i64>, dtype: DType) -> Result<T> {
    let key = *table
        .key_for(dtype, ByteOrder::Little)
        .ok_or_else(|| table.cannot_store(None, dtype, None))?;
    T::try_from(key)
        .map_err(|_| Error::from(ErrorKind::Overflow(format!("`{}` key {key}", table.name))))
}

/// `value` as the integer type of the field `field`; an [`ErrorKind::Overflow`] naming
/// the field when it does not fit.
pub fn narrow<T: TryFrom<V>, V>(value: V, field: &str) -> Result<T> {
    T::try_from(value).map_err(|_| Error::from(ErrorKind::Overflow(field.to_string())))
}

/// `values` (a shape) as the integer type of the repeated field `field`; an
/// [`ErrorKind::Overflow`] naming the field when one does not fit.
pub fn ints<T: TryFrom<u64>>(values: &[u64], field: &str) -> Result<Vec<T>> {
    values
        .iter()
        .map(|&v| T::try_from(v))
        .collect::<std::result::Result<Vec<T>, _>>()
        .map_err(|_| Error::from(ErrorKind::Overflow(field.to_string())))
}

impl Elements {
    /// Varints truncated to the size of `dtype`'s elements (8 bytes for those without
    /// a fixed size).
    pub fn varints(dtype: DType) -> Elements {
        Elements::Varint {
            width: dtype.itemsize().unwrap_or(8).clamp(1, 8) as u8,
        }
    }

    /// Zigzag varints (`sint32`, `sint64` fields) truncated to the size of `dtype`'s
    /// elements (8 bytes for those without a fixed size).
    pub fn zigzags(dtype: DType) -> Elements {
        Elements::Zigzag {
            width: dtype.itemsize().unwrap_or(8).clamp(1, 8) as u8,
        }
    }
}
