//! Entry-name patterns with captures, such as `{name}.npy` or `{prefix}/data/{key}`.

use std::ops::Range;

use crate::error::{ErrorKind, Result};

#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Lit(String),
    Cap(String),
}

/// A compiled name pattern: literal text and `{capture}`s. Each capture matches one or more
/// characters; where several splits fit, earlier captures take as much as they can.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    pieces: Vec<Piece>,
}

impl Pattern {
    /// Compiles `text`. Errors on an unclosed `{`, an empty capture name, or two captures
    /// with no literal between them.
    pub fn new(text: &str) -> Result<Self> {
        let mut pieces = Vec::new();
        let mut rest = text;
        while !rest.is_empty() {
            if let Some(start) = rest.find('{') {
                if start > 0 {
                    pieces.push(Piece::Lit(rest[..start].to_string()));
                }
                let end = rest[start..].find('}').ok_or_else(|| {
                    ErrorKind::Invalid(format!("pattern '{text}': unclosed '{{'"))
                })? + start;
                let name = &rest[start + 1..end];
                if name.is_empty() {
                    return Err(
                        ErrorKind::Invalid(format!("pattern '{text}': empty capture")).into(),
                    );
                }
                if matches!(pieces.last(), Some(Piece::Cap(_))) {
                    return Err(ErrorKind::Invalid(format!(
                        "pattern '{text}': captures need literal text between them"
                    ))
                    .into());
                }
                pieces.push(Piece::Cap(name.to_string()));
                rest = &rest[end + 1..];
            } else {
                pieces.push(Piece::Lit(rest.to_string()));
                rest = "";
            }
        }
        Ok(Pattern { pieces })
    }

    /// The capture names, in order.
    pub fn captures(&self) -> impl Iterator<Item = &str> {
        self.pieces.iter().filter_map(|p| match p {
            Piece::Cap(c) => Some(c.as_str()),
            Piece::Lit(_) => None,
        })
    }

    /// Matches `name`, returning the captured text in capture order.
    pub fn matches(&self, name: &str) -> Option<Vec<String>> {
        let mut caps = Vec::new();
        if match_from(&self.pieces, name, 0, &mut caps) {
            Some(caps.into_iter().map(|r| name[r].to_string()).collect())
        } else {
            None
        }
    }

    /// True when `name` matches (as [`Pattern::matches`], without collecting captures).
    pub fn is_match(&self, name: &str) -> bool {
        match_from(&self.pieces, name, 0, &mut Vec::new())
    }

    /// Builds a name from capture values given in capture order.
    pub fn format(&self, values: &[&str]) -> Result<String> {
        let mut out = String::new();
        let mut vals = values.iter();
        for p in &self.pieces {
            match p {
                Piece::Lit(l) => out.push_str(l),
                Piece::Cap(c) => {
                    let v = vals
                        .next()
                        .ok_or_else(|| ErrorKind::Invalid(format!("no value for capture '{c}'")))?;
                    if v.is_empty() {
                        return Err(
                            ErrorKind::Invalid(format!("capture '{c}' may not be empty")).into(),
                        );
                    }
                    out.push_str(v);
                }
            }
        }
        Ok(out)
    }
}

/// The captures of one matched name, by capture name: the values shared by the entries
/// of one archive (`prefix` of `{prefix}/data.pkl`), used to name its other entries.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Captures {
    values: Vec<(String, String)>,
}

impl Captures {
    /// The captures of `pattern` with `values` in capture order (what
    /// [`Pattern::matches`] returned).
    pub fn new(pattern: &Pattern, values: Vec<String>) -> Self {
        Captures {
            values: pattern.captures().map(String::from).zip(values).collect(),
        }
    }

    /// The value of capture `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.values
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The name `pattern` gives with these captures; every capture of `pattern` must be
    /// among them.
    pub fn format_all(&self, pattern: &str) -> Result<String> {
        self.format_with(pattern, &[])
    }

    /// The name `pattern` gives with these captures and `extra` = `value`.
    pub fn format(&self, pattern: &str, extra: &str, value: &str) -> Result<String> {
        self.format_with(pattern, &[(extra, value)])
    }

    fn format_with(&self, pattern: &str, extra: &[(&str, &str)]) -> Result<String> {
        let mut out = String::with_capacity(pattern.len() + 16);
        let mut rest = pattern;
        while let Some(start) = rest.find('{') {
            out.push_str(&rest[..start]);
            let end = rest[start..]
                .find('}')
                .ok_or_else(|| ErrorKind::Invalid(format!("pattern '{pattern}': unclosed '{{'")))?
                + start;
            let c = &rest[start + 1..end];
            if c.is_empty() {
                return Err(
                    ErrorKind::Invalid(format!("pattern '{pattern}': empty capture")).into(),
                );
            }
            let v = extra
                .iter()
                .find(|(n, _)| *n == c)
                .map(|(_, v)| *v)
                .or_else(|| self.get(c))
                .ok_or_else(|| {
                    ErrorKind::Invalid(format!("pattern '{pattern}': no value for capture '{c}'"))
                })?;
            if v.is_empty() {
                return Err(ErrorKind::Invalid(format!("capture '{c}' may not be empty")).into());
            }
            out.push_str(v);
            rest = &rest[end + 1..];
        }
        out.push_str(rest);
        Ok(out)
    }
}

/// Matches `pieces` against `s`, which starts at byte `base` of the whole name, pushing
/// the byte range of each capture. A capture takes one or more characters, as many as
/// still let the rest match (tried longest first); no text is copied.
fn match_from(pieces: &[Piece], s: &str, base: usize, caps: &mut Vec<Range<usize>>) -> bool {
    match pieces.split_first() {
        None => s.is_empty(),
        Some((Piece::Lit(l), rest)) => s
            .strip_prefix(l.as_str())
            .is_some_and(|r| match_from(rest, r, base + l.len(), caps)),
        Some((Piece::Cap(_), [])) => {
            if s.is_empty() {
                return false;
            }
            caps.push(base..base + s.len());
            true
        }
        Some((Piece::Cap(_), rest)) => {
            // `Pattern::new` puts a literal after every capture that is not last.
            let next = match &rest[0] {
                Piece::Lit(l) => l.as_str(),
                Piece::Cap(_) => return false,
            };
            for end in (1..s.len()).rev() {
                if !s.is_char_boundary(end) || !s[end..].starts_with(next) {
                    continue;
                }
                caps.push(base..base + end);
                if match_from(rest, &s[end..], base + end, caps) {
                    return true;
                }
                caps.pop();
            }
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn captures_name_sibling_entries() {
        let p = Pattern::new("{prefix}/data.pkl").unwrap();
        let c = Captures::new(&p, p.matches("a.b/data.pkl").unwrap());
        assert_eq!(c.get("prefix"), Some("a.b"));
        assert_eq!(c.format_all("{prefix}/byteorder").unwrap(), "a.b/byteorder");
        assert_eq!(
            c.format("{prefix}/data/{key}", "key", "10").unwrap(),
            "a.b/data/10"
        );
        assert!(c.format_all("{prefix}/data/{key}").is_err());
    }

    #[test]
    fn captures_greedy() {
        let p = Pattern::new("{name}.npy").unwrap();
        assert_eq!(p.matches("a.b.npy"), Some(vec!["a.b".to_string()]));
        assert_eq!(p.matches("dir/c.npy"), Some(vec!["dir/c".to_string()]));
        assert_eq!(p.matches(".npy"), None);
        assert_eq!(p.matches("x.npz"), None);
        assert_eq!(p.format(&["a.b"]).unwrap(), "a.b.npy");
        let q = Pattern::new("{prefix}/data/{key}").unwrap();
        assert_eq!(
            q.matches("archive/data/12"),
            Some(vec!["archive".into(), "12".into()])
        );
        assert_eq!(q.captures().collect::<Vec<_>>(), vec!["prefix", "key"]);
    }

    #[test]
    fn bad_patterns() {
        assert!(Pattern::new("{a}{b}").is_err());
        assert!(Pattern::new("{a").is_err());
        assert!(Pattern::new("{}").is_err());
    }
}
