//! Semantic checks over a set of parsed schema files. Every error found is reported; the
//! checker never stops at the first.

use std::collections::HashMap;

use crate::ast::*;
use crate::ast_impl::{
    pattern_captures, CODECS, DTYPES, ENGINES, ENTRY_PROPS, TENSOR_KEYS, VALUE_KEYS,
};
use crate::diag::{Diagnostic, Diagnostics};

/// Runs every check; see the crate docs and `docs/fmt-language.md` for the rules.
pub(crate) fn check(files: &[SchemaFile]) -> Diagnostics {
    check_with(files, false)
}

/// `lenient`: some files of the set could not be parsed, so names of formats that are not
/// found are not reported (they may be defined in a file that failed).
///
/// Every error of the schema comes in one report, in two stages. First what the files
/// declare (items, names, properties: this checker) and every expression resolved and typed
/// (the IR lowering); then, for each format with no error of the first stage, what its
/// engine and its writers can mean (the engine rules and the write plans over the IR). A
/// format with an unresolved name or an ill-typed expression skips the second stage, whose
/// findings would only repeat those errors.
pub(crate) fn check_with(files: &[SchemaFile], lenient: bool) -> Diagnostics {
    let mut c = Checker {
        files,
        lenient,
        errors: Vec::new(),
        formats: HashMap::new(),
    };
    c.run();
    let (ir, lowered) = crate::ir::lower_with(files, lenient);
    // One mistake, one error: what the lowering finds where this checker already reported
    // (a type that names no item, or an item that is not a type) is not reported twice.
    // Distinct findings of the lowering at one place (a global called with named arguments
    // and with too few) are all reported.
    let declared = c.errors.len();
    for d in lowered {
        if !c.errors[..declared]
            .iter()
            .any(|e| e.path == d.path && e.span.start == d.span.start)
        {
            c.errors.push(d);
        }
    }
    // The formats without errors so far get the second stage.
    let spans: Vec<(&std::path::Path, Span)> = files
        .iter()
        .flat_map(|f| f.formats.iter().map(move |x| (f.path.as_path(), x.span)))
        .collect();
    let clean: Vec<bool> = spans
        .iter()
        .map(|&(path, sp)| {
            !c.errors
                .iter()
                .any(|e| e.path == path && sp.start <= e.span.start && e.span.start < sp.end)
        })
        .collect();
    let clean = |f: crate::ir::FormatId| clean.get(f.index()).copied().unwrap_or(false);
    if !lenient {
        c.errors
            .extend(crate::ir::write_plan_gaps(files, &ir, &clean));
        c.errors
            .extend(crate::check_engines::check(files, &ir, &clean));
    }
    // By file, then by position.
    let index = |d: &Diagnostic| files.iter().position(|f| f.path == d.path);
    c.errors.sort_by_key(|d| (index(d), d.span.start));
    Diagnostics(c.errors)
}

/// Scalar types of layout fields and dict keys, with their generic arity.
const LAYOUT_SCALARS: &[(&str, usize)] = &[
    ("u8", 0),
    ("u16", 0),
    ("u32", 0),
    ("u64", 0),
    ("i8", 0),
    ("i16", 0),
    ("i32", 0),
    ("i64", 0),
    ("f32", 0),
    ("f64", 0),
    ("bool", 0),
    ("str", 0),
    ("bytes", 0),
    ("payload", 0),
    ("tuple", 1),
    ("list", 1),
    ("map", 2),
];

/// Protobuf scalar types.
const PROTO_SCALARS: &[&str] = &[
    "double", "float", "int32", "int64", "uint32", "uint64", "sint32", "sint64", "fixed32",
    "fixed64", "sfixed32", "sfixed64", "bool", "string", "bytes",
];

const KV_BACKENDS: &[&str] = &["records", "lmdb", "leveldb"];

/// The format being checked.
#[derive(Clone, Copy)]
struct At<'a> {
    file: usize,
    fmt: &'a Format,
}

struct Checker<'a> {
    files: &'a [SchemaFile],
    lenient: bool,
    errors: Vec<Diagnostic>,
    /// Format name → (file index, format), first definition.
    formats: HashMap<&'a str, (usize, &'a Format)>,
}

impl<'a> Checker<'a> {
    fn err(&mut self, file: usize, span: Span, msg: impl Into<String>) {
        let f = &self.files[file];
        self.errors
            .push(Diagnostic::new(&f.path, &f.source, span, msg));
    }

    fn err_help(
        &mut self,
        file: usize,
        span: Span,
        msg: impl Into<String>,
        help: impl Into<String>,
    ) {
        let f = &self.files[file];
        self.errors
            .push(Diagnostic::new(&f.path, &f.source, span, msg).with_help(help));
    }

    /// Records `key`, first seen at `span`, in `seen`. A repeat is reported as `msg` with a
    /// help line saying where the key was first `word` ("defined", "used"). True when new.
    fn note_unique<K: Eq + std::hash::Hash>(
        &mut self,
        file: usize,
        seen: &mut HashMap<K, Span>,
        key: K,
        span: Span,
        msg: impl FnOnce() -> String,
        word: &str,
    ) -> bool {
        if let Some(&prev) = seen.get(&key) {
            let first = self.where_is(file, prev);
            self.err_help(file, span, msg(), format!("first {word} at {first}"));
            false
        } else {
            seen.insert(key, span);
            true
        }
    }

    /// A mapping's assignment to `key`: one of the `known` properties of a `kind` mapping
    /// (`tensor`, `value`), assigned once (recorded in `assigned`).
    fn property<'k>(
        &mut self,
        file: usize,
        key: &'k Ident,
        (kind, known): (&str, &[&str]),
        assigned: &mut HashMap<&'k str, Span>,
    ) {
        let k = key.name.as_str();
        if !known.contains(&k) {
            self.err_help(
                file,
                key.span,
                format!("unknown {kind} property '{k}'"),
                format!("{kind} properties: {}", known.join(", ")),
            );
        } else if let Some(&prev) = assigned.get(k) {
            let first = self.where_is(file, prev);
            self.err_help(
                file,
                key.span,
                format!("'{k}' is assigned twice"),
                format!("first assigned at {first}"),
            );
        } else {
            assigned.insert(k, key.span);
        }
    }

    fn where_is(&self, file: usize, span: Span) -> String {
        let f = &self.files[file];
        let (l, c) = f.line_col(span.start);
        format!("{}:{l}:{c}", f.path.display())
    }

    fn run(&mut self) {
        // Formats, across all files.
        for (fi, file) in self.files.iter().enumerate() {
            for fmt in &file.formats {
                if let Some(&(pf, prev)) = self.formats.get(fmt.name.name.as_str()) {
                    let first = self.where_is(pf, prev.name.span);
                    self.err_help(
                        fi,
                        fmt.name.span,
                        format!("duplicate format '{}'", fmt.name.name),
                        format!("first defined at {first}"),
                    );
                } else {
                    self.formats.insert(&fmt.name.name, (fi, fmt));
                }
            }
        }
        // Public names are unique too (formats whose identifier is a duplicate are
        // already reported).
        let mut public: HashMap<&str, (usize, Span)> = HashMap::new();
        for (fi, file) in self.files.iter().enumerate() {
            for fmt in &file.formats {
                let first_def = self.formats.get(fmt.name.name.as_str());
                if !first_def.is_some_and(|&(_, f)| std::ptr::eq(f, fmt)) {
                    continue;
                }
                let p = fmt.public_name();
                let sp = fmt.public_name.as_ref().map_or(fmt.name.span, |s| s.span);
                if let Some(&(pf, psp)) = public.get(p) {
                    let first = self.where_is(pf, psp);
                    self.err_help(
                        fi,
                        sp,
                        format!("duplicate public format name \"{p}\""),
                        format!("first used at {first}"),
                    );
                } else {
                    public.insert(p, (fi, sp));
                }
            }
        }
        for (fi, file) in self.files.iter().enumerate() {
            for u in &file.uses {
                if !self.formats.contains_key(u.name.as_str()) && !self.lenient {
                    self.err_help(
                        fi,
                        u.span,
                        format!("unknown format '{}' in `use`", u.name),
                        "`use` names a format defined in one of the schema files loaded together",
                    );
                }
            }
            for fmt in &file.formats {
                self.format(At { file: fi, fmt });
            }
        }
    }

    // -----------------------------------------------------------------------------------
    // Formats and items

    /// True when `name` is a format visible from `at`'s file: defined in the same file or
    /// named by one of its `use` declarations.
    fn visible_format(&self, at: At<'a>, name: &str) -> Option<&'a Format> {
        let file = &self.files[at.file];
        if let Some(f) = file.formats.iter().find(|f| f.name.name == name) {
            return Some(f);
        }
        if file.uses.iter().any(|u| u.name == name) {
            return self.formats.get(name).map(|x| x.1);
        }
        None
    }

    fn format(&mut self, at: At<'a>) {
        let fmt = at.fmt;
        // Duplicate item names.
        let mut seen: HashMap<&str, &Item> = HashMap::new();
        for item in &fmt.items {
            if let Some(n) = item.name() {
                if let Some(prev) = seen.get(n.name.as_str()) {
                    let first = self.where_is(at.file, prev.name().expect("named").span);
                    self.err_help(
                        at.file,
                        n.span,
                        format!(
                            "duplicate name '{}' in format '{}' (a {} and a {})",
                            n.name,
                            fmt.name.name,
                            prev.kind_word(),
                            item.kind_word()
                        ),
                        format!("first defined at {first}"),
                    );
                } else {
                    seen.insert(&n.name, item);
                }
            }
        }
        // Engine.
        let engines: Vec<&Engine> = fmt
            .items
            .iter()
            .filter_map(|i| match i {
                Item::Engine(e) => Some(e),
                _ => None,
            })
            .collect();
        match engines.as_slice() {
            [] => self.err_help(
                at.file,
                fmt.name.span,
                format!("format '{}' has no engine", fmt.name.name),
                "add `engine file;` (or zip, protobuf(root = Message), kv(backend = ...))",
            ),
            [first, rest @ ..] => {
                for e in rest {
                    let first_at = self.where_is(at.file, first.span);
                    self.err_help(
                        at.file,
                        e.span,
                        format!("format '{}' has a second `engine`", fmt.name.name),
                        format!("a format has one engine; the first is at {first_at}"),
                    );
                }
                self.engine(at, first);
            }
        }
        for item in &fmt.items {
            match item {
                Item::Engine(_) => {}
                Item::Extensions(v) => {
                    for s in v {
                        if s.value.is_empty() || s.value.starts_with('.') {
                            self.err_help(
                                at.file,
                                s.span,
                                "a file extension is written without its dot",
                                "`extensions [\"npy\"];`",
                            );
                        }
                    }
                }
                Item::ReadOnly(sp) => {
                    if fmt.read_only() != Some(*sp) {
                        self.err(
                            at.file,
                            *sp,
                            format!("format '{}' is declared `read_only` twice", fmt.name.name),
                        );
                    } else if !matches!(fmt.engine_kind(), "file" | "") {
                        self.err_help(
                            at.file,
                            *sp,
                            format!(
                                "`read_only` is for formats of the `file` engine, not '{}'",
                                fmt.engine_kind()
                            ),
                            "the zip, protobuf and kv engines write what they read, and a zip, \
                             protobuf or kv format that maps no writable tensor refuses to \
                             write by itself",
                        );
                    }
                }
                Item::Detect(d) => self.detect(at, d),
                Item::Table(t) => self.table(at, t),
                Item::Dict(d) => self.dict(at, d),
                Item::Layout(l) => self.layout(at, l),
                Item::Message(m) => self.message(at, m, &[]),
                Item::Enum(e) => self.enum_decl(at, e),
                Item::Pickle(p) => self.pickle(at, p),
                Item::Entry(e) => self.entry(at, e),
                Item::Tensor(t) => self.tensor(at, t),
                Item::Value(t) => self.value_map(at, t),
            }
        }
    }

    fn engine(&mut self, at: At<'a>, e: &'a Engine) {
        let kind = e.kind.name.as_str();
        if !ENGINES.contains(&kind) {
            self.err_help(
                at.file,
                e.kind.span,
                format!("unknown engine '{kind}'"),
                format!("known engines: {}", ENGINES.join(", ")),
            );
            return;
        }
        let allowed: &[&str] = match kind {
            "protobuf" => &["root"],
            "kv" => &[
                "backend",
                "schema",
                "map_size",
                "write_buffer_size",
                "max_open_files",
                "block_size",
            ],
            _ => &[],
        };
        for a in &e.args {
            match &a.name {
                Some(n) if allowed.contains(&n.name.as_str()) => {}
                _ => self.err(
                    at.file,
                    a.span,
                    if allowed.is_empty() {
                        format!("engine '{kind}' takes no arguments")
                    } else {
                        format!(
                            "engine '{kind}' takes the named argument{} {}",
                            if allowed.len() > 1 { "s" } else { "" },
                            allowed.join(", ")
                        )
                    },
                ),
            }
        }
        match kind {
            "protobuf" => match crate::find_arg(&e.args, "root") {
                None => self.err_help(
                    at.file,
                    e.span,
                    "engine 'protobuf' needs its root message",
                    "`engine protobuf(root = ModelProto);`",
                ),
                Some(a) => {
                    let ok = a
                        .value
                        .path_name()
                        .is_some_and(|n| at.fmt.message(n).is_some());
                    if !ok {
                        self.err_help(
                            at.file,
                            a.value.span,
                            format!(
                                "the root of engine 'protobuf' must be a message of format '{}'",
                                at.fmt.name.name
                            ),
                            "`engine protobuf(root = M);` names a `message M { .. }` declared in \
                             this format",
                        );
                    }
                }
            },
            "kv" => match crate::find_arg(&e.args, "backend") {
                None => self.err_help(
                    at.file,
                    e.span,
                    "engine 'kv' needs a backend",
                    format!(
                        "`engine kv(backend = B);` with B one of {}",
                        KV_BACKENDS.join(", ")
                    ),
                ),
                Some(a) => {
                    if let Some(schema) = crate::find_arg(&e.args, "schema") {
                        let known = schema.value.path_name().is_some_and(|n| {
                            self.visible_format(at, n)
                                .is_some_and(|f| f.engine_kind() == "kv")
                        });
                        if !known {
                            self.err_help(
                                at.file,
                                schema.value.span,
                                format!("'{}' is not a kv format of this file", schema.value),
                                "`schema = F` maps the records as kv format F maps its own",
                            );
                        }
                    }
                    if !a
                        .value
                        .path_name()
                        .is_some_and(|n| KV_BACKENDS.contains(&n))
                    {
                        self.err_help(
                            at.file,
                            a.value.span,
                            format!("unknown kv backend '{}'", a.value),
                            format!("known backends: {}", KV_BACKENDS.join(", ")),
                        );
                    }
                    self.kv_open_args(at, e, a.value.path_name());
                }
            },
            _ => {}
        }
    }

    /// The kv engine's open arguments (`map_size = N`): each a positive integer
    /// constant, given with the backend it is of.
    fn kv_open_args(&mut self, at: At<'a>, e: &'a Engine, backend: Option<&str>) {
        for a in &e.args {
            let Some(name) = a.name.as_ref() else {
                continue;
            };
            let Some(&(_, of)) = crate::ir::KvOpen::ARGS.iter().find(|x| x.0 == name.name) else {
                continue;
            };
            let of = match of {
                crate::ir::KvBackend::Lmdb => "lmdb",
                crate::ir::KvBackend::Leveldb => "leveldb",
                crate::ir::KvBackend::Records => "records",
            };
            if backend.is_some_and(|b| b != of) {
                self.err_help(
                    at.file,
                    a.span,
                    format!("`{}` is an argument of backend {of}", name.name),
                    format!(
                        "it sets how {of} opens a database: `engine kv(backend = {of}, {} = N);`",
                        name.name
                    ),
                );
            }
            let positive = a
                .value
                .as_int()
                .is_some_and(|n| n > 0 && u64::try_from(n).is_ok());
            if !positive {
                self.err_help(
                    at.file,
                    a.value.span,
                    format!("`{}` must be a positive integer constant", name.name),
                    format!(
                        "`engine kv(backend = {of}, {} = N);` with N a whole number above 0",
                        name.name
                    ),
                );
            }
        }
    }

    fn detect(&mut self, at: At<'a>, d: &Detect) {
        match d {
            Detect::Magic { bytes, .. } => {
                if bytes.value.is_empty() {
                    self.err_help(
                        at.file,
                        bytes.span,
                        "a magic number cannot be empty",
                        "give the bytes the file starts with: `detect magic b\"\\x93NUMPY\" at 0;`",
                    );
                }
            }
            Detect::MagicAny {
                alternatives, list, ..
            } => self.magic_any(at, alternatives, *list),
            Detect::Pickle { pickle, window, .. } => {
                let declared = at.fmt.items.iter().any(
                    |i| matches!(i, crate::ast::Item::Pickle(p) if p.name.name == pickle.name),
                );
                if !declared {
                    self.err_help(
                        at.file,
                        pickle.span,
                        format!("`detect pickle` names no pickle declaration '{}' of this format", pickle.name),
                        "name a `pickle P { ... }` of the format, whose calls the first bytes must name",
                    );
                }
                if *window == 0 {
                    self.err_help(
                        at.file,
                        pickle.span,
                        "`detect pickle` searches no bytes",
                        "give how many bytes from the start are searched: `detect pickle(P, 4096);`",
                    );
                }
            }
            Detect::Entries { pattern, span, .. } => {
                // A kv format has no `detect` rules at all (an engine rule over the IR).
                if !matches!(at.fmt.engine_kind(), "zip" | "kv") {
                    self.err(at.file, *span, "`detect entries` needs the zip engine");
                }
                self.pattern(at, pattern);
            }
        }
    }

    /// `detect magic any [...]`: two alternatives or more, none empty, none matching only
    /// files that an earlier or shorter alternative already matches.
    fn magic_any(&mut self, at: At<'a>, alternatives: &[BytesLit], list: Span) {
        if alternatives.len() < 2 {
            self.err_help(
                at.file,
                list,
                "`detect magic any` lists one magic number",
                "list every form the first bytes take, or write the one as \
                 `detect magic b\"\\x93NUMPY\" at 0;`",
            );
        }
        for (j, b) in alternatives.iter().enumerate() {
            if b.value.is_empty() {
                self.err_help(
                    at.file,
                    b.span,
                    "a magic number cannot be empty",
                    "give the bytes the file starts with: `detect magic any [b\"\\x80\\x02\", b\"\\x80\\x03\"] at 0;`",
                );
                continue;
            }
            // `b` is redundant when another alternative is a prefix of it (the first of
            // two equal ones is kept).
            let covered = alternatives.iter().enumerate().any(|(i, a)| {
                i != j
                    && !a.value.is_empty()
                    && b.value.starts_with(&a.value)
                    && (a.value.len() < b.value.len() || i < j)
            });
            if covered {
                self.err_help(
                    at.file,
                    b.span,
                    "this magic number starts with another of the list, which already matches it",
                    "remove it, or lengthen the shorter one so that each names one form of the file",
                );
            }
        }
    }

    fn table(&mut self, at: At<'a>, t: &Table) {
        let mut keys: Vec<(&TableKey, Span)> = Vec::new();
        for r in &t.rows {
            match (&r.key, t.key_kind) {
                (TableKey::Int(_), KeyKind::Str) => self.err_help(
                    at.file,
                    r.span,
                    format!(
                        "table '{}' has string keys, but this key is an integer",
                        t.name.name
                    ),
                    "keys of a `str -> dtype` table are strings: `\"<f4\" => f32`",
                ),
                (TableKey::Str(_), KeyKind::Int) => self.err_help(
                    at.file,
                    r.span,
                    format!(
                        "table '{}' has integer keys, but this key is a string",
                        t.name.name
                    ),
                    "keys of an `int -> dtype` table are integers: `1 => f32`",
                ),
                (TableKey::Int(k), KeyKind::Int) if i64::try_from(*k).is_err() => self.err_help(
                    at.file,
                    r.span,
                    format!(
                        "table '{}' has the key {k}, outside the range of i64",
                        t.name.name
                    ),
                    "integer table keys are 64-bit signed integers",
                ),
                _ => {}
            }
            if let Some(&(_, prev)) = keys.iter().find(|k| *k.0 == r.key) {
                let first = self.where_is(at.file, prev);
                self.err_help(
                    at.file,
                    r.span,
                    format!("duplicate key {} in table '{}'", r.key, t.name.name),
                    format!("first used at {first}"),
                );
            } else {
                keys.push((&r.key, r.span));
            }
            if !DTYPES.contains(&r.dtype.name.as_str()) {
                self.err_help(
                    at.file,
                    r.dtype.span,
                    format!("unknown dtype '{}'", r.dtype.name),
                    format!("known dtypes: {}", DTYPES.join(", ")),
                );
            }
        }
    }

    fn dict(&mut self, at: At<'a>, d: &Dict) {
        let mut keys: HashMap<&str, Span> = HashMap::new();
        for f in &d.fields {
            self.note_unique(
                at.file,
                &mut keys,
                f.key.as_str(),
                f.key_span,
                || format!("duplicate key '{}' in dict '{}'", f.key, d.name.name),
                "used",
            );
            self.data_type(at, &f.ty);
        }
        // `rest: map<str, V>` (unquoted): every item whose key is not declared.
        for (i, f) in d.fields.iter().enumerate() {
            if f.quoted || f.key != "rest" {
                continue;
            }
            let is_map = f.ty.path.len() == 1
                && f.ty.path[0].name == "map"
                && f.ty.args.len() == 2
                && f.ty.args[0].path.len() == 1
                && f.ty.args[0].path[0].name == "str";
            if !is_map {
                self.err_help(
                    at.file,
                    f.ty.span,
                    "`rest` holds every undeclared key of the dict, so its type is `map<str, V>`"
                        .to_string(),
                    "write `rest: map<str, V>;`, or quote the key (`\"rest\": T;`) for a key named rest",
                );
            } else if i + 1 != d.fields.len() {
                self.err_help(
                    at.file,
                    f.key_span,
                    "`rest` holds every undeclared key of the dict, so it is the last key"
                        .to_string(),
                    "move `rest` after the other keys",
                );
            } else if f.optional {
                self.err_help(
                    at.file,
                    f.key_span,
                    "`rest` cannot be optional: it is empty when no other key is present"
                        .to_string(),
                    "remove `optional`",
                );
            }
        }
    }

    /// A layout-field or dict-key type: builtin scalars and generics, or a dict, layout,
    /// message or enum of this format or (qualified) of a visible format.
    fn data_type(&mut self, at: At<'a>, ty: &TypeRef) {
        if ty.path.len() == 1 {
            let n = ty.path[0].name.as_str();
            if let Some(&(_, arity)) = LAYOUT_SCALARS.iter().find(|s| s.0 == n) {
                if ty.args.len() != arity {
                    self.err(
                        at.file,
                        ty.span,
                        match arity {
                            0 => format!("type '{n}' takes no type arguments"),
                            1 => format!("type '{n}' takes one type argument: `{n}<T>`"),
                            _ => format!("type '{n}' takes two type arguments: `{n}<K, V>`"),
                        },
                    );
                }
                for a in &ty.args {
                    self.data_type(at, a);
                }
                return;
            }
        }
        if !ty.args.is_empty() {
            self.err(
                at.file,
                ty.span,
                format!("type '{}' takes no type arguments", ty.name()),
            );
        }
        self.user_type(at, ty, &["dict", "layout", "message", "enum"]);
    }

    /// Resolves a user-declared type; `kinds` are the item kinds accepted.
    fn user_type(&mut self, at: At<'a>, ty: &TypeRef, kinds: &[&str]) {
        let (fmt, rest) = match self.split_qualified(at, &ty.path) {
            Ok(x) => x,
            Err(()) => return,
        };
        let Some(fmt) = fmt else {
            return; // lenient: unknown format
        };
        let first = &rest[0];
        match fmt.item(&first.name) {
            Some(item) if kinds.contains(&item.kind_word()) => {
                if rest.len() > 1 {
                    // Nested protobuf types: `TensorProto.Segment`.
                    let ok = match item {
                        Item::Message(m) => nested_type(m, &rest[1..]),
                        _ => false,
                    };
                    if !ok {
                        self.err(at.file, ty.span, format!("unknown type '{}'", ty.name()));
                    }
                }
            }
            Some(item) => self.err_help(
                at.file,
                ty.span,
                format!("'{}' is a {}, not a type", ty.name(), item.kind_word()),
                format!("name {} of this format here", one_of(kinds)),
            ),
            None => self.err_help(
                at.file,
                ty.span,
                format!("unknown type '{}'", ty.name()),
                "types are u8..u64, i8..i64, f32, f64, bool, str, bytes, payload, tuple<T>, \
                 list<T>, map<K, V>, or a dict, layout, message or enum of this format \
                 (or `other.Name` of a format named by `use`)",
            ),
        }
    }

    /// Splits `fmt.Rest...` into the format and the rest; a path that does not start with
    /// a visible format refers to the current format. `Err` after reporting an error;
    /// `Ok((None, _))` when lenient and the format is unknown.
    fn split_qualified<'p>(
        &mut self,
        at: At<'a>,
        path: &'p [Ident],
    ) -> Result<(Option<&'a Format>, &'p [Ident]), ()> {
        if path.len() >= 2 && at.fmt.item(&path[0].name).is_none() {
            let n = path[0].name.as_str();
            if let Some(f) = self.visible_format(at, n) {
                return Ok((Some(f), &path[1..]));
            }
            if self.formats.contains_key(n) {
                self.err_help(
                    at.file,
                    path[0].span,
                    format!("format '{n}' is not imported"),
                    format!("add `use {n};` to this file"),
                );
                return Err(());
            }
            if self.lenient {
                return Ok((None, path));
            }
            if path.len() == 2 {
                self.err_help(
                    at.file,
                    path[0].span,
                    format!("unknown format '{n}'"),
                    format!(
                        "`{n}.Name` refers to format '{n}': load its schema and add `use {n};`"
                    ),
                );
                return Err(());
            }
        }
        Ok((Some(at.fmt), path))
    }

    fn layout(&mut self, at: At<'a>, l: &'a Layout) {
        // Duplicate fields.
        let mut seen: HashMap<&str, Span> = HashMap::new();
        for f in &l.fields {
            self.note_unique(
                at.file,
                &mut seen,
                f.name.name.as_str(),
                f.name.span,
                || {
                    format!(
                        "duplicate field '{}' in layout '{}'",
                        f.name.name, l.name.name
                    )
                },
                "defined",
            );
        }
        for (i, f) in l.fields.iter().enumerate() {
            self.field(at, l, i, f);
        }
    }

    fn field(&mut self, at: At<'a>, l: &'a Layout, i: usize, f: &'a Field) {
        match &f.ty {
            FieldType::Magic(b) => {
                if b.value.is_empty() {
                    self.err_help(
                        at.file,
                        b.span,
                        "a magic field cannot be empty",
                        "give the bytes the field holds: `magic: magic b\"\\x93NUMPY\";`",
                    );
                }
            }
            FieldType::Named(t) => self.data_type(at, t),
            FieldType::Cond {
                then, otherwise, ..
            } => {
                for t in [then, otherwise] {
                    if t.int_width().is_none() {
                        self.err_help(
                            at.file,
                            t.span,
                            format!(
                                "a conditional type chooses between integer types, found '{t}'"
                            ),
                            "integer types are u8, u16, u32, u64, i8, i16, i32, i64",
                        );
                    }
                }
            }
            FieldType::Match { cases, .. } => self.match_cases(at, cases),
        }

        let mut kinds: HashMap<&str, Span> = HashMap::new();
        for m in &f.modifiers {
            let kw = m.keyword();
            let sp = modifier_span(m);
            if kw != "check" {
                if let Some(&prev) = kinds.get(kw) {
                    let first = self.where_is(at.file, prev);
                    self.err_help(
                        at.file,
                        sp,
                        format!("duplicate `{kw}` modifier on field '{}'", f.name.name),
                        format!("a field takes one `{kw}`; the first is at {first}"),
                    );
                } else {
                    kinds.insert(kw, sp);
                }
            }
            match m {
                Modifier::Align(e) if e.as_int().is_some_and(|v| v <= 0) => self.err_help(
                    at.file,
                    e.span,
                    format!("the `align` of '{}' must be positive", f.name.name),
                    "the field starts at a multiple of `align` bytes from the layout's start: \
                     `align 64`",
                ),
                // Expressions are resolved and typed by the IR lowering.
                Modifier::Check(_)
                | Modifier::Write(_)
                | Modifier::Size(_)
                | Modifier::Align(_)
                | Modifier::At(_)
                | Modifier::Repeat(_)
                | Modifier::Rest(_) => {}
                Modifier::Codec { name, args, .. } => self.codec(at, name, args),
                Modifier::Pad { args, span } => self.pad(at, args, *span),
            }
        }
        if f.is_rest() && i + 1 != l.fields.len() {
            self.err(
                at.file,
                kinds["rest"],
                format!(
                    "`rest` takes every remaining byte, so '{}' must be the last field",
                    f.name.name
                ),
            );
        }
        if f.is_rest() && f.size().is_some() {
            self.err(
                at.file,
                kinds["rest"],
                "a field has either `size` or `rest`, not both",
            );
        }
        if f.pad_args().is_some() && f.size().is_none() && !f.is_rest() {
            // Padding is only meaningful when the length is recorded somewhere.
            self.err_help(
                at.file,
                kinds["pad"],
                "a padded field needs a `size`, so that readers know where it ends",
                "add `size LENGTH_FIELD` and `write = size(this)` on the length field",
            );
        }

        // Write rules of numeric fields (a read-only format is not written).
        if at.fmt.read_only().is_none()
            && f.ty.is_numeric()
            && f.write_rule().is_none()
            && f.implied_constant().is_none()
        {
            let name = f.name.name.as_str();
            let user = l.fields[i + 1..].iter().find_map(|g| {
                let uses = |e: &Expr| e.referenced_names().iter().any(|n| n.name == name);
                if g.size().is_some_and(uses) {
                    Some(("a length", g, "size"))
                } else if matches!(g.repeat(), Some(Repeat::Count(e)) if uses(e)) {
                    Some(("a count", g, "count"))
                } else if g.at().is_some_and(uses) {
                    Some(("an offset", g, "at"))
                } else {
                    None
                }
            });
            // A length, count or offset is computed when writing; any other number
            // may come from the tensor mapping's inverse, which the write plan checks
            // ("writing needs 'x', which neither a `write` rule nor the tensor mapping
            // gives").
            if let Some((what, g, kw)) = user {
                self.err_help(
                    at.file,
                    f.name.span,
                    format!(
                        "field '{name}' is {what} (used by '{}' {kw}) but has no write rule",
                        g.name.name
                    ),
                    if kw == "size" {
                        format!("add `write = size({})`", g.name.name)
                    } else if kw == "count" {
                        format!("add `write = len({})` or another count", g.name.name)
                    } else {
                        "add `write = ...` computing the offset".to_string()
                    },
                );
            }
        }
    }

    /// The cases of a tagged union: each tag once, each type once (a type is the name of
    /// its variant), the types named.
    fn match_cases(&mut self, at: At<'a>, cases: &'a [MatchCase]) {
        let mut tags: HashMap<i128, Span> = HashMap::new();
        let mut types: HashMap<String, Span> = HashMap::new();
        for c in cases {
            self.data_type(at, &c.ty);
            if let Some(&prev) = tags.get(&c.tag) {
                let first = self.where_is(at.file, prev);
                self.err_help(
                    at.file,
                    c.span,
                    format!("tag {} is matched twice", c.tag),
                    format!(
                        "each tag selects one type; the first case of {} is at {first}",
                        c.tag
                    ),
                );
            } else {
                tags.insert(c.tag, c.span);
            }
            let t = c.ty.to_string();
            if let Some(&prev) = types.get(&t) {
                let first = self.where_is(at.file, prev);
                self.err_help(
                    at.file,
                    c.ty.span,
                    format!("type '{t}' is selected by two tags"),
                    format!(
                        "a union reads into an enum with one variant per type; the first case of '{t}' is at {first}"
                    ),
                );
            } else {
                types.insert(t, c.ty.span);
            }
        }
    }

    fn codec(&mut self, at: At<'a>, name: &Ident, args: &[Arg]) {
        let n = name.name.as_str();
        if !CODECS.contains(&n) {
            self.err_help(
                at.file,
                name.span,
                format!("unknown codec '{n}'"),
                format!("known codecs: {}", CODECS.join(", ")),
            );
            return;
        }
        match n {
            "pickle" | "protobuf" => {
                let kind = if n == "pickle" { "pickle" } else { "message" };
                match args {
                    [a] if a.name.is_none() => match a.value.as_path() {
                        Some(p) => {
                            let p = p.to_vec();
                            self.named_item(at, &p, kind, a.value.span);
                        }
                        None => self.err_help(
                            at.file,
                            a.span,
                            format!("codec '{n}' takes the name of a {kind} declaration"),
                            format!("`codec {n}(Name)`, without quotes"),
                        ),
                    },
                    _ => {
                        let sp = args
                            .first()
                            .map_or(name.span, |a| a.span.to(args.last().expect("arg").span));
                        self.err_help(
                            at.file,
                            sp,
                            format!("codec '{n}' takes one argument: the {kind} to decode with"),
                            format!("`codec {n}(Name)`"),
                        );
                    }
                }
            }
            "pydict" => {
                for a in args {
                    match &a.name {
                        Some(k) if k.name == "encoding" || k.name == "spare" => {}
                        Some(k) if k.name == "trailing_comma" => {
                            if !matches!(a.value.kind, ExprKind::Bool(_)) {
                                self.err_help(
                                    at.file,
                                    a.value.span,
                                    "the `trailing_comma` argument is `true` or `false`",
                                    "`trailing_comma = true` follows every item with `, `, \
                                     the last included (NumPy's header dict)",
                                );
                            }
                        }
                        _ => self.err_help(
                            at.file,
                            a.span,
                            "codec 'pydict' takes the named arguments `encoding` and `spare` \
                             (and `trailing_comma`, true or false)",
                            "`codec pydict(encoding = \"latin1\", spare = N, trailing_comma = true)`",
                        ),
                    }
                }
            }
            "json" => {
                for a in args {
                    match &a.name {
                        Some(k)
                            if k.name == "unique_keys"
                                && matches!(a.value.kind, ExprKind::Bool(_)) => {}
                        _ => self.err_help(
                            at.file,
                            a.span,
                            "codec 'json' takes the named argument `unique_keys`, true or false",
                            "`codec json(unique_keys = true)`: a key repeated in an object of \
                             the text is an error (by default one item per key is kept, the \
                             last value, as Python's `json` keeps it)",
                        ),
                    }
                }
            }
            _ => {
                for a in args {
                    self.err(at.file, a.span, format!("codec '{n}' takes no arguments"));
                }
            }
        }
    }

    /// Checks that `path` names an item of kind `kind` (possibly qualified).
    fn named_item(&mut self, at: At<'a>, path: &[Ident], kind: &str, span: Span) {
        let Ok((fmt, rest)) = self.split_qualified(at, path) else {
            return;
        };
        let Some(fmt) = fmt else { return };
        let shown: Vec<&str> = path.iter().map(|i| i.name.as_str()).collect();
        let shown = shown.join(".");
        match (rest, fmt.item(&rest[0].name)) {
            ([_], Some(item)) if item.kind_word() == kind => {}
            (_, Some(item))
                if kind == "message"
                    && matches!(item, Item::Message(m) if nested_type(m, &rest[1..])) => {}
            ([_], Some(item)) => self.err_help(
                at.file,
                span,
                format!("'{shown}' is a {}, not a {kind}", item.kind_word()),
                format!("name a `{kind}` declared in this format (or `other.Name` of a format named by `use`)"),
            ),
            _ => self.err_help(
                at.file,
                span,
                format!("unknown {kind} '{shown}'"),
                format!("name a `{kind}` declared in this format (or `other.Name` of a format named by `use`)"),
            ),
        }
    }

    fn pad(&mut self, at: At<'a>, args: &[Arg], span: Span) {
        let mut has_align = false;
        for a in args {
            let Some(n) = &a.name else {
                self.err_help(
                    at.file,
                    a.span,
                    "`pad` takes named arguments",
                    "`pad(align = 64, fill = b\" \", last = b\"\\n\")`",
                );
                continue;
            };
            match n.name.as_str() {
                "align" => {
                    has_align = true;
                    if a.value.as_int().is_some_and(|v| v <= 0) {
                        self.err_help(
                            at.file,
                            a.value.span,
                            "`pad` align must be positive",
                            "the field ends at a multiple of `align` bytes: `pad(align = 64)`",
                        );
                    }
                }
                "min" => {
                    if a.value.as_int().is_some_and(|v| v < 0) {
                        self.err_help(
                            at.file,
                            a.value.span,
                            "`pad` min cannot be negative",
                            "`min` is the least count of pad bytes: `pad(align = 64, min = 2)`",
                        );
                    }
                }
                "fill" | "last" => match &a.value.kind {
                    ExprKind::Bytes(b) if b.len() == 1 => {}
                    _ => self.err(
                        at.file,
                        a.value.span,
                        format!("`pad` {} is one byte, written `b\" \"`", n.name),
                    ),
                },
                other => self.err_help(
                    at.file,
                    n.span,
                    format!("unknown `pad` argument '{other}'"),
                    "`pad` takes align, fill, last and min",
                ),
            }
        }
        if !has_align {
            self.err_help(
                at.file,
                span,
                "`pad` needs `align = N`",
                "`pad(align = 64, fill = b\" \")`",
            );
        }
    }

    fn message(&mut self, at: At<'a>, m: &'a Message, outer: &[&'a Message]) {
        let mut chain: Vec<&'a Message> = outer.to_vec();
        chain.push(m);
        let mut names: HashMap<&str, Span> = HashMap::new();
        let mut tags: HashMap<u32, Span> = HashMap::new();
        let mut dup = |c: &mut Self, n: &'a Ident| {
            if let Some(&prev) = names.get(n.name.as_str()) {
                let first = c.where_is(at.file, prev);
                c.err_help(
                    at.file,
                    n.span,
                    format!("duplicate name '{}' in message '{}'", n.name, m.name.name),
                    format!("first defined at {first}"),
                );
            } else {
                names.insert(&n.name, n.span);
            }
        };
        for f in &m.fields {
            dup(self, &f.name);
        }
        for x in &m.messages {
            dup(self, &x.name);
        }
        for x in &m.enums {
            dup(self, &x.name);
        }
        for f in &m.fields {
            if f.tag == 0 || f.tag > 536_870_911 || (19000..=19999).contains(&f.tag) {
                self.err_help(
                    at.file,
                    f.span,
                    format!("invalid field number {} for '{}'", f.tag, f.name.name),
                    "protobuf field numbers are 1 to 536870911, except 19000 to 19999",
                );
            } else {
                self.note_unique(
                    at.file,
                    &mut tags,
                    f.tag,
                    f.span,
                    || {
                        format!(
                            "field number {} used twice in message '{}'",
                            f.tag, m.name.name
                        )
                    },
                    "used",
                );
            }
            self.proto_type(at, &f.ty, &chain);
            for o in &f.options {
                match o.name.as_ref().map(|n| n.name.as_str()) {
                    None if o.value.is_path("packed") => {
                        if f.label != Label::Repeated {
                            self.err(at.file, o.span, "`packed` applies to repeated fields");
                        }
                    }
                    Some("default") => {
                        if f.label == Label::Repeated {
                            self.err(at.file, o.span, "a repeated field has no default");
                        }
                    }
                    Some("write") => {
                        if f.label == Label::Repeated && !matches!(o.value.kind, ExprKind::List(_))
                        {
                            self.err(
                                at.file,
                                o.value.span,
                                "a repeated field is written from a list `[..]`",
                            );
                        }
                    }
                    _ => self.err_help(
                        at.file,
                        o.span,
                        format!("unknown field option '{o}'"),
                        "field options are `packed`, `default = VALUE` and `write = VALUE`",
                    ),
                }
            }
        }
        for x in &m.messages {
            self.message(at, x, &chain);
        }
        for e in &m.enums {
            self.enum_decl(at, e);
        }
    }

    fn proto_type(&mut self, at: At<'a>, ty: &TypeRef, chain: &[&'a Message]) {
        if !ty.args.is_empty() {
            self.err(at.file, ty.span, "protobuf types take no type arguments");
        }
        if ty.path.len() == 1 && PROTO_SCALARS.contains(&ty.path[0].name.as_str()) {
            return;
        }
        // Innermost scope outwards, then the format's top level.
        for depth in (0..=chain.len()).rev() {
            let found = if depth == 0 {
                match at.fmt.item(&ty.path[0].name) {
                    Some(Item::Message(m)) => nested_type(m, &ty.path[1..]),
                    Some(Item::Enum(_)) => ty.path.len() == 1,
                    _ => false,
                }
            } else {
                let m = chain[depth - 1];
                nested_type_in(m, &ty.path)
            };
            if found {
                return;
            }
        }
        // Another format's message.
        if ty.path.len() >= 2 {
            if let Some(f) = self.visible_format(at, &ty.path[0].name) {
                let ok = match f.item(&ty.path[1].name) {
                    Some(Item::Message(m)) => nested_type(m, &ty.path[2..]),
                    Some(Item::Enum(_)) => ty.path.len() == 2,
                    _ => false,
                };
                if ok {
                    return;
                }
            } else if self.lenient {
                return;
            }
        }
        self.err_help(
            at.file,
            ty.span,
            format!("unknown type '{}'", ty.name()),
            format!(
                "protobuf field types are {}, or a message or enum",
                PROTO_SCALARS.join(", ")
            ),
        );
    }

    fn enum_decl(&mut self, at: At<'a>, e: &EnumDecl) {
        let mut names: HashMap<&str, Span> = HashMap::new();
        let mut values: HashMap<i64, &str> = HashMap::new();
        for (n, v) in &e.values {
            self.note_unique(
                at.file,
                &mut names,
                n.name.as_str(),
                n.span,
                || format!("duplicate value '{}' in enum '{}'", n.name, e.name.name),
                "defined",
            );
            if let Some(prev) = values.get(v) {
                self.err_help(
                    at.file,
                    n.span,
                    format!(
                        "'{}' has the number {v} of '{prev}' in enum '{}'",
                        n.name, e.name.name
                    ),
                    format!("give '{}' a number no other value of the enum has", n.name),
                );
            } else {
                values.insert(*v, &n.name);
            }
        }
    }

    fn pickle(&mut self, at: At<'a>, p: &Pickle) {
        let mut protocol = false;
        let mut persistent = false;
        let mut options = std::collections::HashSet::new();
        let mut globals: HashMap<&str, Span> = HashMap::new();
        for item in &p.items {
            match item {
                PickleItem::Protocol(v, sp) => {
                    if protocol {
                        self.err(at.file, *sp, "`protocol` given twice");
                    }
                    protocol = true;
                    if *v > 5 {
                        self.err(
                            at.file,
                            *sp,
                            format!("pickle protocol {v} does not exist (0 to 5)"),
                        );
                    }
                }
                PickleItem::Option(name) => {
                    if !crate::ast::PICKLE_OPTIONS.iter().any(|o| o.0 == name.name) {
                        let known: Vec<String> = crate::ast::PICKLE_OPTIONS
                            .iter()
                            .map(|(o, what)| format!("`{o};` ({what})"))
                            .collect();
                        self.err_help(
                            at.file,
                            name.span,
                            format!("unknown pickle option `{}`", name.name),
                            format!("the options are {}", known.join(", ")),
                        );
                    } else if !options.insert(name.name.as_str()) {
                        self.err(at.file, name.span, format!("`{}` given twice", name.name));
                    }
                }
                PickleItem::Persistent { span, .. } => {
                    if persistent {
                        self.err(at.file, *span, "`persistent` given twice");
                    }
                    persistent = true;
                }
                PickleItem::Global {
                    path, kind, params, ..
                } => {
                    if !path.value.contains('.') {
                        self.err(at.file, path.span, "a global is written \"module.name\"");
                    }
                    let named = |n: &str| params.iter().any(|p| p.name == n);
                    if kind.name == "apply" && !(named("func") && named("args")) {
                        self.err_help(
                            at.file,
                            kind.span,
                            "an `apply` global names the parameters `func` and `args`",
                            "`apply(func, new_type, args, state)`: the call is `func(*args)`",
                        );
                    }
                    if let Some(&prev) = globals.get(path.value.as_str()) {
                        let first = self.where_is(at.file, prev);
                        self.err_help(
                            at.file,
                            path.span,
                            format!("duplicate global \"{}\"", path.value),
                            format!("first declared at {first}"),
                        );
                    } else {
                        globals.insert(&path.value, path.span);
                    }
                }
            }
        }
    }

    /// Where a protobuf write rule puts the tensor's bytes (`data`). A document streams
    /// them after the item it writes, so `data` is the value of a `bytes` field of the
    /// message the rule builds (not of a message inside it); a database record encodes
    /// them into the field, so `data` is the value of a repeated number, string or bytes
    /// field, or of a `string` or `bytes` field.
    fn proto_data(&mut self, at: At<'a>, rule: &Expr) {
        let document = at.fmt.engine_kind() == "protobuf";
        // The messages the rule builds at its top (through `if`s).
        fn tops<'e>(e: &'e Expr, out: &mut Vec<&'e Expr>) {
            match &e.kind {
                ExprKind::If {
                    then, otherwise, ..
                } => {
                    tops(then, out);
                    tops(otherwise, out);
                }
                _ => out.push(e),
            }
        }
        let mut top = Vec::new();
        tops(rule, &mut top);
        let is_data =
            |e: &Expr| matches!(&e.kind, ExprKind::Path(p) if p.len() == 1 && p[0].name == "data");
        let mut placed: Vec<Span> = Vec::new();
        let mut wrong: Vec<(Span, String)> = Vec::new();
        rule.walk(&mut |x| {
            let ExprKind::Call { callee, args } = &x.kind else {
                return;
            };
            let decl = match callee.as_slice() {
                [m] => at.fmt.messages().find(|d| d.name.name == m.name),
                _ => None,
            };
            let (Some(decl), [m]) = (decl, callee.as_slice()) else {
                // Reported as a call that builds no message.
                placed.extend(
                    args.iter()
                        .filter(|a| is_data(&a.value))
                        .map(|a| a.value.span),
                );
                return;
            };
            let at_top = top.iter().any(|t| std::ptr::eq(*t, x));
            for a in args.iter().filter(|a| is_data(&a.value)) {
                let Some(f) = a
                    .name
                    .as_ref()
                    .and_then(|n| decl.fields.iter().find(|f| f.name.name == n.name))
                else {
                    continue;
                };
                let ty = f.ty.path.last().map_or("", |i| i.name.as_str());
                let repeated = f.label == Label::Repeated;
                let holds = if document {
                    // A repeated one holds a string tensor's elements, one value each.
                    at_top && (ty == "bytes" || (repeated && ty == "string"))
                } else {
                    let number = matches!(
                        ty,
                        "float" | "double" | "int32" | "int64" | "uint32" | "uint64" | "bool"
                    ) || at.fmt.enums().any(|e| e.name.name == ty)
                        || decl.enums.iter().any(|e| e.name.name == ty);
                    matches!(ty, "string" | "bytes") || (repeated && number)
                };
                if holds {
                    placed.push(a.value.span);
                } else {
                    wrong.push((a.value.span, format!("{}.{}", m.name, f.name.name)));
                }
            }
        });
        let help = if document {
            "a document streams the tensor's bytes after the item: `data` is the value of a \
             `bytes` field of the message the rule builds (`TensorProto(..., raw_data = data)`), \
             or of a repeated `bytes` field for strings (`string_data = data`)"
        } else {
            "a record encodes the elements into one field: a repeated number, string or bytes \
             field, or a `string` or `bytes` field (`TensorProto(..., float_data = data)`)"
        };
        placed.extend(wrong.iter().map(|(s, _)| *s));
        for (span, field) in wrong {
            self.err_help(
                at.file,
                span,
                format!("`data` cannot go to field '{field}'"),
                help,
            );
        }
        let mut stray = Vec::new();
        rule.walk(&mut |x| {
            if is_data(x) && !placed.contains(&x.span) {
                stray.push(x.span);
            }
        });
        for span in stray {
            self.err_help(
                at.file,
                span,
                "`data` is the value of a message field in a protobuf write rule",
                help,
            );
        }
    }

    fn pattern(&mut self, at: At<'a>, p: &StrLit) {
        let mut depth = 0;
        for ch in p.value.chars() {
            match ch {
                '{' if depth == 0 => depth = 1,
                '}' if depth == 1 => depth = 0,
                '{' | '}' => {
                    depth = 2;
                    break;
                }
                _ => {}
            }
        }
        if depth != 0 {
            self.err(at.file, p.span, "unbalanced `{` `}` in an entry pattern");
            return;
        }
        let caps = pattern_captures(&p.value);
        for (i, c) in caps.iter().enumerate() {
            let ok = c
                .chars()
                .next()
                .is_some_and(|x| x.is_ascii_alphabetic() || x == '_')
                && c.chars().all(|x| x.is_ascii_alphanumeric() || x == '_');
            if !ok {
                self.err(at.file, p.span, format!("invalid capture name '{{{c}}}'"));
            }
            if caps[..i].contains(c) {
                self.err(at.file, p.span, format!("capture '{{{c}}}' appears twice"));
            }
        }
        if p.value.contains("}{") {
            self.err(
                at.file,
                p.span,
                "two captures next to each other cannot be told apart",
            );
        }
    }

    fn entry(&mut self, at: At<'a>, e: &'a Entry) {
        if !matches!(at.fmt.engine_kind(), "zip" | "kv" | "") {
            self.err(
                at.file,
                e.name.span,
                format!(
                    "entries belong to container engines (zip, kv), not '{}'",
                    at.fmt.engine_kind()
                ),
            );
        }
        self.pattern(at, &e.pattern);
        let mut seen: HashMap<&str, Span> = HashMap::new();
        for p in &e.props {
            let n = p.name.name.as_str();
            if !ENTRY_PROPS.contains(&n) {
                self.err_help(
                    at.file,
                    p.name.span,
                    format!("unknown entry property '{n}'"),
                    format!("entry properties: {}", ENTRY_PROPS.join(", ")),
                );
                continue;
            }
            if let Some(&prev) = seen.get(n) {
                let first = self.where_is(at.file, prev);
                self.err_help(
                    at.file,
                    p.name.span,
                    format!("duplicate entry property '{n}'"),
                    format!("an entry takes one `{n}`; the first is at {first}"),
                );
            } else {
                seen.insert(n, p.name.span);
            }
            let Some(v) = &p.value else {
                if !matches!(n, "repeated" | "optional" | "text" | "strict") {
                    self.err(
                        at.file,
                        p.span,
                        format!("entry property '{n}' needs a value"),
                    );
                }
                continue;
            };
            match n {
                "repeated" | "optional" | "text" => self.err(
                    at.file,
                    v.span,
                    format!("`{n}` is a flag and takes no value"),
                ),
                "layout" => match v.as_path() {
                    Some(path) => self.named_item(at, path, "layout", v.span),
                    None => self.err(at.file, v.span, "`layout` names a layout"),
                },
                "value" => match v.as_path() {
                    Some(path) => {
                        let ty = TypeRef {
                            path: path.to_vec(),
                            args: Vec::new(),
                            span: v.span,
                        };
                        self.user_type(at, &ty, &["message", "dict", "layout"]);
                    }
                    None => self.err(at.file, v.span, "`value` names a message, dict or layout"),
                },
                "codec" => match &v.kind {
                    ExprKind::Call { callee, args } if callee.len() == 1 => {
                        self.codec(at, &callee[0], args)
                    }
                    ExprKind::Path(p) if p.len() == 1 => self.codec(at, &p[0], &[]),
                    _ => self.err(at.file, v.span, "`codec` names a codec: `codec json;`"),
                },
                "compression" => {
                    let items: Vec<&Expr> = match &v.kind {
                        ExprKind::List(l) => l.iter().collect(),
                        _ => vec![v],
                    };
                    if items.is_empty() {
                        self.err(at.file, v.span, "`compression` lists at least one method");
                    }
                    for x in items {
                        if !x
                            .path_name()
                            .is_some_and(|m| matches!(m, "stored" | "deflate"))
                        {
                            self.err_help(
                                at.file,
                                x.span,
                                format!("unknown compression '{x}'"),
                                "compression methods: stored, deflate",
                            );
                        }
                    }
                }
                "preferred" => match &v.kind {
                    ExprKind::Str(s) => {
                        let mut a = pattern_captures(s);
                        let mut b = pattern_captures(&e.pattern.value);
                        a.sort_unstable();
                        b.sort_unstable();
                        if a != b {
                            self.err(
                                at.file,
                                v.span,
                                format!(
                                    "`preferred` names the entry with the captures of `{}`",
                                    e.pattern.value
                                ),
                            );
                        }
                    }
                    _ => self.err(
                        at.file,
                        v.span,
                        "`preferred` is a member name pattern: `\"{prefix}/.data/version\"`",
                    ),
                },
                "write_name" => match &v.kind {
                    ExprKind::Str(s) if !s.contains('{') && !s.contains('}') => {}
                    _ => self.err(
                        at.file,
                        v.span,
                        "`write_name` is a member name without captures: `\"archive/data.pkl\"`",
                    ),
                },
                _ => {}
            }
        }
        if e.has_flag("text") && (e.prop("layout").is_some() || e.prop("value").is_some()) {
            self.err(
                at.file,
                e.name.span,
                "a `text` entry has no `layout` or `value`",
            );
        }
    }

    fn tensor(&mut self, at: At<'a>, t: &'a TensorMap) {
        let mut provided: Vec<&str> = Vec::new();
        let mut include_failed = false;
        let mut assigned: HashMap<&str, Span> = HashMap::new();
        for s in &t.stmts {
            match s {
                TensorStmt::Include(e) => match self.include(at, e) {
                    Some(keys) => provided.extend(keys),
                    None => include_failed = true,
                },
                TensorStmt::Assign { key, value, .. } => {
                    let k = key.name.as_str();
                    self.property(at.file, key, ("tensor", TENSOR_KEYS), &mut assigned);
                    if k == "write" && matches!(at.fmt.engine_kind(), "protobuf" | "kv") {
                        self.proto_data(at, value);
                    }
                }
            }
        }
        let missing: Vec<&str> = ["name", "dtype", "shape", "data"]
            .into_iter()
            .filter(|k| !assigned.contains_key(k) && !provided.contains(k))
            .collect();
        if !missing.is_empty() && !include_failed {
            let sp = Span {
                start: t.span.start,
                end: t.binding.span.end,
            };
            self.err_help(
                at.file,
                sp,
                format!(
                    "tensor mapping does not set {}",
                    missing
                        .iter()
                        .map(|k| format!("'{k}'"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                "a mapping sets name, dtype, shape and data (or takes them with `include`)",
            );
        }
    }

    /// A `value` mapping: kv and `file` formats only; it assigns `name` and `data`, and
    /// `part` and `parts` both or neither (kv), or neither (`file`); their types are the
    /// engine rules', on the IR.
    fn value_map(&mut self, at: At<'a>, t: &'a TensorMap) {
        let head = Span {
            start: t.span.start,
            end: t.binding.span.end,
        };
        let file = at.fmt.engine_kind() == "file";
        if !file && at.fmt.engine_kind() != "kv" {
            self.err_help(
                at.file,
                head,
                "a `value` mapping outside a kv or file format",
                "only key-value databases and `file` formats expose values that are not tensors; map this format's tensors with `tensor from ..`",
            );
            return;
        }
        let mut assigned: HashMap<&str, Span> = HashMap::new();
        for s in &t.stmts {
            let TensorStmt::Assign { key, .. } = s else {
                continue;
            };
            self.property(at.file, key, ("value", VALUE_KEYS), &mut assigned);
        }
        let missing: Vec<String> = ["name", "data"]
            .into_iter()
            .filter(|k| !assigned.contains_key(k))
            .map(|k| format!("'{k}'"))
            .collect();
        if !missing.is_empty() {
            self.err_help(
                at.file,
                head,
                format!("value mapping does not set {}", missing.join(", ")),
                "a value mapping sets the value's name and data",
            );
        }
        if file {
            if let Some(&sp) = assigned.get("part").or(assigned.get("parts")) {
                self.err_help(
                    at.file,
                    sp,
                    "a `file` format's values are whole: `part` and `parts` belong to kv formats",
                    "set the value's `name` and `data` (`data = k.value;`) alone",
                );
            }
            return;
        }
        if let (Some(&sp), None) | (None, Some(&sp)) = (assigned.get("part"), assigned.get("parts"))
        {
            self.err_help(
                at.file,
                sp,
                "a value mapping sets `part` and `parts` together",
                "`part = b.chunk_id; parts = b.num_chunks;`: the record holds part `part` of `parts`",
            );
        }
    }

    /// Checks `include fmt.tensor(x);` and returns the keys it provides.
    fn include(&mut self, at: At<'a>, e: &'a Expr) -> Option<Vec<&'a str>> {
        let ExprKind::Call { callee, args } = &e.kind else {
            self.err_help(
                at.file,
                e.span,
                "`include` takes another format's mapping",
                "`include npy.tensor(m.content);`",
            );
            return None;
        };
        if callee.len() != 2 || callee[1].name != "tensor" || args.len() != 1 {
            self.err_help(
                at.file,
                e.span,
                "`include` takes another format's mapping",
                "`include npy.tensor(m.content);`",
            );
            return None;
        }
        let name = callee[0].name.as_str();
        let fmt = match self.visible_format(at, name) {
            Some(f) => f,
            None => {
                if self.formats.contains_key(name) {
                    self.err_help(
                        at.file,
                        callee[0].span,
                        format!("format '{name}' is not imported"),
                        format!("add `use {name};` to this file"),
                    );
                } else if !self.lenient {
                    self.err_help(
                        at.file,
                        callee[0].span,
                        format!("unknown format '{name}'"),
                        format!("`include {name}.tensor(..)` takes the mapping of format '{name}': load its schema and add `use {name};`"),
                    );
                }
                return None;
            }
        };
        let maps: Vec<&TensorMap> = fmt.tensors().collect();
        if maps.is_empty() {
            self.err(
                at.file,
                callee[0].span,
                format!("format '{name}' has no tensor mapping to include"),
            );
            return None;
        }
        Some(self.mapping_keys(fmt, 0))
    }

    /// The keys a format's mappings set, following includes (a few levels deep).
    fn mapping_keys(&self, fmt: &'a Format, depth: usize) -> Vec<&'a str> {
        let mut keys = Vec::new();
        for t in fmt.tensors() {
            for s in &t.stmts {
                match s {
                    TensorStmt::Assign { key, .. } => keys.push(key.name.as_str()),
                    TensorStmt::Include(e) if depth < 8 => {
                        if let ExprKind::Call { callee, .. } = &e.kind {
                            if let Some(&(_, f)) = self.formats.get(callee[0].name.as_str()) {
                                keys.extend(self.mapping_keys(f, depth + 1));
                            }
                        }
                    }
                    TensorStmt::Include(_) => {}
                }
            }
        }
        keys
    }
}

/// `a dict, layout or message` for item kinds.
fn one_of(kinds: &[&str]) -> String {
    match kinds {
        [] => String::new(),
        [one] => format!("a {one}"),
        [init @ .., last] => format!("a {} or {last}", init.join(", ")),
    }
}

/// True when `rest` names a message or enum nested in `m` (empty: `m` itself).
fn nested_type(m: &Message, rest: &[Ident]) -> bool {
    match rest {
        [] => true,
        [one] => {
            m.enums.iter().any(|e| e.name.name == one.name)
                || m.messages.iter().any(|x| x.name.name == one.name)
        }
        [first, more @ ..] => m
            .messages
            .iter()
            .find(|x| x.name.name == first.name)
            .is_some_and(|x| nested_type(x, more)),
    }
}

/// True when `path` names a message or enum declared inside `m`.
fn nested_type_in(m: &Message, path: &[Ident]) -> bool {
    !path.is_empty() && nested_type(m, path)
}

fn modifier_span(m: &Modifier) -> Span {
    match m {
        Modifier::Check(e)
        | Modifier::Write(e)
        | Modifier::Size(e)
        | Modifier::Align(e)
        | Modifier::At(e)
        | Modifier::Repeat(Repeat::Count(e)) => e.span,
        Modifier::Codec { span, .. } | Modifier::Pad { span, .. } => *span,
        Modifier::Rest(s) | Modifier::Repeat(Repeat::UntilEof(s)) => *s,
    }
}
