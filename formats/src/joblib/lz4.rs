//! The extent of an LZ4 frame (the LZ4 frame format, version 1.6.x: magic, frame
//! descriptor, blocks each led by its size, an end mark, an optional content checksum),
//! walked over the block sizes without decoding: `lz4_flex` takes a frame cut between
//! two blocks for a complete one, so a truncated joblib file is told from a short one
//! here.

/// The length of the LZ4 frame at the start of `b`, or why it is not a whole frame and
/// the offset where that shows.
pub(crate) fn frame_len(b: &[u8]) -> Result<usize, (String, usize)> {
    let truncated = |at: usize| {
        (
            format!(
                "the lz4 frame is truncated: its part at byte {at} runs past the end of the \
                 file, at byte {}",
                b.len()
            ),
            at,
        )
    };
    let &[_, _, _, _, flg, bd, ..] = b else {
        return Err(truncated(b.len()));
    };
    if flg >> 6 != 1 {
        return Err((
            format!("lz4 frame version {} (only version 1 exists)", flg >> 6),
            4,
        ));
    }
    let block_checksum = flg & 0x10 != 0;
    let content_size = flg & 0x08 != 0;
    let content_checksum = flg & 0x04 != 0;
    let dict_id = flg & 0x01 != 0;
    let max_block = match (bd >> 4) & 0x7 {
        4 => 64 << 10,
        5 => 256 << 10,
        6 => 1 << 20,
        7 => 4 << 20,
        other => {
            return Err((
                format!("lz4 block maximum size code {other} is not 4 to 7"),
                5,
            ))
        }
    };
    let mut pos = 6 + if content_size { 8 } else { 0 } + if dict_id { 4 } else { 0 } + 1;
    loop {
        let Some(size) = b.get(pos..pos + 4) else {
            return Err(truncated(pos.min(b.len())));
        };
        let size = u32::from_le_bytes([size[0], size[1], size[2], size[3]]);
        let at = pos;
        pos += 4;
        if size == 0 {
            break;
        }
        let len = (size & 0x7fff_ffff) as usize;
        if len > max_block {
            return Err((
                format!("lz4 block of {len} bytes, past the frame's maximum of {max_block}"),
                at,
            ));
        }
        pos += len + if block_checksum { 4 } else { 0 };
        if pos > b.len() {
            return Err(truncated(at));
        }
    }
    if content_checksum {
        pos += 4;
    }
    if pos > b.len() {
        return Err(truncated(b.len()));
    }
    Ok(pos)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(data: &[u8]) -> Vec<u8> {
        let mut w = lz4_flex::frame::FrameEncoder::new(Vec::new());
        std::io::Write::write_all(&mut w, data).unwrap();
        w.finish().unwrap()
    }

    #[test]
    fn a_frame_s_extent_and_its_truncations() {
        let data: Vec<u8> = (0..300_000u32)
            .flat_map(|i| (i % 251).to_le_bytes())
            .collect();
        let f = frame(&data);
        assert_eq!(frame_len(&f), Ok(f.len()));
        let mut longer = f.clone();
        longer.extend_from_slice(b"tail");
        assert_eq!(frame_len(&longer), Ok(f.len()));
        // Cut anywhere, the frame is refused (a cut between blocks too).
        for cut in [
            3,
            6,
            7,
            11,
            f.len() / 2,
            f.len() - 5,
            f.len() - 4,
            f.len() - 1,
        ] {
            let e = frame_len(&f[..cut]).unwrap_err();
            assert!(e.0.contains("truncated"), "{cut}: {e:?}");
        }
        let mut bad = f.clone();
        bad[4] = 0;
        assert!(frame_len(&bad).unwrap_err().0.contains("version 0"));
    }
}
