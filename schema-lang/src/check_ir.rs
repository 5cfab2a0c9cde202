//! Checks over the typed IR: the rules that need resolved names and types, for what the
//! code generators read from the IR. They run after lowering, on a schema that passed
//! every other check, so that whatever a checked schema says can be generated.
//!
//! - tables: an integer key fits `i64` (generated lookups take `i64` keys);
//! - the `kv` engine: a `records` backend reads the format's `layout Record` (a `bytes`
//!   `key`, a `payload` `value`); a kv format is detected by its backend, not by
//!   `detect` rules; each entry holds a message of the format (`value M;`); a mapping
//!   iterates an entry's value or messages in it, and sets only what a database record
//!   gives (`name`, `dtype`, `shape`, `data`, `segment`), its data in the record itself
//!   (no `external(..)`); a `segment` is a message with integer `begin` and `end`, and
//!   only kv formats join parts of a tensor by it; a written mapping names its tensors by
//!   a capture of its entry (`name = blob.name`), which has a positive constant `split`,
//!   and its `write` rule makes the entry's message.

use crate::ast::{KeyKind, Label, SchemaFile, Span, TableKey};
use crate::diag::Diagnostic;
use crate::ir::{
    Builtin, Const, Content, Engine, Expr, ExprKind, FormatId, Ir, KvBackend, Mapping, MappingStmt,
    Member, TensorKey, Type,
};

struct Checker<'a> {
    files: &'a [SchemaFile],
    ir: &'a Ir,
    out: Vec<Diagnostic>,
}

/// The diagnostics of the IR rules over `ir`, the IR of `files`.
pub(crate) fn check(files: &[SchemaFile], ir: &Ir) -> Vec<Diagnostic> {
    let mut c = Checker {
        files,
        ir,
        out: Vec::new(),
    };
    for t in &ir.tables {
        for r in &t.rows {
            if let (KeyKind::Int, TableKey::Int(k)) = (t.key, &r.key) {
                if i64::try_from(*k).is_err() {
                    c.err(
                        t.format,
                        t.span,
                        format!(
                            "table '{}' has the key {k}, outside the range of i64",
                            t.name
                        ),
                        "integer table keys are 64-bit signed integers",
                    );
                }
            }
        }
    }
    for i in 0..ir.formats.len() {
        let fid = FormatId(i as u32);
        if let Engine::Kv { backend, .. } = ir.format(fid).engine {
            c.kv(fid, backend);
        } else {
            c.segments(fid);
        }
    }
    c.out
}

impl Checker<'_> {
    fn err(&mut self, fid: FormatId, span: Span, msg: impl Into<String>, help: impl Into<String>) {
        let f = &self.files[self.ir.format(fid).file];
        self.out
            .push(Diagnostic::new(&f.path, &f.source, span, msg).with_help(help));
    }

    /// `segment` outside a kv format.
    fn segments(&mut self, fid: FormatId) {
        for &m in &self.ir.format(fid).mappings {
            if let Some(s) = self.ir.mapping(m).key(TensorKey::Segment) {
                let span = s.span;
                self.err(
                    fid,
                    span,
                    "only kv formats join the parts of a tensor by `segment`",
                    "a tensor of this engine is whole where it is: remove `segment`",
                );
            }
        }
    }

    fn kv(&mut self, fid: FormatId, backend: KvBackend) {
        let ir = self.ir;
        let fmt = ir.format(fid);
        if backend == KvBackend::Records {
            let record = ir.layout_named(fid, "Record").map(|l| ir.layout(l));
            let field_ty =
                |n: &str| record.and_then(|l| l.fields.iter().find(|f| f.name == n).map(|f| &f.ty));
            if field_ty("key") != Some(&Type::Bytes) || field_ty("value") != Some(&Type::Payload) {
                self.err(
                    fid,
                    fmt.name_span,
                    "the `records` backend reads the format's `layout Record` (with `key` and `value`)",
                    "declare `layout Record { ..; key: bytes size ..; value: payload size ..; }`",
                );
            }
        }
        if !fmt.detects.is_empty() {
            self.err(
                fid,
                fmt.name_span,
                format!("kv format '{}' has `detect` rules", fmt.name),
                "a kv format is detected by its backend (a database folder, a file of records): remove the `detect` rules",
            );
        }
        for &e in &fmt.entries {
            let en = ir.entry(e);
            let ok = matches!(&en.content, Content::Value(Type::Message(m)) if ir.message(*m).format == fid);
            if !ok {
                self.err(
                    fid,
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
                    fid,
                    map.source.span,
                    "a kv mapping iterates an entry's value or the messages in it",
                    "`tensor from blob.value.tensor as t`, `tensor from record.value.protos as p`",
                );
                continue;
            };
            self.kv_mapping(fid, map);
            if let Some(rule) = &map.write {
                if written {
                    self.err(
                        fid,
                        rule.span,
                        "a second write rule in a kv format",
                        "a kv format writes every tensor one way: keep one mapping's `write`",
                    );
                }
                written = true;
                self.kv_write(fid, map, entry, rule);
            }
        }
    }

    /// What a mapping of a kv format sets.
    fn kv_mapping(&mut self, fid: FormatId, map: &Mapping) {
        for s in &map.stmts {
            let MappingStmt::Set { key, value } = s else {
                continue;
            };
            match key {
                TensorKey::Strides | TensorKey::Order | TensorKey::ByteOrder => self.err(
                    fid,
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
                            fid,
                            value.span,
                            "a `segment` is a message with integer fields `begin` and `end`",
                            "the elements [begin, end) of the whole tensor that the record holds",
                        );
                    }
                }
                TensorKey::Data => {
                    let mut external = None;
                    value.walk(&mut |x| {
                        if let ExprKind::Call {
                            func: Builtin::External,
                            ..
                        } = x.kind
                        {
                            external = Some(x.span);
                        }
                    });
                    if let Some(span) = external {
                        self.err(
                            fid,
                            span,
                            "a kv record's tensor data is in the record: `external(..)` names a file beside a document",
                            "read the data from the record's fields (`t.raw_data`, `elements(t.float_data)`)",
                        );
                    }
                }
                _ => {}
            }
        }
    }

    /// The write rule of a kv mapping over `entry`.
    fn kv_write(&mut self, fid: FormatId, map: &Mapping, entry: crate::ir::EntryId, rule: &Expr) {
        let ir = self.ir;
        let en = ir.entry(entry);
        let by_capture = matches!(
            map.key(TensorKey::Name).map(|e| &e.kind),
            Some(ExprKind::Member { member: Member::Capture(e, _), .. }) if *e == entry
        );
        if !by_capture {
            self.err(
                fid,
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
            Some(ExprKind::Const(Const::Int(n))) if *n > 0
        );
        if !split {
            self.err(
                fid,
                en.span,
                format!("entry '{}' is written, but has no `split`", en.name),
                "`split = N;`: at most N elements per record (a positive integer)",
            );
        }
        if let Content::Value(want) = &en.content {
            if rule.ty != *want {
                self.err(
                    fid,
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

/// The entry a kv mapping's source starts at: `E.value`, then message fields.
fn source_entry(e: &Expr) -> Option<crate::ir::EntryId> {
    let ExprKind::Member { base, member } = &e.kind else {
        return None;
    };
    match member {
        Member::MessageField(..) => source_entry(base),
        Member::EntryValue(en) if matches!(base.kind, ExprKind::Entry(x) if x == *en) => Some(*en),
        _ => None,
    }
}
