//! `tensorfmt inspect --json --sha256` on every committed fixture gives exactly what
//! NumPy computed when the fixture was generated (`tests/fixtures/expected/*.json`).

use tensorfmt_tests::{fixtures, inspect_json, json};

#[test]
fn every_fixture_matches_its_expected_json() {
    let expected_dir = fixtures().join("expected");
    let mut checked = 0;
    let mut entries: Vec<_> = std::fs::read_dir(&expected_dir)
        .expect("tests/fixtures/expected exists")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    entries.sort();
    for expected_path in entries {
        let stem = expected_path
            .file_stem()
            .unwrap()
            .to_str()
            .unwrap()
            .to_string();
        let fixture = fixtures().join(stem.replace("__", "/"));
        assert!(
            fixture.exists(),
            "expected file {} has no fixture {}",
            expected_path.display(),
            fixture.display()
        );
        let expected = json(&std::fs::read_to_string(&expected_path).unwrap());
        let got = inspect_json(&fixture);
        assert_eq!(
            got,
            expected,
            "inspect of {} differs from NumPy's description",
            fixture.display()
        );
        checked += 1;
    }
    assert!(checked >= 20, "only {checked} fixtures checked");
}

#[test]
fn fixtures_verify_clean() {
    for dir in ["npy", "npz"] {
        for e in std::fs::read_dir(fixtures().join(dir)).unwrap() {
            let p = e.unwrap().path();
            let (code, out) = tensorfmt_tests::cli(&["verify", p.to_str().unwrap()]);
            assert_eq!(
                code,
                std::process::ExitCode::SUCCESS,
                "verify {}: {out}",
                p.display()
            );
            assert!(out.starts_with("ok: "), "{out}");
        }
    }
}
