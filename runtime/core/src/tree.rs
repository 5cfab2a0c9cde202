//! The object tree of a container that stores more than tensors: a PyTorch checkpoint's
//! pickled object (`{"model": {...}, "optimizer": {...}, "epoch": 3}`), a TorchScript
//! module's attributes. Tensors appear in it as [`Node::Tensor`] leaves that name a
//! tensor of the file's index; everything else (numbers, strings, hyperparameters) is
//! kept as a value, so that it can be shown and written back.
//!
//! Paths follow the naming of README.md (*Tensor names and digests*): dict keys and list
//! or tuple indices joined with `.` (`optimizer.param_groups.0.lr`), the same names the tensors of the index carry.

use std::fmt::{self, Write as _};

/// One node of an object tree.
#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    /// `None`.
    None,
    /// `True` or `False`.
    Bool(bool),
    /// An integer.
    Int(i128),
    /// A float.
    Float(f64),
    /// A text string.
    Str(String),
    /// A byte string.
    Bytes(Vec<u8>),
    /// A list.
    List(Vec<Node>),
    /// A tuple.
    Tuple(Vec<Node>),
    /// A dict (or an ordered dict), its items in order.
    Dict(Vec<(Node, Node)>),
    /// The tensor of the index with this name.
    Tensor(String),
    /// A class, function or dtype named as a value (`torch.float32`).
    Global(String),
    /// An instance of a class with its constructor arguments and its state (a TorchScript
    /// module: its attributes are the state dict), or a call the reader only records.
    Object {
        /// The class or function, `module.name`.
        class: String,
        /// Its positional arguments.
        args: Vec<Node>,
        /// The state `BUILD` gave it, if any.
        state: Option<Box<Node>>,
    },
    /// A value that can be shown but not written back (an integer beyond 128 bits, a
    /// persistent id outside a tensor): its Python-like text.
    Other(String),
    /// A value with the tag its format stores it under: the case of a tagged union (a
    /// GGUF value's type code, `4` for UINT32), so that the format writes it back as it
    /// was stored. Shown, and written by other formats, as its value.
    Typed {
        /// The tag of the case.
        tag: i128,
        /// The value.
        value: Box<Node>,
    },
}

/// The name of a dict key in a path, when it has one: strings as they are, integers in
/// decimal, booleans and `None` as Python prints them.
pub fn key_text(k: &Node) -> Option<String> {
    match k {
        Node::Str(s) => Some(s.clone()),
        Node::Int(i) => Some(i.to_string()),
        Node::Bool(b) => Some(if *b { "True" } else { "False" }.to_string()),
        Node::None => Some("None".to_string()),
        _ => None,
    }
}

fn join(path: &str, part: &str) -> String {
    if path.is_empty() {
        part.to_string()
    } else {
        format!("{path}.{part}")
    }
}

impl Node {
    /// A string node.
    pub fn str(s: &str) -> Node {
        Node::Str(s.to_string())
    }

    /// `value` with the tag its format stores it under ([`Node::Typed`]).
    pub fn typed(tag: i128, value: Node) -> Node {
        Node::Typed {
            tag,
            value: Box::new(value),
        }
    }

    /// The value without the tags it carries ([`Node::Typed`]).
    pub fn untyped(&self) -> &Node {
        match self {
            Node::Typed { value, .. } => value.untyped(),
            n => n,
        }
    }

    /// The value of a node given as the case `tag` of a tagged union: the node itself
    /// when it carries no tag, its value when it carries `tag`, `None` when it carries
    /// another.
    pub fn as_case(&self, tag: i128) -> Option<&Node> {
        match self {
            Node::Typed { tag: t, value } if *t == tag => Some(value),
            Node::Typed { .. } => None,
            n => Some(n),
        }
    }

    /// The values a format of values beside its tensors (safetensors `__metadata__`,
    /// GGUF key/values) can take from this structure: each entry of the top dict with no
    /// tensor below it, by its key's text. The paths of the values it cannot take (a
    /// value beside a tensor inside an entry, an entry whose key has no text, anything
    /// but tensors in a tree that is not a dict) are added to `dropped`.
    pub fn top_values(&self, dropped: &mut Vec<String>) -> Vec<(String, &Node)> {
        let Node::Dict(items) = self.untyped() else {
            dropped.extend(self.values().into_iter().map(|(p, _)| p));
            return Vec::new();
        };
        let mut out = Vec::new();
        for (k, v) in items {
            match key_text(k) {
                Some(name) if !v.has_tensor() => out.push((name, v)),
                Some(name) => dropped.extend(v.values().into_iter().map(|(p, _)| {
                    if p.is_empty() {
                        name.clone()
                    } else {
                        join(&name, &p)
                    }
                })),
                None if !v.has_tensor() => dropped.push(format!("[{k}]")),
                None => {}
            }
        }
        out
    }

    /// How deep the tree nests: 0 for a value that holds none (a number, text, a tensor
    /// leaf), one more than its deepest item for a list, tuple or dict (keys and values)
    /// and for an object (its arguments and state); a tagged value as deep as its value.
    /// Measured without recursion, so that a tree of any depth can be checked against a
    /// limit ([`crate::Limits::max_depth`]) before anything walks it recursively.
    pub fn depth(&self) -> u64 {
        let mut deepest = 0;
        let mut stack: Vec<(&Node, u64)> = vec![(self, 0)];
        while let Some((node, level)) = stack.pop() {
            deepest = deepest.max(level);
            let below = level + 1;
            match node {
                Node::List(v) | Node::Tuple(v) => {
                    deepest = deepest.max(below);
                    stack.extend(v.iter().map(|n| (n, below)));
                }
                Node::Dict(e) => {
                    deepest = deepest.max(below);
                    for (k, v) in e {
                        stack.push((k, below));
                        stack.push((v, below));
                    }
                }
                Node::Object { args, state, .. } => {
                    deepest = deepest.max(below);
                    stack.extend(args.iter().map(|n| (n, below)));
                    stack.extend(state.as_deref().map(|s| (s, below)));
                }
                Node::Typed { value, .. } => stack.push((value, level)),
                _ => {}
            }
        }
        deepest
    }

    /// True when a tensor leaf is somewhere below (or at) this node.
    pub fn has_tensor(&self) -> bool {
        match self {
            Node::Tensor(_) => true,
            Node::List(v) | Node::Tuple(v) => v.iter().any(Node::has_tensor),
            Node::Dict(e) => e.iter().any(|(k, v)| k.has_tensor() || v.has_tensor()),
            Node::Object { args, state, .. } => {
                args.iter().any(Node::has_tensor) || state.as_deref().is_some_and(Node::has_tensor)
            }
            Node::Typed { value, .. } => value.has_tensor(),
            _ => false,
        }
    }

    /// True when the tree holds only what any object writer can write back: dicts, lists,
    /// tuples, numbers, strings, bytes, `None` and tensors (no objects, globals or
    /// [`Node::Other`] values).
    pub fn is_plain(&self) -> bool {
        match self {
            Node::Global(_) | Node::Object { .. } | Node::Other(_) => false,
            Node::List(v) | Node::Tuple(v) => v.iter().all(Node::is_plain),
            Node::Dict(e) => e.iter().all(|(k, v)| k.is_plain() && v.is_plain()),
            Node::Typed { value, .. } => value.is_plain(),
            _ => true,
        }
    }

    /// The names of the tensor leaves, in depth-first order.
    pub fn tensor_names(&self) -> Vec<&str> {
        let mut out = Vec::new();
        self.collect_tensors(&mut out);
        out
    }

    fn collect_tensors<'a>(&'a self, out: &mut Vec<&'a str>) {
        match self {
            Node::Tensor(n) => out.push(n),
            Node::List(v) | Node::Tuple(v) => v.iter().for_each(|n| n.collect_tensors(out)),
            Node::Dict(e) => e.iter().for_each(|(_, v)| v.collect_tensors(out)),
            Node::Object { args, state, .. } => {
                args.iter().for_each(|n| n.collect_tensors(out));
                if let Some(s) = state {
                    s.collect_tensors(out);
                }
            }
            _ => {}
        }
    }

    /// The values that are not tensors, each with its path: containers that hold a
    /// tensor are walked (dicts by key, lists and tuples by index, an object's state
    /// dict by attribute name), and anything without a tensor below it is one value
    /// (`optimizer.param_groups.0.betas` = `(0.9, 0.999)`). A key that is not text or a
    /// number (a tuple, bytes, a float) is named by its Python-like text (`(1, 'x')`), as
    /// tensor names name it.
    pub fn values(&self) -> Vec<(String, &Node)> {
        let mut out = Vec::new();
        self.collect_values(String::new(), &mut out);
        out
    }

    fn collect_values<'a>(&'a self, path: String, out: &mut Vec<(String, &'a Node)>) {
        if !self.has_tensor() {
            out.push((path, self));
            return;
        }
        match self {
            Node::Tensor(_) => {}
            Node::List(v) | Node::Tuple(v) => {
                for (i, n) in v.iter().enumerate() {
                    n.collect_values(join(&path, &i.to_string()), out);
                }
            }
            Node::Dict(e) => {
                for (k, v) in e {
                    let part = key_text(k).unwrap_or_else(|| k.to_string());
                    v.collect_values(join(&path, &part), out);
                }
            }
            Node::Object { args, state, .. } => {
                for a in args {
                    if a.has_tensor() {
                        a.collect_values(path.clone(), out);
                    }
                }
                match state.as_deref() {
                    Some(Node::Dict(e)) => {
                        for (k, v) in e {
                            let part = key_text(k).unwrap_or_else(|| k.to_string());
                            v.collect_values(join(&path, &part), out);
                        }
                    }
                    Some(s) => s.collect_values(path, out),
                    None => {}
                }
            }
            _ => {}
        }
    }
}

/// A value that becomes a [`Node`]: numbers, text, lists and options of them, and the
/// records and tagged unions generated from a schema (a `value` mapping of a `file`
/// format exposes them as the format's structure).
pub trait ToNode {
    /// The value as a node.
    fn to_node(&self) -> Node;
}

macro_rules! int_to_node {
    ($($t:ty),*) => {$(
        impl ToNode for $t {
            fn to_node(&self) -> Node {
                Node::Int(i128::from(*self))
            }
        }
    )*};
}

int_to_node!(u8, i8, u16, i16, u32, i32, u64, i64);

impl ToNode for f32 {
    fn to_node(&self) -> Node {
        Node::Float(f64::from(*self))
    }
}

impl ToNode for f64 {
    fn to_node(&self) -> Node {
        Node::Float(*self)
    }
}

impl ToNode for bool {
    fn to_node(&self) -> Node {
        Node::Bool(*self)
    }
}

impl ToNode for str {
    fn to_node(&self) -> Node {
        Node::str(self)
    }
}

impl ToNode for String {
    fn to_node(&self) -> Node {
        Node::str(self)
    }
}

impl<T: ToNode> ToNode for [T] {
    fn to_node(&self) -> Node {
        Node::List(self.iter().map(ToNode::to_node).collect())
    }
}

impl<T: ToNode> ToNode for Vec<T> {
    fn to_node(&self) -> Node {
        self.as_slice().to_node()
    }
}

impl<T: ToNode> ToNode for Option<T> {
    fn to_node(&self) -> Node {
        self.as_ref().map_or(Node::None, ToNode::to_node)
    }
}

impl<T: ToNode + ?Sized> ToNode for Box<T> {
    fn to_node(&self) -> Node {
        (**self).to_node()
    }
}

impl<T: ToNode + ?Sized> ToNode for &T {
    fn to_node(&self) -> Node {
        (**self).to_node()
    }
}

/// A value made from a [`Node`]: the inverse of [`ToNode`], for the records a format of
/// values beside its tensors writes back. `None` when the node is not a value of the type
/// (text for a number, an integer out of range); the tags a node carries
/// ([`Node::Typed`]) are looked through, but by tagged unions.
pub trait FromNode: Sized {
    /// The value of the node, if it is one of the type.
    fn from_node(node: &Node) -> Option<Self>;
}

macro_rules! int_from_node {
    ($($t:ty),*) => {$(
        impl FromNode for $t {
            fn from_node(node: &Node) -> Option<Self> {
                match node.untyped() {
                    Node::Int(i) => <$t>::try_from(*i).ok(),
                    _ => None,
                }
            }
        }
    )*};
}

int_from_node!(u8, i8, u16, i16, u32, i32, u64, i64);

impl FromNode for f32 {
    fn from_node(node: &Node) -> Option<Self> {
        match node.untyped() {
            Node::Float(x) => Some(*x as f32),
            _ => None,
        }
    }
}

impl FromNode for f64 {
    fn from_node(node: &Node) -> Option<Self> {
        match node.untyped() {
            Node::Float(x) => Some(*x),
            _ => None,
        }
    }
}

impl FromNode for bool {
    fn from_node(node: &Node) -> Option<Self> {
        match node.untyped() {
            Node::Bool(b) => Some(*b),
            _ => None,
        }
    }
}

impl FromNode for String {
    fn from_node(node: &Node) -> Option<Self> {
        match node.untyped() {
            Node::Str(s) => Some(s.clone()),
            _ => None,
        }
    }
}

impl<T: FromNode> FromNode for Vec<T> {
    fn from_node(node: &Node) -> Option<Self> {
        match node.untyped() {
            Node::List(v) | Node::Tuple(v) => v.iter().map(T::from_node).collect(),
            _ => None,
        }
    }
}

impl<T: FromNode> FromNode for Option<T> {
    fn from_node(node: &Node) -> Option<Self> {
        match node.untyped() {
            Node::None => Some(None),
            n => T::from_node(n).map(Some),
        }
    }
}

impl<T: FromNode> FromNode for Box<T> {
    fn from_node(node: &Node) -> Option<Self> {
        T::from_node(node).map(Box::new)
    }
}

/// The tag and items of a list of a tagged union's values that share one tag (a GGUF
/// array: the type of its items, then the items), from a node: the tag it carries
/// ([`Node::Typed`] around the list), or else the tag `case_of` gives its first item;
/// each item made by `as_case` with that tag. `None` when the node is not such a list
/// or an item is not a value of the case (an empty list without a tag has none).
pub fn tagged_items<T>(
    node: &Node,
    case_of: impl Fn(&Node) -> Option<i128>,
    as_case: impl Fn(i128, &Node) -> Option<T>,
) -> Option<(i128, Vec<T>)> {
    let (tag, list) = match node {
        Node::Typed { tag, value } => (Some(*tag), value.untyped()),
        n => (None, n),
    };
    let (Node::List(items) | Node::Tuple(items)) = list else {
        return None;
    };
    let tag = match tag {
        Some(t) => t,
        None => case_of(items.first()?)?,
    };
    let items = items
        .iter()
        .map(|n| as_case(tag, n))
        .collect::<Option<_>>()?;
    Some((tag, items))
}

/// The case of a tagged union a node is given as: the one whose tag it carries
/// ([`Node::Typed`]), or for a node without one, the first of `order` that holds it;
/// `from_case` makes the value of a case.
pub fn case_of<T>(
    node: &Node,
    order: &[i128],
    from_case: impl Fn(i128, &Node) -> Option<T>,
) -> Option<T> {
    match node {
        Node::Typed { tag, .. } => from_case(*tag, node),
        _ => order.iter().find_map(|&t| from_case(t, node)),
    }
}

/// Hands each value of a structure ([`Node::top_values`]) to `set`, by name; what it
/// takes not (`None`) is dropped, its path listed with those of the values beside tensors.
pub fn set_values(
    tree: &Node,
    mut set: impl FnMut(&str, &Node) -> Option<()>,
) -> crate::registry::StructureKept {
    let mut dropped = Vec::new();
    for (name, node) in tree.top_values(&mut dropped) {
        if set(&name, node).is_none() {
            dropped.push(name);
        }
    }
    crate::registry::StructureKept::dropping(dropped)
}

/// An error when `refused` (values set after the first tensor of a format whose
/// alignment is among them): `why` says what to do.
pub fn refuse_if(refused: bool, why: &str) -> crate::error::Result<()> {
    if refused {
        return Err(crate::error::ErrorKind::Invalid(why.to_string()).into());
    }
    Ok(())
}

/// The value of `key` in a dict node (a record's field in the node of a record of
/// several fields).
pub fn dict_item<'a>(node: &'a Node, key: &str) -> Option<&'a Node> {
    let Node::Dict(items) = node.untyped() else {
        return None;
    };
    items
        .iter()
        .find(|(k, _)| matches!(k, Node::Str(s) if s == key))
        .map(|(_, v)| v)
}

/// An error when `tree` nests deeper than `limit` levels ([`Node::depth`]), before a
/// writer walks it: a file written from it would hold a nesting that readers refuse
/// (theirs is bounded by [`crate::Limits::max_depth`]).
pub fn check_depth(tree: &Node, limit: u64) -> crate::error::Result<()> {
    let depth = tree.depth();
    if depth > limit {
        return Err(crate::error::ErrorKind::Limit {
            what: "nesting depth of the object to write (readers refuse a deeper one)",
            limit,
            actual: depth,
        }
        .into());
    }
    Ok(())
}

/// Replaces the first item of `items` that is `same` as `item` by it, or adds it last.
pub fn set_item<T>(items: &mut Vec<T>, item: T, same: impl Fn(&T) -> bool) {
    match items.iter_mut().find(|i| same(i)) {
        Some(old) => *old = item,
        None => items.push(item),
    }
}

/// Python's `repr` of the text `s`, quoted as Python quotes it (`'a'`, `"it's"`), with
/// the characters Python does not print escaped (`\n`, `\x00`, `\u200b`).
pub fn repr_str(s: &str, out: &mut String) {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if c.is_ascii() || printable(c) => out.push(c),
            c if (c as u32) <= 0xff => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if (c as u32) <= 0xffff => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => {
                let _ = write!(out, "\\U{:08x}", c as u32);
            }
        }
    }
    out.push(quote);
}

/// Python's `repr` of the byte string `b` (`b'k'`, `b'\x00'`).
pub fn repr_bytes(b: &[u8], out: &mut String) {
    let quote = if b.contains(&b'\'') && !b.contains(&b'"') {
        b'"'
    } else {
        b'\''
    };
    out.push('b');
    out.push(quote as char);
    for &c in b {
        match c {
            b'\\' => out.push_str("\\\\"),
            c if c == quote => {
                out.push('\\');
                out.push(c as char);
            }
            b'\t' => out.push_str("\\t"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            0x20..=0x7e => out.push(c as char),
            c => {
                let _ = write!(out, "\\x{c:02x}");
            }
        }
    }
    out.push(quote as char);
}

/// Whether Python prints the non-ASCII character `c` as it is (`str.isprintable`): not
/// of the general categories Cc, Cf, Cs, Co, Cn, Zl, Zp, Zs.
fn printable(c: char) -> bool {
    use unicode_properties::general_category::{GeneralCategory as G, UnicodeGeneralCategory};
    !matches!(
        c.general_category(),
        G::Control
            | G::Format
            | G::Surrogate
            | G::PrivateUse
            | G::Unassigned
            | G::LineSeparator
            | G::ParagraphSeparator
            | G::SpaceSeparator
    )
}

fn write_seq(f: &mut fmt::Formatter<'_>, open: &str, items: &[Node], close: &str) -> fmt::Result {
    f.write_str(open)?;
    for (i, n) in items.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        write!(f, "{n}")?;
    }
    if open == "(" && items.len() == 1 {
        f.write_char(',')?;
    }
    f.write_str(close)
}

/// Python's `repr` of a float: the shortest text that reads back the same, with `.0` on
/// whole numbers and `inf`/`nan` spelled as Python does.
fn float_repr(x: f64) -> String {
    if x.is_nan() {
        "nan".into()
    } else if x.is_infinite() {
        if x > 0.0 { "inf" } else { "-inf" }.into()
    } else {
        let s = format!("{x:?}");
        match s.split_once('e') {
            // Python writes the exponent signed, with at least two digits: 1e-08, 1e+16.
            Some((m, e)) => {
                let (sign, digits) = match e.strip_prefix('-') {
                    Some(d) => ('-', d),
                    None => ('+', e),
                };
                format!("{m}e{sign}{digits:0>2}")
            }
            None if s.contains('.') => s,
            None => format!("{s}.0"),
        }
    }
}

impl fmt::Display for Node {
    /// Python-like text: `None`, `True`, `3`, `0.001`, `'adam'`, `b'\x00'`, `(0.9, 0.999)`,
    /// `[1, 2]`, `{'lr': 0.1}`, `<tensor x>`, `torch.float32`, `Net(...)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Node::None => f.write_str("None"),
            Node::Bool(b) => f.write_str(if *b { "True" } else { "False" }),
            Node::Int(i) => write!(f, "{i}"),
            Node::Float(x) => f.write_str(&float_repr(*x)),
            Node::Str(s) => {
                let mut out = String::with_capacity(s.len() + 2);
                repr_str(s, &mut out);
                f.write_str(&out)
            }
            Node::Bytes(b) => {
                let mut out = String::with_capacity(b.len() + 3);
                repr_bytes(b, &mut out);
                f.write_str(&out)
            }
            Node::List(v) => write_seq(f, "[", v, "]"),
            Node::Tuple(v) => write_seq(f, "(", v, ")"),
            Node::Dict(e) => {
                f.write_char('{')?;
                for (i, (k, v)) in e.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{k}: {v}")?;
                }
                f.write_char('}')
            }
            Node::Tensor(n) => write!(f, "<tensor {n}>"),
            Node::Global(g) => f.write_str(g),
            Node::Object { class, args, state } => {
                write_seq(f, &format!("{class}("), args, ")")?;
                if let Some(s) = state {
                    write!(f, " with state {s}")?;
                }
                Ok(())
            }
            Node::Other(s) => f.write_str(s),
            Node::Typed { value, .. } => write!(f, "{value}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_and_tensors_follow_the_paths() {
        let tree = Node::Dict(vec![
            (
                Node::str("model"),
                Node::Dict(vec![(Node::str("w"), Node::Tensor("model.w".into()))]),
            ),
            (
                Node::str("optimizer"),
                Node::Dict(vec![
                    (
                        Node::str("state"),
                        Node::Dict(vec![(
                            Node::Int(0),
                            Node::Dict(vec![
                                (
                                    Node::str("exp_avg"),
                                    Node::Tensor("optimizer.state.0.exp_avg".into()),
                                ),
                                (Node::str("step"), Node::Float(3.0)),
                            ]),
                        )]),
                    ),
                    (
                        Node::str("param_groups"),
                        Node::List(vec![Node::Dict(vec![
                            (Node::str("lr"), Node::Float(0.001)),
                            (
                                Node::str("betas"),
                                Node::Tuple(vec![Node::Float(0.9), Node::Float(0.999)]),
                            ),
                        ])]),
                    ),
                ]),
            ),
            (Node::str("epoch"), Node::Int(3)),
            (Node::str("tag"), Node::str("it's")),
        ]);
        assert_eq!(
            tree.tensor_names(),
            ["model.w", "optimizer.state.0.exp_avg"]
        );
        let values: Vec<(String, String)> = tree
            .values()
            .into_iter()
            .map(|(p, n)| (p, n.to_string()))
            .collect();
        assert_eq!(
            values,
            [
                ("optimizer.state.0.step".to_string(), "3.0".to_string()),
                (
                    "optimizer.param_groups".to_string(),
                    "[{'lr': 0.001, 'betas': (0.9, 0.999)}]".to_string()
                ),
                ("epoch".to_string(), "3".to_string()),
                ("tag".to_string(), "\"it's\"".to_string()),
            ]
        );
    }

    #[test]
    fn depth_counts_containers_without_recursion() {
        assert_eq!(Node::Int(1).depth(), 0);
        assert_eq!(Node::Tensor("w".into()).depth(), 0);
        assert_eq!(Node::List(vec![]).depth(), 1);
        let tree = Node::Dict(vec![
            (Node::str("a"), Node::Int(1)),
            (
                Node::str("b"),
                Node::typed(4, Node::List(vec![Node::Tuple(vec![Node::Int(2)])])),
            ),
        ]);
        assert_eq!(tree.depth(), 3);
        let object = Node::Object {
            class: "m.C".into(),
            args: vec![],
            state: Some(Box::new(Node::Dict(vec![]))),
        };
        assert_eq!(object.depth(), 2);
        // A million levels: measured, and refused by the check, without recursion.
        let mut deep = Node::Tensor("w".into());
        for _ in 0..1_000_000 {
            deep = Node::List(vec![deep]);
        }
        assert_eq!(deep.depth(), 1_000_000);
        let e = check_depth(&deep, 128).unwrap_err().to_string();
        assert!(e.contains("nesting depth") && e.contains("1000000"), "{e}");
        check_depth(&tree, 3).unwrap();
        // Dropped a level at a time: the derived drop would recurse a million deep.
        while let Node::List(mut v) = deep {
            deep = v.pop().unwrap_or(Node::None);
        }
    }

    #[test]
    fn python_like_text() {
        assert_eq!(Node::Tuple(vec![Node::Int(1)]).to_string(), "(1,)");
        assert_eq!(Node::Float(1e-10).to_string(), "1e-10");
        assert_eq!(Node::Float(1e-8).to_string(), "1e-08");
        assert_eq!(Node::Float(2.5e16).to_string(), "2.5e+16");
        assert_eq!(Node::Float(0.001).to_string(), "0.001");
        assert_eq!(Node::Float(3.0).to_string(), "3.0");
        assert_eq!(Node::Float(f64::NEG_INFINITY).to_string(), "-inf");
        assert_eq!(Node::Bytes(vec![0, b'a']).to_string(), "b'\\x00a'");
        assert_eq!(
            Node::Dict(vec![(Node::None, Node::Bool(false))]).to_string(),
            "{None: False}"
        );
    }
}
