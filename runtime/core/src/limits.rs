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
    /// Most decompressed bytes that tensors loaded from one file may hold in memory at
    /// once (an [`InflateBudget`] charged as a deflated tensor's buffer grows, so it fires
    /// before the memory is spent). `None`, the default, is proportional to the input:
    /// [`Limits::inflated_budget`].
    pub max_inflated_bytes: Option<u64>,
    /// Most memory, in bytes, that one pickle's objects may take: the reader's stack,
    /// marks, memo, containers, tuple items, calls and strings, and the value they make
    /// (charged as they are made, reading stops at the opcode past it); then that value
    /// and the object tree of its structure, expanded from it (values shared through the
    /// memo are expanded at every reference, so a few kilobytes can describe a tree of
    /// billions of nodes, "billion laughs": each node is charged before it is made); and
    /// the names of the tensors the walk lists. `None`, the default, grows with the
    /// pickle: [`Limits::tree_budget`].
    pub max_tree_bytes: Option<u64>,
    /// Most memory, in bytes, that the tensors one file lists may take, each charged
    /// [`TENSOR_CHARGE`] (what listing, hashing and converting one tensor costs: its
    /// metadata and name, a table row, a writer's entry): a file lists at most this over
    /// the charge, and at most `max_tensors` ([`Limits::for_input`]). A tensor's
    /// metadata can take a few bytes of a file (an empty tensor of a protobuf record
    /// takes 6, a dict key naming a memoized view a dozen), so that without a bound a
    /// small file makes the reader spend kilobytes per byte of it. `None`, the default,
    /// grows with the file: [`Limits::tensor_budget`].
    pub max_tensor_bytes: Option<u64>,
    /// Refuse every pickle global outside the format's allowlist, as
    /// `torch.load(weights_only=True)` does (the CLI's `--weights-only`). By default such a
    /// global is read as an inert object: its class path, arguments and state recorded,
    /// nothing imported or called, so that no code runs either way.
    pub weights_only: bool,
}

/// The least per-file budget of decompressed bytes held in memory when
/// [`Limits::max_inflated_bytes`] is not set: 256 MiB.
pub const MIN_INFLATED_BUDGET: u64 = 256 << 20;

/// The default per-file budget of decompressed bytes held in memory, per byte of the
/// input: 2048. Deflate expands at most about 1032 to 1, so a file whose tensors are each
/// loaded once fits; only bytes inflated again and again from the same compressed bytes
/// (a storage that many tensors share, loaded once per tensor) go past it.
pub const INFLATED_PER_INPUT_BYTE: u64 = 2048;

/// The base of the default budget for a pickle's objects when
/// [`Limits::max_tree_bytes`] is not set: 128 MiB, what a checkpoint's pickle of tens of
/// thousands of tensors (a few megabytes) takes.
pub const MIN_TREE_BUDGET: u64 = 128 << 20;

/// The default budget for a pickle's objects, per byte of the pickle, on top of
/// [`MIN_TREE_BUDGET`]: 1, so that reading any pickle takes at most 128 MiB and twice
/// its size (the pickle itself, then its objects). A pickle's objects take 15 to 40 bytes
/// of memory per byte of it (a one-byte opcode makes a value of 16 bytes, a container
/// of 40 more, and the value made of them as much again), so a pickle of more than a few
/// megabytes of objects needs `max_tree_bytes` raised; the byte strings of a pickle that
/// leaves them in the file (NumPy arrays) take none.
pub const TREE_BYTES_PER_INPUT_BYTE: u64 = 1;

/// What each tensor a file lists is charged against [`Limits::max_tensor_bytes`]: 2 KiB,
/// about what a tensor of a short name and one dimension costs at the peak of a
/// conversion (its metadata, the structure's leaf, the writer's entry and header).
pub const TENSOR_CHARGE: u64 = 2 << 10;

/// The base of the default budget of a file's tensors when [`Limits::max_tensor_bytes`]
/// is not set: 128 MiB, 65,536 tensors whatever the file's size.
pub const MIN_TENSOR_BUDGET: u64 = 128 << 20;

/// The default budget of a file's tensors, per byte of the file, on top of
/// [`MIN_TENSOR_BUDGET`]: 16, one more tensor per 128 bytes of the file. A checkpoint's
/// tensors hold far more than that each (the largest models list about a hundred
/// thousand tensors in hundreds of gigabytes); a file of more, smaller tensors (empty
/// ones, or names of one memoized view) needs `max_tensor_bytes` raised.
pub const TENSOR_BUDGET_PER_INPUT_BYTE: u64 = 16;

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
            max_inflated_bytes: None,
            max_tree_bytes: None,
            max_tensor_bytes: None,
            weights_only: false,
        }
    }
}

impl Limits {
    /// The budget of decompressed bytes held in memory for an input of `input_len` bytes:
    /// [`Limits::max_inflated_bytes`] when set, else the larger of
    /// [`MIN_INFLATED_BUDGET`] and [`INFLATED_PER_INPUT_BYTE`] times `input_len`.
    pub fn inflated_budget(&self, input_len: u64) -> u64 {
        self.max_inflated_bytes.unwrap_or_else(|| {
            input_len
                .saturating_mul(INFLATED_PER_INPUT_BYTE)
                .max(MIN_INFLATED_BUDGET)
        })
    }

    /// The memory that the objects of a pickle of `input_len` bytes may take:
    /// [`Limits::max_tree_bytes`] when set, else [`MIN_TREE_BUDGET`] plus
    /// [`TREE_BYTES_PER_INPUT_BYTE`] per byte.
    pub fn tree_budget(&self, input_len: u64) -> u64 {
        self.max_tree_bytes.unwrap_or_else(|| {
            MIN_TREE_BUDGET.saturating_add(input_len.saturating_mul(TREE_BYTES_PER_INPUT_BYTE))
        })
    }

    /// The memory that the tensors of a file of `input_len` bytes may take:
    /// [`Limits::max_tensor_bytes`] when set, else [`MIN_TENSOR_BUDGET`] plus
    /// [`TENSOR_BUDGET_PER_INPUT_BYTE`] per byte.
    pub fn tensor_budget(&self, input_len: u64) -> u64 {
        self.max_tensor_bytes.unwrap_or_else(|| {
            MIN_TENSOR_BUDGET.saturating_add(input_len.saturating_mul(TENSOR_BUDGET_PER_INPUT_BYTE))
        })
    }

    /// These limits for reading a file of `input_len` bytes: `max_tensors` lowered to the
    /// tensors its budget pays for ([`Limits::tensor_budget`] over [`TENSOR_CHARGE`]).
    pub fn for_input(&self, input_len: u64) -> Limits {
        let paid = self.tensor_budget(input_len) / TENSOR_CHARGE;
        Limits {
            max_tensors: self.max_tensors.min(paid),
            ..self.clone()
        }
    }

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

/// A per-file budget of decompressed bytes held in memory, shared by every load from one
/// file: a sink given one ([`crate::sink::ViewSink::with_budget`]) charges a compressed
/// tensor's buffer before it grows, and the charge is given back when the buffer is
/// dropped. Charges past the limit fail with [`ErrorKind::Limit`] before anything is
/// allocated.
///
/// [`ErrorKind::Limit`]: crate::error::ErrorKind::Limit
#[derive(Debug)]
pub struct InflateBudget {
    limit: u64,
    held: std::sync::atomic::AtomicU64,
}

impl InflateBudget {
    /// A budget of `limit` bytes, none held.
    pub fn new(limit: u64) -> std::sync::Arc<InflateBudget> {
        std::sync::Arc::new(InflateBudget {
            limit,
            held: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// The limit, in bytes.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The bytes charged and not given back.
    pub fn held(&self) -> u64 {
        self.held.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Charges `bytes`, or fails (charging nothing) when the total held would pass the
    /// limit.
    pub fn charge(&self, bytes: u64) -> crate::error::Result<()> {
        use std::sync::atomic::Ordering;
        let mut held = self.held.load(Ordering::Relaxed);
        loop {
            let total = held.saturating_add(bytes);
            if total > self.limit {
                return Err(crate::error::ErrorKind::Limit {
                    what: "decompressed bytes held in memory for this file \
                           (--max-inflated-bytes raises it)",
                    limit: self.limit,
                    actual: total,
                }
                .into());
            }
            match self
                .held
                .compare_exchange_weak(held, total, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return Ok(()),
                Err(now) => held = now,
            }
        }
    }

    /// Gives back `bytes` charged earlier.
    pub fn release(&self, bytes: u64) {
        use std::sync::atomic::Ordering;
        let _ = self
            .held
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |h| {
                Some(h.saturating_sub(bytes))
            });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_budget_is_proportional_with_a_floor() {
        let l = Limits::default();
        assert_eq!(l.inflated_budget(0), MIN_INFLATED_BUDGET);
        assert_eq!(l.inflated_budget(1 << 20), 2048 << 20);
        assert_eq!(l.inflated_budget(u64::MAX), u64::MAX);
        let set = Limits {
            max_inflated_bytes: Some(10),
            ..Limits::default()
        };
        assert_eq!(set.inflated_budget(1 << 30), 10);
    }

    #[test]
    fn the_default_tree_budget_grows_with_the_pickle_unless_set() {
        let l = Limits::default();
        assert_eq!(l.tree_budget(0), MIN_TREE_BUDGET);
        assert_eq!(l.tree_budget(1000), MIN_TREE_BUDGET + 1_000);
        assert_eq!(l.tree_budget(u64::MAX), u64::MAX);
        let set = Limits {
            max_tree_bytes: Some(4096),
            ..Limits::default()
        };
        assert_eq!(set.tree_budget(1 << 30), 4096);
    }

    #[test]
    fn the_tensors_a_file_lists_are_paid_by_its_size_unless_set() {
        let l = Limits::default();
        assert_eq!(l.for_input(0).max_tensors, 65_536);
        assert_eq!(l.for_input(6 << 20).max_tensors, 65_536 + (6 << 20) / 128);
        assert_eq!(l.for_input(1 << 40).max_tensors, l.max_tensors);
        assert_eq!(l.for_input(u64::MAX).max_tensors, l.max_tensors);
        let set = Limits {
            max_tensor_bytes: Some(10 * TENSOR_CHARGE + 1),
            ..Limits::default()
        };
        assert_eq!(set.for_input(1 << 30).max_tensors, 10);
        assert_eq!(set.for_input(1 << 30).max_depth, set.max_depth);
    }

    #[test]
    fn charges_past_the_limit_fail_and_releases_give_back() {
        let b = InflateBudget::new(100);
        b.charge(60).unwrap();
        let e = b.charge(41).unwrap_err();
        assert!(
            matches!(
                e.kind,
                crate::error::ErrorKind::Limit {
                    limit: 100,
                    actual: 101,
                    ..
                }
            ),
            "{e}"
        );
        assert_eq!(b.held(), 60);
        b.release(60);
        b.charge(100).unwrap();
        assert_eq!(b.held(), 100);
    }
}
