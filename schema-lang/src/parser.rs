//! The pest parser and the construction of the AST from its parse tree.

use std::path::Path;
use std::sync::OnceLock;

use pest::iterators::{Pair, Pairs};
use pest::pratt_parser::{Assoc, Op, PrattParser};
use pest::Parser as _;

use crate::ast::*;
use crate::diag::{Diagnostic, Diagnostics};

#[derive(pest_derive::Parser)]
#[grammar = "grammar.pest"]
struct FmtParser;

/// Parses one file. Syntax errors stop at the first; errors found while building the AST
/// (bad escapes, out-of-range numbers, unsupported member access) are all reported.
pub(crate) fn parse(path: &Path, source: &str) -> Result<SchemaFile, Diagnostics> {
    let file = match FmtParser::parse(Rule::file, source) {
        Ok(mut pairs) => pairs.next().expect("file rule"),
        Err(e) => return Err(Diagnostics(vec![syntax_error(path, source, e)])),
    };
    let mut b = Builder {
        path,
        source,
        errors: Vec::new(),
    };
    let out = b.file(file);
    if b.errors.is_empty() {
        Ok(out)
    } else {
        Err(Diagnostics(b.errors))
    }
}

// ---------------------------------------------------------------------------------------
// Syntax errors

fn syntax_error(path: &Path, source: &str, e: pest::error::Error<Rule>) -> Diagnostic {
    use pest::error::{ErrorVariant, InputLocation};
    let pos = match e.location {
        InputLocation::Pos(p) => p,
        InputLocation::Span((s, _)) => s,
    };
    let end = source[pos..]
        .chars()
        .next()
        .filter(|c| *c != '\n' && *c != '\r')
        .map_or(pos, |c| pos + c.len_utf8());
    let found = describe_found(&source[pos..]);
    let message = match &e.variant {
        ErrorVariant::ParsingError {
            positives,
            negatives,
        } => {
            let mut words = expected_words(positives);
            for t in expected_punctuation(source) {
                if !words.contains(&t) {
                    words.insert(0, t);
                }
            }
            if words.is_empty() {
                let neg = expected_words(negatives);
                if neg.is_empty() {
                    format!("unexpected {found}")
                } else {
                    format!("unexpected {}", join_words(&neg))
                }
            } else {
                format!("expected {}, found {found}", join_words(&words))
            }
        }
        ErrorVariant::CustomError { message } => message.clone(),
    };
    if unterminated_string(&source[pos..]) {
        let end = source[pos..]
            .find(['\n', '\r'])
            .map_or(source.len(), |i| pos + i);
        return Diagnostic::new(
            path,
            source,
            Span { start: pos, end },
            "unterminated string",
        )
        .with_help(
            "a string ends with `\"` on the line it starts on; write a line break as `\\n` \
                 and a quote as `\\\"`",
        );
    }
    let mut d = Diagnostic::new(path, source, Span { start: pos, end }, message);
    let word: String = source[pos..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    let took_call = matches!(&e.variant, ErrorVariant::ParsingError { positives, .. }
        if positives.contains(&Rule::arg_list));
    // The reserved word is at the error, or just before it (`check write == 1` fails at
    // `==`, after `write` was taken for a call).
    let before = source[..pos].trim_end();
    let prev: String = before
        .chars()
        .rev()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    let word = if RESERVED.contains(&word.as_str()) {
        word
    } else if !before.ends_with('.') && took_call {
        prev
    } else {
        String::new()
    };
    if RESERVED.contains(&word.as_str()) {
        d = d.with_help(format!(
            "`{word}` is reserved: a name in an expression cannot start with `check`, \
             `write`, `size`, `codec`, `pad`, `rest`, `repeat`, `align`, `at`, `if`, `else`, \
             `in`, `true`, `false` or `none` (calls such as `size(x)` are fine)"
        ));
    }
    d
}

/// Words that cannot start a path in an expression.
const RESERVED: &[&str] = &[
    "check", "write", "size", "codec", "pad", "rest", "repeat", "align", "at", "match", "if",
    "else", "in", "true", "false", "none",
];

const MODIFIER_KWS: &[Rule] = &[
    Rule::kw_check,
    Rule::kw_write,
    Rule::kw_size,
    Rule::kw_codec,
    Rule::kw_pad,
    Rule::kw_rest,
    Rule::kw_repeat,
    Rule::kw_align,
    Rule::kw_at,
    Rule::m_check,
    Rule::m_write,
    Rule::m_size,
    Rule::m_codec,
    Rule::m_pad,
    Rule::m_rest,
    Rule::m_repeat,
    Rule::m_align,
    Rule::m_at,
];

const OPERATORS: &[Rule] = &[
    Rule::op_or,
    Rule::op_and,
    Rule::op_eq,
    Rule::op_ne,
    Rule::op_le,
    Rule::op_lt,
    Rule::op_ge,
    Rule::op_gt,
    Rule::op_add,
    Rule::op_sub,
    Rule::op_mul,
    Rule::op_div,
    Rule::op_rem,
    Rule::in_op,
    Rule::kw_in,
];

/// Rules as words, with field modifiers and operators each collapsed into one word.
fn expected_words(rules: &[Rule]) -> Vec<String> {
    let mut words: Vec<String> = Vec::new();
    let modifiers = rules.iter().filter(|r| MODIFIER_KWS.contains(r)).count() >= 3;
    let operators = rules.iter().filter(|r| OPERATORS.contains(r)).count() >= 3;
    for r in rules {
        let w = if modifiers && MODIFIER_KWS.contains(r) {
            Some("a field modifier".to_string())
        } else if operators && OPERATORS.contains(r) {
            Some("an operator".to_string())
        } else {
            rule_word(*r)
        };
        if let Some(w) = w {
            if !words.contains(&w) {
                words.push(w);
            }
        }
    }
    words
}

/// Punctuation expected at the error position (`;`, `{`, ...), from pest's detailed
/// attempts; re-parses the source with attempt tracking on.
fn expected_punctuation(source: &str) -> Vec<String> {
    pest::set_error_detail(true);
    let r = FmtParser::parse(Rule::file, source);
    pest::set_error_detail(false);
    let Err(e) = r else { return Vec::new() };
    let Some(attempts) = e.parse_attempts() else {
        return Vec::new();
    };
    let mut out: Vec<String> = Vec::new();
    for t in attempts.expected_tokens() {
        {
            let token = t.to_string();
            let punct = !token.is_empty()
                && token.chars().all(|c| c.is_ascii_punctuation())
                && !token.starts_with("//")
                && !matches!(
                    token.as_str(),
                    "\"" | "\\"
                        | "b\""
                        | "_"
                        | "0x"
                        | "0b"
                        | "||"
                        | "&&"
                        | "=="
                        | "!="
                        | "<"
                        | "<="
                        | ">"
                        | ">="
                        | "+"
                        | "-"
                        | "*"
                        | "/"
                        | "%"
                        | "!"
                );
            let w = format!("`{token}`");
            if punct && !out.contains(&w) {
                out.push(w);
            }
        }
    }
    out
}

/// True when `rest` starts with a string or byte string that does not end on its line.
fn unterminated_string(rest: &str) -> bool {
    let Some(body) = rest.strip_prefix('"').or_else(|| rest.strip_prefix("b\"")) else {
        return false;
    };
    let mut chars = body.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => return false,
            '\n' | '\r' => return true,
            '\\' => {
                if matches!(chars.next(), None | Some('\n' | '\r')) {
                    return true;
                }
            }
            _ => {}
        }
    }
    true
}

fn describe_found(rest: &str) -> String {
    match rest.chars().next() {
        None => "end of file".into(),
        Some(c) if c.is_ascii_alphabetic() || c == '_' => {
            let w: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            format!("`{w}`")
        }
        Some(c) if c.is_ascii_digit() => {
            let w: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            format!("`{w}`")
        }
        Some('"') => "a string".into(),
        Some('\n') | Some('\r') => "end of line".into(),
        Some(c) => format!("`{c}`"),
    }
}

fn join_words(words: &[String]) -> String {
    match words.len() {
        0 => String::new(),
        1 => words[0].clone(),
        2 => format!("{} or {}", words[0], words[1]),
        n => format!("{}, or {}", words[..n - 1].join(", "), words[n - 1]),
    }
}

/// A rule as a word for "expected ..." messages; `None` for rules never worth naming.
fn rule_word(r: Rule) -> Option<String> {
    let name = format!("{r:?}");
    if let Some(kw) = name.strip_prefix("kw_") {
        return Some(format!("`{kw}`"));
    }
    let w = match r {
        Rule::EOI => "end of file",
        Rule::ident | Rule::arg_name | Rule::callee => "a name",
        Rule::doc | Rule::inner_doc | Rule::doc_text => "a doc comment",
        Rule::string | Rule::str_inner => "a string",
        Rule::bytes_lit => "a byte string",
        Rule::int_lit | Rule::signed_int => "an integer",
        Rule::use_decl => "`use`",
        Rule::format => "`format`",
        Rule::engine => "`engine`",
        Rule::extensions => "`extensions`",
        Rule::read_only => "`read_only`",
        Rule::detect_magic | Rule::detect_magic_any | Rule::detect_entries => "`detect`",
        Rule::table => "`table`",
        Rule::table_row => "a table row",
        Rule::endian => "a byte order",
        Rule::dict => "`dict`",
        Rule::dict_field => "a dict key",
        Rule::type_ref => "a type",
        Rule::layout => "`layout`",
        Rule::field => "a field",
        Rule::magic_type => "`magic`",
        Rule::cond_type => "`if`",
        Rule::match_type => "`match`",
        Rule::match_case => "a `match` case",
        Rule::m_check => "`check`",
        Rule::m_write => "`write`",
        Rule::m_size => "`size`",
        Rule::m_codec => "`codec`",
        Rule::m_pad => "`pad`",
        Rule::m_rest => "`rest`",
        Rule::m_repeat => "`repeat`",
        Rule::m_align => "`align`",
        Rule::m_at => "`at`",
        Rule::message => "`message`",
        Rule::message_field => "a message field",
        Rule::label => "`optional`, `required` or `repeated`",
        Rule::field_options => "field options",
        Rule::enum_decl => "`enum`",
        Rule::enum_value => "an enum value",
        Rule::pickle => "`pickle`",
        Rule::p_protocol => "`protocol`",
        Rule::p_global => "`global`",
        Rule::p_persistent => "`persistent`",
        Rule::p_option => "a pickle option",
        Rule::ident_list => "a parameter list",
        Rule::entry => "`entry`",
        Rule::entry_prop => "an entry property",
        Rule::prop_eq => "`=`",
        Rule::tensor => "`tensor`",
        Rule::value_map => "`value`",
        Rule::t_include => "`include`",
        Rule::t_assign => "an assignment",
        Rule::arg_list => "`(`",
        Rule::arg => "an argument",
        Rule::expr | Rule::postfix_expr | Rule::path_expr | Rule::paren | Rule::call => {
            "an expression"
        }
        Rule::if_expr => "`if`",
        Rule::lit_true | Rule::lit_false | Rule::lit_none => "an expression",
        Rule::list => "a list",
        Rule::in_op => "`in`",
        Rule::index => "`[`",
        Rule::member => "`.`",
        Rule::op_not => "`!`",
        Rule::op_neg => "`-`",
        Rule::op_or => "`||`",
        Rule::op_and => "`&&`",
        Rule::op_eq => "`==`",
        Rule::op_ne => "`!=`",
        Rule::op_le => "`<=`",
        Rule::op_lt => "`<`",
        Rule::op_ge => "`>=`",
        Rule::op_gt => "`>`",
        Rule::op_add => "`+`",
        Rule::op_sub => "`-`",
        Rule::op_mul => "`*`",
        Rule::op_div => "`/`",
        Rule::op_rem => "`%`",
        Rule::reserved => "a reserved word",
        _ => return None,
    };
    Some(w.to_string())
}

// ---------------------------------------------------------------------------------------
// AST construction

fn pratt() -> &'static PrattParser<Rule> {
    static P: OnceLock<PrattParser<Rule>> = OnceLock::new();
    P.get_or_init(|| {
        PrattParser::new()
            .op(Op::infix(Rule::op_or, Assoc::Left))
            .op(Op::infix(Rule::op_and, Assoc::Left))
            .op(Op::infix(Rule::op_eq, Assoc::Left)
                | Op::infix(Rule::op_ne, Assoc::Left)
                | Op::infix(Rule::op_lt, Assoc::Left)
                | Op::infix(Rule::op_le, Assoc::Left)
                | Op::infix(Rule::op_gt, Assoc::Left)
                | Op::infix(Rule::op_ge, Assoc::Left)
                | Op::postfix(Rule::in_op))
            .op(Op::infix(Rule::op_add, Assoc::Left) | Op::infix(Rule::op_sub, Assoc::Left))
            .op(Op::infix(Rule::op_mul, Assoc::Left)
                | Op::infix(Rule::op_div, Assoc::Left)
                | Op::infix(Rule::op_rem, Assoc::Left))
            .op(Op::prefix(Rule::op_not) | Op::prefix(Rule::op_neg))
    })
}

/// The pair's span, without the trailing whitespace pest includes after repetitions.
fn span(p: &Pair<Rule>) -> Span {
    let s = p.as_span();
    let text = s.as_str();
    Span {
        start: s.start(),
        end: s.start() + text.trim_end().len(),
    }
}

fn is_keyword(r: Rule) -> bool {
    format!("{r:?}").starts_with("kw_")
}

/// The meaningful children of a pair (keywords skipped).
fn kids<'i>(p: Pair<'i, Rule>) -> impl Iterator<Item = Pair<'i, Rule>> {
    p.into_inner().filter(|c| !is_keyword(c.as_rule()))
}

fn doc_line(p: Pair<Rule>) -> String {
    let text = p.into_inner().next().map_or("", |t| t.as_str());
    let text = text.strip_suffix('\r').unwrap_or(text);
    text.strip_prefix(' ').unwrap_or(text).to_string()
}

struct Builder<'a> {
    path: &'a Path,
    source: &'a str,
    errors: Vec<Diagnostic>,
}

impl Builder<'_> {
    fn error(&mut self, span: Span, msg: impl Into<String>) {
        self.errors
            .push(Diagnostic::new(self.path, self.source, span, msg));
    }

    fn file(&mut self, p: Pair<Rule>) -> SchemaFile {
        let mut out = SchemaFile {
            path: self.path.to_path_buf(),
            source: self.source.to_string(),
            docs: Vec::new(),
            uses: Vec::new(),
            formats: Vec::new(),
        };
        let mut docs = Vec::new();
        for c in p.into_inner() {
            match c.as_rule() {
                Rule::inner_doc => out.docs.push(doc_line(c)),
                Rule::doc => docs.push(doc_line(c)),
                Rule::use_decl => {
                    docs.clear();
                    let id = kids(c).next().expect("use name");
                    out.uses.push(self.ident(id));
                }
                Rule::format => {
                    let f = self.format(c, std::mem::take(&mut docs));
                    out.formats.push(f);
                }
                _ => {}
            }
        }
        out
    }

    fn ident(&self, p: Pair<Rule>) -> Ident {
        Ident {
            name: p.as_str().to_string(),
            span: span(&p),
        }
    }

    fn format(&mut self, p: Pair<Rule>, docs: Vec<String>) -> Format {
        let sp = span(&p);
        let mut it = kids(p);
        let name = self.ident(it.next().expect("format name"));
        let mut public_name = None;
        let mut items = Vec::new();
        let mut pending = Vec::new();
        for c in it {
            match c.as_rule() {
                Rule::string => public_name = Some(self.string(c)),
                Rule::doc => pending.push(doc_line(c)),
                _ => {
                    let d = std::mem::take(&mut pending);
                    items.push(self.item(c, d));
                }
            }
        }
        Format {
            docs,
            name,
            public_name,
            items,
            span: sp,
        }
    }

    fn item(&mut self, p: Pair<Rule>, docs: Vec<String>) -> Item {
        let sp = span(&p);
        match p.as_rule() {
            Rule::engine => {
                let mut it = kids(p);
                let kind = self.ident(it.next().expect("engine kind"));
                let args = it.next().map(|a| self.arg_list(a)).unwrap_or_default();
                Item::Engine(Engine {
                    kind,
                    args,
                    span: sp,
                })
            }
            Rule::extensions => Item::Extensions(kids(p).map(|s| self.string(s)).collect()),
            Rule::read_only => Item::ReadOnly(sp),
            Rule::detect_magic => {
                let mut it = kids(p);
                let bytes = self.bytes(it.next().expect("magic bytes"));
                let at_pair = it.next().expect("offset");
                let at = self.uint::<u64>(&at_pair, "offset");
                Item::Detect(Detect::Magic {
                    bytes,
                    at,
                    span: sp,
                })
            }
            Rule::detect_magic_any => {
                let mut it = kids(p);
                let list = it.next().expect("magic list");
                let list_span = span(&list);
                let alternatives = kids(list).map(|b| self.bytes(b)).collect();
                let at_pair = it.next().expect("offset");
                let at = self.uint::<u64>(&at_pair, "offset");
                Item::Detect(Detect::MagicAny {
                    alternatives,
                    list: list_span,
                    at,
                    span: sp,
                })
            }
            Rule::detect_pickle => {
                let mut it = kids(p);
                let pickle = self.ident(it.next().expect("pickle"));
                let window = self.uint::<u64>(&it.next().expect("window"), "window");
                Item::Detect(Detect::Pickle {
                    pickle,
                    window,
                    span: sp,
                })
            }
            Rule::detect_entries => {
                let all = p.clone().into_inner().any(|c| c.as_rule() == Rule::kw_all);
                let none = p.clone().into_inner().any(|c| c.as_rule() == Rule::kw_none);
                let pattern = self.string(kids(p).next().expect("pattern"));
                Item::Detect(Detect::Entries {
                    all,
                    none,
                    pattern,
                    span: sp,
                })
            }
            Rule::table => Item::Table(self.table(p, docs)),
            Rule::dict => Item::Dict(self.dict(p, docs)),
            Rule::layout => Item::Layout(self.layout(p, docs)),
            Rule::message => Item::Message(self.message(p, docs)),
            Rule::enum_decl => Item::Enum(self.enum_decl(p, docs)),
            Rule::pickle => Item::Pickle(self.pickle(p, docs)),
            Rule::entry => Item::Entry(self.entry(p, docs)),
            Rule::tensor => Item::Tensor(self.tensor(p, docs)),
            Rule::value_map => Item::Value(self.tensor(p, docs)),
            r => unreachable!("item rule {r:?}"),
        }
    }

    fn table(&mut self, p: Pair<Rule>, docs: Vec<String>) -> Table {
        let sp = span(&p);
        let key_kind = if p.clone().into_inner().any(|c| c.as_rule() == Rule::kw_int) {
            KeyKind::Int
        } else {
            KeyKind::Str
        };
        let mut it = kids(p);
        let name = self.ident(it.next().expect("table name"));
        let mut rows = Vec::new();
        for c in it {
            if c.as_rule() != Rule::table_row {
                continue; // row docs have no place in the AST
            }
            let rsp = span(&c);
            let mut r = kids(c);
            let k = r.next().expect("key");
            let key = match k.as_rule() {
                Rule::string => TableKey::Str(self.string(k).value),
                _ => TableKey::Int(self.int(&k)),
            };
            let dtype = self.ident(r.next().expect("dtype"));
            let endian = r.next().map(endian);
            rows.push(TableRow {
                key,
                dtype,
                endian,
                span: rsp,
            });
        }
        Table {
            docs,
            name,
            key_kind,
            rows,
            span: sp,
        }
    }

    fn dict(&mut self, p: Pair<Rule>, docs: Vec<String>) -> Dict {
        let sp = span(&p);
        let mut it = kids(p);
        let name = self.ident(it.next().expect("dict name"));
        let mut fields = Vec::new();
        let mut pending = Vec::new();
        for c in it {
            if c.as_rule() == Rule::doc {
                pending.push(doc_line(c));
                continue;
            }
            let fsp = span(&c);
            let optional = c
                .clone()
                .into_inner()
                .any(|x| x.as_rule() == Rule::kw_optional);
            let mut f = kids(c);
            let k = f.next().expect("key");
            let key_span = span(&k);
            let (key, quoted) = match k.as_rule() {
                Rule::string => (self.string(k).value, true),
                _ => (k.as_str().to_string(), false),
            };
            let ty = self.type_ref(f.next().expect("type"));
            fields.push(DictField {
                docs: std::mem::take(&mut pending),
                key,
                quoted,
                key_span,
                optional,
                ty,
                span: fsp,
            });
        }
        Dict {
            docs,
            name,
            fields,
            span: sp,
        }
    }

    fn type_ref(&mut self, p: Pair<Rule>) -> TypeRef {
        let sp = span(&p);
        let mut path = Vec::new();
        let mut args = Vec::new();
        for c in p.into_inner() {
            match c.as_rule() {
                Rule::ident => path.push(self.ident(c)),
                Rule::type_ref => args.push(self.type_ref(c)),
                _ => {}
            }
        }
        TypeRef {
            path,
            args,
            span: sp,
        }
    }

    fn layout(&mut self, p: Pair<Rule>, docs: Vec<String>) -> Layout {
        let sp = span(&p);
        let mut it = kids(p);
        let name = self.ident(it.next().expect("layout name"));
        let endian = endian(it.next().expect("endian"));
        let mut fields = Vec::new();
        let mut pending = Vec::new();
        for c in it {
            if c.as_rule() == Rule::doc {
                pending.push(doc_line(c));
                continue;
            }
            let field = self.field(c, std::mem::take(&mut pending));
            fields.push(field);
        }
        Layout {
            docs,
            name,
            endian,
            fields,
            span: sp,
        }
    }

    fn field(&mut self, p: Pair<Rule>, docs: Vec<String>) -> Field {
        let sp = span(&p);
        let mut it = kids(p);
        let name = self.ident(it.next().expect("field name"));
        let t = it.next().expect("field type");
        let ty = match t.as_rule() {
            Rule::magic_type => FieldType::Magic(self.bytes(kids(t).next().expect("bytes"))),
            Rule::cond_type => {
                let tsp = span(&t);
                let mut c = kids(t);
                let cond = self.expr(c.next().expect("cond"));
                let then = self.type_ref(c.next().expect("then"));
                let otherwise = self.type_ref(c.next().expect("else"));
                FieldType::Cond {
                    cond,
                    then,
                    otherwise,
                    span: tsp,
                }
            }
            Rule::match_type => {
                let tsp = span(&t);
                let mut c = kids(t);
                let tag = self.expr(c.next().expect("tag"));
                let cases = c
                    .map(|case| {
                        let csp = span(&case);
                        let mut k = kids(case);
                        let tag = self.int(&k.next().expect("case tag"));
                        let ty = self.type_ref(k.next().expect("case type"));
                        MatchCase { tag, ty, span: csp }
                    })
                    .collect();
                FieldType::Match {
                    tag,
                    cases,
                    span: tsp,
                }
            }
            _ => FieldType::Named(self.type_ref(t)),
        };
        let modifiers = it.map(|m| self.modifier(m)).collect();
        Field {
            docs,
            name,
            ty,
            modifiers,
            span: sp,
        }
    }

    fn modifier(&mut self, p: Pair<Rule>) -> Modifier {
        let sp = span(&p);
        match p.as_rule() {
            Rule::m_check => Modifier::Check(self.expr(kids(p).next().expect("expr"))),
            Rule::m_write => Modifier::Write(self.expr(kids(p).next().expect("expr"))),
            Rule::m_size => Modifier::Size(self.expr(kids(p).next().expect("expr"))),
            Rule::m_align => Modifier::Align(self.expr(kids(p).next().expect("expr"))),
            Rule::m_at => Modifier::At(self.expr(kids(p).next().expect("expr"))),
            Rule::m_codec => {
                let mut it = kids(p);
                let name = self.ident(it.next().expect("codec"));
                let args = it.next().map(|a| self.arg_list(a)).unwrap_or_default();
                Modifier::Codec {
                    name,
                    args,
                    span: sp,
                }
            }
            Rule::m_pad => {
                let args = self.arg_list(kids(p).next().expect("args"));
                Modifier::Pad { args, span: sp }
            }
            Rule::m_rest => Modifier::Rest(sp),
            Rule::m_repeat => match kids(p).next() {
                Some(e) => Modifier::Repeat(Repeat::Count(self.expr(e))),
                None => Modifier::Repeat(Repeat::UntilEof(sp)),
            },
            r => unreachable!("modifier rule {r:?}"),
        }
    }

    fn message(&mut self, p: Pair<Rule>, docs: Vec<String>) -> Message {
        let sp = span(&p);
        let mut it = kids(p);
        let name = self.ident(it.next().expect("message name"));
        let mut m = Message {
            docs,
            name,
            fields: Vec::new(),
            messages: Vec::new(),
            enums: Vec::new(),
            span: sp,
        };
        let mut pending = Vec::new();
        for c in it {
            match c.as_rule() {
                Rule::doc => pending.push(doc_line(c)),
                Rule::message => {
                    let d = std::mem::take(&mut pending);
                    let nested = self.message(c, d);
                    m.messages.push(nested);
                }
                Rule::enum_decl => {
                    let d = std::mem::take(&mut pending);
                    let e = self.enum_decl(c, d);
                    m.enums.push(e);
                }
                Rule::message_field => {
                    let fsp = span(&c);
                    let mut f = kids(c);
                    let fname = self.ident(f.next().expect("name"));
                    let label = match f
                        .next()
                        .expect("label")
                        .into_inner()
                        .next()
                        .expect("label kw")
                        .as_rule()
                    {
                        Rule::kw_optional => Label::Optional,
                        Rule::kw_required => Label::Required,
                        _ => Label::Repeated,
                    };
                    let ty = self.type_ref(f.next().expect("type"));
                    let tag_pair = f.next().expect("tag");
                    let tag = self.uint::<u32>(&tag_pair, "field number");
                    let options = f.next().map(|o| self.args(o)).unwrap_or_default();
                    m.fields.push(MessageField {
                        docs: std::mem::take(&mut pending),
                        name: fname,
                        label,
                        ty,
                        tag,
                        options,
                        span: fsp,
                    });
                }
                _ => {}
            }
        }
        m
    }

    fn enum_decl(&mut self, p: Pair<Rule>, docs: Vec<String>) -> EnumDecl {
        let sp = span(&p);
        let mut it = kids(p);
        let name = self.ident(it.next().expect("enum name"));
        let mut values = Vec::new();
        for c in it {
            if c.as_rule() != Rule::enum_value {
                continue; // value docs have no place in the AST
            }
            let mut v = kids(c);
            let id = self.ident(v.next().expect("name"));
            let n = v.next().expect("value");
            let value = self.int(&n);
            let value = match i64::try_from(value) {
                Ok(v) => v,
                Err(_) => {
                    self.error(span(&n), "enum value out of range for a 64-bit integer");
                    0
                }
            };
            values.push((id, value));
        }
        EnumDecl {
            docs,
            name,
            values,
            span: sp,
        }
    }

    fn pickle(&mut self, p: Pair<Rule>, docs: Vec<String>) -> Pickle {
        let sp = span(&p);
        let mut it = kids(p);
        let name = self.ident(it.next().expect("pickle name"));
        let mut items = Vec::new();
        for c in it {
            let isp = span(&c);
            match c.as_rule() {
                Rule::p_protocol => {
                    let n = kids(c).next().expect("protocol");
                    let v = self.uint::<u64>(&n, "protocol");
                    items.push(PickleItem::Protocol(v, isp));
                }
                Rule::p_global => {
                    let mut g = kids(c);
                    let path = self.string(g.next().expect("global"));
                    let kind = self.ident(g.next().expect("kind"));
                    let params = g.next().map(|l| self.idents(l)).unwrap_or_default();
                    items.push(PickleItem::Global {
                        path,
                        kind,
                        params,
                        span: isp,
                    });
                }
                Rule::p_persistent => {
                    let mut g = kids(c);
                    let kind = self.ident(g.next().expect("kind"));
                    let params = g.next().map(|l| self.idents(l)).unwrap_or_default();
                    items.push(PickleItem::Persistent {
                        kind,
                        params,
                        span: isp,
                    });
                }
                Rule::p_option => {
                    let name = self.ident(kids(c).next().expect("option"));
                    items.push(PickleItem::Option(name));
                }
                _ => {} // docs of pickle lines have no place in the AST
            }
        }
        Pickle {
            docs,
            name,
            items,
            span: sp,
        }
    }

    fn idents(&mut self, p: Pair<Rule>) -> Vec<Ident> {
        p.into_inner().map(|i| self.ident(i)).collect()
    }

    fn entry(&mut self, p: Pair<Rule>, docs: Vec<String>) -> Entry {
        let sp = span(&p);
        let mut it = kids(p);
        let name = self.ident(it.next().expect("entry name"));
        let pattern = self.string(it.next().expect("pattern"));
        let mut props = Vec::new();
        let mut pending = Vec::new();
        for c in it {
            if c.as_rule() == Rule::doc {
                pending.push(doc_line(c));
                continue;
            }
            let psp = span(&c);
            let mut e = kids(c);
            let pname = self.ident(e.next().expect("prop name"));
            let value = e.find(|x| x.as_rule() == Rule::expr).map(|x| self.expr(x));
            props.push(EntryProp {
                docs: std::mem::take(&mut pending),
                name: pname,
                value,
                span: psp,
            });
        }
        Entry {
            docs,
            name,
            pattern,
            props,
            span: sp,
        }
    }

    fn tensor(&mut self, p: Pair<Rule>, docs: Vec<String>) -> TensorMap {
        let sp = span(&p);
        let has_where = p
            .clone()
            .into_inner()
            .any(|c| c.as_rule() == Rule::kw_where);
        let mut it = kids(p);
        let source = self.expr(it.next().expect("source"));
        let binding = self.ident(it.next().expect("binding"));
        let filter = if has_where {
            Some(self.expr(it.next().expect("filter")))
        } else {
            None
        };
        let mut stmts = Vec::new();
        for c in it {
            let ssp = span(&c);
            match c.as_rule() {
                Rule::t_include => {
                    let e = self.expr(kids(c).next().expect("expr"));
                    stmts.push(TensorStmt::Include(e));
                }
                Rule::t_assign => {
                    let mut a = kids(c);
                    let key = self.ident(a.next().expect("key"));
                    let value = self.expr(a.next().expect("value"));
                    stmts.push(TensorStmt::Assign {
                        key,
                        value,
                        span: ssp,
                    });
                }
                _ => {} // docs of statements have no place in the AST
            }
        }
        TensorMap {
            docs,
            source,
            binding,
            filter,
            stmts,
            span: sp,
        }
    }

    // -----------------------------------------------------------------------------------
    // Literals

    fn string(&mut self, p: Pair<Rule>) -> StrLit {
        let sp = span(&p);
        let inner = p.into_inner().next().expect("str_inner");
        let value = match self.unescape(inner.as_str(), inner.as_span().start(), false) {
            Unescaped::Str(s) => s,
            Unescaped::Bytes(_) => unreachable!(),
        };
        StrLit { value, span: sp }
    }

    fn bytes(&mut self, p: Pair<Rule>) -> BytesLit {
        let sp = span(&p);
        let inner = p.into_inner().next().expect("str_inner");
        let value = match self.unescape(inner.as_str(), inner.as_span().start(), true) {
            Unescaped::Bytes(b) => b,
            Unescaped::Str(_) => unreachable!(),
        };
        BytesLit { value, span: sp }
    }

    /// Decodes escapes: `\n \t \r \\ \" \0 \xNN`, and `\u{...}` in strings. Bad
    /// escapes are reported at their position and dropped.
    fn unescape(&mut self, text: &str, base: usize, bytes: bool) -> Unescaped {
        let mut out: Vec<u8> = Vec::new();
        let mut s = String::new();
        let mut rest = text;
        let mut pos = base;
        while let Some(c) = rest.chars().next() {
            if c != '\\' {
                if bytes {
                    let mut buf = [0; 4];
                    out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                } else {
                    s.push(c);
                }
                rest = &rest[c.len_utf8()..];
                pos += c.len_utf8();
                continue;
            }
            let e = rest[1..]
                .chars()
                .next()
                .expect("grammar: escape has a character");
            let mut len = 1 + e.len_utf8();
            let decoded: Result<u32, String> = match e {
                'n' => Ok(10),
                't' => Ok(9),
                'r' => Ok(13),
                '\\' => Ok(92),
                '"' => Ok(34),
                '0' => Ok(0),
                'x' => {
                    let h = rest.get(2..4).unwrap_or("");
                    if h.len() == 2 && h.chars().all(|c| c.is_ascii_hexdigit()) {
                        len = 4;
                        let v = u32::from_str_radix(h, 16).expect("hex");
                        if !bytes && v > 0x7f {
                            Err(format!(
                                "`\\x{h}` is not ASCII; write `\\u{{{h}}}` for the character U+00{}",
                                h.to_uppercase()
                            ))
                        } else {
                            Ok(v)
                        }
                    } else {
                        Err("`\\x` takes two hex digits: `\\x93`".to_string())
                    }
                }
                'u' if !bytes => {
                    let close = rest.find('}');
                    match (rest[2..].starts_with('{'), close) {
                        (true, Some(end)) => {
                            len = end + 1;
                            let h = &rest[3..end];
                            match u32::from_str_radix(h, 16) {
                                Ok(v) if h.len() <= 6 => match char::from_u32(v) {
                                    Some(_) => Ok(v),
                                    None => Err(format!("invalid Unicode scalar value {v:#x}")),
                                },
                                _ => Err("`\\u{...}` takes 1 to 6 hex digits".to_string()),
                            }
                        }
                        _ => Err("`\\u` is written `\\u{e9}`".to_string()),
                    }
                }
                _ => Err(format!(
                    "unknown escape `\\{e}`; {} are \\n \\t \\r \\\\ \\\" \\0 \\xNN{}",
                    if bytes {
                        "byte-string escapes"
                    } else {
                        "escapes"
                    },
                    if bytes { "" } else { " \\u{...}" }
                )),
            };
            match decoded {
                Ok(v) if bytes => out.push(v as u8),
                Ok(v) => s.push(char::from_u32(v).expect("checked")),
                Err(msg) => self.error(
                    Span {
                        start: pos,
                        end: pos + len,
                    },
                    msg,
                ),
            }
            rest = &rest[len..];
            pos += len;
        }
        if bytes {
            Unescaped::Bytes(out)
        } else {
            Unescaped::Str(s)
        }
    }

    /// An integer literal (`int_lit` or `signed_int`); errors give 0.
    fn int(&mut self, p: &Pair<Rule>) -> i128 {
        let text: String = p.as_str().chars().filter(|c| *c != '_').collect();
        let (neg, digits) = match text.strip_prefix('-') {
            Some(d) => (true, d),
            None => (false, text.as_str()),
        };
        let parsed = if let Some(h) = digits.strip_prefix("0x") {
            i128::from_str_radix(h, 16)
        } else if let Some(b) = digits.strip_prefix("0b") {
            i128::from_str_radix(b, 2)
        } else {
            digits.parse::<i128>()
        };
        match parsed {
            Ok(v) if neg => -v,
            Ok(v) => v,
            Err(_) => {
                self.error(span(p), "integer literal too large");
                0
            }
        }
    }

    fn uint<T: TryFrom<i128> + Default>(&mut self, p: &Pair<Rule>, what: &str) -> T {
        let v = self.int(p);
        match T::try_from(v) {
            Ok(x) => x,
            Err(_) => {
                self.error(span(p), format!("{what} {v} is out of range"));
                T::default()
            }
        }
    }

    // -----------------------------------------------------------------------------------
    // Arguments and expressions

    fn arg_list(&mut self, p: Pair<Rule>) -> Vec<Arg> {
        self.args(p)
    }

    /// The `arg` children of `p`.
    fn args(&mut self, p: Pair<Rule>) -> Vec<Arg> {
        p.into_inner()
            .filter(|c| c.as_rule() == Rule::arg)
            .map(|a| {
                let sp = span(&a);
                let mut name = None;
                let mut value = None;
                for c in a.into_inner() {
                    match c.as_rule() {
                        Rule::arg_name => {
                            name = Some(self.ident(c.into_inner().next().expect("ident")))
                        }
                        Rule::expr => value = Some(self.expr(c)),
                        _ => {}
                    }
                }
                Arg {
                    name,
                    value: value.expect("arg value"),
                    span: sp,
                }
            })
            .collect()
    }

    fn expr(&mut self, p: Pair<Rule>) -> Expr {
        debug_assert_eq!(p.as_rule(), Rule::expr);
        let pairs = p.into_inner();
        self.pratt_expr(pairs)
    }

    fn pratt_expr(&mut self, pairs: Pairs<Rule>) -> Expr {
        // The pratt parser's closures cannot borrow `self` mutably all at once; collect
        // the errors in a cell.
        let me = std::cell::RefCell::new(self);
        let e = pratt()
            .map_primary(|p| me.borrow_mut().postfix_expr(p))
            .map_prefix(|op, rhs| {
                let sp = Span {
                    start: op.as_span().start(),
                    end: rhs.span.end,
                };
                let op = if op.as_rule() == Rule::op_not {
                    UnaryOp::Not
                } else {
                    UnaryOp::Neg
                };
                Expr {
                    kind: ExprKind::Unary {
                        op,
                        expr: Box::new(rhs),
                    },
                    span: sp,
                }
            })
            .map_postfix(|lhs, op| {
                let sp = Span {
                    start: lhs.span.start,
                    end: op.as_span().end(),
                };
                let list = op
                    .into_inner()
                    .filter(|c| c.as_rule() == Rule::expr)
                    .map(|c| me.borrow_mut().expr(c))
                    .collect();
                Expr {
                    kind: ExprKind::In {
                        expr: Box::new(lhs),
                        list,
                    },
                    span: sp,
                }
            })
            .map_infix(|lhs, op, rhs| {
                let op = match op.as_rule() {
                    Rule::op_or => BinaryOp::Or,
                    Rule::op_and => BinaryOp::And,
                    Rule::op_eq => BinaryOp::Eq,
                    Rule::op_ne => BinaryOp::Ne,
                    Rule::op_lt => BinaryOp::Lt,
                    Rule::op_le => BinaryOp::Le,
                    Rule::op_gt => BinaryOp::Gt,
                    Rule::op_ge => BinaryOp::Ge,
                    Rule::op_add => BinaryOp::Add,
                    Rule::op_sub => BinaryOp::Sub,
                    Rule::op_mul => BinaryOp::Mul,
                    Rule::op_div => BinaryOp::Div,
                    Rule::op_rem => BinaryOp::Rem,
                    r => unreachable!("infix {r:?}"),
                };
                let sp = Span {
                    start: lhs.span.start,
                    end: rhs.span.end,
                };
                Expr {
                    kind: ExprKind::Binary {
                        op,
                        lhs: Box::new(lhs),
                        rhs: Box::new(rhs),
                    },
                    span: sp,
                }
            })
            .parse(pairs);
        e
    }

    fn postfix_expr(&mut self, p: Pair<Rule>) -> Expr {
        let mut it = p.into_inner();
        let mut e = self.primary(it.next().expect("primary"));
        for post in it {
            let sp = Span {
                start: e.span.start,
                end: post.as_span().end(),
            };
            match post.as_rule() {
                Rule::index => {
                    let index = self.expr(post.into_inner().next().expect("index"));
                    e = Expr {
                        kind: ExprKind::Index {
                            base: Box::new(e),
                            index: Box::new(index),
                        },
                        span: sp,
                    };
                }
                Rule::member => {
                    let id = self.ident(post.into_inner().next().expect("ident"));
                    match &mut e.kind {
                        ExprKind::Path(p) => {
                            p.push(id);
                            e.span = sp;
                        }
                        _ => {
                            e = Expr {
                                kind: ExprKind::Member {
                                    base: Box::new(e),
                                    field: id,
                                },
                                span: sp,
                            };
                        }
                    }
                }
                r => unreachable!("postfix {r:?}"),
            }
        }
        e
    }

    fn primary(&mut self, p: Pair<Rule>) -> Expr {
        let sp = span(&p);
        let kind = match p.as_rule() {
            Rule::lit_true => ExprKind::Bool(true),
            Rule::lit_false => ExprKind::Bool(false),
            Rule::lit_none => ExprKind::None,
            Rule::string => ExprKind::Str(self.string(p).value),
            Rule::bytes_lit => ExprKind::Bytes(self.bytes(p).value),
            Rule::int_lit => ExprKind::Int(self.int(&p)),
            Rule::list => ExprKind::List(p.into_inner().map(|e| self.expr(e)).collect()),
            Rule::path_expr => ExprKind::Path(p.into_inner().map(|i| self.ident(i)).collect()),
            Rule::call => {
                let mut it = p.into_inner();
                let callee = it
                    .next()
                    .expect("callee")
                    .into_inner()
                    .map(|i| self.ident(i))
                    .collect();
                let args = self.arg_list(it.next().expect("args"));
                ExprKind::Call { callee, args }
            }
            Rule::paren => {
                let mut e = self.expr(p.into_inner().next().expect("expr"));
                e.span = sp;
                return e;
            }
            Rule::if_expr => {
                let mut it = kids(p);
                let cond = self.expr(it.next().expect("cond"));
                let then = self.expr(it.next().expect("then"));
                let o = it.next().expect("else");
                let otherwise = if o.as_rule() == Rule::if_expr {
                    self.primary(o)
                } else {
                    self.expr(o)
                };
                ExprKind::If {
                    cond: Box::new(cond),
                    then: Box::new(then),
                    otherwise: Box::new(otherwise),
                }
            }
            r => unreachable!("primary {r:?}"),
        };
        Expr { kind, span: sp }
    }
}

enum Unescaped {
    Str(String),
    Bytes(Vec<u8>),
}

fn endian(p: Pair<Rule>) -> Endian {
    match p.into_inner().next().expect("endian kw").as_rule() {
        Rule::kw_le | Rule::kw_little => Endian::Little,
        _ => Endian::Big,
    }
}
