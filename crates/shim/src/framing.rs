//! Newline-delimited JSON-RPC on a byte stream (MCP's stdio framing), read
//! with a bound: shared by the shim and `serve --stdio`. What a line holds
//! is [`switchboard_jsonrpc::classify`]'s to judge.

use switchboard_jsonrpc::{MAX_MESSAGE_BYTES, strip_bom};
use switchboard_lines::LineReader;

/// The reader for MCP's stdio lines, bounded by [`MAX_MESSAGE_BYTES`]: the
/// rest of a longer line is discarded, not buffered.
pub fn line_reader() -> LineReader {
    LineReader::new(MAX_MESSAGE_BYTES)
}

/// Whether a line carries nothing (a byte-order mark and whitespace at
/// most): skipped, as blank lines between messages are no message.
pub fn is_blank(line: &[u8]) -> bool {
    strip_bom(line).iter().all(u8::is_ascii_whitespace)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blank_lines_are_whitespace_after_a_byte_order_mark() {
        assert!(is_blank(b"\xEF\xBB\xBF \t\r"));
        assert!(is_blank(b""));
        assert!(!is_blank(b"\xEF\xBB\xBF{}"));
    }
}
