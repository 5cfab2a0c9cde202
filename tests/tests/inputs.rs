//! Inputs, detection and terminal output: inputs that must be regular files (a FIFO
//! refused without blocking), a file truncated while it is read, npy headers as
//! `numpy.load` reads them, an ONNX graph given twice, names printed escaped, and
//! detection that reads a bounded prefix and, when it recognises nothing, says what each
//! format of the file's extension found wrong. The hostile files are
//! `tests/fixtures/hostile/inputs/`, made by `tests/fixtures/hostile/make_inputs.py`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::mpsc;
use std::time::Duration;

use tensorfmt::runtime::hash::HashSink;
use tensorfmt::{Limits, OpenOptions, Registry, Source, TensorFile};
use tensorfmt_tests::{alloc, cli, fixtures, json, python_snippet, safetensors_bytes};

#[global_allocator]
static GLOBAL: alloc::Counting = alloc::Counting;

fn hostile(name: &str) -> PathBuf {
    fixtures().join("hostile").join("inputs").join(name)
}

fn path_str(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// The error of opening `path` (detected, or as `format`) and reading every tensor.
fn open_err(path: &Path, format: Option<&str>) -> String {
    let r = (|| {
        let options = OpenOptions {
            format: format.map(Into::into),
            ..Default::default()
        };
        let f = TensorFile::open_with(path, &options)?;
        f.read_all(&mut HashSink::new())?;
        Ok::<_, tensorfmt::Error>(f.tensors().len())
    })();
    match r {
        Ok(n) => panic!("{} was accepted ({n} tensors)", path.display()),
        Err(e) => e.to_string(),
    }
}

/// Runs the command line on a thread; fails, rather than hangs, past 20 seconds.
fn cli_within(args: Vec<String>) -> (ExitCode, String) {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let _ = tx.send(cli(&args));
    });
    rx.recv_timeout(Duration::from_secs(20))
        .unwrap_or_else(|_| panic!("the command blocked"))
}

#[cfg(unix)]
fn mkfifo(p: &Path) {
    let c = std::ffi::CString::new(path_str(p)).unwrap();
    // SAFETY: a NUL-terminated path that outlives the call.
    assert_eq!(unsafe { libc_mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
}

#[cfg(unix)]
extern "C" {
    #[link_name = "mkfifo"]
    fn libc_mkfifo(path: *const std::ffi::c_char, mode: u32) -> i32;
}

/// An ONNX model whose external data file is a FIFO with no writer: every command that
/// reads it refuses it at once, naming the file, instead of blocking on the open.
#[cfg(unix)]
#[test]
fn external_data_that_is_a_fifo_is_refused_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("external_single.onnx");
    std::fs::copy(fixtures().join("onnx").join("external_single.onnx"), &model).unwrap();
    mkfifo(&dir.path().join("external_single.data"));
    let m = path_str(&model).to_string();
    let out = path_str(&dir.path().join("out.onnx")).to_string();
    for args in [
        vec!["inspect", "--sha256", &m],
        vec!["verify", &m],
        vec!["convert", &m, &out],
        vec!["diff", &m, &m],
    ] {
        let (code, _) = cli_within(args.iter().map(|s| s.to_string()).collect());
        // `diff` says an error with 2 (1 is "they differ").
        let error = if args[0] == "diff" { 2 } else { 1 };
        assert_eq!(code, ExitCode::from(error), "{args:?}");
    }
    let e = open_err(&model, None);
    assert!(
        e.contains("external_single.data") && e.contains("not a regular file"),
        "{e}"
    );
    // The input itself a FIFO.
    let fifo = dir.path().join("pipe.npy");
    mkfifo(&fifo);
    let e = open_err(&fifo, None);
    assert!(e.contains("not a regular file"), "{e}");
    // A database folder whose data file is a FIFO.
    let db = dir.path().join("weights.lmdb");
    std::fs::create_dir(&db).unwrap();
    for entry in std::fs::read_dir(fixtures().join("caffe2").join("weights.lmdb")).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), db.join(entry.file_name())).unwrap();
    }
    std::fs::remove_file(db.join("data.mdb")).unwrap();
    mkfifo(&db.join("data.mdb"));
    let (code, _) = cli_within(vec![
        "inspect".into(),
        "--sha256".into(),
        path_str(&db).into(),
    ]);
    assert_eq!(code, ExitCode::from(1));
    let e = open_err(&db, None);
    assert!(
        e.contains("'data.mdb' is not a regular file") && e.contains("weights.lmdb"),
        "{e}"
    );
}

/// An npy of `n` f32 elements, C order, version 1 header.
fn npy_of(n: usize) -> Vec<u8> {
    let mut h = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({n},), }}");
    while (10 + h.len() + 1) % 64 != 0 {
        h.push(' ');
    }
    h.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(h.len() as u16).to_le_bytes());
    out.extend_from_slice(h.as_bytes());
    out.resize(out.len() + 4 * n, 0x3f);
    out
}

/// A file truncated after it was opened and before its tensor is read: the read ends
/// with an error saying the file changed, not with `SIGBUS` (which ends the process).
#[test]
fn a_file_truncated_while_it_is_read_is_an_error_not_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("big.npy");
    std::fs::write(&p, npy_of(4 << 20)).unwrap();
    let file = TensorFile::open(&p).unwrap();
    let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
    f.set_len(4096).unwrap();
    let e = file.read_all(&mut HashSink::new()).unwrap_err().to_string();
    assert!(e.contains("changed while it was read"), "{e}");
    assert!(e.contains("big.npy"), "{e}");
    let e = file.load("big").unwrap_err().to_string();
    assert!(e.contains("changed while it was read"), "{e}");
    // A file left as it was reads as before.
    let q = dir.path().join("kept.npy");
    std::fs::write(&q, npy_of(1 << 10)).unwrap();
    TensorFile::open(&q)
        .unwrap()
        .read_all(&mut HashSink::new())
        .unwrap();
}

/// `numpy.load`'s verdict on `path`: `ok` or the exception's text.
fn numpy_load(path: &Path, max_header_size: Option<u64>) -> String {
    let (ok, out) = python_snippet(
        "import sys, numpy as np\n\
         kw = {} if sys.argv[2] == '-' else {'max_header_size': int(sys.argv[2])}\n\
         try:\n    np.load(sys.argv[1], **kw)\n    print('ok')\n\
         except Exception as e:\n    print(type(e).__name__, e)",
        &[
            path_str(path),
            &max_header_size.map_or("-".to_string(), |n| n.to_string()),
        ],
    );
    assert!(ok, "{out}");
    out.trim().to_string()
}

/// npy headers NumPy refuses are refused, each with its reason: a header over NumPy's
/// 10,000 characters (read when the limit is raised, as NumPy reads it given a larger
/// `max_header_size`), a key besides descr, fortran_order and shape, a list shape, a
/// fortran_order that is not a bool.
#[test]
fn npy_headers_are_read_as_numpy_reads_them() {
    let big = hostile("npy_header_over_numpy_limit.npy");
    let e = open_err(&big, None);
    assert!(
        e.contains("npy_header_over_numpy_limit.npy")
            && e.contains("max_header_size")
            && e.contains("--max-header-size")
            && e.contains("10000"),
        "{e}"
    );
    assert!(numpy_load(&big, None).contains("max_header_size"));
    assert_eq!(numpy_load(&big, Some(20000)), "ok");
    let (code, out) = cli(&["inspect", "--max-header-size", "20000", path_str(&big)]);
    assert_eq!(code, ExitCode::SUCCESS);
    assert!(out.contains("[2]"), "{out}");
    for (name, want) in [
        ("npy_extra_key.npy", "'evil'"),
        ("npy_non_text_key.npy", "the key 1,"),
        ("npy_list_shape.npy", "expected a tuple, found a list"),
        ("npy_fortran_order_int.npy", "expected a bool"),
    ] {
        let p = hostile(name);
        let e = open_err(&p, None);
        assert!(e.contains(want) && e.contains(name), "{name}: {e}");
        assert_ne!(numpy_load(&p, None), "ok", "{name}: numpy accepts it");
    }
}

/// ONNX `graph` given twice: protobuf merges the two (onnx.load lists the initializers of
/// both); reading one would list other tensors than onnx does, so it is refused.
#[test]
fn an_onnx_graph_given_twice_is_refused_as_protobuf_would_merge_it() {
    let p = hostile("onnx_graph_twice.onnx");
    let (ok, out) = python_snippet(
        "import sys, onnx\n\
         m = onnx.load(sys.argv[1])\n\
         print(m.graph.name, sorted(t.name for t in m.graph.initializer))",
        &[path_str(&p)],
    );
    assert!(ok, "{out}");
    assert_eq!(out.trim(), "second ['a', 'b']", "onnx merges the graphs");
    let e = open_err(&p, None);
    assert!(
        e.contains("onnx_graph_twice.onnx") && e.contains("`ModelProto.graph` appears twice"),
        "{e}"
    );
}

/// Names holding escapes and newlines print escaped: the listing has one line per
/// tensor and no escape reaches the terminal; `--json` keeps the exact names.
#[test]
fn names_read_from_a_file_are_printed_escaped() {
    let dir = tempfile::tempdir().unwrap();
    let evil = "a\x1b[2J\nforged  f32  [9]\r\u{202e}";
    let header = format!(
        "{{\"{}\":{{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}}}",
        evil.replace('\x1b', "\\u001b")
            .replace('\n', "\\n")
            .replace('\r', "\\r")
    );
    let p = dir.path().join("names.safetensors");
    std::fs::write(&p, safetensors_bytes(header.as_bytes(), &[0; 4])).unwrap();
    let (code, out) = cli(&["inspect", "--sha256", path_str(&p)]);
    assert_eq!(code, ExitCode::SUCCESS);
    assert_eq!(out.lines().count(), 4, "{out}");
    assert!(!out.contains('\x1b') && !out.contains('\r') && !out.contains('\u{202e}'));
    assert!(
        out.contains("a\\x1b[2J\\nforged  f32  [9]\\r\\u{202e}"),
        "{out}"
    );
    let (code, out) = cli(&["inspect", "--json", path_str(&p)]);
    assert_eq!(code, ExitCode::SUCCESS);
    assert_eq!(json(&out)["tensors"][0]["name"], evil);
    let (code, out) = cli(&["diff", path_str(&p), path_str(&p)]);
    assert_eq!(code, ExitCode::SUCCESS, "{out}");
    // An error quoting the name escapes it too.
    let e = tensorfmt::runtime::Error::from(tensorfmt::ErrorKind::Invalid("x".into()))
        .in_entry(evil)
        .to_string();
    assert!(!e.contains('\x1b') && !e.contains('\n'), "{e}");
}

/// Detection reads a bounded prefix and copies nothing of a large file: a file whose first
/// bytes declare a 50 MB MiniDB key is refused without allocating the key.
#[test]
fn detection_reads_a_bounded_prefix_and_copies_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("big.bin");
    let mut head = (50_000_000u32).to_le_bytes().to_vec();
    head.extend_from_slice(&16u32.to_le_bytes());
    std::fs::write(&p, &head).unwrap();
    let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
    f.set_len(64 << 20).unwrap();
    let src = Source::open(&p).unwrap();
    let (found, largest) = alloc::armed(|| {
        Registry::builtin()
            .candidates(&src, &Limits::default())
            .len()
    });
    assert_eq!(found, 0);
    assert!(largest < 1 << 20, "detection allocated {largest} bytes");
    // Real MiniDB files are still recognised.
    for name in ["dataset.minidb", "spec_example.minidb"] {
        let p = fixtures().join("caffe2").join(name);
        let src = Source::open(&p).unwrap();
        let hits = Registry::builtin().candidates(&src, &Limits::default());
        assert_eq!(
            hits.first().map(|f| f.name),
            Some("caffe2-minidb"),
            "{name}"
        );
    }
}

/// Damaged files of a known extension get their format's precise error (entry, offset,
/// reason), and every hostile file is refused by `inspect --sha256`.
#[test]
fn damaged_files_get_their_formats_error() {
    for (name, want) in [
        (
            "minidb_key_len_max.minidb",
            "as caffe2-minidb: entry 'record 0', field 'key'",
        ),
        ("minidb_value_past_end.minidb", "field 'value'"),
        ("pt_truncated.pt", "as pytorch: byte 0"),
        ("pt_bad_central_directory.pt", "central directory offset"),
        ("pt_bzip2_data_pkl.pt", "'archive/data.pkl'"),
        ("npz_truncated.npz", "as npz: byte 0"),
        ("onnx_truncated.onnx", "as onnx: field"),
    ] {
        let e = open_err(&hostile(name), None);
        assert!(e.contains(want) && e.contains(name), "{name}: {e}");
    }
    let dir = fixtures().join("hostile").join("inputs");
    for entry in std::fs::read_dir(&dir).unwrap() {
        let p = entry.unwrap().path();
        let (code, _) = cli(&["inspect", "--sha256", path_str(&p)]);
        assert_eq!(code, ExitCode::from(1), "{}", p.display());
    }
}

/// `--format` on every command forces the format; unrecognised bytes name the formats
/// tried.
#[test]
fn format_is_forced_on_every_command_and_unknown_bytes_name_the_candidates() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("array.data");
    std::fs::write(&p, npy_of(3)).unwrap();
    let a = path_str(&p);
    let out = dir.path().join("out.safetensors");
    let o = path_str(&out);
    for args in [
        vec!["inspect", "--format", "npy", a],
        vec!["verify", "--format", "npy", a],
        vec!["convert", "--format", "npy", a, o],
        vec!["diff", "--format", "npy", a, a],
    ] {
        let (code, text) = cli(&args);
        assert_eq!(code, ExitCode::SUCCESS, "{args:?}: {text}");
    }
    let (code, _) = cli(&["inspect", "--format", "npz", a]);
    assert_eq!(code, ExitCode::from(1));
    let e = open_err(&p, Some("npz"));
    assert!(e.contains("not a zip archive"), "{e}");
    let q = dir.path().join("nothing.qq");
    std::fs::write(&q, b"abc").unwrap();
    let e = open_err(&q, None);
    assert!(
        e.contains("not a file of any known tensor format")
            && e.contains("npy, npz")
            && e.contains("--format"),
        "{e}"
    );
}
