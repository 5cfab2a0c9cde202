//! The pickle codec against real CPython pickles (protocols 0-5), a hostile corpus, a
//! random-mutation fuzz, and CPython loading what the writer emits.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tensorfmt_core::Limits;
use tensorfmt_pickle::{self as pickle, Global, Kind, Object, Rules, Stream, Value};

/// Records the largest single allocation made by this thread while armed.
struct Counting;

thread_local! {
    static ARMED: Cell<bool> = const { Cell::new(false) };
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

fn record(size: usize) {
    // `try_with`: the allocator may run while thread-locals are being torn down.
    let _ = ARMED.try_with(|a| {
        if a.get() {
            let _ = LARGEST.try_with(|l| l.set(l.get().max(size)));
        }
    });
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        record(layout.size());
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        record(new_size);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/pickle")
}

const TENSOR_V2: [&str; 6] = [
    "storage",
    "offset",
    "size",
    "stride",
    "requires_grad",
    "hooks",
];

fn torch_rules() -> Rules {
    Rules::new()
        .allow("collections", "OrderedDict", Kind::Dict)
        .allow(
            "torch._utils",
            "_rebuild_tensor_v2",
            Kind::Call {
                params: TENSOR_V2.iter().map(|s| s.to_string()).collect(),
            },
        )
        .allow("torch", "FloatStorage", Kind::Class)
        .persistent_ids(true)
}

fn sample_rules() -> Rules {
    Rules::new()
        .allow("builtins", "set", Kind::Set)
        .allow("builtins", "frozenset", Kind::Set)
        .allow_codecs_encode()
}

fn s(x: &str) -> Value {
    Value::str(x)
}

fn ints(v: impl IntoIterator<Item = i64>) -> Vec<Value> {
    v.into_iter().map(Value::Int).collect()
}

/// What generate.py's `sample()` is (sets as `Value::Set`).
fn sample_expected() -> Value {
    let shared = Value::list(ints([1, 2]));
    Value::dict(vec![
        (s("int"), Value::Int(7)),
        (s("neg"), Value::Int(-5)),
        (s("i16"), Value::Int(300)),
        (s("i32"), Value::Int(70000)),
        (s("i64"), Value::Int(1 << 40)),
        (s("big"), Value::int(1 << 70)),
        (s("nbig"), Value::int(-(1 << 70))),
        (s("float"), Value::Float(1.5)),
        (s("str"), s("h\u{e9}llo\n\\")),
        (s("bytes"), Value::Bytes(Arc::from(&b"\x00\xff\n"[..]))),
        (s("none"), Value::None),
        (s("t"), Value::Bool(true)),
        (s("f"), Value::Bool(false)),
        (s("tup0"), Value::tuple(vec![])),
        (s("tup1"), Value::tuple(ints([1]))),
        (s("tup5"), Value::tuple(ints(1..=5))),
        (s("list"), Value::list(vec![Value::None, s("a")])),
        (
            s("nested"),
            Value::dict(vec![(
                s("x"),
                Value::list(vec![Value::Float(1.0), Value::tuple(ints([2]))]),
            )]),
        ),
        (s("shared_a"), shared.clone()),
        (s("shared_b"), shared),
        (s("set"), Value::Set(ints([3]).into())),
        (s("fset"), Value::FrozenSet(ints([4]).into())),
        (s("long_list"), Value::list(ints(0..1500))),
    ])
}

/// Protocols 0-3 pickle sets as `builtins.set(list)`: turn those objects into sets.
fn normalize_sets(v: &Value) -> Value {
    match v {
        Value::Dict(d) => Value::dict(
            d.iter()
                .map(|(k, v)| (k.clone(), normalize_sets(v)))
                .collect(),
        ),
        Value::Object(o) if o.kind == Kind::Set => {
            let items: Arc<[Value]> = o.items.clone().into();
            if &*o.global.name == "set" {
                Value::Set(items)
            } else {
                Value::FrozenSet(items)
            }
        }
        other => other.clone(),
    }
}

#[test]
fn reads_cpython_pickles_of_every_protocol() {
    for p in 0..=5 {
        let path = fixtures().join(format!("valid/sample_p{p}.pkl"));
        let bytes = std::fs::read(&path).unwrap();
        let v = pickle::read(&bytes, &sample_rules(), &Limits::default())
            .unwrap_or_else(|e| panic!("protocol {p}: {e}"));
        assert_eq!(normalize_sets(&v), sample_expected(), "protocol {p}");
        // The memoized list is shared, not copied.
        let (Some(Value::List(a)), Some(Value::List(b))) = (v.get("shared_a"), v.get("shared_b"))
        else {
            panic!("protocol {p}: shared lists missing");
        };
        assert!(Arc::ptr_eq(a, b), "protocol {p}: memo value was copied");
    }
}

fn tensor_call(key: &str, offset: i64, hooks: Value) -> Value {
    let pid = Value::tuple(vec![
        s("storage"),
        Value::global("torch.FloatStorage"),
        s(key),
        s("cpu"),
        Value::Int(2),
    ]);
    Value::object(
        Object::new(
            Global::new("torch._utils", "_rebuild_tensor_v2"),
            Kind::Call {
                params: TENSOR_V2.iter().map(|s| s.to_string()).collect(),
            },
        )
        .with_args(vec![
            Value::Persistent(Arc::new(pid)),
            Value::Int(offset),
            Value::tuple(ints([2 - offset])),
            Value::tuple(ints([1])),
            Value::Bool(false),
            hooks,
        ]),
    )
}

fn ordered_dict(entries: Vec<(Value, Value)>) -> Object {
    Object::new(Global::new("collections", "OrderedDict"), Kind::Dict).with_entries(entries)
}

#[test]
fn reads_a_torch_like_checkpoint_pickle() {
    let bytes = std::fs::read(fixtures().join("valid/torch_like_p2.pkl")).unwrap();
    let v = pickle::read(&bytes, &torch_rules(), &Limits::default()).unwrap();
    let hooks = Value::object(ordered_dict(vec![]));
    let meta = Value::object(ordered_dict(vec![(
        s(""),
        Value::dict(vec![(s("version"), Value::Int(1))]),
    )]));
    let expected = Value::object(
        ordered_dict(vec![
            (s("w"), tensor_call("0", 0, hooks.clone())),
            (s("v"), tensor_call("0", 1, hooks)),
        ])
        .with_state(Value::dict(vec![(s("_metadata"), meta)])),
    );
    assert_eq!(v, expected);
    let w = v.get("w").unwrap().as_object().unwrap();
    assert_eq!(w.arg("offset"), Some(&Value::Int(0)));
    assert_eq!(w.arg("size"), Some(&Value::tuple(ints([2]))));
    assert_eq!(w.arg("metadata"), None);

    // Refused without persistent ids, and the rules name nothing else.
    let e = pickle::read(
        &bytes,
        &torch_rules().persistent_ids(false),
        &Limits::default(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("persistent ids"), "{e}");
    let e = pickle::read(&bytes, &Rules::new(), &weights_only()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "byte 2: pickle decoding failed: 3 globals are not allowed: \
         'collections.OrderedDict' (offset 2), 'torch._utils._rebuild_tensor_v2' (offset 42), \
         'torch.FloatStorage' (offset 93)",
        "every refused global at once"
    );
}

#[test]
fn reads_concatenated_pickles_with_read_prefix() {
    let bytes = std::fs::read(fixtures().join("valid/legacy_like.pkl")).unwrap();
    let rules = Rules::new().protocols(2..=2);
    let limits = Limits::default();
    let (magic, n1) = pickle::read_prefix(&bytes, &rules, &limits).unwrap();
    assert_eq!(magic.as_i128(), Some(0x1950a86a20f9469cfc6c));
    assert_eq!(n1, 15);
    let (proto, n2) = pickle::read_prefix(&bytes[n1..], &rules, &limits).unwrap();
    assert_eq!(proto, Value::Int(1001));
    let (info, n3) = pickle::read_prefix(&bytes[n1 + n2..], &rules, &limits).unwrap();
    assert_eq!(n1 + n2 + n3, bytes.len());
    assert_eq!(info.get("little_endian"), Some(&Value::Bool(true)));
    // `read` insists on one pickle filling the input.
    assert!(pickle::read(&bytes, &rules, &limits).is_err());
}

#[test]
fn writer_round_trips() {
    let mut values = vec![sample_expected(), normalize_sets(&sample_expected())];
    values.push(Value::tuple(vec![
        Value::Int(i64::MIN),
        Value::Int(i64::MAX),
        Value::Int(-1),
        Value::Int(255),
        Value::Int(256),
        Value::Int(65535),
        Value::Int(65536),
        Value::Int(i32::MIN as i64),
        Value::Int(i32::MAX as i64 + 1),
        Value::int(i128::MIN),
        Value::BigInt(Arc::from(vec![0x11u8; 300])),
        Value::Float(-0.0),
        Value::Float(f64::INFINITY),
        Value::Bytes(Arc::from(Vec::new())),
        Value::Bytes(Arc::from((0..=255u8).collect::<Vec<_>>())),
        s(""),
        s("\u{1F600}"),
    ]));
    values.push(Value::dict(vec![(Value::tuple(ints([1, 2])), Value::None)]));
    values.push(Value::list((0..2500).map(|i| s(&i.to_string())).collect()));
    let hooks = Value::object(ordered_dict(vec![]));
    values.push(Value::object(ordered_dict(vec![(
        s("w"),
        tensor_call("0", 0, hooks),
    )])));
    let rules = torch_rules()
        .allow("builtins", "set", Kind::Set)
        .allow("builtins", "frozenset", Kind::Set)
        .allow("pkg", "Thing", Kind::Object)
        .allow_codecs_encode();
    // Protocol 4 also writes calls with keyword arguments (`NEWOBJ_EX`).
    let kwargs =
        Object::new(Global::new("pkg", "Thing"), Kind::Object).with_args(vec![Value::Int(1)]);
    let mut kwargs4 = kwargs.clone();
    kwargs4.kwargs = vec![(s("device"), s("cpu"))];
    values.push(Value::list(vec![
        Value::object(kwargs),
        Value::object(kwargs4),
    ]));
    for v in &values {
        for (memo, proto) in [(true, 2), (false, 2), (true, 4), (false, 4)] {
            let written = pickle::Writer::new().memoize(memo).protocol(proto).write(v);
            if proto == 2 && v == values.last().unwrap() {
                assert!(written
                    .unwrap_err()
                    .to_string()
                    .contains("keyword arguments"));
                continue;
            }
            let back = pickle::read(&written.unwrap(), &rules, &Limits::default()).unwrap();
            assert_eq!(normalize_sets(&back), normalize_sets(v), "protocol {proto}");
        }
    }
}

#[test]
fn writer_keeps_sharing() {
    let big = Value::list(ints(0..1000));
    let v = Value::list(vec![big.clone(); 1000]);
    let bytes = pickle::write(&v).unwrap();
    assert!(bytes.len() < 10_000, "{} bytes", bytes.len());
    let back = pickle::read(&bytes, &Rules::new(), &Limits::default()).unwrap();
    let items = back.as_seq().unwrap();
    let (Value::List(a), Value::List(b)) = (&items[0], &items[999]) else {
        panic!()
    };
    assert!(Arc::ptr_eq(a, b));
}

/// Opcodes of `bytes` as (code, argument bytes) without the memo opcodes `q`/`r`.
fn strip_puts(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'q' => i += 2,
            b'r' => i += 5,
            b'X' => {
                let n = u32::from_le_bytes(bytes[i + 1..i + 5].try_into().unwrap()) as usize;
                out.extend_from_slice(&bytes[i..i + 5 + n]);
                i += 5 + n;
            }
            b'c' => {
                let mut nl = 0;
                let start = i;
                i += 1;
                while nl < 2 {
                    if bytes[i] == b'\n' {
                        nl += 1;
                    }
                    i += 1;
                }
                out.extend_from_slice(&bytes[start..i]);
            }
            b'K' | b'h' | 0x80 => {
                out.extend_from_slice(&bytes[i..i + 2]);
                i += 2;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

#[test]
fn writer_matches_the_spec_opcode_sequence() {
    // The pickle of OrderedDict(w=tensor([1., 2.])) as torch.save writes it.
    let hooks = Value::object(ordered_dict(vec![]));
    let v = Value::object(ordered_dict(vec![(s("w"), tensor_call("0", 0, hooks))]));
    let mut spec: Vec<u8> = vec![0x80, 2];
    spec.extend_from_slice(b"ccollections\nOrderedDict\n)R");
    spec.extend_from_slice(b"X\x01\x00\x00\x00w");
    spec.extend_from_slice(b"ctorch._utils\n_rebuild_tensor_v2\n((");
    spec.extend_from_slice(b"X\x07\x00\x00\x00storage");
    spec.extend_from_slice(b"ctorch\nFloatStorage\n");
    spec.extend_from_slice(b"X\x01\x00\x00\x000X\x03\x00\x00\x00cpuK\x02tQ");
    spec.extend_from_slice(b"K\x00K\x02\x85K\x01\x85\x89h\x00)RtRs.");
    let bytes = pickle::write(&v).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&strip_puts(&bytes)),
        String::from_utf8_lossy(&spec)
    );
    // Without memo ops, the GLOBAL is repeated instead of BINGET 0.
    let plain = pickle::Writer::new().memoize(false).write(&v).unwrap();
    assert!(!plain.contains(&b'q') || !plain.windows(2).any(|w| w == b"h\x00"));
}

/// Python loads what the writer emits, with a restricted `Unpickler`; only opcodes that
/// torch's weights_only unpickler accepts appear.
#[test]
fn cpython_loads_the_writer_output() {
    let python = std::env::var("TENSORFMT_PYTHON").unwrap_or_else(|_| "python3".into());
    if std::process::Command::new(&python)
        .arg("-c")
        .arg("pass")
        .status()
        .map(|s| !s.success())
        .unwrap_or(true)
    {
        eprintln!("skipped: no {python}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let hooks = Value::object(ordered_dict(vec![]));
    let meta = Value::object(ordered_dict(vec![(
        s(""),
        Value::dict(vec![(s("version"), Value::Int(1))]),
    )]));
    let ckpt = Value::object(
        ordered_dict(vec![
            (s("w"), tensor_call("0", 0, hooks.clone())),
            (s("v"), tensor_call("0", 1, hooks)),
        ])
        .with_state(Value::dict(vec![(s("_metadata"), meta)])),
    );
    let cases = [
        (
            sample_expected(),
            "{'int': 7, 'neg': -5, 'i16': 300, 'i32': 70000, 'i64': 1099511627776, \
             'big': 1180591620717411303424, 'nbig': -1180591620717411303424, 'float': 1.5, \
             'str': 'héllo\\n\\\\', 'bytes': b'\\x00\\xff\\n', 'none': None, 't': True, \
             'f': False, 'tup0': (), 'tup1': (1,), 'tup5': (1, 2, 3, 4, 5), \
             'list': [None, 'a'], 'nested': {'x': [1.0, (2,)]}, 'shared_a': [1, 2], \
             'shared_b': [1, 2], 'set': {3}, 'fset': frozenset({4}), \
             'long_list': 1500, 'same': True}",
        ),
        (
            ckpt,
            "OrderedDict([('w', ('call', 'torch._utils._rebuild_tensor_v2', \
             (('pid', ('storage', torch.FloatStorage, '0', 'cpu', 2)), 0, (2,), (1,), False, \
             OrderedDict()))), ('v', ('call', 'torch._utils._rebuild_tensor_v2', \
             (('pid', ('storage', torch.FloatStorage, '0', 'cpu', 2)), 1, (1,), (1,), False, \
             OrderedDict())))]) {'_metadata': OrderedDict([('', {'version': 1})])}",
        ),
    ];
    let script = r#"
import builtins, collections, pickle, pickletools, sys, _codecs
ALLOWED_OPS = {'PROTO', 'STOP', 'MARK', 'TUPLE', 'TUPLE1', 'TUPLE2', 'TUPLE3', 'EMPTY_TUPLE',
    'EMPTY_LIST', 'EMPTY_DICT', 'APPEND', 'APPENDS', 'SETITEM', 'SETITEMS', 'NONE', 'NEWTRUE',
    'NEWFALSE', 'BININT', 'BININT1', 'BININT2', 'LONG1', 'BINFLOAT', 'BINUNICODE', 'BINPUT',
    'LONG_BINPUT', 'BINGET', 'LONG_BINGET', 'GLOBAL', 'REDUCE', 'BUILD', 'BINPERSID'}
class Stub:
    def __init__(self, name): self.name = name
    def __call__(self, *a): return ('call', self.name, a)
    def __repr__(self): return self.name
class U(pickle.Unpickler):
    def find_class(self, m, n):
        if (m, n) == ('collections', 'OrderedDict'): return collections.OrderedDict
        if (m, n) == ('_codecs', 'encode'): return _codecs.encode
        if m == 'builtins' and n in ('set', 'frozenset'): return getattr(builtins, n)
        if m.startswith('torch'): return Stub(m + '.' + n)
        raise pickle.UnpicklingError(f'{m}.{n} not allowed')
    def persistent_load(self, pid): return ('pid', pid)
data = open(sys.argv[1], 'rb').read()
bad = {op.name for op, _, _ in pickletools.genops(data)} - ALLOWED_OPS
assert not bad, bad
v = U(__import__('io').BytesIO(data)).load()
if isinstance(v, collections.OrderedDict):
    print(repr(v), getattr(v, '_metadata', None) and {'_metadata': v._metadata})
else:
    v['same'] = v['shared_a'] is v['shared_b']
    v['long_list'] = len(v['long_list'])
    print(repr(v))
"#;
    for (i, (v, expected)) in cases.iter().enumerate() {
        let path = dir.path().join(format!("{i}.pkl"));
        std::fs::write(&path, pickle::write(v).unwrap()).unwrap();
        let out = std::process::Command::new(&python)
            .arg("-c")
            .arg(script)
            .arg(&path)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "case {i}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let got = String::from_utf8(out.stdout).unwrap();
        assert_eq!(got.trim(), *expected, "case {i}");
    }
}

/// Limits that refuse every global outside the rules (`--weights-only`).
fn weights_only() -> Limits {
    Limits {
        weights_only: true,
        ..Limits::default()
    }
}

fn read_armed(bytes: &[u8], limits: &Limits) -> (Result<Value, String>, usize) {
    read_armed_with(bytes, &torch_rules(), limits)
}

fn read_armed_with(bytes: &[u8], rules: &Rules, limits: &Limits) -> (Result<Value, String>, usize) {
    LARGEST.with(|l| l.set(0));
    ARMED.with(|a| a.set(true));
    let r = pickle::read(bytes, rules, limits).map_err(|e| e.to_string());
    ARMED.with(|a| a.set(false));
    (r, LARGEST.with(|l| l.get()))
}

#[test]
fn hostile_corpus_is_refused() {
    let dir = fixtures().join("hostile");
    let expected = std::fs::read_to_string(dir.join("expected.txt")).unwrap();
    let start = std::time::Instant::now();
    let mut n = 0;
    let mut failures = Vec::new();
    for line in expected.lines().filter(|l| !l.is_empty()) {
        let (name, must) = line.split_once('\t').unwrap_or((line, ""));
        let bytes = std::fs::read(dir.join(name)).unwrap();
        // Read inertly (the default): a value of inert objects or a clean error, in
        // bounded memory; nothing is run either way.
        let (inert, largest) = read_armed(&bytes, &Limits::default());
        if let Err(m) = &inert {
            if !m.contains("byte ") {
                failures.push(format!("{name}: no offset in '{m}' (inert)"));
            }
        }
        if largest > 1 << 20 {
            failures.push(format!("{name}: one allocation of {largest} bytes (inert)"));
        }
        let (r, largest) = read_armed(&bytes, &weights_only());
        n += 1;
        let msg = match r {
            Ok(v) => {
                failures.push(format!("{name} was accepted: {v:?}"));
                continue;
            }
            Err(m) => m,
        };
        if !msg.contains(must) {
            failures.push(format!("{name}: '{msg}' lacks '{must}'"));
        }
        if !msg.contains("byte ") {
            failures.push(format!("{name}: no offset in '{msg}'"));
        }
        if largest > 1 << 20 {
            failures.push(format!("{name}: one allocation of {largest} bytes"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let files = std::fs::read_dir(&dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "pkl")
        })
        .count();
    assert_eq!(n, files, "expected.txt does not list every file");
    eprintln!("{n} hostile pickles refused in {:?}", start.elapsed());
}

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

#[test]
fn mutation_fuzz_never_panics() {
    let mut seeds = Vec::new();
    for name in [
        "torch_like_p2.pkl",
        "sample_p2.pkl",
        "sample_p4.pkl",
        "sample_p0.pkl",
    ] {
        seeds.push(std::fs::read(fixtures().join("valid").join(name)).unwrap());
    }
    let hooks = Value::object(ordered_dict(vec![]));
    seeds.push(pickle::write(&tensor_call("0", 0, hooks)).unwrap());
    for name in ["p2_arrays.pkl", "p5_arrays.pkl", "detectron_py2.pkl"] {
        seeds.push(std::fs::read(fixtures().join("../numpy_pickle").join(name)).unwrap());
    }
    let numpy = numpy_all_paths();
    let rules = torch_rules()
        .allow("builtins", "set", Kind::Set)
        .allow_codecs_encode();
    let limits = Limits {
        max_pickle_ops: 100_000,
        ..Limits::default()
    };
    let iterations = if cfg!(debug_assertions) {
        20_000
    } else {
        200_000
    };
    let interesting: &[u8] = b"(.012FIJKLMNPQRSTVXabcdeghijlopqrstu}])\x80\x81\x85\x86\x87\x88\x89\x8a\x8b\x8c\x8d\x8e\x8f\x90\x91\x92\x93\x94\x95\x96\xff\x00\x7f";
    let mut rng = Rng(0x5eed_0fc0_ffee);
    let (mut ok, mut err) = (0u32, 0u32);
    let start = std::time::Instant::now();
    for _ in 0..iterations {
        let mut data = seeds[rng.below(seeds.len())].clone();
        for _ in 0..1 + rng.below(4) {
            let at = rng.below(data.len());
            let byte = if rng.below(2) == 0 {
                interesting[rng.below(interesting.len())]
            } else {
                rng.next() as u8
            };
            match rng.below(4) {
                0 if !data.is_empty() => data[at] = byte,
                1 => data.insert(at, byte),
                2 if !data.is_empty() => {
                    data.remove(at);
                }
                _ => data.truncate(at),
            }
        }
        match pickle::read(&data, &rules, &limits) {
            Ok(_) => ok += 1,
            Err(_) => err += 1,
        }
        // Byte strings left in the pickle: every range found lies in it.
        if let Ok(v) = pickle::read(&data, &numpy, &limits) {
            for (_, a) in
                pickle::find_objects(&v, &data, &is_array, &limits, pickle::memory_budget(0))
                    .unwrap_or_default()
            {
                let d = a.arg("buffer").or(pickle::index(a.state.as_ref(), 4));
                if let Ok(tensorfmt_core::DataLocation::Range { offset, len }) =
                    pickle::data(d, 0, "data")
                {
                    assert!(offset + len <= data.len() as u64);
                }
            }
        }
    }
    eprintln!(
        "fuzz: {iterations} inputs, {ok} accepted, {err} refused, {:?}",
        start.elapsed()
    );
}

/// The rules of pickled NumPy arrays, their byte strings left in the pickle.
fn numpy_rules() -> Rules {
    Rules::new()
        .allow_call(
            "numpy._core.multiarray._reconstruct",
            &["subtype", "shape", "typecode"],
        )
        .allow_call(
            "numpy._core.numeric._frombuffer",
            &["buffer", "dtype", "shape", "order"],
        )
        .allow_path("numpy.ndarray", Kind::Class)
        .allow_call("numpy.dtype", &["descr", "align", "copy"])
        .allow_codecs_encode()
        .byte_ranges(true)
}

/// The bytes of the byte string `v` of `pickle`, as a tensor read would have them.
fn range_bytes(pickle: &[u8], v: &Value) -> Vec<u8> {
    let src = tensorfmt_core::Source::from_bytes(pickle.to_vec());
    let loc = pickle::data(Some(v), 0, "data").unwrap();
    let info = tensorfmt_core::TensorInfo::dense(
        "t",
        tensorfmt_core::DType::U8,
        vec![loc.len()],
        tensorfmt_core::Order::C,
        tensorfmt_core::ByteOrder::Little,
        loc,
    )
    .unwrap();
    let mut out = tensorfmt_core::sink::OwnedSink::new();
    tensorfmt_core::read::read_tensor(&src, &info, &mut out, &Default::default()).unwrap();
    out.tensors[0].data.as_bytes().to_vec()
}

#[test]
fn numpy_array_data_stays_in_the_pickle() {
    // `pickle.dumps({'w': np.arange(6, dtype='>i4').reshape(2, 3), 'lr': 0.1}, protocol=P)`
    // (NumPy 2.4, CPython 3.11).
    let p2: &[u8] = b"\x80\x02}q\x00(X\x01\x00\x00\x00wq\x01cnumpy._core.multiarray\n_reconstruct\nq\x02cnumpy\nndarray\nq\x03K\x00\x85q\x04c_codecs\nencode\nq\x05X\x01\x00\x00\x00bq\x06X\x06\x00\x00\x00latin1q\x07\x86q\x08Rq\t\x87q\nRq\x0b(K\x01K\x02K\x03\x86q\x0ccnumpy\ndtype\nq\rX\x02\x00\x00\x00i4q\x0e\x89\x88\x87q\x0fRq\x10(K\x03X\x01\x00\x00\x00>q\x11NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xffK\x00tq\x12b\x89h\x05X\x18\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x02\x00\x00\x00\x03\x00\x00\x00\x04\x00\x00\x00\x05q\x13h\x07\x86q\x14Rq\x15tq\x16bX\x02\x00\x00\x00lrq\x17G?\xb9\x99\x99\x99\x99\x99\x9au.";
    let p4: &[u8] = b"\x80\x04\x95\xb9\x00\x00\x00\x00\x00\x00\x00}\x94(\x8c\x01w\x94\x8c\x16numpy._core.multiarray\x94\x8c\x0c_reconstruct\x94\x93\x94\x8c\x05numpy\x94\x8c\x07ndarray\x94\x93\x94K\x00\x85\x94C\x01b\x94\x87\x94R\x94(K\x01K\x02K\x03\x86\x94h\x05\x8c\x05dtype\x94\x93\x94\x8c\x02i4\x94\x89\x88\x87\x94R\x94(K\x03\x8c\x01>\x94NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xffK\x00t\x94b\x89C\x18\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x02\x00\x00\x00\x03\x00\x00\x00\x04\x00\x00\x00\x05\x94t\x94b\x8c\x02lr\x94G?\xb9\x99\x99\x99\x99\x99\x9au.";
    let p5: &[u8] = b"\x80\x05\x95\xa4\x00\x00\x00\x00\x00\x00\x00}\x94(\x8c\x01w\x94\x8c\x13numpy._core.numeric\x94\x8c\x0b_frombuffer\x94\x93\x94(\x96\x18\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x02\x00\x00\x00\x03\x00\x00\x00\x04\x00\x00\x00\x05\x94\x8c\x05numpy\x94\x8c\x05dtype\x94\x93\x94\x8c\x02i4\x94\x89\x88\x87\x94R\x94(K\x03\x8c\x01>\x94NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xffK\x00t\x94bK\x02K\x03\x86\x94\x8c\x01C\x94t\x94R\x94\x8c\x02lr\x94G?\xb9\x99\x99\x99\x99\x99\x9au.";
    let expected: Vec<u8> = (0u32..6).flat_map(|i| i.to_be_bytes()).collect();
    for (p, latin1) in [(p2, true), (p4, false)] {
        let v = pickle::read(p, &numpy_rules(), &Limits::default()).unwrap();
        let a = v.get("w").and_then(Value::as_object).unwrap();
        let state = a.state.as_ref().and_then(Value::as_seq).unwrap();
        let Value::Range(r) = &state[4] else {
            panic!("{:?}", state[4])
        };
        assert_eq!((r.len, r.latin1), (24, latin1));
        assert_eq!(range_bytes(p, &state[4]), expected);
        let dtype = state[2].as_object().unwrap();
        assert_eq!(dtype.arg("descr").and_then(Value::as_str), Some("i4"));
        let order = dtype.state.as_ref().and_then(Value::as_seq).unwrap();
        assert_eq!(order[1].as_str(), Some(">"));
        assert_eq!(v.get("lr"), Some(&Value::Float(0.1)));
    }
    let v = pickle::read(p5, &numpy_rules(), &Limits::default()).unwrap();
    let a = v.get("w").and_then(Value::as_object).unwrap();
    assert_eq!(range_bytes(p5, a.arg("buffer").unwrap()), expected);
    // Without the flag, byte strings are copied, as for PyTorch's pickles.
    let v = pickle::read(p4, &numpy_rules().byte_ranges(false), &Limits::default()).unwrap();
    let a = v.get("w").and_then(Value::as_object).unwrap();
    let state = a.state.as_ref().and_then(Value::as_seq).unwrap();
    assert!(matches!(&state[4], Value::Bytes(b) if b.len() == 24));
    // Another encoding than latin1 is refused, naming it.
    let mut bad = p2.to_vec();
    let at = bad.windows(6).position(|w| w == b"latin1").unwrap();
    bad[at..at + 6].copy_from_slice(b"utf-16");
    let e = pickle::read(&bad, &numpy_rules(), &Limits::default()).unwrap_err();
    assert!(
        e.to_string().contains("encoding 'utf-16' is not allowed"),
        "{e}"
    );
}

#[test]
fn big_array_data_is_never_copied() {
    // A 64 MiB BINBYTES8 and a 64 MiB latin-1 text: nothing near their size is allocated.
    let n: u64 = 64 << 20;
    let mut p = b"\x80\x04\x8e".to_vec();
    p.extend_from_slice(&n.to_le_bytes());
    p.resize(p.len() + n as usize, 7);
    p.extend_from_slice(b"c_codecs\nencode\n\x8d");
    p.extend_from_slice(&n.to_le_bytes());
    p.resize(p.len() + n as usize, b'a');
    p.extend_from_slice(b"\x8c\x06latin1\x86R\x86.");
    let limits = Limits {
        max_header_bytes: 1 << 20,
        ..Limits::default()
    };
    LARGEST.with(|l| l.set(0));
    ARMED.with(|a| a.set(true));
    let r = pickle::read(&p, &numpy_rules(), &limits);
    ARMED.with(|a| a.set(false));
    let v = r.unwrap();
    assert!(LARGEST.with(|l| l.get()) < 1 << 20);
    let t = v.as_seq().unwrap();
    assert_eq!(pickle::data_len(Some(&t[0])), Some(n));
    assert_eq!(pickle::data_len(Some(&t[1])), Some(n));
    // Python 2 strings: short ones are text too (latin-1), long ones only a range.
    let py2 = b"(U\x02f4q\x00T\x00\x01\x00\x00";
    let mut p = py2.to_vec();
    p.resize(p.len() + 256, 0xe9);
    p.extend_from_slice(b"t.");
    let v = pickle::read(&p, &numpy_rules(), &Limits::default()).unwrap();
    let t = v.as_seq().unwrap();
    assert_eq!(t[0].as_str(), Some("f4"));
    assert_eq!(
        (t[1].as_str().map(str::len), pickle::data_len(Some(&t[1]))),
        (Some(512), Some(256))
    );
}

/// The rules of `numpy_rules` with every module path NumPy and Python 2 pickles name.
fn numpy_all_paths() -> Rules {
    numpy_rules()
        .allow_call(
            "numpy.core.multiarray._reconstruct",
            &["subtype", "shape", "typecode"],
        )
        .allow_call(
            "numpy.core.numeric._frombuffer",
            &["buffer", "dtype", "shape", "order"],
        )
        .allow_call("numpy._core.multiarray.scalar", &["dtype", "data"])
        .allow_call("numpy.core.multiarray.scalar", &["dtype", "data"])
}

fn is_array(o: &Object) -> bool {
    matches!(&*o.global.name, "_reconstruct" | "_frombuffer")
}

#[test]
fn numpy_pickles_by_the_real_tools() {
    // Every array of the fixtures (`tests/fixtures/numpy_pickle/generate.py`): found by its
    // path, its bytes left in the pickle, their SHA-256 NumPy's.
    let dir = fixtures().join("../numpy_pickle");
    let expected: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("arrays.json")).unwrap()).unwrap();
    let expected = expected.as_object().unwrap();
    assert_eq!(expected.len(), 5);
    for (file, arrays) in expected {
        let bytes = std::fs::read(dir.join(file)).unwrap();
        let v = pickle::read(&bytes, &numpy_all_paths(), &Limits::default())
            .unwrap_or_else(|e| panic!("{file}: {e}"));
        let found = pickle::find_objects(
            &v,
            &bytes,
            &is_array,
            &Limits::default(),
            pickle::memory_budget(0),
        )
        .unwrap();
        let arrays = arrays.as_object().unwrap();
        assert_eq!(found.len(), arrays.len(), "{file}");
        for (path, a) in found {
            let want = &arrays[&path];
            let data = match &*a.global.name {
                "_frombuffer" => a.arg("buffer"),
                _ => pickle::index(a.state.as_ref(), 4),
            };
            let data = data.unwrap();
            let got = range_bytes(&bytes, data);
            assert_eq!(
                got.len() as u64,
                want["nbytes"].as_u64().unwrap(),
                "{file} {path}"
            );
            let info = tensorfmt_core::TensorInfo::dense(
                "t",
                tensorfmt_core::DType::U8,
                vec![got.len() as u64],
                tensorfmt_core::Order::C,
                tensorfmt_core::ByteOrder::Little,
                tensorfmt_core::DataLocation::range(0, got.len() as u64),
            )
            .unwrap();
            let digest = tensorfmt_core::hash::tensor_sha256(&info, &got).unwrap();
            assert_eq!(
                tensorfmt_core::hash::hex(&digest),
                want["sha256"].as_str().unwrap(),
                "{file} {path}"
            );
            let dtype = match &*a.global.name {
                "_frombuffer" => a.arg("dtype"),
                _ => pickle::index(a.state.as_ref(), 2),
            };
            let dtype = dtype.and_then(Value::as_object).unwrap();
            assert_eq!(
                dtype.arg("descr").and_then(Value::as_str),
                want["descr"].as_str(),
                "{file} {path}"
            );
        }
    }
}

#[test]
fn latin1_text_beyond_u00ff_is_refused_when_read() {
    // `_codecs.encode('\u0100' * 300, 'latin1')`: Python refuses it when loading; the
    // index leaves it in the pickle, and reading it says why it cannot be had.
    let mut p = b"\x80\x02c_codecs\nencode\nX".to_vec();
    let text = "\u{100}".repeat(300);
    p.extend_from_slice(&(text.len() as u32).to_le_bytes());
    p.extend_from_slice(text.as_bytes());
    p.extend_from_slice(b"X\x06\x00\x00\x00latin1\x86R.");
    let v = pickle::read(&p, &numpy_rules(), &Limits::default()).unwrap();
    assert_eq!(pickle::data_len(Some(&v)), Some(300));
    let src = tensorfmt_core::Source::from_bytes(p.clone());
    let loc = pickle::data(Some(&v), 0, "data").unwrap();
    let info = tensorfmt_core::TensorInfo::dense(
        "t",
        tensorfmt_core::DType::U8,
        vec![300],
        tensorfmt_core::Order::C,
        tensorfmt_core::ByteOrder::Little,
        loc,
    )
    .unwrap();
    let mut out = tensorfmt_core::sink::OwnedSink::new();
    let e =
        tensorfmt_core::read::read_tensor(&src, &info, &mut out, &Default::default()).unwrap_err();
    assert!(e.to_string().contains("above U+00FF"), "{e}");
    // Without the byte-range rule the same pickle is refused at once.
    let e = pickle::read(&p, &numpy_rules().byte_ranges(false), &Limits::default()).unwrap_err();
    assert!(e.to_string().contains("outside latin-1"), "{e}");
}

/// Counts what is written.
struct Tally {
    len: u64,
}

impl std::io::Write for Tally {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.len += buf.len() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A 100 MB byte string streamed from a reader is never held: the largest allocation
/// made while writing is the payload's copy buffer, at both protocols.
#[test]
fn streamed_byte_strings_are_never_held_whole() {
    use std::io::{Read, Write};
    use tensorfmt_core::registry::Payload;
    const LEN: u64 = 100_000_000;
    let tree = Value::dict(vec![(s("w"), Value::stream(0, LEN))]);
    for proto in [4u8, 2] {
        let mut out = Tally { len: 0 };
        let mut source = |st: Stream, w: &mut dyn Write| {
            let mut r = std::io::repeat(0xab).take(st.len);
            Payload::Reader(&mut r).write_to(w, st.len, "w")
        };
        LARGEST.with(|l| l.set(0));
        ARMED.with(|a| a.set(true));
        let written =
            pickle::Writer::new()
                .protocol(proto)
                .write_streamed(&tree, &mut out, &mut source);
        ARMED.with(|a| a.set(false));
        written.unwrap();
        let largest = LARGEST.with(|l| l.get());
        assert!(
            largest <= 4 << 20,
            "protocol {proto}: {largest} bytes allocated at once"
        );
        // Protocol 2 writes each byte 0xab as two UTF-8 bytes (0xc2 0xab).
        let data = if proto == 4 { LEN } else { 2 * LEN };
        assert!(out.len > data && out.len < data + 100, "{}", out.len);
    }
}

/// An inert object of `__main__.X` made by `NEWOBJ` at protocol 2.
const INERT: &[u8] = b"c__main__\nX\n)\x81";

#[test]
fn inert_objects_record_calls_state_and_content() {
    // X() with state {'w': 1}, a list subclass given [2, 3], a dict subclass {'k': 4},
    // INST and OBJ: every call recorded, nothing run.
    let p = [
        b"\x80\x02(".as_slice(),
        INERT,
        b"}X\x01\x00\x00\x00wK\x01sb",
        INERT,
        b"(K\x02K\x03e",
        INERT,
        b"(X\x01\x00\x00\x00kK\x04u",
        b"(K\x05iposix\nsystem\n",
        b"(c__main__\nY\nK\x06o",
        b"t.",
    ]
    .concat();
    let v = pickle::read(&p, &Rules::new(), &Limits::default()).unwrap();
    let items = v.as_seq().unwrap();
    let o = |i: usize| items[i].as_object().unwrap();
    assert_eq!(
        (o(0).kind.clone(), &*o(0).global.path),
        (Kind::Inert, "__main__.X")
    );
    assert_eq!(
        o(0).state,
        Some(Value::dict(vec![(Value::str("w"), Value::Int(1))]))
    );
    assert_eq!(o(1).items, vec![Value::Int(2), Value::Int(3)]);
    assert_eq!(o(2).entries, vec![(Value::str("k"), Value::Int(4))]);
    assert_eq!(
        (&*o(3).global.path, &o(3).args[..]),
        ("posix.system", &[Value::Int(5)][..])
    );
    assert_eq!(
        (&*o(4).global.path, &o(4).args[..]),
        ("__main__.Y", &[Value::Int(6)][..])
    );
}

#[test]
fn hostile_inert_objects_give_clean_errors_in_bounded_memory() {
    let small = Limits {
        max_tree_bytes: Some(1 << 20),
        ..Limits::default()
    };
    // What the input declares never sizes an allocation: at most a small multiple of
    // the input (the machine's arenas grow with what it holds).
    let read = |p: &[u8], limits: &Limits| {
        let (r, largest) = read_armed_with(p, &Rules::new(), limits);
        assert!(
            largest < 16 * p.len() + (1 << 20),
            "one allocation of {largest} bytes"
        );
        r
    };
    // Deep: 100,000 objects, each the state of the one before.
    let n = 100_000;
    let deep = [
        b"\x80\x02".as_slice(),
        &[INERT, b"}X\x01\x00\x00\x00a".as_slice()]
            .concat()
            .repeat(n),
        b"N",
        &b"sb".repeat(n),
        b".",
    ]
    .concat();
    let e = read(&deep, &Limits::default()).unwrap_err();
    assert!(e.contains("nesting depth"), "{e}");
    // Wide: a million items appended to one object, past a budget of 1 MiB.
    let wide = [
        b"\x80\x02".as_slice(),
        INERT,
        b"(",
        &b"K\x01".repeat(1_000_000),
        b"e.",
    ]
    .concat();
    let e = read(&wide, &small).unwrap_err();
    assert!(e.contains("--max-tree-bytes") && e.contains("byte "), "{e}");
    // Memo amplification: one object referenced a million times, then made a tree.
    let amplified = [
        b"\x80\x02".as_slice(),
        INERT,
        b"}X\x01\x00\x00\x00aK\x01sbq\x000(",
        &b"h\x00".repeat(1_000_000),
        b"l.",
    ]
    .concat();
    let v = pickle::read(&amplified, &Rules::new(), &Limits::default()).unwrap();
    let e = pickle::to_tree(&v, &amplified, &mut |_| None, &small).unwrap_err();
    assert!(e.to_string().contains("--max-tree-bytes"), "{e}");
    // A cycle: an object whose state holds itself (BUILD into itself).
    let cycle = [
        b"\x80\x02".as_slice(),
        INERT,
        b"q\x00}X\x04\x00\x00\x00selfh\x00sb.",
    ]
    .concat();
    let e = read(&cycle, &Limits::default()).unwrap_err();
    assert!(e.contains("recursive"), "{e}");
}
