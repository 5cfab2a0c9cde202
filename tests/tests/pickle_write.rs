//! The pickle writer against CPython and NumPy (the pinned environment): plain values
//! written at protocols 2 and 4 load equal, the protocol-4 pickles byte for byte what
//! `pickle.dumps(value, protocol=4)` writes; NumPy arrays built as values (the
//! `_reconstruct` call, `ndarray`, the `dtype` call and the states NumPy writes) with
//! their data streamed from payloads load as the equal arrays, at both protocols, and a
//! dict of them at protocol 4 is byte for byte what `pickle.dumps` writes. The same
//! through `pickle::Arrays`, the writer's loop of a file that is one pickle holding its
//! arrays' bytes (spooled, then streamed from the spool): equal arrays at both protocols,
//! protocol 4 by default and byte for byte CPython's, nested structure and plain values
//! kept, byte order swapped when the objects say so, memory bounded by its buffers.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use tensorfmt::{ByteOrder, DType, Node, Order, Payload, TensorMeta, WriteOptions};
use tensorfmt_runtime::pickle::{Arrays, Global, Kind, Object, Stream, Value, Writer};
use tensorfmt_tests::{alloc, python_snippet};

#[global_allocator]
static GLOBAL: alloc::Counting = alloc::Counting;

fn s(text: &str) -> Value {
    Value::str(text)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A Python expression that evaluates to `v` (plain values only).
fn py(v: &Value) -> String {
    let seq = |items: &[Value]| items.iter().map(py).collect::<Vec<_>>().join(", ");
    match v {
        Value::None => "None".into(),
        Value::Bool(b) => if *b { "True" } else { "False" }.into(),
        Value::Int(i) => i.to_string(),
        Value::BigInt(b) => format!(
            "int.from_bytes(bytes.fromhex('{}'), 'little', signed=True)",
            hex(b)
        ),
        Value::Float(f) => format!(
            "struct.unpack('>d', bytes.fromhex('{:016x}'))[0]",
            f.to_bits()
        ),
        Value::Str(t) => format!("bytes.fromhex('{}').decode('utf-8')", hex(t.as_bytes())),
        Value::Bytes(b) => format!("bytes.fromhex('{}')", hex(b)),
        Value::Tuple(t) => format!("tuple([{}])", seq(t)),
        Value::List(l) => format!("[{}]", seq(l)),
        Value::Set(x) => format!("set([{}])", seq(x)),
        Value::FrozenSet(x) => format!("frozenset([{}])", seq(x)),
        Value::Dict(d) => {
            let items: Vec<String> = d
                .iter()
                .map(|(k, v)| format!("{}: {}", py(k), py(v)))
                .collect();
            format!("{{{}}}", items.join(", "))
        }
        other => panic!("no Python literal for {other:?}"),
    }
}

fn ints(range: std::ops::Range<i64>) -> Vec<Value> {
    range.map(Value::Int).collect()
}

/// Plain values, none shared and no one-character string or byte string repeated
/// (CPython shares those, so its pickle of what it loaded would memoize them).
fn plain_values() -> Vec<Value> {
    let big = |v: i128| Value::int(v);
    let mut huge = vec![0u8; 40];
    huge[39] = 0x80;
    vec![
        Value::None,
        Value::Bool(true),
        Value::list(vec![
            Value::Bool(false),
            Value::Int(0),
            Value::Int(255),
            Value::Int(256),
            Value::Int(65535),
            Value::Int(65536),
            Value::Int(-1),
            Value::Int(-(1 << 31)),
            Value::Int((1 << 31) - 1),
            Value::Int(1 << 31),
            Value::Int(i64::MAX),
            Value::Int(i64::MIN),
            big(1 << 100),
            big(-(1 << 90)),
            Value::BigInt(huge.into()),
        ]),
        Value::list(vec![
            Value::Float(1.5),
            Value::Float(-0.0),
            Value::Float(f64::INFINITY),
            Value::Float(1e300),
        ]),
        Value::list(vec![
            s(""),
            s("a"),
            s("héllo"),
            s("\u{1F600} wide"),
            s(&"x".repeat(300)),
            s(&"long text ".repeat(7000)),
        ]),
        Value::list(vec![
            Value::Bytes(Arc::from(Vec::new())),
            Value::Bytes(Arc::from(vec![0u8, 0xff])),
            Value::Bytes(Arc::from((0..300).map(|i| i as u8).collect::<Vec<_>>())),
            Value::Bytes(Arc::from(
                (0..70_000).map(|i| (i * 7) as u8).collect::<Vec<_>>(),
            )),
        ]),
        Value::list(vec![
            Value::tuple(vec![]),
            Value::tuple(ints(1..2)),
            Value::tuple(ints(2..4)),
            Value::tuple(ints(4..7)),
            Value::tuple(ints(7..12)),
            Value::list(vec![]),
            Value::list(vec![Value::list(ints(20..22)), Value::dict(vec![])]),
        ]),
        Value::list(ints(0..2500)),
        Value::list(ints(0..1001)),
        Value::dict((0..1001).map(|i| (Value::Int(i), Value::Int(-i))).collect()),
        Value::dict(vec![
            (s("key one"), Value::Int(1)),
            (Value::tuple(ints(3..5)), Value::None),
            (Value::Int(7), s("seven")),
        ]),
        Value::list(vec![
            Value::Set(Arc::from(Vec::new())),
            Value::Set(Arc::from(ints(1..4))),
            Value::Set(Arc::from(ints(0..1500))),
            Value::FrozenSet(Arc::from(Vec::new())),
            Value::FrozenSet(Arc::from(ints(10..12))),
        ]),
        // Many small values across frame boundaries.
        Value::list((0..30_000).map(|i| s(&format!("item {i}"))).collect()),
        Value::dict(
            (0..5000)
                .map(|i| {
                    let inner = Value::tuple(vec![Value::Int(i), Value::Float(i as f64 / 3.0)]);
                    (
                        s(&format!("k{i}")),
                        Value::list(vec![inner, s(&"v".repeat(i as usize % 40 + 2))]),
                    )
                })
                .collect(),
        ),
    ]
}

fn run(code: &str, args: &[&str]) {
    let (ok, out) = python_snippet(code, args);
    assert!(ok, "{out}");
    eprintln!("{out}");
}

const PLAIN_CHECK: &str = r#"
import os, pickle, struct, sys
d = sys.argv[1]
n = 0
for name in sorted(os.listdir(d)):
    if not name.endswith('.expr'):
        continue
    stem = name[:-5]
    want = eval(open(os.path.join(d, name)).read())
    for proto in (2, 4):
        data = open(os.path.join(d, f'{stem}.p{proto}'), 'rb').read()
        got = pickle.loads(data)
        assert type(got) is type(want) and got == want and repr(got) == repr(want), (stem, proto)
        if proto == 4:
            again = pickle.dumps(got, protocol=4)
            assert again == data, (stem, len(again), len(data), next(
                i for i in range(min(len(again), len(data))) if again[i] != data[i]))
        n += 1
print('checked', n)
"#;

#[test]
fn plain_values_load_equal_and_protocol_4_is_what_cpython_writes() {
    let dir = tempfile::tempdir().unwrap();
    for (i, v) in plain_values().iter().enumerate() {
        std::fs::write(dir.path().join(format!("{i:03}.expr")), py(v)).unwrap();
        for proto in [2u8, 4] {
            let bytes = Writer::new().protocol(proto).write(v).unwrap();
            std::fs::write(dir.path().join(format!("{i:03}.p{proto}")), bytes).unwrap();
        }
    }
    run(PLAIN_CHECK, &[dir.path().to_str().unwrap()]);
}

/// The globals and shared parts of NumPy pickles, shared as CPython shares them (the
/// one-character strings and byte strings, a dtype's object among arrays of it).
struct Numpy {
    dtypes: Vec<(String, Value)>,
    b: Value,
    orders: Vec<(char, Value)>,
}

impl Numpy {
    fn new() -> Self {
        Numpy {
            dtypes: Vec::new(),
            b: Value::Bytes(Arc::from(&b"b"[..])),
            orders: Vec::new(),
        }
    }

    fn call(path: &str, args: Vec<Value>, state: Value) -> Value {
        let (module, name) = path.rsplit_once('.').unwrap();
        let kind = Kind::Call {
            params: Arc::from(Vec::new()),
        };
        Value::object(
            Object::new(Global::new(module, name), kind)
                .with_args(args)
                .with_state(state),
        )
    }

    /// `numpy.dtype(name, False, True)` with state `(3, order, None, None, None, -1, -1,
    /// 0)`, one object per distinct dtype.
    fn dtype(&mut self, name: &str, order: char) -> Value {
        let key = format!("{order}{name}");
        if let Some((_, v)) = self.dtypes.iter().find(|(k, _)| *k == key) {
            return v.clone();
        }
        let order_str = match self.orders.iter().find(|(c, _)| *c == order) {
            Some((_, v)) => v.clone(),
            None => {
                let v = s(&order.to_string());
                self.orders.push((order, v.clone()));
                v
            }
        };
        let state = Value::tuple(vec![
            Value::Int(3),
            order_str,
            Value::None,
            Value::None,
            Value::None,
            Value::Int(-1),
            Value::Int(-1),
            Value::Int(0),
        ]);
        let args = vec![s(name), Value::Bool(false), Value::Bool(true)];
        let v = Self::call("numpy.dtype", args, state);
        self.dtypes.push((key, v.clone()));
        v
    }

    /// `_reconstruct(ndarray, (0,), b'b')` with state `(1, shape, dtype, fortran, data)`.
    fn array(&mut self, dtype: Value, shape: &[u64], fortran: bool, data: Value) -> Value {
        let args = vec![
            Value::global("numpy.ndarray"),
            Value::tuple(vec![Value::Int(0)]),
            self.b.clone(),
        ];
        let state = Value::tuple(vec![
            Value::Int(1),
            Value::int_tuple(shape),
            dtype,
            Value::Bool(fortran),
            data,
        ]);
        Self::call("numpy._core.multiarray._reconstruct", args, state)
    }
}

/// An array to write: name, NumPy dtype (kind and size, byte order), shape, Fortran order.
struct Case {
    name: &'static str,
    dtype: &'static str,
    order: char,
    shape: &'static [u64],
    fortran: bool,
}

/// A [`Case`] in one line.
const fn case(
    name: &'static str,
    dtype: &'static str,
    order: char,
    shape: &'static [u64],
    fortran: bool,
) -> Case {
    Case {
        name,
        dtype,
        order,
        shape,
        fortran,
    }
}

const CASES: &[Case] = &[
    case("f4", "f4", '<', &[2, 3], false),
    case("f4_big_endian", "f4", '>', &[5], false),
    case("f8_fortran", "f8", '<', &[2, 3, 4], true),
    case("f2", "f2", '<', &[7], false),
    case("i8", "i8", '<', &[3, 2], false),
    case("i4_big_endian", "i4", '>', &[4], false),
    case("i2", "i2", '<', &[3], false),
    case("i1", "i1", '|', &[9], false),
    case("u1_fortran", "u1", '|', &[3, 5], true),
    case("u2", "u2", '<', &[2], false),
    case("u4", "u4", '<', &[2, 2], false),
    case("u8_big_endian", "u8", '>', &[3], false),
    case("bool", "b1", '|', &[6], false),
    case("c8", "c8", '<', &[2], false),
    case("c16", "c16", '<', &[2, 1], false),
    case("scalar", "f8", '<', &[], false),
    case("empty", "f4", '<', &[0, 3], false),
    case("large", "f4", '<', &[300, 100], false),
    case("large_high_bytes", "u1", '|', &[70_000], false),
];

/// The bytes of a case: a pattern with every byte value (0/1 for booleans), with no NaN
/// for floats (the high byte of each element kept below 0x7f).
fn data_of(c: &Case) -> Vec<u8> {
    let size: usize = c.dtype[1..].parse().unwrap();
    let n = c.shape.iter().product::<u64>() as usize * size;
    (0..n)
        .map(|i| match c.dtype {
            "b1" => (i % 3 == 0) as u8,
            d if d.starts_with('f') || d.starts_with('c') => {
                let top = if c.order == '>' {
                    i % size == 0
                } else {
                    i % size == size - 1
                };
                if top {
                    (i % 0x3f) as u8
                } else {
                    (i * 37 + 11) as u8
                }
            }
            _ => (i * 37 + 11) as u8,
        })
        .collect()
}

const NUMPY_CHECK: &str = r#"
import os, pickle, sys
import numpy as np
d, names = sys.argv[1], sys.argv[2].split(',')
for proto in (2, 4):
    got = pickle.load(open(os.path.join(d, f'arrays.p{proto}'), 'rb'))
    assert list(got) == names, (proto, list(got))
    for name in names:
        spec = open(os.path.join(d, name + '.spec')).read().split()
        dt, fortran = np.dtype(spec[0]), spec[1] == 'F'
        shape = tuple(int(x) for x in spec[2:])
        raw = open(os.path.join(d, name + '.raw'), 'rb').read()
        want = np.frombuffer(raw, dtype=dt).reshape(shape, order='F' if fortran else 'C')
        a = got[name]
        # What NumPy loads from its own pickle of the array (at protocols 2 and 4 it
        # loads big-endian arrays in native order).
        ref = pickle.loads(pickle.dumps(want, protocol=proto))
        assert type(a) is np.ndarray, (proto, name, type(a))
        assert a.dtype.str == ref.dtype.str and a.shape == shape, (proto, name, a.dtype, a.shape)
        assert a.dtype.newbyteorder('<') == dt.newbyteorder('<'), (proto, name, a.dtype)
        assert np.array_equal(a, want) and np.array_equal(a, ref), (proto, name)
        assert a.tobytes(order='A') == ref.tobytes(order='A'), (proto, name)
        assert (a.flags.f_contiguous, a.flags.c_contiguous) == (ref.flags.f_contiguous, ref.flags.c_contiguous), (proto, name)
        if a.ndim > 1 and min(a.shape) > 1:
            assert a.flags.f_contiguous == fortran and a.flags.c_contiguous != fortran, (proto, name)
print('checked', len(names), 'arrays at protocols 2 and 4')
"#;

/// Writes what [`NUMPY_CHECK`] expects of case `c` into `dir`: its `bytes` (`NAME.raw`)
/// and its dtype, order and shape (`NAME.spec`).
fn write_expected(dir: &Path, c: &Case, bytes: &[u8]) {
    std::fs::write(dir.join(format!("{}.raw", c.name)), bytes).unwrap();
    let shape: Vec<String> = c.shape.iter().map(u64::to_string).collect();
    let spec = format!(
        "{}{} {} {}",
        c.order,
        c.dtype,
        if c.fortran { "F" } else { "C" },
        shape.join(" ")
    );
    std::fs::write(dir.join(format!("{}.spec", c.name)), spec).unwrap();
}

/// The arrays' tree with one stream per case, and their bytes.
fn arrays(np: &mut Numpy, cases: &[&Case]) -> (Value, Vec<Vec<u8>>) {
    let mut entries = Vec::new();
    let mut data = Vec::new();
    for (i, c) in cases.iter().enumerate() {
        let bytes = data_of(c);
        let dtype = np.dtype(c.dtype, c.order);
        let stream = Value::stream(i, bytes.len() as u64);
        entries.push((s(c.name), np.array(dtype, c.shape, c.fortran, stream)));
        data.push(bytes);
    }
    (Value::dict(entries), data)
}

/// Writes `tree` with its streams taken from payloads over `data`.
fn write_streamed(tree: &Value, data: &[Vec<u8>], proto: u8, path: &Path) {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut streams = |st: Stream, w: &mut dyn Write| {
        let mut r = &data[st.index][..];
        Payload::Reader(&mut r).write_to(w, st.len, "data")
    };
    Writer::new()
        .protocol(proto)
        .write_streamed(tree, &mut out, &mut streams)
        .unwrap();
}

#[test]
fn numpy_arrays_with_streamed_data_load_equal() {
    let dir = tempfile::tempdir().unwrap();
    let cases: Vec<&Case> = CASES.iter().collect();
    let (tree, data) = arrays(&mut Numpy::new(), &cases);
    for (c, bytes) in cases.iter().zip(&data) {
        write_expected(dir.path(), c, bytes);
    }
    for proto in [2, 4] {
        write_streamed(
            &tree,
            &data,
            proto,
            &dir.path().join(format!("arrays.p{proto}")),
        );
    }
    let names: Vec<&str> = cases.iter().map(|c| c.name).collect();
    run(
        NUMPY_CHECK,
        &[dir.path().to_str().unwrap(), &names.join(",")],
    );
}

const NUMPY_SAME: &str = r#"
import pickle, sys
import numpy as np
data = open(sys.argv[1], 'rb').read()
want = {
    'a': np.arange(6, dtype='<i8').reshape(2, 3),
    'b': np.arange(70000, dtype='<f4').reshape(350, 200),
    'c': np.asfortranarray(np.arange(12, dtype='<i8').reshape(3, 4)),
    'd': np.array(2.5),
    'e': np.zeros((0,), dtype='<f4'),
}
mine = pickle.dumps(want, protocol=4)
assert mine == data, (len(mine), len(data), next(
    (i for i in range(min(len(mine), len(data))) if mine[i] != data[i]), None))
print('identical', len(data), 'bytes')
"#;

/// One of [`NUMPY_SAME`]'s arrays: name, little-endian NumPy dtype, shape, Fortran order.
type Spec = (&'static str, &'static str, &'static [u64], bool);

/// The arrays of [`NUMPY_SAME`], in its order, and their bytes as NumPy stores them.
fn same_arrays() -> ([Spec; 5], [Vec<u8>; 5]) {
    let le = |v: Vec<i64>| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let f4: Vec<u8> = (0..70_000).flat_map(|x| (x as f32).to_le_bytes()).collect();
    // Fortran order: the bytes of arange(12).reshape(3, 4) by columns.
    let fortran: Vec<i64> = (0..4)
        .flat_map(|j| (0..3).map(move |i| i * 4 + j))
        .collect();
    let specs = [
        ("a", "i8", &[2, 3][..], false),
        ("b", "f4", &[350, 200], false),
        ("c", "i8", &[3, 4], true),
        ("d", "f8", &[], false),
        ("e", "f4", &[0], false),
    ];
    let data = [
        le((0..6).collect()),
        f4,
        le(fortran),
        2.5f64.to_le_bytes().to_vec(),
        Vec::new(),
    ];
    (specs, data)
}

#[test]
fn numpy_dict_at_protocol_4_is_what_cpython_writes() {
    let mut np = Numpy::new();
    let (specs, data) = same_arrays();
    let mut entries = Vec::new();
    for (i, ((name, dtype, shape, fortran), bytes)) in specs.iter().zip(&data).enumerate() {
        let dtype = np.dtype(dtype, '<');
        let stream = Value::stream(i, bytes.len() as u64);
        entries.push((s(name), np.array(dtype, shape, *fortran, stream)));
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("same.pkl");
    write_streamed(&Value::dict(entries), &data, 4, &path);
    run(NUMPY_SAME, &[path.to_str().unwrap()]);
}

/// The tensorfmt dtype of a NumPy `descr` of the cases.
fn dtype_of(descr: &str) -> DType {
    match descr {
        "f2" => DType::F16,
        "f4" => DType::F32,
        "f8" => DType::F64,
        "i1" => DType::I8,
        "i2" => DType::I16,
        "i4" => DType::I32,
        "i8" => DType::I64,
        "u1" => DType::U8,
        "u2" => DType::U16,
        "u4" => DType::U32,
        "u8" => DType::U64,
        "b1" => DType::Bool,
        "c8" => DType::C64,
        "c16" => DType::C128,
        other => panic!("no dtype for {other}"),
    }
}

/// The tensor of a case, in its byte order and order.
fn meta_of(name: &str, descr: &str, order: char, shape: &[u64], fortran: bool) -> TensorMeta {
    TensorMeta {
        name: name.to_string(),
        dtype: dtype_of(descr),
        shape: shape.to_vec(),
        order: if fortran { Order::Fortran } else { Order::C },
        byte_order: if order == '>' {
            ByteOrder::Big
        } else {
            ByteOrder::Little
        },
    }
}

fn options(protocol: Option<u8>) -> WriteOptions {
    WriteOptions {
        pickle_protocol: protocol,
        ..Default::default()
    }
}

/// Adds a case through `Arrays`: its object built around the `Value::Stream` of the
/// tensor's bytes that the writer gives, its bytes streamed from a reader.
fn add_case(a: &mut Arrays, np: &mut Numpy, c: &Case, bytes: &[u8]) {
    let meta = meta_of(c.name, c.dtype, c.order, c.shape, c.fortran);
    let dtype = np.dtype(c.dtype, c.order);
    let object = np.array(dtype, c.shape, c.fortran, a.data(&meta).unwrap());
    let mut r = bytes;
    a.add(&meta, object, Payload::Reader(&mut r), meta.byte_order)
        .unwrap();
}

#[test]
fn arrays_writer_spools_then_streams_equal_arrays_at_protocols_2_and_4() {
    let dir = tempfile::tempdir().unwrap();
    let mut names = Vec::new();
    for proto in [2, 4] {
        let out = dir.path().join(format!("arrays.p{proto}"));
        let opts = WriteOptions {
            destination: Some(out.clone()),
            ..options(Some(proto))
        };
        let mut a = Arrays::new("pickle", &opts).unwrap();
        assert_eq!(a.protocol(), proto);
        let mut np = Numpy::new();
        names.clear();
        for c in CASES {
            let bytes = data_of(c);
            add_case(&mut a, &mut np, c, &bytes);
            names.push(c.name);
            if proto == 2 {
                write_expected(dir.path(), c, &bytes);
            }
        }
        let file = std::fs::File::create(&out).unwrap();
        a.finish(Value::None, std::io::BufWriter::new(file))
            .unwrap()
            .flush()
            .unwrap();
    }
    run(
        NUMPY_CHECK,
        &[dir.path().to_str().unwrap(), &names.join(",")],
    );
}

#[test]
fn arrays_writer_at_its_default_protocol_writes_what_cpython_writes() {
    let (specs, data) = same_arrays();
    let mut a = Arrays::new("pickle", &options(None)).unwrap();
    assert_eq!(a.protocol(), 4);
    for ((name, descr, shape, fortran), bytes) in specs.iter().zip(&data) {
        let meta = meta_of(name, descr, '<', shape, *fortran);
        // Each object built afresh, as a write rule builds it: the writer shares what
        // CPython shares.
        let mut np = Numpy::new();
        let dtype = np.dtype(descr, '<');
        let object = np.array(dtype, shape, *fortran, a.data(&meta).unwrap());
        a.add(&meta, object, Payload::Bytes(bytes), ByteOrder::Little)
            .unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("same.pkl");
    std::fs::write(&path, a.finish(Value::None, Vec::new()).unwrap()).unwrap();
    run(NUMPY_SAME, &[path.to_str().unwrap()]);
}

const NUMPY_NESTED: &str = r#"
import pickle, sys
import numpy as np
for path in sys.argv[1:]:
    got = pickle.load(open(path, 'rb'))
    want = {
        'model': {
            'w': np.arange(6, dtype='<f4').reshape(2, 3),
            'b': np.arange(4, dtype='<i4'),
        },
        'step': 3,
        'lr': 0.5,
        'name': 'run',
        'sizes': [1, (2, None)],
    }
    assert type(got) is dict and list(got) == list(want), (path, list(got))
    assert list(got['model']) == ['w', 'b'], (path, got['model'])
    for k in ('w', 'b'):
        a = got['model'][k]
        assert type(a) is np.ndarray and a.dtype.str == want['model'][k].dtype.str, (path, k, a.dtype)
        assert np.array_equal(a, want['model'][k]), (path, k, a)
    for k in ('step', 'lr', 'name', 'sizes'):
        assert got[k] == want[k] and type(got[k]) is type(want[k]), (path, k, got[k])
print('nested structure kept in', len(sys.argv) - 1, 'pickles')
"#;

#[test]
fn arrays_writer_keeps_a_structure_and_swaps_to_the_byte_order_the_objects_give() {
    let dir = tempfile::tempdir().unwrap();
    let tree = Node::Dict(vec![
        (
            Node::Str("model".into()),
            Node::Dict(vec![
                (Node::Str("w".into()), Node::Tensor("model.w".into())),
                (Node::Str("b".into()), Node::Tensor("model.b".into())),
            ]),
        ),
        (Node::Str("step".into()), Node::Int(3)),
        (Node::Str("lr".into()), Node::Float(0.5)),
        (Node::Str("name".into()), Node::Str("run".into())),
        (
            Node::Str("sizes".into()),
            Node::List(vec![
                Node::Int(1),
                Node::Tuple(vec![Node::Int(2), Node::None]),
            ]),
        ),
    ]);
    // `w` comes big-endian; its object says little-endian: the writer swaps it.
    let w: Vec<u8> = (0..6).flat_map(|x| (x as f32).to_be_bytes()).collect();
    let b: Vec<u8> = (0..4i32).flat_map(i32::to_le_bytes).collect();
    let mut paths = Vec::new();
    for proto in [2, 4] {
        let mut np = Numpy::new();
        let mut a = Arrays::new("pickle", &options(Some(proto))).unwrap();
        a.set_structure(&tree);
        let mw = meta_of("model.w", "f4", '>', &[2, 3], false);
        let f4 = np.dtype("f4", '<');
        let object = np.array(f4, &[2, 3], false, a.data(&mw).unwrap());
        a.add(&mw, object, Payload::Bytes(&w), ByteOrder::Little)
            .unwrap();
        let mb = meta_of("model.b", "i4", '<', &[4], false);
        let i4 = np.dtype("i4", '<');
        let object = np.array(i4.clone(), &[4], false, a.data(&mb).unwrap());
        // A name given twice is refused, and nothing of it is kept.
        let again = np.array(i4, &[4], false, a.data(&mb).unwrap());
        a.add(&mb, object, Payload::Bytes(&b), ByteOrder::Little)
            .unwrap();
        let err = a
            .add(&mb, again, Payload::Bytes(&b), ByteOrder::Little)
            .unwrap_err();
        assert!(err.to_string().contains("given twice"), "{err}");
        let path = dir.path().join(format!("nested.p{proto}"));
        std::fs::write(&path, a.finish(Value::None, Vec::new()).unwrap()).unwrap();
        paths.push(path.to_str().unwrap().to_string());
    }
    let args: Vec<&str> = paths.iter().map(String::as_str).collect();
    run(NUMPY_NESTED, &args);
}

#[test]
fn arrays_writer_refuses_other_protocols_and_a_structure_missing_a_tensor() {
    for p in [0, 1, 3, 5] {
        let err = Arrays::new("pickle", &options(Some(p))).unwrap_err();
        assert!(
            err.to_string().contains(&format!("pickle protocol {p}")),
            "{err}"
        );
    }
    let mut a = Arrays::new("pickle", &options(None)).unwrap();
    a.set_structure(&Node::Dict(vec![(
        Node::Str("x".into()),
        Node::Tensor("x".into()),
    )]));
    let meta = meta_of("y", "u1", '|', &[2], false);
    let object = Value::tuple(vec![a.data(&meta).unwrap()]);
    a.add(&meta, object, Payload::Bytes(&[1, 2]), ByteOrder::Little)
        .unwrap();
    let err = a.finish(Value::None, Vec::new()).unwrap_err();
    assert!(err.to_string().contains("'y'"), "{err}");
}

/// A reader of `len` bytes that allocates nothing.
struct Pattern(u64);

impl std::io::Read for Pattern {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = buf.len().min(usize::try_from(self.0).unwrap_or(usize::MAX));
        buf[..n]
            .iter_mut()
            .enumerate()
            .for_each(|(i, b)| *b = i as u8);
        self.0 -= n as u64;
        Ok(n)
    }
}

#[test]
fn arrays_writer_memory_is_bounded_by_its_buffers_not_the_tensors() {
    const LEN: u64 = 48 << 20;
    for proto in [2, 4] {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("big.pkl");
        let ((), largest) = alloc::armed(|| {
            let opts = WriteOptions {
                destination: Some(out.clone()),
                ..options(Some(proto))
            };
            let mut a = Arrays::new("pickle", &opts).unwrap();
            for name in ["a", "b"] {
                let meta = meta_of(name, "u1", '|', &[LEN], false);
                let object = Value::tuple(vec![a.data(&meta).unwrap()]);
                let mut r = Pattern(LEN);
                a.add(&meta, object, Payload::Reader(&mut r), ByteOrder::Little)
                    .unwrap();
            }
            let file = std::fs::File::create(&out).unwrap();
            a.finish(Value::None, std::io::BufWriter::new(file))
                .unwrap()
                .flush()
                .unwrap();
        });
        assert!(largest <= 8 << 20, "protocol {proto}: {largest} bytes");
        let size = std::fs::metadata(&out).unwrap().len();
        assert!(size > 2 * LEN, "protocol {proto}: {size} bytes");
    }
}
