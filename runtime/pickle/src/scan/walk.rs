//! The scanner's machine: the opcode loop, its stack, marks and memo of symbolic values,
//! and its budget. Hand-written with the scanner (see `scan.rs`).

mod args;
mod calls;
mod containers;
mod copy;

use std::collections::HashMap;

use super::allow::{table, WoKind};
use super::sym::{Leaf, Obj, S};
use super::{CallKind, Fault, FaultKind, PickleScan, ScanOptions, MAX_NESTED, MAX_OFFSETS};
use crate::read::op;

/// Reading stopped at a fault (recorded in the scan).
pub(super) struct Halt;

/// The result of one opcode.
pub(super) type Step = Result<(), Halt>;

/// The bytes one value on the stack, in the memo or in a container takes.
const SLOT: u64 = 16;

/// The bytes an object or leaf takes beyond its slots.
const ENTRY: u64 = 64;

/// The walker of one pickle.
pub(super) struct Walker<'a> {
    data: &'a [u8],
    pos: usize,
    op_start: usize,
    opts: &'a ScanOptions<'a>,
    stack: Vec<S>,
    marks: Vec<usize>,
    /// The most values the stack has held (what it is charged for).
    high: usize,
    memo: HashMap<u64, S>,
    leaves: Vec<Leaf>,
    objs: Vec<Obj>,
    spent: u64,
    budget: u64,
    out: PickleScan,
    /// Each global's index in `out.globals`, by module and name.
    global_index: HashMap<(String, String), u32>,
    /// Each global's treatment by the weights-only unpickler (`None`: refused).
    global_kind: Vec<Option<WoKind>>,
    /// Whether each global is a `copyreg` reconstructor (the class of what it makes is
    /// its first argument).
    reconstructors: Vec<bool>,
    /// Each call's index in `out.calls`.
    call_index: HashMap<(CallKind, Key), usize>,
}

/// What a call calls, as the walker keys its calls (named once, at the first).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Key {
    Global(u32),
    Computed,
    Persistent,
    Unresolved,
}

/// Why a call is dangerous, described once, at the first of its key.
pub(super) enum Why {
    /// As dangerous as its global (not at all when the global is not).
    OfGlobal(u32),
    /// It changes the state of a global itself (`BUILD` on a module's object).
    ChangesGlobal(u32),
    /// Always dangerous, for this reason.
    Fixed(&'static str),
}

impl<'a> Walker<'a> {
    /// A walker of the pickle at `start` of `data`.
    pub(super) fn new(data: &'a [u8], start: usize, opts: &'a ScanOptions<'a>) -> Self {
        let start = start.min(data.len());
        Walker {
            data,
            pos: start,
            op_start: start,
            opts,
            stack: Vec::new(),
            marks: Vec::new(),
            high: 0,
            memo: HashMap::new(),
            leaves: Vec::new(),
            objs: Vec::new(),
            spent: 0,
            budget: opts.limits.tree_budget((data.len() - start) as u64),
            out: PickleScan {
                start,
                end: start,
                storages: opts.storages,
                ..Default::default()
            },
            global_index: HashMap::new(),
            global_kind: Vec::new(),
            reconstructors: Vec::new(),
            call_index: HashMap::new(),
        }
    }

    /// Walks the pickle to its `STOP` or a fault that ends reading.
    pub(super) fn run(mut self) -> PickleScan {
        match self.walk() {
            Ok(()) => {
                self.out.end = self.pos;
                self.out.complete = true;
            }
            Err(Halt) => self.out.end = self.op_start,
        }
        self.out
    }

    fn walk(&mut self) -> Step {
        if self.opts.depth > MAX_NESTED {
            return Err(self.halt(
                FaultKind::Limit,
                format!("pickles nested more than {MAX_NESTED} deep"),
            ));
        }
        loop {
            self.op_start = self.pos;
            let Some(&code) = self.data.get(self.pos) else {
                return Err(self.halt(FaultKind::Truncated, "the pickle ends without STOP"));
            };
            self.pos += 1;
            self.out.ops += 1;
            if self.out.ops > self.opts.limits.max_pickle_ops {
                let max = self.opts.limits.max_pickle_ops;
                return Err(self.halt(FaultKind::Limit, format!("more than {max} opcodes")));
            }
            if !table().opcode(code) {
                self.refuse_wo(format!("opcode {}", op_name(code)));
            }
            if code == op::STOP {
                return self.stop();
            }
            self.step(code)?;
        }
    }

    /// One opcode other than `STOP`.
    fn step(&mut self, code: u8) -> Step {
        match code {
            op::PROTO => self.proto(),
            op::FRAME => self.frame(),
            op::MARK => self.mark(),
            op::POP => self.pop_op(),
            op::POP_MARK => self.pop_mark_op(),
            op::DUP => self.dup(),
            op::NONE => self.push(S::None),
            op::NEWTRUE => self.push(S::Bool(true)),
            op::NEWFALSE => self.push(S::Bool(false)),
            op::INT | op::LONG | op::FLOAT => self.text_number(code),
            op::BININT | op::BININT1 | op::BININT2 | op::BINFLOAT => self.bin_number(code),
            op::LONG1 | op::LONG4 => self.long(code),
            op::STRING => self.string(),
            op::BINSTRING | op::SHORT_BINSTRING => self.binstring(code),
            op::UNICODE => self.unicode(),
            op::BINUNICODE | op::SHORT_BINUNICODE | op::BINUNICODE8 => self.binunicode(code),
            op::BINBYTES | op::SHORT_BINBYTES | op::BINBYTES8 | op::BYTEARRAY8 => {
                self.binbytes(code)
            }
            op::NEXT_BUFFER => self.next_buffer(),
            op::READONLY_BUFFER => self.top().map(|_| ()),
            op::EMPTY_TUPLE | op::TUPLE | op::TUPLE1 | op::TUPLE2 | op::TUPLE3 => self.tuple(code),
            op::EMPTY_LIST | op::LIST => self.list(code),
            op::EMPTY_DICT | op::DICT => self.dict(code),
            op::EMPTY_SET | op::FROZENSET => self.set(code),
            op::APPEND | op::APPENDS => self.append(code),
            op::SETITEM | op::SETITEMS => self.setitem(code),
            op::ADDITEMS => self.additems(),
            op::PUT | op::BINPUT | op::LONG_BINPUT | op::MEMOIZE => self.put(code),
            op::GET | op::BINGET | op::LONG_BINGET => self.get(code),
            op::GLOBAL => self.global_op(),
            op::STACK_GLOBAL => self.stack_global(),
            op::INST => self.inst(),
            op::OBJ => self.obj_op(),
            op::REDUCE => self.reduce(),
            op::NEWOBJ | op::NEWOBJ_EX => self.newobj(code),
            op::BUILD => self.build(),
            op::EXT1 | op::EXT2 | op::EXT4 => self.ext(code),
            op::PERSID | op::BINPERSID => self.persid(code),
            _ => Err(self.halt(
                FaultKind::Malformed,
                format!("unknown opcode 0x{code:02x}: Python's unpickler stops here"),
            )),
        }
    }

    /// `STOP`: the value it makes, when asked for.
    fn stop(&mut self) -> Step {
        let v = self.pop();
        if self.opts.keep_result {
            let mut nodes = 0;
            self.out.result = Some(self.copy(v, 0, &mut nodes));
        }
        Ok(())
    }

    /// Records a fault that reading goes on past.
    fn fault(&mut self, kind: FaultKind, message: impl Into<String>) {
        self.out.fault_count += 1;
        // Python's unpickler stops at the first: so does the weights-only one.
        self.refuse_wo("a malformed opcode".into());
        if self.out.faults.len() < MAX_OFFSETS {
            self.out.faults.push(Fault {
                offset: self.op_start,
                kind,
                message: message.into(),
            });
        }
    }

    /// Records the fault that ends reading.
    fn halt(&mut self, kind: FaultKind, message: impl Into<String>) -> Halt {
        self.fault(kind, message);
        Halt
    }

    /// Records the first reason `torch.load(weights_only=True)` would refuse the pickle.
    fn refuse_wo(&mut self, why: String) {
        if self.out.torch_refusal.is_none() {
            self.out.torch_refusal = Some((self.op_start, why));
        }
    }

    /// Charges `bytes` of memory to the budget.
    fn charge(&mut self, bytes: u64) -> Step {
        let total = self.spent.saturating_add(bytes);
        if total > self.budget {
            let budget = self.budget;
            return Err(self.halt(
                FaultKind::Limit,
                format!("the scan's memory would pass its budget of {budget} bytes"),
            ));
        }
        self.spent = total;
        Ok(())
    }

    /// The stack's height where the current mark's items begin.
    fn base(&self) -> usize {
        self.marks
            .last()
            .copied()
            .unwrap_or(0)
            .min(self.stack.len())
    }

    fn push(&mut self, s: S) -> Step {
        if self.stack.len() >= self.high {
            self.charge(SLOT)?;
            self.high = self.stack.len() + 1;
        }
        self.stack.push(s);
        Ok(())
    }

    /// Pops a value; past the current mark, a fault and an inert value.
    fn pop(&mut self) -> S {
        if self.stack.len() <= self.base() {
            self.fault(FaultKind::Malformed, "stack underflow");
            return S::Inert;
        }
        self.stack.pop().unwrap_or(S::Inert)
    }

    /// The value on top; past the current mark, a fault.
    fn top(&mut self) -> Result<S, Halt> {
        match self.stack.last() {
            Some(&s) if self.stack.len() > self.base() => Ok(s),
            _ => {
                self.fault(FaultKind::Malformed, "stack underflow");
                Ok(S::Inert)
            }
        }
    }

    /// Replaces the value on top (pushes it on an empty stack).
    fn set_top(&mut self, s: S) -> Step {
        if self.stack.len() > self.base() {
            if let Some(t) = self.stack.last_mut() {
                *t = s;
                return Ok(());
            }
        }
        self.push(s)
    }

    /// Pops the last mark and the values above it.
    fn pop_mark(&mut self) -> Vec<S> {
        let from = match self.marks.pop() {
            Some(k) => k.min(self.stack.len()),
            None => {
                self.fault(FaultKind::Malformed, "no MARK on the stack");
                0
            }
        };
        self.stack.split_off(from)
    }

    /// A new leaf.
    fn leaf(&mut self, l: Leaf) -> Result<u32, Halt> {
        self.charge(ENTRY + l.heap())?;
        let i = u32::try_from(self.leaves.len())
            .map_err(|_| self.halt(FaultKind::Limit, "more than 2^32 strings"))?;
        self.leaves.push(l);
        Ok(i)
    }

    /// A new object, whose items are charged.
    fn obj(&mut self, o: Obj, items: usize) -> Result<S, Halt> {
        self.charge(ENTRY + SLOT * 2 * items as u64)?;
        let i = u32::try_from(self.objs.len())
            .map_err(|_| self.halt(FaultKind::Limit, "more than 2^32 objects"))?;
        self.objs.push(o);
        Ok(S::Obj(i))
    }

    /// The object `s` names, if it is one.
    fn obj_of(&self, s: S) -> Option<&Obj> {
        match s {
            S::Obj(i) => self.objs.get(i as usize),
            _ => None,
        }
    }

    /// The text of `s`, when it is a text whose characters are known.
    fn text_of(&self, s: S) -> Option<std::borrow::Cow<'_, str>> {
        match s {
            S::Text(i) => self.leaves.get(i as usize)?.text(self.data),
            _ => None,
        }
    }
}

/// An opcode's name, for messages.
pub(super) fn op_name(code: u8) -> String {
    const NAMES: [(u8, &str); 68] = [
        (op::MARK, "MARK"),
        (op::STOP, "STOP"),
        (op::POP, "POP"),
        (op::POP_MARK, "POP_MARK"),
        (op::DUP, "DUP"),
        (op::FLOAT, "FLOAT"),
        (op::INT, "INT"),
        (op::BININT, "BININT"),
        (op::BININT1, "BININT1"),
        (op::LONG, "LONG"),
        (op::BININT2, "BININT2"),
        (op::NONE, "NONE"),
        (op::PERSID, "PERSID"),
        (op::BINPERSID, "BINPERSID"),
        (op::REDUCE, "REDUCE"),
        (op::STRING, "STRING"),
        (op::BINSTRING, "BINSTRING"),
        (op::SHORT_BINSTRING, "SHORT_BINSTRING"),
        (op::UNICODE, "UNICODE"),
        (op::BINUNICODE, "BINUNICODE"),
        (op::APPEND, "APPEND"),
        (op::BUILD, "BUILD"),
        (op::GLOBAL, "GLOBAL"),
        (op::DICT, "DICT"),
        (op::EMPTY_DICT, "EMPTY_DICT"),
        (op::APPENDS, "APPENDS"),
        (op::GET, "GET"),
        (op::BINGET, "BINGET"),
        (op::INST, "INST"),
        (op::LONG_BINGET, "LONG_BINGET"),
        (op::LIST, "LIST"),
        (op::EMPTY_LIST, "EMPTY_LIST"),
        (op::OBJ, "OBJ"),
        (op::PUT, "PUT"),
        (op::BINPUT, "BINPUT"),
        (op::LONG_BINPUT, "LONG_BINPUT"),
        (op::SETITEM, "SETITEM"),
        (op::TUPLE, "TUPLE"),
        (op::EMPTY_TUPLE, "EMPTY_TUPLE"),
        (op::SETITEMS, "SETITEMS"),
        (op::BINFLOAT, "BINFLOAT"),
        (op::PROTO, "PROTO"),
        (op::NEWOBJ, "NEWOBJ"),
        (op::EXT1, "EXT1"),
        (op::EXT2, "EXT2"),
        (op::EXT4, "EXT4"),
        (op::TUPLE1, "TUPLE1"),
        (op::TUPLE2, "TUPLE2"),
        (op::TUPLE3, "TUPLE3"),
        (op::NEWTRUE, "NEWTRUE"),
        (op::NEWFALSE, "NEWFALSE"),
        (op::LONG1, "LONG1"),
        (op::LONG4, "LONG4"),
        (op::BINBYTES, "BINBYTES"),
        (op::SHORT_BINBYTES, "SHORT_BINBYTES"),
        (op::SHORT_BINUNICODE, "SHORT_BINUNICODE"),
        (op::BINUNICODE8, "BINUNICODE8"),
        (op::BINBYTES8, "BINBYTES8"),
        (op::EMPTY_SET, "EMPTY_SET"),
        (op::ADDITEMS, "ADDITEMS"),
        (op::FROZENSET, "FROZENSET"),
        (op::NEWOBJ_EX, "NEWOBJ_EX"),
        (op::STACK_GLOBAL, "STACK_GLOBAL"),
        (op::MEMOIZE, "MEMOIZE"),
        (op::FRAME, "FRAME"),
        (op::BYTEARRAY8, "BYTEARRAY8"),
        (op::NEXT_BUFFER, "NEXT_BUFFER"),
        (op::READONLY_BUFFER, "READONLY_BUFFER"),
    ];
    match NAMES.iter().find(|(c, _)| *c == code) {
        Some((_, n)) => n.to_string(),
        None => format!("0x{code:02x}"),
    }
}
