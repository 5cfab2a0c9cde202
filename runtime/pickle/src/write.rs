//! The pickle writer, at protocol 2 or 4, with byte strings streamed from a source.
//!
//! **Protocol 2** (the default) emits only what `torch.load(weights_only=True)` accepts:
//! `PROTO 2`, `BININT1`, `BININT2`, `BININT`, `LONG1`/`LONG4`, `BINFLOAT`, `BINUNICODE`,
//! `NEWTRUE`/`NEWFALSE`, `NONE`, tuples (`EMPTY_TUPLE`, `TUPLE1`-`TUPLE3`,
//! `MARK`..`TUPLE`), `EMPTY_LIST` with `APPEND`/`APPENDS`, `EMPTY_DICT` with
//! `SETITEM`/`SETITEMS`, `GLOBAL`, `REDUCE`, `BUILD`, `BINPERSID`, `BINPUT`/`LONG_BINPUT`
//! and `BINGET`/`LONG_BINGET`, and `STOP`. No `FRAME` and no protocol-3+ opcode: `bytes`
//! are written as `_codecs.encode(str, 'latin1')`, sets as `builtins.set(list)`. Only
//! globals and shared containers are memoized.
//!
//! **Protocol 4** ([`Writer::protocol`]) writes what CPython's `pickle.dumps(value,
//! protocol=4)` writes for the same value: `PROTO 4`, `FRAME`s of about 64 KiB (a byte or
//! text string of 64 KiB or more is written outside any frame, as CPython's framer
//! does), `MEMOIZE` after every string, byte string, non-empty tuple, list, dict, set,
//! global and call, `SHORT_BINUNICODE`/`BINUNICODE`/`BINUNICODE8`, `STACK_GLOBAL`,
//! `SHORT_BINBYTES`/`BINBYTES`/`BINBYTES8`, `EMPTY_SET`/`ADDITEMS`, `FROZENSET`, and
//! `NEWOBJ_EX` for calls with keyword arguments. `APPENDS`, `SETITEMS` and `ADDITEMS` are
//! batched by 1000 items as CPython batches them. A tree of plain values without shared
//! parts pickles byte for byte as CPython pickles it.
//!
//! **Streamed byte strings**: a [`Value::Stream`] in the tree is a byte string of known
//! length whose content a [`Streams`] source writes when the writer reaches it ([`Writer::write_streamed`]): the array data of a pickle of NumPy arrays,
//! written straight from the tensors' payloads. Memory is bounded by the current frame
//! (64 KiB) and a small conversion buffer, never by a stream's length. At protocol 4 a
//! stream is `SHORT_BINBYTES`, `BINBYTES` or (above 4 GiB) `BINBYTES8`, outside frames
//! from 64 KiB on; at protocol 2 it is `_codecs.encode(text, 'latin1')`, the text being
//! the bytes as Latin-1 characters in UTF-8, whose length (which `BINUNICODE` writes
//! first) is counted in a first pass over the stream: the source is asked for each stream
//! twice.

use std::collections::HashMap;
use std::io::Write;
use std::sync::Arc;

use super::read::op;
use super::rules::Kind;
use super::value::{minimal_le, Global, Object, Stream, Value};
use tensorfmt_core::error::{Error, ErrorKind, Location, Result};

/// Python batches `APPENDS`, `SETITEMS` and `ADDITEMS` by this many items.
const BATCH: usize = 1000;

/// CPython's `_FRAME_SIZE_TARGET`: a frame is committed once it holds this many bytes,
/// and a byte or text string this long is written outside any frame.
const FRAME_TARGET: usize = 64 * 1024;

/// Frames shorter than this are written without a `FRAME` opcode (CPython's
/// `_FRAME_SIZE_MIN`).
const FRAME_MIN: usize = 4;

/// Where the bytes of the [`Value::Stream`]s of a tree come from.
///
/// Closures `FnMut(Stream, &mut dyn Write) -> Result<()>` are sources; a source that
/// holds the tensors' payloads writes one with
/// [`Payload::write_to`](tensorfmt_core::registry::Payload::write_to).
pub trait Streams {
    /// Writes exactly `stream.len` bytes of the byte string `stream.index` to `out`. At
    /// protocol 2 the writer asks twice for each stream (once to count, once to write),
    /// and both times must give the same bytes.
    fn write_stream(&mut self, stream: Stream, out: &mut dyn Write) -> Result<()>;
}

impl<F: FnMut(Stream, &mut dyn Write) -> Result<()>> Streams for F {
    fn write_stream(&mut self, stream: Stream, out: &mut dyn Write) -> Result<()> {
        self(stream, out)
    }
}

/// The source of a tree without streams: any stream is an error.
struct NoStreams;

impl Streams for NoStreams {
    fn write_stream(&mut self, stream: Stream, _: &mut dyn Write) -> Result<()> {
        Err(unwritable(format!(
            "byte string {} is streamed, and no source of streams was given",
            stream.index
        )))
    }
}

/// Writes [`Value`]s as pickles of protocol 2 (the default) or 4.
///
/// Globals are memoized (`BINPUT` or `MEMOIZE` on first use, `BINGET` after), as CPython
/// does; so are values whose `Arc` is shared (a DAG stays a DAG), and streams named
/// twice. [`Writer::memoize`] turns all memo opcodes off, which repeats globals and
/// copies shared values instead.
#[derive(Debug, Clone)]
pub struct Writer {
    memoize: bool,
    protocol: u8,
    max_depth: u64,
}

impl Default for Writer {
    fn default() -> Self {
        Writer::new()
    }
}

/// Writes `value` as a protocol-2 pickle (with memoization).
pub fn write(value: &Value) -> Result<Vec<u8>> {
    Writer::new().write(value)
}

/// Writes `value` as a protocol-2 pickle to `w`.
pub fn write_to<W: Write>(value: &Value, w: &mut W) -> Result<()> {
    Writer::new().write_to(value, w)
}

fn unwritable(message: String) -> Error {
    Error::new(
        ErrorKind::Codec {
            codec: super::CODEC,
            message,
        },
        Location::default(),
    )
}

impl Writer {
    /// A protocol-2 writer that memoizes globals and shared values.
    pub fn new() -> Self {
        Writer {
            memoize: true,
            protocol: 2,
            max_depth: tensorfmt_core::limits::Limits::default().max_depth,
        }
    }

    /// The most nesting written (the readers' limit, `Limits::max_depth`, by default): a
    /// value nested deeper, as the reader counts it, is refused before anything is
    /// written, since no reader of pickles under that limit (this crate's included)
    /// would read the file back.
    pub fn max_depth(mut self, levels: u64) -> Self {
        self.max_depth = levels;
        self
    }

    /// Turns memo opcodes on (the default) or off.
    pub fn memoize(mut self, on: bool) -> Self {
        self.memoize = on;
        self
    }

    /// Writes protocol `protocol`: 2 (the default) or 4; writing refuses any other.
    pub fn protocol(mut self, protocol: u8) -> Self {
        self.protocol = protocol;
        self
    }

    /// The pickle of `value`: `PROTO`, the value, `STOP`. A [`Value::Stream`] in it is
    /// an error ([`Writer::write_streamed`] writes those).
    pub fn write(&mut self, value: &Value) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        self.write_streamed(value, &mut out, &mut NoStreams)?;
        Ok(out)
    }

    /// Writes the pickle of `value` to `w`.
    pub fn write_to<W: Write>(&mut self, value: &Value, w: &mut W) -> Result<()> {
        self.write_streamed(value, w, &mut NoStreams)
    }

    /// Writes the pickle of `value` to `w`, each [`Value::Stream`] in it written from
    /// `streams` when the writer reaches it, through buffers of a bounded size.
    pub fn write_streamed<W: Write>(
        &mut self,
        value: &Value,
        w: &mut W,
        streams: &mut dyn Streams,
    ) -> Result<()> {
        if !matches!(self.protocol, 2 | 4) {
            return Err(unwritable(format!(
                "pickle protocol {} is not written (2 or 4 are)",
                self.protocol
            )));
        }
        let depth = height(value, self.protocol >= 4);
        if depth > self.max_depth {
            return Err(Error::from(ErrorKind::Limit {
                what: "pickle nesting depth of the value to write (readers refuse a deeper one)",
                limit: self.max_depth,
                actual: depth,
            }));
        }
        let mut p = Pickler {
            proto4: self.protocol >= 4,
            memoize: self.memoize,
            sink: w,
            streams,
            buf: Vec::new(),
            globals: HashMap::new(),
            names: HashMap::new(),
            shared: HashMap::new(),
            streamed: HashMap::new(),
            next: 0,
        };
        p.sink.write_all(&[0x80, self.protocol])?;
        p.value(value)?;
        p.buf.push(b'.');
        p.commit()?;
        p.sink.flush()?;
        Ok(())
    }
}

/// The nesting height of `value` once pickled, as the reader counts it when it reads it
/// back (its limit on depth applies to this): none for a scalar, one level above its
/// tallest item for a container (a tuple, list, dict, set, call or persistent id), with
/// the containers the writer adds (at protocol 2, a set is a call on a list). Walked
/// without recursion; a value shared through an `Arc` is measured once.
fn height(value: &Value, proto4: bool) -> u64 {
    let mut done: HashMap<usize, u64> = HashMap::new();
    let known = |v: &Value, done: &HashMap<usize, u64>| match address(v) {
        Some(a) => done.get(&a).copied(),
        None => Some(0),
    };
    let mut stack: Vec<(&Value, bool)> = vec![(value, false)];
    while let Some((v, expanded)) = stack.pop() {
        let Some(at) = address(v) else { continue };
        if done.contains_key(&at) {
            continue;
        }
        if expanded {
            // An empty set is still a call on a list at protocol 2.
            let mut h = match v {
                Value::Set(_) | Value::FrozenSet(_) if !proto4 => 2,
                _ => 1,
            };
            parts(v, proto4, &mut |c, above| {
                h = h.max(known(c, &done).unwrap_or(0) + above);
            });
            done.insert(at, h);
        } else {
            stack.push((v, true));
            parts(v, proto4, &mut |c, _| {
                if known(c, &done).is_none() {
                    stack.push((c, false));
                }
            });
        }
    }
    known(value, &done).unwrap_or(0)
}

/// The address of a container's shared contents; `None` for a scalar.
fn address(v: &Value) -> Option<usize> {
    Some(match v {
        Value::Tuple(a) | Value::List(a) | Value::Set(a) | Value::FrozenSet(a) => {
            Arc::as_ptr(a) as *const u8 as usize
        }
        Value::Dict(a) => Arc::as_ptr(a) as *const u8 as usize,
        Value::Object(a) => Arc::as_ptr(a) as *const u8 as usize,
        Value::Persistent(a) => Arc::as_ptr(a) as *const u8 as usize,
        _ => return None,
    })
}

/// Calls `each(item, levels)` for every item of container `v`, with the levels the
/// pickle puts between the container and the item (as [`Pickler::object`] and
/// [`Pickler::set`] write them).
fn parts<'v>(v: &'v Value, proto4: bool, each: &mut dyn FnMut(&'v Value, u64)) {
    let pairs = |e: &'v [(Value, Value)], each: &mut dyn FnMut(&'v Value, u64)| {
        for (k, x) in e {
            each(k, 1);
            each(x, 1);
        }
    };
    match v {
        Value::Tuple(a) | Value::List(a) => a.iter().for_each(|x| each(x, 1)),
        // `builtins.set([items])` at protocol 2: a list inside the call.
        Value::Set(a) | Value::FrozenSet(a) => {
            let levels = if proto4 { 1 } else { 2 };
            a.iter().for_each(|x| each(x, levels));
        }
        Value::Dict(e) => pairs(e, each),
        Value::Persistent(x) => each(x, 1),
        Value::Object(o) => {
            let items_as_arg = matches!(o.kind, Kind::List | Kind::Set | Kind::Tuple)
                && o.args.is_empty()
                && o.kwargs.is_empty();
            // Items given as the call's one argument are a tuple or list inside it.
            let levels = if items_as_arg { 2 } else { 1 };
            o.items.iter().for_each(|x| each(x, levels));
            o.args.iter().for_each(|x| each(x, 1));
            pairs(&o.kwargs, each);
            pairs(&o.entries, each);
            if let Some(state) = &o.state {
                each(state, 1);
            }
        }
        _ => {}
    }
}

/// The opcode and length field that start a byte string of `len` bytes at protocol 4,
/// and whether it is written outside frames (CPython's `save_bytes`).
fn bytes_header(len: u64) -> (Vec<u8>, bool) {
    string_header(len, [op::SHORT_BINBYTES, op::BINBYTES, op::BINBYTES8])
}

/// The opcode and length field that start a text of `len` UTF-8 bytes at protocol 4,
/// and whether it is written outside frames (CPython's `save_str`).
fn str_header(len: u64) -> (Vec<u8>, bool) {
    string_header(len, [op::SHORT_BINUNICODE, op::BINUNICODE, op::BINUNICODE8])
}

/// The header of a string of `len` bytes: the opcode of its length field (`short`: one
/// byte, `long`: four, `long8`: eight) and that field; and whether `len` puts it outside
/// frames.
fn string_header(len: u64, [short, long, long8]: [u8; 3]) -> (Vec<u8>, bool) {
    let large = len >= FRAME_TARGET as u64;
    let mut h = Vec::with_capacity(9);
    if len <= 0xff {
        h.extend_from_slice(&[short, len as u8]);
    } else if let Ok(n) = u32::try_from(len) {
        h.push(long);
        h.extend_from_slice(&n.to_le_bytes());
    } else {
        h.push(long8);
        h.extend_from_slice(&len.to_le_bytes());
    }
    (h, large)
}

/// One pickle being written.
struct Pickler<'a> {
    /// Protocol 4 (else 2).
    proto4: bool,
    memoize: bool,
    sink: &'a mut dyn Write,
    streams: &'a mut dyn Streams,
    /// The current frame (protocol 4) or the bytes not yet written (protocol 2).
    buf: Vec<u8>,
    globals: HashMap<Global, u32>,
    /// Protocol 4: the memo keys of the module and name strings of globals.
    names: HashMap<Arc<str>, u32>,
    /// The memo keys of shared values, by address.
    shared: HashMap<usize, u32>,
    /// The memo keys of streams written, by index.
    streamed: HashMap<usize, u32>,
    next: u32,
}

/// The address and reference count of a shared value, which say whether it is memoized.
type Share = (usize, usize);

/// A value that is not shared.
const ALONE: Share = (0, 1);

fn share<T: ?Sized>(a: &Arc<T>) -> Share {
    (Arc::as_ptr(a).cast::<()>() as usize, Arc::strong_count(a))
}

impl Pickler<'_> {
    /// Writes the current frame (with its `FRAME` opcode at protocol 4, when it is long
    /// enough for one) or the pending bytes.
    fn commit(&mut self) -> Result<()> {
        if self.proto4 && self.buf.len() >= FRAME_MIN {
            let mut head = [op::FRAME; 9];
            head[1..].copy_from_slice(&(self.buf.len() as u64).to_le_bytes());
            self.sink.write_all(&head)?;
        }
        self.sink.write_all(&self.buf)?;
        self.buf.clear();
        Ok(())
    }

    /// Between opcodes: commits the frame once it reached its target size.
    fn boundary(&mut self) -> Result<()> {
        if self.buf.len() >= FRAME_TARGET {
            self.commit()?;
        }
        Ok(())
    }

    /// `BINPUT`/`LONG_BINPUT` of the next memo key (protocol 2).
    fn put(&mut self) -> u32 {
        let k = self.next;
        self.next += 1;
        if k < 256 {
            self.buf.extend_from_slice(&[b'q', k as u8]);
        } else {
            self.buf.push(b'r');
            self.buf.extend_from_slice(&k.to_le_bytes());
        }
        k
    }

    /// The memo opcode of the protocol for the next key.
    fn memo(&mut self) -> u32 {
        if self.proto4 {
            self.buf.push(op::MEMOIZE);
            self.next += 1;
            self.next - 1
        } else {
            self.put()
        }
    }

    fn get(&mut self, k: u32) {
        if k < 256 {
            self.buf.extend_from_slice(&[b'h', k as u8]);
        } else {
            self.buf.push(b'j');
            self.buf.extend_from_slice(&k.to_le_bytes());
        }
    }

    /// Emits `BINGET` and returns true when the value `s` was written already.
    fn seen(&mut self, (ptr, count): Share) -> bool {
        if !self.memoize || count < 2 {
            return false;
        }
        if let Some(&k) = self.shared.get(&ptr) {
            self.get(k);
            return true;
        }
        false
    }

    /// After a memoizable value: at protocol 4 every one gets a memo key (`MEMOIZE`), at
    /// protocol 2 only shared ones (`BINPUT`); shared ones are remembered.
    fn remember(&mut self, (ptr, count): Share) {
        if !self.memoize || (!self.proto4 && count < 2) {
            return;
        }
        let k = self.memo();
        if count >= 2 {
            self.shared.insert(ptr, k);
        }
    }

    fn global(&mut self, g: &Global) -> Result<()> {
        if let Some(&k) = self.globals.get(g) {
            self.get(k);
            return Ok(());
        }
        for part in [&g.module, &g.name] {
            if part.is_empty() || (!self.proto4 && part.contains('\n')) {
                return Err(unwritable(format!(
                    "global '{g}' cannot be written (empty or has a newline)"
                )));
            }
        }
        if self.proto4 {
            for part in [&g.module, &g.name] {
                if let Some(&k) = self.names.get(part) {
                    self.get(k);
                } else {
                    self.str(part)?;
                    if self.memoize {
                        let k = self.memo();
                        self.names.insert(part.clone(), k);
                    }
                }
            }
            self.buf.push(op::STACK_GLOBAL);
        } else {
            self.buf.push(b'c');
            self.buf.extend_from_slice(g.module.as_bytes());
            self.buf.push(b'\n');
            self.buf.extend_from_slice(g.name.as_bytes());
            self.buf.push(b'\n');
        }
        if self.memoize {
            let k = self.memo();
            self.globals.insert(g.clone(), k);
        }
        Ok(())
    }

    fn int(&mut self, v: i64) {
        if (0..=0xff).contains(&v) {
            self.buf.extend_from_slice(&[b'K', v as u8]);
        } else if (0..=0xffff).contains(&v) {
            self.buf.push(b'M');
            self.buf.extend_from_slice(&(v as u16).to_le_bytes());
        } else if let Ok(v) = i32::try_from(v) {
            self.buf.push(b'J');
            self.buf.extend_from_slice(&v.to_le_bytes());
        } else {
            self.long(&minimal_le(&v.to_le_bytes()));
        }
    }

    fn long(&mut self, b: &[u8]) {
        let b = minimal_le(b);
        if b.len() < 256 {
            self.buf.extend_from_slice(&[0x8a, b.len() as u8]);
        } else {
            self.buf.push(0x8b);
            self.buf.extend_from_slice(&(b.len() as u32).to_le_bytes());
        }
        self.buf.extend_from_slice(&b);
    }

    /// A string's opcode and bytes (without memo).
    fn str(&mut self, s: &str) -> Result<()> {
        if self.proto4 {
            let (head, large) = str_header(s.len() as u64);
            return self.string(&head, s.as_bytes(), large);
        }
        let n = u32::try_from(s.len())
            .map_err(|_| unwritable("a string longer than 4 GiB needs protocol 4".into()))?;
        self.buf.push(b'X');
        self.buf.extend_from_slice(&n.to_le_bytes());
        self.buf.extend_from_slice(s.as_bytes());
        Ok(())
    }

    /// A byte or text string at protocol 4: in the frame, or (when `large`) the frame
    /// committed and the string written outside any.
    fn string(&mut self, head: &[u8], data: &[u8], large: bool) -> Result<()> {
        if large {
            self.commit()?;
            self.sink.write_all(head)?;
            self.sink.write_all(data)?;
        } else {
            self.buf.extend_from_slice(head);
            self.buf.extend_from_slice(data);
        }
        Ok(())
    }

    fn bytes(&mut self, b: &[u8]) -> Result<()> {
        if self.proto4 {
            let (head, large) = bytes_header(b.len() as u64);
            return self.string(&head, b, large);
        }
        self.global(&Global::new("_codecs", "encode"))?;
        let latin1: String = b.iter().map(|&c| c as char).collect();
        self.str(&latin1)?;
        self.str("latin1")?;
        self.buf.extend_from_slice(&[0x86, b'R']);
        Ok(())
    }

    /// A byte string written from the source, memoized by its index.
    fn stream(&mut self, s: Stream) -> Result<()> {
        if self.memoize {
            if let Some(&k) = self.streamed.get(&s.index) {
                self.get(k);
                return Ok(());
            }
        }
        if self.proto4 {
            let (head, large) = bytes_header(s.len);
            let out: &mut dyn Write = if large {
                self.commit()?;
                self.sink.write_all(&head)?;
                &mut *self.sink
            } else {
                self.buf.extend_from_slice(&head);
                &mut self.buf
            };
            write_exact(self.streams, s, out)?;
        } else {
            self.latin1_stream(s)?;
        }
        if self.memoize {
            let k = self.memo();
            self.streamed.insert(s.index, k);
        }
        Ok(())
    }

    /// Protocol 2: `_codecs.encode(text, 'latin1')` of a stream, its UTF-8 length counted
    /// in a first pass.
    fn latin1_stream(&mut self, s: Stream) -> Result<()> {
        let mut count = High(0);
        write_exact(self.streams, s, &mut count)?;
        let utf8 = s.len + count.0;
        let n = u32::try_from(utf8).map_err(|_| {
            unwritable(format!(
                "byte string {} is {utf8} bytes as latin-1 text, over the 4 GiB of protocol 2",
                s.index
            ))
        })?;
        self.global(&Global::new("_codecs", "encode"))?;
        self.buf.push(b'X');
        self.buf.extend_from_slice(&n.to_le_bytes());
        let mut text = if n as usize >= FRAME_TARGET {
            self.commit()?;
            Latin1::new(&mut *self.sink as &mut dyn Write)
        } else {
            Latin1::new(&mut self.buf as &mut dyn Write)
        };
        write_exact(self.streams, s, &mut text)?;
        text.flush_all()?;
        if text.high != count.0 {
            return Err(unwritable(format!(
                "byte string {} changed between the two passes of protocol 2",
                s.index
            )));
        }
        self.str("latin1")?;
        self.buf.extend_from_slice(&[0x86, b'R']);
        Ok(())
    }

    fn tuple(&mut self, items: &[Value], s: Share) -> Result<()> {
        match items.len() {
            0 => {
                self.buf.push(b')');
                return Ok(());
            }
            1..=3 => {
                for v in items {
                    self.value(v)?;
                }
                self.buf.push(0x85 + items.len() as u8 - 1);
            }
            _ => self.marked(items, b't')?,
        }
        self.remember(s);
        Ok(())
    }

    /// The items of a list: one `APPEND` for a list of one item, else batches of
    /// `MARK`..`APPENDS` (CPython's `batch_list_exact`).
    fn appends(&mut self, items: &[Value]) -> Result<()> {
        if items.len() == 1 {
            return self.batch(items, b'a', b'e');
        }
        for chunk in items.chunks(BATCH) {
            self.marked(chunk, b'e')?;
        }
        Ok(())
    }

    /// One item and `one`, or `MARK`, the items and `many`.
    fn batch(&mut self, items: &[Value], one: u8, many: u8) -> Result<()> {
        if let [v] = items {
            self.value(v)?;
            self.buf.push(one);
            return Ok(());
        }
        self.marked(items, many)
    }

    /// `MARK`, the items, `op`.
    fn marked(&mut self, items: &[Value], op: u8) -> Result<()> {
        self.buf.push(b'(');
        for v in items {
            self.value(v)?;
        }
        self.buf.push(op);
        Ok(())
    }

    /// What later opcodes add to a call's result, at protocol 4 batched as CPython
    /// batches items it iterates (`batch_list`, `batch_dict`: a batch of one is
    /// `APPEND`/`SETITEM`); at protocol 2 as a list's or dict's.
    fn added(&mut self, items: &[Value], entries: &[(Value, Value)]) -> Result<()> {
        if !self.proto4 {
            if !items.is_empty() {
                self.appends(items)?;
            }
            if !entries.is_empty() {
                self.setitems(entries)?;
            }
            return Ok(());
        }
        for chunk in items.chunks(BATCH) {
            self.batch(chunk, b'a', b'e')?;
        }
        for chunk in entries.chunks(BATCH) {
            self.pair_batch(chunk)?;
        }
        Ok(())
    }

    /// One entry and `SETITEM`, or `MARK`, the entries and `SETITEMS`.
    fn pair_batch(&mut self, entries: &[(Value, Value)]) -> Result<()> {
        if let [(k, v)] = entries {
            self.value(k)?;
            self.value(v)?;
            self.buf.push(b's');
            return Ok(());
        }
        self.pairs(entries)
    }

    /// `MARK`, the keys and values, `SETITEMS`.
    fn pairs(&mut self, entries: &[(Value, Value)]) -> Result<()> {
        self.buf.push(b'(');
        for (k, v) in entries {
            self.value(k)?;
            self.value(v)?;
        }
        self.buf.push(b'u');
        Ok(())
    }

    /// The entries of a dict: one `SETITEM` for a dict of one entry, else batches of
    /// `MARK`..`SETITEMS`; at protocol 4, as CPython's `batch_dict_exact`, an empty
    /// batch after a last full one.
    fn setitems(&mut self, entries: &[(Value, Value)]) -> Result<()> {
        if entries.len() == 1 {
            return self.pair_batch(entries);
        }
        for chunk in entries.chunks(BATCH) {
            self.pairs(chunk)?;
        }
        if self.proto4 && entries.len() % BATCH == 0 {
            self.buf.extend_from_slice(b"(u");
        }
        Ok(())
    }

    /// A set or frozenset: `builtins.<name>([items])` at protocol 2; `EMPTY_SET` with
    /// `ADDITEMS` batches, or `MARK` items `FROZENSET`, at protocol 4.
    fn set(&mut self, items: &[Value], frozen: bool, s: Share) -> Result<()> {
        if !self.proto4 {
            let name = if frozen { "frozenset" } else { "set" };
            self.global(&Global::new("builtins", name))?;
            self.list(items, ALONE)?;
            self.buf.extend_from_slice(&[0x85, b'R']);
            self.remember(s);
            return Ok(());
        }
        if frozen {
            self.marked(items, op::FROZENSET)?;
            self.remember(s);
            return Ok(());
        }
        // CPython's `save_set`: batches of `MARK`..`ADDITEMS`, an empty one after a last
        // full one.
        self.buf.push(op::EMPTY_SET);
        self.remember(s);
        for chunk in items.chunks(BATCH) {
            self.marked(chunk, op::ADDITEMS)?;
        }
        if !items.is_empty() && items.len() % BATCH == 0 {
            self.buf.extend_from_slice(&[b'(', op::ADDITEMS]);
        }
        Ok(())
    }

    fn list(&mut self, items: &[Value], s: Share) -> Result<()> {
        self.buf.push(b']');
        self.remember(s);
        if !items.is_empty() {
            self.appends(items)?;
        }
        Ok(())
    }

    fn dict(&mut self, entries: &[(Value, Value)], s: Share) -> Result<()> {
        self.buf.push(b'}');
        self.remember(s);
        if !entries.is_empty() {
            self.setitems(entries)?;
        }
        Ok(())
    }

    /// A call: the global, its arguments and `REDUCE` (`NEWOBJ_EX` with keyword
    /// arguments, protocol 4 only), then what later opcodes add. A list-, set- or
    /// tuple-kind call without arguments takes its items as its one argument.
    fn object(&mut self, o: &Object, s: Share) -> Result<()> {
        if !o.kwargs.is_empty() && !self.proto4 {
            return Err(unwritable(format!(
                "a call of '{}' with keyword arguments cannot be written in protocol 2",
                o.global
            )));
        }
        self.global(&o.global)?;
        let items_as_arg = matches!(o.kind, Kind::List | Kind::Set | Kind::Tuple)
            && o.args.is_empty()
            && o.kwargs.is_empty();
        if items_as_arg {
            if o.items.is_empty() {
                self.buf.push(b')');
            } else {
                if o.kind == Kind::Tuple {
                    self.tuple(&o.items, ALONE)?;
                } else {
                    self.list(&o.items, ALONE)?;
                }
                self.buf.push(0x85);
                self.remember(ALONE);
            }
            self.buf.push(b'R');
        } else {
            self.tuple(&o.args, ALONE)?;
            if o.kwargs.is_empty() {
                // An instance whose state `BUILD` sets is made as CPython makes one of a
                // class it pickles by its state (`copyreg.__newobj__`): `cls.__new__`
                // (`NEWOBJ`), without running its `__init__`.
                self.buf.push(if o.kind == Kind::Object {
                    op::NEWOBJ
                } else {
                    b'R'
                });
            } else {
                self.dict(&o.kwargs, ALONE)?;
                self.buf.push(op::NEWOBJ_EX);
            }
        }
        // CPython memoizes a call's result before what later opcodes add to it.
        if self.proto4 {
            self.remember(s);
        }
        let items: &[Value] = if items_as_arg { &[] } else { &o.items };
        self.added(items, &o.entries)?;
        if let Some(state) = &o.state {
            self.value(state)?;
            self.buf.push(b'b');
        }
        if !self.proto4 {
            self.remember(s);
        }
        Ok(())
    }

    fn value(&mut self, v: &Value) -> Result<()> {
        self.boundary()?;
        match v {
            Value::None => self.buf.push(b'N'),
            Value::Bool(true) => self.buf.push(0x88),
            Value::Bool(false) => self.buf.push(0x89),
            Value::Int(i) => self.int(*i),
            Value::BigInt(b) => self.long(b),
            Value::Float(f) => {
                self.buf.push(b'G');
                self.buf.extend_from_slice(&f.to_be_bytes());
            }
            Value::Str(s) if self.proto4 => {
                if !self.seen(share(s)) {
                    self.str(s)?;
                    self.remember(share(s));
                }
            }
            Value::Str(s) => self.str(s)?,
            Value::Bytes(b) if self.proto4 => {
                if !self.seen(share(b)) {
                    self.bytes(b)?;
                    self.remember(share(b));
                }
            }
            Value::Bytes(b) => self.bytes(b)?,
            Value::Stream(s) => self.stream(*s)?,
            Value::Global(g) => self.global(g)?,
            Value::Range(_) => {
                return Err(Error::from(ErrorKind::Unsupported(
                    "a byte string left in the pickle it was read from cannot be written".into(),
                )))
            }
            Value::Persistent(p) => {
                self.value(p)?;
                self.buf.push(b'Q');
            }
            Value::Tuple(t) => {
                if !self.seen(share(t)) {
                    self.tuple(t, share(t))?;
                }
            }
            Value::List(l) => {
                if !self.seen(share(l)) {
                    self.list(l, share(l))?;
                }
            }
            Value::Dict(d) => {
                if !self.seen(share(d)) {
                    self.dict(d, share(d))?;
                }
            }
            Value::Set(s) | Value::FrozenSet(s) => {
                if !self.seen(share(s)) {
                    self.set(s, matches!(v, Value::FrozenSet(_)), share(s))?;
                }
            }
            Value::Object(o) => {
                if !self.seen(share(o)) {
                    self.object(o, share(o))?;
                }
            }
        }
        Ok(())
    }
}

/// Passes on what a source writes for one stream, refusing more than its length; `done`
/// refuses less.
struct Exact<'a> {
    out: &'a mut dyn Write,
    stream: Stream,
    left: u64,
}

impl<'a> Exact<'a> {
    fn new(out: &'a mut dyn Write, stream: Stream) -> Self {
        Exact {
            out,
            stream,
            left: stream.len,
        }
    }

    fn done(&self) -> Result<()> {
        if self.left == 0 {
            return Ok(());
        }
        Err(Error::from(ErrorKind::SizeMismatch(format!(
            "byte string {}: {} bytes expected, {} given",
            self.stream.index,
            self.stream.len,
            self.stream.len - self.left
        ))))
    }
}

impl Write for Exact<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if buf.len() as u64 > self.left {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "byte string {}: more than its {} bytes given",
                    self.stream.index, self.stream.len
                ),
            ));
        }
        let n = self.out.write(buf)?;
        self.left -= n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

/// Has `streams` write the stream `s` to `out`: exactly its length, else an error.
fn write_exact(streams: &mut dyn Streams, s: Stream, out: &mut dyn Write) -> Result<()> {
    let mut out = Exact::new(out, s);
    streams.write_stream(s, &mut out)?;
    out.done()
}

/// Counts the bytes from 0x80 on written to it: the first pass over a stream at
/// protocol 2.
struct High(u64);

impl Write for High {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.iter().filter(|&&b| b >= 0x80).count() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Writes bytes as Latin-1 characters in UTF-8 (each byte from 0x80 on becomes two),
/// through a fixed buffer, counting those bytes.
struct Latin1<W: Write> {
    out: W,
    high: u64,
    scratch: Vec<u8>,
}

/// The conversion buffer of [`Latin1`].
const LATIN1_BUFFER: usize = 16 * 1024;

impl<W: Write> Latin1<W> {
    fn new(out: W) -> Self {
        Latin1 {
            out,
            high: 0,
            scratch: Vec::with_capacity(LATIN1_BUFFER),
        }
    }

    fn flush_all(&mut self) -> std::io::Result<()> {
        self.out.write_all(&self.scratch)?;
        self.scratch.clear();
        Ok(())
    }
}

impl<W: Write> Write for Latin1<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        for &b in buf {
            if self.scratch.len() + 2 > LATIN1_BUFFER {
                self.flush_all()?;
            }
            if b < 0x80 {
                self.scratch.push(b);
            } else {
                self.high += 1;
                self.scratch
                    .extend_from_slice(&[0xc0 | (b >> 6), 0x80 | (b & 0x3f)]);
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.flush_all()?;
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_string_opcodes_by_length() {
        let op = |n: u64| bytes_header(n).0[0];
        assert_eq!(op(0), op::SHORT_BINBYTES);
        assert_eq!(op(255), op::SHORT_BINBYTES);
        assert_eq!(op(256), op::BINBYTES);
        assert_eq!(op(u32::MAX as u64), op::BINBYTES);
        assert_eq!(op(u32::MAX as u64 + 1), op::BINBYTES8);
        assert_eq!(
            bytes_header(u32::MAX as u64 + 1).0[1..],
            (u32::MAX as u64 + 1).to_le_bytes()
        );
        assert!(!bytes_header(FRAME_TARGET as u64 - 1).1);
        assert!(bytes_header(FRAME_TARGET as u64).1);
        let sop = |n: u64| str_header(n).0[0];
        assert_eq!(sop(255), op::SHORT_BINUNICODE);
        assert_eq!(sop(256), b'X');
        assert_eq!(sop(u32::MAX as u64 + 1), op::BINUNICODE8);
    }

    fn v4(v: &Value) -> Vec<u8> {
        Writer::new().protocol(4).write(v).unwrap()
    }

    /// Values nested `n` levels through each kind of container, at the levels the reader
    /// counts: what the writer measures, the reader reads back at the same limit.
    #[test]
    fn nesting_is_measured_as_the_reader_counts_it() {
        use tensorfmt_core::limits::Limits;
        let rules = crate::Rules::new()
            .allow_codecs_encode()
            .allow("builtins", "set", Kind::Set)
            .allow("m", "C", Kind::Object)
            .allow("collections", "OrderedDict", Kind::Dict);
        let wrap: [&dyn Fn(Value) -> Value; 6] = [
            &|v| Value::list(vec![v]),
            &|v| Value::dict(vec![(Value::str("k"), v)]),
            &|v| Value::tuple(vec![Value::Int(1), v]),
            &|v| Value::Set(vec![Value::tuple(vec![v])].into()),
            &|v| {
                Value::object(
                    Object::new(Global::new("m", "C"), Kind::Object)
                        .with_state(Value::dict(vec![(Value::str("a"), v)])),
                )
            },
            &|v| {
                let mut o = Object::new(Global::new("collections", "OrderedDict"), Kind::Dict);
                o.entries.push((Value::str("k"), v));
                Value::object(o)
            },
        ];
        for proto in [2u8, 4] {
            for (i, w) in wrap.iter().enumerate() {
                let mut v = Value::Bytes(vec![1u8].into());
                for _ in 0..20 {
                    v = w(v);
                }
                let h = height(&v, proto == 4);
                let at = |limit: u64| {
                    let limits = Limits {
                        max_depth: limit,
                        ..Limits::default()
                    };
                    let b = Writer::new().protocol(proto).max_depth(limit).write(&v);
                    let read = b
                        .as_ref()
                        .ok()
                        .map(|b| super::super::read(b, &rules, &limits));
                    (b.is_ok(), read.map(|r| r.is_ok()))
                };
                assert_eq!(at(h), (true, Some(true)), "protocol {proto}, kind {i}");
                assert_eq!(at(h - 1), (false, None), "protocol {proto}, kind {i}");
                // The least limit the reader reads it under: never more than the writer
                // measured (what is written reads back), and the same but for a set at
                // protocol 2, a call on a list that the writer counts as two levels and
                // the reader, but for the outermost, as one.
                let b = Writer::new().protocol(proto).write(&v).unwrap();
                let least = (0..=h)
                    .find(|&l| {
                        let limits = Limits {
                            max_depth: l,
                            ..Limits::default()
                        };
                        super::super::read(&b, &rules, &limits).is_ok()
                    })
                    .unwrap();
                let set_at_2 = proto == 2 && i == 3;
                assert!(
                    least == h || (set_at_2 && least < h),
                    "protocol {proto}, kind {i}: {least} read, {h} measured"
                );
            }
        }
        // Deeper than the default limit: refused before anything is written.
        let mut v = Value::None;
        for _ in 0..200 {
            v = Value::list(vec![v]);
        }
        let e = Writer::new().write(&v).unwrap_err().to_string();
        assert!(e.contains("nesting depth") && e.contains("200"), "{e}");
    }

    /// The frames of a protocol-4 pickle after `PROTO 4`: (offset of the frame's data,
    /// its length), walking from frame to frame, and the bytes outside frames skipped by
    /// `outside` (a byte string's header and data) until the next `FRAME`.
    fn frames(b: &[u8]) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        let mut i = 2;
        while i < b.len() && b[i] == op::FRAME {
            let n = u64::from_le_bytes(b[i + 1..i + 9].try_into().unwrap()) as usize;
            out.push((i + 9, n));
            i += 9 + n;
        }
        out
    }

    #[test]
    fn small_pickles_have_no_frame_opcode() {
        assert_eq!(v4(&Value::None), b"\x80\x04N.");
        assert_eq!(v4(&Value::Int(1)), b"\x80\x04K\x01.");
        // Four bytes and more are a frame.
        assert_eq!(
            v4(&Value::Int(256)),
            b"\x80\x04\x95\x04\0\0\0\0\0\0\0M\x00\x01."
        );
    }

    #[test]
    fn frames_are_committed_at_their_target_between_opcodes() {
        let v = Value::list((0..40_000).map(|i| Value::Int(i + 70_000)).collect());
        let b = v4(&v);
        let f = frames(&b);
        assert!(f.len() >= 3, "{f:?}");
        // Every frame but the last reaches the target and overshoots it by less than one
        // item; the frames cover the pickle.
        for &(_, n) in &f[..f.len() - 1] {
            assert!((FRAME_TARGET..FRAME_TARGET + 8).contains(&n), "{n}");
        }
        let (start, n) = f[f.len() - 1];
        assert_eq!(start + n, b.len());
        assert_eq!(b[b.len() - 1], b'.');
    }

    #[test]
    fn large_byte_strings_are_outside_frames() {
        let big: Arc<[u8]> = vec![7u8; FRAME_TARGET].into();
        let small: Arc<[u8]> = vec![8u8; FRAME_TARGET - 1].into();
        let v = Value::list(vec![Value::Bytes(small), Value::Bytes(big)]);
        let b = v4(&v);
        // FRAME [ ] MEMOIZE MARK BINBYTES small MEMOIZE ], then BINBYTES big unframed,
        // then a frame of MEMOIZE APPENDS STOP.
        let f = frames(&b);
        assert_eq!(f.len(), 1);
        let (start, n) = f[0];
        assert_eq!(&b[start..start + 8], b"]\x94(B\xff\xff\x00\x00");
        let after = start + n;
        assert_eq!(b[after], op::BINBYTES);
        assert_eq!(
            &b[after + 1..after + 5],
            &(FRAME_TARGET as u32).to_le_bytes()
        );
        let rest = after + 5 + FRAME_TARGET;
        assert_eq!(&b[rest..], b"\x94e.");
    }

    /// A source of `len` bytes `i as u8` for stream `i`, written in pieces.
    fn pattern(s: Stream, out: &mut dyn Write) -> Result<()> {
        let piece = vec![s.index as u8; 1000];
        let mut left = s.len;
        while left > 0 {
            let n = left.min(1000) as usize;
            out.write_all(&piece[..n])?;
            left -= n as u64;
        }
        Ok(())
    }

    #[test]
    fn streams_are_written_as_byte_strings_would_be() {
        for len in [
            0u64,
            5,
            300,
            FRAME_TARGET as u64 - 1,
            FRAME_TARGET as u64,
            200_000,
        ] {
            for index in [3usize, 0xc5] {
                let tree = |data: Value| Value::dict(vec![(Value::str("w"), data)]);
                let bytes = Value::Bytes(vec![index as u8; len as usize].into());
                for proto in [2, 4] {
                    let mut w = Writer::new().protocol(proto);
                    let want = w.write(&tree(bytes.clone())).unwrap();
                    let mut got = Vec::new();
                    let mut src = pattern;
                    w.write_streamed(&tree(Value::stream(index, len)), &mut got, &mut src)
                        .unwrap();
                    if proto == 2 {
                        // Streams are memoized (BINPUT after their REDUCE).
                        assert_eq!(got[..got.len() - 4], want[..want.len() - 2], "{len}");
                        assert_eq!(&got[got.len() - 4..], b"q\x01s.");
                    } else {
                        assert_eq!(got, want, "{len} {proto}");
                    }
                }
            }
        }
    }

    #[test]
    fn a_stream_named_twice_is_written_once() {
        let v = Value::list(vec![Value::stream(1, 10), Value::stream(1, 10)]);
        for proto in [2, 4] {
            let mut calls = 0;
            let mut src = |s: Stream, out: &mut dyn Write| {
                calls += 1;
                pattern(s, out)
            };
            let mut out = Vec::new();
            Writer::new()
                .protocol(proto)
                .write_streamed(&v, &mut out, &mut src)
                .unwrap();
            // Protocol 2 asks twice (count, then write).
            assert_eq!(calls, if proto == 2 { 2 } else { 1 });
        }
    }

    #[test]
    fn streams_of_the_wrong_length_and_missing_sources_are_errors() {
        let v = Value::list(vec![Value::stream(0, 10)]);
        for proto in [2, 4] {
            let mut w = Writer::new().protocol(proto);
            let mut short = |_: Stream, out: &mut dyn Write| Ok(out.write_all(&[1; 9])?);
            let e = w
                .write_streamed(&v, &mut Vec::new(), &mut short)
                .unwrap_err();
            assert!(e.to_string().contains("10 bytes expected, 9 given"), "{e}");
            let mut long = |_: Stream, out: &mut dyn Write| Ok(out.write_all(&[1; 11])?);
            let e = w
                .write_streamed(&v, &mut Vec::new(), &mut long)
                .unwrap_err();
            assert!(e.to_string().contains("more than its 10 bytes"), "{e}");
            let e = w.write(&v).unwrap_err();
            assert!(e.to_string().contains("no source of streams"), "{e}");
        }
        let mut flip = 0u8;
        let mut changing = |_: Stream, out: &mut dyn Write| {
            flip ^= 0x80;
            Ok(out.write_all(&[flip; 10])?)
        };
        let e = Writer::new()
            .write_streamed(&v, &mut Vec::new(), &mut changing)
            .unwrap_err();
        assert!(
            e.to_string().contains("changed between the two passes"),
            "{e}"
        );
        let e = Writer::new().protocol(3).write(&Value::None).unwrap_err();
        assert!(e.to_string().contains("protocol 3"), "{e}");
    }
}
