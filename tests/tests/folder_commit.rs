//! Database folders survive `kill -9` whole: a child process saves LMDB databases over
//! and over (Caffe2's `checkpoint` replacing one path, and `Saver` creating fresh ones),
//! the parent kills it with SIGKILL at random moments and checks after each kill that
//! every destination is absent or a complete database holding one whole save. The
//! checkpoint's folder holds a user's files beside the database: after every kill they
//! are there, the same files, unchanged.
//!
//! The child is this test binary run again on the test `child` (which does nothing
//! unless `FOLDER_COMMIT_CHILD` names its job), printing `start G` before and
//! `committed G` after each save of generation `G`, so that the parent knows which
//! generations may be on disk.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tensorfmt::caffe2::{self, CheckpointOptions};
use tensorfmt::{DType, Saver, TensorMeta};
use tensorfmt_tests::kill::{add_foreign, check_foreign, Harness, Rng};
use tensorfmt_tests::meta;

/// The environment variable that makes `child` run: `checkpoint` or `saver`.
const JOB: &str = "FOLDER_COMMIT_CHILD";
/// The folder the child writes in.
const DIR: &str = "FOLDER_COMMIT_DIR";
/// The first generation the child saves (each child continues where the last stopped).
const FIRST: &str = "FOLDER_COMMIT_FIRST";
/// The child's environment variables.
const HARNESS: Harness = Harness {
    job: JOB,
    dir: DIR,
    first: FIRST,
};
/// Kills per job.
const KILLS: usize = 20;
/// The checkpoint's iteration: the pattern must hold a `%d` (a pattern without one is
/// refused), so every checkpoint is saved at the same iteration to land on the same
/// path; the generation is told by the `gen` tensor.
const ITER: i64 = 7;
/// Elements of `a` (f32): above Caffe2's default chunk of 1,000,000 elements, so `a`
/// takes two records and a partial database could hold one without the other.
const A_LEN: usize = 1_500_000;
/// Bytes of `b` (u8).
const B_LEN: usize = 1 << 20;

/// The tensors of generation `g`: `gen` (i64 [1]), `a` and `b`, filled with bytes of `g`
/// (cheap to make in a debug build, so that the child spends its time saving).
fn tensors(g: i64) -> Vec<(TensorMeta, Vec<u8>)> {
    vec![
        (meta("gen", DType::I64, &[1]), g.to_le_bytes().to_vec()),
        (
            meta("a", DType::F32, &[A_LEN as u64]),
            vec![(g % 251) as u8; A_LEN * 4],
        ),
        (
            meta("b", DType::U8, &[B_LEN as u64]),
            vec![(g * 7 % 253) as u8; B_LEN],
        ),
    ]
}

/// The child's job, run only when `FOLDER_COMMIT_CHILD` is set (a no-op otherwise).
#[test]
fn child() {
    let Ok(job) = std::env::var(JOB) else {
        return;
    };
    let dir = PathBuf::from(std::env::var(DIR).unwrap());
    let first: i64 = std::env::var(FIRST).unwrap().parse().unwrap();
    println!("ready");
    for g in first.. {
        let t = tensors(g);
        let refs: Vec<(TensorMeta, &[u8])> = t.iter().map(|(m, b)| (m.clone(), &b[..])).collect();
        println!("start {g}");
        match job.as_str() {
            "checkpoint" => {
                let opts = CheckpointOptions {
                    pattern: dir.join("ckpt_%d").to_string_lossy().into_owned(),
                    ..Default::default()
                };
                caffe2::checkpoint("lmdb", ITER, &refs, &opts).unwrap();
            }
            "saver" => {
                let mut s = Saver::create(
                    saver_path(&dir, g),
                    Some("caffe2-lmdb"),
                    &Default::default(),
                )
                .unwrap();
                for (m, b) in &refs {
                    s.add_bytes(m, b).unwrap();
                }
                s.commit().unwrap();
            }
            other => panic!("unknown job {other}"),
        }
        println!("committed {g}");
    }
}

fn saver_path(dir: &Path, g: i64) -> PathBuf {
    dir.join(format!("s_{g}.lmdb"))
}

/// Reads the database at `path` whole: its generation, after checking that every tensor
/// is the one of that generation (and, for a checkpoint, the iteration counter).
fn read_whole(path: &Path, checkpoint: bool) -> i64 {
    let mut names = vec!["gen", "a", "b"];
    if checkpoint {
        names.insert(0, "iter");
    }
    let got = caffe2::load("lmdb", &[path], &names, &Default::default())
        .unwrap_or_else(|e| panic!("{} is not a whole database: {e}", path.display()));
    let got: Vec<&[u8]> = got.iter().map(|t| t.data.as_bytes()).collect();
    let got = if checkpoint {
        assert_eq!(got[0], ITER.to_le_bytes(), "{}", path.display());
        &got[1..]
    } else {
        &got[..]
    };
    let g = i64::from_le_bytes(got[0].try_into().expect("gen is one i64"));
    let want = tensors(g);
    for (i, name) in ["a", "b"].iter().enumerate() {
        assert!(
            got[i + 1] == &want[i + 1].1[..],
            "{}: {name} is not generation {g}'s",
            path.display()
        );
    }
    g
}

/// A kill delay: between 5 ms and three saves (at least 150 ms).
fn kill_delay(rng: &mut Rng, save: Duration) -> Duration {
    let hi = (3 * save.as_millis() as u64).max(150);
    Duration::from_millis(rng.between(5, hi))
}

/// The hidden temporary folders (`.….tmp`, `.….old`) in `dir`, removed after counting
/// (a real program would clean them up at its next start).
fn sweep_leftovers(dir: &Path) -> usize {
    let mut n = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            n += 1;
            std::fs::remove_dir_all(e.path()).unwrap();
        }
    }
    n
}

fn seeded_rng() -> Rng {
    let seed: u64 = tensorfmt_tests::run_seed().parse().unwrap();
    Rng(seed | 1)
}

/// Totals over one job's kills.
#[derive(Default, Debug)]
struct Tally {
    mid_write: usize,
    leftovers: usize,
    commits: usize,
}

#[cfg(unix)]
#[test]
fn checkpoint_survives_kill_9_whole() {
    let started_at = Instant::now();
    let mut rng = seeded_rng();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(format!("ckpt_{ITER}"));
    let mut tally = Tally::default();
    let save = HARNESS.one_save("checkpoint");
    // A first checkpoint, then a user's files beside it, which every save keeps.
    let t = tensors(0);
    let refs: Vec<(TensorMeta, &[u8])> = t.iter().map(|(m, b)| (m.clone(), &b[..])).collect();
    let opts = CheckpointOptions {
        pattern: dir.path().join("ckpt_%d").to_string_lossy().into_owned(),
        ..Default::default()
    };
    caffe2::checkpoint("lmdb", ITER, &refs, &opts).unwrap();
    let inodes = add_foreign(&path);
    // The generations that may be on disk: at least the last committed one, at most the
    // last started.
    let (mut committed, mut started) = (Some(0), Some(0));
    let mut first = 1;
    for kill in 0..KILLS {
        let delay = kill_delay(&mut rng, save);
        let p = HARNESS.run_and_kill("checkpoint", dir.path(), first, delay);
        eprintln!("kill {kill}: {p:?}");
        if p.started != p.committed {
            tally.mid_write += 1;
        }
        if let Some(c) = p.committed {
            tally.commits += (c - first + 1) as usize;
        }
        started = p.started.or(started);
        committed = p.committed.or(committed);
        check_foreign(&path, &inodes, &format!("kill {kill} after {delay:?}"));
        if path.exists() {
            let g = read_whole(&path, true);
            let lo = committed.unwrap_or(i64::MIN);
            let hi = started.expect("a checkpoint with none started");
            assert!(
                (lo..=hi).contains(&g),
                "kill {kill} after {delay:?}: generation {g} on disk, {lo}..={hi} expected"
            );
        } else {
            // Absent only before the first commit.
            assert_eq!(
                committed, None,
                "kill {kill} after {delay:?}: no checkpoint"
            );
        }
        // Leftover temporary folders are expected after SIGKILL: nothing runs at a kill
        // to remove them. Counted, not asserted against.
        tally.leftovers += sweep_leftovers(dir.path());
        first = started.map_or(0, |s| s + 1);
    }
    println!(
        "checkpoint: {KILLS} kills, {} mid-write, {} checkpoints committed, {} temporary folders left behind, {:?}",
        tally.mid_write,
        tally.commits,
        tally.leftovers,
        started_at.elapsed()
    );
    assert!(committed.is_some(), "no checkpoint was ever committed");
}

#[cfg(unix)]
#[test]
fn saver_survives_kill_9_whole() {
    let started_at = Instant::now();
    let mut rng = seeded_rng();
    let dir = tempfile::tempdir().unwrap();
    let mut tally = Tally::default();
    let mut first = 0;
    let save = HARNESS.one_save("saver");
    for kill in 0..KILLS {
        let delay = kill_delay(&mut rng, save);
        let p = HARNESS.run_and_kill("saver", dir.path(), first, delay);
        eprintln!("kill {kill}: {p:?}");
        if p.started != p.committed {
            tally.mid_write += 1;
        }
        if let Some(c) = p.committed {
            tally.commits += (c - first + 1) as usize;
        }
        let last = p.started.unwrap_or(first - 1);
        for g in first..=last {
            let path = saver_path(dir.path(), g);
            if path.exists() {
                assert_eq!(read_whole(&path, false), g, "kill {kill}");
                std::fs::remove_dir_all(&path).unwrap();
            } else {
                // Only the save the kill interrupted may be missing.
                assert!(
                    p.committed.is_none_or(|c| g > c),
                    "kill {kill} after {delay:?}: {} committed but absent",
                    path.display()
                );
            }
        }
        tally.leftovers += sweep_leftovers(dir.path());
        first = last + 1;
    }
    println!(
        "saver: {KILLS} kills, {} mid-write, {} databases committed, {} temporary folders left behind, {:?}",
        tally.mid_write,
        tally.commits,
        tally.leftovers,
        started_at.elapsed()
    );
    assert!(tally.commits > 0, "no database was ever committed");
}
