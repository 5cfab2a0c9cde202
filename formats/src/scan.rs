//! `tensorfmt scan`: every pickle of a file located and scanned for what loading it would
//! import and call, never running anything: a plain pickle file (several back to back,
//! one hidden after another's `STOP` included), each pickle member of a zip archive
//! (`data.pkl`, TorchScript's `constants.pkl` and `.debug_pkl`, a member of any name that
//! starts like a pickle), the pickles of a legacy `torch.save` file, a
//! `torch.storage._load_from_bytes` stream nested in a pickle (scanned in turn), joblib
//! files (the arrays' bytes stepped over as joblib reads them; compressed files inflated
//! first), a torch.distributed checkpoint's `.metadata`.
//!
//! Hand-written rather than generated from the formats' descriptions: a scanner must
//! find pickles where the formats' own readers would refuse the file (a tampered zip
//! archive, a pickle with globals outside any allowlist), and read them as the real
//! loaders do, not as the formats say they should be.
//!
//! The verdict of a file is the worst of its pickles' ([`Verdict`]) and of what was
//! found around them (an archive that does not open, data that cannot be stepped over:
//! [`Verdict::CannotVerify`]). In a PyTorch checkpoint (a zip archive or a legacy file),
//! `weights-only` and `data only` also mean that `torch.load(weights_only=True)` of the
//! pinned torch accepts the file ([`FileScan::torch_weights_only`]).

mod hooks;
mod legacy;
mod lenient;
mod plain;
mod report;
mod zip;

use std::path::Path;

use crate::runtime::pickle::{PickleScan, Verdict};
use crate::Limits;
use tensorfmt_runtime::RandomAccess;

pub use report::{print_json, print_table};

/// Where a pickle is in a file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Place {
    /// The zip member holding it (of the outermost archive that has one).
    pub member: Option<String>,
    /// The streams it is nested in, outermost first: `_load_from_bytes at 123`, `inline
    /// at 456`, `inflated zlib stream`.
    pub nested: Vec<String>,
    /// Its offset in the innermost of these (the file, the member or the stream).
    pub offset: usize,
}

impl Place {
    /// This place, one stream deeper.
    fn within(&self, stream: String) -> Place {
        let mut p = self.clone();
        p.nested.push(stream);
        p.offset = 0;
        p
    }

    /// This place at `offset` of its stream.
    fn at(&self, offset: usize) -> Place {
        Place {
            offset,
            ..self.clone()
        }
    }
}

impl std::fmt::Display for Place {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(m) = &self.member {
            write!(f, "member {m}, ")?;
        }
        for n in &self.nested {
            write!(f, "{n}, ")?;
        }
        write!(f, "offset {}", self.offset)
    }
}

/// One pickle found and scanned.
#[derive(Debug, Clone)]
pub struct Found {
    /// Where it is.
    pub place: Place,
    /// What it is in its file (`object`, `storage keys` of a legacy file), if it has a
    /// name there.
    pub part: Option<&'static str>,
    /// The scan (its inline pickles are found apart).
    pub scan: PickleScan,
}

/// Something found around the pickles.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// How much it weighs on the verdict ([`Verdict::DataOnly`] for a note).
    pub severity: Verdict,
    /// Where.
    pub place: Place,
    /// What.
    pub message: String,
}

/// What scanning one file found.
#[derive(Debug, Clone)]
pub struct FileScan {
    /// The path, as given.
    pub path: String,
    /// What the file is (`pickle`, `zip`, `pytorch legacy`, `joblib (zlib)`, ...).
    pub kind: String,
    /// Every pickle, in file order (nested ones after the pickle holding them).
    pub pickles: Vec<Found>,
    /// What was found around them.
    pub findings: Vec<Finding>,
    /// For a PyTorch checkpoint: whether `torch.load(weights_only=True)` accepts it.
    pub torch_weights_only: Option<bool>,
}

impl FileScan {
    /// The worst verdict of its pickles and findings.
    pub fn verdict(&self) -> Verdict {
        let v = self
            .pickles
            .iter()
            .map(|p| p.scan.own_verdict())
            .chain(self.findings.iter().map(|f| f.severity))
            .fold(Verdict::DataOnly, Verdict::max);
        match self.torch_weights_only {
            Some(false) if v < Verdict::NeedsGlobals => Verdict::NeedsGlobals,
            _ => v,
        }
    }

    fn finding(&mut self, severity: Verdict, place: &Place, message: impl Into<String>) {
        self.findings.push(Finding {
            severity,
            place: place.clone(),
            message: message.into(),
        });
    }
}

/// What scanning carries down nested streams.
struct Ctx<'l> {
    limits: &'l Limits,
    /// How many streams deep.
    depth: u32,
}

/// Most streams nested in one another (`_load_from_bytes` in `_load_from_bytes`).
const MAX_STREAMS: u32 = 8;

/// Scans the file or folder at `path` (a folder: a torch.distributed checkpoint's
/// `.metadata`). Never fails: a file that cannot be read is a finding of
/// [`Verdict::CannotVerify`].
pub fn scan_path(path: &Path, limits: &Limits) -> FileScan {
    let mut out = FileScan {
        path: path.display().to_string(),
        kind: "unreadable".into(),
        pickles: Vec::new(),
        findings: Vec::new(),
        torch_weights_only: None,
    };
    let ctx = Ctx { limits, depth: 0 };
    let top = Place::default();
    if path.is_dir() {
        out.kind = "folder".into();
        let meta = path.join(".metadata");
        if !meta.is_file() {
            out.finding(
                Verdict::CannotVerify,
                &top,
                "a folder without .metadata: not a torch.distributed checkpoint",
            );
            return out;
        }
        let place = Place {
            member: Some(".metadata".into()),
            ..Place::default()
        };
        scan_file(&meta, &place, &ctx, &mut out);
        out.kind = "torch.distributed checkpoint".into();
        return out;
    }
    scan_file(path, &top, &ctx, &mut out);
    out
}

/// Maps the file and scans its bytes.
fn scan_file(path: &Path, place: &Place, ctx: &Ctx, out: &mut FileScan) {
    match crate::Source::open(path) {
        Ok(src) => match src.whole() {
            Ok(bytes) => scan_stream(&bytes, place, ctx, out, true),
            Err(e) => out.finding(Verdict::CannotVerify, place, format!("unreadable: {e}")),
        },
        Err(e) => out.finding(Verdict::CannotVerify, place, format!("unreadable: {e}")),
    }
}

/// Scans a stream that `torch.load` or `pickle.load` would read: a zip archive, a legacy
/// `torch.save` file, a compressed joblib file, or pickles back to back. `top`: the
/// stream is the file itself (its kind is the file's).
fn scan_stream(bytes: &[u8], place: &Place, ctx: &Ctx, out: &mut FileScan, top: bool) {
    let kind = |out: &mut FileScan, k: &str| {
        if top {
            out.kind = k.to_string();
        }
    };
    if tensorfmt_runtime::zip::starts_like_zip(&Slice(bytes)) {
        kind(out, "zip");
        zip::scan_zip(bytes, place, ctx, out, top);
    } else if legacy::is_legacy(bytes) {
        kind(out, "pytorch legacy");
        legacy::scan_legacy(bytes, place, ctx, out, top);
    } else if let Some(name) = plain::compressor(bytes) {
        kind(out, &format!("joblib ({name})"));
        plain::scan_compressed(bytes, name, place, ctx, out);
    } else if let Some(Some(at)) = bytes
        .starts_with(b"\x93NUMPY")
        .then(|| plain::npy_pickle(bytes))
        .flatten()
    {
        kind(out, "npy of objects");
        let p = place.within("the pickle of an npy array of objects".into());
        plain::scan_from(bytes, at, &p, ctx, out, false, true);
    } else if let Some(what) = plain::no_pickle(bytes) {
        kind(out, what);
        out.finding(
            Verdict::DataOnly,
            place,
            format!("a {what} file, which holds no pickle"),
        );
    } else {
        kind(out, "pickle");
        plain::scan_pickles(bytes, place, ctx, out, false);
    }
}

/// Bytes in memory as a [`RandomAccess`] source.
struct Slice<'a>(&'a [u8]);

impl RandomAccess for Slice<'_> {
    fn len(&self) -> u64 {
        self.0.len() as u64
    }

    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> crate::Result<()> {
        tensorfmt_runtime::source::check_range(offset, buf.len() as u64, self.len())?;
        buf.copy_from_slice(&self.0[offset as usize..offset as usize + buf.len()]);
        Ok(())
    }

    fn as_slice(&self) -> Option<&[u8]> {
        Some(self.0)
    }
}

/// The scans of `paths` printed as a table (or JSON) to `out`; the exit code of the
/// worst verdict ([`Verdict::exit_code`]).
pub fn run(
    paths: &[std::path::PathBuf],
    json: bool,
    limits: &Limits,
    out: &mut dyn std::io::Write,
) -> crate::Result<u8> {
    let scans: Vec<FileScan> = paths.iter().map(|p| scan_path(p, limits)).collect();
    if json {
        print_json(&scans, out)?;
    } else {
        print_table(&scans, out)?;
    }
    Ok(scans
        .iter()
        .map(|s| s.verdict().exit_code())
        .max()
        .unwrap_or(0))
}
