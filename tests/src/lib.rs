//! Shared helpers of the integration tests: where the fixtures are, the Python
//! environment with the real tools, running the command line in process, the committed
//! hostile corpora, and counting allocations.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::OnceLock;

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// `tests/fixtures`.
pub fn fixtures() -> PathBuf {
    repo_root().join("tests/fixtures")
}

/// The Python interpreter of the project's test environment (with the pinned NumPy and
/// torch),
/// from `TENSORFMT_PYTHON` or made by `scripts/pyenv.sh`. Panics with the script's
/// output when the environment cannot be made: interop tests are never skipped silently.
pub fn python() -> &'static Path {
    static PY: OnceLock<PathBuf> = OnceLock::new();
    PY.get_or_init(|| {
        if let Some(p) = std::env::var_os("TENSORFMT_PYTHON") {
            return PathBuf::from(p);
        }
        let out = Command::new("bash")
            .arg(repo_root().join("scripts/pyenv.sh"))
            .output()
            .expect("running scripts/pyenv.sh");
        assert!(
            out.status.success(),
            "scripts/pyenv.sh failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        PathBuf::from(
            stdout
                .lines()
                .last()
                .expect("pyenv.sh prints the python path")
                .trim(),
        )
    })
}

/// Runs the script `tests/py/<script>` with the test environment's Python and `args`;
/// returns stdout, panicking with its output on failure.
fn run_script(script: &str, args: &[&str]) -> String {
    let out = Command::new(python())
        .arg(repo_root().join("tests/py").join(script))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {script}: {e}"));
    assert!(
        out.status.success(),
        "{script} {} failed:\n{}{}",
        args.first().copied().unwrap_or_default(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

/// Runs `tests/py/tfcheck.py` (NumPy) with `args`; returns stdout, panicking with its
/// output on failure.
pub fn tfcheck(args: &[&str]) -> String {
    run_script("tfcheck.py", args)
}

/// Runs `tests/py/tfcheck_torch.py` (real torch) with `args`; returns stdout, panicking
/// with its output on failure.
pub fn tfcheck_torch(args: &[&str]) -> String {
    run_script("tfcheck_torch.py", args)
}

/// Runs `tests/py/tfcheck_onnx.py` (real onnx and onnxruntime) with `args`; returns
/// stdout, panicking with its output on failure.
pub fn tfcheck_onnx(args: &[&str]) -> String {
    run_script("tfcheck_onnx.py", args)
}

/// Runs `tests/py/tfcheck_caffe2.py` (the pinned `lmdb`, `plyvel` and `protobuf`) with
/// `args`; returns stdout, panicking with its output on failure.
pub fn tfcheck_caffe2(args: &[&str]) -> String {
    run_script("tfcheck_caffe2.py", args)
}

/// Runs `tests/py/tfcheck_objects.py` (torch, safetensors and NumPy load what a pickle of
/// whole objects was converted to) with `args`; returns stdout, panicking with its
/// output on failure.
pub fn tfcheck_objects(args: &[&str]) -> String {
    run_script("tfcheck_objects.py", args)
}

/// Runs `tests/py/tfcheck_safetensors.py` (the pinned `safetensors` package) with
/// `args`; returns stdout, panicking with its output on failure.
pub fn tfcheck_safetensors(args: &[&str]) -> String {
    run_script("tfcheck_safetensors.py", args)
}

/// Runs `tests/py/tfcheck_sharded.py` (the pinned `huggingface_hub`) with `args`;
/// returns stdout, panicking with its output on failure.
pub fn tfcheck_sharded(args: &[&str]) -> String {
    run_script("tfcheck_sharded.py", args)
}

/// The seed of this run's unseen files: `TENSORFMT_SEED` when set (to reproduce a run),
/// else a new one, printed either way.
pub fn run_seed() -> String {
    let seed = std::env::var("TENSORFMT_SEED").unwrap_or_else(|_| {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("a clock after 1970");
        (t.as_nanos() % 1_000_000_007).to_string()
    });
    eprintln!("make-random seed {seed} (TENSORFMT_SEED={seed} reproduces this run)");
    seed
}

/// Runs a Python snippet with the test environment's interpreter; returns (success, output).
pub fn python_snippet(code: &str, args: &[&str]) -> (bool, String) {
    let out = Command::new(python())
        .arg("-c")
        .arg(code)
        .args(args)
        .output()
        .expect("running python");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// The metadata of a tensor in C order, little-endian.
pub fn meta(name: &str, dtype: tensorfmt::DType, shape: &[u64]) -> tensorfmt::TensorMeta {
    tensorfmt::TensorMeta {
        name: name.into(),
        dtype,
        shape: shape.to_vec(),
        order: tensorfmt::Order::C,
        byte_order: tensorfmt::ByteOrder::Little,
    }
}

/// A safetensors file as the format's specification lays it out: the header's length
/// (`u64` little-endian), the JSON `header` padded with spaces to 8 bytes, the `data`.
pub fn safetensors_bytes(header: &[u8], data: &[u8]) -> Vec<u8> {
    let mut h = header.to_vec();
    while !h.len().is_multiple_of(8) {
        h.push(b' ');
    }
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&h);
    out.extend_from_slice(data);
    out
}

/// `tensorfmt convert INPUT OUTPUT` with `extra` flags after the paths, in process;
/// panics with its output unless it succeeds.
pub fn convert(input: &Path, output: &Path, extra: &[&str]) {
    let paths = [input, output].map(|p| p.to_str().expect("utf-8 path"));
    let args = [&["convert"], &paths[..], extra].concat();
    let (code, out) = cli(&args);
    assert_eq!(code, ExitCode::SUCCESS, "convert {args:?}: {out}");
}

/// The tensors of a description (`inspect --json`, a tool's `describe`), sorted by name.
pub fn tensors_by_name(description: &serde_json::Value) -> Vec<serde_json::Value> {
    let mut v = description["tensors"]
        .as_array()
        .expect("a description's tensors")
        .clone();
    v.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    v
}

/// Runs the `tensorfmt` command line in process; returns its exit code and stdout.
pub fn cli(args: &[&str]) -> (ExitCode, String) {
    let mut out = Vec::new();
    let argv = std::iter::once("tensorfmt")
        .chain(args.iter().copied())
        .map(Into::into);
    let code = tensorfmt::cli::run(argv, &mut out);
    (code, String::from_utf8(out).expect("utf-8 output"))
}

/// Parses `inspect --json` output.
pub fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// `inspect --json --sha256` of `path` by tensorfmt, as JSON.
pub fn inspect_json(path: &Path) -> serde_json::Value {
    let (code, out) = cli(&[
        "inspect",
        "--json",
        "--sha256",
        path.to_str().expect("utf-8 path"),
    ]);
    assert_eq!(
        code,
        ExitCode::SUCCESS,
        "inspect failed for {}",
        path.display()
    );
    json(&out)
}

/// The same description computed by NumPy.
pub fn numpy_json(path: &Path) -> serde_json::Value {
    json(&tfcheck(&["describe", path.to_str().expect("utf-8 path")]))
}

/// The error of opening `path` as `format` and hashing every tensor; panics when the
/// file is accepted.
pub fn open_err_as(path: &Path, format: &str) -> String {
    let r = (|| {
        let f = tensorfmt::TensorFile::open_with(
            path,
            &tensorfmt::OpenOptions {
                format: Some(format.into()),
                ..Default::default()
            },
        )?;
        f.read_all(&mut tensorfmt::runtime::hash::HashSink::new())?;
        Ok::<_, tensorfmt::Error>(f.tensors().len())
    })();
    match r {
        Ok(n) => panic!("{} was accepted ({n} tensors)", path.display()),
        Err(e) => e.to_string(),
    }
}

/// The files of a hostile corpus in `folder`: every name but `manifest.json` and those
/// of `skip` (a generator kept beside its files).
pub fn corpus_files(folder: &Path, skip: &[&str]) -> BTreeSet<String> {
    std::fs::read_dir(folder)
        .unwrap_or_else(|e| panic!("{}: {e}", folder.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "manifest.json" && !skip.contains(&n.as_str()))
        .collect()
}

/// Runs `generator`, a command that writes a hostile corpus into `made` (an empty folder),
/// and asserts that it writes the files of the `committed` corpus (`skip` as for
/// [`corpus_files`]) and its `manifest.json`, byte for byte.
pub fn assert_generator_writes(
    mut generator: Command,
    made: &Path,
    committed: &Path,
    skip: &[&str],
) {
    let out = generator
        .output()
        .unwrap_or_else(|e| panic!("running {generator:?}: {e}"));
    assert!(
        out.status.success(),
        "{generator:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let files = corpus_files(made, skip);
    assert_eq!(
        files,
        corpus_files(committed, skip),
        "the generator writes other files"
    );
    for f in files.iter().map(String::as_str).chain(["manifest.json"]) {
        assert!(
            std::fs::read(made.join(f)).unwrap() == std::fs::read(committed.join(f)).unwrap(),
            "{f} differs from what the generator writes (run it again after changing it or \
             the fixtures it reads)"
        );
    }
}

pub mod kill;
pub mod s3;

/// The peak resident set of this process, in bytes (Linux `VmHWM`).
pub fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The largest single allocation a test makes, for the tests that check that hostile input
/// allocates nothing beyond its size: a test crate installs [`alloc::Counting`] as its
/// global allocator and wraps the work in [`alloc::armed`]. Tests run in parallel threads;
/// only the armed thread's allocations count.
pub mod alloc {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;

    /// The system allocator, recording the largest allocation of an armed thread and the
    /// most bytes it held at once.
    pub struct Counting;

    thread_local! {
        static ARMED: Cell<bool> = const { Cell::new(false) };
        static LARGEST: Cell<usize> = const { Cell::new(0) };
        /// Bytes allocated less bytes freed since arming, and the most it reached.
        static LIVE: Cell<isize> = const { Cell::new(0) };
        static PEAK: Cell<isize> = const { Cell::new(0) };
    }

    fn record(size: usize) {
        // `try_with`: allocations made while a thread's locals are torn down count not.
        let _ = ARMED.try_with(|a| {
            if a.get() {
                let _ = LARGEST.try_with(|l| l.set(l.get().max(size)));
            }
        });
    }

    /// `delta` more bytes held by an armed thread.
    fn held(delta: isize) {
        let _ = ARMED.try_with(|a| {
            if a.get() {
                let _ = LIVE.try_with(|l| {
                    let now = l.get().saturating_add(delta);
                    l.set(now);
                    let _ = PEAK.try_with(|p| p.set(p.get().max(now)));
                });
            }
        });
    }

    // SAFETY: every call is passed on to the system allocator unchanged.
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            record(layout.size());
            held(layout.size() as isize);
            unsafe { System.alloc(layout) }
        }
        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            held(-(layout.size() as isize));
            unsafe { System.dealloc(ptr, layout) }
        }
        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            record(new_size);
            held(new_size as isize - layout.size() as isize);
            unsafe { System.realloc(ptr, layout, new_size) }
        }
    }

    /// Runs `f` and returns its result with the largest single allocation it made (with
    /// [`Counting`] installed; 0 otherwise).
    pub fn armed<T>(f: impl FnOnce() -> T) -> (T, usize) {
        LARGEST.with(|l| l.set(0));
        ARMED.with(|a| a.set(true));
        let out = f();
        ARMED.with(|a| a.set(false));
        (out, LARGEST.with(|l| l.get()))
    }

    /// Runs `f` and returns its result with the most bytes it held allocated at once,
    /// counted from the call (with [`Counting`] installed; 0 otherwise). What `f`
    /// returns is still held when it is measured.
    pub fn peak<T>(f: impl FnOnce() -> T) -> (T, usize) {
        LIVE.with(|l| l.set(0));
        PEAK.with(|p| p.set(0));
        ARMED.with(|a| a.set(true));
        let out = f();
        ARMED.with(|a| a.set(false));
        (out, PEAK.with(|p| p.get()).max(0) as usize)
    }
}

/// The README's examples as doc tests: the library example compiled and run, the
/// dataset loop compiled, so that they cannot drift from the API.
#[doc = include_str!("../../README.md")]
#[doc(hidden)]
pub mod readme {}
