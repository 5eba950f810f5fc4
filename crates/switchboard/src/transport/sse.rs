//! The legacy HTTP+SSE transport (MCP 2024-11-05), with FastMCP's paths.
//!
//! `GET /sse` opens a stream whose first event, `endpoint`, carries
//! `/messages/?session_id=<id>`. The client POSTs each JSON-RPC message there
//! (answered `202 Accepted`) and reads the replies as `message` events on
//! the stream. rmcp no longer ships this transport, so this module is a thin
//! adapter: per stream it runs an ordinary rmcp server over a pair of
//! channels, with POST bodies in and SSE events out.
//!
//! A session belongs to the token that opened it (when tokens are
//! configured): its calls run under that token's grant, and a POST with
//! another token is refused.

use std::{
    collections::HashMap,
    convert::Infallible,
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{
    Extension, Router,
    body::Bytes,
    extract::{Query, State},
    response::{
        IntoResponse, Response,
        sse::{Event, KeepAlive, Sse},
    },
    routing::{get, post},
};
use futures::{StreamExt, stream};
use http::StatusCode;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use serde::Deserialize;
use switchboard_toolset::{Caller, Grant, Session};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;

use super::{error_response as reply, incoming, json_response, serve_channels};
use crate::mcp::McpServer;

/// Each session's inbox, and the grant of the token that opened it.
type Sessions =
    Arc<Mutex<HashMap<String, (mpsc::Sender<ClientJsonRpcMessage>, Option<Arc<Grant>>)>>>;

#[derive(Clone)]
struct SseState {
    server: McpServer,
    sessions: Sessions,
    shutdown: CancellationToken,
}

/// The `/sse` and `/messages/` routes.
pub fn routes(server: McpServer, shutdown: CancellationToken) -> Router {
    let state = SseState {
        server,
        sessions: Sessions::default(),
        shutdown,
    };
    Router::new()
        .route("/sse", get(connect))
        .route("/messages/", post(message))
        .route("/messages", post(message))
        .with_state(state)
}

/// Ends a session when its stream is dropped (the client disconnected).
struct SessionGuard {
    id: String,
    sessions: Sessions,
    session: CancellationToken,
    client: Arc<Session>,
}

impl Drop for SessionGuard {
    fn drop(&mut self) {
        self.session.cancel();
        self.client.close();
        self.sessions
            .lock()
            .expect("sse sessions lock")
            .remove(&self.id);
        tracing::debug!(session = %self.id, "legacy SSE session closed");
    }
}

async fn connect(State(state): State<SseState>, grant: Option<Extension<Arc<Grant>>>) -> Response {
    let grant = grant.map(|Extension(grant)| grant);
    let id = uuid::Uuid::new_v4().simple().to_string();
    let (in_tx, in_rx) = mpsc::channel::<ClientJsonRpcMessage>(64);
    let (out_tx, out_rx) = mpsc::channel::<ServerJsonRpcMessage>(64);
    state
        .sessions
        .lock()
        .expect("sse sessions lock")
        .insert(id.clone(), (in_tx, grant.clone()));
    let session = state.shutdown.child_token();
    // One agent per stream: its identity is the name it first sends under.
    let client = Arc::new(Session::new(format!("sse {}", &id[..8])));
    let server = state.server.for_caller(
        Caller::new(client.label())
            .in_session(client.clone())
            .with_grant(grant),
    );
    tokio::spawn(serve_channels(server, in_rx, out_tx, session.clone()));
    tracing::debug!(session = %id, "legacy SSE session opened");
    let guard = SessionGuard {
        id: id.clone(),
        sessions: state.sessions.clone(),
        session: session.clone(),
        client,
    };
    let endpoint = Event::default()
        .event("endpoint")
        .data(format!("/messages/?session_id={id}"));
    let messages = ReceiverStream::new(out_rx).map(move |message| {
        let _alive = &guard;
        let data = serde_json::to_string(&message).unwrap_or_default();
        Ok::<_, Infallible>(Event::default().event("message").data(data))
    });
    // The stream ends when the session's server has flushed its last replies
    // and stopped (at shutdown, or when the client disconnects).
    let events = stream::once(async { Ok(endpoint) }).chain(messages);
    Sse::new(events)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

#[derive(Deserialize)]
struct SessionQuery {
    session_id: Option<String>,
}

async fn message(
    State(state): State<SseState>,
    Query(query): Query<SessionQuery>,
    grant: Option<Extension<Arc<Grant>>>,
    body: Bytes,
) -> Response {
    let Some(id) = query.session_id else {
        return reply(
            StatusCode::BAD_REQUEST,
            -32600,
            "the session_id query parameter is missing; use the endpoint URL from GET /sse",
        );
    };
    let sender = state
        .sessions
        .lock()
        .expect("sse sessions lock")
        .get(&id)
        .cloned();
    let Some((sender, owner)) = sender else {
        return reply(
            StatusCode::NOT_FOUND,
            -32600,
            "unknown session_id; open GET /sse for a new session",
        );
    };
    let same_token = match (&owner, &grant) {
        (None, None) => true,
        (Some(owner), Some(Extension(grant))) => Arc::ptr_eq(owner, grant),
        _ => false,
    };
    if !same_token {
        tracing::warn!(
            session = %id,
            owner = owner.as_ref().map(|g| g.name()),
            token = grant.as_ref().map(|Extension(g)| g.name()),
            "refused a POST to a session opened with another token"
        );
        return reply(
            StatusCode::FORBIDDEN,
            -32600,
            "this session was opened with another token; POST with the token you opened GET /sse with",
        );
    }
    let message = match incoming(&body) {
        Ok(message) => message,
        Err(Some(rejection)) => return json_response(StatusCode::BAD_REQUEST, rejection.to_json()),
        Err(None) => return (StatusCode::ACCEPTED, "Accepted").into_response(),
    };
    if sender.send(message).await.is_err() {
        return reply(
            StatusCode::NOT_FOUND,
            -32600,
            "the session has ended; open GET /sse for a new session",
        );
    }
    (StatusCode::ACCEPTED, "Accepted").into_response()
}
