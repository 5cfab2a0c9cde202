//! The text escapes of protocol 0 (`STRING` bodies as Python's `repr` writes them,
//! `UNICODE` as `raw-unicode-escape`), decoded as CPython decodes them: what the reader
//! and the scanner both read.

/// Decodes Python's `repr` escapes of a protocol-0 `STRING` body.
pub(crate) fn unescape_string(s: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        let c = s[i];
        i += 1;
        if c != b'\\' {
            out.push(c);
            continue;
        }
        let e = *s.get(i)?;
        i += 1;
        match e {
            b'\n' => {}
            b'\\' | b'\'' | b'"' => out.push(e),
            b'a' => out.push(7),
            b'b' => out.push(8),
            b'f' => out.push(12),
            b'n' => out.push(b'\n'),
            b'r' => out.push(b'\r'),
            b't' => out.push(b'\t'),
            b'v' => out.push(11),
            b'x' => {
                let h = s.get(i..i + 2)?;
                let h = std::str::from_utf8(h).ok()?;
                out.push(u8::from_str_radix(h, 16).ok()?);
                i += 2;
            }
            b'0'..=b'7' => {
                let mut v: u32 = (e - b'0') as u32;
                let mut n = 1;
                while n < 3 && i < s.len() && (b'0'..=b'7').contains(&s[i]) {
                    v = v * 8 + (s[i] - b'0') as u32;
                    i += 1;
                    n += 1;
                }
                out.push((v & 0xff) as u8);
            }
            _ => {
                out.push(b'\\');
                out.push(e);
            }
        }
    }
    Some(out)
}

/// Decodes Python's `raw-unicode-escape` (protocol-0 `UNICODE`).
pub(crate) fn raw_unicode_escape(s: &[u8]) -> Option<String> {
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        let c = s[i];
        if c == b'\\' && matches!(s.get(i + 1), Some(b'u') | Some(b'U')) {
            let n = if s[i + 1] == b'u' { 4 } else { 8 };
            let h = std::str::from_utf8(s.get(i + 2..i + 2 + n)?).ok()?;
            out.push(char::from_u32(u32::from_str_radix(h, 16).ok()?)?);
            i += 2 + n;
        } else {
            out.push(c as char);
            i += 1;
        }
    }
    Some(out)
}
