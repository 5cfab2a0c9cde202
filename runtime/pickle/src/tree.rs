//! A pickle's value DAG as an object tree ([`Node`]), and an object tree back as pickle
//! values: what lets a reader show the non-tensor content of a checkpoint and a writer
//! write nested dicts, lists and tuples around its tensors.

use std::collections::HashMap;

use super::rules::Kind;
use super::value::{held_bytes, ByteRange, Object, Value};
use tensorfmt_core::error::{ErrorKind, Result};
use tensorfmt_core::limits::Limits;
use tensorfmt_core::tree::Node;

/// The object tree of `root`, read from the pickle `buffer` (whose byte strings
/// [`Value::Range`]s point into: they become bytes, or text for a short Python 2 `str`).
/// `tensor_name` names the objects that are tensors of the index (they become
/// [`Node::Tensor`] leaves and are not walked into).
///
/// A NumPy scalar (`numpy.core.multiarray.scalar(dtype, data)`, or `numpy._core`) of a
/// boolean, integer or float dtype of either byte order is its value, as NumPy prints it
/// (`np.float32(0.1)` is `0.1`: the shortest decimal that reads back as the same
/// `float32`); other scalars stay calls.
///
/// Dict-kind objects (`OrderedDict`) become dicts (their `BUILD` state is dropped: a
/// `state_dict()`'s `_metadata`), list-, set- and tuple-kind objects lists and tuples.
/// A call that wraps exactly one argument holding a tensor (a parameter around its
/// tensor) is that argument; other calls and object-kind instances (TorchScript
/// modules) are [`Node::Object`]s with their arguments and state. Shared nodes are
/// expanded at each reference; at most `limits.max_pickle_ops` nodes are made and
/// `limits.max_depth` levels entered, and the tree is charged before each allocation to
/// the budget of the pickle's objects ([`Limits::tree_budget`] of the buffer's size),
/// from what `root` itself holds on (counted as the reader charged it): the value and
/// its tree together stay within it. Beyond that it fails with [`ErrorKind::Limit`].
pub fn to_tree(
    root: &Value,
    buffer: &[u8],
    tensor_name: &mut dyn FnMut(&Object) -> Option<String>,
    limits: &Limits,
) -> Result<Node> {
    let mut b = TreeBuilder {
        buffer,
        tensor_name,
        limits,
        made: 0,
        budget: limits.tree_budget(buffer.len() as u64),
        spent: held_bytes(root, limits.max_depth),
    };
    b.charge(NODE)?;
    b.node(root, 0)
}

struct TreeBuilder<'a> {
    buffer: &'a [u8],
    tensor_name: &'a mut dyn FnMut(&Object) -> Option<String>,
    limits: &'a Limits,
    made: u64,
    /// The bytes the tree may take, and those it takes (charged before allocating).
    budget: u64,
    spent: u64,
}

/// The bytes of one node (in its parent's vector).
const NODE: u64 = std::mem::size_of::<Node>() as u64;

impl TreeBuilder<'_> {
    fn charge(&mut self, bytes: u64) -> Result<()> {
        self.spent = self.spent.saturating_add(bytes);
        if self.spent > self.budget {
            return Err(super::over_budget(
                "object tree memory (--max-tree-bytes)",
                self.budget,
                self.spent,
            ));
        }
        Ok(())
    }

    /// `s` as an owned text, charged.
    fn text(&mut self, s: &str) -> Result<String> {
        self.charge(s.len() as u64)?;
        Ok(s.to_string())
    }

    /// The nodes of `items`, in a vector of exactly their number (what is charged).
    fn seq(&mut self, items: &[Value], depth: u64) -> Result<Vec<Node>> {
        self.charge(NODE.saturating_mul(items.len() as u64))?;
        let mut out = Vec::with_capacity(items.len());
        for v in items {
            out.push(self.node(v, depth + 1)?);
        }
        Ok(out)
    }

    /// The nodes of `entries`, in a vector of exactly their number (what is charged).
    fn pairs(&mut self, entries: &[(Value, Value)], depth: u64) -> Result<Vec<(Node, Node)>> {
        self.charge((2 * NODE).saturating_mul(entries.len() as u64))?;
        let mut out = Vec::with_capacity(entries.len());
        for (k, v) in entries {
            out.push((self.node(k, depth + 1)?, self.node(v, depth + 1)?));
        }
        Ok(out)
    }

    fn node(&mut self, v: &Value, depth: u64) -> Result<Node> {
        self.made += 1;
        if self.made > self.limits.max_pickle_ops {
            return Err(ErrorKind::Limit {
                what: "object tree nodes",
                limit: self.limits.max_pickle_ops,
                actual: self.made,
            }
            .into());
        }
        if depth > self.limits.max_depth {
            return Err(ErrorKind::Limit {
                what: "object tree depth",
                limit: self.limits.max_depth,
                actual: depth,
            }
            .into());
        }
        Ok(match v {
            Value::None => Node::None,
            Value::Bool(b) => Node::Bool(*b),
            Value::Int(i) => Node::Int(i128::from(*i)),
            Value::BigInt(_) => match v.as_i128() {
                Some(i) => Node::Int(i),
                None => Node::Other("<integer of more than 128 bits>".into()),
            },
            Value::Float(x) => Node::Float(*x),
            Value::Str(s) => Node::Str(self.text(s)?),
            Value::Bytes(b) => {
                self.charge(b.len() as u64)?;
                Node::Bytes(b.to_vec())
            }
            Value::Range(r) => match (
                &r.text,
                self.charge(r.stored).map(|_| range_bytes(self.buffer, r))?,
            ) {
                (Some(t), _) => Node::Str(t.to_string()),
                (None, Some(b)) => Node::Bytes(b),
                (None, None) => Node::Other(format!(
                    "<{} bytes at offset {} of the pickle>",
                    r.len, r.offset
                )),
            },
            Value::Tuple(items) => Node::Tuple(self.seq(items, depth)?),
            Value::List(items) | Value::Set(items) | Value::FrozenSet(items) => {
                Node::List(self.seq(items, depth)?)
            }
            Value::Dict(entries) => Node::Dict(self.pairs(entries, depth)?),
            Value::Global(g) => {
                self.charge((g.module.len() + g.name.len() + 1) as u64)?;
                Node::Global(g.to_string())
            }
            Value::Stream(s) => Node::Other(format!("<{} bytes streamed>", s.len)),
            Value::Persistent(id) => {
                Node::Other(format!("persistent_id({})", self.node(id, depth + 1)?))
            }
            Value::Object(o) => {
                if let Some(name) = (self.tensor_name)(o) {
                    return Ok(Node::Tensor(name));
                }
                if let Some(n) = numpy_scalar(o, self.buffer) {
                    return Ok(n);
                }
                if let Some(state) = o.state.as_ref().filter(|_| o.kind == Kind::Inert) {
                    if let Some(entries) = super::walk::module_state(state) {
                        return self.module(o, entries, depth);
                    }
                }
                match &o.kind {
                    Kind::Dict => Node::Dict(self.pairs(&o.entries, depth)?),
                    Kind::Tuple => Node::Tuple(self.seq(&o.items, depth)?),
                    Kind::List | Kind::Set => Node::List(self.seq(&o.items, depth)?),
                    Kind::Call { .. }
                    | Kind::Apply { .. }
                    | Kind::Class
                    | Kind::Object
                    | Kind::Inert => {
                        let args = self.seq(&o.args, depth)?;
                        let state = match &o.state {
                            Some(s) => {
                                self.charge(NODE)?;
                                Some(Box::new(self.node(s, depth + 1)?))
                            }
                            None => None,
                        };
                        let holding: Vec<usize> =
                            (0..args.len()).filter(|&i| args[i].has_tensor()).collect();
                        if !matches!(o.kind, Kind::Object | Kind::Inert)
                            && state.is_none()
                            && holding.len() == 1
                        {
                            let mut args = args;
                            return Ok(args.swap_remove(holding[0]));
                        }
                        self.charge((o.global.module.len() + o.global.name.len() + 1) as u64)?;
                        Node::Object {
                            class: o.global.to_string(),
                            args,
                            state,
                        }
                    }
                }
            }
        })
    }
}

impl TreeBuilder<'_> {
    /// A `torch.nn.Module` as its class with the state users know it by: its
    /// parameters, persistent buffers and submodules under their names (as
    /// `state_dict()` and `named_modules()` name them), then its attributes whose names
    /// do not start with `_` (`training` left out): the bookkeeping dicts of hooks and
    /// the like are not shown.
    fn module(&mut self, o: &Object, state: &[(Value, Value)], depth: u64) -> Result<Node> {
        let mut shown = super::walk::module_entries(state);
        shown.extend(state.iter().filter(|(k, _)| {
            k.as_str()
                .is_some_and(|k| !k.starts_with('_') && k != "training")
        }));
        self.charge((2 * NODE).saturating_mul(shown.len() as u64))?;
        let mut entries = Vec::with_capacity(shown.len());
        for (k, v) in shown {
            entries.push((self.node(k, depth + 1)?, self.node(v, depth + 1)?));
        }
        self.charge(NODE + (o.global.module.len() + o.global.name.len() + 1) as u64)?;
        Ok(Node::Object {
            class: o.global.to_string(),
            args: Vec::new(),
            state: Some(Box::new(Node::Dict(entries))),
        })
    }
}

/// The bytes of the byte string `r` of `buffer` (a latin-1 text decoded); `None` when
/// they are not all there or the text is not latin-1.
pub(crate) fn range_bytes(buffer: &[u8], r: &ByteRange) -> Option<Vec<u8>> {
    let start = usize::try_from(r.offset).ok()?;
    let stored = buffer.get(start..start.checked_add(usize::try_from(r.stored).ok()?)?)?;
    if !r.latin1 {
        return Some(stored.to_vec());
    }
    std::str::from_utf8(stored)
        .ok()?
        .chars()
        .map(|c| u8::try_from(u32::from(c)).ok())
        .collect()
}

/// The value of the NumPy scalar call `o` (see [`to_tree`]), when it is one of a bool,
/// integer or float dtype whose data has the dtype's size.
fn numpy_scalar(o: &Object, buffer: &[u8]) -> Option<Node> {
    let module = &*o.global.module;
    let is_scalar = matches!(module, "numpy.core.multiarray" | "numpy._core.multiarray")
        && &*o.global.name == "scalar";
    let (Some(Value::Object(dt)), Some(data)) = (o.args.first(), o.args.get(1)) else {
        return None;
    };
    if !is_scalar || &*dt.global.module != "numpy" || &*dt.global.name != "dtype" {
        return None;
    }
    let descr = dt.args.first()?.as_str()?;
    let big = match dt.state.as_ref().and_then(|s| s.as_seq()?.get(1)?.as_str()) {
        Some(">") => true,
        Some("<" | "|" | "=") | None => false,
        Some(_) => return None,
    };
    let mut bytes = match data {
        Value::Bytes(b) => b.to_vec(),
        Value::Range(r) => range_bytes(buffer, r)?,
        _ => return None,
    };
    let size = descr.get(1..)?.parse::<usize>().ok()?;
    if bytes.len() != size || !(1..=8).contains(&size) {
        return None;
    }
    if big {
        bytes.reverse();
    }
    let mut le = [0u8; 8];
    le[..size].copy_from_slice(&bytes);
    let bits = u64::from_le_bytes(le);
    let signed = |bits: u64| ((bits << (64 - 8 * size)) as i64) >> (64 - 8 * size);
    Some(match (descr.as_bytes()[0], size) {
        (b'b', 1) => Node::Bool(bits != 0),
        (b'u', _) => Node::Int(i128::from(bits)),
        (b'i', _) => Node::Int(i128::from(signed(bits))),
        (b'f', 2) => Node::Float(shortest_f16(half::f16::from_bits(bits as u16))),
        (b'f', 4) => {
            let x = f32::from_bits(bits as u32);
            Node::Float(x.to_string().parse().unwrap_or(f64::from(x)))
        }
        (b'f', 8) => Node::Float(f64::from_bits(bits)),
        _ => return None,
    })
}

/// The shortest decimal that reads back as `x` in half precision, as an `f64`.
fn shortest_f16(x: half::f16) -> f64 {
    let v = x.to_f64();
    if !v.is_finite() {
        return v;
    }
    (1..=5)
        .filter_map(|digits| format!("{v:.*e}", digits - 1).parse::<f64>().ok())
        .find(|d| half::f16::from_f64(*d) == x)
        .unwrap_or(v)
}

/// The pickle values of `tree`: dicts, lists, tuples, numbers, strings, bytes and `None`
/// as themselves, each [`Node::Tensor`] as `tensor(name)` gives it (the same name twice
/// gives the same shared value, so the pickle memoizes it). Objects, globals and
/// [`Node::Other`] values cannot be written: an error names their path, as it names a
/// value nested deeper than `Limits::default().max_depth` (which the reader refuses; the
/// conversion recurses no deeper).
pub fn from_tree(tree: &Node, tensor: &mut dyn FnMut(&str) -> Result<Value>) -> Result<Value> {
    let mut seen: HashMap<String, Value> = HashMap::new();
    let mut get = |name: &str| -> Result<Value> {
        if let Some(v) = seen.get(name) {
            return Ok(v.clone());
        }
        let v = tensor(name)?;
        seen.insert(name.to_string(), v.clone());
        Ok(v)
    };
    build(tree, "", 0, &mut get)
}

fn build(
    n: &Node,
    path: &str,
    depth: u64,
    tensor: &mut dyn FnMut(&str) -> Result<Value>,
) -> Result<Value> {
    let at = |i: &dyn std::fmt::Display| {
        if path.is_empty() {
            i.to_string()
        } else {
            format!("{path}.{i}")
        }
    };
    let max_depth = Limits::default().max_depth;
    if depth > max_depth {
        let place = if path.is_empty() { "<root>" } else { path };
        let e = tensorfmt_core::error::Error::from(ErrorKind::Limit {
            what: "nesting depth of the values to write (no reader of pickles reads deeper)",
            limit: max_depth,
            actual: depth,
        });
        return Err(e.in_field(place));
    }
    let d = depth + 1;
    Ok(match n {
        Node::None => Value::None,
        Node::Bool(b) => Value::Bool(*b),
        Node::Int(i) => Value::int(*i),
        Node::Float(x) => Value::Float(*x),
        Node::Str(s) => Value::str(s),
        Node::Bytes(b) => Value::Bytes(b.as_slice().into()),
        Node::List(v) => Value::List(
            v.iter()
                .enumerate()
                .map(|(i, n)| build(n, &at(&i), d, tensor))
                .collect::<Result<_>>()?,
        ),
        Node::Tuple(v) => Value::Tuple(
            v.iter()
                .enumerate()
                .map(|(i, n)| build(n, &at(&i), d, tensor))
                .collect::<Result<_>>()?,
        ),
        Node::Dict(e) => Value::Dict(
            e.iter()
                .map(|(k, v)| {
                    let part = tensorfmt_core::tree::key_text(k).unwrap_or_else(|| k.to_string());
                    Ok((build(k, path, d, tensor)?, build(v, &at(&part), d, tensor)?))
                })
                .collect::<Result<_>>()?,
        ),
        Node::Tensor(name) => tensor(name)?,
        Node::Typed { value, .. } => build(value, path, depth, tensor)?,
        Node::Global(_) | Node::Object { .. } | Node::Other(_) => {
            let place = if path.is_empty() { "<root>" } else { path };
            return Err(ErrorKind::Unsupported(format!(
                "the value at '{place}' ({n}) cannot be written: only dicts, lists, tuples, \
                 numbers, strings, bytes, None and tensors can"
            ))
            .into());
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{read, write, Global, Rules};

    fn tensor(n: i64) -> Value {
        Value::object(
            Object::new(
                Global::new("m", "tensor"),
                Kind::Call {
                    params: vec!["offset".into()].into(),
                },
            )
            .with_args(vec![Value::Int(n)]),
        )
    }

    fn name_of(o: &Object) -> Option<String> {
        (&*o.global.name == "tensor").then(|| format!("t{}", o.args[0].as_i64().unwrap()))
    }

    #[test]
    fn parameters_unwrap_and_objects_stay() {
        let param = Value::object(
            Object::new(
                Global::new("m", "parameter"),
                Kind::Call {
                    params: vec!["data".into(), "requires_grad".into()].into(),
                },
            )
            .with_args(vec![tensor(1), Value::Bool(true)]),
        );
        let module = Value::object(
            Object::new(Global::new("__torch__", "Net"), Kind::Object).with_state(Value::dict(
                vec![
                    (Value::str("training"), Value::Bool(true)),
                    (Value::str("w"), tensor(2)),
                ],
            )),
        );
        let root = Value::dict(vec![
            (Value::str("p"), param),
            (Value::str("net"), module),
            (Value::str("n"), Value::Int(3)),
        ]);
        let tree = to_tree(&root, &[], &mut name_of, &Limits::default()).unwrap();
        assert_eq!(tree.tensor_names(), ["t1", "t2"]);
        let values: Vec<String> = tree
            .values()
            .into_iter()
            .map(|(p, n)| format!("{p}={n}"))
            .collect();
        assert_eq!(values, ["net.training=True", "n=3"]);
        // Objects cannot be written back; plain containers can.
        let e = from_tree(&tree, &mut |_| Ok(Value::None)).unwrap_err();
        assert!(e.to_string().contains("'net'"), "{e}");
    }

    #[test]
    fn the_tree_is_charged_on_top_of_what_the_value_holds() {
        // A list of 10,000 lists of one shared string.
        let items = vec![Value::list(vec![Value::str("x")]); 10_000];
        let root = Value::list(items);
        let held = held_bytes(&root, 128);
        let node = std::mem::size_of::<Node>() as u64;
        let tree = 1 + 10_000 * 2 + 1;
        assert!(held > 10_000 * 24, "{held}");
        let limits = |n| Limits {
            max_tree_bytes: Some(n),
            ..Limits::default()
        };
        // The tree alone fits (its nodes, and a byte for each text), not with the value.
        let alone = tree * node + 10_000 + 1000;
        let e = to_tree(&root, &[], &mut |_| None, &limits(alone)).unwrap_err();
        assert!(e.to_string().contains("object tree memory"), "{e}");
        to_tree(&root, &[], &mut |_| None, &limits(held + alone)).unwrap();
        // A value shared a million times is counted once.
        let wide = Value::list(vec![root.clone(); 1_000_000]);
        assert!(held_bytes(&wide, 128) < held + (25 << 20));
    }

    #[test]
    fn trees_nested_past_the_readers_depth_are_not_written() {
        let mut deep = Node::None;
        for _ in 0..1000 {
            deep = Node::List(vec![deep]);
        }
        let e = from_tree(&deep, &mut |_| Ok(Value::None)).unwrap_err();
        assert!(e.to_string().contains("nesting depth"), "{e}");
        let mut ok = Node::None;
        for _ in 0..100 {
            ok = Node::List(vec![ok]);
        }
        from_tree(&ok, &mut |_| Ok(Value::None)).unwrap();
    }

    #[test]
    fn written_trees_read_back_with_shared_tensors() {
        let tree = Node::Dict(vec![
            (Node::str("a"), Node::Tensor("x".into())),
            (
                Node::str("b"),
                Node::List(vec![Node::Tensor("x".into()), Node::Float(0.5)]),
            ),
            (
                Node::Int(7),
                Node::Tuple(vec![Node::None, Node::Bytes(vec![1])]),
            ),
        ]);
        let mut calls = 0;
        let v = from_tree(&tree, &mut |n| {
            calls += 1;
            Ok(Value::tuple(vec![Value::str(n)]))
        })
        .unwrap();
        assert_eq!(calls, 1);
        let bytes = write(&v).unwrap();
        let rules = Rules::new().allow_codecs_encode();
        let back = read(&bytes, &rules, &Limits::default()).unwrap();
        let tree2 = to_tree(&back, &bytes, &mut |_| None, &Limits::default()).unwrap();
        assert_eq!(
            tree2.to_string(),
            "{'a': ('x',), 'b': [('x',), 0.5], 7: (None, b'\\x01')}"
        );
    }

    #[test]
    fn expansion_is_bounded() {
        let mut v = Value::list(vec![Value::Int(0)]);
        for _ in 0..40 {
            v = Value::list(vec![v.clone(), v]);
        }
        let limits = Limits {
            max_pickle_ops: 10_000,
            ..Limits::default()
        };
        let e = to_tree(&v, &[], &mut |_| None, &limits).unwrap_err();
        assert!(matches!(e.kind, ErrorKind::Limit { .. }), "{e}");
    }

    /// NumPy scalars as `pickle.dumps` writes them at protocols 2 and 4 (NumPy 2.4):
    /// `{'f': np.float32(0.1), 'i': np.int64(-3), 'b': np.bool_(True),
    /// 'h': np.float16(0.1), 'u': np.uint8(200), 'd': np.float64(2.5),
    /// 'c': np.complex64(1+2j)}`.
    const SCALARS_P2: &str = "80027d7100285801000000667101636e756d70792e5f636f72652e6d756c746961727261790a7363616c61720a7102636e756d70790a64747970650a71035802000000663471048988877105527106284b0358010000003c71074e4e4e4affffffff4affffffff4b0074710862635f636f646563730a656e636f64650a71095807000000c38dc38cc38c3d710a58060000006c6174696e31710b86710c52710d86710e52710f5801000000697110680268035802000000693871118988877112527113284b0368074e4e4e4affffffff4affffffff4b007471146268095810000000c3bdc3bfc3bfc3bfc3bfc3bfc3bfc3bf7115680b867116527117867118527119580100000062711a6802680358020000006231711b898887711c52711d284b0358010000007c711e4e4e4e4affffffff4affffffff4b0074711f6268095801000000017120680b8671215271228671235271245801000000687125680268035802000000663271268988877127527128284b0368074e4e4e4affffffff4affffffff4b007471296268095802000000662e712a680b86712b52712c86712d52712e580100000075712f680268035802000000753171308988877131527132284b03681e4e4e4e4affffffff4affffffff4b007471336268095802000000c3887134680b86713552713686713752713858010000006471396802680358020000006638713a898887713b52713c284b0368074e4e4e4affffffff4affffffff4b0074713d62680958080000000000000000000440713e680b86713f5271408671415271425801000000637143680268035802000000633871448988877145527146284b0368074e4e4e4affffffff4affffffff4b0074714762680958090000000000c2803f000000407148680b86714952714a86714b52714c752e";
    const SCALARS_P4: &str = "800495b2010000000000007d94288c0166948c166e756d70792e5f636f72652e6d756c74696172726179948c067363616c61729493948c056e756d7079948c0564747970659493948c02663494898887945294284b038c013c944e4e4e4affffffff4affffffff4b007494624304cdcccc3d94869452948c016994680468078c02693894898887945294284b03680b4e4e4e4affffffff4affffffff4b007494624308fdffffffffffffff94869452948c016294680468078c02623194898887945294284b038c017c944e4e4e4affffffff4affffffff4b0074946243010194869452948c016894680468078c02663294898887945294284b03680b4e4e4e4affffffff4affffffff4b007494624302662e94869452948c017594680468078c02753194898887945294284b03681c4e4e4e4affffffff4affffffff4b007494624301c894869452948c016494680468078c02663894898887945294284b03680b4e4e4e4affffffff4affffffff4b007494624308000000000000044094869452948c016394680468078c02633894898887945294284b03680b4e4e4e4affffffff4affffffff4b0074946243080000803f000000409486945294752e";

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn numpy_scalars_are_numbers() {
        let rules = Rules::new()
            .allow_call("numpy._core.multiarray.scalar", &["dt", "data"])
            .allow_call("numpy.dtype", &["descr", "align", "copy"])
            .allow_codecs_encode();
        for hex in [SCALARS_P2, SCALARS_P4] {
            let bytes = unhex(hex);
            for ranges in [false, true] {
                let rules = rules.clone().byte_ranges(ranges);
                let v = read(&bytes, &rules, &Limits::default()).unwrap();
                let tree = to_tree(&v, &bytes, &mut |_| None, &Limits::default()).unwrap();
                let text = tree.to_string();
                assert!(
                    text.starts_with("{'f': 0.1, 'i': -3, 'b': True, 'h': 0.1, 'u': 200, 'd': 2.5, 'c': numpy._core.multiarray.scalar("),
                    "{text}"
                );
            }
        }
    }

    #[test]
    fn big_endian_scalars_are_numbers() {
        let dtype = |descr: &str, order: &str| {
            Value::object(
                Object::new(
                    Global::new("numpy", "dtype"),
                    Kind::Call {
                        params: vec!["descr".into()].into(),
                    },
                )
                .with_args(vec![Value::str(descr)])
                .with_state(Value::tuple(vec![Value::Int(3), Value::str(order)])),
            )
        };
        let scalar = |dt: Value, data: &[u8]| {
            Value::object(
                Object::new(
                    Global::new("numpy.core.multiarray", "scalar"),
                    Kind::Call {
                        params: vec!["dt".into(), "data".into()].into(),
                    },
                )
                .with_args(vec![dt, Value::Bytes(data.into())]),
            )
        };
        let v = Value::list(vec![
            scalar(dtype("i2", ">"), &[0xff, 0xfe]),
            scalar(dtype("f4", ">"), &0.1f32.to_be_bytes()),
            scalar(dtype("u4", "<"), &7u32.to_le_bytes()),
            // A size the descr does not give: left as the call.
            scalar(dtype("f4", "<"), &[0, 0]),
        ]);
        let tree = to_tree(&v, &[], &mut |_| None, &Limits::default()).unwrap();
        let Node::List(items) = tree else {
            panic!("{tree}")
        };
        assert_eq!(items[0], Node::Int(-2));
        assert_eq!(items[1], Node::Float(0.1));
        assert_eq!(items[2], Node::Int(7));
        assert!(matches!(items[3], Node::Object { .. }), "{}", items[3]);
    }
}
