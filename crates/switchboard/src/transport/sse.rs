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
//!
//! Sessions are bounded: at most `http.max_sse_sessions` are open (`GET
//! /sse` beyond that is a `503`), and one that carries no message either way
//! for `http.sse_idle_timeout_s` (keep-alive comments do not count) has its
//! stream ended; its id then answers `404`. Nothing of rmcp's runs for a
//! session before its first POST.

use std::{
    collections::HashMap,
    convert::Infallible,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use axum::{
    Extension, Router,
    body::Bytes,
    extract::{Query, State, rejection::BytesRejection},
    response::{
        IntoResponse, Response,
        sse::{Event, KeepAlive, Sse},
    },
    routing::{get, post},
};
use futures::{StreamExt, stream};
use http::StatusCode;
use rmcp::model::{ClientJsonRpcMessage, ClientNotification, JsonRpcMessage, ServerJsonRpcMessage};
use serde::Deserialize;
use switchboard_toolset::{Caller, Grant, Notification, Session};
use tokio::{
    sync::{OwnedSemaphorePermit, Semaphore, mpsc},
    time::Instant,
};
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;

use super::{
    NOTIFICATION_QUEUE, answers_initialize, error_response as reply, http::Limits, http::busy,
    incoming, json_response, notification_message, serve_channels, too_large_response,
};
use crate::mcp::McpServer;

/// Messages queued towards a session's server and towards its stream. They
/// are boxed: a channel's first block holds 32 of its items, and unboxed
/// rmcp messages made that a few dozen KiB per session.
type Inbox = mpsc::Sender<Box<ClientJsonRpcMessage>>;
type Outbox = mpsc::Receiver<Box<ServerJsonRpcMessage>>;

/// The open sessions by id.
type Sessions = Arc<Mutex<HashMap<String, Entry>>>;

/// One open session, as a POST finds it.
#[derive(Clone)]
struct Entry {
    inbox: Inbox,
    /// The grant of the token that opened it.
    owner: Option<Arc<Grant>>,
    activity: Arc<Activity>,
    unanswered: Arc<Unanswered>,
}

/// The most requests of one session whose replies its stream has not
/// taken yet. A client that POSTs and never reads its stream would
/// otherwise have the daemon hold every reply.
const MAX_UNANSWERED: usize = 64;

/// How many of a session's requests wait for their replies to leave on its
/// stream.
#[derive(Default)]
struct Unanswered(AtomicUsize);

impl Unanswered {
    /// Counts a request in, unless [`MAX_UNANSWERED`] already wait.
    fn admit(&self) -> bool {
        self.0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < MAX_UNANSWERED).then_some(n + 1)
            })
            .is_ok()
    }

    /// A reply left on the stream, or a request was cancelled (it may get
    /// none).
    fn settled(&self) {
        let _ = self
            .0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
    }
}

/// When a session last carried a message, either way.
struct Activity(Mutex<Instant>);

impl Activity {
    fn new() -> Self {
        Self(Mutex::new(Instant::now()))
    }

    fn touch(&self) {
        *self.0.lock().expect("sse activity lock") = Instant::now();
    }

    fn last(&self) -> Instant {
        *self.0.lock().expect("sse activity lock")
    }

    /// Resolves once `idle` has passed since the last message; never
    /// without a limit.
    async fn expired(&self, idle: Option<Duration>) {
        let Some(idle) = idle else {
            return std::future::pending().await;
        };
        loop {
            let deadline = self.last() + idle;
            if Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(deadline).await;
        }
    }
}

#[derive(Clone)]
struct SseState {
    server: McpServer,
    sessions: Sessions,
    /// One permit per open session, `http.max_sse_sessions` in all.
    permits: Arc<Semaphore>,
    idle: Option<Duration>,
    shutdown: CancellationToken,
}

/// The `/sse` and `/messages/` routes.
pub fn routes(server: McpServer, limits: Limits, shutdown: CancellationToken) -> Router {
    let state = SseState {
        server,
        sessions: Sessions::default(),
        permits: Arc::new(Semaphore::new(limits.max_sse_sessions)),
        idle: limits.sse_idle,
        shutdown,
    };
    Router::new()
        .route("/sse", get(connect))
        .route("/messages/", post(message))
        .route("/messages", post(message))
        .with_state(state)
}

/// Ends a session when its stream is dropped (the client disconnected, or
/// the session expired), which frees its place.
struct SessionGuard {
    id: String,
    sessions: Sessions,
    session: CancellationToken,
    client: Arc<Session>,
    _permit: OwnedSemaphorePermit,
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
    let Ok(permit) = state.permits.clone().try_acquire_owned() else {
        tracing::warn!("refused GET /sse: http.max_sse_sessions reached");
        return busy(
            "too many legacy SSE sessions are open (http.max_sse_sessions); close one or try again later",
        );
    };
    let grant = grant.map(|Extension(grant)| grant);
    let id = uuid::Uuid::new_v4().simple().to_string();
    let (in_tx, mut in_rx) = mpsc::channel::<Box<ClientJsonRpcMessage>>(64);
    let (out_tx, out_rx) = mpsc::channel::<Box<ServerJsonRpcMessage>>(64);
    let activity = Arc::new(Activity::new());
    let unanswered = Arc::new(Unanswered::default());
    let entry = Entry {
        inbox: in_tx,
        owner: grant.clone(),
        activity: activity.clone(),
        unanswered: unanswered.clone(),
    };
    state
        .sessions
        .lock()
        .expect("sse sessions lock")
        .insert(id.clone(), entry);
    let session = state.shutdown.child_token();
    // One agent per stream: its identity is the name it first sends under,
    // and what toolsets tell it goes out on the stream.
    let (note_tx, note_rx) = mpsc::channel::<Notification>(NOTIFICATION_QUEUE);
    let client = Arc::new(Session::new(format!("sse {}", &id[..8])).with_notifications(note_tx));
    state.server.registry().open_session(&client);
    let server = state.server.for_caller(
        Caller::new(client.label())
            .in_session(client.clone())
            .with_grant(grant),
    );
    {
        let session = session.clone();
        tokio::spawn(async move {
            // rmcp's service is set up at the first message: until then a
            // stream costs this small task and its channels.
            let first = tokio::select! {
                first = in_rx.recv() => first,
                () = session.cancelled() => None,
            };
            let Some(first) = first else {
                return; // dropping `out_tx` ends the stream
            };
            let messages =
                stream::iter([*first]).chain(ReceiverStream::new(in_rx).map(|message| *message));
            Box::pin(serve_channels(server, messages, out_tx, session)).await;
        });
    }
    tracing::debug!(session = %id, "legacy SSE session opened");
    let guard = SessionGuard {
        id: id.clone(),
        sessions: state.sessions.clone(),
        session,
        client,
        _permit: permit,
    };
    let endpoint = Event::default()
        .event("endpoint")
        .data(format!("/messages/?session_id={id}"));
    let idle = state.idle;
    let expired = {
        let activity = activity.clone();
        let id = id.clone();
        async move {
            activity.expired(idle).await;
            tracing::info!(session = %id, idle_s = idle.map(|d| d.as_secs()), "legacy SSE session closed: no message within http.sse_idle_timeout_s");
        }
    };
    let messages = events(out_rx, note_rx, activity, unanswered, guard);
    // The stream ends when the session's server has flushed its last replies
    // and stopped (at shutdown, or when the client disconnects), or when the
    // session has been idle too long.
    let events = stream::once(async { Ok(endpoint) })
        .chain(messages)
        .take_until(Box::pin(expired));
    Sse::new(events)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

/// The session's messages as `message` events: rmcp's replies, and once
/// `initialize` is answered, toolsets' notifications; each counts as
/// activity. The stream owns `guard`: the session lasts as long as it does.
fn events(
    out: Outbox,
    notes: mpsc::Receiver<Notification>,
    activity: Arc<Activity>,
    unanswered: Arc<Unanswered>,
    guard: SessionGuard,
) -> impl futures::Stream<Item = Result<Event, Infallible>> {
    struct Streams {
        out: Outbox,
        notes: mpsc::Receiver<Notification>,
        initialized: bool,
        activity: Arc<Activity>,
        unanswered: Arc<Unanswered>,
        _guard: SessionGuard,
    }
    let streams = Streams {
        out,
        notes,
        initialized: false,
        activity,
        unanswered,
        _guard: guard,
    };
    stream::unfold(streams, |mut s| async move {
        let data = tokio::select! {
            biased;
            message = s.out.recv() => {
                let message = message?;
                s.initialized |= answers_initialize(&message);
                if matches!(*message, JsonRpcMessage::Response(_) | JsonRpcMessage::Error(_)) {
                    s.unanswered.settled();
                }
                serde_json::to_string(&message)
            }
            Some(note) = s.notes.recv(), if s.initialized => {
                serde_json::to_string(&notification_message(note))
            }
        };
        s.activity.touch();
        let event = Event::default()
            .event("message")
            .data(data.unwrap_or_default());
        Some((Ok(event), s))
    })
}

#[derive(Deserialize)]
struct SessionQuery {
    session_id: Option<String>,
}

async fn message(
    State(state): State<SseState>,
    Query(query): Query<SessionQuery>,
    grant: Option<Extension<Arc<Grant>>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let body = match body {
        Ok(body) => body,
        Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            return too_large_response();
        }
        Err(rejection) => {
            return reply(
                rejection.status(),
                -32600,
                &format!("cannot read the request body: {}", rejection.body_text()),
            );
        }
    };
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
    let Some(Entry {
        inbox,
        owner,
        activity,
        unanswered,
    }) = sender
    else {
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
    match &message {
        JsonRpcMessage::Request(_) if !unanswered.admit() => {
            tracing::warn!(session = %id, "refused a POST: the session's stream has not taken the replies of {MAX_UNANSWERED} requests");
            return busy(&format!(
                "this session has {MAX_UNANSWERED} requests whose replies its event stream (GET /sse) has not taken yet; read the stream before sending more"
            ));
        }
        JsonRpcMessage::Notification(n)
            if matches!(n.notification, ClientNotification::CancelledNotification(_)) =>
        {
            unanswered.settled();
        }
        _ => {}
    }
    activity.touch();
    if inbox.send(Box::new(message)).await.is_err() {
        return reply(
            StatusCode::NOT_FOUND,
            -32600,
            "the session has ended; open GET /sse for a new session",
        );
    }
    (StatusCode::ACCEPTED, "Accepted").into_response()
}
