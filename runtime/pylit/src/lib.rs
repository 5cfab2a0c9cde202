//! The dict codecs: Python literals ([`parse`], [`to_literal`]) and JSON ([`json`]), over
//! one value model ([`PyValue`]) that generated dict structs read through [`FromPy`].
//!
//! The Python-literal codec used by NumPy `.npy` headers: the subset of
//! `ast.literal_eval` that NumPy (any version) writes, plus what it accepts on reading —
//! dicts, tuples, lists, strings, bytes, ints (with the Python 2 `L` suffix), floats,
//! `True`, `False` and `None`.
//!
//! [`parse`] reads a literal; [`to_literal`] writes Python's `repr` of a value and
//! [`encode_dict`] writes a dict of named items, as `repr` separates them or with every
//! item followed by `, ` (the style a schema chooses: NumPy's `_write_array_header`
//! writes the second).
#![warn(missing_docs)]

// `Error` is large by design (it carries a full location); boxing it is a crate-wide
// decision, not this module's.

use tensorfmt_core::error::{Error, ErrorKind, Location, Result};
use tensorfmt_core::limits::Limits;

mod direct;
pub mod json;
mod value;

pub use value::{
    decode, dict, expected, from_dict, literal, read, read_json, read_json_unique, to_list, Dict,
    FromPy, Got, ItemValue, Key, Map, SetValue, ToPy,
};

const CODEC: &str = "python literal";

/// A Python literal value.
#[derive(Debug, Clone, PartialEq)]
pub enum PyValue {
    /// `None`.
    None,
    /// `True` or `False`.
    Bool(bool),
    /// An integer (Python ints are unbounded; larger values are rejected by [`parse`]).
    Int(i128),
    /// A float.
    Float(f64),
    /// A text string.
    Str(String),
    /// A bytes literal `b'...'`.
    Bytes(Vec<u8>),
    /// A tuple `(a, b)`.
    Tuple(Vec<PyValue>),
    /// A list `[a, b]`.
    List(Vec<PyValue>),
    /// A dict, its items in source order. [`parse`] keeps one item per key, as Python does
    /// (the first position, the last value).
    Dict(Vec<(PyValue, PyValue)>),
}

impl PyValue {
    /// The value of the item whose key is the string `key`, when `self` is a dict.
    pub fn dict_get(&self, key: &str) -> Option<&PyValue> {
        match self {
            PyValue::Dict(items) => items
                .iter()
                .rev()
                .find(|(k, _)| matches!(k, PyValue::Str(s) if s == key))
                .map(|(_, v)| v),
            _ => None,
        }
    }

    /// The string, when `self` is a `Str`.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            PyValue::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The boolean, when `self` is a `Bool`.
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            PyValue::Bool(b) => Some(*b),
            _ => None,
        }
    }

    /// The integer, when `self` is an `Int`.
    pub fn as_int(&self) -> Option<i128> {
        match self {
            PyValue::Int(i) => Some(*i),
            _ => None,
        }
    }

    /// The items, when `self` is a tuple or a list.
    pub fn as_seq(&self) -> Option<&[PyValue]> {
        match self {
            PyValue::Tuple(v) | PyValue::List(v) => Some(v),
            _ => None,
        }
    }

    /// The items as `u64`s, when `self` is a tuple or list of non-negative ints that fit
    /// (an npy `shape`).
    pub fn as_u64_seq(&self) -> Option<Vec<u64>> {
        self.as_seq()?
            .iter()
            .map(|v| match v {
                PyValue::Int(i) => u64::try_from(*i).ok(),
                _ => None,
            })
            .collect()
    }

    /// Python's name of the value's type (`dict`, `tuple`, `str`...), for messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            PyValue::None => "NoneType",
            PyValue::Bool(_) => "bool",
            PyValue::Int(_) => "int",
            PyValue::Float(_) => "float",
            PyValue::Str(_) => "str",
            PyValue::Bytes(_) => "bytes",
            PyValue::Tuple(_) => "tuple",
            PyValue::List(_) => "list",
            PyValue::Dict(_) => "dict",
        }
    }
}

/// The value of `key` in `dict`, or an [`ErrorKind::Invalid`] error (`missing key 'descr'`)
/// whose `location.field` is the key.
pub fn require<'v>(dict: &'v PyValue, key: &str) -> Result<&'v PyValue> {
    if !matches!(dict, PyValue::Dict(_)) {
        return Err(Error::new(
            ErrorKind::Invalid(format!(
                "expected a dict holding key '{key}', found a {}",
                dict.type_name()
            )),
            Location::default(),
        ));
    }
    dict.dict_get(key).ok_or_else(|| missing(key))
}

/// The error of a missing key.
fn missing(key: &str) -> Error {
    Error::new(
        ErrorKind::Invalid(format!("missing key '{key}'")),
        Location::default().with_field(key),
    )
}

/// Parses a Python literal (what `ast.literal_eval` accepts, less complex numbers, sets
/// and arithmetic). Whitespace, comments and a trailing newline around and between
/// tokens are allowed.
///
/// Errors are [`ErrorKind::Codec`] naming the character offset and what was expected;
/// `location.offset` is the *byte* offset in `text` (callers add where `text` starts in
/// the file). Nesting deeper than `limits.max_depth` and text longer than
/// `limits.max_header_bytes` give [`ErrorKind::Limit`].
pub fn parse(text: &str, limits: &Limits) -> Result<PyValue> {
    let mut p = Parser::new(text, limits)?;
    p.skip_ws();
    let v = p.value()?;
    p.skip_ws();
    if p.pos < p.bytes.len() {
        return Err(p.err("end of input"));
    }
    Ok(v)
}

/// A dict's key as the parser found it: a plain string borrowed from the text, or any
/// other value.
enum DictKey<'t> {
    Str(&'t str),
    Value(PyValue),
}

/// Parses the Python literal `text` as the dict `T`: a dict's items are handed to
/// [`Dict::set`] as they are parsed, with no value tree for the dict itself (values are
/// parsed as [`PyValue`]s). What is reported is what [`parse`] then [`from_dict`] report:
/// errors of the text first, then those of the keys in declared order. A dict with a
/// `rest` key, more than 64 keys, or text that is not a dict goes through them.
///
/// A literal dict holds its declared keys alone (unless it has a `rest` key), each
/// sequence of the kind declared (a `tuple<T>` key a tuple, a `list<T>` key a list), as
/// `numpy.load` requires of an npy header; [`literal_dict`] says what is wrong otherwise.
pub(crate) fn parse_dict<T: Dict>(text: &str, limits: &Limits) -> Result<T> {
    let keys = T::KEYS;
    let tree = |text: &str| literal_dict(&parse(text, limits)?);
    if keys.len() > 64 || keys.iter().any(|k| matches!(k, Key::Rest)) {
        return tree(text);
    }
    let mut p = Parser::new(text, limits)?;
    let mut out = T::default();
    let mut seen = 0u64;
    // Keys whose (last) value was a list, and those whose value was a tuple.
    let (mut lists, mut tuples) = (0u64, 0u64);
    // An undeclared key: the tree path gives the error.
    let mut undeclared = false;
    // The error of each key whose (last) value was not read, reported after the text.
    let mut failed: Vec<(usize, Error)> = Vec::new();
    p.skip_ws();
    if p.peek() != Some(b'{') {
        return tree(text);
    }
    p.dict_items(|key, value| {
        let name = match &key {
            DictKey::Str(s) => *s,
            DictKey::Value(PyValue::Str(s)) => s.as_str(),
            DictKey::Value(_) => {
                undeclared = true;
                return Ok(());
            }
        };
        if let Some(i) = keys.iter().position(|k| k.name() == Some(name)) {
            seen |= 1 << i;
            lists &= !(1 << i);
            tuples &= !(1 << i);
            match value {
                PyValue::List(_) => lists |= 1 << i,
                PyValue::Tuple(_) => tuples |= 1 << i,
                _ => {}
            }
            failed.retain(|(j, _)| *j != i);
            if let Err(e) = out.set(i, name, &value) {
                failed.push((i, e));
            }
        } else {
            undeclared = true;
        }
        Ok(())
    })?;
    p.skip_ws();
    if p.pos < p.bytes.len() {
        return Err(p.err("end of input"));
    }
    if undeclared {
        return tree(text);
    }
    for (i, k) in keys.iter().enumerate() {
        let name = k.name().unwrap_or_default();
        if let Some(at) = failed.iter().position(|(j, _)| *j == i) {
            return Err(failed.swap_remove(at).1.in_field(name));
        }
        if matches!(k, Key::Required(_)) && seen & (1 << i) == 0 {
            return Err(missing(name));
        }
    }
    if lists | tuples != 0 {
        for (name, v) in out.items() {
            let Some(i) = keys.iter().position(|k| k.name() == Some(name)) else {
                continue;
            };
            let wrong = match v {
                PyValue::Tuple(_) => lists & (1 << i) != 0,
                PyValue::List(_) => tuples & (1 << i) != 0,
                _ => false,
            };
            if wrong {
                return tree(text);
            }
        }
    }
    Ok(out)
}

/// Reads the literal dict `value` as `T` ([`from_dict`]), refusing what `numpy.load`
/// refuses of a header: a key `T` does not declare (unless it has a `rest` key), and a
/// list where `T` declares a tuple (or a tuple where it declares a list).
pub fn literal_dict<T: Dict>(value: &PyValue) -> Result<T> {
    let out: T = from_dict(value)?;
    let PyValue::Dict(items) = value else {
        return Ok(out);
    };
    if !T::KEYS.iter().any(|k| matches!(k, Key::Rest)) {
        for (key, _) in items {
            if !key
                .as_str()
                .is_some_and(|k| T::KEYS.iter().any(|d| d.name() == Some(k)))
            {
                let declared: Vec<&str> = T::KEYS.iter().filter_map(|k| k.name()).collect();
                return Err(ErrorKind::Invalid(format!(
                    "the dict holds the key {}, which is not one of its keys ({})",
                    to_literal(key),
                    declared.join(", ")
                ))
                .into());
            }
        }
    }
    for (name, encoded) in out.items() {
        match (value.dict_get(name), encoded) {
            (Some(v @ PyValue::List(_)), PyValue::Tuple(_)) => {
                return Err(expected("tuple", v).in_field(name))
            }
            (Some(v @ PyValue::Tuple(_)), PyValue::List(_)) => {
                return Err(expected("list", v).in_field(name))
            }
            _ => {}
        }
    }
    Ok(out)
}

struct Parser<'t> {
    text: &'t str,
    bytes: &'t [u8],
    pos: usize,
    depth: u64,
    max_depth: u64,
}

impl<'t> Parser<'t> {
    /// A parser at the start of `text`; refused when `text` is longer than
    /// `limits.max_header_bytes`.
    fn new(text: &'t str, limits: &Limits) -> Result<Self> {
        if text.len() as u64 > limits.max_header_bytes {
            return Err(ErrorKind::Limit {
                what: "python literal length",
                limit: limits.max_header_bytes,
                actual: text.len() as u64,
            }
            .into());
        }
        Ok(Parser {
            text,
            bytes: text.as_bytes(),
            pos: 0,
            depth: 0,
            max_depth: limits.max_depth,
        })
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn char_offset(&self, byte_pos: usize) -> usize {
        let mut p = byte_pos.min(self.text.len());
        while !self.text.is_char_boundary(p) {
            p -= 1;
        }
        self.text[..p].chars().count()
    }

    fn describe_here(&self) -> String {
        match self.text.get(self.pos..).and_then(|s| s.chars().next()) {
            None => "end of input".to_string(),
            Some(_) => {
                let snippet: String = self.text[self.pos..].chars().take(12).collect();
                format!("{snippet:?}")
            }
        }
    }

    /// An error at the current position: `expected X, found Y`.
    fn err(&self, expected: &str) -> Error {
        let message = format!(
            "at character {}: expected {expected}, found {}",
            self.char_offset(self.pos),
            self.describe_here()
        );
        self.err_msg_at(self.pos, message)
    }

    fn err_at(&self, pos: usize, what: &str) -> Error {
        self.err_msg_at(
            pos,
            format!("at character {}: {what}", self.char_offset(pos)),
        )
    }

    fn err_msg_at(&self, pos: usize, message: String) -> Error {
        Error::new(
            ErrorKind::Codec {
                codec: CODEC,
                message,
            },
            Location::default().with_offset(pos as u64),
        )
    }

    fn skip_ws(&mut self) {
        while let Some(c) = self.peek() {
            match c {
                b' ' | b'\t' | b'\n' | b'\r' | b'\x0c' => self.pos += 1,
                b'\\' if matches!(self.bytes.get(self.pos + 1), Some(b'\n')) => self.pos += 2,
                b'#' => {
                    while let Some(c) = self.peek() {
                        if c == b'\n' {
                            break;
                        }
                        self.pos += 1;
                    }
                }
                _ => break,
            }
        }
    }

    fn enter(&mut self) -> Result<()> {
        self.depth += 1;
        if self.depth > self.max_depth {
            return Err(Error::new(
                ErrorKind::Limit {
                    what: "python literal nesting depth",
                    limit: self.max_depth,
                    actual: self.depth,
                },
                Location::default().with_offset(self.pos as u64),
            ));
        }
        Ok(())
    }

    fn value(&mut self) -> Result<PyValue> {
        match self.peek() {
            None => Err(self.err("a value")),
            Some(b'{') => self.dict(),
            Some(b'(') => self.seq(b')', true),
            Some(b'[') => self.seq(b']', false),
            Some(b'\'' | b'"') => self.strings(),
            Some(b'+' | b'-' | b'.' | b'0'..=b'9') => self.number(),
            Some(c) if c.is_ascii_alphabetic() || c == b'_' => {
                let start = self.pos;
                while let Some(c) = self.peek() {
                    if c.is_ascii_alphanumeric() || c == b'_' {
                        self.pos += 1;
                    } else {
                        break;
                    }
                }
                let word = &self.text[start..self.pos];
                match word {
                    "True" => Ok(PyValue::Bool(true)),
                    "False" => Ok(PyValue::Bool(false)),
                    "None" => Ok(PyValue::None),
                    _ if is_string_prefix(word) && matches!(self.peek(), Some(b'\'' | b'"')) => {
                        self.pos = start;
                        self.strings()
                    }
                    _ => {
                        self.pos = start;
                        Err(self.err("a value (True, False, None, a number, a string, (, [ or {)"))
                    }
                }
            }
            Some(_) => Err(self.err("a value")),
        }
    }

    fn dict(&mut self) -> Result<PyValue> {
        let mut items: Vec<(PyValue, PyValue)> = Vec::new();
        self.dict_items(|key, value| {
            let key = match key {
                DictKey::Str(s) => PyValue::Str(s.to_string()),
                DictKey::Value(v) => v,
            };
            match items.iter_mut().find(|(k, _)| *k == key) {
                Some(item) => item.1 = value,
                None => items.push((key, value)),
            }
            Ok(())
        })?;
        Ok(PyValue::Dict(items))
    }

    /// The items of the dict at the cursor (`{`), each handed to `item` in text order as
    /// it is parsed (duplicates included).
    fn dict_items<'p>(
        &'p mut self,
        mut item: impl FnMut(DictKey<'t>, PyValue) -> Result<()>,
    ) -> Result<()> {
        self.enter()?;
        self.pos += 1; // '{'
        loop {
            self.skip_ws();
            if self.peek() == Some(b'}') {
                self.pos += 1;
                break;
            }
            let key = match self.plain_key() {
                Some(k) => DictKey::Str(k),
                None => {
                    let key_pos = self.pos;
                    let key = self.value()?;
                    if matches!(key, PyValue::List(_) | PyValue::Dict(_)) {
                        return Err(self.err_at(
                            key_pos,
                            &format!("unhashable type '{}' as a dict key", key.type_name()),
                        ));
                    }
                    self.skip_ws();
                    DictKey::Value(key)
                }
            };
            if self.peek() != Some(b':') {
                return Err(self.err("':'"));
            }
            self.pos += 1;
            self.skip_ws();
            let value = self.value()?;
            item(key, value)?;
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    break;
                }
                _ => return Err(self.err("',' or '}'")),
            }
        }
        self.depth -= 1;
        Ok(())
    }

    /// A key that is one quoted string without escapes, followed by `:`: borrowed from the
    /// text, the cursor left at the `:`. `None` (the cursor unmoved) for any other key,
    /// which [`Parser::value`] reads.
    fn plain_key(&mut self) -> Option<&'t str> {
        let bytes: &'t [u8] = self.bytes;
        let text: &'t str = self.text;
        let quote = *bytes.get(self.pos).filter(|q| matches!(q, b'\'' | b'"'))?;
        let start = self.pos + 1;
        let len = bytes[start..]
            .iter()
            .position(|&b| b == quote || b == b'\\' || b == b'\n' || b == b'\r')?;
        let end = start + len;
        if bytes[end] != quote {
            return None;
        }
        let save = self.pos;
        self.pos = end + 1;
        self.skip_ws();
        if self.peek() == Some(b':') {
            Some(&text[start..end])
        } else {
            self.pos = save;
            None
        }
    }

    /// A tuple (`close` = `)`) or a list (`]`).
    fn seq(&mut self, close: u8, tuple: bool) -> Result<PyValue> {
        self.enter()?;
        self.pos += 1;
        let mut items = Vec::new();
        let mut trailing_comma = false;
        loop {
            self.skip_ws();
            if self.peek() == Some(close) {
                self.pos += 1;
                break;
            }
            items.push(self.value()?);
            self.skip_ws();
            match self.peek() {
                Some(b',') => {
                    self.pos += 1;
                    trailing_comma = true;
                }
                Some(c) if c == close => {
                    self.pos += 1;
                    trailing_comma = false;
                    break;
                }
                _ => {
                    return Err(self.err(if tuple { "',' or ')'" } else { "',' or ']'" }));
                }
            }
        }
        self.depth -= 1;
        if tuple {
            // `(x)` is x itself; `(x,)` and `()` are tuples.
            if items.len() == 1 && !trailing_comma {
                return Ok(items.pop().unwrap_or(PyValue::None));
            }
            Ok(PyValue::Tuple(items))
        } else {
            Ok(PyValue::List(items))
        }
    }

    fn number(&mut self) -> Result<PyValue> {
        let mut negative = false;
        // Unary signs (Python allows `- 1` and `--1`; NumPy writes at most one `-`).
        while let Some(c @ (b'+' | b'-')) = self.peek() {
            if c == b'-' {
                negative = !negative;
            }
            self.pos += 1;
            self.skip_ws();
        }
        let num_start = self.pos;
        match self.peek() {
            Some(b'.' | b'0'..=b'9') => {}
            _ => return Err(self.err("a digit")),
        }
        // Radix prefixes.
        if self.peek() == Some(b'0') {
            let radix = match self.bytes.get(self.pos + 1) {
                Some(b'x' | b'X') => 16,
                Some(b'o' | b'O') => 8,
                Some(b'b' | b'B') => 2,
                _ => 10,
            };
            if radix != 10 {
                self.pos += 2;
                let digits_start = self.pos;
                while let Some(c) = self.peek() {
                    if c.is_ascii_alphanumeric() || c == b'_' {
                        self.pos += 1;
                    } else {
                        break;
                    }
                }
                let digits: String = self.text[digits_start..self.pos]
                    .chars()
                    .filter(|&c| c != '_')
                    .collect();
                let digits = digits
                    .strip_suffix(['l', 'L'])
                    .unwrap_or(digits.as_str())
                    .to_string();
                let v = u128::from_str_radix(&digits, radix)
                    .ok()
                    .and_then(|v| i128::try_from(v).ok())
                    .ok_or_else(|| self.err_at(num_start, "invalid or out-of-range integer"))?;
                return Ok(PyValue::Int(if negative { -v } else { v }));
            }
        }
        // A plain decimal integer (what NumPy writes in shapes): read from the text.
        let end = self.bytes[self.pos..]
            .iter()
            .position(|b| !b.is_ascii_digit())
            .map_or(self.bytes.len(), |n| self.pos + n);
        if !matches!(
            self.bytes.get(end),
            Some(b'.' | b'_' | b'e' | b'E' | b'j' | b'J')
        ) {
            let digits = &self.text[self.pos..end];
            self.pos = end;
            return self.decimal(digits, num_start, negative);
        }
        let mut is_float = false;
        let mut digits = String::new();
        let mut seen_digit = false;
        while let Some(c) = self.peek() {
            match c {
                b'0'..=b'9' => {
                    seen_digit = true;
                    digits.push(c as char);
                }
                b'_' => {}
                b'.' if !is_float => {
                    is_float = true;
                    digits.push('.');
                }
                _ => break,
            }
            self.pos += 1;
        }
        if !seen_digit {
            self.pos = num_start;
            return Err(self.err("a digit"));
        }
        if let Some(b'e' | b'E') = self.peek() {
            let save = self.pos;
            let mut exp = String::from("e");
            self.pos += 1;
            if let Some(c @ (b'+' | b'-')) = self.peek() {
                exp.push(c as char);
                self.pos += 1;
            }
            let mut exp_digit = false;
            while let Some(c @ (b'0'..=b'9' | b'_')) = self.peek() {
                if c != b'_' {
                    exp.push(c as char);
                    exp_digit = true;
                }
                self.pos += 1;
            }
            if exp_digit {
                is_float = true;
                digits.push_str(&exp);
            } else {
                self.pos = save;
                return Err(self.err("exponent digits"));
            }
        }
        if let Some(b'j' | b'J') = self.peek() {
            return Err(self.err_at(num_start, "complex numbers are not supported"));
        }
        if is_float {
            let f: f64 = digits
                .parse()
                .map_err(|_| self.err_at(num_start, "invalid float"))?;
            return Ok(PyValue::Float(if negative { -f } else { f }));
        }
        self.decimal(&digits, num_start, negative)
    }

    /// The decimal integer of `digits`, which start at `num_start`, negated when
    /// `negative`; a Python 2 long suffix at the cursor is skipped.
    fn decimal(&mut self, digits: &str, num_start: usize, negative: bool) -> Result<PyValue> {
        // Python 2 long suffix, as old NumPy wrote shapes: `(3L,)`.
        if let Some(b'l' | b'L') = self.peek() {
            self.pos += 1;
        }
        if digits.len() > 1 && digits.starts_with('0') && digits.bytes().any(|b| b != b'0') {
            return Err(self.err_at(
                num_start,
                "leading zeros in a decimal integer are not permitted",
            ));
        }
        let v: i128 = digits
            .parse()
            .map_err(|_| self.err_at(num_start, "integer out of range"))?;
        Ok(PyValue::Int(if negative { -v } else { v }))
    }

    /// One or more adjacent string literals (Python concatenates them); all must be text
    /// or all bytes.
    fn strings(&mut self) -> Result<PyValue> {
        let start = self.pos;
        let (mut is_bytes, mut acc) = self.one_string()?;
        loop {
            let save = self.pos;
            self.skip_ws();
            let here = self.pos;
            let next_is_string = match self.peek() {
                Some(b'\'' | b'"') => true,
                Some(c) if c.is_ascii_alphabetic() => {
                    let mut end = self.pos;
                    while end < self.bytes.len() && self.bytes[end].is_ascii_alphabetic() {
                        end += 1;
                    }
                    is_string_prefix(&self.text[self.pos..end])
                        && matches!(self.bytes.get(end), Some(b'\'' | b'"'))
                }
                _ => false,
            };
            if !next_is_string {
                self.pos = save;
                break;
            }
            let (b, more) = self.one_string()?;
            if b != is_bytes {
                return Err(self.err_at(here, "cannot mix bytes and nonbytes literals"));
            }
            acc.extend_from_slice(&more);
            is_bytes = b;
        }
        if is_bytes {
            Ok(PyValue::Bytes(acc))
        } else {
            String::from_utf8(acc)
                .map(PyValue::Str)
                .map_err(|_| self.err_at(start, "string escapes produce invalid UTF-8"))
        }
    }

    /// One string literal with optional prefix; returns (is_bytes, content bytes). Text
    /// content is returned UTF-8 encoded.
    fn one_string(&mut self) -> Result<(bool, Vec<u8>)> {
        let mut is_bytes = false;
        let mut raw = false;
        while let Some(c) = self.peek() {
            match c {
                b'b' | b'B' => is_bytes = true,
                b'r' | b'R' => raw = true,
                b'u' | b'U' => {}
                _ => break,
            }
            self.pos += 1;
        }
        let quote = match self.peek() {
            Some(q @ (b'\'' | b'"')) => q,
            _ => return Err(self.err("a quote")),
        };
        let open = self.pos;
        let triple = self.bytes.get(self.pos..self.pos + 3) == Some(&[quote, quote, quote][..]);
        self.pos += if triple { 3 } else { 1 };
        let mut out: Vec<u8> = Vec::new();
        loop {
            let Some(c) = self.peek() else {
                return Err(self.err_at(open, "unterminated string literal"));
            };
            if c == quote {
                if !triple {
                    self.pos += 1;
                    break;
                }
                if self.bytes.get(self.pos..self.pos + 3) == Some(&[quote, quote, quote][..]) {
                    self.pos += 3;
                    break;
                }
                out.push(c);
                self.pos += 1;
                continue;
            }
            if (c == b'\n' || c == b'\r') && !triple {
                return Err(self.err_at(open, "unterminated string literal"));
            }
            if c == b'\\' {
                self.escape(&mut out, is_bytes, raw)?;
                continue;
            }
            // A whole UTF-8 character.
            let ch = self.text[self.pos..].chars().next().unwrap_or('\u{fffd}');
            if is_bytes && !ch.is_ascii() {
                return Err(
                    self.err_at(self.pos, "bytes can only contain ASCII literal characters")
                );
            }
            let mut buf = [0u8; 4];
            out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
            self.pos += ch.len_utf8();
        }
        Ok((is_bytes, out))
    }

    fn escape(&mut self, out: &mut Vec<u8>, is_bytes: bool, raw: bool) -> Result<()> {
        let at = self.pos;
        self.pos += 1; // backslash
        let Some(c) = self.peek() else {
            return Err(self.err_at(at, "unterminated string literal"));
        };
        if raw {
            // In raw strings a backslash escapes nothing, but still keeps a quote inside.
            out.push(b'\\');
            let ch = self.text[self.pos..].chars().next().unwrap_or('\u{fffd}');
            let mut buf = [0u8; 4];
            out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
            self.pos += ch.len_utf8();
            return Ok(());
        }
        let simple = match c {
            b'\n' => Some(None),
            b'\\' => Some(Some(b'\\')),
            b'\'' => Some(Some(b'\'')),
            b'"' => Some(Some(b'"')),
            b'a' => Some(Some(7)),
            b'b' => Some(Some(8)),
            b'f' => Some(Some(12)),
            b'n' => Some(Some(b'\n')),
            b'r' => Some(Some(b'\r')),
            b't' => Some(Some(b'\t')),
            b'v' => Some(Some(11)),
            _ => None,
        };
        if let Some(byte) = simple {
            self.pos += 1;
            if let Some(b) = byte {
                out.push(b);
            }
            return Ok(());
        }
        let push_code = |out: &mut Vec<u8>, code: u32, p: &Parser<'_>| -> Result<()> {
            if is_bytes {
                out.push(code as u8);
            } else {
                let ch = char::from_u32(code)
                    .ok_or_else(|| p.err_at(at, "escape is not a valid character"))?;
                let mut buf = [0u8; 4];
                out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
            }
            Ok(())
        };
        match c {
            b'0'..=b'7' => {
                let mut code = 0u32;
                let mut n = 0;
                while n < 3 {
                    match self.peek() {
                        Some(d @ b'0'..=b'7') => {
                            code = code * 8 + (d - b'0') as u32;
                            self.pos += 1;
                            n += 1;
                        }
                        _ => break,
                    }
                }
                if is_bytes && code > 0xff {
                    return Err(self.err_at(at, "octal escape out of range for bytes"));
                }
                push_code(out, code, self)
            }
            b'x' | b'u' | b'U' if c == b'x' || !is_bytes => {
                let n = match c {
                    b'x' => 2,
                    b'u' => 4,
                    _ => 8,
                };
                self.pos += 1;
                let hex = self
                    .bytes
                    .get(self.pos..self.pos + n)
                    .filter(|h| h.iter().all(|b| b.is_ascii_hexdigit()))
                    .ok_or_else(|| {
                        self.err_at(
                            at,
                            &format!("truncated \\{}{} escape", c as char, "X".repeat(n)),
                        )
                    })?;
                let code = u32::from_str_radix(std::str::from_utf8(hex).unwrap_or("0"), 16)
                    .map_err(|_| self.err_at(at, "invalid hex escape"))?;
                self.pos += n;
                push_code(out, code, self)
            }
            b'N' if !is_bytes => Err(self.err_at(at, "\\N{...} escapes are not supported")),
            _ => {
                // Unknown escapes keep their backslash, as in Python.
                out.push(b'\\');
                Ok(())
            }
        }
    }
}

fn is_string_prefix(word: &str) -> bool {
    matches!(
        word.to_ascii_lowercase().as_str(),
        "b" | "r" | "u" | "br" | "rb"
    )
}

/// Python's `repr` of `v`: `{'a': (1, 2), 'b': True}`, `(3,)`, `'it\'s'`-style quoting
/// (double quotes when the text holds a single quote and no double quote), `b'\x00'`,
/// shortest round-trip floats (`1.0`, `1e-05`, `inf`).
pub fn to_literal(v: &PyValue) -> String {
    let mut s = String::new();
    write_literal(&mut s, v);
    s
}

fn write_literal(out: &mut String, v: &PyValue) {
    match v {
        PyValue::None => out.push_str("None"),
        PyValue::Bool(true) => out.push_str("True"),
        PyValue::Bool(false) => out.push_str("False"),
        PyValue::Int(i) => out.push_str(&i.to_string()),
        PyValue::Float(f) => out.push_str(&float_repr(*f)),
        PyValue::Str(s) => str_repr(out, s),
        PyValue::Bytes(b) => bytes_repr(out, b),
        PyValue::Tuple(items) => {
            out.push('(');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_literal(out, item);
            }
            if items.len() == 1 {
                out.push(',');
            }
            out.push(')');
        }
        PyValue::List(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_literal(out, item);
            }
            out.push(']');
        }
        PyValue::Dict(items) => {
            out.push('{');
            for (i, (k, v)) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_literal(out, k);
                out.push_str(": ");
                write_literal(out, v);
            }
            out.push('}');
        }
    }
}

/// Python's `float.__repr__`: shortest round-trip digits, positional when the decimal
/// exponent is in `-4..16`, otherwise `d.ddde+XX`.
fn float_repr(f: f64) -> String {
    if f.is_nan() {
        return "nan".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if f == 0.0 {
        return if f.is_sign_negative() {
            "-0.0".into()
        } else {
            "0.0".into()
        };
    }
    // Rust's `{:e}` gives the shortest round-trip digits: `-1.2345e-7`.
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let n = digits.len() as i32;
    if (-4..16).contains(&exp) {
        if exp < 0 {
            format!("{sign}0.{}{digits}", "0".repeat((-exp - 1) as usize))
        } else if exp + 1 >= n {
            format!("{sign}{digits}{}.0", "0".repeat((exp + 1 - n) as usize))
        } else {
            let (a, b) = digits.split_at((exp + 1) as usize);
            format!("{sign}{a}.{b}")
        }
    } else {
        let (a, b) = digits.split_at(1);
        let mant = if b.is_empty() {
            a.to_string()
        } else {
            format!("{a}.{b}")
        };
        let esign = if exp < 0 { '-' } else { '+' };
        format!("{sign}{mant}e{esign}{:02}", exp.abs())
    }
}

/// Python's `repr` of `s` (the core's rule, `str.isprintable` exactly).
fn str_repr(out: &mut String, s: &str) {
    tensorfmt_core::tree::repr_str(s, out);
}

/// Python's `repr` of the byte string `b` (the core's rule).
fn bytes_repr(out: &mut String, b: &[u8]) {
    tensorfmt_core::tree::repr_bytes(b, out);
}

/// A dict of named items as a Python literal, items in the order given: `{`, each item
/// as `'key': repr(value)`, then `}`. Items are separated by `, ` as Python's `repr`
/// separates them (`{'a': 1, 'b': 2}`), or, with `trailing_comma`, each is followed by
/// `, `, the last included (`{'a': 1, 'b': 2, }`: what NumPy's `_write_array_header`
/// writes before its padding, which a schema describes with `codec pydict(trailing_comma
/// = true)`). An empty dict is `{}` either way.
pub fn encode_dict(items: &[(&str, PyValue)], trailing_comma: bool) -> String {
    let mut s = String::from("{");
    for (i, (key, value)) in items.iter().enumerate() {
        if i > 0 && !trailing_comma {
            s.push_str(", ");
        }
        str_repr(&mut s, key);
        s.push_str(": ");
        write_literal(&mut s, value);
        if trailing_comma {
            s.push_str(", ");
        }
    }
    s.push('}');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> PyValue {
        parse(s, &Limits::default()).unwrap_or_else(|e| panic!("parse {s:?}: {e}"))
    }

    fn perr(s: &str) -> Error {
        parse(s, &Limits::default()).expect_err(s)
    }

    fn s(x: &str) -> PyValue {
        PyValue::Str(x.into())
    }

    #[test]
    fn numpy_header() {
        let v = p("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }          \n");
        assert_eq!(
            v,
            PyValue::Dict(vec![
                (s("descr"), s("<f4")),
                (s("fortran_order"), PyValue::Bool(false)),
                (
                    s("shape"),
                    PyValue::Tuple(vec![PyValue::Int(2), PyValue::Int(3)])
                ),
            ])
        );
        assert_eq!(v.dict_get("descr").and_then(|d| d.as_str()), Some("<f4"));
        assert_eq!(
            v.dict_get("fortran_order").and_then(|d| d.as_bool()),
            Some(false)
        );
        assert_eq!(
            v.dict_get("shape").and_then(|d| d.as_u64_seq()),
            Some(vec![2, 3])
        );
        assert!(v.dict_get("nope").is_none());
        assert!(require(&v, "shape").is_ok());
        let e = require(&v, "nope").unwrap_err();
        assert!(matches!(&e.kind, ErrorKind::Invalid(m) if m == "missing key 'nope'"));
        assert_eq!(e.location.field.as_deref(), Some("nope"));
        let e = require(&PyValue::Int(1), "descr").unwrap_err();
        assert!(matches!(&e.kind, ErrorKind::Invalid(m) if m.contains("found a int")));
    }

    #[test]
    fn python2_long_and_old_style() {
        let v = p("{'descr': '<i8', 'fortran_order': True, 'shape': (3L, 4L), } \n");
        assert_eq!(
            v.dict_get("shape").and_then(|d| d.as_u64_seq()),
            Some(vec![3, 4])
        );
        assert_eq!(p("(3L,)"), PyValue::Tuple(vec![PyValue::Int(3)]));
        assert_eq!(p("10l"), PyValue::Int(10));
    }

    #[test]
    fn tuples() {
        assert_eq!(p("()"), PyValue::Tuple(vec![]));
        assert_eq!(p("( )"), PyValue::Tuple(vec![]));
        assert_eq!(p("(3,)"), PyValue::Tuple(vec![PyValue::Int(3)]));
        assert_eq!(p("(3)"), PyValue::Int(3));
        assert_eq!(
            p("(1, 2, 3,)"),
            PyValue::Tuple(vec![PyValue::Int(1), PyValue::Int(2), PyValue::Int(3)])
        );
        assert_eq!(p("[]"), PyValue::List(vec![]));
        assert_eq!(p("[1,]"), PyValue::List(vec![PyValue::Int(1)]));
        assert_eq!(p("{}"), PyValue::Dict(vec![]));
        assert_eq!(
            p("[('a', '<i4'), ('b', '<f8', (2, 2))]"),
            PyValue::List(vec![
                PyValue::Tuple(vec![s("a"), s("<i4")]),
                PyValue::Tuple(vec![
                    s("b"),
                    s("<f8"),
                    PyValue::Tuple(vec![PyValue::Int(2), PyValue::Int(2)])
                ]),
            ])
        );
        assert_eq!(p("[1, 2]").as_u64_seq(), Some(vec![1, 2]));
        assert_eq!(p("(1, -2)").as_u64_seq(), None);
        assert_eq!(p("(1, 2.0)").as_u64_seq(), None);
        assert_eq!(p("(1, True)").as_u64_seq(), None);
        assert_eq!(p("'x'").as_u64_seq(), None);
    }

    #[test]
    fn strings_and_escapes() {
        assert_eq!(p(r#""a'b""#), s("a'b"));
        assert_eq!(p(r"'a\'b'"), s("a'b"));
        assert_eq!(p(r#"'a\"b'"#), s("a\"b"));
        assert_eq!(p(r"'\\'"), s("\\"));
        assert_eq!(p(r"'\n\t\r'"), s("\n\t\r"));
        assert_eq!(p(r"'\x41\u00e9\U0001F600'"), s("Aé😀"));
        assert_eq!(p(r"'\101\0'"), s("A\0"));
        assert_eq!(p(r"'\q'"), s("\\q"));
        assert_eq!(p("'é ü'"), s("é ü"));
        assert_eq!(p("u'x'"), s("x"));
        assert_eq!(p(r"r'\n'"), s("\\n"));
        assert_eq!(p("'a' 'b'"), s("ab"));
        assert_eq!(p("'''a'b'''"), s("a'b"));
        assert_eq!(p("b'\\x00\\xffA'"), PyValue::Bytes(vec![0, 255, b'A']));
        assert_eq!(p("b'\\u0041'"), PyValue::Bytes(b"\\u0041".to_vec()));
        assert_eq!(p("B\"q\""), PyValue::Bytes(b"q".to_vec()));
        assert_eq!(p("b'a' b'b'"), PyValue::Bytes(b"ab".to_vec()));
        assert!(matches!(perr("b'é'").kind, ErrorKind::Codec { .. }));
        assert!(matches!(perr("'a' b'b'").kind, ErrorKind::Codec { .. }));
        assert!(matches!(perr("'abc").kind, ErrorKind::Codec { .. }));
        assert!(matches!(perr("'a\nb'").kind, ErrorKind::Codec { .. }));
        assert!(matches!(perr(r"'\x4'").kind, ErrorKind::Codec { .. }));
        assert!(matches!(perr(r"'\ud800'").kind, ErrorKind::Codec { .. }));
        assert!(matches!(perr("'\\").kind, ErrorKind::Codec { .. }));
    }

    #[test]
    fn numbers() {
        assert_eq!(p("0"), PyValue::Int(0));
        assert_eq!(p("-5"), PyValue::Int(-5));
        assert_eq!(p("+5"), PyValue::Int(5));
        assert_eq!(p("- 5"), PyValue::Int(-5));
        assert_eq!(p("--5"), PyValue::Int(5));
        assert_eq!(p("1_000"), PyValue::Int(1000));
        assert_eq!(p("0x1F"), PyValue::Int(31));
        assert_eq!(p("-0o17"), PyValue::Int(-15));
        assert_eq!(p("0b101"), PyValue::Int(5));
        assert_eq!(p("000"), PyValue::Int(0));
        assert_eq!(p("18446744073709551615"), PyValue::Int(u64::MAX as i128));
        assert_eq!(p("1.5"), PyValue::Float(1.5));
        assert_eq!(p("-1."), PyValue::Float(-1.0));
        assert_eq!(p(".25"), PyValue::Float(0.25));
        assert_eq!(p("1e3"), PyValue::Float(1000.0));
        assert_eq!(p("1E-3"), PyValue::Float(0.001));
        assert_eq!(p("2.5e+2"), PyValue::Float(250.0));
        assert!(matches!(perr("012").kind, ErrorKind::Codec { .. }));
        assert!(matches!(perr("1j").kind, ErrorKind::Codec { .. }));
        assert!(matches!(perr("1e").kind, ErrorKind::Codec { .. }));
        assert!(matches!(perr(".").kind, ErrorKind::Codec { .. }));
        assert!(matches!(perr("-").kind, ErrorKind::Codec { .. }));
        assert!(matches!(perr("0x").kind, ErrorKind::Codec { .. }));
        assert!(matches!(
            perr("999999999999999999999999999999999999999999999").kind,
            ErrorKind::Codec { .. }
        ));
    }

    #[test]
    fn keywords_comments_whitespace() {
        assert_eq!(p(" True "), PyValue::Bool(true));
        assert_eq!(p("None\n"), PyValue::None);
        assert_eq!(p("\t{'a' : 1 ,\n 'b':2} # c\n"), {
            PyValue::Dict(vec![(s("a"), PyValue::Int(1)), (s("b"), PyValue::Int(2))])
        });
        assert!(matches!(perr("true").kind, ErrorKind::Codec { .. }));
        assert!(matches!(perr("Truex").kind, ErrorKind::Codec { .. }));
        assert!(matches!(perr("").kind, ErrorKind::Codec { .. }));
        assert!(matches!(perr("   ").kind, ErrorKind::Codec { .. }));
    }

    #[test]
    fn dict_semantics() {
        let v = p("{'a': 1, 'b': 2, 'a': 3}");
        assert_eq!(
            v,
            PyValue::Dict(vec![(s("a"), PyValue::Int(3)), (s("b"), PyValue::Int(2))])
        );
        assert_eq!(v.dict_get("a"), Some(&PyValue::Int(3)));
        assert_eq!(
            p("{1: None, (1, 2): b''}"),
            PyValue::Dict(vec![
                (PyValue::Int(1), PyValue::None),
                (
                    PyValue::Tuple(vec![PyValue::Int(1), PyValue::Int(2)]),
                    PyValue::Bytes(vec![])
                ),
            ])
        );
        assert!(matches!(perr("{[1]: 2}").kind, ErrorKind::Codec { .. }));
        assert!(matches!(perr("{'a' 1}").kind, ErrorKind::Codec { .. }));
        assert!(matches!(perr("{'a': 1").kind, ErrorKind::Codec { .. }));
        assert!(matches!(perr("{'a': 1,,}").kind, ErrorKind::Codec { .. }));
        assert!(matches!(perr("{,}").kind, ErrorKind::Codec { .. }));
        assert!(matches!(perr("{'a'}").kind, ErrorKind::Codec { .. }));
    }

    #[test]
    fn error_messages_have_offsets() {
        let e = perr("{'descr': '<f4', 'shape': (2, 3 }");
        match &e.kind {
            ErrorKind::Codec { codec, message } => {
                assert_eq!(*codec, "python literal");
                assert!(message.contains("at character 32"), "{message}");
                assert!(message.contains("expected ',' or ')'"), "{message}");
            }
            k => panic!("{k:?}"),
        }
        assert_eq!(e.location.offset, Some(32));
        // Character offsets count characters, not bytes.
        let e = perr("'é' x");
        match &e.kind {
            ErrorKind::Codec { message, .. } => {
                assert!(message.contains("at character 4"), "{message}");
                assert!(message.contains("expected end of input"), "{message}");
            }
            k => panic!("{k:?}"),
        }
        assert_eq!(e.location.offset, Some(5));
        let e = perr("(1, 2");
        assert!(e.to_string().contains("found end of input"), "{e}");
    }

    #[test]
    fn depth_limit() {
        let limits = Limits {
            max_depth: 5,
            ..Limits::default()
        };
        assert!(parse("[[[[[1]]]]]", &limits).is_ok());
        let e = parse("[[[[[[1]]]]]]", &limits).unwrap_err();
        assert!(matches!(e.kind, ErrorKind::Limit { limit: 5, .. }));
        // Deep hostile nesting fails cleanly with the default limit (no stack overflow).
        let deep = "(".repeat(100_000);
        let e = parse(&deep, &Limits::default()).unwrap_err();
        assert!(matches!(e.kind, ErrorKind::Limit { .. }));
        let deep = "{1:".repeat(100_000);
        assert!(matches!(
            parse(&deep, &Limits::default()).unwrap_err().kind,
            ErrorKind::Limit { .. }
        ));
        let small = Limits {
            max_header_bytes: 4,
            ..Limits::default()
        };
        assert!(matches!(
            parse("(1, 2)", &small).unwrap_err().kind,
            ErrorKind::Limit { .. }
        ));
    }

    /// A dict struct as generated code writes them: a required string, a required tuple of
    /// ints, an optional bool.
    #[derive(Debug, Default, PartialEq)]
    struct Hdr {
        descr: String,
        shape: Vec<u64>,
        fortran: Option<bool>,
    }

    impl Dict for Hdr {
        const KEYS: &'static [Key] = &[
            Key::Required("descr"),
            Key::Required("shape"),
            Key::Optional("fortran"),
        ];
        fn read<V: ItemValue>(
            &mut self,
            i: usize,
            _key: &str,
            v: V,
        ) -> std::result::Result<(), V::Error> {
            match i {
                0 => self.descr = v.get()?,
                1 => self.shape = v.get()?,
                2 => self.fortran = v.get()?,
                _ => {}
            }
            Ok(())
        }
        fn items(&self) -> Vec<(&str, PyValue)> {
            Vec::new()
        }
    }

    /// Reading a dict as it is parsed gives what parsing then reading gives: the value, or
    /// the same error (message, field and offset).
    #[test]
    fn dicts_read_as_parsed_as_from_a_tree() {
        let limits = Limits::default();
        for text in [
            "{'descr': '<f4', 'shape': (3, 4), }",
            "{'descr': '<f4', 'shape': (3, 4), 'fortran': True}",
            "  {\"descr\" : '<f4' , 'shape':(), 'fortran': None}\n",
            "{'de' 'scr': '<f4', 'shape': [1]}",
            "{'descr': '<f4', 'shape': (2,), 'descr': '>i8'}",
            "{'descr': 1, 'shape': (2,), 'descr': '>i8'}",
            "{'descr': '>i8', 'shape': (2,), 'descr': 1}",
            "{'descr': 1, 'shape': 'x'}",
            "{'shape': 'x', 'descr': 1}",
            "{'shape': (1,)}",
            "{'descr': '<f4'}",
            "{'descr': '<f4', 'shape': (-1,)}",
            "{'descr': '<f4', 'shape': (1,), 'fortran': 3}",
            "{'descr': '<f4', 'shape': (1,), 1: 2, b'x': 3, ('t',): 4}",
            "{'descr': '<f4', 'shape': (1,), [1]: 2}",
            "{'descr': '<f4', 'shape': (1,)} x",
            "{'descr': 1, 'shape': (1,)",
            "{'d\\x65scr': 'a', 'shape': (0x10, 3L, 1_0)}",
            "{'descr': 'a', 'shape': (1.5,)}",
            "{'descr': 'a', 'shape': (007,)}",
            "{'descr': 'a', 'shape': (1e3,)}",
            "{'descr': 'a', 'shape': ({'a': {'b': 1}},)}",
            "('descr', 'shape')",
            "# a comment\n{'descr': 'a', 'shape': ()}",
            "\u{a0}{'descr': 'a', 'shape': ()}",
            "",
            "{",
            "{'descr'",
            "{'descr': 'a', 'shape': (1,), 'x': 99999999999999999999999999999999999999999}",
        ] {
            // The tree path of a literal: `from_dict`, then what numpy.load also refuses.
            let tree = parse(text, &limits).and_then(|v| literal_dict::<Hdr>(&v));
            let streamed = Hdr::from_literal(text, &limits);
            match (&tree, &streamed) {
                (Ok(a), Ok(b)) => assert_eq!(a, b, "{text}"),
                (Err(a), Err(b)) => {
                    assert_eq!(a.to_string(), b.to_string(), "{text}");
                    assert_eq!(a.location, b.location, "{text}");
                }
                _ => panic!("{text}: {tree:?} against {streamed:?}"),
            }
        }
        let deep = format!(
            "{{'descr': 'a', 'shape': {}{}}}",
            "(".repeat(200),
            ")".repeat(200)
        );
        assert_eq!(
            parse(&deep, &limits)
                .and_then(|v| from_dict::<Hdr>(&v))
                .unwrap_err()
                .to_string(),
            Hdr::from_literal(&deep, &limits).unwrap_err().to_string()
        );
    }

    #[test]
    fn garbage_never_panics() {
        // A cheap deterministic fuzz over prefixes and byte mutations of a header.
        let base = "{'descr': [('a', '<i4'), ('b', b'\\x00')], 'fortran_order': False, 'shape': (3L, -1.5e-3, 0x1f), 'q': \"\\u00e9\\n\" 'x'}";
        let limits = Limits::default();
        for i in 0..=base.len() {
            if base.is_char_boundary(i) {
                let _ = parse(&base[..i], &limits);
                let _ = parse(&base[i..], &limits);
            }
        }
        let mut state = 0x1234_5678_u64;
        let specials = b"'\"\\(){}[],:#.eEjLxub0-+ \n";
        for _ in 0..20_000 {
            let mut bytes = base.as_bytes().to_vec();
            for _ in 0..3 {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let pos = (state >> 33) as usize % bytes.len();
                let c = specials[(state >> 20) as usize % specials.len()];
                bytes[pos] = c;
            }
            if let Ok(text) = std::str::from_utf8(&bytes) {
                if let Ok(v) = parse(text, &limits) {
                    // Whatever parses must re-parse from its repr to the same value
                    // (NaN aside).
                    let again = parse(&to_literal(&v), &limits).unwrap();
                    assert_eq!(to_literal(&again), to_literal(&v));
                }
            }
        }
    }

    #[test]
    fn repr_output() {
        assert_eq!(to_literal(&PyValue::Tuple(vec![])), "()");
        assert_eq!(to_literal(&PyValue::Tuple(vec![PyValue::Int(3)])), "(3,)");
        assert_eq!(
            to_literal(&PyValue::Tuple(vec![PyValue::Int(2), PyValue::Int(3)])),
            "(2, 3)"
        );
        assert_eq!(to_literal(&PyValue::List(vec![])), "[]");
        assert_eq!(
            to_literal(&p("[('a', '<i4'), ('b', '|S3')]")),
            "[('a', '<i4'), ('b', '|S3')]"
        );
        assert_eq!(
            to_literal(&p("{'a': None, 1: True}")),
            "{'a': None, 1: True}"
        );
        assert_eq!(to_literal(&s("it's")), "\"it's\"");
        assert_eq!(to_literal(&s("a'b\"c")), "'a\\'b\"c'");
        assert_eq!(
            to_literal(&s("\\\n\t\r\x00\x7f")),
            "'\\\\\\n\\t\\r\\x00\\x7f'"
        );
        assert_eq!(to_literal(&s("é\u{2028}😀")), "'é\\u2028😀'");
        assert_eq!(
            to_literal(&PyValue::Bytes(b"a'\x00\xff\\".to_vec())),
            "b\"a'\\x00\\xff\\\\\""
        );
        assert_eq!(to_literal(&PyValue::Int(-7)), "-7");
        for (f, want) in [
            (1.0, "1.0"),
            (-0.0, "-0.0"),
            (0.1, "0.1"),
            (1.5, "1.5"),
            (123.456, "123.456"),
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (1.2345678901234568e17, "1.2345678901234568e+17"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1.5e-7, "1.5e-07"),
            (1.5e300, "1.5e+300"),
            (f64::INFINITY, "inf"),
            (f64::NEG_INFINITY, "-inf"),
            (f64::NAN, "nan"),
            (5e-324, "5e-324"),
        ] {
            assert_eq!(to_literal(&PyValue::Float(f)), want, "{f}");
        }
    }

    #[test]
    fn numpy_dict_text() {
        let text = encode_numpy_dict(&[
            ("descr", s("<f4")),
            ("fortran_order", PyValue::Bool(false)),
            (
                "shape",
                PyValue::Tuple(vec![PyValue::Int(2), PyValue::Int(3)]),
            ),
        ]);
        assert_eq!(
            text,
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"
        );
        assert_eq!(encode_dict(&[], true), "{}");
        assert_eq!(encode_dict(&[], false), "{}");
        let repr = encode_dict(
            &[("descr", s("<f4")), ("fortran_order", PyValue::Bool(true))],
            false,
        );
        assert_eq!(repr, "{'descr': '<f4', 'fortran_order': True}");
        let back = p(&text);
        assert_eq!(
            back.dict_get("shape").unwrap().as_u64_seq(),
            Some(vec![2, 3])
        );
    }

    /// Compares with the header bytes NumPy itself writes, when a Python with NumPy is
    /// available (`TENSORFMT_PYTHON`, else `python3`).
    #[test]
    fn matches_numpy_when_available() {
        let python = std::env::var("TENSORFMT_PYTHON").unwrap_or_else(|_| "python3".into());
        let script = r#"
import io, sys, numpy as np
cases = [np.zeros((2, 3), '<f4'), np.zeros((), '<i8'), np.zeros((5,), '>u2'),
         np.asfortranarray(np.zeros((4, 7), '<f8')), np.zeros((0, 3), '|b1'),
         np.zeros((2,), [('a', '<i4'), ('b', '<f8', (2, 2))]), np.zeros((1, 2, 3), '<U5')]
for a in cases:
    f = io.BytesIO(); np.lib.format.write_array(f, a); b = f.getvalue()
    hl = int.from_bytes(b[8:10], 'little')
    print(b[10:10 + hl].decode('latin1').rstrip('\n').rstrip(' '))
"#;
        let out = match std::process::Command::new(&python)
            .args(["-c", script])
            .output()
        {
            Ok(o) if o.status.success() => o,
            _ => {
                println!("skipped: no python with numpy ({python})");
                return;
            }
        };
        let text = String::from_utf8(out.stdout).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 7);
        let t = |v: &[u64]| PyValue::Tuple(v.iter().map(|&x| PyValue::Int(x as i128)).collect());
        let hdr = |descr: PyValue, fortran: bool, shape: &[u64]| {
            encode_numpy_dict(&[
                ("descr", descr),
                ("fortran_order", PyValue::Bool(fortran)),
                ("shape", t(shape)),
            ])
        };
        assert_eq!(lines[0], hdr(s("<f4"), false, &[2, 3]));
        assert_eq!(lines[1], hdr(s("<i8"), false, &[]));
        assert_eq!(lines[2], hdr(s(">u2"), false, &[5]));
        assert_eq!(lines[3], hdr(s("<f8"), true, &[4, 7]));
        assert_eq!(lines[4], hdr(s("|b1"), false, &[0, 3]));
        let structured = PyValue::List(vec![
            PyValue::Tuple(vec![s("a"), s("<i4")]),
            PyValue::Tuple(vec![s("b"), s("<f8"), t(&[2, 2])]),
        ]);
        assert_eq!(lines[5], hdr(structured, false, &[2]));
        assert_eq!(lines[6], hdr(s("<U5"), false, &[1, 2, 3]));
        for line in lines {
            let v = p(line);
            assert!(require(&v, "descr").is_ok());
            assert_eq!(encode_numpy_dict_from(&v), line);
        }
    }

    /// `repr` of many floats and strings, and `ast.literal_eval` of our output, against
    /// Python itself when `python3` is available.
    #[test]
    fn repr_matches_python_when_available() {
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut floats: Vec<f64> = (0..2000).map(|_| f64::from_bits(next())).collect();
        floats.extend((0..2000).map(|i| (next() % 100_000) as f64 / 10f64.powi(i % 25 - 8)));
        floats.retain(|f| f.is_finite());
        let strings: Vec<String> = (0..300)
            .map(|_| {
                (0..8)
                    .filter_map(|_| {
                        let r = next();
                        let code = match r % 4 {
                            0 => (r >> 8) % 0x80,
                            1 => (r >> 8) % 0x400,
                            2 => (r >> 8) % 0x3000,
                            _ => (r >> 8) % 0x11000,
                        } as u32;
                        char::from_u32(code)
                    })
                    .collect()
            })
            .collect();
        let mut input = String::new();
        for f in &floats {
            input.push_str(&format!("f {:016x}\n", f.to_bits()));
        }
        for s in &strings {
            let hex: String = s.bytes().map(|b| format!("{b:02x}")).collect();
            input.push_str(&format!("s {hex}\n"));
        }
        let script = r#"
import sys, struct
for line in sys.stdin:
    k, h = line.split()
    if k == 'f':
        print(repr(struct.unpack('>d', bytes.fromhex(h))[0]))
    else:
        print(repr(bytes.fromhex(h).decode('utf-8')).encode('utf-8').hex())
"#;
        use std::io::Write as _;
        let child = std::process::Command::new("python3")
            .args(["-c", script])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn();
        let Ok(mut child) = child else {
            println!("skipped: python3 not available");
            return;
        };
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        if !out.status.success() {
            println!("skipped: python3 failed");
            return;
        }
        let text = String::from_utf8(out.stdout).unwrap();
        let mut lines = text.lines();
        for f in &floats {
            let want = lines.next().unwrap();
            assert_eq!(float_repr(*f), want, "bits {:016x}", f.to_bits());
            assert_eq!(p(want), PyValue::Float(*f));
        }
        let mut mismatches = Vec::new();
        for s in &strings {
            let hex = lines.next().unwrap();
            let bytes: Vec<u8> = (0..hex.len() / 2)
                .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
                .collect();
            let want = String::from_utf8(bytes).unwrap();
            // Our printable-character table approximates Python's; count disagreements on
            // rare non-ASCII characters but require every repr to parse back exactly.
            if to_literal(&PyValue::Str(s.clone())) != want {
                mismatches.push((s.clone(), want.clone()));
            }
            assert_eq!(p(&want), PyValue::Str(s.clone()));
            assert_eq!(
                p(&to_literal(&PyValue::Str(s.clone()))),
                PyValue::Str(s.clone())
            );
        }
        for (s, want) in &mismatches {
            assert!(
                !s.is_ascii(),
                "ASCII repr must match exactly: {s:?} -> {want}"
            );
        }
        for (s, want) in mismatches.iter().take(3) {
            println!(
                "{:?} ours {} python {}",
                s,
                to_literal(&PyValue::Str(s.clone())),
                want
            );
        }
        println!(
            "{} of {} string reprs differ from Python (non-ASCII printability)",
            mismatches.len(),
            strings.len()
        );
    }

    fn encode_numpy_dict(items: &[(&str, PyValue)]) -> String {
        encode_dict(items, true)
    }

    fn encode_numpy_dict_from(v: &PyValue) -> String {
        let PyValue::Dict(items) = v else {
            panic!("not a dict")
        };
        let items: Vec<(&str, PyValue)> = items
            .iter()
            .map(|(k, v)| (k.as_str().unwrap(), v.clone()))
            .collect();
        encode_numpy_dict(&items)
    }
}
