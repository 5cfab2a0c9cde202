//! The one type system of the IR: every expression, layout field, dict key and message
//! field has a [`Type`].

use super::{DictId, EntryId, EnumId, FieldId, LayoutId, MessageId, PickleId, TableId};

/// Byte order of a number or of tensor elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ByteOrder {
    /// Little-endian.
    Little,
    /// Big-endian.
    Big,
}

impl ByteOrder {
    /// `le` or `be`.
    pub fn short(self) -> &'static str {
        match self {
            ByteOrder::Little => "le",
            ByteOrder::Big => "be",
        }
    }
}

impl From<crate::ast::Endian> for ByteOrder {
    fn from(e: crate::ast::Endian) -> Self {
        match e {
            crate::ast::Endian::Little => ByteOrder::Little,
            crate::ast::Endian::Big => ByteOrder::Big,
        }
    }
}

/// An integer type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IntTy {
    /// Width in bytes; `None` for an integer of no fixed width (literals and arithmetic,
    /// evaluated with checked 128-bit arithmetic).
    pub bytes: Option<u8>,
    /// True for a signed type.
    pub signed: bool,
    /// The byte order it is stored in (layout fields); `None` when not stored as raw bytes.
    pub endian: Option<ByteOrder>,
}

impl IntTy {
    /// An integer of no fixed width: a literal, or the result of arithmetic.
    pub const ANY: IntTy = IntTy {
        bytes: None,
        signed: true,
        endian: None,
    };

    /// An integer of `bytes` bytes.
    pub fn sized(bytes: u8, signed: bool) -> IntTy {
        IntTy {
            bytes: Some(bytes),
            signed,
            endian: None,
        }
    }

    /// The same type, stored in byte order `e`.
    pub fn with_endian(self, e: ByteOrder) -> IntTy {
        IntTy {
            endian: Some(e),
            ..self
        }
    }

    /// `u16`, `i64`, `int` (no fixed width).
    pub fn name(&self) -> String {
        match self.bytes {
            Some(b) => format!("{}{}", if self.signed { "i" } else { "u" }, b as u32 * 8),
            None => "int".to_string(),
        }
    }
}

/// A floating-point type of a layout field or protobuf field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FloatTy {
    /// Width in bytes: 4 or 8.
    pub bytes: u8,
    /// The byte order it is stored in (layout fields).
    pub endian: Option<ByteOrder>,
}

/// The canonical dtypes (table rows, dtype names in mappings).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dtype {
    /// `f16`.
    F16,
    /// `bf16`.
    Bf16,
    /// `f32`.
    F32,
    /// `f64`.
    F64,
    /// `i8`.
    I8,
    /// `i16`.
    I16,
    /// `i32`.
    I32,
    /// `i64`.
    I64,
    /// `u8`.
    U8,
    /// `u16`.
    U16,
    /// `u32`.
    U32,
    /// `u64`.
    U64,
    /// `bool`.
    Bool,
    /// `c64`.
    C64,
    /// `c128`.
    C128,
    /// `f8e4m3fn`.
    F8E4m3fn,
    /// `f8e5m2`.
    F8E5m2,
    /// `string`.
    String,
}

impl Dtype {
    /// Every dtype, in the order of [`crate::DTYPES`].
    pub const ALL: [Dtype; 18] = [
        Dtype::F16,
        Dtype::Bf16,
        Dtype::F32,
        Dtype::F64,
        Dtype::I8,
        Dtype::I16,
        Dtype::I32,
        Dtype::I64,
        Dtype::U8,
        Dtype::U16,
        Dtype::U32,
        Dtype::U64,
        Dtype::Bool,
        Dtype::C64,
        Dtype::C128,
        Dtype::F8E4m3fn,
        Dtype::F8E5m2,
        Dtype::String,
    ];

    /// The dtype's canonical name (`f32`).
    pub fn name(self) -> &'static str {
        // `ALL` lists the variants in declaration order, as `DTYPES` names them.
        crate::DTYPES[self as usize]
    }

    /// The dtype named `name`.
    pub fn from_name(name: &str) -> Option<Dtype> {
        crate::DTYPES
            .iter()
            .position(|d| *d == name)
            .map(|i| Dtype::ALL[i])
    }
}

/// The type of a value.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Type {
    /// An integer.
    Int(IntTy),
    /// A floating-point number.
    Float(FloatTy),
    /// A boolean.
    Bool,
    /// Text.
    Str,
    /// A byte string (loaded).
    Bytes,
    /// Tensor bytes in the file: a byte range, never loaded by the index.
    Payload,
    /// A dtype with its byte order (a table lookup, a dtype name).
    Dtype,
    /// A byte order (`le`, `be`).
    ByteOrder,
    /// An element order (`c`, `fortran`).
    Order,
    /// The type of the `none` literal (compares with anything).
    None,
    /// A list of values of one type (a repeated field, `list<T>`, a list literal).
    List(Box<Type>),
    /// A tuple of values of one type (`tuple<u64>`).
    Tuple(Box<Type>),
    /// A map (`map<K, V>`).
    Map(Box<Type>, Box<Type>),
    /// One item of a map, as a mapping iterates it: `.key` and `.value`.
    MapItem(Box<Type>, Box<Type>),
    /// A record laid out by a layout.
    Layout(LayoutId),
    /// A value of a tagged union: the `match` type of a layout's field, one of its cases
    /// ([`super::FieldKind::Match`]).
    Union(LayoutId, FieldId),
    /// A record decoded by a codec, described by a dict.
    Dict(DictId),
    /// A protobuf message.
    Message(MessageId),
    /// A protobuf enum value.
    Enum(EnumId),
    /// A container entry (zip member, kv record): `.content`, `.value`, `.name`, captures.
    Entry(EntryId),
    /// The file being read: `source.stem`, `.name`, `.path`.
    Source,
    /// A table, as the first argument of `key_of(T, dtype)`.
    Table(TableId),
    /// A value decoded from a pickle by declaration `P`. Pickles are dynamically typed
    /// (any Python value the declared globals can build), so this type is all that is
    /// known statically; its members are again `Pickled`.
    Pickled(PickleId),
    /// An object of a call kind of pickle `P` (`tensor`): `.path` and one member per
    /// declared parameter (the parameters of every global of that kind).
    PickleCall(PickleId, String),
    /// A declared pickle global used as a value in a write rule (`global(..)`).
    PickleGlobal(PickleId),
    /// An object built by a pickle write rule (a global's call, a persistent id).
    PickleObject(PickleId),
    /// Tensor data assembled by a builtin (`elements`, `typed`, `external`, `join`).
    TensorData,
    /// A value that could not be typed: only in the IR of a schema the checker rejected.
    Error,
}

impl Type {
    /// An integer of no fixed width.
    pub const INT: Type = Type::Int(IntTy::ANY);

    /// True for integers.
    pub fn is_int(&self) -> bool {
        matches!(self, Type::Int(_))
    }

    /// The layout of a record laid out by a layout.
    pub fn layout(&self) -> Option<LayoutId> {
        match self {
            Type::Layout(l) => Some(*l),
            _ => None,
        }
    }

    /// The element type of a list or tuple.
    pub fn element(&self) -> Option<&Type> {
        match self {
            Type::List(t) | Type::Tuple(t) => Some(t),
            _ => None,
        }
    }

    /// True when the type is [`Type::Error`] or contains it.
    pub fn has_error(&self) -> bool {
        match self {
            Type::Error => true,
            Type::List(t) | Type::Tuple(t) => t.has_error(),
            Type::Map(k, v) | Type::MapItem(k, v) => k.has_error() || v.has_error(),
            _ => false,
        }
    }

    /// Ignoring storage details (width of literals, byte order), whether the two types
    /// hold the same kind of value.
    pub fn same_kind(&self, other: &Type) -> bool {
        match (self, other) {
            (Type::Int(_), Type::Int(_)) => true,
            (Type::Float(_), Type::Float(_)) => true,
            (Type::List(a), Type::List(b)) | (Type::Tuple(a), Type::Tuple(b)) => a.same_kind(b),
            (a, b) => a == b,
        }
    }
}
