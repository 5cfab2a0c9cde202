//! Element conversions: byte-order swaps, reordering to C order, dtype casts and decoding
//! to `f64` for comparisons. These are the only places tensor bytes are touched element by
//! element, and only when a caller asks for a conversion.

use half::{bf16, f16};

use crate::dtype::DType;
use crate::error::{Error, ErrorKind, Location, Result};
use crate::limits::Limits;
use crate::tensor::{ByteOrder, TensorInfo};

/// Reverses the bytes of every `unit`-sized group of `buf` in place.
pub fn swap_in_place(buf: &mut [u8], unit: usize) {
    if unit > 1 {
        for chunk in buf.chunks_exact_mut(unit) {
            chunk.reverse();
        }
    }
}

/// The elements of `bytes`, laid out with `info`'s shape and strides, in C order: borrowed
/// when they already are, gathered into a new buffer otherwise. The bytes must hold the
/// whole storage the strides address. A view whose elements in C order take more than
/// its storage and more than [`Limits::default`]'s `max_view_bytes` is refused
/// ([`check_view`]); stream such views with [`COrder`] instead.
pub fn to_c_order<'a>(info: &TensorInfo, bytes: &'a [u8]) -> Result<std::borrow::Cow<'a, [u8]>> {
    let item = info
        .dtype
        .itemsize()
        .ok_or_else(|| ErrorKind::Unsupported("reordering string tensors".into()))?;
    let n =
        usize::try_from(info.numel()?).map_err(|_| ErrorKind::Overflow("element count".into()))?;
    let total = n
        .checked_mul(item)
        .ok_or_else(|| ErrorKind::Overflow("tensor size".into()))?;
    if info.order() == Some(crate::tensor::Order::C) {
        return Ok(std::borrow::Cow::Borrowed(
            bytes
                .get(..total)
                .ok_or_else(|| ErrorKind::SizeMismatch("tensor bytes".into()))?,
        ));
    }
    check_view(info, bytes.len() as u64, Limits::default().max_view_bytes)?;
    let mut reader = COrder::new(info, bytes)?;
    let mut out = Vec::new();
    out.try_reserve_exact(total)
        .map_err(|e| ErrorKind::Sink(format!("cannot hold tensor '{}': {e}", info.name)))?;
    out.resize(total, 0);
    let filled = reader.fill(&mut out);
    debug_assert_eq!(filled, total);
    Ok(std::borrow::Cow::Owned(out))
}

/// Refuses a view whose elements in C order take more bytes than its storage of
/// `storage` bytes holds and more than `max_view_bytes` (a stride-0 `expand` of a few
/// elements to terabytes): hashing, comparing or writing it would produce that many
/// bytes. The error names the tensor, its shape, strides and both sizes, and the limit
/// to raise ([`Limits::max_view_bytes`], `--max-view-bytes` on the command line).
pub fn check_view(info: &TensorInfo, storage: u64, max_view_bytes: u64) -> Result<()> {
    let logical = match info.nbytes() {
        Ok(n) => Some(n),
        Err(e) if info.dtype == DType::String => return Err(e),
        Err(_) => None,
    };
    match logical {
        Some(n) if n <= storage || n <= max_view_bytes => Ok(()),
        _ => Err(Error::new(
            ErrorKind::Unsupported(format!(
                "tensor '{}' is a view (shape {:?}, strides {:?}) over {storage} bytes of storage \
                 whose elements take {} in C order, beyond the limit of {max_view_bytes} \
                 bytes on expanded views (raise it with --max-view-bytes, or \
                 Limits::max_view_bytes)",
                info.name,
                info.shape,
                info.strides,
                logical.map_or_else(
                    || "more than 2^64 bytes".to_string(),
                    |n| format!("{n} bytes")
                ),
            )),
            Location::default().with_entry(info.name.as_str()),
        )),
    }
}

/// The elements of a tensor laid out with any strides over `bytes` (its storage, from
/// the tensor's first element), produced in C order as a stream: memory bounded by the
/// caller's buffer, whatever the tensor's logical size (a stride-0 view of one element
/// to millions of elements reads the same few bytes again). Every offset the strides
/// address is checked against the storage once, up front; runs along a last dimension
/// of stride 1 are copied whole.
#[derive(Debug)]
pub struct COrder<B> {
    bytes: B,
    item: usize,
    shape: Vec<u64>,
    strides: Vec<i64>,
    /// Index of the next element.
    idx: Vec<u64>,
    /// Element offset of the next element in `bytes`.
    pos: i64,
    /// Elements left.
    left: u64,
    /// Bytes of an element split across two reads.
    pending: Vec<u8>,
}

impl<B: AsRef<[u8]>> COrder<B> {
    /// A stream of `info`'s elements in C order from `bytes`, which must hold every
    /// element the strides address ([`ErrorKind::SizeMismatch`] otherwise). String
    /// tensors are refused.
    pub fn new(info: &TensorInfo, bytes: B) -> Result<Self> {
        let item = info
            .dtype
            .itemsize()
            .ok_or_else(|| ErrorKind::Unsupported("reordering string tensors".into()))?;
        if info.strides.len() != info.shape.len() {
            return Err(ErrorKind::Invalid(format!(
                "tensor '{}' has {} strides for {} dimensions",
                info.name,
                info.strides.len(),
                info.shape.len()
            ))
            .into());
        }
        let left = info.numel()?;
        if left > 0 {
            // The lowest and highest element offsets the strides address.
            let (mut lo, mut hi) = (0i128, 0i128);
            for (&n, &s) in info.shape.iter().zip(&info.strides) {
                let span = i128::from(s) * (i128::from(n) - 1);
                if span < 0 {
                    lo += span;
                } else {
                    hi += span;
                }
            }
            let len = bytes.as_ref().len() as i128;
            if lo < 0 || (hi + 1) * item as i128 > len {
                return Err(ErrorKind::SizeMismatch(format!(
                    "tensor '{}' (shape {:?}, strides {:?}) addresses elements {lo} to {hi}, \
                     beyond its storage of {} bytes",
                    info.name, info.shape, info.strides, len
                ))
                .into());
            }
        }
        Ok(COrder {
            bytes,
            item,
            shape: info.shape.clone(),
            strides: info.strides.clone(),
            idx: vec![0; info.shape.len()],
            pos: 0,
            left,
            pending: Vec::new(),
        })
    }

    /// Bytes still to come.
    pub fn remaining(&self) -> u64 {
        self.left * self.item as u64 + self.pending.len() as u64
    }

    /// Moves to the element `k` places further in C order along the last dimension,
    /// carrying into the outer ones.
    fn advance(&mut self, k: u64) {
        self.left -= k;
        let Some(last) = self.shape.len().checked_sub(1) else {
            return;
        };
        self.idx[last] += k;
        self.pos += self.strides[last] * k as i64;
        let mut d = last;
        while self.idx[d] >= self.shape[d] && d > 0 {
            self.pos -= self.strides[d] * self.shape[d] as i64;
            self.idx[d] = 0;
            d -= 1;
            self.idx[d] += 1;
            self.pos += self.strides[d];
        }
    }

    /// Writes as many whole elements as fit into `out`; returns the bytes written.
    pub fn fill(&mut self, out: &mut [u8]) -> usize {
        let item = self.item;
        let mut done = 0;
        while self.left > 0 && out.len() - done >= item {
            let bytes = self.bytes.as_ref();
            let start = self.pos as usize * item;
            let (run, stride) = match self.shape.last() {
                Some(&n) => (
                    n - self.idx[self.shape.len() - 1],
                    self.strides[self.strides.len() - 1],
                ),
                None => (1, 1),
            };
            let fit = ((out.len() - done) / item) as u64;
            let k = run.min(fit).min(self.left);
            let dst = &mut out[done..done + k as usize * item];
            if stride == 1 || k == 1 {
                dst.copy_from_slice(&bytes[start..start + dst.len()]);
            } else if stride == 0 {
                let elem = &bytes[start..start + item];
                for d in dst.chunks_exact_mut(item) {
                    d.copy_from_slice(elem);
                }
            } else {
                for (j, d) in dst.chunks_exact_mut(item).enumerate() {
                    let at = (self.pos + stride * j as i64) as usize * item;
                    d.copy_from_slice(&bytes[at..at + item]);
                }
            }
            done += dst.len();
            self.advance(k);
        }
        done
    }
}

impl<B: AsRef<[u8]>> std::io::Read for COrder<B> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if !self.pending.is_empty() {
            let n = self.pending.len().min(buf.len());
            buf[..n].copy_from_slice(&self.pending[..n]);
            self.pending.drain(..n);
            return Ok(n);
        }
        if self.left == 0 || buf.is_empty() {
            return Ok(0);
        }
        if buf.len() < self.item {
            let mut one = vec![0u8; self.item];
            self.fill(&mut one);
            let n = buf.len();
            buf.copy_from_slice(&one[..n]);
            self.pending = one.split_off(n);
            return Ok(n);
        }
        Ok(self.fill(buf))
    }
}

/// `bytes` in little-endian order, copied only when they must be swapped.
fn little_endian(bytes: &[u8], dtype: DType, order: ByteOrder) -> std::borrow::Cow<'_, [u8]> {
    if order == ByteOrder::Big {
        let mut v = bytes.to_vec();
        swap_in_place(&mut v, dtype.swap_unit().unwrap_or(1));
        std::borrow::Cow::Owned(v)
    } else {
        std::borrow::Cow::Borrowed(bytes)
    }
}

/// One element decoded for arithmetic: real and imaginary parts.
type Complex = (f64, f64);

fn read_elem(dtype: DType, b: &[u8]) -> Complex {
    let r = |n: usize| -> [u8; 8] {
        let mut a = [0u8; 8];
        a[..n].copy_from_slice(&b[..n]);
        a
    };
    let v = match dtype {
        DType::F16 => f16::from_le_bytes([b[0], b[1]]).to_f64(),
        DType::BF16 => bf16::from_le_bytes([b[0], b[1]]).to_f64(),
        DType::F32 => f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64,
        DType::F64 => f64::from_le_bytes(r(8)),
        DType::I8 => b[0] as i8 as f64,
        DType::I16 => i16::from_le_bytes([b[0], b[1]]) as f64,
        DType::I32 => i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64,
        DType::I64 => i64::from_le_bytes(r(8)) as f64,
        DType::U8 => b[0] as f64,
        DType::U16 => u16::from_le_bytes([b[0], b[1]]) as f64,
        DType::U32 => u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64,
        DType::U64 => u64::from_le_bytes(r(8)) as f64,
        DType::Bool => (b[0] != 0) as u8 as f64,
        DType::C64 => {
            return (
                f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64,
                f32::from_le_bytes([b[4], b[5], b[6], b[7]]) as f64,
            )
        }
        DType::C128 => {
            let mut im = [0u8; 8];
            im.copy_from_slice(&b[8..16]);
            return (f64::from_le_bytes(r(8)), f64::from_le_bytes(im));
        }
        DType::F8E4M3FN => f8e4m3fn_to_f64(b[0]),
        DType::F8E5M2 => f16::from_bits((b[0] as u16) << 8).to_f64(),
        DType::String => f64::NAN,
    };
    (v, 0.0)
}

fn f8e4m3fn_to_f64(b: u8) -> f64 {
    let sign = if b & 0x80 != 0 { -1.0 } else { 1.0 };
    let exp = ((b >> 3) & 0xf) as i32;
    let man = (b & 0x7) as f64;
    if exp == 0xf && b & 0x7 == 0x7 {
        return f64::NAN;
    }
    if exp == 0 {
        sign * man / 8.0 * 2f64.powi(-6)
    } else {
        sign * (1.0 + man / 8.0) * 2f64.powi(exp - 7)
    }
}

fn is_int(d: DType) -> bool {
    matches!(
        d,
        DType::I8
            | DType::I16
            | DType::I32
            | DType::I64
            | DType::U8
            | DType::U16
            | DType::U32
            | DType::U64
    )
}

fn read_int(dtype: DType, b: &[u8]) -> i128 {
    let mut a = [0u8; 8];
    let n = dtype.itemsize().unwrap_or(1);
    a[..n].copy_from_slice(&b[..n]);
    let u = u64::from_le_bytes(a);
    match dtype {
        DType::I8 => u as u8 as i8 as i128,
        DType::I16 => u as u16 as i16 as i128,
        DType::I32 => u as u32 as i32 as i128,
        DType::I64 => u as i64 as i128,
        _ => u as i128,
    }
}

fn write_elem(dtype: DType, v: Complex, int: Option<i128>, out: &mut Vec<u8>) {
    // Integers from integers wrap, as NumPy's astype does; floats to integers truncate
    // toward zero and saturate.
    let iv = |bits: u32| -> u64 {
        match int {
            Some(i) => i as u64,
            None => {
                if bits == 64 && matches!(dtype, DType::U64) {
                    v.0 as u64
                } else {
                    v.0 as i64 as u64
                }
            }
        }
    };
    match dtype {
        DType::F16 => out.extend_from_slice(&f16::from_f64(v.0).to_le_bytes()),
        DType::BF16 => out.extend_from_slice(&bf16::from_f64(v.0).to_le_bytes()),
        DType::F32 => out.extend_from_slice(&(v.0 as f32).to_le_bytes()),
        DType::F64 => out.extend_from_slice(&v.0.to_le_bytes()),
        DType::I8 | DType::U8 => out.push(iv(8) as u8),
        DType::I16 | DType::U16 => out.extend_from_slice(&(iv(16) as u16).to_le_bytes()),
        DType::I32 | DType::U32 => out.extend_from_slice(&(iv(32) as u32).to_le_bytes()),
        DType::I64 | DType::U64 => out.extend_from_slice(&iv(64).to_le_bytes()),
        DType::Bool => out.push(u8::from(
            v.0 != 0.0 || v.1 != 0.0 || int.is_some_and(|i| i != 0),
        )),
        DType::C64 => {
            out.extend_from_slice(&(v.0 as f32).to_le_bytes());
            out.extend_from_slice(&(v.1 as f32).to_le_bytes());
        }
        DType::C128 => {
            out.extend_from_slice(&v.0.to_le_bytes());
            out.extend_from_slice(&v.1.to_le_bytes());
        }
        DType::F8E4M3FN | DType::F8E5M2 | DType::String => {}
    }
}

/// Casts elements of `from` dtype and byte order to `to` (little-endian output), with
/// NumPy `astype` semantics for the supported pairs. Complex to real, and casts to 8-bit
/// floats or strings, are refused.
pub fn cast(bytes: &[u8], from: DType, from_order: ByteOrder, to: DType) -> Result<Vec<u8>> {
    let (fi, ti) = match (from.itemsize(), to.itemsize()) {
        (Some(a), Some(b)) => (a, b),
        _ => return Err(ErrorKind::Unsupported(format!("casting {from} to {to}")).into()),
    };
    if matches!(to, DType::F8E4M3FN | DType::F8E5M2) {
        return Err(ErrorKind::Unsupported(format!("casting to {to}")).into());
    }
    if matches!(from, DType::C64 | DType::C128) && !matches!(to, DType::C64 | DType::C128) {
        return Err(ErrorKind::Unsupported(format!(
            "casting complex {from} to real {to} would drop the imaginary part"
        ))
        .into());
    }
    if bytes.len() % fi != 0 {
        return Err(ErrorKind::SizeMismatch(format!(
            "{} bytes is not a whole number of {from} elements",
            bytes.len()
        ))
        .into());
    }
    let src = little_endian(bytes, from, from_order);
    let mut out = Vec::with_capacity(bytes.len() / fi * ti);
    for e in src.chunks_exact(fi) {
        let int = (is_int(from) && (is_int(to) || to == DType::Bool)).then(|| read_int(from, e));
        write_elem(to, read_elem(from, e), int, &mut out);
    }
    Ok(out)
}

/// Elements read from a stream, cast as [`cast`] casts them, as a stream: a block of at
/// most 64 KiB of input elements at a time.
pub struct CastReader<R> {
    inner: R,
    from: DType,
    from_order: ByteOrder,
    to: DType,
    input: Vec<u8>,
    out: Vec<u8>,
    at: usize,
}

impl<R: std::io::Read> CastReader<R> {
    /// Casts the elements `inner` yields from `from` (in `from_order`) to `to`; the
    /// pairs [`cast`] refuses are refused here.
    pub fn new(inner: R, from: DType, from_order: ByteOrder, to: DType) -> Result<Self> {
        // The pair is checked on no elements.
        cast(&[], from, from_order, to)?;
        Ok(CastReader {
            inner,
            from,
            from_order,
            to,
            input: Vec::new(),
            out: Vec::new(),
            at: 0,
        })
    }
}

impl<R: std::io::Read> std::io::Read for CastReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.at == self.out.len() {
            let item = self.from.itemsize().unwrap_or(1);
            self.input.resize((64 << 10) / item * item, 0);
            let mut got = 0;
            // Whole elements: fill up to a multiple of the item size, or the end.
            while got < self.input.len() {
                let n = self.inner.read(&mut self.input[got..])?;
                if n == 0 {
                    break;
                }
                got += n;
                if got % item == 0 && got >= item {
                    break;
                }
            }
            if got == 0 {
                return Ok(0);
            }
            self.out = cast(&self.input[..got], self.from, self.from_order, self.to)
                .map_err(std::io::Error::other)?;
            self.at = 0;
        }
        let n = (self.out.len() - self.at).min(buf.len());
        buf[..n].copy_from_slice(&self.out[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

/// A streaming comparison of two tensors' elements, block by block, in their own types:
/// integers (and bools) of both sides exactly, as 128-bit integers, with `atol` and
/// `rtol` applied to their exact difference; floats widened to `f64` one element at a
/// time (exact for every float dtype), close when `|a - b| <= atol + rtol * |b|` as
/// NumPy's `allclose` says, NaN equal to NaN (`equal_nan=True`), an infinity close only
/// to itself; complex numbers part by part. Nothing is held per element.
#[derive(Debug, Clone)]
pub struct Compare {
    /// Absolute tolerance.
    pub atol: f64,
    /// Relative tolerance, of the second side's value.
    pub rtol: f64,
    /// Elements compared so far.
    pub compared: u64,
    /// Elements not close.
    pub differ: u64,
    /// Largest absolute difference among the elements not close (NaN against a number
    /// counts as infinity).
    pub worst: f64,
}

impl Compare {
    /// A comparison with these tolerances, nothing compared yet.
    pub fn new(atol: f64, rtol: f64) -> Self {
        Compare {
            atol,
            rtol,
            compared: 0,
            differ: 0,
            worst: 0.0,
        }
    }

    /// Compares the elements of `a` (of `da`, in `oa`) with those of `b` (`db`, `ob`):
    /// as many as the shorter holds whole. String and 8-bit float dtypes are compared as
    /// their decoded values; strings are refused.
    pub fn feed(
        &mut self,
        a: &[u8],
        (da, oa): (DType, ByteOrder),
        b: &[u8],
        (db, ob): (DType, ByteOrder),
    ) -> Result<()> {
        let (ia, ib) = match (da.itemsize(), db.itemsize()) {
            (Some(x), Some(y)) if da != DType::String && db != DType::String => (x, y),
            _ => {
                return Err(
                    ErrorKind::Unsupported(format!("comparing {da} with {db} elements")).into(),
                )
            }
        };
        let exact = |d: DType| is_int(d) || d == DType::Bool;
        let (mut ea, mut eb) = ([0u8; 16], [0u8; 16]);
        for (x, y) in a.chunks_exact(ia).zip(b.chunks_exact(ib)) {
            let x = le(x, da, oa, &mut ea);
            let y = le(y, db, ob, &mut eb);
            self.compared += 1;
            let diff = if exact(da) && exact(db) {
                let (p, q) = (int_of(da, x), int_of(db, y));
                let d = (p - q).unsigned_abs();
                if d == 0 || (d as f64) <= self.atol + self.rtol * (q.unsigned_abs() as f64) {
                    continue;
                }
                d as f64
            } else {
                let (p, q) = (read_elem(da, x), read_elem(db, y));
                match (self.far(p.0, q.0), self.far(p.1, q.1)) {
                    (None, None) => continue,
                    (r, i) => r.unwrap_or(0.0).max(i.unwrap_or(0.0)),
                }
            };
            self.differ += 1;
            self.worst = self.worst.max(diff);
        }
        Ok(())
    }

    /// `None` when `p` is close to `q`, else their absolute difference.
    fn far(&self, p: f64, q: f64) -> Option<f64> {
        if p == q || (p.is_nan() && q.is_nan()) {
            return None;
        }
        if p.is_nan() || q.is_nan() {
            return Some(f64::INFINITY);
        }
        let d = (p - q).abs();
        if p.is_infinite() || q.is_infinite() || d > self.atol + self.rtol * q.abs() {
            Some(d)
        } else {
            None
        }
    }
}

/// One element's bytes in little-endian order: `b` itself, or swapped into `buf`.
fn le<'a>(b: &'a [u8], dtype: DType, order: ByteOrder, buf: &'a mut [u8; 16]) -> &'a [u8] {
    if order == ByteOrder::Little || b.len() <= 1 {
        return b;
    }
    let out = &mut buf[..b.len()];
    out.copy_from_slice(b);
    swap_in_place(out, dtype.swap_unit().unwrap_or(1));
    out
}

/// An integer or bool element as an `i128`.
fn int_of(dtype: DType, b: &[u8]) -> i128 {
    if dtype == DType::Bool {
        i128::from(b[0] != 0)
    } else {
        read_int(dtype, b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn casts_like_numpy() {
        let src: Vec<u8> = [1.5f32, -2.7, 300.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert_eq!(
            cast(&src, DType::F32, ByteOrder::Little, DType::I16).unwrap(),
            [1i16, -2, 300]
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect::<Vec<_>>()
        );
        let ints: Vec<u8> = [-1i32, 256].iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(
            cast(&ints, DType::I32, ByteOrder::Little, DType::U8).unwrap(),
            vec![255, 0]
        );
        let be: Vec<u8> = 1.0f64.to_be_bytes().to_vec();
        assert_eq!(
            cast(&be, DType::F64, ByteOrder::Big, DType::F16).unwrap(),
            f16::from_f32(1.0).to_le_bytes().to_vec()
        );
        assert!(cast(&[0u8; 8], DType::C64, ByteOrder::Little, DType::F32).is_err());
    }

    /// The elements of `info` over `bytes` in C order, one index at a time.
    fn gathered(info: &TensorInfo, bytes: &[u8]) -> Vec<u8> {
        let item = info.dtype.itemsize().unwrap();
        let n = info.numel().unwrap();
        let mut out = Vec::new();
        for flat in 0..n {
            let mut rest = flat;
            let mut off = 0i64;
            for d in (0..info.shape.len()).rev() {
                off += (rest % info.shape[d]) as i64 * info.strides[d];
                rest /= info.shape[d];
            }
            let at = off as usize * item;
            out.extend_from_slice(&bytes[at..at + item]);
        }
        out
    }

    fn view(shape: &[u64], strides: &[i64]) -> TensorInfo {
        TensorInfo::strided(
            "v",
            DType::I16,
            shape.to_vec(),
            strides.to_vec(),
            ByteOrder::Little,
            crate::tensor::DataLocation::Range { offset: 0, len: 24 },
        )
        .unwrap()
    }

    #[test]
    fn streams_any_strides_in_c_order() {
        use std::io::Read;
        let storage: Vec<u8> = (0u8..24).collect();
        let cases: [(&[u64], &[i64]); 7] = [
            (&[3, 4], &[4, 1]),
            (&[4, 3], &[1, 4]),
            (&[5, 7], &[0, 0]),
            (&[2, 3, 4], &[0, 1, 0]),
            (&[6, 3], &[1, 1]),
            (&[3, 2, 2], &[2, 5, 1]),
            (&[], &[]),
        ];
        for (shape, strides) in cases {
            let info = view(shape, strides);
            let want = gathered(&info, &storage);
            for buf in [1usize, 3, 4, 7, 64] {
                let mut got = Vec::new();
                let mut r = COrder::new(&info, &storage[..]).unwrap();
                let mut b = vec![0u8; buf];
                loop {
                    let n = r.read(&mut b).unwrap();
                    if n == 0 {
                        break;
                    }
                    got.extend_from_slice(&b[..n]);
                }
                assert_eq!(
                    got, want,
                    "shape {shape:?} strides {strides:?} buffer {buf}"
                );
            }
            assert_eq!(to_c_order(&info, &storage).unwrap().as_ref(), &want[..]);
        }
    }

    #[test]
    fn refuses_views_beyond_storage_or_limit() {
        let storage = [0u8; 24];
        // Strides set after the checks of `TensorInfo::strided`: element 12 is the 25th
        // and 26th bytes; a negative stride addresses before the first element.
        let mut past = view(&[2, 2], &[2, 1]);
        past.strides = vec![12, 1];
        assert!(COrder::new(&past, &storage[..]).is_err());
        let mut before = view(&[2], &[1]);
        before.strides = vec![-1];
        assert!(COrder::new(&before, &storage[..]).is_err());
        let huge = view(&[1 << 20, 1 << 20], &[0, 0]);
        let e = check_view(&huge, 24, 1 << 30).unwrap_err().to_string();
        assert!(
            e.contains("2199023255552 bytes") && e.contains("--max-view-bytes"),
            "{e}"
        );
        assert!(to_c_order(&huge, &storage).is_err());
        let beyond = view(&[1 << 60, 1 << 2], &[0, 0]);
        let e = check_view(&beyond, 24, 16 << 30).unwrap_err().to_string();
        assert!(e.contains("9223372036854775808 bytes"), "{e}");
        check_view(&view(&[1 << 10], &[0]), 24, 1 << 30).unwrap();
    }

    fn bytes_of<const N: usize>(v: impl IntoIterator<Item = [u8; N]>) -> Vec<u8> {
        v.into_iter().flatten().collect()
    }

    #[test]
    fn compares_in_the_elements_own_type() {
        let le = ByteOrder::Little;
        // u64 values that one f64 cannot tell apart.
        let a = bytes_of([u64::MAX.to_le_bytes(), 7u64.to_le_bytes()]);
        let b = bytes_of([(u64::MAX - 1).to_le_bytes(), 7u64.to_le_bytes()]);
        let mut c = Compare::new(0.0, 0.0);
        c.feed(&a, (DType::U64, le), &b, (DType::U64, le)).unwrap();
        assert_eq!((c.compared, c.differ, c.worst), (2, 1, 1.0));
        let mut c = Compare::new(1.0, 0.0);
        c.feed(&a, (DType::U64, le), &b, (DType::U64, le)).unwrap();
        assert_eq!(c.differ, 0);
        // NaN equals NaN; an infinity is close only to itself, whatever the tolerance.
        let x = bytes_of([f32::NAN, f32::INFINITY, 1.0, 2.0].map(f32::to_le_bytes));
        let y = bytes_of([f32::NAN, f32::NEG_INFINITY, 1.5, 2.0].map(f32::to_be_bytes));
        let mut c = Compare::new(0.0, 1.0);
        c.feed(&x, (DType::F32, le), &y, (DType::F32, ByteOrder::Big))
            .unwrap();
        assert_eq!((c.compared, c.differ), (4, 1));
        // Across dtypes: values compared, not bytes.
        let h = bytes_of([1.0f32, 2.5].map(|v| half::f16::from_f32(v).to_le_bytes()));
        let f = bytes_of([1.0f64, 2.5].map(f64::to_le_bytes));
        let mut c = Compare::new(0.0, 0.0);
        c.feed(&h, (DType::F16, le), &f, (DType::F64, le)).unwrap();
        assert_eq!(c.differ, 0);
    }

    #[test]
    fn f8_decoding() {
        assert_eq!(f8e4m3fn_to_f64(0x38), 1.0);
        assert_eq!(read_elem(DType::F8E5M2, &[0x3c]).0, 1.0);
    }
}
