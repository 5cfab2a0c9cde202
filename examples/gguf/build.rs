//! Compiles `fmt/gguf.fmt` into `$OUT_DIR/formats.rs`.

fn main() {
    if let Err(report) = tensorfmt_codegen::compile(&["fmt/gguf.fmt"], "formats.rs") {
        eprintln!("{report}");
        std::process::exit(1);
    }
}
