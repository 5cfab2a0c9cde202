//! Element conversions: byte-order swaps, reordering to C order, dtype casts and decoding
//! to `f64` for comparisons. These are the only places tensor bytes are touched element by
//! element, and only when a caller asks for a conversion.

use half::{bf16, f16};

use crate::dtype::DType;
use crate::error::{ErrorKind, Result};
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
/// whole storage the strides address.
pub fn to_c_order<'a>(info: &TensorInfo, bytes: &'a [u8]) -> Result<std::borrow::Cow<'a, [u8]>> {
    let item = info
        .dtype
        .itemsize()
        .ok_or_else(|| ErrorKind::Unsupported("reordering string tensors".into()))?;
    let n =
        usize::try_from(info.numel()?).map_err(|_| ErrorKind::Overflow("element count".into()))?;
    if info.order() == Some(crate::tensor::Order::C) {
        return Ok(std::borrow::Cow::Borrowed(
            bytes
                .get(..n * item)
                .ok_or_else(|| ErrorKind::SizeMismatch("tensor bytes".into()))?,
        ));
    }
    let mut out = Vec::with_capacity(n * item);
    let dims = info.shape.len();
    let mut idx = vec![0u64; dims];
    for _ in 0..n {
        let off: i64 = idx
            .iter()
            .zip(&info.strides)
            .map(|(&i, &s)| i as i64 * s)
            .sum();
        let start = usize::try_from(off)
            .ok()
            .and_then(|o| o.checked_mul(item))
            .filter(|&s| s + item <= bytes.len())
            .ok_or_else(|| {
                ErrorKind::SizeMismatch(format!("stride out of range in tensor '{}'", info.name))
            })?;
        out.extend_from_slice(&bytes[start..start + item]);
        for d in (0..dims).rev() {
            idx[d] += 1;
            if idx[d] < info.shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    Ok(std::borrow::Cow::Owned(out))
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

/// Decodes elements to (real, imaginary) `f64` pairs, for comparisons.
pub fn to_f64(bytes: &[u8], dtype: DType, order: ByteOrder) -> Result<Vec<(f64, f64)>> {
    let item = dtype
        .itemsize()
        .ok_or_else(|| ErrorKind::Unsupported(format!("decoding {dtype} elements")))?;
    let src = little_endian(bytes, dtype, order);
    let out = src
        .chunks_exact(item)
        .map(|e| read_elem(dtype, e))
        .collect();
    Ok(out)
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

    #[test]
    fn f8_decoding() {
        assert_eq!(f8e4m3fn_to_f64(0x38), 1.0);
        assert_eq!(read_elem(DType::F8E5M2, &[0x3c]).0, 1.0);
    }
}
