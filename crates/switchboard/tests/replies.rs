//! The chat tools' replies, byte for byte, over `serve --stdio`: a fixed
//! history (network times, so nothing depends on the clock) read back
//! through every formatting path, compared with `replies.golden`.
//!
//! The formats are a contract with clients of the original bridge; a
//! faster way of writing a reply must not change one byte of it.

mod common;

use std::{path::Path, process::Stdio, time::Duration};

use chrono::{DateTime, Utc};
use common::command;
use switchboard_chat::{Durability, History, Location, NameRules, NewMessage, SenderKind};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const GOLDEN: &str = include_str!("replies.golden");

/// Texts that exercise JSON escaping and the line formats.
const TEXTS: [&str; 6] = [
    "plain words about the deploy",
    "quotes \" and back\\slash and a tab\there",
    "unicode: héllo wörld — ✓ 🚀",
    "control \u{1} char and </script>",
    "carol, can you review the release?",
    "",
];

fn at(seconds: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(1_767_323_045 + seconds, 123_456_000).unwrap()
}

/// Writes the history every run reads: 60 messages in #a from three nicks
/// (one a person), 3 in #b, at fixed times.
async fn write_history(path: &Path) {
    let rules = NameRules::default();
    let history = History::open(&Location::File(path.to_owned()), Durability::Full).unwrap();
    let message = |channel: &str, nick: &str, text: String, t: i64, kind| NewMessage {
        time: Some(at(t)),
        ..NewMessage::live(
            rules.channel(channel).unwrap(),
            nick,
            rules.fold(nick),
            text,
            kind,
        )
    };
    let mut batch = Vec::new();
    for i in 0..60 {
        let (nick, kind) = match i % 3 {
            0 => ("alice", SenderKind::Agent),
            1 => ("Bob[x]", SenderKind::Agent),
            _ => ("dave", SenderKind::Human),
        };
        let text = format!("{} #{i}", TEXTS[i % TEXTS.len()]);
        batch.push(message("#a", nick, text, i as i64 * 7, kind));
    }
    for (i, text) in TEXTS.iter().take(3).enumerate() {
        let t = 1000 + i as i64;
        batch.push(message(
            "#B",
            "eve",
            (*text).to_owned(),
            t,
            SenderKind::Agent,
        ));
    }
    history.append(batch).await.unwrap();
    history.close();
}

/// The calls whose replies are compared: reads of every shape, a wait
/// that returns at once, search, listings, an inbox and an error.
const CALLS: [&str; 14] = [
    r##"{"name":"read_messages","arguments":{"channel":"#a"}}"##,
    r##"{"name":"read_messages","arguments":{"channel":"a","limit":3}}"##,
    r##"{"name":"read_messages","arguments":{"channel":"#a","since":10,"limit":4}}"##,
    r##"{"name":"read_messages","arguments":{"channel":"#a","since":"57","limit":50}}"##,
    r##"{"name":"read_messages","arguments":{"channel":"#a","since":60}}"##,
    r##"{"name":"read_messages","arguments":{"channel":"#a","since":"2026-01-02T03:10:00Z","limit":5}}"##,
    r##"{"name":"read_messages","arguments":{"channel":"#b","limit":500}}"##,
    r##"{"name":"read_messages","arguments":{"channel":"#a","limit":0}}"##,
    r##"{"name":"wait_for_messages","arguments":{"channel":"#b","since":1,"timeout_s":0}}"##,
    r##"{"name":"search_messages","arguments":{"query":"deploy"}}"##,
    r##"{"name":"search_messages","arguments":{"query":"héllo","channel":"#a","limit":2}}"##,
    r##"{"name":"list_channels","arguments":{}}"##,
    r##"{"name":"get_members","arguments":{"channel":"#a"}}"##,
    r##"{"name":"read_messages","arguments":{"nick":"carol","limit":4}}"##,
];

#[tokio::test]
async fn replies_are_byte_for_byte_the_fixed_formats() {
    let dir = tempfile::tempdir().unwrap();
    write_history(&dir.path().join("history.db")).await;
    let mut child = command(&["--stdio", "--data-dir", dir.path().to_str().unwrap()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut exchange = async |line: String| {
        stdin.write_all(line.as_bytes()).await.unwrap();
        stdin.write_all(b"\n").await.unwrap();
        stdin.flush().await.unwrap();
        tokio::time::timeout(Duration::from_secs(10), out.next_line())
            .await
            .expect("a reply in time")
            .unwrap()
            .expect("stdout open")
    };
    exchange(r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#.into()).await;
    let mut replies = String::new();
    for (id, call) in CALLS.iter().enumerate() {
        let mut line = format!(
            r#"{{"jsonrpc":"2.0","id":{},"method":"tools/call","params":{call}}}"#,
            id + 1
        );
        if id == 0 {
            line.insert_str(
                0,
                "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n",
            );
        }
        replies.push_str(&exchange(line).await);
        replies.push('\n');
    }
    drop(stdin);
    child.wait().await.unwrap();
    if replies != GOLDEN {
        let actual = std::env::temp_dir().join("replies.actual");
        std::fs::write(&actual, &replies).unwrap();
        let first = replies
            .lines()
            .zip(GOLDEN.lines())
            .position(|(a, b)| a != b)
            .map_or(replies.lines().count().min(GOLDEN.lines().count()), |i| i);
        panic!(
            "reply {} differs from replies.golden (all replies written to {}):\n got: {}\nwant: {}",
            first + 1,
            actual.display(),
            replies.lines().nth(first).unwrap_or("(none)"),
            GOLDEN.lines().nth(first).unwrap_or("(none)"),
        );
    }
}
