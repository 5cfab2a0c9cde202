//! A compact, readable text dump of the IR, for tests and debugging.
//!
//! Items are printed with their resolved types; every rule is printed as an expression in
//! schema syntax with names qualified by what they resolve to (`File.header_len` for a
//! field, `npy.File` for another format's layout, `descr[..]` for a lookup), followed by
//! `: TYPE`.

use std::fmt::Write;

use super::*;

/// The dump of the whole IR.
pub fn dump(ir: &Ir) -> String {
    let mut out = String::new();
    for i in 0..ir.formats.len() {
        dump_format(ir, FormatId(i as u32), &mut out);
    }
    out
}

/// The dump of one format.
pub fn dump_format(ir: &Ir, id: FormatId, out: &mut String) {
    let f = ir.format(id);
    let d = D {
        ir,
        binding: "$binding",
    };
    let _ = writeln!(
        out,
        "format {} \"{}\" (file {})",
        f.name, f.public_name, f.file
    );
    if !f.uses.is_empty() {
        let u: Vec<&str> = f.uses.iter().map(|u| ir.format(*u).name.as_str()).collect();
        let _ = writeln!(out, "  uses {}", u.join(", "));
    }
    let engine = match &f.engine {
        Engine::File => "file".to_string(),
        Engine::Zip => "zip".to_string(),
        Engine::Protobuf { root } => format!("protobuf(root = {})", d.msg(*root)),
        Engine::Kv {
            backend,
            schema,
            open,
        } => format!(
            "kv(backend = {backend:?}{}{})",
            schema.map_or(String::new(), |s| format!(
                ", schema = {}",
                ir.format(s).name
            )),
            open.given()
                .iter()
                .map(|(n, v)| format!(", {n} = {v}"))
                .collect::<String>()
        ),
        Engine::Error => "<error>".to_string(),
    };
    let _ = writeln!(out, "  engine {engine}");
    if !f.extensions.is_empty() {
        let _ = writeln!(out, "  extensions {:?}", f.extensions);
    }
    for det in &f.detects {
        match det {
            Detect::Magic { bytes, at, .. } => {
                let _ = writeln!(out, "  detect magic {} at {at}", bytes_lit(bytes));
            }
            Detect::MagicAny {
                alternatives, at, ..
            } => {
                let list: Vec<String> = alternatives.iter().map(|(b, _)| bytes_lit(b)).collect();
                let _ = writeln!(out, "  detect magic any [{}] at {at}", list.join(", "));
            }
            Detect::Pickle { pickle, window } => {
                let _ = writeln!(
                    out,
                    "  detect pickle({}, {window})",
                    ir.pickle(*pickle).name
                );
            }
            Detect::Entries { mode, pattern } => {
                let _ = writeln!(out, "  detect entries {mode:?} {:?}", pattern.text);
            }
        }
    }
    for &t in &f.tables {
        let t = ir.table(t);
        let key = match t.key {
            KeyKind::Str => "str",
            KeyKind::Int => "int",
        };
        let _ = writeln!(out, "  table {}: {key} -> dtype", t.name);
        for r in &t.rows {
            let _ = writeln!(
                out,
                "    {} => {}{}",
                r.key,
                r.dtype.name(),
                r.endian
                    .map_or(String::new(), |e| format!(" {}", e.short()))
            );
        }
    }
    for &x in &f.dicts {
        let x = ir.dict(x);
        let _ = writeln!(out, "  dict {}", x.name);
        for k in &x.keys {
            let _ = writeln!(
                out,
                "    {:?}: {}{}",
                k.key,
                if k.optional { "optional " } else { "" },
                d.ty(&k.ty)
            );
        }
    }
    for &l in &f.layouts {
        let l = ir.layout(l);
        let _ = writeln!(out, "  layout {} {}", l.name, l.endian.short());
        for fl in &l.fields {
            let kind = match &fl.kind {
                FieldKind::Magic(b) => format!("magic {}", bytes_lit(b)),
                FieldKind::Value => d.ty(&fl.ty),
                FieldKind::Cond {
                    cond,
                    then,
                    otherwise,
                } => format!(
                    "if {} {{ {} }} else {{ {} }} -> {}",
                    d.expr(cond),
                    then.name(),
                    otherwise.name(),
                    d.ty(&fl.ty)
                ),
                FieldKind::Match { tag, cases } => format!(
                    "match {} {{ {} }} -> {}",
                    d.expr(tag),
                    cases
                        .iter()
                        .map(|c| format!("{} => {}", c.tag, d.ty(&c.ty)))
                        .collect::<Vec<_>>()
                        .join(", "),
                    d.ty(&fl.ty)
                ),
            };
            let _ = writeln!(out, "    {}: {kind}", fl.name);
            let rule = |out: &mut String, what: &str, e: &Expr| {
                let _ = writeln!(out, "      {what} {} : {}", d.expr(e), d.ty(&e.ty));
            };
            if let Some(Repeat::Count(e)) = &fl.repeat {
                rule(out, "repeat count", e);
            } else if fl.repeat.is_some() {
                let _ = writeln!(out, "      repeat until_eof");
            }
            if fl.rest {
                let _ = writeln!(out, "      rest");
            }
            for (w, e) in [("at", &fl.at), ("align", &fl.align), ("size", &fl.size)] {
                if let Some(e) = e {
                    rule(out, w, e);
                }
            }
            if let Some(c) = &fl.codec {
                let _ = writeln!(out, "      codec {}", d.codec(c));
                if let Codec::PyDict {
                    encoding,
                    spare,
                    trailing_comma,
                } = c
                {
                    if *trailing_comma {
                        let _ = writeln!(out, "        trailing_comma");
                    }
                    if let Some(e) = encoding {
                        rule(out, "  encoding =", e);
                    }
                    if let Some(e) = spare {
                        rule(out, "  spare =", e);
                    }
                }
            }
            if let Some(p) = &fl.pad {
                let _ = writeln!(
                    out,
                    "      pad align {} fill {} last {} min {}",
                    d.expr(&p.align),
                    bytes_lit(&[p.fill]),
                    p.last.map_or("-".to_string(), |b| bytes_lit(&[b])),
                    p.min.as_ref().map_or("-".to_string(), |m| d.expr(m)),
                );
            }
            for c in &fl.checks {
                rule(out, "check", c);
            }
            if let Some(e) = &fl.write {
                rule(out, "write =", e);
            }
            if let Some(c) = &fl.implied {
                let _ = writeln!(out, "      implied {}", d.konst(c));
            }
        }
    }
    for &m in &f.messages {
        dump_message(&d, m, 1, out);
    }
    for &e in &f.enums {
        dump_enum(&d, e, 1, out);
    }
    for &p in &f.pickles {
        let p = ir.pickle(p);
        let proto = p
            .protocol
            .map_or(String::new(), |v| format!(" protocol {v}"));
        let _ = writeln!(out, "  pickle {}{proto}", p.name);
        for g in &p.globals {
            let _ = writeln!(out, "    global {:?} => {:?}", g.path, g.kind);
        }
        if let Some((k, items)) = &p.persistent {
            let _ = writeln!(out, "    persistent {k}({})", items.join(", "));
        }
        for (on, name) in [
            (p.byte_ranges, "byte_ranges"),
            (p.codecs_encode, "codecs_encode"),
        ] {
            if on {
                let _ = writeln!(out, "    {name}");
            }
        }
    }
    for &e in &f.entries {
        let e = ir.entry(e);
        let mut flags = Vec::new();
        for (b, w) in [
            (e.repeated, "repeated"),
            (e.optional, "optional"),
            (e.strict, "strict"),
        ] {
            if b {
                flags.push(w);
            }
        }
        let _ = writeln!(
            out,
            "  entry {} {:?} {}",
            e.name,
            e.pattern.text,
            flags.join(" ")
        );
        let content = match &e.content {
            Content::Bytes => "bytes".to_string(),
            Content::Text => "text".to_string(),
            Content::Layout(l) => format!("layout {}", d.layout(*l)),
            Content::Value(t) => format!("value {}", d.ty(t)),
            Content::Codec(c) => format!("codec {}", d.codec(c)),
        };
        let _ = writeln!(out, "    content {content} : {}", d.ty(&e.content_ty));
        if !e.compression.is_empty() {
            let _ = writeln!(out, "    compression {:?}", e.compression);
        }
        for (w, x) in [
            ("align", &e.align),
            ("check", &e.check),
            ("split", &e.split),
            ("write =", &e.write),
        ] {
            if let Some(x) = x {
                let _ = writeln!(out, "    {w} {} : {}", d.expr(x), d.ty(&x.ty));
            }
        }
        if let Some(n) = &e.write_name {
            let _ = writeln!(out, "    write_name {n:?}");
        }
        if let Some(p) = &e.preferred {
            let _ = writeln!(out, "    preferred {:?}", p.text);
        }
    }
    for &m in &f.mappings {
        let m = ir.mapping(m);
        let d = D {
            ir,
            binding: &m.binding,
        };
        let _ = writeln!(
            out,
            "  tensor from {} : {} as {} : {}",
            d.expr(&m.source),
            d.ty(&m.source.ty),
            m.binding,
            d.ty(&m.binding_ty)
        );
        if let Some(x) = &m.filter {
            let _ = writeln!(out, "    where {} : {}", d.expr(x), d.ty(&x.ty));
        }
        for s in &m.stmts {
            match s {
                MappingStmt::Include {
                    format,
                    mapping,
                    arg,
                } => {
                    let _ = writeln!(
                        out,
                        "    include {}.tensor#{}({}) : {}",
                        ir.format(*format).name,
                        mapping.0,
                        d.expr(arg),
                        d.ty(&arg.ty)
                    );
                }
                MappingStmt::Set { key, value } => {
                    let _ = writeln!(
                        out,
                        "    {} = {} : {}",
                        key.name(),
                        d.expr(value),
                        d.ty(&value.ty)
                    );
                }
            }
        }
        if let Some(x) = &m.write {
            let _ = writeln!(out, "    write = {} : {}", d.expr(x), d.ty(&x.ty));
        }
    }
}

fn dump_message(d: &D<'_>, id: MessageId, depth: usize, out: &mut String) {
    let m = d.ir.message(id);
    let pad = "  ".repeat(depth);
    let _ = writeln!(out, "{pad}message {}", m.path);
    for f in &m.fields {
        let proto = match f.proto {
            ProtoType::Scalar(s) => format!("{s:?}").to_lowercase(),
            ProtoType::Message(m) => d.msg(m),
            ProtoType::Enum(e) => d.enum_name(e),
        };
        let _ = write!(
            out,
            "{pad}  {}: {:?} {proto} = {}{} : {}",
            f.name,
            f.label,
            f.tag,
            if f.packed { " packed" } else { "" },
            d.ty(&f.ty)
        );
        if let Some(x) = &f.default {
            let _ = write!(out, " default {}", d.expr(x));
        }
        if let Some(x) = &f.write {
            let _ = write!(out, " write = {} : {}", d.expr(x), d.ty(&x.ty));
        }
        out.push('\n');
    }
    for &x in &m.messages {
        dump_message(d, x, depth + 1, out);
    }
    for &x in &m.enums {
        dump_enum(d, x, depth + 1, out);
    }
}

fn dump_enum(d: &D<'_>, id: EnumId, depth: usize, out: &mut String) {
    let e = d.ir.enum_(id);
    let vals: Vec<String> = e.values.iter().map(|(n, v)| format!("{n} = {v}")).collect();
    let _ = writeln!(
        out,
        "{}enum {} {{ {} }}",
        "  ".repeat(depth),
        d.enum_name(id),
        vals.join(", ")
    );
}

fn bytes_lit(b: &[u8]) -> String {
    let mut s = String::from("b\"");
    for &c in b {
        if c.is_ascii_graphic() && c != b'"' && c != b'\\' || c == b' ' {
            s.push(c as char);
        } else if c == b'\n' {
            s.push_str("\\n");
        } else {
            let _ = write!(s, "\\x{c:02x}");
        }
    }
    s.push('"');
    s
}

/// A type as the dump writes it (`u16 le`, `list<npy.File>`, `message onnx.TensorProto`).
pub(crate) fn type_name(ir: &Ir, t: &Type) -> String {
    D { ir, binding: "" }.ty(t)
}

struct D<'a> {
    ir: &'a Ir,
    /// The name printed for [`ExprKind::Binding`].
    binding: &'a str,
}

impl D<'_> {
    fn fmt_name(&self, f: FormatId) -> &str {
        &self.ir.format(f).name
    }

    fn layout(&self, l: LayoutId) -> String {
        let l = self.ir.layout(l);
        format!("{}.{}", self.fmt_name(l.format), l.name)
    }

    fn msg(&self, m: MessageId) -> String {
        let m = self.ir.message(m);
        format!("{}.{}", self.fmt_name(m.format), m.path)
    }

    fn enum_name(&self, e: EnumId) -> String {
        let x = self.ir.enum_(e);
        match x.parent {
            Some(p) => format!("{}.{}", self.msg(p), x.name),
            None => format!("{}.{}", self.fmt_name(x.format), x.name),
        }
    }

    fn codec(&self, c: &Codec) -> String {
        match c {
            Codec::PyDict { .. } => "pydict".to_string(),
            Codec::Json { unique_keys: false } => "json".to_string(),
            Codec::Json { unique_keys: true } => "json(unique_keys = true)".to_string(),
            Codec::Pickle(p) => format!("pickle({})", self.ir.pickle(*p).name),
            Codec::Protobuf(m) => format!("protobuf({})", self.msg(*m)),
        }
    }

    fn ty(&self, t: &Type) -> String {
        match t {
            Type::Int(i) => match i.endian {
                Some(e) => format!("{} {}", i.name(), e.short()),
                None => i.name(),
            },
            Type::Float(f) => {
                let n = format!("f{}", f.bytes as u32 * 8);
                match f.endian {
                    Some(e) => format!("{n} {}", e.short()),
                    None => n,
                }
            }
            Type::Bool => "bool".into(),
            Type::Str => "str".into(),
            Type::Bytes => "bytes".into(),
            Type::Payload => "payload".into(),
            Type::Dtype => "dtype".into(),
            Type::ByteOrder => "byte_order".into(),
            Type::Order => "order".into(),
            Type::None => "none".into(),
            Type::List(x) => format!("list<{}>", self.ty(x)),
            Type::Tuple(x) => format!("tuple<{}>", self.ty(x)),
            Type::Map(k, v) => format!("map<{}, {}>", self.ty(k), self.ty(v)),
            Type::MapItem(k, v) => format!("item<{}, {}>", self.ty(k), self.ty(v)),
            Type::Layout(l) => format!("layout {}", self.layout(*l)),
            Type::Union(l, f) => {
                format!("union {}.{}", self.layout(*l), self.ir.field(*l, *f).name)
            }
            Type::Dict(x) => {
                let x = self.ir.dict(*x);
                format!("dict {}.{}", self.fmt_name(x.format), x.name)
            }
            Type::Message(m) => format!("message {}", self.msg(*m)),
            Type::Enum(e) => format!("enum {}", self.enum_name(*e)),
            Type::Entry(e) => {
                let x = self.ir.entry(*e);
                format!("entry {}.{}", self.fmt_name(x.format), x.name)
            }
            Type::Source => "source".into(),
            Type::Table(x) => format!("table {}", self.ir.table(*x).name),
            Type::Pickled(p) => format!("pickled {}", self.ir.pickle(*p).name),
            Type::PickleCall(p, k) => format!("pickled {} {k}", self.ir.pickle(*p).name),
            Type::PickleGlobal(p) => format!("global {}", self.ir.pickle(*p).name),
            Type::PickleObject(p) => format!("object {}", self.ir.pickle(*p).name),
            Type::TensorData => "tensor_data".into(),
            Type::Error => "<error>".into(),
        }
    }

    fn konst(&self, c: &Const) -> String {
        match c {
            Const::Int(v) => v.to_string(),
            Const::Str(s) => format!("{s:?}"),
            Const::Bytes(b) => bytes_lit(b),
            Const::Bool(b) => b.to_string(),
            Const::None => "none".into(),
            Const::Dtype(d) => d.name().into(),
            Const::ByteOrder(b) => b.short().into(),
            Const::Order(Order::C) => "c".into(),
            Const::Order(Order::Fortran) => "fortran".into(),
        }
    }

    fn expr(&self, e: &Expr) -> String {
        let args = |xs: &mut dyn Iterator<Item = String>| xs.collect::<Vec<_>>().join(", ");
        match &e.kind {
            ExprKind::Const(c) => self.konst(c),
            ExprKind::Field(l, f) => {
                format!("{}.{}", self.ir.layout(*l).name, self.ir.field(*l, *f).name)
            }
            ExprKind::RecordDtype => "dtype".into(),
            ExprKind::Binding => self.binding.into(),
            ExprKind::Position => "position".into(),
            ExprKind::TensorKey(k) => format!("tensor.{}", k.name()),
            ExprKind::WriteVar(v) => format!("${}", v.name()),
            ExprKind::Source => "source".into(),
            ExprKind::Root(_) => "root".into(),
            ExprKind::Layout(l) => self.layout(*l),
            ExprKind::Entry(x) => {
                let x = self.ir.entry(*x);
                format!("{}.{}", self.fmt_name(x.format), x.name)
            }
            ExprKind::Table(t) => {
                let t = self.ir.table(*t);
                format!("{}.{}", self.fmt_name(t.format), t.name)
            }
            ExprKind::EnumValue(en, i) => {
                format!(
                    "{}.{}",
                    self.enum_name(*en),
                    self.ir.enum_(*en).values[*i].0
                )
            }
            ExprKind::Member { base, member } => {
                let b = self.expr(base);
                let m = match member {
                    Member::Field(l, f) => self.ir.field(*l, *f).name.clone(),
                    Member::DictKey(d, k) => self.ir.dict(*d).keys[k.index()].key.clone(),
                    Member::MessageField(m, i) => self.ir.message(*m).fields[*i].name.clone(),
                    Member::EntryContent(_) => "content".into(),
                    Member::EntryValue(_) => "value".into(),
                    Member::EntryName(_) => "name".into(),
                    Member::Capture(_, c) => c.clone(),
                    Member::SourceStem => "stem".into(),
                    Member::SourceName => "name".into(),
                    Member::SourcePath => "path".into(),
                    Member::MapKey => "key".into(),
                    Member::MapValue => "value".into(),
                    Member::PickleObjects(_, k) => format!("<{k}s>"),
                    Member::PicklePath => "path".into(),
                    Member::PickleParam(p) => p.clone(),
                    Member::PickleAttr(a) => format!("<{a}>"),
                    Member::PickleState => "<state>".into(),
                };
                format!("{b}.{m}")
            }
            ExprKind::Lookup { table, key } => {
                format!("{}[{}]", self.ir.table(*table).name, self.expr(key))
            }
            ExprKind::Index { base, index, how } => {
                let how = match how {
                    IndexKind::Position => "",
                    IndexKind::KeyValue { .. } => "key ",
                    IndexKind::Named { .. } => "name ",
                    IndexKind::Pickled => "pickled ",
                };
                format!("{}[{how}{}]", self.expr(base), self.expr(index))
            }
            ExprKind::Call { func, args: a } => format!(
                "{}({})",
                func.name(),
                args(&mut a.iter().map(|x| match &x.name {
                    Some(n) => format!("{n} = {}", self.expr(&x.value)),
                    None => self.expr(&x.value),
                }))
            ),
            ExprKind::EntryLookup { entry, captures } => format!(
                "{}({})",
                self.ir.entry(*entry).name,
                args(
                    &mut captures
                        .iter()
                        .map(|(n, v)| format!("{n} = {}", self.expr(v)))
                )
            ),
            ExprKind::NewMessage { message, fields } => {
                let m = self.ir.message(*message);
                format!(
                    "{}({})",
                    m.name,
                    args(&mut fields.iter().map(|(i, v)| format!(
                        "{} = {}",
                        m.fields[*i].name,
                        self.expr(v)
                    )))
                )
            }
            ExprKind::PickleGlobal { pickle, global } => {
                format!("global {:?}", self.ir.pickle(*pickle).globals[*global].path)
            }
            ExprKind::PickleCall {
                pickle,
                global,
                args: a,
            } => format!(
                "call {:?}({})",
                self.ir.pickle(*pickle).globals[*global].path,
                args(&mut a.iter().map(|x| self.expr(x)))
            ),
            ExprKind::PersistentId { pickle, items } => {
                let names = self
                    .ir
                    .pickle(*pickle)
                    .persistent
                    .as_ref()
                    .map(|p| p.1.clone())
                    .unwrap_or_default();
                format!(
                    "persistent({})",
                    args(
                        &mut names
                            .iter()
                            .zip(items)
                            .map(|(n, v)| format!("{n} = {}", self.expr(v)))
                    )
                )
            }
            ExprKind::MappingOf { format, arg } => {
                format!("{}.tensor({})", self.fmt_name(*format), self.expr(arg))
            }
            ExprKind::Unary { op, expr } => {
                let o = match op {
                    crate::ast::UnaryOp::Not => "!",
                    crate::ast::UnaryOp::Neg => "-",
                };
                format!("{o}{}", self.expr(expr))
            }
            ExprKind::Binary { op, lhs, rhs } => {
                format!("({} {} {})", self.expr(lhs), op.symbol(), self.expr(rhs))
            }
            ExprKind::In { expr, list } => format!(
                "({} in [{}])",
                self.expr(expr),
                args(&mut list.iter().map(|x| self.expr(x)))
            ),
            ExprKind::If {
                cond,
                then,
                otherwise,
            } => {
                let tail = match otherwise.kind {
                    ExprKind::If { .. } => self.expr(otherwise),
                    _ => format!("{{ {} }}", self.expr(otherwise)),
                };
                format!(
                    "if {} {{ {} }} else {tail}",
                    self.expr(cond),
                    self.expr(then)
                )
            }
            ExprKind::List(xs) => format!("[{}]", args(&mut xs.iter().map(|x| self.expr(x)))),
            ExprKind::Error => "<error>".into(),
        }
    }
}
