//! Where a pickle stream ends, found by stepping over its opcodes (each one's argument
//! length, as `pickletools` lists them for protocols 0 to 5) without reading its values:
//! joblib writes an array of Python objects as a pickle of its own right after the
//! wrapper's `BUILD`, whose extent is all the outer pickle needs of it.

use crate::{ErrorKind, Result};

/// How an opcode's argument is laid out.
enum Arg {
    /// A fixed number of bytes.
    Fixed(usize),
    /// A little-endian length of this many bytes, then that many bytes.
    Counted(usize),
    /// This many newline-terminated lines.
    Lines(usize),
}

/// The argument of `op`, or `None` for a byte that is no opcode.
fn arg(op: u8) -> Option<Arg> {
    use Arg::*;
    Some(match op {
        // Protocols 0 and 1.
        b'(' | b'.' | b'0' | b'1' | b'2' | b'N' | b'Q' | b'R' | b'a' | b'b' | b'd' | b'}'
        | b'e' | b'l' | b']' | b'o' | b's' | b't' | b')' | b'u' => Fixed(0),
        b'F' | b'I' | b'L' | b'P' | b'S' | b'V' | b'g' | b'p' => Lines(1),
        b'c' | b'i' => Lines(2),
        b'J' | b'j' | b'r' => Fixed(4),
        b'K' | b'h' | b'q' => Fixed(1),
        b'M' => Fixed(2),
        b'G' => Fixed(8),
        b'T' | b'X' | b'B' => Counted(4),
        b'U' | b'C' => Counted(1),
        // Protocol 2.
        0x80 | 0x82 => Fixed(1),
        0x83 => Fixed(2),
        0x84 => Fixed(4),
        0x81 | 0x85..=0x89 => Fixed(0),
        0x8a => Counted(1),
        0x8b => Counted(4),
        // Protocol 4: FRAME's argument is the frame's length, whose opcodes follow.
        0x8c => Counted(1),
        0x8d | 0x8e => Counted(8),
        0x8f..=0x94 => Fixed(0),
        0x95 => Fixed(8),
        // Protocol 5.
        0x96 => Counted(8),
        0x97 | 0x98 => Fixed(0),
        _ => return None,
    })
}

/// The length of the pickle at the start of `b`, up to and including its `STOP`: an
/// error naming the offset (from `b`'s start) of a byte that is no opcode or of an
/// argument that runs past the end.
pub(crate) fn pickle_len(b: &[u8]) -> Result<u64> {
    let past = |at: usize| {
        ErrorKind::Invalid(format!(
            "the pickle of an object array runs past the end of the file \
             (its opcode at byte {at} after the wrapper)"
        ))
    };
    let mut pos = 0usize;
    loop {
        let at = pos;
        let &op = b.get(pos).ok_or_else(|| past(at))?;
        pos += 1;
        let arg = arg(op).ok_or_else(|| {
            ErrorKind::Invalid(format!(
                "the pickle of an object array has no opcode {op:#04x} (byte {at} after the wrapper)"
            ))
        })?;
        let len = match arg {
            Arg::Fixed(n) => n,
            Arg::Counted(n) => {
                let bytes = b.get(pos..pos + n).ok_or_else(|| past(at))?;
                let mut le = [0u8; 8];
                le[..n].copy_from_slice(bytes);
                pos += n;
                usize::try_from(u64::from_le_bytes(le)).map_err(|_| past(at))?
            }
            Arg::Lines(n) => {
                let mut len = 0;
                for _ in 0..n {
                    let rest = b.get(pos + len..).unwrap_or_default();
                    let nl = rest
                        .iter()
                        .position(|&c| c == b'\n')
                        .ok_or_else(|| past(at))?;
                    len += nl + 1;
                }
                len
            }
        };
        pos = pos
            .checked_add(len)
            .filter(|&p| p <= b.len())
            .ok_or_else(|| past(at))?;
        if op == b'.' {
            return Ok(pos as u64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_end_of_pickles_of_every_protocol() {
        // pickle.dumps(['a', 1, 2.5, b'xy', None, (1, 2)], protocol=p) for p = 0, 2, 5.
        let p0: &[u8] = b"(lp0\nVa\np1\naI1\naF2.5\nac_codecs\nencode\np2\n(Vxy\np3\nVlatin1\np4\ntp5\nRp6\naNa(I1\nI2\ntp7\na.";
        let p2: &[u8] = b"\x80\x02]q\x00(X\x01\x00\x00\x00aq\x01K\x01G@\x04\x00\x00\x00\x00\x00\x00c_codecs\nencode\nq\x02X\x02\x00\x00\x00xyq\x03X\x06\x00\x00\x00latin1q\x04\x86q\x05Rq\x06NK\x01K\x02\x86q\x07e.";
        let p5: &[u8] = b"\x80\x05\x95 \x00\x00\x00\x00\x00\x00\x00]\x94(\x8c\x01a\x94K\x01G@\x04\x00\x00\x00\x00\x00\x00C\x02xy\x94NK\x01K\x02\x86\x94e.";
        for p in [p0, p2, p5] {
            let mut after = p.to_vec();
            after.extend_from_slice(b"\x01\xffdata");
            assert_eq!(pickle_len(&after).unwrap(), p.len() as u64);
        }
        let e = pickle_len(&p5[..p5.len() - 1]).unwrap_err();
        assert!(e.to_string().contains("runs past the end"), "{e}");
        let e = pickle_len(b"\x80\x05\x00").unwrap_err();
        assert!(e.to_string().contains("no opcode 0x00"), "{e}");
        let e = pickle_len(b"\x8e\xff\xff\xff\xff\xff\xff\xff\xff").unwrap_err();
        assert!(e.to_string().contains("runs past the end"), "{e}");
    }
}
