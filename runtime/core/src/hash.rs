//! Tensor SHA-256 as README.md (*Tensor names and digests*) defines it: over the
//! elements laid out contiguous, row-major (C order), little-endian; `bool` as one byte 0
//! or 1. Computed while the bytes stream through a [`HashSink`], copying only where the
//! stored layout is not already C order.
//!
//! `string` tensors are hashed over their bytes as delivered: readers of formats with
//! string tensors deliver each element as its u64-LE length then its bytes, which is the
//! canonical form of that definition.

use sha2::{Digest, Sha256};

use crate::convert::{check_view, swap_in_place, COrder};
use crate::dtype::DType;
use crate::error::{Error, ErrorKind, Location, Result};
use crate::sink::{Flow, Sink};
use crate::tensor::{ByteOrder, Order, TensorInfo};

/// Bytes converted at a time on the streaming paths that must change bytes (swaps, bool
/// normalization).
const SCRATCH: usize = 64 << 10;

/// Lowercase hexadecimal of a digest.
pub fn hex(digest: &[u8; 32]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(64);
    for &b in digest {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 15)]));
    }
    s
}

/// The SHA-256 of one tensor (README.md, *Tensor names and digests*) whose stored
/// bytes (laid out as `info` says) are all in `bytes`.
pub fn tensor_sha256(info: &TensorInfo, bytes: &[u8]) -> Result<[u8; 32]> {
    let mut sink = HashSink::default();
    sink.begin(info)?;
    sink.chunk(bytes)?;
    sink.end(info)?;
    sink.digests
        .pop()
        .map(|(_, d)| d)
        .ok_or_else(|| ErrorKind::Sink("no digest".into()).into())
}

/// A sink computing the SHA-256 (README.md, *Tensor names and digests*) of every
/// tensor it receives.
///
/// A tensor stored in another layout than C order (a strided view) has its storage
/// buffered, then its elements streamed from there in C order through a 64 KiB buffer:
/// memory bounded by the storage, whatever the view's logical size. A view whose
/// elements take more than its storage and more than [`HashSink::max_view_bytes`] is
/// refused when it begins ([`crate::convert::check_view`]).
#[derive(Debug)]
pub struct HashSink {
    /// `(tensor name, digest)` of every tensor that ended, in order.
    pub digests: Vec<(String, [u8; 32])>,
    /// Largest size in C order of a view expanded beyond its storage that is hashed
    /// (default: [`crate::Limits`]'s `max_view_bytes`).
    pub max_view_bytes: u64,
    state: Option<State>,
}

impl Default for HashSink {
    fn default() -> Self {
        HashSink {
            digests: Vec::new(),
            max_view_bytes: crate::limits::Limits::default().max_view_bytes,
            state: None,
        }
    }
}

impl HashSink {
    /// An empty sink.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty sink hashing views expanded beyond their storage up to `max_view_bytes`
    /// bytes in C order.
    pub fn with_max_view_bytes(max_view_bytes: u64) -> Self {
        HashSink {
            max_view_bytes,
            ..Self::default()
        }
    }

    /// The digest of the tensor named `name`, if it was hashed.
    pub fn get(&self, name: &str) -> Option<&[u8; 32]> {
        self.digests.iter().find(|(n, _)| n == name).map(|(_, d)| d)
    }
}

#[derive(Debug)]
struct State {
    name: String,
    hasher: Sha256,
    /// Bytes the tensor's storage holds (`info.location.len()`).
    storage: u64,
    /// Bytes received so far.
    seen: u64,
    mode: Mode,
}

#[derive(Debug)]
enum Mode {
    /// C order: hash the first `take` bytes as they arrive, swapping `unit`-byte groups
    /// (`unit` 1: no swap) and normalizing bools; `carry` holds a group split across
    /// chunks.
    Stream {
        take: u64,
        unit: usize,
        boolean: bool,
        carry: Vec<u8>,
        scratch: Vec<u8>,
    },
    /// Any other layout: buffer the storage, then stream its elements in C order.
    Gather { info: Box<TensorInfo>, buf: Vec<u8> },
}

fn err(name: &str, kind: ErrorKind) -> Error {
    Error::new(kind, Location::default().with_entry(name))
}

impl State {
    fn new(info: &TensorInfo, max_view_bytes: u64) -> Result<State> {
        let storage = info.location.len();
        let swap = match info.byte_order {
            ByteOrder::Little => 1,
            ByteOrder::Big => info.dtype.swap_unit().unwrap_or(1),
        };
        let boolean = info.dtype == DType::Bool;
        let mode = if info.dtype == DType::String {
            Mode::Stream {
                take: storage,
                unit: 1,
                boolean: false,
                carry: Vec::new(),
                scratch: Vec::new(),
            }
        } else {
            let nbytes = info.nbytes().map_err(|e| e.in_entry(info.name.as_str()))?;
            let c_order = nbytes == 0 || info.order() == Some(Order::C);
            // A strided view (broadcast dimensions) may address fewer bytes than it has
            // elements; the gather checks every element against the storage.
            if c_order && nbytes > storage {
                return Err(err(
                    &info.name,
                    ErrorKind::SizeMismatch(format!(
                        "tensor '{}' needs {nbytes} bytes, its storage holds {storage}",
                        info.name
                    )),
                ));
            }
            if c_order {
                Mode::Stream {
                    take: nbytes,
                    unit: swap,
                    boolean,
                    carry: Vec::new(),
                    scratch: Vec::new(),
                }
            } else {
                check_view(info, storage, max_view_bytes)
                    .map_err(|e| e.in_entry(info.name.as_str()))?;
                let mut buf = Vec::new();
                // Plain ranges were checked against the file: reserve all at once.
                // Compressed content grows as it arrives.
                let compressed = info.location.compressed_len().is_some();
                if !compressed {
                    let n = usize::try_from(storage).map_err(|_| {
                        err(&info.name, ErrorKind::Overflow("tensor storage".into()))
                    })?;
                    buf.try_reserve_exact(n).map_err(|e| {
                        err(
                            &info.name,
                            ErrorKind::Sink(format!("cannot buffer tensor: {e}")),
                        )
                    })?;
                }
                Mode::Gather {
                    info: Box::new(info.clone()),
                    buf,
                }
            }
        };
        Ok(State {
            name: info.name.clone(),
            hasher: Sha256::new(),
            storage,
            seen: 0,
            mode,
        })
    }

    fn chunk(&mut self, bytes: &[u8]) -> Result<()> {
        let before = self.seen;
        self.seen = self.seen.saturating_add(bytes.len() as u64);
        if self.seen > self.storage {
            return Err(err(
                &self.name,
                ErrorKind::SizeMismatch(format!(
                    "tensor '{}' received more than its {} bytes",
                    self.name, self.storage
                )),
            ));
        }
        match &mut self.mode {
            Mode::Stream {
                take,
                unit,
                boolean,
                carry,
                scratch,
            } => {
                // Bytes beyond the elements (storage larger than needed) are not hashed.
                let n = take.saturating_sub(before).min(bytes.len() as u64) as usize;
                let data = &bytes[..n];
                if *unit <= 1 && !*boolean {
                    self.hasher.update(data);
                    return Ok(());
                }
                hash_converted(&mut self.hasher, data, *unit, *boolean, carry, scratch);
                Ok(())
            }
            Mode::Gather { buf, .. } => {
                buf.try_reserve(bytes.len()).map_err(|e| {
                    err(
                        &self.name,
                        ErrorKind::Sink(format!("cannot buffer tensor: {e}")),
                    )
                })?;
                buf.extend_from_slice(bytes);
                Ok(())
            }
        }
    }

    fn finish(mut self) -> Result<(String, [u8; 32])> {
        if self.seen != self.storage {
            return Err(err(
                &self.name,
                ErrorKind::SizeMismatch(format!(
                    "tensor '{}' received {} of its {} bytes",
                    self.name, self.seen, self.storage
                )),
            ));
        }
        match self.mode {
            Mode::Stream { carry, .. } if !carry.is_empty() => {
                return Err(err(
                    &self.name,
                    ErrorKind::SizeMismatch("the last element is incomplete".into()),
                ));
            }
            Mode::Stream { .. } => {}
            Mode::Gather { info, buf } => {
                let mut elements =
                    COrder::new(&info, &buf[..]).map_err(|e| e.in_entry(self.name.as_str()))?;
                let swap = match info.byte_order {
                    ByteOrder::Big => info.dtype.swap_unit().unwrap_or(1),
                    ByteOrder::Little => 1,
                };
                let mut block = vec![0u8; SCRATCH];
                loop {
                    let n = elements.fill(&mut block);
                    if n == 0 {
                        break;
                    }
                    let c = &mut block[..n];
                    swap_in_place(c, swap);
                    if info.dtype == DType::Bool {
                        normalize_bools(c);
                    }
                    self.hasher.update(&*c);
                }
            }
        }
        Ok((self.name, self.hasher.finalize().into()))
    }
}

fn normalize_bools(b: &mut [u8]) {
    for x in b {
        *x = u8::from(*x != 0);
    }
}

/// Hashes `data` after swapping every `unit`-byte group (unit > 1) or normalizing bools,
/// continuing a group left in `carry` by the previous chunk and leaving an incomplete
/// trailing group there.
fn hash_converted(
    hasher: &mut Sha256,
    mut data: &[u8],
    unit: usize,
    boolean: bool,
    carry: &mut Vec<u8>,
    scratch: &mut Vec<u8>,
) {
    let unit = unit.max(1);
    let convert = |b: &mut [u8]| {
        if boolean {
            normalize_bools(b);
        } else {
            swap_in_place(b, unit);
        }
    };
    if !carry.is_empty() {
        let need = (unit - carry.len()).min(data.len());
        carry.extend_from_slice(&data[..need]);
        data = &data[need..];
        if carry.len() < unit {
            return;
        }
        convert(carry);
        hasher.update(&carry[..]);
        carry.clear();
    }
    let full = data.len() / unit * unit;
    let block = (SCRATCH / unit).max(1) * unit;
    for piece in data[..full].chunks(block) {
        scratch.clear();
        scratch.extend_from_slice(piece);
        convert(scratch);
        hasher.update(&scratch[..]);
    }
    carry.extend_from_slice(&data[full..]);
}

impl Sink for HashSink {
    fn begin(&mut self, info: &TensorInfo) -> Result<Flow> {
        self.state = None;
        self.state = Some(State::new(info, self.max_view_bytes)?);
        Ok(Flow::Continue)
    }

    /// Hashes what it is given and keeps nothing.
    fn keeps_views(&self) -> bool {
        false
    }

    fn chunk(&mut self, bytes: &[u8]) -> Result<()> {
        match &mut self.state {
            Some(s) => s.chunk(bytes),
            None => Err(ErrorKind::Sink("bytes pushed outside a tensor".into()).into()),
        }
    }

    fn end(&mut self, info: &TensorInfo) -> Result<Flow> {
        let s = self.state.take().ok_or_else(|| {
            err(
                &info.name,
                ErrorKind::Sink("a tensor ended that did not begin".into()),
            )
        })?;
        self.digests.push(s.finish()?);
        Ok(Flow::Continue)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::DataLocation;

    fn sha(b: &[u8]) -> [u8; 32] {
        Sha256::digest(b).into()
    }

    fn info(dtype: DType, shape: &[u64], order: Order, bo: ByteOrder) -> TensorInfo {
        let len = crate::tensor::nbytes(dtype, shape).unwrap();
        TensorInfo::dense(
            "t",
            dtype,
            shape.to_vec(),
            order,
            bo,
            DataLocation::Range { offset: 0, len },
        )
        .unwrap()
    }

    /// Hashes `bytes` pushed in chunks of `step` bytes.
    fn hash_chunked(info: &TensorInfo, bytes: &[u8], step: usize) -> [u8; 32] {
        let mut s = HashSink::new();
        s.begin(info).unwrap();
        for c in bytes.chunks(step.max(1)) {
            s.chunk(c).unwrap();
        }
        if bytes.is_empty() {
            s.chunk(&[]).unwrap();
        }
        s.end(info).unwrap();
        s.digests[0].1
    }

    #[test]
    fn hex_and_known_vector() {
        // FIPS 180-2 example: SHA-256("abc").
        let i = info(DType::U8, &[3], Order::C, ByteOrder::Little);
        let d = tensor_sha256(&i, b"abc").unwrap();
        assert_eq!(
            hex(&d),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let empty = info(DType::F32, &[0, 3], Order::C, ByteOrder::Little);
        assert_eq!(
            hex(&tensor_sha256(&empty, b"").unwrap()),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn c_order_little_endian_is_hashed_as_is() {
        let vals: Vec<u8> = [1.0f32, 2.0, 3.0, -4.5, 0.25, 6.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let i = info(DType::F32, &[2, 3], Order::C, ByteOrder::Little);
        for step in [1, 3, 5, 24] {
            assert_eq!(hash_chunked(&i, &vals, step), sha(&vals));
        }
    }

    #[test]
    fn big_endian_is_swapped_across_chunks() {
        let le: Vec<u8> = (0..10u32)
            .flat_map(|v| (v * 0x01020304).to_le_bytes())
            .collect();
        let be: Vec<u8> = (0..10u32)
            .flat_map(|v| (v * 0x01020304).to_be_bytes())
            .collect();
        let i = info(DType::U32, &[10], Order::C, ByteOrder::Big);
        for step in [1, 3, 4, 7, 40] {
            assert_eq!(hash_chunked(&i, &be, step), sha(&le), "step {step}");
        }
        // Complex: each component swapped on its own.
        let parts = [1.5f32, -2.0, 3.25, 4.0];
        let le: Vec<u8> = parts.iter().flat_map(|v| v.to_le_bytes()).collect();
        let be: Vec<u8> = parts.iter().flat_map(|v| v.to_be_bytes()).collect();
        let i = info(DType::C64, &[2], Order::C, ByteOrder::Big);
        for step in [3, 5, 16] {
            assert_eq!(hash_chunked(&i, &be, step), sha(&le));
        }
    }

    #[test]
    fn bools_are_normalized() {
        let i = info(DType::Bool, &[4], Order::C, ByteOrder::Little);
        assert_eq!(hash_chunked(&i, &[0, 2, 1, 255], 3), sha(&[0, 1, 1, 1]));
    }

    #[test]
    fn fortran_is_gathered_into_c_order() {
        // 2x3 matrix [[1,2,3],[4,5,6]] stored column-major: 1,4,2,5,3,6.
        let f: Vec<u8> = [1i16, 4, 2, 5, 3, 6]
            .iter()
            .flat_map(|v| v.to_be_bytes())
            .collect();
        let c: Vec<u8> = [1i16, 2, 3, 4, 5, 6]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let i = info(DType::I16, &[2, 3], Order::Fortran, ByteOrder::Big);
        for step in [1, 5, 12] {
            assert_eq!(hash_chunked(&i, &f, step), sha(&c));
        }
        // Same as the C-order tensor with the same elements.
        let ic = info(DType::I16, &[2, 3], Order::C, ByteOrder::Little);
        assert_eq!(tensor_sha256(&ic, &c).unwrap(), sha(&c));
    }

    #[test]
    fn strided_layouts_are_gathered() {
        // A 2x2 view with strides (1, 2) of 4 u8s: element [i][j] at i + 2j.
        let mut i = info(DType::U8, &[2, 2], Order::C, ByteOrder::Little);
        i.strides = vec![1, 2];
        assert_eq!(i.order(), Some(Order::Fortran));
        assert_eq!(
            tensor_sha256(&i, &[1, 3, 2, 4]).unwrap(),
            sha(&[1, 2, 3, 4])
        );
        // Broadcast-like strides over a larger storage.
        let mut j = info(DType::U8, &[2, 2], Order::C, ByteOrder::Little);
        j.strides = vec![3, 1];
        j.location = DataLocation::Range { offset: 0, len: 5 };
        assert_eq!(j.order(), None);
        assert_eq!(
            tensor_sha256(&j, &[1, 2, 9, 3, 4]).unwrap(),
            sha(&[1, 2, 3, 4])
        );
    }

    #[test]
    fn wrong_sizes_are_errors() {
        let i = info(DType::U32, &[2], Order::C, ByteOrder::Big);
        let mut s = HashSink::new();
        s.begin(&i).unwrap();
        s.chunk(&[0; 7]).unwrap();
        let e = s.end(&i).unwrap_err();
        assert!(matches!(e.kind, ErrorKind::SizeMismatch(_)));
        assert_eq!(e.location.entry.as_deref(), Some("t"));
        s.begin(&i).unwrap();
        assert!(s.chunk(&[0; 9]).is_err());
        assert!(s.digests.is_empty());
    }

    #[test]
    fn several_tensors_in_order() {
        let mut s = HashSink::new();
        let mut a = info(DType::U8, &[1], Order::C, ByteOrder::Little);
        a.name = "a".into();
        let mut b = a.clone();
        b.name = "b".into();
        for (t, byte) in [(&a, b"x"), (&b, b"y")] {
            s.begin(t).unwrap();
            s.chunk(byte).unwrap();
            s.end(t).unwrap();
        }
        assert_eq!(s.get("a"), Some(&sha(b"x")));
        assert_eq!(s.digests[1], ("b".to_string(), sha(b"y")));
    }
}
