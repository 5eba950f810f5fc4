//! `switchboard shim` end to end: the real binary on raw stdin/stdout (and
//! under rmcp's client), relaying to real applications on a Unix socket —
//! an application built here on the `switchboard-relay` crate, the crate's
//! example `terminal_app`, the Python application written from the spec
//! alone (`crates/relay/tests/python/relay_app.py`), a raw socket playing a
//! broken application, and the switchboard daemon itself.
//!
//! Every child gets a private `XDG_RUNTIME_DIR`; sockets live in temp dirs.

mod common;

use std::{
    path::{Path, PathBuf},
    process::{ExitStatus, Stdio},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use common::{BIN, Daemon, runtime_dir, switchboard};
use rmcp::{
    ServiceExt,
    model::{
        CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation, ProtocolVersion,
    },
    transport::TokioChildProcess,
};
use serde_json::{Value, json};
use switchboard_relay::{Call, Handle, Options, PeerInfo, Tool, ToolHandler, ToolResult};
use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader},
    net::UnixListener,
    process::{Child, ChildStdin, Command},
    sync::mpsc,
    task::JoinHandle,
};

/// The bound on anything that should happen "at once".
const WAIT: Duration = Duration::from_secs(10);

// --- the shim on raw stdin/stdout -----------------------------------------

/// A `switchboard shim` child driven line by line. Every stdout line is
/// kept (for the purity sweeps) and stderr is collected.
struct Shim {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::UnboundedReceiver<Vec<u8>>,
    /// Every line the shim wrote on stdout, as bytes.
    stdout: Arc<Mutex<Vec<Vec<u8>>>>,
    stderr: Arc<Mutex<Vec<u8>>>,
    /// Messages read but not yet asked for (notifications, other replies).
    backlog: Vec<Value>,
    next_id: i64,
    /// The id of every request sent with `send_request`.
    sent: Vec<Value>,
}

impl Shim {
    /// `switchboard shim --socket <socket> <args>`.
    fn start(socket: &Path, runtime: &Path, args: &[&str]) -> Self {
        Self::start_with(socket, runtime, args, &[])
    }

    fn start_with(socket: &Path, runtime: &Path, args: &[&str], env: &[(&str, &str)]) -> Self {
        let mut all = vec!["shim", "--socket", socket.to_str().unwrap()];
        all.extend_from_slice(args);
        let mut cmd = switchboard(&all, runtime);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn switchboard shim");
        let stdout = Arc::new(Mutex::new(Vec::new()));
        let (tx, lines) = mpsc::unbounded_channel();
        {
            let mut out = BufReader::new(child.stdout.take().unwrap());
            let stdout = stdout.clone();
            tokio::spawn(async move {
                loop {
                    let mut line = Vec::new();
                    match out.read_until(b'\n', &mut line).await {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {
                            stdout.lock().unwrap().push(line.clone());
                            let _ = tx.send(line);
                        }
                    }
                }
            });
        }
        let stderr = Arc::new(Mutex::new(Vec::new()));
        {
            let mut err = child.stderr.take().unwrap();
            let stderr = stderr.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                while let Ok(n) = tokio::io::AsyncReadExt::read(&mut err, &mut buf).await {
                    if n == 0 {
                        break;
                    }
                    stderr.lock().unwrap().extend_from_slice(&buf[..n]);
                }
            });
        }
        Self {
            stdin: child.stdin.take(),
            child,
            lines,
            stdout,
            stderr,
            backlog: Vec::new(),
            next_id: 0,
            sent: Vec::new(),
        }
    }

    fn pid(&self) -> u32 {
        self.child.id().expect("running")
    }

    async fn send_raw(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(bytes).await.expect("write to the shim");
        stdin.flush().await.unwrap();
    }

    async fn send(&mut self, message: Value) {
        let mut line = message.to_string().into_bytes();
        line.push(b'\n');
        self.send_raw(&line).await;
    }

    /// The next message on stdout, within `within`.
    async fn read(&mut self, within: Duration) -> Option<Value> {
        let line = tokio::time::timeout(within, self.lines.recv())
            .await
            .ok()??;
        Some(serde_json::from_slice(&line).unwrap_or_else(|e| {
            panic!(
                "stdout carried a non-JSON line ({e}): {:?}",
                String::from_utf8_lossy(&line)
            )
        }))
    }

    /// The reply with `id`, keeping other messages for later.
    async fn reply_within(&mut self, id: &Value, within: Duration) -> Value {
        let deadline = Instant::now() + within;
        if let Some(i) = self.backlog.iter().position(|m| is_reply_to(m, id)) {
            return self.backlog.remove(i);
        }
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let Some(message) = self.read(left).await else {
                panic!(
                    "no reply to id {id} within {within:?}; stderr: {}",
                    self.stderr()
                );
            };
            if is_reply_to(&message, id) {
                return message;
            }
            self.backlog.push(message);
        }
    }

    async fn reply(&mut self, id: &Value) -> Value {
        self.reply_within(id, WAIT).await
    }

    /// Sends a request with a fresh numeric id; returns the id.
    async fn send_request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = json!(self.next_id);
        self.sent.push(id.clone());
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        id
    }

    /// A request and its whole reply (`result` or `error`).
    async fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.send_request(method, params).await;
        self.reply(&id).await
    }

    /// `initialize` at `version`, then `notifications/initialized`; returns
    /// the result.
    async fn initialize_as(&mut self, version: &str) -> Value {
        let reply = self
            .request(
                "initialize",
                json!({
                    "protocolVersion": version,
                    "capabilities": {},
                    "clientInfo": {"name": "relay-tests", "version": "0"}
                }),
            )
            .await;
        self.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        reply
            .get("result")
            .cloned()
            .unwrap_or_else(|| panic!("initialize failed: {reply}"))
    }

    async fn initialize(&mut self) -> Value {
        self.initialize_as("2025-11-25").await
    }

    /// `tools/list`: the tools array.
    async fn tools(&mut self) -> Vec<Value> {
        let reply = self.request("tools/list", json!({})).await;
        reply["result"]["tools"]
            .as_array()
            .unwrap_or_else(|| panic!("tools/list failed: {reply}"))
            .clone()
    }

    async fn tool_names(&mut self) -> Vec<String> {
        self.tools()
            .await
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect()
    }

    /// `tools/call`: the whole reply.
    async fn call_reply(&mut self, name: &str, arguments: Value) -> Value {
        self.request("tools/call", json!({"name": name, "arguments": arguments}))
            .await
    }

    /// `tools/call` that must produce a `CallToolResult`.
    async fn call(&mut self, name: &str, arguments: Value) -> Value {
        let reply = self.call_reply(name, arguments).await;
        reply
            .get("result")
            .cloned()
            .unwrap_or_else(|| panic!("tools/call {name} got no result: {reply}"))
    }

    /// A successful call's text.
    async fn call_ok(&mut self, name: &str, arguments: Value) -> String {
        let result = self.call(name, arguments).await;
        assert_eq!(result["isError"], false, "{name} failed: {result}");
        result_text(&result)
    }

    /// Waits for a notification `method` (taking it from the backlog first).
    async fn notified(&mut self, method: &str, within: Duration) -> bool {
        self.notification(method, within).await.is_some()
    }

    /// The next notification `method` (from the backlog first), if one
    /// comes within `within`.
    async fn notification(&mut self, method: &str, within: Duration) -> Option<Value> {
        if let Some(i) = self.backlog.iter().position(|m| m["method"] == method) {
            return Some(self.backlog.remove(i));
        }
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.read(left).await {
                None => return None,
                Some(message) if message["method"] == method => return Some(message),
                Some(message) => self.backlog.push(message),
            }
        }
    }

    /// Forgets every notification `method` received so far; returns how many.
    async fn drain(&mut self, method: &str) -> usize {
        while let Ok(line) = self.lines.try_recv() {
            self.backlog.push(serde_json::from_slice(&line).unwrap());
        }
        let before = self.backlog.len();
        self.backlog.retain(|m| m["method"] != method);
        before - self.backlog.len()
    }

    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().unwrap()).into_owned()
    }

    /// Closes stdin and waits (bounded) for the exit; returns the status,
    /// every stdout line and stderr.
    /// Closes stdin and checks the shim ends as it must: exit status 0,
    /// nothing on stderr, only JSON-RPC on stdout. Returns what it wrote.
    async fn finish_cleanly(self) -> Vec<Value> {
        let (status, stdout, stderr) = self.finish().await;
        assert!(status.success(), "{status:?}");
        assert_eq!(stderr, "", "the shim wrote to stderr");
        assert_pure_json_rpc(&stdout)
    }

    async fn finish(mut self) -> (ExitStatus, Vec<Vec<u8>>, String) {
        drop(self.stdin.take());
        let status = tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .expect("the shim exits after stdin closes")
            .unwrap();
        // Let the readers see the end of the pipes.
        for _ in 0..100 {
            if self.lines.is_closed() || self.lines.recv().await.is_none() {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        let stdout = self.stdout.lock().unwrap().clone();
        (status, stdout, self.stderr())
    }
}

fn is_reply_to(message: &Value, id: &Value) -> bool {
    message.get("id") == Some(id)
        && message.get("method").is_none()
        && (message.get("result").is_some() || message.get("error").is_some())
}

fn result_text(result: &Value) -> String {
    result["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Asserts `result` is a tool error whose text contains every one of `parts`.
fn assert_tool_error(result: &Value, parts: &[&str]) {
    assert_eq!(result["isError"], true, "not a tool error: {result}");
    let text = result_text(result);
    for part in parts {
        assert!(text.contains(part), "{text:?} lacks {part:?}");
    }
}

/// Asserts that every stdout line is one complete JSON-RPC 2.0 message: a
/// response (an `id` with exactly one of `result`/`error`) or a request or
/// notification (a `method`), and returns them.
fn assert_pure_json_rpc(lines: &[Vec<u8>]) -> Vec<Value> {
    lines
        .iter()
        .map(|raw| {
            let shown = String::from_utf8_lossy(raw);
            assert!(
                raw.ends_with(b"\n"),
                "a stdout line is unterminated: {shown:?}"
            );
            let message: Value = serde_json::from_slice(raw)
                .unwrap_or_else(|e| panic!("stdout carried a non-JSON line ({e}): {shown:?}"));
            let object = message
                .as_object()
                .unwrap_or_else(|| panic!("stdout carried a non-object: {shown:?}"));
            assert_eq!(object.get("jsonrpc"), Some(&json!("2.0")), "{shown}");
            let reply = object.contains_key("id")
                && (object.contains_key("result") ^ object.contains_key("error"));
            let call = object.get("method").is_some_and(Value::is_string);
            assert!(reply ^ call, "not a JSON-RPC message: {shown}");
            if let Some(error) = object.get("error") {
                assert!(error["code"].is_i64(), "{shown}");
                assert!(error["message"].is_string(), "{shown}");
            }
            message
        })
        .collect()
}

/// A temp dir holding `<dir>/<name>/relay.sock`, and the runtime dir.
struct Place {
    _dir: tempfile::TempDir,
    runtime: tempfile::TempDir,
    socket: PathBuf,
}

impl Place {
    fn new(name: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join(name).join("relay.sock");
        std::fs::create_dir_all(socket.parent().unwrap()).unwrap();
        Self {
            _dir: dir,
            runtime: runtime_dir(),
            socket,
        }
    }

    fn shim(&self, args: &[&str]) -> Shim {
        Shim::start(&self.socket, self.runtime.path(), args)
    }

    fn cache_file(&self) -> PathBuf {
        let mut name = self.socket.clone().into_os_string();
        name.push(".tools.json");
        PathBuf::from(name)
    }
}

// --- an application built on switchboard-relay, in this process ----------

const APP_NAME: &str = "Relay Test App";

#[derive(Default)]
struct AppState {
    /// The peer of every call that reached the handler.
    peers: Mutex<Vec<Arc<PeerInfo>>>,
    /// Whether the `extra` tool is offered.
    extra: AtomicBool,
}

/// Tools:
/// - `echo {text}` answers the text;
/// - `slow {ms, tag?}` sleeps, then answers `<tag> slept <ms> ms` (declares
///   `timeout_ms` 20000);
/// - `hang {}` never answers (an hour);
/// - `whoami {}` answers the peer as structured content;
/// - `big {bytes}` answers a text of that many bytes (one relay line longer
///   than the protocol's 1 MiB when `bytes` is large);
/// - `extra {}` exists only while `AppState::extra` is set.
struct TestTools(Arc<AppState>);

impl ToolHandler for TestTools {
    fn tools(&self) -> Vec<Tool> {
        let mut tools = vec![
            Tool::new(
                "echo",
                "Say the text back.",
                json!({
                    "type": "object",
                    "properties": {"text": {"type": "string"}},
                    "required": ["text"],
                    "additionalProperties": false
                }),
            )
            .with_title("Echo")
            .with_annotations(json!({"readOnlyHint": true})),
            Tool::new(
                "slow",
                "Wait, then answer.",
                json!({
                    "type": "object",
                    "properties": {
                        "ms": {"type": "integer", "minimum": 0, "maximum": 10000},
                        "tag": {"type": "string"}
                    },
                    "required": ["ms"]
                }),
            )
            .with_timeout_ms(20_000),
            Tool::new("hang", "Never answer.", json!({"type": "object"})),
            Tool::new("whoami", "Who is calling.", json!({"type": "object"})),
            Tool::new(
                "big",
                "A long answer.",
                json!({
                    "type": "object",
                    "properties": {"bytes": {"type": "integer", "minimum": 0}},
                    "required": ["bytes"]
                }),
            ),
        ];
        if self.0.extra.load(Ordering::SeqCst) {
            tools.push(Tool::new(
                "extra",
                "Appears on demand.",
                json!({"type": "object"}),
            ));
        }
        tools
    }

    async fn call(&self, call: Call) -> ToolResult {
        self.0.peers.lock().unwrap().push(call.peer.clone());
        let args = &call.arguments;
        match call.name.as_str() {
            "echo" => ToolResult::text(args["text"].as_str().unwrap_or_default()),
            "slow" => {
                let ms = args["ms"].as_u64().unwrap_or(0);
                tokio::time::sleep(Duration::from_millis(ms)).await;
                let tag = args.get("tag").and_then(Value::as_str).unwrap_or("");
                ToolResult::text(format!("{tag} slept {ms} ms"))
            }
            "hang" => {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                ToolResult::text("too late")
            }
            "whoami" => {
                let peer = &call.peer;
                let ancestry: Vec<Value> = peer
                    .ancestry
                    .iter()
                    .map(|p| json!({"pid": p.pid, "name": p.name}))
                    .collect();
                ToolResult::structured(
                    format!("pid {}", peer.pid),
                    json!({"pid": peer.pid, "uid": peer.uid, "client": peer.client, "ancestry": ancestry}),
                )
            }
            "big" => ToolResult::text("x".repeat(args["bytes"].as_u64().unwrap_or(0) as usize)),
            "extra" => ToolResult::text("extra!"),
            other => ToolResult::error(format!("no tool {other}")),
        }
    }
}

/// The application serving on a socket until stopped.
struct TestApp {
    handle: Handle,
    task: JoinHandle<std::io::Result<()>>,
    state: Arc<AppState>,
}

impl TestApp {
    fn start(socket: &Path) -> Self {
        Self::start_with(socket, Arc::default())
    }

    fn start_with(socket: &Path, state: Arc<AppState>) -> Self {
        let server = Options::new("dev.switchboard.relay-tests")
            .app_name(APP_NAME)
            .socket_path(socket)
            .shutdown_grace(Duration::from_millis(300))
            .bind(TestTools(state.clone()))
            .expect("bind the test app");
        let handle = server.handle();
        let task = tokio::spawn(server.serve(std::future::pending()));
        Self {
            handle,
            task,
            state,
        }
    }

    /// Announces a changed tool list (toggles `extra`).
    fn toggle_extra(&self) {
        self.state.extra.fetch_xor(true, Ordering::SeqCst);
        self.handle.tools_changed().expect("valid tools");
    }

    /// Shuts down gracefully; the socket is gone afterwards.
    async fn stop(self) -> Arc<AppState> {
        self.handle.shutdown();
        tokio::time::timeout(WAIT, self.task)
            .await
            .expect("the app stops")
            .unwrap()
            .unwrap();
        self.state
    }
}

// --- the handshake --------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initialize_negotiates_and_the_shim_answers_ping_and_json_rpc_errors() {
    let place = Place::new("dev.test.handshake");
    let app = TestApp::start(&place.socket);

    for (asked, agreed) in [
        ("2024-11-05", "2024-11-05"),
        ("2025-11-25", "2025-11-25"),
        ("1999-01-01", "2025-11-25"),
        ("", "2025-11-25"),
    ] {
        let mut shim = place.shim(&[]);
        let result = shim.initialize_as(asked).await;
        assert_eq!(result["protocolVersion"], agreed, "asked {asked:?}");
        assert_eq!(result["serverInfo"]["name"], "switchboard-shim");
        assert_eq!(result["capabilities"]["tools"]["listChanged"], true);
        shim.finish_cleanly().await;
    }

    let mut shim = place.shim(&[]);
    shim.initialize().await;
    let pong = shim.request("ping", json!({})).await;
    assert_eq!(pong["result"], json!({}), "{pong}");
    // A ping with no params at all, and with a string id.
    shim.send(json!({"jsonrpc": "2.0", "id": "p-1", "method": "ping"}))
        .await;
    assert_eq!(shim.reply(&json!("p-1")).await["result"], json!({}));

    let unknown = shim.request("resources/list", json!({})).await;
    assert_eq!(unknown["error"]["code"], -32601, "{unknown}");
    assert!(
        unknown["error"]["message"]
            .as_str()
            .unwrap()
            .contains("resources/list")
    );
    // A notification of an unknown method gets no reply at all.
    shim.send(json!({"jsonrpc": "2.0", "method": "notifications/whatever"}))
        .await;

    shim.send_raw(b"{\"jsonrpc\": \"2.0\", \"id\": 5, \"method\": \n")
        .await;
    let parse = shim.reply(&Value::Null).await;
    assert_eq!(parse["error"]["code"], -32700, "{parse}");
    shim.send_raw(b"[1, 2, 3]\n").await;
    let not_object = shim.reply(&Value::Null).await;
    assert_eq!(not_object["error"]["code"], -32600, "{not_object}");
    let bad_params = shim.request("tools/list", json!([1])).await;
    assert_eq!(bad_params["error"]["code"], -32602, "{bad_params}");

    // The application saw this shim's hello: its pid, its name, and the
    // process that spawned it — this test.
    let who = shim.call("whoami", json!({})).await;
    let who = &who["structuredContent"];
    assert_eq!(who["pid"], shim.pid(), "{who}");
    assert!(
        who["client"]
            .as_str()
            .unwrap()
            .starts_with("switchboard-shim "),
        "{who}"
    );
    assert_eq!(who["ancestry"][0]["pid"], shim.pid(), "{who}");
    assert_eq!(who["ancestry"][1]["pid"], std::process::id(), "{who}");

    let shim_pid = shim.pid();
    let messages = shim.finish_cleanly().await;
    let replies = messages.iter().filter(|m| m.get("id").is_some()).count();
    // initialize, 2 pings, unknown method, parse error, non-object, bad params, whoami.
    assert_eq!(replies, 8, "{messages:?}");

    let state = app.stop().await;
    let peers = state.peers.lock().unwrap();
    assert!(!peers.is_empty());
    for peer in peers.iter() {
        assert_eq!(peer.pid, shim_pid);
        assert_eq!(peer.uid, unsafe { libc::geteuid() });
    }
}

// --- forwarding -----------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_and_call_are_forwarded_and_the_app_validates_arguments() {
    let place = Place::new("dev.test.forward");
    let app = TestApp::start(&place.socket);
    let mut shim = place.shim(&[]);
    shim.initialize().await;

    let tools = shim.tools().await;
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["echo", "slow", "hang", "whoami", "big"]);
    for tool in &tools {
        assert!(
            tool.get("timeout_ms").is_none(),
            "timeout_ms leaked: {tool}"
        );
        assert_eq!(tool["inputSchema"]["type"], "object", "{tool}");
    }
    assert_eq!(tools[0]["title"], "Echo");
    assert_eq!(tools[0]["annotations"]["readOnlyHint"], true);
    assert_eq!(tools[1]["description"], "Wait, then answer.");

    assert_eq!(
        shim.call_ok("echo", json!({"text": "héllo 🎉"})).await,
        "héllo 🎉"
    );
    // Arguments omitted, or null, mean {}.
    let none = shim.request("tools/call", json!({"name": "whoami"})).await;
    assert_eq!(none["result"]["isError"], false, "{none}");

    // The application re-validates: errors are tool errors naming the field.
    let wrong_type = shim.call("echo", json!({"text": 17})).await;
    assert_tool_error(
        &wrong_type,
        &[
            "invalid arguments for echo",
            "17 is not of type \"string\"",
            "(at /text)",
        ],
    );
    let missing = shim.call("echo", json!({})).await;
    assert_tool_error(&missing, &["\"text\" is a required property", "(at /)"]);
    let extra = shim.call("echo", json!({"text": "a", "loud": true})).await;
    assert_tool_error(&extra, &["loud"]);
    let range = shim.call("slow", json!({"ms": 99_999})).await;
    assert_tool_error(&range, &["99999", "(at /ms)"]);

    let unknown = shim.call_reply("frobnicate", json!({})).await;
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
    assert!(
        unknown["error"]["message"]
            .as_str()
            .unwrap()
            .contains("frobnicate"),
        "{unknown}"
    );
    let no_name = shim.request("tools/call", json!({"arguments": {}})).await;
    assert_eq!(no_name["error"]["code"], -32602, "{no_name}");
    let bad_arguments = shim
        .request("tools/call", json!({"name": "echo", "arguments": [1]}))
        .await;
    assert_eq!(bad_arguments["error"]["code"], -32602, "{bad_arguments}");

    // None of those broke the link: the next call works.
    assert_eq!(
        shim.call_ok("echo", json!({"text": "still"})).await,
        "still"
    );
    shim.finish_cleanly().await;
    app.stop().await;
}

// --- the application away -------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_app_never_started_still_gives_a_working_session() {
    let place = Place::new("dev.test.absent");
    let mut shim = place.shim(&[]);
    let started = Instant::now();
    let result = shim.initialize().await;
    assert_eq!(result["protocolVersion"], "2025-11-25");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "initialize took {:?}",
        started.elapsed()
    );
    // Never seen, the app may push once it is up: the host must know now.
    assert_eq!(
        result["capabilities"]["experimental"],
        json!({"claude/channel": {}}),
        "{result}"
    );
    assert_eq!(shim.tools().await, Vec::<Value>::new());
    let call = shim.call("echo", json!({"text": "hi"})).await;
    // Named after the socket's directory until the app has said its name.
    assert_tool_error(&call, &["dev.test.absent is not running"]);
    assert_eq!(shim.request("ping", json!({})).await["result"], json!({}));
    assert!(!place.cache_file().exists(), "nothing to cache");
    shim.finish_cleanly().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_shim_serves_the_cached_list_while_the_app_is_away() {
    let place = Place::new("dev.test.cache");
    let app = TestApp::start(&place.socket);
    let mut first = place.shim(&[]);
    first.initialize().await;
    let seen = first.tools().await;
    assert_eq!(seen.len(), 5);
    let (status, _, _) = first.finish().await;
    assert!(status.success());
    app.stop().await;
    assert!(!place.socket.exists(), "the app removed its socket");
    let cache = place.cache_file();
    assert!(cache.is_file(), "no cache at {}", cache.display());
    assert!(
        std::fs::read_to_string(&cache)
            .unwrap()
            .contains("timeout_ms"),
        "the cache keeps the relay fields"
    );

    // A new shim process, the app still away.
    let mut second = place.shim(&[]);
    second.initialize().await;
    assert_eq!(second.tools().await, seen);
    let call = second.call("echo", json!({"text": "hi"})).await;
    assert_tool_error(&call, &[&format!("{APP_NAME} is not running")]);
    let (status, stdout, stderr) = second.finish().await;
    assert!(status.success());
    assert_eq!(stderr, "");
    assert_pure_json_rpc(&stdout);
}

// --- an unresponsive application -------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_never_returns_times_out_and_the_shim_stays_healthy() {
    let place = Place::new("dev.test.hang");
    let app = TestApp::start(&place.socket);
    let mut shim = place.shim(&["--call-timeout-ms", "500"]);
    shim.initialize().await;
    assert_eq!(shim.tools().await.len(), 5);

    let started = Instant::now();
    let result = shim.call("hang", json!({})).await;
    let took = started.elapsed();
    assert_tool_error(
        &result,
        &[
            &format!("{APP_NAME} did not respond in time"),
            "may still have run",
        ],
    );
    assert!(
        took >= Duration::from_millis(450) && took < Duration::from_millis(2500),
        "the timeout took {took:?}"
    );
    // Healthy: the next call works (on a new connection), and so does ping.
    assert_eq!(shim.call_ok("echo", json!({"text": "next"})).await, "next");
    assert_eq!(shim.request("ping", json!({})).await["result"], json!({}));
    // A tool's declared timeout_ms (20 s) beats the shim's 500 ms.
    assert_eq!(
        shim.call_ok("slow", json!({"ms": 1200, "tag": "t"})).await,
        "t slept 1200 ms"
    );
    shim.finish_cleanly().await;
    app.stop().await;
}

// --- restarts and list changes --------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_app_is_redialled_and_its_changes_are_announced() {
    let place = Place::new("dev.test.restart");
    let app = TestApp::start(&place.socket);
    let mut shim = place.shim(&[]);
    shim.initialize().await;
    assert_eq!(shim.tools().await.len(), 5);
    assert_eq!(shim.call_ok("echo", json!({"text": "one"})).await, "one");

    // The list changes while connected.
    shim.drain("notifications/tools/list_changed").await;
    app.toggle_extra();
    assert!(
        shim.notified("notifications/tools/list_changed", WAIT)
            .await,
        "no list_changed after the app's tools changed"
    );
    assert!(shim.tool_names().await.contains(&"extra".to_owned()));
    assert_eq!(shim.call_ok("extra", json!({})).await, "extra!");

    // The app quits: calls fail cleanly, the list is the last one seen.
    let state = app.stop().await;
    let away = shim.call("echo", json!({"text": "two"})).await;
    assert_tool_error(&away, &[&format!("{APP_NAME} is not running")]);
    assert_eq!(shim.tools().await.len(), 6);

    // It comes back on the same socket: the very next call works.
    shim.drain("notifications/tools/list_changed").await;
    let app = TestApp::start_with(&place.socket, state);
    assert_eq!(
        shim.call_ok("echo", json!({"text": "three"})).await,
        "three"
    );
    // And its return is announced.
    assert!(
        shim.notified("notifications/tools/list_changed", WAIT)
            .await,
        "no list_changed after the app came back"
    );

    // A change after the restart is announced too.
    shim.drain("notifications/tools/list_changed").await;
    app.toggle_extra();
    assert!(
        shim.notified("notifications/tools/list_changed", WAIT)
            .await,
        "no list_changed after a change on the new connection"
    );
    assert!(!shim.tool_names().await.contains(&"extra".to_owned()));

    shim.finish_cleanly().await;
    app.stop().await;
}

/// After a call times out the shim drops that connection and dials a new
/// one; a tool-list change announced on the new connection must still reach
/// the agent, even while the application is still busy with the timed-out
/// call on the old one. (The crate's own server also notifies a half-closed
/// connection; `forgetful_app` below, like the Python app, does not.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_changes_are_announced_after_a_timed_out_call() {
    let place = Place::new("dev.test.timeout-then-change");
    let app = TestApp::start(&place.socket);
    let mut shim = place.shim(&["--call-timeout-ms", "500"]);
    shim.initialize().await;
    assert_eq!(shim.tools().await.len(), 5);
    assert_tool_error(
        &shim.call("hang", json!({})).await,
        &["did not respond in time"],
    );
    assert_eq!(shim.call_ok("echo", json!({"text": "x"})).await, "x");

    // The new connection may be announced as a (re)appearance; let that
    // pass, so that only the change itself can satisfy the wait below.
    let _ = shim
        .notified("notifications/tools/list_changed", Duration::from_secs(2))
        .await;
    shim.drain("notifications/tools/list_changed").await;
    app.toggle_extra();
    assert!(
        shim.notified("notifications/tools/list_changed", Duration::from_secs(5))
            .await,
        "the change was not announced"
    );
    shim.finish_cleanly().await;
    app.stop().await;
}

/// A spec-conforming application on a raw socket that, like the Python
/// app, stops notifying a connection once the client has hung up, while a
/// call of that connection is still running (`hang` keeps it open). Tools:
/// `hang {}`, `echo {}`, and `extra {}` once `extra` is set; `changed` makes
/// it send `notify tools_changed` to every connection still in use.
async fn forgetful_app(
    listener: UnixListener,
    extra: Arc<AtomicBool>,
    changed: tokio::sync::broadcast::Sender<()>,
) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            return;
        };
        let (extra, mut changed) = (extra.clone(), changed.subscribe());
        tokio::spawn(async move {
            let (reader, writer) = stream.into_split();
            let writer = Arc::new(tokio::sync::Mutex::new(writer));
            let send = |writer: Arc<tokio::sync::Mutex<tokio::net::unix::OwnedWriteHalf>>,
                        message: Value| async move {
                let mut line = message.to_string().into_bytes();
                line.push(b'\n');
                let _ = writer.lock().await.write_all(&line).await;
            };
            let mut lines = BufReader::new(reader).lines();
            let Ok(Some(_hello)) = lines.next_line().await else {
                return;
            };
            send(
                writer.clone(),
                json!({"type": "welcome", "protocol": 1, "app": "Forgetful App", "app_id": "dev.test.forgetful"}),
            )
            .await;
            loop {
                tokio::select! {
                    line = lines.next_line() => {
                        let Ok(Some(line)) = line else { break };
                        let Ok(request) = serde_json::from_str::<Value>(&line) else { continue };
                        let id = request["id"].clone();
                        match (request["method"].as_str(), request["params"]["name"].as_str()) {
                            (Some("tools/list"), _) => {
                                let mut tools = vec![
                                    json!({"name": "hang", "inputSchema": {"type": "object"}}),
                                    json!({"name": "echo", "inputSchema": {"type": "object"}}),
                                ];
                                if extra.load(Ordering::SeqCst) {
                                    tools.push(json!({"name": "extra", "inputSchema": {"type": "object"}}));
                                }
                                send(writer.clone(), json!({"type": "response", "id": id, "result": {"tools": tools}})).await;
                            }
                            (Some("tools/call"), Some("hang")) => {
                                // Holds the connection open for as long as it "runs".
                                let writer = writer.clone();
                                tokio::spawn(async move {
                                    tokio::time::sleep(Duration::from_secs(3600)).await;
                                    drop(writer);
                                });
                            }
                            _ => {
                                let result = json!({"content": [{"type": "text", "text": "ok"}], "isError": false});
                                send(writer.clone(), json!({"type": "response", "id": id, "result": result})).await;
                            }
                        }
                    }
                    Ok(()) = changed.recv() => {
                        send(writer.clone(), json!({"type": "notify", "event": "tools_changed"})).await;
                    }
                }
            }
            // The client hung up: this connection gets no more notifications,
            // though it stays open while its `hang` runs.
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_changes_are_announced_after_a_timed_out_call_to_a_forgetful_app() {
    let place = Place::new("dev.test.forgetful");
    let extra = Arc::new(AtomicBool::new(false));
    let (changed, _) = tokio::sync::broadcast::channel(8);
    let app = tokio::spawn(forgetful_app(
        UnixListener::bind(&place.socket).unwrap(),
        extra.clone(),
        changed.clone(),
    ));
    let mut shim = place.shim(&["--call-timeout-ms", "500"]);
    shim.initialize().await;
    assert_eq!(shim.tool_names().await, ["hang", "echo"]);
    assert_tool_error(
        &shim.call("hang", json!({})).await,
        &["Forgetful App did not respond in time"],
    );
    // The next call dials a new connection and works.
    assert_eq!(shim.call_ok("echo", json!({})).await, "ok");

    // The new connection may be announced as a (re)appearance; let that
    // pass, so that only the change itself can satisfy the wait below.
    let _ = shim
        .notified("notifications/tools/list_changed", Duration::from_secs(2))
        .await;
    shim.drain("notifications/tools/list_changed").await;
    extra.store(true, Ordering::SeqCst);
    changed.send(()).unwrap();
    let announced = shim
        .notified("notifications/tools/list_changed", Duration::from_secs(5))
        .await;
    assert!(
        announced,
        "a list change on the new connection was not announced: the shim's \
         watcher still follows the connection it dropped after the timeout"
    );
    assert_eq!(shim.tool_names().await, ["hang", "echo", "extra"]);
    shim.finish_cleanly().await;
    app.abort();
}

/// An application that answers every request with `answer(method, params)`
/// as its result, protocol or not.
async fn scripted_app(
    listener: UnixListener,
    answer: impl Fn(&str, &Value) -> Value + Send + Sync + 'static,
) {
    let answer = Arc::new(answer);
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            return;
        };
        let answer = answer.clone();
        tokio::spawn(async move {
            let (reader, mut writer) = stream.into_split();
            let mut lines = BufReader::new(reader).lines();
            let welcome = json!({"type": "welcome", "protocol": 1, "app": "Scripted App", "app_id": "dev.test.scripted"});
            let mut replies = vec![welcome];
            while let Ok(Some(line)) = lines.next_line().await {
                if let Ok(request) = serde_json::from_str::<Value>(&line)
                    && let Some(method) = request["method"].as_str()
                {
                    let result = answer(method, &request["params"]);
                    replies
                        .push(json!({"type": "response", "id": request["id"], "result": result}));
                }
                for reply in replies.drain(..) {
                    let mut line = reply.to_string().into_bytes();
                    line.push(b'\n');
                    if writer.write_all(&line).await.is_err() {
                        return;
                    }
                }
            }
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_application_answering_outside_the_protocol_gets_clear_errors() {
    let place = Place::new("dev.test.scripted");
    let garbled_list = Arc::new(AtomicBool::new(false));
    let garble = garbled_list.clone();
    let app = tokio::spawn(scripted_app(
        UnixListener::bind(&place.socket).unwrap(),
        move |method, params| match method {
            "tools/list" if garble.load(Ordering::SeqCst) => json!({"tools": [
                {"name": 5},
                {"name": "garbled", "inputSchema": {"type": "object"}},
                {"name": "no_schema"},
                {"name": "garbled", "inputSchema": {"type": "object"}},
                {"name": "schema_not_an_object", "inputSchema": true},
                {"name": "kept", "inputSchema": {"type": "object"}, "title": "Kept"},
                {"name": "annotated", "inputSchema": {"type": "object"}, "annotations": "x"},
                {"name": "string_args", "inputSchema": {"type": "string"}},
                {"name": "with space", "inputSchema": {"type": "object"}},
                {"name": "iconic", "inputSchema": {"type": "object"}, "icons": [{"src": 1}]}
            ]}),
            "tools/list" => {
                json!({"tools": [{"name": "garbled", "inputSchema": {"type": "object"}, "timeout_ms": 2000}]})
            }
            _ if params["name"] == "kept" => json!({"content": [
                {"type": "text", "text": "fine"},
                {"type": "text"}
            ]}),
            _ if params["name"] == "structured" => {
                json!({"content": [], "structuredContent": [1, 2]})
            }
            _ => json!({"content": "not a list of blocks"}),
        },
    ));
    let log_file = place.runtime.path().join("shim.log");
    let mut shim = place.shim(&["--log-file", log_file.to_str().unwrap()]);
    shim.initialize().await;
    let tools = shim.tools().await;
    assert_eq!(tools.len(), 1);
    assert_eq!(tools[0]["name"], "garbled");
    assert!(tools[0].get("timeout_ms").is_none(), "{}", tools[0]);
    // A result that is not a CallToolResult is a tool error naming the app
    // and what is wrong, which MCP hosts would refuse whole.
    assert_tool_error(
        &shim.call("garbled", json!({})).await,
        &["Scripted App returned a malformed result for garbled: `content` must be an array"],
    );
    assert_tool_error(
        &shim.call("kept", json!({})).await,
        &["Scripted App returned a malformed result for kept: `content[1].text` is missing"],
    );
    assert_tool_error(
        &shim.call("structured", json!({})).await,
        &["malformed result for structured: `structuredContent` must be an object"],
    );
    // Entries that are not tools are left out (and logged); the rest are
    // listed.
    garbled_list.store(true, Ordering::SeqCst);
    assert_eq!(shim.tool_names().await, ["garbled", "kept"]);
    let log = std::fs::read_to_string(&log_file).unwrap();
    for left_out in [
        "tool 0: `name` must be a string",
        "tool 2 (\"no_schema\"): `inputSchema` is missing",
        "tool 3 (\"garbled\"): two tools are named `garbled`",
        "tool 4 (\"schema_not_an_object\"): `inputSchema` must be an object",
        "tool 6 (\"annotated\"): `annotations` must be an object",
        "tool 7 (\"string_args\"): `inputSchema.type` must be \"object\"",
        "tool 8 (\"with space\"): the tool name \"with space\" is not one MCP hosts accept",
        "tool 9 (\"iconic\"): `icons[0].src` must be a string",
    ] {
        assert!(
            log.contains(left_out),
            "{left_out:?} not in the log:\n{log}"
        );
    }
    shim.finish_cleanly().await;
    app.abort();
}

/// An application on a raw socket that counts its connections and, on each,
/// reads the hello and says `lines`; then closes if `close` is set, else
/// reads until the shim hangs up.
async fn handshake_app(
    listener: UnixListener,
    lines: Vec<Value>,
    close: bool,
    connections: Arc<AtomicUsize>,
) {
    let said: String = lines.iter().map(|l| format!("{l}\n")).collect();
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            return;
        };
        connections.fetch_add(1, Ordering::SeqCst);
        let said = said.clone();
        tokio::spawn(async move {
            let (reader, mut writer) = stream.into_split();
            let mut reader = BufReader::new(reader).lines();
            if !matches!(reader.next_line().await, Ok(Some(_))) {
                return;
            }
            let _ = writer.write_all(said.as_bytes()).await;
            if !close {
                while let Ok(Some(_)) = reader.next_line().await {}
            }
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_application_of_another_protocol_version_is_refused_naming_both() {
    let place = Place::new("dev.test.protocol2");
    let welcome = json!({"type": "welcome", "protocol": 2, "app": "Future App", "app_id": "dev.test.protocol2"});
    let app = tokio::spawn(handshake_app(
        UnixListener::bind(&place.socket).unwrap(),
        vec![welcome],
        false,
        Arc::default(),
    ));
    let mut shim = place.shim(&[]);
    shim.initialize().await;
    assert_tool_error(
        &shim.call("anything", json!({})).await,
        &[
            "dev.test.protocol2 cannot be used: the application speaks relay protocol version 2; this client speaks version 1",
        ],
    );
    shim.finish_cleanly().await;
    app.abort();
}

/// A `--socket` that names no socket at all is not an application that is
/// not running: the call says what is wrong with the path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_socket_path_that_cannot_be_a_socket_is_named_as_such() {
    let place = Place::new("dev.test.not-a-socket");
    std::fs::write(&place.socket, "a plain file").unwrap();
    let mut shim = place.shim(&[]);
    shim.initialize().await;
    let result = shim.call("anything", json!({})).await;
    assert_tool_error(&result, &["cannot be used", "it is not a socket"]);
    assert!(!result_text(&result).contains("not running"), "{result}");
    shim.finish_cleanly().await;

    let long = Place::new(&"d".repeat(120));
    let mut shim = long.shim(&[]);
    shim.initialize().await;
    assert_tool_error(
        &shim.call("anything", json!({})).await,
        &["over the 107 a socket path may have"],
    );
    shim.finish_cleanly().await;

    // A socket nobody listens on is an application that is not running.
    let stale = Place::new("dev.test.stale");
    drop(std::os::unix::net::UnixListener::bind(&stale.socket).unwrap());
    let mut shim = stale.shim(&[]);
    shim.initialize().await;
    assert_tool_error(
        &shim.call("anything", json!({})).await,
        &[&format!(
            "is not running (nothing serves at {}); start it and try again",
            stale.socket.display()
        )],
    );
    shim.finish_cleanly().await;
}

/// An application that says `lines` after each hello (closing if `close`)
/// served to a shim for 3.5 s without a request: the connections it got,
/// what a call then answered, and the shim's log.
async fn redials(name: &str, lines: Vec<Value>, close: bool) -> (usize, Value, String) {
    let place = Place::new(name);
    let connections = Arc::new(AtomicUsize::new(0));
    let app = tokio::spawn(handshake_app(
        UnixListener::bind(&place.socket).unwrap(),
        lines,
        close,
        connections.clone(),
    ));
    let log = place.runtime.path().join("shim.log");
    let mut shim = place.shim(&["--log-file", log.to_str().unwrap()]);
    shim.initialize().await;
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let dialled = connections.load(Ordering::SeqCst);
    let call = shim.call("anything", json!({})).await;
    shim.finish_cleanly().await;
    app.abort();
    (dialled, call, std::fs::read_to_string(&log).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_application_failing_every_connection_is_dialled_at_most_once_a_second() {
    let welcome =
        json!({"type": "welcome", "protocol": 1, "app": "Flaky App", "app_id": "dev.test.flaky"});
    let bad_welcome =
        json!({"type": "welcome", "protocol": "1", "app": "Flaky App", "app_id": "dev.test.flaky"});
    let refusal = json!({"type": "error", "message": "connections from uid 1234 are refused"});
    let (bad, closing, refusing) = tokio::join!(
        redials("dev.test.bad-welcome", vec![bad_welcome], false),
        redials("dev.test.closing", vec![welcome], true),
        redials("dev.test.refusing", vec![refusal], true),
    );
    for ((dialled, call, log), why) in [
        (bad, "answered the hello with a malformed line"),
        (closing, "the application closed the connection"),
        (
            refusing,
            "refused the connection: connections from uid 1234 are refused",
        ),
    ] {
        // At 0, 1 and 3 s (2,000 a second before).
        assert!((2..=4).contains(&dialled), "{why}: {dialled} connections");
        // The call is told why (at once, when the application refuses or
        // cannot be used: dialling again would repeat it).
        assert_tool_error(&call, &[why]);
        assert_eq!(
            log.matches(why).count(),
            1,
            "logged once per change of reason:\n{log}"
        );
    }
}

/// The resident memory of process `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_that_stops_reading_does_not_make_the_shim_hold_every_event() {
    let place = Place::new("dev.test.flood");
    let listener = UnixListener::bind(&place.socket).unwrap();
    let (flood_tx, flood) = tokio::sync::oneshot::channel::<()>();
    let flooded = Arc::new(AtomicUsize::new(0));
    let app = tokio::spawn({
        let flooded = flooded.clone();
        async move {
            let (stream, _) = listener.accept().await.unwrap();
            let (reader, mut writer) = stream.into_split();
            let mut reader = BufReader::new(reader).lines();
            reader.next_line().await.unwrap();
            let welcome = json!({"type": "welcome", "protocol": 1, "app": "Flood", "app_id": "dev.test.flood", "events": ["claude/channel"]});
            writer
                .write_all(format!("{welcome}\n").as_bytes())
                .await
                .unwrap();
            let _ = flood.await;
            let event = json!({"type": "event", "name": "claude/channel", "params": {"content": "e".repeat(60_000), "meta": {}}});
            let line = format!("{event}\n");
            // 300 MB of events, as fast as the shim reads its socket.
            for _ in 0..5_000 {
                writer.write_all(line.as_bytes()).await.unwrap();
                flooded.fetch_add(1, Ordering::SeqCst);
            }
            // Answer requests (the list) from now on.
            while let Ok(Some(line)) = reader.next_line().await {
                let request: Value = serde_json::from_str(&line).unwrap();
                if request["type"] == "request" {
                    let reply =
                        json!({"type": "response", "id": request["id"], "result": {"tools": []}});
                    writer
                        .write_all(format!("{reply}\n").as_bytes())
                        .await
                        .unwrap();
                }
            }
        }
    });
    let mut child = switchboard(
        &["shim", "--socket", place.socket.to_str().unwrap()],
        place.runtime.path(),
    )
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let pid = child.id().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    stdin
        .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-06-18\",\"capabilities\":{},\"clientInfo\":{\"name\":\"t\",\"version\":\"0\"}}}\n{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n")
        .await
        .unwrap();
    let mut line = String::new();
    stdout.read_line(&mut line).await.unwrap();
    assert!(line.contains("claude/channel"), "{line}");
    // The host stops reading; the application floods.
    flood_tx.send(()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while flooded.load(Ordering::SeqCst) < 5_000 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        flooded.load(Ordering::SeqCst),
        5_000,
        "the shim stopped reading its socket"
    );
    let rss = rss_kib(pid);
    assert!(
        rss < 100 * 1024,
        "the shim holds {rss} KiB after 300 MB of events"
    );
    // A request asked now is answered, after what stdout still holds.
    stdin
        .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\"}\n")
        .await
        .unwrap();
    let answered = tokio::time::timeout(WAIT, async {
        loop {
            line.clear();
            assert!(
                stdout.read_line(&mut line).await.unwrap() > 0,
                "stdout closed"
            );
            let message: Value = serde_json::from_str(&line).unwrap();
            if message["id"] == 2 {
                return message;
            }
        }
    })
    .await
    .expect("the reply arrives");
    assert_eq!(answered["result"]["tools"], json!([]), "{answered}");
    drop(stdin);
    let _ = tokio::time::timeout(WAIT, child.wait()).await;
    app.abort();
}

// --- concurrency ----------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_calls_in_flight_finish_together_with_their_own_ids() {
    let place = Place::new("dev.test.concurrent");
    let app = TestApp::start(&place.socket);
    let mut shim = place.shim(&[]);
    shim.initialize().await;
    assert_eq!(shim.tools().await.len(), 5);

    const DELAY_MS: u64 = 1000;
    let ids: Vec<Value> = (0..10)
        .map(|i| {
            if i % 2 == 0 {
                json!(1000 + i)
            } else {
                json!(format!("call-{i}"))
            }
        })
        .collect();
    let started = Instant::now();
    for (i, id) in ids.iter().enumerate() {
        shim.send(json!({
            "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "slow", "arguments": {"ms": DELAY_MS, "tag": format!("t{i}")}}
        }))
        .await;
    }
    for (i, id) in ids.iter().enumerate() {
        let reply = shim.reply_within(id, Duration::from_secs(20)).await;
        assert_eq!(reply["result"]["isError"], false, "{reply}");
        assert_eq!(
            result_text(&reply["result"]),
            format!("t{i} slept {DELAY_MS} ms"),
            "reply {id} carries another call's answer"
        );
    }
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(DELAY_MS) && took < Duration::from_millis(4 * DELAY_MS),
        "10 calls of {DELAY_MS} ms took {took:?}: not concurrent"
    );
    shim.finish_cleanly().await;
    app.stop().await;
}

/// A client that sends more requests than the shim takes at once gets an
/// error for each one over, at once, and the rest are answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_beyond_256_in_flight_are_refused_at_once() {
    let place = Place::new("dev.test.flood");
    let app = TestApp::start(&place.socket);
    let mut shim = place.shim(&[]);
    shim.initialize().await;
    for i in 0..260 {
        shim.send(json!({
            "jsonrpc": "2.0", "id": i, "method": "tools/call",
            "params": {"name": "slow", "arguments": {"ms": 2000}}
        }))
        .await;
    }
    for i in 256..260 {
        let refused = shim.reply_within(&json!(i), Duration::from_secs(1)).await;
        assert_eq!(refused["error"]["code"], -32000, "{refused}");
        assert!(
            refused["error"]["message"]
                .as_str()
                .unwrap()
                .contains("256 requests are already in progress"),
            "{refused}"
        );
    }
    let last = shim
        .reply_within(&json!(255), Duration::from_secs(20))
        .await;
    assert_eq!(last["result"]["isError"], false, "{last}");
    // Answered ones make room again.
    shim.send(json!({
        "jsonrpc": "2.0", "id": "room", "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "room"}}
    }))
    .await;
    let echo = shim
        .reply_within(&json!("room"), Duration::from_secs(5))
        .await;
    assert_eq!(result_text(&echo["result"]), "room", "{echo}");
    shim.finish_cleanly().await;
    app.stop().await;
}

// --- oversized lines --------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_line_over_16_mib_on_stdin_is_rejected_and_the_shim_goes_on() {
    let place = Place::new("dev.test.huge-in");
    let app = TestApp::start(&place.socket);
    let mut shim = place.shim(&[]);
    shim.initialize().await;

    // A syntactically valid request, just too long: 17 MiB of text.
    let mut huge = br#"{"jsonrpc":"2.0","id":"huge","method":"tools/call","params":{"name":"echo","arguments":{"text":""#.to_vec();
    huge.extend(std::iter::repeat_n(b'x', 17 * 1024 * 1024));
    huge.extend_from_slice(b"\"}}}\n");
    shim.send_raw(&huge).await;
    let rejected = shim.reply(&Value::Null).await;
    assert_eq!(rejected["error"]["code"], -32600, "{rejected}");
    assert!(
        rejected["error"]["message"]
            .as_str()
            .unwrap()
            .contains("exceeds"),
        "{rejected}"
    );

    // The shim goes on, line framing intact.
    assert_eq!(shim.request("ping", json!({})).await["result"], json!({}));
    assert_eq!(
        shim.call_ok("echo", json!({"text": "after"})).await,
        "after"
    );
    let messages = shim.finish_cleanly().await;
    assert!(
        messages.iter().all(|m| m["id"] != "huge"),
        "the oversized request was answered as if read"
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_lines_over_1_mib_fail_the_call_cleanly_and_the_link_goes_on() {
    let place = Place::new("dev.test.huge-relay");
    let app = TestApp::start(&place.socket);
    let mut shim = place.shim(&[]);
    shim.initialize().await;
    assert_eq!(shim.tools().await.len(), 5);

    // A 2 MB result: the relay server answers a tool error rather than a
    // line the shim would have to refuse, and the link goes on.
    let result = shim.call("big", json!({"bytes": 2_000_000})).await;
    assert_tool_error(
        &result,
        &[
            "more than the 1048576 a relay message may carry",
            "ask for less",
        ],
    );
    assert!(!result_text(&result).contains("dropped"), "{result}");
    assert_eq!(
        shim.call_ok("echo", json!({"text": "same link"})).await,
        "same link"
    );
    // Just under the limit is fine.
    let fits = shim.call_ok("big", json!({"bytes": 1_000_000})).await;
    assert_eq!(fits.len(), 1_000_000);

    // A 2 MB call (a valid MCP message, far under 16 MiB) cannot travel
    // the relay: the shim says so and sends nothing, keeping its link.
    let long_text = "y".repeat(2_000_000);
    let result = shim.call("echo", json!({"text": long_text})).await;
    assert_tool_error(
        &result,
        &["echo was not sent", "1048576 bytes", "send less"],
    );
    assert!(!result_text(&result).contains("may have run"));
    assert_eq!(
        shim.call_ok("echo", json!({"text": "again"})).await,
        "again"
    );

    shim.finish_cleanly().await;
    app.stop().await;
}

/// An application of its own making that answers with a line over 1 MiB:
/// the shim drops that connection, fails the call saying why, and dials
/// again for the next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_over_long_line_from_an_app_fails_the_call_and_the_shim_redials() {
    let place = Place::new("dev.test.scripted");
    let app = tokio::spawn(scripted_app(
        UnixListener::bind(&place.socket).unwrap(),
        |method, params| match method {
            "tools/list" => json!({"tools": [{"name": "say", "inputSchema": {"type": "object"}}]}),
            _ => {
                let bytes = params["arguments"]["bytes"].as_u64().unwrap() as usize;
                json!({"content": [{"type": "text", "text": "x".repeat(bytes)}]})
            }
        },
    ));
    let mut shim = place.shim(&[]);
    shim.initialize().await;
    let result = shim.call("say", json!({"bytes": 2_000_000})).await;
    assert_tool_error(&result, &["dropped the connection", "1048576"]);
    assert_eq!(shim.call_ok("say", json!({"bytes": 3})).await, "xxx");
    shim.finish_cleanly().await;
    app.abort();
}

// --- stdout carries JSON-RPC only -------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mixed_session_puts_only_json_rpc_on_stdout_and_nothing_on_stderr() {
    let place = Place::new("dev.test.sweep");
    let mut shim = place.shim(&["--call-timeout-ms", "800"]);
    // Before the app exists.
    shim.initialize().await;
    shim.tools().await;
    shim.call("echo", json!({"text": "nobody"})).await;
    let app = TestApp::start(&place.socket);
    assert!(
        shim.notified("notifications/tools/list_changed", WAIT)
            .await,
        "the app's appearance was not announced"
    );
    let junk: [&[u8]; 9] = [
        b"not json at all\n",
        b"\n",
        b"   \r\n",
        b"{\"jsonrpc\":\"2.0\",\"id\":{\"obj\":1},\"method\":\"ping\"}\n",
        b"{\"jsonrpc\":\"2.0\",\"id\":77}\n",
        b"{\"jsonrpc\":\"2.0\",\"id\":78,\"result\":{}}\n",
        b"\xff\xfe\xfd\n",
        b"\"just a string\"\n",
        b"{\"jsonrpc\":\"2.0\",\"id\":79,\"method\":\"tools/call\",\"params\":\"x\"}\n",
    ];
    for line in junk {
        shim.send_raw(line).await;
    }
    // Concurrent valid calls interleaved with invalid ones and notifications.
    let mut ids = Vec::new();
    for i in 0..6 {
        ids.push(
            shim.send_request(
                "tools/call",
                json!({"name": "slow", "arguments": {"ms": 200 + 50 * i, "tag": i.to_string()}}),
            )
            .await,
        );
        ids.push(
            shim.send_request(
                "tools/call",
                json!({"name": "echo", "arguments": {"text": i}}),
            )
            .await,
        );
        ids.push(shim.send_request("nope/nothing", json!({})).await);
        shim.send(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}))
            .await;
    }
    ids.push(
        shim.send_request("tools/call", json!({"name": "hang"}))
            .await,
    );
    ids.push(shim.send_request("tools/list", json!({})).await);
    app.toggle_extra();
    for id in &ids {
        shim.reply(id).await;
    }
    assert!(
        shim.notified("notifications/tools/list_changed", WAIT)
            .await
    );
    let sent = shim.sent.clone();
    let messages = shim.finish_cleanly().await;
    // Exactly one reply per request, none for notifications or responses.
    let mut replied: Vec<String> = messages
        .iter()
        .filter(|m| m.get("method").is_none())
        .map(|m| m["id"].to_string())
        .collect();
    replied.sort();
    let mut expected: Vec<String> = sent.iter().map(Value::to_string).collect();
    // The JSON-RPC errors with a null id: the non-JSON line, the object id,
    // the non-UTF-8 line, the string; then id 77 (no method) and 79 (params
    // not an object).
    expected.extend(["null"; 4].map(String::from));
    expected.extend(["77", "79"].map(String::from));
    expected.sort();
    assert_eq!(replied, expected, "{messages:#?}");
    app.stop().await;
}

// --- a closed stdout ----------------------------------------------------------

/// The shim with stdout's read end dropped while a reply is pending: it must
/// exit 0 promptly, saying nothing on stderr.
async fn closed_stdout_case(trigger: &str) {
    let place = Place::new("dev.test.closed-stdout");
    let app = TestApp::start(&place.socket);
    let mut child = switchboard(
        &["shim", "--socket", place.socket.to_str().unwrap()],
        place.runtime.path(),
    )
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut stderr = child.stderr.take().unwrap();
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}});
    stdin
        .write_all(format!("{init}\n").as_bytes())
        .await
        .unwrap();
    let mut line = String::new();
    tokio::time::timeout(WAIT, stdout.read_line(&mut line))
        .await
        .unwrap()
        .unwrap();
    assert!(line.contains("\"protocolVersion\""), "{line}");
    // Let the shim say what it has to say on its own (the app's appearance
    // is announced once), so that the only write left is the reply.
    loop {
        line.clear();
        match tokio::time::timeout(Duration::from_secs(1), stdout.read_line(&mut line)).await {
            Ok(Ok(n)) if n > 0 => assert!(line.contains("list_changed"), "{line}"),
            Ok(_) => panic!("stdout closed early"),
            Err(_) => break,
        }
    }

    match trigger {
        "pending call" => {
            let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                "params": {"name": "slow", "arguments": {"ms": 700}}});
            stdin
                .write_all(format!("{call}\n").as_bytes())
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_millis(100)).await;
            drop(stdout);
        }
        "malformed line" => {
            drop(stdout);
            tokio::time::sleep(Duration::from_millis(100)).await;
            stdin.write_all(b"this is not json\n").await.unwrap();
        }
        other => unreachable!("{other}"),
    }
    stdin.flush().await.unwrap();
    // stdin stays open: the shim must notice stdout, not stdin.
    let status = tokio::time::timeout(Duration::from_secs(5), child.wait())
        .await
        .unwrap_or_else(|_| panic!("{trigger}: the shim kept running with stdout closed"))
        .unwrap();
    let mut err = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut stderr, &mut err)
        .await
        .unwrap();
    assert_eq!(
        status.code(),
        Some(0),
        "{trigger}: {status:?}; stderr: {err}"
    );
    assert_eq!(err, "", "{trigger}: noise on stderr");
    drop(stdin);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_stdout_ends_the_shim_quietly_with_a_call_pending() {
    closed_stdout_case("pending call").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_stdout_ends_the_shim_quietly_with_an_error_reply_pending() {
    closed_stdout_case("malformed line").await;
}

// --- logging ------------------------------------------------------------------

/// A "broken application" on a raw socket: answers the hello, then reports
/// an error and closes, once per connection.
async fn broken_app(listener: UnixListener) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            return;
        };
        tokio::spawn(async move {
            let (reader, mut writer) = stream.into_split();
            let mut reader = BufReader::new(reader);
            let mut hello = String::new();
            if reader.read_line(&mut hello).await.is_err() {
                return;
            }
            let _ = writer
                .write_all(
                    b"{\"type\":\"welcome\",\"protocol\":1,\"app\":\"Broken App\",\"app_id\":\"dev.test.broken\"}\n\
                      {\"type\":\"error\",\"message\":\"broken-app-was-here\"}\n\
                      {\"type\":\"response\",\"id\":\n",
                )
                .await;
            let _ = writer.shutdown().await;
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_env_var_sends_logs_to_that_file_and_nowhere_else() {
    let place = Place::new("dev.test.broken");
    let listener = UnixListener::bind(&place.socket).unwrap();
    let app = tokio::spawn(broken_app(listener));
    let log = place.runtime.path().join("shim.log");
    let mut shim = Shim::start_with(
        &place.socket,
        place.runtime.path(),
        &[],
        &[("SWITCHBOARD_SHIM_LOG", log.to_str().unwrap())],
    );
    shim.initialize().await;
    // The broken app never answers a list; the shim serves its (empty) cache.
    assert_eq!(shim.tools().await, Vec::<Value>::new());
    let call = shim.call("anything", json!({})).await;
    assert_eq!(call["isError"], true, "{call}");
    shim.finish_cleanly().await;
    app.abort();
    let logged = std::fs::read_to_string(&log).expect("the log file exists");
    assert!(
        logged.contains("broken-app-was-here"),
        "the log lacks the app's error: {logged:?}"
    );
    assert!(
        !logged.contains('\u{1b}'),
        "ANSI colours in a file: {logged:?}"
    );
}

/// Flags no application could work with stop the shim at start (exit 2),
/// rather than failing every call later.
#[tokio::test]
async fn shim_flags_no_application_could_use_are_refused_at_start() {
    let runtime = runtime_dir();
    for (args, env, expected) in [
        (
            &["--nick", "bad nick"][..],
            None,
            "a nick is 1 to 64 characters",
        ),
        // A value from a variable is said as the variable's.
        (
            &[],
            Some(("SWITCHBOARD_NICK", "tab\there")),
            "for 'SWITCHBOARD_NICK': a nick is 1 to 64",
        ),
        (
            &[],
            Some(("SWITCHBOARD_SHIM_CALL_TIMEOUT_MS", "soon")),
            "for 'SWITCHBOARD_SHIM_CALL_TIMEOUT_MS': give a whole number",
        ),
        // The flag wins over the variable, and is the one named.
        (
            &["--nick", "a,b"],
            Some(("SWITCHBOARD_NICK", "fine")),
            "for '--nick <NICK>'",
        ),
        (&["--call-timeout-ms", "0"], None, "1 or more"),
        (
            &["--connect-timeout-ms", "soon"],
            None,
            "whole number of milliseconds",
        ),
    ] {
        let mut cmd = switchboard(&[&["shim"], args].concat(), runtime.path());
        if let Some((var, value)) = env {
            cmd.env(var, value);
        }
        let output =
            tokio::time::timeout(Duration::from_secs(10), cmd.stdin(Stdio::null()).output())
                .await
                .unwrap()
                .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert!(output.stdout.is_empty(), "{args:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shim_variables_set_to_nothing_count_as_unset() {
    let place = Place::new("dev.test.empty-env");
    let app = TestApp::start(&place.socket);
    let mut shim = Shim::start_with(
        &place.socket,
        place.runtime.path(),
        &[],
        &[
            ("SWITCHBOARD_SHIM_LOG", ""),
            ("SWITCHBOARD_SHIM_CONNECT_TIMEOUT_MS", ""),
            ("SWITCHBOARD_SHIM_LIST_TIMEOUT_MS", ""),
            ("SWITCHBOARD_SHIM_CALL_TIMEOUT_MS", ""),
            ("SWITCHBOARD_NICK", ""),
        ],
    );
    shim.initialize().await;
    assert_eq!(shim.call_ok("echo", json!({"text": "hi"})).await, "hi");
    shim.finish_cleanly().await;
    app.stop().await;
}

// --- the Python application, written from the spec alone ----------------------

struct PythonApp {
    child: Child,
    stderr: Arc<Mutex<String>>,
}

impl PythonApp {
    async fn start(socket: &Path, runtime: &Path) -> Self {
        let script =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../relay/tests/python/relay_app.py");
        let mut child = Command::new("python3")
            .arg(&script)
            .arg(socket)
            .env("XDG_RUNTIME_DIR", runtime)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("python3 runs");
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        tokio::time::timeout(WAIT, stdout.read_line(&mut line))
            .await
            .expect("the Python app starts in time")
            .unwrap();
        assert_eq!(line.trim(), format!("listening on {}", socket.display()));
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let sink = stderr.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                let mut log = sink.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
        Self { child, stderr }
    }

    fn signal(&self, signal: i32) {
        let pid = self.child.id().expect("running") as i32;
        // SAFETY: kill(2) on our own child.
        assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
    }

    fn log(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// SIGKILL: the socket file stays behind, stale.
    async fn crash(mut self) {
        self.child.kill().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_spec_app_is_relayed_through_a_crash_and_a_restart() {
    let place = Place::new("dev.test.python");
    let app = PythonApp::start(&place.socket, place.runtime.path()).await;
    let mut shim = place.shim(&[]);
    shim.initialize().await;

    let tools = shim.tools().await;
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["echo", "slow", "toggle_extra"]);
    assert!(
        tools.iter().all(|t| t.get("timeout_ms").is_none()),
        "{tools:?}"
    );
    assert_eq!(
        shim.call_ok("echo", json!({"text": "from rust"})).await,
        "from rust"
    );
    assert_tool_error(
        &shim.call("slow", json!({"ms": "soon"})).await,
        &["invalid arguments for slow", "(at /ms)"],
    );
    assert_tool_error(
        &shim.call("slow", json!({"ms": 5, "extra": 1})).await,
        &["\"extra\"", "(at /)"],
    );
    let unknown = shim.call_reply("nope", json!({})).await;
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");

    // The app saw the shim's hello and checked its pid against the kernel's.
    assert!(
        app.log()
            .contains(&format!("client pid {} (switchboard-shim ", shim.pid())),
        "{}",
        app.log()
    );

    // Ten calls at once, each a different length: each reply is its own.
    let started = Instant::now();
    let mut ids = Vec::new();
    for i in 0..10u64 {
        let ms = 1000 + 10 * i;
        ids.push((
            shim.send_request(
                "tools/call",
                json!({"name": "slow", "arguments": {"ms": ms}}),
            )
            .await,
            ms,
        ));
    }
    for (id, ms) in &ids {
        let reply = shim.reply_within(id, Duration::from_secs(20)).await;
        assert_eq!(
            result_text(&reply["result"]),
            format!("slept {ms} ms"),
            "{reply}"
        );
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "not concurrent: {:?}",
        started.elapsed()
    );

    // A real change of the list is announced; the list then has `shout`.
    shim.drain("notifications/tools/list_changed").await;
    assert_eq!(shim.call_ok("toggle_extra", json!({})).await, "shout is on");
    assert!(
        shim.notified("notifications/tools/list_changed", WAIT)
            .await
    );
    assert!(shim.tool_names().await.contains(&"shout".to_owned()));
    assert_eq!(shim.call_ok("shout", json!({"text": "hey"})).await, "HEY");
    // SIGUSR1 makes the app say `tools_changed` without changing anything:
    // the shim re-reads the list and stays healthy.
    app.signal(libc::SIGUSR1);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(shim.tool_names().await.len(), 4);

    // A crash leaves a stale socket: calls fail cleanly, the list is cached.
    app.crash().await;
    assert!(place.socket.exists(), "SIGKILL leaves the socket file");
    let away = shim.call("echo", json!({"text": "x"})).await;
    assert_tool_error(&away, &["Python Relay Demo is not running"]);
    assert_eq!(shim.tool_names().await.len(), 4);

    // It restarts on the same path; the next call works, and the return is
    // announced (its fresh list has no `shout`).
    shim.drain("notifications/tools/list_changed").await;
    let app = PythonApp::start(&place.socket, place.runtime.path()).await;
    assert_eq!(shim.call_ok("echo", json!({"text": "back"})).await, "back");
    assert!(
        shim.notified("notifications/tools/list_changed", WAIT)
            .await,
        "the restart was not announced"
    );
    assert_eq!(shim.tool_names().await.len(), 3);
    shim.finish_cleanly().await;
    app.signal(libc::SIGTERM);
}

// --- the crate's example application -------------------------------------------

/// `target/<profile>/examples/terminal_app`, beside the switchboard binary.
/// `cargo test --workspace` builds it; a test run without it fails saying
/// how to build it.
fn example_binary() -> PathBuf {
    let path = Path::new(BIN).with_file_name("examples/terminal_app");
    assert!(
        path.is_file(),
        "{} is not built; run `cargo build --example terminal_app -p switchboard-relay` with the same profile (cargo test --workspace builds it)",
        path.display()
    );
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_terminal_app_is_relayed() {
    let example = example_binary();
    let place = Place::new("dev.test.example");
    let mut cmd = Command::new(&example);
    cmd.arg("--socket")
        .arg(&place.socket)
        .env("XDG_RUNTIME_DIR", place.runtime.path())
        .env("SWITCHBOARD_BIN", BIN)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    // A session of its own: no controlling terminal, so setting the "title"
    // cannot reach the terminal running the tests.
    // SAFETY: setsid(2) is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let mut child = cmd.spawn().expect("run the example");
    let mut stdin = child.stdin.take().unwrap();
    let out = Arc::new(Mutex::new(String::new()));
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    {
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let out = out.clone();
        tokio::spawn(async move {
            let mut ready_tx = Some(ready_tx);
            while let Ok(Some(line)) = lines.next_line().await {
                if line.contains("listening on")
                    && let Some(tx) = ready_tx.take()
                {
                    let _ = tx.send(());
                }
                let mut out = out.lock().unwrap();
                out.push_str(&line);
                out.push('\n');
            }
        });
    }
    tokio::time::timeout(WAIT, ready_rx)
        .await
        .expect("the example starts")
        .unwrap();

    let mut shim = place.shim(&[]);
    let init = shim.initialize().await;
    assert_eq!(init["protocolVersion"], "2025-11-25");
    // The app pushes channel events; it has no permission relay.
    assert_eq!(
        init["capabilities"]["experimental"],
        json!({"claude/channel": {}}),
        "{init}"
    );
    let tools = shim.tools().await;
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["set_session_title", "notify_user"]);
    assert!(
        tools.iter().all(|t| t.get("timeout_ms").is_none()),
        "{tools:?}"
    );
    assert_eq!(
        shim.call_ok("set_session_title", json!({"title": "fixing #42"}))
            .await,
        "title set to \"fixing #42\""
    );
    assert_tool_error(
        &shim.call("set_session_title", json!({"title": 17})).await,
        &["invalid arguments for set_session_title: 17 is not of type \"string\" (at /title)"],
    );
    assert_eq!(
        shim.call_ok("notify_user", json!({"text": "done"})).await,
        "the user was notified"
    );
    // It printed who called: the shim, then this test. `switchboard shim`
    // became the small `switchboard-shim` binary (a name cut to 15 bytes).
    let printed = out.lock().unwrap().clone();
    assert!(
        printed.contains(&format!(
            "pid {} (switchboard-shi) ← {} (",
            shim.pid(),
            std::process::id()
        )),
        "{printed}"
    );

    // `dice` on its stdin adds a tool and announces it.
    shim.drain("notifications/tools/list_changed").await;
    stdin.write_all(b"dice\n").await.unwrap();
    stdin.flush().await.unwrap();
    assert!(
        shim.notified("notifications/tools/list_changed", WAIT)
            .await
    );
    assert!(shim.tool_names().await.contains(&"roll_dice".to_owned()));
    let roll = shim.call("roll_dice", json!({"sides": 6})).await;
    let value = roll["structuredContent"]["roll"].as_u64().unwrap();
    assert!((1..=6).contains(&value), "{roll}");

    // Any other line typed into it reaches the agent as a channel event.
    stdin.write_all(b"please look at the logs\n").await.unwrap();
    stdin.flush().await.unwrap();
    let pushed = shim
        .notification("notifications/claude/channel", WAIT)
        .await
        .expect("the typed line is pushed");
    assert_eq!(pushed["params"]["content"], "please look at the logs");
    assert!(pushed["params"]["meta"]["user"].is_string(), "{pushed}");

    // Ctrl-D quits it: the socket is removed and the shim says so.
    drop(stdin);
    let status = tokio::time::timeout(WAIT, child.wait())
        .await
        .expect("the example quits on EOF")
        .unwrap();
    assert!(status.success(), "{status:?}");
    assert!(!place.socket.exists());
    assert_tool_error(
        &shim.call("notify_user", json!({"text": "x"})).await,
        &["Terminal Demo is not running"],
    );
    shim.finish_cleanly().await;
}

// --- the daemon, through rmcp's client ------------------------------------------

/// An rmcp client whose server is `switchboard shim --socket <socket>`; the
/// shim's stderr is returned for inspection.
async fn agent(socket: &Path, runtime: &Path) -> (common::Client, tokio::process::ChildStderr) {
    let cmd = switchboard(&["shim", "--socket", socket.to_str().unwrap()], runtime);
    let (transport, stderr) = TokioChildProcess::builder(cmd)
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the shim");
    let config = ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("relay-tests", "0"),
    )
    .with_protocol_version(ProtocolVersion::V_2025_11_25);
    let client = config.serve(transport).await.expect("MCP over the shim");
    (client, stderr.expect("stderr piped"))
}

/// The default nick of this test process as the shim's agent: the chat
/// toolset's rule applied to the kernel's name for it (its executable's
/// name, cut to 15 bytes) and its pid.
fn expected_default_sender() -> String {
    let pid = std::process::id();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let comm = &stat[stat.find('(').unwrap() + 1..stat.rfind(')').unwrap()];
    let exe = std::env::current_exe().unwrap();
    let exe_name = exe.file_name().unwrap().to_str().unwrap();
    assert_eq!(comm, &exe_name[..exe_name.len().min(15)]);
    switchboard_chat::nick_for_process(comm, pid)
}

async fn stderr_of(mut stderr: tokio::process::ChildStderr) -> String {
    let mut text = String::new();
    let _ = tokio::time::timeout(
        Duration::from_secs(5),
        tokio::io::AsyncReadExt::read_to_string(&mut stderr, &mut text),
    )
    .await;
    text
}

/// A daemon with `config`, and two agents through their shims: a writer,
/// and a reader that has joined `#big` as `nick` (the temporary directories
/// last as long as the value).
async fn writer_and_reader_in_big(
    config: &str,
    nick: &str,
) -> (
    Daemon,
    common::Client,
    common::Client,
    (tempfile::TempDir, tempfile::TempDir),
) {
    let runtime = runtime_dir();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("relay.sock");
    let file = dir.path().join("switchboard.toml");
    std::fs::write(&file, config).unwrap();
    let daemon = Daemon::start(
        &socket,
        runtime.path(),
        &["--config", file.to_str().unwrap()],
    )
    .await;
    let (writer, _) = agent(&socket, runtime.path()).await;
    let (reader, _) = agent(&socket, runtime.path()).await;
    common::call(&reader, "create_channel", json!({"name": "#big"})).await;
    common::call(
        &reader,
        "join_channel",
        json!({"channel": "#big", "nick": nick}),
    )
    .await;
    (daemon, writer, reader, (runtime, dir))
}

/// Forty messages of 32 KB are far more than one relay line carries: reads
/// through the shim come in pages that fit, and what a page leaves out
/// stays unread for the next read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_messages_are_read_through_the_shim_in_pages_that_fit() {
    let (daemon, writer, reader, _dirs) = writer_and_reader_in_big("", "inboxer").await;
    let sent: Vec<String> = (0..40)
        .map(|i| format!("m{i:02} {}", "y".repeat(32_000)))
        .collect();
    for text_ in &sent {
        common::send(&writer, "#big", "writer", text_).await;
    }

    // The newest page: as many of the newest as fit, newest first.
    let newest = common::call(
        &reader,
        "read_messages",
        json!({"channel": "#big", "limit": 40}),
    )
    .await;
    assert!(!common::is_error(&newest), "{}", common::text(&newest));
    let shown = common::texts(&newest);
    assert!((1..40).contains(&shown.len()), "{} messages", shown.len());
    assert_eq!(shown[0], sent[39]);
    // It says where the messages it left out are: all 40 were asked for.
    let said = common::text(&newest);
    assert!(
        said.ends_with("(Older messages did not fit in one reply: since = 0 reads on from them.)"),
        "{}",
        &said[said.len().saturating_sub(120)..]
    );

    // The inbox (joined before the messages came), page by page: every
    // message once, in order.
    let mut read = Vec::new();
    let mut pages = 0;
    loop {
        let page = common::call(
            &reader,
            "read_messages",
            json!({"nick": "inboxer", "limit": 40}),
        )
        .await;
        assert!(!common::is_error(&page), "{}", common::text(&page));
        let texts = common::texts(&page);
        if texts.is_empty() {
            break;
        }
        pages += 1;
        assert!(pages <= 10, "no end to the pages");
        let more = page.structured_content.as_ref().unwrap()["more"] == true;
        assert_eq!(more, read.len() + texts.len() < 40, "page {pages}");
        read.extend(texts);
    }
    assert!(pages > 1, "forty long messages fitted in one page");
    assert_eq!(read, sent);
    daemon.stop().await;
}

/// A message longer than one relay line carries (chat.max_text_bytes
/// allows up to 1 MiB) is read cut, saying so, and the reader goes on past
/// it: it is not an error that eats the message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_longer_than_a_reply_is_read_cut_and_not_lost() {
    let (daemon, writer, reader, _dirs) =
        writer_and_reader_in_big("[chat]\nmax_text_bytes = 1048576\n", "bigr").await;
    for text_ in ["before", &"B".repeat(600_000), "after"] {
        common::send(&writer, "#big", "writer", text_).await;
    }
    let mut read = Vec::new();
    for _ in 0..3 {
        let page = common::call(
            &reader,
            "read_messages",
            json!({"nick": "bigr", "limit": 1}),
        )
        .await;
        assert!(!common::is_error(&page), "{}", common::text(&page));
        read.extend(common::texts(&page));
    }
    assert_eq!(read[0], "before");
    assert!(read[1].starts_with("BBBB"), "{:.40}", read[1]);
    assert!(
        read[1].ends_with("[cut: the message is 600000 bytes, more than one reply carries]"),
        "{}",
        &read[1][read[1].len() - 80..]
    );
    assert_eq!(read[2], "after");
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_agents_share_the_daemons_hub_through_their_shims() {
    let runtime = runtime_dir();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("relay.sock");
    let daemon = Daemon::start(&socket, runtime.path(), &[]).await;

    let (alice, alice_err) = agent(&socket, runtime.path()).await;
    let (bob, bob_err) = agent(&socket, runtime.path()).await;
    for client in [&alice, &bob] {
        let info = client.peer_info().unwrap();
        assert_eq!(info.protocol_version, ProtocolVersion::V_2025_11_25);
        assert_eq!(info.server_info.as_ref().unwrap().name, "switchboard-shim");
        let tools = client.list_all_tools().await.unwrap();
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
        assert!(names.contains(&"send_message") && names.contains(&"wait_for_messages"));
        let wait = tools
            .iter()
            .find(|t| t.name == "wait_for_messages")
            .unwrap();
        assert!(
            !serde_json::to_value(wait)
                .unwrap()
                .to_string()
                .contains("timeout_ms\":"),
            "timeout_ms leaked into the MCP tool"
        );
    }

    // bob waits; alice speaks; bob wakes with her message.
    let waiting = {
        let peer = bob.peer().clone();
        tokio::spawn(async move {
            peer.call_tool(
                CallToolRequestParams::new("wait_for_messages").with_arguments(
                    json!({"channel": "#agents", "timeout_s": 20})
                        .as_object()
                        .cloned()
                        .unwrap(),
                ),
            )
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    let sent = common::send(&alice, "agents", "alice", "hello bob").await;
    assert_eq!(common::text(&sent), "Sent to #agents as alice");
    let woke = tokio::time::timeout(Duration::from_secs(25), waiting)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "bob slept through it"
    );
    assert!(
        common::text(&woke).ends_with("<alice> hello bob"),
        "{}",
        common::text(&woke)
    );

    // Without `sender`, the nick is derived from the agent process: the
    // shim's parent, this test.
    let expected = expected_default_sender();
    let anonymous = common::call(
        &bob,
        "send_message",
        json!({"channel": "#agents", "text": "who am i"}),
    )
    .await;
    assert!(
        !common::is_error(&anonymous),
        "{}",
        common::text(&anonymous)
    );
    assert_eq!(
        common::text(&anonymous),
        format!("Sent to #agents as {expected}")
    );
    let read = common::call(&alice, "read_messages", json!({"channel": "agents"})).await;
    assert_eq!(common::texts(&read), ["who am i", "hello bob"]);
    assert!(
        common::text(&read).contains(&format!("<{expected}> who am i")),
        "{}",
        common::text(&read)
    );

    alice.cancel().await.unwrap();
    bob.cancel().await.unwrap();
    assert_eq!(stderr_of(alice_err).await, "");
    assert_eq!(stderr_of(bob_err).await, "");
    let status = daemon.stop().await;
    assert!(status.success(), "{status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_wait_outlasts_the_shims_default_call_timeout() {
    let runtime = runtime_dir();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("relay.sock");
    let daemon = Daemon::start(&socket, runtime.path(), &[]).await;
    let (client, stderr) = agent(&socket, runtime.path()).await;
    client.list_all_tools().await.unwrap();

    let started = Instant::now();
    let waited = common::call(
        &client,
        "wait_for_messages",
        json!({"channel": "#quiet", "timeout_s": 20}),
    )
    .await;
    let took = started.elapsed();
    assert!(
        !common::is_error(&waited),
        "the shim gave up: {}",
        common::text(&waited)
    );
    assert_eq!(waited.structured_content.unwrap()["timed_out"], true);
    assert!(
        took >= Duration::from_secs(19),
        "returned after {took:?}, before the tool's own 20 s"
    );
    client.cancel().await.unwrap();
    assert_eq!(stderr_of(stderr).await, "");
    assert!(daemon.stop().await.success());
}

/// A tool's declared `timeout_ms` applies even to a call the host sends
/// before it has listed the tools (no cache yet, the call pipelined right
/// after `initialize`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declared_timeout_applies_to_a_call_before_any_list() {
    let runtime = runtime_dir();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("relay.sock");
    let daemon = Daemon::start(&socket, runtime.path(), &[]).await;
    let mut shim = Shim::start(&socket, runtime.path(), &["--call-timeout-ms", "1000"]);
    let id = shim
        .send_request(
            "tools/call",
            json!({"name": "wait_for_messages", "arguments": {"channel": "#q", "timeout_s": 3}}),
        )
        .await;
    let reply = shim.reply(&id).await;
    assert_eq!(reply["result"]["isError"], false, "{reply}");
    assert_eq!(reply["result"]["structuredContent"]["timed_out"], true);
    shim.finish_cleanly().await;
    assert!(daemon.stop().await.success());
}

/// `switchboard mcp-config` writes the mcpServers file an agent CLI takes,
/// naming the small shim binary; what it names answers for the daemon.
#[tokio::test]
async fn mcp_config_names_a_shim_that_reaches_the_daemon() {
    let runtime = runtime_dir();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("relay.sock");
    let daemon = Daemon::start(&socket, runtime.path(), &[]).await;
    let out = dir.path().join("mcp.json");
    let mcp_config = |out: &str| {
        let args = [
            "mcp-config",
            "--socket",
            socket.to_str().unwrap(),
            "--name",
            "chat",
            "--out",
            out,
        ];
        switchboard(&args, runtime.path()).output()
    };
    assert!(
        mcp_config(out.to_str().unwrap())
            .await
            .unwrap()
            .status
            .success()
    );
    let config: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let server = &config["mcpServers"]["chat"];
    let command = server["command"].as_str().unwrap();
    assert!(command.ends_with("/switchboard-shim"), "{config}");
    let args: Vec<&str> = server["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(args, ["--socket", socket.to_str().unwrap()]);
    // `--out -` prints the same JSON instead of writing a file.
    let printed = mcp_config("-").await.unwrap();
    assert!(printed.status.success());
    assert_eq!(
        serde_json::from_slice::<Value>(&printed.stdout).unwrap(),
        config
    );

    let mut cmd = tokio::process::Command::new(command);
    cmd.args(&args).kill_on_drop(true);
    let transport = TokioChildProcess::new(cmd).expect("spawn the configured shim");
    let client = ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("relay-tests", "0"),
    )
    .serve(transport)
    .await
    .expect("MCP over the configured shim");
    let tools = client.list_all_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "send_message"));
    drop(client);
    daemon.stop().await;
}

/// The daemon's relay tools tell a client how long to wait: a wait as long
/// as its longest wait, a send as long as a paced IRC send may take.
#[tokio::test]
async fn the_daemon_declares_the_waits_of_its_long_tools() {
    let runtime = runtime_dir();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("relay.sock");
    let daemon = Daemon::start(&socket, runtime.path(), &[]).await;
    let (link, _events) =
        switchboard_relay::client::Link::connect(&socket, Duration::from_secs(5), "relay-tests")
            .await
            .unwrap();
    let listed = link.list_tools(Duration::from_secs(5)).await.unwrap();
    let wait_of = |name: &str| {
        listed
            .tools
            .iter()
            .find(|t| t.name == name)
            .and_then(|t| t.timeout_ms)
    };
    assert_eq!(wait_of("wait_for_messages"), Some(60_000));
    assert_eq!(wait_of("send_message"), Some(900_000));
    assert_eq!(wait_of("read_messages"), None);
    drop(link);
    daemon.stop().await;
}

/// The file names a socket given as a relative path by its absolute path,
/// and refuses app ids that are not one directory's name and `--out` in a
/// directory that does not exist, writing nothing.
#[tokio::test]
async fn mcp_config_refuses_what_would_point_elsewhere() {
    let runtime = runtime_dir();
    let dir = tempfile::tempdir().unwrap();
    let printed = switchboard(
        &["mcp-config", "--socket", "app.sock", "--out", "-"],
        runtime.path(),
    )
    .current_dir(dir.path())
    .output()
    .await
    .unwrap();
    assert!(printed.status.success());
    let config: Value = serde_json::from_slice(&printed.stdout).unwrap();
    let (_, server) = config["mcpServers"]
        .as_object()
        .unwrap()
        .iter()
        .next()
        .unwrap();
    let socket = dir.path().join("app.sock");
    assert_eq!(
        server["args"],
        json!(["--socket", socket.to_str().unwrap()])
    );

    let missing = dir.path().join("missing/mcp.json");
    for args in [
        vec!["mcp-config", "--app-id", "../../elsewhere"],
        vec!["mcp-config", "--app-id", ".."],
        vec!["mcp-config", "--out", missing.to_str().unwrap()],
        vec!["shim", "--app-id", "a/b"],
    ] {
        let output = switchboard(&args, runtime.path())
            .stdin(Stdio::null())
            .output()
            .await
            .unwrap();
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains("--app-id") || stderr.contains("--out"),
            "{args:?}: {stderr}"
        );
    }
    assert!(!dir.path().join("missing").exists());
    assert!(std::fs::read_dir(runtime.path()).unwrap().next().is_none());
}

/// A relay client that sends calls and never reads their replies loses its
/// connection once one has waited `socket.write_timeout_s`; the daemon goes
/// on serving the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_client_that_stops_reading_is_disconnected_after_the_write_timeout() {
    use tokio::io::AsyncReadExt;
    let runtime = runtime_dir();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("switchboard.toml");
    std::fs::write(&config, "[socket]\nwrite_timeout_s = 1\n").unwrap();
    let socket = dir.path().join("relay.sock");
    let config_arg = config.to_str().unwrap();
    let daemon = Daemon::start(&socket, runtime.path(), &["--config", config_arg]).await;

    let (mut replies, mut requests) = tokio::net::UnixStream::connect(&socket)
        .await
        .unwrap()
        .into_split();
    let hello = json!({"type": "hello", "protocol": 1, "pid": std::process::id(), "client": "a client that never reads"});
    requests
        .write_all(format!("{hello}\n").as_bytes())
        .await
        .unwrap();
    // 50 messages of 8,000 bytes, then reads of all of them (about 400 KB a
    // reply): a few fill the socket's buffers.
    let big = "x".repeat(8000);
    let writer = tokio::spawn(async move {
        for id in 0..250 {
            let call = if id < 50 {
                json!({"name": "send_message", "arguments": {"channel": "#big", "sender": "alice", "text": big}})
            } else {
                json!({"name": "read_messages", "arguments": {"channel": "#big", "limit": 50}})
            };
            let line = json!({"type": "request", "id": id, "method": "tools/call", "params": call});
            let written = tokio::time::timeout(
                Duration::from_secs(30),
                requests.write_all(format!("{line}\n").as_bytes()),
            )
            .await;
            if !matches!(written, Ok(Ok(()))) {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    while !daemon.log().contains("closing a relay connection") {
        assert!(
            Instant::now() < deadline,
            "a relay client that reads nothing kept its connection for 30 s; log:\n{}",
            daemon.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // What was written before the close is still there to read, then EOF.
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), replies.read_to_end(&mut rest)).await;
    assert!(read.is_ok(), "the connection was not closed");
    tokio::time::timeout(Duration::from_secs(30), writer)
        .await
        .expect("the writer stops once the connection is closed")
        .unwrap();

    // A client that reads is served.
    let output = switchboard(
        &[
            "say",
            "#big",
            "still served",
            "--as",
            "bob",
            "--socket",
            socket.to_str().unwrap(),
        ],
        runtime.path(),
    )
    .output()
    .await
    .unwrap();
    assert!(output.status.success(), "{output:?}");
    assert!(!daemon.log().contains("panicked"), "{}", daemon.log());
}
