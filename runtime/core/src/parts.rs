//! A tensor as an engine finds it described (by a mapping over a message, a record, ...)
//! before it is named and checked: [`TensorParts`].

use crate::dtype::DType;
use crate::error::{ErrorKind, Result};
use crate::tensor::{ByteOrder, DataLocation, Order, TensorInfo};

/// Where a tensor's elements are stored, and how many strings they make when the engine
/// counted them (a string tensor's elements held one per value of a repeated field).
#[derive(Debug, Clone)]
pub struct StoredData {
    /// Where the bytes are.
    pub location: DataLocation,
    /// The number of string elements, when the bytes are counted strings (each a u64-LE
    /// length then its bytes); `None` for bytes as they lie in the file.
    pub strings: Option<u64>,
}

impl StoredData {
    /// Bytes as they lie in the file: not counted as strings.
    pub fn bytes(location: DataLocation) -> Self {
        StoredData {
            location,
            strings: None,
        }
    }
}

/// What an engine found of one tensor, or of one part of it, before the name is known:
/// its dtype (with the byte order when the format fixes one), the whole tensor's shape
/// (C order), where its elements are, and which of them they are.
#[derive(Debug, Clone)]
pub struct TensorParts {
    /// The element type.
    pub dtype: DType,
    /// The byte order the format fixes for the elements; `None`: little-endian.
    pub byte_order: Option<ByteOrder>,
    /// The whole tensor's shape.
    pub shape: Vec<u64>,
    /// Where the elements (of this part) are.
    pub data: StoredData,
    /// The elements `[begin, end)` of the whole tensor that this part holds, when a
    /// container stores a tensor in several parts (a database's chunks); `None`: all.
    pub segment: Option<(i64, i64)>,
}

impl TensorParts {
    /// Fails when the parts are a string tensor whose strings were not counted (bytes
    /// outside a message's repeated field cannot be split into strings).
    pub fn check_strings(&self) -> Result<()> {
        if self.dtype == DType::String && self.data.strings.is_none() {
            return Err(
                ErrorKind::Unsupported("string tensors outside the message".to_string()).into(),
            );
        }
        Ok(())
    }

    /// The tensor named `name` that these parts describe whole (their `segment` is not
    /// looked at): a C-order tensor, or a string tensor of its counted strings. Errors:
    /// uncounted strings ([`TensorParts::check_strings`]), and those of
    /// [`TensorInfo::dense`] and [`TensorInfo::strings`] (sizes that overflow or do not
    /// match the bytes).
    pub fn info(self, name: impl Into<String>) -> Result<TensorInfo> {
        self.check_strings()?;
        match self.data.strings {
            Some(count) if self.dtype == DType::String => {
                TensorInfo::strings(name, self.shape, count, self.data.location)
            }
            _ => TensorInfo::dense(
                name,
                self.dtype,
                self.shape,
                Order::C,
                self.byte_order.unwrap_or(ByteOrder::Little),
                self.data.location,
            ),
        }
    }
}
