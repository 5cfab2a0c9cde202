//! Tensor formats of this crate's own, beside the built-in ones: `tta` (a tiny tensor
//! archive, compiled from `fmt/tta.fmt` by the build script) and `npyzip` (a labelled npy
//! file built on the built-in `npy`, generated from `fmt/npyzip.fmt` by the derive).
//! [`registry`] holds them with the built-in formats.

/// The formats the build script generates (`tensorfmt_codegen::compile`).
pub mod generated {
    include!(concat!(env!("OUT_DIR"), "/formats.rs"));
}

/// A zip archive of npy files in a folder (`fmt/npyzip.fmt`).
#[derive(tensorfmt::TensorFormat)]
#[tensorfmt(schema = "fmt/npyzip.fmt")]
pub struct Npyzip;

/// The built-in formats, then this crate's.
pub fn registry() -> tensorfmt::Registry {
    tensorfmt::Registry::builtin()
        .with_all(generated::REGISTRY)
        .with(&Npyzip::DESC)
}
