//! The body of the `irc_lines` fuzz target (`fuzz/` at the repository
//! root): whatever an IRC server sends, through the pieces that read it.
//! Built with the feature `fuzzing` only; the crate's tests run it on the
//! seed corpus with a stable toolchain.
//!
//! ```
//! switchboard_chat::fuzzing::irc_lines(b":irc.example 001 fuzz :Welcome\r\nPING :x\r\n");
//! ```

use std::{
    future::Future,
    pin::pin,
    sync::Arc,
    task::{Context, Poll, Waker},
    time::Duration,
};

use chrono::{TimeZone, Utc};
use irc_proto::{Command, Message, Response};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpListener,
    sync::mpsc,
};

use crate::{
    irc::{
        FloodSettings, Sasl,
        backend::channel_message,
        backfill::Backfill,
        connection::{Connection, Endpoint, Identity},
        isupport::ServerInfo,
        members::Membership,
        wire::{self, Incoming, MAX_LINE, WireLine},
    },
    names::Channel,
};

/// The commands a client may send on its own: registration, keepalive and
/// leaving. A server cannot make it send anything else (it is asked to join
/// nothing and say nothing here).
const UNPROMPTED: &[&str] = &[
    "CAP",
    "PASS",
    "NICK",
    "USER",
    "AUTHENTICATE",
    "PING",
    "PONG",
    "QUIT",
];

/// The most one connection may take to notice the server's end of stream.
const CONNECTION_DEADLINE: Duration = Duration::from_secs(10);

/// Feeds `data` as a server's byte stream to the line reader (through
/// buffers of a size taken from the first byte, so lines straddle them),
/// each line to the parser and to what follows the server's state
/// (ISUPPORT, NAMES and membership, history batches, channel messages with
/// CTCP), and the whole stream to a real [`Connection`] on loopback
/// (registration with CAP and SASL, then the session). Checks that nothing
/// panics, that no more than a line's worth is held, that every line the
/// client writes is one well-formed command of its own, and that each
/// command [`WireLine::new`] accepts parses back to the same parameters.
pub fn irc_lines(data: &[u8]) {
    let mut state = ServerState::new();
    let capacity = 1 + usize::from(data.first().copied().unwrap_or(0)) * 37;
    let mut reader = tokio::io::BufReader::with_capacity(capacity, data);
    let mut lines = wire::line_reader();
    // Each read consumes at least one byte, so this ends.
    for _ in 0..=data.len() {
        let read = block_on(wire::read_line(&mut reader, &mut lines))
            .expect("reading from memory never fails");
        assert!(
            lines.capacity() <= 2 * (MAX_LINE + 1) + capacity,
            "reserved {} bytes for one line",
            lines.capacity()
        );
        match read {
            Incoming::Eof => break,
            Incoming::TooLong => {}
            Incoming::Line(line) => {
                if let Some(message) = wire::parse(&line) {
                    state.follow(&message);
                }
            }
        }
    }
    converse(data);
}

/// What the observer keeps about the server while it talks.
struct ServerState {
    info: ServerInfo,
    members: Membership,
    backfill: Backfill,
}

impl ServerState {
    fn new() -> Self {
        let info = ServerInfo::default();
        let mut backfill = Backfill::default();
        let channel = info.rules.channel("#dev").expect("#dev is a channel");
        let last = Utc.timestamp_millis_opt(1_700_000_000_000).unwrap();
        let request = backfill.start(&channel, last, 3).expect("a request line");
        check_client_line(request.as_str());
        Self {
            info,
            members: Membership::default(),
            backfill,
        }
    }

    fn follow(&mut self, message: &Message) {
        let map = self.info.rules.casemapping;
        if let Some(next_page) = self.backfill.on_message(message, map) {
            check_client_line(next_page.as_str());
        }
        let _ = self.backfill.is_replay(message);
        let nick = wire::source_nick(message);
        match &message.command {
            Command::Response(Response::RPL_ISUPPORT, params) if params.len() > 2 => {
                self.info
                    .apply(params[1..params.len() - 1].iter().map(String::as_str));
                let rules = &self.info.rules;
                assert!(self.info.linelen >= 512, "LINELEN {}", self.info.linelen);
                assert!(!rules.chantypes.is_empty(), "no channel types");
                assert!(rules.nicklen > 0 && rules.channellen > 0, "{rules:?}");
            }
            Command::Response(Response::RPL_NAMREPLY, params) if params.len() >= 4 => {
                let key = map.fold(&params[2]);
                self.members.joined(key.clone(), &params[2]);
                self.members
                    .names(map, &self.info.prefixes, &key, &params[3]);
            }
            Command::Response(Response::RPL_ENDOFNAMES, params) if params.len() >= 2 => {
                let key = map.fold(&params[1]);
                self.members.names_end(&key);
                for member in self.members.members(&key).unwrap_or_default() {
                    assert!(
                        !member.is_empty() && !member.contains(' '),
                        "member {member:?}"
                    );
                }
            }
            Command::JOIN(chan, _, _) => {
                if let Some(nick) = nick {
                    self.members.add(map, &map.fold(chan), nick);
                }
            }
            Command::PART(chan, _) | Command::KICK(chan, _, _) => {
                if let Some(nick) = nick {
                    self.members.remove(map, &map.fold(chan), nick);
                }
            }
            Command::QUIT(_) => {
                if let Some(nick) = nick {
                    self.members.quit(map, nick);
                }
            }
            Command::NICK(new) => {
                if let Some(old) = nick {
                    self.members.rename(map, old, new);
                }
            }
            Command::PRIVMSG(target, text) | Command::NOTICE(target, text) => {
                if let Some(new) = channel_message(&self.info.rules, message, target, text) {
                    assert!(
                        !new.text.starts_with('\u{1}'),
                        "a CTCP kept: {:?}",
                        new.text
                    );
                    let again = self.info.rules.channel(new.channel.name());
                    assert_eq!(
                        again.ok().as_ref().map(Channel::key),
                        Some(new.channel.key())
                    );
                }
                echo("PRIVMSG", &[target, text]);
            }
            Command::PING(token, _) => echo("PONG", &[token]),
            _ => {}
        }
    }
}

/// Writes `params` back as a [`WireLine`] `name`; whatever it accepts must
/// be one line that parses to exactly these parameters.
fn echo(name: &'static str, params: &[&str]) {
    let Ok(line) = WireLine::new(name, params) else {
        return;
    };
    let line = line.as_str();
    check_client_line(line);
    let parsed = wire::parse(line.trim_end_matches("\r\n")).expect("checked above");
    let args: Vec<String> = match &parsed.command {
        Command::PRIVMSG(target, text) => vec![target.clone(), text.clone()],
        Command::PONG(token, None) => vec![token.clone()],
        other => panic!("{line:?} parsed as {other:?}"),
    };
    assert_eq!(args, params, "{line:?} changed its parameters");
}

/// One line a client writes: a CRLF-terminated command with no other line
/// break or NUL, which parses.
fn check_client_line(line: &str) {
    let body = line
        .strip_suffix("\r\n")
        .unwrap_or_else(|| panic!("not CRLF-terminated: {line:?}"));
    assert!(
        !body.contains(['\r', '\n', '\0']),
        "a second command could hide in {line:?}"
    );
    assert!(wire::parse(body).is_some(), "unparsable: {line:?}");
}

/// Plays `data` as the server of a real connection on loopback until the
/// client notices the end of the stream, and checks what it wrote.
fn converse(data: &[u8]) {
    let written = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime starts")
        .block_on(async {
            let listener = TcpListener::bind("127.0.0.1:0")
                .await
                .expect("a loopback port");
            let port = listener.local_addr().expect("a bound address").port();
            let sasl = data.windows(12).any(|w| w == b"AUTHENTICATE");
            let (events, mut heard) = mpsc::channel(64);
            let connection = Connection::spawn_with_fallbacks(
                Arc::new(Endpoint {
                    host: "127.0.0.1".into(),
                    port,
                    tls: None,
                    password: Some("server-password".into()),
                    register_timeout: CONNECTION_DEADLINE,
                    flood: FloodSettings::unlimited(),
                }),
                Identity {
                    nick: "fuzz".into(),
                    user: "fuzz".into(),
                    realname: "Fuzz".into(),
                    sasl: sasl.then(|| Sasl {
                        account: "fuzz".into(),
                        password: "secret".into(),
                    }),
                    suffix_on_collision: true,
                    persistent: false,
                },
                vec!["fuzz_".into(), "fz".into()],
                Some(events),
            );
            tokio::spawn(async move { while heard.recv().await.is_some() {} });
            let (mut stream, _) = tokio::time::timeout(CONNECTION_DEADLINE, listener.accept())
                .await
                .expect("the client connects")
                .expect("accepting on loopback");
            // Reset rather than linger: a fuzzer opens connections by the
            // hundred thousand.
            stream.set_zero_linger().expect("SO_LINGER");
            let (mut from_client, mut to_client) = stream.split();
            let mut written = Vec::new();
            let talk = async {
                // The client may stop reading at any point (a fatal error).
                let _ = to_client.write_all(data).await;
                let _ = to_client.shutdown().await;
            };
            let listen = from_client.read_to_end(&mut written);
            let (_, read) =
                tokio::time::timeout(CONNECTION_DEADLINE, async { tokio::join!(talk, listen) })
                    .await
                    .expect("the client notices the end of the stream");
            let _ = read;
            drop(connection);
            written
        });
    let text = String::from_utf8(written).expect("the client writes UTF-8");
    for line in text.split_inclusive("\r\n") {
        check_client_line(line);
        let command = line.split(' ').next().unwrap_or_default().trim_end();
        assert!(
            UNPROMPTED.contains(&command),
            "the server made the client send {line:?}"
        );
    }
}

/// Runs a future that never waits (reading from memory) to completion.
fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("reading from memory never waits"),
    }
}
