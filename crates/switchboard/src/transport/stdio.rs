//! One MCP client on stdin/stdout: newline-delimited JSON-RPC.
//!
//! The framing is ours rather than rmcp's so that every malformed line gets
//! an answer: rmcp skips lines that are not JSON, and a client waiting on
//! such a request would hang. Here each line is judged by
//! [`switchboard_jsonrpc::classify`], as on every other transport, and a
//! malformed one gets its error reply (-32700, -32600, -32602). Only
//! protocol bytes ever reach stdout; one writer task owns it.
//!
//! `tools/call`, nearly all of a busy session's traffic, takes a shorter way
//! once the session is initialized: the line is parsed straight into the
//! call, the tool runs in a task of its own, and that task writes the reply
//! line. Everything else (and any `tools/call` that carries more than a name
//! and arguments) goes through rmcp's service loop, and so does every
//! session that negotiated 2026-07-28, whose per-request lifecycle rmcp
//! implements.
//!
//! The client is one [`Session`]: toolsets may notify it (push), and those
//! notifications go out once the `initialize` reply has.

use std::{
    collections::{HashMap, HashSet, hash_map::Entry},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use rmcp::model::{
    ClientJsonRpcMessage, ClientNotification, JsonRpcMessage, RequestId, ServerJsonRpcMessage,
    ServerResult,
};
use switchboard_toolset::{Caller, Notification, Session};
use tokio::{
    io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufReader},
    sync::mpsc,
};
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;

use super::{DirectCall, NOTIFICATION_QUEUE, incoming, notification_message, serve_channels};
use crate::mcp::McpServer;
use switchboard_jsonrpc::{Id, Rejection, strip_bom};
use switchboard_lines::Next;
use switchboard_shim::framing::{is_blank, line_reader};

/// How long a client that closed stdin waits for the answers to what it
/// sent before the session ends (and with it the calls still running).
const LEFT_GRACE: Duration = Duration::from_secs(10);

/// Serves `server` on the given byte streams until the client closes its
/// end, the writer fails, or `shutdown` fires. `identity` is the agent's
/// configured name (`--nick`), if any.
///
/// When the client's end closes, `client_left` fires, and calls still
/// running go on until they are done (a client that piped its requests in
/// still gets the replies) or `shutdown` fires: then they are dropped, as a
/// cancelled call is, and what they started stops.
/// How logs and approval notices name a stdio session without an identity:
/// by the client program that started this process, `stdio (claude pid
/// 4242)`, rather than a bare `stdio` that two agents would share.
fn stdio_label() -> String {
    let parent = std::os::unix::process::parent_id();
    match switchboard_relay::proctree::process(parent) {
        Some(client) if !client.name.is_empty() => {
            format!("stdio ({} pid {parent})", client.name)
        }
        _ => format!("stdio (pid {parent})"),
    }
}

pub async fn serve<R, W>(
    server: McpServer,
    identity: Option<String>,
    input: R,
    output: W,
    shutdown: CancellationToken,
    client_left: CancellationToken,
) where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (line_tx, line_rx) = mpsc::channel::<String>(64);
    let (in_tx, in_rx) = mpsc::channel::<ClientJsonRpcMessage>(64);
    let (out_tx, out_rx) = mpsc::channel::<ServerJsonRpcMessage>(64);
    let (note_tx, note_rx) = mpsc::channel::<Notification>(NOTIFICATION_QUEUE);
    let mut client = Session::new(stdio_label()).with_notifications(note_tx);
    if let Some(nick) = identity {
        client = client.with_identity(nick);
    }
    let client = Arc::new(client);
    let server = server.for_caller(Caller::new("stdio").in_session(client.clone()));
    server.registry().open_session(&client);
    let state = Arc::new(Shared {
        stop_rmcp: shutdown.child_token(),
        ..Shared::default()
    });

    let writer = tokio::spawn(write_lines(output, line_rx, out_rx, note_rx, state.clone()));
    let reader = tokio::spawn(read_lines(
        input,
        in_tx,
        line_tx,
        server.clone(),
        state.clone(),
    ));

    let stop_rmcp = state.stop_rmcp.clone();
    serve_channels(server, ReceiverStream::new(in_rx), out_tx, stop_rmcp).await;
    client.close();
    reader.abort();
    client_left.cancel();
    // The writer ends once rmcp and every direct call have sent their replies.
    tokio::pin!(writer);
    tokio::select! {
        _ = &mut writer => {}
        () = shutdown.cancelled() => {
            state.stop_calls.cancel();
            let _ = writer.await;
        }
    }
}

/// What the reader and writer share about the session.
#[derive(Default)]
struct Shared {
    /// Set when the reply to `initialize` went out: notifications may follow.
    initialized: AtomicBool,
    /// Set when the reply to `initialize` went out with a protocol version
    /// older than 2026-07-28: from then on `tools/call` may skip rmcp.
    direct_calls: AtomicBool,
    /// The direct calls in flight, by id. A call the client cancels is
    /// dropped from here and stopped, and its reply is not sent, as rmcp
    /// would do.
    in_flight: Mutex<HashMap<RequestId, CancellationToken>>,
    /// Stops every direct call (each call's token is a child of this one).
    stop_calls: CancellationToken,
    /// Stops rmcp's service, and with it the calls it runs.
    stop_rmcp: CancellationToken,
    /// The requests passed to rmcp that it has not answered yet.
    unanswered: Mutex<HashSet<RequestId>>,
    /// Set when the writer stopped (stdout closed): no answer gets out.
    writer_gone: AtomicBool,
}

impl Shared {
    /// Notes a reply rmcp sends; the `initialize` reply enables direct calls
    /// and notifications.
    fn saw_reply(&self, message: &ServerJsonRpcMessage) {
        let answered = match message {
            JsonRpcMessage::Response(response) => Some(&response.id),
            JsonRpcMessage::Error(error) => error.id.as_ref(),
            _ => None,
        };
        if let Some(id) = answered {
            self.unanswered().remove(id);
        }
        if let JsonRpcMessage::Response(response) = message
            && let ServerResult::InitializeResult(init) = &response.result
        {
            let direct = DirectCall::serves(&init.protocol_version);
            self.direct_calls.store(direct, Ordering::Release);
            self.initialized.store(true, Ordering::Release);
        }
    }

    fn unanswered(&self) -> std::sync::MutexGuard<'_, HashSet<RequestId>> {
        self.unanswered.lock().expect("unanswered lock")
    }

    /// Waits until every request read so far is answered, for at most
    /// [`LEFT_GRACE`]. rmcp gives the calls it runs 5 s once its input
    /// closes and then cancels them; a client that closed stdin is promised
    /// 10 s, so the input stays open this long first.
    /// Calls still running then have had their time: they are stopped, as
    /// cancelled calls are, rather than given the shutdown's drain on top.
    async fn settle(&self) {
        let give_up = tokio::time::Instant::now() + LEFT_GRACE;
        while tokio::time::Instant::now() < give_up
            && !self.writer_gone.load(Ordering::Acquire)
            && (!self.unanswered().is_empty() || !self.in_flight().is_empty())
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let running = self.in_flight().len() + self.unanswered().len();
        if running > 0 {
            tracing::info!(
                running,
                "the stdio client left {} s ago: stopping its calls still running",
                LEFT_GRACE.as_secs()
            );
            self.stop_calls.cancel();
            self.stop_rmcp.cancel();
        }
    }

    fn in_flight(&self) -> std::sync::MutexGuard<'_, HashMap<RequestId, CancellationToken>> {
        self.in_flight.lock().expect("in-flight lock")
    }
}

/// Starts `text` as a direct call if it is one; false when it must go
/// through rmcp.
fn start_direct_call(
    text: &[u8],
    server: &McpServer,
    session: &Arc<Shared>,
    replies: &mpsc::Sender<String>,
) -> bool {
    if !session.direct_calls.load(Ordering::Acquire) {
        return false;
    }
    let Ok(call) = serde_json::from_slice::<DirectCall>(text) else {
        return false;
    };
    let id = call.id.clone();
    let stop = session.stop_calls.child_token();
    match session.in_flight().entry(id.clone()) {
        // A duplicate id in flight: leave the bookkeeping to rmcp.
        Entry::Occupied(_) => return false,
        Entry::Vacant(slot) => slot.insert(stop.clone()),
    };
    let (server, session, replies) = (server.clone(), session.clone(), replies.clone());
    tokio::spawn(async move {
        // Dropping the call stops what it started (a command's process group).
        let Some(reply) = stop.run_until_cancelled(call.run(&server)).await else {
            return;
        };
        let cancelled = session.in_flight().remove(&id).is_none();
        if !cancelled && !reply.is_empty() {
            let _ = replies.send(reply).await;
        }
    });
    true
}

/// Reads JSON-RPC lines; answers the malformed ones directly. Once stdin
/// closes, waits for the answers to what it read ([`Shared::settle`]).
async fn read_lines<R: AsyncRead + Unpin>(
    input: R,
    messages: mpsc::Sender<ClientJsonRpcMessage>,
    replies: mpsc::Sender<String>,
    server: McpServer,
    session: Arc<Shared>,
) {
    let mut input = BufReader::with_capacity(64 * 1024, input);
    let mut lines = line_reader();
    loop {
        match lines.next(&mut input).await {
            Ok(Next::Eof) => {
                session.settle().await;
                break;
            }
            Ok(Next::TooLong) => {
                if replies.send(Rejection::too_long().to_json()).await.is_err() {
                    break;
                }
            }
            Ok(Next::Line(line)) => {
                let text = strip_bom(line);
                if is_blank(text) || start_direct_call(text, &server, &session, &replies) {
                    continue;
                }
                match incoming(text) {
                    Ok(message) => {
                        if let JsonRpcMessage::Notification(n) = &message
                            && let ClientNotification::CancelledNotification(c) = &n.notification
                            && let Some(id) = &c.params.request_id
                        {
                            // rmcp sends no answer to a cancelled request.
                            session.unanswered().remove(id);
                            if let Some(call) = session.in_flight().remove(id) {
                                call.cancel();
                            }
                        }
                        if let JsonRpcMessage::Request(request) = &message {
                            let id = &request.id;
                            let direct = session.in_flight().contains_key(id);
                            let in_use = direct || !session.unanswered().insert(id.clone());
                            if in_use {
                                let id = match id {
                                    RequestId::Number(n) => Id::Number(*n),
                                    RequestId::String(s) => Id::String(s.to_string()),
                                };
                                if replies
                                    .send(Rejection::id_in_use(id).to_json())
                                    .await
                                    .is_err()
                                {
                                    break;
                                }
                                continue;
                            }
                        }
                        if messages.send(message).await.is_err() {
                            break;
                        }
                    }
                    Err(Some(rejection)) => {
                        if replies.send(rejection.to_json()).await.is_err() {
                            break;
                        }
                    }
                    Err(None) => {}
                }
            }
            Err(e) => {
                tracing::debug!(error = %e, "stdin closed");
                session.settle().await;
                break;
            }
        }
    }
}

/// Appends `note` as a JSON-RPC notification line.
fn add_notification(batch: &mut Vec<u8>, note: Notification) {
    if serde_json::to_writer(&mut *batch, &notification_message(note)).is_ok() {
        batch.push(b'\n');
    }
}

/// Writes reply lines: ready ones from direct calls and the reader, rmcp's
/// messages and toolsets' notifications, serialised here. Whatever is ready
/// goes out in one write.
async fn write_lines<W: AsyncWrite + Unpin>(
    mut output: W,
    mut lines: mpsc::Receiver<String>,
    mut messages: mpsc::Receiver<ServerJsonRpcMessage>,
    mut notes: mpsc::Receiver<Notification>,
    session: Arc<Shared>,
) {
    let mut batch = Vec::with_capacity(64 * 1024);
    let (mut lines_open, mut messages_open) = (true, true);
    let add_message = |batch: &mut Vec<u8>, message: ServerJsonRpcMessage| {
        session.saw_reply(&message);
        let start = batch.len();
        match serde_json::to_writer(&mut *batch, &message) {
            Ok(()) => batch.push(b'\n'),
            Err(e) => {
                batch.truncate(start);
                tracing::error!(error = %e, "cannot serialise a reply");
            }
        }
    };
    while lines_open || messages_open {
        tokio::select! {
            line = lines.recv(), if lines_open => match line {
                Some(line) => {
                    batch.extend_from_slice(line.as_bytes());
                    batch.push(b'\n');
                }
                None => lines_open = false,
            },
            message = messages.recv(), if messages_open => match message {
                Some(message) => add_message(&mut batch, message),
                None => messages_open = false,
            },
            Some(note) = notes.recv(), if session.initialized.load(Ordering::Acquire) => {
                add_notification(&mut batch, note);
            }
        }
        // Batch whatever else is ready into the same write.
        while let Ok(message) = messages.try_recv() {
            add_message(&mut batch, message);
        }
        while let Ok(line) = lines.try_recv() {
            batch.extend_from_slice(line.as_bytes());
            batch.push(b'\n');
        }
        if batch.is_empty() {
            continue;
        }
        if output.write_all(&batch).await.is_err() || output.flush().await.is_err() {
            tracing::debug!("stdout closed; the client went away");
            break;
        }
        batch.clear();
    }
    session.writer_gone.store(true, Ordering::Release);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    /// A toolset whose one tool echoes its arguments.
    struct Echo(Vec<switchboard_toolset::ToolSpec>);

    impl Echo {
        fn new() -> Self {
            let schema = switchboard_toolset::object_schema(serde_json::json!({}), &[]);
            Self(vec![switchboard_toolset::ToolSpec::new(
                "echo", "echo", schema,
            )])
        }
    }

    impl switchboard_toolset::Toolset for Echo {
        fn name(&self) -> &str {
            "echo"
        }
        fn tools(&self) -> &[switchboard_toolset::ToolSpec] {
            &self.0
        }
        fn call<'a>(
            &'a self,
            _: switchboard_toolset::ToolId,
            arguments: switchboard_toolset::JsonObject,
            _: &'a switchboard_toolset::Caller,
        ) -> switchboard_toolset::ToolFuture<'a> {
            Box::pin(async move {
                Ok(switchboard_toolset::ToolOutput::new(
                    "echoed",
                    Value::Object(arguments),
                ))
            })
        }
    }

    #[tokio::test]
    async fn direct_calls_answer_exactly_as_rmcp_does() {
        use tokio::io::{AsyncBufReadExt, duplex};
        let registry = switchboard_toolset::Registry::new(vec![Arc::new(Echo::new())]).unwrap();
        let server = McpServer::new(registry, crate::mcp::Drain::default(), None);
        let (client, server_end) = duplex(64 * 1024);
        let (server_in, server_out) = tokio::io::split(server_end);
        let (client_out, mut to_server) = tokio::io::split(client);
        let served = tokio::spawn(serve(
            server,
            None,
            server_in,
            server_out,
            CancellationToken::new(),
            CancellationToken::new(),
        ));
        let mut replies = BufReader::new(client_out).lines();
        let mut exchange = async move |line: &str| -> Value {
            to_server
                .write_all(format!("{line}\n").as_bytes())
                .await
                .unwrap();
            serde_json::from_str(&replies.next_line().await.unwrap().unwrap()).unwrap()
        };
        let init = exchange(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#).await;
        assert_eq!(init["id"], 1);
        // `_meta` sends the first call through rmcp; the second one is direct.
        let through_rmcp = exchange(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}
{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"a":[1]},"_meta":{}}}"#).await;
        let direct = exchange(r#"{"jsonrpc":"2.0","id":"x","method":"tools/call","params":{"name":"echo","arguments":{"a":[1]}}}"#).await;
        assert_eq!(direct["id"], "x");
        assert_eq!(direct["result"], through_rmcp["result"]);
        assert_eq!(direct["result"]["structuredContent"]["a"][0], 1);
        let unknown =
            exchange(r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"nope"}}"#)
                .await;
        assert_eq!(unknown["error"]["code"], -32602);
        // Closing the client's end ends the session.
        drop(exchange);
        served.await.unwrap();
    }
}
