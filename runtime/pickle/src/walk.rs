//! Finding the objects of interest in a pickle's value DAG, with their names.

use std::collections::{HashMap, HashSet};

use super::rules::Kind;
use super::value::{Object, Value};
use tensorfmt_core::error::{ErrorKind, Result};
use tensorfmt_core::limits::Limits;

/// Every object reachable from `root` for which `is_target` is true, with its path, in
/// the order a depth-first walk meets them (the order of the unpickled object).
///
/// Paths follow the naming of README.md (*Tensor names and digests*): dict keys and
/// list, tuple and set indices, joined with `.` (`optimizer.state.0.exp_avg`). A key
/// that is text is itself, an integer its decimal digits, any other key (a tuple, bytes,
/// a float, `None`, `True`) Python's `repr` of it (`(1, 'x')`, `b'k'`, `1.5`): every
/// entry has a name, and a target under any key is listed. Dict-kind objects
/// (`OrderedDict`) are walked like dicts (their `BUILD` state is not), list-, set- and
/// tuple-kind objects like lists. Any other object that is not a target is transparent:
/// its arguments are walked under the object's own path, so a target wrapped in a call
/// (a parameter wrapping a tensor) takes the wrapper's path. An object-kind instance
/// ([`Kind::Object`], a TorchScript module) is transparent too, and its `BUILD` state, a
/// dict of attributes, is walked like a dict (`conv.weight`). A target is not walked
/// into. A target inside a dict key (a tensor used as a key) is listed under the entry's
/// path too. `buffer` is the pickle, whose byte strings [`Value::Range`] keys point into.
///
/// Two targets that would take the same path (keys `1` and `'1'`, `'a.b'` and `'a'` then
/// `'b'`, two tensors in one wrapper call) are told apart: the first in walk order keeps
/// the path, each later one takes it with `#2`, `#3`, ... appended (the first of these
/// not already a path).
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
    buffer: &[u8],
    is_target: &dyn Fn(&Object) -> bool,
    limits: &Limits,
    budget: u64,
) -> Result<Vec<(String, &'v Object)>> {
    let mut w = Walker {
        buffer,
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
    unique(&mut w.out, &mut w.spent, w.budget)?;
    Ok(w.out)
}

/// Makes the paths of `out` unique (see [`find_objects`]), each suffix charged to `spent`
/// (at most `budget`).
fn unique(out: &mut [(String, &Object)], spent: &mut u64, budget: u64) -> Result<()> {
    let mut seen: HashSet<&str> = HashSet::with_capacity(out.len());
    let dups: Vec<usize> = (0..out.len())
        .filter(|&i| !seen.insert(out[i].0.as_str()))
        .collect();
    if dups.is_empty() {
        return Ok(());
    }
    // Per path taken twice, the next suffix to try: each is tried once.
    let mut next: HashMap<&str, u64> = HashMap::new();
    let mut added: HashSet<String> = HashSet::new();
    let mut renamed = Vec::with_capacity(dups.len());
    for i in dups {
        let base = out[i].0.as_str();
        let k = next.entry(base).or_insert(2);
        let name = loop {
            let name = format!("{base}#{k}");
            *k += 1;
            if !seen.contains(name.as_str()) && !added.contains(&name) {
                break name;
            }
        };
        *spent = spent.saturating_add(3 * (name.len() as u64 + 32));
        if *spent > budget {
            return Err(super::over_budget(
                "memory for tensor names (--max-tree-bytes)",
                budget,
                *spent,
            ));
        }
        added.insert(name.clone());
        renamed.push((i, name));
    }
    drop((seen, next));
    for (i, name) in renamed {
        out[i].0 = name;
    }
    Ok(())
}

struct Walker<'a, 'v> {
    /// The pickle, whose byte strings [`Value::Range`]s point into.
    buffer: &'a [u8],
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

/// The address of a shared node, for the barren set (`None` for a node referenced once,
/// which the walk cannot meet again).
fn address(v: &Value) -> Option<usize> {
    fn shared<T: ?Sized>(a: &std::sync::Arc<T>) -> Option<usize> {
        let address = std::sync::Arc::as_ptr(a).cast::<u8>() as usize;
        (std::sync::Arc::strong_count(a) > 1).then_some(address)
    }
    match v {
        Value::Tuple(a) | Value::List(a) | Value::Set(a) | Value::FrozenSet(a) => shared(a),
        Value::Dict(a) => shared(a),
        Value::Object(a) => shared(a),
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
                    Kind::Call { .. } | Kind::Apply { .. } | Kind::Class => {
                        self.arguments(o, path, depth)?
                    }
                    Kind::Object | Kind::Inert => self.instance(o, path, depth)?,
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

    /// The arguments of a call, walked under the call's own path.
    fn arguments(&mut self, o: &'v Object, path: &mut String, depth: u64) -> Result<()> {
        for a in &o.args {
            self.walk(a, path, depth + 1)?;
        }
        for (_, a) in &o.kwargs {
            self.walk(a, path, depth + 1)?;
        }
        Ok(())
    }

    /// An instance ([`Kind::Object`], [`Kind::Inert`]): a `torch.nn.Module` by its state
    /// dict ([`Walker::module`]); any other by its attributes (a state dict, or the
    /// `(dict, slots)` pair of a class with `__slots__`: each named by the attribute),
    /// then its arguments (under its own path: protocols 0 and 1 pass a list or dict
    /// subclass's content to `copyreg._reconstructor`), then the items and entries a
    /// list or dict subclass holds (protocols 2 and later append them).
    fn instance(&mut self, o: &'v Object, path: &mut String, depth: u64) -> Result<()> {
        if o.kind == Kind::Inert {
            if let Some(state) = o.state.as_ref().and_then(module_state) {
                return self.module(state, path, depth);
            }
        }
        match &o.state {
            Some(Value::Dict(entries)) => self.entries(entries, path, depth)?,
            Some(state) => match slots_state(state) {
                Some(parts) => {
                    for entries in parts.into_iter().flatten() {
                        self.entries(entries, path, depth)?;
                    }
                }
                None => self.walk(state, path, depth + 1)?,
            },
            None => {}
        }
        self.arguments(o, path, depth)?;
        self.items(&o.items, path, depth)?;
        self.entries(&o.entries, path, depth)
    }

    /// A `torch.nn.Module` (see [`module_state`]): what its `state_dict()` holds, named
    /// as it names them — each parameter, each buffer that is not in
    /// `_non_persistent_buffers_set`, then each submodule's, by their names joined with
    /// `.`. Entries set to `None` are left out, as `state_dict()` leaves them; nothing
    /// else of the module is walked.
    fn module(&mut self, state: &'v [(Value, Value)], path: &mut String, depth: u64) -> Result<()> {
        for (k, v) in module_entries(state) {
            if matches!(v, Value::None) || !self.may_hold(v) {
                continue;
            }
            if let Some(key) = k.as_str() {
                self.step(v, key, path, depth)?;
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
            let (in_key, in_item) = (self.may_hold(k), self.may_hold(item));
            if !in_key && !in_item {
                continue;
            }
            let len = path.len();
            if !path.is_empty() {
                path.push('.');
            }
            let r = self.key_name(k, path, depth).and_then(|()| {
                if in_key {
                    self.walk(k, path, depth + 1)?;
                }
                match in_item {
                    true => self.walk(item, path, depth + 1),
                    false => Ok(()),
                }
            });
            path.truncate(len);
            r?;
        }
        Ok(())
    }

    /// Whether `v` may hold a target: a container or an object not known to hold none.
    fn may_hold(&self, v: &Value) -> bool {
        match v {
            Value::Tuple(_)
            | Value::List(_)
            | Value::Set(_)
            | Value::FrozenSet(_)
            | Value::Dict(_)
            | Value::Object(_) => !address(v).is_some_and(|a| self.barren.contains(&a)),
            _ => false,
        }
    }

    /// Appends the name of the dict key `k` to `path` (see [`find_objects`]), its cost
    /// counted in the walk's bounds.
    fn key_name(&mut self, k: &Value, path: &mut String, depth: u64) -> Result<()> {
        match k {
            Value::Str(s) => path.push_str(s),
            Value::Range(r) if r.text.is_some() => path.push_str(r.text.as_deref().unwrap_or("")),
            Value::Int(i) => {
                use std::fmt::Write as _;
                let _ = write!(path, "{i}");
            }
            _ => {
                let left = self.budget.saturating_sub(self.spent) / 3;
                let mut repr = super::repr::Repr {
                    buffer: self.buffer,
                    max_len: path
                        .len()
                        .saturating_add(usize::try_from(left).unwrap_or(usize::MAX)),
                    nodes_left: self.limits.max_pickle_ops.saturating_sub(self.visited),
                    depth_left: self.limits.max_depth.saturating_sub(depth + 1),
                };
                let before = repr.nodes_left;
                let r = repr.write(k, path);
                self.visited += before - repr.nodes_left;
                r?;
            }
        }
        Ok(())
    }
}

/// The state dict of a `torch.nn.Module`: a dict (or dict-kind object) with the entries
/// `_parameters`, `_buffers` and `_modules`, each a dict, as `Module.__dict__` has them.
pub(crate) fn module_state(state: &Value) -> Option<&[(Value, Value)]> {
    let entries = dict_entries(state)?;
    let has = |name: &str| {
        entries
            .iter()
            .any(|(k, v)| k.as_str() == Some(name) && dict_entries(v).is_some())
    };
    (has("_parameters") && has("_buffers") && has("_modules")).then_some(entries)
}

/// The entries of a module's state dict (see [`module_state`]) that `state_dict()` is
/// made of, in its order: its parameters, its buffers but those named in
/// `_non_persistent_buffers_set`, then its submodules.
pub(crate) fn module_entries(state: &[(Value, Value)]) -> Vec<&(Value, Value)> {
    let field = |name: &str| {
        state
            .iter()
            .rev()
            .find(|(k, _)| k.as_str() == Some(name))
            .map(|(_, v)| v)
    };
    let transient = field("_non_persistent_buffers_set")
        .map(set_texts)
        .unwrap_or_default();
    let mut out = Vec::new();
    for (name, buffers) in [
        ("_parameters", false),
        ("_buffers", true),
        ("_modules", false),
    ] {
        let entries = field(name).and_then(dict_entries).unwrap_or_default();
        out.extend(
            entries
                .iter()
                .filter(|(k, _)| !(buffers && k.as_str().is_some_and(|k| transient.contains(&k)))),
        );
    }
    out
}

/// The entries of a dict or of a dict-kind object (`OrderedDict`).
fn dict_entries(v: &Value) -> Option<&[(Value, Value)]> {
    match v {
        Value::Dict(entries) => Some(entries),
        Value::Object(o) if o.kind == Kind::Dict => Some(&o.entries),
        _ => None,
    }
}

/// The texts of a set: a set or frozenset value (protocol 4), or the call
/// `builtins.set(list)` that protocol 2 pickles one as (read inertly or allowed).
fn set_texts(v: &Value) -> Vec<&str> {
    let items: &[Value] = match v {
        Value::Set(items) | Value::FrozenSet(items) => items,
        Value::Object(o) if matches!(&*o.global.name, "set" | "frozenset") => {
            match (o.items.is_empty(), o.args.first()) {
                (false, _) => &o.items,
                (true, Some(Value::List(items) | Value::Tuple(items))) => items,
                _ => &[],
            }
        }
        _ => &[],
    };
    items.iter().filter_map(Value::as_str).collect()
}

/// The entries of a dict.
type Entries<'a> = &'a [(Value, Value)];

/// The two dicts of the state `(dict, slots)` that Python pickles an object with
/// `__slots__` as (either may be `None`).
fn slots_state(state: &Value) -> Option<[Option<Entries<'_>>; 2]> {
    let Value::Tuple(pair) = state else {
        return None;
    };
    let [d, slots] = &pair[..] else {
        return None;
    };
    let (d, slots) = (slot_part(d)?, slot_part(slots)?);
    slots.is_some().then_some([d, slots])
}

/// One dict of a `(dict, slots)` state: `Some(None)` for `None`.
fn slot_part(v: &Value) -> Option<Option<Entries<'_>>> {
    match v {
        Value::None => Some(None),
        other => dict_entries(other).map(Some),
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
            find_objects(v, &[], &is_tensor, limits, crate::memory_budget(0))?
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
                ("state.0.1".to_string(), 3),
                ("()".to_string(), 100),
            ]
        );
        assert_eq!(
            names(&tensor(7), &Limits::default()).unwrap(),
            [(String::new(), 7)]
        );
    }

    #[test]
    fn every_key_names_its_entry_and_names_are_unique() {
        let root = Value::dict(vec![
            (
                Value::tuple(vec![Value::Int(1), Value::str("x")]),
                tensor(1),
            ),
            (Value::bytes(b"k"), tensor(2)),
            (Value::Float(1.5), tensor(3)),
            (Value::None, tensor(4)),
            (Value::Int(7), tensor(5)),
            (Value::str("7"), tensor(6)),
            (Value::str("7#2"), tensor(7)),
            (Value::str("a.b"), tensor(8)),
            (
                Value::str("a"),
                Value::dict(vec![(Value::str("b"), tensor(9))]),
            ),
            (Value::Int(7), tensor(10)),
            (Value::Bool(false), Value::Int(0)),
            (tensor(11), Value::Int(0)),
        ]);
        let got = names(&root, &Limits::default()).unwrap();
        let want = [
            ("(1, 'x')", 1),
            ("b'k'", 2),
            ("1.5", 3),
            ("None", 4),
            ("7", 5),
            ("7#3", 6),
            ("7#2", 7),
            ("a.b", 8),
            ("a.b#2", 9),
            ("7#4", 10),
            ("m.tensor(None, 11)", 11),
        ];
        let want: Vec<(String, i64)> = want.iter().map(|(n, i)| (n.to_string(), *i)).collect();
        assert_eq!(got, want);
        // Many targets under one path: each suffix is found at once.
        let call = Value::object(
            Object::new(
                Global::new("m", "wrap"),
                Kind::Call {
                    params: vec!["xs".into()].into(),
                },
            )
            .with_args((0..20_000).map(tensor).collect()),
        );
        let got = names(&call, &Limits::default()).unwrap();
        assert_eq!(got.len(), 20_000);
        assert_eq!(got[19_999].0, "#20000");
        // A key's name is bounded like the walk.
        let mut key = Value::Int(0);
        for _ in 0..200 {
            key = Value::tuple(vec![key]);
        }
        let root = Value::dict(vec![(key, tensor(1))]);
        let e = names(&root, &Limits::default()).unwrap_err();
        assert!(matches!(e.kind, ErrorKind::Limit { .. }), "{e}");
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
