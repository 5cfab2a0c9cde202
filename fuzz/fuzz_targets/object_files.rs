//! Arbitrary bytes as a whole file of one of the hand-written readers of pickled objects:
//! the first byte chooses — even, `joblib` (arrays inline after their wrapper's `BUILD`,
//! or a stream of any of joblib's compressors inflated under the budget first); odd,
//! `torch-pickle` (`pickle.dump` of torch tensors, each storage a nested legacy
//! `torch.save` stream) — then every tensor is read into a hashing sink and the object
//! tree made. Any panic, abort, timeout or out-of-memory is a bug.

#![no_main]

use libfuzzer_sys::fuzz_target;
use tensorfmt::runtime::hash::HashSink;
use tensorfmt::{Limits, OpenOptions, Source, TensorFile};

fuzz_target!(|data: &[u8]| {
    let Some((&choice, data)) = data.split_first() else {
        return;
    };
    let format = if choice % 2 == 0 { "joblib" } else { "torch-pickle" };
    let limits = Limits {
        max_tree_bytes: Some((1 << 20) + 64 * data.len() as u64),
        max_inflated_bytes: Some(16 << 20),
        ..Default::default()
    };
    let options = OpenOptions {
        format: Some(format.to_string()),
        limits,
        ..Default::default()
    };
    let Ok(file) = TensorFile::from_source(Source::from_bytes(data.to_vec()), &options) else {
        return;
    };
    let _ = file.read_all(&mut HashSink::default());
    let _ = file.structure();
});
