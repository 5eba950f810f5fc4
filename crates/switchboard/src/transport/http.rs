//! The HTTP server: Streamable HTTP at `/mcp` (rmcp's transport, stateless,
//! JSON responses), the legacy SSE endpoints, and the [`guard`] in front of
//! all of them.
//!
//! Stateless mode serves clients that start with `initialize` (2024-11-05 …
//! 2025-11-25) and sessionless 2026-07-28 clients alike, and lets several
//! instances sit behind one load balancer.
//!
//! [`guard`]: super::guard

use std::{net::SocketAddr, sync::Arc};

use axum::{
    Router,
    body::Body,
    extract::{DefaultBodyLimit, Request},
    middleware::{self, Next},
    response::{IntoResponse, Response},
};
use http::{Method, StatusCode, header};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService, session::never::NeverSessionManager,
};
use serde_json::Value;
use switchboard_toolset::Caller;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::{MAX_MESSAGE_BYTES, error_json, guard, sse};
use crate::mcp::McpServer;

/// Builds the app for `server`, checked by `guard`.
pub fn router(
    server: McpServer,
    guard: guard::Guard,
    legacy_sse: bool,
    shutdown: CancellationToken,
) -> Router {
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None)
        .with_max_request_body_bytes(MAX_MESSAGE_BYTES)
        // The guard checks Host and Origin for every route, not only /mcp.
        .disable_allowed_hosts();
    let mcp = {
        let server = server.clone();
        StreamableHttpService::new(
            move || Ok(server.for_caller(Caller::new("http"))),
            Arc::new(NeverSessionManager::default()),
            config,
        )
    };
    let mut app = Router::new()
        .nest_service("/mcp", mcp)
        .layer(middleware::from_fn(answer_malformed_json_rpc));
    if legacy_sse {
        app = app.merge(sse::routes(server, shutdown));
    }
    app.layer(DefaultBodyLimit::max(MAX_MESSAGE_BYTES))
        .layer(middleware::from_fn_with_state(guard, guard::enforce))
}

/// Answers a POST whose body is not a JSON-RPC message with `400` and a
/// JSON-RPC error (-32700 for bad JSON, -32600 for JSON of the wrong shape),
/// as JSON-RPC asks; rmcp itself would answer `415` with plain text.
async fn answer_malformed_json_rpc(request: Request, next: Next) -> Response {
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let bytes = match axum::body::to_bytes(body, MAX_MESSAGE_BYTES).await {
        Ok(bytes) => bytes,
        Err(_) => {
            return (
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the request body exceeds {MAX_MESSAGE_BYTES} bytes"),
            )
                .into_response();
        }
    };
    if let Err(e) = serde_json::from_slice::<ClientJsonRpcMessage>(&bytes) {
        let (code, id) = match serde_json::from_slice::<Value>(&bytes) {
            Err(_) => (-32700, Value::Null),
            Ok(value) => (-32600, value.get("id").cloned().unwrap_or(Value::Null)),
        };
        let message = if code == -32700 {
            "parse error"
        } else {
            "invalid request"
        };
        let body = error_json(id, code, &format!("{message}: {e}"));
        return (
            StatusCode::BAD_REQUEST,
            [(header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response();
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

/// Binds `addr`, so that a taken port is reported before anything starts.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

/// Serves `app` until `shutdown` fires, then lets in-flight requests finish.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await
}
