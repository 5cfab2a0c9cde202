//! torch.distributed.checkpoint (DCP) folders, the checkpoints FSDP, Megatron-Core's
//! `torch_dist` and TorchTitan save: a pickled `.metadata` and one or more `.distcp` files
//! per rank. The metadata lists every tensor of the state dict with its global size and
//! the chunks the ranks saved (offsets and sizes along each dimension), and where each
//! chunk lies: `storage_data` maps `MetadataIndex(fqn, offsets)` to
//! `_StorageInfo(relative_path, offset, length)`, a byte range of a `.distcp` file holding
//! a whole `torch.save` archive of the chunk. Values that are not tensors
//! (`BytesStorageMetadata`) are `torch.save`d objects there too; `planner_data` gives
//! each entry's path in the nested state dict.
//!
//! Written by hand rather than in a `.fmt` schema: the format is a layout of files
//! around the `pytorch` format (each item is read by its `FormatDesc`), and assembling a
//! tensor from chunks, or a slice of it from the chunks it overlaps, is arithmetic over
//! boxes that no schema construct describes.
//!
//! Reading: `.metadata` goes through the restricted unpickler, allowed DCP's dataclasses
//! (`Metadata`, `TensorStorageMetadata`, `ChunkStorageMetadata`, `BytesStorageMetadata`,
//! `MetadataIndex`, `TensorProperties`, `StorageMeta`, `_StorageInfo`), the two values
//! they hold that torch pickles by calling a function (`_MEM_FORMAT_ENCODING(0)`,
//! `torch.serialization._get_layout("torch.strided")`), `torch.Size`, torch's dtypes and
//! `pathlib.PosixPath` (`StorageMeta.checkpoint_id`), and nothing else. The index checks
//! every chunk against its tensor (inside it, the chunks tiling it exactly, each with an
//! item); `.distcp` files are mapped when a tensor or value is first read
//! ([`Source::external`]: inside the folder), or for a checkpoint in object storage read
//! by ranged GETs of the items' byte ranges ([`Source::neighbour`]), and each item's archive is checked as the
//! `pytorch` format checks a file, and against its chunk (dtype, shape).

use std::collections::HashMap;
use std::sync::Arc;

use tensorfmt_runtime::pickle::{self, Kind, Rules, Value};
use tensorfmt_runtime::read::ReadOptions;
use tensorfmt_runtime::source::{Bytes, RandomAccess};
use tensorfmt_runtime::tensor::{Encoded, EncodedBytes};

use crate::{
    ByteOrder, DType, Error, ErrorKind, FormatDesc, Limits, Location, Node, OpenOptions, Order,
    Result, Sink, Source, TensorFile, TensorInfo,
};

/// The name of the metadata file in a DCP folder.
pub const METADATA: &str = ".metadata";

/// The module of DCP's metadata classes.
const MODULE: &str = "torch.distributed.checkpoint.metadata";

/// The format, read only: `TensorFile::open` on a DCP folder or its `.metadata`.
pub const DESC: FormatDesc = FormatDesc::new("torch-dcp", &[], detect, index).structure(structure);

/// torch's dtypes as DCP's metadata names them (`torch.float32`), with their aliases.
const DTYPES: [(&str, DType); 23] = [
    ("float16", DType::F16),
    ("half", DType::F16),
    ("bfloat16", DType::BF16),
    ("float32", DType::F32),
    ("float", DType::F32),
    ("float64", DType::F64),
    ("double", DType::F64),
    ("int8", DType::I8),
    ("int16", DType::I16),
    ("short", DType::I16),
    ("int32", DType::I32),
    ("int", DType::I32),
    ("int64", DType::I64),
    ("long", DType::I64),
    ("uint8", DType::U8),
    ("uint16", DType::U16),
    ("uint32", DType::U32),
    ("uint64", DType::U64),
    ("bool", DType::Bool),
    ("complex64", DType::C64),
    ("complex128", DType::C128),
    ("float8_e4m3fn", DType::F8E4M3FN),
    ("float8_e5m2", DType::F8E5M2),
];

/// What `.metadata` may name.
fn rules() -> Rules {
    let mut r = Rules::new();
    for class in [
        "Metadata",
        "TensorStorageMetadata",
        "ChunkStorageMetadata",
        "BytesStorageMetadata",
        "MetadataIndex",
        "TensorProperties",
        "StorageMeta",
    ] {
        r = r.allow(MODULE, class, Kind::Object);
    }
    r = r
        .allow(
            "torch.distributed.checkpoint.filesystem",
            "_StorageInfo",
            Kind::Object,
        )
        .allow_call(&format!("{MODULE}._MEM_FORMAT_ENCODING"), &["value"])
        .allow_call("torch.serialization._get_layout", &["name"])
        .allow_call("pathlib.PosixPath", &["path"])
        .allow_call("pathlib.WindowsPath", &["path"])
        .allow("torch", "Size", Kind::Tuple);
    for (name, _) in DTYPES {
        r = r.allow("torch", name, Kind::Class);
    }
    r
}

/// True when `src` is a DCP `.metadata` pickle: a pickle whose first bytes name DCP's
/// `Metadata` class.
fn detect(src: &Source, _: &Limits) -> bool {
    let mut head = [0u8; 256];
    let n = (src.data().len() as usize).min(head.len());
    if n < 8 || src.data().read_exact_at(0, &mut head[..n]).is_err() {
        return false;
    }
    let head = &head[..n];
    let find = |needle: &[u8]| head.windows(needle.len()).position(|w| w == needle);
    head[0] == 0x80
        && (2..=5).contains(&head[1])
        && find(MODULE.as_bytes())
            .is_some_and(|at| find(b"Metadata").is_some_and(|m| m > at + MODULE.len()))
}

/// One chunk of a tensor: its box in the tensor and the item holding it (none for an
/// empty chunk that has none).
#[derive(Debug, Clone)]
pub struct Chunk {
    /// Where the chunk starts along each dimension.
    pub offsets: Vec<u64>,
    /// Its size along each dimension.
    pub sizes: Vec<u64>,
    /// The item that holds it, by position in [`Checkpoint::items`].
    item: Option<usize>,
}

/// Where an item is: a byte range of a `.distcp` file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    /// The file, relative to the checkpoint's folder.
    pub file: String,
    /// Offset of the item's first byte in the file.
    pub offset: u64,
    /// Its length in bytes.
    pub length: u64,
}

/// A tensor of the checkpoint, as its global tensor.
#[derive(Debug, Clone)]
pub struct DcpTensor {
    /// Its fully qualified name (`model.layers.0.weight`).
    pub name: String,
    /// Its dtype.
    pub dtype: DType,
    /// Its global shape.
    pub shape: Vec<u64>,
    /// The chunks the ranks saved, in the metadata's order.
    pub chunks: Vec<Chunk>,
}

/// A value that is not a tensor, saved as a `torch.save`d object.
#[derive(Debug, Clone)]
struct DcpValue {
    name: String,
    item: usize,
}

/// What `.metadata` says of a checkpoint.
#[derive(Debug)]
pub struct Checkpoint {
    /// The tensors, in the metadata's order.
    pub tensors: Vec<DcpTensor>,
    values: Vec<DcpValue>,
    /// Every item the metadata lists.
    pub items: Vec<Item>,
    /// Each entry's path in the nested state dict (`planner_data`), by name.
    paths: HashMap<String, Vec<Key>>,
    /// The order of all entries, tensors and values, as the metadata lists them.
    order: Vec<(bool, usize)>,
    /// The tensors by name, made on the first lookup ([`chunks_of`]).
    by_name: crate::NameIndex,
}

/// `e` located at `name` (the entry) and `field`.
fn at(e: Error, name: &str, field: &str) -> Error {
    e.in_entry(name).in_field(field)
}

fn invalid(why: impl Into<String>) -> Error {
    Error::from(ErrorKind::Invalid(why.into()))
}

/// The `BUILD` state's entry `name` of object `v`.
fn field<'v>(v: &'v Value, name: &str) -> Option<&'v Value> {
    pickle::attr(Some(v), name)
}

/// The class name of object `v` (`TensorStorageMetadata`), when it is one of DCP's.
fn class_of(v: &Value) -> Option<&str> {
    v.as_object().map(|o| &*o.global.name)
}

/// A `torch.Size` (or a tuple or list) of non-negative integers.
fn size(v: Option<&Value>, what: &str) -> Result<Vec<u64>> {
    let items = match v {
        Some(Value::Object(o)) => &o.items[..],
        Some(other) => other
            .as_seq()
            .ok_or_else(|| invalid(format!("{what} is not a size")))?,
        None => return Err(invalid(format!("{what} is missing"))),
    };
    items
        .iter()
        .map(|i| {
            i.as_i64()
                .and_then(|n| u64::try_from(n).ok())
                .ok_or_else(|| invalid(format!("{what} holds {i:?}, not a size")))
        })
        .collect()
}

/// The checkpoint `.metadata` describes (parsed once per source).
pub fn checkpoint(src: &Source, limits: &Limits) -> Result<Arc<Checkpoint>> {
    src.memo(limits.max_header_bytes, |src| {
        let len = src.data().len();
        if len > limits.max_header_bytes {
            return Err(Error::from(ErrorKind::Limit {
                what: "metadata size",
                limit: limits.max_header_bytes,
                actual: len,
            }));
        }
        let bytes = src.whole()?;
        let root = pickle::read(&bytes, &rules(), limits)?;
        parse(&root, limits)
    })
}

/// The checkpoint of the metadata's object `root`.
fn parse(root: &Value, limits: &Limits) -> Result<Checkpoint> {
    if class_of(root) != Some("Metadata") {
        return Err(invalid("the pickle holds no DCP `Metadata` object"));
    }
    // Items, by (name, offsets); values' items by name alone.
    let mut items: Vec<Item> = Vec::new();
    let mut item_of: HashMap<(String, Option<Vec<u64>>), usize> = HashMap::new();
    if let Some(storage) = field(root, "storage_data") {
        let entries = storage
            .as_entries()
            .ok_or_else(|| invalid("`storage_data` is not a dict").in_field("storage_data"))?;
        for (key, info) in entries {
            if class_of(key) != Some("MetadataIndex") {
                return Err(invalid("a key of `storage_data` is not a `MetadataIndex`")
                    .in_field("storage_data"));
            }
            let name = field(key, "fqn").and_then(Value::as_str).ok_or_else(|| {
                invalid("a `MetadataIndex` has no `fqn`").in_field("storage_data")
            })?;
            let offsets = match field(key, "offset") {
                None | Some(Value::None) => None,
                v => Some(size(v, "the item's offset").map_err(|e| at(e, name, "storage_data"))?),
            };
            let loc = |e: Error| at(e, name, "storage_data");
            let file = field(info, "relative_path")
                .and_then(Value::as_str)
                .ok_or_else(|| loc(invalid("the item has no `relative_path`")))?;
            let offset = pickle::uint(field(info, "offset"), "offset").map_err(loc)?;
            let length = pickle::uint(field(info, "length"), "length").map_err(loc)?;
            match field(info, "transform_descriptors") {
                None | Some(Value::None) => {}
                Some(v) if v.as_seq().is_some_and(|s| s.is_empty()) => {}
                Some(v) => {
                    return Err(loc(Error::unsupported(format!(
                        "the item is stored through transforms ({v:?}): items written \
                         with storage transforms (compression) are not read"
                    ))))
                }
            }
            if items.len() as u64 >= limits.max_entries {
                return Err(Error::from(ErrorKind::Limit {
                    what: "item count",
                    limit: limits.max_entries,
                    actual: items.len() as u64 + 1,
                }));
            }
            item_of.insert((name.to_string(), offsets), items.len());
            items.push(Item {
                file: file.to_string(),
                offset,
                length,
            });
        }
    }
    let mut paths = HashMap::new();
    if let Some(planner) = field(root, "planner_data").and_then(Value::as_entries) {
        for (k, v) in planner {
            let (Some(name), Some(parts)) = (k.as_str(), v.as_seq()) else {
                continue;
            };
            let path: Option<Vec<Key>> = parts
                .iter()
                .map(|p| match p {
                    Value::Str(s) => Some(Key::Str(s.to_string())),
                    Value::Int(i) => Some(Key::Int(*i)),
                    _ => None,
                })
                .collect();
            if let Some(path) = path.filter(|p| !p.is_empty()) {
                paths.insert(name.to_string(), path);
            }
        }
    }
    let entries = field(root, "state_dict_metadata")
        .and_then(Value::as_entries)
        .ok_or_else(|| {
            invalid("the metadata has no `state_dict_metadata` dict")
                .in_field("state_dict_metadata")
        })?;
    let mut tensors = Vec::new();
    let mut values = Vec::new();
    let mut order = Vec::new();
    for (key, md) in entries {
        let name = key
            .as_str()
            .ok_or_else(|| invalid("a key of `state_dict_metadata` is not a string"))?;
        match class_of(md) {
            Some("BytesStorageMetadata") => {
                let item = *item_of.get(&(name.to_string(), None)).ok_or_else(|| {
                    at(
                        invalid("the value has no item in `storage_data`"),
                        name,
                        "storage_data",
                    )
                })?;
                order.push((false, values.len()));
                values.push(DcpValue {
                    name: name.to_string(),
                    item,
                });
            }
            Some("TensorStorageMetadata") => {
                let t = tensor(name, md, &item_of, limits)
                    .map_err(|e| at(e, name, "state_dict_metadata"))?;
                order.push((true, tensors.len()));
                tensors.push(t);
            }
            _ => {
                return Err(at(
                    invalid("the entry is neither tensor nor bytes storage metadata"),
                    name,
                    "state_dict_metadata",
                ))
            }
        }
    }
    if tensors.len() as u64 > limits.max_tensors {
        return Err(Error::from(ErrorKind::Limit {
            what: "tensor count",
            limit: limits.max_tensors,
            actual: tensors.len() as u64,
        }));
    }
    Ok(Checkpoint {
        tensors,
        values,
        items,
        paths,
        order,
        by_name: Default::default(),
    })
}

/// The tensor `name` a `TensorStorageMetadata` describes, its chunks checked.
fn tensor(
    name: &str,
    md: &Value,
    item_of: &HashMap<(String, Option<Vec<u64>>), usize>,
    limits: &Limits,
) -> Result<DcpTensor> {
    let props = field(md, "properties").ok_or_else(|| invalid("no `properties`"))?;
    // `TensorProperties.__getstate__`: (dtype, layout, requires_grad, memory_format,
    // pin_memory[, strides]).
    let state = pickle::state(Some(props)).and_then(Value::as_seq);
    let dtype_value = state
        .and_then(|s| s.first())
        .or_else(|| field(props, "dtype"))
        .ok_or_else(|| invalid("the properties hold no dtype"))?;
    let dtype = match dtype_value.as_global() {
        Some(g) if &*g.module == "torch" => {
            DTYPES.iter().find(|(n, _)| *n == &*g.name).map(|(_, d)| *d)
        }
        _ => None,
    }
    .ok_or_else(|| Error::from(ErrorKind::UnknownDType(format!("{dtype_value:?}"))))?;
    let shape = size(field(md, "size"), "the size")?;
    if shape.len() as u64 > limits.max_dims {
        return Err(Error::from(ErrorKind::Limit {
            what: "dimensions",
            limit: limits.max_dims,
            actual: shape.len() as u64,
        }));
    }
    let total = tensorfmt_runtime::tensor::nbytes(dtype, &shape)?
        / dtype.itemsize().unwrap_or(1).max(1) as u64;
    let list = field(md, "chunks")
        .and_then(Value::as_seq)
        .ok_or_else(|| invalid("no `chunks` list"))?;
    let mut chunks = Vec::with_capacity(list.len().min(1 << 16));
    let mut covered = 0u64;
    for (i, c) in list.iter().enumerate() {
        let what = |w: &str| format!("chunk {i}'s {w}");
        let offsets = size(field(c, "offsets"), &what("offsets"))?;
        let sizes = size(field(c, "sizes"), &what("sizes"))?;
        if offsets.len() != shape.len() || sizes.len() != shape.len() {
            return Err(invalid(format!(
                "chunk {i} has {} offsets and {} sizes for a tensor of {} dimensions",
                offsets.len(),
                sizes.len(),
                shape.len()
            )));
        }
        for d in 0..shape.len() {
            if offsets[d]
                .checked_add(sizes[d])
                .is_none_or(|end| end > shape[d])
            {
                return Err(invalid(format!(
                    "chunk {i} (offsets {offsets:?}, sizes {sizes:?}) runs past the tensor's \
                     size {shape:?} along dimension {d}"
                )));
            }
        }
        let volume: u64 = sizes.iter().product();
        let item = item_of
            .get(&(name.to_string(), Some(offsets.clone())))
            .copied();
        if item.is_none() && volume > 0 {
            return Err(invalid(format!(
                "chunk {i} (offsets {offsets:?}) has no item in `storage_data`"
            )));
        }
        covered = covered.saturating_add(volume);
        chunks.push(Chunk {
            offsets,
            sizes,
            item,
        });
    }
    if let Some(miss) = Tiling::new(&shape, &chunks).check()? {
        let holding: Vec<usize> = (0..chunks.len())
            .filter(|&i| chunks[i].holds(&miss.point))
            .take(2)
            .collect();
        let why = match holding[..] {
            [a, b] => format!(
                "chunks {a} and {b} overlap (both hold the element at {:?})",
                miss.point
            ),
            _ if covered != total => format!("its chunks hold {covered} of its {total} elements"),
            _ => format!(
                "no chunk holds the element at {:?}, and the chunks' sizes add up to the \
                 tensor's: others overlap",
                miss.point
            ),
        };
        return Err(invalid(format!(
            "the chunks do not tile the tensor of size {shape:?}: {why}"
        )));
    }
    Ok(DcpTensor {
        name: name.to_string(),
        dtype,
        shape,
        chunks,
    })
}

impl Chunk {
    /// True when the chunk holds the element at `point` (one coordinate per dimension).
    fn holds(&self, point: &[u64]) -> bool {
        point.len() == self.offsets.len()
            && (0..point.len())
                .all(|d| self.offsets[d] <= point[d] && point[d] - self.offsets[d] < self.sizes[d])
    }
}

/// An element that the chunks of a tensor do not hold exactly once.
#[derive(Debug)]
struct Miss {
    /// Its coordinates.
    point: Vec<u64>,
}

/// The check that chunks tile a tensor exactly: every element held by exactly one chunk.
///
/// The chunks, each counted +1, and the tensor's box, counted −1, sum to zero at every
/// element exactly when they tile it. Such a signed sum of boxes is zero when, along
/// its first dimension, it changes nowhere: at every coordinate where boxes start or end,
/// the boxes starting (their weight) and ending (the opposite) sum to zero over the
/// remaining dimensions, a check of one dimension fewer. Boxes of equal extent over the
/// remaining dimensions cancel before it (chunks in a grid, the common case: a row of
/// chunks ends where the next starts), and a dimension along which all the boxes of a
/// check have one extent is passed over. Sorting dominates: O(n log n) for chunks laid
/// out along any one dimension or in a grid; the work is bounded all the same (a limit
/// error past it), whatever the layout. Coordinates are visited in increasing order, so
/// the first one found where the sum is not zero is an element held by no chunk or by
/// several.
struct Tiling<'c> {
    shape: &'c [u64],
    chunks: &'c [Chunk],
    /// Boxes looked at so far, and the most allowed.
    work: u64,
    budget: u64,
}

impl<'c> Tiling<'c> {
    fn new(shape: &'c [u64], chunks: &'c [Chunk]) -> Self {
        let n = chunks.len() as u64 + 1;
        Tiling {
            shape,
            chunks,
            work: 0,
            budget: (n.saturating_mul(16 * (shape.len() as u64 + 1))).max(1 << 20),
        }
    }

    /// The extent `[lo, hi)` of box `b` along dimension `d`: chunk `b`, or the tensor
    /// for `b` past the chunks.
    fn extent(&self, b: usize, d: usize) -> (u64, u64) {
        match self.chunks.get(b) {
            Some(c) => (c.offsets[d], c.offsets[d] + c.sizes[d]),
            None => (0, self.shape[d]),
        }
    }

    /// Boxes `a` and `b` compared by their extents along dimensions `from` on.
    fn cmp_rest(&self, a: usize, b: usize, from: usize) -> std::cmp::Ordering {
        (from..self.shape.len())
            .map(|d| self.extent(a, d).cmp(&self.extent(b, d)))
            .find(|o| o.is_ne())
            .unwrap_or(std::cmp::Ordering::Equal)
    }

    /// The first element the chunks do not hold exactly once, if any.
    fn check(&mut self) -> Result<Option<Miss>> {
        let mut boxes: Vec<(i64, usize)> = (0..self.chunks.len())
            .filter(|&i| !self.chunks[i].sizes.contains(&0))
            .map(|i| (1, i))
            .collect();
        if !self.shape.contains(&0) {
            boxes.push((-1, self.chunks.len()));
        }
        let mut point = Vec::with_capacity(self.shape.len());
        Ok(self
            .first_nonzero(boxes, 0, &mut point)?
            .then_some(Miss { point }))
    }

    /// True when the weighted boxes `boxes` (of one extent along the dimensions before
    /// `d`) do not sum to zero along the dimensions from `d` on; `point` is then
    /// extended with the coordinates, from `d` on, of the first element where they do
    /// not.
    fn first_nonzero(
        &mut self,
        boxes: Vec<(i64, usize)>,
        d: usize,
        point: &mut Vec<u64>,
    ) -> Result<bool> {
        if boxes.is_empty() {
            return Ok(false);
        }
        self.work += boxes.len() as u64;
        if self.work > self.budget {
            return Err(Error::from(ErrorKind::Limit {
                what: "work to check that the chunks tile the tensor (boxes compared)",
                limit: self.budget,
                actual: self.work,
            }));
        }
        if d == self.shape.len() {
            return Ok(boxes.iter().map(|&(w, _)| w).sum::<i64>() != 0);
        }
        let first = self.extent(boxes[0].1, d);
        if boxes.iter().all(|&(_, b)| self.extent(b, d) == first) {
            point.push(first.0);
            let found = self.first_nonzero(boxes, d + 1, point)?;
            if !found {
                point.pop();
            }
            return Ok(found);
        }
        // Each box starts (its weight) and ends (the opposite) along `d`; at one
        // coordinate, boxes of equal extent over the rest come together and cancel.
        let mut events: Vec<(u64, i64, usize)> = Vec::with_capacity(boxes.len() * 2);
        for &(w, b) in &boxes {
            let (lo, hi) = self.extent(b, d);
            events.push((lo, w, b));
            events.push((hi, -w, b));
        }
        drop(boxes);
        events.sort_unstable_by(|x, y| x.0.cmp(&y.0).then_with(|| self.cmp_rest(x.2, y.2, d + 1)));
        for group in events.chunk_by(|x, y| x.0 == y.0) {
            let mut change: Vec<(i64, usize)> = Vec::new();
            for &(_, w, b) in group {
                match change.last_mut() {
                    Some(last) if self.cmp_rest(last.1, b, d + 1).is_eq() => last.0 += w,
                    _ => change.push((w, b)),
                }
            }
            change.retain(|&(w, _)| w != 0);
            point.push(group[0].0);
            if self.first_nonzero(change, d + 1, point)? {
                return Ok(true);
            }
            point.pop();
        }
        Ok(false)
    }
}

/// The content of a DCP checkpoint's tensors, read from its items: part `i` is tensor
/// `i` of [`Checkpoint::tensors`], in C order.
#[derive(Debug)]
struct Content(Arc<Checkpoint>);

impl Encoded for Content {
    fn plain_offset(
        &self,
        _: &dyn tensorfmt_runtime::source::RandomAccess,
        _: u64,
    ) -> Result<Option<u64>> {
        Ok(None)
    }

    fn read(
        &self,
        src: &Source,
        info: &TensorInfo,
        part: u64,
        window: (u64, u64),
        sink: &mut dyn Sink,
        opts: &ReadOptions,
    ) -> Result<()> {
        let t = usize::try_from(part)
            .ok()
            .and_then(|p| self.0.tensors.get(p))
            .ok_or_else(|| invalid(format!("no tensor {part} in the checkpoint")))?;
        let full: Vec<(u64, u64)> = t.shape.iter().map(|&n| (0, n)).collect();
        let whole = window == (0, info.location.len());
        // A tensor saved whole by one rank (replicated, or by a single writer): its
        // item's bytes as they are, zero-copy where they lie plain.
        if whole {
            if let [c] = &t.chunks[..] {
                if let Some(item) = c.item {
                    let (file, chunk) = self.open_item(src, t, item, opts)?;
                    let n = tensorfmt_runtime::tensor::nbytes(t.dtype, &t.shape)?;
                    if chunk.shape == t.shape
                        && chunk.order() == Some(Order::C)
                        && chunk.location.len() == n
                    {
                        let mut forward = Forward { inner: sink, info };
                        return file.read_into(&chunk, &mut forward).map(|_| ());
                    }
                }
            }
        }
        let bytes = self.gather(src, t, &full, opts)?;
        let (skip, len) = window;
        let range = usize::try_from(skip)
            .ok()
            .zip(usize::try_from(len).ok())
            .and_then(|(s, l)| Some(s..s.checked_add(l)?))
            .filter(|r| r.end <= bytes.len())
            .ok_or_else(|| invalid(format!("bytes {skip}+{len} past the tensor's end")))?;
        for piece in bytes[range].chunks(tensorfmt_runtime::read::chunk_size(opts)) {
            sink.chunk(piece)?;
        }
        Ok(())
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn same(&self, other: &dyn Encoded) -> bool {
        other
            .as_any()
            .downcast_ref::<Content>()
            .is_some_and(|o| Arc::ptr_eq(&self.0, &o.0))
    }
}

/// Passes an item's bytes on to the sink of the tensor they are part of: views and
/// chunks, not its `begin` and `end`, which the caller gives.
struct Forward<'a> {
    inner: &'a mut dyn Sink,
    info: &'a TensorInfo,
}

impl Sink for Forward<'_> {
    fn begin(&mut self, _: &TensorInfo) -> Result<crate::Flow> {
        Ok(crate::Flow::Continue)
    }
    fn view(
        &mut self,
        _: &TensorInfo,
        bytes: &Bytes,
        range: std::ops::Range<usize>,
    ) -> Result<bool> {
        self.inner.view(self.info, bytes, range)
    }
    fn keeps_views(&self) -> bool {
        self.inner.keeps_views()
    }
    fn chunk(&mut self, bytes: &[u8]) -> Result<()> {
        self.inner.chunk(bytes)
    }
    fn end(&mut self, _: &TensorInfo) -> Result<crate::Flow> {
        Ok(crate::Flow::Continue)
    }
}

impl Content {
    /// The archive of `item` (a chunk of `t`), opened as the `pytorch` format reads a
    /// file, and its one tensor, checked against the chunk's dtype.
    fn open_item(
        &self,
        src: &Source,
        t: &DcpTensor,
        item: usize,
        opts: &ReadOptions,
    ) -> Result<(TensorFile, TensorInfo)> {
        let (file, it) = open_archive(src, &self.0.items[item], opts)?;
        let in_item = |e: Error| e.in_entry(format!("{} (item {item} of '{}')", t.name, it.file));
        let [chunk] = file.tensors() else {
            return Err(in_item(invalid(format!(
                "the item holds {} tensors, not one",
                file.tensors().len()
            ))));
        };
        if chunk.dtype != t.dtype {
            return Err(in_item(invalid(format!(
                "the item's tensor is {}, the metadata says {}",
                chunk.dtype, t.dtype
            ))));
        }
        let chunk = chunk.clone();
        Ok((file, chunk))
    }

    /// The elements of box `target` (start, size per dimension) of `t`, in C order,
    /// read from the chunks that overlap it and, of each, the rows that do.
    fn gather(
        &self,
        src: &Source,
        t: &DcpTensor,
        target: &[(u64, u64)],
        opts: &ReadOptions,
    ) -> Result<Vec<u8>> {
        let itemsize = t
            .dtype
            .itemsize()
            .ok_or_else(|| Error::unsupported(format!("{} tensors", t.dtype)))?
            as u64;
        let out_shape: Vec<u64> = target.iter().map(|&(_, n)| n).collect();
        let n = tensorfmt_runtime::tensor::nbytes(t.dtype, &out_shape)?;
        if n == 0 {
            return Ok(Vec::new());
        }
        // Every chunk the box overlaps is opened and checked against its item before the
        // box is allocated: sizes are the metadata's word, the items' tensors are bytes
        // that exist (their storages checked against their members), and the chunks tile
        // the tensor, so the box is never larger than what the items hold.
        let mut parts = Vec::new();
        for c in &t.chunks {
            let Some(item) = c.item else { continue };
            if c.sizes.contains(&0) {
                continue;
            }
            let meet: Option<Vec<(u64, u64)>> = (0..target.len())
                .map(|d| {
                    let lo = c.offsets[d].max(target[d].0);
                    let hi = (c.offsets[d] + c.sizes[d]).min(target[d].0 + target[d].1);
                    (lo < hi).then_some((lo, hi))
                })
                .collect();
            let Some(meet) = meet else { continue };
            let (file, chunk) = self.open_item(src, t, item, opts)?;
            if chunk.shape != c.sizes {
                return Err(invalid(format!(
                    "the item's tensor has shape {:?}, the chunk {:?}",
                    chunk.shape, c.sizes
                ))
                .in_entry(&t.name));
            }
            parts.push((file, chunk, c, meet));
        }
        let mut out = vec![0u8; tensorfmt_runtime::read::to_usize(n, "slice")?];
        for (file, chunk, c, meet) in parts {
            let (held, streamed);
            let data: &[u8] = if chunk.order() == Some(Order::C) {
                // Viewed where it lies plain: only the rows copied are read.
                held = file.load_info(&chunk)?;
                held.data.as_bytes()
            } else {
                streamed = chunk_bytes(&file, &chunk)?;
                &streamed
            };
            let need = tensorfmt_runtime::tensor::nbytes(t.dtype, &c.sizes)?;
            if (data.len() as u64) < need {
                return Err(invalid(format!(
                    "the item's tensor holds {} bytes, its chunk needs {need}",
                    data.len()
                ))
                .in_entry(&t.name));
            }
            copy_box(
                data,
                &c.offsets,
                &c.sizes,
                &mut out,
                target,
                &meet,
                itemsize as usize,
            );
        }
        Ok(out)
    }
}

/// A tensor's elements in C order, in memory, streamed through
/// [`TensorFile::elements`] (a view gathered from its storage, a deflated member
/// inflated).
fn chunk_bytes(file: &TensorFile, chunk: &TensorInfo) -> Result<Vec<u8>> {
    let mut data = Vec::new();
    std::io::Read::read_to_end(&mut file.elements(chunk)?, &mut data)
        .map_err(tensorfmt_runtime::zip::io_to_error)?;
    Ok(data)
}

/// Copies the elements of box `meet` from a chunk at `c_off` of size `c_size` (its bytes
/// `src`, C order) into `out`, the C-order bytes of box `target` (start, size).
fn copy_box(
    src: &[u8],
    c_off: &[u64],
    c_size: &[u64],
    out: &mut [u8],
    target: &[(u64, u64)],
    meet: &[(u64, u64)],
    itemsize: usize,
) {
    let nd = meet.len();
    if nd == 0 {
        out[..itemsize].copy_from_slice(&src[..itemsize]);
        return;
    }
    // Row-major strides, in elements, of the chunk and of the target.
    let strides = |dims: &mut dyn Iterator<Item = u64>| {
        let dims: Vec<u64> = dims.collect();
        let mut s = vec![1u64; nd];
        for d in (0..nd.saturating_sub(1)).rev() {
            s[d] = s[d + 1] * dims[d + 1];
        }
        s
    };
    let cs = strides(&mut c_size.iter().copied());
    let ts = strides(&mut target.iter().map(|&(_, n)| n));
    let run = ((meet[nd - 1].1 - meet[nd - 1].0) as usize) * itemsize;
    // Every index of the box's leading dimensions, as an odometer.
    let mut idx: Vec<u64> = meet.iter().map(|&(lo, _)| lo).collect();
    loop {
        let (mut from, mut to) = (0u64, 0u64);
        for d in 0..nd {
            from += (idx[d] - c_off[d]) * cs[d];
            to += (idx[d] - target[d].0) * ts[d];
        }
        let (from, to) = (from as usize * itemsize, to as usize * itemsize);
        out[to..to + run].copy_from_slice(&src[from..from + run]);
        // Next row.
        let mut d = nd - 1;
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            idx[d] += 1;
            if idx[d] < meet[d].1 {
                break;
            }
            idx[d] = meet[d].0;
        }
    }
}

/// The `torch.save` archive `item` is, opened as the `pytorch` format (checksums as
/// `opts` say), named by its `.distcp` file.
fn open_archive<'i>(
    src: &Source,
    item: &'i Item,
    opts: &ReadOptions,
) -> Result<(TensorFile, &'i Item)> {
    let path = src
        .path()
        .and_then(|p| p.parent())
        .map(|d| d.join(&item.file))
        .unwrap_or_else(|| item.file.clone().into());
    let in_item = |e: Error| {
        e.in_file(&path).in_field(&format!(
            "item at byte {} of {} bytes",
            item.offset, item.length
        ))
    };
    // A checkpoint in object storage reads its `.distcp` files by ranged GETs; a local
    // one maps them.
    let (source, starts_like_zip) = match src.neighbour(&item.file)? {
        Some(data) => {
            let window =
                tensorfmt_runtime::source::SharedWindow::new(data, item.offset, item.length)
                    .map_err(in_item)?;
            let mut magic = [0u8; 4];
            let zip = window.len() >= 4
                && window.read_exact_at(0, &mut magic).is_ok()
                && &magic == b"PK\x03\x04";
            (
                Source::from_random_access(Box::new(window), Some(path.clone())),
                zip,
            )
        }
        None => {
            let whole = src.external(&item.file)?;
            let window = whole.window(item.offset, item.length).map_err(in_item)?;
            let zip = window.as_bytes().starts_with(b"PK\x03\x04");
            (Source::from_mapped(window, &path), zip)
        }
    };
    if !starts_like_zip {
        return Err(Error::new(
            ErrorKind::Unsupported(
                "the item is not a torch.save archive (checkpoints saved with \
                 serialization_format=SAFETENSORS are not read)"
                    .into(),
            ),
            Location::file(&path).with_offset(item.offset),
        ));
    }
    let options = OpenOptions {
        format: Some("pytorch".into()),
        limits: opts.limits.clone(),
        skip_checksums: !opts.verify_checksums,
        ..Default::default()
    };
    let file = TensorFile::from_source(source, &options)?;
    Ok((file, item))
}

/// Every tensor of the checkpoint, as its global tensor, read from its chunks.
fn index(src: &Source, limits: &Limits) -> Result<Vec<TensorInfo>> {
    let ck = checkpoint(src, limits)?;
    let content = EncodedBytes::new(Content(ck.clone()));
    ck.tensors
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let n = tensorfmt_runtime::tensor::nbytes(t.dtype, &t.shape)?;
            TensorInfo::dense(
                t.name.clone(),
                t.dtype,
                t.shape.clone(),
                Order::C,
                ByteOrder::Little,
                content.clone().window(i as u64, 0, n),
            )
            .map_err(|e| e.in_entry(&t.name))
        })
        .collect()
}

/// The state dict the checkpoint was saved from, nested as `planner_data` says: tensors
/// as [`Node::Tensor`] leaves, values read from their items.
///
/// Each key of an entry's path is a level of nesting, bounded as every nesting is:
/// a path of more keys than `limits.max_depth` is an [`ErrorKind::Limit`] naming the
/// entry, and a value's own object is read with the levels its path leaves (so that the
/// whole tree is at most `max_depth` deep, and every walk of it stays within that).
fn structure(src: &Source, limits: &Limits) -> Result<Option<Node>> {
    let ck = checkpoint(src, limits)?;
    let mut root = Branch::default();
    for &(is_tensor, i) in &ck.order {
        let name = if is_tensor {
            &ck.tensors[i].name
        } else {
            &ck.values[i].name
        };
        let top;
        let path: &[Key] = match ck.paths.get(name) {
            Some(path) => path,
            None => {
                top = [Key::Str(name.clone())];
                &top
            }
        };
        let depth = path.len() as u64;
        if depth > limits.max_depth {
            return Err(Error::from(ErrorKind::Limit {
                what: "nesting depth of the entry's path in `planner_data` (keys)",
                limit: limits.max_depth,
                actual: depth,
            })
            .in_entry(name)
            .in_field("planner_data"));
        }
        let leaf = if is_tensor {
            Node::Tensor(name.clone())
        } else {
            let opts = ReadOptions {
                limits: Limits {
                    max_depth: limits.max_depth - depth,
                    ..limits.clone()
                },
                ..Default::default()
            };
            let item = &ck.items[ck.values[i].item];
            let in_value = |e: Error| e.in_entry(name);
            let (file, _) = open_archive(src, item, &opts).map_err(in_value)?;
            file.structure().map_err(in_value)?.unwrap_or(Node::None)
        };
        root.insert(path, leaf);
    }
    Ok(Some(Node::Dict(root.into_items())))
}

/// A key of an entry's path in `planner_data`: text, or an integer (a list's index).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    Str(String),
    Int(i64),
}

impl Key {
    fn node(&self) -> Node {
        match self {
            Key::Str(s) => Node::Str(s.clone()),
            Key::Int(i) => Node::Int(i128::from(*i)),
        }
    }
}

/// A dict of the state dict being rebuilt from the entries' paths: its items in order,
/// and the position of the dict under each key, found by hashing (a path's keys are
/// looked up in constant time, whatever the number of entries beside them).
#[derive(Default)]
struct Branch {
    items: Vec<(Key, Slot)>,
    dicts: HashMap<Key, usize>,
}

/// An item of a [`Branch`]: an entry, or the dict under a key of paths.
enum Slot {
    Leaf(Node),
    Dict(Branch),
}

impl Branch {
    /// Puts `leaf` at `path`, making the dicts on the way: a key already holding a dict
    /// leads into it; a key holding an entry gets a dict beside it.
    fn insert(&mut self, path: &[Key], leaf: Node) {
        let Some((last, parents)) = path.split_last() else {
            return;
        };
        let mut at = self;
        for key in parents {
            let pos = match at.dicts.get(key) {
                Some(&pos) => pos,
                None => {
                    at.items.push((key.clone(), Slot::Dict(Branch::default())));
                    at.dicts.insert(key.clone(), at.items.len() - 1);
                    at.items.len() - 1
                }
            };
            let Slot::Dict(inner) = &mut at.items[pos].1 else {
                return;
            };
            at = inner;
        }
        at.items.push((last.clone(), Slot::Leaf(leaf)));
    }

    /// The dict's items as nodes. A dict below the top whose keys are the integers 0, 1,
    /// ... in order is a list, as DCP's `unflatten_state_dict` builds lists. The recursion
    /// goes as deep as the longest path, which [`structure`] bounds.
    fn into_items(self) -> Vec<(Node, Node)> {
        self.items
            .into_iter()
            .map(|(k, slot)| {
                let v = match slot {
                    Slot::Leaf(node) => node,
                    Slot::Dict(b) => b.into_node(),
                };
                (k.node(), v)
            })
            .collect()
    }

    fn into_node(self) -> Node {
        let is_list = !self.items.is_empty()
            && self
                .items
                .iter()
                .enumerate()
                .all(|(i, (k, _))| *k == Key::Int(i as i64));
        let items = self.into_items();
        if is_list {
            Node::List(items.into_iter().map(|(_, v)| v).collect())
        } else {
            Node::Dict(items)
        }
    }
}

/// The chunks of tensor `name` of a DCP checkpoint and the box each covers, for callers
/// that plan reads by rank.
pub fn chunks_of<'c>(ck: &'c Checkpoint, name: &str) -> Option<&'c [Chunk]> {
    ck.by_name
        .find(&ck.tensors, |t| &t.name, name)
        .map(|t| &t.chunks[..])
}

/// The elements of the box of `info` that starts at `offsets` and has `sizes` (one of
/// each per dimension), in C order: for a tensor of a DCP checkpoint, read from only the
/// chunks the box overlaps (their items opened, their rows that meet the box copied);
/// for any other tensor, cut from the whole tensor.
pub(crate) fn read_box(
    file: &TensorFile,
    info: &TensorInfo,
    offsets: &[u64],
    sizes: &[u64],
) -> Result<Vec<u8>> {
    if offsets.len() != info.shape.len() || sizes.len() != info.shape.len() {
        return Err(invalid(format!(
            "a slice of {} offsets and {} sizes for a tensor of {} dimensions",
            offsets.len(),
            sizes.len(),
            info.shape.len()
        ))
        .in_entry(&info.name));
    }
    for d in 0..offsets.len() {
        if offsets[d]
            .checked_add(sizes[d])
            .is_none_or(|e| e > info.shape[d])
        {
            return Err(invalid(format!(
                "the slice at {offsets:?} of size {sizes:?} runs past the tensor's shape {:?}",
                info.shape
            ))
            .in_entry(&info.name));
        }
    }
    let target: Vec<(u64, u64)> = offsets.iter().copied().zip(sizes.iter().copied()).collect();
    if let tensorfmt_runtime::DataLocation::Encoded { content, part, .. } = &info.location {
        if let Some(c) = content.downcast::<Content>() {
            let t = &c.0.tensors[*part as usize];
            let opts = ReadOptions {
                // A slice reads part of a chunk's member: its CRC-32 covers all of it.
                verify_checksums: false,
                ..ReadOptions::default()
            };
            return c.gather(file.source(), t, &target, &opts);
        }
    }
    let itemsize = info
        .dtype
        .itemsize()
        .ok_or_else(|| Error::unsupported(format!("slices of {} tensors", info.dtype)))?;
    let whole = chunk_bytes(file, info)?;
    let out_shape: Vec<u64> = sizes.to_vec();
    let n = tensorfmt_runtime::tensor::nbytes(info.dtype, &out_shape)?;
    let mut out = vec![0u8; tensorfmt_runtime::read::to_usize(n, "slice")?];
    if n > 0 {
        let zeros = vec![0u64; info.shape.len()];
        let meet: Vec<(u64, u64)> = target.iter().map(|&(o, s)| (o, o + s)).collect();
        copy_box(
            &whole,
            &zeros,
            &info.shape,
            &mut out,
            &target,
            &meet,
            itemsize,
        );
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------
// Writing.

/// A value of DCP's metadata classes, made as CPython pickles a dataclass: the class
/// called with no arguments (`NEWOBJ`) and its fields set by `BUILD`.
fn instance(module: &str, class: &str, fields: Vec<(&str, Value)>) -> Value {
    let state = Value::dict(
        fields
            .into_iter()
            .map(|(k, v)| (Value::str(k), v))
            .collect(),
    );
    Value::object(
        pickle::Object::new(pickle::Global::new(module, class), Kind::Object).with_state(state),
    )
}

/// `torch.Size(dims)`.
fn torch_size(dims: &[u64]) -> Value {
    Value::object(
        pickle::Object::new(pickle::Global::new("torch", "Size"), Kind::Tuple)
            .with_items(dims.iter().map(|&d| Value::Int(d as i64)).collect()),
    )
}

/// A call of `module.name` with `args`, recorded as `REDUCE` writes it.
fn call(module: &str, name: &str, params: &[&str], args: Vec<Value>) -> Value {
    let params: Vec<String> = params.iter().map(|p| p.to_string()).collect();
    Value::object(
        pickle::Object::new(
            pickle::Global::new(module, name),
            Kind::Call {
                params: params.into(),
            },
        )
        .with_args(args),
    )
}

/// `TensorProperties` of a contiguous, strided CPU tensor of `dtype`, as torch pickles
/// it (`__getstate__`'s five items).
fn properties(dtype: DType) -> Result<Value> {
    let name = DTYPES
        .iter()
        .find(|(_, d)| *d == dtype)
        .map(|(n, _)| *n)
        .ok_or_else(|| Error::unsupported(format!("{dtype} tensors in a DCP checkpoint")))?;
    let state = Value::tuple(vec![
        Value::global(&format!("torch.{name}")),
        call(
            "torch.serialization",
            "_get_layout",
            &["name"],
            vec![Value::str("torch.strided")],
        ),
        Value::Bool(false),
        call(
            MODULE,
            "_MEM_FORMAT_ENCODING",
            &["value"],
            vec![Value::Int(0)],
        ),
        Value::Bool(false),
    ]);
    Ok(Value::object(
        pickle::Object::new(
            pickle::Global::new(MODULE, "TensorProperties"),
            Kind::Object,
        )
        .with_state(state),
    ))
}

/// An item being written at the end of a rank's file: positions relative to its start,
/// so that the `pytorch` writer lays its archive out as it would a file of its own.
struct Region {
    file: std::rc::Rc<std::cell::RefCell<tensorfmt_runtime::output::AtomicFile>>,
    base: u64,
}

impl std::io::Write for Region {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.file.borrow_mut().write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.file.borrow_mut().flush()
    }
}

impl std::io::Seek for Region {
    fn seek(&mut self, pos: std::io::SeekFrom) -> std::io::Result<u64> {
        use std::io::SeekFrom;
        let pos = match pos {
            SeekFrom::Start(p) => SeekFrom::Start(self.base + p),
            other => other,
        };
        let at = self.file.borrow_mut().seek(pos)?;
        at.checked_sub(self.base).ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "seek before the item")
        })
    }
}

/// Appends a `torch.save` archive of `tree` (with the tensor `tensor`, when given, as its
/// `Node::Tensor` leaf) to `file`: the item's offset and length.
fn write_item(
    file: &std::rc::Rc<std::cell::RefCell<tensorfmt_runtime::output::AtomicFile>>,
    tree: &Node,
    tensor: Option<(&crate::TensorMeta, &[u8])>,
) -> Result<(u64, u64)> {
    use std::io::Seek;
    let base = file.borrow_mut().seek(std::io::SeekFrom::End(0))?;
    let region = Region {
        file: file.clone(),
        base,
    };
    let mut w = (crate::generated::pytorch::DESC.writer)(Box::new(region), &Default::default())?;
    w.set_structure(tree)?;
    if let Some((meta, bytes)) = tensor {
        w.add(meta, crate::Payload::Bytes(bytes))?;
    }
    w.finish()?;
    let end = file.borrow_mut().seek(std::io::SeekFrom::End(0))?;
    Ok((base, end - base))
}

/// One entry of the state dict a DCP checkpoint is written from: its path in the nested
/// dict (`planner_data`) and what is there.
enum Leaf {
    Tensor(String),
    Value(Node),
}

/// The entries of `tree` as DCP's `traverse_state_dict` visits them: dicts always
/// traversed (keys as text), lists when they hold a tensor or a dict, anything else a
/// leaf.
fn leaves(tree: &Node, path: &mut Vec<Node>, out: &mut Vec<(Vec<Node>, Leaf)>) {
    fn holds_more(n: &Node) -> bool {
        match n {
            Node::Dict(_) | Node::Tensor(_) => true,
            Node::List(items) => items.iter().any(holds_more),
            _ => false,
        }
    }
    match tree {
        Node::Dict(items) => {
            for (k, v) in items {
                let key = match k {
                    Node::Str(s) => s.clone(),
                    other => other.to_string(),
                };
                path.push(Node::Str(key));
                leaves(v, path, out);
                path.pop();
            }
        }
        Node::List(items) if items.iter().any(holds_more) => {
            for (i, v) in items.iter().enumerate() {
                path.push(Node::Int(i as i128));
                leaves(v, path, out);
                path.pop();
            }
        }
        Node::Tensor(name) => out.push((path.clone(), Leaf::Tensor(name.clone()))),
        other => out.push((path.clone(), Leaf::Value(other.clone()))),
    }
}

/// The dotted name of a path (`model.layers.0.weight`), as DCP joins it.
fn fqn(path: &[Node]) -> String {
    path.iter()
        .map(|p| match p {
            Node::Str(s) => s.clone(),
            other => other.to_string(),
        })
        .collect::<Vec<_>>()
        .join(".")
}

/// The rows of a tensor of `rows` rows that rank `r` of `world` holds, as a DTensor
/// sharded along its first dimension splits them (`torch.chunk`: ranks of
/// `ceil(rows / world)` rows, the last ones fewer or none).
fn rows_of(rows: u64, world: u64, r: u64) -> (u64, u64) {
    let per = rows.div_ceil(world.max(1));
    let start = (r * per).min(rows);
    (start, (start + per).min(rows))
}

/// Whether `name` is a file DCP writes in its folder: `.metadata` and the ranks' files,
/// `__<rank>_<n>.distcp`.
fn owns(name: &str) -> bool {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    name == METADATA
        || name
            .strip_prefix("__")
            .and_then(|n| n.strip_suffix(".distcp"))
            .and_then(|n| n.split_once('_'))
            .is_some_and(|(r, n)| digits(r) && digits(n))
}

/// Checks that the DCP files in `dir` are a checkpoint: its `.metadata` parses.
fn check_folder(dir: &std::path::Path) -> Result<()> {
    let md = dir.join(METADATA);
    if !std::fs::symlink_metadata(&md).is_ok_and(|m| m.is_file()) {
        return Err(invalid("no .metadata").in_file(dir));
    }
    let src = Source::open(&md)?;
    checkpoint(&src, &Limits::default()).map(|_| ())
}

/// The rule of a DCP folder at a save's destination
/// ([`tensorfmt_runtime::output::FolderKind`]): `.metadata` and `__<rank>_<n>.distcp`
/// replaced when the metadata parses, every other file kept; a folder holding no
/// checkpoint is refused unless empty.
pub fn folder_kind() -> tensorfmt_runtime::output::FolderKind<'static> {
    tensorfmt_runtime::output::FolderKind {
        what: "a torch.distributed checkpoint",
        owns: &owns,
        check: &check_folder,
        adopts: false,
    }
}

/// Converts `file` to a torch.distributed checkpoint in the folder `out`, as ranks of a
/// job of `world` processes save one (`__{rank}_0.distcp` each, and `.metadata`):
/// every tensor of at least one dimension sharded along its first dimension as a DTensor
/// with `Shard(0)` is (`torch.chunk`: `ceil(rows / world)` rows a rank, the last ranks
/// fewer or none); 0-d tensors and values that are not tensors saved once, by rank 0.
/// With `world` 1, a single writer's checkpoint (`__0_0.distcp`). Each chunk is a
/// `torch.save` archive of a contiguous tensor, as DCP's `FileSystemWriter` writes it;
/// `.metadata` is written last, as DCP's `Metadata` pickled at protocol 4, with the
/// nested state dict's paths in `planner_data` (a PyTorch checkpoint's nesting, or each
/// tensor at the top for formats of tensors alone) so that `dcp_to_torch_save` and
/// `dcp.load` give back the source's structure.
///
/// Atomic: the folder is written beside `out` and replaces it in one rename under the
/// rule of folder outputs ([`folder_kind`]): `out` absent, empty, or a DCP checkpoint
/// (its `.metadata` parses), whose other files are kept in the new folder.
/// Memory: one tensor at a time, and one chunk's archive.
pub fn write(
    file: &TensorFile,
    out: &std::path::Path,
    options: &crate::ConvertOptions,
    world: u64,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<crate::ConvertSummary> {
    use std::cell::RefCell;
    use std::rc::Rc;
    use tensorfmt_runtime::output::{AtomicDir, AtomicFile};
    if world == 0 {
        return Err(invalid("a world size of 0").in_file(out));
    }
    let at = |e: std::io::Error| Error::new(ErrorKind::Io(e), Location::file(out));
    let mut tmp = AtomicDir::new(out)?;
    tmp.check(&folder_kind())?;
    let tree = match file.structure()? {
        Some(t) if !options.flatten && t.is_plain() => t,
        _ => Node::Dict(
            file.tensors()
                .iter()
                .map(|t| (Node::Str(t.name.clone()), Node::Tensor(t.name.clone())))
                .collect(),
        ),
    };
    // Each level of the tree is a key of a path (or a level of a value): one nested past
    // what the reader takes is refused before it is walked or written.
    tensorfmt_runtime::tree::check_depth(&tree, Limits::default().max_depth)
        .map_err(|e| e.in_file(out))?;
    let mut entries = Vec::new();
    leaves(&tree, &mut Vec::new(), &mut entries);

    std::fs::create_dir(tmp.path()).map_err(at)?;
    let files: Vec<Rc<RefCell<AtomicFile>>> = (0..world)
        .map(|r| {
            AtomicFile::create(tmp.path().join(format!("__{r}_0.distcp")))
                .map(|f| Rc::new(RefCell::new(f)))
        })
        .collect::<Result<_>>()?;
    let name_of = |r: u64| format!("__{r}_0.distcp");
    let mut sd_meta: Vec<(Value, Value)> = Vec::new();
    let mut planner: Vec<(Value, Value)> = Vec::new();
    let mut storage: Vec<(Value, Value)> = Vec::new();
    let storage_info = |r: u64, offset: u64, length: u64| {
        instance(
            "torch.distributed.checkpoint.filesystem",
            "_StorageInfo",
            vec![
                ("relative_path", Value::str(&name_of(r))),
                ("offset", Value::Int(offset as i64)),
                ("length", Value::Int(length as i64)),
                ("transform_descriptors", Value::None),
            ],
        )
    };
    let total = file.tensors().len();
    let (mut done, mut bytes_written, mut tensors_written) = (0, 0u64, 0usize);
    let mut seen = std::collections::HashSet::new();
    for (path, leaf) in &entries {
        let name = fqn(path);
        if !seen.insert(name.clone()) {
            return Err(invalid(format!(
                "two entries of the state dict flatten to the name '{name}'"
            ))
            .in_file(out));
        }
        planner.push((
            Value::str(&name),
            Value::tuple(
                path.iter()
                    .map(|p| match p {
                        Node::Int(i) => Value::Int(*i as i64),
                        Node::Str(s) => Value::str(s),
                        other => Value::str(&other.to_string()),
                    })
                    .collect(),
            ),
        ));
        let info = match leaf {
            Leaf::Value(v) => {
                let (offset, length) =
                    write_item(&files[0], v, None).map_err(|e| e.in_entry(&name))?;
                sd_meta.push((
                    Value::str(&name),
                    instance(MODULE, "BytesStorageMetadata", vec![]),
                ));
                storage.push((
                    instance(
                        MODULE,
                        "MetadataIndex",
                        vec![("fqn", Value::str(&name)), ("index", Value::None)],
                    ),
                    storage_info(0, offset, length),
                ));
                continue;
            }
            Leaf::Tensor(t) => file
                .tensor(t)
                .ok_or_else(|| invalid(format!("no tensor '{t}'")))?,
        };
        // The tensor's elements in C order, little-endian, in the dtype written.
        let mut data = Vec::new();
        std::io::Read::read_to_end(&mut file.elements(info)?, &mut data)
            .map_err(tensorfmt_runtime::zip::io_to_error)?;
        let mut dtype = info.dtype;
        if info.byte_order == ByteOrder::Big && dtype.swap_unit().unwrap_or(1) > 1 {
            data = tensorfmt_runtime::convert::cast(&data, dtype, ByteOrder::Big, dtype)?;
        }
        if let Some(to) = options.dtype.filter(|&d| d != dtype) {
            data = tensorfmt_runtime::convert::cast(&data, dtype, ByteOrder::Little, to)?;
            dtype = to;
        }
        let shape = info.shape.clone();
        let row_bytes = if shape.is_empty() {
            data.len() as u64
        } else {
            tensorfmt_runtime::tensor::nbytes(dtype, &shape[1..])?
        };
        let ranks = if shape.is_empty() || shape[0] == 0 {
            1
        } else {
            world
        };
        let mut chunks = Vec::new();
        for r in 0..ranks {
            let (lo, hi) = if shape.is_empty() {
                (0, 1)
            } else if ranks == 1 {
                (0, shape[0])
            } else {
                rows_of(shape[0], world, r)
            };
            if hi == lo && !shape.is_empty() && ranks > 1 {
                continue;
            }
            let mut sizes = shape.clone();
            let mut offsets = vec![0u64; shape.len()];
            if !shape.is_empty() {
                sizes[0] = hi - lo;
                offsets[0] = lo;
            }
            let part = &data[(lo * row_bytes) as usize..(hi * row_bytes) as usize];
            let meta = crate::TensorMeta {
                name: name.clone(),
                dtype,
                shape: sizes.clone(),
                order: Order::C,
                byte_order: ByteOrder::Little,
            };
            let (offset, length) = write_item(
                &files[r as usize],
                &Node::Tensor(name.clone()),
                Some((&meta, part)),
            )
            .map_err(|e| e.in_entry(&name))?;
            storage.push((
                instance(
                    MODULE,
                    "MetadataIndex",
                    vec![
                        ("fqn", Value::str(&name)),
                        ("index", Value::Int(chunks.len() as i64)),
                        ("offset", torch_size(&offsets)),
                    ],
                ),
                storage_info(r, offset, length),
            ));
            chunks.push(instance(
                MODULE,
                "ChunkStorageMetadata",
                vec![
                    ("offsets", torch_size(&offsets)),
                    ("sizes", torch_size(&sizes)),
                ],
            ));
        }
        sd_meta.push((
            Value::str(&name),
            instance(
                MODULE,
                "TensorStorageMetadata",
                vec![
                    (
                        "properties",
                        properties(dtype).map_err(|e| e.in_entry(&name))?,
                    ),
                    ("size", torch_size(&shape)),
                    ("chunks", Value::list(chunks)),
                ],
            ),
        ));
        bytes_written += data.len() as u64;
        tensors_written += 1;
        done += 1;
        progress(done, total);
    }
    for f in files {
        Rc::try_unwrap(f)
            .map_err(|_| invalid("a rank's file is still shared"))?
            .into_inner()
            .commit()?;
    }
    let metadata = instance(
        MODULE,
        "Metadata",
        vec![
            ("state_dict_metadata", Value::dict(sd_meta)),
            ("planner_data", Value::dict(planner)),
            ("storage_data", Value::dict(storage)),
            ("storage_meta", Value::None),
            ("version", Value::str("1.0.0")),
        ],
    );
    let pickled = pickle::Writer::new().protocol(4).write(&metadata)?;
    let mut md = AtomicFile::create(tmp.path().join(METADATA))?;
    std::io::Write::write_all(&mut md, &pickled).map_err(at)?;
    md.commit()?;
    tmp.commit_folder(&folder_kind())?;
    Ok(crate::ConvertSummary {
        from: file.format(),
        to: DESC.name,
        tensors: tensors_written,
        bytes: bytes_written,
        dropped: Vec::new(),
        retyped: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small random number generator (xorshift), for layouts that repeat.
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n.max(1)
        }
    }

    fn chunk(offsets: &[u64], sizes: &[u64]) -> Chunk {
        Chunk {
            offsets: offsets.to_vec(),
            sizes: sizes.to_vec(),
            item: None,
        }
    }

    /// How many chunks hold each element, counted one by one.
    fn coverage(shape: &[u64], chunks: &[Chunk]) -> Vec<(Vec<u64>, usize)> {
        let total: u64 = shape.iter().product();
        (0..total)
            .map(|mut i| {
                let mut p = vec![0; shape.len()];
                for d in (0..shape.len()).rev() {
                    p[d] = i % shape[d];
                    i /= shape[d];
                }
                let n = chunks.iter().filter(|c| c.holds(&p)).count();
                (p, n)
            })
            .collect()
    }

    /// Splits the box `(lo, hi)` at random cuts, down to boxes of no more than `left`
    /// splits: a tiling that is no grid (each part cut on its own).
    fn split(rng: &mut Rng, lo: Vec<u64>, hi: Vec<u64>, left: u32, out: &mut Vec<Chunk>) {
        let d = rng.below(lo.len() as u64) as usize;
        if left == 0 || hi[d] - lo[d] < 2 {
            let sizes: Vec<u64> = (0..lo.len()).map(|k| hi[k] - lo[k]).collect();
            out.push(chunk(&lo, &sizes));
            return;
        }
        let at = lo[d] + 1 + rng.below(hi[d] - lo[d] - 1);
        let (mut hi_a, mut lo_b) = (hi.clone(), lo.clone());
        hi_a[d] = at;
        lo_b[d] = at;
        split(rng, lo, hi_a, left - 1, out);
        split(rng, lo_b, hi, left - 1, out);
    }

    /// The check agrees with counting every element: it passes the tilings, and for
    /// anything else names an element held by no chunk or by several.
    #[test]
    fn the_tiling_check_agrees_with_counting_each_element() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for round in 0..3000 {
            let dims = 1 + rng.below(3) as usize;
            let shape: Vec<u64> = (0..dims).map(|_| 1 + rng.below(5)).collect();
            let mut chunks = Vec::new();
            let cuts = 1 + rng.below(6) as u32;
            split(&mut rng, vec![0; dims], shape.clone(), cuts, &mut chunks);
            // Damaged: a chunk moved, grown, dropped or repeated.
            match rng.below(5) {
                0 => {
                    let i = rng.below(chunks.len() as u64) as usize;
                    let d = rng.below(dims as u64) as usize;
                    let c = &mut chunks[i];
                    if c.offsets[d] > 0 {
                        c.offsets[d] -= 1;
                    } else if c.offsets[d] + c.sizes[d] < shape[d] {
                        c.sizes[d] += 1;
                    }
                }
                1 if chunks.len() > 1 => {
                    chunks.remove(rng.below(chunks.len() as u64) as usize);
                }
                2 => chunks.push(chunks[rng.below(chunks.len() as u64) as usize].clone()),
                3 => chunks.push(chunk(&vec![0; dims], &vec![0; dims])),
                _ => {}
            }
            let counted = coverage(&shape, &chunks);
            let tiles = counted.iter().all(|&(_, n)| n == 1);
            match Tiling::new(&shape, &chunks).check().unwrap() {
                None => assert!(tiles, "round {round}: {shape:?} {chunks:?}"),
                Some(miss) => {
                    let n = counted.iter().find(|(p, _)| *p == miss.point).map(|x| x.1);
                    assert!(
                        !tiles && n.is_some_and(|n| n != 1),
                        "round {round}: {shape:?} {chunks:?} {miss:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn zero_dimensions_and_empty_chunks() {
        let one = chunk(&[], &[]);
        assert!(Tiling::new(&[], std::slice::from_ref(&one))
            .check()
            .unwrap()
            .is_none());
        assert!(Tiling::new(&[], &[one.clone(), one.clone()])
            .check()
            .unwrap()
            .is_some());
        assert!(Tiling::new(&[], &[]).check().unwrap().is_some());
        // An empty tensor, its chunks empty too.
        assert!(Tiling::new(&[0, 3], &[chunk(&[0, 0], &[0, 3])])
            .check()
            .unwrap()
            .is_none());
        assert!(Tiling::new(&[0, 3], &[]).check().unwrap().is_none());
    }

    /// Chunks along any one dimension, and in a grid, at 200k: the work stays linear.
    #[test]
    fn many_chunks_in_any_arrangement_are_checked_in_bounded_work() {
        let n = 200_000u64;
        let along = |d: usize| -> (Vec<u64>, Vec<Chunk>) {
            let mut shape = vec![2, 3, 2];
            shape[d] = n;
            let chunks = (0..n)
                .map(|i| {
                    let mut offsets = vec![0; 3];
                    offsets[d] = (i * 7919) % n;
                    let mut sizes = shape.clone();
                    sizes[d] = 1;
                    chunk(&offsets, &sizes)
                })
                .collect();
            (shape, chunks)
        };
        for d in 0..3 {
            let (shape, chunks) = along(d);
            let mut t = Tiling::new(&shape, &chunks);
            assert!(t.check().unwrap().is_none());
            assert!(t.work <= 8 * n, "{d}: {}", t.work);
        }
        let side = 400u64;
        let grid: Vec<Chunk> = (0..side * side)
            .map(|i| chunk(&[i / side * 2, i % side * 3], &[2, 3]))
            .collect();
        let shape = [side * 2, side * 3];
        let mut t = Tiling::new(&shape, &grid);
        assert!(t.check().unwrap().is_none());
        assert!(t.work <= 8 * side * side, "{}", t.work);
    }
}
