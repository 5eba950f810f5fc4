//! Binding the listening socket: directories, the stale-or-live check, and
//! removing the socket again when the server goes away.

use std::{
    fs::{self, DirBuilder, File, OpenOptions},
    io,
    os::{
        fd::AsRawFd,
        unix::{
            ffi::OsStrExt,
            fs::{DirBuilderExt, FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt},
            net::UnixListener,
        },
    },
    path::{Path, PathBuf},
};

use crate::tools::ToolTableError;

/// Why a server could not be bound.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    /// The app id cannot name a directory.
    #[error(
        "`{0}` is not a usable app id (1 to 128 printable ASCII characters, no `/`, not `.` or `..`)"
    )]
    InvalidAppId(String),
    /// Another process is serving on the socket (it accepted a connection).
    #[error(
        "another instance is already serving on {}; quit it first, or use another app id or socket path",
        path.display()
    )]
    InUse { path: PathBuf },
    /// Something other than a socket is in the way.
    #[error("{} exists and is not a socket; remove it or choose another path", .0.display())]
    NotASocket(PathBuf),
    /// A directory on the way is not private to this user.
    #[error("refusing to use {}: {reason}", path.display())]
    Insecure { path: PathBuf, reason: String },
    /// The file system said no.
    // The reason is in the message, not a `source`: a chain would say it twice.
    #[error("cannot bind {}: {error}", path.display())]
    Io { path: PathBuf, error: io::Error },
    /// The handler's tool list cannot be served.
    #[error(transparent)]
    Tools(#[from] ToolTableError),
}

fn io_error(path: &Path) -> impl FnOnce(io::Error) -> BindError + '_ {
    move |error| BindError::Io {
        path: path.to_owned(),
        error,
    }
}

/// Where to bind.
pub(crate) enum Location<'a> {
    /// `paths::socket_path(prefix, app_id)`, with the prefix and app
    /// directories made private.
    Conventional { prefix: &'a str, app_id: &'a str },
    /// A path the user chose; only missing parent directories are created.
    Explicit(&'a Path),
}

/// A bound listener and the guard that removes its socket.
pub(crate) struct Bound {
    pub(crate) listener: UnixListener,
    pub(crate) guard: SocketGuard,
}

/// Removes the socket file on drop, if it is still the one we bound (another
/// instance may have replaced it meanwhile), and releases the lock.
pub(crate) struct SocketGuard {
    path: PathBuf,
    dev: u64,
    ino: u64,
    _lock: File,
}

impl SocketGuard {
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for SocketGuard {
    fn drop(&mut self) {
        if let Ok(meta) = fs::symlink_metadata(&self.path)
            && meta.dev() == self.dev
            && meta.ino() == self.ino
        {
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// This process's effective uid.
pub(crate) fn euid() -> u32 {
    // SAFETY: geteuid(2) has no failure mode.
    unsafe { libc::geteuid() }
}

pub(crate) fn bind(location: Location<'_>) -> Result<Bound, BindError> {
    let path = match location {
        Location::Conventional { prefix, app_id } => {
            let path = crate::paths::socket_path(prefix, app_id);
            let app_dir = path.parent().expect("a socket path has a directory");
            let prefix_dir = app_dir.parent().expect("an app dir has a parent");
            prepare_prefix_dir(prefix_dir)?;
            prepare_app_dir(app_dir)?;
            path
        }
        Location::Explicit(path) => {
            if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                create_missing_dirs(parent).map_err(io_error(parent))?;
            }
            path.to_owned()
        }
    };
    let lock = lock(&path)?;
    match fs::symlink_metadata(&path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_error(&path)(e)),
        Ok(meta) if !meta.file_type().is_socket() => return Err(BindError::NotASocket(path)),
        Ok(_) => match probe(&path) {
            Probe::Live => return Err(BindError::InUse { path }),
            Probe::Stale => {
                tracing::info!(path = %path.display(), "replacing a stale socket");
                match fs::remove_file(&path) {
                    Err(e) if e.kind() != io::ErrorKind::NotFound => {
                        return Err(io_error(&path)(e));
                    }
                    _ => {}
                }
            }
            Probe::Error(e) => return Err(io_error(&path)(e)),
        },
    }
    let listener = UnixListener::bind(&path).map_err(io_error(&path))?;
    let meta = fs::symlink_metadata(&path).map_err(io_error(&path))?;
    let guard = SocketGuard {
        path: path.clone(),
        dev: meta.dev(),
        ino: meta.ino(),
        _lock: lock,
    };
    // Only this user may connect, whatever the directory (an explicit path
    // may be in a shared one). The peer's uid is checked again on accept.
    fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).map_err(io_error(&path))?;
    listener.set_nonblocking(true).map_err(io_error(&path))?;
    Ok(Bound { listener, guard })
}

/// The directory shared by all apps of a prefix: created private, or, when it
/// exists, owned by us and writable by nobody else.
fn prepare_prefix_dir(dir: &Path) -> Result<(), BindError> {
    if let Some(parent) = dir.parent() {
        // `$XDG_RUNTIME_DIR` itself, normally made by the login manager.
        create_missing_dirs(parent).map_err(io_error(parent))?;
    }
    if create_private_dir(dir)? {
        return Ok(());
    }
    let meta = owned_dir(dir)?;
    if meta.mode() & 0o022 != 0 {
        return Err(BindError::Insecure {
            path: dir.to_owned(),
            reason: format!(
                "it is writable by other users (mode {:o}); make it 0700",
                meta.mode() & 0o7777
            ),
        });
    }
    Ok(())
}

/// The app's own directory: created, or made, mode 0700.
fn prepare_app_dir(dir: &Path) -> Result<(), BindError> {
    if create_private_dir(dir)? {
        return Ok(());
    }
    let meta = owned_dir(dir)?;
    if meta.mode() & 0o7777 != 0o700 {
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).map_err(io_error(dir))?;
    }
    Ok(())
}

/// Creates `dir` and its missing parents, each with mode 0700 whatever the
/// umask; existing directories are left as they are.
pub(crate) fn create_missing_dirs(dir: &Path) -> io::Result<()> {
    let missing: Vec<&Path> = dir
        .ancestors()
        .take_while(|d| !d.as_os_str().is_empty() && !d.exists())
        .collect();
    for dir in missing.into_iter().rev() {
        match DirBuilder::new().mode(0o700).create(dir) {
            Ok(()) => fs::set_permissions(dir, fs::Permissions::from_mode(0o700))?,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Creates `dir` with mode 0700 (whatever the umask); false if it existed.
fn create_private_dir(dir: &Path) -> Result<bool, BindError> {
    match DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {
            fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).map_err(io_error(dir))?;
            Ok(true)
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(io_error(dir)(e)),
    }
}

/// The metadata of an existing directory that this user owns.
fn owned_dir(dir: &Path) -> Result<fs::Metadata, BindError> {
    let meta = fs::metadata(dir).map_err(io_error(dir))?;
    let insecure = |reason: String| BindError::Insecure {
        path: dir.to_owned(),
        reason,
    };
    if !meta.is_dir() {
        return Err(insecure("it is not a directory".into()));
    }
    if meta.uid() != euid() {
        return Err(insecure(format!(
            "it belongs to uid {}, not to this user (uid {})",
            meta.uid(),
            euid()
        )));
    }
    Ok(meta)
}

/// Takes an exclusive lock on `<socket>.lock`, so two instances starting at
/// once cannot both decide the socket is stale and replace each other's.
/// The lock file stays (removing it would reopen that race).
fn lock(socket: &Path) -> Result<File, BindError> {
    let mut name = socket.as_os_str().to_owned();
    name.push(".lock");
    let path = PathBuf::from(name);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC)
        .open(&path)
        .map_err(io_error(&path))?;
    // SAFETY: flock(2) on a descriptor we own.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let e = io::Error::last_os_error();
        return Err(if e.kind() == io::ErrorKind::WouldBlock {
            BindError::InUse {
                path: socket.to_owned(),
            }
        } else {
            io_error(&path)(e)
        });
    }
    Ok(file)
}

enum Probe {
    Live,
    Stale,
    Error(io::Error),
}

/// Whether something accepts connections on `path`, without ever blocking:
/// a non-blocking `connect` that succeeds, or fails because the listener's
/// backlog is full, means a live listener; `ECONNREFUSED` a stale socket.
fn probe(path: &Path) -> Probe {
    let bytes = path.as_os_str().as_bytes();
    // SAFETY: sockaddr_un is plain data; zeroed is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if bytes.len() >= addr.sun_path.len() {
        return Probe::Error(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the socket path is too long",
        ));
    }
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (dst, &src) in addr.sun_path.iter_mut().zip(bytes) {
        *dst = src as libc::c_char;
    }
    // SAFETY: socket(2); the descriptor is closed below.
    let fd = unsafe {
        libc::socket(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if fd < 0 {
        return Probe::Error(io::Error::last_os_error());
    }
    // SAFETY: connect(2) with a properly initialised sockaddr_un.
    let rc = unsafe {
        libc::connect(
            fd,
            (&raw const addr).cast::<libc::sockaddr>(),
            std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t,
        )
    };
    let error = io::Error::last_os_error();
    // SAFETY: closing the descriptor opened above.
    unsafe { libc::close(fd) };
    if rc == 0 {
        return Probe::Live;
    }
    match error.raw_os_error() {
        Some(libc::EAGAIN | libc::EINPROGRESS) => Probe::Live,
        Some(libc::ECONNREFUSED | libc::ENOENT) => Probe::Stale,
        _ => Probe::Error(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_tells_live_from_stale() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let listener = UnixListener::bind(&path).unwrap();
        assert!(matches!(probe(&path), Probe::Live));
        drop(listener);
        assert!(matches!(probe(&path), Probe::Stale));
        fs::remove_file(&path).unwrap();
        assert!(matches!(probe(&path), Probe::Stale));
    }

    #[test]
    fn the_guard_leaves_a_replaced_socket_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let bound = bind(Location::Explicit(&path)).unwrap();
        drop(bound.listener);
        // Something replaced it (moving ours aside keeps its inode in use, so
        // the new one cannot reuse the number).
        fs::rename(&path, dir.path().join("old.sock")).unwrap();
        let other = UnixListener::bind(&path).unwrap();
        drop(bound.guard);
        assert!(path.exists());
        drop(other);
    }

    #[test]
    fn a_second_instance_is_refused_by_the_lock() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let _first = bind(Location::Explicit(&path)).unwrap();
        assert!(matches!(
            bind(Location::Explicit(&path)),
            Err(BindError::InUse { .. })
        ));
    }
}
