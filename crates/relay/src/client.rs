//! The client side of a relay connection: dial, say hello, then send
//! requests and await their responses, concurrently, correlated by id.
//!
//! A [`Link`] is one connection. It never reconnects and never retries: any
//! failure closes it, and the owner dials a new one when it next needs the
//! application (that is what heals an application restart).

use std::{
    collections::HashMap,
    path::Path,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicI64, Ordering},
    },
    time::Duration,
};

use serde_json::{Map, Value};
use tokio::{
    io::{AsyncWriteExt, BufReader},
    net::{UnixStream, unix::OwnedWriteHalf},
    sync::{mpsc, oneshot, watch},
};

use crate::{
    events::{Event, MAX_EVENT},
    protocol::{self, ErrorBody, MAX_LINE, Message, Outcome, PROTOCOL_VERSION, Read, RequestId},
    shapes,
    tools::{Tool, ToolResult, shown},
};

/// Why a request through a link failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LinkError {
    #[error("cannot connect to {path}: {reason}")]
    Connect {
        path: String,
        reason: String,
        /// Nothing serves at the path: no such file, or a socket nobody
        /// listens on (the application is not running). Otherwise the path
        /// itself is the problem (permission, not a socket, too long).
        absent: bool,
    },
    #[error("no response within {0:?}")]
    Timeout(Duration),
    #[error("the connection closed: {0}")]
    Closed(String),
    /// The application broke the protocol on this connection or does not
    /// speak it (another version, a malformed or second `welcome`, a line a
    /// client cannot read), or refused the connection: the link is closed,
    /// and dialling again at once would only repeat it.
    #[error("{0}")]
    Unusable(String),
    #[error("{}", .0.message)]
    Remote(ErrorBody),
    #[error("the application did not agree on {0} events")]
    NotAgreed(String),
    #[error("the event is {0} bytes long; events are at most {MAX_EVENT} bytes")]
    TooLarge(usize),
    /// Not sent: longer than a relay line may be. The link stays up.
    #[error("the request is {0} bytes long; the relay carries at most {MAX_LINE} bytes a message")]
    RequestTooLarge(usize),
    #[error("the application's {method} result does not fit the relay protocol: {reason}")]
    BadResult {
        method: &'static str,
        reason: String,
    },
}

/// Something the application said on its own.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    /// `notify` with this event name (`tools_changed`).
    Notify(String),
    /// An event the welcome agreed on, with an object of params.
    Event(Event),
    /// The connection closed (with the reason).
    Closed(String),
}

/// What a client says about itself in its `hello`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// Free text naming the client, for the application's logs.
    pub client: String,
    /// The name its user goes by (an agent's nick), if set.
    pub identity: Option<String>,
    /// The events it takes part in (see [`events`](crate::events)).
    pub events: Vec<String>,
}

impl Hello {
    /// A hello naming the client `client`, with no identity and no events.
    ///
    /// ```
    /// use switchboard_relay::{client::Hello, events};
    ///
    /// let hello = Hello {
    ///     identity: Some("alice".into()),
    ///     events: vec![events::CHANNEL.into()],
    ///     ..Hello::new("my-shim")
    /// };
    /// assert_eq!(hello.client, "my-shim");
    /// assert_eq!(Hello::new("my-shim").identity, None);
    /// ```
    pub fn new(client: impl Into<String>) -> Self {
        Self {
            client: client.into(),
            identity: None,
            events: Vec::new(),
        }
    }
}

type Pending = Arc<Mutex<HashMap<RequestId, oneshot::Sender<Outcome>>>>;

/// Why connecting to `path` failed, in words that say what to fix, and
/// whether it means only that the application is not running.
fn why_not_connected(path: &Path, error: &std::io::Error) -> (String, bool) {
    use std::{io::ErrorKind, os::unix::fs::FileTypeExt};
    let file_type = std::fs::symlink_metadata(path).map(|m| m.file_type()).ok();
    match error.kind() {
        ErrorKind::NotFound => (error.to_string(), true),
        ErrorKind::ConnectionRefused if file_type.is_some_and(|t| t.is_socket()) => {
            (error.to_string(), true)
        }
        ErrorKind::ConnectionRefused if file_type.is_some() => (
            "it is not a socket; give the path of an application's relay socket".to_owned(),
            false,
        ),
        ErrorKind::PermissionDenied => (
            format!("{error}; the socket or its directory belongs to another user"),
            false,
        ),
        ErrorKind::InvalidInput if path.as_os_str().len() > 107 => (
            format!(
                "the path is {} bytes long, over the 107 a socket path may have; use a shorter one",
                path.as_os_str().len()
            ),
            false,
        ),
        _ => (error.to_string(), false),
    }
}

/// How many of the application's notifications and events wait for the
/// link's owner to read them; events beyond are dropped (and counted), so a
/// slow reader cannot make the link hold all the application sends.
pub const INCOMING_QUEUE: usize = 64;
/// Places of [`INCOMING_QUEUE`] that only notifications and the close take:
/// a flood of events does not crowd out a `tools_changed`.
const RESERVED: usize = 8;

/// How long a request whose write failed waits for the rest of what the
/// application said, to report its reason.
const WHY_WAIT: Duration = Duration::from_secs(1);

/// What the application said in its `welcome`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Welcome {
    pub app: String,
    pub app_id: String,
    /// The events both sides agreed on.
    pub events: Vec<String>,
    /// Guidance for the agent, if the application gave any.
    pub instructions: Option<String>,
}

/// One connection to an application.
///
/// Dial with [`Link::connect`] or [`Link::connect_as`], then make requests
/// and exchange events, concurrently if need be:
///
/// ```
/// # use std::{sync::Arc, time::Duration};
/// # use serde_json::json;
/// # use switchboard_relay::{Call, Options, PeerInfo, Tool, ToolHandler, ToolResult};
/// use switchboard_relay::{Event, client::{Hello, Incoming, Link}, events};
/// # struct App(tokio::sync::mpsc::UnboundedSender<Event>);
/// # impl ToolHandler for App {
/// #     fn tools(&self) -> Vec<Tool> {
/// #         vec![Tool::new("ping", "Answer pong.", json!({"type": "object"}))]
/// #     }
/// #     async fn call(&self, _: Call) -> ToolResult { ToolResult::text("pong") }
/// #     async fn event(&self, _: Arc<PeerInfo>, event: Event) { self.0.send(event).unwrap(); }
/// # }
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// # let dir = tempfile::tempdir().unwrap();
/// # let (seen, mut app_got) = tokio::sync::mpsc::unbounded_channel();
/// # let server = Options::new("dev.example.app")
/// #     .socket_path(dir.path().join("relay.sock"))
/// #     .events([events::CHANNEL, events::PERMISSION_REQUEST])
/// #     .bind(App(seen))
/// #     .unwrap();
/// # let (path, app) = (server.socket_path().to_owned(), server.handle());
/// # tokio::spawn(server.serve(std::future::pending()));
/// let wait = Duration::from_secs(1);
/// let hello = Hello {
///     events: vec![events::CHANNEL.into(), events::PERMISSION_REQUEST.into()],
///     ..Hello::new("doc test")
/// };
/// let (link, mut incoming) = Link::connect_as(&path, wait, hello).await.unwrap();
/// assert_eq!(link.wait_welcome(wait).await.unwrap().app_id, "dev.example.app");
///
/// let list = link.list_tools(wait).await.unwrap();
/// assert_eq!(list.tools[0].name, "ping");
/// let result = link.call_tool("ping", Default::default(), wait).await.unwrap();
/// assert_eq!(result.content[0]["text"], "pong");
///
/// // Agreed events go both ways: to the application's handler…
/// let params = json!({"request_id": "r1"}).as_object().unwrap().clone();
/// let request = Event::new(events::PERMISSION_REQUEST, params);
/// link.send_event(&request, wait).await.unwrap();
/// assert_eq!(app_got.recv().await, Some(request));
/// // …and from the application to the link's receiver.
/// app.push(&Event::channel("build failed", [("run", "7")])).unwrap();
/// let Some(Incoming::Event(event)) = incoming.recv().await else { panic!() };
/// assert_eq!(event.params["content"], "build failed");
/// # }
/// ```
pub struct Link {
    writer: Arc<tokio::sync::Mutex<OwnedWriteHalf>>,
    pending: Pending,
    next_id: AtomicI64,
    closed: watch::Receiver<Option<LinkError>>,
    welcome: watch::Receiver<Option<Welcome>>,
    /// Whether the application has answered a request on this connection.
    answered: Arc<AtomicBool>,
}

impl Link {
    /// Connects to the socket at `path` within `timeout` and sends a hello
    /// naming the client. What the application says on its own (its
    /// notifications, the close) arrives on the returned receiver.
    ///
    /// See [`Link`] for a whole exchange. Nothing listening is an error:
    ///
    /// ```
    /// # use std::time::Duration;
    /// use switchboard_relay::client::{Link, LinkError};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let dir = tempfile::tempdir().unwrap();
    /// let path = dir.path().join("relay.sock");
    /// let failed = Link::connect(&path, Duration::from_secs(1), "doc test").await;
    /// let error = failed.err().expect("nothing listens there");
    /// assert!(matches!(error, LinkError::Connect { .. }));
    /// assert!(error.to_string().starts_with(&format!("cannot connect to {}", path.display())));
    /// # }
    /// ```
    pub async fn connect(
        path: &Path,
        timeout: Duration,
        client: &str,
    ) -> Result<(Self, mpsc::Receiver<Incoming>), LinkError> {
        Self::connect_as(path, timeout, Hello::new(client)).await
    }

    /// Like [`Link::connect`], with everything a hello can say.
    pub async fn connect_as(
        path: &Path,
        timeout: Duration,
        hello: Hello,
    ) -> Result<(Self, mpsc::Receiver<Incoming>), LinkError> {
        let connect_error = |reason: String, absent: bool| LinkError::Connect {
            path: path.display().to_string(),
            reason,
            absent,
        };
        let stream = tokio::time::timeout(timeout, UnixStream::connect(path))
            .await
            .map_err(|_| connect_error(format!("timed out after {timeout:?}"), false))?
            .map_err(|e| {
                let (reason, absent) = why_not_connected(path, &e);
                connect_error(reason, absent)
            })?;
        let (reader, mut writer) = stream.into_split();
        let hello = Message::Hello {
            protocol: PROTOCOL_VERSION,
            pid: std::process::id(),
            client: hello.client,
            identity: hello.identity,
            events: hello.events,
        };
        writer
            .write_all(&protocol::encode(&hello))
            .await
            .map_err(|e| connect_error(e.to_string(), false))?;
        let pending = Pending::default();
        let (closed_tx, closed) = watch::channel(None);
        let (welcome_tx, welcome) = watch::channel(None);
        let (events_tx, events) = mpsc::channel(INCOMING_QUEUE);
        let answered = Arc::new(AtomicBool::new(false));
        tokio::spawn(read_loop(
            BufReader::new(reader),
            pending.clone(),
            answered.clone(),
            closed_tx,
            welcome_tx,
            events_tx,
        ));
        Ok((
            Self {
                writer: Arc::new(tokio::sync::Mutex::new(writer)),
                pending,
                next_id: AtomicI64::new(1),
                closed,
                welcome,
                answered,
            },
            events,
        ))
    }

    /// Whether the connection has closed (a new one must be dialled).
    pub fn is_closed(&self) -> bool {
        self.closed.borrow().is_some()
    }

    /// Why the connection closed, once it has.
    pub fn closed_by(&self) -> Option<LinkError> {
        self.closed.borrow().clone()
    }

    /// Whether the application has answered a request on this connection
    /// (with a result or an error): the connection worked, whatever came
    /// after.
    pub fn answered(&self) -> bool {
        self.answered.load(Ordering::Acquire)
    }

    /// The application's `welcome`, once it has arrived.
    pub fn welcome(&self) -> Option<Welcome> {
        self.welcome.borrow().clone()
    }

    /// Waits up to `timeout` for the `welcome`; `None` if it did not come
    /// (or the connection closed first).
    pub async fn wait_welcome(&self, timeout: Duration) -> Option<Welcome> {
        let mut welcome = self.welcome.clone();
        let mut closed = self.closed.clone();
        tokio::select! {
            got = welcome.wait_for(Option::is_some) => got.ok().and_then(|w| w.clone()),
            _ = closed.wait_for(Option::is_some) => None,
            () = tokio::time::sleep(timeout) => None,
        }
    }

    /// Sends `event` to the application, which must have agreed on its name
    /// in the welcome (waited for, if it has not arrived yet). Bounded by
    /// `timeout` like a request.
    pub async fn send_event(&self, event: &Event, timeout: Duration) -> Result<(), LinkError> {
        if let Some(error) = self.closed.borrow().clone() {
            return Err(error);
        }
        // What was agreed is known once the welcome is in.
        let agreed = self
            .wait_welcome(timeout)
            .await
            .is_some_and(|w| w.events.contains(&event.name));
        if !agreed {
            return Err(LinkError::NotAgreed(event.name.clone()));
        }
        let line = protocol::encode(&Message::Event {
            name: event.name.clone(),
            params: Value::Object(event.params.clone()),
        });
        // The limit does not count the `\n`.
        if line.len() - 1 > MAX_EVENT {
            return Err(LinkError::TooLarge(line.len() - 1));
        }
        let written = tokio::time::timeout(timeout, async {
            self.writer.lock().await.write_all(&line).await
        })
        .await;
        match written {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(LinkError::Closed(e.to_string())),
            Err(_) => Err(LinkError::Timeout(timeout)),
        }
    }

    /// The application's tools (`tools/list`), waiting up to `timeout`. An
    /// entry that is not a usable tool is set apart with the reason (see
    /// [`ToolList`]); a result without a `tools` array is an error.
    pub async fn list_tools(&self, timeout: Duration) -> Result<ToolList, LinkError> {
        let result = self.request("tools/list", None, timeout).await?;
        ToolList::from_result(result).map_err(|e| bad_result("tools/list", &e))
    }

    /// Calls the application's tool `name` with `arguments` (`tools/call`),
    /// waiting up to `timeout`. A tool that failed is an `Ok` result with
    /// `is_error`; an `Err` is a call that did not produce a result.
    pub async fn call_tool(
        &self,
        name: &str,
        arguments: Map<String, Value>,
        timeout: Duration,
    ) -> Result<ToolResult, LinkError> {
        let mut params = Map::new();
        params.insert("name".into(), Value::String(name.to_owned()));
        params.insert("arguments".into(), Value::Object(arguments));
        let result = self.request("tools/call", Some(params), timeout).await?;
        shapes::call_result(&result).map_err(|reason| LinkError::BadResult {
            method: "tools/call",
            reason,
        })?;
        serde_json::from_value(result).map_err(|e| bad_result("tools/call", &e))
    }

    /// Sends a request and waits up to `timeout` for its response. A timeout
    /// leaves the connection open (the application may answer late; the
    /// answer is then dropped).
    pub async fn request(
        &self,
        method: &str,
        params: Option<Map<String, Value>>,
        timeout: Duration,
    ) -> Result<Value, LinkError> {
        if let Some(error) = self.closed.borrow().clone() {
            return Err(error);
        }
        let id = RequestId::Number(self.next_id.fetch_add(1, Ordering::Relaxed));
        let line = protocol::encode(&Message::Request {
            id: id.clone(),
            method: method.to_owned(),
            params,
        });
        // The application would close the connection on a longer line.
        if line.len() - 1 > MAX_LINE {
            return Err(LinkError::RequestTooLarge(line.len() - 1));
        }
        let (tx, rx) = oneshot::channel();
        self.pending
            .lock()
            .expect("pending lock")
            .insert(id.clone(), tx);
        // The whole exchange, the write included, is bounded: an application
        // that has stopped reading must not hold the caller past `timeout`.
        let deadline = tokio::time::Instant::now() + timeout;
        let written = tokio::time::timeout_at(deadline, async {
            let mut writer = self.writer.lock().await;
            writer.write_all(&line).await
        })
        .await;
        match written {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                self.pending.lock().expect("pending lock").remove(&id);
                // The application may have closed after saying why (a
                // refusal): what it said is the better reason.
                let mut closed = self.closed.clone();
                let read_to_the_end = tokio::time::timeout_at(
                    deadline.min(tokio::time::Instant::now() + WHY_WAIT),
                    closed.wait_for(Option::is_some),
                )
                .await
                .is_ok_and(|closed| closed.is_ok());
                return Err(if read_to_the_end {
                    closed_error(&self.closed)
                } else {
                    LinkError::Closed(e.to_string())
                });
            }
            Err(_) => {
                self.pending.lock().expect("pending lock").remove(&id);
                return Err(LinkError::Timeout(timeout));
            }
        }
        // Dropped before an outcome (the caller was cancelled): the
        // application is told, and stops the call.
        let unanswered = Unanswered {
            writer: self.writer.clone(),
            id: Some(id.clone()),
        };
        let mut closed = self.closed.clone();
        // A response that arrived just before the close still counts.
        let outcome = tokio::select! {
            biased;
            outcome = rx => outcome.map_err(|_| closed_error(&self.closed)),
            _ = closed.wait_for(Option::is_some) => Err(closed_error(&self.closed)),
            () = tokio::time::sleep_until(deadline) => Err(LinkError::Timeout(timeout)),
        };
        // A request given up on is cancelled: the application stops the call
        // (when it is answered or the link closed, there is nothing to stop).
        if !matches!(outcome, Err(LinkError::Timeout(_))) {
            unanswered.answered();
        }
        self.pending.lock().expect("pending lock").remove(&id);
        match outcome? {
            Outcome::Result(value) => Ok(value),
            Outcome::Error(body) => Err(LinkError::Remote(body)),
        }
    }
}

/// A request written and not yet answered. Dropped so (its caller was
/// cancelled), it sends a `cancel` for the request: the application stops
/// the call rather than run it for nobody.
struct Unanswered {
    writer: Arc<tokio::sync::Mutex<OwnedWriteHalf>>,
    id: Option<RequestId>,
}

impl Unanswered {
    fn answered(mut self) {
        self.id = None;
    }
}

impl Drop for Unanswered {
    fn drop(&mut self) {
        let (Some(id), Ok(runtime)) = (self.id.take(), tokio::runtime::Handle::try_current())
        else {
            return;
        };
        let writer = self.writer.clone();
        runtime.spawn(async move {
            let line = protocol::encode(&Message::Cancel { id });
            let _ = writer.lock().await.write_all(&line).await;
        });
    }
}

/// An application's answer to `tools/list`: the tools a client can offer,
/// and the entries it cannot, so that one bad entry does not hide the rest.
///
/// ```
/// use serde_json::json;
/// use switchboard_relay::client::ToolList;
///
/// let list = ToolList::from_result(json!({"tools": [
///     {"name": "ok", "inputSchema": {"type": "object"}},
///     {"name": "no_schema"},
///     {"name": "ok", "inputSchema": {"type": "object"}},
/// ]}))
/// .unwrap();
/// assert_eq!(list.tools.len(), 1);
/// assert_eq!(list.malformed[0].to_string(), "tool 1 (\"no_schema\"): `inputSchema` is missing");
/// assert_eq!(list.malformed[1].to_string(), "tool 2 (\"ok\"): two tools are named `ok`");
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolList {
    /// The usable tools, in the application's order.
    pub tools: Vec<Tool>,
    /// The entries left out, each with why.
    pub malformed: Vec<MalformedTool>,
}

/// An entry of a `tools/list` answer that is not a usable tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MalformedTool {
    /// Its position in the list, from 0.
    pub index: usize,
    /// Its `name`, when that is a string.
    pub name: Option<String>,
    /// What is wrong with it.
    pub reason: String,
}

impl std::fmt::Display for MalformedTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "tool {}", self.index)?;
        if let Some(name) = &self.name {
            write!(f, " ({:?})", shown(name))?;
        }
        write!(f, ": {}", self.reason)
    }
}

impl ToolList {
    /// Sorts a `tools/list` result into usable tools and malformed entries;
    /// fails only when `result` has no `tools` array.
    pub fn from_result(result: Value) -> Result<Self, serde_json::Error> {
        #[derive(serde::Deserialize)]
        struct List {
            tools: Vec<Value>,
        }
        let entries = serde_json::from_value::<List>(result)?.tools;
        let mut list = Self::default();
        let mut names = std::collections::HashSet::new();
        for (index, entry) in entries.into_iter().enumerate() {
            let name = entry.get("name").and_then(Value::as_str).map(str::to_owned);
            // The shapes first: they name the field a type error is in.
            let checked = shapes::tool(&entry)
                .and_then(|()| serde_json::from_value::<Tool>(entry).map_err(|e| e.to_string()))
                .and_then(|tool| {
                    tool.check_shape(|name| names.contains(name))
                        .map(|()| tool)
                        .map_err(|e| e.to_string())
                });
            match checked {
                Ok(tool) => {
                    names.insert(tool.name.clone());
                    list.tools.push(tool);
                }
                Err(reason) => list.malformed.push(MalformedTool {
                    index,
                    name,
                    reason,
                }),
            }
        }
        Ok(list)
    }
}

fn bad_result(method: &'static str, e: &serde_json::Error) -> LinkError {
    LinkError::BadResult {
        method,
        reason: e.to_string(),
    }
}

fn closed_error(closed: &watch::Receiver<Option<LinkError>>) -> LinkError {
    closed
        .borrow()
        .clone()
        .unwrap_or_else(|| LinkError::Closed("closed".into()))
}

async fn read_loop(
    mut reader: BufReader<tokio::net::unix::OwnedReadHalf>,
    pending: Pending,
    answered: Arc<AtomicBool>,
    closed: watch::Sender<Option<LinkError>>,
    welcome: watch::Sender<Option<Welcome>>,
    events: mpsc::Sender<Incoming>,
) {
    let mut lines = protocol::line_reader();
    let mut link = LinkState {
        pending,
        answered,
        welcome,
        events,
        last_error: None,
        dropped: 0,
    };
    let error = loop {
        let read = protocol::read_message(&mut reader, &mut lines).await;
        if let Err(error) = link.take(read) {
            break error;
        }
    };
    link.close(error, &closed);
}

/// What the read loop keeps between the application's lines.
struct LinkState {
    pending: Pending,
    answered: Arc<AtomicBool>,
    welcome: watch::Sender<Option<Welcome>>,
    events: mpsc::Sender<Incoming>,
    /// The application's last `error` line, which says why it closes.
    last_error: Option<String>,
    /// Events dropped since the last one the queue took.
    dropped: u64,
}

impl LinkState {
    fn welcomed(&self) -> bool {
        self.welcome.borrow().is_some()
    }

    /// Takes one read; `Err` is why the link ends there.
    fn take(&mut self, read: std::io::Result<Read>) -> Result<(), LinkError> {
        match read {
            // A reset is a close that found something of ours unread (a
            // request sent as the application was leaving): the same end.
            Err(e) if e.kind() != std::io::ErrorKind::ConnectionReset => {
                Err(LinkError::Closed(e.to_string()))
            }
            Ok(Read::Eof) | Err(_) => Err(match (self.last_error.take(), self.welcomed()) {
                (Some(message), false) => LinkError::Unusable(format!(
                    "the application refused the connection: {message}"
                )),
                (Some(message), true) => LinkError::Closed(format!(
                    "the application closed the connection after reporting: {message}"
                )),
                (None, _) => LinkError::Closed("the application closed the connection".to_owned()),
            }),
            Ok(Read::TooLong) => Err(LinkError::Closed(format!(
                "the application sent a line over {} bytes",
                protocol::MAX_LINE
            ))),
            Ok(Read::Malformed { reason, .. }) if !self.welcomed() => Err(LinkError::Unusable(
                format!("the application answered the hello with a malformed line: {reason}"),
            )),
            Ok(Read::Malformed { reason, .. }) => Err(LinkError::Unusable(format!(
                "the application sent a malformed line: {reason}"
            ))),
            Ok(Read::EventTooLong { name, bytes }) => {
                tracing::warn!(%name, bytes, "ignored an event over {MAX_EVENT} bytes");
                Ok(())
            }
            Ok(Read::Message(message)) => self.message(message),
        }
    }

    fn message(&mut self, message: Message) -> Result<(), LinkError> {
        match message {
            Message::Response { id, outcome } => {
                self.answered.store(true, Ordering::Release);
                if let Some(tx) = self.pending.lock().expect("pending lock").remove(&id) {
                    let _ = tx.send(outcome);
                }
            }
            // What was agreed holds for the connection's life: a second
            // welcome would change it under the requests in flight.
            Message::Welcome { .. } if self.welcomed() => {
                return Err(LinkError::Unusable(
                    "the application sent a second welcome".to_owned(),
                ));
            }
            // Requests already sent may be read in another protocol.
            Message::Welcome { protocol, .. } if protocol != PROTOCOL_VERSION => {
                return Err(LinkError::Unusable(format!(
                    "the application speaks relay protocol version {protocol}; this client speaks version {PROTOCOL_VERSION}"
                )));
            }
            Message::Welcome {
                app,
                app_id,
                events,
                instructions,
                ..
            } => {
                self.welcome.send_replace(Some(Welcome {
                    app,
                    app_id,
                    events,
                    instructions,
                }));
            }
            // Dropped only when the queue is full of them already.
            Message::Notify { event } => {
                let _ = self.events.try_send(Incoming::Notify(event));
            }
            Message::Event { name, params } => self.event(name, params),
            // Told with the reason the connection closes for, if it does.
            Message::Error { message } => {
                tracing::debug!(%message, "the application reported an error");
                self.last_error = Some(message);
            }
            Message::Hello { .. } | Message::Request { .. } | Message::Cancel { .. } => {
                return Err(LinkError::Unusable(
                    "the application sent a client message".to_owned(),
                ));
            }
        }
        Ok(())
    }

    /// Queues an agreed event, keeping room for the close; counts what a
    /// full queue drops.
    fn event(&mut self, name: String, params: Value) {
        let agreed = self
            .welcome
            .borrow()
            .as_ref()
            .is_some_and(|w| w.events.contains(&name));
        match params {
            Value::Object(params) if agreed && self.events.capacity() > RESERVED => {
                self.report_dropped();
                let _ = self
                    .events
                    .try_send(Incoming::Event(Event::new(name, params)));
            }
            Value::Object(_) if agreed => self.dropped += 1,
            _ => {
                tracing::warn!(%name, "ignored an event that was not agreed or whose params are not an object")
            }
        }
    }

    fn report_dropped(&mut self) {
        if self.dropped > 0 {
            tracing::warn!(
                dropped = self.dropped,
                "dropped events: the link's owner was not reading them"
            );
            self.dropped = 0;
        }
    }

    /// Ends the link: says why (with the application's last report), fails
    /// the calls still waiting and queues the close.
    fn close(mut self, error: LinkError, closed: &watch::Sender<Option<LinkError>>) {
        let error = match (error, self.last_error.take()) {
            (LinkError::Unusable(reason), Some(message)) => {
                LinkError::Unusable(format!("{reason} (it had reported: {message})"))
            }
            (LinkError::Closed(reason), Some(message)) => {
                LinkError::Closed(format!("{reason} (it had reported: {message})"))
            }
            (error, _) => error,
        };
        let reason = error.to_string();
        closed.send_replace(Some(error));
        self.pending.lock().expect("pending lock").clear();
        self.report_dropped();
        // When the queue is full, its end tells the close.
        let _ = self.events.try_send(Incoming::Closed(reason));
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::ToolList;

    #[test]
    fn a_tool_list_without_a_tools_array_is_refused_whole() {
        for result in [json!({}), json!({"tools": 5}), json!([]), json!(null)] {
            assert!(ToolList::from_result(result.clone()).is_err(), "{result}");
        }
        assert_eq!(
            ToolList::from_result(json!({"tools": []})).unwrap(),
            ToolList::default()
        );
    }

    #[test]
    fn each_malformed_entry_is_named_with_why() {
        let schema = json!({"type": "object"});
        let long = "x".repeat(200);
        let list = ToolList::from_result(json!({"tools": [
            "not an object",
            {"name": "", "inputSchema": schema},
            {"name": "t", "inputSchema": schema, "title": 3},
            {"name": "ok", "inputSchema": schema},
            {"name": "annotated", "inputSchema": schema, "annotations": "x"},
            {"name": "string_args", "inputSchema": {"type": "string"}},
            {"name": "no_type", "inputSchema": {}},
            {"name": "with space", "inputSchema": schema},
            {"name": long, "inputSchema": schema},
            {"name": "iconic", "inputSchema": schema, "icons": "x"},
        ]}))
        .unwrap();
        assert_eq!(list.tools.len(), 1);
        assert_eq!(list.tools[0].name, "ok");
        let reasons: Vec<String> = list.malformed.iter().map(ToString::to_string).collect();
        let cut = format!("{}…", "x".repeat(64));
        assert_eq!(
            reasons,
            [
                "tool 0: the tool is not an object".to_owned(),
                "tool 1 (\"\"): a tool has an empty name".to_owned(),
                "tool 2 (\"t\"): `title` must be a string".to_owned(),
                "tool 4 (\"annotated\"): `annotations` must be an object".to_owned(),
                "tool 5 (\"string_args\"): `inputSchema.type` must be \"object\"".to_owned(),
                "tool 6 (\"no_type\"): `inputSchema.type` must be \"object\"".to_owned(),
                "tool 7 (\"with space\"): the tool name \"with space\" is not one MCP hosts accept: 1 to 128 characters, none of them whitespace or control characters".to_owned(),
                format!("tool 8 ({cut:?}): the tool name {cut:?} is not one MCP hosts accept: 1 to 128 characters, none of them whitespace or control characters"),
                "tool 9 (\"iconic\"): `icons` must be an array".to_owned(),
            ]
        );
    }
}
