//! One IRC connection, owned by one task: dial, register (CAP LS 302, SASL
//! PLAIN, NICK/USER), then serve commands and read the server until the
//! connection drops; reconnect with exponential backoff and jitter, register
//! again, rejoin.
//!
//! The observer and every sender are instances of this actor. Callers talk
//! to it through a [`Connection`] handle: `join` a channel, `send` lines to a
//! channel. A send replies only once the server has processed the lines (a
//! `PING` written after them has been answered), so "sent" never means "still
//! in a buffer". Everything the server says after registration is also
//! forwarded as an [`Event`] to whoever asked for events (the observer).

use std::{
    collections::{HashMap, HashSet, VecDeque},
    sync::Arc,
    time::Duration,
};

use irc_proto::{Command, Message, Response};
use tokio::{
    io::{AsyncWriteExt, BufReader, ReadHalf, WriteHalf},
    sync::{mpsc, oneshot, watch},
    time::Instant,
};

use super::{
    flood::{Bucket, FloodSettings},
    isupport::ServerInfo,
    register::{Progress, Registration},
    tls::{Stream, Tls, dial},
    wire::{self, Incoming, WireLine},
};
use crate::{names::Channel, text::split_to_fit};

/// Lines a connection sends before PONGs have to catch up; keeps a stuck
/// server from growing our queue without bound.
const MAX_QUEUED_LINES: usize = 10_000;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const KEEPALIVE_IDLE: Duration = Duration::from_secs(90);
const KEEPALIVE_GRACE: Duration = Duration::from_secs(60);
/// After the server renames us, the nick is claimed back at a random moment
/// within this window: two observers renamed by the same collision (same
/// nick on two servers that just met) would otherwise claim the same nick
/// at the same instant on their own servers and collide again, round after
/// round.
const RECLAIM_WINDOW: Duration = Duration::from_secs(1);
/// When every nick of its own was taken, claiming starts over this long
/// after: whoever holds the nick may leave (the other side of a netsplit's
/// agent, a person who borrowed it).
const RECLAIM_RETRY: Duration = Duration::from_secs(30);

/// Where and how to connect, shared by every connection of a backend.
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub host: String,
    pub port: u16,
    pub tls: Option<Tls>,
    /// Server password (`PASS`), if the network wants one.
    pub password: Option<String>,
    pub register_timeout: Duration,
    pub flood: FloodSettings,
}

/// Who a connection is.
#[derive(Debug, Clone)]
pub struct Identity {
    pub nick: String,
    pub user: String,
    pub realname: String,
    pub sasl: Option<Sasl>,
    /// On `433 nick in use`: try `nick_`, `nick__`, … instead of failing.
    pub suffix_on_collision: bool,
    /// Keep reconnecting through errors a sender gives up on (nick in use,
    /// per-IP limit): the observer must come back.
    pub persistent: bool,
}

/// SASL PLAIN credentials.
#[derive(Clone)]
pub struct Sasl {
    pub account: String,
    pub password: String,
}

impl std::fmt::Debug for Sasl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Sasl {{ account: {:?}, password: <hidden> }}",
            self.account
        )
    }
}

/// Why a connection operation failed. Messages are written for the agent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConnError {
    #[error("cannot reach the IRC server {0}")]
    Unreachable(String),
    #[error("the IRC server {server} did not finish registration within {} s", .after.as_secs_f64())]
    RegistrationTimeout { server: String, after: Duration },
    #[error("the nick {0} is already in use on the IRC network; choose another")]
    NickInUse(String),
    #[error("the IRC server refused the nick {nick}: {reason}")]
    BadNick { nick: String, reason: String },
    #[error(
        "cannot log in to the IRC network as account {account} (SASL PLAIN): {reason}; check the account and password"
    )]
    SaslFailed { account: String, reason: String },
    #[error(
        "the IRC server refused another connection from this host: its per-IP connection limit is reached (it said: {0}); raise the limit (InspIRCd <connect localmax/globalmax>, ngIRCd MaxConnectionsIP, Solanum number_per_ip) or use fewer sender nicks"
    )]
    PerIpLimit(String),
    #[error("the IRC server closed the connection: {0}")]
    Closed(String),
    #[error("cannot join {channel}: {reason}")]
    Join { channel: String, reason: String },
    #[error("the IRC server rejected the message to {channel}: {reason}")]
    Rejected { channel: String, reason: String },
    #[error("the connection to the IRC server dropped before it confirmed the lines")]
    Dropped,
    #[error("{0}")]
    Unsafe(String),
    #[error("the connection was shut down")]
    Shutdown,
}

impl ConnError {
    /// Errors after which reconnecting is pointless: bad credentials or a
    /// refused nick always; a taken nick or a per-IP limit for a sender
    /// (the caller is told), not for a persistent connection (the observer).
    fn is_fatal(&self, persistent: bool) -> bool {
        match self {
            Self::SaslFailed { .. } | Self::BadNick { .. } => true,
            Self::NickInUse(_) | Self::PerIpLimit(_) => !persistent,
            _ => false,
        }
    }
}

/// The connection's state, as seen from outside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    Connecting,
    Registered {
        nick: String,
    },
    /// Down; reconnecting after a pause.
    Disconnected(ConnError),
    /// Down for good (bad credentials, nick refused, per-IP limit).
    Failed(ConnError),
}

/// What the server said, for the owner of the connection.
#[derive(Debug)]
pub enum Event {
    /// Registration completed (again): the nick in use and the caps enabled.
    Registered { nick: String, caps: HashSet<String> },
    /// Any message after registration.
    Message(Message),
    /// The connection dropped; membership is unknown until the next NAMES.
    Disconnected,
}

/// A successful send.
#[derive(Debug)]
pub struct Sent {
    /// Lines on the wire (after splitting to fit the line length).
    pub lines: usize,
}

/// Called with the connection's nick and the texts of the wire lines (after
/// splitting) just before they are written, so a caller can start expecting
/// them back.
pub(crate) type BeforeWrite = Box<dyn FnOnce(&str, &[&str]) + Send>;

enum Request {
    Join {
        channel: Channel,
        reply: oneshot::Sender<Result<(), ConnError>>,
    },
    Send {
        channel: Channel,
        lines: Vec<String>,
        before_write: BeforeWrite,
        reply: oneshot::Sender<Result<Sent, ConnError>>,
    },
    /// Leave a channel (and stop rejoining it).
    Part(Channel),
    /// One command for the server.
    Command(WireLine),
    Quit,
}

/// A handle to a connection task. Dropping every handle ends the task.
#[derive(Clone)]
pub struct Connection {
    requests: mpsc::Sender<Request>,
    status: watch::Receiver<Status>,
    info: watch::Receiver<ServerInfo>,
}

impl Connection {
    /// Starts a connection task. `events` receives everything the server
    /// says after registration.
    pub fn spawn(
        endpoint: Arc<Endpoint>,
        identity: Identity,
        events: Option<mpsc::Sender<Event>>,
    ) -> Self {
        Self::spawn_with_fallbacks(endpoint, identity, Vec::new(), events)
    }

    /// Like [`Connection::spawn`], with nicks to try in turn, at each
    /// registration, when the identity's nick is taken (`433`); one the
    /// server refuses as erroneous (`432`: too long for its `NICKLEN`) is
    /// followed by the next shorter one.
    pub(crate) fn spawn_with_fallbacks(
        endpoint: Arc<Endpoint>,
        identity: Identity,
        fallbacks: Vec<String>,
        events: Option<mpsc::Sender<Event>>,
    ) -> Self {
        let (requests, inbox) = mpsc::channel(256);
        let (status_tx, status) = watch::channel(Status::Connecting);
        let (info_tx, info) = watch::channel(ServerInfo::default());
        let actor = Actor {
            endpoint,
            identity,
            fallbacks,
            events,
            inbox,
            status: status_tx,
            info: info_tx,
            wanted: HashMap::new(),
            parked: VecDeque::new(),
        };
        tokio::spawn(actor.run());
        Self {
            requests,
            status,
            info,
        }
    }

    /// Joins `channel` (and keeps it joined across reconnects).
    pub async fn join(&self, channel: &Channel) -> Result<(), ConnError> {
        let (reply, rx) = oneshot::channel();
        self.requests
            .send(Request::Join {
                channel: channel.clone(),
                reply,
            })
            .await
            .map_err(|_| ConnError::Shutdown)?;
        rx.await.map_err(|_| ConnError::Shutdown)?
    }

    /// Sends `lines` to `channel` (joining it first if needed). Resolves when
    /// the server has processed them; nothing is written if the caller has
    /// stopped waiting by the time the connection is ready.
    pub async fn send(
        &self,
        channel: &Channel,
        lines: Vec<String>,
        before_write: BeforeWrite,
    ) -> Result<Sent, ConnError> {
        let (reply, rx) = oneshot::channel();
        self.requests
            .send(Request::Send {
                channel: channel.clone(),
                lines,
                before_write,
                reply,
            })
            .await
            .map_err(|_| ConnError::Shutdown)?;
        rx.await.map_err(|_| ConnError::Shutdown)?
    }

    /// Leaves `channel` and stops rejoining it after reconnects. Best effort,
    /// like [`Connection::command`]: a connection that is down is simply not
    /// in the channel when it comes back.
    pub fn part(&self, channel: &Channel) {
        if let Err(e) = self.requests.try_send(Request::Part(channel.clone())) {
            tracing::debug!(error = %e, "a PART was dropped");
        }
    }

    /// Writes `line` on the live connection,
    /// paced like everything else. Best effort: a line that finds the
    /// connection down, or its inbox full, is dropped (and logged), because
    /// what it asked for belongs to the session that is gone. Never waits,
    /// so the task reading this connection's events can call it.
    pub fn command(&self, line: WireLine) {
        if let Err(e) = self.requests.try_send(Request::Command(line)) {
            tracing::debug!(error = %e, "a command to the IRC server was dropped");
        }
    }

    /// Whether `other` is a handle on this same connection.
    pub(crate) fn is(&self, other: &Connection) -> bool {
        self.requests.same_channel(&other.requests)
    }

    /// Asks the task to send QUIT and stop.
    pub fn quit(&self) {
        let _ = self.requests.try_send(Request::Quit);
    }

    pub fn status(&self) -> Status {
        self.status.borrow().clone()
    }

    pub(crate) fn status_changes(&self) -> watch::Receiver<Status> {
        self.status.clone()
    }

    /// Waits until the connection is registered or has failed for good.
    pub async fn ready(&self) -> Result<(), ConnError> {
        let mut status = self.status.clone();
        let result = status
            .wait_for(|s| matches!(s, Status::Registered { .. } | Status::Failed(_)))
            .await
            .map_err(|_| ConnError::Shutdown)?;
        match &*result {
            Status::Failed(e) => Err(e.clone()),
            _ => Ok(()),
        }
    }

    /// What the server announced in ISUPPORT (defaults until it has).
    pub fn info(&self) -> ServerInfo {
        self.info.borrow().clone()
    }
}

/// Exponential backoff with jitter: 250 ms doubling to 10 s, ±25 %.
struct Backoff {
    next: Duration,
    seed: u64,
}

impl Backoff {
    const FIRST: Duration = Duration::from_millis(250);
    const MAX: Duration = Duration::from_secs(10);

    fn new() -> Self {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
            | 1;
        Self {
            next: Self::FIRST,
            seed,
        }
    }

    fn reset(&mut self) {
        self.next = Self::FIRST;
    }

    fn step(&mut self) -> Duration {
        // xorshift: jitter needs spread, not secrecy.
        self.seed ^= self.seed << 13;
        self.seed ^= self.seed >> 7;
        self.seed ^= self.seed << 17;
        let factor = 0.75 + (self.seed % 1000) as f64 / 2000.0;
        let delay = self.next.mul_f64(factor);
        self.next = (self.next * 2).min(Self::MAX);
        delay
    }
}

/// A send waiting for its channel to be joined.
struct Parked {
    channel: Channel,
    lines: Vec<String>,
    before_write: BeforeWrite,
    reply: oneshot::Sender<Result<Sent, ConnError>>,
}

struct Actor {
    endpoint: Arc<Endpoint>,
    identity: Identity,
    /// Nicks to try when the identity's is taken; see
    /// [`Connection::spawn_with_fallbacks`].
    fallbacks: Vec<String>,
    events: Option<mpsc::Sender<Event>>,
    inbox: mpsc::Receiver<Request>,
    status: watch::Sender<Status>,
    info: watch::Sender<ServerInfo>,
    /// Channels to be in (key → channel), rejoined after every reconnect.
    wanted: HashMap<String, Channel>,
    /// Sends whose caller is waiting through an outage.
    parked: VecDeque<Parked>,
}

enum End {
    Quit,
    HandlesGone,
}

impl Actor {
    async fn run(mut self) {
        let mut backoff = Backoff::new();
        loop {
            let server = format!("{}:{}", self.endpoint.host, self.endpoint.port);
            match self.session(&mut backoff).await {
                Ok(End::Quit | End::HandlesGone) => {
                    self.status
                        .send_replace(Status::Failed(ConnError::Shutdown));
                    return;
                }
                Err(e) if e.is_fatal(self.identity.persistent) => {
                    tracing::warn!(nick = %self.identity.nick, %server, error = %e, "IRC connection failed for good");
                    self.fail_parked(&e);
                    self.status.send_replace(Status::Failed(e.clone()));
                    // Answer whatever still arrives, until every handle is gone.
                    while let Some(request) = self.inbox.recv().await {
                        refuse(request, &e);
                    }
                    return;
                }
                Err(e) => {
                    if matches!(e, ConnError::NickInUse(_)) {
                        // Not the network's fault: someone holds our nick.
                        tracing::warn!(nick = %self.identity.nick, %server, error = %e, "IRC nick taken; trying again");
                    } else {
                        tracing::info!(nick = %self.identity.nick, %server, error = %e, "IRC connection down; reconnecting");
                    }
                    self.status.send_replace(Status::Disconnected(e));
                    if let Some(events) = &self.events {
                        let _ = events.send(Event::Disconnected).await;
                    }
                    let pause = backoff.step();
                    if !self.pause(pause).await {
                        return;
                    }
                }
            }
        }
    }

    /// Sleeps `pause`, still accepting joins (they will be made on the next
    /// registration) and parking sends. False when every handle is gone.
    async fn pause(&mut self, pause: Duration) -> bool {
        let until = Instant::now() + pause;
        loop {
            tokio::select! {
                () = tokio::time::sleep_until(until) => return true,
                request = self.inbox.recv() => match request {
                    None => return false,
                    Some(Request::Quit) => return false,
                    Some(Request::Join { channel, reply }) => {
                        // Remembered; answered once joined after reconnect.
                        self.wanted.insert(channel.key().to_owned(), channel.clone());
                        self.parked.push_back(join_as_send(channel, reply));
                    }
                    Some(Request::Send { channel, lines, before_write, reply }) => {
                        self.parked.push_back(Parked { channel, lines, before_write, reply });
                    }
                    Some(Request::Part(channel)) => {
                        self.wanted.remove(channel.key());
                    }
                    Some(Request::Command(line)) => {
                        tracing::debug!(line = %line.as_str().trim_end(), "not sent: the IRC connection is down");
                    }
                }
            }
        }
    }

    fn fail_parked(&mut self, error: &ConnError) {
        for parked in self.parked.drain(..) {
            let _ = parked.reply.send(Err(error.clone()));
        }
    }

    async fn session(&mut self, backoff: &mut Backoff) -> Result<End, ConnError> {
        let endpoint = self.endpoint.clone();
        let server = format!("{}:{}", endpoint.host, endpoint.port);
        self.status.send_replace(Status::Connecting);
        let stream = dial(
            &endpoint.host,
            endpoint.port,
            endpoint.tls.as_ref(),
            CONNECT_TIMEOUT,
        )
        .await
        .map_err(|e| ConnError::Unreachable(format!("{server}: {e}")))?;
        let (reader, writer) = tokio::io::split(stream);
        let mut session = Session {
            reader: BufReader::with_capacity(16 * 1024, reader),
            writer,
            buf: wire::line_reader(),
            bucket: Bucket::new(endpoint.flood),
            queue: VecDeque::new(),
            nick: self.identity.nick.clone(),
            userhost: None,
            info: ServerInfo::default(),
            caps: HashSet::new(),
            joined: HashSet::new(),
            joining: HashMap::new(),
            barriers: VecDeque::new(),
            next_barrier: 0,
            last_heard: Instant::now(),
            pinged: false,
            reclaiming: None,
            reclaim_at: None,
            reclaim_rounds: 0,
        };
        let deadline = Instant::now() + endpoint.register_timeout;
        let register = session.register(&endpoint, &self.identity, &self.fallbacks);
        tokio::time::timeout_at(deadline, register)
            .await
            .map_err(|_| ConnError::RegistrationTimeout {
                server: server.clone(),
                after: endpoint.register_timeout,
            })??;
        backoff.reset();
        tracing::info!(nick = %session.nick, %server, caps = ?session.caps, "IRC connection registered");
        self.status.send_replace(Status::Registered {
            nick: session.nick.clone(),
        });
        self.info.send_replace(session.info.clone());
        if let Some(events) = &self.events {
            let _ = events
                .send(Event::Registered {
                    nick: session.nick.clone(),
                    caps: session.caps.clone(),
                })
                .await;
        }
        for channel in self.wanted.values() {
            session.request_join(channel);
        }
        let parked: Vec<Parked> = self.parked.drain(..).collect();
        for p in parked {
            session.start_send(p, &mut self.wanted);
        }
        let result = self.serve(&mut session).await;
        // Whatever was in flight is unconfirmed.
        let error = match &result {
            Ok(_) => ConnError::Shutdown,
            Err(_) => ConnError::Dropped,
        };
        for barrier in session.barriers.drain(..) {
            let _ = barrier.reply.send(Err(error.clone()));
        }
        for (_, waiting) in session.joining.drain() {
            for w in waiting {
                // Not yet written: they can wait for the next connection.
                self.parked.push_back(w);
            }
        }
        result
    }

    async fn serve(&mut self, s: &mut Session) -> Result<End, ConnError> {
        loop {
            s.flush_ready().await?;
            let wake = s.next_write_at();
            let reclaim_at = s.reclaim_at;
            let keepalive = s.last_heard
                + if s.pinged {
                    KEEPALIVE_GRACE
                } else {
                    KEEPALIVE_IDLE
                };
            tokio::select! {
                incoming = wire::read_line(&mut s.reader, &mut s.buf) => {
                    match incoming.map_err(|e| ConnError::Closed(e.to_string()))? {
                        Incoming::Eof => return Err(ConnError::Closed("end of stream".into())),
                        Incoming::TooLong => tracing::warn!("discarded an over-long line from the IRC server"),
                        Incoming::Line(line) => {
                            s.last_heard = Instant::now();
                            s.pinged = false;
                            if let Some(message) = wire::parse(&line) {
                                self.handle(s, message).await?;
                            }
                        }
                    }
                }
                request = self.inbox.recv() => match request {
                    None => {
                        s.enqueue(WireLine::new("QUIT", &["switchboard: done"]));
                        s.flush_all().await;
                        return Ok(End::HandlesGone);
                    }
                    Some(Request::Quit) => {
                        s.enqueue(WireLine::new("QUIT", &["switchboard: idle"]));
                        s.flush_all().await;
                        return Ok(End::Quit);
                    }
                    Some(Request::Join { channel, reply }) => {
                        self.wanted.insert(channel.key().to_owned(), channel.clone());
                        if s.joined.contains(channel.key()) {
                            let _ = reply.send(Ok(()));
                        } else {
                            s.start_send(join_as_send(channel, reply), &mut self.wanted);
                        }
                    }
                    Some(Request::Send { channel, lines, before_write, reply }) => {
                        s.start_send(Parked { channel, lines, before_write, reply }, &mut self.wanted);
                    }
                    Some(Request::Part(channel)) => {
                        self.wanted.remove(channel.key());
                        if s.joined.contains(channel.key()) {
                            s.enqueue(WireLine::new("PART", &[channel.name()]));
                        }
                    }
                    Some(Request::Command(line)) => s.enqueue(Ok(line)),
                },
                () = sleep_until_opt(wake) => {}
                () = sleep_until_opt(reclaim_at) => {
                    s.reclaim_at = None;
                    self.claim(s);
                }
                () = tokio::time::sleep_until(keepalive) => {
                    if s.pinged {
                        return Err(ConnError::Closed("no reply to PING (ping timeout)".into()));
                    }
                    s.pinged = true;
                    s.enqueue(WireLine::new("PING", &["keepalive"]));
                }
            }
        }
    }

    /// The identity's nick, then its fallbacks.
    fn nicks(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.identity.nick.as_str())
            .chain(self.fallbacks.iter().map(String::as_str))
    }

    /// Asks for the nick `s.reclaiming` points at; when none is left, keeps
    /// the one the server gave and starts over after [`RECLAIM_RETRY`].
    fn claim(&self, s: &mut Session) {
        let next = s.reclaiming.and_then(|i| self.nicks().nth(i));
        match next {
            Some(nick) => s.enqueue(WireLine::new("NICK", &[nick])),
            None => {
                if s.reclaim_rounds == 0 {
                    tracing::warn!(nick = %s.nick, retry_s = RECLAIM_RETRY.as_secs(), "no nick of its own is free; keeping the one the IRC server gave until one is");
                }
                s.reclaim_rounds += 1;
                s.reclaiming = Some(0);
                s.reclaim_at = Some(Instant::now() + RECLAIM_RETRY + reclaim_delay());
            }
        }
    }

    async fn handle(&mut self, s: &mut Session, message: Message) -> Result<(), ConnError> {
        let from_self = wire::source_nick(&message).is_some_and(|n| {
            s.info.rules.casemapping.fold(n) == s.info.rules.casemapping.fold(&s.nick)
        });
        match &message.command {
            Command::PING(token, _) => {
                s.enqueue_pong(token);
            }
            Command::PONG(_, token) => {
                let token = token.as_deref().unwrap_or("");
                s.pong(token);
            }
            Command::ERROR(text) => return Err(classify_error(text)),
            Command::JOIN(chan, _, _) if from_self => {
                if let Some(irc_proto::Prefix::Nickname(_, user, host)) = &message.prefix {
                    s.userhost = Some(format!("{user}@{host}"));
                }
                let key = s.info.rules.casemapping.fold(chan);
                s.joined.insert(key.clone());
                if let Some(waiting) = s.joining.remove(&key) {
                    for w in waiting {
                        s.write_lines(w);
                    }
                }
            }
            Command::PART(chan, _) if from_self => {
                s.joined.remove(&s.info.rules.casemapping.fold(chan));
            }
            Command::KICK(chan, target, _)
                if s.info.rules.casemapping.fold(target)
                    == s.info.rules.casemapping.fold(&s.nick) =>
            {
                let key = s.info.rules.casemapping.fold(chan);
                s.joined.remove(&key);
                // Kicked: try once to come back, so the channel stays served.
                if let Some(channel) = self.wanted.get(&key) {
                    s.request_join(channel);
                }
            }
            Command::NICK(new) if from_self => {
                // The server may rename us (a collision after a netsplit):
                // whoever asks who this connection is must hear the new nick.
                s.nick = new.clone();
                self.status
                    .send_replace(Status::Registered { nick: new.clone() });
                let ours = self.nicks().any(|n| n == new.as_str());
                s.reclaiming = if ours { None } else { Some(0) };
                s.reclaim_at = (!ours).then(|| Instant::now() + reclaim_delay());
                if ours {
                    s.reclaim_rounds = 0;
                }
                if !ours {
                    tracing::info!(nick = %new, "the IRC server renamed this connection; claiming a nick of its own back");
                }
            }
            Command::Response(Response::ERR_NICKNAMEINUSE | Response::ERR_ERRONEOUSNICKNAME, _)
                if s.reclaiming.is_some() =>
            {
                s.reclaiming = s.reclaiming.map(|i| i + 1);
                self.claim(s);
            }
            Command::Response(Response::RPL_ISUPPORT, params) if params.len() > 2 => {
                s.info
                    .apply(params[1..params.len() - 1].iter().map(String::as_str));
                self.info.send_replace(s.info.clone());
            }
            Command::Response(code, params) => s.numeric(*code, params),
            _ => {}
        }
        if let Some(events) = &self.events {
            events
                .send(Event::Message(message))
                .await
                .map_err(|_| ConnError::Shutdown)?;
        }
        Ok(())
    }
}

/// A join is a send of no lines: it resolves once the channel is joined and
/// the server has answered the PING after the JOIN.
fn join_as_send(channel: Channel, reply: oneshot::Sender<Result<(), ConnError>>) -> Parked {
    let (sent_tx, sent_rx) = oneshot::channel();
    let mut reply = reply;
    tokio::spawn(async move {
        tokio::select! {
            result = sent_rx => {
                let _ = reply.send(result.unwrap_or(Err(ConnError::Shutdown)).map(|_| ()));
            }
            // The caller gave up: dropping `sent_rx` tells the connection
            // to join nothing for it.
            () = reply.closed() => {}
        }
    });
    Parked {
        channel,
        lines: Vec::new(),
        before_write: Box::new(|_: &str, _: &[&str]| {}),
        reply: sent_tx,
    }
}

fn refuse(request: Request, error: &ConnError) {
    match request {
        Request::Join { reply, .. } => {
            let _ = reply.send(Err(error.clone()));
        }
        Request::Send { reply, .. } => {
            let _ = reply.send(Err(error.clone()));
        }
        Request::Part(_) | Request::Command(_) | Request::Quit => {}
    }
}

/// An `ERROR` line: the server is closing the link. Per-IP limits get their
/// own error so the user learns which setting to change.
pub(super) fn classify_error(text: &str) -> ConnError {
    let lower = text.to_ascii_lowercase();
    if lower.contains("connections") && (lower.contains("host") || lower.contains(" ip")) {
        ConnError::PerIpLimit(text.to_owned())
    } else {
        ConnError::Closed(text.to_owned())
    }
}

/// A random moment within [`RECLAIM_WINDOW`] from now.
fn reclaim_delay() -> Duration {
    let window = RECLAIM_WINDOW.as_micros() as u64;
    Duration::from_micros(uuid::Uuid::new_v4().as_u64_pair().0 % window)
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Lines waiting for a `PONG` that proves the server processed them.
struct Barrier {
    /// The send's number, which its queued lines carry.
    id: u64,
    token: String,
    channel: Channel,
    lines: usize,
    error: Option<String>,
    reply: oneshot::Sender<Result<Sent, ConnError>>,
}

/// A line waiting to be written.
struct Queued {
    line: WireLine,
    /// The send it belongs to (its barrier's id), if any: a send whose
    /// caller gave up (a cancelled call, a timeout) writes no more lines.
    send: Option<u64>,
    /// Whether it is that send's last line (the PING that confirms it).
    last: bool,
}

impl From<WireLine> for Queued {
    fn from(line: WireLine) -> Self {
        Self {
            line,
            send: None,
            last: false,
        }
    }
}

/// State of one live connection.
struct Session {
    reader: BufReader<ReadHalf<Box<dyn Stream>>>,
    writer: WriteHalf<Box<dyn Stream>>,
    buf: switchboard_lines::LineReader,
    bucket: Bucket,
    /// Lines to write, paced by the bucket; PONGs jump the queue.
    queue: VecDeque<Queued>,
    nick: String,
    /// Our `user@host` as the server shows it (learnt from our JOIN echo).
    userhost: Option<String>,
    info: ServerInfo,
    caps: HashSet<String>,
    joined: HashSet<String>,
    /// Sends waiting for their channel's JOIN, by channel key.
    joining: HashMap<String, Vec<Parked>>,
    barriers: VecDeque<Barrier>,
    next_barrier: u64,
    last_heard: Instant,
    pinged: bool,
    /// After the server renamed us to a nick we did not ask for (a
    /// collision across servers leaves the UID), the index of the nick
    /// being claimed back among the identity's and its fallbacks.
    reclaiming: Option<usize>,
    /// When to start claiming back (see [`RECLAIM_WINDOW`]).
    reclaim_at: Option<Instant>,
    /// Rounds of claiming back that found every nick of its own taken.
    reclaim_rounds: u32,
}

impl Session {
    /// Writes `lines` at once, unpaced (registration, and the way out).
    async fn write_now(&mut self, lines: &[WireLine]) -> Result<(), ConnError> {
        let bytes: String = lines.iter().map(WireLine::as_str).collect();
        self.writer
            .write_all(bytes.as_bytes())
            .await
            .map_err(|e| ConnError::Closed(e.to_string()))
    }

    /// Registration (see [`Registration`]), up to `001`.
    async fn register(
        &mut self,
        endpoint: &Endpoint,
        identity: &Identity,
        fallbacks: &[String],
    ) -> Result<(), ConnError> {
        let mut registration = Registration::new(identity, fallbacks);
        let start = registration.start(endpoint.password.as_deref())?;
        self.write_now(&start).await?;
        loop {
            let line = match wire::read_line(&mut self.reader, &mut self.buf)
                .await
                .map_err(|e| ConnError::Closed(e.to_string()))?
            {
                Incoming::Eof => {
                    return Err(ConnError::Closed(
                        "the server closed the connection during registration".into(),
                    ));
                }
                Incoming::TooLong => continue,
                Incoming::Line(line) => line,
            };
            let Some(message) = wire::parse(&line) else {
                continue;
            };
            match registration.on_message(&message)? {
                Progress::Write(lines) => self.write_now(&lines).await?,
                Progress::Welcomed => break,
            }
        }
        self.nick = registration.nick().to_owned();
        self.caps = registration.into_caps();
        Ok(())
    }

    fn request_join(&mut self, channel: &Channel) {
        if let Ok(line) = WireLine::new("JOIN", &[channel.name()]) {
            self.queue.push_back(line.into());
        }
    }

    /// Starts a send: joins first if needed, else writes the lines.
    fn start_send(&mut self, send: Parked, wanted: &mut HashMap<String, Channel>) {
        if send.reply.is_closed() {
            return; // The caller gave up while we were away: write nothing.
        }
        let key = send.channel.key().to_owned();
        wanted.insert(key.clone(), send.channel.clone());
        if self.joined.contains(&key) {
            self.write_lines(send);
        } else {
            if !self.joining.contains_key(&key) {
                self.request_join(&send.channel);
            }
            self.joining.entry(key).or_default().push(send);
        }
    }

    /// Largest text that fits one PRIVMSG to `channel` as relayed by the
    /// server: `:nick!user@host PRIVMSG #chan :text` within LINELEN - 2.
    fn text_budget(&self, channel: &Channel) -> usize {
        // Until our JOIN echo shows it, assume a long user@host.
        let userhost = self.userhost.as_ref().map_or(10 + 1 + 63, String::len);
        let overhead =
            1 + self.nick.len() + 1 + userhost + " PRIVMSG ".len() + channel.name().len() + 2;
        (self.info.linelen - 2).saturating_sub(overhead)
    }

    fn write_lines(&mut self, send: Parked) {
        if send.reply.is_closed() {
            return;
        }
        let budget = self.text_budget(&send.channel);
        let pieces: Vec<&str> = send
            .lines
            .iter()
            .flat_map(|l| split_to_fit(l, budget))
            .collect();
        // The lines, then the PING whose PONG confirms them.
        let token = format!("sb{}", self.next_barrier + 1);
        let wire_lines: Result<Vec<WireLine>, _> = pieces
            .iter()
            .map(|piece| WireLine::new("PRIVMSG", &[send.channel.name(), piece]))
            .chain([WireLine::new("PING", &[&token])])
            .collect();
        let wire_lines = match wire_lines {
            Ok(lines) => lines,
            Err(e) => {
                let _ = send.reply.send(Err(ConnError::Unsafe(e.to_string())));
                return;
            }
        };
        if self.queue.len() + wire_lines.len() > MAX_QUEUED_LINES {
            let _ = send.reply.send(Err(ConnError::Rejected {
                channel: send.channel.name().to_owned(),
                reason: "too many lines are already queued on this connection; try again shortly"
                    .into(),
            }));
            return;
        }
        (send.before_write)(&self.nick, &pieces);
        self.next_barrier += 1;
        let id = self.next_barrier;
        let count = wire_lines.len();
        self.queue
            .extend(wire_lines.into_iter().enumerate().map(|(i, line)| Queued {
                line,
                send: Some(id),
                last: i + 1 == count,
            }));
        self.barriers.push_back(Barrier {
            id,
            token,
            channel: send.channel,
            lines: pieces.len(),
            error: None,
            reply: send.reply,
        });
    }

    fn enqueue(&mut self, line: Result<WireLine, wire::UnsafeParam>) {
        match line {
            Ok(line) => self.queue.push_back(line.into()),
            Err(e) => tracing::warn!(error = %e, "an IRC command was not sent"),
        }
    }

    fn enqueue_pong(&mut self, token: &str) {
        if let Ok(line) = WireLine::new("PONG", &[token]) {
            self.queue.push_front(line.into());
        }
    }

    fn pong(&mut self, token: &str) {
        while let Some(front) = self.barriers.front() {
            let done = front.token == token;
            if !done && !self.barriers.iter().any(|b| b.token == token) {
                return; // a keepalive PONG
            }
            let barrier = self.barriers.pop_front().expect("front exists");
            let result = match barrier.error {
                Some(reason) => Err(ConnError::Rejected {
                    channel: barrier.channel.name().to_owned(),
                    reason,
                }),
                None => Ok(Sent {
                    lines: barrier.lines,
                }),
            };
            let _ = barrier.reply.send(result);
            if done {
                return;
            }
        }
    }

    /// Numerics that answer our joins and sends.
    fn numeric(&mut self, code: Response, params: &[String]) {
        let reason = || params.last().cloned().unwrap_or_default();
        let target_key = || params.get(1).map(|c| self.info.rules.casemapping.fold(c));
        match code {
            Response::ERR_NOSUCHCHANNEL
            | Response::ERR_TOOMANYCHANNELS
            | Response::ERR_CHANNELISFULL
            | Response::ERR_INVITEONLYCHAN
            | Response::ERR_BANNEDFROMCHAN
            | Response::ERR_BADCHANNELKEY
            | Response::ERR_BADCHANMASK => {
                if let Some(key) = target_key()
                    && let Some(waiting) = self.joining.remove(&key)
                {
                    for w in waiting {
                        let _ = w.reply.send(Err(ConnError::Join {
                            channel: w.channel.name().to_owned(),
                            reason: reason(),
                        }));
                    }
                }
            }
            Response::ERR_CANNOTSENDTOCHAN
            | Response::ERR_NOSUCHNICK
            | Response::ERR_NOTEXTTOSEND => {
                if let Some(key) = target_key() {
                    for barrier in self.barriers.iter_mut().filter(|b| b.channel.key() == key) {
                        barrier.error.get_or_insert_with(reason);
                    }
                }
            }
            _ => {}
        }
    }

    fn next_write_at(&mut self) -> Option<Instant> {
        if self.queue.is_empty() {
            return None;
        }
        let now = Instant::now();
        Some(now + self.bucket.delay(now))
    }

    /// Whether the caller of send `id` has given up on it.
    fn abandoned(&self, id: u64) -> bool {
        self.barriers
            .iter()
            .find(|b| b.id == id)
            .is_none_or(|b| b.reply.is_closed())
    }

    /// Writes every queued line the bucket allows now, leaving out (without
    /// spending the bucket) the lines of sends whose callers gave up.
    async fn flush_ready(&mut self) -> Result<(), ConnError> {
        let mut batch = Vec::new();
        while let Some(front) = self.queue.front() {
            if let Some(id) = front.send
                && self.abandoned(id)
            {
                let last = front.last;
                self.queue.pop_front();
                if last {
                    self.barriers.retain(|b| b.id != id);
                    tracing::debug!(send = id, "stopped a send whose caller gave up");
                }
                continue;
            }
            if self.bucket.delay(Instant::now()) > Duration::ZERO {
                break;
            }
            self.bucket.take();
            batch.extend(self.queue.pop_front().map(|queued| queued.line));
        }
        if !batch.is_empty() {
            self.write_now(&batch).await?;
            self.writer
                .flush()
                .await
                .map_err(|e| ConnError::Closed(e.to_string()))?;
        }
        Ok(())
    }

    /// Best effort on the way out (QUIT), ignoring pacing.
    async fn flush_all(&mut self) {
        let batch: Vec<WireLine> = self.queue.drain(..).map(|queued| queued.line).collect();
        let _ = self.write_now(&batch).await;
        let _ = self.writer.flush().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_ip_limits_are_recognised_for_both_servers() {
        for text in [
            "Closing link: (u@127.0.0.1) [No more connections allowed from your host via this connect class (local)]",
            "Connection refused, too many connections from your IP address",
        ] {
            assert!(
                matches!(classify_error(text), ConnError::PerIpLimit(_)),
                "{text}"
            );
        }
        assert!(matches!(
            classify_error("Closing link: (Quit: bye)"),
            ConnError::Closed(_)
        ));
    }

    #[test]
    fn backoff_grows_with_jitter_up_to_the_cap() {
        let mut b = Backoff::new();
        let first = b.step();
        assert!(
            first >= Duration::from_millis(187) && first <= Duration::from_millis(313),
            "{first:?}"
        );
        for _ in 0..20 {
            assert!(b.step() <= Backoff::MAX.mul_f64(1.25));
        }
        b.reset();
        assert!(b.step() <= Duration::from_millis(313));
    }
}
