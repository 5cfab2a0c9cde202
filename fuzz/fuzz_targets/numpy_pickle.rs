//! Arbitrary bytes as a `.pkl` of NumPy arrays: indexed as `pickle` (the restricted
//! reader with the format's NumPy rules, byte strings left in the input, the array
//! mappings), every tensor read into a hashing sink (byte ranges, latin-1 text decoded,
//! bytes decoded from protocol-0 text), and the object tree read as the format's
//! structure. Any panic, abort, timeout or out-of-memory is a bug.

#![no_main]

use libfuzzer_sys::fuzz_target;
use tensorfmt::runtime::hash::HashSink;
use tensorfmt::{OpenOptions, Source, TensorFile};

fuzz_target!(|data: &[u8]| {
    let options = OpenOptions {
        format: Some("pickle".to_string()),
        ..Default::default()
    };
    let Ok(file) = TensorFile::from_source(Source::from_bytes(data.to_vec()), &options) else {
        return;
    };
    let _ = file.read_all(&mut HashSink::default());
    let _ = file.structure();
});
