//! Finding the objects of interest in a pickle's value DAG, with their names.

use std::borrow::Cow;
use std::collections::HashSet;

use super::rules::Kind;
use super::value::{Object, Value};
use tensorfmt_core::error::{ErrorKind, Result};
use tensorfmt_core::limits::Limits;

/// Every object reachable from `root` for which `is_target` is true, with its path, in
/// the order a depth-first walk meets them (the order of the unpickled object).
///
/// Paths follow the naming of README.md (*Tensor names and digests*): dict keys
/// (strings; integers, booleans and `None` as Python prints them) and list, tuple and
/// set indices, joined with `.` (`optimizer.state.0.exp_avg`). Dict-kind objects (`OrderedDict`) are walked like
/// dicts (their `BUILD` state is not), list-, set- and tuple-kind objects like lists.
/// Any other object that is not a target is transparent: its arguments are walked under
/// the object's own path, so a target wrapped in a call (a parameter wrapping a tensor)
/// takes the wrapper's path. An object-kind instance ([`Kind::Object`], a TorchScript
/// module) is transparent too, and its `BUILD` state, a dict of attributes, is walked like
/// a dict (`conv.weight`). A target is not walked into. Entries whose key is of another
/// type (a tuple, a float) are skipped: they have no name.
///
/// A shared node (the pickle's memo) reached again is walked again, so that a target
/// referenced under two names is listed twice, but a subtree found to hold no target is
/// remembered and skipped from then on. The walk visits at most `limits.max_pickle_ops`
/// nodes, goes at most `limits.max_depth` levels deep, and lists at most
/// `limits.max_tensors` objects, whose paths (kept three times by an index: the list, the
/// tensors' names, the object tree's names) take at most `budget` bytes
/// ([`Limits::tree_budget`] of the pickle's size); beyond that it fails with
/// [`ErrorKind::Limit`], before the memory is spent.
pub fn find_objects<'v>(
    root: &'v Value,
    is_target: &dyn Fn(&Object) -> bool,
    limits: &Limits,
    budget: u64,
) -> Result<Vec<(String, &'v Object)>> {
    let mut w = Walker {
        is_target,
        limits,
        budget,
        spent: 0,
        visited: 0,
        barren: HashSet::new(),
        out: Vec::new(),
    };
    let mut path = String::new();
    w.walk(root, &mut path, 0)?;
    Ok(w.out)
}

struct Walker<'a, 'v> {
    is_target: &'a dyn Fn(&Object) -> bool,
    limits: &'a Limits,
    /// The bytes the listed paths may take, and those they take.
    budget: u64,
    spent: u64,
    visited: u64,
    /// Addresses of shared nodes known to hold no target.
    barren: HashSet<usize>,
    out: Vec<(String, &'v Object)>,
}

/// The name of a dict key in a path, when it has one.
fn key_text(k: &Value) -> Option<Cow<'_, str>> {
    match k {
        Value::Str(_) | Value::Range(_) => k.as_str().map(Cow::Borrowed),
        Value::Int(_) | Value::BigInt(_) => k.as_i128().map(|v| Cow::Owned(v.to_string())),
        Value::Bool(b) => Some(Cow::Borrowed(if *b { "True" } else { "False" })),
        Value::None => Some(Cow::Borrowed("None")),
        _ => None,
    }
}

/// The address of a shared node, for the barren set.
fn address(v: &Value) -> Option<usize> {
    match v {
        Value::Tuple(a) | Value::List(a) | Value::Set(a) | Value::FrozenSet(a) => {
            Some(std::sync::Arc::as_ptr(a) as *const u8 as usize)
        }
        Value::Dict(a) => Some(std::sync::Arc::as_ptr(a) as *const u8 as usize),
        Value::Object(a) => Some(std::sync::Arc::as_ptr(a) as *const u8 as usize),
        _ => None,
    }
}

impl<'v> Walker<'_, 'v> {
    fn walk(&mut self, v: &'v Value, path: &mut String, depth: u64) -> Result<()> {
        self.visited += 1;
        if self.visited > self.limits.max_pickle_ops {
            return Err(ErrorKind::Limit {
                what: "pickle nodes walked",
                limit: self.limits.max_pickle_ops,
                actual: self.visited,
            }
            .into());
        }
        if depth > self.limits.max_depth {
            return Err(ErrorKind::Limit {
                what: "pickle nesting depth",
                limit: self.limits.max_depth,
                actual: depth,
            }
            .into());
        }
        let addr = address(v);
        if addr.is_some_and(|a| self.barren.contains(&a)) {
            return Ok(());
        }
        let before = self.out.len();
        match v {
            Value::Tuple(items)
            | Value::List(items)
            | Value::Set(items)
            | Value::FrozenSet(items) => self.items(items, path, depth)?,
            Value::Dict(entries) => self.entries(entries, path, depth)?,
            Value::Object(o) => {
                if (self.is_target)(o) {
                    if self.out.len() as u64 >= self.limits.max_tensors {
                        return Err(ErrorKind::Limit {
                            what: "tensors",
                            limit: self.limits.max_tensors,
                            actual: self.out.len() as u64 + 1,
                        }
                        .into());
                    }
                    let cost = 3 * (path.len() as u64 + 32);
                    self.spent = self.spent.saturating_add(cost);
                    if self.spent > self.budget {
                        return Err(super::over_budget(
                            "memory for tensor names (--max-tree-bytes)",
                            self.budget,
                            self.spent,
                        ));
                    }
                    self.out.push((path.clone(), o));
                    return Ok(());
                }
                match o.kind {
                    Kind::Dict => self.entries(&o.entries, path, depth)?,
                    Kind::List | Kind::Set | Kind::Tuple => self.items(&o.items, path, depth)?,
                    Kind::Call { .. } | Kind::Class | Kind::Object => {
                        for a in &o.args {
                            self.walk(a, path, depth + 1)?;
                        }
                        for (_, a) in &o.kwargs {
                            self.walk(a, path, depth + 1)?;
                        }
                        if o.kind == Kind::Object {
                            match &o.state {
                                Some(Value::Dict(entries)) => self.entries(entries, path, depth)?,
                                Some(state) => self.walk(state, path, depth + 1)?,
                                None => {}
                            }
                        }
                    }
                }
            }
            _ => {}
        }
        if self.out.len() == before {
            if let Some(a) = addr {
                self.barren.insert(a);
            }
        }
        Ok(())
    }

    fn step(&mut self, v: &'v Value, part: &str, path: &mut String, depth: u64) -> Result<()> {
        let len = path.len();
        if !path.is_empty() {
            path.push('.');
        }
        path.push_str(part);
        let r = self.walk(v, path, depth + 1);
        path.truncate(len);
        r
    }

    fn items(&mut self, items: &'v [Value], path: &mut String, depth: u64) -> Result<()> {
        for (i, item) in items.iter().enumerate() {
            self.step(item, &i.to_string(), path, depth)?;
        }
        Ok(())
    }

    fn entries(
        &mut self,
        entries: &'v [(Value, Value)],
        path: &mut String,
        depth: u64,
    ) -> Result<()> {
        for (k, item) in entries {
            if let Some(k) = key_text(k) {
                self.step(item, &k, path, depth)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Global, Object};

    fn tensor(n: i64) -> Value {
        let params = vec!["storage".to_string(), "offset".to_string()];
        Value::object(
            Object::new(
                Global::new("m", "tensor"),
                Kind::Call {
                    params: params.into(),
                },
            )
            .with_args(vec![Value::None, Value::Int(n)]),
        )
    }

    fn is_tensor(o: &Object) -> bool {
        &*o.global.name == "tensor"
    }

    fn names(v: &Value, limits: &Limits) -> Result<Vec<(String, i64)>> {
        Ok(
            find_objects(v, &is_tensor, limits, crate::memory_budget(0))?
                .into_iter()
                .map(|(p, o)| (p, o.arg("offset").and_then(Value::as_i64).unwrap()))
                .collect(),
        )
    }

    #[test]
    fn paths_join_keys_and_indices() {
        let param = Value::object(
            Object::new(
                Global::new("m", "parameter"),
                Kind::Call {
                    params: vec!["tensor".into()].into(),
                },
            )
            .with_args(vec![tensor(2), Value::Bool(true)]),
        );
        let od = Value::object(
            Object::new(Global::new("collections", "OrderedDict"), Kind::Dict)
                .with_entries(vec![(Value::str("w"), tensor(1)), (Value::str("p"), param)])
                .with_state(Value::dict(vec![(Value::str("_metadata"), tensor(99))])),
        );
        let root = Value::dict(vec![
            (Value::str("model"), od),
            (
                Value::str("state"),
                Value::dict(vec![(
                    Value::Int(0),
                    Value::list(vec![Value::Float(1.0), tensor(3)]),
                )]),
            ),
            (Value::tuple(vec![]), tensor(100)),
            (Value::str("epoch"), Value::Int(3)),
        ]);
        assert_eq!(
            names(&root, &Limits::default()).unwrap(),
            [
                ("model.w".to_string(), 1),
                ("model.p".to_string(), 2),
                ("state.0.1".to_string(), 3)
            ]
        );
        assert_eq!(
            names(&tensor(7), &Limits::default()).unwrap(),
            [(String::new(), 7)]
        );
    }

    #[test]
    fn shared_nodes_and_bounds() {
        // A target shared under two names is listed twice.
        let t = tensor(5);
        let root = Value::dict(vec![(Value::str("a"), t.clone()), (Value::str("b"), t)]);
        assert_eq!(names(&root, &Limits::default()).unwrap().len(), 2);
        // A DAG of 64 levels, each referencing the one below twice: 2^64 paths, but
        // target-free, so each level is walked once.
        let mut v = Value::list(vec![Value::Int(0)]);
        for _ in 0..64 {
            v = Value::list(vec![v.clone(), v]);
        }
        assert!(names(&v, &Limits::default()).unwrap().is_empty());
        // With a target at the bottom the walk is bounded.
        let mut v = tensor(1);
        for _ in 0..40 {
            v = Value::list(vec![v.clone(), v]);
        }
        let limits = Limits {
            max_pickle_ops: 10_000,
            ..Limits::default()
        };
        let e = names(&v, &limits).unwrap_err();
        assert!(matches!(e.kind, ErrorKind::Limit { .. }), "{e}");
        let limits = Limits {
            max_depth: 10,
            ..Limits::default()
        };
        assert!(names(&v, &limits).is_err());
    }
}
