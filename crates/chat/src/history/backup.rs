//! An online backup of a history database, safe while a daemon writes to it.
//!
//! SQLite's backup API copies the database in one step: that step holds a
//! single read transaction, so the copy is exactly the database as of one
//! commit (every message acknowledged before the backup began, none half
//! written), and in WAL mode the daemon keeps committing meanwhile. A
//! step-by-step copy would restart whenever another process commits, which
//! under a steady load is forever. The copy is written beside its
//! destination under a temporary name, checked, synced, and only then moved
//! into place, so a failed backup leaves nothing behind and never a partial
//! file under the requested name.

use std::{
    fs::File,
    io,
    path::{Path, PathBuf},
    thread,
    time::{Duration, Instant},
};

use rusqlite::{Connection, OpenFlags, backup::StepResult};

/// How long the copy waits while the source is locked (for WAL recovery
/// after a crash, say) before giving up.
const BUSY_DEADLINE: Duration = Duration::from_secs(30);
const BUSY_PAUSE: Duration = Duration::from_millis(50);

/// A backup that was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backup {
    /// Messages in the copy.
    pub messages: u64,
    /// Size of the copy in bytes.
    pub bytes: u64,
}

/// Why a backup was refused or failed. The refusals (see
/// [`BackupError::is_refusal`]) are mistakes in what was asked; the rest are
/// failures while copying.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error(
        "there is no history database at {0}; check --data-dir (or --config, --profile, SWITCHBOARD_DATA_DIR): switchboard serve creates it on its first start"
    )]
    NoDatabase(PathBuf),
    #[error("{0} already exists; pass --force to replace it, or choose another path")]
    Exists(PathBuf),
    #[error("{0} is a directory; name the backup file in it, e.g. {0}/history-backup.db")]
    IsDirectory(PathBuf),
    #[error(
        "the directory {dir} does not exist; create it first, or choose another path for {path}"
    )]
    NoDirectory { dir: PathBuf, path: PathBuf },
    #[error("{0} is the history database itself; choose another path for the backup")]
    SameFile(PathBuf),
    // The errors are in the messages, not sources: a chain would print
    // them twice.
    #[error("cannot read the history database {path}: {error}; check that it is readable by you")]
    Read {
        path: PathBuf,
        error: rusqlite::Error,
    },
    #[error(
        "cannot write the backup {path}: {error}; check that its directory is writable and has space"
    )]
    Write { path: PathBuf, error: io::Error },
    /// `problem`: SQLite's error, and what to do when it says (a full disk).
    #[error("cannot copy {from} to {to}: {problem}")]
    Copy {
        from: PathBuf,
        to: PathBuf,
        problem: String,
    },
    #[error(
        "{0} stayed locked for {BUSY_DEADLINE:?} (another process is recovering it?); try again"
    )]
    Busy(PathBuf),
    #[error(
        "the copy of {path} fails SQLite's integrity check ({problem}); the database itself may be damaged: stop switchboard and run `sqlite3 {path} 'PRAGMA integrity_check'`"
    )]
    Damaged { path: PathBuf, problem: String },
}

impl BackupError {
    /// Whether the request itself was wrong (a missing database, a taken or
    /// impossible destination), as opposed to a failure while copying.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            Self::NoDatabase(_)
                | Self::Exists(_)
                | Self::IsDirectory(_)
                | Self::NoDirectory { .. }
                | Self::SameFile(_)
        )
    }
}

/// Copies the history database `from` into a new file `to`, consistently,
/// while other processes may be writing to `from`. `to` must not exist
/// unless `overwrite`; its directory must. The copy is a single file
/// (rollback journal, not WAL), readable by its owner only.
pub fn backup_file(from: &Path, to: &Path, overwrite: bool) -> Result<Backup, BackupError> {
    if !from.is_file() {
        return Err(BackupError::NoDatabase(from.to_owned()));
    }
    if to.is_dir() {
        return Err(BackupError::IsDirectory(to.to_owned()));
    }
    let dir = match to.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        return Err(BackupError::NoDirectory {
            dir: dir.to_owned(),
            path: to.to_owned(),
        });
    }
    if to.exists() {
        // Checked first: --force cannot help here, so it is not suggested.
        if same_file(from, to) {
            return Err(BackupError::SameFile(to.to_owned()));
        }
        if !overwrite {
            return Err(BackupError::Exists(to.to_owned()));
        }
    }
    let write = |error| BackupError::Write {
        path: to.to_owned(),
        error,
    };
    let name = to.file_name().unwrap_or_default().to_string_lossy();
    let partial = tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .suffix(".partial")
        .tempfile_in(dir)
        .map_err(write)?;
    let messages = copy(from, partial.path(), to).inspect_err(|_| {
        // SQLite's journal of the copy, left by a failure (a full disk).
        let mut journal = partial.path().as_os_str().to_owned();
        journal.push("-journal");
        let _ = std::fs::remove_file(journal);
    })?;
    // SQLite synced its own writes; this covers them whichever descriptor
    // made them, before the name points at the file.
    partial.as_file().sync_all().map_err(write)?;
    let bytes = partial.as_file().metadata().map_err(write)?.len();
    if overwrite {
        partial.persist(to).map_err(|e| write(e.error))?;
    } else {
        // Refuses a file that appeared since the check above.
        partial
            .persist_noclobber(to)
            .map_err(|e| match e.error.kind() {
                io::ErrorKind::AlreadyExists => BackupError::Exists(to.to_owned()),
                _ => write(e.error),
            })?;
    }
    File::open(dir).and_then(|d| d.sync_all()).map_err(write)?;
    tracing::info!(from = %from.display(), to = %to.display(), messages, bytes, "history backed up");
    Ok(Backup { messages, bytes })
}

/// Copies `from` into the empty file `into` and checks the copy; returns
/// its message count. `to` is the name the copy will have, for messages.
fn copy(from: &Path, into: &Path, to: &Path) -> Result<u64, BackupError> {
    let read = |error| BackupError::Read {
        path: from.to_owned(),
        error,
    };
    let failed = |error: rusqlite::Error| BackupError::Copy {
        from: from.to_owned(),
        to: to.to_owned(),
        problem: match error.sqlite_error_code() {
            Some(rusqlite::ErrorCode::DiskFull) => format!(
                "{error}; the disk of {} is full: free space there, or choose another path",
                to.parent().unwrap_or(to).display()
            ),
            _ => error.to_string(),
        },
    };
    // Opened for writing where the file allows it (SQLite falls back to
    // reading otherwise), but used read-only (`query_only`): a read-only
    // connection to a WAL database creates `-wal` and `-shm` files when no
    // daemon has them open and cannot remove them again, leaving them owned
    // by whoever ran the backup, maybe not the daemon's user. The last
    // connection to close removes them when it may write.
    let src = Connection::open_with_flags(
        from,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(read)?;
    src.busy_timeout(Duration::from_secs(5)).map_err(read)?;
    src.pragma_update(None, "query_only", true).map_err(read)?;
    let mut dst = Connection::open(into).map_err(failed)?;
    {
        let backup = rusqlite::backup::Backup::new(&src, &mut dst).map_err(failed)?;
        let started = Instant::now();
        // -1: every page in one step, under one read transaction.
        while backup.step(-1).map_err(failed)? != StepResult::Done {
            if started.elapsed() > BUSY_DEADLINE {
                return Err(BackupError::Busy(from.to_owned()));
            }
            thread::sleep(BUSY_PAUSE);
        }
    }
    src.close().map_err(|(_, e)| read(e))?;
    // The pages carry the source's WAL mode; a backup is better one file.
    dst.query_row("PRAGMA journal_mode = DELETE", [], |_| Ok(()))
        .map_err(failed)?;
    let verdict: String = dst
        .query_row("PRAGMA quick_check", [], |row| row.get(0))
        .map_err(failed)?;
    if verdict != "ok" {
        return Err(BackupError::Damaged {
            path: from.to_owned(),
            problem: verdict,
        });
    }
    let messages: i64 = dst
        .query_row("SELECT count(*) FROM messages", [], |row| row.get(0))
        .map_err(failed)?;
    dst.close().map_err(|(_, e)| failed(e))?;
    Ok(messages.unsigned_abs())
}

/// Whether two existing paths name the same file.
fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (a.metadata(), b.metadata()) {
        (Ok(a), Ok(b)) => (a.dev(), a.ino()) == (b.dev(), b.ino()),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{Durability, History, Location, tests::msg};

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    /// A history at `dir/history.db` with `n` messages in #a, closed.
    fn history(dir: &Path, n: usize) -> PathBuf {
        let path = dir.join("history.db");
        let history = History::open(&Location::File(path.clone()), Durability::Full).unwrap();
        let batch = (0..n).map(|i| msg("#a", "bob", &format!("m{i}"))).collect();
        runtime().block_on(history.append(batch)).unwrap();
        history.close();
        path
    }

    fn texts(path: &Path) -> Vec<String> {
        let conn = Connection::open(path).unwrap();
        conn.prepare("SELECT text FROM messages ORDER BY id")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }

    #[test]
    fn the_copy_is_one_checked_file_that_switchboard_opens() {
        let dir = tempfile::tempdir().unwrap();
        let from = history(dir.path(), 3);
        let to = dir.path().join("copy.db");
        let done = backup_file(&from, &to, false).unwrap();
        assert_eq!(done.messages, 3);
        assert_eq!(done.bytes, to.metadata().unwrap().len());
        assert_eq!(texts(&to), ["m0", "m1", "m2"]);
        // A rollback journal, so no -wal file is needed beside it.
        let conn = Connection::open(&to).unwrap();
        let mode: String = conn
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "delete");
        drop(conn);
        let mut files: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        files.sort();
        assert_eq!(files, ["copy.db", "history.db"]);
        let reopened = History::open(&Location::File(to), Durability::Full).unwrap();
        assert_eq!(reopened.channels().unwrap(), ["#a"]);
        reopened.close();
    }

    #[test]
    fn a_copy_made_while_the_history_is_open_has_every_committed_message() {
        let dir = tempfile::tempdir().unwrap();
        let from = dir.path().join("history.db");
        let history = History::open(&Location::File(from.clone()), Durability::Full).unwrap();
        let rt = runtime();
        for i in 0..50 {
            rt.block_on(history.append(vec![msg("#a", "bob", &format!("m{i}"))]))
                .unwrap();
        }
        let to = dir.path().join("copy.db");
        assert_eq!(backup_file(&from, &to, false).unwrap().messages, 50);
        rt.block_on(history.append(vec![msg("#a", "bob", "after")]))
            .unwrap();
        history.close();
        assert_eq!(texts(&to).len(), 50);
    }

    #[test]
    fn refusals_name_the_path_and_leave_things_as_they_were() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nothing.db");
        let to = dir.path().join("copy.db");
        let err = backup_file(&missing, &to, false).unwrap_err();
        assert!(matches!(err, BackupError::NoDatabase(_)) && err.is_refusal());
        assert!(err.to_string().contains("nothing.db"), "{err}");
        assert!(!to.exists());

        let from = history(dir.path(), 1);
        std::fs::write(&to, "keep me").unwrap();
        let err = backup_file(&from, &to, false).unwrap_err();
        assert!(matches!(err, BackupError::Exists(_)), "{err}");
        assert!(err.to_string().contains("--force"), "{err}");
        assert_eq!(std::fs::read_to_string(&to).unwrap(), "keep me");
        backup_file(&from, &to, true).unwrap();
        assert_eq!(texts(&to), ["m0"]);

        let err = backup_file(&from, dir.path(), true).unwrap_err();
        assert!(matches!(err, BackupError::IsDirectory(_)), "{err}");
        let err = backup_file(&from, &dir.path().join("no/such/dir/x.db"), false).unwrap_err();
        assert!(matches!(err, BackupError::NoDirectory { .. }), "{err}");
        assert!(err.to_string().contains("no/such/dir"), "{err}");
        for force in [true, false] {
            let err = backup_file(&from, &from, force).unwrap_err();
            assert!(matches!(err, BackupError::SameFile(_)), "{err}");
            assert!(!err.to_string().contains("--force"), "{err}");
        }
        assert_eq!(texts(&from), ["m0"]);
    }
}
