//! The hostile pickle corpus, written by `tests/fixtures/hostile/make_pickle.py`: pickles
//! that decode differently from how their frames say, persistent ids torch refuses,
//! storage sizes (`numel`) torch would read past the member with,
//! `SETITEM(S)`/`APPEND(S)`/`BUILD` on types they do not apply to, several globals
//! outside the allowlist at once (`tests/fixtures/hostile/pickle/`, each refused naming
//! the file, the member, the byte offset and the opcode); and "billion laughs" whose
//! values, shared through the memo, expand to a billion nodes
//! (`tests/fixtures/pickle/value_bombs/`): listed in bounded memory, their values not
//! shown.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use tensorfmt::runtime::hash::HashSink;
use tensorfmt::TensorFile;
use tensorfmt_tests::{cli, corpus_files, fixtures, peak_rss};

/// Each refused file and what its error says (after the file and member names).
const REFUSED: &[(&str, &str)] = &[
    ("append_on_dict.pt", "entry 'archive/data.pkl', byte 4: pickle decoding failed: APPEND on dict: it applies to a list only"),
    ("appends_on_set.pt", "byte 5: pickle decoding failed: APPENDS on set: it applies to a list only"),
    ("billion_laughs_tensor_paths.pt", "limit exceeded: memory for tensor names"),
    ("build_on_list.pt", "byte 4: pickle decoding failed: BUILD on list: it applies to an object"),
    ("build_on_str.pt", "byte 9: pickle decoding failed: BUILD on str: it applies to an object"),
    ("frame_inside_frame.pt", "byte 13: pickle decoding failed: a FRAME begins 2 bytes before the end of the current frame (at offset 24)"),
    ("frame_line_straddles.pt", "byte 11: pickle decoding failed: the opcode crosses the end of its FRAME at offset 14"),
    ("frame_opcode_straddles.pt", "byte 11: pickle decoding failed: the opcode crosses the end of its FRAME at offset 16"),
    ("frame_past_end.pt", "byte 2: pickle decoding failed: frame of 1000 bytes is longer than the 2 bytes that remain"),
    ("frame_stop_before_end.pt", "byte 12: pickle decoding failed: STOP 1 bytes before the end of its FRAME (at offset 14)"),
    ("globals_many.pt", "byte 3: pickle decoding failed: 4 globals are not allowed: 'os.system' (offset 3), 'builtins.eval' (offset 23), 'builtins.exec' (offset 46), 'builtins.getattr' (offset 88)"),
    ("legacy_view_past_storage.pt", "field 'v': size mismatch: storage \"1000\": its persistent id declares a view of bytes 32..52 of a storage of 40 bytes"),
    ("persistent_four_items.pt", "byte 92: pickle decoding failed: a persistent id has 4 items, not the 5 of (tag, class, key, location, numel)"),
    ("persistent_numel_2e62.pt", "entry 'archive/data.pkl', field 'w': size mismatch: storage \"0\": its persistent id declares a numel of 4611686018427387904 elements, beyond any file"),
    ("persistent_numel_negative.pt", "entry 'archive/data.pkl', field 'w': size mismatch: storage \"0\": its persistent id declares a negative numel (-5)"),
    ("persistent_numel_one.pt", "entry 'archive/data/0', field 'w': size mismatch: tensor 'w' of dtype f32, shape [6] and strides [1] addresses 24 bytes from its offset, the storage holds 4"),
    ("persistent_numel_past_member.pt", "entry 'archive/data/0', field 'w': size mismatch: storage \"0\": its persistent id declares 400 bytes (numel), its data holds 24"),
    ("persistent_numel_zero.pt", "entry 'archive/data/0', field 'w': size mismatch: storage \"0\": its persistent id declares 0 bytes (numel), its data holds 24"),
    ("persistent_not_a_tuple.pt", "byte 50: pickle decoding failed: a persistent id is a str, not a tuple (tag, class, key, location, numel)"),
    ("persistent_six_items.pt", "byte 95: pickle decoding failed: a persistent id has 6 items, not the 5 of"),
    ("persistent_tag_module.pt", "byte 93: pickle decoding failed: a persistent id's tag is 'module', not 'storage'"),
    ("persistent_text_persid.pt", "byte 44: pickle decoding failed: a text persistent id (PERSID) where a tuple is expected"),
    ("setitem_on_list.pt", "byte 10: pickle decoding failed: SETITEM on list: it applies to a dict only"),
    ("setitem_on_tensor.pt", "byte 132: pickle decoding failed: SETITEM on object of 'torch._utils._rebuild_tensor_v2': it applies to a dict only"),
    ("setitems_on_tuple.pt", "byte 11: pickle decoding failed: SETITEMS on tuple: it applies to a dict only"),
];

/// The value bombs and the number of tensors each lists.
/// Refused so only under `--weights-only` (globals outside the allowlist); read by
/// default, each global an inert object that is never called.
const WEIGHTS_ONLY: &[&str] = &["globals_many.pt"];

const BOMBS: &[(&str, usize)] = &[
    ("billion_laughs.pkl", 0),
    ("billion_laughs_dict.pt", 0),
    ("billion_laughs_list.pt", 0),
];

const GENERATOR: &str = "make_pickle.py";

fn refused_dir() -> PathBuf {
    fixtures().join("hostile/pickle")
}

fn bombs_dir() -> PathBuf {
    fixtures().join("pickle/value_bombs")
}

/// Opening `path` (its format detected), showing its values and hashing every tensor:
/// the first error.
fn open_error(path: &Path, weights_only: bool) -> Option<String> {
    let mut options = tensorfmt::OpenOptions::default();
    options.limits.weights_only = weights_only;
    let f = match TensorFile::open_with(path, &options) {
        Ok(f) => f,
        Err(e) => return Some(e.to_string()),
    };
    f.read_all(&mut HashSink::new())
        .err()
        .map(|e| e.to_string())
}

#[test]
fn every_hostile_pickle_is_refused_naming_the_file_offset_and_opcode() {
    let listed: BTreeSet<String> = REFUSED.iter().map(|(f, _)| f.to_string()).collect();
    assert_eq!(
        corpus_files(&refused_dir(), &[]),
        listed,
        "the table lists every file"
    );
    let mut problems = Vec::new();
    for (file, want) in REFUSED {
        let path = refused_dir().join(file);
        let p = path.to_str().expect("utf-8 path");
        let strict = WEIGHTS_ONLY.contains(file);
        match open_error(&path, strict) {
            Some(e) if e.contains(p) && e.contains(want) => {}
            other => problems.push(format!("{file}: {other:?}, expected {want:?}")),
        }
        if let (true, Some(e)) = (strict, open_error(&path, false)) {
            problems.push(format!("{file}: refused without --weights-only: {e}"));
        }
        let flags: &[&str] = if strict { &["--weights-only"] } else { &[] };
        let (code, _) = cli(&[&["inspect", "--sha256", p], flags].concat());
        if code != ExitCode::from(1) {
            problems.push(format!("{file}: inspect --sha256 exits {code:?}, not 1"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Held by the tests that expand billion laughs in this process, so that one's trees do
/// not count in the other's peak RSS.
static EXPANDING: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn billion_laughs_values_are_refused_before_the_memory_is_spent() {
    let _alone = EXPANDING.lock().unwrap_or_else(|e| e.into_inner());
    let listed: BTreeSet<String> = BOMBS.iter().map(|(f, _)| f.to_string()).collect();
    assert_eq!(
        corpus_files(&bombs_dir(), &[]),
        listed,
        "the table lists every file"
    );
    for (file, tensors) in BOMBS {
        let path = bombs_dir().join(file);
        let before = peak_rss();
        let f = TensorFile::open(&path).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(f.tensors().len(), *tensors, "{file}");
        let e = f
            .structure()
            .expect_err("a billion nodes of values are not built");
        let text = e.to_string();
        assert!(
            text.contains("limit exceeded: object tree memory"),
            "{file}: {text}"
        );
        let (code, out) = cli(&["inspect", "--sha256", path.to_str().unwrap()]);
        assert_eq!(code, ExitCode::SUCCESS, "{file}: {out}");
        assert!(out.contains("values: not shown"), "{file}: {out}");
        // Before the budget, the tree of the first 2^26 nodes took 4.1 GiB (5.1 GiB for
        // the dict). Now the limit fires at 128 MiB of tree, charged before allocating.
        if let (Some(before), Some(after)) = (before, peak_rss()) {
            let grown = after.saturating_sub(before);
            assert!(
                after < 512 << 20 && grown < 256 << 20,
                "{file}: peak RSS grew by {} MiB to {} MiB",
                grown >> 20,
                after >> 20
            );
        }
    }
}

#[test]
fn the_budget_for_expanding_a_pickle_is_a_limit_the_caller_sets() {
    let _alone = EXPANDING.lock().unwrap_or_else(|e| e.into_inner());
    for (file, _) in BOMBS {
        let path = bombs_dir().join(file);
        let len = std::fs::metadata(&path).unwrap().len();
        // The default: 128 MiB and a byte per byte of the pickle (at most the file).
        let e = TensorFile::open(&path).unwrap().structure().unwrap_err();
        let text = e.to_string();
        assert!(text.contains("(--max-tree-bytes)"), "{file}: {text}");
        let limit: u64 = text
            .split("the limit is ")
            .nth(1)
            .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{file}: {text}"));
        assert!(
            (128 << 20..=(128 << 20) + len).contains(&limit),
            "{file}: {text}"
        );
        // Set lower, it fires there, and at once.
        let options = tensorfmt::OpenOptions {
            limits: tensorfmt::Limits {
                max_tree_bytes: Some(1 << 16),
                ..Default::default()
            },
            ..Default::default()
        };
        let e = TensorFile::open_with(&path, &options)
            .and_then(|f| f.structure())
            .unwrap_err();
        let text = e.to_string();
        assert!(text.contains("the limit is 65536"), "{file}: {text}");
        let (code, out) = cli(&[
            "inspect",
            "--max-tree-bytes",
            "65536",
            path.to_str().unwrap(),
        ]);
        assert_eq!(code, ExitCode::SUCCESS, "{file}: {out}");
        assert!(out.contains("values: not shown"), "{file}: {out}");
    }
}

#[test]
fn the_generator_writes_the_committed_corpus() {
    let tmp = tempfile::tempdir().unwrap();
    let (refused, bombs) = (tmp.path().join("refused"), tmp.path().join("bombs"));
    let python = std::env::var("TENSORFMT_BASE_PYTHON").unwrap_or_else(|_| "python3".into());
    let out = Command::new(python)
        .arg(fixtures().join("hostile").join(GENERATOR))
        .arg(&refused)
        .arg(&bombs)
        .output()
        .expect("running make_pickle.py");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for (made, committed) in [(refused, refused_dir()), (bombs, bombs_dir())] {
        let files = corpus_files(&made, &[]);
        assert_eq!(
            files,
            corpus_files(&committed, &[]),
            "the generator writes other files"
        );
        for f in &files {
            assert!(
                std::fs::read(made.join(f)).unwrap() == std::fs::read(committed.join(f)).unwrap(),
                "{f} differs from what {GENERATOR} writes: run it again"
            );
        }
    }
}
