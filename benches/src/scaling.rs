//! Files of many entries, for the benches that show work linear in their number
//! (`benches/scaling.rs`): safetensors files of `n` small tensors (what `diff`
//! pairs by name), and torch.distributed checkpoints whose `.metadata` nests `n` tensors
//! under their own first keys in `planner_data`, or tiles one tensor by `n` chunks.
//!
//! The `.metadata` pickles are made as torch pickles DCP's `Metadata` (its dataclasses
//! with their fields set by `BUILD`, protocol 4), with tensorfmt's pickle writer.

use std::path::Path;

use tensorfmt::runtime::pickle::{Global, Kind, Object, Value, Writer};
use tensorfmt::{ByteOrder, DType, Order, Saver, TensorMeta, WriteOptions};

use crate::Result;

/// The module of DCP's metadata classes.
const MODULE: &str = "torch.distributed.checkpoint.metadata";

/// Writes a safetensors file of `n` float32 tensors of 32 elements, `layer{i}.w` holding
/// `i` in each, `last` in the last one's.
pub fn safetensors(path: &Path, n: usize, last: f32) -> Result<()> {
    let mut saver = Saver::create(path, Some("safetensors"), &WriteOptions::default())?;
    for i in 0..n {
        let meta = TensorMeta {
            name: format!("layer{i}.w"),
            dtype: DType::F32,
            shape: vec![32],
            order: Order::C,
            byte_order: ByteOrder::Little,
        };
        let value = if i + 1 == n { last } else { i as f32 };
        saver.add_bytes(&meta, &value.to_le_bytes().repeat(32))?;
    }
    saver.commit()?;
    Ok(())
}

/// An instance of DCP's class `class` of `module`, its fields set as CPython pickles a
/// dataclass.
fn instance(module: &str, class: &str, fields: Vec<(&str, Value)>) -> Value {
    let state = Value::dict(
        fields
            .into_iter()
            .map(|(k, v)| (Value::str(k), v))
            .collect(),
    );
    Value::object(Object::new(Global::new(module, class), Kind::Object).with_state(state))
}

/// A call of `module.name` with one argument named `param`, as torch pickles the values
/// of `TensorProperties` it makes by calling a function.
fn call(module: &str, name: &str, param: &str, arg: Value) -> Value {
    Value::object(
        Object::new(
            Global::new(module, name),
            Kind::Call {
                params: vec![param.to_string()].into(),
            },
        )
        .with_args(vec![arg]),
    )
}

/// `torch.Size(dims)`.
fn torch_size(dims: &[u64]) -> Value {
    Value::object(
        Object::new(Global::new("torch", "Size"), Kind::Tuple)
            .with_items(dims.iter().map(|&d| Value::Int(d as i64)).collect()),
    )
}

/// `TensorStorageMetadata` of a float32 tensor of `size` saved as `chunks` (offsets,
/// sizes).
fn tensor_metadata(size: &[u64], chunks: Vec<Value>) -> Value {
    let properties = Value::object(
        Object::new(Global::new(MODULE, "TensorProperties"), Kind::Object).with_state(
            Value::tuple(vec![
                Value::global("torch.float32"),
                call(
                    "torch.serialization",
                    "_get_layout",
                    "name",
                    Value::str("torch.strided"),
                ),
                Value::Bool(false),
                call(MODULE, "_MEM_FORMAT_ENCODING", "value", Value::Int(0)),
                Value::Bool(false),
            ]),
        ),
    );
    instance(
        MODULE,
        "TensorStorageMetadata",
        vec![
            ("properties", properties),
            ("size", torch_size(size)),
            ("chunks", Value::list(chunks)),
        ],
    )
}

fn chunk(offsets: Value, sizes: Value) -> Value {
    instance(
        MODULE,
        "ChunkStorageMetadata",
        vec![("offsets", offsets), ("sizes", sizes)],
    )
}

/// Writes the folder's `.metadata` (and its `__0_0.distcp`, empty: nothing here reads
/// a tensor's bytes).
fn write_metadata(
    dir: &Path,
    sd: Vec<(Value, Value)>,
    planner: Vec<(Value, Value)>,
    storage: Vec<(Value, Value)>,
) -> Result<()> {
    let md = instance(
        MODULE,
        "Metadata",
        vec![
            ("state_dict_metadata", Value::dict(sd)),
            ("planner_data", Value::dict(planner)),
            ("storage_data", Value::dict(storage)),
            ("storage_meta", Value::None),
            ("version", Value::str("1.0.0")),
        ],
    );
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join(".metadata"), Writer::new().protocol(4).write(&md)?)?;
    std::fs::write(dir.join("__0_0.distcp"), b"")?;
    Ok(())
}

/// A DCP checkpoint in `dir` of `n` empty tensors `t{i}.w`, each at path (`t{i}`, `w`)
/// in `planner_data`: every entry nested under a first key of its own.
pub fn dcp_nested(dir: &Path, n: usize) -> Result<()> {
    // One metadata value shared by every entry (pickled once): empty tensors need no
    // item.
    let empty = tensor_metadata(&[0], vec![chunk(torch_size(&[0]), torch_size(&[0]))]);
    let w = Value::str("w");
    let (mut sd, mut planner) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for i in 0..n {
        let key = format!("t{i}");
        let name = Value::str(&format!("{key}.w"));
        sd.push((name.clone(), empty.clone()));
        planner.push((name, Value::tuple(vec![Value::str(&key), w.clone()])));
    }
    write_metadata(dir, sd, planner, Vec::new())
}

/// A DCP checkpoint in `dir` of one float32 tensor `w` of shape `[2, n]` tiled by `n`
/// chunks of one column, listed in a shuffled order (column `i * 7919 mod n`; `n` not a
/// multiple of 7919), every chunk with an item of its own in `storage_data`.
pub fn dcp_chunks(dir: &Path, n: usize) -> Result<()> {
    let n64 = n as u64;
    let sizes = torch_size(&[2, 1]);
    let info = instance(
        "torch.distributed.checkpoint.filesystem",
        "_StorageInfo",
        vec![
            ("relative_path", Value::str("__0_0.distcp")),
            ("offset", Value::Int(0)),
            ("length", Value::Int(0)),
            ("transform_descriptors", Value::None),
        ],
    );
    let (mut chunks, mut storage) = (Vec::with_capacity(n), Vec::with_capacity(n));
    let name = Value::str("w");
    for i in 0..n64 {
        let offsets = torch_size(&[0, (i * 7919) % n64]);
        let index = instance(
            MODULE,
            "MetadataIndex",
            vec![
                ("fqn", name.clone()),
                ("offset", offsets.clone()),
                ("index", Value::Int(i as i64)),
            ],
        );
        storage.push((index, info.clone()));
        chunks.push(chunk(offsets, sizes.clone()));
    }
    let sd = vec![(name.clone(), tensor_metadata(&[2, n64], chunks))];
    let planner = vec![(name.clone(), Value::tuple(vec![name]))];
    write_metadata(dir, sd, planner, storage)
}
