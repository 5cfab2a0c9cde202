//! The resolved, typed intermediate representation of a checked schema.
//!
//! [`build`] lowers the files of a schema into one [`Ir`]: every item lives in an arena
//! of the `Ir` and is named by an id ([`FormatId`], [`LayoutId`], ...); every name an
//! expression or a declaration uses is resolved to its item (across files); every
//! expression is typed once ([`Expr`], [`Type`]); engines, codecs, detections, entry
//! properties and padding are enums. Code generators read this and never the AST.
//!
//! Lowering runs inside the checker, after its declaration rules and before the engine
//! rules and write plans over the IR: a schema the checker accepts lowers with no
//! [`Type::Error`] or [`ExprKind::Error`] left, and whatever lowering cannot resolve is
//! reported by the checker as a diagnostic.
//!
//! One part of the language is dynamically typed: values decoded from a pickle. Their type
//! is [`Type::Pickled`] (and [`Type::PickleCall`] for the objects of a call kind, whose
//! `.path` is a string and whose parameters are again `Pickled`): a pickle may hold any
//! value its declared globals build, so `t.size` or `t.storage.key` have no static type
//! beyond "a pickled value of declaration P". Everything else is typed precisely.
//!
//! What lowering reports (and the checker therefore rejects) in schemas that pass the
//! other checks: `if` branches of different types, an index the value does not support
//! (`x.descr[0]` on a string), a member the value does not have (`x.shape[0].y`,
//! `e.value` of an entry without `value`), an `include` whose value no mapping of the
//! format maps, and the mapped `segment` used as a name.

pub(crate) mod dump;
mod expr;
mod lower;
pub mod plan;
mod ty;

pub use dump::{dump, dump_format};
pub use expr::{
    named_arg, Arg, Builtin, Const, Expr, ExprKind, IndexKind, Member, Order, TensorKey, WriteVar,
};
pub use ty::{ByteOrder, Dtype, FloatTy, IntTy, Type};

use crate::ast::{Label, Span};

pub(crate) use lower::{lower, lower_with};
pub(crate) use plan::write_plan_gaps;

macro_rules! ids {
    ($($(#[$m:meta])* $name:ident;)*) => {$(
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(pub u32);
        impl $name {
            /// The index in its arena.
            pub fn index(self) -> usize {
                self.0 as usize
            }
        }
    )*};
}

ids! {
    /// A format: an index into [`Ir::formats`].
    FormatId;
    /// A table: an index into [`Ir::tables`].
    TableId;
    /// A dict: an index into [`Ir::dicts`].
    DictId;
    /// A layout: an index into [`Ir::layouts`].
    LayoutId;
    /// A field of a layout: an index into [`Layout::fields`].
    FieldId;
    /// A key of a dict: an index into [`Dict::keys`].
    KeyId;
    /// A protobuf message (nested ones included): an index into [`Ir::messages`].
    MessageId;
    /// A protobuf enum (nested ones included): an index into [`Ir::enums`].
    EnumId;
    /// A pickle declaration: an index into [`Ir::pickles`].
    PickleId;
    /// An entry: an index into [`Ir::entries`].
    EntryId;
    /// A tensor mapping: an index into [`Ir::mappings`].
    MappingId;
}

/// The whole schema, resolved and typed.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Ir {
    /// Formats, in file order then declaration order.
    pub formats: Vec<Format>,
    /// Every table.
    pub tables: Vec<Table>,
    /// Every dict.
    pub dicts: Vec<Dict>,
    /// Every layout.
    pub layouts: Vec<Layout>,
    /// Every message, nested ones included.
    pub messages: Vec<Message>,
    /// Every enum, nested ones included.
    pub enums: Vec<Enum>,
    /// Every pickle declaration.
    pub pickles: Vec<Pickle>,
    /// Every entry.
    pub entries: Vec<Entry>,
    /// Every tensor mapping.
    pub mappings: Vec<Mapping>,
    /// The text of each schema file, by index (what spans point into): messages and
    /// documentation quote expressions as written.
    pub sources: Vec<String>,
}

macro_rules! getters {
    ($($(#[$m:meta])* $fn_:ident, $id:ty, $field:ident, $ty:ty;)*) => {$(
        $(#[$m])*
        pub fn $fn_(&self, id: $id) -> &$ty {
            &self.$field[id.index()]
        }
    )*};
}

impl Ir {
    getters! {
        /// The format `id`.
        format, FormatId, formats, Format;
        /// The table `id`.
        table, TableId, tables, Table;
        /// The dict `id`.
        dict, DictId, dicts, Dict;
        /// The layout `id`.
        layout, LayoutId, layouts, Layout;
        /// The message `id`.
        message, MessageId, messages, Message;
        /// The enum `id`.
        enum_, EnumId, enums, Enum;
        /// The pickle declaration `id`.
        pickle, PickleId, pickles, Pickle;
        /// The entry `id`.
        entry, EntryId, entries, Entry;
        /// The mapping `id`.
        mapping, MappingId, mappings, Mapping;
    }

    /// The format with identifier `name`.
    pub fn format_named(&self, name: &str) -> Option<FormatId> {
        self.formats
            .iter()
            .position(|f| f.name == name)
            .map(|i| FormatId(i as u32))
    }

    /// The layout `name` of format `fmt`.
    pub fn layout_named(&self, fmt: FormatId, name: &str) -> Option<LayoutId> {
        self.format(fmt)
            .layouts
            .iter()
            .copied()
            .find(|&l| self.layout(l).name == name)
    }

    /// The text of `span` in the file of format `fmt`, as written (`numel >= 0`).
    pub fn text(&self, fmt: FormatId, span: Span) -> &str {
        self.sources
            .get(self.format(fmt).file)
            .and_then(|s| s.get(span.start..span.end))
            .unwrap_or_default()
    }

    /// Field `f` of layout `l`.
    pub fn field(&self, l: LayoutId, f: FieldId) -> &Field {
        &self.layout(l).fields[f.index()]
    }

    /// True when layout `l`'s writer reads the alignment a save asks for
    /// (`write_align(..)` in its fields' `pad`, `write` rules or `spare`).
    pub fn layout_reads_write_align(&self, l: LayoutId) -> bool {
        self.exprs_of(|o| o == ExprOwner::Layout(l))
            .iter()
            .any(|e| is_write_align(e))
    }

    /// True when format `fmt`'s writer aligns its tensors' data as the save asks: its
    /// written layout or its `write_order` reads `write_align(..)`.
    pub fn format_reads_write_align(&self, fmt: FormatId) -> bool {
        self.format(fmt).mappings.iter().any(|&m| {
            let m = self.mapping(m);
            let mut order = false;
            if let Some(o) = &m.write_order {
                o.walk(&mut |x| order |= is_write_align(x));
            }
            order || plan::root_layout(&m.source).is_some_and(|l| self.layout_reads_write_align(l))
        })
    }

    /// Every expression of the IR and all their sub-expressions.
    pub fn exprs(&self) -> Vec<&Expr> {
        self.exprs_of(|_| true)
    }

    /// Every expression, with its sub-expressions, of the items `keep` holds for
    /// (layouts, messages, entries, mappings).
    pub fn exprs_of(&self, keep: impl Fn(ExprOwner) -> bool) -> Vec<&Expr> {
        let mut out: Vec<&Expr> = Vec::new();
        for (i, l) in self.layouts.iter().enumerate() {
            if !keep(ExprOwner::Layout(LayoutId(i as u32))) {
                continue;
            }
            for f in &l.fields {
                if let FieldKind::Cond { cond: e, .. } | FieldKind::Match { tag: e, .. } = &f.kind {
                    out.push(e);
                }
                out.extend(f.checks.iter());
                out.extend(f.write.iter());
                out.extend(f.size.iter());
                out.extend(f.at.iter());
                out.extend(f.align.iter());
                if let Some(Repeat::Count(e)) = &f.repeat {
                    out.push(e);
                }
                if let Some(Codec::PyDict {
                    encoding, spare, ..
                }) = &f.codec
                {
                    out.extend(encoding.iter());
                    out.extend(spare.iter());
                }
                if let Some(p) = &f.pad {
                    out.push(&p.align);
                    out.extend(p.min.iter());
                }
            }
        }
        for (i, m) in self.messages.iter().enumerate() {
            if !keep(ExprOwner::Message(MessageId(i as u32))) {
                continue;
            }
            for f in &m.fields {
                out.extend(f.default.iter());
                out.extend(f.write.iter());
            }
        }
        for (i, e) in self.entries.iter().enumerate() {
            if !keep(ExprOwner::Entry(EntryId(i as u32))) {
                continue;
            }
            out.extend(e.align.iter());
            out.extend(e.check.iter());
            out.extend(e.write.iter());
            out.extend(e.split.iter());
        }
        for (i, m) in self.mappings.iter().enumerate() {
            if !keep(ExprOwner::Mapping(MappingId(i as u32))) {
                continue;
            }
            out.push(&m.source);
            out.extend(m.filter.iter());
            for s in &m.stmts {
                match s {
                    MappingStmt::Include { arg, .. } => out.push(arg),
                    MappingStmt::Set { value, .. } => out.push(value),
                }
            }
            out.extend(m.write.iter());
        }
        let mut all = Vec::new();
        for e in out {
            e.walk(&mut |x| all.push(x));
        }
        all
    }
}

/// True when `e` is a call of `write_align`.
fn is_write_align(e: &Expr) -> bool {
    matches!(
        e.kind,
        ExprKind::Call {
            func: Builtin::WriteAlign,
            ..
        }
    )
}

/// The item an expression belongs to ([`Ir::exprs_of`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExprOwner {
    /// A layout's field modifiers.
    Layout(LayoutId),
    /// A message's field defaults and write values.
    Message(MessageId),
    /// An entry's properties.
    Entry(EntryId),
    /// A tensor mapping.
    Mapping(MappingId),
}

/// A format.
#[derive(Debug, Clone, PartialEq)]
pub struct Format {
    /// `///` lines.
    pub docs: Vec<String>,
    /// Its identifier.
    pub name: String,
    /// Its public name (the identifier unless given).
    pub public_name: String,
    /// The index of the file that defines it, in the schema's files.
    pub file: usize,
    /// The formats its file names in `use` (and that exist).
    pub uses: Vec<FormatId>,
    /// Its engine.
    pub engine: Engine,
    /// File extensions, without dots.
    pub extensions: Vec<String>,
    /// Declared `read_only;`: read, never written (no writer, no write plans).
    pub read_only: bool,
    /// Detection rules.
    pub detects: Vec<Detect>,
    /// Its tables, in order.
    pub tables: Vec<TableId>,
    /// Its dicts.
    pub dicts: Vec<DictId>,
    /// Its layouts.
    pub layouts: Vec<LayoutId>,
    /// Its top-level messages (nested ones hang from them).
    pub messages: Vec<MessageId>,
    /// Its top-level enums.
    pub enums: Vec<EnumId>,
    /// Its pickle declarations.
    pub pickles: Vec<PickleId>,
    /// Its entries.
    pub entries: Vec<EntryId>,
    /// Its tensor mappings, in order.
    pub mappings: Vec<MappingId>,
    /// Its `value` mappings (kv formats: values that are not tensors), in order; their
    /// statements set `name`, `data`, `part` and `parts`.
    pub values: Vec<MappingId>,
    /// The whole declaration.
    pub span: Span,
    /// The format's identifier in it.
    pub name_span: Span,
}

/// Key-value database backends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KvBackend {
    /// A flat file of records described by a layout (MiniDB).
    Records,
    /// LMDB.
    Lmdb,
    /// LevelDB.
    Leveldb,
}

/// How a kv backend opens its databases: the engine's integer arguments (`map_size =
/// N`), each of one backend (the checker sees to it); `None`: the backend's default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct KvOpen {
    /// LMDB: the map size, in bytes (the most a written environment grows to).
    pub map_size: Option<u64>,
    /// LevelDB: bytes written to the log before they are sorted into a table.
    pub write_buffer_size: Option<u64>,
    /// LevelDB: the most table files kept open at once.
    pub max_open_files: Option<u64>,
    /// LevelDB: the size of a table's blocks, in bytes.
    pub block_size: Option<u64>,
}

impl KvOpen {
    /// The engine arguments, by name, each with the backend it belongs to.
    pub const ARGS: &'static [(&'static str, KvBackend)] = &[
        ("map_size", KvBackend::Lmdb),
        ("write_buffer_size", KvBackend::Leveldb),
        ("max_open_files", KvBackend::Leveldb),
        ("block_size", KvBackend::Leveldb),
    ];

    /// The argument named `name`, to set.
    pub fn arg_mut(&mut self, name: &str) -> Option<&mut Option<u64>> {
        match name {
            "map_size" => Some(&mut self.map_size),
            "write_buffer_size" => Some(&mut self.write_buffer_size),
            "max_open_files" => Some(&mut self.max_open_files),
            "block_size" => Some(&mut self.block_size),
            _ => None,
        }
    }

    /// The arguments given, by name, in [`KvOpen::ARGS`]'s order.
    pub fn given(&self) -> Vec<(&'static str, u64)> {
        let all = [
            self.map_size,
            self.write_buffer_size,
            self.max_open_files,
            self.block_size,
        ];
        Self::ARGS
            .iter()
            .zip(all)
            .filter_map(|(&(name, _), v)| Some((name, v?)))
            .collect()
    }
}

/// A format's engine.
#[derive(Debug, Clone, PartialEq)]
pub enum Engine {
    /// A single file laid out by the format's `File` layout.
    File,
    /// A zip archive.
    Zip,
    /// One protobuf document.
    Protobuf {
        /// The root message.
        root: MessageId,
    },
    /// A key-value database.
    Kv {
        /// The backend.
        backend: KvBackend,
        /// The kv format whose entries and mappings map the records (`schema = F`), when
        /// not this one.
        schema: Option<FormatId>,
        /// How the backend opens a database.
        open: KvOpen,
    },
    /// Not resolved: only in the IR of a schema the checker rejected.
    Error,
}

/// How `detect entries` matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EntriesMode {
    /// Every entry matches.
    All,
    /// Some entry matches.
    Any,
    /// No entry matches.
    None,
}

/// A detection rule.
#[derive(Debug, Clone, PartialEq)]
pub enum Detect {
    /// `detect magic b"..." at N;`
    Magic {
        /// The bytes.
        bytes: Vec<u8>,
        /// Their offset.
        at: u64,
        /// The bytes literal as written (`b"PK\x03\x04"`).
        span: Span,
    },
    /// `detect magic any [b"...", ...] at N;`: one of the byte strings at the offset.
    MagicAny {
        /// The alternatives, in order, each with its bytes literal as written.
        alternatives: Vec<(Vec<u8>, Span)>,
        /// Their offset.
        at: u64,
    },
    /// `detect pickle(P, N);`
    Pickle {
        /// The declaration whose call globals the first bytes must name.
        pickle: PickleId,
        /// How many bytes from the start are searched.
        window: u64,
    },
    /// `detect entries all|any|none "pattern";`
    Entries {
        /// How entries must match.
        mode: EntriesMode,
        /// The pattern.
        pattern: Pattern,
    },
}

/// An entry-name pattern with `{captures}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    /// The pattern as written.
    pub text: String,
    /// Its capture names, in order.
    pub captures: Vec<String>,
}

/// The key type of a table.
pub use crate::ast::KeyKind;

/// A table key.
pub use crate::ast::TableKey;

/// `table name: str|int -> dtype { ... }`
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    /// `///` lines.
    pub docs: Vec<String>,
    /// The format it belongs to.
    pub format: FormatId,
    /// Its name.
    pub name: String,
    /// Its key type.
    pub key: KeyKind,
    /// Rows in order.
    pub rows: Vec<TableRow>,
    /// Where it is declared.
    pub span: Span,
}

/// A row of a table.
#[derive(Debug, Clone, PartialEq)]
pub struct TableRow {
    /// The key.
    pub key: TableKey,
    /// The dtype.
    pub dtype: Dtype,
    /// The byte order, when the row names one.
    pub endian: Option<ByteOrder>,
}

/// `dict Name { key: type; ... }`
#[derive(Debug, Clone, PartialEq)]
pub struct Dict {
    /// `///` lines.
    pub docs: Vec<String>,
    /// The format it belongs to.
    pub format: FormatId,
    /// Its name.
    pub name: String,
    /// Its keys, in write order.
    pub keys: Vec<DictKey>,
    /// Where it is declared.
    pub span: Span,
}

/// A key of a dict.
#[derive(Debug, Clone, PartialEq)]
pub struct DictKey {
    /// `///` lines.
    pub docs: Vec<String>,
    /// The key as it appears in the encoded data.
    pub key: String,
    /// True for `optional`.
    pub optional: bool,
    /// True for the unquoted key `rest` (a `map<str, V>`, the last key): it holds every
    /// item whose key is not declared before it.
    pub rest: bool,
    /// The value's type.
    pub ty: Type,
    /// Where it is declared.
    pub span: Span,
}

/// `layout Name endian { fields }`
#[derive(Debug, Clone, PartialEq)]
pub struct Layout {
    /// `///` lines.
    pub docs: Vec<String>,
    /// The format it belongs to.
    pub format: FormatId,
    /// Its name.
    pub name: String,
    /// The default byte order of its numbers.
    pub endian: ByteOrder,
    /// Its fields in file order.
    pub fields: Vec<Field>,
    /// Where it is declared.
    pub span: Span,
}

/// What a layout field holds, as laid out.
#[derive(Debug, Clone, PartialEq)]
pub enum FieldKind {
    /// Fixed bytes.
    Magic(Vec<u8>),
    /// A value of a named type: a number, `bytes`, `payload`, `str`, a nested layout, or
    /// a dict/message decoded by the field's codec. Its type is [`Field::ty`] (the item
    /// type when the field repeats).
    Value,
    /// An integer type chosen by a condition over earlier fields.
    Cond {
        /// The condition.
        cond: Expr,
        /// The type when true.
        then: IntTy,
        /// The type when false.
        otherwise: IntTy,
    },
    /// A tagged union: each value's type chosen by a tag (an integer over earlier fields).
    /// The field's item type is [`Type::Union`] of itself.
    Match {
        /// The tag.
        tag: Expr,
        /// The cases, in order.
        cases: Vec<MatchCase>,
    },
}

/// One case of a tagged union.
#[derive(Debug, Clone, PartialEq)]
pub struct MatchCase {
    /// The tag's value.
    pub tag: i128,
    /// The type of a value of this tag: a number, `bool` or a layout.
    pub ty: Type,
    /// Where it is declared.
    pub span: Span,
}

/// A layout field with its read and write rules.
#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    /// `///` lines.
    pub docs: Vec<String>,
    /// Its name.
    pub name: String,
    /// How it is laid out.
    pub kind: FieldKind,
    /// The type of one value (the item type when the field repeats).
    pub item_ty: Type,
    /// The type of the field's value in expressions: `item_ty`, or a list of it when the
    /// field repeats.
    pub ty: Type,
    /// `check` conditions (boolean), in order.
    pub checks: Vec<Expr>,
    /// The `write = ...` rule.
    pub write: Option<Expr>,
    /// The implied constant (`check minor == 0` writes 0).
    pub implied: Option<Const>,
    /// `size` (integer, over earlier fields).
    pub size: Option<Expr>,
    /// `rest`: every remaining byte.
    pub rest: bool,
    /// `repeat`.
    pub repeat: Option<Repeat>,
    /// `align` (integer).
    pub align: Option<Expr>,
    /// `at` (integer).
    pub at: Option<Expr>,
    /// `codec`.
    pub codec: Option<Codec>,
    /// `pad(...)`.
    pub pad: Option<Pad>,
    /// The whole field.
    pub span: Span,
}

/// A repetition.
#[derive(Debug, Clone, PartialEq)]
pub enum Repeat {
    /// Until the bytes run out.
    UntilEof,
    /// A counted number of times.
    Count(Expr),
}

/// How a field's or entry's bytes decode.
#[derive(Debug, Clone, PartialEq)]
pub enum Codec {
    /// A Python literal dict (`pydict(encoding = .., spare = .., trailing_comma = ..)`).
    PyDict {
        /// The text encoding (a string expression: `"latin1"`, `"utf8"`).
        encoding: Option<Expr>,
        /// Spaces appended on write (integer, write side).
        spare: Option<Expr>,
        /// On write, every item is followed by `, `, the last included (NumPy's header
        /// dict); otherwise items are separated as Python's `repr` separates them.
        trailing_comma: bool,
    },
    /// JSON (`json(unique_keys = true)`: an object that repeats a key is an error, as the
    /// safetensors crate refuses it; otherwise one item per key, as Python's `json`).
    Json {
        /// A repeated key is an error.
        unique_keys: bool,
    },
    /// A pickle, with declaration `P`.
    Pickle(PickleId),
    /// A protobuf message.
    Protobuf(MessageId),
}

/// `pad(align = N, fill = b" ", last = b"\n", min = M)`.
#[derive(Debug, Clone, PartialEq)]
pub struct Pad {
    /// The alignment (integer).
    pub align: Expr,
    /// The fill byte (default: a space).
    pub fill: u8,
    /// The last byte, when given.
    pub last: Option<u8>,
    /// The least count of bytes (integer).
    pub min: Option<Expr>,
}

/// A protobuf message.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// `///` lines.
    pub docs: Vec<String>,
    /// The format it belongs to.
    pub format: FormatId,
    /// Its name.
    pub name: String,
    /// Its dotted path in the format (`TensorProto.Segment`).
    pub path: String,
    /// The message it is nested in.
    pub parent: Option<MessageId>,
    /// Its fields.
    pub fields: Vec<MessageField>,
    /// Nested messages.
    pub messages: Vec<MessageId>,
    /// Nested enums.
    pub enums: Vec<EnumId>,
    /// Where it is declared.
    pub span: Span,
}

impl Message {
    /// The index of field `name`.
    pub fn field_index(&self, name: &str) -> Option<usize> {
        self.fields.iter().position(|f| f.name == name)
    }
}

/// Protobuf scalar types, as encoded on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProtoScalar {
    /// `double`.
    Double,
    /// `float`.
    Float,
    /// `int32`.
    Int32,
    /// `int64`.
    Int64,
    /// `uint32`.
    Uint32,
    /// `uint64`.
    Uint64,
    /// `sint32`.
    Sint32,
    /// `sint64`.
    Sint64,
    /// `fixed32`.
    Fixed32,
    /// `fixed64`.
    Fixed64,
    /// `sfixed32`.
    Sfixed32,
    /// `sfixed64`.
    Sfixed64,
    /// `bool`.
    Bool,
    /// `string`.
    String,
    /// `bytes`.
    Bytes,
}

impl ProtoScalar {
    /// The scalar named `name`.
    pub fn from_name(name: &str) -> Option<ProtoScalar> {
        use ProtoScalar::*;
        Some(match name {
            "double" => Double,
            "float" => Float,
            "int32" => Int32,
            "int64" => Int64,
            "uint32" => Uint32,
            "uint64" => Uint64,
            "sint32" => Sint32,
            "sint64" => Sint64,
            "fixed32" => Fixed32,
            "fixed64" => Fixed64,
            "sfixed32" => Sfixed32,
            "sfixed64" => Sfixed64,
            "bool" => Bool,
            "string" => String,
            "bytes" => Bytes,
            _ => return None,
        })
    }

    /// The value type of one value.
    pub fn ty(self) -> Type {
        use ProtoScalar::*;
        match self {
            Double => Type::Float(FloatTy {
                bytes: 8,
                endian: None,
            }),
            Float => Type::Float(FloatTy {
                bytes: 4,
                endian: None,
            }),
            Int32 | Sint32 | Sfixed32 => Type::Int(IntTy::sized(4, true)),
            Int64 | Sint64 | Sfixed64 => Type::Int(IntTy::sized(8, true)),
            Uint32 | Fixed32 => Type::Int(IntTy::sized(4, false)),
            Uint64 | Fixed64 => Type::Int(IntTy::sized(8, false)),
            Bool => Type::Bool,
            String => Type::Str,
            Bytes => Type::Bytes,
        }
    }
}

/// The declared type of a message field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProtoType {
    /// A scalar.
    Scalar(ProtoScalar),
    /// A message (possibly of another format).
    Message(MessageId),
    /// An enum.
    Enum(EnumId),
}

/// A field of a message.
#[derive(Debug, Clone, PartialEq)]
pub struct MessageField {
    /// `///` lines.
    pub docs: Vec<String>,
    /// Its name.
    pub name: String,
    /// Cardinality.
    pub label: Label,
    /// Its declared type.
    pub proto: ProtoType,
    /// The value type in expressions (a list for repeated fields).
    pub ty: Type,
    /// Field number.
    pub tag: u32,
    /// `[packed]`.
    pub packed: bool,
    /// `[default = ..]`.
    pub default: Option<Expr>,
    /// `[write = ..]`: the value written.
    pub write: Option<Expr>,
    /// Where it is declared.
    pub span: Span,
}

/// A protobuf enum.
#[derive(Debug, Clone, PartialEq)]
pub struct Enum {
    /// `///` lines.
    pub docs: Vec<String>,
    /// The format it belongs to.
    pub format: FormatId,
    /// Its name.
    pub name: String,
    /// The message it is nested in.
    pub parent: Option<MessageId>,
    /// Values in order.
    pub values: Vec<(String, i64)>,
    /// Where it is declared.
    pub span: Span,
}

/// What a pickle global builds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GlobalKind {
    /// A mapping type (`OrderedDict`).
    Dict,
    /// A list.
    List,
    /// A set.
    Set,
    /// A tuple.
    Tuple,
    /// A value that may be named but not called.
    Class,
    /// A class whose instances carry attributes.
    Object,
    /// A function that calls its argument `func` with its argument `args`, a tuple
    /// (`_rebuild_from_type_v2(func, new_type, args, state)`): read as that call.
    Apply {
        /// Parameter names (`func` and `args` among them).
        params: Vec<String>,
    },
    /// A call recorded with its positional arguments under these names
    /// (`tensor(storage, offset, ...)`).
    Call {
        /// The kind's name.
        kind: String,
        /// Parameter names.
        params: Vec<String>,
    },
}

/// An allowed pickle global.
#[derive(Debug, Clone, PartialEq)]
pub struct Global {
    /// `module.qualname`, or `module.*`.
    pub path: String,
    /// True for `module.*` (every global of the module and its submodules).
    pub wildcard: bool,
    /// What it builds.
    pub kind: GlobalKind,
}

/// A pickle declaration.
#[derive(Debug, Clone, PartialEq)]
pub struct Pickle {
    /// `///` lines.
    pub docs: Vec<String>,
    /// The format it belongs to.
    pub format: FormatId,
    /// Its name.
    pub name: String,
    /// The protocol written (and the highest read).
    pub protocol: Option<u8>,
    /// Allowed globals.
    pub globals: Vec<Global>,
    /// Persistent ids: their kind and item names.
    pub persistent: Option<(String, Vec<String>)>,
    /// `byte_ranges;`: byte strings stay in the file as ranges (array data).
    pub byte_ranges: bool,
    /// `codecs_encode;`: `_codecs.encode(text, 'latin1')` and `bytes()` are allowed.
    pub codecs_encode: bool,
    /// Where it is declared.
    pub span: Span,
}

impl Pickle {
    /// The parameters of the call kind `kind` (the union over its globals, in order).
    pub fn kind_params(&self, kind: &str) -> Option<Vec<&str>> {
        let mut out: Vec<&str> = Vec::new();
        let mut found = false;
        for g in &self.globals {
            if let GlobalKind::Call { kind: k, params } = &g.kind {
                if k == kind {
                    found = true;
                    for p in params {
                        if !out.contains(&p.as_str()) {
                            out.push(p);
                        }
                    }
                }
            }
        }
        found.then_some(out)
    }
}

/// Compression methods of zip members.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Compression {
    /// Stored.
    Stored,
    /// Deflate.
    Deflate,
}

/// What an entry's content is.
#[derive(Debug, Clone, PartialEq)]
pub enum Content {
    /// Raw bytes.
    Bytes,
    /// UTF-8 text (`text;`).
    Text,
    /// Laid out by a layout (`layout npy.File;`).
    Layout(LayoutId),
    /// A kv record's value (`value M;`): a message, dict or layout.
    Value(Type),
    /// Decoded by a codec (`codec pickle(P);`).
    Codec(Codec),
}

/// `entry name "pattern" { props }`
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// `///` lines.
    pub docs: Vec<String>,
    /// The format it belongs to.
    pub format: FormatId,
    /// Its name.
    pub name: String,
    /// Its pattern.
    pub pattern: Pattern,
    /// `repeated;`
    pub repeated: bool,
    /// `optional;`
    pub optional: bool,
    /// `strict;`
    pub strict: bool,
    /// What its content is.
    pub content: Content,
    /// The type of `e.content` in expressions.
    pub content_ty: Type,
    /// Accepted compressions; the first is written.
    pub compression: Vec<Compression>,
    /// `align N;` (integer).
    pub align: Option<Expr>,
    /// `check EXPR;` (boolean).
    pub check: Option<Expr>,
    /// `write = EXPR;`: the content written.
    pub write: Option<Expr>,
    /// `write_name = "..";`
    pub write_name: Option<String>,
    /// `preferred "..";`
    pub preferred: Option<Pattern>,
    /// `split = N;` (integer): records hold at most this many elements.
    pub split: Option<Expr>,
    /// The `///` lines of its documented properties: property name and lines.
    pub prop_docs: Vec<(String, Vec<String>)>,
    /// The whole entry.
    pub span: Span,
}

/// A statement of a mapping, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum MappingStmt {
    /// `include F.tensor(arg);`
    Include {
        /// The format.
        format: FormatId,
        /// The mapping of `format` applied: its first mapping whose binding has the type
        /// of `arg`.
        mapping: MappingId,
        /// The value.
        arg: Expr,
    },
    /// `key = value;`
    Set {
        /// The property.
        key: TensorKey,
        /// Its value.
        value: Expr,
    },
}

/// `tensor from source as binding [where filter] { stmts }`
#[derive(Debug, Clone, PartialEq)]
pub struct Mapping {
    /// `///` lines.
    pub docs: Vec<String>,
    /// The format it belongs to.
    pub format: FormatId,
    /// What it iterates: a layout record, an entry, or a list, map or single value.
    pub source: Expr,
    /// The binding's name.
    pub binding: String,
    /// The type of the value bound: an item of the source.
    pub binding_ty: Type,
    /// Items kept (boolean).
    pub filter: Option<Expr>,
    /// Statements in order.
    pub stmts: Vec<MappingStmt>,
    /// `write = ...`: the value written per tensor (a message, a pickle object).
    pub write: Option<Expr>,
    /// `write_order = [K, ..]` (a several-tensor `file` writer): the tensors are written
    /// in the order of these keys (integers or text, over the tensor's `name`, `dtype`,
    /// `shape`), then in the order they were added.
    pub write_order: Option<Expr>,
    /// The whole mapping.
    pub span: Span,
}

impl Mapping {
    /// The value assigned to `key` by this mapping itself (not by includes).
    pub fn key(&self, key: TensorKey) -> Option<&Expr> {
        self.stmts.iter().rev().find_map(|s| match s {
            MappingStmt::Set { key: k, value } if *k == key => Some(value),
            _ => None,
        })
    }

    /// True when the mapping's `data` is a pickled byte string of the object it iterates
    /// (`data = a.state[4];`, a NumPy array's bytes): a tensor whose bytes the pickle
    /// holds itself, not a record or member of the file.
    pub fn data_in_pickle(&self) -> bool {
        self.key(TensorKey::Data).is_some_and(|d| {
            let mut field = false;
            d.walk(&mut |x| field |= x.field_of().is_some());
            matches!(d.ty, Type::Pickled(_)) && !field
        })
    }
}

/// Builds the IR of a schema. For a schema the checker accepted, nothing in the result is
/// [`Type::Error`] or [`ExprKind::Error`].
pub fn build(schema: &crate::Schema) -> Ir {
    lower(&schema.files).0
}
