//! Diagnostics: errors in schema files, with the file, the line and column, and a caret
//! under the offending text.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::ast::Span;

/// One error in a schema file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// The file, as given to the parser.
    pub path: PathBuf,
    /// The offending text, as byte offsets into the file.
    pub span: Span,
    /// 1-based line of `span.start`.
    pub line: usize,
    /// 1-based column of `span.start`, counted in characters.
    pub column: usize,
    /// What is wrong.
    pub message: String,
    /// How to fix it, when there is something to say.
    pub help: Option<String>,
}

/// 1-based line and column (in characters) of byte offset `pos` in `source`.
///
/// Offsets past the end, or inside a multi-byte character, are clamped to the nearest
/// character boundary before it.
pub fn line_col(source: &str, pos: usize) -> (usize, usize) {
    let mut pos = pos.min(source.len());
    while !source.is_char_boundary(pos) {
        pos -= 1;
    }
    let before = &source[..pos];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = source[line_start..pos].chars().count() + 1;
    (line, column)
}

impl Diagnostic {
    /// A diagnostic at `span` of `source`; the line and column are computed from the span.
    pub fn new(path: &Path, source: &str, span: Span, message: impl Into<String>) -> Self {
        let (line, column) = line_col(source, span.start);
        Diagnostic {
            path: path.to_path_buf(),
            span,
            line,
            column,
            message: message.into(),
            help: None,
        }
    }

    /// The same diagnostic with a help line.
    pub fn with_help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }

    /// Renders the diagnostic in the style of rustc:
    ///
    /// ```text
    /// error: unknown dtype 'f33'
    ///   --> bad.fmt:12:20
    ///    |
    /// 12 |         "<f4" => f33 le,
    ///    |                  ^^^
    ///    = help: known dtypes: ...
    /// ```
    ///
    /// `source` is the text of the file the diagnostic points into. The caret covers the
    /// span's part on its first line (at least one character).
    pub fn render(&self, source: &str) -> String {
        let mut start = self.span.start.min(source.len());
        while !source.is_char_boundary(start) {
            start -= 1;
        }
        let line_start = source[..start].rfind('\n').map_or(0, |i| i + 1);
        let line_end = source[start..]
            .find('\n')
            .map_or(source.len(), |i| start + i);
        let text = source[line_start..line_end].trim_end_matches('\r');
        let (line, _) = line_col(source, start);
        let gutter = line.to_string().len();
        let pad = " ".repeat(gutter);

        // The caret line keeps tabs of the source line so that it lines up.
        let indent: String = source[line_start..start]
            .chars()
            .map(|c| if c == '\t' { '\t' } else { ' ' })
            .collect();
        let end = self.span.end.clamp(start, line_end.max(start));
        let width = source
            .get(start..end)
            .map_or(0, |s| s.chars().count())
            .max(1);

        let mut out = format!("error: {}\n", self.message);
        out += &format!(
            "{pad}--> {}:{}:{}\n",
            self.path.display(),
            self.line,
            self.column
        );
        out += &format!("{pad} |\n");
        out += &format!("{line} | {text}\n");
        out += &format!("{pad} | {indent}{}\n", "^".repeat(width));
        if let Some(help) = &self.help {
            out += &format!("{pad} = help: {help}\n");
        }
        out
    }
}

impl fmt::Display for Diagnostic {
    /// Without the source text: `path:line:col: error: message`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: error: {}",
            self.path.display(),
            self.line,
            self.column,
            self.message
        )?;
        if let Some(help) = &self.help {
            write!(f, " (help: {help})")?;
        }
        Ok(())
    }
}

/// All errors found, in the order found (by file, then mostly by position).
///
/// Displays every diagnostic rendered with its source line and caret when the source is
/// known (see [`Diagnostics::with_sources`]), otherwise as one `path:line:col: error: ...`
/// line each, and a final count.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Diagnostics(pub Vec<Diagnostic>);

impl Diagnostics {
    /// True when there is no error.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The number of errors.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Iterates over the errors.
    pub fn iter(&self) -> std::slice::Iter<'_, Diagnostic> {
        self.0.iter()
    }

    /// Renders all diagnostics with their source lines; `source_of` gives the text of a
    /// path (diagnostics whose source is unknown are rendered as one line).
    pub fn render_with<'a>(&self, source_of: impl Fn(&Path) -> Option<&'a str>) -> String {
        let mut out = String::new();
        for d in &self.0 {
            match source_of(&d.path) {
                Some(src) => out += &d.render(src),
                None => out += &format!("{d}\n"),
            }
            out.push('\n');
        }
        out += &self.summary();
        out
    }

    /// Renders all diagnostics with the sources of `files` (matched by path).
    pub fn with_sources(&self, files: &[crate::ast::SchemaFile]) -> String {
        self.render_with(|p| {
            files
                .iter()
                .find(|f| f.path == p)
                .map(|f| f.source.as_str())
        })
    }

    fn summary(&self) -> String {
        match self.0.len() {
            1 => "error: could not compile the schema due to 1 previous error\n".into(),
            n => format!("error: could not compile the schema due to {n} previous errors\n"),
        }
    }
}

impl fmt::Display for Diagnostics {
    /// Renders every diagnostic. Sources are read back from the diagnostics' paths when
    /// those files exist; otherwise each is one `path:line:col: error: ...` line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut sources: Vec<(PathBuf, Option<String>)> = Vec::new();
        for d in &self.0 {
            if !sources.iter().any(|(p, _)| *p == d.path) {
                sources.push((d.path.clone(), std::fs::read_to_string(&d.path).ok()));
            }
        }
        let text = self.render_with(|p| {
            sources
                .iter()
                .find(|(q, _)| q == p)
                .and_then(|(_, s)| s.as_deref())
        });
        f.write_str(text.trim_end())
    }
}

impl std::error::Error for Diagnostics {}

impl IntoIterator for Diagnostics {
    type Item = Diagnostic;
    type IntoIter = std::vec::IntoIter<Diagnostic>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl<'a> IntoIterator for &'a Diagnostics {
    type Item = &'a Diagnostic;
    type IntoIter = std::slice::Iter<'a, Diagnostic>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}
