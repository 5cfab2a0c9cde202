//! The memory an LZMA or xz decoder takes for the dictionary a stream declares (up to
//! 4 GiB): read from the `.lzma` header, or from the LZMA2 filter of an `.xz` stream's
//! first block header (the xz file format, 1.2.x: stream header, then block header
//! size, flags, optional sizes and filter flags as variable-length integers), so that a
//! dictionary past the budget is refused with its size before the decoder allocates it.

use super::compress::Compressor;

/// The bytes the decoder of the stream of `c` at the start of `b` takes, when `c` is
/// LZMA or xz and its header declares a dictionary.
pub(crate) fn decoder_memory(c: Compressor, b: &[u8]) -> Option<u64> {
    let kib = match c {
        Compressor::Lzma => {
            let dict = u32::from_le_bytes(b.get(1..5)?.try_into().ok()?);
            lzma_rust2::lzma_get_memory_usage_by_props(dict, *b.first()?).ok()?
        }
        Compressor::Xz => lzma_rust2::lzma2_get_memory_usage(xz_dict(b)?),
        _ => return None,
    };
    Some(u64::from(kib) * 1024)
}

/// The dictionary size of the LZMA2 filter of the first block of the xz stream `b`.
fn xz_dict(b: &[u8]) -> Option<u32> {
    let header = b.get(12..)?;
    let size = usize::from(*header.first()?);
    if size == 0 {
        return None; // no block: the index follows the stream header
    }
    let header = header.get(..(size + 1) * 4)?;
    let flags = *header.get(1)?;
    let mut pos = 2;
    for present in [0x40, 0x80] {
        if flags & present != 0 {
            vli(header, &mut pos)?;
        }
    }
    for _ in 0..=(flags & 3) {
        let id = vli(header, &mut pos)?;
        let len = usize::try_from(vli(header, &mut pos)?).ok()?;
        let props = header.get(pos..pos.checked_add(len)?)?;
        pos += len;
        if id == 0x21 && len == 1 {
            return match props[0] {
                40 => Some(u32::MAX),
                d if d < 40 => Some((2 | u32::from(d & 1)) << (d / 2 + 11)),
                _ => None,
            };
        }
    }
    None
}

/// The variable-length integer at `pos` of `b` (at most 9 bytes of 7 bits), moving
/// `pos` past it.
fn vli(b: &[u8], pos: &mut usize) -> Option<u64> {
    let mut n = 0u64;
    for i in 0..9 {
        let byte = *b.get(*pos)?;
        *pos += 1;
        n |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some(n);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn declared_dictionaries() {
        for preset in [1u32, 6] {
            let dict = lzma_rust2::LzmaOptions::with_preset(preset).dict_size;
            let mut w =
                lzma_rust2::XzWriter::new(Vec::new(), lzma_rust2::XzOptions::with_preset(preset))
                    .unwrap();
            w.write_all(b"some bytes").unwrap();
            let xz = w.finish().unwrap();
            assert_eq!(xz_dict(&xz), Some(dict), "preset {preset}");
            let need = decoder_memory(Compressor::Xz, &xz).unwrap();
            assert!(need >= u64::from(dict), "{need}");
            let options = lzma_rust2::LzmaOptions::with_preset(preset);
            let mut w = lzma_rust2::LzmaWriter::new_use_header(Vec::new(), &options, None).unwrap();
            w.write_all(b"some bytes").unwrap();
            let lzma = w.finish().unwrap();
            let need = decoder_memory(Compressor::Lzma, &lzma).unwrap();
            assert!(need >= u64::from(dict), "{need}");
        }
        assert_eq!(decoder_memory(Compressor::Xz, &[0xfd; 5]), None);
        assert_eq!(decoder_memory(Compressor::Zlib, b"x\x9c"), None);
    }
}
