//! Arbitrary bytes as a whole ONNX model: indexed as `onnx` (initializers and Constant
//! nodes), every tensor read into a hashing sink, then rewritten with every initializer
//! moved inline into memory (the rewrite walks and copies the document field by field).
//! Any panic, abort, timeout or out-of-memory is a bug.

#![no_main]

use libfuzzer_sys::fuzz_target;
use tensorfmt::runtime::hash::HashSink;
use tensorfmt::{OpenOptions, Source, TensorFile};

fuzz_target!(|data: &[u8]| {
    let options = OpenOptions {
        format: Some("onnx".to_string()),
        ..Default::default()
    };
    let Ok(file) = TensorFile::from_source(Source::from_bytes(data.to_vec()), &options) else {
        return;
    };
    let _ = file.read_all(&mut HashSink::default());
    if let Some(rewrite) = file.format_desc().rewrite {
        let out = std::io::Cursor::new(Vec::new());
        let _ = rewrite(
            file.source(),
            Box::new(out),
            &Default::default(),
            &Default::default(),
            &mut |_name| Ok(None),
        );
    }
});
