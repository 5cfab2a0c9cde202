//! Atomic output: files ([`AtomicFile`]) and folders ([`AtomicDir`]) written under a
//! temporary name next to the destination and renamed into place only when complete;
//! and [`Spool`], tensor bytes held on disk while the header before them is built.

use std::fs::File;
use std::io::{self, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::error::{Error, ErrorKind, Location, Result};

mod folder;
pub use folder::{remove_folder_of, FolderKind};

/// A file written atomically: the bytes go to a temporary file in the destination's
/// directory, `.{name}.{pid}.{random}.tmp`, and [`AtomicFile::commit`] flushes, syncs
/// and renames it over the destination. Dropped without a commit (an error, a panic, an
/// interrupted save), the temporary file is removed and any existing destination is left
/// as it was. A temporary file that a killed save left behind (its process no longer
/// running) is removed by the next save to the same destination ([`remove_stale`]).
///
/// While it is written, the data is handed to the disk every [`WRITEBACK_STEP`] bytes
/// (on Linux, `sync_file_range` starts the writeback without waiting for it), so that the
/// final sync finds little left to write: the disk works while the rest is produced.
#[derive(Debug)]
pub struct AtomicFile {
    file: File,
    /// The temporary file's path; `None` once committed (or persisted).
    tmp: Option<PathBuf>,
    dest: PathBuf,
    /// Bytes written since writeback was last started.
    unsynced: u64,
}

/// How many bytes are written between two starts of writeback.
pub const WRITEBACK_STEP: u64 = 32 << 20;

fn io_at(e: io::Error, path: &Path) -> Error {
    Error::new(ErrorKind::Io(e), Location::file(path))
}

impl AtomicFile {
    /// Starts writing `dest` (created or replaced on commit). The temporary file has the
    /// permissions a new file would get (`0o666` less the umask on unix), or those of the
    /// existing destination. Temporary files and folders of earlier saves to `dest` whose
    /// process is gone are removed first ([`remove_stale`]).
    pub fn create(dest: impl AsRef<Path>) -> Result<Self> {
        let dest = dest.as_ref().to_path_buf();
        remove_stale(&dest);
        let (tmp, file) = loop {
            let tmp = fresh_sibling(&dest, ".tmp")?;
            let mut open = std::fs::OpenOptions::new();
            open.read(true).write(true).create_new(true);
            #[cfg(unix)]
            {
                use std::os::unix::fs::OpenOptionsExt;
                open.mode(0o666);
            }
            match open.open(&tmp) {
                Ok(f) => break (tmp, f),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(io_at(e, &dest)),
            }
        };
        if let Ok(meta) = std::fs::metadata(&dest) {
            // Best effort: keep the replaced file's permissions.
            let _ = file.set_permissions(meta.permissions());
        }
        Ok(AtomicFile {
            file,
            tmp: Some(tmp),
            dest,
            unsynced: 0,
        })
    }

    /// The destination path.
    pub fn dest(&self) -> &Path {
        &self.dest
    }

    /// The temporary file's path.
    pub fn temp_path(&self) -> &Path {
        self.tmp.as_deref().unwrap_or(&self.dest)
    }

    /// A tag unique to this save, `{pid}-{random}` (from the temporary file's name): the
    /// names of files written beside the destination for this save (external data) hold
    /// it, so that they collide with nothing, and so that [`remove_stale`] can tell the
    /// ones of a save killed before its commit.
    pub fn save_tag(&self) -> String {
        let name = self
            .temp_path()
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        match parse_temp(&name) {
            Some(t) => format!("{}-{}", t.pid, t.random),
            None => format!("{}-0", std::process::id()),
        }
    }

    /// The temporary file, for direct access.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// Flushes and syncs the data, renames the temporary file over the destination and
    /// (on unix) syncs the directory so the rename survives a crash.
    pub fn commit(self) -> Result<()> {
        self.commit_as(false)
    }

    /// [`AtomicFile::commit`] that refuses to replace anything: an existing destination
    /// is an error naming it, and is left as it was (the check and the rename are one
    /// step on Linux, `renameat2` with `RENAME_NOREPLACE`; elsewhere a hard link).
    pub fn commit_new(self) -> Result<()> {
        self.commit_as(true)
    }

    fn commit_as(mut self, new: bool) -> Result<()> {
        let dest = self.dest.clone();
        let tmp = self.tmp.clone().unwrap_or_default();
        self.file.flush().map_err(|e| io_at(e, &dest))?;
        fault::check(fault::Op::Sync).map_err(|e| io_at(e, &dest))?;
        self.file.sync_all().map_err(|e| io_at(e, &dest))?;
        fault::check(fault::Op::Rename).map_err(|e| io_at(e, &dest))?;
        if new {
            let exists = || {
                Error::new(
                    ErrorKind::Invalid(
                        "a file of this name exists (a save never writes over a file it did \
                         not create: remove it or choose another name)"
                            .into(),
                    ),
                    Location::file(&dest),
                )
            };
            match rename2(&tmp, &dest, NOREPLACE) {
                Ok(true) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Err(exists()),
                Err(e) => return Err(io_at(e, &dest)),
                Ok(false) => match std::fs::hard_link(&tmp, &dest) {
                    Ok(()) => {
                        let _ = std::fs::remove_file(&tmp);
                    }
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Err(exists()),
                    Err(e) => return Err(io_at(e, &dest)),
                },
            }
        } else {
            std::fs::rename(&tmp, &dest).map_err(|e| io_at(e, &dest))?;
        }
        self.tmp = None;
        // After the rename the new file is in place: an error now says that it may not
        // be durable yet.
        sync_dir(parent_of(&dest)).map_err(|e| io_at(e, &dest))?;
        Ok(())
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if let Some(tmp) = self.tmp.take() {
            let _ = std::fs::remove_file(tmp);
        }
    }
}

impl AtomicFile {
    /// Counts `n` bytes written, and starts the writeback of what is dirty every
    /// [`WRITEBACK_STEP`] bytes.
    fn wrote(&mut self, n: usize) {
        self.unsynced += n as u64;
        if self.unsynced >= WRITEBACK_STEP {
            self.unsynced = 0;
            start_writeback(&self.file);
        }
    }
}

/// Starts writing `file`'s dirty pages to the disk without waiting for them. Best
/// effort: [`AtomicFile::commit`]'s sync is what makes the data durable.
#[cfg(target_os = "linux")]
fn start_writeback(file: &File) {
    use std::os::unix::io::AsRawFd;
    // SAFETY: a valid descriptor; offset 0 and length 0 name the whole file, and the
    // flag only starts writeback. The result is ignored on purpose (see above).
    unsafe {
        libc::sync_file_range(file.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE);
    }
}

#[cfg(not(target_os = "linux"))]
fn start_writeback(_file: &File) {}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        fault::check(fault::Op::Write)?;
        let n = self.file.write(buf)?;
        self.wrote(n);
        Ok(n)
    }
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        fault::check(fault::Op::Write)?;
        self.file.write_all(buf)?;
        self.wrote(buf.len());
        Ok(())
    }
    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

impl Seek for AtomicFile {
    fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
        self.file.seek(pos)
    }
}

/// How [`AtomicDir::commit`] puts the folder at its destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirPolicy {
    /// The destination must not exist: the commit fails, naming it, when it does (as a
    /// database created in Caffe2's NEW mode). On Linux the check and the rename are one
    /// step (`renameat2` with `RENAME_NOREPLACE`); see [`AtomicDir::commit`] for the
    /// fallback.
    CreateNew,
    /// An existing destination (a folder, or a file) is replaced: on Linux the two are
    /// swapped in one step (`renameat2` with `RENAME_EXCHANGE`) and the old one, now at
    /// the temporary name, is removed; a missing destination is simply created.
    Replace,
}

/// A folder written atomically: its content is made under a fresh hidden name beside the
/// destination ([`AtomicDir::path`]), and [`AtomicDir::commit`] syncs it and renames it
/// into place, so that the destination is never seen partly written.
///
/// The folder itself is not created: whoever fills it does (the database backends create
/// their folder in their NEW mode, and refuse an existing one). Dropped without a
/// successful commit (an error, a panic, an interrupted save), the temporary folder is
/// removed, if it was made, and the destination is left as it was.
///
/// What a crash (a power loss, a `SIGKILL`) leaves behind, at any point:
/// - before the commit's rename: the destination as it was (absent, or the old folder,
///   whole), and a partial temporary folder `.{name}.{pid}.{random}.tmp` beside it, which
///   no reader takes for the destination and which the next save to the destination
///   removes ([`remove_stale`]: no code runs at a kill);
/// - after the rename: the new folder, whole and synced, at the destination; with
///   [`DirPolicy::Replace`], the old folder may remain under the temporary name until its
///   removal completes;
/// - on a filesystem without `renameat2`'s flags (or off Linux), [`DirPolicy::Replace`]
///   moves the old folder aside first (`.{name}.{pid}.{random}.old`): a crash between
///   that and the rename of the new one leaves no folder at the destination, but both
///   the old and the new one whole beside it — never is the old one removed before the
///   new one is in place.
#[derive(Debug)]
pub struct AtomicDir {
    /// The temporary folder's path; `None` once committed.
    tmp: Option<PathBuf>,
    dest: PathBuf,
}

/// The folder holding `path` (`.` for a bare name).
fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// A path beside `dest`, `.{name}.{pid}.{random}{suffix}`, where nothing is now.
fn fresh_sibling(dest: &Path, suffix: &str) -> Result<PathBuf> {
    use std::collections::hash_map::RandomState;
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let name = dest
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| {
            Error::new(
                ErrorKind::Invalid("the destination has no file name".into()),
                Location::file(dest),
            )
        })?;
    let dir = parent_of(dest);
    loop {
        // Randomly keyed SipHash of a process-wide counter and the time: unique within
        // the process by the counter, across processes by the pid and the keys.
        let mut h = RandomState::new().build_hasher();
        h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
        if let Ok(t) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
            h.write_u128(t.as_nanos());
        }
        let candidate = dir.join(format!(
            ".{name}.{}.{:016x}{suffix}",
            std::process::id(),
            h.finish()
        ));
        match std::fs::symlink_metadata(&candidate) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(candidate),
            Err(e) => return Err(io_at(e, dest)),
            Ok(_) => continue,
        }
    }
}

/// The parts of a temporary name this module makes, `.{name}.{pid}.{random}.tmp` (or
/// `.old`): what [`remove_stale`] recognises.
struct TempName<'a> {
    /// What the temporary file stands for (`name`).
    base: &'a str,
    pid: u32,
    random: &'a str,
}

/// Parses `name` as a temporary name of this module; `None` for anything else.
fn parse_temp(name: &str) -> Option<TempName<'_>> {
    let rest = name.strip_prefix('.')?;
    let rest = rest
        .strip_suffix(".tmp")
        .or_else(|| rest.strip_suffix(".old"))?;
    let (rest, random) = rest.rsplit_once('.')?;
    let (base, pid) = rest.rsplit_once('.')?;
    let hex = random.len() == 16 && random.bytes().all(|b| b.is_ascii_hexdigit());
    let digits = !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit());
    if !hex || !digits || base.is_empty() {
        return None;
    }
    Some(TempName {
        base,
        pid: pid.parse().ok()?,
        random,
    })
}

/// When `name` is a temporary name of this module (`.{base}.{pid}.{random}.tmp` or
/// `.old`), its `base` and `pid`.
pub fn temp_name_parts(name: &str) -> Option<(&str, u32)> {
    parse_temp(name).map(|t| (t.base, t.pid))
}

/// When `file` is named for a save to the document named `name` (`{name}.{tag}.{rest}`,
/// `tag` an [`AtomicFile::save_tag`], `{pid}-{random}`, and `rest` not empty): that
/// save's process id and tag. External data files are named so.
pub fn tagged_for<'a>(file: &'a str, name: &str) -> Option<(u32, &'a str)> {
    let rest = file.strip_prefix(name)?.strip_prefix('.')?;
    let (tag, tail) = rest.split_once('.')?;
    let (pid, random) = tag.split_once('-')?;
    let digits = !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit());
    let hex = random.len() == 16 && random.bytes().all(|b| b.is_ascii_hexdigit());
    if !digits || !hex || tail.is_empty() {
        return None;
    }
    Some((pid.parse().ok()?, tag))
}

/// Whether the process `pid` is running (on unix; elsewhere every process is taken to
/// be, so nothing is ever removed as stale). A process of another user counts as
/// running, and so does this one.
pub fn running(pid: u32) -> bool {
    #[cfg(unix)]
    {
        if pid == std::process::id() {
            return true;
        }
        let Ok(pid) = libc::pid_t::try_from(pid) else {
            return true;
        };
        // SAFETY: signal 0 only checks that the process exists; nothing is sent.
        let r = unsafe { libc::kill(pid, 0) };
        r == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
    }
    #[cfg(not(unix))]
    {
        let _ = pid;
        true
    }
}

/// Removes what saves to `dest` that were killed (their process no longer running) left
/// beside it: their temporary files and folders, `.{name}.{pid}.{random}.tmp`, those of
/// the files they wrote beside `dest` (`.{name}.{…}.{pid}.{random}.tmp`), and the files
/// named for such a save ([`AtomicFile::save_tag`]: `{name}.{pid}-{random}.…`, external
/// data) when its own temporary file shows that the save never committed. Only names of
/// this scheme are touched, and only those of processes that are gone: a save running in
/// another process keeps its files (processes writing to one folder are assumed to share
/// a process-id namespace, as on one machine). An old folder moved aside by a replacing
/// commit (`.old`) is removed only while `dest` exists. Best effort: what cannot be
/// removed stays. Called by [`AtomicFile::create`] and [`AtomicDir::new`].
pub fn remove_stale(dest: &Path) {
    let Some(name) = dest.file_name().and_then(|n| n.to_str()) else {
        return;
    };
    let dir = parent_of(dest);
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let prefix = format!(".{name}.");
    let mut stale: Vec<(String, bool)> = Vec::new();
    let mut orphans_of: Vec<String> = Vec::new();
    for e in entries.flatten() {
        let entry = e.file_name();
        let Some(entry) = entry.to_str() else {
            continue;
        };
        if !entry.starts_with(&prefix) {
            continue;
        }
        let Some(t) = parse_temp(entry) else {
            continue;
        };
        if running(t.pid) {
            continue;
        }
        let old = entry.ends_with(".old");
        if old && !present(dest).unwrap_or(true) {
            continue;
        }
        if t.base == name && !old {
            // The save's own temporary file: it never committed, so the files named for
            // it are no one's.
            orphans_of.push(format!("{}-{}", t.pid, t.random));
        }
        stale.push((entry.to_string(), old));
    }
    if stale.is_empty() {
        return;
    }
    if !orphans_of.is_empty() {
        if let Ok(entries) = std::fs::read_dir(dir) {
            for e in entries.flatten() {
                let entry = e.file_name();
                let Some(entry) = entry.to_str() else {
                    continue;
                };
                if tagged_for(entry, name)
                    .is_some_and(|(_, tag)| orphans_of.iter().any(|o| o == tag))
                {
                    let _ = remove_any(&dir.join(entry));
                }
            }
        }
    }
    // The save's own temporary file last: while it is there, a later save still knows
    // the files above are orphans.
    stale.sort_by_key(|(n, _)| parse_temp(n).is_some_and(|t| t.base == name));
    for (entry, _) in stale {
        let _ = remove_any(&dir.join(entry));
    }
}

/// Fault injection for tests: makes the `n`-th write, sync or rename of a save in this
/// process fail with a given error, to check that a failing disk leaves an error naming
/// the file and nothing behind. Not armed, it costs one atomic load per write call.
#[doc(hidden)]
pub mod fault {
    use std::io;
    use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};

    /// An operation that can be made to fail.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Op {
        /// A write of a file's bytes.
        Write,
        /// An `fsync` of a file or a folder.
        Sync,
        /// A rename into place.
        Rename,
    }

    /// Operations left before the failing one (0: not armed).
    static LEFT: AtomicU64 = AtomicU64::new(0);
    /// The OS error code the failing operation returns.
    static CODE: AtomicI32 = AtomicI32::new(0);
    /// Operations counted since [`arm`].
    static COUNT: AtomicU64 = AtomicU64::new(0);

    /// Makes the `n`-th (from 1) operation from now fail with the OS error `code`
    /// (`libc::ENOSPC`, `libc::EIO`); 0 disarms.
    pub fn arm(n: u64, code: i32) {
        CODE.store(code, Ordering::SeqCst);
        COUNT.store(0, Ordering::SeqCst);
        LEFT.store(n, Ordering::SeqCst);
    }

    /// Disarms, returning how many operations were counted since [`arm`] and whether
    /// the failure was injected.
    pub fn disarm() -> (u64, bool) {
        let left = LEFT.swap(0, Ordering::SeqCst);
        (COUNT.swap(0, Ordering::SeqCst), left == u64::MAX)
    }

    /// Counts one operation, failing it when it is the armed one.
    pub fn check(_op: Op) -> io::Result<()> {
        let left = LEFT.load(Ordering::Relaxed);
        if left == 0 || left == u64::MAX {
            return Ok(());
        }
        COUNT.fetch_add(1, Ordering::SeqCst);
        if left == 1 {
            LEFT.store(u64::MAX, Ordering::SeqCst);
            return Err(io::Error::from_raw_os_error(CODE.load(Ordering::SeqCst)));
        }
        LEFT.store(left - 1, Ordering::SeqCst);
        Ok(())
    }
}

/// Syncs every regular file under `dir` and every folder, `dir` included (folders only
/// on unix, where they can be opened). Symbolic links are not followed.
fn sync_tree(dir: &Path) -> io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        if kind.is_dir() {
            sync_tree(&entry.path())?;
        } else if kind.is_file() {
            fault::check(fault::Op::Sync)?;
            File::open(entry.path())?.sync_all()?;
        }
    }
    fault::check(fault::Op::Sync)?;
    sync_dir(dir)
}

/// Syncs a folder's entries (on unix; elsewhere a folder cannot be opened to sync it).
fn sync_dir(dir: &Path) -> io::Result<()> {
    #[cfg(unix)]
    File::open(dir)?.sync_all()?;
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

/// Whether `path` names anything (a dangling symbolic link included).
fn present(path: &Path) -> io::Result<bool> {
    match std::fs::symlink_metadata(path) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// Removes `path`, a folder (with its content) or anything else.
pub fn remove_any(path: &Path) -> io::Result<()> {
    if std::fs::symlink_metadata(path)?.is_dir() {
        std::fs::remove_dir_all(path)
    } else {
        std::fs::remove_file(path)
    }
}

/// `renameat2(from, to, flags)`. `Ok(false)` when the kernel or the filesystem does not
/// support the flags (`EINVAL`, `ENOSYS`, `EOPNOTSUPP`): the caller falls back.
#[cfg(target_os = "linux")]
fn rename2(from: &Path, to: &Path, flags: libc::c_uint) -> io::Result<bool> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let c = |p: &Path| {
        CString::new(p.as_os_str().as_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL in the path"))
    };
    let (from, to) = (c(from)?, c(to)?);
    // SAFETY: two NUL-terminated paths that outlive the call, relative to the working
    // directory; the raw syscall, as older C libraries lack the wrapper.
    let r = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            flags,
        )
    };
    if r == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EINVAL | libc::ENOSYS | libc::EOPNOTSUPP) => Ok(false),
        _ => Err(e),
    }
}

/// Where `renameat2` is not: always the fallback.
#[cfg(not(target_os = "linux"))]
fn rename2(_from: &Path, _to: &Path, _flags: u32) -> io::Result<bool> {
    Ok(false)
}

#[cfg(target_os = "linux")]
const NOREPLACE: libc::c_uint = libc::RENAME_NOREPLACE;
#[cfg(target_os = "linux")]
const EXCHANGE: libc::c_uint = libc::RENAME_EXCHANGE;
#[cfg(not(target_os = "linux"))]
const NOREPLACE: u32 = 1;
#[cfg(not(target_os = "linux"))]
const EXCHANGE: u32 = 2;

impl AtomicDir {
    /// Picks the temporary folder for `dest`: a fresh hidden name in the same folder,
    /// `.{name}.{pid}.{random}.tmp`, where nothing exists now. The folder is not created
    /// (see [`AtomicDir`]); `dest` itself is not looked at until the commit.
    pub fn new(dest: impl AsRef<Path>) -> Result<Self> {
        let dest = dest.as_ref().to_path_buf();
        remove_stale(&dest);
        let tmp = fresh_sibling(&dest, ".tmp")?;
        Ok(AtomicDir {
            tmp: Some(tmp),
            dest,
        })
    }

    /// The temporary folder to fill (beside the destination, not created by
    /// [`AtomicDir::new`]). After a successful commit, the destination.
    pub fn path(&self) -> &Path {
        self.tmp.as_deref().unwrap_or(&self.dest)
    }

    /// The destination.
    pub fn dest(&self) -> &Path {
        &self.dest
    }

    /// Syncs every regular file of the temporary folder and its folders, renames it to
    /// the destination under `policy`, then syncs the destination's parent folder so that
    /// the rename survives a crash.
    ///
    /// With [`DirPolicy::CreateNew`], an existing destination is an error naming it, and
    /// both the destination and the temporary folder are left intact (the latter is
    /// removed when `self` is dropped, or can still be committed with
    /// [`DirPolicy::Replace`]). Where `renameat2(RENAME_NOREPLACE)` is unavailable (off
    /// Linux, or a filesystem without it), the destination is checked and then renamed
    /// over: a folder made at the destination between the two by another process, if
    /// empty, is replaced.
    ///
    /// With [`DirPolicy::Replace`], the destination is swapped with the new folder
    /// (`renameat2(RENAME_EXCHANGE)`) and the old one removed; where the swap is
    /// unavailable, the old destination is renamed aside, the new folder renamed in, and
    /// the old one removed (and, if the second rename fails, the old one is renamed
    /// back). A failure to remove the old folder once the new one is in place is not an
    /// error: the commit happened, and the old folder stays under its hidden name.
    ///
    /// On an error, the temporary folder stays (removed on drop). A second commit after
    /// a successful one is an error.
    pub fn commit(&mut self, policy: DirPolicy) -> Result<()> {
        self.commit_with(policy, true)
    }

    /// [`AtomicDir::commit`], with `renameat2` used only when `native` (false tests the
    /// fallback).
    fn commit_with(&mut self, policy: DirPolicy, native: bool) -> Result<()> {
        self.sync()?;
        if let Some(old) = self.swap(policy, native)? {
            // Best effort (see above); the parent is synced again so that the removal
            // is durable too.
            if remove_any(&old).is_ok() {
                let _ = sync_dir(parent_of(&self.dest));
            }
        }
        Ok(())
    }

    /// The temporary folder, or an error when the folder is committed already.
    fn uncommitted(&self) -> Result<PathBuf> {
        self.tmp.clone().ok_or_else(|| {
            Error::new(
                ErrorKind::Invalid("the folder is committed already".into()),
                Location::file(&self.dest),
            )
        })
    }

    /// Syncs every file and folder of the temporary folder.
    fn sync(&self) -> Result<()> {
        let tmp = self.uncommitted()?;
        sync_tree(&tmp).map_err(|e| io_at(e, &tmp))
    }

    /// Renames the temporary folder (synced: [`AtomicDir::sync`]) to the destination
    /// under `policy` (see [`AtomicDir::commit`]), syncing the parent folder; returns
    /// where the old destination is now, when one was replaced, for the caller to remove.
    fn swap(&mut self, policy: DirPolicy, native: bool) -> Result<Option<PathBuf>> {
        let dest = self.dest.clone();
        let tmp = self.uncommitted()?;
        fault::check(fault::Op::Rename).map_err(|e| io_at(e, &dest))?;
        let io = |e| io_at(e, &dest);
        let exists = || {
            Error::new(
                ErrorKind::Invalid("the destination exists (it is created, not replaced)".into()),
                Location::file(&dest),
            )
        };
        // The old destination, when one was moved out of the way, to remove once done.
        let mut old: Option<PathBuf> = None;
        match policy {
            DirPolicy::CreateNew => {
                let done = native
                    && match rename2(&tmp, &dest, NOREPLACE) {
                        Ok(done) => done,
                        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Err(exists()),
                        Err(e) => return Err(io(e)),
                    };
                if !done {
                    if present(&dest).map_err(io)? {
                        return Err(exists());
                    }
                    std::fs::rename(&tmp, &dest).map_err(io)?;
                }
            }
            DirPolicy::Replace => {
                let mut done = false;
                if native {
                    // Create when absent; swap when present (or when it appeared since).
                    done = match rename2(&tmp, &dest, NOREPLACE) {
                        Ok(done) => done,
                        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => false,
                        Err(e) => return Err(io(e)),
                    };
                    if !done && present(&dest).map_err(io)? {
                        done = rename2(&tmp, &dest, EXCHANGE).map_err(io)?;
                        if done {
                            old = Some(tmp.clone());
                        }
                    }
                }
                if !done {
                    if present(&dest).map_err(io)? {
                        let aside = fresh_sibling(&dest, ".old")?;
                        std::fs::rename(&dest, &aside).map_err(io)?;
                        if let Err(e) = std::fs::rename(&tmp, &dest) {
                            // Put the old one back: the destination stays as it was.
                            let _ = std::fs::rename(&aside, &dest);
                            return Err(io(e));
                        }
                        old = Some(aside);
                    } else {
                        std::fs::rename(&tmp, &dest).map_err(io)?;
                    }
                }
            }
        }
        self.tmp = None;
        sync_dir(parent_of(&dest)).map_err(io)?;
        Ok(old)
    }
}

impl Drop for AtomicDir {
    fn drop(&mut self) {
        if let Some(tmp) = self.tmp.take() {
            let _ = remove_any(&tmp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leftovers(dir: &Path) -> Vec<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".tmp"))
            .collect()
    }

    #[test]
    fn writes_past_the_writeback_step_commit_whole() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("big.bin");
        let block: Vec<u8> = (0..1 << 20).map(|i| (i * 7 + i / 251) as u8).collect();
        let blocks = (WRITEBACK_STEP >> 20) as usize * 2 + 3;
        let mut f = AtomicFile::create(&p).unwrap();
        for _ in 0..blocks {
            f.write_all(&block).unwrap();
        }
        // Seeking back and patching after writeback started still lands.
        f.seek(SeekFrom::Start(5)).unwrap();
        f.write_all(b"patch").unwrap();
        f.commit().unwrap();
        let got = std::fs::read(&p).unwrap();
        assert_eq!(got.len(), blocks << 20);
        assert_eq!(&got[5..10], b"patch");
        assert_eq!(&got[10..1 << 20], &block[10..]);
        assert!(got.chunks(1 << 20).skip(1).all(|c| c == &block[..]));
    }

    #[test]
    fn commit_replaces() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("out.npy");
        std::fs::write(&p, b"old").unwrap();
        let mut f = AtomicFile::create(&p).unwrap();
        f.write_all(b"new content").unwrap();
        f.seek(SeekFrom::Start(0)).unwrap();
        f.write_all(b"NEW").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"old");
        f.commit().unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"NEW content");
        assert!(leftovers(dir.path()).is_empty());
    }

    #[test]
    fn interrupted_save_leaves_old_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("model.pt");
        std::fs::write(&p, b"precious").unwrap();
        {
            let mut f = AtomicFile::create(&p).unwrap();
            f.write_all(&[0u8; 10000]).unwrap();
            assert!(f.temp_path().exists());
            // Dropped without commit, as when a save fails halfway.
        }
        assert_eq!(std::fs::read(&p).unwrap(), b"precious");
        assert!(leftovers(dir.path()).is_empty());
        // And a new destination is not created at all.
        let q = dir.path().join("fresh.npz");
        drop(AtomicFile::create(&q).unwrap());
        assert!(!q.exists());
    }

    #[cfg(unix)]
    #[test]
    fn permissions_follow_destination() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.bin");
        std::fs::write(&p, b"a").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o640)).unwrap();
        let f = AtomicFile::create(&p).unwrap();
        f.commit().unwrap();
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o640);
    }

    #[test]
    fn missing_directory_is_an_error_naming_the_file() {
        let e = AtomicFile::create("/nonexistent-dir-tensorfmt/x.npy").unwrap_err();
        assert!(e.to_string().contains("x.npy"), "{e}");
    }

    /// The pid of a process that has ended.
    #[cfg(unix)]
    fn dead_pid() -> u32 {
        let mut c = std::process::Command::new("true").spawn().unwrap();
        let pid = c.id();
        c.wait().unwrap();
        pid
    }

    #[cfg(unix)]
    #[test]
    fn stale_temporaries_of_dead_saves_are_removed_by_the_next_save() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let dest = d.join("m.onnx");
        std::fs::write(&dest, b"old model").unwrap();
        let dead = dead_pid();
        let live = std::process::id();
        let r = "0123456789abcdef";
        // A save killed before its commit: its model's temporary file, its data file
        // (committed under the save's tag) and that data file's own temporary file.
        std::fs::write(d.join(format!(".m.onnx.{dead}.{r}.tmp")), b"x").unwrap();
        std::fs::write(d.join(format!("m.onnx.{dead}-{r}.data")), b"x").unwrap();
        std::fs::write(
            d.join(format!(".m.onnx.{dead}-{r}.data.{dead}.{r}.tmp")),
            b"x",
        )
        .unwrap();
        // A killed folder save.
        std::fs::create_dir(d.join(format!(".m.onnx.{dead}.fedcba9876543210.tmp"))).unwrap();
        // A committed save of a dead process: its data file is the model's, kept.
        let r2 = "aaaaaaaaaaaaaaaa";
        std::fs::write(d.join(format!("m.onnx.{dead}-{r2}.data")), b"x").unwrap();
        // A running save's temporary file, other names and another destination's: kept.
        let kept = [
            format!(".m.onnx.{live}.{r}.tmp"),
            format!("m.onnx.{dead}-{r2}.data"),
            format!(".other.{dead}.{r}.tmp"),
            ".m.onnx.notours.tmp".to_string(),
            "m.onnx".to_string(),
        ];
        for k in &kept[2..4] {
            std::fs::write(d.join(k), b"x").unwrap();
        }
        std::fs::write(d.join(&kept[0]), b"x").unwrap();
        let f = AtomicFile::create(&dest).unwrap();
        let mut want: Vec<String> = kept.to_vec();
        want.push(
            f.temp_path()
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned(),
        );
        want.sort();
        assert_eq!(names(d), want);
        drop(f);
        // An old folder moved aside is kept while the destination is missing.
        let gone = d.join("gone.lmdb");
        let aside = d.join(format!(".gone.lmdb.{dead}.{r}.old"));
        std::fs::create_dir(&aside).unwrap();
        drop(AtomicDir::new(&gone).unwrap());
        assert!(aside.exists());
    }

    #[test]
    fn commit_new_never_replaces() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("w.data");
        std::fs::write(&p, b"someone else's").unwrap();
        let mut f = AtomicFile::create(&p).unwrap();
        f.write_all(b"new").unwrap();
        let e = f.commit_new().unwrap_err().to_string();
        assert!(e.contains("w.data") && e.contains("exists"), "{e}");
        assert_eq!(std::fs::read(&p).unwrap(), b"someone else's");
        assert_eq!(names(dir.path()), ["w.data"]);
        let q = dir.path().join("fresh.data");
        let mut f = AtomicFile::create(&q).unwrap();
        f.write_all(b"new").unwrap();
        let tag = f.save_tag();
        assert!(
            tag.starts_with(&format!("{}-", std::process::id())),
            "{tag}"
        );
        f.commit_new().unwrap();
        assert_eq!(std::fs::read(&q).unwrap(), b"new");
    }

    /// Makes the folder `dir` holding `data` (`content`) and `sub/lock`.
    fn fill(dir: &Path, content: &[u8]) {
        std::fs::create_dir(dir).unwrap();
        std::fs::write(dir.join("data"), content).unwrap();
        std::fs::create_dir(dir.join("sub")).unwrap();
        std::fs::write(dir.join("sub/lock"), b"lock").unwrap();
    }

    /// The names in `dir`, sorted (the folder commit's tests use it too).
    pub(super) fn names(dir: &Path) -> Vec<String> {
        let mut n: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        n.sort();
        n
    }

    #[test]
    fn dir_temporary_name_is_fresh_hidden_and_beside() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("db.lmdb");
        let a = AtomicDir::new(&dest).unwrap();
        let b = AtomicDir::new(&dest).unwrap();
        assert_ne!(a.path(), b.path());
        assert_eq!(a.path().parent(), Some(dir.path()));
        let name = a.path().file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            name.starts_with(".db.lmdb.") && name.ends_with(".tmp"),
            "{name}"
        );
        assert_eq!(a.dest(), dest);
        // Not created.
        assert!(!a.path().exists() && !b.path().exists());
        assert!(AtomicDir::new("/").is_err());
    }

    #[test]
    fn dir_commit_new_creates_the_destination() {
        for native in [true, false] {
            let dir = tempfile::tempdir().unwrap();
            let dest = dir.path().join("db");
            let mut d = AtomicDir::new(&dest).unwrap();
            fill(d.path(), b"new");
            d.commit_with(DirPolicy::CreateNew, native).unwrap();
            assert_eq!(d.path(), dest);
            drop(d);
            assert_eq!(std::fs::read(dest.join("data")).unwrap(), b"new");
            assert_eq!(std::fs::read(dest.join("sub/lock")).unwrap(), b"lock");
            assert_eq!(names(dir.path()), ["db"], "native {native}");
        }
    }

    #[test]
    fn dir_commit_new_onto_an_existing_folder_fails_and_leaves_both() {
        for native in [true, false] {
            let dir = tempfile::tempdir().unwrap();
            let dest = dir.path().join("db");
            fill(&dest, b"old");
            let mut d = AtomicDir::new(&dest).unwrap();
            fill(d.path(), b"new");
            let e = d.commit_with(DirPolicy::CreateNew, native).unwrap_err();
            let text = e.to_string();
            assert!(text.contains("exists") && text.contains("db"), "{text}");
            assert_eq!(std::fs::read(dest.join("data")).unwrap(), b"old");
            assert_eq!(std::fs::read(d.path().join("data")).unwrap(), b"new");
            assert_ne!(d.path(), dest);
            // An empty folder (which a plain rename would replace) is refused too.
            let empty = dir.path().join("empty");
            std::fs::create_dir(&empty).unwrap();
            let mut e = AtomicDir::new(&empty).unwrap();
            fill(e.path(), b"new");
            assert!(e.commit_with(DirPolicy::CreateNew, native).is_err());
            assert!(names(&empty).is_empty());
            drop((d, e));
            assert_eq!(names(dir.path()), ["db", "empty"], "native {native}");
        }
    }

    #[test]
    fn dir_replace_swaps_the_contents() {
        for native in [true, false] {
            let dir = tempfile::tempdir().unwrap();
            let dest = dir.path().join("ckpt");
            // Absent: created.
            let mut d = AtomicDir::new(&dest).unwrap();
            fill(d.path(), b"first");
            d.commit_with(DirPolicy::Replace, native).unwrap();
            assert_eq!(std::fs::read(dest.join("data")).unwrap(), b"first");
            // Present: replaced, the old one removed.
            let mut d = AtomicDir::new(&dest).unwrap();
            std::fs::create_dir(d.path()).unwrap();
            std::fs::write(d.path().join("other"), b"second").unwrap();
            d.commit_with(DirPolicy::Replace, native).unwrap();
            assert_eq!(names(&dest), ["other"]);
            assert_eq!(std::fs::read(dest.join("other")).unwrap(), b"second");
            assert_eq!(names(dir.path()), ["ckpt"], "native {native}");
            // Committed once only.
            assert!(d.commit_with(DirPolicy::Replace, native).is_err());
            // A file at the destination is replaced too.
            let file = dir.path().join("was_a_file");
            std::fs::write(&file, b"x").unwrap();
            let mut d = AtomicDir::new(&file).unwrap();
            fill(d.path(), b"dir");
            d.commit_with(DirPolicy::Replace, native).unwrap();
            assert_eq!(std::fs::read(file.join("data")).unwrap(), b"dir");
            assert_eq!(names(dir.path()), ["ckpt", "was_a_file"], "native {native}");
        }
    }

    #[test]
    fn dir_dropped_uncommitted_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("db");
        fill(&dest, b"old");
        {
            let d = AtomicDir::new(&dest).unwrap();
            fill(d.path(), b"half");
            assert!(d.path().exists());
        }
        // Never made: dropping is a no-op.
        drop(AtomicDir::new(dir.path().join("never")).unwrap());
        assert_eq!(names(dir.path()), ["db"]);
        assert_eq!(std::fs::read(dest.join("data")).unwrap(), b"old");
    }
}

/// Tensor bytes held in an anonymous temporary file while the header that precedes them
/// in the output is built (a layout whose header depends on every tensor's metadata,
/// written by a streaming writer that learns the tensors one at a time): memory stays
/// bounded by the copy buffer, at the cost of writing the bytes twice. The file is in
/// the destination's folder when one is given (the same file system as the output),
/// else in the system's temporary folder, and disappears with the spool.
#[derive(Debug)]
pub struct Spool {
    file: io::BufWriter<File>,
    len: u64,
}

impl Spool {
    /// An empty spool beside `destination` (or in the temporary folder).
    pub fn new(destination: Option<&Path>) -> Result<Spool> {
        let dir = destination
            .and_then(Path::parent)
            .filter(|d| !d.as_os_str().is_empty());
        let file = match dir {
            Some(d) => tempfile::tempfile_in(d),
            None => tempfile::tempfile(),
        }?;
        Ok(Spool {
            file: io::BufWriter::with_capacity(1 << 20, file),
            len: 0,
        })
    }

    /// Appends the `len` bytes of `data` (an error naming `field` when it holds another
    /// count), the bytes of each `swap`-sized group reversed when `swap` is over 1 (a
    /// byte-order swap).
    pub fn add(
        &mut self,
        data: crate::registry::Payload<'_>,
        len: u64,
        swap: usize,
        field: &str,
    ) -> Result<()> {
        if swap > 1 {
            data.write_swapped_to(&mut self.file, len, swap, field)?;
        } else {
            data.write_to(&mut self.file, len, field)?;
        }
        self.len += len;
        Ok(())
    }

    /// Appends zero bytes up to a multiple of `align` (an error when `align` is 0);
    /// returns the bytes held then, where the next tensor starts.
    pub fn pad_to(&mut self, align: u64) -> Result<u64> {
        if align == 0 {
            return Err(Error::from(ErrorKind::Invalid(
                "an alignment of 0 bytes".into(),
            )));
        }
        let pad = (align - self.len % align) % align;
        io::copy(&mut io::Read::take(io::repeat(0), pad), &mut self.file)?;
        self.len += pad;
        Ok(self.len)
    }

    /// The bytes held.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True when nothing was added.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes of `ranges` (`(offset, len)` of what was added), in that order: the
    /// tensors of a writer that writes them in another order than they came in.
    pub fn into_ranges(self, ranges: Vec<(u64, u64)>) -> Result<SpoolRanges> {
        Ok(SpoolRanges {
            file: self.into_reader()?,
            ranges: ranges.into_iter(),
            left: 0,
        })
    }

    /// The bytes, to be read from the start.
    pub fn into_reader(self) -> Result<File> {
        let mut f = self
            .file
            .into_inner()
            .map_err(|e| Error::from(e.into_error()))?;
        f.seek(SeekFrom::Start(0))?;
        Ok(f)
    }
}

/// Byte ranges of a [`Spool`], read one after the other ([`Spool::into_ranges`]).
#[derive(Debug)]
pub struct SpoolRanges {
    file: File,
    ranges: std::vec::IntoIter<(u64, u64)>,
    left: u64,
}

impl io::Read for SpoolRanges {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.left == 0 {
            match self.ranges.next() {
                Some((offset, len)) => {
                    self.file.seek(SeekFrom::Start(offset))?;
                    self.left = len;
                }
                None => return Ok(0),
            }
        }
        let want = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let n = io::Read::read(&mut self.file, &mut buf[..want])?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the spool ended inside a tensor's bytes",
            ));
        }
        self.left -= n as u64;
        Ok(n)
    }
}
