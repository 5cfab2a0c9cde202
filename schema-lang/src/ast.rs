//! The syntax tree of a `.fmt` file. Every node carries the byte span of its source text,
//! so that diagnostics can point at it.

use std::path::PathBuf;

/// A byte range `[start, end)` in a schema file's text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Span {
    /// First byte.
    pub start: usize,
    /// One past the last byte.
    pub end: usize,
}

/// A name with its span.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Ident {
    /// The name.
    pub name: String,
    /// Where it is written.
    pub span: Span,
}

/// A string literal with its span.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StrLit {
    /// The decoded value.
    pub value: String,
    /// Where it is written.
    pub span: Span,
}

/// A byte-string literal (`b"\x93NUMPY"`) with its span.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BytesLit {
    /// The decoded bytes.
    pub value: Vec<u8>,
    /// Where it is written.
    pub span: Span,
}

/// One parsed `.fmt` file.
#[derive(Debug, Clone, PartialEq)]
pub struct SchemaFile {
    /// The file's path, as given to the parser.
    pub path: PathBuf,
    /// The file's text.
    pub source: String,
    /// `//!` lines at the top of the file.
    pub docs: Vec<String>,
    /// `use other_format;` declarations, wherever they appear at top level.
    pub uses: Vec<Ident>,
    /// The formats the file defines, in order.
    pub formats: Vec<Format>,
}

/// `format name ["public-name"] { items }`.
#[derive(Debug, Clone, PartialEq)]
pub struct Format {
    /// `///` lines before the format.
    pub docs: Vec<String>,
    /// The format's identifier (a Rust module name is derived from it).
    pub name: Ident,
    /// The format's public name (CLI `--to`, JSON `format`) when it differs from `name`
    /// (`"caffe2-minidb"`); otherwise `None` and the public name is `name`.
    pub public_name: Option<StrLit>,
    /// Its items, in order.
    pub items: Vec<Item>,
    /// The whole declaration.
    pub span: Span,
}

/// An item of a format.
#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    /// `engine kind[(args)];`
    Engine(Engine),
    /// `extensions ["npy", ...];`
    Extensions(Vec<StrLit>),
    /// `read_only;`: the format is read, never written (no writer is generated, and the
    /// checker's write-side rules do not apply).
    ReadOnly(Span),
    /// `detect ...;`
    Detect(Detect),
    /// `table name: str|int -> dtype { ... }`
    Table(Table),
    /// `dict Name { key: type; ... }` — a record decoded by a codec (Python literal, JSON).
    Dict(Dict),
    /// `layout Name endian { fields }`
    Layout(Layout),
    /// `message Name { fields }` (protobuf)
    Message(Message),
    /// `enum Name { A = 0; ... }` (protobuf)
    Enum(EnumDecl),
    /// `pickle Name { ... }`
    Pickle(Pickle),
    /// `entry name "pattern" { props }`
    Entry(Entry),
    /// `tensor from expr as x [where expr] { stmts }`
    Tensor(TensorMap),
    /// `value from expr as x [where expr] { assignments }` (kv formats): values that are
    /// not tensors, read as a tensor mapping is; its statements are assignments of
    /// `name`, `data`, `part` and `parts`.
    Value(TensorMap),
}

/// `engine kind[(args)];`: `file`, `zip`, `protobuf(root = Msg)`, `kv(backend = lmdb)`.
#[derive(Debug, Clone, PartialEq)]
pub struct Engine {
    /// The engine kind.
    pub kind: Ident,
    /// Its arguments.
    pub args: Vec<Arg>,
    /// The whole item.
    pub span: Span,
}

/// A detection rule.
#[derive(Debug, Clone, PartialEq)]
pub enum Detect {
    /// `detect magic b"..." at N;`
    Magic {
        /// The bytes.
        bytes: BytesLit,
        /// Their offset from the start of the file.
        at: u64,
        /// The whole item.
        span: Span,
    },
    /// `detect magic any [b"...", b"..."] at N;`: one of the byte strings at the offset
    /// (a format whose first bytes take a few known forms).
    MagicAny {
        /// The alternatives, in order.
        alternatives: Vec<BytesLit>,
        /// The list as written, brackets included.
        list: Span,
        /// Their offset from the start of the file.
        at: u64,
        /// The whole item.
        span: Span,
    },
    /// `detect pickle(P, N);` — the file starts as a pickle whose first `N` bytes name
    /// one of the calls `P` declares (a pickle of arrays).
    Pickle {
        /// The pickle declaration.
        pickle: Ident,
        /// How many bytes from the start are searched.
        window: u64,
        /// The whole item.
        span: Span,
    },
    /// `detect entries all|any|none "pattern";` (the zip engine)
    Entries {
        /// True for `all`, false for `any` and `none`.
        all: bool,
        /// True for `none`: no member may match (tells a format from a more specific
        /// one stored in the same container).
        none: bool,
        /// The entry-name pattern.
        pattern: StrLit,
        /// The whole item.
        span: Span,
    },
}

/// The key type of a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    /// String keys.
    Str,
    /// Integer keys.
    Int,
}

/// Byte order written in a schema: `little`/`le` or `big`/`be`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endian {
    /// Little-endian.
    Little,
    /// Big-endian.
    Big,
}

/// `table name: str -> dtype { "<f4" => f32 le, ... }`
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    /// `///` lines.
    pub docs: Vec<String>,
    /// The table's name.
    pub name: Ident,
    /// Key type.
    pub key_kind: KeyKind,
    /// Rows in order.
    pub rows: Vec<TableRow>,
    /// The whole item.
    pub span: Span,
}

/// A table key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TableKey {
    /// A string key.
    Str(String),
    /// An integer key.
    Int(i128),
}

/// `key => dtype [le|be]`
#[derive(Debug, Clone, PartialEq)]
pub struct TableRow {
    /// The key.
    pub key: TableKey,
    /// The dtype name as written (checked against the canonical names).
    pub dtype: Ident,
    /// The byte order, when the row names one.
    pub endian: Option<Endian>,
    /// The whole row.
    pub span: Span,
}

/// A reference to a type: `u16`, `str`, `tuple<u64>`, `map<str, Entry>`, `npy.File`.
#[derive(Debug, Clone, PartialEq)]
pub struct TypeRef {
    /// The (possibly qualified) name: `["npy", "File"]`.
    pub path: Vec<Ident>,
    /// Generic arguments.
    pub args: Vec<TypeRef>,
    /// Where it is written.
    pub span: Span,
}

/// `dict Name { key: [optional] type; ... }`
#[derive(Debug, Clone, PartialEq)]
pub struct Dict {
    /// `///` lines.
    pub docs: Vec<String>,
    /// The record's name.
    pub name: Ident,
    /// Its keys, in write order.
    pub fields: Vec<DictField>,
    /// The whole item.
    pub span: Span,
}

/// A key of a dict: `descr: str;` or `"__metadata__": optional map<str, str>;`
#[derive(Debug, Clone, PartialEq)]
pub struct DictField {
    /// `///` lines.
    pub docs: Vec<String>,
    /// The key as it appears in the encoded data.
    pub key: String,
    /// True when the key was written as a string literal (not a valid identifier).
    pub quoted: bool,
    /// The key's span.
    pub key_span: Span,
    /// True for `optional`.
    pub optional: bool,
    /// The value's type.
    pub ty: TypeRef,
    /// The whole field.
    pub span: Span,
}

/// `layout Name little|big { fields }`
#[derive(Debug, Clone, PartialEq)]
pub struct Layout {
    /// `///` lines.
    pub docs: Vec<String>,
    /// The layout's name.
    pub name: Ident,
    /// Default byte order of its numbers.
    pub endian: Endian,
    /// Fields in file order.
    pub fields: Vec<Field>,
    /// The whole item.
    pub span: Span,
}

/// A layout field: `name: type modifiers;`
#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    /// `///` lines.
    pub docs: Vec<String>,
    /// The field's name.
    pub name: Ident,
    /// Its type.
    pub ty: FieldType,
    /// Its modifiers, in order.
    pub modifiers: Vec<Modifier>,
    /// The whole field.
    pub span: Span,
}

/// The type of a layout field.
#[derive(Debug, Clone, PartialEq)]
pub enum FieldType {
    /// `magic b"..."`: fixed bytes.
    Magic(BytesLit),
    /// A named type: `u8`..`u64`, `i8`..`i64`, `f32`, `f64`, `bytes`, `payload`, a dict, a
    /// layout, or a qualified `other.Layout`.
    Named(TypeRef),
    /// `if cond { T } else { U }` (numeric types).
    Cond {
        /// The condition, over earlier fields.
        cond: Expr,
        /// Type when true.
        then: TypeRef,
        /// Type when false.
        otherwise: TypeRef,
        /// The whole type.
        span: Span,
    },
    /// `match tag { 0 => u8, 8 => Str, ... }`: a tagged union, the type of each value
    /// chosen by the tag, an integer over earlier fields.
    Match {
        /// The tag.
        tag: Expr,
        /// The cases, in order.
        cases: Vec<MatchCase>,
        /// The whole type.
        span: Span,
    },
}

/// One case of a tagged union: `8 => Str`.
#[derive(Debug, Clone, PartialEq)]
pub struct MatchCase {
    /// The tag's value.
    pub tag: i128,
    /// The type of a value of this tag.
    pub ty: TypeRef,
    /// The whole case.
    pub span: Span,
}

/// A modifier of a layout field.
#[derive(Debug, Clone, PartialEq)]
pub enum Modifier {
    /// `check expr`: a validity condition on read (and on write).
    Check(Expr),
    /// `write = expr`: how the field is computed when writing.
    Write(Expr),
    /// `size expr`: the field's size in bytes.
    Size(Expr),
    /// `codec name[(args)]`: how the field's bytes decode into its type.
    Codec {
        /// Codec name: `pydict`, `json`, `pickle`, `protobuf`.
        name: Ident,
        /// Arguments.
        args: Vec<Arg>,
        /// The whole modifier.
        span: Span,
    },
    /// `pad(align = N, fill = b" ", last = b"\n")`: on write, pad the field so that it
    /// ends at a multiple of `align` from the layout's start.
    Pad {
        /// Arguments.
        args: Vec<Arg>,
        /// The whole modifier.
        span: Span,
    },
    /// `rest`: the field takes every remaining byte.
    Rest(Span),
    /// `repeat until_eof` or `repeat count(expr)`.
    Repeat(Repeat),
    /// `align expr`: the field starts at a multiple of this from the layout's start.
    Align(Expr),
    /// `at expr`: the field starts at this offset from the layout's start.
    At(Expr),
}

/// A repetition.
#[derive(Debug, Clone, PartialEq)]
pub enum Repeat {
    /// Until the bytes run out.
    UntilEof(Span),
    /// A counted number of times.
    Count(Expr),
}

/// `message Name { fields, nested messages and enums }` (protobuf).
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// `///` lines.
    pub docs: Vec<String>,
    /// The message name.
    pub name: Ident,
    /// Its fields.
    pub fields: Vec<MessageField>,
    /// Nested messages.
    pub messages: Vec<Message>,
    /// Nested enums.
    pub enums: Vec<EnumDecl>,
    /// The whole item.
    pub span: Span,
}

/// Protobuf field cardinality.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Label {
    /// `optional`
    Optional,
    /// `required`
    Required,
    /// `repeated`
    Repeated,
}

/// `name: label type = tag [options];`
#[derive(Debug, Clone, PartialEq)]
pub struct MessageField {
    /// `///` lines.
    pub docs: Vec<String>,
    /// Field name.
    pub name: Ident,
    /// Cardinality.
    pub label: Label,
    /// Scalar (`int64`, `float`, `bytes`, `string`, ...), enum or message type.
    pub ty: TypeRef,
    /// Field number.
    pub tag: u32,
    /// Options such as `packed` or `default = FLOAT`.
    pub options: Vec<Arg>,
    /// The whole field.
    pub span: Span,
}

/// `enum Name { A = 0; B = 1; }`
#[derive(Debug, Clone, PartialEq)]
pub struct EnumDecl {
    /// `///` lines.
    pub docs: Vec<String>,
    /// The enum name.
    pub name: Ident,
    /// Values in order.
    pub values: Vec<(Ident, i64)>,
    /// The whole item.
    pub span: Span,
}

/// `pickle Name { protocol 2; global "m.f" => kind(params); persistent kind(params); }`
#[derive(Debug, Clone, PartialEq)]
pub struct Pickle {
    /// `///` lines.
    pub docs: Vec<String>,
    /// The name.
    pub name: Ident,
    /// Items in order.
    pub items: Vec<PickleItem>,
    /// The whole item.
    pub span: Span,
}

/// One line of a pickle declaration.
#[derive(Debug, Clone, PartialEq)]
pub enum PickleItem {
    /// `protocol N;` — the protocol written.
    Protocol(u64, Span),
    /// `global "module.name" => kind(params);` — an allowed global and what it builds.
    Global {
        /// `module.qualname` of the global.
        path: StrLit,
        /// What calling it builds (`dict`, `tensor`, `parameter`, ...).
        kind: Ident,
        /// Names of its positional arguments.
        params: Vec<Ident>,
        /// The whole line.
        span: Span,
    },
    /// `persistent kind(params);` — the shape of persistent ids.
    Persistent {
        /// What a persistent id refers to (`storage`).
        kind: Ident,
        /// Names of the id tuple's items.
        params: Vec<Ident>,
        /// The whole line.
        span: Span,
    },
    /// `byte_ranges;`, `codecs_encode;` — a reading option (see
    /// [`PICKLE_OPTIONS`]).
    Option(Ident),
}

/// The options a pickle declaration may set (`byte_ranges;`), each with what it means.
pub const PICKLE_OPTIONS: &[(&str, &str)] = &[
    (
        "byte_ranges",
        "byte strings stay in the file (array data), not copied",
    ),
    (
        "codecs_encode",
        "`_codecs.encode(text, 'latin1')` and `bytes()` build byte strings",
    ),
];

/// `entry name "pattern" { props }` — entries of a container (zip members, DB records).
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// `///` lines.
    pub docs: Vec<String>,
    /// The entry's name, used in expressions.
    pub name: Ident,
    /// The name pattern with `{captures}`.
    pub pattern: StrLit,
    /// Properties in order.
    pub props: Vec<EntryProp>,
    /// The whole item.
    pub span: Span,
}

/// `name [=] [value];` inside an entry: `repeated;`, `optional;`, `text;`,
/// `layout npy.File;`, `compression [stored, deflate];`, `align 64;`,
/// `codec pickle(Checkpoint);`, `value caffe2_proto.BlobProto;`, `check expr;`,
/// `write = expr;`.
#[derive(Debug, Clone, PartialEq)]
pub struct EntryProp {
    /// `///` lines.
    pub docs: Vec<String>,
    /// Property name.
    pub name: Ident,
    /// Its value, if any.
    pub value: Option<Expr>,
    /// The whole property.
    pub span: Span,
}

/// `tensor from source as binding [where filter] { stmts }`
#[derive(Debug, Clone, PartialEq)]
pub struct TensorMap {
    /// `///` lines.
    pub docs: Vec<String>,
    /// What to iterate: a layout (`File`), an entry (`member`), or a path into decoded data.
    pub source: Expr,
    /// The name bound to each item.
    pub binding: Ident,
    /// Items kept.
    pub filter: Option<Expr>,
    /// Assignments in order.
    pub stmts: Vec<TensorStmt>,
    /// The whole item.
    pub span: Span,
}

/// A statement of a tensor mapping.
#[derive(Debug, Clone, PartialEq)]
pub enum TensorStmt {
    /// `include other.tensor(expr);` — take another format's mapping.
    Include(Expr),
    /// `key = expr;` with key one of `name dtype shape strides order byte_order data`.
    Assign {
        /// The property.
        key: Ident,
        /// Its value.
        value: Expr,
        /// The whole statement.
        span: Span,
    },
}

/// A call or option argument: positional (`64`) or named (`align = 64`).
#[derive(Debug, Clone, PartialEq)]
pub struct Arg {
    /// The name of a named argument.
    pub name: Option<Ident>,
    /// The value.
    pub value: Expr,
    /// The whole argument.
    pub span: Span,
}

/// An expression with its span.
#[derive(Debug, Clone, PartialEq)]
pub struct Expr {
    /// What it is.
    pub kind: ExprKind,
    /// Where it is written.
    pub span: Span,
}

/// Unary operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnaryOp {
    /// `!`
    Not,
    /// `-`
    Neg,
}

/// Binary operators, by precedence from lowest: `||`; `&&`; comparisons; `+ -`; `* / %`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinaryOp {
    /// `||`
    Or,
    /// `&&`
    And,
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/`
    Div,
    /// `%`
    Rem,
}

/// Expression forms.
#[derive(Debug, Clone, PartialEq)]
pub enum ExprKind {
    /// An integer literal (decimal, `0x` hex or `0b` binary, `_` separators).
    Int(i128),
    /// A string literal.
    Str(String),
    /// A byte-string literal.
    Bytes(Vec<u8>),
    /// `true` / `false`.
    Bool(bool),
    /// `none`.
    None,
    /// A name or dotted path: `major`, `f.header.descr`, `source.stem`, `fortran`.
    Path(Vec<Ident>),
    /// `base[index]`: a table lookup or an element.
    Index {
        /// What is indexed.
        base: Box<Expr>,
        /// The index.
        index: Box<Expr>,
    },
    /// `base.field` on a value that is not a plain path: the result of an index
    /// (`n.attribute["value"].t`) or a call.
    Member {
        /// The value whose field is taken.
        base: Box<Expr>,
        /// The field.
        field: Ident,
    },
    /// `callee(args)`: a builtin (`len`, `size`, `align`, `latin1`, `itemsize`, `slice`,
    /// ...), another format's mapping (`npy.tensor(x)`), or an entry lookup.
    Call {
        /// The called path.
        callee: Vec<Ident>,
        /// Arguments.
        args: Vec<Arg>,
    },
    /// A unary operation.
    Unary {
        /// The operator.
        op: UnaryOp,
        /// The operand.
        expr: Box<Expr>,
    },
    /// A binary operation.
    Binary {
        /// The operator.
        op: BinaryOp,
        /// Left operand.
        lhs: Box<Expr>,
        /// Right operand.
        rhs: Box<Expr>,
    },
    /// `expr in [a, b, c]`.
    In {
        /// The tested value.
        expr: Box<Expr>,
        /// The allowed values.
        list: Vec<Expr>,
    },
    /// `if cond { a } else { b }` (`else if` chains nest in `otherwise`).
    If {
        /// Condition.
        cond: Box<Expr>,
        /// Value when true.
        then: Box<Expr>,
        /// Value when false.
        otherwise: Box<Expr>,
    },
    /// `[a, b, c]`.
    List(Vec<Expr>),
}
