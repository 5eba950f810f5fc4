//! [`IrcBackend`]: the chat tools over a real IRC network.
//!
//! Identity: one **observer** connection (the configured nick) joins every
//! channel switchboard knows and records every channel message it hears —
//! agents' and humans' alike — into the history, with the server's timestamp
//! when the server offers `server-time`. Each agent nick gets its own
//! **sender** connection, made on its first send, kept open, and closed
//! after it has been idle a while; so a human sees agent `alice`'s message
//! from `alice`.
//!
//! Delivery: a `send_message` succeeds only when the observer has heard the
//! agent's lines come back from the channel and the history has committed
//! them. That is stronger than any server acknowledgement (it proves the
//! channel received the lines), and it makes the IRC backend's history
//! guarantee the local hub's: an acknowledged message is in the history.

use std::{
    collections::{HashMap, HashSet, VecDeque},
    sync::{Arc, Mutex},
    time::Duration,
};

use chrono::{DateTime, Utc};
use futures::{FutureExt, future::BoxFuture};
use irc_proto::{Command, Message as IrcMessage, Response};
use tokio::{
    sync::{mpsc, oneshot},
    time::Instant,
};

use super::{
    DEFAULT_OBSERVER_NICK,
    backfill::Backfill,
    connection::{BeforeWrite, ConnError, Connection, Endpoint, Event, Identity, Sasl, Status},
    flood::{Bucket, FloodSettings},
    isupport::ServerInfo,
    members::Membership,
    nicks,
    tls::Tls,
    wire,
};
use crate::{
    backend::{ChatBackend, ChatError, Delivery, Member},
    history::{
        AGENT_MARK, History, Message, NewMessage, Origin, SenderKind, Unstored, WHILE_IT_RUNS,
        this_process,
    },
    names::{Channel, NameRules, Nick},
};

/// Everything the IRC backend needs to know; see `docs/irc.md`.
#[derive(Debug, Clone)]
pub struct IrcSettings {
    pub server: String,
    pub port: u16,
    pub tls: Option<Tls>,
    /// Server password (`PASS`).
    pub password: Option<String>,
    /// SASL PLAIN for the observer.
    pub sasl: Option<Sasl>,
    pub observer_nick: String,
    /// The observer's nick was configured (`chat.irc.nick`): if it is taken
    /// or refused when switchboard starts, switchboard stops with an error
    /// naming the setting. An unconfigured nick falls back to a free
    /// variant instead ([`nicks::fallbacks`]).
    pub observer_nick_configured: bool,
    /// The ident every connection registers with.
    pub username: String,
    pub realname: String,
    /// Channels the observer joins at start (besides those in the history).
    pub channels: Vec<String>,
    /// A sender connection unused this long is closed.
    pub sender_idle: Duration,
    /// How long a send may take, on top of flood-control pacing.
    pub send_timeout: Duration,
    pub register_timeout: Duration,
    pub flood: FloodSettings,
    /// A sender whose nick is taken becomes `nick_` instead of failing.
    pub nick_suffix: bool,
}

impl IrcSettings {
    /// Settings with the documented defaults for `server:port`.
    pub fn new(server: impl Into<String>, port: u16) -> Self {
        Self {
            server: server.into(),
            port,
            tls: None,
            password: None,
            sasl: None,
            observer_nick: DEFAULT_OBSERVER_NICK.into(),
            observer_nick_configured: false,
            username: "switchboard".into(),
            realname: "switchboard MCP bridge".into(),
            channels: Vec::new(),
            sender_idle: Duration::from_secs(600),
            send_timeout: Duration::from_secs(15),
            register_timeout: Duration::from_secs(30),
            flood: FloodSettings::default(),
            nick_suffix: false,
        }
    }

    /// The server these settings name, as every connection dials it.
    fn endpoint(&self) -> Endpoint {
        Endpoint {
            host: self.server.clone(),
            port: self.port,
            tls: self.tls.clone(),
            password: self.password.clone(),
            register_timeout: self.register_timeout,
            flood: self.flood,
        }
    }
}

/// Connects once as `nick` (or `nick_`, … when taken), as the observer
/// would (TLS, server password, SASL), and quits once registered: what
/// `switchboard check` asks of the network. Fails with the reason
/// registration did not happen within the settings' `register_timeout`;
/// else the nick the network registered.
pub async fn probe(settings: &IrcSettings, nick: &str) -> Result<String, ConnError> {
    let connection = Connection::spawn(
        Arc::new(settings.endpoint()),
        Identity {
            nick: nick.to_owned(),
            user: settings.username.clone(),
            realname: settings.realname.clone(),
            sasl: settings.sasl.clone(),
            suffix_on_collision: true,
            persistent: false,
        },
        None,
    );
    // The first outcome is the answer: a connection that failed would only
    // be dialled again.
    let mut status = connection.status_changes();
    let settled = tokio::time::timeout(
        settings.register_timeout,
        status.wait_for(|s| !matches!(s, Status::Connecting)),
    )
    .await;
    let outcome = match settled.map(|s| s.map(|s| s.clone())) {
        Ok(Ok(Status::Registered { nick })) => Ok(nick),
        Ok(Ok(Status::Disconnected(e) | Status::Failed(e))) => Err(e),
        Ok(_) => Err(ConnError::Shutdown),
        Err(_) => Err(ConnError::RegistrationTimeout {
            server: format!("{}:{}", settings.server, settings.port),
            after: settings.register_timeout,
        }),
    };
    connection.quit();
    // Give the QUIT its moment on the wire before the caller exits.
    let _ = tokio::time::timeout(
        Duration::from_secs(2),
        status.wait_for(|s| !matches!(s, Status::Registered { .. })),
    )
    .await;
    outcome
}

/// The chat backend over IRC.
pub struct IrcBackend {
    inner: Arc<Inner>,
}

struct Inner {
    settings: IrcSettings,
    endpoint: Arc<Endpoint>,
    history: History,
    observer: Connection,
    membership: Mutex<Membership>,
    confirmations: Arc<Confirmations>,
    senders: Mutex<HashMap<String, SenderSlot>>,
    /// When this process last marked an agent as its own in the history,
    /// by (channel key, nick key) (see `History::mark_agent`).
    marked_agents: Mutex<HashMap<(String, String), Instant>>,
    /// The observers of the other processes sharing the history, by nick
    /// key, and when they were last read from its claims.
    other_observers: Mutex<(Option<Instant>, HashSet<String>)>,
}

/// The claim key under which a process's observer holds its nick, so that
/// the other processes sharing the history know it for switchboard's own
/// connection: not a member, and its lines (that process's notices, which
/// it stores itself) not theirs to store.
fn observer_claim(nick_key: &str) -> String {
    format!("irc-observer:{nick_key}")
}

/// How long the set of other observers is used before it is read again.
const OBSERVERS_FRESH: Duration = Duration::from_secs(1);

struct SenderSlot {
    connection: Connection,
    last_used: Instant,
    kind: SenderKind,
    /// Channels the nick joined explicitly: while there are any, the
    /// connection is kept however idle it is.
    present_in: HashSet<String>,
    /// Sends and joins using the connection now (see [`InUse`]): it is not
    /// idle while there are any.
    in_use: usize,
}

/// A sender connection taken for one send or join. The reaper leaves the
/// connection open while it is held, and its idle time counts from its drop.
struct InUse<'a> {
    inner: &'a Inner,
    key: String,
    connection: Connection,
}

impl Drop for InUse<'_> {
    fn drop(&mut self) {
        let mut senders = self.inner.senders.lock().expect("senders lock");
        if let Some(slot) = senders.get_mut(&self.key)
            && slot.connection.is(&self.connection)
        {
            slot.in_use -= 1;
            slot.last_used = Instant::now();
        }
    }
}

impl IrcBackend {
    /// Connects the observer (in the background) and starts recording.
    /// Must be called inside a tokio runtime.
    pub fn start(settings: IrcSettings, history: History) -> Self {
        let endpoint = Arc::new(settings.endpoint());
        let (events_tx, events) = mpsc::channel(4096);
        let fallbacks = if settings.observer_nick_configured {
            Vec::new()
        } else {
            nicks::fallbacks(&settings.observer_nick, &nicks::host_name())
        };
        let observer = Connection::spawn_with_fallbacks(
            endpoint.clone(),
            Identity {
                nick: settings.observer_nick.clone(),
                user: settings.username.clone(),
                realname: settings.realname.clone(),
                sasl: settings.sasl.clone(),
                suffix_on_collision: false,
                persistent: true,
            },
            fallbacks,
            Some(events_tx),
        );
        let inner = Arc::new(Inner {
            settings,
            endpoint,
            history,
            observer,
            membership: Mutex::new(Membership::default()),
            confirmations: Arc::default(),
            senders: Mutex::new(HashMap::new()),
            marked_agents: Mutex::default(),
            other_observers: Mutex::default(),
        });
        let (records_tx, records) = mpsc::channel(8192);
        tokio::spawn(observe(inner.clone(), events, records_tx));
        tokio::spawn(record(inner.clone(), records));
        tokio::spawn(reap_idle_senders(Arc::downgrade(&inner)));
        tokio::spawn(join_known_channels(inner.clone()));
        tokio::spawn(hold_observer_nick(Arc::downgrade(&inner)));
        Self { inner }
    }

    /// Waits until the observer is registered (or has failed for good).
    pub async fn ready(&self) -> Result<(), ConnError> {
        self.inner.observer.ready().await
    }

    /// Resolves, with what happened, only if the configured observer nick
    /// (`chat.irc.nick`) is taken or refused before the observer first
    /// registers: a configuration error the daemon should stop for, as
    /// without its observer nothing is recorded and every send fails only
    /// after its timeout. A default nick has free fallbacks, and once
    /// registered a nick taken on a reconnect is most likely the observer's
    /// own ghost from before a network drop, which it outlasts.
    pub async fn refused_nick(&self) -> String {
        if self.inner.settings.observer_nick_configured {
            let server = format!(
                "{}:{}",
                self.inner.settings.server, self.inner.settings.port
            );
            let mut status = self.inner.observer.status_changes();
            loop {
                match &*status.borrow_and_update() {
                    Status::Disconnected(ConnError::NickInUse(nick))
                    | Status::Failed(ConnError::NickInUse(nick)) => {
                        return format!(
                            "the nick {nick} is already in use on the IRC network {server}"
                        );
                    }
                    Status::Failed(ConnError::BadNick { nick, reason }) => {
                        return format!(
                            "the IRC server {server} refused the nick {nick} ({reason})"
                        );
                    }
                    Status::Registered { .. } | Status::Failed(_) => break,
                    Status::Connecting | Status::Disconnected(_) => {}
                }
                if status.changed().await.is_err() {
                    break;
                }
            }
        }
        std::future::pending().await
    }
}

/// At start: the observer joins every channel of the history and the config.
async fn join_known_channels(inner: Arc<Inner>) {
    let mut names = match inner.history.channels() {
        Ok(names) => names,
        Err(e) => {
            tracing::error!(error = %e, "cannot list the history's channels to join");
            Vec::new()
        }
    };
    names.extend(inner.settings.channels.iter().cloned());
    if inner.observer.ready().await.is_err() {
        return;
    }
    let rules = inner.observer.info().rules;
    for name in names {
        match rules.channel(&name) {
            Ok(channel) => {
                let inner = inner.clone();
                tokio::spawn(async move {
                    // A configured channel nobody has spoken in yet is a
                    // channel all the same: agents may join it. Recorded
                    // before the observer joins, so whoever sees the
                    // observer among its members can join it too.
                    if let Err(e) = inner.history.ensure_channel(&channel).await {
                        tracing::warn!(channel = %channel, error = %e, "cannot record the channel");
                    }
                    if let Err(e) = inner.observer.join(&channel).await {
                        tracing::warn!(channel = %channel, error = %e, "the observer cannot join");
                    }
                });
            }
            Err(e) => tracing::warn!(channel = %name, error = %e, "not joining an invalid channel"),
        }
    }
}

/// Applies what the observer hears: membership, and messages to record.
async fn observe(
    inner: Arc<Inner>,
    mut events: mpsc::Receiver<Event>,
    records: mpsc::Sender<NewMessage>,
) {
    let mut own_nick = inner.settings.observer_nick.clone();
    let mut caps = HashSet::new();
    let mut backfill = Backfill::default();
    while let Some(event) = events.recv().await {
        let info = inner.observer.info();
        let map = info.rules.casemapping;
        match event {
            Event::Registered {
                nick,
                caps: enabled,
            } => {
                own_nick = nick;
                caps = enabled;
                backfill.clear();
                inner.membership.lock().expect("membership lock").clear();
            }
            Event::Disconnected => {
                backfill.clear();
                inner.membership.lock().expect("membership lock").clear();
            }
            Event::Message(message) => {
                let nick = wire::source_nick(&message).map(str::to_owned);
                let nick_key = nick.as_deref().map(|n| map.fold(n));
                let is_self = nick_key.as_deref() == Some(map.fold(&own_nick).as_str());
                if let Some(next_page) = backfill.on_message(&message, map) {
                    inner.observer.command(next_page);
                }
                if let (true, Command::JOIN(chan, _, _)) = (is_self, &message.command) {
                    request_backfill(&inner, &mut backfill, &caps, &info, chan);
                }
                if let Command::PRIVMSG(target, text) = &message.command {
                    // The observer's own lines, and the notices of another
                    // process's observer, are stored by whoever sent them.
                    if is_self
                        || nick_key
                            .as_deref()
                            .is_some_and(|key| inner.is_other_observer(key))
                    {
                        continue;
                    }
                    let heard = nick.zip(nick_key).zip(channel_message(
                        &info.rules,
                        &message,
                        target,
                        text,
                    ));
                    if let Some(((nick, nick_key), new)) = heard {
                        let new = NewMessage {
                            kind: inner.kind_of(&nick_key),
                            nick_key,
                            nick,
                            origin: if backfill.is_replay(&message) {
                                Origin::Replayed
                            } else {
                                Origin::Heard
                            },
                            ..new
                        };
                        if records.send(new).await.is_err() {
                            return;
                        }
                    }
                    continue;
                }
                let released = track_membership(
                    &mut inner.membership.lock().expect("membership lock"),
                    &info,
                    &message,
                    nick,
                    is_self,
                    &mut own_nick,
                );
                if let Some(nick) = released {
                    // Before anything this nick's next holder says.
                    inner.release_agent_nick(&nick).await;
                }
            }
        }
    }
}

/// Follows who is in which channel from one line the observer heard (and
/// the observer's own nick through NICK). Returns a nick that left the
/// network or was renamed: an agent's no longer.
fn track_membership(
    membership: &mut Membership,
    info: &ServerInfo,
    message: &IrcMessage,
    nick: Option<String>,
    is_self: bool,
    own_nick: &mut String,
) -> Option<String> {
    let map = info.rules.casemapping;
    match &message.command {
        Command::JOIN(chan, _, _) => {
            let key = map.fold(chan);
            if is_self {
                membership.joined(key.clone(), chan);
            }
            if let Some(nick) = &nick {
                membership.add(map, &key, nick);
            }
        }
        Command::PART(chan, _) => {
            if is_self {
                membership.left(&map.fold(chan));
            } else if let Some(nick) = &nick {
                membership.remove(map, &map.fold(chan), nick);
            }
        }
        Command::KICK(chan, target, _) => {
            if map.fold(target) == map.fold(own_nick) {
                membership.left(&map.fold(chan));
            } else {
                membership.remove(map, &map.fold(chan), target);
            }
        }
        Command::QUIT(_) => {
            if let Some(nick) = &nick {
                membership.quit(map, nick);
            }
            return nick;
        }
        Command::NICK(new) => {
            if let Some(old) = &nick {
                membership.rename(map, old, new);
            }
            if is_self {
                *own_nick = new.clone();
            }
            return nick;
        }
        Command::Response(Response::RPL_NAMREPLY, params) if params.len() >= 4 => {
            membership.names(map, &info.prefixes, &map.fold(&params[2]), &params[3]);
        }
        Command::Response(Response::RPL_ENDOFNAMES, params) if params.len() >= 2 => {
            membership.names_end(&map.fold(&params[1]));
        }
        _ => {}
    }
    None
}

/// On the observer's own JOIN, when the server offers `draft/chathistory`:
/// asks for what the channel said after the history's newest message. A
/// channel with no history yet has no gap to fill.
fn request_backfill(
    inner: &Inner,
    backfill: &mut Backfill,
    caps: &HashSet<String>,
    info: &ServerInfo,
    chan: &str,
) {
    if !(caps.contains("draft/chathistory") && caps.contains("batch")) {
        return;
    }
    let Ok(channel) = info.rules.channel(chan) else {
        return;
    };
    match inner.history.last_time(channel.key()) {
        Ok(Some(last)) => {
            let limit = info.chathistory.unwrap_or(100);
            if let Some(line) = backfill.start(&channel, last, limit) {
                tracing::debug!(%channel, since = %last, "asking the IRC server for the history gap");
                inner.observer.command(line);
            }
        }
        Ok(None) => {}
        Err(e) => tracing::warn!(%channel, error = %e, "cannot read the history to backfill"),
    }
}

/// How far ahead of this host's clock a line's `server-time` may be.
const MAX_AHEAD: chrono::TimeDelta = chrono::TimeDelta::minutes(5);

/// A channel PRIVMSG as a history entry (nick filled in by the caller), or
/// `None` for private messages and CTCP other than ACTION.
pub(crate) fn channel_message(
    rules: &NameRules,
    message: &IrcMessage,
    target: &str,
    text: &str,
) -> Option<NewMessage> {
    if !target.starts_with(|c| rules.chantypes.contains(c)) {
        return None;
    }
    let channel = match rules.channel(target) {
        Ok(channel) => channel,
        Err(e) => {
            tracing::debug!(target = %target.escape_debug(), error = %e, "not recording a message to an odd channel");
            return None;
        }
    };
    let text = match text.strip_prefix('\u{1}') {
        Some(ctcp) => {
            let ctcp = ctcp.strip_suffix('\u{1}').unwrap_or(ctcp);
            format!("/me {}", ctcp.strip_prefix("ACTION ")?)
        }
        None => text.to_owned(),
    };
    let text = crate::text::heard_line(text);
    // A time far ahead of this host's clock is not believed (a server's
    // broken clock, or a hostile one): it would sort the line after
    // everything said later. The line gets the time it was heard.
    let time = wire::tag(message, "time")
        .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.with_timezone(&Utc))
        .filter(|t| *t <= Utc::now() + MAX_AHEAD);
    Some(NewMessage {
        channel,
        nick: String::new(),
        nick_key: String::new(),
        text,
        time,
        msgid: wire::tag(message, "msgid").map(str::to_owned),
        origin: Origin::Heard,
        kind: SenderKind::Human,
        // `*` (or nothing) is a sender logged in to no account.
        account: wire::tag(message, "account")
            .filter(|a| !a.is_empty() && *a != "*")
            .map(str::to_owned),
    })
}

/// Holds the observer's nick as a history claim while it is registered
/// under it (see [`observer_claim`]), and lets a nick it no longer has go.
async fn hold_observer_nick(inner: std::sync::Weak<Inner>) {
    let Some(mut changes) = inner.upgrade().map(|i| i.observer.status_changes()) else {
        return;
    };
    let mut held: Option<String> = None;
    loop {
        let status = changes.borrow_and_update().clone();
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let now_key = match &status {
            Status::Registered { nick } => Some(inner.observer.info().rules.casemapping.fold(nick)),
            _ => None,
        };
        if now_key != held {
            let now = Utc::now().timestamp_micros();
            if let Some(old) = held.take() {
                let _ = inner.history.claim(&observer_claim(&old), now, None).await;
            }
            if let Some(key) = &now_key {
                match inner
                    .history
                    .claim(&observer_claim(key), WHILE_IT_RUNS, None)
                    .await
                {
                    Ok(_) => held = now_key.clone(),
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot record the observer's nick in the history")
                    }
                }
            }
        }
        drop(inner);
        if changes.changed().await.is_err() {
            return;
        }
    }
}

/// Commits what the observer heard, in groups, then tells waiting senders.
async fn record(inner: Arc<Inner>, mut records: mpsc::Receiver<NewMessage>) {
    let mut batch = Vec::with_capacity(1024);
    while records.recv_many(&mut batch, 1024).await > 0 {
        let map = inner.observer.info().rules.casemapping;
        match inner.history.append(std::mem::take(&mut batch)).await {
            Ok(stored) => {
                for message in stored {
                    let (channel, nick) = (map.fold(&message.channel), map.fold(&message.nick));
                    inner.confirmations.observed(&channel, &nick, message);
                }
            }
            Err(Unstored { error, messages }) => {
                tracing::error!(%error, "channel messages were not recorded");
                let reason = error.to_string();
                for m in messages {
                    inner.confirmations.not_recorded(
                        m.channel.key(),
                        &map.fold(&m.nick),
                        &m.text,
                        &reason,
                    );
                }
            }
        }
    }
}

/// Closes sender connections that have been idle too long.
async fn reap_idle_senders(inner: std::sync::Weak<Inner>) {
    loop {
        let Some(strong) = inner.upgrade() else {
            return;
        };
        let idle = strong.settings.sender_idle;
        let tick = (idle / 4).clamp(Duration::from_millis(100), Duration::from_secs(30));
        let mut idle_slots = Vec::new();
        strong
            .senders
            .lock()
            .expect("senders lock")
            .retain(|nick, slot| {
                let keep = slot.in_use > 0
                    || slot.last_used.elapsed() < idle
                    || !slot.present_in.is_empty();
                if !keep {
                    tracing::debug!(%nick, "closing an idle sender connection");
                    idle_slots.push((slot.connection.clone(), slot.kind));
                }
                keep
            });
        for (connection, kind) in idle_slots {
            strong.retire_sender(&connection, kind).await;
        }
        drop(strong);
        tokio::time::sleep(tick).await;
    }
}

/// Sends waiting for the observer to hear their lines, by (channel, nick).
#[derive(Default)]
struct Confirmations {
    waiting: Mutex<HashMap<(String, String), VecDeque<Expected>>>,
}

struct Expected {
    texts: VecDeque<String>,
    heard: Vec<Message>,
    progress: Arc<Mutex<Progress>>,
    /// The stored lines, or why the observer heard them but could not
    /// store them.
    done: oneshot::Sender<Result<Vec<Message>, String>>,
}

impl Confirmations {
    /// Starts expecting `texts` from `nick` in `channel`.
    fn expect(
        &self,
        channel: &str,
        nick: &str,
        texts: &[&str],
        progress: Arc<Mutex<Progress>>,
    ) -> oneshot::Receiver<Result<Vec<Message>, String>> {
        let (done, rx) = oneshot::channel();
        if texts.is_empty() {
            let _ = done.send(Ok(Vec::new()));
            return rx;
        }
        self.waiting
            .lock()
            .expect("confirmations lock")
            .entry((channel.to_owned(), nick.to_owned()))
            .or_default()
            .push_back(Expected {
                texts: texts.iter().map(|t| t.trim().to_owned()).collect(),
                heard: Vec::new(),
                progress,
                done,
            });
        rx
    }

    /// A message from `nick` in `channel` (both folded) was recorded: it may
    /// be a line a sender is waiting for.
    fn observed(&self, channel: &str, nick: &str, message: Message) {
        let mut waiting = self.waiting.lock().expect("confirmations lock");
        let key = (channel.to_owned(), nick.to_owned());
        let Some(queue) = waiting.get_mut(&key) else {
            return;
        };
        queue.retain(|e| !e.done.is_closed());
        let text = message.text.trim();
        if let Some(expected) = queue
            .iter_mut()
            .find(|e| e.texts.front().is_some_and(|t| t == text))
        {
            expected.texts.pop_front();
            expected.heard.push(message);
            expected.progress.lock().expect("progress lock").heard += 1;
        }
        while queue.front().is_some_and(|e| e.texts.is_empty()) {
            let done = queue.pop_front().expect("front exists");
            let _ = done.done.send(Ok(done.heard));
        }
        if queue.is_empty() {
            waiting.remove(&key);
        }
    }

    /// A line from `nick` in `channel` (both folded) was heard but could not
    /// be stored, for `reason`: the send waiting for it fails now rather
    /// than at its deadline.
    fn not_recorded(&self, channel: &str, nick: &str, text: &str, reason: &str) {
        let mut waiting = self.waiting.lock().expect("confirmations lock");
        let key = (channel.to_owned(), nick.to_owned());
        let Some(queue) = waiting.get_mut(&key) else {
            return;
        };
        let text = text.trim();
        if let Some(at) = queue
            .iter()
            .position(|e| e.texts.front().is_some_and(|t| t == text))
            && let Some(expected) = queue.remove(at)
        {
            let _ = expected.done.send(Err(reason.to_owned()));
        }
        if queue.is_empty() {
            waiting.remove(&key);
        }
    }
}

impl Inner {
    /// Whether `nick_key` is the observer of another process sharing the
    /// history (as its claims said at most [`OBSERVERS_FRESH`] ago).
    fn is_other_observer(&self, nick_key: &str) -> bool {
        let mut cached = self.other_observers.lock().expect("observers lock");
        if cached.0.is_none_or(|read| read.elapsed() > OBSERVERS_FRESH) {
            let held = self
                .history
                .claims(&observer_claim(""))
                .unwrap_or_else(|e| {
                    tracing::warn!(error = %e, "cannot read the other processes' observers");
                    Vec::new()
                });
            cached.1 = held
                .into_iter()
                .filter(|claim| claim.owner != this_process() && claim.holds())
                .filter_map(|claim| {
                    claim
                        .key
                        .strip_prefix(&observer_claim(""))
                        .map(str::to_owned)
                })
                .collect();
            cached.0 = Some(Instant::now());
        }
        cached.1.contains(nick_key)
    }

    /// Agent or human: whether `key`, a folded nick, is one of our senders.
    fn kind_of(&self, key: &str) -> SenderKind {
        let map = self.observer.info().rules.casemapping;
        let senders = self.senders.lock().expect("senders lock");
        senders
            .values()
            .find(|slot| match slot.connection.status() {
                Status::Registered { nick } => map.fold(&nick) == key,
                _ => false,
            })
            .map_or(SenderKind::Human, |slot| slot.kind)
    }

    /// The sender connection for `nick`, made on first use, taken for one
    /// send or join.
    fn sender(&self, nick: &Nick, kind: SenderKind) -> InUse<'_> {
        let in_use = |connection: &Connection| InUse {
            inner: self,
            key: nick.key().to_owned(),
            connection: connection.clone(),
        };
        let mut senders = self.senders.lock().expect("senders lock");
        if let Some(slot) = senders.get_mut(nick.key())
            && !matches!(slot.connection.status(), Status::Failed(_))
        {
            slot.in_use += 1;
            slot.kind = kind;
            return in_use(&slot.connection);
        }
        let connection = Connection::spawn(
            self.endpoint.clone(),
            Identity {
                nick: nick.name().to_owned(),
                user: self.settings.username.clone(),
                realname: self.settings.realname.clone(),
                sasl: None,
                suffix_on_collision: self.settings.nick_suffix,
                persistent: false,
            },
            None,
        );
        senders.insert(
            nick.key().to_owned(),
            SenderSlot {
                connection: connection.clone(),
                last_used: Instant::now(),
                kind,
                present_in: HashSet::new(),
                in_use: 1,
            },
        );
        in_use(&connection)
    }

    /// What to do while the observer is not registered: wait for a
    /// connection that is coming back, or restart after one that failed for
    /// good (a refused SASL login is tried once).
    fn until_connected(&self) -> &'static str {
        match self.observer.status() {
            Status::Failed(_) => {
                "switchboard does not reconnect after that: fix it and restart switchboard"
            }
            _ => "try again shortly",
        }
    }

    /// The observer's connection in words, for errors and notes that say
    /// why switchboard cannot hear the network: "the IRC connection is …".
    fn connection_state(&self) -> String {
        match self.observer.status() {
            Status::Registered { .. } => "the IRC connection is up".into(),
            Status::Connecting => "the IRC connection is connecting".into(),
            Status::Disconnected(e) => format!("the IRC connection is reconnecting after: {e}"),
            Status::Failed(e) => format!("the IRC connection failed: {e}"),
        }
    }

    /// Marks the nick `connection` holds as this process's agent in
    /// `channel` before it speaks there, again once half of [`AGENT_MARK`]
    /// has passed: processes sharing the history whose observers hear its
    /// lines first store them as an agent's too.
    async fn mark_agent(
        &self,
        channel: &Channel,
        connection: &Connection,
    ) -> Result<(), ChatError> {
        let Status::Registered { nick } = connection.status() else {
            return Ok(());
        };
        let key = (
            channel.key().to_owned(),
            self.observer.info().rules.casemapping.fold(&nick),
        );
        let fresh = |marked: &Instant| marked.elapsed() < AGENT_MARK / 2;
        if self
            .marked_agents
            .lock()
            .expect("marked agents lock")
            .get(&key)
            .is_some_and(fresh)
        {
            return Ok(());
        }
        let marked = Instant::now();
        self.history
            .mark_agent(channel, &nick, &key.1)
            .await
            .map_err(ChatError::History)?;
        let mut marks = self.marked_agents.lock().expect("marked agents lock");
        marks.retain(|_, marked| marked.elapsed() < AGENT_MARK);
        marks.insert(key, marked);
        Ok(())
    }

    /// Whether `nick`, which a sender connection for `requested` holds, is
    /// that nick (or, with `nick_in_use = "suffix"`, it with `_`s added)
    /// rather than one the server gave it after a collision.
    fn is_own_nick(&self, requested: &str, nick: &str) -> bool {
        let map = self.observer.info().rules.casemapping;
        let (requested, nick) = (map.fold(requested), map.fold(nick));
        nick == requested
            || (self.settings.nick_suffix
                && nick
                    .strip_prefix(requested.as_str())
                    .is_some_and(|rest| rest.chars().all(|c| c == '_')))
    }

    /// Quits a sender's `connection`. An agent's nick stops being marked as
    /// one in the history at once, so a person who takes it next is stored
    /// as a person, by every process sharing the history.
    async fn retire_sender(&self, connection: &Connection, kind: SenderKind) {
        let held = match connection.status() {
            Status::Registered { nick } => Some(nick),
            _ => None,
        };
        connection.quit();
        if let Some(nick) = held.filter(|_| kind == SenderKind::Agent) {
            self.release_agent_nick(&nick).await;
        }
    }

    /// `nick` no longer belongs to an agent of this process (its connection
    /// quit, was killed or was renamed): if this process marked it, the
    /// marks end now rather than when they lapse.
    async fn release_agent_nick(&self, nick: &str) {
        let key = self.observer.info().rules.casemapping.fold(nick);
        let marked = {
            let mut marks = self.marked_agents.lock().expect("marked agents lock");
            let before = marks.len();
            marks.retain(|(_, marked), _| *marked != key);
            marks.len() != before
        };
        if marked && let Err(e) = self.history.unmark_agent(&key).await {
            tracing::debug!(%nick, error = %e, "the agent mark stays until it lapses");
        }
    }

    /// Says `text` in `channel` as the observer, within the send timeout.
    async fn post_notice(&self, channel: &Channel, text: String) -> Result<(), ChatError> {
        let said = async {
            self.observer.join(channel).await?;
            let noop: BeforeWrite = Box::new(|_: &str, _: &[&str]| {});
            self.observer.send(channel, vec![text], noop).await
        };
        tokio::time::timeout(self.settings.send_timeout, said)
            .await
            .map_err(|_| {
                let why = match self.observer.status() {
                    Status::Registered { .. } => format!(
                        "the IRC server did not take the line within {} s",
                        self.settings.send_timeout.as_secs()
                    ),
                    _ => self.connection_state(),
                };
                ChatError::Network(format!("cannot post to {channel}: {why}"))
            })?
            .map_err(network)?;
        Ok(())
    }

    /// Stores the observer's notice `text` (the observer does not record
    /// its own lines) under `msgid`; false when the history already held
    /// that id.
    async fn record_notice(
        &self,
        channel: &Channel,
        text: String,
        msgid: Option<String>,
    ) -> Result<bool, ChatError> {
        let nick = match self.observer.status() {
            Status::Registered { nick } => nick,
            _ => self.settings.observer_nick.clone(),
        };
        let key = self.observer.info().rules.casemapping.fold(&nick);
        let mut notice = NewMessage::live(channel.clone(), nick, key, text, SenderKind::System);
        notice.msgid = msgid;
        Ok(!self.history.append(vec![notice]).await?.is_empty())
    }

    async fn send(
        &self,
        channel: &Channel,
        sender: &Nick,
        kind: SenderKind,
        lines: Vec<String>,
    ) -> Result<Delivery, ChatError> {
        let progress = Arc::new(Mutex::new(Progress::default()));
        // Pacing stretches the deadline; count wire lines generously (a
        // relayed line carries at most ~430 bytes of text), plus the JOINs.
        let wire_lines: usize = lines.iter().map(|l| l.len() / 300 + 1).sum();
        let budget =
            self.settings.send_timeout + Bucket::time_for(self.settings.flood, wire_lines + 2);
        let attempt = self.deliver(channel, sender, kind, lines, progress.clone());
        match tokio::time::timeout(budget, attempt).await {
            Ok(result) => result,
            Err(_) => {
                let secs = budget.as_secs();
                let progress = *progress.lock().expect("progress lock");
                let mut error = match progress.stage {
                    Stage::Waiting => format!(
                        "not delivered: nothing was sent to {channel} within {secs} s ({})",
                        self.connection_state()
                    ),
                    Stage::Written => format!(
                        "not confirmed: the lines to {channel} were written but the IRC server did not confirm them within {secs} s; they may or may not have been delivered"
                    ),
                    Stage::Accepted => format!(
                        "not confirmed: the IRC server accepted the lines to {channel} but switchboard's observer did not hear them in the channel within {secs} s; they may not have reached it"
                    ),
                };
                error.push_str(&progress.heard_so_far());
                Err(ChatError::Network(error))
            }
        }
    }

    async fn deliver(
        &self,
        channel: &Channel,
        sender: &Nick,
        kind: SenderKind,
        lines: Vec<String>,
        progress: Arc<Mutex<Progress>>,
    ) -> Result<Delivery, ChatError> {
        // The observer must be in the channel before anyone speaks there. The
        // history learns of the channel when it records the lines.
        self.observer.join(channel).await.map_err(|e| match e {
            ConnError::Join { reason, .. } => {
                let observer = match self.observer.status() {
                    Status::Registered { nick } => nick,
                    _ => "switchboard".into(),
                };
                ChatError::Network(format!(
                    "not delivered: switchboard's own connection ({observer}) cannot join {channel}: {reason}. switchboard must be in a channel to confirm what is said there; ask the channel's operators to let {observer} in"
                ))
            }
            other => network(other),
        })?;
        let in_use = self.sender(sender, kind);
        let connection = &in_use.connection;
        if let Err(e) = connection.ready().await {
            self.senders
                .lock()
                .expect("senders lock")
                .remove(sender.key());
            return Err(ChatError::Network(format!("not delivered: {e}")));
        }
        if let Status::Registered { nick } = connection.status()
            && !self.is_own_nick(sender.name(), &nick)
        {
            return Err(ChatError::Network(format!(
                "not delivered: the IRC server renamed {sender}'s connection to {nick} (another {sender} is on the network, as after a netsplit); switchboard claims {sender} back once it is free, so try again shortly"
            )));
        }
        if kind == SenderKind::Agent {
            self.mark_agent(channel, connection).await?;
        }
        let (armed_tx, armed) = oneshot::channel();
        let before_write: BeforeWrite = {
            let progress = progress.clone();
            let confirmations = self.confirmations.clone();
            let channel_key = channel.key().to_owned();
            let fold = self.observer.info().rules.casemapping;
            Box::new(move |nick: &str, texts: &[&str]| {
                {
                    let mut progress = progress.lock().expect("progress lock");
                    progress.stage = Stage::Written;
                    progress.lines = texts.len();
                }
                let waiting = confirmations.expect(&channel_key, &fold.fold(nick), texts, progress);
                let _ = armed_tx.send((nick.to_owned(), waiting));
            })
        };
        let sent = connection
            .send(channel, lines, before_write)
            .await
            .map_err(|e| {
                let mut error = match e {
                    ConnError::Dropped => format!(
                        "not confirmed: the IRC connection dropped before the server confirmed the lines to {channel}; they may or may not have been delivered"
                    ),
                    ConnError::Rejected { .. } => e.to_string(),
                    ConnError::Join { .. } => format!("not delivered: {sender}: {e}"),
                    other => format!("not delivered: {other}"),
                };
                error.push_str(&progress.lock().expect("progress lock").heard_so_far());
                ChatError::Network(error)
            })?;
        progress.lock().expect("progress lock").stage = Stage::Accepted;
        let unheard = || {
            ChatError::Network(format!(
                "not confirmed: the lines to {channel} were not heard back"
            ))
        };
        let (nick, waiting) = armed.await.map_err(|_| unheard())?;
        let heard = waiting.await.map_err(|_| unheard())?.map_err(|reason| {
            ChatError::Network(format!(
                "the lines to {channel} reached the IRC channel, but switchboard could not record them: {reason}"
            ))
        })?;
        Ok(Delivery {
            stored: heard,
            lines: sent.lines,
            confirmed: true,
            sent_as: nick,
        })
    }
}

/// How far one send got, for its error when it fails.
#[derive(Debug, Clone, Copy, Default)]
struct Progress {
    stage: Stage,
    /// The IRC lines written (a long message takes several).
    lines: usize,
    /// How many of them, from the first, the observer heard and stored.
    heard: usize,
}

impl Progress {
    /// What a failed send's error adds when part of it arrived: the agent
    /// should not send those lines again.
    fn heard_so_far(&self) -> String {
        if self.heard == 0 {
            return String::new();
        }
        format!(
            "; the first {} of its {} IRC lines were heard in the channel and are in the history, so read the channel before sending the rest again",
            self.heard, self.lines
        )
    }
}

#[derive(Debug, Clone, Copy, Default)]
enum Stage {
    /// Nothing written yet.
    #[default]
    Waiting,
    /// Lines written, server confirmation pending.
    Written,
    /// The server processed the lines; waiting to hear them in the channel.
    Accepted,
}

fn network(e: ConnError) -> ChatError {
    ChatError::Network(e.to_string())
}

impl ChatBackend for IrcBackend {
    fn rules(&self) -> NameRules {
        self.inner.observer.info().rules
    }

    fn send<'a>(
        &'a self,
        channel: &'a Channel,
        sender: &'a Nick,
        kind: SenderKind,
        lines: Vec<String>,
    ) -> BoxFuture<'a, Result<Delivery, ChatError>> {
        self.inner.send(channel, sender, kind, lines).boxed()
    }

    fn announce<'a>(
        &'a self,
        channel: &'a Channel,
        text: String,
        once: Option<String>,
    ) -> BoxFuture<'a, Result<(), ChatError>> {
        async move {
            let inner = &self.inner;
            if once.is_some() {
                // Processes sharing the history all announce this notice:
                // the one whose copy is stored first posts it.
                if inner.record_notice(channel, text.clone(), once).await? {
                    inner.post_notice(channel, text).await?;
                }
            } else {
                inner.post_notice(channel, text.clone()).await?;
                inner.record_notice(channel, text, None).await?;
            }
            Ok(())
        }
        .boxed()
    }

    fn set_presence<'a>(
        &'a self,
        channel: &'a Channel,
        nick: &'a Nick,
        present: bool,
    ) -> BoxFuture<'a, Result<(), ChatError>> {
        async move {
            let inner = &self.inner;
            if !present {
                let mut senders = inner.senders.lock().expect("senders lock");
                if let Some(slot) = senders.get_mut(nick.key()) {
                    slot.present_in.remove(channel.key());
                    slot.connection.part(channel);
                }
                return Ok(());
            }
            let in_use = inner.sender(nick, SenderKind::Agent);
            let connection = &in_use.connection;
            let joined = async {
                connection.ready().await?;
                connection.join(channel).await
            };
            tokio::time::timeout(inner.settings.send_timeout, joined)
                .await
                .map_err(|_| {
                    ChatError::Network(format!(
                        "{nick} could not join {channel} within {} s",
                        inner.settings.send_timeout.as_secs()
                    ))
                })?
                .map_err(|e| ChatError::Network(format!("{nick} cannot join {channel}: {e}")))?;
            if let Some(slot) = inner
                .senders
                .lock()
                .expect("senders lock")
                .get_mut(nick.key())
            {
                slot.present_in.insert(channel.key().to_owned());
            }
            Ok(())
        }
        .boxed()
    }

    fn outage(&self) -> Option<String> {
        let inner = &self.inner;
        match inner.observer.status() {
            Status::Registered { .. } => None,
            Status::Failed(_) => Some(format!(
                "{}; {}",
                inner.connection_state(),
                inner.until_connected()
            )),
            _ => Some(format!(
                "{}; switchboard records the channels again once it is back",
                inner.connection_state()
            )),
        }
    }

    fn create_channel<'a>(
        &'a self,
        channel: &'a Channel,
    ) -> BoxFuture<'a, Result<bool, ChatError>> {
        async move {
            let inner = &self.inner;
            let known = matches!(inner.history.channel_row(channel.key()), Ok(Some(_)));
            let join = inner.observer.join(channel);
            let failed = match tokio::time::timeout(inner.settings.send_timeout, join).await {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(network(e)),
                Err(_) => Some(ChatError::Network(format!(
                    "cannot create {channel}: {}; nothing was created, {}",
                    inner.connection_state(),
                    inner.until_connected()
                ))),
            };
            if let Some(error) = failed {
                // A channel that failed to be created is not joined later
                // behind the caller's back.
                if !known {
                    inner.observer.part(channel);
                }
                return Err(error);
            }
            Ok(self.inner.history.ensure_channel(channel).await?)
        }
        .boxed()
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        async move {
            let senders: Vec<SenderSlot> = self
                .inner
                .senders
                .lock()
                .expect("senders lock")
                .drain()
                .map(|(_, slot)| slot)
                .collect();
            for slot in &senders {
                self.inner.retire_sender(&slot.connection, slot.kind).await;
            }
            self.inner.observer.quit();
            let mut connections: Vec<Connection> =
                senders.into_iter().map(|slot| slot.connection).collect();
            connections.push(self.inner.observer.clone());
            // Give the QUITs a moment to reach the server.
            let gone = futures::future::join_all(connections.iter().map(|c| c.ready()));
            let _ = tokio::time::timeout(Duration::from_secs(2), gone).await;
        }
        .boxed()
    }

    fn channels(&self) -> BoxFuture<'_, Result<Vec<String>, ChatError>> {
        async move {
            if !matches!(self.inner.observer.status(), Status::Registered { .. }) {
                return Err(ChatError::Network(format!(
                    "{}; {}",
                    self.inner.connection_state(),
                    self.inner.until_connected()
                )));
            }
            Ok(self
                .inner
                .membership
                .lock()
                .expect("membership lock")
                .channel_names())
        }
        .boxed()
    }

    fn members<'a>(
        &'a self,
        channel: &'a Channel,
    ) -> BoxFuture<'a, Result<Vec<Member>, ChatError>> {
        async move {
            let nicks = self
                .inner
                .membership
                .lock()
                .expect("membership lock")
                .members(channel.key())
                .ok_or_else(|| {
                    // Membership is known only while connected: an outage
                    // is not a channel switchboard left.
                    ChatError::Network(match self.inner.observer.status() {
                        Status::Registered { .. } => format!(
                            "switchboard is not in {channel}; send_message or create_channel joins it"
                        ),
                        _ => format!(
                            "the members of {channel} are unknown while {}; {}",
                            self.inner.connection_state(),
                            self.inner.until_connected()
                        ),
                    })
                })?;
            let map = self.inner.observer.info().rules.casemapping;
            let observer = match self.inner.observer.status() {
                Status::Registered { nick } => map.fold(&nick),
                _ => map.fold(&self.inner.settings.observer_nick),
            };
            Ok(nicks
                .into_iter()
                .map(|nick| {
                    let key = map.fold(&nick);
                    let kind = if key == observer || self.inner.is_other_observer(&key) {
                        SenderKind::System
                    } else {
                        self.inner.kind_of(&key)
                    };
                    Member { nick, kind }
                })
                .collect())
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The time `channel_message` gives a PRIVMSG tagged with `time`.
    fn time_of(time: &str) -> Option<DateTime<Utc>> {
        let line = format!("@time={time} :ann!a@h PRIVMSG #c :hi");
        let message = wire::parse(&line).unwrap();
        channel_message(&NameRules::default(), &message, "#c", "hi")
            .unwrap()
            .time
    }

    #[test]
    fn a_server_time_far_ahead_of_the_clock_is_not_believed() {
        let soon = (Utc::now() + chrono::TimeDelta::minutes(1)).to_rfc3339();
        assert!(time_of(&soon).is_some(), "a little skew is the server's");
        assert!(
            time_of("2024-01-02T03:04:05.000Z").is_some(),
            "replays are old"
        );
        assert_eq!(time_of("2999-01-01T00:00:00.000Z"), None);
        let later = (Utc::now() + chrono::TimeDelta::hours(1)).to_rfc3339();
        assert_eq!(time_of(&later), None);
    }
}
