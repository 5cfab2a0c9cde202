//! The generation context: the file whose constructs are generated, and errors at their
//! spans. Expressions are lowered from the IR by `crate::lower`.

use tensorfmt_schema::ast::*;

use crate::model::GenError;

/// Generation context: which file the constructs come from.
pub(crate) struct Cx {
    /// Index of the file.
    pub file: usize,
}

impl Cx {
    /// An error at `span`.
    pub fn err(&self, span: Span, message: impl Into<String>) -> GenError {
        GenError {
            file: self.file,
            span,
            message: message.into(),
        }
    }

    /// "`what` is not supported by the code generator" at `span`.
    pub fn unsupported(&self, span: Span, what: &str) -> GenError {
        self.err(
            span,
            format!("{what} is not supported by the code generator"),
        )
    }
}
