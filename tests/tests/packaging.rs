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

#[test]
fn the_default_features_pull_no_database_device_or_network_crate() {
    let tree = cargo(&[
        "tree",
        "-p",
        "tensorfmt",
        "-e",
        "normal",
        "--prefix",
        "none",
        "--offline",
    ]);
    assert!(tree.contains("tensorfmt-runtime"), "{tree}");
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
            !tree.lines().any(|l| l.starts_with(&format!("{heavy} "))),
            "{heavy} in the default tree:\n{tree}"
        );
    }
    // And each comes with its feature.
    for (feature, crate_name) in [
        ("lmdb", "heed "),
        ("leveldb", "rusty-leveldb "),
        ("s3", "object_store "),
    ] {
        let tree = cargo(&[
            "tree",
            "-p",
            "tensorfmt",
            "-e",
            "normal",
            "--prefix",
            "none",
            "--offline",
            "--features",
            feature,
        ]);
        assert!(
            tree.lines().any(|l| l.starts_with(crate_name)),
            "{feature}: {tree}"
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
