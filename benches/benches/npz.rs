//! npz read and write benchmarks: tensorfmt and ndarray-npy side by side.
//!
//! `cargo bench -p tensorfmt-benches --bench npz`

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, SamplingMode, Throughput};
use tensorfmt::Compression;
use tensorfmt_benches::{f32_bytes, nd, remove_if_exists, size_label, sync_all, tf};

mod common;
use common::{config, size, tempdir, KIB, M};

/// Four f32 tensors of `each` bytes.
fn tensors(each: usize) -> Vec<(String, Vec<u8>)> {
    (0..4)
        .map(|i| (format!("a{i}"), f32_bytes(each, 10 + i as u64)))
        .collect()
}

/// Cases: stored (np.savez) 4 x 64 MiB, deflate (np.savez_compressed) 4 x 8 MiB.
fn cases() -> Vec<(&'static str, Compression, usize)> {
    vec![
        ("stored", Compression::Stored, size(64 * M, 256 * KIB)),
        ("deflate", Compression::Deflate, size(8 * M, 64 * KIB)),
    ]
}

/// Writes: removed output and `sync(2)` before each run, untimed. The tensorfmt `Saver`
/// fsyncs (temp file + fsync + rename); `writer_no_fsync` and ndarray-npy's `NpzWriter`
/// do not (its `_fsync` variant adds one).
fn write(c: &mut Criterion) {
    let dir = tempdir();
    for (kind, compression, each) in cases() {
        let ts = tensors(each);
        let arrays = nd::arrays(&ts);
        let deflate = compression == Compression::Deflate;
        let out = dir.path().join("out.npz");
        let prep = || {
            remove_if_exists(&out).unwrap();
            sync_all();
        };
        let mut g = c.benchmark_group(format!("npz_write_{kind}_4x{}", size_label(each)));
        g.sampling_mode(SamplingMode::Flat);
        g.throughput(Throughput::Bytes(4 * each as u64));
        g.bench_function("tensorfmt/save_atomic_fsync", |b| {
            b.iter_batched(
                prep,
                |()| tf::save(&out, "npz", &ts, Some(compression)).unwrap(),
                BatchSize::PerIteration,
            )
        });
        g.bench_function("tensorfmt/writer_no_fsync", |b| {
            b.iter_batched(
                prep,
                |()| tf::save_no_fsync(&out, "npz", &ts, Some(compression)).unwrap(),
                BatchSize::PerIteration,
            )
        });
        g.bench_function("ndarray-npy/NpzWriter_fsync", |b| {
            b.iter_batched(
                prep,
                |()| nd::write_npz(&out, &arrays, deflate, true).unwrap(),
                BatchSize::PerIteration,
            )
        });
        g.bench_function("ndarray-npy/NpzWriter", |b| {
            b.iter_batched(
                prep,
                |()| nd::write_npz(&out, &arrays, deflate, false).unwrap(),
                BatchSize::PerIteration,
            )
        });
        g.finish();
    }
}

/// Reads of all four tensors from a file in the page cache: owned copies (decompressed
/// for deflate), and for stored members zero-copy views. Dropping is not timed.
fn read(c: &mut Criterion) {
    let dir = tempdir();
    for (kind, compression, each) in cases() {
        let path = dir.path().join(format!("in_{kind}.npz"));
        tf::save(&path, "npz", &tensors(each), Some(compression)).unwrap();
        let mut g = c.benchmark_group(format!("npz_read_{kind}_4x{}", size_label(each)));
        g.sampling_mode(SamplingMode::Flat);
        g.throughput(Throughput::Bytes(4 * each as u64));
        g.bench_function("tensorfmt/open+load_owned", |b| {
            b.iter_with_large_drop(|| tf::read_owned(&path).unwrap())
        });
        g.bench_function("ndarray-npy/NpzReader", |b| {
            b.iter_with_large_drop(|| nd::read_npz(&path).unwrap())
        });
        if compression == Compression::Stored {
            g.bench_function("tensorfmt/open+load_view", |b| {
                b.iter_with_large_drop(|| tf::read_view(&path).unwrap())
            });
            g.bench_function("tensorfmt/open+load_view_skip_checksums", |b| {
                b.iter_with_large_drop(|| tf::read_view_unchecked(&path).unwrap())
            });
        }
        g.finish();
    }
}

criterion_group! {
    name = benches;
    config = config();
    targets = write, read
}
criterion_main!(benches);
