//! `switchboard serve --stdio` driven by rmcp's client over a child process,
//! and by raw bytes where a real client would never misbehave.

mod common;

use std::{process::Stdio, time::Duration};

use common::*;
use rmcp::model::ProtocolVersion;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const CHAT_TOOLS: [&str; 8] = [
    "send_message",
    "read_messages",
    "create_channel",
    "list_channels",
    "get_members",
    "wait_for_messages",
    "search_messages",
    "join_channel",
];

#[tokio::test]
async fn tool_list_is_the_chat_toolset_compact_with_schemas_and_hints() {
    let client = stdio_client(&["--ephemeral"], ProtocolVersion::V_2025_11_25).await;
    let tools = client.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, CHAT_TOOLS);
    for tool in &tools {
        assert!(
            tool.output_schema.is_some(),
            "{} has no outputSchema",
            tool.name
        );
        let read_only = tool.annotations.as_ref().unwrap().read_only_hint;
        let writes = matches!(
            tool.name.as_ref(),
            "send_message" | "create_channel" | "join_channel"
        );
        assert_eq!(read_only, Some(!writes), "{}", tool.name);
    }
    let reply = json!({"tools": tools}).to_string();
    assert!(
        reply.len() <= 8 * 1024,
        "tools/list is {} bytes",
        reply.len()
    );
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn send_then_read_uses_the_fixed_text_formats() {
    let client = stdio_client(&["--ephemeral"], ProtocolVersion::V_2025_06_18).await;
    let sent = send(&client, "agents", "alice", "hello\nworld").await;
    assert_eq!(text(&sent), "Sent to #agents as alice");
    let sc = sent.structured_content.unwrap();
    assert_eq!(
        (sc["channel"].as_str(), sc["lines"].as_u64()),
        (Some("#agents"), Some(2))
    );
    send(&client, "#agents", "bob", "hi alice").await;

    let read = call(&client, "read_messages", json!({"channel": "agents"})).await;
    let lines: Vec<String> = text(&read).lines().map(String::from).collect();
    assert_eq!(lines.len(), 3);
    for (line, (nick, body)) in
        lines
            .iter()
            .zip([("bob", "hi alice"), ("alice", "world"), ("alice", "hello")])
    {
        let (stamp, rest) = line.split_at(10);
        assert!(
            stamp.starts_with('[') && stamp.ends_with(']') && stamp.as_bytes()[3] == b':',
            "{line}"
        );
        assert_eq!(rest, format!(" <{nick}> {body}"));
    }
    assert_eq!(texts(&read), ["hi alice", "world", "hello"]);

    let limited = call(
        &client,
        "read_messages",
        json!({"channel": "agents", "limit": 1}),
    )
    .await;
    assert_eq!(texts(&limited), ["hi alice"]);
    let since = read.structured_content.unwrap()["messages"][1]["time"]
        .as_str()
        .unwrap()
        .to_owned();
    let newer = call(
        &client,
        "read_messages",
        json!({"channel": "agents", "since": since}),
    )
    .await;
    assert_eq!(texts(&newer), ["hi alice"]);

    let channels = call(&client, "list_channels", json!({})).await;
    // alice sent first: this session is alice, who has read everything.
    assert_eq!(text(&channels), "- #agents (2 members, 0 unread, joined)");
    let members = call(&client, "get_members", json!({"channel": "#agents"})).await;
    assert_eq!(text(&members), "- alice\n- bob");
    let created = call(&client, "create_channel", json!({"name": "ops"})).await;
    assert_eq!(text(&created), "Created #ops");
    let again = call(&client, "create_channel", json!({"name": "#OPS"})).await;
    assert!(!is_error(&again) && text(&again).contains("already exists"));

    let found = call(&client, "search_messages", json!({"query": "ALICE"})).await;
    assert_eq!(texts(&found), ["hi alice"]);
    assert!(
        text(&found).contains("#agents <bob> hi alice"),
        "{}",
        text(&found)
    );
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn wait_for_messages_returns_a_message_sent_while_waiting() {
    let client = stdio_client(&["--ephemeral"], ProtocolVersion::V_2025_11_25).await;
    let waiter = {
        let peer = client.peer().clone();
        tokio::spawn(async move {
            let args = json!({"channel": "room", "timeout_s": 20})
                .as_object()
                .cloned()
                .unwrap();
            peer.call_tool(
                rmcp::model::CallToolRequestParams::new("wait_for_messages").with_arguments(args),
            )
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = std::time::Instant::now();
    send(&client, "room", "carol", "ping").await;
    let woke = waiter.await.unwrap().unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "waited for the timeout instead of the message"
    );
    assert_eq!(texts(&woke), ["ping"]);
    assert!(text(&woke).ends_with("<carol> ping"));

    let quiet = call(
        &client,
        "wait_for_messages",
        json!({"channel": "room", "timeout_s": 0.2}),
    )
    .await;
    assert!(!is_error(&quiet));
    assert!(
        text(&quiet).starts_with("No new messages in #room"),
        "{}",
        text(&quiet)
    );
    assert_eq!(quiet.structured_content.unwrap()["timed_out"], true);
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn waiting_on_a_channel_follows_it_even_when_nothing_comes() {
    let client = stdio_client(
        &["--ephemeral", "--nick", "bob"],
        ProtocolVersion::V_2025_11_25,
    )
    .await;
    send(&client, "quiet", "alice", "before the wait").await;
    let waited = call(
        &client,
        "wait_for_messages",
        json!({"channel": "quiet", "timeout_s": 0.1}),
    )
    .await;
    assert!(text(&waited).starts_with("No new messages in #quiet"));
    let channels = call(&client, "list_channels", json!({})).await;
    assert!(
        text(&channels).ends_with("0 unread, joined)"),
        "{}",
        text(&channels)
    );
    send(&client, "quiet", "alice", "after the wait").await;
    let inbox = call(&client, "read_messages", json!({})).await;
    assert_eq!(texts(&inbox), ["after the wait"]);
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn bad_arguments_get_clear_tool_errors_and_change_nothing() {
    let client = stdio_client(&["--ephemeral"], ProtocolVersion::V_2025_11_25).await;
    send(&client, "ok", "alice", "baseline").await;
    let long_channel = "c".repeat(64);
    let huge = "x".repeat(10 * 1024 * 1024);
    let cases: Vec<(&str, Value, &str, &str)> = vec![
        (
            "send_message",
            json!({"channel": "ok", "sender": "a"}),
            "missing field `text`",
            "text",
        ),
        (
            "send_message",
            json!({"channel": 5, "text": "t", "sender": "a"}),
            "invalid type: integer `5`, expected a string (at /channel)",
            "channel",
        ),
        (
            "send_message",
            json!({"channel": "ok", "text": "t", "sender": "a", "chanel": "x"}),
            "unknown field `chanel`",
            "chanel",
        ),
        (
            "send_message",
            json!({"channel": "a b", "text": "t", "sender": "a"}),
            "a space",
            "channel",
        ),
        (
            "send_message",
            json!({"channel": "a,b", "text": "t", "sender": "a"}),
            "a comma",
            "channel",
        ),
        (
            "send_message",
            json!({"channel": "a\u{7}b", "text": "t", "sender": "a"}),
            "BEL",
            "channel",
        ),
        (
            "send_message",
            json!({"channel": "a\rb", "text": "t", "sender": "a"}),
            "carriage return",
            "channel",
        ),
        (
            "send_message",
            json!({"channel": "a\nb", "text": "t", "sender": "a"}),
            "line feed",
            "channel",
        ),
        (
            "send_message",
            json!({"channel": "a\u{0}b", "text": "t", "sender": "a"}),
            "NUL",
            "channel",
        ),
        (
            "send_message",
            json!({"channel": long_channel, "text": "t", "sender": "a"}),
            "at most 64",
            "channel",
        ),
        (
            "send_message",
            json!({"channel": "ok", "text": "t", "sender": ""}),
            "nick is empty",
            "sender",
        ),
        (
            "send_message",
            json!({"channel": "ok", "text": "t", "sender": "n".repeat(32)}),
            "at most 31",
            "sender",
        ),
        (
            "send_message",
            json!({"channel": "ok", "text": "t", "sender": "switchboard"}),
            "switchboard's own notices",
            "sender",
        ),
        (
            "send_message",
            json!({"channel": "ok", "text": "t", "sender": "al ice"}),
            "a space",
            "sender",
        ),
        (
            "send_message",
            json!({"channel": "ok", "text": " \n ", "sender": "a"}),
            "text is empty",
            "text",
        ),
        (
            "send_message",
            json!({"channel": "ok", "text": huge, "sender": "a"}),
            "the limit is 32768 bytes",
            "text",
        ),
        (
            "read_messages",
            json!({"channel": "ok", "since": "yesterday"}),
            "ISO 8601",
            "since",
        ),
        (
            "read_messages",
            json!({"channel": "ok", "limit": 0}),
            "between 1 and 500",
            "limit",
        ),
        (
            "read_messages",
            json!({"channel": "ok", "limit": -5}),
            "between 1 and 500",
            "limit",
        ),
        (
            "read_messages",
            json!({"channel": "ok", "limit": 100000}),
            "between 1 and 500",
            "limit",
        ),
        (
            "read_messages",
            json!({"channel": "ok", "limit": "ten"}),
            "invalid type: string \"ten\", expected an integer (at /limit)",
            "limit",
        ),
        (
            "wait_for_messages",
            json!({"channel": "ok", "timeout_s": 51}),
            "between 0 and 50",
            "timeout_s",
        ),
        (
            "wait_for_messages",
            json!({"channel": "ok", "since": "soon"}),
            "ISO 8601",
            "since",
        ),
        (
            "search_messages",
            json!({"query": "!!!"}),
            "no words",
            "query",
        ),
        (
            "search_messages",
            json!({"query": "x", "limit": 0}),
            "between 1 and 100",
            "limit",
        ),
        (
            "create_channel",
            json!({"name": "#"}),
            "channel name is empty",
            "name",
        ),
        (
            "get_members",
            json!({}),
            "missing field `channel`",
            "channel",
        ),
    ];
    for (tool, args, expected, argument) in cases {
        let shown = args.to_string().chars().take(80).collect::<String>();
        let result = call(&client, tool, args).await;
        assert!(is_error(&result), "{tool} {shown} was accepted");
        assert!(
            text(&result).contains(expected),
            "{tool} {shown}: {:?} lacks {expected:?}",
            text(&result)
        );
        // Programs tell a mistake in the call from a failure, and where.
        assert_eq!(
            error_facts(&result)["invalid_argument"],
            json!(argument),
            "{tool} {shown}"
        );
    }
    let unknown = try_call(&client, "delete_everything", json!({}))
        .await
        .unwrap_err();
    assert!(unknown.to_string().contains("unknown tool"), "{unknown}");

    // JSON Schema's integer takes 3.0.
    let read = call(
        &client,
        "read_messages",
        json!({"channel": "ok", "limit": 1.0}),
    )
    .await;
    assert!(!is_error(&read), "{}", text(&read));
    let channels = call(&client, "list_channels", json!({})).await;
    assert_eq!(text(&channels), "- #ok (1 member, 0 unread, joined)");
    let read = call(&client, "read_messages", json!({"channel": "ok"})).await;
    assert_eq!(texts(&read), ["baseline"]);
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn oldest_and_newest_protocol_revisions_are_served() {
    for version in [ProtocolVersion::V_2024_11_05, ProtocolVersion::V_2026_07_28] {
        let client = stdio_client(&["--ephemeral"], version.clone()).await;
        assert_eq!(client.peer_info().unwrap().protocol_version, version);
        let sent = send(&client, "v", "alice", "hi").await;
        assert_eq!(text(&sent), "Sent to #v as alice");
        assert!(sent.structured_content.is_some(), "{version:?}");
        assert_eq!(client.list_all_tools().await.unwrap().len(), 8);
        client.cancel().await.unwrap();
    }
}

/// Writes `lines` to a raw `serve --stdio` and returns every stdout line
/// until `expect` replies have arrived.
async fn raw_session(lines: &[&str], expect: usize) -> Vec<Value> {
    let mut child = command(&["--stdio", "--ephemeral"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for line in lines {
        stdin.write_all(line.as_bytes()).await.unwrap();
        stdin.write_all(b"\n").await.unwrap();
    }
    stdin.flush().await.unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut replies = Vec::new();
    while replies.len() < expect {
        let line = tokio::time::timeout(Duration::from_secs(10), out.next_line())
            .await
            .expect("reply in time")
            .unwrap()
            .expect("stdout open");
        replies.push(
            serde_json::from_str(&line)
                .unwrap_or_else(|_| panic!("stdout carried a non-JSON line: {line:?}")),
        );
    }
    drop(stdin);
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "exit {status:?} after stdin closed");
    replies
}

const INIT: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;

/// A request reusing the id of one still in flight is refused, and both
/// the first and the requests after it are answered.
#[tokio::test]
async fn a_request_reusing_an_id_in_flight_is_refused_and_nothing_is_lost() {
    let replies = raw_session(
        &[
            INIT,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"wait_for_messages","arguments":{"channel":"c","timeout_s":1}}}"#,
            r#"{"jsonrpc":"2.0","id":6,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":5,"method":"ping"}"#,
        ],
        4,
    )
    .await;
    let by = |id: i64, key: &str| {
        replies
            .iter()
            .filter(|r| r["id"] == id && r.get(key).is_some())
            .count()
    };
    assert_eq!((by(1, "result"), by(5, "result")), (1, 1), "{replies:?}");
    assert_eq!((by(6, "result"), by(6, "error")), (1, 1), "{replies:?}");
    let refused = replies.iter().find(|r| r.get("error").is_some()).unwrap();
    assert_eq!(refused["error"]["code"], -32600);
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("already used by a request in flight"),
        "{refused}"
    );
}

#[tokio::test]
async fn malformed_lines_get_json_rpc_errors_and_stdout_stays_pure() {
    let replies = raw_session(
        &[
            INIT,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            "this is not json",
            r#"{"jsonrpc":"2.0","id":7}"#,
            r#"{"jsonrpc":"2.0","id":8,"method":"no/such/method"}"#,
            r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"list_channels","arguments":{}}}"#,
        ],
        5,
    )
    .await;
    let by_id = |id: Value| {
        replies
            .iter()
            .find(|r| r["id"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("no reply for {id}: {replies:?}"))
    };
    assert_eq!(
        by_id(json!(1))["result"]["serverInfo"]["name"],
        "switchboard"
    );
    assert_eq!(by_id(Value::Null)["error"]["code"], -32700);
    assert_eq!(by_id(json!(7))["error"]["code"], -32600);
    assert_eq!(by_id(json!(8))["error"]["code"], -32601);
    assert_eq!(by_id(json!(9))["result"]["isError"], false);
}

/// Node-based hosts connect a server's stdin and stdout to one socket pair,
/// not pipes; a regular file works too.
#[tokio::test]
async fn stdio_over_a_socket_pair_and_from_a_file() {
    let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    let theirs = std::os::fd::OwnedFd::from(theirs);
    let mut child = command(&["--stdio", "--ephemeral"])
        .stdin(Stdio::from(theirs.try_clone().unwrap()))
        .stdout(Stdio::from(theirs))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    ours.set_nonblocking(true).unwrap();
    let ours = tokio::net::UnixStream::from_std(ours).unwrap();
    let (read, mut write) = ours.into_split();
    let mut lines = BufReader::new(read).lines();
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
    let call = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"send_message","arguments":{"channel":"a","text":"hi","sender":"bob"}}}"#;
    write
        .write_all(format!("{init}\n{call}\n").as_bytes())
        .await
        .unwrap();
    let mut replies = Vec::new();
    while replies.len() < 2 {
        let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
            .await
            .expect("a reply in time")
            .unwrap()
            .expect("a reply line");
        replies.push(serde_json::from_str::<Value>(&line).unwrap());
    }
    assert_eq!(replies[0]["result"]["protocolVersion"], "2025-06-18");
    assert_eq!(
        replies[1]["result"]["content"][0]["text"],
        "Sent to #a as bob"
    );
    drop(write);
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success());

    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    std::fs::write(&input, format!("{init}\n")).unwrap();
    let output = command(&["--stdio", "--ephemeral"])
        .stdin(std::fs::File::open(&input).unwrap())
        .stderr(Stdio::null())
        .output()
        .await
        .unwrap();
    let reply: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(reply["id"], json!(1));
}
