//! The IRC connection against scripted servers that misbehave in ways real
//! servers (tested in the switchboard crate) do not on demand: never finish
//! registration, send garbage, refuse SASL, lack CAP.

use std::{sync::Arc, time::Duration};

use switchboard_chat::irc::{
    ConnError, FloodSettings, Sasl,
    connection::{Connection, Endpoint, Event, Identity, Status},
};
use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader},
    net::{TcpListener, TcpStream},
    sync::mpsc,
};

fn endpoint(port: u16, register_timeout: Duration) -> Arc<Endpoint> {
    Arc::new(Endpoint {
        host: "127.0.0.1".into(),
        port,
        tls: None,
        password: None,
        register_timeout,
        flood: FloodSettings::unlimited(),
    })
}

fn identity(nick: &str, sasl: Option<Sasl>, persistent: bool) -> Identity {
    Identity {
        nick: nick.into(),
        user: "sb".into(),
        realname: "test".into(),
        sasl,
        suffix_on_collision: false,
        persistent,
    }
}

/// One scripted client session on the server side.
struct Peer {
    lines: tokio::io::Lines<BufReader<tokio::io::ReadHalf<TcpStream>>>,
    writer: tokio::io::WriteHalf<TcpStream>,
}

impl Peer {
    async fn accept(listener: &TcpListener) -> Self {
        let (stream, _) = tokio::time::timeout(Duration::from_secs(10), listener.accept())
            .await
            .expect("client connects")
            .unwrap();
        let (reader, writer) = tokio::io::split(stream);
        Self {
            lines: BufReader::new(reader).lines(),
            writer,
        }
    }

    /// Reads lines until one starts with `prefix`.
    async fn until(&mut self, prefix: &str) -> String {
        loop {
            let line = tokio::time::timeout(Duration::from_secs(10), self.lines.next_line())
                .await
                .unwrap_or_else(|_| panic!("client never sent {prefix}"))
                .unwrap()
                .unwrap_or_else(|| panic!("client closed before {prefix}"));
            if line.starts_with(prefix) {
                return line;
            }
        }
    }

    async fn send(&mut self, raw: &[u8]) {
        self.writer.write_all(raw).await.unwrap();
    }

    /// Completes a plain registration for `nick`.
    async fn welcome(&mut self, nick: &str) {
        self.until("USER").await;
        self.send(format!(":irc.test 001 {nick} :Welcome\r\n:irc.test 005 {nick} NICKLEN=20 CHANTYPES=# :are supported\r\n").as_bytes())
            .await;
    }
}

async fn listener() -> (TcpListener, u16) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    (listener, port)
}

async fn wait_status(conn: &Connection, pred: impl Fn(&Status) -> bool) -> Status {
    for _ in 0..100 {
        let status = conn.status();
        if pred(&status) {
            return status;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("status stayed {:?}", conn.status());
}

#[tokio::test]
async fn a_server_that_never_finishes_registration_times_out_clearly() {
    let (listener, port) = listener().await;
    let conn = Connection::spawn(
        endpoint(port, Duration::from_millis(300)),
        identity("obs", None, true),
        None,
    );
    let _silent = Peer::accept(&listener).await;
    let status = wait_status(&conn, |s| matches!(s, Status::Disconnected(_))).await;
    let Status::Disconnected(error) = status else {
        unreachable!()
    };
    assert!(matches!(error, ConnError::RegistrationTimeout { .. }));
    assert_eq!(
        error.to_string(),
        format!("the IRC server 127.0.0.1:{port} did not finish registration within 0.3 s")
    );
    // It tries again, with backoff.
    let _again = Peer::accept(&listener).await;
}

#[tokio::test]
async fn garbage_overlong_and_invalid_utf8_lines_are_survived() {
    let (listener, port) = listener().await;
    let (events_tx, mut events) = mpsc::channel(64);
    let conn = Connection::spawn(
        endpoint(port, Duration::from_secs(5)),
        identity("obs", None, true),
        Some(events_tx),
    );
    let mut peer = Peer::accept(&listener).await;
    peer.welcome("obs").await;
    conn.ready().await.unwrap();
    assert_eq!(conn.info().rules.nicklen, 20);
    let mut junk: Vec<u8> = Vec::new();
    for line in [
        &b":"[..],
        b"@",
        b"@a=b",
        b"@;;; :x!y@z",
        b"\x00\x01\x02",
        b"PRIVMSG",
        b":x 001",
        b"\xff\xfe\xfd garbage \xc3",
    ] {
        junk.extend_from_slice(line);
        junk.extend_from_slice(b"\r\n");
    }
    junk.extend(std::iter::repeat_n(b'A', 10 * 1024));
    junk.extend_from_slice(b"\r\n:human!h@host PRIVMSG #c :caf\xe9 ok\r\nPING :still-alive\r\n");
    peer.send(&junk).await;
    let pong = peer.until("PONG").await;
    assert!(pong.ends_with("still-alive"), "{pong}");
    let mut saw = None;
    while let Ok(Some(event)) = tokio::time::timeout(Duration::from_secs(5), events.recv()).await {
        if let Event::Message(m) = event
            && let irc_proto::Command::PRIVMSG(_, text) = &m.command
        {
            saw = Some(text.clone());
            break;
        }
    }
    assert_eq!(saw.as_deref(), Some("caf\u{FFFD} ok"));
    assert!(matches!(conn.status(), Status::Registered { .. }));
}

#[tokio::test]
async fn sasl_failure_names_the_account_and_is_not_retried() {
    let (listener, port) = listener().await;
    let sasl = Sasl {
        account: "bridge".into(),
        password: "wrong".into(),
    };
    let conn = Connection::spawn(
        endpoint(port, Duration::from_secs(5)),
        identity("obs", Some(sasl), true),
        None,
    );
    let mut peer = Peer::accept(&listener).await;
    peer.until("CAP LS").await;
    peer.send(b":irc.test CAP * LS :sasl=PLAIN server-time\r\n")
        .await;
    let req = peer.until("CAP REQ").await;
    assert!(req.contains("sasl") && req.contains("server-time"), "{req}");
    peer.send(b":irc.test CAP * ACK :server-time sasl\r\n")
        .await;
    peer.until("AUTHENTICATE PLAIN").await;
    peer.send(b"AUTHENTICATE +\r\n").await;
    let creds = peer.until("AUTHENTICATE ").await;
    // base64("bridge\0bridge\0wrong")
    assert_eq!(creds, "AUTHENTICATE YnJpZGdlAGJyaWRnZQB3cm9uZw==");
    peer.send(b":irc.test 904 obs :SASL authentication failed\r\n")
        .await;
    let error = conn.ready().await.unwrap_err();
    assert!(error.to_string().contains("account bridge"), "{error}");
    // No retry storm: nobody dials again.
    let again = tokio::time::timeout(Duration::from_secs(2), listener.accept()).await;
    assert!(
        again.is_err(),
        "the client reconnected after a SASL failure"
    );
}

#[tokio::test]
async fn sasl_success_then_registration() {
    let (listener, port) = listener().await;
    let sasl = Sasl {
        account: "bridge".into(),
        password: "right".into(),
    };
    let conn = Connection::spawn(
        endpoint(port, Duration::from_secs(5)),
        identity("obs", Some(sasl), true),
        None,
    );
    let mut peer = Peer::accept(&listener).await;
    peer.until("CAP LS").await;
    peer.send(b":irc.test CAP * LS * :multi-prefix\r\n:irc.test CAP * LS :sasl\r\n")
        .await;
    peer.until("CAP REQ").await;
    peer.send(b":irc.test CAP * ACK :multi-prefix sasl\r\n")
        .await;
    peer.until("AUTHENTICATE PLAIN").await;
    peer.send(b"AUTHENTICATE +\r\n").await;
    peer.until("AUTHENTICATE ").await;
    peer.send(b":irc.test 900 obs obs!sb@h bridge :You are now logged in\r\n:irc.test 903 obs :SASL successful\r\n").await;
    peer.until("CAP END").await;
    peer.send(b":irc.test 001 obs :Welcome\r\n").await;
    conn.ready().await.unwrap();
}

#[tokio::test]
async fn a_server_without_cap_still_registers() {
    let (listener, port) = listener().await;
    let conn = Connection::spawn(
        endpoint(port, Duration::from_secs(5)),
        identity("obs", None, true),
        None,
    );
    let mut peer = Peer::accept(&listener).await;
    peer.until("CAP LS").await;
    peer.send(b":old.server 421 * CAP :Unknown command\r\n")
        .await;
    peer.welcome("obs").await;
    conn.ready().await.unwrap();
}

#[tokio::test]
async fn a_taken_nick_fails_a_sender_for_good() {
    let (listener, port) = listener().await;
    let conn = Connection::spawn(
        endpoint(port, Duration::from_secs(5)),
        identity("alice", None, false),
        None,
    );
    let mut peer = Peer::accept(&listener).await;
    peer.until("USER").await;
    peer.send(b":irc.test 433 * alice :Nickname is already in use\r\n")
        .await;
    let error = conn.ready().await.unwrap_err();
    assert_eq!(error, ConnError::NickInUse("alice".into()));
    assert!(error.to_string().contains("alice is already in use"));
}
