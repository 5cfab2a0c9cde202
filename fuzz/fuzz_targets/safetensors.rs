//! Arbitrary bytes as a safetensors file: indexed as `safetensors` (the JSON header with
//! its limits, unique keys and tiled offsets), every tensor read into a hashing sink, and
//! the metadata read as the format's structure. Any panic, abort, timeout or
//! out-of-memory is a bug.

#![no_main]

use libfuzzer_sys::fuzz_target;
use tensorfmt::runtime::hash::HashSink;
use tensorfmt::{OpenOptions, Source, TensorFile};

fuzz_target!(|data: &[u8]| {
    let options = OpenOptions {
        format: Some("safetensors".to_string()),
        ..Default::default()
    };
    let Ok(file) = TensorFile::from_source(Source::from_bytes(data.to_vec()), &options) else {
        return;
    };
    let _ = file.read_all(&mut HashSink::default());
    let _ = file.structure();
});
