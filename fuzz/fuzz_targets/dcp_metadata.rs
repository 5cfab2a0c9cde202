//! Arbitrary bytes as a torch.distributed checkpoint's `.metadata`, read beside the
//! `.distcp` files of the committed two-rank fixture (`tests/fixtures/dcp/world2`, mapped
//! read only): the pickle unpickled under DCP's allowlist, every chunk checked against its
//! tensor, every tensor assembled from the items the metadata points at (offsets and
//! lengths as fuzzed, into real archives), the values read, and a slice of each tensor
//! read from the chunks it overlaps. Any panic, abort, timeout or out-of-memory is a bug.

#![no_main]

use libfuzzer_sys::fuzz_target;
use tensorfmt::runtime::hash::HashSink;
use tensorfmt::{OpenOptions, Source, TensorFile};

const BESIDE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tests/fixtures/dcp/world2/.metadata"
);

fuzz_target!(|data: &[u8]| {
    let options = OpenOptions {
        format: Some("torch-dcp".to_string()),
        ..Default::default()
    };
    let source = Source::from_bytes(data.to_vec()).with_path(BESIDE);
    let Ok(file) = TensorFile::from_source(source, &options) else {
        return;
    };
    let _ = file.read_all(&mut HashSink::default());
    let _ = file.structure();
    for info in file.tensors() {
        let offsets: Vec<u64> = info.shape.iter().map(|&n| n / 2).collect();
        let sizes: Vec<u64> = info.shape.iter().map(|&n| n - n / 2).collect();
        let _ = file.load_slice(info, &offsets, &sizes);
    }
});
