//! Rewriting a document with some of its tensors replaced and everything else kept: new
//! weights for an ONNX graph, or the same weights moved between inline and external
//! storage.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use tensorfmt_runtime::output::AtomicFile;
use tensorfmt_runtime::registry::Replacement;
use tensorfmt_runtime::ExternalData;

use crate::{
    format_named, DataLocation, Error, ErrorKind, Location, OpenOptions, Result, Tensor,
    TensorFile, TensorInfo, TensorMeta, WriteOptions,
};

/// Options of [`replace_tensors`] and [`rewrite`].
#[derive(Debug, Clone, Default)]
pub struct RewriteOptions {
    /// How to open the input.
    pub open: OpenOptions,
    /// Where the output keeps its tensors (`write.external`): with the default
    /// [`ExternalData::Auto`] inline tensors stay inline and external ones stay external,
    /// in a data file of this save's own beside the output (see [`ExternalData`]);
    /// the other policies move every
    /// tensor where they say (inline ↔ external conversion).
    pub write: WriteOptions,
    /// Let a replacement change its tensor's shape or dtype (by default they must match
    /// the tensor it replaces: the graph around it expects them).
    pub allow_reshape: bool,
    /// Cast every tensor that is written anew to this dtype (replacements included).
    pub dtype: Option<crate::DType>,
}

/// What [`rewrite`] did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RewriteSummary {
    /// Tensors replaced by the caller's.
    pub replaced: usize,
    /// Tensors written anew from the input (moved inline or external, or cast).
    pub moved: usize,
    /// Tensors copied as they were.
    pub kept: usize,
}

struct TensorBytes(Tensor);

impl AsRef<[u8]> for TensorBytes {
    fn as_ref(&self) -> &[u8] {
        self.0.data.as_bytes()
    }
}

/// Writes `output`: `input` with the tensors named in `tensors` replaced by the bytes
/// given, everything else kept as it was (an ONNX graph, its metadata, the other
/// initializers byte for byte). Every replacement must name a tensor of the input's
/// tensor field (ONNX initializers) and match its dtype and shape unless
/// `options.allow_reshape`; bytes are C order, little-endian. Atomic: the output (and its
/// external files) appear only when everything is written. `output` may be `input`.
///
/// ```no_run
/// use tensorfmt::{DType, Order, ByteOrder, TensorMeta};
/// let meta = TensorMeta { name: "fc.weight".into(), dtype: DType::F32, shape: vec![2, 2],
///                         order: Order::C, byte_order: ByteOrder::Little };
/// let bytes: Vec<u8> = [1.0f32, 0.0, 0.0, 1.0].iter().flat_map(|x| x.to_le_bytes()).collect();
/// tensorfmt::replace_tensors("model.onnx", "tuned.onnx", [(meta, &bytes[..])], &Default::default())?;
/// # Ok::<(), tensorfmt::Error>(())
/// ```
pub fn replace_tensors<'a>(
    input: impl AsRef<Path>,
    output: impl AsRef<Path>,
    tensors: impl IntoIterator<Item = (TensorMeta, &'a [u8])>,
    options: &RewriteOptions,
) -> Result<RewriteSummary> {
    rewrite(input, output, tensors, options)
}

/// [`replace_tensors`] with no replacement: the input rewritten where
/// `options.write.external` puts its tensors (and cast to `options.dtype`).
pub fn rewrite_storage(
    input: impl AsRef<Path>,
    output: impl AsRef<Path>,
    options: &RewriteOptions,
) -> Result<RewriteSummary> {
    rewrite(input, output, std::iter::empty(), options)
}

/// The one implementation of [`replace_tensors`] and [`rewrite_storage`].
pub fn rewrite<'a>(
    input: impl AsRef<Path>,
    output: impl AsRef<Path>,
    tensors: impl IntoIterator<Item = (TensorMeta, &'a [u8])>,
    options: &RewriteOptions,
) -> Result<RewriteSummary> {
    let (input, output) = (input.as_ref(), output.as_ref());
    let file = TensorFile::open_with(input, &options.open)?;
    let Some(rewrite_fn) = file.format_desc().rewrite else {
        return Err(Error::new(
            ErrorKind::Unsupported(format!(
                "{} files hold tensors alone: write a new file instead",
                file.format()
            )),
            Location::file(input),
        ));
    };
    crate::check_align(&options.open.registry, file.format_desc(), &options.write)
        .map_err(|e| e.in_file(output))?;
    let by_name: HashMap<&str, &TensorInfo> = file
        .tensors()
        .iter()
        .rev()
        .map(|t| (t.name.as_str(), t))
        .collect();
    let mut new: HashMap<String, (TensorMeta, &'a [u8])> = HashMap::new();
    for (meta, bytes) in tensors {
        let Some(old) = by_name.get(meta.name.as_str()) else {
            return Err(Error::new(
                ErrorKind::Invalid(format!("no tensor named '{}' to replace", meta.name)),
                Location::file(input),
            ));
        };
        if !options.allow_reshape && (old.dtype != meta.dtype || old.shape != meta.shape) {
            return Err(Error::new(
                ErrorKind::SizeMismatch(format!(
                    "'{}' is {} {:?} in the model, the replacement {} {:?} (pass --allow-reshape, \
                     or set RewriteOptions::allow_reshape, to change it)",
                    meta.name, old.dtype, old.shape, meta.dtype, meta.shape
                )),
                Location::file(input),
            ));
        }
        let n = meta.nbytes()?;
        if n != bytes.len() as u64 {
            return Err(Error::new(
                ErrorKind::SizeMismatch(format!(
                    "'{}' needs {n} bytes, {} given",
                    meta.name,
                    bytes.len()
                )),
                Location::file(input),
            )
            .in_entry(&meta.name));
        }
        if new.insert(meta.name.clone(), (meta, bytes)).is_some() {
            return Err(Error::new(
                ErrorKind::Invalid("a tensor is replaced twice".into()),
                Location::file(input),
            ));
        }
    }
    let mut write = options.write.clone();
    write.destination = Some(output.to_path_buf());
    let out = AtomicFile::create(output).map_err(|e| e.in_file(output))?;
    write.save_tag = Some(out.save_tag());
    let handle = out
        .file()
        .try_clone()
        .map_err(|e| Error::from(e).in_file(output))?;
    let mut summary = RewriteSummary::default();
    let mut used: HashSet<String> = HashSet::new();
    let mut visited: HashSet<String> = HashSet::new();
    let policy = write.external.clone();
    let mut decide = |name: &str| -> Result<Option<Replacement<'a>>> {
        visited.insert(name.to_string());
        let old = by_name.get(name).copied();
        // An external tensor stays external, in this save's own file (the writer names
        // it: never the file it came from, which is the input's).
        let keep_location = match old.map(|o| &o.location) {
            Some(DataLocation::External { path, .. }) => Some(path.clone()),
            _ => None,
        };
        if let Some((meta, bytes)) = new.get(name) {
            used.insert(name.to_string());
            summary.replaced += 1;
            let (meta, data) = cast(meta.clone(), bytes, options.dtype)?;
            return Ok(Some(Replacement {
                meta,
                data: match data {
                    std::borrow::Cow::Borrowed(b) => Box::new(b),
                    std::borrow::Cow::Owned(v) => Box::new(v),
                },
                keep_location,
            }));
        }
        let Some(old) = old else {
            // An item the index does not list (no name, or refused): copied as it is.
            summary.kept += 1;
            return Ok(None);
        };
        if old.dtype == crate::DType::String {
            // Kept where they are: only the document can hold them.
            summary.kept += 1;
            return Ok(None);
        }
        let nbytes = old.nbytes().unwrap_or(0);
        let move_it = options.dtype.is_some_and(|d| d != old.dtype)
            || match (&policy, keep_location.is_some()) {
                (ExternalData::Auto, external) => external,
                (ExternalData::Inline, external) => external,
                (ExternalData::External { threshold, .. }, external) => {
                    external || nbytes >= *threshold
                }
            };
        if !move_it {
            summary.kept += 1;
            return Ok(None);
        }
        summary.moved += 1;
        let tensor = file.load_info(old)?;
        let (meta, data) = crate::prepare_for_write(old, tensor.data.as_bytes(), options.dtype)?;
        let data: Box<dyn AsRef<[u8]>> = match data {
            std::borrow::Cow::Borrowed(_) => Box::new(TensorBytes(tensor)),
            std::borrow::Cow::Owned(v) => Box::new(v),
        };
        Ok(Some(Replacement {
            meta,
            data,
            keep_location,
        }))
    };
    let tag = write.save_tag.clone().unwrap_or_default();
    let format = file.format_desc();
    let pending = rewrite_fn(
        file.source(),
        Box::new(handle),
        &write,
        &options.open.limits,
        &mut decide,
    )?;
    if used.len() != new.len() {
        let mut missing: Vec<&str> = new
            .keys()
            .map(String::as_str)
            .filter(|n| !used.contains(*n))
            .collect();
        missing.sort_unstable();
        return Err(Error::new(
            ErrorKind::Invalid(format!(
                "not every replacement names a tensor of the document's tensor field \
                 (ONNX initializers; {} of {} used): {}",
                used.len(),
                new.len(),
                missing.join(", ")
            )),
            Location::file(input),
        ));
    }
    // Tensors outside the rewritten field (ONNX Constant nodes) keep their references:
    // the files they name must still hold them beside the output.
    let written: HashSet<std::path::PathBuf> =
        pending.iter().map(|f| f.dest().to_path_buf()).collect();
    let in_dir = input.parent().unwrap_or_else(|| Path::new("."));
    let out_dir = output.parent().unwrap_or_else(|| Path::new("."));
    let same_dir = same_folder(in_dir, out_dir);
    let mut copies = Vec::new();
    // The data files the output still names: not removed with the replaced output's.
    let mut keep: HashSet<std::path::PathBuf> = HashSet::new();
    let in_place = crate::same_file(input, output);
    for t in file.tensors() {
        let DataLocation::External { path, .. } = &t.location else {
            continue;
        };
        if !in_place {
            keep.insert(in_dir.join(path));
        }
        if visited.contains(t.name.as_str()) {
            continue;
        }
        let dest = out_dir.join(path);
        keep.insert(dest.clone());
        if written.contains(&dest) {
            return Err(Error::new(
                ErrorKind::Unsupported(format!(
                    "'{}' (outside the rewritten tensors) is in external file '{path}', which \
                     this rewrite replaces: choose another location",
                    t.name
                )),
                Location::file(input),
            ));
        }
        if !same_dir && !copies.iter().any(|(p, _)| p == path) {
            copies.push((path.clone(), dest));
        }
    }
    let failed = |e: Error| {
        crate::sweep_data_files(output, format, &tag, true, &HashSet::new());
        e
    };
    for (path, dest) in copies {
        let from = in_dir.join(&path);
        if same_bytes(&from, &dest) {
            // Copied by an earlier save: the output names the file as it is.
            continue;
        }
        let tmp = AtomicFile::create(&dest).map_err(|e| e.in_file(&dest))?;
        let (mut src, _) = tensorfmt_runtime::source::open_regular(&from)?;
        std::io::copy(&mut src, &mut tmp.file()).map_err(|e| Error::from(e).in_file(&dest))?;
        // Never over a file of that name that holds something else.
        tmp.commit_new().map_err(|e| e.in_file(&dest))?;
    }
    for f in pending {
        let path = f.dest().to_path_buf();
        f.commit_new()
            .map_err(|e| e.in_field(&format!("external data file {}", path.display())))
            .map_err(|e| failed(e.in_file(output)))?;
    }
    let old = crate::own_data_files(output, format);
    out.commit().map_err(|e| failed(e.in_file(output)))?;
    crate::remove_data_files(&old, &keep);
    crate::sweep_data_files(output, format, &tag, false, &keep);
    Ok(summary)
}

/// Whether the files `a` and `b` both exist and hold the same bytes.
fn same_bytes(a: &Path, b: &Path) -> bool {
    use std::io::Read;
    let (Ok(ma), Ok(mb)) = (std::fs::metadata(a), std::fs::metadata(b)) else {
        return false;
    };
    if !ma.is_file() || !mb.is_file() || ma.len() != mb.len() {
        return false;
    }
    let (Ok(fa), Ok(fb)) = (std::fs::File::open(a), std::fs::File::open(b)) else {
        return false;
    };
    let (mut fa, mut fb) = (std::io::BufReader::new(fa), std::io::BufReader::new(fb));
    let (mut x, mut y) = (vec![0u8; 1 << 16], vec![0u8; 1 << 16]);
    loop {
        let n = match fa.read(&mut x) {
            Ok(0) => return fb.read(&mut y).is_ok_and(|m| m == 0),
            Ok(n) => n,
            Err(_) => return false,
        };
        if fb.read_exact(&mut y[..n]).is_err() || x[..n] != y[..n] {
            return false;
        }
    }
}

/// Whether two folders are the same one.
fn same_folder(a: &Path, b: &Path) -> bool {
    let canon = |p: &Path| {
        let p = if p.as_os_str().is_empty() {
            Path::new(".")
        } else {
            p
        };
        std::fs::canonicalize(p).ok()
    };
    match (canon(a), canon(b)) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

/// `bytes` of `meta`, cast to `dtype` when given.
fn cast(
    meta: TensorMeta,
    bytes: &[u8],
    dtype: Option<crate::DType>,
) -> Result<(TensorMeta, std::borrow::Cow<'_, [u8]>)> {
    match dtype {
        Some(d) if d != meta.dtype => {
            let data = tensorfmt_runtime::convert::cast(bytes, meta.dtype, meta.byte_order, d)?;
            Ok((
                TensorMeta {
                    dtype: d,
                    byte_order: crate::ByteOrder::Little,
                    ..meta
                },
                std::borrow::Cow::Owned(data),
            ))
        }
        _ => Ok((meta, std::borrow::Cow::Borrowed(bytes))),
    }
}

/// Whether `format` (by name) can rewrite documents.
pub fn can_rewrite(format: &str) -> bool {
    format_named(format).is_some_and(|f| f.rewrite.is_some())
}
