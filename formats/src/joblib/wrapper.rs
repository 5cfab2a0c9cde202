//! joblib's `NumpyArrayWrapper` (joblib 1.x, `numpy_pickle.py`): what joblib pickles
//! in place of a NumPy array, an object whose `BUILD` state is the dict `subclass`,
//! `shape`, `order` (`'C'` or `'F'`), `dtype` (a `numpy.dtype`), `allow_mmap` and, from
//! joblib 1.2 on, `numpy_array_alignment_bytes`. Right after its `BUILD` the array's
//! bytes follow in the stream, in that order: when `numpy_array_alignment_bytes` is set
//! (not `None`), one byte giving a padding length and that many padding bytes first, so
//! that the data is aligned in the file. An array of Python objects (a dtype holding
//! `O`) is written instead as a pickle of its own (protocol 2 before joblib 1.5, 5 from
//! then on), without padding.

use tensorfmt_runtime::pickle::{self, Object, Value};

use crate::{ByteOrder, DType, Error, ErrorKind, Order, Result, TensorInfo};

/// The wrapper's global.
pub(crate) const WRAPPER: &str = "joblib.numpy_pickle.NumpyArrayWrapper";

/// Whether `o` is a wrapper.
pub(crate) fn is_wrapper(o: &Object) -> bool {
    &*o.global.module == "joblib.numpy_pickle" && &*o.global.name == "NumpyArrayWrapper"
}

/// Whether `o` is the wrapper of joblib before 0.10 (`NDArrayWrapper`, `ZNDArrayWrapper`:
/// the array in a `.npy` file beside the pickle), which is not read.
pub(crate) fn is_legacy_wrapper(o: &Object) -> bool {
    matches!(
        &*o.global.module,
        "joblib.numpy_pickle" | "joblib.numpy_pickle_compat"
    ) && matches!(&*o.global.name, "NDArrayWrapper" | "ZNDArrayWrapper")
}

/// A wrapper's `numpy.dtype`, as its state gives it.
struct Dtype<'v> {
    /// The descr without a byte-order prefix (`f8`, `U20`, `O8`, `V16`).
    descr: &'v str,
    /// Whether the elements are big-endian.
    big: bool,
    /// The bytes of one element.
    itemsize: u64,
    /// Whether the dtype holds Python objects (joblib's `dtype.hasobject`).
    object: bool,
}

/// What a wrapper's state says of its array.
struct Array<'v> {
    shape: Vec<u64>,
    order: Order,
    dtype: Dtype<'v>,
    /// A padding byte (and padding) precedes the data.
    aligned: bool,
}

fn invalid(field: &str, why: impl std::fmt::Display) -> Error {
    Error::from(ErrorKind::Invalid(format!("`{field}` {why}"))).in_field(field)
}

impl<'v> Array<'v> {
    /// The array `state` (a wrapper's) describes.
    fn of(state: &'v Value) -> Result<Self> {
        if state.as_entries().is_none() {
            return Err(invalid(
                "state",
                format!("is a {}, not a dict", state.type_name()),
            ));
        }
        let shape = pickle::dims(state.get("shape"), "shape")?;
        let order = match state.get("order").and_then(Value::as_str) {
            Some("C") => Order::C,
            Some("F") => Order::Fortran,
            _ => return Err(invalid("order", "is not 'C' or 'F'")),
        };
        let dtype = dtype(state.get("dtype"))?;
        let aligned = !pickle::is_none(state.get("numpy_array_alignment_bytes"));
        Ok(Array {
            shape,
            order,
            dtype,
            aligned,
        })
    }

    /// The bytes of the array's data.
    fn nbytes(&self) -> Result<u64> {
        self.shape
            .iter()
            .try_fold(self.dtype.itemsize, |n, &d| n.checked_mul(d))
            .ok_or_else(|| {
                ErrorKind::Overflow(format!(
                    "an array of shape {:?} of {}-byte elements",
                    self.shape, self.dtype.itemsize
                ))
                .into()
            })
    }
}

/// The `numpy.dtype(descr, align, copy)` call `v` with its state `(version, byte_order,
/// subarray, names, fields, ...)`.
fn dtype(v: Option<&Value>) -> Result<Dtype<'_>> {
    let o = match v {
        Some(Value::Object(o)) if o.global.path.as_ref() == "numpy.dtype" => o,
        other => {
            let what = other.map_or("nothing", Value::type_name);
            return Err(invalid("dtype", format!("is {what}, not a numpy.dtype")));
        }
    };
    let descr = o
        .args
        .first()
        .and_then(Value::as_str)
        .ok_or_else(|| invalid("dtype.descr", "is not text"))?;
    let (prefix, descr) = match descr.strip_prefix(['<', '>', '=', '|']) {
        Some(rest) => (&descr[..1], rest),
        None => ("", descr),
    };
    let order = pickle::index(o.state.as_ref(), 1).and_then(Value::as_str);
    let big = order.map_or(prefix == ">", |b| b == ">");
    let itemsize = match elsize(o.state.as_ref()) {
        Some(n) => n,
        None => descr_size(descr)
            .ok_or_else(|| invalid("dtype.descr", format!("{descr:?} gives no element size")))?,
    };
    let mut left = 1024u32;
    let object =
        descr.starts_with('O') || o.state.as_ref().is_some_and(|s| holds_object(s, &mut left));
    Ok(Dtype {
        descr,
        big,
        itemsize,
        object,
    })
}

/// The element size a dtype's state gives (`elsize`, set for flexible types: text,
/// bytes, records), when it gives one: item 5 of the states NumPy writes (version 3 and
/// 4, 8 or 9 items), 4 of version 1 and 2, 3 of version 0.
fn elsize(state: Option<&Value>) -> Option<u64> {
    let items = state?.as_seq()?;
    let at = match items.len() {
        8 | 9 => 5,
        6 => 4,
        5 => 3,
        _ => return None,
    };
    items[at]
        .as_i64()
        .and_then(|n| u64::try_from(n).ok())
        .filter(|&n| n > 0)
}

/// The element size a descr names: its digits after the kind (`f8`, `c16`, `M8[ns]`),
/// in characters of 4 bytes for text (`U5`).
fn descr_size(descr: &str) -> Option<u64> {
    let kind_len = descr
        .find(|c: char| !c.is_ascii_alphabetic())
        .unwrap_or(descr.len());
    let digits = &descr[kind_len..];
    let digits = &digits[..digits
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(digits.len())];
    let n = digits.parse::<u64>().ok()?;
    match descr.starts_with('U') {
        true => n.checked_mul(4),
        false => Some(n),
    }
}

/// Whether the dtype state `v` (a structured dtype's fields, a subarray's base) holds a
/// `numpy.dtype` of Python objects; at most `left` values are looked at.
fn holds_object(v: &Value, left: &mut u32) -> bool {
    if *left == 0 {
        return false;
    }
    *left -= 1;
    match v {
        Value::Object(o) if o.global.path.as_ref() == "numpy.dtype" => {
            o.args
                .first()
                .and_then(Value::as_str)
                .is_some_and(|d| d.trim_start_matches(['<', '>', '=', '|']).starts_with('O'))
                || o.state.as_ref().is_some_and(|s| holds_object(s, left))
        }
        Value::Tuple(items) | Value::List(items) => items.iter().any(|i| holds_object(i, left)),
        Value::Dict(entries) => entries.iter().any(|(_, i)| holds_object(i, left)),
        _ => false,
    }
}

/// The padding before a wrapper's data and the data's length, given its `state` and the
/// bytes `after` its `BUILD` (the reader's [`pickle::InlineFn`]): the padding byte and
/// the padding it counts when the state sets `numpy_array_alignment_bytes`, then the
/// array's bytes; for an array of Python objects, the pickle that holds it.
pub(crate) fn inline_len(state: &Value, after: &[u8]) -> Result<(u64, u64)> {
    let a = Array::of(state)?;
    if a.dtype.object {
        return Ok((0, super::scan::pickle_len(after)?));
    }
    let pad = match (a.aligned, after.first()) {
        (false, _) => 0,
        (true, Some(&p)) => 1 + u64::from(p),
        (true, None) => {
            return Err(ErrorKind::Truncated {
                needed: 1,
                available: 0,
            }
            .into())
        }
    };
    Ok((pad, a.nbytes()?))
}

/// The tensor of the wrapper `o` at `path`, its data (the object's one item) in the
/// pickle at `base` of the file; `None` for an array whose dtype is no tensor element
/// type (`pickle`'s `descr` table: text, Python objects, datetimes, records), which the
/// structure keeps as it is.
pub(crate) fn tensor(path: &str, o: &Object, base: u64) -> Result<Option<TensorInfo>> {
    let state = o
        .state
        .as_ref()
        .ok_or_else(|| invalid("state", "is missing: the wrapper has no BUILD"))?;
    let a = Array::of(state)?;
    let Some((dtype, _)) = crate::generated::pickle::DESCR.get(a.dtype.descr) else {
        return Ok(None);
    };
    let data = pickle::data(o.items.first(), base, "data")?;
    let byte_order = match a.dtype.big && dtype != DType::Bool {
        true => ByteOrder::Big,
        false => ByteOrder::Little,
    };
    TensorInfo::dense(path, dtype, a.shape, a.order, byte_order, data).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use tensorfmt_runtime::pickle::{Global, Kind};

    fn np_dtype(descr: &str, order: &str) -> Value {
        let params: Arc<[String]> = ["descr", "align", "copy"].map(String::from).into();
        Value::object(
            Object::new(Global::new("numpy", "dtype"), Kind::Call { params })
                .with_args(vec![
                    Value::str(descr),
                    Value::Bool(false),
                    Value::Bool(true),
                ])
                .with_state(Value::tuple(vec![
                    Value::Int(3),
                    Value::str(order),
                    Value::None,
                    Value::None,
                    Value::None,
                    Value::Int(-1),
                    Value::Int(-1),
                    Value::Int(0),
                ])),
        )
    }

    fn state(descr: &str, shape: &[i64], align: Option<i64>) -> Value {
        let shape = Value::tuple(shape.iter().map(|&d| Value::Int(d)).collect());
        Value::dict(vec![
            (Value::str("subclass"), Value::global("numpy.ndarray")),
            (Value::str("shape"), shape),
            (Value::str("order"), Value::str("F")),
            (Value::str("dtype"), np_dtype(descr, ">")),
            (Value::str("allow_mmap"), Value::Bool(true)),
            (
                Value::str("numpy_array_alignment_bytes"),
                align.map_or(Value::None, Value::Int),
            ),
        ])
    }

    #[test]
    fn padding_and_length_from_the_state() {
        let after = [3u8, 0xff, 0xff, 0xff, 1, 2, 3, 4];
        assert_eq!(
            inline_len(&state("f4", &[2, 3], Some(16)), &after).unwrap(),
            (4, 24)
        );
        assert_eq!(
            inline_len(&state("U5", &[2], None), &after).unwrap(),
            (0, 40)
        );
        assert_eq!(
            inline_len(&state("f8", &[], Some(16)), &[0]).unwrap(),
            (1, 8)
        );
        let e = inline_len(&state("f4", &[2], Some(16)), &[]).unwrap_err();
        assert!(matches!(e.kind, ErrorKind::Truncated { .. }), "{e}");
        let e = inline_len(&state("f8", &[1 << 40, 1 << 40], None), &[]).unwrap_err();
        assert!(matches!(e.kind, ErrorKind::Overflow(_)), "{e}");
        // Python objects: the pickle that follows, whatever the alignment.
        let p = b"\x80\x05\x8c\x01a\x94.rest";
        assert_eq!(inline_len(&state("O8", &[1], Some(16)), p).unwrap(), (0, 7));
        let e = inline_len(&Value::Int(1), &[]).unwrap_err();
        assert!(e.to_string().contains("not a dict"), "{e}");
    }

    #[test]
    fn a_wrapper_s_tensor_or_none() {
        let range = |len| {
            Value::Range(Arc::new(pickle::ByteRange {
                offset: 100,
                stored: len,
                len,
                latin1: false,
                text: None,
            }))
        };
        let wrapper = |s: Value, len| {
            Object::new(
                Global::new("joblib.numpy_pickle", "NumpyArrayWrapper"),
                Kind::Inert,
            )
            .with_state(s)
            .with_items(vec![range(len)])
        };
        let t = tensor("w", &wrapper(state("f4", &[2, 3], Some(16)), 24), 0)
            .unwrap()
            .unwrap();
        assert_eq!((t.dtype, t.shape.clone()), (DType::F32, vec![2, 3]));
        assert_eq!(
            (t.byte_order, t.strides.clone()),
            (ByteOrder::Big, vec![1, 2])
        );
        assert_eq!(t.location, crate::DataLocation::range(100, 24));
        assert!(tensor("s", &wrapper(state("U5", &[2], None), 40), 0)
            .unwrap()
            .is_none());
        let e = tensor("w", &wrapper(state("f4", &[2, 3], None), 20), 0).unwrap_err();
        assert!(matches!(e.kind, ErrorKind::SizeMismatch(_)), "{e}");
    }
}
