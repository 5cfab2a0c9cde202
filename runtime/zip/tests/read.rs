//! Tensors inside zip members, read through the core's `read_tensor`: stored members
//! viewed in place, deflated ones streamed, CRC-32 checked, bounds enforced.

use std::io::Write;
use std::sync::Arc;

use tensorfmt_core::read::{read_all, read_tensor, ReadOptions};
use tensorfmt_core::sink::{OwnedSink, ViewSink};
use tensorfmt_core::{
    ByteOrder, Bytes, DType, DataLocation, ErrorKind, Limits, Order, Source, TensorInfo,
};
use tensorfmt_zip::{location, member_of, Compression, ZipIndex, ZipWriter};

fn range_info(name: &str, offset: u64, len: u64) -> TensorInfo {
    TensorInfo::dense(
        name,
        DType::U8,
        vec![len],
        Order::C,
        ByteOrder::Little,
        DataLocation::Range { offset, len },
    )
    .unwrap()
}

/// A zip holding `a` (stored, 64-aligned) and `b` (deflated), each 16 header bytes
/// followed by 1000 payload bytes.
fn zip_file() -> (Vec<u8>, Vec<u8>) {
    let payload: Vec<u8> = (0..1000u32).map(|i| (i * 7 % 251) as u8).collect();
    let mut content = vec![b'H'; 16];
    content.extend_from_slice(&payload);
    let mut w = ZipWriter::new(std::io::Cursor::new(Vec::new()));
    w.start_member("a.npy", Compression::Stored, 64).unwrap();
    w.write_all(&content).unwrap();
    w.start_member("b.npy", Compression::Deflate, 0).unwrap();
    w.write_all(&content).unwrap();
    (w.finish().unwrap().into_inner(), payload)
}

fn member_infos(file: &[u8]) -> Vec<TensorInfo> {
    let idx = Arc::new(ZipIndex::read(&Bytes::Owned(file.into()), &Limits::default()).unwrap());
    idx.members()
        .iter()
        .map(|m| {
            let mut i = range_info(m.name.trim_end_matches(".npy"), 0, 1000);
            i.location = location(&idx, m, 16, 1000);
            i
        })
        .collect()
}

#[test]
fn zip_members_read_from_memory_and_stream() {
    let (file, payload) = zip_file();
    let infos = member_infos(&file);
    let opts = ReadOptions {
        chunk_size: 100,
        ..Default::default()
    };
    let mem = Source::from_bytes(file.clone());
    let mut s = ViewSink::default();
    read_all(&mem, &infos, &mut s, &opts).unwrap();
    assert!(s.tensors[0].data.is_mapped());
    assert!(!s.tensors[1].data.is_mapped());
    for t in &s.tensors {
        assert_eq!(t.data.as_bytes(), &payload[..], "{}", t.info.name);
    }
    let stream = Source::from_reader(std::io::Cursor::new(file)).unwrap();
    let mut s = OwnedSink::default();
    read_all(&stream, &infos, &mut s, &opts).unwrap();
    for t in &s.tensors {
        assert_eq!(t.data.as_bytes(), &payload[..], "{}", t.info.name);
    }
}

#[test]
fn zip_checksums_are_verified() {
    let (file, _) = zip_file();
    let mut infos = member_infos(&file);
    for info in &mut infos {
        let (m, skip, len) = member_of(&info.location).unwrap();
        let mut m = m.clone();
        m.crc32 ^= 1;
        // A member of no index: located in an index of its own.
        info.location = location(&Arc::new(ZipIndex::default()), &m, skip, len);
    }
    for src in [
        Source::from_bytes(file.clone()).with_path("m.npz"),
        Source::from_reader(std::io::Cursor::new(file.clone()))
            .unwrap()
            .with_path("m.npz"),
    ] {
        for info in &infos {
            let mut s = OwnedSink::default();
            let e = read_tensor(&src, info, &mut s, &ReadOptions::default()).unwrap_err();
            assert!(matches!(e.kind, ErrorKind::Checksum { .. }), "{e}");
            assert!(e.to_string().contains("m.npz"), "{e}");
            assert!(
                e.location.entry.as_deref().unwrap().contains(&info.name),
                "{e}"
            );
            let opts = ReadOptions {
                verify_checksums: false,
                ..Default::default()
            };
            read_tensor(&src, info, &mut s, &opts).unwrap();
        }
    }
}

#[test]
fn zip_tensor_beyond_member_is_an_error() {
    let (file, _) = zip_file();
    let mut infos = member_infos(&file);
    for info in &mut infos {
        let (m, _, len) = member_of(&info.location).unwrap();
        info.location = location(&Arc::new(ZipIndex::default()), m, 17, len);
    }
    let src = Source::from_bytes(file);
    for info in &infos {
        let mut s = OwnedSink::default();
        let e = read_tensor(&src, info, &mut s, &ReadOptions::default()).unwrap_err();
        assert!(matches!(e.kind, ErrorKind::Truncated { .. }), "{e}");
    }
}

#[test]
fn a_tensor_holds_its_archive_index_and_the_member_position() {
    let (file, _) = zip_file();
    let idx = Arc::new(ZipIndex::read(&Bytes::Owned(file.into()), &Limits::default()).unwrap());
    let b = &idx.members()[1];
    assert_eq!(idx.position(b), Some(1));
    let loc = location(&idx, b, 16, 1000);
    let (index, part, skip, len) = loc.encoded::<ZipIndex>().unwrap();
    assert!(std::ptr::eq(index, &*idx));
    assert_eq!((part, skip, len), (1, 16, 1000));
    assert_eq!(member_of(&loc).unwrap(), (b, 16, 1000));
    // An equal member that is not the index's own value is not found by position, and
    // is located in an index of its own, reading the same bytes.
    let copy = b.clone();
    assert_eq!(idx.position(&copy), None);
    let apart = location(&idx, &copy, 16, 1000);
    assert_eq!(member_of(&apart).unwrap(), (&copy, 16, 1000));
    assert_ne!(apart, loc);
}
