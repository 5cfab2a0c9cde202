//! The protocol-2 pickle writer.
//!
//! It emits only what `torch.load(weights_only=True)` accepts: `PROTO 2`, `BININT1`,
//! `BININT2`, `BININT`, `LONG1`/`LONG4`, `BINFLOAT`, `BINUNICODE`, `NEWTRUE`/`NEWFALSE`,
//! `NONE`, tuples (`EMPTY_TUPLE`, `TUPLE1`-`TUPLE3`, `MARK`..`TUPLE`), `EMPTY_LIST` with
//! `APPEND`/`APPENDS`, `EMPTY_DICT` with `SETITEM`/`SETITEMS`, `GLOBAL`, `REDUCE`,
//! `BUILD`, `BINPERSID`, `BINPUT`/`LONG_BINPUT` and `BINGET`/`LONG_BINGET`, and `STOP`.
//! No `FRAME` and no protocol-3+ opcode: `bytes` are written as
//! `_codecs.encode(str, 'latin1')`, sets as `builtins.set(list)`.

use std::collections::HashMap;
use std::io::Write;
use std::sync::Arc;

use super::rules::Kind;
use super::value::{minimal_le, Global, Object, Value};
use tensorfmt_core::error::{Error, ErrorKind, Location, Result};

/// Python batches `APPENDS` and `SETITEMS` by this many items.
const BATCH: usize = 1000;

/// Writes [`Value`]s as protocol-2 pickles.
///
/// Globals are memoized (`BINPUT` on first use, `BINGET` after), as CPython does; so are
/// containers whose `Arc` is shared (a DAG stays a DAG). [`Writer::memoize`] turns both
/// off, which repeats globals and copies shared containers instead.
#[derive(Debug, Clone)]
pub struct Writer {
    memoize: bool,
    out: Vec<u8>,
    globals: HashMap<Global, u32>,
    shared: HashMap<usize, u32>,
    next: u32,
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
    /// A writer that memoizes globals and shared containers.
    pub fn new() -> Self {
        Writer {
            memoize: true,
            out: Vec::new(),
            globals: HashMap::new(),
            shared: HashMap::new(),
            next: 0,
        }
    }

    /// Turns memo opcodes on (the default) or off.
    pub fn memoize(mut self, on: bool) -> Self {
        self.memoize = on;
        self
    }

    /// The pickle of `value`: `PROTO 2`, the value, `STOP`.
    pub fn write(&mut self, value: &Value) -> Result<Vec<u8>> {
        self.out.clear();
        self.globals.clear();
        self.shared.clear();
        self.next = 0;
        self.out.extend_from_slice(&[0x80, 2]);
        self.value(value)?;
        self.out.push(b'.');
        Ok(std::mem::take(&mut self.out))
    }

    /// Writes the pickle of `value` to `w`.
    pub fn write_to<W: Write>(&mut self, value: &Value, w: &mut W) -> Result<()> {
        let bytes = self.write(value)?;
        w.write_all(&bytes)?;
        Ok(())
    }

    fn put(&mut self) -> u32 {
        let k = self.next;
        self.next += 1;
        if k < 256 {
            self.out.extend_from_slice(&[b'q', k as u8]);
        } else {
            self.out.push(b'r');
            self.out.extend_from_slice(&k.to_le_bytes());
        }
        k
    }

    fn get(&mut self, k: u32) {
        if k < 256 {
            self.out.extend_from_slice(&[b'h', k as u8]);
        } else {
            self.out.push(b'j');
            self.out.extend_from_slice(&k.to_le_bytes());
        }
    }

    /// Emits `BINGET` and returns true when the container at `ptr` was written already;
    /// else remembers that the next `put` is for it, when it is shared.
    fn seen(&mut self, ptr: usize, count: usize) -> bool {
        if !self.memoize || count < 2 {
            return false;
        }
        if let Some(&k) = self.shared.get(&ptr) {
            self.get(k);
            return true;
        }
        false
    }

    fn remember(&mut self, ptr: usize, count: usize) {
        if self.memoize && count >= 2 {
            let k = self.put();
            self.shared.insert(ptr, k);
        }
    }

    fn global(&mut self, g: &Global) -> Result<()> {
        if let Some(&k) = self.globals.get(g) {
            self.get(k);
            return Ok(());
        }
        for part in [&g.module, &g.name] {
            if part.contains('\n') || part.is_empty() {
                return Err(unwritable(format!(
                    "global '{g}' cannot be written (empty or has a newline)"
                )));
            }
        }
        self.out.push(b'c');
        self.out.extend_from_slice(g.module.as_bytes());
        self.out.push(b'\n');
        self.out.extend_from_slice(g.name.as_bytes());
        self.out.push(b'\n');
        if self.memoize {
            let k = self.put();
            self.globals.insert(g.clone(), k);
        }
        Ok(())
    }

    fn int(&mut self, v: i64) {
        if (0..=0xff).contains(&v) {
            self.out.extend_from_slice(&[b'K', v as u8]);
        } else if (0..=0xffff).contains(&v) {
            self.out.push(b'M');
            self.out.extend_from_slice(&(v as u16).to_le_bytes());
        } else if let Ok(v) = i32::try_from(v) {
            self.out.push(b'J');
            self.out.extend_from_slice(&v.to_le_bytes());
        } else {
            self.long(&minimal_le(&v.to_le_bytes()));
        }
    }

    fn long(&mut self, b: &[u8]) {
        let b = minimal_le(b);
        if b.len() < 256 {
            self.out.extend_from_slice(&[0x8a, b.len() as u8]);
        } else {
            self.out.push(0x8b);
            self.out.extend_from_slice(&(b.len() as u32).to_le_bytes());
        }
        self.out.extend_from_slice(&b);
    }

    fn str(&mut self, s: &str) -> Result<()> {
        let n = u32::try_from(s.len())
            .map_err(|_| unwritable("a string longer than 4 GiB needs protocol 4".into()))?;
        self.out.push(b'X');
        self.out.extend_from_slice(&n.to_le_bytes());
        self.out.extend_from_slice(s.as_bytes());
        Ok(())
    }

    fn tuple(&mut self, items: &[Value]) -> Result<()> {
        match items.len() {
            0 => self.out.push(b')'),
            1..=3 => {
                for v in items {
                    self.value(v)?;
                }
                self.out.push(0x85 + items.len() as u8 - 1);
            }
            _ => {
                self.out.push(b'(');
                for v in items {
                    self.value(v)?;
                }
                self.out.push(b't');
            }
        }
        Ok(())
    }

    fn appends(&mut self, items: &[Value]) -> Result<()> {
        if items.len() == 1 {
            self.value(&items[0])?;
            self.out.push(b'a');
            return Ok(());
        }
        for chunk in items.chunks(BATCH) {
            self.out.push(b'(');
            for v in chunk {
                self.value(v)?;
            }
            self.out.push(b'e');
        }
        Ok(())
    }

    fn setitems(&mut self, entries: &[(Value, Value)]) -> Result<()> {
        if entries.len() == 1 {
            self.value(&entries[0].0)?;
            self.value(&entries[0].1)?;
            self.out.push(b's');
            return Ok(());
        }
        for chunk in entries.chunks(BATCH) {
            self.out.push(b'(');
            for (k, v) in chunk {
                self.value(k)?;
                self.value(v)?;
            }
            self.out.push(b'u');
        }
        Ok(())
    }

    /// `GLOBAL builtins.<name>` + `(list,)` + `REDUCE`.
    fn builtin_of_list(&mut self, name: &str, items: &[Value]) -> Result<()> {
        self.global(&Global::new("builtins", name))?;
        self.out.push(b']');
        if !items.is_empty() {
            self.appends(items)?;
        }
        self.out.extend_from_slice(&[0x85, b'R']);
        Ok(())
    }

    fn object(&mut self, o: &Object) -> Result<()> {
        if !o.kwargs.is_empty() {
            return Err(unwritable(format!(
                "a call of '{}' with keyword arguments cannot be written in protocol 2",
                o.global
            )));
        }
        self.global(&o.global)?;
        match &o.kind {
            Kind::List | Kind::Set | Kind::Tuple if o.args.is_empty() => {
                if o.items.is_empty() {
                    self.out.push(b')');
                } else {
                    if o.kind == Kind::Tuple {
                        self.tuple(&o.items)?;
                    } else {
                        self.out.push(b']');
                        self.appends(&o.items)?;
                    }
                    self.out.push(0x85);
                }
                self.out.push(b'R');
            }
            _ => {
                self.tuple(&o.args)?;
                self.out.push(b'R');
                if !o.items.is_empty() {
                    self.appends(&o.items)?;
                }
            }
        }
        if !o.entries.is_empty() {
            self.setitems(&o.entries)?;
        }
        if let Some(s) = &o.state {
            self.value(s)?;
            self.out.push(b'b');
        }
        Ok(())
    }

    fn value(&mut self, v: &Value) -> Result<()> {
        match v {
            Value::None => self.out.push(b'N'),
            Value::Bool(true) => self.out.push(0x88),
            Value::Bool(false) => self.out.push(0x89),
            Value::Int(i) => self.int(*i),
            Value::BigInt(b) => self.long(b),
            Value::Float(f) => {
                self.out.push(b'G');
                self.out.extend_from_slice(&f.to_be_bytes());
            }
            Value::Str(s) => self.str(s)?,
            Value::Bytes(b) => {
                self.global(&Global::new("_codecs", "encode"))?;
                let latin1: String = b.iter().map(|&c| c as char).collect();
                self.str(&latin1)?;
                self.str("latin1")?;
                self.out.extend_from_slice(&[0x86, b'R']);
            }
            Value::Global(g) => self.global(g)?,
            Value::Range(_) => {
                return Err(Error::from(ErrorKind::Unsupported(
                    "a byte string left in the pickle it was read from cannot be written".into(),
                )))
            }
            Value::Persistent(p) => {
                self.value(p)?;
                self.out.push(b'Q');
            }
            Value::Tuple(t) => {
                let (ptr, n) = (Arc::as_ptr(t).cast::<()>() as usize, Arc::strong_count(t));
                if !self.seen(ptr, n) {
                    self.tuple(t)?;
                    self.remember(ptr, n);
                }
            }
            Value::List(l) => {
                let (ptr, n) = (Arc::as_ptr(l).cast::<()>() as usize, Arc::strong_count(l));
                if !self.seen(ptr, n) {
                    self.out.push(b']');
                    self.remember(ptr, n);
                    if !l.is_empty() {
                        self.appends(l)?;
                    }
                }
            }
            Value::Dict(d) => {
                let (ptr, n) = (Arc::as_ptr(d).cast::<()>() as usize, Arc::strong_count(d));
                if !self.seen(ptr, n) {
                    self.out.push(b'}');
                    self.remember(ptr, n);
                    if !d.is_empty() {
                        self.setitems(d)?;
                    }
                }
            }
            Value::Set(s) | Value::FrozenSet(s) => {
                let (ptr, n) = (Arc::as_ptr(s).cast::<()>() as usize, Arc::strong_count(s));
                if !self.seen(ptr, n) {
                    let name = if matches!(v, Value::Set(_)) {
                        "set"
                    } else {
                        "frozenset"
                    };
                    self.builtin_of_list(name, s)?;
                    self.remember(ptr, n);
                }
            }
            Value::Object(o) => {
                let (ptr, n) = (Arc::as_ptr(o) as usize, Arc::strong_count(o));
                if !self.seen(ptr, n) {
                    self.object(o)?;
                    self.remember(ptr, n);
                }
            }
        }
        Ok(())
    }
}
