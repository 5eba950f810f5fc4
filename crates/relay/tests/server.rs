//! The application side against real clients: `client::Link` (what the shim
//! uses) and raw lines over a Unix socket.

mod common;

use std::{sync::atomic::Ordering, time::Duration};

use common::{Raw, Running, WAIT, params};
use serde_json::{Value, json};
use switchboard_relay::{
    BindError, ERROR_META, Options,
    client::{Incoming, Link, LinkError},
    protocol::ErrorCode,
};
use tokio::io::AsyncWriteExt;

const LIST: Duration = Duration::from_secs(3);
const CALL: Duration = Duration::from_secs(15);

async fn link(path: &std::path::Path) -> (Link, tokio::sync::mpsc::Receiver<Incoming>) {
    Link::connect(path, Duration::from_secs(1), "relay test")
        .await
        .unwrap()
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
async fn a_link_lists_the_tools_and_calls_them() {
    let server = Running::start().await;
    let (link, _events) = link(&server.path).await;
    let list = link.request("tools/list", None, LIST).await.unwrap();
    let names: Vec<_> = list["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["echo", "gated", "whoami", "strict", "boom"]);
    assert_eq!(list["tools"][1]["timeout_ms"], 60_000);
    assert_eq!(list["tools"][0]["inputSchema"]["required"], json!(["text"]));
    let welcome = link.welcome().unwrap();
    assert_eq!(welcome.app, "Relay Test");
    assert_eq!(welcome.app_id, "dev.test.relay");

    let result = call(&link, "echo", json!({"text": "hello"})).await.unwrap();
    assert_eq!(
        result,
        json!({"content": [{"type": "text", "text": "hello"}], "isError": false})
    );
    let result = call(&link, "strict", json!({"title": "ok", "count": 2}))
        .await
        .unwrap();
    assert_eq!(text(&result), "valid");
    assert_eq!(server.handle.connections(), 1);
    server.stop().await;
}

#[tokio::test]
async fn invalid_arguments_are_a_tool_error_listing_every_path() {
    let server = Running::start().await;
    let (link, _events) = link(&server.path).await;
    let result = call(
        &link,
        "strict",
        json!({"title": "far too long", "count": 0, "colour": "red"}),
    )
    .await
    .unwrap();
    assert_eq!(result["isError"], true);
    let text = text(&result);
    assert!(text.starts_with("invalid arguments for strict: "), "{text}");
    assert!(
        text.contains("\"far too long\" is longer than 5 characters (at /title)"),
        "{text}"
    );
    assert!(
        text.contains("0 is less than the minimum of 1 (at /count)"),
        "{text}"
    );
    assert!(text.contains("(at /)"), "{text}");
    assert!(text.contains("colour"), "{text}");
    // Programs learn an argument that was wrong, outside `structuredContent`
    // (which the tool's outputSchema describes).
    assert!(result.get("structuredContent").is_none(), "{result}");
    let first = &result["_meta"][ERROR_META]["invalid_argument"];
    assert!(
        ["title", "count", "colour"].iter().any(|a| first == a),
        "{first}"
    );

    let result = call(&link, "strict", json!({})).await.unwrap();
    let first = &result["_meta"][ERROR_META]["invalid_argument"];
    assert!(first == "title" || first == "count", "{first}");
    let text = self::text(&result);
    assert!(
        text.contains("\"title\" is a required property (at /)"),
        "{text}"
    );
    assert!(
        text.contains("\"count\" is a required property (at /)"),
        "{text}"
    );

    // Missing arguments are an empty object, checked like any other.
    let result = link
        .request("tools/call", params(json!({"name": "echo"})), CALL)
        .await
        .unwrap();
    assert_eq!(result["isError"], true);
    assert!(self::text(&result).contains("\"text\" is a required property"));
    server.stop().await;
}

#[tokio::test]
async fn unknown_tools_and_methods_are_protocol_errors() {
    let server = Running::start().await;
    let (link, _events) = link(&server.path).await;
    match call(&link, "frobnicate", json!({})).await {
        Err(LinkError::Remote(body)) => {
            assert_eq!(body.code, ErrorCode::UnknownTool);
            assert_eq!(body.message, "no tool named frobnicate");
        }
        other => panic!("{other:?}"),
    }
    match link.request("resources/list", None, LIST).await {
        Err(LinkError::Remote(body)) => {
            assert_eq!(body.code, ErrorCode::UnknownMethod);
            assert!(body.message.contains("resources/list"));
        }
        other => panic!("{other:?}"),
    }
    // The connection is still good.
    assert!(call(&link, "echo", json!({"text": "x"})).await.is_ok());
    server.stop().await;
}

#[tokio::test]
async fn a_panicking_handler_is_an_internal_error() {
    let server = Running::start().await;
    let (link, _events) = link(&server.path).await;
    match call(&link, "boom", json!({})).await {
        Err(LinkError::Remote(body)) => {
            assert_eq!(body.code, ErrorCode::Internal);
            assert!(body.message.contains("boom"), "{}", body.message);
        }
        other => panic!("{other:?}"),
    }
    assert!(call(&link, "echo", json!({"text": "x"})).await.is_ok());
    server.stop().await;
}

#[tokio::test]
async fn malformed_lines_are_answered_and_the_connection_kept() {
    let server = Running::start().await;
    let mut raw = Raw::hello(&server.path).await;

    raw.send("this is not json").await;
    let reply = raw.recv().await;
    assert_eq!(reply["type"], "error");
    assert!(
        reply["message"].as_str().unwrap().contains("not JSON"),
        "{reply}"
    );

    raw.send("[1,2]").await;
    assert_eq!(raw.recv().await["type"], "error");

    raw.send(r#"{"type":"gossip"}"#).await;
    assert_eq!(raw.recv().await["type"], "error");

    // A request with a readable id gets a response for that id.
    raw.send(r#"{"type":"request","id":7}"#).await;
    let reply = raw.recv().await;
    assert_eq!(reply["type"], "response");
    assert_eq!(reply["id"], 7);
    assert_eq!(reply["error"]["code"], "invalid_request");

    raw.send(r#"{"type":"request","id":"s","method":"tools/call","params":{"name":"echo","arguments":[1]}}"#)
        .await;
    let reply = raw.recv().await;
    assert_eq!(reply["id"], "s");
    assert_eq!(reply["error"]["code"], "invalid_request");

    raw.send(r#"{"type":"request","id":9,"method":"tools/call"}"#)
        .await;
    assert_eq!(raw.recv().await["error"]["code"], "invalid_request");

    // Messages a client never sends.
    raw.send(r#"{"type":"welcome","protocol":1,"app":"x","app_id":"y"}"#)
        .await;
    assert_eq!(raw.recv().await["type"], "error");
    raw.send(r#"{"type":"hello","protocol":1,"pid":1}"#).await;
    assert_eq!(raw.recv().await["type"], "error");
    // An error from the client is logged, not answered.
    raw.send(r#"{"type":"error","message":"client side trouble"}"#)
        .await;
    // Empty lines and a trailing CR are fine.
    raw.send("").await;
    raw.send("{\"type\":\"request\",\"id\":10,\"method\":\"tools/list\"}\r")
        .await;
    let reply = raw.recv().await;
    assert_eq!(reply["id"], 10);
    assert_eq!(reply["result"]["tools"][0]["name"], "echo");
    server.stop().await;
}

#[tokio::test]
async fn an_over_long_line_closes_the_connection_without_buffering_it() {
    let server = Running::start().await;
    let raw = Raw::hello(&server.path).await;
    let Raw {
        mut reader,
        mut writer,
    } = raw;
    // Try to send 64 MiB without a newline; the application must stop
    // reading a little after 1 MiB and close.
    const ATTEMPT: usize = 64 * 1024 * 1024;
    let sender = tokio::spawn(async move {
        let chunk = vec![b'x'; 64 * 1024];
        let mut sent = 0;
        while sent < ATTEMPT {
            match tokio::time::timeout(WAIT, writer.write_all(&chunk)).await {
                Ok(Ok(())) => sent += chunk.len(),
                Ok(Err(_)) => return (sent, true),
                Err(_) => return (sent, false),
            }
        }
        (sent, false)
    });
    let mut line = String::new();
    use tokio::io::AsyncBufReadExt;
    tokio::time::timeout(WAIT, reader.read_line(&mut line))
        .await
        .unwrap()
        .unwrap();
    let error: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(
        error,
        json!({"type": "error", "message": "line exceeds 1048576 bytes"})
    );
    line.clear();
    let eof = tokio::time::timeout(WAIT, reader.read_line(&mut line))
        .await
        .unwrap();
    assert!(matches!(eof, Ok(0) | Err(_)), "{eof:?} {line}");
    let (sent, broken) = sender.await.unwrap();
    assert!(
        broken,
        "the write side should have failed; sent {sent} bytes"
    );
    assert!(
        sent < 16 * 1024 * 1024,
        "the application read {sent} bytes of one line"
    );
    // The server itself is fine.
    let (link, _events) = link(&server.path).await;
    assert!(call(&link, "echo", json!({"text": "x"})).await.is_ok());
    server.stop().await;
}

#[tokio::test]
async fn calls_run_concurrently_and_answer_out_of_order() {
    let server = Running::start().await;
    let mut raw = Raw::hello(&server.path).await;
    raw.send(r#"{"type":"request","id":1,"method":"tools/call","params":{"name":"gated","arguments":{}}}"#)
        .await;
    raw.send(r#"{"type":"request","id":2,"method":"tools/call","params":{"name":"gated","arguments":{}}}"#)
        .await;
    raw.send(r#"{"type":"request","id":3,"method":"tools/call","params":{"name":"echo","arguments":{"text":"quick"}}}"#)
        .await;
    raw.send(r#"{"type":"request","id":4,"method":"tools/list"}"#)
        .await;
    // 1 and 2 wait at the gate; 3 and 4 overtake them.
    let mut ids = vec![
        raw.recv().await["id"].clone(),
        raw.recv().await["id"].clone(),
    ];
    ids.sort_by_key(|id| id.as_i64());
    assert_eq!(ids, [json!(3), json!(4)]);
    server.gate.add_permits(2);
    let mut ids = vec![
        raw.recv().await["id"].clone(),
        raw.recv().await["id"].clone(),
    ];
    ids.sort_by_key(|id| id.as_i64());
    assert_eq!(ids, [json!(1), json!(2)]);

    // The same through a Link: a slow call does not hold up a quick one.
    let (link, _events) = link(&server.path).await;
    let slow = call(&link, "gated", json!({}));
    let quick = async {
        let result = call(&link, "echo", json!({"text": "quick"})).await.unwrap();
        server.gate.add_permits(1);
        result
    };
    let (slow, quick) = tokio::join!(slow, quick);
    assert_eq!(text(&quick), "quick");
    assert_eq!(text(&slow.unwrap()), "through the gate");
    server.stop().await;
}

/// A `cancel` stops the call: the handler's future is dropped (its gate
/// permit is never taken) and the request is answered `cancelled`. A Link
/// request whose future is dropped sends the cancel itself.
#[tokio::test]
async fn a_cancelled_call_is_dropped_and_answered_cancelled() {
    let server = Running::start().await;
    let mut raw = Raw::hello(&server.path).await;
    raw.send(r#"{"type":"request","id":9,"method":"tools/call","params":{"name":"gated","arguments":{}}}"#)
        .await;
    server.entered().await;
    raw.send(r#"{"type":"cancel","id":9}"#).await;
    let answer = raw.recv().await;
    assert_eq!(answer["id"], 9, "{answer}");
    assert_eq!(answer["error"]["code"], "cancelled", "{answer}");
    // A cancel for nothing in flight changes nothing.
    raw.send(r#"{"type":"cancel","id":10}"#).await;
    raw.send(r#"{"type":"request","id":11,"method":"tools/list"}"#)
        .await;
    assert_eq!(raw.recv().await["id"], 11);

    let (link, _events) = link(&server.path).await;
    let gave_up = tokio::time::timeout(Duration::from_millis(300), async {
        let waiting = call(&link, "gated", json!({}));
        tokio::pin!(waiting);
        tokio::select! {
            _ = &mut waiting => unreachable!("the gate is shut"),
            () = server.entered() => std::future::pending::<()>().await,
        }
    })
    .await;
    assert!(gave_up.is_err());
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Neither call is waiting at the gate any more: a permit stays unused.
    server.gate.add_permits(1);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(server.gate.available_permits(), 1);
    server.stop().await;
}

/// A Link request that times out cancels its call, even while the link
/// stays up for others.
#[tokio::test]
async fn a_timed_out_request_cancels_its_call() {
    let server = Running::start().await;
    let (link, _events) = link(&server.path).await;
    let timed_out = link
        .request(
            "tools/call",
            params(json!({"name": "gated", "arguments": {}})),
            Duration::from_millis(300),
        )
        .await;
    assert!(
        matches!(timed_out, Err(LinkError::Timeout(_))),
        "{timed_out:?}"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    // The call is not waiting at the gate any more: a permit stays unused,
    // and the link still serves.
    server.gate.add_permits(1);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(server.gate.available_permits(), 1);
    assert!(
        call(&link, "echo", json!({"text": "still here"}))
            .await
            .is_ok()
    );
    server.stop().await;
}

#[tokio::test]
async fn calls_beyond_the_in_flight_limit_wait_their_turn() {
    let server = Running::start_with(|o| o.max_in_flight(2)).await;
    let (link, _events) = link(&server.path).await;
    let opened = std::sync::atomic::AtomicBool::new(false);
    let gated = async {
        let results = tokio::join!(
            call(&link, "gated", json!({})),
            call(&link, "gated", json!({})),
            async {
                let result = call(&link, "echo", json!({"text": "third"})).await;
                // It could not run while two gated calls held both slots.
                assert!(opened.load(Ordering::SeqCst), "the echo overtook");
                result
            },
        );
        (results.0.unwrap(), results.1.unwrap(), results.2.unwrap())
    };
    let opener = async {
        server.entered().await;
        server.entered().await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        opened.store(true, Ordering::SeqCst);
        server.gate.add_permits(2);
    };
    let ((a, b, c), ()) = tokio::join!(gated, opener);
    assert_eq!(text(&a), "through the gate");
    assert_eq!(text(&b), "through the gate");
    assert_eq!(text(&c), "third");
    server.stop().await;
}

#[tokio::test]
async fn a_client_that_stops_reading_is_disconnected_after_the_write_timeout() {
    let server = Running::start_with(|o| o.write_timeout(Some(Duration::from_millis(300)))).await;
    let mut raw = Raw::hello(&server.path).await;
    // A call that would never end on its own ends with the connection.
    raw.send(r#"{"type":"request","id":"held","method":"tools/call","params":{"name":"gated","arguments":{}}}"#)
        .await;
    server.entered().await;
    let Raw { reader, mut writer } = raw;
    // Echoes of 64 KiB each, never read: the socket's buffers fill after a
    // few, then the server's queue, then its calls' places.
    let payload = "x".repeat(64 * 1024);
    let sender = tokio::spawn(async move {
        for id in 0..200 {
            let request = json!({"type": "request", "id": id, "method": "tools/call",
                "params": {"name": "echo", "arguments": {"text": payload}}});
            let line = format!("{request}\n");
            match tokio::time::timeout(WAIT, writer.write_all(line.as_bytes())).await {
                Ok(Ok(())) => {}
                _ => break,
            }
        }
    });
    let deadline = tokio::time::Instant::now() + WAIT;
    while server.handle.connections() > 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "a client that reads nothing still holds its connection after {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(reader);
    tokio::time::timeout(WAIT, sender).await.unwrap().unwrap();
    // Clients that read are served as before.
    let (link, _events) = link(&server.path).await;
    let reply = call(&link, "echo", json!({"text": "still here"}))
        .await
        .unwrap();
    assert_eq!(text(&reply), "still here");
    server.stop().await;
}

#[tokio::test]
async fn a_tool_list_change_reaches_every_link() {
    let server = Running::start().await;
    let (first, mut first_events) = link(&server.path).await;
    let (second, mut second_events) = link(&server.path).await;
    // Both links have said hello once they have a list.
    first.request("tools/list", None, LIST).await.unwrap();
    second.request("tools/list", None, LIST).await.unwrap();
    assert!(matches!(
        call(&first, "extra", json!({})).await,
        Err(LinkError::Remote(_))
    ));

    server.extra.store(true, Ordering::SeqCst);
    server.handle.tools_changed().unwrap();
    for events in [&mut first_events, &mut second_events] {
        let event = tokio::time::timeout(WAIT, events.recv()).await.unwrap();
        assert_eq!(event, Some(Incoming::Notify("tools_changed".into())));
    }
    let list = first.request("tools/list", None, LIST).await.unwrap();
    assert_eq!(list["tools"].as_array().unwrap().len(), 6);
    assert_eq!(
        text(&call(&second, "extra", json!({})).await.unwrap()),
        "extra ran"
    );

    // A list that cannot be compiled is refused; the old one stays.
    server.broken_schema.store(true, Ordering::SeqCst);
    let error = server.handle.tools_changed().unwrap_err();
    assert!(error.to_string().contains("broken"), "{error}");
    let list = first.request("tools/list", None, LIST).await.unwrap();
    assert_eq!(list["tools"].as_array().unwrap().len(), 6);
    server.stop().await;
}

#[tokio::test]
async fn a_hello_with_another_pid_is_refused() {
    let server = Running::start().await;
    let mut raw = Raw::connect(&server.path).await;
    let wrong = std::process::id() + 1;
    raw.send(&json!({"type": "hello", "protocol": 1, "pid": wrong, "client": "liar"}).to_string())
        .await;
    let reply = raw.recv().await;
    assert_eq!(reply["type"], "error");
    let message = reply["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("pid {wrong}"))
            && message.contains(&std::process::id().to_string()),
        "{message}"
    );
    assert!(raw.closed().await);
    assert_eq!(server.handle.connections(), 0);
    server.stop().await;
}

#[tokio::test]
async fn other_protocol_versions_and_missing_hellos_are_refused() {
    let server = Running::start_with(|o| o.hello_timeout(Duration::from_millis(300))).await;

    let mut raw = Raw::connect(&server.path).await;
    raw.send(&json!({"type": "hello", "protocol": 2, "pid": std::process::id()}).to_string())
        .await;
    let reply = raw.recv().await;
    assert!(
        reply["message"]
            .as_str()
            .unwrap()
            .contains("protocol version 2"),
        "{reply}"
    );
    assert!(raw.closed().await);

    let mut raw = Raw::connect(&server.path).await;
    raw.send(r#"{"type":"request","id":1,"method":"tools/list"}"#)
        .await;
    let reply = raw.recv().await;
    assert_eq!(reply["type"], "error");
    assert!(
        reply["message"].as_str().unwrap().contains("hello"),
        "{reply}"
    );
    assert!(raw.closed().await);

    let mut raw = Raw::connect(&server.path).await;
    let reply = raw.recv().await;
    assert!(
        reply["message"].as_str().unwrap().contains("no hello"),
        "{reply}"
    );
    assert!(raw.closed().await);
    server.stop().await;
}

#[tokio::test]
async fn requests_sent_before_the_welcome_are_served_after_it() {
    let server = Running::start().await;
    let mut raw = Raw::connect(&server.path).await;
    let hello = json!({"type": "hello", "protocol": 1, "pid": std::process::id()});
    raw.send(&format!(
        "{hello}\n{}",
        r#"{"type":"request","id":1,"method":"tools/list"}"#
    ))
    .await;
    assert_eq!(raw.recv().await["type"], "welcome");
    assert_eq!(raw.recv().await["id"], 1);
    server.stop().await;
}

#[tokio::test]
async fn the_handler_sees_the_caller_and_its_ancestry() {
    let server = Running::start().await;
    let (link, _events) = link(&server.path).await;
    let result = call(&link, "whoami", json!({})).await.unwrap();
    let me = &result["structuredContent"];
    let pid = std::process::id();
    assert_eq!(me["pid"], pid);
    // SAFETY: plain syscalls.
    let (uid, ppid) = unsafe { (libc::getuid(), libc::getppid()) };
    assert_eq!(me["uid"], uid);
    assert_eq!(me["client"], "relay test");
    let chain = me["ancestry"].as_array().unwrap();
    assert_eq!(chain[0]["pid"], pid);
    assert_eq!(chain[0]["ppid"], ppid);
    assert_eq!(chain[1]["pid"], ppid);
    let exe = std::env::current_exe().unwrap();
    let arg0 = chain[0]["cmdline"][0].as_str().unwrap();
    assert!(
        exe.file_name().unwrap().to_str().unwrap().starts_with(
            std::path::Path::new(arg0)
                .file_name()
                .unwrap()
                .to_str()
                .unwrap()
        ),
        "{arg0} vs {}",
        exe.display()
    );
    for pair in chain.windows(2) {
        assert_eq!(pair[0]["ppid"], pair[1]["pid"]);
    }
    let last = chain.last().unwrap();
    assert!(last["pid"] == 1 || last["ppid"] == 0, "{last}");
    server.stop().await;
}

#[tokio::test]
async fn shutdown_stops_accepting_and_lets_calls_in_flight_finish() {
    // A raw client: `Link::request` may report a response that arrives
    // together with the close as "closed" (see the crate's report).
    let mut server = Running::start().await;
    let mut raw = Raw::hello(&server.path).await;
    raw.send(r#"{"type":"request","id":1,"method":"tools/call","params":{"name":"gated","arguments":{}}}"#)
        .await;
    server.entered().await;
    server.handle.shutdown();
    let deadline = tokio::time::Instant::now() + WAIT;
    while server.path.exists() {
        assert!(tokio::time::Instant::now() < deadline, "socket not removed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        Link::connect(&server.path, Duration::from_secs(1), "late")
            .await
            .is_err()
    );
    // Requests sent after the shutdown began are not read.
    raw.send(r#"{"type":"request","id":2,"method":"tools/list"}"#)
        .await;
    server.gate.add_permits(1);
    let reply = raw.recv().await;
    assert_eq!(reply["id"], 1);
    assert_eq!(text(&reply["result"]), "through the gate");
    assert!(raw.closed().await);
    tokio::time::timeout(WAIT, server.task.take().unwrap())
        .await
        .expect("serve returns")
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn shutdown_drops_calls_that_outlast_the_grace_period() {
    let mut server = Running::start_with(|o| o.shutdown_grace(Duration::from_millis(200))).await;
    let (link, _events) = link(&server.path).await;
    let in_flight = tokio::spawn(async move { call(&link, "gated", json!({})).await });
    server.entered().await;
    let started = std::time::Instant::now();
    server.handle.shutdown();
    tokio::time::timeout(WAIT, server.task.take().unwrap())
        .await
        .expect("serve returns")
        .unwrap()
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(matches!(
        in_flight.await.unwrap(),
        Err(LinkError::Closed(_))
    ));
    assert!(!server.path.exists());
}

#[tokio::test]
async fn a_live_socket_is_refused_and_a_stale_one_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sub/dir/relay.sock");
    let bind = || {
        Options::new("dev.test.bind")
            .socket_path(&path)
            .bind(common::TestTools::default())
    };
    // Missing parents are created, private.
    let first = bind().unwrap();
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&dir.path().join("sub/dir")), 0o700);
    assert_eq!(mode(&path), 0o600);
    // A second instance is refused while the first lives…
    let error = bind().unwrap_err();
    assert!(matches!(error, BindError::InUse { .. }), "{error}");
    assert!(error.to_string().contains("already serving"), "{error}");
    // …and the first's socket is untouched.
    assert!(std::os::unix::net::UnixStream::connect(&path).is_ok());
    // Dropping the server removes its socket.
    drop(first);
    assert!(!path.exists());

    // A live listener of some other program (no lock) is detected by
    // connecting to it.
    let foreign = std::os::unix::net::UnixListener::bind(&path).unwrap();
    assert!(matches!(bind(), Err(BindError::InUse { .. })));
    // Once it is gone, its socket file is stale and replaced.
    drop(foreign);
    assert!(path.exists());
    let server = bind().unwrap();
    let running = tokio::spawn(server.serve(std::future::pending()));
    let (link, _events) = link(&path).await;
    assert!(call(&link, "echo", json!({"text": "x"})).await.is_ok());
    running.abort();
    let _ = running.await;
    // Dropping `serve` midway still removes the socket.
    assert!(!path.exists());

    // Something that is not a socket is left alone.
    std::fs::write(&path, "precious").unwrap();
    assert!(matches!(bind(), Err(BindError::NotASocket(_))));
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "precious");
}

#[tokio::test]
async fn bad_app_ids_and_tool_lists_are_refused_at_bind() {
    let dir = tempfile::tempdir().unwrap();
    for id in ["", "..", "a/b", "with space"] {
        let error = Options::new(id)
            .socket_path(dir.path().join("s.sock"))
            .bind(common::TestTools::default())
            .unwrap_err();
        assert!(matches!(error, BindError::InvalidAppId(_)), "{id}: {error}");
    }
    let tools = common::TestTools::default();
    tools.broken_schema.store(true, Ordering::SeqCst);
    let error = Options::new("dev.test.x")
        .socket_path(dir.path().join("s.sock"))
        .bind(tools)
        .unwrap_err();
    assert!(matches!(error, BindError::Tools(_)), "{error}");
    assert!(!dir.path().join("s.sock").exists());
}

#[test]
fn the_server_writes_an_mcp_config_pointing_at_its_socket() {
    let dir = tempfile::tempdir().unwrap();
    let bound = Options::new("dev.test.config")
        .socket_path(dir.path().join("relay.sock"))
        .bind(common::TestTools::default())
        .unwrap();
    let path = bound.write_mcp_config().unwrap();
    assert_eq!(path, dir.path().join("relay.sock.mcp-config.json"));
    let json: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let entry = &json["mcpServers"]["dev_test_config"];
    assert_eq!(
        entry["args"],
        json!(["shim", "--socket", dir.path().join("relay.sock")])
    );
    assert!(!entry["command"].as_str().unwrap().is_empty());
}

/// Another user's connection is refused. As root, the peer runs as
/// `nobody` through `setpriv`; the socket sits in a directory that user can
/// reach.
#[tokio::test]
async fn a_peer_running_as_another_user_is_refused() {
    // SAFETY: plain syscall.
    if unsafe { libc::geteuid() } != 0 {
        // CI runs as root: there, not running this is a failure.
        assert!(
            std::env::var_os("CI").is_none(),
            "this test needs root (to run a peer as user nobody), and CI must run it"
        );
        eprintln!("not run: running a peer as another user needs root");
        return;
    }
    let python = ["/usr/bin/python3", "/usr/local/bin/python3"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .expect("a system python3 that user nobody can run (/usr/bin/python3)");
    // Under /tmp whatever TMPDIR says: `nobody` must be able to reach it.
    let dir = tempfile::tempdir_in("/tmp").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = dir.path().join("relay.sock");
    let server = Options::new("dev.test.uid")
        .socket_path(&path)
        .bind(common::TestTools::default())
        .unwrap();
    // Let the other user reach the socket at all, so the refusal is the
    // application's (SO_PEERCRED), not the file system's.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
    let handle = server.handle();
    let running = tokio::spawn(server.serve(std::future::pending()));

    let script = r#"
import json, os, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
s.settimeout(10)
try:
    # The application may refuse before reading: a broken pipe is fine.
    s.sendall((json.dumps({"type": "hello", "protocol": 1, "pid": os.getpid(), "client": "nobody"}) + "\n").encode())
    s.sendall(b'{"type":"request","id":1,"method":"tools/list"}\n')
except OSError:
    pass
data = b""
while True:
    try:
        chunk = s.recv(65536)
    except ConnectionResetError:
        break
    if not chunk:
        break
    data += chunk
print(json.dumps({"uid": os.getuid(), "lines": data.decode().splitlines()}))
"#;
    let output = tokio::process::Command::new("setpriv")
        .args([
            "--reuid=nobody",
            "--regid=nogroup",
            "--clear-groups",
            python,
            "-c",
            script,
        ])
        .arg(&path)
        .current_dir("/")
        .output();
    let output = tokio::time::timeout(WAIT, output).await.unwrap().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["uid"], 65534);
    let lines = report["lines"].as_array().unwrap();
    assert_eq!(lines.len(), 1, "{lines:?}");
    let error: Value = serde_json::from_str(lines[0].as_str().unwrap()).unwrap();
    assert_eq!(error["type"], "error");
    assert_eq!(
        error["message"],
        "connections from uid 65534 are refused: this application runs as uid 0"
    );
    assert_eq!(handle.connections(), 0);
    running.abort();
}
