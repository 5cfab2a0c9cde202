use crate::ast::SchemaFile;
use crate::diag::Diagnostics;
pub(crate) fn check(_files: &[SchemaFile]) -> Diagnostics {
    Diagnostics::default()
}
