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
        fd::{AsFd, BorrowedFd, OwnedFd},
        unix::fs::FileTypeExt,
    },
};

use tokio::{
    io::{AsyncRead, AsyncWrite},
    net::{UnixStream, unix::pipe},
};

/// stdin for reading. Must be called inside a tokio runtime with I/O on.
pub fn stdin() -> Box<dyn AsyncRead + Send + Unpin> {
    match pollable(io::stdin().as_fd(), pipe::Receiver::from_owned_fd) {
        Some(Pollable::Pipe(receiver)) => Box::new(receiver),
        Some(Pollable::Socket(stream)) => Box::new(stream),
        None => Box::new(tokio::io::stdin()),
    }
}

/// stdout for writing. Must be called inside a tokio runtime with I/O on.
pub fn stdout() -> Box<dyn AsyncWrite + Send + Unpin> {
    match pollable(io::stdout().as_fd(), pipe::Sender::from_owned_fd) {
        Some(Pollable::Pipe(sender)) => Box::new(sender),
        Some(Pollable::Socket(stream)) => Box::new(stream),
        None => Box::new(tokio::io::stdout()),
    }
}

enum Pollable<P> {
    Pipe(P),
    Socket(UnixStream),
}

/// A duplicate of `fd` (0 or 1) registered with the reactor, if it is a
/// pipe (made an end of the kind `pipe_end` gives) or a socket.
fn pollable<P>(fd: BorrowedFd<'_>, pipe_end: fn(OwnedFd) -> io::Result<P>) -> Option<Pollable<P>> {
    let file = File::from(fd.try_clone_to_owned().ok()?);
    let kind = file.metadata().ok()?.file_type();
    if kind.is_fifo() {
        pipe_end(file.into()).ok().map(Pollable::Pipe)
    } else if kind.is_socket() {
        let stream = std::os::unix::net::UnixStream::from(OwnedFd::from(file));
        stream.set_nonblocking(true).ok()?;
        UnixStream::from_std(stream).ok().map(Pollable::Socket)
    } else {
        None
    }
}
