//! Arbitrary bytes as a pickle of whole objects, read inertly (the default): every
//! global outside the rules an inert object that records its arguments, state, items
//! and entries. The first byte chooses the rules — even, the PyTorch checkpoint's
//! (`formats/fmt/pytorch.fmt`); odd, the NumPy pickle format's with joblib's arrays
//! inline after their wrapper's `BUILD` — then the value is walked for tensors (an
//! `nn.Module`'s state dict by its names, attributes, slots, list and dict subclasses)
//! and made the object tree (modules shown by their state). Any panic, abort, timeout
//! or out-of-memory is a bug: hostile input must give an error.

#![no_main]

use libfuzzer_sys::fuzz_target;
use tensorfmt::generated::{pickle as numpy_pickle, pytorch};
use tensorfmt::runtime::pickle::{self, Object, Rules, Value};
use tensorfmt::Limits;

/// joblib's wrapper: the array's bytes follow its `BUILD`, after a padding byte.
fn joblib_len(state: &Value, after: &[u8]) -> tensorfmt::Result<(u64, u64)> {
    let n = state.get("shape").and_then(Value::as_seq).map_or(0, |s| s.len() as u64);
    let pad = after.first().copied().unwrap_or(0) as u64;
    Ok((1 + pad, n.saturating_mul(8)))
}

fn numpy_rules() -> &'static Rules {
    static RULES: std::sync::OnceLock<Rules> = std::sync::OnceLock::new();
    RULES.get_or_init(|| {
        numpy_pickle::numpy_rules()
            .clone()
            .inline_data("joblib.numpy_pickle.NumpyArrayWrapper", joblib_len)
    })
}

fn is_array(o: &Object) -> bool {
    numpy_pickle::is_numpy_array(o) || &*o.global.name == "NumpyArrayWrapper"
}

fuzz_target!(|data: &[u8]| {
    let Some((&choice, data)) = data.split_first() else {
        return;
    };
    let limits = Limits {
        max_tree_bytes: Some((1 << 20) + 64 * data.len() as u64),
        ..Default::default()
    };
    let (rules, is_target): (&Rules, &dyn Fn(&Object) -> bool) = match choice % 2 {
        0 => (pytorch::checkpoint_rules(), &pytorch::is_checkpoint_tensor),
        _ => (numpy_rules(), &is_array),
    };
    let Ok(value) = pickle::read(data, rules, &limits) else {
        return;
    };
    let budget = limits.tree_budget(data.len() as u64);
    let Ok(found) = pickle::find_objects(&value, data, is_target, &limits, budget) else {
        return;
    };
    let names: std::collections::HashMap<*const Object, String> =
        found.iter().map(|(n, o)| (*o as *const Object, n.clone())).collect();
    let _ = pickle::to_tree(
        &value,
        data,
        &mut |o| names.get(&(o as *const Object)).cloned(),
        &limits,
    );
});
