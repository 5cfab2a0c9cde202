//! The typed IR: it builds for every built-in schema and every accepted example of the
//! language reference, with nothing left untyped, and resolves what matters.

use std::path::{Path, PathBuf};

use tensorfmt_schema::ast::BinaryOp;
use tensorfmt_schema::ir::{
    self, Builtin, Const, Content, Engine, Expr, ExprKind, FieldKind, IndexKind, Ir, MappingStmt,
    Member, TensorKey, Type,
};
use tensorfmt_schema::{check, load, parse, Schema};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The compiled schemas, as `formats/build.rs` loads them.
fn builtin() -> Schema {
    let names = [
        "npy",
        "npz",
        "pytorch",
        "pytorch_legacy",
        "torchscript",
        "onnx",
        "caffe2",
        "minidb",
    ];
    let files: Vec<PathBuf> = names
        .iter()
        .map(|n| root().join(format!("formats/fmt/{n}.fmt")))
        .collect();
    load(&files).unwrap_or_else(|d| panic!("{d}"))
}

/// Asserts that nothing in the IR is left unresolved.
#[track_caller]
fn assert_complete(ir: &Ir) {
    for e in ir.exprs() {
        assert!(
            !matches!(e.kind, ExprKind::Error) && !e.ty.has_error(),
            "untyped expression at {:?}: {e:?}",
            e.span
        );
    }
    for f in &ir.formats {
        assert_ne!(f.engine, Engine::Error, "format {}", f.name);
    }
    for l in &ir.layouts {
        for f in &l.fields {
            assert!(!f.ty.has_error(), "{}.{}", l.name, f.name);
        }
    }
    for d in &ir.dicts {
        for k in &d.keys {
            assert!(!k.ty.has_error(), "{}.{}", d.name, k.key);
        }
    }
    for m in &ir.messages {
        for f in &m.fields {
            assert!(!f.ty.has_error(), "{}.{}", m.path, f.name);
        }
    }
    for e in &ir.entries {
        assert!(!e.content_ty.has_error(), "entry {}", e.name);
    }
    for m in &ir.mappings {
        assert!(!m.binding_ty.has_error(), "mapping {}", m.binding);
    }
}

fn field<'a>(ir: &'a Ir, fmt: &str, layout: &str, name: &str) -> &'a ir::Field {
    let f = ir.format_named(fmt).unwrap();
    let l = ir.layout_named(f, layout).unwrap();
    ir.layout(l).fields.iter().find(|x| x.name == name).unwrap()
}

#[test]
fn builtin_formats_lower_completely() {
    let ir = builtin().ir();
    assert_eq!(ir.formats.len(), 9);
    assert_complete(&ir);
}

#[test]
fn safetensors_design_lowers_completely() {
    let s = load(&[root().join("docs/formats/safetensors.fmt")]).unwrap();
    let ir = s.ir();
    assert_complete(&ir);
    // `tensor from File.header.rest as t`: t is an item of map<str, TensorEntry>.
    let m = &ir.mappings[0];
    match &m.binding_ty {
        Type::MapItem(k, v) => {
            assert_eq!(**k, Type::Str);
            assert!(matches!(**v, Type::Dict(d) if ir.dict(d).name == "TensorEntry"));
        }
        t => panic!("{t:?}"),
    }
    let data = m.key(TensorKey::Data).unwrap();
    assert!(matches!(
        data.kind,
        ExprKind::Call {
            func: Builtin::Slice,
            ..
        }
    ));
    assert_eq!(data.ty, Type::Payload);
}

#[test]
fn npy_rules_are_typed_and_resolved() {
    let ir = builtin().ir();
    let npy = ir.format_named("npy").unwrap();
    let file = ir.layout_named(npy, "File").unwrap();

    // header_len: if major == 1 { u16 } else { u32 } write = size(header);
    let hl = field(&ir, "npy", "File", "header_len");
    assert!(matches!(&hl.kind, FieldKind::Cond { cond, .. } if cond.ty == Type::Bool));
    assert!(hl.ty.is_int());
    let w = hl.write.as_ref().unwrap();
    assert!(w.ty.is_int());
    match &w.kind {
        ExprKind::Call {
            func: Builtin::Size,
            args,
        } => {
            let header = ir
                .layout(file)
                .fields
                .iter()
                .position(|f| f.name == "header");
            assert!(
                matches!(args[0].value.kind, ExprKind::Field(l, f) if l == file && Some(f.index()) == header)
            );
            assert!(matches!(args[0].value.ty, Type::Dict(d) if ir.dict(d).name == "Header"));
        }
        k => panic!("{k:?}"),
    }

    // minor: u8 check minor == 0;  implied constant 0.
    let minor = field(&ir, "npy", "File", "minor");
    assert_eq!(minor.implied, Some(Const::Int(0)));
    assert!(matches!(
        minor.checks[0].kind,
        ExprKind::Binary {
            op: BinaryOp::Eq,
            ..
        }
    ));

    // The codec's arguments are typed: encoding a string, spare an integer.
    let header = field(&ir, "npy", "File", "header");
    match &header.codec {
        Some(ir::Codec::PyDict {
            encoding: Some(e),
            spare: Some(s),
            trailing_comma: true,
        }) => {
            assert_eq!(e.ty, Type::Str);
            assert!(s.ty.is_int());
        }
        c => panic!("{c:?}"),
    }
    assert_eq!(header.pad.as_ref().unwrap().last, Some(b'\n'));

    // dtype = descr[f.header.descr]: a table lookup typed dtype.
    let m = ir.mapping(ir.format(npy).mappings[0]);
    assert_eq!(m.binding_ty, Type::Layout(file));
    let dtype = m.key(TensorKey::Dtype).unwrap();
    assert_eq!(dtype.ty, Type::Dtype);
    match &dtype.kind {
        ExprKind::Lookup { table, key } => {
            assert_eq!(ir.table(*table).name, "descr");
            assert_eq!(key.ty, Type::Str);
            assert!(matches!(
                key.kind,
                ExprKind::Member {
                    member: Member::DictKey(..),
                    ..
                }
            ));
        }
        k => panic!("{k:?}"),
    }
    assert_eq!(m.key(TensorKey::Order).unwrap().ty, Type::Order);
    assert_eq!(m.key(TensorKey::Name).unwrap().ty, Type::Str);
    assert_eq!(m.key(TensorKey::Data).unwrap().ty, Type::Payload);
    let shape = m.key(TensorKey::Shape).unwrap();
    assert!(matches!(&shape.ty, Type::Tuple(t) if t.is_int()));
}

#[test]
fn npz_resolves_across_files() {
    let ir = builtin().ir();
    let npy = ir.format_named("npy").unwrap();
    let npz = ir.format_named("npz").unwrap();
    let npy_file = ir.layout_named(npy, "File").unwrap();
    let member = ir.entry(ir.format(npz).entries[0]);
    assert_eq!(member.content, Content::Layout(npy_file));
    assert!(member.repeated);
    let m = ir.mapping(ir.format(npz).mappings[0]);
    match &m.stmts[0] {
        MappingStmt::Include {
            format,
            mapping,
            arg,
        } => {
            assert_eq!(*format, npy);
            assert_eq!(*mapping, ir.format(npy).mappings[0]);
            assert_eq!(arg.ty, Type::Layout(npy_file));
        }
        s => panic!("{s:?}"),
    }
    assert_eq!(ir.format(npz).uses, vec![npy]);
    // Docs are carried: the entry's, its properties', the field's.
    assert!(member.docs[0].contains("One member per array"));
    assert!(member
        .prop_docs
        .iter()
        .any(|(p, d)| p == "compression" && d[0].contains("stored")));
    assert!(field(&ir, "npy", "File", "major").docs[0].contains("Major version"));
    assert!(ir.format(npy).docs[0].contains("NumPy"));
}

#[test]
fn protobuf_and_kv_formats_resolve() {
    let ir = builtin().ir();
    let onnx = ir.format_named("onnx").unwrap();
    let Engine::Protobuf { root } = ir.format(onnx).engine else {
        panic!()
    };
    assert_eq!(ir.message(root).name, "ModelProto");
    // ir_version [write = 10], opset_import [write = [OperatorSetIdProto(..)]].
    let mp = ir.message(root);
    let opset = &mp.fields[mp.field_index("opset_import").unwrap()];
    let w = opset.write.as_ref().unwrap();
    assert!(
        matches!(&w.ty, Type::List(t) if matches!(**t, Type::Message(m) if ir.message(m).name == "OperatorSetIdProto"))
    );
    // t.external_data["location"]: a key-value lookup typed str.
    let m = ir.mapping(ir.format(onnx).mappings[0]);
    let mut kv = 0;
    let mut enum_values = 0;
    m.key(TensorKey::Data).unwrap().walk(&mut |e: &Expr| {
        if let ExprKind::Index {
            how: IndexKind::KeyValue { .. },
            ..
        } = e.kind
        {
            assert_eq!(e.ty, Type::Str);
            kv += 1;
        }
        if let ExprKind::EnumValue(en, _) = e.kind {
            assert_eq!(ir.enum_(en).name, "DataLocation");
            enum_values += 1;
        }
    });
    assert_eq!((kv, enum_values), (3, 1));
    // The second mapping includes the first: n.attribute["value"].t is a TensorProto.
    let consts = ir.mapping(ir.format(onnx).mappings[1]);
    assert!(
        matches!(&consts.stmts[0], MappingStmt::Include { mapping, .. } if *mapping == ir.format(onnx).mappings[0])
    );

    // caffe2: kv engines and `schema = F`.
    let lmdb = ir.format_named("caffe2_lmdb").unwrap();
    let leveldb = ir.format_named("caffe2_leveldb").unwrap();
    let minidb = ir.format_named("caffe2_minidb").unwrap();
    assert!(
        matches!(ir.format(leveldb).engine, Engine::Kv { backend: ir::KvBackend::Leveldb, schema: Some(s), .. } if s == lmdb)
    );
    assert!(
        matches!(ir.format(minidb).engine, Engine::Kv { backend: ir::KvBackend::Records, schema: Some(s), .. } if s == lmdb)
    );
    let blob = ir
        .format(lmdb)
        .entries
        .iter()
        .map(|&e| ir.entry(e))
        .find(|e| e.name == "blob")
        .unwrap();
    assert!(
        matches!(&blob.content, Content::Value(Type::Message(m)) if ir.message(*m).name == "BlobProto")
    );
    assert!(blob.split.as_ref().unwrap().ty.is_int());
    let w = ir
        .mapping(ir.format(lmdb).mappings[0])
        .write
        .as_ref()
        .unwrap();
    assert!(matches!(w.ty, Type::Message(m) if ir.message(m).name == "BlobProto"));
}

#[test]
fn pickle_formats_resolve() {
    let ir = builtin().ir();
    let pt = ir.format_named("pytorch").unwrap();
    let m = ir.mapping(ir.format(pt).mappings[0]);
    assert!(matches!(&m.binding_ty, Type::PickleCall(_, k) if k == "tensor"));
    // data = slice(storage(key = t.storage.key), ...): an entry lookup.
    let data = m.key(TensorKey::Data).unwrap();
    let ExprKind::Call {
        func: Builtin::Slice,
        args,
    } = &data.kind
    else {
        panic!("{data:?}")
    };
    assert!(matches!(args[0].value.kind, ExprKind::EntryLookup { .. }));
    // The write rule builds a pickle object; `storage(..)` there is the persistent id.
    let w = m.write.as_ref().unwrap();
    assert!(matches!(w.ty, Type::PickleObject(_)));
    let mut persistent = 0;
    w.walk(&mut |e: &Expr| {
        if let ExprKind::PersistentId { items, .. } = &e.kind {
            assert_eq!(items.len(), 5);
            persistent += 1;
        }
    });
    assert_eq!(persistent, 2);
    // The pickle entry's root object.
    let pickle = ir
        .format(pt)
        .entries
        .iter()
        .map(|&e| ir.entry(e))
        .find(|e| e.name == "pickle")
        .unwrap();
    assert!(matches!(
        pickle.write.as_ref().unwrap().kind,
        ExprKind::PickleCall { .. }
    ));
    // byteorder: `check byteorder in [..]` compares the text content.
    let bo = ir
        .format(pt)
        .entries
        .iter()
        .map(|&e| ir.entry(e))
        .find(|e| e.name == "byteorder")
        .unwrap();
    let ExprKind::In { expr, .. } = &bo.check.as_ref().unwrap().kind else {
        panic!()
    };
    assert_eq!(expr.ty, Type::Str);

    // pytorch_legacy: File.storages.bytes is a projection, a list of payloads.
    let legacy = ir.format_named("pytorch_legacy").unwrap();
    let m = ir.mapping(ir.format(legacy).mappings[0]);
    let mut projection = false;
    m.key(TensorKey::Data).unwrap().walk(&mut |e: &Expr| {
        if let ExprKind::Member {
            member: Member::Field(..),
            base,
        } = &e.kind
        {
            if matches!(base.ty, Type::List(_)) {
                assert_eq!(e.ty, Type::List(Box::new(Type::Payload)));
                projection = true;
            }
        }
    });
    assert!(projection);
    let numel = field(&ir, "pytorch_legacy", "StorageRecord", "numel");
    let mut record_dtype = false;
    numel.write.as_ref().unwrap().walk(&mut |e: &Expr| {
        record_dtype |= matches!(e.kind, ExprKind::RecordDtype);
    });
    assert!(record_dtype);
}

/// The plain (untagged) code blocks of the language reference.
fn doc_blocks() -> Vec<String> {
    let doc = std::fs::read_to_string(root().join("docs/fmt-language.md")).unwrap();
    let mut blocks = Vec::new();
    let mut cur: Option<String> = None;
    for line in doc.lines() {
        match (&mut cur, line.trim_end()) {
            (None, "```") => cur = Some(String::new()),
            (Some(b), "```") => {
                blocks.push(std::mem::take(b));
                cur = None;
            }
            (None, l) if l.starts_with("```") => cur = Some("\u{0}skip".into()),
            (Some(b), _) => {
                b.push_str(line);
                b.push('\n');
            }
            _ => {}
        }
    }
    blocks.retain(|b| !b.starts_with('\u{0}'));
    blocks
}

#[test]
fn accepted_doc_examples_lower_completely() {
    let builtin = builtin();
    let mut lowered = 0;
    for (i, text) in doc_blocks().iter().enumerate() {
        let Ok(file) = parse(Path::new(&format!("doc{i}.fmt")), text) else {
            continue;
        };
        if file.formats.is_empty() {
            continue;
        }
        // Alone, or with the built-in formats it may `use` (those it does not define).
        let mut files = vec![file.clone()];
        if check(&files)
            .0
            .iter()
            .any(|d| d.message.contains("unknown format"))
        {
            files = builtin
                .files
                .iter()
                .filter(|f| {
                    !f.formats
                        .iter()
                        .any(|g| file.formats.iter().any(|h| h.name.name == g.name.name))
                })
                .cloned()
                .collect();
            files.push(file);
        }
        let d = check(&files);
        if !d.is_empty() {
            eprintln!("doc block {i} not accepted: {}", d.0[0].message);
        }
        if check(&files).is_empty() {
            let ir = Schema { files }.ir();
            assert_complete(&ir);
            lowered += 1;
        }
    }
    eprintln!("{lowered} examples lowered");
    assert!(lowered >= 9, "only {lowered} examples lowered");
}

#[test]
fn npy_dump_snapshot() {
    let ir = builtin().ir();
    let mut text = String::new();
    ir::dump_format(&ir, ir.format_named("npy").unwrap(), &mut text);
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/ir/npy.dump");
    if std::env::var_os("UPDATE_EXPECT").is_some() {
        std::fs::write(&path, &text).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        want == text,
        "the dump of npy changed (run with UPDATE_EXPECT=1 to refresh {}):\n{text}",
        path.display()
    );
}

#[test]
fn whole_dump_has_no_errors() {
    let text = ir::dump(&builtin().ir());
    assert!(!text.contains("<error>"), "{text}");
}

#[test]
fn lowering_never_panics_on_rejected_schemas() {
    // Every example of the reference, accepted or not, and each built-in file alone
    // (its `use`d formats missing).
    for (i, text) in doc_blocks().iter().enumerate() {
        if let Ok(file) = parse(Path::new(&format!("doc{i}.fmt")), text) {
            let _ = Schema { files: vec![file] }.ir();
        }
    }
    for f in builtin().files {
        let _ = Schema {
            files: vec![f.clone()],
        }
        .ir();
        // The same file twice: every name a duplicate.
        let _ = Schema {
            files: vec![f.clone(), f],
        }
        .ir();
    }
}
