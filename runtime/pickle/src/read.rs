//! The restricted pickle reader.
//!
//! Everything the machine holds — its stack, marks and memo, the containers, tuple items,
//! calls and leaves (strings, byte strings, large integers, globals) of its arenas, and
//! the [`Value`] made of them at `STOP` — is charged to one budget before it is allocated
//! ([`Limits::tree_budget`] of the pickle's size, `Limits::max_tree_bytes` when set), at
//! what it takes in memory: a value on the stack (at its highest), in the memo or in a
//! container costs 16 bytes, a container 40 more, a call 72, a string its bytes; the
//! stack and the memo are given back before the value is made. Past the budget, reading
//! stops at the opcode that would spend more, naming its offset.

mod convert;
mod inline;

use std::collections::HashMap;
use std::mem::size_of;
use std::rc::Rc;
use std::sync::Arc;

use super::rules::{Kind, Rules};
use super::value::{arc_bytes, heap_bytes, minimal_le, ByteRange, Global, Value};
use super::{codec_error, CODEC};
use tensorfmt_core::error::{Error, ErrorKind, Location, Result};
use tensorfmt_core::limits::Limits;

/// Reads one pickle that fills all of `bytes` (nothing may follow its `STOP`).
///
/// Errors (`ErrorKind::Codec` with codec `pickle`, `ErrorKind::Limit`,
/// `ErrorKind::Truncated`) carry the byte offset of the opcode at fault.
pub fn read(bytes: &[u8], rules: &Rules, limits: &Limits) -> Result<Value> {
    let (value, used) = read_prefix(bytes, rules, limits)?;
    if used != bytes.len() {
        return Err(codec_error(
            used,
            format!("{} bytes follow the STOP opcode", bytes.len() - used),
        ));
    }
    Ok(value)
}

/// Reads the pickle at the start of `bytes` and returns its value and the number of bytes
/// it took (up to and including its `STOP`), for inputs that concatenate several pickles.
///
/// Under [`Rules::byte_ranges`] the pickle may be of any size (its byte strings are not
/// copied); otherwise it must fit in `limits.max_header_bytes`. The memory the machine
/// and the value it makes take is charged to [`Limits::tree_budget`] of `bytes.len()`
/// as it is spent; past it, reading fails with [`ErrorKind::Limit`] at the opcode that
/// would spend more.
pub fn read_prefix(bytes: &[u8], rules: &Rules, limits: &Limits) -> Result<(Value, usize)> {
    if bytes.len() as u64 > limits.max_header_bytes && !rules.keeps_byte_ranges() {
        return Err(Error::new(
            ErrorKind::Limit {
                what: "pickle size",
                limit: limits.max_header_bytes,
                actual: bytes.len() as u64,
            },
            Location::default(),
        ));
    }
    let mut m = Machine {
        data: bytes,
        pos: 0,
        op_start: 0,
        rules,
        limits,
        spend: Spend::new(limits.tree_budget(bytes.len() as u64)),
        stack: Vec::new(),
        marks: Vec::new(),
        high: (0, 0),
        memo: Memo::default(),
        objs: Vec::new(),
        pool: Vec::new(),
        calls: Vec::new(),
        leaves: Vec::new(),
        frame_end: None,
        refused: Vec::new(),
    };
    m.run().map_err(|e| m.refusal().unwrap_or(e))
}

/// Most refused globals named in one error; more are counted.
const MAX_REFUSED_NAMED: usize = 32;

/// Most refused globals recorded: reading stops at the next one.
const MAX_REFUSED: usize = 1 << 16;

/// What the budget's error calls what it limits.
const MEMORY: &str = "memory for the pickle's objects, in bytes (--max-tree-bytes raises it)";

/// The memory a reading holds, charged against its budget before it is allocated.
struct Spend {
    budget: u64,
    spent: u64,
}

impl Spend {
    fn new(budget: u64) -> Self {
        Spend { budget, spent: 0 }
    }

    /// Charges `bytes`; past the budget, the total it would reach (nothing charged).
    fn charge(&mut self, bytes: u64) -> std::result::Result<(), u64> {
        let total = self.spent.saturating_add(bytes);
        if total > self.budget {
            return Err(total);
        }
        self.spent = total;
        Ok(())
    }

    /// Room for `extra` more items in `v`, charged first (the items' bytes: a vector's
    /// room beyond its length is reserved, not touched, until items fill it).
    fn reserve<T>(&mut self, v: &mut Vec<T>, extra: usize) -> std::result::Result<(), u64> {
        self.charge((extra as u64).saturating_mul(std::mem::size_of::<T>() as u64))?;
        v.reserve(extra);
        Ok(())
    }
}

/// A value on the machine's stack, in its memo or in a container: 16 bytes. Containers
/// live in the machine's arena and are named by their index there: shared and mutable,
/// as in Python, so that later `APPENDS`/`SETITEMS`/`BUILD` show through every memo
/// reference. Values that own memory (strings, byte strings, large integers, globals)
/// live in the machine's leaves, so that a copy never allocates.
#[derive(Clone, Copy)]
enum N {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    /// A container: its index in the machine's `objs`.
    Ref(u32),
    /// A leaf: its index in the machine's `leaves`.
    Leaf(u32),
}

/// A value of the machine that owns memory.
enum Leaf {
    Big(Arc<[u8]>),
    Str(Arc<str>),
    Bytes(Arc<[u8]>),
    /// A byte string left in the buffer ([`Rules::byte_ranges`]).
    Range(Arc<ByteRange>),
    /// A text left in the buffer ([`Rules::byte_ranges`]): its UTF-8 bytes, not yet
    /// checked, and the text itself when it is short (checked, copied).
    Utf8 {
        offset: u64,
        len: u64,
        short: Option<Arc<str>>,
    },
    Global(Rc<GlobalN>),
}

impl Leaf {
    /// The text of a string leaf, when it is known without the buffer.
    fn text(&self) -> Option<&Arc<str>> {
        match self {
            Leaf::Str(s) | Leaf::Utf8 { short: Some(s), .. } => Some(s),
            _ => None,
        }
    }
}

/// An allowed global and what the rules say calling it builds (`None`: the
/// `_codecs.encode` special case).
struct GlobalN {
    global: Arc<Global>,
    kind: Option<Kind>,
    /// Outside the rules: recorded in the machine's `refused`, and read on (as an opaque
    /// object when called) so that one error can name every such global.
    refused: bool,
}

struct Obj {
    /// Height of the tree below (1 for a container of scalars), as far as known.
    height: u32,
    body: Body,
}

/// The memo: keys as dense as the pickler's (`MEMOIZE` counts up from 0, `BINPUT` and
/// `LONG_BINPUT` do in practice) live in a vector, others in a map. The vector never
/// grows beyond about twice the number of entries, whatever keys a hostile pickle uses.
#[derive(Default)]
struct Memo {
    dense: Vec<Option<N>>,
    sparse: HashMap<u64, N>,
    count: u64,
}

/// The bytes one entry of the memo's map takes: the key and value, the control byte, and
/// the room a hash table keeps free (at most half of it after it grows).
const SPARSE_ENTRY: u64 = 2 * (std::mem::size_of::<(u64, N)>() as u64 + 1);

impl Memo {
    fn get(&self, key: u64) -> Option<N> {
        match self.dense.get(key as usize) {
            Some(slot) => *slot,
            None => self.sparse.get(&key).copied(),
        }
    }

    fn contains(&self, key: u64) -> bool {
        self.get(key).is_some()
    }

    /// Where `key` lives: in the vector (`Some`: the slots it must grow by) or in the map.
    fn dense_growth(&self, key: u64) -> Option<usize> {
        let k = key as usize;
        if k < self.dense.len() {
            return Some(0);
        }
        (key <= 2 * self.count + 64 && self.sparse.is_empty()).then(|| k + 1 - self.dense.len())
    }

    /// Sets `key` (the vector grown to hold it when [`Memo::dense_growth`] says so).
    fn put(&mut self, key: u64, v: N) {
        let k = key as usize;
        let old = match self.dense_growth(key) {
            Some(grow) => {
                if grow > 0 {
                    self.dense.resize_with(k + 1, || None);
                }
                self.dense[k].replace(v)
            }
            None => self.sparse.insert(key, v),
        };
        if old.is_none() {
            self.count += 1;
        }
    }
}

/// The items of a tuple: `pool[start..end]` of the machine (tuples never change, so
/// their items are stored back to back, with no allocation of their own).
#[derive(Clone, Copy)]
struct Span {
    start: u32,
    end: u32,
}

impl Span {
    fn len(self) -> usize {
        (self.end - self.start) as usize
    }

    fn range(self) -> std::ops::Range<usize> {
        self.start as usize..self.end as usize
    }
}

enum Body {
    Tuple(Span),
    List(Vec<N>),
    Dict(Vec<(N, N)>),
    Set(Vec<N>),
    FrozenSet(Vec<N>),
    /// A call: its index in the machine's `calls`.
    Object(u32),
    Persistent(N),
}

struct ObjN {
    /// The global called (its `kind` is `None` for the call of a refused global).
    callee: Rc<GlobalN>,
    /// The items of the argument tuple.
    args: Span,
    state: Option<N>,
    content: Content,
    /// The call of a refused global: takes any `APPEND(S)`, `SETITEM(S)`, `BUILD`, so
    /// that reading goes on to the next global (the pickle is refused anyway).
    opaque: bool,
}

/// What a call holds beyond its arguments and state, by the kind of its global.
enum Content {
    /// The items of a list-, set- or tuple-kind call.
    Items(Vec<N>),
    /// The entries of a dict-kind call.
    Entries(Vec<(N, N)>),
    /// The keyword arguments of any other (`NEWOBJ_EX`).
    Kwargs(Vec<(N, N)>),
    /// An inert object's keyword arguments, and the items and entries later opcodes
    /// append to it (see [`Kind::Inert`]); boxed, so that other calls stay small.
    Inert(Box<Inert>),
}

/// What an inert object holds beyond its arguments and state.
#[derive(Default)]
struct Inert {
    kwargs: Vec<(N, N)>,
    items: Vec<N>,
    entries: Vec<(N, N)>,
}

impl ObjN {
    fn items(&self) -> &[N] {
        match &self.content {
            Content::Items(v) => v,
            Content::Inert(i) => &i.items,
            _ => &[],
        }
    }

    fn entries(&self) -> &[(N, N)] {
        match &self.content {
            Content::Entries(d) => d,
            Content::Inert(i) => &i.entries,
            _ => &[],
        }
    }

    fn kwargs(&self) -> &[(N, N)] {
        match &self.content {
            Content::Kwargs(d) => d,
            Content::Inert(i) => &i.kwargs,
            _ => &[],
        }
    }
}

struct Machine<'a> {
    data: &'a [u8],
    pos: usize,
    op_start: usize,
    rules: &'a Rules,
    limits: &'a Limits,
    /// The memory held, and the budget it may reach.
    spend: Spend,
    stack: Vec<N>,
    marks: Vec<usize>,
    /// The most items the stack and the marks have held (what they are charged for).
    high: (usize, usize),
    memo: Memo,
    /// Every container made ([`N::Ref`] indexes it). Dropping it recurses nowhere, and
    /// cycles cannot leak.
    objs: Vec<Obj>,
    /// The items of every tuple ([`Span`]).
    pool: Vec<N>,
    /// Every call made ([`Body::Object`]).
    calls: Vec<ObjN>,
    /// Every value that owns memory ([`N::Leaf`]).
    leaves: Vec<Leaf>,
    /// The end of the current `FRAME`, while an opcode may read up to it: no read may
    /// cross it (as CPython's `_Unframer`), and a read that starts there leaves it.
    frame_end: Option<usize>,
    /// The globals refused so far, and the offsets of their opcodes.
    refused: Vec<(Arc<Global>, usize)>,
}

/// The opcodes of pickle protocols 0 to 5 (the writer's too).
pub(crate) mod op {
    pub const MARK: u8 = b'(';
    pub const STOP: u8 = b'.';
    pub const POP: u8 = b'0';
    pub const POP_MARK: u8 = b'1';
    pub const DUP: u8 = b'2';
    pub const FLOAT: u8 = b'F';
    pub const INT: u8 = b'I';
    pub const BININT: u8 = b'J';
    pub const BININT1: u8 = b'K';
    pub const LONG: u8 = b'L';
    pub const BININT2: u8 = b'M';
    pub const NONE: u8 = b'N';
    pub const PERSID: u8 = b'P';
    pub const BINPERSID: u8 = b'Q';
    pub const REDUCE: u8 = b'R';
    pub const STRING: u8 = b'S';
    pub const BINSTRING: u8 = b'T';
    pub const SHORT_BINSTRING: u8 = b'U';
    pub const UNICODE: u8 = b'V';
    pub const BINUNICODE: u8 = b'X';
    pub const APPEND: u8 = b'a';
    pub const BUILD: u8 = b'b';
    pub const GLOBAL: u8 = b'c';
    pub const DICT: u8 = b'd';
    pub const EMPTY_DICT: u8 = b'}';
    pub const APPENDS: u8 = b'e';
    pub const GET: u8 = b'g';
    pub const BINGET: u8 = b'h';
    pub const INST: u8 = b'i';
    pub const LONG_BINGET: u8 = b'j';
    pub const LIST: u8 = b'l';
    pub const EMPTY_LIST: u8 = b']';
    pub const OBJ: u8 = b'o';
    pub const PUT: u8 = b'p';
    pub const BINPUT: u8 = b'q';
    pub const LONG_BINPUT: u8 = b'r';
    pub const SETITEM: u8 = b's';
    pub const TUPLE: u8 = b't';
    pub const EMPTY_TUPLE: u8 = b')';
    pub const SETITEMS: u8 = b'u';
    pub const BINFLOAT: u8 = b'G';
    pub const PROTO: u8 = 0x80;
    pub const NEWOBJ: u8 = 0x81;
    pub const EXT1: u8 = 0x82;
    pub const EXT2: u8 = 0x83;
    pub const EXT4: u8 = 0x84;
    pub const TUPLE1: u8 = 0x85;
    pub const TUPLE2: u8 = 0x86;
    pub const TUPLE3: u8 = 0x87;
    pub const NEWTRUE: u8 = 0x88;
    pub const NEWFALSE: u8 = 0x89;
    pub const LONG1: u8 = 0x8a;
    pub const LONG4: u8 = 0x8b;
    pub const BINBYTES: u8 = b'B';
    pub const SHORT_BINBYTES: u8 = b'C';
    pub const SHORT_BINUNICODE: u8 = 0x8c;
    pub const BINUNICODE8: u8 = 0x8d;
    pub const BINBYTES8: u8 = 0x8e;
    pub const EMPTY_SET: u8 = 0x8f;
    pub const ADDITEMS: u8 = 0x90;
    pub const FROZENSET: u8 = 0x91;
    pub const NEWOBJ_EX: u8 = 0x92;
    pub const STACK_GLOBAL: u8 = 0x93;
    pub const MEMOIZE: u8 = 0x94;
    pub const FRAME: u8 = 0x95;
    pub const BYTEARRAY8: u8 = 0x96;
    pub const NEXT_BUFFER: u8 = 0x97;
    pub const READONLY_BUFFER: u8 = 0x98;
}

/// The integer of little-endian two's complement `bytes`: in an `i64`, or else its
/// minimal bytes.
fn int_of(bytes: &[u8]) -> std::result::Result<i64, Vec<u8>> {
    let min = minimal_le(bytes);
    if min.len() <= 8 {
        let neg = min.last().is_some_and(|b| b & 0x80 != 0);
        let mut full = if neg { [0xffu8; 8] } else { [0u8; 8] };
        full[..min.len()].copy_from_slice(&min);
        Ok(i64::from_le_bytes(full))
    } else {
        Err(min)
    }
}

impl<'a> Machine<'a> {
    fn type_name(&self, n: N) -> String {
        match n {
            N::None => "None".into(),
            N::Bool(_) => "bool".into(),
            N::Int(_) => "int".into(),
            N::Float(_) => "float".into(),
            N::Leaf(i) => match &self.leaves[i as usize] {
                Leaf::Big(_) => "int".into(),
                Leaf::Str(_) | Leaf::Utf8 { .. } => "str".into(),
                Leaf::Range(r) if r.text.is_none() => "bytes".into(),
                Leaf::Bytes(_) => "bytes".into(),
                Leaf::Range(_) => "str".into(),
                Leaf::Global(g) => format!("global '{}'", g.global),
            },
            N::Ref(i) => match &self.objs[i as usize].body {
                Body::Tuple(_) => "tuple".into(),
                Body::List(_) => "list".into(),
                Body::Dict(_) => "dict".into(),
                Body::Set(_) => "set".into(),
                Body::FrozenSet(_) => "frozenset".into(),
                Body::Object(c) => {
                    format!("object of '{}'", self.calls[*c as usize].callee.global)
                }
                Body::Persistent(_) => "persistent id".into(),
            },
        }
    }

    fn height(&self, n: N) -> u32 {
        match n {
            N::Ref(i) => self.objs[i as usize].height,
            _ => 0,
        }
    }

    /// The highest of `items`' heights.
    fn max_height(&self, items: &[N]) -> u32 {
        items.iter().map(|&n| self.height(n)).max().unwrap_or(0)
    }

    /// The container `n` names, if it is one.
    fn obj(&self, n: N) -> Option<&Obj> {
        match n {
            N::Ref(i) => self.objs.get(i as usize),
            _ => None,
        }
    }

    /// The leaf `n` names, if it is one.
    fn leaf_of(&self, n: N) -> Option<&Leaf> {
        match n {
            N::Leaf(i) => self.leaves.get(i as usize),
            _ => None,
        }
    }

    /// The text of a string value, when it is known without the buffer.
    fn text(&self, n: N) -> Option<&Arc<str>> {
        self.leaf_of(n)?.text()
    }

    fn err(&self, message: impl Into<String>) -> Error {
        codec_error(self.op_start, message)
    }

    fn limit(&self, what: &'static str, limit: u64, actual: u64) -> Error {
        Error::new(
            ErrorKind::Limit {
                what,
                limit,
                actual,
            },
            Location::default().with_offset(self.op_start as u64),
        )
    }

    /// The error of a charge that would bring the memory held to `total`.
    fn over(&self, total: u64) -> Error {
        self.limit(MEMORY, self.spend.budget, total)
    }

    /// Charges `bytes` to the budget.
    fn charge(&mut self, bytes: u64) -> Result<()> {
        self.spend.charge(bytes).map_err(|t| self.over(t))
    }

    /// Checks that a buffer of `bytes` that is freed at once (a text decoded before it
    /// is stored) fits in the budget with what is held.
    fn transient(&mut self, bytes: u64) -> Result<()> {
        let bytes = heap_bytes(bytes);
        self.charge(bytes)?;
        self.spend.spent -= bytes;
        Ok(())
    }

    /// Leaves the current frame when `pos` is at its end; fails when a read of `n`
    /// bytes from `pos` would cross it (`None`: up to the end of a line).
    fn framed(&mut self, n: Option<u64>) -> Result<()> {
        let Some(end) = self.frame_end else {
            return Ok(());
        };
        if self.pos >= end {
            self.frame_end = None;
            return Ok(());
        }
        let fits = match n {
            Some(n) => n <= (end - self.pos) as u64,
            None => self.data[self.pos..end].contains(&b'\n'),
        };
        if fits {
            return Ok(());
        }
        Err(self.err(format!(
            "the opcode crosses the end of its FRAME at offset {end} (a pickle is read frame by frame: refused, as Python's unpickler refuses it)"
        )))
    }

    fn take(&mut self, n: u64) -> Result<&'a [u8]> {
        self.framed(Some(n))?;
        let available = (self.data.len() - self.pos) as u64;
        if n > available {
            return Err(Error::new(
                ErrorKind::Truncated {
                    needed: n,
                    available,
                },
                Location::default()
                    .with_offset(self.op_start as u64)
                    .with_field(CODEC),
            ));
        }
        let s = &self.data[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(s)
    }

    fn fixed<const K: usize>(&mut self) -> Result<[u8; K]> {
        let s = self.take(K as u64)?;
        let mut b = [0u8; K];
        b.copy_from_slice(s);
        Ok(b)
    }

    fn line(&mut self) -> Result<&'a [u8]> {
        self.framed(None)?;
        let rest = &self.data[self.pos..];
        match rest.iter().position(|&b| b == b'\n') {
            Some(n) => {
                self.pos += n + 1;
                Ok(&rest[..n])
            }
            None => Err(self.err("truncated: a text argument has no end of line")),
        }
    }

    fn line_str(&mut self) -> Result<&'a str> {
        let l = self.line()?;
        std::str::from_utf8(l).map_err(|_| self.err("a text argument is not UTF-8"))
    }

    fn base(&self) -> usize {
        self.marks.last().copied().unwrap_or(0)
    }

    fn push(&mut self, n: N) -> Result<()> {
        if self.stack.len() >= self.high.0 {
            self.charge(std::mem::size_of::<N>() as u64)?;
            self.high.0 = self.stack.len() + 1;
        }
        self.stack.push(n);
        Ok(())
    }

    fn pop(&mut self) -> Result<N> {
        if self.stack.len() <= self.base() {
            return Err(self.err("stack underflow"));
        }
        self.stack.pop().ok_or_else(|| self.err("stack underflow"))
    }

    fn top(&self) -> Result<N> {
        if self.stack.len() <= self.base() {
            return Err(self.err("stack underflow"));
        }
        self.stack
            .last()
            .copied()
            .ok_or_else(|| self.err("stack underflow"))
    }

    /// Pops the last mark: where its items begin on the stack.
    fn pop_mark(&mut self) -> Result<usize> {
        match self.marks.pop() {
            Some(k) => Ok(k.min(self.stack.len())),
            None => Err(self.err("no MARK on the stack")),
        }
    }

    /// The value under the items from `from` on (what `APPENDS`, `SETITEMS` and
    /// `ADDITEMS` extend), above the current mark.
    fn under(&self, from: usize) -> Result<N> {
        if from <= self.base() || from > self.stack.len() {
            return Err(self.err("stack underflow"));
        }
        Ok(self.stack[from - 1])
    }

    /// The stack's items from `from` on, moved to a new vector (charged).
    fn split_stack(&mut self, from: usize) -> Result<Vec<N>> {
        let n = self.stack.len() - from;
        self.charge((n as u64).saturating_mul(std::mem::size_of::<N>() as u64))?;
        Ok(self.stack.split_off(from))
    }

    /// The stack's items from `from` on (an even number), moved to a new vector of pairs
    /// (charged).
    fn split_pairs(&mut self, from: usize) -> Result<Vec<(N, N)>> {
        let n = (self.stack.len() - from) / 2;
        self.charge((n as u64).saturating_mul(std::mem::size_of::<(N, N)>() as u64))?;
        let mut out = Vec::with_capacity(n);
        out.extend(pairs(self.stack.drain(from..)));
        Ok(out)
    }

    /// A tuple of the stack's items from `from` on, which are moved to the pool.
    fn tuple_from_stack(&mut self, from: usize) -> Result<N> {
        let from = from.min(self.stack.len());
        let h = self.max_height(&self.stack[from..]);
        let n = self.stack.len() - from;
        let start = self.pool.len();
        let end = start + n;
        let (Ok(start), Ok(end)) = (u32::try_from(start), u32::try_from(end)) else {
            return Err(self.limit("pickle tuple items", u32::MAX as u64, end as u64));
        };
        self.spend
            .reserve(&mut self.pool, n)
            .map_err(|t| self.over(t))?;
        self.pool.extend(self.stack.drain(from..));
        self.new_obj(Body::Tuple(Span { start, end }), h)
    }

    /// The items of a tuple.
    fn items(&self, span: Span) -> &[N] {
        &self.pool[span.range()]
    }

    fn check_height(&self, h: u32) -> Result<()> {
        if h as u64 > self.limits.max_depth {
            return Err(self.limit("pickle nesting depth", self.limits.max_depth, h as u64));
        }
        Ok(())
    }

    fn new_obj(&mut self, body: Body, children_height: u32) -> Result<N> {
        let height = children_height.saturating_add(1);
        self.check_height(height)?;
        let index = u32::try_from(self.objs.len()).map_err(|_| {
            self.limit("pickle containers", u32::MAX as u64, self.objs.len() as u64)
        })?;
        self.spend
            .reserve(&mut self.objs, 1)
            .map_err(|t| self.over(t))?;
        self.objs.push(Obj { height, body });
        Ok(N::Ref(index))
    }

    /// A container of the stack's items from `from` on.
    fn seq(&mut self, from: usize, make: fn(Vec<N>) -> Body) -> Result<N> {
        let h = self.max_height(&self.stack[from..]);
        let items = self.split_stack(from)?;
        self.new_obj(make(items), h)
    }

    /// A new leaf, whose own memory (beyond the arena's slot) the caller charged.
    fn leaf(&mut self, l: Leaf) -> Result<N> {
        let index = u32::try_from(self.leaves.len())
            .map_err(|_| self.limit("pickle values", u32::MAX as u64, self.leaves.len() as u64))?;
        self.spend
            .reserve(&mut self.leaves, 1)
            .map_err(|t| self.over(t))?;
        self.leaves.push(l);
        Ok(N::Leaf(index))
    }

    /// A text leaf of `s`, charged.
    fn str_leaf(&mut self, s: &str) -> Result<N> {
        self.charge(arc_bytes(s.len() as u64))?;
        self.leaf(Leaf::Str(s.into()))
    }

    /// A byte string leaf of `b`, charged.
    fn bytes_leaf(&mut self, b: &[u8]) -> Result<N> {
        self.charge(arc_bytes(b.len() as u64))?;
        self.leaf(Leaf::Bytes(b.into()))
    }

    /// The integer of little-endian two's complement `bytes`.
    fn int_bytes(&mut self, bytes: &[u8]) -> Result<N> {
        if bytes.len() > 8 {
            self.transient(bytes.len() as u64)?;
            self.charge(arc_bytes(bytes.len() as u64))?;
        }
        match int_of(bytes) {
            Ok(v) => Ok(N::Int(v)),
            Err(big) => self.leaf(Leaf::Big(big.into())),
        }
    }

    fn int128(&mut self, v: i128) -> Result<N> {
        match i64::try_from(v) {
            Ok(v) => Ok(N::Int(v)),
            Err(_) => self.int_bytes(&v.to_le_bytes()),
        }
    }

    /// Text when `b` is UTF-8, else bytes (a protocol-0 `STRING`, a Python 2 `str`).
    fn str_or_bytes(&mut self, b: &[u8]) -> Result<N> {
        match std::str::from_utf8(b) {
            Ok(s) => self.str_leaf(s),
            Err(_) => self.bytes_leaf(b),
        }
    }

    fn memo_put(&mut self, key: u64) -> Result<()> {
        let v = self.top()?;
        if self.memo.count >= self.limits.max_memo && !self.memo.contains(key) {
            return Err(self.limit(
                "pickle memo entries",
                self.limits.max_memo,
                self.memo.count + 1,
            ));
        }
        match self.memo.dense_growth(key) {
            Some(0) => {}
            Some(grow) => self
                .spend
                .reserve(&mut self.memo.dense, grow)
                .map_err(|t| self.over(t))?,
            None if self.memo.sparse.contains_key(&key) => {}
            None => self.charge(SPARSE_ENTRY)?,
        }
        self.memo.put(key, v);
        Ok(())
    }

    fn memo_get(&mut self, key: u64) -> Result<()> {
        match self.memo.get(key) {
            Some(v) => self.push(v),
            None => Err(self.err(format!("memo key {key} is not defined"))),
        }
    }

    fn global(&mut self, module: &str, name: &str) -> Result<N> {
        let kind = self.rules.kind(module, name).cloned();
        let allowed =
            kind.is_some() || (is_bytes_codec(module, name) && self.rules.codecs_encode());
        // The leaf, its global, and the module, name and path texts of the global.
        let (m, n) = (module.len() as u64, name.len() as u64);
        let (leaf, shared) = (size_of::<GlobalN>(), size_of::<Global>());
        self.charge(
            arc_bytes(leaf as u64)
                + arc_bytes(shared as u64)
                + arc_bytes(m)
                + arc_bytes(n)
                + arc_bytes(m + n + 1),
        )?;
        let global = Arc::new(Global::new(module, name));
        if !allowed && !self.limits.weights_only {
            // Inert: recorded, never imported (see `Kind::Inert`).
            return self.leaf(Leaf::Global(Rc::new(GlobalN {
                global,
                kind: Some(Kind::Inert),
                refused: false,
            })));
        }
        if !allowed {
            if self.refused.len() >= MAX_REFUSED {
                return Err(self.refusal().unwrap_or_else(|| self.err("global refused")));
            }
            self.spend
                .reserve(&mut self.refused, 1)
                .map_err(|t| self.over(t))?;
            self.refused.push((global.clone(), self.op_start));
        }
        self.leaf(Leaf::Global(Rc::new(GlobalN {
            global,
            kind,
            refused: !allowed,
        })))
    }

    /// The error naming every global refused so far, when there is one.
    fn refusal(&self) -> Option<Error> {
        let (first, at) = self.refused.first()?;
        if self.refused.len() == 1 {
            return Some(codec_error(*at, format!("global '{first}' is not allowed")));
        }
        let mut named: Vec<String> = self
            .refused
            .iter()
            .take(MAX_REFUSED_NAMED)
            .map(|(g, at)| format!("'{g}' (offset {at})"))
            .collect();
        if self.refused.len() > MAX_REFUSED_NAMED {
            named.push(format!(
                "and {} more",
                self.refused.len() - MAX_REFUSED_NAMED
            ));
        }
        Some(codec_error(
            *at,
            format!(
                "{} globals are not allowed: {}",
                self.refused.len(),
                named.join(", ")
            ),
        ))
    }

    /// Moves the stack's items from `from` on (or dict pairs) into the mutable container
    /// `target`, for the opcode `opname` (`APPEND` or `APPENDS`: a list; `SETITEM` or
    /// `SETITEMS`: a dict; `ADDITEMS`: a set; or an object of an allowed global of that
    /// kind). The container's growth is charged first.
    fn extend(&mut self, target: N, from: usize, opname: &str) -> Result<()> {
        let what = match opname {
            "APPEND" => "APPENDS",
            "SETITEM" => "SETITEMS",
            other => other,
        };
        let valid = match what {
            "APPENDS" => "a list",
            "SETITEMS" => "a dict",
            _ => "a set",
        };
        let refuse = |m: &Self| {
            m.err(format!(
                "{opname} on {}: it applies to {valid} only",
                m.type_name(target)
            ))
        };
        let h = self.max_height(&self.stack[from..]);
        let N::Ref(i) = target else {
            return Err(refuse(self));
        };
        let n = self.stack.len() - from;
        let (spend, stack) = (&mut self.spend, &mut self.stack);
        let o = &mut self.objs[i as usize];
        let new_h = o.height.max(h.saturating_add(1));
        let grown = match (what, &mut o.body) {
            ("APPENDS", Body::List(v)) | ("ADDITEMS", Body::Set(v)) => {
                Some(spend.reserve(v, n).map(|_| v.extend(stack.drain(from..))))
            }
            ("SETITEMS", Body::Dict(d)) => Some(
                spend
                    .reserve(d, n / 2)
                    .map(|_| d.extend(pairs(stack.drain(from..)))),
            ),
            (_, Body::Object(c)) if self.calls[*c as usize].opaque => {
                stack.truncate(from);
                Some(Ok(()))
            }
            (_, Body::Object(c)) => {
                let ob = &mut self.calls[*c as usize];
                let (kind, content) = (ob.callee.kind.as_ref(), &mut ob.content);
                let (items, entries) = match content {
                    Content::Items(v) => (Some(v), None),
                    Content::Entries(d) => (None, Some(d)),
                    Content::Inert(b) => (Some(&mut b.items), Some(&mut b.entries)),
                    Content::Kwargs(_) => (None, None),
                };
                let inert = kind == Some(&Kind::Inert);
                match (what, kind, items, entries) {
                    ("APPENDS", Some(Kind::List), Some(v), _)
                    | ("ADDITEMS", Some(Kind::Set), Some(v), _) => {
                        Some(spend.reserve(v, n).map(|_| v.extend(stack.drain(from..))))
                    }
                    ("APPENDS" | "ADDITEMS", _, Some(v), _) if inert => {
                        Some(spend.reserve(v, n).map(|_| v.extend(stack.drain(from..))))
                    }
                    ("SETITEMS", Some(Kind::Dict), _, Some(d))
                    | ("SETITEMS", Some(Kind::Inert), _, Some(d)) => Some(
                        spend
                            .reserve(d, n / 2)
                            .map(|_| d.extend(pairs(stack.drain(from..)))),
                    ),
                    _ => None,
                }
            }
            _ => None,
        };
        match grown {
            None => return Err(refuse(self)),
            Some(Err(total)) => return Err(self.over(total)),
            Some(Ok(())) => {}
        }
        self.objs[i as usize].height = new_h;
        self.check_height(new_h)
    }

    fn call(&mut self, callable: N, args: N, kwargs: Vec<(N, N)>, opname: &str) -> Result<N> {
        let callee = match self.leaf_of(callable) {
            Some(Leaf::Global(g)) => g.clone(),
            _ => {
                return Err(self.err(format!(
                    "{opname} on {}, which is not an allowed global",
                    self.type_name(callable)
                )))
            }
        };
        let args = match self.obj(args).map(|o| &o.body) {
            Some(Body::Tuple(span)) => *span,
            _ => Span { start: 0, end: 0 },
        };
        if callee.refused {
            // Never run: an opaque stand-in, so that reading goes on to the next global.
            return self.opaque_call(callee);
        }
        let Some(kind) = callee.kind.clone() else {
            // At most three: more are refused as two or more than two.
            let args: Vec<N> = self.items(args).iter().take(3).copied().collect();
            return self.codecs_encode(&callee.global, &args);
        };
        let mut ob = ObjN {
            callee,
            args: Span { start: 0, end: 0 },
            state: None,
            content: Content::Items(Vec::new()),
            opaque: false,
        };
        match kind {
            Kind::Class => {
                return Err(self.err(format!("global '{}' may not be called", ob.callee.global)));
            }
            Kind::Apply { func, args: at } => {
                return self.apply(&ob.callee.global, args, func, at, opname);
            }
            Kind::Call { .. } | Kind::Object => {
                ob.args = args;
                ob.content = Content::Kwargs(kwargs);
            }
            Kind::Inert => {
                self.charge(size_of::<Inert>() as u64)?;
                ob.args = args;
                ob.content = Content::Inert(Box::new(Inert {
                    kwargs,
                    ..Inert::default()
                }));
            }
            Kind::Dict | Kind::List | Kind::Set | Kind::Tuple => {
                if !kwargs.is_empty() || args.len() > 1 {
                    return Err(self.err(format!(
                        "global '{}' called with unsupported arguments",
                        ob.callee.global
                    )));
                }
                if kind == Kind::Dict {
                    ob.content = Content::Entries(Vec::new());
                }
                if let Some(&a) = self.items(args).first() {
                    self.copy_argument(&mut ob, &kind, a)?;
                }
            }
        }
        let h = self
            .max_height(self.items(ob.args))
            .max(self.max_height(ob.items()))
            .max(
                ob.entries()
                    .iter()
                    .chain(ob.kwargs())
                    .map(|&(k, v)| self.height(k).max(self.height(v)))
                    .max()
                    .unwrap_or(0),
            );
        self.new_call(ob, h)
    }

    /// The items or entries of `a`, the one argument of a call of a dict-, list-, set- or
    /// tuple-kind global, copied into the call `ob` (charged first).
    fn copy_argument(&mut self, ob: &mut ObjN, kind: &Kind, a: N) -> Result<()> {
        let n = match self.obj(a).map(|b| &b.body) {
            Some(Body::Tuple(span)) => span.len(),
            Some(Body::List(v) | Body::Set(v) | Body::FrozenSet(v)) => v.len(),
            Some(Body::Dict(d)) => d.len(),
            _ => 0,
        };
        let item = match kind {
            Kind::Dict => std::mem::size_of::<(N, N)>(),
            _ => std::mem::size_of::<N>(),
        };
        self.charge((n as u64).saturating_mul(item as u64))?;
        let called_with = |m: &Self| {
            m.err(format!(
                "global '{}' called with {}",
                ob.callee.global,
                m.type_name(a)
            ))
        };
        let Some(b) = self.obj(a) else {
            return Err(called_with(self));
        };
        let seq: Option<&[N]> = match &b.body {
            Body::Tuple(span) => Some(self.items(*span)),
            Body::List(v) | Body::Set(v) | Body::FrozenSet(v) => Some(v),
            _ => None,
        };
        let (items, entries): (Vec<N>, Vec<(N, N)>) = match (kind, seq, &b.body) {
            (Kind::Dict, _, Body::Dict(d)) => (Vec::new(), d.clone()),
            (Kind::Dict, Some(v), _) => match v.iter().map(|&n| self.pair_of(n)).collect() {
                Some(entries) => (Vec::new(), entries),
                None => {
                    return Err(self.err(format!(
                        "global '{}' called with a sequence that is not of pairs",
                        ob.callee.global
                    )));
                }
            },
            (Kind::List | Kind::Set | Kind::Tuple, Some(v), _) => (v.to_vec(), Vec::new()),
            _ => return Err(called_with(self)),
        };
        ob.content = match kind {
            Kind::Dict => Content::Entries(entries),
            _ => Content::Items(items),
        };
        Ok(())
    }

    /// The call of an [`Kind::Apply`] global with `args`: the call of its argument
    /// `func`, an allowed global of another kind, with its argument `at`, a tuple.
    fn apply(
        &mut self,
        g: &Arc<Global>,
        args: Span,
        func: usize,
        at: usize,
        opname: &str,
    ) -> Result<N> {
        let items = self.items(args);
        let (Some(&f), Some(&a)) = (items.get(func), items.get(at)) else {
            return Err(self.err(format!(
                "global '{g}' called with {} arguments: it needs its function and its arguments",
                items.len()
            )));
        };
        let nested = matches!(self.leaf_of(f), Some(Leaf::Global(n)) if matches!(n.kind, Some(Kind::Apply { .. })));
        if nested || !self.is_tuple(a) {
            return Err(self.err(format!(
                "global '{g}' called with a {} and a {}: it applies a global of another kind to a tuple",
                self.type_name(f),
                self.type_name(a)
            )));
        }
        self.call(f, a, Vec::new(), opname)
    }

    /// Records the call `ob` and makes the object it builds.
    fn new_call(&mut self, ob: ObjN, children_height: u32) -> Result<N> {
        let c = u32::try_from(self.calls.len())
            .map_err(|_| self.limit("pickle calls", u32::MAX as u64, self.calls.len() as u64))?;
        self.spend
            .reserve(&mut self.calls, 1)
            .map_err(|t| self.over(t))?;
        self.calls.push(ob);
        self.new_obj(Body::Object(c), children_height)
    }

    /// The stand-in for the call of a refused global (see [`ObjN::opaque`]).
    fn opaque_call(&mut self, callee: Rc<GlobalN>) -> Result<N> {
        let ob = ObjN {
            callee,
            args: Span { start: 0, end: 0 },
            state: None,
            content: Content::Items(Vec::new()),
            opaque: true,
        };
        self.new_call(ob, 0)
    }

    /// Checks a persistent id against the form the rules set, if any (torch's
    /// `persistent_load`: `('storage', class, key, location, numel)`).
    fn check_persistent(&self, pid: N) -> Result<()> {
        let Some((kind, names)) = self.rules.persistent_shape() else {
            return Ok(());
        };
        let form = || format!("({})", names.join(", "));
        let items = match self.obj(pid).map(|o| &o.body) {
            Some(Body::Tuple(span)) => self.items(*span),
            _ => {
                return Err(self.err(format!(
                    "a persistent id is a {}, not a tuple {}",
                    self.type_name(pid),
                    form()
                )))
            }
        };
        if items.len() != names.len() {
            return Err(self.err(format!(
                "a persistent id has {} items, not the {} of {}",
                items.len(),
                names.len(),
                form()
            )));
        }
        let tag = match items.first().and_then(|&n| self.leaf_of(n)) {
            Some(Leaf::Bytes(b)) => std::str::from_utf8(b).ok().map(String::from),
            Some(Leaf::Range(r)) => r.text.as_ref().map(|t| t.to_string()),
            Some(l) => l.text().map(|t| t.to_string()),
            None => None,
        };
        match tag {
            Some(t) if t == kind => Ok(()),
            Some(t) => Err(self.err(format!("a persistent id's tag is '{t}', not '{kind}'"))),
            None => Err(self.err(format!(
                "a persistent id's tag is a {}, not the text '{kind}'",
                items
                    .first()
                    .map(|&n| self.type_name(n))
                    .unwrap_or_default()
            ))),
        }
    }

    /// The two items of a pair (a 2-tuple).
    fn pair_of(&self, n: N) -> Option<(N, N)> {
        match &self.obj(n)?.body {
            Body::Tuple(span) if span.len() == 2 => {
                let t = self.items(*span);
                Some((t[0], t[1]))
            }
            _ => None,
        }
    }

    fn is_tuple(&self, n: N) -> bool {
        matches!(self.obj(n).map(|o| &o.body), Some(Body::Tuple(_)))
    }

    fn codecs_encode(&mut self, g: &Global, args: &[N]) -> Result<N> {
        if !is_bytes_codec(&g.module, &g.name) || !self.rules.codecs_encode() {
            return Err(self.err(format!("global '{g}' is not allowed")));
        }
        if &*g.name == "bytes" {
            // `bytes()`: how Python 3 pickles `b''` at protocols 2 and 3.
            if !args.is_empty() {
                return Err(self.err(format!("global '{g}' called with arguments")));
            }
            return match self.rules.keeps_byte_ranges() {
                true => self.leaf(Leaf::Range(Arc::new(ByteRange {
                    offset: self.op_start as u64,
                    stored: 0,
                    len: 0,
                    latin1: false,
                    text: None,
                }))),
                false => self.bytes_leaf(&[]),
            };
        }
        let (text, enc) = match args {
            [s] => (*s, "utf-8".to_string()),
            [s, e] => match self.text(*e) {
                Some(e) => (*s, e.to_ascii_lowercase().replace('_', "-")),
                None => return Err(self.err("_codecs.encode called with unsupported arguments")),
            },
            _ => return Err(self.err("_codecs.encode called with unsupported arguments")),
        };
        if !matches!(
            enc.as_str(),
            "latin1" | "latin-1" | "iso-8859-1" | "iso8859-1" | "l1"
        ) {
            return Err(self.err(format!(
                "_codecs.encode: encoding '{enc}' is not allowed (only latin1)"
            )));
        }
        if let Some(&Leaf::Utf8 {
            offset,
            len,
            ref short,
        }) = self.leaf_of(text)
        {
            // Left in the buffer: one byte per character, checked when read.
            let stored = &self.data[offset as usize..(offset + len) as usize];
            let chars = match short {
                Some(s) => s.chars().count(),
                None => stored.iter().filter(|&&b| b & 0xc0 != 0x80).count(),
            };
            return self.leaf(Leaf::Range(Arc::new(ByteRange {
                offset,
                stored: len,
                len: chars as u64,
                latin1: true,
                text: None,
            })));
        }
        let Some(s) = self.text(text).cloned() else {
            return Err(self.err("_codecs.encode called with unsupported arguments"));
        };
        self.transient(s.len() as u64)?;
        self.charge(arc_bytes(s.len() as u64))?;
        let mut out = Vec::with_capacity(s.len());
        for c in s.chars() {
            match u8::try_from(c as u32) {
                Ok(b) => out.push(b),
                Err(_) => return Err(self.err("_codecs.encode: character outside latin-1")),
            }
        }
        self.leaf(Leaf::Bytes(out.into()))
    }

    /// A Python 2 `str` of `n` bytes (`BINSTRING`, `SHORT_BINSTRING`): text when it is
    /// UTF-8, else bytes; under [`Rules::byte_ranges`], left in the buffer (and read as
    /// `pickle.load(..., encoding='latin1')` does, each byte one character).
    fn py2_str(&mut self, n: u64) -> Result<N> {
        let offset = self.pos as u64;
        let b = self.take(n)?;
        if !self.rules.keeps_byte_ranges() {
            return self.str_or_bytes(b);
        }
        let text = match n <= ByteRange::TEXT_MAX {
            true => {
                self.transient(2 * n)?;
                self.charge(arc_bytes(2 * n))?;
                Some(b.iter().map(|&c| c as char).collect::<String>().into())
            }
            false => None,
        };
        self.leaf(Leaf::Range(Arc::new(ByteRange {
            offset,
            stored: n,
            len: n,
            latin1: false,
            text,
        })))
    }

    fn persistent_ok(&self) -> Result<()> {
        if !self.rules.accepts_persistent_ids() {
            return Err(self.err("persistent ids are not allowed"));
        }
        Ok(())
    }
    fn run(&mut self) -> Result<(Value, usize)> {
        let mut ops: u64 = 0;
        loop {
            self.op_start = self.pos;
            if self.pos >= self.data.len() {
                return Err(self.err("truncated: the pickle ends without STOP"));
            }
            self.framed(Some(1))?;
            let code = self.data[self.pos];
            self.pos += 1;
            ops += 1;
            if ops > self.limits.max_pickle_ops {
                return Err(self.limit("pickle opcodes", self.limits.max_pickle_ops, ops));
            }
            match code {
                op::PROTO => {
                    let [p] = self.fixed::<1>()?;
                    if !self.rules.protocol_range().contains(&p) {
                        return Err(self.err(format!("protocol {p} is not accepted")));
                    }
                }
                op::FRAME => {
                    let n = u64::from_le_bytes(self.fixed::<8>()?);
                    if let Some(end) = self.frame_end.filter(|&e| e > self.pos) {
                        return Err(self.err(format!(
                            "a FRAME begins {} bytes before the end of the current frame (at offset {end})",
                            end - self.pos
                        )));
                    }
                    if n > (self.data.len() - self.pos) as u64 {
                        return Err(self.err(format!(
                            "frame of {n} bytes is longer than the {} bytes that remain",
                            self.data.len() - self.pos
                        )));
                    }
                    self.frame_end = Some(self.pos + n as usize);
                }
                op::STOP => {
                    if let Some(end) = self.frame_end.filter(|&e| e > self.pos) {
                        return Err(self.err(format!(
                            "STOP {} bytes before the end of its FRAME (at offset {end})",
                            end - self.pos
                        )));
                    }
                    if let Some(e) = self.refusal() {
                        return Err(e);
                    }
                    let v = self.pop()?;
                    if !self.stack.is_empty() || !self.marks.is_empty() {
                        return Err(self.err(format!(
                            "{} values and {} marks are left on the stack at STOP",
                            self.stack.len(),
                            self.marks.len()
                        )));
                    }
                    let value = self.convert(v)?;
                    return Ok((value, self.pos));
                }
                op::MARK => {
                    if self.marks.len() as u64 >= self.limits.max_depth {
                        return Err(self.limit(
                            "pickle MARK nesting",
                            self.limits.max_depth,
                            self.marks.len() as u64 + 1,
                        ));
                    }
                    if self.marks.len() >= self.high.1 {
                        self.charge(std::mem::size_of::<usize>() as u64)?;
                        self.high.1 = self.marks.len() + 1;
                    }
                    self.marks.push(self.stack.len());
                }
                op::POP => {
                    if self.stack.len() > self.base() {
                        self.stack.pop();
                    } else {
                        let k = self.pop_mark()?;
                        self.stack.truncate(k);
                    }
                }
                op::POP_MARK => {
                    let k = self.pop_mark()?;
                    self.stack.truncate(k);
                }
                op::DUP => {
                    let v = self.top()?;
                    self.push(v)?;
                }
                op::NONE => self.push(N::None)?,
                op::NEWTRUE => self.push(N::Bool(true))?,
                op::NEWFALSE => self.push(N::Bool(false))?,
                op::INT => {
                    let l = self.line_str()?.trim();
                    let n = match l {
                        "01" => N::Bool(true),
                        "00" => N::Bool(false),
                        _ => {
                            let v = l
                                .parse::<i128>()
                                .map_err(|_| self.err(format!("bad INT argument '{l}'")))?;
                            self.int128(v)?
                        }
                    };
                    self.push(n)?;
                }
                op::LONG => {
                    let l = self.line_str()?.trim();
                    let l = l.strip_suffix('L').unwrap_or(l);
                    let v = l
                        .parse::<i128>()
                        .map_err(|_| self.err(format!("bad or too large LONG argument '{l}'")))?;
                    let n = self.int128(v)?;
                    self.push(n)?;
                }
                op::BININT => {
                    let v = i32::from_le_bytes(self.fixed::<4>()?);
                    self.push(N::Int(v as i64))?;
                }
                op::BININT1 => {
                    let [v] = self.fixed::<1>()?;
                    self.push(N::Int(v as i64))?;
                }
                op::BININT2 => {
                    let v = u16::from_le_bytes(self.fixed::<2>()?);
                    self.push(N::Int(v as i64))?;
                }
                op::LONG1 => {
                    let [n] = self.fixed::<1>()?;
                    let b = self.take(n as u64)?;
                    let n = self.int_bytes(b)?;
                    self.push(n)?;
                }
                op::LONG4 => {
                    let n = i32::from_le_bytes(self.fixed::<4>()?);
                    if n < 0 {
                        return Err(self.err("LONG4 with a negative length"));
                    }
                    let b = self.take(n as u64)?;
                    let n = self.int_bytes(b)?;
                    self.push(n)?;
                }
                op::FLOAT => {
                    let l = self.line_str()?.trim();
                    let v = l
                        .parse::<f64>()
                        .map_err(|_| self.err(format!("bad FLOAT argument '{l}'")))?;
                    self.push(N::Float(v))?;
                }
                op::BINFLOAT => {
                    let v = f64::from_be_bytes(self.fixed::<8>()?);
                    self.push(N::Float(v))?;
                }
                op::STRING => {
                    let l = self.line()?;
                    let body = match l {
                        [q, body @ .., q2] if q == q2 && (*q == b'\'' || *q == b'"') => body,
                        _ => return Err(self.err("STRING argument is not quoted")),
                    };
                    self.transient(body.len() as u64)?;
                    let b = crate::escape::unescape_string(body)
                        .ok_or_else(|| self.err("STRING argument has a bad escape"))?;
                    let n = self.str_or_bytes(&b)?;
                    self.push(n)?;
                }
                op::BINSTRING => {
                    let n = i32::from_le_bytes(self.fixed::<4>()?);
                    if n < 0 {
                        return Err(self.err("BINSTRING with a negative length"));
                    }
                    let n = self.py2_str(n as u64)?;
                    self.push(n)?;
                }
                op::SHORT_BINSTRING => {
                    let [n] = self.fixed::<1>()?;
                    let n = self.py2_str(n as u64)?;
                    self.push(n)?;
                }
                op::UNICODE => {
                    let l = self.line()?;
                    self.transient(2 * l.len() as u64)?;
                    let s = crate::escape::raw_unicode_escape(l)
                        .ok_or_else(|| self.err("UNICODE argument has a bad escape"))?;
                    let n = self.str_leaf(&s)?;
                    self.push(n)?;
                }
                op::BINUNICODE | op::SHORT_BINUNICODE | op::BINUNICODE8 => {
                    let n = match code {
                        op::SHORT_BINUNICODE => self.fixed::<1>()?[0] as u64,
                        op::BINUNICODE => u32::from_le_bytes(self.fixed::<4>()?) as u64,
                        _ => u64::from_le_bytes(self.fixed::<8>()?),
                    };
                    let offset = self.pos as u64;
                    let b = self.take(n)?;
                    let checked = |m: &Self| {
                        std::str::from_utf8(b).map_err(|_| m.err("string is not valid UTF-8"))
                    };
                    let node = match self.rules.keeps_byte_ranges() {
                        true if n > ByteRange::TEXT_MAX => self.leaf(Leaf::Utf8 {
                            offset,
                            len: n,
                            short: None,
                        })?,
                        true => {
                            let s = checked(self)?;
                            self.charge(arc_bytes(n))?;
                            self.leaf(Leaf::Utf8 {
                                offset,
                                len: n,
                                short: Some(s.into()),
                            })?
                        }
                        false => {
                            let s = checked(self)?;
                            self.str_leaf(s)?
                        }
                    };
                    self.push(node)?;
                }
                op::BINBYTES | op::SHORT_BINBYTES | op::BINBYTES8 | op::BYTEARRAY8 => {
                    let n = match code {
                        op::SHORT_BINBYTES => self.fixed::<1>()?[0] as u64,
                        op::BINBYTES => u32::from_le_bytes(self.fixed::<4>()?) as u64,
                        _ => u64::from_le_bytes(self.fixed::<8>()?),
                    };
                    let offset = self.pos as u64;
                    let b = self.take(n)?;
                    let node = match self.rules.keeps_byte_ranges() {
                        true => self.leaf(Leaf::Range(Arc::new(ByteRange {
                            offset,
                            stored: n,
                            len: n,
                            latin1: false,
                            text: None,
                        })))?,
                        false => self.bytes_leaf(b)?,
                    };
                    self.push(node)?;
                }
                op::EMPTY_TUPLE => {
                    let n = self.tuple_from_stack(self.stack.len())?;
                    self.push(n)?;
                }
                op::TUPLE => {
                    let Some(from) = self.marks.pop() else {
                        return Err(self.err("no MARK on the stack"));
                    };
                    let n = self.tuple_from_stack(from)?;
                    self.push(n)?;
                }
                op::TUPLE1 | op::TUPLE2 | op::TUPLE3 => {
                    let k = (code - op::TUPLE1 + 1) as usize;
                    if self.stack.len() < self.base() + k {
                        return Err(self.err("stack underflow"));
                    }
                    let n = self.tuple_from_stack(self.stack.len() - k)?;
                    self.push(n)?;
                }
                op::EMPTY_LIST => {
                    let n = self.new_obj(Body::List(Vec::new()), 0)?;
                    self.push(n)?;
                }
                op::LIST => {
                    let k = self.pop_mark()?;
                    let n = self.seq(k, Body::List)?;
                    self.push(n)?;
                }
                op::EMPTY_DICT => {
                    let n = self.new_obj(Body::Dict(Vec::new()), 0)?;
                    self.push(n)?;
                }
                op::DICT => {
                    let k = self.pop_mark()?;
                    if (self.stack.len() - k) % 2 != 0 {
                        return Err(self.err("DICT with an odd number of items"));
                    }
                    let h = self.max_height(&self.stack[k..]);
                    let d = self.split_pairs(k)?;
                    let n = self.new_obj(Body::Dict(d), h)?;
                    self.push(n)?;
                }
                op::EMPTY_SET => {
                    let n = self.new_obj(Body::Set(Vec::new()), 0)?;
                    self.push(n)?;
                }
                op::FROZENSET => {
                    let k = self.pop_mark()?;
                    let n = self.seq(k, Body::FrozenSet)?;
                    self.push(n)?;
                }
                op::APPEND => {
                    let from = self.stack.len().saturating_sub(1);
                    let t = self.under(from)?;
                    self.extend(t, from, "APPEND")?;
                }
                op::APPENDS => {
                    let k = self.pop_mark()?;
                    let t = self.under(k)?;
                    self.extend(t, k, "APPENDS")?;
                }
                op::SETITEM => {
                    let from = self.stack.len().saturating_sub(2);
                    let t = self.under(from)?;
                    self.extend(t, from, "SETITEM")?;
                }
                op::SETITEMS => {
                    let k = self.pop_mark()?;
                    if (self.stack.len() - k) % 2 != 0 {
                        return Err(self.err("SETITEMS with an odd number of items"));
                    }
                    let t = self.under(k)?;
                    self.extend(t, k, "SETITEMS")?;
                }
                op::ADDITEMS => {
                    let k = self.pop_mark()?;
                    let t = self.under(k)?;
                    self.extend(t, k, "ADDITEMS")?;
                }
                op::PUT => {
                    let l = self.line_str()?;
                    let k = l
                        .trim()
                        .parse::<u64>()
                        .map_err(|_| self.err("bad PUT argument"))?;
                    self.memo_put(k)?;
                }
                op::BINPUT => {
                    let [k] = self.fixed::<1>()?;
                    self.memo_put(k as u64)?;
                }
                op::LONG_BINPUT => {
                    let k = u32::from_le_bytes(self.fixed::<4>()?);
                    self.memo_put(k as u64)?;
                }
                op::MEMOIZE => {
                    let k = self.memo.count;
                    self.memo_put(k)?;
                }
                op::GET => {
                    let l = self.line_str()?;
                    let k = l
                        .trim()
                        .parse::<u64>()
                        .map_err(|_| self.err("bad GET argument"))?;
                    self.memo_get(k)?;
                }
                op::BINGET => {
                    let [k] = self.fixed::<1>()?;
                    self.memo_get(k as u64)?;
                }
                op::LONG_BINGET => {
                    let k = u32::from_le_bytes(self.fixed::<4>()?);
                    self.memo_get(k as u64)?;
                }
                op::GLOBAL => {
                    let module = self.line_str()?;
                    let name = self.line_str()?;
                    let g = self.global(module, name)?;
                    self.push(g)?;
                }
                op::STACK_GLOBAL => {
                    let name = self.pop()?;
                    let module = self.pop()?;
                    let (Some(m), Some(n)) = (self.text(module), self.text(name)) else {
                        return Err(self.err(format!(
                            "STACK_GLOBAL with a {} and a {} (needs two str)",
                            self.type_name(module),
                            self.type_name(name)
                        )));
                    };
                    let (m, n) = (m.clone(), n.clone());
                    let g = self.global(&m, &n)?;
                    self.push(g)?;
                }
                op::REDUCE | op::NEWOBJ => {
                    let args = self.pop()?;
                    let callable = self.pop()?;
                    let name = if code == op::REDUCE {
                        "REDUCE"
                    } else {
                        "NEWOBJ"
                    };
                    if !self.is_tuple(args) {
                        return Err(self.err(format!(
                            "{name} arguments are a {}, not a tuple",
                            self.type_name(args)
                        )));
                    }
                    let n = self.call(callable, args, Vec::new(), name)?;
                    self.push(n)?;
                }
                op::NEWOBJ_EX => {
                    let kwargs = self.pop()?;
                    let args = self.pop()?;
                    let callable = self.pop()?;
                    if !self.is_tuple(args) {
                        return Err(self.err("NEWOBJ_EX arguments are not a tuple"));
                    }
                    let n = match self.obj(kwargs).map(|o| &o.body) {
                        Some(Body::Dict(d)) => d.len(),
                        _ => return Err(self.err("NEWOBJ_EX keyword arguments are not a dict")),
                    };
                    self.charge((n as u64).saturating_mul(std::mem::size_of::<(N, N)>() as u64))?;
                    let kw = match self.obj(kwargs).map(|o| &o.body) {
                        Some(Body::Dict(d)) => d.clone(),
                        _ => Vec::new(),
                    };
                    let n = self.call(callable, args, kw, "NEWOBJ_EX")?;
                    self.push(n)?;
                }
                op::BUILD => {
                    let state = self.pop()?;
                    let target = self.top()?;
                    let sh = self.height(state);
                    let N::Ref(i) = target else {
                        return Err(self.err(format!(
                            "BUILD on {}: it applies to an object built by an allowed call only",
                            self.type_name(target)
                        )));
                    };
                    let o = &mut self.objs[i as usize];
                    let new_h = o.height.max(sh.saturating_add(1));
                    let call = match &mut o.body {
                        Body::Object(c) if self.calls[*c as usize].opaque => None,
                        Body::Object(c) => {
                            self.calls[*c as usize].state = Some(state);
                            Some(*c)
                        }
                        _ => {
                            return Err(self.err(format!(
                                "BUILD on {}: it applies to an object built by an allowed call only",
                                self.type_name(target)
                            )));
                        }
                    };
                    o.height = new_h;
                    self.check_height(new_h)?;
                    if let Some(c) = call {
                        self.inline_data(c, state)?;
                    }
                }
                op::PERSID => {
                    self.persistent_ok()?;
                    if self.rules.persistent_shape().is_some() {
                        return Err(
                            self.err("a text persistent id (PERSID) where a tuple is expected")
                        );
                    }
                    let l = self.line()?;
                    let s = std::str::from_utf8(l)
                        .map_err(|_| self.err("PERSID argument is not text"))?;
                    let s = self.str_leaf(s)?;
                    let n = self.new_obj(Body::Persistent(s), 0)?;
                    self.push(n)?;
                }
                op::BINPERSID => {
                    self.persistent_ok()?;
                    let pid = self.pop()?;
                    self.check_persistent(pid)?;
                    let h = self.height(pid);
                    let n = self.new_obj(Body::Persistent(pid), h)?;
                    self.push(n)?;
                }
                op::INST => {
                    let module = self.line_str()?;
                    let name = self.line_str()?;
                    if self.limits.weights_only {
                        return Err(self.err(format!(
                            "opcode INST (global '{module}.{name}') is refused under --weights-only, as torch.load(weights_only=True) refuses it"
                        )));
                    }
                    let k = self.pop_mark()?;
                    let args = self.tuple_from_stack(k)?;
                    let g = self.global(module, name)?;
                    let n = self.call(g, args, Vec::new(), "INST")?;
                    self.push(n)?;
                }
                op::OBJ => {
                    if self.limits.weights_only {
                        return Err(self.err(
                            "opcode OBJ is refused under --weights-only, as torch.load(weights_only=True) refuses it",
                        ));
                    }
                    let k = self.pop_mark()?;
                    if self.stack.len() == k {
                        return Err(self.err("OBJ with no class after its MARK"));
                    }
                    let args = self.tuple_from_stack(k + 1)?;
                    let class = self.pop()?;
                    let n = self.call(class, args, Vec::new(), "OBJ")?;
                    self.push(n)?;
                }
                op::EXT1 | op::EXT2 | op::EXT4 => {
                    let code = match code {
                        op::EXT1 => u32::from(self.fixed::<1>()?[0]),
                        op::EXT2 => u32::from(u16::from_le_bytes(self.fixed::<2>()?)),
                        _ => u32::from_le_bytes(self.fixed::<4>()?),
                    };
                    return Err(self.err(format!(
                        "extension code {code} (EXT1/2/4): Python reads it only from a copyreg registry that the program loading the pickle fills, which a file cannot name; refused, as pickle.load refuses it"
                    )));
                }
                op::READONLY_BUFFER => {
                    // A read-only view of the byte string on top: the same bytes.
                    let top = self.top()?;
                    if !matches!(self.leaf_of(top), Some(Leaf::Bytes(_) | Leaf::Range(_))) {
                        return Err(self.err(format!(
                            "READONLY_BUFFER on {}: it applies to a byte string",
                            self.type_name(top)
                        )));
                    }
                }
                op::NEXT_BUFFER => {
                    return Err(self.err(
                        "NEXT_BUFFER: an out-of-band buffer that the program loading the pickle passes (pickle.loads(buffers=...)); a file holds none",
                    ));
                }
                _ => return Err(self.err(format!("unknown opcode 0x{code:02x}"))),
            }
        }
    }
}

/// `_codecs.encode`, and `bytes` (`__builtin__.bytes`, `builtins.bytes`) called with no
/// argument: what protocol-2 pickles written by Python 3 store byte strings with.
fn is_bytes_codec(module: &str, name: &str) -> bool {
    matches!(
        (module, name),
        ("_codecs", "encode") | ("__builtin__" | "builtins", "bytes")
    )
}

/// The items of `it` two by two.
fn pairs(mut it: impl Iterator<Item = N>) -> impl Iterator<Item = (N, N)> {
    std::iter::from_fn(move || Some((it.next()?, it.next()?)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rd(b: &[u8]) -> Result<Value> {
        read(b, &Rules::new(), &weights_only())
    }

    fn weights_only() -> Limits {
        Limits {
            weights_only: true,
            ..Limits::default()
        }
    }

    #[test]
    fn refused_global_names_itself_and_its_offset() {
        let e = rd(b"\x80\x02cposix\nsystem\nX\x02\x00\x00\x00id\x85R.").unwrap_err();
        assert_eq!(e.location.offset, Some(2));
        assert!(e
            .to_string()
            .contains("global 'posix.system' is not allowed"));
        // Never allowed, whatever the rules say.
        let rules = Rules::new().allow("os", "system", Kind::Class);
        assert!(read(b"cos\nsystem\n.", &rules, &weights_only()).is_err());
    }

    #[test]
    fn memo_shares_and_mutation_shows_through() {
        // d = {}; memo 0; l = [d, d]; then d['k'] = 1 after l was built.
        let v = rd(b"\x80\x02}q\x00h\x00h\x00\x86q\x01h\x00X\x01\x00\x00\x00kK\x01s0h\x01\x85.")
            .unwrap_err();
        // (POP under the tuple is fine; the leftover dict makes it an error.)
        assert!(v.to_string().contains("left on the stack"), "{v}");
        let v = rd(b"\x80\x02}q\x000h\x00h\x00\x86h\x00X\x01\x00\x00\x00kK\x01s0.").unwrap();
        let Value::Tuple(t) = &v else { panic!() };
        let (Value::Dict(a), Value::Dict(b)) = (&t[0], &t[1]) else {
            panic!()
        };
        assert!(Arc::ptr_eq(a, b));
        assert_eq!(a.len(), 1);
    }

    #[test]
    fn limits_apply() {
        let limits = Limits {
            max_pickle_ops: 3,
            ..Limits::default()
        };
        let e = read(b"NNN0.", &Rules::new(), &limits).unwrap_err();
        assert!(matches!(e.kind, ErrorKind::Limit { .. }), "{e}");
        let limits = Limits {
            max_memo: 1,
            ..Limits::default()
        };
        let e = read(b"Nq\x00q\x01.", &Rules::new(), &limits).unwrap_err();
        assert!(matches!(e.kind, ErrorKind::Limit { .. }), "{e}");
        let deep = [b"N".as_slice(), &[0x85; 200], b"."].concat();
        assert!(rd(&deep).is_err());
    }

    #[test]
    fn protocol_zero_text_forms() {
        let v = rd(
            b"(I01\nI00\nI-12\nL123456789012345678901234L\nF-2.5\nS'a\\x41\\n'\nVx\\u00e9\ntp0\n.",
        )
        .unwrap();
        assert_eq!(
            v,
            Value::tuple(vec![
                Value::Bool(true),
                Value::Bool(false),
                Value::Int(-12),
                Value::int(123456789012345678901234),
                Value::Float(-2.5),
                Value::str("aA\n"),
                Value::str("x\u{e9}"),
            ])
        );
    }

    #[test]
    fn memo_keys_far_apart_and_shared_tuples() {
        // A tuple memoized under a huge key, then a small one, each fetched twice.
        let mut p = b"\x80\x02K\x01K\x02\x86r\x00\x94\x35\x77q\x05".to_vec();
        p.extend_from_slice(b"0j\x00\x94\x35\x77h\x05j\x00\x94\x35\x77\x87.");
        let v = rd(&p).unwrap();
        let Value::Tuple(t) = &v else { panic!("{v:?}") };
        assert_eq!(t.len(), 3);
        let Value::Tuple(a) = &t[0] else { panic!() };
        for x in &t[1..] {
            let Value::Tuple(b) = x else { panic!() };
            assert!(Arc::ptr_eq(a, b), "one tuple, shared");
        }
        assert_eq!(&a[..], &[Value::Int(1), Value::Int(2)]);
        // An undefined key is an error naming it, wherever it would live.
        for get in [&b"j\x00\x00\x00\x10"[..], b"h\x07"] {
            let e = rd(&[b"\x80\x02N", get, b"."].concat()).unwrap_err();
            assert!(e.to_string().contains("is not defined"), "{e}");
        }
    }

    #[test]
    fn cycles_are_refused_and_torn_down() {
        let e = rd(b"]q\x002a.").unwrap_err();
        assert!(e.to_string().contains("recursive"), "{e}");
    }

    /// Reads `p` with a budget of `bytes` for its objects.
    fn within(p: &[u8], bytes: u64) -> Result<Value> {
        let limits = Limits {
            max_tree_bytes: Some(bytes),
            ..Limits::default()
        };
        read(p, &Rules::new(), &limits)
    }

    /// The offset, limit and total of a refusal for the budget.
    fn over(e: &Error) -> (u64, u64, u64) {
        match e.kind {
            ErrorKind::Limit {
                what,
                limit,
                actual,
            } if what == MEMORY => (e.location.offset.unwrap(), limit, actual),
            _ => panic!("not the budget: {e}"),
        }
    }

    const SLOT: u64 = std::mem::size_of::<N>() as u64;

    #[test]
    #[cfg(target_pointer_width = "64")]
    fn the_machine_s_items_are_as_small_as_the_docs_say() {
        assert_eq!(std::mem::size_of::<N>(), 16);
        assert_eq!(std::mem::size_of::<Obj>(), 40);
        assert_eq!(std::mem::size_of::<ObjN>(), 72);
        assert_eq!(std::mem::size_of::<Value>(), 24);
    }

    #[test]
    fn the_stack_is_charged_at_its_highest() {
        // A MARK (8 bytes) and ten values fit; the eleventh (at offset 11) does not.
        let p = [b"(".as_slice(), &[b'N'; 11], b"t."].concat();
        let e = within(&p, 8 + 10 * SLOT).unwrap_err();
        assert_eq!(over(&e), (11, 8 + 10 * SLOT, 8 + 11 * SLOT), "{e}");
        assert!(e.to_string().contains("--max-tree-bytes"), "{e}");
        // Values pushed and popped again and again cost one slot.
        let p = [b"N0".repeat(10_000).as_slice(), b"N."].concat();
        assert_eq!(within(&p, SLOT).unwrap(), Value::None);
    }

    #[test]
    fn marks_are_charged() {
        let mark = std::mem::size_of::<usize>() as u64;
        let e = within(b"((((", 3 * mark).unwrap_err();
        assert_eq!(over(&e), (3, 3 * mark, 4 * mark), "{e}");
        // Marks popped and pushed again cost nothing more.
        let p = [b"(1".repeat(1000).as_slice(), b"N."].concat();
        within(&p, mark + SLOT).unwrap();
    }

    #[test]
    fn memo_entries_are_charged() {
        // Keys counted up from 0 (MEMOIZE) take a slot each.
        let p = [b"\x80\x04N".as_slice(), &[0x94; 6], b"."].concat();
        let e = within(&p, SLOT + 5 * SLOT).unwrap_err();
        assert_eq!(over(&e), (8, 6 * SLOT, 7 * SLOT), "{e}");
        // A key far from the others goes to the map, at more bytes an entry.
        let e = within(b"Nr\x00\x00\x00\x40.", 4 * SLOT).unwrap_err();
        assert_eq!(over(&e), (1, 4 * SLOT, SLOT + SPARSE_ENTRY), "{e}");
        // The memo is given back before the value is made.
        let p = [b"\x80\x04N".as_slice(), &[0x94; 100], b"."].concat();
        within(&p, 101 * SLOT).unwrap();
    }

    #[test]
    fn containers_and_the_value_made_of_them_are_charged() {
        let obj = std::mem::size_of::<Obj>() as u64;
        // Each empty list: its slot on the stack and its container.
        let e = within(&[b']'; 4], 3 * (SLOT + obj)).unwrap_err();
        assert_eq!(over(&e).0, 3, "{e}");
        // A list of a thousand lists reads in what it takes, and not in less: the
        // machine fits, the value made at STOP (offset 2003) does not.
        let p = [b"(".as_slice(), &[b']'; 1000], b"l."].concat();
        let v = within(&p, 1 << 20).unwrap();
        assert_eq!(v.as_seq().map(<[Value]>::len), Some(1000));
        let machine = 8 + 1000 * (2 * SLOT + obj);
        let e = within(&p, machine + 1000).unwrap_err();
        assert_eq!(over(&e).0, 1002, "{e}");
        // Byte strings and texts copied are charged with their bytes.
        let big = [b"B\x00\x00\x10\x00".as_slice(), &[7u8; 1 << 20], b"."].concat();
        assert_eq!(over(&within(&big, 1 << 20).unwrap_err()).0, 0);
        within(&big, 2 << 20).unwrap();
    }

    #[test]
    fn the_default_budget_bounds_a_pickle_of_one_byte_opcodes() {
        // Three million empty lists (3 MB): refused at the budget of 128 MiB and 3 MB,
        // at the opcode that passes it, long before the end.
        let p = [b"\x80\x04(".as_slice(), &vec![b']'; 3_000_000], b"l."].concat();
        let e = rd(&p).unwrap_err();
        let (at, limit, _) = over(&e);
        assert_eq!(limit, Limits::default().tree_budget(p.len() as u64));
        assert!(at < 3_000_000, "{e}");
    }
}
