//! Work that grows with the number of entries, at 50k, 100k and 200k: each group's
//! throughput (entries per second) stays flat when the time is linear in n (n log n
//! where sorting dominates), and falls by half at each doubling where it is quadratic.
//!
//! - `diff_tensors`: `tensorfmt diff A B` of two safetensors files of n tensors of 32
//!   elements (every name looked up in the other file, every pair compared).
//! - `dcp_planner_nested`: a DCP `.metadata` whose `planner_data` nests n tensors each
//!   under a first key of its own, opened and its state dict rebuilt
//!   (`TensorFile::structure`).
//! - `dcp_chunk_tiling`: a DCP `.metadata` of one tensor tiled by n chunks along its
//!   second dimension, listed shuffled, opened (every chunk checked against the tensor,
//!   and the chunks checked to tile it exactly).
//!
//! `cargo bench -p tensorfmt-benches --bench scaling`

use std::ffi::OsString;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use tensorfmt::{Limits, OpenOptions, TensorFile};
use tensorfmt_benches::scaling;

mod common;
use common::{config, full, tempdir};

/// The entry counts: 50k, 100k and 200k under `cargo bench`, small ones as a test.
fn counts() -> Vec<usize> {
    if full() {
        vec![50_000, 100_000, 200_000]
    } else {
        vec![1_000, 2_000]
    }
}

/// The metadata's limits raised: 200k chunks make some 600 MB of pickled objects, and
/// 200k empty tensors take 40 bytes of metadata each, past the default budgets for
/// files of their size, which the benches are not about.
fn options() -> OpenOptions {
    OpenOptions {
        limits: Limits {
            max_tree_bytes: Some(8 << 30),
            max_tensor_bytes: Some(8 << 30),
            ..Limits::default()
        },
        ..OpenOptions::default()
    }
}

fn diff(c: &mut Criterion) {
    let dir = tempdir();
    let mut g = c.benchmark_group("diff_tensors");
    for n in counts() {
        let (a, b) = (
            dir.path().join(format!("a{n}.safetensors")),
            dir.path().join(format!("b{n}.safetensors")),
        );
        scaling::safetensors(&a, n, -1.0).unwrap();
        scaling::safetensors(&b, n, -2.0).unwrap();
        let args: Vec<OsString> = vec!["tensorfmt".into(), "diff".into(), a.into(), b.into()];
        g.throughput(Throughput::Elements(n as u64));
        g.bench_with_input(BenchmarkId::from_parameter(n), &args, |bench, args| {
            bench.iter(|| {
                let mut out = Vec::new();
                tensorfmt::cli::run(args.clone(), &mut out);
                // One pair differs: the last.
                assert!(out.starts_with(format!("layer{}.w: ", n - 1).as_bytes()));
            })
        });
    }
    g.finish();
}

fn dcp_nested(c: &mut Criterion) {
    let dir = tempdir();
    let mut g = c.benchmark_group("dcp_planner_nested");
    for n in counts() {
        let folder = dir.path().join(format!("nested{n}"));
        scaling::dcp_nested(&folder, n).unwrap();
        g.throughput(Throughput::Elements(n as u64));
        g.bench_with_input(BenchmarkId::from_parameter(n), &folder, |bench, folder| {
            bench.iter(|| {
                let file = TensorFile::open_with(folder, &options()).unwrap();
                let tree = file.structure().unwrap().unwrap();
                assert_eq!(file.tensors().len(), n);
                tree
            })
        });
    }
    g.finish();
}

fn dcp_chunks(c: &mut Criterion) {
    let dir = tempdir();
    let mut g = c.benchmark_group("dcp_chunk_tiling");
    for n in counts() {
        let folder = dir.path().join(format!("chunks{n}"));
        scaling::dcp_chunks(&folder, n).unwrap();
        g.throughput(Throughput::Elements(n as u64));
        g.bench_with_input(BenchmarkId::from_parameter(n), &folder, |bench, folder| {
            bench.iter(|| {
                let file = TensorFile::open_with(folder, &options()).unwrap();
                assert_eq!(file.tensors()[0].shape, [2, n as u64]);
                file
            })
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = config();
    targets = diff, dcp_nested, dcp_chunks
}
criterion_main!(benches);
