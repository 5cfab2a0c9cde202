//! Elements stored as a narrower type than the tensor's and widened as they are read
//! ([`Widened`]): a Caffe2 FLOAT tensor serialized as bfloat16 (`FMT_BFLOAT16`), which
//! Caffe2's Load reads as float32. What a schema's `widen(data, dtype)` gives.
//!
//! Only conversions that lose nothing are allowed ([`widens`]: NumPy's `can_cast(from,
//! to, "safe")` on the dtypes tensorfmt knows), so the tensor's values are exactly the
//! stored ones; each element is converted once, as its bytes pass, through a buffer of at
//! most one chunk.

use crate::convert::cast;
use crate::dtype::DType;
use crate::error::{Error, ErrorKind, Result};
use crate::parts::StoredData;
use crate::read::ReadOptions;
use crate::sink::{Flow, Sink};
use crate::source::{RandomAccess, Source};
use crate::tensor::{ByteOrder, DataLocation, Encoded, EncodedBytes, TensorInfo};

/// True when every value of `from` is exactly a value of `to` (a lossless widening, or
/// the same type): bf16 and f16 to f32 and f64, f32 to f64, 8-bit floats to the wider
/// floats, integers to wider integers that hold all their values, and integers to floats
/// whose mantissa holds them, reals to complex numbers of at least their precision.
pub fn widens(from: DType, to: DType) -> bool {
    use DType::*;
    if from == to {
        return true;
    }
    matches!(
        (from, to),
        (BF16 | F16, F32 | F64 | C64 | C128)
            | (F32, F64 | C64 | C128)
            | (F64, C128)
            | (C64, C128)
            | (F8E4M3FN, F16 | BF16 | F32 | F64)
            | (F8E5M2, F16 | F32 | F64)
            | (
                Bool,
                I8 | I16 | I32 | I64 | U8 | U16 | U32 | U64 | F16 | BF16 | F32 | F64 | C64 | C128
            )
            | (I8, I16 | I32 | I64 | F16 | F32 | F64)
            | (I16, I32 | I64 | F32 | F64)
            | (I32, I64 | F64)
            | (U8, U16 | U32 | U64 | I16 | I32 | I64 | F16 | F32 | F64)
            | (U16, U32 | U64 | I32 | I64 | F32 | F64)
            | (U32, U64 | I64 | F64)
    )
}

impl StoredData {
    /// These elements, stored as `from`, read as `to`: unchanged when the types are the
    /// same, else a [`Widened`] location of the bytes they make as `to`. Errors: strings,
    /// a conversion that could lose values (`to` does not hold every `from`), and bytes
    /// that are not whole `from` elements.
    pub fn widened(self, from: DType, to: DType) -> Result<StoredData> {
        if from == to {
            return Ok(self);
        }
        if self.strings.is_some() {
            return Err(ErrorKind::Unsupported(format!("string elements read as {to}")).into());
        }
        if !widens(from, to) {
            return Err(ErrorKind::Unsupported(format!(
                "elements stored as {from} read as {to}: that conversion can change values, \
                 and only lossless ones are made"
            ))
            .into());
        }
        let (fi, ti) = (itemsize(from)?, itemsize(to)?);
        let stored = self.location.len();
        if stored % fi != 0 {
            return Err(ErrorKind::SizeMismatch(format!(
                "{stored} bytes are not a whole number of {from} elements"
            ))
            .into());
        }
        let len = (stored / fi)
            .checked_mul(ti)
            .ok_or_else(|| Error::from(ErrorKind::Overflow(format!("{stored} bytes as {to}"))))?;
        let w = Widened {
            inner: self.location,
            from,
            to,
            len,
        };
        Ok(StoredData::bytes(EncodedBytes::new(w).window(0, 0, len)))
    }
}

/// `data`, its elements stored as `stored`, read as the tensor's dtype `tensor` (each a
/// dtype and the byte order a format fixes, `None` for little-endian): what the code
/// generated for `widen(data, dtype)` calls. Both must be little-endian when they differ.
pub fn widen(
    data: StoredData,
    stored: (DType, Option<ByteOrder>),
    tensor: (DType, Option<ByteOrder>),
) -> Result<StoredData> {
    let ((from, from_order), (to, to_order)) = (stored, tensor);
    if from != to && (from_order == Some(ByteOrder::Big) || to_order == Some(ByteOrder::Big)) {
        return Err(ErrorKind::Unsupported(format!(
            "big-endian elements stored as {from} read as {to}"
        ))
        .into());
    }
    data.widened(from, to)
}

fn itemsize(d: DType) -> Result<u64> {
    d.itemsize()
        .map(|n| n as u64)
        .ok_or_else(|| ErrorKind::Unsupported(format!("widening {d} elements")).into())
}

/// Elements at `inner`, stored as `from` (little-endian), read as `to`: `len` bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Widened {
    /// Where the stored elements are.
    pub inner: DataLocation,
    /// Their stored type.
    pub from: DType,
    /// The tensor's type.
    pub to: DType,
    /// The number of bytes they make as `to`.
    pub len: u64,
}

impl Encoded for Widened {
    fn plain_offset(&self, _: &dyn RandomAccess, _: u64) -> Result<Option<u64>> {
        Ok(None)
    }

    fn compressed_len(&self, _: u64) -> Option<u64> {
        self.inner.compressed_len()
    }

    fn read(
        &self,
        src: &Source,
        info: &TensorInfo,
        part: u64,
        (skip, len): (u64, u64),
        sink: &mut dyn Sink,
        opts: &ReadOptions,
    ) -> Result<()> {
        if part != 0 || skip != 0 || len != self.len {
            return Err(ErrorKind::Unsupported(format!(
                "a window ({skip}, {len}) of {} bytes of {} elements widened to {}",
                self.len, self.from, self.to
            ))
            .into());
        }
        let mut w = WidenSink {
            inner: sink,
            from: self.from,
            to: self.to,
            carry: Vec::new(),
            out: Vec::new(),
            produced: 0,
        };
        crate::read::read_location(src, info, &self.inner, &mut w, opts)?;
        if !w.carry.is_empty() || w.produced != self.len {
            return Err(ErrorKind::SizeMismatch(format!(
                "the stored {} elements made {} bytes as {}, {} expected",
                self.from, w.produced, self.to, self.len
            ))
            .into());
        }
        Ok(())
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn same(&self, other: &dyn Encoded) -> bool {
        other.as_any().downcast_ref::<Widened>() == Some(self)
    }
}

/// Converts the stored elements pushed to it and pushes them on: whole elements at once,
/// the bytes of one cut between two chunks kept until the next.
struct WidenSink<'a> {
    inner: &'a mut dyn Sink,
    from: DType,
    to: DType,
    carry: Vec<u8>,
    /// The converted elements of the chunk being passed on.
    out: Vec<u8>,
    produced: u64,
}

impl WidenSink<'_> {
    fn push(&mut self, whole: &[u8]) -> Result<()> {
        if whole.is_empty() {
            return Ok(());
        }
        if (self.from, self.to) == (DType::BF16, DType::F32) {
            // The common case, without the general conversion: a bfloat16 is the high
            // half of the float32 it stands for. The buffer is kept from chunk to chunk.
            self.out.clear();
            for e in whole.chunks_exact(2) {
                self.out.extend_from_slice(&[0, 0, e[0], e[1]]);
            }
        } else {
            self.out = cast(whole, self.from, ByteOrder::Little, self.to)?;
        }
        self.produced += self.out.len() as u64;
        self.inner.chunk(&self.out)
    }
}

impl Sink for WidenSink<'_> {
    fn begin(&mut self, _: &TensorInfo) -> Result<Flow> {
        Ok(Flow::Continue)
    }

    fn keeps_views(&self) -> bool {
        false
    }

    fn chunk(&mut self, mut bytes: &[u8]) -> Result<()> {
        let unit = self.from.itemsize().unwrap_or(1);
        if !self.carry.is_empty() {
            let need = unit - self.carry.len();
            let take = need.min(bytes.len());
            self.carry.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
            if self.carry.len() < unit {
                return Ok(());
            }
            let one = std::mem::take(&mut self.carry);
            self.push(&one)?;
        }
        let whole = bytes.len() / unit * unit;
        self.push(&bytes[..whole])?;
        self.carry.extend_from_slice(&bytes[whole..]);
        Ok(())
    }

    fn end(&mut self, _: &TensorInfo) -> Result<Flow> {
        Ok(Flow::Continue)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sink::OwnedSink;
    use crate::tensor::Order;

    fn bf16(v: f32) -> [u8; 2] {
        let b = v.to_bits().to_le_bytes();
        [b[2], b[3]]
    }

    #[test]
    fn lossless_only() {
        assert!(widens(DType::BF16, DType::F32));
        assert!(widens(DType::F16, DType::F64));
        assert!(widens(DType::U8, DType::I16));
        assert!(widens(DType::I32, DType::I32));
        assert!(!widens(DType::F32, DType::BF16));
        assert!(!widens(DType::I32, DType::F32));
        assert!(!widens(DType::BF16, DType::F16));
        assert!(!widens(DType::BF16, DType::I32));
        assert!(!widens(DType::I8, DType::U16));
        assert!(!widens(DType::U8, DType::String));
    }

    #[test]
    fn refusals() {
        let at = |len| StoredData::bytes(DataLocation::range(0, len));
        let e = at(4).widened(DType::BF16, DType::I32).unwrap_err();
        assert!(e.to_string().contains("bf16 read as i32"), "{e}");
        let e = at(3).widened(DType::BF16, DType::F32).unwrap_err();
        assert!(e.to_string().contains("not a whole number"), "{e}");
        // The same type: the location as it was.
        assert_eq!(
            at(4).widened(DType::F32, DType::F32).unwrap().location,
            DataLocation::range(0, 4)
        );
    }

    /// Read through chunks of every size, elements cut between chunks included.
    #[test]
    fn reads_widened_values() {
        let values = [1.0f32, -2.5, f32::INFINITY, 3.140625, 0.0, -0.0, 1e-38];
        let stored: Vec<u8> = values.iter().flat_map(|v| bf16(*v)).collect();
        let src = Source::from_bytes(stored.clone());
        let data = StoredData::bytes(DataLocation::range(0, stored.len() as u64))
            .widened(DType::BF16, DType::F32)
            .unwrap();
        let info = TensorInfo::dense(
            "w",
            DType::F32,
            vec![values.len() as u64],
            Order::C,
            ByteOrder::Little,
            data.location,
        )
        .unwrap();
        for chunk_size in [1, 3, 4, 5, 64] {
            let opts = ReadOptions {
                chunk_size,
                ..Default::default()
            };
            let mut sink = OwnedSink::default();
            crate::read::read_tensor(&src, &info, &mut sink, &opts).unwrap();
            let got = sink.into_tensors().remove(0).data;
            let want: Vec<u8> = values
                .iter()
                .flat_map(|v| f32::from_bits(v.to_bits() & 0xffff_0000).to_le_bytes())
                .collect();
            assert_eq!(got.as_bytes(), &want[..], "chunks of {chunk_size}");
        }
        // f16 through the general conversion.
        let h: Vec<u8> = [0x3c00u16, 0xc000]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let src = Source::from_bytes(h);
        let data = StoredData::bytes(DataLocation::range(0, 4))
            .widened(DType::F16, DType::F64)
            .unwrap();
        let info = TensorInfo::dense(
            "h",
            DType::F64,
            vec![2],
            Order::C,
            ByteOrder::Little,
            data.location,
        )
        .unwrap();
        let mut sink = OwnedSink::default();
        crate::read::read_tensor(&src, &info, &mut sink, &ReadOptions::default()).unwrap();
        let got = sink.into_tensors().remove(0).data;
        let want: Vec<u8> = [1.0f64, -2.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert_eq!(got.as_bytes(), &want[..]);
    }
}
