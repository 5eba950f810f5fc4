//! Newline-delimited JSON-RPC on a byte stream (MCP's stdio framing), read
//! with a bound, and the error replies for lines that cannot be routed:
//! shared by the shim and switchboard's own stdio and HTTP transports.

use switchboard_lines::LineReader;

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

/// The reader for MCP's stdio lines, bounded by [`MAX_MESSAGE_BYTES`]: the
/// rest of a longer line is discarded, not buffered.
pub fn line_reader() -> LineReader {
    LineReader::new(MAX_MESSAGE_BYTES)
}

/// A line without a leading UTF-8 byte-order mark, which some clients on
/// Windows write before their first message.
pub fn strip_bom(line: &[u8]) -> &[u8] {
    line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_byte_order_mark_is_dropped() {
        assert_eq!(strip_bom(b"\xEF\xBB\xBF{}"), b"{}");
        assert_eq!(strip_bom(b"{}"), b"{}");
    }
}
