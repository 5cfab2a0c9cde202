//! NumPy's own rules for the calls that rebuild a pickled array, applied to an array
//! a format maps before its mapping reads it ([`array`]): what `pickle.loads` would make
//! of them with NumPy, or refuse. `_reconstruct(cls, shape, dtype)` then `BUILD` runs
//! `ndarray.__setstate__`, `numpy.dtype(descr, align, copy)` then `BUILD`
//! `dtype.__setstate__`, and `_frombuffer(buffer, dtype, shape, order, axis_order=None)`
//! is `frombuffer(buffer, dtype).reshape(shape, order)` (transposed by `axis_order`
//! for `order='K'`). Facts: NumPy 2.4 (`array_setstate` in `methods.c`,
//! `arraydescr_setstate` in `descriptor.c`, `_frombuffer` in `numeric.py`).
//!
//! What the mapping reads is the canonical form of what NumPy accepts: an array's state
//! is `(1, shape, dtype, is_fortran, data)` with `is_fortran` a `bool` (any non-zero
//! integer is Fortran order, as NumPy reads it), a dtype's state `(version, byte_order)`
//! with the byte order as one-character text (a byte string `b'>'` as `'>'`), and
//! `_frombuffer`'s shape a tuple (one integer, a list, one `-1` inferred) and its order
//! `'C'` or `'F'` (`'A'`, `None` and lower case as NumPy reads them); an array's text
//! data (`pickle.load(..., encoding='latin1')` of Python 2 bytes) its Latin-1 bytes, a
//! descr's byte order prefix (`'<f4'`) the dtype's when its state gives none. A dtype
//! given as text to `_frombuffer` (`'f4'`, which NumPy never writes) is not read.

use std::sync::Arc;

use super::value::{Object, Value};
use tensorfmt_core::error::{Error, ErrorKind, Result};
use tensorfmt_core::tensor::TensorInfo;

/// An array call as NumPy reads it: the call in canonical form, and the axes it is
/// transposed by (`_frombuffer` of `order='K'`), `None` for none.
pub(crate) struct Array {
    /// The call, its arguments and state canonical.
    pub object: Object,
    /// `axis_order`: the tensor's dimension `i` is the stored dimension `axes[i]`.
    pub axes: Option<Vec<usize>>,
}

fn refused(what: &str, why: impl std::fmt::Display) -> Error {
    ErrorKind::Invalid(format!("NumPy refuses this {what}: {why}")).into()
}

/// `v` as NumPy's `PyArg_ParseTuple` format `i` reads it: an integer (or a bool) that
/// fits in a C `int`.
fn c_int(v: &Value) -> Option<i32> {
    match v {
        Value::Bool(b) => Some(i32::from(*b)),
        Value::Int(i) => i32::try_from(*i).ok(),
        _ => None,
    }
}

/// `o` as NumPy reads it when it is a call of NumPy's that rebuilds an array
/// (`numpy.core` or `numpy._core` `multiarray._reconstruct`, `numeric._frombuffer`);
/// `None` for any other call. `buffer` is the pickle, whose byte strings
/// [`Value::Range`]s point into. Fails with [`ErrorKind::Invalid`] where NumPy raises.
pub(crate) fn array(o: &Object, buffer: &[u8]) -> Result<Option<Array>> {
    let module = o.global.module.strip_prefix("numpy.").unwrap_or("");
    Ok(match (module, &*o.global.name) {
        ("core.multiarray" | "_core.multiarray", "_reconstruct") => Some(reconstruct(o, buffer)?),
        ("core.numeric" | "_core.numeric", "_frombuffer") => Some(frombuffer(o, buffer)?),
        _ => None,
    })
}

/// Whether `o` rebuilds a NumPy array that is not a tensor: one of text (`U`), bytes
/// (`S`, `a`), Python objects (`O`), records (`V`) or dates (`M`, `m`), by its dtype's
/// descr. Such an array stays a value of the structure, as the walk finds it; an array
/// of any other descr is a tensor, its descr checked by the format's mapping.
pub fn is_value_array(o: &Object) -> bool {
    let module = o.global.module.strip_prefix("numpy.").unwrap_or("");
    let dtype = match (module, &*o.global.name) {
        ("core.multiarray" | "_core.multiarray", "_reconstruct") => o
            .state
            .as_ref()
            .and_then(Value::as_seq)
            .and_then(|items| items.iter().find(|v| is_dtype(v))),
        ("core.numeric" | "_core.numeric", "_frombuffer") => o.args.get(1),
        _ => None,
    };
    let descr = match dtype {
        Some(v @ Value::Object(d)) if is_dtype(v) => d.args.first().and_then(Value::as_str),
        _ => None,
    };
    descr
        .map(|d| d.trim_start_matches(['<', '>', '=', '|']))
        .and_then(|d| d.chars().next())
        .is_some_and(|c| "USaOVMm".contains(c))
}

/// `_reconstruct(...)` then `BUILD state`: `ndarray.__setstate__` takes `(version, shape,
/// dtype, is_fortran, data)`, or `(shape, dtype, is_fortran, data)` as version 0, with
/// `version` 0 or 1, `shape` a tuple, `dtype` a `numpy.dtype`, `is_fortran` a C `int`.
fn reconstruct(o: &Object, buffer: &[u8]) -> Result<Array> {
    let what = "numpy.ndarray state";
    let Some(state) = &o.state else {
        // No state: the mapping reports what it lacks.
        return Ok(Array {
            object: o.clone(),
            axes: None,
        });
    };
    let items = state
        .as_seq()
        .filter(|_| matches!(state, Value::Tuple(_) | Value::List(_)))
        .ok_or_else(|| refused(what, format!("it is a {}, not a tuple", state.type_name())))?;
    let (version, rest) = match items {
        [v, rest @ ..] if rest.len() == 4 => (
            c_int(v).ok_or_else(|| refused(what, "its version is not an integer"))?,
            rest,
        ),
        rest if rest.len() == 4 => (0, rest),
        _ => {
            return Err(refused(
                what,
                format!("it has {} items, not 4 or 5", items.len()),
            ))
        }
    };
    let [shape, dtype, fortran, data] = rest else {
        unreachable!("four items")
    };
    if !matches!(shape, Value::Tuple(_)) {
        return Err(refused(
            what,
            format!("its shape is a {}", shape.type_name()),
        ));
    }
    if !is_dtype(dtype) {
        let kind = match dtype {
            Value::Object(o) => format!("'{}' object", o.global),
            other => other.type_name().to_string(),
        };
        return Err(refused(
            what,
            format!("its dtype is a {kind}, not a numpy.dtype"),
        ));
    }
    let fortran = c_int(fortran)
        .ok_or_else(|| refused(what, "its is_fortran is not an integer of a C int"))?;
    if version != 0 && version != 1 {
        return Err(refused(
            what,
            format!("can't handle version {version} of numpy.ndarray pickle"),
        ));
    }
    // Text is taken as `pickle.load(..., encoding='latin1')` made it of Python 2 bytes.
    let data = match data {
        Value::Str(t) => Value::Bytes(
            t.chars()
                .map(|c| u8::try_from(u32::from(c)).ok())
                .collect::<Option<Vec<u8>>>()
                .ok_or_else(|| {
                    refused(
                        what,
                        "Failed to encode latin1 string when unpickling a Numpy array",
                    )
                })?
                .into(),
        ),
        other => other.clone(),
    };
    let mut object = o.clone();
    object.state = Some(Value::tuple(vec![
        Value::Int(1),
        shape.clone(),
        canonical_dtype(dtype, buffer)?,
        Value::Bool(fortran != 0),
        data,
    ]));
    Ok(Array { object, axes: None })
}

/// The one character of the text or byte string `v` (a byte as the character of its
/// value), and whether `v` is text; `Err` for a string of another length, `None` for a
/// value that is not a string. `buffer` is the pickle, whose byte strings
/// [`Value::Range`]s point into.
fn one_char(v: &Value, buffer: &[u8]) -> Option<std::result::Result<(char, bool), ()>> {
    let one = |mut it: std::str::Chars<'_>| match (it.next(), it.next()) {
        (Some(c), None) => Ok((c, true)),
        _ => Err(()),
    };
    Some(match v {
        Value::Str(s) => one(s.chars()),
        Value::Range(r) => match &r.text {
            Some(t) => one(t.chars()),
            None => match super::tree::range_bytes(buffer, r).as_deref() {
                Some([b]) => Ok((char::from(*b), false)),
                _ => Err(()),
            },
        },
        Value::Bytes(b) => match &b[..] {
            [b] => Ok((char::from(*b), false)),
            _ => Err(()),
        },
        _ => return None,
    })
}

/// Whether `v` is a `numpy.dtype(...)` call.
fn is_dtype(v: &Value) -> bool {
    matches!(v, Value::Object(o) if &*o.global.module == "numpy" && &*o.global.name == "dtype")
}

/// The `numpy.dtype` call `v` with its state as `dtype.__setstate__` reads it: a tuple
/// of 5 items (version 0: `byte_order, subarray, fields, elsize, alignment`) or of 6 to 9
/// (`version, byte_order, ...`), `version` 0 to 4, the byte order a text or byte string
/// of one (ASCII) character, `names` and `fields` both `None` or a tuple and a dict,
/// the sizes C `int`s. Its state becomes `(version, byte_order)`. Anything but a dtype
/// call is returned as it is.
fn canonical_dtype(v: &Value, buffer: &[u8]) -> Result<Value> {
    let what = "numpy.dtype state";
    let Value::Object(o) = v else {
        return Ok(v.clone());
    };
    if !is_dtype(v) {
        return Ok(v.clone());
    }
    // `numpy.dtype('<f4')`: the descr's byte order, unless the state gives one.
    let descr = o.args.first().and_then(Value::as_str);
    let prefixed = descr
        .and_then(|d| {
            d.strip_prefix(['<', '>', '=', '|'])
                .map(|rest| (rest, &d[..1]))
        })
        .filter(|(rest, _)| !rest.is_empty());
    let canonical = |state: Option<Value>| {
        let mut o = (**o).clone();
        if let Some((rest, _)) = prefixed {
            o.args[0] = Value::str(rest);
        }
        o.state = state;
        Value::Object(Arc::new(o))
    };
    let Some(state) = o.state.as_ref() else {
        let order = prefixed.map(|(_, p)| Value::tuple(vec![Value::Int(3), Value::str(p)]));
        return Ok(canonical(order));
    };
    let Value::Tuple(items) = state else {
        return Err(refused(
            what,
            format!("it is a {}, not a tuple", state.type_name()),
        ));
    };
    let bad_version = |v: i64| {
        refused(
            what,
            format!("can't handle version {v} of numpy.dtype pickle"),
        )
    };
    let int = |v: &Value, name: &str| {
        c_int(v).ok_or_else(|| refused(what, format!("its {name} is not an integer of a C int")))
    };
    // Per length: where the byte order is, and `names` and `fields` (`None` for `names`
    // when the state has none: versions 0 and 1 keep them in `fields`).
    let (version, endian, names, fields, ints): (i32, &Value, Option<&Value>, &Value, &[Value]) =
        match &items[..] {
            [e, _sub, f, rest @ ..] if items.len() == 5 => (0, e, None, f, rest),
            [v, e, _sub, f, rest @ ..] if items.len() == 6 => {
                (int(v, "version")?, e, None, f, rest)
            }
            [v, e, _sub, n, f, rest @ ..] if (7..=9).contains(&items.len()) => {
                let ints = &rest[..rest.len().min(3)];
                (int(v, "version")?, e, Some(n), f, ints)
            }
            _ => return Err(bad_version(-1)),
        };
    for (i, x) in ints.iter().enumerate() {
        int(x, ["elsize", "alignment", "flags"][i])?;
    }
    if !(0..=4).contains(&version) {
        return Err(bad_version(i64::from(version)));
    }
    let endian = match one_char(endian, buffer) {
        Some(Ok((c, text))) if c.is_ascii() || !text => c.to_string(),
        Some(_) => {
            return Err(refused(
                what,
                "endian is not 1-char string in Numpy dtype unpickling",
            ))
        }
        None => {
            return Err(refused(
                what,
                "endian is not a string in Numpy dtype unpickling",
            ))
        }
    };
    let names = match (version, names) {
        (0 | 1, _) => match fields {
            Value::None => &Value::None,
            f => f
                .as_entries()
                .and_then(|e| e.iter().rev().find(|(k, _)| k.as_i128() == Some(-1)))
                .map(|(_, n)| n)
                .ok_or_else(|| refused(what, "its fields lack the names (key -1)"))?,
        },
        (_, Some(n)) => n,
        (_, None) => {
            return Err(refused(
                what,
                "inconsistent fields and names in Numpy dtype unpickling",
            ))
        }
    };
    match (names, fields) {
        (Value::None, Value::None) => {}
        (Value::None, _) | (_, Value::None) => {
            return Err(refused(
                what,
                "inconsistent fields and names in Numpy dtype unpickling",
            ))
        }
        (Value::Tuple(_), Value::Dict(_)) => {}
        _ => {
            return Err(refused(
                what,
                "its names are not a tuple or its fields not a dict",
            ))
        }
    }
    Ok(canonical(Some(Value::tuple(vec![
        Value::Int(i64::from(version)),
        Value::str(&endian),
    ]))))
}

/// `_frombuffer(buffer, dtype, shape, order, axis_order=None)`: four or five arguments;
/// `order` a text or byte string of one of `C`, `F`, `A`, `K` in either case, or
/// `None` (C); `'K'` (exactly) only with an `axis_order`, a permutation of the
/// dimensions (negative axes count from the end), the array then being `shape` in C order
/// transposed by it. `shape` may be one integer. The buffer must be a byte string.
fn frombuffer(o: &Object, buffer: &[u8]) -> Result<Array> {
    let what = "_frombuffer call";
    if !(4..=5).contains(&o.args.len()) {
        return Err(refused(
            what,
            format!("it takes 4 or 5 arguments, {} are given", o.args.len()),
        ));
    }
    let (buf, dtype, shape, order) = (&o.args[0], &o.args[1], &o.args[2], &o.args[3]);
    let axis_order = o.args.get(4).filter(|a| !matches!(a, Value::None));
    if matches!(buf, Value::Str(_)) || matches!(buf, Value::Range(r) if r.text.is_some()) {
        return Err(refused(what, "its buffer is text, not a bytes-like object"));
    }
    let shape = match shape {
        Value::Int(_) => Value::tuple(vec![shape.clone()]),
        Value::List(items) => Value::Tuple(items.clone()),
        other => other.clone(),
    };
    let letter = match (order, one_char(order, buffer)) {
        (Value::None, _) => 'C',
        (_, Some(Ok((c, _)))) => c,
        (_, Some(Err(()))) => '?',
        (other, None) => {
            return Err(refused(
                what,
                format!("order must be str, not {}", other.type_name()),
            ))
        }
    };
    let exactly_k = matches!(order, Value::Str(s) if &**s == "K");
    let (letter, axes) = match letter.to_ascii_uppercase() {
        'K' if exactly_k && axis_order.is_some() => {
            let ndim = shape.as_seq().map_or(0, <[Value]>::len);
            ('C', Some(axes(axis_order, ndim)?))
        }
        'K' => return Err(refused(what, "order 'K' is not permitted for reshaping")),
        'C' | 'A' => ('C', None),
        'F' => ('F', None),
        _ => return Err(refused(what, "order must be one of 'C', 'F', 'A', or 'K'")),
    };
    let dtype = canonical_dtype(dtype, buffer)?;
    let shape = unknown_dimension(shape, &dtype, buf);
    let mut object = o.clone();
    object.args = vec![buf.clone(), dtype, shape, Value::str(&letter.to_string())];
    Ok(Array { object, axes })
}

/// `shape` with its one `-1` (the dimension `reshape` infers) the count of elements of
/// the byte string `buf` of `dtype` over the product of the others, when they divide; as
/// it is otherwise (its negative item then refused).
fn unknown_dimension(shape: Value, dtype: &Value, buf: &Value) -> Value {
    let Some(dims) = shape.as_int_list() else {
        return shape;
    };
    let itemsize = match dtype {
        Value::Object(o) => o.args.first().and_then(Value::as_str).and_then(|d| {
            let digits = d.trim_start_matches(|c: char| c.is_ascii_alphabetic());
            digits.parse::<u64>().ok().filter(|&n| n > 0)
        }),
        _ => None,
    };
    let (Some(itemsize), Some(len)) = (itemsize, super::data::data_len(Some(buf))) else {
        return shape;
    };
    if dims.iter().filter(|&&d| d == -1).count() != 1 || dims.iter().any(|&d| d < -1) {
        return shape;
    }
    let known = dims
        .iter()
        .filter(|&&d| d != -1)
        .try_fold(1u64, |p, &d| p.checked_mul(d as u64));
    match known {
        Some(p) if p > 0 && len % itemsize == 0 && (len / itemsize) % p == 0 => {
            let n = (len / itemsize / p) as i128;
            Value::tuple(
                dims.iter()
                    .map(|&d| Value::int(if d == -1 { n } else { i128::from(d) }))
                    .collect(),
            )
        }
        _ => shape,
    }
}

/// `axis_order` as `transpose` reads it for an array of `ndim` dimensions: a tuple or
/// list of `ndim` integers, each naming a dimension once (negative ones counted from the
/// end).
fn axes(axis_order: Option<&Value>, ndim: usize) -> Result<Vec<usize>> {
    let what = "_frombuffer call";
    let items = axis_order
        .and_then(Value::as_int_list)
        .ok_or_else(|| refused(what, "its axis_order is not a tuple of integers"))?;
    if items.len() != ndim {
        return Err(refused(what, "axes don't match array"));
    }
    let n = ndim as i64;
    let mut seen = vec![false; ndim];
    items
        .into_iter()
        .map(|a| {
            let i = if a < 0 { a + n } else { a };
            let i = usize::try_from(i)
                .ok()
                .filter(|&i| i < ndim)
                .ok_or_else(|| {
                    refused(
                        what,
                        format!("axis {a} is out of bounds for array of dimension {ndim}"),
                    )
                })?;
            if std::mem::replace(&mut seen[i], true) {
                return Err(refused(what, "repeated axis in transpose"));
            }
            Ok(i)
        })
        .collect()
}

/// `t`, dense in C order, transposed by `axes` (see [`Array::axes`]): the same bytes.
pub(crate) fn transpose(mut t: TensorInfo, axes: &[usize]) -> Result<TensorInfo> {
    if axes.len() != t.shape.len() {
        return Err(refused("_frombuffer call", "axes don't match array"));
    }
    let shape: Vec<u64> = axes.iter().map(|&a| t.shape[a]).collect();
    let strides: Vec<i64> = axes.iter().map(|&a| t.strides[a]).collect();
    t.shape = shape;
    t.strides = strides;
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Global, Kind};

    fn call(module: &str, name: &str, args: Vec<Value>) -> Object {
        Object::new(
            Global::new(module, name),
            Kind::Call {
                params: Vec::new().into(),
            },
        )
        .with_args(args)
    }

    fn dtype(state: Value) -> Value {
        Value::object(call("numpy", "dtype", vec![Value::str("f4")]).with_state(state))
    }

    fn le() -> Value {
        float32_with_order("<")
    }

    /// A float32 dtype whose full state gives byte order `order`.
    fn float32_with_order(order: &str) -> Value {
        dtype(Value::tuple(vec![
            Value::Int(3),
            Value::str(order),
            Value::None,
            Value::None,
            Value::None,
            Value::Int(-1),
            Value::Int(-1),
            Value::Int(0),
        ]))
    }

    fn state(items: Vec<Value>) -> Object {
        call("numpy._core.multiarray", "_reconstruct", Vec::new()).with_state(Value::tuple(items))
    }

    fn shape() -> Value {
        Value::int_tuple(&[2i64, 3])
    }

    #[test]
    fn array_states_read_as_numpy_reads_them() {
        let data = Value::bytes(&[0; 24]);
        for (fortran, want) in [(7, true), (-1, true), (0, false)] {
            let o = state(vec![
                Value::Int(1),
                shape(),
                le(),
                Value::Int(fortran),
                data.clone(),
            ]);
            let a = array(&o, &[]).unwrap().unwrap();
            let s = a.object.state.unwrap();
            assert_eq!(s.as_seq().unwrap()[3], Value::Bool(want), "{fortran}");
        }
        // Four items: version 0.
        let o = state(vec![shape(), le(), Value::Bool(true), data.clone()]);
        let s = array(&o, &[]).unwrap().unwrap().object.state.unwrap();
        assert_eq!(s.as_seq().unwrap()[0], Value::Int(1));
        for (items, why) in [
            (
                vec![Value::Int(99), shape(), le(), Value::Int(0), data.clone()],
                "version 99",
            ),
            (
                vec![Value::Int(1), shape(), le(), Value::None, data.clone()],
                "is_fortran",
            ),
            (
                vec![
                    Value::Int(1),
                    shape(),
                    dtype(Value::tuple(vec![Value::Int(3), Value::str("")])),
                    Value::Int(0),
                    data.clone(),
                ],
                "version -1",
            ),
            (
                vec![
                    Value::Int(1),
                    shape(),
                    float32_with_order(""),
                    Value::Int(0),
                    data.clone(),
                ],
                "1-char",
            ),
        ] {
            let e = array(&state(items), &[]).err().expect(why).to_string();
            assert!(e.contains(why), "{e}");
        }
        // Not NumPy's: left alone.
        assert!(array(&call("m", "f", Vec::new()), &[]).unwrap().is_none());
    }

    #[test]
    fn frombuffer_orders_and_axes() {
        let fb = |order: Value, extra: Option<Value>| {
            let mut args = vec![Value::bytes(&[0; 24]), le(), shape(), order];
            args.extend(extra);
            array(&call("numpy._core.numeric", "_frombuffer", args), &[])
        };
        for (order, want) in [("f", "F"), ("A", "C"), ("c", "C")] {
            let a = fb(Value::str(order), None).unwrap().unwrap();
            assert_eq!(a.object.args[3], Value::str(want), "{order}");
            assert!(a.axes.is_none());
        }
        let a = fb(Value::bytes(b"F"), None).unwrap().unwrap();
        assert_eq!(a.object.args[3], Value::str("F"));
        let a = fb(Value::str("K"), Some(Value::int_tuple(&[-1i64, 0])))
            .unwrap()
            .unwrap();
        assert_eq!(a.axes, Some(vec![1, 0]));
        for (order, extra, why) in [
            (Value::str("X"), None, "one of"),
            (Value::str("K"), None, "'K' is not permitted"),
            (
                Value::str("k"),
                Some(Value::int_tuple(&[1i64, 0])),
                "'K' is not permitted",
            ),
            (
                Value::str("K"),
                Some(Value::int_tuple(&[0i64, 0])),
                "repeated axis",
            ),
            (Value::Int(1), None, "must be str"),
        ] {
            let e = fb(order, extra).err().expect(why).to_string();
            assert!(e.contains(why), "{e}");
        }
        // One unknown dimension, inferred from the buffer.
        let args = vec![
            Value::bytes(&[0; 24]),
            le(),
            Value::int_tuple(&[-1i64, 2]),
            Value::None,
        ];
        let a = array(&call("numpy.core.numeric", "_frombuffer", args), &[])
            .unwrap()
            .unwrap();
        assert_eq!(a.object.args[2], Value::int_tuple(&[3i64, 2]));
    }
}
