//! Every hostile corpus through the command line, as a user meets it: each entry (a file
//! or a folder) of every `tests/fixtures/hostile/<area>/` folder and of every other
//! folder named `hostile` under `tests/fixtures` (`pytorch/hostile`, `pickle/hostile`,
//! ...) is given to `tensorfmt inspect --sha256 <entry>` run as a child process, which
//! must exit with code 1, print an error naming the file (its path or its file name),
//! finish within 5 s and peak under 256 MB of resident memory (the child's `ru_maxrss`,
//! from `wait4`). Folders added later are picked up without editing this file. All the
//! failures are collected and reported together. Linux only (`ru_maxrss` in KiB).
#![cfg(target_os = "linux")]

use std::ffi::OsStr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tensorfmt_tests::fixtures;

/// The longest an entry may take.
const WALL_LIMIT: Duration = Duration::from_secs(5);

/// The most resident memory an entry may use, in KiB (`ru_maxrss`'s unit on Linux).
const RSS_LIMIT_KIB: i64 = 256 * 1024;

/// A ceiling on the child's heap (`RLIMIT_DATA`), far above [`RSS_LIMIT_KIB`]: an entry
/// that makes the reader allocate without bound fails fast (and is reported, as an abort)
/// instead of taking the machine's memory. It does not change any verdict.
const DATA_CEILING: u64 = 2 << 30;

/// Names in a corpus folder that describe the corpus and are not entries of it: the
/// manifests and expected-error lists the corpora keep beside their files; generator
/// scripts (`*.py`) and hidden files are not entries either.
const NOT_ENTRIES: &[&str] = &["manifest.json", "expected.txt", "README.md"];

/// Entries that `inspect` legitimately reads, relative to `tests/fixtures`, each with
/// the reason: none today (every corpus was made to be refused).
const SKIP: &[(&str, &str)] = &[
    ("numpy_pickle/hostile/descr_datetime.pkl", VALUE),
    ("numpy_pickle/hostile/object_array.pkl", VALUE),
    ("numpy_pickle/hostile/object_array_bytes.pkl", VALUE),
    ("numpy_pickle/hostile/structured.pkl", VALUE),
];

/// Why an entry of [`SKIP`] is read: a NumPy array of dates, Python objects or records
/// is a value, not a tensor (`tests/tests/numpy_pickle.rs` checks that it reads so).
const VALUE: &str = "read: its array is a value, not a tensor";

/// The folder of `tests/fixtures/hostile` that holds the round-three generator (see
/// [`round3`]), not a corpus of files.
const ROUND3: &str = "round3";

/// The corpus folders: each `hostile/<area>/` folder of `tests/fixtures/hostile`, and
/// every other folder named `hostile` under `tests/fixtures` (not looking inside a
/// corpus for more).
fn corpora() -> Vec<PathBuf> {
    let mut out = Vec::new();
    let shared = fixtures().join("hostile");
    if shared.is_dir() {
        out.extend(
            sorted_children(&shared)
                .into_iter()
                .filter(|p| p.is_dir() && !hidden(p) && !p.ends_with(ROUND3)),
        );
    }
    let mut stack = vec![fixtures()];
    while let Some(dir) = stack.pop() {
        for child in sorted_children(&dir) {
            if !child.is_dir() || child.is_symlink() || child == shared {
                continue;
            }
            if child.file_name() == Some(OsStr::new("hostile")) {
                out.push(child);
            } else {
                stack.push(child);
            }
        }
    }
    out.sort();
    out
}

fn sorted_children(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("a folder entry").path())
        .collect();
    v.sort();
    v
}

fn hidden(p: &Path) -> bool {
    p.file_name()
        .and_then(OsStr::to_str)
        .is_some_and(|n| n.starts_with('.'))
}

/// The entries of a corpus folder.
fn entries(corpus: &Path) -> Vec<PathBuf> {
    sorted_children(corpus)
        .into_iter()
        .filter(|p| {
            let name = p.file_name().and_then(OsStr::to_str).unwrap_or_default();
            !hidden(p) && !NOT_ENTRIES.contains(&name) && !name.ends_with(".py")
        })
        .collect()
}

/// How one run of the command line ended.
struct Run {
    /// `Ok(code)` for an exit, `Err(signal)` for a death by a signal.
    status: Result<i32, i32>,
    stderr: String,
    wall: Duration,
    /// Killed for taking longer than [`WALL_LIMIT`].
    killed: bool,
    max_rss_kib: i64,
}

/// Runs `tensorfmt inspect --sha256 <entry>` as a child (see [`run_cli`]).
fn inspect(entry: &Path, stderr_file: &Path, flags: &[&str]) -> Run {
    let mut args = vec![OsStr::new("inspect"), OsStr::new("--sha256")];
    args.extend(flags.iter().map(OsStr::new));
    args.push(entry.as_os_str());
    run_cli(&args, None, stderr_file, WALL_LIMIT)
}

/// Whether a run under `--weights-only` was refused for a global outside the allowlist
/// (or an opcode that calls one): by default such a pickle is read, its globals inert.
fn refused_for_globals(run: &Run) -> bool {
    run.stderr.contains("is not allowed")
        || run.stderr.contains("are not allowed")
        || run.stderr.contains("under --weights-only")
}

/// Runs the command line with `args` as a child under [`DATA_CEILING`], its stdout to
/// `stdout_file` (or nowhere) and its stderr to `stderr_file`, and waits for it with
/// `wait4`, killing it past `limit`.
fn run_cli(
    args: &[&OsStr],
    stdout_file: Option<&Path>,
    stderr_file: &Path,
    limit: Duration,
) -> Run {
    let err = std::fs::File::create(stderr_file).expect("the stderr file");
    let out = match stdout_file {
        Some(p) => Stdio::from(std::fs::File::create(p).expect("the stdout file")),
        None => Stdio::null(),
    };
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tensorfmt-cli"));
    cmd.args(args).stdin(Stdio::null()).stdout(out).stderr(err);
    // SAFETY: `setrlimit` is async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: DATA_CEILING as libc::rlim_t,
                rlim_max: DATA_CEILING as libc::rlim_t,
            };
            if libc::setrlimit(libc::RLIMIT_DATA, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let start = Instant::now();
    // Reaped by `wait4` below, which `Child::wait` cannot do (it gives no resource usage).
    #[allow(clippy::zombie_processes)]
    let child = cmd.spawn().expect("spawning the command line");
    let pid = child.id() as libc::pid_t;
    let mut killed = false;
    let mut status = 0;
    // SAFETY: a zeroed `rusage` is a valid value of the plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: `status` and `usage` are valid for writes; `pid` is our child, reaped
        // here only (the `Child` is never waited on).
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        if r == pid {
            break;
        }
        assert!(r == 0, "wait4: {}", std::io::Error::last_os_error());
        if !killed && start.elapsed() > limit {
            // SAFETY: signalling our own child, not yet reaped.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            killed = true;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let wall = start.elapsed();
    let status = if libc::WIFEXITED(status) {
        Ok(libc::WEXITSTATUS(status))
    } else {
        Err(libc::WTERMSIG(status))
    };
    let bytes = std::fs::read(stderr_file).expect("reading the child's stderr");
    Run {
        status,
        stderr: String::from_utf8_lossy(&bytes).into_owned(),
        wall,
        killed,
        max_rss_kib: usage.ru_maxrss,
    }
}

/// What is wrong with a run on `entry`, if anything.
fn problems(entry: &Path, run: &Run) -> Vec<String> {
    let mut out = Vec::new();
    match run.status {
        Ok(1) => {}
        Ok(code) => out.push(format!("exit code {code}, not 1")),
        Err(_) if run.killed => {}
        Err(sig) => out.push(format!("killed by signal {sig}")),
    }
    if run.killed || run.wall >= WALL_LIMIT {
        out.push(format!(
            "took {:.1} s (limit {} s{})",
            run.wall.as_secs_f64(),
            WALL_LIMIT.as_secs(),
            if run.killed { ", killed" } else { "" }
        ));
    }
    if run.max_rss_kib >= RSS_LIMIT_KIB {
        out.push(format!(
            "peak RSS {} MB (limit {} MB)",
            run.max_rss_kib / 1024,
            RSS_LIMIT_KIB / 1024
        ));
    }
    let name = entry
        .file_name()
        .and_then(OsStr::to_str)
        .unwrap_or_default();
    let path = entry.to_str().unwrap_or_default();
    if run.status == Ok(1) && !run.stderr.contains(path) && !run.stderr.contains(name) {
        out.push("the error does not name the file".into());
    }
    out
}

fn shorten(s: &str, n: usize) -> String {
    let s = s.trim();
    match s.char_indices().nth(n) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_string(),
    }
}

#[test]
fn every_hostile_entry_is_refused_by_inspect_quickly_and_in_little_memory() {
    let corpora = corpora();
    for known in ["pytorch/hostile", "pickle/hostile", "numpy_pickle/hostile"] {
        assert!(
            corpora.contains(&fixtures().join(known)),
            "the corpus {known} is not found: {corpora:?}"
        );
    }
    let skip: Vec<PathBuf> = SKIP.iter().map(|(p, _)| fixtures().join(p)).collect();
    for (p, (rel, _)) in skip.iter().zip(SKIP) {
        assert!(p.exists(), "the skipped entry {rel} does not exist");
    }
    let scratch = tempfile::tempdir().unwrap();
    let stderr_file = scratch.path().join("stderr");
    let mut failures = Vec::new();
    let mut ran = 0;
    let (mut peak_rss, mut longest) = (0, Duration::ZERO);
    for corpus in &corpora {
        let list = entries(corpus);
        assert!(!list.is_empty(), "{} holds no entry", corpus.display());
        for entry in list.iter().filter(|e| !skip.contains(e)) {
            let run = inspect(entry, &stderr_file, &["--weights-only"]);
            ran += 1;
            peak_rss = peak_rss.max(run.max_rss_kib);
            longest = longest.max(run.wall);
            let mut found = problems(entry, &run);
            if refused_for_globals(&run) {
                // Read by default, inertly: it may read or be refused, within the same
                // bounds, and never by a signal.
                let inert = inspect(entry, &stderr_file, &[]);
                peak_rss = peak_rss.max(inert.max_rss_kib);
                longest = longest.max(inert.wall);
                let read = Run {
                    status: inert.status.map(|c| if c == 0 { 1 } else { c }),
                    ..inert
                };
                found.extend(
                    problems(entry, &read)
                        .into_iter()
                        .filter(|p| !p.starts_with("the error does not name"))
                        .map(|p| format!("read inertly: {p}")),
                );
            }
            if !found.is_empty() {
                let rel = entry.strip_prefix(fixtures()).unwrap_or(entry);
                failures.push(format!(
                    "{}: {} [stderr: {}]",
                    rel.display(),
                    found.join("; "),
                    shorten(&run.stderr, 300)
                ));
            }
        }
    }
    eprintln!(
        "{ran} entries of {} corpora run, {} skipped, {} failing; largest peak RSS {} MB, \
         longest run {:.2} s",
        corpora.len(),
        SKIP.len(),
        failures.len(),
        peak_rss / 1024,
        longest.as_secs_f64()
    );
    assert!(
        failures.is_empty(),
        "{} of {ran} hostile entries were not refused as required:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The round-three cases: files and folders that `tests/fixtures/hostile/round3/make.py`
/// writes at test time (some are tens of MB, made by the real tools), each with its
/// command line and what must hold (see that script). Unlike the corpora above, a case
/// may be read (exit 0) or refused (exit 1), as it says; none may panic, abort or be
/// killed, take longer than its limit (10 s) or peak over its memory (256 MB), or change
/// any file under the folder but the ones it names (inputs, and the user's files in an
/// output folder, stay as they were: same bytes, same inode).
mod round3 {
    use super::*;
    use serde_json::Value;
    use std::collections::BTreeMap;
    use std::hash::Hasher;
    use std::os::unix::fs::MetadataExt;

    /// Files up to this size are compared by content too (larger ones by size, inode
    /// and modification time).
    const HASHED: u64 = 8 << 20;

    /// What a path under the cases' folder is: its kind, size, inode, modification time
    /// and, for a small file, a digest of its bytes; a link's target.
    #[derive(PartialEq, Debug)]
    struct Stamp {
        kind: &'static str,
        len: u64,
        ino: u64,
        mtime_ns: i128,
        digest: u64,
        target: Option<PathBuf>,
    }

    /// `path`'s stamp; a file's digest is taken from `known` (an earlier snapshot) when
    /// its size, inode and modification time are the same there, else computed.
    fn stamp(path: &Path, known: &BTreeMap<PathBuf, Stamp>) -> Stamp {
        let m = std::fs::symlink_metadata(path).expect("a path listed a moment ago");
        let kind = if m.is_symlink() {
            "link"
        } else if m.is_dir() {
            "folder"
        } else if m.is_file() {
            "file"
        } else {
            "other"
        };
        let mut s = Stamp {
            kind,
            len: if m.is_dir() { 0 } else { m.len() },
            ino: m.ino(),
            mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
            digest: 0,
            target: std::fs::read_link(path).ok(),
        };
        if m.is_file() && m.len() <= HASHED {
            s.digest = match known.get(path) {
                Some(k)
                    if (k.kind, k.len, k.ino, k.mtime_ns) == (s.kind, s.len, s.ino, s.mtime_ns) =>
                {
                    k.digest
                }
                _ => {
                    let mut h = std::collections::hash_map::DefaultHasher::new();
                    h.write(&std::fs::read(path).expect("reading a case file"));
                    h.finish()
                }
            };
        }
        s
    }

    /// Every path below `root` (not following links) with its [`Stamp`] (digests reused
    /// from `known` where a file's metadata is unchanged); folders' stamps leave out
    /// their times and inodes, which entries added or removed, and a folder replaced
    /// whole, change.
    fn snapshot(root: &Path, known: &BTreeMap<PathBuf, Stamp>) -> BTreeMap<PathBuf, Stamp> {
        let mut out = BTreeMap::new();
        let mut stack = vec![root.to_path_buf()];
        while let Some(dir) = stack.pop() {
            for child in sorted_children(&dir) {
                let mut s = stamp(&child, known);
                if s.kind == "folder" {
                    s.mtime_ns = 0;
                    s.ino = 0;
                    stack.push(child.clone());
                }
                out.insert(child, s);
            }
        }
        out
    }

    fn strings(case: &Value, key: &str) -> Vec<String> {
        case.get(key)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The differences between two snapshots outside the `allowed` paths.
    fn changes(
        before: &BTreeMap<PathBuf, Stamp>,
        after: &BTreeMap<PathBuf, Stamp>,
        allowed: &[PathBuf],
    ) -> Vec<String> {
        let free = |p: &Path| allowed.iter().any(|a| p.starts_with(a));
        let mut out = Vec::new();
        for (p, s) in before {
            match after.get(p) {
                _ if free(p) => {}
                None => out.push(format!("{} was removed", p.display())),
                Some(t) if t != s => out.push(format!("{} was changed", p.display())),
                Some(_) => {}
            }
        }
        for p in after
            .keys()
            .filter(|p| !before.contains_key(*p) && !free(p))
        {
            out.push(format!("{} was created", p.display()));
        }
        out
    }

    /// What is wrong with one run of `case`.
    fn judge(case: &Value, run: &Run, stdout: &str) -> Vec<String> {
        let mut out = Vec::new();
        let allowed: Vec<i64> = case["exit"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_i64).collect())
            .unwrap_or_default();
        match run.status {
            Ok(code) if allowed.contains(&i64::from(code)) => {}
            Ok(code) => out.push(format!("exit code {code}, not one of {allowed:?}")),
            Err(sig) => out.push(format!(
                "killed by signal {sig}{}",
                if run.killed { " (time limit)" } else { "" }
            )),
        }
        let secs = case["max_seconds"].as_f64().unwrap_or(10.0);
        if run.wall.as_secs_f64() > secs {
            out.push(format!(
                "took {:.1} s (limit {secs} s)",
                run.wall.as_secs_f64()
            ));
        }
        let mb = case["max_rss_mb"].as_i64().unwrap_or(256);
        if run.max_rss_kib >= mb * 1024 {
            out.push(format!(
                "peak RSS {} MB (limit {mb} MB)",
                run.max_rss_kib / 1024
            ));
        }
        for (key, text, want) in [
            ("stdout_contains", stdout, true),
            ("stderr_contains", run.stderr.as_str(), true),
            ("stdout_excludes", stdout, false),
            ("stderr_excludes", run.stderr.as_str(), false),
        ] {
            for s in strings(case, key) {
                if text.contains(&s) != want {
                    let how = if want { "lacks" } else { "holds" };
                    out.push(format!("{} {how} {:?}", &key[..6], shorten(&s, 80)));
                }
            }
        }
        if let Some(names) = case.get("json_tensors").and_then(Value::as_array) {
            out.extend(json_names_differ(names, stdout));
        }
        out
    }

    /// Whether `inspect --json`'s output lists exactly `names`.
    fn json_names_differ(names: &[Value], stdout: &str) -> Option<String> {
        let mut want: Vec<&str> = names.iter().filter_map(Value::as_str).collect();
        want.sort_unstable();
        let got: Value = match serde_json::from_str(stdout) {
            Ok(v) => v,
            Err(e) => return Some(format!("stdout is not JSON: {e}")),
        };
        let mut listed: Vec<String> = got["tensors"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|t| t["name"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        listed.sort_unstable();
        (listed != want).then(|| format!("listed tensors {listed:?}, not {want:?}"))
    }

    /// Runs the generator into `out` and reads its cases.
    fn generate(out: &Path) -> Vec<Value> {
        let script = fixtures().join("hostile/round3/make.py");
        let made = Command::new(tensorfmt_tests::python())
            .arg(&script)
            .arg(out)
            .output()
            .expect("running round3/make.py");
        assert!(
            made.status.success(),
            "round3/make.py failed:\n{}{}",
            String::from_utf8_lossy(&made.stdout),
            String::from_utf8_lossy(&made.stderr)
        );
        let text = std::fs::read_to_string(out.join("cases.json")).expect("cases.json");
        let cases: Vec<Value> = serde_json::from_str(&text).expect("cases.json is JSON");
        cases
    }

    #[test]
    fn every_round_three_case_holds() {
        let scratch = tempfile::tempdir().unwrap();
        let dir = scratch.path().join("cases");
        let cases = generate(&dir);
        assert!(!cases.is_empty(), "round3/make.py wrote no case");
        let (out_file, err_file) = (scratch.path().join("stdout"), scratch.path().join("stderr"));
        let mut failures = Vec::new();
        let mut last = BTreeMap::new();
        for case in &cases {
            let name = case["name"].as_str().unwrap_or("?");
            let argv = strings(case, "argv");
            let args: Vec<&OsStr> = argv.iter().map(OsStr::new).collect();
            let allowed: Vec<PathBuf> = strings(case, "may_change")
                .into_iter()
                .map(PathBuf::from)
                .collect();
            let secs = case["max_seconds"].as_f64().unwrap_or(10.0);
            let before = snapshot(&dir, &last);
            let run = run_cli(
                &args,
                Some(&out_file),
                &err_file,
                Duration::from_secs_f64(secs * 2.0),
            );
            let stdout = String::from_utf8_lossy(&std::fs::read(&out_file).unwrap()).into_owned();
            let mut found = judge(case, &run, &stdout);
            last = snapshot(&dir, &before);
            found.extend(changes(&before, &last, &allowed));
            eprintln!(
                "{name}: exit {:?}, {:.2} s, {} MB{}",
                run.status,
                run.wall.as_secs_f64(),
                run.max_rss_kib / 1024,
                if found.is_empty() { "" } else { " FAILED" }
            );
            if !found.is_empty() {
                failures.push(format!(
                    "{name} ({}): {} [stderr: {}]",
                    argv.join(" "),
                    found.join("; "),
                    shorten(&run.stderr, 300)
                ));
            }
        }
        assert!(
            failures.is_empty(),
            "{} of {} round-three cases failed:\n{}",
            failures.len(),
            cases.len(),
            failures.join("\n")
        );
    }
}
