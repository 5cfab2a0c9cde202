//! What a pickle may name: allowed globals and what calling them builds.

use std::collections::HashMap;
use std::ops::RangeInclusive;
use std::sync::Arc;

use super::value::Value;
use tensorfmt_core::error::Result;

/// Data that follows the `BUILD` of an object of a global in the stream (joblib writes an
/// array's bytes right after its wrapper's `BUILD`): given the object's state and the
/// bytes after the `BUILD` opcode, the padding to skip and the length of the data.
pub type InlineFn = fn(state: &Value, after: &[u8]) -> Result<(u64, u64)>;

/// What an allowed global is and what calling it (`REDUCE`, `NEWOBJ`) builds. Every call
/// gives an [`Object`](super::Object) that records the global, its kind and its arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// A mapping type (`collections.OrderedDict`): called with no arguments, an empty
    /// tuple, or one dict (or list of pairs), it makes an ordered dict whose
    /// [`entries`](super::Object::entries) `SETITEM`/`SETITEMS` extend and whose state
    /// `BUILD` sets.
    Dict,
    /// A list type: called with no arguments or one list, tuple or set, it makes a list
    /// whose [`items`](super::Object::items) `APPEND`/`APPENDS` extend.
    List,
    /// A set type (`builtins.set`): like [`Kind::List`]; `ADDITEMS` extends it.
    Set,
    /// A tuple type (`torch.Size`): called with no arguments or one list, tuple or set,
    /// it makes an immutable sequence of those [`items`](super::Object::items).
    Tuple,
    /// A function or class whose call is recorded with its arguments, named by `params`
    /// in order (`_rebuild_tensor_v2(storage, offset, size, stride, requires_grad,
    /// hooks)`). Any number of positional arguments is accepted and kept;
    /// [`Object::arg`](super::Object::arg) finds one by its name.
    Call {
        /// Names of the positional parameters, in order (shared by every object made).
        params: Arc<[String]>,
    },
    /// A global that may only appear as a value (a storage class, a dtype); calling it is
    /// refused.
    Class,
    /// A class whose instances carry named attributes (a TorchScript module,
    /// `__torch__.Net`): the call (`NEWOBJ`, `REDUCE`) keeps its arguments, and the state
    /// `BUILD` gives it (usually a dict of attributes) is the object's content. Walks name
    /// what the state holds by its keys, under the object's own path.
    Object,
    /// A function that calls one of its arguments with another, a tuple: torch's
    /// `_rebuild_from_type_v2(func, new_type, args, state)`, how a tensor subclass is
    /// pickled, calls `func(*args)` then sets the type. Read as the call of the global
    /// `func` (which must be allowed, and not itself of this kind) with `args`; the other
    /// arguments are dropped.
    Apply {
        /// The position of the function among the arguments.
        func: usize,
        /// The position of its arguments' tuple.
        args: usize,
    },
    /// A global outside the rules, read inertly (the default unless
    /// `Limits::weights_only`): nothing is imported, called, looked up or set. Calling it
    /// (`REDUCE`, `NEWOBJ`, `NEWOBJ_EX`, `INST`, `OBJ`) records the arguments; `BUILD`
    /// records the state (the last one given); `APPEND(S)` and `ADDITEMS` record
    /// [`items`](super::Object::items), `SETITEM(S)` [`entries`](super::Object::entries),
    /// as a `list` or `dict` subclass would hold them. Walks treat it as an
    /// [`Kind::Object`].
    Inert,
}

/// The allowed globals, persistent ids and protocols of one kind of pickle. Built with
/// [`Rules::new`] and the builder methods; nothing is allowed by default.
///
/// Whatever the rules say, the modules `os`, `posix`, `nt`, `sys` and `subprocess` are
/// never allowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rules {
    /// Allowed globals: module → name → kind.
    globals: HashMap<String, HashMap<String, Kind>>,
    /// Modules every global of which is allowed (`__torch__` and its submodules).
    modules: Vec<(String, Kind)>,
    codecs_encode: bool,
    byte_ranges: bool,
    persistent: bool,
    /// The form persistent ids must have: a tuple of these items, the first of which is
    /// the kind's name (see [`Rules::persistent_form`]).
    persistent_form: Option<(String, Vec<String>)>,
    protocols: RangeInclusive<u8>,
    /// Globals whose objects have data inline after their `BUILD`: path → its length.
    inline: HashMap<String, InlineFn>,
}

impl Default for Rules {
    fn default() -> Self {
        Rules::new()
    }
}

const NEVER: &[&str] = &["os", "posix", "nt", "sys", "subprocess"];

/// True when `module` is `root` or one of its submodules (`root.x.y`).
fn in_module(module: &str, root: &str) -> bool {
    module
        .strip_prefix(root)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
}

impl Rules {
    /// Rules that allow no global and no persistent id, and protocols 0 to 5.
    pub fn new() -> Self {
        Rules {
            globals: HashMap::new(),
            modules: Vec::new(),
            codecs_encode: false,
            byte_ranges: false,
            persistent: false,
            persistent_form: None,
            protocols: 0..=5,
            inline: HashMap::new(),
        }
    }

    /// Allows the global `module`.`name`, which builds `kind`.
    pub fn allow(mut self, module: &str, name: &str, kind: Kind) -> Self {
        self.globals
            .entry(module.to_string())
            .or_default()
            .insert(name.to_string(), kind);
        self
    }

    /// Allows every global of `module` and of its submodules (`module.x.y`), each
    /// building `kind`: classes generated at run time under a fixed root, such as
    /// TorchScript's `__torch__`. Globals listed one by one take precedence.
    pub fn allow_module(mut self, module: &str, kind: Kind) -> Self {
        self.modules.push((module.to_string(), kind));
        self
    }

    /// Allows the global named by the dotted `path` (`"collections.OrderedDict"`); the
    /// module is everything before the last dot. A path without a dot is ignored.
    pub fn allow_path(self, path: &str, kind: Kind) -> Self {
        match path.rsplit_once('.') {
            Some((module, name)) => self.allow(module, name, kind),
            None => self,
        }
    }

    /// Allows the function or class named by the dotted `path`, whose calls are recorded
    /// with their positional arguments named `params` ([`Kind::Call`]).
    pub fn allow_call(self, path: &str, params: &[&str]) -> Self {
        let params = params.iter().map(|p| p.to_string()).collect();
        self.allow_path(path, Kind::Call { params })
    }

    /// Allows `_codecs.encode(str, 'latin1')`, which protocol-2 pickles written by
    /// Python 3 use to store `bytes` (any other encoding is refused); the reader turns
    /// such a call into [`Value::Bytes`](super::Value::Bytes), or a latin-1
    /// [`Value::Range`](super::Value::Range) under [`Rules::byte_ranges`]; and
    /// `bytes()` (`__builtin__.bytes`, `builtins.bytes`) with no argument, how they store
    /// an empty one.
    pub fn allow_codecs_encode(mut self) -> Self {
        self.codecs_encode = true;
        self
    }

    /// Leaves the byte strings the pickle stores plain (`BINBYTES`, `SHORT_BINBYTES`,
    /// `BINBYTES8`, `BYTEARRAY8`, Python 2 `str`: `BINSTRING`, `SHORT_BINSTRING`) and the
    /// texts `_codecs.encode` turns into bytes where they are, as
    /// [`Value::Range`](super::Value::Range)s of the pickle's buffer, instead of copying
    /// them: for pickles whose byte strings are array data. The pickle's size is then
    /// not bounded by `Limits::max_header_bytes` (what it copies is).
    pub fn byte_ranges(mut self, keep: bool) -> Self {
        self.byte_ranges = keep;
        self
    }

    /// Whether byte strings are left in the pickle (see [`Rules::byte_ranges`]).
    pub fn keeps_byte_ranges(&self) -> bool {
        self.byte_ranges
    }

    /// Accepts (`true`) or refuses persistent ids (`PERSID`, `BINPERSID`).
    pub fn persistent_ids(mut self, accept: bool) -> Self {
        self.persistent = accept;
        self
    }

    /// Accepts persistent ids of one form only: a tuple of exactly `items` (their names,
    /// separated by commas, for errors), the first of which is the text `kind` (bytes
    /// decoded as ASCII, as torch's `persistent_load` takes them): `("storage", class,
    /// key, location, numel)` for `persistent_form("storage", "tag, class, key, location,
    /// numel")`. Any other persistent id is refused at its `BINPERSID`, naming its offset.
    pub fn persistent_form(mut self, kind: &str, items: &str) -> Self {
        self.persistent = true;
        let items = items.split(',').map(|i| i.trim().to_string()).collect();
        self.persistent_form = Some((kind.to_string(), items));
        self
    }

    /// The form persistent ids must have, when one is set ([`Rules::persistent_form`]):
    /// the kind's name and the items' names.
    pub fn persistent_shape(&self) -> Option<(&str, &[String])> {
        self.persistent_form
            .as_ref()
            .map(|(k, items)| (k.as_str(), items.as_slice()))
    }

    /// The protocols accepted by `PROTO` (0 to 5 unless set).
    pub fn protocols(mut self, range: RangeInclusive<u8>) -> Self {
        self.protocols = range;
        self
    }

    /// Reads data inline after the `BUILD` of each object of the global `path`, whose
    /// length `f` gives: the reader records it as the object's one
    /// [`item`](super::Object::items), a [`Value::Range`] of the buffer, and reads on
    /// after it. The global is allowed, as [`Kind::Inert`] (its objects are never
    /// called); the data must not lie inside a `FRAME` (joblib commits its frame first).
    pub fn inline_data(self, path: &str, f: InlineFn) -> Self {
        let mut r = self.allow_path(path, Kind::Inert);
        r.inline.insert(path.to_string(), f);
        r
    }

    /// The length of the data inline after the `BUILD` of an object of `path`, when the
    /// rules say there is some ([`Rules::inline_data`]).
    pub fn inline_fn(&self, path: &str) -> Option<InlineFn> {
        self.inline.get(path).copied()
    }

    /// What `module`.`name` builds, when it is allowed.
    pub fn kind(&self, module: &str, name: &str) -> Option<&Kind> {
        if NEVER.iter().any(|m| in_module(module, m)) {
            return None;
        }
        if let Some(k) = self.globals.get(module).and_then(|names| names.get(name)) {
            return Some(k);
        }
        self.modules
            .iter()
            .find_map(|(m, k)| in_module(module, m).then_some(k))
    }

    /// The globals allowed one by one whose calls the rules record ([`Kind::Call`]), as
    /// (module, name), in no particular order: what a pickle of these rules names first.
    pub fn calls(&self) -> impl Iterator<Item = (&str, &str)> {
        self.globals.iter().flat_map(|(module, names)| {
            names
                .iter()
                .filter(|(_, k)| matches!(k, Kind::Call { .. }))
                .map(move |(name, _)| (module.as_str(), name.as_str()))
        })
    }

    /// Whether `_codecs.encode` is allowed (see [`Rules::allow_codecs_encode`]).
    pub fn codecs_encode(&self) -> bool {
        self.codecs_encode
    }

    /// Whether persistent ids are accepted.
    pub fn accepts_persistent_ids(&self) -> bool {
        self.persistent
    }

    /// The protocols accepted.
    pub fn protocol_range(&self) -> RangeInclusive<u8> {
        self.protocols.clone()
    }
}
