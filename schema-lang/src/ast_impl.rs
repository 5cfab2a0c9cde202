//! Helper methods on the AST, for the checker and the code generator.
//!
//! None of these change the tree; they look things up (`Format::layout`, `Field::size`,
//! `Entry::prop`) and print expressions and types back as schema text (`Display`).

use std::fmt;

use crate::ast::*;

/// The argument named `name` in `args` (`find_arg(args, "align")` for `pad(align = 64)`).
pub fn find_arg<'a>(args: &'a [Arg], name: &str) -> Option<&'a Arg> {
    args.iter()
        .find(|a| a.name.as_ref().is_some_and(|n| n.name == name))
}

/// The `i`-th positional (unnamed) argument of `args`.
pub fn positional_arg(args: &[Arg], i: usize) -> Option<&Arg> {
    args.iter().filter(|a| a.name.is_none()).nth(i)
}

/// The canonical dtype names a table row may name.
pub const DTYPES: &[&str] = &[
    "f16", "bf16", "f32", "f64", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "bool",
    "c64", "c128", "f8e4m3fn", "f8e5m2", "string",
];

/// The integer types of layout fields, with their widths in bytes and signedness.
pub const INT_TYPES: &[(&str, usize, bool)] = &[
    ("u8", 1, false),
    ("u16", 2, false),
    ("u32", 4, false),
    ("u64", 8, false),
    ("i8", 1, true),
    ("i16", 2, true),
    ("i32", 4, true),
    ("i64", 8, true),
];

/// The engines the runtime provides.
pub const ENGINES: &[&str] = &["file", "zip", "protobuf", "kv"];

/// The codecs the runtime provides for `codec NAME`.
pub const CODECS: &[&str] = &["pydict", "json", "pickle", "protobuf"];

/// The keys a tensor mapping may assign.
pub const TENSOR_KEYS: &[&str] = &[
    "name",
    "dtype",
    "shape",
    "strides",
    "order",
    "byte_order",
    "data",
    "segment",
    "write",
    "write_order",
];

/// The keys a `value` mapping may assign: the value's name and bytes, and which of its
/// numbered parts an item holds (`part` of `parts`, both or neither).
pub const VALUE_KEYS: &[&str] = &["name", "data", "part", "parts"];

/// The property names an entry may have.
pub const ENTRY_PROPS: &[&str] = &[
    "repeated",
    "optional",
    "text",
    "layout",
    "value",
    "codec",
    "compression",
    "align",
    "check",
    "write",
    "write_name",
    "preferred",
    "strict",
    "split",
];

/// The byte width of an integer type name (`u16` → 2); `None` for other names.
pub fn int_type_width(name: &str) -> Option<usize> {
    INT_TYPES.iter().find(|t| t.0 == name).map(|t| t.1)
}

impl Ident {
    /// A name with an empty span, for building trees in code.
    pub fn new(name: impl Into<String>) -> Ident {
        Ident {
            name: name.into(),
            span: Span::default(),
        }
    }
}

impl fmt::Display for Ident {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

impl Span {
    /// A span covering both `self` and `other`.
    pub fn to(self, other: Span) -> Span {
        Span {
            start: self.start.min(other.start),
            end: self.end.max(other.end),
        }
    }
}

impl SchemaFile {
    /// The format named `name` (its identifier) in this file.
    pub fn format(&self, name: &str) -> Option<&Format> {
        self.formats.iter().find(|f| f.name.name == name)
    }

    /// The 1-based line and column of a byte offset in this file.
    pub fn line_col(&self, pos: usize) -> (usize, usize) {
        crate::diag::line_col(&self.source, pos)
    }
}

impl Item {
    /// The item's declared name (tables, dicts, layouts, messages, enums, pickles,
    /// entries); `None` for engine, extensions, detect and tensor items.
    pub fn name(&self) -> Option<&Ident> {
        match self {
            Item::Table(t) => Some(&t.name),
            Item::Dict(d) => Some(&d.name),
            Item::Layout(l) => Some(&l.name),
            Item::Message(m) => Some(&m.name),
            Item::Enum(e) => Some(&e.name),
            Item::Pickle(p) => Some(&p.name),
            Item::Entry(e) => Some(&e.name),
            _ => None,
        }
    }

    /// What kind of item it is, as the keyword that declares it (`"table"`, `"layout"`).
    pub fn kind_word(&self) -> &'static str {
        match self {
            Item::Engine(_) => "engine",
            Item::Extensions(_) => "extensions",
            Item::ReadOnly(_) => "read_only",
            Item::Detect(_) => "detect",
            Item::Table(_) => "table",
            Item::Dict(_) => "dict",
            Item::Layout(_) => "layout",
            Item::Message(_) => "message",
            Item::Enum(_) => "enum",
            Item::Pickle(_) => "pickle",
            Item::Entry(_) => "entry",
            Item::Tensor(_) => "tensor",
            Item::Value(_) => "value",
        }
    }

    /// The whole item's span (for `extensions`, from the first to the last string).
    pub fn span(&self) -> Span {
        match self {
            Item::Engine(e) => e.span,
            Item::Extensions(v) => match (v.first(), v.last()) {
                (Some(a), Some(b)) => a.span.to(b.span),
                _ => Span::default(),
            },
            Item::ReadOnly(span)
            | Item::Detect(
                Detect::Magic { span, .. }
                | Detect::MagicAny { span, .. }
                | Detect::Pickle { span, .. }
                | Detect::Entries { span, .. },
            ) => *span,
            Item::Table(t) => t.span,
            Item::Dict(d) => d.span,
            Item::Layout(l) => l.span,
            Item::Message(m) => m.span,
            Item::Enum(e) => e.span,
            Item::Pickle(p) => p.span,
            Item::Entry(e) => e.span,
            Item::Tensor(t) | Item::Value(t) => t.span,
        }
    }
}

macro_rules! item_accessors {
    ($(#[$all:meta])* $all_fn:ident, $(#[$one:meta])* $one_fn:ident, $variant:ident, $ty:ty) => {
        $(#[$all])*
        pub fn $all_fn(&self) -> impl Iterator<Item = &$ty> {
            self.items.iter().filter_map(|i| match i {
                Item::$variant(x) => Some(x),
                _ => None,
            })
        }
        $(#[$one])*
        pub fn $one_fn(&self, name: &str) -> Option<&$ty> {
            self.$all_fn().find(|x| x.name.name == name)
        }
    };
}

impl Format {
    /// The public name: the quoted name when given (`"caffe2-minidb"`), else the identifier.
    pub fn public_name(&self) -> &str {
        self.public_name
            .as_ref()
            .map_or(self.name.name.as_str(), |s| s.value.as_str())
    }

    /// The (first) `engine` item.
    pub fn engine(&self) -> Option<&Engine> {
        self.items.iter().find_map(|i| match i {
            Item::Engine(e) => Some(e),
            _ => None,
        })
    }

    /// The engine kind's name (`"file"`, `"zip"`, ...), `""` when there is none.
    pub fn engine_kind(&self) -> &str {
        self.engine().map_or("", |e| e.kind.name.as_str())
    }

    /// The span of the (first) `read_only;` item, when the format is declared read-only.
    pub fn read_only(&self) -> Option<Span> {
        self.items.iter().find_map(|i| match i {
            Item::ReadOnly(s) => Some(*s),
            _ => None,
        })
    }

    /// All file extensions (without dots), from every `extensions` item.
    pub fn extensions(&self) -> impl Iterator<Item = &StrLit> {
        self.items
            .iter()
            .filter_map(|i| match i {
                Item::Extensions(v) => Some(v.iter()),
                _ => None,
            })
            .flatten()
    }

    /// All `detect` rules, in order.
    pub fn detects(&self) -> impl Iterator<Item = &Detect> {
        self.items.iter().filter_map(|i| match i {
            Item::Detect(d) => Some(d),
            _ => None,
        })
    }

    /// The `detect magic` rules, as `(bytes, offset)`.
    pub fn magics(&self) -> impl Iterator<Item = (&[u8], u64)> {
        self.detects().filter_map(|d| match d {
            Detect::Magic { bytes, at, .. } => Some((bytes.value.as_slice(), *at)),
            _ => None,
        })
    }

    item_accessors!(
        /// All `table` items.
        tables,
        /// The table named `name`.
        table,
        Table,
        Table
    );
    item_accessors!(
        /// All `dict` items.
        dicts,
        /// The dict named `name`.
        dict,
        Dict,
        Dict
    );
    item_accessors!(
        /// All `layout` items.
        layouts,
        /// The layout named `name`.
        layout,
        Layout,
        Layout
    );
    item_accessors!(
        /// All top-level `message` items.
        messages,
        /// The top-level message named `name`.
        message,
        Message,
        Message
    );
    item_accessors!(
        /// All top-level `enum` items.
        enums,
        /// The top-level enum named `name`.
        enum_decl,
        Enum,
        EnumDecl
    );
    item_accessors!(
        /// All `pickle` items.
        pickles,
        /// The pickle declaration named `name`.
        pickle,
        Pickle,
        Pickle
    );
    item_accessors!(
        /// All `entry` items.
        entries,
        /// The entry named `name`.
        entry,
        Entry,
        Entry
    );

    /// All tensor mappings, in order.
    pub fn tensors(&self) -> impl Iterator<Item = &TensorMap> {
        self.items.iter().filter_map(|i| match i {
            Item::Tensor(t) => Some(t),
            _ => None,
        })
    }

    /// All `value` mappings, in order.
    pub fn values(&self) -> impl Iterator<Item = &TensorMap> {
        self.items.iter().filter_map(|i| match i {
            Item::Value(t) => Some(t),
            _ => None,
        })
    }

    /// The item named `name`, whatever its kind.
    pub fn item(&self, name: &str) -> Option<&Item> {
        self.items
            .iter()
            .find(|i| i.name().is_some_and(|n| n.name == name))
    }

    /// A message by dotted path: `["TensorProto"]` or nested `["TensorProto", "Segment"]`.
    pub fn message_path(&self, path: &[&str]) -> Option<&Message> {
        let (first, rest) = path.split_first()?;
        let mut m = self.message(first)?;
        for p in rest {
            m = m.messages.iter().find(|x| x.name.name == *p)?;
        }
        Some(m)
    }
}

impl Endian {
    /// The schema spelling: `"le"` or `"be"`.
    pub fn short(self) -> &'static str {
        match self {
            Endian::Little => "le",
            Endian::Big => "be",
        }
    }
}

impl fmt::Display for TableKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TableKey::Str(s) => write!(f, "{s:?}"),
            TableKey::Int(i) => write!(f, "{i}"),
        }
    }
}

impl Table {
    /// The first row with key `key` (read direction).
    pub fn lookup(&self, key: &TableKey) -> Option<&TableRow> {
        self.rows.iter().find(|r| &r.key == key)
    }

    /// The row used on write for a dtype and byte order: the first row naming `dtype` with
    /// byte order `endian`; a row without a byte order matches any byte order when the
    /// dtype is one byte wide (`u8`, `i8`, `bool`, ...) or `endian` is `None`.
    pub fn reverse(&self, dtype: &str, endian: Option<Endian>) -> Option<&TableRow> {
        let one_byte = matches!(dtype, "u8" | "i8" | "bool" | "f8e4m3fn" | "f8e5m2");
        self.rows.iter().find(|r| {
            r.dtype.name == dtype
                && match (r.endian, endian) {
                    (Some(a), Some(b)) => a == b,
                    (None, _) => one_byte || endian.is_none(),
                    (Some(_), None) => true,
                }
        })
    }
}

impl TypeRef {
    /// The dotted name as written, without generic arguments: `"npy.File"`.
    pub fn name(&self) -> String {
        self.path
            .iter()
            .map(|i| i.name.as_str())
            .collect::<Vec<_>>()
            .join(".")
    }

    /// True when the type is the single unqualified name `name` (`ty.is("u16")`).
    pub fn is(&self, name: &str) -> bool {
        self.path.len() == 1 && self.path[0].name == name
    }

    /// The width in bytes when the type is an integer type (`u8`..`u64`, `i8`..`i64`).
    pub fn int_width(&self) -> Option<usize> {
        if self.path.len() == 1 && self.args.is_empty() {
            int_type_width(&self.path[0].name)
        } else {
            None
        }
    }

    /// True for integer and float layout types (`u8`..`i64`, `f32`, `f64`).
    pub fn is_numeric(&self) -> bool {
        self.int_width().is_some() || self.is("f32") || self.is("f64")
    }
}

impl fmt::Display for TypeRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())?;
        if !self.args.is_empty() {
            f.write_str("<")?;
            for (i, a) in self.args.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                write!(f, "{a}")?;
            }
            f.write_str(">")?;
        }
        Ok(())
    }
}

impl Layout {
    /// The field named `name`.
    pub fn field(&self, name: &str) -> Option<&Field> {
        self.fields.iter().find(|f| f.name.name == name)
    }

    /// The position of the field named `name`.
    pub fn field_index(&self, name: &str) -> Option<usize> {
        self.fields.iter().position(|f| f.name.name == name)
    }
}

impl FieldType {
    /// True for integer, float and conditional (integer) types.
    pub fn is_numeric(&self) -> bool {
        match self {
            FieldType::Named(t) => t.is_numeric(),
            FieldType::Cond { .. } => true,
            FieldType::Magic(_) | FieldType::Match { .. } => false,
        }
    }

    /// The named type, when it is one.
    pub fn named(&self) -> Option<&TypeRef> {
        match self {
            FieldType::Named(t) => Some(t),
            _ => None,
        }
    }
}

impl Field {
    /// The expression of the (first) `write = ...` modifier.
    pub fn write_rule(&self) -> Option<&Expr> {
        self.modifiers.iter().find_map(|m| match m {
            Modifier::Write(e) => Some(e),
            _ => None,
        })
    }

    /// The first `check` condition.
    pub fn check(&self) -> Option<&Expr> {
        self.checks().next()
    }

    /// All `check` conditions, in order.
    pub fn checks(&self) -> impl Iterator<Item = &Expr> {
        self.modifiers.iter().filter_map(|m| match m {
            Modifier::Check(e) => Some(e),
            _ => None,
        })
    }

    /// The constant implied by a `check NAME == LITERAL` (or `LITERAL == NAME`) modifier:
    /// the value written when the field has no `write` rule.
    pub fn implied_constant(&self) -> Option<&Expr> {
        self.checks().find_map(|c| match &c.kind {
            ExprKind::Binary {
                op: BinaryOp::Eq,
                lhs,
                rhs,
            } => {
                let is_me = |e: &Expr| {
                    e.as_path()
                        .is_some_and(|p| p.len() == 1 && p[0].name == self.name.name)
                };
                if is_me(lhs) && rhs.is_literal() {
                    Some(&**rhs)
                } else if is_me(rhs) && lhs.is_literal() {
                    Some(&**lhs)
                } else {
                    None
                }
            }
            _ => None,
        })
    }

    /// The `size` expression.
    pub fn size(&self) -> Option<&Expr> {
        self.modifiers.iter().find_map(|m| match m {
            Modifier::Size(e) => Some(e),
            _ => None,
        })
    }

    /// The `codec` name and arguments.
    pub fn codec(&self) -> Option<(&Ident, &[Arg])> {
        self.modifiers.iter().find_map(|m| match m {
            Modifier::Codec { name, args, .. } => Some((name, args.as_slice())),
            _ => None,
        })
    }

    /// The arguments of `pad(...)`: `align`, `fill`, `last`, `min`.
    pub fn pad_args(&self) -> Option<&[Arg]> {
        self.modifiers.iter().find_map(|m| match m {
            Modifier::Pad { args, .. } => Some(args.as_slice()),
            _ => None,
        })
    }

    /// True for `rest`.
    pub fn is_rest(&self) -> bool {
        self.modifiers
            .iter()
            .any(|m| matches!(m, Modifier::Rest(_)))
    }

    /// The `repeat` modifier.
    pub fn repeat(&self) -> Option<&Repeat> {
        self.modifiers.iter().find_map(|m| match m {
            Modifier::Repeat(r) => Some(r),
            _ => None,
        })
    }

    /// The `align` expression.
    pub fn align(&self) -> Option<&Expr> {
        self.modifiers.iter().find_map(|m| match m {
            Modifier::Align(e) => Some(e),
            _ => None,
        })
    }

    /// The `at` expression.
    pub fn at(&self) -> Option<&Expr> {
        self.modifiers.iter().find_map(|m| match m {
            Modifier::At(e) => Some(e),
            _ => None,
        })
    }
}

impl Modifier {
    /// The modifier's keyword (`"check"`, `"write"`, ...).
    pub fn keyword(&self) -> &'static str {
        match self {
            Modifier::Check(_) => "check",
            Modifier::Write(_) => "write",
            Modifier::Size(_) => "size",
            Modifier::Codec { .. } => "codec",
            Modifier::Pad { .. } => "pad",
            Modifier::Rest(_) => "rest",
            Modifier::Repeat(_) => "repeat",
            Modifier::Align(_) => "align",
            Modifier::At(_) => "at",
        }
    }
}

impl Message {
    /// The field named `name`.
    pub fn field(&self, name: &str) -> Option<&MessageField> {
        self.fields.iter().find(|f| f.name.name == name)
    }

    /// The field with number `tag`.
    pub fn field_by_tag(&self, tag: u32) -> Option<&MessageField> {
        self.fields.iter().find(|f| f.tag == tag)
    }
}

impl MessageField {
    /// True when the field has the `packed` option.
    pub fn is_packed(&self) -> bool {
        self.options
            .iter()
            .any(|a| a.name.is_none() && a.value.is_path("packed"))
    }

    /// The `default = ...` option's value.
    pub fn default_value(&self) -> Option<&Expr> {
        find_arg(&self.options, "default").map(|a| &a.value)
    }
}

impl EnumDecl {
    /// The number of value `name`.
    pub fn value(&self, name: &str) -> Option<i64> {
        self.values.iter().find(|v| v.0.name == name).map(|v| v.1)
    }
}

impl Pickle {
    /// The protocol written (`protocol N;`), if declared.
    pub fn protocol(&self) -> Option<u64> {
        self.items.iter().find_map(|i| match i {
            PickleItem::Protocol(p, _) => Some(*p),
            _ => None,
        })
    }
}

impl Entry {
    /// The property named `name`.
    pub fn prop(&self, name: &str) -> Option<&EntryProp> {
        self.props.iter().find(|p| p.name.name == name)
    }

    /// The value of property `name`, when it has one.
    pub fn prop_value(&self, name: &str) -> Option<&Expr> {
        self.prop(name).and_then(|p| p.value.as_ref())
    }

    /// True when the entry has the flag `name` (`repeated`, `optional`, `text`).
    pub fn has_flag(&self, name: &str) -> bool {
        self.prop(name).is_some()
    }

    /// True for `repeated;`.
    pub fn is_repeated(&self) -> bool {
        self.has_flag("repeated")
    }

    /// True for `optional;`.
    pub fn is_optional(&self) -> bool {
        self.has_flag("optional")
    }

    /// The capture names of the pattern, in order: `"{prefix}/data/{key}"` →
    /// `["prefix", "key"]`.
    pub fn captures(&self) -> Vec<&str> {
        pattern_captures(&self.pattern.value)
    }

    /// The compression methods allowed (`compression [stored, deflate];`), `["stored"]`
    /// when not given.
    pub fn compressions(&self) -> Vec<&str> {
        match self.prop_value("compression") {
            None => vec!["stored"],
            Some(e) => match &e.kind {
                ExprKind::List(l) => l.iter().filter_map(|x| x.path_name()).collect(),
                _ => e.path_name().into_iter().collect(),
            },
        }
    }
}

/// The `{capture}` names of an entry-name pattern, in order.
pub fn pattern_captures(pattern: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = pattern;
    while let Some(i) = rest.find('{') {
        let after = &rest[i + 1..];
        match after.find('}') {
            Some(j) => {
                out.push(&after[..j]);
                rest = &after[j + 1..];
            }
            None => break,
        }
    }
    out
}

impl TensorMap {
    /// The value assigned to `key` (`name`, `dtype`, ...), the last one when assigned twice.
    pub fn assignment(&self, key: &str) -> Option<&Expr> {
        self.stmts.iter().rev().find_map(|s| match s {
            TensorStmt::Assign { key: k, value, .. } if k.name == key => Some(value),
            _ => None,
        })
    }

    /// The `include` expressions.
    pub fn includes(&self) -> impl Iterator<Item = &Expr> {
        self.stmts.iter().filter_map(|s| match s {
            TensorStmt::Include(e) => Some(e),
            _ => None,
        })
    }
}

impl Expr {
    /// The path, when the expression is a plain path.
    pub fn as_path(&self) -> Option<&[Ident]> {
        match &self.kind {
            ExprKind::Path(p) => Some(p),
            _ => None,
        }
    }

    /// The single name, when the expression is a one-segment path (`stored`, `fortran`).
    pub fn path_name(&self) -> Option<&str> {
        match self.as_path() {
            Some([one]) => Some(&one.name),
            _ => None,
        }
    }

    /// True when the expression is the one-segment path `name`.
    pub fn is_path(&self, name: &str) -> bool {
        self.path_name() == Some(name)
    }

    /// The integer value of an integer literal (or a negated one).
    pub fn as_int(&self) -> Option<i128> {
        match &self.kind {
            ExprKind::Int(i) => Some(*i),
            ExprKind::Unary {
                op: UnaryOp::Neg,
                expr,
            } => expr.as_int().map(|i| -i),
            _ => None,
        }
    }

    /// The value of a string literal.
    pub fn as_str(&self) -> Option<&str> {
        match &self.kind {
            ExprKind::Str(s) => Some(s),
            _ => None,
        }
    }

    /// True for literals: integers (possibly negated), strings, bytes, booleans, `none`.
    pub fn is_literal(&self) -> bool {
        matches!(
            self.kind,
            ExprKind::Int(_)
                | ExprKind::Str(_)
                | ExprKind::Bytes(_)
                | ExprKind::Bool(_)
                | ExprKind::None
        ) || self.as_int().is_some()
    }

    /// The callee's dotted name when the expression is a call (`"len"`, `"npy.tensor"`).
    pub fn call_name(&self) -> Option<String> {
        match &self.kind {
            ExprKind::Call { callee, .. } => Some(
                callee
                    .iter()
                    .map(|i| i.name.as_str())
                    .collect::<Vec<_>>()
                    .join("."),
            ),
            _ => None,
        }
    }

    /// Calls `f` on this expression and every sub-expression, parents first.
    pub fn walk<'a>(&'a self, f: &mut dyn FnMut(&'a Expr)) {
        f(self);
        match &self.kind {
            ExprKind::Index { base, index } => {
                base.walk(f);
                index.walk(f);
            }
            ExprKind::Member { base, .. } => base.walk(f),
            ExprKind::Call { args, .. } => args.iter().for_each(|a| a.value.walk(f)),
            ExprKind::Unary { expr, .. } => expr.walk(f),
            ExprKind::Binary { lhs, rhs, .. } => {
                lhs.walk(f);
                rhs.walk(f);
            }
            ExprKind::In { expr, list } => {
                expr.walk(f);
                list.iter().for_each(|x| x.walk(f));
            }
            ExprKind::If {
                cond,
                then,
                otherwise,
            } => {
                cond.walk(f);
                then.walk(f);
                otherwise.walk(f);
            }
            ExprKind::List(l) => l.iter().for_each(|x| x.walk(f)),
            ExprKind::Int(_)
            | ExprKind::Str(_)
            | ExprKind::Bytes(_)
            | ExprKind::Bool(_)
            | ExprKind::None
            | ExprKind::Path(_) => {}
        }
    }

    /// The first segment of every path in the expression (names it refers to), in order,
    /// with repeats. Callee names are not included.
    pub fn referenced_names(&self) -> Vec<&Ident> {
        let mut out = Vec::new();
        self.walk(&mut |e| {
            if let ExprKind::Path(p) = &e.kind {
                out.push(&p[0]);
            }
        });
        out
    }

    /// True when the expression calls `name` (`"size"`) with `arg` as its first argument,
    /// a one-segment path (`size(header)`).
    pub fn calls_with(&self, name: &str, arg: &str) -> bool {
        let mut found = false;
        self.walk(&mut |e| {
            if let ExprKind::Call { callee, args } = &e.kind {
                if callee.len() == 1
                    && callee[0].name == name
                    && args.first().is_some_and(|a| a.value.is_path(arg))
                {
                    found = true;
                }
            }
        });
        found
    }
}

impl BinaryOp {
    /// The operator as written (`"&&"`).
    pub fn symbol(self) -> &'static str {
        match self {
            BinaryOp::Or => "||",
            BinaryOp::And => "&&",
            BinaryOp::Eq => "==",
            BinaryOp::Ne => "!=",
            BinaryOp::Lt => "<",
            BinaryOp::Le => "<=",
            BinaryOp::Gt => ">",
            BinaryOp::Ge => ">=",
            BinaryOp::Add => "+",
            BinaryOp::Sub => "-",
            BinaryOp::Mul => "*",
            BinaryOp::Div => "/",
            BinaryOp::Rem => "%",
        }
    }

    /// Binding strength: 1 (`||`) to 5 (`* / %`).
    pub fn precedence(self) -> u8 {
        match self {
            BinaryOp::Or => 1,
            BinaryOp::And => 2,
            BinaryOp::Eq
            | BinaryOp::Ne
            | BinaryOp::Lt
            | BinaryOp::Le
            | BinaryOp::Gt
            | BinaryOp::Ge => 3,
            BinaryOp::Add | BinaryOp::Sub => 4,
            BinaryOp::Mul | BinaryOp::Div | BinaryOp::Rem => 5,
        }
    }
}

fn expr_prec(e: &Expr) -> u8 {
    match &e.kind {
        ExprKind::Binary { op, .. } => op.precedence(),
        ExprKind::In { .. } => 3,
        ExprKind::Unary { .. } => 6,
        ExprKind::If { .. } => 0,
        _ => 7,
    }
}

fn write_sub(f: &mut fmt::Formatter<'_>, e: &Expr, min: u8) -> fmt::Result {
    if expr_prec(e) < min {
        write!(f, "({e})")
    } else {
        write!(f, "{e}")
    }
}

fn write_args(f: &mut fmt::Formatter<'_>, args: &[Arg]) -> fmt::Result {
    for (i, a) in args.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        if let Some(n) = &a.name {
            write!(f, "{n} = ")?;
        }
        write!(f, "{}", a.value)?;
    }
    Ok(())
}

fn write_bytes(f: &mut fmt::Formatter<'_>, b: &[u8]) -> fmt::Result {
    f.write_str("b\"")?;
    for &c in b {
        match c {
            b'\n' => f.write_str("\\n")?,
            b'\t' => f.write_str("\\t")?,
            b'\r' => f.write_str("\\r")?,
            b'\\' => f.write_str("\\\\")?,
            b'"' => f.write_str("\\\"")?,
            0x20..=0x7e => write!(f, "{}", c as char)?,
            _ => write!(f, "\\x{c:02x}")?,
        }
    }
    f.write_str("\"")
}

impl fmt::Display for Expr {
    /// Prints the expression as schema text, with the parentheses precedence requires.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            ExprKind::Int(i) => write!(f, "{i}"),
            ExprKind::Str(s) => write!(f, "{s:?}"),
            ExprKind::Bytes(b) => write_bytes(f, b),
            ExprKind::Bool(b) => write!(f, "{b}"),
            ExprKind::None => f.write_str("none"),
            ExprKind::Path(p) => {
                for (i, s) in p.iter().enumerate() {
                    if i > 0 {
                        f.write_str(".")?;
                    }
                    f.write_str(&s.name)?;
                }
                Ok(())
            }
            ExprKind::Index { base, index } => {
                write_sub(f, base, 7)?;
                write!(f, "[{index}]")
            }
            ExprKind::Member { base, field } => {
                write_sub(f, base, 7)?;
                write!(f, ".{}", field.name)
            }
            ExprKind::Call { callee, args } => {
                let name: Vec<&str> = callee.iter().map(|i| i.name.as_str()).collect();
                write!(f, "{}(", name.join("."))?;
                write_args(f, args)?;
                f.write_str(")")
            }
            ExprKind::Unary { op, expr } => {
                f.write_str(match op {
                    UnaryOp::Not => "!",
                    UnaryOp::Neg => "-",
                })?;
                write_sub(f, expr, 6)
            }
            ExprKind::Binary { op, lhs, rhs } => {
                let p = op.precedence();
                write_sub(f, lhs, p)?;
                write!(f, " {} ", op.symbol())?;
                write_sub(f, rhs, p + 1)
            }
            ExprKind::In { expr, list } => {
                write_sub(f, expr, 4)?;
                f.write_str(" in [")?;
                for (i, x) in list.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{x}")?;
                }
                f.write_str("]")
            }
            ExprKind::If {
                cond,
                then,
                otherwise,
            } => {
                write!(f, "if {cond} {{ {then} }} else ")?;
                if matches!(otherwise.kind, ExprKind::If { .. }) {
                    write!(f, "{otherwise}")
                } else {
                    write!(f, "{{ {otherwise} }}")
                }
            }
            ExprKind::List(l) => {
                f.write_str("[")?;
                for (i, x) in l.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{x}")?;
                }
                f.write_str("]")
            }
        }
    }
}

impl fmt::Display for Arg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_args(f, std::slice::from_ref(self))
    }
}
