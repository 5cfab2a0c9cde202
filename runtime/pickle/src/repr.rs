//! Python's `repr` of a pickled value: the name of a dict key that is neither text nor an
//! integer in a tensor's path (README.md, *Tensor names and digests*): `(1, 'x')`,
//! `b'k'`, `1.5`, `None`, `frozenset({1, 2})`.

use std::fmt::Write as _;

use super::rules::Kind;
use super::value::Value;
use tensorfmt_core::error::{ErrorKind, Result};
use tensorfmt_core::tree::{repr_bytes, repr_str};

/// The most digits Python prints of an integer (`sys.get_int_max_str_digits()`); a
/// longer one is refused, as `repr` refuses it.
const MAX_DIGITS: usize = 4300;

/// Writes Python's `repr` of values into a text, within bounds: at most `max_len` bytes
/// of text, `max_nodes` values visited and `max_depth` levels entered, each counted
/// across every value written with it.
pub(crate) struct Repr<'a> {
    /// The pickle whose byte strings [`Value::Range`]s point into.
    pub buffer: &'a [u8],
    /// The longest text allowed.
    pub max_len: usize,
    /// The values that may still be visited.
    pub nodes_left: u64,
    /// The levels that may still be entered.
    pub depth_left: u64,
}

/// The decimal digits of the little-endian two's complement integer `le`; `None` beyond
/// [`MAX_DIGITS`] digits.
fn decimal(le: &[u8]) -> Option<String> {
    let neg = le.last().is_some_and(|b| b & 0x80 != 0);
    // The magnitude, as 32-bit limbs, least significant first.
    let mut bytes = le.to_vec();
    if neg {
        let mut carry = true;
        for b in &mut bytes {
            *b = !*b;
            if carry {
                let (v, c) = b.overflowing_add(1);
                *b = v;
                carry = c;
            }
        }
    }
    while bytes.last() == Some(&0) {
        bytes.pop();
    }
    if bytes.len() > MAX_DIGITS / 2 {
        return None;
    }
    let mut limbs: Vec<u32> = bytes
        .chunks(4)
        .map(|c| {
            let mut w = [0u8; 4];
            w[..c.len()].copy_from_slice(c);
            u32::from_le_bytes(w)
        })
        .collect();
    let mut groups = Vec::new();
    while limbs.iter().any(|&l| l != 0) {
        let mut rem: u64 = 0;
        for l in limbs.iter_mut().rev() {
            let cur = (rem << 32) | u64::from(*l);
            *l = (cur / 1_000_000_000) as u32;
            rem = cur % 1_000_000_000;
        }
        groups.push(rem as u32);
    }
    let mut s = String::from(if neg { "-" } else { "" });
    match groups.pop() {
        None => s.push('0'),
        Some(top) => {
            let _ = write!(s, "{top}");
            for g in groups.iter().rev() {
                let _ = write!(s, "{g:09}");
            }
        }
    }
    (s.trim_start_matches('-').len() <= MAX_DIGITS).then_some(s)
}

impl Repr<'_> {
    /// Appends Python's `repr` of `v` to `out`: `None`, `True`, integers in decimal, floats
    /// as Python writes them (`1.5`, `1e+16`, `nan`), text and byte strings quoted and
    /// escaped, tuples (`(1,)`), lists, dicts, sets and frozensets (`frozenset({1, 2})`)
    /// of such; a global as its dotted name, a call as `name(args)` (items of a list- or
    /// tuple-kind object in a list, entries of a dict-kind one in a dict:
    /// `torch.Size([2, 3])`), a persistent id as `persistent_id(...)`. Fails with
    /// [`ErrorKind::Limit`] past the bounds.
    pub fn write(&mut self, v: &Value, out: &mut String) -> Result<()> {
        self.nodes_left = self.nodes_left.checked_sub(1).ok_or(ErrorKind::Limit {
            what: "pickle nodes walked",
            limit: 0,
            actual: 1,
        })?;
        match v {
            Value::None => out.push_str("None"),
            Value::Bool(b) => out.push_str(if *b { "True" } else { "False" }),
            Value::Int(i) => {
                let _ = write!(out, "{i}");
            }
            Value::BigInt(b) => match decimal(b) {
                Some(d) => out.push_str(&d),
                None => {
                    return Err(ErrorKind::Invalid(format!(
                        "a dict key is an integer of more than {MAX_DIGITS} digits, which \
                         Python does not print"
                    ))
                    .into())
                }
            },
            Value::Float(x) => {
                let _ = write!(out, "{}", tensorfmt_core::tree::Node::Float(*x));
            }
            Value::Str(s) => repr_str(s, out),
            Value::Bytes(b) => repr_bytes(b, out),
            Value::Range(r) => match (&r.text, super::tree::range_bytes(self.buffer, r)) {
                (Some(t), _) => repr_str(t, out),
                (None, Some(b)) => repr_bytes(&b, out),
                (None, None) => {
                    let _ = write!(out, "<{} bytes at offset {}>", r.len, r.offset);
                }
            },
            Value::Stream(s) => {
                let _ = write!(out, "<{} bytes streamed>", s.len);
            }
            Value::Tuple(items) => self.seq("(", items, ")", out)?,
            Value::List(items) => self.seq("[", items, "]", out)?,
            Value::Set(items) if items.is_empty() => out.push_str("set()"),
            Value::Set(items) => self.seq("{", items, "}", out)?,
            Value::FrozenSet(items) if items.is_empty() => out.push_str("frozenset()"),
            Value::FrozenSet(items) => self.seq("frozenset({", items, "})", out)?,
            Value::Dict(entries) => self.dict(entries, out)?,
            Value::Global(g) => out.push_str(&g.path),
            Value::Persistent(id) => {
                out.push_str("persistent_id(");
                self.nested(id, out)?;
                out.push(')');
            }
            Value::Object(o) => {
                out.push_str(&o.global.path);
                out.push('(');
                match o.kind {
                    Kind::Dict => self.dict(&o.entries, out)?,
                    Kind::List | Kind::Tuple | Kind::Set => self.seq("[", &o.items, "]", out)?,
                    Kind::Call { .. }
                    | Kind::Apply { .. }
                    | Kind::Class
                    | Kind::Object
                    | Kind::Inert => {
                        for (i, a) in o.args.iter().enumerate() {
                            if i > 0 {
                                out.push_str(", ");
                            }
                            self.nested(a, out)?;
                        }
                    }
                }
                out.push(')');
            }
        }
        self.check_len(out)
    }

    fn check_len(&self, out: &str) -> Result<()> {
        if out.len() > self.max_len {
            return Err(super::over_budget(
                "memory for tensor names (--max-tree-bytes)",
                self.max_len as u64,
                out.len() as u64,
            ));
        }
        Ok(())
    }

    /// `v` one level deeper.
    fn nested(&mut self, v: &Value, out: &mut String) -> Result<()> {
        self.depth_left = self.depth_left.checked_sub(1).ok_or(ErrorKind::Limit {
            what: "pickle nesting depth",
            limit: 0,
            actual: 1,
        })?;
        let r = self.write(v, out);
        self.depth_left += 1;
        r
    }

    fn seq(&mut self, open: &str, items: &[Value], close: &str, out: &mut String) -> Result<()> {
        out.push_str(open);
        for (i, v) in items.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            self.nested(v, out)?;
            self.check_len(out)?;
        }
        if open == "(" && items.len() == 1 {
            out.push(',');
        }
        out.push_str(close);
        Ok(())
    }

    fn dict(&mut self, entries: &[(Value, Value)], out: &mut String) -> Result<()> {
        out.push('{');
        for (i, (k, v)) in entries.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            self.nested(k, out)?;
            out.push_str(": ");
            self.nested(v, out)?;
            self.check_len(out)?;
        }
        out.push('}');
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Global, Object};

    fn repr(v: &Value) -> String {
        let mut r = Repr {
            buffer: &[],
            max_len: 1 << 20,
            nodes_left: 1000,
            depth_left: 10,
        };
        let mut out = String::new();
        r.write(v, &mut out).unwrap();
        out
    }

    #[test]
    fn values_print_as_python_prints_them() {
        let cases: Vec<(Value, &str)> = vec![
            (
                Value::tuple(vec![Value::Int(1), Value::str("x")]),
                "(1, 'x')",
            ),
            (Value::tuple(vec![Value::Int(1)]), "(1,)"),
            (Value::tuple(vec![]), "()"),
            (Value::bytes(b"k"), "b'k'"),
            (Value::bytes(b"it's\x00\n\xff"), "b\"it's\\x00\\n\\xff\""),
            (Value::bytes(b"'\""), "b'\\'\"'"),
            (Value::Float(1.5), "1.5"),
            (Value::Float(1.0), "1.0"),
            (Value::Float(1e16), "1e+16"),
            (Value::Float(f64::NAN), "nan"),
            (Value::None, "None"),
            (Value::Bool(true), "True"),
            (Value::str("it's"), "\"it's\""),
            (
                Value::str("a\u{200b}b\u{e9}\u{a0}\t"),
                "'a\\u200bb\u{e9}\\xa0\\t'",
            ),
            (Value::str("\u{e0041}"), "'\\U000e0041'"),
            (
                Value::FrozenSet(vec![Value::Int(1), Value::Int(2)].into()),
                "frozenset({1, 2})",
            ),
            (Value::FrozenSet(Vec::new().into()), "frozenset()"),
            (Value::int(1 << 100), "1267650600228229401496703205376"),
            (Value::int(-(1 << 70)), "-1180591620717411303424"),
            (Value::global("torch.float32"), "torch.float32"),
            (
                Value::object(
                    Object::new(Global::new("torch", "Size"), Kind::Tuple)
                        .with_items(vec![Value::Int(2), Value::Int(3)]),
                ),
                "torch.Size([2, 3])",
            ),
        ];
        for (v, want) in cases {
            assert_eq!(repr(&v), want, "{v:?}");
        }
    }

    #[test]
    fn bounds_hold() {
        let mut v = Value::Int(0);
        for _ in 0..20 {
            v = Value::tuple(vec![v]);
        }
        let mut r = Repr {
            buffer: &[],
            max_len: 1 << 20,
            nodes_left: 1000,
            depth_left: 10,
        };
        assert!(r.write(&v, &mut String::new()).is_err());
        let mut r = Repr {
            buffer: &[],
            max_len: 8,
            nodes_left: 1000,
            depth_left: 100,
        };
        let long = Value::tuple(vec![Value::str("abcdefgh"), Value::Int(1)]);
        assert!(r.write(&long, &mut String::new()).is_err());
        assert!(decimal(&[0xff; 3000]).is_some());
        assert!(decimal(&vec![0x7f; 3000]).is_none());
    }
}
