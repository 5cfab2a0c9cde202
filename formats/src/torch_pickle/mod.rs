//! Files `pickle.dump` (not `torch.save`) writes of PyTorch tensors, read in place: each
//! tensor is `torch._utils._rebuild_tensor_v2(storage, offset, size, stride, ...)` whose
//! storage is `torch.storage._load_from_bytes(b)`, `b` a whole legacy `torch.save`
//! stream of that one storage (`stream.rs`): a `BINBYTES` byte string at protocol 3 and
//! above, `_codecs.encode(<latin-1 text>, 'latin1')` at protocol 2.
//!
//! Written by hand rather than in a `.fmt` schema: the `.fmt` language cannot describe a
//! storage that is itself a nested `torch.save` stream inside a pickled byte string.
//!
//! Reading: the outer pickle read with the `pytorch` format's checkpoint rules plus
//! `_load_from_bytes`, every other global read inertly (unless `Limits::weights_only`);
//! each tensor call's nested stream parsed (its pickles with the `pytorch-legacy` rules,
//! its record checked against the persistent id), and the tensor's bytes located in it:
//! a byte range of the file for a plain byte string, a window of the decoded
//! [`Latin1Text`] for a latin-1 one (decoded when read, only its head at index time,
//! within the per-file budget of decoded bytes). Each tensor has a storage of its own
//! (views of one storage are pickled with a copy each). Not written.

mod stream;

use std::sync::{Arc, OnceLock};

use tensorfmt_runtime::pickle::{self, ByteRange, Held, Latin1Text, Object, Rules, Value};
use tensorfmt_runtime::tensor::EncodedBytes;

use crate::{
    ByteOrder, DataLocation, Error, ErrorKind, FormatDesc, Limits, Node, Result, Source, TensorInfo,
};

/// The format, read only: `TensorFile::open` on a `pickle.dump` of torch tensors.
pub const DESC: FormatDesc =
    FormatDesc::new("torch-pickle", &["pkl", "pickle"], detect, index).structure(structure);

/// The bytes detection looks at.
const WINDOW: u64 = 64 << 10;

/// The first bytes of a latin-1 stream decoded to read its pickles; doubled while they
/// do not hold them, up to the stream's length or `Limits::max_header_bytes`.
const HEAD: u64 = 4 << 10;

/// The global whose call holds a storage's nested stream.
const LOAD_FROM_BYTES: &str = "torch.storage._load_from_bytes";

/// A pickle (protocol 2 to 5, or one that starts as protocols 0 and 1 do) that names
/// `torch.storage._load_from_bytes` in its first 64 KiB.
fn detect(src: &Source, _limits: &Limits) -> bool {
    let mut head = vec![0u8; src.data().len().min(WINDOW) as usize];
    if src.data().read_exact_at(0, &mut head).is_err() {
        return false;
    }
    pickle::starts_as_pickle(&head)
        && pickle::names_global(&head, "torch.storage", "_load_from_bytes")
}

fn index(src: &Source, limits: &Limits) -> Result<Vec<TensorInfo>> {
    Ok(read(src, limits, false)?.0)
}

fn structure(src: &Source, limits: &Limits) -> Result<Option<Node>> {
    Ok(read(src, limits, true)?.1)
}

/// What the outer pickle may name: the `pytorch` format's checkpoint globals (byte
/// strings left in place, `_codecs.encode` allowed) and `_load_from_bytes`.
fn rules() -> &'static Rules {
    static RULES: OnceLock<Rules> = OnceLock::new();
    RULES.get_or_init(|| {
        crate::generated::pytorch::checkpoint_rules()
            .clone()
            .allow_call(LOAD_FROM_BYTES, &["b"])
            .byte_ranges(true)
            .allow_codecs_encode()
    })
}

/// The tensors of `src` and, with `with_structure`, its object tree.
fn read(
    src: &Source,
    limits: &Limits,
    with_structure: bool,
) -> Result<(Vec<TensorInfo>, Option<Node>)> {
    let whole = src.whole().map_err(|e| src.in_file(e))?;
    let in_pickle = |e: Error| src.in_file(e.in_field("pickle"));
    let value = pickle::read(&whole, rules(), limits).map_err(in_pickle)?;
    let budget = limits.tree_budget(whole.len() as u64);
    let is_target = |o: &Object| crate::generated::pytorch::is_checkpoint_tensor(o);
    let objects =
        pickle::find_objects(&value, &whole, &is_target, limits, budget).map_err(in_pickle)?;
    let mut decoded = Budget(limits.inflated_budget(whole.len() as u64));
    let mut tensors = Vec::with_capacity(objects.len());
    let mut names = pickle::TensorNames::default();
    for (path, o) in objects {
        let field = if path.is_empty() { "<root>" } else { &path };
        let t = tensor(&path, o, &whole, limits, &mut decoded)
            .map_err(|e| src.in_file(e.in_field(field)))?;
        names.add(o, &t.name);
        tensors.push(t);
    }
    let structure = match with_structure {
        true => Some(names.tree(&value, &whole, limits).map_err(in_pickle)?),
        false => None,
    };
    Ok((tensors, structure))
}

/// The bytes of latin-1 text the reader may still decode at index time.
struct Budget(u64);

impl Budget {
    /// Charges `n` decoded bytes.
    fn spend(&mut self, n: u64) -> Result<()> {
        self.0 = self.0.checked_sub(n).ok_or(ErrorKind::Limit {
            what: "decoded latin-1 text of nested torch.save streams",
            limit: self.0,
            actual: n,
        })?;
        Ok(())
    }
}

/// A nested stream's byte string: where it lies, and its first bytes.
enum Bytes<'a> {
    /// Stored plain at `offset` of the file.
    Plain(u64, &'a [u8]),
    /// Latin-1 text (`_codecs.encode`).
    Latin1(&'a ByteRange),
    /// Decoded by the reader (protocols 0 and 1).
    Held(Arc<[u8]>),
}

/// The tensor that the call `o` at `path` builds, its storage's stream in `file`.
fn tensor(
    path: &str,
    o: &Object,
    file: &[u8],
    limits: &Limits,
    decoded: &mut Budget,
) -> Result<TensorInfo> {
    let storage = o.arg("storage").and_then(Value::as_object);
    let Some(b) = storage
        .filter(|s| &*s.global.path == LOAD_FROM_BYTES)
        .and_then(|s| s.arg("b"))
    else {
        let what = o.arg("storage").map_or("nothing", Value::type_name);
        return Err(Error::from(ErrorKind::Unsupported(format!(
            "a storage that is {what}, not {LOAD_FROM_BYTES}(b) (a `torch.save` file's storage \
             pickled alone?)"
        )))
        .in_field("storage"));
    };
    let bytes = match b {
        Value::Range(r) if r.latin1 => Bytes::Latin1(r),
        Value::Range(r) => {
            let slice = usize::try_from(r.offset)
                .ok()
                .zip(usize::try_from(r.len).ok())
                .and_then(|(at, n)| file.get(at..at.checked_add(n)?))
                .ok_or_else(|| {
                    ErrorKind::Overflow("the nested stream lies past the file".into())
                })?;
            Bytes::Plain(r.offset, slice)
        }
        Value::Bytes(h) => Bytes::Held(h.clone()),
        v => {
            return Err(Error::from(ErrorKind::Invalid(format!(
                "`b` is {}, not a byte string",
                v.type_name()
            )))
            .in_field("storage.b"))
        }
    };
    let nested = nested(&bytes, file, limits, decoded).map_err(|e| e.in_field("storage.b"))?;
    place(path, o, &bytes, &nested)
}

/// The storage of the stream `bytes`; errors carry the offset in the file when the
/// stream is stored plain, in the decoded stream otherwise (said in the message).
fn nested(
    bytes: &Bytes<'_>,
    file: &[u8],
    limits: &Limits,
    decoded: &mut Budget,
) -> Result<stream::Nested> {
    match bytes {
        Bytes::Plain(at, s) => stream::parse(s, s.len() as u64, limits).map_err(|mut e| {
            e.location.offset = e.location.offset.map(|o| o.saturating_add(*at));
            e
        }),
        Bytes::Held(h) => stream::parse(h, h.len() as u64, limits).map_err(|e| in_decoded(e, None)),
        Bytes::Latin1(r) => {
            let most = r.len.min(limits.max_header_bytes.max(HEAD));
            let mut n = r.len.min(HEAD);
            loop {
                decoded.spend(n)?;
                let head = decode_latin1(file, r, n)?;
                match stream::parse(&head, r.len, limits) {
                    Err(_) if n < most => n = most.min(n.saturating_mul(2)),
                    res => return res.map_err(|e| in_decoded(e, Some(r.offset))),
                }
            }
        }
    }
}

/// An error at an offset of a decoded stream, which is no offset of the file: said in
/// the message instead, the error's offset being `text`'s, where the stream is stored.
fn in_decoded(mut e: Error, text: Option<u64>) -> Error {
    match e.location.offset.take() {
        Some(o) => {
            let mut location = *e.location;
            location.offset = text;
            Error::new(
                ErrorKind::Invalid(format!(
                    "{} (at byte {o} of the decoded nested stream)",
                    e.kind
                )),
                location,
            )
        }
        None => e,
    }
}

/// The first `n` bytes of the latin-1 text `r` of `file`.
fn decode_latin1(file: &[u8], r: &ByteRange, n: u64) -> Result<Vec<u8>> {
    let bad = |why: String| {
        Error::new(
            ErrorKind::Invalid(format!("latin-1 text of a nested stream: {why}")),
            crate::Location::default().with_offset(r.offset),
        )
    };
    let text = usize::try_from(r.offset)
        .ok()
        .zip(usize::try_from(r.stored).ok())
        .and_then(|(at, len)| file.get(at..at.checked_add(len)?))
        .ok_or_else(|| bad("it runs past the end of the file".into()))?;
    let n = usize::try_from(n).map_err(|_| bad("too long".into()))?;
    let mut out = Vec::with_capacity(n.min(text.len()));
    let mut i = 0;
    while out.len() < n {
        match (text.get(i), text.get(i + 1)) {
            (Some(&b), _) if b < 0x80 => (out.push(b), i += 1).1,
            (Some(&l @ (0xc2 | 0xc3)), Some(&c)) if c & 0xc0 == 0x80 => {
                out.push(((l & 0x1f) << 6) | (c & 0x3f));
                i += 2;
            }
            (Some(_), _) => return Err(bad(format!("not latin-1 at byte {i} of the text"))),
            (None, _) => return Err(bad(format!("it holds {} bytes, {n} are needed", out.len()))),
        }
    }
    Ok(out)
}

/// The tensor of the call `o` at `path`, its storage `nested` in the stream `bytes`.
fn place(path: &str, o: &Object, bytes: &Bytes<'_>, nested: &stream::Nested) -> Result<TensorInfo> {
    let dtype = match pickle::is_none(o.arg("dtype")) {
        true => nested.dtype,
        false => {
            pickle::lookup(
                &crate::generated::pytorch::TORCH_DTYPE,
                o.arg("dtype"),
                "dtype",
            )?
            .0
        }
    };
    let item = dtype.itemsize().unwrap_or(1) as u64;
    let storage_item = nested.dtype.itemsize().unwrap_or(1) as u64;
    let overflow = || {
        Error::from(ErrorKind::Overflow(
            "the tensor's offset in its storage".into(),
        ))
    };
    let total = nested
        .numel
        .checked_mul(storage_item)
        .ok_or_else(overflow)?;
    let skip = pickle::uint(o.arg("offset"), "offset")?
        .checked_mul(item)
        .ok_or_else(overflow)?;
    let len = total.checked_sub(skip).ok_or_else(|| {
        Error::from(ErrorKind::SizeMismatch(format!(
            "tensor '{path}' starts at byte {skip} of its storage, which holds {total}"
        )))
        .in_field("offset")
    })?;
    let at = nested.data_at.checked_add(skip).ok_or_else(overflow)?;
    let location = match bytes {
        Bytes::Plain(offset, _) => {
            DataLocation::range(offset.checked_add(at).ok_or_else(overflow)?, len)
        }
        Bytes::Latin1(r) => EncodedBytes::new(Latin1Text {
            offset: r.offset,
            stored: r.stored,
        })
        .window(0, at, len),
        Bytes::Held(h) => EncodedBytes::new(Held(h.clone())).window(0, at, len),
    };
    TensorInfo::strided(
        path,
        dtype,
        pickle::dims(o.arg("size"), "size")?,
        pickle::ints(o.arg("stride"), "stride")?,
        ByteOrder::Little,
        location,
    )
}
