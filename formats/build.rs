//! Compiles the built-in `.fmt` schemas of the enabled format features into Rust readers
//! and writers.

/// Each schema with the feature that builds it.
const SCHEMAS: &[(&str, &str)] = &[
    ("fmt/npy.fmt", "NPY"),
    ("fmt/npz.fmt", "NPZ"),
    ("fmt/safetensors.fmt", "SAFETENSORS"),
    ("fmt/pytorch.fmt", "PYTORCH"),
    ("fmt/pytorch_legacy.fmt", "PYTORCH"),
    ("fmt/torchscript.fmt", "PYTORCH"),
    ("fmt/onnx.fmt", "ONNX"),
    ("fmt/caffe2.fmt", "CAFFE2"),
    ("fmt/minidb.fmt", "CAFFE2"),
    ("fmt/pickle.fmt", "PICKLE"),
];

fn main() {
    let on = |feature: &str| std::env::var_os(format!("CARGO_FEATURE_{feature}")).is_some();
    let schemas: Vec<&str> = SCHEMAS
        .iter()
        .filter(|(_, feature)| on(feature))
        .map(|(path, _)| *path)
        .collect();
    // `zip_formats`: some enabled format is a zip archive.
    println!("cargo::rustc-check-cfg=cfg(zip_formats)");
    if on("NPZ") || on("PYTORCH") {
        println!("cargo::rustc-cfg=zip_formats");
    }
    // `object_storage`: some object store backend is enabled (`tensorfmt::object`).
    println!("cargo::rustc-check-cfg=cfg(object_storage)");
    if on("S3") || on("GCS") || on("AZURE") || on("HTTP") {
        println!("cargo::rustc-cfg=object_storage");
    }
    // This crate depends on the runtime crate itself; its users reach the runtime through
    // its re-export (`tensorfmt::runtime::gen`), the compiler's default.
    let compiler = tensorfmt_codegen::Compiler::new().runtime("::tensorfmt_runtime::gen");
    if let Err(report) = compiler.compile(&schemas, "formats.rs") {
        eprintln!("{report}");
        std::process::exit(1);
    }
}
