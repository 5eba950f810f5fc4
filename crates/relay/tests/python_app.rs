//! `client::Link` against `tests/python/relay_app.py`, an application side
//! written in Python from the spec alone: the spec is enough, and the
//! client speaks it (not just to this crate's own server).

mod common;

use std::{path::Path, process::Stdio, time::Duration};

use common::{Raw, WAIT, params};
use serde_json::{Value, json};
use switchboard_relay::{
    client::{Incoming, Link, LinkError},
    protocol::ErrorCode,
};
use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader},
    process::{Child, Command},
};

const CALL: Duration = Duration::from_secs(15);

struct PythonApp {
    child: Child,
    path: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl PythonApp {
    async fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("relay.sock");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/relay_app.py");
        let mut child = Command::new("python3")
            .arg(&script)
            .arg(&path)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            // Its log of calls, when asked for (RELAY_APP_LOG=1).
            .stderr(if std::env::var_os("RELAY_APP_LOG").is_some() {
                Stdio::inherit()
            } else {
                Stdio::null()
            })
            .kill_on_drop(true)
            .spawn()
            .expect("python3 runs");
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        tokio::time::timeout(WAIT, stdout.read_line(&mut line))
            .await
            .expect("the app starts in time")
            .unwrap();
        assert_eq!(line.trim(), format!("listening on {}", path.display()));
        Self {
            child,
            path,
            _dir: dir,
        }
    }

    fn signal(&self, signal: i32) {
        let pid = self.child.id().expect("running") as i32;
        // SAFETY: kill(2) on our own child.
        assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
    }

    async fn stop(mut self) {
        self.signal(libc::SIGTERM);
        let status = tokio::time::timeout(WAIT, self.child.wait())
            .await
            .expect("the app stops")
            .unwrap();
        assert!(status.success(), "{status}");
        assert!(!self.path.exists(), "the app removes its socket");
    }
}

async fn call(link: &Link, name: &str, arguments: Value) -> Result<Value, LinkError> {
    link.request(
        "tools/call",
        params(json!({"name": name, "arguments": arguments})),
        CALL,
    )
    .await
}

fn text(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap()
}

#[tokio::test]
async fn a_link_drives_the_python_app() {
    let app = PythonApp::start().await;
    let (link, mut events) = Link::connect(&app.path, Duration::from_secs(1), "rust link")
        .await
        .unwrap();
    let list = link
        .request("tools/list", None, Duration::from_secs(3))
        .await
        .unwrap();
    let welcome = link.welcome().unwrap();
    assert_eq!(welcome.app, "Python Relay Demo");
    assert_eq!(welcome.app_id, "dev.example.python");
    let names: Vec<_> = list["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["echo", "slow", "toggle_extra"]);
    assert_eq!(list["tools"][1]["timeout_ms"], 20_000);

    let result = call(&link, "echo", json!({"text": "hi"})).await.unwrap();
    assert_eq!(
        result,
        json!({"content": [{"type": "text", "text": "hi"}], "isError": false})
    );
    let result = call(&link, "echo", json!({"text": 17})).await.unwrap();
    assert_eq!(result["isError"], true);
    assert_eq!(
        text(&result),
        "invalid arguments for echo: 17 is not of type \"string\" (at /text)"
    );
    match call(&link, "frobnicate", json!({})).await {
        Err(LinkError::Remote(body)) => assert_eq!(body.code, ErrorCode::UnknownTool),
        other => panic!("{other:?}"),
    }
    match link.request("prompts/list", None, CALL).await {
        Err(LinkError::Remote(body)) => assert_eq!(body.code, ErrorCode::UnknownMethod),
        other => panic!("{other:?}"),
    }

    // A slow call does not hold up a quick one.
    let slow = call(&link, "slow", json!({"ms": 1500}));
    let quick = async {
        let started = std::time::Instant::now();
        let result = call(&link, "echo", json!({"text": "quick"})).await.unwrap();
        (result, started.elapsed())
    };
    let (slow, (quick, quick_took)) = tokio::join!(slow, quick);
    assert_eq!(text(&slow.unwrap()), "slept 1500 ms");
    assert_eq!(text(&quick), "quick");
    assert!(quick_took < Duration::from_millis(1500), "{quick_took:?}");

    // SIGUSR1 and the toggle_extra tool both announce a new list.
    app.signal(libc::SIGUSR1);
    let event = tokio::time::timeout(WAIT, events.recv()).await.unwrap();
    assert_eq!(event, Some(Incoming::Notify("tools_changed".into())));
    assert_eq!(
        text(&call(&link, "toggle_extra", json!({})).await.unwrap()),
        "shout is on"
    );
    let event = tokio::time::timeout(WAIT, events.recv()).await.unwrap();
    assert_eq!(event, Some(Incoming::Notify("tools_changed".into())));
    let list = link
        .request("tools/list", None, Duration::from_secs(3))
        .await
        .unwrap();
    assert_eq!(list["tools"][3]["name"], "shout");
    assert_eq!(
        text(&call(&link, "shout", json!({"text": "done"})).await.unwrap()),
        "DONE"
    );
    drop(link);
    app.stop().await;
}

#[tokio::test]
async fn the_python_app_answers_out_of_order_and_survives_bad_lines() {
    let app = PythonApp::start().await;
    let mut raw = Raw::hello(&app.path).await;
    raw.send(r#"{"type":"request","id":1,"method":"tools/call","params":{"name":"slow","arguments":{"ms":1000}}}"#)
        .await;
    raw.send(r#"{"type":"request","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}}"#)
        .await;
    assert_eq!(raw.recv().await["id"], 2);
    assert_eq!(raw.recv().await["id"], 1);

    raw.send("this is not json").await;
    assert_eq!(raw.recv().await["type"], "error");
    raw.send(r#"{"type":"request","id":3,"method":"tools/call","params":[]}"#)
        .await;
    let reply = raw.recv().await;
    assert_eq!(reply["id"], 3);
    assert_eq!(reply["error"]["code"], "invalid_request");
    raw.send(r#"{"type":"request","id":4,"method":"tools/list"}"#)
        .await;
    assert_eq!(raw.recv().await["id"], 4);

    // An over-long line: an error, then the connection closes.
    let chunk = vec![b'x'; 256 * 1024];
    let mut sent = 0;
    while sent <= 4 * 1024 * 1024 {
        if raw.writer.write_all(&chunk).await.is_err() {
            break;
        }
        sent += chunk.len();
    }
    let reply = raw.recv().await;
    assert_eq!(reply["type"], "error");
    assert!(
        reply["message"].as_str().unwrap().contains("1048576"),
        "{reply}"
    );
    assert!(raw.closed().await);

    // A hello with another pid is refused.
    let mut raw = Raw::connect(&app.path).await;
    raw.send(&json!({"type": "hello", "protocol": 1, "pid": std::process::id() + 1}).to_string())
        .await;
    let reply = raw.recv().await;
    assert_eq!(reply["type"], "error");
    assert!(
        reply["message"].as_str().unwrap().contains("pid"),
        "{reply}"
    );
    assert!(raw.closed().await);
    app.stop().await;
}
