//! The chat toolset: the tools agents use to talk in channels, notice what
//! concerns them, and be woken for it.
//!
//! Names, parameters and text formats of the original IRC bridge's tools
//! are fixed: its clients parse them. Each result's text stands on its own
//! (many hosts show the model only the text) and `structuredContent`
//! mirrors it.
//!
//! Who is calling: a tool's explicit `nick` (or `sender`), else the
//! session's identity (see [`Session`]). Reading a channel, sending to it
//! or joining it puts the identity in it; reading moves its read cursor.

mod api;
mod definitions;
mod format;

use std::{
    collections::HashMap,
    future::Future,
    sync::{Arc, Mutex},
    time::Duration,
};

use chrono::Utc;
use serde::Deserialize;
use serde_json::{Value, json};
use switchboard_toolset::{
    Caller, JsonObject, Notification, Session, ToolError, ToolFuture, ToolId, ToolOutput, ToolSpec,
    ToolTable, Toolset, bounded, parse_args,
};
use tokio::sync::broadcast;

use crate::{
    access::Access,
    approvals::{self, ApprovalSettings, Approvals},
    backend::ChatBackend,
    history::{History, HistoryError, Message, SenderKind, Since, Tip, iso},
    inbox::Inbox,
    names::{Channel, Nick, nick_for_process},
    push::{PushMode, PushSettings, Pusher},
    text::{cut_escaped, json_len},
};
use definitions::{
    ChatTool, READ_DEFAULT, READ_MAX, SEARCH_DEFAULT, SEARCH_MAX, WAIT_DEFAULT_S, WAIT_MAX_S,
    tool_definitions,
};
use format::{
    bullets, describe_since, fts_query, inbox_output, messages_output, search_line, search_output,
};

/// What a deployment may tune; see `docs/configuration.md` (`[chat]`).
#[derive(Debug, Clone, PartialEq)]
pub struct ChatSettings {
    /// Longest text `send_message` accepts, in bytes.
    pub max_text_bytes: usize,
    pub push: PushSettings,
    /// Approvals from a channel, when configured.
    pub approvals: Option<ApprovalSettings>,
}

impl Default for ChatSettings {
    fn default() -> Self {
        Self {
            max_text_bytes: 32 * 1024,
            push: PushSettings::default(),
            approvals: None,
        }
    }
}

/// How often a blocked wait tells the client it is still working.
const PROGRESS_EVERY: Duration = Duration::from_secs(10);
/// How far ahead of our clock a `since` time may be: the IRC server's clock
/// (`server-time`) may run ahead of ours.
const CLOCK_SKEW: chrono::TimeDelta = chrono::TimeDelta::minutes(1);

/// The chat tools over one backend and its history.
pub struct ChatTools {
    backend: Arc<dyn ChatBackend>,
    history: History,
    settings: ChatSettings,
    inbox: Arc<Inbox>,
    pusher: Arc<Pusher>,
    approvals: Option<Arc<Approvals>>,
    /// The last `read_messages` page per channel. Agents polling a channel
    /// ask for the same page many times between two of its messages; that
    /// page is built (its messages read and rendered) once.
    reads: Mutex<HashMap<String, CachedRead>>,
    tools: ToolTable<ChatTool>,
}

/// A `read_messages` page, valid while its channel's newest position is
/// `last_seq`.
struct CachedRead {
    last_seq: i64,
    since: Option<Since>,
    limit: usize,
    /// The channel's id and the page's newest position, for read cursors.
    newest: Option<(i64, i64)>,
    /// Kept from the second read of the page on: a copy costs about as much
    /// as building the page, so a page read once (a read between two sends)
    /// is not copied.
    output: Option<ToolOutput>,
}

/// Channels whose last read is kept.
const CACHED_READS: usize = 64;

impl ChatTools {
    pub fn new(backend: Arc<dyn ChatBackend>, history: History, settings: ChatSettings) -> Self {
        let inbox = Arc::new(Inbox::new(history.clone()));
        let approvals = settings
            .approvals
            .clone()
            .map(|a| Arc::new(Approvals::new(a, backend.clone(), history.clone())));
        let pusher = Pusher::new(
            settings.push.clone(),
            history.clone(),
            backend.clone(),
            inbox.clone(),
            approvals.clone(),
        );
        Self {
            backend,
            history,
            settings,
            inbox,
            pusher,
            approvals,
            reads: Mutex::default(),
            tools: tool_definitions(),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SendParams {
    channel: String,
    text: String,
    sender: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadParams {
    channel: Option<String>,
    since: Option<Value>,
    limit: Option<i64>,
    nick: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NameParams {
    name: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ChannelParams {
    channel: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListParams {
    nick: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WaitParams {
    channel: Option<String>,
    since: Option<Value>,
    timeout_s: Option<f64>,
    nick: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SearchParams {
    query: String,
    channel: Option<String>,
    limit: Option<i64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JoinParams {
    channel: String,
    #[serde(default)]
    leave: bool,
    nick: Option<String>,
}

/// The chat toolset's name, as tokens' `tools` lists name it.
pub(crate) const TOOLSET: &str = "chat";

impl Toolset for ChatTools {
    fn name(&self) -> &str {
        TOOLSET
    }

    fn tools(&self) -> &[ToolSpec] {
        self.tools.specs()
    }

    fn instructions(&self, session: Option<&Session>) -> Option<String> {
        let mut text = String::from(
            "Chat with other agents and humans in channels: send_message to post, \
read_messages or wait_for_messages to follow a channel (since: the newest seq you have seen; \
without a channel: your inbox, the unread messages of channels you joined and every mention of you), \
search_messages to find older messages.",
        );
        if let Some(nick) = session.and_then(Session::identity) {
            text.push_str(&format!(" You are {nick} in chat."));
        }
        if session.is_some_and(Session::can_notify) && self.settings.push.mode != PushMode::Off {
            text.push_str(
                " New messages for you may also arrive on their own as <channel source=\"switchboard\" \
channel=\"#…\" sender=\"…\"> events; to answer one, call send_message with that channel. \
Events are not marked read: read_messages shows everything.",
            );
        }
        Some(text)
    }

    fn experimental(&self) -> Vec<&'static str> {
        let mut names = Vec::new();
        if self.settings.push.mode != PushMode::Off {
            names.push(crate::push::CAPABILITY);
        }
        if self.approvals.is_some() {
            names.push(approvals::CAPABILITY);
        }
        names
    }

    fn open_session(&self, session: &Arc<Session>) {
        if let Some(process) = session.process() {
            session.propose(&nick_for_process(&process.name, process.pid));
        }
        if let Some(approvals) = &self.approvals {
            // Answers arrive through the dispatcher, pushed or not.
            self.pusher.start();
            approvals.adopt(session);
        }
        self.pusher.subscribe(session);
    }

    fn on_notification(&self, session: &Arc<Session>, notification: &Notification) {
        match (&self.approvals, notification.method.as_str()) {
            (Some(approvals), approvals::REQUEST_METHOD) => {
                approvals.request(session, &notification.params);
            }
            (None, approvals::REQUEST_METHOD) => {
                tracing::debug!(
                    "a permission request arrived but chat.approvals is not configured"
                );
            }
            _ => {}
        }
    }

    fn close(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> {
        self.backend.close()
    }

    fn call<'a>(&'a self, tool: ToolId, args: JsonObject, caller: &'a Caller) -> ToolFuture<'a> {
        let (kind, spec) = self.tools.get(tool);
        let name = spec.name.as_str();
        Box::pin(async move {
            let result = match kind {
                ChatTool::SendMessage => self.send_message(parse_args(name, args)?, caller).await,
                ChatTool::CreateChannel => {
                    self.create_channel(parse_args(name, args)?, caller).await
                }
                ChatTool::ListChannels => self.list_channels(parse_args(name, args)?, caller).await,
                ChatTool::GetMembers => self.get_members(parse_args(name, args)?, caller).await,
                ChatTool::JoinChannel => self.join_channel(parse_args(name, args)?, caller).await,
                ChatTool::ReadMessages => self.read_messages(parse_args(name, args)?, caller),
                ChatTool::WaitForMessages => {
                    let p: WaitParams = parse_args(name, args)?;
                    with_progress(caller, self.wait_for_messages(p, caller)).await
                }
                ChatTool::SearchMessages => {
                    self.search_messages(parse_args(name, args)?, caller).await
                }
            };
            // What is read is what was recorded: say so when the network is
            // not being recorded, so that silence is not taken for quiet.
            let outage = kind
                .reads_history()
                .then(|| self.backend.outage())
                .flatten();
            result.map(|mut output| {
                if let Some(outage) = outage {
                    output
                        .text
                        .push_str(&format!("\n(Not up to date: {outage}.)"));
                }
                output
            })
        })
    }
}

/// `{what} #x: …`, for a channel the history does not have.
fn unknown_channel(channel: &Channel, what: &str) -> String {
    format!(
        "{what} {channel}: switchboard knows no channel by that name (list_channels shows the ones it knows; send_message or create_channel makes one)."
    )
}

fn fail(e: impl std::fmt::Display) -> ToolError {
    ToolError::new(e.to_string())
}

/// Rows to ask for a page of `limit`: one more after a position, to learn
/// whether more follow.
fn page_size(since: Option<Since>, limit: usize) -> usize {
    match since {
        Some(Since::Seq(_)) => limit + 1,
        _ => limit,
    }
}

/// Cuts a page read with [`page_size`] back to `limit`, and to what one
/// reply carries ([`REPLY_BUDGET`]); true when more follow. A page after a
/// position keeps its oldest messages, the newest page its newest.
fn trim_page(messages: &mut Vec<Message>, since: Option<Since>, limit: usize) -> bool {
    let mut more = matches!(since, Some(Since::Seq(_))) && messages.len() > limit;
    if more {
        // Newest first: the extra row is the first.
        messages.remove(0);
    }
    match since {
        Some(_) => {
            let left_out = messages.len() - fitting(messages.iter().rev());
            if left_out > 0 {
                messages.drain(..left_out);
                more = true;
            }
        }
        None => messages.truncate(fitting(messages.iter())),
    }
    messages.iter_mut().for_each(cut_to_fit);
    more
}

/// How much of one reply its messages may take, JSON-escaped and counted
/// twice (the text and the structured content carry each): well under the
/// 1 MiB a relay line may carry, so that a page read through the shim
/// arrives whole, and a reader's cursor moves only past what arrived.
const REPLY_BUDGET: usize = 768 * 1024;

/// What a message's time, ids, kind and keys take of a reply, at most.
const FIXED: usize = 200;

/// How many of `messages`, in order, fit in [`REPLY_BUDGET`]; at least one
/// (which [`cut_to_fit`] makes fit).
fn fitting<'a>(messages: impl Iterator<Item = &'a Message> + Clone) -> usize {
    // Escaping makes a byte at most 6: a page within the budget even so
    // (the usual case) is not scanned byte by byte.
    let at_most: usize = messages.clone().map(|m| 12 * raw_len(m) + FIXED).sum();
    if at_most <= REPLY_BUDGET {
        return messages.count();
    }
    let mut taken = 0;
    let mut count = 0;
    for m in messages {
        taken += reply_len(m);
        if count > 0 && taken > REPLY_BUDGET {
            break;
        }
        count += 1;
    }
    count
}

fn raw_len(m: &Message) -> usize {
    m.text.len() + m.nick.len() + m.channel.len()
}

/// What `m` takes of a reply, which carries it twice, JSON-escaped.
fn reply_len(m: &Message) -> usize {
    2 * (json_len(&m.text) + json_len(&m.nick) + json_len(&m.channel)) + FIXED
}

/// Cuts the text of a message too long for a reply of its own (a
/// `chat.max_text_bytes` near 1 MiB allows them), saying so: the reader
/// gets what fits rather than an error, and its cursor moves past a message
/// it has seen. The web view and `tail` show it whole.
fn cut_to_fit(m: &mut Message) {
    if 12 * raw_len(m) + FIXED <= REPLY_BUDGET || reply_len(m) <= REPLY_BUDGET {
        return;
    }
    let note = format!(
        " [cut: the message is {} bytes, more than one reply carries]",
        m.text.len()
    );
    let room = (REPLY_BUDGET - FIXED) / 2 - json_len(&m.nick) - json_len(&m.channel);
    cut_escaped(&mut m.text, room, &note);
}

/// Runs a long call, reporting progress every [`PROGRESS_EVERY`] when the
/// client asked for progress (clients reset their idle timeout on it).
async fn with_progress<T>(caller: &Caller, call: impl Future<Output = T>) -> T {
    let Some(progress) = &caller.progress else {
        return call.await;
    };
    let mut call = std::pin::pin!(call);
    let mut ticks = tokio::time::interval(PROGRESS_EVERY);
    ticks.tick().await;
    let mut step = 0.0;
    loop {
        tokio::select! {
            result = &mut call => return result,
            _ = ticks.tick() => {
                step += 1.0;
                progress.report(step, Some("still waiting for messages".into()));
            }
        }
    }
}

impl ChatTools {
    /// What `caller`'s token lets it do here.
    fn access(&self, caller: &Caller) -> Access {
        Access::new(caller.grant.as_ref(), self.backend.rules())
    }

    /// The channel `raw` names, if the caller may use it; a malformed name
    /// is an invalid `argument`.
    fn channel_for(
        &self,
        argument: &str,
        raw: &str,
        access: &Access,
    ) -> Result<Channel, ToolError> {
        let channel = self
            .backend
            .rules()
            .channel(raw)
            .map_err(|e| ToolError::invalid_argument(argument, e.to_string()))?;
        access.channel(&channel)?;
        Ok(channel)
    }

    /// Who is calling: `explicit` (a tool's `nick`) when given, else the
    /// session's identity, else the nick of the caller's token; refused
    /// when the token does not hold it.
    fn me(&self, explicit: Option<&str>, caller: &Caller) -> Result<Option<Nick>, ToolError> {
        let rules = self.backend.rules();
        let access = self.access(caller);
        let me = match explicit {
            Some(nick) => Some(
                rules
                    .nick(nick)
                    .map_err(|e| ToolError::invalid_argument("nick", format!("nick: {e}")))?,
            ),
            None => caller
                .identity()
                .or_else(|| access.default_nick())
                .and_then(|nick| rules.nick(&nick).ok()),
        };
        if let Some(me) = &me {
            access.nick(me)?;
        }
        Ok(me)
    }

    /// Like [`ChatTools::me`], for tools that need to know.
    fn require_me(
        &self,
        explicit: Option<&str>,
        caller: &Caller,
        tool: &str,
    ) -> Result<Nick, ToolError> {
        self.me(explicit, caller)?.ok_or_else(|| {
            // A name given at start (--nick) that this network does not take
            // (longer than its NICKLEN, say) is said, not taken for none.
            if let Some(nick) = caller.identity()
                && let Err(e) = self.backend.rules().nick(&nick)
            {
                return ToolError::invalid_argument(
                    "nick",
                    format!(
                        "{tool} needs to know who you are, and your nick {nick:?} cannot be used here: {e}; start with another --nick, or pass nick"
                    ),
                );
            }
            // Without a session (stateless HTTP) no earlier send is remembered.
            let otherwise = if caller.session.is_some() {
                ", or send a message first"
            } else {
                " with every call (each HTTP request stands alone)"
            };
            // Missing, so a mistake in the call: the argument that mends it.
            ToolError::invalid_argument(
                "nick",
                format!("{tool} needs to know who you are: pass nick (your chat nick){otherwise}"),
            )
        })
    }

    /// The stored channel behind `channel`, if it exists.
    fn channel_id(&self, channel: &Channel) -> Result<Option<i64>, ToolError> {
        Ok(self
            .history
            .channel_row(channel.key())
            .map_err(fail)?
            .map(|r| r.id))
    }

    /// Parses `since` for `channel`, whose newest position is `newest`, and
    /// checks that a reader could have seen it: a position up to the newest,
    /// a time not in the future.
    fn since(&self, channel: &Channel, raw: &Value, newest: i64) -> Result<Since, ToolError> {
        let since = format::parse_since(raw)?;
        match since {
            Since::Seq(seq) => {
                if seq > newest {
                    return Err(ToolError::invalid_argument(
                        "since",
                        format!(
                            "since {seq} is after {channel}'s newest message (seq {newest}); pass the seq of a message you have seen, or 0 for the start"
                        ),
                    ));
                }
            }
            Since::Time(t) if t > Utc::now() + CLOCK_SKEW => {
                let newest = self.history.last_time(channel.key()).map_err(fail)?;
                if newest.is_none_or(|n| t > n) {
                    return Err(ToolError::invalid_argument(
                        "since",
                        format!(
                            "since {} is in the future; pass the seq or time of a message you have seen",
                            iso(&t)
                        ),
                    ));
                }
            }
            Since::Time(_) => {}
        }
        Ok(since)
    }

    /// A page of `channel`, whose stored history ends at `tip`, after
    /// `since` (see [`History::read`]), and whether more follow it (after a
    /// position only).
    fn read_page(
        &self,
        channel: &Channel,
        tip: Option<Tip>,
        since: Option<Since>,
        limit: usize,
    ) -> Result<(Vec<Message>, bool), ToolError> {
        let size = page_size(since, limit);
        let mut messages = match (since, tip) {
            (Some(Since::Time(_)), _) => self.history.read(channel.key(), since, size),
            (_, None) => Ok(Vec::new()),
            (Some(Since::Seq(after)), Some(tip)) => self.history.read_to(tip, Some(after), size),
            (None, Some(tip)) => self.history.read_to(tip, None, size),
        }
        .map_err(fail)?;
        let more = trim_page(&mut messages, since, limit);
        Ok((messages, more))
    }

    /// `me` read the channel up to `seq` (and is in it).
    fn read_up_to(&self, me: &Nick, channel_id: i64, seq: i64) -> Result<(), ToolError> {
        self.history
            .mark(me.key(), channel_id, Some(seq), Some(true))
            .map(|_| ())
            .map_err(fail)
    }

    async fn send_message(&self, p: SendParams, caller: &Caller) -> Result<ToolOutput, ToolError> {
        let rules = self.backend.rules();
        let access = self.access(caller);
        let channel = self.channel_for("channel", &p.channel, &access)?;
        let explicit = p.sender.is_some();
        let sender = p
            .sender
            .or_else(|| caller.identity())
            .or_else(|| access.default_nick())
            .ok_or_else(|| {
                let hint = access.nick_patterns().map_or_else(String::new, |globs| {
                    format!("; this token may speak as any nick matching {globs}")
                });
                ToolError::invalid_argument(
                    "sender",
                    format!(
                        "invalid arguments for send_message: missing field `sender` (your nick){hint}"
                    ),
                )
            })?;
        let sender = rules.nick(&sender).map_err(|e| {
            let message = if explicit {
                format!("sender: {e}")
            } else {
                // The session's name, which the agent never typed.
                format!(
                    "your nick {sender:?} cannot be used here: {e}; start with another --nick, or pass sender"
                )
            };
            ToolError::invalid_argument("sender", message)
        })?;
        access.nick(&sender)?;
        let kind = if caller.human || access.human() {
            SenderKind::Human
        } else {
            SenderKind::Agent
        };
        let delivery = self
            .deliver(&channel, &sender, kind, &p.text, &access)
            .await?;
        if let Some(session) = &caller.session {
            session.adopt(sender.name());
        }
        // The channel as it is stored (`#big`, whoever asked for `#Big`).
        let channel = delivery
            .stored
            .first()
            .map_or(channel.name(), |m| m.channel.as_str());
        let text = format!("Sent to {channel} as {}", delivery.sent_as);
        let mut structured = json!({
            "channel": channel,
            "sender": delivery.sent_as,
            "lines": delivery.lines,
            "confirmed": delivery.confirmed,
            "ids": delivery.stored.iter().map(|m| m.id).collect::<Vec<_>>(),
        });
        if let Some(last) = delivery.stored.last() {
            structured["time"] = Value::String(iso(&last.time));
            structured["seq"] = json!(last.seq);
        }
        Ok(ToolOutput::new(text, structured))
    }

    fn read_messages(&self, p: ReadParams, caller: &Caller) -> Result<ToolOutput, ToolError> {
        let me = self.me(p.nick.as_deref(), caller)?;
        let limit = bounded("limit", p.limit, READ_DEFAULT, READ_MAX)?;
        let Some(raw) = p.channel.as_deref() else {
            if p.since.is_some() {
                return Err(ToolError::invalid_argument(
                    "since",
                    "since needs a channel; your inbox holds what you have not read",
                ));
            }
            let me =
                self.require_me(p.nick.as_deref(), caller, "read_messages without a channel")?;
            return self.read_inbox(&me, limit, false, &self.access(caller));
        };
        let channel = self.channel_for("channel", raw, &self.access(caller))?;
        // A page changes only when its channel gets a message, from this
        // process or another sharing the database: the page is read up to
        // this tip and kept under its position.
        let tip = self.history.tip(channel.key()).map_err(fail)?;
        let last_seq = tip.map_or(0, |tip| tip.seq);
        let since = p
            .since
            .as_ref()
            .map(|raw| self.since(&channel, raw, last_seq))
            .transpose()?;
        let same = |c: &CachedRead| c.last_seq == last_seq && c.since == since && c.limit == limit;
        let cached = self
            .reads()
            .get(channel.name())
            .filter(|c| same(c))
            .map(|c| (c.output.clone(), c.newest));
        let (output, newest) = match cached {
            Some((Some(hit), newest)) => (hit, newest),
            cached => {
                let repeated = cached.is_some();
                let (messages, more) = self.read_page(&channel, tip, since, limit)?;
                let newest = messages.first().map(|m| (m.channel_id, m.seq));
                let mut output = messages_output(&channel, &messages, since, more, false);
                // The newest page stops early only at the reply's size.
                if let (None, Some(oldest)) = (since, messages.last())
                    && oldest.seq > 1
                    && messages.len() < limit
                {
                    let from = oldest
                        .seq
                        .saturating_sub(limit as i64 - messages.len() as i64 + 1)
                        .max(0);
                    output.text.push_str(&format!(
                        "\n(Older messages did not fit in one reply: since = {from} reads on from them.)"
                    ));
                }
                if tip.is_none() && !self.knows(&channel)? {
                    output.text = unknown_channel(&channel, "No messages in");
                }
                let mut reads = self.reads();
                if reads.len() >= CACHED_READS {
                    reads.clear();
                }
                let entry = CachedRead {
                    last_seq,
                    since,
                    limit,
                    newest,
                    output: repeated.then(|| output.clone()),
                };
                reads.insert(channel.name().to_owned(), entry);
                (output, newest)
            }
        };
        if let Some(me) = me {
            match newest {
                Some((channel_id, seq)) => self.read_up_to(&me, channel_id, seq)?,
                None => self.join_read(&me, tip)?,
            }
        }
        Ok(output)
    }

    /// Joins `me` to the channel of `tip` (if it has been recorded at all),
    /// as reading it does when there is nothing to read.
    fn join_read(&self, me: &Nick, tip: Option<Tip>) -> Result<(), ToolError> {
        if let Some(tip) = tip {
            let map = self.backend.rules().casemapping;
            self.inbox.join(me, map, tip.channel_id).map_err(fail)?;
        }
        Ok(())
    }

    /// Reads `me`'s inbox (of the channels `access` opens) and marks what
    /// it returns read.
    fn read_inbox(
        &self,
        me: &Nick,
        limit: usize,
        timed_out: bool,
        access: &Access,
    ) -> Result<ToolOutput, ToolError> {
        let map = self.backend.rules().casemapping;
        // One more than asked says whether more are waiting.
        let mut items = self
            .inbox
            .peek(me, map, limit + 1, &|m| access.allows(&m.channel))
            .map_err(fail)?;
        let mut more = items.len() > limit;
        items.truncate(limit);
        let fit = fitting(items.iter().map(|item| &item.message));
        if fit < items.len() {
            items.truncate(fit);
            more = true;
        }
        items
            .iter_mut()
            .for_each(|item| cut_to_fit(&mut item.message));
        self.inbox.mark_read(me, &items).map_err(fail)?;
        Ok(inbox_output(me.name(), &items, timed_out, more))
    }

    fn reads(&self) -> std::sync::MutexGuard<'_, HashMap<String, CachedRead>> {
        self.reads.lock().expect("read cache lock")
    }

    async fn create_channel(
        &self,
        p: NameParams,
        caller: &Caller,
    ) -> Result<ToolOutput, ToolError> {
        let channel = self.channel_for("name", &p.name, &self.access(caller))?;
        let created = self.backend.create_channel(&channel).await.map_err(fail)?;
        // As it is stored (`#ops` for `#OPS`), as every other tool names it.
        let stored = self.history.channel_row(channel.key()).map_err(fail)?;
        let name = stored.as_ref().map_or(channel.name(), |r| r.name.as_str());
        let text = if created {
            format!("Created {name}")
        } else {
            format!("{name} already exists")
        };
        Ok(ToolOutput::new(
            text,
            json!({"channel": name, "created": created}),
        ))
    }

    async fn list_channels(&self, p: ListParams, caller: &Caller) -> Result<ToolOutput, ToolError> {
        let me = self.me(p.nick.as_deref(), caller)?;
        let access = self.access(caller);
        let mut summaries = self.summaries(me.as_ref()).await?;
        summaries.retain(|s| access.allows(&s.channel));
        let names: Vec<&str> = summaries.iter().map(|s| s.channel.as_str()).collect();
        if summaries.is_empty() {
            return Ok(ToolOutput::new(
                "No channels yet; send_message or create_channel makes one.",
                json!({"channels": names, "details": []}),
            ));
        }
        let plural = |n: i64, word: &str| format!("{n} {word}{}", if n == 1 { "" } else { "s" });
        let lines: Vec<String> = summaries
            .iter()
            .map(|s| {
                let mut line = format!("{} ({}", s.channel, plural(s.members as i64, "member"));
                if me.is_some() {
                    if s.joined {
                        line.push_str(&format!(", {} unread", s.unread));
                    }
                    if s.mentions > 0 {
                        line.push_str(&format!(", {}", plural(s.mentions, "mention")));
                    }
                    if s.joined {
                        line.push_str(", joined");
                    }
                }
                line.push(')');
                line
            })
            .collect();
        Ok(ToolOutput::new(
            bullets(&lines),
            json!({"channels": names, "details": summaries}),
        ))
    }

    /// Whether the history has the channel: a reader that names one it
    /// has not (a typo) is told so rather than shown an empty channel.
    fn knows(&self, channel: &Channel) -> Result<bool, ToolError> {
        Ok(self
            .history
            .channel_row(channel.key())
            .map_err(fail)?
            .is_some())
    }

    async fn get_members(
        &self,
        p: ChannelParams,
        caller: &Caller,
    ) -> Result<ToolOutput, ToolError> {
        let channel = self.channel_for("channel", &p.channel, &self.access(caller))?;
        let members = self.members(&channel).await?;
        let nicks: Vec<String> = members.iter().map(|m| m.nick.clone()).collect();
        let text = if nicks.is_empty() {
            if self.knows(&channel)? {
                format!("No members in {channel}.")
            } else {
                unknown_channel(&channel, "No members in")
            }
        } else {
            bullets(&nicks)
        };
        Ok(ToolOutput::new(
            text,
            json!({"channel": channel.name(), "members": nicks, "kinds": members}),
        ))
    }

    async fn wait_for_messages(
        &self,
        p: WaitParams,
        caller: &Caller,
    ) -> Result<ToolOutput, ToolError> {
        let timeout = p.timeout_s.unwrap_or(WAIT_DEFAULT_S);
        if !(0.0..=WAIT_MAX_S).contains(&timeout) {
            return Err(ToolError::invalid_argument(
                "timeout_s",
                format!("timeout_s must be between 0 and {WAIT_MAX_S} seconds (got {timeout})"),
            ));
        }
        let timeout = Duration::from_secs_f64(timeout);
        let Some(raw) = p.channel.as_deref() else {
            if p.since.is_some() {
                return Err(ToolError::invalid_argument(
                    "since",
                    "since needs a channel; your inbox holds what you have not read",
                ));
            }
            let me = self.require_me(
                p.nick.as_deref(),
                caller,
                "wait_for_messages without a channel",
            )?;
            return self.wait_inbox(&me, timeout, caller).await;
        };
        let me = self.me(p.nick.as_deref(), caller)?;
        let channel = self.channel_for("channel", raw, &self.access(caller))?;
        let newest = self.history.last_seq(channel.key()).map_err(fail)?;
        let asked = p
            .since
            .as_ref()
            .map(|raw| self.since(&channel, raw, newest))
            .transpose()?;
        // By default, whatever is recorded after the call: by position, so
        // a line replayed with an older time meanwhile is not missed.
        let since = asked.unwrap_or(Since::Seq(newest));
        let limit = READ_DEFAULT;
        let mut messages = self
            .history
            .wait_newer(channel.key(), since, page_size(Some(since), limit), timeout)
            .await
            .map_err(|e| match e {
                HistoryError::Closed => ToolError::server_stopping(),
                other => fail(other),
            })?;
        // The token may have been revoked or narrowed while the call waited.
        self.access(caller).channel(&channel)?;
        let more = trim_page(&mut messages, Some(since), limit);
        if let Some(me) = &me {
            match messages.first() {
                Some(newest) => self.read_up_to(me, newest.channel_id, newest.seq)?,
                // Waiting on a channel follows it, like reading it.
                None => self.join_read(me, self.history.tip(channel.key()).map_err(fail)?)?,
            }
        }
        let timed_out = messages.is_empty();
        let mut output = messages_output(&channel, &messages, asked, more, timed_out);
        if timed_out {
            let from = match since {
                Since::Seq(seq) => format!("newest: seq {seq}"),
                Since::Time(_) => describe_since(&since),
            };
            output.text = format!(
                "No new messages in {channel} after {} s ({from}).",
                timeout.as_secs_f64(),
            );
            // Waiting for a channel's first message is fine; a misspelt
            // name must not pass for a quiet channel.
            if newest == 0 && !self.knows(&channel)? {
                output.text = unknown_channel(
                    &channel,
                    &format!("No messages after {} s in", timeout.as_secs_f64()),
                );
            }
        }
        Ok(output)
    }

    /// Blocks until `me`'s inbox has something (or `timeout`), then reads it.
    async fn wait_inbox(
        &self,
        me: &Nick,
        timeout: Duration,
        caller: &Caller,
    ) -> Result<ToolOutput, ToolError> {
        let map = self.backend.rules().casemapping;
        let access = self.access(caller);
        let allow = |m: &Message| access.allows(&m.channel);
        let deadline = tokio::time::Instant::now() + timeout;
        // Subscribed before looking, so nothing committed in between is missed.
        let mut feed = self.history.feed();
        loop {
            if !self
                .inbox
                .peek(me, map, 1, &allow)
                .map_err(fail)?
                .is_empty()
            {
                return self.read_inbox(me, READ_DEFAULT, false, &access);
            }
            let woken = async {
                loop {
                    match feed.recv().await {
                        Ok(batch) => {
                            if batch
                                .iter()
                                .any(|m| allow(m) && self.inbox.concerns(me, map, m))
                            {
                                return true;
                            }
                        }
                        // Fell behind: look again rather than guess.
                        Err(broadcast::error::RecvError::Lagged(_)) => return true,
                        Err(broadcast::error::RecvError::Closed) => return false,
                    }
                }
            };
            let closed = async {
                match &caller.session {
                    Some(session) => session.closed().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                woke = woken => if !woke {
                    return Err(ToolError::server_stopping());
                },
                () = tokio::time::sleep_until(deadline) => {
                    let mut output = inbox_output(me.name(), &[], true, false);
                    output.text = format!(
                        "No new messages for {} after {} s.",
                        me.name(),
                        timeout.as_secs_f64()
                    );
                    return Ok(output);
                }
                () = self.history_closing() => {
                    return Err(ToolError::server_stopping());
                }
                () = closed => return Err(ToolError::new("the session ended")),
            }
        }
    }

    /// Completes when the history releases its waiters (shutdown).
    async fn history_closing(&self) {
        self.history.closing().await;
    }

    async fn search_messages(
        &self,
        p: SearchParams,
        caller: &Caller,
    ) -> Result<ToolOutput, ToolError> {
        let access = self.access(caller);
        let channel = p
            .channel
            .as_deref()
            .map(|c| self.channel_for("channel", c, &access))
            .transpose()?;
        let limit = bounded("limit", p.limit, SEARCH_DEFAULT, SEARCH_MAX)?;
        let fts = fts_query(&p.query).ok_or_else(|| {
            ToolError::invalid_argument(
                "query",
                "query has no words to search for; give one or more words",
            )
        })?;
        // Across channels, a token limited to some reads the best matches
        // of all and keeps its own.
        let wanted = if channel.is_none() && access.restricts_channels() {
            SEARCH_MAX
        } else {
            limit
        };
        let mut messages = self
            .history
            .search(fts, channel.as_ref().map(|c| c.key().to_owned()), wanted)
            .await
            .map_err(fail)?;
        messages.retain(|m| access.allows(&m.channel));
        let found = messages.len().min(limit);
        messages.truncate(limit.min(fitting(messages.iter())));
        messages.iter_mut().for_each(cut_to_fit);
        let left_out = found - messages.len();
        let text = match &channel {
            Some(channel) if messages.is_empty() && !self.knows(channel)? => {
                unknown_channel(channel, &format!("No messages match {:?} in", p.query))
            }
            _ if messages.is_empty() => format!("No messages match {:?}.", p.query),
            _ => {
                let mut text = messages
                    .iter()
                    .map(search_line)
                    .collect::<Vec<_>>()
                    .join("\n");
                if left_out > 0 {
                    text.push_str(&format!(
                        "\n({left_out} more matches did not fit in one reply; narrow the query or ask for fewer.)"
                    ));
                }
                text
            }
        };
        Ok(search_output(text, &p.query, &messages))
    }

    async fn join_channel(&self, p: JoinParams, caller: &Caller) -> Result<ToolOutput, ToolError> {
        let me = self.require_me(p.nick.as_deref(), caller, "join_channel")?;
        let channel = self.channel_for("channel", &p.channel, &self.access(caller))?;
        let Some(stored) = self.history.channel_row(channel.key()).map_err(fail)? else {
            return Err(ToolError::new(format!(
                "there is no channel {channel}; create_channel or send_message makes one"
            )));
        };
        let channel_id = stored.id;
        let joined = self
            .history
            .cursor(me.key(), channel_id)
            .is_some_and(|c| c.joined);
        if p.leave && !joined {
            return Err(ToolError::new(format!("{me} is not in {channel}")));
        }
        self.backend
            .set_presence(&channel, &me, !p.leave)
            .await
            .map_err(fail)?;
        if p.leave {
            self.history
                .mark(me.key(), channel_id, None, Some(false))
                .map_err(fail)?;
        } else {
            let map = self.backend.rules().casemapping;
            self.inbox.join(&me, map, channel_id).map_err(fail)?;
        }
        let name = &stored.name;
        let text = match (p.leave, joined) {
            (true, _) => format!("{me} left {name}"),
            (false, true) => format!("{me} is already in {name}"),
            (false, false) => format!("{me} joined {name}"),
        };
        Ok(ToolOutput::new(
            text,
            json!({"channel": name, "nick": me.name(), "joined": !p.leave}),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{LocalHub, history::Location};

    fn args(v: Value) -> JsonObject {
        v.as_object().cloned().unwrap()
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    /// The chat tools, called by name as a transport calls them.
    struct Chat(Arc<ChatTools>, switchboard_toolset::Registry);

    impl std::ops::Deref for Chat {
        type Target = ChatTools;
        fn deref(&self) -> &ChatTools {
            &self.0
        }
    }

    impl Chat {
        async fn call(
            &self,
            tool: &str,
            arguments: JsonObject,
            caller: &Caller,
        ) -> Result<ToolOutput, ToolError> {
            self.1
                .run(tool, arguments, caller)
                .await
                .unwrap_or_else(|| panic!("no chat tool {tool}"))
        }
    }

    fn tools(history: &History) -> Chat {
        let tools = Arc::new(ChatTools::new(
            Arc::new(LocalHub::new(history.clone())),
            history.clone(),
            ChatSettings::default(),
        ));
        let registry = switchboard_toolset::Registry::new(vec![tools.clone()]).unwrap();
        Chat(tools, registry)
    }

    /// A page as long as one reply may carry, JSON-escaped: a byte that
    /// escapes to six counts six.
    #[test]
    fn a_page_stops_at_what_one_reply_carries_escaped() {
        let message = |seq: i64, text: String| Message {
            id: seq,
            channel: "#c".into(),
            time: chrono::Utc::now(),
            nick: "bot".into(),
            text,
            kind: SenderKind::Agent,
            seq,
            channel_id: 1,
            channel_key: "#c".into(),
            nick_key: "bot".into(),
            account: None,
        };
        let short: Vec<Message> = (1..=500).map(|i| message(i, "hello".into())).collect();
        assert_eq!(fitting(short.iter()), 500);
        // 20,000 bytes of \u0001 each: 240 KB a message, text and structured.
        let escaped: Vec<Message> = (1..=10)
            .map(|i| message(i, "\u{1}".repeat(20_000)))
            .collect();
        assert_eq!(fitting(escaped.iter()), 3);
        let plain: Vec<Message> = (1..=10).map(|i| message(i, "x".repeat(20_000))).collect();
        assert_eq!(fitting(plain.iter()), 10);
        // One message always goes, however long: cut to fit, saying so.
        let mut huge = message(1, format!("héllo{}", "\u{1}".repeat(200_000)));
        assert_eq!(fitting(std::iter::once(&huge)), 1);
        cut_to_fit(&mut huge);
        assert!(reply_len(&huge) <= REPLY_BUDGET, "{}", reply_len(&huge));
        assert!(huge.text.starts_with("héllo\u{1}"));
        assert!(
            huge.text
                .ends_with(" [cut: the message is 200006 bytes, more than one reply carries]"),
            "{}",
            &huge.text[huge.text.len() - 80..]
        );
        let mut fits = message(1, "x".repeat(300_000));
        cut_to_fit(&mut fits);
        assert_eq!(fits.text.len(), 300_000);
        // A page after a position keeps its oldest (the end of a newest-first
        // page) and says more follow.
        let mut page: Vec<Message> = (1..=10)
            .rev()
            .map(|i| message(i, "\u{1}".repeat(20_000)))
            .collect();
        assert!(trim_page(&mut page, Some(Since::Seq(0)), 10));
        assert_eq!(page.iter().map(|m| m.seq).collect::<Vec<_>>(), [3, 2, 1]);
        // The newest page keeps its newest.
        let mut page: Vec<Message> = (1..=10)
            .rev()
            .map(|i| message(i, "\u{1}".repeat(20_000)))
            .collect();
        assert!(!trim_page(&mut page, None, 10));
        assert_eq!(page.iter().map(|m| m.seq).collect::<Vec<_>>(), [10, 9, 8]);
    }

    #[test]
    fn sends_creates_and_joins_name_the_channel_as_it_is_stored() {
        let rt = runtime();
        let history = History::open(&Location::Memory, Default::default()).unwrap();
        let tools = tools(&history);
        let caller = Caller::new("test");
        rt.block_on(async {
            for (asked, text) in [("#big", "first"), ("Big", "second")] {
                let send = args(json!({"channel": asked, "text": text, "sender": "bob"}));
                let sent = tools.call("send_message", send, &caller).await.unwrap();
                assert_eq!(sent.text, "Sent to #big as bob", "{asked}");
                assert_eq!(sent.structured.into_value()["channel"], "#big");
            }
            let made = args(json!({"name": "#Ops"}));
            let made = tools.call("create_channel", made, &caller).await.unwrap();
            assert_eq!(made.text, "Created #Ops");
            let again = args(json!({"name": "#OPS"}));
            let again = tools.call("create_channel", again, &caller).await.unwrap();
            assert_eq!(again.text, "#Ops already exists");
            assert_eq!(again.structured.into_value()["channel"], "#Ops");
            let join = args(json!({"channel": "#BIG", "nick": "ann"}));
            let joined = tools.call("join_channel", join, &caller).await.unwrap();
            assert_eq!(joined.text, "ann joined #big");
            assert_eq!(joined.structured.into_value()["channel"], "#big");
        });
    }

    #[test]
    fn repeated_reads_see_every_acknowledged_send() {
        let rt = runtime();
        let history = History::open(&Location::Memory, Default::default()).unwrap();
        let tools = tools(&history);
        let caller = Caller::new("test");
        rt.block_on(async {
            for i in 0..3 {
                let text = format!("m{i}");
                let send = args(json!({"channel": "#c", "text": text, "sender": "bob"}));
                tools.call("send_message", send, &caller).await.unwrap();
                for _ in 0..2 {
                    let read = args(json!({"channel": "#c", "limit": 1}));
                    let out = tools.call("read_messages", read, &caller).await.unwrap();
                    assert!(out.text.ends_with(&format!("<bob> m{i}")), "{}", out.text);
                }
            }
            let other_limit = args(json!({"channel": "#c", "limit": 2}));
            let out = tools
                .call("read_messages", other_limit, &caller)
                .await
                .unwrap();
            assert_eq!(out.structured["messages"].as_array().unwrap().len(), 2);
        });
        history.close();
    }

    #[test]
    fn repeated_reads_see_what_another_process_sent() {
        async fn send(chat: &Chat, text: &str) {
            let a = args(json!({"channel": "#c", "text": text, "sender": "bob"}));
            chat.call("send_message", a, &Caller::new("test"))
                .await
                .unwrap();
        }
        async fn newest(chat: &Chat) -> String {
            let a = args(json!({"channel": "#c", "limit": 5}));
            let out = chat.call("read_messages", a, &Caller::new("test")).await;
            out.unwrap().text.lines().next().unwrap().to_owned()
        }
        let rt = runtime();
        let dir = tempfile::tempdir().unwrap();
        let location = Location::File(dir.path().join("history.db"));
        let ours = History::open(&location, Default::default()).unwrap();
        let theirs = History::open(&location, Default::default()).unwrap();
        let (our_tools, their_tools) = (tools(&ours), tools(&theirs));
        rt.block_on(async {
            send(&our_tools, "first").await;
            for text in ["second", "third"] {
                // Read more than once: a repeated page is kept.
                for _ in 0..3 {
                    newest(&our_tools).await;
                }
                send(&their_tools, text).await;
                let line = newest(&our_tools).await;
                assert!(line.ends_with(&format!("<bob> {text}")), "{line}");
            }
        });
        ours.close();
        theirs.close();
    }

    #[test]
    fn a_session_nick_the_network_does_not_take_is_named_in_the_error() {
        let rt = runtime();
        let history = History::open(&Location::Memory, Default::default()).unwrap();
        let tools = tools(&history);
        let long = "reviewer".repeat(5);
        let session = Arc::new(switchboard_toolset::Session::new("test").with_identity(&long));
        let caller = Caller::new("test").in_session(session);
        rt.block_on(async {
            let err = tools
                .call("read_messages", args(json!({})), &caller)
                .await
                .unwrap_err();
            assert!(
                err.message()
                    .contains(&format!("your nick {long:?} cannot be used here")),
                "{err}"
            );
        });
    }

    #[test]
    fn reading_a_channel_that_does_not_exist_says_so() {
        let rt = runtime();
        let history = History::open(&Location::Memory, Default::default()).unwrap();
        let tools = tools(&history);
        let caller = Caller::new("test");
        rt.block_on(async {
            let call = |tool: &'static str, channel: &'static str| {
                tools.call(tool, args(json!({"channel": channel})), &caller)
            };
            let read = call("read_messages", "#nope").await.unwrap();
            assert_eq!(
                read.text,
                "No messages in #nope: switchboard knows no channel by that name (list_channels shows the ones it knows; send_message or create_channel makes one)."
            );
            let wait = tools.call(
                "wait_for_messages",
                args(json!({"channel": "#nope", "timeout_s": 0.2})),
                &caller,
            );
            let waited = wait.await.unwrap();
            assert!(
                waited.text.starts_with("No messages after 0.2 s in #nope: switchboard knows no channel"),
                "{}",
                waited.text
            );
            let members = call("get_members", "#nope").await.unwrap();
            assert!(members.text.starts_with("No members in #nope: switchboard knows no channel"));
            let search = |channel: &'static str| {
                tools.call(
                    "search_messages",
                    args(json!({"query": "deploy", "channel": channel})),
                    &caller,
                )
            };
            let found = search("#nope").await.unwrap();
            assert!(
                found
                    .text
                    .starts_with("No messages match \"deploy\" in #nope: switchboard knows no channel"),
                "{}",
                found.text
            );
            // A channel that exists and is empty is just empty.
            tools
                .call("create_channel", args(json!({"name": "#empty"})), &caller)
                .await
                .unwrap();
            assert_eq!(call("read_messages", "#empty").await.unwrap().text, "No messages in #empty.");
            assert_eq!(call("get_members", "#empty").await.unwrap().text, "No members in #empty.");
            assert_eq!(search("#empty").await.unwrap().text, "No messages match \"deploy\".");
        });
    }

    #[test]
    fn a_position_pages_forward_and_a_bad_since_changes_nothing() {
        let rt = runtime();
        let history = History::open(&Location::Memory, Default::default()).unwrap();
        let tools = tools(&history);
        let caller = Caller::new("test");
        rt.block_on(async {
            let send = args(json!({"channel": "#c", "text": "m1\nm2\nm3", "sender": "bob"}));
            let sent = tools.call("send_message", send, &caller).await.unwrap();
            assert_eq!(sent.structured["seq"], 3);
            let read = |since: Value, limit: i64| {
                let a =
                    args(json!({"channel": "#c", "since": since, "limit": limit, "nick": "ann"}));
                tools.call("read_messages", a, &caller)
            };
            let first = read(json!(0), 2).await.unwrap();
            let lines: Vec<&str> = first.text.lines().collect();
            assert!(lines[0].ends_with("] <bob> m2") && lines[1].ends_with("] <bob> m1"));
            assert_eq!(lines[2..], ["(up to seq 2; more follow)"]);
            assert_eq!(first.structured["more"], true);
            let rest = read(json!("2"), 2).await.unwrap();
            assert!(
                rest.text.ends_with("<bob> m3\n(up to seq 3)"),
                "{}",
                rest.text
            );
            assert!(rest.structured.get("more").is_none());
            let none = read(json!(3), 2).await.unwrap();
            assert_eq!(none.text, "No messages in #c after seq 3.");

            // ann has read up to m3; bad input leaves her cursor and the history alone.
            // Her cursor is saved behind the reads: wait for the writer first.
            let channel = tools.rules().channel("#c").unwrap();
            history.ensure_channel(&channel).await.unwrap();
            let commits = history.commits();
            for (bad, says) in [
                (json!("garbage"), "ISO 8601"),
                (json!(-1), "0 or more"),
                (json!(4), "after #c's newest message (seq 3)"),
                (json!("2999-01-01T00:00:00Z"), "in the future"),
            ] {
                let err = read(bad.clone(), 2).await.unwrap_err();
                assert!(err.message().contains(says), "{bad}: {err}");
                let a = args(json!({"channel": "#c", "since": bad, "timeout_s": 0}));
                let err = tools
                    .call("wait_for_messages", a, &caller)
                    .await
                    .unwrap_err();
                assert!(err.message().contains(says), "{bad}: {err}");
            }
            assert_eq!(history.commits(), commits);
            let channel_id = tools.channel_id(&channel).unwrap().unwrap();
            assert_eq!(history.cursor("ann", channel_id).unwrap().read_seq, 3);

            let waited = args(json!({"channel": "#c", "timeout_s": 0.05}));
            let quiet = tools
                .call("wait_for_messages", waited, &caller)
                .await
                .unwrap();
            assert_eq!(
                quiet.text,
                "No new messages in #c after 0.05 s (newest: seq 3)."
            );
        });
        history.close();
    }
}
