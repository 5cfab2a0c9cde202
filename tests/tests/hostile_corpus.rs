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
const SKIP: &[(&str, &str)] = &[];

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
                .filter(|p| p.is_dir() && !hidden(p)),
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

/// Runs `tensorfmt inspect --sha256 <entry>` as a child and waits for it with `wait4`,
/// killing it past [`WALL_LIMIT`].
fn inspect(entry: &Path, stderr_file: &Path) -> Run {
    let err = std::fs::File::create(stderr_file).expect("the stderr file");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tensorfmt-cli"));
    cmd.args([
        OsStr::new("inspect"),
        OsStr::new("--sha256"),
        entry.as_os_str(),
    ])
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(err);
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
        if !killed && start.elapsed() > WALL_LIMIT {
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
            let run = inspect(entry, &stderr_file);
            ran += 1;
            peak_rss = peak_rss.max(run.max_rss_kib);
            longest = longest.max(run.wall);
            let found = problems(entry, &run);
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
