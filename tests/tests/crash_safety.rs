//! Crash safety, proven: a child process saves one destination over and over with each
//! writer (a PyTorch file, an npz zip, an ONNX model with external data, LMDB and
//! LevelDB folders, Caffe2 checkpoints with keep-last-K, a Hugging Face sharded
//! checkpoint in a model's folder beside its `config.json`, a torch.distributed
//! checkpoint of two ranks' files and `.metadata`, a `StateDict` struct loaded from its
//! destination and saved back over it while its tensors view that file's map, then
//! saved anew), the parent kills it with
//! SIGKILL at random moments, and checks after each kill that the destination holds
//! one whole save, the last committed one or the one being written, never a mix (an
//! ONNX model's external data is its own), and that what the kill left behind
//! (temporary files and folders, data files of a model never committed) is gone once
//! the next child has committed a save. The folder outputs (LMDB, LevelDB, DCP, sharded)
//! hold a user's files beside the checkpoint (a README, a source file in a sub-folder, a
//! symbolic link): after every kill they are there, the same files, unchanged.
//!
//! Kills per writer: `TENSORFMT_CRASH_RUNS` (3 by default, for CI; 50 for the opt-in
//! run). The child is this test binary run again on the test `child` (which does
//! nothing unless `CRASH_CHILD` names its writer), printing `start G` before and
//! `committed G` after each save of generation `G`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tensorfmt::caffe2::{self, CheckpointOptions};
use tensorfmt::{
    DType, DataLocation, ExternalData, Saver, StateDict, TensorFile, TensorMeta, WriteOptions,
};
use tensorfmt_tests::kill::{add_foreign, check_foreign, Harness, Rng};
use tensorfmt_tests::meta;

const JOB: &str = "CRASH_CHILD";
const DIR: &str = "CRASH_DIR";
const FIRST: &str = "CRASH_FIRST";
/// The child's environment variables.
const HARNESS: Harness = Harness {
    job: JOB,
    dir: DIR,
    first: FIRST,
};
/// Elements of `a` (f32): over Caffe2's chunk of 1,000,000, so a database holds it in
/// two records.
const A_LEN: usize = 1_500_000;
/// Bytes of `b`.
const B_LEN: usize = 1 << 20;
/// Checkpoints kept.
const KEEP: usize = 2;

/// The writers, by job name.
const WRITERS: [&str; 9] = [
    "pt",
    "npz",
    "onnx",
    "lmdb",
    "leveldb",
    "checkpoint",
    "sharded",
    "dcp",
    "state",
];
/// The sharded job's input (written whole before each save) and the file beside its
/// checkpoint that every save keeps.
const SHARDED_INPUT: &str = "in.safetensors";
const CONFIG: &[u8] = b"{\"model_type\": \"tiny\"}";

/// Whether `job` writes a folder.
fn folder_job(job: &str) -> bool {
    matches!(job, "lmdb" | "leveldb" | "dcp" | "sharded")
}

fn kills() -> usize {
    std::env::var("TENSORFMT_CRASH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
}

/// The tensors of generation `g`: `gen` (i64 [1]), `a` and `b` filled with bytes of `g`.
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

/// The destination of `job` in `dir` (a checkpoint's pattern for `checkpoint`).
fn dest(job: &str, dir: &Path) -> PathBuf {
    dir.join(match job {
        "pt" => "out.pt",
        "npz" => "out.npz",
        "onnx" => "out.onnx",
        "lmdb" => "out.lmdb",
        "leveldb" => "out.leveldb",
        "sharded" => "repo",
        "dcp" => "ckpt.dcp",
        "state" => "state.pt",
        _ => "ckpt_%d",
    })
}

fn checkpoint_path(dir: &Path, g: i64) -> PathBuf {
    dir.join(format!("ckpt_{g}"))
}

/// A generation's tensors as a struct (the `state` job).
#[derive(tensorfmt::StateDict)]
struct Generation {
    gen: tensorfmt::Tensor,
    a: tensorfmt::Tensor,
    b: tensorfmt::Tensor,
}

/// Saves generation `g` with `job`'s writer.
fn save(job: &str, dir: &Path, g: i64) -> tensorfmt::Result<()> {
    let t = tensors(g);
    let refs: Vec<(TensorMeta, &[u8])> = t.iter().map(|(m, b)| (m.clone(), &b[..])).collect();
    if job == "checkpoint" {
        let opts = CheckpointOptions {
            pattern: dest(job, dir).to_string_lossy().into_owned(),
            keep_last: Some(KEEP),
            ..Default::default()
        };
        return caffe2::checkpoint("lmdb", g, &refs, &opts).map(|_| ());
    }
    if job == "state" {
        // The last save loaded (its tensors views of the file's map) and saved back over
        // that file, then this generation saved.
        let path = dest(job, dir);
        if path.exists() {
            let last = Generation::load(&path)?;
            last.save(&path, None)?;
        }
        let [gen, a, b] = [0, 1, 2].map(|i| {
            let (m, bytes) = &t[i];
            tensorfmt::Tensor::from_bytes(&m.name, m.dtype, &m.shape, bytes, m.byte_order)
        });
        let this = Generation {
            gen: gen?,
            a: a?,
            b: b?,
        };
        return this.save(&path, None);
    }
    if job == "dcp" || job == "sharded" {
        // A folder written from a file: a DCP checkpoint of two ranks, or two shards
        // (`a`, 6 MB, alone over the size; `gen` and `b` in the other).
        let input = dir.join(SHARDED_INPUT);
        tensorfmt::save(&input, None, refs, &WriteOptions::default())?;
        let options = tensorfmt::ConvertOptions {
            world_size: (job == "dcp").then_some(2),
            max_shard_size: (job == "sharded").then_some(2_000_000),
            ..Default::default()
        };
        return tensorfmt::convert(&input, dest(job, dir), &options, |_, _| {}).map(|_| ());
    }
    let (format, external) = match job {
        "pt" => ("pytorch", ExternalData::Auto),
        "npz" => ("npz", ExternalData::Auto),
        "onnx" => (
            "onnx",
            ExternalData::External {
                per_tensor: false,
                location: None,
                threshold: 1024,
                align: 4096,
            },
        ),
        "lmdb" => ("caffe2-lmdb", ExternalData::Auto),
        _ => ("caffe2-leveldb", ExternalData::Auto),
    };
    let options = WriteOptions {
        external,
        ..Default::default()
    };
    let mut s = Saver::create(dest(job, dir), Some(format), &options)?;
    for (m, b) in &refs {
        s.add_bytes(m, b)?;
    }
    s.commit()
}

/// The child's job, run only when `CRASH_CHILD` is set (a no-op otherwise).
#[test]
fn child() {
    let Ok(job) = std::env::var(JOB) else {
        return;
    };
    let dir = PathBuf::from(std::env::var(DIR).unwrap());
    let first: i64 = std::env::var(FIRST).unwrap().parse().unwrap();
    println!("ready");
    for g in first.. {
        println!("start {g}");
        save(&job, &dir, g).unwrap();
        println!("committed {g}");
    }
}

/// Reads the save at `path` whole: its generation, after checking every tensor is that
/// generation's; for ONNX, that its external data is in files named for it.
fn read_whole(job: &str, path: &Path) -> i64 {
    let f = TensorFile::open(path)
        .unwrap_or_else(|e| panic!("{} is not a whole save: {e}", path.display()));
    let get = |name: &str| {
        let info = f
            .tensors()
            .iter()
            .find(|t| t.name == name)
            .unwrap_or_else(|| panic!("{}: no tensor {name}", path.display()));
        if job == "onnx" && name != "gen" {
            let DataLocation::External { path: p, .. } = &info.location else {
                panic!("{name} is not external");
            };
            assert!(p.starts_with("out.onnx."), "{p}");
        }
        f.load_info(info)
            .unwrap_or_else(|e| panic!("{}: {name}: {e}", path.display()))
    };
    if job == "sharded" {
        assert_eq!(
            f.shards().map(|s| s.len()),
            Some(2),
            "{}: two shards",
            path.display()
        );
        assert_eq!(
            std::fs::read(path.join("config.json")).unwrap(),
            CONFIG,
            "{}: config.json kept",
            path.display()
        );
    }
    let g = i64::from_le_bytes(get("gen").data.as_bytes().try_into().unwrap());
    let want = tensors(g);
    for (i, name) in ["a", "b"].iter().enumerate() {
        assert!(
            get(name).data.as_bytes() == &want[i + 1].1[..],
            "{}: {name} is not generation {g}'s (a mix)",
            path.display()
        );
    }
    g
}

/// What the destination needs in `dir`: the destination and, for ONNX, the data files
/// it names; for checkpoints, every checkpoint folder.
fn needed(job: &str, dir: &Path) -> BTreeSet<String> {
    let mut n = BTreeSet::new();
    if job == "sharded" || job == "dcp" {
        n.insert(SHARDED_INPUT.to_string());
    }
    if job == "checkpoint" {
        for e in std::fs::read_dir(dir).unwrap() {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            if name.starts_with("ckpt_") {
                n.insert(name);
            }
        }
        return n;
    }
    let d = dest(job, dir);
    if d.exists() {
        n.insert(d.file_name().unwrap().to_string_lossy().into_owned());
        if job == "onnx" {
            for t in TensorFile::open(&d).unwrap().tensors() {
                if let DataLocation::External { path, .. } = &t.location {
                    n.insert(path.clone());
                }
            }
        }
    }
    n
}

/// Everything in `dir` the destination does not need: what a kill left behind.
fn leftovers(job: &str, dir: &Path) -> BTreeSet<String> {
    let need = needed(job, dir);
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !need.contains(n))
        .collect()
}

/// Totals over one writer's kills.
#[derive(Default, Debug)]
struct Tally {
    /// The destination held the last committed save.
    old: usize,
    /// It held the save the kill interrupted (renamed in before the child said so).
    new: usize,
    /// Kills that left something behind (removed by the next save).
    leftover: usize,
}

/// Kills `job`'s child `kills()` times and checks each time what the destination holds.
fn kill_test(job: &str) {
    let started_at = Instant::now();
    let seed: u64 = tensorfmt_tests::run_seed().parse().unwrap();
    let mut rng = Rng(seed | 1);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    if job == "sharded" {
        std::fs::create_dir(dir.join("repo")).unwrap();
        std::fs::write(dir.join("repo").join("config.json"), CONFIG).unwrap();
    }
    let one = HARNESS.one_save(job);
    let mut tally = Tally::default();
    let (mut committed, mut started): (Option<i64>, Option<i64>) = (None, None);
    let mut first = 0;
    // A folder output holds a user's files from the start: beside the first save's
    // checkpoint (a folder holding no checkpoint of a database or DCP is refused), in the
    // model's folder before any for a sharded one.
    let mut inodes = Vec::new();
    if folder_job(job) {
        if job != "sharded" {
            save(job, dir, 0).unwrap();
            (committed, started, first) = (Some(0), Some(0), 1);
        }
        inodes = add_foreign(&dest(job, dir));
    }
    let mut left: BTreeSet<String> = BTreeSet::new();
    let runs = kills();
    for kill in 0..runs {
        let hi = (3 * one.as_millis() as u64).max(150);
        let delay = Duration::from_millis(rng.between(5, hi));
        let p = HARNESS.run_and_kill(job, dir, first, delay);
        started = p.started.or(started);
        committed = p.committed.or(committed);
        let what = format!("{job}: kill {kill} after {delay:?} ({p:?})");
        // What the last kill left is gone once this child committed a save.
        if p.committed.is_some() {
            let still: Vec<&String> = left
                .iter()
                .filter(|n| dir.join(n).exists() && !needed(job, dir).contains(*n))
                .collect();
            assert!(
                still.is_empty(),
                "{what}: not removed by the next save: {still:?}"
            );
        }
        if job == "checkpoint" {
            // Every checkpoint there is whole and of its own iteration; the newest is
            // at least the last committed; at most KEEP + 1 (a kill before pruning).
            let mut present: Vec<i64> = needed(job, dir)
                .iter()
                .filter_map(|n| n.strip_prefix("ckpt_")?.parse().ok())
                .collect();
            present.sort_unstable();
            for &g in &present {
                assert_eq!(read_whole(job, &checkpoint_path(dir, g)), g, "{what}");
            }
            assert!(present.len() <= KEEP + 1, "{what}: {present:?}");
            match (present.last(), committed) {
                (Some(&newest), Some(c)) => {
                    assert!(newest >= c, "{what}: newest {newest}, committed {c}");
                    if newest > c {
                        tally.new += 1;
                    } else {
                        tally.old += 1;
                    }
                }
                (None, Some(c)) => panic!("{what}: no checkpoint, {c} committed"),
                (_, None) => tally.old += 1,
            }
        } else {
            let d = dest(job, dir);
            // A model's folder is there from the start: its checkpoint is its index.
            let saved = match job {
                "sharded" => d.join("model.safetensors.index.json").exists(),
                _ => d.exists(),
            };
            if saved {
                let g = read_whole(job, &d);
                let lo = committed.unwrap_or(i64::MIN);
                let hi = started.expect("a save with none started");
                assert!(
                    (lo..=hi).contains(&g),
                    "{what}: generation {g}, {lo}..={hi} expected"
                );
                if Some(g) == committed {
                    tally.old += 1;
                } else {
                    tally.new += 1;
                }
            } else {
                assert_eq!(committed, None, "{what}: no destination");
                tally.old += 1;
            }
            if job == "sharded" {
                // Before the first commit too, the folder holds its config as it was.
                assert_eq!(
                    std::fs::read(dest(job, dir).join("config.json")).unwrap(),
                    CONFIG,
                    "{what}"
                );
            }
            if folder_job(job) {
                check_foreign(&dest(job, dir), &inodes, &what);
            }
        }
        left = leftovers(job, dir);
        if !left.is_empty() {
            tally.leftover += 1;
            eprintln!("{what}: left {left:?}");
        }
        first = started.map_or(0, |s| s + 1);
    }
    // A last save, not killed: it removes whatever the last kill left.
    save(job, dir, first).unwrap();
    if folder_job(job) {
        check_foreign(&dest(job, dir), &inodes, job);
    }
    let end = leftovers(job, dir);
    assert!(end.is_empty(), "{job}: left after a whole save: {end:?}");
    println!(
        "{job}: {runs} kills: old {} new {} mix 0, {} left something behind (all removed by \
         the next save), one save {one:?}, {:?}",
        tally.old,
        tally.new,
        tally.leftover,
        started_at.elapsed()
    );
}

#[cfg(unix)]
#[test]
fn pytorch_file_survives_kill_9() {
    kill_test(WRITERS[0]);
}

#[cfg(unix)]
#[test]
fn npz_survives_kill_9() {
    kill_test(WRITERS[1]);
}

#[cfg(unix)]
#[test]
fn onnx_with_external_data_survives_kill_9() {
    kill_test(WRITERS[2]);
}

#[cfg(unix)]
#[test]
fn lmdb_folder_survives_kill_9() {
    kill_test(WRITERS[3]);
}

#[cfg(unix)]
#[test]
fn leveldb_folder_survives_kill_9() {
    kill_test(WRITERS[4]);
}

#[cfg(unix)]
#[test]
fn checkpoints_with_keep_last_survive_kill_9() {
    kill_test(WRITERS[5]);
}

#[cfg(unix)]
#[test]
fn sharded_checkpoint_in_a_model_folder_survives_kill_9() {
    kill_test(WRITERS[6]);
}

#[cfg(unix)]
#[test]
fn torch_distributed_checkpoint_survives_kill_9() {
    kill_test(WRITERS[7]);
}

#[cfg(unix)]
#[test]
fn state_dict_saved_over_the_file_it_views_survives_kill_9() {
    kill_test(WRITERS[8]);
}
