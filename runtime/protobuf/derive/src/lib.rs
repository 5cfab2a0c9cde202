//! `#[derive(View)]`: the reader of a protobuf message view, from attributes on a plain
//! struct (re-exported as `tensorfmt_protobuf::View`, which generated code names
//! `rt::protobuf::View`).
//!
//! A view is a message read in place: a struct with the message's bytes (`#[view(span)]`,
//! a `Span`) and one field per declared field it holds, each attributed with its number
//! and how its values lie on the wire. The derive writes the `View` impl: `empty` (the
//! view of a message with no field set) and `field`, one `match` arm per field that
//! decodes the value with `Field`'s typed accessor and stores it. Nothing else: the walk
//! over a message's fields, depth checks and errors are the runtime's (`read`).
//!
//! ```ignore
//! // (run as a doctest of `tensorfmt_protobuf::View`)
//! use tensorfmt_protobuf::{read, Span, View};
//! use tensorfmt_core::Limits;
//!
//! /// `message Pair { optional string key = 1; repeated bytes values = 2; }`
//! #[derive(Debug, Default, View)]
//! #[view(name = "Pair", crate = "tensorfmt_protobuf")]
//! struct Pair<'a> {
//!     #[view(span)]
//!     span: Span<'a>,
//!     #[view(1, string)]
//!     key: Option<&'a str>,
//!     #[view(2, bytes, repeated)]
//!     values: Vec<(&'a [u8], u64)>,
//! }
//!
//! let bytes = [0x0a, 0x01, b'k', 0x12, 0x02, 7, 8];
//! let pair: Pair<'_> = read(&bytes, 0, 0, &Limits::default()).unwrap();
//! assert_eq!(pair.key, Some("k"));
//! assert_eq!(pair.values, [(&[7u8, 8][..], 5)]);
//! ```
//!
//! Attributes:
//! - on the struct: `#[view(name = "M")]`, the message's name (for errors; default: the
//!   struct's), and `crate = "path"`, the path of the runtime's protobuf module
//!   (default `::tensorfmt_runtime::gen::protobuf`, which a crate depending only on
//!   `tensorfmt-runtime` reaches);
//! - on each field: `#[view(span)]` for the message's bytes, or `#[view(N, kind)]` with
//!   the field number `N` and one of `varint`, `bool`, `zigzag`, `fixed32`, `sfixed32`,
//!   `fixed64`, `float`, `double`, `string`, `bytes`, `message`, then `repeated` (the
//!   struct field is a `Vec` the values are pushed to) or `boxed` (an `Option<Box<_>>`,
//!   for a message that holds itself); otherwise the struct field is an `Option`, a
//!   later occurrence replacing an earlier one.
//!
//! The struct must implement `Default` (`empty` fills the fields with their defaults).

use proc_macro::TokenStream;

mod expand;

/// Derives `View` for a message view struct (see the crate documentation for the
/// attributes).
#[proc_macro_derive(View, attributes(view))]
pub fn derive_view(input: TokenStream) -> TokenStream {
    let input = syn::parse_macro_input!(input as syn::DeriveInput);
    expand::view(&input)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}
