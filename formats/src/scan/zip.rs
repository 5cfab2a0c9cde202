//! The pickles of a zip archive: every member named as one (`*.pkl`, TorchScript's
//! `*.debug_pkl`, `*.pickle`) and every other member whose bytes start with `PROTO`
//! (torch's storage records aside), read through the project's zip reader, or as torch's
//! reader finds them when that refuses the archive or a member (flags, a checksum, a
//! local header that disagrees: `lenient.rs`). Hand-written with the scanner (see
//! `scan.rs`).

use std::borrow::Cow;
use std::io::Read;

use super::plain::scan_from;
use super::{lenient, Ctx, FileScan, Place, Slice};
use crate::runtime::pickle::Verdict;
use crate::Limits;
use tensorfmt_runtime::zip::{io_to_error, member_bytes, member_reader, ZipIndex, ZipMember};

/// Scans the archive in `bytes`; `top`: it is the file, whose `torch_weights_only` it
/// sets (accepted when the archive opens, is no TorchScript archive, and its
/// `data.pkl` is read whole and accepted).
pub(super) fn scan_zip(bytes: &[u8], place: &Place, ctx: &Ctx, out: &mut FileScan, top: bool) {
    let src = Slice(bytes);
    let (members, damaged) = match ZipIndex::read(&src, ctx.limits) {
        Ok(index) => (index.members().to_vec(), false),
        Err(e) => {
            out.finding(
                Verdict::CannotVerify,
                place,
                format!("the archive does not open ({e}): its members are read where their local headers are"),
            );
            (lenient::members(bytes, ctx.limits), true)
        }
    };
    let root = members
        .first()
        .map(|m| m.name.split('/').next().unwrap_or_default().to_string())
        .unwrap_or_default();
    let data_pkl = format!("{root}/data.pkl");
    let torchscript = members
        .iter()
        .any(|m| m.name == format!("{root}/constants.pkl"));
    let mut data_ok = None;
    for m in &members {
        let named = is_pickle_name(&m.name);
        if !named && is_storage_record(&m.name) {
            continue;
        }
        let mplace = member_place(place, &m.name);
        let (content, problem) = read_member(&src, m, ctx.limits, named);
        if let Some(p) = &problem {
            out.finding(Verdict::CannotVerify, &mplace, p.clone());
        }
        if !named && !matches!(content.as_ref(), [0x80, 0..=5, ..]) {
            continue;
        }
        let first = out.pickles.len();
        scan_from(&content, 0, &mplace, ctx, out, true, named);
        if m.name == data_pkl {
            let found = &out.pickles[first..];
            data_ok = Some(
                problem.is_none()
                    && !found.is_empty()
                    && found
                        .iter()
                        .all(|f| f.scan.complete && f.scan.torch_refusal.is_none()),
            );
        }
    }
    if torchscript {
        out.finding(
            Verdict::DataOnly,
            place,
            "a TorchScript archive: torch.load(weights_only=True) refuses it, and torch.jit.load \
             runs the code of its code/ members",
        );
    }
    if top {
        out.torch_weights_only = Some(!damaged && !torchscript && data_ok == Some(true));
    }
}

/// Where a member is: the file's member, or a member of a nested archive.
fn member_place(place: &Place, name: &str) -> Place {
    if place.member.is_none() && place.nested.is_empty() {
        Place {
            member: Some(name.to_string()),
            ..Place::default()
        }
    } else {
        place.within(format!("member {name}"))
    }
}

/// Whether a member's name says it is a pickle.
fn is_pickle_name(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    lower.ends_with("pkl") || lower.ends_with(".pickle") || lower.ends_with(".pck")
}

/// Whether a member is one of torch's storage records (`<root>/data/<key>`, TorchScript's
/// `<root>/constants/<key>`), raw bytes that no loader unpickles.
fn is_storage_record(name: &str) -> bool {
    let mut parts = name.rsplit('/');
    let (Some(key), Some(folder)) = (parts.next(), parts.next()) else {
        return false;
    };
    !key.is_empty()
        && key.bytes().all(|b| b.is_ascii_digit())
        && matches!(folder, "data" | "constants")
}

/// Most bytes of a member read to see whether it starts like a pickle.
const HEAD: usize = 2;

/// A member's content and, when it could not be read as the zip reader reads it (a
/// checksum, a size, a local header), what went wrong: the bytes then are what could
/// be read. A member not `named` as a pickle is read whole only when it starts with
/// `PROTO`.
fn read_member<'s>(
    src: &'s Slice<'_>,
    m: &ZipMember,
    limits: &Limits,
    named: bool,
) -> (Cow<'s, [u8]>, Option<String>) {
    if !named {
        let head = head(src, m, limits);
        if !matches!(head.as_slice(), [0x80, 0..=5, ..]) {
            return (Cow::Owned(head), None);
        }
    }
    if m.size > limits.max_header_bytes {
        let why = format!(
            "a member of {} bytes, past the {} bytes a pickle may take: not scanned",
            m.size, limits.max_header_bytes
        );
        return (Cow::Borrowed(&[]), Some(why));
    }
    match member_bytes(src, m, limits) {
        Ok(b) => (b, None),
        Err(e) => {
            let (b, _) = tolerant(src, m, limits);
            (Cow::Owned(b), Some(format!("{e}; scanned as read")))
        }
    }
}

/// The first bytes of a member (nothing when they cannot be read).
fn head(src: &Slice, m: &ZipMember, limits: &Limits) -> Vec<u8> {
    let mut out = Vec::new();
    if let Ok(r) = member_reader(src, m, limits) {
        let _ = r.take(HEAD as u64).read_to_end(&mut out);
    }
    out
}

/// What can be read of a member whose checksum or size is wrong: the zip reader's
/// stream up to its error (a checksum is checked after the last byte).
fn tolerant(src: &Slice, m: &ZipMember, limits: &Limits) -> (Vec<u8>, Option<String>) {
    let mut out = Vec::new();
    match member_reader(src, m, limits) {
        Ok(mut r) => match r.read_to_end(&mut out) {
            Ok(_) => (out, None),
            Err(e) => (out, Some(io_to_error(e).to_string())),
        },
        Err(e) => (
            lenient::stored(src.0, m).unwrap_or_default(),
            Some(e.to_string()),
        ),
    }
}
