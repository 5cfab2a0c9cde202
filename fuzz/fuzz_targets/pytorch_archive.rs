//! Arbitrary bytes as a whole checkpoint: opened as `pytorch` (zip) and as
//! `pytorch-legacy`, every tensor read into a hashing sink, with the default limits and
//! checksums verified. Any panic, abort, timeout or out-of-memory is a bug.

#![no_main]

use libfuzzer_sys::fuzz_target;
use tensorfmt::runtime::hash::HashSink;
use tensorfmt::{OpenOptions, Source, TensorFile};

fn read(data: &[u8], format: &str) {
    let options = OpenOptions {
        format: Some(format.to_string()),
        ..Default::default()
    };
    if let Ok(file) = TensorFile::from_source(Source::from_bytes(data.to_vec()), &options) {
        let _ = file.read_all(&mut HashSink::default());
    }
}

fuzz_target!(|data: &[u8]| {
    read(data, "pytorch");
    read(data, "pytorch-legacy");
});
