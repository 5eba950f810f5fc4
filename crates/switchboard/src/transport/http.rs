//! The HTTP server: Streamable HTTP at `/mcp` (rmcp's transport, stateless,
//! JSON responses), the legacy SSE endpoints, and the [`guard`] in front of
//! all of them.
//!
//! Stateless mode serves clients that start with `initialize` (2024-11-05 …
//! 2025-11-25) and sessionless 2026-07-28 clients alike, and lets several
//! instances sit behind one load balancer.
//!
//! [`guard`]: super::guard

use std::{net::SocketAddr, sync::Arc, time::Duration};

use axum::{
    Router,
    body::Body,
    extract::{DefaultBodyLimit, Request, State},
    middleware::{self, Next},
    response::{IntoResponse, Response},
};
use http::{HeaderMap, Method, StatusCode, header};
use rmcp::model::ProtocolVersion;
use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService, session::never::NeverSessionManager,
};
use switchboard_toolset::{Caller, Grant};
use tokio::{
    net::TcpListener,
    sync::{OwnedSemaphorePermit, Semaphore},
};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;
use tower_http::timeout::RequestBodyTimeoutLayer;

use super::{
    DirectCall, MAX_MESSAGE_BYTES, error_response, guard, incoming, json_response, sse,
    stall::StallLimit, too_large_response, unread_body_response,
};
use crate::mcp::McpServer;

/// How much the HTTP transports take on at once (from `[http]`).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Requests to `/mcp` and the web view in progress (`http.max_streams`).
    pub max_streams: usize,
    /// Legacy SSE sessions open (`http.max_sse_sessions`).
    pub max_sse_sessions: usize,
    /// How long a legacy SSE session may pass without a message either way
    /// (`http.sse_idle_timeout_s`); `None` keeps it open.
    pub sse_idle: Option<Duration>,
}

/// Builds the app for `server`, with the `web` view's routes if given,
/// checked by `guard`.
pub fn router(
    server: McpServer,
    guard: guard::Guard,
    legacy_sse: bool,
    limits: Limits,
    web: Option<Router>,
    shutdown: CancellationToken,
) -> Router {
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None)
        .with_max_request_body_bytes(MAX_MESSAGE_BYTES)
        // The guard checks Host and Origin for every route, not only /mcp.
        .disable_allowed_hosts()
        // Calls rmcp still runs when the connections are dropped stop then.
        .with_cancellation_token(after_close_grace(&shutdown));
    let mcp = {
        let server = server.clone();
        StreamableHttpService::new(
            move || Ok(server.for_caller(Caller::new("http"))),
            Arc::new(NeverSessionManager::default()),
            config,
        )
    };
    let direct = server.for_caller(Caller::new("http"));
    let streams = Arc::new(Semaphore::new(limits.max_streams));
    let mut app = Router::new()
        .nest_service("/mcp", mcp)
        .layer(middleware::from_fn_with_state(direct, pre_route))
        .layer(middleware::from_fn_with_state(
            streams.clone(),
            limit_streams,
        ));
    if legacy_sse {
        app = app.merge(sse::routes(server, limits, shutdown));
    }
    if let Some(web) = web {
        // The web view's live streams (`/api/stream`) last as long as a
        // page is open: they take places like `/mcp`'s event streams.
        app = app.merge(web.layer(middleware::from_fn_with_state(streams, limit_streams)));
    }
    app.layer(DefaultBodyLimit::max(MAX_MESSAGE_BYTES))
        .layer(middleware::from_fn(refuse_announced_oversize))
        .layer(RequestBodyTimeoutLayer::new(BODY_IDLE_TIMEOUT))
        .layer(middleware::from_fn(body_deadline))
        .layer(middleware::from_fn_with_state(guard, guard::enforce))
}

/// Answers `413` at once to a request that waits for `100 Continue` before
/// sending a body its `Content-Length` says is over [`MAX_MESSAGE_BYTES`]:
/// such a client has sent nothing yet, so it reads the answer. (A body sent
/// without waiting is read up to the limit first: refusing it sooner would
/// have the client see a broken connection rather than the `413`.)
async fn refuse_announced_oversize(request: Request, next: Next) -> Response {
    let headers = request.headers();
    let waits = headers
        .get(header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    let too_long = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .is_some_and(|length| length > MAX_MESSAGE_BYTES as u64);
    if waits && too_long {
        // The web view's API answers in its own shape.
        if switchboard_web::is_web(request.uri().path()) {
            return json_response(
                StatusCode::PAYLOAD_TOO_LARGE,
                serde_json::json!({"error": format!("the request body is over {MAX_MESSAGE_BYTES} bytes")})
                    .to_string(),
            );
        }
        return too_large_response();
    }
    next.run(request).await
}

/// Admits a request to `/mcp` or the web view while fewer than
/// `http.max_streams` are in progress, and holds its place until its
/// response body is done (a long call, one that reports progress on an
/// event stream, or an open page's live stream holds it longer); beyond
/// that, `503`.
async fn limit_streams(
    State(streams): State<Arc<Semaphore>>,
    request: Request,
    next: Next,
) -> Response {
    let Ok(permit) = streams.try_acquire_owned() else {
        tracing::warn!("refused an HTTP request: http.max_streams reached");
        return busy(
            "too many HTTP requests and streams in progress (http.max_streams); try again shortly",
        );
    };
    next.run(request).await.map(|body| {
        Body::new(Guarded {
            body,
            deadline: None,
            _permit: Some(permit),
        })
    })
}

/// `503 Service Unavailable` with a JSON-RPC error body saying why, and
/// `Retry-After`.
pub fn busy(message: &str) -> Response {
    let mut response = error_response(StatusCode::SERVICE_UNAVAILABLE, -32000, message);
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, http::HeaderValue::from_static("5"));
    response
}

/// Gives a request's body [`BODY_TOTAL_TIMEOUT`] from the end of its
/// headers: a body that trickles in a byte at a time, never pausing long
/// enough for [`BODY_IDLE_TIMEOUT`], would otherwise hold its place (and at
/// `/mcp` one of `http.max_streams`) for as long as it likes.
async fn body_deadline(request: Request, next: Next) -> Response {
    let deadline = Some(Box::pin(tokio::time::sleep(BODY_TOTAL_TIMEOUT)));
    next.run(request.map(|body| {
        Body::new(Guarded {
            body,
            deadline,
            _permit: None,
        })
    }))
    .await
}

/// A body with what it must carry while it is read: a deadline after which
/// it fails (a request body), or a permit it holds until it is done or
/// dropped (a response body).
struct Guarded {
    body: Body,
    deadline: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
    _permit: Option<OwnedSemaphorePermit>,
}

impl http_body::Body for Guarded {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        if let Some(deadline) = self.deadline.as_mut()
            && deadline.as_mut().poll(cx).is_ready()
        {
            let late = std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "the body took longer than {} s to arrive",
                    BODY_TOTAL_TIMEOUT.as_secs()
                ),
            );
            return std::task::Poll::Ready(Some(Err(axum::Error::new(late))));
        }
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// Looks at each POST before rmcp does.
///
/// A plain `tools/call` (see [`DirectCall`]) from a client on a protocol
/// version before 2026-07-28 is run and answered here: in stateless JSON
/// mode rmcp would start a whole service for the one request, which cost
/// more than most tool calls. The reply is the one rmcp would send.
///
/// A body that is not a JSON-RPC message is answered with `400` and the
/// JSON-RPC error every transport gives it ([`incoming`]); rmcp itself
/// would answer `415` with plain text.
async fn pre_route(State(server): State<McpServer>, request: Request, next: Next) -> Response {
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let mut bytes = match axum::body::to_bytes(body, MAX_MESSAGE_BYTES).await {
        Ok(bytes) => bytes,
        Err(e) => return unread_body_response(&e),
    };
    // A byte-order mark is read past, as stdio and the shim read past it
    // ([`incoming`] does); rmcp's parser would refuse it.
    if bytes.starts_with(b"\xEF\xBB\xBF") {
        bytes = bytes.slice(3..);
    }
    if direct_call_allowed(&parts.headers)
        && let Ok(call) = serde_json::from_slice::<DirectCall>(&bytes)
    {
        let body = match parts.extensions.get::<Arc<Grant>>() {
            Some(grant) => call.run(&server.with_grant(grant.clone())).await,
            None => call.run(&server).await,
        };
        return json_response(StatusCode::OK, body);
    }
    match incoming(&bytes) {
        Ok(_) => {}
        Err(Some(rejection)) => return json_response(StatusCode::BAD_REQUEST, rejection.to_json()),
        // A notification rmcp cannot read: accepted, and dropped.
        Err(None) => return StatusCode::ACCEPTED.into_response(),
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

/// Whether rmcp would accept these headers for a stateless request and run
/// it as a client on a version [`DirectCall::serves`]: it accepts both JSON
/// and SSE, sends JSON, and names a known protocol version. Anything less
/// plain (no version header, `q` weights) is left to rmcp to judge.
fn direct_call_allowed(headers: &HeaderMap) -> bool {
    fn essence(value: &str) -> &str {
        value.split(';').next().unwrap_or("").trim()
    }
    let json = |value: &str| value.eq_ignore_ascii_case("application/json");
    let version_ok = headers
        .get("mcp-protocol-version")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            ProtocolVersion::KNOWN_VERSIONS
                .iter()
                .find(|k| k.as_str() == v)
        })
        .is_some_and(DirectCall::serves);
    let content_json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| json(essence(v)));
    let mut accepts = (false, false);
    for value in headers.get_all(header::ACCEPT) {
        let Ok(value) = value.to_str() else {
            return false;
        };
        if value.contains("q=") || value.contains('"') {
            return false;
        }
        for entry in value.split(',') {
            let entry = essence(entry);
            accepts.0 |= json(entry);
            accepts.1 |= entry.eq_ignore_ascii_case("text/event-stream");
        }
    }
    version_ok && content_json && accepts == (true, true)
}

/// Binds `addr`, so that a taken port is reported before anything starts.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

/// How long a client may take over a request's headers, and how long a
/// kept-alive connection may sit idle before its next request; then the
/// connection is closed. `axum::serve` sets no timer, so a client sending
/// half a request held its connection for good.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a request body may pause between two pieces before the request
/// is answered `400` and its connection closed.
const BODY_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a whole request body may take to arrive (16 MiB at 280 KB/s)
/// before the request is answered `400` and its connection closed.
const BODY_TOTAL_TIMEOUT: Duration = Duration::from_secs(60);

/// How long responses already under way get to finish once the transports
/// stop (the drain before that waited for calls); then every connection is
/// dropped, and with it any call still running.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// A token cancelled [`CLOSE_GRACE`] after `shutdown`: rmcp's service
/// writes a finished call's reply after the drain counted it done, so
/// cancelling it with the transports could cut that reply off.
fn after_close_grace(shutdown: &CancellationToken) -> CancellationToken {
    let later = CancellationToken::new();
    let (shutdown, cancel) = (shutdown.clone(), later.clone());
    tokio::spawn(async move {
        shutdown.cancelled().await;
        tokio::time::sleep(CLOSE_GRACE).await;
        cancel.cancel();
    });
    later
}

/// Serves `app` over HTTP/1.1 until `shutdown` fires, then stops accepting,
/// gives responses under way [`CLOSE_GRACE`] and drops what is left. A
/// connection whose client takes none of a response for `write_timeout`
/// is dropped ([`StallLimit`]).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    write_timeout: Option<Duration>,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    let connections = hyper_util::server::graceful::GracefulShutdown::new();
    let mut tasks = tokio::task::JoinSet::new();
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    accept_failed(e).await;
                    continue;
                }
            },
            () = shutdown.cancelled() => break,
        };
        // Replies are small and each is written whole; Nagle would hold
        // the last segment of one back until the client acknowledges.
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY");
        }
        // Who is asking, for what counts per client (wrong tokens).
        let app = app.clone();
        let service = hyper_util::service::TowerToHyperService::new(tower::service_fn(
            move |mut request: http::Request<hyper::body::Incoming>| {
                request
                    .extensions_mut()
                    .insert(axum::extract::ConnectInfo(peer));
                app.clone().oneshot(request)
            },
        ));
        let connection = connections.watch(builder.serve_connection(
            hyper_util::rt::TokioIo::new(StallLimit::new(stream, write_timeout)),
            service,
        ));
        tasks.spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "HTTP connection ended with an error");
            }
        });
        // Reap finished connections so the set holds only open ones.
        while tasks.try_join_next().is_some() {}
    }
    drop(listener);
    if tokio::time::timeout(CLOSE_GRACE, connections.shutdown())
        .await
        .is_err()
    {
        tracing::info!(
            open = tasks.len(),
            "closing the HTTP connections still open (idle or with a response under way)"
        );
    }
    tasks.shutdown().await;
    Ok(())
}

/// Waits out a failed `accept`: a connection that failed before it was
/// taken costs nothing, but running out of file descriptors would spin.
async fn accept_failed(error: std::io::Error) {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(
        error.kind(),
        ConnectionAborted | ConnectionRefused | ConnectionReset
    ) {
        return;
    }
    tracing::error!(error = %error, "cannot accept an HTTP connection; retrying in a second");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, value.parse().unwrap());
        }
        map
    }

    #[test]
    fn only_plain_requests_on_older_versions_skip_rmcp() {
        let plain = [
            ("content-type", "application/json; charset=utf-8"),
            ("accept", "application/json, text/event-stream"),
            ("mcp-protocol-version", "2025-06-18"),
        ];
        assert!(direct_call_allowed(&headers(&plain)));
        let split_accept = [
            plain[0],
            plain[2],
            ("accept", "application/json"),
            ("accept", "text/event-stream"),
        ];
        assert!(direct_call_allowed(&headers(&split_accept)));
        for (name, value) in [
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-protocol-version", "1999-01-01"),
            ("accept", "application/json, text/event-stream;q=0"),
            ("accept", "application/json"),
            ("content-type", "text/plain"),
        ] {
            let mut changed = headers(&plain);
            changed.insert(name, value.parse().unwrap());
            assert!(!direct_call_allowed(&changed), "{name}: {value}");
        }
        assert!(!direct_call_allowed(&headers(&plain[..2])));
    }
}
