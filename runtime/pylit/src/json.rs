//! The JSON codec of dict fields (the safetensors header), over the same value model as
//! Python literals ([`PyValue`]), so that a schema's `dict` reads the same from either.
//!
//! Parsing is `serde_json`'s (a well-kept, fuzzed parser with a recursion limit), into
//! [`PyValue`] directly: objects keep their keys in text order, one item per key (the
//! last value at the first position, as Python's `json` module keeps it); integers that
//! fit 64 bits stay integers; text longer than `limits.max_header_bytes` is refused
//! before parsing.

use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use tensorfmt_core::error::{ErrorKind, Result};
use tensorfmt_core::limits::Limits;

use crate::PyValue;

const CODEC: &str = "json";

/// Parses JSON text into a value.
///
/// Errors are [`ErrorKind::Codec`] naming the line and column; text longer than
/// `limits.max_header_bytes` is an [`ErrorKind::Limit`].
pub fn parse(text: &[u8], limits: &Limits) -> Result<PyValue> {
    if text.len() as u64 > limits.max_header_bytes {
        return Err(ErrorKind::Limit {
            what: "json length",
            limit: limits.max_header_bytes,
            actual: text.len() as u64,
        }
        .into());
    }
    let Json(v) = serde_json::from_slice(text).map_err(|e| ErrorKind::Codec {
        codec: CODEC,
        message: e.to_string(),
    })?;
    Ok(v)
}

/// Encodes a value as compact JSON (`{"a":[1,2]}`, no spaces, keys in the given order).
/// Tuples and lists are arrays, bytes an array of numbers, `None` is `null`; a
/// non-finite float is an error (JSON has none).
pub fn encode(v: &PyValue) -> Result<String> {
    serde_json::to_string(&to_json(v)?).map_err(|e| {
        ErrorKind::Codec {
            codec: CODEC,
            message: e.to_string(),
        }
        .into()
    })
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

/// A [`PyValue`] read by serde.
struct Json(PyValue);

impl<'de> Deserialize<'de> for Json {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        d.deserialize_any(JsonVisitor).map(Json)
    }
}

struct JsonVisitor;

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
        while let Some(Json(v)) = seq.next_element()? {
            items.push(v);
        }
        Ok(PyValue::List(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<PyValue, A::Error> {
        let mut items: Vec<(PyValue, PyValue)> = Vec::new();
        let mut seen: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
        while let Some((k, Json(v))) = map.next_entry::<String, Json>()? {
            match seen.get(&k) {
                Some(&at) => items[at].1 = v,
                None => {
                    seen.insert(k.clone(), items.len());
                    items.push((PyValue::Str(k), v));
                }
            }
        }
        Ok(PyValue::Dict(items))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
