//! PyTorch zip checkpoints: `tensorfmt inspect --json --sha256` on every zip fixture gives
//! exactly what torch computed (`tests/fixtures/pytorch/expected/*.json`), and damaged
//! archives give clear errors.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use tensorfmt::runtime::limits::Limits;
use tensorfmt::runtime::source::Source;
use tensorfmt::runtime::zip::{self, ZipIndex, ZipWriter};
use tensorfmt::Compression;
use tensorfmt_tests::{cli, fixtures, inspect_json, json};

/// The zip-format fixtures (legacy and TorchScript files come later).
const ZIP_FIXTURES: &[&str] = &[
    "all_dtypes.pt",
    "scalars_and_empty.pt",
    "noncontiguous.pt",
    "shared_storage.pt",
    "parameters.pt",
    "module_state_dict.pt",
    "checkpoint_adam.pt",
    "multi.dot.name.pth",
    "file_object.pt",
    "prefix_mismatch.pt",
];

fn dir() -> PathBuf {
    fixtures().join("pytorch")
}

#[test]
fn every_zip_fixture_matches_torch() {
    for f in ZIP_FIXTURES {
        let expected = json(
            &std::fs::read_to_string(dir().join("expected").join(format!("{f}.json"))).unwrap(),
        );
        let got = inspect_json(&dir().join(f));
        assert_eq!(
            got, expected,
            "inspect of {f} differs from torch's description"
        );
    }
}

#[test]
fn zip_fixtures_verify_clean() {
    for f in ZIP_FIXTURES {
        let p = dir().join(f);
        let (code, out) = cli(&["verify", p.to_str().unwrap()]);
        assert_eq!(code, ExitCode::SUCCESS, "verify {f}: {out}");
    }
}

/// The members of a fixture, as (name, content).
fn members(f: &str) -> Vec<(String, Vec<u8>)> {
    let src = Source::open(dir().join(f)).unwrap();
    let limits = Limits::default();
    let index = ZipIndex::read(src.data(), &limits).unwrap();
    index
        .members
        .iter()
        .map(|m| {
            (
                m.name.clone(),
                zip::read_member(src.data(), m, &limits).unwrap(),
            )
        })
        .collect()
}

/// An archive of `members` at `path`.
fn write_zip(path: &Path, members: &[(String, Vec<u8>)]) {
    let mut w = ZipWriter::new(std::fs::File::create(path).unwrap());
    for (name, content) in members {
        w.start_member(name, Compression::Stored, 64).unwrap();
        w.write_all(content).unwrap();
    }
    w.finish().unwrap();
}

/// `inspect` of `file_object.pt` with its members changed by `edit`: the error text.
fn inspect_edited(edit: impl FnOnce(&mut Vec<(String, Vec<u8>)>)) -> String {
    let mut m = members("file_object.pt");
    edit(&mut m);
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("edited.pt");
    write_zip(&p, &m);
    open_err(&p)
}

/// The error of opening `path` and hashing every tensor.
fn open_err(path: &Path) -> String {
    let result = (|| {
        let f = tensorfmt::TensorFile::open(path)?;
        let mut sink = tensorfmt::runtime::hash::HashSink::new();
        f.read_all(&mut sink)?;
        Ok::<_, tensorfmt::Error>(f.tensors().len())
    })();
    let out = match result {
        Ok(n) => panic!("{} was accepted ({n} tensors)", path.display()),
        Err(e) => e.to_string(),
    };
    let name = path.file_name().unwrap().to_str().unwrap();
    assert!(out.contains(name), "the error names the file: {out}");
    out
}

#[test]
fn a_rewritten_archive_still_reads() {
    let m = members("file_object.pt");
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("copy.pt");
    write_zip(&p, &m);
    let expected =
        json(&std::fs::read_to_string(dir().join("expected/file_object.pt.json")).unwrap());
    assert_eq!(inspect_json(&p), expected);
}

#[test]
fn a_disallowed_global_is_refused() {
    let out = inspect_edited(|m| {
        let pkl = m.iter_mut().find(|(n, _)| n == "archive/data.pkl").unwrap();
        // posix.system('ls')
        pkl.1 = b"\x80\x02cposix\nsystem\nq\x00X\x02\x00\x00\x00lsq\x01\x85q\x02Rq\x03.".to_vec();
    });
    assert!(out.contains("posix"), "{out}");
    assert!(out.contains("system"), "{out}");
    assert!(out.contains("archive/data.pkl"), "{out}");
}

#[test]
fn a_missing_storage_member_is_an_error() {
    let out = inspect_edited(|m| m.retain(|(n, _)| n != "archive/data/0"));
    assert!(out.contains("archive/data/0"), "{out}");
    assert!(out.contains("missing"), "{out}");
    assert!(out.contains("'x'"), "names the tensor: {out}");
}

#[test]
fn a_short_storage_member_is_an_error() {
    let out = inspect_edited(|m| {
        let s = m.iter_mut().find(|(n, _)| n == "archive/data/0").unwrap();
        s.1.truncate(s.1.len() - 4);
    });
    assert!(out.contains("archive/data/0"), "{out}");
    assert!(out.contains("'x'"), "{out}");
    assert!(out.contains("size mismatch"), "{out}");
}

#[test]
fn a_missing_pickle_or_bad_byteorder_is_an_error() {
    let mut m = members("file_object.pt");
    m.retain(|(n, _)| n != "archive/data.pkl");
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("nopkl.pt");
    write_zip(&p, &m);
    open_err(&p);
    let out = inspect_edited(|m| {
        m.iter_mut()
            .find(|(n, _)| n == "archive/byteorder")
            .unwrap()
            .1 = b"middle".to_vec();
    });
    assert!(out.contains("archive/byteorder"), "{out}");
}

#[test]
fn detection_tells_pytorch_from_npz() {
    // A pytorch archive renamed to .npz is still read as pytorch; an npz is not pytorch.
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("renamed.npz");
    std::fs::copy(dir().join("file_object.pt"), &p).unwrap();
    let got = inspect_json(&p);
    assert_eq!(got["format"], "pytorch", "{got}");
    for e in std::fs::read_dir(fixtures().join("npz")).unwrap() {
        let p = e.unwrap().path();
        let q = tmp.path().join("as.pt");
        std::fs::copy(&p, &q).unwrap();
        let (code, out) = cli(&["inspect", "--json", q.to_str().unwrap()]);
        if code == ExitCode::SUCCESS {
            assert_eq!(json(&out)["format"], "npz", "{}: {out}", p.display());
        }
    }
}

#[test]
fn pytorch_converts_to_npz() {
    let tmp = tempfile::tempdir().unwrap();
    for f in ["file_object.pt", "shared_storage.pt"] {
        let out = tmp.path().join(format!("{f}.npz"));
        let (code, text) = cli(&[
            "convert",
            dir().join(f).to_str().unwrap(),
            out.to_str().unwrap(),
        ]);
        assert_eq!(code, ExitCode::SUCCESS, "convert {f}: {text}");
        let mut expected = json(
            &std::fs::read_to_string(dir().join("expected").join(format!("{f}.json"))).unwrap(),
        );
        expected["format"] = "npz".into();
        assert_eq!(inspect_json(&out), expected, "{f} as npz");
        // NumPy reads the same elements.
        let described = json(&tensorfmt_tests::tfcheck(&[
            "describe",
            out.to_str().unwrap(),
        ]));
        assert_eq!(described, expected, "NumPy's view of {f} as npz");
    }
}
