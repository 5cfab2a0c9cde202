//! The one rule of folder outputs: what a folder save may replace at its destination,
//! what it keeps there, and how the old folder is taken apart once the new one is in
//! place ([`FolderKind`], [`AtomicDir::commit_folder`]).

use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};

use super::{fresh_sibling, io_at, parent_of, sync_dir, AtomicDir, DirPolicy};
use crate::error::{escape_name, Error, ErrorKind, Location, Result};

/// What a folder format writes in its folder: the rule by which every folder save
/// (LMDB and LevelDB databases, torch.distributed checkpoints, sharded checkpoints,
/// Caffe2 checkpoints) treats what it finds at its destination when it commits
/// ([`AtomicDir::commit_folder`]):
///
/// - nothing there: the folder is created (and a folder made there meanwhile is not
///   replaced);
/// - a folder: its entries named as the format's files ([`FolderKind::owns`]) must be
///   regular files that, together, are a checkpoint of the format ([`FolderKind::check`]:
///   an empty `.metadata` or `data.mdb` is not one); they are replaced. Every other
///   entry is kept: carried into the new folder by hard links (folders made anew with
///   their permissions) before the new folder takes the old one's place, so that the
///   files are the same files, never copies, and never absent. A
///   folder holding other entries and no checkpoint of the format is written into only
///   when the format [`FolderKind::adopts`] folders (a sharded checkpoint goes into a
///   model's folder beside its `config.json`);
/// - anything else is refused before anything is written, naming what is in the way:
///   files named as the format's that are no checkpoint of it (or not regular files),
///   other entries beside no checkpoint of a format that does not adopt folders, entries
///   that cannot be kept by hard links (a FIFO, a socket, a device, a mount point), and a
///   destination that is not a folder (a symbolic link is not followed).
pub struct FolderKind<'a> {
    /// What the format's folder holds, with its article, for messages ("an LMDB
    /// environment").
    pub what: &'a str,
    /// Whether a name at the folder's top level is one of the files the format writes.
    pub owns: &'a dyn Fn(&str) -> bool,
    /// Checks that the folder's files of the format are a checkpoint of it (called only
    /// when it holds some): the error says why not.
    pub check: &'a dyn Fn(&Path) -> Result<()>,
    /// Whether a folder holding no checkpoint of the format, but other entries, may be
    /// written into (they are carried over); else it is refused.
    pub adopts: bool,
}

/// At most this many names are listed in a refusal.
const LISTED: usize = 8;

/// `names` (escaped), the first [`LISTED`] of them and how many more.
fn list(names: &[String]) -> String {
    let mut s: Vec<String> = names
        .iter()
        .take(LISTED)
        .map(|n| escape_name(n).into_owned())
        .collect();
    if names.len() > LISTED {
        s.push(format!("and {} more", names.len() - LISTED));
    }
    s.join(", ")
}

/// The refusal of a save to `dest`, saying `why`.
fn refuse(dest: &Path, why: String) -> Error {
    Error::new(
        ErrorKind::Invalid(format!(
            "{why}; a save replaces only the files its format writes and keeps all others \
             (move what is in the way, or choose another path)"
        )),
        Location::file(dest),
    )
}

/// A name of the folder as text (names that are not UTF-8 shown with replacement
/// characters).
fn text(name: &std::ffi::OsStr) -> String {
    name.to_string_lossy().into_owned()
}

impl FolderKind<'_> {
    /// What a save under this rule does with `dest`: `None` when nothing is there (it is
    /// created); else the entries to carry into the new folder; or the refusal, naming
    /// what is in the way.
    pub(super) fn examine(&self, dest: &Path) -> Result<Option<Vec<OsString>>> {
        let meta = match std::fs::symlink_metadata(dest) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_at(e, dest)),
        };
        if !meta.is_dir() {
            return Err(refuse(
                dest,
                format!(
                    "the output exists and is not a folder ({} is written into a folder; a \
                     symbolic link is not followed)",
                    self.what
                ),
            ));
        }
        let (mut owned, mut odd, mut carry) = (Vec::new(), Vec::new(), Vec::new());
        for e in std::fs::read_dir(dest).map_err(|e| io_at(e, dest))? {
            let e = e.map_err(|e| io_at(e, dest))?;
            let name = e.file_name();
            if !name.to_str().is_some_and(|n| (self.owns)(n)) {
                carry.push(name);
                continue;
            }
            let kind = e.file_type().map_err(|e| io_at(e, dest))?;
            if kind.is_file() {
                owned.push(text(&name));
            } else {
                odd.push(text(&name));
            }
        }
        owned.sort();
        odd.sort();
        let plural = |n: &[String]| if n.len() == 1 { "is" } else { "are" };
        if !odd.is_empty() {
            return Err(refuse(
                dest,
                format!(
                    "{} in the output folder {} in the way: named as files of {}, but not \
                     regular files",
                    list(&odd),
                    plural(&odd),
                    self.what
                ),
            ));
        }
        if !owned.is_empty() {
            if let Err(e) = (self.check)(dest) {
                return Err(refuse(
                    dest,
                    format!(
                        "{} in the output folder {} in the way: named as files of {}, but not {} \
                         ({e})",
                        list(&owned),
                        plural(&owned),
                        self.what,
                        self.what
                    ),
                ));
            }
        } else if !carry.is_empty() && !self.adopts {
            let mut names: Vec<String> = carry.iter().map(|n| text(n)).collect();
            names.sort();
            return Err(refuse(
                dest,
                format!(
                    "the output folder exists and does not hold {}: {} {} in the way",
                    self.what,
                    list(&names),
                    plural(&names)
                ),
            ));
        }
        let dev = device(&meta);
        for name in &carry {
            keepable(&dest.join(name), dev).map_err(|why| refuse(dest, why))?;
        }
        Ok(Some(carry))
    }
}

/// The device a file is on (unix; elsewhere 0, all alike).
fn device(meta: &std::fs::Metadata) -> u64 {
    #[cfg(unix)]
    {
        std::os::unix::fs::MetadataExt::dev(meta)
    }
    #[cfg(not(unix))]
    {
        let _ = meta;
        0
    }
}

/// Checks that `path` and what it holds can be carried into a new folder by hard links
/// on the device `dev`: regular files, folders and symbolic links of that device.
fn keepable(path: &Path, dev: u64) -> std::result::Result<(), String> {
    let shown = || escape_name(&path.to_string_lossy()).into_owned();
    let meta = std::fs::symlink_metadata(path).map_err(|e| format!("{}: {e}", shown()))?;
    let kind = meta.file_type();
    if !(kind.is_file() || kind.is_dir() || kind.is_symlink()) {
        return Err(format!(
            "{} is neither a file, a folder nor a symbolic link: it cannot be kept in the new \
             folder",
            shown()
        ));
    }
    if !kind.is_symlink() && device(&meta) != dev {
        return Err(format!(
            "{} is on another file system (a mount point): it cannot be kept in the new \
             folder by a hard link",
            shown()
        ));
    }
    if kind.is_dir() {
        for e in std::fs::read_dir(path).map_err(|e| format!("{}: {e}", shown()))? {
            let e = e.map_err(|e| format!("{}: {e}", shown()))?;
            keepable(&e.path(), dev)?;
        }
    }
    Ok(())
}

/// Makes at `to` what `from` is, by hard links: a folder made anew, filled so and synced
/// (its entries are what must survive a crash: the files' data is the same), then given
/// `from`'s permissions; a file or a symbolic link linked (a symbolic link copied off
/// Linux).
fn carry(from: &Path, to: &Path) -> io::Result<()> {
    let meta = std::fs::symlink_metadata(from)?;
    let kind = meta.file_type();
    if kind.is_dir() {
        std::fs::create_dir(to)?;
        for e in std::fs::read_dir(from)? {
            let e = e?;
            carry(&e.path(), &to.join(e.file_name()))?;
        }
        super::fault::check(super::fault::Op::Sync)?;
        sync_dir(to)?;
        std::fs::set_permissions(to, meta.permissions())
    } else if kind.is_symlink() {
        // Linux links the symbolic link itself (`linkat` without following it).
        #[cfg(target_os = "linux")]
        return std::fs::hard_link(from, to);
        #[cfg(all(unix, not(target_os = "linux")))]
        return std::os::unix::fs::symlink(std::fs::read_link(from)?, to);
        #[cfg(not(unix))]
        return std::fs::copy(from, to).map(|_| ());
    } else if kind.is_file() {
        std::fs::hard_link(from, to)
    } else {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!(
                "{} is neither a file, a folder nor a symbolic link: it cannot be kept in the \
                 new folder",
                from.display()
            ),
        ))
    }
}

/// Whether `a` and `b` are one file (same device and inode on unix; elsewhere never,
/// so that nothing is taken for carried).
fn same_inode(a: &std::fs::Metadata, b: &std::fs::Metadata) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        a.dev() == b.dev() && a.ino() == b.ino()
    }
    #[cfg(not(unix))]
    {
        let _ = (a, b);
        false
    }
}

/// Takes apart the old folder `old` once the new folder `new` is in its place: removes
/// the format's files (`owns`, at the top level only) and what `new` holds of `old`
/// already (the same files, linked; equal symbolic links), and moves into `new` what was
/// added to `old` after the carry-over (or replaced there: the newer file wins). Returns
/// whether `old` is gone; what could not be moved stays in it. Best effort.
fn settle(old: &Path, new: &Path, owns: Option<&dyn Fn(&str) -> bool>) -> bool {
    let Ok(entries) = std::fs::read_dir(old) else {
        return false;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let (o, n) = (e.path(), new.join(&name));
        let Ok(kind) = e.file_type() else { continue };
        if kind.is_file() && owns.is_some_and(|f| name.to_str().is_some_and(f)) {
            let _ = std::fs::remove_file(&o);
            continue;
        }
        let there = match std::fs::symlink_metadata(&n) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let _ = std::fs::rename(&o, &n);
                continue;
            }
            Err(_) => continue,
        };
        if kind.is_dir() && there.is_dir() {
            if settle(&o, &n, None) {
                let _ = std::fs::remove_dir(&o);
            }
        } else if kind.is_file() && there.is_file() {
            match std::fs::symlink_metadata(&o) {
                Ok(m) if same_inode(&m, &there) => {
                    let _ = std::fs::remove_file(&o);
                }
                _ => {
                    let _ = std::fs::rename(&o, &n);
                }
            }
        } else if kind.is_symlink() && there.file_type().is_symlink() {
            let same = std::fs::symlink_metadata(&o).is_ok_and(|m| same_inode(&m, &there));
            if same || std::fs::read_link(&o).ok() == std::fs::read_link(&n).ok() {
                let _ = std::fs::remove_file(&o);
            } else {
                let _ = std::fs::rename(&o, &n);
            }
        }
    }
    std::fs::remove_dir(old).is_ok()
}

/// A visible name beside `dest` for an old folder that could not be emptied,
/// `{name}.kept-{pid}-{random}`, where nothing is now: no save removes it.
fn kept_sibling(dest: &Path) -> Result<PathBuf> {
    let hidden = fresh_sibling(dest, ".kept")?;
    let name = hidden
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // `.{name}.{pid}.{random}.kept` → `{name}.kept-{pid}-{random}`.
    let inner = name
        .strip_prefix('.')
        .and_then(|n| n.strip_suffix(".kept"))
        .unwrap_or(&name);
    let (base, random) = inner.rsplit_once('.').unwrap_or((inner, "0"));
    let (base, pid) = base.rsplit_once('.').unwrap_or((base, "0"));
    Ok(parent_of(dest).join(format!("{base}.kept-{pid}-{random}")))
}

impl AtomicDir {
    /// Checks the destination against `kind`'s rule ([`FolderKind`]) without changing
    /// anything: an error naming what is in the way when the save could not commit.
    /// Called before writing, so that a save fails before its work; the commit checks
    /// again.
    pub fn check(&self, kind: &FolderKind) -> Result<()> {
        kind.examine(&self.dest).map(|_| ())
    }

    /// Commits the folder at its destination under `kind`'s rule ([`FolderKind`]): a
    /// missing destination is created ([`DirPolicy::CreateNew`]); an existing folder is
    /// checked again, every entry of it that is not one of the format's files carried
    /// into the new folder by hard links, and the two swapped in one step (as
    /// [`DirPolicy::Replace`]); then the old folder is taken apart: the format's files and
    /// the links already in the new folder removed, anything added to the old folder
    /// between the carry-over and the swap moved into the new one. Should something
    /// still be left in it (an entry that changed kind meanwhile), the old folder is
    /// kept beside the destination as `{name}.kept-{pid}-{random}`.
    ///
    /// A kill at any point leaves the old folder, whole, or the new one with every kept
    /// entry in it (and perhaps the old one under its temporary name, holding only what
    /// the new one holds too, or what the format wrote).
    pub fn commit_folder(&mut self, kind: &FolderKind) -> Result<()> {
        self.commit_folder_with(kind, true)
    }

    /// [`AtomicDir::commit_folder`], with `renameat2` used only when `native`.
    pub(super) fn commit_folder_with(&mut self, kind: &FolderKind, native: bool) -> Result<()> {
        let Some(carried) = kind.examine(&self.dest)? else {
            return self.commit_with(DirPolicy::CreateNew, native);
        };
        let dest = self.dest.clone();
        let tmp = self.path().to_path_buf();
        let at = |e| io_at(e, &dest);
        // The format's files synced first: the files carried are the user's, synced
        // or not as the user left them (and perhaps not readable), their entries synced.
        self.sync()?;
        for name in &carried {
            carry(&dest.join(name), &tmp.join(name)).map_err(at)?;
        }
        super::fault::check(super::fault::Op::Sync).map_err(|e| io_at(e, &tmp))?;
        sync_dir(&tmp).map_err(|e| io_at(e, &tmp))?;
        let perms = std::fs::metadata(&dest).map_err(at)?.permissions();
        std::fs::set_permissions(&tmp, perms).map_err(|e| io_at(e, &tmp))?;
        let Some(old) = self.swap(DirPolicy::Replace, native)? else {
            return Ok(());
        };
        if !settle(&old, &dest, Some(kind.owns)) {
            if let Ok(kept) = kept_sibling(&dest) {
                let _ = std::fs::rename(&old, &kept);
            }
        }
        let _ = sync_dir(&dest);
        let _ = sync_dir(parent_of(&dest));
        Ok(())
    }
}

/// Removes `path` when it is a folder holding only files `kind` owns, and they are a
/// checkpoint of it (or nothing); returns whether it did. It is renamed aside first, so
/// that a kill leaves no partial folder under its name, and removed file by file: should
/// anything else appear in it meanwhile, it is renamed back. A folder holding anything
/// else is left as it is: what removes an old checkpoint removes nothing it did not
/// write.
pub fn remove_folder_of(path: &Path, kind: &FolderKind) -> Result<bool> {
    match kind.examine(path) {
        Ok(Some(carry)) if carry.is_empty() => {}
        _ => return Ok(false),
    }
    let mut aside = AtomicDir::new(path)?;
    let Some(tmp) = aside.tmp.take() else {
        return Ok(false);
    };
    std::fs::rename(path, &tmp).map_err(|e| io_at(e, path))?;
    let owned = |e: &std::fs::DirEntry| {
        e.file_type().is_ok_and(|k| k.is_file())
            && e.file_name().to_str().is_some_and(|n| (kind.owns)(n))
    };
    if let Ok(entries) = std::fs::read_dir(&tmp) {
        for e in entries.flatten().filter(owned) {
            let _ = std::fs::remove_file(e.path());
        }
    }
    if std::fs::remove_dir(&tmp).is_err() {
        // Something that is not the format's came in meanwhile: put the folder back.
        if std::fs::rename(&tmp, path).is_err() {
            if let Ok(kept) = kept_sibling(path) {
                let _ = std::fs::rename(&tmp, kept);
            }
        }
        return Ok(false);
    }
    let _ = sync_dir(parent_of(path));
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::super::tests::names;
    use super::*;

    /// The format of these tests: `ckpt` (which must read `ok`) and `part.N`.
    fn owns(name: &str) -> bool {
        name == "ckpt" || name.starts_with("part.")
    }

    fn check(dir: &Path) -> Result<()> {
        match std::fs::read(dir.join("ckpt")) {
            Ok(b) if b == b"ok" => Ok(()),
            _ => Err(Error::new(
                ErrorKind::Invalid("ckpt is not ok".into()),
                Location::file(dir),
            )),
        }
    }

    fn kind(adopts: bool) -> FolderKind<'static> {
        FolderKind {
            what: "a test checkpoint",
            owns: &owns,
            check: &check,
            adopts,
        }
    }

    /// Every file under `dir` (relative path, content; symbolic links as `-> target`).
    fn tree(dir: &Path) -> Vec<(String, Vec<u8>)> {
        fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, Vec<u8>)>) {
            for e in std::fs::read_dir(dir).unwrap() {
                let e = e.unwrap();
                let rel = e.path().strip_prefix(root).unwrap().display().to_string();
                let kind = e.file_type().unwrap();
                if kind.is_dir() {
                    out.push((format!("{rel}/"), Vec::new()));
                    walk(root, &e.path(), out);
                } else if kind.is_symlink() {
                    let to = std::fs::read_link(e.path()).unwrap();
                    out.push((rel, format!("-> {}", to.display()).into_bytes()));
                } else if kind.is_file() {
                    out.push((rel, std::fs::read(e.path()).unwrap()));
                } else {
                    out.push((rel, b"(special)".to_vec()));
                }
            }
        }
        let mut out = Vec::new();
        walk(dir, dir, &mut out);
        out.sort();
        out
    }

    /// A new folder for `dest` holding a checkpoint `gen`.
    fn written(dest: &Path, gen: &str) -> AtomicDir {
        let d = AtomicDir::new(dest).unwrap();
        std::fs::create_dir(d.path()).unwrap();
        std::fs::write(d.path().join("ckpt"), b"ok").unwrap();
        std::fs::write(d.path().join("part.0"), gen).unwrap();
        d
    }

    #[cfg(unix)]
    fn ino(p: &Path) -> u64 {
        std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(p).unwrap())
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn files_beside_a_checkpoint_are_kept_as_the_same_files() {
        for native in [true, false] {
            let dir = tempfile::tempdir().unwrap();
            let dest = dir.path().join("out");
            written(&dest, "1")
                .commit_folder_with(&kind(false), native)
                .unwrap();
            std::fs::write(dest.join("part.7"), b"stale").unwrap();
            std::fs::write(dest.join("README.md"), b"mine").unwrap();
            std::fs::create_dir_all(dest.join("src/deep")).unwrap();
            std::fs::write(dest.join("src/deep/train.py"), b"print(1)").unwrap();
            std::os::unix::fs::symlink("src/deep", dest.join("link")).unwrap();
            let (readme, train) = (
                ino(&dest.join("README.md")),
                ino(&dest.join("src/deep/train.py")),
            );
            let link = |p: &Path| {
                std::os::unix::fs::MetadataExt::ino(&std::fs::symlink_metadata(p).unwrap())
            };
            let link_ino = link(&dest.join("link"));
            let mut d = written(&dest, "2");
            d.check(&kind(false)).unwrap();
            d.commit_folder_with(&kind(false), native).unwrap();
            let want: Vec<(String, Vec<u8>)> = [
                ("README.md", &b"mine"[..]),
                ("ckpt", b"ok"),
                ("link", b"-> src/deep"),
                ("part.0", b"2"),
                ("src/", b""),
                ("src/deep/", b""),
                ("src/deep/train.py", b"print(1)"),
            ]
            .iter()
            .map(|(n, b)| (n.to_string(), b.to_vec()))
            .collect();
            assert_eq!(tree(&dest), want, "native {native}");
            assert_eq!(ino(&dest.join("README.md")), readme);
            assert_eq!(ino(&dest.join("src/deep/train.py")), train);
            assert_eq!(link(&dest.join("link")), link_ino);
            assert_eq!(names(dir.path()), ["out"], "native {native}");
        }
    }

    #[cfg(unix)]
    #[test]
    fn what_is_in_the_way_is_refused_and_left_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        type Make = Box<dyn Fn(&Path)>;
        let cases: Vec<(&str, Make, &str)> = vec![
            (
                "no checkpoint",
                Box::new(|p| {
                    std::fs::create_dir(p).unwrap();
                    std::fs::write(p.join("README.md"), b"mine").unwrap();
                }),
                "does not hold a test checkpoint: README.md is in the way",
            ),
            (
                "an empty ckpt",
                Box::new(|p| {
                    std::fs::create_dir(p).unwrap();
                    std::fs::write(p.join("ckpt"), b"").unwrap();
                    std::fs::write(p.join("README.md"), b"mine").unwrap();
                }),
                "ckpt in the output folder is in the way: named as files of a test checkpoint, but not a test checkpoint",
            ),
            (
                "a folder named as a file of the format",
                Box::new(|p| {
                    std::fs::create_dir_all(p.join("part.1")).unwrap();
                    std::fs::write(p.join("part.1/notes"), b"mine").unwrap();
                }),
                "not regular files",
            ),
            (
                "a file",
                Box::new(|p| std::fs::write(p, b"mine").unwrap()),
                "is not a folder",
            ),
            (
                "a symbolic link to a checkpoint",
                Box::new(|p| {
                    let real = p.with_extension("real");
                    std::fs::create_dir(&real).unwrap();
                    std::fs::write(real.join("ckpt"), b"ok").unwrap();
                    std::os::unix::fs::symlink(&real, p).unwrap();
                }),
                "is not a folder",
            ),
            (
                "a FIFO beside a checkpoint",
                Box::new(|p| {
                    std::fs::create_dir_all(p.join("sub")).unwrap();
                    std::fs::write(p.join("ckpt"), b"ok").unwrap();
                    let fifo = std::ffi::CString::new(
                        p.join("sub/pipe").as_os_str().as_encoded_bytes(),
                    )
                    .unwrap();
                    // SAFETY: a NUL-terminated path.
                    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
                }),
                "neither a file, a folder nor a symbolic link",
            ),
        ];
        for (i, (what, make, says)) in cases.iter().enumerate() {
            let dest = d.join(format!("out{i}"));
            make(&dest);
            let before = if dest.is_dir() {
                tree(&dest)
            } else {
                Vec::new()
            };
            let mut w = written(&dest, "new");
            let early = w.check(&kind(false)).unwrap_err().to_string();
            let e = w.commit_folder(&kind(false)).unwrap_err().to_string();
            assert_eq!(early, e, "{what}");
            assert!(e.contains(says) && e.contains("in the way"), "{what}: {e}");
            drop(w);
            if dest.is_dir() {
                assert_eq!(tree(&dest), before, "{what}");
            }
        }
        // Nothing left but what was made.
        assert!(
            names(d).iter().all(|n| !n.starts_with('.')),
            "{:?}",
            names(d)
        );
        // A folder of no checkpoint is adopted where the format says so.
        let dest = d.join("out0");
        written(&dest, "new").commit_folder(&kind(true)).unwrap();
        assert_eq!(names(&dest), ["README.md", "ckpt", "part.0"]);
    }

    #[test]
    fn absent_and_empty_destinations_are_written() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("new");
        written(&dest, "1").commit_folder(&kind(false)).unwrap();
        assert_eq!(names(&dest), ["ckpt", "part.0"]);
        let empty = dir.path().join("empty");
        std::fs::create_dir(&empty).unwrap();
        written(&empty, "1").commit_folder(&kind(false)).unwrap();
        assert_eq!(names(&empty), ["ckpt", "part.0"]);
        assert_eq!(names(dir.path()), ["empty", "new"]);
    }

    #[cfg(unix)]
    #[test]
    fn what_came_into_the_old_folder_after_the_carry_over_is_moved_to_the_new() {
        let dir = tempfile::tempdir().unwrap();
        let (old, new) = (dir.path().join("old"), dir.path().join("new"));
        std::fs::create_dir_all(old.join("src")).unwrap();
        std::fs::create_dir_all(new.join("src")).unwrap();
        std::fs::write(old.join("ckpt"), b"old").unwrap();
        std::fs::write(new.join("ckpt"), b"ok").unwrap();
        // Carried: the same files.
        std::fs::write(old.join("kept"), b"k").unwrap();
        std::fs::hard_link(old.join("kept"), new.join("kept")).unwrap();
        std::fs::write(old.join("src/a.py"), b"a").unwrap();
        std::fs::hard_link(old.join("src/a.py"), new.join("src/a.py")).unwrap();
        // Replaced in the old folder after the carry-over, and new there.
        std::fs::write(old.join("edited"), b"v2").unwrap();
        std::fs::write(new.join("edited"), b"v1").unwrap();
        std::fs::write(old.join("src/late.py"), b"late").unwrap();
        assert!(settle(&old, &new, Some(&owns)));
        assert!(!old.exists());
        let want: Vec<(String, Vec<u8>)> = [
            ("ckpt", &b"ok"[..]),
            ("edited", b"v2"),
            ("kept", b"k"),
            ("src/", b""),
            ("src/a.py", b"a"),
            ("src/late.py", b"late"),
        ]
        .iter()
        .map(|(n, b)| (n.to_string(), b.to_vec()))
        .collect();
        assert_eq!(tree(&new), want);
    }

    #[test]
    fn an_old_folder_that_cannot_be_emptied_is_kept_under_a_visible_name() {
        let dir = tempfile::tempdir().unwrap();
        let (old, new) = (dir.path().join("old"), dir.path().join("new"));
        // An entry that became a folder in the old one where the new one holds a file.
        std::fs::create_dir_all(old.join("x")).unwrap();
        std::fs::write(old.join("x/mine"), b"mine").unwrap();
        std::fs::create_dir(&new).unwrap();
        std::fs::write(new.join("x"), b"file").unwrap();
        assert!(!settle(&old, &new, Some(&owns)));
        assert_eq!(std::fs::read(old.join("x/mine")).unwrap(), b"mine");
        let kept = kept_sibling(&dir.path().join("out")).unwrap();
        let name = kept.file_name().unwrap().to_string_lossy().into_owned();
        let tail = name.strip_prefix("out.kept-").expect(&name);
        let (pid, random) = tail.split_once('-').expect(&name);
        assert_eq!(pid, std::process::id().to_string());
        assert_eq!(random.len(), 16, "{name}");
        assert_eq!(kept.parent(), Some(dir.path()));
        assert!(super::super::temp_name_parts(&name).is_none());
    }

    #[test]
    fn old_checkpoints_are_removed_only_when_they_hold_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let pure = dir.path().join("pure");
        written(&pure, "1").commit_folder(&kind(false)).unwrap();
        assert!(remove_folder_of(&pure, &kind(false)).unwrap());
        assert!(!pure.exists());
        let mixed = dir.path().join("mixed");
        written(&mixed, "1").commit_folder(&kind(false)).unwrap();
        std::fs::write(mixed.join("notes.txt"), b"mine").unwrap();
        assert!(!remove_folder_of(&mixed, &kind(false)).unwrap());
        assert_eq!(names(&mixed), ["ckpt", "notes.txt", "part.0"]);
        assert_eq!(names(dir.path()), ["mixed"]);
    }
}
