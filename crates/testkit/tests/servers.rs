//! Proves the kit against both real servers: chat between two humans, kill + restart on
//! the same port (also while the port is busy), TLS, the per-IP limit, the other options
//! (stock flood control, nick length, InspIRCd history).
//!
//! Each scenario is an `async fn` taking a [`ServerKind`], run once per server by a pair of
//! `#[tokio::test]`s. InspIRCd registers a client about 1 s after NICK/USER, so humans are
//! connected concurrently.

use std::path::Path;
use std::time::Duration;

use switchboard_testkit::{Human, IrcServer, Line, ServerKind, ServerOptions};

const WAIT: Duration = Duration::from_secs(5);

fn privmsg_from<'a>(nick: &'a str, target: &'a str, text: &'a str) -> impl Fn(&Line) -> bool {
    move |l| l.is_from(nick, "PRIVMSG") && l.params == [target, text]
}

/// Alice and Bob join a channel and see each other's PRIVMSG with the sender's nick.
async fn two_humans_chat(kind: ServerKind) {
    let server = IrcServer::start(kind, ServerOptions::default()).await;
    assert_eq!(server.kind(), kind);
    assert_eq!(server.host(), "127.0.0.1");
    let (alice, bob) = tokio::join!(
        Human::connect(&server, "alice"),
        Human::connect(&server, "bob")
    );
    let names = alice.join("#test").await;
    assert_eq!(names, ["alice"], "{kind}: NAMES after the first join");
    let names = bob.join("#test").await;
    assert!(
        names.contains(&"alice".to_string()) && names.contains(&"bob".to_string()),
        "{kind}: NAMES after bob joined: {names:?}"
    );
    alice.expect(|l| l.is_from("bob", "JOIN"), WAIT).await;

    alice.privmsg("#test", "hello bob").await;
    bob.privmsg("#test", "hi alice: how are you?").await;
    let line = bob
        .expect(privmsg_from("alice", "#test", "hello bob"), WAIT)
        .await;
    assert!(line.prefix.unwrap().starts_with("alice!"));
    alice
        .expect(privmsg_from("bob", "#test", "hi alice: how are you?"), WAIT)
        .await;

    // A private message, and an injected-looking text that must stay text.
    alice.privmsg("bob", "QUIT :bye").await;
    bob.expect(privmsg_from("alice", "bob", "QUIT :bye"), WAIT)
        .await;
    assert!(
        !bob.received().iter().any(|l| l.is_from("alice", "QUIT")),
        "{kind}: the text arrived as a command"
    );

    // The relaxed flood settings let a burst through at once.
    for n in 0..20 {
        alice.send_raw(&format!("PING :burst-{n}")).await;
    }
    alice
        .expect(
            |l| l.command == "PONG" && l.trailing() == Some("burst-19"),
            WAIT,
        )
        .await;

    alice.quit().await;
    let quit = bob.expect(|l| l.is_from("alice", "QUIT"), WAIT).await;
    assert!(quit.trailing().unwrap().contains("Leaving"), "{quit}");
}

#[tokio::test]
async fn inspircd_two_humans_chat() {
    two_humans_chat(ServerKind::InspIRCd).await;
}

#[tokio::test]
async fn ngircd_two_humans_chat() {
    two_humans_chat(ServerKind::NgIRCd).await;
}

/// The server dies mid-conversation (SIGKILL), comes back on the same port, and a human
/// can reconnect and talk again.
async fn kill_and_restart(kind: ServerKind) {
    let mut server = IrcServer::start(kind, ServerOptions::default()).await;
    let port = server.port();
    let alice = Human::connect(&server, "alice").await;
    alice.join("#test").await;

    server.kill().await;
    alice.wait_closed(WAIT).await;
    assert!(
        Human::try_connect(&server, "nobody").await.is_err(),
        "{kind}: connected to a killed server"
    );

    server.restart().await;
    assert_eq!(server.port(), port);
    let (alice, bob) = tokio::join!(
        Human::connect(&server, "alice"),
        Human::connect(&server, "bob")
    );
    alice.join("#test").await;
    bob.join("#test").await;
    alice.privmsg("#test", "back again").await;
    bob.expect(privmsg_from("alice", "#test", "back again"), WAIT)
        .await;

    // Both runs' output is in the log.
    let log = server.log();
    let ready = match kind {
        ServerKind::InspIRCd => "InspIRCd is now running as",
        ServerKind::NgIRCd => ") ready.",
    };
    assert_eq!(log.matches(ready).count(), 2, "{kind} log:\n{log}");

    // A graceful stop says goodbye to the clients first.
    server.stop().await;
    bob.expect(|l| l.command == "ERROR", WAIT).await;
    bob.wait_closed(WAIT).await;
}

#[tokio::test]
async fn inspircd_kill_and_restart() {
    kill_and_restart(ServerKind::InspIRCd).await;
}

#[tokio::test]
async fn ngircd_kill_and_restart() {
    kill_and_restart(ServerKind::NgIRCd).await;
}

/// A TLS-only server with a throwaway CA: the humans verify it and talk over TLS.
async fn tls_chat(kind: ServerKind) {
    let options = ServerOptions {
        tls: true,
        ..Default::default()
    };
    let mut server = IrcServer::start(kind, options).await;
    let ca = server.ca_pem_path().expect("a TLS server has a CA file");
    let pem = std::fs::read_to_string(ca).unwrap();
    assert!(pem.starts_with("-----BEGIN CERTIFICATE-----"), "{pem}");

    let (alice, bob) = tokio::join!(
        Human::connect(&server, "alice"),
        Human::connect(&server, "bob")
    );
    alice.join("#secure").await;
    bob.join("#secure").await;
    alice.privmsg("#secure", "over TLS").await;
    bob.expect(privmsg_from("alice", "#secure", "over TLS"), WAIT)
        .await;

    // With TLS loaded, InspIRCd segfaults on SIGTERM; stop() must not care.
    server.stop().await;
    bob.wait_closed(WAIT).await;
}

#[tokio::test]
async fn inspircd_tls_chat() {
    tls_chat(ServerKind::InspIRCd).await;
}

#[tokio::test]
async fn ngircd_tls_chat() {
    tls_chat(ServerKind::NgIRCd).await;
}

#[tokio::test]
async fn no_ca_without_tls() {
    let server = IrcServer::start(ServerKind::NgIRCd, ServerOptions::default()).await;
    assert_eq!(server.ca_pem_path(), None::<&Path>);
}

/// With `max_per_ip: Some(2)` the third connection from 127.0.0.1 gets the server's ERROR
/// line and is closed. The exact texts:
///
/// - InspIRCd: `ERROR :Closing link: (894AAAAAC@127.0.0.1) [No more connections allowed
///   from your host via this connect class (local)]`, where `894AAAAAC` is the refused
///   client's UUID (server id `894` + a counter), so it varies.
/// - ngIRCd: `ERROR :Connection refused, too many connections from your IP address`
async fn per_ip_limit(kind: ServerKind) {
    let options = ServerOptions {
        max_per_ip: Some(2),
        ..Default::default()
    };
    let server = IrcServer::start(kind, options).await;
    // Both stay connected (bound, not dropped) while the third one tries.
    let (_first, _second) = tokio::join!(
        Human::connect(&server, "first"),
        Human::connect(&server, "second")
    );
    let err = Human::try_connect(&server, "third")
        .await
        .expect_err("a third connection from the same IP must be refused");
    let error = err.error_line().unwrap_or_else(|| panic!("{kind}: {err}"));
    let text = error.trailing().unwrap();
    match kind {
        ServerKind::InspIRCd => {
            // The part in parentheses is the refused client's UUID, e.g. `894AAAAAC`.
            assert!(text.starts_with("Closing link: ("), "{kind}: {err}");
            assert!(
                text.ends_with(
                    "@127.0.0.1) [No more connections allowed from your host via this \
                     connect class (local)]"
                ),
                "{kind}: {err}"
            );
        }
        ServerKind::NgIRCd => assert_eq!(
            text, "Connection refused, too many connections from your IP address",
            "{kind}: {err}"
        ),
    }
}

#[tokio::test]
async fn inspircd_per_ip_limit() {
    per_ip_limit(ServerKind::InspIRCd).await;
}

#[tokio::test]
async fn ngircd_per_ip_limit() {
    per_ip_limit(ServerKind::NgIRCd).await;
}

/// Whether a human joining after a message got InspIRCd's history replay of it.
async fn replayed_to_late_joiner(history: bool) -> bool {
    let options = ServerOptions {
        history,
        ..Default::default()
    };
    let server = IrcServer::start(ServerKind::InspIRCd, options).await;
    let (alice, carol) = tokio::join!(
        Human::connect(&server, "alice"),
        Human::connect(&server, "carol")
    );
    alice.join("#hist").await;
    alice.privmsg("#hist", "before carol").await;
    // The server relays nothing back to alice; a PING round trip orders it.
    alice.send_raw("PING :sync").await;
    alice.expect(|l| l.command == "PONG", WAIT).await;
    carol.join("#hist").await;
    carol.send_raw("PING :sync").await;
    carol.expect(|l| l.command == "PONG", WAIT).await;
    carol
        .received()
        .iter()
        .any(|l| l.is_from("alice", "PRIVMSG") && l.trailing() == Some("before carol"))
}

/// InspIRCd replays channel history to a joiner by default, and not with `history: false`.
#[tokio::test]
async fn inspircd_history_option() {
    let (with, without) = tokio::join!(
        replayed_to_late_joiner(true),
        replayed_to_late_joiner(false)
    );
    assert!(with, "no history replay with history: true");
    assert!(!without, "history replay with history: false");
}

/// `restart()` keeps retrying while someone else holds the port (InspIRCd keeps running
/// with "failed to bind", ngIRCd exits 1), and succeeds once it is free.
async fn restart_waits_for_a_busy_port(kind: ServerKind) {
    let mut server = IrcServer::start(kind, ServerOptions::default()).await;
    server.kill().await;
    let squatter = std::net::TcpListener::bind((server.host(), server.port())).unwrap();
    let release = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        drop(squatter);
    });
    let started = std::time::Instant::now();
    server.restart().await;
    release.await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(300));
    let log = server.log();
    let failure = match kind {
        ServerKind::InspIRCd => "failed to bind",
        ServerKind::NgIRCd => "isn't listening on a single port",
    };
    assert!(log.contains(failure), "{kind} log:\n{log}");
    Human::connect(&server, "alice").await;
}

#[tokio::test]
async fn inspircd_restart_waits_for_a_busy_port() {
    restart_waits_for_a_busy_port(ServerKind::InspIRCd).await;
}

#[tokio::test]
async fn ngircd_restart_waits_for_a_busy_port() {
    restart_waits_for_a_busy_port(ServerKind::NgIRCd).await;
}

/// The non-default options give a config the real server accepts, and take effect: the
/// advertised NICKLEN, and with stock flood control a burst of 20 commands is throttled.
/// Measured: InspIRCd answers about 10 at once, then 1 per second (fake lag); ngIRCd
/// answers none for the first second after registration, then 3 per second.
async fn options_take_effect(kind: ServerKind) {
    let options = ServerOptions {
        stock_flood: true,
        max_per_ip: Some(5),
        history: false,
        nicklen: Some(20),
        ..Default::default()
    };
    let server = IrcServer::start(kind, options).await;
    let human = Human::connect(&server, "flooder").await;
    human
        .expect(
            |l| l.command == "005" && l.params.iter().any(|p| p == "NICKLEN=20"),
            WAIT,
        )
        .await;
    for n in 0..20 {
        human.send_raw(&format!("PING :{n}")).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let pongs = human
        .received()
        .iter()
        .filter(|l| l.command == "PONG")
        .count();
    assert!(
        pongs < 20,
        "{kind}: no throttling ({pongs} PONGs after 500 ms)"
    );
}

#[tokio::test]
async fn inspircd_options_take_effect() {
    options_take_effect(ServerKind::InspIRCd).await;
}

#[tokio::test]
async fn ngircd_options_take_effect() {
    options_take_effect(ServerKind::NgIRCd).await;
}

/// `unthrottled` InspIRCd processes a burst far beyond the relaxed limit (1000 commands,
/// then 100 a second) at once: 5000 PINGs are all answered (in about a second on an idle
/// machine). With the relaxed config the server stops reading after about 1000 and soon
/// closes the link with `RecvQ exceeded`.
#[tokio::test]
async fn inspircd_unthrottled_answers_a_5000_command_burst() {
    let options = ServerOptions {
        unthrottled: true,
        ..Default::default()
    };
    let server = IrcServer::start(ServerKind::InspIRCd, options).await;
    assert!(server.pid().is_some());
    let human = Human::connect(&server, "flooder").await;
    for n in 0..5000 {
        human.send_raw(&format!("PING :burst-{n}")).await;
    }
    // Generous: a server that throttles closes the link long before, and
    // with the whole suite's servers sharing two cores this once took over
    // 5 s.
    human
        .expect(
            |l| l.command == "PONG" && l.trailing() == Some("burst-4999"),
            Duration::from_secs(30),
        )
        .await;
}
