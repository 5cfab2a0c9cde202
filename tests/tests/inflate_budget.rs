//! The per-file budget of decompressed bytes held in memory: deflated tensors loaded from
//! one file are charged as their buffers grow, so that a file whose members together
//! inflate past the budget is refused before the memory is spent, and dropping a loaded
//! tensor gives its charge back.

use std::path::Path;
use std::process::ExitCode;

use tensorfmt::{ByteOrder, Compression, WriteOptions};
use tensorfmt::{DType, ErrorKind, Limits, OpenOptions, Order, TensorFile, TensorMeta};
use tensorfmt_tests::{alloc, cli};

#[global_allocator]
static GLOBAL: alloc::Counting = alloc::Counting;

/// Bytes of each tensor: 4 MiB of zeros, a few KB deflated.
const TENSOR: usize = 4 << 20;
/// Tensors in the file.
const COUNT: usize = 6;
/// The budget the tests set: two tensors' worth.
const BUDGET: u64 = 2 * TENSOR as u64;

/// An npz of [`COUNT`] deflated tensors of [`TENSOR`] zero bytes each (`t0` ... `t5`).
fn deflated_npz(path: &Path) {
    let zeros = vec![0u8; TENSOR];
    let tensors = (0..COUNT).map(|i| {
        let meta = TensorMeta {
            name: format!("t{i}"),
            dtype: DType::F32,
            shape: vec![(TENSOR / 4) as u64],
            order: Order::C,
            byte_order: ByteOrder::Little,
        };
        (meta, zeros.as_slice())
    });
    let options = WriteOptions {
        compression: Some(Compression::Deflate),
        ..Default::default()
    };
    tensorfmt::save(path, Some("npz"), tensors, &options).unwrap();
    assert!(std::fs::metadata(path).unwrap().len() < (COUNT as u64) << 16);
}

fn open(path: &Path, budget: Option<u64>) -> TensorFile {
    let options = OpenOptions {
        limits: Limits {
            max_inflated_bytes: budget,
            ..Limits::default()
        },
        ..Default::default()
    };
    TensorFile::open_with(path, &options).unwrap()
}

#[test]
fn members_together_past_the_budget_are_refused_before_the_memory_is_spent() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("zeros.npz");
    deflated_npz(&path);

    // Unbounded, loading every tensor holds them all.
    let file = open(&path, Some(u64::MAX));
    let (all, peak) = alloc::peak(|| file.load_all());
    assert_eq!(all.unwrap().len(), COUNT);
    assert!(peak >= COUNT * TENSOR, "held {peak} bytes");

    // Within the budget, the third tensor is refused before its buffer grows past it.
    let file = open(&path, Some(BUDGET));
    let (result, peak) = alloc::peak(|| file.load_all());
    let e = result.unwrap_err();
    assert!(
        matches!(e.kind, ErrorKind::Limit { limit: BUDGET, .. }),
        "{e}"
    );
    let text = e.to_string();
    assert!(
        text.contains("zeros.npz")
            && text.contains("t2")
            && text.contains("decompressed bytes held in memory")
            && text.contains("--max-inflated-bytes"),
        "{text}"
    );
    assert!(
        peak <= BUDGET as usize + (1 << 20),
        "held {peak} bytes with a budget of {BUDGET}"
    );
}

#[test]
fn dropped_tensors_give_their_charge_back() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("zeros.npz");
    deflated_npz(&path);
    let file = open(&path, Some(BUDGET));
    // One at a time, each dropped before the next: any number of loads fit.
    for _ in 0..3 {
        for i in 0..COUNT {
            let t = file.load(&format!("t{i}")).unwrap();
            assert_eq!(t.data.len(), TENSOR);
        }
    }
    let a = file.load("t0").unwrap();
    let b = file.load("t1").unwrap();
    let e = file.load("t2").unwrap_err();
    assert!(matches!(e.kind, ErrorKind::Limit { .. }), "{e}");
    drop(a);
    let c = file.load("t2").unwrap();
    assert_eq!((b.data.len(), c.data.len()), (TENSOR, TENSOR));
}

#[test]
fn the_default_budget_holds_every_tensor_of_a_file_once() {
    // 24 MiB from a few KB: more than 1024 times the file, less than the 256 MiB floor.
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("zeros.npz");
    deflated_npz(&path);
    let all = open(&path, None).load_all().unwrap();
    assert_eq!(all.len(), COUNT);
}

#[test]
fn the_command_line_sets_the_budget() {
    // A Fortran-order tensor is loaded whole to be compared in C order: comparing it
    // charges its input's budget.
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("fortran.npz");
    let meta = TensorMeta {
        name: "f".into(),
        dtype: DType::F32,
        shape: vec![512, 512],
        order: Order::Fortran,
        byte_order: ByteOrder::Little,
    };
    let options = WriteOptions {
        compression: Some(Compression::Deflate),
        ..Default::default()
    };
    let zeros = vec![0u8; 512 * 512 * 4];
    tensorfmt::save(&path, Some("npz"), [(meta, zeros.as_slice())], &options).unwrap();
    let p = path.to_str().unwrap();
    let (code, text) = cli(&["diff", p, p, "--max-inflated-bytes", "1000"]);
    // The error goes to standard error; its words are checked through the library.
    assert_eq!(code, ExitCode::from(2), "{text}");
    let (code, text) = cli(&["diff", p, p]);
    assert_eq!(code, ExitCode::SUCCESS, "{text}");
}
