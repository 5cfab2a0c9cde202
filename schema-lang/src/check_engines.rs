//! Engine rules over the typed IR: what the `zip` engine (around pickles, or over another
//! format's layout), the `file` engine around pickles, and the `protobuf` and `kv` engines
//! (over messages) can mean. They
//! run after lowering, on each format whose names and types resolved, so that every
//! construct the code generator receives is one it generates.
//!
//! The `file` engine over a layout: one tensor mapping at most, without `strides`.
//!
//! Layouts: a field lays out a number, `bool`, text or bytes of a
//! size (or `rest`), a payload, a layout, or a dict decoded by a `pydict` or `json` codec
//! (and only a dict is); a list is a repeated field, and neither a magic nor a payload
//! repeats; `rest` sizes one text, bytes, codec text or payload. A dict's values are what a Python literal or JSON text holds.
//!
//! The `kv` engine: a `records` backend reads the format's `layout Record` (a `bytes`
//! `key`, a `payload` `value`, every other field computed or a magic); a kv format is detected by its backend, not by `detect`
//! rules; each entry holds a message of the format (`value M;`); a mapping iterates an
//! entry's value or messages in it, and sets only what a database record gives (`name`,
//! `dtype`, `shape`, `data`, `segment`); a `segment` is a message with integer `begin` and
//! `end`, and only kv formats join parts of a tensor by it; one mapping at most writes,
//! naming its tensors by a capture of its entry (`name = blob.name`), which has a
//! positive constant `split`, and its `write` rule makes the entry's message. A `value`
//! mapping (values that are not tensors) iterates as a tensor mapping does, and sets a
//! string `name`, `bytes` data, and integer `part` and `parts`.
//!
//! Around pickles (`zip` and `file`): a mapping iterates the objects of one pickle (an
//! entry's content, or a field of the file's layout), sets its properties itself (no
//! `include`, no `order` or `segment`), its `shape` and `strides` lists of integers and its
//! `data` a storage or a slice of one to its end; a file of pickles is its pickles, then
//! records counted by one of them (integers, then a sized `payload`), last.
//!
//! Over messages (`protobuf` and `kv`): a document's mapping iterates messages; repeated
//! fixed-width and zigzag numbers are read by `elements(..)` alone; write rules build
//! messages, a written document's tensors are the items of a repeated field, and a
//! record's `data` is in no item of a list of messages.

use crate::ast::{Label, SchemaFile, Span};
use crate::diag::Diagnostic;
use crate::ir::{
    Builtin, Codec, Const, Content, Engine, EntryId, Expr, ExprKind, FieldId, FormatId, Ir,
    KvBackend, LayoutId, Mapping, MappingStmt, Member, ProtoScalar, ProtoType, Repeat, TensorKey,
    Type, WriteVar,
};

/// Every engine rule broken in `ir`, in the formats `clean` accepts.
pub(crate) fn check(
    files: &[SchemaFile],
    ir: &Ir,
    clean: &dyn Fn(FormatId) -> bool,
) -> Vec<Diagnostic> {
    let mut c = Rules {
        files,
        ir,
        out: Vec::new(),
        fid: FormatId(0),
    };
    for i in 0..ir.formats.len() {
        c.fid = FormatId(i as u32);
        if clean(c.fid) {
            c.format();
        }
    }
    c.out
}

struct Rules<'a> {
    files: &'a [SchemaFile],
    ir: &'a Ir,
    out: Vec<Diagnostic>,
    fid: FormatId,
}

/// True when `e` reads something `pred` holds for.
fn reads(e: &Expr, pred: &dyn Fn(&Expr) -> bool) -> bool {
    let mut found = false;
    e.walk(&mut |x| found |= pred(x));
    found
}

/// `slice(x, start, none)` unwrapped down to `x`, as far as it goes.
fn unsliced(e: &Expr) -> &Expr {
    match &e.kind {
        ExprKind::Call {
            func: Builtin::Slice,
            args,
        } if args.len() >= 2
            && args[2..]
                .iter()
                .all(|a| matches!(a.value.kind, ExprKind::Const(Const::None))) =>
        {
            unsliced(&args[0].value)
        }
        _ => e,
    }
}

/// True when `e` is a list of integers as a mapping over pickled objects reads one: a
/// pickled value (a tuple of ints, checked when read), a list literal of integers or
/// pickled integers, or a list or tuple of integers.
fn pickled_int_list(e: &Expr) -> bool {
    let item = |t: &Type| t.is_int() || matches!(t, Type::Pickled(_));
    match (&e.ty, &e.kind) {
        (Type::Pickled(_), _) => true,
        (_, ExprKind::List(items)) => items.iter().all(|i| item(&i.ty)),
        (Type::List(t) | Type::Tuple(t), _) => t.is_int(),
        _ => false,
    }
}

/// The pickle declaration whose objects a mapping iterates (`pickle.content.arrays`).
fn mapped_pickle(map: &Mapping) -> Option<crate::ir::PickleId> {
    match &map.source.kind {
        ExprKind::Member {
            member: Member::PickleObjects(p, _),
            ..
        } => Some(*p),
        _ => None,
    }
}

/// The entry a kv mapping's source starts at: `E.value`, then message fields.
fn source_entry(e: &Expr) -> Option<EntryId> {
    let ExprKind::Member { base, member } = &e.kind else {
        return None;
    };
    match member {
        Member::MessageField(..) => source_entry(base),
        Member::EntryValue(en) if matches!(base.kind, ExprKind::Entry(x) if x == *en) => Some(*en),
        _ => None,
    }
}

/// The tensor properties `e` reads.
fn reads_of(e: &Expr) -> Vec<TensorKey> {
    let mut out = Vec::new();
    e.walk(&mut |x| {
        if let ExprKind::TensorKey(k) = x.kind {
            if !out.contains(&k) {
                out.push(k);
            }
        }
    });
    out
}

/// The help of `mapping_reach`'s rule on tensor properties.
fn readable_help(over_layout: bool) -> String {
    let which = if over_layout {
        "`name`, `dtype` and `shape`"
    } else {
        "`dtype`"
    };
    format!(
        "a mapping computes the properties in the order name, dtype, shape, strides, order, \
         byte_order, data; a statement reads {which} when a statement before it sets it \
         (`dtype = ..;` before `data = if dtype == f32 {{ .. }} else {{ .. }};`), and no other"
    )
}

impl Rules<'_> {
    fn err(&mut self, span: Span, msg: impl Into<String>, help: impl Into<String>) {
        let f = &self.files[self.ir.format(self.fid).file];
        self.out
            .push(Diagnostic::new(&f.path, &f.source, span, msg).with_help(help));
    }

    fn format(&mut self) {
        let f = self.ir.format(self.fid);
        let pickled = f.entries.iter().find(|&&e| self.pickle_of(e).is_some());
        match (&f.engine, pickled) {
            (Engine::Zip, Some(&p)) => self.zip_pickle(p),
            (Engine::Zip, None) => self.zip_layout(),
            (Engine::File, _) => self.file_pickle(),
            (Engine::Kv { backend, .. }, _) => self.kv(*backend),
            _ => {}
        }
        if matches!(f.engine, Engine::Protobuf { .. } | Engine::Kv { .. }) {
            self.messages();
        } else {
            self.messages_out_of_engine();
        }
        if !matches!(f.engine, Engine::Kv { .. }) {
            self.segments();
        }
        self.source_in_reach(pickled.is_some());
        self.mapping_reach(pickled.is_some());
        self.data_builtins();
        self.in_on_absent_values();
        self.encoded_outside_layouts();
        self.layout_reach();
        self.dict_values();
        self.layout_fields();
        for &e in &f.entries {
            let e = self.ir.entry(e);
            if e.preferred.is_some() && e.content != Content::Text {
                self.err(
                    e.span,
                    "`preferred` on an entry that is not `text`",
                    "only text entries are looked up by name: `text; preferred \"{prefix}/.data/version\";`",
                );
            }
        }
    }

    /// What a layout's expressions read: `dtype` only in the records of a file of pickles
    /// (the layouts beside the one of pickles: the dtype of the tensors whose bytes a
    /// record holds); no layout as a value (a
    /// layout's own fields are named alone); `size(..)` and `latin1(..)` only where the
    /// layout is written (its `write` rules and `spare`), where the encoded bytes are known.
    fn layout_reach(&mut self) {
        let ir = self.ir;
        let f = ir.format(self.fid);
        // A file of pickles reads its records alone, by the rules of `file_pickle`.
        let pickle_file = self.is_pickle_file();
        let mut errors: Vec<(Span, String, &str)> = Vec::new();
        for &l in &f.layouts {
            let layout = ir.layout(l);
            let pickled = layout
                .fields
                .iter()
                .any(|x| matches!(x.codec, Some(Codec::Pickle(_))));
            for x in &layout.fields {
                let written = x.write.iter().chain(match &x.codec {
                    Some(Codec::PyDict { spare, .. }) => spare.as_ref(),
                    _ => None,
                });
                let written: Vec<&Expr> = written.collect();
                let mut roots: Vec<(&Expr, bool)> = written.iter().map(|e| (*e, true)).collect();
                roots.extend(x.checks.iter().map(|e| (e, false)));
                roots.extend(
                    x.size
                        .iter()
                        .chain(&x.at)
                        .chain(&x.align)
                        .map(|e| (e, false)),
                );
                if let crate::ir::FieldKind::Cond { cond: e, .. }
                | crate::ir::FieldKind::Match { tag: e, .. } = &x.kind
                {
                    roots.push((e, false));
                }
                if let Some(Repeat::Count(e)) = &x.repeat {
                    roots.push((e, false));
                }
                if let Some(Codec::PyDict { encoding, .. }) = &x.codec {
                    roots.extend(encoding.iter().map(|e| (e, false)));
                }
                if let Some(p) = &x.pad {
                    roots.push((&p.align, false));
                    roots.extend(p.min.iter().map(|e| (e, false)));
                }
                for (root, written) in roots {
                    root.walk(&mut |e| match &e.kind {
                        ExprKind::RecordDtype if !pickle_file || pickled => errors.push((
                            e.span,
                            "`dtype` is read in a layout that is not a record of a file of pickles".into(),
                            "in a layout, `dtype` is the dtype of the tensors whose bytes a record of a file of pickles holds (`storages: Record repeat count(len(keys));`); elsewhere name a field holding it",
                        )),
                        ExprKind::Layout(_) => errors.push((
                            e.span,
                            "a layout is read as a value in a layout".into(),
                            "a layout's expressions name its fields alone (`header_len`, `header.shape`); a layout is a value in the tensor mapping over it (`slice(File.data, ..)`)",
                        )),
                        ExprKind::Call {
                            func: Builtin::Len,
                            args,
                        } if !written && matches!(args.first().map(|a| &a.value.ty), Some(Type::Dict(_))) => errors.push((
                            e.span,
                            "`len(..)` of a dict is read where the layout is read".into(),
                            "a dict's length is that of its encoded text, known where the layout is written: in a field's `write` rule (`header_len: u32 write = len(header);`)",
                        )),
                        ExprKind::Call {
                            func: func @ (Builtin::Size | Builtin::Latin1),
                            args,
                        } if written => {
                            let arg = args.first().map(|a| &a.value);
                            let field = match arg.map(|a| &a.kind) {
                                Some(ExprKind::Field(l, f)) => Some(ir.field(*l, *f)),
                                _ => None,
                            };
                            let ok = match (func, field) {
                                (Builtin::Size, Some(_)) => true,
                                (Builtin::Latin1, Some(f)) => matches!(f.codec, Some(Codec::PyDict { .. } | Codec::Json { .. })) && f.repeat.is_none(),
                                _ => false,
                            };
                            if !ok {
                                errors.push((
                                    arg.map_or(e.span, |a| a.span),
                                    format!("`{}(..)` takes a field of the layout{}", func.name(), if *func == Builtin::Latin1 { " decoded by a text codec" } else { "" }),
                                    "`size(header)` is the bytes the field `header` occupies (padding included); `latin1(header)` tells whether a `pydict`/`json` field's encoded text is Latin-1",
                                ));
                            }
                        }
                        ExprKind::Call {
                            func: func @ (Builtin::Size | Builtin::Latin1),
                            ..
                        } if !written => errors.push((
                            e.span,
                            format!("`{}(..)` is read where the layout is read", func.name()),
                            "`size(..)` and `latin1(..)` are known where the layout is written: in a field's `write` rule (`header_len: u32 write = size(header);`) or a codec's `spare`",
                        )),
                        _ => {}
                    });
                }
            }
        }
        for (span, msg, help) in errors {
            self.err(span, msg, help);
        }
    }

    /// What a dict's values are: what a Python literal or JSON text holds, decoded into
    /// integers of a width, `f64`, `bool`, `str`, dicts, and lists, tuples and maps with
    /// `str` keys of these.
    fn dict_values(&mut self) {
        fn text_value(t: &Type) -> bool {
            match t {
                Type::Int(i) => i.bytes.is_some(),
                Type::Float(x) => x.bytes == 8,
                Type::Bool | Type::Str | Type::Dict(_) => true,
                Type::List(t) | Type::Tuple(t) => text_value(t),
                Type::Map(k, v) => **k == Type::Str && text_value(v),
                _ => false,
            }
        }
        /// True when `t` is or holds a float narrower than `f64`.
        fn narrow_float(t: &Type) -> bool {
            match t {
                Type::Float(x) => x.bytes != 8,
                Type::List(t) | Type::Tuple(t) => narrow_float(t),
                Type::Map(k, v) => narrow_float(k) || narrow_float(v),
                _ => false,
            }
        }
        let ir = self.ir;
        for &d in &ir.format(self.fid).dicts {
            let dict = ir.dict(d);
            for k in dict.keys.iter().filter(|k| !text_value(&k.ty)) {
                let help = if narrow_float(&k.ty) {
                    format!(
                        "a Python literal's or JSON text's floats are 64-bit: declare `f64` \
                         (`{}: f64;`, `list<f64>`)",
                        k.key
                    )
                } else {
                    "a dict's values are integers of a width (u8..i64), f64, bool, str, dicts, \
                     and list<T>, tuple<T> or map<str, T> of these; bytes laid out in binary \
                     (a layout, a payload) are fields of a layout"
                        .to_string()
                };
                self.err(
                    k.span,
                    format!(
                        "key '{}' of dict '{}' has a type that no Python literal or JSON text holds",
                        k.key, dict.name
                    ),
                    help,
                );
            }
        }
    }

    /// What a layout's fields lay out (codecs of pickles aside, read by the pickle
    /// engines): numbers, `bool`, text and bytes of a size (or the remaining bytes),
    /// payloads, layouts, and dicts decoded by a `pydict` or `json` codec; a list is a
    /// repeated field, and neither a magic nor a payload repeats; `rest` sizes one text,
    /// bytes, codec text or payload (not a number, magic, conditional width or layout,
    /// nor the items of a repeated field).
    fn layout_fields(&mut self) {
        let ir = self.ir;
        let mut errors: Vec<(Span, String, &str)> = Vec::new();
        for &l in &ir.format(self.fid).layouts {
            for x in &ir.layout(l).fields {
                let text_codec = match &x.codec {
                    Some(Codec::Pickle(_) | Codec::Protobuf(_)) => continue,
                    Some(Codec::PyDict { .. }) => Some("pydict"),
                    Some(Codec::Json { .. }) => Some("json"),
                    None => None,
                };
                let name = &x.name;
                if let crate::ir::FieldKind::Match { cases, .. } = &x.kind {
                    Self::match_field(ir, x, cases, &mut errors);
                }
                if let (Some(w), Type::Dict(_) | Type::Layout(_)) = (&x.write, &x.item_ty) {
                    errors.push((
                        w.span,
                        format!("a `write` rule gives the dict or layout '{name}'"),
                        "a dict or a layout is written from its keys or fields (each with its own \
                         `write` rule, or given by the tensor mapping); a `write` rule gives a \
                         number, a text or bytes",
                    ));
                }
                if x.repeat.is_some() {
                    match (&x.kind, &x.item_ty) {
                        (crate::ir::FieldKind::Magic(_), _) => errors.push((
                            x.span,
                            format!("the magic '{name}' repeats"),
                            "a magic is one run of constant bytes: write them all in it \
                             (`magic: magic b\"ABAB\";`)",
                        )),
                        (_, Type::Payload) => errors.push((
                            x.span,
                            format!("the payload '{name}' repeats"),
                            "a layout holds one payload, its last field; give each record the \
                             bounds of its bytes in it (`begin: u64; end: u64;`, `data = \
                             slice(File.data, r.begin, r.end)`)",
                        )),
                        _ => {}
                    }
                }
                match (&x.item_ty, text_codec) {
                    (Type::Dict(_), None) => errors.push((
                        x.span,
                        format!("the dict '{name}' has no codec"),
                        "a dict is text decoded by a codec: `header: Header size header_len \
                         codec json;` (or `codec pydict`)",
                    )),
                    (Type::Dict(_), Some(_)) | (_, None) => {}
                    (_, Some(codec)) => errors.push((
                        x.span,
                        format!("codec '{codec}' decodes a dict, and '{name}' is not one"),
                        "declare a `dict` of the keys the text holds and make it the field's \
                         type (`header: Header size header_len codec json;`)",
                    )),
                }
                if x.rest {
                    let sized = matches!(x.kind, crate::ir::FieldKind::Value)
                        && matches!(x.item_ty, Type::Bytes | Type::Str | Type::Dict(_));
                    let payload = x.item_ty == Type::Payload;
                    if x.repeat.is_some() {
                        errors.push((
                            x.span,
                            format!(
                                "the repeated field '{name}' takes every remaining byte (`rest`)"
                            ),
                            "`rest` sizes one value; give each item a size (`names: str size 8 \
                             repeat count(n);`), or put the items in a record read until its \
                             window ends (`records: Record repeat until_eof;`)",
                        ));
                    } else if !sized && !payload {
                        errors.push((
                            x.span,
                            format!("`rest` on '{name}', which is not text or bytes"),
                            "`rest` sizes text, bytes, a dict decoded by a codec or a payload \
                             over every remaining byte; a number, a magic or a conditional width \
                             has its own width, and a nested layout is read in place (no size) or \
                             in a window (`size n`)",
                        ));
                    }
                }
                match &x.item_ty {
                    Type::List(_) | Type::Tuple(_) | Type::Map(..) => errors.push((
                        x.span,
                        format!("'{name}' is a list or map, which a layout does not lay out"),
                        "a list in a layout is a repeated field (`dims: u64 repeat \
                         count(ndim);`); a list or map in text is a key of a dict decoded by a \
                         codec",
                    )),
                    Type::Bytes | Type::Str | Type::Dict(_)
                        if x.size.is_none()
                            && !x.rest
                            && !matches!(x.kind, crate::ir::FieldKind::Magic(_)) =>
                    {
                        errors.push((
                            x.span,
                            format!("'{name}' has no size"),
                            "give its length in bytes (`name: str size name_len;`, with \
                             `name_len: u16 write = len(name);`), or `rest` for every remaining \
                             byte",
                        ))
                    }
                    _ => {}
                }
            }
        }
        for (span, msg, help) in errors {
            self.err(span, msg, help);
        }
    }

    /// A tagged union (`match`) reads each value in place as its case's type: a number,
    /// `bool`, or a layout holding no payload; it has no `size`, `pad`, codec or `write`
    /// rule (its values are given; its tag may be computed by `tag(..)`).
    fn match_field(
        ir: &Ir,
        x: &crate::ir::Field,
        cases: &[crate::ir::MatchCase],
        errors: &mut Vec<(Span, String, &'static str)>,
    ) {
        let name = &x.name;
        for c in cases {
            let ok = match &c.ty {
                Type::Int(_) | Type::Float(_) | Type::Bool | Type::Error => true,
                Type::Layout(l) => !ir.layout(*l).fields.iter().any(|g| g.ty == Type::Payload),
                _ => false,
            };
            if !ok {
                errors.push((
                    c.span,
                    format!(
                        "case {} of '{name}' is not a number or a layout without payload",
                        c.tag
                    ),
                    "a case of a `match` is read in place: a number, `bool`, or a layout \
                     (text of a length is a layout: `layout Str little { n: u64 write = \
                     len(text); text: str size n; }`)",
                ));
            }
        }
        let what = if x.write.is_some() {
            Some((
                x.write.as_ref().map_or(x.span, |w| w.span),
                "a `write` rule",
            ))
        } else if x.size.is_some() {
            Some((x.size.as_ref().map_or(x.span, |s| s.span), "a `size`"))
        } else if x.codec.is_some() {
            Some((x.span, "a codec"))
        } else if x.pad.is_some() {
            Some((x.span, "`pad`"))
        } else {
            None
        };
        if let Some((span, what)) = what {
            errors.push((
                span,
                format!("the `match` field '{name}' has {what}"),
                "each value of a `match` is read in place as the type its tag selects, and is \
                 given when written; compute the tag instead (`kind: u32 write = tag(value);`)",
            ));
        }
    }

    /// Protobuf `message`s and `enum`s are read and written by the engines over messages
    /// (`protobuf` and `kv`) only.
    fn messages_out_of_engine(&mut self) {
        let f = self.ir.format(self.fid);
        let spans = f
            .messages
            .iter()
            .map(|&m| (self.ir.message(m).span, "message"))
            .chain(f.enums.iter().map(|&e| (self.ir.enum_(e).span, "enum")));
        let spans: Vec<(Span, &str)> = spans.collect();
        for (span, what) in spans {
            self.err(
                span,
                format!("a protobuf `{what}` in a format of the `{}` engine", self.engine_name()),
                "messages and enums are read and written by the engines over protobuf messages: declare them in a format of `engine protobuf(root = Message);` or `engine kv(backend = ...);`",
            );
        }
    }

    /// The name of the format's engine as written (`file`, `zip`).
    fn engine_name(&self) -> &'static str {
        match self.ir.format(self.fid).engine {
            Engine::File => "file",
            Engine::Zip => "zip",
            Engine::Protobuf { .. } => "protobuf",
            Engine::Kv { .. } => "kv",
            Engine::Error => "unknown",
        }
    }

    /// `source` names the file a mapping of a `file` format over a layout reads: it is in
    /// reach there only (not in layouts, which are also read inside archives and written
    /// with no file, nor in entries, messages, or mappings over pickles and messages).
    fn source_in_reach(&mut self, pickled_entry: bool) {
        let ir = self.ir;
        let f = ir.format(self.fid);
        let file_mapping = |m: crate::ir::MappingId| {
            f.engine == Engine::File
                && !pickled_entry
                && matches!(ir.mapping(m).binding_ty, Type::Layout(l) if !ir.layout(l).fields.iter().any(|x| matches!(x.codec, Some(Codec::Pickle(_)))))
        };
        let spans: Vec<Span> = ir
            .exprs_of(|owner| match owner {
                crate::ir::ExprOwner::Layout(l) => f.layouts.contains(&l),
                crate::ir::ExprOwner::Message(m) => f.messages.contains(&m),
                crate::ir::ExprOwner::Entry(e) => f.entries.contains(&e),
                crate::ir::ExprOwner::Mapping(m) => f.mappings.contains(&m) && !file_mapping(m),
            })
            .into_iter()
            .filter(|e| matches!(e.kind, ExprKind::Source))
            .map(|e| e.span)
            .collect();
        for span in spans {
            self.err(
                span,
                "`source` is read in a tensor mapping of a `file` format over a layout",
                "the file's name is known where the tensors of one file are mapped: `name = source.stem;` in `tensor from File as f`; layouts, entries and mappings over pickles or messages have no file in reach",
            );
        }
    }

    /// What a mapping's expressions read of the tensor and of its iteration, as its engine
    /// computes them: the properties are computed in the order name, dtype, shape, strides,
    /// order, byte_order, data, and a statement reads those set by the statements before it
    /// (`dtype`, and in a `file` format over a layout also `name` and `shape`); a `where`
    /// filter reads the item, not the tensor; `position` is the item's place in a list (a
    /// repeated field of a layout, or messages); `root` is where a document's mapping
    /// starts (its source), not a value read beside the binding.
    fn mapping_reach(&mut self, pickled_entry: bool) {
        let ir = self.ir;
        let f = ir.format(self.fid);
        let pickle_file = self.is_pickle_file();
        let over_layout = f.engine == Engine::File && !pickle_file && !pickled_entry;
        let over_messages = matches!(f.engine, Engine::Protobuf { .. } | Engine::Kv { .. });
        let kv = matches!(f.engine, Engine::Kv { .. });
        let pickles = pickle_file || pickled_entry;
        let readable: &[TensorKey] = if over_layout {
            &[TensorKey::Name, TensorKey::Dtype, TensorKey::Shape]
        } else {
            &[TensorKey::Dtype]
        };
        let rank = |k: TensorKey| {
            [
                TensorKey::Name,
                TensorKey::Dtype,
                TensorKey::Shape,
                TensorKey::Strides,
                TensorKey::Order,
                TensorKey::ByteOrder,
                TensorKey::Data,
            ]
            .iter()
            .position(|&x| x == k)
            .unwrap_or(7)
        };
        let mut errors: Vec<(Span, String, String)> = Vec::new();
        for &m in f.mappings.iter().chain(&f.values) {
            let map = ir.mapping(m);
            let over_list = !matches!(map.source.kind, ExprKind::Layout(_));
            let position_ok = over_messages || (over_layout && over_list);
            let mut roots: Vec<(&Expr, Option<TensorKey>)> = vec![(&map.source, None)];
            roots.extend(map.filter.iter().map(|w| (w, None)));
            let mut set: Vec<TensorKey> = Vec::new();
            for st in &map.stmts {
                match st {
                    MappingStmt::Include { arg, .. } => {
                        roots.push((arg, None));
                        set.extend([TensorKey::Name, TensorKey::Dtype, TensorKey::Shape]);
                    }
                    MappingStmt::Set { key, value } => {
                        for x in reads_of(value) {
                            let known =
                                readable.contains(&x) && set.contains(&x) && rank(x) < rank(*key);
                            if !known {
                                errors.push((
                                    value.span,
                                    format!(
                                        "`{}` reads the tensor's `{}`, which is not computed before it",
                                        key.name(),
                                        x.name()
                                    ),
                                    readable_help(over_layout),
                                ));
                            }
                        }
                        roots.push((value, Some(*key)));
                        set.push(*key);
                    }
                }
            }
            for (i, (root, key)) in roots.iter().enumerate() {
                let is_source = i == 0;
                root.walk(&mut |e| match &e.kind {
                    ExprKind::TensorKey(k) if key.is_none() => errors.push((
                        e.span,
                        format!("the tensor's `{}` is read where the item is chosen", k.name()),
                        "a `where` filter and a mapping's source read the item (the binding's \
                         fields), not the tensor's properties, which are computed after it"
                            .into(),
                    )),
                    ExprKind::Position if !position_ok => errors.push((
                        e.span,
                        "`position` is read in a mapping that does not iterate a list".into(),
                        "`position` is the item's place in a repeated field of a layout \
                         (`tensor from File.records as r`) or among messages; a mapping over \
                         one layout or over pickled objects has none (a pickled tensor's \
                         name is its `path`)"
                            .into(),
                    )),
                    ExprKind::Member {
                        member: Member::EntryContent(_),
                        ..
                    } if kv => errors.push((
                        e.span,
                        "an entry's `content` is read in a mapping of a key-value database".into(),
                        "a database record is read by its entry's `value` (the message it holds), \
                         `name` and captures (`blob.value`, `blob.name`)"
                            .into(),
                    )),
                    ExprKind::Member {
                        member: Member::EntryContent(x),
                        ..
                    } if pickles && !is_source && ir.entry(*x).content != Content::Text => {
                        errors.push((
                            e.span,
                            format!("the content of entry '{}' is read beside the pickle", ir.entry(*x).name),
                            "beside the objects of the pickle a mapping reads the text of `text` entries (`version.content`); raw members are its tensors' storages (`storage(key = t.storage.key)`)".into(),
                        ))
                    }
                    ExprKind::Member {
                        member: Member::EntryName(_) | Member::Capture(..) | Member::EntryValue(_),
                        ..
                    } if pickles => errors.push((
                        e.span,
                        "an entry's name or captures are read in a mapping over pickled objects".into(),
                        "a pickled tensor is named by its path in the pickle (`name = t.path;`); entries' names and captures name the records of key-value databases".into(),
                    )),
                    ExprKind::Layout(_) if pickles && !is_source && *key != Some(TensorKey::Data) => errors.push((
                        e.span,
                        "a layout is read beside the pickled objects".into(),
                        "a mapping over pickled objects reads the file's records in its `data` alone (`data = slice(File.storages.bytes[index_of(File.keys, t.storage.key)], ..)`); its other properties come from the object (`t.size`)".into(),
                    )),
                    ExprKind::Root(_) if !is_source => errors.push((
                        e.span,
                        "`root` is read beside the mapped message".into(),
                        "`root` is where a document's mapping starts (`tensor from \
                         root.graph.initializer as t`); the mapping reads the message it \
                         iterates (its binding)"
                            .into(),
                    )),
                    _ => {}
                });
            }
        }
        for (span, msg, help) in errors {
            self.err(span, msg, help);
        }
    }

    /// The tensor data builtins (`elements(..)`, `external(..)`, `widen(..)`) are the `data` of a
    /// mapping over protobuf messages (all of it, or a branch of its `if`s); another
    /// format's mapping (`npy.tensor(..)`) is applied by `include` alone.
    fn data_builtins(&mut self) {
        let ir = self.ir;
        let f = ir.format(self.fid);
        let over_messages = matches!(f.engine, Engine::Protobuf { .. } | Engine::Kv { .. });
        // The places a data builtin may stand: the `data` of a mapping over messages and
        // the branches of its `if`s, by span.
        let mut allowed: Vec<Span> = Vec::new();
        if over_messages {
            fn branches(e: &Expr, out: &mut Vec<Span>) {
                match &e.kind {
                    ExprKind::If {
                        then, otherwise, ..
                    } => {
                        branches(then, out);
                        branches(otherwise, out);
                    }
                    // `widen(data, dtype)` is data, and so is its first argument.
                    ExprKind::Call {
                        func: Builtin::Widen,
                        args,
                    } => {
                        out.push(e.span);
                        if let Some(a) = args.first() {
                            branches(&a.value, out);
                        }
                    }
                    _ => out.push(e.span),
                }
            }
            for &m in &f.mappings {
                if let Some(d) = ir.mapping(m).key(TensorKey::Data) {
                    branches(d, &mut allowed);
                }
            }
        }
        let spans: Vec<(Span, String, &str)> = self
            .own_exprs(true)
            .into_iter()
            .filter_map(|e| match &e.kind {
                ExprKind::Call {
                    func: func @ (Builtin::Elements | Builtin::External | Builtin::Widen),
                    ..
                } if !allowed.contains(&e.span) => Some((
                    e.span,
                    format!("`{}(..)` is read where no tensor's data is given", func.name()),
                    "`elements(f)`, `external(..)` and `widen(data, dtype)` are the `data` of a \
                     mapping over protobuf messages (`data = if has(t.raw_data) { t.raw_data } \
                     else { elements(t.float_data) };`)",
                )),
                ExprKind::MappingOf { format, .. } => Some((
                    e.span,
                    format!("'{}.tensor(..)' is used as a value", ir.format(*format).name),
                    "another format's mapping is applied by `include` (`include npy.tensor(m.content);`), then statements override what it gives",
                )),
                _ => None,
            })
            .collect();
        for (span, msg, help) in spans {
            self.err(span, msg, help);
        }
    }

    /// `in` on a value that may be absent (read from a pickle, an entry's text, a table's
    /// key) tests literals.
    fn in_on_absent_values(&mut self) {
        let spans: Vec<Span> = self
            .own_exprs(true)
            .into_iter()
            .filter_map(|e| match &e.kind {
                ExprKind::In { expr, list } => {
                    let maybe_absent = matches!(expr.ty, Type::Pickled(_))
                        || matches!(
                            expr.kind,
                            ExprKind::Member {
                                member: Member::EntryContent(_),
                                ..
                            } | ExprKind::Call {
                                func: Builtin::KeyOf,
                                ..
                            }
                        );
                    list.iter()
                        .find(|i| !matches!(i.kind, ExprKind::Const(Const::Str(_) | Const::Int(_))))
                        .filter(|_| maybe_absent)
                        .map(|i| i.span)
                }
                _ => None,
            })
            .collect();
        for span in spans {
            self.err(
                span,
                "`in` tests a value that may be absent against an item that is not a literal",
                "a value read from a pickle, an entry's text or `key_of(..)` may be absent: list the strings or integers it may be (`t.storage.class in [\"torch.FloatStorage\", \"torch.HalfStorage\"]`)",
            );
        }
    }

    /// `size` and `latin1` read encoded bytes, which only a layout's writer has: they are
    /// not read outside layouts.
    fn encoded_outside_layouts(&mut self) {
        let spans: Vec<(Span, Builtin)> = self
            .own_exprs(false)
            .into_iter()
            .filter_map(|e| match &e.kind {
                ExprKind::Call {
                    func: func @ (Builtin::Size | Builtin::Latin1),
                    ..
                } => Some((e.span, *func)),
                _ => None,
            })
            .collect();
        for (span, func) in spans {
            self.err(
                span,
                format!("`{}(..)` is read outside a layout", func.name()),
                "`size(..)` and `latin1(..)` are known where a layout is written: in a field's `write` rule (`header_len: u32 write = size(header);`); elsewhere `len(..)` counts a text's bytes or a list's items",
            );
        }
    }

    /// Whether the format is a `file` of pickles (a layout field decoded by a pickle).
    fn is_pickle_file(&self) -> bool {
        let ir = self.ir;
        let f = ir.format(self.fid);
        f.engine == Engine::File
            && f.layouts.iter().any(|&l| {
                ir.layout(l)
                    .fields
                    .iter()
                    .any(|x| matches!(x.codec, Some(Codec::Pickle(_))))
            })
    }

    /// Every expression, with its sub-expressions, of the format's messages, entries and
    /// mappings, and with `layouts` of its layouts.
    fn own_exprs(&self, layouts: bool) -> Vec<&Expr> {
        let f = self.ir.format(self.fid);
        self.ir.exprs_of(|owner| match owner {
            crate::ir::ExprOwner::Layout(l) => layouts && f.layouts.contains(&l),
            crate::ir::ExprOwner::Message(m) => f.messages.contains(&m),
            crate::ir::ExprOwner::Entry(e) => f.entries.contains(&e),
            crate::ir::ExprOwner::Mapping(m) => f.mappings.contains(&m) || f.values.contains(&m),
        })
    }

    fn pickle_of(&self, e: EntryId) -> Option<crate::ir::PickleId> {
        match self.ir.entry(e).content {
            Content::Codec(Codec::Pickle(p)) => Some(p),
            _ => None,
        }
    }

    /// `align` of a zip entry: a literal in 1..=65535.
    fn entry_align(&mut self, e: EntryId) {
        if let Some(a) = &self.ir.entry(e).align {
            if !matches!(a.kind, ExprKind::Const(Const::Int(n)) if (1..=65535).contains(&n)) {
                self.err(
                    a.span,
                    "a zip entry's `align` is a number from 1 to 65535",
                    "members are aligned when written: `align 64;`",
                );
            }
        }
    }

    /// A mapping over pickled objects has no `where` filter: every object of the mapped
    /// kind is a tensor.
    fn no_pickle_filter(&mut self, map: &Mapping) {
        if let Some(w) = &map.filter {
            self.err(
                w.span,
                "a `where` filter on a mapping over pickled objects",
                "every object of the mapped kind is a tensor; filter by kind in the `pickle` declaration",
            );
        }
    }

    /// The statements a mapping over pickled objects may have (no `include`, no `order`
    /// or `segment`), its `shape` and `strides` (lists of integers) and its `data`.
    fn pickle_mapping(&mut self, map: &Mapping, data_ok: &dyn Fn(&Expr) -> bool, what: &str) {
        self.no_pickle_filter(map);
        for s in &map.stmts {
            match s {
                MappingStmt::Set { key, value }
                    if matches!(key, TensorKey::Order | TensorKey::Segment) =>
                {
                    self.err(
                        value.span,
                        format!("`{}` in a mapping over pickled objects", key.name()),
                        "a pickled tensor's layout is its `strides`",
                    )
                }
                MappingStmt::Include { arg, .. } => self.err(
                    arg.span,
                    "`include` in a mapping over pickled objects",
                    "the mapping sets `name`, `dtype`, `shape` and `data` itself; `include` applies another format's mapping to the members of a zip (npz)",
                ),
                MappingStmt::Set { .. } => {}
            }
        }
        for k in [TensorKey::Shape, TensorKey::Strides] {
            if let Some(e) = map.key(k).filter(|e| !pickled_int_list(e)) {
                self.err(
                    e.span,
                    format!("the `{}` of a pickled tensor is a list of integers", k.name()),
                    "a pickled tuple (`shape = t.size;`), a list of integers or pickled integers (`[t.numel]`), or a `list<int>` value",
                );
            }
        }
        if let Some(d) = map.key(TensorKey::Data) {
            if !data_ok(unsliced(d)) {
                self.err(
                    d.span,
                    "the `data` of a pickled tensor is a storage, or a slice of one to its end",
                    what.to_string(),
                );
            }
        }
    }

    fn zip_pickle(&mut self, first: EntryId) {
        let ir = self.ir;
        let f = ir.format(self.fid);
        let caps = &ir.entry(first).pattern.captures;
        for &id in &f.entries {
            let e = ir.entry(id);
            self.entry_align(id);
            let extra = e
                .pattern
                .captures
                .iter()
                .filter(|c| !caps.contains(c))
                .count();
            match &e.content {
                Content::Codec(Codec::Pickle(_)) | Content::Text if extra > 0 => self.err(
                    e.span,
                    "a pickle or `text` entry with captures the first pickle entry does not have",
                    "the first pickle entry's member names the others: they use its captures",
                ),
                Content::Codec(Codec::Pickle(_)) => {}
                Content::Text => self.text_entry(id),
                Content::Bytes if extra == 1 => {}
                Content::Bytes => self.err(
                    e.span,
                    "a storage entry names one storage by one capture beyond the pickle's",
                    "`entry storage \"{prefix}/data/{key}\"`, looked up as `storage(key = ..)`",
                ),
                _ => self.err(
                    e.span,
                    "an entry of a zip around a pickle holds a pickle, `text` or raw bytes",
                    "members laid out by a layout belong to a zip of another format's files (npz)",
                ),
            }
        }
        let data_ok = |d: &Expr| match &d.kind {
            ExprKind::EntryLookup { entry, captures } => {
                captures.len() == 1 && ir.entry(*entry).content == Content::Bytes
            }
            _ => false,
        };
        // Mappings whose `data` is a pickled byte string (tensors the pickle holds itself)
        // are not written: the `write` rule is that of the one mapping over storages.
        let several = f
            .mappings
            .iter()
            .filter(|&&m| !ir.mapping(m).data_in_pickle())
            .count()
            > 1;
        for &m in &f.mappings {
            let map = ir.mapping(m);
            let over = match &map.source.kind {
                ExprKind::Member {
                    base,
                    member: Member::PickleObjects(..),
                } => matches!(
                    base.kind,
                    ExprKind::Member {
                        member: Member::EntryContent(_),
                        ..
                    }
                ),
                _ => false,
            };
            if !over {
                self.err(
                    map.source.span,
                    "a mapping of a zip around a pickle iterates the objects of a pickle entry",
                    "`tensor from pickle.content.tensors as t`",
                );
                continue;
            }
            if map.data_in_pickle() {
                self.zip_placed(map);
                continue;
            }
            self.pickle_mapping(
                map,
                &data_ok,
                "`data = slice(storage(key = t.storage.key), offset, none);` with `storage` a raw entry",
            );
            if let Some(w) = &map.write {
                if several {
                    self.err(
                        w.span,
                        "a `write` rule in a format of several tensor mappings",
                        "the writer inverts one mapping; remove `write` or the other mappings",
                    );
                } else {
                    self.pickle_writer(first, map);
                }
            }
        }
        for &id in &f.entries {
            if let Some(w) = &ir.entry(id).write {
                self.global_texts(w);
            }
        }
    }

    /// A mapping of a zip around a pickle whose `data` is a pickled byte string (NumPy
    /// arrays in a checkpoint): read in place (`byte_ranges;`), described by the pickle
    /// alone (no text entry), dense (`order`, no `strides`), and not written (the writer
    /// writes storages).
    fn zip_placed(&mut self, map: &Mapping) {
        self.in_place(map);
        self.placed_mapping(map, "a zip around a pickle");
        let text = |x: &Expr| {
            matches!(&x.kind, ExprKind::Member { base, member: Member::EntryContent(_) }
                if matches!(base.kind, ExprKind::Entry(_)))
        };
        for s in &map.stmts {
            if let MappingStmt::Set { value, .. } = s {
                if reads(value, &text) {
                    self.err(
                        value.span,
                        "a tensor whose bytes the pickle holds is described by the pickle alone",
                        "read its dtype, shape and byte order from the pickled object, not from text entries",
                    );
                }
            }
        }
        if let Some(w) = &map.write {
            self.err(
                w.span,
                "a `write` rule on a mapping whose bytes the pickle holds",
                "the writer puts tensors in storages: give `write` to the mapping over storages",
            );
        }
    }

    /// A mapping whose `data` is a pickled byte string reads it in place: the declaration
    /// of the pickle it iterates keeps byte strings in the file (`byte_ranges;`).
    fn in_place(&mut self, map: &Mapping) {
        let ir = self.ir;
        if let Some(p) = mapped_pickle(map) {
            if !ir.pickle(p).byte_ranges {
                self.err(
                    map.source.span,
                    "a mapping whose `data` is a pickled byte string reads it in place, but the pickle's declaration copies byte strings",
                    format!("add `byte_ranges;` to `pickle {}`", ir.pickle(p).name),
                );
            }
        }
    }

    /// The statements a mapping over pickled objects whose bytes the pickle holds may
    /// have (no `where`, `include`, `strides` or `segment`) and its `shape`; `container`
    /// names where such mappings are (`a file that is one pickle`).
    fn placed_mapping(&mut self, map: &Mapping, container: &str) {
        self.no_pickle_filter(map);
        for st in &map.stmts {
            match st {
                MappingStmt::Set { key, value }
                    if matches!(key, TensorKey::Strides | TensorKey::Segment) =>
                {
                    self.err(
                        value.span,
                        format!("`{}` in a mapping of {container}", key.name()),
                        "its arrays are dense where the pickle holds them: give `order` (`order = if a.state[3] == true { fortran } else { c };`)",
                    )
                }
                MappingStmt::Include { arg, .. } => self.err(
                    arg.span,
                    "`include` in a mapping over pickled objects",
                    "the mapping sets `name`, `dtype`, `shape` and `data` itself",
                ),
                MappingStmt::Set { .. } => {}
            }
        }
        if let Some(e) = map.key(TensorKey::Shape).filter(|e| !pickled_int_list(e)) {
            self.err(
                e.span,
                "the `shape` of a pickled tensor is a list of integers",
                "a pickled tuple (`shape = a.state[1];`), a list of integers or pickled integers",
            );
        }
    }

    /// A text entry: its check lists the values allowed, its `write` is a string.
    fn text_entry(&mut self, id: EntryId) {
        let e = self.ir.entry(id);
        if let Some(c) = &e.check {
            let ok = matches!(&c.kind, ExprKind::In { list, .. }
                if list.iter().all(|i| matches!(i.kind, ExprKind::Const(Const::Str(_)))));
            if !ok {
                self.err(
                    c.span,
                    "a text entry's `check` lists the values it allows",
                    format!("`check {} in [\"a\", \"b\"];`", e.name),
                );
            }
        }
        if let Some(w) = &e.write {
            if !matches!(w.kind, ExprKind::Const(Const::Str(_))) {
                self.err(
                    w.span,
                    "a text entry's `write` is a string",
                    "the content written, as it is: `write = \"3\\n\";`",
                );
            }
        }
    }

    /// What writing needs: the root object, its member's name, the text entries' contents,
    /// a byte order and a `data` that do not depend on what is read.
    fn pickle_writer(&mut self, first: EntryId, map: &Mapping) {
        let ir = self.ir;
        let p = ir.entry(first);
        if p.write.is_none() || p.write_name.is_none() {
            self.err(
                p.span,
                "the pickle entry of a writable format needs `write` and `write_name`",
                "`write_name = \"archive/data.pkl\"; write = collections.OrderedDict();`",
            );
        }
        for &id in &ir.format(self.fid).entries {
            let e = ir.entry(id);
            if e.content == Content::Text && !e.optional && e.write.is_none() {
                self.err(
                    e.span,
                    "a text entry of a writable format needs `write`",
                    "the content written: `write = \"...\";` (or make the entry `optional`)",
                );
            }
        }
        if let Some(b) = map.key(TensorKey::ByteOrder) {
            if reads(b, &|x| matches!(x.kind, ExprKind::Binding)) {
                self.err(
                    b.span,
                    "a written byte order that depends on the pickled object",
                    "the writer chooses the byte order before the object: read it from text entries",
                );
            }
        }
        if let Some(d) = map.key(TensorKey::Data) {
            let text = |x: &Expr| {
                matches!(&x.kind, ExprKind::Member { base, member: Member::EntryContent(_) }
                    if matches!(base.kind, ExprKind::Entry(_)))
            };
            if reads(d, &text) {
                self.err(
                    d.span,
                    "a written `data` that depends on the text entries",
                    "the writer places storages from the object alone",
                );
            }
        }
        if let Some(w) = &map.write {
            self.global_texts(w);
        }
    }

    /// `global(..)` in a write rule names a string or `key_of(TABLE, dtype)` of a
    /// str-keyed table.
    fn global_texts(&mut self, w: &Expr) {
        let ir = self.ir;
        let mut bad = Vec::new();
        w.walk(&mut |x| {
            let ExprKind::Call { func, args } = &x.kind else {
                return;
            };
            match func {
                Builtin::Global => {
                    let ok = matches!(
                        args.first().map(|a| &a.value.kind),
                        Some(
                            ExprKind::Const(Const::Str(_))
                                | ExprKind::Call {
                                    func: Builtin::KeyOf,
                                    ..
                                }
                        )
                    );
                    if !ok {
                        bad.push((
                            x.span,
                            "`global(..)` names a string or `key_of(TABLE, dtype)`",
                        ));
                    }
                }
                Builtin::KeyOf => {
                    if let Some(ExprKind::Table(t)) = args.first().map(|a| &a.value.kind) {
                        if ir.table(*t).key != crate::ast::KeyKind::Str {
                            bad.push((
                                x.span,
                                "`key_of` in a pickle write rule names a table of string keys",
                            ));
                        }
                    }
                }
                _ => {}
            }
        });
        for (span, msg) in bad {
            self.err(
                span,
                msg,
                "the globals a pickle names are text: `global(\"torch.FloatStorage\")`",
            );
        }
    }

    /// A zip of another format's files (npz), when it maps tensors: one entry laid out by
    /// a layout of a `file` format, whose members are named by one capture; one mapping
    /// over it that includes that format's mapping of the member's content and names the
    /// tensor by the capture, and overrides nothing that mapping gives (its writer writes
    /// the members).
    fn zip_layout(&mut self) {
        let ir = self.ir;
        let f = ir.format(self.fid);
        for &e in &f.entries {
            self.entry_align(e);
        }
        let (entry, map) = match (f.entries.as_slice(), f.mappings.as_slice()) {
            ([e], [m]) => (*e, ir.mapping(*m)),
            // Nothing mapped: the archive holds no tensor.
            (_, []) => return,
            (entries, mappings) => {
                let span = match (entries.get(1), mappings.get(1)) {
                    (Some(&e), _) => ir.entry(e).span,
                    (None, Some(&m)) => ir.mapping(m).span,
                    _ => f.name_span,
                };
                self.err(
                    span,
                    "a zip of another format's files has one entry and one tensor mapping",
                    "one tensor per member: `entry member \"{name}.npy\" { repeated; layout npy.File; }` and `tensor from member as m { include npy.tensor(m.content); name = m.name; }`",
                );
                return;
            }
        };
        let e = ir.entry(entry);
        let Content::Layout(lid) = e.content else {
            self.err(
                e.span,
                "the entry of a zip of another format's files has a `layout`",
                "`layout npy.File;`; raw members and text belong to a zip around a pickle",
            );
            return;
        };
        let other = ir.layout(lid).format;
        if other == self.fid || ir.format(other).engine != Engine::File {
            self.err(
                e.span,
                "the entry's layout belongs to another format of the `file` engine",
                "declare the member's format apart (`format npy { engine file; ... }`) and name its layout: `layout npy.File;`",
            );
            return;
        }
        if e.pattern.captures.len() != 1 {
            self.err(
                e.span,
                "the entry of a zip of another format's files names its members by one capture",
                "the tensor's name, as the writer fills it in: `\"{name}.npy\"`",
            );
        }
        if !matches!(map.source.kind, ExprKind::Entry(x) if x == entry) {
            self.err(
                map.source.span,
                "a mapping of a zip of another format's files iterates its entry",
                format!("`tensor from {} as m`", e.name),
            );
        }
        if let Some(w) = &map.filter {
            self.err(
                w.span,
                "a `where` filter on a zip of another format's files",
                "every member the entry's pattern matches is a tensor: narrow the pattern instead",
            );
        }
        let mut included = false;
        for st in &map.stmts {
            match st {
                MappingStmt::Include { format, arg, .. } => {
                    let content = matches!(&arg.kind, ExprKind::Member { base, member: Member::EntryContent(_) }
                        if matches!(base.kind, ExprKind::Binding));
                    if !content || *format != other || included {
                        self.err(
                            arg.span,
                            "a zip of another format's files includes that format's mapping of the member's content, once",
                            format!("`include {}.tensor(m.content);`", ir.format(other).name),
                        );
                    }
                    included = true;
                }
                MappingStmt::Set {
                    key: TensorKey::Name,
                    value,
                } => {
                    let capture = matches!(&value.kind, ExprKind::Member { base, member: Member::Capture(..) }
                        if matches!(base.kind, ExprKind::Binding));
                    if !capture {
                        self.err(
                            value.span,
                            "the tensors of a zip of another format's files are named by the member's capture",
                            "the writer names each member by the tensor's name: `name = m.name;`",
                        );
                    }
                }
                MappingStmt::Set { key, value } => {
                    let other = &ir.format(other).name;
                    self.err(
                        value.span,
                        format!(
                            "a zip of another format's files sets only the tensor's name, not its `{}`",
                            key.name()
                        ),
                        format!(
                            "each member is written by `{other}`'s writer from the tensor as it is given, so a member holds what `{other}.tensor` reads: set `{}` in `{other}`'s mapping",
                            key.name()
                        ),
                    );
                }
            }
        }
        if !included || map.key(TensorKey::Name).is_none() {
            self.err(
                map.span,
                "a mapping of a zip of another format's files includes the member's mapping and sets its name",
                format!(
                    "`include {}.tensor(m.content); name = m.name;`",
                    ir.format(other).name
                ),
            );
        }
    }

    /// The rules of formats over protobuf messages (the `protobuf` and `kv` engines): a
    /// mapping iterates messages; the values of a repeated field of fixed-width or zigzag
    /// numbers are read as tensor elements alone; a write rule, and the value of a message
    /// field in it, builds a message; a document writes its tensors as the items of a
    /// repeated field; a record's `data` is in no item of a list of messages; no mapping
    /// (tensor or value) reads a layout.
    fn messages(&mut self) {
        let ir = self.ir;
        let f = ir.format(self.fid);
        let document = matches!(f.engine, Engine::Protobuf { .. });
        for &m in &f.mappings {
            let map = ir.mapping(m);
            // A kv mapping's source has its own rule (`kv`).
            if document && !matches!(map.binding_ty, Type::Message(_)) {
                self.err(
                    map.source.span,
                    "a mapping over protobuf messages iterates messages",
                    "a repeated message field, or one message: `tensor from root.tensors as t`",
                );
            }
            self.layouts_in_messages(map);
            self.number_lists(&map.source);
            if let Some(w) = &map.filter {
                self.number_lists(w);
            }
            for st in &map.stmts {
                match st {
                    MappingStmt::Include { arg, .. } => self.number_lists(arg),
                    MappingStmt::Set { value, .. } => self.number_lists(value),
                }
            }
            let Some(w) = &map.write else {
                continue;
            };
            self.builds_message(w, false);
            let repeated = match &map.source.kind {
                ExprKind::Member {
                    member: Member::MessageField(mm, i),
                    ..
                } => ir.message(*mm).fields[*i].label == Label::Repeated,
                _ => false,
            };
            if document && !repeated {
                self.err(
                    map.source.span,
                    "a written document holds its tensors as the items of a repeated field",
                    "iterate a repeated message field (`tensor from root.tensors as t`), or remove `write`",
                );
            }
        }
        for &m in &f.values {
            self.layouts_in_messages(ir.mapping(m));
        }
        for &mid in &f.messages {
            for field in &ir.message(mid).fields {
                if let Some(w) = &field.write {
                    self.field_value(field, w, false);
                }
            }
        }
    }

    /// A layout read in a mapping over messages (its source, filter, statements or write
    /// rule): such a mapping reads its binding, the document's `root` or a kv entry's value.
    fn layouts_in_messages(&mut self, map: &Mapping) {
        let stmts = map.stmts.iter().map(|s| match s {
            MappingStmt::Include { arg, .. } => arg,
            MappingStmt::Set { value, .. } => value,
        });
        let mut spans = Vec::new();
        for e in std::iter::once(&map.source)
            .chain(&map.filter)
            .chain(stmts)
            .chain(&map.write)
        {
            e.walk(&mut |x| {
                if let ExprKind::Layout(l) = x.kind {
                    spans.push((x.span, l));
                }
            });
        }
        for (span, l) in spans {
            self.err(
                span,
                format!(
                    "layout '{}' is read in a mapping over protobuf messages",
                    self.ir.layout(l).name
                ),
                "a mapping over messages reads its binding, the fields of the document's `root` or a kv entry's value; layouts are read by the `file` and `zip` engines",
            );
        }
    }

    /// A repeated field of fixed-width or zigzag numbers read other than by `elements(..)`.
    fn number_lists(&mut self, e: &Expr) {
        let ir = self.ir;
        let mut elements: Vec<*const Expr> = Vec::new();
        e.walk(&mut |x| {
            if let ExprKind::Call {
                func: Builtin::Elements,
                args,
            } = &x.kind
            {
                elements.extend(args.iter().map(|a| &a.value as *const Expr));
            }
        });
        let mut bad = Vec::new();
        e.walk(&mut |x| {
            let ExprKind::Member {
                member: Member::MessageField(m, i),
                ..
            } = &x.kind
            else {
                return;
            };
            let field = &ir.message(*m).fields[*i];
            let listed = matches!(
                field.proto,
                ProtoType::Scalar(
                    ProtoScalar::Float
                        | ProtoScalar::Double
                        | ProtoScalar::Sint32
                        | ProtoScalar::Sint64
                        | ProtoScalar::Fixed32
                        | ProtoScalar::Sfixed32
                        | ProtoScalar::Fixed64
                        | ProtoScalar::Sfixed64
                )
            );
            if field.label == Label::Repeated && listed && !elements.contains(&(x as *const Expr)) {
                bad.push((x.span, field.name.clone()));
            }
        });
        for (span, name) in bad {
            self.err(
                span,
                format!("the values of repeated field '{name}' are read as tensor elements"),
                format!(
                    "`data = elements(t.{name});`; lists of numbers in expressions are of `int32`, `int64`, `uint32`, `uint64`, `bool` or enum fields"
                ),
            );
        }
    }

    /// The value `v` a write rule gives `field`: messages built for a message field, a
    /// list of them for a repeated one, no `data` in a list of messages.
    fn field_value(&mut self, field: &crate::ir::MessageField, v: &Expr, in_list: bool) {
        match (&field.proto, field.label, &v.kind) {
            (ProtoType::Message(_), Label::Repeated, ExprKind::List(items)) => {
                for x in items {
                    self.builds_message(x, true);
                }
            }
            (ProtoType::Message(_), Label::Repeated, _) => self.err(
                v.span,
                "a repeated message field of a write rule is given a list of messages",
                format!("`{} = [M(..), M(..)]`", field.name),
            ),
            (ProtoType::Message(_), _, _) => self.builds_message(v, in_list),
            _ if in_list
                && reads(v, &|x| matches!(x.kind, ExprKind::WriteVar(WriteVar::Data))) =>
            {
                self.err(
                    v.span,
                    "`data` in an item of a list of messages",
                    "the tensor's elements go in the message the rule builds, or in a message of one of its singular fields",
                )
            }
            _ => {}
        }
    }

    /// A write rule's value: a message built as `M(..)` (or an `if` choosing one), whose
    /// message fields are built alike; `in_list` when it is an item of a repeated field,
    /// where a record's `data` cannot go.
    fn builds_message(&mut self, e: &Expr, in_list: bool) {
        let ir = self.ir;
        match &e.kind {
            ExprKind::If {
                then, otherwise, ..
            } => {
                self.builds_message(then, in_list);
                self.builds_message(otherwise, in_list);
            }
            ExprKind::NewMessage { message, fields } => {
                for (i, v) in fields {
                    self.field_value(&ir.message(*message).fields[*i], v, in_list);
                }
            }
            _ => self.err(
                e.span,
                "a protobuf write rule builds a message",
                "`M(field = value, ..)` with M a message of this format, or an `if` choosing one",
            ),
        }
    }

    /// A `file` format over a layout: one tensor mapping at most, which gives no `strides`
    /// (its tensors are the payload's contiguous bytes).
    fn file_layout(&mut self) {
        let f = self.ir.format(self.fid);
        match f.mappings.as_slice() {
            [m] => {
                if let Some(s) = self.ir.mapping(*m).key(TensorKey::Strides) {
                    self.err(
                        s.span,
                        "a `file` format's tensors are contiguous bytes of its payload: `strides` \
                         means nothing here",
                        "give the element order instead: `order = fortran` (or a flag of the \
                         record: `order = if f.fortran { fortran } else { c }`)",
                    );
                }
            }
            [] => {}
            [_, second, ..] => self.err(
                self.ir.mapping(*second).span,
                "a `file` format has one tensor mapping",
                "map every tensor in one mapping: over the layout (`tensor from File as f`, one \
                 tensor per file) or over a list or map in it (`tensor from File.items as t`, \
                 one per item)",
            ),
        }
    }

    /// A `file` format's `value` mappings (its record's values that are not tensors, the
    /// format's structure): each iterates a list or map of the record, names its value
    /// with text, and its `data` is a value a structure holds — numbers, `bool`, text,
    /// lists, maps, options, records and tagged unions of them.
    fn file_values(&mut self) {
        let ir = self.ir;
        for &m in &ir.format(self.fid).values {
            let map = ir.mapping(m);
            let over_item = !matches!(map.source.kind, ExprKind::Layout(_))
                && crate::ir::plan::root_layout(&map.source).is_some()
                && matches!(
                    map.source.ty,
                    Type::List(_) | Type::Tuple(_) | Type::Map(..)
                );
            if !over_item {
                self.err(
                    map.source.span,
                    "a `file` format's `value` mapping iterates a list or map of its record",
                    "`value from File.kv as k` (a repeated field), `value from File.header.meta as m` (a map)",
                );
                continue;
            }
            if let Some(n) = map.key(TensorKey::Name).filter(|n| n.ty != Type::Str) {
                self.err(n.span, "a value's `name` is text", "`name = k.key;`");
            }
            if let Some(d) = map.key(TensorKey::Data) {
                if let Some(bad) = node_less(ir, &d.ty, &mut Vec::new()) {
                    self.err(
                        d.span,
                        format!("a value's `data` holds {bad}, which a structure cannot show"),
                        "give numbers, `bool`, text, lists, maps, records or tagged unions of them",
                    );
                }
            }
            if !ir.format(self.fid).read_only {
                self.file_value_places(map);
            }
        }
    }

    /// A written `file` format's `value` mapping runs backwards (the writer's
    /// `set_structure`): its `name` and `data` are places of the item — a map item's key
    /// and value, or fields of a record whose other fields are computed when written.
    fn file_value_places(&mut self, map: &crate::ir::Mapping) {
        let ir = self.ir;
        let mut fields = Vec::new();
        for k in [TensorKey::Name, TensorKey::Data] {
            let Some(e) = map.key(k) else { continue };
            let ok = match (&e.kind, &map.binding_ty) {
                (ExprKind::Member { base, member }, Type::MapItem(..))
                    if base.kind == ExprKind::Binding =>
                {
                    *member
                        == if k == TensorKey::Name {
                            Member::MapKey
                        } else {
                            Member::MapValue
                        }
                }
                (
                    ExprKind::Member {
                        base,
                        member: Member::Field(l, f),
                    },
                    Type::Layout(item),
                ) if base.kind == ExprKind::Binding && l == item => {
                    fields.push(*f);
                    true
                }
                _ => false,
            };
            if !ok {
                self.err(
                    e.span,
                    "a written `file` format's value is a place of the item: the writer sets it back",
                    "`name = k.key; data = k.value;` (fields of a record, or a map item's key and \
                     value), or declare the format `read_only;`",
                );
                return;
            }
        }
        if let (Type::Layout(l), [_, _]) = (&map.binding_ty, fields.as_slice()) {
            let layout = ir.layout(*l);
            let other = layout.fields.iter().enumerate().find(|(i, f)| {
                !fields.contains(&crate::ir::FieldId(*i as u32))
                    && !crate::ir::plan::is_computed(f)
                    && !matches!(f.kind, crate::ir::FieldKind::Magic(_))
            });
            if let Some((_, f)) = other {
                self.err(
                    map.span,
                    format!(
                        "the writer makes a `{}` of each value, but cannot give its field `{}`",
                        layout.name, f.name
                    ),
                    "compute the field when written (`write = ...`), or declare the format `read_only;`",
                );
            }
        }
    }

    fn file_pickle(&mut self) {
        let ir = self.ir;
        let f = ir.format(self.fid);
        let pickled: Vec<LayoutId> = f
            .layouts
            .iter()
            .copied()
            .filter(|&l| {
                ir.layout(l)
                    .fields
                    .iter()
                    .any(|x| matches!(x.codec, Some(Codec::Pickle(_))))
            })
            .collect();
        let Some(&lid) = pickled.first() else {
            self.file_layout();
            self.file_values();
            return;
        };
        for &m in &f.values {
            self.err(
                ir.mapping(m).span,
                "a file of pickles exposes its stored object, not `value` mappings",
                "remove the `value` mapping: the pickled object's values are shown as they are",
            );
        }
        let source = |m: &Mapping| match &m.source.kind {
            ExprKind::Member {
                base,
                member: Member::PickleObjects(p, _),
            } => base.field_of().filter(|(l, _)| *l == lid).map(|_| *p),
            _ => None,
        };
        if let [x] = ir.layout(lid).fields.as_slice() {
            if x.repeat.is_none() && pickled.len() == 1 {
                self.file_one_pickle(lid, &source);
                return;
            }
        }
        // Mappings whose `data` is a pickled byte string: tensors the object pickle holds
        // itself (NumPy arrays), beside the one mapping over the records.
        let stored: Vec<_> = f
            .mappings
            .iter()
            .filter(|&&m| !ir.mapping(m).data_in_pickle())
            .collect();
        let [m] = stored.as_slice() else {
            self.err(
                f.name_span,
                "a file of pickles has one tensor mapping over its records",
                "`tensor from File.object.tensors as t`; a second mapping reads tensors whose bytes the pickle holds (`data = a.state[4];`)",
            );
            return;
        };
        let map = ir.mapping(**m);
        let mapped = source(map);
        for &pm in f
            .mappings
            .iter()
            .filter(|&&x| ir.mapping(x).data_in_pickle())
        {
            self.file_placed(ir.mapping(pm), &map.source);
        }
        if mapped.is_none() || pickled.len() > 1 {
            self.err(
                map.source.span,
                "a mapping of a file of pickles iterates the objects of one of its layout's pickles",
                "`tensor from File.object.tensors as t`, `object` a field of `codec pickle(P)`",
            );
            return;
        }
        let layout = ir.layout(lid);
        let decl = mapped;
        let mut records = None;
        let n = layout.fields.len();
        for (i, x) in layout.fields.iter().enumerate() {
            if let Some(Codec::Pickle(p)) = x.codec {
                if decl != Some(p) {
                    self.err(
                        x.span,
                        "the pickles of a file are decoded by one declaration",
                        "give every pickle field the same `codec pickle(P)`",
                    );
                }
                self.pickle_checks(lid, FieldId(i as u32));
                continue;
            }
            let counted = match (&x.item_ty, &x.repeat) {
                (Type::Layout(rl), Some(Repeat::Count(c))) if i + 1 == n => match &c.kind {
                    ExprKind::Call {
                        func: Builtin::Len,
                        args,
                    } => args
                        .first()
                        .and_then(|a| a.value.field_of())
                        .filter(|&(l, k)| {
                            l == lid
                                && matches!(layout.fields[k.index()].codec, Some(Codec::Pickle(_)))
                        })
                        .map(|(_, k)| (*rl, FieldId(i as u32), k)),
                    _ => None,
                },
                _ => None,
            };
            match counted {
                Some(r) => records = Some(r),
                None => self.err(
                    x.span,
                    "a file of pickles is its pickles, then records counted by one of them, last",
                    "`storages: Record repeat count(len(keys));` after `keys: bytes codec pickle(P);`",
                ),
            }
        }
        let Some((rl, rfield, keys)) = records else {
            if layout.fields.iter().all(|x| x.codec.is_some()) {
                self.err(
                    layout.span,
                    "a file of pickles ends with records counted by one of them",
                    "`storages: Record repeat count(len(keys));`",
                );
            }
            return;
        };
        let payload = self.record_layout(rl);
        let data_ok = |d: &Expr| {
            let ExprKind::Index { base, index, .. } = &d.kind else {
                return false;
            };
            let base_ok = matches!(&base.kind,
                ExprKind::Member { base: r, member: Member::Field(_, p) }
                    if Some(*p) == payload && r.field_of() == Some((lid, rfield)));
            let index_ok = matches!(&index.kind,
                ExprKind::Call { func: Builtin::IndexOf, args }
                    if args.len() == 2 && args[0].value.field_of() == Some((lid, keys)));
            base_ok && index_ok
        };
        self.pickle_mapping(
            map,
            &data_ok,
            "`data = slice(File.storages.bytes[index_of(File.keys, t.storage.key)], offset, none);`",
        );
    }

    /// A mapping of a file of pickles whose `data` is a pickled byte string (NumPy arrays
    /// in a legacy checkpoint): over the objects of the pickle the mapping over records
    /// iterates (`over`), read in place (`byte_ranges;`), dense (`order`, no `strides`),
    /// and not written.
    fn file_placed(&mut self, map: &Mapping, over: &Expr) {
        let ir = self.ir;
        let field = |e: &Expr| match &e.kind {
            ExprKind::Member {
                base,
                member: Member::PickleObjects(..),
            } => base.field_of(),
            _ => None,
        };
        let (mine, theirs) = (field(&map.source), field(over));
        if mine.is_none() || mine != theirs {
            let kind = match &map.source.kind {
                ExprKind::Member {
                    member: Member::PickleObjects(_, k),
                    ..
                } => k.as_str(),
                _ => "arrays",
            };
            let pickle = theirs.map_or("File.object".to_string(), |(l, f)| {
                format!(
                    "{}.{}",
                    ir.layout(l).name,
                    ir.layout(l).fields[f.index()].name
                )
            });
            self.err(
                map.source.span,
                "a mapping whose `data` is a pickled byte string iterates the objects of the pickle the records' mapping iterates",
                format!(
                    "its tensors lie in `{pickle}`, as those of `tensor from {}` do: `tensor from {pickle}.{kind}s as {}`",
                    ir.text(self.fid, over.span),
                    map.binding
                ),
            );
            return;
        }
        self.in_place(map);
        self.placed_mapping(map, "a file of pickles");
        if let Some(w) = &map.write {
            self.err(
                w.span,
                "a `write` rule on a mapping whose bytes the pickle holds",
                "a file of pickles is read-only: remove `write`",
            );
        }
    }

    /// A `file` that is one pickle holding its arrays' bytes (NumPy's `.pkl`): a layout of
    /// one pickle field, whose declaration keeps byte strings in the file
    /// (`byte_ranges;`), and mappings over the objects of that field whose `data` is a
    /// pickled byte string (`data = a.state[4];`), laid out in `order` (no `strides`).
    fn file_one_pickle(
        &mut self,
        lid: LayoutId,
        source: &dyn Fn(&Mapping) -> Option<crate::ir::PickleId>,
    ) {
        let ir = self.ir;
        let f = ir.format(self.fid);
        let field = &ir.layout(lid).fields[0];
        self.pickle_checks(lid, FieldId(0));
        if let Some(Codec::Pickle(p)) = field.codec {
            if !f.mappings.is_empty() && !ir.pickle(p).byte_ranges {
                self.err(
                    field.span,
                    "a file that is one pickle reads its arrays' bytes in place, but the pickle's declaration copies byte strings",
                    format!("add `byte_ranges;` to `pickle {}`", ir.pickle(p).name),
                );
            }
        }
        for &m in &f.mappings {
            let map = ir.mapping(m);
            if source(map).is_none() {
                self.err(
                    map.source.span,
                    "a mapping of a file that is one pickle iterates the objects of that pickle",
                    "`tensor from File.object.arrays as a`, `object` the field of `codec pickle(P)`",
                );
                continue;
            }
            self.placed_mapping(map, "a file that is one pickle");
            if let Some(d) = map.key(TensorKey::Data) {
                if !matches!(d.ty, Type::Pickled(_)) {
                    self.err(
                        d.span,
                        "the `data` of a tensor of a file that is one pickle is a pickled byte string",
                        "`data = a.state[4];` (the array's bytes, left in the file)",
                    );
                }
            }
        }
        self.one_pickle_writer(lid);
    }

    /// What writing a file that is one pickle needs: one mapping's `write` rule (the object
    /// of each array, its bytes inside it), a declaration without persistent ids (the
    /// bytes are byte strings of the pickle), and no `write` on the pickle field (the root
    /// is a dict of the arrays by name, or the structure the caller gives).
    fn one_pickle_writer(&mut self, lid: LayoutId) {
        let ir = self.ir;
        let f = ir.format(self.fid);
        let field = &ir.layout(lid).fields[0];
        let rules: Vec<&Expr> = f
            .mappings
            .iter()
            .filter_map(|&m| ir.mapping(m).write.as_ref())
            .collect();
        for w in rules.iter().skip(1) {
            self.err(
                w.span,
                "a second `write` rule in a file that is one pickle",
                "the writer builds every array one way: keep one mapping's `write`",
            );
        }
        let Some(first) = rules.first() else {
            return;
        };
        if let Some(Codec::Pickle(p)) = field.codec {
            if !ir.pickle(p).codecs_encode {
                self.err(
                    first.span,
                    format!(
                        "a written file that is one pickle is read back with `_codecs.encode`, but `pickle {}` does not allow it",
                        ir.pickle(p).name
                    ),
                    "protocol 2 (`--pickle-protocol 2`) holds byte strings as `_codecs.encode(text, \"latin1\")`, as CPython writes them: add `codecs_encode;` to the declaration",
                );
            }
            if let Some((kind, _)) = &ir.pickle(p).persistent {
                self.err(
                    first.span,
                    format!(
                        "a file that is one pickle is written without persistent ids, but `pickle {}` declares `persistent {kind}`",
                        ir.pickle(p).name
                    ),
                    "the arrays' bytes are byte strings inside the pickle: remove `persistent` from the declaration",
                );
            }
        }
        if let Some(w) = &field.write {
            self.err(
                w.span,
                "a `write` on the field of a file that is one pickle",
                "the writer pickles a dict of the arrays by name (or the structure given): remove the field's `write`",
            );
        }
    }

    /// A record layout: integers, then a sized `payload`, last. Its payload field.
    fn record_layout(&mut self, rl: LayoutId) -> Option<FieldId> {
        let l = self.ir.layout(rl);
        let payload = l.fields.iter().position(|x| x.ty == Type::Payload);
        let ok = match payload {
            Some(p) => {
                p + 1 == l.fields.len()
                    && l.fields[p].size.is_some()
                    && l.fields[..p]
                        .iter()
                        .all(|x| x.ty.is_int() && x.repeat.is_none() && x.size.is_none())
            }
            None => false,
        };
        if !ok {
            self.err(
                l.span,
                "a record of a file of pickles is integers, then its sized `payload`",
                "`layout StorageRecord little { numel: i64; bytes: payload size numel * itemsize(dtype); }`",
            );
        }
        payload.map(|p| FieldId(p as u32))
    }

    /// A pickle field's checks compare the field with literals (`==`, `!=`, `&&`, `||`).
    fn pickle_checks(&mut self, l: LayoutId, f: FieldId) {
        fn ok(e: &Expr, me: (LayoutId, FieldId)) -> bool {
            use crate::ast::BinaryOp::*;
            match &e.kind {
                ExprKind::Binary {
                    op: And | Or,
                    lhs,
                    rhs,
                } => ok(lhs, me) && ok(rhs, me),
                ExprKind::Binary {
                    op: Eq | Ne,
                    lhs,
                    rhs,
                } => {
                    let lit =
                        |x: &Expr| matches!(x.kind, ExprKind::Const(Const::Int(_) | Const::Str(_)));
                    let is_me = |x: &Expr| x.field_of() == Some(me);
                    is_me(lhs) && lit(rhs) || lit(lhs) && is_me(rhs)
                }
                _ => false,
            }
        }
        let checks = self.ir.field(l, f).checks.clone();
        for c in checks {
            if !ok(&c, (l, f)) {
                self.err(
                    c.span,
                    "a pickle field's check compares the field with literals",
                    "`check magic == 0x1950a86a20f9469cfc6c;` (`==`, `!=`, `&&`, `||`)",
                );
            }
        }
    }

    /// `segment` outside a kv format.
    fn segments(&mut self) {
        let ir = self.ir;
        for &m in &ir.format(self.fid).mappings {
            if let Some(s) = ir.mapping(m).key(TensorKey::Segment) {
                self.err(
                    s.span,
                    "only kv formats join the parts of a tensor by `segment`",
                    "a tensor of this engine is whole where it is: remove `segment`",
                );
            }
        }
    }

    /// A `kv` format: its backend's records, its entries, its mappings and write rule.
    fn kv(&mut self, backend: KvBackend) {
        let ir = self.ir;
        let fmt = ir.format(self.fid);
        if backend == KvBackend::Records {
            let record = ir.layout_named(self.fid, "Record").map(|l| ir.layout(l));
            let field_ty =
                |n: &str| record.and_then(|l| l.fields.iter().find(|f| f.name == n).map(|f| &f.ty));
            if field_ty("key") != Some(&Type::Bytes) || field_ty("value") != Some(&Type::Payload) {
                self.err(
                    fmt.name_span,
                    "the `records` backend reads the format's `layout Record` (with `key` and `value`)",
                    "declare `layout Record { ..; key: bytes size ..; value: payload size ..; }`",
                );
            }
            // A record is written from its key and value alone: every other field is
            // computed (a length, a constant) or a magic.
            let extra = record.into_iter().flat_map(|l| &l.fields).filter(|x| {
                !matches!(x.name.as_str(), "key" | "value")
                    && !matches!(x.kind, crate::ir::FieldKind::Magic(_))
                    && !crate::ir::plan::is_computed(x)
            });
            let extra: Vec<(Span, String)> = extra.map(|x| (x.span, x.name.clone())).collect();
            for (span, name) in extra {
                self.err(
                    span,
                    format!("field '{name}' of the kv `Record` is neither its `key` nor its `value`, and nothing computes it"),
                    format!("a record is written from its key and value alone: give '{name}' a `write` rule (`write = len(key)`, `write = 1`) or an implied constant (`check {name} == 0`), or remove it"),
                );
            }
        }
        if !fmt.detects.is_empty() {
            self.err(
                fmt.name_span,
                format!("kv format '{}' has `detect` rules", fmt.name),
                "a kv format is detected by its backend (a database folder, a file of records): remove the `detect` rules",
            );
        }
        for &e in &fmt.entries {
            let en = ir.entry(e);
            let ok = matches!(&en.content, Content::Value(Type::Message(m)) if ir.message(*m).format == self.fid);
            if !ok {
                self.err(
                    en.span,
                    format!(
                        "the records of kv entry '{}' do not hold a message of this format",
                        en.name
                    ),
                    format!(
                        "give the entry `value M;`, M a message of format '{}'",
                        fmt.name
                    ),
                );
            }
        }
        let mut written = false;
        for &m in &fmt.mappings {
            let map = ir.mapping(m);
            let entry =
                source_entry(&map.source).filter(|_| matches!(map.binding_ty, Type::Message(_)));
            let Some(entry) = entry else {
                self.err(
                    map.source.span,
                    "a kv mapping iterates an entry's value or the messages in it",
                    "`tensor from blob.value.tensor as t`, `tensor from record.value.protos as p`",
                );
                continue;
            };
            self.kv_mapping(map);
            if let Some(rule) = &map.write {
                if written {
                    self.err(
                        rule.span,
                        "a second write rule in a kv format",
                        "a kv format writes every tensor one way: keep one mapping's `write`",
                    );
                }
                written = true;
                self.kv_write(map, entry, rule);
            }
        }
        for &m in &fmt.values {
            let map = ir.mapping(m);
            if source_entry(&map.source).is_none() || !matches!(map.binding_ty, Type::Message(_)) {
                self.err(
                    map.source.span,
                    "a `value` mapping iterates an entry's value or the messages in it",
                    "`value from whole.value as b`, `value from record.value.items as i`",
                );
                continue;
            }
            self.kv_value(map);
        }
    }

    /// What a `value` mapping sets: a string `name`, `bytes` data, integer `part` and
    /// `parts`.
    fn kv_value(&mut self, map: &Mapping) {
        for s in &map.stmts {
            let MappingStmt::Set { key, value } = s else {
                continue;
            };
            let (ok, want) = match key {
                TensorKey::Name => (value.ty == Type::Str, "a string"),
                TensorKey::Data => (value.ty == Type::Bytes, "bytes"),
                _ => (value.ty.is_int(), "an integer"),
            };
            if !ok {
                self.err(
                    value.span,
                    format!("a value's `{}` is {want}", key.name()),
                    "a value mapping gives the value's name (a string), its data (bytes), and the part (an integer) of how many parts (an integer) the record holds",
                );
            }
        }
    }

    /// What a mapping of a kv format sets.
    fn kv_mapping(&mut self, map: &Mapping) {
        for s in &map.stmts {
            let MappingStmt::Set { key, value } = s else {
                continue;
            };
            match key {
                TensorKey::Strides | TensorKey::Order | TensorKey::ByteOrder => self.err(
                    value.span,
                    format!("a kv mapping does not set `{}`", key.name()),
                    "a database record gives a tensor's name, dtype, shape, data and segment; its elements are in C order, little-endian",
                ),
                TensorKey::Segment => {
                    let ok = match &value.ty {
                        Type::Message(m) => {
                            let msg = self.ir.message(*m);
                            ["begin", "end"].iter().all(|n| {
                                msg.fields.iter().any(|f| {
                                    f.name == *n && f.label != Label::Repeated && f.ty.is_int()
                                })
                            })
                        }
                        _ => false,
                    };
                    if !ok {
                        self.err(
                            value.span,
                            "a `segment` is a message with integer fields `begin` and `end`",
                            "the elements [begin, end) of the whole tensor that the record holds",
                        );
                    }
                }
                _ => {}
            }
        }
    }

    /// The write rule of a kv mapping over `entry`.
    fn kv_write(&mut self, map: &Mapping, entry: EntryId, rule: &Expr) {
        let ir = self.ir;
        let en = ir.entry(entry);
        let by_capture = matches!(
            map.key(TensorKey::Name).map(|e| &e.kind),
            Some(ExprKind::Member { member: Member::Capture(e, _), .. }) if *e == entry
        );
        if !by_capture {
            self.err(
                map.span,
                "a written kv mapping names its tensors by a capture of its entry",
                format!(
                    "`name = {}.<capture>;`, a capture of \"{}\" (the other captures get the part's index)",
                    en.name, en.pattern.text
                ),
            );
        }
        let split = matches!(
            en.split.as_ref().map(|e| &e.kind),
            Some(ExprKind::Const(Const::Int(n))) if *n > 0 && u64::try_from(*n).is_ok()
        );
        if !split {
            self.err(
                en.span,
                format!("entry '{}' is written, but has no `split`", en.name),
                "`split = N;`: at most N elements per record (a positive integer)",
            );
        }
        if let Content::Value(want) = &en.content {
            if rule.ty != *want {
                self.err(
                    rule.span,
                    format!(
                        "the write rule does not make the value of entry '{}'",
                        en.name
                    ),
                    "the rule builds the entry's message: `write = M(field = .., ...);`",
                );
            }
        }
    }
}

/// What of `ty` has no node of a structure (a payload, a dtype, a decoded dict), or `None`
/// when all of it has one. `seen` holds the layouts being walked (records of themselves).
fn node_less(ir: &Ir, ty: &Type, seen: &mut Vec<LayoutId>) -> Option<String> {
    match ty {
        Type::Int(_) | Type::Float(_) | Type::Bool | Type::Str | Type::Bytes => None,
        Type::List(t) | Type::Tuple(t) => node_less(ir, t, seen),
        Type::Map(k, v) => node_less(ir, k, seen).or_else(|| node_less(ir, v, seen)),
        Type::Layout(l) => {
            if seen.contains(l) {
                return None;
            }
            seen.push(*l);
            ir.layout(*l)
                .fields
                .iter()
                .filter(|f| crate::ir::plan::is_given(f))
                .find_map(|f| node_less(ir, &f.ty, seen))
        }
        Type::Union(l, f) => match &ir.field(*l, *f).kind {
            crate::ir::FieldKind::Match { cases, .. } => {
                cases.iter().find_map(|c| node_less(ir, &c.ty, seen))
            }
            _ => None,
        },
        Type::Payload => Some("tensor bytes (a payload)".into()),
        Type::Dict(d) => Some(format!("a decoded dict ('{}')", ir.dict(*d).name)),
        other => Some(format!(
            "a value of type {}",
            crate::ir::dump::type_name(ir, other)
        )),
    }
}
