//! Interop with the real torch of the project's Python environment, on files no test has
//! seen: `tests/py/tfcheck_torch.py make-random` writes checkpoints (zip and legacy, every
//! dtype, views, shared storages, parameters, nested optimizer-like dicts; half of them holding
//! NumPy arrays of every NumPy dtype, big-endian, Fortran-order, 0-d and empty, NumPy
//! scalars and `np.random.get_state()`) and TorchScript archives (scripted and frozen)
//! from a new seed each run (printed; `TENSORFMT_SEED` reproduces one). tensorfmt must
//! read each exactly as torch describes it, and every file tensorfmt converts them to must
//! load with `torch.load(weights_only=True)` (NumPy arrays written as torch tensors) and
//! hold the same tensors and non-tensor values.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use tensorfmt_tests::{
    cli, convert, fixtures, inspect_json, json, run_seed, tensors_by_name, tfcheck_safetensors,
    tfcheck_torch,
};

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// `count` new files from a seed of this run.
fn unseen(dir: &Path, count: usize) -> Vec<PathBuf> {
    let seed = run_seed();
    let made = tfcheck_torch(&["make-random", s(dir), &seed, &count.to_string()]);
    let paths: Vec<PathBuf> = made
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(PathBuf::from)
        .collect();
    assert_eq!(paths.len(), count, "make-random made {} files", paths.len());
    paths
}

/// Torch's descriptions of `files`, one each.
fn describe(files: &[PathBuf]) -> Vec<serde_json::Value> {
    let args: Vec<&str> = files.iter().map(|p| s(p)).collect();
    let out = tfcheck_torch(&[&["describe"], &args[..]].concat());
    let v: Vec<serde_json::Value> = out.lines().map(json).collect();
    assert_eq!(v.len(), files.len());
    v
}

#[test]
fn unseen_torch_files_read_and_convert_as_torch_says() {
    let dir = tempfile::tempdir().unwrap();
    let files = unseen(dir.path(), 36);
    let kinds = |f: &str| files.iter().filter(|p| s(p).contains(f)).count();
    eprintln!(
        "{} files: {} legacy, {} TorchScript, {} with NumPy values",
        files.len(),
        kinds("-legacy-"),
        kinds("-script-"),
        kinds("-numpy-")
    );

    // Read: tensorfmt's `inspect --json --sha256` equals torch's description.
    for (p, expected) in files.iter().zip(describe(&files)) {
        assert_eq!(
            inspect_json(p),
            expected,
            "inspect of unseen file {}",
            p.display()
        );
    }

    // Write: every file converted to `pytorch` (nested structure kept) and flattened.
    let out = tempfile::tempdir().unwrap();
    let mut contents = Vec::new();
    let mut values_only = Vec::new();
    let mut storage = Vec::new();
    let mut written = Vec::new();
    for (i, src) in files.iter().enumerate() {
        let kept = out.path().join(format!("{i}-kept.pt"));
        convert(src, &kept, &[]);
        let flat = out.path().join(format!("{i}-flat.pt"));
        convert(src, &flat, &["--flatten"]);
        let o = cli(&["inspect", "--json", "--sha256", s(&flat)]).1;
        let names: Vec<serde_json::Value> = json(&o)["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].clone())
            .collect();
        let want: Vec<serde_json::Value> = inspect_json(src)["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].clone())
            .collect();
        assert_eq!(names, want, "flattened {}", src.display());
        written.push(flat);
        written.push(kept.clone());
        // A TorchScript module is an object, not a dict: it is written flat.
        if s(src).contains("-script-") {
            values_only.push(src.clone());
            values_only.push(kept);
        } else {
            contents.push(src.clone());
            contents.push(kept);
        }
        // Views of shared storages stay views of one storage with --keep-layout (zip
        // checkpoints: their storages are members of their own).
        if !s(src).contains("-script-") && !s(src).contains("-legacy-") {
            let views = out.path().join(format!("{i}-views.pt"));
            convert(src, &views, &["--keep-layout"]);
            written.push(views.clone());
            storage.push(src.clone());
            storage.push(views);
        }
    }
    // Every written file loads with torch.load(weights_only=True), NumPy values included.
    let args: Vec<&str> = written.iter().map(|p| s(p)).collect();
    tfcheck_torch(&[&["weights-only"], &args[..]].concat());
    // torch.load of each written file: same names, dtypes, shapes, elements, and the same
    // non-tensor values (epoch, param_groups, NumPy scalars as the numbers they are, ...).
    let args: Vec<&str> = contents.iter().map(|p| s(p)).collect();
    tfcheck_torch(&[&["compare", "--contents"], &args[..]].concat());
    if !values_only.is_empty() {
        let args: Vec<&str> = values_only.iter().map(|p| s(p)).collect();
        tfcheck_torch(&[&["compare", "--values-only"], &args[..]].concat());
    }
    // Strides, storage offsets, storage sizes and sharing too.
    if !storage.is_empty() {
        let args: Vec<&str> = storage.iter().map(|p| s(p)).collect();
        tfcheck_torch(&[&["compare", "--storage"], &args[..]].concat());
    }
}

/// A checkpoint holding NumPy arrays converted to safetensors: the `safetensors` package
/// loads every array and torch tensor equal to what torch read.
#[test]
fn numpy_values_convert_to_safetensors_as_torch_reads_them() {
    let src = fixtures().join("pytorch/numpy_values.pt");
    let out = tempfile::tempdir().unwrap();
    let dst = out.path().join("np.safetensors");
    convert(&src, &dst, &[]);
    let torch = &describe(std::slice::from_ref(&src))[0];
    let st = json(&tfcheck_safetensors(&["describe", s(&dst)]));
    assert_eq!(tensors_by_name(&st), tensors_by_name(torch));
}

/// The fixtures with views and shared storages keep them with `--keep-layout`, and each
/// storage is written once.
#[test]
fn keep_layout_writes_shared_storages_once() {
    let dir = fixtures().join("pytorch");
    let out = tempfile::tempdir().unwrap();
    let mut pairs = Vec::new();
    for n in [
        "noncontiguous.pt",
        "shared_storage.pt",
        "all_dtypes.pt",
        "scalars_and_empty.pt",
        "checkpoint_adam.pt",
    ] {
        let dst = out.path().join(n);
        convert(&dir.join(n), &dst, &["--keep-layout"]);
        pairs.push(dir.join(n));
        pairs.push(dst);
    }
    let args: Vec<&str> = pairs.iter().map(|p| s(p)).collect();
    tfcheck_torch(&[&["compare", "--storage"], &args[..]].concat());
    // shared_storage.pt: 10 tensors over 4 storages, so 4 storage members.
    let f = tensorfmt::TensorFile::open(out.path().join("shared_storage.pt")).unwrap();
    let mut members: Vec<String> = f
        .tensors()
        .iter()
        .map(|t| match tensorfmt::runtime::zip::member_of(&t.location) {
            Some((member, _, _)) => member.name.clone(),
            None => panic!("{:?}", t.location),
        })
        .collect();
    members.sort();
    members.dedup();
    assert_eq!(members.len(), 4, "{members:?}");
    // A view's bytes must be given once, and a view must fit its storage.
    let mut saver =
        tensorfmt::Saver::create(out.path().join("v.pt"), None, &Default::default()).unwrap();
    let meta = |name: &str, shape: Vec<u64>| tensorfmt::TensorMeta {
        name: name.into(),
        dtype: tensorfmt::DType::F32,
        shape,
        order: tensorfmt::Order::C,
        byte_order: tensorfmt::ByteOrder::Little,
    };
    let view = |offset, strides| tensorfmt::StorageView {
        storage: 7,
        storage_nbytes: 16,
        offset,
        strides,
    };
    assert!(saver
        .add_view(&meta("a", vec![2]), &view(1, vec![2]), Some(&[0u8; 16]))
        .unwrap());
    let e = saver
        .add_view(&meta("b", vec![3]), &view(2, vec![1]), None)
        .unwrap_err();
    assert!(e.to_string().contains("'b'"), "{e}");
    let e = saver
        .add_view(&meta("c", vec![1]), &view(0, vec![1]), Some(&[0u8; 16]))
        .unwrap_err();
    assert!(e.to_string().contains("given twice"), "{e}");
    assert!(saver
        .add_view(&meta("d", vec![2, 2]), &view(0, vec![1, 0]), None)
        .unwrap());
    saver.commit().unwrap();
}

/// The committed fixtures, converted to `pytorch`, keep everything torch sees.
#[test]
fn converted_fixtures_keep_their_nested_objects() {
    let dir = fixtures().join("pytorch");
    let out = tempfile::tempdir().unwrap();
    let mut contents = Vec::new();
    let mut values_only = Vec::new();
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".pt") || n.ends_with(".pth"))
        .collect();
    names.sort();
    for n in names {
        let src = dir.join(&n);
        let dst = out.path().join(format!("{n}.pt"));
        convert(&src, &dst, &[]);
        let bucket = if n.starts_with("torchscript") {
            &mut values_only
        } else {
            &mut contents
        };
        bucket.push(src);
        bucket.push(dst);
    }
    // Written files load with torch.load(weights_only=True), numpy_values.pt's too.
    let args: Vec<&str> = contents.iter().skip(1).step_by(2).map(|p| s(p)).collect();
    tfcheck_torch(&[&["weights-only"], &args[..]].concat());
    let args: Vec<&str> = contents.iter().map(|p| s(p)).collect();
    tfcheck_torch(&[&["compare", "--contents"], &args[..]].concat());
    let args: Vec<&str> = values_only.iter().map(|p| s(p)).collect();
    tfcheck_torch(&[&["compare", "--values-only"], &args[..]].concat());

    // The values are visible to `inspect` too.
    let (code, text) = cli(&["inspect", s(&dir.join("checkpoint_adam.pt"))]);
    assert_eq!(code, ExitCode::SUCCESS);
    assert!(text.contains("values:\n"), "{text}");
    assert!(text.contains("  epoch = 3\n"), "{text}");
    assert!(text.contains("'betas': (0.9, 0.999)"), "{text}");
    let (_, text) = cli(&[
        "inspect",
        "--json",
        "--values",
        s(&dir.join("checkpoint_adam.pt")),
    ]);
    let v = json(&text);
    let epoch = v["values"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["name"] == "epoch")
        .unwrap();
    assert_eq!(epoch["value"], 3);
    assert_eq!(epoch["repr"], "3");
}
