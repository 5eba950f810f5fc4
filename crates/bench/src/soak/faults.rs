//! The faults of a soak run and when they happen: `kill -9` of the daemon,
//! restarts of the IRC server, and one full disk (a tmpfs filled to ENOSPC).

use std::{
    fs::File,
    io::{ErrorKind, Write},
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use anyhow::{Context, bail};

/// How often the daemon is killed, and the IRC server restarted, in a run
/// of at least 5 minutes.
const KILL_EVERY: Duration = Duration::from_secs(90);
const IRC_RESTART_EVERY: Duration = Duration::from_secs(120);
/// How long the disk stays full.
const FULL_FOR: Duration = Duration::from_secs(20);

/// When each fault happens, as offsets from the start of the run.
#[derive(Debug, Clone)]
pub struct Schedule {
    pub duration: Duration,
    pub kill_every: Duration,
    pub irc_restart_every: Duration,
    /// When the filler is written, and how long it stays.
    pub full_at: Duration,
    pub full_for: Duration,
}

impl Schedule {
    /// The default intervals, scaled down for runs shorter than 5 minutes
    /// so that the daemon is still killed twice, the IRC server restarted
    /// twice and the disk filled once. The full disk sits between two kills
    /// (a kill due while it is full waits until space is back).
    pub fn new(duration: Duration) -> Self {
        let kill_every = KILL_EVERY.min(duration / 3);
        let irc_restart_every = IRC_RESTART_EVERY.min(duration * 2 / 5);
        let full_for = FULL_FOR.min(duration / 6);
        let mut kill = kill_every;
        while kill < duration * 7 / 20 {
            kill += kill_every;
        }
        let full_at = kill + kill_every.saturating_sub(full_for) / 2;
        Self {
            duration,
            kill_every,
            irc_restart_every,
            full_at,
            full_for,
        }
    }

    pub fn full_until(&self) -> Duration {
        self.full_at + self.full_for
    }
}

/// A tmpfs of a given size on a fresh directory, unmounted (lazily, so that a
/// process still holding a file does not keep it busy) when dropped.
pub struct Tmpfs {
    pub path: PathBuf,
    _dir: tempfile::TempDir,
}

impl Tmpfs {
    pub fn mount(size_mib: u64) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().to_owned();
        let output = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size_mib}m"), "tmpfs"])
            .arg(&path)
            .output()
            .context("cannot run mount(8)")?;
        if !output.status.success() {
            bail!(
                "cannot mount a {size_mib} MiB tmpfs at {} for the data directory (the soak \
                 needs root, or CAP_SYS_ADMIN in a container): {}",
                path.display(),
                String::from_utf8_lossy(&output.stderr).trim()
            );
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
    pub fn fill(path: &Path) -> anyhow::Result<(Self, u64)> {
        let mut file =
            File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
        let block = vec![0u8; 256 * 1024];
        let mut written = 0u64;
        loop {
            match file.write(&block) {
                Ok(n) => written += n as u64,
                Err(e) if e.kind() == ErrorKind::StorageFull => break,
                Err(e) => return Err(e).with_context(|| format!("cannot fill {}", path.display())),
            }
        }
        Ok((
            Self {
                path: path.to_owned(),
            },
            written,
        ))
    }

    pub fn remove(self) -> anyhow::Result<()> {
        std::fs::remove_file(&self.path)
            .with_context(|| format!("cannot remove {}", self.path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ten_minutes_keep_the_issued_intervals_and_fill_between_kills() {
        let s = Schedule::new(Duration::from_secs(600));
        assert_eq!(s.kill_every, Duration::from_secs(90));
        assert_eq!(s.irc_restart_every, Duration::from_secs(120));
        assert_eq!(s.full_for, Duration::from_secs(20));
        // Kills at 90, 180, 270, 360 s: the disk is full from 305 to 325 s.
        assert_eq!(s.full_at, Duration::from_secs(305));
    }

    #[test]
    fn one_minute_still_has_every_fault() {
        let s = Schedule::new(Duration::from_secs(60));
        assert_eq!(s.kill_every, Duration::from_secs(20));
        assert_eq!(s.irc_restart_every, Duration::from_secs(24));
        assert_eq!(s.full_for, Duration::from_secs(10));
        assert_eq!(s.full_at, Duration::from_secs(45));
        assert!(s.full_until() < s.duration);
    }
}
