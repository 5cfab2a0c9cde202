//! The generator cannot refuse a checked schema: every schema of the checker's
//! diagnostics corpus (`schema-lang/tests/diagnostics`) that checks clean, every construct
//! fixture (`tests/constructs`) and the built-in schemas (`formats/fmt`) generate, and
//! the generated code parses. What an engine cannot mean is the checker's to reject, at
//! its span, with a help line; a schema it accepts is generated.

use std::path::{Path, PathBuf};

/// The repository root.
fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The `.fmt` files of `dir` in name order, and its folders of `.fmt` files (a schema of
/// several files each), as lists of files loaded together.
fn schemas_in(dir: &Path) -> Vec<Vec<PathBuf>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = e.unwrap().path();
        if path.is_dir() {
            let mut files: Vec<PathBuf> = std::fs::read_dir(&path)
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.extension().is_some_and(|x| x == "fmt"))
                .collect();
            files.sort();
            if !files.is_empty() {
                out.push(files);
            }
        } else if path.extension().is_some_and(|x| x == "fmt") {
            out.push(vec![path]);
        }
    }
    out.sort();
    out
}

/// Generates every schema of `sets` that checks clean; returns how many did, and the
/// refusals (the generator's diagnostics, rendered) of the others.
fn generate_clean(sets: &[Vec<PathBuf>]) -> (usize, Vec<String>) {
    let (mut clean, mut refused) = (0, Vec::new());
    for files in sets {
        let Ok(schema) = tensorfmt_schema::load(files) else {
            continue;
        };
        clean += 1;
        if let Err(d) = tensorfmt_codegen::generate_file(&schema) {
            refused.push(d.with_sources(&schema.files));
        }
    }
    (clean, refused)
}

#[test]
fn every_clean_schema_of_the_diagnostics_corpus_generates() {
    let sets = schemas_in(&root().join("schema-lang/tests/diagnostics"));
    let (clean, refused) = generate_clean(&sets);
    assert!(refused.is_empty(), "{}", refused.join("\n"));
    assert!(
        clean >= 4,
        "the `ok_` fixtures of the corpus check clean: {clean}"
    );
}

#[test]
fn every_construct_fixture_generates() {
    let sets = schemas_in(&root().join("codegen/tests/constructs"));
    let (clean, refused) = generate_clean(&sets);
    assert!(refused.is_empty(), "{}", refused.join("\n"));
    assert_eq!(clean, sets.len(), "every construct fixture checks clean");
}

#[test]
fn the_built_in_schemas_generate_together() {
    let dir = root().join("formats/fmt");
    let files: Vec<PathBuf> = schemas_in(&dir).into_iter().flatten().collect();
    let (clean, refused) = generate_clean(&[files]);
    assert!(refused.is_empty(), "{}", refused.join("\n"));
    assert_eq!(clean, 1, "the built-in schemas check clean together");
}
