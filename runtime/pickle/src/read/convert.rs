//! The machine's containers turned into the immutable, shared [`Value`] tree at `STOP`.

use std::collections::HashMap;
use std::sync::Arc;

use super::{Body, Leaf, Machine, Memo, Obj, ObjN, Span, Spend, MEMORY, N, SPARSE_ENTRY};
use crate::codec_error;
use crate::rules::Kind;
use crate::value::{arc_bytes, object_bytes, Object, Value};
use tensorfmt_core::error::{Error, ErrorKind, Location, Result};

/// How often a container is referenced from the value, in the low bits of its flags
/// (saturating: 2 is "more than once").
const REFS: u8 = 0b011;
/// A container being converted (met again: a cycle).
const BUSY: u8 = 0b100;
/// A container converted.
const DONE: u8 = 0b1000;

/// The bytes one entry of the map of shared values takes, room included.
const SHARED_ENTRY: u64 = 2 * (std::mem::size_of::<(u32, (Value, u64))>() as u64 + 1);

impl Machine<'_> {
    /// The value of `root`, made in one pass: each container converted once, in one
    /// allocation, and those referenced more than once kept, so that sharing is kept; a
    /// cycle or nesting beyond `max_depth` stops the conversion (whose recursion is
    /// bounded by `max_depth`). What it makes is charged to the machine's budget.
    pub(super) fn convert(&mut self, root: N) -> Result<Value> {
        self.release_stack_and_memo();
        let flags = self.count_refs(root)?;
        let mut c = Converter {
            data: self.data,
            objs: &self.objs,
            pool: &self.pool,
            calls: &self.calls,
            leaves: &self.leaves,
            flags,
            shared: HashMap::new(),
            max_depth: self.limits.max_depth,
            spend: &mut self.spend,
            at: self.op_start,
            failed: None,
        };
        let (v, _) = c.build(root, 0);
        match c.failed {
            Some(e) => Err(e),
            None => Ok(v),
        }
    }

    /// Frees the stack, the marks and the memo (of no use once the pickle's value is on
    /// the stack) and gives their charges back.
    fn release_stack_and_memo(&mut self) {
        let held = (self.high.0 * std::mem::size_of::<N>()
            + self.high.1 * std::mem::size_of::<usize>()
            + self.memo.dense.len() * std::mem::size_of::<Option<N>>()) as u64
            + self.memo.sparse.len() as u64 * SPARSE_ENTRY;
        self.stack = Vec::new();
        self.marks = Vec::new();
        self.memo = Memo::default();
        self.spend.spent = self.spend.spent.saturating_sub(held);
    }

    /// For each container, how often the value of `root` references it (0, 1 or 2 for
    /// more), counted by a depth-first walk that enters each container once, with a
    /// stack of at most `max_depth` containers (a path longer than that is refused, as
    /// the conversion would refuse it).
    fn count_refs(&mut self, root: N) -> Result<Vec<u8>> {
        self.charge(self.objs.len() as u64)?;
        let mut flags = vec![0u8; self.objs.len()];
        // The containers entered, each with the index of its next child.
        let mut path: Vec<(u32, usize)> = Vec::new();
        let mut next = Some(root);
        loop {
            if let Some(N::Ref(i)) = next {
                let f = &mut flags[i as usize];
                if *f & REFS < 2 {
                    *f += 1;
                }
                if *f & REFS == 1 {
                    if path.len() as u64 >= self.limits.max_depth {
                        return Err(self.err(format!(
                            "nesting depth exceeds the limit {}",
                            self.limits.max_depth
                        )));
                    }
                    self.spend.reserve(&mut path, 1).map_err(|t| self.over(t))?;
                    path.push((i, 0));
                }
            }
            let Some((i, k)) = path.last_mut() else {
                break;
            };
            next = child(&self.objs[*i as usize], &self.pool, &self.calls, *k);
            match next {
                Some(_) => *k += 1,
                None => {
                    path.pop();
                }
            }
        }
        Ok(flags)
    }
}

/// The value at position `k` of what the container `o` holds, in the order the
/// conversion meets them; `None` past the last.
fn child(o: &Obj, pool: &[N], calls: &[ObjN], k: usize) -> Option<N> {
    match &o.body {
        Body::Tuple(span) => pool[span.range()].get(k).copied(),
        Body::List(v) | Body::Set(v) | Body::FrozenSet(v) => v.get(k).copied(),
        Body::Dict(d) => pair_item(d, k),
        Body::Persistent(p) => (k == 0).then_some(*p),
        Body::Object(c) => {
            let ob = &calls[*c as usize];
            let args = &pool[ob.args.range()];
            let mut k = k;
            for part in [args, ob.items()] {
                match part.get(k) {
                    Some(n) => return Some(*n),
                    None => k -= part.len(),
                }
            }
            for part in [ob.entries(), ob.kwargs()] {
                match pair_item(part, k) {
                    Some(n) => return Some(n),
                    None => k -= 2 * part.len(),
                }
            }
            (k == 0).then_some(ob.state).flatten()
        }
    }
}

/// Item `k` of `d` flattened (keys and values in turn).
fn pair_item(d: &[(N, N)], k: usize) -> Option<N> {
    let (key, value) = d.get(k / 2)?;
    Some(if k % 2 == 0 { *key } else { *value })
}

struct Converter<'m> {
    /// The pickle (the texts left in it).
    data: &'m [u8],
    objs: &'m [Obj],
    /// The items of tuples.
    pool: &'m [N],
    /// The calls.
    calls: &'m [ObjN],
    leaves: &'m [Leaf],
    /// Per container: how often it is referenced ([`REFS`]), [`BUSY`], [`DONE`].
    flags: Vec<u8>,
    /// The values of containers referenced more than once, and the heights of the trees
    /// below them (1 for a container of scalars).
    shared: HashMap<u32, (Value, u64)>,
    max_depth: u64,
    spend: &'m mut Spend,
    /// The offset of the `STOP` opcode, where errors are reported.
    at: usize,
    /// Why the conversion stopped, if it did.
    failed: Option<Error>,
}

impl Converter<'_> {
    fn fail(&mut self, why: String) -> (Value, u64) {
        self.failed.get_or_insert(codec_error(self.at, why));
        (Value::None, 0)
    }

    /// Charges `bytes`; false (the conversion failed) past the budget.
    fn charge(&mut self, bytes: u64) -> bool {
        match self.spend.charge(bytes) {
            Ok(()) => true,
            Err(total) => {
                let e = Error::new(
                    ErrorKind::Limit {
                        what: MEMORY,
                        limit: self.spend.budget,
                        actual: total,
                    },
                    Location::default().with_offset(self.at as u64),
                );
                self.failed.get_or_insert(e);
                false
            }
        }
    }

    /// The value of a leaf.
    fn leaf(&mut self, l: &Leaf) -> Value {
        match l {
            Leaf::Big(b) => Value::BigInt(b.clone()),
            Leaf::Str(s) => Value::Str(s.clone()),
            Leaf::Bytes(b) => Value::Bytes(b.clone()),
            Leaf::Range(r) => Value::Range(r.clone()),
            Leaf::Utf8 { short: Some(s), .. } => Value::Str(s.clone()),
            Leaf::Utf8 { offset, len, .. } => {
                // A long text that is not array data: checked and copied now.
                let b = &self.data[*offset as usize..(*offset + *len) as usize];
                match std::str::from_utf8(b) {
                    Ok(s) if self.charge(arc_bytes(*len)) => Value::Str(s.into()),
                    Ok(_) => Value::None,
                    Err(_) => self.fail("string is not valid UTF-8".into()).0,
                }
            }
            Leaf::Global(g) => Value::Global(g.global.clone()),
        }
    }

    /// The value of `n`, met at nesting `level`, and its height. After a failure, returns
    /// at once.
    fn build(&mut self, n: N, level: u64) -> (Value, u64) {
        let i = match n {
            N::None => return (Value::None, 0),
            N::Bool(b) => return (Value::Bool(b), 0),
            N::Int(v) => return (Value::Int(v), 0),
            N::Float(f) => return (Value::Float(f), 0),
            N::Leaf(l) => {
                let leaves = self.leaves;
                return (self.leaf(&leaves[l as usize]), 0);
            }
            N::Ref(i) => i,
        };
        if self.failed.is_some() {
            return (Value::None, 0);
        }
        let flags = self.flags[i as usize];
        let cached = match flags & REFS > 1 {
            true => self.shared.get(&i),
            false => None,
        };
        if let Some((v, h)) = cached {
            let h = *h;
            if level + h > self.max_depth {
                return self.fail(format!(
                    "nesting depth {} exceeds the limit {}",
                    level + h,
                    self.max_depth
                ));
            }
            return (v.clone(), h);
        }
        if flags & (BUSY | DONE) != 0 {
            return self.fail("the pickle builds a recursive structure".into());
        }
        if level + 1 > self.max_depth {
            return self.fail(format!(
                "nesting depth exceeds the limit {}",
                self.max_depth
            ));
        }
        self.flags[i as usize] |= BUSY;
        let (value, h) = self.body(i, level);
        let h = h + 1;
        self.flags[i as usize] = (flags & REFS) | DONE;
        if flags & REFS > 1 && self.failed.is_none() && self.charge(SHARED_ENTRY) {
            self.shared.insert(i, (value.clone(), h));
        }
        (value, h)
    }

    /// The value of the container `i`'s body, and the height of the tree below it (0 for
    /// scalars).
    fn body(&mut self, i: u32, level: u64) -> (Value, u64) {
        let (objs, pool, calls) = (self.objs, self.pool, self.calls);
        let items = |span: Span| &pool[span.range()];
        let value_size = std::mem::size_of::<Value>() as u64;
        let mut h = 0;
        let value = match &objs[i as usize].body {
            Body::Tuple(span) => {
                if !self.charge(arc_bytes(span.len() as u64 * value_size)) {
                    return (Value::None, 0);
                }
                Value::Tuple(self.seq(items(*span), level, &mut h))
            }
            Body::List(v) | Body::Set(v) | Body::FrozenSet(v) => {
                if !self.charge(arc_bytes(v.len() as u64 * value_size)) {
                    return (Value::None, 0);
                }
                let s = self.seq(v, level, &mut h);
                match &objs[i as usize].body {
                    Body::List(_) => Value::List(s),
                    Body::Set(_) => Value::Set(s),
                    _ => Value::FrozenSet(s),
                }
            }
            Body::Dict(d) => {
                if !self.charge(arc_bytes(d.len() as u64 * 2 * value_size)) {
                    return (Value::None, 0);
                }
                Value::Dict(self.pairs(d, level, &mut h))
            }
            Body::Persistent(p) => {
                if !self.charge(arc_bytes(value_size)) {
                    return (Value::None, 0);
                }
                let (p, ph) = self.build(*p, level + 1);
                h = ph;
                Value::Persistent(Arc::new(p))
            }
            Body::Object(c) => self.object(&calls[*c as usize], level, &mut h),
        };
        (value, h)
    }

    /// The object of the call `ob`.
    fn object(&mut self, ob: &ObjN, level: u64, h: &mut u64) -> Value {
        let args = &self.pool[ob.args.range()];
        let bytes = object_bytes(
            [args.len(), ob.items().len()],
            [ob.entries().len(), ob.kwargs().len()],
        );
        if !self.charge(bytes) {
            return Value::None;
        }
        let kind = ob.callee.kind.clone().unwrap_or(Kind::Object);
        let mut obj = Object::of(ob.callee.global.clone(), kind);
        obj.args = self.seq(args, level, h);
        obj.items = self.seq(ob.items(), level, h);
        obj.entries = self.pairs(ob.entries(), level, h);
        obj.kwargs = self.pairs(ob.kwargs(), level, h);
        if let Some(s) = ob.state {
            let (s, sh) = self.build(s, level + 1);
            *h = (*h).max(sh);
            obj.state = Some(s);
        }
        Value::Object(Arc::new(obj))
    }

    /// `v`'s items converted, into any collection (one allocation for a slice).
    fn seq<C: FromIterator<Value>>(&mut self, v: &[N], level: u64, h: &mut u64) -> C {
        v.iter()
            .map(|&x| {
                let (x, xh) = self.build(x, level + 1);
                *h = (*h).max(xh);
                x
            })
            .collect()
    }

    fn pairs<C: FromIterator<(Value, Value)>>(
        &mut self,
        d: &[(N, N)],
        level: u64,
        h: &mut u64,
    ) -> C {
        d.iter()
            .map(|&(k, v)| {
                let (k, kh) = self.build(k, level + 1);
                let (v, vh) = self.build(v, level + 1);
                *h = (*h).max(kh).max(vh);
                (k, v)
            })
            .collect()
    }
}
