//! The IRC connection and backend against scripted servers, for what real
//! servers (tested in the switchboard crate) do not do on demand: never
//! finish registration, send garbage, refuse SASL, lack CAP, or offer
//! `draft/chathistory` (neither InspIRCd 3 nor ngIRCd does).

use std::{sync::Arc, time::Duration};

use chrono::{DateTime, Utc};
use switchboard_chat::{
    ChatBackend, Durability, History, Location, NameRules, NewMessage, Origin, SenderKind,
    history::iso,
    irc::{
        ConnError, Connection, Endpoint, Event, FloodSettings, Identity, IrcBackend, IrcSettings,
        Sasl, Status,
    },
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
        self.lines_until(prefix)
            .await
            .pop()
            .expect("the matching line")
    }

    /// Every line read up to and including the first that starts with `prefix`.
    async fn lines_until(&mut self, prefix: &str) -> Vec<String> {
        let mut read = Vec::new();
        loop {
            let line = tokio::time::timeout(Duration::from_secs(10), self.lines.next_line())
                .await
                .unwrap_or_else(|_| panic!("client never sent {prefix}; it sent {read:?}"))
                .unwrap()
                .unwrap_or_else(|| panic!("client closed before {prefix}"));
            let done = line.starts_with(prefix);
            read.push(line);
            if done {
                return read;
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

/// A connection as `obs` to a fake server that has welcomed it.
async fn registered_obs() -> (Connection, Peer) {
    let (listener, port) = listener().await;
    let conn = Connection::spawn(
        endpoint(port, Duration::from_secs(5)),
        identity("obs", None, true),
        None,
    );
    let mut peer = Peer::accept(&listener).await;
    peer.welcome("obs").await;
    conn.ready().await.unwrap();
    (conn, peer)
}

#[tokio::test]
async fn a_nick_the_server_changes_is_reported_then_claimed_back() {
    let (conn, mut peer) = registered_obs().await;
    // A collision after a netsplit: the server renames us to our UID.
    peer.send(b":obs!u@h NICK :0AAAAAAAB\r\n").await;
    let status = wait_status(
        &conn,
        |s| matches!(s, Status::Registered { nick } if nick == "0AAAAAAAB"),
    )
    .await;
    assert_eq!(
        status,
        Status::Registered {
            nick: "0AAAAAAAB".into()
        }
    );
    // Then it claims its own nick back, and reports it once granted.
    peer.until("NICK obs").await;
    peer.send(b":0AAAAAAAB!u@h NICK :obs\r\n").await;
    wait_status(
        &conn,
        |s| matches!(s, Status::Registered { nick } if nick == "obs"),
    )
    .await;
}

#[tokio::test]
async fn a_renamed_connection_claims_its_nick_back_at_a_random_moment() {
    // Two observers renamed by one collision (the same nick on two servers
    // that just met) must not claim it back in step, or they collide again.
    let (conn, mut peer) = registered_obs().await;
    let mut delays = Vec::new();
    for round in 0..4 {
        let uid = format!("0AAAAAAA{round}");
        let renamed = std::time::Instant::now();
        peer.send(format!(":obs!u@h NICK :{uid}\r\n").as_bytes())
            .await;
        peer.until("NICK obs").await;
        delays.push(renamed.elapsed());
        peer.send(format!(":{uid}!u@h NICK :obs\r\n").as_bytes())
            .await;
        wait_status(
            &conn,
            |s| matches!(s, Status::Registered { nick } if nick == "obs"),
        )
        .await;
    }
    let (min, max) = (delays.iter().min().unwrap(), delays.iter().max().unwrap());
    assert!(
        *max < Duration::from_secs(3),
        "a claim waited {max:?}: {delays:?}"
    );
    assert!(
        *max - *min > Duration::from_millis(20),
        "four renames were claimed back after nearly the same delay: {delays:?}"
    );
}

/// A server that offers `draft/chathistory` with `limit` messages a page:
/// registers the observer `obs` and answers its JOIN of `#ops`.
async fn history_server_session(listener: &TcpListener, limit: usize) -> Peer {
    let mut peer = Peer::accept(listener).await;
    peer.until("CAP LS").await;
    peer.send(b":irc.test CAP * LS :server-time message-tags batch draft/chathistory\r\n")
        .await;
    let req = peer.until("CAP REQ").await;
    assert!(
        req.contains("draft/chathistory") && req.contains("batch"),
        "{req}"
    );
    peer.send(b":irc.test CAP * ACK :server-time message-tags batch draft/chathistory\r\n")
        .await;
    peer.until("CAP END").await;
    peer.send(format!(":irc.test 001 obs :Welcome\r\n:irc.test 005 obs CHANTYPES=# CASEMAPPING=rfc1459 CHATHISTORY={limit} :are supported\r\n").as_bytes())
        .await;
    peer.until("JOIN #ops").await;
    peer.send(b":obs!sb@h JOIN #ops\r\n:irc.test 353 obs = #ops :obs human\r\n:irc.test 366 obs #ops :End\r\n")
        .await;
    peer
}

fn history_line(batch: &str, msgid: Option<&str>, time: &str, nick: &str, text: &str) -> String {
    let msgid = msgid.map_or(String::new(), |id| format!(";msgid={id}"));
    format!("@batch={batch}{msgid};time={time} :{nick}!u@h PRIVMSG #ops :{text}\r\n")
}

/// Waits until `#ops` holds `n` messages; returns them oldest first as
/// (time, nick, text).
async fn wait_history(history: &History, n: usize) -> Vec<(String, String, String)> {
    let mut stored = Vec::new();
    for _ in 0..200 {
        stored = history.read("#ops", None, 100).unwrap();
        if stored.len() >= n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    stored
        .into_iter()
        .rev()
        .map(|m| (iso(&m.time), m.nick, m.text))
        .collect()
}

fn row(time: &str, nick: &str, text: &str) -> (String, String, String) {
    (time.into(), nick.into(), text.into())
}

#[tokio::test]
async fn the_gap_is_backfilled_from_chathistory_after_start_and_after_reconnect() {
    let (listener, port) = listener().await;
    let history = History::open(&Location::Memory, Durability::Full).unwrap();
    let rules = NameRules::default();
    let at = |t: &str| Some(DateTime::parse_from_rfc3339(t).unwrap().with_timezone(&Utc));
    // What the history held before switchboard went away.
    history
        .append(vec![NewMessage {
            channel: rules.channel("#ops").unwrap(),
            nick: "alice".into(),
            nick_key: "alice".into(),
            text: "before".into(),
            time: at("2026-12-01T10:00:00.000Z"),
            msgid: Some("m0".into()),
            origin: Origin::Here,
            kind: SenderKind::Agent,
            account: None,
        }])
        .await
        .unwrap();
    let mut settings = IrcSettings::new("127.0.0.1", port);
    settings.observer_nick = "obs".into();
    settings.flood = FloodSettings::unlimited();
    let backend = IrcBackend::start(settings, history.clone());

    // Start: the gap since the last stored message, in two pages.
    let mut peer = history_server_session(&listener, 2).await;
    let ask = peer.until("CHATHISTORY").await;
    assert_eq!(
        ask,
        "CHATHISTORY AFTER #ops timestamp=2026-12-01T09:59:59.999Z 2"
    );
    let mut page = String::from(":irc.test BATCH +p1 chathistory #ops\r\n");
    page += &history_line(
        "p1",
        Some("m0"),
        "2026-12-01T10:00:00.000Z",
        "alice",
        "before",
    );
    page += &history_line(
        "p1",
        Some("m1"),
        "2026-12-01T10:00:01.000Z",
        "bob",
        "gap one",
    );
    page += ":irc.test BATCH -p1\r\n";
    peer.send(page.as_bytes()).await;
    let ask = peer.until("CHATHISTORY").await;
    assert_eq!(ask, "CHATHISTORY AFTER #ops msgid=m1 2");
    let mut page = String::from(":irc.test BATCH +p2 chathistory #ops\r\n");
    page += &history_line("p2", None, "2026-12-01T10:00:02.000Z", "human", "gap two");
    page += ":irc.test BATCH -p2\r\n";
    page += "@time=2026-12-01T10:00:03.000Z;msgid=m3 :human!u@h PRIVMSG #ops :live three\r\n";
    page += "PING :sync\r\n";
    peer.send(page.as_bytes()).await;
    // A short page ends the backfill: nothing more is asked for.
    let after = peer.lines_until("PONG").await;
    assert!(
        !after.iter().any(|l| l.starts_with("CHATHISTORY")),
        "{after:?}"
    );
    let expected = vec![
        row("2026-12-01T10:00:00.000000Z", "alice", "before"),
        row("2026-12-01T10:00:01.000000Z", "bob", "gap one"),
        row("2026-12-01T10:00:02.000000Z", "human", "gap two"),
        row("2026-12-01T10:00:03.000000Z", "human", "live three"),
    ];
    assert_eq!(wait_history(&history, 4).await, expected);

    // The server goes away and comes back: the new gap is filled, and copies
    // of stored messages (with or without msgid) are not stored twice.
    drop(peer);
    let mut peer = history_server_session(&listener, 2).await;
    let ask = peer.until("CHATHISTORY").await;
    assert_eq!(
        ask,
        "CHATHISTORY AFTER #ops timestamp=2026-12-01T10:00:02.999Z 2"
    );
    let mut page = String::from(":irc.test BATCH +q1 chathistory #ops\r\n");
    page += &history_line(
        "q1",
        None,
        "2026-12-01T10:00:03.000Z",
        "human",
        "live three",
    );
    page += &history_line(
        "q1",
        None,
        "2026-12-01T10:00:04.000Z",
        "carol",
        "during the outage",
    );
    page += ":irc.test BATCH -q1\r\n";
    peer.send(page.as_bytes()).await;
    // A full page without msgids pages on from the last message's time.
    let ask = peer.until("CHATHISTORY").await;
    assert_eq!(
        ask,
        "CHATHISTORY AFTER #ops timestamp=2026-12-01T10:00:04.000Z 2"
    );
    peer.send(b":irc.test BATCH +q2 chathistory #ops\r\n:irc.test BATCH -q2\r\nPING :sync\r\n")
        .await;
    peer.until("PONG").await;
    let mut expected = expected;
    expected.push(row(
        "2026-12-01T10:00:04.000000Z",
        "carol",
        "during the outage",
    ));
    assert_eq!(wait_history(&history, 5).await, expected);
    assert_eq!(history.read("#ops", None, 100).unwrap().len(), 5);
    backend.close().await;
}

#[tokio::test]
async fn without_chathistory_nothing_is_asked_and_a_refusal_changes_nothing() {
    let (listener, port) = listener().await;
    let history = History::open(&Location::Memory, Durability::Full).unwrap();
    let ops = NameRules::default().channel("#ops").unwrap();
    history
        .append(vec![NewMessage {
            channel: ops,
            nick: "alice".into(),
            nick_key: "alice".into(),
            text: "before".into(),
            time: None,
            msgid: None,
            origin: Origin::Here,
            kind: SenderKind::Agent,
            account: None,
        }])
        .await
        .unwrap();
    let mut settings = IrcSettings::new("127.0.0.1", port);
    settings.observer_nick = "obs".into();
    let backend = IrcBackend::start(settings, history.clone());

    // A server without the capability is never sent the command.
    let mut peer = Peer::accept(&listener).await;
    peer.until("CAP LS").await;
    peer.send(b":irc.test CAP * LS :server-time batch\r\n")
        .await;
    peer.until("CAP REQ").await;
    peer.send(b":irc.test CAP * ACK :server-time batch\r\n")
        .await;
    peer.until("CAP END").await;
    peer.send(b":irc.test 001 obs :Welcome\r\n").await;
    peer.until("JOIN #ops").await;
    peer.send(b":obs!sb@h JOIN #ops\r\nPING :sync\r\n").await;
    let said = peer.lines_until("PONG").await;
    assert!(
        !said.iter().any(|l| l.starts_with("CHATHISTORY")),
        "{said:?}"
    );
    drop(peer);

    // A server that offers it but refuses the request: recording goes on.
    let mut peer = history_server_session(&listener, 100).await;
    peer.until("CHATHISTORY AFTER #ops").await;
    peer.send(b":irc.test FAIL CHATHISTORY MESSAGE_ERROR AFTER #ops :history is unavailable\r\n:human!u@h PRIVMSG #ops :still recorded\r\n")
        .await;
    let stored = wait_history(&history, 2).await;
    assert_eq!(stored.len(), 2);
    assert_eq!(stored[1].2, "still recorded");
    backend.close().await;
}
