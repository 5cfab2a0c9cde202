//! Typed checkpoints: a struct of tensors loaded from, and saved to, any format.
//!
//! [`StateDict`] is what `#[derive(StateDict)]` implements for a user's struct (and what
//! this module implements for tensors, plain values, `Vec`s, arrays, `Option`s and
//! boxes). Each field is an entry under a dotted key, as PyTorch's `state_dict()` names
//! them: a nested struct's field `qkv` inside `layers[0].attn` is
//! `layers.0.attn.qkv`. A load matches those keys against the file's tensor names and
//! reports, as `nn.Module.load_state_dict` does, the keys the struct wants and the file
//! lacks (*missing*), the tensors the file has and the struct does not take
//! (*unexpected*), and shape and dtype mismatches ([`LoadReport`]).
//!
//! ```no_run
//! use tensorfmt::{StateDict, Tensor};
//!
//! #[derive(StateDict)]
//! struct Linear {
//!     weight: Tensor,
//!     bias: Option<Tensor>,
//! }
//!
//! #[derive(StateDict)]
//! struct Model {
//!     embed: Tensor,
//!     layers: Vec<Linear>,
//!     #[state(rename = "ln_f")]
//!     norm: Linear,
//!     epoch: u64,
//! }
//!
//! let model = Model::load("model.safetensors")?; // strict: every key, nothing more
//! model.save("model.pt", None)?; // nested dicts in a PyTorch checkpoint
//! # Ok::<(), tensorfmt::Error>(())
//! ```
//!
//! **Rules.**
//! - A strict load (the default) fails on any missing or unexpected key or mismatch,
//!   naming them all; [`LoadOptions::partial`] reports missing and unexpected keys
//!   instead (mismatched shapes and dtypes stay errors, as in PyTorch).
//! - A `Vec` field takes the entries `.0`, `.1`, … that the file has, in a fresh load;
//!   in [`StateDict::update`] it keeps its length, and entries past it are unexpected.
//! - [`StateDict::update`] loads into an existing value: its tensors' shapes and dtypes
//!   are the expected ones, and in a partial load what the file lacks keeps its value
//!   (as `load_state_dict(strict=False)`). Like PyTorch, a strict update that fails may
//!   have replaced some fields already.
//! - Dtypes are converted only when asked ([`LoadOptions::convert_dtype`]).
//! - A [`Tensor`] field loaded from bytes stored plain is a view of the file's memory map
//!   (no copy); other types copy.
//! - Zip members' CRC-32s (PyTorch checkpoints, npz) are verified as tensors load, as
//!   everywhere in tensorfmt, so a load reads every payload byte once; with
//!   `LoadOptions { open: OpenOptions { skip_checksums: true, .. }, .. }` the views are
//!   made without reading the payload, as torch's `mmap=True` load (benches/README.md:
//!   3.3 ms against 85.5 ms for 1.07 GiB).
//! - Plain values (integers, floats, booleans, strings) are read from the file's
//!   structure (a PyTorch checkpoint's `epoch`, safetensors `__metadata__` text) or from
//!   a tensor of one element of that name. They never count as unexpected, and other
//!   values of the file (an optimizer's hyperparameters) are left alone.
//! - A save writes a format that stores objects (PyTorch) as nested dicts and lists
//!   ([`SaveOptions::nested`]; `false` writes the flat dict `state_dict()` gives), plain
//!   values in it; safetensors gets them as `__metadata__` text; formats of tensors alone
//!   get numbers as 0-d tensors and refuse text.

use std::borrow::Cow;
use std::cell::OnceCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

use crate::{
    DType, Error, ErrorKind, Location, Node, OpenOptions, Result, Saver, Tensor, TensorFile,
    TensorMeta, WriteOptions,
};

/// Where an entry sits: the parts of its dotted key, each a field (a dict key in a
/// nested save) or an index (a list position).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Key {
    parts: Vec<Part>,
}

/// One part of a [`Key`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    /// A field or dict key.
    Field(String),
    /// A position in a list.
    Index(usize),
}

impl Key {
    /// The root: no part.
    pub fn root() -> Key {
        Key::default()
    }

    /// This key with a field added (`name` may hold dots: each part is a field).
    pub fn field(&self, name: &str) -> Key {
        let mut k = self.clone();
        k.parts.extend(
            name.split('.')
                .filter(|p| !p.is_empty())
                .map(|p| Part::Field(p.to_string())),
        );
        k
    }

    /// This key with a list position added.
    pub fn index(&self, i: usize) -> Key {
        let mut k = self.clone();
        k.parts.push(Part::Index(i));
        k
    }

    /// The parts.
    pub fn parts(&self) -> &[Part] {
        &self.parts
    }

    /// The dotted name (`layers.0.attn.qkv`).
    pub fn name(&self) -> String {
        let mut s = String::new();
        for p in &self.parts {
            if !s.is_empty() {
                s.push('.');
            }
            match p {
                Part::Field(f) => s.push_str(f),
                Part::Index(i) => s.push_str(&i.to_string()),
            }
        }
        s
    }
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name())
    }
}

/// How [`StateDict::load_with`] and [`StateDict::update`] load.
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// Missing and unexpected keys are reported in the [`LoadReport`], not errors
    /// (PyTorch's `strict=False`). Shape and dtype mismatches stay errors.
    pub partial: bool,
    /// Tensors stored as another dtype than the field's are converted as NumPy's
    /// `astype` converts them (listed in [`LoadReport::converted`]) instead of refused.
    pub convert_dtype: bool,
    /// Prefixes of the file's names replaced before they are matched, the first that
    /// applies: `("model.", "")` reads a checkpoint whose state dict sits under `model`,
    /// `("transformer.h.", "layers.")` renames a family.
    pub map_prefix: Vec<(String, String)>,
    /// How the file is opened (its format, limits, a registry of user formats).
    pub open: OpenOptions,
}

impl LoadOptions {
    /// Partial: missing and unexpected keys reported, not errors.
    pub fn partial() -> Self {
        LoadOptions {
            partial: true,
            ..Default::default()
        }
    }

    /// These options with the file's names starting with `from` read as starting with
    /// `to` instead.
    ///
    /// ```
    /// // A Hugging Face checkpoint's `model.layers.0…` read into a struct whose keys are
    /// // `layers.0…`, and `lm_head.weight` as `head.weight`:
    /// let options = tensorfmt::LoadOptions::partial()
    ///     .map_prefix("model.", "")
    ///     .map_prefix("lm_head.", "head.");
    /// assert_eq!(options.map_prefix.len(), 2);
    /// ```
    pub fn map_prefix(mut self, from: &str, to: &str) -> Self {
        self.map_prefix.push((from.to_string(), to.to_string()));
        self
    }
}

/// A tensor whose shape or dtype is not the one the struct expects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// The key.
    pub key: String,
    /// What the struct expects (`shape [4, 8]`, `f32`, `2 dimensions`).
    pub expected: String,
    /// What the file has.
    pub found: String,
}

/// What a load matched, as `load_state_dict` reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadReport {
    /// Keys the struct wants and the file lacks, in the struct's order.
    pub missing: Vec<String>,
    /// Tensors of the file the struct does not take, in the file's order (their names as
    /// the file has them).
    pub unexpected: Vec<String>,
    /// Shape and dtype mismatches.
    pub mismatched: Vec<Mismatch>,
    /// Tensors converted from another dtype ([`LoadOptions::convert_dtype`]).
    pub converted: Vec<String>,
}

impl LoadReport {
    /// True when every key matched: nothing missing, unexpected or mismatched.
    pub fn is_exact(&self) -> bool {
        self.missing.is_empty() && self.unexpected.is_empty() && self.mismatched.is_empty()
    }
}

fn quoted(keys: &[String]) -> String {
    keys.iter()
        .map(|k| format!("\"{}\"", crate::runtime::error::escape_name(k)))
        .collect::<Vec<_>>()
        .join(", ")
}

impl std::fmt::Display for LoadReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut first = true;
        let mut line = |f: &mut std::fmt::Formatter<'_>, s: String| {
            if !first {
                f.write_str("\n")?;
            }
            first = false;
            f.write_str(&s)
        };
        if !self.missing.is_empty() {
            line(f, format!("missing keys: {}", quoted(&self.missing)))?;
        }
        if !self.unexpected.is_empty() {
            line(f, format!("unexpected keys: {}", quoted(&self.unexpected)))?;
        }
        for m in &self.mismatched {
            line(
                f,
                format!(
                    "mismatch for \"{}\": the file has {}, the struct expects {}",
                    crate::runtime::error::escape_name(&m.key),
                    m.found,
                    m.expected
                ),
            )?;
        }
        if first {
            f.write_str("every key matched")?;
        }
        Ok(())
    }
}

/// The state of one load: the file's tensors and values by key, which have been taken,
/// and the report. [`StateDict`] implementations call it; users meet it only when they
/// implement [`StateDict`] by hand.
pub struct LoadCx<'f> {
    file: &'f TensorFile,
    options: &'f LoadOptions,
    /// The file's tensors by (mapped) name: their index in `file.tensors()`.
    tensors: HashMap<String, usize>,
    /// The (mapped) names of the file's tensors, for prefix lookups.
    names: BTreeSet<String>,
    /// The file's plain values, read from its stored object the first time a value or a
    /// name that no tensor has is asked for (a struct of tensors never decodes it).
    values: OnceCell<Values>,
    used: Vec<bool>,
    report: LoadReport,
    error: Option<Error>,
}

/// The plain values of a file's stored object.
struct Values {
    /// Each value of the object by its (mapped) path, the first of a path (none when the
    /// format stores no object, or it could not be decoded).
    by_name: BTreeMap<String, Node>,
    /// The (mapped) path of each value.
    names: BTreeSet<String>,
    /// Why the object could not be decoded (past `Limits::max_tree_bytes`, say): the
    /// error of a load that asks for a value, and only of such a load.
    error: Option<Error>,
}

/// True when `set` holds `name` or a name below it (`name.…`); the root holds anything.
fn has_prefix(set: &BTreeSet<String>, name: &str) -> bool {
    if name.is_empty() {
        return !set.is_empty();
    }
    set.range(name.to_string()..)
        .take_while(|n| n.starts_with(name))
        .any(|n| n.len() == name.len() || n.as_bytes()[name.len()] == b'.')
}

impl LoadOptions {
    /// `name` as the struct's keys see it: the first of [`LoadOptions::map_prefix`] that
    /// applies, applied.
    fn mapped<'n>(&self, name: &'n str) -> Cow<'n, str> {
        for (from, to) in &self.map_prefix {
            if let Some(rest) = name.strip_prefix(from.as_str()) {
                return Cow::Owned(format!("{to}{rest}"));
            }
        }
        Cow::Borrowed(name)
    }
}

impl<'f> LoadCx<'f> {
    /// A load of `file`'s tensors as `options` say.
    pub fn new(file: &'f TensorFile, options: &'f LoadOptions) -> Result<Self> {
        let mut tensors = HashMap::new();
        let mut names = BTreeSet::new();
        for (i, t) in file.tensors().iter().enumerate() {
            let name = options.mapped(&t.name).into_owned();
            names.insert(name.clone());
            tensors.entry(name).or_insert(i);
        }
        Ok(LoadCx {
            file,
            options,
            used: vec![false; file.tensors().len()],
            tensors,
            names,
            values: OnceCell::new(),
            report: LoadReport::default(),
            error: None,
        })
    }

    /// The file's values, decoded on the first call.
    fn values(&self) -> &Values {
        self.values.get_or_init(|| {
            let (tree, error) = match self.file.structure() {
                Ok(tree) => (tree, None),
                Err(e) => (None, Some(e)),
            };
            // Found by name in O(log n), each copied out of the object once.
            let mut by_name = BTreeMap::new();
            for (path, node) in tree.iter().flat_map(|t| t.values()) {
                if !path.is_empty() {
                    by_name
                        .entry(self.options.mapped(&path).into_owned())
                        .or_insert_with(|| node.untyped().clone());
                }
            }
            let names = by_name.keys().cloned().collect();
            Values {
                by_name,
                names,
                error,
            }
        })
    }

    /// The options of this load.
    pub fn options(&self) -> &LoadOptions {
        self.options
    }

    /// True when the file has an entry at `key` or below it (a tensor or a value named
    /// `key` or `key.…`): what an `Option` field and a `Vec`'s length go by.
    pub fn present(&self, key: &Key) -> bool {
        let name = key.name();
        has_prefix(&self.names, &name) || has_prefix(&self.values().names, &name)
    }

    /// The first parts of the names below `key` (`experts.gate.weight` → `gate` under
    /// `experts`), tensors and values, in order and each once.
    pub fn children(&self, key: &Key) -> BTreeSet<String> {
        let prefix = key.name();
        let below = |n: &String| -> Option<String> {
            let rest = if prefix.is_empty() {
                n.as_str()
            } else {
                n.strip_prefix(prefix.as_str())?.strip_prefix('.')?
            };
            rest.split('.').next().map(str::to_string)
        };
        // The names that start with the key's, found in the sorted sets (not by a pass
        // over every name: a map of maps asks once per map).
        let starting = |set: &'_ BTreeSet<String>| -> Vec<String> {
            set.range::<str, _>((
                std::ops::Bound::Included(prefix.as_str()),
                std::ops::Bound::Unbounded,
            ))
            .take_while(|n| n.starts_with(prefix.as_str()))
            .filter_map(below)
            .collect()
        };
        let mut out: BTreeSet<String> = starting(&self.names).into_iter().collect();
        out.extend(starting(&self.values().names));
        out
    }

    /// The tensor at `key`, taken (it will not be reported unexpected): loaded, a view of
    /// the file's map where its bytes are stored plain. `None` when the file has none
    /// (recorded as missing) or it could not be read (the error is kept and returned by
    /// the load).
    pub fn tensor(&mut self, key: &Key) -> Option<Tensor> {
        let name = key.name();
        let Some(&i) = self.tensors.get(&name) else {
            self.missing(key);
            return None;
        };
        self.used[i] = true;
        let info = &self.file.tensors()[i];
        match self.file.load_info(info) {
            Ok(mut t) => {
                t.info.name = name;
                Some(t)
            }
            Err(e) => {
                self.fail(e);
                None
            }
        }
    }

    /// [`LoadCx::tensor`] checked against the shape a value already has: a tensor of
    /// another shape is recorded as a mismatch (and not returned).
    pub fn tensor_of_shape(&mut self, key: &Key, shape: &[u64]) -> Option<Tensor> {
        let t = self.tensor(key)?;
        if t.info.shape != shape {
            self.mismatch(key, shape_text(shape), shape_text(&t.info.shape));
            return None;
        }
        Some(t)
    }

    /// The plain value at `key`: from the file's structure, or a tensor of one element
    /// of that name (taken). `None` when there is neither (recorded as missing).
    pub fn value(&mut self, key: &Key) -> Option<Node> {
        let name = key.name();
        if let Some(found) = self.values().by_name.get(&name) {
            return Some(found.clone());
        }
        if let Some(&i) = self.tensors.get(&name) {
            if self.file.tensors()[i].numel().ok() == Some(1) {
                let t = self.tensor(key)?;
                return match scalar_node(&t) {
                    Ok(n) => Some(n),
                    Err(e) => {
                        self.fail(e);
                        None
                    }
                };
            }
        }
        match self.values.get_mut().and_then(|v| v.error.take()) {
            Some(e) => self.fail(e),
            None => self.missing(key),
        }
        None
    }

    /// Records `key` as missing.
    pub fn missing(&mut self, key: &Key) {
        self.report.missing.push(key.name());
    }

    /// Records a mismatch at `key`.
    pub fn mismatch(&mut self, key: &Key, expected: impl Into<String>, found: impl Into<String>) {
        self.report.mismatched.push(Mismatch {
            key: key.name(),
            expected: expected.into(),
            found: found.into(),
        });
    }

    /// Records an error met at `key` (the first is what the load returns).
    pub fn fail(&mut self, e: Error) {
        if self.error.is_none() {
            self.error = Some(e);
        }
    }

    /// `t` as `dtype`: itself when it is of it, converted when the options allow it
    /// (listed in the report), `None` and a mismatch recorded otherwise.
    pub fn with_dtype(&mut self, key: &Key, t: Tensor, dtype: DType) -> Option<Tensor> {
        if t.info.dtype == dtype {
            return Some(t);
        }
        if !self.options.convert_dtype {
            self.mismatch(key, dtype.to_string(), t.info.dtype.to_string());
            return None;
        }
        match t.cast(dtype) {
            Ok(c) => {
                self.report.converted.push(key.name());
                Some(c)
            }
            Err(e) => {
                self.fail(e.in_entry(key.name()));
                None
            }
        }
    }

    /// Ends the load: the error met, or the strict load's refusal, or the report.
    fn finish(mut self, what: &str) -> Result<LoadReport> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        for (i, t) in self.file.tensors().iter().enumerate() {
            if !self.used[i] {
                self.report.unexpected.push(t.name.clone());
            }
        }
        let strict_fail = !self.options.partial
            && (!self.report.missing.is_empty() || !self.report.unexpected.is_empty());
        if strict_fail || !self.report.mismatched.is_empty() {
            let hint = if strict_fail && self.report.mismatched.is_empty() {
                " (LoadOptions::partial() loads what matches; LoadOptions::map_prefix maps \
                 the file's names)"
            } else {
                ""
            };
            return Err(Error::new(
                ErrorKind::Invalid(format!(
                    "the file does not match {what}{hint}:\n{}",
                    self.report
                )),
                self.file.source().location(),
            ));
        }
        Ok(self.report)
    }
}

/// A tensor of one element as a plain value.
fn scalar_node(t: &Tensor) -> Result<Node> {
    let c = t.cast(match t.info.dtype {
        DType::F16 | DType::BF16 | DType::F32 | DType::F64 => DType::F64,
        DType::Bool => DType::Bool,
        DType::U64 => DType::U64,
        _ => DType::I64,
    })?;
    let b = c.data.as_bytes();
    let arr8 =
        |b: &[u8]| -> [u8; 8] { b.get(..8).and_then(|s| s.try_into().ok()).unwrap_or([0; 8]) };
    Ok(match c.info.dtype {
        DType::F64 => Node::Float(f64::from_le_bytes(arr8(b))),
        DType::Bool => Node::Bool(b.first() == Some(&1)),
        DType::U64 => Node::Int(u64::from_le_bytes(arr8(b)) as i128),
        _ => Node::Int(i64::from_le_bytes(arr8(b)) as i128),
    })
}

/// What a save collects: every tensor and value by key, in the struct's order.
pub struct SaveCx<'a> {
    entries: Vec<(Key, Entry<'a>)>,
}

enum Entry<'a> {
    Tensor(TensorMeta, Cow<'a, [u8]>),
    /// A tensor made for the save (a candle tensor copied to the CPU), written from
    /// its own buffer.
    Held(TensorMeta, Tensor),
    Value(Node),
}

impl<'a> SaveCx<'a> {
    /// Adds a tensor at `key` whose bytes `meta` describes (its name is replaced by the
    /// key's).
    pub fn tensor(&mut self, key: &Key, mut meta: TensorMeta, bytes: Cow<'a, [u8]>) {
        meta.name = key.name();
        self.entries.push((key.clone(), Entry::Tensor(meta, bytes)));
    }

    /// Adds a tensor made for this save at `key` (C or Fortran order), written from its
    /// own buffer.
    pub fn held_tensor(&mut self, key: &Key, t: Tensor) -> Result<()> {
        let mut meta = t.meta().ok_or_else(|| {
            Error::from(ErrorKind::Unsupported(format!(
                "tensor \"{key}\" is a strided view: save its elements in C order"
            )))
        })?;
        meta.name = key.name();
        self.entries.push((key.clone(), Entry::Held(meta, t)));
        Ok(())
    }

    /// Adds a plain value at `key` (numbers, booleans, text).
    pub fn value(&mut self, key: &Key, value: Node) {
        self.entries.push((key.clone(), Entry::Value(value)));
    }
}

/// How [`StateDict::save_with`] saves.
#[derive(Debug, Clone)]
pub struct SaveOptions {
    /// The format's name; `None`: the one the path's extension maps to.
    pub format: Option<String>,
    /// In formats that store objects (PyTorch), the struct's nesting as nested dicts
    /// (and lists for `Vec`s and arrays): `torch.load` gives
    /// `{"layers": [{"attn": {...}}, ...], ...}`. `false` writes the flat dict of dotted
    /// keys that `nn.Module.state_dict()` gives (what `load_state_dict` takes). Other
    /// formats are flat either way.
    pub nested: bool,
    /// The writer's options.
    pub write: WriteOptions,
}

impl Default for SaveOptions {
    fn default() -> Self {
        SaveOptions {
            format: None,
            nested: true,
            write: WriteOptions::default(),
        }
    }
}

/// A struct of tensors that loads from and saves to any format: derive it with
/// `#[derive(StateDict)]`.
///
/// The derive's attributes: on a field, `#[state(rename = "name")]` (its key part;
/// dots nest), `#[state(flatten)]` (its entries sit at the struct's own level) and
/// `#[state(skip)]` (not stored; `Default` on load); on the struct,
/// `#[state(prefix = "model")]` (every entry under `model.`).
pub trait StateDict: Sized {
    /// A fresh value from the entries at `key` and below; `None` when something it needs
    /// is missing, mismatched or unreadable (recorded in `cx`).
    fn load_state(cx: &mut LoadCx<'_>, key: &Key) -> Option<Self>;

    /// Loads the entries at `key` and below into this value: what the file lacks is
    /// recorded missing and keeps its value; tensors keep their shape (a different one is
    /// a mismatch).
    fn update_state(&mut self, cx: &mut LoadCx<'_>, key: &Key) {
        if let Some(v) = Self::load_state(cx, key) {
            *self = v;
        }
    }

    /// Adds this value's entries at `key` and below to `cx`.
    fn save_state<'a>(&'a self, cx: &mut SaveCx<'a>, key: &Key) -> Result<()>;

    /// Loads a value from the file at `path` (any format; sharded and distributed
    /// checkpoints too), strictly: any missing, unexpected or mismatched key is an error
    /// naming them all.
    fn load(path: impl AsRef<Path>) -> Result<Self> {
        Self::load_with(path, &LoadOptions::default()).map(|(v, _)| v)
    }

    /// Loads a value from the file at `path` as `options` say, with the report. A
    /// partial load still fails when a key that is not an `Option` is missing (the value
    /// cannot be built without it): [`StateDict::update`] an existing value instead.
    fn load_with(path: impl AsRef<Path>, options: &LoadOptions) -> Result<(Self, LoadReport)> {
        let file = TensorFile::open_with(path, &options.open)?;
        Self::load_from(&file, options)
    }

    /// [`StateDict::load_with`] from an opened file.
    fn load_from(file: &TensorFile, options: &LoadOptions) -> Result<(Self, LoadReport)> {
        let mut cx = LoadCx::new(file, options)?;
        let value = Self::load_state(&mut cx, &Key::root());
        let location = file.source().location();
        let report = cx.finish(std::any::type_name::<Self>())?;
        match value {
            Some(v) => Ok((v, report)),
            None => Err(Error::new(
                ErrorKind::Invalid(format!(
                    "{} cannot be built without its missing keys (update an existing value \
                     to keep what the file lacks):\n{report}",
                    std::any::type_name::<Self>()
                )),
                location,
            )),
        }
    }

    /// Loads the file at `path` into this value as `options` say (PyTorch's
    /// `load_state_dict`), with the report; in a partial load what the file lacks keeps
    /// its value.
    ///
    /// ```
    /// # #[cfg(all(feature = "derive", feature = "safetensors"))] {
    /// # let dir = tempfile::tempdir()?; std::env::set_current_dir(dir.path())?;
    /// use tensorfmt::{LoadOptions, StateDict, Tensor};
    ///
    /// #[derive(StateDict)]
    /// struct Head { weight: Tensor, bias: Tensor }
    ///
    /// #[derive(StateDict)]
    /// struct Other { weight: Tensor, extra: Tensor }
    ///
    /// let t = |v: f32| Tensor::from_slice("", &[2], &[v, v]);
    /// Other { weight: t(1.0)?, extra: t(9.0)? }.save("head.safetensors", None)?;
    ///
    /// let mut head = Head { weight: t(0.0)?, bias: t(0.5)? };
    /// // Strict (the default): an error naming the missing and the unexpected key.
    /// let err = head.update("head.safetensors", &LoadOptions::default()).unwrap_err();
    /// assert!(err.to_string().contains("missing keys: \"bias\""));
    /// // Partial: the report, and what the file lacks keeps its value.
    /// let report = head.update("head.safetensors", &LoadOptions::partial())?;
    /// assert_eq!(report.missing, ["bias"]);
    /// assert_eq!(report.unexpected, ["extra"]);
    /// assert_eq!(head.weight.to_vec::<f32>()?, [1.0, 1.0]);
    /// assert_eq!(head.bias.to_vec::<f32>()?, [0.5, 0.5]);
    /// # }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn update(&mut self, path: impl AsRef<Path>, options: &LoadOptions) -> Result<LoadReport> {
        let file = TensorFile::open_with(path, &options.open)?;
        self.update_from(&file, options)
    }

    /// [`StateDict::update`] from an opened file.
    fn update_from(&mut self, file: &TensorFile, options: &LoadOptions) -> Result<LoadReport> {
        let mut cx = LoadCx::new(file, options)?;
        self.update_state(&mut cx, &Key::root());
        cx.finish(std::any::type_name::<Self>())
    }

    /// The dotted keys of this value's entries, in order.
    fn keys(&self) -> Result<Vec<String>> {
        let mut cx = SaveCx {
            entries: Vec::new(),
        };
        self.save_state(&mut cx, &Key::root())?;
        Ok(cx.entries.iter().map(|(k, _)| k.name()).collect())
    }

    /// Saves this value to `path` atomically, in `format` (a format's name) or the one
    /// the extension maps to, nested where the format can hold it.
    fn save(&self, path: impl AsRef<Path>, format: Option<&str>) -> Result<()> {
        let options = SaveOptions {
            format: format.map(str::to_string),
            ..Default::default()
        };
        self.save_with(path, &options)
    }

    /// Saves this value to `path` atomically as `options` say.
    fn save_with(&self, path: impl AsRef<Path>, options: &SaveOptions) -> Result<()> {
        let path = path.as_ref();
        let mut cx = SaveCx {
            entries: Vec::new(),
        };
        self.save_state(&mut cx, &Key::root())?;
        write_entries(path, cx.entries, options)
    }
}

/// Writes collected entries: the structure first (nested or flat), then the tensors.
fn write_entries(path: &Path, entries: Vec<(Key, Entry<'_>)>, options: &SaveOptions) -> Result<()> {
    let mut seen = std::collections::HashSet::new();
    for (k, _) in &entries {
        if !seen.insert(k.name()) {
            return Err(Error::new(
                ErrorKind::Invalid(format!(
                    "two entries of the struct have the key \"{}\" (rename one)",
                    k.name()
                )),
                Location::file(path),
            ));
        }
    }
    let mut saver = Saver::create(path, options.format.as_deref(), &options.write)?;
    let values_beside = saver.format_desc().values;
    // A flat dict of dotted keys, each value as `value` gives it.
    let flat = |value: &dyn Fn(&Node) -> Node| {
        Node::Dict(
            entries
                .iter()
                .map(|(k, e)| {
                    let v = match e {
                        Entry::Tensor(..) | Entry::Held(..) => Node::Tensor(k.name()),
                        Entry::Value(v) => value(v),
                    };
                    (Node::Str(k.name()), v)
                })
                .collect(),
        )
    };
    let tree = if values_beside {
        // Values beside the tensors (safetensors `__metadata__`) hold text under flat keys.
        flat(&|v| Node::Str(value_text(v)))
    } else if options.nested {
        nest(&entries)
    } else {
        flat(&|v| v.clone())
    };
    let kept = saver.set_structure(&tree)?;
    if !kept.dropped.is_empty() {
        return Err(Error::new(
            ErrorKind::Unsupported(format!(
                "{} cannot hold the values {} (save them to a format that stores objects, \
                 such as pytorch)",
                saver.format(),
                quoted(&kept.dropped)
            )),
            Location::file(path),
        ));
    }
    for (key, entry) in &entries {
        match entry {
            Entry::Tensor(meta, bytes) => saver.add_bytes(meta, bytes)?,
            Entry::Held(meta, t) => saver.add_bytes(meta, t.data.as_bytes())?,
            Entry::Value(v) if !kept.stored => {
                // Formats of tensors alone: a number as a 0-d tensor.
                let t = value_tensor(key, v).map_err(|e| e.in_file(path))?;
                let meta = t.meta().expect("a new tensor is in C order");
                saver.add_bytes(&meta, t.data.as_bytes())?;
            }
            Entry::Value(_) => {}
        }
    }
    saver.commit()
}

/// A plain value's text, as safetensors `__metadata__` holds it.
fn value_text(v: &Node) -> String {
    match v {
        Node::Str(s) => s.clone(),
        Node::Bool(b) => b.to_string(),
        Node::Int(i) => i.to_string(),
        Node::Float(f) => format!("{f:?}"),
        other => other.to_string(),
    }
}

/// A plain number as a 0-d tensor, for formats of tensors alone.
fn value_tensor(key: &Key, v: &Node) -> Result<Tensor> {
    let name = key.name();
    match v {
        Node::Int(i) => match i64::try_from(*i) {
            Ok(i) => Tensor::from_slice(&name, &[], &[i]),
            Err(_) => Tensor::from_slice(&name, &[], &[*i as u64]),
        },
        Node::Float(f) => Tensor::from_slice(&name, &[], &[*f]),
        Node::Bool(b) => Tensor::from_bytes(
            &name,
            DType::Bool,
            &[],
            &[*b as u8],
            crate::ByteOrder::Little,
        ),
        _ => Err(ErrorKind::Unsupported(format!(
            "the value \"{name}\" ({v}) in a format of tensors alone (save it to pytorch or \
             safetensors)"
        ))
        .into()),
    }
}

/// The entries as nested dicts (fields) and lists (indices).
fn nest(entries: &[(Key, Entry<'_>)]) -> Node {
    #[derive(Default)]
    struct Tree {
        leaf: Option<Node>,
        children: Vec<(Part, Tree)>,
    }
    let mut root = Tree::default();
    for (key, entry) in entries {
        let mut at = &mut root;
        for part in key.parts() {
            let pos = match at.children.iter().position(|(p, _)| p == part) {
                Some(pos) => pos,
                None => {
                    at.children.push((part.clone(), Tree::default()));
                    at.children.len() - 1
                }
            };
            at = &mut at.children[pos].1;
        }
        at.leaf = Some(match entry {
            Entry::Tensor(..) | Entry::Held(..) => Node::Tensor(key.name()),
            Entry::Value(v) => v.clone(),
        });
    }
    fn build(t: &Tree) -> Node {
        if let Some(leaf) = &t.leaf {
            return leaf.clone();
        }
        let list = !t.children.is_empty()
            && t.children
                .iter()
                .enumerate()
                .all(|(i, (p, _))| *p == Part::Index(i));
        if list {
            Node::List(t.children.iter().map(|(_, c)| build(c)).collect())
        } else {
            Node::Dict(
                t.children
                    .iter()
                    .map(|(p, c)| {
                        let k = match p {
                            Part::Field(f) => f.clone(),
                            Part::Index(i) => i.to_string(),
                        };
                        (Node::Str(k), build(c))
                    })
                    .collect(),
            )
        }
    }
    build(&root)
}

// ---------------------------------------------------------------------------------------
// Tensors

/// The shape text of reports.
fn shape_text(shape: &[u64]) -> String {
    format!("shape {shape:?}")
}

impl StateDict for Tensor {
    fn load_state(cx: &mut LoadCx<'_>, key: &Key) -> Option<Self> {
        cx.tensor(key)
    }

    fn update_state(&mut self, cx: &mut LoadCx<'_>, key: &Key) {
        let Some(t) = cx.tensor_of_shape(key, &self.info.shape) else {
            return;
        };
        if let Some(t) = cx.with_dtype(key, t, self.info.dtype) {
            *self = t;
        }
    }

    fn save_state<'a>(&'a self, cx: &mut SaveCx<'a>, key: &Key) -> Result<()> {
        match self.meta() {
            Some(meta) => {
                let bytes = self.data.as_bytes();
                let n = usize::try_from(meta.nbytes()?).unwrap_or(usize::MAX);
                let bytes = bytes.get(..n).ok_or_else(|| {
                    Error::from(ErrorKind::SizeMismatch(format!(
                        "tensor \"{key}\" holds {} bytes, its shape takes {n}",
                        bytes.len()
                    )))
                })?;
                cx.tensor(key, meta, Cow::Borrowed(bytes));
            }
            None => {
                let meta = TensorMeta {
                    name: key.name(),
                    dtype: self.info.dtype,
                    shape: self.info.shape.clone(),
                    order: crate::Order::C,
                    byte_order: self.info.byte_order,
                };
                cx.tensor(key, meta, self.c_bytes()?);
            }
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------
// Containers

impl<T: StateDict> StateDict for Option<T> {
    fn load_state(cx: &mut LoadCx<'_>, key: &Key) -> Option<Self> {
        if !cx.present(key) {
            return Some(None);
        }
        T::load_state(cx, key).map(Some)
    }

    fn update_state(&mut self, cx: &mut LoadCx<'_>, key: &Key) {
        match self {
            Some(v) => v.update_state(cx, key),
            None => {
                if cx.present(key) {
                    if let Some(v) = T::load_state(cx, key) {
                        *self = Some(v);
                    }
                }
            }
        }
    }

    fn save_state<'a>(&'a self, cx: &mut SaveCx<'a>, key: &Key) -> Result<()> {
        match self {
            Some(v) => v.save_state(cx, key),
            None => Ok(()),
        }
    }
}

impl<T: StateDict> StateDict for Box<T> {
    fn load_state(cx: &mut LoadCx<'_>, key: &Key) -> Option<Self> {
        T::load_state(cx, key).map(Box::new)
    }

    fn update_state(&mut self, cx: &mut LoadCx<'_>, key: &Key) {
        (**self).update_state(cx, key)
    }

    fn save_state<'a>(&'a self, cx: &mut SaveCx<'a>, key: &Key) -> Result<()> {
        (**self).save_state(cx, key)
    }
}

/// Updates each item at its position under `key`.
fn update_items<T: StateDict>(items: &mut [T], cx: &mut LoadCx<'_>, key: &Key) {
    for (i, v) in items.iter_mut().enumerate() {
        v.update_state(cx, &key.index(i));
    }
}

/// Saves each item at its position under `key`.
fn save_items<'a, T: StateDict>(items: &'a [T], cx: &mut SaveCx<'a>, key: &Key) -> Result<()> {
    for (i, v) in items.iter().enumerate() {
        v.save_state(cx, &key.index(i))?;
    }
    Ok(())
}

impl<T: StateDict> StateDict for Vec<T> {
    fn load_state(cx: &mut LoadCx<'_>, key: &Key) -> Option<Self> {
        let mut out = Vec::new();
        let mut ok = true;
        let mut i = 0;
        while cx.present(&key.index(i)) {
            match T::load_state(cx, &key.index(i)) {
                Some(v) if ok => out.push(v),
                _ => ok = false,
            }
            i += 1;
        }
        ok.then_some(out)
    }

    fn update_state(&mut self, cx: &mut LoadCx<'_>, key: &Key) {
        update_items(self, cx, key)
    }

    fn save_state<'a>(&'a self, cx: &mut SaveCx<'a>, key: &Key) -> Result<()> {
        save_items(self, cx, key)
    }
}

impl<T: StateDict, const N: usize> StateDict for [T; N] {
    fn load_state(cx: &mut LoadCx<'_>, key: &Key) -> Option<Self> {
        let items: Vec<Option<T>> = (0..N).map(|i| T::load_state(cx, &key.index(i))).collect();
        let items: Option<Vec<T>> = items.into_iter().collect();
        items.and_then(|v| v.try_into().ok())
    }

    fn update_state(&mut self, cx: &mut LoadCx<'_>, key: &Key) {
        update_items(self, cx, key)
    }

    fn save_state<'a>(&'a self, cx: &mut SaveCx<'a>, key: &Key) -> Result<()> {
        save_items(self, cx, key)
    }
}

/// A map of entries: each key of the file below the map's key that is a whole part
/// (`experts.gate`, `experts.up`) becomes an entry, in key order.
impl<T: StateDict> StateDict for BTreeMap<String, T> {
    fn load_state(cx: &mut LoadCx<'_>, key: &Key) -> Option<Self> {
        let parts = cx.children(key);
        let mut out = BTreeMap::new();
        let mut ok = true;
        for p in parts {
            match T::load_state(cx, &key.field(&p)) {
                Some(v) => {
                    out.insert(p, v);
                }
                None => ok = false,
            }
        }
        ok.then_some(out)
    }

    fn update_state(&mut self, cx: &mut LoadCx<'_>, key: &Key) {
        for (k, v) in self.iter_mut() {
            v.update_state(cx, &key.field(k));
        }
    }

    fn save_state<'a>(&'a self, cx: &mut SaveCx<'a>, key: &Key) -> Result<()> {
        for (k, v) in self {
            v.save_state(cx, &key.field(k))?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------
// Plain values

fn value_mismatch(cx: &mut LoadCx<'_>, key: &Key, want: &str, node: &Node) {
    cx.mismatch(key, want.to_string(), format!("the value {node}"));
}

/// Plain numbers: each type with how it is read from a value node (`parse`) and written
/// as one (`node`).
macro_rules! number_value {
    ($want:expr, $node:expr, $parse:expr; $($t:ty),*) => {$(
        impl StateDict for $t {
            fn load_state(cx: &mut LoadCx<'_>, key: &Key) -> Option<Self> {
                let node = cx.value(key)?;
                let parsed: Option<$t> = ($parse)(&node);
                if parsed.is_none() {
                    value_mismatch(cx, key, &format!("{} ({})", $want, stringify!($t)), &node);
                }
                parsed
            }

            fn save_state<'a>(&'a self, cx: &mut SaveCx<'a>, key: &Key) -> Result<()> {
                cx.value(key, ($node)(*self));
                Ok(())
            }
        }
    )*};
}

macro_rules! int_value {
    ($($t:ty),*) => {$(
        number_value!("an integer", |v: $t| Node::Int(v as i128), |n: &Node| match n {
            Node::Int(i) => <$t>::try_from(*i).ok(),
            Node::Bool(b) => Some(*b as $t),
            Node::Str(s) => s.trim().parse::<$t>().ok(),
            _ => None,
        }; $t);
    )*};
}

int_value!(i8, i16, i32, i64, u8, u16, u32, u64, usize, isize);

macro_rules! float_value {
    ($($t:ty),*) => {$(
        number_value!("a number", |v: $t| Node::Float(v as f64), |n: &Node| match n {
            Node::Float(f) => Some(*f as $t),
            Node::Int(i) => Some(*i as $t),
            Node::Str(s) => s.trim().parse::<$t>().ok(),
            _ => None,
        }; $t);
    )*};
}

float_value!(f32, f64);

impl StateDict for bool {
    fn load_state(cx: &mut LoadCx<'_>, key: &Key) -> Option<Self> {
        let node = cx.value(key)?;
        let parsed = match &node {
            Node::Bool(b) => Some(*b),
            Node::Int(i @ (0 | 1)) => Some(*i == 1),
            Node::Str(s) => match s.trim() {
                "true" | "True" => Some(true),
                "false" | "False" => Some(false),
                _ => None,
            },
            _ => None,
        };
        if parsed.is_none() {
            value_mismatch(cx, key, "a boolean", &node);
        }
        parsed
    }

    fn save_state<'a>(&'a self, cx: &mut SaveCx<'a>, key: &Key) -> Result<()> {
        cx.value(key, Node::Bool(*self));
        Ok(())
    }
}

impl StateDict for String {
    fn load_state(cx: &mut LoadCx<'_>, key: &Key) -> Option<Self> {
        let node = cx.value(key)?;
        match node {
            Node::Str(s) => Some(s),
            other => {
                value_mismatch(cx, key, "text", &other);
                None
            }
        }
    }

    fn save_state<'a>(&'a self, cx: &mut SaveCx<'a>, key: &Key) -> Result<()> {
        cx.value(key, Node::Str(self.clone()));
        Ok(())
    }
}
