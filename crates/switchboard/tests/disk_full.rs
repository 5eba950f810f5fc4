//! A full disk under the data directory: `send_message` fails with an error
//! that names the data directory and says the disk is full, reads and
//! searches keep working, and sends succeed again by themselves once there
//! is room — no restart.
//!
//! The data directory is a small tmpfs mounted for the test, which needs
//! root (CI runs as root in its container); without it the test fails and
//! says so. On IRC the line has reached the channel when the observer
//! cannot record it: the send fails at once saying both.

mod common;

use std::time::{Duration, Instant};

use common::*;
use rmcp::model::ProtocolVersion;
use serde_json::json;
use switchboard_testkit::{Filler, IrcServer, ServerKind, ServerOptions, Tmpfs};

/// How long the daemon may take to store a send once space is back.
const RECOVERY: Duration = Duration::from_secs(10);

#[tokio::test]
async fn a_full_disk_fails_sends_naming_the_data_directory_and_recovers_when_space_returns() {
    full_disk(&[], "not stored", 16 * 1024).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_irc_a_line_heard_but_not_stored_fails_at_once_saying_so() {
    let irc = IrcServer::start(ServerKind::InspIRCd, ServerOptions::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("switchboard.toml");
    std::fs::write(&file, irc.switchboard_config("send_timeout_s = 30\n")).unwrap();
    full_disk(
        &["--config", file.to_str().unwrap()],
        "reached the IRC channel, but switchboard could not record them",
        // A few wire lines: IRC's flood control paces long texts.
        2 * 1024,
    )
    .await;
}

/// Fills the data directory's disk under a daemon started with `args`:
/// sends of `size` bytes fail soon with `failure` and the data directory
/// named, reads and search go on, and sends are stored again once space
/// returns.
async fn full_disk(args: &[&str], failure: &str, size: usize) {
    let mount = Tmpfs::mount(4).expect("a tmpfs for the data directory");
    let data = mount.path.join("data");
    let data_arg = data.to_str().unwrap();
    let mut all = args.to_vec();
    all.extend(["--data-dir", data_arg]);
    let server = Server::start(&all).await;
    let client = http_client(&server.url("/mcp"), ProtocolVersion::V_2025_11_25).await;
    let first = send(&client, "#disk", "alice", "before the disk filled up").await;
    assert!(!is_error(&first), "{}", text(&first));

    let (filler, _) = Filler::fill(&mount.path.join("filler")).expect("fill the tmpfs");
    // Large texts, so that every attempt needs pages the disk does not have.
    let big = |what: &str| format!("{what} {}", "x".repeat(size));
    for attempt in 0..3 {
        let started = Instant::now();
        let result = call(
            &client,
            "send_message",
            json!({"channel": "#disk", "sender": "alice", "text": big(&format!("lost {attempt}"))}),
        )
        .await;
        let error = text(&result);
        assert!(
            is_error(&result),
            "a send on a full disk succeeded: {error}"
        );
        assert!(
            error.contains(&format!("data directory {data_arg} is full")),
            "the error does not name the full data directory: {error}"
        );
        assert!(error.contains(failure), "{error}");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the failure took {:?}",
            started.elapsed()
        );
    }
    let read = call(&client, "read_messages", json!({"channel": "#disk"})).await;
    assert!(!is_error(&read), "read on a full disk: {}", text(&read));
    assert_eq!(texts(&read), ["before the disk filled up"]);
    // Sent just before the disk filled: the search index may not hold it
    // yet, and cannot be written now.
    let found = call(&client, "search_messages", json!({"query": "filled"})).await;
    assert!(!is_error(&found), "search on a full disk: {}", text(&found));
    assert!(
        text(&found).contains("before the disk filled up"),
        "search on a full disk missed a stored message: {}",
        text(&found)
    );

    filler.remove().unwrap();
    let tries = std::sync::atomic::AtomicUsize::new(0);
    let attempt = eventually(RECOVERY, "sends to work after space returned", || async {
        let n = tries.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let text_ = big(&format!("after {n}"));
        let result = call(
            &client,
            "send_message",
            json!({"channel": "#disk", "sender": "alice", "text": text_}),
        )
        .await;
        if is_error(&result) {
            Err(format!("{}\n{}", text(&result), server.log()))
        } else {
            Ok(n)
        }
    })
    .await;
    let read = call(&client, "read_messages", json!({"channel": "#disk"})).await;
    // Newest first.
    let stored = texts(&read);
    let starts: Vec<String> = stored
        .iter()
        .map(|t| t.chars().take(24).collect())
        .collect();
    assert_eq!(
        stored.last().map(String::as_str),
        Some("before the disk filled up"),
        "{starts:?}"
    );
    // On IRC a long text is several lines, each its own message.
    assert!(
        stored
            .iter()
            .any(|t| t.starts_with(&format!("after {attempt}"))),
        "{starts:?}"
    );
    assert!(!stored.iter().any(|t| t.starts_with("lost")), "{starts:?}");
    let log = server.log();
    assert!(!log.contains("panicked"), "{log}");
    // Indexing retried while the disk was full, backing off: a few warnings,
    // not one every 20 ms.
    let retries = log
        .matches("search index was not brought up to date")
        .count();
    assert!(retries <= 20, "{retries} indexing retries logged:\n{log}");
    server.signal(libc::SIGTERM);
    assert!(server.exit(Duration::from_secs(15)).await.success());
}
