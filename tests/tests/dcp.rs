//! torch.distributed.checkpoint folders (`formats/src/dcp.rs`): checkpoints that real
//! multi-process runs saved (gloo, 2 and 4 ranks: the committed fixtures, and unseen ones
//! saved each run) list with their global names, dtypes, shapes and digests as
//! `dcp_to_torch_save` gives them; a slice read for a rank of another world size equals
//! what `dcp.load` gives that rank, and any slice equals the same box of the whole
//! tensor; hostile metadata gets clear errors.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use tensorfmt::{TensorFile, TensorInfo};
use tensorfmt_tests::{cli, fixtures, inspect_json, json, python_snippet, run_seed};

fn dir() -> PathBuf {
    fixtures().join("dcp")
}

const FIXTURES: [&str; 2] = ["world2", "world4"];

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// Runs `tests/py/tfcheck_dcp.py` with `args`.
fn tfcheck(args: &[&str]) -> String {
    let script = tensorfmt_tests::repo_root().join("tests/py/tfcheck_dcp.py");
    let out = std::process::Command::new(tensorfmt_tests::python())
        .arg(&script)
        .args(args)
        .output()
        .expect("running tfcheck_dcp.py");
    assert!(
        out.status.success(),
        "tfcheck_dcp.py {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

/// A JSON array of non-negative integers.
fn ints(v: &serde_json::Value) -> Vec<u64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect()
}

/// The digest `inspect --sha256` gives a loaded tensor.
fn sha256(t: &tensorfmt::Tensor) -> String {
    use tensorfmt::runtime::hash::{hex, tensor_sha256};
    hex(&tensor_sha256(&t.info, t.data.as_bytes()).unwrap())
}

#[test]
fn every_fixture_lists_as_dcp_to_torch_save_gives_it() {
    for f in FIXTURES {
        let want = json(
            &std::fs::read_to_string(dir().join("expected").join(format!("{f}.json"))).unwrap(),
        );
        assert_eq!(inspect_json(&dir().join(f)), want, "{f}");
        assert_eq!(
            inspect_json(&dir().join(f).join(".metadata")),
            want,
            "{f}/.metadata"
        );
    }
    // The values beside the tensors, as torch.save'd in their items.
    let (code, out) = cli(&["inspect", s(&dir().join("world2"))]);
    assert_eq!(code, ExitCode::SUCCESS);
    assert!(out.contains("torch-dcp (8 tensors)"), "{out}");
    assert!(
        out.contains("optim = {'lr': ") && out.contains("'betas': (0.9, 0.95)"),
        "{out}"
    );
}

#[test]
fn unseen_checkpoints_saved_by_2_3_and_4_ranks() {
    let tmp = tempfile::tempdir().unwrap();
    let seed: u64 = run_seed().parse().unwrap();
    for world in [2u64, 3, 4] {
        let out = tmp.path().join(format!("world{world}"));
        let case = (seed + world).to_string();
        tfcheck(&["save", s(&out), &world.to_string(), &case]);
        let want = json(&tfcheck(&["describe", s(&out)]));
        assert_eq!(inspect_json(&out), want, "world {world}, seed {case}");
    }
}

/// The box of `info`'s elements (C order) at `offsets` of `sizes`, cut from the whole
/// tensor.
fn cut(whole: &[u8], info: &TensorInfo, offsets: &[u64], sizes: &[u64]) -> Vec<u8> {
    let item = info.dtype.itemsize().unwrap();
    let nd = info.shape.len();
    if nd == 0 {
        return whole.to_vec();
    }
    let mut out = Vec::new();
    let rows: u64 = sizes[..nd - 1].iter().product();
    for r in 0..rows {
        // The row's index along the leading dimensions.
        let mut rest = r;
        let mut at = vec![0u64; nd];
        for d in (0..nd - 1).rev() {
            at[d] = offsets[d] + rest % sizes[d];
            rest /= sizes[d];
        }
        at[nd - 1] = offsets[nd - 1];
        let linear = at
            .iter()
            .zip(&info.shape)
            .fold(0u64, |linear, (&i, &n)| linear * n + i);
        let start = linear as usize * item;
        out.extend_from_slice(&whole[start..start + sizes[nd - 1] as usize * item]);
    }
    out
}

#[test]
fn a_rank_of_another_world_size_reads_what_dcp_load_gives_it() {
    for (f, world) in [("world4", "3"), ("world2", "4"), ("world4", "1")] {
        let ckpt = TensorFile::open(dir().join(f)).unwrap();
        let lines = tfcheck(&["reshard", s(&dir().join(f)), world]);
        let mut n = 0;
        for line in lines.lines() {
            let want = json(line);
            let name = want["name"].as_str().unwrap();
            let info = ckpt.tensor(name).unwrap();
            let ints = |k: &str| ints(&want[k]);
            let (offsets, sizes) = (ints("offsets"), ints("sizes"));
            let offsets = if info.shape.is_empty() {
                vec![]
            } else {
                offsets
            };
            let got = ckpt.load_slice(info, &offsets, &sizes).unwrap();
            assert_eq!(got.info.shape, sizes, "{f} at {world}: {name}");
            assert_eq!(
                sha256(&got),
                want["sha256"].as_str().unwrap(),
                "{f} read by rank {} of {world}: {name} at {offsets:?} of {sizes:?}",
                want["rank"]
            );
            n += 1;
        }
        assert!(n >= ckpt.tensors().len(), "{f} at {world}: {n} shards");
    }
}

#[test]
fn any_slice_is_the_same_box_of_the_whole_tensor() {
    let mut rng = tensorfmt_tests::kill::Rng(run_seed().parse::<u64>().unwrap() | 1);
    for f in FIXTURES {
        let ckpt = TensorFile::open(dir().join(f)).unwrap();
        for info in ckpt.tensors() {
            let whole = ckpt.load_info(info).unwrap();
            for _ in 0..20 {
                let mut offsets = Vec::new();
                let mut sizes = Vec::new();
                for &n in &info.shape {
                    let o = rng.between(0, n);
                    offsets.push(o);
                    sizes.push(rng.between(0, n - o));
                }
                let got = ckpt.load_slice(info, &offsets, &sizes).unwrap();
                let want = cut(whole.data.as_bytes(), info, &offsets, &sizes);
                assert!(
                    got.data.as_bytes() == &want[..],
                    "{f}: {} at {offsets:?} of {sizes:?}",
                    info.name
                );
            }
        }
        // The same of a file of another format: the box cut from the whole tensor.
        let tmp = tempfile::tempdir().unwrap();
        let pt = tmp.path().join("full.pt");
        tensorfmt_tests::convert(&dir().join(f), &pt, &[]);
        let single = TensorFile::open(&pt).unwrap();
        for info in single.tensors().iter().filter(|t| t.shape.len() == 2) {
            let whole = single.load_info(info).unwrap();
            let (o, z) = ([1, 0], [info.shape[0] - 1, info.shape[1]]);
            let got = single.load_slice(info, &o, &z).unwrap();
            assert!(got.data.as_bytes() == &cut(whole.data.as_bytes(), info, &o, &z)[..]);
        }
        // A box past the tensor is refused, naming it.
        let info = &ckpt.tensors()[0];
        let e = ckpt
            .load_slice(info, &[info.shape[0], 0], &[1, 1])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("runs past the tensor's shape") && e.contains(&info.name),
            "{e}"
        );
    }
}

/// A copy of fixture `f` whose `.metadata` is what `code` (Python, given the path of a
/// copy of the real one as `sys.argv[1]`, with `md` loaded from it) writes back.
fn with_metadata(tmp: &Path, name: &str, f: &str, code: &str) -> PathBuf {
    let d = tmp.join(name);
    std::fs::create_dir(&d).unwrap();
    for e in std::fs::read_dir(dir().join(f)).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), d.join(e.file_name())).unwrap();
    }
    let script = format!(
        "import pickle, sys, torch\nfrom torch.distributed.checkpoint.metadata import *\n\
         p = sys.argv[1] + '/.metadata'\nmd = pickle.load(open(p, 'rb'))\n{code}\n\
         open(p, 'wb').write(pickle.dumps(md) if not isinstance(md, bytes) else md)\n"
    );
    let (ok, out) = python_snippet(&script, &[s(&d)]);
    assert!(ok, "{name}: {out}");
    d
}

fn open_err(d: &Path) -> String {
    let r = TensorFile::open(d).and_then(|f| {
        f.read_all(&mut tensorfmt::runtime::hash::HashSink::new())?;
        f.structure()?;
        Ok(f)
    });
    r.expect_err("refused").to_string()
}

#[test]
fn hostile_metadata_gets_clear_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let first = "k = next(iter(md.state_dict_metadata))\ntsm = md.state_dict_metadata[k]\n";
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "global",
            "import os\nmd.planner_data = os.system".into(),
            "posix.system",
        ),
        (
            "past",
            format!(
                "{first}tsm.chunks[0].sizes = torch.Size([99] + list(tsm.chunks[0].sizes)[1:])"
            ),
            "runs past the tensor's size",
        ),
        (
            "overlap",
            format!("{first}tsm.chunks.append(tsm.chunks[0])"),
            "overlap",
        ),
        (
            "hole",
            format!("{first}tsm.size = torch.Size([tsm.size[0] + 1] + list(tsm.size)[1:])"),
            "do not tile",
        ),
        (
            "no_item",
            "md.storage_data = {k: v for i, (k, v) in enumerate(md.storage_data.items()) if i}"
                .into(),
            "has no item in `storage_data`",
        ),
        (
            "escape",
            "for v in md.storage_data.values(): v.relative_path = '../../x.distcp'".into(),
            "leaves the model's folder",
        ),
        (
            "range",
            "for v in md.storage_data.values(): v.length += 10**9".into(),
            "item at byte",
        ),
        (
            "transform",
            "for v in md.storage_data.values(): v.transform_descriptors = ['zstd']".into(),
            "transforms",
        ),
        (
            // A size the items do not hold: refused before the tensor is allocated.
            "huge",
            "k = next(k for k, v in md.state_dict_metadata.items() if getattr(v, 'size', None) is not None and len(v.size) == 1 and v.chunks[0].offsets == torch.Size([0]))\n\
             tsm = md.state_dict_metadata[k]\n\
             tsm.size = torch.Size([1 << 40])\n\
             tsm.chunks = [ChunkStorageMetadata(offsets=torch.Size([0]), sizes=torch.Size([1 << 40]))]"
                .into(),
            "the chunk [1099511627776]",
        ),
        (
            "not_metadata",
            "md = pickle.dumps({'a': 1}, protocol=4)".into(),
            "no DCP `Metadata` object",
        ),
        (
            "dtype",
            format!("{first}import dataclasses\ntsm.properties.dtype = torch.float64"),
            "the metadata says f64",
        ),
    ];
    for (name, code, why) in &cases {
        let d = with_metadata(t, name, "world2", code);
        let e = if *name == "not_metadata" {
            let o = tensorfmt::OpenOptions {
                format: Some("torch-dcp".into()),
                ..Default::default()
            };
            TensorFile::open_with(d.join(".metadata"), &o)
                .unwrap_err()
                .to_string()
        } else if *name == "global" {
            // Refused under --weights-only; read by default, the global an inert value
            // of `planner_data` (which the tensors do not depend on).
            let mut o = tensorfmt::OpenOptions::default();
            o.limits.weights_only = true;
            let inert = TensorFile::open(&d).expect("read inertly");
            inert
                .read_all(&mut tensorfmt::runtime::hash::HashSink::new())
                .unwrap();
            TensorFile::open_with(&d, &o).unwrap_err().to_string()
        } else {
            open_err(&d)
        };
        assert!(e.contains(why), "{name}: {e}");
        assert!(e.contains(name), "{name}: the file is named: {e}");
    }
    // An item that is not a torch.save archive.
    let d = with_metadata(t, "garbage", "world2", "pass");
    std::fs::write(d.join("__0_0.distcp"), vec![7u8; 9000]).unwrap();
    let e = open_err(&d);
    assert!(e.contains("not a torch.save archive"), "{e}");
}

#[test]
fn what_tensorfmt_writes_torch_loads_at_other_world_sizes() {
    let tmp = tempfile::tempdir().unwrap();
    let cases = [
        (dir().join("world4"), "3", "2"),
        (
            fixtures().join("sharded").join("safetensors_shards"),
            "2",
            "3",
        ),
        (
            fixtures().join("pytorch").join("checkpoint_adam.pt"),
            "4",
            "1",
        ),
        (fixtures().join("npz").join("savez_stored.npz"), "1", "2"),
    ];
    for (i, (input, world, load_world)) in cases.iter().enumerate() {
        let source = TensorFile::open(input).unwrap();
        let out = tmp.path().join(format!("out{i}"));
        let (code, text) = cli(&[
            "convert",
            s(input),
            s(&out),
            "--to",
            "torch-dcp",
            "--world-size",
            world,
        ]);
        assert_eq!(code, ExitCode::SUCCESS, "{text}");
        let files: Vec<String> = std::fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            files.len(),
            world.parse::<usize>().unwrap() + 1,
            "{files:?}"
        );
        // dcp_to_torch_save gives the source's tensors.
        let described = json(&tfcheck(&["describe", s(&out)]));
        let by_name = tensorfmt_tests::tensors_by_name;
        let src_json = inspect_json(input);
        // npz names are loaded as written; bool, ints and floats alike.
        assert_eq!(
            by_name(&described),
            by_name(&src_json),
            "{}",
            input.display()
        );
        assert_eq!(by_name(&inspect_json(&out)), by_name(&src_json));
        // Each rank of another world size loads the rows of the source it should.
        for line in tfcheck(&["reshard", s(&out), load_world]).lines() {
            let want = json(line);
            let info = source.tensor(want["name"].as_str().unwrap()).unwrap();
            let ints = |k: &str| ints(&want[k]);
            let got = source
                .load_slice(info, &ints("offsets"), &ints("sizes"))
                .unwrap();
            assert_eq!(
                sha256(&got),
                want["sha256"].as_str().unwrap(),
                "{}: rank {} of {load_world}: {}",
                input.display(),
                want["rank"],
                info.name
            );
        }
    }
    // A checkpoint's values and nesting come back through dcp_to_torch_save.
    let out = tmp.path().join("out2");
    let pt = tmp.path().join("back.pt");
    tfcheck(&["to-torch", s(&out), s(&pt)]);
    let values = |p: &Path| {
        let (code, text) = cli(&["inspect", "--json", "--values", s(p)]);
        assert_eq!(code, ExitCode::SUCCESS);
        json(&text)["values"].clone()
    };
    assert_eq!(
        values(&pt),
        values(&fixtures().join("pytorch").join("checkpoint_adam.pt"))
    );
}

#[test]
fn the_output_is_a_dcp_folder_replaced_whole() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("ckpt");
    for world in ["4", "2"] {
        let (code, text) = cli(&[
            "convert",
            s(&dir().join("world2")),
            s(&out),
            "--to",
            "torch-dcp",
            "--world-size",
            world,
        ]);
        assert_eq!(code, ExitCode::SUCCESS, "{text}");
    }
    // The second save replaced the first: two ranks' files, not four.
    let mut names: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, [".metadata", "__0_0.distcp", "__1_0.distcp"]);
    // Anything else at the output is refused and left as it was.
    let other = tmp.path().join("other");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("keep"), b"x").unwrap();
    let (code, _) = cli(&[
        "convert",
        s(&dir().join("world2")),
        s(&other),
        "--to",
        "torch-dcp",
    ]);
    assert_ne!(code, ExitCode::SUCCESS);
    assert_eq!(std::fs::read(other.join("keep")).unwrap(), b"x");
}
