//! A legacy `torch.save` stream (`_use_new_zipfile_serialization=False`, and what
//! `pickle.dump` of a tensor nests in `_load_from_bytes`): five pickles back to back
//! (magic number, protocol version, sys_info, the object, the storage keys), then one
//! record per key (its element count, 8 bytes, then its bytes), stepped over by the
//! element sizes the object's persistent ids give, and whatever follows scanned too.
//! Hand-written with the scanner (see `scan.rs`); the layout is
//! `formats/fmt/pytorch_legacy.fmt`'s.

use std::collections::HashMap;

use super::plain::{add, scan_at, scan_from};
use super::{Ctx, FileScan, Place};
use crate::runtime::pickle::{SymValue, Verdict};

/// The first bytes of a legacy stream: the pickled magic number at protocols 2 to 5.
const MAGICS: [&[u8]; 4] = [
    b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19",
    b"\x80\x03\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19",
    b"\x80\x04\x95\x0d\x00\x00\x00\x00\x00\x00\x00\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19",
    b"\x80\x05\x95\x0d\x00\x00\x00\x00\x00\x00\x00\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19",
];

/// The five pickles, in order.
const PARTS: [&str; 5] = [
    "magic number",
    "protocol version",
    "sys_info",
    "object",
    "storage keys",
];

/// torch's `PROTOCOL_VERSION` of legacy files.
const PROTOCOL_VERSION: i64 = 1001;

/// Whether `bytes` start as a legacy stream.
pub(super) fn is_legacy(bytes: &[u8]) -> bool {
    MAGICS.iter().any(|m| bytes.starts_with(m))
}

/// Scans a legacy stream; `top`: it is the file, whose `torch_weights_only` it sets.
pub(super) fn scan_legacy(bytes: &[u8], place: &Place, ctx: &Ctx, out: &mut FileScan, top: bool) {
    let mut pos = 0;
    let mut accepted = true;
    let mut classes: HashMap<String, String> = HashMap::new();
    let mut keys = None;
    for (i, part) in PARTS.into_iter().enumerate() {
        if i > 0 && pos == bytes.len() {
            let m = format!("a legacy torch.save header whose stream ends after {i} pickles: torch.load refuses it");
            out.finding(Verdict::DataOnly, &place.at(pos), m);
            if top {
                out.torch_weights_only = Some(false);
            }
            return;
        }
        let scan = scan_at(bytes, pos, ctx, true, i != 3, true);
        accepted &= scan.complete && scan.torch_refusal.is_none();
        if i == 1 && scan.result.as_ref().and_then(SymValue::as_int) != Some(PROTOCOL_VERSION) {
            accepted = false;
            out.finding(
                Verdict::DataOnly,
                &place.at(pos),
                "a protocol version other than 1001: torch.load refuses the file",
            );
        }
        if i == 3 {
            for id in &scan.storage_ids {
                if let (Some(k), Some(c)) = (&id.key, &id.class) {
                    classes.insert(k.clone(), c.clone());
                }
            }
        }
        if i == 4 {
            keys = scan.result.as_ref().and_then(key_list);
        }
        let (complete, end) = (scan.complete, scan.end);
        add(bytes, scan, place.at(pos), Some(part), ctx, out);
        if !complete {
            if top {
                out.torch_weights_only = Some(false);
            }
            return;
        }
        pos = end;
    }
    match records_end(bytes, pos, keys, &classes) {
        Ok(end) => scan_from(bytes, end, place, ctx, out, false, false),
        Err(why) => {
            accepted = false;
            out.finding(Verdict::CannotVerify, &place.at(pos), why);
        }
    }
    if top {
        out.torch_weights_only = Some(accepted);
    }
}

/// The storage keys: a list of texts.
fn key_list(v: &SymValue) -> Option<Vec<String>> {
    v.items()?
        .iter()
        .map(|k| k.as_str().map(String::from))
        .collect()
}

/// Where the records end: one per key, its element count then its bytes.
fn records_end(
    bytes: &[u8],
    mut pos: usize,
    keys: Option<Vec<String>>,
    classes: &HashMap<String, String>,
) -> Result<usize, String> {
    let keys =
        keys.ok_or("the storage keys are not a list of str: the records cannot be stepped over")?;
    for k in keys {
        let class = classes.get(&k).ok_or(format!(
            "storage {k:?} is named by no persistent id: its record cannot be stepped over"
        ))?;
        let size = element_size(class).ok_or(format!(
            "storage {k:?} of class {class}, whose element size is unknown"
        ))?;
        let numel = bytes
            .get(pos..pos + 8)
            .map(|b| i64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
            .ok_or(format!("the record of storage {k:?} is truncated"))?;
        let len = u64::try_from(numel)
            .ok()
            .and_then(|n| n.checked_mul(size))
            .and_then(|n| usize::try_from(n).ok())
            .ok_or(format!("the record of storage {k:?} has {numel} elements"))?;
        pos = pos
            .checked_add(8)
            .and_then(|p| p.checked_add(len))
            .filter(|&end| end <= bytes.len())
            .ok_or(format!("the record of storage {k:?} is truncated"))?;
    }
    Ok(pos)
}

/// The element size of a storage class (`torch.FloatStorage`, `torch.cuda.HalfStorage`).
fn element_size(class: &str) -> Option<u64> {
    let name = class.rsplit('.').next()?;
    Some(match name {
        "DoubleStorage" | "LongStorage" | "ComplexFloatStorage" => 8,
        "FloatStorage" | "IntStorage" | "QInt32Storage" => 4,
        "HalfStorage" | "BFloat16Storage" | "ShortStorage" => 2,
        "CharStorage" | "ByteStorage" | "BoolStorage" | "QInt8Storage" | "QUInt8Storage"
        | "QUInt4x2Storage" | "QUInt2x4Storage" | "UntypedStorage" => 1,
        "ComplexDoubleStorage" => 16,
        _ => return None,
    })
}
