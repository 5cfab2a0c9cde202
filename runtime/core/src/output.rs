//! Atomic output files: written under a temporary name next to the destination and
//! renamed over it only when complete.

use std::fs::File;
use std::io::{self, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::error::{Error, ErrorKind, Location, Result};

/// A file written atomically: the bytes go to a temporary file in the destination's
/// directory, and [`AtomicFile::commit`] flushes, syncs and renames it over the
/// destination. Dropped without a commit (an error, a panic, an interrupted save), the
/// temporary file is removed and any existing destination is left as it was.
///
/// While it is written, the data is handed to the disk every [`WRITEBACK_STEP`] bytes
/// (on Linux, `sync_file_range` starts the writeback without waiting for it), so that the
/// final sync finds little left to write: the disk works while the rest is produced.
#[derive(Debug)]
pub struct AtomicFile {
    tmp: tempfile::NamedTempFile,
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
    /// existing destination.
    pub fn create(dest: impl AsRef<Path>) -> Result<Self> {
        let dest = dest.as_ref().to_path_buf();
        let dir = match dest.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let name = dest
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::Invalid("the destination has no file name".into()),
                    Location::file(&dest),
                )
            })?;
        let prefix = format!(".{name}.");
        let mut builder = tempfile::Builder::new();
        builder.prefix(&prefix).suffix(".tmp");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            builder.permissions(std::fs::Permissions::from_mode(0o666));
        }
        let tmp = builder.tempfile_in(&dir).map_err(|e| io_at(e, &dest))?;
        if let Ok(meta) = std::fs::metadata(&dest) {
            // Best effort: keep the replaced file's permissions.
            let _ = tmp.as_file().set_permissions(meta.permissions());
        }
        Ok(AtomicFile {
            tmp,
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
        self.tmp.path()
    }

    /// The temporary file, for direct access.
    pub fn file(&self) -> &File {
        self.tmp.as_file()
    }

    /// Flushes and syncs the data, renames the temporary file over the destination and
    /// (on unix) syncs the directory so the rename survives a crash.
    pub fn commit(self) -> Result<()> {
        let AtomicFile { mut tmp, dest, .. } = self;
        tmp.flush().map_err(|e| io_at(e, &dest))?;
        tmp.as_file().sync_all().map_err(|e| io_at(e, &dest))?;
        tmp.persist(&dest).map_err(|e| io_at(e.error, &dest))?;
        #[cfg(unix)]
        {
            let dir = match dest.parent() {
                Some(p) if !p.as_os_str().is_empty() => p,
                _ => Path::new("."),
            };
            File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(|e| io_at(e, &dest))?;
        }
        Ok(())
    }
}

impl AtomicFile {
    /// Counts `n` bytes written, and starts the writeback of what is dirty every
    /// [`WRITEBACK_STEP`] bytes.
    fn wrote(&mut self, n: usize) {
        self.unsynced += n as u64;
        if self.unsynced >= WRITEBACK_STEP {
            self.unsynced = 0;
            start_writeback(self.tmp.as_file());
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
        let n = self.tmp.write(buf)?;
        self.wrote(n);
        Ok(n)
    }
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.tmp.write_all(buf)?;
        self.wrote(buf.len());
        Ok(())
    }
    fn flush(&mut self) -> io::Result<()> {
        self.tmp.flush()
    }
}

impl Seek for AtomicFile {
    fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
        self.tmp.seek(pos)
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
}
