//! ONNX models tensorfmt writes, checked by the real tools: every fixture of every format
//! converted to `.onnx` (inline, one external file, one file per tensor) passes
//! `onnx.checker.check_model(full_check=True)` and loads in onnx with the same names,
//! dtypes, shapes and element hashes; models whose weights tensorfmt replaced give, in
//! onnxruntime, the outputs of the same replacement made with onnx; models moved between
//! inline and external storage keep their graph; bad replacements are refused and leave
//! the output as it was.

use std::path::{Path, PathBuf};

use tensorfmt::{ExternalData, RewriteOptions, TensorFile};
use tensorfmt_tests::{cli, fixtures, inspect_json, json, python_snippet, run_seed, tfcheck_onnx};

/// The tensors of `inspect --json --sha256`.
fn tensors_of(path: &Path) -> serde_json::Value {
    inspect_json(path)["tensors"].clone()
}

/// What onnx says of a model: its tensors (`describe`), after `check` passed.
fn onnx_tensors(model: &Path) -> serde_json::Value {
    let m = model.to_str().unwrap();
    tfcheck_onnx(&["check", m]);
    json(&tfcheck_onnx(&["describe", m]))["tensors"].clone()
}

fn policies() -> Vec<(&'static str, Vec<&'static str>)> {
    vec![
        ("auto", vec![]),
        (
            "one-file",
            vec!["--external", "one-file", "--external-threshold", "0"],
        ),
        (
            "per-tensor",
            vec!["--external", "per-tensor", "--external-threshold", "0"],
        ),
        ("inline", vec!["--external", "inline"]),
    ]
}

/// Fixtures of every format that hold tensors onnx can store (string tensors among them:
/// Caffe2's string blobs, ONNX's string initializers).
fn sources() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for (dir, ext) in [
        ("npz", "npz"),
        ("npy", "npy"),
        ("pytorch", "pt"),
        ("onnx", "onnx"),
    ] {
        let mut v: Vec<PathBuf> = std::fs::read_dir(fixtures().join(dir))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == ext))
            .collect();
        v.sort();
        out.extend(v);
    }
    out.push(fixtures().join("onnx/external_per_tensor/model.onnx"));
    for db in ["weights.minidb", "weights.lmdb", "weights.leveldb"] {
        out.push(fixtures().join("caffe2").join(db));
    }
    out
}

#[test]
fn every_fixture_written_as_onnx_loads_equal_in_onnx() {
    let tmp = tempfile::tempdir().unwrap();
    let mut written: Vec<(PathBuf, String, serde_json::Value)> = Vec::new();
    for src in sources() {
        let expected = tensors_of(&src);
        let is_onnx = src.extension().is_some_and(|x| x == "onnx");
        for (policy, args) in policies() {
            let out_dir = tmp.path().join(format!(
                "{}-{}-{policy}",
                src.parent().unwrap().file_name().unwrap().to_str().unwrap(),
                src.file_name().unwrap().to_str().unwrap()
            ));
            std::fs::create_dir_all(&out_dir).unwrap();
            let out = out_dir.join("model.onnx");
            let mut argv = vec!["convert", src.to_str().unwrap(), out.to_str().unwrap()];
            argv.extend(args.iter().copied());
            let (code, text) = cli(&argv);
            let what = format!("{} written {policy}", src.display());
            assert_eq!(code, std::process::ExitCode::SUCCESS, "{what}: {text}");
            // tensorfmt reads back what it wrote.
            assert_eq!(tensors_of(&out), expected, "{what}, read back");
            let external: Vec<String> = std::fs::read_dir(&out_dir)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| n != "model.onnx")
                .collect();
            let numeric = expected
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t["dtype"] != "string");
            match policy {
                "inline" => assert!(external.is_empty(), "{what}: {external:?}"),
                "auto" if !is_onnx => assert!(external.is_empty(), "{what}: {external:?}"),
                "one-file" if numeric => {
                    assert_eq!(external.len(), 1, "{what}: {external:?}");
                    assert!(
                        external[0].starts_with("model.onnx.") && external[0].ends_with(".data"),
                        "{what}: {external:?}"
                    );
                }
                "per-tensor" if numeric => assert!(!external.is_empty(), "{what}"),
                _ => {}
            }
            written.push((out, what, expected.clone()));
        }
    }
    assert!(written.len() > 150, "{}", written.len());
    // onnx checks and describes them all in one run.
    let paths: Vec<&str> = written.iter().map(|(p, ..)| p.to_str().unwrap()).collect();
    tfcheck_onnx(&[&["check"], &paths[..]].concat());
    let described = tfcheck_onnx(&[&["describe"], &paths[..]].concat());
    let lines: Vec<&str> = described.lines().collect();
    assert_eq!(lines.len(), written.len());
    for ((_, what, expected), line) in written.iter().zip(lines) {
        assert_eq!(&json(line)["tensors"], expected, "{what}");
    }
}

#[test]
fn external_data_is_page_aligned_and_laid_out_as_onnx_reads_it() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("m.onnx");
    let src = fixtures().join("onnx/raw_all_dtypes.onnx");
    let (code, text) = cli(&[
        "convert",
        src.to_str().unwrap(),
        out.to_str().unwrap(),
        "--external",
        "one-file",
        "--external-threshold",
        "0",
    ]);
    assert_eq!(code, std::process::ExitCode::SUCCESS, "{text}");
    let f = TensorFile::open(&out).unwrap();
    let mut externals = 0;
    for t in f.tensors() {
        if let tensorfmt::DataLocation::External { path, offset, len } = &t.location {
            assert!(
                path.starts_with("m.onnx.") && path.ends_with(".data"),
                "{path}"
            );
            assert_eq!(offset % 4096, 0, "{} at {offset}", t.name);
            assert!(*len > 0 || t.shape.contains(&0));
            externals += 1;
        }
    }
    // Every numeric tensor external; the string tensor stays in the model.
    assert_eq!(externals, f.tensors().len() - 1);
    // What onnx itself reads from those offsets.
    assert_eq!(onnx_tensors(&out), tensors_of(&src));
}

/// New weights for every floating-point initializer of `model` (seeded), as an npz, and
/// the reference model onnx makes with them (numpy_helper.from_array).
fn new_weights(model: &Path, seed: &str, npz: &Path, reference: &Path) {
    let code = r#"
import sys
import numpy as np
import onnx
from onnx import numpy_helper
model, seed, npz, ref = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
m = onnx.load(model)
rng = np.random.default_rng(seed)
new = {}
for t in m.graph.initializer:
    a = numpy_helper.to_array(t)
    if a.dtype.kind == "f":
        new[t.name] = rng.standard_normal(a.shape).astype(a.dtype)
        t.CopyFrom(numpy_helper.from_array(new[t.name], t.name))
np.savez(npz, **new)
onnx.save(m, ref)
"#;
    let (ok, text) = python_snippet(
        code,
        &[
            model.to_str().unwrap(),
            seed,
            npz.to_str().unwrap(),
            reference.to_str().unwrap(),
        ],
    );
    assert!(ok, "{text}");
}

/// Runs `model` in onnxruntime on inputs made from the graph's input types (seeded) and
/// returns the outputs' bytes.
fn run_outputs(model: &Path, seed: &str) -> Vec<Vec<u8>> {
    let code = r#"
import sys
import numpy as np
import onnxruntime as ort
opts = ort.SessionOptions()
opts.intra_op_num_threads = 1
opts.inter_op_num_threads = 1
s = ort.InferenceSession(sys.argv[1], opts, providers=["CPUExecutionProvider"])
rng = np.random.default_rng(int(sys.argv[2]))
types = {"tensor(float)": np.float32, "tensor(double)": np.float64,
         "tensor(float16)": np.float16, "tensor(int64)": np.int64, "tensor(int32)": np.int32}
feeds = {}
for i in s.get_inputs():
    shape = [d if isinstance(d, int) else 2 for d in i.shape]
    t = types[i.type]
    feeds[i.name] = (rng.standard_normal(shape) if np.dtype(t).kind == "f"
                     else rng.integers(0, 3, shape)).astype(t)
for o in s.run(None, feeds):
    print(np.ascontiguousarray(o).tobytes().hex())
"#;
    let (ok, text) = python_snippet(code, &[model.to_str().unwrap(), seed]);
    assert!(ok, "{text}");
    text.lines().map(hex).collect()
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

#[test]
fn replaced_weights_give_the_outputs_onnxruntime_predicts() {
    let tmp = tempfile::tempdir().unwrap();
    let seed = run_seed();
    for name in ["mlp.onnx", "constant_nodes.onnx", "torch_export.onnx"] {
        let model = fixtures().join("onnx").join(name);
        let npz = tmp.path().join(format!("{name}.npz"));
        let reference = tmp.path().join(format!("ref-{name}"));
        new_weights(&model, &seed, &npz, &reference);
        for (policy, args) in policies() {
            let dir = tmp.path().join(format!("{name}-{policy}"));
            std::fs::create_dir_all(&dir).unwrap();
            let out = dir.join(name);
            let mut argv = vec![
                "replace",
                model.to_str().unwrap(),
                npz.to_str().unwrap(),
                out.to_str().unwrap(),
            ];
            argv.extend(args.iter().copied());
            let (code, text) = cli(&argv);
            assert_eq!(
                code,
                std::process::ExitCode::SUCCESS,
                "{name} {policy}: {text}"
            );
            tfcheck_onnx(&["check", out.to_str().unwrap()]);
            let got = run_outputs(&out, &seed);
            assert_eq!(
                got,
                run_outputs(&reference, &seed),
                "{name} {policy} (seed {seed})"
            );
            assert_ne!(
                got,
                run_outputs(&model, &seed),
                "{name}: the new weights change nothing"
            );
            assert_eq!(
                onnx_tensors(&out),
                onnx_tensors(&reference),
                "{name} {policy}"
            );
        }
    }
}

/// The model without its initializers' contents (names, dtypes and dims kept): what a
/// rewrite must leave as it was.
fn graph_without_weights(model: &Path) -> String {
    let code = r#"
import sys
import onnx
m = onnx.load(sys.argv[1], load_external_data=False)
for t in m.graph.initializer:
    for f in ("raw_data", "float_data", "int32_data", "int64_data", "double_data",
              "uint64_data", "external_data", "data_location"):
        t.ClearField(f)
print(m.SerializeToString(deterministic=True).hex())
"#;
    let (ok, text) = python_snippet(code, &[model.to_str().unwrap()]);
    assert!(ok, "{text}");
    text
}

#[test]
fn models_move_between_inline_and_external_storage_keeping_their_graph() {
    let tmp = tempfile::tempdir().unwrap();
    let start = fixtures().join("onnx/torch_export.onnx");
    let graph = graph_without_weights(&start);
    let expected = tensors_of(&start);
    let steps: [(&str, ExternalData); 5] = [
        ("a/one.onnx", ExternalData::one_file()),
        (
            "b/per.onnx",
            ExternalData::External {
                per_tensor: true,
                location: None,
                threshold: 0,
                align: 4096,
            },
        ),
        ("b/per.onnx", ExternalData::Auto),
        (
            "c/packed.onnx",
            ExternalData::External {
                per_tensor: false,
                location: Some("w.bin".into()),
                threshold: 0,
                align: 0,
            },
        ),
        ("d/inline.onnx", ExternalData::Inline),
    ];
    let mut prev = start.clone();
    let listing = |dir: &str| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(tmp.path().join(dir))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    let mut per_tensor_files = Vec::new();
    for (rel, policy) in steps {
        let out = tmp.path().join(rel);
        std::fs::create_dir_all(out.parent().unwrap()).unwrap();
        let options = RewriteOptions {
            write: tensorfmt::WriteOptions {
                external: policy.clone(),
                ..Default::default()
            },
            ..Default::default()
        };
        tensorfmt::rewrite_storage(&prev, &out, &options).unwrap();
        assert_eq!(onnx_tensors(&out), expected, "{rel} {policy:?}");
        assert_eq!(graph_without_weights(&out), graph, "{rel} {policy:?}");
        if rel == "b/per.onnx" && per_tensor_files.is_empty() {
            per_tensor_files = listing("b");
        }
        prev = out;
    }
    // Inline at the end, and byte for byte the graph onnx wrote.
    let f = TensorFile::open(&prev).unwrap();
    assert!(f
        .tensors()
        .iter()
        .all(|t| !matches!(t.location, tensorfmt::DataLocation::External { .. })));
    // Per tensor: one file per initializer over the threshold, named after the model,
    // the save and the tensor.
    assert!(per_tensor_files.len() > 2, "{per_tensor_files:?}");
    assert!(
        per_tensor_files
            .iter()
            .all(|n| n == "per.onnx" || n.starts_with("per.onnx.")),
        "{per_tensor_files:?}"
    );
    // Rewritten in place with the default policy: the external tensors moved to one file
    // of that save, and the per-tensor files the replaced model had were removed.
    let after = listing("b");
    assert_eq!(after.len(), 2, "{after:?}");
    assert!(
        after[1].starts_with("per.onnx.") && after[1].ends_with(".data"),
        "{after:?}"
    );
}

#[test]
fn unseen_models_rewritten_by_tensorfmt_load_equal_in_onnx() {
    let tmp = tempfile::tempdir().unwrap();
    let seed = run_seed();
    let listed = tfcheck_onnx(&[
        "make-random",
        tmp.path().join("in").to_str().unwrap(),
        &seed,
        "12",
    ]);
    for (i, p) in listed.lines().enumerate() {
        let src = Path::new(p);
        let expected = tensors_of(src);
        let graph = graph_without_weights(src);
        for (j, policy) in [
            ExternalData::one_file(),
            ExternalData::Inline,
            ExternalData::Auto,
        ]
        .into_iter()
        .enumerate()
        {
            let out = tmp.path().join(format!("out{i}-{j}")).join("m.onnx");
            std::fs::create_dir_all(out.parent().unwrap()).unwrap();
            let options = RewriteOptions {
                write: tensorfmt::WriteOptions {
                    external: policy.clone(),
                    ..Default::default()
                },
                ..Default::default()
            };
            tensorfmt::rewrite_storage(src, &out, &options)
                .unwrap_or_else(|e| panic!("{p} {policy:?}: {e} (seed {seed})"));
            assert_eq!(onnx_tensors(&out), expected, "{p} {policy:?} (seed {seed})");
            assert_eq!(
                graph_without_weights(&out),
                graph,
                "{p} {policy:?} (seed {seed})"
            );
        }
    }
}

#[test]
fn bad_replacements_are_refused_and_leave_the_output_as_it_was() {
    let tmp = tempfile::tempdir().unwrap();
    let model = fixtures().join("onnx/mlp.onnx");
    let out = tmp.path().join("out.onnx");
    std::fs::write(&out, b"previous contents").unwrap();
    let meta = |name: &str, dtype, shape: Vec<u64>| tensorfmt::TensorMeta {
        name: name.into(),
        dtype,
        shape,
        order: tensorfmt::Order::C,
        byte_order: tensorfmt::ByteOrder::Little,
    };
    let bytes = vec![0u8; 8 * 16 * 8];
    let cases: Vec<(tensorfmt::TensorMeta, usize, &str)> = vec![
        (
            meta("nope", tensorfmt::DType::F32, vec![4]),
            16,
            "no tensor named 'nope'",
        ),
        (
            meta("W1", tensorfmt::DType::F32, vec![16, 8]),
            512,
            "allow_reshape",
        ),
        (
            meta("W1", tensorfmt::DType::F64, vec![8, 16]),
            1024,
            "allow_reshape",
        ),
        (
            meta("W1", tensorfmt::DType::F32, vec![8, 16]),
            100,
            "needs 512 bytes, 100 given",
        ),
    ];
    for (m, n, want) in cases {
        let e = tensorfmt::replace_tensors(&model, &out, [(m, &bytes[..n])], &Default::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains(want) && e.contains("mlp.onnx"), "{e}");
        assert_eq!(std::fs::read(&out).unwrap(), b"previous contents");
    }
    // A replacement may change a shape when asked to.
    let options = RewriteOptions {
        allow_reshape: true,
        ..Default::default()
    };
    tensorfmt::replace_tensors(
        &model,
        &out,
        [(meta("B2", tensorfmt::DType::F64, vec![2]), &bytes[..16])],
        &options,
    )
    .unwrap();
    let f = TensorFile::open(&out).unwrap();
    let b2 = f.tensor("B2").unwrap();
    assert_eq!(
        (b2.dtype, b2.shape.clone()),
        (tensorfmt::DType::F64, vec![2])
    );
    // Formats that hold tensors alone are written anew, not rewritten.
    let e = tensorfmt::rewrite_storage(
        fixtures().join("npz/savez_stored.npz"),
        tmp.path().join("x.npz"),
        &Default::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("write a new file"), "{e}");
    // External data needs a path: a stream gets inline tensors only.
    let mut buf = std::io::Cursor::new(Vec::new());
    let desc = tensorfmt::format_named("onnx").unwrap();
    let mut w = (desc.writer)(
        Box::new(&mut buf),
        &tensorfmt::WriteOptions {
            external: ExternalData::one_file(),
            ..Default::default()
        },
    )
    .unwrap();
    let e = w
        .add(
            &meta("big", tensorfmt::DType::U8, vec![4096]),
            tensorfmt::Payload::Bytes(&[0u8; 4096]),
        )
        .unwrap_err()
        .to_string();
    assert!(e.contains("external data needs the document's path"), "{e}");
}

/// String tensors are written one value each in `string_data` (inline, whatever the
/// external-data policy), as onnx reads them; bytes that do not hold the shape's strings
/// are refused.
#[test]
fn string_tensors_are_written_to_string_data() {
    let tmp = tempfile::tempdir().unwrap();
    let desc = tensorfmt::format_named("onnx").unwrap();
    let meta = |n: u64| tensorfmt::TensorMeta {
        name: "s".into(),
        dtype: tensorfmt::DType::String,
        shape: vec![n],
        order: tensorfmt::Order::C,
        byte_order: tensorfmt::ByteOrder::Little,
    };
    let mut strings = Vec::new();
    for s in ["cat", "", "h\u{e9}"] {
        strings.extend_from_slice(&(s.len() as u64).to_le_bytes());
        strings.extend_from_slice(s.as_bytes());
    }
    for (n, bytes) in [
        (1, &b""[..]),
        (3, &strings[..strings.len() - 1]),
        (2, &strings[..]),
    ] {
        let mut buf = std::io::Cursor::new(Vec::new());
        let mut w = (desc.writer)(Box::new(&mut buf), &Default::default()).unwrap();
        let e = w
            .add(&meta(n), tensorfmt::Payload::Bytes(bytes))
            .unwrap_err()
            .to_string();
        assert!(e.contains("string"), "{e}");
    }
    let out = tmp.path().join("s.onnx");
    let mut saver = tensorfmt::Saver::create(&out, Some("onnx"), &Default::default()).unwrap();
    saver.add_bytes(&meta(3), &strings).unwrap();
    saver.commit().unwrap();
    let (ok, text) = python_snippet(
        "import sys, onnx\nfrom onnx import numpy_helper\n\
         m = onnx.load(sys.argv[1])\nonnx.checker.check_model(m)\n\
         t = m.graph.initializer[0]\nprint(t.data_type, list(t.string_data), \
         numpy_helper.to_array(t).tolist())",
        &[out.to_str().unwrap()],
    );
    assert!(ok, "{text}");
    assert_eq!(
        text.trim(),
        "8 [b'cat', b'', b'h\\xc3\\xa9'] ['cat', '', 'h\u{e9}']"
    );
}

/// Past 2 GiB: the default policy keeps tensors inline until the next would take the
/// model past protobuf's limit, then spills that one and the rest to `<model>.data`;
/// onnx checks and loads the result. About 2.3 GB of disk and a minute:
/// `cargo test --release -p tensorfmt-tests --test onnx_write -- --ignored`.
#[test]
#[ignore = "writes 2.3 GB"]
fn models_past_2_gib_spill_to_external_data() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("big.onnx");
    let chunk: Vec<u8> = (0..256u32 << 20).map(|i| (i % 251) as u8).collect();
    let mut saver = tensorfmt::Saver::create(&out, Some("onnx"), &Default::default()).unwrap();
    for i in 0..9 {
        let meta = tensorfmt::TensorMeta {
            name: format!("w{i}"),
            dtype: tensorfmt::DType::U8,
            shape: vec![chunk.len() as u64],
            order: tensorfmt::Order::C,
            byte_order: tensorfmt::ByteOrder::Little,
        };
        saver.add_bytes(&meta, &chunk).unwrap();
    }
    saver.commit().unwrap();
    let model_len = std::fs::metadata(&out).unwrap().len();
    let data_len = std::fs::metadata(tmp.path().join("big.onnx.data"))
        .unwrap()
        .len();
    assert!(model_len < (1 << 31), "{model_len}");
    assert!(
        model_len + data_len > 9 * (256 << 20),
        "{model_len} + {data_len}"
    );
    let f = TensorFile::open(&out).unwrap();
    let external = f
        .tensors()
        .iter()
        .filter(|t| matches!(t.location, tensorfmt::DataLocation::External { .. }))
        .count();
    assert_eq!(external, 2, "7 x 256 MiB fit under 2 GiB");
    for t in f.tensors() {
        assert_eq!(
            f.load_info(t).unwrap().data.as_bytes(),
            &chunk[..],
            "{}",
            t.name
        );
    }
    assert_eq!(onnx_tensors(&out), tensors_of(&out));
}

#[test]
fn onnx_models_convert_to_npz_npy_and_pytorch_that_numpy_and_torch_load_equal() {
    let tmp = tempfile::tempdir().unwrap();
    // ONNX models (onnx's fixtures, and every NumPy and torch dtype through a model
    // tensorfmt wrote) converted to npz and to pytorch; NumPy has no bfloat16 or float8,
    // and neither tool has ONNX's string tensors.
    let mut onnx_models: Vec<(PathBuf, bool)> =
        ["mlp.onnx", "constant_nodes.onnx", "torch_export.onnx"]
            .iter()
            .map(|n| (fixtures().join("onnx").join(n), true))
            .collect();
    for n in ["external_single.onnx", "external_per_tensor/model.onnx"] {
        onnx_models.push((fixtures().join("onnx").join(n), false));
    }
    for (src, numpy) in [
        ("npz/all_dtypes.npz", true),
        ("pytorch/all_dtypes.pt", false),
    ] {
        let out = tmp.path().join(src.replace('/', "_") + ".onnx");
        let src = fixtures().join(src);
        let (code, text) = cli(&["convert", src.to_str().unwrap(), out.to_str().unwrap()]);
        assert_eq!(code, std::process::ExitCode::SUCCESS, "{text}");
        onnx_models.push((out, numpy));
    }
    let mut pt = Vec::new();
    for (i, (src, numpy)) in onnx_models.iter().enumerate() {
        let expected = tensors_of(src);
        if *numpy {
            let out = tmp.path().join(format!("{i}.npz"));
            let (code, text) = cli(&["convert", src.to_str().unwrap(), out.to_str().unwrap()]);
            assert_eq!(
                code,
                std::process::ExitCode::SUCCESS,
                "{}: {text}",
                src.display()
            );
            let got = tensorfmt_tests::numpy_json(&out);
            // Member names are made safe relative names: torch's `/layer/Constant_output_0`
            // is stored (and read back by NumPy) as `layer/Constant_output_0`.
            let mut want = expected.clone();
            for t in want.as_array_mut().unwrap() {
                let name = t["name"]
                    .as_str()
                    .unwrap()
                    .trim_start_matches('/')
                    .to_string();
                t["name"] = name.into();
            }
            assert_eq!(got["tensors"], want, "{} as npz", src.display());
        }
        let out = tmp.path().join(format!("{i}.pt"));
        let (code, text) = cli(&["convert", src.to_str().unwrap(), out.to_str().unwrap()]);
        assert_eq!(
            code,
            std::process::ExitCode::SUCCESS,
            "{}: {text}",
            src.display()
        );
        pt.push((out, expected, src.clone()));
    }
    let paths: Vec<&str> = pt.iter().map(|(p, ..)| p.to_str().unwrap()).collect();
    let described = tensorfmt_tests::tfcheck_torch(&[&["describe"], &paths[..]].concat());
    for ((_, expected, src), line) in pt.iter().zip(described.lines()) {
        assert_eq!(
            json(line)["tensors"],
            *expected,
            "{} as pytorch",
            src.display()
        );
    }
    // A model of one tensor to .npy.
    let src = fixtures().join("onnx/mlp.onnx");
    let one = tmp.path().join("one.onnx");
    let f = TensorFile::open(&src).unwrap();
    let w1 = f.load("W1").unwrap();
    tensorfmt::save(
        &one,
        None,
        [(
            tensorfmt::TensorMeta::from_info(&w1.info).unwrap(),
            w1.data.as_bytes(),
        )],
        &Default::default(),
    )
    .unwrap();
    let out = tmp.path().join("w1.npy");
    let (code, text) = cli(&["convert", one.to_str().unwrap(), out.to_str().unwrap()]);
    assert_eq!(code, std::process::ExitCode::SUCCESS, "{text}");
    let got = tensorfmt_tests::numpy_json(&out)["tensors"][0]["sha256"].clone();
    assert_eq!(got, tensors_of(&src)[0]["sha256"]);
}

#[test]
fn constants_sharing_an_external_file_with_initializers_keep_their_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("in").join("model.onnx");
    std::fs::create_dir_all(src.parent().unwrap()).unwrap();
    // onnx puts the Constant's tensor and the initializer in the same file.
    let code = r#"
import sys
import numpy as np
import onnx
from onnx import helper, numpy_helper
w = numpy_helper.from_array(np.arange(600, dtype=np.float32).reshape(20, 30), "w")
c = numpy_helper.from_array(np.arange(500, dtype=np.int64), "")
node = helper.make_node("Constant", [], ["c"], value=c)
g = helper.make_graph([node], "g", [], [helper.make_tensor_value_info("c", onnx.TensorProto.INT64, [500])], [w])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
m.ir_version = 10
onnx.save_model(m, sys.argv[1], save_as_external_data=True, all_tensors_to_one_file=True,
                location="model.data", size_threshold=0, convert_attribute=True)
onnx.checker.check_model(sys.argv[1], full_check=True)
"#;
    let (ok, text) = python_snippet(code, &[src.to_str().unwrap()]);
    assert!(ok, "{text}");
    let expected = tensors_of(&src);
    let graph = graph_without_weights(&src);
    for out in [
        tmp.path().join("in").join("again.onnx"),
        tmp.path().join("out").join("m.onnx"),
    ] {
        std::fs::create_dir_all(out.parent().unwrap()).unwrap();
        tensorfmt::rewrite_storage(&src, &out, &RewriteOptions::default()).unwrap();
        assert_eq!(onnx_tensors(&out), expected, "{}", out.display());
        assert_eq!(graph_without_weights(&out), graph, "{}", out.display());
    }
    // The source still reads as it did.
    assert_eq!(onnx_tensors(&src), expected);
}
