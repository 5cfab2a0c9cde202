//! What a user installs: `tensorfmt` with default features pulls no database library,
//! no CUDA and no object storage client, and its package holds its sources, schemas and
//! README, no fixtures.

use std::process::Command;

fn cargo(args: &[&str]) -> String {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(args)
        .current_dir(tensorfmt_tests::repo_root())
        .output()
        .expect("running cargo");
    assert!(
        out.status.success(),
        "cargo {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `cargo tree` of tensorfmt's normal dependencies with `features` (none: the default).
fn tree(features: Option<&str>) -> String {
    let mut args = vec![
        "tree",
        "-p",
        "tensorfmt",
        "-e",
        "normal",
        "--prefix",
        "none",
        "--offline",
    ];
    if let Some(f) = features {
        args.extend(["--features", f]);
    }
    cargo(&args)
}

#[test]
fn the_default_features_pull_no_database_device_or_network_crate() {
    let default = tree(None);
    assert!(default.contains("tensorfmt-runtime"), "{default}");
    for heavy in [
        "heed",
        "lmdb",
        "rusty-leveldb",
        "cudarc",
        "tensorfmt-cuda",
        "object_store",
        "tokio",
    ] {
        assert!(
            !default.lines().any(|l| l.starts_with(&format!("{heavy} "))),
            "{heavy} in the default tree:\n{default}"
        );
    }
    // And each comes with its feature.
    for (feature, crate_name) in [
        ("lmdb", "heed "),
        ("leveldb", "rusty-leveldb "),
        ("s3", "object_store "),
    ] {
        let with = tree(Some(feature));
        assert!(
            with.lines().any(|l| l.starts_with(crate_name)),
            "{feature}: {with}"
        );
    }
}

#[test]
fn the_package_lists_what_a_user_needs() {
    let list = cargo(&[
        "package",
        "--list",
        "-p",
        "tensorfmt",
        "--allow-dirty",
        "--offline",
    ]);
    let files: Vec<&str> = list.lines().collect();
    for needed in [
        "Cargo.toml",
        "README.md",
        "build.rs",
        "src/lib.rs",
        "src/state.rs",
        "fmt/pytorch.fmt",
    ] {
        assert!(files.contains(&needed), "{needed} missing from:\n{list}");
    }
    let root = tensorfmt_tests::repo_root().join("formats");
    for f in &files {
        assert!(!f.contains("fixtures"), "a fixture in the package: {f}");
        if let Ok(meta) = std::fs::metadata(root.join(f)) {
            assert!(meta.len() < 256 << 10, "{f} is {} bytes", meta.len());
        }
    }
}
