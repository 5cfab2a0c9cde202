//! Unit tests of the scanner: resolution of names built at load time, every calling
//! opcode, faults and bounds, the weights-only model, the hooks.

use super::*;

fn scan_with(bytes: &[u8], storages: bool) -> PickleScan {
    let limits = Limits::default();
    let opts = ScanOptions {
        limits: &limits,
        storages,
        keep_result: true,
        hooks: None,
        depth: 0,
    };
    scan_pickle(bytes, 0, &opts)
}

fn scan(bytes: &[u8]) -> PickleScan {
    scan_with(bytes, false)
}

/// `SHORT_BINUNICODE` of `s`.
fn text(s: &str) -> Vec<u8> {
    let mut v = vec![0x8c, s.len() as u8];
    v.extend_from_slice(s.as_bytes());
    v
}

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

fn paths(s: &PickleScan) -> Vec<String> {
    s.globals
        .iter()
        .map(|g| format!("{}.{}", g.module, g.name))
        .collect()
}

#[test]
fn tables_parse() {
    let (t, bad) = allow::parse(include_str!("torch_weights_only.txt"));
    assert!(bad.is_empty(), "{bad:?}");
    assert_eq!(t.allowed(), 144);
    assert!(names::bad_lines().is_empty(), "{:?}", names::bad_lines());
}

#[test]
fn danger_rules() {
    let d = |m: &str, n: &str| names::danger(m, n).is_some();
    for (m, n) in [
        ("os", "system"),
        ("posix", "system"),
        ("nt", "system"),
        ("os.path", "join"),
        ("builtins", "eval"),
        ("builtins", "getattr"),
        ("builtins", "__import__"),
        ("__builtin__", "execfile"),
        ("__builtin__", "apply"),
        ("commands", "getoutput"),
        ("cPickle", "loads"),
        ("_pickle", "loads"),
        ("subprocess", "Popen"),
        ("runpy", "_run_code"),
        ("importlib", "import_module"),
        ("functools", "partial"),
        ("operator", "attrgetter"),
        ("_operator", "methodcaller"),
        ("pip", "main"),
        ("numpy.testing._private.utils", "runstring"),
        ("numpy", "load"),
        ("torch", "load"),
        ("torch.serialization", "load"),
        ("torch.hub", "load"),
        ("pathlib", "os.system"),
        ("collections", "OrderedDict.__init__.__globals__"),
        ("types", "CodeType"),
        ("asyncio.subprocess", "create_subprocess_shell"),
        ("joblib", "load"),
    ] {
        assert!(d(m, n), "{m}.{n} is dangerous");
    }
    for (m, n) in [
        ("collections", "OrderedDict"),
        ("torch._utils", "_rebuild_tensor_v2"),
        ("torch", "FloatStorage"),
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy", "dtype"),
        ("copy_reg", "_reconstructor"),
        ("copyreg", "__newobj__"),
        ("builtins", "set"),
        ("__builtin__", "set"),
        ("_codecs", "encode"),
        ("joblib.numpy_pickle", "NumpyArrayWrapper"),
        ("torch.serialization", "_get_layout"),
        ("__main__", "MyModel"),
        ("sklearn.linear_model._base", "LinearRegression"),
        ("__torch__.torch.nn.modules.linear", "Linear"),
    ] {
        assert!(!d(m, n), "{m}.{n} is not dangerous");
    }
}

#[test]
fn plain_data_is_data_only() {
    // pickle.dumps({'a': [1, 2]}, protocol=4)
    let p = b"\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00}\x94\x8c\x01a\x94]\x94(K\x01K\x02es.";
    let s = scan(p);
    assert!(s.complete, "{:?}", s.faults);
    assert_eq!(s.end, p.len());
    assert_eq!(s.verdict(), Verdict::DataOnly);
    let r = s.result.unwrap();
    assert_eq!(
        r.get("a"),
        Some(&SymValue::List(vec![SymValue::Int(1), SymValue::Int(2)]))
    );
}

#[test]
fn os_system_reduce_protocol_0() {
    let p = b"cos\nsystem\n(S'echo hi'\ntR.";
    let s = scan(p);
    assert_eq!(s.verdict(), Verdict::Dangerous);
    assert_eq!(paths(&s), ["os.system"]);
    assert_eq!(s.globals[0].offsets, [0]);
    let c = &s.calls[0];
    assert_eq!(
        (c.kind, &c.callee),
        (CallKind::Reduce, &Callee::Global("os.system".into()))
    );
    assert!(c.danger.is_some());
    assert_eq!(c.offsets, [p.len() - 2]);
}

#[test]
fn stack_global_from_memo() {
    // Module and name memoized first, fetched back with BINGET and LONG_BINGET.
    let p = cat(&[
        b"\x80\x04",
        &text("posix"),
        b"\x94",
        &text("system"),
        b"\x94",
        b"0",
        b"0",
        b"h\x00j\x01\x00\x00\x00\x93",
        &text("id"),
        b"\x85R.",
    ]);
    let s = scan(&p);
    assert!(s.complete, "{:?}", s.faults);
    assert_eq!(paths(&s), ["posix.system"]);
    assert_eq!(s.globals[0].opcode, "STACK_GLOBAL");
    assert_eq!(s.verdict(), Verdict::Dangerous);
}

#[test]
fn stack_global_of_a_computed_name_is_unresolved() {
    // STACK_GLOBAL(str.lower('OS'), 'system'): the module is what a call returned.
    let p = cat(&[
        b"\x80\x04",
        &text("builtins"),
        &text("str"),
        b"\x93",
        &text("OS"),
        b"\x85R",
        &text("system"),
        b"\x93",
        &text("id"),
        b"\x85R.",
    ]);
    let s = scan(&p);
    assert_eq!(s.unresolved.len(), 1, "{:?}", s.unresolved);
    assert_eq!(s.verdict(), Verdict::Dangerous);
    // The call of the unresolved value is dangerous too.
    assert!(s
        .calls
        .iter()
        .any(|c| c.callee == Callee::Unresolved && c.danger.is_some()));
}

#[test]
fn stack_global_of_a_missing_memo_key_is_unresolved() {
    let p = cat(&[
        b"\x80\x04h\x07",
        &text("system"),
        b"\x93",
        &text("id"),
        b"\x85R.",
    ]);
    let s = scan(&p);
    assert!(!s.faults.is_empty());
    assert_eq!(s.verdict(), Verdict::Dangerous);
}

#[test]
fn ext_codes_are_unresolved() {
    for ext in [&b"\x82\x01"[..], b"\x83\x01\x02", b"\x84\x01\x02\x03\x04"] {
        let p = cat(&[b"\x80\x02", ext, b"(S'x'\ntR."]);
        let s = scan(&p);
        assert_eq!(s.unresolved.len(), 1, "{ext:?}");
        assert_eq!(s.unresolved[0].offset, 2);
        assert_eq!(s.verdict(), Verdict::Dangerous);
    }
}

#[test]
fn inst_and_obj_call() {
    let s = scan(b"(S'echo hi'\nios\nsystem\n.");
    assert_eq!(paths(&s), ["os.system"]);
    assert_eq!(s.globals[0].opcode, "INST");
    assert_eq!(s.calls[0].kind, CallKind::Inst);
    assert_eq!(s.verdict(), Verdict::Dangerous);

    let s = scan(b"(csubprocess\nPopen\nS'id'\no.");
    assert_eq!(s.calls[0].kind, CallKind::Obj);
    assert_eq!(s.calls[0].callee, Callee::Global("subprocess.Popen".into()));
    assert_eq!(s.verdict(), Verdict::Dangerous);

    // INST of a harmless class still needs its global.
    let s = scan(b"(icollections\nOrderedDict\n.");
    assert_eq!(s.verdict(), Verdict::NeedsGlobals);
}

#[test]
fn build_calls_setstate_of_the_class() {
    // A harmless-looking class made by copyreg._reconstructor: BUILD names the class.
    let p = b"ccopy_reg\n_reconstructor\n(cmymod\nThing\nc__builtin__\nobject\nNtR}b.";
    let s = scan(p);
    let b = s.calls.iter().find(|c| c.kind == CallKind::Build).unwrap();
    assert_eq!(b.callee, Callee::Global("mymod.Thing".into()));
    assert_eq!(s.verdict(), Verdict::NeedsGlobals);
    // BUILD of a dangerous class.
    let p = b"\x80\x02cpdb\nPdb\n)\x81}b.";
    let s = scan(p);
    let b = s.calls.iter().find(|c| c.kind == CallKind::Build).unwrap();
    assert!(b.danger.is_some());
    // BUILD on a global itself changes a module's state.
    let s = scan(b"cmymod\nCONFIG\n}b.");
    assert_eq!(s.verdict(), Verdict::Dangerous);
}

#[test]
fn bytearray8_and_buffers() {
    let p = cat(&[
        b"\x80\x05\x96",
        &8u64.to_le_bytes(),
        b"abcdefgh",
        b"\x97\x98\x86.",
    ]);
    let s = scan(&p);
    assert!(s.complete, "{:?}", s.faults);
    assert_eq!(s.buffers, [19]);
    assert_eq!(s.verdict(), Verdict::DataOnly);
    assert!(s.torch_refusal.is_some());
}

#[test]
fn huge_length_fields_are_truncations() {
    for p in [
        cat(&[b"\x80\x05\x96", &u64::MAX.to_le_bytes(), b"."]),
        cat(&[b"\x80\x04\x8d", &(1u64 << 62).to_le_bytes()]),
        cat(&[b"\x80\x04\x8e", &(1u64 << 40).to_le_bytes()]),
        cat(&[b"\x80\x04\x95", &(1u64 << 50).to_le_bytes(), b"N."]),
        b"\x80\x03B\xff\xff\xff\xff.".to_vec(),
        b"\x80\x02T\xff\xff\xff\xff.".to_vec(),
        b"\x80\x02\x8b\xff\xff\xff\x7f.".to_vec(),
    ] {
        let s = scan(&p);
        assert!(!s.complete);
        assert!(
            s.faults.iter().any(|f| f.kind != FaultKind::Limit),
            "{:?}",
            s.faults
        );
        assert_eq!(s.verdict(), Verdict::CannotVerify, "{p:?}");
    }
}

#[test]
fn truncated_pickles_never_pass() {
    let benign = b"\x80\x02ccollections\nOrderedDict\nq\x00)Rq\x01X\x01\x00\x00\x00aK\x01s.";
    assert_eq!(scan_with(benign, true).verdict(), Verdict::WeightsOnly);
    for n in 0..benign.len() {
        let s = scan_with(&benign[..n], true);
        assert!(!s.complete);
        assert_eq!(s.verdict(), Verdict::CannotVerify, "prefix of {n}");
        assert_eq!(s.faults[0].kind, FaultKind::Truncated);
    }
    let evil = b"cos\nsystem\n(S'id'\ntR.";
    for n in 11..evil.len() {
        assert_eq!(
            scan(&evil[..n]).verdict(),
            Verdict::Dangerous,
            "prefix of {n}"
        );
    }
}

#[test]
fn payload_after_a_fault_is_seen() {
    // A memo key that is not defined, then os.system: reading goes on.
    let s = scan(b"\x80\x02h\x050cos\nsystem\nN\x85R.");
    assert!(!s.faults.is_empty());
    assert_eq!(paths(&s), ["os.system"]);
    assert_eq!(s.verdict(), Verdict::Dangerous);
    // An unknown opcode ends reading: what came before counts.
    let s = scan(b"cos\nsystem\n\xff");
    assert_eq!(s.verdict(), Verdict::Dangerous);
    let s = scan(b"N\xff");
    assert_eq!(s.verdict(), Verdict::CannotVerify);
}

#[test]
fn deep_nesting_is_bounded() {
    let marks = vec![b'('; 10_000];
    let s = scan(&marks);
    assert_eq!(s.faults[0].kind, FaultKind::Limit);
    assert_eq!(s.verdict(), Verdict::CannotVerify);
    // Lists nested 100,000 deep without marks: read, and copied only so deep.
    let mut p = vec![b']'; 100_000];
    p.extend(std::iter::repeat_n(b'a', 99_999));
    p.push(b'.');
    let s = scan(&p);
    assert!(s.complete, "{:?}", s.faults);
    assert_eq!(s.verdict(), Verdict::DataOnly);
}

#[test]
fn memo_bomb_copy_is_bounded() {
    // A list of itself 30 times over: 2^30 references; the copy stops at MAX_NODES.
    let mut p = b"\x80\x02]q\x00".to_vec();
    for i in 0..30u8 {
        p.extend_from_slice(&[b'h', i, b'h', i, 0x86, b'q', i + 1]);
    }
    p.push(b'.');
    let s = scan(&p);
    assert!(s.complete, "{:?}", s.faults);
    assert_eq!(s.verdict(), Verdict::DataOnly);
}

#[test]
fn ops_limit() {
    let limits = Limits {
        max_pickle_ops: 100,
        ..Limits::default()
    };
    let opts = ScanOptions {
        limits: &limits,
        storages: false,
        keep_result: false,
        hooks: None,
        depth: 0,
    };
    let p = [b'N'; 1000];
    let s = scan_pickle(&p, 0, &opts);
    assert_eq!(s.faults[0].kind, FaultKind::Limit);
    assert_eq!(s.ops, 101);
}

#[test]
fn weights_only_model() {
    // torch.save's protocol 2: an OrderedDict with a tensor of a storage.
    let p = b"\x80\x02ccollections\nOrderedDict\nq\x00)Rq\x01X\x01\x00\x00\x00wq\x02ctorch._utils\n_rebuild_tensor_v2\nq\x03((X\x07\x00\x00\x00storageq\x04ctorch\nFloatStorage\nq\x05X\x01\x00\x00\x000q\x06X\x03\x00\x00\x00cpuq\x07K\x04tq\x08QK\x00K\x04\x85K\x01\x85\x89h\x00)Rq\ttq\nRq\x0bs}b.";
    let s = scan_with(p, true);
    assert!(s.complete, "{:?}", s.faults);
    assert_eq!(s.torch_refusal, None);
    assert_eq!(s.verdict(), Verdict::WeightsOnly);
    assert_eq!(s.storage_ids.len(), 1);
    assert_eq!(
        s.storage_ids[0].class.as_deref(),
        Some("torch.FloatStorage")
    );
    assert_eq!(s.storage_ids[0].key.as_deref(), Some("0"));
    assert_eq!(s.storage_ids[0].numel, Some(4));
    // The same pickle with no storage loader: the persistent id is refused.
    assert_eq!(scan_with(p, false).verdict(), Verdict::NeedsGlobals);
    // Protocol 4's opcodes are outside the weights-only unpickler.
    let p4 = b"\x80\x04\x95\x1f\x00\x00\x00\x00\x00\x00\x00\x8c\x0bcollections\x94\x8c\x0bOrderedDict\x94\x93\x94)R\x94.";
    let s = scan_with(p4, true);
    assert!(s.complete);
    assert_eq!(s.verdict(), Verdict::NeedsGlobals);
    // A data-only checkpoint pickle that torch refuses.
    let s = scan_with(b"\x80\x04\x95\x03\x00\x00\x00\x00\x00\x00\x00}\x94.", true);
    assert_eq!(s.verdict(), Verdict::NeedsGlobals);
    assert_eq!(
        scan_with(b"\x80\x04\x95\x03\x00\x00\x00\x00\x00\x00\x00}\x94.", false).verdict(),
        Verdict::DataOnly
    );
    // Blocked modules, APPEND on a non-list.
    let s = scan_with(b"\x80\x02cos\ngetcwd\n)R.", true);
    assert!(s.torch_refusal.unwrap().1.contains("blocked"));
    let s = scan_with(b"\x80\x02ccollections\nOrderedDict\n)RK\x01a.", true);
    assert!(s.torch_refusal.is_some());
}

struct Joblib;

impl ScanHooks for Joblib {
    fn watch(&self, module: &str, name: &str) -> Watch {
        match (module, name) {
            ("w", "Array") => Watch::Build,
            ("w", "Nested") => Watch::Build,
            ("w", "load") => Watch::Args,
            _ => Watch::Nothing,
        }
    }

    fn after_build(&self, _: &str, name: &str, state: &SymValue) -> Inline {
        match (name, state.get("n").and_then(SymValue::as_int)) {
            ("Nested", _) => Inline::Pickle,
            (_, Some(n)) => Inline::Skip {
                padded: true,
                len: n as u64,
            },
            _ => Inline::Invalid("no size".into()),
        }
    }
}

fn scan_hooked(p: &[u8]) -> PickleScan {
    let limits = Limits::default();
    let opts = ScanOptions {
        limits: &limits,
        storages: false,
        keep_result: false,
        hooks: Some(&Joblib),
        depth: 0,
    };
    scan_pickle(p, 0, &opts)
}

#[test]
fn hooks_skip_inline_data_and_nested_pickles() {
    // w.Array() with state {'n': 5}, then a padding byte of 2, 2 bytes, 5 bytes of data
    // that are not opcodes, then a dangerous global.
    let p = b"]cw\nArray\n)R}X\x01\x00\x00\x00nK\x05sb\x02..\xff\xff\xff\xff\xffacos\nsystem\na.";
    let s = scan_hooked(p);
    assert!(s.complete, "{:?}", s.faults);
    assert_eq!(s.inline.len(), 1);
    assert_eq!((s.inline[0].offset, s.inline[0].len), (26, 5));
    assert_eq!(s.verdict(), Verdict::Dangerous);
    // Data shorter than the state says.
    let s = scan_hooked(b"cw\nArray\n)R}X\x01\x00\x00\x00nK\x05sb\x00\xff.");
    assert_eq!(s.faults[0].kind, FaultKind::Truncated);
    // A pickle inline: its own verdict counts.
    let s = scan_hooked(b"cw\nNested\n)R}bcos\nsystem\n..");
    assert!(s.complete, "{:?}", s.faults);
    assert_eq!(s.nested.len(), 1);
    assert_eq!(s.own_verdict(), Verdict::NeedsGlobals);
    assert_eq!(s.verdict(), Verdict::Dangerous);
    // Arguments of a watched call.
    let s = scan_hooked(b"\x80\x03cw\nload\nC\x03abc\x85R.");
    assert_eq!(s.captures.len(), 1);
    assert_eq!(
        s.captures[0].args,
        SymValue::Tuple(vec![SymValue::Bytes(ByteData::Range {
            offset: 12,
            len: 3
        })])
    );
}

#[test]
fn latin1_bytes_of_protocol_2() {
    // _codecs.encode('ab\xff', 'latin1') as the argument of a watched call.
    let p = "\u{80}\u{2}cw\nload\nc_codecs\nencode\nX\u{4}\u{0}\u{0}\u{0}ab\u{ff}X\u{6}\u{0}\u{0}\u{0}latin1\u{86}R\u{85}R.";
    let bytes: Vec<u8> = p
        .chars()
        .flat_map(|c| match c {
            '\u{ff}' => vec![0xc3, 0xbf],
            c => vec![c as u8],
        })
        .collect();
    let s = scan_hooked(&bytes);
    assert!(s.complete, "{:?}", s.faults);
    assert_eq!(
        s.captures[0].args,
        SymValue::Tuple(vec![SymValue::Bytes(ByteData::Owned(
            b"ab\xff".to_vec().into()
        ))])
    );
}

#[test]
fn persistent_ids_and_python2_strings() {
    let s = scan(b"(S'storage'\np0\nS'x'\ntQ.");
    assert_eq!(s.storage_ids.len(), 1);
    let s = scan(b"(S'module'\ntQ.");
    assert_eq!(s.other_ids.len(), 1);
    assert_eq!(s.verdict(), Verdict::NeedsGlobals);
    let s = scan(b"Pabc\n.");
    assert_eq!(s.other_ids.len(), 1);
    // A Python 2 str names a global through STACK_GLOBAL as Python 3 reads it.
    let s = scan(b"\x80\x04U\x02osU\x06system\x93.");
    assert_eq!(paths(&s), ["os.system"]);
    // bytes cannot name one: Python refuses.
    let s = scan(b"\x80\x04C\x02osC\x06system\x93.");
    assert!(s.globals.is_empty());
    assert_eq!(s.verdict(), Verdict::CannotVerify);
}

#[test]
fn calls_of_computed_values_are_dangerous() {
    // getattr-free: calling what a harmless call returned.
    let s = scan(b"cmymod\nfactory\n)R)R.");
    assert!(s
        .calls
        .iter()
        .any(|c| c.callee == Callee::Computed && c.danger.is_some()));
    assert_eq!(s.verdict(), Verdict::Dangerous);
    // Calling a persistent object.
    let s = scan_with(b"\x80\x02(X\x07\x00\x00\x00storagetQ)R.", true);
    assert_eq!(s.verdict(), Verdict::Dangerous);
}
