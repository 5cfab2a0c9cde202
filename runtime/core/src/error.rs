//! Errors of the runtime layer. Every error carries where it happened: the file, the
//! container entry, the field path and the byte offset, as far as they are known.

use std::fmt;
use std::path::PathBuf;

/// Result type of the runtime.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Where an error happened. Every part is optional; the more is known, the more is shown.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Location {
    /// The file being read or written.
    pub file: Option<PathBuf>,
    /// The container entry (zip member, DB key, tensor name).
    pub entry: Option<String>,
    /// The field path inside the entry's layout (`header.descr`).
    pub field: Option<String>,
    /// The absolute byte offset in the file (or in the entry's content when `entry` is set
    /// and the entry is compressed).
    pub offset: Option<u64>,
}

impl Location {
    /// A location naming a file only.
    pub fn file(path: impl Into<PathBuf>) -> Self {
        Location {
            file: Some(path.into()),
            ..Default::default()
        }
    }

    /// This location with the entry set.
    pub fn with_entry(mut self, entry: impl Into<String>) -> Self {
        self.entry = Some(entry.into());
        self
    }

    /// This location with the field path set.
    pub fn with_field(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into());
        self
    }

    /// This location with the byte offset set.
    pub fn with_offset(mut self, offset: u64) -> Self {
        self.offset = Some(offset);
        self
    }

    fn is_empty(&self) -> bool {
        self.file.is_none() && self.entry.is_none() && self.field.is_none() && self.offset.is_none()
    }
}

/// The characters that Unicode's `Default_Ignorable_Code_Point` property (DerivedCoreProperties.txt)
/// names and whose general category is none of those [`needs_escape`] escapes whole: marks
/// and letters that show nothing (the combining grapheme joiner, Hangul fillers, Khmer
/// inherent vowels, Mongolian free variation selectors, the variation selectors).
const INVISIBLE: [(char, char); 9] = [
    ('\u{034f}', '\u{034f}'),
    ('\u{115f}', '\u{1160}'),
    ('\u{17b4}', '\u{17b5}'),
    ('\u{180b}', '\u{180d}'),
    ('\u{180f}', '\u{180f}'),
    ('\u{3164}', '\u{3164}'),
    ('\u{fe00}', '\u{fe0f}'),
    ('\u{ffa0}', '\u{ffa0}'),
    ('\u{e0100}', '\u{e01ef}'),
];

/// Whether `c` is shown escaped by [`escape_name`] and [`escape_controls`], the one rule
/// for every name and message printed: every character of Unicode general category `Cc`
/// (controls, C0 and C1), `Cf` (format characters: the bidirectional controls and marks
/// such as U+202E and U+061C, zero-width characters, U+180E, the interlinear annotation
/// characters U+FFF9 to U+FFFB, the tag characters, the byte order mark), `Zl` and `Zp`
/// (the line and paragraph separators), `Cn` (unassigned code points and noncharacters,
/// which a terminal may show as anything, among them the rest of the tag block) and the
/// other default-ignorable characters, which show nothing (the table `INVISIBLE`). The categories
/// are those of the `unicode-properties` crate's tables.
pub fn needs_escape(c: char) -> bool {
    use unicode_properties::general_category::{GeneralCategory as G, UnicodeGeneralCategory};
    if c.is_ascii() {
        return c.is_ascii_control();
    }
    matches!(
        c.general_category(),
        G::Control
            | G::Format
            | G::LineSeparator
            | G::ParagraphSeparator
            | G::Surrogate
            | G::Unassigned
    ) || INVISIBLE.iter().any(|&(lo, hi)| (lo..=hi).contains(&c))
}

/// `name` as it is safe to print to a terminal or in a line of text: a name read from a
/// file (a tensor's, a member's, a key's) may hold ANSI escapes or newlines that would
/// forge lines of a listing, or bidirectional controls that reorder what follows.
/// The characters [`needs_escape`] names are written as escapes
/// (`\n`, `\t`, `\r`, `\0`, `\x1b`, `\u{202e}`) and a backslash as `\\`, as Python's
/// `repr` and Rust's `escape_debug` do; a name holding none of them (nor a backslash) is
/// borrowed unchanged.
///
/// ```
/// use tensorfmt_core::error::escape_name;
/// assert_eq!(escape_name("layer.0.weight"), "layer.0.weight");
/// assert_eq!(escape_name("a\x1b[2Jb\nc"), "a\\x1b[2Jb\\nc");
/// assert_eq!(escape_name("x\\y"), "x\\\\y");
/// ```
pub fn escape_name(name: &str) -> std::borrow::Cow<'_, str> {
    if !name.chars().any(|c| c == '\\' || needs_escape(c)) {
        return std::borrow::Cow::Borrowed(name);
    }
    let mut out = String::with_capacity(name.len() + 8);
    for c in name.chars() {
        push_escaped(&mut out, c, true);
    }
    std::borrow::Cow::Owned(out)
}

/// [`escape_name`] of `name`, cut after `max` characters when it is longer, saying how
/// many more there are (`abc… (70000 characters in all)`): for a line of text that quotes a
/// name, where a name of megabytes would bury what the line says.
///
/// ```
/// use tensorfmt_core::error::escape_name_within;
/// assert_eq!(escape_name_within("short", 8), "short");
/// assert_eq!(escape_name_within("abcdefghij", 4), "abcd… (10 characters in all)");
/// assert_eq!(escape_name_within("\x1b\x1b\x1b", 8), "\\x1b\\x1b… (3 characters in all)");
/// ```
pub fn escape_name_within(name: &str, max: usize) -> std::borrow::Cow<'_, str> {
    // Escaped a character at a time up to `max` characters, never past: a name of
    // megabytes costs its length to count, not to escape.
    let (mut out, mut shown) = (String::new(), 0);
    for c in name.chars() {
        let before = out.len();
        push_escaped(&mut out, c, true);
        shown += out[before..].chars().count();
        if shown > max {
            out.truncate(before);
            let all = name.chars().count();
            return std::borrow::Cow::Owned(format!("{out}… ({all} characters in all)"));
        }
    }
    escape_name(name)
}

/// The most characters of a name that an error's location shows
/// ([`escape_name_within`]).
pub const LOCATION_NAME_CHARS: usize = 256;

/// `text` with its control and invisible characters escaped as [`escape_name`] escapes
/// them, backslashes left as they are: for a message (an error's) that quotes names among
/// its own words, so that nothing it quotes can move the cursor or start a line.
pub fn escape_controls(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(needs_escape) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        push_escaped(&mut out, c, false);
    }
    std::borrow::Cow::Owned(out)
}

/// Pushes `c` to `out`, escaped when [`needs_escape`] says (and a backslash doubled when
/// `backslash`).
fn push_escaped(out: &mut String, c: char, backslash: bool) {
    use std::fmt::Write as _;
    match c {
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        '\0' => out.push_str("\\0"),
        '\\' if backslash => out.push_str("\\\\"),
        c if needs_escape(c) && (c as u32) < 0x80 => {
            let _ = write!(out, "\\x{:02x}", c as u32);
        }
        c if needs_escape(c) => {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        }
        c => out.push(c),
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts: Vec<String> = Vec::new();
        if let Some(file) = &self.file {
            parts.push(escape_controls(&file.display().to_string()).into_owned());
        }
        if let Some(entry) = &self.entry {
            parts.push(format!(
                "entry '{}'",
                escape_name_within(entry, LOCATION_NAME_CHARS)
            ));
        }
        if let Some(field) = &self.field {
            parts.push(format!(
                "field '{}'",
                escape_name_within(field, LOCATION_NAME_CHARS)
            ));
        }
        if let Some(offset) = self.offset {
            parts.push(format!("byte {offset}"));
        }
        f.write_str(&parts.join(", "))
    }
}

/// What went wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ErrorKind {
    /// An I/O error from the operating system.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// The data ends before a field or payload does.
    #[error("truncated: needs {needed} bytes, only {available} remain")]
    Truncated {
        /// Bytes the field needs.
        needed: u64,
        /// Bytes left in the file or entry.
        available: u64,
    },
    /// A fixed magic value does not match.
    #[error("wrong magic: expected {expected:02x?}, found {found:02x?}")]
    BadMagic {
        /// The magic the format requires.
        expected: Vec<u8>,
        /// What the file holds there.
        found: Vec<u8>,
    },
    /// A validity check of the format failed.
    #[error("invalid value: {0}")]
    Invalid(String),
    /// A dtype code or string that the format's table does not know.
    #[error("unknown dtype {0}")]
    UnknownDType(String),
    /// A tensor's size does not fit what the file holds.
    #[error("size mismatch: {0}")]
    SizeMismatch(String),
    /// A size computation overflowed.
    #[error("size overflow: {0}")]
    Overflow(String),
    /// A configured limit was exceeded.
    #[error("limit exceeded: {what} is {actual}, the limit is {limit}")]
    Limit {
        /// The limited quantity.
        what: &'static str,
        /// The limit in force.
        limit: u64,
        /// The value found.
        actual: u64,
    },
    /// A stored checksum does not match the data.
    #[error("checksum mismatch: stored {expected:#010x}, computed {actual:#010x}")]
    Checksum {
        /// The checksum recorded in the file.
        expected: u32,
        /// The checksum of the bytes read.
        actual: u32,
    },
    /// A compressed stream could not be decoded.
    #[error("decompression failed: {0}")]
    Decompress(String),
    /// An embedded codec (Python literal, JSON, pickle, protobuf) rejected its input.
    #[error("{codec} decoding failed: {message}")]
    Codec {
        /// The codec's name.
        codec: &'static str,
        /// What the codec reported.
        message: String,
    },
    /// A request the format or the runtime cannot satisfy (for example a dtype a format
    /// has no code for).
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// A named tensor or entry does not exist.
    #[error("not found: {0}")]
    NotFound(String),
    /// A sink refused data or failed.
    #[error("sink: {0}")]
    Sink(String),
}

/// An error with its location.
#[derive(Debug)]
pub struct Error {
    /// What went wrong.
    pub kind: ErrorKind,
    /// Where it went wrong (boxed to keep `Result`s small).
    pub location: Box<Location>,
}

impl Error {
    /// An error of `kind` at `location`.
    pub fn new(kind: ErrorKind, location: Location) -> Self {
        Error {
            kind,
            location: Box::new(location),
        }
    }

    /// An [`ErrorKind::Unsupported`] error, saying what is not supported.
    pub fn unsupported(what: impl Into<String>) -> Self {
        Error::from(ErrorKind::Unsupported(what.into()))
    }

    /// Sets the file, unless one is set already.
    pub fn in_file(mut self, path: impl Into<PathBuf>) -> Self {
        if self.location.file.is_none() {
            self.location.file = Some(path.into());
        }
        self
    }

    /// Sets the entry, unless one is set already.
    pub fn in_entry(mut self, entry: impl Into<String>) -> Self {
        if self.location.entry.is_none() {
            self.location.entry = Some(entry.into());
        }
        self
    }

    /// Prefixes the field path with `parent` (so `descr` becomes `header.descr`), or sets it.
    pub fn in_field(mut self, parent: &str) -> Self {
        self.location.field = Some(match self.location.field.take() {
            Some(f) => format!("{parent}.{f}"),
            None => parent.to_string(),
        });
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.location.is_empty() {
            write!(f, "{}", self.kind)
        } else {
            write!(f, "{}: {}", self.location, self.kind)
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.kind {
            ErrorKind::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<ErrorKind> for Error {
    fn from(kind: ErrorKind) -> Self {
        Error::new(kind, Location::default())
    }
}

impl From<std::io::Error> for Error {
    /// The error carried by `e` when it carries one of this crate's (a stream's reader
    /// reporting through `std::io`), else `e` as [`ErrorKind::Io`].
    fn from(e: std::io::Error) -> Self {
        if !e.get_ref().is_some_and(|i| i.is::<Error>()) {
            return Error::from(ErrorKind::Io(e));
        }
        let kind = e.kind();
        match e.into_inner().map(|i| i.downcast::<Error>()) {
            Some(Ok(err)) => *err,
            Some(Err(other)) => Error::from(ErrorKind::Io(std::io::Error::new(kind, other))),
            None => Error::from(ErrorKind::Io(kind.into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_bidi_invisible_and_format_character_is_escaped() {
        // Bidi controls and marks, format characters, tags (assigned and not), separators,
        // C0 and C1 controls, noncharacters, invisible marks and fillers.
        let escaped = [
            '\u{0}',
            '\u{1b}',
            '\u{7f}',
            '\u{85}',
            '\u{9b}',
            '\u{ad}',
            '\u{34f}',
            '\u{600}',
            '\u{61c}',
            '\u{6dd}',
            '\u{70f}',
            '\u{115f}',
            '\u{17b4}',
            '\u{180b}',
            '\u{180e}',
            '\u{200b}',
            '\u{200e}',
            '\u{200f}',
            '\u{2028}',
            '\u{2029}',
            '\u{202a}',
            '\u{202e}',
            '\u{2060}',
            '\u{2065}',
            '\u{2066}',
            '\u{2069}',
            '\u{206f}',
            '\u{3164}',
            '\u{fe0f}',
            '\u{feff}',
            '\u{ffa0}',
            '\u{fff9}',
            '\u{fffa}',
            '\u{fffb}',
            '\u{fffe}',
            '\u{ffff}',
            '\u{110bd}',
            '\u{13430}',
            '\u{1bca0}',
            '\u{1d173}',
            '\u{e0000}',
            '\u{e0001}',
            '\u{e0002}',
            '\u{e001f}',
            '\u{e0020}',
            '\u{e0041}',
            '\u{e007f}',
            '\u{e0100}',
            '\u{e01ef}',
            '\u{e0fff}',
            '\u{10ffff}',
        ];
        for c in escaped {
            assert!(needs_escape(c), "U+{:04X}", c as u32);
            let name = format!("a{c}b");
            let shown = escape_name(&name);
            assert!(!shown.contains(c), "U+{:04X}", c as u32);
            assert_eq!(shown, escape_controls(&name), "U+{:04X}", c as u32);
        }
        assert_eq!(escape_name("a\u{61c}b"), "a\\u{61c}b");
        assert_eq!(escape_name("\u{e0041}"), "\\u{e0041}");
        assert_eq!(escape_name("\u{9b}"), "\\u{9b}");
    }

    #[test]
    fn visible_text_of_every_script_is_kept() {
        for name in [
            "layer.0.weight",
            "Gewichte.äöü",
            "вес",
            "وزن",
            "משקל",
            "权重",
            "重み",
            "가중치",
            "🦀.w",
            "a b\u{a0}c\u{3000}d",
            "e\u{301}",
            "\u{e000}",
        ] {
            assert_eq!(escape_name(name), name, "{name:?}");
            assert!(matches!(escape_name(name), std::borrow::Cow::Borrowed(_)));
        }
    }

    #[test]
    fn long_names_are_cut_between_whole_escapes() {
        let name = "\u{1b}".repeat(16 << 10);
        let shown = escape_name_within(&name, 10);
        assert_eq!(shown, "\\x1b\\x1b… (16384 characters in all)");
        assert_eq!(escape_name_within("abc", 3), "abc");
        let e = Error::new(
            ErrorKind::Invalid("x".into()),
            Location::default().with_entry("a".repeat(70_000)),
        );
        let text = e.to_string();
        assert!(text.len() < 400, "{}", text.len());
        assert!(text.contains("(70000 characters in all)"), "{text}");
    }

    #[test]
    fn display_names_everything() {
        let e = Error::new(
            ErrorKind::Truncated {
                needed: 10,
                available: 3,
            },
            Location::file("a.npz")
                .with_entry("x.npy")
                .with_field("descr")
                .with_offset(12),
        )
        .in_field("header");
        assert_eq!(
            e.to_string(),
            "a.npz, entry 'x.npy', field 'header.descr', byte 12: truncated: needs 10 bytes, only 3 remain"
        );
    }
}
