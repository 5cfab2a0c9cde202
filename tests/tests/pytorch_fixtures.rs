//! PyTorch zip checkpoints and TorchScript archives: `tensorfmt inspect --json --sha256` on
//! every zip fixture gives exactly what torch computed
//! (`tests/fixtures/pytorch/expected/*.json`), and damaged archives give clear errors.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use tensorfmt::runtime::limits::Limits;
use tensorfmt::runtime::source::Source;
use tensorfmt::runtime::zip::{self, ZipIndex, ZipWriter};
use tensorfmt::Compression;
use tensorfmt_tests::{cli, fixtures, inspect_json, json, tensors_by_name};

/// The zip-format fixtures (legacy.pt has its own tests below).
const ZIP_FIXTURES: &[&str] = &[
    "torchscript.pt",
    "torchscript_attrs.pt",
    "torchscript_frozen.pt",
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
    "numpy_values.pt",
    "protocol3.pt",
    "protocol4.pt",
    "protocol5.pt",
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
fn numpy_scalars_and_random_state_are_values() {
    let p = dir().join("numpy_values.pt");
    let (code, text) = cli(&["inspect", "--values", p.to_str().unwrap()]);
    assert_eq!(code, ExitCode::SUCCESS, "{text}");
    for line in [
        "  rng_state.1         u32       [624]                    2.4 KiB\n",
        "  rng_state.0 = 'MT19937'\n",
        "  lr = 0.1\n",
        "  step = 100\n",
        "  flag = True\n",
        "  best = 0.25\n",
    ] {
        assert!(text.contains(line), "{line:?} not in:\n{text}");
    }
    let (code, text) = cli(&["inspect", "--json", "--values", p.to_str().unwrap()]);
    assert_eq!(code, ExitCode::SUCCESS, "{text}");
    let v = json(&text);
    let value = |name: &str| {
        v["values"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["name"] == name)
            .unwrap_or_else(|| panic!("no value {name} in {text}"))["value"]
            .clone()
    };
    assert_eq!(value("lr"), serde_json::json!(0.1));
    assert_eq!(value("step"), serde_json::json!(100));
    assert_eq!(value("flag"), serde_json::json!(true));
    assert_eq!(value("rng_state.2"), serde_json::json!(6));
}

#[test]
fn numpy_arrays_convert_with_the_torch_tensors() {
    let out = tempfile::tempdir().unwrap();
    let dst = out.path().join("np.safetensors");
    let src = dir().join("numpy_values.pt");
    let (code, text) = cli(&["convert", src.to_str().unwrap(), dst.to_str().unwrap()]);
    assert_eq!(code, ExitCode::SUCCESS, "{text}");
    let expected =
        json(&std::fs::read_to_string(dir().join("expected/numpy_values.pt.json")).unwrap());
    assert_eq!(
        tensors_by_name(&inspect_json(&dst)),
        tensors_by_name(&expected)
    );
}

#[test]
fn zip_fixtures_verify_clean() {
    for f in ZIP_FIXTURES {
        let p = dir().join(f);
        let (code, out) = cli(&["verify", p.to_str().unwrap()]);
        assert_eq!(code, ExitCode::SUCCESS, "verify {f}: {out}");
    }
}

#[test]
fn verify_checks_members_no_tensor_uses() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(self::dir().join("all_dtypes.pt")).unwrap();
    let id = "all_dtypes/.data/serialization_id";
    let src = Source::from_bytes(bytes.clone());
    let m = ZipIndex::read(src.data(), &Limits::default())
        .unwrap()
        .find(id)
        .unwrap()
        .clone();
    let at = m.data_offset(src.data()).unwrap() as usize;
    let mut damaged = bytes;
    damaged[at] ^= 0x01;
    let p = dir.path().join("damaged_id.pt");
    std::fs::write(&p, &damaged).unwrap();
    // Every tensor still reads and hashes: the damage is in a record no tensor uses.
    let file = tensorfmt::TensorFile::open(&p).unwrap();
    file.read_all(&mut tensorfmt::runtime::hash::HashSink::new())
        .unwrap();
    let e = file.verify_container().unwrap_err().to_string();
    assert!(
        e.contains("damaged_id.pt") && e.contains(id) && e.contains("checksum mismatch"),
        "{e}"
    );
    let (code, out) = cli(&["verify", p.to_str().unwrap()]);
    assert_ne!(code, ExitCode::SUCCESS, "{out}");
    let (code, out) = cli(&[
        "verify",
        self::dir().join("all_dtypes.pt").to_str().unwrap(),
    ]);
    assert_eq!(code, ExitCode::SUCCESS, "{out}");
    assert!(out.contains("23 zip members checked"), "{out}");
}

/// The members of a fixture, as (name, content).
fn members(f: &str) -> Vec<(String, Vec<u8>)> {
    let src = Source::open(dir().join(f)).unwrap();
    let limits = Limits::default();
    let index = ZipIndex::read(src.data(), &limits).unwrap();
    index
        .members()
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
    inspect_edited_in("file_object.pt", edit)
}

/// `inspect` of the fixture `f` with its members changed by `edit`: the error text.
fn inspect_edited_in(f: &str, edit: impl FnOnce(&mut Vec<(String, Vec<u8>)>)) -> String {
    let mut m = members(f);
    edit(&mut m);
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("edited.pt");
    write_zip(&p, &m);
    open_err(&p)
}

/// The error of opening `path` and hashing every tensor, under `--weights-only` (a
/// global outside the allowlist refused, not read inertly).
fn open_err(path: &Path) -> String {
    let result = (|| {
        let mut options = tensorfmt::OpenOptions::default();
        options.limits.weights_only = true;
        let f = tensorfmt::TensorFile::open_with(path, &options)?;
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
    // Read by default: the call an inert object, recorded and never run.
    let mut m = members("file_object.pt");
    let pkl = m.iter_mut().find(|(n, _)| n == "archive/data.pkl").unwrap();
    pkl.1 = b"\x80\x02cposix\nsystem\nq\x00X\x02\x00\x00\x00lsq\x01\x85q\x02Rq\x03.".to_vec();
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("inert.pt");
    write_zip(&p, &m);
    let (code, out) = cli(&["inspect", "--values", p.to_str().unwrap()]);
    assert_eq!(code, std::process::ExitCode::SUCCESS, "{out}");
    assert!(out.contains("posix.system('ls')"), "{out}");
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
fn an_archive_without_byteorder_is_little_endian() {
    // torch before 2.1 wrote no `byteorder` record.
    for f in ["file_object.pt", "torchscript.pt"] {
        let mut m = members(f);
        m.retain(|(n, _)| !n.ends_with("/byteorder"));
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join(f);
        write_zip(&p, &m);
        let expected = json(
            &std::fs::read_to_string(dir().join("expected").join(format!("{f}.json"))).unwrap(),
        );
        assert_eq!(inspect_json(&p), expected, "{f} without byteorder");
    }
}

#[test]
fn the_version_record_may_be_data_version() {
    // torch reads `.data/version` when it exists (format version 6 and later), else
    // `version`; one of them is required.
    for f in ["file_object.pt", "torchscript.pt"] {
        let expected = json(
            &std::fs::read_to_string(dir().join("expected").join(format!("{f}.json"))).unwrap(),
        );
        let prefix = if f == "file_object.pt" {
            "archive"
        } else {
            "torchscript"
        };
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join(f);
        // Only `.data/version`.
        let mut m = members(f);
        let v = m
            .iter_mut()
            .find(|(n, _)| *n == format!("{prefix}/version"))
            .unwrap();
        v.0 = format!("{prefix}/.data/version");
        write_zip(&p, &m);
        assert_eq!(inspect_json(&p), expected, "{f} with .data/version");
        // Both: `.data/version` is the one read (an unreadable one is an error naming it).
        let mut both = members(f);
        both.push((format!("{prefix}/.data/version"), vec![0xff, 0xfe]));
        write_zip(&p, &both);
        let out = open_err(&p);
        assert!(out.contains(&format!("{prefix}/.data/version")), "{out}");
        // Neither.
        m.retain(|(n, _)| !n.ends_with("version"));
        write_zip(&p, &m);
        let out = open_err(&p);
        assert!(
            out.contains(&format!("{prefix}/version"))
                && out.contains(&format!("{prefix}/.data/version"))
                && out.contains("missing"),
            "{out}"
        );
    }
}

#[test]
fn torchscript_archives_are_told_apart_and_read_only() {
    for (f, format) in [
        ("torchscript.pt", "torchscript"),
        ("torchscript_frozen.pt", "torchscript"),
        ("all_dtypes.pt", "pytorch"),
    ] {
        assert_eq!(inspect_json(&dir().join(f))["format"], format, "{f}");
    }
    // A module's class may be any `__torch__` class; other globals stay refused.
    let out = inspect_edited_in("torchscript.pt", |m| {
        let pkl = m
            .iter_mut()
            .find(|(n, _)| n == "torchscript/data.pkl")
            .unwrap();
        let module = b"__torch__.tensorfmt_fixtures\n";
        let at = find(&pkl.1, module).unwrap();
        pkl.1
            .splice(at..at + module.len(), b"posix\n".iter().copied());
    });
    assert!(out.contains("posix"), "{out}");
    let tmp = tempfile::tempdir().unwrap();
    let (code, out) = cli(&[
        "convert",
        dir().join("all_dtypes.pt").to_str().unwrap(),
        tmp.path().join("x.pt").to_str().unwrap(),
        "--to",
        "torchscript",
    ]);
    assert_ne!(code, ExitCode::SUCCESS, "{out}");
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
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

/// The legacy (pre-1.6, non-zip) fixture: `pytorch-legacy`, read by the schema's layout of
/// five pickles and raw storage records.
#[test]
fn legacy_fixture_matches_torch_and_verifies() {
    let p = dir().join("legacy.pt");
    let expected =
        json(&std::fs::read_to_string(dir().join("expected").join("legacy.pt.json")).unwrap());
    assert_eq!(expected["format"], "pytorch-legacy");
    assert_eq!(inspect_json(&p), expected);
    let (code, out) = cli(&["verify", p.to_str().unwrap()]);
    assert_eq!(code, ExitCode::SUCCESS, "verify legacy.pt: {out}");
    assert!(out.contains("pytorch-legacy"), "{out}");
}

/// Legacy checkpoints saved at pickle protocols 3, 4 and 5 (`torch.save(...,
/// _use_new_zipfile_serialization=False, pickle_protocol=N)`): the magic number's pickle
/// starts `PROTO N`, at 4 and 5 with a `FRAME`; each is detected as `pytorch-legacy`
/// without `--format` and reads as torch loads it.
#[test]
fn legacy_checkpoints_at_protocols_3_to_5_are_detected_and_match_torch() {
    for protocol in 3u8..=5 {
        let f = format!("legacy_protocol{protocol}.pt");
        let p = dir().join(&f);
        let bytes = std::fs::read(&p).unwrap();
        assert_eq!(
            bytes[..2],
            [0x80, protocol],
            "{f} starts with PROTO {protocol}"
        );
        let expected = json(
            &std::fs::read_to_string(dir().join("expected").join(format!("{f}.json"))).unwrap(),
        );
        assert_eq!(expected["format"], "pytorch-legacy");
        assert_eq!(inspect_json(&p), expected, "{f}");
        let (code, out) = cli(&["verify", p.to_str().unwrap()]);
        assert_eq!(code, ExitCode::SUCCESS, "verify {f}: {out}");
        assert!(out.contains("pytorch-legacy"), "{out}");
    }
}

/// A legacy checkpoint with storage views (`legacy_views.pt`, as torch before 1.0 wrote
/// them): each tensor is read from its view's offset in the root storage, as torch reads
/// it, not from the storage's start.
#[test]
fn legacy_storage_views_match_torch() {
    let p = dir().join("legacy_views.pt");
    let expected = json(
        &std::fs::read_to_string(dir().join("expected").join("legacy_views.pt.json")).unwrap(),
    );
    assert_eq!(inspect_json(&p), expected);
}

/// A legacy checkpoint holding NumPy values (`numpy_values_legacy.pt`, the objects of
/// `numpy_values.pt`): its arrays, whose bytes the object pickle holds, listed beside the
/// torch tensors as torch reads them, its NumPy scalars and random state as values.
#[test]
fn legacy_numpy_values_match_torch_and_verify() {
    let p = dir().join("numpy_values_legacy.pt");
    let expected =
        json(&std::fs::read_to_string(dir().join("expected/numpy_values_legacy.pt.json")).unwrap());
    assert_eq!(expected["format"], "pytorch-legacy");
    assert_eq!(inspect_json(&p), expected);
    // The same tensors as the zip checkpoint of the same objects.
    let zip = json(&std::fs::read_to_string(dir().join("expected/numpy_values.pt.json")).unwrap());
    assert_eq!(expected["tensors"], zip["tensors"]);
    let (code, out) = cli(&["verify", p.to_str().unwrap()]);
    assert_eq!(
        code,
        ExitCode::SUCCESS,
        "verify numpy_values_legacy.pt: {out}"
    );
    let (code, text) = cli(&["inspect", "--values", p.to_str().unwrap()]);
    assert_eq!(code, ExitCode::SUCCESS, "{text}");
    for line in [
        "  arrays.be_i32       i32       [6]                         24 B\n",
        "  rng_state.1         u32       [624]                    2.4 KiB\n",
        "  rng_state.0 = 'MT19937'\n",
        "  lr = 0.1\n",
        "  step = 100\n",
        "  flag = True\n",
    ] {
        assert!(text.contains(line), "{line:?} not in:\n{text}");
    }
}

/// The byte offset of the first storage record of `legacy.pt`: after its five pickles.
fn legacy_records_start(bytes: &[u8]) -> usize {
    let rules = tensorfmt::generated::pytorch_legacy::legacy_rules();
    let limits = Limits::default();
    let mut pos = 0;
    for _ in 0..5 {
        let (_, used) =
            tensorfmt::runtime::pickle::read_prefix(&bytes[pos..], rules, &limits).unwrap();
        pos += used;
    }
    pos
}

/// The error of reading `bytes` as `pytorch-legacy` (forced, not detected).
fn legacy_err(bytes: &[u8]) -> String {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("damaged.pt");
    std::fs::write(&p, bytes).unwrap();
    let options = tensorfmt::OpenOptions {
        format: Some("pytorch-legacy".to_string()),
        ..Default::default()
    };
    let result = (|| {
        let f = tensorfmt::TensorFile::open_with(&p, &options)?;
        let mut sink = tensorfmt::runtime::hash::HashSink::new();
        f.read_all(&mut sink)?;
        Ok::<_, tensorfmt::Error>(())
    })();
    let e = result
        .expect_err("a damaged legacy file must not read")
        .to_string();
    assert!(e.contains("damaged.pt"), "the error names the file: {e}");
    e
}

#[test]
fn damaged_legacy_files_give_clear_errors() {
    let good = std::fs::read(dir().join("legacy.pt")).unwrap();
    // Truncated inside the last storage.
    let e = legacy_err(&good[..good.len() - 5]);
    assert!(e.contains("truncated") && e.contains("storages"), "{e}");
    // Truncated inside the pickled object.
    let e = legacy_err(&good[..300]);
    assert!(e.contains("truncated") && e.contains("object"), "{e}");
    // A record whose element count differs from its persistent id's.
    let at = legacy_records_start(&good);
    let mut bad = good.clone();
    let n = i64::from_le_bytes(bad[at..at + 8].try_into().unwrap());
    bad[at..at + 8].copy_from_slice(&(n + 1).to_le_bytes());
    let e = legacy_err(&bad);
    assert!(
        e.contains("storage has wrong byte size") || e.contains("wrong byte size"),
        "{e}"
    );
    assert!(e.contains("storages.numel"), "{e}");
    // A bogus huge count is refused before anything is allocated.
    let mut bad = good.clone();
    bad[at..at + 8].copy_from_slice(&(i64::MAX / 16).to_le_bytes());
    let e = legacy_err(&bad);
    assert!(e.contains("wrong byte size"), "{e}");
    // Bytes after the last record.
    let mut bad = good.clone();
    bad.extend_from_slice(b"junk");
    let e = legacy_err(&bad);
    assert!(e.contains("4 bytes follow the last record"), "{e}");
    // A wrong magic number: not detected, and refused when the format is forced.
    let mut bad = good.clone();
    bad[5] ^= 0xff;
    let e = legacy_err(&bad);
    assert!(
        e.contains("check failed: magic == 0x1950a86a20f9469cfc6c"),
        "{e}"
    );
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("badmagic.pt");
    std::fs::write(&p, &bad).unwrap();
    assert!(open_err(&p).contains("not a file of any known tensor format"));
}

#[test]
fn legacy_is_read_only() {
    let tmp = tempfile::tempdir().unwrap();
    let src = dir().join("legacy.pt");
    let out = tmp.path().join("out.pt");
    let (code, text) = cli(&[
        "convert",
        src.to_str().unwrap(),
        out.to_str().unwrap(),
        "--to",
        "pytorch-legacy",
    ]);
    assert_ne!(code, ExitCode::SUCCESS, "{text}");
    let desc = &tensorfmt::generated::pytorch_legacy::DESC;
    let w = Box::new(std::io::Cursor::new(Vec::new()));
    let e = (desc.writer)(w, &Default::default())
        .err()
        .expect("the legacy writer refuses")
        .to_string();
    assert!(
        e.contains("pytorch-legacy is read-only; write pytorch instead"),
        "{e}"
    );
    // Converting to the zip format works, and keeps every tensor.
    let (code, text) = cli(&[
        "convert",
        src.to_str().unwrap(),
        out.to_str().unwrap(),
        "--to",
        "pytorch",
    ]);
    assert_eq!(code, ExitCode::SUCCESS, "{text}");
    let mut a = inspect_json(&src);
    let b = inspect_json(&out);
    a["format"] = "pytorch".into();
    assert_eq!(a, b);
}
