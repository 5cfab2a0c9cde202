//! Damaged and hostile files give clear errors naming the file and what is wrong: never
//! a panic, a hang, or an allocation larger than the file.

use std::path::{Path, PathBuf};

use tensorfmt::runtime::sink::OwnedSink;
use tensorfmt::{OpenOptions, TensorFile};
use tensorfmt_tests::{alloc, fixtures};

#[global_allocator]
static GLOBAL: alloc::Counting = alloc::Counting;

/// Opens `path` (as `format` when given) and reads every tensor; returns the error text.
/// Asserts that no single allocation exceeded the file's size plus a small constant.
fn open_and_read_err(path: &Path, format: Option<&str>) -> String {
    let size = std::fs::metadata(path).unwrap().len() as usize;
    let (result, largest) = alloc::armed(|| {
        let opts = OpenOptions {
            format: format.map(String::from),
            ..Default::default()
        };
        let f = TensorFile::open_with(path, &opts)?;
        let mut sink = OwnedSink::default();
        f.read_all(&mut sink)?;
        Ok::<_, tensorfmt::Error>(f.tensors().len())
    });
    assert!(
        largest <= size + (1 << 16),
        "{}: allocated {largest} bytes for a {size}-byte file",
        path.display()
    );
    match result {
        Ok(n) => panic!(
            "{} was accepted ({n} tensors) but is damaged",
            path.display()
        ),
        Err(e) => {
            let msg = e.to_string();
            assert!(
                msg.contains(path.file_name().unwrap().to_str().unwrap()),
                "error does not name the file: {msg}"
            );
            msg
        }
    }
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

/// A v1 .npy file with the given header text (padded like NumPy's) and data.
fn npy(header: &str, data: &[u8]) -> Vec<u8> {
    let mut h = header.to_string();
    let total = 10 + h.len() + 1;
    h.push_str(&" ".repeat((64 - total % 64) % 64));
    h.push('\n');
    let mut v = b"\x93NUMPY\x01\x00".to_vec();
    v.extend_from_slice(&(h.len() as u16).to_le_bytes());
    v.extend_from_slice(h.as_bytes());
    v.extend_from_slice(data);
    v
}

fn good_npy() -> Vec<u8> {
    npy(
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
        &[0u8; 24],
    )
}

#[test]
fn truncated_npy_files() {
    let dir = tempfile::tempdir().unwrap();
    let good = good_npy();
    for cut in [3usize, 7, 9, 20, 63, 64, 70, good.len() - 1] {
        let p = write(dir.path(), &format!("cut{cut}.npy"), &good[..cut]);
        let msg = open_and_read_err(&p, Some("npy"));
        assert!(
            msg.contains("truncated") || msg.contains("size mismatch") || msg.contains("needs"),
            "cut at {cut}: {msg}"
        );
    }
}

#[test]
fn wrong_magic() {
    let dir = tempfile::tempdir().unwrap();
    let mut bad = good_npy();
    bad[1] = b'X';
    let p = write(dir.path(), "magic.npy", &bad);
    let msg = open_and_read_err(&p, Some("npy"));
    assert!(msg.contains("magic"), "{msg}");
    let msg = open_and_read_err(&p, None);
    assert!(
        msg.contains("not a file of any known tensor format"),
        "{msg}"
    );
}

#[test]
fn header_length_beyond_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let mut bad = good_npy();
    bad[8..10].copy_from_slice(&60000u16.to_le_bytes());
    let p = write(dir.path(), "hlen.npy", &bad);
    let msg = open_and_read_err(&p, Some("npy"));
    assert!(msg.contains("header") && msg.contains("truncated"), "{msg}");
    // Version 2 with a 4 GiB header length.
    let mut v2 = b"\x93NUMPY\x02\x00".to_vec();
    v2.extend_from_slice(&u32::MAX.to_le_bytes());
    v2.extend_from_slice(&[b' '; 100]);
    let p = write(dir.path(), "hlen2.npy", &v2);
    let msg = open_and_read_err(&p, Some("npy"));
    assert!(msg.contains("header"), "{msg}");
}

#[test]
fn shapes_that_overflow_or_exceed_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let over = npy("{'descr': '<f8', 'fortran_order': False, 'shape': (4611686018427387904, 4611686018427387904), }", &[0u8; 16]);
    let p = write(dir.path(), "overflow.npy", &over);
    let msg = open_and_read_err(&p, None);
    assert!(msg.contains("overflow"), "{msg}");
    let big = npy(
        "{'descr': '<f8', 'fortran_order': False, 'shape': (1000000, 1000), }",
        &[0u8; 16],
    );
    let p = write(dir.path(), "exceeds.npy", &big);
    let msg = open_and_read_err(&p, None);
    assert!(msg.contains("needs 8000000000 bytes"), "{msg}");
    let neg = npy(
        "{'descr': '<f8', 'fortran_order': False, 'shape': (-2,), }",
        &[0u8; 16],
    );
    let p = write(dir.path(), "negative.npy", &neg);
    let msg = open_and_read_err(&p, None);
    assert!(msg.contains("shape"), "{msg}");
}

#[test]
fn unknown_dtype_and_bad_header() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(
        dir.path(),
        "unicode.npy",
        &npy(
            "{'descr': '<U5', 'fortran_order': False, 'shape': (2,), }",
            &[0u8; 40],
        ),
    );
    let msg = open_and_read_err(&p, None);
    assert!(
        msg.contains("unknown dtype") && msg.contains("<U5"),
        "{msg}"
    );
    let p = write(
        dir.path(),
        "nodescr.npy",
        &npy("{'fortran_order': False, 'shape': (2,), }", &[0u8; 8]),
    );
    let msg = open_and_read_err(&p, None);
    assert!(msg.contains("descr"), "{msg}");
    let p = write(
        dir.path(),
        "garbage.npy",
        &npy("{'descr': '<f4', 'fortran_order': Fals", &[0u8; 8]),
    );
    let msg = open_and_read_err(&p, None);
    assert!(
        msg.contains("python literal") || msg.contains("header"),
        "{msg}"
    );
}

fn fixture_bytes(rel: &str) -> Vec<u8> {
    std::fs::read(fixtures().join(rel)).unwrap_or_else(|e| panic!("fixture {rel}: {e}"))
}

/// Offset of the first local header's data of a zip whose first member is `name`.
fn first_member_data(zip: &[u8]) -> usize {
    assert_eq!(&zip[..4], b"PK\x03\x04");
    let name_len = u16::from_le_bytes([zip[26], zip[27]]) as usize;
    let extra_len = u16::from_le_bytes([zip[28], zip[29]]) as usize;
    30 + name_len + extra_len
}

fn first_npz(kind: &str) -> Vec<u8> {
    let dir = fixtures().join("npz");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(kind))
        .collect();
    names.sort();
    let name = names
        .first()
        .unwrap_or_else(|| panic!("no npz fixture named *{kind}*"));
    fixture_bytes(&format!("npz/{name}"))
}

#[test]
fn corrupted_deflate_stream() {
    let dir = tempfile::tempdir().unwrap();
    let mut z = first_npz("compressed");
    let start = first_member_data(&z);
    for b in &mut z[start + 2..start + 40] {
        *b ^= 0x5a;
    }
    let p = write(dir.path(), "deflate.npz", &z);
    let msg = open_and_read_err(&p, None);
    assert!(
        msg.contains("decompress") || msg.contains("checksum") || msg.contains("deflate"),
        "{msg}"
    );
}

#[test]
fn zip_member_with_wrong_crc() {
    let dir = tempfile::tempdir().unwrap();
    let mut z = first_npz("stored");
    // Flip the first element byte of the first member's array: structure intact, CRC wrong.
    let start = first_member_data(&z);
    assert_eq!(&z[start..start + 6], b"\x93NUMPY", "first member is stored");
    let hlen = u16::from_le_bytes([z[start + 8], z[start + 9]]) as usize;
    z[start + 10 + hlen] ^= 0xff;
    let p = write(dir.path(), "crc.npz", &z);
    let msg = open_and_read_err(&p, None);
    assert!(msg.contains("checksum"), "{msg}");
    assert!(msg.contains(".npy"), "error names the member: {msg}");
    let (code, _) = tensorfmt_tests::cli(&["verify", p.to_str().unwrap()]);
    assert_ne!(code, std::process::ExitCode::SUCCESS);
}

#[test]
fn truncated_and_forged_zip() {
    let dir = tempfile::tempdir().unwrap();
    let z = first_npz("stored");
    let p = write(dir.path(), "cut.npz", &z[..z.len() / 2]);
    open_and_read_err(&p, Some("npz"));
    // End-of-central-directory record claiming 65535 entries in a tiny file.
    let mut forged = z.clone();
    let eocd = forged
        .windows(4)
        .rposition(|w| w == b"PK\x05\x06")
        .expect("EOCD");
    forged[eocd + 8..eocd + 12].copy_from_slice(&[0xff, 0xff, 0xff, 0xff]);
    let p = write(dir.path(), "forged.npz", &forged);
    open_and_read_err(&p, Some("npz"));
}
