//! Criterion settings and sizes shared by the npy and npz benches.

#![allow(dead_code)]

use std::time::Duration;

use criterion::Criterion;
use tensorfmt_benches::MIB;

/// True under `cargo bench`; false when the bench binary runs as a test (`cargo test
/// --benches`), where sizes shrink so that a test run stays quick and small.
pub fn full() -> bool {
    std::env::args().any(|a| a == "--bench")
}

/// `full` bytes under `cargo bench`, `small` bytes otherwise.
pub fn size(full_bytes: usize, small: usize) -> usize {
    if full() {
        full_bytes
    } else {
        small
    }
}

/// Ten samples, short warm-up and measurement: the whole suite runs in a few minutes.
/// Slow operations (fsync'd 256 MiB writes, deflate) take one iteration per sample, so
/// criterion will say it cannot finish in the measurement time; that is expected.
pub fn config() -> Criterion {
    Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
}

/// Writes in a directory under `$TFBENCH_DIR` (default: the system temp dir, on the same
/// disk as the work tree here).
pub fn tempdir() -> tempfile::TempDir {
    tensorfmt_benches::bench_tempdir().expect("creating the bench directory")
}

pub const KIB: usize = 1024;
pub const M: usize = MIB;
