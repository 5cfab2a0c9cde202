//! The `.fmt` schema language of tensorfmt: parser, semantic checks and diagnostics.
//!
//! A schema is one or more `.fmt` files, each defining formats (see `docs/fmt-language.md`).
//! [`parse`] turns one file into an [`ast::SchemaFile`]; [`check()`] runs the semantic checks
//! over a set of parsed files; [`load`] does both for files on disk and returns a [`Schema`].
//! Every error is a [`Diagnostic`] with file, line, column and a caret rendering; all errors
//! found are reported at once as [`Diagnostics`].

#![warn(missing_docs)]

pub mod ast;
mod ast_impl;
mod check;
mod check_engines;
pub mod diag;
pub mod ir;
mod parser;

use std::path::{Path, PathBuf};

pub use ast_impl::{
    find_arg, int_type_width, pattern_captures, positional_arg, CODECS, DTYPES, ENGINES,
    ENTRY_PROPS, INT_TYPES, TENSOR_KEYS,
};
pub use diag::{Diagnostic, Diagnostics};

/// Parses one schema file. `path` is recorded in the AST and in diagnostics; `source` is
/// its text. Spans in the AST are byte offsets into `source`.
///
/// A syntax error stops parsing (one diagnostic); literal errors found while building the
/// tree (out-of-range numbers, bad `\u{...}` escapes) are all reported.
pub fn parse(path: &Path, source: &str) -> Result<ast::SchemaFile, Diagnostics> {
    parser::parse(path, source)
}

/// Runs the semantic checks over a set of parsed files, which may refer to each other's
/// formats (`use npy;`, `npy.File`). Returns every error found; an empty result means the
/// schema is valid.
pub fn check(files: &[ast::SchemaFile]) -> Diagnostics {
    check::check(files)
}

/// A parsed and checked schema: a set of `.fmt` files.
#[derive(Debug, Clone, PartialEq)]
pub struct Schema {
    /// The files, in the order given to [`load`].
    pub files: Vec<ast::SchemaFile>,
}

impl Schema {
    /// Checks already parsed files and wraps them.
    pub fn from_files(files: Vec<ast::SchemaFile>) -> Result<Schema, Diagnostics> {
        let d = check(&files);
        if d.is_empty() {
            Ok(Schema { files })
        } else {
            Err(d)
        }
    }

    /// Every format with its file, in file order, then declaration order.
    pub fn formats(&self) -> impl Iterator<Item = (&ast::SchemaFile, &ast::Format)> {
        self.files
            .iter()
            .flat_map(|f| f.formats.iter().map(move |fmt| (f, fmt)))
    }

    /// The format with identifier `name` (not its public name), with its file.
    pub fn format(&self, name: &str) -> Option<(&ast::SchemaFile, &ast::Format)> {
        self.formats().find(|(_, f)| f.name.name == name)
    }

    /// The resolved, typed IR of the schema (see [`ir`]). Never panics; for a schema
    /// built by [`load`] or [`Schema::from_files`] (checked), the IR is complete.
    pub fn ir(&self) -> ir::Ir {
        ir::build(self)
    }

    /// The format whose public name (see [`ast::Format::public_name`]) is `name`.
    pub fn format_by_public_name(&self, name: &str) -> Option<(&ast::SchemaFile, &ast::Format)> {
        self.formats().find(|(_, f)| f.public_name() == name)
    }
}

/// Reads, parses and checks schema files together. Reports the errors of every file at
/// once: I/O errors and syntax errors of each file, then the semantic errors of the files
/// that parsed (when some file failed, references to unknown formats are not reported,
/// since the failed file may define them).
pub fn load(paths: &[PathBuf]) -> Result<Schema, Diagnostics> {
    let mut errors = Vec::new();
    let mut files = Vec::new();
    for p in paths {
        match std::fs::read_to_string(p) {
            Ok(src) => match parse(p, &src) {
                Ok(f) => files.push(f),
                Err(d) => errors.extend(d.0),
            },
            Err(e) => errors.push(Diagnostic {
                path: p.clone(),
                span: ast::Span::default(),
                line: 1,
                column: 1,
                message: format!("cannot read the schema file: {e}"),
                help: None,
            }),
        }
    }
    if errors.is_empty() {
        return Schema::from_files(files);
    }
    // Some files failed: still check the others, without reporting names of formats that
    // may be defined in the failed files.
    errors.extend(check::check_with(&files, true).0);
    Err(Diagnostics(errors))
}
