//! The `tensorfmt` command line: inspect, convert, verify and diff tensor files.
//!
//! [`run`] takes the arguments and the stream to print to, so tests drive it in process;
//! the `tensorfmt` binary is a thin wrapper around it. [`run_with`] is the same command
//! line over a [`Registry`] of formats: a user's own formats beside the built-in ones.

use std::ffi::OsString;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// `writeln!` that turns a failed write (a closed pipe) into the crate's error.
macro_rules! outln {
    ($out:expr, $($arg:tt)*) => {
        writeln!($out, $($arg)*).map_err(crate::Error::from)?
    };
}
use crate::runtime::hash::{hex, HashSink};
use crate::runtime::sink::{Flow, Sink};
use crate::{Compression, ConvertOptions, DType, OpenOptions, Registry, TensorFile, TensorInfo};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::json;

#[derive(Parser)]
#[command(
    name = "tensorfmt",
    version,
    about = "Read, write and check the tensor files of deep learning"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// List a file's tensors (name, dtype, shape) in file order.
    Inspect {
        /// The file.
        file: PathBuf,
        /// Print one JSON object: {"format", "tensors": [{"name", "dtype", "shape", "sha256"?}]}.
        #[arg(long)]
        json: bool,
        /// Add each tensor's SHA-256 over its elements in C order, little-endian.
        #[arg(long)]
        sha256: bool,
        /// With --json, add "values": [{"name", "value", "repr"}], the non-tensor values of
        /// the stored object (epoch, hyperparameters), as the text output always shows.
        #[arg(long)]
        values: bool,
    },
    /// Convert a file to another format (by --to, else by the output's extension).
    Convert {
        /// Input file.
        input: PathBuf,
        /// Output file (written atomically).
        output: PathBuf,
        /// Output format: one of the format names `formats` lists.
        #[arg(long)]
        to: Option<String>,
        /// Cast every tensor to this dtype (f16 bf16 f32 f64 i8 ... c128).
        #[arg(long)]
        dtype: Option<String>,
        /// Compress container entries (deflate) where the format allows it.
        #[arg(long)]
        compress: bool,
        /// Write tensors as a flat name -> tensor mapping, dropping the nested dicts,
        /// lists and non-tensor values a PyTorch checkpoint otherwise keeps.
        #[arg(long)]
        flatten: bool,
        /// Keep views of shared storages as views (offsets, strides, one shared storage
        /// copied whole) where both formats hold them, instead of contiguous tensors.
        #[arg(long)]
        keep_layout: bool,
        /// Align the tensors' data to N bytes (a power of two, at most 1 GiB), in formats
        /// that can (safetensors: the data starts at a multiple of N, and every tensor
        /// whose size is a multiple of N starts at one; the others at a multiple of
        /// their element size). Refused by formats that cannot.
        #[arg(long, value_name = "N")]
        align: Option<u64>,
        /// The pickle protocol of a `.pkl` written (`pickle` format): 4 (the default,
        /// Python 3.4 and later) or 2 (for old readers, Python 2); others are refused.
        #[arg(long, value_name = "P")]
        pickle_protocol: Option<u8>,
        #[command(flatten)]
        external: ExternalArgs,
    },
    /// Replace tensors of a document (ONNX initializers) with those of another file of
    /// any format, by name; the graph and everything else are kept.
    Replace {
        /// The document whose tensors are replaced (an ONNX model).
        model: PathBuf,
        /// The new tensors (npz, pytorch, onnx, ...), named as in the model.
        weights: PathBuf,
        /// Output file (written atomically; may be the model itself).
        output: PathBuf,
        /// Let a replacement change its tensor's shape or dtype.
        #[arg(long)]
        allow_reshape: bool,
        #[command(flatten)]
        external: ExternalArgs,
    },
    /// Check structure and checksums; exits non-zero on damage.
    Verify {
        /// The file.
        file: PathBuf,
    },
    /// List the formats this command reads and writes: name and extensions.
    Formats,
    /// Compare two files' tensors by name; exits 1 when they differ.
    Diff {
        /// First file.
        a: PathBuf,
        /// Second file.
        b: PathBuf,
        /// Absolute tolerance.
        #[arg(long, default_value_t = 0.0)]
        atol: f64,
        /// Relative tolerance (of the second file's value).
        #[arg(long, default_value_t = 0.0)]
        rtol: f64,
    },
}

/// Where tensors go in formats with external data (ONNX).
#[derive(clap::Args)]
struct ExternalArgs {
    /// auto: inline, or beside the model in <file>.data past 2 GiB (and a rewritten
    /// model's external tensors stay external); inline; one-file: tensors of at least
    /// --external-threshold bytes in one file beside the model; per-tensor: a file each.
    #[arg(long, value_name = "MODE", default_value = "auto")]
    external: String,
    /// Smallest tensor (bytes) moved to external data by one-file and per-tensor.
    #[arg(long, value_name = "BYTES", default_value_t = 1024)]
    external_threshold: u64,
    /// The one external file's name (default: the output's file name + ".data").
    #[arg(long, value_name = "NAME")]
    external_location: Option<String>,
    /// Offsets in the one external file are multiples of this (0: packed).
    #[arg(long, value_name = "BYTES", default_value_t = 4096)]
    external_align: u64,
}

impl ExternalArgs {
    fn policy(&self) -> crate::Result<crate::ExternalData> {
        Ok(match self.external.as_str() {
            "auto" => crate::ExternalData::Auto,
            "inline" => crate::ExternalData::Inline,
            "one-file" | "per-tensor" => crate::ExternalData::External {
                per_tensor: self.external == "per-tensor",
                location: self.external_location.clone(),
                threshold: self.external_threshold,
                align: self.external_align,
            },
            other => {
                return Err(crate::Error::from(crate::ErrorKind::Unsupported(format!(
                    "--external {other}: one of auto, inline, one-file, per-tensor"
                ))))
            }
        })
    }
}

fn progress_bar(total: u64, what: &str) -> ProgressBar {
    let bar = ProgressBar::new(total);
    if std::io::stderr().is_terminal() {
        bar.set_style(
            ProgressStyle::with_template("{msg} [{bar:30}] {bytes}/{total_bytes} ({eta})")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar.set_message(what.to_string());
    } else {
        bar.set_draw_target(ProgressDrawTarget::hidden());
    }
    bar
}

fn total_bytes(tensors: &[TensorInfo]) -> u64 {
    tensors.iter().map(|t| t.location.len()).sum()
}

/// Forwards to an inner sink and advances a progress bar by the bytes seen.
struct Progress<'a, S> {
    inner: S,
    bar: &'a ProgressBar,
}

impl<S: Sink> Sink for Progress<'_, S> {
    fn begin(&mut self, info: &TensorInfo) -> crate::Result<Flow> {
        self.inner.begin(info)
    }
    fn keeps_views(&self) -> bool {
        self.inner.keeps_views()
    }
    fn chunk(&mut self, bytes: &[u8]) -> crate::Result<()> {
        self.bar.inc(bytes.len() as u64);
        self.inner.chunk(bytes)
    }
    fn end(&mut self, info: &TensorInfo) -> crate::Result<Flow> {
        self.inner.end(info)
    }
}

/// The default options of opening a file of one of `registry`'s formats.
fn open_options(registry: &Registry) -> OpenOptions {
    OpenOptions {
        registry: registry.clone(),
        ..Default::default()
    }
}

/// Opens `path` as a file of one of `registry`'s formats.
fn open(registry: &Registry, path: &PathBuf) -> crate::Result<TensorFile> {
    TensorFile::open_with(path, &open_options(registry))
}

fn inspect(
    registry: &Registry,
    out: &mut dyn Write,
    path: &PathBuf,
    as_json: bool,
    with_sha: bool,
    with_values: bool,
) -> crate::Result<()> {
    let file = open(registry, path)?;
    // The non-tensor values of the stored object; a tree too large to expand is noted,
    // not fatal (the tensors are listed all the same).
    let structure = match file.structure() {
        Ok(tree) => Ok(tree),
        Err(e) if matches!(e.kind, crate::ErrorKind::Limit { .. }) => Err(e),
        Err(e) => return Err(e),
    };
    let hashes = if with_sha {
        let bar = progress_bar(total_bytes(file.tensors()), "hashing");
        let mut sink = Progress {
            inner: HashSink::default(),
            bar: &bar,
        };
        file.read_all(&mut sink)?;
        bar.finish_and_clear();
        Some(sink.inner.digests)
    } else {
        None
    };
    if as_json {
        let tensors: Vec<serde_json::Value> = file
            .tensors()
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let mut o = json!({ "name": t.name, "dtype": t.dtype.name(), "shape": t.shape });
                if let Some(h) = &hashes {
                    o["sha256"] = json!(hex(&h[i].1));
                }
                o
            })
            .collect();
        let mut doc = json!({ "format": file.format(), "tensors": tensors });
        if with_values {
            let values: Vec<serde_json::Value> = match structure {
                Ok(Some(tree)) => listed_values(&file, &tree)
                    .into_iter()
                    .map(|(name, v)| json!({ "name": name, "value": node_json(v), "repr": v.to_string() }))
                    .collect(),
                Ok(None) => Vec::new(),
                Err(e) => return Err(e),
            };
            doc["values"] = json!(values);
        }
        outln!(out, "{}", doc);
    } else {
        outln!(
            out,
            "{}: {} ({} tensors)",
            path.display(),
            file.format(),
            file.tensors().len()
        );
        let width = file
            .tensors()
            .iter()
            .map(|t| t.name.len())
            .max()
            .unwrap_or(4)
            .max(4);
        if !file.tensors().is_empty() {
            let head = format!(
                "  {:width$}  {:8}  {:20}  {}",
                "name",
                "dtype",
                "shape",
                if hashes.is_some() { "sha256" } else { "" }
            );
            outln!(out, "{}", head.trim_end());
        }
        for (i, t) in file.tensors().iter().enumerate() {
            let shape = format!("{:?}", t.shape);
            let mut line = format!("  {:width$}  {:8}  {:20}", t.name, t.dtype.name(), shape);
            if let Some(h) = &hashes {
                line.push_str("  ");
                line.push_str(&hex(&h[i].1));
            }
            outln!(out, "{}", line.trim_end());
        }
        match &structure {
            Ok(Some(tree)) => {
                let values = listed_values(&file, tree);
                if !values.is_empty() {
                    outln!(out, "values:");
                    for (name, v) in values {
                        let name = if name.is_empty() { "<root>" } else { &name };
                        outln!(out, "  {} = {}", name, shorten(&v.to_string(), 200));
                    }
                }
            }
            Ok(None) => {}
            Err(e) => outln!(out, "values: not shown ({e})"),
        }
    }
    Ok(())
}

/// The values `inspect` lists, with their names: a format's values beside its tensors
/// (safetensors `__metadata__`, GGUF key/values) each under its name, even where the file
/// holds no tensor; otherwise what the stored object holds besides its tensors.
fn listed_values<'t>(file: &TensorFile, tree: &'t crate::Node) -> Vec<(String, &'t crate::Node)> {
    if file.format_desc().values {
        tree.top_values(&mut Vec::new())
    } else {
        tree.values()
    }
}

/// `s` cut to at most `max` characters, with an ellipsis when cut.
fn shorten(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

/// A value of the stored object as JSON: `None` → null, numbers, strings, lists and tuples
/// → arrays, dicts with text keys → objects (other dicts → arrays of pairs); what has no
/// JSON form (bytes, objects, non-finite floats) → its Python-like text.
fn node_json(n: &crate::Node) -> serde_json::Value {
    use crate::Node;
    match n {
        Node::None => serde_json::Value::Null,
        Node::Bool(b) => json!(b),
        Node::Int(i) => match i64::try_from(*i) {
            Ok(v) => json!(v),
            Err(_) => json!(i.to_string()),
        },
        Node::Float(x) if x.is_finite() => json!(x),
        Node::Typed { value, .. } => node_json(value),
        Node::Str(s) => json!(s),
        Node::List(v) | Node::Tuple(v) => json!(v.iter().map(node_json).collect::<Vec<_>>()),
        Node::Dict(e) if e.iter().all(|(k, _)| matches!(k, Node::Str(_))) => {
            let mut m = serde_json::Map::new();
            for (k, v) in e {
                if let Node::Str(k) = k {
                    m.insert(k.clone(), node_json(v));
                }
            }
            serde_json::Value::Object(m)
        }
        Node::Dict(e) => json!(e
            .iter()
            .map(|(k, v)| json!([node_json(k), node_json(v)]))
            .collect::<Vec<_>>()),
        other => json!(other.to_string()),
    }
}

fn verify(registry: &Registry, out: &mut dyn Write, path: &PathBuf) -> crate::Result<()> {
    let file = open(registry, path)?;
    let bar = progress_bar(total_bytes(file.tensors()), "verifying");
    let mut sink = Progress {
        inner: HashSink::default(),
        bar: &bar,
    };
    file.read_all(&mut sink)?;
    let members = file.verify_container()?;
    bar.finish_and_clear();
    let container = if members > 0 {
        format!(", {members} zip members checked")
    } else {
        String::new()
    };
    outln!(
        out,
        "ok: {} ({}), {} tensors, {} bytes of tensor data read and checked{container}",
        path.display(),
        file.format(),
        file.tensors().len(),
        total_bytes(file.tensors())
    );
    Ok(())
}

fn diff(
    registry: &Registry,
    out: &mut dyn Write,
    a: &PathBuf,
    b: &PathBuf,
    atol: f64,
    rtol: f64,
) -> crate::Result<bool> {
    use crate::runtime::convert::{to_c_order, to_f64};
    let fa = open(registry, a)?;
    let fb = open(registry, b)?;
    let mut same = true;
    for ta in fa.tensors() {
        let Some(tb) = fb.tensor(&ta.name) else {
            outln!(out, "only in {}: {}", a.display(), ta.name);
            same = false;
            continue;
        };
        if ta.shape != tb.shape {
            outln!(out, "{}: shape {:?} vs {:?}", ta.name, ta.shape, tb.shape);
            same = false;
            continue;
        }
        if ta.dtype != tb.dtype {
            outln!(out, "{}: dtype {} vs {}", ta.name, ta.dtype, tb.dtype);
            same = false;
        }
        let (xa, xb) = (fa.load_info(ta)?, fb.load_info(tb)?);
        let da = to_c_order(ta, xa.data.as_bytes())?;
        let db = to_c_order(tb, xb.data.as_bytes())?;
        let va = to_f64(&da, ta.dtype, ta.byte_order)?;
        let vb = to_f64(&db, tb.dtype, tb.byte_order)?;
        let mut bad = 0usize;
        let mut worst = 0f64;
        for (x, y) in va.iter().zip(&vb) {
            let close = |p: f64, q: f64| {
                (p.is_nan() && q.is_nan()) || p == q || (p - q).abs() <= atol + rtol * q.abs()
            };
            if !(close(x.0, y.0) && close(x.1, y.1)) {
                bad += 1;
                worst = worst.max((x.0 - y.0).abs()).max((x.1 - y.1).abs());
            }
        }
        if bad > 0 {
            outln!(
                out,
                "{}: {bad} of {} elements differ (max abs difference {worst})",
                ta.name,
                va.len()
            );
            same = false;
        }
    }
    for tb in fb.tensors() {
        if fa.tensor(&tb.name).is_none() {
            outln!(out, "only in {}: {}", b.display(), tb.name);
            same = false;
        }
    }
    if same {
        outln!(out, "same: {} tensors", fa.tensors().len());
    }
    Ok(same)
}

/// Runs the command line given by `args` (the first item is the program name), printing
/// results to `out` and progress and notes to standard error. Returns the exit code:
/// 0 on success, 1 when `verify` finds damage or `diff` finds differences, or on an
/// error (whose message names the file, entry, field and offset).
///
/// The formats are the built-in ones; [`run_with`] takes others.
pub fn run(args: impl IntoIterator<Item = OsString>, out: &mut dyn Write) -> ExitCode {
    run_with(&Registry::builtin(), args, out)
}

/// [`run`] over the formats of `registry`: every command (`inspect`, `convert`, `verify`,
/// `diff`, `replace`, `formats`) opens, detects and writes them. A crate with formats of
/// its own gets the whole command line for them, and for the built-in ones, from a
/// `main` like this one:
///
/// ```no_run
/// // #[derive(tensorfmt::TensorFormat)]
/// // #[tensorfmt(schema = "fmt/myformat.fmt")]
/// // struct MyFormat;
///
/// fn main() -> std::process::ExitCode {
/// #   let my_format = tensorfmt::format_named("npy").unwrap();
///     // `&MyFormat::DESC` in place of `my_format`.
///     let registry = tensorfmt::Registry::builtin().with(my_format);
///     let mut out = std::io::stdout().lock();
///     tensorfmt::cli::run_with(&registry, std::env::args_os(), &mut out)
/// }
/// ```
pub fn run_with(
    registry: &Registry,
    args: impl IntoIterator<Item = OsString>,
    out: &mut dyn Write,
) -> ExitCode {
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    match dispatch(registry, cli, out) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

fn dispatch(registry: &Registry, cli: Cli, out: &mut dyn Write) -> crate::Result<ExitCode> {
    match cli.command {
        Command::Inspect {
            file,
            json,
            sha256,
            values,
        } => inspect(registry, out, &file, json, sha256, values)?,
        Command::Convert {
            input,
            output,
            to,
            dtype,
            compress,
            flatten,
            keep_layout,
            align,
            pickle_protocol,
            external,
        } => {
            let dtype = match dtype {
                Some(d) => Some(DType::from_name(&d).ok_or_else(|| {
                    let known: Vec<&str> = DType::ALL.iter().map(|t| t.name()).collect();
                    crate::Error::from(crate::ErrorKind::Unsupported(format!(
                        "unknown dtype '{d}' for --dtype; the dtypes are {}",
                        known.join(", ")
                    )))
                })?),
                None => None,
            };
            let mut options = ConvertOptions {
                to,
                dtype,
                flatten,
                keep_layout,
                open: open_options(registry),
                ..Default::default()
            };
            if compress {
                options.write.compression = Some(Compression::Deflate);
            }
            options.write.external = external.policy()?;
            options.write.align = align;
            options.write.pickle_protocol = pickle_protocol;
            let bar = progress_bar(0, "converting");
            if std::io::stderr().is_terminal() {
                bar.set_style(
                    ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} tensors")
                        .unwrap_or_else(|_| ProgressStyle::default_bar()),
                );
            }
            let summary = crate::convert(&input, &output, &options, |done, total| {
                bar.set_length(total as u64);
                bar.set_position(done as u64);
            })?;
            bar.finish_and_clear();
            eprintln!(
                "wrote {} ({}): {} tensors, {} bytes, from {}",
                output.display(),
                summary.to,
                summary.tensors,
                summary.bytes,
                summary.from
            );
            if !summary.dropped.is_empty() {
                let n = summary.dropped.len();
                eprintln!(
                    "note: dropped {n} non-tensor value{}{}: {}",
                    if n == 1 { "" } else { "s" },
                    if flatten { " (--flatten)" } else { "" },
                    shorten(&summary.dropped.join(", "), 200)
                );
            }
        }
        Command::Replace {
            model,
            weights,
            output,
            allow_reshape,
            external,
        } => {
            let new = open(registry, &weights)?;
            let mut loaded = Vec::with_capacity(new.tensors().len());
            for info in new.tensors() {
                let t = new.load_info(info)?;
                loaded.push((info.clone(), t));
            }
            let mut prepared = Vec::with_capacity(loaded.len());
            for (info, t) in &loaded {
                let (mut meta, bytes) = crate::prepare_for_write(info, t.data.as_bytes(), None)?;
                let bytes = if meta.order == crate::Order::Fortran
                    || meta.byte_order == crate::ByteOrder::Big
                {
                    let c = tensorfmt_runtime::convert::to_c_order(info, t.data.as_bytes())?;
                    let le = tensorfmt_runtime::convert::cast(
                        &c,
                        info.dtype,
                        info.byte_order,
                        info.dtype,
                    )?;
                    meta.order = crate::Order::C;
                    meta.byte_order = crate::ByteOrder::Little;
                    std::borrow::Cow::Owned(le)
                } else {
                    bytes
                };
                prepared.push((meta, bytes));
            }
            let options = crate::RewriteOptions {
                write: crate::WriteOptions {
                    external: external.policy()?,
                    ..Default::default()
                },
                allow_reshape,
                open: open_options(registry),
                ..Default::default()
            };
            let s = crate::replace_tensors(
                &model,
                &output,
                prepared.iter().map(|(m, b)| (m.clone(), &b[..])),
                &options,
            )?;
            eprintln!(
                "wrote {}: {} tensors replaced, {} moved, {} kept",
                output.display(),
                s.replaced,
                s.moved,
                s.kept
            );
        }
        Command::Verify { file } => verify(registry, out, &file)?,
        Command::Formats => {
            for f in registry.formats() {
                let exts: Vec<String> = f.extensions.iter().map(|e| format!(".{e}")).collect();
                let line = format!("{:16} {}", f.name, exts.join(" "));
                outln!(out, "{}", line.trim_end());
            }
        }
        Command::Diff { a, b, atol, rtol } => {
            if !diff(registry, out, &a, &b, atol, rtol)? {
                return Ok(ExitCode::from(1));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
