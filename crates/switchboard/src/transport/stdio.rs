//! One MCP client on stdin/stdout: newline-delimited JSON-RPC.
//!
//! The framing is ours rather than rmcp's so that every malformed line gets
//! an answer: rmcp skips lines that are not JSON, and a client waiting on
//! such a request would hang. Here a line that is not JSON gets a -32700
//! parse error, and JSON that is not a JSON-RPC message gets -32600. Only
//! protocol bytes ever reach stdout; one writer task owns it.

use rmcp::model::{ClientJsonRpcMessage, ErrorCode, ServerJsonRpcMessage};
use serde_json::Value;
use tokio::{
    io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufReader},
    sync::mpsc,
};
use tokio_util::sync::CancellationToken;

use super::{MAX_MESSAGE_BYTES, error_json, serve_channels};
use crate::lines::{Line, read_bounded_line, trim_line};
use crate::mcp::McpServer;

/// Serves `server` on the given byte streams until the client closes its
/// end, the writer fails, or `shutdown` fires.
pub async fn serve<R, W>(server: McpServer, input: R, output: W, shutdown: CancellationToken)
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (line_tx, line_rx) = mpsc::channel::<String>(64);
    let (in_tx, in_rx) = mpsc::channel::<ClientJsonRpcMessage>(64);
    let (out_tx, mut out_rx) = mpsc::channel::<ServerJsonRpcMessage>(64);

    let writer = tokio::spawn(write_lines(output, line_rx));
    let serializer = {
        let line_tx = line_tx.clone();
        tokio::spawn(async move {
            while let Some(message) = out_rx.recv().await {
                match serde_json::to_string(&message) {
                    Ok(line) => {
                        if line_tx.send(line).await.is_err() {
                            break;
                        }
                    }
                    Err(e) => tracing::error!(error = %e, "cannot serialise a reply"),
                }
            }
        })
    };
    let reader = tokio::spawn(read_lines(input, in_tx, line_tx));

    serve_channels(server, in_rx, out_tx, shutdown.child_token()).await;
    reader.abort();
    let _ = serializer.await;
    let _ = writer.await;
}

/// Reads JSON-RPC lines; answers the malformed ones directly.
async fn read_lines<R: AsyncRead + Unpin>(
    input: R,
    messages: mpsc::Sender<ClientJsonRpcMessage>,
    replies: mpsc::Sender<String>,
) {
    let mut input = BufReader::with_capacity(64 * 1024, input);
    let mut line = Vec::with_capacity(8 * 1024);
    loop {
        line.clear();
        match read_bounded_line(&mut input, &mut line).await {
            Ok(Line::Eof) => break,
            Ok(Line::TooLong) => {
                let reply = error_line(
                    Value::Null,
                    ErrorCode::INVALID_REQUEST,
                    &format!("message exceeds {MAX_MESSAGE_BYTES} bytes and was discarded"),
                );
                if replies.send(reply).await.is_err() {
                    break;
                }
            }
            Ok(Line::Complete) => {
                let text = trim_line(&line);
                if text.is_empty() {
                    continue;
                }
                match parse(text) {
                    Ok(message) => {
                        if messages.send(message).await.is_err() {
                            break;
                        }
                    }
                    Err(Some(reply)) => {
                        if replies.send(reply).await.is_err() {
                            break;
                        }
                    }
                    Err(None) => {}
                }
            }
            Err(e) => {
                tracing::debug!(error = %e, "stdin closed");
                break;
            }
        }
    }
}

/// Parses one message. `Err(Some(reply))` is the error line to send back;
/// `Err(None)` means a malformed notification, which gets no reply.
fn parse(text: &[u8]) -> Result<ClientJsonRpcMessage, Option<String>> {
    let value: Value = serde_json::from_slice(text).map_err(|e| {
        Some(error_line(
            Value::Null,
            ErrorCode::PARSE_ERROR,
            &format!("parse error: {e}"),
        ))
    })?;
    if value.is_object() && value.get("method").is_some() && value.get("id").is_none() {
        // A notification; unknown ones are ignored, as JSON-RPC requires.
        return serde_json::from_value(value).map_err(|_| None);
    }
    let id = match value.get("id") {
        Some(id @ (Value::Number(_) | Value::String(_))) => id.clone(),
        _ => Value::Null,
    };
    serde_json::from_value(value).map_err(|e| {
        Some(error_line(
            id,
            ErrorCode::INVALID_REQUEST,
            &format!("invalid request: {e}"),
        ))
    })
}

fn error_line(id: Value, code: ErrorCode, message: &str) -> String {
    error_json(id, code.0, message)
}

async fn write_lines<W: AsyncWrite + Unpin>(output: W, mut lines: mpsc::Receiver<String>) {
    let mut output = tokio::io::BufWriter::new(output);
    while let Some(mut line) = lines.recv().await {
        line.push('\n');
        if output.write_all(line.as_bytes()).await.is_err() {
            break;
        }
        // Batch whatever else is ready into the same write.
        while let Ok(mut more) = lines.try_recv() {
            more.push('\n');
            if output.write_all(more.as_bytes()).await.is_err() {
                return;
            }
        }
        if output.flush().await.is_err() {
            tracing::debug!("stdout closed; the client went away");
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_json_lines_get_a_parse_error_with_null_id() {
        let reply = parse(b"{not json").unwrap_err().unwrap();
        let v: Value = serde_json::from_str(&reply).unwrap();
        assert_eq!(v["error"]["code"], -32700);
        assert!(v["id"].is_null());
    }

    #[test]
    fn json_that_is_not_json_rpc_gets_invalid_request_with_its_id() {
        let reply = parse(br#"{"id": 7, "jsonrpc": "2.0"}"#)
            .unwrap_err()
            .unwrap();
        let v: Value = serde_json::from_str(&reply).unwrap();
        assert_eq!(
            (v["error"]["code"].as_i64(), v["id"].as_i64()),
            (Some(-32600), Some(7))
        );
        let reply = parse(b"[1,2]").unwrap_err().unwrap();
        assert!(reply.contains("-32600"));
    }
}
