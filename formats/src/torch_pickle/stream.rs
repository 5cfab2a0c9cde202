//! The legacy `torch.save` stream of one storage, as `torch.storage._load_from_bytes`
//! takes it: five pickles back to back (the magic number, the protocol version 1001,
//! `sys_info`, the storage's persistent id `('storage', <storage class>, key, location,
//! numel, None)`, the list of its one key), then the storage's record: its element
//! count (8 bytes, little-endian) and its elements.

use tensorfmt_runtime::pickle::{self, Value};

use crate::{DType, ErrorKind, Limits, Result};

/// The magic number `torch.save` pickles first.
const MAGIC: i128 = 0x1950a86a20f9469cfc6c;

/// The protocol version it pickles second.
const PROTOCOL: i128 = 1001;

/// The storage one nested stream holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Nested {
    /// The storage class's element type (`torch.FloatStorage`: f32).
    pub dtype: DType,
    /// The storage's number of elements.
    pub numel: u64,
    /// Where its elements start in the stream.
    pub data_at: u64,
}

/// An error about the stream at byte `offset` of it.
fn bad(offset: usize, why: impl Into<String>) -> crate::Error {
    crate::Error::new(
        ErrorKind::Invalid(format!("nested torch.save stream: {}", why.into())),
        crate::Location::default().with_offset(offset as u64),
    )
}

/// Reads the storage of the stream whose first bytes are `head` and which holds `len`
/// bytes in all (`head` may be a prefix of it: enough to hold its pickles and the
/// record's count). Errors carry the byte offset in the stream.
pub(crate) fn parse(head: &[u8], len: u64, limits: &Limits) -> Result<Nested> {
    let rules = crate::generated::pytorch_legacy::legacy_rules();
    // Only storage classes belong here: any other global is refused, not read inertly.
    let limits = &Limits {
        weights_only: true,
        ..limits.clone()
    };
    let mut at = 0usize;
    let mut values = Vec::with_capacity(5);
    for what in [
        "magic number",
        "protocol version",
        "sys_info",
        "storage",
        "keys",
    ] {
        let rest = head
            .get(at..)
            .filter(|r| !r.is_empty())
            .ok_or_else(|| bad(at, format!("ends before its {what} pickle")))?;
        let (v, used) = pickle::read_prefix(rest, rules, limits).map_err(|mut e| {
            let o = e.location.offset.unwrap_or(0);
            e.location.offset = Some(o.saturating_add(at as u64));
            e.in_field(what)
        })?;
        values.push((at, v));
        at += used;
    }
    let int = |i: usize| values[i].1.as_i128();
    if int(0) != Some(MAGIC) {
        return Err(bad(
            values[0].0,
            "does not start with torch.save's magic number",
        ));
    }
    if int(1) != Some(PROTOCOL) {
        return Err(bad(values[1].0, "its protocol version is not 1001"));
    }
    if values[2].1.get("little_endian").and_then(Value::as_bool) == Some(false) {
        return Err(ErrorKind::Unsupported(
            "a nested torch.save stream of a big-endian machine".into(),
        )
        .into());
    }
    let (dtype, key, numel) = storage_id(&values[3].1).map_err(|e| with_offset(e, values[3].0))?;
    let keys = values[4].1.as_seq().unwrap_or(&[]);
    if keys.len() != 1 || keys[0].as_str() != Some(key.as_str()) {
        return Err(bad(values[4].0, format!("its keys are not [{key:?}]")));
    }
    record(head, at, len, dtype, numel)
}

/// Sets the offset of `e` to `at` unless it has one.
fn with_offset(mut e: crate::Error, at: usize) -> crate::Error {
    e.location.offset.get_or_insert(at as u64);
    e
}

/// The element type, key and element count of the persistent id `v`.
fn storage_id(v: &Value) -> Result<(DType, String, u64)> {
    let Value::Persistent(id) = v else {
        return Err(ErrorKind::Invalid(format!(
            "nested torch.save stream: its object is {}, not a storage's persistent id",
            v.type_name()
        ))
        .into());
    };
    let items = id.as_seq().unwrap_or(&[]);
    let bad_id = |why: &str| ErrorKind::Invalid(format!("nested torch.save stream: {why}"));
    if items.first().and_then(Value::as_str) != Some("storage") || items.len() != 6 {
        return Err(bad_id(
            "its persistent id is not ('storage', class, key, location, numel, view)",
        )
        .into());
    }
    if !pickle::is_none(items.get(5)) {
        return Err(
            bad_id("its storage is a view of another, which torch never pickles alone").into(),
        );
    }
    let table = &crate::generated::pytorch::STORAGE_CLASS;
    let (dtype, _) = pickle::lookup(
        table,
        Some(v).and_then(|v| pickle::item(Some(v), 1)),
        "storage.class",
    )?;
    let key = pickle::name(pickle::item(Some(v), 2), "storage.key")?;
    let numel = pickle::uint(pickle::item(Some(v), 4), "storage.numel")?;
    Ok((dtype, key.to_string(), numel))
}

/// Checks the record at `at` of the stream (`len` bytes): its count is `numel`, and the
/// elements fit in the stream.
fn record(head: &[u8], at: usize, len: u64, dtype: DType, numel: u64) -> Result<Nested> {
    let count = head
        .get(at..at + 8)
        .ok_or_else(|| bad(at, "ends before its storage's element count"))?;
    let count = u64::from_le_bytes(count.try_into().expect("8 bytes"));
    if count != numel {
        return Err(bad(
            at,
            format!("its storage's record holds {count} elements, its persistent id says {numel}"),
        ));
    }
    let item = dtype.itemsize().unwrap_or(1) as u64;
    let data_at = at as u64 + 8;
    let need = numel.checked_mul(item);
    if need.is_none_or(|n| n > len.saturating_sub(data_at)) {
        return Err(bad(
            at,
            format!(
                "its storage of {numel} elements of {item} bytes runs past its end ({} bytes \
                 follow the count)",
                len.saturating_sub(data_at)
            ),
        ));
    }
    Ok(Nested {
        dtype,
        numel,
        data_at,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The stream of the first tensor (`f32`, 12 elements) of the protocol-4 fixture.
    fn stream() -> Vec<u8> {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fixtures/objects/torch_pickle_p4.pkl"
        );
        let file = std::fs::read(path).unwrap();
        let at = file
            .windows(4)
            .position(|w| w == b"\x80\x02\x8a\n")
            .unwrap();
        let n = u32::from_le_bytes(file[at - 4..at].try_into().unwrap()) as usize;
        file[at..at + n].to_vec()
    }

    fn parsed(s: &[u8]) -> Result<Nested> {
        parse(s, s.len() as u64, &Limits::default())
    }

    fn replace(s: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
        let at = s.windows(from.len()).position(|w| w == from).unwrap();
        [&s[..at], to, &s[at + from.len()..]].concat()
    }

    #[test]
    fn a_whole_stream_gives_its_storage() {
        let s = stream();
        let n = parsed(&s).unwrap();
        assert_eq!((n.dtype, n.numel), (DType::F32, 12));
        assert_eq!(n.data_at + 48, s.len() as u64);
    }

    #[test]
    fn a_truncated_stream_is_refused_with_its_offset() {
        let s = stream();
        let e = parsed(&s[..100]).unwrap_err();
        assert!(e.location.offset.is_some_and(|o| o <= 100), "{e}");
        assert!(e.to_string().contains("sys_info"), "{e}");
        let e = parsed(&s[..s.len() - 50]).unwrap_err();
        assert!(e.to_string().contains("element count"), "{e}");
    }

    #[test]
    fn a_count_past_the_end_is_refused() {
        let s = stream();
        let e = parsed(&s[..s.len() - 4]).unwrap_err();
        assert!(e.to_string().contains("runs past its end"), "{e}");
        assert_eq!(e.location.offset, Some(s.len() as u64 - 56), "{e}");
        let big = replace(&s, b"\x0c\x00\x00\x00\x00\x00\x00\x00", &[0xff; 8]);
        let e = parsed(&big).unwrap_err();
        assert!(
            e.to_string()
                .contains("holds 18446744073709551615 elements"),
            "{e}"
        );
    }

    #[test]
    fn a_wrong_persistent_id_is_refused() {
        let s = replace(
            &stream(),
            b"\x07\x00\x00\x00storage",
            b"\x07\x00\x00\x00storagf",
        );
        let e = parsed(&s).unwrap_err();
        assert!(e.location.offset.is_some(), "{e}");
        let s = replace(&stream(), b"K\x0cNt", b"K\x0cK\x00t");
        let e = parsed(&s).unwrap_err();
        assert!(e.to_string().contains("view"), "{e}");
    }

    #[test]
    fn a_stream_naming_os_system_is_refused() {
        let s = replace(&stream(), b"ctorch\nFloatStorage\n", b"cos\nsystem\n");
        let e = parsed(&s).unwrap_err();
        assert!(e.to_string().contains("os.system"), "{e}");
        assert!(e.location.offset.is_some_and(|o| o > 50), "{e}");
    }
}
