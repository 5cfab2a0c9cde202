//! npy read, write and open benchmarks: tensorfmt and ndarray-npy side by side.
//!
//! `cargo bench -p tensorfmt-benches --bench npy`

use criterion::{
    criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, SamplingMode, Throughput,
};
use tensorfmt_benches::{f32_bytes, free_bytes, nd, remove_if_exists, size_label, sync_all, tf};

mod common;
use common::{config, size, tempdir, KIB, M};

/// Write 256 MiB (one f32 tensor of 64 Mi elements). Each run starts from a removed
/// output and a `sync(2)`, outside the timed region. The tensorfmt `Saver` fsyncs (temp
/// file + fsync + rename); `writer_no_fsync` and `write_npy` do not.
fn write(c: &mut Criterion) {
    let bytes = size(256 * M, M);
    let dir = tempdir();
    let tensors = vec![("x".to_string(), f32_bytes(bytes, 1))];
    let array = nd::array(&tensors[0].1);
    let out = dir.path().join("out.npy");
    let prep = || {
        remove_if_exists(&out).unwrap();
        sync_all();
    };

    let mut g = c.benchmark_group(format!("npy_write_{}", size_label(bytes)));
    g.sampling_mode(SamplingMode::Flat);
    g.throughput(Throughput::Bytes(bytes as u64));
    g.bench_function("tensorfmt/save_atomic_fsync", |b| {
        b.iter_batched(
            prep,
            |()| tf::save(&out, "npy", &tensors, None).unwrap(),
            BatchSize::PerIteration,
        )
    });
    g.bench_function("tensorfmt/writer_no_fsync", |b| {
        b.iter_batched(
            prep,
            |()| tf::save_no_fsync(&out, "npy", &tensors, None).unwrap(),
            BatchSize::PerIteration,
        )
    });
    g.bench_function("ndarray-npy/write_npy_fsync", |b| {
        b.iter_batched(
            prep,
            |()| nd::write_npy(&out, &array, true).unwrap(),
            BatchSize::PerIteration,
        )
    });
    g.bench_function("ndarray-npy/write_npy", |b| {
        b.iter_batched(
            prep,
            |()| nd::write_npy(&out, &array, false).unwrap(),
            BatchSize::PerIteration,
        )
    });
    g.finish();
}

/// Read 256 MiB from a file in the page cache: open + load into owned memory, and open +
/// zero-copy view. Dropping the result is not timed.
fn read(c: &mut Criterion) {
    let bytes = size(256 * M, M);
    let dir = tempdir();
    let path = dir.path().join("in.npy");
    tf::save(
        &path,
        "npy",
        &[("x".to_string(), f32_bytes(bytes, 2))],
        None,
    )
    .unwrap();

    let mut g = c.benchmark_group(format!("npy_read_{}", size_label(bytes)));
    g.sampling_mode(SamplingMode::Flat);
    g.throughput(Throughput::Bytes(bytes as u64));
    g.bench_function("tensorfmt/open+load_owned", |b| {
        b.iter_with_large_drop(|| tf::read_owned(&path).unwrap())
    });
    g.bench_function("ndarray-npy/read_npy", |b| {
        b.iter_with_large_drop(|| nd::read_npy(&path).unwrap())
    });
    g.bench_function("tensorfmt/open+load_view", |b| {
        b.iter_with_large_drop(|| tf::read_view(&path).unwrap())
    });
    g.bench_function("ndarray-npy/mmap+view_npy", |b| {
        b.iter_with_large_drop(|| nd::view_npy(&path).unwrap())
    });
    g.finish();
}

/// Open only (map + detect + index) at 1 MiB .. 1 GiB: must not depend on the size. The
/// files are real (written byte by byte, not sparse); 1 GiB is skipped when the disk has
/// less than 4 GiB free or `TFBENCH_NO_1G` is set.
fn open(c: &mut Criterion) {
    let dir = tempdir();
    let mut sizes = if common::full() {
        vec![M, 64 * M, 256 * M]
    } else {
        vec![64 * KIB, M]
    };
    let room = free_bytes(dir.path()).unwrap_or(0);
    if common::full() && std::env::var_os("TFBENCH_NO_1G").is_none() && room > 4 << 30 {
        sizes.push(1 << 30);
    }
    let files: Vec<_> = sizes
        .iter()
        .map(|&n| {
            let p = dir.path().join(format!("open_{}.npy", size_label(n)));
            tf::write_pattern_npy(&p, n).unwrap();
            (n, p)
        })
        .collect();

    let mut g = c.benchmark_group("npy_open");
    for (n, p) in &files {
        let label = size_label(*n);
        g.bench_with_input(BenchmarkId::new("tensorfmt/open", &label), p, |b, p| {
            b.iter_with_large_drop(|| tf::open(p).unwrap())
        });
        g.bench_with_input(
            BenchmarkId::new("ndarray-npy/mmap+view_npy", &label),
            p,
            |b, p| b.iter_with_large_drop(|| nd::view_npy(p).unwrap()),
        );
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = config();
    targets = write, read, open
}
criterion_main!(benches);
