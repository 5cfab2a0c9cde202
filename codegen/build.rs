//! Embeds the built-in schemas (`formats/fmt/*.fmt`) into the generator, so that a user's
//! schema may `use` a built-in format (`use npy;`) wherever it is compiled: by a build
//! script through `tensorfmt_codegen::compile` or by `#[derive(TensorFormat)]`.
//!
//! Writes `$OUT_DIR/builtin_schemas.rs`: `&[(file name, text)]`, each text an
//! `include_str!` of the schema, so that editing one rebuilds the generator. Outside the
//! repository (no `formats/fmt`), the list is empty.

use std::path::Path;

fn main() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../formats/fmt");
    println!("cargo::rerun-if-changed={}", dir.display());
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "fmt"))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    let mut code = String::from("&[\n");
    for f in &files {
        let name = f.file_name().expect("a file name").to_string_lossy();
        let abs = f.canonicalize().expect("a schema path");
        code.push_str(&format!(
            "    ({name:?}, include_str!({:?})),\n",
            abs.display().to_string()
        ));
    }
    code.push_str("]\n");
    let out = Path::new(&std::env::var_os("OUT_DIR").expect("OUT_DIR")).join("builtin_schemas.rs");
    if std::fs::read_to_string(&out).ok().as_deref() != Some(code.as_str()) {
        std::fs::write(&out, code).expect("writing builtin_schemas.rs");
    }
}
