//! Waking when another process may have written the database file, for the
//! thread that tells this process of other processes' commits (`tail`).
//!
//! On Linux, inotify on the file's directory: a commit writes the WAL, and
//! the thread wakes for it, and sleeps otherwise (an idle server does not
//! wake at all). A write is seen before its commit is (the WAL is written,
//! synced, and only then the commit published in shared memory), so a look
//! that finds nothing new is tried again after 1, 2, 4 … 64 ms, or at the
//! next write. After a look that found the commit it waits `MIN_GAP` before
//! waking again, so a busy writer (this process's own commits wake it too)
//! costs at most one look a gap. Elsewhere, or when inotify is unavailable
//! (its limits reached), a look every [`POLL`].

use std::{path::Path, time::Duration};

/// How often to look when nothing says the file changed.
pub(super) const POLL: Duration = Duration::from_millis(25);

/// The least time between two looks when the file keeps changing.
#[cfg(target_os = "linux")]
const MIN_GAP: Duration = Duration::from_millis(10);

/// Wakes [`FileChanges::wait`] with `false` when dropped.
pub(super) struct Stop {
    _signal: platform::Stop,
}

/// Tells when the database file may have changed.
pub(super) struct FileChanges(platform::Changes);

/// Watches the database file at `path`.
pub(super) fn watch(path: &Path) -> (Stop, FileChanges) {
    let (stop, changes) = platform::watch(path);
    (Stop { _signal: stop }, FileChanges(changes))
}

impl FileChanges {
    /// Blocks until the file may have changed (true) or [`Stop`] is
    /// dropped (false). `found`: whether the last look found a commit.
    pub(super) fn wait(&mut self, found: bool) -> bool {
        self.0.wait(found)
    }
}

/// Looks every [`POLL`] until the sender is dropped.
mod polling {
    use std::sync::mpsc;

    use super::POLL;

    pub(super) struct Changes(pub(super) mpsc::Receiver<()>);

    pub(super) fn watch() -> (mpsc::Sender<()>, Changes) {
        let (stop, stopped) = mpsc::channel();
        (stop, Changes(stopped))
    }

    impl Changes {
        pub(super) fn wait(&mut self, _found: bool) -> bool {
            matches!(
                self.0.recv_timeout(POLL),
                Err(mpsc::RecvTimeoutError::Timeout)
            )
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod platform {
    use std::path::Path;

    pub(super) use super::polling::Changes;
    pub(super) type Stop = std::sync::mpsc::Sender<()>;

    pub(super) fn watch(_path: &Path) -> (Stop, Changes) {
        super::polling::watch()
    }
}

#[cfg(target_os = "linux")]
mod platform {
    use std::{
        ffi::CString,
        io,
        os::{
            fd::{AsRawFd, FromRawFd, OwnedFd},
            unix::ffi::OsStrExt,
        },
        path::Path,
        sync::{Arc, mpsc},
        time::Duration,
    };

    use super::{MIN_GAP, polling};

    /// The first and the last pause before looking again for a commit a
    /// write announced.
    const SETTLE_FIRST: Duration = Duration::from_millis(1);
    const SETTLE_LAST: Duration = Duration::from_millis(64);

    pub(super) enum Stop {
        Inotify(Arc<OwnedFd>),
        /// Dropped, it disconnects the polling thread's channel.
        Polling {
            _sender: mpsc::Sender<()>,
        },
    }

    impl Drop for Stop {
        fn drop(&mut self) {
            if let Stop::Inotify(event) = self {
                let one: u64 = 1;
                // SAFETY: writes 8 bytes from a live u64 to an eventfd we own.
                unsafe {
                    libc::write(event.as_raw_fd(), (&raw const one).cast(), 8);
                }
            }
        }
    }

    pub(super) enum Changes {
        Inotify {
            inotify: OwnedFd,
            stop: Arc<OwnedFd>,
            /// The name of the database's WAL, which every commit writes
            /// (a checkpoint writes the database file, and adds nothing).
            wal: Vec<u8>,
            /// After a write, the pause before looking again if the look
            /// finds nothing.
            settle: Option<Duration>,
        },
        Polling(polling::Changes),
    }

    pub(super) fn watch(path: &Path) -> (Stop, Changes) {
        match inotify(path) {
            Ok((inotify, stop, wal)) => (
                Stop::Inotify(stop.clone()),
                Changes::Inotify {
                    inotify,
                    stop,
                    wal,
                    settle: None,
                },
            ),
            Err(e) => {
                tracing::warn!(error = %e, database = %path.display(), "cannot watch the history's directory (inotify); looking for other processes' messages every 25 ms instead");
                let (stop, changes) = polling::watch();
                (Stop::Polling { _sender: stop }, Changes::Polling(changes))
            }
        }
    }

    fn inotify(path: &Path) -> io::Result<(OwnedFd, Arc<OwnedFd>, Vec<u8>)> {
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let mut wal = path
            .file_name()
            .map(|n| n.as_bytes().to_vec())
            .unwrap_or_default();
        wal.extend_from_slice(b"-wal");
        let dir = CString::new(dir.as_os_str().as_bytes()).map_err(io::Error::other)?;
        let owned = |fd: i32| {
            if fd < 0 {
                Err(io::Error::last_os_error())
            } else {
                // SAFETY: a descriptor the kernel just gave us, owned once.
                Ok(unsafe { OwnedFd::from_raw_fd(fd) })
            }
        };
        // SAFETY: plain system calls on descriptors owned here.
        let inotify = owned(unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) })?;
        let mask = libc::IN_MODIFY | libc::IN_CREATE | libc::IN_MOVED_TO;
        // SAFETY: `dir` is a NUL-terminated path.
        if unsafe { libc::inotify_add_watch(inotify.as_raw_fd(), dir.as_ptr(), mask) } < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: as above.
        let stop = owned(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) })?;
        Ok((inotify, Arc::new(stop), wal))
    }

    impl Changes {
        pub(super) fn wait(&mut self, found: bool) -> bool {
            match self {
                Changes::Inotify {
                    inotify,
                    stop,
                    wal,
                    settle,
                } => {
                    // A write announced a commit the last look did not find
                    // yet: look again after a pause, or at the next write.
                    let pause = settle.take().filter(|p| !found && *p <= SETTLE_LAST);
                    if pause.is_none() && paused(stop, MIN_GAP) {
                        return false;
                    }
                    let timeout = pause.map_or(-1, |p| p.as_millis() as i32);
                    loop {
                        let [changed, stopped] =
                            ready(&[inotify.as_raw_fd(), stop.as_raw_fd()], timeout);
                        if stopped {
                            return false;
                        }
                        if changed && concerns(inotify, wal) {
                            *settle = Some(SETTLE_FIRST);
                            return true;
                        }
                        if let (false, Some(pause)) = (changed, pause) {
                            *settle = Some(pause * 2);
                            return true;
                        }
                    }
                }
                Changes::Polling(polling) => polling.wait(found),
            }
        }
    }

    /// Sleeps `pause` unless told to stop meanwhile; true when told.
    fn paused(stop: &OwnedFd, pause: Duration) -> bool {
        ready(&[stop.as_raw_fd()], pause.as_millis() as i32)[0]
    }

    /// Which of `fds` are readable, waiting up to `timeout_ms` (-1: for
    /// ever) for one to be.
    fn ready<const N: usize>(fds: &[i32; N], timeout_ms: i32) -> [bool; N] {
        let mut polled = fds.map(|fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        });
        // SAFETY: `polled` is a live array of N pollfds.
        let n = unsafe { libc::poll(polled.as_mut_ptr(), N as libc::nfds_t, timeout_ms) };
        if n <= 0 {
            return [false; N];
        }
        polled.map(|p| p.revents != 0)
    }

    /// Reads every pending event; true when one is about the file named
    /// `name` (or the queue overflowed, which may have hidden one).
    fn concerns(inotify: &OwnedFd, name: &[u8]) -> bool {
        let mut buf = [0u8; 4096];
        let mut relevant = false;
        loop {
            // SAFETY: reads into a live buffer of its length.
            let n = unsafe { libc::read(inotify.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            let Ok(n) = usize::try_from(n) else {
                return relevant;
            };
            if n == 0 {
                return relevant;
            }
            let mut at = 0;
            let header = std::mem::size_of::<libc::inotify_event>();
            while at + header <= n {
                // SAFETY: the kernel wrote a whole event at `at`; read
                // unaligned, as the buffer is bytes.
                let event: libc::inotify_event =
                    unsafe { std::ptr::read_unaligned(buf.as_ptr().add(at).cast()) };
                let len = event.len as usize;
                let event_name = &buf[at + header..(at + header + len).min(n)];
                let event_name = event_name.split(|&b| b == 0).next().unwrap_or_default();
                relevant |= event.mask & libc::IN_Q_OVERFLOW != 0 || event_name == name;
                at += header + len;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::{
        sync::mpsc,
        thread,
        time::{Duration, Instant},
    };

    use super::*;

    /// Runs `changes.wait(true)` on a thread; its answer arrives on the channel.
    fn waiting(mut changes: FileChanges) -> mpsc::Receiver<bool> {
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            let _ = tx.send(changes.wait(true));
        });
        rx
    }

    #[test]
    fn polling_looks_every_poll_until_stopped() {
        let (stop, changes) = polling::watch();
        let mut changes = FileChanges(platform_polling(changes));
        let started = Instant::now();
        assert!(changes.wait(true));
        assert!(started.elapsed() >= POLL);
        let answer = waiting(changes);
        drop(stop);
        assert_eq!(answer.recv_timeout(Duration::from_secs(5)), Ok(false));
    }

    #[cfg(target_os = "linux")]
    fn platform_polling(changes: polling::Changes) -> platform::Changes {
        platform::Changes::Polling(changes)
    }

    #[cfg(not(target_os = "linux"))]
    fn platform_polling(changes: polling::Changes) -> platform::Changes {
        changes
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_write_to_the_wal_wakes_and_others_do_not() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("history.db");
        let (stop, changes) = watch(&db);
        assert!(matches!(changes.0, platform::Changes::Inotify { .. }));
        let answer = waiting(changes);
        // Another file, and the database file itself (a checkpoint adds
        // nothing): no wake.
        std::fs::write(dir.path().join("notes.txt"), "unrelated").unwrap();
        std::fs::write(&db, "checkpointed pages").unwrap();
        assert!(answer.recv_timeout(Duration::from_millis(300)).is_err());
        std::fs::write(dir.path().join("history.db-wal"), "a frame").unwrap();
        assert_eq!(answer.recv_timeout(Duration::from_secs(5)), Ok(true));
        // Idle, it does not wake; dropping the stop ends the wait at once.
        let (stop2, changes2) = watch(&db);
        drop(stop);
        let answer = waiting(changes2);
        assert!(answer.recv_timeout(Duration::from_millis(300)).is_err());
        let dropped = Instant::now();
        drop(stop2);
        assert_eq!(answer.recv_timeout(Duration::from_secs(5)), Ok(false));
        assert!(dropped.elapsed() < Duration::from_secs(1));
    }
}
