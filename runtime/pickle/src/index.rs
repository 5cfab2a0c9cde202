//! Indexing the tensors a pickle describes: the calls that build tensors are found in the
//! pickle's value ([`find_objects`]), each is mapped by the format's function to tensor
//! metadata and a storage reference ([`Mapped`]), and the storage is located by the
//! container that holds it ([`Storages`]): the members of an archive ([`Index`]), or the
//! records that follow pickles read back to back in one file ([`read_file`]).

use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};

use super::read::{read, read_prefix};
use super::rules::Rules;
use super::tree::to_tree;
use super::value::{Object, Value};
use super::walk::find_objects;
use tensorfmt_core::cursor::Cursor;
use tensorfmt_core::dtype::DType;
use tensorfmt_core::error::{Error, ErrorKind, Result};
use tensorfmt_core::limits::Limits;
use tensorfmt_core::source::Source;
use tensorfmt_core::storage::{Located, Metadata, StorageRef, Storages};
use tensorfmt_core::tensor::{ByteOrder, DataLocation, TensorInfo};
use tensorfmt_core::tree::Node;

/// What a format's mapping makes of one call that builds a tensor: the tensor's metadata,
/// and where its bytes start (a storage named by the call's arguments).
#[derive(Debug, Clone, PartialEq)]
pub struct Mapped<'v> {
    /// The tensor's name (usually the call's path in the pickled object).
    pub name: String,
    /// The element type.
    pub dtype: DType,
    /// The dimensions.
    pub shape: Vec<u64>,
    /// The strides, in elements.
    pub strides: Vec<i64>,
    /// The byte order of the elements.
    pub byte_order: ByteOrder,
    /// The storage that holds the bytes, and the offset of the first one in it.
    pub storage: StorageRef<'v>,
}

/// The part of its storage that a tensor's persistent id declares, in bytes from the
/// start of the storage's member or record ([`declared`]).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Declared {
    /// The storage's size, `numel` times the element size.
    total: u64,
    /// The first byte and the size of the part the tensor lies in: the whole storage, or
    /// the view that the id's `view` item names.
    start: u64,
    len: u64,
}

/// What the persistent id among the arguments of the call `o` declares of its storage,
/// when the rules give persistent ids a form ([`Rules::persistent_form`]) with a `numel`
/// item, as torch's `persistent_load` reads it: the storage holds `numel` elements of
/// the tensor's element type (bytes when the id's `class` item is an `UntypedStorage`),
/// so `numel` must not be negative nor its byte size overflow; a `view` item that is not
/// `None` is `(view_key, offset, size)` in elements (the legacy format's storage views:
/// the tensor's offset counts from the view's start), which must lie in the storage.
fn declared(o: &Object, rules: &Rules, dtype: DType) -> Result<Option<Declared>> {
    let Some((_, names)) = rules.persistent_shape() else {
        return Ok(None);
    };
    let item = |name: &str| names.iter().position(|n| n == name);
    let Some(numel_at) = item("numel") else {
        return Ok(None);
    };
    let Some(Value::Persistent(id)) = o.args.iter().find(|a| matches!(a, Value::Persistent(_)))
    else {
        return Ok(None);
    };
    let Some(items) = id.as_seq() else {
        return Ok(None);
    };
    let key = items
        .get(item("key").unwrap_or(usize::MAX))
        .and_then(Value::as_name)
        .unwrap_or("?")
        .to_string();
    let bad = |what: String| -> Error {
        ErrorKind::SizeMismatch(format!("storage {key:?}: its persistent id {what}")).into()
    };
    let untyped = item("class")
        .and_then(|i| items.get(i))
        .and_then(Value::as_name)
        .is_some_and(|c| c.rsplit('.').next() == Some("UntypedStorage"));
    let size = match (untyped, dtype.itemsize()) {
        (true, _) => 1,
        (false, Some(n)) => n as i128,
        (false, None) => return Ok(None),
    };
    let elements = |v: Option<&Value>, what: &str| -> Result<u64> {
        let n = v
            .and_then(Value::as_i128)
            .ok_or_else(|| bad(format!("has a {what} that is not an integer")))?;
        if n < 0 {
            return Err(bad(format!("declares a negative {what} ({n})")));
        }
        n.checked_mul(size)
            .and_then(|b| u64::try_from(b).ok())
            .ok_or_else(|| {
                bad(format!(
                    "declares a {what} of {n} elements, beyond any file"
                ))
            })
    };
    let total = elements(items.get(numel_at), "numel")?;
    let (start, len) = match item("view").and_then(|i| items.get(i)) {
        None | Some(Value::None) => (0, total),
        Some(v) => match v.as_seq() {
            Some([_, offset, count]) => {
                let start = elements(Some(offset), "view offset")?;
                let len = elements(Some(count), "view size")?;
                if start.checked_add(len).is_none_or(|end| end > total) {
                    return Err(bad(format!(
                        "declares a view of bytes {start}..{} of a storage of {total} bytes",
                        start.saturating_add(len)
                    )));
                }
                (start, len)
            }
            _ => return Err(bad("has a view that is not (view_key, offset, size)".into())),
        },
    };
    Ok(Some(Declared { total, start, len }))
}

/// The location `l` of bytes, its length capped at `cap`.
fn capped(l: DataLocation, cap: u64) -> DataLocation {
    match l {
        DataLocation::Range { offset, len } => DataLocation::Range {
            offset,
            len: len.min(cap),
        },
        DataLocation::Encoded {
            content,
            part,
            skip,
            len,
        } => DataLocation::Encoded {
            content,
            part,
            skip,
            len: len.min(cap),
        },
        other => other,
    }
}

/// The tensor `m` describes, its bytes located by `storages` (within the part of the
/// storage its persistent id declares, when it declares one: the storage's member or
/// record must hold `numel` elements, and none when `numel` is 0); errors about its
/// extent name the storage's entry.
fn place<S: Storages + ?Sized>(
    storages: &S,
    mut m: Mapped<'_>,
    declared: Option<Declared>,
) -> Result<TensorInfo> {
    let skip = m.storage.skip;
    let mut cap = u64::MAX;
    if let Some(d) = declared {
        let key = m.storage.key.clone();
        let whole = StorageRef {
            skip: 0,
            ..m.storage.clone()
        };
        let Located { location, entry } = storages.locate(&whole, &m.name)?;
        let held = match location {
            DataLocation::Range { len, .. } | DataLocation::Encoded { len, .. } => len,
            _ => d.total,
        };
        if d.total > held || (d.total == 0 && held > 0) {
            let e = Error::from(ErrorKind::SizeMismatch(format!(
                "storage {key:?}: its persistent id declares {} bytes (numel), its data holds {held}",
                d.total
            )));
            return Err(match entry {
                Some(name) => e.in_entry(name),
                None => e,
            });
        }
        cap = d.len.checked_sub(skip).ok_or_else(|| {
            Error::from(ErrorKind::SizeMismatch(format!(
                "tensor '{}' starts at byte {skip} of its storage {key:?}, which holds {}",
                m.name, d.len
            )))
        })?;
        m.storage.skip = skip.checked_add(d.start).ok_or_else(|| {
            Error::from(ErrorKind::Overflow("tensor offset in its storage".into()))
        })?;
    }
    let Located { location, entry } = storages.locate(&m.storage, &m.name)?;
    let location = capped(location, cap);
    TensorInfo::strided(m.name, m.dtype, m.shape, m.strides, m.byte_order, location).map_err(|e| {
        match entry {
            Some(name) => e.in_entry(name),
            None => e,
        }
    })
}

/// The field an error about the call at `path` is reported in.
fn field_of(path: &str) -> &str {
    if path.is_empty() {
        "<root>"
    } else {
        path
    }
}

/// The names each tensor object was listed under, in walk order, for [`to_tree`]: an
/// object listed under several names (shared by the pickle's memo) gets each in turn.
#[derive(Default)]
pub struct TensorNames(HashMap<usize, VecDeque<String>>);

impl TensorNames {
    /// Records that the object `o` is listed as the tensor `name`.
    pub fn add(&mut self, o: &Object, name: &str) {
        self.0
            .entry(o as *const Object as usize)
            .or_default()
            .push_back(name.to_string());
    }

    /// The name of the tensor `o` is, met by the tree: each of its names in turn, the
    /// last one again from then on.
    pub fn next(&mut self, o: &Object) -> Option<String> {
        let q = self.0.get_mut(&(o as *const Object as usize))?;
        if q.len() > 1 {
            q.pop_front()
        } else {
            q.front().cloned()
        }
    }

    /// The object tree of `root`, its tensors named as recorded ([`to_tree`]).
    pub fn tree(mut self, root: &Value, buffer: &[u8], limits: &Limits) -> Result<Node> {
        to_tree(root, buffer, &mut |o| self.next(o), limits)
    }
}

/// The mapping of a call whose tensor lies in a storage ([`Index::read`]).
type StoredMap<'f> = dyn for<'v> Fn(&str, &'v Object) -> Result<Mapped<'v>> + 'f;

/// The calls of a pickle whose tensors lie in storages, and their mapping.
type Stored<'f> = (fn(&Object) -> bool, &'f StoredMap<'f>);

/// The tensors of the pickles in a container (an archive whose members are pickles and
/// storages), read one pickle after another ([`Index::read`]); with `with_structure`, the
/// object tree of the pickle in the container's first entry too.
pub struct Index<'c, S: Storages> {
    storages: &'c S,
    limits: &'c Limits,
    with_structure: bool,
    tensors: Vec<TensorInfo>,
    structure: Option<Node>,
}

impl<'c, S: Storages> Index<'c, S> {
    /// An index of nothing yet, over `storages`.
    pub fn new(storages: &'c S, limits: &'c Limits, with_structure: bool) -> Self {
        Index {
            storages,
            limits,
            with_structure,
            tensors: Vec::new(),
            structure: None,
        }
    }

    /// Reads the pickle in the container's entry number `entry` (nothing when that entry is
    /// optional and absent) with `rules`, finds every call for which `is_target` is true,
    /// in the order of the unpickled object, and adds the tensor `map` makes of each
    /// (given its path, see [`find_objects`]), its bytes located by the container. The
    /// object tree is that of entry 0.
    ///
    /// Errors name the file and the pickle member, or the storage member when a tensor
    /// does not fit in its storage, and the path of the call (`<root>` for the root
    /// object) as the field, under the field `map` names (`state.0.exp_avg.t.size`).
    /// The limits of [`read`] and [`find_objects`] apply.
    pub fn read<F>(
        &mut self,
        entry: usize,
        rules: &Rules,
        is_target: fn(&Object) -> bool,
        map: F,
    ) -> Result<()>
    where
        F: for<'v> Fn(&str, &'v Object) -> Result<Mapped<'v>>,
    {
        self.read_kinds(entry, rules, Some((is_target, &map)), &[])
    }

    /// As [`Index::read`], and the calls of `placed` too, in the same walk: tensors whose
    /// bytes the pickle holds itself (NumPy arrays in a checkpoint, read with
    /// [`Rules::byte_ranges`]), each mapped by the first kind it is of, given the offset
    /// of the pickle's bytes in the file. Such a tensor in a compressed member, whose
    /// bytes do not lie in the file as they are, is refused
    /// ([`ErrorKind::Unsupported`]).
    pub fn read_with<F>(
        &mut self,
        entry: usize,
        rules: &Rules,
        (is_target, map): (fn(&Object) -> bool, F),
        placed: &[OneKind],
    ) -> Result<()>
    where
        F: for<'v> Fn(&str, &'v Object) -> Result<Mapped<'v>>,
    {
        self.read_kinds(entry, rules, Some((is_target, &map)), placed)
    }

    /// As [`Index::read_with`] for a pickle whose tensors all lie in it (`placed`).
    pub fn read_placed(&mut self, entry: usize, rules: &Rules, placed: &[OneKind]) -> Result<()> {
        self.read_kinds(entry, rules, None, placed)
    }

    fn read_kinds(
        &mut self,
        entry: usize,
        rules: &Rules,
        stored: Option<Stored<'_>>,
        placed: &[OneKind],
    ) -> Result<()> {
        let s = self.storages;
        let Some(Metadata {
            bytes,
            entry: member,
            offset,
        }) = s.metadata(entry).map_err(|e| s.in_file(e))?
        else {
            return Ok(());
        };
        let in_member = |e: Error| s.in_file(e.in_entry(member));
        let value = read(&bytes, rules, self.limits).map_err(in_member)?;
        let kind_of = |o: &Object| kind_of(placed, o);
        let is_target = |o: &Object| {
            (stored.is_some_and(|(is, _)| is(o)) || kind_of(o).is_some())
                && !super::numpy::is_value_array(o)
        };
        let budget = self.limits.tree_budget(bytes.len() as u64);
        let objects =
            find_objects(&value, &bytes, &is_target, self.limits, budget).map_err(in_member)?;
        let tree = self.with_structure && entry == 0;
        let mut names = TensorNames::default();
        self.tensors.reserve(objects.len());
        for (path, o) in objects {
            let t = match (kind_of(o), stored) {
                (Some(place), _) => match offset {
                    Some(base) => place_array(place, &path, o, base, &bytes),
                    None => Err(ErrorKind::Unsupported(format!(
                        "the bytes of '{}' lie in a compressed pickle member, which cannot be read in place; store the member uncompressed",
                        field_of(&path)
                    ))
                    .into()),
                },
                (None, Some((_, map))) => map(&path, o).and_then(|m| {
                    let d = declared(o, rules, m.dtype)?;
                    place(s, m, d)
                }),
                (None, None) => unreachable!("find_objects gives objects of the kinds"),
            }
            .map_err(|e| in_member(e.in_field(field_of(&path))))?;
            if tree {
                names.add(o, &t.name);
            }
            self.tensors.push(t);
        }
        if tree {
            self.structure = Some(names.tree(&value, &bytes, self.limits).map_err(in_member)?);
        }
        Ok(())
    }

    /// The tensors, and the object tree when it was asked for.
    pub fn finish(self) -> (Vec<TensorInfo>, Option<Node>) {
        (self.tensors, self.structure)
    }
}

/// A check of a pickle's value (given as an argument is, `Some`), and its text in the
/// format (the message when it fails).
pub type Check = (fn(Option<&Value>) -> bool, &'static str);

/// One of the pickles at the start of a file read by [`read_file`].
#[derive(Debug, Clone, Copy)]
pub struct Field {
    /// Its name in the format (errors name it).
    pub name: &'static str,
    /// A check its value must pass, and the check's text (the message when it fails).
    pub check: Option<Check>,
}

impl Field {
    /// A pickle field without a check.
    pub const fn new(name: &'static str) -> Field {
        Field { name, check: None }
    }

    /// A pickle field whose value must pass `check` (written `text` in the format).
    pub const fn checked(
        name: &'static str,
        check: fn(Option<&Value>) -> bool,
        text: &'static str,
    ) -> Field {
        Field {
            name,
            check: Some((check, text)),
        }
    }
}

/// What a record reader is told about the storage whose record it reads.
#[derive(Debug, Clone, Copy)]
pub struct Record<'a> {
    /// The storage's key.
    pub key: &'a str,
    /// The dtype of the tensors whose bytes the record holds.
    pub dtype: DType,
    /// The persistent id of (the last of) those tensors, when their calls have one.
    pub id: Option<&'a Value>,
}

impl Record<'_> {
    /// Checks that the record's `value` of `field` (`numel`, read at the cursor as
    /// `path`) is item `item` of the storage's persistent id, when the id has that item:
    /// fails with [`ErrorKind::SizeMismatch`] at the cursor otherwise.
    pub fn agrees(
        &self,
        c: &Cursor<'_>,
        path: &str,
        field: &str,
        item: usize,
        value: i128,
    ) -> Result<()> {
        match super::args::item(self.id, item).and_then(Value::as_i128) {
            Some(d) if d != value => Err(c.error(
                path,
                ErrorKind::SizeMismatch(format!(
                    "storage {:?} has wrong byte size: its record holds {field} {value}, its persistent id says {d}",
                    self.key
                )),
            )),
            _ => Ok(()),
        }
    }
}

/// A file of pickles read back to back, then one record per storage, in the order of a
/// list of keys that one of the pickles holds (PyTorch's legacy format).
#[derive(Clone, Copy)]
pub struct FileSpec {
    /// The pickles, in file order.
    pub fields: &'static [Field],
    /// The position in `fields` of the pickle whose calls are mapped to tensors.
    pub object: usize,
    /// The position in `fields` of the pickle listing the storage keys in record order
    /// (strings or integers).
    pub keys: usize,
    /// The name of the records (errors name it).
    pub records: &'static str,
    /// The argument of the mapped calls that holds the persistent id naming the storage
    /// (given to the record reader).
    pub persistent: &'static str,
    /// What the pickles may contain.
    pub rules: fn() -> &'static Rules,
    /// Which calls build tensors in the records.
    pub is_target: fn(&Object) -> bool,
    /// The calls that build tensors whose bytes the object pickle holds itself (NumPy
    /// arrays, read with [`Rules::byte_ranges`]), each kind with its mapping, given the
    /// offset of the pickle in the file.
    pub placed: &'static [OneKind],
    /// The format's mapping of one call (given its path) to a tensor.
    pub map: for<'v> fn(&str, &'v Object) -> Result<Mapped<'v>>,
    /// Reads one record at the cursor and returns the range of the storage's bytes.
    pub record: fn(&mut Cursor<'_>, &Record<'_>) -> Result<(u64, u64)>,
}

/// A call of [`read_file`]'s object pickle, mapped before the records are read.
enum Pending<'v> {
    /// A tensor of a record, located once the records are read, and what its
    /// persistent id declares of its storage.
    Stored((Mapped<'v>, Option<Declared>)),
    /// A tensor whose bytes the object pickle holds.
    Placed(TensorInfo),
}

/// The records of [`read_file`]: storage key → byte range in the file.
struct Records<'k> {
    path: Option<&'k std::path::Path>,
    ranges: HashMap<&'k str, (u64, u64)>,
}

impl Storages for Records<'_> {
    fn metadata(&self, _: usize) -> Result<Option<Metadata<'_>>> {
        Ok(None)
    }

    fn locate(&self, storage: &StorageRef<'_>, tensor: &str) -> Result<Located<'_>> {
        let key = &*storage.key;
        let &(offset, len) = self.ranges.get(key).ok_or_else(|| {
            Error::from(ErrorKind::NotFound(format!(
                "storage {key:?} is not in the key list"
            )))
        })?;
        let skip = storage.skip;
        let rest = len.checked_sub(skip).ok_or_else(|| {
            Error::from(ErrorKind::SizeMismatch(format!(
                "tensor '{tensor}' starts at byte {skip} of its storage, which holds {len}"
            )))
        })?;
        Ok(Located {
            location: DataLocation::Range {
                offset: offset + skip,
                len: rest,
            },
            entry: None,
        })
    }

    fn in_file(&self, e: Error) -> Error {
        match self.path {
            Some(p) => e.in_file(p),
            None => e,
        }
    }
}

/// Reads the pickles of `spec.fields` back to back from the start of `src` (each within
/// `limits.max_header_bytes`, with the checks they declare), maps the calls of the object
/// pickle with `spec.map`, then reads one record per key of the keys pickle with
/// `spec.record` (told the dtype of the tensors using that storage: they must agree on
/// the element size, and a storage no tensor uses cannot be read), which must end the
/// file; each tensor's bytes are its storage's from its offset on. With
/// `with_structure`, returns the object tree of the object pickle too.
///
/// Errors name the file, the pickle field (with the offset of the pickle's error), the
/// record field (with its offset), or the path of a call (as [`Index::read`]).
pub fn read_file(
    src: &Source,
    limits: &Limits,
    spec: &FileSpec,
    with_structure: bool,
) -> Result<(Vec<TensorInfo>, Option<Node>)> {
    let in_file = |e: Error| src.in_file(e);
    let total = src.data().len();
    let mut pos: u64 = 0;
    let mut values = Vec::with_capacity(spec.fields.len());
    // The object pickle's offset in the file and its bytes (which the byte strings it
    // leaves in place point into).
    let mut object_at: (u64, Cow<'_, [u8]>) = (0, Default::default());
    for (i, f) in spec.fields.iter().enumerate() {
        let start = pos;
        let n = (total - pos).min(limits.max_header_bytes);
        let window: Cow<'_, [u8]> = match src.data().as_slice() {
            Some(all) => Cow::Borrowed(&all[pos as usize..(pos + n) as usize]),
            None => {
                let mut v = vec![0u8; n as usize];
                src.data().read_exact_at(pos, &mut v).map_err(in_file)?;
                Cow::Owned(v)
            }
        };
        let (value, used) = read_prefix(&window, (spec.rules)(), limits).map_err(|mut e| {
            e.location.offset = Some(e.location.offset.unwrap_or(0) + start);
            in_file(e.in_field(f.name))
        })?;
        pos += used as u64;
        if i == spec.object {
            let bytes = match window {
                Cow::Borrowed(b) => Cow::Borrowed(&b[..used]),
                Cow::Owned(mut v) => {
                    v.truncate(used);
                    v.shrink_to_fit();
                    Cow::Owned(v)
                }
            };
            object_at = (start, bytes);
        }
        if let Some((check, text)) = f.check {
            if !check(Some(&value)) {
                let mut e = in_file(
                    Error::from(ErrorKind::Invalid(format!("check failed: {text}")))
                        .in_field(f.name),
                );
                e.location.offset = Some(start);
                return Err(e);
            }
        }
        values.push(value);
    }
    let not_keys = || {
        in_file(Error::from(ErrorKind::Invalid(format!(
            "`{}` is not a list of storage keys",
            spec.fields[spec.keys].name
        ))))
    };
    let keys: Vec<String> = values[spec.keys]
        .as_seq()
        .ok_or_else(not_keys)?
        .iter()
        .map(|k| match k {
            Value::Str(s) => Some(s.to_string()),
            Value::Int(i) => Some(i.to_string()),
            _ => None,
        })
        .collect::<Option<_>>()
        .ok_or_else(not_keys)?;
    let object = &values[spec.object];
    let kind_of = |o: &Object| kind_of(spec.placed, o);
    let is_target = |o: &Object| (spec.is_target)(o) || kind_of(o).is_some();
    let budget = limits.tree_budget(object_at.1.len() as u64);
    let objects =
        find_objects(object, &object_at.1, &is_target, limits, budget).map_err(in_file)?;

    // Every call mapped; the storages' dtypes are those of the tensors using them.
    let mut mapped = Vec::with_capacity(objects.len());
    let mut used: HashMap<String, (DType, Option<&Value>)> = HashMap::new();
    for (path, o) in &objects {
        if let Some(place) = kind_of(o) {
            let t = place_array(place, path, o, object_at.0, &object_at.1);
            mapped.push(Pending::Placed(
                t.map_err(|e| in_file(e.in_field(field_of(path))))?,
            ));
            continue;
        }
        let m = (spec.map)(path, o).and_then(|m| {
            let d = declared(o, (spec.rules)(), m.dtype)?;
            let id = o.arg(spec.persistent);
            match used.get_mut(&*m.storage.key) {
                Some((prev, _)) if prev.itemsize() != m.dtype.itemsize() => {
                    return Err(Error::from(ErrorKind::Invalid(format!(
                        "storage {:?} is viewed with element sizes {} and {}",
                        m.storage.key, prev, m.dtype
                    ))));
                }
                Some((_, last)) => *last = id.or(*last),
                None => {
                    used.insert(m.storage.key.to_string(), (m.dtype, id));
                }
            }
            Ok((m, d))
        });
        mapped.push(Pending::Stored(
            m.map_err(|e| in_file(e.in_field(field_of(path))))?,
        ));
    }

    // The records, one per key.
    let mut records = Records {
        path: src.path(),
        ranges: HashMap::with_capacity(keys.len()),
    };
    let mut c = Cursor::new(src.data(), src.location())
        .starting_at(pos)
        .map_err(in_file)?;
    for key in &keys {
        let &(dtype, id) = used.get(key.as_str()).ok_or_else(|| {
            in_file(Error::from(ErrorKind::Invalid(format!(
                "{}: storage {key:?} is used by no tensor, so its element size is unknown",
                spec.records
            ))))
        })?;
        let record = Record { key, dtype, id };
        let range = (spec.record)(&mut c, &record).map_err(in_file)?;
        records.ranges.insert(key, range);
    }
    if c.remaining() != 0 {
        return Err(in_file(c.error(
            spec.records,
            ErrorKind::Invalid(format!(
                "{} bytes follow the last record of `{}`",
                c.remaining(),
                spec.records
            )),
        )));
    }

    let mut tensors = Vec::with_capacity(mapped.len());
    let mut names = TensorNames::default();
    for ((path, o), m) in objects.iter().zip(mapped) {
        let t = match m {
            Pending::Stored((m, d)) => {
                place(&records, m, d).map_err(|e| in_file(e.in_field(field_of(path))))?
            }
            Pending::Placed(t) => t,
        };
        if with_structure {
            names.add(o, &t.name);
        }
        tensors.push(t);
    }
    let structure = match with_structure {
        true => Some(names.tree(object, &object_at.1, limits).map_err(in_file)?),
        false => None,
    };
    Ok((tensors, structure))
}

/// The format's mapping of one call (given its path, and the offset of the pickle in the
/// file) to a tensor whose bytes the pickle holds ([`data`](super::data)).
pub type Place = for<'v> fn(&str, &'v Object, u64) -> Result<TensorInfo>;

/// A call kind of a [`OneSpec`]: which calls are of it, and their mapping.
pub type OneKind = (fn(&Object) -> bool, Place);

/// The tensor `place` maps the call `o` to (at `path`, the pickle `buffer` at `base`),
/// a call of NumPy's that rebuilds an array read as NumPy reads it first (its canonical
/// form mapped, then transposed by its `axis_order`), or refused where NumPy refuses it:
/// what [`read_one`] does with each call it finds, for readers that walk a pickle
/// themselves.
pub fn place_array(
    place: Place,
    path: &str,
    o: &Object,
    base: u64,
    buffer: &[u8],
) -> Result<TensorInfo> {
    match super::numpy::array(o, buffer)? {
        None => place(path, o, base),
        Some(a) => {
            let t = place(path, &a.object, base)?;
            match a.axes {
                Some(axes) => super::numpy::transpose(t, &axes),
                None => Ok(t),
            }
        }
    }
}

/// The mapping of the first of `kinds` that `o` is of.
fn kind_of(kinds: &[OneKind], o: &Object) -> Option<Place> {
    kinds.iter().find(|(is, _)| is(o)).map(|k| k.1)
}

/// A file that is one pickle, whose arrays' bytes it holds itself (NumPy's `.pkl`):
/// what [`read_one`] reads.
#[derive(Clone, Copy)]
pub struct OneSpec {
    /// The pickle's field in the format (errors name it).
    pub field: &'static str,
    /// What the pickle may contain (with [`Rules::byte_ranges`], so that the arrays'
    /// bytes stay in the file).
    pub rules: fn() -> &'static Rules,
    /// The calls that build tensors, each kind with its mapping, in the format's order:
    /// a call is mapped by the first kind it is of.
    pub kinds: &'static [OneKind],
}

/// Reads the pickle that fills `src` (mapped, or read whole when the source is not)
/// with `spec.rules`, finds every call of `spec.kinds` in the order of the unpickled
/// object and maps it; with `with_structure`, returns the object tree too.
///
/// Errors name the file, the pickle's field (with the offset of the pickle's error), or
/// the path of a call (as [`Index::read`]).
pub fn read_one(
    src: &Source,
    limits: &Limits,
    spec: &OneSpec,
    with_structure: bool,
) -> Result<(Vec<TensorInfo>, Option<Node>)> {
    let in_file = |e: Error| src.in_file(e.in_field(spec.field));
    let owned;
    let bytes: &[u8] = match src.data().as_slice() {
        Some(all) => all,
        None => {
            let len = usize::try_from(src.data().len())
                .map_err(|_| in_file(ErrorKind::Overflow("file size".to_string()).into()))?;
            let mut v = vec![0u8; len];
            src.data().read_exact_at(0, &mut v).map_err(in_file)?;
            owned = v;
            &owned
        }
    };
    let value = read(bytes, (spec.rules)(), limits).map_err(in_file)?;
    let is_target =
        |o: &Object| spec.kinds.iter().any(|(is, _)| is(o)) && !super::numpy::is_value_array(o);
    let budget = limits.tree_budget(bytes.len() as u64);
    let objects = find_objects(&value, bytes, &is_target, limits, budget).map_err(in_file)?;
    let mut tensors = Vec::with_capacity(objects.len());
    let mut names = TensorNames::default();
    for (path, o) in objects {
        let place = kind_of(spec.kinds, o).expect("find_objects gives objects of the kinds");
        let t = place_array(place, &path, o, 0, bytes)
            .map_err(|e| src.in_file(e.in_field(field_of(&path))))?;
        if with_structure {
            names.add(o, &t.name);
        }
        tensors.push(t);
    }
    let structure = match with_structure {
        true => Some(names.tree(&value, bytes, limits).map_err(in_file)?),
        false => None,
    };
    Ok((tensors, structure))
}
