//! `switchboard backup`: a copy of the running daemon's history, taken by
//! the real binary while agents keep sending, holds every message
//! acknowledged before the backup started, is a consistent database, and
//! opens in switchboard; and every request that cannot be carried out is
//! refused with a message naming the path.

mod common;

use std::{
    collections::BTreeSet,
    path::Path,
    process::Output,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Duration,
};

use common::{Server, http_client, is_error, send, text};
use rmcp::model::ProtocolVersion;
use serde_json::json;
use switchboard_chat::{Durability, History, Location, NameRules, NewMessage, SenderKind};

const SENDERS: usize = 6;
/// Messages already in the history when the daemon starts, so that the copy
/// takes long enough for many commits to land while it runs.
const PREFILL: usize = 40_000;

/// `switchboard backup ARGS` with a clean environment plus `env`.
async fn backup(args: &[&str], env: &[(&str, &str)]) -> Output {
    let runtime = common::runtime_dir();
    let mut all = vec!["backup"];
    all.extend_from_slice(args);
    let mut cmd = common::switchboard(&all, runtime.path());
    for (k, v) in env {
        cmd.env(k, v);
    }
    tokio::time::timeout(Duration::from_secs(60), cmd.output())
        .await
        .expect("switchboard backup finishes")
        .expect("run switchboard backup")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Asserts exit status 2 and a message on stderr containing every one of
/// `needles`.
fn assert_refused(out: &Output, needles: &[&str]) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(2), "stderr: {err}");
    for needle in needles {
        assert!(err.contains(needle), "{needle:?} not in: {err}");
    }
}

/// A closed history at `dir/history.db` holding `n` messages in #history.
async fn history(dir: &Path, n: usize) {
    let history = History::open(&Location::File(dir.join("history.db")), Durability::Full)
        .expect("open the history");
    let rules = NameRules::default();
    let channel = rules.channel("#history").unwrap();
    for start in (0..n).step_by(5_000) {
        let batch = (start..n.min(start + 5_000))
            .map(|i| {
                NewMessage::live(
                    channel.clone(),
                    "archivist",
                    "archivist",
                    format!("archived line {i} about builds, deploys and reviews"),
                    SenderKind::Agent,
                )
            })
            .collect();
        history.append(batch).await.expect("prefill");
    }
    history.close();
}

fn open(path: &Path) -> rusqlite::Connection {
    rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .expect("open the copy")
}

/// The `i`s of the texts `a<sender>-<i>` the copy holds, per sender.
fn sent_in(conn: &rusqlite::Connection) -> Vec<BTreeSet<usize>> {
    let mut per_sender = vec![BTreeSet::new(); SENDERS];
    let mut stmt = conn
        .prepare("SELECT text FROM messages WHERE nick LIKE 'a%-sender'")
        .unwrap();
    let texts = stmt.query_map([], |r| r.get::<_, String>(0)).unwrap();
    for text in texts {
        let text = text.unwrap();
        let (sender, i) = text
            .strip_prefix('a')
            .and_then(|t| t.split_once('-'))
            .unwrap_or_else(|| panic!("unexpected text {text:?}"));
        per_sender[sender.parse::<usize>().unwrap()].insert(i.parse().unwrap());
    }
    per_sender
}

fn counts(acked: &[AtomicUsize]) -> Vec<usize> {
    acked.iter().map(|a| a.load(Ordering::Acquire)).collect()
}

/// Waits (bounded) until the senders' counts satisfy `pred`.
async fn wait_until(acked: &[AtomicUsize], pred: impl Fn(&[usize]) -> bool) {
    tokio::time::timeout(Duration::from_secs(60), async {
        while !pred(&counts(acked)) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the senders keep sending");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_backup_under_write_load_holds_every_acknowledged_message() {
    let data = tempfile::tempdir().unwrap();
    history(data.path(), PREFILL).await;
    let data_dir = data.path().to_str().unwrap();
    let server = Server::start(&["--data-dir", data_dir]).await;
    let url = server.url("/mcp");

    // Each sender sends one message after another and counts the
    // acknowledged ones: sender s's messages 0..acked[s] are committed.
    let acked: Arc<Vec<AtomicUsize>> =
        Arc::new((0..SENDERS).map(|_| AtomicUsize::new(0)).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let mut senders = tokio::task::JoinSet::new();
    for s in 0..SENDERS {
        let (url, acked, stop) = (url.clone(), acked.clone(), stop.clone());
        senders.spawn(async move {
            let client = http_client(&url, ProtocolVersion::V_2025_06_18).await;
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let channel = format!("#load-{}", s % 3);
                send(
                    &client,
                    &channel,
                    &format!("a{s}-sender"),
                    &format!("a{s}-{i}"),
                )
                .await;
                i += 1;
                acked[s].store(i, Ordering::Release);
            }
        });
    }
    wait_until(&acked, |c| c.iter().all(|&n| n >= 20)).await;

    let out_dir = tempfile::tempdir().unwrap();
    let copy = out_dir.path().join("backup.db");
    let before = counts(&acked);
    let out = backup(&["--data-dir", data_dir, copy.to_str().unwrap()], &[]).await;
    let after = counts(&acked);
    assert!(out.status.success(), "backup failed: {}", stderr(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("backup.db") && stdout.contains("messages"),
        "{stdout}"
    );
    // The daemon went on committing while the copy was made, and after.
    assert!(
        after.iter().sum::<usize>() > before.iter().sum::<usize>(),
        "no send was acknowledged during the backup: {before:?} → {after:?}"
    );
    wait_until(&acked, |c| c.iter().zip(&after).all(|(n, a)| n > a)).await;
    stop.store(true, Ordering::Relaxed);
    while let Some(joined) = senders.join_next().await {
        joined.expect("a sender failed");
    }

    let conn = open(&copy);
    let check: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
    let prefilled: i64 = conn
        .query_row(
            "SELECT count(*) FROM messages m JOIN channels c ON c.id = m.channel_id WHERE c.name = '#history'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(prefilled, PREFILL as i64);
    for (s, got) in sent_in(&conn).iter().enumerate() {
        // Everything acknowledged before the backup started …
        let missing: Vec<_> = (0..before[s]).filter(|i| !got.contains(i)).collect();
        assert!(
            missing.is_empty(),
            "sender {s}: acknowledged but missing {missing:?}"
        );
        // … and, being one snapshot, each sender's messages up to some point
        // with no gap (message i+1 is sent only after i is acknowledged).
        assert_eq!(
            got.len(),
            got.last().map_or(0, |last| last + 1),
            "sender {s}: a gap in {got:?}"
        );
    }
    drop(conn);

    // The copy is a history switchboard serves.
    let restored = tempfile::tempdir().unwrap();
    std::fs::copy(&copy, restored.path().join("history.db")).unwrap();
    let server2 = Server::start(&["--data-dir", restored.path().to_str().unwrap()]).await;
    let client = http_client(&server2.url("/mcp"), ProtocolVersion::V_2025_06_18).await;
    let read = common::call(
        &client,
        "read_messages",
        json!({"channel": "#load-0", "limit": 1}),
    )
    .await;
    assert!(!is_error(&read), "{}", text(&read));
    assert!(text(&read).contains("<a"), "{}", text(&read));
    let found = common::call(
        &client,
        "search_messages",
        json!({"query": "archived", "limit": 1}),
    )
    .await;
    assert!(
        text(&found).contains("#history <archivist>"),
        "{}",
        text(&found)
    );
    send(&client, "#load-0", "restorer", "back from the backup").await;
    drop(server);
}

#[tokio::test]
async fn no_history_database_is_refused() {
    let data = tempfile::tempdir().unwrap();
    let copy = data.path().join("copy.db");
    let out = backup(
        &[
            "--data-dir",
            data.path().to_str().unwrap(),
            copy.to_str().unwrap(),
        ],
        &[],
    )
    .await;
    let db = data.path().join("history.db");
    assert_refused(&out, &["no history database", db.to_str().unwrap()]);
    assert!(!copy.exists());
}

#[tokio::test]
async fn an_existing_path_is_kept_unless_forced() {
    // The data dir as `serve` finds it: here through a config file, whose
    // secrets (a token's, which a public address needs) are the daemon's
    // business, not the backup's.
    let data = tempfile::tempdir().unwrap();
    history(data.path(), 3).await;
    let config = data.path().join("switchboard.toml");
    std::fs::write(
        &config,
        format!(
            "data_dir = {:?}\n\
             [http]\nlisten = \"0.0.0.0:8090\"\n\
             [[http.tokens]]\nname = \"alice\"\nsecret_env = \"SWITCHBOARD_TEST_UNSET_SECRET\"\n",
            data.path()
        ),
    )
    .unwrap();
    let copy = data.path().join("copy.db");
    std::fs::write(&copy, "precious").unwrap();
    let args = ["--config", config.to_str().unwrap(), copy.to_str().unwrap()];

    let out = backup(&args, &[]).await;
    assert_refused(&out, &[copy.to_str().unwrap(), "already exists", "--force"]);
    assert_eq!(std::fs::read_to_string(&copy).unwrap(), "precious");

    let out = backup(&[&args[..], &["--force"]].concat(), &[]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let count: i64 = open(&copy)
        .query_row("SELECT count(*) FROM messages", [], |r| r.get(0))
        .unwrap();
    assert_eq!(count, 3);
}

#[tokio::test]
async fn a_destination_in_a_missing_directory_is_refused() {
    let data = tempfile::tempdir().unwrap();
    history(data.path(), 1).await;
    let copy = data.path().join("no/such/dir/copy.db");
    // The data dir from the environment, as `serve` reads it.
    let out = backup(
        &[copy.to_str().unwrap()],
        &[("SWITCHBOARD_DATA_DIR", data.path().to_str().unwrap())],
    )
    .await;
    let dir = data.path().join("no/such/dir");
    assert_refused(&out, &["does not exist", dir.to_str().unwrap()]);
    assert!(!dir.exists());
}

/// A backup that does not fit its disk fails saying so, once, naming the
/// directory to free, and leaves nothing there.
#[tokio::test]
async fn a_backup_to_a_full_disk_says_which_disk_and_leaves_nothing() {
    let data = tempfile::tempdir().unwrap();
    history(data.path(), 20_000).await;
    let mount = switchboard_testkit::Tmpfs::mount(1).expect("a tmpfs for the backup");
    let copy = mount.path.join("copy.db");
    let out = backup(
        &[
            copy.to_str().unwrap(),
            "--data-dir",
            data.path().to_str().unwrap(),
        ],
        &[],
    )
    .await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let full = format!("the disk of {} is full", mount.path.display());
    assert!(err.contains(&full), "{err}");
    assert_eq!(err.matches("database or disk is full").count(), 1, "{err}");
    let left: Vec<_> = std::fs::read_dir(&mount.path)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[tokio::test]
async fn a_directory_or_the_database_itself_is_refused_even_with_force() {
    let data = tempfile::tempdir().unwrap();
    history(data.path(), 1).await;
    let data_dir = data.path().to_str().unwrap();
    let out = backup(&["--data-dir", data_dir, "--force", data_dir], &[]).await;
    assert_refused(&out, &[data_dir, "is a directory"]);
    let db = data.path().join("history.db");
    let out = backup(
        &["--data-dir", data_dir, "--force", db.to_str().unwrap()],
        &[],
    )
    .await;
    assert_refused(&out, &[db.to_str().unwrap(), "the history database itself"]);
    let count: i64 = open(&db)
        .query_row("SELECT count(*) FROM messages", [], |r| r.get(0))
        .unwrap();
    assert_eq!(count, 1);
}

#[tokio::test]
async fn an_ephemeral_history_has_nothing_to_back_up() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("switchboard.toml");
    std::fs::write(&config, "ephemeral = true\n").unwrap();
    let copy = dir.path().join("copy.db");
    let out = backup(
        &["--config", config.to_str().unwrap(), copy.to_str().unwrap()],
        &[],
    )
    .await;
    assert_refused(&out, &["ephemeral", "in memory"]);
    assert!(!copy.exists());
}
