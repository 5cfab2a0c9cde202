//! Pickles back to back in a stream (a `.pkl` file, a zip member, what follows a legacy
//! file's records), each scanned and recorded with what it holds: pickles read inline
//! (joblib's arrays of objects), `_load_from_bytes` streams (scanned in turn), and, for a
//! joblib file, its reading by a plain `pickle.load` too. Also the files that hold no
//! pickle, and compressed joblib files. Hand-written with the scanner (see `scan.rs`).

use std::borrow::Cow;
use std::collections::HashSet;
use std::hash::{Hash, Hasher};

use super::hooks::{Hooks, LOAD_FROM_BYTES};
use super::{scan_stream, Ctx, FileScan, Found, Place, MAX_STREAMS};
use crate::runtime::pickle::{scan_pickle, ByteData, PickleScan, ScanOptions, SymValue, Verdict};

/// Most pickles read back to back from one stream.
const MAX_PICKLES: usize = 4096;

/// Scans the pickle at `pos` of `bytes`.
pub(super) fn scan_at(
    bytes: &[u8],
    pos: usize,
    ctx: &Ctx,
    storages: bool,
    keep_result: bool,
    hooks: bool,
) -> PickleScan {
    let opts = ScanOptions {
        limits: ctx.limits,
        storages,
        keep_result,
        hooks: if hooks { Some(&Hooks) } else { None },
        depth: 0,
    };
    scan_pickle(bytes, pos, &opts)
}

/// Scans the pickles of `bytes`, back to back from its start (an empty stream is a
/// finding: no pickle where one is expected).
pub(super) fn scan_pickles(
    bytes: &[u8],
    place: &Place,
    ctx: &Ctx,
    out: &mut FileScan,
    storages: bool,
) {
    if bytes.is_empty() {
        out.finding(
            Verdict::CannotVerify,
            place,
            "empty: no pickle where one is expected",
        );
        return;
    }
    scan_from(bytes, 0, place, ctx, out, storages, true);
}

/// Scans the pickles of `bytes` from `pos`. Past the first (or from the first, when it
/// is not `required`), what does not look like a pickle (no `PROTO` first, nothing
/// referenced, no `STOP`) is a note, not a pickle.
pub(super) fn scan_from(
    bytes: &[u8],
    mut pos: usize,
    place: &Place,
    ctx: &Ctx,
    out: &mut FileScan,
    storages: bool,
    required: bool,
) {
    let mut n = 0;
    while pos < bytes.len() {
        if n >= MAX_PICKLES {
            let m = format!("more than {MAX_PICKLES} pickles: the rest is not scanned");
            out.finding(Verdict::CannotVerify, &place.at(pos), m);
            return;
        }
        let scan = scan_at(bytes, pos, ctx, storages, false, true);
        if (n > 0 || !required) && !looks_like_pickle(&scan, &bytes[pos..]) {
            let m = format!("{} bytes that are not a pickle", bytes.len() - pos);
            out.finding(Verdict::DataOnly, &place.at(pos), m);
            return;
        }
        if n > 0 {
            let m = "a pickle after another's STOP (a second pickle.load reads it)";
            out.finding(Verdict::DataOnly, &place.at(pos), m);
        }
        let (complete, end) = (scan.complete, scan.end);
        add(bytes, scan, place.at(pos), None, ctx, out);
        if !complete {
            return;
        }
        pos = end;
        n += 1;
    }
}

/// Whether a scan of bytes that may not be a pickle found one.
fn looks_like_pickle(scan: &PickleScan, bytes: &[u8]) -> bool {
    matches!(bytes, [0x80, 0..=5, ..])
        || scan.complete
        || !scan.globals.is_empty()
        || !scan.calls.is_empty()
        || !scan.unresolved.is_empty()
        || !scan.storage_ids.is_empty()
        || !scan.other_ids.is_empty()
}

/// Records a scan of a pickle of `bytes` at `place`, then what it holds: its inline
/// pickles, the streams its `_load_from_bytes` calls load, and for a joblib pickle its
/// reading by `pickle.load`, which takes the arrays' bytes for opcodes (kept when that
/// finds something dangerous).
pub(super) fn add(
    bytes: &[u8],
    mut scan: PickleScan,
    place: Place,
    part: Option<&'static str>,
    ctx: &Ctx,
    out: &mut FileScan,
) {
    let nested = std::mem::take(&mut scan.nested);
    let captures = std::mem::take(&mut scan.captures);
    let joblib = !scan.inline.is_empty() || !nested.is_empty();
    let (start, storages) = (scan.start, scan.storages);
    out.pickles.push(Found {
        place: place.clone(),
        part,
        scan,
    });
    for n in nested {
        let mut p = place.at(n.start);
        p.nested
            .push("inline pickle of a joblib array of objects".into());
        add(bytes, n, p, None, ctx, out);
    }
    // Each stream once: the memo can hand one byte string to many calls.
    let mut seen = HashSet::new();
    for c in captures.iter().filter(|c| c.callee == LOAD_FROM_BYTES) {
        if !seen.insert(stream_key(&c.args)) {
            continue;
        }
        match stream_bytes(&c.args, bytes) {
            Some(b) => nested_stream(
                &b,
                &place.within(format!("_load_from_bytes at {}", c.offset)),
                ctx,
                out,
            ),
            None => out.finding(
                Verdict::Dangerous,
                &place.at(c.offset),
                "torch.storage._load_from_bytes of a value that is not a byte string: \
                 the torch.load stream it loads cannot be scanned",
            ),
        }
    }
    if joblib {
        let raw = scan_at(bytes, start, ctx, storages, false, false);
        if raw.dangerous() {
            out.pickles.push(Found {
                place,
                part: Some("as pickle.load reads it, without joblib"),
                scan: raw,
            });
        }
    }
}

/// Scans a `_load_from_bytes` stream, at most [`MAX_STREAMS`] deep.
fn nested_stream(bytes: &[u8], place: &Place, ctx: &Ctx, out: &mut FileScan) {
    if ctx.depth + 1 > MAX_STREAMS {
        let m = format!("streams nested more than {MAX_STREAMS} deep: not scanned");
        out.finding(Verdict::CannotVerify, place, m);
        return;
    }
    let inner = Ctx {
        limits: ctx.limits,
        depth: ctx.depth + 1,
    };
    scan_stream(bytes, place, &inner, out, false);
}

/// What tells two `_load_from_bytes` arguments apart: a byte string's place in the
/// pickle, else a hash of the value.
fn stream_key(args: &SymValue) -> (usize, usize, u64) {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    match args.items() {
        Some([SymValue::Bytes(ByteData::Range { offset, len })]) => return (*offset, *len, 0),
        Some([SymValue::Bytes(ByteData::Owned(b))]) => b.hash(&mut h),
        Some([SymValue::Str(s)]) => s.hash(&mut h),
        _ => format!("{args:?}").hash(&mut h),
    }
    (usize::MAX, usize::MAX, h.finish())
}

/// The bytes `_load_from_bytes` is called with: its one argument, a byte string (a
/// Python 2 `str` read as Latin-1 included).
fn stream_bytes<'b>(args: &SymValue, bytes: &'b [u8]) -> Option<Cow<'b, [u8]>> {
    match args.items()? {
        [SymValue::Bytes(ByteData::Range { offset, len })] => Some(Cow::Borrowed(
            bytes.get(*offset..offset.checked_add(*len)?)?,
        )),
        [SymValue::Bytes(ByteData::Owned(b))] => Some(Cow::Owned(b.to_vec())),
        [SymValue::Str(s)] => s
            .chars()
            .map(|c| u8::try_from(c as u32).ok())
            .collect::<Option<Vec<u8>>>()
            .map(Cow::Owned),
        _ => None,
    }
}

/// The compressor a joblib file is written through, by its first bytes as joblib's
/// `_detect_compressor` knows them.
pub(super) fn compressor(b: &[u8]) -> Option<&'static str> {
    Some(match b {
        [0x78, x, ..] if (0x7800u16 | *x as u16) % 31 == 0 => "zlib",
        [0x1f, 0x8b, ..] => "gzip",
        [b'B', b'Z', b'h', ..] => "bz2",
        [0x5d, 0x00, 0x00, ..] => "lzma",
        [0xfd, b'7', b'z', b'X', b'Z', 0x00, ..] => "xz",
        [0x04, 0x22, 0x4d, 0x18, ..] => "lz4",
        _ => return None,
    })
}

/// Scans a compressed joblib file: inflated whole (within the per-file budget of
/// decompressed bytes), then its pickles.
pub(super) fn scan_compressed(
    bytes: &[u8],
    name: &str,
    place: &Place,
    ctx: &Ctx,
    out: &mut FileScan,
) {
    #[cfg(feature = "joblib")]
    match crate::joblib::compress::inflate_joblib(bytes, ctx.limits) {
        Ok(Some((_, inflated))) => {
            let p = place.within(format!("inflated {name} stream"));
            scan_pickles(&inflated, &p, ctx, out, false);
        }
        Ok(None) => out.finding(Verdict::CannotVerify, place, "not a compressed stream"),
        Err(e) => out.finding(
            Verdict::CannotVerify,
            place,
            format!("a {name} stream that does not inflate: {e}"),
        ),
    }
    #[cfg(not(feature = "joblib"))]
    {
        let _ = (bytes, ctx);
        let m = format!("a {name}-compressed joblib file: not scanned (built without `joblib`)");
        out.finding(Verdict::CannotVerify, place, m);
    }
}

/// What the file is when it is of a format that holds no pickle (safetensors, GGUF, a
/// `.npy` of numbers).
pub(super) fn no_pickle(b: &[u8]) -> Option<&'static str> {
    if b.starts_with(b"GGUF") {
        return Some("GGUF");
    }
    if b.starts_with(b"\x93NUMPY") {
        return (npy_pickle(b) == Some(None)).then_some("npy");
    }
    let n = u64::from_le_bytes(b.get(..8)?.try_into().ok()?);
    (b.get(8) == Some(&b'{') && n <= (b.len() - 8) as u64).then_some("safetensors")
}

/// For a `.npy` file: `Some(Some(offset))` where the pickle of an array of objects
/// starts, `Some(None)` for an array of numbers, `None` when the header is unreadable.
pub(super) fn npy_pickle(b: &[u8]) -> Option<Option<usize>> {
    let (len, start): (usize, usize) = match b.get(6)? {
        1 => (
            u16::from_le_bytes(b.get(8..10)?.try_into().ok()?) as usize,
            10,
        ),
        2 | 3 => (
            u32::from_le_bytes(b.get(8..12)?.try_into().ok()?) as usize,
            12,
        ),
        _ => return None,
    };
    let header = b.get(start..start.checked_add(len)?)?;
    let text = std::str::from_utf8(header).ok()?;
    let object = text.contains("'|O'") || text.contains("'O'") || text.contains("('|O'");
    Some(object.then_some(start + len))
}
