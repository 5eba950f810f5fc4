//! A full disk under the data directory: `send_message` fails with an error
//! that names the data directory and says the disk is full, reads and
//! searches keep working, and sends succeed again by themselves once there
//! is room — no restart.
//!
//! The data directory is a small tmpfs mounted for the test, which needs
//! root (CI runs as root in its container); without it the test fails and
//! says so.

mod common;

use std::{
    fs::File,
    io::{ErrorKind, Write},
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use common::*;
use rmcp::model::ProtocolVersion;
use serde_json::json;

/// How long the daemon may take to store a send once space is back.
const RECOVERY: Duration = Duration::from_secs(10);

#[tokio::test]
async fn a_full_disk_fails_sends_naming_the_data_directory_and_recovers_when_space_returns() {
    let mount = Tmpfs::mount("4m");
    let data = mount.path.join("data");
    let data_arg = data.to_str().unwrap();
    let server = Server::start(&["--data-dir", data_arg]).await;
    let client = http_client(&server.url("/mcp"), ProtocolVersion::V_2025_11_25).await;
    send(&client, "disk", "alice", "before the disk filled up").await;

    let filler = mount.path.join("filler");
    fill(&filler);
    // Large texts, so that every attempt needs pages the disk does not have.
    let big = |what: &str| format!("{what} {}", "x".repeat(16 * 1024));
    for attempt in 0..3 {
        let result = call(
            &client,
            "send_message",
            json!({"channel": "disk", "sender": "alice", "text": big(&format!("lost {attempt}"))}),
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
        assert!(error.contains("not stored"), "{error}");
    }
    let read = call(&client, "read_messages", json!({"channel": "disk"})).await;
    assert!(!is_error(&read), "read on a full disk: {}", text(&read));
    assert_eq!(texts(&read), ["before the disk filled up"]);
    let found = call(&client, "search_messages", json!({"query": "filled"})).await;
    assert!(!is_error(&found), "search on a full disk: {}", text(&found));

    std::fs::remove_file(&filler).unwrap();
    let freed = Instant::now();
    let mut attempt = 0;
    loop {
        let result = call(
            &client,
            "send_message",
            json!({"channel": "disk", "sender": "alice", "text": big(&format!("after {attempt}"))}),
        )
        .await;
        if !is_error(&result) {
            break;
        }
        assert!(
            freed.elapsed() < RECOVERY,
            "sends still fail {RECOVERY:?} after space returned: {}\n{}",
            text(&result),
            server.log()
        );
        attempt += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let read = call(&client, "read_messages", json!({"channel": "disk"})).await;
    let stored = texts(&read);
    assert_eq!(stored.len(), 2, "{:?}", stored);
    assert_eq!(stored[1], "before the disk filled up");
    assert!(stored[0].starts_with(&format!("after {attempt} ")));
    assert!(!server.log().contains("panicked"), "{}", server.log());
    server.signal(libc::SIGTERM);
    assert!(server.exit(Duration::from_secs(15)).await.success());
}

/// Writes `path` until the file system has no room left.
fn fill(path: &Path) {
    let mut file = File::create(path).unwrap();
    let block = vec![0u8; 64 * 1024];
    loop {
        match file.write_all(&block) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::StorageFull => return,
            Err(e) => panic!("cannot fill {}: {e}", path.display()),
        }
    }
}

/// A tmpfs of a given size on a fresh temp dir, unmounted on drop.
struct Tmpfs {
    path: PathBuf,
    _dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_owned();
        let output = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&path)
            .output()
            .expect("cannot run mount(8)");
        assert!(
            output.status.success(),
            "this test mounts a {size} tmpfs as the data directory and needs root \
             (or CAP_SYS_ADMIN in a container): mount failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        );
        Self { path, _dir: dir }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // Lazy: a server still holding files must not keep the mount alive.
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
}
