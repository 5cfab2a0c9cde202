//! A read-only view of a LevelDB folder for `rusty-leveldb`: opening a database writes
//! (it rotates `LOG` to `LOG.old`, takes the `LOCK` file, writes a new `MANIFEST` and
//! `CURRENT`, turns the log into a table and deletes what it no longer needs). Through
//! this [`Env`] every file is read from the folder as it is,
//! and everything written, renamed or deleted happens in memory over it: the folder is
//! left byte for byte as it was, with no new file, and nothing is copied but what the
//! library renames (the small `LOG`).

use std::cell::RefCell;
use std::collections::HashSet;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use rusty_leveldb::env::{Env, FileLock, Logger, RandomAccess};
use rusty_leveldb::{MemEnv, PosixDiskEnv, Result, Status, StatusCode};

/// The folder's files read from disk; what the library writes kept in memory over them.
pub struct ReadOnlyEnv {
    disk: PosixDiskEnv,
    mem: MemEnv,
    /// Files of the folder the library deleted or renamed away (hidden, not touched).
    gone: RefCell<HashSet<PathBuf>>,
}

impl ReadOnlyEnv {
    /// A view of the files on disk with nothing written yet.
    pub fn new() -> ReadOnlyEnv {
        ReadOnlyEnv {
            disk: PosixDiskEnv::new(),
            mem: MemEnv::new(),
            gone: RefCell::new(HashSet::new()),
        }
    }

    fn in_mem(&self, p: &Path) -> bool {
        self.mem.exists(p).unwrap_or(false)
    }

    fn on_disk(&self, p: &Path) -> bool {
        !self.gone.borrow().contains(p) && !self.in_mem(p) && p.is_file()
    }

    /// Copies the file `from` on disk into memory as `to`.
    fn copy_in(&self, from: &Path, to: &Path) -> Result<()> {
        let mut bytes = Vec::new();
        self.disk
            .open_sequential_file(from)?
            .read_to_end(&mut bytes)
            .map_err(|e| Status::new(StatusCode::IOError, &e.to_string()))?;
        let mut w = self.mem.open_writable_file(to)?;
        w.write_all(&bytes)
            .map_err(|e| Status::new(StatusCode::IOError, &e.to_string()))
    }

    fn not_found(p: &Path) -> Status {
        Status::new(StatusCode::NotFound, &p.display().to_string())
    }
}

impl Default for ReadOnlyEnv {
    fn default() -> Self {
        Self::new()
    }
}

impl Env for ReadOnlyEnv {
    fn open_sequential_file(&self, p: &Path) -> Result<Box<dyn Read>> {
        if self.in_mem(p) {
            self.mem.open_sequential_file(p)
        } else if self.on_disk(p) {
            self.disk.open_sequential_file(p)
        } else {
            Err(Self::not_found(p))
        }
    }
    fn open_random_access_file(&self, p: &Path) -> Result<Box<dyn RandomAccess>> {
        if self.in_mem(p) {
            self.mem.open_random_access_file(p)
        } else if self.on_disk(p) {
            self.disk.open_random_access_file(p)
        } else {
            Err(Self::not_found(p))
        }
    }
    fn open_writable_file(&self, p: &Path) -> Result<Box<dyn Write>> {
        self.gone.borrow_mut().insert(p.to_path_buf());
        self.mem.open_writable_file(p)
    }
    fn open_appendable_file(&self, p: &Path) -> Result<Box<dyn Write>> {
        if self.on_disk(p) {
            self.copy_in(p, p)?;
        }
        self.gone.borrow_mut().insert(p.to_path_buf());
        self.mem.open_appendable_file(p)
    }
    fn exists(&self, p: &Path) -> Result<bool> {
        Ok(self.in_mem(p) || self.on_disk(p) || p.is_dir())
    }
    fn children(&self, p: &Path) -> Result<Vec<PathBuf>> {
        let mut out: Vec<PathBuf> = self
            .disk
            .children(p)?
            .into_iter()
            .filter(|c| !self.gone.borrow().contains(&p.join(c)))
            .collect();
        for c in self.mem.children(p)? {
            if !out.contains(&c) {
                out.push(c);
            }
        }
        Ok(out)
    }
    fn size_of(&self, p: &Path) -> Result<usize> {
        if self.in_mem(p) {
            self.mem.size_of(p)
        } else if self.on_disk(p) {
            self.disk.size_of(p)
        } else {
            Err(Self::not_found(p))
        }
    }
    fn delete(&self, p: &Path) -> Result<()> {
        if self.in_mem(p) {
            self.mem.delete(p)?;
        }
        self.gone.borrow_mut().insert(p.to_path_buf());
        Ok(())
    }
    fn mkdir(&self, _: &Path) -> Result<()> {
        Ok(())
    }
    fn rmdir(&self, _: &Path) -> Result<()> {
        Ok(())
    }
    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        if self.in_mem(from) {
            self.mem.rename(from, to)?;
        } else if self.on_disk(from) {
            self.copy_in(from, to)?;
        } else {
            return Err(Self::not_found(from));
        }
        let mut gone = self.gone.borrow_mut();
        gone.insert(from.to_path_buf());
        gone.insert(to.to_path_buf());
        Ok(())
    }
    fn lock(&self, p: &Path) -> Result<FileLock> {
        self.mem.lock(p)
    }
    fn unlock(&self, l: FileLock) -> Result<()> {
        self.mem.unlock(l)
    }
    fn new_logger(&self, p: &Path) -> Result<Logger> {
        self.mem.new_logger(p)
    }
    fn micros(&self) -> u64 {
        self.disk.micros()
    }
    fn sleep_for(&self, micros: u32) {
        self.disk.sleep_for(micros)
    }
}
