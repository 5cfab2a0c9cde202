//! Crate under construction.
