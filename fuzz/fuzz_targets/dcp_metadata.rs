//! Arbitrary bytes as a torch.distributed checkpoint's `.metadata`, read beside the
//! `.distcp` files of the committed two-rank fixture (`tests/fixtures/dcp/world2`, mapped
//! read only): the pickle unpickled under DCP's allowlist, every chunk checked against its
//! tensor, every tensor assembled from the items the metadata points at (offsets and
//! lengths as fuzzed, into real archives), the values read, and a slice of each tensor
//! read from the chunks it overlaps. Any panic, abort, timeout or out-of-memory is a bug.

#![no_main]

use libfuzzer_sys::fuzz_target;
use tensorfmt::runtime::hash::HashSink;
use tensorfmt::{Limits, OpenOptions, Source, TensorFile};

const BESIDE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tests/fixtures/dcp/world2/.metadata"
);

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
        format: Some("torch-dcp".to_string()),
        limits,
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
