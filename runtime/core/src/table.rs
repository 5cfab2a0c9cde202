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

    /// As [`Table::get`], or an [`ErrorKind::UnknownDType`] naming the key and the
    /// dtypes the format knows.
    pub fn lookup<Q: PartialEq + Display + ?Sized>(
        &self,
        key: &Q,
    ) -> Result<(DType, Option<ByteOrder>)>
    where
        K: Borrow<Q>,
    {
        self.get(key).ok_or_else(|| {
            Error::from(ErrorKind::UnknownDType(format!(
                "{key}; the format's dtypes are {}",
                self.dtype_names()
            )))
        })
    }

    /// As [`Table::key_for`], or an [`ErrorKind::Unsupported`] error saying that the
    /// format (`format`) cannot store `dtype` in `order` ([`Table::cannot_store`]).
    pub fn require_key(&self, format: &str, dtype: DType, order: ByteOrder) -> Result<&'static K> {
        self.key_for(dtype, order)
            .ok_or_else(|| self.cannot_store(Some(format), dtype, Some(order)))
    }

    /// The position of the first row of `dtype` (any byte order): where the table lists
    /// it, a rank (`index_of(TABLE, dtype)`: safetensors orders tensors by its dtypes'
    /// order). An [`ErrorKind::Unsupported`] error, as [`Table::require_key`]'s, saying
    /// that the format (`format`) cannot store `dtype`.
    pub fn row_of(&self, format: &str, dtype: DType) -> Result<i128> {
        self.rows
            .iter()
            .position(|r| r.1 == dtype)
            .map(|i| i as i128)
            .ok_or_else(|| self.cannot_store(Some(format), dtype, None))
    }

    /// The dtypes of the table, each once, in row order.
    pub fn dtypes(&self) -> Vec<DType> {
        let mut out: Vec<DType> = Vec::new();
        for r in self.rows {
            if !out.contains(&r.1) {
                out.push(r.1);
            }
        }
        out
    }

    /// The names of the table's dtypes, in [`DType::ALL`]'s order, joined by commas.
    fn dtype_names(&self) -> String {
        let stored = self.dtypes();
        let names: Vec<&str> = DType::ALL
            .iter()
            .filter(|d| stored.contains(d))
            .map(|d| d.name())
            .collect();
        names.join(", ")
    }

    /// The [`ErrorKind::Unsupported`] error of a write of `dtype` (in `order`, when the
    /// caller asked for one) that the table has no key for, in a user's words: the format
    /// (`format`, else "this format") cannot store it, and either the byte orders it
    /// stores the dtype in or the dtypes it stores. The table's name, the schema's,
    /// is left out.
    pub fn cannot_store(
        &self,
        format: Option<&str>,
        dtype: DType,
        order: Option<ByteOrder>,
    ) -> Error {
        let who = format.unwrap_or("this format");
        let orders: Vec<Option<ByteOrder>> = self
            .rows
            .iter()
            .filter(|r| r.1 == dtype)
            .map(|r| r.2)
            .collect();
        let message = match order {
            Some(order) if !orders.is_empty() => {
                let other = match order {
                    ByteOrder::Little => "big-endian",
                    ByteOrder::Big => "little-endian",
                };
                format!(
                    "{who} cannot store {dtype} in {} byte order, only {other}",
                    byte_order_name(order)
                )
            }
            _ => {
                format!(
                    "{who} cannot store {dtype} tensors; its dtypes are {}",
                    self.dtype_names()
                )
            }
        };
        Error::from(ErrorKind::Unsupported(message))
    }
}

/// `order` as a user names it: `little-endian`, `big-endian`.
pub fn byte_order_name(order: ByteOrder) -> &'static str {
    match order {
        ByteOrder::Little => "little-endian",
        ByteOrder::Big => "big-endian",
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
        assert_eq!(
            T.lookup("x").unwrap_err().to_string(),
            "unknown dtype x; the format's dtypes are u8, u16"
        );
        let e = T
            .require_key("npy", DType::F32, ByteOrder::Little)
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "unsupported: npy cannot store f32 tensors; its dtypes are u8, u16"
        );
        let e = T.require_key("npy", DType::U16, ByteOrder::Big);
        assert!(e.is_ok());
        const L: Table<&str> = Table {
            name: "descr",
            rows: &[("<u2", DType::U16, Some(ByteOrder::Little))],
        };
        let e = L
            .require_key("npy", DType::U16, ByteOrder::Big)
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "unsupported: npy cannot store u16 in big-endian byte order, only little-endian"
        );
        assert!(!L
            .row_of("npy", DType::F32)
            .unwrap_err()
            .to_string()
            .contains("descr"));
        const I: Table<i64> = Table {
            name: "codes",
            rows: &[(1, DType::F32, None)],
        };
        assert_eq!(I.get(&1), Some((DType::F32, None)));
        assert_eq!(I.key_for(DType::F32, ByteOrder::Big), Some(&1));
    }
}
