//! How agents reach the MCP server. Each transport turns its wire format into
//! rmcp messages for an [`McpServer`](crate::mcp::McpServer) and knows nothing
//! about the toolsets behind it.
//!
//! - [`stdio`] — one client on stdin/stdout, newline-delimited JSON-RPC.
//! - [`http`] — the axum app: Streamable HTTP at `/mcp`, the request guard.
//! - [`sse`] — the legacy HTTP+SSE endpoints (`/sse`, `/messages/`).
//! - [`guard`] — DNS-rebinding and bearer-token checks for every HTTP route.
//! - [`relay`] — the relay socket, for `switchboard shim`, `tail` and `say`.

pub mod guard;
pub mod http;
pub mod relay;
pub mod sse;
pub mod stdio;

use futures::SinkExt;
use rmcp::{
    model::{ClientJsonRpcMessage, ServerJsonRpcMessage},
    service::serve_server_with_ct,
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::{CancellationToken, PollSender};

use crate::mcp::McpServer;

/// Largest JSON-RPC message accepted on any transport. Generous on purpose:
/// an oversized tool argument should reach the tool and get its specific
/// error ("text is 10485760 bytes; the limit is ..."), not a framing error.
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// A JSON-RPC error object for a message the server could not route, as one
/// line of JSON. `id` is `null` when the request's id could not be read.
pub fn error_json(id: serde_json::Value, code: i32, message: &str) -> String {
    serde_json::json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
        .to_string()
}

/// An HTTP response carrying [`error_json`] with no id.
pub fn error_response(
    status: ::http::StatusCode,
    code: i32,
    message: &str,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    (
        status,
        [(::http::header::CONTENT_TYPE, "application/json")],
        error_json(serde_json::Value::Null, code, message),
    )
        .into_response()
}

/// Runs `server` for one client whose messages arrive on `incoming` and whose
/// replies go to `outgoing` (stdio and legacy SSE both frame messages
/// themselves and meet rmcp here). Returns when the client is gone or
/// `session` is cancelled; on cancellation rmcp first flushes the replies of
/// calls in flight, then drops `outgoing`.
pub async fn serve_channels(
    server: McpServer,
    incoming: mpsc::Receiver<ClientJsonRpcMessage>,
    outgoing: mpsc::Sender<ServerJsonRpcMessage>,
    session: CancellationToken,
) {
    let sink = PollSender::new(outgoing)
        .sink_map_err(|_| std::io::Error::from(std::io::ErrorKind::BrokenPipe));
    match serve_server_with_ct(server, (sink, ReceiverStream::new(incoming)), session).await {
        Ok(running) => {
            let _ = running.waiting().await;
        }
        Err(e) => tracing::debug!(error = %e, "client left before initializing"),
    }
}
