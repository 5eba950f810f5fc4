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
    // The HTTP address is taken; the socket path is too long; the data
    // directory lies under a file.
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
            "--socket",
            long_socket.to_str().unwrap(),
            "--data-dir",
            file.join("data").to_str().unwrap(),
        ],
    )
    .await;
    let out = stdout(&output);
    assert_eq!(output.status.code(), Some(1), "{out}");
    for expected in [
        format!("warn  http      {taken_addr} is in use"),
        "FAIL  socket".to_owned(),
        "over the 107 a Unix socket path may have; set socket.path (--socket)".to_owned(),
        format!(
            "FAIL  history   {}/data/history.db cannot be created",
            file.display()
        ),
        format!("FAIL  irc       cannot reach the IRC server 127.0.0.1:{port}"),
    ] {
        assert!(out.contains(&expected), "{expected:?} not in:\n{out}");
    }
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("3 checks failed"),
        "{output:?}"
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
