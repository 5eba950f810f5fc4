//! Approvals from a channel: a client's permission prompt, relayed to a chat
//! channel, answered there by a person.
//!
//! Claude Code sends `notifications/claude/channel/permission_request`
//! (`request_id`, `tool_name`, `description`, `input_preview`) to a server
//! that declares `claude/channel/permission`. It is posted to the approvals
//! channel as one notice naming the agent, the tool and the preview. A human
//! in that channel replies `yes <id>` or `no <id>`; the session that asked
//! then gets `notifications/claude/channel/permission` with the verdict, and
//! the channel an acknowledgement. Only people answer: an agent's reply, a
//! reply under the asking agent's own nick, or anyone's who is not a listed
//! approver (when approvers are listed), is refused in the channel and
//! changes nothing; so is an unknown, expired or already answered id. On
//! IRC, where a nick is anyone's to take, approvers can be services
//! accounts instead: a reply then counts only from a sender the network
//! vouches is logged in as one of them.
//!
//! Several processes may share one history (`serve --stdio` instances on
//! one data directory) and each hears every reply. The process whose agent
//! asked holds the request's id as a history claim, so no other agent can
//! ask under the same id, and only it answers replies naming that id; a
//! reply naming an id nobody holds is answered by the first process to
//! claim the reply. Other processes read the held ids' details from the
//! claims (the web view lists every pending request). The claims outlive
//! the process: when the daemon restarts, a session of the same agent takes
//! over its waiting requests ([`Approvals::adopt`]).

use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, Mutex, Weak},
    time::Duration,
};

use chrono::Utc;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use switchboard_toolset::{JsonObject, Notification, Session};
use tokio::time::Instant;

use crate::{
    backend::ChatBackend,
    history::{Claim, History, Message, SenderKind, this_process},
    names::Channel,
};

/// What a client sends to ask.
pub(crate) const REQUEST_METHOD: &str = "notifications/claude/channel/permission_request";
/// What the verdict goes back as.
pub(crate) const VERDICT_METHOD: &str = "notifications/claude/channel/permission";
/// The experimental capability a server declares to receive requests.
pub(crate) const CAPABILITY: &str = "claude/channel/permission";

const MAX_ID: usize = 64;
const MAX_TOOL: usize = 200;
const MAX_DESCRIPTION: usize = 300;
const MAX_PREVIEW: usize = 300;
/// Answered and expired requests are remembered this long, to say so.
const REMEMBER: Duration = Duration::from_secs(3600);
/// Requests remembered at once; the oldest go first.
const MAX_PENDING: usize = 1024;
/// How soon a request's notice that could not be posted is tried again,
/// and the longest pause between tries.
const REPOST_FIRST: Duration = Duration::from_secs(2);
const REPOST_MAX: Duration = Duration::from_secs(30);

/// `[chat.approvals]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalSettings {
    /// The channel requests are posted to and answered in.
    pub channel: String,
    /// Nicks allowed to answer (case-folded by the network's rules); any
    /// human when empty.
    pub approvers: Vec<String>,
    /// IRC services accounts allowed to answer instead (case-folded too):
    /// a reply counts only from a sender the network vouches is logged in
    /// as one of them ([`Message::account`]). Nicks are anyone's to take on
    /// IRC; accounts need the password.
    pub approver_accounts: Vec<String>,
    /// How long a request can be answered.
    pub timeout: Duration,
}

/// A request that can still be answered.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Pending {
    pub id: String,
    pub agent: String,
    pub tool: String,
    pub description: String,
    pub preview: String,
    /// Seconds left to answer it.
    pub expires_in_s: u64,
}

/// Requests waiting for (or past) an answer.
pub(crate) struct Approvals {
    settings: ApprovalSettings,
    backend: Arc<dyn ChatBackend>,
    history: History,
    /// This process's requests, by lowercase id.
    requests: Mutex<HashMap<String, Request>>,
}

/// What the claim on a request's id tells the other processes.
#[derive(Debug, Serialize, Deserialize)]
struct Claimed {
    /// The id as the agent's client sent it (absent in older claims: then
    /// the lowercase id).
    #[serde(default)]
    request_id: Option<String>,
    agent: String,
    tool: String,
    description: String,
    preview: String,
    /// When it was asked and until when it can be answered (µs).
    asked: i64,
    expires: i64,
    answered: bool,
}

/// The claim key of a request's (lowercase) id.
fn request_key(id: &str) -> String {
    format!("approval:{id}")
}

struct Request {
    /// The id as the agent's client sent it, for the verdict; requests are
    /// keyed (and answered in the channel) by its lowercase form.
    request_id: String,
    session: Weak<Session>,
    agent: String,
    tool: String,
    description: String,
    preview: String,
    asked: Instant,
    /// When it was asked, by the clock (µs), for the claim.
    asked_at: i64,
    /// The verdict and who gave it.
    answer: Option<(Behavior, String)>,
}

impl Request {
    /// Whether it can still be answered: not answered, not expired, and its
    /// session still there. Another request may take the id of one that
    /// cannot.
    fn pending(&self, timeout: Duration) -> bool {
        self.answer.is_none()
            && self.asked.elapsed() < timeout
            && self.session.upgrade().is_some_and(|s| !s.is_closed())
    }

    /// What the claim on its id says, and until when it holds: as long as
    /// this process remembers the request.
    fn claim(&self, timeout: Duration) -> (i64, String) {
        let claimed = Claimed {
            request_id: Some(self.request_id.clone()),
            agent: self.agent.clone(),
            tool: self.tool.clone(),
            description: self.description.clone(),
            preview: self.preview.clone(),
            asked: self.asked_at,
            expires: self.asked_at + micros(timeout),
            answered: self.answer.is_some(),
        };
        let data = serde_json::to_string(&claimed).unwrap_or_default();
        (self.asked_at + micros(REMEMBER), data)
    }

    /// The notice asking people for a verdict on it (`id` in lowercase),
    /// to be given within `secs`.
    fn notice(&self, id: &str, secs: u64) -> String {
        format!(
            "Approval {id}: {agent} wants to run {tool}: {description} — {preview} — reply \"yes {id}\" or \"no {id}\" (within {secs} s)",
            agent = self.agent,
            tool = self.tool,
            description = self.description,
            preview = self.preview,
        )
    }
}

fn micros(duration: Duration) -> i64 {
    i64::try_from(duration.as_micros()).unwrap_or(i64::MAX)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Behavior {
    Allow,
    Deny,
}

impl Behavior {
    fn as_str(self) -> &'static str {
        match self {
            Behavior::Allow => "allow",
            Behavior::Deny => "deny",
        }
    }
}

/// A permission request, checked.
struct Ask {
    /// The lowercase id, which people type.
    id: String,
    /// The id as sent.
    request_id: String,
    tool: String,
    description: String,
    preview: String,
}

impl Approvals {
    pub(crate) fn new(
        settings: ApprovalSettings,
        backend: Arc<dyn ChatBackend>,
        history: History,
    ) -> Self {
        Self {
            settings,
            backend,
            history,
            requests: Mutex::default(),
        }
    }

    fn channel(&self) -> Option<Channel> {
        self.backend.rules().channel(&self.settings.channel).ok()
    }

    /// A client asked: claim its id, and post the request to the approvals
    /// channel. Malformed or oversized requests, and ids another request
    /// holds, are logged and dropped.
    pub(crate) fn request(self: &Arc<Self>, session: &Arc<Session>, params: &JsonObject) {
        let ask = match parse(params) {
            Ok(ask) => ask,
            Err(problem) => {
                tracing::warn!(session = session.label(), %problem, "ignored a malformed permission request");
                return;
            }
        };
        let Some(channel) = self.channel() else {
            tracing::error!(channel = %self.settings.channel, "chat.approvals.channel is not a valid channel name");
            return;
        };
        let agent = session
            .identity()
            .unwrap_or_else(|| session.label().to_owned());
        let (until, data) = {
            let mut requests = self.requests();
            if requests
                .get(&ask.id)
                .is_some_and(|r| r.pending(self.settings.timeout))
            {
                tracing::warn!(id = %ask.id, "ignored a permission request whose id is already in use");
                return;
            }
            if requests.len() >= MAX_PENDING {
                forget_oldest(&mut requests);
            }
            let request = Request {
                request_id: ask.request_id.clone(),
                session: Arc::downgrade(session),
                agent: agent.clone(),
                tool: ask.tool.clone(),
                description: ask.description.clone(),
                preview: ask.preview.clone(),
                asked: Instant::now(),
                asked_at: Utc::now().timestamp_micros(),
                answer: None,
            };
            let claim = request.claim(self.settings.timeout);
            requests.insert(ask.id.clone(), request);
            claim
        };
        let this = self.clone();
        tokio::spawn(async move {
            match this
                .history
                .claim(&request_key(&ask.id), until, Some(data))
                .await
            {
                Ok(true) => {}
                Ok(false) => {
                    tracing::warn!(id = %ask.id, %agent, "ignored a permission request whose id another agent's request holds");
                    this.requests().remove(&ask.id);
                    return;
                }
                // Answered here all the same; other processes may answer
                // its replies too.
                Err(e) => {
                    tracing::warn!(id = %ask.id, error = %e, "cannot claim a permission request's id in the history")
                }
            }
            tracing::info!(id = %ask.id, %agent, tool = %ask.tool, "permission request posted");
            this.post_request(&channel, &ask.id).await;
        });
    }

    /// Takes over the requests `session`'s agent asked through a process
    /// that has exited since (this daemon, before a restart) and that are
    /// neither answered nor expired: the agent's client has reconnected and
    /// still waits for their verdicts. Each is posted again, with the time
    /// left to answer it.
    pub(crate) fn adopt(self: &Arc<Self>, session: &Arc<Session>) {
        let Some(agent) = session.identity() else {
            return;
        };
        let Some(channel) = self.channel() else {
            return;
        };
        let claims = match self.history.claims(&request_key("")) {
            Ok(claims) => claims,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the approval requests of earlier processes");
                return;
            }
        };
        let rules = self.backend.rules();
        let now = Utc::now().timestamp_micros();
        let known: HashSet<String> = self.requests().keys().cloned().collect();
        let orphans: Vec<(String, Claimed)> = claims
            .into_iter()
            .filter_map(|claim| {
                let id = claim.key.strip_prefix(&request_key(""))?.to_owned();
                // A process with this one's id is an earlier one (ids are
                // reused): what it held, this one does not know.
                let lapsed = claim.owner == this_process() || !claim.holds();
                let asked: Claimed = serde_json::from_str(claim.data.as_deref()?).ok()?;
                (lapsed
                    && !known.contains(&id)
                    && !asked.answered
                    && asked.expires > now
                    && rules.fold(&asked.agent) == rules.fold(&agent))
                .then_some((id, asked))
            })
            .collect();
        if orphans.is_empty() {
            return;
        }
        let (this, session) = (self.clone(), Arc::downgrade(session));
        tokio::spawn(async move {
            for (id, asked) in orphans {
                let ago = Duration::from_micros(
                    u64::try_from(Utc::now().timestamp_micros() - asked.asked).unwrap_or(0),
                );
                let request = Request {
                    request_id: asked.request_id.unwrap_or_else(|| id.clone()),
                    session: session.clone(),
                    agent: asked.agent,
                    tool: asked.tool,
                    description: asked.description,
                    preview: asked.preview,
                    asked: Instant::now().checked_sub(ago).unwrap_or_else(Instant::now),
                    asked_at: asked.asked,
                    answer: None,
                };
                let (until, data) = request.claim(this.settings.timeout);
                if !matches!(
                    this.history
                        .claim(&request_key(&id), until, Some(data))
                        .await,
                    Ok(true)
                ) {
                    continue;
                }
                let taken = match this.requests().entry(id.clone()) {
                    std::collections::hash_map::Entry::Vacant(slot) => {
                        slot.insert(request);
                        true
                    }
                    // Asked anew meanwhile.
                    std::collections::hash_map::Entry::Occupied(_) => false,
                };
                if taken {
                    tracing::info!(%id, agent = %agent, "permission request taken over from an earlier process");
                    let (this, channel) = (this.clone(), channel.clone());
                    tokio::spawn(async move { this.post_request(&channel, &id).await });
                }
            }
        });
    }

    /// A message was committed: if it answers a request in the approvals
    /// channel, settle it (the acknowledgement is posted in the background).
    /// A reply naming another process's request is that process's to
    /// answer.
    pub(crate) fn on_message(self: &Arc<Self>, message: &Message) {
        let Some(channel) = self.channel() else {
            return;
        };
        if message.channel_key != channel.key() {
            return;
        }
        let Some((behavior, id)) = parse_reply(&message.text) else {
            return;
        };
        if self.requests().contains_key(&id) {
            let reply = self.answer(&id, behavior, message);
            let this = self.clone();
            tokio::spawn(async move {
                this.save_answer(&id).await;
                this.announce(channel, reply).await;
            });
            return;
        }
        let (this, message) = (self.clone(), message.clone());
        tokio::spawn(async move {
            let held = match this.history.claim_on(&request_key(&id)) {
                Ok(held) => held,
                Err(e) => {
                    tracing::warn!(%id, error = %e, "cannot read who holds an approval request");
                    None
                }
            };
            if held
                .as_ref()
                .is_some_and(|claim| claim.owner != this_process() && claim.holds())
            {
                return;
            }
            let until = Utc::now().timestamp_micros() + micros(REMEMBER);
            let reply_key = format!("approval-reply:{}", message.id);
            if !matches!(this.history.claim(&reply_key, until, None).await, Ok(true)) {
                return;
            }
            let reply = this.answer_unheld(&id, &message, held);
            this.announce(channel, reply).await;
        });
    }

    /// Why `message` may not answer `id` at all, if it may not.
    fn refusal(&self, id: &str, message: &Message) -> Option<String> {
        let by = &message.nick;
        if message.kind != SenderKind::Human {
            return Some(format!(
                "{by}: only a person can answer approvals; {id} is unchanged."
            ));
        }
        let rules = self.backend.rules();
        let accounts = &self.settings.approver_accounts;
        if !accounts.is_empty()
            && !message.account.as_deref().is_some_and(|account| {
                accounts
                    .iter()
                    .any(|a| rules.fold(a) == rules.fold(account))
            })
        {
            return Some(format!(
                "{by}: only a person logged in to an approver's account can answer approvals here (the IRC network vouches for {}); {id} is unchanged.",
                match &message.account {
                    Some(account) => format!("your account {account}, which is not one of them"),
                    None => "no account of yours: log in with your services (NickServ), on a network that tags accounts".into(),
                }
            ));
        }
        if !self.settings.approvers.is_empty()
            && !self
                .settings
                .approvers
                .iter()
                .any(|a| rules.fold(a) == message.nick_key)
        {
            return Some(format!(
                "{by}: you are not an approver here; {id} is unchanged."
            ));
        }
        None
    }

    /// What to say to a reply naming an id no running process holds: the
    /// agent whose process exited has gone away; otherwise there is no such
    /// request.
    fn answer_unheld(&self, id: &str, message: &Message, lapsed: Option<Claim>) -> String {
        if let Some(refusal) = self.refusal(id, message) {
            return refusal;
        }
        let by = &message.nick;
        let asked: Option<Claimed> = lapsed
            .and_then(|claim| claim.data)
            .and_then(|data| serde_json::from_str(&data).ok());
        match asked {
            Some(asked) if !asked.answered => {
                format!(
                    "{by}: {} has gone away; {id} cannot be answered.",
                    asked.agent
                )
            }
            _ => format!("{by}: there is no approval request {id}."),
        }
    }

    /// Settles this process's request `id` with `behavior` if `message`
    /// may; returns what to say in the channel.
    fn answer(&self, id: &str, behavior: Behavior, message: &Message) -> String {
        if let Some(refusal) = self.refusal(id, message) {
            return refusal;
        }
        let by = &message.nick;
        let rules = self.backend.rules();
        let mut requests = self.requests();
        requests.retain(|_, r| r.asked.elapsed() < REMEMBER);
        let Some(request) = requests.get_mut(id) else {
            return format!("{by}: there is no approval request {id}.");
        };
        // Whoever can speak as the agent's nick (`say --as`) is not a second pair of eyes.
        if rules.fold(&request.agent) == message.nick_key {
            return format!("{by}: {id} is your own request; someone else must answer it.");
        }
        if let Some((given, who)) = &request.answer {
            return format!(
                "{by}: {id} was already answered ({} by {who}).",
                given.as_str()
            );
        }
        if request.asked.elapsed() > self.settings.timeout {
            return format!("{by}: {id} has expired; nothing was sent.");
        }
        let Some(session) = request.session.upgrade().filter(|s| !s.is_closed()) else {
            return format!(
                "{by}: {} has gone away; {id} cannot be answered.",
                request.agent
            );
        };
        let mut params = JsonObject::new();
        params.insert(
            "request_id".into(),
            Value::String(request.request_id.clone()),
        );
        params.insert(
            "behavior".into(),
            Value::String(behavior.as_str().to_owned()),
        );
        if !session.notify(Notification::new(VERDICT_METHOD, params)) {
            return format!(
                "{by}: {} is not reading its notifications; {id} is unchanged.",
                request.agent
            );
        }
        request.answer = Some((behavior, by.clone()));
        tracing::info!(%id, behavior = behavior.as_str(), %by, agent = %request.agent, "approval answered");
        let verb = match behavior {
            Behavior::Allow => "allowed",
            Behavior::Deny => "denied",
        };
        format!(
            "{id} {verb} by {by}: {} may{} run {}.",
            request.agent,
            if behavior == Behavior::Deny {
                " not"
            } else {
                ""
            },
            request.tool
        )
    }

    /// Tells the other processes that this process's request `id` is
    /// answered (when it is), so their web views drop it.
    async fn save_answer(&self, id: &str) {
        let claim = {
            let requests = self.requests();
            match requests.get(id) {
                Some(request) if request.answer.is_some() => request.claim(self.settings.timeout),
                _ => return,
            }
        };
        let (until, data) = claim;
        if let Err(e) = self
            .history
            .claim(&request_key(id), until, Some(data))
            .await
        {
            tracing::warn!(%id, error = %e, "cannot record an approval's answer in the history");
        }
    }

    /// Posts request `id`'s notice to the approvals channel, with the time
    /// left to answer it. A notice that cannot be posted (the network is
    /// down) is tried again, less and less often, while the request waits:
    /// nobody can answer a request nobody saw.
    async fn post_request(&self, channel: &Channel, id: &str) {
        let mut pause = REPOST_FIRST;
        loop {
            let text = {
                let requests = self.requests();
                let Some(request) = requests
                    .get(id)
                    .filter(|r| r.pending(self.settings.timeout))
                else {
                    return;
                };
                let left = self
                    .settings
                    .timeout
                    .saturating_sub(request.asked.elapsed());
                request.notice(id, left.as_secs())
            };
            match self.backend.announce(channel, text, None).await {
                Ok(()) => return,
                Err(e) => {
                    tracing::warn!(%id, %channel, error = %e, retry_in_s = pause.as_secs(), "cannot post a permission request to the approvals channel");
                }
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(REPOST_MAX);
        }
    }

    /// Posts a notice to the approvals channel.
    async fn announce(&self, channel: Channel, text: String) {
        if let Err(e) = self.backend.announce(&channel, text, None).await {
            tracing::warn!(%channel, error = %e, "cannot post to the approvals channel");
        }
    }

    /// Requests not yet answered nor expired, whose agent is still there,
    /// oldest first: this process's, and those other processes sharing the
    /// history hold.
    pub(crate) fn pending(&self) -> Vec<Pending> {
        let timeout = self.settings.timeout;
        let now = Utc::now().timestamp_micros();
        let requests = self.requests();
        let mut pending: Vec<(i64, Pending)> = requests
            .iter()
            .filter(|(_, r)| r.pending(timeout))
            .map(|(id, r)| {
                let pending = Pending {
                    id: id.clone(),
                    agent: r.agent.clone(),
                    tool: r.tool.clone(),
                    description: r.description.clone(),
                    preview: r.preview.clone(),
                    expires_in_s: timeout.saturating_sub(r.asked.elapsed()).as_secs(),
                };
                (r.asked_at, pending)
            })
            .collect();
        let own: HashSet<String> = requests.keys().cloned().collect();
        drop(requests);
        let held = self.history.claims("approval:").unwrap_or_else(|e| {
            tracing::warn!(error = %e, "cannot read other processes' approval requests");
            Vec::new()
        });
        // Other processes' requests; one of this process's id that it does
        // not know was an earlier process's.
        for claim in held
            .into_iter()
            .filter(|claim| claim.owner != this_process() && claim.holds())
        {
            let Some(id) = claim.key.strip_prefix("approval:") else {
                continue;
            };
            if own.contains(id) {
                continue;
            }
            let Some(asked) = claim
                .data
                .and_then(|data| serde_json::from_str::<Claimed>(&data).ok())
                .filter(|asked| !asked.answered && asked.expires > now)
            else {
                continue;
            };
            let pending_one = Pending {
                id: id.to_owned(),
                agent: asked.agent,
                tool: asked.tool,
                description: asked.description,
                preview: asked.preview,
                expires_in_s: u64::try_from((asked.expires - now) / 1_000_000).unwrap_or(0),
            };
            pending.push((asked.asked, pending_one));
        }
        pending.sort_by_key(|(asked, _)| *asked);
        pending.into_iter().map(|(_, p)| p).collect()
    }

    fn requests(&self) -> std::sync::MutexGuard<'_, HashMap<String, Request>> {
        self.requests.lock().expect("approvals lock")
    }
}

fn forget_oldest(requests: &mut HashMap<String, Request>) {
    if let Some(oldest) = requests
        .iter()
        .min_by_key(|(_, r)| r.asked)
        .map(|(id, _)| id.clone())
    {
        requests.remove(&oldest);
    }
}

/// Checks a request's params: every field a string, the id a short word.
fn parse(params: &JsonObject) -> Result<Ask, String> {
    let field = |name: &str| -> Result<&str, String> {
        match params.get(name) {
            Some(Value::String(s)) => Ok(s),
            Some(_) => Err(format!("{name} is not a string")),
            None => Err(format!("{name} is missing")),
        }
    };
    let request_id = field("request_id")?;
    let id = request_id.to_ascii_lowercase();
    if id.is_empty()
        || id.len() > MAX_ID
        || !id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(format!(
            "request_id must be 1 to {MAX_ID} letters, digits, - or _"
        ));
    }
    let tool = field("tool_name")?;
    if tool.is_empty() || tool.len() > MAX_TOOL {
        return Err(format!("tool_name must be 1 to {MAX_TOOL} bytes"));
    }
    Ok(Ask {
        id,
        request_id: request_id.to_owned(),
        tool: one_line(tool, MAX_TOOL),
        description: one_line(field("description")?, MAX_DESCRIPTION),
        preview: one_line(
            params
                .get("input_preview")
                .and_then(Value::as_str)
                .unwrap_or(""),
            MAX_PREVIEW,
        ),
    })
}

/// `text` on one line (control characters become spaces, runs of spaces
/// one; invisible ones, which could turn the notice around, are dropped),
/// cut to `max` characters with `…`.
fn one_line(text: &str, max: usize) -> String {
    let mut out = String::new();
    for word in text
        .split(|c: char| c.is_whitespace() || c.is_control())
        .filter(|w| !w.is_empty())
    {
        if !out.is_empty() {
            out.push(' ');
        }
        out.extend(word.chars().filter(|&c| !crate::text::is_invisible(c)));
    }
    if out.chars().count() > max {
        out = out.chars().take(max).collect();
        out.push('…');
    }
    out
}

/// `yes <id>` / `no <id>` (also `y`/`n`, any case, nothing else on the line
/// but the punctuation people end a sentence with).
fn parse_reply(text: &str) -> Option<(Behavior, String)> {
    let text = crate::text::without_formatting(text);
    let mut words = text.split_whitespace();
    let verdict = words.next()?.to_ascii_lowercase();
    let id = words
        .next()?
        .trim_end_matches(['.', '!', ',', ';'])
        .to_ascii_lowercase();
    if words.next().is_some() || id.len() > MAX_ID {
        return None;
    }
    let behavior = match verdict.as_str() {
        "y" | "yes" => Behavior::Allow,
        "n" | "no" => Behavior::Deny,
        _ => return None,
    };
    Some((behavior, id))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn replies_are_a_verdict_and_an_id_alone() {
        assert_eq!(
            parse_reply("yes abcde"),
            Some((Behavior::Allow, "abcde".into()))
        );
        assert_eq!(
            parse_reply("  N   ABCDE "),
            Some((Behavior::Deny, "abcde".into()))
        );
        assert_eq!(
            parse_reply("yes abcde."),
            Some((Behavior::Allow, "abcde".into()))
        );
        assert_eq!(
            parse_reply("\u{2}no\u{2} \u{3}04abcde\u{3}"),
            Some((Behavior::Deny, "abcde".into()))
        );
        for not_a_reply in ["yes", "yes abcde please", "sure abcde", "", "no"] {
            assert_eq!(parse_reply(not_a_reply), None, "{not_a_reply}");
        }
    }

    #[test]
    fn requests_are_checked_and_flattened() {
        let ask = parse(
            json!({"request_id": "AbCdE", "tool_name": "Bash", "description": "list\n\u{202e}files\u{200b}", "input_preview": "{\"command\":\"ls\"}"})
                .as_object()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(
            (ask.id.as_str(), ask.request_id.as_str()),
            ("abcde", "AbCdE")
        );
        assert_eq!(ask.description, "list files");
        let long = parse(
            json!({"request_id": "x", "tool_name": "T", "description": "d".repeat(5000)})
                .as_object()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(long.description.chars().count(), MAX_DESCRIPTION + 1);
        for bad in [
            json!({"tool_name": "Bash", "description": ""}),
            json!({"request_id": 5, "tool_name": "Bash", "description": ""}),
            json!({"request_id": "a b", "tool_name": "Bash", "description": ""}),
            json!({"request_id": "x".repeat(65), "tool_name": "Bash", "description": ""}),
            json!({"request_id": "abcde", "tool_name": "", "description": ""}),
            json!({"request_id": "abcde", "tool_name": "Bash", "description": []}),
        ] {
            assert!(parse(bad.as_object().unwrap()).is_err(), "{bad}");
        }
    }
}
