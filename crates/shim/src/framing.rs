//! Newline-delimited JSON-RPC on a byte stream (MCP's stdio framing), read
//! with a bound, and the error replies for lines that cannot be routed:
//! shared by the shim and switchboard's own stdio and HTTP transports.

use tokio::io::AsyncBufReadExt;

/// The largest JSON-RPC message accepted on any transport. Generous on
/// purpose: an oversized tool argument should reach the tool and get its
/// specific error ("text is 10485760 bytes; the limit is ..."), not a
/// framing error.
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// A JSON-RPC error object for a message that could not be routed, as one
/// line of JSON. `id` is `null` when the request's id could not be read.
pub fn error_json(id: serde_json::Value, code: i32, message: &str) -> String {
    serde_json::json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
        .to_string()
}

/// What [`read_bounded_line`] found.
pub enum Line {
    Complete,
    TooLong,
    Eof,
}

/// Reads one `\n`-terminated line into `buf`, discarding (not buffering) the
/// rest of a line longer than [`MAX_MESSAGE_BYTES`].
pub async fn read_bounded_line<R: AsyncBufReadExt + Unpin>(
    input: &mut R,
    buf: &mut Vec<u8>,
) -> std::io::Result<Line> {
    let mut too_long = false;
    loop {
        let available = input.fill_buf().await?;
        if available.is_empty() {
            return Ok(if too_long || !buf.is_empty() {
                if too_long {
                    Line::TooLong
                } else {
                    Line::Complete
                }
            } else {
                Line::Eof
            });
        }
        let (chunk, done) = match available.iter().position(|&b| b == b'\n') {
            Some(i) => (&available[..=i], true),
            None => (available, false),
        };
        let used = chunk.len();
        if !too_long {
            if buf.len() + used > MAX_MESSAGE_BYTES + 2 {
                too_long = true;
                buf.clear();
            } else {
                buf.extend_from_slice(chunk);
            }
        }
        input.consume(used);
        if done {
            return Ok(if too_long {
                Line::TooLong
            } else {
                Line::Complete
            });
        }
    }
}

/// A line without its line ending and a leading UTF-8 byte-order mark.
pub fn trim_line(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line)
}

#[cfg(test)]
mod tests {
    use tokio::io::BufReader;

    use super::*;

    #[tokio::test]
    async fn overlong_lines_are_discarded_not_buffered() {
        let mut data = vec![b'x'; MAX_MESSAGE_BYTES + 10];
        data.push(b'\n');
        data.extend_from_slice(b"{}\n");
        let mut input = BufReader::new(&data[..]);
        let mut buf = Vec::new();
        assert!(matches!(
            read_bounded_line(&mut input, &mut buf).await.unwrap(),
            Line::TooLong
        ));
        assert!(buf.capacity() <= MAX_MESSAGE_BYTES + 64 * 1024);
        buf.clear();
        assert!(matches!(
            read_bounded_line(&mut input, &mut buf).await.unwrap(),
            Line::Complete
        ));
        assert_eq!(trim_line(&buf), b"{}");
    }
}
