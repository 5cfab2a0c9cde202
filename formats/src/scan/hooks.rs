//! What the scanner must know of the formats around pickles: joblib's array wrapper,
//! whose `BUILD` is followed in the stream by the array's bytes (joblib 1.x,
//! `numpy_pickle.py`: `NumpyArrayWrapper.write_array` and `read_array`), and torch's
//! `_load_from_bytes`, whose argument is a whole `torch.load` stream. Hand-written with
//! the scanner (see `scan.rs`).

use crate::runtime::pickle::{Inline, ScanHooks, SymValue, Watch};

/// The hooks of every pickle the scanner reads.
pub(super) struct Hooks;

/// `torch.storage._load_from_bytes`: `torch.load(io.BytesIO(b), weights_only=False)`.
pub(super) const LOAD_FROM_BYTES: &str = "torch.storage._load_from_bytes";

impl ScanHooks for Hooks {
    fn watch(&self, module: &str, name: &str) -> Watch {
        match (module, name) {
            ("joblib.numpy_pickle", "NumpyArrayWrapper") => Watch::Build,
            ("torch.storage", "_load_from_bytes") => Watch::Args,
            _ => Watch::Nothing,
        }
    }

    fn after_build(&self, _: &str, _: &str, state: &SymValue) -> Inline {
        match wrapper_data(state) {
            Ok(inline) => inline,
            Err(why) => Inline::Invalid(format!(
                "joblib's NumpyArrayWrapper state {why}: where its array's bytes end is unknown"
            )),
        }
    }
}

/// What follows a `NumpyArrayWrapper`'s `BUILD`, from its state: an array of objects is
/// a pickle of its own; any other, when the state has `numpy_array_alignment_bytes`
/// (joblib 1.2 and later), a byte counting padding bytes and those, then the array's
/// `prod(shape) * itemsize` bytes.
fn wrapper_data(state: &SymValue) -> Result<Inline, String> {
    let dtype = state.get("dtype").ok_or("has no dtype")?;
    let (itemsize, object) = dtype_of(dtype)?;
    if object {
        return Ok(Inline::Pickle);
    }
    let shape = state
        .get("shape")
        .and_then(SymValue::items)
        .ok_or("has no shape tuple")?;
    let mut count: u64 = 1;
    for d in shape {
        let d = d
            .as_int()
            .filter(|&d| d >= 0)
            .ok_or("has a dimension that is not a size")?;
        count = count
            .checked_mul(d as u64)
            .ok_or("has a shape whose size overflows")?;
    }
    let len = count
        .checked_mul(itemsize)
        .ok_or("has a shape whose size overflows")?;
    let padded = matches!(
        state.get("numpy_array_alignment_bytes"),
        Some(SymValue::Int(_))
    );
    Ok(Inline::Skip { padded, len })
}

/// The item size of a pickled `numpy.dtype` and whether it holds Python objects: from its
/// state (`(version, byteorder, subarray, names, fields, elsize, alignment, flags, ...)`:
/// `elsize` when positive, the flag `NPY_ITEM_HASOBJECT`), else from its type string.
fn dtype_of(dtype: &SymValue) -> Result<(u64, bool), String> {
    let SymValue::Object {
        callee,
        args,
        state,
    } = dtype
    else {
        return Err("has a dtype that is not a pickled numpy.dtype".into());
    };
    if !callee
        .global_path()
        .is_some_and(|p| p.starts_with("numpy") && p.ends_with(".dtype"))
    {
        return Err("has a dtype that is not a numpy.dtype".into());
    }
    let descr = args
        .items()
        .and_then(|a| a.first())
        .and_then(SymValue::as_str)
        .ok_or("has a dtype without its type string")?;
    let st = state.as_deref().and_then(SymValue::items).unwrap_or(&[]);
    let elsize = st.get(5).and_then(SymValue::as_int).unwrap_or(-1);
    let flags = st.get(7).and_then(SymValue::as_int).unwrap_or(0);
    let kind = descr.trim_start_matches(['<', '>', '|', '=']);
    let object = flags & 1 != 0 || kind.starts_with('O');
    if elsize > 0 {
        return Ok((elsize as u64, object));
    }
    let digits = kind.trim_start_matches(|c: char| c.is_ascii_alphabetic());
    match digits.parse::<u64>() {
        Ok(n) if n > 0 => Ok((n, object)),
        _ => Err(format!("has a dtype {descr:?} whose item size is unknown")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dtype(descr: &str, elsize: i64, flags: i64) -> SymValue {
        let global = SymValue::Global {
            module: "numpy".into(),
            name: "dtype".into(),
        };
        let st = [3, 0, 0, 0, 0, elsize, -1, flags].map(SymValue::Int);
        SymValue::Object {
            callee: Box::new(global),
            args: Box::new(SymValue::Tuple(vec![
                SymValue::Str(descr.into()),
                SymValue::Bool(false),
                SymValue::Bool(true),
            ])),
            state: Some(Box::new(SymValue::Tuple(st.to_vec()))),
        }
    }

    fn state(shape: &[i64], dtype: SymValue, align: bool) -> SymValue {
        let mut items = vec![
            (
                SymValue::Str("shape".into()),
                SymValue::Tuple(shape.iter().map(|&d| SymValue::Int(d)).collect()),
            ),
            (SymValue::Str("dtype".into()), dtype),
        ];
        if align {
            items.push((
                SymValue::Str("numpy_array_alignment_bytes".into()),
                SymValue::Int(16),
            ));
        }
        SymValue::Dict(items)
    }

    #[test]
    fn array_sizes_from_the_wrapper_state() {
        let skip = |padded, len| Inline::Skip { padded, len };
        let h = Hooks;
        assert_eq!(
            h.after_build("", "", &state(&[3, 4], dtype("f8", -1, 0), true)),
            skip(true, 96)
        );
        assert_eq!(
            h.after_build("", "", &state(&[2], dtype("<U5", 20, 8), false)),
            skip(false, 40)
        );
        assert_eq!(
            h.after_build("", "", &state(&[], dtype("b1", -1, 0), true)),
            skip(true, 1)
        );
        assert_eq!(
            h.after_build("", "", &state(&[0, 7], dtype("c16", -1, 0), true)),
            skip(true, 0)
        );
        assert_eq!(
            h.after_build("", "", &state(&[5], dtype("O8", -1, 63), true)),
            Inline::Pickle
        );
        assert_eq!(
            h.after_build("", "", &state(&[5], dtype("V8", 8, 27), true)),
            Inline::Pickle
        );
        for bad in [
            state(&[1 << 40, 1 << 40], dtype("f8", -1, 0), true),
            state(&[-1], dtype("f8", -1, 0), true),
            state(&[3], dtype("M8", -1, 0), true)
                .get("shape")
                .cloned()
                .unwrap(),
            state(&[3], SymValue::Unknown, true),
        ] {
            assert!(
                matches!(h.after_build("", "", &bad), Inline::Invalid(_)),
                "{bad:?}"
            );
        }
    }
}
