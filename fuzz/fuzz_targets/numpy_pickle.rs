//! Arbitrary bytes as a `.pkl` of NumPy arrays: indexed as `pickle` (the restricted
//! reader with the format's NumPy rules, byte strings left in the input, the array
//! mappings), every tensor read into a hashing sink (byte ranges, latin-1 text decoded,
//! bytes decoded from protocol-0 text), and the object tree read as the format's
//! structure. Any panic, abort, timeout or out-of-memory is a bug.

#![no_main]

use libfuzzer_sys::fuzz_target;
use tensorfmt::runtime::hash::HashSink;
use tensorfmt::{Limits, OpenOptions, Source, TensorFile};

fuzz_target!(|data: &[u8]| {
    // A budget for expanding the pickle's objects of 1 MiB (not 64 MiB) and 64 bytes a
    // byte: the same arithmetic, charged the same way, but a "billion laughs" input is
    // refused after a millisecond rather than a second, so the corpus's many variants of
    // one do not slow the run fifty times.
    let limits = Limits {
        max_tree_bytes: Some((1 << 20) + 64 * data.len() as u64),
        ..Default::default()
    };
    let options = OpenOptions {
        format: Some("pickle".to_string()),
        limits,
        ..Default::default()
    };
    let Ok(file) = TensorFile::from_source(Source::from_bytes(data.to_vec()), &options) else {
        return;
    };
    let _ = file.read_all(&mut HashSink::default());
    let _ = file.structure();
});
