//! Checkpoints saved as several files tied by an index: Hugging Face's sharded
//! checkpoints. `model.safetensors.index.json` (or `pytorch_model.bin.index.json`) maps
//! every tensor to the shard that holds it:
//!
//! ```json
//! {
//!   "metadata": {"total_size": 26953662464},
//!   "weight_map": {"lm_head.weight": "model-00003-of-00003.safetensors", ...}
//! }
//! ```
//!
//! Reading: [`crate::TensorFile::open`] on an index parses it (bounded by
//! [`Limits::max_header_bytes`]), resolves each shard inside the index's folder
//! ([`resolve_beside`]; beside it, for an index in object storage), opens each shard once as a
//! file of its own format (headers only: payloads are read when asked for) and checks the
//! index against what the shards hold. Writing: [`plan`] splits tensors into shards as
//! `huggingface_hub.split_state_dict_into_shards_factory` does, [`shard_name`] names them,
//! and [`index_json`] writes the index byte for byte as `huggingface_hub`'s
//! `save_torch_state_dict` does (`json.dump(index, f, indent=2)`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::{Error, ErrorKind, Limits, Location, OpenOptions, Result, TensorFile, TensorInfo};
use tensorfmt_runtime::source::resolve_beside;

/// The ends of the names of index files, safetensors' first: a folder holding both kinds
/// is read as its safetensors checkpoint, as `transformers` does.
pub const INDEX_SUFFIXES: [&str; 2] = [".safetensors.index.json", ".bin.index.json"];

/// Whether `path`'s file name is that of a sharded checkpoint's index.
pub fn is_index_name(path: &Path) -> bool {
    path.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
        INDEX_SUFFIXES
            .iter()
            .any(|s| n.len() > s.len() && n.ends_with(s))
    })
}

/// The index `path` stands for: `path` itself when its name is an index's, the one index
/// of a folder (of the first kind of [`INDEX_SUFFIXES`] it holds), `None` when `path` is
/// neither. A folder holding two indexes of one kind is ambiguous: an error names them.
pub fn find_index(path: &Path) -> Result<Option<PathBuf>> {
    if is_index_name(path) {
        return Ok(Some(path.to_path_buf()));
    }
    if !path.is_dir() {
        return Ok(None);
    }
    let entries =
        std::fs::read_dir(path).map_err(|e| Error::new(e.into(), Location::file(path)))?;
    let mut names: Vec<String> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|n| is_index_name(Path::new(n)))
        .collect();
    names.sort();
    for suffix in INDEX_SUFFIXES {
        let of_kind: Vec<&String> = names.iter().filter(|n| n.ends_with(suffix)).collect();
        match of_kind.as_slice() {
            [] => continue,
            [one] => return Ok(Some(path.join(one))),
            several => {
                return Err(Error::new(
                    ErrorKind::Invalid(format!(
                        "the folder holds {} indexes of sharded checkpoints ({}): open the \
                         one to read",
                        several.len(),
                        several
                            .iter()
                            .map(|s| s.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )),
                    Location::file(path),
                ))
            }
        }
    }
    Ok(None)
}

/// The checkpoint of one file that a folder without an index holds, as
/// `huggingface_hub` saves a model that fits one shard: `model.safetensors`, or else
/// `pytorch_model.bin`.
pub fn single_file(dir: &Path) -> Option<PathBuf> {
    PATTERNS
        .iter()
        .map(|(_, name)| dir.join(name))
        .find(|p| p.is_file())
}

/// A parsed index: the shard of every tensor, in the index's order, and its `metadata`.
#[derive(Debug, Clone, PartialEq)]
pub struct Index {
    /// (tensor, shard file name) in the order of `weight_map`.
    pub weight_map: Vec<(String, String)>,
    /// The index's `metadata` object (`total_size`, and what a writer added).
    pub metadata: serde_json::Map<String, serde_json::Value>,
}

/// Parses an index file's bytes.
pub fn parse_index(bytes: &[u8]) -> Result<Index> {
    let invalid = |why: String| Error::from(ErrorKind::Invalid(why));
    let doc: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| {
        Error::from(ErrorKind::Codec {
            codec: "json",
            message: format!("the index is not JSON: {e}"),
        })
    })?;
    let serde_json::Value::Object(mut doc) = doc else {
        return Err(invalid("the index is not a JSON object".into()));
    };
    let metadata = match doc.remove("metadata") {
        None | Some(serde_json::Value::Null) => serde_json::Map::new(),
        Some(serde_json::Value::Object(m)) => m,
        Some(_) => return Err(invalid("the index's `metadata` is not an object".into())),
    };
    let Some(map) = doc.remove("weight_map") else {
        return Err(invalid(
            "the index has no `weight_map` (the tensor → shard file mapping of a sharded \
             checkpoint's index)"
                .into(),
        ));
    };
    let serde_json::Value::Object(map) = map else {
        return Err(invalid("the index's `weight_map` is not an object".into()));
    };
    let weight_map = map
        .into_iter()
        .map(|(name, file)| match file {
            serde_json::Value::String(f) => Ok((name, f)),
            other => Err(Error::new(
                ErrorKind::Invalid(format!(
                    "the index maps the tensor to {other}, not to a shard's file name"
                )),
                Location::default()
                    .with_entry(name)
                    .with_field("weight_map"),
            )),
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Index {
        weight_map,
        metadata,
    })
}

/// One file of a sharded checkpoint.
#[derive(Debug)]
pub struct Shard {
    /// The file's name as the index gives it.
    pub name: String,
    /// The file, opened.
    pub file: TensorFile,
}

/// The shards of a checkpoint and which holds each tensor.
#[derive(Debug)]
pub(crate) struct Shards {
    pub(crate) shards: Vec<Shard>,
    pub(crate) index: Index,
    /// Tensor name → position in `shards`.
    of_tensor: HashMap<String, usize>,
}

impl Shards {
    /// The shard holding the tensor named `name`.
    pub(crate) fn holding(&self, name: &str) -> Option<&TensorFile> {
        self.of_tensor.get(name).map(|&i| &self.shards[i].file)
    }
}

/// Opens the sharded checkpoint whose index is at `index_path`: every shard the index
/// names, once each, in the order of their names (`model-00001-of-00003` first), every
/// tensor of every shard listed in that order (each shard's in its file order).
///
/// Checked: every shard of one format; no tensor in two shards; every tensor of the
/// index found in the shard it names. A tensor a shard holds that the index does not
/// name is listed all the same (loaders that read whole shards load it too).
/// `metadata.total_size` is not checked: writers count it differently (storage sizes,
/// shared tensors once).
pub(crate) fn open(
    index_path: &Path,
    options: &OpenOptions,
) -> Result<(tensorfmt_runtime::Source, Vec<TensorInfo>, Shards)> {
    let in_index = |e: Error| e.in_file(index_path);
    let source = open_file(index_path)?;
    let limits: &Limits = &options.limits;
    let len = source.data().len();
    if len > limits.max_header_bytes {
        return Err(in_index(Error::from(ErrorKind::Limit {
            what: "index size",
            limit: limits.max_header_bytes,
            actual: len,
        })));
    }
    let index = parse_index(&source.whole()?).map_err(in_index)?;
    let mut files: Vec<&str> = index.weight_map.iter().map(|(_, f)| f.as_str()).collect();
    files.sort_unstable();
    files.dedup();
    if files.is_empty() {
        return Err(in_index(Error::from(ErrorKind::Invalid(
            "the index's `weight_map` names no shard".into(),
        ))));
    }
    let mut shards: Vec<Shard> = Vec::with_capacity(files.len());
    for name in files {
        // A shard is a file of its own (never a folder or another index).
        let shard = beside(index_path, name).map_err(in_index)?;
        let file = TensorFile::from_source(shard, options)?;
        if let Some(first) = shards.first().map(|s| &s.file) {
            if file.format() != first.format() {
                return Err(in_index(Error::from(ErrorKind::Invalid(format!(
                    "the shards are of different formats: '{}' is {}, '{name}' is {}",
                    shards[0].name,
                    first.format(),
                    file.format()
                )))));
            }
        }
        shards.push(Shard {
            name: name.to_string(),
            file,
        });
    }
    let mut of_tensor: HashMap<String, usize> = HashMap::new();
    let mut tensors = Vec::new();
    for (i, shard) in shards.iter().enumerate() {
        for t in shard.file.tensors() {
            if let Some(&j) = of_tensor.get(&t.name) {
                return Err(in_index(Error::new(
                    ErrorKind::Invalid(format!(
                        "the tensor is in two shards, '{}' and '{}'",
                        shards[j].name, shard.name
                    )),
                    Location::default().with_entry(&t.name),
                )));
            }
            of_tensor.insert(t.name.clone(), i);
            tensors.push(t.clone());
        }
    }
    let max = limits.max_tensors;
    if tensors.len() as u64 > max {
        return Err(in_index(Error::from(ErrorKind::Limit {
            what: "tensor count",
            limit: max,
            actual: tensors.len() as u64,
        })));
    }
    for (name, file) in &index.weight_map {
        let held = of_tensor.get(name).map(|&i| shards[i].name.as_str());
        if held != Some(file.as_str()) {
            let why = match held {
                None => {
                    format!("the index puts the tensor in shard '{file}', which does not hold it")
                }
                Some(other) => format!(
                    "the index puts the tensor in shard '{file}', but shard '{other}' holds it"
                ),
            };
            return Err(in_index(Error::new(
                ErrorKind::Invalid(why),
                Location::default().with_entry(name),
            )));
        }
    }
    Ok((
        source,
        tensors,
        Shards {
            shards,
            index,
            of_tensor,
        },
    ))
}

/// The object the shards' tensors are stored in, as one: the items of every shard's top
/// dict, in shard order (a `pytorch_model-*.bin` shard's state dict; a safetensors shard's
/// `__metadata__`, the same `{"format": "pt"}` in every shard, is kept once: an item of a
/// later shard whose key an earlier one has is left out). `None` when no shard stores
/// such an object, or when one stores something other than a dict.
pub(crate) fn merged_structure(shards: &[Shard]) -> Result<Option<crate::Node>> {
    let mut items: Vec<(crate::Node, crate::Node)> = Vec::new();
    // Keys seen, by hash: text keys (all of a state dict's) as they are, others by their
    // Python-like text (which tells `1` from `'1'` and `1.0`).
    let mut text_keys: std::collections::HashSet<String> = std::collections::HashSet::new();
    let mut other_keys: std::collections::HashSet<String> = std::collections::HashSet::new();
    let mut any = false;
    for shard in shards {
        match shard.file.structure()? {
            None => {}
            Some(crate::Node::Dict(entries)) => {
                any = true;
                for (k, v) in entries {
                    let new = match &k {
                        crate::Node::Str(text) => text_keys.insert(text.clone()),
                        other => other_keys.insert(other.to_string()),
                    };
                    if new {
                        items.push((k, v));
                    }
                }
            }
            Some(_) => return Ok(None),
        }
    }
    Ok(any.then_some(crate::Node::Dict(items)))
}

/// The file at `path`, mapped, or the object at a URL read by ranged GETs.
fn open_file(path: &Path) -> Result<tensorfmt_runtime::Source> {
    match crate::remote(path) {
        #[cfg(object_storage)]
        Some(url) => tensorfmt_object::open(url).map(|(source, _)| source),
        #[cfg(not(object_storage))]
        Some(url) => Err(crate::no_object_storage(url)),
        None => tensorfmt_runtime::Source::open(path),
    }
}

/// The shard `name` of the index at `index`: a file inside the index's folder, or an
/// object beside an index in a store.
fn beside(index: &Path, name: &str) -> Result<tensorfmt_runtime::Source> {
    match crate::remote(index) {
        #[cfg(object_storage)]
        Some(url) => {
            let loc = tensorfmt_object::locate(url)?.beside(name)?;
            tensorfmt_object::open_at(loc).map(|(source, _)| source)
        }
        #[cfg(not(object_storage))]
        Some(url) => Err(crate::no_object_storage(url)),
        None => {
            let path = resolve_beside(index, name, "shard", "checkpoint's")?;
            tensorfmt_runtime::Source::open(&path)
        }
    }
}

/// The tensors of each shard, by position in the input, split as
/// `huggingface_hub.split_state_dict_into_shards_factory` splits a state dict: in order,
/// a new shard started when the next tensor would take the current one past
/// `max_shard_size` bytes; a tensor larger than that alone in a shard of its own, placed
/// before the shard being filled. `sizes` are the tensors' sizes in bytes as written.
pub fn plan(sizes: &[u64], max_shard_size: u64) -> Vec<Vec<usize>> {
    let mut shards: Vec<Vec<usize>> = Vec::new();
    let mut current: Vec<usize> = Vec::new();
    let mut current_size = 0u64;
    for (i, &size) in sizes.iter().enumerate() {
        if size > max_shard_size {
            shards.push(vec![i]);
            continue;
        }
        if current_size.saturating_add(size) > max_shard_size {
            shards.push(std::mem::take(&mut current));
            current_size = 0;
        }
        current.push(i);
        current_size += size;
    }
    if !current.is_empty() {
        shards.push(current);
    }
    shards
}

/// The file name of shard `i` (from 0) of `n` for the file name pattern of a format
/// (`model.safetensors`, `pytorch_model.bin`): `model-00001-of-00003.safetensors`.
/// (`huggingface_hub` names a checkpoint of one shard by the pattern itself, without an
/// index.)
pub fn shard_name(pattern: &str, i: usize, n: usize) -> String {
    let (stem, ext) = match pattern.find('.') {
        Some(dot) => pattern.split_at(dot),
        None => (pattern, ""),
    };
    format!("{stem}-{:05}-of-{n:05}{ext}", i + 1)
}

/// Parses a shard size as `huggingface_hub` does (`"5GB"`, `"500MB"`, `"1.5GB"`: units
/// KB, MB, GB, TB of powers of 10, case-insensitive), or a plain number of bytes; `GiB`,
/// `MiB`, `KiB` and `TiB` are read as powers of 2.
pub fn parse_size(text: &str) -> Result<u64> {
    let t = text.trim();
    let bad = || {
        Error::from(ErrorKind::Invalid(format!(
            "shard size '{text}': a number of bytes, or a number with a unit (KB, MB, GB, TB; \
             KiB, MiB, GiB, TiB), as in 5GB"
        )))
    };
    if let Ok(n) = t.parse::<u64>() {
        return if n == 0 { Err(bad()) } else { Ok(n) };
    }
    let upper = t.to_ascii_uppercase();
    let units: [(&str, f64); 8] = [
        ("KIB", 1024.0),
        ("MIB", 1048576.0),
        ("GIB", 1073741824.0),
        ("TIB", 1099511627776.0),
        ("KB", 1e3),
        ("MB", 1e6),
        ("GB", 1e9),
        ("TB", 1e12),
    ];
    let (unit, mult) = units
        .iter()
        .find(|(u, _)| upper.ends_with(u))
        .ok_or_else(bad)?;
    let value: f64 = t[..t.len() - unit.len()]
        .trim()
        .parse()
        .map_err(|_| bad())?;
    let bytes = value * mult;
    if !(bytes.is_finite() && bytes >= 1.0 && bytes < u64::MAX as f64) {
        return Err(bad());
    }
    // `int(value * multiplier)`: truncated.
    Ok(bytes as u64)
}

/// The index of a sharded checkpoint as `huggingface_hub` writes it
/// (`json.dump({"metadata": ..., "weight_map": ...}, f, indent=2)`): two-space indents,
/// `": "` between keys and values, non-ASCII characters escaped, no final newline.
pub fn index_json(total_size: u64, weight_map: &[(String, String)]) -> String {
    let mut out = String::new();
    out.push_str("{\n  \"metadata\": {\n    \"total_size\": ");
    out.push_str(&total_size.to_string());
    out.push_str("\n  },\n  \"weight_map\": {");
    for (i, (name, file)) in weight_map.iter().enumerate() {
        out.push_str(if i == 0 { "\n    " } else { ",\n    " });
        py_json_str(&mut out, name);
        out.push_str(": ");
        py_json_str(&mut out, file);
    }
    out.push_str(if weight_map.is_empty() {
        "}\n}"
    } else {
        "\n  }\n}"
    });
    out
}

/// `s` as Python's `json.dumps` writes a string (`ensure_ascii=True`).
fn py_json_str(out: &mut String, s: &str) {
    use std::fmt::Write;
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            ' '..='~' => out.push(c),
            _ => {
                let mut units = [0u16; 2];
                for u in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{u:04x}");
                }
            }
        }
    }
    out.push('"');
}

/// Where a sharded checkpoint is written: the folder, the file name pattern of its
/// shards (`model.safetensors`), and their format.
struct Output {
    dir: PathBuf,
    pattern: String,
    format: &'static crate::FormatDesc,
}

/// The file name patterns of Hugging Face's two shard formats, by format name.
const PATTERNS: [(&str, &str); 2] = [
    ("safetensors", "model.safetensors"),
    ("pytorch", "pytorch_model.bin"),
];

/// Where `path` asks a sharded checkpoint to go: an index's name gives the folder
/// (its parent) and the pattern (the name less `.index.json`); any other path is the
/// folder, with the pattern of the format (`to`, by default safetensors).
fn output(path: &Path, to: Option<&str>, registry: &crate::Registry) -> Result<Output> {
    let at = |e: Error| e.in_file(path);
    let refuse = |why: String| at(Error::from(ErrorKind::Unsupported(why)));
    let (dir, pattern) = if is_index_name(path) {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        (
            dir,
            Some(name[..name.len() - ".index.json".len()].to_string()),
        )
    } else {
        if registry.for_path(path).is_some() && !path.is_dir() {
            return Err(refuse(
                "a sharded checkpoint is a folder: give a folder (or an index in one, \
                 `DIR/model.safetensors.index.json`) as the output"
                    .into(),
            ));
        }
        (path.to_path_buf(), None)
    };
    let by_pattern = pattern.as_deref().and_then(|p| {
        PATTERNS
            .iter()
            .find(|(_, pat)| p.ends_with(&pat[pat.find('.').unwrap_or(0)..]))
            .map(|(f, _)| *f)
    });
    let name = to.or(by_pattern).unwrap_or("safetensors");
    let Some(&(name, default_pattern)) = PATTERNS.iter().find(|(f, _)| *f == name) else {
        return Err(refuse(format!(
            "shards are written as safetensors or pytorch (Hugging Face's two shard formats), \
             not {name}"
        )));
    };
    let format = registry.require(name).map_err(at)?;
    let pattern = pattern.unwrap_or_else(|| default_pattern.to_string());
    if pattern.starts_with('.') || pattern.contains('/') || !pattern.contains('.') {
        return Err(refuse(format!("'{pattern}' cannot name shards")));
    }
    // A folder without a name of its own (`.`, `..`) is renamed into place by its real
    // path.
    let dir = if dir.file_name().is_none() {
        dir.canonicalize()
            .map_err(|e| at(Error::from(ErrorKind::Io(e))))?
    } else {
        dir
    };
    Ok(Output {
        dir,
        pattern,
        format,
    })
}

/// Whether `name` is a file of the checkpoint of `pattern`, as `huggingface_hub` tells
/// the files it removes before a save: `{stem}(-NNNNN-of-NNNNN)?{ext}(.index.json)?`.
fn of_pattern(name: &str, pattern: &str) -> bool {
    let dot = pattern.find('.').unwrap_or(pattern.len());
    let (stem, ext) = pattern.split_at(dot);
    let Some(rest) = name.strip_prefix(stem) else {
        return false;
    };
    let rest = rest.strip_suffix(".index.json").unwrap_or(rest);
    let Some(middle) = rest.strip_suffix(ext) else {
        return false;
    };
    let b = middle.as_bytes();
    middle.is_empty()
        || (b.len() == 15
            && b[0] == b'-'
            && &middle[6..10] == "-of-"
            && b[1..6].iter().chain(&b[10..15]).all(u8::is_ascii_digit))
}

/// Checks that the files of `pattern` in the folder `dir` are a checkpoint: each opens
/// (an index with the shards it names).
fn check_pattern(dir: &Path, pattern: &str, registry: &crate::Registry) -> Result<()> {
    let options = crate::OpenOptions {
        registry: registry.clone(),
        ..Default::default()
    };
    let entries = std::fs::read_dir(dir).map_err(|e| Error::from(e).in_file(dir))?;
    for e in entries {
        let e = e.map_err(|e| Error::from(e).in_file(dir))?;
        if e.file_name()
            .to_str()
            .is_some_and(|n| of_pattern(n, pattern))
        {
            TensorFile::open_with(e.path(), &options)?;
        }
    }
    Ok(())
}

/// Converts `file` to a sharded checkpoint at `path` (a folder, or an index in one), as
/// `huggingface_hub.save_torch_state_dict` writes one: shards of at most
/// `options.max_shard_size` bytes (5 GB by default; a larger tensor alone in its own),
/// named `model-00001-of-0000N.safetensors` (`pytorch_model-…bin` for pytorch shards),
/// safetensors shards with `__metadata__` `{"format": "pt"}`, and the index
/// `model.safetensors.index.json` with `metadata.total_size` (the sum of the tensors'
/// sizes) and the `weight_map`; a checkpoint that fits one shard is the one file
/// `model.safetensors` and no index, unless the output names the index.
///
/// Atomic: the new folder is made beside the output folder, its shards and index
/// written and synced there, and it replaces the output folder in one rename under the
/// rule of folder outputs ([`tensorfmt_runtime::output::FolderKind`], a model's folder
/// adopted). What the output folder holds besides the checkpoint of this file name
/// pattern (`config.json`, a tokenizer, shards of the other format) is carried into the
/// new folder by hard links, unchanged; the files of the pattern (earlier shards and
/// index, each of which must open) are not, as `huggingface_hub` removes them before a
/// save. A save interrupted at any point leaves the output folder as it was. So the
/// input may be in the output folder: it is read from its own files, which are not
/// written to.
///
/// Values stored beside the tensors (a checkpoint's `epoch`, safetensors `__metadata__`)
/// are not written: they are listed in [`crate::ConvertSummary::dropped`].
pub fn write(
    file: &TensorFile,
    path: &Path,
    options: &crate::ConvertOptions,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<crate::ConvertSummary> {
    use tensorfmt_runtime::output::{AtomicDir, FolderKind};
    let registry = &options.open.registry;
    let out = output(path, options.to.as_deref(), registry)?;
    let at = |e: std::io::Error| Error::new(ErrorKind::Io(e), Location::file(&out.dir));
    let what = format!("a sharded checkpoint of {}", out.pattern);
    let kind = FolderKind {
        what: &what,
        owns: &|name| of_pattern(name, &out.pattern),
        check: &|dir| check_pattern(dir, &out.pattern, registry),
        adopts: true,
    };
    let mut tmp = AtomicDir::new(&out.dir)?;
    tmp.check(&kind)?;
    let max = options.max_shard_size.unwrap_or(5_000_000_000);
    let sizes: Vec<u64> = file
        .tensors()
        .iter()
        .map(|t| {
            let meta = crate::c_order_meta(t);
            let dtype = options.dtype.unwrap_or(t.dtype);
            crate::TensorMeta { dtype, ..meta }.nbytes()
        })
        .collect::<Result<_>>()?;
    let plan = plan(&sizes, max);
    let named_index = is_index_name(path);
    let n = plan.len();
    let names: Vec<String> = (0..n)
        .map(|i| {
            if n == 1 && !named_index {
                out.pattern.clone()
            } else {
                shard_name(&out.pattern, i, n)
            }
        })
        .collect();

    std::fs::create_dir(tmp.path()).map_err(at)?;
    let total = file.tensors().len();
    let mut done = 0;
    let mut bytes = 0u64;
    let mut weight_map = Vec::with_capacity(total);
    let metadata = crate::Node::Dict(vec![(crate::Node::str("format"), crate::Node::str("pt"))]);
    for (shard, name) in plan.iter().zip(&names) {
        let shard_path = tmp.path().join(name);
        let mut saver =
            crate::Saver::create_in(registry, &shard_path, Some(out.format.name), &options.write)?;
        if out.format.values {
            saver.set_structure(&metadata)?;
        }
        for &i in shard {
            let info = &file.tensors()[i];
            bytes += crate::write_tensor(file, &mut saver, info, options.dtype)?;
            weight_map.push((info.name.clone(), name.clone()));
            done += 1;
            progress(done, total);
        }
        saver.commit()?;
    }
    if n > 1 || named_index {
        let index_name = format!("{}.index.json", out.pattern);
        let mut index =
            tensorfmt_runtime::output::AtomicFile::create(tmp.path().join(&index_name))?;
        std::io::Write::write_all(
            &mut index,
            index_json(sizes.iter().sum(), &weight_map).as_bytes(),
        )
        .map_err(at)?;
        index.commit()?;
    }
    tmp.commit_folder(&kind)?;

    let tree = file.structure()?;
    let dropped = match &tree {
        // Safetensors shards hold `format` (as `pt`), and nothing else beside.
        Some(tree) => crate::values_left_out(tree, file.format_desc().values)
            .into_iter()
            .filter(|name| !(out.format.values && name == "format"))
            .collect(),
        None => Vec::new(),
    };
    let retyped = crate::retyped(registry, out.format.name, file.tensors(), options.dtype);
    Ok(crate::ConvertSummary {
        from: file.format(),
        to: out.format.name,
        tensors: total,
        bytes,
        dropped,
        retyped,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_as_huggingface_hub() {
        // The docstring's example: [6, 6, 2, 6, 2, 2] GB at 10 GB.
        assert_eq!(
            plan(&[6, 6, 2, 6, 2, 2], 10),
            vec![vec![0], vec![1, 2], vec![3, 4, 5]]
        );
        // A tensor over the limit goes alone, before the shard being filled.
        assert_eq!(plan(&[1, 20, 2, 9], 10), vec![vec![1], vec![0, 2], vec![3]]);
        assert_eq!(plan(&[], 10), Vec::<Vec<usize>>::new());
        assert_eq!(plan(&[0, 0], 0), vec![vec![0, 1]]);
    }

    #[test]
    fn files_of_a_pattern() {
        for yes in [
            "model.safetensors",
            "model-00001-of-00003.safetensors",
            "model.safetensors.index.json",
            "model-12345-of-99999.safetensors.index.json",
        ] {
            assert!(of_pattern(yes, "model.safetensors"), "{yes}");
        }
        for no in [
            "config.json",
            "model.bin",
            "pytorch_model.bin",
            "model-0001-of-00003.safetensors",
            "model-0000a-of-00003.safetensors",
            "model.safetensors.tmp",
            "xmodel.safetensors",
        ] {
            assert!(!of_pattern(no, "model.safetensors"), "{no}");
        }
        assert!(of_pattern(
            "pytorch_model-00002-of-00002.bin",
            "pytorch_model.bin"
        ));
    }

    #[test]
    fn names_and_sizes() {
        assert_eq!(
            shard_name("model.safetensors", 0, 1),
            "model-00001-of-00001.safetensors"
        );
        assert_eq!(
            shard_name("model.safetensors", 1, 3),
            "model-00002-of-00003.safetensors"
        );
        assert_eq!(
            shard_name("pytorch_model.bin", 0, 12),
            "pytorch_model-00001-of-00012.bin"
        );
        assert_eq!(parse_size("5GB").unwrap(), 5_000_000_000);
        assert_eq!(parse_size(" 1.5mb ").unwrap(), 1_500_000);
        assert_eq!(parse_size("2GiB").unwrap(), 2 << 30);
        assert_eq!(parse_size("123").unwrap(), 123);
        for bad in ["", "GB", "-1GB", "1XB", "nanGB", "0GB", "0"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn index_as_python_json_dump_writes_it() {
        let map = vec![
            (
                "a.weight".to_string(),
                "model-00001-of-00002.safetensors".to_string(),
            ),
            (
                "é\"\n\u{1F600}".to_string(),
                "model-00002-of-00002.safetensors".to_string(),
            ),
        ];
        assert_eq!(
            index_json(42, &map),
            "{\n  \"metadata\": {\n    \"total_size\": 42\n  },\n  \"weight_map\": {\n    \
             \"a.weight\": \"model-00001-of-00002.safetensors\",\n    \
             \"\\u00e9\\\"\\n\\ud83d\\ude00\": \"model-00002-of-00002.safetensors\"\n  }\n}"
        );
        assert_eq!(
            index_json(0, &[]),
            "{\n  \"metadata\": {\n    \"total_size\": 0\n  },\n  \"weight_map\": {}\n}"
        );
        let parsed = parse_index(index_json(42, &map).as_bytes()).unwrap();
        assert_eq!(parsed.weight_map, map);
        assert_eq!(parsed.metadata["total_size"], 42);
    }

    #[test]
    fn bad_indexes_are_refused() {
        for (doc, why) in [
            ("[]", "not a JSON object"),
            ("{}", "no `weight_map`"),
            ("{\"weight_map\": []}", "not an object"),
            ("{\"weight_map\": {\"w\": 3}}", "not to a shard's file name"),
            (
                "{\"metadata\": 1, \"weight_map\": {}}",
                "`metadata` is not an object",
            ),
            ("{\"weight_map\": {", "not JSON"),
        ] {
            let e = parse_index(doc.as_bytes()).unwrap_err();
            assert!(e.to_string().contains(why), "{doc}: {e}");
        }
    }
}
