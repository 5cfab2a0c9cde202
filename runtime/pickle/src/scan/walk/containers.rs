//! The scanner's containers and memo: marks, tuples, lists, dicts, sets, what extends
//! them (a method call when the target is an object), and the memo. Hand-written with
//! the scanner.

use super::super::allow::WoKind;
use super::super::sym::{Obj, S};
use super::super::{CallKind, FaultKind};
use super::{op_name, Step, Walker, SLOT};
use crate::read::op;

impl Walker<'_> {
    /// `MARK`, nested at most `Limits::max_depth` deep.
    pub(super) fn mark(&mut self) -> Step {
        let max = self.opts.limits.max_depth;
        if self.marks.len() as u64 >= max {
            return Err(self.halt(FaultKind::Limit, format!("MARKs nested past {max}")));
        }
        self.charge(SLOT)?;
        self.marks.push(self.stack.len());
        Ok(())
    }

    /// `POP`: the top value, or the mark when nothing is above it (as Python does).
    pub(super) fn pop_op(&mut self) -> Step {
        if self.stack.len() > self.base() {
            self.stack.pop();
        } else if !self.marks.is_empty() {
            self.pop_mark();
        } else {
            self.fault(FaultKind::Malformed, "stack underflow");
        }
        Ok(())
    }

    pub(super) fn pop_mark_op(&mut self) -> Step {
        self.pop_mark();
        Ok(())
    }

    /// `EMPTY_TUPLE`, `TUPLE`, `TUPLE1`, `TUPLE2`, `TUPLE3`.
    pub(super) fn tuple(&mut self, code: u8) -> Step {
        let items = match code {
            op::EMPTY_TUPLE => Vec::new(),
            op::TUPLE => self.pop_mark(),
            _ => {
                let k = (code - op::TUPLE1 + 1) as usize;
                let mut items: Vec<S> = (0..k).map(|_| self.pop()).collect();
                items.reverse();
                items
            }
        };
        let n = items.len();
        let t = self.obj(Obj::Tuple(items), n)?;
        self.push(t)
    }

    /// `EMPTY_LIST`, `LIST`.
    pub(super) fn list(&mut self, code: u8) -> Step {
        let items = match code {
            op::LIST => self.pop_mark(),
            _ => Vec::new(),
        };
        let n = items.len();
        let l = self.obj(Obj::List(items), n)?;
        self.push(l)
    }

    /// `EMPTY_DICT`, `DICT`.
    pub(super) fn dict(&mut self, code: u8) -> Step {
        let items = match code {
            op::DICT => self.pop_mark(),
            _ => Vec::new(),
        };
        if items.len() % 2 != 0 {
            self.fault(FaultKind::Malformed, "DICT with an odd number of items");
        }
        let n = items.len();
        let d = self.obj(Obj::Dict(pairs(items)), n)?;
        self.push(d)
    }

    /// `EMPTY_SET`, `FROZENSET`.
    pub(super) fn set(&mut self, code: u8) -> Step {
        let (o, n) = match code {
            op::FROZENSET => {
                let items = self.pop_mark();
                let n = items.len();
                (Obj::FrozenSet(items), n)
            }
            _ => (Obj::Set(Vec::new()), 0),
        };
        let s = self.obj(o, n)?;
        self.push(s)
    }

    /// The values an extending opcode adds, and the value they are added to.
    fn extending(&mut self, code: u8) -> (Vec<S>, S) {
        let items = match code {
            op::APPEND => vec![self.pop()],
            op::SETITEM => {
                let v = self.pop();
                let k = self.pop();
                vec![k, v]
            }
            _ => self.pop_mark(),
        };
        let target = self.top().unwrap_or(S::Inert);
        (items, target)
    }

    /// `APPEND`, `APPENDS`: a list grows; an object's `append`/`extend` is called.
    pub(super) fn append(&mut self, code: u8) -> Step {
        let (items, target) = self.extending(code);
        if !matches!(self.obj_of(target), Some(Obj::List(_))) {
            self.refuse_wo(format!("{} on a value that is not a list", op_name(code)));
        }
        self.grow(target, items, code, CallKind::Append)
    }

    /// `SETITEM`, `SETITEMS`: a dict grows; an object's `__setitem__` is called.
    pub(super) fn setitem(&mut self, code: u8) -> Step {
        let (items, target) = self.extending(code);
        if items.len() % 2 != 0 {
            self.fault(FaultKind::Malformed, "SETITEMS with an odd number of items");
        }
        let accepted = match self.obj_of(target) {
            Some(Obj::Dict(_)) => true,
            Some(Obj::Made(m)) => self.wo_kind(m.callee) == Some(WoKind::Mapping),
            _ => false,
        };
        if !accepted {
            self.refuse_wo(format!("{} on a value that is not a dict", op_name(code)));
        }
        self.grow(target, items, code, CallKind::SetItem)
    }

    /// `ADDITEMS`: a set grows; an object's `add` is called.
    pub(super) fn additems(&mut self) -> Step {
        let (items, target) = self.extending(op::ADDITEMS);
        self.grow(target, items, op::ADDITEMS, CallKind::AddItems)
    }

    /// Adds `items` to the container `target`, or calls the method of the object
    /// `target` that the opcode calls (`call`); on a container of another kind, Python's
    /// unpickler fails.
    fn grow(&mut self, target: S, items: Vec<S>, code: u8, call: CallKind) -> Step {
        self.charge(SLOT * items.len() as u64)?;
        let S::Obj(i) = target else {
            self.method_call(call, target);
            return Ok(());
        };
        let grown = match (&mut self.objs[i as usize], call) {
            (Obj::List(v), CallKind::Append) | (Obj::Set(v), CallKind::AddItems) => {
                v.extend(items);
                true
            }
            (Obj::Dict(d), CallKind::SetItem) => {
                d.extend(pairs(items));
                true
            }
            _ => false,
        };
        if grown {
            return Ok(());
        }
        if matches!(self.objs[i as usize], Obj::Made(_)) {
            self.method_call(call, target);
        } else {
            let name = op_name(code);
            self.fault(
                FaultKind::Malformed,
                format!("{name} on a container of another kind"),
            );
        }
        Ok(())
    }

    /// `PUT`, `BINPUT`, `LONG_BINPUT`, `MEMOIZE`: at most `Limits::max_memo` entries.
    pub(super) fn put(&mut self, code: u8) -> Step {
        let key = match code {
            op::PUT => match self.line_number()? {
                Some(k) => k,
                None => return Ok(()),
            },
            op::BINPUT => self.fixed::<1>()?[0] as u64,
            op::LONG_BINPUT => u32::from_le_bytes(self.fixed::<4>()?) as u64,
            _ => self.memo.len() as u64,
        };
        let v = self.top()?;
        if !self.memo.contains_key(&key) {
            let max = self.opts.limits.max_memo;
            if self.memo.len() as u64 >= max {
                return Err(self.halt(FaultKind::Limit, format!("more than {max} memo entries")));
            }
            self.charge(3 * SLOT)?;
        }
        self.memo.insert(key, v);
        Ok(())
    }

    /// `GET`, `BINGET`, `LONG_BINGET`: a key not in the memo is a fault.
    pub(super) fn get(&mut self, code: u8) -> Step {
        let key = match code {
            op::GET => match self.line_number()? {
                Some(k) => k,
                None => return self.push(S::Inert),
            },
            op::BINGET => self.fixed::<1>()?[0] as u64,
            _ => u32::from_le_bytes(self.fixed::<4>()?) as u64,
        };
        match self.memo.get(&key) {
            Some(&v) => self.push(v),
            None => {
                self.fault(
                    FaultKind::Malformed,
                    format!("memo key {key} is not defined"),
                );
                self.push(S::Inert)
            }
        }
    }

    /// The decimal argument of `PUT` or `GET`; `None` (a fault) when it is not one.
    fn line_number(&mut self) -> Result<Option<u64>, super::Halt> {
        let l = self.line()?;
        match std::str::from_utf8(l)
            .ok()
            .and_then(|t| t.trim().parse::<u64>().ok())
        {
            Some(k) => Ok(Some(k)),
            None => {
                self.fault(FaultKind::Malformed, "a memo key that is not a number");
                Ok(None)
            }
        }
    }
}

/// Items in pairs (an odd last one dropped).
fn pairs(items: Vec<S>) -> Vec<(S, S)> {
    let mut out = Vec::with_capacity(items.len() / 2);
    let mut it = items.into_iter();
    while let (Some(k), Some(v)) = (it.next(), it.next()) {
        out.push((k, v));
    }
    out
}
