//! Caffe2's database operations, faithful to its operators (`caffe2/operators/
//! load_save_op.h`, `tensor_protos_db_input.h`), over the databases of
//! `formats/fmt/caffe2.fmt`: [`save`] (SaveOp), [`load`] (LoadOp), [`checkpoint`]
//! (CheckpointOp), [`db_exists`] (DBExistsOp), and [`DbInput`], the prefetching input
//! pipeline of TensorProtosDBInput over a sharded DBReader.
//!
//! Databases are named by Caffe2's `db_type` strings: `minidb`, `lmdb`, `leveldb` (and
//! `MiniDB`, `LMDB`, `LevelDB`). Unlike Caffe2, an unknown `db_type` is an error
//! everywhere (Caffe2's DBExists answered "exists").

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::mpsc;

use tensorfmt_runtime::kv::Mode;
use tensorfmt_runtime::sink::{AlignedBuf, SliceSink};

use crate::{
    format_named, DType, Error, ErrorKind, FormatDesc, OpenOptions, Result, Tensor, TensorFile,
    TensorInfo, TensorMeta,
};

fn op_error(msg: impl Into<String>) -> Error {
    Error::from(ErrorKind::Invalid(msg.into()))
}

/// The database format a Caffe2 `db_type` names.
pub fn db_format(db_type: &str) -> Result<&'static FormatDesc> {
    let name = match db_type {
        "minidb" | "MiniDB" => "caffe2-minidb",
        "lmdb" | "LMDB" => "caffe2-lmdb",
        "leveldb" | "LevelDB" => "caffe2-leveldb",
        other => {
            return Err(Error::from(ErrorKind::Unsupported(format!(
                "unknown db_type '{other}' (minidb, lmdb, leveldb)"
            ))))
        }
    };
    format_named(name).ok_or_else(|| op_error(format!("format {name} is not built in")))
}

/// Whether a database of `db_type` can be opened at `path` (DBExistsOp). An unknown
/// `db_type` is an error (Caffe2 answered true).
pub fn db_exists(db_type: &str, path: impl AsRef<Path>) -> Result<bool> {
    let desc = db_format(db_type)?
        .db
        .ok_or_else(|| op_error("not a database format"))?;
    Ok((desc.open)(path.as_ref(), Mode::Read).is_ok())
}

/// How many elements one record holds (Save's `chunk_size`, [`ChunkSize::from_legacy`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ChunkSize {
    /// Caffe2's default: 1,000,000 elements.
    #[default]
    Default,
    /// One record per tensor, whatever its size.
    NoChunking,
    /// At most this many elements (at least 1).
    Elements(u64),
}

impl ChunkSize {
    /// The operator argument `chunk_size` as Caffe2 reads it: `-1` the default, `0` no
    /// chunking, `n > 0` n elements; other negative values are refused.
    pub fn from_legacy(n: i64) -> Result<Self> {
        match n {
            -1 => Ok(ChunkSize::Default),
            0 => Ok(ChunkSize::NoChunking),
            n if n > 0 => Ok(ChunkSize::Elements(n as u64)),
            n => Err(op_error(format!("chunk_size {n} is not -1, 0 or positive"))),
        }
    }

    fn elements(self) -> Option<u64> {
        match self {
            ChunkSize::Default => None,
            ChunkSize::NoChunking => Some(u64::MAX),
            ChunkSize::Elements(n) => Some(n.max(1)),
        }
    }
}

/// The arguments of [`save`] (SaveOp's).
#[derive(Debug, Clone, Default)]
pub struct SaveOptions {
    /// Names saved are what follows the first occurrence of this in each tensor's name.
    pub strip_prefix: Option<String>,
    /// The names to save the tensors under, one per tensor (not with `strip_prefix`).
    pub blob_name_overrides: Option<Vec<String>>,
    /// Elements per record.
    pub chunk_size: ChunkSize,
}

/// The names SaveOp gives its inputs.
fn save_names(names: &[&str], options: &SaveOptions) -> Result<Vec<String>> {
    if options.strip_prefix.is_some() && options.blob_name_overrides.is_some() {
        return Err(op_error(
            "strip_prefix and blob_name_overrides cannot be given together",
        ));
    }
    let out: Vec<String> = match (&options.blob_name_overrides, &options.strip_prefix) {
        (Some(o), _) => {
            if o.len() != names.len() {
                return Err(op_error(format!(
                    "blob_name_overrides has {} names for {} inputs",
                    o.len(),
                    names.len()
                )));
            }
            o.clone()
        }
        (None, Some(p)) if !p.is_empty() => names
            .iter()
            .map(|n| match n.find(p.as_str()) {
                Some(i) => n[i + p.len()..].to_string(),
                None => n.to_string(),
            })
            .collect(),
        _ => names.iter().map(|n| n.to_string()).collect(),
    };
    let mut seen = HashSet::new();
    for n in &out {
        if !seen.insert(n.as_str()) {
            return Err(op_error(format!("Duplicated input: {n}")));
        }
    }
    Ok(out)
}

/// Saves tensors (C order, little-endian bytes) into a new database of `db_type` at
/// `path` (SaveOp): one BlobProto record per part of at most `chunk_size` elements,
/// keyed `<name>#%<part>`. A MiniDB is written atomically (replacing any old file); an
/// LMDB or LevelDB folder must not exist yet (Caffe2's NEW mode) and is written beside
/// and renamed into place, so that a failed save leaves nothing.
pub fn save(
    db_type: &str,
    path: impl AsRef<Path>,
    tensors: &[(TensorMeta, &[u8])],
    options: &SaveOptions,
) -> Result<()> {
    let path = path.as_ref();
    let format = db_format(db_type)?;
    if format.db.is_some_and(|d| d.backend != "records") && path.exists() {
        // Caffe2's NEW mode: a database folder is created, never replaced.
        return Err(crate::Error::new(
            crate::ErrorKind::Invalid(
                "the database exists (Save creates a database, it does not replace one)".into(),
            ),
            crate::Location::file(path),
        ));
    }
    write_db(format, path, tensors, options)
}

/// Writes `tensors` as SaveOp names them into a database of `format` at `path` through a
/// [`crate::Saver`], which replaces what is there under the rule of outputs (a MiniDB
/// file; a database folder's own files, the other files in it kept).
fn write_db(
    format: &'static crate::FormatDesc,
    path: &Path,
    tensors: &[(TensorMeta, &[u8])],
    options: &SaveOptions,
) -> Result<()> {
    let names: Vec<&str> = tensors.iter().map(|(m, _)| m.name.as_str()).collect();
    let names = save_names(&names, options).map_err(|e| e.in_file(path))?;
    let write = crate::WriteOptions {
        chunk_elements: options.chunk_size.elements(),
        ..Default::default()
    };
    let mut saver = crate::Saver::create(path, Some(format.name), &write)?;
    for ((meta, bytes), name) in tensors.iter().zip(names) {
        let meta = TensorMeta {
            name: name.clone(),
            ..meta.clone()
        };
        saver.add_bytes(&meta, bytes)?;
    }
    saver.commit()
}

/// The arguments of [`load`] (LoadOp's).
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// Prepended to every blob name read (after `strip_prefix`).
    pub add_prefix: Option<String>,
    /// Blob names read are what follows the first occurrence of this.
    pub strip_prefix: Option<String>,
    /// The blobs to read, one per output (by default the output names); not with
    /// `strip_prefix` or `load_all`.
    pub source_blob_names: Option<Vec<String>>,
    /// Load every blob of the databases (outputs, if any, must be among them).
    pub load_all: bool,
    /// Succeed when some outputs are missing from the databases (they are left out).
    pub allow_incomplete: bool,
    /// Beyond Caffe2: the dtype and shape each output must have, by output name.
    pub expect: HashMap<String, (DType, Vec<u64>)>,
    /// How to open the databases.
    pub open: OpenOptions,
}

/// A blob name as LoadOp builds it from a record's blob name.
fn load_key(blob: &str, options: &LoadOptions) -> String {
    let mut k = blob;
    if let Some(p) = options.strip_prefix.as_deref().filter(|p| !p.is_empty()) {
        if let Some(i) = k.find(p) {
            k = &k[i + p.len()..];
        }
    }
    format!("{}{k}", options.add_prefix.as_deref().unwrap_or(""))
}

/// Loads tensors from one or more databases of `db_type` (LoadOp): `outputs` names the
/// tensors wanted (empty with `load_all`: every tensor). Chunks are joined with Caffe2's
/// checks (extra part, parts bigger than the tensor, size mismatch); a blob in two of the
/// databases is an error ("Duplicate Key"); a missing output is an error unless
/// `allow_incomplete`. Returns the loaded tensors, named by output, in output order (with
/// `load_all`: the databases' order).
pub fn load(
    db_type: &str,
    dbs: &[impl AsRef<Path>],
    outputs: &[&str],
    options: &LoadOptions,
) -> Result<Vec<Tensor>> {
    let format = db_format(db_type)?;
    if dbs.is_empty() {
        return Err(op_error("Load needs at least one db"));
    }
    let mut db_names = HashSet::new();
    for d in dbs {
        if !db_names.insert(d.as_ref().to_path_buf()) {
            return Err(op_error(format!(
                "db {} is given twice",
                d.as_ref().display()
            )));
        }
    }
    if let Some(src) = &options.source_blob_names {
        if options.load_all || options.strip_prefix.is_some() {
            return Err(op_error(
                "source_blob_names cannot be combined with load_all or strip_prefix",
            ));
        }
        if src.len() != outputs.len() {
            return Err(op_error(format!(
                "source_blob_names has {} names for {} outputs",
                src.len(),
                outputs.len()
            )));
        }
    }
    // (blob key, output name) in output order.
    let wanted_order: Vec<(String, String)> = match &options.source_blob_names {
        Some(src) => src
            .iter()
            .cloned()
            .zip(outputs.iter().map(|s| s.to_string()))
            .collect(),
        None => outputs
            .iter()
            .map(|s| (s.to_string(), s.to_string()))
            .collect(),
    };
    let wanted: HashMap<&str, &str> = wanted_order
        .iter()
        .map(|(k, o)| (k.as_str(), o.as_str()))
        .collect();
    let open = OpenOptions {
        format: Some(format.name.to_string()),
        ..options.open.clone()
    };
    let mut found: HashMap<String, (usize, Tensor)> = HashMap::new();
    let mut order: Vec<String> = Vec::new();
    for (i, db) in dbs.iter().enumerate() {
        let (file, mapped) = TensorFile::open_mapped(db.as_ref(), &open)?;
        for info in file.tensors() {
            let key = load_key(&info.name, options);
            if !options.load_all && !wanted.contains_key(key.as_str()) {
                continue;
            }
            if let Some((j, _)) = found.get(&key) {
                if *j != i {
                    return Err(
                        op_error(format!("Duplicate Key {key} is found!")).in_file(db.as_ref())
                    );
                }
            }
            let tensor = file.load_info(info)?;
            if !found.contains_key(&key) {
                order.push(key.clone());
            }
            found.insert(key, (i, tensor));
        }
        // Blobs that are not tensors (strings, DB readers): their content, its chunks
        // joined as Caffe2's Load joins them.
        let pieces = mapped.map(|m| m.values).unwrap_or_default();
        for (key, tensor) in other_blobs(&file, pieces, db.as_ref(), options, &wanted)? {
            if let Some((j, _)) = found.get(&key) {
                return Err(op_error(if *j != i {
                    format!("Duplicate Key {key} is found!")
                } else {
                    format!("Blob duplicated: {key}")
                })
                .in_file(db.as_ref()));
            }
            order.push(key.clone());
            found.insert(key, (i, tensor));
        }
    }
    let mut out = Vec::new();
    if options.load_all {
        for o in outputs {
            if !found.contains_key(*o) {
                return Err(op_error(format!(
                    "Output blob name {o} does not exist in the db(s)."
                )));
            }
        }
        for key in order {
            let (_, t) = found.remove(&key).expect("found");
            out.push(renamed(t, key));
        }
    } else {
        let mut missing = Vec::new();
        for (key, output) in wanted_order {
            match found.remove(&key) {
                Some((_, t)) => out.push(renamed(t, output)),
                None => missing.push(key),
            }
        }
        if !missing.is_empty() && !options.allow_incomplete {
            return Err(op_error(format!(
                "Expected to load {} blobs, got {} only (failed to load: {})",
                outputs.len(),
                outputs.len() - missing.len(),
                missing.join(", ")
            )));
        }
    }
    for t in &out {
        if let Some((dtype, shape)) = options.expect.get(&t.info.name) {
            if t.info.dtype != *dtype || t.info.shape != *shape {
                return Err(op_error(format!(
                    "blob {} is {} {:?}, expected {} {:?}",
                    t.info.name, t.info.dtype, t.info.shape, dtype, shape
                )));
            }
        }
    }
    Ok(out)
}

/// The blobs of a database that are not tensors (`std::string`, `DBReader`, ...: the
/// pieces its format's `value` mappings found), those wanted, under the name Load gives
/// them, each as a 0-d string tensor of its content, the chunks of a large one joined.
fn other_blobs(
    file: &TensorFile,
    pieces: Vec<tensorfmt_runtime::kv::ValuePiece>,
    db: &Path,
    options: &LoadOptions,
    wanted: &HashMap<&str, &str>,
) -> Result<Vec<(String, Tensor)>> {
    let pieces = pieces.into_iter().filter_map(|mut p| {
        p.name = load_key(&p.name, options);
        (options.load_all || wanted.contains_key(p.name.as_str())).then_some(p)
    });
    let values =
        tensorfmt_runtime::kv::join_values(file.source(), pieces).map_err(|e| e.in_file(db))?;
    let mut out = Vec::with_capacity(values.len());
    for v in values {
        let mut bytes = (v.data.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(&v.data);
        let info = TensorInfo::strings(
            v.name.clone(),
            vec![],
            1,
            crate::DataLocation::Range {
                offset: 0,
                len: bytes.len() as u64,
            },
        )?;
        let mut buf = AlignedBuf::zeroed(bytes.len())?;
        buf.as_mut_slice().copy_from_slice(&bytes);
        out.push((
            v.name,
            Tensor {
                info,
                data: crate::TensorData::Owned(buf),
            },
        ));
    }
    Ok(out)
}

fn renamed(mut t: Tensor, name: String) -> Tensor {
    t.info.name = name;
    t
}

/// Formats a checkpoint path from a printf pattern with one integer conversion (`%d`,
/// `%i`, `%u`, with flags `-`, `0`, `+`, space, a width, and `l`/`ll`/`z`/`j`
/// modifiers; `%%` is a `%`), as CheckpointOp's `FormatString` — but with the 64-bit
/// iteration printed whole.
pub fn format_pattern(pattern: &str, iter: i64) -> Result<String> {
    let mut out = String::new();
    let mut chars = pattern.chars().peekable();
    let mut used = false;
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        if chars.peek() == Some(&'%') {
            chars.next();
            out.push('%');
            continue;
        }
        let (mut left, mut zero, mut plus, mut space) = (false, false, false, false);
        while let Some(&f) = chars.peek() {
            match f {
                '-' => left = true,
                '0' => zero = true,
                '+' => plus = true,
                ' ' => space = true,
                _ => break,
            }
            chars.next();
        }
        let mut width = 0usize;
        while let Some(&d) = chars.peek().filter(|d| d.is_ascii_digit()) {
            width = width * 10 + (d as usize - '0' as usize);
            chars.next();
            if width > 4096 {
                return Err(op_error(format!("the width in '{pattern}' is too large")));
            }
        }
        while matches!(chars.peek(), Some('l' | 'z' | 'j' | 'h')) {
            chars.next();
        }
        let conv = chars.next();
        if !matches!(conv, Some('d' | 'i' | 'u')) || used {
            return Err(op_error(format!(
                "the checkpoint pattern '{pattern}' must hold one integer conversion (%d)"
            )));
        }
        used = true;
        let sign = if iter < 0 {
            "-"
        } else if plus {
            "+"
        } else if space {
            " "
        } else {
            ""
        };
        let digits = iter.unsigned_abs().to_string();
        let len = sign.len() + digits.len();
        let pad = width.saturating_sub(len);
        if left {
            out.push_str(sign);
            out.push_str(&digits);
            out.push_str(&" ".repeat(pad));
        } else if zero {
            out.push_str(sign);
            out.push_str(&"0".repeat(pad));
            out.push_str(&digits);
        } else {
            out.push_str(&" ".repeat(pad));
            out.push_str(sign);
            out.push_str(&digits);
        }
    }
    if !used {
        return Err(op_error(format!(
            "the checkpoint pattern '{pattern}' has no integer conversion (%d)"
        )));
    }
    Ok(out)
}

/// The arguments of [`checkpoint`] (CheckpointOp's, and what it lacked).
#[derive(Debug, Clone)]
pub struct CheckpointOptions {
    /// The database path, a printf pattern of the iteration (`ckpt_%08d.minidb`).
    pub pattern: String,
    /// Save when `iter % every == 0` (at least 1).
    pub every: i64,
    /// The name the iteration counter is saved under (a `[1]` int64 tensor), as
    /// CheckpointOp saves its input 0.
    pub iter_name: String,
    /// Keep only the last this many checkpoints of the pattern (older ones are removed
    /// after a new one is written); `None` keeps all.
    pub keep_last: Option<usize>,
    /// The rest of Save's arguments.
    pub save: SaveOptions,
}

impl Default for CheckpointOptions {
    fn default() -> Self {
        CheckpointOptions {
            pattern: String::new(),
            every: 1,
            iter_name: "iter".into(),
            keep_last: None,
            save: SaveOptions::default(),
        }
    }
}

/// Saves a checkpoint at iteration `iter` when `iter % every == 0` (CheckpointOp): the
/// iteration counter and the tensors into the database the pattern names, atomically (a
/// MiniDB through its temporary file; an LMDB or LevelDB folder is written beside and
/// swapped into place under the rule of folder outputs,
/// [`tensorfmt_runtime::output::FolderKind`]: other files in the folder are kept, and a
/// crash at any point leaves the previous checkpoint at the path, or the new one, whole);
/// then removes all but the last `keep_last` checkpoints of the pattern (a checkpoint
/// folder holding other files than the database's is left as it is). Returns the path
/// written, or `None` when this iteration saves nothing.
pub fn checkpoint(
    db_type: &str,
    iter: i64,
    tensors: &[(TensorMeta, &[u8])],
    options: &CheckpointOptions,
) -> Result<Option<PathBuf>> {
    if options.every <= 0 {
        return Err(op_error("Checkpoint interval must be positive"));
    }
    if iter % options.every != 0 {
        return Ok(None);
    }
    let format = db_format(db_type)?;
    let path = PathBuf::from(format_pattern(&options.pattern, iter)?);
    let counter = iter.to_le_bytes();
    let mut all: Vec<(TensorMeta, &[u8])> = vec![(
        TensorMeta {
            name: options.iter_name.clone(),
            dtype: DType::I64,
            shape: vec![1],
            order: crate::Order::C,
            byte_order: crate::ByteOrder::Little,
        },
        &counter[..],
    )];
    all.extend(tensors.iter().map(|(m, b)| (m.clone(), *b)));
    let mut save_options = options.save.clone();
    if let Some(o) = save_options.blob_name_overrides.as_mut() {
        o.insert(0, options.iter_name.clone());
    }
    write_db(format, &path, &all, &save_options)?;
    if let Some(keep) = options.keep_last {
        prune(format, &options.pattern, iter, keep)?;
    }
    remove_stale_checkpoints(&options.pattern);
    Ok(Some(path))
}

/// Removes what checkpoints of `pattern` killed while saved or pruned left beside them:
/// temporary folders and files (`.{checkpoint}.{pid}.{random}.tmp`, nested ones
/// included) of processes no longer running. Best effort.
fn remove_stale_checkpoints(pattern: &str) {
    let dir = Path::new(pattern)
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or_else(|| Path::new("."));
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(name) = name.to_str() else {
            continue;
        };
        let Some((mut base, pid)) = tensorfmt_runtime::output::temp_name_parts(name) else {
            continue;
        };
        while let Some((inner, _)) = tensorfmt_runtime::output::temp_name_parts(base) {
            base = inner;
        }
        if name.ends_with(".tmp")
            && iteration_of(pattern, &dir.join(base)).is_some()
            && !tensorfmt_runtime::output::running(pid)
        {
            let _ = tensorfmt_runtime::output::remove_any(&e.path());
        }
    }
}

/// Removes the checkpoints of `pattern` older than the `keep` newest (by iteration,
/// `current` included): files, and folders that hold the database's files alone
/// ([`tensorfmt_runtime::output::remove_folder_of`]).
fn prune(
    format: &'static crate::FormatDesc,
    pattern: &str,
    current: i64,
    keep: usize,
) -> Result<()> {
    let path = PathBuf::from(pattern);
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    let mut found: Vec<(i64, PathBuf)> = Vec::new();
    for e in std::fs::read_dir(&dir).map_err(|e| Error::from(e).in_file(&dir))? {
        let e = e.map_err(|e| Error::from(e).in_file(&dir))?;
        let p = e.path();
        if let Some(it) = iteration_of(pattern, &p) {
            if it <= current {
                found.push((it, p));
            }
        }
    }
    found.sort();
    let n = found.len();
    for (_, p) in found.into_iter().take(n.saturating_sub(keep)) {
        if p.is_dir() {
            // Renamed aside first, so that a kill while it is removed leaves a hidden
            // temporary folder (removed by a later checkpoint), never a partial one
            // under a checkpoint's name.
            if let Some(desc) = format.db {
                tensorfmt_runtime::output::remove_folder_of(&p, &crate::db_folder(&desc))?;
            }
        } else {
            std::fs::remove_file(&p).map_err(|e| Error::from(e).in_file(&p))?;
        }
    }
    Ok(())
}

/// The iteration whose checkpoint `path` is under `pattern`, if it is one: the path
/// formatted back from the number it holds must be the path.
fn iteration_of(pattern: &str, path: &Path) -> Option<i64> {
    let text = path.to_str()?;
    let pat = PathBuf::from(pattern);
    let dir = pat.parent().filter(|p| !p.as_os_str().is_empty());
    let file = path.file_name()?.to_str()?;
    let pat_file = pat.file_name()?.to_str()?;
    let digits: String = {
        // The digits where the conversion is: between the literal prefix and suffix.
        let at = pat_file.find('%')?;
        let prefix = &pat_file[..at];
        let rest = file.strip_prefix(prefix)?;
        rest.chars()
            .skip_while(|c| *c == ' ' || *c == '+')
            .take_while(|c| c.is_ascii_digit() || *c == '-')
            .collect()
    };
    let n: i64 = digits
        .trim_start_matches('0')
        .parse()
        .or_else(|_| {
            if digits.chars().all(|c| c == '0') && !digits.is_empty() {
                Ok(0)
            } else {
                Err(())
            }
        })
        .ok()?;
    let again = format_pattern(pattern, n).ok()?;
    let expect = match dir {
        Some(_) => again,
        None => again,
    };
    (expect == text || Path::new(&expect) == path).then_some(n)
}

/// The arguments of [`DbInput`] (TensorProtosDBInput's, and its DBReader's).
#[derive(Debug, Clone)]
pub struct DbInputOptions {
    /// Records per batch: 0 gives each record's tensors as they are; B stacks B
    /// records into `[B] + dims` per output.
    pub batch_size: usize,
    /// Records read by the shards: this reader takes records `shard_id`, `shard_id +
    /// num_shards`, ... (as DBReader).
    pub num_shards: usize,
    /// This reader's shard.
    pub shard_id: usize,
    /// Batches prepared ahead by the background thread (0: no thread, each batch read
    /// when asked for, as `no_prefetch`).
    pub prefetch: usize,
    /// Stop after this many passes over the shard's records (`None`: for ever, wrapping
    /// around as DBReader does).
    pub epochs: Option<u64>,
    /// The number of tensors each record must hold (TensorProtosDBInput's outputs);
    /// `None` takes the first record's.
    pub outputs: Option<usize>,
    /// How to open the database.
    pub open: OpenOptions,
}

impl Default for DbInputOptions {
    fn default() -> Self {
        DbInputOptions {
            batch_size: 0,
            num_shards: 1,
            shard_id: 0,
            prefetch: 2,
            epochs: None,
            outputs: None,
            open: OpenOptions::default(),
        }
    }
}

/// One batch: output i is the records' `protos[i]`, stacked. Dropped, its buffers go
/// back to the [`DbInput`] that made it, to be filled by a later batch: a plain `for`
/// loop over the input allocates only while the first batches are in flight.
pub struct Batch {
    /// One tensor per output.
    pub tensors: Vec<Tensor>,
    /// Where the buffers go back to when the batch is dropped (`None`: freed).
    home: Option<Recycle>,
}

impl std::fmt::Debug for Batch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batch")
            .field("tensors", &self.tensors)
            .finish()
    }
}

impl Batch {
    /// The batch's tensors, kept: their buffers do not go back to the input.
    pub fn into_tensors(mut self) -> Vec<Tensor> {
        self.home = None;
        std::mem::take(&mut self.tensors)
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        if let Some(home) = self.home.take() {
            home.give_back(std::mem::take(&mut self.tensors));
        }
    }
}

/// Opens the TensorProtos database at `path`: the file, and for each of its records (in
/// the database's order) the indices of its tensors in the index, as the format's mapping
/// found them. A record that holds tensors which are not the items of a list (a blob that
/// Save wrote) is an error.
fn open_records(path: &Path, options: &OpenOptions) -> Result<(TensorFile, Vec<Vec<usize>>)> {
    let (file, mapped) = TensorFile::open_mapped(path, options)?;
    let Some(mapped) = mapped else {
        return Err(op_error(format!(
            "a {} file is not a database of records",
            file.format()
        ))
        .in_file(path));
    };
    let mut out = Vec::with_capacity(mapped.records.len());
    for r in &mapped.records {
        let tensors = mapped.tensors_of(r);
        if !r.items {
            let name = tensors
                .first()
                .map_or("", |&t| file.tensors()[t].name.as_str());
            return Err(op_error(format!(
                "'{name}' is not a dataset record: the database holds blobs (Save's records), not TensorProtos records"
            ))
            .in_file(path));
        }
        out.push(tensors.to_vec());
    }
    Ok((file, out))
}

/// Reads batch `records` (record numbers) of `file`.
fn read_batch(
    file: &TensorFile,
    recs: &[Vec<usize>],
    picked: &[usize],
    batch_size: usize,
    pool: &mut Pool,
) -> Result<Batch> {
    let infos = file.tensors();
    let first = &recs[picked[0]];
    if batch_size == 0 {
        let mut tensors = Vec::with_capacity(first.len());
        for &i in first {
            tensors.push(file.load_info(&infos[i])?);
        }
        return Ok(Batch {
            tensors,
            home: None,
        });
    }
    let mut tensors = Vec::with_capacity(first.len());
    for slot in 0..first.len() {
        let proto = &infos[first[slot]];
        let item = proto.location.len();
        if proto.dtype == DType::String {
            return Err(op_error(format!(
                "output {slot} holds strings ('{}'): string outputs are not batched",
                proto.name
            )));
        }
        let total = usize::try_from(item * batch_size as u64)
            .map_err(|_| op_error("a batch does not fit in memory"))?;
        let mut buf = pool.take(total)?;
        for (j, &r) in picked.iter().enumerate() {
            let t = &infos[recs[r][slot]];
            if t.dtype != proto.dtype || t.shape != proto.shape {
                return Err(op_error(format!(
                    "record '{}' output {slot} is {} {:?}, the batch's first record's {} {:?}: every record of a batch must agree",
                    t.name, t.dtype, t.shape, proto.dtype, proto.shape
                )));
            }
            let at = j * item as usize;
            let dst = &mut buf.as_mut_slice()[at..at + item as usize];
            // Bytes stored plain in the mapped database: one copy, straight from the map.
            let plain = match (&t.location, file.source().bytes()) {
                (crate::DataLocation::Range { offset, len }, Some(b)) => {
                    usize::try_from(*offset).ok().and_then(|o| {
                        b.as_bytes()
                            .get(o..o.checked_add(usize::try_from(*len).ok()?)?)
                    })
                }
                _ => None,
            };
            match plain {
                Some(src) if src.len() == dst.len() => dst.copy_from_slice(src),
                _ => {
                    file.read_into(t, &mut SliceSink::new(dst))?;
                }
            }
        }
        let mut shape = vec![batch_size as u64];
        shape.extend(&proto.shape);
        let info = TensorInfo::dense(
            format!("{slot}"),
            proto.dtype,
            shape,
            crate::Order::C,
            proto.byte_order,
            crate::DataLocation::Range {
                offset: 0,
                len: total as u64,
            },
        )?;
        tensors.push(Tensor {
            info,
            data: crate::TensorData::Owned(buf),
        });
    }
    Ok(Batch {
        tensors,
        home: None,
    })
}

/// The order of records one shard reads, epoch after epoch (DBReader: start at
/// `shard_id`, step `num_shards`, wrap around at the end).
struct ShardOrder {
    n: usize,
    num_shards: usize,
    shard_id: usize,
    next: usize,
    epoch: u64,
    epochs: Option<u64>,
}

impl Iterator for ShardOrder {
    type Item = usize;
    fn next(&mut self) -> Option<usize> {
        if self.epochs.is_some_and(|e| self.epoch >= e) || self.n <= self.shard_id {
            return None;
        }
        let r = self.next;
        self.next += self.num_shards;
        if self.next >= self.n {
            self.next = self.shard_id;
            self.epoch += 1;
        }
        Some(r)
    }
}

/// Batches of a TensorProtos database, read by a background thread that stays
/// `prefetch` batches ahead (TensorProtosDBInput with its PrefetchOperator). Iterate it:
/// each item is a batch or the error that ended the reading.
pub struct DbInput {
    rx: Option<mpsc::Receiver<Result<Batch>>>,
    worker: Option<std::thread::JoinHandle<()>>,
    inline: Option<Box<dyn FnMut() -> Option<Result<Batch>>>>,
    /// Where batches give their buffers back (`None`: unbatched records, whose tensors
    /// are not the pool's).
    recycle: Option<Recycle>,
}

/// The most buffers a pool keeps: more are freed (a caller may keep batches of several
/// sizes; the pool stays bounded).
const POOL_MAX: usize = 64;

/// Where a batch's buffers go back to.
#[derive(Clone)]
enum Recycle {
    Channel(mpsc::Sender<AlignedBuf>),
    Shared(std::sync::Arc<std::sync::Mutex<Vec<AlignedBuf>>>),
}

impl Recycle {
    /// Sends the buffers of `tensors` that a batch owns back to the pool.
    fn give_back(&self, tensors: Vec<Tensor>) {
        for t in tensors {
            if let crate::TensorData::Owned(buf) = t.data {
                match self {
                    Recycle::Channel(tx) => {
                        let _ = tx.send(buf);
                    }
                    Recycle::Shared(p) => {
                        let mut v = p.lock().unwrap_or_else(|e| e.into_inner());
                        if v.len() < POOL_MAX {
                            v.push(buf);
                        }
                    }
                }
            }
        }
    }
}

/// The buffers a reader takes before allocating new ones.
enum Pool {
    None,
    /// Buffers sent back, and those received but not of the size asked for yet.
    Channel(mpsc::Receiver<AlignedBuf>, Vec<AlignedBuf>),
    Shared(std::sync::Arc<std::sync::Mutex<Vec<AlignedBuf>>>),
}

impl Pool {
    /// A buffer of exactly `len` bytes: a recycled one when there is one of that size
    /// (its old contents are overwritten whole), else a new, zeroed one.
    fn take(&mut self, len: usize) -> Result<AlignedBuf> {
        let found = match self {
            Pool::None => None,
            Pool::Channel(rx, stash) => {
                stash.extend(rx.try_iter());
                let found = stash
                    .iter()
                    .position(|b| b.len() == len)
                    .map(|i| stash.swap_remove(i));
                if stash.len() > POOL_MAX {
                    // The oldest go first.
                    stash.drain(..stash.len() - POOL_MAX);
                }
                found
            }
            Pool::Shared(p) => {
                let mut v = p.lock().unwrap_or_else(|e| e.into_inner());
                v.iter()
                    .position(|b| b.len() == len)
                    .map(|i| v.swap_remove(i))
            }
        };
        match found {
            Some(b) => Ok(b),
            None => Ok(AlignedBuf::zeroed(len)?),
        }
    }
}

impl DbInput {
    /// Opens the database at `path` and starts reading (on a thread when `prefetch >
    /// 0`).
    pub fn open(path: impl AsRef<Path>, options: &DbInputOptions) -> Result<DbInput> {
        let path = path.as_ref().to_path_buf();
        if options.num_shards == 0 || options.shard_id >= options.num_shards {
            return Err(op_error(format!(
                "shard_id {} is not below num_shards {}",
                options.shard_id, options.num_shards
            )));
        }
        let opts = options.clone();
        if options.prefetch == 0 {
            let mut reader = Reader::new(&path, &opts)?;
            let pool = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
            reader.pool = Pool::Shared(pool.clone());
            return Ok(DbInput {
                rx: None,
                worker: None,
                inline: Some(Box::new(move || reader.next_batch())),
                recycle: (opts.batch_size > 0).then_some(Recycle::Shared(pool)),
            });
        }
        let (tx, rx) = mpsc::sync_channel(options.prefetch);
        let (back_tx, back_rx) = mpsc::channel();
        let shown = path.clone();
        let worker = std::thread::Builder::new()
            .name("tensorfmt-db-input".into())
            .spawn(move || {
                let mut reader = match Reader::new(&path, &opts) {
                    Ok(r) => r,
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        return;
                    }
                };
                reader.pool = Pool::Channel(back_rx, Vec::new());
                while let Some(b) = reader.next_batch() {
                    let failed = b.is_err();
                    if tx.send(b).is_err() || failed {
                        return;
                    }
                }
            })
            .map_err(|e| Error::from(e).in_file(shown.as_path()))?;
        Ok(DbInput {
            rx: Some(rx),
            worker: Some(worker),
            inline: None,
            recycle: (options.batch_size > 0).then_some(Recycle::Channel(back_tx)),
        })
    }
}

impl DbInput {
    /// Gives a batch's buffers back, to be filled again by a later batch instead of new
    /// memory: what dropping the batch does (kept for explicit code; a batch of another
    /// input goes back to its own).
    pub fn recycle(&self, batch: Batch) {
        drop(batch);
    }

    /// Hands the next batch to `sink`, one tensor per output (`begin`, the bytes as a
    /// view of the batch's buffer or in chunks, `end`): a copying sink, a caller's
    /// buffer, or a device sink. `None` when the reading has ended.
    pub fn next_into(&mut self, sink: &mut dyn crate::Sink) -> Option<Result<()>> {
        let batch = match self.next()? {
            Ok(b) => b,
            Err(e) => return Some(Err(e)),
        };
        Some((|| {
            for t in &batch.tensors {
                if sink.begin(&t.info)? != crate::Flow::Continue {
                    continue;
                }
                for c in t.data.as_bytes().chunks(4 << 20) {
                    sink.chunk(c)?;
                }
                sink.end(&t.info)?;
            }
            Ok(())
        })())
    }
}

impl Iterator for DbInput {
    type Item = Result<Batch>;
    fn next(&mut self) -> Option<Result<Batch>> {
        let next = match self.inline.as_mut() {
            Some(f) => f(),
            None => self.rx.as_ref()?.recv().ok(),
        };
        next.map(|b| {
            b.map(|mut b| {
                b.home = self.recycle.clone();
                b
            })
        })
    }
}

impl Drop for DbInput {
    fn drop(&mut self) {
        // Closing the channel stops the thread at its next send.
        self.rx = None;
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}

/// The reading side of [`DbInput`]: the database, its records, the shard's order.
struct Reader {
    file: TensorFile,
    recs: Vec<Vec<usize>>,
    order: ShardOrder,
    batch_size: usize,
    pool: Pool,
}

impl Reader {
    fn new(path: &Path, options: &DbInputOptions) -> Result<Reader> {
        let (file, recs) = open_records(path, &options.open)?;
        if let Some(n) = options.outputs {
            if let Some(r) = recs.iter().find(|r| r.len() != n) {
                let name = &file.tensors()[r[0]].name;
                return Err(op_error(format!(
                    "record of '{name}' holds {} tensors, {n} outputs expected",
                    r.len()
                ))
                .in_file(path));
            }
        }
        let order = ShardOrder {
            n: recs.len(),
            num_shards: options.num_shards,
            shard_id: options.shard_id,
            next: options.shard_id,
            epoch: 0,
            epochs: options.epochs,
        };
        Ok(Reader {
            file,
            recs,
            order,
            batch_size: options.batch_size,
            pool: Pool::None,
        })
    }

    fn next_batch(&mut self) -> Option<Result<Batch>> {
        let want = self.batch_size.max(1);
        let picked: Vec<usize> = self.order.by_ref().take(want).collect();
        if picked.len() < want {
            // The last epoch ended inside the batch: nothing more (a partial batch is
            // not given, as Caffe2 wraps around instead).
            return None;
        }
        let n = self.recs[picked[0]].len();
        if let Some(r) = picked.iter().find(|&&r| self.recs[r].len() != n) {
            let name = &self.file.tensors()[self.recs[*r][0]].name;
            return Some(Err(op_error(format!(
                "record of '{name}' holds {} tensors, the batch's first {n}",
                self.recs[*r].len()
            ))));
        }
        Some(read_batch(
            &self.file,
            &self.recs,
            &picked,
            self.batch_size,
            &mut self.pool,
        ))
    }
}

/// Loads a whole TensorProtos record set as a reference: every record, in order, as
/// its tensors (what a straightforward loop over the database gives).
pub fn dataset_records(path: impl AsRef<Path>) -> Result<Vec<Vec<Tensor>>> {
    let (file, recs) = open_records(path.as_ref(), &OpenOptions::default())?;
    let mut out = Vec::with_capacity(recs.len());
    for r in recs {
        let mut ts = Vec::with_capacity(r.len());
        for i in r {
            ts.push(file.load_info(&file.tensors()[i])?);
        }
        out.push(ts);
    }
    Ok(out)
}
