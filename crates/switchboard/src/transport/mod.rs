//! How agents reach the MCP server. Each transport turns its wire format into
//! rmcp messages for an [`McpServer`](crate::mcp::McpServer) and knows nothing
//! about the toolsets behind it.
//!
//! - [`stdio`] — one client on stdin/stdout, newline-delimited JSON-RPC.
//! - [`http`] — the axum app: Streamable HTTP at `/mcp`, the request guard.
//! - [`sse`] — the legacy HTTP+SSE endpoints (`/sse`, `/messages/`).
//! - [`guard`] — DNS-rebinding and bearer-token checks for every HTTP route.
//! - [`stall`] — HTTP connections whose writes give up on a client that
//!   stopped reading.
//! - [`relay`] — the relay socket, for `switchboard shim`, `tail` and `say`.

pub mod guard;
pub mod http;
pub mod relay;
pub mod sse;
pub mod stall;
pub mod stdio;

use futures::{Sink, Stream};
use rmcp::{
    model::{
        CallToolRequestMethod, CallToolRequestParams, ClientJsonRpcMessage, ClientRequest,
        CompleteRequestMethod, CompleteRequestParams, ConstString, GetPromptRequestMethod,
        GetPromptRequestParams, InitializeRequestParams, InitializeResultMethod, JsonObject,
        JsonRpcMessage, JsonRpcVersion2_0, ProtocolVersion, ReadResourceRequestMethod,
        ReadResourceRequestParams, RequestId, ServerJsonRpcMessage, ServerResult,
        SubscribeRequestMethod, SubscribeRequestParams, UnsubscribeRequestMethod,
        UnsubscribeRequestParams,
    },
    service::serve_server_with_ct,
};
use serde::Deserialize;
use tokio::sync::mpsc;
use tokio_util::sync::{CancellationToken, PollSender};

use crate::mcp::McpServer;

pub use switchboard_jsonrpc::MAX_MESSAGE_BYTES;
use switchboard_jsonrpc::{Kind, Rejection, classify, error_json};

/// Notifications queued for one client before the rest are dropped (push
/// is best effort: what it drops stays unread).
pub const NOTIFICATION_QUEUE: usize = 256;

/// `note` as the JSON-RPC notification its client reads.
pub fn notification_message(note: switchboard_toolset::Notification) -> serde_json::Value {
    serde_json::json!({"jsonrpc": "2.0", "method": note.method, "params": note.params})
}

/// Whether `message` answers `initialize`: notifications may follow it.
pub fn answers_initialize(message: &ServerJsonRpcMessage) -> bool {
    matches!(message, JsonRpcMessage::Response(response)
        if matches!(response.result, ServerResult::InitializeResult(_)))
}

/// An HTTP response carrying [`error_json`] with no id.
pub fn error_response(
    status: ::http::StatusCode,
    code: i32,
    message: &str,
) -> axum::response::Response {
    json_response(status, error_json(None, code, message))
}

/// `413` for a body over [`MAX_MESSAGE_BYTES`], with the JSON-RPC error
/// stdio writes for such a line.
pub fn too_large_response() -> axum::response::Response {
    json_response(
        ::http::StatusCode::PAYLOAD_TOO_LARGE,
        Rejection::too_long().to_json(),
    )
}

/// The reply to a request body that could not be read whole: `413` past
/// [`MAX_MESSAGE_BYTES`]; otherwise (the client paused too long, or hung
/// up) `400` naming what went wrong.
pub fn unread_body_response(error: &axum::Error) -> axum::response::Response {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = source {
        if e.is::<http_body_util::LengthLimitError>() {
            return too_large_response();
        }
        source = e.source();
    }
    error_response(
        ::http::StatusCode::BAD_REQUEST,
        -32600,
        &format!("cannot read the request body: {error}"),
    )
}

/// An HTTP response with a JSON body. It also answers requests the guard
/// refuses before they reach the web view, so it carries the headers that
/// keep a browser from sniffing, framing or running it.
pub fn json_response(status: ::http::StatusCode, body: String) -> axum::response::Response {
    use ::http::header;
    use axum::response::IntoResponse;
    (
        status,
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; frame-ancestors 'none'",
            ),
        ],
        body,
    )
        .into_response()
}

/// One incoming message, judged by [`classify`] (as every transport and
/// the shim judge it) and then read as rmcp's message. `Err(Some(_))` is
/// the error reply to send back: the classifier's, invalid params for a
/// well-formed request whose params its method cannot take, or method not
/// found for a method rmcp does not know. `Err(None)` is a notification or
/// response rmcp cannot read, which gets no reply.
pub fn incoming(bytes: &[u8]) -> Result<ClientJsonRpcMessage, Option<Rejection>> {
    let message = classify(bytes).map_err(Some)?;
    let kind = message.kind().clone();
    let message = serde_json::from_value(message.into_value()).map_err(|e| match &kind {
        Kind::Request(id) => Some(Rejection::invalid_params(id.clone(), e)),
        Kind::Notification | Kind::Response => {
            tracing::debug!(error = %e, "ignored a notification or response of an unknown shape");
            None
        }
    })?;
    // rmcp reads any request it has no type for as a custom request, which
    // no toolset serves: an unknown method, or one of MCP's whose params
    // do not fit it.
    if let (Kind::Request(id), JsonRpcMessage::Request(request)) = (kind, &message)
        && let ClientRequest::CustomRequest(custom) = &request.request
    {
        return Err(Some(
            match misfit_params(&custom.method, custom.params.as_ref()) {
                Some(problem) => Rejection::invalid_params(id, problem),
                None => Rejection::method_not_found(id, &custom.method),
            },
        ));
    }
    Ok(message)
}

/// Why `params` do not fit `method`, when it is one of MCP's methods whose
/// requests rmcp reads into types.
fn misfit_params(method: &str, params: Option<&serde_json::Value>) -> Option<String> {
    fn problem<T: serde::de::DeserializeOwned>(
        method: &str,
        params: Option<&serde_json::Value>,
    ) -> String {
        match params.map(T::deserialize) {
            None => format!("{method} needs params"),
            Some(Err(e)) => format!("{method}: {e}"),
            Some(Ok(_)) => format!("params do not fit {method}"),
        }
    }
    Some(match method {
        CallToolRequestMethod::VALUE => {
            match switchboard_jsonrpc::call_params(params.and_then(|p| p.as_object())) {
                Err(problem) => problem.to_owned(),
                Ok(_) => problem::<CallToolRequestParams>(method, params),
            }
        }
        InitializeResultMethod::VALUE => problem::<InitializeRequestParams>(method, params),
        GetPromptRequestMethod::VALUE => problem::<GetPromptRequestParams>(method, params),
        ReadResourceRequestMethod::VALUE => problem::<ReadResourceRequestParams>(method, params),
        SubscribeRequestMethod::VALUE => problem::<SubscribeRequestParams>(method, params),
        UnsubscribeRequestMethod::VALUE => problem::<UnsubscribeRequestParams>(method, params),
        CompleteRequestMethod::VALUE => problem::<CompleteRequestParams>(method, params),
        _ => return None,
    })
}

/// Runs `server` for one client whose messages arrive on `incoming` and whose
/// replies go to `outgoing` (stdio and legacy SSE both frame messages
/// themselves and meet rmcp here; SSE queues them boxed, which keeps each
/// session's channel blocks small). Returns when the client is gone or
/// `session` is cancelled; on cancellation rmcp first flushes the replies of
/// calls in flight, then drops `outgoing`.
pub async fn serve_channels<T>(
    server: McpServer,
    incoming: impl Stream<Item = ClientJsonRpcMessage> + Send + Unpin + 'static,
    outgoing: mpsc::Sender<T>,
    session: CancellationToken,
) where
    T: From<ServerJsonRpcMessage> + Send + 'static,
{
    let sink = ChannelSink(PollSender::new(outgoing));
    match serve_server_with_ct(server, (sink, incoming), session).await {
        Ok(running) => {
            let _ = running.waiting().await;
        }
        Err(e) => tracing::debug!(error = %e, "client left before initializing"),
    }
}

/// A channel's sending end as the sink rmcp writes a session's messages
/// to. Once the receiver is gone every send fails as a broken pipe, however
/// often it is tried: rmcp sends each reply from its own task, and the
/// `futures` combinators that map a sink's error panic when polled again
/// after their first.
struct ChannelSink<T: Send + 'static>(PollSender<T>);

impl<T: From<ServerJsonRpcMessage> + Send + 'static> Sink<ServerJsonRpcMessage> for ChannelSink<T> {
    type Error = std::io::Error;

    fn poll_ready(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.0.poll_reserve(cx).map_err(|_| broken_pipe())
    }

    fn start_send(
        mut self: std::pin::Pin<&mut Self>,
        message: ServerJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        self.0
            .send_item(T::from(message))
            .map_err(|_| broken_pipe())
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn poll_close(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.0.close();
        std::task::Poll::Ready(Ok(()))
    }
}

fn broken_pipe() -> std::io::Error {
    std::io::Error::from(std::io::ErrorKind::BrokenPipe)
}

/// A `tools/call` request that has nothing but a name and arguments, which a
/// transport may run without rmcp's service loop (see [`DirectCall::serves`]):
/// parsed in one typed pass and answered exactly as rmcp would answer it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DirectCall {
    #[serde(rename = "jsonrpc")]
    _version: JsonRpcVersion2_0,
    id: RequestId,
    #[serde(rename = "method")]
    _method: CallToolRequestMethod,
    params: DirectCallParams,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DirectCallParams {
    name: String,
    arguments: Option<JsonObject>,
}

impl DirectCall {
    /// Whether direct calls may serve a client on `version`: rmcp answers
    /// 2026-07-28 and later differently (per-request lifecycle, result
    /// types), so those keep going through it.
    pub fn serves(version: &ProtocolVersion) -> bool {
        // ISO dates compare as strings, as in rmcp's own version checks.
        version.as_str() < ProtocolVersion::V_2026_07_28.as_str()
    }

    /// Runs the call and returns its reply line, shaped as rmcp shapes it
    /// for a peer on a protocol version before 2026-07-28.
    pub async fn run(self, server: &McpServer) -> String {
        let arguments = self.params.arguments.unwrap_or_default();
        let message = match server.run(&self.params.name, arguments).await {
            Ok(outcome) => {
                if let Some(result) = switchboard_toolset::call_result_json(&outcome) {
                    let id = serde_json::to_string(&self.id).unwrap_or_default();
                    return format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{result}}}"#);
                }
                let mut result =
                    ServerResult::CallToolResult(switchboard_toolset::into_call_result(outcome));
                result.strip_result_type_for_legacy_peer();
                result.strip_non_object_output_for_legacy_peer();
                ServerJsonRpcMessage::response(result, self.id)
            }
            Err(error) => ServerJsonRpcMessage::error(error, Some(self.id)),
        };
        serde_json::to_string(&message).unwrap_or_else(|e| {
            tracing::error!(error = %e, "cannot serialise a reply");
            String::new()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::SinkExt;
    use rmcp::model::{NumberOrString, ServerResult};

    fn pong(id: i64) -> ServerJsonRpcMessage {
        ServerJsonRpcMessage::response(ServerResult::empty(()), NumberOrString::Number(id))
    }

    /// Every send after the receiver is gone fails as a broken pipe, from
    /// however many tasks: none panics.
    #[tokio::test]
    async fn a_sink_whose_receiver_is_gone_keeps_failing_without_panicking() {
        let (tx, rx) = mpsc::channel::<ServerJsonRpcMessage>(1);
        let sink = std::sync::Arc::new(tokio::sync::Mutex::new(ChannelSink(PollSender::new(tx))));
        sink.lock().await.send(pong(1)).await.unwrap();
        drop(rx);
        let sends: Vec<_> = (2..20)
            .map(|id| {
                let sink = sink.clone();
                tokio::spawn(async move { sink.lock().await.send(pong(id)).await })
            })
            .collect();
        for send in sends {
            let failed = send.await.expect("no panic").unwrap_err();
            assert_eq!(failed.kind(), std::io::ErrorKind::BrokenPipe);
        }
    }
}
