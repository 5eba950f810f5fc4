//! The application side: bind the socket, accept clients, check who they
//! are, and answer their requests from a [`ToolHandler`].

use std::{
    collections::HashMap,
    future::Future,
    panic::AssertUnwindSafe,
    path::{Path, PathBuf},
    pin::Pin,
    sync::{
        Arc, Mutex, Weak,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    task::{Context, Poll},
    time::Duration,
};

use serde_json::{Map, Value};
use switchboard_lines::LineReader;
use tokio::{
    io::{AsyncWriteExt, BufReader},
    net::{
        UnixStream,
        unix::{OwnedReadHalf, OwnedWriteHalf, UCred},
    },
    sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot, watch},
    task::JoinSet,
};
use tracing::Instrument as _;

use crate::{
    events::{Event, MAX_EVENT, PushError},
    mcp_config::McpConfig,
    paths, proctree,
    protocol::{self, ErrorCode, Message, PROTOCOL_VERSION, Read, RequestId, TOOLS_CHANGED},
    socket::{self, BindError, Location, SocketGuard},
    tools::{
        BoxFuture, Call, DynHandler, PeerInfo, Table, ToolHandler, ToolResult, ToolTableError,
    },
};

/// How to bind a [`Server`]: the app id, and optionally its display name,
/// the socket's prefix or an explicit socket path, and limits.
///
/// ```no_run
/// # use switchboard_relay::{Call, Options, Tool, ToolHandler, ToolResult};
/// # struct MyTools;
/// # impl ToolHandler for MyTools {
/// #     fn tools(&self) -> Vec<Tool> { vec![] }
/// #     async fn call(&self, _: Call) -> ToolResult { ToolResult::text("") }
/// # }
/// let server = Options::new("dev.example.editor")
///     .app_name("Example Editor")
///     .bind(MyTools)?;
/// println!("serving on {}", server.socket_path().display());
/// # Ok::<(), switchboard_relay::BindError>(())
/// ```
#[derive(Debug, Clone)]
pub struct Options {
    app_id: String,
    app_name: Option<String>,
    prefix: String,
    socket: Option<PathBuf>,
    hello_timeout: Duration,
    write_timeout: Option<Duration>,
    max_in_flight: usize,
    shutdown_grace: Duration,
    events: Vec<String>,
}

impl Options {
    /// Options for the application `app_id` (the name of its socket
    /// directory, such as `dev.example.terminal`), with the defaults: the
    /// socket at [`paths::socket_path`]`(`[`DEFAULT_PREFIX`](crate::DEFAULT_PREFIX)`, app_id)`,
    /// a 10 s hello timeout, a 60 s write timeout, 64 calls in flight per
    /// connection, 5 s of grace at shutdown.
    pub fn new(app_id: impl Into<String>) -> Self {
        Self {
            app_id: app_id.into(),
            app_name: None,
            prefix: crate::DEFAULT_PREFIX.to_owned(),
            socket: None,
            hello_timeout: Duration::from_secs(10),
            write_timeout: Some(Duration::from_secs(60)),
            max_in_flight: 64,
            shutdown_grace: Duration::from_secs(5),
            events: Vec::new(),
        }
    }

    /// The human-readable name sent in `welcome`, which clients use in
    /// messages such as "Terminal Demo is not running". Defaults to the app
    /// id.
    #[must_use]
    pub fn app_name(mut self, name: impl Into<String>) -> Self {
        self.app_name = Some(name.into());
        self
    }

    /// The directory under the runtime directory that holds the app's
    /// (default `switchboard`). `switchboard shim --app-id` looks under the
    /// default prefix only; with another prefix, point the shim at the
    /// socket with `--socket`.
    #[must_use]
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Binds exactly this path instead of the conventional one (the daemon's
    /// `--socket PATH`). Missing parent directories are created with mode
    /// 0700; existing ones are left as they are.
    #[must_use]
    pub fn socket_path(mut self, path: impl Into<PathBuf>) -> Self {
        self.socket = Some(path.into());
        self
    }

    /// How long a new connection may take to say hello before it is closed.
    #[must_use]
    pub fn hello_timeout(mut self, timeout: Duration) -> Self {
        self.hello_timeout = timeout;
        self
    }

    /// How long one line to a client (a reply, an event) may wait for the
    /// client to take it before the connection is closed: a client that
    /// stops reading would otherwise hold its connection and calls for
    /// good. `None` waits for good.
    ///
    /// ```
    /// use std::time::Duration;
    /// let options = switchboard_relay::Options::new("dev.example.terminal")
    ///     .write_timeout(Some(Duration::from_secs(10)));
    /// ```
    #[must_use]
    pub fn write_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.write_timeout = timeout;
        self
    }

    /// How many calls of one connection may run at once; further requests
    /// wait unread (at least 1).
    #[must_use]
    pub fn max_in_flight(mut self, calls: usize) -> Self {
        self.max_in_flight = calls.max(1);
        self
    }

    /// How long, at shutdown, calls still running may take to finish before
    /// they are dropped.
    #[must_use]
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.shutdown_grace = grace;
        self
    }

    /// The events (see [`events`](crate::events)) the application takes
    /// part in: those a client also lists in its hello are agreed in the
    /// welcome, and only those are ever exchanged with it.
    ///
    /// ```
    /// # use switchboard_relay::{Options, events};
    /// let options = Options::new("dev.example.app").events([events::CHANNEL]);
    /// ```
    #[must_use]
    pub fn events<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        self.events = names.into_iter().map(Into::into).collect();
        self
    }

    /// The socket path these options bind.
    pub fn path(&self) -> PathBuf {
        self.socket
            .clone()
            .unwrap_or_else(|| paths::socket_path(&self.prefix, &self.app_id))
    }

    /// Reads the handler's tools, compiles their schemas, and binds the
    /// socket: a stale socket is replaced, a live one (another instance is
    /// serving) is refused with [`BindError::InUse`].
    ///
    /// Needs no async runtime; [`Server::serve`] does.
    pub fn bind<H: ToolHandler>(self, handler: H) -> Result<Server, BindError> {
        if !paths::valid_app_id(&self.app_id) {
            return Err(BindError::InvalidAppId(self.app_id));
        }
        if self.socket.is_none() && !paths::valid_app_id(&self.prefix) {
            return Err(BindError::InvalidAppId(self.prefix));
        }
        let table = Table::new(handler.tools())?;
        let bound = socket::bind(match &self.socket {
            Some(path) => Location::Explicit(path),
            None => Location::Conventional {
                prefix: &self.prefix,
                app_id: &self.app_id,
            },
        })?;
        tracing::info!(path = %bound.guard.path().display(), app_id = %self.app_id, "relay socket bound");
        let app = self.app_name.clone().unwrap_or_else(|| self.app_id.clone());
        let shared = Arc::new(Shared {
            handler: Box::new(handler),
            table: Mutex::new(Arc::new(table)),
            generation: watch::Sender::new(0),
            shutdown: watch::Sender::new(false),
            connections: AtomicUsize::new(0),
            next_connection: AtomicU64::new(1),
            clients: Mutex::default(),
            euid: socket::euid(),
            app,
            options: self,
        });
        Ok(Server {
            listener: bound.listener,
            guard: bound.guard,
            shared,
        })
    }
}

/// Binds the application `app_id` at its conventional socket path with
/// default [`Options`]; see [`Options::bind`].
pub fn bind<H: ToolHandler>(app_id: &str, handler: H) -> Result<Server, BindError> {
    Options::new(app_id).bind(handler)
}

/// A bound relay socket, ready to [`serve`](Server::serve).
///
/// Dropping it (or the end of `serve`) removes the socket file, if it is
/// still the one it bound.
pub struct Server {
    listener: std::os::unix::net::UnixListener,
    guard: SocketGuard,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("socket", &self.guard.path())
            .field("app_id", &self.shared.options.app_id)
            .finish_non_exhaustive()
    }
}

struct Shared {
    handler: Box<dyn DynHandler>,
    table: Mutex<Arc<Table>>,
    /// Bumped on every tool-list change; each connection's writer watches it.
    generation: watch::Sender<u64>,
    shutdown: watch::Sender<bool>,
    connections: AtomicUsize,
    next_connection: AtomicU64,
    /// Where to send a connection's events, by connection number.
    clients: Mutex<HashMap<u64, Client>>,
    euid: u32,
    app: String,
    options: Options,
}

/// A connection as events see it.
struct Client {
    outgoing: mpsc::Sender<Outgoing>,
    events: Vec<String>,
}

impl Shared {
    fn table(&self) -> Arc<Table> {
        self.table.lock().expect("tool table lock").clone()
    }

    fn clients(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Client>> {
        self.clients.lock().expect("clients lock")
    }
}

/// Encodes `event` as its line, within [`MAX_EVENT`].
fn event_line(event: &Event) -> Result<Arc<[u8]>, PushError> {
    let line = protocol::encode(&Message::Event {
        name: event.name.clone(),
        params: Value::Object(event.params.clone()),
    });
    // The limit does not count the `\n`.
    if line.len() - 1 > MAX_EVENT {
        return Err(PushError::TooLarge(line.len() - 1));
    }
    Ok(line.into())
}

/// A handle on a server: tell its clients the tools changed, count its
/// connections, or shut it down. Cheap to clone; it does not keep the
/// server alive (once the server is gone, its methods do nothing).
#[derive(Clone)]
pub struct Handle {
    shared: Weak<Shared>,
}

impl std::fmt::Debug for Handle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handle")
            .field("live", &(self.shared.strong_count() > 0))
            .finish()
    }
}

impl Handle {
    /// Reads the handler's [`tools`](ToolHandler::tools) again, compiles
    /// them, and sends `notify tools_changed` to every connected client.
    /// On an error the previous list stays in force and nobody is told.
    pub fn tools_changed(&self) -> Result<(), ToolTableError> {
        let Some(shared) = self.shared.upgrade() else {
            return Ok(());
        };
        let table = Table::new(shared.handler.tools())?;
        *shared.table.lock().expect("tool table lock") = Arc::new(table);
        shared.generation.send_modify(|g| *g += 1);
        Ok(())
    }

    /// Pushes `event` to every connected client that agreed on its name;
    /// returns how many it was queued for. Best effort: a client that is
    /// not reading misses it.
    pub fn push(&self, event: &Event) -> Result<usize, PushError> {
        let line = event_line(event)?;
        let Some(shared) = self.shared.upgrade() else {
            return Ok(0);
        };
        let clients = shared.clients();
        Ok(clients
            .values()
            .filter(|c| c.events.contains(&event.name))
            .filter(|c| c.outgoing.try_send(Outgoing::Line(line.clone())).is_ok())
            .count())
    }

    /// Pushes `event` to the client on connection `connection` (see
    /// [`PeerInfo::connection`](crate::PeerInfo::connection)).
    pub fn push_to(&self, connection: u64, event: &Event) -> Result<(), PushError> {
        let line = event_line(event)?;
        let shared = self
            .shared
            .upgrade()
            .ok_or(PushError::NoConnection(connection))?;
        let clients = shared.clients();
        let client = clients
            .get(&connection)
            .ok_or(PushError::NoConnection(connection))?;
        if !client.events.contains(&event.name) {
            return Err(PushError::NotAgreed(event.name.clone()));
        }
        client
            .outgoing
            .try_send(Outgoing::Line(line))
            .map_err(|_| PushError::Full)
    }

    /// The number of clients connected (that said hello) right now.
    pub fn connections(&self) -> usize {
        self.shared
            .upgrade()
            .map_or(0, |s| s.connections.load(Ordering::Relaxed))
    }

    /// Starts a graceful shutdown, as if `serve`'s shutdown future had
    /// completed.
    pub fn shutdown(&self) {
        if let Some(shared) = self.shared.upgrade() {
            shared.shutdown.send_replace(true);
        }
    }
}

impl Server {
    /// The path of the bound socket.
    pub fn socket_path(&self) -> &Path {
        self.guard.path()
    }

    /// The app id sent in `welcome`.
    pub fn app_id(&self) -> &str {
        &self.shared.options.app_id
    }

    /// The `--mcp-config` entry that points `switchboard shim` at this
    /// server: `shim --app-id <id>` when it is bound at the conventional path
    /// with the default prefix, `shim --socket <path>` otherwise. Named after
    /// the app id; change the command or name with the `with_*` methods.
    pub fn mcp_config(&self) -> McpConfig {
        let options = &self.shared.options;
        if options.socket.is_none() && options.prefix == crate::DEFAULT_PREFIX {
            McpConfig::shim(&options.app_id)
        } else {
            McpConfig::shim_socket(&options.app_id, self.socket_path())
        }
    }

    /// Where [`Server::write_mcp_config`] writes: `mcp-config.json` in the
    /// app's directory, or `<socket path>.mcp-config.json` for an explicit
    /// socket path (whose directory may be shared).
    pub fn mcp_config_path(&self) -> PathBuf {
        if self.shared.options.socket.is_none() {
            self.socket_path().with_file_name("mcp-config.json")
        } else {
            let mut name = self.socket_path().as_os_str().to_owned();
            name.push(".mcp-config.json");
            PathBuf::from(name)
        }
    }

    /// Writes [`Server::mcp_config`] to [`Server::mcp_config_path`] with
    /// [`write_mcp_config`](crate::write_mcp_config): atomically, best effort
    /// (`None` when it could not be written). To change the entry first
    /// (another command path, say), call `write_mcp_config` yourself.
    pub fn write_mcp_config(&self) -> Option<PathBuf> {
        crate::write_mcp_config(&self.mcp_config(), &self.mcp_config_path())
    }

    /// A handle to announce tool changes or shut down, usable from anywhere
    /// (including the handler itself) while the server runs.
    pub fn handle(&self) -> Handle {
        Handle {
            shared: Arc::downgrade(&self.shared),
        }
    }

    /// Serves clients until `shutdown` completes (or [`Handle::shutdown`] is
    /// called), then shuts down gracefully: stops accepting and removes the
    /// socket, stops reading requests, lets calls in flight finish for up to
    /// the [grace period](Options::shutdown_grace), and closes every
    /// connection.
    ///
    /// Errors only when the listener cannot be registered with the runtime
    /// (it must be a Tokio runtime with I/O enabled).
    pub async fn serve(self, shutdown: impl Future<Output = ()>) -> std::io::Result<()> {
        let Server {
            listener,
            guard,
            shared,
        } = self;
        let listener = tokio::net::UnixListener::from_std(listener)?;
        let mut connections = JoinSet::new();
        let mut stop = shared.shutdown.subscribe();
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                () = stopped(&mut stop) => break,
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => {
                        let number = shared.next_connection.fetch_add(1, Ordering::Relaxed);
                        let span = tracing::debug_span!("relay", connection = number);
                        connections.spawn(connection(stream, shared.clone(), number).instrument(span));
                    }
                    Err(e) => {
                        // Out of descriptors and the like: do not spin.
                        tracing::warn!(error = %e, "accepting a relay connection failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                },
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
            }
        }
        drop(listener);
        drop(guard);
        shared.shutdown.send_replace(true);
        let grace = shared.options.shutdown_grace;
        let drained = tokio::time::timeout(grace, async {
            while connections.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            tracing::warn!(
                connections = connections.len(),
                "calls still running after the shutdown grace period; dropping them"
            );
            connections.shutdown().await;
        }
        tracing::info!(app_id = %shared.options.app_id, "relay server stopped");
        Ok(())
    }
}

/// What a connection's writer task is asked to do.
enum Outgoing {
    Send(Message),
    /// A line encoded once for every connection it goes to (an event).
    Line(Arc<[u8]>),
    /// Send this, then close the connection.
    Close(Message),
}

/// Counts a connection while it lives.
struct Counted<'a>(&'a AtomicUsize);

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

async fn refuse(mut writer: OwnedWriteHalf, message: String) {
    tracing::warn!(%message, "refusing a relay connection");
    let line = protocol::encode(&Message::Error { message });
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        let _ = writer.write_all(&line).await;
        let _ = writer.shutdown().await;
    })
    .await;
}

/// Serves one client from its hello to its last reply.
async fn connection(stream: UnixStream, shared: Arc<Shared>, number: u64) {
    let mut stop = shared.shutdown.subscribe();
    let Some((reader, writer, peer)) = admit(stream, &shared, number, &mut stop).await else {
        return;
    };
    let pid = peer.pid;
    tracing::debug!(pid, client = %peer.client, "relay client connected");
    shared.connections.fetch_add(1, Ordering::Relaxed);
    let _counted = Counted(&shared.connections);
    shared.handler.connected(&peer);
    let _known = Known(&shared, &peer);

    let Some((tx, write_task)) = welcome(writer, &shared, &peer).await else {
        return;
    };
    serve_requests(reader, &shared, &peer, &tx, &mut stop).await;
    // The event table's copy of the sender would keep the writer waiting.
    shared.clients().remove(&number);
    drop(tx);
    let _ = write_task.await;
    tracing::debug!(pid, "relay client disconnected");
}

/// Lets a connection in or refuses it: the peer must run as this user and
/// open with a valid hello. Returns the reading half with its line state,
/// the writing half, and who the peer is; `None` once a refusal was sent
/// or the peer left first.
async fn admit(
    stream: UnixStream,
    shared: &Arc<Shared>,
    number: u64,
    stop: &mut watch::Receiver<bool>,
) -> Option<(Incoming, OwnedWriteHalf, Arc<PeerInfo>)> {
    let cred = match stream.peer_cred() {
        Ok(cred) => cred,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the peer's credentials");
            return None;
        }
    };
    let (reader, writer) = stream.into_split();
    if cred.uid() != shared.euid {
        let message = format!(
            "connections from uid {} are refused: this application runs as uid {}",
            cred.uid(),
            shared.euid
        );
        refuse(writer, message).await;
        return None;
    }
    let mut incoming = Incoming {
        reader: BufReader::new(reader),
        lines: protocol::line_reader(),
    };
    let hello = match read_hello(&mut incoming, &cred, shared, stop).await {
        Ok(hello) => hello,
        Err(Some(refusal)) => {
            refuse(writer, refusal).await;
            return None;
        }
        Err(None) => return None,
    };
    let pid = hello.pid;
    let ancestry = tokio::task::spawn_blocking(move || proctree::ancestry(pid))
        .await
        .unwrap_or_default();
    let peer = Arc::new(PeerInfo {
        connection: number,
        pid,
        uid: cred.uid(),
        gid: cred.gid(),
        client: hello.client,
        identity: hello.identity,
        events: hello.events,
        ancestry,
    });
    Some((incoming, writer, peer))
}

/// A connection's reading half and the line state that goes with it.
struct Incoming {
    reader: BufReader<OwnedReadHalf>,
    lines: LineReader,
}

impl Incoming {
    async fn read(&mut self) -> std::io::Result<Read> {
        protocol::read_message(&mut self.reader, &mut self.lines).await
    }
}

/// Sends the welcome, starts the writer task and, for a peer that takes
/// events, enters it in the event table. Returns the writer's queue and
/// task; `None` if the peer is already gone.
async fn welcome(
    mut writer: OwnedWriteHalf,
    shared: &Arc<Shared>,
    peer: &PeerInfo,
) -> Option<(mpsc::Sender<Outgoing>, tokio::task::JoinHandle<()>)> {
    let welcome = Message::Welcome {
        protocol: PROTOCOL_VERSION,
        app: shared.app.clone(),
        app_id: shared.options.app_id.clone(),
        events: peer.events.clone(),
        instructions: shared.handler.instructions(peer),
    };
    let mut generation = shared.generation.subscribe();
    generation.mark_unchanged();
    protocol::write_message(&mut writer, &welcome).await.ok()?;
    let (tx, rx) = mpsc::channel(shared.options.max_in_flight + 64);
    let write_task = tokio::spawn(write_loop(
        Writer {
            half: writer,
            timeout: shared.options.write_timeout,
        },
        rx,
        generation,
    ));
    if !peer.events.is_empty() {
        shared.clients().insert(
            peer.connection,
            Client {
                outgoing: tx.clone(),
                events: peer.events.clone(),
            },
        );
    }
    Some((tx, write_task))
}

/// Reads the peer's requests until it leaves, breaks the protocol, stops
/// reading its replies or shutdown begins, running at most `max_in_flight`
/// calls at once; returns once every call it started has answered.
async fn serve_requests(
    mut incoming: Incoming,
    shared: &Arc<Shared>,
    peer: &Arc<PeerInfo>,
    tx: &mpsc::Sender<Outgoing>,
    stop: &mut watch::Receiver<bool>,
) {
    let permits = Arc::new(Semaphore::new(shared.options.max_in_flight));
    let mut calls = JoinSet::new();
    let running = Running::default();
    loop {
        let read = tokio::select! {
            biased;
            () = stopped(stop) => break,
            () = tx.closed() => break,
            read = incoming.read() => read,
        };
        let reply = match step(read, shared, peer) {
            Step::Reply(reply) => reply,
            Step::Ignore => continue,
            Step::End => break,
            Step::Close(last) => {
                let _ = tx.send(Outgoing::Close(last)).await;
                break;
            }
            Step::Event(event) => {
                let (shared, peer) = (shared.clone(), peer.clone());
                calls.spawn(async move { shared.handler.event(peer, event).await });
                continue;
            }
            Step::Cancel(id) => {
                running.cancel(&id);
                continue;
            }
            Step::Call {
                id,
                name,
                arguments,
            } => {
                let permit = tokio::select! {
                    biased;
                    () = stopped(stop) => break,
                    () = tx.closed() => break,
                    permit = permits.clone().acquire_owned() => permit.expect("never closed"),
                };
                let cancelled = running.start(&id);
                let call = run_call(
                    shared.clone(),
                    peer.clone(),
                    id,
                    name,
                    arguments,
                    tx.clone(),
                    permit,
                    cancelled,
                );
                calls.spawn(call);
                while calls.try_join_next().is_some() {}
                continue;
            }
        };
        if tx.send(Outgoing::Send(reply)).await.is_err() {
            break;
        }
    }
    drop(incoming);
    while calls.join_next().await.is_some() {}
}

/// A hello the application accepted.
struct Hello {
    pid: u32,
    client: String,
    identity: Option<String>,
    /// The events both sides take part in, in the application's order.
    events: Vec<String>,
}

/// Reads the client's first line, which must be a hello in our protocol
/// version from the process the kernel says is connected. `Err(Some(text))`
/// is a refusal to send before closing; `Err(None)`, the client left (or
/// shutdown began) first.
async fn read_hello(
    incoming: &mut Incoming,
    cred: &UCred,
    shared: &Shared,
    stop: &mut watch::Receiver<bool>,
) -> Result<Hello, Option<String>> {
    let hello_timeout = shared.options.hello_timeout;
    let first = tokio::select! {
        () = stopped(stop) => return Err(None),
        first = tokio::time::timeout(hello_timeout, incoming.read()) => first,
    };
    let Ok(read) = first else {
        return Err(Some(format!("no hello within {hello_timeout:?}")));
    };
    match read {
        Err(_) | Ok(Read::Eof) => Err(None),
        Ok(Read::TooLong) => Err(Some(too_long_message())),
        Ok(Read::Malformed { reason, .. }) => {
            Err(Some(format!("the first line must be a hello: {reason}")))
        }
        Ok(Read::Message(Message::Hello {
            protocol,
            pid,
            client,
            identity,
            events,
        })) => {
            if protocol != PROTOCOL_VERSION {
                return Err(Some(format!(
                    "protocol version {protocol} is not supported; this application speaks {PROTOCOL_VERSION}"
                )));
            }
            if cred.pid().map(i64::from) != Some(i64::from(pid)) {
                return Err(Some(format!(
                    "the hello says pid {pid} but the connection belongs to pid {}",
                    cred.pid()
                        .map_or_else(|| "unknown".into(), |p| p.to_string())
                )));
            }
            let events = shared
                .options
                .events
                .iter()
                .filter(|e| events.contains(e))
                .cloned()
                .collect();
            Ok(Hello {
                pid,
                client,
                identity,
                events,
            })
        }
        Ok(Read::Message(_) | Read::EventTooLong { .. }) => {
            Err(Some("the first line must be a hello".into()))
        }
    }
}

/// What a connection does with one line from its client.
enum Step {
    Reply(Message),
    /// Run a tool call (within the connection's limit of calls in flight).
    Call {
        id: RequestId,
        name: String,
        arguments: Map<String, Value>,
    },
    /// Hand an agreed event to the handler.
    Event(Event),
    /// Stop the call with this id, if it is still running.
    Cancel(RequestId),
    /// Nothing to answer.
    Ignore,
    /// Say this, then close the connection.
    Close(Message),
    /// The client is gone.
    End,
}

/// A connection's calls in flight that its client may cancel, by request
/// id (a later request reusing an id in flight takes its place).
#[derive(Default)]
struct Running(Arc<Mutex<RunningCalls>>);

#[derive(Default)]
struct RunningCalls {
    serial: u64,
    calls: HashMap<RequestId, (u64, oneshot::Sender<()>)>,
}

/// What a call listens on for its cancellation; its drop forgets the call.
struct Cancelled {
    running: Arc<Mutex<RunningCalls>>,
    id: RequestId,
    serial: u64,
    signal: oneshot::Receiver<()>,
}

impl Running {
    fn start(&self, id: &RequestId) -> Cancelled {
        let (tx, signal) = oneshot::channel();
        let mut running = self.0.lock().expect("running calls lock");
        running.serial += 1;
        let serial = running.serial;
        running.calls.insert(id.clone(), (serial, tx));
        Cancelled {
            running: self.0.clone(),
            id: id.clone(),
            serial,
            signal,
        }
    }

    fn cancel(&self, id: &RequestId) {
        let call = self.0.lock().expect("running calls lock").calls.remove(id);
        match call {
            Some((_, tx)) => {
                let _ = tx.send(());
            }
            None => tracing::debug!(?id, "a cancel for no call in flight"),
        }
    }
}

impl Drop for Cancelled {
    fn drop(&mut self) {
        let mut running = self.running.lock().expect("running calls lock");
        if running
            .calls
            .get(&self.id)
            .is_some_and(|(serial, _)| *serial == self.serial)
        {
            running.calls.remove(&self.id);
        }
    }
}

/// Decides what to do with what the client sent after its hello.
fn step(read: std::io::Result<Read>, shared: &Shared, peer: &PeerInfo) -> Step {
    match read {
        Err(_) | Ok(Read::Eof) => Step::End,
        Ok(Read::TooLong) => Step::Close(Message::Error {
            message: too_long_message(),
        }),
        Ok(Read::Malformed {
            reason,
            id: Some(id),
        }) => Step::Reply(Message::error_response(
            id,
            ErrorCode::InvalidRequest,
            reason,
        )),
        Ok(Read::Malformed { reason, id: None }) => Step::Reply(Message::Error { message: reason }),
        Ok(Read::Message(Message::Request { id, method, params })) => match method.as_str() {
            "tools/list" => Step::Reply(Message::result(id, shared.table().list().clone())),
            "tools/call" => match parse_call(params) {
                Ok((name, arguments)) => Step::Call {
                    id,
                    name,
                    arguments,
                },
                Err(reason) => Step::Reply(Message::error_response(
                    id,
                    ErrorCode::InvalidRequest,
                    reason,
                )),
            },
            other => Step::Reply(Message::error_response(
                id,
                ErrorCode::UnknownMethod,
                format!("unknown method {other}; the methods are tools/list and tools/call"),
            )),
        },
        Ok(Read::Message(Message::Hello { .. })) => Step::Reply(Message::Error {
            message: "hello was already received on this connection".into(),
        }),
        Ok(Read::Message(Message::Event { name, params })) => {
            match client_event(peer, name, params) {
                Ok(event) => Step::Event(event),
                Err(message) => Step::Reply(Message::Error { message }),
            }
        }
        Ok(Read::EventTooLong { name, bytes }) => Step::Reply(Message::Error {
            message: format!("event {name}: {}", PushError::TooLarge(bytes)),
        }),
        Ok(Read::Message(Message::Error { message })) => {
            tracing::debug!(%message, "the client reported an error");
            Step::Ignore
        }
        Ok(Read::Message(Message::Cancel { id })) => Step::Cancel(id),
        Ok(Read::Message(other)) => Step::Reply(Message::Error {
            message: format!("a client does not send {} messages", kind(&other)),
        }),
    }
}

/// Completes once shutdown has begun. (Not `wait_for` in a `select!`: its
/// guard would make the future `!Send`.)
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}

fn too_long_message() -> String {
    format!("line exceeds {} bytes", protocol::MAX_LINE)
}

fn kind(message: &Message) -> &'static str {
    match message {
        Message::Hello { .. } => "hello",
        Message::Welcome { .. } => "welcome",
        Message::Request { .. } => "request",
        Message::Response { .. } => "response",
        Message::Notify { .. } => "notify",
        Message::Event { .. } => "event",
        Message::Error { .. } => "error",
        Message::Cancel { .. } => "cancel",
    }
}

/// A client's event, if it is one the connection agreed on, with an object
/// of params (its line, within [`MAX_EVENT`], was measured when read); else
/// why not.
fn client_event(peer: &PeerInfo, name: String, params: Value) -> Result<Event, String> {
    if !peer.events.contains(&name) {
        return Err(format!("event {name} was not agreed on this connection"));
    }
    let Value::Object(params) = params else {
        return Err(format!("event {name}: params must be an object"));
    };
    Ok(Event::new(name, params))
}

/// Keeps a connection in the event table while it lives, and tells the
/// handler when it goes.
struct Known<'a>(&'a Shared, &'a PeerInfo);

impl Drop for Known<'_> {
    fn drop(&mut self) {
        self.0.clients().remove(&self.1.connection);
        self.0.handler.disconnected(self.1);
    }
}

/// A connection's writing half, each line bounded by the write timeout.
struct Writer {
    half: OwnedWriteHalf,
    timeout: Option<Duration>,
}

impl Writer {
    /// Writes one line; `false` once the peer is gone or has taken none of
    /// it within the timeout.
    async fn put(&mut self, line: &[u8]) -> bool {
        let write = self.half.write_all(line);
        let written = match self.timeout {
            None => write.await,
            Some(limit) => match tokio::time::timeout(limit, write).await {
                Ok(written) => written,
                Err(_) => {
                    tracing::warn!(
                        limit_ms = limit.as_millis(),
                        "closing a relay connection: the client stopped reading its replies"
                    );
                    return false;
                }
            },
        };
        written.is_ok()
    }
}

/// Writes replies and notifications, one line each, in the order they come.
/// When it returns, its queue is closed, which ends the connection.
async fn write_loop(
    mut writer: Writer,
    mut outgoing: mpsc::Receiver<Outgoing>,
    mut generation: watch::Receiver<u64>,
) {
    let mut watching = true;
    loop {
        let line = tokio::select! {
            biased;
            next = outgoing.recv() => match next {
                None => break,
                Some(Outgoing::Send(message)) => encode_within_limit(message),
                Some(Outgoing::Line(line)) => {
                    if !writer.put(&line).await {
                        break;
                    }
                    continue;
                }
                Some(Outgoing::Close(message)) => {
                    writer.put(&protocol::encode(&message)).await;
                    break;
                }
            },
            changed = generation.changed(), if watching => {
                if changed.is_err() {
                    watching = false;
                    continue;
                }
                generation.mark_unchanged();
                protocol::encode(&Message::Notify { event: TOOLS_CHANGED.into() })
            }
        };
        if !writer.put(&line).await {
            break;
        }
    }
    drop(outgoing);
    let _ = writer.half.shutdown().await;
}

/// The `name` and `arguments` of a `tools/call`.
pub(crate) fn parse_call(
    params: Option<Map<String, Value>>,
) -> Result<(String, Map<String, Value>), String> {
    let Some(mut params) = params else {
        return Err("tools/call needs params with the tool's name".into());
    };
    let name = match params.remove("name") {
        Some(Value::String(name)) => name,
        Some(_) => return Err("params.name must be a string".into()),
        None => return Err("tools/call needs params.name".into()),
    };
    let arguments = match params.remove("arguments") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(arguments)) => arguments,
        Some(_) => return Err("params.arguments must be an object".into()),
    };
    Ok((name, arguments))
}

#[allow(clippy::too_many_arguments)]
async fn run_call(
    shared: Arc<Shared>,
    peer: Arc<PeerInfo>,
    id: RequestId,
    name: String,
    arguments: Map<String, Value>,
    replies: mpsc::Sender<Outgoing>,
    _permit: OwnedSemaphorePermit,
    mut cancelled: Cancelled,
) {
    // A call its client cancels is dropped, and what it started with it; so
    // is one whose reply could no longer be written (the write loop ended).
    let reply = tokio::select! {
        reply = answer_call(&shared, peer, id.clone(), name, arguments) => reply,
        Ok(()) = &mut cancelled.signal => {
            tracing::debug!(?id, "the client cancelled a call");
            Message::error_response(id, ErrorCode::Cancelled, "the client cancelled the call")
        }
        () = replies.closed() => return,
    };
    let _ = replies.send(Outgoing::Send(reply)).await;
}

/// The response to a call: the handler's result, or why there is none.
async fn answer_call(
    shared: &Shared,
    peer: Arc<PeerInfo>,
    id: RequestId,
    name: String,
    arguments: Map<String, Value>,
) -> Message {
    let table = shared.table();
    let arguments = Value::Object(arguments);
    match table.validate(&name, &arguments) {
        None => {
            Message::error_response(id, ErrorCode::UnknownTool, format!("no tool named {name}"))
        }
        Some(Err(invalid)) => {
            // As the daemon's own toolsets say it: programs tell a mistake in
            // the call from a failure to carry it out.
            let result = ToolResult::error(invalid.report)
                .with_error_facts(serde_json::json!({"invalid_argument": invalid.argument}));
            result_message(id, &result)
        }
        Some(Ok(())) => {
            drop(table);
            let Value::Object(arguments) = arguments else {
                unreachable!("built as an object above")
            };
            let call = Call {
                name: name.clone(),
                arguments,
                peer,
            };
            let handler = &shared.handler;
            let outcome = match std::panic::catch_unwind(AssertUnwindSafe(|| handler.call(call))) {
                Ok(future) => CatchUnwind(future).await,
                Err(panic) => Err(panic_text(&*panic)),
            };
            match outcome {
                Ok(result) => result_message(id, &result),
                Err(panic) => {
                    tracing::error!(tool = %name, %panic, "a tool handler panicked");
                    Message::error_response(
                        id,
                        ErrorCode::Internal,
                        format!("the application failed while running {name}"),
                    )
                }
            }
        }
    }
}

/// `message` as a line. A response too long for one line becomes a tool
/// error saying so: the client would refuse the line by closing the
/// connection, failing every call on it without saying why.
fn encode_within_limit(message: Message) -> Vec<u8> {
    let line = protocol::encode(&message);
    let length = line.len() - 1;
    match message {
        Message::Response { id, .. } if length > protocol::MAX_LINE => {
            tracing::warn!(?id, length, "a reply too long for the relay was refused");
            let refusal = ToolResult::error(format!(
                "the result was {length} bytes, more than the {} a relay message may carry; ask for less (a smaller limit or a narrower request)",
                protocol::MAX_LINE
            ));
            protocol::encode(&result_message(id, &refusal))
        }
        _ => line,
    }
}

fn result_message(id: RequestId, result: &ToolResult) -> Message {
    match serde_json::to_value(result) {
        Ok(value) => Message::result(id, value),
        Err(e) => Message::error_response(
            id,
            ErrorCode::Internal,
            format!("the tool's result cannot be serialised: {e}"),
        ),
    }
}

/// Polls a handler's future, turning a panic into an error.
struct CatchUnwind<'a>(BoxFuture<'a, ToolResult>);

impl Future for CatchUnwind<'_> {
    type Output = Result<ToolResult, String>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let future = self.0.as_mut();
        match std::panic::catch_unwind(AssertUnwindSafe(|| future.poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(result)) => Poll::Ready(Ok(result)),
            Err(panic) => Poll::Ready(Err(panic_text(&*panic))),
        }
    }
}

fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn params(value: Value) -> Option<Map<String, Value>> {
        value.as_object().cloned()
    }

    #[test]
    fn call_params_are_checked() {
        assert_eq!(
            parse_call(params(json!({"name": "t", "arguments": {"a": 1}}))),
            Ok(("t".into(), params(json!({"a": 1})).unwrap()))
        );
        assert_eq!(
            parse_call(params(json!({"name": "t"}))),
            Ok(("t".into(), Map::new()))
        );
        assert_eq!(
            parse_call(params(json!({"name": "t", "arguments": null}))),
            Ok(("t".into(), Map::new()))
        );
        assert!(parse_call(None).is_err());
        assert!(parse_call(params(json!({"name": 3}))).is_err());
        assert!(parse_call(params(json!({"arguments": {}}))).is_err());
        assert!(parse_call(params(json!({"name": "t", "arguments": [1]}))).is_err());
    }
}
