//! Copies of the scanner's symbolic values out of its arenas ([`SymValue`]), for a
//! container format's hooks and a pickle's result: bounded in depth, in values and by
//! the walker's budget, the rest [`SymValue::Unknown`]. Hand-written with the scanner.

use std::sync::Arc;

use super::super::sym::{ByteData, Obj, SymValue, MAX_NODES, S};
use super::Walker;

/// The encodings `_codecs.encode(text, encoding)` is read back through.
const LATIN1: [&str; 5] = ["latin1", "latin-1", "iso-8859-1", "iso8859-1", "l1"];

impl Walker<'_> {
    /// A copy of `s`, `depth` containers deep, counting the values copied in `nodes`.
    pub(super) fn copy(&mut self, s: S, depth: u64, nodes: &mut usize) -> SymValue {
        if *nodes >= MAX_NODES || depth > self.opts.limits.max_depth {
            return SymValue::Unknown;
        }
        *nodes += 1;
        match s {
            S::Inert | S::Opaque | S::Persistent => SymValue::Unknown,
            S::None => SymValue::None,
            S::Bool(b) => SymValue::Bool(b),
            S::Int(i) => SymValue::Int(i),
            S::BigInt => SymValue::BigInt,
            S::Float => SymValue::Float,
            S::Text(_) => {
                let Some(t) = self.text_of(s).map(|t| t.into_owned()) else {
                    return SymValue::Unknown;
                };
                match self.charge(t.len() as u64) {
                    Ok(()) => SymValue::Str(t),
                    Err(_) => SymValue::Unknown,
                }
            }
            S::Bytes(i) => match self.leaves[i as usize].bytes() {
                Some(b) => SymValue::Bytes(b),
                None => SymValue::Unknown,
            },
            S::Global(i) => {
                let g = &self.out.globals[i as usize];
                SymValue::Global {
                    module: g.module.clone(),
                    name: g.name.clone(),
                }
            }
            S::Obj(i) => self.copy_obj(i, depth, nodes),
        }
    }

    fn copy_obj(&mut self, i: u32, depth: u64, nodes: &mut usize) -> SymValue {
        // The items are copied out of the arena first (16 bytes each), then each copied.
        let (kind, items, pairs) = match &self.objs[i as usize] {
            Obj::Tuple(v) => (0, v.clone(), Vec::new()),
            Obj::List(v) => (1, v.clone(), Vec::new()),
            Obj::Set(v) | Obj::FrozenSet(v) => (2, v.clone(), Vec::new()),
            Obj::Dict(d) => (3, Vec::new(), d.clone()),
            Obj::Made(m) => {
                let (callee, args, state) = (m.callee, m.args, m.state);
                return self.copy_made(callee, args, state, depth, nodes);
            }
        };
        if self
            .charge(16 * (items.len() + 2 * pairs.len()) as u64)
            .is_err()
        {
            return SymValue::Unknown;
        }
        let mut copied = Vec::with_capacity(items.len().min(MAX_NODES));
        for s in items {
            if *nodes >= MAX_NODES {
                break;
            }
            copied.push(self.copy(s, depth + 1, nodes));
        }
        match kind {
            0 => SymValue::Tuple(copied),
            1 => SymValue::List(copied),
            2 => SymValue::Set(copied),
            _ => {
                let mut out = Vec::with_capacity(pairs.len().min(MAX_NODES));
                for (k, v) in pairs {
                    if *nodes >= MAX_NODES {
                        break;
                    }
                    let k = self.copy(k, depth + 1, nodes);
                    let v = self.copy(v, depth + 1, nodes);
                    out.push((k, v));
                }
                SymValue::Dict(out)
            }
        }
    }

    /// An object a call made; `_codecs.encode(text, 'latin1')` as the bytes it makes.
    fn copy_made(
        &mut self,
        callee: S,
        args: S,
        state: Option<S>,
        depth: u64,
        nodes: &mut usize,
    ) -> SymValue {
        let callee = self.copy(callee, depth + 1, nodes);
        let args = self.copy(args, depth + 1, nodes);
        if let Some(b) = self.encoded(&callee, &args) {
            return b;
        }
        let state = state.map(|s| Box::new(self.copy(s, depth + 1, nodes)));
        SymValue::Object {
            callee: Box::new(callee),
            args: Box::new(args),
            state,
        }
    }

    /// The bytes `_codecs.encode(text, 'latin1')` makes (as Python 3 pickles `bytes` at
    /// protocols 2 and lower), charged; `None` for any other call.
    fn encoded(&mut self, callee: &SymValue, args: &SymValue) -> Option<SymValue> {
        if callee.global_path().as_deref() != Some("_codecs.encode") {
            return None;
        }
        let items = args.items()?;
        let (text, enc) = match items {
            [t, e] => (
                t.as_str()?,
                e.as_str()?.to_ascii_lowercase().replace('_', "-"),
            ),
            _ => return None,
        };
        if !LATIN1.contains(&enc.as_str()) {
            return None;
        }
        if self.charge(text.len() as u64).is_err() {
            return Some(SymValue::Unknown);
        }
        let bytes: Option<Vec<u8>> = text.chars().map(|c| u8::try_from(c as u32).ok()).collect();
        Some(match bytes {
            Some(b) => SymValue::Bytes(ByteData::Owned(Arc::from(b))),
            None => SymValue::Unknown,
        })
    }
}
