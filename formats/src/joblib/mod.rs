//! Files `joblib.dump` writes (joblib 1.x; scikit-learn's models, `.joblib`, `.pkl`,
//! `.sav`), read in place: a pickle in which every NumPy array is replaced by a
//! `joblib.numpy_pickle.NumpyArrayWrapper` object whose array bytes follow its `BUILD`
//! opcode in the stream, aligned to 16 bytes in the file since joblib 1.2; or that whole
//! byte sequence as one zlib, gzip, bz2, lzma, xz or lz4 stream (`compress=`).
//!
//! Written by hand rather than in a `.fmt` schema: the `.fmt` language has no construct
//! for array bytes that follow a pickle opcode inline in the stream (outside any pickle
//! value), nor for a compressor the whole file goes through.
//!
//! Reading (`read.rs`): the pickle read with NumPy's rules of the `pickle` format, joblib's
//! wrapper allowed with its inline data (`wrapper.rs`: the padding byte, then the array's
//! bytes, or an object array's own pickle, whose end `scan.rs` finds) and every other
//! global (an estimator's class) read inertly, nothing imported or run. Each wrapper of
//! a dtype with a tensor element type is a tensor named by its path in the object; its
//! bytes are a range of the mapped file (zero-copy views), or of the inflated stream of
//! a compressed file (`compress.rs`: held in memory within the per-file budget of
//! decompressed bytes). NumPy arrays pickled by NumPy itself (subclasses joblib does not
//! wrap) are mapped as the `pickle` format maps them. Arrays of text, Python objects,
//! datetimes or records are no tensors: the structure keeps them as objects.
//!
//! Not read: joblib's files of before 0.10, whose arrays are `.npy` files beside the
//! pickle (`NDArrayWrapper`), and the `ZF` zlib files of before 0.9.3. Not written.

pub(crate) mod compress;
mod dict;
mod lz4;
mod read;
mod scan;
mod wrapper;

use compress::{inflate_start, Compressor};

use crate::{FormatDesc, Limits, Node, Result, Source, TensorInfo};
use tensorfmt_runtime::pickle;

/// The format, read only: `TensorFile::open` on a file `joblib.dump` wrote.
pub const DESC: FormatDesc =
    FormatDesc::new("joblib", &["joblib", "pkl", "pickle", "sav"], detect, index)
        .structure(structure);

/// The bytes detection looks at: of the file, or of the stream a compressed file
/// inflates to.
const WINDOW: usize = 64 << 10;

/// The most of a compressed file detection inflates the start of: a bz2 stream gives
/// nothing before its first block (up to 900 kB) is read whole.
const COMPRESSED_WINDOW: u64 = 1 << 20;

/// A joblib file: a pickle (or a joblib compressor's stream whose start inflates to one)
/// that names joblib's `NumpyArrayWrapper` in its first 64 KiB, or any pickle of a
/// `.joblib` file (one holding no array).
fn detect(src: &Source, limits: &Limits) -> bool {
    let read = |n: u64| {
        let mut b = vec![0u8; src.data().len().min(n) as usize];
        src.data().read_exact_at(0, &mut b).ok().map(|()| b)
    };
    let Some(first) = read(8) else {
        return false;
    };
    let head = match Compressor::of(&first) {
        Some(c) => match read(COMPRESSED_WINDOW) {
            Some(input) => {
                let budget = limits.inflated_budget(src.data().len());
                inflate_start(c, &input, WINDOW, budget)
            }
            None => return false,
        },
        None if pickle::starts_as_pickle(&first) => match read(WINDOW as u64) {
            Some(head) => head,
            None => return false,
        },
        None => return false,
    };
    let named = src
        .path()
        .and_then(|p| p.extension())
        .is_some_and(|e| e.eq_ignore_ascii_case("joblib"));
    pickle::starts_as_pickle(&head)
        && (named || pickle::names_global(&head, "joblib.numpy_pickle", "NumpyArrayWrapper"))
}

fn index(src: &Source, limits: &Limits) -> Result<Vec<TensorInfo>> {
    Ok(read::read(src, limits, false)?.0)
}

fn structure(src: &Source, limits: &Limits) -> Result<Option<Node>> {
    Ok(read::read(src, limits, true)?.1)
}
