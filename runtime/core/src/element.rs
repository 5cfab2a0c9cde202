//! Typed elements: the Rust types a tensor's bytes are read as and built from
//! ([`Element`]), and the typed accessors of [`Tensor`] built on them.
//!
//! Reinterpreting bytes goes through `bytemuck` (alignment and size checked, no
//! `unsafe` here); a tensor's bytes are borrowed as a slice only where they already are
//! the elements in C order and native byte order, and copied (reordered, byte-swapped)
//! otherwise.

use std::borrow::Cow;

use crate::dtype::DType;
use crate::error::{ErrorKind, Result};
use crate::sink::{AlignedBuf, Tensor, TensorData};
use crate::tensor::{ByteOrder, DataLocation, Order, TensorInfo, TensorMeta};

/// A Rust type a tensor's elements are read as: a plain number type with the dtype it
/// is stored as. `f16` and `bf16` (the `half` crate) are elements too.
pub trait Element: bytemuck::Pod + Send + Sync + 'static {
    /// The dtype of this type's elements.
    const DTYPE: DType;
}

macro_rules! element {
    ($($t:ty => $d:ident),* $(,)?) => {
        $(impl Element for $t {
            const DTYPE: DType = DType::$d;
        })*
    };
}

element!(
    f32 => F32, f64 => F64,
    i8 => I8, i16 => I16, i32 => I32, i64 => I64,
    u8 => U8, u16 => U16, u32 => U32, u64 => U64,
    half::f16 => F16, half::bf16 => BF16,
);

/// The byte order of this machine.
pub const NATIVE: ByteOrder = if cfg!(target_endian = "little") {
    ByteOrder::Little
} else {
    ByteOrder::Big
};

fn wrong_dtype<T: Element>(info: &TensorInfo) -> crate::error::Error {
    ErrorKind::Unsupported(format!(
        "tensor '{}' holds {} elements, not {} (convert it first: Tensor::cast)",
        crate::error::escape_name(&info.name),
        info.dtype,
        T::DTYPE
    ))
    .into()
}

impl Tensor {
    /// A tensor named `name` of `shape` holding a copy of `data` in C order.
    ///
    /// ```
    /// use tensorfmt_core::sink::Tensor;
    /// let t = Tensor::from_slice("w", &[2, 2], &[1.0f32, 2.0, 3.0, 4.0])?;
    /// assert_eq!(t.to_vec::<f32>()?, [1.0, 2.0, 3.0, 4.0]);
    /// # Ok::<(), tensorfmt_core::Error>(())
    /// ```
    pub fn from_slice<T: Element>(name: &str, shape: &[u64], data: &[T]) -> Result<Tensor> {
        Tensor::from_bytes(name, T::DTYPE, shape, bytemuck::cast_slice(data), NATIVE)
    }

    /// A tensor named `name` of `dtype` and `shape` holding a copy of `bytes`, its
    /// elements in C order and `byte_order`; their number must be `shape`'s.
    pub fn from_bytes(
        name: &str,
        dtype: DType,
        shape: &[u64],
        bytes: &[u8],
        byte_order: ByteOrder,
    ) -> Result<Tensor> {
        let nbytes = crate::tensor::nbytes(dtype, shape)?;
        if nbytes != bytes.len() as u64 {
            return Err(ErrorKind::SizeMismatch(format!(
                "tensor '{name}' of {dtype} and shape {shape:?} takes {nbytes} bytes, {} given",
                bytes.len()
            ))
            .into());
        }
        let location = DataLocation::Range {
            offset: 0,
            len: nbytes,
        };
        let info = TensorInfo::dense(name, dtype, shape.to_vec(), Order::C, byte_order, location)?;
        Ok(Tensor {
            info,
            data: TensorData::Owned(AlignedBuf::from_slice(bytes)?),
        })
    }

    /// The metadata to write this tensor with (C or Fortran order, as its strides
    /// are), `None` for a view of other strides (write [`Tensor::c_bytes`] in C order).
    pub fn meta(&self) -> Option<TensorMeta> {
        TensorMeta::from_info(&self.info)
    }

    /// The tensor's elements in C order, in their stored byte order: borrowed when
    /// they already are in C order, gathered otherwise.
    pub fn c_bytes(&self) -> Result<Cow<'_, [u8]>> {
        crate::convert::to_c_order(&self.info, self.data.as_bytes())
    }

    /// The elements in C order as a slice, without a copy: `Some` when they are stored
    /// in C order and this machine's byte order as `T`, at an address aligned for `T`
    /// (always so for tensors loaded into memory, and for most mapped ones).
    ///
    /// ```
    /// use tensorfmt_core::sink::Tensor;
    /// let t = Tensor::from_slice("w", &[3], &[1i64, 2, 3])?;
    /// assert_eq!(t.as_slice::<i64>(), Some(&[1i64, 2, 3][..]));
    /// assert_eq!(t.as_slice::<f64>(), None); // not its dtype
    /// # Ok::<(), tensorfmt_core::Error>(())
    /// ```
    pub fn as_slice<T: Element>(&self) -> Option<&[T]> {
        if self.info.dtype != T::DTYPE
            || self.info.order() != Some(Order::C)
            || (self.info.byte_order != NATIVE && std::mem::size_of::<T>() > 1)
        {
            return None;
        }
        let n = usize::try_from(self.info.numel().ok()?).ok()?;
        let bytes = self
            .data
            .as_bytes()
            .get(..n.checked_mul(std::mem::size_of::<T>())?)?;
        bytemuck::try_cast_slice(bytes).ok()
    }

    /// The elements in C order and this machine's byte order, copied into a vector; an
    /// error when the tensor's dtype is not `T`'s (see [`Tensor::cast`]).
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        if self.info.dtype != T::DTYPE {
            return Err(wrong_dtype::<T>(&self.info));
        }
        if let Some(s) = self.as_slice::<T>() {
            return Ok(s.to_vec());
        }
        // One copy: the elements read out of the C-order bytes (gathered only for a view
        // of other strides), swapped in place only when stored in the other byte order.
        let mut bytes = self.c_bytes()?;
        if self.info.byte_order != NATIVE {
            crate::convert::swap_in_place(bytes.to_mut(), std::mem::size_of::<T>());
        }
        let n = bytes.len() / std::mem::size_of::<T>();
        let mut out: Vec<T> = Vec::new();
        out.try_reserve_exact(n).map_err(|e| {
            ErrorKind::Sink(format!("cannot hold tensor '{}': {e}", self.info.name))
        })?;
        out.extend(
            bytes
                .chunks_exact(std::mem::size_of::<T>())
                .map(bytemuck::pod_read_unaligned::<T>),
        );
        Ok(out)
    }

    /// A copy of this tensor with its elements converted to `dtype` as NumPy's
    /// `astype` converts them (C order, little-endian).
    ///
    /// ```
    /// use tensorfmt_core::sink::Tensor;
    /// let t = Tensor::from_slice("n", &[2], &[1.5f64, -2.0])?.cast(tensorfmt_core::DType::F32)?;
    /// assert_eq!(t.to_vec::<f32>()?, [1.5f32, -2.0]);
    /// # Ok::<(), tensorfmt_core::Error>(())
    /// ```
    pub fn cast(&self, dtype: DType) -> Result<Tensor> {
        let c = self.c_bytes()?;
        let bytes = crate::convert::cast(&c, self.info.dtype, self.info.byte_order, dtype)?;
        let shape = self.info.shape.clone();
        Tensor::from_bytes(&self.info.name, dtype, &shape, &bytes, ByteOrder::Little)
    }
}
