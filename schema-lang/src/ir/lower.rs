//! Lowering: AST → IR. Names are bound to ids, types resolved, expressions typed once.
//!
//! This is the one place where expressions are resolved and typed: an unknown name, a
//! member a value does not have, an operand of the wrong type, a builtin called with the
//! wrong arguments are reported here, at their span, with the checker's other findings.
//! Lowering never fails: what it cannot resolve becomes [`Type::Error`] /
//! [`ExprKind::Error`] and a diagnostic, and an expression of type `Error` raises no further
//! diagnostic (one mistake, one error), so a schema the checker accepts lowers completely.

use std::collections::HashMap;

use super::expr::{
    Arg, Builtin, Const, Expr, ExprKind, IndexKind, Member, Order, TensorKey, WriteVar,
};
use super::ty::{ByteOrder, Dtype, FloatTy, IntTy, Type};
use super::*;
use crate::ast::{self, BinaryOp, Ident, Item, Span, UnaryOp};
use crate::ast_impl::pattern_captures;
use crate::diag::Diagnostic;

mod pickle_write;

/// Lowers `files` (the whole schema) into the IR, with the diagnostics of whatever could
/// not be resolved.
pub(crate) fn lower(files: &[ast::SchemaFile]) -> (Ir, Vec<Diagnostic>) {
    lower_with(files, false)
}

/// [`lower()`]; `lenient`: some files of the schema could not be parsed, so a name that
/// may come from one of them (a qualified path, another format's mapping) is not reported.
pub(crate) fn lower_with(files: &[ast::SchemaFile], lenient: bool) -> (Ir, Vec<Diagnostic>) {
    let mut l = Lower {
        files,
        lenient,
        ir: Ir::default(),
        diags: Vec::new(),
        fmts: Vec::new(),
        by_name: HashMap::new(),
        items: Vec::new(),
        item_ids: Vec::new(),
        cur: FormatId(0),
    };
    l.declare();
    l.types();
    l.sources();
    l.bodies();
    (l.ir, l.diags)
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum ItemRef {
    Table(TableId),
    Dict(DictId),
    Layout(LayoutId),
    Message(MessageId),
    Enum(EnumId),
    Pickle(PickleId),
    Entry(EntryId),
}

/// Where an expression is evaluated, for name resolution.
#[derive(Clone)]
enum Scope {
    /// A modifier of field `current` of a layout. `read` names a read-side modifier
    /// (`size`, `check`, ...), which reads only earlier fields (`allow_self`: and the field
    /// itself, for `check`); `None` for write-side expressions, which read any field.
    Layout {
        layout: LayoutId,
        current: usize,
        read: Option<&'static str>,
        allow_self: bool,
    },
    /// An entry property.
    Entry,
    /// A mapping's `from`.
    Source,
    /// A mapping's statements and filter.
    Mapping(MappingId),
    /// A protobuf write rule (message options, a protobuf or kv mapping's `write`).
    ProtoWrite { tensor: bool },
    /// A mapping's `write_order`: the tensor written (`name`, `dtype`, `shape`, `nbytes`),
    /// tables, dtype names and the builtins.
    Order,
    /// A pickle write rule (a pickle entry's `write`, a mapping's `write`), lowered by
    /// [`Lower::pickle_write`].
    PickleWrite {
        tensor: bool,
        pickle: Option<PickleId>,
    },
}

impl Scope {
    /// The value of the tensor written that `name` names in a write rule over a tensor
    /// (`write_order` reads only its name, dtype, shape and byte size).
    fn write_var(&self, name: &str) -> Option<WriteVar> {
        match self {
            Scope::ProtoWrite { tensor: true } => WriteVar::proto(name),
            Scope::Order => WriteVar::proto(name).filter(|v| {
                matches!(
                    v,
                    WriteVar::Name | WriteVar::Dtype | WriteVar::Shape | WriteVar::Nbytes
                )
            }),
            Scope::PickleWrite { tensor: true, .. } => WriteVar::pickle(name),
            _ => None,
        }
    }
}

struct Lower<'a> {
    files: &'a [ast::SchemaFile],
    /// Some files could not be parsed (see [`lower_with`]).
    lenient: bool,
    ir: Ir,
    diags: Vec<Diagnostic>,
    /// Per format: its file and declaration.
    fmts: Vec<(usize, &'a ast::Format)>,
    /// Format identifier → first definition.
    by_name: HashMap<&'a str, FormatId>,
    /// Per format: item name → item (the first of a name).
    items: Vec<HashMap<&'a str, ItemRef>>,
    /// Per format: the id of each item, aligned with the AST's items.
    item_ids: Vec<Vec<Option<ItemRef>>>,
    /// The format being lowered.
    cur: FormatId,
}

fn err_expr(span: Span) -> Expr {
    Expr {
        kind: ExprKind::Error,
        ty: Type::Error,
        span,
    }
}

fn mk(kind: ExprKind, ty: Type, span: Span) -> Expr {
    Expr { kind, ty, span }
}

/// What a modifier, an operator or a builtin argument needs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Want {
    Int,
    Bool,
    Str,
}

impl Want {
    fn word(self) -> &'static str {
        match self {
            Want::Int => "an integer",
            Want::Bool => "a boolean",
            Want::Str => "a string",
        }
    }
}

/// How diagnostics name the kind of value of type `t`, for the rules over integers, truth
/// values, text, bytes and records; `None` for every other type (lists, dtypes, pickled
/// values, values that could not be typed), which those rules leave to the engines.
fn kind_word(t: &Type) -> Option<&'static str> {
    Some(match t {
        Type::Int(_) => "an integer",
        Type::Bool => "a boolean",
        Type::Str => "a string",
        Type::Bytes | Type::Payload => "bytes",
        Type::Layout(_) | Type::Dict(_) | Type::Message(_) | Type::Entry(_) => "a record",
        _ => return None,
    })
}

/// The builtin functions as the help of an unknown function lists them.
const FUNCTIONS: &str = "len, size, align, latin1, itemsize, slice, has, str, index_of, digits, \
                         first, last, elements, external, widen, tag, lookup, product, sum, reverse, \
                         write_align";

/// The names, quoted and comma separated, for help lines that list what exists.
fn listed<'n>(names: impl IntoIterator<Item = &'n str>) -> String {
    let v: Vec<String> = names.into_iter().map(|n| format!("'{n}'")).collect();
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}

fn dotted(p: &[Ident]) -> String {
    p.iter()
        .map(|i| i.name.as_str())
        .collect::<Vec<_>>()
        .join(".")
}

impl<'a> Lower<'a> {
    // -----------------------------------------------------------------------------------
    // Diagnostics and lookups

    fn gap(&mut self, span: Span, msg: impl Into<String>, help: impl Into<String>) {
        let file = self.fmts[self.cur.index()].0;
        let f = &self.files[file];
        self.diags
            .push(Diagnostic::new(&f.path, &f.source, span, msg).with_help(help));
    }

    /// A diagnostic without a help line.
    fn error(&mut self, span: Span, msg: impl Into<String>) {
        let file = self.fmts[self.cur.index()].0;
        let f = &self.files[file];
        self.diags
            .push(Diagnostic::new(&f.path, &f.source, span, msg));
    }

    /// Lowers `e` and reports when its type is known and not `want`.
    fn want(&mut self, sc: &Scope, e: &ast::Expr, want: Want, what: &str) -> Expr {
        let x = self.expr(sc, e);
        self.need(&x, want, what);
        x
    }

    /// Reports when the type of `x` is known and not `want`.
    fn need(&mut self, x: &Expr, want: Want, what: &str) {
        if let Some(got) = kind_word(&x.ty).filter(|&g| g != want.word()) {
            let need = match want {
                Want::Bool => "a condition (a boolean)",
                w => w.word(),
            };
            self.error(x.span, format!("{what} needs {need}, but this is {got}"));
        }
    }

    fn ast_fmt(&self) -> &'a ast::Format {
        self.fmts[self.cur.index()].1
    }

    fn item(&self, fmt: FormatId, name: &str) -> Option<ItemRef> {
        self.items[fmt.index()].get(name).copied()
    }

    /// The format `name` as visible from the current format's file.
    fn visible(&self, name: &str) -> Option<FormatId> {
        let file = self.fmts[self.cur.index()].0;
        let f = &self.files[file];
        if f.formats.iter().any(|x| x.name.name == name) {
            return self
                .fmts
                .iter()
                .position(|(fi, x)| *fi == file && x.name.name == name)
                .map(|i| FormatId(i as u32));
        }
        if f.uses.iter().any(|u| u.name == name) {
            return self.by_name.get(name).copied();
        }
        None
    }

    /// Splits `fmt.Rest...` like the checker: a path starting with a visible format that
    /// is not an item of the current one names that format's item.
    fn split<'p>(&self, path: &'p [Ident]) -> (FormatId, &'p [Ident]) {
        if path.len() >= 2 && self.item(self.cur, &path[0].name).is_none() {
            if let Some(f) = self.visible(&path[0].name) {
                return (f, &path[1..]);
            }
        }
        (self.cur, path)
    }

    /// A message or enum nested in `m` by `rest`.
    fn nested(&self, m: MessageId, rest: &[Ident]) -> Option<ItemRef> {
        let (first, more) = match rest.split_first() {
            None => return Some(ItemRef::Message(m)),
            Some(x) => x,
        };
        let msg = self.ir.message(m);
        if let Some(&x) = msg
            .messages
            .iter()
            .find(|&&x| self.ir.message(x).name == first.name)
        {
            return self.nested(x, more);
        }
        if more.is_empty() {
            if let Some(&e) = msg
                .enums
                .iter()
                .find(|&&e| self.ir.enum_(e).name == first.name)
            {
                return Some(ItemRef::Enum(e));
            }
        }
        None
    }

    // -----------------------------------------------------------------------------------
    // Pass 1: ids for every item

    fn declare(&mut self) {
        self.ir.sources = self.files.iter().map(|f| f.source.clone()).collect();
        for (fi, file) in self.files.iter().enumerate() {
            for fmt in &file.formats {
                let id = FormatId(self.fmts.len() as u32);
                self.fmts.push((fi, fmt));
                self.by_name.entry(fmt.name.name.as_str()).or_insert(id);
                self.ir.formats.push(Format {
                    docs: fmt.docs.clone(),
                    name: fmt.name.name.clone(),
                    public_name: fmt.public_name().to_string(),
                    file: fi,
                    uses: Vec::new(),
                    engine: Engine::Error,
                    extensions: fmt.extensions().map(|s| s.value.clone()).collect(),
                    read_only: fmt.read_only().is_some(),
                    detects: Vec::new(),
                    tables: Vec::new(),
                    dicts: Vec::new(),
                    layouts: Vec::new(),
                    messages: Vec::new(),
                    enums: Vec::new(),
                    pickles: Vec::new(),
                    entries: Vec::new(),
                    mappings: Vec::new(),
                    values: Vec::new(),
                    span: fmt.span,
                    name_span: fmt.name.span,
                });
            }
        }
        for i in 0..self.fmts.len() {
            let (fi, fmt) = self.fmts[i];
            let id = FormatId(i as u32);
            self.ir.formats[i].uses = self.files[fi]
                .uses
                .iter()
                .filter_map(|u| self.by_name.get(u.name.as_str()).copied())
                .collect();
            let mut names: HashMap<&'a str, ItemRef> = HashMap::new();
            let mut ids = Vec::new();
            for item in &fmt.items {
                let r = match item {
                    Item::Table(t) => {
                        let tid = TableId(self.ir.tables.len() as u32);
                        self.ir.tables.push(Table {
                            docs: t.docs.clone(),
                            format: id,
                            name: t.name.name.clone(),
                            key: t.key_kind,
                            rows: Vec::new(),
                            span: t.span,
                        });
                        self.ir.formats[i].tables.push(tid);
                        ItemRef::Table(tid)
                    }
                    Item::Dict(d) => {
                        let did = DictId(self.ir.dicts.len() as u32);
                        self.ir.dicts.push(Dict {
                            docs: d.docs.clone(),
                            format: id,
                            name: d.name.name.clone(),
                            keys: Vec::new(),
                            span: d.span,
                        });
                        self.ir.formats[i].dicts.push(did);
                        ItemRef::Dict(did)
                    }
                    Item::Layout(l) => {
                        let lid = LayoutId(self.ir.layouts.len() as u32);
                        self.ir.layouts.push(Layout {
                            docs: l.docs.clone(),
                            format: id,
                            name: l.name.name.clone(),
                            endian: l.endian.into(),
                            fields: Vec::new(),
                            span: l.span,
                        });
                        self.ir.formats[i].layouts.push(lid);
                        ItemRef::Layout(lid)
                    }
                    Item::Message(m) => {
                        let mid = self.declare_message(id, m, None, "");
                        self.ir.formats[i].messages.push(mid);
                        ItemRef::Message(mid)
                    }
                    Item::Enum(e) => {
                        let eid = self.declare_enum(id, e, None);
                        self.ir.formats[i].enums.push(eid);
                        ItemRef::Enum(eid)
                    }
                    Item::Pickle(p) => {
                        let pid = PickleId(self.ir.pickles.len() as u32);
                        self.ir.pickles.push(lower_pickle(id, p));
                        self.ir.formats[i].pickles.push(pid);
                        ItemRef::Pickle(pid)
                    }
                    Item::Entry(e) => {
                        let eid = EntryId(self.ir.entries.len() as u32);
                        self.ir.entries.push(Entry {
                            docs: e.docs.clone(),
                            format: id,
                            name: e.name.name.clone(),
                            pattern: pattern(&e.pattern.value),
                            repeated: e.has_flag("repeated"),
                            optional: e.has_flag("optional"),
                            strict: e.has_flag("strict"),
                            content: Content::Bytes,
                            content_ty: Type::Payload,
                            compression: Vec::new(),
                            align: None,
                            check: None,
                            write: None,
                            write_name: None,
                            preferred: None,
                            split: None,
                            prop_docs: e
                                .props
                                .iter()
                                .filter(|p| !p.docs.is_empty())
                                .map(|p| (p.name.name.clone(), p.docs.clone()))
                                .collect(),
                            span: e.span,
                        });
                        self.ir.formats[i].entries.push(eid);
                        ItemRef::Entry(eid)
                    }
                    Item::Tensor(t) | Item::Value(t) => {
                        let mid = MappingId(self.ir.mappings.len() as u32);
                        self.ir.mappings.push(Mapping {
                            docs: t.docs.clone(),
                            format: id,
                            source: err_expr(t.source.span),
                            binding: t.binding.name.clone(),
                            binding_ty: Type::Error,
                            filter: None,
                            stmts: Vec::new(),
                            write: None,
                            write_order: None,
                            span: t.span,
                        });
                        if matches!(item, Item::Value(_)) {
                            self.ir.formats[i].values.push(mid);
                        } else {
                            self.ir.formats[i].mappings.push(mid);
                        }
                        ids.push(None);
                        continue;
                    }
                    Item::Engine(_) | Item::Extensions(_) | Item::ReadOnly(_) | Item::Detect(_) => {
                        ids.push(None);
                        continue;
                    }
                };
                ids.push(Some(r));
                if let Some(n) = item.name() {
                    names.entry(n.name.as_str()).or_insert(r);
                }
            }
            self.items.push(names);
            self.item_ids.push(ids);
        }
    }

    fn declare_message(
        &mut self,
        fmt: FormatId,
        m: &ast::Message,
        parent: Option<MessageId>,
        prefix: &str,
    ) -> MessageId {
        let id = MessageId(self.ir.messages.len() as u32);
        let path = if prefix.is_empty() {
            m.name.name.clone()
        } else {
            format!("{prefix}.{}", m.name.name)
        };
        self.ir.messages.push(Message {
            docs: m.docs.clone(),
            format: fmt,
            name: m.name.name.clone(),
            path: path.clone(),
            parent,
            fields: Vec::new(),
            messages: Vec::new(),
            enums: Vec::new(),
            span: m.span,
        });
        for x in &m.messages {
            let c = self.declare_message(fmt, x, Some(id), &path);
            self.ir.messages[id.index()].messages.push(c);
        }
        for e in &m.enums {
            let c = self.declare_enum(fmt, e, Some(id));
            self.ir.messages[id.index()].enums.push(c);
        }
        id
    }

    fn declare_enum(
        &mut self,
        fmt: FormatId,
        e: &ast::EnumDecl,
        parent: Option<MessageId>,
    ) -> EnumId {
        let id = EnumId(self.ir.enums.len() as u32);
        self.ir.enums.push(Enum {
            docs: e.docs.clone(),
            format: fmt,
            name: e.name.name.clone(),
            parent,
            values: e.values.iter().map(|(n, v)| (n.name.clone(), *v)).collect(),
            span: e.span,
        });
        id
    }

    // -----------------------------------------------------------------------------------
    // Pass 2: types of declarations

    fn types(&mut self) {
        for i in 0..self.fmts.len() {
            self.cur = FormatId(i as u32);
            let fmt = self.ast_fmt();
            self.ir.formats[i].engine = self.engine(fmt);
            let pickles = self.ir.formats[i].pickles.clone();
            let pickle_named = |n: &str| {
                pickles
                    .iter()
                    .copied()
                    .find(|&p| self.ir.pickle(p).name == n)
            };
            self.ir.formats[i].detects =
                fmt.detects()
                    .filter_map(|d| match d {
                        ast::Detect::Magic { bytes, at, .. } => Some(Detect::Magic {
                            bytes: bytes.value.clone(),
                            at: *at,
                            span: bytes.span,
                        }),
                        ast::Detect::MagicAny {
                            alternatives, at, ..
                        } => Some(Detect::MagicAny {
                            alternatives: alternatives
                                .iter()
                                .map(|b| (b.value.clone(), b.span))
                                .collect(),
                            at: *at,
                        }),
                        // The checker keeps the name to a declaration of the format.
                        ast::Detect::Pickle { pickle, window, .. } => pickle_named(&pickle.name)
                            .map(|pickle| Detect::Pickle {
                                pickle,
                                window: *window,
                            }),
                        ast::Detect::Entries {
                            all,
                            none,
                            pattern: p,
                            ..
                        } => Some(Detect::Entries {
                            mode: if *none {
                                EntriesMode::None
                            } else if *all {
                                EntriesMode::All
                            } else {
                                EntriesMode::Any
                            },
                            pattern: pattern(&p.value),
                        }),
                    })
                    .collect();
            let ids = self.item_ids[i].clone();
            for (item, id) in fmt.items.iter().zip(ids) {
                match (item, id) {
                    (Item::Table(t), Some(ItemRef::Table(id))) => self.table(id, t),
                    (Item::Dict(d), Some(ItemRef::Dict(id))) => self.dict(id, d),
                    (Item::Layout(l), Some(ItemRef::Layout(id))) => self.layout_types(id, l),
                    (Item::Message(m), Some(ItemRef::Message(id))) => self.message_types(id, m),
                    (Item::Entry(e), Some(ItemRef::Entry(id))) => self.entry_types(id, e),
                    _ => {}
                }
            }
        }
    }

    fn engine(&mut self, fmt: &'a ast::Format) -> Engine {
        let Some(e) = fmt.engine() else {
            return Engine::Error;
        };
        match e.kind.name.as_str() {
            "file" => Engine::File,
            "zip" => Engine::Zip,
            "protobuf" => {
                let root = crate::find_arg(&e.args, "root")
                    .and_then(|a| a.value.path_name())
                    .and_then(|n| self.item(self.cur, n));
                match root {
                    Some(ItemRef::Message(root)) => Engine::Protobuf { root },
                    _ => Engine::Error,
                }
            }
            "kv" => {
                let backend =
                    match crate::find_arg(&e.args, "backend").and_then(|a| a.value.path_name()) {
                        Some("records") => KvBackend::Records,
                        Some("lmdb") => KvBackend::Lmdb,
                        Some("leveldb") => KvBackend::Leveldb,
                        _ => return Engine::Error,
                    };
                let schema = match crate::find_arg(&e.args, "schema") {
                    None => None,
                    Some(a) => match a.value.path_name().and_then(|n| self.visible(n)) {
                        Some(f) => Some(f),
                        None => return Engine::Error,
                    },
                };
                let mut open = KvOpen::default();
                for a in &e.args {
                    let name = a.name.as_ref().map_or("", |n| n.name.as_str());
                    if let Some(slot) = open.arg_mut(name) {
                        *slot = a.value.as_int().and_then(|n| u64::try_from(n).ok());
                    }
                }
                Engine::Kv {
                    backend,
                    schema,
                    open,
                }
            }
            _ => Engine::Error,
        }
    }

    fn table(&mut self, id: TableId, t: &ast::Table) {
        let rows = t
            .rows
            .iter()
            .filter_map(|r| {
                Some(TableRow {
                    key: r.key.clone(),
                    dtype: Dtype::from_name(&r.dtype.name)?,
                    endian: r.endian.map(ByteOrder::from),
                })
            })
            .collect();
        self.ir.tables[id.index()].rows = rows;
    }

    fn dict(&mut self, id: DictId, d: &ast::Dict) {
        let keys = d
            .fields
            .iter()
            .map(|k| DictKey {
                docs: k.docs.clone(),
                key: k.key.clone(),
                optional: k.optional,
                rest: !k.quoted && k.key == "rest",
                ty: self.data_type(&k.ty, None),
                span: k.span,
            })
            .collect();
        self.ir.dicts[id.index()].keys = keys;
    }

    /// A layout-field or dict-key type; `endian` is the layout's byte order.
    fn data_type(&mut self, t: &ast::TypeRef, endian: Option<ByteOrder>) -> Type {
        if t.path.len() == 1 {
            let n = t.path[0].name.as_str();
            if let Some(&(_, w, signed)) = crate::INT_TYPES.iter().find(|x| x.0 == n) {
                let mut it = IntTy::sized(w as u8, signed);
                it.endian = endian;
                return Type::Int(it);
            }
            let arg = |l: &mut Self, i: usize| match t.args.get(i) {
                Some(a) => l.data_type(a, endian),
                None => Type::Error,
            };
            match n {
                "f32" | "f64" => {
                    return Type::Float(FloatTy {
                        bytes: if n == "f32" { 4 } else { 8 },
                        endian,
                    })
                }
                "bool" => return Type::Bool,
                "str" => return Type::Str,
                "bytes" => return Type::Bytes,
                "payload" => return Type::Payload,
                "tuple" => return Type::Tuple(Box::new(arg(self, 0))),
                "list" => return Type::List(Box::new(arg(self, 0))),
                "map" => return Type::Map(Box::new(arg(self, 0)), Box::new(arg(self, 1))),
                _ => {}
            }
        }
        let (fmt, rest) = self.split(&t.path);
        match self.item(fmt, &rest[0].name) {
            Some(ItemRef::Dict(d)) if rest.len() == 1 => Type::Dict(d),
            Some(ItemRef::Layout(l)) if rest.len() == 1 => Type::Layout(l),
            Some(ItemRef::Enum(e)) if rest.len() == 1 => Type::Enum(e),
            Some(ItemRef::Message(m)) => match self.nested(m, &rest[1..]) {
                Some(ItemRef::Message(m)) => Type::Message(m),
                Some(ItemRef::Enum(e)) => Type::Enum(e),
                _ => Type::Error,
            },
            _ => Type::Error,
        }
    }

    fn layout_types(&mut self, id: LayoutId, l: &ast::Layout) {
        let endian: ByteOrder = l.endian.into();
        let mut fields = Vec::new();
        for f in &l.fields {
            let codec = f.codec().and_then(|(n, args)| self.codec_decl(n, args));
            let (kind, item_ty) = match &f.ty {
                ast::FieldType::Magic(b) => (FieldKind::Magic(b.value.clone()), Type::Bytes),
                ast::FieldType::Named(t) => {
                    let mut ty = self.data_type(t, Some(endian));
                    if matches!(ty, Type::Bytes | Type::Payload) {
                        match &codec {
                            Some(Codec::Pickle(p)) => ty = Type::Pickled(*p),
                            Some(Codec::Protobuf(m)) => ty = Type::Message(*m),
                            _ => {}
                        }
                    }
                    if ty == Type::Error {
                        self.gap(
                            t.span,
                            format!("cannot resolve the type '{t}' of field '{}'", f.name.name),
                            "name a builtin type, or a dict, layout, message or enum",
                        );
                    }
                    (FieldKind::Value, ty)
                }
                ast::FieldType::Cond {
                    then,
                    otherwise,
                    span,
                    ..
                } => {
                    let a = self.data_type(then, Some(endian));
                    let b = self.data_type(otherwise, Some(endian));
                    match (a, b) {
                        (Type::Int(a), Type::Int(b)) => {
                            let wide = IntTy {
                                bytes: a.bytes.max(b.bytes),
                                signed: a.signed || b.signed,
                                endian: Some(endian),
                            };
                            (
                                FieldKind::Cond {
                                    cond: err_expr(*span),
                                    then: a,
                                    otherwise: b,
                                },
                                Type::Int(wide),
                            )
                        }
                        _ => (FieldKind::Value, Type::Error),
                    }
                }
                ast::FieldType::Match { cases, .. } => {
                    let cases = cases
                        .iter()
                        .map(|c| MatchCase {
                            tag: c.tag,
                            ty: self.data_type(&c.ty, Some(endian)),
                            span: c.span,
                        })
                        .collect();
                    (
                        FieldKind::Match {
                            tag: err_expr(f.span),
                            cases,
                        },
                        Type::Union(id, FieldId(fields.len() as u32)),
                    )
                }
            };
            let repeat = f.repeat().map(|r| match r {
                ast::Repeat::UntilEof(_) => Repeat::UntilEof,
                ast::Repeat::Count(e) => Repeat::Count(err_expr(e.span)),
            });
            let ty = if repeat.is_some() {
                Type::List(Box::new(item_ty.clone()))
            } else {
                item_ty.clone()
            };
            fields.push(Field {
                docs: f.docs.clone(),
                name: f.name.name.clone(),
                kind,
                item_ty,
                ty,
                checks: Vec::new(),
                write: None,
                implied: f.implied_constant().and_then(const_of),
                size: None,
                rest: f.is_rest(),
                repeat,
                align: None,
                at: None,
                codec,
                pad: None,
                span: f.span,
            });
        }
        self.ir.layouts[id.index()].fields = fields;
    }

    /// A codec's declaration part (its expressions come later).
    fn codec_decl(&mut self, name: &Ident, args: &[ast::Arg]) -> Option<Codec> {
        match name.name.as_str() {
            "json" => Some(Codec::Json {
                unique_keys: args.iter().any(|a| {
                    a.name.as_ref().is_some_and(|n| n.name == "unique_keys")
                        && matches!(a.value.kind, ast::ExprKind::Bool(true))
                }),
            }),
            "pydict" => Some(Codec::PyDict {
                encoding: None,
                spare: None,
                trailing_comma: args.iter().any(|a| {
                    a.name.as_ref().is_some_and(|n| n.name == "trailing_comma")
                        && matches!(a.value.kind, ast::ExprKind::Bool(true))
                }),
            }),
            "pickle" | "protobuf" => {
                let path = args.first()?.value.as_path()?;
                let (fmt, rest) = self.split(path);
                let r = self.item(fmt, &rest[0].name)?;
                match (name.name.as_str(), r) {
                    ("pickle", ItemRef::Pickle(p)) if rest.len() == 1 => Some(Codec::Pickle(p)),
                    ("protobuf", ItemRef::Message(m)) => match self.nested(m, &rest[1..]) {
                        Some(ItemRef::Message(m)) => Some(Codec::Protobuf(m)),
                        _ => None,
                    },
                    _ => None,
                }
            }
            _ => None,
        }
    }

    fn message_types(&mut self, id: MessageId, m: &ast::Message) {
        let mut fields = Vec::new();
        for f in &m.fields {
            let proto = self.proto_type(id, &f.ty);
            let one = match proto {
                Some(ProtoType::Scalar(s)) => s.ty(),
                Some(ProtoType::Message(m)) => Type::Message(m),
                Some(ProtoType::Enum(e)) => Type::Enum(e),
                None => {
                    self.gap(
                        f.ty.span,
                        format!(
                            "cannot resolve the type '{}' of field '{}'",
                            f.ty, f.name.name
                        ),
                        "name a protobuf scalar, or a message or enum in scope",
                    );
                    Type::Error
                }
            };
            let ty = if f.label == ast::Label::Repeated {
                Type::List(Box::new(one))
            } else {
                one
            };
            fields.push(MessageField {
                docs: f.docs.clone(),
                name: f.name.name.clone(),
                label: f.label,
                proto: proto.unwrap_or(ProtoType::Scalar(ProtoScalar::Bytes)),
                ty,
                tag: f.tag,
                packed: f.is_packed(),
                default: None,
                write: None,
                span: f.span,
            });
        }
        self.ir.messages[id.index()].fields = fields;
        let nested: Vec<MessageId> = self.ir.message(id).messages.clone();
        for (x, mid) in m.messages.iter().zip(nested) {
            self.message_types(mid, x);
        }
    }

    /// A message field's type, looked up from the innermost message outwards, then the
    /// format's top level, then `other.Msg` of a visible format.
    fn proto_type(&self, within: MessageId, t: &ast::TypeRef) -> Option<ProtoType> {
        if t.path.len() == 1 {
            if let Some(s) = ProtoScalar::from_name(&t.path[0].name) {
                return Some(ProtoType::Scalar(s));
            }
        }
        let as_proto = |r: ItemRef| match r {
            ItemRef::Message(m) => Some(ProtoType::Message(m)),
            ItemRef::Enum(e) => Some(ProtoType::Enum(e)),
            _ => None,
        };
        let mut scope = Some(within);
        while let Some(m) = scope {
            if let Some(r) = self.nested(m, &t.path).filter(|_| !t.path.is_empty()) {
                if r != ItemRef::Message(m) {
                    return as_proto(r);
                }
            }
            scope = self.ir.message(m).parent;
        }
        let top = |fmt: FormatId, p: &[Ident]| match self.item(fmt, &p[0].name)? {
            ItemRef::Message(m) => self.nested(m, &p[1..]).and_then(as_proto),
            ItemRef::Enum(e) if p.len() == 1 => Some(ProtoType::Enum(e)),
            _ => None,
        };
        if let Some(x) = top(self.cur, &t.path) {
            return Some(x);
        }
        if t.path.len() >= 2 {
            if let Some(f) = self.visible(&t.path[0].name) {
                return top(f, &t.path[1..]);
            }
        }
        None
    }

    fn entry_id(&self, name: &str) -> Option<EntryId> {
        match self.item(self.cur, name) {
            Some(ItemRef::Entry(e)) => Some(e),
            _ => None,
        }
    }

    fn entry_types(&mut self, id: EntryId, e: &'a ast::Entry) {
        let mut content = Content::Bytes;
        let mut content_ty = Type::Payload;
        if e.has_flag("text") {
            content = Content::Text;
            content_ty = Type::Str;
        }
        if let Some(v) = e.prop_value("layout").and_then(|v| v.as_path()) {
            let (fmt, rest) = self.split(v);
            if let (Some(ItemRef::Layout(l)), 1) = (self.item(fmt, &rest[0].name), rest.len()) {
                content = Content::Layout(l);
                content_ty = Type::Layout(l);
            }
        }
        if let Some(v) = e.prop_value("value") {
            let t = ast::TypeRef {
                path: v.as_path().map(|p| p.to_vec()).unwrap_or_default(),
                args: Vec::new(),
                span: v.span,
            };
            let ty = if t.path.is_empty() {
                Type::Error
            } else {
                self.data_type(&t, None)
            };
            content_ty = ty.clone();
            content = Content::Value(ty);
        }
        if let Some(v) = e.prop_value("codec") {
            let c = match &v.kind {
                ast::ExprKind::Call { callee, args } if callee.len() == 1 => {
                    self.codec_decl(&callee[0], args)
                }
                ast::ExprKind::Path(p) if p.len() == 1 => self.codec_decl(&p[0], &[]),
                _ => None,
            };
            if let Some(c) = c {
                content_ty = match &c {
                    Codec::Pickle(p) => Type::Pickled(*p),
                    Codec::Protobuf(m) => Type::Message(*m),
                    _ => Type::Bytes,
                };
                content = Content::Codec(c);
            }
        }
        let compression = match e.prop_value("compression") {
            None => Vec::new(),
            Some(v) => {
                let items: Vec<&ast::Expr> = match &v.kind {
                    ast::ExprKind::List(l) => l.iter().collect(),
                    _ => vec![v],
                };
                items
                    .iter()
                    .filter_map(|x| match x.path_name() {
                        Some("stored") => Some(Compression::Stored),
                        Some("deflate") => Some(Compression::Deflate),
                        _ => None,
                    })
                    .collect()
            }
        };
        let str_prop = |n: &str| match e.prop_value(n).map(|v| &v.kind) {
            Some(ast::ExprKind::Str(s)) => Some(s.clone()),
            _ => None,
        };
        let en = &mut self.ir.entries[id.index()];
        en.content = content;
        en.content_ty = content_ty;
        en.compression = compression;
        en.write_name = str_prop("write_name");
        en.preferred = str_prop("preferred").map(|s| pattern(&s));
    }

    // -----------------------------------------------------------------------------------
    // Pass 3: mapping sources and bindings

    fn sources(&mut self) {
        for i in 0..self.fmts.len() {
            self.cur = FormatId(i as u32);
            let fmt = self.ast_fmt();
            let maps = fmt.tensors().zip(self.ir.formats[i].mappings.clone());
            let values = fmt.values().zip(self.ir.formats[i].values.clone());
            let all: Vec<(&'a ast::TensorMap, MappingId)> = maps.chain(values).collect();
            for (t, id) in all {
                let source = self.source(&t.source);
                let binding_ty = match &source.ty {
                    Type::List(x) | Type::Tuple(x) => (**x).clone(),
                    Type::Map(k, v) => Type::MapItem(k.clone(), v.clone()),
                    other => other.clone(),
                };
                let m = &mut self.ir.mappings[id.index()];
                m.source = source;
                m.binding_ty = binding_ty;
            }
        }
    }

    /// A mapping's `from`: a layout, an entry, a path into one, or a protobuf document's
    /// `root`.
    fn source(&mut self, e: &ast::Expr) -> Expr {
        let ast::ExprKind::Path(path) = &e.kind else {
            self.gap(
                e.span,
                "a tensor mapping iterates a layout, an entry or a path into one",
                "`tensor from File as f`, `tensor from member as m`, `tensor from \
                 File.header.rest as t`",
            );
            return err_expr(e.span);
        };
        let root = path[0].name.as_str();
        let protobuf = matches!(self.ir.format(self.cur).engine, Engine::Protobuf { .. });
        match self.ast_fmt().item(root) {
            _ if root == "root" && protobuf => {}
            Some(Item::Layout(_) | Item::Entry(_)) => {}
            Some(item) => {
                self.error(
                    path[0].span,
                    format!(
                        "a tensor mapping iterates a layout, an entry or a path into one; \
                         '{root}' is a {}",
                        item.kind_word()
                    ),
                );
                return err_expr(e.span);
            }
            None => {
                let help = if protobuf {
                    "name a layout or entry of this format, or `root` (the protobuf document)"
                } else {
                    "name a layout or an entry of this format"
                };
                self.gap(
                    path[0].span,
                    format!("unknown mapping source '{root}'"),
                    help,
                );
                return err_expr(e.span);
            }
        }
        self.expr(&Scope::Source, e)
    }

    // -----------------------------------------------------------------------------------
    // Pass 4: expressions

    fn bodies(&mut self) {
        for i in 0..self.fmts.len() {
            self.cur = FormatId(i as u32);
            let fmt = self.ast_fmt();
            let ids = self.item_ids[i].clone();
            for (item, id) in fmt.items.iter().zip(ids) {
                match (item, id) {
                    (Item::Layout(l), Some(ItemRef::Layout(id))) => self.layout_exprs(id, l),
                    (Item::Message(m), Some(ItemRef::Message(id))) => self.message_exprs(id, m),
                    (Item::Entry(e), Some(ItemRef::Entry(id))) => self.entry_exprs(id, e),
                    _ => {}
                }
            }
            let maps = fmt.tensors().zip(self.ir.formats[i].mappings.clone());
            let values = fmt.values().zip(self.ir.formats[i].values.clone());
            let all: Vec<(&'a ast::TensorMap, MappingId)> = maps.chain(values).collect();
            for (t, id) in all {
                self.mapping(id, t);
            }
        }
    }

    fn layout_exprs(&mut self, id: LayoutId, l: &ast::Layout) {
        for (i, f) in l.fields.iter().enumerate() {
            let read = |kw: &'static str, allow_self: bool| Scope::Layout {
                layout: id,
                current: i,
                read: Some(kw),
                allow_self,
            };
            // Write rules (and a codec's `spare`, evaluated on write) read any field.
            let any = Scope::Layout {
                layout: id,
                current: i,
                read: None,
                allow_self: true,
            };
            let mut checks = Vec::new();
            let (mut write, mut size, mut align, mut at, mut count, mut pad) =
                (None, None, None, None, None, None);
            let (mut encoding, mut spare) = (None, None);
            for m in &f.modifiers {
                match m {
                    ast::Modifier::Check(e) => {
                        checks.push(self.want(&read("check", true), e, Want::Bool, "`check`"))
                    }
                    ast::Modifier::Write(e) => write = Some(self.expr(&any, e)),
                    ast::Modifier::Size(e) => {
                        size = Some(self.want(&read("size", false), e, Want::Int, "`size`"))
                    }
                    ast::Modifier::Align(e) => {
                        align = Some(self.want(&read("align", false), e, Want::Int, "`align`"))
                    }
                    ast::Modifier::At(e) => {
                        at = Some(self.want(&read("at", false), e, Want::Int, "`at`"))
                    }
                    ast::Modifier::Repeat(ast::Repeat::Count(e)) => {
                        count =
                            Some(self.want(&read("count", false), e, Want::Int, "`repeat count`"))
                    }
                    ast::Modifier::Codec { args, .. } => {
                        for a in args {
                            match a.name.as_ref().map(|n| n.name.as_str()) {
                                Some("encoding") => {
                                    encoding = Some(self.want(
                                        &read("codec", false),
                                        &a.value,
                                        Want::Str,
                                        "the `encoding` argument",
                                    ))
                                }
                                Some("spare") => {
                                    spare = Some(self.want(
                                        &any,
                                        &a.value,
                                        Want::Int,
                                        "the `spare` argument",
                                    ))
                                }
                                _ => {}
                            }
                        }
                    }
                    ast::Modifier::Pad { args, span } => {
                        pad = Some(self.pad(&read("pad", false), args, *span))
                    }
                    _ => {}
                }
            }
            let cond = match &f.ty {
                ast::FieldType::Cond { cond, .. } => Some(self.want(
                    &read("if", false),
                    cond,
                    Want::Bool,
                    "the condition of a conditional type",
                )),
                ast::FieldType::Match { tag, .. } => Some(self.want(
                    &read("match", false),
                    tag,
                    Want::Int,
                    "the tag of a `match`",
                )),
                _ => None,
            };
            let fld = &mut self.ir.layouts[id.index()].fields[i];
            fld.checks = checks;
            fld.write = write;
            fld.size = size;
            fld.align = align;
            fld.at = at;
            fld.pad = pad;
            if let (Some(c), Some(Repeat::Count(slot))) = (count, fld.repeat.as_mut()) {
                *slot = c;
            }
            if let (
                Some(c),
                FieldKind::Cond { cond: slot, .. } | FieldKind::Match { tag: slot, .. },
            ) = (cond, &mut fld.kind)
            {
                *slot = c;
            }
            if let Some(Codec::PyDict {
                encoding: e,
                spare: s,
                ..
            }) = fld.codec.as_mut()
            {
                *e = encoding;
                *s = spare;
            }
        }
    }

    fn pad(&mut self, sc: &Scope, args: &[ast::Arg], span: Span) -> Pad {
        let mut p = Pad {
            align: err_expr(span),
            fill: b' ',
            last: None,
            min: None,
        };
        for a in args {
            let byte = || match &a.value.kind {
                ast::ExprKind::Bytes(b) if b.len() == 1 => Some(b[0]),
                _ => None,
            };
            match a.name.as_ref().map(|n| n.name.as_str()) {
                Some("align") => p.align = self.want(sc, &a.value, Want::Int, "`pad` align"),
                Some("min") => p.min = Some(self.want(sc, &a.value, Want::Int, "`pad` min")),
                Some("fill") => p.fill = byte().unwrap_or(b' '),
                Some("last") => p.last = byte(),
                _ => {}
            }
        }
        p
    }

    fn message_exprs(&mut self, id: MessageId, m: &ast::Message) {
        for (i, f) in m.fields.iter().enumerate() {
            for o in &f.options {
                match o.name.as_ref().map(|n| n.name.as_str()) {
                    Some("default") => {
                        let v = match (&self.ir.message(id).fields[i].proto, o.value.path_name()) {
                            (ProtoType::Enum(en), Some(n)) => {
                                match self.ir.enum_(*en).values.iter().position(|v| v.0 == n) {
                                    Some(k) => mk(
                                        ExprKind::EnumValue(*en, k),
                                        Type::Enum(*en),
                                        o.value.span,
                                    ),
                                    None => {
                                        self.gap(
                                            o.value.span,
                                            format!(
                                                "enum '{}' has no value '{n}'",
                                                self.ir.enum_(*en).name
                                            ),
                                            "the default of an enum field is one of its values",
                                        );
                                        err_expr(o.value.span)
                                    }
                                }
                            }
                            _ => self.expr(&Scope::ProtoWrite { tensor: false }, &o.value),
                        };
                        self.ir.messages[id.index()].fields[i].default = Some(v);
                    }
                    Some("write") => {
                        let v = self.expr(&Scope::ProtoWrite { tensor: false }, &o.value);
                        self.ir.messages[id.index()].fields[i].write = Some(v);
                    }
                    _ => {}
                }
            }
        }
        let nested: Vec<MessageId> = self.ir.message(id).messages.clone();
        for (x, mid) in m.messages.iter().zip(nested) {
            self.message_exprs(mid, x);
        }
    }

    fn entry_exprs(&mut self, id: EntryId, e: &ast::Entry) {
        let pickle = match &self.ir.entry(id).content {
            Content::Codec(Codec::Pickle(p)) => Some(*p),
            _ => None,
        };
        let (mut align, mut check, mut write, mut split) = (None, None, None, None);
        for p in &e.props {
            let Some(v) = &p.value else { continue };
            match p.name.name.as_str() {
                "align" => align = Some(self.want(&Scope::Entry, v, Want::Int, "`align`")),
                "check" => check = Some(self.want(&Scope::Entry, v, Want::Bool, "`check`")),
                "split" => split = Some(self.expr(&Scope::Entry, v)),
                "write" if e.prop("codec").is_some() => {
                    write = Some(self.pickle_write(v, false, pickle))
                }
                "write" => write = Some(self.expr(&Scope::Entry, v)),
                _ => {}
            }
        }
        let en = &mut self.ir.entries[id.index()];
        en.align = align;
        en.check = check;
        en.write = write;
        en.split = split;
    }

    fn mapping(&mut self, id: MappingId, t: &ast::TensorMap) {
        let sc = Scope::Mapping(id);
        let b = &t.binding;
        if crate::TENSOR_KEYS.contains(&b.name.as_str())
            || crate::ast_impl::VALUE_KEYS.contains(&b.name.as_str())
        {
            self.gap(
                b.span,
                format!("the binding '{}' is spelled like a tensor property", b.name),
                "the mapping's expressions read the tensor's properties by name (`itemsize(dtype)`); \
                 name the binding for the item (`as t`, `as blob`, `as r`)",
            );
        }
        let filter = t
            .filter
            .as_ref()
            .map(|f| self.want(&sc, f, Want::Bool, "`where`"));
        let mut stmts = Vec::new();
        let (mut write, mut write_order) = (None, None);
        // By the engine named, even one that did not resolve: a protobuf or kv format's
        // `write` builds messages, never a pickle.
        let proto = matches!(self.ast_fmt().engine_kind(), "protobuf" | "kv");
        let value_map = self.ir.format(self.cur).values.contains(&id);
        for s in &t.stmts {
            match s {
                ast::TensorStmt::Include(e) => {
                    if let Some(st) = self.include(id, e) {
                        stmts.push(st);
                    }
                }
                // Outside protobuf and kv formats a `value` mapping has no `write`: the
                // checker reports the property at its key.
                ast::TensorStmt::Assign { key, value: v, .. } if key.name == "write" => {
                    if proto {
                        write = Some(self.expr(&Scope::ProtoWrite { tensor: true }, v));
                    } else if !value_map {
                        write = Some(self.pickle_write(v, true, None));
                    }
                }
                ast::TensorStmt::Assign { key, value, .. } if key.name == "write_order" => {
                    write_order = Some(self.write_order(id, key.span, value));
                }
                ast::TensorStmt::Assign { key, value: v, .. } => {
                    let value = self.expr(&sc, v);
                    let key = if value_map {
                        TensorKey::of_value(&key.name)
                    } else {
                        TensorKey::from_name(&key.name)
                    };
                    if let Some(key) = key {
                        stmts.push(MappingStmt::Set { key, value });
                    }
                }
            }
        }
        let m = &mut self.ir.mappings[id.index()];
        m.filter = filter;
        m.stmts = stmts;
        m.write = write;
        let padded = m.key(TensorKey::Data).is_some_and(|d| {
            matches!(&d.kind, ExprKind::Call { func: Builtin::Slice, args }
                if super::expr::named_arg(args, "align").is_some())
        });
        if let (Some(o), true) = (&write_order, padded) {
            self.gap(
                o.span,
                "`write_order` with a padded `slice(.., align = ..)`",
                "the writer pads each tensor as it comes; order the tensors before adding them, \
                 or drop one of the two",
            );
        }
        self.ir.mappings[id.index()].write_order = write_order;
    }

    /// `write_order = [K, ..]`: a list of integer or text keys over the tensor written, in
    /// a `file` format whose mapping iterates a list or map (several tensors), whose data is
    /// not padded (`slice(.., align = ..)`: the offsets follow the order written).
    fn write_order(&mut self, id: MappingId, at: Span, value: &ast::Expr) -> Expr {
        let e = self.expr(&Scope::Order, value);
        let help = "`write_order = [-index_of(TABLE, dtype), name];`: the keys, integers, \
                    text or conditions over the tensor's `name`, `dtype`, `shape` and \
                    `nbytes`, that the writer orders its tensors by (first key first, \
                    `false` before `true`; ties keep the order added)";
        let several = matches!(self.ir.mapping(id).source.ty, Type::List(_) | Type::Map(..));
        if self.ir.format(self.cur).engine != Engine::File || !several {
            self.gap(
                at,
                "`write_order` is for a `file` format whose mapping iterates a list or map",
                "a format of one tensor, or of another engine, writes its tensors as they \
                 come",
            );
            return e;
        }
        match &e.kind {
            ExprKind::List(keys) => {
                for k in keys {
                    if !matches!(k.ty, Type::Int(_) | Type::Str | Type::Bool | Type::Error) {
                        let shown = self.show_ty(&k.ty);
                        self.gap(
                            k.span,
                            format!(
                                "a `write_order` key is an integer, text or a condition, not {shown}"
                            ),
                            help,
                        );
                    }
                }
            }
            ExprKind::Error => {}
            _ => self.gap(value.span, "`write_order` is a list of keys", help),
        }
        e
    }

    fn include(&mut self, me: MappingId, e: &ast::Expr) -> Option<MappingStmt> {
        let ast::ExprKind::Call { callee, args } = &e.kind else {
            return None;
        };
        let format = self.visible(&callee.first()?.name)?;
        if self.ir.format(format).mappings.is_empty() {
            // "format 'x' has no tensor mapping to include", from the checker.
            return None;
        }
        let arg = self.expr(&Scope::Mapping(me), &args.first()?.value);
        let found = self
            .ir
            .format(format)
            .mappings
            .iter()
            .copied()
            .find(|&m| m != me && self.ir.mapping(m).binding_ty.same_kind(&arg.ty));
        match found {
            Some(mapping) => Some(MappingStmt::Include {
                format,
                mapping,
                arg,
            }),
            None => {
                let shown = self.show_ty(&arg.ty);
                let fname = self.ir.format(format).name.clone();
                self.gap(
                    args[0].value.span,
                    format!("no tensor mapping of format '{fname}' maps {shown}"),
                    format!("`include {fname}.tensor(x)` applies the mapping of '{fname}' whose binding has the type of x"),
                );
                None
            }
        }
    }

    // -----------------------------------------------------------------------------------
    // Expressions

    fn expr(&mut self, sc: &Scope, e: &ast::Expr) -> Expr {
        use ast::ExprKind as A;
        let span = e.span;
        if matches!(sc, Scope::PickleWrite { .. }) && !pickle_write::supported(e) {
            self.error(span, "not supported in a pickle write rule");
            return err_expr(span);
        }
        match &e.kind {
            A::Int(v) => mk(ExprKind::Const(Const::Int(*v)), Type::INT, span),
            A::Str(s) => mk(ExprKind::Const(Const::Str(s.clone())), Type::Str, span),
            A::Bytes(b) => mk(ExprKind::Const(Const::Bytes(b.clone())), Type::Bytes, span),
            A::Bool(b) => mk(ExprKind::Const(Const::Bool(*b)), Type::Bool, span),
            A::None => mk(ExprKind::Const(Const::None), Type::None, span),
            A::List(xs) => {
                let xs: Vec<Expr> = xs.iter().map(|x| self.expr(sc, x)).collect();
                let item = xs
                    .iter()
                    .map(|x| x.ty.clone())
                    .find(|t| *t != Type::None)
                    .unwrap_or(Type::None);
                mk(ExprKind::List(xs), Type::List(Box::new(item)), span)
            }
            A::Path(p) => self.path(sc, p, span),
            A::Index { base, index } => self.index(sc, base, index, span),
            A::Member { base, field } => {
                let b = self.expr(sc, base);
                self.member(b, field)
            }
            A::Call { callee, args } => self.call(sc, callee, args, span),
            A::Unary { op, expr } => {
                // A pickle holds a negative literal as the number.
                if let (UnaryOp::Neg, A::Int(v), Scope::PickleWrite { .. }) = (op, &expr.kind, sc) {
                    return mk(ExprKind::Const(Const::Int(-v)), Type::INT, span);
                }
                let (want, ty) = match op {
                    UnaryOp::Not => (Want::Bool, Type::Bool),
                    UnaryOp::Neg => (Want::Int, Type::INT),
                };
                let what = match op {
                    UnaryOp::Not => "`!`",
                    UnaryOp::Neg => "`-`",
                };
                let x = self.want(sc, expr, want, what);
                mk(
                    ExprKind::Unary {
                        op: *op,
                        expr: Box::new(x),
                    },
                    ty,
                    span,
                )
            }
            A::Binary { op, lhs, rhs } => {
                let l = self.expr(sc, lhs);
                let r = self.expr(sc, rhs);
                use BinaryOp::*;
                // Values compare as numbers, text, bytes, truth values, dtypes, byte orders,
                // orders and lists of these; records (messages, entries, layouts, dicts)
                // compare by the fields that identify them.
                let record = |t: &Type| {
                    matches!(
                        t,
                        Type::Message(_) | Type::Entry(_) | Type::Layout(_) | Type::Dict(_)
                    )
                };
                let (lk, rk) = (kind_word(&l.ty), kind_word(&r.ty));
                let sym = format!("`{}`", op.symbol());
                let ty = match op {
                    Or | And => {
                        self.need(&l, Want::Bool, &sym);
                        self.need(&r, Want::Bool, &sym);
                        Type::Bool
                    }
                    Eq | Ne | Lt | Le | Gt | Ge => {
                        let mismatch = matches!((lk, rk), (Some(a), Some(b)) if a != b);
                        if mismatch {
                            let (a, b) = (lk.unwrap_or_default(), rk.unwrap_or_default());
                            self.error(span, format!("{sym} compares {a} with {b}"));
                        } else if record(&l.ty) || record(&r.ty) {
                            let shown = self.show_ty(if record(&l.ty) { &l.ty } else { &r.ty });
                            self.gap(
                                span,
                                format!("{sym} compares records ({shown})"),
                                "compare the fields that identify them: `b.name == \"w\"`, \
                                 `blob.name != \"\"`",
                            );
                        }
                        Type::Bool
                    }
                    Add => match (lk, rk) {
                        (Some("an integer"), Some("an integer") | None)
                        | (None, Some("an integer")) => Type::INT,
                        (Some("a string"), Some("a string") | None) | (None, Some("a string")) => {
                            Type::Str
                        }
                        (Some("bytes"), Some("bytes") | None) | (None, Some("bytes")) => {
                            Type::Bytes
                        }
                        (None, None) if l.ty == Type::Error || r.ty == Type::Error => Type::Error,
                        (None, None) => Type::INT,
                        (a, b) => {
                            let (a, b) = (a.unwrap_or("a value"), b.unwrap_or("a value"));
                            self.error(span, format!("`+` cannot add {a} and {b}"));
                            Type::Error
                        }
                    },
                    Sub | Mul | Div | Rem => {
                        self.need(&l, Want::Int, &sym);
                        self.need(&r, Want::Int, &sym);
                        Type::INT
                    }
                };
                mk(
                    ExprKind::Binary {
                        op: *op,
                        lhs: Box::new(l),
                        rhs: Box::new(r),
                    },
                    ty,
                    span,
                )
            }
            A::In { expr, list } => {
                let x = self.expr(sc, expr);
                let list: Vec<Expr> = list.iter().map(|y| self.expr(sc, y)).collect();
                for y in &list {
                    if let (Some(a), Some(b)) = (kind_word(&x.ty), kind_word(&y.ty)) {
                        if a != b {
                            self.error(y.span, format!("`in` compares {a} with {b}"));
                        }
                    }
                }
                mk(
                    ExprKind::In {
                        expr: Box::new(x),
                        list,
                    },
                    Type::Bool,
                    span,
                )
            }
            A::If {
                cond,
                then,
                otherwise,
            } => {
                let c = self.want(sc, cond, Want::Bool, "the condition of `if`");
                let a = self.expr(sc, then);
                let b = self.expr(sc, otherwise);
                let ty = self.join(&a.ty, &b.ty, span);
                mk(
                    ExprKind::If {
                        cond: Box::new(c),
                        then: Box::new(a),
                        otherwise: Box::new(b),
                    },
                    ty,
                    span,
                )
            }
        }
    }

    /// The type of `if` with branches of types `a` and `b`.
    fn join(&mut self, a: &Type, b: &Type, span: Span) -> Type {
        let data = |t: &Type| matches!(t, Type::Bytes | Type::Payload | Type::TensorData);
        match (a, b) {
            (Type::Error, _) | (_, Type::Error) => Type::Error,
            (Type::Int(x), Type::Int(y)) if x == y => a.clone(),
            (Type::Int(_), Type::Int(_)) => Type::INT,
            (x, y) if x == y => x.clone(),
            (Type::None, y) => y.clone(),
            (x, Type::None) => x.clone(),
            (x, y) if x.same_kind(y) => x.clone(),
            (x, y) if data(x) && data(y) => Type::TensorData,
            (Type::Pickled(p), _) | (_, Type::Pickled(p)) => Type::Pickled(*p),
            _ => {
                let (x, y) = (self.show_ty(a), self.show_ty(b));
                self.gap(
                    span,
                    format!("the branches of this `if` have different types: {x} and {y}"),
                    "both branches of an `if` give a value of the same type",
                );
                Type::Error
            }
        }
    }

    fn show_ty(&self, t: &Type) -> String {
        super::dump::type_name(&self.ir, t)
    }

    /// True when `name` is bound by the scope (a field, the binding, a tensor key).
    fn local(&self, sc: &Scope, name: &str) -> bool {
        match sc {
            Scope::Layout { layout, .. } => self
                .ir
                .layout(*layout)
                .fields
                .iter()
                .any(|f| f.name == name),
            Scope::Mapping(m) => {
                self.ir.mapping(*m).binding == name || crate::TENSOR_KEYS.contains(&name)
            }
            // The write variables a `write_order` does not read are still its own names
            // (refused as such), never tables.
            Scope::Order => WriteVar::proto(name).is_some(),
            _ => sc.write_var(name).is_some(),
        }
    }

    fn table_of(&self, p: &[Ident]) -> Option<TableId> {
        let (fmt, rest) = self.split(p);
        match (rest.len(), self.item(fmt, &rest[0].name)) {
            (1, Some(ItemRef::Table(t))) => Some(t),
            _ => None,
        }
    }

    fn path(&mut self, sc: &Scope, p: &[Ident], span: Span) -> Expr {
        let root = &p[0];
        let n = root.name.as_str();
        let one = p.len() == 1;
        let members = |l: &mut Self, base: Expr, rest: &[Ident]| {
            rest.iter().fold(base, |b, m| l.member(b, m))
        };
        match sc {
            Scope::Layout {
                layout: l,
                current,
                read,
                allow_self,
            } => {
                if let Some(i) = self.ir.layout(*l).fields.iter().position(|f| f.name == n) {
                    if let Some(kw) = read {
                        let ok = i < *current || (i == *current && *allow_self);
                        if !ok {
                            let me = self.ir.layout(*l).fields[*current].name.clone();
                            let msg = if i == *current {
                                format!("`{kw}` of '{me}' refers to '{me}' itself")
                            } else {
                                format!(
                                    "`{kw}` of '{me}' refers to '{n}', which comes later in the layout"
                                )
                            };
                            self.gap(
                                root.span,
                                msg,
                                "read-side expressions (check, size, count, at, align, codec \
                                 arguments, conditional types) may only use earlier fields; \
                                 `write` rules may use any field",
                            );
                        }
                    }
                    let ty = self.ir.layout(*l).fields[i].ty.clone();
                    let base = mk(ExprKind::Field(*l, FieldId(i as u32)), ty, root.span);
                    return members(self, base, &p[1..]);
                }
                if n == "dtype" {
                    let base = mk(ExprKind::RecordDtype, Type::Dtype, root.span);
                    return members(self, base, &p[1..]);
                }
            }
            Scope::Mapping(m) => {
                let mp = self.ir.mapping(*m);
                if mp.binding == n {
                    let base = mk(ExprKind::Binding, mp.binding_ty.clone(), root.span);
                    return members(self, base, &p[1..]);
                }
                if let Some(k) = TensorKey::from_name(n) {
                    if k == TensorKey::Segment {
                        self.gap(
                            root.span,
                            "the mapped `segment` cannot be used in an expression",
                            "expressions may use the tensor's name, dtype, shape, strides, \
                             order, byte_order and data",
                        );
                        return err_expr(span);
                    }
                    let base = mk(ExprKind::TensorKey(k), k.ty(), root.span);
                    return members(self, base, &p[1..]);
                }
                if one {
                    if let Some(d) = Dtype::from_name(n) {
                        return mk(ExprKind::Const(Const::Dtype(d)), Type::Dtype, span);
                    }
                    if n == "position" {
                        return mk(ExprKind::Position, Type::INT, span);
                    }
                }
            }
            Scope::Entry => {
                if let (Some(ItemRef::Entry(e)), true) = (self.item(self.cur, n), one) {
                    let base = mk(ExprKind::Entry(e), Type::Entry(e), span);
                    let ty = self.ir.entry(e).content_ty.clone();
                    return mk(
                        ExprKind::Member {
                            base: Box::new(base),
                            member: Member::EntryContent(e),
                        },
                        ty,
                        span,
                    );
                }
            }
            Scope::ProtoWrite { .. } | Scope::Order => {
                if one {
                    if let Some(v) = sc.write_var(n) {
                        return mk(ExprKind::WriteVar(v), v.ty(), span);
                    }
                    if let Some(t) = self.table_of(p) {
                        return mk(ExprKind::Table(t), Type::Table(t), span);
                    }
                    if let Some(d) = Dtype::from_name(n) {
                        return mk(ExprKind::Const(Const::Dtype(d)), Type::Dtype, span);
                    }
                    let (within, help) = match sc {
                        Scope::Order => (
                            "a `write_order`",
                            "names in a `write_order`: the tensor's name, dtype, shape and \
                             nbytes, tables of this format and dtype names",
                        ),
                        Scope::ProtoWrite { tensor: true } => (
                            "a write rule",
                            "names in a mapping's write rule: name, dtype, shape, data, \
                             external, location, offset, nbytes, begin, end, tables of this \
                             format and dtype names",
                        ),
                        _ => (
                            "a write rule",
                            "names in a field's write rule: tables of this format and dtype names",
                        ),
                    };
                    self.gap(span, format!("unknown name '{n}' in {within}"), help);
                    return err_expr(span);
                }
            }
            // Declared globals and, over a tensor, its values; a table only as `key_of`'s
            // first argument (see `pickle_call`).
            Scope::PickleWrite { tensor, pickle } => {
                if one {
                    if let Some(v) = sc.write_var(n) {
                        if v.is_one_pickle() && self.ast_fmt().engine_kind() != "file" {
                            self.gap(
                                span,
                                format!("`{n}` in a pickle write rule outside a `file` format"),
                                "`data`, `order` and `byte_order` name the array written into a \
                                 file that is one pickle (`engine file;`, `object: bytes codec \
                                 pickle(P);`); here the bytes go to the storage the rule names",
                            );
                            return err_expr(span);
                        }
                        let storage =
                            !v.is_one_pickle() && v != WriteVar::Shape && v != WriteVar::Dtype;
                        if storage && self.ast_fmt().engine_kind() == "file" {
                            self.gap(
                                span,
                                format!("`{n}` in the write rule of a file that is one pickle"),
                                "`index`, `numel`, `nbytes`, `offset` and `strides` name a storage of \
                                 a zip around a pickle; here the array's bytes are `data`, dense in \
                                 its `order`: names here are shape, dtype, order, byte_order, data",
                            );
                            return err_expr(span);
                        }
                        return mk(ExprKind::WriteVar(v), v.ty(), span);
                    }
                    match n {
                        "c" | "fortran" if *tensor => {
                            let o = if n == "c" { Order::C } else { Order::Fortran };
                            return mk(ExprKind::Const(Const::Order(o)), Type::Order, span);
                        }
                        "le" | "be" if *tensor => {
                            let o = if n == "le" {
                                ByteOrder::Little
                            } else {
                                ByteOrder::Big
                            };
                            return mk(ExprKind::Const(Const::ByteOrder(o)), Type::ByteOrder, span);
                        }
                        _ => {}
                    }
                }
                let text = dotted(p);
                if let Some((pk, g)) = self.global(*pickle, &text) {
                    return mk(
                        ExprKind::PickleGlobal {
                            pickle: pk,
                            global: g,
                        },
                        Type::PickleGlobal(pk),
                        span,
                    );
                }
                self.gap(
                    span,
                    format!("'{text}' is not a declared pickle global"),
                    if *tensor {
                        "names here: declared globals, index, numel, nbytes, offset, shape, \
                         strides, dtype (and data, order, byte_order, c, fortran, le, be in a \
                         file that is one pickle)"
                    } else {
                        "names here: declared globals"
                    },
                );
                return err_expr(span);
            }
            Scope::Source => {
                if n == "root" {
                    if let Engine::Protobuf { root: m } = self.ir.format(self.cur).engine {
                        let base = mk(ExprKind::Root(m), Type::Message(m), root.span);
                        return members(self, base, &p[1..]);
                    }
                }
            }
        }
        if matches!(sc, Scope::Mapping(_)) && n == "root" {
            if let Engine::Protobuf { root: m } = self.ir.format(self.cur).engine {
                let base = mk(ExprKind::Root(m), Type::Message(m), root.span);
                return members(self, base, &p[1..]);
            }
        }
        match n {
            "c" | "fortran" if one => {
                let o = if n == "c" { Order::C } else { Order::Fortran };
                return mk(ExprKind::Const(Const::Order(o)), Type::Order, span);
            }
            "le" | "be" if one => {
                let o = if n == "le" {
                    ByteOrder::Little
                } else {
                    ByteOrder::Big
                };
                return mk(ExprKind::Const(Const::ByteOrder(o)), Type::ByteOrder, span);
            }
            "source" if one => {
                self.gap(
                    span,
                    "`source` is read as a value",
                    "the file is read through its members: `source.stem` (`model` of \
                     `model.npy`), `source.name` or `source.path`",
                );
                return err_expr(span);
            }
            "source" => {
                let base = mk(ExprKind::Source, Type::Source, root.span);
                return members(self, base, &p[1..]);
            }
            _ => {}
        }
        if let Some(r) = self.item(self.cur, n) {
            return self.item_value(self.cur, r, p, span);
        }
        if let Some(f) = self.visible(n) {
            if p.len() >= 2 {
                if let Some(r) = self.item(f, &p[1].name) {
                    return self.item_value(f, r, &p[1..], span);
                }
                self.error(
                    p[1].span,
                    format!("format '{n}' has no item '{}'", p[1].name),
                );
                return err_expr(span);
            }
            self.gap(
                root.span,
                format!("'{n}' is a format, not a value"),
                "name one of its items: `other.NAME`, `other.TABLE[key]`, `other.tensor(x)`",
            );
            return err_expr(span);
        } else if self.by_name.contains_key(n) {
            return self.not_imported(root, span);
        } else if self.lenient && p.len() > 1 {
            return err_expr(span);
        }
        let help = match sc {
            Scope::Layout { .. } => {
                "names in a layout are its fields, items of the format (tables, layouts, ...), \
                 formats, `dtype`, or the constants c, fortran, le, be, source"
            }
            Scope::Mapping(_) => {
                "names in a mapping are its binding, the tensor properties (name, dtype, ...), \
                 items of the format, formats, `root` (protobuf), dtype names (f32, ...), or \
                 the constants c, fortran, le, be, source"
            }
            _ => {
                "names are items of the format (entries, tables, ...), formats, or the \
                 constants c, fortran, le, be, source"
            }
        };
        self.gap(root.span, format!("unknown name '{n}'"), help);
        err_expr(span)
    }

    /// A path that starts at item `r` of format `fmt` (`p[0]` is the item's name).
    fn item_value(&mut self, fmt: FormatId, r: ItemRef, p: &[Ident], span: Span) -> Expr {
        let _ = fmt;
        let first = p[0].span;
        let members = |l: &mut Self, base: Expr, rest: &[Ident]| {
            rest.iter().fold(base, |b, m| l.member(b, m))
        };
        match r {
            ItemRef::Layout(l) => {
                let base = mk(ExprKind::Layout(l), Type::Layout(l), first);
                members(self, base, &p[1..])
            }
            ItemRef::Entry(e) => {
                let base = mk(ExprKind::Entry(e), Type::Entry(e), first);
                members(self, base, &p[1..])
            }
            ItemRef::Table(t) if p.len() == 1 => mk(ExprKind::Table(t), Type::Table(t), span),
            ItemRef::Enum(en) if p.len() == 2 => self.enum_value(en, &p[1], span),
            ItemRef::Message(m) => {
                // `TensorProto.DataLocation.EXTERNAL`: nested messages, an enum, a value.
                let mut m = m;
                let mut i = 1;
                while i < p.len() {
                    let msg = self.ir.message(m);
                    if let Some(&x) = msg
                        .messages
                        .iter()
                        .find(|&&x| self.ir.message(x).name == p[i].name)
                    {
                        m = x;
                        i += 1;
                        continue;
                    }
                    if let Some(&en) = msg
                        .enums
                        .iter()
                        .find(|&&x| self.ir.enum_(x).name == p[i].name)
                    {
                        if i + 2 == p.len() {
                            return self.enum_value(en, &p[i + 1], span);
                        }
                        break;
                    }
                    let nested: Vec<&str> = msg
                        .messages
                        .iter()
                        .map(|&x| self.ir.message(x).name.as_str())
                        .chain(msg.enums.iter().map(|&x| self.ir.enum_(x).name.as_str()))
                        .collect();
                    let (mname, help) = (
                        msg.name.clone(),
                        format!(
                            "nested in '{}': {}; an enum value is `Message.Enum.VALUE`",
                            msg.name,
                            listed(nested)
                        ),
                    );
                    self.gap(
                        p[i].span,
                        format!(
                            "message '{mname}' has no nested message or enum '{}'",
                            p[i].name
                        ),
                        help,
                    );
                    return err_expr(span);
                }
                self.gap(
                    span,
                    format!("'{}' is not a value", dotted(p)),
                    "a message's path names an enum value: `Message.Enum.VALUE`",
                );
                err_expr(span)
            }
            _ => {
                self.gap(
                    span,
                    format!("'{}' is not a value", dotted(p)),
                    "expressions name layouts, entries, tables (in lookups and `key_of`) and enum values",
                );
                err_expr(span)
            }
        }
    }

    fn enum_value(&mut self, en: EnumId, v: &Ident, span: Span) -> Expr {
        match self.ir.enum_(en).values.iter().position(|x| x.0 == v.name) {
            Some(k) => mk(ExprKind::EnumValue(en, k), Type::Enum(en), span),
            None => {
                self.gap(
                    v.span,
                    format!(
                        "enum '{}' has no value '{}'",
                        self.ir.enum_(en).name,
                        v.name
                    ),
                    format!(
                        "values of '{}': {}",
                        self.ir.enum_(en).name,
                        listed(self.ir.enum_(en).values.iter().map(|v| v.0.as_str()))
                    ),
                );
                err_expr(span)
            }
        }
    }

    /// `base.name`.
    fn member(&mut self, base: Expr, name: &Ident) -> Expr {
        let span = base.span.to(name.span);
        let n = name.name.as_str();
        let found: Option<(Member, Type)> = match &base.ty {
            Type::Error => return err_expr(span),
            Type::Layout(l) => self.field_member(*l, n),
            Type::Dict(d) => {
                let keys = &self.ir.dict(*d).keys;
                keys.iter()
                    .position(|k| k.key == n)
                    .map(|i| (Member::DictKey(*d, KeyId(i as u32)), keys[i].ty.clone()))
            }
            Type::Message(m) => self.message_member(*m, n),
            Type::Entry(e) => {
                let en = self.ir.entry(*e);
                // A capture shadows the built-in members (`m.name` of `"{name}.npy"` is
                // the capture, as the engines read it).
                match n {
                    c if en.pattern.captures.iter().any(|x| x == c) => {
                        Some((Member::Capture(*e, c.to_string()), Type::Str))
                    }
                    "content" => Some((Member::EntryContent(*e), en.content_ty.clone())),
                    "name" => Some((Member::EntryName(*e), Type::Str)),
                    "value" => match &en.content {
                        Content::Value(t) => Some((Member::EntryValue(*e), t.clone())),
                        _ => None,
                    },
                    _ => None,
                }
            }
            Type::Source => match n {
                "stem" => Some((Member::SourceStem, Type::Str)),
                "name" => Some((Member::SourceName, Type::Str)),
                "path" => Some((Member::SourcePath, Type::Str)),
                _ => None,
            },
            Type::MapItem(k, v) => match n {
                "key" => Some((Member::MapKey, (**k).clone())),
                "value" => Some((Member::MapValue, (**v).clone())),
                _ => None,
            },
            Type::Pickled(p) => {
                let pk = self.ir.pickle(*p);
                let kind = n.strip_suffix('s').filter(|k| pk.kind_params(k).is_some());
                let kind = kind.or_else(|| pk.kind_params(n).map(|_| n));
                match kind {
                    Some(k) => Some((
                        Member::PickleObjects(*p, k.to_string()),
                        Type::List(Box::new(Type::PickleCall(*p, k.to_string()))),
                    )),
                    None if n == "state" => Some((Member::PickleState, Type::Pickled(*p))),
                    None => Some((Member::PickleAttr(n.to_string()), Type::Pickled(*p))),
                }
            }
            Type::PickleCall(p, kind) => {
                if n == "path" {
                    Some((Member::PicklePath, Type::Str))
                } else if self
                    .ir
                    .pickle(*p)
                    .kind_params(kind)
                    .is_some_and(|ps| ps.contains(&n))
                {
                    Some((Member::PickleParam(n.to_string()), Type::Pickled(*p)))
                } else if n == "state" {
                    Some((Member::PickleState, Type::Pickled(*p)))
                } else {
                    None
                }
            }
            Type::List(item) | Type::Tuple(item) => {
                // A projection: the member of every item.
                let got = match &**item {
                    Type::Layout(l) => self.field_member(*l, n),
                    Type::Message(m) if self.message_member(*m, n).is_some() => {
                        self.gap(
                            name.span,
                            format!("'{n}' is read from every message of a repeated field"),
                            "a mapping reads one message of a list: index it (`t.dims[0]`), \
                             look an item up by its key (`t.external_data[\"location\"]`), or \
                             iterate the list (`tensor from root.graph.initializer as t`)",
                        );
                        return err_expr(span);
                    }
                    _ => None,
                };
                got.map(|(m, t)| (m, Type::List(Box::new(t))))
            }
            _ => None,
        };
        match found {
            Some((member, ty)) => mk(
                ExprKind::Member {
                    base: Box::new(base),
                    member,
                },
                ty,
                span,
            ),
            None => {
                self.no_member(&base.ty, name);
                err_expr(span)
            }
        }
    }

    /// Reports that a value of type `ty` has no member `name`, listing those it has.
    fn no_member(&mut self, ty: &Type, name: &Ident) {
        let n = &name.name;
        let (msg, help) = match ty {
            Type::Layout(l) => {
                let l = self.ir.layout(*l);
                (
                    format!("layout '{}' has no field '{n}'", l.name),
                    format!(
                        "fields of '{}': {}",
                        l.name,
                        listed(l.fields.iter().map(|f| f.name.as_str()))
                    ),
                )
            }
            Type::Dict(d) => {
                let d = self.ir.dict(*d);
                (
                    format!("dict '{}' has no key '{n}'", d.name),
                    format!(
                        "keys of '{}': {}",
                        d.name,
                        listed(d.keys.iter().map(|k| k.key.as_str()))
                    ),
                )
            }
            Type::Entry(e) if n == "value" => {
                let e = &self.ir.entry(*e).name;
                (
                    format!("entry '{e}' has no `value`"),
                    "an entry's `value` is what its `value` property declares (`value Message;`); \
                     its bytes are `content`"
                        .to_string(),
                )
            }
            Type::Entry(e) => {
                let e = self.ir.entry(*e);
                let caps: String = e
                    .pattern
                    .captures
                    .iter()
                    .filter(|c| !["content", "value", "name"].contains(&c.as_str()))
                    .map(|c| format!(", {c}"))
                    .collect();
                (
                    format!("entry '{}' has no member '{n}'", e.name),
                    format!("entry members: content, value, name{caps}"),
                )
            }
            Type::Dtype => (
                format!("a dtype has no member '{n}'"),
                "the bytes of one element of a dtype are `itemsize(dtype)`".to_string(),
            ),
            Type::Source => (
                format!("`source` has no member '{n}'"),
                "`source.stem`, `source.name`, `source.path`".to_string(),
            ),
            _ => (
                format!("a value of type {} has no member '{n}'", self.show_ty(ty)),
                "members are fields of layouts, dicts and messages, entry members \
                 (content, value, name, captures), and source.stem/name/path"
                    .to_string(),
            ),
        };
        self.gap(name.span, msg, help);
    }

    fn field_member(&self, l: LayoutId, n: &str) -> Option<(Member, Type)> {
        let fs = &self.ir.layout(l).fields;
        fs.iter()
            .position(|f| f.name == n)
            .map(|i| (Member::Field(l, FieldId(i as u32)), fs[i].ty.clone()))
    }

    fn message_member(&self, m: MessageId, n: &str) -> Option<(Member, Type)> {
        let msg = self.ir.message(m);
        msg.field_index(n)
            .map(|i| (Member::MessageField(m, i), msg.fields[i].ty.clone()))
    }

    /// The table `p` names as the base of `p[key]` (`T` or `fmt.T`): `Some(Ok)`, or
    /// `Some(Err(message))` for a path that names no table where one is expected, or `None`
    /// when `p` is not a table lookup (a field, a layout, a local name...).
    fn lookup_table(&self, sc: &Scope, p: &[Ident]) -> Option<Result<TableId, String>> {
        let n = p[0].name.as_str();
        let constant = matches!(n, "c" | "fortran" | "le" | "be" | "source");
        if self.local(sc, n) || constant {
            return None;
        }
        let ast_item = |f: FormatId, name: &str| self.fmts[f.index()].1.item(name);
        match p.len() {
            1 => match (self.item(self.cur, n), ast_item(self.cur, n)) {
                (Some(ItemRef::Table(t)), _) => Some(Ok(t)),
                (Some(ItemRef::Layout(_) | ItemRef::Entry(_)), _) => None,
                (_, Some(item)) => {
                    Some(Err(format!("'{n}' is a {}, not a table", item.kind_word())))
                }
                (_, None) if self.visible(n).is_some() => None,
                (_, None) => Some(Err(format!("unknown table '{n}'"))),
            },
            2 if self.item(self.cur, n).is_none() => {
                let f = self.visible(n)?;
                let t = &p[1].name;
                match self.item(f, t) {
                    Some(ItemRef::Table(t)) => Some(Ok(t)),
                    _ => Some(Err(format!(
                        "unknown table '{n}.{t}': format '{n}' has no table '{t}'"
                    ))),
                }
            }
            _ => None,
        }
    }

    fn index(&mut self, sc: &Scope, base: &ast::Expr, index: &ast::Expr, span: Span) -> Expr {
        if let ast::ExprKind::Path(p) = &base.kind {
            match self.lookup_table(sc, p) {
                Some(Ok(t)) => {
                    let k = self.expr(sc, index);
                    let (want, keys) = match self.ir.table(t).key {
                        KeyKind::Str => ("a string", "string"),
                        KeyKind::Int => ("an integer", "integer"),
                    };
                    if let Some(got) = kind_word(&k.ty).filter(|&g| g != want) {
                        let name = self.ir.table(t).name.clone();
                        self.error(
                            index.span,
                            format!("table '{name}' has {keys} keys, but this key is {got}"),
                        );
                    }
                    return mk(
                        ExprKind::Lookup {
                            table: t,
                            key: Box::new(k),
                        },
                        Type::Dtype,
                        span,
                    );
                }
                Some(Err(msg)) => {
                    self.expr(sc, index);
                    self.gap(
                        base.span,
                        msg,
                        "`NAME[key]` looks a key up in a `table` of this format (or \
                         `other.NAME[key]`)",
                    );
                    return err_expr(span);
                }
                None => {}
            }
        }
        let b = self.expr(sc, base);
        let k = self.expr(sc, index);
        let found = match (&b.ty, &k.ty) {
            (Type::Error, _) | (_, Type::Error) => return err_expr(span),
            (Type::List(t) | Type::Tuple(t), Type::Int(_) | Type::Pickled(_)) => {
                Some((IndexKind::Position, (**t).clone()))
            }
            (Type::List(t), Type::Str) => match &**t {
                Type::Message(m) => {
                    let msg = self.ir.message(*m);
                    match (
                        msg.field_index("key"),
                        msg.field_index("value"),
                        msg.field_index("name"),
                    ) {
                        (Some(key), Some(value), _) => Some((
                            IndexKind::KeyValue {
                                message: *m,
                                key,
                                value,
                            },
                            match &msg.fields[value].ty {
                                Type::List(_) => Type::Error,
                                t => t.clone(),
                            },
                        )),
                        (_, _, Some(name)) => {
                            Some((IndexKind::Named { message: *m, name }, Type::Message(*m)))
                        }
                        _ => None,
                    }
                }
                _ => None,
            },
            (Type::Pickled(p), _) => Some((IndexKind::Pickled, Type::Pickled(*p))),
            _ => None,
        };
        match found {
            Some((how, ty)) if ty != Type::Error => mk(
                ExprKind::Index {
                    base: Box::new(b),
                    index: Box::new(k),
                    how,
                },
                ty,
                span,
            ),
            _ => {
                let (x, y) = (self.show_ty(&b.ty), self.show_ty(&k.ty));
                self.gap(
                    span,
                    format!("cannot index {x} with {y}"),
                    "`x[i]` takes an item of a list by position, a table's dtype by key, or in \
                     repeated messages with `key` and `value` (or `name`) fields the item of a key",
                );
                err_expr(span)
            }
        }
    }

    /// The pickles a pickle write rule names into: the format's declarations, the entry's
    /// own (`pickle`) first when it is one of them.
    fn pickles_in_reach(&self, pickle: Option<PickleId>) -> impl Iterator<Item = PickleId> + '_ {
        let own = &self.ir.format(self.cur).pickles;
        pickle
            .filter(|p| own.contains(p))
            .into_iter()
            .chain(own.iter().copied())
    }

    /// The pickle global `text` (exact path) of the current format, preferring `pickle`.
    fn global(&self, pickle: Option<PickleId>, text: &str) -> Option<(PickleId, usize)> {
        self.pickles_in_reach(pickle).find_map(|p| {
            self.ir
                .pickle(p)
                .globals
                .iter()
                .position(|g| g.path == text)
                .map(|i| (p, i))
        })
    }

    /// The type of table `t`'s keys.
    fn key_ty(&self, t: TableId) -> Type {
        match self.ir.table(t).key {
            KeyKind::Str => Type::Str,
            KeyKind::Int => Type::INT,
        }
    }

    /// `name` is a format of the schema that this file does not `use`.
    fn not_imported(&mut self, name: &Ident, span: Span) -> Expr {
        self.gap(
            name.span,
            format!("format '{}' is not imported", name.name),
            format!("add `use {};` to this file", name.name),
        );
        err_expr(span)
    }

    fn call(&mut self, sc: &Scope, callee: &[Ident], args: &[ast::Arg], span: Span) -> Expr {
        let name = callee[0].name.as_str();
        let text = dotted(callee);
        if let &Scope::PickleWrite { tensor, pickle } = sc {
            return self.pickle_call(tensor, pickle, callee, args, span);
        }
        if let (Scope::ProtoWrite { .. }, 1) = (sc, callee.len()) {
            let top = self
                .ir
                .format(self.cur)
                .messages
                .iter()
                .copied()
                .find(|&m| self.ir.message(m).name == name);
            if let Some(m) = top {
                let mut fields = Vec::new();
                let all = listed(self.ir.message(m).fields.iter().map(|f| f.name.as_str()));
                for a in args {
                    let v = self.expr(sc, &a.value);
                    let Some(n) = &a.name else {
                        self.gap(
                            a.span,
                            format!(
                                "fields of '{name}' are given by name: `{name}(field = value)`"
                            ),
                            format!("fields of '{name}': {all}"),
                        );
                        continue;
                    };
                    match self.ir.message(m).field_index(&n.name) {
                        Some(i) => fields.push((i, v)),
                        None => self.gap(
                            n.span,
                            format!("message '{name}' has no field '{}'", n.name),
                            format!("fields of '{name}': {all}"),
                        ),
                    }
                }
                return mk(
                    ExprKind::NewMessage { message: m, fields },
                    Type::Message(m),
                    span,
                );
            }
        }
        if let Scope::ProtoWrite { .. } = sc {
            // A protobuf write rule builds messages from the tensor's values, with `str`
            // and `key_of`.
            if !matches!(text.as_str(), "str" | "key_of") {
                for a in args {
                    self.expr(sc, &a.value);
                }
                let msg = if callee.len() == 1 {
                    format!(
                        "'{name}' is neither a message of this format nor a write-rule function"
                    )
                } else {
                    format!("'{text}' is not a write-rule function")
                };
                self.gap(
                    span,
                    msg,
                    "calls in a protobuf write rule: `M(field = value)` for a message M of \
                     this format, `str(x)`, `key_of(TABLE, dtype)`",
                );
                return err_expr(span);
            }
        }
        if callee.len() == 1 {
            if let Some(func) = Builtin::from_name(name) {
                return self.builtin(sc, func, args, span);
            }
            if let Some(e) = self.entry_id(name) {
                let caps = self.ir.entry(e).pattern.captures.clone();
                for a in args {
                    if !a.name.as_ref().is_some_and(|k| caps.contains(&k.name)) {
                        let shown: Vec<String> =
                            caps.iter().map(|c| format!("{c} = ...")).collect();
                        self.gap(
                            a.span,
                            format!("entry '{name}' is looked up by its captures"),
                            format!("`{name}({})`", shown.join(", ")),
                        );
                    }
                }
                let captures = args
                    .iter()
                    .map(|a| {
                        (
                            a.name.as_ref().map_or(String::new(), |n| n.name.clone()),
                            self.expr(sc, &a.value),
                        )
                    })
                    .collect();
                return mk(
                    ExprKind::EntryLookup { entry: e, captures },
                    Type::Entry(e),
                    span,
                );
            }
        }
        let mapping = callee.len() == 2 && callee[1].name == "tensor";
        let format = mapping.then(|| self.visible(name)).flatten();
        if let (Some(f), [a]) = (format, args) {
            let arg = self.expr(sc, &a.value);
            return mk(
                ExprKind::MappingOf {
                    format: f,
                    arg: Box::new(arg),
                },
                Type::TensorData,
                span,
            );
        }
        // Not resolved: the names in the arguments are still checked.
        for a in args {
            self.expr(sc, &a.value);
        }
        if format.is_some() {
            self.gap(
                span,
                format!("`{text}` takes one argument, found {}", args.len()),
                format!("`{text}(x)` applies the mapping of '{name}' to x"),
            );
            return err_expr(span);
        }
        if mapping && self.by_name.contains_key(name) {
            return self.not_imported(&callee[0], span);
        }
        if mapping && self.lenient {
            return err_expr(span);
        }
        if callee.len() == 1 {
            self.gap(
                callee[0].span,
                format!("unknown function '{name}'"),
                format!("functions: {FUNCTIONS}, or an entry lookup `entry(capture = ...)`"),
            );
        } else {
            self.gap(
                span,
                format!("unknown function '{text}'"),
                "a qualified call is another format's mapping, `F.tensor(x)`, with F a format \
                 of this file or named by `use`",
            );
        }
        err_expr(span)
    }

    fn builtin(&mut self, sc: &Scope, func: Builtin, args: &[ast::Arg], span: Span) -> Expr {
        let name = func.name();
        if let Some(n) = func.arity().filter(|&n| n != args.len()) {
            let s = if n == 1 { "" } else { "s" };
            self.error(
                span,
                format!("`{name}` takes {n} argument{s}, found {}", args.len()),
            );
        }
        if let (Builtin::Len | Builtin::Size, Scope::Layout { .. }, [a]) = (func, sc, args) {
            if a.value.as_path().is_none() {
                self.error(a.span, format!("`{name}` takes a field name"));
            }
        }
        let args: Vec<Arg> = args
            .iter()
            .map(|a| Arg {
                name: a.name.as_ref().map(|n| n.name.clone()),
                value: self.expr(sc, &a.value),
            })
            .collect();
        // A table is read by key (`kinds[k]`); as a value it is only `key_of`'s table.
        for (i, a) in args.iter().enumerate() {
            // `index_of(TABLE, dtype)`: the row of a dtype, in a `write_order`.
            let table_arg = i == 0
                && (func == Builtin::KeyOf
                    || (func == Builtin::IndexOf && matches!(sc, Scope::Order)));
            if matches!(a.value.ty, Type::Table(_)) && !table_arg {
                self.gap(
                    a.value.span,
                    format!("the table is passed to `{}` as a value", func.name()),
                    "a table is read by key (`kinds[f.header.kind]`), or named as the \
                     first argument of `key_of(TABLE, dtype)`",
                );
            }
        }
        let arg_ty = |i: usize| {
            args.get(i)
                .map(|a| a.value.ty.clone())
                .unwrap_or(Type::Error)
        };
        let ty = match func {
            Builtin::Itemsize => {
                if !matches!(arg_ty(0), Type::Dtype | Type::Error) {
                    let shown = self.show_ty(&arg_ty(0));
                    self.gap(
                        span,
                        format!("`itemsize` takes a dtype, but this is {shown}"),
                        "`itemsize(dtype)`: the bytes of one element of the tensor's dtype",
                    );
                }
                Type::INT
            }
            Builtin::Align | Builtin::Digits => {
                for a in &args {
                    self.need(&a.value, Want::Int, &format!("`{name}`"));
                }
                Type::INT
            }
            Builtin::Size | Builtin::IndexOf => Type::INT,
            Builtin::Tag => {
                if !matches!(arg_ty(0), Type::Union(..) | Type::Error) {
                    let shown = self.show_ty(&arg_ty(0));
                    self.gap(
                        span,
                        format!("`tag` takes a value of a `match` field, but this is {shown}"),
                        "`tag(value)` is the tag of the case a tagged union's value is \
                         (`kind: u32 write = tag(value);` beside `value: match kind { .. }`)",
                    );
                }
                Type::INT
            }
            Builtin::Latin1 | Builtin::Has => Type::Bool,
            Builtin::Str => Type::Str,
            Builtin::Len => {
                let ok = matches!(
                    arg_ty(0),
                    Type::Str
                        | Type::Bytes
                        | Type::List(_)
                        | Type::Tuple(_)
                        | Type::Map(..)
                        | Type::Payload
                        | Type::Dict(_)
                        | Type::Pickled(_)
                        | Type::Table(_)
                        | Type::Error
                );
                if !ok {
                    let shown = self.show_ty(&arg_ty(0));
                    self.gap(
                        span,
                        format!(
                            "`len` counts text, bytes, items or a payload, but this is {shown}"
                        ),
                        "`len(name)` is a text's length in bytes, `len(dims)` a list's items, \
                         `len(data)` a payload's bytes; the bytes a field occupies are \
                         `size(field)` (in a write rule)",
                    );
                }
                Type::INT
            }
            Builtin::Slice => {
                // Three positional arguments, then `align = N` and `tile = true`, each once.
                let positional = args.iter().take_while(|a| a.name.is_none()).count();
                let named: Vec<&str> = args[positional..]
                    .iter()
                    .filter_map(|a| a.name.as_deref())
                    .collect();
                let named_ok = named.len() == args.len() - positional
                    && named.iter().all(|n| matches!(*n, "align" | "tile"))
                    && !(named.len() == 2 && named[0] == named[1]);
                if positional != 3 || args.len() > 5 || !named_ok {
                    if args.iter().all(|a| a.name.is_none()) {
                        self.error(
                            span,
                            format!("`slice` takes 3 arguments, found {}", args.len()),
                        );
                    } else {
                        self.gap(
                            span,
                            "`slice` takes 3 arguments, then an optional `align = N` and \
                             `tile = true`",
                            "`slice(File.data, t.offset, t.offset + n, align = 32)`: the data, \
                             where its bytes start and end, and a multiple their start is of; \
                             `tile = true`: the slices of all items cover the data exactly",
                        );
                    }
                }
                if let Some(a) = super::expr::named_arg(&args, "align") {
                    self.need(&a.value, Want::Int, "`slice`'s `align`");
                }
                if let Some(a) = super::expr::named_arg(&args, "tile") {
                    if a.value.kind != ExprKind::Const(Const::Bool(true)) {
                        self.gap(
                            a.value.span,
                            "`slice`'s `tile` is `true` or left out",
                            "`tile = true`: in the order of their starts, the items' slices \
                             cover the data without holes or overlaps (safetensors' data offsets)",
                        );
                    }
                }
                if !matches!(arg_ty(0), Type::Payload | Type::Entry(_) | Type::Error) {
                    let shown = self.show_ty(&arg_ty(0));
                    self.gap(
                        span,
                        format!("`slice` takes a payload or a storage entry, but this is {shown}"),
                        "`slice(File.data, r.begin, r.end)` cuts a layout's `payload`; \
                         `slice(storage(key = ..), offset, none)` a storage member; bytes \
                         held in a field are the data as they are (`data = t.raw_data`)",
                    );
                }
                Type::Payload
            }
            Builtin::Elements => {
                // The values of a repeated field that is not of messages.
                let field = match args.first().map(|a| &a.value.kind) {
                    Some(ExprKind::Member {
                        member: Member::MessageField(m, i),
                        ..
                    }) => self
                        .ir
                        .messages
                        .get(m.index())
                        .and_then(|m| m.fields.get(*i)),
                    _ => None,
                };
                let ok = field.is_some_and(|f| {
                    f.label == crate::ast::Label::Repeated
                        && !matches!(f.proto, super::ProtoType::Message(_))
                });
                if !ok && arg_ty(0) != Type::Error {
                    self.gap(
                        span,
                        "`elements` takes a repeated field of numbers, strings or bytes",
                        "`elements(t.float_data)`: the field's values are the tensor's elements; \
             a `bytes` field holding them is the data itself (`data = t.raw_data`)",
                    );
                }
                Type::TensorData
            }
            Builtin::External => {
                // ONNX's external data: the key/value strings of the tensor's entries.
                let known = ["location", "offset", "length"];
                let bad = args.iter().find(|a| {
                    !a.name.as_deref().is_some_and(|n| known.contains(&n))
                        || !matches!(a.value.ty, Type::Str | Type::Error)
                });
                let has_location = args.iter().any(|a| a.name.as_deref() == Some("location"));
                if let Some(a) = bad {
                    let shown = self.show_ty(&a.value.ty);
                    self.gap(
                        a.value.span,
                        format!("an argument of `external` that is not `location`, `offset` or `length` text ({shown})"),
                        "`external(location = .., offset = .., length = ..)` takes the texts of ONNX's external data entries (`t.external_data[\"offset\"]`); `offset` and `length` may be left out",
                    );
                } else if !has_location {
                    self.gap(
                        span,
                        "`external` without a `location`",
                        "name the file holding the data: `external(location = t.external_data[\"location\"], ..)`",
                    );
                }
                Type::TensorData
            }
            Builtin::Widen => {
                // Data of a narrower stored type, read as the tensor's dtype.
                if !matches!(arg_ty(0), Type::Bytes | Type::TensorData | Type::Error) {
                    let shown = self.show_ty(&arg_ty(0));
                    self.gap(
                        span,
                        format!("`widen` takes the tensor's data first, but this is {shown}"),
                        "`widen(t.raw_data, bf16)`: a `bytes` field or `elements(..)` holding \
                         the elements as they are stored",
                    );
                }
                if !matches!(arg_ty(1), Type::Dtype | Type::Error) {
                    let shown = self.show_ty(&arg_ty(1));
                    self.gap(
                        span,
                        format!("`widen` takes the stored dtype second, but this is {shown}"),
                        "`widen(t.raw_data, bf16)`, or a dtype by a table: \
                         `widen(t.raw_data, stored[t.data_format])`",
                    );
                }
                Type::TensorData
            }
            Builtin::Lookup => self.lookup_ty(&args, span),
            Builtin::Tuple | Builtin::Build => {
                unreachable!("`tuple` and `build` are lowered by `pickle_call` alone")
            }
            Builtin::WriteAlign => {
                for a in &args {
                    self.need(&a.value, Want::Int, "`write_align`");
                }
                if let Some(msg) = self.write_align_refused(sc) {
                    self.gap(
                        span,
                        msg,
                        "`write_align(n)` is the alignment a save asks for (at least `n`; `n` \
                         when it asks none): a several-tensor `file` format's writer reads it, \
                         in its layout's `pad(align = ..)` and `write` rules and in its \
                         `write_order` (safetensors: `pad(align = write_align(8), ..)`)",
                    );
                }
                Type::INT
            }
            Builtin::Product | Builtin::Sum => {
                if !matches!(&arg_ty(0), Type::List(t) | Type::Tuple(t) if matches!(**t, Type::Int(_) | Type::Error))
                    && arg_ty(0) != Type::Error
                {
                    let shown = self.show_ty(&arg_ty(0));
                    self.gap(
                        args.first().map_or(span, |a| a.value.span),
                        format!("`{name}` takes a list of integers, but this is {shown}"),
                        "`product(t.dims)`, `sum(t.sizes)`: the items of a repeated integer field",
                    );
                }
                Type::INT
            }
            Builtin::Reverse => match arg_ty(0) {
                t @ (Type::List(_) | Type::Tuple(_)) => t,
                Type::Error => Type::Error,
                other => {
                    let shown = self.show_ty(&other);
                    self.gap(
                        args.first().map_or(span, |a| a.value.span),
                        format!("`reverse` takes a list, but this is {shown}"),
                        "`reverse(t.dims)`: the items of a repeated field, last first",
                    );
                    Type::Error
                }
            },
            Builtin::First | Builtin::Last => match arg_ty(0) {
                Type::List(t) | Type::Tuple(t) => *t,
                Type::Pickled(p) => Type::Pickled(p),
                other => {
                    let shown = self.show_ty(&other);
                    if other != Type::Error {
                        let shown = kind_word(&other).map_or(shown, str::to_string);
                        self.gap(
                            args.first().map_or(span, |a| a.value.span),
                            format!("`{name}` takes a list, but this is {shown}"),
                            "`first(list)`, `last(list)`",
                        );
                    }
                    Type::Error
                }
            },
            Builtin::KeyOf => match arg_ty(0) {
                Type::Table(t) => self.key_ty(t),
                _ => {
                    self.gap(
                        args.first().map_or(span, |a| a.value.span),
                        "`key_of` takes a table of this format",
                        "`key_of(TABLE, dtype)`",
                    );
                    Type::Error
                }
            },
            Builtin::Global => match sc {
                Scope::PickleWrite { pickle, .. } => {
                    match pickle.or_else(|| self.ir.format(self.cur).pickles.first().copied()) {
                        Some(p) => Type::PickleGlobal(p),
                        None => Type::Error,
                    }
                }
                _ => {
                    self.gap(
                        span,
                        "`global(..)` names a pickle global: it is for pickle write rules",
                        "use `global(key_of(TABLE, dtype))` in a mapping's `write` rule",
                    );
                    Type::Error
                }
            },
        };
        mk(ExprKind::Call { func, args }, ty, span)
    }
}

impl Lower<'_> {
    /// Why `write_align(..)` means nothing where `sc` evaluates it, or `None` where a
    /// writer that holds the save's options computes it: a `write_order`, and the `pad`,
    /// `write` rules and `spare` of the layout a several-tensor `file` format writes (not
    /// nested in another layout, whose writer would not pass the alignment on).
    fn write_align_refused(&self, sc: &Scope) -> Option<String> {
        match sc {
            Scope::Order => None,
            Scope::Layout { read: Some(kw), .. } if *kw != "pad" => Some(format!(
                "`write_align` in a `{kw}`, which reading evaluates: reading never depends \
                 on how a file was saved"
            )),
            Scope::Layout { layout, .. } => {
                let lay = self.ir.layout(*layout);
                let fmt = self.ir.format(lay.format);
                let source = fmt.mappings.first().map(|m| &self.ir.mapping(*m).source);
                let several = source.is_some_and(|s| {
                    matches!(s.ty, Type::List(_) | Type::Map(..))
                        && super::plan::root_layout(s) == Some(*layout)
                });
                let nested = self.ir.layouts.iter().any(|x| {
                    x.fields.iter().any(|f| {
                        f.item_ty == Type::Layout(*layout)
                            || matches!(&f.kind, FieldKind::Match { cases, .. }
                                if cases.iter().any(|c| c.ty == Type::Layout(*layout)))
                    })
                });
                (fmt.engine != Engine::File || !several || nested).then(|| {
                    format!(
                        "`write_align` in layout '{}', which no several-tensor `file` writer \
                         lays out as its file",
                        lay.name
                    )
                })
            }
            _ => Some(
                "`write_align` outside what a several-tensor `file` writer computes".to_string(),
            ),
        }
    }

    /// The type of `lookup(list, key, default)`: the records' `value` (an integer when the
    /// default is one and the value a tagged union with integer cases).
    fn lookup_ty(&mut self, args: &[Arg], span: Span) -> Type {
        let ty = |i: usize| args.get(i).map_or(Type::Error, |a| a.value.ty.clone());
        self.need_arg(args, 1, Want::Str, "`lookup`'s key");
        let (list, default) = (ty(0), ty(2));
        let fields = match &list {
            Type::List(t) => match **t {
                Type::Layout(l) => {
                    let fs = &self.ir.layout(l).fields;
                    let key = fs.iter().find(|f| f.name == "key" && f.ty == Type::Str);
                    let value = fs.iter().find(|f| f.name == "value" && f.repeat.is_none());
                    key.and(value).map(|v| v.ty.clone())
                }
                _ => None,
            },
            Type::Error => return Type::Error,
            _ => None,
        };
        let Some(value) = fields else {
            let shown = self.show_ty(&list);
            self.gap(
                args.first().map_or(span, |a| a.value.span),
                format!("`lookup` takes a list of records with a text `key` and a `value`, but this is {shown}"),
                "`lookup(kv, \"general.alignment\", 32)` over `kv: Kv repeat count(n)`, whose \
                 layout has `key: str size ..` and `value: ..` fields",
            );
            return Type::Error;
        };
        let int_cases = |ir: &Ir, t: &Type| match t {
            Type::Union(l, f) => match &ir.field(*l, *f).kind {
                FieldKind::Match { cases, .. } => {
                    cases.iter().any(|c| matches!(c.ty, Type::Int(_)))
                }
                _ => false,
            },
            _ => false,
        };
        match (&value, &default) {
            (_, Type::Error) | (Type::Error, _) => Type::Error,
            (Type::Int(_), Type::Int(_)) => Type::INT,
            (Type::Str, Type::Str) => Type::Str,
            (Type::Union(..), Type::Int(_)) if int_cases(&self.ir, &value) => Type::INT,
            _ => {
                let (v, d) = (self.show_ty(&value), self.show_ty(&default));
                self.gap(
                    args.get(2).map_or(span, |a| a.value.span),
                    format!("`lookup`'s default is {d}, but the records' values are {v}"),
                    "an integer default reads an integer `value` (or the integer cases of a \
                     `match` value), a text default a text `value`",
                );
                Type::Error
            }
        }
    }

    /// Reports argument `i` of a builtin call when it is not of the kind wanted.
    fn need_arg(&mut self, args: &[Arg], i: usize, want: Want, what: &str) {
        if let Some(a) = args.get(i) {
            self.need(&a.value, want, what);
        }
    }
}

fn lower_pickle(fmt: FormatId, p: &ast::Pickle) -> Pickle {
    let mut out = Pickle {
        docs: p.docs.clone(),
        format: fmt,
        name: p.name.name.clone(),
        protocol: p.protocol().map(|v| v.min(255) as u8),
        globals: Vec::new(),
        persistent: None,
        byte_ranges: false,
        codecs_encode: false,
        span: p.span,
    };
    for item in &p.items {
        match item {
            ast::PickleItem::Protocol(..) => {}
            ast::PickleItem::Option(o) => match o.name.as_str() {
                "byte_ranges" => out.byte_ranges = true,
                "codecs_encode" => out.codecs_encode = true,
                _ => {}
            },
            ast::PickleItem::Global {
                path, kind, params, ..
            } => {
                let kind = match (kind.name.as_str(), params.is_empty()) {
                    ("dict", true) => GlobalKind::Dict,
                    ("list", true) => GlobalKind::List,
                    ("set", true) => GlobalKind::Set,
                    ("tuple", true) => GlobalKind::Tuple,
                    ("class", true) => GlobalKind::Class,
                    ("object", true) => GlobalKind::Object,
                    ("apply", false) => GlobalKind::Apply {
                        params: params.iter().map(|x| x.name.clone()).collect(),
                    },
                    (k, _) => GlobalKind::Call {
                        kind: k.to_string(),
                        params: params.iter().map(|x| x.name.clone()).collect(),
                    },
                };
                out.globals.push(Global {
                    path: path.value.clone(),
                    wildcard: path.value.ends_with(".*"),
                    kind,
                });
            }
            ast::PickleItem::Persistent { kind, params, .. } => {
                out.persistent = Some((
                    kind.name.clone(),
                    params.iter().map(|x| x.name.clone()).collect(),
                ));
            }
        }
    }
    out
}

fn pattern(text: &str) -> Pattern {
    Pattern {
        text: text.to_string(),
        captures: pattern_captures(text)
            .into_iter()
            .map(String::from)
            .collect(),
    }
}

fn const_of(e: &ast::Expr) -> Option<Const> {
    Some(match &e.kind {
        ast::ExprKind::Int(v) => Const::Int(*v),
        ast::ExprKind::Str(s) => Const::Str(s.clone()),
        ast::ExprKind::Bytes(b) => Const::Bytes(b.clone()),
        ast::ExprKind::Bool(b) => Const::Bool(*b),
        ast::ExprKind::None => Const::None,
        _ => Const::Int(e.as_int()?),
    })
}
