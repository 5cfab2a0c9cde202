//! What a user of the command line reads: errors in the user's words (the format, the
//! tensor, the dtype, the CLI option), never the schema's internal names (its tables'
//! names such as `c2_dtype`, its rules), and a conversion's summary naming the values it
//! leaves out. The command line runs as a child process, so its standard error is read
//! as a user sees it.

use std::path::Path;
use std::process::Command;

use tensorfmt_tests::fixtures;

/// Runs the command line with `args`; returns (exit code, stderr).
fn tensorfmt(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tensorfmt-cli"))
        .args(args)
        .output()
        .expect("running the command line");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// The backquoted words of the schemas that once reached users.
const SCHEMA_WORDS: &[&str] = &[
    "`c2_dtype`",
    "`st_dtype`",
    "`descr`",
    "`write` rule",
    "key_of",
];

fn assert_users_words(e: &str) {
    for w in SCHEMA_WORDS {
        assert!(!e.contains(w), "a schema's name {w} reaches the user: {e}");
    }
}

/// A dtype a format cannot store is refused naming the format (or, for a database,
/// the file), the tensor and the dtype, and listing the dtypes the format stores.
#[test]
fn a_dtype_the_output_cannot_store_is_named_with_the_ones_it_can() {
    let tmp = tempfile::tempdir().unwrap();
    let input = fixtures().join("pytorch/all_dtypes.pt");
    for (out, tensor, expect) in [
        (
            "x.minidb",
            "'u32'",
            "cannot store u32 tensors; its dtypes are f16, f32, f64, i8, i16, i32, i64, u8, \
             u16, bool, string",
        ),
        (
            "x.safetensors",
            "'c128'",
            "safetensors cannot store c128 tensors; its dtypes are f16, bf16, f32, f64",
        ),
        (
            "x.npz",
            "'bf16.npy'",
            "npy cannot store bf16 tensors; its dtypes are f16, f32, f64, i8",
        ),
        (
            "x.pkl",
            "'bf16'",
            "pickle cannot store bf16 tensors (little-endian byte order)",
        ),
    ] {
        let out = tmp.path().join(out);
        let (code, e) = tensorfmt(&["convert", s(&input), s(&out)]);
        assert_eq!(code, 1, "{e}");
        assert!(e.contains(s(&out)), "the output is named: {e}");
        assert!(e.contains(tensor), "the tensor is named: {e}");
        assert!(e.contains(expect), "expected '{expect}' in: {e}");
        assert_users_words(&e);
    }
}

/// A read-only format refused as an output says so without naming the schema's rules.
#[test]
fn writing_a_read_only_format_is_refused_in_the_users_words() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("m.pt");
    let input = fixtures().join("pytorch/torchscript.pt");
    let (code, e) = tensorfmt(&["convert", s(&input), s(&out), "--to", "torchscript"]);
    assert_eq!(code, 1, "{e}");
    assert!(
        e.contains("writing torchscript files is not supported: tensorfmt reads them only"),
        "{e}"
    );
    assert_users_words(&e);
}

/// `--dtype` with a name tensorfmt does not know lists the names it knows.
#[test]
fn an_unknown_dtype_lists_the_known_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let input = fixtures().join("npy/dtype_f32.npy");
    let out = tmp.path().join("x.npz");
    let (code, e) = tensorfmt(&["convert", s(&input), s(&out), "--dtype", "float32"]);
    assert_eq!(code, 1, "{e}");
    let names: Vec<&str> = tensorfmt::DType::ALL.iter().map(|d| d.name()).collect();
    assert!(
        e.contains(&format!(
            "unknown dtype 'float32' for --dtype; the dtypes are {}",
            names.join(", ")
        )),
        "{e}"
    );
    assert!(!out.exists());
}

/// A replacement of another shape is refused naming the option that allows it, as the
/// command line spells it.
#[test]
fn a_reshape_refused_names_the_allow_reshape_option() {
    let tmp = tempfile::tempdir().unwrap();
    let weights = tmp.path().join("w.npz");
    let w1 = tensorfmt_tests::meta("W1", tensorfmt::DType::F32, &[2]);
    tensorfmt::save(&weights, None, [(w1, &[0u8; 8][..])], &Default::default()).unwrap();
    let model = fixtures().join("onnx/mlp.onnx");
    let out = tmp.path().join("out.onnx");
    let (code, e) = tensorfmt(&["replace", s(&model), s(&weights), s(&out)]);
    assert_eq!(code, 1, "{e}");
    assert!(
        e.contains("'W1' is f32 [8, 16] in the model, the replacement f32 [2]")
            && e.contains("--allow-reshape"),
        "{e}"
    );
    assert!(!e.contains("allow_reshape to"), "{e}");
    assert!(!out.exists());
}

/// A checkpoint's values that are not tensors (an epoch counter, the optimizer's
/// hyperparameters) converted to a format of tensors alone are named in the summary, by
/// the library and on the command line; with `--flatten` too, saying why.
#[test]
fn non_tensor_values_dropped_by_a_conversion_are_named() {
    let tmp = tempfile::tempdir().unwrap();
    let input = fixtures().join("pytorch/checkpoint_adam.pt");
    let npz = tmp.path().join("ckpt.npz");
    let summary = tensorfmt::convert(&input, &npz, &Default::default(), |_, _| {}).unwrap();
    assert_eq!(summary.dropped, ["optimizer.param_groups", "epoch"]);
    let (code, e) = tensorfmt(&["convert", s(&input), s(&npz)]);
    assert_eq!(code, 0, "{e}");
    assert!(
        e.contains("note: dropped 2 non-tensor values: optimizer.param_groups, epoch"),
        "{e}"
    );
    // A checkpoint written as a checkpoint keeps them.
    let pt = tmp.path().join("ckpt.pt");
    let summary = tensorfmt::convert(&input, &pt, &Default::default(), |_, _| {}).unwrap();
    assert!(summary.dropped.is_empty(), "{:?}", summary.dropped);
    let (code, e) = tensorfmt(&["convert", s(&input), s(&pt)]);
    assert_eq!(code, 0, "{e}");
    assert!(!e.contains("dropped"), "{e}");
    // Unless asked for the tensors alone.
    let (code, e) = tensorfmt(&["convert", s(&input), s(&pt), "--flatten"]);
    assert_eq!(code, 0, "{e}");
    assert!(
        e.contains("note: dropped 2 non-tensor values (--flatten): optimizer.param_groups, epoch"),
        "{e}"
    );
}

/// An archive's members are named as a user sees them (opened as `pytorch`): a
/// member-name pattern with its captures as `*`, a missing member by its name and the
/// storage it holds, never by the schema's names for its entries and captures.
#[test]
fn archive_members_are_named_without_the_schemas_names() {
    let hostile = fixtures().join("pytorch/hostile");
    for (file, expect) in [
        ("no_data_pkl.pt", "pytorch: no member matches `*/data.pkl`"),
        (
            "two_prefixes.pt",
            "pytorch: several members match `*/data.pkl`",
        ),
        (
            "missing_storage_member.pt",
            "the member archive/data/7, of the storage \"7\" the stored object names, is missing",
        ),
    ] {
        let e = tensorfmt_tests::open_err_as(&hostile.join(file), "pytorch");
        assert!(e.contains(expect), "expected '{expect}' in: {e}");
        for w in ["{prefix}", "`storage`", "`key`"] {
            assert!(!e.contains(w), "a schema's name {w} reaches the user: {e}");
        }
    }
}

/// A dtype code a file holds that its format's table does not know is named with the
/// dtypes the format does know.
#[test]
fn an_unknown_dtype_in_a_file_lists_the_formats_dtypes() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = "{'descr': '<U5', 'fortran_order': False, 'shape': (2,), }".to_string();
    h.push_str(&" ".repeat((64 - (10 + h.len() + 1) % 64) % 64));
    h.push('\n');
    let mut npy = b"\x93NUMPY\x01\x00".to_vec();
    npy.extend_from_slice(&(h.len() as u16).to_le_bytes());
    npy.extend_from_slice(h.as_bytes());
    npy.extend_from_slice(&[0u8; 40]);
    let p = dir.path().join("unicode.npy");
    std::fs::write(&p, npy).unwrap();
    let (code, e) = tensorfmt(&["inspect", s(&p)]);
    assert_eq!(code, 1, "{e}");
    assert!(e.contains(s(&p)), "{e}");
    assert!(
        e.contains(
            "unknown dtype <U5; the format's dtypes are f16, f32, f64, i8, i16, i32, i64, u8, \
             u16, u32, u64, bool, c64, c128"
        ),
        "{e}"
    );
}
