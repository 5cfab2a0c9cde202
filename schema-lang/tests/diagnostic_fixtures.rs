//! The catalogue of diagnostics: `tests/diagnostics/` holds, for every error the parser, the
//! checker and the IR lowering can report, a small schema that triggers it and the text
//! users are shown for it.
//!
//! Each fixture is a schema `NAME.fmt` (or a folder `NAME/` of `.fmt` files loaded together,
//! in name order, for errors that need several files) with its expected output `NAME.txt`
//! beside it. The test loads every fixture with [`tensorfmt_schema::load`], as the code
//! generator does, renders the errors as the generator prints them (file, line and column,
//! the source line with a caret, the help line, the final count) and compares with the
//! `.txt`. Files are named relative to the crate (`tests/diagnostics/NAME.fmt`), so the
//! output does not depend on where the repository is checked out.
//!
//! A fixture whose name starts with `ok_` is a valid schema: its `.txt` is empty, and it
//! must check clean and lower to the IR. Every other fixture must produce at least one
//! error, so a rule whose message disappears or whose schema stops triggering it is caught.
//!
//! # Adding a fixture
//!
//! 1. Write `tests/diagnostics/RULE.fmt`, named after the rule (`unknown_dtype.fmt`): a
//!    minimal schema, valid except for the one error, so that it reports exactly that
//!    error (a folder `tests/diagnostics/RULE/` of several files for errors across files).
//! 2. Run `UPDATE_EXPECT=1 cargo test -p tensorfmt-schema --test diagnostic_fixtures`: it
//!    writes `RULE.txt` (and rewrites every other `.txt` from the current output).
//! 3. Read `RULE.txt`: one error, the intended one, with its caret on the right text.
//!    Commit both files.
//!
//! When a message changes on purpose, step 2 refreshes the expected texts; the diff of
//! the `.txt` files shows the change as users will see it.

use std::path::{Path, PathBuf};

use tensorfmt_schema::{load, parse, Schema};

/// The fixtures folder, relative to the crate root (the directory tests run in).
const DIR: &str = "tests/diagnostics";

/// One fixture: its name, its path (the `.fmt` file or the folder) and its schema files,
/// relative to the crate root.
struct Fixture {
    name: String,
    path: PathBuf,
    files: Vec<PathBuf>,
}

impl Fixture {
    fn expected(&self) -> PathBuf {
        Path::new(DIR).join(format!("{}.txt", self.name))
    }
}

/// Makes relative paths resolve from the crate root, as `cargo test` runs tests there.
fn enter_crate_root() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let here = std::env::current_dir()
        .ok()
        .and_then(|d| d.canonicalize().ok());
    if here.as_deref() != root.canonicalize().ok().as_deref() {
        std::env::set_current_dir(root).expect("enter the crate root");
    }
}

/// Every fixture, in name order.
fn fixtures() -> Vec<Fixture> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(DIR).expect("read the fixtures folder") {
        let path = e.expect("a fixtures folder entry").path();
        let rel = Path::new(DIR).join(path.file_name().expect("a file name"));
        let stem = path
            .file_stem()
            .and_then(|s| s.to_str())
            .expect("a UTF-8 name")
            .to_string();
        if path.is_dir() {
            let mut files: Vec<PathBuf> = std::fs::read_dir(&path)
                .expect("read a fixture folder")
                .map(|e| rel.join(e.expect("a fixture file").file_name()))
                .filter(|p| p.extension().is_some_and(|x| x == "fmt"))
                .collect();
            files.sort();
            out.push(Fixture {
                name: stem,
                path: rel,
                files,
            });
        } else if path.extension().is_some_and(|x| x == "fmt") {
            out.push(Fixture {
                name: stem,
                path: rel.clone(),
                files: vec![rel],
            });
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// What users are shown for the fixture: the rendered errors, or nothing for a valid
/// schema. Also lowers every file that parses, checked or not, which must not panic.
fn output(fx: &Fixture) -> (String, usize) {
    for p in &fx.files {
        let src = std::fs::read_to_string(p).unwrap();
        if let Ok(file) = parse(p, &src) {
            let _ = Schema { files: vec![file] }.ir();
        }
    }
    match load(&fx.files) {
        Ok(schema) => {
            let _ = schema.ir();
            (String::new(), 0)
        }
        Err(d) => (format!("{d}\n"), d.len()),
    }
}

/// A line diff of `want` against `got`: `-` lines only in the expected text, `+` lines only
/// in the output.
fn diff(want: &str, got: &str) -> String {
    let a: Vec<&str> = want.lines().collect();
    let b: Vec<&str> = got.lines().collect();
    // Longest common subsequence, by suffix lengths.
    let mut lcs = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    let mut out = String::new();
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            out += &format!("  {}\n", a[i]);
            i += 1;
            j += 1;
        } else if i < a.len() && (j == b.len() || lcs[i + 1][j] >= lcs[i][j + 1]) {
            out += &format!("- {}\n", a[i]);
            i += 1;
        } else {
            out += &format!("+ {}\n", b[j]);
            j += 1;
        }
    }
    out
}

#[test]
fn every_fixture_renders_its_expected_diagnostics() {
    enter_crate_root();
    let update = std::env::var_os("UPDATE_EXPECT").is_some();
    let all = fixtures();
    assert!(!all.is_empty(), "no fixtures in {DIR}");
    let mut failures = Vec::new();
    for fx in &all {
        let (got, count) = output(fx);
        let shown = fx.path.display();
        if fx.name.starts_with("ok_") {
            if count != 0 {
                failures.push(format!(
                    "{shown}: an `ok_` fixture must check clean, but it reports:\n{got}"
                ));
            }
        } else if count == 0 {
            failures.push(format!(
                "{shown}: reports no error; a fixture must trigger its rule \
                 (name valid schemas `ok_*`)"
            ));
        }
        let path = fx.expected();
        if update {
            std::fs::write(&path, &got).unwrap();
            continue;
        }
        let want = std::fs::read_to_string(&path).unwrap_or_default();
        if want != got {
            failures.push(format!(
                "{}: the output differs from {} (- expected, + actual):\n{}",
                shown,
                path.display(),
                diff(&want, &got)
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} fixtures failed; if the new output is right, refresh the expected texts with \
         `UPDATE_EXPECT=1 cargo test -p tensorfmt-schema --test diagnostic_fixtures`\n\n{}",
        failures.len(),
        all.len(),
        failures.join("\n")
    );
}

#[test]
fn every_expected_text_has_its_fixture() {
    enter_crate_root();
    let names: Vec<String> = fixtures().into_iter().map(|f| f.name).collect();
    for e in std::fs::read_dir(DIR).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "txt") {
            let stem = p.file_stem().and_then(|s| s.to_str()).unwrap();
            assert!(
                names.iter().any(|n| n == stem),
                "{} has no fixture {stem}.fmt (or folder {stem}/): remove it",
                p.display()
            );
        }
    }
}

#[test]
fn valid_fixtures_exist() {
    enter_crate_root();
    let ok = fixtures()
        .into_iter()
        .filter(|f| f.name.starts_with("ok_"))
        .count();
    assert!(ok >= 2, "the catalogue has {ok} valid (`ok_*`) schemas");
}
