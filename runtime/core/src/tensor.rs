//! Tensor metadata: name, dtype, shape, strides, byte order and where the bytes are.

use crate::dtype::DType;
use crate::error::{ErrorKind, Result};

/// Byte order of the stored elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ByteOrder {
    /// Least significant byte first.
    #[default]
    Little,
    /// Most significant byte first.
    Big,
}

impl ByteOrder {
    /// The byte order of the machine running this code.
    pub const NATIVE: ByteOrder = if cfg!(target_endian = "little") {
        ByteOrder::Little
    } else {
        ByteOrder::Big
    };
}

/// How the elements are laid out in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Order {
    /// Row-major: the last index varies fastest.
    #[default]
    C,
    /// Column-major: the first index varies fastest.
    Fortran,
}

/// Where a tensor's bytes are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DataLocation {
    /// Stored plain at an absolute byte range of the container file.
    Range {
        /// Absolute offset of the first byte.
        offset: u64,
        /// Number of bytes.
        len: u64,
    },
    /// In another file beside the container (ONNX external data): `path` as the
    /// container names it, relative to the container's folder (resolved and checked by
    /// [`crate::source::Source::external`]), `len` bytes at `offset`.
    External {
        /// The file, relative to the container's folder.
        path: String,
        /// Offset of the first byte in that file.
        offset: u64,
        /// Number of bytes.
        len: u64,
    },
    /// `len` bytes, `skip` bytes into part `part` of content a container engine stores
    /// in its own encoding (member `part` of a zip archive, the values of a protobuf
    /// repeated field): the engine's [`Encoded`] value, shared by every tensor of that
    /// content (a zip archive's index), says where a part lies plain if it does, and
    /// reads it.
    Encoded {
        /// The content.
        content: EncodedBytes,
        /// Which part of the content (the engine's number: a zip member's position).
        part: u64,
        /// Bytes of the content before the tensor's first byte.
        skip: u64,
        /// Number of bytes of the tensor.
        len: u64,
    },
    /// The tensor's bytes in pieces, one after the other (a Caffe2 tensor saved in
    /// chunks, each record holding the elements of one segment).
    Pieces(Vec<DataLocation>),
}

/// Content a container engine stores in its own encoding, in numbered parts (a zip
/// archive's members, a protobuf field's values): implemented by the engine crates, read
/// by [`crate::read`] through this interface alone, so that the core knows no container.
/// One value describes the whole content (a zip archive's index, shared by every tensor
/// of the archive: nothing is allocated or copied per tensor); a tensor is a byte window
/// of one part ([`DataLocation::Encoded`]).
///
/// Contract: [`Encoded::read`] pushes exactly the window's bytes through the sink's
/// [`crate::sink::Sink::chunk`] (and may offer [`crate::sink::Sink::view`]), never calling
/// `begin` or `end`, which the caller does, and fails on a part it does not have or a
/// window beyond the part; [`Encoded::plain_offset`] is `Some` only when the part lies
/// unchanged from that offset of the container.
pub trait Encoded: std::fmt::Debug + Send + Sync + 'static {
    /// The absolute offset in the container `src` where part `part` starts when it is
    /// stored plain there, which allows zero-copy views; `None` otherwise.
    fn plain_offset(&self, src: &dyn crate::source::RandomAccess, part: u64)
        -> Result<Option<u64>>;
    /// The number of bytes read from the container to produce part `part` when that is
    /// fewer than the part holds (compressed content): a reader's first buffer is
    /// bounded by it, as content may be far larger than what holds it.
    fn compressed_len(&self, part: u64) -> Option<u64> {
        let _ = part;
        None
    }
    /// Pushes `len` bytes of part `part`, `skip` bytes into it, for tensor `info` read
    /// from `src`, into `sink`.
    fn read(
        &self,
        src: &crate::source::Source,
        info: &TensorInfo,
        part: u64,
        window: (u64, u64),
        sink: &mut dyn crate::sink::Sink,
        opts: &crate::read::ReadOptions,
    ) -> Result<()>;
    /// The value, for callers that know the engine's type ([`EncodedBytes::downcast`]).
    fn as_any(&self) -> &dyn std::any::Any;
    /// True when `other` is the same content.
    fn same(&self, other: &dyn Encoded) -> bool;
}

/// A shared [`Encoded`] value: what [`DataLocation::Encoded`] holds.
#[derive(Debug, Clone)]
pub struct EncodedBytes(pub std::sync::Arc<dyn Encoded>);

impl EncodedBytes {
    /// Wraps an engine's content.
    pub fn new(e: impl Encoded) -> Self {
        EncodedBytes(std::sync::Arc::new(e))
    }

    /// The location of `len` bytes of part `part` of this content, `skip` bytes into it.
    pub fn window(self, part: u64, skip: u64, len: u64) -> DataLocation {
        DataLocation::Encoded {
            content: self,
            part,
            skip,
            len,
        }
    }

    /// The engine's own type, when it is `T`.
    pub fn downcast<T: Encoded>(&self) -> Option<&T> {
        self.0.as_any().downcast_ref::<T>()
    }
}

impl std::ops::Deref for EncodedBytes {
    type Target = dyn Encoded;
    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}

impl PartialEq for EncodedBytes {
    fn eq(&self, other: &Self) -> bool {
        self.0.same(&*other.0)
    }
}

impl Eq for EncodedBytes {}

impl DataLocation {
    /// [`DataLocation::Range`]: `len` bytes from `offset` of the container file.
    pub const fn range(offset: u64, len: u64) -> Self {
        DataLocation::Range { offset, len }
    }

    /// The number of bytes of the tensor.
    pub fn len(&self) -> u64 {
        match self {
            DataLocation::Range { len, .. }
            | DataLocation::External { len, .. }
            | DataLocation::Encoded { len, .. } => *len,
            DataLocation::Pieces(p) => p.iter().map(DataLocation::len).sum(),
        }
    }

    /// True when the tensor holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The engine's content of type `T` and the window of it (part, skip, len), when
    /// the bytes are [`DataLocation::Encoded`] by that engine.
    pub fn encoded<T: Encoded>(&self) -> Option<(&T, u64, u64, u64)> {
        match self {
            DataLocation::Encoded {
                content,
                part,
                skip,
                len,
            } => Some((content.downcast()?, *part, *skip, *len)),
            _ => None,
        }
    }

    /// The number of bytes read to produce the tensor when they are compressed
    /// ([`Encoded::compressed_len`]).
    pub fn compressed_len(&self) -> Option<u64> {
        match self {
            DataLocation::Encoded { content, part, .. } => content.compressed_len(*part),
            _ => None,
        }
    }

    /// The absolute byte range in the container file `src` when the bytes are stored
    /// plain there (a plain range, or a stored zip member, whose local header is read),
    /// which allows zero-copy views; `None` when they are compressed or in another file.
    pub fn plain_range(&self, src: &dyn crate::source::RandomAccess) -> Result<Option<(u64, u64)>> {
        match self {
            DataLocation::Range { offset, len } => Ok(Some((*offset, *len))),
            DataLocation::Encoded {
                content,
                part,
                skip,
                len,
            } => match content.plain_offset(src, *part)? {
                Some(start) => {
                    let start = start
                        .checked_add(*skip)
                        .ok_or_else(|| ErrorKind::Overflow("tensor offset".into()))?;
                    Ok(Some((start, *len)))
                }
                None => Ok(None),
            },
            DataLocation::Pieces(p) if p.len() == 1 => p[0].plain_range(src),
            DataLocation::External { .. } | DataLocation::Pieces(_) => Ok(None),
        }
    }
}

/// Everything known about one tensor without reading its payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    /// The tensor's name (README.md, *Tensor names and digests*).
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Extent of each dimension; empty for a 0-d tensor.
    pub shape: Vec<u64>,
    /// Stride of each dimension in elements.
    pub strides: Vec<i64>,
    /// Byte order of the stored elements.
    pub byte_order: ByteOrder,
    /// Where the bytes are.
    pub location: DataLocation,
}

impl TensorInfo {
    /// Builds the metadata of a `string` tensor of `count` elements, delivered as each
    /// element's length (u64, little-endian) then its bytes (`location` holds them all),
    /// checking that `count` is the number of elements `shape` has.
    pub fn strings(
        name: impl Into<String>,
        shape: Vec<u64>,
        count: u64,
        location: DataLocation,
    ) -> Result<Self> {
        let name = name.into();
        if numel(&shape)? != count {
            return Err(ErrorKind::SizeMismatch(format!(
                "string tensor '{name}' of shape {shape:?} holds {count} strings"
            ))
            .into());
        }
        let strides = contiguous_strides(&shape, Order::C)?;
        Ok(TensorInfo {
            name,
            dtype: DType::String,
            shape,
            strides,
            byte_order: ByteOrder::Little,
            location,
        })
    }

    /// Builds the metadata of a dense tensor stored in `order`, checking that the
    /// element count and byte size do not overflow and that `location` holds exactly
    /// the tensor's bytes.
    pub fn dense(
        name: impl Into<String>,
        dtype: DType,
        shape: Vec<u64>,
        order: Order,
        byte_order: ByteOrder,
        location: DataLocation,
    ) -> Result<Self> {
        let name = name.into();
        let nbytes = nbytes(dtype, &shape)?;
        if nbytes != location.len() {
            return Err(ErrorKind::SizeMismatch(format!(
                "tensor '{name}' of dtype {dtype} and shape {shape:?} needs {nbytes} bytes, the file holds {}",
                location.len()
            ))
            .into());
        }
        let strides = contiguous_strides(&shape, order)?;
        Ok(TensorInfo {
            name,
            dtype,
            shape,
            strides,
            byte_order,
            location,
        })
    }

    /// [`TensorInfo::dense`] of a tensor stored at `len` bytes from `offset` of the
    /// container file ([`DataLocation::Range`]).
    pub fn dense_range(
        name: impl Into<String>,
        dtype: DType,
        shape: Vec<u64>,
        order: Order,
        byte_order: ByteOrder,
        offset: u64,
        len: u64,
    ) -> Result<Self> {
        let location = DataLocation::Range { offset, len };
        TensorInfo::dense(name, dtype, shape, order, byte_order, location)
    }

    /// Builds the metadata of a strided view (`strides` in elements, as PyTorch saves
    /// them): `location` starts at the view's first element (the storage offset) and
    /// runs to the end of the storage. The result's location is cut to the bytes the view
    /// addresses: from its first element to one past its last. Stride 0 (broadcast
    /// dimensions) and empty tensors are allowed; negative strides are refused, and a
    /// storage too short for the view is an [`ErrorKind::SizeMismatch`]. All arithmetic
    /// is checked.
    pub fn strided(
        name: impl Into<String>,
        dtype: DType,
        shape: Vec<u64>,
        strides: Vec<i64>,
        byte_order: ByteOrder,
        location: DataLocation,
    ) -> Result<Self> {
        let name = name.into();
        if strides.len() != shape.len() {
            return Err(ErrorKind::Invalid(format!(
                "tensor '{name}' has shape {shape:?} but strides {strides:?}"
            ))
            .into());
        }
        if let Some(s) = strides.iter().find(|&&s| s < 0) {
            return Err(ErrorKind::Unsupported(format!(
                "tensor '{name}' has a negative stride {s}"
            ))
            .into());
        }
        let item = dtype.itemsize().ok_or_else(|| {
            ErrorKind::Unsupported("string tensors have no fixed byte size".to_string())
        })? as u64;
        // Checks the element count and byte size.
        nbytes(dtype, &shape)?;
        let overflow = || ErrorKind::Overflow(format!("extent of tensor '{name}'"));
        let extent = if shape.contains(&0) {
            0
        } else {
            // One past the last addressed element, in elements.
            let mut last: u64 = 0;
            for (&n, &s) in shape.iter().zip(&strides) {
                let step = (n - 1).checked_mul(s as u64).ok_or_else(overflow)?;
                last = last.checked_add(step).ok_or_else(overflow)?;
            }
            last.checked_add(1)
                .and_then(|e| e.checked_mul(item))
                .ok_or_else(overflow)?
        };
        if extent > location.len() {
            return Err(ErrorKind::SizeMismatch(format!(
                "tensor '{name}' of dtype {dtype}, shape {shape:?} and strides {strides:?} addresses {extent} bytes from its offset, the storage holds {}",
                location.len()
            ))
            .into());
        }
        let location = match location {
            DataLocation::Range { offset, .. } => DataLocation::Range {
                offset,
                len: extent,
            },
            DataLocation::External { path, offset, .. } => DataLocation::External {
                path,
                offset,
                len: extent,
            },
            DataLocation::Encoded {
                content,
                part,
                skip,
                ..
            } => DataLocation::Encoded {
                content,
                part,
                skip,
                len: extent,
            },
            DataLocation::Pieces(p) if extent == p.iter().map(DataLocation::len).sum::<u64>() => {
                DataLocation::Pieces(p)
            }
            DataLocation::Pieces(_) => {
                return Err(ErrorKind::Unsupported(format!(
                    "tensor '{name}' in pieces viewed with strides"
                ))
                .into())
            }
        };
        Ok(TensorInfo {
            name,
            dtype,
            shape,
            strides,
            byte_order,
            location,
        })
    }

    /// Number of elements (checked).
    pub fn numel(&self) -> Result<u64> {
        numel(&self.shape)
    }

    /// Number of bytes the elements take (checked). Errors for `string` tensors.
    pub fn nbytes(&self) -> Result<u64> {
        nbytes(self.dtype, &self.shape)
    }

    /// The memory order if the strides are those of a contiguous C or Fortran layout.
    /// A tensor with at most one dimension larger than 1 is reported as C.
    pub fn order(&self) -> Option<Order> {
        let c = contiguous_strides(&self.shape, Order::C).ok()?;
        if same_strides(&self.shape, &self.strides, &c) {
            return Some(Order::C);
        }
        let f = contiguous_strides(&self.shape, Order::Fortran).ok()?;
        if same_strides(&self.shape, &self.strides, &f) {
            return Some(Order::Fortran);
        }
        None
    }
}

/// Strides agree where they matter: dimensions of extent 1 (or any empty tensor) place
/// no constraint on their stride.
fn same_strides(shape: &[u64], a: &[i64], b: &[i64]) -> bool {
    if a.len() != b.len() || a.len() != shape.len() {
        return false;
    }
    if shape.contains(&0) {
        return true;
    }
    shape
        .iter()
        .zip(a.iter().zip(b))
        .all(|(&n, (x, y))| n == 1 || x == y)
}

/// Element count of `shape`, with overflow checked.
pub fn numel(shape: &[u64]) -> Result<u64> {
    shape.iter().try_fold(1u64, |acc, &d| {
        acc.checked_mul(d)
            .ok_or_else(|| ErrorKind::Overflow(format!("element count of shape {shape:?}")).into())
    })
}

/// Byte size of a tensor of `dtype` and `shape`, with overflow checked.
pub fn nbytes(dtype: DType, shape: &[u64]) -> Result<u64> {
    let item = dtype.itemsize().ok_or_else(|| {
        ErrorKind::Unsupported("string tensors have no fixed byte size".to_string())
    })? as u64;
    numel(shape)?.checked_mul(item).ok_or_else(|| {
        ErrorKind::Overflow(format!("byte size of a {dtype} tensor of shape {shape:?}")).into()
    })
}

/// Strides in elements of a contiguous tensor of `shape` in `order`.
pub fn contiguous_strides(shape: &[u64], order: Order) -> Result<Vec<i64>> {
    let mut strides = vec![0i64; shape.len()];
    let mut acc: i64 = 1;
    let mut step = |i: usize| -> Result<()> {
        strides[i] = acc;
        let d = i64::try_from(shape[i])
            .map_err(|_| ErrorKind::Overflow(format!("dimension {}", shape[i])))?;
        acc = acc
            .checked_mul(d.max(1))
            .ok_or_else(|| ErrorKind::Overflow(format!("strides of shape {shape:?}")))?;
        Ok(())
    };
    match order {
        Order::C => {
            for i in (0..shape.len()).rev() {
                step(i)?;
            }
        }
        Order::Fortran => {
            for i in 0..shape.len() {
                step(i)?;
            }
        }
    }
    Ok(strides)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strides_and_order() {
        assert_eq!(
            contiguous_strides(&[2, 3, 4], Order::C).unwrap(),
            vec![12, 4, 1]
        );
        assert_eq!(
            contiguous_strides(&[2, 3, 4], Order::Fortran).unwrap(),
            vec![1, 2, 6]
        );
        let info = TensorInfo::dense(
            "x",
            DType::F32,
            vec![2, 3],
            Order::Fortran,
            ByteOrder::Little,
            DataLocation::Range { offset: 0, len: 24 },
        )
        .unwrap();
        assert_eq!(info.order(), Some(Order::Fortran));
    }

    #[test]
    fn strided_views() {
        let at = |len| DataLocation::Range { offset: 8, len };
        // A transposed (4, 3) view of 12 f32: extent is the whole storage.
        let t = TensorInfo::strided(
            "t",
            DType::F32,
            vec![4, 3],
            vec![1, 4],
            ByteOrder::Little,
            at(100),
        )
        .unwrap();
        assert_eq!(t.location, DataLocation::Range { offset: 8, len: 48 });
        assert_eq!(t.order(), Some(Order::Fortran));
        // Broadcast: stride 0 addresses one row.
        let b = TensorInfo::strided(
            "b",
            DType::F64,
            vec![4, 3],
            vec![0, 1],
            ByteOrder::Little,
            at(24),
        )
        .unwrap();
        assert_eq!(b.location.len(), 24);
        // 0-d and empty tensors.
        let s =
            TensorInfo::strided("s", DType::I16, vec![], vec![], ByteOrder::Little, at(2)).unwrap();
        assert_eq!(s.location.len(), 2);
        let e = TensorInfo::strided(
            "e",
            DType::U32,
            vec![0, 4],
            vec![4, 1],
            ByteOrder::Little,
            at(0),
        )
        .unwrap();
        assert_eq!(e.location.len(), 0);
        // Too short, negative, mismatched, overflowing.
        let err = TensorInfo::strided(
            "x",
            DType::F32,
            vec![2, 3],
            vec![3, 1],
            ByteOrder::Little,
            at(20),
        )
        .unwrap_err();
        assert!(matches!(err.kind, ErrorKind::SizeMismatch(_)), "{err}");
        assert!(err.to_string().contains("'x'"), "{err}");
        assert!(
            TensorInfo::strided("x", DType::F32, vec![2], vec![-1], ByteOrder::Little, at(8))
                .is_err()
        );
        assert!(TensorInfo::strided(
            "x",
            DType::F32,
            vec![2],
            vec![1, 1],
            ByteOrder::Little,
            at(8)
        )
        .is_err());
        assert!(TensorInfo::strided(
            "x",
            DType::F32,
            vec![3, 3],
            vec![i64::MAX, i64::MAX],
            ByteOrder::Little,
            at(8)
        )
        .is_err());
    }

    #[test]
    fn overflow_is_an_error() {
        assert!(nbytes(DType::F64, &[u64::MAX, 2]).is_err());
        assert!(TensorInfo::dense(
            "x",
            DType::F32,
            vec![10],
            Order::C,
            ByteOrder::Little,
            DataLocation::Range { offset: 0, len: 8 }
        )
        .is_err());
    }
}

/// What a writer needs to know of a tensor: its bytes follow in exactly this layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorMeta {
    /// The tensor's name.
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Extent of each dimension.
    pub shape: Vec<u64>,
    /// Memory order of the bytes handed to the writer.
    pub order: Order,
    /// Byte order of the bytes handed to the writer.
    pub byte_order: ByteOrder,
}

impl TensorMeta {
    /// Number of bytes the writer must receive (checked).
    pub fn nbytes(&self) -> Result<u64> {
        nbytes(self.dtype, &self.shape)
    }

    /// The metadata of `info` for writing, if its layout is contiguous C or Fortran.
    pub fn from_info(info: &TensorInfo) -> Option<Self> {
        Some(TensorMeta {
            name: info.name.clone(),
            dtype: info.dtype,
            shape: info.shape.clone(),
            order: info.order()?,
            byte_order: info.byte_order,
        })
    }
}

/// Options every generated writer accepts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteOptions {
    /// Compression of container entries; `None` takes the format's default (the first
    /// method its schema lists).
    pub compression: Option<Compression>,
    /// Where tensors go in formats that can keep them in files beside the document
    /// (ONNX external data); other formats ignore it.
    pub external: ExternalData,
    /// The path being written, for formats that write files beside it (external data).
    /// Set by the high-level API's path-based saves; `None` for streams.
    pub destination: Option<std::path::PathBuf>,
    /// A tag unique to this save (`{pid}-{random}`, [`AtomicFile::save_tag`]), set by
    /// the high-level API's path-based saves: the files a format writes beside the
    /// destination (external data) are named `{destination's name}.{tag}.…`, so that they
    /// cannot collide with the input's files, another model's or anything already there.
    /// `None` makes a fresh one.
    ///
    /// [`AtomicFile::save_tag`]: crate::output::AtomicFile::save_tag
    pub save_tag: Option<String>,
    /// Databases of records (Caffe2): the most elements one record holds; `None` takes
    /// the format's default (Caffe2's 1,000,000), `Some(u64::MAX)` never splits.
    pub chunk_elements: Option<u64>,
    /// The alignment the save asks for, in bytes (a power of two, 1 to 1 GiB): formats
    /// whose schema uses `write_align` honour it; `None` writes as the format's own tools
    /// do. A format that does not align its tensors' data refuses a save that asks for it
    /// ([`FormatDesc::aligns`]).
    ///
    /// safetensors: the data starts at a multiple of max(8, N); the tensors whose size is
    /// a multiple of N come first (each then at a multiple of N), then the others (each at
    /// a multiple of its element size), each group in the package's order. Its readers
    /// refuse a hole between tensors, so a tensor whose size is not a multiple of N cannot
    /// be N-aligned without an extra entry, which they would list as a tensor: none is
    /// added, and the package reads the file.
    ///
    /// [`FormatDesc::aligns`]: crate::registry::FormatDesc::aligns
    pub align: Option<u64>,
    /// The pickle protocol of formats that are one pickle holding their arrays' bytes
    /// (`pickle`): 4 when `None` (what `pickle.dump` writes by default, NumPy arrays as
    /// byte strings), 2 for readers older than Python 3.4 (byte strings as
    /// `_codecs.encode(text, 'latin1')`). Other protocols are refused by the writer; other
    /// formats ignore it (a PyTorch checkpoint's `data.pkl` is protocol 2, as torch writes
    /// it).
    pub pickle_protocol: Option<u8>,
}

/// The largest alignment a save may ask for ([`WriteOptions::align`]): 1 GiB.
pub const MAX_WRITE_ALIGN: u64 = 1 << 30;

impl WriteOptions {
    /// [`WriteOptions::align`], checked: a power of two from 1 to 1 GiB, else an error
    /// naming the value.
    pub fn checked_align(&self) -> Result<Option<u64>> {
        match self.align {
            Some(n) if !n.is_power_of_two() || n > MAX_WRITE_ALIGN => Err(ErrorKind::Unsupported(
                format!("alignment {n}: an alignment is a power of two from 1 to 1 GiB ({MAX_WRITE_ALIGN})"),
            )
            .into()),
            a => Ok(a),
        }
    }
}

/// How a container entry's content is compressed (a zip member's method).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Compression {
    /// Method 0: stored plain.
    Stored,
    /// Method 8: raw deflate.
    Deflate,
}

/// Where the tensors written to a protobuf document keep their bytes (ONNX's external
/// data). The protobuf engine places them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ExternalData {
    /// In the document, until a tensor would take the document past 2 GiB: that tensor
    /// and every later one go to one external file beside it, each at a multiple of 4096
    /// bytes. A rewritten tensor that was external stays external (in that file).
    ///
    /// External files get a fresh name per save, the document's name and the save's tag
    /// ([`WriteOptions::save_tag`]): `model.onnx` → `model.onnx.{pid}-{random}.data`, so
    /// that no save writes over a file it did not create (the input's data, another
    /// model's, anything else there). They are committed before the document; the data
    /// files the replaced document had under such names are removed after it.
    #[default]
    Auto,
    /// Every tensor in the document; a document past 2 GiB is an error.
    Inline,
    /// Tensors of at least `threshold` bytes in external files beside the document, the
    /// others inline.
    External {
        /// One file per tensor (`{document}.{tag}.{tensor}`, the tensor's name where it is
        /// a safe file name, else `tensor_<n>`), or one file for all of them.
        per_tensor: bool,
        /// The one file's name, in the document's folder (a file that must not exist:
        /// a save writes over no file); by default `{document}.{tag}.data`. Ignored with
        /// `per_tensor`.
        location: Option<String>,
        /// Tensors smaller than this many bytes stay inline (onnx's default is 1024).
        threshold: u64,
        /// Each tensor's offset in the one file is a multiple of this (4096, a page, by
        /// default: every tensor can be memory-mapped where it is); 0 or 1 packs them.
        align: u64,
    },
}

impl ExternalData {
    /// Every tensor of at least 1024 bytes in one file beside the document, at page-aligned
    /// offsets.
    pub fn one_file() -> Self {
        ExternalData::External {
            per_tensor: false,
            location: None,
            threshold: 1024,
            align: 4096,
        }
    }

    /// Every tensor of at least 1024 bytes in a file of its own.
    pub fn per_tensor() -> Self {
        ExternalData::External {
            per_tensor: true,
            location: None,
            threshold: 1024,
            align: 4096,
        }
    }
}
