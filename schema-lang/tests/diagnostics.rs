//! Semantic and syntax errors: every error is reported at once, with line, column and a
//! rendered caret.

use std::path::Path;

use tensorfmt_schema::ast::{ExprKind, Item, TensorStmt};
use tensorfmt_schema::{check, parse, Diagnostics};

/// Parses and checks one schema text; panics on syntax errors.
fn errors(src: &str) -> Diagnostics {
    let f = parse(Path::new("test.fmt"), src).unwrap_or_else(|d| panic!("syntax: {d:?}"));
    check(&[f])
}

fn messages(src: &str) -> Vec<String> {
    errors(src).0.into_iter().map(|d| d.message).collect()
}

/// Asserts that checking `src` reports exactly one error containing `want`.
#[track_caller]
fn one_error(src: &str, want: &str) {
    let m = messages(src);
    assert!(
        m.len() == 1 && m[0].contains(want),
        "expected one error containing {want:?}, got {m:#?}"
    );
}

const MULTI: &str = r#"format gguf_like {
    engine file;

    table kinds: int -> dtype {
        0 => f32,
        1 => f33,
    }

    layout File little {
        header_len: u32;
        header: Header size header_len;
        count: u64 write = 1;
        count: u64 write = 2;
        data: payload rest;
    }

    tensor from File as f {
        name = source.stem;
        dtype = kinds[0];
        shape = [f.count];
        data = f.data;
    }
}
"#;

const MULTI_RENDERED: &str = r#"error: unknown dtype 'f33'
 --> multi.fmt:6:14
  |
6 |         1 => f33,
  |              ^^^
  = help: known dtypes: f16, bf16, f32, f64, i8, i16, i32, i64, u8, u16, u32, u64, bool, c64, c128, f8e4m3fn, f8e5m2, string

error: field 'header_len' is a length (used by 'header' size) but has no write rule
  --> multi.fmt:10:9
   |
10 |         header_len: u32;
   |         ^^^^^^^^^^
   = help: add `write = size(header)`

error: unknown type 'Header'
  --> multi.fmt:11:17
   |
11 |         header: Header size header_len;
   |                 ^^^^^^
   = help: types are u8..u64, i8..i64, f32, f64, bool, str, bytes, payload, tuple<T>, list<T>, map<K, V>, or a dict, layout, message or enum of this format (or `other.Name` of a format named by `use`)

error: duplicate field 'count' in layout 'File'
  --> multi.fmt:13:9
   |
13 |         count: u64 write = 2;
   |         ^^^^^
   = help: first defined at multi.fmt:12:9

error: could not compile the schema due to 4 previous errors
"#;

#[test]
fn several_errors_reported_at_once() {
    let file = parse(Path::new("multi.fmt"), MULTI).unwrap();
    let d = check(std::slice::from_ref(&file));
    let at: Vec<(usize, usize, &str)> = d
        .iter()
        .map(|d| (d.line, d.column, d.message.as_str()))
        .collect();
    assert_eq!(
        at,
        [
            (6, 14, "unknown dtype 'f33'"),
            (
                10,
                9,
                "field 'header_len' is a length (used by 'header' size) but has no write rule"
            ),
            (11, 17, "unknown type 'Header'"),
            (13, 9, "duplicate field 'count' in layout 'File'"),
        ]
    );
    let rendered = d.with_sources(std::slice::from_ref(&file));
    assert_eq!(rendered, MULTI_RENDERED, "\n{rendered}");
    // One diagnostic on its own.
    assert_eq!(
        d.0[0].render(MULTI),
        MULTI_RENDERED.split("\n\n").next().unwrap().to_string() + "\n"
    );
}

/// A schema with errors of every stage: what the files declare (a duplicate field), names
/// and types of expressions (resolved by the IR lowering), and, in the format where those
/// found nothing, what its writer and engine can mean.
const STAGES: &str = r#"format a {
    engine file;

    layout File little {
        version: u32 check version == "one";
        n: u32;
        n: u64;
        data: payload size nn;
    }

    tensor from File as f {
        name = source.stem;
        dtype = u8;
        shape = [f.n + "x"];
        data = f.data;
    }
}

format b {
    engine file;

    layout File little {
        rank: u8;
        data: payload rest;
    }

    tensor from File as f {
        name = source.stem;
        dtype = u8;
        shape = [1];
        strides = [1];
        data = f.data;
    }
}
"#;

#[test]
fn errors_of_every_stage_reported_at_once() {
    let file = parse(Path::new("stages.fmt"), STAGES).unwrap();
    let d = check(std::slice::from_ref(&file));
    let at: Vec<(usize, &str)> = d.iter().map(|d| (d.line, d.message.as_str())).collect();
    assert_eq!(
        at,
        [
            (5, "`==` compares an integer with a string"),
            (7, "duplicate field 'n' in layout 'File'"),
            (8, "unknown name 'nn'"),
            (14, "`+` cannot add an integer and a string"),
            (
                27,
                "writing needs 'rank', which neither a `write` rule nor the tensor mapping gives"
            ),
            (
                31,
                "a `file` format's tensors are contiguous bytes of its payload: `strides` means \
                 nothing here"
            ),
        ]
    );
}

#[test]
fn syntax_error_has_line_and_column() {
    let src = "format x {\n    engine file\n    extensions [\"x\"];\n}\n";
    let d = parse(Path::new("syntax.fmt"), src).unwrap_err();
    assert_eq!(d.len(), 1);
    let e = &d.0[0];
    assert_eq!((e.line, e.column), (3, 5));
    assert_eq!(e.message, "expected `;` or `(`, found `extensions`");
    assert_eq!(
        e.render(src),
        "error: expected `;` or `(`, found `extensions`\n --> syntax.fmt:3:5\n  |\n3 |     extensions [\"x\"];\n  |     ^\n"
    );
}

#[test]
fn syntax_error_in_expression() {
    let src = "format x {\n  engine file;\n  layout L little {\n    a: u8 check a == 0\n    b: u8 write = 1;\n  }\n}\n";
    let d = parse(Path::new("e.fmt"), src).unwrap_err();
    let e = &d.0[0];
    assert_eq!((e.line, e.column), (5, 5));
    assert_eq!(
        e.message,
        "expected `;`, an operator, a field modifier, `[`, or `.`, found `b`"
    );
}

#[test]
fn reserved_word_gets_a_hint() {
    let src = "format x { engine file; layout L little { a: u8 check write == 1; } }";
    let d = parse(Path::new("e.fmt"), src).unwrap_err();
    assert!(d.0[0]
        .help
        .as_deref()
        .unwrap()
        .contains("`write` is reserved"));
    // After a dot, and as a call, the words are ordinary names.
    parse(
        Path::new("ok.fmt"),
        "format x { engine file; tensor from t.size as x { data = size(x); } }",
    )
    .unwrap();
}

#[test]
fn unterminated_string_and_bad_escape() {
    let d = parse(Path::new("e.fmt"), "format x \"abc\n{}").unwrap_err();
    assert_eq!((d.0[0].line, d.0[0].column), (1, 10));
    let d = parse(Path::new("e.fmt"), "format x \"a\\q\" {}").unwrap_err();
    assert_eq!((d.0[0].line, d.0[0].column), (1, 12));
    assert!(
        d.0[0].message.starts_with("unknown escape `\\q`"),
        "{}",
        d.0[0].message
    );
    assert_eq!(d.0[0].span.end - d.0[0].span.start, 2);
    let d = parse(
        Path::new("e.fmt"),
        "format x { detect magic b\"\\x9\" at 0; }",
    )
    .unwrap_err();
    assert_eq!((d.0[0].line, d.0[0].column), (1, 27));
}

#[test]
fn literals_decode() {
    let f = parse(
        Path::new("l.fmt"),
        r#"//! top
format x "a\tb\u{e9}\x41" {
    /// doc
    detect magic b"\x93\0\\\"Z\n" at 0x1_0;
    table t: int -> dtype { -1 => u8, 0b101 => i8, 1_000 => f32 }
}
"#,
    )
    .unwrap();
    let fmt = &f.formats[0];
    assert_eq!(f.docs, ["top"]);
    assert_eq!(fmt.public_name(), "a\tbéA");
    assert_eq!(fmt.items.len(), 2);
    let (bytes, at) = fmt.magics().next().unwrap();
    assert_eq!(bytes, b"\x93\0\\\"Z\n");
    assert_eq!(at, 16);
    let keys: Vec<String> = fmt
        .tables()
        .next()
        .unwrap()
        .rows
        .iter()
        .map(|r| r.key.to_string())
        .collect();
    assert_eq!(keys, ["-1", "5", "1000"]);
}

#[test]
fn integer_out_of_range() {
    let d = parse(
        Path::new("e.fmt"),
        "format x { message M { a: optional int32 = 4294967296; } }",
    )
    .unwrap_err();
    assert!(d.0[0]
        .message
        .contains("field number 4294967296 is out of range"));
}

#[test]
fn member_after_index_parses_as_a_member() {
    let f = parse(
        Path::new("e.fmt"),
        "format x { engine file; tensor from a as t { data = t.x[0].y.z; } }",
    )
    .unwrap();
    let Some(Item::Tensor(map)) = f.formats[0].items.last() else {
        panic!("no mapping");
    };
    let TensorStmt::Assign { value, .. } = &map.stmts[0] else {
        panic!("not an assignment");
    };
    let ExprKind::Member { base, field } = &value.kind else {
        panic!("not a member: {value:?}");
    };
    assert_eq!(field.name, "z");
    assert!(matches!(&base.kind, ExprKind::Member { field, .. } if field.name == "y"));
    assert_eq!(value.to_string(), "t.x[0].y.z");
}

#[test]
fn table_checks() {
    one_error(
        "format x { engine file; table t: str -> dtype { 1 => f32 } }",
        "table 't' has string keys, but this key is an integer",
    );
    one_error(
        "format x { engine file; table t: int -> dtype { \"a\" => f32 } }",
        "table 't' has integer keys",
    );
    one_error(
        "format x { engine file; table t: int -> dtype { 1 => f32, 1 => f64 } }",
        "duplicate key 1 in table 't'",
    );
}

#[test]
fn engine_and_names() {
    one_error("format x { engine tar; }", "unknown engine 'tar'");
    one_error(
        "format x { extensions [\"x\"]; }",
        "format 'x' has no engine",
    );
    one_error(
        "format x { engine protobuf(root = Nope); }",
        "the root of engine 'protobuf' must be a message",
    );
    one_error(
        "format x { engine kv(backend = redis); }",
        "unknown kv backend 'redis'",
    );
    one_error(
        "format x { engine file; dict A { a: str; } layout A little { b: bytes rest; } }",
        "duplicate name 'A' in format 'x' (a dict and a layout)",
    );
    one_error(
        "format x { engine file; } format x { engine file; }",
        "duplicate format 'x'",
    );
    one_error(
        "use nope; format x { engine file; }",
        "unknown format 'nope' in `use`",
    );
    one_error(
        "format x { engine file; dict D { a: str; a: u8; } }",
        "duplicate key 'a' in dict 'D'",
    );
    one_error(
        "format x { engine file; dict D { a: tuple; } }",
        "type 'tuple' takes one type argument",
    );
}

#[test]
fn layout_order_and_types() {
    one_error(
        "format x { engine file; layout L little { n: u32 write = len(b); a: bytes size len(b); b: bytes rest; } }",
        "`size` of 'a' refers to 'b', which comes later in the layout",
    );
    // A check may use the field itself and earlier fields.
    let m = messages(
        "format x { engine file; layout L little { n: u32 write = 1; a: bytes size n check a == b\"x\" check n > 0; } }",
    );
    assert!(m.is_empty(), "{m:?}");
    one_error(
        "format x { engine file; layout L little { n: u32 check n == 1; a: bytes size n == 1; } }",
        "`size` needs an integer, but this is a boolean",
    );
    one_error(
        "format x { engine file; layout L little { n: u32 write = 0 check n + 1; } }",
        "`check` needs a condition (a boolean), but this is an integer",
    );
    one_error(
        "format x { engine file; layout L little { m: u8 check m == 1; n: if m == 1 { u16 } else { bytes } write = 0; } }",
        "a conditional type chooses between integer types, found 'bytes'",
    );
    one_error(
        "format x { engine file; layout L little { n: u32 write = 0 check n == \"a\"; } }",
        "`==` compares an integer with a string",
    );
    one_error(
        "format x { engine file; layout L little { n: u32 write = 0; a: bytes rest; b: bytes size n; } }",
        "`rest` takes every remaining byte, so 'a' must be the last field",
    );
    one_error(
        "format x { engine file; layout L little { n: u32 write = nope; } }",
        "unknown name 'nope'",
    );
    one_error(
        "format x { engine file; layout L little { n: u32 write = frob(1); } }",
        "unknown function 'frob'",
    );
    one_error(
        "format x { engine file; layout L little { n: u32 write = align(1); } }",
        "`align` takes 2 arguments, found 1",
    );
}

#[test]
fn write_rules() {
    one_error(
        "format x { engine file; layout L little { n: u32; v: u8 repeat count(n) write = 0; } }",
        "field 'n' is a count (used by 'v' count) but has no write rule",
    );
    // Any other number may come from the tensor mapping; the write plan reports one that
    // neither a rule nor the mapping gives.
    let m = messages(
        "format x { engine file; table t: int -> dtype { 1 => f32 }
         layout File little { n: u32; k: u8; c: u32; data: payload rest; }
         tensor from File as f { name = source.stem; dtype = t[f.k]; shape = [f.c]; data = f.data; } }",
    );
    assert_eq!(
        m,
        ["writing needs 'n', which neither a `write` rule nor the tensor mapping gives"]
    );
    assert!(messages(
        "format x { engine file; table t: int -> dtype { 1 => f32 }
         layout File little { k: u8; c: u32; data: payload rest; }
         tensor from File as f { name = source.stem; dtype = t[f.k]; shape = [f.c]; data = f.data; } }"
    )
    .is_empty());
    // An implied constant is a write rule.
    assert!(
        messages("format x { engine file; layout L little { n: u32 check 7 == n; } }").is_empty()
    );
}

#[test]
fn codecs_and_pad() {
    one_error(
        "format x { engine file; layout L little { a: bytes codec yaml rest; } }",
        "unknown codec 'yaml'",
    );
    one_error(
        "format x { engine file; layout L little { a: bytes codec pickle(Nope) rest; } }",
        "unknown pickle 'Nope'",
    );
    one_error(
        "format x { engine file; dict D { a: str; } layout L little { a: bytes codec pickle(D) rest; } }",
        "'D' is a dict, not a pickle",
    );
    one_error(
        "format x { engine file; layout L little { n: u32 write = size(a); a: bytes size n pad(fill = b\" \"); } }",
        "`pad` needs `align = N`",
    );
    one_error(
        "format x { engine file; layout L little { n: u32 write = size(a); a: bytes size n pad(align = 8, fill = b\"ab\"); } }",
        "`pad` fill is one byte",
    );
    one_error(
        "format x { engine file; layout L little { n: u32 write = size(a); a: bytes size n pad(align = 8, most = 2); } }",
        "unknown `pad` argument 'most'",
    );
    one_error(
        "format x { engine file; layout L little { n: u32 write = size(a); a: bytes size n pad(align = 8, min = \"2\"); } }",
        "`pad` min needs an integer, but this is a string",
    );
    one_error(
        "format x { engine file; layout L little { n: u32 write = size(a); a: bytes size n pad(align = 8, min = -1); } }",
        "`pad` min cannot be negative",
    );
    // `spare` is a write-side expression over the record itself, with the list builtins.
    let ok = "format x { engine file; dict D { shape: tuple<u64>; f: bool; } layout L little { \
              n: u32 write = size(d); \
              d: D size n codec pydict(encoding = \"utf8\", spare = if len(d.shape) == 0 { 0 } \
                 else if d.f { 21 - digits(last(d.shape)) } else { 21 - digits(first(d.shape)) }) \
                 pad(align = 64, fill = b\" \", last = b\"\\n\", min = 2); } }";
    assert_eq!(messages(ok), Vec::<String>::new());
    one_error(
        "format x { engine file; dict D { a: str; } layout L little { n: u32 write = size(d); d: D size n codec pydict(spare = d.a); } }",
        "the `spare` argument needs an integer, but this is a string",
    );
    one_error(
        "format x { engine file; dict D { a: str; } layout L little { n: u32 write = size(d); d: D size n codec pydict(spaces = 1); } }",
        "codec 'pydict' takes the named arguments `encoding` and `spare`",
    );
    one_error(
        "format x { engine file; dict D { a: str; } layout L little { n: u32 write = digits(first(1)); d: D size n codec pydict; } }",
        "`first` takes a list, but this is an integer",
    );
    one_error(
        "format x { engine file; dict D { a: str; } layout L little { n: u32 write = digits(d.a); d: D size n codec pydict; } }",
        "`digits` needs an integer, but this is a string",
    );
    one_error(
        "format x { engine file; layout L little { n: u32 write = last([1], [2]); } }",
        "`last` takes 1 argument, found 2",
    );
}

#[test]
fn messages_and_enums() {
    let m = messages(
        "format x { engine protobuf(root = M); message M { a: optional int32 = 0; b: optional int32 = 2; b: optional Nope = 2; } enum E { A = 0; A = 1; B = 1; } }",
    );
    assert_eq!(
        m,
        [
            "invalid field number 0 for 'a'",
            "duplicate name 'b' in message 'M'",
            "field number 2 used twice in message 'M'",
            "unknown type 'Nope'",
            "duplicate value 'A' in enum 'E'",
            "'B' has the number 1 of 'A' in enum 'E'",
        ]
    );
}

#[test]
fn entries() {
    one_error(
        "format x { engine zip; entry e \"{a}\" { colour red; } }",
        "unknown entry property 'colour'",
    );
    one_error(
        "format x { engine zip; entry e \"{a}\" { compression [stored, zstd]; } }",
        "unknown compression 'zstd'",
    );
    one_error(
        "format x { engine zip; entry e \"{a}\" { layout Nope; } }",
        "unknown layout 'Nope'",
    );
    one_error(
        "format x { engine zip; entry e \"{a}\" { repeated = 1; } }",
        "`repeated` is a flag and takes no value",
    );
    one_error(
        "format x { engine zip; entry e \"{a}\" { layout npy.File; } }",
        "unknown format 'npy'",
    );
    one_error(
        "format x { engine zip; entry e \"{a}/v\" { text; preferred \"{b}/.v\"; } }",
        "`preferred` names the entry with the captures of `{a}/v`",
    );
    one_error(
        "format x { engine zip; entry e \"{a}/v\" { text; preferred 3; } }",
        "`preferred` is a member name pattern",
    );
    assert!(messages(
        "format x { engine zip; entry e \"{a}/v\" { text; preferred \"{a}/.data/v\"; } }"
    )
    .is_empty());
}

#[test]
fn tensor_maps() {
    one_error(
        "format x { engine file; layout L little { d: payload rest; } tensor from L as f { name = \"a\"; dtype = nope[1]; shape = []; data = f.d; } }",
        "unknown table 'nope'",
    );
    one_error(
        "format x { engine file; layout L little { d: payload rest; } tensor from L as f { name = \"a\"; shape = []; data = f.d; } }",
        "tensor mapping does not set 'dtype'",
    );
    let m = messages(
        "format x { engine file; table t: str -> dtype { \"a\" => u8 } layout L little { d: payload rest; } tensor from L as f { name = \"a\"; dtype = t[1]; shape = []; data = f.e; colour = 1; name = \"b\"; } }",
    );
    assert_eq!(
        m,
        [
            "table 't' has string keys, but this key is an integer",
            "layout 'L' has no field 'e'",
            "unknown tensor property 'colour'",
            "'name' is assigned twice",
        ]
    );
    one_error(
        "format x { engine file; dict D { a: str; } tensor from D as f { name = \"a\"; dtype = 1; shape = []; data = f; } }",
        "a tensor mapping iterates a layout, an entry or a path into one; 'D' is a dict",
    );
}

#[test]
fn cross_format_references() {
    let a = parse(
        Path::new("a.fmt"),
        "format a { engine file; table t: str -> dtype { \"x\" => u8 } layout File little { d: payload rest; } tensor from File as f { name = \"n\"; dtype = t[\"x\"]; shape = []; data = f.d; } }",
    )
    .unwrap();
    let b = parse(
        Path::new("b.fmt"),
        "format b { engine zip; entry m \"{name}.a\" { layout a.File; } tensor from m as m { include a.tensor(m.content); name = m.name; } }
         format c { engine file; layout C little { d: payload rest; } tensor from C as f { name = \"n\"; dtype = a.t[\"x\"]; shape = []; data = f.d; } }",
    )
    .unwrap();
    let d = check(&[a.clone(), b.clone()]);
    let m: Vec<&str> = d.iter().map(|d| d.message.as_str()).collect();
    assert_eq!(
        m,
        [
            "format 'a' is not imported",
            "format 'a' is not imported",
            "format 'a' is not imported",
        ]
    );
    let b2 = parse(Path::new("b.fmt"), &format!("use a;\n{}", b.source)).unwrap();
    assert!(check(&[a, b2]).is_empty());
}

#[test]
fn pickle_write_rules() {
    let base = |entry_write: &str, tensor_write: &str| {
        format!(
            "format x {{ engine zip; table T: str -> dtype {{ \"m.F\" => f32 }}
             pickle P {{ global \"m.D\" => dict; global \"m.F\" => class;
               global \"m.r\" => tensor(storage, size); persistent storage(tag, key); }}
             entry pickle \"{{p}}/data.pkl\" {{ codec pickle(P); write_name = \"a/data.pkl\"; write = {entry_write}; }}
             entry storage \"{{p}}/data/{{key}}\" {{ repeated; }}
             tensor from pickle.content.tensors as t {{ name = t.path; dtype = T[t.storage.key];
               shape = t.size; data = storage(key = t.storage.key); write = {tensor_write}; }} }}"
        )
    };
    let good = "m.r(storage(tag = \"s\", key = str(index)), shape)";
    assert_eq!(messages(&base("m.D()", good)), Vec::<String>::new());
    assert_eq!(
        messages(&base(
            "m.D()",
            "if key_of(T, dtype) != none { m.r(storage(tag = global(key_of(T, dtype)), key = str(index)), shape) } else { m.r(m.F, strides) }"
        )),
        Vec::<String>::new()
    );
    one_error(
        &base("m.Nope()", good),
        "'m.Nope' is not a declared pickle global",
    );
    one_error(
        &base("m.D()", "m.r(storage(key = \"0\", tag = \"s\"), shape)"),
        "a `storage` persistent id names its items in order",
    );
    one_error(
        &base("m.D()", "m.r(storage(tag = \"s\", key = \"0\"), sizes)"),
        "'sizes' is not a declared pickle global",
    );
    one_error(
        &base("m.D()", "m.F(1)"),
        "'m.F' is declared `class`: it cannot be called",
    );
    one_error(&base("m.D()", "m.r(1)"), "'m.r' takes 2 arguments, found 1");
}

/// What the typed IR cannot resolve in a schema that passes every other check is reported
/// by the checker, at its span and with a help line.
#[test]
fn lowering_gaps_are_reported() {
    let base = |stmt: &str| {
        format!(
            r#"format f {{
    engine file;
    table t: str -> dtype {{ "a" => f32 }}
    dict H {{ descr: str; shape: tuple<u64>; }}
    layout File little {{
        n: u32 write = size(h);
        h: H size n codec json;
        data: payload rest;
    }}
    tensor from File as x {{
        name = source.stem;
        dtype = t[x.h.descr];
        shape = x.h.shape;
        data = x.data;
        {stmt}
    }}
}}
"#
        )
    };
    assert_eq!(messages(&base("order = c;")), Vec::<String>::new());
    let cases = [
        (
            "order = if x.h.descr == \"a\" { c } else { le };",
            "the branches of this `if` have different types: order and byte_order",
            "if x.h.descr",
        ),
        (
            "byte_order = if x.h.descr[0] == \"a\" { le } else { be };",
            "cannot index str with int",
            "x.h.descr[0]",
        ),
        (
            "strides = [x.h.shape[0].y];",
            "a value of type u64 has no member 'y'",
            "y",
        ),
        (
            "byte_order = if segment == none { le } else { be };",
            "the mapped `segment` cannot be used in an expression",
            "segment",
        ),
    ];
    for (stmt, want, at) in cases {
        let src = base(stmt);
        let d = errors(&src);
        assert_eq!(d.len(), 1, "{stmt}: {d:?}");
        assert_eq!(d.0[0].message, want);
        assert!(d.0[0].help.is_some(), "{stmt}: no help");
        assert_eq!(&src[d.0[0].span.start..d.0[0].span.start + at.len()], at);
    }

    // `.value` of an entry that has none, and an include whose value no mapping maps.
    let zip = |stmts: &str| {
        format!(
            r#"format a {{
    engine file;
    layout File little {{ data: payload rest; }}
    tensor from File as f {{ name = source.stem; dtype = f32; shape = [1]; data = f.data; }}
}}
format z {{
    engine zip;
    entry m "{{k}}.bin" {{ repeated; layout a.File; }}
    tensor from m as e {{ {stmts} }}
}}
"#
        )
    };
    assert_eq!(
        messages(&zip("include a.tensor(e.content); name = e.k;")),
        Vec::<String>::new()
    );
    one_error(
        &zip("include a.tensor(e.content); name = e.value;"),
        "entry 'm' has no `value`",
    );
    one_error(
        &zip("include a.tensor(e.k);"),
        "no tensor mapping of format 'a' maps str",
    );
}
