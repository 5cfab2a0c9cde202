//! candle interop (the `candle` feature): tensors to and from `candle_core::Tensor`, and
//! candle tensors as fields of a [`StateDict`] struct.
//!
//! ```no_run
//! use candle_core::Device;
//! use tensorfmt::{candle as tc, TensorFile};
//!
//! let file = TensorFile::open("model.pt")?;
//! let w = tc::to_candle(&file.load("embed.weight")?, &Device::Cpu)?; // the device is candle's
//! let back = tc::from_candle("embed.weight", &w)?;
//! # let _ = back;
//! # Ok::<(), tensorfmt::Error>(())
//! ```
//!
//! The dtypes both have: u8, u32, i16, i32, i64, bf16, f16, f32, f64 (and f8e4m3 to
//! candle). A [`StateDict`] field of type `candle_core::Tensor` is loaded on the CPU
//! (move it with candle's `to_device`); a tensor on another device is copied to the CPU
//! to be saved.

use candle_core::{DType as CDType, Device};

use crate::state::{Key, LoadCx, SaveCx, StateDict};
use crate::{ByteOrder, DType, Error, ErrorKind, Result, Tensor};

/// The candle dtype of a tensorfmt dtype, if candle has it.
pub fn candle_dtype(d: DType) -> Option<CDType> {
    Some(match d {
        DType::U8 => CDType::U8,
        DType::U32 => CDType::U32,
        DType::I16 => CDType::I16,
        DType::I32 => CDType::I32,
        DType::I64 => CDType::I64,
        DType::BF16 => CDType::BF16,
        DType::F16 => CDType::F16,
        DType::F32 => CDType::F32,
        DType::F64 => CDType::F64,
        DType::F8E4M3FN => CDType::F8E4M3,
        _ => return None,
    })
}

/// The tensorfmt dtype of a candle dtype, if tensorfmt has it.
pub fn tensorfmt_dtype(d: CDType) -> Option<DType> {
    [
        DType::U8,
        DType::U32,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::BF16,
        DType::F16,
        DType::F32,
        DType::F64,
        DType::F8E4M3FN,
    ]
    .into_iter()
    .find(|t| candle_dtype(*t) == Some(d))
}

fn candle_error(name: &str, e: candle_core::Error) -> Error {
    ErrorKind::Sink(format!(
        "tensor '{}' in candle: {e}",
        crate::runtime::error::escape_name(name)
    ))
    .into()
}

/// The tensor as a candle tensor on `device`: its elements copied in C order.
pub fn to_candle(t: &Tensor, device: &Device) -> Result<candle_core::Tensor> {
    let dtype = candle_dtype(t.info.dtype).ok_or_else(|| {
        Error::from(ErrorKind::Unsupported(format!(
            "tensor '{}' of {}: candle has no such dtype",
            crate::runtime::error::escape_name(&t.info.name),
            t.info.dtype
        )))
    })?;
    // Borrowed from the file where the bytes are C order and little-endian, as candle
    // takes them (it copies them into its own storage).
    let mut bytes = t.c_bytes()?;
    if t.info.byte_order == ByteOrder::Big {
        let unit = t.info.dtype.itemsize().unwrap_or(1);
        crate::runtime::convert::swap_in_place(bytes.to_mut(), unit);
    }
    let shape: Vec<usize> = t
        .info
        .shape
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| ErrorKind::Overflow("dimension".into())))
        .collect::<std::result::Result<_, _>>()?;
    candle_core::Tensor::from_raw_buffer(&bytes, dtype, &shape, device)
        .map_err(|e| candle_error(&t.info.name, e))
}

/// A candle tensor as a tensor named `name` (copied to the CPU, in C order,
/// little-endian).
pub fn from_candle(name: &str, t: &candle_core::Tensor) -> Result<Tensor> {
    let e = |err| candle_error(name, err);
    let flat = t
        .to_device(&Device::Cpu)
        .map_err(e)?
        .flatten_all()
        .map_err(e)?;
    let shape: Vec<u64> = t.dims().iter().map(|&d| d as u64).collect();
    macro_rules! copy {
        ($t:ty) => {{
            let v = flat.to_vec1::<$t>().map_err(e)?;
            Tensor::from_slice(name, &shape, &v)?
        }};
    }
    let out = match t.dtype() {
        CDType::U8 => copy!(u8),
        CDType::U32 => copy!(u32),
        CDType::I16 => copy!(i16),
        CDType::I32 => copy!(i32),
        CDType::I64 => copy!(i64),
        CDType::BF16 => copy!(crate::runtime::half::bf16),
        CDType::F16 => copy!(crate::runtime::half::f16),
        CDType::F32 => copy!(f32),
        CDType::F64 => copy!(f64),
        other => {
            return Err(ErrorKind::Unsupported(format!(
                "candle tensor '{}' of {other:?}: no tensorfmt dtype is read back as it",
                crate::runtime::error::escape_name(name)
            ))
            .into())
        }
    };
    Ok(out)
}

/// A candle tensor field: loaded on the CPU in the file's dtype (or the current value's,
/// in an update), saved from wherever it is.
impl StateDict for candle_core::Tensor {
    fn load_state(cx: &mut LoadCx<'_>, key: &Key) -> Option<Self> {
        let t = cx.tensor(key)?;
        match to_candle(&t, &Device::Cpu) {
            Ok(c) => Some(c),
            Err(e) => {
                cx.fail(e.in_entry(key.name()));
                None
            }
        }
    }

    fn update_state(&mut self, cx: &mut LoadCx<'_>, key: &Key) {
        let want: Vec<u64> = self.dims().iter().map(|&d| d as u64).collect();
        let Some(t) = cx.tensor_of_shape(key, &want) else {
            return;
        };
        let Some(dtype) = tensorfmt_dtype(self.dtype()) else {
            cx.mismatch(key, format!("{:?}", self.dtype()), t.info.dtype.to_string());
            return;
        };
        let Some(t) = cx.with_dtype(key, t, dtype) else {
            return;
        };
        match to_candle(&t, self.device()) {
            Ok(c) => *self = c,
            Err(e) => cx.fail(e.in_entry(key.name())),
        }
    }

    fn save_state<'a>(&'a self, cx: &mut SaveCx<'a>, key: &Key) -> Result<()> {
        cx.held_tensor(key, from_candle(&key.name(), self)?)
    }
}
