//! Typed values read straight from JSON text, with no value tree: the fast path of
//! [`FromPy::from_json`](crate::FromPy::from_json) for dicts (the safetensors header).
//!
//! Each type reads itself from serde's deserializer ([`FromPy::from_json_direct`]), a dict
//! key by key through [`Dict::read`], each value handed over as a [`JsonValue`]. The path reads
//! only what it reads exactly as the value-tree path ([`crate::json::parse`] then
//! [`FromPy::from_py`]) would, and refuses everything else — a value of another type, a
//! missing, repeated or undeclared key, any error of the text: its caller then parses
//! the text again the value-tree way, which gives the result or the exact error. So this
//! module never decides what a file means; it only skips the tree when the answer is
//! plain.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::json::{fnv, Text};
use crate::{Dict, FromPy, ItemValue, Key, Map};

/// The seed that reads a `T` straight from JSON ([`FromPy::from_json_direct`]).
pub(crate) struct Direct<T>(PhantomData<T>);

impl<T> Direct<T> {
    pub(crate) fn new() -> Self {
        Direct(PhantomData)
    }
}

impl<'de, T: FromPy> DeserializeSeed<'de> for Direct<T> {
    type Value = T;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<T, D::Error> {
        T::from_json_direct(d)
    }
}

/// The next value of a JSON object being parsed, for [`Dict::read`]: read straight into
/// the type asked for, once.
pub(crate) struct JsonValue<'m, 'de, A> {
    map: &'m mut A,
    read: bool,
    de: PhantomData<&'de ()>,
}

impl<'de, A: MapAccess<'de>> ItemValue for &mut JsonValue<'_, 'de, A> {
    type Error = A::Error;

    fn get<T: FromPy>(self) -> Result<T, A::Error> {
        if std::mem::replace(&mut self.read, true) {
            return Err(refuse("a value read twice"));
        }
        self.map.next_value_seed(Direct::<T>::new())
    }
}

/// The refusal that sends the caller back to the value-tree path.
fn refuse<E: serde::de::Error>(why: &str) -> E {
    E::custom(why)
}

/// A dict: its keys by [`Dict::KEYS`], each value read by [`Dict::read`]; every required
/// key present, none repeated, none undeclared unless the dict has a `rest` key.
/// The refusal of a dict whose `rest` key takes more items than the visitor's limit:
/// final, the slower path would refuse it too.
pub(crate) const PAST_MAX_REST: &str = "more items than the limit";

/// At most `max_rest` items go to the `rest` key (more: refused, [`PAST_MAX_REST`]).
pub(crate) struct DictVisitor<T> {
    max_rest: u64,
    of: PhantomData<T>,
}

impl<T> DictVisitor<T> {
    pub(crate) fn new() -> Self {
        DictVisitor::with_max_rest(u64::MAX)
    }

    /// A visitor that refuses a dict whose `rest` key takes more than `max_rest` items.
    pub(crate) fn with_max_rest(max_rest: u64) -> Self {
        DictVisitor {
            max_rest,
            of: PhantomData,
        }
    }
}

impl<'de, T: Dict> Visitor<'de> for DictVisitor<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<T, A::Error> {
        let keys = T::KEYS;
        if keys.len() > 64 {
            return Err(refuse("too many keys"));
        }
        let rest = keys.iter().position(|k| matches!(k, Key::Rest));
        let mut out = T::default();
        let mut seen = 0u64;
        let mut hashes: Vec<u64> = Vec::new();
        while let Some(Text(key)) = map.next_key::<Text<'de>>()? {
            let i = match keys.iter().position(|k| k.name() == Some(&*key)) {
                Some(i) => {
                    if seen & (1 << i) != 0 {
                        return Err(refuse("a repeated key"));
                    }
                    seen |= 1 << i;
                    i
                }
                None => match rest {
                    Some(_) if hashes.len() as u64 >= self.max_rest => {
                        return Err(refuse(PAST_MAX_REST))
                    }
                    Some(i) => {
                        hashes.push(fnv(&key));
                        i
                    }
                    None => return Err(refuse("an undeclared key")),
                },
            };
            let mut value = JsonValue {
                map: &mut map,
                read: false,
                de: PhantomData,
            };
            out.read(i, &key, &mut value)?;
            if !value.read {
                return Err(refuse("a key the dict does not read"));
            }
        }
        let missing = keys
            .iter()
            .enumerate()
            .any(|(i, k)| matches!(k, Key::Required(_)) && seen & (1 << i) == 0);
        if missing {
            return Err(refuse("a missing key"));
        }
        if repeated(&mut hashes) {
            return Err(refuse("a repeated key"));
        }
        Ok(out)
    }
}

/// True when two hashes are equal (a repeated key, or a rare collision, which only costs
/// the value-tree path).
fn repeated(hashes: &mut [u64]) -> bool {
    hashes.sort_unstable();
    hashes.windows(2).any(|w| w[0] == w[1])
}

/// A map: its items in text order, no key repeated.
pub(crate) fn map<'de, V: FromPy, D: Deserializer<'de>>(d: D) -> Result<Map<V>, D::Error> {
    struct V_<V>(PhantomData<V>);
    impl<'de, V: FromPy> Visitor<'de> for V_<V> {
        type Value = Map<V>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Map<V>, A::Error> {
            let mut out = Vec::new();
            let mut hashes = Vec::new();
            while let Some(Text(key)) = map.next_key::<Text<'de>>()? {
                hashes.push(fnv(&key));
                out.push((key.into_owned(), map.next_value_seed(Direct::<V>::new())?));
            }
            if repeated(&mut hashes) {
                return Err(refuse("a repeated key"));
            }
            Ok(Map(out))
        }
    }
    d.deserialize_map(V_(PhantomData))
}

/// A list or tuple: a JSON array of `T`.
pub(crate) fn seq<'de, T: FromPy, D: Deserializer<'de>>(d: D) -> Result<Vec<T>, D::Error> {
    struct V_<T>(PhantomData<T>);
    impl<'de, T: FromPy> Visitor<'de> for V_<T> {
        type Value = Vec<T>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a JSON array")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
            let mut out = Vec::new();
            while let Some(x) = seq.next_element_seed(Direct::<T>::new())? {
                out.push(x);
            }
            Ok(out)
        }
    }
    d.deserialize_seq(V_(PhantomData))
}

/// An optional value: `null` is `None`.
pub(crate) fn option<'de, T: FromPy, D: Deserializer<'de>>(d: D) -> Result<Option<T>, D::Error> {
    struct V_<T>(PhantomData<T>);
    impl<'de, T: FromPy> Visitor<'de> for V_<T> {
        type Value = Option<T>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a JSON value or null")
        }
        fn visit_none<E>(self) -> Result<Option<T>, E> {
            Ok(None)
        }
        fn visit_unit<E>(self) -> Result<Option<T>, E> {
            Ok(None)
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Option<T>, D::Error> {
            T::from_json_direct(d).map(Some)
        }
    }
    d.deserialize_option(V_(PhantomData))
}

/// A string.
pub(crate) fn string<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    struct V_;
    impl Visitor<'_> for V_ {
        type Value = String;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a JSON string")
        }
        fn visit_str<E>(self, s: &str) -> Result<String, E> {
            Ok(s.to_string())
        }
        fn visit_string<E>(self, s: String) -> Result<String, E> {
            Ok(s)
        }
    }
    d.deserialize_string(V_)
}

/// A boolean.
pub(crate) fn boolean<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    struct V_;
    impl Visitor<'_> for V_ {
        type Value = bool;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a JSON boolean")
        }
        fn visit_bool<E>(self, b: bool) -> Result<bool, E> {
            Ok(b)
        }
    }
    d.deserialize_bool(V_)
}

/// A JSON number, as the value-tree path keeps it: an integer of 64 bits, or a float.
pub(crate) enum Number {
    Int(i128),
    Float(f64),
}

/// A number.
pub(crate) fn number<'de, D: Deserializer<'de>>(d: D) -> Result<Number, D::Error> {
    struct V_;
    impl Visitor<'_> for V_ {
        type Value = Number;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a JSON number")
        }
        fn visit_u64<E>(self, u: u64) -> Result<Number, E> {
            Ok(Number::Int(i128::from(u)))
        }
        fn visit_i64<E>(self, i: i64) -> Result<Number, E> {
            Ok(Number::Int(i128::from(i)))
        }
        fn visit_f64<E>(self, f: f64) -> Result<Number, E> {
            Ok(Number::Float(f))
        }
    }
    d.deserialize_any(V_)
}

/// An integer that fits `T`.
pub(crate) fn int<'de, T: TryFrom<i128>, D: Deserializer<'de>>(d: D) -> Result<T, D::Error> {
    match number(d)? {
        Number::Int(i) => T::try_from(i).map_err(|_| refuse("an integer out of range")),
        Number::Float(_) => Err(refuse("a float for an integer")),
    }
}

/// A float (an integer read as one, as [`FromPy`] reads it).
pub(crate) fn float<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(match number(d)? {
        Number::Int(i) => i as f64,
        Number::Float(f) => f,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Got, PyValue};

    /// A dict as generated code declares one: a required string, an optional map of text,
    /// and the rest, lists of ints.
    #[derive(Debug, Default, PartialEq)]
    struct Entry {
        dtype: String,
        meta: Option<Map<String>>,
        rest: Map<Vec<u64>>,
    }

    impl Dict for Entry {
        const KEYS: &'static [Key] = &[Key::Required("dtype"), Key::Optional("meta"), Key::Rest];
        fn read<V: ItemValue>(&mut self, i: usize, key: &str, v: V) -> Got<V> {
            match i {
                0 => self.dtype = v.get()?,
                1 => self.meta = v.get()?,
                _ => self.rest.0.push((key.to_string(), v.get()?)),
            }
            Ok(())
        }
        fn items(&self) -> Vec<(&str, PyValue)> {
            Vec::new()
        }
    }

    fn direct<T: FromPy>(text: &str) -> Option<T> {
        let mut de = serde_json::Deserializer::from_slice(text.as_bytes());
        T::from_json_direct(&mut de)
            .and_then(|v| de.end().map(|()| v))
            .ok()
    }

    /// Plain text is read straight into the types (no value tree), equal to what the
    /// value tree gives; a repeated or missing key, a value of another type and bad text
    /// are refused, for the value-tree path to answer.
    #[test]
    fn plain_text_is_read_straight_and_anything_else_is_refused() {
        let text = r#"{"a": [1, 2], "meta": {"k": "v"}, "dtype": "F32", "b\u0041": []}"#;
        let e: Entry = direct(text).expect("read straight");
        let tree = crate::from_dict::<Entry>(
            &crate::json::parse(text.as_bytes(), &Default::default()).unwrap(),
        )
        .unwrap();
        assert_eq!(e, tree);
        assert_eq!(e.rest.0[1], ("bA".to_string(), vec![]));
        assert!(direct::<Entry>(r#"{"dtype": "F32", "meta": null}"#).is_some());
        for refused in [
            r#"{"dtype": "F32", "a": [1], "a": [2]}"#,
            r#"{"dtype": "F32", "dtype": "F16"}"#,
            r#"{"dtype": "F32", "meta": {"k": "v", "k": "w"}}"#,
            r#"{"meta": {}}"#,
            r#"{"dtype": 1}"#,
            r#"{"dtype": "F32", "a": [1.0]}"#,
            r#"{"dtype": "F32", "a": [-1]}"#,
            r#"{"dtype": "F32", "a": [1]"#,
            r#"{"dtype": "F32"} x"#,
            r#"[1]"#,
        ] {
            assert!(direct::<Entry>(refused).is_none(), "{refused}");
        }
        assert_eq!(direct::<f64>("3"), Some(3.0));
        assert_eq!(direct::<u8>("256"), None);
        assert_eq!(direct::<Option<bool>>("null"), Some(None));
    }
}
