//! Compiles the crate's build-script format (`fmt/tta.fmt`) into `$OUT_DIR/formats.rs`.

fn main() {
    if let Err(report) = tensorfmt_codegen::compile(&["fmt/tta.fmt"], "formats.rs") {
        eprintln!("{report}");
        std::process::exit(1);
    }
}
