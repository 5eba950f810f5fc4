//! `switchboard serve` over HTTP: Streamable HTTP with rmcp's client, the
//! legacy SSE endpoints with a plain HTTP client, and the request guard.

mod common;

use std::time::Duration;

use common::*;
use rmcp::model::ProtocolVersion;
use serde_json::json;

#[tokio::test]
async fn streamable_http_serves_old_and_newest_revisions() {
    let server = Server::start(&["--ephemeral"]).await;
    for version in [
        ProtocolVersion::V_2024_11_05,
        ProtocolVersion::V_2025_11_25,
        ProtocolVersion::V_2026_07_28,
    ] {
        let client = http_client(&server.url("/mcp"), version.clone()).await;
        assert_eq!(client.peer_info().unwrap().protocol_version, version);
        assert_eq!(client.list_all_tools().await.unwrap().len(), 8);
        let sent = send(
            &client,
            "http",
            "alice",
            &format!("via {}", version.as_str()),
        )
        .await;
        assert_eq!(text(&sent), "Sent to #http as alice");
        client.cancel().await.unwrap();
    }
    let client = http_client(&server.url("/mcp"), ProtocolVersion::V_2025_06_18).await;
    let read = call(&client, "read_messages", json!({"channel": "http"})).await;
    assert_eq!(
        texts(&read),
        ["via 2026-07-28", "via 2025-11-25", "via 2024-11-05"]
    );
}

#[tokio::test]
async fn agents_on_streamable_http_and_legacy_sse_talk_to_each_other() {
    let server = Server::start(&["--ephemeral"]).await;
    let http = http_client(&server.url("/mcp"), ProtocolVersion::V_2025_11_25).await;
    let mut sse = SseClient::open(&server.url("")).await;
    let init = sse.initialize().await;
    assert_eq!(init["result"]["protocolVersion"], "2024-11-05");

    // The SSE agent waits; the HTTP agent speaks; the SSE agent hears it.
    let waiting = tokio::spawn(async move {
        let reply = sse
            .call(
                "wait_for_messages",
                json!({"channel": "pair", "timeout_s": 20}),
            )
            .await;
        (sse, reply)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    send(&http, "pair", "alice", "hello from http").await;
    let (mut sse, heard) = waiting.await.unwrap();
    assert!(
        heard["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .ends_with("<alice> hello from http"),
        "{heard}"
    );

    let reply = sse
        .call(
            "send_message",
            json!({"channel": "pair", "text": "hello from sse", "sender": "bob"}),
        )
        .await;
    assert_eq!(
        reply["result"]["content"][0]["text"],
        "Sent to #pair as bob"
    );
    let read = call(&http, "read_messages", json!({"channel": "pair"})).await;
    assert_eq!(texts(&read), ["hello from sse", "hello from http"]);
    let members = call(&http, "get_members", json!({"channel": "pair"})).await;
    assert_eq!(text(&members), "- alice\n- bob");

    // Who is reading: each stateless HTTP request names its nick; the SSE
    // session took its nick from its first send.
    let inbox = call(&http, "read_messages", json!({})).await;
    assert!(is_error(&inbox));
    assert!(
        text(&inbox).ends_with(
            "pass nick (your chat nick) with every call (each HTTP request stands alone)"
        ),
        "{}",
        text(&inbox)
    );
    assert_eq!(error_facts(&inbox)["invalid_argument"], "nick");
    let inbox = sse.call("read_messages", json!({})).await;
    assert_eq!(inbox["result"]["isError"], false, "{inbox}");
}

#[tokio::test]
async fn legacy_sse_refuses_unknown_sessions_and_malformed_bodies() {
    let server = Server::start(&["--ephemeral"]).await;
    let http = reqwest::Client::new();
    let unknown = http
        .post(server.url("/messages/?session_id=0123456789abcdef"))
        .header("content-type", "application/json")
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), 404);
    assert!(unknown.text().await.unwrap().contains("unknown session_id"));
    let missing = http
        .post(server.url("/messages/"))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 400);

    let mut sse = SseClient::open(&server.url("")).await;
    assert_eq!(sse.post("{not json".into()).await, 400);
    assert_eq!(sse.post(r#"{"jsonrpc":"2.0","id":5}"#.into()).await, 400);
    // The session survives bad input.
    let init = sse.initialize().await;
    assert_eq!(init["result"]["serverInfo"]["name"], "switchboard");
}

#[tokio::test]
async fn malformed_json_rpc_over_http_is_a_400_with_a_parse_error() {
    let server = Server::start(&["--ephemeral"]).await;
    let response = post_json(&reqwest::Client::new(), &server.url("/mcp"))
        .body("{this is not json")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let body = response.text().await.unwrap();
    assert!(body.contains("-32700"), "{body}");
}

#[tokio::test]
async fn foreign_host_or_origin_is_forbidden_on_every_route() {
    let server = Server::start(&["--ephemeral"]).await;
    let http = reqwest::Client::new();
    for path in ["/mcp", "/sse", "/messages/?session_id=x"] {
        let foreign_host = http
            .post(server.url(path))
            .header("host", "evil.example")
            .header("content-type", "application/json")
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_eq!(foreign_host.status(), 403, "{path}");
        let foreign_origin = http
            .post(server.url(path))
            .header("origin", "https://evil.example")
            .header("content-type", "application/json")
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_eq!(foreign_origin.status(), 403, "{path}");
    }
    let local_origin = http
        .post(server.url("/mcp"))
        .header("origin", "http://localhost:6274")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"0"}}}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(local_origin.status(), 200);
}

#[tokio::test]
async fn non_loopback_bind_needs_a_token_and_then_enforces_it() {
    let refused = command(&["--ephemeral", "--http", "0.0.0.0:0"])
        .output()
        .await
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("http.listen") && stderr.contains("SWITCHBOARD_HTTP_TOKEN"),
        "{stderr}"
    );

    let server = Server::start_with(
        &["--ephemeral", "--http", "0.0.0.0:0"],
        &[("SWITCHBOARD_HTTP_TOKEN", "s3cret-s3cret-s3cret")],
    )
    .await;
    let url = format!("http://127.0.0.1:{}/mcp", server.addr.port());
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"0"}}}"#;
    let post = |auth: Option<&'static str>| {
        let mut request = post_json(&reqwest::Client::new(), &url).body(body);
        if let Some(auth) = auth {
            request = request.header("authorization", auth);
        }
        request.send()
    };
    assert_eq!(post(None).await.unwrap().status(), 401);
    assert_eq!(post(Some("Bearer wrong")).await.unwrap().status(), 401);
    assert_eq!(
        post(Some("Bearer s3cret-s3cret-s3cret"))
            .await
            .unwrap()
            .status(),
        200
    );
    let sse = reqwest::Client::new()
        .get(format!("http://127.0.0.1:{}/sse", server.addr.port()))
        .send()
        .await
        .unwrap();
    assert_eq!(sse.status(), 401);
}

#[tokio::test]
async fn insecure_no_auth_allows_a_tokenless_non_loopback_bind() {
    let server = Server::start(&["--ephemeral", "--http", "0.0.0.0:0", "--insecure-no-auth"]).await;
    let client = http_client(
        &format!("http://127.0.0.1:{}/mcp", server.addr.port()),
        ProtocolVersion::V_2025_11_25,
    )
    .await;
    assert_eq!(client.list_all_tools().await.unwrap().len(), 8);
}

/// A `serve --http` with `[http]` settings from `toml`.
async fn server_with_http_settings(dir: &std::path::Path, toml: &str) -> Server {
    let config = dir.join("http.toml");
    std::fs::write(&config, format!("[http]\n{toml}")).unwrap();
    Server::start(&["--ephemeral", "--config", config.to_str().unwrap()]).await
}

#[tokio::test]
async fn legacy_sse_sessions_beyond_the_cap_get_503_and_open_ones_keep_working() {
    let dir = tempfile::tempdir().unwrap();
    let server = server_with_http_settings(dir.path(), "max_sse_sessions = 2\n").await;
    let mut first = SseClient::open(&server.url("")).await;
    first.initialize().await;
    let second = SseClient::open(&server.url("")).await;
    let refused = reqwest::Client::new()
        .get(server.url("/sse"))
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 503);
    assert!(refused.headers().contains_key("retry-after"));
    let body = refused.text().await.unwrap();
    assert!(body.contains("http.max_sse_sessions"), "{body}");
    // The sessions already open are served as before.
    let reply = first
        .call(
            "send_message",
            json!({"channel": "cap", "text": "still here", "sender": "alice"}),
        )
        .await;
    assert_eq!(
        reply["result"]["content"][0]["text"],
        "Sent to #cap as alice"
    );
    drop(second);
}

#[tokio::test]
async fn streamable_http_requests_beyond_the_cap_get_503_until_one_finishes() {
    let dir = tempfile::tempdir().unwrap();
    let server = server_with_http_settings(dir.path(), "max_streams = 2\n").await;
    let post = |body: String| {
        post_json(&reqwest::Client::new(), &server.url("/mcp"))
            .header("mcp-protocol-version", "2025-06-18")
            .body(body)
            .send()
    };
    let wait = |id: u32| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"wait_for_messages","arguments":{{"channel":"quiet","timeout_s":2}}}}}}"#
        )
    };
    let list = r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"list_channels","arguments":{}}}"#;
    let create = r#"{"jsonrpc":"2.0","id":0,"method":"tools/call","params":{"name":"create_channel","arguments":{"name":"quiet"}}}"#;
    assert_eq!(post(create.to_owned()).await.unwrap().status(), 200);
    let waiting = [tokio::spawn(post(wait(1))), tokio::spawn(post(wait(2)))];
    tokio::time::sleep(Duration::from_millis(500)).await;
    let refused = post(list.to_owned()).await.unwrap();
    assert_eq!(refused.status(), 503);
    let body = refused.text().await.unwrap();
    assert!(body.contains("http.max_streams"), "{body}");
    for waited in waiting {
        let response = waited.await.unwrap().unwrap();
        assert_eq!(response.status(), 200);
        let reply: serde_json::Value = response.json().await.unwrap();
        assert_eq!(
            reply["result"]["structuredContent"]["timed_out"], true,
            "{reply}"
        );
    }
    let served = post(list.to_owned()).await.unwrap();
    assert_eq!(served.status(), 200);
}

/// Open pages' live streams take places from `http.max_streams` too: a
/// flood of them cannot grow the daemon without bound.
#[tokio::test]
async fn web_streams_beyond_the_cap_get_503_until_a_page_closes() {
    let dir = tempfile::tempdir().unwrap();
    let server = server_with_http_settings(dir.path(), "max_streams = 2\n").await;
    let http = reqwest::Client::new();
    let open = || http.get(server.url("/api/stream")).send();
    let first = open().await.unwrap();
    let second = open().await.unwrap();
    assert_eq!(first.status(), 200);
    assert_eq!(second.status(), 200);
    let refused = open().await.unwrap();
    assert_eq!(refused.status(), 503);
    assert!(refused.headers().contains_key("retry-after"));
    assert!(
        refused.text().await.unwrap().contains("http.max_streams"),
        "the refusal names the key"
    );
    let mcp = post_json(&http, &server.url("/mcp"))
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(mcp.status(), 503, "the places are shared with /mcp");
    drop(first);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let again = open().await.unwrap();
        if again.status() == 200 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "a closed page's place was not given back"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(second);
}

#[tokio::test]
async fn an_idle_legacy_sse_session_expires_and_its_id_then_answers_404() {
    let dir = tempfile::tempdir().unwrap();
    let server = server_with_http_settings(dir.path(), "sse_idle_timeout_s = 1\n").await;
    let mut busy = SseClient::open(&server.url("")).await;
    busy.initialize().await;
    let mut idle = SseClient::open(&server.url("")).await;
    idle.initialize().await;
    // A session that keeps talking outlives the timeout several times over.
    let started = std::time::Instant::now();
    while started.elapsed() < Duration::from_millis(2500) {
        let pong = busy.request("ping", json!({})).await;
        assert_eq!(pong["result"], json!({}), "{pong}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // The quiet one has had its stream ended, and its id is gone.
    assert!(
        idle.ends_within(Duration::from_secs(3)).await,
        "the idle stream stayed open"
    );
    let gone = post_json(&reqwest::Client::new(), &idle.endpoint)
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(gone.status(), 404);
    assert!(gone.text().await.unwrap().contains("unknown session_id"));
    let pong = busy.request("ping", json!({})).await;
    assert_eq!(pong["result"], json!({}));
}

/// Reads what the server sends on `stream` until it closes the connection,
/// bounded by `within`; `None` if it is still open then.
async fn read_until_closed(
    stream: &mut (impl tokio::io::AsyncRead + Unpin),
    within: Duration,
) -> Option<String> {
    use tokio::io::AsyncReadExt;
    let mut received = Vec::new();
    let read = tokio::time::timeout(within, stream.read_to_end(&mut received)).await;
    read.ok()
        .map(|_| String::from_utf8_lossy(&received).into_owned())
}

#[tokio::test]
async fn stalled_requests_are_cut_off_without_holding_the_server() {
    use tokio::io::AsyncWriteExt;
    let server = Server::start(&["--ephemeral"]).await;
    let host = format!("Host: {}\r\n", server.addr);
    let connect = || tokio::net::TcpStream::connect(server.addr);

    // A client that waits for 100 Continue before a body over the limit is
    // told 413 at once, before sending any of it.
    let mut expecting = connect().await.unwrap();
    expecting
        .write_all(
            format!("POST /mcp HTTP/1.1\r\n{host}Content-Type: application/json\r\nContent-Length: 1000000000\r\nExpect: 100-continue\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
    let mut head = [0u8; 12];
    tokio::time::timeout(
        Duration::from_secs(5),
        tokio::io::AsyncReadExt::read_exact(&mut expecting, &mut head),
    )
    .await
    .expect("no answer to an oversized body announced with Expect")
    .unwrap();
    assert_eq!(&head, b"HTTP/1.1 413");

    // Half a request's headers, and a body that stops part-way.
    let mut half_head = connect().await.unwrap();
    half_head
        .write_all(format!("POST /mcp HTTP/1.1\r\n{host}Content-Ty").as_bytes())
        .await
        .unwrap();
    let mut half_body = connect().await.unwrap();
    half_body
        .write_all(
            format!("POST /mcp HTTP/1.1\r\n{host}Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: 100\r\n\r\n{{\"jsonrpc\"").as_bytes(),
        )
        .await
        .unwrap();

    // A body that trickles in, a byte every 10 seconds: never idle for
    // long, but never done either.
    let (mut trickle_reply, mut trickle) = connect().await.unwrap().into_split();
    trickle
        .write_all(
            format!("POST /mcp HTTP/1.1\r\n{host}Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: 100\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
    let dripping = tokio::spawn(async move {
        for _ in 0..9 {
            if trickle.write_all(b" ").await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_secs(10)).await;
        }
    });

    // Meanwhile the server answers everyone else.
    let client = http_client(&server.url("/mcp"), ProtocolVersion::V_2025_06_18).await;
    let listed = call(&client, "list_channels", json!({})).await;
    assert!(!is_error(&listed), "{}", text(&listed));

    // Both stalled connections are closed (the body's with a 400) within
    // the documented 30 seconds, and a bit.
    let (head_reply, body_reply) = tokio::join!(
        read_until_closed(&mut half_head, Duration::from_secs(45)),
        read_until_closed(&mut half_body, Duration::from_secs(45)),
    );
    head_reply.expect("a connection with half its headers was kept open");
    let body_reply = body_reply.expect("a connection with half its body was kept open");
    assert!(body_reply.starts_with("HTTP/1.1 400"), "{body_reply}");
    assert!(
        body_reply.contains("cannot read the request body"),
        "{body_reply}"
    );
    // The trickle is cut off at the documented 60 seconds for a whole body.
    let trickle_reply = read_until_closed(&mut trickle_reply, Duration::from_secs(40))
        .await
        .expect("a body trickling in was let take longer than 60 s");
    assert!(trickle_reply.starts_with("HTTP/1.1 400"), "{trickle_reply}");
    assert!(
        trickle_reply.contains("took longer than 60 s"),
        "{trickle_reply}"
    );
    dripping.abort();
}

/// A legacy SSE client that POSTs and never reads its stream: past 64
/// replies waiting for it, its requests get 503 (the daemon would otherwise
/// hold every reply), and when it leaves nothing panics.
#[tokio::test]
async fn an_sse_session_whose_stream_is_not_read_is_refused_more_requests() {
    let server = Server::start(&["--ephemeral"]).await;
    let session = UnreadSession::open(&server).await;
    let mut refused = None;
    for id in 1..=200 {
        let response = session.read_big(id).await;
        if response.status() == 503 {
            refused = Some((id, response.text().await.unwrap()));
            break;
        }
        assert_eq!(response.status(), 202);
    }
    let (id, body) = refused.expect("200 requests accepted with nobody reading their replies");
    // 64 wait; a few more left already, into the sockets' buffers.
    assert!(id > 64 && id < 150, "refused at request {id}");
    assert!(body.contains("read the stream"), "{body}");
    drop(session);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let pong = post_json(&reqwest::Client::new(), &server.url("/mcp"))
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(pong.status(), 200);
    assert!(!server.log().contains("panicked"), "{}", server.log());
}

/// A legacy SSE session, initialized, whose stream is read as far as its
/// endpoint event and no further; `#big` holds 50 messages of 8,000 bytes
/// for it to ask for (`read_big`: about 400 KB a reply).
struct UnreadSession {
    _stream: tokio::net::TcpStream,
    endpoint: String,
    http: reqwest::Client,
}

impl UnreadSession {
    async fn open(server: &Server) -> Self {
        let writer = http_client(&server.url("/mcp"), ProtocolVersion::V_2025_06_18).await;
        let big = "x".repeat(8000);
        for _ in 0..50 {
            send(&writer, "#big", "alice", &big).await;
        }
        let (stream, endpoint) = unread_sse_stream(server).await;
        let session = Self {
            _stream: stream,
            endpoint,
            http: reqwest::Client::new(),
        };
        let init = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2024-11-05","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#;
        assert_eq!(session.post(init.to_owned()).await.status(), 202);
        session
    }

    async fn post(&self, body: String) -> reqwest::Response {
        post_json(&self.http, &self.endpoint)
            .body(body)
            .send()
            .await
            .unwrap()
    }

    async fn read_big(&self, id: u32) -> reqwest::Response {
        self.post(format!(
            r##"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"read_messages","arguments":{{"channel":"#big","limit":50}}}}}}"##
        ))
        .await
    }
}

/// A raw `GET /sse` read as far as its endpoint event and no further: the
/// stream's connection and the session's POST URL.
async fn unread_sse_stream(server: &Server) -> (tokio::net::TcpStream, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    stream
        .write_all(
            format!(
                "GET /sse HTTP/1.1\r\nHost: {}\r\nAccept: text/event-stream\r\n\r\n",
                server.addr
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    let mut head = Vec::new();
    loop {
        let mut chunk = [0u8; 1024];
        let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut chunk))
            .await
            .expect("no endpoint event on GET /sse")
            .unwrap();
        assert!(n > 0, "GET /sse closed before its endpoint event");
        head.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&head);
        if let Some(at) = text.find("/messages/?session_id=") {
            let id: String = text[at..]
                .chars()
                .take_while(|c| !c.is_whitespace())
                .collect();
            return (stream, server.url(&id));
        }
    }
}

/// A client that stops reading does not keep its place: once its stream
/// has taken nothing for `http.write_timeout_s`, the connection is closed,
/// the session ends, and the one place `max_sse_sessions = 1` allows is
/// free again.
#[tokio::test]
async fn a_client_that_stops_reading_is_disconnected_after_the_write_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let server =
        server_with_http_settings(dir.path(), "max_sse_sessions = 1\nwrite_timeout_s = 2\n").await;
    let session = UnreadSession::open(&server).await;
    // About 400 KB a reply: 30 of them fill any socket buffers.
    for id in 1..=30 {
        assert_eq!(session.read_big(id).await.status(), 202);
    }
    let open_sse = || {
        reqwest::Client::new()
            .get(server.url("/sse"))
            .header("accept", "text/event-stream")
            .send()
    };
    // The stalled session still holds the only place...
    assert_eq!(open_sse().await.unwrap().status(), 503);
    // ...until the write timeout closes its connection.
    let started = std::time::Instant::now();
    let reopened = loop {
        let response = open_sse().await.unwrap();
        if response.status() == 200 {
            break response;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "a stream nobody read still held its place after 20 s"
        );
        drop(response);
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    drop(reopened);
    let ping = r#"{"jsonrpc":"2.0","id":99,"method":"ping"}"#;
    assert_eq!(session.post(ping.to_owned()).await.status(), 404);
    server.wait_for_log("http.write_timeout_s").await;
    assert!(!server.log().contains("panicked"), "{}", server.log());
}
