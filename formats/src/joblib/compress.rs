//! The compressors `joblib.dump(..., compress=...)` writes a whole file through, known
//! by their first bytes as joblib's `_detect_compressor` knows them (joblib 1.x,
//! `compressor.py`): zlib `78`, gzip `1f 8b`, bz2 `BZ`, lzma "alone" `5d 00`, xz
//! `fd 37 7a 58 5a`, lz4 frames `04 22 4d 18`; `ZF`, the zlib files of joblib before
//! 0.9.3, is refused. The file is one stream of the pickle joblib writes, inflated here
//! into memory as a stream, under the per-file budget of decompressed bytes
//! ([`Limits::inflated_budget`]): past it, refused before the memory is allocated.

use std::io::{BufRead, Read};

use crate::{Error, ErrorKind, Limits, Location, Result};

/// A compressor joblib writes a whole file through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Compressor {
    /// `compress=3` or `("zlib", level)`: a zlib stream.
    Zlib,
    /// `("gzip", level)`: a gzip member.
    Gzip,
    /// `("bz2", level)`: a bzip2 stream.
    Bz2,
    /// `("lzma", level)`: an LZMA "alone" stream (`lzma.FORMAT_ALONE`).
    Lzma,
    /// `("xz", level)`: an xz stream.
    Xz,
    /// `("lz4", level)`: an LZ4 frame.
    Lz4,
}

/// joblib's files of before 0.9.3 (`ZF`), which are not read.
const ZFILE_PREFIX: &[u8] = b"ZF";

/// What is read of the compressed input or written to the output at a time.
const CHUNK: usize = 64 << 10;

/// The least the output grows by, once it grows.
const MIN_GROWTH: usize = 1 << 20;

impl Compressor {
    /// Every compressor, in the order joblib tries their prefixes.
    pub(crate) const ALL: [Compressor; 6] = [
        Compressor::Zlib,
        Compressor::Gzip,
        Compressor::Bz2,
        Compressor::Lzma,
        Compressor::Xz,
        Compressor::Lz4,
    ];

    /// joblib's name of the compressor (`compress=(name, level)`).
    pub(crate) fn name(self) -> &'static str {
        match self {
            Compressor::Zlib => "zlib",
            Compressor::Gzip => "gzip",
            Compressor::Bz2 => "bz2",
            Compressor::Lzma => "lzma",
            Compressor::Xz => "xz",
            Compressor::Lz4 => "lz4",
        }
    }

    /// The first bytes of its streams, as joblib matches them.
    fn prefix(self) -> &'static [u8] {
        match self {
            Compressor::Zlib => b"\x78",
            Compressor::Gzip => b"\x1f\x8b",
            Compressor::Bz2 => b"BZ",
            Compressor::Lzma => b"\x5d\x00",
            Compressor::Xz => b"\xfd\x37\x7a\x58\x5a",
            Compressor::Lz4 => b"\x04\x22\x4d\x18",
        }
    }

    /// The compressor whose prefix starts `bytes`, if one does.
    pub(crate) fn of(bytes: &[u8]) -> Option<Compressor> {
        Compressor::ALL
            .into_iter()
            .find(|c| bytes.starts_with(c.prefix()))
    }

    /// The field errors about its stream are reported in.
    fn field(self) -> String {
        format!("{} stream", self.name())
    }
}

/// The compressed input, counting what the decoder took of it (the offset of an error).
struct Counted<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl Read for Counted<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = buf.len().min(self.bytes.len() - self.pos);
        buf[..n].copy_from_slice(&self.bytes[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

impl BufRead for Counted<'_> {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        Ok(&self.bytes[self.pos..])
    }

    fn consume(&mut self, n: usize) {
        self.pos = (self.pos + n).min(self.bytes.len());
    }
}

/// How inflating stopped short.
enum Stop {
    /// The decoder failed (a corrupt or truncated stream).
    Failed(std::io::Error),
    /// The output would pass the budget: the bytes it would hold.
    Budget(u64),
}

/// `bytes` (a whole file) inflated, with the compressor that wrote it; `None` when it
/// does not start as a stream of one. The output is held within
/// [`Limits::inflated_budget`] of the file's size; past it the file is refused with
/// [`ErrorKind::Limit`] naming `--max-inflated-bytes`, before the memory is allocated.
/// A corrupt or truncated stream, or bytes after its end, is an error naming the byte
/// of the file where decoding stopped.
pub(crate) fn inflate_joblib(
    bytes: &[u8],
    limits: &Limits,
) -> Result<Option<(Compressor, Vec<u8>)>> {
    if bytes.starts_with(ZFILE_PREFIX) {
        return Err(ErrorKind::Unsupported(
            "a zlib file of joblib before 0.9.3 (`ZF` prefix), which is not read".into(),
        )
        .into());
    }
    let Some(c) = Compressor::of(bytes) else {
        return Ok(None);
    };
    let budget = limits.inflated_budget(bytes.len() as u64);
    let at = |offset: usize| {
        Location::default()
            .with_field(c.field())
            .with_offset(offset as u64)
    };
    if let Some(need) = super::dict::decoder_memory(c, bytes).filter(|&n| n > budget) {
        return Err(Error::new(
            ErrorKind::Limit {
                what: "memory the decoder takes for the dictionary the stream declares \
                       (--max-inflated-bytes raises it)",
                limit: budget,
                actual: need,
            },
            at(0),
        ));
    }
    // lz4_flex takes a frame cut between two blocks for its end: the frame's extent is
    // checked first.
    let end = match c {
        Compressor::Lz4 => super::lz4::frame_len(bytes)
            .map_err(|(why, offset)| Error::new(ErrorKind::Decompress(why), at(offset)))?,
        _ => bytes.len(),
    };
    let mut input = Counted {
        bytes: &bytes[..end],
        pos: 0,
    };
    let mut out = Vec::new();
    let result = decoder(c, &mut input, budget)
        .map_err(Stop::Failed)
        .and_then(|mut d| fill(&mut *d, &mut out, budget, usize::MAX));
    match result {
        Ok(()) => {}
        Err(Stop::Budget(actual)) => {
            return Err(Error::new(
                ErrorKind::Limit {
                    what: "decompressed bytes held in memory for this file \
                           (--max-inflated-bytes raises it)",
                    limit: budget,
                    actual,
                },
                at(input.pos),
            ))
        }
        Err(Stop::Failed(e)) => return Err(failed(c, e, input.pos, bytes.len(), budget)),
    }
    // Where the stream ends, for the decoders that take their input as it is needed
    // (the LZMA and xz readers read ahead).
    let stream_end = match c {
        Compressor::Lz4 => Some(end),
        Compressor::Zlib | Compressor::Gzip | Compressor::Bz2 => Some(input.pos),
        Compressor::Lzma | Compressor::Xz => None,
    };
    if let Some(e) = stream_end.filter(|&e| e < bytes.len()) {
        return Err(Error::new(
            ErrorKind::Invalid(format!(
                "{} bytes follow the end of the {} stream",
                bytes.len() - e,
                c.name()
            )),
            at(e),
        ));
    }
    Ok(Some((c, out)))
}

/// The first `max` bytes (at most) that `bytes`, the start of a stream of `c`, inflate
/// to, for detection: what decodes before the input ends or fails. An LZMA or xz
/// dictionary is bounded by `budget`.
pub(crate) fn inflate_start(c: Compressor, bytes: &[u8], max: usize, budget: u64) -> Vec<u8> {
    let mut input = Counted { bytes, pos: 0 };
    let mut out = Vec::new();
    if let Ok(mut d) = decoder(c, &mut input, budget) {
        let _ = fill(&mut *d, &mut out, u64::MAX, max);
    }
    out
}

/// The error of a stream of `c` that failed at `pos` of the file (`len` bytes), inflated
/// under `budget`.
fn failed(c: Compressor, e: std::io::Error, pos: usize, len: usize, budget: u64) -> Error {
    let at = Location::default().with_field(c.field());
    // lzma-rust2's refusal of a dictionary past its memory limit.
    if e.kind() == std::io::ErrorKind::OutOfMemory || e.to_string().contains("mem_limit") {
        return Error::new(
            ErrorKind::Decompress(format!(
                "the {} stream's dictionary takes more than the {budget} bytes of the budget \
                 of decompressed bytes held in memory (--max-inflated-bytes raises it)",
                c.name()
            )),
            at.with_offset(pos as u64),
        );
    }
    if e.kind() == std::io::ErrorKind::UnexpectedEof || pos >= len {
        return Error::new(
            ErrorKind::Decompress(format!(
                "the {} stream is truncated: the file ends before the stream does ({e})",
                c.name()
            )),
            at.with_offset(len as u64),
        );
    }
    Error::new(
        ErrorKind::Decompress(format!("corrupt {} stream: {e}", c.name())),
        at.with_offset(pos as u64),
    )
}

/// A decoder of `c` reading `input`; an LZMA or xz decoder's dictionary is bounded by
/// `budget` (its header declares it, up to 4 GiB).
fn decoder<'a>(
    c: Compressor,
    input: &'a mut Counted<'_>,
    budget: u64,
) -> std::io::Result<Box<dyn Read + 'a>> {
    let mem_limit_kb = u32::try_from(budget / 1024)
        .unwrap_or(u32::MAX - 1)
        .min(u32::MAX - 1);
    Ok(match c {
        Compressor::Zlib => Box::new(flate2::bufread::ZlibDecoder::new(input)),
        Compressor::Gzip => Box::new(flate2::bufread::GzDecoder::new(input)),
        Compressor::Bz2 => Box::new(bzip2::bufread::BzDecoder::new(input)),
        Compressor::Lzma => Box::new(lzma_rust2::LzmaReader::new_mem_limit(
            input,
            mem_limit_kb,
            None,
        )?),
        Compressor::Xz => Box::new(lzma_rust2::XzReader::new_mem_limit(
            input,
            false,
            mem_limit_kb,
        )),
        Compressor::Lz4 => Box::new(lz4_flex::frame::FrameDecoder::new(input)),
    })
}

/// Reads `d` to its end into `out`, or its first `max` bytes; stops with
/// [`Stop::Budget`] before `out` would hold more than `budget` bytes, never allocating
/// past it.
fn fill(d: &mut dyn Read, out: &mut Vec<u8>, budget: u64, max: usize) -> Result<(), Stop> {
    let mut chunk = vec![0u8; CHUNK];
    while out.len() < max {
        let n = match d.read(&mut chunk) {
            Ok(0) => return Ok(()),
            Ok(n) => n.min(max - out.len()),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Stop::Failed(e)),
        };
        let total = out.len() as u64 + n as u64;
        if total > budget {
            return Err(Stop::Budget(total));
        }
        if out.capacity() - out.len() < n {
            let cap = (out.capacity().saturating_mul(2))
                .max(out.len() + n)
                .max(MIN_GROWTH)
                .min(usize::try_from(budget).unwrap_or(usize::MAX))
                .min(max)
                .max(out.len() + n);
            out.reserve_exact(cap - out.len());
        }
        out.extend_from_slice(&chunk[..n]);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// `data` compressed as joblib's compressor `c` writes it.
    fn compress(c: Compressor, data: &[u8]) -> Vec<u8> {
        fn done<W: Write>(mut w: W, data: &[u8]) -> W {
            w.write_all(data).unwrap();
            w
        }
        match c {
            Compressor::Zlib => {
                let level = flate2::Compression::new(3);
                done(flate2::write::ZlibEncoder::new(Vec::new(), level), data)
                    .finish()
                    .unwrap()
            }
            Compressor::Gzip => {
                let level = flate2::Compression::new(3);
                done(flate2::write::GzEncoder::new(Vec::new(), level), data)
                    .finish()
                    .unwrap()
            }
            Compressor::Bz2 => {
                let level = bzip2::Compression::new(3);
                done(bzip2::write::BzEncoder::new(Vec::new(), level), data)
                    .finish()
                    .unwrap()
            }
            Compressor::Lzma => {
                let options = lzma_rust2::LzmaOptions::with_preset(3);
                let w = lzma_rust2::LzmaWriter::new_use_header(Vec::new(), &options, None);
                done(w.unwrap(), data).finish().unwrap()
            }
            Compressor::Xz => {
                let options = lzma_rust2::XzOptions::with_preset(3);
                let w = lzma_rust2::XzWriter::new(Vec::new(), options).unwrap();
                done(w, data).finish().unwrap()
            }
            Compressor::Lz4 => {
                // Blocks of 64 KiB, as Python's lz4.frame writes by default.
                let info = lz4_flex::frame::FrameInfo::new()
                    .block_size(lz4_flex::frame::BlockSize::Max64KB);
                let w = lz4_flex::frame::FrameEncoder::with_frame_info(info, Vec::new());
                done(w, data).finish().unwrap()
            }
        }
    }

    /// 1 MiB of bytes that compress a little (a pickle's worth of varied content).
    fn data() -> Vec<u8> {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        (0..1 << 20)
            .map(|i| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                if i % 3 == 0 {
                    b'a'
                } else {
                    (x % 16) as u8
                }
            })
            .collect()
    }

    fn budget(bytes: u64) -> Limits {
        Limits {
            max_inflated_bytes: Some(bytes),
            ..Limits::default()
        }
    }

    #[test]
    fn each_compressor_round_trips_by_its_magic() {
        let data = data();
        for c in Compressor::ALL {
            let z = compress(c, &data);
            assert_eq!(Compressor::of(&z), Some(c), "{c:?}");
            let (found, out) = inflate_joblib(&z, &Limits::default()).unwrap().unwrap();
            assert_eq!(found, c);
            assert!(out == data, "{c:?}: {} bytes back", out.len());
            // Detection inflates the start alone (bz2 decodes a whole block first).
            let head = &z[..z.len().min(400 << 10)];
            let start = inflate_start(c, head, 1000, 1 << 30);
            assert!(start == data[..1000], "{c:?}: {} bytes", start.len());
        }
        // Not compressed: a pickle.
        assert!(inflate_joblib(b"\x80\x04\x95", &Limits::default())
            .unwrap()
            .is_none());
        let e = inflate_joblib(b"ZF0x1234", &Limits::default()).unwrap_err();
        assert!(e.to_string().contains("before 0.9.3"), "{e}");
    }

    #[test]
    fn truncated_or_corrupt_streams_are_errors_at_an_offset() {
        let data = data();
        for c in Compressor::ALL {
            let z = compress(c, &data);
            for cut in [z.len() / 2, z.len() - 1] {
                let e = inflate_joblib(&z[..cut], &Limits::default()).unwrap_err();
                let text = e.to_string();
                assert!(
                    matches!(e.kind, ErrorKind::Decompress(_)) && text.contains(c.name()),
                    "{c:?} cut at {cut}: {text}"
                );
                assert!(e.location.offset.is_some_and(|o| o <= cut as u64), "{text}");
            }
            // Damaged data; an lz4 frame has no checksum unless asked (joblib does
            // not), so its frame descriptor is damaged instead.
            let mut bad = z.clone();
            match c {
                Compressor::Lz4 => bad[4] = 0,
                _ => {
                    let at = bad.len() / 3;
                    bad[at..at + 64].fill(0x55);
                }
            }
            let e = inflate_joblib(&bad, &Limits::default()).unwrap_err();
            assert!(e.location.offset.is_some(), "{c:?}: {e}");
        }
        // Bytes after the stream, where the decoder tells where it ends.
        for c in [
            Compressor::Zlib,
            Compressor::Gzip,
            Compressor::Bz2,
            Compressor::Lz4,
        ] {
            let mut z = compress(c, b"abc");
            let end = z.len() as u64;
            z.extend_from_slice(b"junk");
            let e = inflate_joblib(&z, &Limits::default()).unwrap_err();
            assert!(
                e.to_string().contains("4 bytes follow the end"),
                "{c:?}: {e}"
            );
            assert_eq!(e.location.offset, Some(end), "{c:?}");
        }
    }

    #[test]
    fn a_bomb_past_the_budget_is_refused_naming_the_flag() {
        let zeros = vec![0u8; 64 << 20];
        for c in Compressor::ALL {
            let z = compress(c, &zeros);
            assert!(z.len() < 1 << 20, "{c:?}: {} bytes", z.len());
            let e = inflate_joblib(&z, &budget(8 << 20)).unwrap_err();
            assert!(
                matches!(e.kind, ErrorKind::Limit { limit, actual, .. }
                         if limit == 8 << 20 && actual > limit),
                "{c:?}: {e}"
            );
            assert!(e.to_string().contains("--max-inflated-bytes"), "{e}");
            // Within a budget that holds it, it inflates.
            let (_, out) = inflate_joblib(&z, &budget(64 << 20)).unwrap().unwrap();
            assert_eq!(out.len(), 64 << 20);
        }
    }

    #[test]
    fn a_dictionary_past_the_budget_is_refused_with_its_size() {
        let small = budget(1 << 20);
        for c in [Compressor::Lzma, Compressor::Xz] {
            // Preset 6: an 8 MiB dictionary.
            let z = match c {
                Compressor::Lzma => {
                    let options = lzma_rust2::LzmaOptions::with_preset(6);
                    let w = lzma_rust2::LzmaWriter::new_use_header(Vec::new(), &options, None);
                    let mut w = w.unwrap();
                    w.write_all(b"abc").unwrap();
                    w.finish().unwrap()
                }
                _ => {
                    let options = lzma_rust2::XzOptions::with_preset(6);
                    let mut w = lzma_rust2::XzWriter::new(Vec::new(), options).unwrap();
                    w.write_all(b"abc").unwrap();
                    w.finish().unwrap()
                }
            };
            let e = inflate_joblib(&z, &small).unwrap_err();
            assert!(
                matches!(e.kind, ErrorKind::Limit { actual, .. } if actual >= 8 << 20),
                "{c:?}: {e}"
            );
            assert!(e.to_string().contains("--max-inflated-bytes"), "{e}");
        }
    }

    #[test]
    fn the_output_never_grows_past_the_budget() {
        let mut out = Vec::new();
        let mut d: &[u8] = &[7u8; 3 << 20];
        let budget = (2 << 20) + 5;
        assert!(matches!(
            fill(&mut d, &mut out, budget, usize::MAX),
            Err(Stop::Budget(_))
        ));
        assert!(out.capacity() as u64 <= budget, "{}", out.capacity());
    }
}
