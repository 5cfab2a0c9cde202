//! `#[derive(TensorFormat)]`: generates a tensor format from a `.fmt` schema;
//! `#[derive(StateDict)]`: loads and saves a struct of tensors from and to any format.
//!
//! ```ignore
//! use tensorfmt_derive::TensorFormat;
//!
//! /// My format.
//! #[derive(TensorFormat)]
//! #[tensorfmt(schema = "fmt/myformat.fmt")] // relative to CARGO_MANIFEST_DIR
//! pub struct MyFormat;
//! // → `pub mod my_format { ... }` and `MyFormat::DESC`.
//! ```
//!
//! This crate has no logic of its own: it forwards to
//! [`tensorfmt_codegen::derive::expand`] and [`tensorfmt_codegen::state_derive::expand`].

use proc_macro::TokenStream;

/// Generates the format described by `#[tensorfmt(schema = "path.fmt")]` (resolved
/// against `CARGO_MANIFEST_DIR`): a module named after the type in snake case holding the
/// format's readers and writers, and an associated `DESC` for the registry.
#[proc_macro_derive(TensorFormat, attributes(tensorfmt))]
pub fn derive_tensor_format(input: TokenStream) -> TokenStream {
    tensorfmt_codegen::derive::expand(input.into()).into()
}

/// Implements `tensorfmt::state::StateDict` for a struct: each field an entry under its
/// name (`#[state(rename = "..")]`, `#[state(flatten)]`, `#[state(skip)]`; on the
/// struct `#[state(prefix = "..")]`).
#[proc_macro_derive(StateDict, attributes(state))]
pub fn derive_state_dict(input: TokenStream) -> TokenStream {
    tensorfmt_codegen::state_derive::expand(input.into()).into()
}
