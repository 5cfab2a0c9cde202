//! This crate's formats through the high-level API and the command line, as a user's
//! program uses them: registered beside the built-in formats, opened and detected, saved,
//! converted to and from built-in formats, and run through `cli::run_with` and the crate's
//! own binary.

use std::path::Path;

use tensorfmt::{
    convert, ByteOrder, ConvertOptions, DType, OpenOptions, Order, Registry, Saver, TensorFile,
    TensorMeta,
};
use tensorfmt_user_crate::registry;

fn meta(name: &str, dtype: DType, shape: &[u64]) -> TensorMeta {
    TensorMeta {
        name: name.into(),
        dtype,
        shape: shape.to_vec(),
        order: Order::C,
        byte_order: ByteOrder::Little,
    }
}

/// Two tensors: their metadata and bytes.
fn two() -> Vec<(TensorMeta, Vec<u8>)> {
    let w: Vec<u8> = (0..6).flat_map(|i| (i as f32).to_le_bytes()).collect();
    let b: Vec<u8> = [7i64, -1].iter().flat_map(|i| i.to_le_bytes()).collect();
    vec![
        (meta("layer.w", DType::F32, &[2, 3]), w),
        (meta("layer.b", DType::I64, &[2]), b),
    ]
}

fn opts() -> OpenOptions {
    OpenOptions {
        registry: registry(),
        ..Default::default()
    }
}

/// Saves `tensors` to `path` in the format of its extension, among the registry's.
fn save(path: &Path, tensors: &[(TensorMeta, Vec<u8>)]) {
    let mut saver = Saver::create_in(&registry(), path, None, &Default::default()).unwrap();
    for (m, b) in tensors {
        saver.add_bytes(m, b).unwrap();
    }
    saver.commit().unwrap();
}

/// One tensor as read: name, dtype, shape and bytes.
type Read = (String, DType, Vec<u64>, Vec<u8>);

/// The format of `path` and every tensor of it.
fn read(path: &Path) -> (String, Vec<Read>) {
    let file = TensorFile::open_with(path, &opts()).unwrap();
    let tensors = file
        .tensors()
        .iter()
        .map(|t| {
            let data = file.load_info(t).unwrap().data.as_bytes().to_vec();
            (t.name.clone(), t.dtype, t.shape.clone(), data)
        })
        .collect();
    (file.format().to_string(), tensors)
}

/// `tensors` as [`read`] gives them back.
fn expected(tensors: &[(TensorMeta, Vec<u8>)]) -> Vec<Read> {
    tensors
        .iter()
        .map(|(m, b)| (m.name.clone(), m.dtype, m.shape.clone(), b.clone()))
        .collect()
}

#[test]
fn the_registry_holds_the_built_in_formats_and_the_crates_own() {
    let names = registry().names();
    for n in ["npy", "npz", "tta", "npyzip"] {
        assert!(names.contains(&n), "{names:?}");
    }
    assert_eq!(registry().for_path(Path::new("x.TTA")).unwrap().name, "tta");
    // An unknown name says which formats there are.
    let e = registry().require("nosuch").unwrap_err().to_string();
    assert!(e.contains("unknown format 'nosuch'"), "{e}");
    assert!(
        e.contains("tta") && e.contains("npyzip") && e.contains("npy"),
        "{e}"
    );
}

#[test]
fn a_format_compiled_by_the_build_script_is_saved_opened_and_detected() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a.tta");
    save(&p, &two());
    let bytes = std::fs::read(&p).unwrap();
    assert_eq!(&bytes[..8], b"TTA1\x02\0\0\0");
    // The data section starts on a multiple of 64.
    assert_eq!((bytes.len() - 24 - 16) % 64, 0);
    assert_eq!(read(&p), ("tta".to_string(), expected(&two())));

    // Detected by content under another name; unknown to the built-in formats alone.
    let other = dir.path().join("a.bin");
    std::fs::copy(&p, &other).unwrap();
    assert_eq!(read(&other).0, "tta");
    let e = TensorFile::open(&other).unwrap_err().to_string();
    assert!(e.contains("not a file of any known tensor format"), "{e}");
    // Named, on open and on save.
    let named = OpenOptions {
        format: Some("tta".into()),
        ..opts()
    };
    assert_eq!(
        TensorFile::open_with(&other, &named).unwrap().format(),
        "tta"
    );
    let e = Saver::create(dir.path().join("b.tta"), Some("tta"), &Default::default())
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("unknown format 'tta'"), "{e}");
    let unknown = OpenOptions {
        format: Some("ttb".into()),
        ..opts()
    };
    let e = TensorFile::open_with(&other, &unknown)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("unknown format 'ttb'") && e.contains("tta"),
        "{e}"
    );
}

#[test]
fn a_derived_format_built_on_npy_is_saved_and_opened() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a.npyzip");
    save(&p, &two());
    let bytes = std::fs::read(&p).unwrap();
    assert_eq!(&bytes[..2], b"PK");
    let text = String::from_utf8_lossy(&bytes);
    assert!(text.contains("arrays/layer.w.npy"), "{text}");
    assert_eq!(read(&p), ("npyzip".to_string(), expected(&two())));
}

#[test]
fn the_crates_formats_convert_to_and_from_built_in_ones() {
    let dir = tempfile::tempdir().unwrap();
    let d = |n: &str| dir.path().join(n);
    save(&d("a.tta"), &two());
    let options = ConvertOptions {
        open: opts(),
        ..Default::default()
    };
    // tta → npz → npyzip → tta, and one tensor to npy and back.
    let chain = [
        ("a.tta", "b.npz", "npz"),
        ("b.npz", "c.npyzip", "npyzip"),
        ("c.npyzip", "d.tta", "tta"),
    ];
    for (from, to, format) in chain {
        let s = convert(d(from), d(to), &options, |_, _| {}).unwrap();
        assert_eq!((s.to, s.tensors), (format, 2));
        assert_eq!(read(&d(to)), (format.to_string(), expected(&two())), "{to}");
    }
    let one = &two()[..1];
    save(&d("one.tta"), one);
    convert(d("one.tta"), d("one.npy"), &options, |_, _| {}).unwrap();
    let npy = TensorFile::open(d("one.npy")).unwrap();
    assert_eq!(npy.tensors()[0].shape, vec![2, 3]);
    convert(d("one.npy"), d("back.tta"), &options, |_, _| {}).unwrap();
    let (_, back) = read(&d("back.tta"));
    assert_eq!(back[0].3, one[0].1);
    // `to` by name, from the registry.
    let named = ConvertOptions {
        to: Some("tta".into()),
        ..options.clone()
    };
    convert(d("b.npz"), d("e.out"), &named, |_, _| {}).unwrap();
    assert_eq!(read(&d("e.out")), ("tta".to_string(), expected(&two())));
}

/// Runs the command line over the crate's registry: exit code and what it printed.
fn cli(args: &[&str]) -> (bool, String) {
    let mut out = Vec::new();
    let args = std::iter::once("tensorfmt-user-crate")
        .chain(args.iter().copied())
        .map(std::ffi::OsString::from);
    let code = tensorfmt::cli::run_with(&registry(), args, &mut out);
    (
        code == std::process::ExitCode::SUCCESS,
        String::from_utf8(out).unwrap(),
    )
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn the_command_line_inspects_converts_verifies_and_diffs_the_crates_formats() {
    let dir = tempfile::tempdir().unwrap();
    let (tta, npz, zip) = (
        dir.path().join("a.tta"),
        dir.path().join("b.npz"),
        dir.path().join("c.npyzip"),
    );
    save(&tta, &two());
    let (ok, out) = cli(&["inspect", "--json", "--sha256", s(&tta)]);
    assert!(ok, "{out}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["format"], "tta");
    assert_eq!(v["tensors"][0]["name"], "layer.w");
    assert_eq!(v["tensors"][0]["dtype"], "f32");
    assert_eq!(v["tensors"][1]["shape"], serde_json::json!([2]));
    assert_eq!(v["tensors"][0]["sha256"].as_str().unwrap().len(), 64);

    for (from, to) in [(&tta, &npz), (&npz, &zip)] {
        let (ok, out) = cli(&["convert", s(from), s(to)]);
        assert!(ok, "{out}");
    }
    let (ok, out) = cli(&["inspect", s(&zip)]);
    assert!(ok, "{out}");
    assert!(out.contains("npyzip (2 tensors)"), "{out}");
    let (ok, out) = cli(&["verify", s(&zip)]);
    assert!(ok && out.starts_with("ok:"), "{out}");
    let (ok, out) = cli(&["diff", s(&tta), s(&zip)]);
    assert!(ok && out.contains("same: 2 tensors"), "{out}");
    let (ok, out) = cli(&["formats"]);
    assert!(ok, "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("tta") && l.ends_with(".tta")),
        "{out}"
    );
    assert!(out.lines().any(|l| l.starts_with("npy ")), "{out}");
    // The built-in command line does not know them.
    let mut sink = Vec::new();
    let code = tensorfmt::cli::run(
        ["tensorfmt", "inspect", s(&tta)].map(std::ffi::OsString::from),
        &mut sink,
    );
    assert_ne!(code, std::process::ExitCode::SUCCESS);
}

#[test]
fn the_crates_binary_is_the_whole_command_line_over_its_formats() {
    let dir = tempfile::tempdir().unwrap();
    let tta = dir.path().join("a.tta");
    save(&tta, &two());
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tensorfmt-user-crate"))
        .args(["inspect", s(&tta)])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("tta (2 tensors)"), "{text}");
    assert!(text.contains("layer.b"), "{text}");
}

#[test]
fn a_registry_without_the_built_in_formats_knows_only_what_is_added() {
    let only = Registry::empty().with_all(tensorfmt_user_crate::generated::REGISTRY);
    assert_eq!(only.names(), vec!["tta"]);
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a.npy");
    tensorfmt::save(
        &p,
        None,
        [(two()[0].0.clone(), &two()[0].1[..])],
        &Default::default(),
    )
    .unwrap();
    let options = OpenOptions {
        registry: only,
        ..Default::default()
    };
    assert!(TensorFile::open_with(&p, &options).is_err());
}
