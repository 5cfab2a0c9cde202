//! Element types and their canonical names.

use std::fmt;

/// The element type of a tensor. Canonical names are the `.fmt` language's and the CLI's (`f32`, `bf16`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    /// IEEE half precision.
    F16,
    /// bfloat16.
    BF16,
    /// IEEE single precision.
    F32,
    /// IEEE double precision.
    F64,
    /// Signed 8-bit integer.
    I8,
    /// Signed 16-bit integer.
    I16,
    /// Signed 32-bit integer.
    I32,
    /// Signed 64-bit integer.
    I64,
    /// Unsigned 8-bit integer.
    U8,
    /// Unsigned 16-bit integer.
    U16,
    /// Unsigned 32-bit integer.
    U32,
    /// Unsigned 64-bit integer.
    U64,
    /// Boolean, one byte holding 0 or 1.
    Bool,
    /// Complex of two `f32` (real, imaginary).
    C64,
    /// Complex of two `f64` (real, imaginary).
    C128,
    /// 8-bit float, 4 exponent bits, 3 mantissa bits, finite (no infinities).
    F8E4M3FN,
    /// 8-bit float, 5 exponent bits, 2 mantissa bits.
    F8E5M2,
    /// Variable-length byte strings (Caffe2, ONNX string tensors).
    String,
}

impl DType {
    /// Every dtype, in canonical order.
    pub const ALL: [DType; 18] = [
        DType::F16,
        DType::BF16,
        DType::F32,
        DType::F64,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::U16,
        DType::U32,
        DType::U64,
        DType::Bool,
        DType::C64,
        DType::C128,
        DType::F8E4M3FN,
        DType::F8E5M2,
        DType::String,
    ];

    /// The canonical name (`f32`, `bf16`, `f8e4m3fn`, `string`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::I8 => "i8",
            DType::I16 => "i16",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::U8 => "u8",
            DType::U16 => "u16",
            DType::U32 => "u32",
            DType::U64 => "u64",
            DType::Bool => "bool",
            DType::C64 => "c64",
            DType::C128 => "c128",
            DType::F8E4M3FN => "f8e4m3fn",
            DType::F8E5M2 => "f8e5m2",
            DType::String => "string",
        }
    }

    /// Parses a canonical name.
    pub fn from_name(name: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.name() == name)
    }

    /// Bytes per element; `None` for `string`, whose elements vary in length.
    pub const fn itemsize(self) -> Option<usize> {
        match self {
            DType::I8 | DType::U8 | DType::Bool | DType::F8E4M3FN | DType::F8E5M2 => Some(1),
            DType::F16 | DType::BF16 | DType::I16 | DType::U16 => Some(2),
            DType::F32 | DType::I32 | DType::U32 => Some(4),
            DType::F64 | DType::I64 | DType::U64 | DType::C64 => Some(8),
            DType::C128 => Some(16),
            DType::String => None,
        }
    }

    /// The unit that byte order applies to: the itemsize, except for complex types where
    /// each of the two components is swapped on its own. `None` for `string`.
    pub const fn swap_unit(self) -> Option<usize> {
        match self {
            DType::C64 => Some(4),
            DType::C128 => Some(8),
            other => other.itemsize(),
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for d in DType::ALL {
            assert_eq!(DType::from_name(d.name()), Some(d));
        }
        assert_eq!(DType::from_name("float32"), None);
    }

    #[test]
    fn sizes() {
        assert_eq!(DType::C128.itemsize(), Some(16));
        assert_eq!(DType::C128.swap_unit(), Some(8));
        assert_eq!(DType::String.itemsize(), None);
    }
}
