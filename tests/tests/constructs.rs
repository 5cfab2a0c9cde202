//! The construct fixtures of the code generator (`codegen/tests/constructs/*.fmt`, compiled
//! by this crate's build script as a user's build script would), exercised on bytes: each
//! read from bytes laid out by hand as the fixture describes them, refused where a check
//! fails, and written then read back where the format is writable.

use std::io::Cursor as IoCursor;

use tensorfmt_runtime::gen as rt;

/// `construct!(module, "fixture")`: the code generated for `constructs/fixture.fmt`.
macro_rules! construct {
    ($m:ident, $fixture:literal) => {
        pub mod $m {
            include!(concat!(env!("OUT_DIR"), "/constructs/", $fixture, ".rs"));
        }
    };
}
construct!(numbers_fmt, "numbers");
construct!(pydict_fmt, "pydict");
construct!(json_fmt, "json");
construct!(nested_fmt, "nested");
construct!(zip_members_fmt, "zip_members");
construct!(zip_pickle_fmt, "zip_pickle");
construct!(file_pickles_fmt, "file_pickles");
construct!(protobuf_fmt, "protobuf");
construct!(kv_records_fmt, "kv_records");
construct!(kv_lmdb_fmt, "kv_lmdb");
construct!(repeat_count_fmt, "repeat_count");
construct!(kv_open_fmt, "kv_open");
construct!(kv_values_fmt, "kv_values");
construct!(cond_width_given_fmt, "cond_width_given");
construct!(repeat_until_eof_fmt, "repeat_until_eof");
construct!(kv_names_fmt, "kv_names");
construct!(cond_width_repeat_fmt, "cond_width_repeat");
construct!(rest_text_fmt, "rest_text");
construct!(file_without_tensors_fmt, "file_without_tensors");
construct!(repeat_sized_fmt, "repeat_sized");
construct!(message_exprs_fmt, "message_exprs");
construct!(pickle_exprs_fmt, "pickle_exprs");
construct!(message_defaults_fmt, "message_defaults");
construct!(kv_record_fields_fmt, "kv_record_fields");
construct!(tagged_union_fmt, "tagged_union");
construct!(record_places_fmt, "record_places");
construct!(read_only_fmt, "read_only");
construct!(gguf_like_fmt, "gguf_like");
construct!(write_align_fmt, "write_align");
construct!(pickle_arrays_fmt, "pickle_arrays");
construct!(detect_magic_any_fmt, "detect_magic_any");
construct!(widen_fmt, "widen");

/// One tensor as read: name, dtype, shape, C-order element bytes.
type Read = (String, rt::DType, Vec<u64>, Vec<u8>);

/// Indexes `bytes` (as file `name`) with `desc` and reads every tensor whole.
fn read(desc: &rt::FormatDesc, name: &str, bytes: &[u8]) -> rt::Result<Vec<Read>> {
    let src = rt::Source::from_bytes(bytes.to_vec()).with_path(name);
    let infos = (desc.index)(&src, &rt::Limits::default())?;
    let mut sink = tensorfmt_runtime::sink::OwnedSink::new();
    tensorfmt_runtime::read::read_all(&src, &infos, &mut sink, &Default::default())?;
    Ok(sink
        .into_tensors()
        .into_iter()
        .map(|t| {
            let bytes = t.data.as_bytes().to_vec();
            (t.info.name, t.info.dtype, t.info.shape, bytes)
        })
        .collect())
}

/// The error of indexing `bytes` with `desc`, as text.
fn refused(desc: &rt::FormatDesc, bytes: &[u8]) -> String {
    let src = rt::Source::from_bytes(bytes.to_vec()).with_path("bad.bin");
    match (desc.index)(&src, &rt::Limits::default()) {
        Ok(t) => panic!("{} accepted bad bytes: {t:?}", desc.name),
        Err(e) => e.to_string(),
    }
}

/// Writes `tensors` with `desc`'s generated writer into memory.
fn write(desc: &rt::FormatDesc, tensors: &[Read]) -> rt::Result<Vec<u8>> {
    write_with(desc, tensors, &rt::WriteOptions::default())
}

/// [`write`] with the save's `options`.
fn write_with(
    desc: &rt::FormatDesc,
    tensors: &[Read],
    options: &rt::WriteOptions,
) -> rt::Result<Vec<u8>> {
    let mut out = IoCursor::new(Vec::new());
    let mut w = (desc.writer)(Box::new(&mut out), options)?;
    for (name, dtype, shape, bytes) in tensors {
        let meta = rt::TensorMeta {
            name: name.clone(),
            dtype: *dtype,
            shape: shape.clone(),
            order: rt::Order::C,
            byte_order: rt::ByteOrder::Little,
        };
        w.add(&meta, rt::Payload::Bytes(bytes))?;
    }
    w.finish()?;
    Ok(out.into_inner())
}

fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn t(name: &str, dtype: rt::DType, shape: &[u64], bytes: Vec<u8>) -> Read {
    (name.to_string(), dtype, shape.to_vec(), bytes)
}

/// A `numbers` file: version 1 (a 2-byte note length) or 2 (4 bytes), big-endian.
fn numbers_file(version: u8, flags: u8, kind: u8, count: u32, data: &[u8]) -> Vec<u8> {
    let mut v = b"NUM".to_vec();
    v.extend_from_slice(&[version, flags, kind]);
    if version == 1 {
        v.extend_from_slice(&1u16.to_be_bytes());
    } else {
        v.extend_from_slice(&1u32.to_be_bytes());
    }
    v.push(b'n');
    v.extend_from_slice(&count.to_be_bytes());
    v.extend_from_slice(data);
    v
}

#[test]
fn numbers_read_either_width_and_check_their_constants() {
    let data = f32s(&[1.5, -2.0]);
    let desc = &numbers_fmt::numbers::DESC;
    assert_eq!(
        read(desc, "a.num", &numbers_file(1, 0, 1, 2, &data)).unwrap(),
        vec![t("a", rt::DType::F32, &[2], data.clone())]
    );
    let v2 = numbers_file(2, 0, 2, 2, &data);
    assert_eq!(read(desc, "b.num", &v2).unwrap()[0].1, rt::DType::I32);
    assert!((desc.detect)(
        &rt::Source::from_bytes(v2),
        &Default::default()
    ));
    for (bad, field) in [
        (numbers_file(3, 0, 1, 2, &data), "version"),
        (numbers_file(1, 1, 1, 2, &data), "flags"),
        (numbers_file(1, 0, 9, 2, &data), "kind"),
        (numbers_file(1, 0, 1, 9, &data), "9"),
    ] {
        let e = refused(desc, &bad);
        assert!(e.contains(field), "{field}: {e}");
    }
    // Written: version 1, the implied flags, the dtype's code, the count from the shape.
    let tensors = vec![t("x", rt::DType::I32, &[3], vec![1; 12])];
    let bytes = write(desc, &tensors).unwrap();
    assert_eq!(bytes, numbers_file(1, 0, 2, 3, &[1; 12]));
}

/// A `pyhdr` file: the length, the literal padded with spaces and a newline to 16 bytes.
fn pyhdr(literal: &str, data: &[u8]) -> Vec<u8> {
    let mut h = literal.as_bytes().to_vec();
    while !(2 + h.len() + 1).is_multiple_of(16) {
        h.push(b' ');
    }
    h.push(b'\n');
    let mut out = (h.len() as u16).to_le_bytes().to_vec();
    out.extend_from_slice(&h);
    out.extend_from_slice(data);
    out
}

#[test]
fn a_python_literal_header_gives_dtype_shape_and_order() {
    let data: Vec<u8> = (0..24).collect();
    let bytes = pyhdr(
        "{'descr': '>f4', 'fortran_order': True, 'shape': (2, 3), 'comment': 'x'}",
        &data,
    );
    let src = rt::Source::from_bytes(bytes.clone()).with_path("p.pyh");
    let infos = pydict_fmt::pyhdr::index(&src, &Default::default()).unwrap();
    assert_eq!(infos[0].name, "p");
    assert_eq!(infos[0].dtype, rt::DType::F32);
    assert_eq!(infos[0].byte_order, rt::ByteOrder::Big);
    assert_eq!(infos[0].shape, vec![2, 3]);
    assert_eq!(infos[0].order(), Some(rt::Order::Fortran));
    // The optional key may be absent; an undeclared one is refused.
    let plain = pyhdr(
        "{'descr': '|u1', 'fortran_order': False, 'shape': (3,)}",
        b"abc",
    );
    assert_eq!(
        read(&pydict_fmt::pyhdr::DESC, "q.pyh", &plain).unwrap(),
        vec![t("q", rt::DType::U8, &[3], b"abc".to_vec())]
    );
    let missing = refused(
        &pydict_fmt::pyhdr::DESC,
        &pyhdr("{'descr': '|u1', 'shape': (3,)}", b"abc"),
    );
    assert!(missing.contains("fortran_order"), "{missing}");
}

#[test]
fn pydict_writes_what_it_reads() {
    let tensors = vec![t("x", rt::DType::F32, &[2, 2], f32s(&[1.0, 2.0, 3.0, 4.0]))];
    let bytes = write(&pydict_fmt::pyhdr::DESC, &tensors).unwrap();
    let header_len = u16::from_le_bytes([bytes[0], bytes[1]]) as usize;
    assert_eq!((2 + header_len) % 16, 0, "the data starts 16-byte aligned");
    assert_eq!(bytes[1 + header_len], b'\n');
    let mut back = read(&pydict_fmt::pyhdr::DESC, "x.pyh", &bytes).unwrap();
    back[0].0 = "x".into();
    assert_eq!(back, tensors);
}

/// A `jsonhdr` file: the JSON header padded with spaces to 8 bytes, then the data.
fn jsonhdr(header: &str, data: &[u8]) -> Vec<u8> {
    let mut h = header.as_bytes().to_vec();
    while !(4 + h.len()).is_multiple_of(8) {
        h.push(b' ');
    }
    let mut out = (h.len() as u32).to_le_bytes().to_vec();
    out.extend_from_slice(&h);
    out.extend_from_slice(data);
    out
}

#[test]
fn a_json_header_maps_one_tensor_per_entry() {
    let header = r#"{"version":2,"a":{"dtype":"F32","shape":[2],"offsets":[0,8]},"b":{"dtype":"I64","shape":[],"offsets":[8,16]}}"#;
    let mut data = f32s(&[1.0, 2.0]);
    data.extend_from_slice(&7i64.to_le_bytes());
    let got = read(&json_fmt::jsonhdr::DESC, "m.jh", &jsonhdr(header, &data)).unwrap();
    assert_eq!(
        got,
        vec![
            t("a", rt::DType::F32, &[2], data[..8].to_vec()),
            t("b", rt::DType::I64, &[], data[8..].to_vec()),
        ]
    );
    let past_end = refused(
        &json_fmt::jsonhdr::DESC,
        &jsonhdr(
            r#"{"a":{"dtype":"F32","shape":[4],"offsets":[0,16]}}"#,
            &data[..8],
        ),
    );
    assert!(past_end.contains("a"), "{past_end}");
    let bad_dtype = refused(
        &json_fmt::jsonhdr::DESC,
        &jsonhdr(
            r#"{"a":{"dtype":"F99","shape":[2],"offsets":[0,8]}}"#,
            &data,
        ),
    );
    assert!(bad_dtype.contains("F99"), "{bad_dtype}");
}

/// A `nested` file: the sized `Info` (a version record, a tag, `spare` bytes the window
/// skips), then the kind, the dimensions and the data.
fn nested_file(
    major: u8,
    tag: &[u8],
    spare: usize,
    kind: u16,
    dims: [u32; 2],
    data: &[u8],
) -> Vec<u8> {
    let mut info = vec![major, 0, tag.len() as u8];
    info.extend_from_slice(tag);
    info.extend(std::iter::repeat_n(0u8, spare));
    let mut v = (info.len() as u32).to_le_bytes().to_vec();
    v.extend_from_slice(&info);
    v.extend_from_slice(&kind.to_le_bytes());
    v.extend_from_slice(&dims[0].to_le_bytes());
    v.extend_from_slice(&dims[1].to_le_bytes());
    v.extend_from_slice(data);
    v
}

#[test]
fn nested_layouts_read_inside_their_window() {
    let desc = &nested_fmt::nested::DESC;
    let data: Vec<u8> = [1.0f64, 2.0].iter().flat_map(|x| x.to_le_bytes()).collect();
    assert_eq!(
        read(desc, "n.nst", &nested_file(1, b"v1", 3, 1, [2, 1], &data)).unwrap(),
        vec![t("n", rt::DType::F64, &[2, 1], data.clone())]
    );
    let e = refused(desc, &nested_file(2, b"v1", 0, 1, [2, 1], &data));
    assert!(e.contains("major"), "{e}");
    // A tag longer than the window is refused, not read past it.
    let mut bad = nested_file(1, b"v1", 0, 1, [2, 1], &data);
    bad[6] = 200;
    let e = refused(desc, &bad);
    assert!(e.contains("tag"), "{e}");
    // Written: the constants, the tag, the sized window, the given numbers.
    let tensors = vec![t("n", rt::DType::U8, &[1, 3], b"abc".to_vec())];
    assert_eq!(
        write(desc, &tensors).unwrap(),
        nested_file(1, b"v1", 0, 0, [1, 3], b"abc")
    );
}

/// Protobuf wire encoding, enough for the fixtures' messages.
fn varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}
fn field_varint(tag: u32, v: u64, out: &mut Vec<u8>) {
    varint(u64::from(tag) << 3, out);
    varint(v, out);
}
fn field_bytes(tag: u32, b: &[u8], out: &mut Vec<u8>) {
    varint((u64::from(tag) << 3) | 2, out);
    varint(b.len() as u64, out);
    out.extend_from_slice(b);
}

#[test]
fn protobuf_reads_raw_and_packed_data_and_writes_a_document() {
    // Tensor 1: raw i64 bytes; tensor 2: packed floats (dtype by its default, 1 = f32).
    let mut t1 = Vec::new();
    field_bytes(1, b"raw", &mut t1);
    field_bytes(2, &[2], &mut t1);
    field_varint(3, 2, &mut t1);
    let raw: Vec<u8> = [5i64, 6].iter().flat_map(|x| x.to_le_bytes()).collect();
    field_bytes(5, &raw, &mut t1);
    let mut t2 = Vec::new();
    field_bytes(1, b"packed", &mut t2);
    field_bytes(2, &[3], &mut t2);
    field_varint(4, 1, &mut t2);
    let floats = f32s(&[0.5, 1.5, 2.5]);
    field_bytes(6, &floats, &mut t2);
    let mut doc = Vec::new();
    field_varint(1, 3, &mut doc);
    field_bytes(3, &t1, &mut doc);
    field_bytes(3, &t2, &mut doc);
    let got = read(&protobuf_fmt::pbt::DESC, "d.pbt", &doc).unwrap();
    assert_eq!(
        got,
        vec![
            t("raw", rt::DType::I64, &[2], raw.clone()),
            t("packed", rt::DType::F32, &[3], floats.clone()),
        ]
    );
    let tensors = vec![
        t("raw", rt::DType::I64, &[2], raw),
        t("f", rt::DType::F32, &[3], floats),
    ];
    let written = write(&protobuf_fmt::pbt::DESC, &tensors).unwrap();
    assert_eq!(
        read(&protobuf_fmt::pbt::DESC, "w.pbt", &written).unwrap(),
        tensors
    );
}

/// One `Tensor` of a `message_exprs` document: name (absent when empty), dims, tags,
/// version, raw bytes.
fn msgx_tensor(name: &str, dims: &[u8], tags: &[&str], version: u64, raw: &[u8]) -> Vec<u8> {
    let mut m = Vec::new();
    if !name.is_empty() {
        field_bytes(1, name.as_bytes(), &mut m);
    }
    field_bytes(2, dims, &mut m);
    if !raw.is_empty() {
        field_bytes(4, raw, &mut m);
    }
    for tag in tags {
        field_bytes(5, tag.as_bytes(), &mut m);
    }
    field_varint(6, version, &mut m);
    m
}

#[test]
fn a_filter_and_a_name_read_repeated_fields_of_messages() {
    let data = f32s(&[1.0, 2.0]);
    let mut doc = Vec::new();
    for m in [
        msgx_tensor("kept", &[2], &["a", "b"], 7, &data),
        msgx_tensor("skipped", &[2], &["skip"], 1, &data),
        msgx_tensor("hidden", &[2], &["a", "hidden"], 1, &data),
        msgx_tensor("untagged", &[2], &[], 1, &data),
        msgx_tensor("scalar", &[], &["a"], 1, &data[..4]),
        msgx_tensor("", &[2], &["a"], 1, &data),
    ] {
        field_bytes(1, &m, &mut doc);
    }
    let got = read(&message_exprs_fmt::msgx::DESC, "d.msgx", &doc).unwrap();
    assert_eq!(
        got,
        vec![t("kept.v7.a", rt::DType::F32, &[2], data.clone())]
    );
    // Written with the rule's tags and version: read back under the name they make.
    let written = write(
        &message_exprs_fmt::msgx::DESC,
        &[t("w", rt::DType::F32, &[2], data.clone())],
    )
    .unwrap();
    assert_eq!(
        read(&message_exprs_fmt::msgx::DESC, "w.msgx", &written).unwrap(),
        vec![t("w.v2.w", rt::DType::F32, &[2], data)]
    );
}

/// One `Tensor` of a `message_defaults` document: name, one dimension, dtype, location and
/// version (each absent when `None`), raw bytes.
fn msgdef_tensor(
    name: &str,
    dim: u8,
    dtype: Option<u64>,
    location: Option<u64>,
    version: Option<u64>,
    raw: &[u8],
) -> Vec<u8> {
    let mut m = Vec::new();
    field_bytes(1, name.as_bytes(), &mut m);
    field_bytes(2, &[dim], &mut m);
    for (tag, v) in [(3, dtype), (5, location), (6, version)] {
        if let Some(v) = v {
            field_varint(tag, v, &mut m);
        }
    }
    field_bytes(4, raw, &mut m);
    m
}

#[test]
fn a_field_with_a_default_is_none_when_absent_and_reads_as_its_default() {
    let desc = &message_defaults_fmt::msgdef::DESC;
    let data = f32s(&[1.0, 2.0]);
    let mut doc = Vec::new();
    for m in [
        // Location absent (it reads as EXTERNAL, but `== none`): kept.
        msgdef_tensor("absent", 2, None, None, Some(7), &data),
        // INLINE given: kept; no version: `has` is false, the name shows the default.
        msgdef_tensor("inline", 1, Some(2), Some(0), None, &data),
        // EXTERNAL given: left out.
        msgdef_tensor("external", 2, None, Some(1), Some(7), &data),
    ] {
        field_bytes(1, &m, &mut doc);
    }
    assert_eq!(
        read(desc, "d.msgdef", &doc).unwrap(),
        vec![
            t("absent.v7", rt::DType::F32, &[2], data.clone()),
            t("inline.d3", rt::DType::I64, &[1], data.clone()),
        ]
    );
    // Written without a location and with version 5: kept, named by the version.
    let written = write(desc, &[t("w", rt::DType::F32, &[2], data.clone())]).unwrap();
    assert_eq!(
        read(desc, "w.msgdef", &written).unwrap(),
        vec![t("w.v5", rt::DType::F32, &[2], data)]
    );
}

#[test]
fn a_name_reads_items_lengths_and_arguments_of_pickled_values() {
    let desc = &pickle_exprs_fmt::pklx::DESC;
    let tensors = vec![
        t("m", rt::DType::F32, &[2, 3], f32s(&[0.0; 6])),
        t("v", rt::DType::I64, &[4], vec![0; 32]),
    ];
    let written = write(desc, &tensors).unwrap();
    // `path.<len(size)>.<size[0]>.<last(stride)>` and `h` for the hooks the writer gives.
    let names: Vec<String> = read(desc, "w.pklx", &written)
        .unwrap()
        .into_iter()
        .map(|r| r.0)
        .collect();
    assert_eq!(names, ["m.2.2.1h", "v.1.4.1h"]);
}

/// One record of a `kv_records` file: key and value lengths (u32 little-endian), then
/// the key and the value.
fn kv_record(key: &[u8], value: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&(key.len() as u32).to_le_bytes());
    out.extend_from_slice(&(value.len() as u32).to_le_bytes());
    out.extend_from_slice(key);
    out.extend_from_slice(value);
}

#[test]
fn kv_records_map_each_record_by_its_key_and_write_what_they_read() {
    // Entry `blob "{name}"`: a `Blob` message (dims, dtype code, raw data) per record.
    let floats = f32s(&[1.0, 2.0, 3.0, 4.0]);
    let mut a = Vec::new();
    field_varint(1, 2, &mut a);
    field_varint(1, 2, &mut a);
    field_varint(2, 1, &mut a);
    field_bytes(3, &floats, &mut a);
    let mut b = Vec::new();
    field_varint(1, 3, &mut b);
    field_varint(2, 2, &mut b);
    field_bytes(3, &[7, 8, 9], &mut b);
    let mut file = Vec::new();
    kv_record(b"weights", &a, &mut file);
    kv_record(b"bytes", &b, &mut file);
    let desc = &kv_records_fmt::kvrec::DESC;
    let mut got = read(desc, "db.kvr", &file).unwrap();
    got.sort();
    let mut expected = vec![
        t("weights", rt::DType::F32, &[2, 2], floats),
        t("bytes", rt::DType::U8, &[3], vec![7, 8, 9]),
    ];
    expected.sort();
    assert_eq!(got, expected);
    let written = write(desc, &expected).unwrap();
    let mut back = read(desc, "w.kvr", &written).unwrap();
    back.sort();
    assert_eq!(back, expected);
    // A record whose key length is 0 fails the layout's check.
    let mut bad = Vec::new();
    kv_record(b"", &a, &mut bad);
    assert!(refused(desc, &bad).contains("key_len"));
}

#[test]
fn a_kv_record_s_computed_fields_are_written_and_checked_on_read() {
    let desc = &kv_record_fields_fmt::kvsum::DESC;
    let floats = f32s(&[1.0, 2.0, 3.0, 4.0]);
    let tensors = vec![
        t("weights", rt::DType::F32, &[2, 2], floats),
        t("b", rt::DType::U8, &[3], vec![7, 8, 9]),
    ];
    let written = write(desc, &tensors).unwrap();
    // Each record: `KR`, version 1, key and value lengths, their sum `key_len * 31 +
    // value_len`, the key, the value.
    let u32_at = |b: &[u8], at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
    let (mut at, mut keys, mut sums) = (0, Vec::new(), Vec::new());
    while at < written.len() {
        let r = &written[at..];
        assert_eq!(&r[..3], b"KR\x01");
        let (key_len, value_len, sum) = (u32_at(r, 3), u32_at(r, 7), u32_at(r, 11));
        assert_eq!(sum, key_len * 31 + value_len);
        keys.push(r[15..15 + key_len as usize].to_vec());
        sums.push(at + 11);
        at += 15 + (key_len + value_len) as usize;
    }
    assert_eq!(at, written.len());
    assert_eq!(keys, [b"weights".to_vec(), b"b".to_vec()]);
    assert_eq!(read(desc, "w.kvs", &written).unwrap(), tensors);
    // A sum that does not match its lengths, or another version, is refused by name.
    let mut bad = written.clone();
    bad[sums[1]] ^= 1;
    let e = refused(desc, &bad);
    assert!(e.contains("sum"), "{e}");
    let mut bad = written;
    bad[2] = 2;
    let e = refused(desc, &bad);
    assert!(e.contains("version"), "{e}");
}

#[test]
fn kv_names_spelled_like_the_generated_code_s_own_map_every_entry() {
    // Entries `r`, `out` (a `Holder` of items), `value`, `src`, `limits`, mapped with
    // bindings `src`, `position`, `r`, `out`, `value`: a `Blob` is dims, dtype code, data, name.
    let blob = |dims: &[u64], code: u64, data: &[u8], name: &str| {
        let mut v = Vec::new();
        for &d in dims {
            field_varint(1, d, &mut v);
        }
        field_varint(2, code, &mut v);
        field_bytes(3, data, &mut v);
        if !name.is_empty() {
            field_bytes(4, name.as_bytes(), &mut v);
        }
        v
    };
    let floats = f32s(&[1.0, 2.0]);
    let mut holder = Vec::new();
    field_bytes(1, &blob(&[2], 1, &floats, "x"), &mut holder);
    field_bytes(1, &blob(&[1], 2, &[9], "y"), &mut holder);
    let mut file = Vec::new();
    kv_record(b"r/a", &blob(&[2], 1, &floats, ""), &mut file);
    kv_record(b"o/h", &holder, &mut file);
    kv_record(b"v/b", &blob(&[3], 2, &[1, 2, 3], ""), &mut file);
    kv_record(b"s/c", &blob(&[1], 2, &[4], ""), &mut file);
    kv_record(b"l/d", &blob(&[2], 2, &[5, 6], ""), &mut file);
    let desc = &kv_names_fmt::kvnames::DESC;
    let mut got = read(desc, "db.kvn", &file).unwrap();
    got.sort();
    let mut expected = vec![
        t("a", rt::DType::F32, &[2], floats.clone()),
        t("h.x", rt::DType::F32, &[2], floats),
        t("h.y", rt::DType::U8, &[1], vec![9]),
        t("b", rt::DType::U8, &[3], vec![1, 2, 3]),
        t("c", rt::DType::U8, &[1], vec![4]),
        t("d", rt::DType::U8, &[2], vec![5, 6]),
    ];
    expected.sort();
    assert_eq!(got, expected);
    // Written as records of entry `r` (the mapping with the write rule), read back alike.
    let written = write(desc, &expected).unwrap();
    let mut back = read(desc, "w.kvn", &written).unwrap();
    back.sort();
    assert_eq!(back, expected);
}

/// A `repeat_count` file: `REP1`, the record count, the records (name, dims,
/// begin and end in the payload), then the payload.
fn repeat_count_file(records: &[(&str, &[u64], u64, u64)], data: &[u8]) -> Vec<u8> {
    let mut v = b"REP1".to_vec();
    v.extend_from_slice(&(records.len() as u32).to_le_bytes());
    for (name, dims, begin, end) in records {
        v.push(name.len() as u8);
        v.extend_from_slice(name.as_bytes());
        v.push(dims.len() as u8);
        for d in *dims {
            v.extend_from_slice(&d.to_le_bytes());
        }
        v.extend_from_slice(&begin.to_le_bytes());
        v.extend_from_slice(&end.to_le_bytes());
    }
    v.extend_from_slice(data);
    v
}

#[test]
fn counted_records_read_by_a_field_named_count() {
    let data = f32s(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let file = repeat_count_file(&[("m", &[2, 2], 0, 16), ("v", &[2], 16, 24)], &data);
    let desc = &repeat_count_fmt::repcount::DESC;
    let got = read(desc, "r.rep", &file).unwrap();
    let expected = vec![
        t("m", rt::DType::F32, &[2, 2], data[..16].to_vec()),
        t("v", rt::DType::F32, &[2], data[16..].to_vec()),
    ];
    assert_eq!(got, expected);
    let written = write(desc, &expected).unwrap();
    assert_eq!(read(desc, "w.rep", &written).unwrap(), expected);
    // The count's check sees the field, not the reader's count of records.
    let mut bad = b"REP1".to_vec();
    bad.extend_from_slice(&5000u32.to_le_bytes());
    assert!(refused(desc, &bad).contains("count"));
}

/// Records whose dtype code sits where the file's list of records does (third field of
/// each): read from bytes laid out by hand, written back and read again.
#[test]
fn a_record_field_at_the_position_of_the_records_list_is_written_per_item() {
    let mut file = b"RCP1".to_vec();
    file.extend_from_slice(&2u32.to_le_bytes());
    for (name, code, dims, begin, end) in [
        ("w", 1u8, &[2u64, 2][..], 0u64, 16u64),
        ("i", 2, &[1], 16, 20),
    ] {
        file.push(name.len() as u8);
        file.extend_from_slice(name.as_bytes());
        file.push(code);
        file.push(dims.len() as u8);
        for d in dims {
            file.extend_from_slice(&d.to_le_bytes());
        }
        file.extend_from_slice(&begin.to_le_bytes());
        file.extend_from_slice(&end.to_le_bytes());
    }
    let data = f32s(&[1.0, 2.0, 3.0, 4.0]);
    file.extend_from_slice(&data);
    file.extend_from_slice(&7i32.to_le_bytes());
    let desc = &record_places_fmt::recplaces::DESC;
    let expected = vec![
        t("w", rt::DType::F32, &[2, 2], data.clone()),
        t("i", rt::DType::I32, &[1], 7i32.to_le_bytes().to_vec()),
    ];
    assert_eq!(read(desc, "r.rcp", &file).unwrap(), expected);
    let written = write(desc, &expected).unwrap();
    assert_eq!(written, file);
}

/// `detect magic any [...] at 0;` accepts each listed form of the first bytes (and only
/// those: a form the list does not name, a prefix of one, or a file without the `T` of
/// the other rule is not detected); every detected file reads.
#[test]
fn detect_magic_any_accepts_each_listed_form() {
    let desc = &detect_magic_any_fmt::anymagic::DESC;
    let file = |head: &[u8; 5], tag: u8| {
        let mut v = head.to_vec();
        v.push(tag);
        v.extend_from_slice(&1u32.to_le_bytes());
        v.extend_from_slice(&f32s(&[2.5]));
        v
    };
    let detected =
        |bytes: Vec<u8>| (desc.detect)(&rt::Source::from_bytes(bytes), &Default::default());
    for head in [b"AM\x01..", b"AM\x02..", b"AMX\x00."] {
        let bytes = file(head, b'T');
        assert!(detected(bytes.clone()), "{head:?}");
        let expected = vec![t("data", rt::DType::F32, &[1], f32s(&[2.5]))];
        assert_eq!(read(desc, "a.am", &bytes).unwrap(), expected);
        assert!(!detected(file(head, b'U')), "{head:?} without the T");
    }
    for head in [b"AM\x03..", b"AMX\x01.", b"XM\x01.."] {
        assert!(!detected(file(head, b'T')), "{head:?}");
    }
    assert!(!detected(b"AM".to_vec()));
}

/// A format declared `read_only;` reads its tensors and refuses to write, by name.
#[test]
fn a_read_only_format_reads_and_refuses_to_write() {
    let mut file = b"RO01".to_vec();
    file.extend_from_slice(&2u32.to_le_bytes());
    for (name, dims, kind, offset, nbytes) in [
        ("a", &[3u64][..], 0u8, 0u64, 12u64),
        ("b", &[1, 1], 1, 12, 4),
    ] {
        file.extend_from_slice(&(name.len() as u16).to_le_bytes());
        file.extend_from_slice(name.as_bytes());
        file.push(dims.len() as u8);
        for d in dims {
            file.extend_from_slice(&d.to_le_bytes());
        }
        file.push(kind);
        file.extend_from_slice(&offset.to_le_bytes());
        file.extend_from_slice(&nbytes.to_le_bytes());
    }
    let data = f32s(&[1.0, 2.0, 3.0]);
    file.extend_from_slice(&data);
    file.extend_from_slice(&(-5i32).to_le_bytes());
    let desc = &read_only_fmt::rofmt::DESC;
    let expected = vec![
        t("a", rt::DType::F32, &[3], data.clone()),
        t("b", rt::DType::I32, &[1, 1], (-5i32).to_le_bytes().to_vec()),
    ];
    assert_eq!(read(desc, "r.ro", &file).unwrap(), expected);
    let e = write(desc, &expected).unwrap_err().to_string();
    assert!(e.contains("rofmt is read-only"), "{e}");
}

/// A zip format that maps no tensor: an archive of it lists none, an empty one is
/// written, and adding a tensor is an error naming the format.
#[test]
fn a_zip_that_maps_no_tensor_lists_none_and_refuses_to_write_one() {
    let desc = &zip_members_fmt::vecnotes::DESC;
    let empty = write(desc, &[]).unwrap();
    assert_eq!(read(desc, "n.vecnotes", &empty).unwrap(), vec![]);
    let one = [t("x", rt::DType::F32, &[1], f32s(&[1.0]))];
    let e = write(desc, &one).unwrap_err().to_string();
    assert!(e.contains("vecnotes"), "{e}");
    assert!(refused(desc, b"not a zip").contains("zip"));
}

/// A `cond_width_given` file: `CW`, the width flag, the dtype code, the dimensions as
/// `u16` or (`wide`) `u32`, the data.
fn cond_width_file(wide: bool, kind: u8, rows: u32, cols: u32, data: &[u8]) -> Vec<u8> {
    let mut v = b"CW".to_vec();
    v.extend_from_slice(&[u8::from(wide), kind]);
    for d in [rows, cols] {
        if wide {
            v.extend_from_slice(&d.to_le_bytes());
        } else {
            v.extend_from_slice(&(d as u16).to_le_bytes());
        }
    }
    v.extend_from_slice(data);
    v
}

#[test]
fn a_conditional_width_given_by_the_mapping_follows_the_shape_written() {
    let desc = &cond_width_given_fmt::condwidth::DESC;
    let data = f32s(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    // Read from bytes laid out by hand, either width.
    let narrow = cond_width_file(false, 2, 2, 3, &data);
    let expected = vec![t("n", rt::DType::F32, &[2, 3], data.clone())];
    assert_eq!(read(desc, "n.cw", &narrow).unwrap(), expected);
    let wide = cond_width_file(true, 2, 2, 3, &data);
    assert_eq!(read(desc, "n.cw", &wide).unwrap(), expected);
    // Written: small dimensions as u16, exactly the bytes above.
    let tensors = vec![t("x", rt::DType::F32, &[2, 3], data.clone())];
    assert_eq!(write(desc, &tensors).unwrap(), narrow);
    // A dimension past u16 makes the writer choose u32.
    let big = vec![t("x", rt::DType::U8, &[70_000, 1], vec![7; 70_000])];
    let bytes = write(desc, &big).unwrap();
    assert_eq!(bytes[..12], cond_width_file(true, 1, 70_000, 1, &[])[..]);
    assert_eq!(read(desc, "x.cw", &bytes).unwrap(), big);
    let bad = refused(desc, &cond_width_file(false, 2, 2, 3, &data)[..0]);
    assert!(bad.contains("magic"), "{bad}");
    let mut flag = narrow.clone();
    flag[2] = 2;
    assert!(refused(desc, &flag).contains("wide"));
}

/// A `cond_width_repeat` file: `CR`, the width flag, the number of dimensions, the
/// dimensions as `u16` or (`wide`) `u32`, the data.
fn cond_repeat_file(wide: bool, dims: &[u32], data: &[u8]) -> Vec<u8> {
    let mut v = b"CR".to_vec();
    v.extend_from_slice(&[u8::from(wide), dims.len() as u8]);
    for d in dims {
        if wide {
            v.extend_from_slice(&d.to_le_bytes());
        } else {
            v.extend_from_slice(&(*d as u16).to_le_bytes());
        }
    }
    v.extend_from_slice(data);
    v
}

#[test]
fn a_repeated_conditional_width_reads_and_writes_each_item_at_the_width_chosen() {
    let desc = &cond_width_repeat_fmt::condrep::DESC;
    // Read from bytes laid out by hand, either width.
    let data: Vec<u8> = (0..6).collect();
    let expected = vec![t("m", rt::DType::U8, &[2, 3], data.clone())];
    let narrow = cond_repeat_file(false, &[2, 3], &data);
    assert_eq!(read(desc, "m.cwr", &narrow).unwrap(), expected);
    let wide = cond_repeat_file(true, &[2, 3], &data);
    assert_eq!(read(desc, "m.cwr", &wide).unwrap(), expected);
    // Written: two dimensions as u16, exactly the bytes above; three as u32.
    assert_eq!(write(desc, &expected).unwrap(), narrow);
    let cube = vec![t("c", rt::DType::U8, &[1, 2, 3], data.clone())];
    let bytes = write(desc, &cube).unwrap();
    assert_eq!(bytes, cond_repeat_file(true, &[1, 2, 3], &data));
    assert_eq!(read(desc, "c.cwr", &bytes).unwrap(), cube);
    // Narrow dimensions are counted at two bytes each: four fit in eight bytes, a count
    // past the end is refused.
    let four = cond_repeat_file(false, &[1, 1, 1, 1], &[7]);
    let one = vec![t("f", rt::DType::U8, &[1, 1, 1, 1], vec![7])];
    assert_eq!(read(desc, "f.cwr", &four).unwrap(), one);
    let mut cut = narrow.clone();
    cut[3] = 5;
    cut.truncate(4 + 2 * 4);
    let e = refused(desc, &cut);
    assert!(e.contains("dims"), "{e}");
}

/// A `rest_text` file: `RT`, the label's length and text, the header's length, version
/// and JSON text, the data.
fn rest_text_file(label: &str, version: u8, json: &str, data: &[u8]) -> Vec<u8> {
    let mut v = b"RT".to_vec();
    v.push(label.len() as u8);
    v.extend_from_slice(label.as_bytes());
    v.extend_from_slice(&(json.len() as u32 + 1).to_le_bytes());
    v.push(version);
    v.extend_from_slice(json.as_bytes());
    v.extend_from_slice(data);
    v
}

#[test]
fn text_and_a_codec_over_the_remaining_bytes_of_a_record() {
    let desc = &rest_text_fmt::resttext::DESC;
    let data = f32s(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let json = r#"{"dtype":"F32","shape":[2,3]}"#;
    let file = rest_text_file("weights", 1, json, &data);
    let expected = vec![t("weights", rt::DType::F32, &[2, 3], data.clone())];
    assert_eq!(read(desc, "w.rt", &file).unwrap(), expected);
    // Written: the same bytes, each text filling its window.
    assert_eq!(write(desc, &expected).unwrap(), file);
    // The header's text ends with its window, not with the file.
    let e = refused(
        desc,
        &rest_text_file("w", 1, r#"{"dtype":"F32","shape":[2,"#, &data),
    );
    assert!(e.contains("header"), "{e}");
    assert!(refused(desc, &rest_text_file("w", 2, json, &data)).contains("version"));
}

#[test]
fn a_file_format_that_maps_no_tensor_lists_none_and_refuses_to_write_one() {
    use file_without_tensors_fmt::notensors;
    let desc = &notensors::DESC;
    let bytes = b"NT\x01\x07\x00\x00\x00";
    assert_eq!(read(desc, "h.nt", bytes).unwrap(), vec![]);
    // Its layout is read and written on its own.
    let src = rt::Source::from_bytes(bytes.to_vec());
    let mut c = rt::Cursor::new(src.data(), src.location());
    let h = notensors::Header::read(&mut c, &rt::Limits::default()).unwrap();
    assert_eq!((h.version, h.count), (1, 7));
    let mut out = Vec::new();
    notensors::Header::write(&mut out, h.count).unwrap();
    assert_eq!(out, bytes);
    assert_eq!(write(desc, &[]).unwrap(), Vec::<u8>::new());
    let one = [t("x", rt::DType::F32, &[1], f32s(&[1.0]))];
    let e = write(desc, &one).unwrap_err().to_string();
    assert!(e.contains("notensors"), "{e}");
}

/// A `repeat_until_eof` file: `EIX1`, the index length, the records (name, dims
/// length, dims, begin and end in the payload) until the index ends, then the payload.
fn until_eof_file(records: &[(&str, &[u32], u64, u64)], data: &[u8]) -> Vec<u8> {
    let mut index = Vec::new();
    for (name, dims, begin, end) in records {
        index.push(name.len() as u8);
        index.extend_from_slice(name.as_bytes());
        index.push((dims.len() * 4) as u8);
        for d in *dims {
            index.extend_from_slice(&d.to_le_bytes());
        }
        index.extend_from_slice(&begin.to_le_bytes());
        index.extend_from_slice(&end.to_le_bytes());
    }
    let mut v = b"EIX1".to_vec();
    v.extend_from_slice(&(index.len() as u32).to_le_bytes());
    v.extend_from_slice(&index);
    v.extend_from_slice(data);
    v
}

#[test]
fn records_repeat_until_their_window_ends() {
    let desc = &repeat_until_eof_fmt::eofidx::DESC;
    let data = f32s(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]);
    let records: [(&str, &[u32], u64, u64); 3] = [
        ("m", &[2, 2], 0, 16),
        ("s", &[], 16, 20),
        ("v", &[2], 20, 28),
    ];
    let file = until_eof_file(&records, &data);
    let expected = vec![
        t("m", rt::DType::F32, &[2, 2], data[..16].to_vec()),
        t("s", rt::DType::F32, &[], data[16..20].to_vec()),
        t("v", rt::DType::F32, &[2], data[20..].to_vec()),
    ];
    assert_eq!(read(desc, "r.eix", &file).unwrap(), expected);
    // Written: the same bytes, records and dimensions filling their windows.
    assert_eq!(write(desc, &expected).unwrap(), file);
    // No tensors: an empty index.
    assert_eq!(
        read(desc, "e.eix", &until_eof_file(&[], &[])).unwrap(),
        vec![]
    );
    // A record cut by the end of the index window is refused, not read past it.
    let mut cut = file.clone();
    cut[4] -= 1;
    let e = refused(desc, &cut);
    assert!(e.contains("records"), "{e}");
}

#[test]
fn every_writable_construct_reads_back_what_it_wrote() {
    let one = vec![t("x", rt::DType::F32, &[3], f32s(&[1.0, 2.0, 3.0]))];
    let two = vec![
        t("a", rt::DType::F32, &[2], f32s(&[1.0, 2.0])),
        t("b", rt::DType::F32, &[2], f32s(&[3.0, 4.0])),
    ];
    let cases: [(&rt::FormatDesc, &[Read]); 5] = [
        (&zip_members_fmt::vecs::DESC, &two),
        (&zip_members_fmt::vec1::DESC, &one),
        (&json_fmt::jsonhdr::DESC, &two),
        (&numbers_fmt::numbers::DESC, &one),
        (&protobuf_fmt::pbt::DESC, &one),
    ];
    for (desc, tensors) in cases {
        let bytes = write(desc, tensors).unwrap_or_else(|e| panic!("{}: {e}", desc.name));
        let back = read(desc, "x.out", &bytes).unwrap_or_else(|e| panic!("{}: {e}", desc.name));
        assert_eq!(back, tensors, "{}", desc.name);
    }
}

/// The kv engine's open arguments reach the runtime: `OPEN` holds them, and `open_db`
/// (the format's `DbDesc::open`) creates and reopens databases with them.
#[test]
fn kv_open_arguments_open_the_databases() {
    use kv_open_fmt::{kvo, kvp};
    assert_eq!(kvo::OPEN.map_size, Some(1 << 30));
    assert_eq!(
        (
            kvp::OPEN.write_buffer_size,
            kvp::OPEN.max_open_files,
            kvp::OPEN.block_size
        ),
        (Some(4 << 20), Some(64), Some(4096))
    );
    let tmp = tempfile::tempdir().unwrap();
    for (desc, dir) in [(&kvo::DESC, "db.lmdb"), (&kvp::DESC, "db.leveldb")] {
        let db = desc.db.as_ref().unwrap();
        let path = tmp.path().join(dir);
        let mut d = (db.open)(&path, rt::kv::Mode::New).unwrap();
        {
            let mut t = d.transaction().unwrap();
            t.put(b"w", &[]).unwrap();
            t.commit().unwrap();
        }
        d.close().unwrap();
        let mut d = (db.open)(&path, rt::kv::Mode::Read).unwrap();
        let c = d.cursor().unwrap();
        assert_eq!(c.key(), b"w", "{}", desc.name);
    }
}

/// A `kv_values` blob: dims, data, kind, text, part and parts as given.
fn kv_blob(
    dims: &[u64],
    data: &[u8],
    kind: &str,
    text: &[u8],
    part: Option<(u64, u64)>,
) -> Vec<u8> {
    let mut b = Vec::new();
    for &d in dims {
        field_varint(1, d, &mut b);
    }
    field_bytes(2, data, &mut b);
    field_bytes(3, kind.as_bytes(), &mut b);
    field_bytes(4, text, &mut b);
    if let Some((id, n)) = part {
        field_varint(5, id, &mut b);
        field_varint(6, n, &mut b);
    }
    b
}

#[test]
fn kv_values_join_their_parts_and_records_tell_dataset_items_from_blobs() {
    // A dataset record of two items, a tensor blob, a text in two parts (in any order).
    let mut row = Vec::new();
    field_bytes(1, &kv_blob(&[2], &[1, 2], "tensor", b"", None), &mut row);
    field_bytes(1, &kv_blob(&[1], &[3], "tensor", b"", None), &mut row);
    let mut file = Vec::new();
    kv_record(b"row:a", &row, &mut file);
    kv_record(
        b"w",
        &kv_blob(&[3], &[4, 5, 6], "tensor", b"", None),
        &mut file,
    );
    kv_record(
        b"s",
        &kv_blob(&[], b"", "text", b"wor", Some((1, 2))),
        &mut file,
    );
    kv_record(
        b"s",
        &kv_blob(&[], b"", "text", b"hel", Some((0, 2))),
        &mut file,
    );
    let desc = &kv_values_fmt::kvval::DESC;
    let got = read(desc, "db.kvv", &file).unwrap();
    assert_eq!(
        got,
        vec![
            t("a/0", rt::DType::U8, &[2], vec![1, 2]),
            t("a/1", rt::DType::U8, &[1], vec![3]),
            t("w", rt::DType::U8, &[3], vec![4, 5, 6]),
        ]
    );
    let src = rt::Source::from_bytes(file.clone()).with_path("db.kvv");
    let mapped = (desc.db.unwrap().map)(&src, &rt::Limits::default()).unwrap();
    let records: Vec<_> = mapped
        .records
        .iter()
        .map(|r| (mapped.tensors_of(r).to_vec(), r.items))
        .collect();
    assert_eq!(records, vec![(vec![0, 1], true), (vec![2], false)]);
    let values = rt::kv::join_values(&src, mapped.values).unwrap();
    assert_eq!(values.len(), 1);
    assert_eq!(
        (values[0].name.as_str(), &values[0].data[..]),
        ("s", &b"helwor"[..])
    );
    // A part beyond the number of parts, a part missing.
    let mut bad = Vec::new();
    kv_record(
        b"s",
        &kv_blob(&[], b"", "text", b"x", Some((5, 2))),
        &mut bad,
    );
    let src = rt::Source::from_bytes(bad).with_path("bad.kvv");
    let mapped = (desc.db.unwrap().map)(&src, &rt::Limits::default()).unwrap();
    let e = rt::kv::join_values(&src, mapped.values)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("chunk id 5 of s is not below its 2 chunks"),
        "{e}"
    );
    let mut short = Vec::new();
    kv_record(
        b"s",
        &kv_blob(&[], b"", "text", b"x", Some((0, 3))),
        &mut short,
    );
    let src = rt::Source::from_bytes(short).with_path("short.kvv");
    let mapped = (desc.db.unwrap().map)(&src, &rt::Limits::default()).unwrap();
    let e = rt::kv::join_values(&src, mapped.values)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("Data size mismatch for blob s. Expected: 3 Read: 1"),
        "{e}"
    );
}

/// Reads a `T` of `repeat_sized` from `bytes` with `read`.
fn read_layout<T>(
    bytes: &[u8],
    read: fn(&mut rt::Cursor<'_>, &rt::Limits) -> rt::Result<T>,
) -> rt::Result<T> {
    let src = rt::Source::from_bytes(bytes.to_vec());
    let mut c = rt::Cursor::new(src.data(), src.location());
    read(&mut c, &rt::Limits::default())
}

#[test]
fn repeated_text_bytes_and_dicts_of_a_size_each_read_and_write_item_by_item() {
    use repeat_sized_fmt::repsized::{Entry, Table};
    // `RS`, two items, each name 4 bytes, each tag 2, each JSON entry 8, each literal 9.
    let mut bytes = b"RS\x02\x04".to_vec();
    bytes.extend_from_slice(b"abcdwxyz");
    bytes.extend_from_slice(b"\x01\x02\x03\x04");
    bytes.extend_from_slice(br#"{"id":1}{"id":2}"#);
    bytes.extend_from_slice(b"{'id': 3}{'id': 4}");
    let t = read_layout(&bytes, Table::read).unwrap();
    assert_eq!((t.n, t.width), (2, 4));
    assert_eq!(t.names, ["abcd", "wxyz"]);
    assert_eq!(t.tags, [vec![1, 2], vec![3, 4]]);
    let ids = |e: &[Entry]| e.iter().map(|e| e.id).collect::<Vec<_>>();
    assert_eq!(
        (ids(&t.entries), ids(&t.literals)),
        (vec![1, 2], vec![3, 4])
    );
    // Written: the same bytes.
    let mut out = Vec::new();
    Table::write(&mut out, &t.names, &t.tags, &t.entries, &t.literals).unwrap();
    assert_eq!(out, bytes);
    // An item that does not fill its size, or a list of another count, is refused.
    let short = ["abc".to_string(), "wxyz".to_string()];
    let e = Table::write(&mut Vec::new(), &short, &t.tags, &t.entries, &t.literals);
    let e = e.unwrap_err().to_string();
    assert!(e.contains("names is 3 bytes, but its size is 4"), "{e}");
    let e = Table::write(
        &mut Vec::new(),
        &t.names,
        &t.tags[..1],
        &t.entries,
        &t.literals,
    );
    let e = e.unwrap_err().to_string();
    assert!(e.contains("tags has 1 items, but its count is 2"), "{e}");
    let big = [Entry { id: 10 }, Entry { id: 2 }];
    let e = Table::write(&mut Vec::new(), &t.names, &t.tags, &big, &t.literals);
    assert!(e.unwrap_err().to_string().contains("entries"));
    // A name cut short by the end of the bytes is refused.
    let e = read_layout(&bytes[..7], Table::read)
        .unwrap_err()
        .to_string();
    assert!(e.contains("names"), "{e}");
}

#[test]
fn repeated_fields_a_write_rule_gives_are_laid_out_item_by_item() {
    use repeat_sized_fmt::repsized::Given;
    // `RG`, wide, two dimensions as big-endian u32, two u16 marks, two labels.
    let mut bytes = b"RG\x01\x02".to_vec();
    bytes.extend_from_slice(&70_000u32.to_be_bytes());
    bytes.extend_from_slice(&3u32.to_be_bytes());
    bytes.extend_from_slice(&[0, 7, 0, 9]);
    bytes.extend_from_slice(b"abcd");
    let mut out = Vec::new();
    assert_eq!(Given::write(&mut out).unwrap(), bytes.len() as u64);
    assert_eq!(out, bytes);
    let g = read_layout(&bytes, Given::read).unwrap();
    assert_eq!((g.wide, g.n), (1, 2));
    assert_eq!(g.dims, [70_000, 3]);
    assert_eq!(g.marks, [7, 9]);
    assert_eq!(g.labels, ["ab", "cd"]);
    // Narrow dimensions read at two bytes each.
    let mut narrow = b"RG\x00\x02\x00\x05\x00\x06".to_vec();
    narrow.extend_from_slice(&bytes[12..]);
    assert_eq!(read_layout(&narrow, Given::read).unwrap().dims, [5, 6]);
}

/// `tagged_union` text: its length (`u64`), its bytes.
fn tagged_text(v: &mut Vec<u8>, s: &str) {
    v.extend_from_slice(&(s.len() as u64).to_le_bytes());
    v.extend_from_slice(s.as_bytes());
}

/// Reads a `tagged_union` `File` from `bytes` under `limits`.
fn tagged_read(bytes: &[u8], limits: &rt::Limits) -> rt::Result<tagged_union_fmt::tagged::File> {
    let src = rt::Source::from_bytes(bytes.to_vec());
    let mut c = rt::Cursor::new(src.data(), src.location());
    tagged_union_fmt::tagged::File::read(&mut c, limits)
}

#[test]
fn tagged_values_read_the_case_their_tag_selects_and_write_it_back() {
    use tagged_union_fmt::tagged::{Array, ArrayItems, Kv, KvValue, Text};
    // `TAG1`, 4 records: an `f32`, a text, an array of `i16`, an array of arrays of text.
    let mut v = b"TAG1".to_vec();
    v.extend_from_slice(&4u64.to_le_bytes());
    tagged_text(&mut v, "scale");
    v.extend_from_slice(&2u32.to_le_bytes());
    v.extend_from_slice(&1.5f32.to_le_bytes());
    tagged_text(&mut v, "name");
    v.extend_from_slice(&4u32.to_le_bytes());
    tagged_text(&mut v, "llama");
    tagged_text(&mut v, "dims");
    v.extend_from_slice(&5u32.to_le_bytes());
    v.extend_from_slice(&1u32.to_le_bytes());
    v.extend_from_slice(&2u64.to_le_bytes());
    v.extend_from_slice(&(-3i16).to_le_bytes());
    v.extend_from_slice(&7i16.to_le_bytes());
    tagged_text(&mut v, "merges");
    v.extend_from_slice(&5u32.to_le_bytes());
    v.extend_from_slice(&5u32.to_le_bytes());
    v.extend_from_slice(&1u64.to_le_bytes());
    v.extend_from_slice(&4u32.to_le_bytes());
    v.extend_from_slice(&2u64.to_le_bytes());
    tagged_text(&mut v, "a");
    tagged_text(&mut v, "bc");
    let f = tagged_read(&v, &rt::Limits::default()).unwrap();
    let text = |s: &str| Text {
        len: s.len() as u64,
        text: s.to_string(),
    };
    let values: Vec<(&str, &KvValue)> = f
        .kvs
        .iter()
        .map(|kv| (kv.key.text.as_str(), &kv.value))
        .collect();
    assert_eq!(values[0], ("scale", &KvValue::F32(1.5)));
    assert_eq!(values[1], ("name", &KvValue::Text(text("llama"))));
    let dims = Array {
        kind: 1,
        n: 2,
        items: vec![ArrayItems::I16(-3), ArrayItems::I16(7)],
    };
    assert_eq!(values[2], ("dims", &KvValue::Array(dims)));
    let inner = Array {
        kind: 4,
        n: 2,
        items: vec![ArrayItems::Text(text("a")), ArrayItems::Text(text("bc"))],
    };
    let merges = Array {
        kind: 5,
        n: 1,
        items: vec![ArrayItems::Array(inner)],
    };
    assert_eq!(values[3], ("merges", &KvValue::Array(merges)));
    // Written back from the values alone: every tag computed from its value.
    let mut out = Vec::new();
    tagged_union_fmt::tagged::File::write(&mut out, &f.kvs).unwrap();
    assert_eq!(out, v);
    // A record built by hand: its tag (and its lengths) are computed.
    let kv = Kv {
        key: text("flag"),
        kind: 0,
        value: KvValue::Bool(true),
    };
    let mut out = Vec::new();
    tagged_union_fmt::tagged::File::write(&mut out, std::slice::from_ref(&kv)).unwrap();
    let back = tagged_read(&out, &rt::Limits::default()).unwrap();
    assert_eq!(back.kvs[0].kind, 3);
    assert_eq!(back.kvs[0].value, KvValue::Bool(true));
    // An array's items of another case than its type are refused when written.
    let bad = Kv {
        key: text("mixed"),
        kind: 0,
        value: KvValue::Array(Array {
            kind: 1,
            n: 0,
            items: vec![ArrayItems::U8(1)],
        }),
    };
    let e = tagged_union_fmt::tagged::File::write(&mut Vec::new(), &[bad])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("items") && e.contains("tag 0") && e.contains("tag 1"),
        "{e}"
    );
}

#[test]
fn an_unknown_tag_or_values_nested_too_deep_are_errors_not_crashes() {
    // An unknown tag: the error names the field, the tag and the offset.
    let mut v = b"TAG1".to_vec();
    v.extend_from_slice(&1u64.to_le_bytes());
    tagged_text(&mut v, "k");
    v.extend_from_slice(&9u32.to_le_bytes());
    let e = tagged_read(&v, &rt::Limits::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("value") && e.contains("unknown tag 9") && e.contains("25"),
        "{e}"
    );
    // Arrays of arrays nested 100 000 deep (hostile): bounded by `max_depth`.
    let mut v = b"TAG1".to_vec();
    v.extend_from_slice(&1u64.to_le_bytes());
    tagged_text(&mut v, "k");
    v.extend_from_slice(&5u32.to_le_bytes());
    for _ in 0..100_000 {
        v.extend_from_slice(&5u32.to_le_bytes());
        v.extend_from_slice(&1u64.to_le_bytes());
    }
    let e = tagged_read(&v, &rt::Limits::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("deeper"), "{e}");
    // Within the limit, a nested value reads.
    let limits = rt::Limits {
        max_depth: 3,
        ..rt::Limits::default()
    };
    let mut v = b"TAG1".to_vec();
    v.extend_from_slice(&1u64.to_le_bytes());
    tagged_text(&mut v, "k");
    v.extend_from_slice(&5u32.to_le_bytes());
    v.extend_from_slice(&5u32.to_le_bytes());
    v.extend_from_slice(&1u64.to_le_bytes());
    v.extend_from_slice(&0u32.to_le_bytes());
    v.extend_from_slice(&0u64.to_le_bytes());
    assert!(tagged_read(&v, &limits).is_ok());
    let limits = rt::Limits {
        max_depth: 1,
        ..rt::Limits::default()
    };
    assert!(tagged_read(&v, &limits).is_err());
}

/// A GGUF text: its length (`u64`), its bytes.
fn gguf_text(v: &mut Vec<u8>, s: &str) {
    v.extend_from_slice(&(s.len() as u64).to_le_bytes());
    v.extend_from_slice(s.as_bytes());
}

/// A GGUF v3 file laid out by hand: `kv` (key, `u32` value) records, then tensors (name,
/// dimensions fastest first, type code, offset in the data section), the data section at
/// `align` from the start, `data` in it.
fn gguf_file(
    kv: &[(&str, u32)],
    tensors: &[(&str, &[u64], u32, u64)],
    align: usize,
    data: &[u8],
) -> Vec<u8> {
    let mut v = b"GGUF".to_vec();
    v.extend_from_slice(&3u32.to_le_bytes());
    v.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
    v.extend_from_slice(&(kv.len() as u64).to_le_bytes());
    for (k, x) in kv {
        gguf_text(&mut v, k);
        v.extend_from_slice(&4u32.to_le_bytes());
        v.extend_from_slice(&x.to_le_bytes());
    }
    for (name, dims, kind, offset) in tensors {
        gguf_text(&mut v, name);
        v.extend_from_slice(&(dims.len() as u32).to_le_bytes());
        for d in *dims {
            v.extend_from_slice(&d.to_le_bytes());
        }
        v.extend_from_slice(&kind.to_le_bytes());
        v.extend_from_slice(&offset.to_le_bytes());
    }
    v.resize(v.len().div_ceil(align) * align, 0);
    v.extend_from_slice(data);
    v
}

/// GGUF-like files: the dimensions stored fastest first read as the reversed shape, the
/// data section and each tensor at the alignment a key/value gives (32 without one), an
/// offset off the alignment refused.
#[test]
fn a_gguf_like_file_reads_reversed_dims_at_the_alignment_its_key_values_give() {
    let desc = &gguf_like_fmt::gguflike::DESC;
    let (w, i) = (f32s(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]), 7i32.to_le_bytes());
    let mut data = w.clone();
    data.resize(32, 0);
    data.extend_from_slice(&i);
    let tensors: [(&str, &[u64], u32, u64); 2] = [("w", &[3, 2], 0, 0), ("i", &[1], 26, 32)];
    let expected = vec![
        t("w", rt::DType::F32, &[2, 3], w.clone()),
        t("i", rt::DType::I32, &[1], i.to_vec()),
    ];
    // Alignment 32 by default.
    let file = gguf_file(&[("other", 1)], &tensors, 32, &data);
    assert_eq!(read(desc, "a.gguf", &file).unwrap(), expected);
    // Alignment 16 from `general.alignment`.
    let tensors16: [(&str, &[u64], u32, u64); 2] = [("w", &[3, 2], 0, 0), ("i", &[1], 26, 32)];
    let file = gguf_file(&[("general.alignment", 16)], &tensors16, 16, &data);
    assert_eq!(read(desc, "a.gguf", &file).unwrap(), expected);
    // An offset off the alignment.
    let off: [(&str, &[u64], u32, u64); 1] = [("w", &[2], 0, 8)];
    let file = gguf_file(&[], &off, 32, &data);
    let e = refused(desc, &file);
    assert!(e.contains("offset 8") && e.contains("alignment 32"), "{e}");
    // An alignment that is not an integer names its key.
    let mut file = gguf_file(&[], &off, 32, &data);
    file[16..24].copy_from_slice(&1u64.to_le_bytes());
    let mut kv = Vec::new();
    gguf_text(&mut kv, "general.alignment");
    kv.extend_from_slice(&6u32.to_le_bytes());
    kv.extend_from_slice(&1.0f32.to_le_bytes());
    file.splice(24..24, kv);
    let e = refused(desc, &file);
    assert!(e.contains("'general.alignment' is not an integer"), "{e}");
}

/// `value from File.kv as k`: the structure holds each key/value under its key — numbers,
/// text and arrays as their natural values — then the tensors as leaves.
#[test]
fn a_gguf_like_file_s_key_values_are_its_structure_beside_its_tensors() {
    let desc = &gguf_like_fmt::gguflike::DESC;
    assert!(desc.values);
    let fixture = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/fixtures/gguf/small.gguf"
    ))
    .unwrap();
    let src = rt::Source::from_bytes(fixture);
    let tree = (desc.structure)(&src, &rt::Limits::default())
        .unwrap()
        .unwrap();
    assert_eq!(tree.tensor_names(), ["tok_embd.weight", "h", "i"]);
    let values: Vec<(String, String)> = tree
        .values()
        .into_iter()
        .map(|(k, v)| (k, v.to_string()))
        .collect();
    assert_eq!(values[0], ("general.architecture".into(), "'llama'".into()));
    assert_eq!(values[1], ("general.alignment".into(), "64".into()));
    assert!(values.len() > 2, "{values:?}");
    for (k, v) in &values[2..] {
        assert!(!v.is_empty(), "{k}");
    }
}

/// The `gguf` package's file (`tests/fixtures/gguf/make.py`, alignment 64, text and
/// arrays among the key/values, f32, f16 and i32 tensors) reads, and the writer given its
/// key/values and tensors writes it byte for byte; without key/values it writes at the
/// default alignment, and reads back what it wrote.
#[test]
fn a_gguf_like_writer_writes_what_the_gguf_package_writes() {
    use gguf_like_fmt::gguflike::{File, Kv, KvValue, Writer};
    let desc = &gguf_like_fmt::gguflike::DESC;
    let fixture = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/fixtures/gguf/small.gguf"
    ))
    .unwrap();
    let tensors = read(desc, "small.gguf", &fixture).unwrap();
    let f16s: Vec<u8> = [0x0000u16, 0x3c00, 0x4000, 0x4200, 0x4400, 0x4500]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    let i32s: Vec<u8> = (0..5i32).flat_map(|x| x.to_le_bytes()).collect();
    let w: Vec<f32> = (0..12).map(|x| x as f32).collect();
    assert_eq!(
        tensors,
        vec![
            t("tok_embd.weight", rt::DType::F32, &[3, 4], f32s(&w)),
            t("h", rt::DType::F16, &[2, 3], f16s),
            t("i", rt::DType::I32, &[5], i32s),
        ]
    );
    let src = rt::Source::from_bytes(fixture.clone());
    let mut c = rt::Cursor::new(src.data(), src.location());
    let file = File::read(&mut c, &rt::Limits::default()).unwrap();
    let keys: Vec<&str> = file.kv.iter().map(|kv| kv.key.as_str()).collect();
    assert_eq!(keys[..2], ["general.architecture", "general.alignment"]);
    assert_eq!(file.kv[1].value, KvValue::U32(64));
    // Written again from its key/values and tensors: the same bytes.
    let mut out = IoCursor::new(Vec::new());
    let mut writer = Writer::new(&mut out, &rt::WriteOptions::default()).unwrap();
    writer.kv().extend(file.kv.iter().cloned());
    for (name, dtype, shape, bytes) in &tensors {
        let meta = rt::TensorMeta {
            name: name.clone(),
            dtype: *dtype,
            shape: shape.clone(),
            order: rt::Order::C,
            byte_order: rt::ByteOrder::Little,
        };
        writer.add(&meta, rt::Payload::Bytes(bytes)).unwrap();
    }
    writer.finish().unwrap();
    assert_eq!(out.into_inner(), fixture);
    // No key/values: the data and each tensor at 32 bytes.
    let written = write(desc, &tensors).unwrap();
    assert_eq!(read(desc, "w.gguf", &written).unwrap(), tensors);
    let src = rt::Source::from_bytes(written.clone());
    let mut c = rt::Cursor::new(src.data(), src.location());
    let back = File::read(&mut c, &rt::Limits::default()).unwrap();
    let offsets: Vec<u64> = back.tensors.iter().map(|t| t.offset).collect();
    assert_eq!(offsets, [0, 64, 96]);
    assert_eq!(back.tensors[0].dims, [4, 3]);
    assert_eq!(written.len() as u64 % 32, 0);
    // A key/value given by hand: its tag and length computed.
    let mut out = IoCursor::new(Vec::new());
    let mut writer = Writer::new(&mut out, &rt::WriteOptions::default()).unwrap();
    writer.kv().push(Kv {
        key_len: 0,
        key: "general.alignment".into(),
        kind: 0,
        value: KvValue::U32(8),
    });
    let (name, dtype, shape, bytes) = &tensors[2];
    let meta = rt::TensorMeta {
        name: name.clone(),
        dtype: *dtype,
        shape: shape.clone(),
        order: rt::Order::C,
        byte_order: rt::ByteOrder::Little,
    };
    writer.add(&meta, rt::Payload::Bytes(bytes)).unwrap();
    writer.finish().unwrap();
    let written = out.into_inner();
    assert_eq!(read(desc, "k.gguf", &written).unwrap(), tensors[2..]);
    assert_eq!(written.len() % 8, 0);
}

/// Writes `tensors` with the `alignhdr` writer, asking for `align`; returns the bytes and
/// the layout read back.
fn write_aligned(
    tensors: &[Read],
    align: Option<u64>,
) -> rt::Result<(Vec<u8>, write_align_fmt::alignhdr::File)> {
    use write_align_fmt::alignhdr::{File, DESC};
    let options = rt::WriteOptions {
        align,
        ..Default::default()
    };
    let bytes = write_with(&DESC, tensors, &options)?;
    let src = rt::Source::from_bytes(bytes.clone());
    let mut c = rt::Cursor::new(src.data(), src.location());
    let file = File::read(&mut c, &rt::Limits::default())?;
    Ok((bytes, file))
}

#[test]
fn write_align_is_the_alignment_the_save_asks_for() {
    let desc = &write_align_fmt::alignhdr::DESC;
    assert!(desc.aligns);
    let tensors = vec![
        t("a", rt::DType::U8, &[3], vec![1, 2, 3]),
        t("b", rt::DType::F32, &[16], f32s(&[0.5; 16])),
        t("c", rt::DType::U8, &[64], vec![7; 64]),
        t("d", rt::DType::F32, &[3], f32s(&[1.0, 2.0, 3.0])),
    ];
    let names = |f: &write_align_fmt::alignhdr::File| -> Vec<String> {
        f.header.rest.0.iter().map(|(n, _)| n.clone()).collect()
    };
    // Asked for none: 16, and the order by dtype then name.
    let (bytes, file) = write_aligned(&tensors, None).unwrap();
    assert_eq!(file.alignment, 16);
    assert_eq!(file.data.0 % 16, 0);
    assert_eq!(names(&file), ["b", "d", "a", "c"]);
    let mut back = read(desc, "x.ah", &bytes).unwrap();
    back.sort();
    assert_eq!(back, tensors);
    // Asked for 64: the data at 64, the tensors of 64 bytes first, each at 64.
    let (bytes, file) = write_aligned(&tensors, Some(64)).unwrap();
    assert_eq!(file.alignment, 64);
    assert_eq!(file.data.0 % 64, 0);
    assert_eq!(names(&file), ["b", "c", "d", "a"]);
    let offsets: Vec<u64> = file
        .header
        .rest
        .0
        .iter()
        .map(|(_, e)| e.offsets[0])
        .collect();
    assert_eq!(offsets, [0, 64, 128, 140]);
    let mut back = read(desc, "x.ah", &bytes).unwrap();
    back.sort();
    assert_eq!(back, tensors);
    // Less than the schema's 16: 16 for the data; every size is a multiple of 4.
    let (_, file) = write_aligned(&tensors, Some(4)).unwrap();
    assert_eq!((file.alignment, file.data.0 % 16), (16, 0));
    assert_eq!(names(&file), ["b", "d", "c", "a"]);
    // Not a power of two, or past 1 GiB: refused, naming the value.
    for bad in [3, 48, 1 << 31] {
        let e = write_aligned(&tensors, Some(bad))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains(&bad.to_string()), "{e}");
    }
}

#[test]
fn a_file_that_is_one_pickle_writes_its_arrays_and_reads_them_back() {
    let desc = &pickle_arrays_fmt::pkla::DESC;
    let tensors = vec![
        t(
            "w",
            rt::DType::F32,
            &[2, 3],
            f32s(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]),
        ),
        t(
            "n",
            rt::DType::I64,
            &[2],
            vec![1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0],
        ),
        t("b", rt::DType::U8, &[], vec![7]),
        t("e", rt::DType::F32, &[0, 4], vec![]),
    ];
    for protocol in [None, Some(2)] {
        let options = rt::WriteOptions {
            pickle_protocol: protocol,
            ..Default::default()
        };
        let written = write_with(desc, &tensors, &options).unwrap();
        assert_eq!(read(desc, "w.pkla", &written).unwrap(), tensors);
    }
    // A dtype the table has no key for: refused by name, at `add`.
    let err = write(desc, &[t("h", rt::DType::F16, &[1], vec![0, 0])]).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("f16") && text.contains("pkla"), "{text}");
}

/// One `Tensor` of a `widen` document: name, dims, dtype, then its one data field.
fn wdn_tensor(name: &str, dims: &[u8], dtype: u64, data: impl Fn(&mut Vec<u8>)) -> Vec<u8> {
    let mut t = Vec::new();
    field_bytes(1, name.as_bytes(), &mut t);
    field_bytes(2, dims, &mut t);
    field_varint(3, dtype, &mut t);
    data(&mut t);
    let mut doc = Vec::new();
    field_bytes(1, &t, &mut doc);
    doc
}

#[test]
fn widened_elements_read_as_the_tensor_s_dtype_and_narrowing_is_refused() {
    let desc = &widen_fmt::wdn::DESC;
    // f16 1.0, -2.0, 0.5 in `halves`, read as f32.
    let halves: Vec<u8> = [0x3c00u16, 0xc000, 0x3800]
        .iter()
        .flat_map(|h| h.to_le_bytes())
        .collect();
    let doc = wdn_tensor("h", &[3], 1, |t| field_bytes(7, &halves, t));
    assert_eq!(
        read(desc, "h.wdn", &doc).unwrap(),
        vec![t("h", rt::DType::F32, &[3], f32s(&[1.0, -2.0, 0.5]))]
    );
    // Varints stored as i16 (cut to 16 bits: 70000 is 4464), read as i32; as u8.
    let mut ints = Vec::new();
    for v in [-3i64, 300, 70000] {
        varint(v as u64, &mut ints);
    }
    let i32s = |v: &[i32]| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
    let doc = wdn_tensor("i", &[3], 2, |t| {
        field_varint(4, 1, t);
        field_bytes(6, &ints, t);
    });
    assert_eq!(
        read(desc, "i.wdn", &doc).unwrap(),
        vec![t("i", rt::DType::I32, &[3], i32s(&[-3, 300, 4464]))]
    );
    let doc = wdn_tensor("u", &[3], 2, |t| {
        field_varint(4, 2, t);
        field_bytes(6, &ints, t);
    });
    assert_eq!(
        read(desc, "u.wdn", &doc).unwrap(),
        vec![t("u", rt::DType::I32, &[3], i32s(&[253, 44, 112]))]
    );
    // i16 read as f32 loses nothing (a float32 holds every i16).
    let doc = wdn_tensor("f", &[3], 1, |t| {
        field_varint(4, 1, t);
        field_bytes(6, &ints, t);
    });
    assert_eq!(
        read(desc, "f.wdn", &doc).unwrap(),
        vec![t("f", rt::DType::F32, &[3], f32s(&[-3.0, 300.0, 4464.0]))]
    );
    // i64 read as i32 could change values: refused, as are an odd number of f16 bytes
    // and a stored type the table does not know.
    let doc = wdn_tensor("x", &[3], 2, |t| {
        field_varint(4, 3, t);
        field_bytes(6, &ints, t);
    });
    let e = read(desc, "x.wdn", &doc).unwrap_err().to_string();
    assert!(e.contains("i64 read as i32"), "{e}");
    let doc = wdn_tensor("y", &[1], 1, |t| field_bytes(7, &[0, 0x3c, 0], t));
    let e = read(desc, "y.wdn", &doc).unwrap_err().to_string();
    assert!(e.contains("not a whole number of f16"), "{e}");
    let doc = wdn_tensor("z", &[3], 2, |t| {
        field_varint(4, 9, t);
        field_bytes(6, &ints, t);
    });
    let e = read(desc, "z.wdn", &doc).unwrap_err().to_string();
    assert!(e.contains("packing") && e.contains('9'), "{e}");
}

#[test]
fn an_apply_global_reads_as_the_call_it_applies() {
    use tensorfmt_runtime::pickle::{self, Kind, Value};
    let rules = zip_pickle_fmt::ckpt::state_rules();
    assert_eq!(
        rules.kind("torch._tensor", "_rebuild_from_type_v2"),
        Some(&Kind::Apply { func: 0, args: 2 })
    );
    // _rebuild_from_type_v2(_rebuild_tensor_v2, __main__.T, (pid, 0, (2,), (1,), False,
    // OrderedDict()), {}): the subclass is inert, the call read as the tensor's.
    let p = [
        b"\x80\x02ctorch._tensor\n_rebuild_from_type_v2\n(ctorch._utils\n_rebuild_tensor_v2\n".as_slice(),
        b"c__main__\nT\n((X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpuK\x02tQ",
        b"K\x00K\x02\x85K\x01\x85\x89ccollections\nOrderedDict\n)Rt}tR.",
    ]
    .concat();
    let v = pickle::read(&p, rules, &rt::Limits::default()).unwrap();
    let Value::Object(o) = &v else {
        panic!("not a call: {v:?}")
    };
    assert!(zip_pickle_fmt::ckpt::is_state_tensor(o), "{v:?}");
    assert_eq!(o.args.len(), 6);
    // A function that is itself an apply global is refused.
    let nested = [
        b"\x80\x02ctorch._tensor\n_rebuild_from_type_v2\n(ctorch._tensor\n_rebuild_from_type_v2\n"
            .as_slice(),
        b"N)}tR.",
    ]
    .concat();
    let e = pickle::read(&nested, rules, &rt::Limits::default()).unwrap_err();
    assert!(e.to_string().contains("another kind"), "{e}");
}
