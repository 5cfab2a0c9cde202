//! Array data left in a pickle ([`Value::Range`], under
//! [`Rules::byte_ranges`](super::Rules::byte_ranges)) as a tensor's [`DataLocation`]:
//! bytes the pickle stores plain are a byte range of the file, zero-copy; the text of
//! `_codecs.encode(text, 'latin1')` is [`Latin1Text`], decoded to its bytes when the
//! tensor is read, never at index time. Protocols 0 and 1 store byte strings as escaped
//! text (`STRING`, `UNICODE`), which the reader decodes into bytes of their own: those
//! are [`Held`], read from memory (never more than the file holds).

use super::value::Value;
use tensorfmt_core::error::{Error, ErrorKind, Result};
use tensorfmt_core::read::ReadOptions;
use tensorfmt_core::sink::Sink;
use tensorfmt_core::source::{RandomAccess, Source};
use tensorfmt_core::tensor::{DataLocation, Encoded, EncodedBytes, TensorInfo};

/// Where the bytes of the byte string `v` lie, the pickle starting at offset `base` of
/// the file: a [`DataLocation::Range`] for bytes stored plain, a [`Latin1Text`] window
/// for a latin-1 text. Fails with [`ErrorKind::Invalid`] naming `field` when `v` is not
/// a byte string left in the pickle, and with [`ErrorKind::Overflow`] when its offsets
/// do not fit.
pub fn data(v: Option<&Value>, base: u64, field: &str) -> Result<DataLocation> {
    if let Some(Value::Bytes(b)) = v {
        return Ok(EncodedBytes::new(Held(b.clone())).window(0, 0, b.len() as u64));
    }
    let Some(Value::Range(r)) = v else {
        let what = v.map_or("nothing", Value::type_name);
        return Err(Error::from(ErrorKind::Invalid(format!(
            "`{field}` is {what}, not a byte string of the file"
        )))
        .in_field(field));
    };
    let offset = base.checked_add(r.offset).ok_or_else(|| {
        Error::from(ErrorKind::Overflow(format!("`{field}` lies beyond 2^64"))).in_field(field)
    })?;
    Ok(match r.latin1 {
        false => DataLocation::range(offset, r.len),
        true => EncodedBytes::new(Latin1Text {
            offset,
            stored: r.stored,
        })
        .window(0, 0, r.len),
    })
}

/// The byte length of the byte string `v` (see [`data`]), for checks against a tensor's
/// size; `None` when `v` is not one.
pub fn data_len(v: Option<&Value>) -> Option<u64> {
    match v {
        Some(Value::Range(r)) => Some(r.len),
        Some(Value::Bytes(b)) => Some(b.len() as u64),
        _ => None,
    }
}

/// The bytes of `_codecs.encode(text, 'latin1')`: `stored` bytes of UTF-8 text at
/// `offset` of the file, each character (U+0000 to U+00FF) one byte. Its one part (0)
/// is decoded as it is read; a character above U+00FF or bytes that are not UTF-8 are an
/// error then.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Latin1Text {
    /// Offset of the text in the file.
    pub offset: u64,
    /// Its length in bytes (UTF-8).
    pub stored: u64,
}

/// How much of the text is read from a source that is not mapped, at a time.
const CHUNK: usize = 1 << 20;

impl Latin1Text {
    /// Pushes bytes `skip..skip + len` of the decoded text into `out`, `chunk` decoded
    /// bytes at most at a time.
    fn decode(
        &self,
        src: &Source,
        (skip, len): (u64, u64),
        out: &mut dyn FnMut(&[u8]) -> Result<()>,
    ) -> Result<()> {
        let bad = |why: &str| Error::from(ErrorKind::Invalid(format!("latin-1 array data: {why}")));
        let mut buf = Vec::with_capacity(CHUNK.min(len as usize));
        let mut read_buf = Vec::new();
        let (mut at, mut lead): (u64, Option<u8>) = (0, None);
        let mut produced: u64 = 0;
        let end = skip
            .checked_add(len)
            .ok_or_else(|| bad("window past 2^64"))?;
        let mut pos = 0u64;
        while pos < self.stored && produced < end {
            let n = (self.stored - pos).min(CHUNK as u64);
            let bytes: &[u8] = match src.bytes() {
                Some(all) => {
                    let start = usize::try_from(self.offset + pos).map_err(|_| bad("offset"))?;
                    all.as_bytes()
                        .get(start..start + n as usize)
                        .ok_or_else(|| bad("the text runs past the end of the file"))?
                }
                None => {
                    read_buf.resize(n as usize, 0);
                    src.data().read_exact_at(self.offset + pos, &mut read_buf)?;
                    &read_buf
                }
            };
            pos += n;
            for &b in bytes {
                let byte = match (lead.take(), b) {
                    (None, 0..=0x7f) => b,
                    (None, 0xc2 | 0xc3) => {
                        lead = Some(b);
                        continue;
                    }
                    (None, 0xc4..=0xf4) => {
                        return Err(bad(&format!(
                            "a character above U+00FF at byte {} of the text",
                            at
                        )))
                    }
                    (None, _) => return Err(bad(&format!("not UTF-8 at byte {at} of the text"))),
                    (Some(l), 0x80..=0xbf) => ((l & 0x1f) << 6) | (b & 0x3f),
                    (Some(_), _) => {
                        return Err(bad(&format!("not UTF-8 at byte {at} of the text")))
                    }
                };
                at += 1;
                if produced >= skip && produced < end {
                    buf.push(byte);
                    if buf.len() == CHUNK {
                        out(&buf)?;
                        buf.clear();
                    }
                }
                produced += 1;
                if produced == end {
                    break;
                }
            }
        }
        if lead.is_some() || produced < end {
            return Err(bad(&format!(
                "the text holds {produced} bytes, {end} are needed"
            )));
        }
        if !buf.is_empty() {
            out(&buf)?;
        }
        Ok(())
    }
}

impl Encoded for Latin1Text {
    fn plain_offset(&self, _src: &dyn RandomAccess, _part: u64) -> Result<Option<u64>> {
        Ok(None)
    }

    fn read(
        &self,
        src: &Source,
        _info: &TensorInfo,
        part: u64,
        window: (u64, u64),
        sink: &mut dyn Sink,
        _opts: &ReadOptions,
    ) -> Result<()> {
        if part != 0 {
            return Err(Error::from(ErrorKind::NotFound(format!(
                "part {part} of a latin-1 text"
            ))));
        }
        self.decode(src, window, &mut |b| sink.chunk(b))
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn same(&self, other: &dyn Encoded) -> bool {
        other.as_any().downcast_ref::<Latin1Text>() == Some(self)
    }
}

/// Bytes the reader decoded from a pickle's text (protocols 0 and 1: `STRING`, or
/// `_codecs.encode` of a `UNICODE` text), held in memory; its one part (0) is read from
/// there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held(pub std::sync::Arc<[u8]>);

impl Encoded for Held {
    fn plain_offset(&self, _src: &dyn RandomAccess, _part: u64) -> Result<Option<u64>> {
        Ok(None)
    }

    fn read(
        &self,
        _src: &Source,
        _info: &TensorInfo,
        part: u64,
        window: (u64, u64),
        sink: &mut dyn Sink,
        _opts: &ReadOptions,
    ) -> Result<()> {
        let bytes = usize::try_from(window.0)
            .ok()
            .zip(usize::try_from(window.1).ok())
            .and_then(|(skip, len)| self.0.get(skip..skip.checked_add(len)?));
        match (part, bytes) {
            (0, Some(b)) => sink.chunk(b),
            _ => Err(Error::from(ErrorKind::NotFound(format!(
                "bytes {}..+{} of part {part} of a {}-byte string",
                window.0,
                window.1,
                self.0.len()
            )))),
        }
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn same(&self, other: &dyn Encoded) -> bool {
        other.as_any().downcast_ref::<Held>() == Some(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ByteRange;

    fn decoded(text: &str, window: (u64, u64)) -> Result<Vec<u8>> {
        let src = Source::from_bytes(format!("xx{text}").into_bytes());
        let t = Latin1Text {
            offset: 2,
            stored: text.len() as u64,
        };
        let mut out = Vec::new();
        t.decode(&src, window, &mut |b| {
            out.extend_from_slice(b);
            Ok(())
        })?;
        Ok(out)
    }

    #[test]
    fn latin1_text_decodes_in_windows() {
        let text = "a\u{e9}\u{ff}\u{0}\u{80}z";
        assert_eq!(
            decoded(text, (0, 6)).unwrap(),
            [b'a', 0xe9, 0xff, 0, 0x80, b'z']
        );
        assert_eq!(decoded(text, (1, 3)).unwrap(), [0xe9, 0xff, 0]);
        let e = decoded("a\u{100}", (0, 2)).unwrap_err();
        assert!(e.to_string().contains("above U+00FF"), "{e}");
        let e = decoded("ab", (0, 3)).unwrap_err();
        assert!(e.to_string().contains("holds 2 bytes, 3 are needed"), "{e}");
    }

    #[test]
    fn data_names_the_field() {
        let e = data(Some(&Value::Int(1)), 0, "a.state[4]").unwrap_err();
        assert!(e.to_string().contains("`a.state[4]` is int"), "{e}");
        let r = Value::Range(
            ByteRange {
                offset: 10,
                stored: 8,
                len: 8,
                latin1: false,
                text: None,
            }
            .into(),
        );
        assert_eq!(
            data(Some(&r), 100, "d").unwrap(),
            DataLocation::range(110, 8)
        );
        assert_eq!(data_len(Some(&r)), Some(8));
    }
}
