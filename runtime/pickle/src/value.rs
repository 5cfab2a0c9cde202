//! The object tree a pickle builds.

use std::fmt;
use std::sync::Arc;

use super::rules::Kind;

/// A global named by a pickle (`GLOBAL`, `STACK_GLOBAL`): a module and a (qualified) name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Global {
    /// The module (`torch._utils`).
    pub module: Arc<str>,
    /// The name inside it (`_rebuild_tensor_v2`).
    pub name: Arc<str>,
    /// `module.name` (`torch._utils._rebuild_tensor_v2`), how tables name it.
    pub path: Arc<str>,
}

impl Global {
    /// The global `module`.`name`.
    pub fn new(module: &str, name: &str) -> Self {
        Global {
            module: module.into(),
            name: name.into(),
            path: format!("{module}.{name}").into(),
        }
    }
}

impl fmt::Display for Global {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.path)
    }
}

/// The result of calling an allowed global (`REDUCE`, `NEWOBJ`, `NEWOBJ_EX`), with what
/// later opcodes added to it (`SETITEMS`, `APPENDS`, `BUILD`).
#[derive(Debug, Clone, PartialEq)]
pub struct Object {
    /// The global called (shared by every call of it that a pickle makes).
    pub global: Arc<Global>,
    /// What the rules say it builds.
    pub kind: Kind,
    /// The positional arguments of the call. For [`Kind::Dict`], [`Kind::List`],
    /// [`Kind::Set`] and [`Kind::Tuple`] these are moved into `entries` or `items`, and
    /// `args` is empty.
    pub args: Vec<Value>,
    /// Keyword arguments (`NEWOBJ_EX` only).
    pub kwargs: Vec<(Value, Value)>,
    /// The state given by `BUILD`, if any (the last one when there are several).
    pub state: Option<Value>,
    /// Items of list-, set- and tuple-kind objects.
    pub items: Vec<Value>,
    /// Entries of dict-kind objects, in order (duplicate keys are kept).
    pub entries: Vec<(Value, Value)>,
}

impl Object {
    /// An object of `global` and `kind` with nothing in it.
    pub fn new(global: Global, kind: Kind) -> Self {
        Object::of(Arc::new(global), kind)
    }

    /// An object of the shared `global` and `kind` with nothing in it.
    pub fn of(global: Arc<Global>, kind: Kind) -> Self {
        Object {
            global,
            kind,
            args: Vec::new(),
            kwargs: Vec::new(),
            state: None,
            items: Vec::new(),
            entries: Vec::new(),
        }
    }

    /// This object with positional arguments `args`.
    pub fn with_args(mut self, args: Vec<Value>) -> Self {
        self.args = args;
        self
    }

    /// This object with dict entries `entries`.
    pub fn with_entries(mut self, entries: Vec<(Value, Value)>) -> Self {
        self.entries = entries;
        self
    }

    /// This object with `items`.
    pub fn with_items(mut self, items: Vec<Value>) -> Self {
        self.items = items;
        self
    }

    /// This object with `BUILD` state `state`.
    pub fn with_state(mut self, state: Value) -> Self {
        self.state = Some(state);
        self
    }

    /// The positional argument that a [`Kind::Call`] names `name`, when it was given.
    pub fn arg(&self, name: &str) -> Option<&Value> {
        match &self.kind {
            Kind::Call { params } => params
                .iter()
                .position(|p| p == name)
                .and_then(|i| self.args.get(i)),
            _ => None,
        }
    }
}

/// A value built by a pickle. Containers are shared (`Arc`): a value the pickle memoizes
/// and references again is the same allocation each time.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// `None`.
    None,
    /// `True` or `False`.
    Bool(bool),
    /// An integer that fits in an `i64`.
    Int(i64),
    /// A larger integer: little-endian two's complement, of minimal length (the form of
    /// `LONG1`). See [`Value::as_i128`].
    BigInt(Arc<[u8]>),
    /// A float.
    Float(f64),
    /// A text string.
    Str(Arc<str>),
    /// A byte string (`bytes`, `bytearray`, or a Python 2 `str` that is not UTF-8).
    Bytes(Arc<[u8]>),
    /// A tuple.
    Tuple(Arc<[Value]>),
    /// A list.
    List(Arc<[Value]>),
    /// A dict, its items in insertion order (duplicate keys are kept; the last wins).
    Dict(Arc<[(Value, Value)]>),
    /// A set, in the order of the pickle.
    Set(Arc<[Value]>),
    /// A frozenset, in the order of the pickle.
    FrozenSet(Arc<[Value]>),
    /// A global referenced as a value (a class or function that is not called).
    Global(Arc<Global>),
    /// A call of an allowed global.
    Object(Arc<Object>),
    /// A persistent id (`PERSID`, `BINPERSID`): what the pickler's `persistent_id`
    /// returned, for the application to resolve.
    Persistent(Arc<Value>),
    /// A byte string left where the pickle stores it (only under
    /// [`Rules::byte_ranges`](super::Rules::byte_ranges)): never copied.
    Range(Arc<ByteRange>),
    /// A byte string that the writer takes from a source as it reaches it
    /// ([`Writer::write_streamed`](crate::Writer::write_streamed)), so that a tree of
    /// arrays can be written without their bytes in memory. The reader never builds one.
    Stream(Stream),
}

/// A byte string that the reader left in the pickle's buffer instead of copying it
/// ([`Value::Range`]): `BINBYTES`, `SHORT_BINBYTES`, `BINBYTES8`, `BYTEARRAY8`, a Python 2
/// `str` (`BINSTRING`, `SHORT_BINSTRING`), or `_codecs.encode(text, 'latin1')` (the text
/// as the pickle stores it, UTF-8, each character one byte of the value).
#[derive(Debug, Clone, PartialEq)]
pub struct ByteRange {
    /// Offset of the first stored byte from the start of the pickle.
    pub offset: u64,
    /// Number of bytes stored.
    pub stored: u64,
    /// Number of bytes of the value (`stored`, or the characters of a latin-1 text).
    pub len: u64,
    /// True when the stored bytes are UTF-8 text whose characters are the value's bytes
    /// (`_codecs.encode(text, 'latin1')`); decoding refuses a character above U+00FF.
    pub latin1: bool,
    /// A Python 2 `str` of at most [`ByteRange::TEXT_MAX`] bytes as text, each byte one
    /// character, as `pickle.load(..., encoding='latin1')` reads it (dict keys, dtype
    /// codes): what [`Value::as_str`] gives.
    pub text: Option<Arc<str>>,
}

impl ByteRange {
    /// The longest Python 2 `str` also kept as text.
    pub const TEXT_MAX: u64 = 256;
}

/// A byte string whose bytes a source writes when the writer reaches it
/// ([`Value::Stream`]): which one (the source's numbering) and its length in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Stream {
    /// The source's number of the byte string.
    pub index: usize,
    /// Its length in bytes.
    pub len: u64,
}

impl Value {
    /// A string value.
    pub fn str(s: &str) -> Value {
        Value::Str(s.into())
    }

    /// A byte string value.
    pub fn bytes(b: &[u8]) -> Value {
        Value::Bytes(b.into())
    }

    /// A tuple of `items`.
    pub fn tuple(items: Vec<Value>) -> Value {
        Value::Tuple(items.into())
    }

    /// A list of `items`.
    pub fn list(items: Vec<Value>) -> Value {
        Value::List(items.into())
    }

    /// A dict of `items`.
    pub fn dict(items: Vec<(Value, Value)>) -> Value {
        Value::Dict(items.into())
    }

    /// An object value.
    pub fn object(o: Object) -> Value {
        Value::Object(Arc::new(o))
    }

    /// The global named by the dotted `path` (`"torch.FloatStorage"`), as a value; the
    /// module is everything before the last dot.
    pub fn global(path: &str) -> Value {
        let (module, name) = path.rsplit_once('.').unwrap_or(("", path));
        Value::Global(Arc::new(Global::new(module, name)))
    }

    /// A persistent id whose content is the tuple of `items`.
    pub fn persistent<const N: usize>(items: [Value; N]) -> Value {
        Value::Persistent(Arc::new(Value::tuple(Vec::from(items))))
    }

    /// The byte string number `index` of the writer's source, `len` bytes long.
    pub fn stream(index: usize, len: u64) -> Value {
        Value::Stream(Stream { index, len })
    }

    /// A tuple of integers (a shape, strides).
    pub fn int_tuple<T: Copy + Into<i128>>(items: &[T]) -> Value {
        Value::tuple(items.iter().map(|&i| Value::int(i.into())).collect())
    }

    /// An integer value of any size: [`Value::Int`] when it fits, else [`Value::BigInt`].
    pub fn int(v: i128) -> Value {
        match i64::try_from(v) {
            Ok(v) => Value::Int(v),
            Err(_) => Value::BigInt(minimal_le(&v.to_le_bytes()).into()),
        }
    }

    /// The integer, when it is one and fits in an `i128` (booleans are not integers here).
    pub fn as_i128(&self) -> Option<i128> {
        match self {
            Value::Int(v) => Some(*v as i128),
            Value::BigInt(b) => le_to_i128(b),
            _ => None,
        }
    }

    /// The integer, when it is one and fits in an `i64`.
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Value::Int(v) => Some(*v),
            _ => None,
        }
    }

    /// The string, when this is a [`Value::Str`] (or a short Python 2 `str` left in the
    /// pickle, [`ByteRange::text`]).
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            Value::Range(r) => r.text.as_deref(),
            _ => None,
        }
    }

    /// The text a schema compares with a string: a string (as [`Value::as_str`]), or a
    /// global's dotted path (`numpy.ndarray`), as a table lookup keys it.
    pub fn as_name(&self) -> Option<&str> {
        match self {
            Value::Global(g) => Some(&g.path),
            _ => self.as_str(),
        }
    }

    /// The boolean, when this is a [`Value::Bool`].
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }

    /// The items of a tuple, list, set or frozenset.
    pub fn as_seq(&self) -> Option<&[Value]> {
        match self {
            Value::Tuple(v) | Value::List(v) | Value::Set(v) | Value::FrozenSet(v) => Some(v),
            _ => None,
        }
    }

    /// The items of a tuple, list or set, or of a tuple- or list-kind object
    /// (`torch.Size`).
    pub fn as_items(&self) -> Option<&[Value]> {
        match self {
            Value::Object(o) if matches!(o.kind, Kind::Tuple | Kind::List) => Some(&o.items),
            _ => self.as_seq(),
        }
    }

    /// The integers of a tuple, list or tuple-kind object (`torch.Size`) whose items are
    /// all integers that fit in an `i64`.
    pub fn as_int_list(&self) -> Option<Vec<i64>> {
        self.as_items()?.iter().map(Value::as_i64).collect()
    }

    /// The global, when this is a [`Value::Global`].
    pub fn as_global(&self) -> Option<&Global> {
        match self {
            Value::Global(g) => Some(g.as_ref()),
            _ => None,
        }
    }

    /// The object, when this is a [`Value::Object`].
    pub fn as_object(&self) -> Option<&Object> {
        match self {
            Value::Object(o) => Some(o),
            _ => None,
        }
    }

    /// The entries of a dict or a dict-kind object.
    pub fn as_entries(&self) -> Option<&[(Value, Value)]> {
        match self {
            Value::Dict(d) => Some(d),
            Value::Object(o) if o.kind == Kind::Dict => Some(&o.entries),
            _ => None,
        }
    }

    /// The value of the last entry whose key is the string `key`, in a dict or a
    /// dict-kind object.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.as_entries()?
            .iter()
            .rev()
            .find(|(k, _)| k.as_str() == Some(key))
            .map(|(_, v)| v)
    }

    /// A short name of the value's type, for messages (`int`, `list`, `global`).
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::None => "None",
            Value::Bool(_) => "bool",
            Value::Int(_) | Value::BigInt(_) => "int",
            Value::Float(_) => "float",
            Value::Str(_) => "str",
            Value::Bytes(_) => "bytes",
            Value::Tuple(_) => "tuple",
            Value::List(_) => "list",
            Value::Dict(_) => "dict",
            Value::Set(_) => "set",
            Value::FrozenSet(_) => "frozenset",
            Value::Global(_) => "global",
            Value::Object(_) => "object",
            Value::Persistent(_) => "persistent id",
            Value::Range(r) if r.text.is_some() => "str",
            Value::Range(_) => "bytes",
            Value::Stream(_) => "bytes",
        }
    }
}

/// The bytes a shared allocation of `len` bytes takes (`Arc<str>`, `Arc<[T]>`): its
/// counts and the allocator's header, rounded up.
pub(crate) fn arc_bytes(len: u64) -> u64 {
    len.saturating_add(16 + 16 + 15) & !15
}

/// The bytes of a heap allocation of `len` bytes (none for 0).
pub(crate) fn heap_bytes(len: u64) -> u64 {
    match len {
        0 => 0,
        n => n.saturating_add(16 + 15) & !15,
    }
}

/// The bytes an [`Object`] of `seqs` items (its arguments and items) and `maps` pairs
/// (its entries and keyword arguments) takes, not counting what its values hold.
pub(crate) fn object_bytes(seqs: [usize; 2], maps: [usize; 2]) -> u64 {
    let v = std::mem::size_of::<Value>() as u64;
    let seqs: u64 = seqs.iter().map(|&n| heap_bytes(n as u64 * v)).sum();
    let maps: u64 = maps.iter().map(|&n| heap_bytes(n as u64 * 2 * v)).sum();
    arc_bytes(std::mem::size_of::<Object>() as u64) + seqs + maps
}

/// The memory the value `root` holds: each allocation counted once however often it is
/// shared, as the reader charged it when it made the value. Values nested deeper than
/// `max_depth` are not counted (nothing that reads the value goes there).
pub(crate) fn held_bytes(root: &Value, max_depth: u64) -> u64 {
    let mut seen = std::collections::HashSet::new();
    held(root, &mut seen, max_depth)
}

/// The bytes of one entry of the set of shared allocations met.
const SEEN_ENTRY: u64 = 2 * (std::mem::size_of::<usize>() as u64 + 1);

/// `len`, when `a` is met for the first time (shared allocations are remembered).
fn once<T: ?Sized>(a: &Arc<T>, len: u64, seen: &mut std::collections::HashSet<usize>) -> u64 {
    if Arc::strong_count(a) == 1 {
        return len;
    }
    match seen.insert(Arc::as_ptr(a).cast::<u8>() as usize) {
        true => len + SEEN_ENTRY,
        false => 0,
    }
}

fn held(v: &Value, seen: &mut std::collections::HashSet<usize>, depth: u64) -> u64 {
    let v_size = std::mem::size_of::<Value>() as u64;
    let inner = |items: &mut dyn Iterator<Item = &Value>, seen: &mut _| -> u64 {
        match depth.checked_sub(1) {
            Some(d) => items.map(|x| held(x, seen, d)).sum(),
            None => 0,
        }
    };
    match v {
        Value::None | Value::Bool(_) | Value::Int(_) | Value::Float(_) | Value::Stream(_) => 0,
        Value::BigInt(b) | Value::Bytes(b) => once(b, arc_bytes(b.len() as u64), seen),
        Value::Str(s) => once(s, arc_bytes(s.len() as u64), seen),
        Value::Range(r) => {
            let text = r.text.as_ref().map_or(0, |t| arc_bytes(t.len() as u64));
            once(
                r,
                arc_bytes(std::mem::size_of::<ByteRange>() as u64) + text,
                seen,
            )
        }
        Value::Global(g) => {
            let names = (g.module.len() + g.name.len()) as u64;
            once(
                g,
                arc_bytes(std::mem::size_of::<Global>() as u64) + 3 * arc_bytes(names + 1),
                seen,
            )
        }
        Value::Tuple(a) | Value::List(a) | Value::Set(a) | Value::FrozenSet(a) => {
            match once(a, arc_bytes(a.len() as u64 * v_size), seen) {
                0 => 0,
                own => own + inner(&mut a.iter(), seen),
            }
        }
        Value::Dict(a) => match once(a, arc_bytes(a.len() as u64 * 2 * v_size), seen) {
            0 => 0,
            own => own + inner(&mut a.iter().flat_map(|(k, v)| [k, v]), seen),
        },
        Value::Persistent(p) => match once(p, arc_bytes(v_size), seen) {
            0 => 0,
            own => own + inner(&mut std::iter::once(&**p), seen),
        },
        Value::Object(o) => {
            let own = object_bytes(
                [o.args.len(), o.items.len()],
                [o.entries.len(), o.kwargs.len()],
            );
            match once(o, own, seen) {
                0 => 0,
                own => {
                    let pairs = o.entries.iter().chain(&o.kwargs).flat_map(|(k, v)| [k, v]);
                    let mut all = o.args.iter().chain(&o.items).chain(pairs).chain(&o.state);
                    own + inner(&mut all, seen)
                }
            }
        }
    }
}

/// `bytes` (little-endian two's complement) without redundant sign bytes; empty for 0.
pub(crate) fn minimal_le(bytes: &[u8]) -> Vec<u8> {
    let mut n = bytes.len();
    while n > 0 {
        let top = bytes[n - 1];
        let below_neg = n >= 2 && bytes[n - 2] & 0x80 != 0;
        if (top == 0 && !below_neg && n >= 2) || (top == 0xff && below_neg) {
            n -= 1;
        } else if top == 0 && n == 1 {
            n = 0;
        } else {
            break;
        }
    }
    bytes[..n].to_vec()
}

/// The value of little-endian two's complement `b`, when it fits in an `i128`.
pub(crate) fn le_to_i128(b: &[u8]) -> Option<i128> {
    let b = minimal_le(b);
    if b.len() > 16 {
        return None;
    }
    let neg = b.last().is_some_and(|x| x & 0x80 != 0);
    let mut full = if neg { [0xffu8; 16] } else { [0u8; 16] };
    full[..b.len()].copy_from_slice(&b);
    Some(i128::from_le_bytes(full))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_text_or_a_global_s_path() {
        let g = Value::global("numpy.ndarray");
        assert_eq!(g.as_name(), Some("numpy.ndarray"));
        assert_eq!(g.as_str(), None);
        assert_eq!(Value::str("F").as_name(), Some("F"));
        assert_eq!(Value::Int(7).as_name(), None);
    }

    #[test]
    fn minimal_forms() {
        assert_eq!(minimal_le(&[0, 0]), Vec::<u8>::new());
        assert_eq!(minimal_le(&[0xff, 0xff]), vec![0xff]);
        assert_eq!(minimal_le(&[0x80, 0x00]), vec![0x80, 0x00]);
        assert_eq!(minimal_le(&[0x7f, 0x00, 0x00]), vec![0x7f]);
        assert_eq!(minimal_le(&[0x00, 0x80, 0xff]), vec![0x00, 0x80]);
        for v in [
            0i128,
            1,
            -1,
            127,
            128,
            -128,
            -129,
            1 << 70,
            -(1 << 70),
            i128::MIN,
            i128::MAX,
        ] {
            assert_eq!(le_to_i128(&minimal_le(&v.to_le_bytes())), Some(v), "{v}");
            assert_eq!(Value::int(v).as_i128(), Some(v));
        }
    }
}
