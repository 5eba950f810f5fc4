//! SASL PLAIN on the `irc` backend against a real network: InspIRCd 3 with Atheme
//! services linked (started here on loopback), accounts registered with NickServ. The
//! observer logs in with `chat.irc.sasl_account`; a refused login is a clear error naming
//! the account, and is not retried.

mod common;

use std::time::{Duration, Instant};

use common::*;
use rmcp::model::ProtocolVersion;
use serde_json::json;
use switchboard_testkit::{Human, IrcServer, ServerKind, ServerOptions};

const ACCOUNT: &str = "bridge";
const PASSWORD: &str = "bridge-secret";
const WAIT: Duration = Duration::from_secs(10);

async fn network() -> IrcServer {
    let options = ServerOptions {
        services: true,
        ..Default::default()
    };
    IrcServer::start(ServerKind::InspIRCd, options).await
}

/// A switchboard on the IRC backend whose observer logs in as `account`, with the
/// password in `IRC_SASL_PASSWORD`; driven over stdio, its files in a temp dir.
struct Bridge {
    client: Client,
    dir: tempfile::TempDir,
}

impl Bridge {
    async fn start(server: &IrcServer, account: &str, password: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("switchboard.toml");
        std::fs::write(
            &config,
            format!(
                "[chat]\nbackend = \"irc\"\n[chat.irc]\nserver = \"127.0.0.1\"\nport = {}\n\
                 sasl_account = \"{account}\"\nsasl_password_env = \"IRC_SASL_PASSWORD\"\n\
                 send_timeout_s = 10\n",
                server.port()
            ),
        )
        .unwrap();
        let data = dir.path().join("data");
        let log = dir.path().join("switchboard.log");
        let args = [
            "--config",
            config.to_str().unwrap(),
            "--data-dir",
            data.to_str().unwrap(),
            "--log-file",
            log.to_str().unwrap(),
        ];
        let env = [
            ("SWITCHBOARD_LOG", "debug,rmcp=warn"),
            ("IRC_SASL_PASSWORD", password),
        ];
        let client = stdio_client_with(&args, &env, ProtocolVersion::V_2025_11_25).await;
        Self { client, dir }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("switchboard.log")).unwrap_or_default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_observer_logs_in_and_the_chat_tools_work() {
    let server = network().await;
    server.register_account(ACCOUNT, PASSWORD).await;
    let (human, bridge) = tokio::join!(
        Human::connect(&server, "carol"),
        Bridge::start(&server, ACCOUNT, PASSWORD)
    );
    human.join("#agents").await;

    // Succeeds only once the observer (registered, so logged in) heard it in the channel.
    send(&bridge.client, "#agents", "alice", "hello from alice").await;
    let heard = human.expect(|l| l.is_from("alice", "PRIVMSG"), WAIT).await;
    assert_eq!(heard.params, ["#agents", "hello from alice"]);

    // The server says the observer is logged in to the account.
    human.send_raw("WHOIS switchboard").await;
    let whois = human.expect(|l| l.command == "330", WAIT).await;
    assert_eq!(
        whois.params[1..3],
        ["switchboard", ACCOUNT],
        "{whois}\n--- switchboard log ---\n{}",
        bridge.log()
    );

    human.privmsg("#agents", "hi alice, carol here").await;
    let deadline = Instant::now() + WAIT;
    loop {
        let read = call(
            &bridge.client,
            "read_messages",
            json!({"channel": "#agents"}),
        )
        .await;
        if texts(&read) == ["hi alice, carol here", "hello from alice"] {
            break;
        }
        assert!(Instant::now() < deadline, "history: {}", text(&read));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Only the observer logs in; sender connections (alice) do not.
    assert_eq!(server.sasl_attempts(), 1, "{}", server.log());
    bridge.client.cancel().await.unwrap();
}

/// The observer's login is refused: every chat tool says so, naming the account, and
/// switchboard does not try again.
async fn a_refused_login_is_reported_once(account: &str, password: &str) {
    let server = network().await;
    server.register_account(ACCOUNT, PASSWORD).await;
    let bridge = Bridge::start(&server, account, password).await;
    let refused = format!("cannot log in to the IRC network as account {account} (SASL PLAIN)");

    let result = call(
        &bridge.client,
        "send_message",
        json!({"channel": "#agents", "text": "hello", "sender": "alice"}),
    )
    .await;
    assert!(is_error(&result), "{}", text(&result));
    assert!(
        text(&result).contains(&refused),
        "{}\n--- switchboard log ---\n{}",
        text(&result),
        bridge.log()
    );

    // A retry would come after 250 ms, then 0.5 s, 1 s, 2 s: wait past several.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(server.sasl_attempts(), 1, "{}", server.log());
    let channels = call(&bridge.client, "list_channels", json!({})).await;
    assert!(is_error(&channels), "{}", text(&channels));
    assert!(text(&channels).contains(&refused), "{}", text(&channels));
    let log = bridge.log();
    assert!(
        log.lines()
            .any(|l| l.contains("IRC connection failed for good") && l.contains(&refused)),
        "{log}"
    );
    bridge.client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_is_a_clear_error_and_not_retried() {
    a_refused_login_is_reported_once(ACCOUNT, "not-the-password").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_account_is_a_clear_error_and_not_retried() {
    a_refused_login_is_reported_once("nobody", PASSWORD).await;
}
