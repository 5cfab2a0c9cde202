//! Data inline after a `BUILD` ([`Rules::inline_data`]: joblib writes each array's bytes
//! right after its wrapper's `BUILD`): the object's state, a small part of the machine's
//! containers, made a [`Value`] while reading goes on and handed to the rules' function
//! for the data's length; the data recorded as a byte range of the buffer and skipped.
//!
//! [`Rules::inline_data`]: crate::Rules::inline_data

use std::sync::Arc;

use super::{Body, Content, Leaf, Machine, N};
use crate::value::{ByteRange, Object, Value};
use tensorfmt_core::error::{Error, ErrorKind, Location, Result};

/// Most nodes of a state made into a value: a joblib wrapper's state (a dict of a
/// shape, an order, a dtype and two flags) takes about 20.
const MAX_NODES: u32 = 256;

/// Most nesting of such a state.
const MAX_LEVELS: u32 = 8;

impl Machine<'_> {
    /// After the `BUILD` of the call `c` with `state`: when the rules give its global data
    /// inline, reads the data's length from the state, records the data as the call's
    /// one item and moves past it.
    pub(super) fn inline_data(&mut self, c: u32, state: N) -> Result<()> {
        let ob = &self.calls[c as usize];
        let Some(f) = self.rules.inline_fn(&ob.callee.global.path) else {
            return Ok(());
        };
        let global = ob.callee.global.clone();
        if !matches!(&ob.content, Content::Inert(i) if i.items.is_empty()) {
            return Err(self.err(format!(
                "a second BUILD of a '{global}' object, or one holding items: its data is read once"
            )));
        }
        if self.frame_end.is_some_and(|e| e > self.pos) {
            return Err(self.err(format!(
                "the data of a '{global}' object follows its BUILD inside a FRAME"
            )));
        }
        let state = self.small_value(state)?;
        let at = self.pos;
        let (pad, len) = f(&state, &self.data[at..]).map_err(|e| {
            let message = format!("the data after '{global}''s BUILD: {e}");
            super::codec_error(self.op_start, message)
        })?;
        let left = (self.data.len() - at) as u64;
        let end = pad.checked_add(len).filter(|&n| n <= left).ok_or_else(|| {
            Error::new(
                ErrorKind::Truncated {
                    needed: pad.saturating_add(len),
                    available: left,
                },
                Location::default().with_offset(at as u64),
            )
        })?;
        let range = ByteRange {
            offset: at as u64 + pad,
            stored: len,
            len,
            latin1: false,
            text: None,
        };
        let item = self.leaf(Leaf::Range(Arc::new(range)))?;
        self.spend
            .charge(std::mem::size_of::<N>() as u64)
            .map_err(|t| self.over(t))?;
        if let Content::Inert(i) = &mut self.calls[c as usize].content {
            i.items.push(item);
        }
        self.pos = at + end as usize;
        self.frame_end = None;
        Ok(())
    }

    /// `n` as a value, copied (nothing shared), when it holds at most [`MAX_NODES`] nodes
    /// nested at most [`MAX_LEVELS`] deep; an error naming the opcode otherwise.
    pub(super) fn small_value(&self, n: N) -> Result<Value> {
        let mut left = MAX_NODES;
        self.small(n, &mut left, 0).ok_or_else(|| {
            self.err(format!(
                "the state before inline data is larger than {MAX_NODES} values or nested deeper than {MAX_LEVELS}"
            ))
        })
    }

    fn small(&self, n: N, left: &mut u32, level: u32) -> Option<Value> {
        *left = left.checked_sub(1)?;
        if level > MAX_LEVELS {
            return None;
        }
        let i = match n {
            N::None => return Some(Value::None),
            N::Bool(b) => return Some(Value::Bool(b)),
            N::Int(v) => return Some(Value::Int(v)),
            N::Float(f) => return Some(Value::Float(f)),
            N::Leaf(l) => return self.small_leaf(&self.leaves[l as usize]),
            N::Ref(i) => i,
        };
        let seq = |v: &[N], left: &mut u32| -> Option<Arc<[Value]>> {
            v.iter().map(|&x| self.small(x, left, level + 1)).collect()
        };
        let pairs = |d: &[(N, N)], left: &mut u32| -> Option<Arc<[(Value, Value)]>> {
            d.iter()
                .map(|&(k, v)| {
                    Some((
                        self.small(k, left, level + 1)?,
                        self.small(v, left, level + 1)?,
                    ))
                })
                .collect()
        };
        Some(match &self.objs[i as usize].body {
            Body::Tuple(span) => Value::Tuple(seq(self.items(*span), left)?),
            Body::List(v) => Value::List(seq(v, left)?),
            Body::Set(v) => Value::Set(seq(v, left)?),
            Body::FrozenSet(v) => Value::FrozenSet(seq(v, left)?),
            Body::Dict(d) => Value::Dict(pairs(d, left)?),
            Body::Persistent(p) => Value::Persistent(Arc::new(self.small(*p, left, level + 1)?)),
            Body::Object(c) => {
                let ob = &self.calls[*c as usize];
                let kind = ob.callee.kind.clone()?;
                let mut o = Object::of(ob.callee.global.clone(), kind);
                o.args = seq(self.items(ob.args), left)?.to_vec();
                o.items = seq(ob.items(), left)?.to_vec();
                o.entries = pairs(ob.entries(), left)?.to_vec();
                o.kwargs = pairs(ob.kwargs(), left)?.to_vec();
                if let Some(s) = ob.state {
                    o.state = Some(self.small(s, left, level + 1)?);
                }
                Value::Object(Arc::new(o))
            }
        })
    }

    fn small_leaf(&self, l: &Leaf) -> Option<Value> {
        Some(match l {
            Leaf::Big(b) => Value::BigInt(b.clone()),
            Leaf::Str(s) | Leaf::Utf8 { short: Some(s), .. } => Value::Str(s.clone()),
            Leaf::Utf8 { .. } => return None,
            Leaf::Bytes(b) => Value::Bytes(b.clone()),
            Leaf::Range(r) => Value::Range(r.clone()),
            Leaf::Global(g) => Value::Global(g.global.clone()),
        })
    }
}
