//! ndarray interop (the `ndarray` feature): tensors as `ndarray` arrays and views, and
//! arrays as fields of a [`StateDict`] struct.
//!
//! ```no_run
//! use ndarray::{Array2, ArrayD};
//! use tensorfmt::{nd, TensorFile};
//!
//! let file = TensorFile::open("weights.npz")?;
//! let w = file.load("w")?;
//! let view = nd::view::<f32>(&w)?; // no copy where the bytes allow it
//! let owned: ArrayD<f32> = nd::to_array(&w)?;
//! let fixed: Array2<f32> = owned.into_dimensionality().expect("2-d");
//! let back = nd::from_array("w", &fixed.t())?; // Fortran order kept
//! # let _ = (view, back);
//! # Ok::<(), tensorfmt::Error>(())
//! ```
//!
//! Elements are the [`Element`] types (`f32`, `i64`, …, and `half::f16`/`half::bf16`).
//! [`view`] borrows the tensor's bytes when they are this machine's byte order, aligned
//! for the element type and laid out with non-negative strides (C, Fortran, or a strided
//! view of a storage); [`to_array`] copies, byte-swapped and in the tensor's own order
//! (C or Fortran) where needed.

use std::borrow::Cow;

use ndarray::{ArrayBase, ArrayD, ArrayViewD, Data, Dimension, IxDyn, ShapeBuilder};

use crate::state::{Key, LoadCx, SaveCx, StateDict};
use crate::{Element, Error, ErrorKind, Order, Result, Tensor, TensorMeta};
use tensorfmt_runtime::element::NATIVE;

fn dims(t: &Tensor) -> Result<Vec<usize>> {
    t.info
        .shape
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| ErrorKind::Overflow("dimension".into()).into()))
        .collect()
}

fn not_array(t: &Tensor, why: &str) -> Error {
    ErrorKind::Unsupported(format!(
        "tensor '{}' as an ndarray: {why}",
        tensorfmt_runtime::error::escape_name(&t.info.name)
    ))
    .into()
}

/// The tensor as an array view of its own bytes, without a copy: `Err` when its dtype is
/// not `A`'s, or its bytes cannot be borrowed (another byte order, an address not aligned
/// for `A`, a negative stride): [`to_array`] copies then.
pub fn view<A: Element>(t: &Tensor) -> Result<ArrayViewD<'_, A>> {
    if t.info.dtype != A::DTYPE {
        return Err(not_array(
            t,
            &format!("it holds {}, not {}", t.info.dtype, A::DTYPE),
        ));
    }
    if t.info.byte_order != NATIVE && std::mem::size_of::<A>() > 1 {
        return Err(not_array(t, "its bytes are not this machine's byte order"));
    }
    let bytes = t.data.as_bytes();
    let whole = bytes.len() / std::mem::size_of::<A>() * std::mem::size_of::<A>();
    let elems: &[A] = bytemuck::try_cast_slice(&bytes[..whole])
        .map_err(|_| not_array(t, "its bytes are not aligned for the element type"))?;
    let strides: Vec<usize> = t
        .info
        .strides
        .iter()
        .map(|&s| usize::try_from(s).map_err(|_| not_array(t, "a negative stride")))
        .collect::<Result<_>>()?;
    let shape = dims(t)?;
    ArrayViewD::from_shape(IxDyn(&shape).strides(IxDyn(&strides)), elems)
        .map_err(|e| not_array(t, &e.to_string()))
}

/// The tensor as an owned array: a copy, in the tensor's order (C, or Fortran for a
/// Fortran-order tensor), byte-swapped to this machine's order where needed.
pub fn to_array<A: Element>(t: &Tensor) -> Result<ArrayD<A>> {
    if let Ok(v) = view::<A>(t) {
        return Ok(v.to_owned());
    }
    let shape = dims(t)?;
    let fortran = t.info.order() == Some(Order::Fortran) && shape.len() > 1;
    if fortran {
        // Fortran order: the bytes in memory order, read with Fortran strides.
        let mut flat = t.clone();
        flat.info.shape = vec![t.info.numel()?];
        flat.info.strides = vec![1];
        let data = flat.to_vec::<A>()?;
        return ArrayD::from_shape_vec(IxDyn(&shape).f(), data)
            .map_err(|e| not_array(t, &e.to_string()));
    }
    ArrayD::from_shape_vec(IxDyn(&shape), t.to_vec::<A>()?)
        .map_err(|e| not_array(t, &e.to_string()))
}

/// The array as a tensor named `name`: its elements copied in C order, or in Fortran
/// order for an array laid out so (a transposed array), as NumPy saves it.
pub fn from_array<A: Element, S: Data<Elem = A>, D: Dimension>(
    name: &str,
    a: &ArrayBase<S, D>,
) -> Result<Tensor> {
    let (meta, bytes) = array_bytes(name, a)?;
    let mut t = Tensor::from_bytes(name, meta.dtype, &meta.shape, &bytes, NATIVE)?;
    if meta.order == Order::Fortran {
        t.info.strides =
            tensorfmt_runtime::tensor::contiguous_strides(&meta.shape, Order::Fortran)?;
    }
    Ok(t)
}

/// The metadata and bytes to write `a` with: borrowed when it is C- or Fortran-contiguous.
pub fn array_bytes<'a, A: Element, S: Data<Elem = A>, D: Dimension>(
    name: &str,
    a: &'a ArrayBase<S, D>,
) -> Result<(TensorMeta, Cow<'a, [u8]>)> {
    let shape: Vec<u64> = a.shape().iter().map(|&d| d as u64).collect();
    let meta = |order| TensorMeta {
        name: name.to_string(),
        dtype: A::DTYPE,
        shape: shape.clone(),
        order,
        byte_order: NATIVE,
    };
    if let Some(s) = a.as_slice() {
        return Ok((meta(Order::C), Cow::Borrowed(bytemuck::cast_slice(s))));
    }
    if let Some(s) = a.as_slice_memory_order() {
        if a.t().is_standard_layout() {
            return Ok((meta(Order::Fortran), Cow::Borrowed(bytemuck::cast_slice(s))));
        }
    }
    // Neither order: the elements gathered in C order, straight into bytes.
    let mut c = Vec::with_capacity(a.len() * std::mem::size_of::<A>());
    for x in a.iter() {
        c.extend_from_slice(bytemuck::bytes_of(x));
    }
    Ok((meta(Order::C), Cow::Owned(c)))
}

/// An owned array field: loaded (a copy) as its element type and number of dimensions,
/// saved in its own order.
impl<A: Element, D: Dimension> StateDict for ArrayBase<ndarray::OwnedRepr<A>, D> {
    fn load_state(cx: &mut LoadCx<'_>, key: &Key) -> Option<Self> {
        let t = cx.tensor(key)?;
        if let Some(n) = D::NDIM {
            if t.info.shape.len() != n {
                cx.mismatch(
                    key,
                    format!("{n} dimensions"),
                    format!("shape {:?}", t.info.shape),
                );
                return None;
            }
        }
        let t = cx.with_dtype(key, t, A::DTYPE)?;
        match to_array::<A>(&t).map(|a| a.into_dimensionality::<D>()) {
            Ok(Ok(a)) => Some(a),
            Ok(Err(e)) => {
                cx.mismatch(key, e.to_string(), format!("shape {:?}", t.info.shape));
                None
            }
            Err(e) => {
                cx.fail(e.in_entry(key.name()));
                None
            }
        }
    }

    fn update_state(&mut self, cx: &mut LoadCx<'_>, key: &Key) {
        let want: Vec<u64> = self.shape().iter().map(|&d| d as u64).collect();
        let Some(t) = cx.tensor_of_shape(key, &want) else {
            return;
        };
        let Some(t) = cx.with_dtype(key, t, A::DTYPE) else {
            return;
        };
        // Assigned straight from the file's bytes where they can be viewed: one copy.
        if let Ok(v) = view::<A>(&t) {
            if let Ok(v) = v.into_dimensionality::<D>() {
                self.assign(&v);
            }
            return;
        }
        match to_array::<A>(&t) {
            Ok(a) => {
                if let Ok(a) = a.into_dimensionality::<D>() {
                    self.assign(&a);
                }
            }
            Err(e) => cx.fail(e.in_entry(key.name())),
        }
    }

    fn save_state<'a>(&'a self, cx: &mut SaveCx<'a>, key: &Key) -> Result<()> {
        let (meta, bytes) = array_bytes(&key.name(), self)?;
        cx.tensor(key, meta, bytes);
        Ok(())
    }
}
