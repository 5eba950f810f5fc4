//! Push: new inbox items delivered into agent sessions that can be woken, as
//! `notifications/claude/channel` events.
//!
//! One dispatcher follows the history's feed of committed messages. For each
//! message it updates the loop guard of its channel, answers approvals, and
//! hands the message to every subscribed session it concerns (see
//! [`PushMode`]); a small task per session then coalesces bursts and keeps
//! to the session's rate.
//!
//! Push is best effort and never a read: a message pushed and never read
//! stays unread, so a client that drops events loses nothing.

use std::{
    collections::{HashMap, VecDeque},
    sync::{Arc, Mutex, Weak},
    time::Duration,
};

use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{Value, json};
use switchboard_toolset::{JsonObject, Notification, Session};
use tokio::{
    sync::{broadcast, mpsc},
    time::Instant,
};

use crate::{
    approvals::Approvals,
    backend::ChatBackend,
    history::{History, Message, SenderKind, iso},
    inbox::{Inbox, for_mentions, names_in},
    names::Nick,
};

/// The experimental capability a server declares to push channel events.
pub(crate) const CAPABILITY: &str = "claude/channel";
/// The notification Claude Code shows as `<channel source="…">` events.
pub(crate) const CHANNEL_METHOD: &str = "notifications/claude/channel";
/// Messages queued for one session before the rest are only counted.
const SESSION_QUEUE: usize = 256;

/// Which messages are pushed to a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PushMode {
    /// Messages that mention the agent, and every message of a joined
    /// channel whose only other member is the one speaking to it.
    #[default]
    Mentions,
    /// Every message in joined channels, and mentions anywhere.
    All,
    /// Nothing.
    Off,
}

/// Push settings; see `docs/configuration.md` (`[chat.push]`).
#[derive(Debug, Clone, PartialEq)]
pub struct PushSettings {
    pub mode: PushMode,
    /// Events per minute per session; beyond, messages are summarised.
    pub per_minute: u32,
    /// Messages arriving within this window after an event go out together.
    pub coalesce: Duration,
    /// Pushes of a channel pause once this many messages in a row came from
    /// agents within `loop_window` (0 turns the guard off).
    pub loop_messages: usize,
    pub loop_window: Duration,
}

impl Default for PushSettings {
    fn default() -> Self {
        Self {
            mode: PushMode::Mentions,
            per_minute: 20,
            coalesce: Duration::from_millis(250),
            loop_messages: 20,
            loop_window: Duration::from_secs(120),
        }
    }
}

/// The push dispatcher and its subscribers.
pub(crate) struct Pusher {
    settings: PushSettings,
    history: History,
    backend: Arc<dyn ChatBackend>,
    inbox: Arc<Inbox>,
    approvals: Option<Arc<Approvals>>,
    subscribers: Mutex<Vec<Subscriber>>,
    guard: Mutex<LoopGuard>,
    started: std::sync::Once,
}

struct Subscriber {
    session: Weak<Session>,
    messages: mpsc::Sender<Pushed>,
    /// The session's identity as a nick, checked once per identity.
    nick: Option<Nick>,
}

impl Pusher {
    pub(crate) fn new(
        settings: PushSettings,
        history: History,
        backend: Arc<dyn ChatBackend>,
        inbox: Arc<Inbox>,
        approvals: Option<Arc<Approvals>>,
    ) -> Arc<Self> {
        Arc::new(Self {
            guard: Mutex::new(LoopGuard::new(settings.loop_messages, settings.loop_window)),
            settings,
            history,
            backend,
            inbox,
            approvals,
            subscribers: Mutex::default(),
            started: std::sync::Once::new(),
        })
    }

    /// Starts the dispatcher (once, inside the runtime). Approvals need it
    /// even when nothing is pushed.
    pub(crate) fn start(self: &Arc<Self>) {
        self.started.call_once(|| {
            let feed = self.history.feed();
            tokio::spawn(dispatch(Arc::downgrade(self), feed));
        });
    }

    /// Pushes `session`'s new inbox items to it until it closes.
    pub(crate) fn subscribe(self: &Arc<Self>, session: &Arc<Session>) {
        if self.settings.mode == PushMode::Off || !session.can_notify() {
            return;
        }
        self.start();
        let (tx, rx) = mpsc::channel(SESSION_QUEUE);
        self.subscribers
            .lock()
            .expect("subscribers lock")
            .push(Subscriber {
                session: Arc::downgrade(session),
                messages: tx,
                nick: None,
            });
        tokio::spawn(deliver(
            Arc::downgrade(session),
            rx,
            self.settings.clone(),
            self.inbox.clone(),
        ));
    }

    /// Hands one committed message to the loop guard, the approvals and the
    /// subscribers it concerns.
    async fn on_message(&self, message: &Message) {
        if message.kind == SenderKind::System {
            return;
        }
        if let Some(approvals) = &self.approvals {
            approvals.on_message(message);
        }
        let pause = self.guard.lock().expect("loop guard lock").observe(message);
        match pause {
            Guard::Open => {}
            Guard::Paused => return,
            Guard::JustPaused => {
                self.announce_pause(message);
                return;
            }
        }
        let rules = self.backend.rules();
        // The channel's members but switchboard's own (IRC's observer), folded.
        let mut members: Option<Vec<String>> = None;
        // Fold the text and share the message once for every subscriber.
        let folded = for_mentions(&message.text, rules.casemapping);
        let mut shared: Option<Arc<Message>> = None;
        let subscribers: Vec<(Nick, mpsc::Sender<Pushed>)> = {
            let mut subs = self.subscribers.lock().expect("subscribers lock");
            subs.retain(|s| !s.messages.is_closed() && s.session.strong_count() > 0);
            subs.iter_mut()
                .filter_map(|s| {
                    let identity = s.session.upgrade()?.identity()?;
                    if s.nick.as_ref().is_none_or(|n| n.name() != identity) {
                        s.nick = rules.nick(&identity).ok();
                    }
                    Some((s.nick.clone()?, s.messages.clone()))
                })
                .collect()
        };
        for (me, tx) in subscribers {
            if !self.inbox.concerns_folded(&me, message, &folded) {
                continue;
            }
            let mention = names_in(&folded, me.key());
            let wanted = mention
                || match self.settings.mode {
                    PushMode::All => true,
                    PushMode::Off => false,
                    PushMode::Mentions => {
                        let members = match &mut members {
                            Some(members) => members,
                            None => members.insert(self.people_in(message).await),
                        };
                        is_direct(members, me.key(), &message.nick_key)
                    }
                };
            if !wanted {
                continue;
            }
            let pushed = Pushed {
                message: shared
                    .get_or_insert_with(|| Arc::new(message.clone()))
                    .clone(),
                mention,
                to: me.clone(),
            };
            if tx.try_send(pushed).is_err() {
                tracing::debug!(
                    nick = me.name(),
                    "push queue full; the message stays unread"
                );
            }
        }
    }

    /// The folded nicks of the members of `message`'s channel, switchboard's
    /// own connection (IRC's observer) left out; none when they cannot be
    /// had.
    async fn people_in(&self, message: &Message) -> Vec<String> {
        let rules = self.backend.rules();
        let Ok(channel) = rules.channel(&message.channel) else {
            return Vec::new();
        };
        self.backend
            .members(&channel)
            .await
            .map(|members| {
                members
                    .into_iter()
                    .filter(|m| m.kind != SenderKind::System)
                    .map(|m| rules.fold(&m.nick))
                    .collect()
            })
            .unwrap_or_default()
    }

    fn announce_pause(&self, message: &Message) {
        let Ok(channel) = self.backend.rules().channel(&message.channel) else {
            return;
        };
        let text = format!(
            "Pausing notifications of {channel}: the last {} messages all came from agents within {} s. They resume when a human writes here; read_messages still shows everything.",
            self.settings.loop_messages,
            self.settings.loop_window.as_secs()
        );
        tracing::info!(%channel, "loop guard: pausing pushes");
        // Every process sharing the history pauses on this same message
        // (the guard goes by message times): its id names the notice, which
        // is stored once.
        let once = format!("switchboard-loop-pause-{}", message.id);
        let backend = self.backend.clone();
        tokio::spawn(async move {
            if let Err(e) = backend.announce(&channel, text, Some(once)).await {
                tracing::warn!(%channel, error = %e, "cannot announce the paused notifications");
            }
        });
    }
}

/// Follows the feed until the pusher is gone.
async fn dispatch(pusher: Weak<Pusher>, mut feed: broadcast::Receiver<Arc<[Message]>>) {
    loop {
        let batch = match feed.recv().await {
            Ok(batch) => batch,
            Err(broadcast::error::RecvError::Lagged(missed)) => {
                tracing::warn!(
                    missed,
                    "push fell behind; those messages stay unread but are not pushed"
                );
                continue;
            }
            Err(broadcast::error::RecvError::Closed) => return,
        };
        let Some(pusher) = pusher.upgrade() else {
            return;
        };
        for message in batch.iter() {
            pusher.on_message(message).await;
        }
    }
}

/// Per channel, the last turns (consecutive messages of one nick, such as
/// the lines of one multi-line send) and whether pushes pause.
struct LoopGuard {
    limit: usize,
    window: Duration,
    /// Who took each recent turn, and when it started (the message's
    /// time, the same in every process sharing the history), by channel id.
    recent: HashMap<i64, VecDeque<(String, DateTime<Utc>)>>,
    paused: HashMap<i64, bool>,
}

enum Guard {
    Open,
    Paused,
    /// This message paused the channel: announce it.
    JustPaused,
}

impl LoopGuard {
    fn new(limit: usize, window: Duration) -> Self {
        Self {
            limit,
            window,
            recent: HashMap::new(),
            paused: HashMap::new(),
        }
    }

    /// Pauses a channel once its last `limit` turns all came from agents
    /// within `window`: agents answering each other, with no person in the
    /// loop.
    fn observe(&mut self, message: &Message) -> Guard {
        if self.limit == 0 {
            return Guard::Open;
        }
        let channel = message.channel_id;
        if message.kind != SenderKind::Agent {
            // A person spoke: the channel is theirs again.
            self.recent.remove(&channel);
            self.paused.remove(&channel);
            return Guard::Open;
        }
        if self.paused.get(&channel).copied().unwrap_or(false) {
            return Guard::Paused;
        }
        let now = message.time;
        let recent = self.recent.entry(channel).or_default();
        if recent
            .back()
            .is_some_and(|(nick, _)| *nick == message.nick_key)
        {
            return Guard::Open;
        }
        recent.push_back((message.nick_key.clone(), now));
        while recent.len() > self.limit {
            recent.pop_front();
        }
        let looping = recent.len() == self.limit
            && recent.front().is_some_and(|(_, first)| {
                (now - *first).to_std().unwrap_or_default() <= self.window
            });
        if looping {
            self.paused.insert(channel, true);
            Guard::JustPaused
        } else {
            Guard::Open
        }
    }
}

/// A message for one session, and whether it names the session's agent.
struct Pushed {
    message: Arc<Message>,
    mention: bool,
    /// Whom it is for: a message they read before it goes out (a wait
    /// returned it meanwhile) is not pushed.
    to: Nick,
}

/// One session's deliveries. The first message after a quiet spell goes out
/// at once; what arrives within the coalescing window after an event goes
/// out together when the window ends. Beyond the rate, messages are counted
/// and summarised in one event as soon as the rate allows.
async fn deliver(
    session: Weak<Session>,
    mut rx: mpsc::Receiver<Pushed>,
    settings: PushSettings,
    inbox: Arc<Inbox>,
) {
    let mut out = Outbox {
        session,
        rate: Rate::new(settings.per_minute),
        summary: HashMap::new(),
        inbox,
    };
    let mut held: Vec<Pushed> = Vec::new();
    let mut window_end: Option<Instant> = None;
    loop {
        let summary_at = (!out.summary.is_empty()).then(|| out.rate.next_token());
        tokio::select! {
            pushed = recv_or_closed(&out.session, &mut rx) => {
                let Some(pushed) = pushed else { return };
                if window_end.is_some() {
                    held.push(pushed);
                } else {
                    if !out.send(vec![pushed]) {
                        return;
                    }
                    window_end = Some(Instant::now() + settings.coalesce);
                }
            }
            () = sleep_until_opt(window_end) => {
                if held.is_empty() {
                    window_end = None;
                } else {
                    if !out.send(std::mem::take(&mut held)) {
                        return;
                    }
                    window_end = Some(Instant::now() + settings.coalesce);
                }
            }
            () = sleep_until_opt(summary_at) => {
                if out.rate.take() && !out.send_summary() {
                    return;
                }
            }
        }
    }
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

async fn recv_or_closed(
    session: &Weak<Session>,
    rx: &mut mpsc::Receiver<Pushed>,
) -> Option<Pushed> {
    let strong = session.upgrade()?;
    tokio::select! {
        m = rx.recv() => m,
        () = strong.closed() => None,
    }
}

/// Where one session's events go, within its rate.
struct Outbox {
    session: Weak<Session>,
    rate: Rate,
    /// Messages held back, counted by channel.
    summary: HashMap<String, u64>,
    inbox: Arc<Inbox>,
}

impl Outbox {
    /// Sends `messages` (one event per channel, lines in order), or counts
    /// them for the summary when over the rate; false when the session is
    /// gone.
    fn send(&mut self, mut messages: Vec<Pushed>) -> bool {
        let Some(session) = self.session.upgrade() else {
            return false;
        };
        // Held for the coalescing window, some may have been read meanwhile.
        messages.retain(|p| self.inbox.is_unread(&p.to, &p.message));
        if messages.is_empty() {
            return true;
        }
        if !self.summary.is_empty() || !self.rate.take() {
            self.count(&messages);
            return true;
        }
        let mut by_channel: Vec<Vec<Pushed>> = Vec::new();
        for pushed in messages {
            match by_channel
                .iter_mut()
                .find(|list| list[0].message.channel_id == pushed.message.channel_id)
            {
                Some(list) => list.push(pushed),
                None => by_channel.push(vec![pushed]),
            }
        }
        for list in by_channel {
            if !session.notify(channel_event(&list)) {
                // The client is not reading: count these for later.
                self.count(&list);
            }
        }
        true
    }

    fn count(&mut self, messages: &[Pushed]) {
        for p in messages {
            *self.summary.entry(p.message.channel.clone()).or_default() += 1;
        }
    }

    /// "… 37 more in #general": what the rate held back.
    fn send_summary(&mut self) -> bool {
        let Some(session) = self.session.upgrade() else {
            return false;
        };
        let mut channels: Vec<(String, u64)> = self.summary.drain().collect();
        channels.sort();
        let total: u64 = channels.iter().map(|(_, n)| n).sum();
        let parts: Vec<String> = channels
            .iter()
            .map(|(c, n)| format!("{n} more in {c}"))
            .collect();
        let content = format!(
            "… {} (held back to keep to the notification rate; read_messages shows them)",
            parts.join(", ")
        );
        let mut meta = json!({"summary": "true", "count": total.to_string()});
        if let [(channel, _)] = channels.as_slice() {
            meta["channel"] = Value::String(channel.clone());
        }
        if !session.notify(notification(content, meta)) {
            // Still not read: try again with the next token.
            for (channel, n) in channels {
                *self.summary.entry(channel).or_default() += n;
            }
        }
        true
    }
}

/// The event for messages of one channel.
/// Whether `members` are exactly `me` and `speaker`: one speaking to the
/// other alone.
fn is_direct(members: &[String], me: &str, speaker: &str) -> bool {
    me != speaker
        && members.len() == 2
        && members.iter().any(|m| m == me)
        && members.iter().any(|m| m == speaker)
}

/// What an event's text may take, JSON-escaped: well inside the 64 KiB a
/// relay event carries with its meta. A push is a nudge; the rest is read.
const EVENT_TEXT: usize = 32 * 1024;

fn channel_event(messages: &[Pushed]) -> Notification {
    let last = &messages[messages.len() - 1].message;
    let mut content = if messages.len() == 1 {
        last.text.clone()
    } else {
        messages
            .iter()
            .map(|p| format!("<{}> {}", p.message.nick, p.message.text))
            .collect::<Vec<_>>()
            .join("\n")
    };
    crate::text::cut_escaped(
        &mut content,
        EVENT_TEXT,
        &format!(" … (cut; read_messages on {} shows it all)", last.channel),
    );
    let mut senders: Vec<&str> = Vec::new();
    let mut kinds: Vec<&str> = Vec::new();
    for p in messages {
        if !senders.contains(&p.message.nick.as_str()) {
            senders.push(&p.message.nick);
        }
        let kind = kind_name(p.message.kind);
        if !kinds.contains(&kind) {
            kinds.push(kind);
        }
    }
    let mention = messages.iter().any(|p| p.mention);
    let mut meta = json!({
        "channel": last.channel,
        "sender": senders.join(","),
        "sender_kind": kinds.join(","),
        "time": iso(&last.time),
        "id": last.id.to_string(),
        "mention": mention.to_string(),
    });
    if messages.len() > 1 {
        meta["count"] = Value::String(messages.len().to_string());
        meta["first_id"] = Value::String(messages[0].message.id.to_string());
    }
    notification(content, meta)
}

fn notification(content: String, meta: Value) -> Notification {
    let mut params = JsonObject::new();
    params.insert("content".into(), Value::String(content));
    params.insert("meta".into(), meta);
    Notification::new(CHANNEL_METHOD, params)
}

fn kind_name(kind: SenderKind) -> &'static str {
    match kind {
        SenderKind::Agent => "agent",
        SenderKind::Human => "human",
        SenderKind::System => "system",
        SenderKind::Unknown => "unknown",
    }
}

/// A token bucket of `per_minute` events, refilled continuously.
struct Rate {
    per_minute: f64,
    tokens: f64,
    at: Instant,
}

impl Rate {
    fn new(per_minute: u32) -> Self {
        let per_minute = f64::from(per_minute.max(1));
        Self {
            per_minute,
            tokens: per_minute,
            at: Instant::now(),
        }
    }

    fn refill(&mut self) {
        let now = Instant::now();
        let gained = now.duration_since(self.at).as_secs_f64() * self.per_minute / 60.0;
        self.tokens = (self.tokens + gained).min(self.per_minute);
        self.at = now;
    }

    fn take(&mut self) -> bool {
        self.refill();
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// When the next token will be there.
    fn next_token(&mut self) -> Instant {
        self.refill();
        let missing = (1.0 - self.tokens).max(0.0);
        self.at + Duration::from_secs_f64(missing * 60.0 / self.per_minute)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_direct_channel_is_the_agent_and_the_speaker_alone() {
        let members = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        assert!(is_direct(&members(&["bob", "carol"]), "bob", "carol"));
        assert!(!is_direct(
            &members(&["bob", "carol", "dave"]),
            "bob",
            "carol"
        ));
        assert!(!is_direct(&members(&["bob", "dave"]), "bob", "carol"));
        assert!(!is_direct(&members(&["bob", "carol"]), "bob", "bob"));
        assert!(!is_direct(&members(&[]), "bob", "carol"));
    }
    use crate::names::NameRules;
    use chrono::Utc;

    fn message(id: i64, kind: SenderKind, nick: &str, text: &str) -> Message {
        Message {
            id,
            channel: "#c".into(),
            time: Utc::now(),
            nick: nick.into(),
            text: text.into(),
            kind,
            seq: id,
            channel_id: 1,
            channel_key: "#c".into(),
            nick_key: nick.to_ascii_lowercase(),
            account: None,
        }
    }

    /// Agents taking turns: `bot0`, `bot1`, `bot0`, …
    fn agent(id: i64) -> Message {
        message(id, SenderKind::Agent, &format!("bot{}", id % 2), "hi")
    }

    #[test]
    fn the_guard_pauses_after_a_run_of_agents_until_a_human_speaks() {
        let mut guard = LoopGuard::new(3, Duration::from_secs(60));
        assert!(matches!(guard.observe(&agent(1)), Guard::Open));
        assert!(matches!(guard.observe(&agent(2)), Guard::Open));
        assert!(matches!(guard.observe(&agent(3)), Guard::JustPaused));
        assert!(matches!(guard.observe(&agent(4)), Guard::Paused));
        assert!(matches!(
            guard.observe(&message(5, SenderKind::Human, "ann", "stop")),
            Guard::Open
        ));
        assert!(matches!(guard.observe(&agent(6)), Guard::Open));
    }

    #[test]
    fn the_window_goes_by_the_messages_times() {
        // Observed at once, as a process does when it starts or hears of
        // another process's messages: the messages' times decide.
        let mut guard = LoopGuard::new(3, Duration::from_secs(60));
        let start = Utc::now();
        let at = |id: i64, secs: i64| Message {
            time: start + chrono::Duration::seconds(secs),
            ..agent(id)
        };
        assert!(matches!(guard.observe(&at(1, 0)), Guard::Open));
        assert!(matches!(guard.observe(&at(2, 40)), Guard::Open));
        assert!(matches!(guard.observe(&at(3, 80)), Guard::Open));
        assert!(matches!(guard.observe(&at(4, 100)), Guard::JustPaused));
    }

    #[test]
    fn one_agent_speaking_at_length_is_not_a_loop() {
        let mut guard = LoopGuard::new(3, Duration::from_secs(60));
        for id in 0..50 {
            let line = message(id, SenderKind::Agent, "bot", "line");
            assert!(matches!(guard.observe(&line), Guard::Open));
        }
    }

    #[test]
    fn a_human_in_the_run_resets_it() {
        let mut guard = LoopGuard::new(3, Duration::from_secs(60));
        guard.observe(&agent(1));
        guard.observe(&agent(2));
        guard.observe(&message(3, SenderKind::Human, "ann", "hm"));
        assert!(matches!(guard.observe(&agent(4)), Guard::Open));
        assert!(matches!(guard.observe(&agent(5)), Guard::Open));
        assert!(matches!(guard.observe(&agent(6)), Guard::JustPaused));
        assert!(matches!(
            LoopGuard::new(0, Duration::ZERO).observe(&agent(7)),
            Guard::Open
        ));
    }

    #[test]
    fn events_carry_identifier_meta_keys_and_string_values() {
        let a = Pushed {
            message: Arc::new(message(1, SenderKind::Human, "Ann", "hello bob")),
            mention: true,
            to: NameRules::default().nick("bob").unwrap(),
        };
        let b = Pushed {
            message: Arc::new(message(2, SenderKind::Agent, "eve", "and you")),
            mention: false,
            to: NameRules::default().nick("bob").unwrap(),
        };
        let event = channel_event(&[a, b]);
        assert_eq!(event.method, CHANNEL_METHOD);
        assert_eq!(event.params["content"], "<Ann> hello bob\n<eve> and you");
        let meta = event.params["meta"].as_object().unwrap();
        for (key, value) in meta {
            assert!(
                key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
                "{key}"
            );
            assert!(value.is_string(), "{key}: {value}");
        }
        assert_eq!(meta["sender"], "Ann,eve");
        assert_eq!(meta["sender_kind"], "human,agent");
        assert_eq!(meta["mention"], "true");
        assert_eq!(meta["count"], "2");
    }

    /// Five long messages coalesced, or one of control characters, make an
    /// event a relay can carry (64 KiB), cut and saying so.
    #[test]
    fn a_long_event_is_cut_to_what_a_relay_event_carries() {
        let pushed = |id: i64, text: String| Pushed {
            message: Arc::new(message(id, SenderKind::Agent, "eve", &text)),
            mention: true,
            to: NameRules::default().nick("bob").unwrap(),
        };
        for event in [
            channel_event(
                &(1..=5)
                    .map(|i| pushed(i, "y".repeat(30_000)))
                    .collect::<Vec<_>>(),
            ),
            channel_event(&[pushed(1, "\u{3}".repeat(32_000))]),
        ] {
            let bytes = serde_json::to_vec(&event.params).unwrap().len();
            assert!(bytes < 60 * 1024, "{bytes} bytes");
            let content = event.params["content"].as_str().unwrap();
            assert!(
                content.ends_with(" … (cut; read_messages on #c shows it all)"),
                "{}",
                &content[content.len() - 60..]
            );
        }
        // A short one is whole.
        let event = channel_event(&[pushed(1, "short".into())]);
        assert_eq!(event.params["content"], "short");
    }

    #[tokio::test]
    async fn the_rate_refills_over_a_minute() {
        // 6000 a minute: a new token every 10 ms.
        let mut rate = Rate::new(6000);
        while rate.take() {}
        let next = rate.next_token();
        assert!(next > Instant::now());
        assert!(next <= Instant::now() + Duration::from_millis(11));
        tokio::time::sleep_until(next).await;
        assert!(rate.take());
    }
}
