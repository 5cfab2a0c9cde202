//! The `tensorfmt` command line: inspect, convert, verify and diff tensor files.
//!
//! [`run`] takes the arguments and the stream to print to, so tests drive it in process;
//! the `tensorfmt` binary is a thin wrapper around it. [`run_with`] is the same command
//! line over a [`Registry`] of formats: a user's own formats beside the built-in ones.

use std::ffi::OsString;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

/// `writeln!` that turns a failed write (a closed pipe) into the crate's error.
macro_rules! outln {
    ($out:expr, $($arg:tt)*) => {
        writeln!($out, $($arg)*).map_err(crate::Error::from)?
    };
}
use crate::runtime::error::{escape_controls, escape_name, escape_name_within, needs_escape};
use crate::runtime::hash::{hex, HashSink};
use crate::runtime::sink::{Flow, Sink};
use crate::{
    Compression, ConvertOptions, DType, Limits, OpenOptions, Registry, TensorFile, TensorInfo,
};
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
    #[command(flatten)]
    inputs: InputArgs,
}

/// How every command reads its input files.
#[derive(clap::Args, Clone)]
struct InputArgs {
    /// Read the input files as this format (a name `formats` lists) instead of detecting
    /// it: a damaged file then gets that format's own error. For `replace`, the weights'
    /// format (the model is detected).
    #[arg(long, global = true, value_name = "NAME")]
    format: Option<String>,
    /// Longest npy header read, in characters (10000 by default: NumPy's
    /// max_header_size, past which numpy.load refuses a header too).
    #[arg(long, global = true, value_name = "CHARS")]
    max_header_size: Option<u64>,
    /// Largest size in C order, in bytes, of a view whose elements take more than its
    /// storage (a stride-0 `expand`, an overlapping `as_strided`) that is hashed,
    /// verified, compared or written; such views past it are refused (default 16 GiB).
    #[arg(long, global = true, value_name = "BYTES")]
    max_view_bytes: Option<u64>,
    /// Most decompressed bytes that the tensors read whole from one input (a database
    /// record's, one reordered or compared whole) hold in memory at once; by default the
    /// larger of 256 MiB and 2048 times the input's size. Tensors streamed are not held.
    #[arg(long, global = true, value_name = "BYTES")]
    max_inflated_bytes: Option<u64>,
    /// Most memory that one pickle's objects may take: what the reader holds (its stack,
    /// memo and objects, charged as they are made), then the value and the tree of its
    /// structure (values shared through its memo count at every reference); by default
    /// 128 MiB and a byte per byte of the pickle. A pickle refused for it names the
    /// opcode's offset; raise it for a checkpoint that you trust.
    #[arg(long, global = true, value_name = "BYTES")]
    max_tree_bytes: Option<u64>,
    /// Most memory that the tensors one input lists may take, each charged 2 KiB; by
    /// default 128 MiB and 16 bytes per byte of the input (65,536 tensors and one per
    /// 128 bytes). Raise it for a file of many tiny tensors refused for this limit.
    #[arg(long, global = true, value_name = "BYTES")]
    max_tensor_bytes: Option<u64>,
    /// Refuse every pickle global outside the format's allowlist, as
    /// `torch.load(weights_only=True)` does. By default a class or function the format
    /// does not know is read as an inert object (its name, arguments and state
    /// recorded; nothing imported or run), so that whole models and Python objects open.
    #[arg(long, global = true)]
    weights_only: bool,
}

#[derive(Subcommand)]
enum Command {
    /// List a file's tensors (name, dtype, shape) in file order. Names are printed with
    /// control, format and invisible characters escaped (`\x1b`, `\u{61c}`), a name of
    /// more than 256 characters cut there; `--json` gives them whole.
    Inspect {
        /// The file (a sharded checkpoint: its index, or the folder holding it).
        file: PathBuf,
        /// Print one JSON object: {"format", "tensors": [{"name", "dtype", "shape",
        /// "sha256"?}], "shards"?: [file names of a sharded checkpoint]}. Control, format
        /// and invisible characters are written as JSON escapes (`\u061c`).
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
        /// Input file (a sharded checkpoint: its index, or the folder holding it).
        input: PathBuf,
        /// Output file (written atomically); an index's name (*.safetensors.index.json,
        /// *.bin.index.json) writes a sharded checkpoint.
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
        /// Write a sharded checkpoint as Hugging Face does, into the folder OUTPUT (or
        /// the one holding OUTPUT, an index such as DIR/model.safetensors.index.json):
        /// shards of at most SIZE bytes (5GB, 500MB, 2GiB, or a number of bytes),
        /// safetensors unless --to pytorch. What the folder holds besides the checkpoint
        /// is kept.
        #[arg(long, value_name = "SIZE")]
        max_shard_size: Option<String>,
        /// Write a torch.distributed checkpoint (--to torch-dcp, the folder OUTPUT) as
        /// the N ranks of a job save one: each tensor sharded along its first dimension,
        /// a `__<rank>_0.distcp` file per rank and `.metadata` (1 by default).
        #[arg(long, value_name = "N")]
        world_size: Option<u64>,
        /// Most bytes of tensor data the output may hold; by default the larger of 256 MiB
        /// and 16 times the input's tensor data, bytes that several tensors share (one
        /// array referenced again and again through a pickle's memo, views of one
        /// storage) counted once. A larger output is refused before anything is written.
        #[arg(long, value_name = "BYTES")]
        max_output_bytes: Option<u64>,
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
    /// Print a completion script for SHELL (bash, zsh, fish, elvish, powershell), e.g.
    /// `tensorfmt completions bash > ~/.local/share/bash-completion/completions/tensorfmt`.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff), e.g. `tensorfmt man > ~/.local/share/man/man1/tensorfmt.1`.
    Man,
    /// Scan the pickles of files for what loading them would import and call (nothing is
    /// run); exits 0 when safe, 1 when globals are needed, 2 when dangerous or unverifiable.
    ///
    /// Pickle files, PyTorch checkpoints (zip, legacy, TorchScript; nested
    /// `_load_from_bytes` streams), joblib files, a torch.distributed checkpoint's folder.
    /// Prints each file's verdict (data only, weights-only, needs globals, cannot verify,
    /// dangerous), then each global with its count and offsets, and each dangerous call
    /// with its offset; weights-only: torch.load(weights_only=True) of torch 2.15.0
    /// accepts it.
    ///
    /// Exit codes:
    /// 0 when every file is data only or weights-only; 1 when one needs globals (none
    /// dangerous); 2 when one is dangerous or cannot be verified (unreadable, truncated,
    /// malformed, past a limit); 64 for a command line that does not parse.
    #[cfg(feature = "pytorch")]
    Scan {
        /// The files (or torch.distributed checkpoint folders) to scan.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// Print one JSON document: {"verdict", "exit_code", "files": [{"path", "kind",
        /// "verdict", "exit_code", "torch_weights_only", "pickles": [{"where", "verdict",
        /// "globals", "calls", "unresolved", "faults", ...}], "findings"}]}.
        #[arg(long)]
        json: bool,
    },
    /// Compare two files' tensors by name, element by element in their own types; exits
    /// 0 when they are the same, 1 when they differ, 2 on an error.
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
    /// The one external file's name, a file that must not exist (default: a fresh name
    /// per save, the output's file name + ".<pid>-<random>.data").
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
            ProgressStyle::with_template(
                "{msg} [{bar:30}] {bytes}/{total_bytes} {binary_bytes_per_sec} ({eta})",
            )
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

/// The options of opening a file of one of `registry`'s formats, as `inputs` say.
fn open_options(registry: &Registry, inputs: &InputArgs) -> OpenOptions {
    OpenOptions {
        registry: registry.clone(),
        format: inputs.format.clone(),
        limits: inputs.limits(),
        ..Default::default()
    }
}

impl InputArgs {
    /// The reading limits these options set (the defaults otherwise).
    fn limits(&self) -> Limits {
        let mut limits = Limits::default();
        if let Some(n) = self.max_header_size {
            limits.max_literal_chars = n;
        }
        if let Some(n) = self.max_view_bytes {
            limits.max_view_bytes = n;
        }
        if let Some(n) = self.max_inflated_bytes {
            limits.max_inflated_bytes = Some(n);
        }
        if let Some(n) = self.max_tree_bytes {
            limits.max_tree_bytes = Some(n);
        }
        if let Some(n) = self.max_tensor_bytes {
            limits.max_tensor_bytes = Some(n);
        }
        limits.weights_only = self.weights_only;
        limits
    }
}

/// Opens `path` as a file of one of `registry`'s formats.
fn open(registry: &Registry, inputs: &InputArgs, path: &PathBuf) -> crate::Result<TensorFile> {
    TensorFile::open_with(path, &open_options(registry, inputs))
}

/// A path as it is safe to print ([`escape_controls`]).
fn shown(path: &std::path::Path) -> String {
    escape_controls(&path.display().to_string()).into_owned()
}

fn inspect(
    registry: &Registry,
    inputs: &InputArgs,
    out: &mut dyn Write,
    path: &PathBuf,
    as_json: bool,
    with_sha: bool,
    with_values: bool,
) -> crate::Result<()> {
    let file = open(registry, inputs, path)?;
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
            inner: HashSink::with_max_view_bytes(inputs.limits().max_view_bytes),
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
        if let Some(shards) = file.shards() {
            doc["shards"] = json!(shards.iter().map(|s| s.name.as_str()).collect::<Vec<_>>());
        }
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
        outln!(out, "{}", terminal_safe_json(&doc));
    } else {
        let shards = match file.shards() {
            Some(s) => format!(" in {} shards", s.len()),
            None => String::new(),
        };
        outln!(
            out,
            "{}: {}{} ({} tensors)",
            shown(path),
            file.format(),
            shards,
            file.tensors().len()
        );
        // Names as read from the file may hold escapes and newlines: printed escaped, and
        // cut past `NAME_SHOWN` characters. The column is as wide as the longest name of
        // at most `NAME_COLUMN` characters; a longer name pushes the rest of its line right.
        let names: Vec<_> = file
            .tensors()
            .iter()
            .map(|t| escape_name_within(&t.name, NAME_SHOWN))
            .collect();
        let width = names
            .iter()
            .map(|n| n.chars().count())
            .filter(|&n| n <= NAME_COLUMN)
            .max()
            .unwrap_or(4)
            .max(4);
        if !file.tensors().is_empty() {
            let head = format!(
                "  {:width$}  {:8}  {:20}  {:>10}  {}",
                "name",
                "dtype",
                "shape",
                "size",
                if hashes.is_some() { "sha256" } else { "" }
            );
            outln!(out, "{}", head.trim_end());
        }
        for (i, t) in file.tensors().iter().enumerate() {
            let shape = format!("{:?}", t.shape);
            let mut line = format!(
                "  {:width$}  {:8}  {:20}  {:>10}",
                names[i],
                t.dtype.name(),
                shape,
                human_bytes(tensor_bytes(t))
            );
            if let Some(h) = &hashes {
                line.push_str("  ");
                line.push_str(&hex(&h[i].1));
            }
            outln!(out, "{}", line.trim_end());
        }
        for line in totals(file.tensors()) {
            outln!(out, "{}", line);
        }
        match &structure {
            Ok(Some(tree)) => {
                let values = listed_values(&file, tree);
                if !values.is_empty() {
                    outln!(out, "values:");
                    let total = values.len();
                    // A whole model holds thousands (every layer's settings): the first
                    // ones, unless `--values` asks for all.
                    let shown = if with_values { total } else { VALUES_SHOWN };
                    for (name, v) in values.into_iter().take(shown) {
                        let name = if name.is_empty() {
                            "<root>".into()
                        } else {
                            escape_name_within(&name, NAME_SHOWN)
                        };
                        let value = shorten(&v.to_string(), 200);
                        outln!(out, "  {} = {}", name, escape_controls(&value));
                    }
                    if total > shown {
                        outln!(
                            out,
                            "  ... and {} more (--values shows every one)",
                            total - shown
                        );
                    }
                }
            }
            Ok(None) => {}
            Err(e) => outln!(
                out,
                "values: not shown ({})",
                escape_controls(&e.to_string())
            ),
        }
    }
    Ok(())
}

/// The widest the name column of `inspect`'s table is padded to, in characters.
const NAME_COLUMN: usize = 96;

/// The most characters of a name that `inspect`'s table shows: a longer name is cut there,
/// saying how long it is ([`escape_name_within`]); `--json` gives every name whole.
const NAME_SHOWN: usize = 256;

/// `doc` as one line of JSON that is safe to print to a terminal and reads back as the
/// same value: besides what JSON escapes, every character [`needs_escape`] names (DEL, C1
/// controls, bidirectional and other format characters) is written as a `\uXXXX` escape,
/// which every JSON reader decodes to the character itself. Such characters can stand in
/// a JSON text only inside its strings, where the escape means them.
fn terminal_safe_json(doc: &serde_json::Value) -> String {
    use std::fmt::Write as _;
    let text = doc.to_string();
    let bytes = text.as_bytes();
    let (mut out, mut start, mut i) = (String::new(), 0, 0);
    while i < bytes.len() {
        // JSON escapes the ASCII controls but DEL; other characters are looked at whole.
        if bytes[i] < 0x7f {
            i += 1;
            continue;
        }
        let c = text[i..].chars().next().unwrap_or_default();
        if needs_escape(c) {
            out.push_str(&text[start..i]);
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                let _ = write!(out, "\\u{unit:04x}");
            }
            start = i + c.len_utf8();
        }
        i += c.len_utf8();
    }
    if start == 0 {
        return text;
    }
    out.push_str(&text[start..]);
    out
}

/// A tensor's size in bytes: its elements' (a string tensor's stored bytes).
fn tensor_bytes(t: &TensorInfo) -> u64 {
    t.nbytes().unwrap_or_else(|_| t.location.len())
}

/// `n` bytes as people read them: `512 B`, `1.5 KiB`, `3.2 GiB`.
fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

/// The lines under `inspect`'s table: per dtype (when there are several) the tensors,
/// parameters (elements) and bytes, then the file's total.
fn totals(tensors: &[TensorInfo]) -> Vec<String> {
    if tensors.is_empty() {
        return Vec::new();
    }
    let mut by_dtype: Vec<(DType, u64, u64, u64)> = Vec::new();
    for t in tensors {
        let numel = t.numel().unwrap_or(0);
        match by_dtype.iter_mut().find(|(d, ..)| *d == t.dtype) {
            Some(e) => {
                e.1 += 1;
                e.2 = e.2.saturating_add(numel);
                e.3 = e.3.saturating_add(tensor_bytes(t));
            }
            None => by_dtype.push((t.dtype, 1, numel, tensor_bytes(t))),
        }
    }
    let line = |count: u64, params: u64, bytes: u64| {
        format!(
            "{count} tensor{}, {} parameter{}, {}",
            if count == 1 { "" } else { "s" },
            indicatif::HumanCount(params),
            if params == 1 { "" } else { "s" },
            human_bytes(bytes)
        )
    };
    let (count, params, bytes) = by_dtype.iter().fold((0u64, 0u64, 0u64), |a, e| {
        (a.0 + e.1, a.1.saturating_add(e.2), a.2.saturating_add(e.3))
    });
    if let [(dtype, ..)] = by_dtype[..] {
        return vec![format!("total: {} ({dtype})", line(count, params, bytes))];
    }
    let mut out: Vec<String> = by_dtype
        .iter()
        .map(|(d, c, p, b)| format!("  {:<6}{}", format!("{d}:"), line(*c, *p, *b)))
        .collect();
    out.push(format!("total: {}", line(count, params, bytes)));
    out
}

/// The most values `inspect` prints without `--values`.
const VALUES_SHOWN: usize = 40;

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

fn verify(
    registry: &Registry,
    inputs: &InputArgs,
    out: &mut dyn Write,
    path: &PathBuf,
) -> crate::Result<()> {
    let file = open(registry, inputs, path)?;
    let bar = progress_bar(total_bytes(file.tensors()), "verifying");
    let mut sink = Progress {
        inner: HashSink::with_max_view_bytes(inputs.limits().max_view_bytes),
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
        shown(path),
        file.format(),
        file.tensors().len(),
        total_bytes(file.tensors())
    );
    Ok(())
}

/// Compares two files' tensors by name, streaming: each pair's elements in C order, a
/// block at a time, in their own types ([`crate::runtime::convert::Compare`]). True
/// when they are the same. Tensors of one file that share a name (paths of the stored
/// object that flatten to one name: `{"a.b": x, "a": {"b": y}}`, keys `0` and `"0"`)
/// cannot be paired: each such name is reported with its paths, as a difference.
#[allow(clippy::too_many_arguments)]
fn diff(
    registry: &Registry,
    inputs: &InputArgs,
    out: &mut dyn Write,
    a: &PathBuf,
    b: &PathBuf,
    atol: f64,
    rtol: f64,
) -> crate::Result<bool> {
    let fa = open(registry, inputs, a)?;
    let fb = open(registry, inputs, b)?;
    let mut same = true;
    let (dup_a, dup_b) = (shared_names(&fa), shared_names(&fb));
    for (path, dups) in [(a, &dup_a), (b, &dup_b)] {
        for (name, paths) in dups {
            outln!(
                out,
                "{}: {} tensors of {} have this name ({}); they cannot be paired by name",
                escape_name(name),
                paths.len(),
                shown(path),
                escape_controls(&paths.join(", "))
            );
            same = false;
        }
    }
    let tolerance = if atol != 0.0 || rtol != 0.0 {
        format!(" within --atol {atol} --rtol {rtol}")
    } else {
        String::new()
    };
    for ta in fa.tensors() {
        if dup_a.contains_key(&ta.name) || dup_b.contains_key(&ta.name) {
            continue;
        }
        let Some(tb) = fb.tensor(&ta.name) else {
            outln!(out, "only in {}: {}", shown(a), escape_name(&ta.name));
            same = false;
            continue;
        };
        if ta.shape != tb.shape {
            let name = escape_name(&ta.name);
            outln!(out, "{}: shape {:?} vs {:?}", name, ta.shape, tb.shape);
            same = false;
            continue;
        }
        let c = compare(&fa, ta, &fb, tb, atol, rtol)?;
        let differ = || {
            format!(
                "{} of {} elements differ (max abs difference {})",
                c.differ, c.compared, c.worst
            )
        };
        if ta.dtype != tb.dtype {
            same = false;
            if c.differ == 0 {
                outln!(
                    out,
                    "{}: dtype {} vs {}; the values agree{tolerance}",
                    escape_name(&ta.name),
                    ta.dtype,
                    tb.dtype
                );
            } else {
                outln!(
                    out,
                    "{}: dtype {} vs {}, and {}{tolerance}",
                    escape_name(&ta.name),
                    ta.dtype,
                    tb.dtype,
                    differ()
                );
            }
        } else if c.differ > 0 {
            outln!(out, "{}: {}", escape_name(&ta.name), differ());
            same = false;
        }
    }
    for tb in fb.tensors() {
        if fa.tensor(&tb.name).is_none() && !dup_b.contains_key(&tb.name) {
            outln!(out, "only in {}: {}", shown(b), escape_name(&tb.name));
            same = false;
        }
    }
    if same {
        outln!(out, "same: {} tensors", fa.tensors().len());
    }
    Ok(same)
}

/// The names that several tensors of `file` share, each with the paths of those tensors
/// in the stored object (`["a"]["b"]`), or their positions in the file where it stores
/// none.
fn shared_names(file: &TensorFile) -> std::collections::BTreeMap<String, Vec<String>> {
    let mut count: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for t in file.tensors() {
        *count.entry(t.name.as_str()).or_default() += 1;
    }
    let mut shared: std::collections::BTreeMap<String, Vec<String>> = count
        .into_iter()
        .filter(|&(_, n)| n > 1)
        .map(|(name, _)| (name.to_string(), Vec::new()))
        .collect();
    if shared.is_empty() {
        return shared;
    }
    if let Ok(Some(tree)) = file.structure() {
        tensor_paths(&tree, String::new(), &mut |name, path| {
            if let Some(paths) = shared.get_mut(name) {
                paths.push(path);
            }
        });
    }
    for (name, paths) in shared.iter_mut() {
        if paths.len() < 2 {
            *paths = file
                .tensors()
                .iter()
                .enumerate()
                .filter(|(_, t)| &t.name == name)
                .map(|(i, _)| format!("tensor #{}", i + 1))
                .collect();
        }
    }
    shared
}

/// Calls `found(name, path)` for every tensor leaf of `node`, its path written as
/// Python subscripts after `prefix`.
fn tensor_paths(node: &crate::Node, prefix: String, found: &mut dyn FnMut(&str, String)) {
    use crate::Node;
    match node {
        Node::Tensor(name) => found(name, prefix),
        Node::Dict(items) => {
            for (k, v) in items {
                let key = match k {
                    Node::Str(s) => format!("{s:?}"),
                    other => other.to_string(),
                };
                tensor_paths(v, format!("{prefix}[{key}]"), found);
            }
        }
        Node::List(items) | Node::Tuple(items) => {
            for (i, v) in items.iter().enumerate() {
                tensor_paths(v, format!("{prefix}[{i}]"), found);
            }
        }
        Node::Object { args, state, .. } => {
            for (i, v) in args.iter().enumerate() {
                tensor_paths(v, format!("{prefix}.args[{i}]"), found);
            }
            if let Some(state) = state {
                tensor_paths(state, format!("{prefix}.state"), found);
            }
        }
        Node::Typed { value, .. } => tensor_paths(value, prefix, found),
        _ => {}
    }
}

/// The elements of `ta` (of `fa`) compared with those of `tb` (of `fb`), streamed in C
/// order a block at a time. String tensors are compared byte for byte.
fn compare(
    fa: &TensorFile,
    ta: &TensorInfo,
    fb: &TensorFile,
    tb: &TensorInfo,
    atol: f64,
    rtol: f64,
) -> crate::Result<crate::runtime::convert::Compare> {
    use std::io::Read;
    let mut c = crate::runtime::convert::Compare::new(atol, rtol);
    let (Some(ia), Some(ib)) = (ta.dtype.itemsize(), tb.dtype.itemsize()) else {
        let (xa, xb) = (fa.load_info(ta)?, fb.load_info(tb)?);
        c.compared = 1;
        if xa.data.as_bytes() != xb.data.as_bytes() {
            c.differ = 1;
            c.worst = f64::NAN;
        }
        return Ok(c);
    };
    const BLOCK: usize = 16 << 10;
    let (mut ra, mut rb) = (fa.elements(ta)?, fb.elements(tb)?);
    let (mut ba, mut bb) = (vec![0u8; BLOCK * ia], vec![0u8; BLOCK * ib]);
    let mut left = ta.numel()?;
    let located = |f: &TensorFile, t: &TensorInfo, e: std::io::Error| {
        f.source().in_file(crate::Error::from(e).in_entry(&t.name))
    };
    while left > 0 {
        let k = left.min(BLOCK as u64) as usize;
        ra.read_exact(&mut ba[..k * ia])
            .map_err(|e| located(fa, ta, e))?;
        rb.read_exact(&mut bb[..k * ib])
            .map_err(|e| located(fb, tb, e))?;
        c.feed(
            &ba[..k * ia],
            (ta.dtype, ta.byte_order),
            &bb[..k * ib],
            (tb.dtype, tb.byte_order),
        )?;
        left -= k as u64;
    }
    Ok(c)
}

/// Runs the command line given by `args` (the first item is the program name), printing
/// results to `out` and progress and notes to standard error. Returns the exit code:
/// 0 on success, 1 when `verify` finds damage or `diff` finds differences, or on an
/// error (whose message names the file, entry, field and offset) — 2 for an error of
/// `diff`, and for a command line that does not parse.
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
    let args: Vec<OsString> = args.into_iter().collect();
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(match (e.use_stderr(), usage_of_scan(&args)) {
                (false, _) => 0,
                (true, false) => 2,
                // `scan`'s 2 means dangerous: its usage errors are told apart (EX_USAGE).
                (true, true) => SCAN_USAGE,
            });
        }
    };
    // `diff` exits 1 when the files differ, so its errors exit 2 (as `cmp` and `diff` do);
    // `scan`'s errors fail closed, as dangerous files do.
    let error_code = if matches!(cli.command, Command::Diff { .. }) || is_scan(&cli.command) {
        2
    } else {
        1
    };
    match dispatch(registry, cli, out) {
        Ok(code) => code,
        Err(e) => {
            // An error may quote names read from the file: printed escaped.
            eprintln!("error: {}", escape_controls(&e.to_string()));
            ExitCode::from(error_code)
        }
    }
}

/// The exit code of a `scan` command line that does not parse.
const SCAN_USAGE: u8 = 64;

/// Whether the command is `scan`.
fn is_scan(command: &Command) -> bool {
    #[cfg(feature = "pytorch")]
    if matches!(command, Command::Scan { .. }) {
        return true;
    }
    let _ = command;
    false
}

/// Whether a command line names the `scan` subcommand: its first word that is neither an
/// option nor the value of a global option.
fn usage_of_scan(args: &[OsString]) -> bool {
    let cmd = Cli::command();
    let valued: Vec<String> = cmd
        .get_arguments()
        .filter(|a| a.is_global_set() && a.get_action().takes_values())
        .filter_map(|a| a.get_long().map(|l| format!("--{l}")))
        .collect();
    let mut words = args.iter().skip(1).map(|a| a.to_string_lossy());
    while let Some(w) = words.next() {
        if valued.iter().any(|v| *v == w) {
            words.next();
        } else if !w.starts_with('-') {
            return w == "scan";
        }
    }
    false
}

fn dispatch(registry: &Registry, cli: Cli, out: &mut dyn Write) -> crate::Result<ExitCode> {
    let inputs = &cli.inputs;
    match cli.command {
        Command::Inspect {
            file,
            json,
            sha256,
            values,
        } => inspect(registry, inputs, out, &file, json, sha256, values)?,
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
            max_shard_size,
            world_size,
            max_output_bytes,
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
                open: open_options(registry, inputs),
                max_shard_size: max_shard_size
                    .as_deref()
                    .map(crate::sharded::parse_size)
                    .transpose()?,
                world_size,
                max_output_bytes,
                ..Default::default()
            };
            if compress {
                options.write.compression = Some(Compression::Deflate);
            }
            options.write.external = external.policy()?;
            options.write.align = align;
            options.write.pickle_protocol = pickle_protocol;
            // On a terminal: the bytes converted and the rate, from the input's index
            // (each tensor's size, in the order convert writes them); nothing when piped.
            let sizes: Option<Vec<u64>> = if std::io::stderr().is_terminal() {
                open(registry, inputs, &input).ok().map(|f| {
                    let mut at = 0u64;
                    std::iter::once(0)
                        .chain(f.tensors().iter().map(|t| {
                            at = at.saturating_add(tensor_bytes(t));
                            at
                        }))
                        .collect()
                })
            } else {
                None
            };
            let bar = progress_bar(
                sizes.as_ref().and_then(|s| s.last().copied()).unwrap_or(0),
                "converting",
            );
            if std::io::stderr().is_terminal() && sizes.is_none() {
                bar.set_style(
                    ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} tensors")
                        .unwrap_or_else(|_| ProgressStyle::default_bar()),
                );
            }
            let summary = crate::convert(&input, &output, &options, |done, total| match &sizes {
                Some(s) => {
                    if s.len() == total + 1 {
                        bar.set_position(s[done.min(total)]);
                    }
                }
                None => {
                    bar.set_length(total as u64);
                    bar.set_position(done as u64);
                }
            })?;
            bar.finish_and_clear();
            eprintln!(
                "wrote {} ({}): {} tensors, {} bytes, from {}",
                shown(&output),
                summary.to,
                summary.tensors,
                summary.bytes,
                summary.from
            );
            if !summary.retyped.is_empty() {
                let n = summary.retyped.len();
                let mut pairs: Vec<String> = summary
                    .retyped
                    .iter()
                    .map(|(_, w, r)| format!("{w} as {r}"))
                    .collect();
                pairs.sort();
                pairs.dedup();
                let names: Vec<&str> = summary.retyped.iter().map(|(n, ..)| n.as_str()).collect();
                eprintln!(
                    "note: {n} tensor{} read back from {} as another dtype ({}), as the \
                     format's own loader reads {}: {}",
                    if n == 1 { "" } else { "s" },
                    summary.to,
                    pairs.join(", "),
                    if n == 1 { "it" } else { "them" },
                    escape_controls(&shorten(&names.join(", "), 200))
                );
            }
            if !summary.dropped.is_empty() {
                let n = summary.dropped.len();
                eprintln!(
                    "note: dropped {n} non-tensor value{}{}: {}",
                    if n == 1 { "" } else { "s" },
                    if flatten { " (--flatten)" } else { "" },
                    escape_controls(&shorten(&summary.dropped.join(", "), 200))
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
            crate::refuse_input_as_output(&weights, &output)?;
            let new = open(registry, inputs, &weights)?;
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
                open: open_options(
                    registry,
                    &InputArgs {
                        format: None,
                        ..inputs.clone()
                    },
                ),
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
                shown(&output),
                s.replaced,
                s.moved,
                s.kept
            );
        }
        Command::Verify { file } => verify(registry, inputs, out, &file)?,
        Command::Formats => {
            for f in registry.formats() {
                let exts: Vec<String> = f.extensions.iter().map(|e| format!(".{e}")).collect();
                let line = format!("{:16} {}", f.name, exts.join(" "));
                outln!(out, "{}", line.trim_end());
            }
        }
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "tensorfmt", out);
        }
        Command::Man => clap_mangen::Man::new(Cli::command())
            .render(out)
            .map_err(|e| crate::Error::from(crate::ErrorKind::Io(e)))?,
        #[cfg(feature = "pytorch")]
        Command::Scan { paths, json } => {
            return Ok(ExitCode::from(crate::scan::run(
                &paths,
                json,
                &inputs.limits(),
                out,
            )?));
        }
        Command::Diff { a, b, atol, rtol } => {
            if !diff(registry, inputs, out, &a, &b, atol, rtol)? {
                return Ok(ExitCode::from(1));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `run` prints for `args`, and its exit code.
    fn output(args: &[&str]) -> (ExitCode, String) {
        let mut out = Vec::new();
        let code = run(
            std::iter::once("tensorfmt")
                .chain(args.iter().copied())
                .map(OsString::from),
            &mut out,
        );
        (code, String::from_utf8(out).unwrap())
    }

    #[test]
    fn json_escapes_what_a_terminal_would_act_on_and_reads_back_the_same() {
        let names = [
            "w\u{61c}x",
            "t\u{e0041}\u{e007f}",
            "d\u{7f}\u{9b}",
            "ok.é",
            "\u{1b}[2J",
        ];
        let doc =
            json!({ "tensors": names.iter().map(|n| json!({ "name": n })).collect::<Vec<_>>() });
        let text = terminal_safe_json(&doc);
        assert!(!text.chars().any(needs_escape), "{text}");
        for escape in [
            "w\\u061cx",
            "t\\udb40\\udc41\\udb40\\udc7f",
            "d\\u007f\\u009b",
            "ok.é",
            "\\u001b[2J",
        ] {
            assert!(text.contains(escape), "{escape} in {text}");
        }
        let back: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(back, doc);
        let plain = json!({ "name": "layer.0.weight" });
        assert_eq!(terminal_safe_json(&plain), plain.to_string());
    }

    const COMMANDS: &[&str] = &[
        "inspect",
        "convert",
        "replace",
        "verify",
        "formats",
        "diff",
        "completions",
        "man",
    ];

    #[test]
    fn completions_name_every_command_and_bash_parses_them() {
        for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
            let (code, script) = output(&["completions", shell]);
            assert_eq!(code, ExitCode::SUCCESS, "{shell}");
            for command in COMMANDS {
                assert!(script.contains(command), "{shell}: {command}");
            }
            assert!(script.contains("max-shard-size"), "{shell}");
        }
        let (_, script) = output(&["completions", "bash"]);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tensorfmt.bash");
        std::fs::write(&path, script).unwrap();
        match std::process::Command::new("bash")
            .arg("-n")
            .arg(&path)
            .output()
        {
            Ok(o) => assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr)),
            Err(e) => eprintln!("bash not run ({e}): the script's syntax is not checked"),
        }
        let (code, _) = output(&["completions", "tcsh"]);
        assert_ne!(code, ExitCode::SUCCESS, "an unknown shell is refused");
    }

    #[test]
    fn the_manual_page_is_roff_and_lists_every_command() {
        let (code, page) = output(&["man"]);
        assert_eq!(code, ExitCode::SUCCESS);
        assert!(page.contains(".TH tensorfmt 1"), "{page}");
        assert!(page.contains(".SH SUBCOMMANDS"), "{page}");
        for command in COMMANDS {
            assert!(
                page.contains(&format!("tensorfmt\\-{command}")),
                "{command}"
            );
        }
    }

    #[test]
    fn inspect_shows_sizes_totals_per_dtype_and_the_parameter_count() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.safetensors");
        let w = crate::Tensor::from_slice("w", &[1000, 3], &[0f32; 3000]).unwrap();
        let b = crate::Tensor::from_slice("b", &[3], &[0f32; 3]).unwrap();
        let n = crate::Tensor::from_slice("n", &[], &[7i64]).unwrap();
        crate::save(
            &path,
            None,
            [&w, &b, &n].map(|t| (t.meta().unwrap(), t.data.as_bytes())),
            &Default::default(),
        )
        .unwrap();
        let (code, text) = output(&["inspect", path.to_str().unwrap()]);
        assert_eq!(code, ExitCode::SUCCESS, "{text}");
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[1].contains("shape") && lines[1].ends_with("size"),
            "{text}"
        );
        assert!(
            lines
                .iter()
                .any(|l| l.contains("[1000, 3]") && l.ends_with("11.7 KiB")),
            "{text}"
        );
        assert!(
            lines.iter().any(|l| l.contains("[]") && l.ends_with("8 B")),
            "{text}"
        );
        assert!(
            text.contains("  f32:  2 tensors, 3,003 parameters, 11.7 KiB\n"),
            "{text}"
        );
        assert!(
            text.contains("  i64:  1 tensor, 1 parameter, 8 B\n"),
            "{text}"
        );
        assert!(
            text.ends_with("total: 3 tensors, 3,004 parameters, 11.7 KiB\n"),
            "{text}"
        );
        assert_eq!(human_bytes(3 << 30), "3.0 GiB");
        // --json stays as it was: no sizes, no totals.
        let (_, json) = output(&["inspect", "--json", path.to_str().unwrap()]);
        assert!(!json.contains("total") && !json.contains("size"), "{json}");
    }

    #[test]
    fn a_folder_that_is_no_checkpoint_says_what_was_looked_for() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("notes.txt"), "x").unwrap();
        let (code, _) = output(&["inspect", dir.path().to_str().unwrap()]);
        assert_ne!(code, ExitCode::SUCCESS);
        let e = TensorFile::open(dir.path()).err().unwrap().to_string();
        assert!(
            e.contains("it looked for a sharded checkpoint's index"),
            "{e}"
        );
        assert!(
            e.contains("torch.distributed checkpoint (.metadata)"),
            "{e}"
        );
        assert!(e.contains("name a file inside it"), "{e}");
    }
}
