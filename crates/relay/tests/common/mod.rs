//! Helpers shared by the relay's integration tests: a handler with a few
//! tools, a server on a temporary socket, and a raw line client.

#![allow(dead_code)]

use std::{
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use serde_json::{Map, Value, json};
use switchboard_relay::{Call, Event, Handle, Options, PeerInfo, Tool, ToolHandler, ToolResult};
use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader},
    net::{
        UnixStream,
        unix::{OwnedReadHalf, OwnedWriteHalf},
    },
    sync::{Semaphore, oneshot},
    task::JoinHandle,
};

pub const WAIT: Duration = Duration::from_secs(10);

/// Tools for the tests:
/// - `echo {text}` answers the text;
/// - `gated {}` waits until the test opens the gate (one permit per call);
/// - `whoami {}` answers the peer info as structured content;
/// - `strict {title ≤ 5 chars, count ≥ 1}`, no other properties;
/// - `boom {}` panics;
/// - `extra {}` exists only while `extra` is set.
pub struct TestTools {
    pub gate: Arc<Semaphore>,
    /// One permit for every `gated` call that reached the handler.
    pub entered: Arc<Semaphore>,
    pub extra: Arc<AtomicBool>,
    pub broken_schema: Arc<AtomicBool>,
    /// Every event clients sent, with the connection it came on.
    pub events: Arc<std::sync::Mutex<Vec<(u64, Event)>>>,
}

impl Default for TestTools {
    fn default() -> Self {
        Self {
            gate: Arc::new(Semaphore::new(0)),
            entered: Arc::new(Semaphore::new(0)),
            extra: Arc::default(),
            broken_schema: Arc::default(),
            events: Arc::default(),
        }
    }
}

impl ToolHandler for TestTools {
    fn tools(&self) -> Vec<Tool> {
        let mut tools = vec![
            Tool::new(
                "echo",
                "Say the text back.",
                json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
            ),
            Tool::new("gated", "Wait for the test.", json!({"type": "object"}))
                .with_timeout_ms(60_000),
            Tool::new("whoami", "Who is calling.", json!({"type": "object"})),
            Tool::new(
                "strict",
                "Strict arguments.",
                json!({
                    "type": "object",
                    "properties": {
                        "title": {"type": "string", "maxLength": 5},
                        "count": {"type": "integer", "minimum": 1}
                    },
                    "required": ["title", "count"],
                    "additionalProperties": false
                }),
            ),
            Tool::new("boom", "Panics.", json!({"type": "object"})),
        ];
        if self.extra.load(Ordering::SeqCst) {
            tools.push(Tool::new(
                "extra",
                "Appears later.",
                json!({"type": "object"}),
            ));
        }
        if self.broken_schema.load(Ordering::SeqCst) {
            tools.push(Tool::new("broken", "Bad schema.", json!({"type": 12})));
        }
        tools
    }

    async fn call(&self, call: Call) -> ToolResult {
        match call.name.as_str() {
            "echo" => ToolResult::text(call.arguments["text"].as_str().unwrap_or_default()),
            "gated" => {
                self.entered.add_permits(1);
                self.gate.acquire().await.expect("gate open").forget();
                ToolResult::text("through the gate")
            }
            "whoami" => {
                let peer = &call.peer;
                let ancestry: Vec<Value> = peer
                    .ancestry
                    .iter()
                    .map(|p| json!({"pid": p.pid, "ppid": p.ppid, "name": p.name, "cmdline": p.cmdline}))
                    .collect();
                ToolResult::structured(
                    format!("pid {}", peer.pid),
                    json!({"pid": peer.pid, "uid": peer.uid, "gid": peer.gid, "client": peer.client, "ancestry": ancestry}),
                )
            }
            "strict" => ToolResult::text("valid"),
            "boom" => panic!("the boom tool always panics"),
            "extra" => ToolResult::text("extra ran"),
            other => ToolResult::error(format!("unexpected tool {other}")),
        }
    }

    fn instructions(&self, peer: &PeerInfo) -> Option<String> {
        peer.identity.as_ref().map(|who| format!("Hello {who}."))
    }

    async fn event(&self, peer: Arc<PeerInfo>, event: Event) {
        self.events.lock().unwrap().push((peer.connection, event));
    }
}

/// A running server on a temporary socket.
pub struct Running {
    pub dir: tempfile::TempDir,
    pub path: PathBuf,
    pub handle: Handle,
    pub gate: Arc<Semaphore>,
    pub entered: Arc<Semaphore>,
    pub extra: Arc<AtomicBool>,
    pub broken_schema: Arc<AtomicBool>,
    pub events: Arc<std::sync::Mutex<Vec<(u64, Event)>>>,
    stop: Option<oneshot::Sender<()>>,
    pub task: Option<JoinHandle<std::io::Result<()>>>,
}

impl Running {
    pub async fn start() -> Self {
        Self::start_with(|options| options).await
    }

    pub async fn start_with(configure: impl FnOnce(Options) -> Options) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let tools = TestTools::default();
        let (gate, entered, extra, broken_schema, events) = (
            tools.gate.clone(),
            tools.entered.clone(),
            tools.extra.clone(),
            tools.broken_schema.clone(),
            tools.events.clone(),
        );
        let options = Options::new("dev.test.relay")
            .app_name("Relay Test")
            .socket_path(dir.path().join("relay.sock"));
        let server = configure(options).bind(tools).unwrap();
        let path = server.socket_path().to_owned();
        let handle = server.handle();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(server.serve(async {
            let _ = stopped.await;
        }));
        Self {
            dir,
            path,
            handle,
            gate,
            entered,
            extra,
            broken_schema,
            events,
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// Waits until a `gated` call has reached the handler.
    pub async fn entered(&self) {
        tokio::time::timeout(WAIT, self.entered.acquire())
            .await
            .expect("the call reaches the handler")
            .unwrap()
            .forget();
    }

    /// Stops the server and waits for `serve` to return.
    pub async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        tokio::time::timeout(WAIT, self.task.take().unwrap())
            .await
            .expect("serve returns")
            .unwrap()
            .unwrap();
    }
}

pub fn params(value: Value) -> Option<Map<String, Value>> {
    Some(value.as_object().expect("params are an object").clone())
}

/// A client that writes and reads raw lines.
pub struct Raw {
    pub reader: BufReader<OwnedReadHalf>,
    pub writer: OwnedWriteHalf,
}

impl Raw {
    pub async fn connect(path: &Path) -> Self {
        let stream = UnixStream::connect(path).await.unwrap();
        let (reader, writer) = stream.into_split();
        Self {
            reader: BufReader::new(reader),
            writer,
        }
    }

    /// Connects and says hello as this process; returns after the welcome.
    pub async fn hello(path: &Path) -> Self {
        let mut raw = Self::connect(path).await;
        raw.send(&json!({"type": "hello", "protocol": 1, "pid": std::process::id(), "client": "raw test"}).to_string())
            .await;
        let welcome = raw.recv().await;
        assert_eq!(welcome["type"], "welcome", "{welcome}");
        raw
    }

    pub async fn send(&mut self, line: &str) {
        self.writer.write_all(line.as_bytes()).await.unwrap();
        self.writer.write_all(b"\n").await.unwrap();
    }

    /// The next line, as JSON.
    pub async fn recv(&mut self) -> Value {
        let mut line = String::new();
        let n = tokio::time::timeout(WAIT, self.reader.read_line(&mut line))
            .await
            .expect("a line in time")
            .unwrap();
        assert!(n > 0, "the connection closed instead of sending a line");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
    }

    /// Whether the application closed the connection (EOF or reset) in time.
    pub async fn closed(&mut self) -> bool {
        let mut line = String::new();
        match tokio::time::timeout(WAIT, self.reader.read_line(&mut line)).await {
            Ok(Ok(0)) | Ok(Err(_)) => true,
            Ok(Ok(_)) => panic!("expected the connection to close, got {line}"),
            Err(_) => false,
        }
    }
}
