//! What the pinned torch's weights-only unpickler accepts, and Python's import mappings:
//! `torch_weights_only.txt`, generated once by `scripts/scan_torch_allowlist.py` in the
//! test environment, parsed here at first use. Hand-written: the table is data of
//! another program, read as such.

use std::collections::{HashMap, HashSet};
use std::sync::OnceLock;

/// The generated table.
const TABLE: &str = include_str!("torch_weights_only.txt");

/// What calling an allowed global makes, as the weights-only unpickler treats it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum WoKind {
    /// A class: `NEWOBJ` accepts it, `BUILD` accepts its instances.
    Class,
    /// `OrderedDict` or `Counter`: a class whose instances `SETITEM(S)` also accepts.
    Mapping,
    /// A tensor rebuild function: `BUILD` accepts what it returns.
    Tensor,
    /// Any other function: `REDUCE` accepts it, nothing accepts what it returns.
    Function,
    /// Not callable (a dtype, a qscheme, a storage type).
    Value,
}

/// The parsed table.
pub(super) struct Table {
    allow: HashMap<&'static str, WoKind>,
    opcodes: [bool; 256],
    blocked: HashSet<&'static str>,
    refused: HashSet<&'static str>,
    torch_module: HashMap<&'static str, &'static str>,
    torch_name: HashMap<&'static str, &'static str>,
    python_module: HashMap<&'static str, &'static str>,
    python_name: HashMap<&'static str, &'static str>,
}

/// The table, parsed once. A line it does not know is skipped here and refused by the
/// unit test that reads the whole file (`scan::tests::tables_parse`).
pub(super) fn table() -> &'static Table {
    static T: OnceLock<Table> = OnceLock::new();
    T.get_or_init(|| parse(TABLE).0)
}

/// Parses the table; the lines it could not read.
pub(super) fn parse(text: &'static str) -> (Table, Vec<&'static str>) {
    let mut t = Table {
        allow: HashMap::new(),
        opcodes: [false; 256],
        blocked: HashSet::new(),
        refused: HashSet::new(),
        torch_module: HashMap::new(),
        torch_name: HashMap::new(),
        python_module: HashMap::new(),
        python_name: HashMap::new(),
    };
    let mut bad = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let words: Vec<&'static str> = line.split_whitespace().collect();
        let ok = match words.as_slice() {
            ["allow", path, kind] => match kind_of(kind) {
                Some(k) => t.allow.insert(path, k).is_none(),
                None => false,
            },
            ["opcode", _, hex] => match u8::from_str_radix(hex.trim_start_matches("0x"), 16) {
                Ok(code) => {
                    t.opcodes[code as usize] = true;
                    true
                }
                Err(_) => false,
            },
            ["blocked", module] => t.blocked.insert(module),
            ["refused", path] => t.refused.insert(path),
            ["torch-module", a, b] => t.torch_module.insert(a, b).is_none(),
            ["torch-name", a, b] => t.torch_name.insert(a, b).is_none(),
            ["python-module", a, b] => t.python_module.insert(a, b).is_none(),
            ["python-name", a, b] => t.python_name.insert(a, b).is_none(),
            _ => false,
        };
        if !ok {
            bad.push(line);
        }
    }
    (t, bad)
}

fn kind_of(word: &str) -> Option<WoKind> {
    Some(match word {
        "class" => WoKind::Class,
        "mapping" => WoKind::Mapping,
        "tensor" => WoKind::Tensor,
        "function" => WoKind::Function,
        "value" => WoKind::Value,
        _ => return None,
    })
}

/// `module.name` split at its last dot.
fn split(path: &str) -> (String, String) {
    match path.rsplit_once('.') {
        Some((m, n)) => (m.to_string(), n.to_string()),
        None => (String::new(), path.to_string()),
    }
}

/// A global renamed through a module map and a name map, as both unpicklers do: the
/// name map first, else the module map; `None` when neither renames it.
fn renamed(
    modules: &HashMap<&str, &str>,
    names: &HashMap<&str, &str>,
    module: &str,
    name: &str,
) -> Option<(String, String)> {
    if let Some(to) = names.get(format!("{module}.{name}").as_str()) {
        return Some(split(to));
    }
    modules
        .get(module)
        .map(|m| (m.to_string(), name.to_string()))
}

impl Table {
    /// The global as Python's unpickler renames a Python 2 name (below protocol 3).
    pub(super) fn python_renamed(&self, module: &str, name: &str) -> Option<(String, String)> {
        renamed(&self.python_module, &self.python_name, module, name)
    }

    /// Whether the weights-only unpickler accepts the global, and how it treats what
    /// calling it makes; or why it refuses it.
    pub(super) fn weights_only(&self, module: &str, name: &str) -> Result<WoKind, String> {
        let (m, n) = renamed(&self.torch_module, &self.torch_name, module, name)
            .unwrap_or_else(|| (module.to_string(), name.to_string()));
        let path = format!("{m}.{n}");
        if self.blocked.contains(m.as_str()) {
            return Err(format!("global {path}: module {m} is blocked"));
        }
        if self.refused.contains(path.as_str()) {
            return Err(format!("global {path} (a DTensor) is refused"));
        }
        self.allow
            .get(path.as_str())
            .copied()
            .ok_or_else(|| format!("global {path} is not in its allowlist"))
    }

    /// Whether the weights-only unpickler dispatches the opcode.
    pub(super) fn opcode(&self, code: u8) -> bool {
        self.opcodes[code as usize]
    }

    /// The number of allowed globals.
    #[cfg(test)]
    pub(super) fn allowed(&self) -> usize {
        self.allow.len()
    }
}
