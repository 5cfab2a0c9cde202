//! A call's arguments as tensor metadata: the conversions a format's mapping applies to
//! the arguments of a matched call (`t.size`, `t.storage.key`), each failing with an error
//! that names the argument as the schema does (`field`, such as `t.size`).

use std::borrow::Cow;

use super::value::Value;
use tensorfmt_core::error::{Error, ErrorKind, Result};
use tensorfmt_core::table::Table;
use tensorfmt_core::{ByteOrder, DType};

fn invalid(field: &str, why: &str) -> Error {
    Error::from(ErrorKind::Invalid(format!("`{field}` {why}"))).in_field(field)
}

/// Item `i` of the persistent id `id` (a tuple such as `('storage', class, key, ...)`);
/// `None` when `id` is absent, not a persistent id, or shorter.
pub fn item(id: Option<&Value>, i: usize) -> Option<&Value> {
    match id {
        Some(Value::Persistent(id)) => id.as_seq().and_then(|s| s.get(i)),
        _ => None,
    }
}

/// Item `i` of a tuple or list (counted from its end when negative, as Python does);
/// `None` when `v` is absent, not a sequence, or too short.
pub fn index(v: Option<&Value>, i: i128) -> Option<&Value> {
    let items = v?.as_items()?;
    let i = if i < 0 {
        i128::try_from(items.len()).ok()? + i
    } else {
        i
    };
    items.get(usize::try_from(i).ok()?)
}

/// `len(v)` as Python counts it: the characters of a string, the bytes of a byte string,
/// the items of a sequence or dict. Fails with [`ErrorKind::Invalid`] (naming `field`)
/// for anything else.
pub fn len(v: Option<&Value>, field: &str) -> Result<i128> {
    let n = match v {
        Some(Value::Str(s)) => s.chars().count(),
        Some(Value::Bytes(b)) => b.len(),
        Some(Value::Range(r)) => usize::try_from(r.len).unwrap_or(usize::MAX),
        Some(Value::Dict(d)) => d.len(),
        Some(x) => x
            .as_items()
            .ok_or_else(|| invalid(field, "has no length"))?
            .len(),
        None => return Err(invalid(field, "has no length")),
    };
    Ok(n as i128)
}

/// The attribute `name` of an object (the call's argument of that name — a dtype's
/// `descr` —, else its `BUILD` state's entry, or a dict-kind object's), or the entry
/// `name` of a dict; `None` when there is no such value.
pub fn attr<'v>(v: Option<&'v Value>, name: &str) -> Option<&'v Value> {
    match v? {
        Value::Object(o) if o.kind != crate::Kind::Dict => o
            .arg(name)
            .or_else(|| o.state.as_ref().and_then(|s| s.get(name))),
        other => other.get(name),
    }
}

/// The state `BUILD` gave an object (a NumPy array's `(version, shape, dtype,
/// is_fortran, data)`); for a dict or a dict-kind object, its entry `"state"`; `None`
/// when there is none.
pub fn state(v: Option<&Value>) -> Option<&Value> {
    match v? {
        Value::Object(o) if o.kind != crate::Kind::Dict => o.state.as_ref(),
        other => other.get("state"),
    }
}

/// True when the argument is absent or `None`.
pub fn is_none(v: Option<&Value>) -> bool {
    matches!(v, None | Some(Value::None))
}

/// The argument as a name: a global's `module.name`, a string, or an integer's digits.
/// Fails with [`ErrorKind::Invalid`] (`` `field` is not a name``) otherwise.
pub fn name<'v>(v: Option<&'v Value>, field: &str) -> Result<Cow<'v, str>> {
    match v {
        Some(Value::Int(i)) => Ok(Cow::Owned(i.to_string())),
        v => v
            .and_then(Value::as_name)
            .map(Cow::Borrowed)
            .ok_or_else(|| invalid(field, "is not a name")),
    }
}

/// The argument as a non-negative integer that fits in an `i64`. Fails with
/// [`ErrorKind::Invalid`] otherwise.
pub fn uint(v: Option<&Value>, field: &str) -> Result<u64> {
    v.and_then(Value::as_i64)
        .and_then(|i| u64::try_from(i).ok())
        .ok_or_else(|| invalid(field, "is not a non-negative integer"))
}

/// The argument as integers: a tuple, list or tuple-kind object of integers that fit in an
/// `i64` (strides). Fails with [`ErrorKind::Invalid`] otherwise.
pub fn ints(v: Option<&Value>, field: &str) -> Result<Vec<i64>> {
    v.and_then(Value::as_int_list)
        .ok_or_else(|| invalid(field, "is not a tuple of integers"))
}

/// The argument as non-negative integers (a shape): as [`ints`], and no item negative.
pub fn dims(v: Option<&Value>, field: &str) -> Result<Vec<u64>> {
    ints(v, field)?
        .into_iter()
        .map(u64::try_from)
        .collect::<std::result::Result<_, _>>()
        .map_err(|_| invalid(field, "has a negative item"))
}

/// The row of `table` that the argument names (see [`name`]). Fails with
/// [`ErrorKind::UnknownDType`] when the table has no such key.
pub fn lookup(
    table: &Table<&'static str>,
    v: Option<&Value>,
    field: &str,
) -> Result<(DType, Option<ByteOrder>)> {
    let key = name(v, field)?;
    table
        .get(&*key)
        .ok_or_else(|| Error::from(ErrorKind::UnknownDType(key.into_owned())).in_field(field))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_name_the_field() {
        let id = Value::Persistent(std::sync::Arc::new(Value::tuple(vec![
            Value::str("storage"),
            Value::global("torch.FloatStorage"),
            Value::Int(3),
        ])));
        assert_eq!(name(item(Some(&id), 1), "c").unwrap(), "torch.FloatStorage");
        assert_eq!(name(item(Some(&id), 2), "k").unwrap(), "3");
        assert!(item(Some(&id), 3).is_none() && is_none(item(Some(&id), 3)));
        let e = name(item(Some(&id), 3), "t.storage.key").unwrap_err();
        assert_eq!(e.location.field.as_deref(), Some("t.storage.key"));
        let shape = Value::tuple(vec![Value::Int(2), Value::Int(-1)]);
        assert_eq!(ints(Some(&shape), "s").unwrap(), [2, -1]);
        assert!(dims(Some(&shape), "t.size")
            .unwrap_err()
            .to_string()
            .contains("negative"));
        assert_eq!(uint(Some(&Value::Int(4)), "o").unwrap(), 4);
        assert!(uint(Some(&Value::Int(-4)), "o").is_err());
        let table = Table {
            name: "t",
            rows: &[("a", DType::F32, None)],
        };
        assert_eq!(
            lookup(&table, Some(&Value::str("a")), "d").unwrap(),
            (DType::F32, None)
        );
        let e = lookup(&table, Some(&Value::str("b")), "d").unwrap_err();
        assert!(matches!(e.kind, ErrorKind::UnknownDType(_)), "{e}");
    }
}
