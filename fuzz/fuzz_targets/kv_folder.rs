//! Arbitrary bytes as a key-value database folder: the first byte chooses the backend,
//! the rest is the file. Even: an LMDB environment's `data.mdb`, read by the
//! bounds-checked reader (meta pages, branch, leaf and overflow pages). Odd: the table
//! of a LevelDB database whose `CURRENT` and `MANIFEST` are those of the committed
//! fixture `tests/fixtures/caffe2/dataset.leveldb`, read by rusty-leveldb through the
//! read-only view (its panics caught). An opened database is then mapped as a Caffe2
//! database and every tensor read into a hashing sink. Any panic, abort, crash, timeout
//! or out-of-memory is a bug.

#![no_main]

use libfuzzer_sys::fuzz_target;
use tensorfmt::runtime::hash::HashSink;
use tensorfmt::runtime::kv;
use tensorfmt::{OpenOptions, TensorFile};

const CURRENT: &[u8] = include_bytes!("../../tests/fixtures/caffe2/dataset.leveldb/CURRENT");
const MANIFEST: &[u8] =
    include_bytes!("../../tests/fixtures/caffe2/dataset.leveldb/MANIFEST-000004");

fuzz_target!(|data: &[u8]| {
    let Some((&choice, file)) = data.split_first() else {
        return;
    };
    let Ok(tmp) = tempfile_dir() else {
        return;
    };
    let dir = tmp.join("db");
    let _ = std::fs::create_dir(&dir);
    let format = if choice % 2 == 0 {
        let _ = std::fs::write(dir.join("data.mdb"), file);
        "caffe2-lmdb"
    } else {
        let _ = std::fs::write(dir.join("CURRENT"), CURRENT);
        let _ = std::fs::write(dir.join("MANIFEST-000004"), MANIFEST);
        let _ = std::fs::write(dir.join("000005.ldb"), file);
        let _ = std::fs::write(dir.join("000006.log"), b"");
        "caffe2-leveldb"
    };
    if let Ok(src) = kv::open_dir(&dir) {
        let options = OpenOptions {
            format: Some(format.to_string()),
            ..Default::default()
        };
        if let Ok(file) = TensorFile::from_source(src, &options) {
            let _ = file.read_all(&mut HashSink::default());
        }
    }
    let _ = std::fs::remove_dir_all(&tmp);
});

/// A fresh folder of this process under the system's temporary folder.
fn tempfile_dir() -> std::io::Result<std::path::PathBuf> {
    let p = std::env::temp_dir().join(format!("tensorfmt-fuzz-kv-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(&p)?;
    Ok(p)
}
