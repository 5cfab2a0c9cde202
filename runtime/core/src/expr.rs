//! The integer arithmetic of generated expressions.
//!
//! Every integer expression of a `.fmt` schema (a `size`, a `count`, an offset, a `write`
//! rule, a `check`) is evaluated in `i128`, so that values read from `u64` and `i64`
//! fields mix without casts. Operations are checked: a result that does not fit, a
//! division by zero, a negative byte count or a value too wide for its field is an
//! error that names the operation and its operands, never a wrap or a panic. Generated
//! code calls these functions and adds the field (`Error::in_field`) and the file.

use std::fmt::Display;

use crate::dtype::DType;
use crate::error::{Error, ErrorKind, Result};

fn overflow(what: String) -> Error {
    Error::from(ErrorKind::Overflow(what))
}

/// `a + b`.
pub fn add(a: i128, b: i128) -> Result<i128> {
    a.checked_add(b)
        .ok_or_else(|| overflow(format!("{a} + {b} overflows")))
}

/// `a - b`.
pub fn sub(a: i128, b: i128) -> Result<i128> {
    a.checked_sub(b)
        .ok_or_else(|| overflow(format!("{a} - {b} overflows")))
}

/// `a * b`.
pub fn mul(a: i128, b: i128) -> Result<i128> {
    a.checked_mul(b)
        .ok_or_else(|| overflow(format!("{a} * {b} overflows")))
}

/// `a / b`, rounded toward zero; an error when `b` is 0.
pub fn div(a: i128, b: i128) -> Result<i128> {
    a.checked_div(b)
        .ok_or_else(|| overflow(format!("{a} / {b} is undefined")))
}

/// `a % b`; an error when `b` is 0.
pub fn rem(a: i128, b: i128) -> Result<i128> {
    a.checked_rem(b)
        .ok_or_else(|| overflow(format!("{a} % {b} is undefined")))
}

/// `align(n, a)`: `n` rounded up to a multiple of `a` (`a` positive, `n` not negative).
pub fn align(n: i128, a: i128) -> Result<i128> {
    if a <= 0 || n < 0 {
        return Err(overflow(format!("align({n}, {a}) is undefined")));
    }
    let r = n % a;
    if r == 0 {
        Ok(n)
    } else {
        add(n, a - r)
    }
}

/// `write_align(n)`: the alignment a save asks for (`asked`, [`crate::WriteOptions::align`]),
/// at least `n`; `n` when it asks none.
pub fn write_align(asked: Option<u64>, n: i128) -> i128 {
    asked.map_or(n, |a| n.max(i128::from(a)))
}

/// `digits(n)`: the number of decimal digits of `n` (not negative), Python's
/// `len(repr(n))`; `digits(0)` is 1.
pub fn digits(n: i128) -> Result<i128> {
    if n < 0 {
        return Err(overflow(format!("digits({n}) of a negative number")));
    }
    Ok(n.checked_ilog10().map_or(1, |d| i128::from(d) + 1))
}

/// A byte count, offset or repetition count: `v` as a `u64`, or an error saying what
/// `what` is and that `v` is negative or too large.
pub fn to_u64(v: i128, what: &str) -> Result<u64> {
    u64::try_from(v).map_err(|_| {
        overflow(format!(
            "{what} is {v}, which is not a byte count or a count (0..=2^64-1)"
        ))
    })
}

/// `v` narrowed to a field of type `T` named `ty` (`u16`): an error when it does not fit.
pub fn narrow<T: TryFrom<i128>>(v: i128, ty: &str) -> Result<T> {
    T::try_from(v).map_err(|_| overflow(format!("{v} does not fit in {ty}")))
}

/// `list[i]`: the item at position `i`, or an error naming the position and the length.
pub fn item<T>(list: &[T], i: i128) -> Result<&T> {
    usize::try_from(i)
        .ok()
        .and_then(|i| list.get(i))
        .ok_or_else(|| {
            Error::from(ErrorKind::Invalid(format!(
                "index {i} is out of range: the list has {} items",
                list.len()
            )))
        })
}

/// `first(list)`: an error when the list is empty.
pub fn first<T>(list: &[T]) -> Result<&T> {
    list.first().ok_or_else(empty)
}

/// `last(list)`: an error when the list is empty.
pub fn last<T>(list: &[T]) -> Result<&T> {
    list.last().ok_or_else(empty)
}

/// An item of a list of text as `&str`, whether the list holds `String`s or `&str`s.
pub fn text<T: AsRef<str> + ?Sized>(item: &T) -> &str {
    item.as_ref()
}

/// An item of a list of byte strings as `&[u8]`, whether the list holds `Vec<u8>`s or
/// `&[u8]`s.
pub fn bytes<T: AsRef<[u8]> + ?Sized>(item: &T) -> &[u8] {
    item.as_ref()
}

fn empty() -> Error {
    Error::from(ErrorKind::Invalid(
        "the list is empty: it has no first or last item".into(),
    ))
}

/// `len(list)` as an expression value.
pub fn len<T>(list: &[T]) -> i128 {
    list.len() as i128
}

/// `index_of(list, x)`: the position of the first item equal to `x`.
pub fn index_of<T: PartialEq + Display>(list: &[T], x: &T) -> Result<i128> {
    list.iter()
        .position(|v| v == x)
        .map(|p| p as i128)
        .ok_or_else(|| Error::from(ErrorKind::Invalid(format!("{x} is not in the list"))))
}

/// `slice(data, start, end)`: bytes `start..end` (`end` of `None`: to the end) of the
/// payload `data`, given as its absolute `(offset, len)`; offsets are relative to the
/// payload's first byte. An error when the range is reversed or leaves the payload.
pub fn slice(data: (u64, u64), start: i128, end: Option<i128>) -> Result<(u64, u64)> {
    let (offset, len) = data;
    let end = end.unwrap_or(i128::from(len));
    if start < 0 || end < start || end > i128::from(len) {
        return Err(Error::from(ErrorKind::Invalid(format!(
            "the byte range {start}..{end} is not within the {len} bytes of the data"
        ))));
    }
    // Both fit in u64: 0 <= start <= end <= len.
    Ok((offset + start as u64, (end - start) as u64))
}

/// `itemsize(dtype)`: bytes per element; an error for a dtype without a fixed size.
pub fn itemsize(d: DType) -> Result<i128> {
    d.itemsize().map(|n| n as i128).ok_or_else(|| {
        Error::from(ErrorKind::Unsupported(format!(
            "{d} has no fixed item size"
        )))
    })
}

/// The value of an optional dict key used in an expression: an error naming the key
/// when it is absent.
pub fn present<'v, T>(v: &'v Option<T>, key: &str) -> Result<&'v T> {
    v.as_ref().ok_or_else(|| {
        Error::from(ErrorKind::Invalid(format!("the key '{key}' is missing"))).in_field(key)
    })
}

/// A shape from a list of integers read from a file: each dimension as a `u64`, an
/// error for a negative one.
pub fn dims<T: Copy + TryInto<u64> + Display>(list: &[T]) -> Result<Vec<u64>> {
    list.iter()
        .map(|&d| {
            d.try_into().map_err(|_| {
                Error::from(ErrorKind::Invalid(format!("the dimension {d} is negative")))
            })
        })
        .collect()
}

/// A shape read from a list of integers stored last dimension first (`reverse(t.dims)`):
/// each dimension as a `u64`, an error for a negative one.
pub fn dims_reversed<T: Copy + TryInto<u64> + Display>(list: &[T]) -> Result<Vec<u64>> {
    let mut dims = self::dims(list)?;
    dims.reverse();
    Ok(dims)
}

/// `product(list)`: the product of the items (1 for none), checked.
pub fn product<T: Copy + Into<i128>>(list: &[T]) -> Result<i128> {
    list.iter().try_fold(1, |p, &x| mul(p, x.into()))
}

/// `sum(list)`: the sum of the items (0 for none), checked.
pub fn sum<T: Copy + Into<i128>>(list: &[T]) -> Result<i128> {
    list.iter().try_fold(0, |s, &x| add(s, x.into()))
}

/// `reverse(list)`: the items, last first.
pub fn reverse<T: Clone>(list: &[T]) -> Vec<T> {
    list.iter().rev().cloned().collect()
}

/// `lookup(list, key, default)` of integer values: the value of the first record whose
/// key (`entry` gives a record's key and its value as an integer, `None` when it is
/// not one) is `key`; `default` when none is. An error names the key whose value is not
/// an integer.
pub fn lookup_int<T>(
    list: &[T],
    key: &str,
    default: i128,
    entry: impl Fn(&T) -> (&str, Option<i128>),
) -> Result<i128> {
    match list.iter().map(entry).find(|(k, _)| *k == key) {
        None => Ok(default),
        Some((_, Some(v))) => Ok(v),
        Some((_, None)) => Err(Error::from(ErrorKind::Invalid(format!(
            "the value of '{key}' is not an integer"
        )))),
    }
}

/// `lookup(list, key, default)` of text values: the value of the first record whose key
/// (`entry` gives a record's key and value) is `key`, or `default`.
pub fn lookup_text<'a, T>(
    list: &'a [T],
    key: &str,
    default: &'a str,
    entry: impl Fn(&'a T) -> (&'a str, &'a str),
) -> &'a str {
    list.iter()
        .map(entry)
        .find(|(k, _)| *k == key)
        .map_or(default, |(_, v)| v)
}

/// `start` when it is a multiple of `align` (`slice(.., align = A)` on read), else an
/// error naming both.
pub fn aligned(start: i128, align: i128) -> Result<i128> {
    if align <= 0 || start % align != 0 {
        return Err(Error::from(ErrorKind::Invalid(format!(
            "the data's offset {start} is not a multiple of its alignment {align}"
        ))));
    }
    Ok(start)
}

/// A tensor's dimensions, last first, as the items of a list field of type `T` named
/// `ty` (`shape = reverse(t.dims)` written back): an error for one that does not fit.
pub fn ints_reversed<T: TryFrom<i128>>(dims: &[u64], ty: &str) -> Result<Vec<T>> {
    dims.iter()
        .rev()
        .map(|&d| narrow(i128::from(d), ty))
        .collect()
}

/// Checks that `n` items of `what` (tensors, records) are within `limit`.
pub fn within(n: usize, limit: u64, what: &'static str) -> Result<()> {
    if n as u64 > limit {
        return Err(Error::from(ErrorKind::Limit {
            what,
            limit,
            actual: n as u64,
        }));
    }
    Ok(())
}

/// `latin1(text)`: true when every character of `text` is below U+0100.
pub fn latin1(text: &str) -> bool {
    text.chars().all(|ch| u32::from(ch) < 0x100)
}

/// Appends a codec's `spare`: `n` spaces (an error when `n` is negative or over
/// `u32::MAX`).
pub fn push_spaces(text: &mut String, n: i128) -> Result<()> {
    let n = u32::try_from(n)
        .ok()
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| overflow(format!("a spare of {n} spaces")))?;
    text.extend(std::iter::repeat_n(' ', n));
    Ok(())
}

/// A tensor's dimensions as the items of a list field of type `T` named `ty`: an error
/// for a dimension that does not fit.
pub fn ints<T: TryFrom<i128>>(dims: &[u64], ty: &str) -> Result<Vec<T>> {
    dims.iter().map(|&d| narrow(i128::from(d), ty)).collect()
}

/// A `check` on write: `Ok` when `ok`, else the error `check `text` failed: field would be
/// value`.
pub fn check_on_write(field: &str, ok: bool, text: &str, value: impl Display) -> Result<()> {
    if ok {
        return Ok(());
    }
    Err(Error::from(ErrorKind::Invalid(format!(
        "check `{text}` failed: {field} would be {value}"
    )))
    .in_field(field))
}

/// Checks that the byte ranges of `tensors` tile the payload `data` (`(offset, len)`,
/// absolute): in the order of their starts, the first starts where the payload does, each
/// starts where the one before it ends, and the last ends where the payload does — no
/// holes, no overlaps, no bytes after them (`slice(.., tile = true)`: safetensors' data
/// offsets). Tensors not at a byte range of the file are left out. Offsets in errors
/// count from the payload's start.
pub fn tiled(tensors: &[crate::tensor::TensorInfo], data: (u64, u64)) -> Result<()> {
    let mut ranges: Vec<(u64, u64, &str)> = tensors
        .iter()
        .filter_map(|t| match t.location {
            crate::tensor::DataLocation::Range { offset, len } => {
                Some((offset.saturating_sub(data.0), len, t.name.as_str()))
            }
            _ => None,
        })
        .collect();
    ranges.sort_by_key(|&(start, len, _)| (start, len));
    let invalid = |msg: String| Err(Error::from(ErrorKind::Invalid(msg)));
    let mut end = 0u64;
    let mut before: Option<&str> = None;
    for &(start, len, name) in &ranges {
        if start > end {
            let after = before.map_or("before the first tensor".to_string(), |b| {
                format!("after '{b}'")
            });
            return invalid(format!(
                "bytes {end}..{start} of the data belong to no tensor (a hole {after}): \
                 the tensors' data offsets must follow each other"
            ));
        }
        if start < end {
            return invalid(format!(
                "the data of '{name}' (from byte {start}) overlaps that of '{}' (to byte {end})",
                before.unwrap_or_default()
            ));
        }
        end = start
            .checked_add(len)
            .ok_or_else(|| Error::from(ErrorKind::Overflow(format!("the end of '{name}'"))))?;
        before = Some(name);
    }
    if end != data.1 {
        return invalid(format!(
            "bytes {end}..{} at the end of the data belong to no tensor",
            data.1
        ));
    }
    Ok(())
}

/// One part of an item's place in a writer's order (`write_order = [..]`), each in its
/// natural order: integers by value, text by its bytes, `false` before `true`. The keys
/// at one place of the list are of one type (the schema's).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum SortKey {
    /// An integer.
    Int(i128),
    /// Text, by its bytes.
    Text(String),
    /// A condition: items for which it is false first.
    Bool(bool),
}

impl SortKey {
    /// A text key.
    pub fn text(s: impl AsRef<str>) -> SortKey {
        SortKey::Text(s.as_ref().to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_align_is_the_asked_alignment_at_least_n() {
        assert_eq!(write_align(None, 8), 8);
        assert_eq!(write_align(Some(4096), 8), 4096);
        assert_eq!(write_align(Some(4), 8), 8);
        assert_eq!(write_align(Some(1), 1), 1);
    }

    #[test]
    fn sort_keys_put_false_before_true_then_the_later_keys() {
        // safetensors with `--align 64`: sizes that are multiples of 64 first, then by
        // dtype (decreasing alignment), then by name.
        let key = |odd: bool, dtype: i128, name: &str| {
            vec![
                SortKey::Bool(odd),
                SortKey::Int(-dtype),
                SortKey::text(name),
            ]
        };
        let mut keys = vec![
            key(true, 1, "a"),
            key(false, 1, "z"),
            key(true, 8, "b"),
            key(false, 8, "c"),
            key(false, 8, "a"),
        ];
        keys.sort();
        assert_eq!(
            keys,
            vec![
                key(false, 8, "a"),
                key(false, 8, "c"),
                key(false, 1, "z"),
                key(true, 8, "b"),
                key(true, 1, "a"),
            ]
        );
    }

    #[test]
    fn arithmetic_is_checked() {
        assert_eq!(add(2, 3).unwrap(), 5);
        assert!(add(i128::MAX, 1).is_err());
        assert!(mul(i128::from(u64::MAX), i128::from(u64::MAX)).is_err());
        assert!(div(1, 0).is_err());
        assert!(rem(1, 0).is_err());
        assert_eq!(sub(1, 3).unwrap(), -2);
        assert_eq!(align(13, 8).unwrap(), 16);
        assert_eq!(align(16, 8).unwrap(), 16);
        assert!(align(1, 0).is_err());
        assert_eq!(digits(0).unwrap(), 1);
        assert_eq!(digits(999).unwrap(), 3);
        assert_eq!(digits(1000).unwrap(), 4);
    }

    #[test]
    fn conversions_and_lists() {
        assert!(to_u64(-1, "size").is_err());
        assert_eq!(to_u64(7, "size").unwrap(), 7);
        assert_eq!(narrow::<u16>(65535, "u16").unwrap(), 65535);
        assert!(narrow::<u16>(65536, "u16").is_err());
        let l = [3u64, 4, 5];
        assert_eq!(*item(&l, 2).unwrap(), 5);
        assert!(item(&l, 3).is_err());
        assert!(item(&l, -1).is_err());
        assert_eq!(*first(&l).unwrap(), 3);
        assert_eq!(*last(&l).unwrap(), 5);
        assert!(first::<u64>(&[]).is_err());
        assert_eq!(index_of(&l, &4).unwrap(), 1);
        assert!(index_of(&l, &9).is_err());
    }

    #[test]
    fn list_expressions_are_checked() {
        assert_eq!(product(&[2u64, 3, 4]).unwrap(), 24);
        assert_eq!(product::<u64>(&[]).unwrap(), 1);
        assert!(product(&[u64::MAX, u64::MAX, u64::MAX]).is_err());
        assert_eq!(sum(&[2u32, 3]).unwrap(), 5);
        assert_eq!(reverse(&[1u8, 2, 3]), [3, 2, 1]);
        assert_eq!(dims_reversed(&[4u64, 3]).unwrap(), [3, 4]);
        assert_eq!(ints_reversed::<u32>(&[3, 4], "u32").unwrap(), [4, 3]);
        let kv = [("a", Some(1)), ("b", None), ("a", Some(2))];
        assert_eq!(lookup_int(&kv, "a", 9, |e| (e.0, e.1)).unwrap(), 1);
        assert_eq!(lookup_int(&kv, "c", 9, |e| (e.0, e.1)).unwrap(), 9);
        assert!(lookup_int(&kv, "b", 9, |e| (e.0, e.1)).is_err());
        let t = [("k", "v")];
        assert_eq!(lookup_text(&t, "k", "d", |e| (e.0, e.1)), "v");
        assert_eq!(lookup_text(&t, "x", "d", |e| (e.0, e.1)), "d");
        assert_eq!(aligned(64, 32).unwrap(), 64);
        assert!(aligned(65, 32).is_err());
        assert!(aligned(0, 0).is_err());
    }

    #[test]
    fn slices_stay_within_the_data() {
        assert_eq!(slice((100, 10), 2, Some(6)).unwrap(), (102, 4));
        assert_eq!(slice((100, 10), 4, None).unwrap(), (104, 6));
        assert!(slice((100, 10), 6, Some(4)).is_err());
        assert!(slice((100, 10), 0, Some(11)).is_err());
        assert!(slice((100, 10), -1, Some(2)).is_err());
    }
}
