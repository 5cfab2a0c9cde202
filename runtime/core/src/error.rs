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

/// Whether `c` is shown escaped by [`escape_name`]: control characters (ASCII and C1),
/// the line and paragraph separators, and the invisible characters that reorder or hide
/// text (bidirectional controls, zero-width characters, the byte order mark).
fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{200b}'..='\u{200f}'
                | '\u{2028}'..='\u{202e}'
                | '\u{2060}'..='\u{2069}'
                | '\u{feff}'
        )
}

/// `name` as it is safe to print to a terminal or in a line of text: a name read from a
/// file (a tensor's, a member's, a key's) may hold ANSI escapes or newlines that would
/// forge lines of a listing. Control and invisible characters are written as escapes
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
            parts.push(format!("entry '{}'", escape_name(entry)));
        }
        if let Some(field) = &self.field {
            parts.push(format!("field '{}'", escape_name(field)));
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
