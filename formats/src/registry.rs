//! The formats a program knows: the built-in ones and those a user's crate generates from
//! its own `.fmt` schemas. Opening ([`crate::OpenOptions::registry`]), saving
//! ([`crate::Saver::create_in`]), converting ([`crate::convert`], through its
//! `open.registry`) and the command line ([`crate::cli::run_with`]) look formats up here,
//! by name, by extension and by content.

use std::path::Path;

use crate::{Error, ErrorKind, FormatDesc, Limits, Source};

/// A set of formats: the built-in ones ([`Registry::builtin`]) and those added, each a
/// descriptor a generated format module exports (`DESC`, or every format of a generated
/// `REGISTRY`).
///
/// A format added under the name of one already there replaces it. Lookups by extension
/// and detection by content take the first format in [`Registry::formats`] order: the
/// built-in ones, then those added.
///
/// ```
/// use tensorfmt::{Registry, TensorFile, OpenOptions};
///
/// // A user's format, generated from its `.fmt` schema:
/// //   #[derive(tensorfmt::TensorFormat)]
/// //   #[tensorfmt(schema = "fmt/myformat.fmt")]
/// //   pub struct MyFormat;
/// // is added with `.with(&MyFormat::DESC)`; here, a built-in one stands in for it.
/// let npy: &'static tensorfmt::FormatDesc = tensorfmt::format_named("npy").unwrap();
/// let registry = Registry::empty().with(npy);
/// assert_eq!(registry.names(), vec!["npy"]);
/// assert!(registry.named("npz").is_none());
/// assert!(Registry::builtin().named("npz").is_some());
///
/// let options = OpenOptions { registry, ..Default::default() };
/// # let _ = options;
/// ```
#[derive(Clone)]
pub struct Registry {
    /// The built-in formats (none in an [`Registry::empty`] one).
    builtin: &'static [FormatDesc],
    /// The formats added, in the order added.
    added: Vec<&'static FormatDesc>,
}

impl Default for Registry {
    /// The built-in formats.
    fn default() -> Self {
        Self::builtin()
    }
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.names()).finish()
    }
}

impl Registry {
    /// The formats built into this crate (those its features enable), in schema order, then
    /// `torch-dcp` (torch.distributed checkpoints, read by [`crate::dcp`]) with `pytorch`,
    /// `joblib` (`joblib.dump` files, read by [`crate::joblib`]) with `joblib`, and
    /// `torch-pickle` (`pickle.dump` of torch tensors, read by [`crate::torch_pickle`])
    /// with `pytorch`.
    ///
    /// ```
    /// assert!(tensorfmt::Registry::builtin().named("npy").is_some());
    /// ```
    pub fn builtin() -> Self {
        Registry {
            builtin: crate::generated::REGISTRY,
            added: hand_written(),
        }
    }

    /// A registry without any format.
    ///
    /// ```
    /// assert!(tensorfmt::Registry::empty().names().is_empty());
    /// ```
    pub fn empty() -> Self {
        Registry {
            builtin: &[],
            added: Vec::new(),
        }
    }

    /// Adds `format` (a generated `DESC`: `&MyFormat::DESC`), replacing a format of the
    /// same name.
    ///
    /// ```
    /// let mut registry = tensorfmt::Registry::empty();
    /// registry.add(tensorfmt::format_named("npz").unwrap());
    /// assert_eq!(registry.names(), vec!["npz"]);
    /// ```
    pub fn add(&mut self, format: &'static FormatDesc) -> &mut Self {
        self.added.retain(|f| f.name != format.name);
        self.added.push(format);
        self
    }

    /// [`Registry::add`], by value: `Registry::builtin().with(&MyFormat::DESC)`.
    ///
    /// ```
    /// let npy = tensorfmt::format_named("npy").unwrap();
    /// let registry = tensorfmt::Registry::empty().with(npy);
    /// assert_eq!(registry.names(), vec!["npy"]);
    /// ```
    pub fn with(mut self, format: &'static FormatDesc) -> Self {
        self.add(format);
        self
    }

    /// Adds every format of `formats`, the `REGISTRY` a build script generates
    /// (`tensorfmt_codegen::compile`), in order.
    ///
    /// ```
    /// let registry = tensorfmt::Registry::empty().with_all(tensorfmt::generated::REGISTRY);
    /// let generated: Vec<&str> = tensorfmt::generated::REGISTRY.iter().map(|f| f.name).collect();
    /// assert_eq!(registry.names(), generated);
    /// // The built-in registry holds them, and the hand-written `torch-dcp` and `joblib`.
    /// assert_eq!(tensorfmt::Registry::builtin().names()[..generated.len()], generated[..]);
    /// ```
    pub fn with_all(mut self, formats: &'static [FormatDesc]) -> Self {
        for f in formats {
            self.add(f);
        }
        self
    }

    /// Every format: the built-in ones not replaced, then those added, in order.
    ///
    /// ```
    /// let names: Vec<&str> = tensorfmt::Registry::builtin().formats().map(|f| f.name).collect();
    /// assert!(names.contains(&"npz"));
    /// ```
    pub fn formats(&self) -> impl Iterator<Item = &'static FormatDesc> + '_ {
        self.builtin
            .iter()
            .filter(|b| !self.added.iter().any(|a| a.name == b.name))
            .chain(self.added.iter().copied())
    }

    /// The public names of every format, in [`Registry::formats`] order.
    ///
    /// ```
    /// assert!(tensorfmt::Registry::builtin().names().contains(&"npy"));
    /// ```
    pub fn names(&self) -> Vec<&'static str> {
        self.formats().map(|f| f.name).collect()
    }

    /// The format with this public name (`npy`, `npz`, ...).
    ///
    /// ```
    /// assert_eq!(tensorfmt::Registry::builtin().named("npy").unwrap().name, "npy");
    /// ```
    pub fn named(&self, name: &str) -> Option<&'static FormatDesc> {
        self.formats().find(|f| f.name == name)
    }

    /// The format with this public name, or an error listing the formats there are.
    ///
    /// ```
    /// let e = tensorfmt::Registry::builtin().require("nosuch").unwrap_err();
    /// assert!(e.to_string().contains("known: npy"), "{e}");
    /// ```
    pub fn require(&self, name: &str) -> crate::Result<&'static FormatDesc> {
        self.named(name).ok_or_else(|| {
            let known = self.names();
            let what = match (left_out(name), closest(name, &known)) {
                (Some(feature), _) => format!(
                    "the format '{name}' is left out of this build: enable tensorfmt's \
                     `{feature}` feature"
                ),
                (None, Some(close)) => format!("unknown format '{name}': did you mean '{close}'?"),
                (None, None) => format!("unknown format '{name}'"),
            };
            Error::from(ErrorKind::Unsupported(format!(
                "{what} (known: {})",
                known.join(", ")
            )))
        })
    }

    /// The format a path's extension maps to by default.
    ///
    /// ```
    /// let f = tensorfmt::Registry::builtin().for_path("a/b.NPZ".as_ref()).unwrap();
    /// assert_eq!(f.name, "npz");
    /// ```
    pub fn for_path(&self, path: &Path) -> Option<&'static FormatDesc> {
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        self.formats()
            .find(|f| f.extensions.contains(&ext.as_str()))
    }

    /// The format of `source`, by content: every format whose detector accepts it,
    /// preferring the one its path's extension names when several do, else the first.
    ///
    /// ```
    /// use tensorfmt::{Limits, Registry, Source};
    /// let mut npy = b"\x93NUMPY\x01\x00".to_vec();
    /// npy.extend_from_slice(&[0; 8]);
    /// let source = Source::from_bytes(npy);
    /// assert_eq!(Registry::builtin().detect(&source, &Limits::default()).unwrap().name, "npy");
    /// assert!(Registry::empty().detect(&source, &Limits::default()).is_none());
    /// ```
    pub fn detect(&self, source: &Source, limits: &Limits) -> Option<&'static FormatDesc> {
        self.candidates(source, limits).first().copied()
    }

    /// Every format whose detector accepts `source`, the one its path's extension names
    /// first, then the others in [`Registry::formats`] order, except that a format whose
    /// files are a special case of another's goes before it (`joblib` before `pickle`):
    /// what opening a file tries, in turn, until one indexes it.
    ///
    /// ```
    /// use tensorfmt::{Limits, Registry, Source};
    /// let source = Source::from_bytes(b"\x93NUMPY\x01\x00".to_vec());
    /// let names: Vec<&str> = Registry::builtin()
    ///     .candidates(&source, &Limits::default())
    ///     .iter()
    ///     .map(|f| f.name)
    ///     .collect();
    /// assert_eq!(names, ["npy"]);
    /// ```
    pub fn candidates(&self, source: &Source, limits: &Limits) -> Vec<&'static FormatDesc> {
        let mut hits: Vec<&'static FormatDesc> = self
            .formats()
            .filter(|f| (f.detect)(source, limits))
            .collect();
        if hits.len() > 1 {
            if let Some(by_ext) = source.path().and_then(|p| self.for_path(p)) {
                if let Some(i) = hits.iter().position(|h| h.name == by_ext.name) {
                    let f = hits.remove(i);
                    hits.insert(0, f);
                }
            }
            for (special, general) in REFINES {
                let at = |name: &str| hits.iter().position(|h| h.name == name);
                if let (Some(s), Some(g)) = (at(special), at(general)) {
                    if s > g {
                        let f = hits.remove(s);
                        hits.insert(g, f);
                    }
                }
            }
        }
        hits
    }

    /// Every format whose extensions hold `path`'s, in [`Registry::formats`] order.
    ///
    /// ```
    /// let names: Vec<&str> = tensorfmt::Registry::builtin()
    ///     .all_for_path("m.npz".as_ref())
    ///     .iter()
    ///     .map(|f| f.name)
    ///     .collect();
    /// assert_eq!(names, ["npz"]);
    /// ```
    pub fn all_for_path(&self, path: &Path) -> Vec<&'static FormatDesc> {
        let Some(ext) = path.extension().and_then(|e| e.to_str()) else {
            return Vec::new();
        };
        let ext = ext.to_ascii_lowercase();
        self.formats()
            .filter(|f| f.extensions.contains(&ext.as_str()))
            .collect()
    }
}

/// The built-in formats read by hand-written code, which this build has.
fn hand_written() -> Vec<&'static FormatDesc> {
    [
        // Read over the `pytorch` format ([`crate::dcp`]).
        #[cfg(feature = "pytorch")]
        &crate::dcp::DESC,
        // Pickles with array bytes inline, perhaps compressed ([`crate::joblib`]).
        #[cfg(feature = "joblib")]
        &crate::joblib::DESC,
        // `pickle.dump` of torch tensors, nested `torch.save` streams ([`crate::torch_pickle`]).
        #[cfg(feature = "pytorch")]
        &crate::torch_pickle::DESC,
    ]
    .to_vec()
}

/// Formats whose files are a special case of another's, which that format's detector
/// accepts too: when both accept a file, the special one is tried first. joblib's
/// pickles name NumPy's globals, as the `pickle` detector asks, but only the `joblib`
/// reader reads the array bytes that follow its wrappers; `pickle.dump`s of torch tensors
/// may hold NumPy arrays too, but only the `torch-pickle` reader reads their tensors.
const REFINES: &[(&str, &str)] = &[("joblib", "pickle"), ("torch-pickle", "pickle")];

/// The feature that builds the built-in format `name`, when this build leaves it out.
fn left_out(name: &str) -> Option<&'static str> {
    const FEATURES: &[(&str, &str)] = &[
        ("npy", "npy"),
        ("npz", "npz"),
        ("safetensors", "safetensors"),
        ("pickle", "pickle"),
        ("joblib", "joblib"),
        ("pytorch", "pytorch"),
        ("pytorch-legacy", "pytorch"),
        ("torch-pickle", "pytorch"),
        ("torchscript", "pytorch"),
        ("onnx", "onnx"),
        ("caffe2-minidb", "caffe2"),
        ("caffe2-lmdb", "caffe2"),
        ("caffe2-leveldb", "caffe2"),
    ];
    let name = name.to_ascii_lowercase();
    FEATURES
        .iter()
        .find(|(n, _)| *n == name)
        .filter(|(n, _)| crate::format_named(n).is_none())
        .map(|(_, f)| *f)
}

/// The known name closest to `name` (a misspelling: a Levenshtein distance of at most a
/// third of its length, and at least 2), if one is.
fn closest<'a>(name: &str, known: &[&'a str]) -> Option<&'a str> {
    let name = name.to_ascii_lowercase().replace('_', "-");
    let most = (name.chars().count() / 3).max(2);
    known
        .iter()
        .map(|k| (strsim::levenshtein(&name, k), *k))
        .filter(|(d, _)| *d <= most)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_misspelt_format_name_gets_the_closest_known_one() {
        let r = Registry::builtin();
        let e = r.require("safetensor").err().unwrap().to_string();
        assert!(
            e.contains("unknown format 'safetensor': did you mean 'safetensors'?"),
            "{e}"
        );
        assert!(e.contains("known: "), "{e}");
        let e = r.require("pytorch_legacy").err().unwrap().to_string();
        assert!(e.contains("did you mean 'pytorch-legacy'?"), "{e}");
        let e = r.require("tensorflow").err().unwrap().to_string();
        assert!(!e.contains("did you mean"), "{e}");
        #[cfg(not(feature = "caffe2"))]
        {
            let e = r.require("caffe2-lmdb").err().unwrap().to_string();
            assert!(e.contains("enable tensorfmt's `caffe2` feature"), "{e}");
        }
    }
}
