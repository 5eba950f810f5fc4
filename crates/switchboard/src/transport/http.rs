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

use axum::{Router, extract::DefaultBodyLimit, middleware};
use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService, session::never::NeverSessionManager,
};
use switchboard_toolset::Caller;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::{MAX_MESSAGE_BYTES, guard, sse};
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
        .with_cancellation_token(shutdown.child_token())
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
    let mut app = Router::new().nest_service("/mcp", mcp);
    if legacy_sse {
        app = app.merge(sse::routes(server, shutdown));
    }
    app.layer(DefaultBodyLimit::max(MAX_MESSAGE_BYTES))
        .layer(middleware::from_fn_with_state(guard, guard::enforce))
}

/// Binds `addr`, so that a taken port is reported before anything starts.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

/// Serves `app` until `shutdown` fires, then lets in-flight requests finish.
pub async fn serve(listener: TcpListener, app: Router, shutdown: CancellationToken) -> std::io::Result<()> {
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await
}
