//! Shared harness for the end-to-end tests: starts the real `switchboard`
//! binary and connects real MCP clients to it.
//!
//! Each test binary uses part of this module.
#![allow(dead_code)]

use std::{
    net::SocketAddr,
    process::{ExitStatus, Stdio},
    sync::{Arc, Mutex},
    time::Duration,
};

use rmcp::{
    ClientLifecycleMode, ClientServiceExt, RoleClient, ServiceExt,
    model::{
        CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, Implementation,
        JsonObject, ProtocolVersion,
    },
    service::RunningService,
    transport::{StreamableHttpClientTransport, TokioChildProcess},
};
use serde_json::Value;
use switchboard_testkit::process::ISOLATED_ENV;
use tokio::{
    io::{AsyncBufReadExt, BufReader},
    process::{Child, Command},
};

pub const BIN: &str = env!("CARGO_BIN_EXE_switchboard");

/// A `switchboard serve` command with a clean environment.
pub fn command(args: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.arg("serve").args(args);
    for var in ISOLATED_ENV {
        cmd.env_remove(var);
    }
    cmd.env("SWITCHBOARD_LOG", "info,rmcp=warn");
    cmd.kill_on_drop(true);
    cmd
}

/// A running `switchboard serve` with HTTP on a free loopback port.
pub struct Server {
    child: Child,
    pub addr: SocketAddr,
    pub log: Arc<Mutex<String>>,
}

impl Server {
    /// Starts `serve` with `args` (which must not choose HTTP's address
    /// unless it contains `--http`) and waits until HTTP is listening.
    pub async fn start(args: &[&str]) -> Self {
        Self::start_with(args, &[]).await
    }

    pub async fn start_with(args: &[&str], env: &[(&str, &str)]) -> Self {
        let mut all: Vec<&str> = args.to_vec();
        if !args.contains(&"--http") {
            all.extend(["--http", "127.0.0.1:0"]);
        }
        // Tests never take the user's standard relay socket.
        if !args.contains(&"--socket") {
            all.push("--no-socket");
        }
        let mut cmd = command(&all);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn switchboard");
        let log = Arc::new(Mutex::new(String::new()));
        let (addr_tx, addr_rx) = tokio::sync::oneshot::channel();
        let (relay_tx, relay_rx) = tokio::sync::oneshot::channel();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let sink = log.clone();
        tokio::spawn(async move {
            let (mut addr_tx, mut relay_tx) = (Some(addr_tx), Some(relay_tx));
            while let Ok(Some(line)) = lines.next_line().await {
                if line.contains("serving the relay socket at")
                    && let Some(tx) = relay_tx.take()
                {
                    let _ = tx.send(());
                }
                if let Some(rest) = line.split("serving MCP at http://").nth(1)
                    && let Some(tx) = addr_tx.take()
                {
                    let addr = rest
                        .split('/')
                        .next()
                        .unwrap()
                        .parse::<SocketAddr>()
                        .unwrap();
                    let _ = tx.send(addr);
                }
                let mut log = sink.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
        let addr = match tokio::time::timeout(Duration::from_secs(15), addr_rx).await {
            Ok(Ok(addr)) => addr,
            _ => {
                let status = child.try_wait().ok().flatten();
                panic!(
                    "switchboard did not start serving HTTP (exit: {status:?}); log:\n{}",
                    log.lock().unwrap()
                );
            }
        };
        // A relay socket is bound after HTTP: a shim dialled before would
        // find no application.
        if args.contains(&"--socket")
            && !matches!(
                tokio::time::timeout(Duration::from_secs(15), relay_rx).await,
                Ok(Ok(()))
            )
        {
            panic!(
                "switchboard did not start serving its relay socket; log:\n{}",
                log.lock().unwrap()
            );
        }
        Self { child, addr, log }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn pid(&self) -> i32 {
        self.child.id().expect("running") as i32
    }

    pub fn signal(&self, signal: i32) {
        // SAFETY: kill(2) on our own child with a valid signal number.
        assert_eq!(unsafe { libc::kill(self.pid(), signal) }, 0);
    }

    /// Waits (bounded) for the process to exit.
    pub async fn exit(mut self, within: Duration) -> ExitStatus {
        tokio::time::timeout(within, self.child.wait())
            .await
            .expect("switchboard did not exit in time")
            .expect("wait for switchboard")
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Waits (at most 10 s) until the log holds `needle`.
    pub async fn wait_for_log(&self, needle: &str) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !self.log().contains(needle) {
            assert!(
                std::time::Instant::now() < deadline,
                "{needle:?} not logged:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

pub type Client = RunningService<RoleClient, ClientConfig>;

fn client_config(version: ProtocolVersion) -> ClientConfig {
    ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("switchboard-tests", "0"),
    )
    .with_protocol_version(version)
}

/// An rmcp client over Streamable HTTP that starts with `initialize` at
/// `version`, or with `server/discover` for 2026-07-28 and later.
pub async fn http_client(url: &str, version: ProtocolVersion) -> Client {
    let transport = StreamableHttpClientTransport::from_uri(url.to_owned());
    connect(transport, version).await
}

/// [`http_client`] presenting `token` as its bearer token.
pub async fn http_client_as(url: &str, token: &str) -> Client {
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    let config = StreamableHttpClientTransportConfig::with_uri(url.to_owned()).auth_header(token);
    let transport = StreamableHttpClientTransport::from_config(config);
    connect(transport, ProtocolVersion::V_2025_11_25).await
}

/// An rmcp client that spawns `switchboard serve --stdio` with `args`.
pub async fn stdio_client(args: &[&str], version: ProtocolVersion) -> Client {
    stdio_client_with(args, &[], version).await
}

/// Like [`stdio_client`], with extra environment variables.
pub async fn stdio_client_with(
    args: &[&str],
    env: &[(&str, &str)],
    version: ProtocolVersion,
) -> Client {
    let mut all = vec!["--stdio"];
    all.extend_from_slice(args);
    let mut cmd = command(&all);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.stderr(Stdio::null());
    stdio_client_of(cmd, version).await
}

/// An rmcp client of `cmd`, a `serve --stdio` however it is started.
pub async fn stdio_client_of(cmd: Command, version: ProtocolVersion) -> Client {
    let transport = TokioChildProcess::new(cmd).expect("spawn switchboard --stdio");
    connect(transport, version).await
}

async fn connect<T, E, A>(transport: T, version: ProtocolVersion) -> Client
where
    T: rmcp::transport::IntoTransport<RoleClient, E, A>,
    E: std::error::Error + Send + Sync + 'static,
{
    let config = client_config(version.clone());
    let client = if version.has_initialize() {
        config.serve(transport).await
    } else {
        config
            .serve_with_lifecycle(
                transport,
                ClientLifecycleMode::Discover {
                    preferred_versions: vec![version],
                },
            )
            .await
    };
    client.expect("MCP client connects")
}

/// [`call`] in a task of its own, for a call that waits (a wait, a paced
/// send) while the test goes on.
pub fn spawn_call(
    client: &Client,
    tool: &'static str,
    args: Value,
) -> tokio::task::JoinHandle<CallToolResult> {
    let peer = client.peer().clone();
    let args: JsonObject = args.as_object().cloned().expect("arguments object");
    tokio::spawn(async move {
        peer.call_tool(CallToolRequestParams::new(tool).with_arguments(args))
            .await
            .expect("tools/call answered")
    })
}

/// Calls `tool` with a JSON object of arguments.
pub async fn call(client: &Client, tool: &str, args: Value) -> CallToolResult {
    try_call(client, tool, args)
        .await
        .expect("tools/call answered")
}

pub async fn try_call(
    client: &Client,
    tool: &str,
    args: Value,
) -> Result<CallToolResult, rmcp::ServiceError> {
    let args: JsonObject = args.as_object().cloned().expect("arguments object");
    client
        .call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(args))
        .await
}

/// The text of a result's single text block.
pub fn text(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// What a failed result tells programs (`_meta` under `ERROR_META`: an
/// `invalid_argument`, a `retry_after`, …); `Null` if nothing. A failed
/// result never carries `structuredContent`, which the tool's
/// `outputSchema` describes.
pub fn error_facts(result: &CallToolResult) -> &Value {
    assert!(
        result.structured_content.is_none(),
        "a failed result carries structuredContent: {result:?}"
    );
    result
        .meta
        .as_ref()
        .and_then(|meta| meta.get(switchboard_toolset::ERROR_META))
        .unwrap_or(&Value::Null)
}

pub fn is_error(result: &CallToolResult) -> bool {
    result.is_error == Some(true)
}

/// Sends and asserts the fixed confirmation text.
pub async fn send(client: &Client, channel: &str, sender: &str, text_: &str) -> CallToolResult {
    let result = call(
        client,
        "send_message",
        serde_json::json!({"channel": channel, "text": text_, "sender": sender}),
    )
    .await;
    assert!(!is_error(&result), "send failed: {}", text(&result));
    result
}

/// The message texts of a `read_messages` result, newest first.
pub fn texts(result: &CallToolResult) -> Vec<String> {
    result
        .structured_content
        .as_ref()
        .expect("structuredContent")["messages"]
        .as_array()
        .expect("messages array")
        .iter()
        .map(|m| m["text"].as_str().unwrap().to_owned())
        .collect()
}

/// A POST of a JSON body as MCP's HTTP transports take it: to `/mcp` or to
/// a legacy SSE session's endpoint.
pub fn post_json(http: &reqwest::Client, url: &str) -> reqwest::RequestBuilder {
    http.post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
}

/// A minimal client of the legacy HTTP+SSE transport, written from the
/// 2024-11-05 spec: it knows nothing of switchboard's code.
pub struct SseClient {
    http: reqwest::Client,
    events: tokio::sync::mpsc::Receiver<(String, String)>,
    pub endpoint: String,
    next_id: i64,
    /// Notifications read from the stream while waiting for a reply.
    notifications: Vec<Value>,
}

impl SseClient {
    /// Opens `GET /sse` on `base` and reads the `endpoint` event.
    pub async fn open(base: &str) -> Self {
        Self::open_as(base, None).await
    }

    /// [`SseClient::open`], sending `Authorization: Bearer <token>` with
    /// every request when given.
    pub async fn open_as(base: &str, token: Option<&str>) -> Self {
        use futures::StreamExt;
        let mut headers = reqwest::header::HeaderMap::new();
        if let Some(token) = token {
            headers.insert(
                reqwest::header::AUTHORIZATION,
                format!("Bearer {token}").parse().unwrap(),
            );
        }
        let http = reqwest::Client::builder()
            .default_headers(headers)
            .build()
            .unwrap();
        let response = http
            .get(format!("{base}/sse"))
            .header("accept", "text/event-stream")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let (tx, mut events) = tokio::sync::mpsc::channel(256);
        let mut body = response.bytes_stream();
        tokio::spawn(async move {
            let mut buffer = String::new();
            while let Some(Ok(chunk)) = body.next().await {
                buffer.push_str(&String::from_utf8_lossy(&chunk));
                while let Some(end) = buffer.find("\n\n") {
                    let block: String = buffer.drain(..end + 2).collect();
                    let mut event = "message".to_owned();
                    let mut data = Vec::new();
                    for line in block.lines() {
                        if let Some(v) = line.strip_prefix("event:") {
                            event = v.trim().to_owned();
                        } else if let Some(v) = line.strip_prefix("data:") {
                            data.push(v.strip_prefix(' ').unwrap_or(v).to_owned());
                        }
                    }
                    if !data.is_empty() && tx.send((event, data.join("\n"))).await.is_err() {
                        return;
                    }
                }
            }
        });
        let (event, data) = tokio::time::timeout(Duration::from_secs(10), events.recv())
            .await
            .expect("endpoint event in time")
            .expect("stream open");
        assert_eq!(event, "endpoint");
        assert!(data.starts_with("/messages/?session_id="), "{data}");
        Self {
            http,
            events,
            endpoint: format!("{base}{data}"),
            next_id: 0,
            notifications: Vec::new(),
        }
    }

    /// POSTs a raw body to the endpoint; returns the status.
    pub async fn post(&self, body: String) -> reqwest::StatusCode {
        post_json(&self.http, &self.endpoint)
            .body(body)
            .send()
            .await
            .unwrap()
            .status()
    }

    /// Sends a request and returns its response from the stream; the
    /// notifications before it are kept for [`SseClient::notification`].
    pub async fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let body =
            serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        assert_eq!(self.post(body.to_string()).await, 202);
        loop {
            let message = self
                .next_message(Duration::from_secs(30))
                .await
                .expect("reply in time");
            if message["id"] == id {
                return message;
            }
            if message.get("id").is_none() {
                self.notifications.push(message);
            }
        }
    }

    /// The next message on the stream, if one comes within `within`.
    async fn next_message(&mut self, within: Duration) -> Option<Value> {
        let (event, data) = tokio::time::timeout(within, self.events.recv())
            .await
            .ok()?
            .expect("stream open");
        assert_eq!(event, "message");
        Some(serde_json::from_str(&data).unwrap())
    }

    /// The first notification with `method` not yet taken, waiting up to
    /// `within` for it.
    pub async fn notification(&mut self, method: &str, within: Duration) -> Option<Value> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(at) = self
                .notifications
                .iter()
                .position(|n| n["method"] == method)
            {
                return Some(self.notifications.remove(at));
            }
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let message = self.next_message(left).await?;
            if message.get("id").is_none() {
                self.notifications.push(message);
            }
        }
    }

    /// Whether the server ends the event stream within `within` (events
    /// before the end are skipped).
    pub async fn ends_within(&mut self, within: Duration) -> bool {
        tokio::time::timeout(within, async {
            while self.events.recv().await.is_some() {}
        })
        .await
        .is_ok()
    }

    pub async fn notify(&self, method: &str) {
        let body = serde_json::json!({"jsonrpc": "2.0", "method": method});
        assert_eq!(self.post(body.to_string()).await, 202);
    }

    /// `initialize` at 2024-11-05 plus `notifications/initialized`.
    pub async fn initialize(&mut self) -> Value {
        let reply = self
            .request(
                "initialize",
                serde_json::json!({
                    "protocolVersion": "2024-11-05",
                    "capabilities": {},
                    "clientInfo": {"name": "sse-test", "version": "0"}
                }),
            )
            .await;
        self.notify("notifications/initialized").await;
        reply
    }

    pub async fn call(&mut self, tool: &str, arguments: Value) -> Value {
        self.request(
            "tools/call",
            serde_json::json!({"name": tool, "arguments": arguments}),
        )
        .await
    }
}

// --- the relay socket: `switchboard shim`, `tail`, `say` and the daemon ---

/// A private runtime directory (mode 0700) to give every child as
/// `XDG_RUNTIME_DIR`, so that no test touches the user's real one.
pub fn runtime_dir() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::Builder::new()
        .prefix("switchboard-runtime-")
        .tempdir()
        .expect("create a runtime dir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))
        .expect("chmod 0700");
    dir
}

/// `switchboard <args>` (any subcommand) with a clean environment, its
/// runtime dir at `runtime`, killed on drop.
pub fn switchboard(args: &[&str], runtime: &std::path::Path) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.args(args);
    for var in ISOLATED_ENV {
        cmd.env_remove(var);
    }
    cmd.env("XDG_RUNTIME_DIR", runtime);
    cmd.kill_on_drop(true);
    cmd
}

/// A `switchboard serve --no-http` daemon serving its tools on a relay
/// socket only, with its log (stderr) collected.
pub struct Daemon {
    child: Child,
    pub socket: std::path::PathBuf,
    pub log: Arc<Mutex<String>>,
}

impl Daemon {
    /// Starts `serve --ephemeral --no-http --socket <socket>` plus `args`
    /// and waits until the relay socket is being served.
    pub async fn start(socket: &std::path::Path, runtime: &std::path::Path, args: &[&str]) -> Self {
        let socket_arg = socket.to_str().expect("UTF-8 path");
        let mut all = vec!["--no-http", "--socket", socket_arg];
        if !args.contains(&"--data-dir") {
            all.push("--ephemeral");
        }
        all.extend_from_slice(args);
        let mut cmd = command(&all);
        cmd.env("XDG_RUNTIME_DIR", runtime);
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn switchboard serve");
        let log = Arc::new(Mutex::new(String::new()));
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let sink = log.clone();
        tokio::spawn(async move {
            let mut ready_tx = Some(ready_tx);
            while let Ok(Some(line)) = lines.next_line().await {
                let ready = line.contains("serving the relay socket at");
                {
                    let mut log = sink.lock().unwrap();
                    log.push_str(&line);
                    log.push('\n');
                }
                if ready && let Some(tx) = ready_tx.take() {
                    let _ = tx.send(());
                }
            }
        });
        if !matches!(
            tokio::time::timeout(Duration::from_secs(20), ready_rx).await,
            Ok(Ok(()))
        ) {
            let status = child.try_wait().ok().flatten();
            panic!(
                "switchboard did not serve its relay socket (exit: {status:?}); log:\n{}",
                log.lock().unwrap()
            );
        }
        Self {
            child,
            socket: socket.to_owned(),
            log,
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.id().expect("running") as i32
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// SIGTERM, then waits (bounded) for a clean exit.
    pub async fn stop(mut self) -> ExitStatus {
        // SAFETY: kill(2) on our own child with a valid signal number.
        assert_eq!(unsafe { libc::kill(self.pid(), libc::SIGTERM) }, 0);
        tokio::time::timeout(Duration::from_secs(15), self.child.wait())
            .await
            .expect("the daemon exits after SIGTERM")
            .expect("wait for the daemon")
    }
}

// --- a raw JSON-RPC client over a child's stdio, that records notifications ---

/// A notification as received, with when.
pub type Received = (std::time::Instant, Value);

/// A JSON-RPC client written from the spec, over a child process's stdin
/// and stdout: it sends requests and notifications of its own making and
/// records every notification the server sends, with its arrival time.
pub struct RawClient {
    child: Child,
    stdin: tokio::sync::Mutex<tokio::process::ChildStdin>,
    pending: Arc<Mutex<std::collections::HashMap<i64, tokio::sync::oneshot::Sender<Value>>>>,
    notes: Arc<Mutex<Vec<Received>>>,
    arrived: Arc<tokio::sync::Notify>,
    next_id: std::sync::atomic::AtomicI64,
    pub stderr: Arc<Mutex<String>>,
}

impl RawClient {
    /// Spawns `cmd` with its stdio piped to this client.
    pub fn spawn(mut cmd: Command) -> Self {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn the server");
        let pending: Arc<
            Mutex<std::collections::HashMap<i64, tokio::sync::oneshot::Sender<Value>>>,
        > = Arc::default();
        let notes: Arc<Mutex<Vec<Received>>> = Arc::default();
        let arrived = Arc::new(tokio::sync::Notify::new());
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
        {
            let (pending, notes, arrived) = (pending.clone(), notes.clone(), arrived.clone());
            tokio::spawn(async move {
                while let Ok(Some(line)) = out.next_line().await {
                    let message: Value = serde_json::from_str(&line)
                        .unwrap_or_else(|e| panic!("stdout carried a non-JSON line ({e}): {line}"));
                    match message.get("id").and_then(Value::as_i64) {
                        Some(id) if message.get("method").is_none() => {
                            if let Some(tx) = pending.lock().unwrap().remove(&id) {
                                let _ = tx.send(message);
                            }
                        }
                        _ => {
                            notes
                                .lock()
                                .unwrap()
                                .push((std::time::Instant::now(), message));
                            arrived.notify_waiters();
                        }
                    }
                }
            });
        }
        let mut err = BufReader::new(child.stderr.take().unwrap()).lines();
        {
            let sink = stderr.clone();
            tokio::spawn(async move {
                while let Ok(Some(line)) = err.next_line().await {
                    let mut log = sink.lock().unwrap();
                    log.push_str(&line);
                    log.push('\n');
                }
            });
        }
        let stdin = tokio::sync::Mutex::new(child.stdin.take().unwrap());
        Self {
            child,
            stdin,
            pending,
            notes,
            arrived,
            next_id: std::sync::atomic::AtomicI64::new(1),
            stderr,
        }
    }

    pub async fn send_line(&self, line: &str) {
        use tokio::io::AsyncWriteExt;
        let mut stdin = self.stdin.lock().await;
        let written = async {
            stdin.write_all(line.as_bytes()).await?;
            stdin.write_all(b"\n").await?;
            stdin.flush().await
        };
        if let Err(e) = written.await {
            // The server has gone: say why.
            tokio::time::sleep(Duration::from_millis(100)).await;
            panic!(
                "cannot write to the server ({e}); stderr:\n{}",
                self.stderr()
            );
        }
    }

    /// Sends a request and waits (up to 70 s) for its response.
    pub async fn request(&self, method: &str, params: Value) -> Value {
        let id = self
            .next_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.pending.lock().unwrap().insert(id, tx);
        let line =
            serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.send_line(&line.to_string()).await;
        tokio::time::timeout(Duration::from_secs(70), rx)
            .await
            .unwrap_or_else(|_| panic!("no response to {method}; stderr:\n{}", self.stderr()))
            .expect("the server answered")
    }

    pub async fn notify(&self, method: &str, params: Value) {
        let line = serde_json::json!({"jsonrpc": "2.0", "method": method, "params": params});
        self.send_line(&line.to_string()).await;
    }

    /// `initialize` (2025-06-18, as Claude Code speaks to channels) and
    /// `notifications/initialized`; returns the result.
    pub async fn initialize(&self) -> Value {
        let reply = self
            .request(
                "initialize",
                serde_json::json!({
                    "protocolVersion": "2025-06-18",
                    "capabilities": {"experimental": {"claude/channel": {}}},
                    "clientInfo": {"name": "raw-test-client", "version": "0"}
                }),
            )
            .await;
        self.notify("notifications/initialized", serde_json::json!({}))
            .await;
        reply["result"].clone()
    }

    /// Calls `tool`; returns the result (which may be a tool error).
    pub async fn call(&self, tool: &str, arguments: Value) -> Value {
        let reply = self
            .request(
                "tools/call",
                serde_json::json!({"name": tool, "arguments": arguments}),
            )
            .await;
        assert!(reply.get("error").is_none(), "{tool}: {reply}");
        reply["result"].clone()
    }

    /// Every notification with `method` so far.
    pub fn notifications(&self, method: &str) -> Vec<Received> {
        self.notes
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, n)| n["method"] == method)
            .cloned()
            .collect()
    }

    /// Waits up to `within` until `count` notifications with `method` have
    /// arrived; returns them all (possibly fewer on timeout).
    pub async fn wait_for(&self, method: &str, count: usize, within: Duration) -> Vec<Received> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let arrived = self.arrived.notified();
            let got = self.notifications(method);
            if got.len() >= count {
                return got;
            }
            if tokio::time::timeout_at(deadline, arrived).await.is_err() {
                return self.notifications(method);
            }
        }
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    pub fn pid(&self) -> u32 {
        self.child.id().expect("running")
    }

    /// Closes stdin and waits (bounded) for the child to exit.
    pub async fn close(mut self) -> ExitStatus {
        drop(self.stdin);
        tokio::time::timeout(Duration::from_secs(15), self.child.wait())
            .await
            .expect("the server exits when stdin closes")
            .expect("wait for the server")
    }
}

/// The text of a tool result object.
pub fn result_text(result: &Value) -> String {
    result["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Polls `probe` every 50 ms until it returns `Ok`, for at most `within`;
/// panics naming `what` with the last `Err` otherwise.
pub async fn eventually<T, F, Fut>(within: Duration, what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match probe().await {
            Ok(value) => return value,
            Err(last) if tokio::time::Instant::now() >= deadline => {
                panic!("waited {within:?} for {what}; last seen: {last}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}
