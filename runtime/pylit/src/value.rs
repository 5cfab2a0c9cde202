//! Typed dict values: what generated dict structs are made of.
//!
//! A `dict` of a schema is a plain struct whose fields have types implementing
//! [`FromPy`] and [`ToPy`]: strings, booleans, integers, floats, lists and tuples of
//! those, [`Map`]s and other dicts. The struct implements [`Dict`]: its keys ([`Key`]),
//! `read`, which reads the value of one from wherever it is ([`ItemValue`]: a value tree,
//! or JSON text being parsed), and `items`, which lists its items for encoding; [`FromPy`]
//! and [`ToPy`] follow. A Python literal is read into it key by key as it is parsed, JSON
//! text straight into its fields (the `direct` module), a decoded [`PyValue`] (a nested
//! dict) through [`from_dict`]. A wrong type or a missing key is an error naming the key,
//! as the user wrote it.

use std::borrow::Cow;

use tensorfmt_core::cursor::Cursor;
use tensorfmt_core::error::{Error, ErrorKind, Result};
use tensorfmt_core::limits::Limits;

use crate::PyValue;

/// A value that can be read from a decoded [`PyValue`].
pub trait FromPy: Sized {
    /// The value; an error saying what was expected and what was found when `v` has
    /// another type or does not fit (errors inside a nested value name its key).
    fn from_py(v: &PyValue) -> Result<Self>;

    /// The value of the Python literal `text` (errors as [`crate::parse`], then
    /// [`FromPy::from_py`]): parsed into a [`PyValue`] then read, except for a [`Dict`],
    /// whose items are read as they are parsed.
    fn from_literal(text: &str, limits: &Limits) -> Result<Self> {
        Self::from_py(&crate::parse(text, limits)?)
    }

    /// The value of the JSON text `text` (errors as [`crate::json::parse`], then
    /// [`FromPy::from_py`]): parsed into a [`PyValue`] then read, except for a [`Dict`],
    /// whose top-level items are read as they are parsed.
    fn from_json(text: &[u8], limits: &Limits) -> Result<Self> {
        Self::from_py(&crate::json::parse(text, limits)?)
    }

    /// Reads the value straight from JSON, with no value tree: the fast path of
    /// [`FromPy::from_json`] for a [`Dict`] (see the `direct` module). An error of any kind
    /// sends the caller back to the value-tree path, which gives the result or the exact
    /// error, so an implementation refuses whatever it would not read exactly as
    /// [`FromPy::from_py`] reads the value tree. The default reads the value tree (a key
    /// repeated in any object refused) and calls [`FromPy::from_py`].
    #[doc(hidden)]
    fn from_json_direct<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> std::result::Result<Self, D::Error> {
        let v = serde::de::DeserializeSeed::deserialize(crate::json::Tree, d)?;
        Self::from_py(&v).map_err(serde::de::Error::custom)
    }
}

/// The value of one item of a dict, wherever it is: a value tree (`&PyValue`), or the
/// next value of JSON text being parsed (read straight into its type, see
/// [`FromPy::from_json_direct`]). [`Dict::read`] takes either.
pub trait ItemValue {
    /// What a value of another type gives.
    type Error;

    /// The value, as a `T`.
    fn get<T: FromPy>(self) -> std::result::Result<T, Self::Error>;
}

/// What [`Dict::read`] got from an [`ItemValue`]: its value in the field (`Ok(())`), or
/// the error of the value's source.
pub type Got<V> = std::result::Result<(), <V as ItemValue>::Error>;

impl ItemValue for &PyValue {
    type Error = Error;

    fn get<T: FromPy>(self) -> Result<T> {
        T::from_py(self)
    }
}

/// A key of a [`Dict`], as the schema declares it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    /// A key that must be present.
    Required(&'static str),
    /// A key that may be missing or `None` (its field an `Option`).
    Optional(&'static str),
    /// Every item whose key is not declared (its field a [`Map`]).
    Rest,
}

impl Key {
    /// The key's name; `None` for [`Key::Rest`].
    pub fn name(&self) -> Option<&'static str> {
        match *self {
            Key::Required(k) | Key::Optional(k) => Some(k),
            Key::Rest => None,
        }
    }
}

/// A generated dict struct: its keys in declared order, how the value of each is read,
/// and its items for encoding. Missing keys, values of another type and undeclared items
/// are the runtime's ([`from_dict`], the Python-literal and JSON parsers), which call
/// `read` once per item found.
pub trait Dict: Default {
    /// The keys, in declared order.
    const KEYS: &'static [Key];

    /// Reads `v`, the value of key number `i` of [`Dict::KEYS`] (for [`Key::Rest`], of
    /// the undeclared `key`), into its field, with [`ItemValue::get`] once; an error when
    /// it has another type (the caller places it under the key). Generated dicts have a
    /// `match` arm per key.
    fn read<V: ItemValue>(&mut self, i: usize, key: &str, v: V) -> Got<V>;

    /// [`Dict::read`] from a value tree.
    fn set(&mut self, i: usize, key: &str, v: &PyValue) -> Result<()> {
        self.read(i, key, v)
    }

    /// The items, in declared order (the undeclared ones where the `rest` key is), an
    /// optional key that is `None` left out: what [`ToPy`] and [`literal`] encode.
    fn items(&self) -> Vec<(&str, PyValue)>;

    /// Hands the items of [`Dict::items`] to `f` one by one, each value made as it is
    /// handed over and dropped after, so that an encoder
    /// ([`crate::json::encode_dict`]) holds one at a time; stops at `f`'s first error.
    /// Generated dicts with a `rest` key implement it so.
    fn each_item<'a>(&'a self, f: &mut dyn FnMut(&'a str, PyValue) -> Result<()>) -> Result<()> {
        self.items().into_iter().try_for_each(|(k, v)| f(k, v))
    }
}

/// Reads the dict `value` as `T`: keys in declared order, a missing required key or a
/// value of another type an error naming the key, a missing optional key or `None` left
/// `None`, the undeclared items (string keys, in order) to the `rest` key.
pub fn from_dict<T: Dict>(value: &PyValue) -> Result<T> {
    let mut out = T::default();
    for (i, k) in T::KEYS.iter().enumerate() {
        match *k {
            Key::Required(name) => {
                let v = crate::require(value, name)?;
                out.set(i, name, v).map_err(|e| e.in_field(name))?;
            }
            Key::Optional(name) => {
                if let Some(v) = value.dict_get(name) {
                    out.set(i, name, v).map_err(|e| e.in_field(name))?;
                }
            }
            Key::Rest => {
                let PyValue::Dict(items) = value else {
                    return Err(expected("dict", value));
                };
                for (key, v) in items {
                    let Some(key) = key.as_str() else {
                        return Err(expected("str key", key));
                    };
                    if T::KEYS.iter().any(|k| k.name() == Some(key)) {
                        continue;
                    }
                    out.set(i, key, v).map_err(|e| e.in_field(key))?;
                }
            }
        }
    }
    Ok(out)
}

impl<T: Dict> FromPy for T {
    fn from_py(v: &PyValue) -> Result<Self> {
        from_dict(v)
    }

    fn from_literal(text: &str, limits: &Limits) -> Result<Self> {
        crate::parse_dict(text, limits)
    }

    fn from_json(text: &[u8], limits: &Limits) -> Result<Self> {
        crate::json::parse_dict(text, limits, false)
    }

    fn from_json_direct<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> std::result::Result<Self, D::Error> {
        d.deserialize_map(crate::direct::DictVisitor::new())
    }
}

/// An optional key: `None` for `None`.
impl<T: FromPy> FromPy for Option<T> {
    fn from_py(v: &PyValue) -> Result<Self> {
        match v {
            PyValue::None => Ok(None),
            v => T::from_py(v).map(Some),
        }
    }

    fn from_json_direct<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> std::result::Result<Self, D::Error> {
        crate::direct::option(d)
    }
}

/// The error for a value of the wrong type: `expected a str, found a tuple`.
pub fn expected(what: &str, found: &PyValue) -> Error {
    Error::from(ErrorKind::Invalid(format!(
        "expected a {what}, found a {}",
        found.type_name()
    )))
}

/// A value that can be written as a [`PyValue`].
pub trait ToPy {
    /// The value.
    fn to_py(&self) -> PyValue;
}

/// A dict struct: a dict of its [`Dict::items`].
impl<T: Dict> ToPy for T {
    fn to_py(&self) -> PyValue {
        dict(self.items())
    }
}

/// The dict struct `d` as a Python literal ([`crate::encode_dict`] of its items).
pub fn literal<T: Dict>(d: &T, trailing_comma: bool) -> String {
    crate::encode_dict(&d.items(), trailing_comma)
}

/// A map with string keys, in the order of the text (`map<str, V>` of a schema). The
/// decoders keep one item per key (the last value at the first position, as Python's
/// readers do).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Map<V>(pub Vec<(String, V)>);

impl<V> Map<V> {
    /// The items, in order.
    pub fn iter(&self) -> std::slice::Iter<'_, (String, V)> {
        self.0.iter()
    }

    /// The number of items.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when there is no item.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&V> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// Sets the value of `key`: in place where the map has it, else last.
    pub fn insert(&mut self, key: String, value: V) {
        match self.0.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => *v = value,
            None => self.0.push((key, value)),
        }
    }
}

impl<'m, V> IntoIterator for &'m Map<V> {
    type Item = &'m (String, V);
    type IntoIter = std::slice::Iter<'m, (String, V)>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl FromPy for String {
    fn from_py(v: &PyValue) -> Result<Self> {
        v.as_str()
            .map(str::to_string)
            .ok_or_else(|| expected("str", v))
    }

    fn from_json_direct<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> std::result::Result<Self, D::Error> {
        crate::direct::string(d)
    }
}

impl ToPy for String {
    fn to_py(&self) -> PyValue {
        PyValue::Str(self.clone())
    }
}

impl FromPy for bool {
    fn from_py(v: &PyValue) -> Result<Self> {
        v.as_bool().ok_or_else(|| expected("bool", v))
    }

    fn from_json_direct<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> std::result::Result<Self, D::Error> {
        crate::direct::boolean(d)
    }
}

impl ToPy for bool {
    fn to_py(&self) -> PyValue {
        PyValue::Bool(*self)
    }
}

macro_rules! ints {
    ($($t:ty: $what:literal),*) => {$(
        impl FromPy for $t {
            fn from_py(v: &PyValue) -> Result<Self> {
                match v.as_int() {
                    Some(i) => <$t>::try_from(i).map_err(|_| {
                        Error::from(ErrorKind::Invalid(format!("expected a {}, found {i}", $what)))
                    }),
                    None => Err(expected($what, v)),
                }
            }

            fn from_json_direct<'de, D: serde::Deserializer<'de>>(
                d: D,
            ) -> std::result::Result<Self, D::Error> {
                crate::direct::int(d)
            }
        }
        impl ToPy for $t {
            fn to_py(&self) -> PyValue {
                PyValue::Int(i128::from(*self))
            }
        }
    )*};
}

ints!(u8: "int in 0..=255", u16: "int in 0..=65535", u32: "int in 0..=2^32-1",
      u64: "non-negative int", i8: "8-bit int", i16: "16-bit int", i32: "32-bit int",
      i64: "64-bit int");

impl FromPy for f64 {
    fn from_py(v: &PyValue) -> Result<Self> {
        match v {
            PyValue::Float(f) => Ok(*f),
            PyValue::Int(i) => Ok(*i as f64),
            _ => Err(expected("float", v)),
        }
    }

    fn from_json_direct<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> std::result::Result<Self, D::Error> {
        crate::direct::float(d)
    }
}

impl ToPy for f64 {
    fn to_py(&self) -> PyValue {
        PyValue::Float(*self)
    }
}

/// `tuple<T>` and `list<T>`: either kind of sequence is read; [`ToPy`] writes a tuple
/// (a `list<T>` key is written with [`to_list`]).
impl<T: FromPy> FromPy for Vec<T> {
    fn from_py(v: &PyValue) -> Result<Self> {
        let items = v.as_seq().ok_or_else(|| expected("tuple or list", v))?;
        items
            .iter()
            .enumerate()
            .map(|(i, x)| T::from_py(x).map_err(|e| e.in_field(&i.to_string())))
            .collect()
    }

    fn from_json_direct<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> std::result::Result<Self, D::Error> {
        crate::direct::seq(d)
    }
}

impl<T: ToPy> ToPy for Vec<T> {
    fn to_py(&self) -> PyValue {
        PyValue::Tuple(self.iter().map(ToPy::to_py).collect())
    }
}

/// The items of `v` as a list (`list<T>` keys are written as lists, `tuple<T>` as tuples).
pub fn to_list<T: ToPy>(v: &[T]) -> PyValue {
    PyValue::List(v.iter().map(ToPy::to_py).collect())
}

/// A map is a dict of its keys, in order.
impl<V: tensorfmt_core::tree::ToNode> tensorfmt_core::tree::ToNode for Map<V> {
    fn to_node(&self) -> tensorfmt_core::tree::Node {
        use tensorfmt_core::tree::Node;
        Node::Dict(
            self.0
                .iter()
                .map(|(k, v)| (Node::str(k), v.to_node()))
                .collect(),
        )
    }
}

/// A map a structure's values are set into, one by name (a `value` mapping over a
/// `map<str, V>` run backwards), or an optional one, made at the first value.
pub trait SetValue {
    /// Sets `name` to the value of `node`, in place where the map has it, else last;
    /// `None`, and nothing changed, when `node` is not a value of the map.
    fn set_value(&mut self, name: &str, node: &tensorfmt_core::tree::Node) -> Option<()>;
}

impl<V: tensorfmt_core::tree::FromNode> SetValue for Map<V> {
    fn set_value(&mut self, name: &str, node: &tensorfmt_core::tree::Node) -> Option<()> {
        self.insert(name.to_string(), V::from_node(node)?);
        Some(())
    }
}

impl<V: tensorfmt_core::tree::FromNode> SetValue for Option<Map<V>> {
    fn set_value(&mut self, name: &str, node: &tensorfmt_core::tree::Node) -> Option<()> {
        let value = V::from_node(node)?;
        self.get_or_insert_with(|| Map(Vec::new()))
            .insert(name.to_string(), value);
        Some(())
    }
}

/// A map is made from a dict with text keys, in order.
impl<V: tensorfmt_core::tree::FromNode> tensorfmt_core::tree::FromNode for Map<V> {
    fn from_node(node: &tensorfmt_core::tree::Node) -> Option<Self> {
        use tensorfmt_core::tree::Node;
        let Node::Dict(items) = node.untyped() else {
            return None;
        };
        let items = items.iter().map(|(k, v)| match k {
            Node::Str(k) => Some((k.clone(), V::from_node(v)?)),
            _ => None,
        });
        items.collect::<Option<_>>().map(Map)
    }
}

impl<V: FromPy> FromPy for Map<V> {
    fn from_py(v: &PyValue) -> Result<Self> {
        map_items(v)
    }

    fn from_json_direct<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> std::result::Result<Self, D::Error> {
        crate::direct::map(d)
    }
}

impl<V: ToPy> ToPy for Map<V> {
    fn to_py(&self) -> PyValue {
        PyValue::Dict(
            self.0
                .iter()
                .map(|(k, v)| (PyValue::Str(k.clone()), v.to_py()))
                .collect(),
        )
    }
}

/// Every item of the dict `value` as a [`Map`] (a `map<str, V>` value). An item of
/// another type is an error naming its key.
fn map_items<V: FromPy>(value: &PyValue) -> Result<Map<V>> {
    let PyValue::Dict(items) = value else {
        return Err(expected("dict", value));
    };
    let mut out: Vec<(String, V)> = Vec::with_capacity(items.len());
    for (k, v) in items {
        let Some(k) = k.as_str() else {
            return Err(expected("str key", k));
        };
        let v = V::from_py(v).map_err(|e| e.in_field(k))?;
        out.push((k.to_string(), v));
    }
    Ok(Map(out))
}

/// Decodes a field's bytes as text in `encoding`: `"latin1"` (every byte a character;
/// ASCII text borrowed as it is) or `"utf8"` (checked).
pub fn decode<'b>(bytes: &'b [u8], encoding: &str) -> Result<Cow<'b, str>> {
    match encoding {
        "latin1" => Ok(match std::str::from_utf8(bytes) {
            Ok(text) if text.is_ascii() => Cow::Borrowed(text),
            _ => Cow::Owned(bytes.iter().map(|&b| char::from(b)).collect()),
        }),
        "utf8" => std::str::from_utf8(bytes).map(Cow::Borrowed).map_err(|e| {
            ErrorKind::Codec {
                codec: "pydict",
                message: format!("the text is not UTF-8: {e}"),
            }
            .into()
        }),
        other => Err(ErrorKind::Unsupported(format!(
            "the text encoding \"{other}\" (known: \"latin1\", \"utf8\")"
        ))
        .into()),
    }
}

/// Reads a `pydict`-coded field: `len` bytes at the cursor (at most
/// `limits.max_header_bytes`), decoded as text in `encoding`, parsed as a Python literal
/// and read as a `T` ([`FromPy::from_literal`]). Every error is placed at the field.
pub fn read<T: FromPy>(
    c: &mut Cursor<'_>,
    field: &str,
    len: u64,
    encoding: &str,
    limits: &Limits,
) -> Result<T> {
    let too_long = |c: &Cursor<'_>, actual: u64| {
        c.wrap(
            field,
            ErrorKind::Limit {
                what: "the header's length in characters (NumPy's max_header_size: \
                       numpy.load refuses it too; to read it anyway, raise \
                       Limits::max_literal_chars, --max-header-size on the command line)",
                limit: limits.max_literal_chars,
                actual,
            }
            .into(),
        )
    };
    // A character takes four bytes at most: longer is refused before it is read.
    // (Past the end of the file, the truncation is the error, as numpy.load says.)
    if len / 4 > limits.max_literal_chars && len <= c.remaining() {
        return Err(too_long(c, len));
    }
    let bytes = c.bytes(field, len, limits.max_header_bytes)?;
    let text = decode(&bytes, encoding).map_err(|e| c.wrap(field, e))?;
    let chars = text.chars().count() as u64;
    if chars > limits.max_literal_chars {
        return Err(too_long(c, chars));
    }
    T::from_literal(&text, limits).map_err(|e| c.wrap(field, e))
}

/// Reads a `json`-coded field: `len` bytes at the cursor (at most
/// `limits.max_header_bytes`), parsed as JSON and read as a `T`. Every error is placed at
/// the field.
pub fn read_json<T: FromPy>(
    c: &mut Cursor<'_>,
    field: &str,
    len: u64,
    limits: &Limits,
) -> Result<T> {
    let bytes = c.bytes(field, len, limits.max_header_bytes)?;
    T::from_json(&bytes, limits).map_err(|e| c.wrap(field, e))
}

/// [`read_json`] of a dict whose JSON text may not repeat a key in any object (`codec
/// json(unique_keys = true)`): a repeated key is an error naming it.
pub fn read_json_unique<T: Dict>(
    c: &mut Cursor<'_>,
    field: &str,
    len: u64,
    limits: &Limits,
) -> Result<T> {
    let bytes = c.bytes(field, len, limits.max_header_bytes)?;
    crate::json::parse_dict(&bytes, limits, true).map_err(|e| c.wrap(field, e))
}

/// A dict of items, for encoding.
pub fn dict(items: Vec<(&str, PyValue)>) -> PyValue {
    PyValue::Dict(
        items
            .into_iter()
            .map(|(k, v)| (PyValue::Str(k.to_string()), v))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(x: &str) -> PyValue {
        PyValue::Str(x.into())
    }

    /// A dict as generated code declares one: an optional key, a required one, and the
    /// rest.
    #[derive(Default, Debug, PartialEq)]
    struct Meta<W, R> {
        metadata: Option<Map<String>>,
        w: W,
        rest: Map<R>,
    }

    impl<W: FromPy + Default, R: FromPy + Default> Dict for Meta<W, R> {
        const KEYS: &'static [Key] =
            &[Key::Optional("__metadata__"), Key::Required("w"), Key::Rest];

        fn read<V: ItemValue>(
            &mut self,
            i: usize,
            key: &str,
            v: V,
        ) -> std::result::Result<(), V::Error> {
            match i {
                0 => self.metadata = v.get()?,
                1 => self.w = v.get()?,
                _ => self.rest.0.push((key.to_string(), v.get()?)),
            }
            Ok(())
        }

        fn items(&self) -> Vec<(&str, PyValue)> {
            Vec::new()
        }
    }

    #[test]
    fn keys_and_rest() {
        let v = PyValue::Dict(vec![
            (s("__metadata__"), PyValue::Dict(vec![(s("a"), s("b"))])),
            (
                s("w"),
                PyValue::Tuple(vec![PyValue::Int(2), PyValue::Int(3)]),
            ),
            (s("b"), PyValue::List(vec![PyValue::Int(1)])),
        ]);
        let m: Meta<Vec<u64>, Vec<u64>> = from_dict(&v).unwrap();
        assert_eq!(m.metadata.unwrap().get("a").map(String::as_str), Some("b"));
        assert_eq!(m.w, vec![2, 3]);
        assert_eq!(m.rest.0, vec![("b".into(), vec![1])]);
        let e = from_dict::<Meta<String, Vec<u64>>>(&v).err().unwrap();
        assert_eq!(e.location.field.as_deref(), Some("w"));
        assert!(
            e.to_string().contains("expected a str, found a tuple"),
            "{e}"
        );
        let e = from_dict::<Meta<Vec<u64>, String>>(&v).err().unwrap();
        assert_eq!(e.location.field.as_deref(), Some("b"));
        let no_w = PyValue::Dict(vec![(s("b"), PyValue::Int(1))]);
        assert!(from_dict::<Meta<u64, u64>>(&no_w).is_err());
        let absent: Meta<u64, u64> =
            from_dict(&PyValue::Dict(vec![(s("w"), PyValue::Int(1))])).unwrap();
        assert!(absent.metadata.is_none());
        let e = u64::from_py(&PyValue::Int(-1)).unwrap_err();
        assert!(
            e.to_string()
                .contains("expected a non-negative int, found -1"),
            "{e}"
        );
        let e = u8::from_py(&s("x")).unwrap_err();
        assert!(e.to_string().contains("found a str"), "{e}");
    }

    /// Reads `text` as a `T` from JSON ([`FromPy::from_json`]: straight into the type, or
    /// item by item) and from the value tree: the same dict, or the same error at the
    /// same field.
    fn same_as_tree<T: Dict + PartialEq + std::fmt::Debug>(text: &str, limits: &Limits) {
        let tree = crate::json::parse(text.as_bytes(), limits).and_then(|v| from_dict::<T>(&v));
        match (tree, T::from_json(text.as_bytes(), limits)) {
            (Ok(a), Ok(b)) => assert_eq!(a, b, "{text}"),
            (Err(a), Err(b)) => {
                assert_eq!(a.to_string(), b.to_string(), "{text}");
                assert_eq!(a.location.field, b.location.field, "{text}");
            }
            (a, b) => panic!("{text}: {a:?} / {b:?}"),
        }
    }

    /// A JSON dict's `rest` items are at most `Limits::max_tensors`, counted as they are
    /// read, on the direct path and on the one item by item (a key with an escape).
    #[test]
    fn json_rest_items_are_bounded_as_they_are_read() {
        type M = Meta<Vec<u64>, Vec<u64>>;
        let limits = Limits {
            max_tensors: 2,
            ..Limits::default()
        };
        let two = r#"{"w": [1], "a": [1], "__metadata__": {"k": "v"}, "b\u0041": [2]}"#;
        let m = M::from_json(two.as_bytes(), &limits).unwrap();
        assert_eq!(m.rest.0.len(), 2);
        for three in [
            r#"{"w": [1], "a": [1], "b": [2], "c": [3]}"#,
            r#"{"w": [1], "a\u0041": [1], "b": [2], "c": "not read"}"#,
        ] {
            let e = M::from_json(three.as_bytes(), &limits).unwrap_err();
            assert!(
                matches!(
                    e.kind,
                    ErrorKind::Limit {
                        limit: 2,
                        actual: 3,
                        ..
                    }
                ),
                "{three}: {e}"
            );
        }
    }

    /// A dict read from JSON as its items are parsed ([`FromPy::from_json`]) gives what
    /// the value tree then [`from_dict`] gives: the same dict, or the same error at the
    /// same field (text errors first, keys in declared order, the first bad `rest` item,
    /// a missing key); repeated keys keep the first position and the last value.
    #[test]
    fn json_dicts_read_as_parsed_equal_the_tree() {
        type M = Meta<Vec<u64>, Vec<u64>>;
        let limits = Limits::default();
        for text in [
            r#"{"b": [1], "w": [2, 3], "__metadata__": {"a": "b"}, "c": []}"#,
            r#"  {"w": [1]}"#,
            r#"{"w": [1], "b": [1], "b": [2], "c": [3]}"#,
            r#"{"w": [1], "w": "x"}"#,
            r#"{"w": "x", "b": "y", "__metadata__": 3}"#,
            r#"{"b": "y", "c": [1], "d": "z", "w": [1]}"#,
            r#"{"b": [1]}"#,
            r#"{"b\u0041": [1], "w": [2]}"#,
            r#"{"w": [1], "b": [1]"#,
            r#"{"w": [1]} x"#,
            r#"[1, 2]"#,
            r#"{"w": [1.0]}"#,
            r#"{"w": [18446744073709551615], "b": [0]}"#,
            r#"{"w": [18446744073709551616]}"#,
            r#"{"w": [1], "b": [-1]}"#,
            r#"{"w": [1], "__metadata__": null}"#,
            r#"{"w": [1], "__metadata__": {"a": "b", "a": "c"}}"#,
            r#"{"w": [1], "__metadata__": {"a": 1}}"#,
            r#"{"w": [1], "b": {"x": 1}}"#,
            r#"{"w": null}"#,
        ] {
            same_as_tree::<M>(text, &limits);
        }
        type F = Meta<f64, Option<bool>>;
        for text in [
            r#"{"w": 3, "b": true, "c": null}"#,
            r#"{"w": -2.5, "b": 1}"#,
            r#"{"w": 1e400}"#,
            r#"{"w": "1"}"#,
        ] {
            same_as_tree::<F>(text, &limits);
        }
        let m = M::from_json(br#"{"w": [1], "b": [1], "c": [2], "b": [3]}"#, &limits).unwrap();
        assert_eq!(m.rest.0, vec![("b".into(), vec![3]), ("c".into(), vec![2])]);
    }
}
