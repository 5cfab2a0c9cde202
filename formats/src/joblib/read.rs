//! Reading a joblib file: its pickle (the file itself, mapped, or the stream a
//! compressed file inflates to, kept in memory for the file's lifetime) read with
//! NumPy's rules of the `pickle` format plus joblib's wrapper, whose data follows its
//! `BUILD` inline; every other global read inertly (unless `Limits::weights_only`). The
//! tensors are the wrappers and NumPy's own array calls a walk of the object finds,
//! named by their paths; the object tree is the pickled object with them as leaves.

use std::sync::{Arc, OnceLock};

use tensorfmt_runtime::pickle::{self, Kind, Object, Rules};
use tensorfmt_runtime::read::ReadOptions;
use tensorfmt_runtime::source::RandomAccess;
use tensorfmt_runtime::tensor::{Encoded, EncodedBytes};

use super::compress::{inflate_joblib, Compressor};
use super::wrapper::{self, is_legacy_wrapper, is_wrapper, WRAPPER};
use crate::{DataLocation, Error, ErrorKind, Limits, Node, Result, Sink, Source, TensorInfo};

/// What a joblib pickle may name: NumPy's globals as the `pickle` format allows them,
/// joblib's wrapper with its inline data, and the array subclasses joblib wraps.
pub(crate) fn rules() -> &'static Rules {
    static RULES: OnceLock<Rules> = OnceLock::new();
    RULES.get_or_init(|| {
        crate::generated::pickle::numpy_rules()
            .clone()
            .inline_data(WRAPPER, wrapper::inline_len)
            .allow_path("numpy.matrix", Kind::Class)
            .allow_path("numpy.memmap", Kind::Class)
    })
}

/// A compressed file's pickle, inflated once per source and budget ([`Source::memo`]).
#[derive(Debug)]
pub(crate) struct Inflated(Option<(Compressor, Vec<u8>)>);

/// The bytes of the pickle a compressed file inflates to, from which its tensors are
/// read (part 0, the whole stream).
#[derive(Debug)]
struct InStream(Arc<Inflated>);

impl InStream {
    fn bytes(&self) -> &[u8] {
        self.0 .0.as_ref().map_or(&[], |(_, v)| v)
    }
}

impl Encoded for InStream {
    fn plain_offset(&self, _src: &dyn RandomAccess, _part: u64) -> Result<Option<u64>> {
        Ok(None)
    }

    fn read(
        &self,
        _src: &Source,
        _info: &TensorInfo,
        part: u64,
        (skip, len): (u64, u64),
        sink: &mut dyn Sink,
        _opts: &ReadOptions,
    ) -> Result<()> {
        let bytes = self.bytes();
        let window = usize::try_from(skip)
            .ok()
            .zip(usize::try_from(len).ok())
            .and_then(|(s, l)| bytes.get(s..s.checked_add(l)?));
        match (part, window) {
            (0, Some(b)) => sink.chunk(b),
            _ => Err(ErrorKind::NotFound(format!(
                "bytes {skip}..+{len} of part {part} of an inflated stream of {} bytes",
                bytes.len()
            ))
            .into()),
        }
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn same(&self, other: &dyn Encoded) -> bool {
        other
            .as_any()
            .downcast_ref::<InStream>()
            .is_some_and(|o| Arc::ptr_eq(&o.0, &self.0))
    }
}

/// The stream `src` inflates to, or `None` when it is not compressed (made once per
/// budget, kept by the source).
pub(crate) fn inflated(src: &Source, limits: &Limits) -> Result<Arc<Inflated>> {
    let budget = limits.inflated_budget(src.data().len());
    src.memo(budget, |s| {
        let whole = s.whole()?;
        Ok(Inflated(inflate_joblib(&whole, limits)?))
    })
    .map_err(|e| src.in_file(e))
}

/// The tensors of `src` and, with `with_structure`, its object tree.
pub(crate) fn read(
    src: &Source,
    limits: &Limits,
    with_structure: bool,
) -> Result<(Vec<TensorInfo>, Option<Node>)> {
    let inflated = inflated(src, limits)?;
    let whole;
    let (bytes, field): (&[u8], String) = match &inflated.0 {
        Some((c, v)) => (v, format!("pickle (in the {} stream)", c.name())),
        None => {
            whole = src.whole().map_err(|e| src.in_file(e))?;
            (&whole, "pickle".to_string())
        }
    };
    let in_pickle = |e: Error| src.in_file(e.in_field(&field));
    let value = pickle::read(bytes, rules(), limits).map_err(in_pickle)?;
    let kinds = crate::generated::pickle::FILE.kinds;
    let is_target =
        |o: &Object| is_wrapper(o) || is_legacy_wrapper(o) || kinds.iter().any(|(is, _)| is(o));
    let budget = limits.tree_budget(bytes.len() as u64);
    let objects =
        pickle::find_objects(&value, bytes, &is_target, limits, budget).map_err(in_pickle)?;
    let mut tensors = Vec::with_capacity(objects.len());
    let mut names = pickle::TensorNames::default();
    for (path, o) in objects {
        let at = |e: Error| {
            let field = if path.is_empty() { "<root>" } else { &path };
            src.in_file(e.in_field(field))
        };
        let Some(mut t) = tensor(&path, o, bytes).map_err(at)? else {
            continue;
        };
        if inflated.0.is_some() {
            t.location = in_stream(t.location, &inflated).map_err(at)?;
        }
        names.add(o, &t.name);
        tensors.push(t);
    }
    let structure = match with_structure {
        true => Some(names.tree(&value, bytes, limits).map_err(in_pickle)?),
        false => None,
    };
    Ok((tensors, structure))
}

/// The tensor of the wrapper or NumPy array call `o` at `path` of the pickle `bytes`;
/// `None` for an array of a dtype that is no tensor element type.
fn tensor(path: &str, o: &Object, bytes: &[u8]) -> Result<Option<TensorInfo>> {
    if is_wrapper(o) {
        return wrapper::tensor(path, o, 0);
    }
    if is_legacy_wrapper(o) {
        return Err(ErrorKind::Unsupported(format!(
            "an array of joblib before 0.10 ('{}': its data in a .npy file beside the \
             pickle), which is not read",
            o.global.path
        ))
        .into());
    }
    let kinds = crate::generated::pickle::FILE.kinds;
    let (_, place) = kinds
        .iter()
        .find(|(is, _)| is(o))
        .expect("find_objects gives the targets");
    match pickle::place_array(*place, path, o, 0, bytes) {
        Ok(t) => Ok(Some(t)),
        Err(e) if matches!(e.kind, ErrorKind::UnknownDType(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The location `l` of bytes of the pickle inflated to `stream`, read from there: a
/// range of the pickle, or bytes the pickle decoded into memory (text of protocols 0
/// and 1) as they are. An array stored as latin-1 text (`_codecs.encode`) is refused.
fn in_stream(l: DataLocation, stream: &Arc<Inflated>) -> Result<DataLocation> {
    match l {
        DataLocation::Range { offset, len } => {
            Ok(EncodedBytes::new(InStream(stream.clone())).window(0, offset, len))
        }
        DataLocation::Encoded { ref content, .. }
            if content.downcast::<pickle::Held>().is_some() =>
        {
            Ok(l)
        }
        _ => Err(ErrorKind::Unsupported(
            "an array pickled as latin-1 text (`_codecs.encode`, protocol 2) inside a \
             compressed joblib file"
                .into(),
        )
        .into()),
    }
}
