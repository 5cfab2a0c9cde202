//! Typed expressions: every name resolved, every node typed once.

use super::ty::{ByteOrder, Dtype, Type};
use super::{
    DictId, EntryId, EnumId, FieldId, FormatId, KeyId, LayoutId, MessageId, PickleId, TableId,
};
use crate::ast::{BinaryOp, Span, UnaryOp};

/// A typed expression.
#[derive(Debug, Clone, PartialEq)]
pub struct Expr {
    /// What it is.
    pub kind: ExprKind,
    /// Its type.
    pub ty: Type,
    /// Where it is written (in the file of the format it belongs to).
    pub span: Span,
}

/// An argument of a builtin, a message constructor or a pickle call.
#[derive(Debug, Clone, PartialEq)]
pub struct Arg {
    /// The name of a named argument.
    pub name: Option<String>,
    /// The value.
    pub value: Expr,
}

/// Element orders.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Order {
    /// Row-major (`c`).
    C,
    /// Column-major (`fortran`).
    Fortran,
}

/// A constant.
#[derive(Debug, Clone, PartialEq)]
pub enum Const {
    /// An integer literal.
    Int(i128),
    /// A string literal.
    Str(String),
    /// A byte-string literal.
    Bytes(Vec<u8>),
    /// `true` / `false`.
    Bool(bool),
    /// `none`.
    None,
    /// A dtype name (`f32`), compared with the mapped dtype.
    Dtype(Dtype),
    /// `le` / `be`.
    ByteOrder(ByteOrder),
    /// `c` / `fortran`.
    Order(Order),
}

/// The builtin functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Builtin {
    /// `len(x)`: encoded byte length of a field, or number of items of a list.
    Len,
    /// `size(x)`: bytes a field occupies, padding included.
    Size,
    /// `align(n, a)`.
    Align,
    /// `latin1(x)`.
    Latin1,
    /// `itemsize(dtype)`.
    Itemsize,
    /// `slice(data, start, end)`.
    Slice,
    /// `has(x)`: an optional protobuf field is present.
    Has,
    /// `str(x)`: decimal text of an integer.
    Str,
    /// `index_of(list, x)`.
    IndexOf,
    /// `digits(n)`.
    Digits,
    /// `first(list)`.
    First,
    /// `last(list)`.
    Last,
    /// `elements(f)`: tensor data in one repeated protobuf field.
    Elements,
    /// `external(location =, offset =, length =)`.
    External,
    /// `widen(data, dtype)`: tensor data whose elements are stored as `dtype` and read
    /// as the tensor's (wider) dtype, each converted without loss (Caffe2's
    /// `FMT_BFLOAT16`: float32 tensors stored as bfloat16).
    Widen,
    /// `key_of(T, dtype)` (write rules): the first key of table `T` for the dtype.
    KeyOf,
    /// `global(text)` (pickle write rules): the declared global named by the text.
    Global,
    /// `tag(x)`: the tag of a tagged union's value (the case its variant is).
    Tag,
    /// `lookup(list, key, default)`: the `value` of the first record of `list` whose
    /// `key` is `key`, else `default`.
    Lookup,
    /// `product(list)`: the product of a list of integers (1 when empty).
    Product,
    /// `sum(list)`: the sum of a list of integers (0 when empty).
    Sum,
    /// `reverse(list)`: the items of a list, last first.
    Reverse,
    /// `write_align(n)` (what a several-tensor `file` writer computes: its layout's `pad`,
    /// `write` rules, its `write_order`): the alignment the save asks for, at least `n`;
    /// `n` when it asks none.
    WriteAlign,
    /// `tuple(a, b, ..)` (pickle write rules): a pickled tuple of the values.
    Tuple,
    /// `build(call, state)` (pickle write rules): the object a call builds, given `state`
    /// as pickle's `BUILD` gives it (`a.state` when read back).
    Build,
}

impl Builtin {
    /// The builtin named `name`.
    pub fn from_name(name: &str) -> Option<Builtin> {
        Some(match name {
            "len" => Builtin::Len,
            "size" => Builtin::Size,
            "align" => Builtin::Align,
            "latin1" => Builtin::Latin1,
            "itemsize" => Builtin::Itemsize,
            "slice" => Builtin::Slice,
            "has" => Builtin::Has,
            "str" => Builtin::Str,
            "index_of" => Builtin::IndexOf,
            "digits" => Builtin::Digits,
            "first" => Builtin::First,
            "last" => Builtin::Last,
            "elements" => Builtin::Elements,
            "external" => Builtin::External,
            "widen" => Builtin::Widen,
            "key_of" => Builtin::KeyOf,
            "global" => Builtin::Global,
            "tag" => Builtin::Tag,
            "lookup" => Builtin::Lookup,
            "product" => Builtin::Product,
            "sum" => Builtin::Sum,
            "reverse" => Builtin::Reverse,
            "write_align" => Builtin::WriteAlign,
            _ => return None,
        })
    }

    /// The number of arguments it takes; `None` for any number (`external`) or a number
    /// the lowering checks itself (`slice`'s named `align`).
    pub fn arity(self) -> Option<usize> {
        match self {
            Builtin::External | Builtin::Slice | Builtin::Tuple => None,
            Builtin::Align
            | Builtin::IndexOf
            | Builtin::KeyOf
            | Builtin::Build
            | Builtin::Widen => Some(2),
            Builtin::Lookup => Some(3),
            _ => Some(1),
        }
    }

    /// Its name in schemas.
    pub fn name(self) -> &'static str {
        match self {
            Builtin::Len => "len",
            Builtin::Size => "size",
            Builtin::Align => "align",
            Builtin::Latin1 => "latin1",
            Builtin::Itemsize => "itemsize",
            Builtin::Slice => "slice",
            Builtin::Has => "has",
            Builtin::Str => "str",
            Builtin::IndexOf => "index_of",
            Builtin::Digits => "digits",
            Builtin::First => "first",
            Builtin::Last => "last",
            Builtin::Elements => "elements",
            Builtin::External => "external",
            Builtin::Widen => "widen",
            Builtin::KeyOf => "key_of",
            Builtin::Global => "global",
            Builtin::Tag => "tag",
            Builtin::Lookup => "lookup",
            Builtin::Product => "product",
            Builtin::Sum => "sum",
            Builtin::Reverse => "reverse",
            Builtin::WriteAlign => "write_align",
            Builtin::Tuple => "tuple",
            Builtin::Build => "build",
        }
    }
}

/// The properties of a tensor, as a mapping assigns them and as its expressions and
/// write rules name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TensorKey {
    /// `name`
    Name,
    /// `dtype`
    Dtype,
    /// `shape`
    Shape,
    /// `strides`
    Strides,
    /// `order`
    Order,
    /// `byte_order`
    ByteOrder,
    /// `data`
    Data,
    /// `segment`
    Segment,
    /// `part` (a `value` mapping's): which numbered part of its value an item holds.
    Part,
    /// `parts` (a `value` mapping's): how many parts its value was saved in.
    Parts,
}

impl TensorKey {
    /// The key named `name` (not `write`, which is a rule of its own).
    pub fn from_name(name: &str) -> Option<TensorKey> {
        Some(match name {
            "name" => TensorKey::Name,
            "dtype" => TensorKey::Dtype,
            "shape" => TensorKey::Shape,
            "strides" => TensorKey::Strides,
            "order" => TensorKey::Order,
            "byte_order" => TensorKey::ByteOrder,
            "data" => TensorKey::Data,
            "segment" => TensorKey::Segment,
            _ => return None,
        })
    }

    /// The key a `value` mapping assigns by `name`: `name`, `data`, `part`, `parts`.
    pub fn of_value(name: &str) -> Option<TensorKey> {
        Some(match name {
            "name" => TensorKey::Name,
            "data" => TensorKey::Data,
            "part" => TensorKey::Part,
            "parts" => TensorKey::Parts,
            _ => return None,
        })
    }

    /// Its name in schemas.
    pub fn name(self) -> &'static str {
        match self {
            TensorKey::Name => "name",
            TensorKey::Dtype => "dtype",
            TensorKey::Shape => "shape",
            TensorKey::Strides => "strides",
            TensorKey::Order => "order",
            TensorKey::ByteOrder => "byte_order",
            TensorKey::Data => "data",
            TensorKey::Segment => "segment",
            TensorKey::Part => "part",
            TensorKey::Parts => "parts",
        }
    }

    /// The type of the property when an expression names it. `segment` has no type of its
    /// own (it is whatever message the mapping gives) and cannot be named: [`Type::Error`].
    pub fn ty(self) -> Type {
        match self {
            TensorKey::Name => Type::Str,
            TensorKey::Dtype => Type::Dtype,
            TensorKey::Shape | TensorKey::Strides => Type::List(Box::new(Type::INT)),
            TensorKey::Order => Type::Order,
            TensorKey::ByteOrder => Type::ByteOrder,
            TensorKey::Data => Type::TensorData,
            TensorKey::Segment | TensorKey::Part | TensorKey::Parts => Type::Error,
        }
    }
}

/// Values a write rule names: the tensor being written and where the writer put it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WriteVar {
    /// The tensor's name (protobuf, kv).
    Name,
    /// Its dtype.
    Dtype,
    /// Its shape.
    Shape,
    /// Its strides, in elements (pickle).
    Strides,
    /// Its bytes (protobuf, kv).
    Data,
    /// True when the writer placed the bytes in an external file (protobuf).
    External,
    /// The external file's name (protobuf).
    Location,
    /// The offset: in the external file (protobuf), in the storage in elements (pickle).
    Offset,
    /// The byte count (protobuf), the storage's byte count (pickle).
    Nbytes,
    /// The first element of the whole tensor a record holds (kv).
    Begin,
    /// One past the last element a record holds (kv).
    End,
    /// The storage's position among those written (pickle).
    Index,
    /// The storage's element count (pickle).
    Numel,
    /// The stream of the tensor's bytes, a byte string of the pickle (a file that is one
    /// pickle): a `Value::Stream` the writer fills as it reaches it.
    PickleData,
    /// The tensor's order (a file that is one pickle).
    Order,
    /// The byte order its bytes are written in, the tensor's own (a file that is one
    /// pickle).
    ByteOrder,
}

impl WriteVar {
    /// The variable named `name` in a protobuf/kv write rule.
    pub fn proto(name: &str) -> Option<WriteVar> {
        Some(match name {
            "name" => WriteVar::Name,
            "dtype" => WriteVar::Dtype,
            "shape" => WriteVar::Shape,
            "data" => WriteVar::Data,
            "external" => WriteVar::External,
            "location" => WriteVar::Location,
            "offset" => WriteVar::Offset,
            "nbytes" => WriteVar::Nbytes,
            "begin" => WriteVar::Begin,
            "end" => WriteVar::End,
            _ => return None,
        })
    }

    /// The variable named `name` in a pickle write rule.
    pub fn pickle(name: &str) -> Option<WriteVar> {
        Some(match name {
            "index" => WriteVar::Index,
            "numel" => WriteVar::Numel,
            "nbytes" => WriteVar::Nbytes,
            "offset" => WriteVar::Offset,
            "shape" => WriteVar::Shape,
            "strides" => WriteVar::Strides,
            "dtype" => WriteVar::Dtype,
            "data" => WriteVar::PickleData,
            "order" => WriteVar::Order,
            "byte_order" => WriteVar::ByteOrder,
            _ => return None,
        })
    }

    /// True for the values only a file that is one pickle gives its write rule.
    pub fn is_one_pickle(self) -> bool {
        matches!(
            self,
            WriteVar::PickleData | WriteVar::Order | WriteVar::ByteOrder
        )
    }

    /// Its name in schemas.
    pub fn name(self) -> &'static str {
        match self {
            WriteVar::Name => "name",
            WriteVar::Dtype => "dtype",
            WriteVar::Shape => "shape",
            WriteVar::Strides => "strides",
            WriteVar::Data => "data",
            WriteVar::External => "external",
            WriteVar::Location => "location",
            WriteVar::Offset => "offset",
            WriteVar::Nbytes => "nbytes",
            WriteVar::Begin => "begin",
            WriteVar::End => "end",
            WriteVar::Index => "index",
            WriteVar::Numel => "numel",
            WriteVar::PickleData => "data",
            WriteVar::Order => "order",
            WriteVar::ByteOrder => "byte_order",
        }
    }

    /// Its type.
    pub fn ty(self) -> Type {
        match self {
            WriteVar::Name | WriteVar::Location => Type::Str,
            WriteVar::Dtype => Type::Dtype,
            WriteVar::Shape | WriteVar::Strides => Type::List(Box::new(Type::INT)),
            WriteVar::Data => Type::Payload,
            WriteVar::External => Type::Bool,
            WriteVar::PickleData => Type::Bytes,
            WriteVar::Order => Type::Order,
            WriteVar::ByteOrder => Type::ByteOrder,
            _ => Type::INT,
        }
    }
}

/// How a value's member is taken.
#[derive(Debug, Clone, PartialEq)]
pub enum Member {
    /// A field of a layout record. On a list of records, the list of that field of every
    /// record (a projection: `File.storages.bytes`).
    Field(LayoutId, FieldId),
    /// A key of a dict record.
    DictKey(DictId, KeyId),
    /// A field of a protobuf message (`t.dims`). On a list of messages, a projection.
    MessageField(MessageId, usize),
    /// An entry's decoded content (`m.content`).
    EntryContent(EntryId),
    /// A kv record's value (`blob.value`).
    EntryValue(EntryId),
    /// An entry's name (`m.name`).
    EntryName(EntryId),
    /// A capture of an entry's pattern (`record.key`).
    Capture(EntryId, String),
    /// `source.stem`
    SourceStem,
    /// `source.name`
    SourceName,
    /// `source.path`
    SourcePath,
    /// The key of a map item.
    MapKey,
    /// The value of a map item.
    MapValue,
    /// The objects of a call kind a pickle builds (`pickle.content.tensors`).
    PickleObjects(PickleId, String),
    /// The path of a pickle object (`t.path`).
    PicklePath,
    /// A parameter of a pickle call object (`t.storage`, `t.offset`).
    PickleParam(String),
    /// A dynamic attribute of a pickled value (`t.storage.key`: an item of a persistent
    /// id, an attribute of an object).
    PickleAttr(String),
    /// The state `BUILD` gave a pickled object (`a.state`, `a.state[2].state`): of a
    /// call's object, or of a pickled value that is one (a pickled dict's entry
    /// `"state"` otherwise).
    PickleState,
}

/// How `base[index]` looks up.
#[derive(Debug, Clone, PartialEq)]
pub enum IndexKind {
    /// An item of a list or tuple by position.
    Position,
    /// In a repeated message with `key` and `value` fields: the value of the last item
    /// with that key (`t.external_data["location"]`).
    KeyValue {
        /// The item message.
        message: MessageId,
        /// Its `key` field.
        key: usize,
        /// Its `value` field.
        value: usize,
    },
    /// In a repeated message with a `name` field: the last item with that name
    /// (`n.attribute["value"]`).
    Named {
        /// The item message.
        message: MessageId,
        /// Its `name` field.
        name: usize,
    },
    /// An item of a pickled list or dict (dynamic).
    Pickled,
}

/// Expression forms.
#[derive(Debug, Clone, PartialEq)]
pub enum ExprKind {
    /// A constant.
    Const(Const),
    /// A field of the layout being read or written (`header_len`).
    Field(LayoutId, FieldId),
    /// In a record layout: the dtype of the tensors whose data the record holds.
    RecordDtype,
    /// The value a mapping's binding is bound to (`f`, `t`).
    Binding,
    /// In a mapping over a repeated field: the item's position in it.
    Position,
    /// A tensor property the mapping sets (`dtype` in `itemsize(dtype)`).
    TensorKey(TensorKey),
    /// A value of the tensor being written, in a write rule.
    WriteVar(WriteVar),
    /// The file being read.
    Source,
    /// The protobuf document (`root`).
    Root(MessageId),
    /// A layout as a value: the format's record laid out by it (`File.data`).
    Layout(LayoutId),
    /// An entry as a value (`byteorder.content`, `blob.name`).
    Entry(EntryId),
    /// A table, as `key_of`'s first argument.
    Table(TableId),
    /// An enum value (`TensorProto.DataLocation.EXTERNAL`).
    EnumValue(EnumId, usize),
    /// A member of a value.
    Member {
        /// The value.
        base: Box<Expr>,
        /// The member.
        member: Member,
    },
    /// A table lookup `T[key]`: a dtype with its byte order.
    Lookup {
        /// The table.
        table: TableId,
        /// The key.
        key: Box<Expr>,
    },
    /// `base[index]`.
    Index {
        /// What is indexed.
        base: Box<Expr>,
        /// The index or key.
        index: Box<Expr>,
        /// How it looks up.
        how: IndexKind,
    },
    /// A builtin call.
    Call {
        /// The builtin.
        func: Builtin,
        /// Its arguments.
        args: Vec<Arg>,
    },
    /// An entry lookup by captures: `storage(key = t.storage.key)`.
    EntryLookup {
        /// The entry.
        entry: EntryId,
        /// Capture name and value, in order.
        captures: Vec<(String, Expr)>,
    },
    /// A message built by a write rule: `M(field = value, ...)`.
    NewMessage {
        /// The message.
        message: MessageId,
        /// Field index in the message and value.
        fields: Vec<(usize, Expr)>,
    },
    /// A declared pickle global as a value (`torch.storage.UntypedStorage`).
    PickleGlobal {
        /// The declaration.
        pickle: PickleId,
        /// The global's index in [`super::Pickle::globals`].
        global: usize,
    },
    /// A call of a declared pickle global in a write rule.
    PickleCall {
        /// The declaration.
        pickle: PickleId,
        /// The global's index in [`super::Pickle::globals`].
        global: usize,
        /// Positional arguments.
        args: Vec<Expr>,
    },
    /// A persistent id built by a write rule: `storage(tag = .., class = .., ...)`.
    PersistentId {
        /// The declaration.
        pickle: PickleId,
        /// One value per declared item, in order.
        items: Vec<Expr>,
    },
    /// Another format's tensor mapping applied to a value (`npy.tensor(m.content)`).
    MappingOf {
        /// The format.
        format: FormatId,
        /// The value.
        arg: Box<Expr>,
    },
    /// A unary operation.
    Unary {
        /// The operator.
        op: UnaryOp,
        /// The operand.
        expr: Box<Expr>,
    },
    /// A binary operation; operand types are those of `lhs` and `rhs`.
    Binary {
        /// The operator.
        op: BinaryOp,
        /// Left operand.
        lhs: Box<Expr>,
        /// Right operand.
        rhs: Box<Expr>,
    },
    /// `expr in [a, b]`.
    In {
        /// The tested value.
        expr: Box<Expr>,
        /// The allowed values.
        list: Vec<Expr>,
    },
    /// `if cond { a } else { b }`.
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
    /// Not resolved: only in the IR of a schema the checker rejected.
    Error,
}

impl Expr {
    /// The layout field a member chain ends with (`File.keys`: `(File, keys)`), or a
    /// field named alone in its layout.
    pub fn field_of(&self) -> Option<(LayoutId, FieldId)> {
        match &self.kind {
            ExprKind::Member {
                member: Member::Field(l, f),
                ..
            }
            | ExprKind::Field(l, f) => Some((*l, *f)),
            _ => None,
        }
    }

    /// Calls `f` on this expression and every sub-expression, parents first.
    pub fn walk<'a>(&'a self, f: &mut dyn FnMut(&'a Expr)) {
        f(self);
        match &self.kind {
            ExprKind::Member { base, .. } => base.walk(f),
            ExprKind::Lookup { key, .. } => key.walk(f),
            ExprKind::Index { base, index, .. } => {
                base.walk(f);
                index.walk(f);
            }
            ExprKind::Call { args, .. } => args.iter().for_each(|a| a.value.walk(f)),
            ExprKind::EntryLookup { captures, .. } => captures.iter().for_each(|c| c.1.walk(f)),
            ExprKind::NewMessage { fields, .. } => fields.iter().for_each(|c| c.1.walk(f)),
            ExprKind::PickleCall { args, .. } => args.iter().for_each(|a| a.walk(f)),
            ExprKind::PersistentId { items, .. } | ExprKind::List(items) => {
                items.iter().for_each(|a| a.walk(f))
            }
            ExprKind::MappingOf { arg, .. } => arg.walk(f),
            ExprKind::Unary { expr, .. } => expr.walk(f),
            ExprKind::Binary { lhs, rhs, .. } => {
                lhs.walk(f);
                rhs.walk(f);
            }
            ExprKind::In { expr, list } => {
                expr.walk(f);
                list.iter().for_each(|a| a.walk(f));
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
            _ => {}
        }
    }
}

/// The argument named `name` of a call, if given.
pub fn named_arg<'a>(args: &'a [Arg], name: &str) -> Option<&'a Arg> {
    args.iter().find(|a| a.name.as_deref() == Some(name))
}
