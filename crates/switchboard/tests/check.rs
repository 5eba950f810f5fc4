//! `switchboard check`: the config loaded as `serve` would, and what it
//! depends on probed for real — an IRC server, the HTTP address, the relay
//! socket and the history's directory — with a line each and an exit
//! status that says whether anything failed.

mod common;

use std::{os::unix::fs::PermissionsExt, path::Path, process::Output};

use switchboard_testkit::{IrcServer, ServerKind, ServerOptions, process::ISOLATED_ENV};

/// `switchboard check ARGS` with a clean environment and its data under `dir`.
async fn check(dir: &Path, args: &[&str]) -> Output {
    let mut cmd = tokio::process::Command::new(common::BIN);
    cmd.arg("check").args(args);
    for var in ISOLATED_ENV {
        cmd.env_remove(var);
    }
    cmd.env("XDG_DATA_HOME", dir.join("data"))
        .env("XDG_RUNTIME_DIR", dir.join("run"));
    tokio::time::timeout(std::time::Duration::from_secs(60), cmd.output())
        .await
        .expect("check finished within 60 s")
        .unwrap()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn write_config(dir: &Path, text: &str) -> String {
    let path = dir.join("switchboard.toml");
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reachable_irc_server_and_free_addresses_pass() {
    let server = IrcServer::start(ServerKind::InspIRCd, ServerOptions::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &server.switchboard_config(""));
    let output = check(dir.path(), &["--config", &config, "--http", "127.0.0.1:0"]).await;
    let out = stdout(&output);
    assert!(output.status.success(), "{out}\n{output:?}");
    assert!(out.contains("ok    config    valid: chat (IRC)"), "{out}");
    let data = dir.path().join("data/switchboard/history.db");
    assert!(
        out.contains(&format!(
            "ok    history   {} will be created",
            data.display()
        )),
        "{out}"
    );
    assert!(out.contains("ok    http      127.0.0.1:0 is free"), "{out}");
    assert!(out.contains("ok    socket    "), "{out}");
    assert!(
        out.contains(&format!(
            "ok    irc       127.0.0.1:{}: registered as sbchk",
            server.port()
        )),
        "{out}"
    );
    // Nothing was written: no history, no socket directory.
    assert!(!dir.path().join("data").exists());
    assert!(!dir.path().join("run").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_serve_would_trip_over_is_named_with_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    // A port nothing listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let config = write_config(
        dir.path(),
        &format!(
            "[chat]\nbackend = \"irc\"\n[chat.irc]\nserver = \"127.0.0.1\"\nport = {port}\nregister_timeout_s = 2\n"
        ),
    );
    // The HTTP address is taken; the data directory lies under a file.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken_addr = taken.local_addr().unwrap().to_string();
    let long_socket = dir.path().join("s".repeat(120)).join("relay.sock");
    let file = dir.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    let output = check(
        dir.path(),
        &[
            "--config",
            &config,
            "--http",
            &taken_addr,
            "--data-dir",
            file.join("data").to_str().unwrap(),
        ],
    )
    .await;
    let out = stdout(&output);
    assert_eq!(output.status.code(), Some(1), "{out}");
    for expected in [
        format!("warn  http      {taken_addr} is in use"),
        format!(
            "FAIL  history   {}/data/history.db cannot be created",
            file.display()
        ),
        format!("FAIL  irc       cannot reach the IRC server 127.0.0.1:{port}"),
    ] {
        assert!(out.contains(&expected), "{expected:?} not in:\n{out}");
    }
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("2 checks failed"),
        "{output:?}"
    );

    // A socket path too long for a socket is a config error.
    let output = check(
        dir.path(),
        &["--stdio", "--socket", long_socket.to_str().unwrap()],
    )
    .await;
    assert_eq!(output.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("socket.path"),
        "{output:?}"
    );

    // A history file that is not a database, a log file that is a
    // directory; relative paths start in the working directory.
    let odd = dir.path().join("odd");
    std::fs::create_dir_all(odd.join("garbage")).unwrap();
    std::fs::write(odd.join("garbage/history.db"), "not sqlite at all").unwrap();
    std::fs::create_dir_all(odd.join("a-dir/history.db")).unwrap();
    for (data, expected) in [
        ("garbage", "history.db is not an SQLite database"),
        ("a-dir", "history.db is not a file"),
    ] {
        let output = check(
            dir.path(),
            &[
                "--stdio",
                "--no-socket",
                "--data-dir",
                odd.join(data).to_str().unwrap(),
            ],
        )
        .await;
        assert_eq!(output.status.code(), Some(1), "{}", stdout(&output));
        assert!(stdout(&output).contains(expected), "{}", stdout(&output));
    }
    let output = check(
        dir.path(),
        &[
            "--stdio",
            "--no-socket",
            "--log-file",
            odd.to_str().unwrap(),
        ],
    )
    .await;
    assert!(
        stdout(&output).contains("is not a file; set log.file (--log-file)"),
        "{}",
        stdout(&output)
    );
    let mut relative = tokio::process::Command::new(common::BIN);
    relative
        .args([
            "check",
            "--no-http",
            "--data-dir",
            "newdata",
            "--socket",
            "rel.sock",
        ])
        .current_dir(dir.path());
    for var in ISOLATED_ENV {
        relative.env_remove(var);
    }
    let output = relative.output().await.unwrap();
    assert!(output.status.success(), "{}", stdout(&output));
    assert!(
        stdout(&output).contains("ok    socket    rel.sock is free"),
        "{}",
        stdout(&output)
    );

    // A directory this user may not write (unless root, which may).
    let locked = dir.path().join("locked");
    std::fs::create_dir(&locked).unwrap();
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o500)).unwrap();
    let is_root = unsafe { libc::geteuid() } == 0;
    let output = check(
        dir.path(),
        &["--data-dir", locked.join("d").to_str().unwrap(), "--stdio"],
    )
    .await;
    assert_eq!(output.status.success(), is_root, "{}", stdout(&output));
}

#[tokio::test]
async fn a_config_serve_would_refuse_exits_2_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "[chat]\nbackend = \"irc\"\n");
    let output = check(dir.path(), &["--config", &config]).await;
    assert_eq!(output.status.code(), Some(2));
    assert!(stdout(&output).is_empty());
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("chat.irc.server"),
        "{output:?}"
    );
    let config = write_config(dir.path(), "[chat]\nmax_text_bytes = 0\n");
    let output = check(dir.path(), &["--config", &config]).await;
    assert_eq!(output.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("chat.max_text_bytes"),
        "{output:?}"
    );
}

/// A server that turns the connection away answers the check at once (it
/// is not dialled again until the registration timeout), in its words.
#[tokio::test]
async fn an_irc_server_refusing_the_connection_fails_the_check_at_once() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (reader, mut writer) = stream.into_split();
            let mut lines = BufReader::new(reader).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if line.starts_with("NICK") {
                    let _ = writer
                        .write_all(b"ERROR :Closing link: (x@127.0.0.1) [Bad password]\r\n")
                        .await;
                    break;
                }
            }
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        &format!(
            "[chat]\nbackend = \"irc\"\n[chat.irc]\nserver = \"127.0.0.1\"\nport = {port}\nregister_timeout_s = 30\n"
        ),
    );
    let started = std::time::Instant::now();
    let output = check(dir.path(), &["--config", &config, "--stdio", "--ephemeral"]).await;
    let out = stdout(&output);
    assert_eq!(output.status.code(), Some(1), "{out}");
    assert!(
        out.contains(&format!(
            "FAIL  irc       127.0.0.1:{port}: the IRC server closed the connection: Closing link: (x@127.0.0.1) [Bad password]"
        )),
        "{out}"
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(15),
        "took {:?}",
        started.elapsed()
    );
}
