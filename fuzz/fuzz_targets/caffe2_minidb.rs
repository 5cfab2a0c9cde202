//! Arbitrary bytes as a whole Caffe2 MiniDB: its records listed by the generated Record
//! layout, their keys matched, their values read as BlobProto or TensorProtos, the parts
//! of each tensor joined, and every tensor read into a hashing sink. Any panic, abort,
//! timeout or out-of-memory is a bug.

#![no_main]

use libfuzzer_sys::fuzz_target;
use tensorfmt::runtime::hash::HashSink;
use tensorfmt::{OpenOptions, Source, TensorFile};

fuzz_target!(|data: &[u8]| {
    let options = OpenOptions {
        format: Some("caffe2-minidb".to_string()),
        ..Default::default()
    };
    if let Ok(file) = TensorFile::from_source(Source::from_bytes(data.to_vec()), &options) {
        let _ = file.read_all(&mut HashSink::default());
    }
});
