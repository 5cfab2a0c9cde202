//! The kill -9 harness the crash tests share (`folder_commit`, `crash_safety`): a test
//! binary re-runs itself as a child on one job (named by environment variables), the child
//! prints `ready`, then `start G` and `committed G` around each save of generation `G`, and
//! the parent SIGKILLs it after a delay and reads what it printed.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

/// The environment variables through which a test binary tells its child what to do.
pub struct Harness {
    /// Names the job (set only in the child).
    pub job: &'static str,
    /// The folder the child saves into.
    pub dir: &'static str,
    /// The first generation the child saves.
    pub first: &'static str,
}

/// What one child printed: the last generation started and the last committed.
#[derive(Default, Debug)]
pub struct Progress {
    /// The last `start G` line.
    pub started: Option<i64>,
    /// The last `committed G` line.
    pub committed: Option<i64>,
}

impl Harness {
    /// Starts the child (the test named `child` of this binary) on `job` and waits until
    /// it is ready to save.
    pub fn spawn_ready(
        &self,
        job: &str,
        dir: &Path,
        first: i64,
    ) -> (Child, BufReader<ChildStdout>) {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["child", "--exact", "--nocapture", "--test-threads=1"])
            .env(self.job, job)
            .env(self.dir, dir)
            .env(self.first, first.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawning the child");
        let mut out = BufReader::new(child.stdout.take().unwrap());
        // The harness prints its own lines first (and `test child ... ` before `ready`).
        wait_for(&mut out, |l| l.trim_end().ends_with("ready"), "ready");
        (child, out)
    }

    /// How long one whole save of `job` takes on this machine now, from the child's
    /// `ready` to its first `committed`. Kill delays are drawn up to a few times this, so
    /// that kills land before, during and after commits on a fast machine and on a loaded
    /// one alike.
    pub fn one_save(&self, job: &str) -> Duration {
        let dir = tempfile::tempdir().unwrap();
        let (mut child, mut out) = self.spawn_ready(job, dir.path(), 0);
        let t = Instant::now();
        wait_for(
            &mut out,
            |l| l.starts_with("committed "),
            "its first commit",
        );
        let took = t.elapsed();
        child.kill().expect("SIGKILL");
        child.wait().unwrap();
        took
    }

    /// Runs `job` in a child, kills it (SIGKILL on unix) after `delay`, and returns what
    /// it printed.
    pub fn run_and_kill(&self, job: &str, dir: &Path, first: i64, delay: Duration) -> Progress {
        let (mut child, mut out) = self.spawn_ready(job, dir, first);
        std::thread::sleep(delay);
        child.kill().expect("SIGKILL");
        child.wait().unwrap();
        let mut rest = String::new();
        out.read_to_string(&mut rest).unwrap();
        let mut p = Progress::default();
        for l in rest.lines() {
            if let Some(g) = l.strip_prefix("start ") {
                p.started = Some(g.parse().unwrap());
            } else if let Some(g) = l.strip_prefix("committed ") {
                p.committed = Some(g.parse().unwrap());
            }
        }
        p
    }
}

/// Reads the child's lines until one that `done` accepts; the child ending first is a
/// failure naming `what` it was expected to print.
pub fn wait_for(out: &mut BufReader<ChildStdout>, done: impl Fn(&str) -> bool, what: &str) {
    let mut line = String::new();
    loop {
        line.clear();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "the child ended before it printed {what}"
        );
        if done(&line) {
            return;
        }
    }
}

/// A small xorshift64* generator (kill delays; no dependency needed).
pub struct Rng(pub u64);

impl Rng {
    /// The next number.
    pub fn draw(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// A number from `lo` to `hi`, both included.
    pub fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.draw() % (hi - lo + 1)
    }
}

/// A user's files that the crash tests put into a folder output beside its checkpoint:
/// path and content (and [`add_foreign`] adds a symbolic link `notes` to the README).
pub const FOREIGN: [(&str, &[u8]); 2] = [
    ("README.md", b"# my model\n"),
    ("src/train.py", b"print('training')\n"),
];

/// Puts the user's files ([`FOREIGN`], and a symbolic link `notes` to the README) into
/// the folder `dest`; returns each file's inode, which every save must keep.
#[cfg(unix)]
pub fn add_foreign(dest: &Path) -> Vec<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::create_dir_all(dest.join("src")).unwrap();
    std::os::unix::fs::symlink("README.md", dest.join("notes")).unwrap();
    FOREIGN
        .iter()
        .map(|(p, b)| {
            std::fs::write(dest.join(p), b).unwrap();
            std::fs::metadata(dest.join(p)).unwrap().ino()
        })
        .collect()
}

/// Checks that the user's files in `dest` ([`add_foreign`]) are there, the same files
/// (`inodes`), unchanged; `what` names the moment in a failure.
#[cfg(unix)]
pub fn check_foreign(dest: &Path, inodes: &[u64], what: &str) {
    use std::os::unix::fs::MetadataExt;
    for ((p, b), ino) in FOREIGN.iter().zip(inodes) {
        let path = dest.join(p);
        let got = std::fs::read(&path).unwrap_or_else(|e| panic!("{what}: {p}: {e}"));
        assert_eq!(&got[..], *b, "{what}: {p} changed");
        assert_eq!(
            std::fs::metadata(&path).unwrap().ino(),
            *ino,
            "{what}: {p} is another file"
        );
    }
    assert_eq!(
        std::fs::read_link(dest.join("notes")).unwrap(),
        Path::new("README.md"),
        "{what}: the link"
    );
}
