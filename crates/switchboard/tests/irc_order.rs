//! Following a channel on the IRC backend across a restart of switchboard,
//! against a real InspIRCd. The lines InspIRCd replays when the observer
//! rejoins carry whole-second times, so a line said while switchboard was
//! away can be stored with a time before the last line it recorded live. A
//! reader following by position (`since` = a message's `seq`) still gets
//! every later line once, in the order switchboard recorded them. Bad
//! `since` values are clear tool errors that change nothing.

mod common;

use std::{path::Path, time::Duration};

use common::*;
use rmcp::model::{CallToolResult, ProtocolVersion};
use serde_json::{Value, json};
use switchboard_testkit::{Human, IrcServer, ServerKind, ServerOptions};

/// `switchboard serve` on the IRC backend, over HTTP, keeping its history
/// in `dir`; and an MCP client of it.
async fn daemon(server: &IrcServer, dir: &Path) -> (Server, Client) {
    let config = dir.join("switchboard.toml");
    std::fs::write(&config, server.switchboard_config("send_timeout_s = 20\n")).unwrap();
    let data = dir.join("data");
    let args = [
        "--config",
        config.to_str().unwrap(),
        "--data-dir",
        data.to_str().unwrap(),
    ];
    let running = Server::start_with(&args, &[("SWITCHBOARD_LOG", "debug,rmcp=warn")]).await;
    let client = http_client(&running.url("/mcp"), ProtocolVersion::V_2025_11_25).await;
    (running, client)
}

/// A result's messages (structured), newest first.
fn messages(result: &CallToolResult) -> Vec<Value> {
    result
        .structured_content
        .as_ref()
        .expect("structuredContent")["messages"]
        .as_array()
        .expect("messages array")
        .clone()
}

/// Reads `channel` until `count` messages are stored; returns them.
async fn read_until(client: &Client, running: &Server, channel: &str, count: usize) -> Vec<Value> {
    let mut found = Vec::new();
    for _ in 0..200 {
        let read = call(client, "read_messages", json!({"channel": channel})).await;
        found = messages(&read);
        if found.len() >= count {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!(
        "{channel} has {found:?}, not {count} messages\n--- switchboard log ---\n{}",
        running.log()
    );
}

/// Sleeps until just after the next whole second.
async fn sleep_into_next_second() {
    let into = chrono::Utc::now().timestamp_subsec_millis();
    tokio::time::sleep(Duration::from_millis(u64::from(1_020 - into.min(1_000)))).await;
}

/// dave's channel list, with his unread counts.
async fn unread(client: &Client) -> String {
    text(&call(client, "list_channels", json!({"nick": "dave"})).await)
}

fn text_of(message: &Value) -> &str {
    message["text"].as_str().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_gets_every_line_once_in_recorded_order_across_a_restart() {
    let server = IrcServer::start(ServerKind::InspIRCd, ServerOptions::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let human = Human::connect(&server, "carol").await;
    let (mut running, mut client) = daemon(&server, dir.path()).await;
    // The times collide only when what carol says while switchboard is away
    // falls in the second of its last live line: a new channel each try.
    for attempt in 1..=5 {
        let channel = format!("#log{attempt}");
        human.join(&channel).await;
        let created = call(&client, "create_channel", json!({"name": channel})).await;
        assert!(!is_error(&created), "{}", text(&created));

        sleep_into_next_second().await;
        for i in 1..=3 {
            human.privmsg(&channel, &format!("live {i}")).await;
        }
        let live = read_until(&client, &running, &channel, 3).await;
        // The agent saw up to "live 3"; switchboard is gone at once, carol goes on.
        let seen = live[0].clone();
        assert_eq!(text_of(&seen), "live 3");
        running.signal(libc::SIGKILL);
        running.exit(Duration::from_secs(10)).await;
        for i in 1..=3 {
            human.privmsg(&channel, &format!("away {i}")).await;
        }

        // Back: the observer rejoins and InspIRCd replays the channel; the
        // lines recorded live are not stored twice.
        (running, client) = daemon(&server, dir.path()).await;
        let all = read_until(&client, &running, &channel, 6).await;
        assert_eq!(
            all.iter().map(text_of).collect::<Vec<_>>(),
            ["away 3", "away 2", "away 1", "live 3", "live 2", "live 1"],
            "newest first, in the order recorded\n{}",
            running.log()
        );
        let time = |m: &Value| m["time"].as_str().unwrap().to_owned();
        if time(&all[2]) >= time(&seen) {
            eprintln!(
                "attempt {attempt}: the replayed lines fell in a later second than the live ones; again"
            );
            continue;
        }
        // Shown with the server's time (whole seconds, to the millisecond).
        assert_eq!(&time(&all[2])[19..23], ".000", "{}", time(&all[2]));

        // Following by position: every later line, once, in recorded order.
        let seq = seen["seq"].as_i64().unwrap();
        let after = call(
            &client,
            "read_messages",
            json!({"channel": channel, "since": seq}),
        )
        .await;
        assert_eq!(texts(&after), ["away 3", "away 2", "away 1"]);
        assert!(
            text(&after).ends_with(&format!("(up to seq {})", seq + 3)),
            "{}",
            text(&after)
        );
        let waited = call(
            &client,
            "wait_for_messages",
            json!({"channel": channel, "since": seq.to_string(), "timeout_s": 5}),
        )
        .await;
        assert_eq!(texts(&waited), ["away 3", "away 2", "away 1"]);
        // Following by time is what skipped them: they carry older times.
        let by_time = call(
            &client,
            "read_messages",
            json!({"channel": channel, "since": time(&seen)}),
        )
        .await;
        assert_eq!(texts(&by_time), Vec::<String>::new());

        // And on, live, from the newest position.
        let waiting = {
            let peer = client.peer().clone();
            let args = json!({"channel": channel, "since": seq + 3, "timeout_s": 20});
            tokio::spawn(async move {
                peer.call_tool(
                    rmcp::model::CallToolRequestParams::new("wait_for_messages")
                        .with_arguments(args.as_object().cloned().unwrap()),
                )
                .await
                .unwrap()
            })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        human.privmsg(&channel, "back").await;
        let woke = waiting.await.unwrap();
        assert_eq!(texts(&woke), ["back"]);
        assert_eq!(messages(&woke)[0]["seq"], seq + 4);
        return;
    }
    panic!("the replayed lines never fell in the second of the last live line");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_since_values_are_clear_errors_that_change_nothing() {
    let server = IrcServer::start(ServerKind::InspIRCd, ServerOptions::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let human = Human::connect(&server, "carol").await;
    human.join("#bad").await;
    let (running, client) = daemon(&server, dir.path()).await;
    let created = call(&client, "create_channel", json!({"name": "#bad"})).await;
    assert!(!is_error(&created), "{}", text(&created));
    // dave reads the empty channel (so is in it); carol then says two lines.
    call(
        &client,
        "read_messages",
        json!({"channel": "#bad", "nick": "dave"}),
    )
    .await;
    human.privmsg("#bad", "one").await;
    human.privmsg("#bad", "two").await;
    let stored = read_until(&client, &running, "#bad", 2).await;
    let before = unread(&client).await;
    assert!(
        before.contains("#bad (") && before.contains("2 unread"),
        "{before}"
    );

    for (since, says) in [
        (json!("yesterday"), "ISO 8601"),
        (json!(-1), "0 or more"),
        (json!("-1"), "0 or more"),
        (
            json!(1_000_000_000_000_i64),
            "after #bad's newest message (seq 2)",
        ),
        (json!("9999-01-01T00:00:00Z"), "in the future"),
    ] {
        for tool in ["read_messages", "wait_for_messages"] {
            let mut args = json!({"channel": "#bad", "since": since, "nick": "dave"});
            if tool == "wait_for_messages" {
                args["timeout_s"] = json!(1);
            }
            let result = call(&client, tool, args).await;
            assert!(is_error(&result), "{tool} since {since}: {}", text(&result));
            assert!(
                text(&result).contains(says),
                "{tool} since {since}: {}",
                text(&result)
            );
        }
    }
    assert_eq!(
        unread(&client).await,
        before,
        "a refused read moved dave's cursor"
    );
    assert_eq!(read_until(&client, &running, "#bad", 2).await, stored);
}
