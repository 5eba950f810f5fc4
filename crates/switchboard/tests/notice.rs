//! Agents that notice: identities, inboxes and mentions, pushes into the
//! agent's session (`notifications/claude/channel`), and approvals from a
//! channel, through the real binaries: `serve --stdio`, the daemon with its
//! shims, rmcp's clients and a raw JSON-RPC client that records every
//! notification it gets.

mod common;

use std::{path::Path, time::Duration};

use common::*;
use rmcp::model::ProtocolVersion;
use serde_json::{Value, json};

const CHANNEL: &str = "notifications/claude/channel";
const PERMISSION: &str = "notifications/claude/channel/permission";
const PERMISSION_REQUEST: &str = "notifications/claude/channel/permission_request";

/// `serve --stdio` with HTTP on too (so a second agent can reach the same
/// process), driven by a raw client; returns it and the HTTP address.
async fn stdio_with_http(extra: &[&str]) -> (RawClient, String) {
    let mut args = vec!["--stdio", "--http", "127.0.0.1:0", "--ephemeral"];
    args.extend_from_slice(extra);
    let client = RawClient::spawn(command(&args));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(rest) = client.stderr().split("serving MCP at http://").nth(1) {
            let addr = rest.split('/').next().unwrap().to_owned();
            return (client, format!("http://{addr}/mcp"));
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no HTTP address in the log:\n{}",
            client.stderr()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn meta(note: &Value) -> &serde_json::Map<String, Value> {
    note["params"]["meta"].as_object().expect("meta object")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_session_is_pushed_mentions_from_another_agent() {
    let (bob, url) = stdio_with_http(&["--nick", "bob"]).await;
    let init = bob.initialize().await;
    assert_eq!(
        init["capabilities"]["experimental"]["claude/channel"],
        json!({})
    );
    let instructions = init["instructions"].as_str().unwrap();
    assert!(instructions.contains("You are bob"), "{instructions}");
    assert!(instructions.contains("send_message"), "{instructions}");

    let alice = http_client(&url, ProtocolVersion::V_2025_11_25).await;
    send(
        &alice,
        "#general",
        "alice",
        "@bob can you look at the diff?",
    )
    .await;
    let pushed = bob.wait_for(CHANNEL, 1, Duration::from_secs(5)).await;
    assert_eq!(pushed.len(), 1, "stderr:\n{}", bob.stderr());
    let note = &pushed[0].1;
    assert_eq!(note["params"]["content"], "@bob can you look at the diff?");
    let m = meta(note);
    assert_eq!(m["channel"], "#general");
    assert_eq!(m["sender"], "alice");
    assert_eq!(m["sender_kind"], "agent");
    assert_eq!(m["mention"], "true");
    for (key, value) in m {
        assert!(
            key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "{key}"
        );
        assert!(value.is_string(), "{key}: {value}");
    }

    // Not a mention, in a channel bob has not joined: nothing is pushed.
    send(
        &alice,
        "#general",
        "alice",
        "bobcat sighting, nobody's business",
    )
    .await;
    // bob's own message is never pushed back to bob.
    bob.call(
        "send_message",
        json!({"channel": "#general", "text": "on it, bob here"}),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(bob.notifications(CHANNEL).len(), 1);

    // Pushed is not read: the inbox still has the mention. Speaking in
    // #general joined it from just before that unread mention, so what
    // followed is unread too (bob's own line is not). A page of one says
    // more follow, and reads only that one.
    let first = bob.call("read_messages", json!({"limit": 1})).await;
    let text = result_text(&first);
    assert!(
        text.ends_with("@bob can you look at the diff?\n(more unread follow)"),
        "{text}"
    );
    assert_eq!(first["structuredContent"]["more"], true);
    let inbox = bob.call("read_messages", json!({})).await;
    let lines: Vec<String> = result_text(&inbox).lines().map(String::from).collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].starts_with("#general ["), "{lines:?}");
    assert!(
        lines[0].ends_with("] <alice> bobcat sighting, nobody's business"),
        "{lines:?}"
    );
    assert!(inbox["structuredContent"].get("more").is_none());
    let mentions = |result: &Value| -> Vec<bool> {
        result["structuredContent"]["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["mention"].as_bool().unwrap())
            .collect()
    };
    assert_eq!(
        (mentions(&first), mentions(&inbox)),
        (vec![true], vec![false])
    );
    // Read now: the inbox is empty.
    let again = bob.call("read_messages", json!({})).await;
    assert_eq!(result_text(&again), "Nothing unread for bob.");
    bob.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_sessions_sharing_a_data_dir_notice_each_others_messages() {
    // Two agents, each with its own `serve --stdio`, one history file.
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().to_str().unwrap();
    let bob = RawClient::spawn(command(&[
        "--stdio",
        "--data-dir",
        data_dir,
        "--nick",
        "bob",
    ]));
    bob.initialize().await;
    let alice = stdio_client(
        &["--data-dir", data_dir, "--nick", "alice"],
        ProtocolVersion::V_2025_11_25,
    )
    .await;

    // alice's mention in the other process is pushed into bob's session.
    send(&alice, "#dev", "alice", "bob: the build is red").await;
    let pushed = bob.wait_for(CHANNEL, 1, Duration::from_secs(5)).await;
    assert_eq!(pushed.len(), 1, "stderr:\n{}", bob.stderr());
    assert_eq!(pushed[0].1["params"]["content"], "bob: the build is red");
    let read = bob.call("read_messages", json!({})).await;
    assert!(
        result_text(&read).ends_with("] <alice> bob: the build is red"),
        "{read}"
    );

    // bob waits on his inbox; alice's next mention wakes the wait. (Its
    // push may or may not come too: a message the wait has already
    // returned, and so marked read, is not pushed.)
    let started = std::time::Instant::now();
    let (woken, ()) = tokio::join!(
        bob.call("wait_for_messages", json!({"timeout_s": 20})),
        async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            send(&alice, "#dev", "alice", "bob: still red").await;
        }
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the wait ran to its timeout: {woken}"
    );
    assert!(
        result_text(&woken).ends_with("] <alice> bob: still red"),
        "{woken}"
    );

    // alice follows #dev from its newest message; bob's answer in his
    // process wakes her wait.
    let newest = call(&alice, "read_messages", json!({"channel": "#dev"})).await;
    let seq = newest.structured_content.as_ref().unwrap()["messages"][0]["seq"].clone();
    assert!(seq.is_i64(), "{newest:?}");
    let (followed, _) = tokio::join!(
        call(
            &alice,
            "wait_for_messages",
            json!({"channel": "#dev", "since": seq, "timeout_s": 20})
        ),
        async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            bob.call("send_message", json!({"channel": "#dev", "text": "on it"}))
                .await
        }
    );
    assert_eq!(texts(&followed), ["on it"]);
    alice.cancel().await.unwrap();
    bob.close().await;
}

/// Three agents, each in its own `serve --stdio` on one data directory:
/// the joins of the others count, so a channel of three is not a direct
/// channel, and the default mode pushes each agent only its mentions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn joins_in_other_processes_sharing_a_data_dir_count() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().to_str().unwrap();
    let agent = |nick: &str| {
        RawClient::spawn(command(&[
            "--stdio",
            "--data-dir",
            data_dir,
            "--nick",
            nick,
        ]))
    };
    let [alice, bob, carol] = [agent("alice"), agent("bob"), agent("carol")];
    for a in [&alice, &bob, &carol] {
        a.initialize().await;
    }
    let made = alice
        .call("create_channel", json!({"name": "#general"}))
        .await;
    assert_eq!(made["isError"], false, "{made}");
    for a in [&alice, &bob, &carol] {
        let joined = a.call("join_channel", json!({"channel": "#general"})).await;
        assert_eq!(joined["isError"], false, "{joined}");
    }
    // Each process sees all three members.
    for a in [&alice, &bob, &carol] {
        let members = eventually(Duration::from_secs(5), "three members", || async {
            let listed = a.call("get_members", json!({"channel": "#general"})).await;
            let text = result_text(&listed);
            if ["alice", "bob", "carol"].iter().all(|n| text.contains(n)) {
                Ok(text)
            } else {
                Err(text)
            }
        })
        .await;
        assert!(!members.contains("No members"), "{members}");
    }
    alice
        .call(
            "send_message",
            json!({"channel": "#general", "text": "hello all"}),
        )
        .await;
    alice
        .call(
            "send_message",
            json!({"channel": "#general", "text": "@bob can you look?"}),
        )
        .await;
    let pushed = bob.wait_for(CHANNEL, 1, Duration::from_secs(5)).await;
    assert_eq!(pushed[0].1["params"]["content"], "@bob can you look?");
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(
        carol.notifications(CHANNEL).len(),
        0,
        "carol was pushed what was not for her: {:?}\n{}",
        carol.notifications(CHANNEL),
        carol.stderr()
    );
    assert_eq!(bob.notifications(CHANNEL).len(), 1);
    for a in [alice, bob, carol] {
        a.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_loop_guard_pauses_once_for_agents_in_two_processes_sharing_a_data_dir() {
    let (_dir, agents) = two_agents_sharing_a_data_dir("[chat.push]\nloop_messages = 6\n").await;
    let handled = answer_each_other_until_quiet(&agents, ["a1", "a2"]).await;
    // Each process sees all six turns and pauses its own pushes; the
    // channel is told once.
    assert_eq!(handled.iter().sum::<usize>(), 5, "{}", logs(&agents));
    assert_eq!(pause_notices(&agents[0]).await, 1);
    for a in agents {
        a.close().await;
    }
}

/// Joining a channel right after another process's agent spoke there
/// starts after that message, as joining does: it is not unread, and not
/// pushed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn joining_just_after_another_process_spoke_starts_after_its_message() {
    let (_dir, agents) = two_agents_sharing_a_data_dir("[chat.push]\nmode = \"all\"\n").await;
    for round in 0..5 {
        let channel = format!("#cc{round}");
        let said = agents[1]
            .call("send_message", json!({"channel": channel, "text": "seed"}))
            .await;
        assert_eq!(said["isError"], false, "{said}");
        let joined = agents[0]
            .call("join_channel", json!({"channel": channel}))
            .await;
        assert_eq!(joined["isError"], false, "{joined}");
        let inbox = agents[0].call("read_messages", json!({})).await;
        assert_eq!(
            result_text(&inbox),
            "Nothing unread for a1.",
            "round {round}"
        );
    }
    // A later message is pushed; the seeds never were.
    agents[1]
        .call(
            "send_message",
            json!({"channel": "#cc4", "text": "after the join"}),
        )
        .await;
    let pushed = agents[0]
        .wait_for(CHANNEL, 1, Duration::from_secs(10))
        .await;
    let contents: Vec<&Value> = pushed.iter().map(|p| &p.1["params"]["content"]).collect();
    assert_eq!(contents, [&json!("after the join")], "{}", logs(&agents));
    for a in agents {
        a.close().await;
    }
}

/// A message that a wait returns, and so marks read, while its push is held
/// in the coalescing window is not pushed as well: the agent sees it once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_a_wait_returned_is_not_pushed_again() {
    let runtime = runtime_dir();
    let dir = tempfile::tempdir().unwrap();
    let file = config(dir.path(), "[chat.push]\ncoalesce_ms = 3000\n");
    let socket = dir.path().join("relay.sock");
    let daemon = Daemon::start(&socket, runtime.path(), &["--config", &file]).await;
    let (pa, pb) = (
        shim(&socket, runtime.path(), "pa").await,
        shim(&socket, runtime.path(), "pb").await,
    );
    pb.call("send_message", json!({"channel": "#dm", "text": "hello"}))
        .await;
    pa.call("join_channel", json!({"channel": "#dm"})).await;
    // #dm holds pa and pb alone: pb's lines are pushed to pa.
    let one = pb
        .call("send_message", json!({"channel": "#dm", "text": "one"}))
        .await;
    let seq = one["structuredContent"]["seq"].clone();
    pa.wait_for(CHANNEL, 1, Duration::from_secs(5)).await;
    // "two" comes within the window that "one" opened, so its push waits;
    // the wait returns it first.
    pb.call("send_message", json!({"channel": "#dm", "text": "two"}))
        .await;
    let waited = pa
        .call(
            "wait_for_messages",
            json!({"channel": "#dm", "since": seq, "timeout_s": 10}),
        )
        .await;
    assert!(result_text(&waited).contains("<pb> two"), "{waited}");
    // Past the window: "two" was not pushed after all.
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let contents: Vec<Value> = pa
        .notifications(CHANNEL)
        .iter()
        .map(|p| p.1["params"]["content"].clone())
        .collect();
    assert_eq!(contents, [json!("one")], "{}", daemon.log());
    pa.close().await;
    pb.close().await;
    assert!(daemon.stop().await.success());
}

/// Agents `a1` and `a2`, each on a `serve --stdio` of its own with the
/// config `text`, sharing one data directory; initialized.
async fn two_agents_sharing_a_data_dir(text: &str) -> (tempfile::TempDir, [RawClient; 2]) {
    let dir = tempfile::tempdir().unwrap();
    let file = config(dir.path(), text);
    let data_dir = dir.path().join("data");
    let agent = |nick: &str| {
        RawClient::spawn(command(&[
            "--stdio",
            "--config",
            &file,
            "--data-dir",
            data_dir.to_str().unwrap(),
            "--nick",
            nick,
        ]))
    };
    let agents = [agent("a1"), agent("a2")];
    for a in &agents {
        a.initialize().await;
    }
    (dir, agents)
}

/// The two agents' server logs, for a failure message.
fn logs(agents: &[RawClient; 2]) -> String {
    format!("a1:\n{}\na2:\n{}", agents[0].stderr(), agents[1].stderr())
}

/// A config file in `dir` with `text`; returns its path.
fn config(dir: &Path, text: &str) -> String {
    let path = dir.join("switchboard.toml");
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_mode_pushes_joined_channels_and_coalesces_bursts() {
    let dir = tempfile::tempdir().unwrap();
    let file = config(dir.path(), "[chat.push]\nmode = \"all\"\n");
    let (bob, url) = stdio_with_http(&["--nick", "bob", "--config", &file]).await;
    bob.initialize().await;
    let alice = http_client(&url, ProtocolVersion::V_2025_11_25).await;
    send(&alice, "#ops", "alice", "deploy at noon").await;
    let joined = bob.call("join_channel", json!({"channel": "#ops"})).await;
    assert_eq!(result_text(&joined), "bob joined #ops");

    // Five lines in one burst: the first at once, the rest together.
    send(&alice, "#ops", "alice", "one\ntwo\nthree\nfour\nfive").await;
    bob.wait_for(CHANNEL, 2, Duration::from_secs(5)).await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    let pushed: Vec<Value> = bob
        .notifications(CHANNEL)
        .into_iter()
        .map(|(_, n)| n)
        .collect();
    assert_eq!(pushed.len(), 2, "{pushed:#?}");
    assert_eq!(pushed[0]["params"]["content"], "one");
    assert_eq!(
        pushed[1]["params"]["content"],
        "<alice> two\n<alice> three\n<alice> four\n<alice> five"
    );
    assert_eq!(meta(&pushed[1])["count"], "4");
    assert_eq!(meta(&pushed[1])["mention"], "false");

    // Leaving stops the pushes of that channel.
    let left = bob
        .call("join_channel", json!({"channel": "#ops", "leave": true}))
        .await;
    assert_eq!(result_text(&left), "bob left #ops");
    send(&alice, "#ops", "alice", "anyone?").await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(bob.notifications(CHANNEL).len(), 2);
    bob.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_over_the_rate_gets_a_summary() {
    let dir = tempfile::tempdir().unwrap();
    let file = config(
        dir.path(),
        "[chat.push]\nmode = \"all\"\nper_minute = 12\ncoalesce_ms = 0\n",
    );
    let (bob, url) = stdio_with_http(&["--nick", "bob", "--config", &file]).await;
    bob.initialize().await;
    bob.call("send_message", json!({"channel": "#busy", "text": "here"}))
        .await;
    let alice = http_client(&url, ProtocolVersion::V_2025_11_25).await;
    // Spaced out, so that each message is an event of its own.
    for i in 0..20 {
        send(&alice, "#busy", "alice", &format!("news {i}")).await;
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    // Twelve events use the minute's budget; the rest wait for a summary,
    // which goes out when the rate allows one more (5 s at 12 a minute).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let pushed = loop {
        let pushed = bob.notifications(CHANNEL);
        if pushed
            .last()
            .is_some_and(|(_, n)| meta(n).get("summary").is_some())
        {
            break pushed;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no summary: {pushed:#?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // At most the minute's twelve events, then the summary.
    let (summary, events) = pushed.split_last().unwrap();
    assert!(events.len() <= 12, "{pushed:#?}");
    let summary = &summary.1;
    assert_eq!(meta(summary)["summary"], "true");
    let content = summary["params"]["content"].as_str().unwrap();
    assert!(content.contains("more in #busy"), "{content}");
    let events: usize = events
        .iter()
        .map(|(_, n)| n["params"]["content"].as_str().unwrap().lines().count())
        .sum();
    let summarised: usize = meta(summary)["count"].as_str().unwrap().parse().unwrap();
    assert_eq!(events + summarised, 20, "{pushed:#?}");
    // Nothing was lost: all twenty are unread.
    let inbox = bob.call("read_messages", json!({})).await;
    assert_eq!(result_text(&inbox).lines().count(), 20);
    bob.close().await;
}

// --- the daemon and its shims ------------------------------------------------

/// `switchboard shim --socket <socket> --nick <nick>` under a raw client.
fn shim_client(socket: &Path, runtime: &Path, nick: &str) -> RawClient {
    RawClient::spawn(switchboard(
        &["shim", "--socket", socket.to_str().unwrap(), "--nick", nick],
        runtime,
    ))
}

/// [`shim_client`], initialized.
async fn shim(socket: &Path, runtime: &Path, nick: &str) -> RawClient {
    let client = shim_client(socket, runtime, nick);
    client.initialize().await;
    client
}

/// `switchboard say`: a person at a terminal.
async fn say(socket: &Path, runtime: &Path, channel: &str, nick: &str, text: &str) {
    let output = switchboard(
        &[
            "say",
            channel,
            text,
            "--as",
            nick,
            "--socket",
            socket.to_str().unwrap(),
        ],
        runtime,
    )
    .output()
    .await
    .unwrap();
    assert!(
        output.status.success(),
        "say failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The texts of a channel, oldest first, as the daemon stores them.
async fn channel_texts(client: &RawClient, channel: &str) -> Vec<String> {
    let read = client
        .call("read_messages", json!({"channel": channel, "limit": 500}))
        .await;
    let mut texts: Vec<String> = read["structuredContent"]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["text"].as_str().unwrap().to_owned())
        .collect();
    texts.reverse();
    texts
}

/// A shim started with a nick chat cannot use (it starts with a digit):
/// a send without `sender` says that the session's nick is the trouble and
/// how to fix it, not that a `sender` the agent never gave is wrong.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shim_nick_chat_refuses_is_named_as_the_sessions() {
    let runtime = runtime_dir();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("relay.sock");
    let _daemon = Daemon::start(&socket, runtime.path(), &[]).await;
    let first = shim(&socket, runtime.path(), "9lives").await;
    let sent = first
        .call("send_message", json!({"channel": "#dev", "text": "hi"}))
        .await;
    let said = result_text(&sent);
    assert_eq!(sent["isError"], true, "{said}");
    assert!(
        said.starts_with("your nick \"9lives\" cannot be used here")
            && said.contains("start with another --nick, or pass sender"),
        "{said}"
    );
    let sent = first
        .call(
            "send_message",
            json!({"channel": "#dev", "text": "hi", "sender": "lives9"}),
        )
        .await;
    assert_eq!(result_text(&sent), "Sent to #dev as lives9");

    // A second session, the daemon's list already cached: its tools did not
    // change, and nothing says they did.
    let second = shim(&socket, runtime.path(), "other").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        second
            .notifications("notifications/tools/list_changed")
            .is_empty()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shims_on_the_daemon_are_pushed_mentions_and_keep_them_unread() {
    let runtime = runtime_dir();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("relay.sock");
    let daemon = Daemon::start(&socket, runtime.path(), &[]).await;
    let alice = shim(&socket, runtime.path(), "alice").await;
    let bob = shim_client(&socket, runtime.path(), "bob");
    let init = bob.initialize().await;
    assert_eq!(
        init["capabilities"]["experimental"]["claude/channel"],
        json!({})
    );
    assert!(
        init["instructions"]
            .as_str()
            .unwrap()
            .contains("You are bob"),
        "{init}"
    );

    let sent = alice
        .call(
            "send_message",
            json!({"channel": "#dev", "text": "bob: the build is red"}),
        )
        .await;
    assert_eq!(result_text(&sent), "Sent to #dev as alice");
    let pushed = bob.wait_for(CHANNEL, 1, Duration::from_secs(5)).await;
    assert_eq!(pushed.len(), 1, "daemon log:\n{}", daemon.log());
    assert_eq!(pushed[0].1["params"]["content"], "bob: the build is red");
    assert_eq!(meta(&pushed[0].1)["sender"], "alice");
    // alice hears nothing of her own.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(alice.notifications(CHANNEL).is_empty());

    // A human mention, from a terminal.
    say(&socket, runtime.path(), "#dev", "carol", "@Bob lunch?").await;
    let pushed = bob.wait_for(CHANNEL, 2, Duration::from_secs(5)).await;
    assert_eq!(pushed.len(), 2);
    assert_eq!(meta(&pushed[1].1)["sender_kind"], "human");

    let channels = bob.call("list_channels", json!({})).await;
    assert_eq!(result_text(&channels), "- #dev (2 members, 2 mentions)");
    let inbox = bob.call("read_messages", json!({})).await;
    let lines: Vec<&str> = result_text(&inbox).leak().lines().collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines[0].ends_with("<alice> bob: the build is red"));
    assert!(lines[1].ends_with("<carol> @Bob lunch?"));
    let channels = bob.call("list_channels", json!({})).await;
    assert_eq!(result_text(&channels), "- #dev (2 members)");
    bob.close().await;
    alice.close().await;
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cursors_survive_a_daemon_restart() {
    let runtime = runtime_dir();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("relay.sock");
    let data = dir.path().join("data");
    let data_arg = data.to_str().unwrap();
    let daemon = Daemon::start(&socket, runtime.path(), &["--data-dir", data_arg]).await;
    let alice = shim(&socket, runtime.path(), "alice").await;
    let bob = shim(&socket, runtime.path(), "bob").await;
    alice
        .call(
            "send_message",
            json!({"channel": "#c", "text": "before anyone"}),
        )
        .await;
    let joined = bob.call("join_channel", json!({"channel": "c"})).await;
    assert_eq!(result_text(&joined), "bob joined #c");
    alice
        .call("send_message", json!({"channel": "#c", "text": "one\ntwo"}))
        .await;
    let channels = bob.call("list_channels", json!({})).await;
    assert_eq!(result_text(&channels), "- #c (2 members, 2 unread, joined)");
    daemon.stop().await;

    let daemon = Daemon::start(&socket, runtime.path(), &["--data-dir", data_arg]).await;
    let channels = bob.call("list_channels", json!({})).await;
    assert_eq!(result_text(&channels), "- #c (2 members, 2 unread, joined)");
    let inbox = bob.call("read_messages", json!({})).await;
    let lines: Vec<&str> = result_text(&inbox).leak().lines().collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines[0].starts_with("#c [") && lines[0].ends_with("<alice> one"));
    assert!(lines[1].ends_with("<alice> two"));
    // The read is written through in the background; a clean stop commits it.
    daemon.stop().await;

    let daemon = Daemon::start(&socket, runtime.path(), &["--data-dir", data_arg]).await;
    let channels = bob.call("list_channels", json!({})).await;
    assert_eq!(result_text(&channels), "- #c (2 members, 0 unread, joined)");
    assert_eq!(
        result_text(&bob.call("read_messages", json!({})).await),
        "Nothing unread for bob."
    );
    bob.close().await;
    alice.close().await;
    daemon.stop().await;
}

/// `agents[0]` pings `agents[1]` in `#loop`, and each answers every push
/// it gets, as an eager model would, until no push comes for a second;
/// returns how many pushes each answered.
async fn answer_each_other_until_quiet(agents: &[RawClient; 2], names: [&str; 2]) -> [usize; 2] {
    agents[0]
        .call(
            "send_message",
            json!({"channel": "#loop", "text": format!("@{} ping 0", names[1])}),
        )
        .await;
    let mut handled = [0usize; 2];
    let mut turns = 1;
    loop {
        let mut answered = false;
        for who in 0..2 {
            let got = agents[who].notifications(CHANNEL).len();
            if got > handled[who] {
                handled[who] = got;
                turns += 1;
                let text = format!("@{} pong {turns}", names[1 - who]);
                agents[who]
                    .call("send_message", json!({"channel": "#loop", "text": text}))
                    .await;
                answered = true;
            }
        }
        if !answered {
            let before =
                agents[0].notifications(CHANNEL).len() + agents[1].notifications(CHANNEL).len();
            tokio::time::sleep(Duration::from_secs(1)).await;
            let after =
                agents[0].notifications(CHANNEL).len() + agents[1].notifications(CHANNEL).len();
            if before == after && handled.iter().sum::<usize>() == after {
                return handled;
            }
        }
        assert!(turns < 40, "the agents were never stopped");
    }
}

/// How many times `#loop` was told its notifications pause.
async fn pause_notices(client: &RawClient) -> usize {
    let texts = channel_texts(client, "#loop").await;
    texts
        .iter()
        .filter(|t| t.starts_with("Pausing notifications of #loop"))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_loop_guard_stops_two_agents_answering_each_other_until_a_human_speaks() {
    let runtime = runtime_dir();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("relay.sock");
    let file = config(dir.path(), "[chat.push]\nloop_messages = 6\n");
    let daemon = Daemon::start(&socket, runtime.path(), &["--config", &file]).await;
    let agents = [
        shim(&socket, runtime.path(), "a1").await,
        shim(&socket, runtime.path(), "a2").await,
    ];
    let handled = answer_each_other_until_quiet(&agents, ["a1", "a2"]).await;
    // Six agent turns in a row pause the channel: the sixth is not pushed.
    assert_eq!(
        handled.iter().sum::<usize>(),
        5,
        "daemon log:\n{}",
        daemon.log()
    );
    assert_eq!(pause_notices(&agents[0]).await, 1);

    // A person speaks: pushes resume.
    say(&socket, runtime.path(), "#loop", "ann", "enough, you two").await;
    agents[0]
        .call(
            "send_message",
            json!({"channel": "#loop", "text": "@a2 sorry, one more"}),
        )
        .await;
    let pushed = agents[1]
        .wait_for(CHANNEL, handled[1] + 1, Duration::from_secs(5))
        .await;
    assert_eq!(
        pushed.last().unwrap().1["params"]["content"],
        "@a2 sorry, one more"
    );
    for agent in agents {
        agent.close().await;
    }
    daemon.stop().await;
}

fn permission_request(id: &str) -> Value {
    json!({
        "request_id": id,
        "tool_name": "Bash",
        "description": "List the files\nof the repo",
        "input_preview": "{\"command\":\"ls -la\"}"
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_go_to_a_channel_and_only_people_answer_them() {
    let runtime = runtime_dir();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("relay.sock");
    let file = config(
        dir.path(),
        "[chat.approvals]\nchannel = \"#approvals\"\napprovers = [\"ann\", \"Zed\", \"worker\"]\n",
    );
    let daemon = Daemon::start(&socket, runtime.path(), &["--config", &file]).await;
    let worker = shim_client(&socket, runtime.path(), "worker");
    let init = worker.initialize().await;
    assert_eq!(
        init["capabilities"]["experimental"]["claude/channel/permission"],
        json!({}),
        "{init}"
    );
    let other = shim(&socket, runtime.path(), "other").await;

    worker
        .notify(PERMISSION_REQUEST, permission_request("abcde"))
        .await;
    let posted = wait_for_text(&other, "#approvals", "Approval abcde").await;
    assert!(
        posted.contains("worker wants to run Bash: List the files of the repo"),
        "{posted}"
    );
    assert!(posted.contains("{\"command\":\"ls -la\"}"), "{posted}");
    assert!(
        posted.contains("yes abcde") && posted.contains("no abcde"),
        "{posted}"
    );

    // An agent cannot answer, nor a person who is not an approver.
    other
        .call(
            "send_message",
            json!({"channel": "#approvals", "text": "yes abcde"}),
        )
        .await;
    wait_for_text(
        &other,
        "#approvals",
        "only a person can answer approvals; abcde is unchanged",
    )
    .await;
    say(
        &socket,
        runtime.path(),
        "#approvals",
        "mallory",
        "yes abcde",
    )
    .await;
    wait_for_text(
        &other,
        "#approvals",
        "mallory: you are not an approver here",
    )
    .await;
    // Nor the agent's own nick, even from a person's terminal.
    say(&socket, runtime.path(), "#approvals", "Worker", "yes abcde").await;
    wait_for_text(
        &other,
        "#approvals",
        "Worker: abcde is your own request; someone else must answer it.",
    )
    .await;
    assert!(worker.notifications(PERMISSION).is_empty());

    // An approver answers (nicks compare case-insensitively).
    say(&socket, runtime.path(), "#approvals", "ANN", "Yes ABCDE").await;
    let verdict = worker.wait_for(PERMISSION, 1, Duration::from_secs(5)).await;
    assert_eq!(verdict.len(), 1, "daemon log:\n{}", daemon.log());
    assert_eq!(
        verdict[0].1["params"],
        json!({"request_id": "abcde", "behavior": "allow"})
    );
    wait_for_text(
        &other,
        "#approvals",
        "abcde allowed by ANN: worker may run Bash.",
    )
    .await;

    // Answered, unknown: a clear reply, nothing sent.
    say(&socket, runtime.path(), "#approvals", "zed", "no abcde").await;
    wait_for_text(
        &other,
        "#approvals",
        "abcde was already answered (allow by ANN)",
    )
    .await;
    say(&socket, runtime.path(), "#approvals", "zed", "no zzzzz").await;
    wait_for_text(&other, "#approvals", "there is no approval request zzzzz").await;

    // A denial, of an id sent in mixed case: people type it in lowercase,
    // the verdict carries it as it was sent.
    worker
        .notify(PERMISSION_REQUEST, permission_request("FgHij"))
        .await;
    wait_for_text(&other, "#approvals", "Approval fghij").await;
    say(&socket, runtime.path(), "#approvals", "zed", "n fghij").await;
    let verdict = worker.wait_for(PERMISSION, 2, Duration::from_secs(5)).await;
    assert_eq!(
        verdict[1].1["params"],
        json!({"request_id": "FgHij", "behavior": "deny"})
    );

    // Malformed requests are dropped: nothing is posted.
    let before = channel_texts(&other, "#approvals").await.len();
    for bad in [
        json!({"tool_name": "Bash", "description": "no id"}),
        json!({"request_id": "x".repeat(100), "tool_name": "Bash", "description": "long id"}),
        json!({"request_id": "kkkkk", "tool_name": 7, "description": "bad tool"}),
        json!({"request_id": "kkkkk", "tool_name": "Bash", "description": ["not text"]}),
    ] {
        worker.notify(PERMISSION_REQUEST, bad).await;
    }
    worker.send_line(r#"{"jsonrpc":"2.0","method":"notifications/claude/channel/permission_request","params":[1,2]}"#).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(channel_texts(&other, "#approvals").await.len(), before);
    assert_eq!(worker.notifications(PERMISSION).len(), 2);
    worker.close().await;
    other.close().await;
    daemon.stop().await;
}

/// Waits until a message of `channel` contains `needle`; returns it.
async fn wait_for_text(client: &RawClient, channel: &str, needle: &str) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let texts = channel_texts(client, channel).await;
        if let Some(found) = texts.iter().find(|t| t.contains(needle)) {
            return found.clone();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no message containing {needle:?} in {channel}: {texts:#?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A permission request too long for a relay event as it stands reaches
/// the approvals channel through the shim (cut), as it does over stdio.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_permission_request_through_the_shim_is_posted_cut() {
    let runtime = runtime_dir();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("relay.sock");
    let file = config(dir.path(), "[chat.approvals]\nchannel = \"#approvals\"\n");
    let daemon = Daemon::start(&socket, runtime.path(), &["--config", &file]).await;
    let worker = shim(&socket, runtime.path(), "worker").await;
    let mut request = permission_request("big1");
    request["input_preview"] = json!("x".repeat(100_000));
    request["description"] = json!("d".repeat(100_000));
    worker.notify(PERMISSION_REQUEST, request).await;
    let posted = wait_for_text(&worker, "#approvals", "Approval big1").await;
    assert!(posted.contains("worker wants to run Bash: ddd"), "{posted}");
    assert!(posted.len() < 2000, "{} bytes", posted.len());
    daemon.stop().await;
}

/// An id whose request can no longer be answered (its agent left) may be
/// asked again by another agent of the same daemon.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_id_of_a_gone_agents_request_can_be_asked_again() {
    let runtime = runtime_dir();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("relay.sock");
    let file = config(dir.path(), "[chat.approvals]\nchannel = \"#approvals\"\n");
    let daemon = Daemon::start(&socket, runtime.path(), &["--config", &file]).await;
    let first = shim(&socket, runtime.path(), "first").await;
    first
        .notify(PERMISSION_REQUEST, permission_request("reuse9"))
        .await;
    let watcher = shim(&socket, runtime.path(), "watcher").await;
    wait_for_text(&watcher, "#approvals", "Approval reuse9: first").await;
    first.close().await;
    let second = shim(&socket, runtime.path(), "second").await;
    second
        .notify(PERMISSION_REQUEST, permission_request("reuse9"))
        .await;
    wait_for_text(&watcher, "#approvals", "Approval reuse9: second").await;
    say(&socket, runtime.path(), "#approvals", "ann", "yes reuse9").await;
    let verdict = second.wait_for(PERMISSION, 1, Duration::from_secs(5)).await;
    assert_eq!(verdict[0].1["params"]["behavior"], "allow");
    daemon.stop().await;
}

/// A stdio agent without a nick is named in its approval notice by the
/// program that started it, not by a bare "stdio" every such agent shares.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nameless_stdio_agent_is_named_by_its_program_in_approvals() {
    let dir = tempfile::tempdir().unwrap();
    let file = config(dir.path(), "[chat.approvals]\nchannel = \"#approvals\"\n");
    let (agent, _) = stdio_with_http(&["--config", &file]).await;
    agent.initialize().await;
    agent
        .notify(PERMISSION_REQUEST, permission_request("anon1"))
        .await;
    let posted = wait_for_text(&agent, "#approvals", "Approval anon1").await;
    let this = std::process::id();
    assert!(
        posted.starts_with("Approval anon1: stdio (")
            && posted.contains(&format!(" pid {this}) wants to run Bash")),
        "{posted}"
    );
}

/// A request still waiting when the daemon restarts is taken over by the
/// new daemon once its agent's shim reconnects: posted again with the time
/// left, and a person's answer reaches the agent under the id it sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_request_is_answered_after_a_daemon_restart() {
    let runtime = runtime_dir();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("relay.sock");
    let data = dir.path().join("data");
    let file = config(dir.path(), "[chat.approvals]\nchannel = \"#approvals\"\n");
    let args = ["--config", &file, "--data-dir", data.to_str().unwrap()];
    let daemon = Daemon::start(&socket, runtime.path(), &args).await;
    let worker = shim(&socket, runtime.path(), "worker").await;
    worker
        .notify(PERMISSION_REQUEST, permission_request("KeepMe"))
        .await;
    wait_for_text(&worker, "#approvals", "Approval keepme: worker").await;
    // Answered before the restart: not taken over.
    worker
        .notify(PERMISSION_REQUEST, permission_request("done1"))
        .await;
    wait_for_text(&worker, "#approvals", "Approval done1: worker").await;
    say(&socket, runtime.path(), "#approvals", "ann", "no done1").await;
    worker.wait_for(PERMISSION, 1, Duration::from_secs(5)).await;
    daemon.stop().await;

    let daemon = Daemon::start(&socket, runtime.path(), &args).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let again = loop {
        let texts = channel_texts(&worker, "#approvals").await;
        let posted: Vec<&String> = texts
            .iter()
            .filter(|t| t.starts_with("Approval keepme"))
            .collect();
        if posted.len() == 2 {
            break posted[1].clone();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not posted again after the restart: {texts:#?}\ndaemon log:\n{}",
            daemon.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(again.contains("worker wants to run Bash"), "{again}");
    let left: u64 = again
        .rsplit("(within ")
        .next()
        .and_then(|rest| rest.strip_suffix(" s)"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no time left in {again}"));
    assert!((500..600).contains(&left), "{again}");
    say(&socket, runtime.path(), "#approvals", "ann", "yes keepme").await;
    let verdicts = worker.wait_for(PERMISSION, 2, Duration::from_secs(5)).await;
    assert_eq!(
        verdicts[1].1["params"],
        json!({"request_id": "KeepMe", "behavior": "allow"}),
        "daemon log:\n{}",
        daemon.log()
    );
    wait_for_text(&worker, "#approvals", "keepme allowed by ann").await;
    let texts = channel_texts(&worker, "#approvals").await;
    assert_eq!(
        texts
            .iter()
            .filter(|t| t.starts_with("Approval done1"))
            .count(),
        1,
        "an answered request is not posted again: {texts:#?}"
    );
    daemon.stop().await;
}

/// How many texts of `channel` contain `needle`, once nothing more has
/// come for a while (replies are posted in the background).
async fn settled_count(client: &RawClient, channel: &str, needle: &str) -> usize {
    tokio::time::sleep(Duration::from_millis(700)).await;
    channel_texts(client, channel)
        .await
        .iter()
        .filter(|t| t.contains(needle))
        .count()
}

/// Approvals with two `serve --stdio` agents and a daemon (HTTP, the web
/// view and the relay socket) on one data directory: each request is the
/// asking process's, every reply is answered once, two agents cannot ask
/// under one id, and the daemon's web view lists the stdio agents'
/// requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_across_processes_sharing_a_data_dir_are_answered_once() {
    let runtime = runtime_dir();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let data = data.to_str().unwrap();
    let socket = dir.path().join("relay.sock");
    let file = config(dir.path(), "[chat.approvals]\nchannel = \"#approvals\"\n");
    let daemon = Server::start_with(
        &[
            "--data-dir",
            data,
            "--config",
            &file,
            "--socket",
            socket.to_str().unwrap(),
        ],
        &[("XDG_RUNTIME_DIR", runtime.path().to_str().unwrap())],
    )
    .await;
    let agent = |nick: &str| {
        RawClient::spawn(command(&[
            "--stdio",
            "--data-dir",
            data,
            "--config",
            &file,
            "--nick",
            nick,
        ]))
    };
    let (sam, tom) = (agent("sam"), agent("tom"));
    sam.initialize().await;
    tom.initialize().await;

    // Two agents ask under one id: one request is posted, the other dropped.
    sam.notify(PERMISSION_REQUEST, permission_request("xp2"))
        .await;
    wait_for_text(&sam, "#approvals", "Approval xp2").await;
    tom.notify(PERMISSION_REQUEST, permission_request("xp2"))
        .await;
    assert_eq!(settled_count(&sam, "#approvals", "Approval xp2").await, 1);
    // The daemon's web view lists the stdio agent's request.
    let listed: Value = reqwest::get(daemon.url("/api/approvals"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed["pending"][0]["id"], "xp2", "{listed}");
    assert_eq!(listed["pending"][0]["agent"], "sam", "{listed}");

    // One reply, one verdict, to the agent that asked, and one acknowledgement.
    say(&socket, runtime.path(), "#approvals", "ann", "no xp2").await;
    let verdict = sam.wait_for(PERMISSION, 1, Duration::from_secs(5)).await;
    assert_eq!(verdict[0].1["params"]["behavior"], "deny");
    assert_eq!(
        settled_count(&sam, "#approvals", "xp2 denied by ann").await,
        1
    );
    assert!(tom.notifications(PERMISSION).is_empty());
    let listed: Value = reqwest::get(daemon.url("/api/approvals"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed["pending"], json!([]), "{listed}");

    // An unknown id, and an agent's answer, are each refused once.
    say(&socket, runtime.path(), "#approvals", "ann", "yes zz9").await;
    assert_eq!(
        settled_count(&sam, "#approvals", "there is no approval request zz9").await,
        1
    );
    tom.notify(PERMISSION_REQUEST, permission_request("xp3"))
        .await;
    wait_for_text(&sam, "#approvals", "Approval xp3").await;
    sam.call(
        "send_message",
        json!({"channel": "#approvals", "text": "yes xp3"}),
    )
    .await;
    assert_eq!(
        settled_count(
            &sam,
            "#approvals",
            "only a person can answer approvals; xp3"
        )
        .await,
        1
    );
    assert!(tom.notifications(PERMISSION).is_empty());

    // The asking process gone, its request is said to be gone, once.
    tom.close().await;
    say(&socket, runtime.path(), "#approvals", "ann", "yes xp3").await;
    assert_eq!(
        settled_count(
            &sam,
            "#approvals",
            "tom has gone away; xp3 cannot be answered"
        )
        .await,
        1
    );
    sam.close().await;
    drop(daemon);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_request_or_a_gone_agent_cannot_be_answered() {
    let runtime = runtime_dir();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("relay.sock");
    let file = config(
        dir.path(),
        "[chat.approvals]\nchannel = \"#ok\"\ntimeout_s = 1\n",
    );
    let daemon = Daemon::start(&socket, runtime.path(), &["--config", &file]).await;
    let worker = shim(&socket, runtime.path(), "worker").await;
    let watcher = shim(&socket, runtime.path(), "watcher").await;
    worker
        .notify(PERMISSION_REQUEST, permission_request("kqrst"))
        .await;
    wait_for_text(&watcher, "#ok", "Approval kqrst").await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    say(&socket, runtime.path(), "#ok", "ann", "yes kqrst").await;
    wait_for_text(&watcher, "#ok", "ann: kqrst has expired; nothing was sent.").await;

    worker
        .notify(PERMISSION_REQUEST, permission_request("uvwxy"))
        .await;
    wait_for_text(&watcher, "#ok", "Approval uvwxy").await;
    worker.close().await;
    say(&socket, runtime.path(), "#ok", "ann", "yes uvwxy").await;
    wait_for_text(
        &watcher,
        "#ok",
        "worker has gone away; uvwxy cannot be answered",
    )
    .await;
    watcher.close().await;
    daemon.stop().await;
}

// --- progress during a long wait ----------------------------------------------

mod progress {
    use std::sync::{Arc, Mutex};

    use rmcp::{
        ClientHandler, RoleClient, ServiceExt,
        model::{
            CallToolRequestParams, ClientCapabilities, ClientConfig, ClientRequest, Implementation,
            ProgressNotificationParam, ProtocolVersion, Request, ServerResult,
        },
        service::{NotificationContext, PeerRequestOptions, RunningService},
    };

    /// An rmcp client that records the progress notifications it gets.
    #[derive(Clone, Default)]
    pub struct Recorder(pub Arc<Mutex<Vec<ProgressNotificationParam>>>);

    impl ClientHandler for Recorder {
        fn get_info(&self) -> ClientConfig {
            ClientConfig::new(
                ClientCapabilities::default(),
                Implementation::new("progress-test", "0"),
            )
            .with_protocol_version(ProtocolVersion::V_2025_06_18)
        }

        async fn on_progress(
            &self,
            params: ProgressNotificationParam,
            _: NotificationContext<RoleClient>,
        ) {
            self.0.lock().unwrap().push(params);
        }
    }

    /// Calls `wait_for_messages` for `seconds` (rmcp gives every request a
    /// progress token) and returns the progress reported for that call.
    pub async fn wait_with_progress(
        client: &RunningService<RoleClient, Recorder>,
        recorder: &Recorder,
        seconds: u64,
    ) -> Vec<ProgressNotificationParam> {
        let args = serde_json::json!({"channel": "#quiet", "timeout_s": seconds});
        let params = CallToolRequestParams::new("wait_for_messages")
            .with_arguments(args.as_object().cloned().unwrap());
        let handle = client
            .send_request_with_option(
                ClientRequest::CallToolRequest(Request::new(params)),
                PeerRequestOptions::no_options(),
            )
            .await
            .expect("request sent");
        let token = handle.progress_token.clone();
        let ServerResult::CallToolResult(result) = handle.await_response().await.unwrap() else {
            panic!("not a tool result")
        };
        assert_eq!(result.structured_content.unwrap()["timed_out"], true);
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        recorder
            .0
            .lock()
            .unwrap()
            .iter()
            .filter(|p| p.progress_token == token)
            .cloned()
            .collect()
    }

    pub async fn serve<T, E, A>(transport: T) -> (RunningService<RoleClient, Recorder>, Recorder)
    where
        T: rmcp::transport::IntoTransport<RoleClient, E, A>,
        E: std::error::Error + Send + Sync + 'static,
    {
        let recorder = Recorder::default();
        let client = recorder.clone().serve(transport).await.expect("connects");
        (client, recorder)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_wait_reports_progress_over_stdio_http_and_the_shim() {
    use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
    let server = Server::start(&["--ephemeral"]).await;
    let over_http = async {
        let transport = StreamableHttpClientTransport::from_uri(server.url("/mcp"));
        let (client, recorder) = progress::serve(transport).await;
        progress::wait_with_progress(&client, &recorder, 12).await
    };
    let over_stdio = async {
        let mut cmd = command(&["--stdio", "--ephemeral"]);
        cmd.stderr(std::process::Stdio::null());
        let (client, recorder) = progress::serve(TokioChildProcess::new(cmd).unwrap()).await;
        progress::wait_with_progress(&client, &recorder, 12).await
    };
    let runtime = runtime_dir();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("relay.sock");
    let daemon = Daemon::start(&socket, runtime.path(), &[]).await;
    let over_shim = async {
        let cmd = switchboard(
            &["shim", "--socket", socket.to_str().unwrap()],
            runtime.path(),
        );
        let (client, recorder) = progress::serve(TokioChildProcess::new(cmd).unwrap()).await;
        progress::wait_with_progress(&client, &recorder, 12).await
    };
    let (http, stdio, shim) = tokio::join!(over_http, over_stdio, over_shim);
    for (name, progress) in [("http", http), ("stdio", stdio), ("shim", shim)] {
        // At least one report within every 15 s of waiting.
        assert!(
            !progress.is_empty(),
            "{name}: no progress during a 12 s wait"
        );
        assert!(
            progress.windows(2).all(|w| w[0].progress < w[1].progress),
            "{name}"
        );
    }
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_clear_errors_and_changes_nothing() {
    let (bob, url) = stdio_with_http(&[]).await;
    bob.initialize().await;
    // No identity yet: the inbox and joins say what is missing.
    for (tool, args) in [
        ("read_messages", json!({})),
        ("wait_for_messages", json!({"timeout_s": 0})),
        ("join_channel", json!({"channel": "#x"})),
    ] {
        let result = bob.call(tool, args).await;
        assert_eq!(result["isError"], true, "{tool}");
        assert!(
            result_text(&result).contains("pass nick"),
            "{tool}: {result}"
        );
    }
    let alice = http_client(&url, ProtocolVersion::V_2025_11_25).await;
    send(&alice, "#real", "alice", "hello").await;
    for (tool, args, expected) in [
        (
            "join_channel",
            json!({"channel": "#nowhere", "nick": "bob"}),
            "there is no channel #nowhere",
        ),
        (
            "join_channel",
            json!({"channel": "#real", "nick": "bob", "leave": true}),
            "bob is not in #real",
        ),
        (
            "join_channel",
            json!({"channel": "#real", "nick": "bad nick"}),
            "nick:",
        ),
        (
            "join_channel",
            json!({"channel": "#re al", "nick": "bob"}),
            "contains",
        ),
        ("read_messages", json!({"nick": "1bob"}), "nick:"),
        (
            "read_messages",
            json!({"nick": "bob", "since": "2026-01-01T00:00:00Z"}),
            "since needs a channel",
        ),
        ("list_channels", json!({"nick": "b\u{7}b"}), "nick:"),
        (
            "wait_for_messages",
            json!({"nick": "bob", "timeout_s": 99}),
            "timeout_s must be between 0 and 50",
        ),
    ] {
        let result = bob.call(tool, args.clone()).await;
        assert_eq!(result["isError"], true, "{tool} {args}");
        assert!(
            result_text(&result).contains(expected),
            "{tool} {args}: {}",
            result_text(&result)
        );
    }
    // Nothing changed: bob is in no channel and has read nothing.
    let channels = bob.call("list_channels", json!({"nick": "bob"})).await;
    assert_eq!(result_text(&channels), "- #real (1 member)");

    // A progress token of any JSON type: the call runs as usual.
    for token in [
        json!({}),
        json!(true),
        json!(null),
        json!([1]),
        json!(1.5),
        json!("t"),
        json!(7),
    ] {
        let reply = bob
            .request(
                "tools/call",
                json!({"name": "list_channels", "arguments": {}, "_meta": {"progressToken": token}}),
            )
            .await;
        assert_eq!(reply["result"]["isError"], false, "{token}: {reply}");
    }
    bob.close().await;
}

// --- on a real IRC network ------------------------------------------------------

mod irc {
    use super::*;
    use switchboard_testkit::{Human, IrcServer, ServerKind, ServerOptions};

    const WAIT: Duration = Duration::from_secs(20);

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn joins_pushes_and_approvals_with_a_human_on_inspircd() {
        let server = IrcServer::start(ServerKind::InspIRCd, ServerOptions::default()).await;
        let runtime = runtime_dir();
        let dir = tempfile::tempdir().unwrap();
        let file = config(
            dir.path(),
            &server.switchboard_config(
                "send_timeout_s = 20\n\
                 [chat.approvals]\nchannel = \"#approvals\"\n",
            ),
        );
        let socket = dir.path().join("relay.sock");
        let daemon = Daemon::start(&socket, runtime.path(), &["--config", &file]).await;
        let carol = Human::connect(&server, "carol").await;
        carol.join("#dev").await;
        carol.join("#approvals").await;
        let worker = shim_client(&socket, runtime.path(), "worker");
        let init = worker.initialize().await;
        assert_eq!(
            init["capabilities"]["experimental"],
            json!({"claude/channel": {}, "claude/channel/permission": {}})
        );

        // Joining is a real JOIN of the agent's own connection. A channel
        // switchboard has not been in is unknown until create_channel.
        let unknown = worker
            .call("join_channel", json!({"channel": "#dev"}))
            .await;
        assert_eq!(unknown["isError"], true);
        worker.call("create_channel", json!({"name": "#dev"})).await;
        let joined = worker
            .call("join_channel", json!({"channel": "#dev"}))
            .await;
        assert_eq!(
            result_text(&joined),
            "worker joined #dev",
            "{}",
            daemon.log()
        );
        carol
            .expect(
                |l| l.is_from("worker", "JOIN") && l.param(0) == Some("#dev"),
                WAIT,
            )
            .await;
        let members = worker.call("get_members", json!({"channel": "#dev"})).await;
        assert!(result_text(&members).contains("- worker"), "{members}");

        // A human's mention on IRC wakes the agent.
        carol.privmsg("#dev", "worker: the deploy is stuck").await;
        let pushed = worker.wait_for(CHANNEL, 1, WAIT).await;
        assert_eq!(pushed.len(), 1, "daemon log:\n{}", daemon.log());
        assert_eq!(
            pushed[0].1["params"]["content"],
            "worker: the deploy is stuck"
        );
        assert_eq!(meta(&pushed[0].1)["sender"], "carol");
        assert_eq!(meta(&pushed[0].1)["sender_kind"], "human");
        // #dev holds carol, the agent and switchboard's observer: carol
        // speaks to the agent alone, so a line without a mention is pushed.
        carol.privmsg("#dev", "any news?").await;
        let pushed = worker.wait_for(CHANNEL, 2, WAIT).await;
        assert_eq!(pushed[1].1["params"]["content"], "any news?");
        assert_eq!(meta(&pushed[1].1)["mention"], "false");

        // The agent asks for approval; the human answers on IRC.
        worker
            .notify(PERMISSION_REQUEST, permission_request("mnopq"))
            .await;
        let asked = carol
            .expect(
                |l| {
                    l.command == "PRIVMSG"
                        && l.trailing().is_some_and(|t| t.contains("Approval mnopq"))
                },
                WAIT,
            )
            .await;
        assert!(
            asked
                .trailing()
                .unwrap()
                .contains("worker wants to run Bash"),
            "{asked:?}"
        );
        carol.privmsg("#approvals", "yes mnopq").await;
        let verdict = worker.wait_for(PERMISSION, 1, WAIT).await;
        assert_eq!(verdict.len(), 1, "daemon log:\n{}", daemon.log());
        assert_eq!(
            verdict[0].1["params"],
            json!({"request_id": "mnopq", "behavior": "allow"})
        );
        carol
            .expect(
                |l| {
                    l.trailing()
                        .is_some_and(|t| t.contains("mnopq allowed by carol"))
                },
                WAIT,
            )
            .await;

        // Leaving is a real PART.
        let left = worker
            .call("join_channel", json!({"channel": "#dev", "leave": true}))
            .await;
        assert_eq!(result_text(&left), "worker left #dev");
        carol
            .expect(
                |l| l.is_from("worker", "PART") && l.param(0) == Some("#dev"),
                WAIT,
            )
            .await;
        worker.close().await;
        carol.quit().await;
        assert!(daemon.stop().await.success());
    }

    /// A request asked while the IRC server is down is posted once it is
    /// back: nobody can answer a request nobody saw.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_request_asked_while_the_network_is_down_is_posted_when_it_returns() {
        let mut server = IrcServer::start(ServerKind::InspIRCd, ServerOptions::default()).await;
        let runtime = runtime_dir();
        let dir = tempfile::tempdir().unwrap();
        let file = config(
            dir.path(),
            &server.switchboard_config(
                "send_timeout_s = 2\n\
                 [chat.approvals]\nchannel = \"#approvals\"\n",
            ),
        );
        let socket = dir.path().join("relay.sock");
        let daemon = Daemon::start(&socket, runtime.path(), &["--config", &file]).await;
        let worker = shim_client(&socket, runtime.path(), "worker");
        worker.initialize().await;
        server.stop().await;
        worker
            .notify(PERMISSION_REQUEST, permission_request("downq"))
            .await;
        // The first attempt times out after send_timeout_s; then the server
        // comes back.
        tokio::time::sleep(Duration::from_secs(4)).await;
        server.restart().await;
        let carol = Human::connect(&server, "carol").await;
        carol.join("#approvals").await;
        let asked = carol
            .expect(
                |l| {
                    l.command == "PRIVMSG"
                        && l.trailing().is_some_and(|t| t.contains("Approval downq"))
                },
                Duration::from_secs(60),
            )
            .await;
        assert!(
            asked
                .trailing()
                .unwrap()
                .contains("worker wants to run Bash"),
            "{asked:?}"
        );
        assert!(
            daemon
                .log()
                .contains("cannot post a permission request to the approvals channel"),
            "the first attempt was to fail while the server was down:\n{}",
            daemon.log()
        );
        carol.privmsg("#approvals", "yes downq").await;
        let verdict = worker.wait_for(PERMISSION, 1, WAIT).await;
        assert_eq!(
            verdict[0].1["params"],
            json!({"request_id": "downq", "behavior": "allow"}),
            "daemon log:\n{}",
            daemon.log()
        );
        worker.close().await;
        carol.quit().await;
        assert!(daemon.stop().await.success());
    }

    /// Approvers as IRC services accounts: a person who only took an
    /// approver's nick is refused; one logged in to the account (under any
    /// nick) answers. The network vouches with IRCv3 `account-tag`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn approvals_by_account_refuse_a_borrowed_nick() {
        let options = ServerOptions {
            services: true,
            ..Default::default()
        };
        let server = IrcServer::start(ServerKind::InspIRCd, options).await;
        server.register_account("ann", "ann-secret-1").await;
        let runtime = runtime_dir();
        let dir = tempfile::tempdir().unwrap();
        let file = config(
            dir.path(),
            &server.switchboard_config(
                "send_timeout_s = 20\n\
                 [chat.approvals]\nchannel = \"#approvals\"\napprover_accounts = [\"ann\"]\n",
            ),
        );
        let socket = dir.path().join("relay.sock");
        let daemon = Daemon::start(&socket, runtime.path(), &["--config", &file]).await;
        let impostor = Human::connect(&server, "ann").await;
        impostor.join("#approvals").await;
        let worker = shim_client(&socket, runtime.path(), "worker");
        worker.initialize().await;
        worker
            .notify(PERMISSION_REQUEST, permission_request("vwxyz"))
            .await;
        impostor
            .expect(
                |l| l.trailing().is_some_and(|t| t.contains("Approval vwxyz")),
                WAIT,
            )
            .await;
        impostor.privmsg("#approvals", "yes vwxyz").await;
        impostor
            .expect(
                |l| {
                    l.trailing().is_some_and(|t| {
                        t.contains("only a person logged in to an approver's account")
                            && t.contains("vwxyz is unchanged")
                    })
                },
                WAIT,
            )
            .await;

        let ann = Human::connect(&server, "annie").await;
        ann.privmsg("NickServ", "IDENTIFY ann ann-secret-1").await;
        ann.expect(
            |l| {
                l.is_from("NickServ", "NOTICE")
                    && l.trailing().is_some_and(|t| t.contains("now identified"))
            },
            WAIT,
        )
        .await;
        ann.join("#approvals").await;
        ann.privmsg("#approvals", "yes vwxyz").await;
        let verdict = worker.wait_for(PERMISSION, 1, WAIT).await;
        assert_eq!(verdict.len(), 1, "daemon log:\n{}", daemon.log());
        assert_eq!(
            verdict[0].1["params"],
            json!({"request_id": "vwxyz", "behavior": "allow"})
        );
        worker.close().await;
        assert!(daemon.stop().await.success());
    }

    /// Two `serve --stdio` on IRC sharing a data directory, their agents
    /// answering each other: both processes pause on the same message, and
    /// the channel is told once, on IRC and in the history.
    async fn the_loop_guard_pauses_once_on_irc_for_two_processes(kind: ServerKind) {
        let server = IrcServer::start(kind, ServerOptions::default()).await;
        let (_dir, agents) = two_agents_sharing_a_data_dir(&server.switchboard_config(
            "send_timeout_s = 20\n\
             [chat.push]\nloop_messages = 6\n",
        ))
        .await;
        let carol = Human::connect(&server, "carol").await;
        carol.join("#loop").await;
        for a in &agents {
            a.call("join_channel", json!({"channel": "#loop"})).await;
        }
        let handled = answer_each_other_until_quiet(&agents, ["a1", "a2"]).await;
        assert_eq!(handled.iter().sum::<usize>(), 5, "{}", logs(&agents));
        let pausing = |l: &switchboard_testkit::Line| {
            l.command == "PRIVMSG"
                && l.trailing()
                    .is_some_and(|t| t.starts_with("Pausing notifications of #loop"))
        };
        carol.expect(pausing, WAIT).await;
        // Both processes have had their chance to post it.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let on_irc = carol.received().iter().filter(|l| pausing(l)).count();
        assert_eq!(on_irc, 1, "{}", logs(&agents));
        for a in &agents {
            assert_eq!(pause_notices(a).await, 1);
        }
        for a in agents {
            a.close().await;
        }
        carol.quit().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_loop_guard_pauses_once_on_inspircd_for_two_processes() {
        the_loop_guard_pauses_once_on_irc_for_two_processes(ServerKind::InspIRCd).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_loop_guard_pauses_once_on_ngircd_for_two_processes() {
        the_loop_guard_pauses_once_on_irc_for_two_processes(ServerKind::NgIRCd).await;
    }
}

/// A legacy SSE stream is a session: once its agent has a name, mentions
/// of it are pushed on the stream, and stay unread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_sse_session_is_pushed_mentions() {
    let server = Server::start(&["--ephemeral"]).await;
    let mut bob = SseClient::open(&server.url("")).await;
    let init = bob.initialize().await;
    assert_eq!(
        init["result"]["capabilities"]["experimental"]["claude/channel"],
        json!({}),
        "{init}"
    );
    // Nothing is pushed to a session before it has a name.
    let alice = http_client(&server.url("/mcp"), ProtocolVersion::V_2025_11_25).await;
    send(&alice, "#general", "alice", "@bob are you there?").await;
    let spoke = bob
        .call(
            "send_message",
            json!({"channel": "#general", "sender": "bob", "text": "here"}),
        )
        .await;
    assert_eq!(spoke["result"]["isError"], false, "{spoke}");
    send(
        &alice,
        "#general",
        "alice",
        "@bob can you look at the diff?",
    )
    .await;
    let pushed = bob
        .notification(CHANNEL, Duration::from_secs(5))
        .await
        .unwrap_or_else(|| panic!("no push on the SSE stream\n{}", server.log()));
    assert_eq!(
        pushed["params"]["content"],
        "@bob can you look at the diff?"
    );
    let m = meta(&pushed);
    assert_eq!(
        (&m["sender"], &m["mention"]),
        (&json!("alice"), &json!("true"))
    );
    // bob's own line is never pushed back, and the mention is still unread.
    assert!(
        bob.notification(CHANNEL, Duration::from_millis(600))
            .await
            .is_none()
    );
    let inbox = bob.call("read_messages", json!({})).await;
    let text = result_text(&inbox["result"]);
    assert!(
        text.ends_with("<alice> @bob can you look at the diff?"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http_the_nick_parameter_is_the_identity() {
    let server = Server::start(&["--ephemeral"]).await;
    let http = http_client(&server.url("/mcp"), ProtocolVersion::V_2025_11_25).await;
    let init = http.peer_info().unwrap();
    // Nobody can be woken over stateless HTTP: no channel capability.
    assert!(init.capabilities.experimental.is_none(), "{init:?}");
    send(&http, "#team", "ann", "standup in 5").await;
    let joined = call(
        &http,
        "join_channel",
        json!({"channel": "#team", "nick": "carl"}),
    )
    .await;
    assert_eq!(text(&joined), "carl joined #team");
    send(&http, "#team", "ann", "carl: you're up first").await;
    send(&http, "#elsewhere", "dora", "has anyone seen carl?").await;
    let channels = call(&http, "list_channels", json!({"nick": "carl"})).await;
    assert_eq!(
        text(&channels),
        "- #elsewhere (1 member, 1 mention)\n- #team (2 members, 1 unread, 1 mention, joined)"
    );
    let inbox = call(&http, "read_messages", json!({"nick": "carl"})).await;
    let lines: Vec<String> = text(&inbox).lines().map(String::from).collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines[0].starts_with("#team [") && lines[0].ends_with("<ann> carl: you're up first"));
    assert!(
        lines[1].starts_with("#elsewhere [") && lines[1].ends_with("<dora> has anyone seen carl?")
    );
    let waited = call(
        &http,
        "wait_for_messages",
        json!({"nick": "carl", "timeout_s": 0.2}),
    )
    .await;
    assert_eq!(text(&waited), "No new messages for carl after 0.2 s.");
    assert_eq!(waited.structured_content.unwrap()["timed_out"], true);
    // Without a nick, HTTP has no identity: the channel reads work, the inbox says what is missing.
    let read = call(&http, "read_messages", json!({"channel": "#team"})).await;
    assert_eq!(texts(&read).len(), 2);
    let inbox = call(&http, "read_messages", json!({})).await;
    assert!(is_error(&inbox));
    assert!(text(&inbox).contains("pass nick"), "{}", text(&inbox));
}
