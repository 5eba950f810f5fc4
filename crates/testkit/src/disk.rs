//! A disk that fills up: a small tmpfs mounted for a test or the soak (root,
//! or CAP_SYS_ADMIN in a container), and a file that takes every free byte
//! of it until removed.

use std::{
    fs::File,
    io::{self, ErrorKind, Write},
    path::{Path, PathBuf},
    process::Command,
};

/// A tmpfs of a given size on a fresh directory, unmounted (lazily, so that
/// a process still holding a file does not keep it busy) when dropped.
pub struct Tmpfs {
    pub path: PathBuf,
    _dir: tempfile::TempDir,
}

impl Tmpfs {
    /// Mounts a `size_mib` MiB tmpfs; the error says that it needs root.
    pub fn mount(size_mib: u64) -> io::Result<Self> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().to_owned();
        let output = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size_mib}m"), "tmpfs"])
            .arg(&path)
            .output()?;
        if !output.status.success() {
            return Err(io::Error::other(format!(
                "cannot mount a {size_mib} MiB tmpfs at {} (this needs root, or CAP_SYS_ADMIN in a container): {}",
                path.display(),
                String::from_utf8_lossy(&output.stderr).trim()
            )));
        }
        Ok(Self { path, _dir: dir })
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
}

/// A file that takes every free byte of its file system until removed.
pub struct Filler {
    path: PathBuf,
}

impl Filler {
    /// Writes `path` until the file system reports ENOSPC; returns the file
    /// and how many bytes it took.
    pub fn fill(path: &Path) -> io::Result<(Self, u64)> {
        let mut file = File::create(path)?;
        let block = vec![0u8; 256 * 1024];
        let mut written = 0u64;
        loop {
            match file.write(&block) {
                Ok(n) => written += n as u64,
                Err(e) if e.kind() == ErrorKind::StorageFull => break,
                Err(e) => return Err(e),
            }
        }
        Ok((
            Self {
                path: path.to_owned(),
            },
            written,
        ))
    }

    /// Gives the space back.
    pub fn remove(self) -> io::Result<()> {
        std::fs::remove_file(&self.path)
    }
}
