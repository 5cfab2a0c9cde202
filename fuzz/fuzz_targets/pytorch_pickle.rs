//! Arbitrary bytes as the pickle of a well-formed checkpoint: as `data.pkl` of a zip
//! archive whose other members (storages `data/0` to `data/3`, `version`, `byteorder`)
//! are valid and whose CRC-32s are right, and as the object pickle of a legacy checkpoint
//! with two storage records. This reaches what `pytorch_archive` rarely does past the
//! checksums: the mapping of pickled calls to tensors (dtypes, shapes, strides, offsets,
//! storage keys) and the reads of their bytes. Any panic, abort, timeout or
//! out-of-memory is a bug.

#![no_main]

use std::io::{Cursor, Write};

use libfuzzer_sys::fuzz_target;
use tensorfmt::runtime::hash::HashSink;
use tensorfmt::runtime::zip::ZipWriter;
use tensorfmt::{Compression, OpenOptions, Source, TensorFile};

/// The storages: `data/<i>` holds `STORAGES[i]` bytes (f32 (2,3), i64 (4,), 8 bytes, empty).
const STORAGES: [usize; 4] = [24, 32, 8, 0];

fn read(bytes: Vec<u8>, format: &str) {
    let options = OpenOptions {
        format: Some(format.to_string()),
        ..Default::default()
    };
    if let Ok(file) = TensorFile::from_source(Source::from_bytes(bytes), &options) {
        let _ = file.read_all(&mut HashSink::default());
    }
}

fn zip_around(pickle: &[u8]) -> Vec<u8> {
    let mut w = ZipWriter::new(Cursor::new(Vec::new()));
    let mut add = |name: &str, content: &[u8]| {
        w.start_member(name, Compression::Stored, 64)
            .expect("start member");
        w.write_all(content).expect("write member");
    };
    add("archive/data.pkl", pickle);
    add("archive/byteorder", b"little");
    for (i, n) in STORAGES.iter().enumerate() {
        let content: Vec<u8> = (0..*n).map(|b| (b * 7 + i) as u8).collect();
        add(&format!("archive/data/{i}"), &content);
    }
    add("archive/version", b"3\n");
    w.finish().expect("finish archive").into_inner()
}

fn legacy_around(pickle: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    // Magic number, protocol version 1001, sys_info.
    f.extend_from_slice(b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.");
    f.extend_from_slice(b"\x80\x02M\xe9\x03.");
    f.extend_from_slice(b"\x80\x02}.");
    f.extend_from_slice(pickle);
    // Storage keys ['0', '1'], then their records: 6 and 4 elements.
    f.extend_from_slice(b"\x80\x02](X\x01\x00\x00\x000X\x01\x00\x00\x001e.");
    f.extend_from_slice(&6i64.to_le_bytes());
    f.extend_from_slice(&[1u8; 24]);
    f.extend_from_slice(&4i64.to_le_bytes());
    f.extend_from_slice(&[2u8; 32]);
    f
}

fuzz_target!(|data: &[u8]| {
    read(zip_around(data), "pytorch");
    read(legacy_around(data), "pytorch-legacy");
});
