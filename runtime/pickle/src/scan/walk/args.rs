//! The scanner's reading of opcode arguments, and the opcodes that push plain values
//! (numbers, strings, byte strings, buffers). Hand-written with the scanner.

use std::sync::Arc;

use super::super::sym::{Leaf, S};
use super::super::FaultKind;
use super::{op_name, Halt, Step, Walker};
use crate::read::op;

/// Longest text argument line (`INT`, `FLOAT`, `GLOBAL`'s names, `GET`) read; a longer
/// one is malformed (Python's own lines are short) and reading stops.
const MAX_LINE: usize = 1 << 16;

impl<'a> Walker<'a> {
    /// The next `n` bytes.
    pub(super) fn take(&mut self, n: u64) -> Result<&'a [u8], Halt> {
        let available = (self.data.len() - self.pos) as u64;
        if n > available {
            return Err(self.halt(
                FaultKind::Truncated,
                format!(
                    "{} needs {n} bytes, {available} remain",
                    op_name(self.data[self.op_start])
                ),
            ));
        }
        let data: &'a [u8] = self.data;
        let s = &data[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(s)
    }

    pub(super) fn fixed<const K: usize>(&mut self) -> Result<[u8; K], Halt> {
        let mut b = [0u8; K];
        b.copy_from_slice(self.take(K as u64)?);
        Ok(b)
    }

    /// A length argument of `width` bytes, little-endian (`signed`: a negative one is
    /// malformed, as Python refuses it).
    pub(super) fn length(&mut self, width: usize, signed: bool) -> Result<u64, Halt> {
        let n = match width {
            1 => self.fixed::<1>()?[0] as u64,
            4 if signed => {
                let v = i32::from_le_bytes(self.fixed::<4>()?);
                if v < 0 {
                    let name = op_name(self.data[self.op_start]);
                    return Err(self.halt(FaultKind::Malformed, format!("{name}: length {v}")));
                }
                v as u64
            }
            4 => u32::from_le_bytes(self.fixed::<4>()?) as u64,
            _ => u64::from_le_bytes(self.fixed::<8>()?),
        };
        Ok(n)
    }

    /// The text argument up to the end of its line (not included).
    pub(super) fn line(&mut self) -> Result<&'a [u8], Halt> {
        let data: &'a [u8] = self.data;
        let rest = &data[self.pos..];
        match rest.iter().take(MAX_LINE).position(|&b| b == b'\n') {
            Some(n) => {
                self.pos += n + 1;
                Ok(&rest[..n])
            }
            None if rest.len() < MAX_LINE => {
                Err(self.halt(FaultKind::Truncated, "a text argument has no end of line"))
            }
            None => Err(self.halt(
                FaultKind::Malformed,
                format!("a text argument longer than {MAX_LINE} bytes"),
            )),
        }
    }

    /// `PROTO`: past protocol 5, Python's unpickler stops.
    pub(super) fn proto(&mut self) -> Step {
        let [p] = self.fixed::<1>()?;
        if self.out.protocol.is_none() {
            self.out.protocol = Some(p);
        }
        if p > 5 {
            return Err(self.halt(
                FaultKind::Malformed,
                format!("unsupported pickle protocol {p}"),
            ));
        }
        Ok(())
    }

    /// `FRAME`: its length must fit what remains (the opcodes inside are read as any).
    pub(super) fn frame(&mut self) -> Step {
        let n = self.length(8, false)?;
        let available = (self.data.len() - self.pos) as u64;
        if n > available {
            return Err(self.halt(
                FaultKind::Truncated,
                format!("a FRAME of {n} bytes, {available} remain"),
            ));
        }
        Ok(())
    }

    pub(super) fn dup(&mut self) -> Step {
        let v = self.top()?;
        self.push(v)
    }

    /// `INT`, `LONG`, `FLOAT`: a number in text.
    pub(super) fn text_number(&mut self, code: u8) -> Step {
        let l = self.line()?;
        let t = std::str::from_utf8(l).unwrap_or("").trim().to_string();
        let v = match code {
            op::FLOAT => t.parse::<f64>().ok().map(|_| S::Float),
            op::INT if t == "01" || t == "00" => Some(S::Bool(t == "01")),
            _ => {
                let t = t.strip_suffix('L').unwrap_or(&t);
                let digits = t.strip_prefix('-').unwrap_or(t);
                match t.parse::<i64>() {
                    Ok(v) => Some(S::Int(v)),
                    Err(_) if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) => {
                        Some(S::BigInt)
                    }
                    Err(_) => None,
                }
            }
        };
        match v {
            Some(v) => self.push(v),
            None => {
                let name = op_name(code);
                self.fault(FaultKind::Malformed, format!("bad {name} argument {t:?}"));
                self.push(S::Inert)
            }
        }
    }

    /// `BININT`, `BININT1`, `BININT2`, `BINFLOAT`.
    pub(super) fn bin_number(&mut self, code: u8) -> Step {
        let v = match code {
            op::BININT => S::Int(i32::from_le_bytes(self.fixed::<4>()?) as i64),
            op::BININT1 => S::Int(self.fixed::<1>()?[0] as i64),
            op::BININT2 => S::Int(u16::from_le_bytes(self.fixed::<2>()?) as i64),
            _ => {
                self.fixed::<8>()?;
                S::Float
            }
        };
        self.push(v)
    }

    /// `LONG1`, `LONG4`: little-endian two's complement.
    pub(super) fn long(&mut self, code: u8) -> Step {
        let n = self.length(if code == op::LONG1 { 1 } else { 4 }, true)?;
        let b = self.take(n)?;
        let v = if b.len() <= 8 {
            let neg = b.last().is_some_and(|x| x & 0x80 != 0);
            let mut full = if neg { [0xffu8; 8] } else { [0u8; 8] };
            full[..b.len()].copy_from_slice(b);
            S::Int(i64::from_le_bytes(full))
        } else {
            S::BigInt
        };
        self.push(v)
    }

    /// `STRING`: a quoted Python 2 `str` with escapes.
    pub(super) fn string(&mut self) -> Step {
        let l = self.line()?;
        let body = match l {
            [q, body @ .., q2] if q == q2 && (*q == b'\'' || *q == b'"') => body,
            _ => {
                self.fault(FaultKind::Malformed, "STRING argument is not quoted");
                return self.push(S::Inert);
            }
        };
        self.charge(body.len() as u64)?;
        match crate::escape::unescape_string(body) {
            Some(b) => {
                let i = self.leaf(Leaf::Owned(b.into()))?;
                self.push(S::Text(i))
            }
            None => {
                self.fault(FaultKind::Malformed, "STRING argument has a bad escape");
                self.push(S::Inert)
            }
        }
    }

    /// `BINSTRING`, `SHORT_BINSTRING`: a Python 2 `str`, left in the buffer.
    pub(super) fn binstring(&mut self, code: u8) -> Step {
        let width = if code == op::SHORT_BINSTRING { 1 } else { 4 };
        let n = self.length(width, true)?;
        let offset = self.pos;
        let b = self.take(n)?;
        // torch.load decodes it as UTF-8.
        if std::str::from_utf8(b).is_err() {
            self.refuse_wo("a SHORT_BINSTRING that is not UTF-8".into());
        }
        let i = self.leaf(Leaf::Latin1 {
            offset,
            len: n as usize,
        })?;
        self.push(S::Text(i))
    }

    /// `UNICODE`: text with raw-unicode-escape.
    pub(super) fn unicode(&mut self) -> Step {
        let l = self.line()?;
        self.charge(2 * l.len() as u64)?;
        match crate::escape::raw_unicode_escape(l) {
            Some(s) => {
                let i = self.leaf(Leaf::Text(Arc::from(s)))?;
                self.push(S::Text(i))
            }
            None => {
                self.fault(FaultKind::Malformed, "UNICODE argument has a bad escape");
                self.push(S::Inert)
            }
        }
    }

    /// `BINUNICODE`, `SHORT_BINUNICODE`, `BINUNICODE8`: UTF-8 (lone surrogates allowed, as
    /// Python's `surrogatepass`), left in the buffer.
    pub(super) fn binunicode(&mut self, code: u8) -> Step {
        let width = match code {
            op::SHORT_BINUNICODE => 1,
            op::BINUNICODE => 4,
            _ => 8,
        };
        let n = self.length(width, false)?;
        let offset = self.pos;
        let b = self.take(n)?;
        if !utf8_surrogatepass(b) {
            self.fault(FaultKind::Malformed, "a string that is not UTF-8");
            return self.push(S::Inert);
        }
        let i = self.leaf(Leaf::Utf8 {
            offset,
            len: n as usize,
        })?;
        self.push(S::Text(i))
    }

    /// `BINBYTES`, `SHORT_BINBYTES`, `BINBYTES8`, `BYTEARRAY8`: left in the buffer.
    pub(super) fn binbytes(&mut self, code: u8) -> Step {
        let width = match code {
            op::SHORT_BINBYTES => 1,
            op::BINBYTES => 4,
            _ => 8,
        };
        let n = self.length(width, false)?;
        let offset = self.pos;
        self.take(n)?;
        let i = self.leaf(Leaf::Range {
            offset,
            len: n as usize,
        })?;
        self.push(S::Bytes(i))
    }

    /// `NEXT_BUFFER`: an out-of-band buffer, which `pickle.load` must be given.
    pub(super) fn next_buffer(&mut self) -> Step {
        if self.out.buffers.len() < super::MAX_OFFSETS {
            self.out.buffers.push(self.op_start);
        }
        self.push(S::Inert)
    }
}

/// Whether `b` is UTF-8 once lone surrogates (`ED A0..BF 80..BF`) are allowed.
pub(super) fn utf8_surrogatepass(b: &[u8]) -> bool {
    let mut rest = b;
    loop {
        match std::str::from_utf8(rest) {
            Ok(_) => return true,
            Err(e) => {
                let r = &rest[e.valid_up_to()..];
                match r {
                    [0xed, 0xa0..=0xbf, 0x80..=0xbf, ..] => rest = &r[3..],
                    _ => return false,
                }
            }
        }
    }
}
