//! Key facts of the parsed `npy.fmt`, the schema the code generator compiles today.

use std::path::PathBuf;

use tensorfmt_schema::ast::*;

fn npy() -> SchemaFile {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../formats/fmt/npy.fmt");
    let src = std::fs::read_to_string(&p).unwrap();
    tensorfmt_schema::parse(&p, &src).unwrap()
}

fn modifiers(f: &Field) -> Vec<String> {
    f.modifiers
        .iter()
        .map(|m| match m {
            Modifier::Check(e) => format!("check {e}"),
            Modifier::Write(e) => format!("write = {e}"),
            Modifier::Size(e) => format!("size {e}"),
            Modifier::Codec { name, args, .. } => {
                let a: Vec<String> = args.iter().map(|a| a.to_string()).collect();
                format!("codec {name}({})", a.join(", "))
            }
            Modifier::Pad { args, .. } => {
                let a: Vec<String> = args.iter().map(|a| a.to_string()).collect();
                format!("pad({})", a.join(", "))
            }
            Modifier::Rest(_) => "rest".into(),
            Modifier::Repeat(Repeat::UntilEof(_)) => "repeat until_eof".into(),
            Modifier::Repeat(Repeat::Count(e)) => format!("repeat count({e})"),
            Modifier::Align(e) => format!("align {e}"),
            Modifier::At(e) => format!("at {e}"),
        })
        .collect()
}

#[test]
fn npy_file_facts() {
    let file = npy();
    assert_eq!(file.docs.len(), 2);
    assert!(file.docs[0].starts_with("NumPy `.npy`: one array per file"));
    assert!(file.uses.is_empty());
    assert_eq!(file.formats.len(), 1);
    let f = &file.formats[0];
    assert_eq!(f.name.name, "npy");
    assert_eq!(f.public_name(), "npy");
    assert_eq!(f.engine_kind(), "file");
    assert_eq!(
        f.extensions().map(|s| s.value.as_str()).collect::<Vec<_>>(),
        ["npy"]
    );
    assert_eq!(f.magics().collect::<Vec<_>>(), [(&b"\x93NUMPY"[..], 0u64)]);
    assert!(f.docs[0].starts_with("NumPy's `.npy` file"));

    // The descr table.
    let t = f.table("descr").unwrap();
    assert_eq!(t.key_kind, KeyKind::Str);
    assert_eq!(t.rows.len(), 30);
    assert_eq!(t.rows[0].key, TableKey::Str("|b1".into()));
    assert_eq!(t.rows[0].dtype.name, "bool");
    assert_eq!(t.rows[0].endian, None);
    assert_eq!(t.rows[3].key, TableKey::Str("<u2".into()));
    assert_eq!(t.rows[3].endian, Some(Endian::Little));
    assert_eq!(t.rows[4].endian, Some(Endian::Big));
    let r = t.reverse("f32", Some(Endian::Big)).unwrap();
    assert_eq!(r.key, TableKey::Str(">f4".into()));
    let r = t.reverse("u8", Some(Endian::Big)).unwrap();
    assert_eq!(r.key, TableKey::Str("|u1".into()));

    // The header dict.
    let d = f.dict("Header").unwrap();
    let keys: Vec<(&str, String)> = d
        .fields
        .iter()
        .map(|k| (k.key.as_str(), k.ty.to_string()))
        .collect();
    assert_eq!(
        keys,
        [
            ("descr", "str".to_string()),
            ("fortran_order", "bool".to_string()),
            ("shape", "tuple<u64>".to_string())
        ]
    );
    assert!(d.fields.iter().all(|k| !k.optional && !k.quoted));
    assert_eq!(
        d.fields[2].docs,
        ["The array's shape; `()` for a 0-d array."]
    );

    // The layout.
    let l = f.layout("File").unwrap();
    assert_eq!(l.endian, Endian::Little);
    let names: Vec<&str> = l.fields.iter().map(|x| x.name.name.as_str()).collect();
    assert_eq!(
        names,
        ["magic", "major", "minor", "header_len", "header", "data"]
    );

    let magic = l.field("magic").unwrap();
    assert!(matches!(&magic.ty, FieldType::Magic(b) if b.value == b"\x93NUMPY"));

    let major = l.field("major").unwrap();
    assert!(matches!(&major.ty, FieldType::Named(t) if t.is("u8")));
    assert_eq!(
        modifiers(major),
        [
            "check major in [1, 2, 3]",
            "write = if !latin1(header) { 3 } else if align(10 + len(header) + 2, 64) - 10 <= 65535 { 1 } else { 2 }",
        ]
    );
    assert!(major.docs[0].starts_with("Major version"));

    let minor = l.field("minor").unwrap();
    assert_eq!(modifiers(minor), ["check minor == 0"]);
    assert_eq!(minor.implied_constant().and_then(|e| e.as_int()), Some(0));
    assert!(minor.write_rule().is_none());

    let hl = l.field("header_len").unwrap();
    match &hl.ty {
        FieldType::Cond {
            cond,
            then,
            otherwise,
            ..
        } => {
            assert_eq!(cond.to_string(), "major == 1");
            assert!(then.is("u16"));
            assert!(otherwise.is("u32"));
        }
        other => panic!("header_len type {other:?}"),
    }
    assert_eq!(modifiers(hl), ["write = size(header)"]);
    assert!(hl.write_rule().unwrap().calls_with("size", "header"));

    let header = l.field("header").unwrap();
    assert!(matches!(&header.ty, FieldType::Named(t) if t.is("Header")));
    assert_eq!(
        modifiers(header),
        [
            "size header_len",
            "codec pydict(encoding = if major == 3 { \"utf8\" } else { \"latin1\" }, trailing_comma = true, spare = if len(header.shape) == 0 { 0 } else if header.fortran_order { 21 - digits(last(header.shape)) } else { 21 - digits(first(header.shape)) })",
            "pad(align = 64, fill = b\" \", last = b\"\\n\", min = 2)",
        ]
    );
    assert_eq!(header.codec().unwrap().0.name, "pydict");
    let pad = header.pad_args().unwrap();
    assert_eq!(
        tensorfmt_schema::find_arg(pad, "align")
            .unwrap()
            .value
            .as_int(),
        Some(64)
    );
    assert_eq!(
        tensorfmt_schema::find_arg(pad, "last").unwrap().value.kind,
        ExprKind::Bytes(b"\n".to_vec())
    );
    assert_eq!(
        tensorfmt_schema::find_arg(pad, "min")
            .unwrap()
            .value
            .as_int(),
        Some(2)
    );

    let data = l.field("data").unwrap();
    assert!(matches!(&data.ty, FieldType::Named(t) if t.is("payload")));
    assert!(data.is_rest());

    // The tensor mapping.
    let t = f.tensors().next().unwrap();
    assert_eq!(t.source.to_string(), "File");
    assert_eq!(t.binding.name, "f");
    assert!(t.filter.is_none());
    let stmts: Vec<String> = t
        .stmts
        .iter()
        .map(|s| match s {
            TensorStmt::Assign { key, value, .. } => format!("{key} = {value}"),
            TensorStmt::Include(e) => format!("include {e}"),
        })
        .collect();
    assert_eq!(
        stmts,
        [
            "name = source.stem",
            "dtype = descr[f.header.descr]",
            "shape = f.header.shape",
            "order = if f.header.fortran_order { fortran } else { c }",
            "data = f.data",
        ]
    );
}

#[test]
fn spans_are_byte_offsets() {
    let file = npy();
    let l = file.formats[0].layout("File").unwrap();
    let hl = l.field("header_len").unwrap();
    assert_eq!(
        &file.source[hl.name.span.start..hl.name.span.end],
        "header_len"
    );
    let w = hl.write_rule().unwrap();
    assert_eq!(&file.source[w.span.start..w.span.end], "size(header)");
    assert!(file.source[hl.span.start..hl.span.end].starts_with("header_len: if major"));
    assert!(file.source[hl.span.start..hl.span.end].ends_with(';'));
}

#[test]
fn npz_facts() {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../formats/fmt/npz.fmt");
    let src = std::fs::read_to_string(&p).unwrap();
    let file = tensorfmt_schema::parse(&p, &src).unwrap();
    assert_eq!(file.uses[0].name, "npy");
    let f = &file.formats[0];
    assert_eq!(f.engine_kind(), "zip");
    let det: Vec<_> = f.detects().collect();
    assert_eq!(
        det.len(),
        1,
        "the zip engine recognizes the archive; the rule is on members"
    );
    assert!(
        matches!(det[0], Detect::Entries { all: true, pattern, .. } if pattern.value == "{name}.npy")
    );
    let e = f.entry("member").unwrap();
    assert_eq!(e.captures(), ["name"]);
    assert!(e.is_repeated() && !e.is_optional());
    assert_eq!(e.prop_value("layout").unwrap().to_string(), "npy.File");
    assert_eq!(e.compressions(), ["stored", "deflate"]);
    assert_eq!(e.prop_value("align").unwrap().as_int(), Some(64));
    assert_eq!(e.prop("align").unwrap().docs.len(), 2);
    let t = f.tensors().next().unwrap();
    assert_eq!(
        t.includes().next().unwrap().to_string(),
        "npy.tensor(m.content)"
    );
    assert_eq!(t.assignment("name").unwrap().to_string(), "m.name");
}
