//! Views, comparisons and conversions that stream: the checkpoints of
//! `tests/fixtures/hostile/views/` hold views (`expand`, `as_strided`) of a 6-element
//! storage whose size in C order is terabytes to exabytes: `inspect --sha256`, `verify`,
//! `convert` and `diff` must refuse each by the limit on expanded views, never allocate
//! its logical size. The files of `tests/fixtures/views/` are legitimate files of the same
//! shapes, 64 MiB in C order from a few bytes of storage or a few KB of deflate: they are
//! hashed, compared and converted by streaming, the largest allocation bounded by a
//! buffer (this test crate counts allocations), with the digests torch and NumPy give.
//! Both folders are made by `tests/fixtures/hostile/make_views.py`.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use tensorfmt::runtime::hash::HashSink;
use tensorfmt::TensorFile;
use tensorfmt_tests::{alloc, assert_generator_writes, cli, corpus_files, fixtures, python};

#[global_allocator]
static GLOBAL: alloc::Counting = alloc::Counting;

/// The largest single allocation streaming may make: the writers' and readers' copy
/// buffers (4 MiB) and a little more; every tensor here is 64 MiB or more in C order.
const STREAM_BOUND: usize = (4 << 20) + (1 << 20);

fn hostile() -> PathBuf {
    fixtures().join("hostile/views")
}

fn views() -> PathBuf {
    fixtures().join("views")
}

fn manifest(dir: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(dir.join("manifest.json")).expect("manifest.json");
    serde_json::from_str::<serde_json::Value>(&text)
        .expect("manifest.json is JSON")
        .as_array()
        .expect("a list")
        .clone()
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

#[test]
fn generator_writes_the_committed_corpora() {
    let made = tempfile::tempdir().unwrap();
    let (h, v) = (made.path().join("hostile"), made.path().join("views"));
    let mut generator = Command::new(python());
    generator
        .arg(fixtures().join("hostile/make_views.py"))
        .arg(&h)
        .arg(&v);
    assert_generator_writes(generator, &h, &hostile(), &[]);
    let files = corpus_files(&v, &[]);
    assert_eq!(files, corpus_files(&views(), &[]));
    for f in files.iter().map(String::as_str).chain(["manifest.json"]) {
        assert!(
            std::fs::read(v.join(f)).unwrap() == std::fs::read(views().join(f)).unwrap(),
            "{f} differs from what make_views.py writes"
        );
    }
}

#[test]
fn views_beyond_the_limit_are_refused_by_every_command() {
    let cases = manifest(&hostile());
    assert_eq!(cases.len(), corpus_files(&hostile(), &[]).len());
    let out = tempfile::tempdir().unwrap();
    for case in cases {
        let name = case["file"].as_str().unwrap();
        let path = hostile().join(name);
        let p = s(&path);
        let (result, largest) = alloc::armed(|| {
            let file = TensorFile::open(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
            // The index keeps the view as torch describes it.
            let w = file.tensor("w").expect("tensor w");
            assert!(w.strides.contains(&0), "{name}: strides {:?}", w.strides);
            let mut sink = HashSink::default();
            file.read_all(&mut sink).map(|_| ())
        });
        let e = result.expect_err(name).to_string();
        assert!(
            e.contains(case["error"].as_str().unwrap())
                && e.contains(name)
                && e.contains("'w'")
                && e.contains("--max-view-bytes"),
            "{name}: {e}"
        );
        assert!(
            largest < 1 << 20,
            "{name}: an allocation of {largest} bytes"
        );
        let target = out.path().join("out.safetensors");
        for args in [
            vec!["inspect", "--sha256", p],
            vec!["verify", p],
            vec!["convert", p, s(&target)],
            vec!["convert", "--dtype", "f64", p, s(&target)],
            vec!["convert", p, s(&out.path().join("out.npz"))],
        ] {
            let ((code, _), largest) = alloc::armed(|| cli(&args));
            assert_eq!(code, ExitCode::from(1), "{args:?}");
            assert!(
                largest < STREAM_BOUND,
                "{args:?}: an allocation of {largest} bytes"
            );
        }
        let ((code, _), _) = alloc::armed(|| cli(&["diff", p, p]));
        assert_eq!(code, ExitCode::from(2), "diff {name}");
        assert!(!target.exists());
    }
}

/// `inspect --json --sha256` of `path`, with the largest allocation made.
fn digests(path: &Path, extra: &[&str]) -> (ExitCode, serde_json::Value, usize) {
    let args = [&["inspect", "--json", "--sha256"], extra, &[s(path)]].concat();
    let ((code, out), largest) = alloc::armed(|| cli(&args));
    let v = if code == ExitCode::SUCCESS {
        tensorfmt_tests::json(&out)
    } else {
        serde_json::Value::Null
    };
    (code, v, largest)
}

fn check_digests(entry: &serde_json::Value, got: &serde_json::Value, what: &str) {
    for (name, want) in entry["tensors"].as_object().unwrap() {
        let t = got["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name.as_str())
            .unwrap_or_else(|| panic!("{what}: no tensor {name}"));
        assert_eq!(t["shape"], want["shape"], "{what}: {name}");
        assert_eq!(t["sha256"], want["sha256"], "{what}: {name}");
    }
}

#[test]
fn expanded_views_hash_and_convert_in_bounded_memory() {
    let out = tempfile::tempdir().unwrap();
    for entry in manifest(&views()) {
        let name = entry["file"].as_str().unwrap();
        if entry["tensors"].as_object().unwrap().is_empty() {
            continue;
        }
        let path = views().join(name);
        let (code, got, largest) = digests(&path, &[]);
        assert_eq!(code, ExitCode::SUCCESS, "{name}");
        check_digests(&entry, &got, name);
        assert!(
            largest < STREAM_BOUND,
            "{name}: hashing allocated {largest} bytes"
        );
        for (to, extra) in [("safetensors", &[][..]), ("npz", &["--compress"][..])] {
            let target = out.path().join(format!("out.{to}"));
            let args = [&["convert", s(&path), s(&target)], extra].concat();
            let ((code, _), largest) = alloc::armed(|| cli(&args));
            assert_eq!(code, ExitCode::SUCCESS, "{args:?}");
            assert!(
                largest < STREAM_BOUND,
                "{args:?}: allocated {largest} bytes"
            );
            let (code, written, _) = digests(&target, &[]);
            assert_eq!(code, ExitCode::SUCCESS, "{args:?}");
            check_digests(&entry, &written, &format!("{args:?}"));
        }
    }
    // The limit is the caller's: below these views' size they are refused.
    let path = views().join("expand_64m.pt");
    let (code, _, _) = digests(&path, &["--max-view-bytes", "1000000"]);
    assert_eq!(code, ExitCode::from(1));
    let (code, _) = cli(&["verify", "--max-view-bytes", "1000000", s(&path)]);
    assert_eq!(code, ExitCode::from(1));
}

#[test]
fn diff_streams_deflated_tensors_in_their_own_type() {
    let (zeros, ones) = (
        views().join("deflated_zeros.npz"),
        views().join("deflated_ones.npz"),
    );
    let ((code, out), largest) = alloc::armed(|| cli(&["diff", s(&zeros), s(&ones)]));
    assert_eq!(code, ExitCode::from(1), "{out}");
    assert!(
        out.contains("x: 16777216 of 16777216 elements differ (max abs difference 1)"),
        "{out}"
    );
    assert!(largest < STREAM_BOUND, "diff allocated {largest} bytes");
    let ((code, out), largest) = alloc::armed(|| cli(&["diff", s(&zeros), s(&zeros)]));
    assert_eq!(code, ExitCode::SUCCESS, "{out}");
    assert!(out.contains("same: 1 tensors"), "{out}");
    assert!(largest < STREAM_BOUND, "diff allocated {largest} bytes");
    let ((code, out), _) = alloc::armed(|| cli(&["diff", "--atol", "1", s(&zeros), s(&ones)]));
    assert_eq!(code, ExitCode::SUCCESS, "{out}");
    // A view against the dense tensor of the same elements.
    let dir = tempfile::tempdir().unwrap();
    let dense = dir.path().join("dense.npz");
    tensorfmt_tests::convert(&views().join("expand_64m.pt"), &dense, &[]);
    let (code, out) = cli(&["diff", s(&views().join("expand_64m.pt")), s(&dense)]);
    assert_eq!(code, ExitCode::SUCCESS, "{out}");
}

#[test]
fn diff_explains_a_dtype_mismatch() {
    let dir = tempfile::tempdir().unwrap();
    let ones = views().join("deflated_ones.npz");
    let half = dir.path().join("half.npz");
    tensorfmt_tests::convert(&ones, &half, &["--dtype", "f16"]);
    let (code, out) = cli(&["diff", s(&ones), s(&half)]);
    assert_eq!(code, ExitCode::from(1), "{out}");
    assert!(
        out.contains("x: dtype f32 vs f16; the values agree"),
        "{out}"
    );
    let zeros = views().join("deflated_zeros.npz");
    let (code, out) = cli(&["diff", "--atol", "0.5", s(&zeros), s(&half)]);
    assert_eq!(code, ExitCode::from(1), "{out}");
    assert!(
        out.contains("x: dtype f32 vs f16, and 16777216 of 16777216 elements differ (max abs difference 1) within --atol 0.5 --rtol 0"),
        "{out}"
    );
}

/// Tensors whose paths flatten to one name (`{"a.b": x, "a": {"b": y}}`, keys `0` and
/// `"0"`) are told apart, the later one named with `#2` (README.md, *Tensor names and
/// digests*): both are listed, a file is the same as itself, and each differs from a file
/// holding other names by the names only one of them has.
#[test]
fn tensors_whose_paths_flatten_to_one_name_are_told_apart() {
    for (file, names) in [
        ("collide_dotted.pt", ["a.b", "a.b#2"]),
        ("collide_int_key.pt", ["0", "0#2"]),
    ] {
        let path = views().join(file);
        let listed: Vec<String> = tensorfmt_tests::inspect_json(&path)["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(listed, names, "{file}");
        let (code, out) = cli(&["diff", s(&path), s(&path)]);
        assert_eq!(code, ExitCode::SUCCESS, "{file}: {out}");
        let other = views().join("no_collision.pt");
        for (a, b) in [(&path, &other), (&other, &path)] {
            let (code, out) = cli(&["diff", s(a), s(b)]);
            assert_eq!(code, ExitCode::from(1), "{file}: {out}");
            assert!(
                out.contains(&format!("only in {}: {}", path.display(), names[1])),
                "{file}: {out}"
            );
            assert!(!out.contains("same"), "{file}: {out}");
        }
    }
}

#[test]
fn diff_errors_exit_2() {
    let missing = views().join("no such file.npz");
    let zeros = views().join("deflated_zeros.npz");
    let (code, _) = cli(&["diff", s(&zeros), s(&missing)]);
    assert_eq!(code, ExitCode::from(2));
    let (code, _) = cli(&["inspect", s(&missing)]);
    assert_eq!(code, ExitCode::from(1));
}
