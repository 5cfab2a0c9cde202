//! Compiles every construct fixture of the code generator (`codegen/tests/constructs/*.fmt`)
//! into `$OUT_DIR/constructs/<name>.rs`, as a user's build script would, for
//! `tests/constructs.rs` to exercise on bytes.

use std::path::Path;

fn main() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../codegen/tests/constructs");
    println!("cargo:rerun-if-changed={}", dir.display());
    let out = Path::new(&std::env::var_os("OUT_DIR").expect("OUT_DIR")).join("constructs");
    std::fs::create_dir_all(&out).expect("creating $OUT_DIR/constructs");
    let mut fmts: Vec<_> = std::fs::read_dir(&dir)
        .expect("codegen/tests/constructs")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "fmt"))
        .collect();
    fmts.sort();
    for fmt in fmts {
        let stem = fmt.file_stem().expect("a file name").to_string_lossy();
        let name = format!("constructs/{stem}.rs");
        if let Err(report) = tensorfmt_codegen::compile(&[&fmt], &name) {
            eprintln!("{report}");
            std::process::exit(1);
        }
    }
}
