//! Start-up, shutdown and durability of `switchboard serve`: exit codes,
//! history across restarts and `kill -9`, and graceful SIGINT/SIGTERM.

mod common;

use std::time::Duration;

use common::*;
use rmcp::model::ProtocolVersion;
use serde_json::json;

#[tokio::test]
async fn history_survives_a_restart_and_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap().to_owned();

    let server = Server::start(&["--data-dir", &data]).await;
    let client = http_client(&server.url("/mcp"), ProtocolVersion::V_2025_11_25).await;
    send(&client, "log", "alice", "before restart").await;
    server.signal(libc::SIGTERM);
    assert!(server.exit(Duration::from_secs(15)).await.success());

    // Acknowledged sends must be on disk the moment they are acknowledged:
    // fire many concurrent sends, kill -9 right after the last ack.
    let server = Server::start(&["--data-dir", &data]).await;
    let client = http_client(&server.url("/mcp"), ProtocolVersion::V_2025_11_25).await;
    let sends = (0..40).map(|i| {
        let peer = client.peer().clone();
        async move {
            let args = json!({"channel": "log", "text": format!("acked {i}"), "sender": "bob"});
            let result = peer
                .call_tool(
                    rmcp::model::CallToolRequestParams::new("send_message")
                        .with_arguments(args.as_object().cloned().unwrap()),
                )
                .await
                .unwrap();
            assert!(!is_error(&result));
        }
    });
    futures::future::join_all(sends).await;
    server.signal(libc::SIGKILL);
    server.exit(Duration::from_secs(15)).await;

    let client = stdio_client(&["--data-dir", &data], ProtocolVersion::V_2025_11_25).await;
    let read = call(
        &client,
        "read_messages",
        json!({"channel": "log", "limit": 100}),
    )
    .await;
    let texts = texts(&read);
    assert_eq!(texts.len(), 41, "{texts:?}");
    assert_eq!(texts.last().unwrap(), "before restart");
    for i in 0..40 {
        assert!(texts.contains(&format!("acked {i}")), "acked {i} was lost");
    }
    let found = call(&client, "search_messages", json!({"query": "restart"})).await;
    assert_eq!(texts_of(&found), ["before restart"]);
}

fn texts_of(result: &rmcp::model::CallToolResult) -> Vec<String> {
    texts(result)
}

#[tokio::test]
async fn sigterm_and_sigint_drain_in_flight_calls_and_close_the_database() {
    for signal in [libc::SIGTERM, libc::SIGINT] {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().to_str().unwrap().to_owned();
        let server = Server::start(&["--data-dir", &data]).await;
        let client = http_client(&server.url("/mcp"), ProtocolVersion::V_2025_11_25).await;
        send(&client, "drain", "alice", "stored").await;
        let waiting = {
            let peer = client.peer().clone();
            tokio::spawn(async move {
                let args = json!({"channel": "drain", "timeout_s": 40});
                peer.call_tool(
                    rmcp::model::CallToolRequestParams::new("wait_for_messages")
                        .with_arguments(args.as_object().cloned().unwrap()),
                )
                .await
            })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        let started = std::time::Instant::now();
        server.signal(signal);
        // The blocked call gets an answer (an error saying why) instead of
        // hanging for its 40 s or losing its connection.
        let answer = tokio::time::timeout(Duration::from_secs(10), waiting)
            .await
            .expect("in-flight call answered")
            .unwrap()
            .expect("a tools/call reply, not a dropped connection");
        assert!(
            is_error(&answer) && text(&answer).contains("call again once it is back"),
            "{}",
            text(&answer)
        );
        assert_eq!(error_facts(&answer)["server_stopping"], true);
        let status = server.exit(Duration::from_secs(15)).await;
        assert!(status.success(), "signal {signal}: {status:?}");
        assert!(started.elapsed() < Duration::from_secs(10));
        // A clean close checkpoints the WAL into the database file.
        let wal = dir.path().join("history.db-wal");
        assert!(
            !wal.exists() || std::fs::metadata(&wal).unwrap().len() == 0,
            "WAL left behind"
        );
        let client = stdio_client(&["--data-dir", &data], ProtocolVersion::V_2025_11_25).await;
        let read = call(&client, "read_messages", json!({"channel": "drain"})).await;
        assert_eq!(texts(&read), ["stored"]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_started_together_on_a_new_data_dir_all_start() {
    // Several stdio instances told to share a data dir that does not exist
    // yet race to create it, put it in WAL mode and create the schema.
    for round in 0..40 {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let agents: Vec<RawClient> = (0..6)
            .map(|_| RawClient::spawn(command(&["--stdio", "--data-dir", data.to_str().unwrap()])))
            .collect();
        for agent in &agents {
            let init = agent.initialize().await;
            assert!(init["serverInfo"].is_object(), "round {round}: {init}");
        }
        for agent in agents {
            agent.close().await;
        }
    }
}

#[tokio::test]
async fn ephemeral_history_is_gone_after_exit() {
    let client = stdio_client(&["--ephemeral"], ProtocolVersion::V_2025_11_25).await;
    send(&client, "tmp", "alice", "forget me").await;
    client.cancel().await.unwrap();
    let client = stdio_client(&["--ephemeral"], ProtocolVersion::V_2025_11_25).await;
    let channels = call(&client, "list_channels", json!({})).await;
    assert!(text(&channels).starts_with("No channels yet"));
}

#[tokio::test]
async fn configuration_errors_exit_2_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.toml");
    let caps = dir.path().join("caps.toml");
    let irc = dir.path().join("irc.toml");
    type Case = (Vec<String>, Vec<(&'static str, &'static str)>, &'static str);
    let cases: Vec<Case> = vec![
        (vec![], vec![("MCP_PORT", "http")], "MCP_PORT"),
        (
            vec![],
            vec![("TRANSPORT_TYPE", "smoke-signals")],
            "TRANSPORT_TYPE",
        ),
        (vec![], vec![("IRC_PORT", "-1")], "IRC_PORT"),
        (
            vec!["--config".into(), file.display().to_string()],
            vec![],
            "listen_on",
        ),
        (
            vec![
                "--config".into(),
                dir.path().join("missing.toml").display().to_string(),
            ],
            vec![],
            "missing.toml",
        ),
        (
            vec!["--no-http".into(), "--no-socket".into()],
            vec![],
            "http.enabled",
        ),
        (vec!["--http".into(), "localhost".into()], vec![], "--http"),
        (
            vec![
                "--socket".into(),
                format!("/tmp/{}/relay.sock", "d".repeat(110)),
            ],
            vec![],
            "socket.path",
        ),
        (
            vec!["--config".into(), caps.display().to_string()],
            vec![],
            "http.max_sse_sessions",
        ),
        (
            vec![
                "--log-file".into(),
                dir.path().join("no-such-dir/sb.log").display().to_string(),
            ],
            vec![],
            "log.file",
        ),
        // A URL or host:port where the host goes: named before any dialling.
        (
            vec!["--config".into(), irc.display().to_string()],
            vec![],
            "chat.irc.port",
        ),
        (
            vec!["--config".into(), irc.display().to_string()],
            vec![("IRC_SERVER", "ircs://irc.example.net")],
            "chat.irc.server",
        ),
    ];
    std::fs::write(
        &irc,
        "[chat]\nbackend = \"irc\"\n[chat.irc]\nserver = \"127.0.0.1:6667\"\n",
    )
    .unwrap();
    std::fs::write(&file, "[http]\nlisten_on = \"127.0.0.1:1\"\n").unwrap();
    std::fs::write(&caps, "[http]\nmax_sse_sessions = 0\n").unwrap();
    for (args, env, expected) in cases {
        let mut all = vec!["--ephemeral".to_owned()];
        all.extend(args);
        let refs: Vec<&str> = all.iter().map(String::as_str).collect();
        let mut cmd = command(&refs);
        for (k, v) in &env {
            cmd.env(k, v);
        }
        let output = tokio::time::timeout(Duration::from_secs(10), cmd.output())
            .await
            .unwrap()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{refs:?} {env:?}: {stderr}");
        assert!(stderr.contains(expected), "{refs:?} {env:?}: {stderr}");
    }
}

#[tokio::test]
async fn variables_set_to_nothing_count_as_unset() {
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let mut cmd = command(&["--stdio", "--no-socket"]);
    cmd.current_dir(cwd.path())
        .env("HOME", home.path())
        .env_remove("XDG_DATA_HOME")
        .stdin(std::process::Stdio::null());
    for var in [
        "SWITCHBOARD_CONFIG",
        "SWITCHBOARD_PROFILE",
        "SWITCHBOARD_DATA_DIR",
        "SWITCHBOARD_HTTP",
        "SWITCHBOARD_LOG_FILE",
        "MCP_PORT",
        "TRANSPORT_TYPE",
        "IRC_PORT",
    ] {
        cmd.env(var, "");
    }
    let output = tokio::time::timeout(Duration::from_secs(10), cmd.output())
        .await
        .unwrap()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    // The default data directory, not the working directory.
    assert!(
        home.path()
            .join(".local/share/switchboard/history.db")
            .is_file(),
        "{stderr}"
    );
    assert!(std::fs::read_dir(cwd.path()).unwrap().next().is_none());
}

#[tokio::test]
async fn a_taken_port_is_a_runtime_failure_that_names_it() {
    let server = Server::start(&["--ephemeral"]).await;
    let addr = server.addr.to_string();
    let output = command(&["--ephemeral", "--no-socket", "--http", &addr])
        .output()
        .await
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&addr) && stderr.contains("http.listen"),
        "{stderr}"
    );
}

/// A second daemon on a relay socket already served fails naming it, and
/// says nothing of serving HTTP first.
#[tokio::test]
async fn a_second_daemon_on_a_served_socket_fails_without_claiming_to_serve() {
    let runtime = common::runtime_dir();
    let socket = runtime.path().join("relay.sock");
    let socket = socket.to_str().unwrap();
    let first = Server::start_with(
        &["--ephemeral", "--socket", socket],
        &[("XDG_RUNTIME_DIR", runtime.path().to_str().unwrap())],
    )
    .await;
    first.wait_for_log("serving the relay socket at").await;
    let output = command(&["--ephemeral", "--socket", socket, "--http", "127.0.0.1:0"])
        .env("XDG_RUNTIME_DIR", runtime.path())
        .output()
        .await
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("another instance is already serving") && !stderr.contains("serving MCP"),
        "{stderr}"
    );
}

/// A history file switchboard cannot use stops `serve` at once, naming the
/// file and what to do, and is left as it was.
#[tokio::test]
async fn an_unusable_history_file_is_named_with_the_fix_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let db = data.join("history.db");
    let foreign = {
        let conn = rusqlite::Connection::open(&db).unwrap();
        conn.execute_batch("CREATE TABLE invoices (id INTEGER PRIMARY KEY);")
            .unwrap();
        drop(conn);
        std::fs::read(&db).unwrap()
    };
    let garbage: Vec<u8> = (0..8192u32).map(|i| (i * 7 + 3) as u8).collect();
    for (bytes, needles) in [
        (
            foreign,
            &[
                "is an SQLite database of something else",
                "invoices",
                "--data-dir",
            ][..],
        ),
        (
            garbage,
            &["not a database", "history.db-wal", "restore a backup"][..],
        ),
    ] {
        std::fs::write(&db, &bytes).unwrap();
        let output = command(&["--stdio", "--data-dir", data.to_str().unwrap()])
            .stdin(std::process::Stdio::null())
            .output()
            .await
            .unwrap();
        assert_eq!(output.status.code(), Some(1));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(db.to_str().unwrap()), "{stderr}");
        for needle in needles {
            assert!(stderr.contains(needle), "{needle}: {stderr}");
        }
        assert_eq!(
            stderr
                .lines()
                .filter(|l| l.starts_with("switchboard:"))
                .count(),
            1,
            "{stderr}"
        );
        assert!(std::fs::read(&db).unwrap() == bytes, "the file was changed");
    }
}

/// `serve --ephemeral` on `transports`, with a config (written to
/// `config`) whose one tool, `nap`, runs `sleep <seconds>`.
fn serve_with_a_nap_tool(
    config: &std::path::Path,
    seconds: &str,
    transports: &[&str],
) -> tokio::process::Command {
    std::fs::write(
        config,
        format!(
            "[commands]\nprogram = \"sleep\"\n[[commands.actions]]\ntool = \"nap\"\n\
             description = \"Sleeps for {seconds} s.\"\nargv = [\"{seconds}\"]\n"
        ),
    )
    .unwrap();
    let config = config.to_str().unwrap();
    command(&[transports, &["--ephemeral", "--config", config]].concat())
}

/// `serve --stdio --http` with a `nap` tool (a command that sleeps 1.5 s):
/// the child with its stdin open, and the HTTP address it logged.
async fn stdio_and_http_with_a_nap_tool(
    config: &std::path::Path,
) -> (tokio::process::Child, std::net::SocketAddr) {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let mut child = serve_with_a_nap_tool(config, "1.5", &["--stdio", "--http", "127.0.0.1:0"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut log = BufReader::new(child.stderr.take().unwrap()).lines();
    let addr = tokio::time::timeout(Duration::from_secs(15), async {
        while let Some(line) = log.next_line().await.unwrap() {
            if let Some(rest) = line.split("serving MCP at http://").nth(1) {
                return rest.split('/').next().unwrap().parse().unwrap();
            }
        }
        panic!("switchboard exited before serving HTTP");
    })
    .await
    .expect("HTTP served in time");
    // Keep draining the log so the child never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = log.next_line().await {} });
    (child, addr)
}

/// Writes `initialize`, `initialized` and a call of `nap` (id 1) to a
/// `--stdio` server's stdin.
async fn initialize_and_call_nap(stdin: &mut tokio::process::ChildStdin) {
    use tokio::io::AsyncWriteExt;
    for line in [
        r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"nap","arguments":{}}}"#,
    ] {
        stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap();
    }
}

/// A call that outlasts the 10 s a client that closed stdin is promised is
/// stopped then: the process ends about 10 s after stdin closed, not after
/// a shutdown drain of 10 s more.
#[tokio::test]
async fn a_stdio_call_outlasting_the_10_s_after_stdin_closed_is_stopped_then() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = serve_with_a_nap_tool(&dir.path().join("nap.toml"), "60", &["--stdio"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    initialize_and_call_nap(&mut stdin).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let closed = std::time::Instant::now();
    drop(stdin);
    let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .expect("switchboard exited")
        .unwrap();
    let took = closed.elapsed();
    assert!(status.success(), "{status}");
    assert!(
        (Duration::from_secs(9)..Duration::from_secs(15)).contains(&took),
        "exited {took:?} after stdin closed"
    );
}

/// A stdio call still running when its client closes stdin gets the
/// shutdown's 10 s to finish, and its reply is written.
#[tokio::test]
async fn a_stdio_call_running_when_stdin_closes_finishes_within_10_s() {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("nap.toml");
    let mut child = serve_with_a_nap_tool(&config, "7", &["--stdio"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    initialize_and_call_nap(&mut stdin).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(stdin);
    let reply = tokio::time::timeout(Duration::from_secs(12), async {
        while let Some(line) = stdout.next_line().await.unwrap() {
            let message: serde_json::Value = serde_json::from_str(&line).unwrap();
            if message["id"] == 1 {
                return message;
            }
        }
        panic!("stdout closed without the call's reply");
    })
    .await
    .expect("the reply within 12 s");
    assert_eq!(reply["result"]["isError"], false, "{reply}");
    assert!(
        reply["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("exited with code 0"),
        "{reply}"
    );
    let status = tokio::time::timeout(Duration::from_secs(5), child.wait())
        .await
        .expect("switchboard exits once the call answered")
        .unwrap();
    assert!(status.success(), "{status:?}");
}

#[tokio::test]
async fn stdin_closing_drains_calls_before_the_other_transports_stop() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, addr) = stdio_and_http_with_a_nap_tool(&dir.path().join("nap.toml")).await;
    let base = format!("http://{addr}");
    let client = http_client(&format!("{base}/mcp"), ProtocolVersion::V_2025_11_25).await;
    let mut sse = SseClient::open(&base).await;
    sse.initialize().await;
    let napping = {
        let peer = client.peer().clone();
        tokio::spawn(async move {
            peer.call_tool(rmcp::model::CallToolRequestParams::new("nap"))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(child.stdin.take());
    tokio::time::sleep(Duration::from_millis(300)).await;

    // While the nap drains, HTTP and legacy SSE still serve: a new call on
    // a new connection is refused by the drain, with a JSON-RPC answer.
    let late = post_json(&reqwest::Client::new(), &format!("{base}/mcp"))
        .header("mcp-protocol-version", "2025-11-25")
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"list_channels","arguments":{}}}"#)
        .send()
        .await
        .expect("HTTP still accepts connections while calls drain");
    let late: serde_json::Value = late.json().await.unwrap();
    assert!(
        late["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("shutting down")),
        "{late}"
    );
    let on_sse = sse.call("list_channels", json!({})).await;
    assert!(
        on_sse["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("shutting down")),
        "{on_sse}"
    );

    // The call in flight when stdin closed ran to its end.
    let napped = tokio::time::timeout(Duration::from_secs(10), napping)
        .await
        .expect("the in-flight call answered")
        .unwrap()
        .expect("a tools/call reply, not a dropped connection");
    assert!(!is_error(&napped), "{}", text(&napped));
    assert!(
        text(&napped).contains("exited with code 0"),
        "{}",
        text(&napped)
    );
    let status = tokio::time::timeout(Duration::from_secs(15), child.wait())
        .await
        .expect("switchboard exits once the calls drained")
        .unwrap();
    assert!(status.success(), "{status:?}");
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "HTTP still listening after exit"
    );
}

#[tokio::test]
async fn a_closed_stderr_neither_stops_the_server_nor_changes_its_exit_status() {
    use tokio::io::AsyncWriteExt;
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let mut child = command(&["--stdio", "--ephemeral", "--no-socket"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(writer)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    // An unknown resource is logged (to the closed stderr) and answered.
    for line in [
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":"x"}}"#,
        r#"{"jsonrpc":"2.0","id":3,"method":"ping"}"#,
    ] {
        stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap();
    }
    drop(stdin);
    let output = tokio::time::timeout(Duration::from_secs(15), child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let ids: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["id"].clone())
        .filter(|id| !id.is_null())
        .collect();
    assert_eq!(ids.len(), 3, "{stdout}");
    assert_eq!(output.status.code(), Some(0), "{stdout}");

    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let bad = command(&["--stdio", "--data-dir", "/proc/no-such-dir"])
        .stdin(std::process::Stdio::null())
        .stderr(writer)
        .status()
        .await
        .unwrap();
    assert_eq!(bad.code(), Some(1));
}

/// Started under a low soft limit on open files (systemd's default 1024,
/// here 256), `serve` raises it to the hard limit: every connection holds a
/// descriptor.
#[tokio::test]
async fn serve_raises_its_open_files_limit_to_the_hard_one() {
    let mut cmd = command(&["--ephemeral", "--http", "127.0.0.1:0", "--no-socket"]);
    // SAFETY: only async-signal-safe setrlimit between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: 256,
                rlim_max: 4096,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    let mut child = cmd
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let limits = format!("/proc/{}/limits", child.id().unwrap());
    let soft = eventually(Duration::from_secs(10), "the raised limit", || async {
        let text = std::fs::read_to_string(&limits).map_err(|e| e.to_string())?;
        let line = text
            .lines()
            .find(|l| l.starts_with("Max open files"))
            .ok_or_else(|| text.clone())?
            .to_owned();
        let soft = line.split_whitespace().nth(3).unwrap_or("").to_owned();
        if soft == "4096" { Ok(soft) } else { Err(line) }
    })
    .await;
    assert_eq!(soft, "4096");
    child.kill().await.unwrap();
}

/// A failure at run time is said once on stderr (not also as a log line
/// there), and logged when the log goes to a file, which only its owner
/// may read.
#[tokio::test]
async fn a_failure_at_run_time_is_said_once_and_logged_to_a_private_file() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let not_a_dir = dir.path().join("data");
    std::fs::write(&not_a_dir, "").unwrap();
    let data = not_a_dir.to_str().unwrap();
    let run = |extra: &[&str]| {
        let mut args = vec!["--stdio", "--no-http", "--no-socket", "--data-dir", data];
        args.extend(extra);
        let mut cmd = command(&args);
        cmd.stdin(std::process::Stdio::null());
        async move {
            tokio::time::timeout(Duration::from_secs(10), cmd.output())
                .await
                .unwrap()
                .unwrap()
        }
    };
    let output = run(&[]).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert_eq!(
        stderr.matches("it is a file, not a directory").count(),
        1,
        "{stderr}"
    );

    let log = dir.path().join("sb.log");
    let output = run(&["--log-file", log.to_str().unwrap()]).await;
    assert_eq!(output.status.code(), Some(1));
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("it is a file, not a directory"), "{logged}");
    let mode = std::fs::metadata(&log).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "{mode:o}");
}

/// With chat off and nothing else configured, clients would list no tools:
/// said at start rather than left to be puzzled over.
#[tokio::test]
async fn a_server_with_no_toolset_says_so_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("off.toml");
    std::fs::write(&file, "[chat]\nenabled = false\n").unwrap();
    let mut cmd = command(&[
        "--stdio",
        "--no-http",
        "--no-socket",
        "--config",
        file.to_str().unwrap(),
    ]);
    cmd.stdin(std::process::Stdio::null());
    let output = tokio::time::timeout(Duration::from_secs(10), cmd.output())
        .await
        .unwrap()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("no toolset is on"), "{stderr}");
}
