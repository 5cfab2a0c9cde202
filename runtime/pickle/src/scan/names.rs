//! Which globals are dangerous: the rules of `unsafe_globals.txt` (one place, as data,
//! documented there), matched against a global's path, its Python 2 renaming and the
//! attribute chain of a dotted name. Hand-written: a scanner's judgement of names, not
//! a layout.

use std::sync::OnceLock;

/// The rules.
const RULES: &str = include_str!("unsafe_globals.txt");

/// Which names of a module a rule covers.
#[derive(Debug)]
enum Names {
    /// Every one, and every submodule's.
    All,
    /// Every one but these and their attributes (paths after `module.`).
    AllBut(Vec<&'static str>),
    /// These and their attributes.
    Only(Vec<&'static str>),
}

/// One rule: a module, the names it covers, and why they are dangerous.
#[derive(Debug)]
struct Rule {
    module: &'static str,
    names: Names,
    reason: &'static str,
}

/// Attribute names that a dotted global may go through without being dangerous: the
/// `copyreg` helpers that protocols 0 and 1 pickle objects with.
const BENIGN_DUNDERS: [&str; 2] = ["__newobj__", "__newobj_ex__"];

/// The rules, parsed once.
fn rules() -> &'static [Rule] {
    static R: OnceLock<Vec<Rule>> = OnceLock::new();
    R.get_or_init(|| parse(RULES).0)
}

/// Parses rules; the lines it could not read (refused by the unit test that reads the
/// whole file, `scan::tests::tables_parse`).
fn parse(text: &'static str) -> (Vec<Rule>, Vec<&'static str>) {
    let mut rules = Vec::new();
    let mut bad = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut words = line.splitn(3, ' ');
        let (Some(module), Some(names), Some(reason)) = (words.next(), words.next(), words.next())
        else {
            bad.push(line);
            continue;
        };
        let list = |s: &'static str| s.split(',').filter(|n| !n.is_empty()).collect::<Vec<_>>();
        let names = match names {
            "*" => Names::All,
            n if n.starts_with("*-") => Names::AllBut(list(&n[2..])),
            n => Names::Only(list(n)),
        };
        rules.push(Rule {
            module,
            names,
            reason: reason.trim(),
        });
    }
    (rules, bad)
}

/// The lines of the rules that do not parse (for the unit test).
#[cfg(test)]
pub(super) fn bad_lines() -> Vec<&'static str> {
    parse(RULES).1
}

/// The rule that covers `path` (`module.name`), if one does.
fn rule_for(path: &str) -> Option<&'static Rule> {
    rules().iter().find(|r| {
        let rest = if path == r.module {
            ""
        } else {
            match path
                .strip_prefix(r.module)
                .and_then(|p| p.strip_prefix('.'))
            {
                Some(rest) => rest,
                None => return false,
            }
        };
        match &r.names {
            Names::All => true,
            Names::AllBut(except) => !except.iter().any(|n| covers(n, rest)),
            Names::Only(names) => names.iter().any(|n| covers(n, rest)),
        }
    })
}

/// Whether the name `n` covers `rest`: it is `n` or an attribute of it.
fn covers(n: &str, rest: &str) -> bool {
    rest == n || (rest.starts_with(n) && rest[n.len()..].starts_with('.'))
}

/// Whether `part` of a dotted name is a dunder attribute (`__globals__`, `__class__`).
fn is_dunder(part: &str) -> bool {
    part.len() > 4 && part.starts_with("__") && part.ends_with("__")
}

/// Why the global `module.name` is dangerous, if it is: a rule covers it (as written, or
/// as Python renames a Python 2 name), its dotted name goes through a dunder attribute,
/// or a part of its attribute chain is covered (`pathlib` `os.system`).
pub(super) fn danger(module: &str, name: &str) -> Option<String> {
    let path = format!("{module}.{name}");
    if let Some(r) = rule_for(&path) {
        return Some(format!("{path}: {}", r.reason));
    }
    if let Some((m, n)) = super::allow::table().python_renamed(module, name) {
        if let Some(r) = rule_for(&format!("{m}.{n}")) {
            return Some(format!("{path} (Python 3's {m}.{n}): {}", r.reason));
        }
    }
    let parts: Vec<&str> = name.split('.').collect();
    if let Some(d) = parts
        .iter()
        .find(|p| is_dunder(p) && !BENIGN_DUNDERS.contains(p))
    {
        return Some(format!(
            "{path}: goes through the attribute {d}, which reaches the interpreter's internals"
        ));
    }
    if parts.iter().any(|p| p.is_empty()) && !name.is_empty() {
        return Some(format!("{path}: a name with an empty attribute"));
    }
    for i in 0..parts.len().saturating_sub(1) {
        let chain = parts[i..].join(".");
        if let Some(r) = rule_for(&chain) {
            return Some(format!(
                "{path}: reaches {chain} as an attribute: {}",
                r.reason
            ));
        }
    }
    None
}
