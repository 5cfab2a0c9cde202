//! The JSON codec of dict fields (the safetensors header), over the same value model as
//! Python literals ([`PyValue`]), so that a schema's `dict` reads the same from either.
//!
//! Parsing is `serde_json`'s (a well-kept, fuzzed parser with a recursion limit), into
//! [`PyValue`] directly: objects keep their keys in text order, one item per key (the
//! last value at the first position, as Python's `json` module keeps it); integers that
//! fit 64 bits stay integers; text longer than `limits.max_header_bytes` is refused
//! before parsing. A dict field is read as its top-level items are parsed
//! ([`FromPy::from_json`](crate::FromPy::from_json)), with no tree for the object itself.

use std::borrow::Cow;
use std::fmt;

use serde::de::{Deserialize, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use tensorfmt_core::error::{Error, ErrorKind, Result};
use tensorfmt_core::limits::Limits;

use crate::{from_dict, Dict, Key, PyValue};

const CODEC: &str = "json";

/// Parses JSON text into a value.
///
/// Errors are [`ErrorKind::Codec`] naming the line and column; text longer than
/// `limits.max_header_bytes` is an [`ErrorKind::Limit`].
pub fn parse(text: &[u8], limits: &Limits) -> Result<PyValue> {
    parse_with(text, limits, false)
}

/// [`parse`]; `unique`: an object that repeats a key is an error naming the key (the
/// safetensors crate refuses such headers), not one item per key.
pub fn parse_with(text: &[u8], limits: &Limits, unique: bool) -> Result<PyValue> {
    if text.len() as u64 > limits.max_header_bytes {
        return Err(ErrorKind::Limit {
            what: "json length",
            limit: limits.max_header_bytes,
            actual: text.len() as u64,
        }
        .into());
    }
    let mut de = serde_json::Deserializer::from_slice(text);
    let v = JsonVisitor { unique }
        .deserialize(&mut de)
        .and_then(|v| de.end().map(|()| v))
        .map_err(|e| ErrorKind::Codec {
            codec: CODEC,
            message: e.to_string(),
        })?;
    Ok(v)
}

/// Parses JSON text as the dict `T`: straight into its typed fields where the text reads
/// plainly (`crate::direct`), else its top-level items handed to [`Dict::set`] as they
/// are parsed (each value parsed as a [`PyValue`] and dropped once set), with no value
/// tree for the object itself. What it returns and reports is what [`parse`] then
/// [`from_dict`] would: errors of the text first, then those of the keys in declared
/// order, a `rest` key's items in text order. An object that repeats a key (one item per
/// key is kept, see [`parse`]) or text that is not an object goes through them.
/// `unique`: a key repeated in any object is an error ([`parse_with`]).
pub(crate) fn parse_dict<T: Dict>(text: &[u8], limits: &Limits, unique: bool) -> Result<T> {
    let keys = T::KEYS;
    let is_object = text
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|&b| b == b'{');
    if keys.len() > 64 || !is_object || text.len() as u64 > limits.max_header_bytes {
        return from_dict(&parse_with(text, limits, unique)?);
    }
    // The items of the `rest` key are one per name (a safetensors header's tensors): at
    // most `limits.max_tensors`, counted as they are read, before they take memory.
    let max_rest = limits.max_tensors;
    // The direct path: no value tree at all, when the text reads plainly (see
    // `crate::direct`); anything else is read below, which gives the result or the error.
    let past_max_rest = || {
        Error::from(ErrorKind::Limit {
            what: "items of a dict beyond its declared keys (one per tensor, \
                   `Limits::max_tensors`)",
            limit: max_rest,
            actual: max_rest.saturating_add(1),
        })
    };
    let mut de = serde_json::Deserializer::from_slice(text);
    match de
        .deserialize_map(crate::direct::DictVisitor::<T>::with_max_rest(max_rest))
        .and_then(|out| de.end().map(|()| out))
    {
        Ok(out) => return Ok(out),
        Err(e) if e.to_string().starts_with(crate::direct::PAST_MAX_REST) => {
            return Err(past_max_rest())
        }
        Err(_) => {}
    }
    let mut items = Items {
        unique,
        out: T::default(),
        seen: 0,
        failed: Vec::new(),
        hashes: Vec::new(),
        max_rest,
        rest: 0,
    };
    let mut de = serde_json::Deserializer::from_slice(text);
    let read = (&mut de)
        .deserialize_map(&mut items)
        .and_then(|()| de.end());
    if items.rest > max_rest {
        return Err(past_max_rest());
    }
    read.map_err(|e| ErrorKind::Codec {
        codec: CODEC,
        message: e.to_string(),
    })?;
    items.hashes.sort_unstable();
    if items.hashes.windows(2).any(|w| w[0] == w[1]) {
        return from_dict(&parse_with(text, limits, unique)?);
    }
    let Items {
        out,
        seen,
        mut failed,
        ..
    } = items;
    for (i, k) in keys.iter().enumerate() {
        if let Some(at) = failed.iter().position(|(j, _)| *j == i) {
            return Err(failed.swap_remove(at).1);
        }
        if let Key::Required(name) = k {
            if seen & (1 << i) == 0 {
                return Err(crate::missing(name));
            }
        }
    }
    Ok(out)
}

/// The state of [`parse_dict`]: the dict being filled, the keys set (bit `i` for
/// `T::KEYS[i]`), the first error of each key (its field named), a hash of every key
/// met, to find a repeated one, and the items of the `rest` key, at most `max_rest`
/// (reading stops at the one past them).
struct Items<T> {
    unique: bool,
    out: T,
    seen: u64,
    failed: Vec<(usize, Error)>,
    hashes: Vec<u64>,
    max_rest: u64,
    rest: u64,
}

impl<'de, T: Dict> Visitor<'de> for &mut Items<T> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<(), A::Error> {
        let rest = T::KEYS.iter().position(|k| matches!(k, Key::Rest));
        while let Some(Text(key)) = map.next_key::<Text<'de>>()? {
            let known = T::KEYS.iter().position(|k| k.name() == Some(&*key));
            if known.is_none() && rest.is_some() {
                self.rest += 1;
                if self.rest > self.max_rest {
                    return Err(serde::de::Error::custom("more items than the limit"));
                }
            }
            let value = map.next_value_seed(JsonVisitor {
                unique: self.unique,
            })?;
            self.hashes.push(fnv(&key));
            let i = match known {
                Some(i) => {
                    self.seen |= 1 << i;
                    i
                }
                None => match rest {
                    Some(i) => i,
                    None => continue,
                },
            };
            if self.failed.iter().any(|(j, _)| *j == i) {
                continue;
            }
            if let Err(e) = self.out.set(i, &key, &value) {
                self.failed.push((i, e.in_field(&key)));
            }
        }
        Ok(())
    }
}

/// FNV-1a of a key: a repeated key gives a repeated hash (and so does a rare collision,
/// which only costs the slower path).
pub(crate) fn fnv(key: &str) -> u64 {
    key.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A key as serde hands it: borrowed from the text when it has no escape.
pub(crate) struct Text<'de>(pub(crate) Cow<'de, str>);

impl<'de> Deserialize<'de> for Text<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> std::result::Result<Text<'de>, E> {
                Ok(Text(Cow::Borrowed(s)))
            }
            fn visit_str<E>(self, s: &str) -> std::result::Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(s.to_string())))
            }
            fn visit_string<E>(self, s: String) -> std::result::Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(s)))
            }
        }
        d.deserialize_str(V)
    }
}

/// Encodes a value as compact JSON (`{"a":[1,2]}`, no spaces, keys in the given order).
/// Tuples and lists are arrays, bytes an array of numbers, `None` is `null`; a
/// non-finite float is an error (JSON has none). A dict that repeats a key keeps one
/// item for it (the last value at the first position).
///
/// Written straight from the value: no JSON tree is built (a header of a million entries
/// costs its text), except for a dict that repeats a key.
pub fn encode(v: &PyValue) -> Result<String> {
    serde_json::to_string(&Direct(v)).map_err(|e| {
        ErrorKind::Codec {
            codec: CODEC,
            message: e.to_string(),
        }
        .into()
    })
}

/// [`encode`] of the dict `d`'s value ([`crate::ToPy::to_py`]), its items made one at a
/// time ([`Dict::each_item`]): a header of a million entries costs its text, its keys and
/// one entry's value. A dict that repeats a key is encoded from its value.
pub fn encode_dict<D: Dict>(d: &D) -> Result<String> {
    use serde::ser::{SerializeMap, Serializer as _};
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::new(&mut out);
    let mut map = ser.serialize_map(None).map_err(|e| codec_error(&e))?;
    let mut keys = std::collections::HashSet::new();
    let mut repeated = false;
    d.each_item(&mut |k, v| {
        if !keys.insert(k) {
            repeated = true;
            // Stops the walk; the value is encoded whole below.
            return Err(ErrorKind::Invalid(String::new()).into());
        }
        map.serialize_entry(k, &Direct(&v))
            .map_err(|e| codec_error(&e))
    })
    .or_else(|e| if repeated { Ok(()) } else { Err(e) })?;
    if repeated {
        return encode(&crate::ToPy::to_py(d));
    }
    map.end().map_err(|e| codec_error(&e))?;
    drop(keys);
    String::from_utf8(out).map_err(|_| {
        ErrorKind::Codec {
            codec: CODEC,
            message: "the text is not UTF-8".into(),
        }
        .into()
    })
}

/// A serializer's error as [`encode`] reports it.
fn codec_error(e: &serde_json::Error) -> Error {
    ErrorKind::Codec {
        codec: CODEC,
        message: e.to_string(),
    }
    .into()
}

/// A value serialized as [`encode`] writes it, without an intermediate tree.
struct Direct<'a>(&'a PyValue);

impl serde::Serialize for Direct<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::{Error as _, SerializeMap, SerializeSeq};
        match self.0 {
            PyValue::None => s.serialize_unit(),
            PyValue::Bool(b) => s.serialize_bool(*b),
            PyValue::Int(i) => match (u64::try_from(*i), i64::try_from(*i)) {
                (Ok(u), _) => s.serialize_u64(u),
                (_, Ok(v)) => s.serialize_i64(v),
                _ => Err(S::Error::custom(format!("{i} does not fit in 64 bits"))),
            },
            PyValue::Float(f) if f.is_finite() => s.serialize_f64(*f),
            PyValue::Float(f) => Err(S::Error::custom(format!("{f} has no JSON form"))),
            PyValue::Str(t) => s.serialize_str(t),
            PyValue::Bytes(b) => s.collect_seq(b.iter().map(|&x| u64::from(x))),
            PyValue::Tuple(items) | PyValue::List(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(&Direct(item))?;
                }
                seq.end()
            }
            PyValue::Dict(items) => {
                let mut keys = std::collections::HashSet::with_capacity(items.len());
                for (k, _) in items {
                    let PyValue::Str(k) = k else {
                        return Err(S::Error::custom(format!(
                            "a {} key has no JSON form",
                            k.type_name()
                        )));
                    };
                    if !keys.insert(k.as_str()) {
                        // A repeated key: one item per key, as a JSON object keeps them.
                        let tree =
                            to_json(self.0).map_err(|e| S::Error::custom(codec_message(&e)))?;
                        return serde::Serialize::serialize(&tree, s);
                    }
                }
                drop(keys);
                let mut map = s.serialize_map(Some(items.len()))?;
                for (k, v) in items {
                    map.serialize_entry(&Direct(k), &Direct(v))?;
                }
                map.end()
            }
        }
    }
}

/// The message of a [`to_json`] error, as [`encode`] words it.
fn codec_message(e: &Error) -> String {
    match &e.kind {
        ErrorKind::Codec { message, .. } => message.clone(),
        _ => e.to_string(),
    }
}

fn to_json(v: &PyValue) -> Result<serde_json::Value> {
    use serde_json::Value;
    Ok(match v {
        PyValue::None => Value::Null,
        PyValue::Bool(b) => Value::Bool(*b),
        PyValue::Int(i) => {
            if let Ok(u) = u64::try_from(*i) {
                Value::from(u)
            } else if let Ok(s) = i64::try_from(*i) {
                Value::from(s)
            } else {
                return Err(ErrorKind::Codec {
                    codec: CODEC,
                    message: format!("{i} does not fit in 64 bits"),
                }
                .into());
            }
        }
        PyValue::Float(f) => serde_json::Number::from_f64(*f)
            .map(Value::Number)
            .ok_or_else(|| ErrorKind::Codec {
                codec: CODEC,
                message: format!("{f} has no JSON form"),
            })?,
        PyValue::Str(s) => Value::String(s.clone()),
        PyValue::Bytes(b) => Value::Array(b.iter().map(|x| Value::from(*x)).collect()),
        PyValue::Tuple(items) | PyValue::List(items) => {
            Value::Array(items.iter().map(to_json).collect::<Result<_>>()?)
        }
        PyValue::Dict(items) => {
            let mut m = serde_json::Map::with_capacity(items.len());
            for (k, v) in items {
                let PyValue::Str(k) = k else {
                    return Err(ErrorKind::Codec {
                        codec: CODEC,
                        message: format!("a {} key has no JSON form", k.type_name()),
                    }
                    .into());
                };
                m.insert(k.clone(), to_json(v)?);
            }
            Value::Object(m)
        }
    })
}

/// Reads a value tree, a key repeated in any object an error: how the direct path
/// ([`crate::direct`]) reads a value its type leaves to [`crate::FromPy::from_py`].
#[derive(Clone, Copy)]
pub(crate) struct Tree;

impl<'de> DeserializeSeed<'de> for Tree {
    type Value = PyValue;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<PyValue, D::Error> {
        JsonVisitor { unique: true }.deserialize(d)
    }
}

/// Reads a value; `unique`: an object that repeats a key is an error (otherwise one item
/// per key is kept, as Python's `json` keeps it).
#[derive(Clone, Copy)]
struct JsonVisitor {
    unique: bool,
}

impl<'de> DeserializeSeed<'de> for JsonVisitor {
    type Value = PyValue;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<PyValue, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = PyValue;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E>(self) -> std::result::Result<PyValue, E> {
        Ok(PyValue::None)
    }

    fn visit_bool<E>(self, b: bool) -> std::result::Result<PyValue, E> {
        Ok(PyValue::Bool(b))
    }

    fn visit_i64<E>(self, i: i64) -> std::result::Result<PyValue, E> {
        Ok(PyValue::Int(i128::from(i)))
    }

    fn visit_u64<E>(self, u: u64) -> std::result::Result<PyValue, E> {
        Ok(PyValue::Int(i128::from(u)))
    }

    fn visit_f64<E>(self, f: f64) -> std::result::Result<PyValue, E> {
        Ok(PyValue::Float(f))
    }

    fn visit_str<E>(self, s: &str) -> std::result::Result<PyValue, E> {
        Ok(PyValue::Str(s.to_string()))
    }

    fn visit_string<E>(self, s: String) -> std::result::Result<PyValue, E> {
        Ok(PyValue::Str(s))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<PyValue, A::Error> {
        let mut items = Vec::new();
        while let Some(v) = seq.next_element_seed(self)? {
            items.push(v);
        }
        Ok(PyValue::List(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<PyValue, A::Error> {
        let mut items: Vec<(PyValue, PyValue)> = Vec::new();
        while let Some(k) = map.next_key::<String>()? {
            let v = map.next_value_seed(self)?;
            items.push((PyValue::Str(k), v));
        }
        if let Some(k) = one_item_per_key(&mut items, self.unique) {
            return Err(serde::de::Error::custom(format!(
                "the key \"{k}\" appears twice in an object"
            )));
        }
        Ok(PyValue::Dict(items))
    }
}

/// Keeps one item per key of an object's items (all keyed by strings), as Python's `json`
/// module does: the first position, the last value; or, `unique`, changes nothing and
/// returns the first key repeated. The keys are compared in place (a
/// sort of their indices; small objects pairwise), with no copy and no hashing: the
/// common object, with no repeated key, costs no allocation beyond the index.
fn one_item_per_key(items: &mut Vec<(PyValue, PyValue)>, unique: bool) -> Option<String> {
    fn key(item: &(PyValue, PyValue)) -> &str {
        item.0.as_str().unwrap_or_default()
    }
    let n = items.len();
    // Index pairs (first, later) of the same key, in the order the later ones came.
    let mut repeats: Vec<(usize, usize)> = Vec::new();
    if n <= 8 {
        for later in 1..n {
            if let Some(first) = (0..later).find(|&i| key(&items[i]) == key(&items[later])) {
                repeats.push((first, later));
            }
        }
    } else {
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_unstable_by(|&a, &b| key(&items[a]).cmp(key(&items[b])).then(a.cmp(&b)));
        let mut first = order[0];
        for pair in order.windows(2) {
            if key(&items[pair[0]]) == key(&items[pair[1]]) {
                repeats.push((first, pair[1]));
            } else {
                first = pair[1];
            }
        }
        repeats.sort_unstable_by_key(|&(_, later)| later);
    }
    if repeats.is_empty() {
        return None;
    }
    if unique {
        return Some(key(&items[repeats[0].1]).to_string());
    }
    let mut dropped = vec![false; n];
    for &(first, later) in &repeats {
        items[first].1 = std::mem::replace(&mut items[later].1, PyValue::None);
        dropped[later] = true;
    }
    let mut at = 0;
    items.retain(|_| {
        at += 1;
        !dropped[at - 1]
    });
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unique_keys_refuse_a_repeated_key_at_any_depth() {
        let l = Limits::default();
        for text in [
            &br#"{"a": 1, "b": 2, "a": 3}"#[..],
            br#"{"x": {"b": 1, "b": 2}}"#,
            br#"[{"k": 1, "k": 1}]"#,
        ] {
            let e = parse_with(text, &l, true).unwrap_err().to_string();
            assert!(e.contains("appears twice"), "{e}");
            parse(text, &l).unwrap();
        }
        let e = parse_with(br#"{"x": {"b": 1, "b": 2}}"#, &l, true)
            .unwrap_err()
            .to_string();
        assert!(e.contains("\"b\""), "{e}");
        assert_eq!(
            parse_with(br#"{"a": [1, {"b": 2}]}"#, &l, true).unwrap(),
            parse(br#"{"a": [1, {"b": 2}]}"#, &l).unwrap()
        );
    }

    #[test]
    fn objects_keep_order_and_one_item_per_key() {
        let v = parse(
            br#"{"b": [1, 2.5, null, true], "a": {"x": "y"}, "b": -3}"#,
            &Limits::default(),
        )
        .unwrap();
        let PyValue::Dict(items) = &v else {
            panic!("{v:?}")
        };
        assert_eq!(items.len(), 2);
        assert_eq!(items[0], (PyValue::Str("b".into()), PyValue::Int(-3)));
        assert_eq!(encode(&v).unwrap(), r#"{"b":-3,"a":{"x":"y"}}"#);
    }

    /// Repeated keys, in a small object and in one sorted to find them: the first
    /// position, the last value, as Python's `json.loads` keeps them.
    #[test]
    fn repeated_keys_keep_the_first_position_and_the_last_value() {
        let v = parse(
            br#"{"a": 1, "b": 2, "a": 3, "c": 4, "b": 5, "a": 6}"#,
            &Limits::default(),
        )
        .unwrap();
        assert_eq!(encode(&v).unwrap(), r#"{"a":6,"b":5,"c":4}"#);
        let mut text = String::from("{");
        for i in 0..20 {
            text += &format!("\"k{}\": {i}, ", i % 7);
        }
        text += "\"z\": -1}";
        let v = parse(text.as_bytes(), &Limits::default()).unwrap();
        assert_eq!(
            encode(&v).unwrap(),
            r#"{"k0":14,"k1":15,"k2":16,"k3":17,"k4":18,"k5":19,"k6":13,"z":-1}"#
        );
        let distinct = parse(
            br#"{"j": 0, "i": 1, "h": 2, "g": 3, "f": 4, "e": 5, "d": 6, "c": 7, "b": 8, "a": 9}"#,
            &Limits::default(),
        )
        .unwrap();
        assert_eq!(
            encode(&distinct).unwrap(),
            r#"{"j":0,"i":1,"h":2,"g":3,"f":4,"e":5,"d":6,"c":7,"b":8,"a":9}"#
        );
    }

    /// Written straight from the value, the text is what the JSON tree writes, a dict
    /// that repeats a key included; errors word the same.
    #[test]
    fn direct_encoding_is_the_tree_s_text() {
        let s = |t: &str| PyValue::Str(t.into());
        let v = PyValue::Dict(vec![
            (s("n"), PyValue::None),
            (
                s("i"),
                PyValue::List(vec![PyValue::Int(-5), PyValue::Int(u64::MAX.into())]),
            ),
            (
                s("f"),
                PyValue::Tuple(vec![PyValue::Float(0.1), PyValue::Float(-2.0)]),
            ),
            (s("b"), PyValue::Bytes(vec![0, 255])),
            (s("t"), PyValue::Bool(true)),
            (
                s("q\"\u{1}"),
                PyValue::Dict(vec![(s("k"), s("v")), (s("k"), s("w"))]),
            ),
        ]);
        let tree = serde_json::to_string(&to_json(&v).unwrap()).unwrap();
        assert_eq!(encode(&v).unwrap(), tree);
        assert!(encode(&v).unwrap().contains(r#"{"k":"w"}"#));
        let huge = PyValue::List(vec![PyValue::Int(1 << 70)]);
        let e = encode(&huge).unwrap_err();
        assert!(e.to_string().contains("does not fit in 64 bits"), "{e}");
        let key = PyValue::Dict(vec![(PyValue::Int(1), PyValue::None)]);
        let e = encode(&key).unwrap_err();
        assert!(e.to_string().contains("key has no JSON form"), "{e}");
    }

    /// A header: `format` then the entries of the rest key, made one at a time.
    #[derive(Default)]
    struct Header(Vec<(String, u64)>);

    impl Dict for Header {
        const KEYS: &'static [Key] = &[Key::Required("format"), Key::Rest];
        fn read<V: crate::ItemValue>(&mut self, _: usize, _: &str, _: V) -> crate::Got<V> {
            Ok(())
        }
        fn items(&self) -> Vec<(&str, PyValue)> {
            let mut items = vec![("format", PyValue::Str("pt".into()))];
            items.extend(
                self.0
                    .iter()
                    .map(|(k, v)| (k.as_str(), PyValue::Int((*v).into()))),
            );
            items
        }
    }

    /// A dict encoded item by item is its value's text; one that repeats a key keeps one
    /// item for it, as its value's text does.
    #[test]
    fn dicts_encode_item_by_item_as_their_value() {
        let h = Header(vec![("a".into(), 1), ("b\"".into(), 2)]);
        let text = encode_dict(&h).unwrap();
        assert_eq!(text, r#"{"format":"pt","a":1,"b\"":2}"#);
        assert_eq!(text, encode(&crate::ToPy::to_py(&h)).unwrap());
        let twice = Header(vec![("a".into(), 1), ("format".into(), 2), ("a".into(), 3)]);
        assert_eq!(encode_dict(&twice).unwrap(), r#"{"format":2,"a":3}"#);
    }

    #[test]
    fn bad_and_long_text_is_refused() {
        assert!(parse(b"{\"a\": ", &Limits::default()).is_err());
        assert!(parse(b"[1] x", &Limits::default()).is_err());
        let limits = Limits {
            max_header_bytes: 4,
            ..Limits::default()
        };
        assert!(parse(b"[1, 2]", &limits).is_err());
        let deep = "[".repeat(100_000);
        assert!(parse(deep.as_bytes(), &Limits::default()).is_err());
        assert!(encode(&PyValue::Float(f64::NAN)).is_err());
    }
}
