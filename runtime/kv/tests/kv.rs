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
