//! Workloads shared by the criterion benches (`benches/benches/*.rs`) and the `tfbench`
//! timing binary (`src/bin/tfbench.rs`, driven by `compare*.py` against the Python
//! libraries).
//!
//! Every operation exists once here, for tensorfmt ([`tf`]), ndarray-npy ([`nd`]), the
//! safetensors crate ([`st`]), candle (`candle`, with the feature of that name) and the
//! memcpy reference ([`mem`]), so that the criterion groups and the comparisons time
//! exactly the same code. tensorfmt is used through its public API only.

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use tensorfmt::{ByteOrder, DType, Order, TensorMeta};

/// Any error of a workload.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;
/// Result of a workload.
pub type Result<T> = std::result::Result<T, BoxError>;

/// One mebibyte.
pub const MIB: usize = 1 << 20;

/// `len_bytes / 4` deterministic pseudo-random `f32` values in `[-1, 1)` (xorshift64*),
/// as little-endian bytes. Random mantissas compress about as badly as trained weights.
pub fn f32_bytes(len_bytes: usize, seed: u64) -> Vec<u8> {
    let n = len_bytes / 4;
    let mut out = Vec::with_capacity(n * 4);
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for _ in 0..n {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        let r = s.wrapping_mul(0x2545_F491_4F6C_DD1D);
        let v = (r >> 40) as f32 / (1u64 << 23) as f32 - 1.0;
        out.extend_from_slice(&v.to_le_bytes());
    }
    out
}

/// The metadata of a 1-d little-endian `f32` tensor of `nbytes` bytes.
pub fn f32_meta(name: &str, nbytes: usize) -> TensorMeta {
    TensorMeta {
        name: name.to_string(),
        dtype: DType::F32,
        shape: vec![(nbytes / 4) as u64],
        order: Order::C,
        byte_order: ByteOrder::Little,
    }
}

/// A human label for a byte size: `1MiB`, `256MiB`, `1GiB`.
pub fn size_label(bytes: usize) -> String {
    if bytes >= 1 << 30 && bytes % (1 << 30) == 0 {
        format!("{}GiB", bytes >> 30)
    } else if bytes >= MIB && bytes % MIB == 0 {
        format!("{}MiB", bytes / MIB)
    } else {
        format!("{}KiB", bytes / 1024)
    }
}

/// Flushes every dirty page of the system to disk, so that one write's writeback does
/// not land in the next measurement. Called outside the timed region, before each write.
pub fn sync_all() {
    // SAFETY: sync(2) takes no arguments and cannot fail.
    unsafe { libc::sync() };
}

/// Free bytes on the file system holding `dir`, if it can be asked.
pub fn free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid NUL-terminated path and `st` a valid out-pointer.
    let rc = unsafe { libc::statvfs(c.as_ptr(), &mut st) };
    (rc == 0).then(|| st.f_bavail as u64 * st.f_frsize as u64)
}

/// The directory benchmarks write their files in: `$TFBENCH_DIR` if set, else the system
/// temporary directory (on this project's machines, the same disk as the work tree).
pub fn bench_parent_dir() -> PathBuf {
    std::env::var_os("TFBENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir)
}

/// A fresh temporary directory under [`bench_parent_dir`], removed on drop.
pub fn bench_tempdir() -> Result<tempfile::TempDir> {
    let parent = bench_parent_dir();
    std::fs::create_dir_all(&parent)?;
    Ok(tempfile::Builder::new()
        .prefix("tfbench-")
        .tempdir_in(parent)?)
}

/// Removes `path` if it exists.
pub fn remove_if_exists(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
        _ => Ok(()),
    }
}

/// tensorfmt workloads, through the public API of the `tensorfmt` crate only.
pub mod tf {
    use super::*;
    use tensorfmt::runtime::sink::OwnedSink;
    use tensorfmt::{
        Compression, Flow, OpenOptions, Payload, Saver, Tensor, TensorFile, TensorInfo,
        WriteOptions,
    };

    /// Opens a file: memory map, format detection and index; no payload byte is read.
    pub fn open(path: &Path) -> Result<TensorFile> {
        Ok(TensorFile::open(path)?)
    }

    /// [`open`] as the format named `format` ([`OpenOptions::format`]): no detection.
    pub fn open_as(path: &Path, format: &str) -> Result<TensorFile> {
        let options = OpenOptions {
            format: Some(format.to_string()),
            ..OpenOptions::default()
        };
        Ok(TensorFile::open_with(path, &options)?)
    }

    /// Index-only open ([`open`], or [`open_as`] the format `format`) and the tensors
    /// listed (their names collected), everything dropped before returning: what the
    /// other libraries' "open and list the keys" does. Returns how many tensors.
    pub fn open_list(path: &Path, format: Option<&str>) -> Result<usize> {
        let file = match format {
            Some(f) => open_as(path, f)?,
            None => open(path)?,
        };
        let names: Vec<&str> = file.tensors().iter().map(|t| t.name.as_str()).collect();
        Ok(names.len())
    }

    /// Opens a file and reads every tensor into owned, aligned memory ([`OwnedSink`]).
    pub fn read_owned(path: &Path) -> Result<Vec<Tensor>> {
        let file = TensorFile::open(path)?;
        let mut sink = OwnedSink::new();
        file.read_all(&mut sink)?;
        Ok(sink.into_tensors())
    }

    /// Opens a file and loads every tensor with [`TensorFile::load_all`]: zero-copy views
    /// of the memory map where the bytes are stored plain (npy, stored npz members),
    /// owned copies otherwise.
    pub fn read_view(path: &Path) -> Result<Vec<Tensor>> {
        let file = TensorFile::open(path)?;
        Ok(file.load_all()?)
    }

    /// [`read_view`] with zip CRC-32 verification off ([`OpenOptions::skip_checksums`]):
    /// a stored npz member's view then costs no pass over its bytes.
    pub fn read_view_unchecked(path: &Path) -> Result<Vec<Tensor>> {
        let options = OpenOptions {
            skip_checksums: true,
            ..OpenOptions::default()
        };
        let file = TensorFile::open_with(path, &options)?;
        Ok(file.load_all()?)
    }

    /// The tensors of `path` as (name, owned bytes), names without a `.npy` suffix:
    /// the inputs of the write workloads.
    pub fn inputs(path: &Path) -> Result<Vec<(String, Vec<u8>)>> {
        Ok(read_owned(path)?
            .into_iter()
            .map(|t| {
                let name = t.info.name.trim_end_matches(".npy").to_string();
                (name, t.data.as_bytes().to_vec())
            })
            .collect())
    }

    fn options(compression: Option<Compression>) -> WriteOptions {
        WriteOptions {
            compression,
            ..Default::default()
        }
    }

    /// Saves with [`Saver`]: a temporary file, fsync, then an atomic rename (what
    /// [`tensorfmt::save`] does).
    pub fn save(
        path: &Path,
        format: &str,
        tensors: &[(String, Vec<u8>)],
        compression: Option<Compression>,
    ) -> Result<()> {
        let tensors = f32_tensors(tensors);
        save_with_meta(path, format, &tensors, compression)
    }

    /// Saves with the format's public writer ([`tensorfmt::FormatDesc::writer`]) straight
    /// into the destination through a `BufWriter`: no temporary file, no fsync, no rename
    /// — what `np.save` and ndarray-npy do.
    pub fn save_no_fsync(
        path: &Path,
        format: &str,
        tensors: &[(String, Vec<u8>)],
        compression: Option<Compression>,
    ) -> Result<()> {
        let tensors = f32_tensors(tensors);
        save_with_meta_no_fsync(path, format, &tensors, compression)
    }

    fn f32_tensors(tensors: &[(String, Vec<u8>)]) -> Vec<(TensorMeta, &[u8])> {
        tensors
            .iter()
            .map(|(name, bytes)| (f32_meta(name, bytes.len()), bytes.as_slice()))
            .collect()
    }

    /// [`save`] of tensors of any dtype and shape, each given as its metadata and bytes.
    pub fn save_with_meta(
        path: &Path,
        format: &str,
        tensors: &[(TensorMeta, &[u8])],
        compression: Option<Compression>,
    ) -> Result<()> {
        let mut saver = Saver::create(path, Some(format), &options(compression))?;
        for (meta, bytes) in tensors {
            saver.add_bytes(meta, bytes)?;
        }
        saver.commit()?;
        Ok(())
    }

    /// [`save_no_fsync`] of tensors of any dtype and shape, each given as its metadata
    /// and bytes.
    pub fn save_with_meta_no_fsync(
        path: &Path,
        format: &str,
        tensors: &[(TensorMeta, &[u8])],
        compression: Option<Compression>,
    ) -> Result<()> {
        let desc = tensorfmt::format_named(format).ok_or("unknown format")?;
        let out = BufWriter::new(File::create(path)?);
        let mut writer = (desc.writer)(Box::new(out), &options(compression))?;
        for (meta, bytes) in tensors {
            writer.add(meta, Payload::Bytes(bytes))?;
        }
        writer.finish()?;
        Ok(())
    }

    /// [`read_owned`] with zip CRC-32 verification off ([`OpenOptions::skip_checksums`]),
    /// as `torch.load` reads (it does not check the members' CRC-32).
    pub fn read_owned_unchecked(path: &Path) -> Result<Vec<Tensor>> {
        let options = OpenOptions {
            skip_checksums: true,
            ..OpenOptions::default()
        };
        let file = TensorFile::open_with(path, &options)?;
        let mut sink = OwnedSink::new();
        file.read_all(&mut sink)?;
        Ok(sink.into_tensors())
    }

    /// The metadata to write each of `tensors` back with (dtype, shape, order as read).
    pub fn metas(tensors: &[Tensor]) -> Result<Vec<TensorMeta>> {
        tensors
            .iter()
            .map(|t| {
                TensorMeta::from_info(&t.info)
                    .ok_or_else(|| format!("tensor '{}' is not contiguous", t.info.name).into())
            })
            .collect()
    }

    /// The absolute byte range of every tensor's payload in `path`, in file order, from
    /// tensorfmt's index: where the memcpy reference ([`crate::mem`]) copies from.
    /// Errors when a payload is not stored plain (a compressed member).
    pub fn payload_ranges(path: &Path) -> Result<Vec<std::ops::Range<usize>>> {
        let file = open(path)?;
        file.tensors()
            .iter()
            .map(|t| {
                let (offset, len) = t
                    .location
                    .plain_range(file.source().data())?
                    .ok_or_else(|| format!("tensor '{}' is not stored plain", t.name))?;
                let start = usize::try_from(offset)?;
                Ok(start..start + usize::try_from(len)?)
            })
            .collect()
    }

    /// A sink that copies every tensor into a buffer of its own, kept from one read to
    /// the next: a full load into memory that is already there (made and faulted in by
    /// [`ReuseSink::for_file`], outside any timing), as when weights are loaded again into
    /// the tensors of a model in use. Its reads allocate nothing and take no page fault on
    /// the destination; they are what a full load costs without the kernel's fresh pages.
    pub struct ReuseSink {
        bufs: Vec<crate::mem::FreshBuf>,
        lens: Vec<usize>,
        n: usize,
        filled: usize,
    }

    impl ReuseSink {
        /// One zeroed buffer per tensor of `file`, of its size.
        pub fn for_file(file: &TensorFile) -> Result<Self> {
            let mut bufs = Vec::new();
            let mut lens = Vec::new();
            for t in file.tensors() {
                let len = usize::try_from(t.nbytes()?)?;
                bufs.push(crate::mem::FreshBuf::zeroed(len.max(1))?);
                lens.push(len);
            }
            Ok(ReuseSink {
                bufs,
                lens,
                n: 0,
                filled: 0,
            })
        }

        /// Reads every tensor of `file` into the buffers (their contents replaced); returns
        /// the tensors read.
        pub fn read(&mut self, file: &TensorFile) -> Result<usize> {
            self.n = 0;
            file.read_all(self)?;
            if self.n != self.bufs.len() {
                return Err(format!("{} tensors read, {} buffers", self.n, self.bufs.len()).into());
            }
            Ok(self.n)
        }

        /// The bytes of tensor `i` of the last read.
        pub fn bytes(&self, i: usize) -> &[u8] {
            &self.bufs[i].as_slice()[..self.lens[i]]
        }
    }

    impl tensorfmt::Sink for ReuseSink {
        fn begin(&mut self, info: &TensorInfo) -> tensorfmt::Result<Flow> {
            if self.n >= self.bufs.len() {
                return Err(sink_error(format!("no buffer for tensor '{}'", info.name)));
            }
            self.filled = 0;
            Ok(Flow::Continue)
        }

        fn keeps_views(&self) -> bool {
            false
        }

        fn chunk(&mut self, bytes: &[u8]) -> tensorfmt::Result<()> {
            let end = self.filled + bytes.len();
            if end > self.lens[self.n] {
                return Err(sink_error(format!(
                    "tensor {} is over its {} bytes",
                    self.n, self.lens[self.n]
                )));
            }
            self.bufs[self.n].as_mut_slice()[self.filled..end].copy_from_slice(bytes);
            self.filled = end;
            Ok(())
        }

        fn end(&mut self, info: &TensorInfo) -> tensorfmt::Result<Flow> {
            if self.filled != self.lens[self.n] {
                return Err(sink_error(format!(
                    "tensor '{}': {} bytes of {}",
                    info.name, self.filled, self.lens[self.n]
                )));
            }
            self.n += 1;
            Ok(Flow::Continue)
        }
    }

    fn sink_error(msg: String) -> tensorfmt::Error {
        tensorfmt::ErrorKind::Sink(msg).into()
    }

    /// Where every tensor's payload is as plain bytes: the file they are in (the model, or
    /// the one external data file they share) and their byte ranges there, in index
    /// order. Errors when they are spread over several files or held in typed fields.
    pub fn payload_file_ranges(path: &Path) -> Result<(PathBuf, Vec<std::ops::Range<usize>>)> {
        let file = open(path)?;
        let mut at: Option<PathBuf> = None;
        let mut ranges = Vec::new();
        for t in file.tensors() {
            let (p, offset, len) = match &t.location {
                tensorfmt::DataLocation::External {
                    path: rel,
                    offset,
                    len,
                } => {
                    let dir = path.parent().unwrap_or_else(|| Path::new("."));
                    (dir.join(rel), *offset, *len)
                }
                other => {
                    let (offset, len) = other
                        .plain_range(file.source().data())?
                        .ok_or_else(|| format!("tensor '{}' is not stored plain", t.name))?;
                    (path.to_path_buf(), offset, len)
                }
            };
            match &at {
                Some(a) if *a != p => {
                    return Err(format!("tensors in {} and {}", a.display(), p.display()).into())
                }
                _ => at = Some(p),
            }
            let start = usize::try_from(offset)?;
            ranges.push(start..start + usize::try_from(len)?);
        }
        Ok((at.unwrap_or_else(|| path.to_path_buf()), ranges))
    }

    /// Writes a real (not sparse) npy file of `nbytes` payload bytes without holding
    /// them in memory: a constant non-zero pattern, streamed through [`Saver::add`].
    pub fn write_pattern_npy(path: &Path, nbytes: usize) -> Result<()> {
        let mut saver = Saver::create(path, Some("npy"), &WriteOptions::default())?;
        let mut data = std::io::repeat(0x3c).take(nbytes as u64);
        saver.add(&f32_meta("x", nbytes), &mut data)?;
        saver.commit()?;
        Ok(())
    }
}

/// ndarray-npy workloads, written as its documentation shows.
pub mod nd {
    use super::*;
    use memmap2::Mmap;
    use ndarray::{Array1, ArrayD, ArrayViewD};
    use ndarray_npy::{NpzReader, NpzWriter, ViewNpyExt, WriteNpyExt};

    /// An `f32` array of little-endian bytes.
    pub fn array(bytes: &[u8]) -> Array1<f32> {
        bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }

    /// Named arrays of named byte buffers.
    pub fn arrays(tensors: &[(String, Vec<u8>)]) -> Vec<(String, Array1<f32>)> {
        tensors.iter().map(|(n, b)| (n.clone(), array(b))).collect()
    }

    /// `ndarray_npy::write_npy` (a `BufWriter` over the file; no fsync), or the same
    /// followed by `fsync` when `fsync` is set.
    pub fn write_npy(path: &Path, a: &Array1<f32>, fsync: bool) -> Result<()> {
        if !fsync {
            ndarray_npy::write_npy(path, a)?;
            return Ok(());
        }
        let file = File::create(path)?;
        let mut w = BufWriter::new(&file);
        a.write_npy(&mut w)?;
        w.flush()?;
        drop(w);
        file.sync_all()?;
        Ok(())
    }

    /// `ndarray_npy::read_npy` into an owned `ArrayD<f32>`.
    pub fn read_npy(path: &Path) -> Result<ArrayD<f32>> {
        Ok(ndarray_npy::read_npy(path)?)
    }

    /// Memory-maps the file and builds an `ArrayViewD<f32>` of it (`ViewNpyExt`): the
    /// zero-copy equivalent of `np.load(mmap_mode='r')`. Returns the map and the view's
    /// element count (the view borrows the map).
    pub fn view_npy(path: &Path) -> Result<(Mmap, usize)> {
        let file = File::open(path)?;
        // SAFETY: benchmark files are not modified while mapped.
        let map = unsafe { Mmap::map(&file)? };
        let n = ArrayViewD::<f32>::view_npy(&map)?.len();
        Ok((map, n))
    }

    /// `NpzWriter::new` (stored) or `NpzWriter::new_compressed` (deflate) over a
    /// `BufWriter<File>`, then fsync when `fsync` is set.
    pub fn write_npz(
        path: &Path,
        arrays: &[(String, Array1<f32>)],
        compressed: bool,
        fsync: bool,
    ) -> Result<()> {
        let out = BufWriter::new(File::create(path)?);
        let mut npz = if compressed {
            NpzWriter::new_compressed(out)
        } else {
            NpzWriter::new(out)
        };
        for (name, a) in arrays {
            npz.add_array(name.as_str(), a)?;
        }
        let out = npz.finish()?;
        let file = out.into_inner().map_err(|e| e.into_error())?;
        if fsync {
            file.sync_all()?;
        }
        Ok(())
    }

    /// `NpzReader::new(File::open(path))`, then `by_name` for every name.
    pub fn read_npz(path: &Path) -> Result<Vec<ArrayD<f32>>> {
        let mut npz = NpzReader::new(File::open(path)?)?;
        let names = npz.names()?;
        let mut out = Vec::with_capacity(names.len());
        for n in names {
            out.push(npz.by_name(&n)?);
        }
        Ok(out)
    }
}

/// The `memcpy` reference of the full loads: the same payload bytes copied out of a
/// memory map of the file (page cache warm) and nothing else done — no format parsing,
/// no checksum — which a full load into owned memory cannot beat.
pub mod mem {
    use super::*;
    use memmap2::Mmap;
    use std::alloc::{self, Layout};
    use std::ops::Range;
    use std::ptr::NonNull;

    /// Allocations at least this large are 2 MiB-aligned and advised `MADV_HUGEPAGE`.
    const HUGE: usize = 2 << 20;

    /// An owned heap buffer allocated the way a fast loader allocates tensors: 64-byte
    /// aligned, or from 2 MiB on 2 MiB-aligned with transparent huge pages advised, so
    /// that filling it takes one page fault per 2 MiB instead of one per 4 KiB. Its bytes
    /// are always initialised (copied in or zeroed).
    pub struct FreshBuf {
        ptr: NonNull<u8>,
        layout: Layout,
    }

    // SAFETY: `FreshBuf` uniquely owns its allocation, like a `Vec<u8>`.
    unsafe impl Send for FreshBuf {}

    impl FreshBuf {
        /// Allocates `len` bytes, not initialised; `len > 0`.
        fn alloc(len: usize) -> Result<Self> {
            let align = if len >= HUGE { HUGE } else { 64 };
            let layout = Layout::from_size_align(len, align)?;
            // SAFETY: `len > 0` (callers check), so the layout has a non-zero size.
            let ptr = NonNull::new(unsafe { alloc::alloc(layout) })
                .ok_or_else(|| format!("out of memory allocating {len} bytes"))?;
            if len >= HUGE {
                // SAFETY: `ptr..ptr + len` is our live allocation, 2 MiB-aligned; the
                // advice changes no contents and may fail harmlessly.
                unsafe {
                    libc::madvise(ptr.as_ptr().cast(), len - len % HUGE, libc::MADV_HUGEPAGE)
                };
            }
            Ok(FreshBuf { ptr, layout })
        }

        /// A copy of `src` in a newly allocated buffer (`None` for an empty `src`).
        pub fn copy_of(src: &[u8]) -> Result<Option<Self>> {
            if src.is_empty() {
                return Ok(None);
            }
            let buf = Self::alloc(src.len())?;
            // SAFETY: the allocation holds `src.len()` bytes and is not `src`'s memory.
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), buf.ptr.as_ptr(), src.len()) };
            Ok(Some(buf))
        }

        /// `len` zero bytes, every page touched; `len > 0`.
        pub fn zeroed(len: usize) -> Result<Self> {
            if len == 0 {
                return Err("a FreshBuf holds at least one byte".into());
            }
            let buf = Self::alloc(len)?;
            // SAFETY: the allocation holds `len` bytes.
            unsafe { std::ptr::write_bytes(buf.ptr.as_ptr(), 0, len) };
            Ok(buf)
        }

        /// The bytes.
        pub fn as_slice(&self) -> &[u8] {
            // SAFETY: `ptr` holds `layout.size()` bytes, all initialised at construction.
            unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.layout.size()) }
        }

        /// The bytes, mutably.
        pub fn as_mut_slice(&mut self) -> &mut [u8] {
            // SAFETY: as in `as_slice`; `&mut self` gives unique access.
            unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.layout.size()) }
        }
    }

    impl Drop for FreshBuf {
        fn drop(&mut self) {
            // SAFETY: allocated with this layout.
            unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) };
        }
    }

    fn map(path: &Path) -> Result<Mmap> {
        let file = File::open(path)?;
        // SAFETY: benchmark files are not modified while mapped.
        Ok(unsafe { Mmap::map(&file)? })
    }

    /// Maps `path` (as `TensorFile::open` does) and copies every range of it into a buffer
    /// of its own ([`FreshBuf`]): the least a full load into owned memory has to do, page
    /// faults on both sides included. Empty ranges give no buffer.
    pub fn copy_fresh(path: &Path, ranges: &[Range<usize>]) -> Result<Vec<FreshBuf>> {
        let map = map(path)?;
        let mut out = Vec::with_capacity(ranges.len());
        for r in ranges {
            let src = map
                .get(r.clone())
                .ok_or("range beyond the end of the file")?;
            out.extend(FreshBuf::copy_of(src)?);
        }
        Ok(out)
    }

    /// A mapped file and one destination buffer, both touched already: [`HotCopy::run`]
    /// then copies the same ranges with no mapping, allocation or page fault — the
    /// machine's copy bandwidth for these bytes.
    pub struct HotCopy {
        map: Mmap,
        dst: FreshBuf,
        ranges: Vec<Range<usize>>,
    }

    impl HotCopy {
        /// Maps `path`, allocates and zeroes the destination, and copies once.
        pub fn new(path: &Path, ranges: &[Range<usize>]) -> Result<Self> {
            let total = ranges.iter().map(|r| r.len()).sum::<usize>().max(1);
            let mut hot = HotCopy {
                map: map(path)?,
                dst: FreshBuf::zeroed(total)?,
                ranges: ranges.to_vec(),
            };
            hot.run()?;
            Ok(hot)
        }

        /// Copies every range into the destination, back to back; returns the bytes
        /// copied.
        pub fn run(&mut self) -> Result<usize> {
            let dst = self.dst.as_mut_slice();
            let mut at = 0;
            for r in &self.ranges {
                let src = self
                    .map
                    .get(r.clone())
                    .ok_or("range beyond the end of the file")?;
                dst[at..at + src.len()].copy_from_slice(src);
                at += src.len();
            }
            Ok(at)
        }

        /// The destination buffer (what the last [`HotCopy::run`] copied, back to back).
        pub fn bytes(&self) -> &[u8] {
            self.dst.as_slice()
        }
    }
}

pub mod scaling;

/// The `safetensors` crate (0.8), the reader and writer under the Python package
/// `safetensors`, used as its documentation shows: the fastest peer of the safetensors suite.
pub mod st {
    use super::*;
    use memmap2::Mmap;
    use safetensors::tensor::TensorView;
    use safetensors::{Dtype, SafeTensors};

    fn map(path: &Path) -> Result<Mmap> {
        let file = File::open(path)?;
        // SAFETY: benchmark files are not modified while mapped.
        Ok(unsafe { Mmap::map(&file)? })
    }

    /// Index-only open: memory map, `SafeTensors::deserialize` (the header parsed and
    /// checked), and the tensors listed (`names`); no payload byte is read. Returns how
    /// many tensors were listed (the index borrows the map, so both are dropped here).
    pub fn open(path: &Path) -> Result<usize> {
        let map = map(path)?;
        let st = SafeTensors::deserialize(&map)?;
        Ok(st.names().len())
    }

    /// Full load into owned memory: memory map, `SafeTensors::deserialize`, then every
    /// tensor's `data()` copied into a fresh `Vec<u8>` (with its name).
    pub fn read_owned(path: &Path) -> Result<Vec<(String, Vec<u8>)>> {
        let map = map(path)?;
        let st = SafeTensors::deserialize(&map)?;
        Ok(st
            .iter()
            .map(|(name, view)| (name.to_string(), view.data().to_vec()))
            .collect())
    }

    /// The crate's dtype of a tensorfmt dtype, for the ones safetensors stores.
    pub fn dtype(d: DType) -> Result<Dtype> {
        Ok(match d {
            DType::Bool => Dtype::BOOL,
            DType::U8 => Dtype::U8,
            DType::I8 => Dtype::I8,
            DType::F8E5M2 => Dtype::F8_E5M2,
            DType::F8E4M3FN => Dtype::F8_E4M3,
            DType::I16 => Dtype::I16,
            DType::U16 => Dtype::U16,
            DType::F16 => Dtype::F16,
            DType::BF16 => Dtype::BF16,
            DType::I32 => Dtype::I32,
            DType::U32 => Dtype::U32,
            DType::F32 => Dtype::F32,
            DType::C64 => Dtype::C64,
            DType::F64 => Dtype::F64,
            DType::I64 => Dtype::I64,
            DType::U64 => Dtype::U64,
            other => return Err(format!("safetensors stores no {other:?}").into()),
        })
    }

    /// The crate's views of tensors given as tensorfmt metadata and bytes: what
    /// [`save`] writes.
    pub fn views<'a>(tensors: &[(TensorMeta, &'a [u8])]) -> Result<Vec<(String, TensorView<'a>)>> {
        tensors
            .iter()
            .map(|(meta, bytes)| {
                let shape = meta
                    .shape
                    .iter()
                    .map(|&d| usize::try_from(d))
                    .collect::<std::result::Result<Vec<_>, _>>()?;
                let view = TensorView::new(dtype(meta.dtype)?, shape, bytes)?;
                Ok((meta.name.clone(), view))
            })
            .collect()
    }

    /// `safetensors::serialize_to_file(views, None, path)` (a temporary file beside
    /// `path`, a 1 MiB `BufWriter`, then a rename; no fsync), followed by an fsync of the
    /// file when `fsync` is set.
    pub fn save(path: &Path, views: &[(String, TensorView<'_>)], fsync: bool) -> Result<()> {
        let data = views.iter().map(|(name, view)| (name.as_str(), view));
        safetensors::serialize_to_file(data, None, path)?;
        if fsync {
            File::open(path)?.sync_all()?;
        }
        Ok(())
    }
}

/// candle's PyTorch reader (`candle_core::pickle`) and safetensors reader
/// (`candle_core::safetensors::MmapedSafetensors`), as its documentation shows.
#[cfg(feature = "candle")]
pub mod candle {
    use super::*;
    use candle_core::pickle::PthTensors;

    /// `PthTensors::new(path, None)`: candle's index of a checkpoint (it parses the zip's
    /// central directory and `data.pkl`; no tensor byte is read).
    pub fn open(path: &Path) -> Result<PthTensors> {
        Ok(PthTensors::new(path, None)?)
    }

    /// `candle_core::pickle::read_all(path)`: every tensor into owned CPU memory
    /// (`PthTensors::new`, then `PthTensors::get` for each name).
    pub fn read_all(path: &Path) -> Result<Vec<(String, candle_core::Tensor)>> {
        Ok(candle_core::pickle::read_all(path)?)
    }

    /// `MmapedSafetensors::new(path)` (memory map and `SafeTensors::deserialize`), then
    /// the tensors listed (`tensors`); no payload byte is read. Returns how many.
    pub fn st_open(path: &Path) -> Result<usize> {
        // SAFETY: benchmark files are not modified while mapped.
        let st = unsafe { candle_core::safetensors::MmapedSafetensors::new(path)? };
        Ok(st.tensors().len())
    }

    /// `MmapedSafetensors::new(path)`, then `load(name, &Device::Cpu)` of every tensor:
    /// each one copied into owned CPU memory.
    pub fn st_read_all(path: &Path) -> Result<Vec<(String, candle_core::Tensor)>> {
        // SAFETY: benchmark files are not modified while mapped.
        let st = unsafe { candle_core::safetensors::MmapedSafetensors::new(path)? };
        let names: Vec<String> = st.tensors().into_iter().map(|(name, _)| name).collect();
        names
            .into_iter()
            .map(|name| {
                let t = st.load(&name, &candle_core::Device::Cpu)?;
                Ok((name, t))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_is_deterministic() {
        let a = f32_bytes(64, 1);
        assert_eq!(a, f32_bytes(64, 1));
        assert_ne!(a, f32_bytes(64, 2));
        assert_eq!(a.len(), 64);
        for c in a.chunks_exact(4) {
            let v = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            assert!((-1.0..1.0).contains(&v));
        }
    }

    #[test]
    fn labels() {
        assert_eq!(size_label(MIB), "1MiB");
        assert_eq!(size_label(256 * MIB), "256MiB");
        assert_eq!(size_label(1 << 30), "1GiB");
        assert_eq!(size_label(4096), "4KiB");
    }

    /// Every workload round-trips through both libraries (small sizes).
    #[test]
    fn workloads_roundtrip() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let bytes = f32_bytes(4096, 7);
        let tensors = vec![("a0".to_string(), bytes.clone())];
        let arrays = nd::arrays(&tensors);

        let p = dir.path().join("x.npy");
        for fsync in [true, false] {
            if fsync {
                tf::save(&p, "npy", &tensors, None)?;
            } else {
                tf::save_no_fsync(&p, "npy", &tensors, None)?;
            }
            assert_eq!(tf::read_owned(&p)?[0].data.as_bytes(), &bytes[..]);
            assert!(tf::read_view_unchecked(&p)?[0].data.is_mapped());
            let views = tf::read_view(&p)?;
            assert!(views[0].data.is_mapped());
            assert_eq!(views[0].data.as_bytes(), &bytes[..]);
            assert_eq!(nd::read_npy(&p)?.len(), 1024);
            assert_eq!(nd::view_npy(&p)?.1, 1024);
        }
        nd::write_npy(&p, &arrays[0].1, true)?;
        assert_eq!(tf::read_owned(&p)?[0].data.as_bytes(), &bytes[..]);
        assert_eq!(tf::open(&p)?.tensors().len(), 1);

        let z = dir.path().join("x.npz");
        for compression in [
            tensorfmt::Compression::Stored,
            tensorfmt::Compression::Deflate,
        ] {
            tf::save(&z, "npz", &tensors, Some(compression))?;
            assert_eq!(nd::read_npz(&z)?[0].len(), 1024);
            tf::save_no_fsync(&z, "npz", &tensors, Some(compression))?;
            assert_eq!(tf::inputs(&z)?, tensors);
            nd::write_npz(
                &z,
                &arrays,
                compression == tensorfmt::Compression::Deflate,
                true,
            )?;
            assert_eq!(tf::inputs(&z)?, tensors);
        }

        let big = dir.path().join("p.npy");
        tf::write_pattern_npy(&big, 8192)?;
        assert_eq!(tf::read_owned(&big)?[0].data.as_bytes(), &[0x3c; 8192][..]);
        assert!(free_bytes(dir.path()).is_some());
        Ok(())
    }

    /// A small transformer-like checkpoint written by tensorfmt: f32 and bf16 matrices
    /// and a vector.
    fn small_checkpoint(path: &Path) -> Result<Vec<(TensorMeta, Vec<u8>)>> {
        let meta = |name: &str, dtype, shape: Vec<u64>| TensorMeta {
            name: name.to_string(),
            dtype,
            shape,
            order: Order::C,
            byte_order: ByteOrder::Little,
        };
        let tensors = vec![
            (
                meta("embed.weight", DType::F32, vec![64, 16]),
                f32_bytes(4096, 1),
            ),
            (
                meta("layers.0.attn.weight", DType::BF16, vec![16, 16]),
                f32_bytes(512, 2),
            ),
            (
                meta("layers.0.ln.bias", DType::F32, vec![16]),
                f32_bytes(64, 3),
            ),
        ];
        let refs: Vec<(TensorMeta, &[u8])> = tensors
            .iter()
            .map(|(m, b)| (m.clone(), b.as_slice()))
            .collect();
        tf::save_with_meta(path, "pytorch", &refs, None)?;
        Ok(tensors)
    }

    /// The PyTorch workloads (tensorfmt, the memcpy reference and, with the `candle`
    /// feature, candle) on a small checkpoint.
    #[test]
    fn pytorch_workloads() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let p = dir.path().join("in.pt");
        let written = small_checkpoint(&p)?;
        let file = tf::open(&p)?;
        assert_eq!(file.format(), "pytorch");
        assert_eq!(file.tensors().len(), 3);
        assert_eq!(tf::open_as(&p, "pytorch")?.tensors(), file.tensors());

        for read in [tf::read_owned, tf::read_owned_unchecked] {
            let tensors = read(&p)?;
            let metas = tf::metas(&tensors)?;
            for ((t, m), (wm, wb)) in tensors.iter().zip(&metas).zip(&written) {
                assert_eq!(m, wm);
                assert_eq!(t.data.as_bytes(), &wb[..]);
            }
        }

        let ranges = tf::payload_ranges(&p)?;
        assert_eq!(ranges.len(), 3);
        let fresh = mem::copy_fresh(&p, &ranges)?;
        let mut all = Vec::new();
        for (buf, (_, wb)) in fresh.iter().zip(&written) {
            assert_eq!(buf.as_slice(), &wb[..]);
            all.extend_from_slice(wb);
        }
        let mut hot = mem::HotCopy::new(&p, &ranges)?;
        assert_eq!(hot.run()?, all.len());
        assert_eq!(hot.bytes(), &all[..]);

        let tensors = tf::read_owned(&p)?;
        let metas = tf::metas(&tensors)?;
        let refs: Vec<(TensorMeta, &[u8])> = metas
            .iter()
            .cloned()
            .zip(tensors.iter().map(|t| t.data.as_bytes()))
            .collect();
        let out = dir.path().join("out.pt");
        tf::save_with_meta_no_fsync(&out, "pytorch", &refs, None)?;
        let back = tf::read_owned(&out)?;
        assert_eq!(tf::metas(&back)?, metas);
        for (a, b) in back.iter().zip(&tensors) {
            assert_eq!(a.data.as_bytes(), b.data.as_bytes());
        }

        #[cfg(feature = "candle")]
        for path in [&p, &out] {
            assert_eq!(candle::open(path)?.tensor_infos().len(), 3);
            let all = candle::read_all(path)?;
            assert_eq!(all.len(), 3);
            let (_, embed) = all
                .iter()
                .find(|(n, _)| n == "embed.weight")
                .ok_or("no embed.weight")?;
            assert_eq!(embed.dims(), &[64, 16]);
            let values = embed.flatten_all()?.to_vec1::<f32>()?;
            assert_eq!(values, nd::array(&written[0].1).to_vec());
        }
        Ok(())
    }

    /// The safetensors workloads (tensorfmt, the safetensors crate, the memcpy reference
    /// and, with the `candle` feature, candle) on a small checkpoint: each reader sees
    /// the bytes written, each writer's file reads back equal.
    #[test]
    fn safetensors_workloads() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let p = dir.path().join("in.safetensors");
        let meta = |name: &str, dtype, shape: Vec<u64>| TensorMeta {
            name: name.to_string(),
            dtype,
            shape,
            order: Order::C,
            byte_order: ByteOrder::Little,
        };
        let written = [
            (
                meta("embed.weight", DType::F32, vec![64, 16]),
                f32_bytes(4096, 1),
            ),
            (
                meta("layers.0.attn.weight", DType::BF16, vec![16, 16]),
                f32_bytes(512, 2),
            ),
            (
                meta("layers.0.mlp.weight", DType::F16, vec![8, 16]),
                f32_bytes(256, 3),
            ),
        ];
        let refs: Vec<(TensorMeta, &[u8])> = written
            .iter()
            .map(|(m, b)| (m.clone(), b.as_slice()))
            .collect();
        tf::save_with_meta(&p, "safetensors", &refs, None)?;
        assert_eq!(tf::open(&p)?.format(), "safetensors");
        assert_eq!(tf::open_list(&p, None)?, 3);
        assert_eq!(tf::open_list(&p, Some("safetensors"))?, 3);
        assert_eq!(st::open(&p)?, 3);
        let bytes_of =
            |name: &str| -> &[u8] { &written.iter().find(|(m, _)| m.name == name).unwrap().1 };
        let by_crate = st::read_owned(&p)?;
        assert_eq!(by_crate.len(), 3);
        for (name, b) in &by_crate {
            assert_eq!(&b[..], bytes_of(name), "{name}");
        }
        let owned = tf::read_owned(&p)?;
        for t in &owned {
            assert_eq!(t.data.as_bytes(), bytes_of(&t.info.name), "{}", t.info.name);
        }

        for v in tf::read_view(&p)? {
            assert!(v.data.is_mapped(), "{}", v.info.name);
            assert_eq!(v.data.as_bytes(), bytes_of(&v.info.name), "{}", v.info.name);
        }

        let ranges = tf::payload_ranges(&p)?;
        let fresh = mem::copy_fresh(&p, &ranges)?;
        for (buf, t) in fresh.iter().zip(&owned) {
            assert_eq!(buf.as_slice(), t.data.as_bytes());
        }

        // The crate's writer and tensorfmt's no-fsync writer: both read back equal.
        let views = st::views(&refs)?;
        let out = dir.path().join("out.safetensors");
        for fsync in [false, true] {
            st::save(&out, &views, fsync)?;
            for t in tf::read_owned(&out)? {
                assert_eq!(t.data.as_bytes(), bytes_of(&t.info.name), "{}", t.info.name);
            }
        }
        tf::save_with_meta_no_fsync(&out, "safetensors", &refs, None)?;
        for (name, b) in st::read_owned(&out)? {
            assert_eq!(&b[..], bytes_of(&name), "{name}");
        }

        #[cfg(feature = "candle")]
        {
            assert_eq!(candle::st_open(&p)?, 3);
            let all = candle::st_read_all(&p)?;
            assert_eq!(all.len(), 3);
            let (_, embed) = all
                .iter()
                .find(|(n, _)| n == "embed.weight")
                .ok_or("no embed.weight")?;
            assert_eq!(embed.dims(), &[64, 16]);
            let values = embed.flatten_all()?.to_vec1::<f32>()?;
            assert_eq!(values, nd::array(bytes_of("embed.weight")).to_vec());
        }
        Ok(())
    }

    /// The ONNX workloads' payload ranges, in the model (raw_data) or in the external data
    /// file, locate every initializer's bytes: the memcpy reference copies what tensorfmt
    /// reads.
    #[test]
    fn onnx_payload_ranges() -> Result<()> {
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/onnx");
        for (model, data) in [
            ("mlp.onnx", "mlp.onnx"),
            ("external_single.onnx", "external_single.data"),
        ] {
            let p = fixtures.join(model);
            let (file, ranges) = tf::payload_file_ranges(&p)?;
            assert_eq!(file, fixtures.join(data), "{model}");
            let owned = tf::read_owned(&p)?;
            assert_eq!(ranges.len(), owned.len(), "{model}");
            let fresh = mem::copy_fresh(&file, &ranges)?;
            let mut bufs = fresh.iter();
            let mut all = Vec::new();
            for (r, t) in ranges.iter().zip(&owned) {
                assert_eq!(r.len(), t.data.as_bytes().len(), "{model}: {}", t.info.name);
                if !r.is_empty() {
                    let buf = bufs.next().ok_or("fewer buffers than ranges")?;
                    assert_eq!(
                        buf.as_slice(),
                        t.data.as_bytes(),
                        "{model}: {}",
                        t.info.name
                    );
                }
                all.extend_from_slice(t.data.as_bytes());
            }
            assert!(bufs.next().is_none());
            let hot = mem::HotCopy::new(&file, &ranges)?;
            assert_eq!(&hot.bytes()[..all.len()], &all[..]);
            let opened = tf::open(&p)?;
            let mut reuse = tf::ReuseSink::for_file(&opened)?;
            for _ in 0..2 {
                assert_eq!(reuse.read(&opened)?, owned.len());
                for (i, t) in owned.iter().enumerate() {
                    assert_eq!(
                        reuse.bytes(i),
                        t.data.as_bytes(),
                        "{model}: {}",
                        t.info.name
                    );
                }
            }
            for v in tf::read_view(&p)? {
                assert!(
                    v.data.is_mapped() || v.data.as_bytes().is_empty(),
                    "{model}: {}",
                    v.info.name
                );
            }
        }
        // One file per tensor: no single file to copy from.
        let per_tensor = fixtures.join("external_per_tensor/model.onnx");
        assert!(tf::payload_file_ranges(&per_tensor).is_err());
        Ok(())
    }
}
