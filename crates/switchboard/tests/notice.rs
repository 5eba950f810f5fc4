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
    assert_eq!(init["capabilities"]["experimental"]["claude/channel"], json!({}));
    let instructions = init["instructions"].as_str().unwrap();
    assert!(instructions.contains("You are bob"), "{instructions}");
    assert!(instructions.contains("send_message"), "{instructions}");

    let alice = http_client(&url, ProtocolVersion::V_2025_11_25).await;
    send(&alice, "#general", "alice", "@bob can you look at the diff?").await;
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
        assert!(key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'), "{key}");
        assert!(value.is_string(), "{key}: {value}");
    }

    // Not a mention, in a channel bob has not joined: nothing is pushed.
    send(&alice, "#general", "alice", "bobcat sighting, nobody's business").await;
    // bob's own message is never pushed back to bob.
    bob.call("send_message", json!({"channel": "#general", "text": "on it, bob here"}))
        .await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(bob.notifications(CHANNEL).len(), 1);

    // Pushed is not read: the inbox still has the mention. Speaking in
    // #general joined it from just before that unread mention, so what
    // followed is unread too (bob's own line is not).
    let inbox = bob.call("read_messages", json!({})).await;
    let lines: Vec<String> = result_text(&inbox).lines().map(String::from).collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines[0].starts_with("#general ["), "{lines:?}");
    assert!(lines[0].ends_with("] <alice> @bob can you look at the diff?"), "{lines:?}");
    assert!(lines[1].ends_with("] <alice> bobcat sighting, nobody's business"), "{lines:?}");
    let items = inbox["structuredContent"]["messages"].as_array().unwrap();
    assert_eq!(
        items.iter().map(|m| m["mention"].as_bool().unwrap()).collect::<Vec<_>>(),
        [true, false]
    );
    // Read now: the inbox is empty.
    let again = bob.call("read_messages", json!({})).await;
    assert_eq!(result_text(&again), "Nothing unread for bob.");
    bob.close().await;
}
