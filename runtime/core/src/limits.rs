//! Limits on what a file may make the reader do, as data with safe defaults.

/// Bounds applied while reading untrusted files. Every length read from a file is also
/// checked against the bytes that remain, whatever these limits say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Largest header or metadata block (npy header, JSON header, pickle) in bytes.
    pub max_header_bytes: u64,
    /// Longest Python-literal header (a `pydict` codec field: an npy header, padding
    /// included), in characters: 10,000 by default, NumPy's `max_header_size`, past which
    /// `numpy.load` refuses a header too (parsing one costs many times its size).
    pub max_literal_chars: u64,
    /// Most tensors one file may declare.
    pub max_tensors: u64,
    /// Most dimensions of one tensor.
    pub max_dims: u64,
    /// Most container entries (zip members, DB records) indexed.
    pub max_entries: u64,
    /// Largest total of decompressed bytes read from compressed entries of one file.
    pub max_decompressed_bytes: u64,
    /// Largest ratio of decompressed to compressed size of one entry.
    pub max_compression_ratio: u64,
    /// Most nesting of codec values (Python literals, JSON, pickle).
    pub max_depth: u64,
    /// Most pickle opcodes executed.
    pub max_pickle_ops: u64,
    /// Most pickle memo entries.
    pub max_memo: u64,
    /// Largest size in C order, in bytes, of a view whose elements take more than its
    /// storage holds (a stride-0 `expand`, an overlapping `as_strided`): hashing,
    /// comparing or converting it streams that many bytes from a few, so past this it is
    /// refused (`convert::check_view`). Views within their storage are not limited.
    pub max_view_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_header_bytes: 100 << 20,
            max_literal_chars: 10_000,
            max_tensors: 1 << 20,
            max_dims: 64,
            max_entries: 1 << 20,
            max_decompressed_bytes: 1 << 40,
            max_compression_ratio: 1 << 12,
            max_depth: 128,
            max_pickle_ops: 1 << 26,
            max_memo: 1 << 22,
            max_view_bytes: 16 << 30,
        }
    }
}

impl Limits {
    /// These limits one level of nesting deeper: `max_depth` less one, or an error when
    /// no level is left (a layout read inside a value of a tagged union that holds
    /// itself, on hostile input, stops here rather than exhausting the stack).
    pub fn deeper(&self) -> crate::error::Result<Limits> {
        match self.max_depth.checked_sub(1) {
            Some(max_depth) => Ok(Limits {
                max_depth,
                ..self.clone()
            }),
            None => Err(crate::error::ErrorKind::Invalid(
                "values nested deeper than the limit on depth (`Limits::max_depth`)".into(),
            )
            .into()),
        }
    }
}
