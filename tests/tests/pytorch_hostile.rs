//! The hostile PyTorch corpus: every file of `tests/fixtures/pytorch/hostile/` (written by
//! its `make_hostile.py` from the torch-made fixtures) is a malicious or damaged checkpoint
//! — code-execution globals, forged tensor metadata, memo and nesting bombs, forged and
//! truncated zip structures, decompression bombs, damaged legacy and TorchScript files.
//! Opening each one and reading every tensor, however the file is given (a path with its
//! format named or detected, a buffer, a stream) and through `tensorfmt verify`, must fail
//! with the error `manifest.json` expects, naming the file: never a panic, a hang, or an
//! allocation out of proportion to the file's size.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use tensorfmt::runtime::hash::HashSink;
use tensorfmt::runtime::sink::OwnedSink;
use tensorfmt::{OpenOptions, Sink, Source, TensorFile};
use tensorfmt_tests::{alloc, assert_generator_writes, cli, corpus_files, fixtures};

#[global_allocator]
static GLOBAL: alloc::Counting = alloc::Counting;

/// The most one allocation may take while reading a file of `size` bytes, unless the
/// manifest says otherwise: the zip engine's 64 KiB buffers, plus a small multiple of the
/// file's size (a pickle machine's stack and values take a few dozen bytes per opcode:
/// 20,000 one-byte `EMPTY_LIST`s are a stack of 20,000 entries). Whatever a file
/// *declares* (sizes, counts, lengths) must not count.
fn bound(size: usize) -> usize {
    64 * size + (1 << 16) + (1 << 12)
}

/// Wall-clock time one file may take (all five ways of reading it), generous for debug
/// builds on a slow machine: a hang or a quadratic blow-up takes far longer.
const TIME_LIMIT: Duration = Duration::from_secs(60);

fn dir() -> PathBuf {
    fixtures().join("pytorch/hostile")
}

/// One entry of `manifest.json`.
struct Case {
    file: String,
    format: String,
    what: String,
    error: String,
    /// A larger allocation bound than [`bound`], for a case that needs one.
    max_alloc: Option<usize>,
}

fn manifest() -> Vec<Case> {
    let text = std::fs::read_to_string(dir().join("manifest.json")).expect("manifest.json");
    let v: serde_json::Value = serde_json::from_str(&text).expect("manifest.json is JSON");
    let field = |e: &serde_json::Value, k: &str| -> String {
        e[k].as_str()
            .unwrap_or_else(|| panic!("manifest entry without a string '{k}': {e}"))
            .to_string()
    };
    v.as_array()
        .expect("manifest.json is a list")
        .iter()
        .map(|e| Case {
            file: field(e, "file"),
            format: field(e, "format"),
            what: field(e, "what"),
            error: field(e, "error"),
            max_alloc: e.get("max_alloc").map(|v| {
                v.as_u64()
                    .and_then(|n| usize::try_from(n).ok())
                    .unwrap_or_else(|| panic!("max_alloc is not a size: {e}"))
            }),
        })
        .collect()
}

/// Indexes `source` and reads every tensor into `sink`; the error text, or a note that
/// the file was accepted.
fn read_source(
    source: tensorfmt::Result<Source>,
    options: &OpenOptions,
    sink: &mut dyn Sink,
) -> Result<String, String> {
    let result = source
        .and_then(|s| TensorFile::from_source(s, options))
        .and_then(|f| f.read_all(sink).map(|()| f.tensors().len()));
    match result {
        Ok(n) => Err(format!("accepted ({n} tensors)")),
        Err(e) => Ok(e.to_string()),
    }
}

/// Everything wrong with how `case` is handled, as lines (empty when all is well).
fn check(case: &Case) -> Vec<String> {
    let path = dir().join(&case.file);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let size = bytes.len();
    let limit = case.max_alloc.unwrap_or(bound(size));
    let shown = path.display().to_string();
    // Under `--weights-only`: a global outside the allowlist is refused, as the
    // manifest expects; read by default, it is an inert object (checked below).
    let mut strict = OpenOptions::default();
    strict.limits.weights_only = true;
    let named = OpenOptions {
        format: Some(case.format.clone()),
        ..strict.clone()
    };
    let mut problems = Vec::new();
    let name = case.file.as_str();
    let mut expect =
        |how: &str, (got, largest): (Result<String, String>, usize), needs: &[&str]| {
            let msg = match got {
                Ok(msg) => msg,
                Err(accepted) => {
                    problems.push(format!("{how}: {accepted}"));
                    return;
                }
            };
            // The expected text must not be found in the file's name alone.
            let body = msg.replace(&shown, "");
            for n in needs {
                let found = if *n == name {
                    msg.contains(n)
                } else {
                    body.contains(n)
                };
                if !found {
                    problems.push(format!("{how}: the error lacks {n:?}: {msg}"));
                }
            }
            if largest > limit {
                problems.push(format!(
                    "{how}: one allocation of {largest} bytes for a {size}-byte file ({msg})"
                ));
            }
        };
    let start = Instant::now();
    expect(
        "path, format named",
        alloc::armed(|| read_source(Source::open(&path), &named, &mut OwnedSink::default())),
        &[&case.error, name],
    );
    // Detection may find no format in a damaged archive (then says so), or another
    // format that claims the file: either way it fails, naming the file.
    expect(
        "path, format detected",
        alloc::armed(|| read_source(Source::open(&path), &strict, &mut HashSink::default())),
        &[name],
    );
    expect(
        "buffer",
        alloc::armed(|| {
            read_source(
                Ok(Source::from_bytes(bytes.clone())),
                &named,
                &mut HashSink::default(),
            )
        }),
        &[&case.error],
    );
    expect(
        "stream",
        alloc::armed(|| {
            read_source(
                Source::from_reader(std::io::Cursor::new(bytes.clone())),
                &named,
                &mut OwnedSink::default(),
            )
        }),
        &[&case.error],
    );
    let (code, out) = cli(&[
        "verify",
        "--weights-only",
        path.to_str().expect("utf-8 path"),
    ]);
    if code == ExitCode::SUCCESS {
        problems.push(format!("verify exits 0: {out}"));
    }
    // Read inertly by default: refused or read, in the same bounds, never run.
    let default = OpenOptions {
        format: Some(case.format.clone()),
        ..Default::default()
    };
    let (got, largest) =
        alloc::armed(|| read_source(Source::open(&path), &default, &mut HashSink::default()));
    if largest > limit {
        problems.push(format!(
            "read inertly: one allocation of {largest} bytes ({got:?})"
        ));
    }
    let took = start.elapsed();
    if took > TIME_LIMIT {
        problems.push(format!("took {took:?}"));
    }
    problems
        .into_iter()
        .map(|p| format!("{name} ({}): {p}", case.what))
        .collect()
}

#[test]
fn every_hostile_file_is_refused_with_its_error() {
    let cases = manifest();
    assert!(cases.len() >= 100, "only {} cases", cases.len());
    let start = Instant::now();
    let failures: Vec<String> = cases.iter().flat_map(check).collect();
    assert!(
        failures.is_empty(),
        "{} problems:\n{}",
        failures.len(),
        failures.join("\n")
    );
    eprintln!(
        "{} hostile checkpoints refused, five ways each, in {:?}",
        cases.len(),
        start.elapsed()
    );
}

/// The generator kept beside the corpus files.
const GENERATOR: &str = "make_hostile.py";

#[test]
fn manifest_lists_exactly_the_files_of_the_folder() {
    let cases = manifest();
    let listed: BTreeSet<String> = cases.iter().map(|c| c.file.clone()).collect();
    assert_eq!(listed.len(), cases.len(), "a file is listed twice");
    let present = corpus_files(&dir(), &[GENERATOR]);
    let unlisted: Vec<_> = present.difference(&listed).collect();
    let missing: Vec<_> = listed.difference(&present).collect();
    assert!(
        unlisted.is_empty(),
        "files not in manifest.json: {unlisted:?}"
    );
    assert!(missing.is_empty(), "listed but absent: {missing:?}");
    let total: u64 = present
        .iter()
        .map(|f| std::fs::metadata(dir().join(f)).unwrap().len())
        .sum();
    assert!(total < 1 << 19, "the corpus takes {total} bytes");
    let formats: BTreeSet<&str> = cases.iter().map(|c| c.format.as_str()).collect();
    for f in &formats {
        assert!(
            tensorfmt::format_named(f).is_some(),
            "manifest names an unknown format {f}"
        );
    }
    for c in &cases {
        assert!(
            !c.error.is_empty() && !c.what.is_empty(),
            "{}: empty text",
            c.file
        );
    }
}

#[test]
fn committed_corpus_is_what_the_generator_writes() {
    let python = std::env::var("TENSORFMT_BASE_PYTHON").unwrap_or_else(|_| "python3".into());
    let tmp = tempfile::tempdir().unwrap();
    let mut generator = std::process::Command::new(python);
    generator
        .arg(dir().join(GENERATOR))
        .arg("--out")
        .arg(tmp.path());
    assert_generator_writes(generator, tmp.path(), &dir(), &[GENERATOR]);
}
