//! `tfbench`: times the Rust side of the `benches/compare*.py` suites (tensorfmt,
//! ndarray-npy, the safetensors crate, candle, LMDB and the memcpy references) and prints
//! the timings as JSON on stdout (progress on stderr).
//!
//! ```text
//! tfbench --dir DIR [--runs N] [--open-runs M] [--only PREFIX]... [--lib NAME]...
//! ```
//!
//! `--only` keeps the operations whose name starts with a prefix, `--lib` those of a
//! library (`tensorfmt`, `ndarray-npy`, `safetensors`, `candle`, `memcpy`, `lmdb`), for
//! profiling one of them.
//!
//! `DIR` holds the input files `compare.py` wrote with NumPy (`in.npy`, `open_*.npy`,
//! `in_stored.npz`, `in_deflate.npz`), `compare_torch.py` with `torch.save` (`in.pt`),
//! `compare_onnx.py` with onnx (`onnx_*/in.onnx`), `compare_caffe2.py` (`caffe2_data.lmdb`)
//! `compare_safetensors.py` with `safetensors.torch.save_file` (`st/in.safetensors`) or
//! `compare_pickle.py` with `pickle.dump` (`in.pkl`);
//! every workload whose input is there runs. Outputs are written next to them (`out_*`).
//! Built with the `candle` feature, the PyTorch and safetensors workloads are also timed
//! with candle. Each operation runs once untimed (page cache warm), then `N` times (`M` for
//! the open-only operations); every run is timed with the wall clock around the operation
//! alone and the median is reported, exactly as `compare.py` times NumPy. Before each write run the
//! output is removed and `sync(2)` is called, outside the timed region.

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde_json::{json, Value};
use tensorfmt::Compression;
use tensorfmt::StateDict;
use tensorfmt::TensorMeta;
use tensorfmt_benches::{mem, nd, remove_if_exists, st, sync_all, tf, Result};

struct Args {
    dir: PathBuf,
    runs: usize,
    open_runs: usize,
    only: Vec<String>,
    libs: Vec<String>,
}

fn parse_args() -> Result<Args> {
    let mut args = Args {
        dir: PathBuf::new(),
        runs: 5,
        open_runs: 50,
        only: Vec::new(),
        libs: Vec::new(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--dir" => args.dir = PathBuf::from(value()?),
            "--runs" => args.runs = value()?.parse()?,
            "--open-runs" => args.open_runs = value()?.parse()?,
            "--only" => args.only.push(value()?),
            "--lib" => args.libs.push(value()?),
            "-h" | "--help" => {
                eprintln!(
                    "usage: tfbench --dir DIR [--runs N] [--open-runs M] [--only PREFIX]... \
                     [--lib NAME]..."
                );
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument '{other}'").into()),
        }
    }
    if args.dir.as_os_str().is_empty() {
        return Err("--dir is required".into());
    }
    if args.runs == 0 || args.open_runs == 0 {
        return Err("--runs and --open-runs must be at least 1".into());
    }
    Ok(args)
}

/// What one timed operation is: its row, library, description, payload and run count.
struct Case<'a> {
    op: &'a str,
    lib: &'a str,
    how: &'a str,
    bytes: usize,
    runs: usize,
}

struct Bench {
    args: Args,
    results: Vec<Value>,
}

impl Bench {
    fn wanted(&self, op: &str) -> bool {
        self.args.only.is_empty() || self.args.only.iter().any(|p| op.starts_with(p.as_str()))
    }

    fn wanted_lib(&self, lib: &str) -> bool {
        self.args.libs.is_empty() || self.args.libs.iter().any(|l| l == lib)
    }

    /// Times `run` (after `before`, untimed) once untimed and then `runs` times.
    fn time<T>(
        &mut self,
        case: Case<'_>,
        mut before: impl FnMut() -> Result<()>,
        mut run: impl FnMut() -> Result<T>,
    ) -> Result<()> {
        let Case {
            op,
            lib,
            how,
            bytes,
            runs,
        } = case;
        if !self.wanted(op) || !self.wanted_lib(lib) {
            return Ok(());
        }
        eprintln!("tfbench: {op} [{lib}] {how}");
        before()?;
        drop(run()?);
        let mut times = Vec::with_capacity(runs);
        for _ in 0..runs {
            before()?;
            let t0 = Instant::now();
            let out = run()?;
            let dt = t0.elapsed().as_secs_f64();
            drop(out);
            times.push(dt);
        }
        let mut sorted = times.clone();
        sorted.sort_by(f64::total_cmp);
        let median = if sorted.len() % 2 == 1 {
            sorted[sorted.len() / 2]
        } else {
            (sorted[sorted.len() / 2 - 1] + sorted[sorted.len() / 2]) / 2.0
        };
        self.results.push(json!({
            "op": op,
            "lib": lib,
            "how": how,
            "bytes": bytes,
            "runs": runs,
            "median_s": median,
            "min_s": sorted[0],
            "max_s": sorted[sorted.len() - 1],
            "times_s": times,
        }));
        Ok(())
    }
}

/// Removes `path` and syncs: the untimed preparation of every write run.
fn fresh(path: &Path) -> Result<()> {
    remove_if_exists(path)?;
    sync_all();
    Ok(())
}

fn total(tensors: &[(String, Vec<u8>)]) -> usize {
    tensors.iter().map(|(_, b)| b.len()).sum()
}

/// The memcpy references of a suite's full loads (`{prefix}.memcpy.fresh` and
/// `{prefix}.memcpy.hot`): the payload `ranges` of `file` copied into fresh buffers, and
/// into one buffer already faulted in.
fn memcpy_references(
    b: &mut Bench,
    prefix: &str,
    file: &Path,
    ranges: &[std::ops::Range<usize>],
    bytes: usize,
) -> Result<()> {
    let runs = b.args.runs;
    b.time(
        Case {
            op: &format!("{prefix}.memcpy.fresh"),
            lib: "memcpy",
            how: "mmap + per tensor: fresh buffer (huge pages from 2 MiB) + copy",
            bytes,
            runs,
        },
        || Ok(()),
        || mem::copy_fresh(file, ranges),
    )?;
    let hot_op = format!("{prefix}.memcpy.hot");
    if b.wanted(&hot_op) && b.wanted_lib("memcpy") {
        let mut hot = mem::HotCopy::new(file, ranges)?;
        b.time(
            Case {
                op: &hot_op,
                lib: "memcpy",
                how: "copy into one reused buffer, source and destination already faulted in",
                bytes,
                runs,
            },
            || Ok(()),
            || hot.run(),
        )?;
    }
    Ok(())
}

/// tensorfmt's saves of `tensors` as `format` to `out` (`{prefix}.write.fsync` through
/// the Saver, `{prefix}.write.nofsync` through the format's writer), `out` removed after.
fn tf_saves(
    b: &mut Bench,
    prefix: &str,
    format: &str,
    out: &Path,
    tensors: &[(TensorMeta, &[u8])],
    bytes: usize,
) -> Result<()> {
    let runs = b.args.runs;
    b.time(
        Case {
            op: &format!("{prefix}.write.fsync"),
            lib: "tensorfmt",
            how: "Saver: temp file + fsync + rename",
            bytes,
            runs,
        },
        || fresh(out),
        || tf::save_with_meta(out, format, tensors, None),
    )?;
    b.time(
        Case {
            op: &format!("{prefix}.write.nofsync"),
            lib: "tensorfmt",
            how: "FormatDesc::writer over BufWriter<File>, no fsync",
            bytes,
            runs,
        },
        || fresh(out),
        || tf::save_with_meta_no_fsync(out, format, tensors, None),
    )?;
    remove_if_exists(out)
}

fn npy(b: &mut Bench) -> Result<()> {
    let dir = b.args.dir.clone();
    let input = dir.join("in.npy");
    if !input.exists() {
        return Ok(());
    }
    let runs = b.args.runs;
    let tensors = tf::inputs(&input)?;
    let bytes = total(&tensors);
    let arrays = nd::arrays(&tensors);
    let array = &arrays[0].1;

    // Writes.
    let out = dir.join("out_tf.npy");
    b.time(
        Case {
            op: "npy.write.fsync",
            lib: "tensorfmt",
            how: "Saver: temp file + fsync + rename",
            bytes,
            runs,
        },
        || fresh(&out),
        || tf::save(&out, "npy", &tensors, None),
    )?;
    b.time(
        Case {
            op: "npy.write.nofsync",
            lib: "tensorfmt",
            how: "FormatDesc::writer over BufWriter<File>, no fsync",
            bytes,
            runs,
        },
        || fresh(&out),
        || tf::save_no_fsync(&out, "npy", &tensors, None),
    )?;
    let out_nd = dir.join("out_nd.npy");
    b.time(
        Case {
            op: "npy.write.fsync",
            lib: "ndarray-npy",
            how: "write_npy to BufWriter<&File> + fsync",
            bytes,
            runs,
        },
        || fresh(&out_nd),
        || nd::write_npy(&out_nd, array, true),
    )?;
    b.time(
        Case {
            op: "npy.write.nofsync",
            lib: "ndarray-npy",
            how: "write_npy",
            bytes,
            runs,
        },
        || fresh(&out_nd),
        || nd::write_npy(&out_nd, array, false),
    )?;
    remove_if_exists(&out)?;
    remove_if_exists(&out_nd)?;

    // Reads.
    let none = || Ok(());
    b.time(
        Case {
            op: "npy.read.owned",
            lib: "tensorfmt",
            how: "open + read_all(OwnedSink)",
            bytes,
            runs,
        },
        none,
        || tf::read_owned(&input),
    )?;
    b.time(
        Case {
            op: "npy.read.owned",
            lib: "ndarray-npy",
            how: "read_npy",
            bytes,
            runs,
        },
        none,
        || nd::read_npy(&input),
    )?;
    let view_runs = b.args.open_runs;
    b.time(
        Case {
            op: "npy.read.view",
            lib: "tensorfmt",
            how: "open + load (zero-copy view)",
            bytes,
            runs: view_runs,
        },
        none,
        || tf::read_view(&input),
    )?;
    b.time(
        Case {
            op: "npy.read.view",
            lib: "ndarray-npy",
            how: "mmap + ArrayView::view_npy",
            bytes,
            runs: view_runs,
        },
        none,
        || nd::view_npy(&input),
    )?;
    Ok(())
}

fn open(b: &mut Bench) -> Result<()> {
    let dir = b.args.dir.clone();
    let mut files: Vec<(u64, PathBuf)> = Vec::new();
    for e in std::fs::read_dir(&dir)? {
        let p = e?.path();
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.starts_with("open_") && name.ends_with(".npy") {
            files.push((std::fs::metadata(&p)?.len(), p));
        }
    }
    files.sort();
    let runs = b.args.open_runs;
    let none = || Ok(());
    for (_, p) in files {
        let label = p
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("")
            .trim_start_matches("open_")
            .to_string();
        let bytes = tf::open(&p)?.tensors()[0].location.len() as usize;
        let op = format!("npy.open.{label}");
        b.time(
            Case {
                op: &op,
                lib: "tensorfmt",
                how: "TensorFile::open",
                bytes,
                runs,
            },
            none,
            || tf::open(&p),
        )?;
        b.time(
            Case {
                op: &op,
                lib: "ndarray-npy",
                how: "mmap + ArrayView::view_npy",
                bytes,
                runs,
            },
            none,
            || nd::view_npy(&p),
        )?;
    }
    Ok(())
}

fn npz(b: &mut Bench, kind: &str, compression: Compression) -> Result<()> {
    let dir = b.args.dir.clone();
    let input = dir.join(format!("in_{kind}.npz"));
    if !input.exists() {
        return Ok(());
    }
    let runs = b.args.runs;
    let tensors = tf::inputs(&input)?;
    let bytes = total(&tensors);
    let arrays = nd::arrays(&tensors);
    let deflate = compression == Compression::Deflate;

    let out = dir.join(format!("out_tf_{kind}.npz"));
    b.time(
        Case {
            op: &format!("npz.write.{kind}.fsync"),
            lib: "tensorfmt",
            how: "Saver: temp file + fsync + rename",
            bytes,
            runs,
        },
        || fresh(&out),
        || tf::save(&out, "npz", &tensors, Some(compression)),
    )?;
    b.time(
        Case {
            op: &format!("npz.write.{kind}.nofsync"),
            lib: "tensorfmt",
            how: "FormatDesc::writer over BufWriter<File>, no fsync",
            bytes,
            runs,
        },
        || fresh(&out),
        || tf::save_no_fsync(&out, "npz", &tensors, Some(compression)),
    )?;
    let out_nd = dir.join(format!("out_nd_{kind}.npz"));
    let ctor = if deflate {
        "NpzWriter::new_compressed"
    } else {
        "NpzWriter::new"
    };
    b.time(
        Case {
            op: &format!("npz.write.{kind}.fsync"),
            lib: "ndarray-npy",
            how: &format!("{ctor} over BufWriter<File> + fsync"),
            bytes,
            runs,
        },
        || fresh(&out_nd),
        || nd::write_npz(&out_nd, &arrays, deflate, true),
    )?;
    b.time(
        Case {
            op: &format!("npz.write.{kind}.nofsync"),
            lib: "ndarray-npy",
            how: &format!("{ctor} over BufWriter<File>"),
            bytes,
            runs,
        },
        || fresh(&out_nd),
        || nd::write_npz(&out_nd, &arrays, deflate, false),
    )?;
    remove_if_exists(&out)?;
    remove_if_exists(&out_nd)?;

    let none = || Ok(());
    b.time(
        Case {
            op: &format!("npz.read.{kind}.owned"),
            lib: "tensorfmt",
            how: "open + read_all(OwnedSink)",
            bytes,
            runs,
        },
        none,
        || tf::read_owned(&input),
    )?;
    b.time(
        Case {
            op: &format!("npz.read.{kind}.owned"),
            lib: "ndarray-npy",
            how: "NpzReader::new(File) + by_name for all",
            bytes,
            runs,
        },
        none,
        || nd::read_npz(&input),
    )?;
    if !deflate {
        b.time(
            Case {
                op: &format!("npz.read.{kind}.view"),
                lib: "tensorfmt",
                how: "open + load_all (zero-copy views)",
                bytes,
                runs: b.args.open_runs,
            },
            none,
            || tf::read_view(&input),
        )?;
        b.time(
            Case {
                op: &format!("npz.read.{kind}.view_nocrc"),
                lib: "tensorfmt",
                how: "open_with(skip_checksums) + load_all (zero-copy views)",
                bytes,
                runs: b.args.open_runs,
            },
            none,
            || tf::read_view_unchecked(&input),
        )?;
    }
    Ok(())
}

/// The PyTorch suite on `in.pt` (written by `torch.save` in `compare_torch.py`).
fn pytorch(b: &mut Bench) -> Result<()> {
    let dir = b.args.dir.clone();
    let input = dir.join("in.pt");
    if !input.exists() {
        return Ok(());
    }
    let runs = b.args.runs;
    let open_runs = b.args.open_runs;
    let ranges = tf::payload_ranges(&input)?;
    let bytes: usize = ranges.iter().map(|r| r.len()).sum();
    let none = || Ok(());

    // Index only.
    b.time(
        Case {
            op: "pt.open",
            lib: "tensorfmt",
            how: "TensorFile::open (map + detect + index)",
            bytes,
            runs: open_runs,
        },
        none,
        || tf::open(&input),
    )?;
    b.time(
        Case {
            op: "pt.open.nodetect",
            lib: "tensorfmt",
            how: "TensorFile::open_with(format: pytorch) (map + index, no detection)",
            bytes,
            runs: open_runs,
        },
        none,
        || tf::open_as(&input, "pytorch"),
    )?;
    #[cfg(feature = "candle")]
    {
        // candle skips what it cannot read (with a message); its rows count only if it
        // indexes every tensor.
        let seen = tensorfmt_benches::candle::open(&input)?
            .tensor_infos()
            .len();
        if seen != ranges.len() {
            return Err(format!(
                "candle indexes {seen} tensors of {}, tensorfmt {}",
                input.display(),
                ranges.len()
            )
            .into());
        }
    }
    #[cfg(feature = "candle")]
    b.time(
        Case {
            op: "pt.open",
            lib: "candle",
            how: "candle_core::pickle::PthTensors::new(path, None)",
            bytes,
            runs: open_runs,
        },
        none,
        || tensorfmt_benches::candle::open(&input),
    )?;

    // Full loads into owned memory, and the memcpy reference.
    b.time(
        Case {
            op: "pt.read.owned",
            lib: "tensorfmt",
            how: "open + read_all(OwnedSink), CRC-32 verified",
            bytes,
            runs,
        },
        none,
        || tf::read_owned(&input),
    )?;
    b.time(
        Case {
            op: "pt.read.owned_nocrc",
            lib: "tensorfmt",
            how: "open_with(skip_checksums) + read_all(OwnedSink)",
            bytes,
            runs,
        },
        none,
        || tf::read_owned_unchecked(&input),
    )?;
    #[cfg(feature = "candle")]
    b.time(
        Case {
            op: "pt.read.owned",
            lib: "candle",
            how: "candle_core::pickle::read_all(path)",
            bytes,
            runs,
        },
        none,
        || tensorfmt_benches::candle::read_all(&input),
    )?;
    memcpy_references(b, "pt", &input, &ranges, bytes)?;

    // The model as a struct: every tensor matched to its field by name, strictly, each a
    // view of the map (torch: `load_state_dict(.., assign=True)` of a `mmap=True` load).
    b.time(
        Case {
            op: "pt.state",
            lib: "tensorfmt",
            how: "BenchModel::load (#[derive(StateDict)], strict, views of the map, CRC-32 verified)",
            bytes,
            runs: open_runs,
        },
        none,
        || Ok(BenchModel::load(&input)?),
    )?;
    let unchecked = tensorfmt::LoadOptions {
        open: tensorfmt::OpenOptions {
            skip_checksums: true,
            ..Default::default()
        },
        ..Default::default()
    };
    b.time(
        Case {
            op: "pt.state_nocrc",
            lib: "tensorfmt",
            how: "BenchModel::load_with(skip_checksums) (strict, views of the map, CRC-32 skipped as torch skips it)",
            bytes,
            runs: open_runs,
        },
        none,
        || Ok(BenchModel::load_with(&input, &unchecked)?),
    )?;

    // Saves of the same tensors, from owned memory.
    let writes = ["pt.write.fsync", "pt.write.nofsync"];
    if !writes.iter().any(|op| b.wanted(op)) || !b.wanted_lib("tensorfmt") {
        return Ok(());
    }
    let tensors = tf::read_owned(&input)?;
    let metas = tf::metas(&tensors)?;
    let refs: Vec<(TensorMeta, &[u8])> = metas
        .into_iter()
        .zip(tensors.iter().map(|t| t.data.as_bytes()))
        .collect();
    tf_saves(b, "pt", "pytorch", &dir.join("out_tf.pt"), &refs, bytes)
}

/// The PyTorch suite's model (`compare_torch.py`'s `state_dict_spec`) as a struct.
#[derive(tensorfmt::StateDict)]
struct BenchModel {
    tok_embeddings: Weight,
    pos_embeddings: Weight,
    layers: Vec<Layer>,
    ln_f: Affine,
    lm_head: Weight,
}

/// A tensor named `weight`.
#[derive(tensorfmt::StateDict)]
struct Weight {
    weight: tensorfmt::Tensor,
}

/// `weight` and `bias`.
#[derive(tensorfmt::StateDict)]
struct Affine {
    weight: tensorfmt::Tensor,
    bias: tensorfmt::Tensor,
}

/// One block of the PyTorch suite's model.
#[derive(tensorfmt::StateDict)]
struct Layer {
    ln_1: Affine,
    attn: Attention,
    ln_2: Affine,
    mlp: Mlp,
}

/// The block's attention projections.
#[derive(tensorfmt::StateDict)]
struct Attention {
    q_proj: Affine,
    k_proj: Affine,
    v_proj: Affine,
    o_proj: Affine,
}

/// The block's MLP.
#[derive(tensorfmt::StateDict)]
struct Mlp {
    fc_in: Affine,
    fc_out: Affine,
}

/// The pickle suite on `in.pkl` (NumPy arrays written by `pickle.dump` in
/// `compare_pickle.py`): the index (open and list the arrays, with and without detection),
/// full load into owned memory and as views of the map, and the memcpy references over the
/// same payload bytes.
fn pickle(b: &mut Bench) -> Result<()> {
    let input = b.args.dir.join("in.pkl");
    if !input.exists() {
        return Ok(());
    }
    let runs = b.args.runs;
    let open_runs = b.args.open_runs;
    let ranges = tf::payload_ranges(&input)?;
    let bytes: usize = ranges.iter().map(|r| r.len()).sum();
    let none = || Ok(());
    b.time(
        Case {
            op: "pkl.open",
            lib: "tensorfmt",
            how: "TensorFile::open (map + detect + index) + names listed",
            bytes,
            runs: open_runs,
        },
        none,
        || tf::open_list(&input, None),
    )?;
    b.time(
        Case {
            op: "pkl.open.nodetect",
            lib: "tensorfmt",
            how: "TensorFile::open_with(format: pickle) (map + index, no detection) + names listed",
            bytes,
            runs: open_runs,
        },
        none,
        || tf::open_list(&input, Some("pickle")),
    )?;
    b.time(
        Case {
            op: "pkl.read.owned",
            lib: "tensorfmt",
            how: "open + read_all(OwnedSink)",
            bytes,
            runs,
        },
        none,
        || tf::read_owned(&input),
    )?;
    b.time(
        Case {
            op: "pkl.read.view",
            lib: "tensorfmt",
            how: "open + load_all: every array as a zero-copy view of the map",
            bytes,
            runs: open_runs,
        },
        none,
        || tf::read_view(&input),
    )?;
    memcpy_references(b, "pkl", &input, &ranges, bytes)
}

/// One timed operation of the objects suite: its name, what it does, its runs, the work.
type ObjectCase<'a> = (&'a str, &'a str, usize, &'a dyn Fn() -> Result<()>);

/// The objects suite on the files of `objects/` (written by `compare_objects.py`: a
/// YOLO checkpoint, `torch.save` of a model, `joblib.dump` of arrays, plain and
/// compressed): for each, the index (open and list the tensors), full load into owned
/// memory and as views, and, where the tensors lie plain in the file, the memcpy
/// references over the same payload bytes.
fn objects(b: &mut Bench) -> Result<()> {
    let dir = b.args.dir.join("objects");
    let Ok(listing) = std::fs::read_dir(&dir) else {
        return Ok(());
    };
    let mut inputs: Vec<PathBuf> = listing
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<_>>()?;
    inputs.sort();
    for input in inputs {
        let stem = input
            .file_name()
            .and_then(|s| s.to_str())
            .unwrap_or_default()
            .replace('.', "_");
        let prefix = format!("obj.{stem}");
        let file = tensorfmt::TensorFile::open(&input)?;
        let bytes: usize = file
            .tensors()
            .iter()
            .map(|t| t.nbytes().unwrap_or(0) as usize)
            .sum();
        let (runs, open_runs) = (b.args.runs, b.args.open_runs);
        let none = || Ok(());
        let cases: [ObjectCase; 3] = [
            (
                "open",
                "TensorFile::open (map + detect + index) + names listed",
                open_runs,
                &|| tf::open_list(&input, None).map(drop),
            ),
            ("read.owned", "open + read_all(OwnedSink)", runs, &|| {
                tf::read_owned(&input).map(drop)
            }),
            (
                "read.view",
                "open + load_all: views of the map where stored plain",
                runs,
                &|| tf::read_view(&input).map(drop),
            ),
        ];
        for (op, how, n, f) in cases {
            let op = format!("{prefix}.{op}");
            b.time(
                Case {
                    op: &op,
                    lib: "tensorfmt",
                    how,
                    bytes,
                    runs: n,
                },
                none,
                f,
            )?;
        }
        if let Ok(ranges) = tf::payload_ranges(&input) {
            memcpy_references(b, &prefix, &input, &ranges, bytes)?;
        }
    }
    Ok(())
}

/// The safetensors suite on `st/in.safetensors` (written by `safetensors.torch.save_file`
/// in `compare_safetensors.py`): index-only open (tensorfmt with and without detection,
/// the safetensors crate, candle), full load into owned memory, the memcpy references over
/// the same payload bytes, and saves of the same tensors (tensorfmt, the crate).
fn safetensors(b: &mut Bench) -> Result<()> {
    let dir = b.args.dir.join("st");
    let input = dir.join("in.safetensors");
    if !input.exists() {
        return Ok(());
    }
    let runs = b.args.runs;
    let open_runs = b.args.open_runs;
    let ranges = tf::payload_ranges(&input)?;
    let bytes: usize = ranges.iter().map(|r| r.len()).sum();
    let count = ranges.len();
    // Every reader must index every tensor for its rows to count.
    let seen = [
        ("tensorfmt", tf::open_list(&input, None)?),
        ("safetensors", st::open(&input)?),
        #[cfg(feature = "candle")]
        ("candle", tensorfmt_benches::candle::st_open(&input)?),
    ];
    for (lib, n) in seen {
        if n != count {
            return Err(format!(
                "{lib} lists {n} tensors of {}, not {count}",
                input.display()
            )
            .into());
        }
    }
    let none = || Ok(());

    // Index only: open and list the tensors, everything dropped inside the timed region.
    b.time(
        Case {
            op: "st.open",
            lib: "tensorfmt",
            how: "TensorFile::open (map + detect + index) + names listed",
            bytes,
            runs: open_runs,
        },
        none,
        || tf::open_list(&input, None),
    )?;
    b.time(
        Case {
            op: "st.open.nodetect",
            lib: "tensorfmt",
            how: "TensorFile::open_with(format: safetensors) (map + index, no detection) + names listed",
            bytes,
            runs: open_runs,
        },
        none,
        || tf::open_list(&input, Some("safetensors")),
    )?;
    b.time(
        Case {
            op: "st.open",
            lib: "safetensors",
            how: "mmap + SafeTensors::deserialize + names()",
            bytes,
            runs: open_runs,
        },
        none,
        || st::open(&input),
    )?;
    #[cfg(feature = "candle")]
    b.time(
        Case {
            op: "st.open",
            lib: "candle",
            how: "candle_core::safetensors::MmapedSafetensors::new(path) + tensors()",
            bytes,
            runs: open_runs,
        },
        none,
        || tensorfmt_benches::candle::st_open(&input),
    )?;

    // Full loads into owned memory, and the memcpy references.
    b.time(
        Case {
            op: "st.read.owned",
            lib: "tensorfmt",
            how: "open + read_all(OwnedSink)",
            bytes,
            runs,
        },
        none,
        || tf::read_owned(&input),
    )?;
    b.time(
        Case {
            op: "st.read.owned",
            lib: "safetensors",
            how: "mmap + SafeTensors::deserialize + every tensor's data().to_vec()",
            bytes,
            runs,
        },
        none,
        || st::read_owned(&input),
    )?;
    #[cfg(feature = "candle")]
    b.time(
        Case {
            op: "st.read.owned",
            lib: "candle",
            how: "MmapedSafetensors::new + load(name, &Device::Cpu) of every tensor",
            bytes,
            runs,
        },
        none,
        || tensorfmt_benches::candle::st_read_all(&input),
    )?;
    b.time(
        Case {
            op: "st.read.view",
            lib: "tensorfmt",
            how: "open + load_all: every tensor as a zero-copy view of the map",
            bytes,
            runs: open_runs,
        },
        none,
        || tf::read_view(&input),
    )?;
    memcpy_references(b, "st", &input, &ranges, bytes)?;

    // Saves of the same tensors, from owned memory.
    let writes = ["st.write.fsync", "st.write.nofsync"];
    if !writes.iter().any(|op| b.wanted(op)) {
        return Ok(());
    }
    let tensors = tf::read_owned(&input)?;
    let metas = tf::metas(&tensors)?;
    let refs: Vec<(TensorMeta, &[u8])> = metas
        .into_iter()
        .zip(tensors.iter().map(|t| t.data.as_bytes()))
        .collect();
    let views = st::views(&refs)?;
    let out = dir.join("out_tf.safetensors");
    tf_saves(b, "st", "safetensors", &out, &refs, bytes)?;
    let out = dir.join("out_st.safetensors");
    b.time(
        Case {
            op: "st.write.fsync",
            lib: "safetensors",
            how: "serialize_to_file (temp file + BufWriter + rename) + fsync",
            bytes,
            runs,
        },
        || fresh(&out),
        || st::save(&out, &views, true),
    )?;
    b.time(
        Case {
            op: "st.write.nofsync",
            lib: "safetensors",
            how: "serialize_to_file (temp file + BufWriter + rename), no fsync",
            bytes,
            runs,
        },
        || fresh(&out),
        || st::save(&out, &views, false),
    )?;
    remove_if_exists(&out)?;
    Ok(())
}

/// The ONNX suite on `onnx_inline/in.onnx` and `onnx_external/in.onnx` (written by
/// onnx in `compare_onnx.py`): open (index only); every initializer into owned memory,
/// into buffers kept from the previous read, and as zero-copy views; and the memcpy
/// references over the same payload bytes (in the model, or in its external data file):
/// into fresh buffers, and into one buffer already faulted in.
fn onnx(b: &mut Bench) -> Result<()> {
    for kind in ["inline", "external"] {
        let input = b.args.dir.join(format!("onnx_{kind}")).join("in.onnx");
        if !input.exists() {
            continue;
        }
        let (data_file, ranges) = tf::payload_file_ranges(&input)?;
        let bytes: usize = ranges.iter().map(|r| r.len()).sum();
        let none = || Ok(());
        b.time(
            Case {
                op: &format!("onnx.{kind}.open"),
                lib: "tensorfmt",
                how: "TensorFile::open (map + detect + index)",
                bytes,
                runs: b.args.open_runs,
            },
            none,
            || tf::open(&input),
        )?;
        b.time(
            Case {
                op: &format!("onnx.{kind}.read.owned"),
                lib: "tensorfmt",
                how: "open + read_all(OwnedSink): every initializer in owned memory",
                bytes,
                runs: b.args.runs,
            },
            none,
            || tf::read_owned(&input),
        )?;
        let reused_op = format!("onnx.{kind}.read.reused");
        if b.wanted(&reused_op) && b.wanted_lib("tensorfmt") {
            let mut sink = tf::ReuseSink::for_file(&tf::open(&input)?)?;
            b.time(
                Case {
                    op: &reused_op,
                    lib: "tensorfmt",
                    how: "open + read_all into buffers kept from the previous read (no allocation, no page fault on them)",
                    bytes,
                    runs: b.args.runs,
                },
                none,
                || sink.read(&tf::open(&input)?),
            )?;
        }
        b.time(
            Case {
                op: &format!("onnx.{kind}.read.view"),
                lib: "tensorfmt",
                how: "open + load_all: every initializer as a zero-copy view of the map",
                bytes,
                runs: b.args.runs,
            },
            none,
            || tf::read_view(&input),
        )?;
        memcpy_references(b, &format!("onnx.{kind}"), &data_file, &ranges, bytes)?;
    }
    Ok(())
}

/// The Caffe2 suite on `caffe2_data.lmdb` (a dataset of TensorProtos records written
/// by `compare_caffe2.py`): the input pipeline (DbInput, batches of `CAFFE2_BATCH`
/// stacked records, one epoch) and the limit, LMDB's own cursor over every record with
/// each value copied into a reused buffer.
fn caffe2(b: &mut Bench) -> Result<()> {
    let input = b.args.dir.join("caffe2_data.lmdb");
    if !input.exists() {
        return Ok(());
    }
    let batch: usize = std::env::var("CAFFE2_BATCH")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64);
    // The bytes both sides move: every record's value.
    let (records, bytes) = raw_scan(&input)?;
    let none = || Ok(());
    b.time(
        Case {
            op: "caffe2.scan.raw",
            lib: "lmdb",
            how: "heed cursor over every record, each value copied into a reused buffer",
            bytes,
            runs: b.args.runs,
        },
        none,
        || raw_scan(&input),
    )?;
    for (prefetch, recycle, op, how) in [
        (
            2usize,
            true,
            "caffe2.pipeline",
            "DbInput, prefetch 2, batch buffers recycled",
        ),
        (
            2,
            false,
            "caffe2.pipeline.loop",
            "DbInput, prefetch 2, a plain for loop (batches dropped: their buffers go back)",
        ),
        (
            0,
            true,
            "caffe2.pipeline.noprefetch",
            "DbInput, no prefetch, buffers recycled",
        ),
    ] {
        b.time(
            Case {
                op,
                lib: "tensorfmt",
                how,
                bytes,
                runs: b.args.runs,
            },
            none,
            || {
                let opts = tensorfmt::caffe2::DbInputOptions {
                    batch_size: batch,
                    prefetch,
                    epochs: Some(1),
                    ..Default::default()
                };
                let mut input = tensorfmt::caffe2::DbInput::open(&input, &opts)?;
                let mut n = 0usize;
                if recycle {
                    while let Some(bt) = input.next() {
                        let bt = bt?;
                        n += bt.tensors[0].info.shape[0] as usize;
                        input.recycle(bt);
                    }
                } else {
                    for bt in input {
                        n += bt?.tensors[0].info.shape[0] as usize;
                    }
                }
                if n != records / batch * batch {
                    return Err(format!("{n} records in batches, {records} in the database").into());
                }
                Ok(n)
            },
        )?;
    }
    Ok(())
}

/// Every value of the LMDB environment `dir` through LMDB's own cursor, each copied
/// into one reused buffer; returns (records, value bytes).
fn raw_scan(dir: &std::path::Path) -> Result<(usize, usize)> {
    use heed::types::Bytes;
    let mut opts = heed::EnvOpenOptions::new().read_txn_without_tls();
    opts.map_size(1 << 40);
    // SAFETY: read-only use of an environment nobody writes during the run.
    let env = unsafe {
        opts.flags(heed::EnvFlags::READ_ONLY | heed::EnvFlags::NO_LOCK);
        opts.open(dir)?
    };
    let rtxn = env.read_txn()?;
    let db: heed::Database<Bytes, Bytes> = env
        .open_database(&rtxn, None)?
        .ok_or("no unnamed database")?;
    let mut buf: Vec<u8> = Vec::new();
    let (mut n, mut bytes) = (0usize, 0usize);
    for item in db.iter(&rtxn)? {
        let (_, v) = item?;
        buf.clear();
        buf.extend_from_slice(v);
        n += 1;
        bytes += v.len();
    }
    std::hint::black_box(&buf);
    Ok((n, bytes))
}

/// Every box of `boxes` (tensor name, offsets, sizes) read from `file` with
/// `TensorFile::load_slice`.
fn slices(
    file: &tensorfmt::TensorFile,
    boxes: &[(String, Vec<u64>, Vec<u64>)],
) -> Result<Vec<tensorfmt::Tensor>> {
    let mut out = Vec::with_capacity(boxes.len());
    for (name, offsets, sizes) in boxes {
        let info = file.tensor(name).ok_or("a tensor listed is gone")?;
        out.push(file.load_slice(info, offsets, sizes)?);
    }
    Ok(out)
}

/// Adds the request counters of `stats` (those of the last timed run) to the last result.
fn with_requests(b: &mut Bench, op: &str, lib: &str, stats: Option<&tensorfmt::object::Stats>) {
    if let (Some(stats), Some(last)) = (stats, b.results.last_mut()) {
        if last["op"] == op && last["lib"] == lib {
            last["requests"] = json!(stats.requests());
            last["received_bytes"] = json!(stats.bytes());
        }
    }
}

/// The distributed suite (`compare_distributed.py`), on `DIR/dist`: `model.safetensors`
/// and `model.pt` (one state dict of at least 1 GiB) opened and loaded from the file and
/// from the tests' S3-protocol server on 127.0.0.1 (s3s-fs, in this process, the files
/// uploaded to it through the S3 API), with the requests each read made and one
/// plain GET of the whole object (the server's limit); `dcp/`, a torch.distributed
/// checkpoint, read as rank 0 of a job of `dcp/world` ranks loads its shard (each tensor
/// split along its first dimension as `Shard(0)` splits it) and read whole.
fn distributed(b: &mut Bench) -> Result<()> {
    use tensorfmt::{OpenOptions, TensorFile};
    let dir = b.args.dir.join("dist");
    if !dir.is_dir() {
        return Ok(());
    }
    let runs = b.args.runs;
    let open_runs = b.args.open_runs;
    let none = || Ok(());
    for (stem, name) in [("st", "model.safetensors"), ("pt", "model.pt")] {
        let local = dir.join(name);
        if !local.exists() {
            continue;
        }
        let server = tensorfmt_tests::s3::server();
        let key = format!("bench/{name}");
        let url = server.url(&key);
        // Uploaded through the S3 API (a multipart upload), untimed: the server then keeps
        // the object's ETag, as a store does, instead of hashing the file at every request.
        let mut upload = tensorfmt::object::Upload::create(&url)?;
        std::io::copy(&mut std::fs::File::open(&local)?, &mut upload)?;
        upload.commit()?;
        let file = tf::open(&local)?;
        let bytes = file
            .tensors()
            .iter()
            .map(|t| t.nbytes().map(|n| n as usize))
            .sum::<tensorfmt::Result<usize>>()?;
        drop(file);
        let s3_open = || -> Result<(TensorFile, std::sync::Arc<tensorfmt::object::Stats>)> {
            Ok(tensorfmt::object::open(&url, &OpenOptions::default())?)
        };

        let op = format!("dist.{stem}.open");
        b.time(
            Case {
                op: &op,
                lib: "tensorfmt",
                how: "TensorFile::open of the file (map + detect + index) + names listed",
                bytes,
                runs: open_runs,
            },
            none,
            || tf::open_list(&local, None),
        )?;
        let mut last = None;
        b.time(
            Case {
                op: &op,
                lib: "tensorfmt-s3",
                how: "tensorfmt::object::open of the s3:// URL (ranged GETs: detect + index) + names listed",
                bytes,
                runs: open_runs,
            },
            none,
            || {
                let (file, stats) = s3_open()?;
                let names: Vec<&str> = file.tensors().iter().map(|t| t.name.as_str()).collect();
                let n = names.len();
                last = Some(stats);
                Ok(n)
            },
        )?;
        with_requests(b, &op, "tensorfmt-s3", last.as_deref());

        let op = format!("dist.{stem}.load");
        b.time(
            Case {
                op: &op,
                lib: "tensorfmt",
                how: "TensorFile::open of the file + read_all into owned memory (OwnedSink)",
                bytes,
                runs,
            },
            none,
            || tf::read_owned(&local),
        )?;
        let mut last = None;
        b.time(
            Case {
                op: &op,
                lib: "tensorfmt-s3",
                how: "tensorfmt::object::open of the s3:// URL + read_all into owned memory \
                      (OwnedSink; concurrent ranged GETs)",
                bytes,
                runs,
            },
            none,
            || {
                let (file, stats) = s3_open()?;
                let mut sink = tensorfmt::runtime::sink::OwnedSink::new();
                file.read_all(&mut sink)?;
                last = Some(stats);
                Ok(sink.into_tensors())
            },
        )?;
        with_requests(b, &op, "tensorfmt-s3", last.as_deref());
        let loc = tensorfmt_object::locate(&url)?;
        let object_len = std::fs::metadata(&local)?.len();
        b.time(
            Case {
                op: &format!("dist.{stem}.get"),
                lib: "object_store",
                how: "the whole object in one GET into memory (the server's limit; not a load)",
                bytes,
                runs,
            },
            none,
            || Ok(tensorfmt_object::read_whole(&loc, object_len)?),
        )?;
    }

    let dcp = dir.join("dcp");
    if dcp.is_dir() {
        let world: u64 = std::fs::read_to_string(dir.join("dcp.world"))?
            .trim()
            .parse()?;
        // Rank 0's box of every tensor: the first ceil(n / world) rows (torch.chunk's
        // split, as Shard(0) places a DTensor), the other dimensions whole.
        let file = tf::open(&dcp)?;
        let boxes: Vec<(String, Vec<u64>, Vec<u64>)> = file
            .tensors()
            .iter()
            .map(|t| {
                let mut sizes = t.shape.clone();
                if let Some(rows) = sizes.first_mut() {
                    *rows = (*rows).min(rows.div_ceil(world));
                }
                (t.name.clone(), vec![0; t.shape.len()], sizes)
            })
            .collect();
        let rank0: usize = file
            .tensors()
            .iter()
            .zip(&boxes)
            .map(|(t, (_, _, sizes))| {
                sizes.iter().product::<u64>() as usize * t.dtype.itemsize().unwrap_or(1)
            })
            .sum();
        let whole = file
            .tensors()
            .iter()
            .map(|t| t.nbytes().map(|n| n as usize))
            .sum::<tensorfmt::Result<usize>>()?;
        drop(file);
        b.time(
            Case {
                op: "dist.dcp.rank0",
                lib: "tensorfmt",
                how: "TensorFile::open of the DCP folder (.metadata unpickled) + load_slice of rank 0's \
                      rows of every tensor (only the chunks and byte ranges they overlap read)",
                bytes: rank0,
                runs,
            },
            none,
            || slices(&tf::open(&dcp)?, &boxes),
        )?;
        // The same from the S3 server: the folder uploaded object by object, read in
        // place (`.metadata`, then the byte ranges of the `.distcp` objects).
        let server = tensorfmt_tests::s3::server();
        let dcp_url = server.url("bench/dcp");
        // As `convert` uploads a folder it writes to a store: `.metadata` last.
        tensorfmt_object::upload_dir(&dcp, &tensorfmt_object::locate(&dcp_url)?, &|name| {
            name == ".metadata"
        })?;
        let mut last = None;
        b.time(
            Case {
                op: "dist.dcp.rank0",
                lib: "tensorfmt-s3",
                how: "tensorfmt::object::open of the DCP folder's s3:// URL (with a trailing /) + load_slice of rank 0's \
                      rows of every tensor (ranged GETs of the .distcp objects)",
                bytes: rank0,
                runs,
            },
            none,
            || {
                // The trailing `/` names a folder: no HEAD of the folder's URL as an
                // object first (which s3s-fs answers with a 500 that the client retries
                // for seconds; S3 answers 404 at once).
                let folder = format!("{dcp_url}/");
                let (file, stats) = tensorfmt::object::open(&folder, &OpenOptions::default())?;
                let out = slices(&file, &boxes)?;
                last = Some(stats);
                Ok(out)
            },
        )?;
        with_requests(b, "dist.dcp.rank0", "tensorfmt-s3", last.as_deref());
        b.time(
            Case {
                op: "dist.dcp.full",
                lib: "tensorfmt",
                how: "TensorFile::open of the DCP folder + read_all into owned memory \
                      (every tensor assembled from its chunks)",
                bytes: whole,
                runs,
            },
            none,
            || tf::read_owned(&dcp),
        )?;
    }
    Ok(())
}

fn main() {
    let result = (|| -> Result<Value> {
        let args = parse_args()?;
        let mut b = Bench {
            args,
            results: Vec::new(),
        };
        npy(&mut b)?;
        open(&mut b)?;
        npz(&mut b, "stored", Compression::Stored)?;
        npz(&mut b, "deflate", Compression::Deflate)?;
        pytorch(&mut b)?;
        onnx(&mut b)?;
        safetensors(&mut b)?;
        pickle(&mut b)?;
        objects(&mut b)?;
        caffe2(&mut b)?;
        distributed(&mut b)?;
        Ok(json!({
            "tool": "tfbench",
            "runs": b.args.runs,
            "open_runs": b.args.open_runs,
            "candle": cfg!(feature = "candle"),
            "results": b.results,
        }))
    })();
    match result {
        Ok(v) => println!("{v:#}"),
        Err(e) => {
            eprintln!("tfbench: error: {e}");
            std::process::exit(1);
        }
    }
}
