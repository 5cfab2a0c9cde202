//! Loading a user's schema files together with the built-in formats they `use`.
//!
//! The built-in schemas (`formats/fmt/*.fmt`) are embedded in the generator by its build
//! script. A user's file that says `use npy;` without loading a file defining `npy` gets
//! the built-in `npy.fmt` loaded before it (and, transitively, what that one uses), so that
//! [`crate::compile`] and `#[derive(TensorFormat)]` accept schemas built on built-in
//! formats. The built-in formats are generated beside the user's, as the modules the
//! user's code refers to (`super::npy::File`), and left out of the user's `REGISTRY`.

use std::path::{Path, PathBuf};

use tensorfmt_schema::{ast::SchemaFile, Diagnostics, Schema};

/// Every built-in schema: its file name and text.
const BUILTIN: &[(&str, &str)] = include!(concat!(env!("OUT_DIR"), "/builtin_schemas.rs"));

/// A checked schema of the user's files after the built-in files they use.
pub(crate) struct Loaded {
    /// The built-in files first (as `<tensorfmt>/npy.fmt`), then the user's, in the order given.
    pub schema: Schema,
    /// How many of [`Loaded::schema`]'s files are built-in ones loaded for a `use`.
    pub builtin_files: usize,
}

/// Reads, parses and checks `paths` as [`tensorfmt_schema::load`] does, after loading the
/// built-in schemas that define the formats their `use`s name and no given file defines.
/// Errors are rendered with file, line, column and caret.
pub(crate) fn load_with_builtins(paths: &[PathBuf]) -> Result<Loaded, String> {
    let mut user = Vec::new();
    for p in paths {
        let parsed = std::fs::read_to_string(p)
            .ok()
            .and_then(|text| tensorfmt_schema::parse(p, &text).ok());
        match parsed {
            Some(f) => user.push(f),
            // A file that cannot be read or parsed: the loader's own report, every file's
            // errors at once.
            None => return Err(report(tensorfmt_schema::load(paths).err())),
        }
    }
    let mut files = builtins_used_by(&user);
    let builtin_files = files.len();
    files.extend(user);
    // Kept for rendering: the check takes the files.
    let sources = files.clone();
    match Schema::from_files(files) {
        Ok(schema) => Ok(Loaded {
            schema,
            builtin_files,
        }),
        Err(d) => Err(d.with_sources(&sources)),
    }
}

/// The loader's report, or a note when it found nothing to report.
fn report(d: Option<Diagnostics>) -> String {
    d.map_or_else(
        || "the schema could not be loaded".to_string(),
        |d| d.to_string(),
    )
}

/// The path a built-in schema is loaded under: `<tensorfmt>/npy.fmt`.
fn builtin_path(name: &str) -> PathBuf {
    Path::new("<tensorfmt>").join(name)
}

/// The built-in files defining the formats `files` use and do not define, transitively,
/// each after the built-in files it uses itself.
fn builtins_used_by(files: &[SchemaFile]) -> Vec<SchemaFile> {
    let builtin: Vec<SchemaFile> = BUILTIN
        .iter()
        .filter_map(|(name, text)| tensorfmt_schema::parse(&builtin_path(name), text).ok())
        .collect();
    let mut loaded: Vec<SchemaFile> = Vec::new();
    for f in files {
        add_uses(f, files, &builtin, &mut loaded);
    }
    loaded
}

/// Adds to `loaded` the built-in files that define what `file` uses, unless `given` or
/// `loaded` defines it already; what they use first.
fn add_uses(
    file: &SchemaFile,
    given: &[SchemaFile],
    builtin: &[SchemaFile],
    loaded: &mut Vec<SchemaFile>,
) {
    let defines = |fs: &[SchemaFile], name: &str| {
        fs.iter()
            .any(|f| f.formats.iter().any(|fmt| fmt.name.name == name))
    };
    for u in &file.uses {
        if defines(given, &u.name) || defines(loaded, &u.name) {
            continue;
        }
        if let Some(b) = builtin
            .iter()
            .find(|b| b.formats.iter().any(|fmt| fmt.name.name == u.name))
        {
            add_uses(b, given, builtin, loaded);
            if !loaded.iter().any(|l| l.path == b.path) {
                loaded.push(b.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_built_in_schema_is_embedded() {
        let names: Vec<&str> = BUILTIN.iter().map(|(n, _)| *n).collect();
        assert!(names.contains(&"npy.fmt"), "{names:?}");
        assert!(names.contains(&"npz.fmt"), "{names:?}");
    }

    #[test]
    fn uses_of_built_in_formats_load_them_transitively() {
        let user = tensorfmt_schema::parse(
            Path::new("user.fmt"),
            "use npz;\nformat x { engine file; }\n",
        )
        .unwrap();
        let got: Vec<String> = builtins_used_by(&[user])
            .iter()
            .map(|f| f.path.display().to_string())
            .collect();
        let want: Vec<String> = ["npy.fmt", "npz.fmt"]
            .iter()
            .map(|n| builtin_path(n).display().to_string())
            .collect();
        assert_eq!(got, want);
    }
}
