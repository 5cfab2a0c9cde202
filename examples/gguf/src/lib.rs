//! GGUF for tensorfmt: the format described in `fmt/gguf.fmt`, compiled by the build
//! script, and a [`registry`] that holds it beside the built-in formats, so that
//! `TensorFile`, `Saver`, `convert` and the command line read and write `.gguf` files.

/// The code generated from `fmt/gguf.fmt` (module `gguf`, and `REGISTRY`).
pub mod generated {
    include!(concat!(env!("OUT_DIR"), "/formats.rs"));
}

/// The built-in formats, then GGUF.
pub fn registry() -> tensorfmt::Registry {
    tensorfmt::Registry::builtin().with_all(generated::REGISTRY)
}
