//! stdin and stdout as async streams without a thread hop per read and
//! write.
//!
//! tokio's `stdin()`/`stdout()` run every read and write on its blocking
//! thread pool, because a terminal or a file cannot be polled. An agent
//! host connects a server by a pipe or a socket pair, and those can: they
//! are switched to non-blocking mode and driven by the reactor directly,
//! which measured as a few microseconds and two thread wake-ups saved per
//! message. Anything else (a terminal, a file) keeps tokio's version.
//!
//! Non-blocking mode is set on this process's end of the pipe or socket
//! only; the host's end is a separate file description.

use std::{
    fs::File,
    io,
    os::{
        fd::{AsFd, OwnedFd},
        unix::fs::FileTypeExt,
    },
};

use tokio::{
    io::{AsyncRead, AsyncWrite},
    net::{UnixStream, unix::pipe},
};

/// stdin for reading. Must be called inside a tokio runtime with I/O on.
pub fn stdin() -> Box<dyn AsyncRead + Send + Unpin> {
    match pollable(io::stdin().as_fd().try_clone_to_owned()) {
        Some(Pollable::Pipe(fd)) => match pipe::Receiver::from_owned_fd(fd) {
            Ok(receiver) => Box::new(receiver),
            Err(_) => Box::new(tokio::io::stdin()),
        },
        Some(Pollable::Socket(stream)) => Box::new(stream),
        None => Box::new(tokio::io::stdin()),
    }
}

/// stdout for writing. Must be called inside a tokio runtime with I/O on.
pub fn stdout() -> Box<dyn AsyncWrite + Send + Unpin> {
    match pollable(io::stdout().as_fd().try_clone_to_owned()) {
        Some(Pollable::Pipe(fd)) => match pipe::Sender::from_owned_fd(fd) {
            Ok(sender) => Box::new(sender),
            Err(_) => Box::new(tokio::io::stdout()),
        },
        Some(Pollable::Socket(stream)) => Box::new(stream),
        None => Box::new(tokio::io::stdout()),
    }
}

enum Pollable {
    Pipe(OwnedFd),
    Socket(UnixStream),
}

/// What kind of descriptor `fd` (a duplicate of 0 or 1) is, if pollable.
fn pollable(fd: io::Result<OwnedFd>) -> Option<Pollable> {
    let file = File::from(fd.ok()?);
    let kind = file.metadata().ok()?.file_type();
    if kind.is_fifo() {
        Some(Pollable::Pipe(file.into()))
    } else if kind.is_socket() {
        let stream = std::os::unix::net::UnixStream::from(OwnedFd::from(file));
        stream.set_nonblocking(true).ok()?;
        UnixStream::from_std(stream).ok().map(Pollable::Socket)
    } else {
        None
    }
}
