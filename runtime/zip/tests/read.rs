//! Tensors inside zip members, read through the core's `read_tensor`: stored members
//! viewed in place, deflated ones streamed, CRC-32 checked, bounds enforced.

use std::io::Write;
use std::sync::Arc;

use tensorfmt_core::read::{read_all, read_tensor, ReadOptions};
use tensorfmt_core::sink::{OwnedSink, ViewSink};
use tensorfmt_core::{
    ByteOrder, Bytes, DType, DataLocation, ErrorKind, Limits, Order, Source, TensorInfo,
};
use tensorfmt_zip::{location, Compression, ZipIndex, ZipMember, ZipWriter};

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
    let idx = ZipIndex::read(&Bytes::Owned(file.into()), &Limits::default()).unwrap();
    idx.members()
        .iter()
        .map(|m| {
            let mut i = range_info(m.name.trim_end_matches(".npy"), 0, 1000);
            i.location = location(m.clone(), 16, 1000);
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
        let (m, skip, len) = info.location.encoded::<ZipMember>().unwrap();
        let mut m = m.clone();
        m.crc32 ^= 1;
        info.location = location(Arc::new(m), skip, len);
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
        let (m, _, len) = info.location.encoded::<ZipMember>().unwrap();
        info.location = location(Arc::new(m.clone()), 17, len);
    }
    let src = Source::from_bytes(file);
    for info in &infos {
        let mut s = OwnedSink::default();
        let e = read_tensor(&src, info, &mut s, &ReadOptions::default()).unwrap_err();
        assert!(matches!(e.kind, ErrorKind::Truncated { .. }), "{e}");
    }
}
