//! Write plans: how the writer of a layout gets each field and when each value is known,
//! and how a `file` format's tensor mapping runs backwards.
//!
//! A layout is written in one pass over its fields. Fields with a `write` rule or an
//! implied constant are *computed*; the others (text, bytes, codec records, nested
//! layouts, the payload) are *given* by the caller. A computed value is known before
//! anything is laid out when its rule uses given values, encoded texts (`len(header)`)
//! and other such values; a rule that uses `size(g)` is known once `g` is laid out, and a
//! field laid out before its value is known gets a reserved slot, patched then. What a
//! field's placement needs (its conditional width, `at`, `align`, codec encoding, `pad`)
//! must be known before it is laid out, and a codec's `spare` only uses given values.
//!
//! The checker runs [`write_plan`] on every layout a writer is generated for and
//! [`inverse`] on every `file` format's mapping (`write_plan_gaps`), and reports what
//! cannot be written as diagnostics; code generators read the plans of checked schemas,
//! which always exist.

use super::{
    Builtin, Codec, Const, Content, DictId, Engine, Expr, ExprKind, FieldId, FieldKind, Format,
    FormatId, Ir, KeyId, LayoutId, Mapping, MappingStmt, Member, TableId, TensorKey, Type,
};
use crate::ast::{SchemaFile, Span};
use crate::diag::Diagnostic;

/// Something a writer cannot do, at its span, with a help line.
#[derive(Debug, Clone, PartialEq)]
pub struct Gap {
    /// Where.
    pub span: Span,
    /// What.
    pub message: String,
    /// How to fix it.
    pub help: String,
}

fn gap(span: Span, message: impl Into<String>, help: impl Into<String>) -> Gap {
    Gap {
        span,
        message: message.into(),
        help: help.into(),
    }
}

/// When a value is known while a layout is written: `None` before anything is laid out,
/// `Some(k)` once field `k` is laid out.
pub type Ready = Option<usize>;

/// How the writer of one layout gets its fields.
#[derive(Debug, Clone, PartialEq)]
pub struct WritePlan {
    /// Per field: true when its `write` rule or implied constant computes it.
    pub computed: Vec<bool>,
    /// Per field: when its value is known (given fields: before anything is laid out).
    pub ready: Vec<Ready>,
    /// The computed fields known before anything is laid out, each after those it uses.
    pub eager: Vec<usize>,
    /// Per field `k`: the computed fields known once `k` is laid out, in the same order.
    pub after: Vec<Vec<usize>>,
    /// Per field: the checks evaluated on write, with when each can run (checks of a
    /// field computed from its implied constant are not evaluated: they hold).
    pub checks: Vec<Vec<(usize, Ready)>>,
}

/// What the writers cannot do, in the formats `clean` accepts (those whose names and types
/// resolved: a plan over an expression that did not would only repeat its error): a
/// written format's uses of `read_only` formats, then, when it has none (the plans would
/// only repeat them), every layout's write plan (but those read around pickles, which are
/// not written) and a `file` format's mapping run backwards.
pub(crate) fn write_plan_gaps(
    files: &[SchemaFile],
    ir: &Ir,
    clean: &dyn Fn(FormatId) -> bool,
) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    for (i, f) in ir.formats.iter().enumerate() {
        if !clean(FormatId(i as u32)) || f.read_only {
            continue;
        }
        let mut gaps = read_only_uses(ir, f);
        if gaps.is_empty() {
            for &l in &f.layouts {
                if !around_pickles(ir, l) {
                    gaps.extend(write_plan(ir, l).err().unwrap_or_default());
                }
            }
            if let ([m], Engine::File) = (f.mappings.as_slice(), &f.engine) {
                let m = ir.mapping(*m);
                if root_layout(&m.source).is_some_and(|l| !around_pickles(ir, l)) {
                    gaps.extend(inverse(ir, m).err().unwrap_or_default());
                }
            }
        }
        let file = &files[f.file];
        out.extend(gaps.into_iter().map(|g| {
            Diagnostic::new(&file.path, &file.source, g.span, g.message).with_help(g.help)
        }));
    }
    out
}

/// Where a format that is written lays out, or includes the mapping of, a format declared
/// `read_only;`: no writer exists for those bytes.
fn read_only_uses(ir: &Ir, f: &Format) -> Vec<Gap> {
    let gap = |span: Span, of: FormatId, what: &str| {
        let name = &ir.format(of).name;
        Gap {
            span,
            message: format!("{what} of format '{name}', which is `read_only`: it has no writer"),
            help: format!(
                "declare this format `read_only;` too, or remove `read_only;` from '{name}'"
            ),
        }
    };
    let ro = |l: LayoutId| {
        let of = ir.layout(l).format;
        ir.format(of).read_only.then_some(of)
    };
    let mut out = Vec::new();
    for &l in &f.layouts {
        for fld in &ir.layout(l).fields {
            if let Some(of) = fld.item_ty.layout().and_then(ro) {
                out.push(gap(fld.span, of, "this field lays out a layout"));
            }
        }
    }
    for &e in &f.entries {
        if let Content::Layout(l) = ir.entry(e).content {
            if let Some(of) = ro(l) {
                out.push(gap(ir.entry(e).span, of, "this entry holds a layout"));
            }
        }
    }
    for &m in f.mappings.iter() {
        for st in &ir.mapping(m).stmts {
            if let MappingStmt::Include { format, arg, .. } = st {
                if ir.format(*format).read_only {
                    out.push(gap(arg.span, *format, "this mapping includes the mapping"));
                }
            }
        }
    }
    out
}

/// True for a field whose writer computes it: a number (every number has a rule or an
/// implied constant, the checker enforces it) or a field with a `write` rule.
pub fn is_computed(f: &super::Field) -> bool {
    f.write.is_some() || (f.implied.is_some() && matches!(f.item_ty, Type::Int(_) | Type::Float(_)))
}

/// True for a field a writer is given (its record's value holds it): neither computed
/// ([`is_computed`]), nor a magic, nor a payload.
pub fn is_given(f: &super::Field) -> bool {
    !is_computed(f) && !matches!(f.kind, FieldKind::Magic(_)) && f.item_ty != Type::Payload
}

enum Dep {
    /// The value of a field.
    Value(usize),
    /// The field laid out (`size(g)`).
    Placed(usize),
}

fn children(e: &Expr) -> Vec<&Expr> {
    match &e.kind {
        ExprKind::Member { base, .. } => vec![base],
        ExprKind::Lookup { key, .. } => vec![key],
        ExprKind::Index { base, index, .. } => vec![base, index],
        ExprKind::Call { args, .. } => args.iter().map(|a| &a.value).collect(),
        ExprKind::Unary { expr, .. } => vec![expr],
        ExprKind::Binary { lhs, rhs, .. } => vec![lhs, rhs],
        ExprKind::In { expr, list } => std::iter::once(&**expr).chain(list).collect(),
        ExprKind::If {
            cond,
            then,
            otherwise,
        } => vec![cond, then, otherwise],
        ExprKind::List(items) => items.iter().collect(),
        _ => Vec::new(),
    }
}

fn deps(e: &Expr, l: LayoutId, out: &mut Vec<Dep>) {
    match &e.kind {
        ExprKind::Call {
            func: Builtin::Size,
            args,
        } => {
            if let Some(ExprKind::Field(fl, g)) = args.first().map(|a| &a.value.kind) {
                if *fl == l {
                    out.push(Dep::Placed(g.index()));
                    return;
                }
            }
        }
        ExprKind::Field(fl, g) if *fl == l => out.push(Dep::Value(g.index())),
        _ => {}
    }
    for c in children(e) {
        deps(c, l, out);
    }
}

/// The later of two readiness points.
fn later(a: Ready, b: Ready) -> Ready {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

/// True when a value `ready` is known before field `i` is laid out.
fn before(ready: Ready, i: usize) -> bool {
    ready.is_none_or(|k| k < i)
}

struct Planner<'a> {
    ir: &'a Ir,
    l: LayoutId,
    computed: Vec<bool>,
    ready: Vec<Option<Ready>>,
    visiting: Vec<bool>,
    order: Vec<usize>,
    gaps: Vec<Gap>,
}

impl Planner<'_> {
    fn name(&self, i: usize) -> &str {
        &self.ir.layout(self.l).fields[i].name
    }

    /// When the value of field `i` is known (rules resolved depth first).
    fn field_ready(&mut self, i: usize) -> Ready {
        if !self.computed[i] {
            return None;
        }
        if let Some(r) = self.ready[i] {
            return r;
        }
        let f = &self.ir.layout(self.l).fields[i];
        if self.visiting[i] {
            let name = f.name.clone();
            self.gaps.push(gap(
                f.write.as_ref().map_or(f.span, |w| w.span),
                format!("the write rule of '{name}' depends on its own value"),
                "compute it from given fields, encoded lengths and sizes of fields laid out",
            ));
            self.ready[i] = Some(None);
            return None;
        }
        self.visiting[i] = true;
        let r = match &f.write {
            Some(w) => self.expr_ready(w),
            None => None,
        };
        self.visiting[i] = false;
        self.ready[i] = Some(r);
        self.order.push(i);
        r
    }

    fn expr_ready(&mut self, e: &Expr) -> Ready {
        let mut ds = Vec::new();
        deps(e, self.l, &mut ds);
        ds.into_iter().fold(None, |acc, d| match d {
            Dep::Value(g) => later(acc, self.field_ready(g)),
            Dep::Placed(g) => later(acc, self.placed(g)),
        })
    }

    /// When the size of field `g` is known: once it is laid out, but for a payload, whose
    /// length is given.
    fn placed(&self, g: usize) -> Ready {
        let f = &self.ir.layout(self.l).fields[g];
        (f.ty != Type::Payload).then_some(g)
    }

    /// `e`, needed to lay out field `i`, must be known before it.
    fn needed_at(&mut self, e: &Expr, i: usize, what: &str) {
        let mut ds = Vec::new();
        deps(e, self.l, &mut ds);
        for d in ds {
            let (ready, name) = match d {
                Dep::Value(g) => (self.field_ready(g), self.name(g).to_string()),
                Dep::Placed(g) => (self.placed(g), format!("size({})", self.name(g))),
            };
            if let Some(k) = ready.filter(|&k| k >= i) {
                let (field, at) = (self.name(i).to_string(), self.name(k).to_string());
                self.gaps.push(gap(
                    e.span,
                    format!(
                        "'{name}' is known only once '{at}' is written, but {what} of '{field}' \
                         needs it before"
                    ),
                    format!("compute it from given fields and sizes of fields before '{field}'"),
                ));
            }
        }
    }
}

/// The write plan of layout `l`, or what makes it impossible.
pub fn write_plan(ir: &Ir, l: LayoutId) -> Result<WritePlan, Vec<Gap>> {
    let layout = ir.layout(l);
    let n = layout.fields.len();
    let mut p = Planner {
        ir,
        l,
        computed: layout.fields.iter().map(is_computed).collect(),
        ready: vec![None; n],
        visiting: vec![false; n],
        order: Vec::new(),
        gaps: Vec::new(),
    };
    for (i, f) in layout.fields.iter().enumerate() {
        if f.item_ty == Type::Payload && i + 1 != n {
            p.gaps.push(gap(
                f.span,
                format!(
                    "the payload '{}' is streamed after the fields before it, so it must be \
                     the last field of '{}'",
                    f.name, layout.name
                ),
                "move it last, or give its bytes a `bytes` field",
            ));
        }
        if let Type::Layout(inner) = &f.item_ty {
            if let Some(g) = ir
                .layout(*inner)
                .fields
                .iter()
                .find(|g| g.item_ty == Type::Payload)
            {
                p.gaps.push(gap(
                    f.span,
                    format!(
                        "'{}' holds the payload '{}', which is streamed after its layout: it \
                         cannot be written inside '{}'",
                        ir.layout(*inner).name,
                        g.name,
                        layout.name
                    ),
                    "keep one payload, in the outer layout, and give each record the bounds of its \
                     bytes in it (`begin: u64; end: u64;`, `data = slice(File.data, r.begin, r.end)`); \
                     records until the end go in a sized index before it \
                     (`index: Index size index_len;`, `Index` holding `records: Record repeat until_eof;`)",
                ));
            }
        }
        let r = p.field_ready(i);
        if let FieldKind::Cond { cond, .. } = &f.kind {
            p.needed_at(cond, i, "the width");
        }
        if let FieldKind::Match { tag, .. } = &f.kind {
            p.needed_at(tag, i, "the tag");
        }
        if let Some(e) = &f.at {
            p.needed_at(e, i, "the offset");
        }
        if let Some(e) = &f.align {
            p.needed_at(e, i, "the alignment");
        }
        if let Some(pad) = &f.pad {
            p.needed_at(&pad.align, i, "the padding");
            if let Some(m) = &pad.min {
                p.needed_at(m, i, "the padding");
            }
        }
        if let Some(Codec::PyDict {
            encoding, spare, ..
        }) = &f.codec
        {
            if let Some(e) = encoding {
                p.needed_at(e, i, "the encoding");
            }
            if let Some(s) = spare {
                if f.repeat.is_some() {
                    p.gaps.push(gap(
                        s.span,
                        format!("`spare` on the repeated field '{}'", f.name),
                        "`spare` lengthens one text; give it to a field that is not repeated",
                    ));
                }
                let mut ds = Vec::new();
                deps(s, l, &mut ds);
                for d in ds {
                    let g = match d {
                        Dep::Value(g) | Dep::Placed(g) => g,
                    };
                    if p.computed[g] || matches!(d, Dep::Placed(_)) {
                        let used = p.name(g).to_string();
                        p.gaps.push(gap(
                            s.span,
                            format!(
                                "using `{used}`, computed once the codec texts are encoded, in \
                                 `spare` is not possible: `spare` lengthens the text it is \
                                 computed from"
                            ),
                            "compute `spare` from the field's own value and other given fields",
                        ));
                    }
                }
            }
        }
        let variable = !matches!(f.item_ty, Type::Int(_) | Type::Float(_)) || f.repeat.is_some();
        if p.computed[i] && variable && !before(r, i) {
            p.gaps.push(gap(
                f.write.as_ref().map_or(f.span, |w| w.span),
                format!(
                    "'{}' is known only once '{}' is written, after it: only a number of fixed \
                     width can be written first and filled in later",
                    f.name,
                    p.name(r.unwrap_or(0))
                ),
                "compute it from given fields and sizes of fields before it",
            ));
        }
        let one_value = f
            .write
            .as_ref()
            .filter(|w| f.repeat.is_some() && !matches!(w.ty, Type::List(_) | Type::Tuple(_)));
        if let Some(w) = one_value {
            p.gaps.push(gap(
                w.span,
                format!(
                    "the write rule of the repeated field '{}' gives one value",
                    f.name
                ),
                "give the list of its values (a list key of a dict field, or `[a, b]`), or remove \
                 the rule if the tensor mapping gives the values (`shape = r.dims`)",
            ));
        }
    }
    let mut checks = vec![Vec::new(); n];
    for (i, f) in layout.fields.iter().enumerate() {
        if p.computed[i] && f.write.is_none() {
            continue;
        }
        for (c, e) in f.checks.iter().enumerate() {
            let r = later(p.field_ready(i), p.expr_ready(e));
            checks[i].push((c, r));
        }
    }
    if !p.gaps.is_empty() {
        return Err(p.gaps);
    }
    let ready: Vec<Ready> = p.ready.iter().map(|r| r.flatten()).collect();
    let mut after = vec![Vec::new(); n];
    let mut eager = Vec::new();
    for &i in &p.order {
        match ready[i] {
            None => eager.push(i),
            Some(k) => after[k].push(i),
        }
    }
    Ok(WritePlan {
        computed: p.computed,
        ready,
        eager,
        after,
        checks,
    })
}

/// A step of a place the writer fills in from a tensor.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// A field of the record.
    Field(FieldId),
    /// A key of a dict.
    Key(DictId, KeyId),
    /// The key of a map item.
    MapKey,
    /// The value of a map item.
    MapValue,
    /// An item of a list, by position.
    Item(usize),
}

/// What a place receives from the tensor being written.
#[derive(Debug, Clone, PartialEq)]
pub enum Inv {
    /// Its name.
    Name,
    /// The first key of the table with its dtype and byte order.
    Dtype(TableId),
    /// Its shape.
    Shape,
    /// Its shape, last dimension first (`shape = reverse(t.dims)`).
    ReversedShape,
    /// One dimension of its shape (the mapping lists them: `shape = [f.rows, f.cols]`).
    Dim(usize),
    /// A flag: true when the tensor's property (`order`, `byte_order`) is the constant.
    Is(TensorKey, Const),
    /// Where its bytes start in the payload.
    Begin,
    /// Where its bytes end in the payload.
    End,
}

/// A `file` format's mapping run backwards.
#[derive(Debug, Clone, PartialEq)]
pub struct Inverse {
    /// The layout written.
    pub layout: LayoutId,
    /// For a mapping over the items of a list or map in the record: the place of that
    /// list or map. `None`: one tensor per file.
    pub items: Option<Vec<Step>>,
    /// Places of the record (one tensor per file) or of an item, and what each receives.
    pub sets: Vec<(Vec<Step>, Inv)>,
    /// Properties the mapping gives as constants (expressions of no place of the record):
    /// the tensors written must have them. A constant name is not stored.
    pub requires: Vec<(TensorKey, Expr)>,
    /// A shape listed dimension by dimension (`shape = [f.n, 3]`): the rank the tensors
    /// written must have, and the dimensions given as constants.
    pub rank: Option<(usize, Vec<(usize, i128)>)>,
    /// The payload field holding the tensors' bytes.
    pub payload: FieldId,
    /// A multiple each tensor's bytes start at in the payload (`slice(.., align = A)`),
    /// an expression over constants and the record's given fields; the writer pads the
    /// bytes before and after each tensor to it.
    pub align: Option<Expr>,
}

enum Root {
    Binding,
    Layout,
}

/// The place an expression names: its root and steps.
fn place(e: &Expr) -> Option<(Root, Vec<Step>)> {
    match &e.kind {
        ExprKind::Binding => Some((Root::Binding, Vec::new())),
        ExprKind::Layout(_) => Some((Root::Layout, Vec::new())),
        ExprKind::Member { base, member } => {
            let (r, mut steps) = place(base)?;
            steps.push(match member {
                Member::Field(_, f) => Step::Field(*f),
                Member::DictKey(d, k) => Step::Key(*d, *k),
                Member::MapKey => Step::MapKey,
                Member::MapValue => Step::MapValue,
                _ => return None,
            });
            Some((r, steps))
        }
        ExprKind::Index { base, index, .. } => {
            let ExprKind::Const(Const::Int(i)) = index.kind else {
                return None;
            };
            let (r, mut steps) = place(base)?;
            steps.push(Step::Item(usize::try_from(i).ok()?));
            Some((r, steps))
        }
        _ => None,
    }
}

const INVERTIBLE: &str = "the writer runs `name = t.key` (or a field), `dtype = T[place]`, \
    `shape = place` or `[place, ...]`, `order`/`byte_order = if place { a } else { b }` \
    or a constant, and `data = f.payload` or `data = slice(File.payload, place, place)` \
    backwards";

/// The inverse of `m`, a `file` format's mapping over its layout, or what makes it
/// impossible to write.
pub fn inverse(ir: &Ir, m: &Mapping) -> Result<Inverse, Vec<Gap>> {
    let mut gaps = Vec::new();
    let layout = root_layout(&m.source).expect("a file mapping starts at a layout");
    let one = matches!(m.source.kind, ExprKind::Layout(_));
    let items = if one {
        None
    } else {
        match place(&m.source) {
            Some((Root::Layout, steps)) => Some(steps),
            _ => {
                gaps.push(gap(
                    m.source.span,
                    "the writer cannot fill in this source",
                    INVERTIBLE,
                ));
                None
            }
        }
    };
    if let Some(w) = &m.filter {
        gaps.push(gap(
            w.span,
            "a `where` filter cannot be run backwards: every tensor written would have to pass it",
            "map every item, or write another format",
        ));
    }
    let mut inv = Inverse {
        layout,
        items,
        sets: Vec::new(),
        requires: Vec::new(),
        rank: None,
        payload: FieldId(0),
        align: None,
    };
    let mut payload = None;
    // Properties set by the mapping (last assignment wins, as on read).
    let mut keys: Vec<(TensorKey, &Expr)> = Vec::new();
    for s in &m.stmts {
        match s {
            MappingStmt::Set { key, value } => {
                keys.retain(|(k, _)| k != key);
                keys.push((*key, value));
            }
            MappingStmt::Include { arg, .. } => gaps.push(gap(
                arg.span,
                "an `include` in a `file` format's mapping cannot be run backwards",
                INVERTIBLE,
            )),
        }
    }
    // A place the tensor may fill in: the binding's (an item's or the record's).
    let target = |e: &Expr| -> Option<Vec<Step>> {
        match place(e)? {
            (Root::Binding, s) if !s.is_empty() => Some(s),
            (Root::Layout, s) if one && !s.is_empty() => Some(s),
            _ => None,
        }
    };
    // The places each property fills in, with the property's span.
    let mut filled: Vec<(usize, Span, TensorKey)> = Vec::new();
    for (key, e) in keys {
        filled.push((inv.sets.len(), e.span, key));
        let bad = |what: &str| {
            gap(
                e.span,
                format!(
                    "the writer cannot run `{} = ...` backwards: {what}",
                    key.name()
                ),
                INVERTIBLE,
            )
        };
        if constant(e) {
            if key != TensorKey::Name {
                inv.requires.push((key, e.clone()));
            }
            continue;
        }
        match (key, &e.kind) {
            (
                TensorKey::Name,
                ExprKind::Member {
                    member: Member::SourceStem | Member::SourceName | Member::SourcePath,
                    ..
                },
            ) => {}
            (TensorKey::Name, _) => match target(e) {
                Some(p) => inv.sets.push((p, Inv::Name)),
                None => gaps.push(bad("the name is not a place of the record")),
            },
            (TensorKey::Dtype, ExprKind::Lookup { table, key: k }) => match target(k) {
                Some(p) => inv.sets.push((p, Inv::Dtype(*table))),
                None => gaps.push(bad("the table key is not a place of the record")),
            },
            (TensorKey::Shape, ExprKind::List(dims)) => {
                let mut fixed = Vec::new();
                for (i, d) in dims.iter().enumerate() {
                    match (target(d), &d.kind) {
                        (Some(p), _) => inv.sets.push((p, Inv::Dim(i))),
                        (None, ExprKind::Const(Const::Int(v))) => fixed.push((i, *v)),
                        _ => gaps.push(gap(
                            d.span,
                            format!(
                                "the writer cannot run `{} = ...` backwards: a dimension is \
                                 neither a place of the record nor a constant",
                                key.name()
                            ),
                            "store the dimension in a field and map it (`n: u64;`, \
                             `shape = [f.n]`): a dimension computed from other values \
                             cannot be written back",
                        )),
                    }
                }
                inv.rank = Some((dims.len(), fixed));
            }
            (
                TensorKey::Shape,
                ExprKind::Call {
                    func: Builtin::Reverse,
                    args,
                },
            ) => match args.first().and_then(|a| target(&a.value)) {
                Some(p) => inv.sets.push((p, Inv::ReversedShape)),
                None => gaps.push(bad("the reversed shape is not a place of the record")),
            },
            (TensorKey::Shape, _) => match target(e) {
                Some(p) => inv.sets.push((p, Inv::Shape)),
                None => gaps.push(bad("the shape is not a place of the record")),
            },
            (
                TensorKey::Order | TensorKey::ByteOrder,
                ExprKind::If {
                    cond,
                    then,
                    otherwise,
                },
            ) => {
                let (cond, when) = match &cond.kind {
                    ExprKind::Unary {
                        op: crate::ast::UnaryOp::Not,
                        expr,
                    } => (&**expr, otherwise),
                    _ => (&**cond, then),
                };
                match (target(cond), &when.kind) {
                    (Some(p), ExprKind::Const(c)) => inv.sets.push((p, Inv::Is(key, c.clone()))),
                    _ => gaps.push(bad("the condition is not a flag of the record")),
                }
            }
            (TensorKey::Data, _) if one => match place(e) {
                Some((_, s)) if matches!(s.as_slice(), [Step::Field(f)] if ir.field(layout, *f).item_ty == Type::Payload) => {
                    if let [Step::Field(f)] = s.as_slice() {
                        payload = Some(*f);
                    }
                }
                _ => gaps.push(bad("the data is not the layout's payload")),
            },
            (
                TensorKey::Data,
                ExprKind::Call {
                    func: Builtin::Slice,
                    args,
                },
            ) => {
                let whole = args.first().and_then(|a| place(&a.value));
                // An end that is not a place is computed from the item (`t.offset +
                // product(t.dims) * itemsize(dtype)`): nothing to store.
                let end = args.get(2).map(|a| target(&a.value));
                match (whole, args.get(1).and_then(|a| target(&a.value)), end) {
                    (Some((Root::Layout, s)), Some(b), Some(end)) if matches!(s.as_slice(), [Step::Field(f)] if ir.field(layout, *f).item_ty == Type::Payload) =>
                    {
                        if let [Step::Field(f)] = s.as_slice() {
                            payload = Some(*f);
                        }
                        inv.sets.push((b, Inv::Begin));
                        if let Some(end) = end {
                            inv.sets.push((end, Inv::End));
                        }
                        if let Some(a) = super::expr::named_arg(args, "align") {
                            match held_only(ir, layout, &a.value) {
                                Ok(()) => inv.align = Some(a.value.clone()),
                                Err(span) => gaps.push(gap(
                                    span,
                                    "the writer pads each tensor's bytes to this `align` before it knows the item or the computed fields",
                                    "compute the alignment from constants and the record's given fields \
                                     (`align = lookup(File.kv, \"general.alignment\", 32)`)",
                                )),
                            }
                        }
                    }
                    _ => gaps.push(gap(
                        e.span,
                        "the writer cannot run `data = ...` backwards: the data is not a slice of \
                         the layout's payload between two places of the item",
                        "store both bounds in fields of the item and slice between them \
                         (`begin: u64; end: u64;`, `data = slice(File.data, r.begin, r.end)`)",
                    )),
                }
            }
            (TensorKey::Data, _) => gaps.push(gap(
                e.span,
                "the writer cannot run `data = ...` backwards: each item's data is not a slice \
                 of the payload",
                "keep one payload, in the outer layout, give each item the bounds of its bytes \
                 in it and slice between them (`data = slice(File.data, r.begin, r.end)`)",
            )),
            _ => gaps.push(bad("this form")),
        }
    }
    match payload {
        Some(p) => inv.payload = p,
        None if gaps.is_empty() => gaps.push(gap(
            m.span,
            "the writer cannot place the tensor's data: the mapping gives no `data`",
            INVERTIBLE,
        )),
        None => {}
    }
    if let Some(items) = &inv.items {
        let repeated_record = repeated_record(ir, layout, items);
        if !repeated_record && (!matches!(items.last(), Some(Step::Key(..))) || items.len() < 2) {
            gaps.push(gap(
                m.source.span,
                "the writer fills in the items of a list or map key of a dict field, or of a repeated layout field, not this source",
                "map the items of a `list<..>` or `map<str, ..>` key of a codec field, or of a repeated record (directly or inside records that do not repeat)",
            ));
        }
    }
    for (i, (p, _)) in inv.sets.iter().enumerate() {
        let Some(Step::Field(f)) = p.first() else {
            continue;
        };
        if inv.items.is_some() || !is_computed(ir.field(layout, *f)) {
            continue;
        }
        let (span, key) = filled
            .iter()
            .rev()
            .find(|(start, ..)| *start <= i)
            .map_or((m.span, TensorKey::Data), |&(_, s, k)| (s, k));
        let name = &ir.field(layout, *f).name;
        gaps.push(gap(
            span,
            format!(
                "'{name}' is computed by its write rule: the tensor mapping cannot give it \
                 (`{} = ...` does on write)",
                key.name()
            ),
            format!(
                "remove the `write` rule (or the implied constant) of '{name}': the tensor \
                 mapping gives its value"
            ),
        ));
    }
    if gaps.is_empty() {
        unset(ir, &inv, m, &mut gaps);
    }
    if gaps.is_empty() {
        Ok(inv)
    } else {
        Err(gaps)
    }
}

/// True when `items` names a repeated record field of `layout`, directly or through
/// nested records that do not repeat (`File.index.records`).
fn repeated_record(ir: &Ir, layout: LayoutId, items: &[Step]) -> bool {
    let mut l = layout;
    for (i, s) in items.iter().enumerate() {
        let Step::Field(f) = s else { return false };
        let f = ir.field(l, *f);
        let Type::Layout(inner) = f.item_ty else {
            return false;
        };
        if i + 1 == items.len() {
            return f.repeat.is_some();
        }
        if f.repeat.is_some() {
            return false;
        }
        l = inner;
    }
    false
}

/// Reports what the writer needs that neither a rule nor the mapping gives.
fn unset(ir: &Ir, inv: &Inverse, m: &Mapping, gaps: &mut Vec<Gap>) {
    let mut missing = Vec::new();
    // The record: in a mapping over items, only the list or map of the items is filled.
    let record_set = |p: &[Step]| match &inv.items {
        None => inv.sets.iter().any(|(s, _)| s.starts_with(p)),
        Some(items) => items.starts_with(p) || p.starts_with(items),
    };
    let whole = |p: &[Step]| match &inv.items {
        None => inv.sets.iter().any(|(s, _)| s == p),
        Some(items) => items == p,
    };
    uncovered(
        ir,
        &Type::Layout(inv.layout),
        &[],
        &record_set,
        &whole,
        Some(inv.payload),
        "",
        &mut missing,
    );
    if inv.items.is_some() {
        let item_set = |p: &[Step]| inv.sets.iter().any(|(s, _)| s.starts_with(p));
        let item_whole = |p: &[Step]| inv.sets.iter().any(|(s, _)| s == p);
        uncovered(
            ir,
            &m.binding_ty,
            &[],
            &item_set,
            &item_whole,
            None,
            "<item>.",
            &mut missing,
        );
    }
    if inv.items.is_some() {
        // The several-tensor writer holds the record's lists, empty until its caller fills
        // them in through its accessors (GGUF's key/values).
        let fields = &ir.layout(inv.layout).fields;
        missing.retain(|w| !fields.iter().any(|f| f.repeat.is_some() && f.name == *w));
    }
    for what in missing {
        gaps.push(gap(
            m.span,
            format!(
                "writing needs '{what}', which neither a `write` rule nor the tensor mapping gives"
            ),
            "map a tensor property to it (`shape = [f.count]`), give the field a `write` rule or \
             an implied constant (`check version == 1`), or, for a dict key, make it `optional`",
        ));
    }
}

/// The parts of a value of type `ty` at `place` that the writer needs and nothing sets
/// (`set`: something is set at or under a place; `whole`: the place itself is set).
#[allow(clippy::too_many_arguments)]
fn uncovered(
    ir: &Ir,
    ty: &Type,
    place: &[Step],
    set: &dyn Fn(&[Step]) -> bool,
    whole: &dyn Fn(&[Step]) -> bool,
    payload: Option<FieldId>,
    what: &str,
    out: &mut Vec<String>,
) {
    if whole(place) {
        return;
    }
    let at = |s: Step| {
        let mut p = place.to_vec();
        p.push(s);
        p
    };
    match ty {
        Type::Layout(l) => {
            for (i, f) in ir.layout(*l).fields.iter().enumerate() {
                let fid = FieldId(i as u32);
                if is_computed(f) || matches!(f.kind, FieldKind::Magic(_)) || Some(fid) == payload {
                    continue;
                }
                let p = at(Step::Field(fid));
                let name = format!("{what}{}", f.name);
                match &f.ty {
                    Type::Dict(_) | Type::Layout(_) => {
                        uncovered(ir, &f.ty, &p, set, whole, None, &format!("{name}."), out)
                    }
                    _ if set(&p) => {}
                    _ => out.push(name),
                }
            }
        }
        Type::Dict(d) => {
            for (k, key) in ir.dict(*d).keys.iter().enumerate() {
                let p = at(Step::Key(*d, KeyId(k as u32)));
                // Optional keys are absent and a `rest` map empty unless filled in.
                if key.optional || key.rest || set(&p) {
                    continue;
                }
                match &key.ty {
                    Type::Dict(_) => uncovered(
                        ir,
                        &key.ty,
                        &p,
                        set,
                        whole,
                        None,
                        &format!("{what}{}.", key.key),
                        out,
                    ),
                    _ => out.push(format!("{what}{}", key.key)),
                }
            }
        }
        Type::MapItem(_, v) => {
            if !set(&at(Step::MapKey)) {
                out.push(format!("{what}key"));
            }
            uncovered(ir, v, &at(Step::MapValue), set, whole, None, what, out);
        }
        _ if set(place) => {}
        _ => out.push(format!("{what}value")),
    }
}

/// `Ok` when `e` names constants and given fields of `layout` only (`File.kv`): what the
/// several-tensor writer holds when a tensor is added; else the span of what it names.
fn held_only(ir: &Ir, layout: LayoutId, e: &Expr) -> Result<(), Span> {
    match &e.kind {
        ExprKind::Member {
            base,
            member: Member::Field(l, f),
        } if matches!(base.kind, ExprKind::Layout(_)) => {
            let field = ir.field(*l, *f);
            if *l == layout && !is_computed(field) && field.item_ty != Type::Payload {
                Ok(())
            } else {
                Err(e.span)
            }
        }
        k if names_record(k) || matches!(k, ExprKind::Member { .. }) => Err(e.span),
        _ => children(e)
            .into_iter()
            .try_for_each(|c| held_only(ir, layout, c)),
    }
}

/// True for an expression that names the record, its items or the file read.
fn names_record(k: &ExprKind) -> bool {
    matches!(
        k,
        ExprKind::Binding
            | ExprKind::Layout(_)
            | ExprKind::Field(..)
            | ExprKind::Position
            | ExprKind::TensorKey(_)
            | ExprKind::Source
    )
}

/// True when `e` names nothing of the record or its items.
fn constant(e: &Expr) -> bool {
    let mut c = true;
    e.walk(&mut |x| c &= !names_record(&x.kind));
    c
}

/// The layout a mapping's source starts at (`File`, `File.header.rest`).
pub fn root_layout(e: &Expr) -> Option<LayoutId> {
    match &e.kind {
        ExprKind::Layout(l) => Some(*l),
        ExprKind::Member { base, .. } => root_layout(base),
        _ => None,
    }
}

/// True when the layout is read around pickles (`pytorch_legacy`): its format's
/// layouts are read by the pickle-file engine and not written.
pub fn around_pickles(ir: &Ir, l: LayoutId) -> bool {
    let fmt = ir.format(ir.layout(l).format);
    fmt.layouts.iter().any(|&x| {
        ir.layout(x)
            .fields
            .iter()
            .any(|f| matches!(f.codec, Some(Codec::Pickle(_))))
    })
}
