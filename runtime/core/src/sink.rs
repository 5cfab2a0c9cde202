//! Push-style sinks, after ripgrep's `Sink`: a reader tells a sink that a tensor begins,
//! offers its bytes zero-copy when they lie plain in shared memory, otherwise pushes them
//! in chunks (in storage order), and tells it that the tensor ends. The sink may skip a
//! tensor or stop the whole read.
//!
//! Provided sinks: [`OwnedSink`] (owned, 64-byte-aligned copies), [`ViewSink`] (zero-copy
//! views where possible, owned copies otherwise), [`SliceSink`] (one tensor into a
//! caller's buffer) and [`FilterSink`] (forwards only the tensors a predicate accepts).

use std::alloc::{self, Layout};
use std::ops::{Deref, DerefMut, Range};
use std::ptr::NonNull;

use std::sync::Arc;

use crate::error::{Error, ErrorKind, Location, Result};
use crate::limits::InflateBudget;
use crate::source::Bytes;
use crate::tensor::TensorInfo;

/// What a sink wants next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Flow {
    /// Go on: deliver this tensor's bytes (from `begin`) or the next tensor (from `end`).
    #[default]
    Continue,
    /// Do not deliver this tensor's bytes (from `begin`); the read goes on with the next.
    Skip,
    /// End the whole read.
    Stop,
}

/// Receives tensors pushed by a reader.
///
/// For each tensor the reader calls [`Sink::begin`]; unless that returns [`Flow::Skip`]
/// or [`Flow::Stop`], it then either offers the bytes with [`Sink::view`] (when they lie
/// plain in shared memory) or pushes them with [`Sink::chunk`] (or both, when the view is
/// declined), and finally calls [`Sink::end`].
pub trait Sink {
    /// A tensor begins. Return [`Flow::Skip`] to not receive its bytes, [`Flow::Stop`] to
    /// end the whole read.
    fn begin(&mut self, info: &TensorInfo) -> Result<Flow>;

    /// Offered first when the tensor's bytes lie plain in shared memory (a memory map or
    /// a buffer): `bytes.as_bytes()[range]` are the tensor's bytes. Return `Ok(true)` to
    /// take them (then [`Sink::chunk`] is not called for this tensor). The default
    /// declines.
    fn view(&mut self, info: &TensorInfo, bytes: &Bytes, range: Range<usize>) -> Result<bool> {
        let _ = (info, bytes, range);
        Ok(false)
    }

    /// True when [`Sink::view`] may keep a reference to the bytes it is offered (a
    /// zero-copy view) rather than copying them before it returns. A reader checks what
    /// it offers to such a sink first (a stored zip member's CRC-32, over the whole
    /// member); to a sink that copies, it may instead push the bytes as chunks and check
    /// them as they pass, reading them once. The default is true.
    fn keeps_views(&self) -> bool {
        true
    }

    /// The next chunk of the tensor's bytes, in storage order.
    fn chunk(&mut self, bytes: &[u8]) -> Result<()>;

    /// The tensor's bytes are complete.
    fn end(&mut self, info: &TensorInfo) -> Result<Flow>;
}

impl<S: Sink + ?Sized> Sink for &mut S {
    fn begin(&mut self, info: &TensorInfo) -> Result<Flow> {
        (**self).begin(info)
    }
    fn view(&mut self, info: &TensorInfo, bytes: &Bytes, range: Range<usize>) -> Result<bool> {
        (**self).view(info, bytes, range)
    }
    fn keeps_views(&self) -> bool {
        (**self).keeps_views()
    }
    fn chunk(&mut self, bytes: &[u8]) -> Result<()> {
        (**self).chunk(bytes)
    }
    fn end(&mut self, info: &TensorInfo) -> Result<Flow> {
        (**self).end(info)
    }
}

impl<S: Sink + ?Sized> Sink for Box<S> {
    fn begin(&mut self, info: &TensorInfo) -> Result<Flow> {
        (**self).begin(info)
    }
    fn view(&mut self, info: &TensorInfo, bytes: &Bytes, range: Range<usize>) -> Result<bool> {
        (**self).view(info, bytes, range)
    }
    fn keeps_views(&self) -> bool {
        (**self).keeps_views()
    }
    fn chunk(&mut self, bytes: &[u8]) -> Result<()> {
        (**self).chunk(bytes)
    }
    fn end(&mut self, info: &TensorInfo) -> Result<Flow> {
        (**self).end(info)
    }
}

/// An error of a sink about the tensor `name`.
fn tensor_error(name: &str, kind: ErrorKind) -> Error {
    Error::new(kind, Location::default().with_entry(name))
}

// ---------------------------------------------------------------------------------------
// AlignedBuf

/// An owned heap buffer whose first byte is aligned to [`AlignedBuf::ALIGN`] (64) bytes,
/// as SIMD kernels and DMA engines like. Dereferences to `[u8]`. Zero-length buffers do
/// not allocate. A buffer that holds decompressed bytes carries its charge against the
/// file's [`InflateBudget`] and gives it back when dropped.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
    cap: usize,
    charge: Option<Charge>,
}

/// Bytes charged against an [`InflateBudget`], given back when dropped.
struct Charge {
    budget: Arc<InflateBudget>,
    bytes: u64,
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.budget.release(self.bytes);
    }
}

// SAFETY: `AlignedBuf` uniquely owns its allocation, like a `Vec<u8>`.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared access only reads the bytes, like `&Vec<u8>`.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// The alignment of the first byte.
    pub const ALIGN: usize = 64;

    /// An empty buffer (no allocation).
    pub fn new() -> Self {
        AlignedBuf {
            ptr: Self::dangling(),
            len: 0,
            cap: 0,
            charge: None,
        }
    }

    /// `len` zero bytes. Errors (rather than aborting) when the memory cannot be had.
    pub fn zeroed(len: usize) -> Result<Self> {
        let mut b = AlignedBuf::new();
        b.grow_to(len)?;
        // SAFETY: the allocation holds `len` bytes.
        unsafe { std::ptr::write_bytes(b.ptr.as_ptr(), 0, len) };
        b.len = len;
        Ok(b)
    }

    /// A copy of `bytes`.
    pub fn from_slice(bytes: &[u8]) -> Result<Self> {
        let mut b = AlignedBuf::new();
        b.extend_from_slice(bytes)?;
        Ok(b)
    }

    /// Number of bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the buffer holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of bytes the allocation can hold without growing.
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr` is valid for `len <= cap` initialized (zeroed or written) bytes,
        // or dangling and aligned with `len == 0`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The bytes, mutably.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`, and `&mut self` gives unique access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// Appends `bytes`, growing the allocation (at least doubling) when needed.
    pub fn extend_from_slice(&mut self, bytes: &[u8]) -> Result<()> {
        let need = self
            .len
            .checked_add(bytes.len())
            .ok_or_else(|| Error::from(ErrorKind::Overflow("buffer length".into())))?;
        if need > self.cap {
            let target = need.max(self.cap.saturating_mul(2)).max(Self::ALIGN);
            self.grow_to(target)?;
        }
        // SAFETY: `len + bytes.len() <= cap`; the source cannot overlap our allocation
        // because we hold `&mut self`.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                self.ptr.as_ptr().add(self.len),
                bytes.len(),
            );
        }
        self.len = need;
        Ok(())
    }

    /// Makes room for at least `additional` more bytes without changing the length.
    pub fn reserve(&mut self, additional: usize) -> Result<()> {
        let need = self
            .len
            .checked_add(additional)
            .ok_or_else(|| Error::from(ErrorKind::Overflow("buffer length".into())))?;
        if need > self.cap {
            self.grow_to(need)?;
        }
        Ok(())
    }

    /// Charges `bytes` more of this buffer against `budget` (they are given back when the
    /// buffer is dropped); fails, charging nothing, past the budget's limit.
    fn charge(&mut self, budget: &Arc<InflateBudget>, bytes: u64) -> Result<()> {
        budget.charge(bytes)?;
        match &mut self.charge {
            Some(c) if Arc::ptr_eq(&c.budget, budget) => c.bytes += bytes,
            _ => {
                // A buffer is charged to one budget; a new one takes the charge over.
                self.charge = Some(Charge {
                    budget: budget.clone(),
                    bytes,
                });
            }
        }
        Ok(())
    }

    fn dangling() -> NonNull<u8> {
        NonNull::new(std::ptr::without_provenance_mut(Self::ALIGN)).unwrap_or(NonNull::dangling())
    }

    /// Allocations at least this large are aligned to it and offered transparent huge
    /// pages, so that filling them takes a few hundred page faults instead of 4 KiB each.
    const HUGE: usize = 2 << 20;

    fn align_for(cap: usize) -> usize {
        if cap >= Self::HUGE {
            Self::HUGE
        } else {
            Self::ALIGN
        }
    }

    fn layout(cap: usize) -> Result<Layout> {
        Layout::from_size_align(cap, Self::align_for(cap)).map_err(|_| {
            Error::from(ErrorKind::Overflow(format!(
                "a buffer of {cap} bytes is too large"
            )))
        })
    }

    /// Asks the kernel to back a large allocation with huge pages (Linux; a hint only).
    fn advise_huge(ptr: *mut u8, cap: usize) {
        #[cfg(target_os = "linux")]
        if cap >= Self::HUGE {
            // SAFETY: `ptr..ptr + cap` is one live allocation of ours, aligned to 2 MiB;
            // madvise with MADV_HUGEPAGE changes no contents and may fail harmlessly.
            unsafe {
                libc::madvise(ptr.cast(), cap - cap % Self::HUGE, libc::MADV_HUGEPAGE);
            }
        }
        #[cfg(not(target_os = "linux"))]
        let _ = (ptr, cap);
    }

    /// Grows the allocation to exactly `cap` bytes (no-op when not larger). The bytes
    /// below `len` are kept; those above are not initialized and never exposed.
    fn grow_to(&mut self, cap: usize) -> Result<()> {
        if cap <= self.cap {
            return Ok(());
        }
        let new_layout = Self::layout(cap)?;
        let ptr = if self.cap == 0 {
            // SAFETY: `cap > 0`, so the layout has a non-zero size.
            unsafe { alloc::alloc(new_layout) }
        } else if Self::align_for(self.cap) == new_layout.align() {
            let old = Self::layout(self.cap)?;
            // SAFETY: `ptr` was allocated with `old`; `cap` is non-zero and valid for the
            // same alignment (checked by `layout`).
            unsafe { alloc::realloc(self.ptr.as_ptr(), old, cap) }
        } else {
            // The alignment class changes: a new allocation, the bytes moved over.
            let old = Self::layout(self.cap)?;
            // SAFETY: non-zero size.
            let p = unsafe { alloc::alloc(new_layout) };
            if !p.is_null() {
                // SAFETY: both allocations hold at least `len` bytes and are distinct;
                // the old one was allocated with `old`.
                unsafe {
                    std::ptr::copy_nonoverlapping(self.ptr.as_ptr(), p, self.len);
                    alloc::dealloc(self.ptr.as_ptr(), old);
                }
            }
            p
        };
        let ptr = NonNull::new(ptr).ok_or_else(|| {
            Error::from(ErrorKind::Sink(format!(
                "out of memory allocating {cap} bytes"
            )))
        })?;
        Self::advise_huge(ptr.as_ptr(), cap);
        self.ptr = ptr;
        self.cap = cap;
        Ok(())
    }
}

impl Default for AlignedBuf {
    fn default() -> Self {
        AlignedBuf::new()
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        if self.cap > 0 {
            if let Ok(layout) = Self::layout(self.cap) {
                // SAFETY: allocated with this layout.
                unsafe { alloc::dealloc(self.ptr.as_ptr(), layout) };
            }
        }
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.as_mut_slice()
    }
}

impl AsRef<[u8]> for AlignedBuf {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl Clone for AlignedBuf {
    fn clone(&self) -> Self {
        match AlignedBuf::from_slice(self) {
            Ok(b) => b,
            // Like `Vec`'s clone: allocation failure aborts.
            Err(_) => alloc::handle_alloc_error(
                Layout::from_size_align(self.len, Self::ALIGN).unwrap_or(Layout::new::<u8>()),
            ),
        }
    }
}

impl PartialEq for AlignedBuf {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for AlignedBuf {}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AlignedBuf({} bytes)", self.len)
    }
}

// ---------------------------------------------------------------------------------------
// Tensors

/// A tensor's bytes: owned, or a zero-copy view of shared memory.
#[derive(Debug, Clone)]
pub enum TensorData {
    /// An owned, 64-byte-aligned copy.
    Owned(AlignedBuf),
    /// A view of a memory map or shared buffer.
    Mapped {
        /// The shared bytes.
        bytes: Bytes,
        /// The tensor's range within them.
        range: Range<usize>,
    },
}

impl TensorData {
    /// The tensor's bytes (empty if a `Mapped` range lies outside its bytes, which the
    /// provided sinks never build).
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            TensorData::Owned(b) => b.as_slice(),
            TensorData::Mapped { bytes, range } => {
                bytes.as_bytes().get(range.clone()).unwrap_or_default()
            }
        }
    }

    /// Number of bytes.
    pub fn len(&self) -> usize {
        self.as_bytes().len()
    }

    /// True when there are no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True for a zero-copy view.
    pub fn is_mapped(&self) -> bool {
        matches!(self, TensorData::Mapped { .. })
    }
}

impl AsRef<[u8]> for TensorData {
    fn as_ref(&self) -> &[u8] {
        self.as_bytes()
    }
}

/// A tensor read into memory: its metadata and bytes (in the storage layout `info`
/// describes: its strides and byte order).
#[derive(Debug, Clone)]
pub struct Tensor {
    /// Metadata.
    pub info: TensorInfo,
    /// Bytes.
    pub data: TensorData,
}

/// Collects one tensor's chunks into an [`AlignedBuf`] of exactly `info.location.len()`
/// bytes. The buffer is allocated when the first byte arrives (so a sink that takes a
/// view never allocates): all of it for plain ranges, which readers have checked against
/// the file; for compressed content, which the file's size does not bound, it starts at
/// the compressed size and grows as bytes arrive, each growth charged first against the
/// file's budget when the sink has one.
#[derive(Debug, Default)]
struct Filler {
    current: Option<Filling>,
    budget: Option<Arc<InflateBudget>>,
    /// The current tensor's name, for errors (its buffer reused from tensor to tensor,
    /// so that a load that ends in a view allocates nothing here).
    name: String,
}

#[derive(Debug)]
struct Filling {
    buf: AlignedBuf,
    len: usize,
    first_alloc: usize,
    /// The bytes are decompressed as they arrive (charged against the budget).
    inflated: bool,
}

impl Filler {
    fn begin(&mut self, info: &TensorInfo) -> Result<()> {
        self.current = None;
        let len = usize::try_from(info.location.len()).map_err(|_| {
            tensor_error(
                &info.name,
                ErrorKind::Overflow(format!(
                    "{} bytes do not fit in memory",
                    info.location.len()
                )),
            )
        })?;
        let compressed = info.location.compressed_len();
        let first_alloc = match compressed {
            Some(compressed) => usize::try_from(compressed).unwrap_or(usize::MAX).min(len),
            None => len,
        };
        self.name.clone_from(&info.name);
        self.current = Some(Filling {
            buf: AlignedBuf::new(),
            len,
            first_alloc,
            inflated: compressed.is_some(),
        });
        Ok(())
    }

    fn chunk(&mut self, bytes: &[u8]) -> Result<()> {
        let Some(f) = &mut self.current else {
            return Err(ErrorKind::Sink("bytes pushed outside a tensor".into()).into());
        };
        let total = f.buf.len().saturating_add(bytes.len());
        if total > f.len {
            return Err(size_mismatch(&self.name, total, f.len));
        }
        if total > f.buf.capacity() {
            // Never beyond the tensor's size: `total <= len` was checked above.
            let target = total
                .max(f.first_alloc)
                .max(f.buf.capacity().saturating_mul(2))
                .min(f.len);
            if let (true, Some(budget)) = (f.inflated, &self.budget) {
                let more = (target - f.buf.capacity()) as u64;
                f.buf
                    .charge(budget, more)
                    .map_err(|e| e.in_entry(self.name.as_str()))?;
            }
            f.buf
                .reserve(target - f.buf.len())
                .map_err(|e| e.in_entry(self.name.as_str()))?;
        }
        f.buf
            .extend_from_slice(bytes)
            .map_err(|e| e.in_entry(self.name.as_str()))
    }

    /// The tensor's bytes, all of them.
    fn end(&mut self) -> Result<TensorData> {
        let Some(f) = self.current.take() else {
            return Err(ErrorKind::Sink("a tensor ended that did not begin".into()).into());
        };
        if f.buf.len() != f.len {
            return Err(size_mismatch(&self.name, f.buf.len(), f.len));
        }
        Ok(TensorData::Owned(f.buf))
    }
}

fn size_mismatch(name: &str, got: usize, want: usize) -> Error {
    tensor_error(
        name,
        ErrorKind::SizeMismatch(format!(
            "tensor '{name}' received {got} bytes, expected {want}"
        )),
    )
}

// ---------------------------------------------------------------------------------------
// OwnedSink

/// Collects every tensor as an owned, 64-byte-aligned copy ([`TensorData::Owned`]).
///
/// The buffer of a tensor is allocated from `info.location.len()` — which readers have
/// checked against the file — and never from anything else; compressed content grows as
/// it is decompressed.
#[derive(Debug, Default)]
pub struct OwnedSink {
    /// The tensors read so far, in the order they ended.
    pub tensors: Vec<Tensor>,
    filler: Filler,
}

impl OwnedSink {
    /// An empty sink.
    pub fn new() -> Self {
        Self::default()
    }

    /// This sink, charging the buffers of compressed tensors against `budget` as they
    /// grow (before the memory is allocated); each charge is given back when its
    /// tensor's bytes are dropped.
    pub fn with_budget(mut self, budget: Arc<InflateBudget>) -> Self {
        self.filler.budget = Some(budget);
        self
    }

    /// The collected tensors.
    pub fn into_tensors(self) -> Vec<Tensor> {
        self.tensors
    }
}

impl Sink for OwnedSink {
    fn begin(&mut self, info: &TensorInfo) -> Result<Flow> {
        self.filler.begin(info)?;
        Ok(Flow::Continue)
    }

    /// Copies the bytes in one go (faster than chunked reads), keeping no reference.
    fn view(&mut self, _info: &TensorInfo, bytes: &Bytes, range: Range<usize>) -> Result<bool> {
        match bytes.as_bytes().get(range) {
            Some(b) => {
                self.filler.chunk(b)?;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Views are copied before [`Sink::view`] returns.
    fn keeps_views(&self) -> bool {
        false
    }

    fn chunk(&mut self, bytes: &[u8]) -> Result<()> {
        self.filler.chunk(bytes)
    }

    fn end(&mut self, info: &TensorInfo) -> Result<Flow> {
        let data = self.filler.end()?;
        self.tensors.push(Tensor {
            info: info.clone(),
            data,
        });
        Ok(Flow::Continue)
    }
}

// ---------------------------------------------------------------------------------------
// ViewSink

/// Collects every tensor, taking zero-copy views ([`TensorData::Mapped`]) when offered
/// and owned aligned copies otherwise — unless `require_zero_copy` is set, in which case
/// a tensor that cannot be viewed is an error naming it.
#[derive(Debug, Default)]
pub struct ViewSink {
    /// The tensors read so far, in the order they ended.
    pub tensors: Vec<Tensor>,
    /// Error instead of copying when a tensor's bytes cannot be viewed zero-copy
    /// (compressed, or read from a stream).
    pub require_zero_copy: bool,
    filler: Filler,
    viewed: Option<TensorData>,
    current: String,
}

impl ViewSink {
    /// An empty sink that copies where it cannot view.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty sink that errors where it cannot view.
    pub fn zero_copy_only() -> Self {
        ViewSink {
            require_zero_copy: true,
            ..Self::default()
        }
    }

    /// This sink, charging the buffers of compressed tensors against `budget` as they
    /// grow (before the memory is allocated); each charge is given back when its
    /// tensor's bytes are dropped.
    pub fn with_budget(mut self, budget: Arc<InflateBudget>) -> Self {
        self.filler.budget = Some(budget);
        self
    }

    /// The collected tensors.
    pub fn into_tensors(self) -> Vec<Tensor> {
        self.tensors
    }

    fn not_viewable(name: &str) -> Error {
        tensor_error(
            name,
            ErrorKind::Sink(format!(
                "tensor '{name}' cannot be read zero-copy (its bytes are not stored plain in memory)"
            )),
        )
    }
}

impl Sink for ViewSink {
    fn begin(&mut self, info: &TensorInfo) -> Result<Flow> {
        self.viewed = None;
        self.filler.current = None;
        self.current.clone_from(&info.name);
        if self.require_zero_copy {
            // Checked when the bytes arrive: a view may still be offered.
            return Ok(Flow::Continue);
        }
        self.filler.begin(info)?;
        Ok(Flow::Continue)
    }

    fn view(&mut self, info: &TensorInfo, bytes: &Bytes, range: Range<usize>) -> Result<bool> {
        let fits = range.start <= range.end
            && range.end <= bytes.as_bytes().len()
            && u64::try_from(range.len()).ok() == Some(info.location.len());
        if !fits {
            return Ok(false);
        }
        self.viewed = Some(TensorData::Mapped {
            bytes: bytes.clone(),
            range,
        });
        Ok(true)
    }

    fn chunk(&mut self, bytes: &[u8]) -> Result<()> {
        if self.require_zero_copy {
            return Err(Self::not_viewable(&self.current));
        }
        self.filler.chunk(bytes)
    }

    fn end(&mut self, info: &TensorInfo) -> Result<Flow> {
        let data = match self.viewed.take() {
            Some(d) => {
                self.filler.current = None;
                d
            }
            None if self.require_zero_copy => return Err(Self::not_viewable(&info.name)),
            None => self.filler.end()?,
        };
        self.tensors.push(Tensor {
            info: info.clone(),
            data,
        });
        Ok(Flow::Continue)
    }
}

// ---------------------------------------------------------------------------------------
// SliceSink

/// Writes one tensor's bytes into a caller's buffer, which must be exactly the tensor's
/// size (checked in [`Sink::begin`], before any byte arrives). May be reused for several
/// tensors of the same size; each overwrites the buffer.
#[derive(Debug)]
pub struct SliceSink<'b> {
    buf: &'b mut [u8],
    filled: usize,
    name: String,
}

impl<'b> SliceSink<'b> {
    /// A sink writing into `buf`.
    pub fn new(buf: &'b mut [u8]) -> Self {
        SliceSink {
            buf,
            filled: 0,
            name: String::new(),
        }
    }

    /// Bytes written so far for the current (or last) tensor.
    pub fn filled(&self) -> usize {
        self.filled
    }

    /// True when the last tensor filled the whole buffer.
    pub fn is_complete(&self) -> bool {
        self.filled == self.buf.len()
    }
}

impl Sink for SliceSink<'_> {
    fn begin(&mut self, info: &TensorInfo) -> Result<Flow> {
        self.name.clone_from(&info.name);
        self.filled = 0;
        if u64::try_from(self.buf.len()).ok() != Some(info.location.len()) {
            return Err(tensor_error(
                &info.name,
                ErrorKind::SizeMismatch(format!(
                    "tensor '{}' has {} bytes, the destination buffer {}",
                    info.name,
                    info.location.len(),
                    self.buf.len()
                )),
            ));
        }
        Ok(Flow::Continue)
    }

    /// Copies the bytes in one go.
    fn view(&mut self, _info: &TensorInfo, bytes: &Bytes, range: Range<usize>) -> Result<bool> {
        match bytes.as_bytes().get(range) {
            Some(b) if b.len() == self.buf.len() && self.filled == 0 => {
                self.buf.copy_from_slice(b);
                self.filled = b.len();
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// Views are copied before [`Sink::view`] returns.
    fn keeps_views(&self) -> bool {
        false
    }

    fn chunk(&mut self, bytes: &[u8]) -> Result<()> {
        let end = self.filled.saturating_add(bytes.len());
        let Some(dst) = self.buf.get_mut(self.filled..end) else {
            return Err(tensor_error(
                &self.name,
                ErrorKind::SizeMismatch(format!(
                    "tensor '{}' received more than the {} bytes expected",
                    self.name,
                    self.buf.len()
                )),
            ));
        };
        dst.copy_from_slice(bytes);
        self.filled = end;
        Ok(())
    }

    fn end(&mut self, info: &TensorInfo) -> Result<Flow> {
        if self.filled != self.buf.len() {
            return Err(size_mismatch(&info.name, self.filled, self.buf.len()));
        }
        Ok(Flow::Continue)
    }
}

// ---------------------------------------------------------------------------------------
// FilterSink

/// Forwards to `inner` only the tensors `keep` accepts; the others are skipped without
/// reading their bytes.
pub struct FilterSink<S, F> {
    /// The sink receiving the accepted tensors.
    pub inner: S,
    keep: F,
}

impl<S: Sink, F: FnMut(&TensorInfo) -> bool> FilterSink<S, F> {
    /// Wraps `inner`, forwarding the tensors for which `keep` returns true.
    pub fn new(inner: S, keep: F) -> Self {
        FilterSink { inner, keep }
    }

    /// The inner sink.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

/// A [`FilterSink`] keeping the tensors whose names are in `names`.
pub fn by_names<S: Sink>(
    inner: S,
    names: &[&str],
) -> FilterSink<S, impl FnMut(&TensorInfo) -> bool> {
    let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    FilterSink::new(inner, move |info: &TensorInfo| names.contains(&info.name))
}

impl<S: Sink, F: FnMut(&TensorInfo) -> bool> Sink for FilterSink<S, F> {
    fn begin(&mut self, info: &TensorInfo) -> Result<Flow> {
        if (self.keep)(info) {
            self.inner.begin(info)
        } else {
            Ok(Flow::Skip)
        }
    }
    fn view(&mut self, info: &TensorInfo, bytes: &Bytes, range: Range<usize>) -> Result<bool> {
        self.inner.view(info, bytes, range)
    }
    fn keeps_views(&self) -> bool {
        self.inner.keeps_views()
    }
    fn chunk(&mut self, bytes: &[u8]) -> Result<()> {
        self.inner.chunk(bytes)
    }
    fn end(&mut self, info: &TensorInfo) -> Result<Flow> {
        self.inner.end(info)
    }
}

impl<S: std::fmt::Debug, F> std::fmt::Debug for FilterSink<S, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FilterSink")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_buffers_are_huge_page_aligned_and_keep_bytes_across_growth() {
        let mut b = AlignedBuf::new();
        b.extend_from_slice(&[7u8; 100]).unwrap();
        assert_eq!(b.as_ptr() as usize % AlignedBuf::ALIGN, 0);
        b.extend_from_slice(&vec![9u8; 3 << 20]).unwrap();
        assert_eq!(b.as_ptr() as usize % (2 << 20), 0);
        assert_eq!(&b[..100], &[7u8; 100][..]);
        assert!(b[100..].iter().all(|&x| x == 9));
        let z = AlignedBuf::zeroed(5 << 20).unwrap();
        assert!(z.iter().all(|&x| x == 0));
    }
    use crate::dtype::DType;
    use crate::tensor::{ByteOrder, Order};
    use crate::tensor::{DataLocation, Encoded, EncodedBytes};

    /// 100 bytes said to be compressed into 2 (what a deflated zip member reports).
    #[derive(Debug)]
    struct Deflated;

    impl Encoded for Deflated {
        fn plain_offset(&self, _: &dyn crate::source::RandomAccess, _: u64) -> Result<Option<u64>> {
            Ok(None)
        }
        fn compressed_len(&self, _: u64) -> Option<u64> {
            Some(2)
        }
        fn read(
            &self,
            _: &crate::source::Source,
            _: &TensorInfo,
            _: u64,
            _: (u64, u64),
            _: &mut dyn Sink,
            _: &crate::read::ReadOptions,
        ) -> Result<()> {
            unreachable!("the test pushes the bytes itself")
        }
        fn as_any(&self) -> &dyn std::any::Any {
            self
        }
        fn same(&self, other: &dyn Encoded) -> bool {
            other.as_any().is::<Deflated>()
        }
    }

    fn info(name: &str, len: u64) -> TensorInfo {
        TensorInfo::dense(
            name,
            DType::U8,
            vec![len],
            Order::C,
            ByteOrder::Little,
            DataLocation::Range { offset: 0, len },
        )
        .unwrap()
    }

    fn push(sink: &mut dyn Sink, info: &TensorInfo, chunks: &[&[u8]]) -> Result<Flow> {
        assert_eq!(sink.begin(info)?, Flow::Continue);
        for c in chunks {
            sink.chunk(c)?;
        }
        sink.end(info)
    }

    #[test]
    fn aligned_buf_basics() {
        let e = AlignedBuf::zeroed(0).unwrap();
        assert!(e.is_empty());
        assert_eq!(e.as_ptr() as usize % AlignedBuf::ALIGN, 0);
        assert_eq!(&*e, &[] as &[u8]);
        let mut b = AlignedBuf::from_slice(b"hello").unwrap();
        assert_eq!(b.as_ptr() as usize % AlignedBuf::ALIGN, 0);
        assert_eq!(&*b, b"hello");
        b[0] = b'j';
        b.extend_from_slice(&[b'!'; 200]).unwrap();
        assert_eq!(b.len(), 205);
        assert_eq!(&b[..5], b"jello");
        assert_eq!(b.as_ptr() as usize % AlignedBuf::ALIGN, 0);
        let c = b.clone();
        assert_eq!(b, c);
        assert!(AlignedBuf::zeroed(usize::MAX).is_err());
    }

    #[test]
    fn owned_sink_collects_chunks() {
        let mut s = OwnedSink::new();
        let i = info("a", 6);
        push(&mut s, &i, &[b"abc", b"", b"def"]).unwrap();
        let i0 = info("empty", 0);
        push(&mut s, &i0, &[]).unwrap();
        assert_eq!(s.tensors.len(), 2);
        assert_eq!(s.tensors[0].data.as_bytes(), b"abcdef");
        assert!(!s.tensors[0].data.is_mapped());
        assert_eq!(s.tensors[0].data.as_bytes().as_ptr() as usize % 64, 0);
        assert!(s.tensors[1].data.is_empty());
    }

    #[test]
    fn owned_sink_rejects_wrong_sizes() {
        let mut s = OwnedSink::new();
        let i = info("big", 4);
        let e = push(&mut s, &i, &[b"abc", b"de"]).unwrap_err();
        assert!(matches!(e.kind, ErrorKind::SizeMismatch(_)));
        assert_eq!(e.location.entry.as_deref(), Some("big"));
        let e = push(&mut s, &i, &[b"abc"]).unwrap_err();
        assert!(e.to_string().contains("big"), "{e}");
        assert!(s.tensors.is_empty());
    }

    #[test]
    fn owned_sink_grows_compressed_content() {
        let mut i = info("x", 100);
        i.location = EncodedBytes::new(Deflated).window(0, 0, 100);
        let mut s = OwnedSink::new();
        let data: Vec<u8> = (0..100).collect();
        let chunks: Vec<&[u8]> = data.chunks(7).collect();
        push(&mut s, &i, &chunks).unwrap();
        assert_eq!(s.tensors[0].data.as_bytes(), &data[..]);
    }

    #[test]
    fn view_sink_views_or_copies() {
        let bytes = Bytes::Owned(std::sync::Arc::from(b"xxhello".to_vec()));
        let i = info("v", 5);
        let mut s = ViewSink::new();
        s.begin(&i).unwrap();
        assert!(s.view(&i, &bytes, 2..7).unwrap());
        s.end(&i).unwrap();
        push(&mut s, &i, &[b"he", b"llo"]).unwrap();
        assert!(s.tensors[0].data.is_mapped());
        assert_eq!(s.tensors[0].data.as_bytes(), b"hello");
        assert!(!s.tensors[1].data.is_mapped());
        assert_eq!(s.tensors[1].data.as_bytes(), b"hello");
        // A view of the wrong size is declined.
        s.begin(&i).unwrap();
        assert!(!s.view(&i, &bytes, 0..2).unwrap());
        assert!(!s.view(&i, &bytes, 5..9).unwrap());
    }

    #[test]
    fn view_sink_zero_copy_only() {
        let mut s = ViewSink::zero_copy_only();
        let i = info("w", 3);
        s.begin(&i).unwrap();
        let e = s.chunk(b"abc").unwrap_err();
        assert!(e.to_string().contains("'w'"), "{e}");
        s.begin(&i).unwrap();
        let e = s.end(&i).unwrap_err();
        assert!(e.to_string().contains("'w'"), "{e}");
    }

    #[test]
    fn slice_sink_checks_size_first() {
        let mut buf = [0u8; 4];
        let mut s = SliceSink::new(&mut buf);
        let e = s.begin(&info("t", 5)).unwrap_err();
        assert!(matches!(e.kind, ErrorKind::SizeMismatch(_)));
        assert_eq!(s.filled(), 0);
        let i = info("t", 4);
        push(&mut s, &i, &[b"ab", b"cd"]).unwrap();
        assert!(s.is_complete());
        s.begin(&i).unwrap();
        s.chunk(b"abcd").unwrap();
        assert!(s.chunk(b"e").is_err());
        s.begin(&i).unwrap();
        s.chunk(b"ab").unwrap();
        assert!(s.end(&i).is_err());
        drop(s);
        assert_eq!(&buf, b"abcd");
    }

    #[test]
    fn filter_sink_skips() {
        let mut s = by_names(OwnedSink::new(), &["keep"]);
        assert_eq!(s.begin(&info("drop", 1)).unwrap(), Flow::Skip);
        push(&mut s, &info("keep", 1), &[b"k"]).unwrap();
        assert_eq!(s.into_inner().tensors.len(), 1);
    }
}
