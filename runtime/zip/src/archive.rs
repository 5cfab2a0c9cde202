//! Archives whose members a format names by patterns: one member whose captures name
//! every other (`{prefix}/data.pkl` gives `prefix`), metadata members read whole, text
//! members, and storages, one member per key (`{prefix}/data/{key}`). [`Archive`] opens
//! one for reading and locates its storages for the engine that reads the metadata
//! ([`Storages`]); [`ArchiveWriter`] writes one.

use std::io::{Seek, Write};
use std::sync::Arc;

use tensorfmt_core::error::{Error, ErrorKind, Result};
use tensorfmt_core::limits::Limits;
use tensorfmt_core::pattern::{Captures, Pattern};
use tensorfmt_core::registry::Payload;
use tensorfmt_core::source::Source;
use tensorfmt_core::storage::{Located, Metadata, StorageRef, Storages};
use tensorfmt_core::tensor::{ByteOrder, Compression, TensorMeta, WriteOptions};

use crate::{index, location, member_bytes, read_text, ZipIndex, ZipMember, ZipWriter};

/// What an [`Entry`] holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// A member read whole (a pickle).
    Member,
    /// A text member (UTF-8).
    Text {
        /// A name looked up before the pattern's, when there is one.
        preferred: Option<&'static str>,
        /// The values the text may have (any when empty).
        one_of: &'static [&'static str],
        /// What the writer writes (nothing when `None`).
        written: Option<&'static str>,
    },
    /// One member per storage, its key the value of `capture`, the one capture its
    /// pattern has beyond the first entry's.
    Storages {
        /// The capture that holds the key.
        capture: &'static str,
    },
}

/// A member, or a family of members, of an archive format. The first entry of a format's
/// list names the others: its captures fill their patterns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// The entry's name in the format (messages name it).
    pub name: &'static str,
    /// The members' name pattern.
    pub pattern: &'static str,
    /// The compression methods its members may have (any the index reads when empty);
    /// the writer uses the first (stored when empty).
    pub methods: &'static [Compression],
    /// What it holds.
    pub kind: EntryKind,
    /// Whether an archive may lack it.
    pub optional: bool,
    /// The alignment of its members' data on write.
    pub align: u16,
}

impl Entry {
    const fn new(name: &'static str, pattern: &'static str, kind: EntryKind) -> Entry {
        Entry {
            name,
            pattern,
            methods: &[],
            kind,
            optional: false,
            align: 1,
        }
    }

    /// A member read whole.
    pub const fn member(name: &'static str, pattern: &'static str) -> Entry {
        Entry::new(name, pattern, EntryKind::Member)
    }

    /// A text member.
    pub const fn text(name: &'static str, pattern: &'static str) -> Entry {
        let kind = EntryKind::Text {
            preferred: None,
            one_of: &[],
            written: None,
        };
        Entry::new(name, pattern, kind)
    }

    /// Storages named by `capture`.
    pub const fn storages(
        name: &'static str,
        pattern: &'static str,
        capture: &'static str,
    ) -> Entry {
        Entry::new(name, pattern, EntryKind::Storages { capture })
    }

    /// This entry, which an archive may lack.
    pub const fn optional(mut self) -> Entry {
        self.optional = true;
        self
    }

    /// This entry with the compression `methods` allowed.
    pub const fn methods(mut self, methods: &'static [Compression]) -> Entry {
        self.methods = methods;
        self
    }

    /// This entry with its members' data aligned to `align` bytes on write.
    pub const fn align(mut self, align: u16) -> Entry {
        self.align = align;
        self
    }

    /// This text entry, looked up under `pattern` first.
    pub const fn preferred(mut self, pattern: &'static str) -> Entry {
        if let EntryKind::Text {
            one_of, written, ..
        } = self.kind
        {
            self.kind = EntryKind::Text {
                preferred: Some(pattern),
                one_of,
                written,
            };
        }
        self
    }

    /// This text entry, whose content must be one of `values`.
    pub const fn one_of(mut self, values: &'static [&'static str]) -> Entry {
        if let EntryKind::Text {
            preferred, written, ..
        } = self.kind
        {
            self.kind = EntryKind::Text {
                preferred,
                one_of: values,
                written,
            };
        }
        self
    }

    /// This text entry, which the writer writes with `content`.
    pub const fn written(mut self, content: &'static str) -> Entry {
        if let EntryKind::Text {
            preferred, one_of, ..
        } = self.kind
        {
            self.kind = EntryKind::Text {
                preferred,
                one_of,
                written: Some(content),
            };
        }
        self
    }
}

/// An archive opened as a format's entries describe it (see [`Archive::open`]).
pub struct Archive<'s> {
    src: &'s Source,
    limits: &'s Limits,
    format: &'static str,
    entries: &'static [Entry],
    zip: Arc<ZipIndex>,
    /// The position of the first entry's member.
    first: usize,
    captures: Captures,
    texts: Vec<Option<String>>,
    /// For each storages entry whose pattern names its key once, the names of its members
    /// before and after the key (`archive/data/` and ``), so that a storage is found
    /// without building its name.
    affixes: Vec<Option<(String, String)>>,
}

impl<'s> Archive<'s> {
    /// Opens the zip archive in `src` as the format `format` (messages name it) whose
    /// entries are `entries`: refuses members of an entry compressed with a method it does
    /// not list, finds the one member of the first entry (several members matching its
    /// pattern, or none, are errors), and reads the text entries (a required one missing
    /// is [`ErrorKind::NotFound`], a value outside its `one_of` is
    /// [`ErrorKind::Invalid`]). Errors name the file and the member.
    pub fn open(
        src: &'s Source,
        limits: &'s Limits,
        format: &'static str,
        entries: &'static [Entry],
    ) -> Result<Archive<'s>> {
        let in_file = |e: Error| src.in_file(e);
        let zip = index(src, limits).map_err(in_file)?;
        let patterns = entries
            .iter()
            .map(|e| Pattern::new(e.pattern))
            .collect::<Result<Vec<_>>>()?;
        for m in zip
            .members()
            .iter()
            .filter(|m| m.compression != Compression::Stored)
        {
            for (e, p) in entries.iter().zip(&patterns) {
                if !e.methods.is_empty()
                    && !e.methods.contains(&m.compression)
                    && p.is_match(&m.name)
                {
                    return Err(in_file(
                        Error::from(ErrorKind::Unsupported(format!(
                            "{format} members may not be compressed with {:?}",
                            m.compression
                        )))
                        .in_entry(m.name.as_str()),
                    ));
                }
            }
        }
        let first = entries.first().ok_or_else(|| {
            Error::from(ErrorKind::Invalid(format!(
                "{format}: an archive of no entries"
            )))
        })?;
        let mut found: Option<(usize, Vec<String>)> = None;
        for (i, m) in zip.members().iter().enumerate() {
            if let Some(values) = patterns[0].matches(&m.name) {
                if let Some((prev, _)) = &found {
                    return Err(in_file(Error::from(ErrorKind::Invalid(format!(
                        "{format}: several members match `{}`: {} and {}",
                        shown(first.pattern),
                        zip.members()[*prev].name,
                        m.name
                    )))));
                }
                found = Some((i, values));
            }
        }
        let Some((first, values)) = found else {
            return Err(in_file(Error::from(ErrorKind::NotFound(format!(
                "{format}: no member matches `{}`",
                shown(entries[0].pattern)
            )))));
        };
        let mut archive = Archive {
            src,
            limits,
            format,
            entries,
            zip,
            first,
            captures: Captures::new(&patterns[0], values),
            texts: Vec::with_capacity(entries.len()),
            affixes: Vec::with_capacity(entries.len()),
        };
        for e in entries {
            let text = match e.kind {
                EntryKind::Text {
                    preferred, one_of, ..
                } => archive.text_of(e, preferred, one_of).map_err(in_file)?,
                _ => None,
            };
            archive.texts.push(text);
            let affixes = match e.kind {
                EntryKind::Storages { capture } => archive.affixes_of(e.pattern, capture),
                _ => None,
            };
            archive.affixes.push(affixes);
        }
        Ok(archive)
    }

    /// The names that members of the storages entry of `pattern` have before and after
    /// their key (the value of `capture`), when the pattern names the key once and
    /// every other capture it names is the first entry's; `None` otherwise (the key's
    /// member is then found by its name, built as [`Captures::format`] builds it).
    fn affixes_of(&self, pattern: &str, capture: &str) -> Option<(String, String)> {
        let hole = format!("{{{capture}}}");
        let (before, after) = pattern.split_once(&hole)?;
        if after.contains(&hole) {
            return None;
        }
        let before = self.captures.format_all(before).ok()?;
        let after = self.captures.format_all(after).ok()?;
        Some((before, after))
    }

    /// Reads the text entry `e`.
    fn text_of(
        &self,
        e: &Entry,
        preferred: Option<&str>,
        one_of: &[&str],
    ) -> Result<Option<String>> {
        let name = self.captures.format_all(e.pattern)?;
        let member = match preferred {
            Some(p) => {
                let p = self.captures.format_all(p)?;
                match self.zip.find(&p) {
                    Some(m) => Ok(m),
                    None => self
                        .zip
                        .find(&name)
                        .ok_or_else(|| format!("the member {name} is missing (and so is {p})")),
                }
            }
            None => self
                .zip
                .find(&name)
                .ok_or_else(|| format!("the member {name} is missing")),
        };
        let m = match member {
            Ok(m) => m,
            Err(_) if e.optional => return Ok(None),
            Err(why) => return Err(Error::from(ErrorKind::NotFound(why))),
        };
        let text = read_text(self.src.data(), m, self.limits)
            .map_err(|err| err.in_entry(m.name.as_str()))?;
        if !one_of.is_empty() && !one_of.contains(&text.as_str()) {
            let listed: Vec<String> = one_of.iter().map(|v| format!("{v:?}")).collect();
            return Err(Error::from(ErrorKind::Invalid(format!(
                "check failed: {} in [{}]",
                e.name,
                listed.join(", ")
            )))
            .in_entry(name));
        }
        Ok(Some(text))
    }

    /// The contents of the text entries, by the entries' positions (`None` for other
    /// entries and for optional text entries the archive lacks).
    pub fn texts(&self) -> &[Option<String>] {
        &self.texts
    }

    /// The member of entry `entry` (the first entry's, or the one its captures name).
    fn member(&self, entry: &Entry) -> Result<Option<&ZipMember>> {
        if std::ptr::eq(entry, &self.entries[0]) {
            return Ok(self.zip.members().get(self.first));
        }
        let name = self.captures.format_all(entry.pattern)?;
        match self.zip.find(&name) {
            Some(m) => Ok(Some(m)),
            None if entry.optional => Ok(None),
            None => Err(Error::from(ErrorKind::NotFound(format!(
                "the member {name} is missing"
            )))),
        }
    }
}

impl Storages for Archive<'_> {
    fn metadata(&self, entry: usize) -> Result<Option<Metadata<'_>>> {
        let Some(m) = self.member(&self.entries[entry])? else {
            return Ok(None);
        };
        let bytes = member_bytes(self.src.data(), m, self.limits)
            .map_err(|e| e.in_entry(m.name.as_str()))?;
        let offset = match m.compression {
            Compression::Stored => Some(m.data_offset(self.src.data())?),
            _ => None,
        };
        Ok(Some(Metadata {
            bytes,
            entry: m.name.as_str(),
            offset,
        }))
    }

    fn locate(&self, storage: &StorageRef<'_>, tensor: &str) -> Result<Located<'_>> {
        let e = &self.entries[storage.entry];
        let EntryKind::Storages { capture } = e.kind else {
            return Err(Error::from(ErrorKind::Invalid(format!(
                "{}: the `{}` entry holds no storages",
                self.format, e.name
            ))));
        };
        let key = &*storage.key;
        let found = match &self.affixes[storage.entry] {
            Some((before, after)) if !key.is_empty() => self.zip.find_joined([before, key, after]),
            _ => None,
        };
        let m = match found {
            Some(m) => m,
            None => {
                let name = self.captures.format(e.pattern, capture, key)?;
                self.zip.find(&name).ok_or_else(|| {
                    Error::from(ErrorKind::NotFound(format!(
                        "the member {name}, of the storage {key:?} the stored object names, \
                         is missing"
                    )))
                })?
            }
        };
        let skip = storage.skip;
        let len = m.size.checked_sub(skip).ok_or_else(|| {
            Error::from(ErrorKind::SizeMismatch(format!(
                "tensor '{tensor}' starts at byte {skip} of its storage, which holds {}",
                m.size
            )))
        })?;
        Ok(Located {
            location: location(&self.zip, m, skip, len),
            entry: Some(m.name.as_str()),
        })
    }

    fn in_file(&self, e: Error) -> Error {
        match self.src.path() {
            Some(p) => e.in_file(p),
            None => e,
        }
    }
}

/// A streaming writer of an archive as a format's entries describe it: storages written
/// as they come ([`ArchiveWriter::storage`]), then the first entry's member and the
/// text entries that have a written content ([`ArchiveWriter::finish`]).
pub struct ArchiveWriter<W: Write + Seek> {
    zip: ZipWriter<W>,
    format: &'static str,
    entries: &'static [Entry],
    name: &'static str,
    captures: Captures,
    compression: Compression,
    texts: Vec<Option<String>>,
}

impl<W: Write + Seek> ArchiveWriter<W> {
    /// A writer into `w` of an archive whose first member is named `name` (its captures
    /// name the other members); storages are compressed as `options` ask, by default with
    /// the first method of the entry `storages` lists. Fails when `name` does not match
    /// the first entry's pattern, or the compression asked for is not one of that
    /// entry's.
    pub fn new(
        w: W,
        options: &WriteOptions,
        format: &'static str,
        entries: &'static [Entry],
        name: &'static str,
        storages: usize,
    ) -> Result<Self> {
        let methods = entries[storages].methods;
        let compression = options
            .compression
            .unwrap_or(methods.first().copied().unwrap_or(Compression::Stored));
        if !methods.is_empty() && !methods.contains(&compression) {
            return Err(Error::from(ErrorKind::Unsupported(format!(
                "{format} members may not be compressed with {compression:?}"
            ))));
        }
        let pattern = Pattern::new(entries[0].pattern)?;
        let values = pattern.matches(name).ok_or_else(|| {
            Error::from(ErrorKind::Invalid(format!(
                "{format}: `write_name` {name:?} does not match its entry's pattern"
            )))
        })?;
        let texts = entries
            .iter()
            .map(|e| match e.kind {
                EntryKind::Text { written, .. } => written.map(String::from),
                _ => None,
            })
            .collect();
        Ok(ArchiveWriter {
            zip: ZipWriter::new(w),
            format,
            entries,
            name,
            captures: Captures::new(&pattern, values),
            compression,
            texts,
        })
    }

    /// The contents the text entries are written with, by the entries' positions.
    pub fn texts(&self) -> &[Option<String>] {
        &self.texts
    }

    /// Writes storage `key` of the entry `entry`: the `nbytes` bytes of `data`, in the
    /// byte order of `meta`, swapped to `order` when it differs.
    pub fn storage(
        &mut self,
        entry: usize,
        key: &str,
        meta: &TensorMeta,
        data: Payload<'_>,
        nbytes: u64,
        order: ByteOrder,
    ) -> Result<()> {
        let e = &self.entries[entry];
        let EntryKind::Storages { capture } = e.kind else {
            return Err(Error::from(ErrorKind::Invalid(format!(
                "{}: the `{}` entry holds no storages",
                self.format, e.name
            ))));
        };
        let name = self.captures.format(e.pattern, capture, key)?;
        self.zip.start_member(&name, self.compression, e.align)?;
        let written = if meta.byte_order == order {
            data.write_to(&mut self.zip, nbytes, "data")
        } else {
            let unit = meta.dtype.swap_unit().unwrap_or(1);
            data.write_swapped_to(&mut self.zip, nbytes, unit, "data")
        };
        written.map_err(|e| e.in_entry(name.as_str()))
    }

    /// Writes the first entry's member with `content`, then each text entry that has a
    /// written content, then the central directory; returns the output.
    pub fn finish(mut self, content: &[u8]) -> Result<W> {
        let first = &self.entries[0];
        let method = first
            .methods
            .first()
            .copied()
            .unwrap_or(Compression::Stored);
        self.member(self.name, method, first.align, content)?;
        for (e, text) in self.entries.iter().zip(std::mem::take(&mut self.texts)) {
            if let Some(text) = text {
                let name = self.captures.format_all(e.pattern)?;
                let method = e.methods.first().copied().unwrap_or(Compression::Stored);
                self.member(&name, method, e.align, text.as_bytes())?;
            }
        }
        self.zip.finish()
    }

    fn member(
        &mut self,
        name: &str,
        method: Compression,
        align: u16,
        content: &[u8],
    ) -> Result<()> {
        self.zip.start_member(name, method, align)?;
        self.zip
            .write_all(content)
            .map_err(|e| Error::from(e).in_entry(name))
    }
}

/// A member-name pattern as a user reads it: each capture (`{prefix}`, a name of the
/// schema) shown as `*`, so `{prefix}/data.pkl` reads `*/data.pkl`.
fn shown(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len());
    let mut rest = pattern;
    while let Some(open) = rest.find('{') {
        match rest[open..].find('}') {
            Some(close) => {
                out.push_str(&rest[..open]);
                out.push('*');
                rest = &rest[open + close + 1..];
            }
            None => break,
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod shown_tests {
    #[test]
    fn captures_read_as_stars() {
        assert_eq!(super::shown("{prefix}/data.pkl"), "*/data.pkl");
        assert_eq!(super::shown("{prefix}/data/{key}"), "*/data/*");
        assert_eq!(super::shown("plain"), "plain");
        assert_eq!(super::shown("odd{"), "odd{");
    }
}
