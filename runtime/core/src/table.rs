//! A format's dtype table (`table descr: str -> dtype { ... }` in `.fmt`): rows of a key,
//! the dtype it names and the byte order it fixes, looked up both ways.
//!
//! Generated code holds each table as a `const` [`Table`] of its rows, in the schema's
//! order; reading looks a key up ([`Table::get`]), writing finds the key of a dtype
//! ([`Table::key_for`]). A table has a few dozen rows at most, so a scan in row order is
//! what a `match` would do, and it keeps the schema's rule that the first matching row
//! wins in one place.

use std::borrow::Borrow;
use std::fmt::Display;

use crate::dtype::DType;
use crate::error::{Error, ErrorKind, Result};
use crate::tensor::ByteOrder;

/// One row: the key, the dtype it names, and the byte order it fixes (`None`: any, as
/// for one-byte dtypes, or a format that stores every dtype in one order).
pub type Row<K> = (K, DType, Option<ByteOrder>);

/// A dtype table: its name in the schema (for errors) and its rows in schema order.
#[derive(Debug, Clone, Copy)]
pub struct Table<K: 'static> {
    /// The table's name in the schema.
    pub name: &'static str,
    /// The rows, in the schema's order.
    pub rows: &'static [Row<K>],
}

impl<K: 'static> Table<K> {
    /// The dtype and byte order of the first row whose key is `key`.
    pub fn get<Q: PartialEq + ?Sized>(&self, key: &Q) -> Option<(DType, Option<ByteOrder>)>
    where
        K: Borrow<Q>,
    {
        self.rows
            .iter()
            .find(|r| r.0.borrow() == key)
            .map(|r| (r.1, r.2))
    }

    /// The key of the first row for `dtype` whose byte order is `order` or unset.
    pub fn key_for(&self, dtype: DType, order: ByteOrder) -> Option<&'static K> {
        self.rows
            .iter()
            .find(|r| r.1 == dtype && r.2.is_none_or(|o| o == order))
            .map(|r| &r.0)
    }

    /// As [`Table::get`], or an [`ErrorKind::UnknownDType`] naming the key.
    pub fn lookup<Q: PartialEq + Display + ?Sized>(
        &self,
        key: &Q,
    ) -> Result<(DType, Option<ByteOrder>)>
    where
        K: Borrow<Q>,
    {
        self.get(key)
            .ok_or_else(|| Error::from(ErrorKind::UnknownDType(key.to_string())))
    }

    /// As [`Table::key_for`], or an [`ErrorKind::Unsupported`] error saying that the
    /// format (`format`) has no key of this table for `dtype` in `order`.
    pub fn require_key(&self, format: &str, dtype: DType, order: ByteOrder) -> Result<&'static K> {
        self.key_for(dtype, order).ok_or_else(|| {
            Error::from(ErrorKind::Unsupported(format!(
                "{format} has no `{}` code for dtype {dtype} in {order:?} byte order",
                self.name
            )))
        })
    }

    /// The position of the first row of `dtype` (any byte order): where the table lists
    /// it, a rank (`index_of(TABLE, dtype)`: safetensors orders tensors by its dtypes'
    /// order). An [`ErrorKind::Unsupported`] error, as [`Table::require_key`]'s, saying
    /// that the format (`format`) has no key of this table for `dtype`.
    pub fn row_of(&self, format: &str, dtype: DType) -> Result<i128> {
        self.rows
            .iter()
            .position(|r| r.1 == dtype)
            .map(|i| i as i128)
            .ok_or_else(|| {
                Error::from(ErrorKind::Unsupported(format!(
                    "{format} has no `{}` code for dtype {dtype}",
                    self.name
                )))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Table<&str> = Table {
        name: "descr",
        rows: &[
            ("|u1", DType::U8, None),
            ("<u2", DType::U16, Some(ByteOrder::Little)),
            (">u2", DType::U16, Some(ByteOrder::Big)),
            ("|u2", DType::U16, Some(ByteOrder::Little)),
        ],
    };

    #[test]
    fn first_row_wins_both_ways() {
        assert_eq!(T.get("|u2"), Some((DType::U16, Some(ByteOrder::Little))));
        assert_eq!(T.get("<f4"), None);
        assert_eq!(T.key_for(DType::U16, ByteOrder::Little), Some(&"<u2"));
        assert_eq!(T.key_for(DType::U16, ByteOrder::Big), Some(&">u2"));
        assert_eq!(T.key_for(DType::U8, ByteOrder::Big), Some(&"|u1"));
        assert!(T.lookup("x").is_err());
        let e = T
            .require_key("npy", DType::F32, ByteOrder::Little)
            .unwrap_err();
        assert!(
            e.to_string().contains("npy has no `descr` code for dtype"),
            "{e}"
        );
        const I: Table<i64> = Table {
            name: "codes",
            rows: &[(1, DType::F32, None)],
        };
        assert_eq!(I.get(&1), Some((DType::F32, None)));
        assert_eq!(I.key_for(DType::F32, ByteOrder::Big), Some(&1));
    }
}
