//! Reading newline-delimited lines from a byte stream with a bound on
//! memory. IRC's wire, the relay protocol and MCP's stdio framing are all
//! lines; a peer can send one that never ends. [`LineReader`] holds at most
//! its limit (plus the reader's buffer) whatever arrives, reports an
//! over-long line as soon as it passes the limit, and skips the rest of it.
//!
//! Reading is cancel-safe: the part of a line already taken from the stream
//! stays in the [`LineReader`], so a read dropped inside `select!` (another
//! branch won) loses nothing; the next call goes on where it stopped.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! use switchboard_lines::{LineReader, Next};
//!
//! let mut input = &b"PING :a\r\nthis line is far too long\nok\n"[..];
//! let mut lines = LineReader::new(10);
//! assert_eq!(lines.next(&mut input).await.unwrap(), Next::Line(b"PING :a"));
//! assert_eq!(lines.next(&mut input).await.unwrap(), Next::TooLong);
//! assert_eq!(lines.next(&mut input).await.unwrap(), Next::Line(b"ok"));
//! assert_eq!(lines.next(&mut input).await.unwrap(), Next::Eof);
//! # });
//! ```

use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// What [`LineReader::next`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Next<'a> {
    /// A line, without its `\n` or `\r\n`. The last line of a stream may
    /// lack the line ending.
    Line(&'a [u8]),
    /// A line longer than the limit. What arrived of it is dropped, and the
    /// rest of it is skipped by the next call.
    TooLong,
    /// The stream ended (after the last line).
    Eof,
}

/// Lines of at most `max` bytes (line ending not counted) from a stream.
#[derive(Debug)]
pub struct LineReader {
    max: usize,
    bytes: Vec<u8>,
    /// The last call returned the line in `bytes`: clear it before reading.
    returned: bool,
    /// Inside an over-long line already reported: drop bytes up to its end.
    skipping: bool,
}

impl LineReader {
    pub fn new(max: usize) -> Self {
        Self {
            max,
            bytes: Vec::new(),
            returned: false,
            skipping: false,
        }
    }

    /// The longest line accepted, in bytes.
    pub fn max(&self) -> usize {
        self.max
    }

    /// Bytes reserved for the line being read: about twice the limit at
    /// most, whatever arrives.
    pub fn capacity(&self) -> usize {
        self.bytes.capacity()
    }

    /// Reads the next line. Cancel-safe; see the crate docs.
    pub async fn next<R: AsyncBufRead + Unpin>(
        &mut self,
        reader: &mut R,
    ) -> std::io::Result<Next<'_>> {
        if std::mem::take(&mut self.returned) {
            self.bytes.clear();
        }
        loop {
            let available = reader.fill_buf().await?;
            if available.is_empty() {
                self.skipping = false;
                if self.bytes.is_empty() {
                    return Ok(Next::Eof);
                }
                return Ok(self.finish());
            }
            let (chunk, ended) = match available.iter().position(|&b| b == b'\n') {
                Some(i) => (&available[..i], true),
                None => (available, false),
            };
            let used = chunk.len() + usize::from(ended);
            if self.skipping {
                reader.consume(used);
                if ended {
                    self.skipping = false;
                }
                continue;
            }
            // Before its end a line may hold one byte more than `max`: the
            // `\r` of a `\r\n` not yet seen.
            if self.bytes.len() + chunk.len() > self.max + 1 {
                self.bytes.clear();
                reader.consume(used);
                self.skipping = !ended;
                return Ok(Next::TooLong);
            }
            self.bytes.extend_from_slice(chunk);
            reader.consume(used);
            if ended {
                return Ok(self.finish());
            }
        }
    }

    fn finish(&mut self) -> Next<'_> {
        self.returned = true;
        if self.bytes.last() == Some(&b'\r') {
            self.bytes.pop();
        }
        if self.bytes.len() > self.max {
            return Next::TooLong;
        }
        Next::Line(&self.bytes)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::{AsyncWriteExt, BufReader};

    use super::*;

    async fn all(input: &[u8], max: usize) -> Vec<Result<String, &'static str>> {
        let mut input = input;
        let mut lines = LineReader::new(max);
        let mut out = Vec::new();
        loop {
            match lines.next(&mut input).await.unwrap() {
                Next::Line(l) => out.push(Ok(String::from_utf8_lossy(l).into_owned())),
                Next::TooLong => out.push(Err("too long")),
                Next::Eof => return out,
            }
        }
    }

    #[tokio::test]
    async fn line_endings_and_the_last_unterminated_line() {
        assert_eq!(
            all(b"a\r\nb\n\nc", 5).await,
            [
                Ok("a".into()),
                Ok("b".into()),
                Ok("".into()),
                Ok("c".into())
            ]
        );
        assert_eq!(all(b"", 5).await, []);
    }

    #[tokio::test]
    async fn the_limit_excludes_the_line_ending() {
        assert_eq!(
            all(b"12345\r\n12345\n123456\n", 5).await,
            [Ok("12345".into()), Ok("12345".into()), Err("too long"),]
        );
        // One byte over, seen only at the `\n` (it could have been a `\r`).
        assert_eq!(
            all(b"123456\nok\n", 5).await,
            [Err("too long"), Ok("ok".into())]
        );
        // At the end of the stream, without a line ending.
        assert_eq!(
            all(b"ok\n123456", 5).await,
            [Ok("ok".into()), Err("too long")]
        );
    }

    #[tokio::test]
    async fn an_endless_line_is_reported_early_and_skipped_without_buffering() {
        let mut data = vec![b'x'; 1 << 20];
        data.extend_from_slice(b"\nafter\n");
        let mut input = BufReader::with_capacity(4096, &data[..]);
        let mut lines = LineReader::new(100);
        assert_eq!(lines.next(&mut input).await.unwrap(), Next::TooLong);
        assert!(lines.capacity() < 8192, "{}", lines.capacity());
        assert_eq!(lines.next(&mut input).await.unwrap(), Next::Line(b"after"));
        assert!(lines.capacity() < 8192);
    }

    #[tokio::test]
    async fn a_read_cancelled_mid_line_loses_nothing() {
        let (mut tx, rx) = tokio::io::duplex(64);
        let mut rx = BufReader::new(rx);
        let mut lines = LineReader::new(100);
        tx.write_all(b"PRIVMSG #c :hel").await.unwrap();
        let cancelled = tokio::time::timeout(Duration::from_millis(50), lines.next(&mut rx)).await;
        assert!(cancelled.is_err(), "no line yet");
        tx.write_all(b"lo\r\n").await.unwrap();
        assert_eq!(
            lines.next(&mut rx).await.unwrap(),
            Next::Line(b"PRIVMSG #c :hello")
        );
    }
}
