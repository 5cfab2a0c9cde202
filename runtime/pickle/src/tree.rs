//! A pickle's value DAG as an object tree ([`Node`]), and an object tree back as pickle
//! values: what lets a reader show the non-tensor content of a checkpoint and a writer
//! write nested dicts, lists and tuples around its tensors.

use std::collections::HashMap;

use super::rules::Kind;
use super::value::{Object, Value};
use tensorfmt_core::error::{ErrorKind, Result};
use tensorfmt_core::limits::Limits;
use tensorfmt_core::tree::Node;

/// The object tree of `root`. `tensor_name` names the objects that are tensors of the
/// index (they become [`Node::Tensor`] leaves and are not walked into).
///
/// Dict-kind objects (`OrderedDict`) become dicts (their `BUILD` state is dropped: a
/// `state_dict()`'s `_metadata`), list-, set- and tuple-kind objects lists and tuples.
/// A call that wraps exactly one argument holding a tensor (a parameter around its
/// tensor) is that argument; other calls and object-kind instances (TorchScript
/// modules) are [`Node::Object`]s with their arguments and state. Shared nodes are
/// expanded at each reference; at most `limits.max_pickle_ops` nodes are made and
/// `limits.max_depth` levels entered, beyond that it fails with [`ErrorKind::Limit`].
pub fn to_tree(
    root: &Value,
    tensor_name: &mut dyn FnMut(&Object) -> Option<String>,
    limits: &Limits,
) -> Result<Node> {
    let mut b = TreeBuilder {
        tensor_name,
        limits,
        made: 0,
    };
    b.node(root, 0)
}

struct TreeBuilder<'a> {
    tensor_name: &'a mut dyn FnMut(&Object) -> Option<String>,
    limits: &'a Limits,
    made: u64,
}

impl TreeBuilder<'_> {
    fn seq(&mut self, items: &[Value], depth: u64) -> Result<Vec<Node>> {
        items.iter().map(|v| self.node(v, depth + 1)).collect()
    }

    fn pairs(&mut self, entries: &[(Value, Value)], depth: u64) -> Result<Vec<(Node, Node)>> {
        entries
            .iter()
            .map(|(k, v)| Ok((self.node(k, depth + 1)?, self.node(v, depth + 1)?)))
            .collect()
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
            Value::Str(s) => Node::Str(s.to_string()),
            Value::Bytes(b) => Node::Bytes(b.to_vec()),
            Value::Range(r) => match &r.text {
                Some(t) => Node::Str(t.to_string()),
                None => Node::Other(format!(
                    "<{} bytes at offset {} of the pickle>",
                    r.len, r.offset
                )),
            },
            Value::Tuple(items) => Node::Tuple(self.seq(items, depth)?),
            Value::List(items) | Value::Set(items) | Value::FrozenSet(items) => {
                Node::List(self.seq(items, depth)?)
            }
            Value::Dict(entries) => Node::Dict(self.pairs(entries, depth)?),
            Value::Global(g) => Node::Global(g.to_string()),
            Value::Stream(s) => Node::Other(format!("<{} bytes streamed>", s.len)),
            Value::Persistent(id) => {
                Node::Other(format!("persistent_id({})", self.node(id, depth + 1)?))
            }
            Value::Object(o) => {
                if let Some(name) = (self.tensor_name)(o) {
                    return Ok(Node::Tensor(name));
                }
                match &o.kind {
                    Kind::Dict => Node::Dict(self.pairs(&o.entries, depth)?),
                    Kind::Tuple => Node::Tuple(self.seq(&o.items, depth)?),
                    Kind::List | Kind::Set => Node::List(self.seq(&o.items, depth)?),
                    Kind::Call { .. } | Kind::Class | Kind::Object => {
                        let args = self.seq(&o.args, depth)?;
                        let state = match &o.state {
                            Some(s) => Some(Box::new(self.node(s, depth + 1)?)),
                            None => None,
                        };
                        let holding: Vec<usize> =
                            (0..args.len()).filter(|&i| args[i].has_tensor()).collect();
                        if o.kind != Kind::Object && state.is_none() && holding.len() == 1 {
                            let mut args = args;
                            return Ok(args.swap_remove(holding[0]));
                        }
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

/// The pickle values of `tree`: dicts, lists, tuples, numbers, strings, bytes and `None`
/// as themselves, each [`Node::Tensor`] as `tensor(name)` gives it (the same name twice
/// gives the same shared value, so the pickle memoizes it). Objects, globals and
/// [`Node::Other`] values cannot be written: an error names their path.
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
    build(tree, "", &mut get)
}

fn build(n: &Node, path: &str, tensor: &mut dyn FnMut(&str) -> Result<Value>) -> Result<Value> {
    let at = |i: &dyn std::fmt::Display| {
        if path.is_empty() {
            i.to_string()
        } else {
            format!("{path}.{i}")
        }
    };
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
                .map(|(i, n)| build(n, &at(&i), tensor))
                .collect::<Result<_>>()?,
        ),
        Node::Tuple(v) => Value::Tuple(
            v.iter()
                .enumerate()
                .map(|(i, n)| build(n, &at(&i), tensor))
                .collect::<Result<_>>()?,
        ),
        Node::Dict(e) => Value::Dict(
            e.iter()
                .map(|(k, v)| {
                    let part = tensorfmt_core::tree::key_text(k).unwrap_or_else(|| k.to_string());
                    Ok((build(k, path, tensor)?, build(v, &at(&part), tensor)?))
                })
                .collect::<Result<_>>()?,
        ),
        Node::Tensor(name) => tensor(name)?,
        Node::Typed { value, .. } => build(value, path, tensor)?,
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
        let tree = to_tree(&root, &mut name_of, &Limits::default()).unwrap();
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
        let tree2 = to_tree(&back, &mut |_| None, &Limits::default()).unwrap();
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
        let e = to_tree(&v, &mut |_| None, &limits).unwrap_err();
        assert!(matches!(e.kind, ErrorKind::Limit { .. }), "{e}");
    }
}
