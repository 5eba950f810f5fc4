//! Every front door answers malformed JSON-RPC alike: the same inputs sent
//! to `serve --stdio`, Streamable HTTP, legacy SSE and `switchboard shim`
//! (over the daemon's real relay socket) get the same error reply, byte for
//! byte: the code JSON-RPC 2.0 prescribes, and the id echoed only when it is
//! a valid one.

mod common;

use std::{process::Stdio, time::Duration};

use common::*;
use serde_json::{Value, json};
use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines},
    process::{ChildStdin, ChildStdout},
};

/// Each malformed input, with the error code and id its reply must carry.
fn cases() -> Vec<(&'static str, i32, Value)> {
    vec![
        ("this is not json", -32700, Value::Null),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"ping""#,
            -32700,
            Value::Null,
        ),
        (
            r#"{"jsonrpc":"2.0","id":1e400,"method":"ping"}"#,
            -32700,
            Value::Null,
        ),
        (
            r#"{"jsonrpc":"2.0","id":"n","method":"ping","params":{"n":-1e999}}"#,
            -32700,
            Value::Null,
        ),
        // A key named twice: which one counts depends on the reader.
        (
            r#"{"jsonrpc":"2.0","id":7,"id":8,"method":"ping"}"#,
            -32700,
            Value::Null,
        ),
        (
            r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"list_channels","name":"get_members","arguments":{}}}"#,
            -32700,
            Value::Null,
        ),
        (
            r#"{"jsonrpc":"1.0","id":2,"method":"ping"}"#,
            -32600,
            json!(2),
        ),
        (r#"{"id":"three","method":"ping"}"#, -32600, json!("three")),
        (
            r#"{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}"#,
            -32600,
            Value::Null,
        ),
        (
            r#"{"jsonrpc":"2.0","id":[4],"method":"ping"}"#,
            -32600,
            Value::Null,
        ),
        (
            r#"{"jsonrpc":"2.0","id":true,"method":"ping"}"#,
            -32600,
            Value::Null,
        ),
        (
            r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
            -32600,
            Value::Null,
        ),
        (
            r#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#,
            -32600,
            Value::Null,
        ),
        (
            r#"{"jsonrpc":"2.0","id":18446744073709551616,"method":"ping"}"#,
            -32600,
            Value::Null,
        ),
        (
            r#"{"jsonrpc":"2.0","id":5,"method":"tools/list","params":[1,2]}"#,
            -32602,
            json!(5),
        ),
        (
            r#"{"jsonrpc":"2.0","id":6,"method":"tools/list","params":"all"}"#,
            -32600,
            json!(6),
        ),
        (r#"{"jsonrpc":"2.0","id":7}"#, -32600, json!(7)),
        (r#"{"jsonrpc":"2.0","id":8,"method":42}"#, -32600, json!(8)),
        (
            r#"{"jsonrpc":"2.0","method":["ping"]}"#,
            -32600,
            Value::Null,
        ),
        (
            r#"[{"jsonrpc":"2.0","id":9,"method":"ping"}]"#,
            -32600,
            Value::Null,
        ),
        ("[]", -32600, Value::Null),
        (r#""ping""#, -32600, Value::Null),
        ("true", -32600, Value::Null),
        (
            r#"{"jsonrpc":"2.0","id":10,"result":{},"error":{"code":1,"message":"x"}}"#,
            -32600,
            json!(10),
        ),
        (
            r#"{"jsonrpc":"2.0","id":11,"method":"tools/call"}"#,
            -32602,
            json!(11),
        ),
        (
            r#"{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"arguments":{}}}"#,
            -32602,
            json!(12),
        ),
        (
            r#"{"jsonrpc":"2.0","id":13,"method":"tools/call","params":{"name":"x","arguments":[]}}"#,
            -32602,
            json!(13),
        ),
        (
            r#"{"jsonrpc":"2.0","id":14,"method":"no/such"}"#,
            -32601,
            json!(14),
        ),
    ]
}

/// A child speaking newline-delimited JSON-RPC on its stdin/stdout.
struct LineClient {
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
    _child: tokio::process::Child,
}

impl LineClient {
    fn spawn(mut cmd: tokio::process::Command) -> Self {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the child");
        Self {
            stdin: child.stdin.take().unwrap(),
            stdout: BufReader::new(child.stdout.take().unwrap()).lines(),
            _child: child,
        }
    }

    /// Sends one line and returns the next reply the child writes (the
    /// notifications it may send meanwhile skipped).
    async fn exchange(&mut self, line: &str) -> String {
        self.stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap();
        self.stdin.flush().await.unwrap();
        loop {
            let reply = tokio::time::timeout(Duration::from_secs(10), self.stdout.next_line())
                .await
                .unwrap_or_else(|_| panic!("no reply to {line}"))
                .unwrap()
                .expect("stdout open");
            let is_notification = serde_json::from_str::<Value>(&reply)
                .is_ok_and(|message| message.get("method").is_some());
            if !is_notification {
                return reply;
            }
        }
    }

    async fn initialize(&mut self) {
        let init = r#"{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#;
        let reply: Value = serde_json::from_str(&self.exchange(init).await).unwrap();
        assert_eq!(reply["id"], "init", "{reply}");
        self.stdin
            .write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n")
            .await
            .unwrap();
    }
}

/// POSTs `body` to `url`; the reply is the body of a response with
/// `status`.
async fn post(http: &reqwest::Client, url: &str, body: &str, status: u16) -> String {
    let response = post_json(http, url)
        .header("mcp-protocol-version", "2025-06-18")
        .body(body.to_owned())
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.status(),
        status,
        "POST {url} {}",
        &body[..body.len().min(200)]
    );
    response.text().await.unwrap()
}

/// The four front doors of one daemon (and a stdio child beside it).
struct Doors {
    daemon: Server,
    stdio: LineClient,
    shim: LineClient,
    http: reqwest::Client,
    sse: SseClient,
    _runtime: tempfile::TempDir,
}

impl Doors {
    async fn open() -> Self {
        let runtime = runtime_dir();
        let socket = runtime.path().join("relay.sock");
        let daemon = Server::start_with(
            &["--ephemeral", "--socket", socket.to_str().unwrap()],
            &[("XDG_RUNTIME_DIR", runtime.path().to_str().unwrap())],
        )
        .await;
        daemon.wait_for_log("serving the relay socket at").await;
        let mut stdio = LineClient::spawn(command(&["--stdio", "--ephemeral"]));
        stdio.initialize().await;
        let mut shim = LineClient::spawn(switchboard(
            &["shim", "--socket", socket.to_str().unwrap()],
            runtime.path(),
        ));
        shim.initialize().await;
        let sse = SseClient::open(&daemon.url("")).await;
        Self {
            daemon,
            stdio,
            shim,
            http: reqwest::Client::new(),
            sse,
            _runtime: runtime,
        }
    }

    /// Sends `input` through every door (HTTP expecting `status`) and
    /// requires the same reply from each; returns it.
    async fn same_reply(&mut self, input: &str, status: u16) -> Value {
        let replies = [
            ("stdio", self.stdio.exchange(input).await),
            (
                "Streamable HTTP",
                post(&self.http, &self.daemon.url("/mcp"), input, status).await,
            ),
            (
                "legacy SSE",
                post(&self.http, &self.sse.endpoint, input, status).await,
            ),
            ("shim", self.shim.exchange(input).await),
        ];
        let shown = &input[..input.len().min(200)];
        let (_, first) = &replies[0];
        for (transport, other) in &replies[1..] {
            assert_eq!(
                other, first,
                "{shown}: {transport} answered differently than stdio"
            );
        }
        serde_json::from_str(first)
            .unwrap_or_else(|e| panic!("{shown}: the reply {first} is not JSON: {e}"))
    }

    /// Every door still serves.
    async fn still_serve(&mut self) {
        let ping = r#"{"jsonrpc":"2.0","id":99,"method":"ping"}"#;
        for client in [&mut self.stdio, &mut self.shim] {
            let pong: Value = serde_json::from_str(&client.exchange(ping).await).unwrap();
            assert_eq!(
                (pong["id"].clone(), pong["result"].clone()),
                (json!(99), json!({}))
            );
        }
        let pong = post(&self.http, &self.daemon.url("/mcp"), ping, 200).await;
        assert!(pong.contains("\"id\":99"), "{pong}");
    }
}

/// A message behind a UTF-8 byte-order mark is read past it everywhere.
#[tokio::test]
async fn a_byte_order_mark_is_read_past_on_every_transport() {
    let mut doors = Doors::open().await;
    let ping = "\u{feff}{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"ping\"}";
    let pong = json!({"jsonrpc": "2.0", "id": 5, "result": {}});
    let replies = [
        doors.stdio.exchange(ping).await,
        doors.shim.exchange(ping).await,
        post(&doors.http, &doors.daemon.url("/mcp"), ping, 200).await,
    ];
    for reply in replies {
        assert_eq!(
            serde_json::from_str::<Value>(&reply).unwrap(),
            pong,
            "{reply}"
        );
    }
}

#[tokio::test]
async fn malformed_messages_get_the_same_reply_on_every_transport() {
    let mut doors = Doors::open().await;
    for (input, code, id) in cases() {
        let reply = doors.same_reply(input, 400).await;
        assert_eq!(
            (&reply["error"]["code"], &reply["id"], &reply["jsonrpc"]),
            (&json!(code), &id, &json!("2.0")),
            "{input}: {reply}"
        );
        assert!(reply["error"]["message"].is_string(), "{input}: {reply}");
    }
    doors.still_serve().await;
}

#[tokio::test]
async fn a_message_over_16_mib_gets_the_same_error_on_every_transport() {
    let mut doors = Doors::open().await;
    let padding = "x".repeat(16 * 1024 * 1024);
    let input =
        format!(r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"p":"{padding}"}}}}"#);
    // HTTP answers 413, with the error stdio writes as a line.
    let reply = doors.same_reply(&input, 413).await;
    assert_eq!(
        (&reply["error"]["code"], &reply["id"]),
        (&json!(-32600), &Value::Null),
        "{reply}"
    );
    let message = reply["error"]["message"].as_str().unwrap();
    assert!(message.contains("16777216 bytes"), "{message}");
    doors.still_serve().await;
}
