//! The restricted pickle reader over arbitrary bytes, with the rules of the PyTorch
//! checkpoint schema (`formats/fmt/pytorch.fmt`) and the default limits; what it accepts
//! is then walked for tensors as the checkpoint reader does. Any panic, abort, timeout or
//! out-of-memory is a bug: hostile input must give an error.

#![no_main]

use libfuzzer_sys::fuzz_target;
use tensorfmt::generated::pytorch;
use tensorfmt::runtime::pickle::{self, Rules};
use tensorfmt::Limits;

fn rules() -> &'static Rules {
    pytorch::checkpoint_rules()
}

fuzz_target!(|data: &[u8]| {
    let limits = Limits::default();
    if let Ok(value) = pickle::read(data, rules(), &limits) {
        let budget = pickle::memory_budget(data.len());
        let _ = pickle::find_objects(&value, data, &pytorch::is_checkpoint_tensor, &limits, budget);
    }
});
