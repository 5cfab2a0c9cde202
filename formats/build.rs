//! Compiles the built-in `.fmt` schemas into Rust readers and writers.

fn main() {
    let schemas = [
        "fmt/npy.fmt",
        "fmt/npz.fmt",
        "fmt/pytorch.fmt",
        "fmt/pytorch_legacy.fmt",
        "fmt/torchscript.fmt",
        "fmt/onnx.fmt",
        "fmt/caffe2.fmt",
        "fmt/minidb.fmt",
    ];
    if let Err(report) = tensorfmt_codegen::compile(&schemas, "formats.rs") {
        eprintln!("{report}");
        std::process::exit(1);
    }
}
