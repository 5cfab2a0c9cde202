//! Construct-level fixtures: each `constructs/NAME.fmt` is a small format built around one
//! construct of the language, and `constructs/NAME.rs` beside it is the Rust generated for
//! it. `UPDATE_EXPECT=1 cargo test -p tensorfmt-codegen --test constructs` rewrites the
//! expected files; review their diff as a change of the generated code. The same schemas are
//! compiled by `#[derive(TensorFormat)]` and exercised on bytes in
//! `tests/tests/constructs.rs`.

use std::path::{Path, PathBuf};

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/constructs")
}

/// The code generated for `fmt`, or the diagnostics, rendered.
fn generate(fmt: &Path) -> Result<String, String> {
    let schema = tensorfmt_schema::load(&[fmt.to_path_buf()]).map_err(|d| d.to_string())?;
    tensorfmt_codegen::generate_file(&schema).map_err(|d| d.with_sources(&schema.files))
}

#[test]
fn every_construct_generates_its_expected_code() {
    let update = std::env::var_os("UPDATE_EXPECT").is_some();
    let mut fmts: Vec<PathBuf> = std::fs::read_dir(dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "fmt"))
        .collect();
    fmts.sort();
    let mut stale = Vec::new();
    let mut failed = Vec::new();
    for fmt in &fmts {
        let lines = std::fs::read_to_string(fmt).unwrap().lines().count();
        assert!(
            (10..=80).contains(&lines),
            "{}: a construct fixture has 10 to 80 lines, not {lines}",
            fmt.display()
        );
        let code = match generate(fmt) {
            Ok(code) => code,
            Err(e) => {
                failed.push(format!("{}:\n{e}", fmt.display()));
                continue;
            }
        };
        let expected = fmt.with_extension("rs");
        if update {
            if std::fs::read_to_string(&expected).ok().as_deref() != Some(code.as_str()) {
                std::fs::write(&expected, &code).unwrap();
            }
        } else if std::fs::read_to_string(&expected).ok().as_deref() != Some(code.as_str()) {
            stale.push(expected.display().to_string());
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
    assert!(
        fmts.len() >= 10,
        "the fixtures are missing: {}",
        dir().display()
    );
    assert!(
        stale.is_empty(),
        "generated code differs from (or is missing in): {stale:#?}\n\
         rerun with UPDATE_EXPECT=1 and review the diff"
    );
}
