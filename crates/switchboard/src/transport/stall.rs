//! `StallLimit`: an HTTP connection whose writes may wait only so long.
//!
//! A client that stops reading leaves its response nowhere to go once the
//! socket buffers are full: the write waits for good, and with it the
//! response's place among `http.max_streams` (or a legacy SSE session's).
//! Wrapped in a [`StallLimit`], a write that makes no progress for the limit
//! fails with `TimedOut`, hyper drops the connection and the place is free.
//! Reading is passed through untouched: the request timeouts live in
//! `http.rs`.

use std::{
    io,
    pin::Pin,
    task::{Context, Poll, ready},
    time::Duration,
};

use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    time::Sleep,
};

/// `inner` with every write bounded by `limit` without progress.
pub struct StallLimit<S> {
    inner: S,
    limit: Option<Duration>,
    /// Set while a write waits: when it fires, the write fails.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl<S> StallLimit<S> {
    /// `limit: None` leaves writes unbounded.
    pub fn new(inner: S, limit: Option<Duration>) -> Self {
        Self {
            inner,
            limit,
            stalled: None,
        }
    }

    /// What a write that `inner` left pending becomes: still pending, or
    /// `TimedOut` once it has waited `limit`.
    fn waited<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        let Some(limit) = self.limit else {
            return Poll::Pending;
        };
        let sleep = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        ready!(sleep.as_mut().poll(cx));
        tracing::info!(
            limit_s = limit.as_secs(),
            "closing an HTTP connection: the client took none of its response within http.write_timeout_s"
        );
        Poll::Ready(Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "the client stopped reading (http.write_timeout_s)",
        )))
    }

    /// Passes on what `inner` did, counting any answer as progress.
    fn progress<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        match polled {
            Poll::Ready(done) => {
                self.stalled = None;
                Poll::Ready(done)
            }
            Poll::Pending => self.waited(cx),
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for StallLimit<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for StallLimit<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.progress(cx, polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.progress(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_flush(cx);
        self.progress(cx, polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.progress(cx, polled)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncWriteExt;

    use super::*;

    /// A writer whose reader never reads: after the pipe's buffer fills,
    /// the write fails at the limit instead of waiting for good.
    #[tokio::test(start_paused = true)]
    async fn a_write_nobody_takes_fails_at_the_limit() {
        let (near, _far) = tokio::io::duplex(1024);
        let mut limited = StallLimit::new(near, Some(Duration::from_secs(60)));
        let started = tokio::time::Instant::now();
        let error = limited.write_all(&[0; 4096]).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), Duration::from_secs(60));
    }

    /// A slow reader is not a stalled one: each bit it takes resets the
    /// limit, so a write longer than the limit in all still completes.
    #[tokio::test(start_paused = true)]
    async fn a_reader_that_keeps_taking_resets_the_limit() {
        use tokio::io::AsyncReadExt;
        let (near, mut far) = tokio::io::duplex(1024);
        let mut limited = StallLimit::new(near, Some(Duration::from_secs(60)));
        let reader = tokio::spawn(async move {
            let mut got = vec![0; 1024];
            let mut total = 0;
            while total < 8192 {
                tokio::time::sleep(Duration::from_secs(50)).await;
                total += far.read(&mut got).await.unwrap();
            }
            total
        });
        limited.write_all(&[0; 8192]).await.unwrap();
        assert_eq!(reader.await.unwrap(), 8192);
    }

    /// Without a limit a write simply waits.
    #[tokio::test(start_paused = true)]
    async fn no_limit_leaves_writes_waiting() {
        let (near, _far) = tokio::io::duplex(1024);
        let mut unlimited = StallLimit::new(near, None);
        let write = unlimited.write_all(&[0; 4096]);
        assert!(
            tokio::time::timeout(Duration::from_secs(3600), write)
                .await
                .is_err()
        );
    }
}
