//! `switchboard say` and `switchboard tail`: a human at a terminal, through
//! the daemon's relay socket — on the local hub and on IRC (a real ngIRCd
//! started here on loopback) alike.

mod common;

use std::{
    path::Path,
    process::{ExitStatus, Stdio},
    time::{Duration, Instant},
};

use common::{Daemon, runtime_dir, switchboard};
use switchboard_testkit::{Human, IrcServer, ServerKind, ServerOptions};
use tokio::io::{AsyncBufReadExt, BufReader};

const WAIT: Duration = Duration::from_secs(15);

/// Runs `switchboard <args>` to completion (bounded); returns the status,
/// stdout and stderr.
async fn run(args: &[&str], runtime: &Path) -> (ExitStatus, String, String) {
    let child = switchboard(args, runtime)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn switchboard");
    let output = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("switchboard {args:?} did not finish"))
        .unwrap();
    (
        output.status,
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

/// `switchboard say channel text --as nick`: its status, stdout and stderr.
async fn try_say(
    socket: &Path,
    runtime: &Path,
    channel: &str,
    nick: &str,
    text: &str,
) -> (ExitStatus, String, String) {
    let socket = socket.to_str().unwrap();
    run(
        &["say", channel, text, "--as", nick, "--socket", socket],
        runtime,
    )
    .await
}

async fn say(socket: &Path, runtime: &Path, channel: &str, nick: &str, text: &str) {
    let (status, stdout, stderr) = try_say(socket, runtime, channel, nick, text).await;
    assert!(status.success(), "say failed: {status:?}\n{stderr}");
    assert_eq!(stdout, format!("Sent to {channel} as {nick}\n"));
    assert_eq!(stderr, "");
}

async fn tail_no_follow(socket: &Path, runtime: &Path, channel: &str) -> Vec<String> {
    let (status, stdout, stderr) = run(
        &[
            "tail",
            channel,
            "--no-follow",
            "--socket",
            socket.to_str().unwrap(),
        ],
        runtime,
    )
    .await;
    assert!(status.success(), "tail failed: {status:?}\n{stderr}");
    assert_eq!(stderr, "");
    stdout.lines().map(str::to_owned).collect()
}

/// `[HH:MM:SS] <nick> text` → `<nick> text`, checking the clock's shape.
fn body(line: &str) -> &str {
    let bytes = line.as_bytes();
    assert!(
        line.len() > 11
            && bytes[0] == b'['
            && bytes[3] == b':'
            && bytes[6] == b':'
            && bytes[9] == b']'
            && bytes[10] == b' '
            && line[1..9].chars().all(|c| c.is_ascii_digit() || c == ':'),
        "not `[HH:MM:SS] <nick> text`: {line:?}"
    );
    &line[11..]
}

/// A `switchboard tail` following a channel, its stdout read line by line.
struct Follower {
    child: tokio::process::Child,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

impl Follower {
    fn start(socket: &Path, runtime: &Path, channel: &str) -> Self {
        let mut child = switchboard(
            &["tail", channel, "--socket", socket.to_str().unwrap()],
            runtime,
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn switchboard tail");
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Self { child, lines }
    }

    async fn line(&mut self) -> String {
        tokio::time::timeout(WAIT, self.lines.next_line())
            .await
            .expect("tail printed a line in time")
            .unwrap()
            .expect("tail is still running")
    }

    async fn stop(mut self) {
        // It follows until killed, as at a terminal (Ctrl-C).
        assert!(
            self.child.try_wait().unwrap().is_none(),
            "tail stopped following"
        );
        self.child.kill().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn say_and_tail_on_the_local_hub() {
    let runtime = runtime_dir();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("relay.sock");
    let daemon = Daemon::start(&socket, runtime.path(), &[]).await;
    let rt = runtime.path();

    say(&socket, rt, "#c", "ann", "first words").await;
    say(&socket, rt, "#c", "bob", "second words").await;
    say(&socket, rt, "#c", "ann", "third, with <angle> & [brackets]").await;

    // History, oldest first.
    let history = tail_no_follow(&socket, rt, "#c").await;
    let bodies: Vec<&str> = history.iter().map(|l| body(l)).collect();
    assert_eq!(
        bodies,
        [
            "<ann> first words",
            "<bob> second words",
            "<ann> third, with <angle> & [brackets]"
        ]
    );
    // `--limit` keeps the newest.
    let (status, stdout, _) = run(
        &[
            "tail",
            "#c",
            "--no-follow",
            "--limit",
            "1",
            "--socket",
            socket.to_str().unwrap(),
        ],
        rt,
    )
    .await;
    assert!(status.success());
    assert_eq!(
        stdout.lines().map(body).collect::<Vec<_>>(),
        ["<ann> third, with <angle> & [brackets]"]
    );

    // Following: the history, then what is said afterwards.
    let mut follower = Follower::start(&socket, rt, "#c");
    for expected in &bodies {
        assert_eq!(body(&follower.line().await), *expected);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    say(&socket, rt, "#c", "carol", "live one").await;
    assert_eq!(body(&follower.line().await), "<carol> live one");
    assert!(started.elapsed() < Duration::from_secs(10));
    say(&socket, rt, "#c", "dave", "live two").await;
    assert_eq!(body(&follower.line().await), "<dave> live two");
    // What others said reached the agents' tools too: one hub.
    let (status, stdout, _) = run(
        &[
            "tail",
            "#c",
            "--no-follow",
            "--socket",
            socket.to_str().unwrap(),
        ],
        rt,
    )
    .await;
    assert!(status.success());
    assert_eq!(stdout.lines().count(), 5);
    follower.stop().await;

    // A bad nick, channel or text is the tool's clear error, and exit 2
    // (the command line was wrong); nothing is sent.
    for (channel, nick, text, says) in [
        ("#c", "bad nick", "x", "space"),
        ("#a,b", "ann", "x", "comma"),
        ("#c", "ann", "", "empty"),
    ] {
        let (status, stdout, stderr) = try_say(&socket, rt, channel, nick, text).await;
        assert_eq!(
            status.code(),
            Some(2),
            "{channel} {nick} {text:?}: {stderr}"
        );
        assert_eq!(stdout, "");
        assert!(stderr.contains(says), "{stderr}");
    }
    let (status, _, stderr) = run(
        &[
            "tail",
            "#a b",
            "--no-follow",
            "--socket",
            socket.to_str().unwrap(),
        ],
        rt,
    )
    .await;
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert_eq!(tail_no_follow(&socket, rt, "#c").await.len(), 5);

    assert!(daemon.stop().await.success());
}

/// `systemctl restart` (SIGTERM, then a new daemon) does not end a
/// follower: it reconnects and goes on with what is said afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tail_follows_across_a_clean_restart() {
    let runtime = runtime_dir();
    let rt = runtime.path();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("relay.sock");
    let data = dir.path().join("data");
    let args = ["--data-dir", data.to_str().unwrap()];
    let daemon = Daemon::start(&socket, rt, &args).await;
    say(&socket, rt, "#c", "ann", "before").await;
    let mut follower = Follower::start(&socket, rt, "#c");
    assert_eq!(body(&follower.line().await), "<ann> before");
    // Let the follower's wait reach the daemon, so the stop ends it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(daemon.stop().await.success());
    let daemon = Daemon::start(&socket, rt, &args).await;
    say(&socket, rt, "#c", "bob", "after").await;
    assert_eq!(body(&follower.line().await), "<bob> after");
    follower.stop().await;
    assert!(daemon.stop().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn say_and_tail_fail_clearly_without_a_daemon() {
    let runtime = runtime_dir();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("relay.sock");
    let socket_arg = socket.to_str().unwrap();
    let expected = format!(
        "switchboard is not running (no relay socket at {})",
        socket.display()
    );
    for args in [
        vec!["say", "#c", "hello", "--as", "ann", "--socket", socket_arg],
        vec!["tail", "#c", "--socket", socket_arg],
        vec!["tail", "#c", "--no-follow", "--socket", socket_arg],
    ] {
        let started = Instant::now();
        let (status, stdout, stderr) = run(&args, runtime.path()).await;
        assert_eq!(status.code(), Some(1), "{args:?}: {status:?} {stderr}");
        assert_eq!(stdout, "", "{args:?}");
        assert!(stderr.contains(&expected), "{args:?}: {stderr:?}");
        assert!(stderr.contains("switchboard serve"), "{args:?}: {stderr:?}");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{args:?} took {:?}",
            started.elapsed()
        );
    }
    // A stale socket file (its owner died) is the same clear failure.
    let stale = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    drop(stale);
    assert!(socket.exists());
    let (status, _, stderr) = run(
        &["say", "#c", "hello", "--as", "ann", "--socket", socket_arg],
        runtime.path(),
    )
    .await;
    assert_eq!(status.code(), Some(1));
    assert!(stderr.contains(&expected), "{stderr:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn say_and_tail_work_on_irc_alike() {
    let server = IrcServer::start(ServerKind::NgIRCd, ServerOptions::default()).await;
    let runtime = runtime_dir();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("switchboard.toml");
    std::fs::write(&config, server.switchboard_config("send_timeout_s = 20\n")).unwrap();
    let socket = dir.path().join("relay.sock");
    let daemon = Daemon::start(
        &socket,
        runtime.path(),
        &["--config", config.to_str().unwrap()],
    )
    .await;
    let rt = runtime.path();

    // `say` speaks on IRC under its own nick.
    say(&socket, rt, "#c", "dave", "hello irc").await;
    let human = Human::connect(&server, "carol").await;
    human.join("#c").await;
    say(&socket, rt, "#c", "dave", "are you there").await;
    let heard = human
        .expect(
            |l| l.is_from("dave", "PRIVMSG") && l.param(0) == Some("#c"),
            WAIT,
        )
        .await;
    assert_eq!(heard.trailing(), Some("are you there"));

    // A human on IRC answers; `tail` shows the whole conversation in order.
    human.privmsg("#c", "yes, carol here").await;
    let deadline = Instant::now() + WAIT;
    let history = loop {
        let lines = tail_no_follow(&socket, rt, "#c").await;
        if lines.iter().any(|l| l.ends_with("<carol> yes, carol here")) {
            break lines;
        }
        assert!(
            Instant::now() < deadline,
            "tail never showed carol: {lines:?}\n{}",
            daemon.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let bodies: Vec<&str> = history.iter().map(|l| body(l)).collect();
    assert_eq!(
        bodies,
        [
            "<dave> hello irc",
            "<dave> are you there",
            "<carol> yes, carol here"
        ]
    );

    // Following on IRC: the history, then the human's next line.
    let mut follower = Follower::start(&socket, rt, "#c");
    for expected in &bodies {
        assert_eq!(body(&follower.line().await), *expected);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    human.privmsg("#c", "live from irc").await;
    assert_eq!(body(&follower.line().await), "<carol> live from irc");
    say(&socket, rt, "#c", "dave", "and back").await;
    assert_eq!(body(&follower.line().await), "<dave> and back");
    follower.stop().await;

    human.quit().await;
    assert!(daemon.stop().await.success());
}
