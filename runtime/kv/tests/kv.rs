//! The key-value backends: Caffe2's open modes, key order, and whole-database snapshots
//! whose values are located in the source (LMDB: in the map of `data.mdb`).

use tensorfmt_kv::{self as kv, Db, Mode};

fn fill(db: &mut dyn Db, n: usize) {
    let mut t = db.transaction().unwrap();
    for i in (0..n).rev() {
        let v = vec![i as u8; 100 + i * 97];
        t.put(format!("k{i:03}").as_bytes(), &v).unwrap();
    }
    t.commit().unwrap();
}

fn check_snapshot(dir: &std::path::Path, backend: &str, n: usize) {
    let src = kv::open_dir(dir).unwrap();
    let recs = src.records().unwrap();
    assert_eq!(recs.backend, backend);
    assert_eq!(recs.records.len(), n);
    let bytes = src.bytes().unwrap().as_bytes();
    for (i, r) in recs.records.iter().enumerate() {
        assert_eq!(r.key, format!("k{i:03}").as_bytes(), "bytewise key order");
        let v = &bytes[r.offset as usize..(r.offset + r.len) as usize];
        assert_eq!(v, vec![i as u8; 100 + i * 97].as_slice());
    }
}

#[test]
fn lmdb_modes_order_and_snapshot() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    let mut db = kv::lmdb::open(&dir, Mode::New).unwrap();
    // Large values go to overflow pages: located all the same.
    fill(&mut db, 60);
    Box::new(db).close().unwrap();
    let e = kv::lmdb::open(&dir, Mode::New).err().unwrap().to_string();
    assert!(e.contains("exists"), "{e}");
    check_snapshot(&dir, "lmdb", 60);
    let mut db = kv::lmdb::open(&dir, Mode::Read).unwrap();
    let mut c = db.cursor().unwrap();
    assert!(c.supports_seek());
    c.seek(b"k010").unwrap();
    assert_eq!(c.key(), b"k010");
    let mut n = 0;
    c.seek_to_first().unwrap();
    while c.valid() {
        n += 1;
        c.next().unwrap();
    }
    assert_eq!(n, 60);
    assert!(kv::lmdb::open(&tmp.path().join("none"), Mode::Read).is_err());
}

#[test]
fn leveldb_modes_order_and_snapshot() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    let mut db = kv::leveldb::open(&dir, Mode::New).unwrap();
    fill(&mut db, 40);
    Box::new(db).close().unwrap();
    let e = kv::leveldb::open(&dir, Mode::New)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("LevelDB"), "{e}");
    check_snapshot(&dir, "leveldb", 40);
    let mut db = kv::leveldb::open(&dir, Mode::Write).unwrap();
    fill(&mut db, 41);
    Box::new(db).close().unwrap();
    check_snapshot(&dir, "leveldb", 41);
}

/// A tree of several levels (branch pages), values inline and in overflow pages, read
/// without liblmdb exactly as written; appended to (`Write`) and read again.
#[test]
fn lmdb_branch_pages_read_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    let value = |i: usize| vec![(i % 251) as u8; if i % 97 == 0 { 9000 } else { i % 300 }];
    let big = kv::OpenOptions {
        map_size: Some(64 << 20),
        ..kv::OpenOptions::DEFAULT
    };
    let mut db = kv::lmdb::open_with(&dir, Mode::New, &big).unwrap();
    {
        let mut t = db.transaction().unwrap();
        for i in 0..6000 {
            t.put(format!("key{i:06}").as_bytes(), &value(i)).unwrap();
        }
        t.commit().unwrap();
    }
    Box::new(db).close().unwrap();
    let check = |n: usize| {
        let src = kv::open_dir(&dir).unwrap();
        let recs = src.records().unwrap();
        let bytes = src.bytes().unwrap().as_bytes();
        assert_eq!(recs.records.len(), n);
        for (i, r) in recs.records.iter().enumerate() {
            assert_eq!(r.key, format!("key{i:06}").as_bytes());
            assert_eq!(
                &bytes[r.offset as usize..(r.offset + r.len) as usize],
                &value(i)[..]
            );
        }
    };
    check(6000);
    let mut db = kv::lmdb::open_with(&dir, Mode::Write, &big).unwrap();
    {
        let mut t = db.transaction().unwrap();
        t.put(b"key006000", &value(6000)).unwrap();
    }
    Box::new(db).close().unwrap();
    check(6001);
}

/// A small deterministic generator for the mutation loops.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn fixture(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/caffe2")
        .join(name)
}

/// A database's records: keys and values.
type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

/// What reading a database folder gave: the records' keys and values, or the error.
fn read_all(dir: &std::path::Path) -> Result<Pairs, String> {
    let src = kv::open_dir(dir).map_err(|e| e.to_string())?;
    let recs = src.records().unwrap();
    let bytes = src.bytes().unwrap().as_bytes();
    Ok(recs
        .records
        .iter()
        .map(|r| {
            let v = bytes
                .get(r.offset as usize..(r.offset + r.len) as usize)
                .expect("a value within the source");
            (r.key.clone(), v.to_vec())
        })
        .collect())
}

/// Truncated and corrupted `data.mdb` files (mutants of a committed fixture): each is
/// read exactly (keys in order, values within the file) or refused with an error naming
/// the file, and never crashes the process (liblmdb read them out of its map).
#[test]
fn lmdb_mutants_never_crash() {
    let orig = std::fs::read(fixture("dataset.lmdb/data.mdb")).unwrap();
    let want = read_all(&fixture("dataset.lmdb")).unwrap();
    assert!(!want.is_empty());
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    std::fs::create_dir(&dir).unwrap();
    let data = dir.join("data.mdb");
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let (mut refused, mut read) = (0, 0);
    let mut try_one = |bytes: &[u8], exact: bool| {
        std::fs::write(&data, bytes).unwrap();
        match read_all(&dir) {
            Ok(got) => {
                read += 1;
                assert!(got.windows(2).all(|w| w[0].0 < w[1].0), "keys in order");
                if exact {
                    assert_eq!(got, want);
                }
            }
            Err(e) => {
                refused += 1;
                assert!(e.contains("data.mdb"), "{e}");
            }
        }
    };
    // Truncated at every 61st byte, and at each page boundary.
    for cut in (0..orig.len())
        .step_by(61)
        .chain((0..orig.len()).step_by(4096))
    {
        try_one(&orig[..cut], false);
    }
    // Bytes of the data pages flipped; whole data pages random; the meta pages intact.
    let psize = 4096;
    for round in 0..400 {
        let mut m = orig.clone();
        if round % 4 == 0 {
            for b in &mut m[2 * psize..] {
                *b = rng.next() as u8;
            }
        } else {
            for _ in 0..1 + round % 5 {
                let at = 2 * psize + (rng.next() as usize) % (orig.len() - 2 * psize);
                m[at] ^= 1 << (rng.next() % 8);
            }
        }
        try_one(&m, false);
    }
    try_one(&orig, true);
    assert!(refused > 100 && read > 10, "{refused} refused, {read} read");
}

/// Every file of a folder, by name, with its bytes.
fn snapshot_files(dir: &std::path::Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

/// Reading a LevelDB folder leaves it byte for byte as it was: no LOG rotated, no lock
/// file, no new MANIFEST, CURRENT or table, even when its log holds records not yet in a
/// table (which the library would turn into one).
#[test]
fn leveldb_reads_write_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let fixture_copy = tmp.path().join("fixture");
    copy_dir(&fixture("dataset.leveldb"), &fixture_copy);
    // Records only in the log: written without closing the database.
    let logged = tmp.path().join("logged");
    {
        let mut db = kv::leveldb::open(&logged, Mode::New).unwrap();
        fill(&mut db, 30);
        // Dropped without close: the log keeps what the memtable held.
    }
    for dir in [&fixture_copy, &logged] {
        let before = snapshot_files(dir);
        let n = read_all(dir).unwrap().len();
        assert!(n > 0);
        let mut db = kv::leveldb::open(dir, Mode::Read).unwrap();
        let mut c = db.cursor().unwrap();
        let mut m = 0;
        while c.valid() {
            m += 1;
            c.next().unwrap();
        }
        drop(c);
        Box::new(db).close().unwrap();
        assert_eq!(m, n);
        let after = snapshot_files(dir);
        assert_eq!(
            before.keys().collect::<Vec<_>>(),
            after.keys().collect::<Vec<_>>(),
            "the same files"
        );
        assert!(before == after, "the same bytes in {}", dir.display());
    }
    check_snapshot(&logged, "leveldb", 30);
}

/// Truncated and corrupted LevelDB tables (mutants of a committed fixture): read
/// exactly or refused with an error naming the folder, never a panic out of the library.
#[test]
fn leveldb_mutants_never_panic() {
    let src = fixture("dataset.leveldb");
    let want = read_all(&src).unwrap();
    let table = std::fs::read_dir(&src)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .find(|n| n.ends_with(".ldb"))
        .unwrap();
    let orig = std::fs::read(src.join(&table)).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    copy_dir(&src, &dir);
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    let (mut refused, mut read) = (0, 0);
    let mut try_one = |bytes: &[u8], exact: bool| {
        std::fs::write(dir.join(&table), bytes).unwrap();
        match read_all(&dir) {
            Ok(got) => {
                read += 1;
                if exact {
                    assert_eq!(got, want);
                }
            }
            Err(e) => {
                refused += 1;
                assert!(e.contains(&*dir.to_string_lossy()), "{e}");
            }
        }
    };
    for cut in 0..orig.len() {
        try_one(&orig[..cut], false);
    }
    for round in 0..300 {
        let mut m = orig.clone();
        for _ in 0..1 + round % 4 {
            let at = rng.next() as usize % m.len();
            m[at] ^= 1 << (rng.next() % 8);
        }
        try_one(&m, false);
    }
    try_one(&orig, true);
    assert!(refused > 100, "{refused} refused, {read} read");
}

/// The hostile databases of the committed corpus (tests/fixtures/hostile/make_kv.py) are
/// each refused with an error naming them: none crashes the process.
#[test]
fn hostile_corpus_is_refused() {
    let corpus =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/hostile/kv");
    let mut n = 0;
    for e in std::fs::read_dir(&corpus).unwrap() {
        let dir = e.unwrap().path();
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let err = read_all(&dir).expect_err(&name);
        assert!(err.contains(&name), "{err}");
        if name == "leveldb_index_block_of_1_tib" {
            // Refused from the footer, before anything is allocated for the block.
            assert!(err.contains("index block (1099511627776 bytes"), "{err}");
        }
        n += 1;
    }
    assert!(n >= 8);
}

#[test]
fn every_file_a_database_writes_is_its_own_and_checked_by_its_header() {
    let tmp = tempfile::tempdir().unwrap();
    for backend in ["lmdb", "leveldb"] {
        let dir = tmp.path().join(backend);
        let mut db: Box<dyn Db> = match backend {
            "lmdb" => Box::new(kv::lmdb::open(&dir, Mode::New).unwrap()),
            _ => Box::new(kv::leveldb::open(&dir, Mode::New).unwrap()),
        };
        fill(&mut *db, 30);
        db.close().unwrap();
        for e in std::fs::read_dir(&dir).unwrap() {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            assert!(kv::owns_file(backend, &name), "{backend}: {name}");
        }
        kv::check_database(&dir, backend).unwrap();
        let kind = kv::folder_kind(backend).unwrap();
        assert!(!kind.adopts);
        for other in [
            "README",
            "data.mdb.bak",
            "MANIFEST-",
            "12a.log",
            "LOG.older",
        ] {
            assert!(!kv::owns_file(backend, other), "{backend}: {other}");
        }
    }
    // The other's files are not a database of this backend, nor empty files.
    assert!(kv::check_database(&tmp.path().join("leveldb"), "lmdb").is_err());
    assert!(kv::check_database(&tmp.path().join("lmdb"), "leveldb").is_err());
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    std::fs::write(empty.join("data.mdb"), b"").unwrap();
    std::fs::write(empty.join("CURRENT"), b"MANIFEST-000009\n").unwrap();
    let e = kv::check_database(&empty, "lmdb").unwrap_err().to_string();
    assert!(e.contains("data.mdb"), "{e}");
    let e = kv::check_database(&empty, "leveldb")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("MANIFEST-000009") && e.contains("not there"),
        "{e}"
    );
}
