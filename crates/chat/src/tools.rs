//! The chat toolset: the seven tools agents use to talk in channels.
//!
//! Names, parameters and text formats are fixed: clients of the original IRC
//! bridge parse them. Each result's text stands on its own (many hosts show
//! the model only the text) and `structuredContent` mirrors it.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use chrono::{DateTime, NaiveDate, NaiveDateTime, Utc};
use serde::Deserialize;
use serde_json::{Value, json};
use switchboard_toolset::{
    Caller, JsonObject, Tool, ToolAnnotations, ToolError, ToolFuture, ToolOutput, Toolset,
    object_schema, parse_args, with_call_timeout,
};

use crate::{
    backend::ChatBackend,
    history::{History, Message, iso},
    names::Channel,
    text::message_lines,
};

/// Limits a deployment may tune; see `docs/configuration.md`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatLimits {
    /// Longest text `send_message` accepts, in bytes.
    pub max_text_bytes: usize,
}

impl Default for ChatLimits {
    fn default() -> Self {
        Self {
            max_text_bytes: 32 * 1024,
        }
    }
}

const READ_DEFAULT: i64 = 50;
const READ_MAX: i64 = 500;
const SEARCH_DEFAULT: i64 = 20;
const SEARCH_MAX: i64 = 100;
const WAIT_DEFAULT_S: f64 = 30.0;
const WAIT_MAX_S: f64 = 50.0;

/// The chat tools over one backend and its history.
pub struct ChatTools {
    backend: Arc<dyn ChatBackend>,
    history: History,
    limits: ChatLimits,
    /// The last `read_messages` page per channel. Agents polling a busy
    /// channel ask for the same page many times between two commits; that
    /// page is built (an SQLite read, and a JSON tree of every message) once.
    reads: Mutex<HashMap<String, CachedRead>>,
}

/// A `read_messages` page, valid while the history has made no commit.
struct CachedRead {
    commits: u64,
    since: Option<DateTime<Utc>>,
    limit: usize,
    /// Kept from the second read of the page on: a copy costs about as much
    /// as building the page, so a page read once (a read between two sends)
    /// is not copied.
    output: Option<ToolOutput>,
}

/// Channels whose last read is kept.
const CACHED_READS: usize = 64;

impl ChatTools {
    pub fn new(backend: Arc<dyn ChatBackend>, history: History, limits: ChatLimits) -> Self {
        Self {
            backend,
            history,
            limits,
            reads: Mutex::default(),
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
    channel: String,
    since: Option<String>,
    limit: Option<i64>,
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
struct NoParams {}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WaitParams {
    channel: String,
    since: Option<String>,
    timeout_s: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SearchParams {
    query: String,
    channel: Option<String>,
    limit: Option<i64>,
}

impl Toolset for ChatTools {
    fn name(&self) -> &str {
        "chat"
    }

    fn tools(&self) -> Vec<Tool> {
        tool_definitions()
    }

    fn close(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> {
        self.backend.close()
    }

    fn call<'a>(&'a self, tool: &'a str, args: JsonObject, caller: &'a Caller) -> ToolFuture<'a> {
        Box::pin(async move {
            match tool {
                "send_message" => self.send_message(parse_args(tool, args)?, caller).await,
                "read_messages" => self.read_messages(parse_args(tool, args)?),
                "create_channel" => self.create_channel(parse_args(tool, args)?).await,
                "list_channels" => self.list_channels(parse_args(tool, args)?).await,
                "get_members" => self.get_members(parse_args(tool, args)?).await,
                "wait_for_messages" => self.wait_for_messages(parse_args(tool, args)?).await,
                "search_messages" => self.search_messages(parse_args(tool, args)?).await,
                other => Err(ToolError::new(format!(
                    "the chat toolset has no tool {other}"
                ))),
            }
        })
    }
}

fn fail(e: impl std::fmt::Display) -> ToolError {
    ToolError::new(e.to_string())
}

impl ChatTools {
    fn channel(&self, raw: &str) -> Result<Channel, ToolError> {
        self.backend.rules().channel(raw).map_err(fail)
    }

    async fn send_message(&self, p: SendParams, caller: &Caller) -> Result<ToolOutput, ToolError> {
        let rules = self.backend.rules();
        let channel = rules.channel(&p.channel).map_err(fail)?;
        let sender = p
            .sender
            .or_else(|| caller.default_nick.clone())
            .ok_or_else(|| {
                ToolError::new(
                    "invalid arguments for send_message: missing field `sender` (your nick)",
                )
            })?;
        let sender = rules
            .nick(&sender)
            .map_err(|e| ToolError::new(format!("sender: {e}")))?;
        let lines = message_lines(&p.text, self.limits.max_text_bytes).map_err(fail)?;
        let delivery = self
            .backend
            .send(&channel, &sender, lines)
            .await
            .map_err(fail)?;
        let text = format!("Sent to {channel} as {}", delivery.sent_as);
        let mut structured = json!({
            "channel": channel.name(),
            "sender": delivery.sent_as,
            "lines": delivery.lines,
            "confirmed": delivery.confirmed,
            "ids": delivery.stored.iter().map(|m| m.id).collect::<Vec<_>>(),
        });
        if let Some(last) = delivery.stored.last() {
            structured["time"] = Value::String(iso(&last.time));
        }
        Ok(ToolOutput::new(text, structured))
    }

    fn read_messages(&self, p: ReadParams) -> Result<ToolOutput, ToolError> {
        let channel = self.channel(&p.channel)?;
        let since = p.since.as_deref().map(parse_since).transpose()?;
        let limit = bounded("limit", p.limit, READ_DEFAULT, READ_MAX)?;
        // Loaded before reading: a commit after this makes the entry stale.
        let commits = self.history.commits();
        let same = |c: &CachedRead| c.commits == commits && c.since == since && c.limit == limit;
        let repeated = match self.reads().get(channel.name()).filter(|c| same(c)) {
            Some(CachedRead {
                output: Some(hit), ..
            }) => return Ok(hit.clone()),
            Some(_) => true,
            None => false,
        };
        let messages = self
            .history
            .read(channel.key(), since, limit)
            .map_err(fail)?;
        let output = messages_output(&channel, &messages, since, false);
        let mut reads = self.reads();
        if reads.len() >= CACHED_READS {
            reads.retain(|_, c| c.commits == commits);
        }
        let entry = CachedRead {
            commits,
            since,
            limit,
            output: repeated.then(|| output.clone()),
        };
        reads.insert(channel.name().to_owned(), entry);
        Ok(output)
    }

    fn reads(&self) -> std::sync::MutexGuard<'_, HashMap<String, CachedRead>> {
        self.reads.lock().expect("read cache lock")
    }

    async fn create_channel(&self, p: NameParams) -> Result<ToolOutput, ToolError> {
        let channel = self.channel(&p.name)?;
        let created = self.backend.create_channel(&channel).await.map_err(fail)?;
        let text = if created {
            format!("Created {channel}")
        } else {
            format!("{channel} already exists")
        };
        Ok(ToolOutput::new(
            text,
            json!({"channel": channel.name(), "created": created}),
        ))
    }

    async fn list_channels(&self, _: NoParams) -> Result<ToolOutput, ToolError> {
        let channels = self.backend.channels().await.map_err(fail)?;
        let text = if channels.is_empty() {
            "No channels yet; send_message or create_channel makes one.".to_owned()
        } else {
            bullets(&channels)
        };
        Ok(ToolOutput::new(text, json!({"channels": channels})))
    }

    async fn get_members(&self, p: ChannelParams) -> Result<ToolOutput, ToolError> {
        let channel = self.channel(&p.channel)?;
        let members = self.backend.members(&channel).await.map_err(fail)?;
        let text = if members.is_empty() {
            format!("No members in {channel}.")
        } else {
            bullets(&members)
        };
        Ok(ToolOutput::new(
            text,
            json!({"channel": channel.name(), "members": members}),
        ))
    }

    async fn wait_for_messages(&self, p: WaitParams) -> Result<ToolOutput, ToolError> {
        let channel = self.channel(&p.channel)?;
        let since = match p.since.as_deref() {
            Some(raw) => parse_since(raw)?,
            None => Utc::now(),
        };
        let timeout = p.timeout_s.unwrap_or(WAIT_DEFAULT_S);
        if !(0.0..=WAIT_MAX_S).contains(&timeout) {
            return Err(ToolError::new(format!(
                "timeout_s must be between 0 and {WAIT_MAX_S} seconds (got {timeout})"
            )));
        }
        let messages = self
            .history
            .wait_newer(
                channel.key(),
                since,
                READ_DEFAULT as usize,
                Duration::from_secs_f64(timeout),
            )
            .await
            .map_err(fail)?;
        let timed_out = messages.is_empty();
        let mut output = messages_output(&channel, &messages, Some(since), timed_out);
        if timed_out {
            output.text = format!(
                "No new messages in {channel} after {timeout} s (since {}).",
                iso(&since)
            );
        }
        Ok(output)
    }

    async fn search_messages(&self, p: SearchParams) -> Result<ToolOutput, ToolError> {
        let channel = p.channel.as_deref().map(|c| self.channel(c)).transpose()?;
        let limit = bounded("limit", p.limit, SEARCH_DEFAULT, SEARCH_MAX)?;
        let fts = fts_query(&p.query).ok_or_else(|| {
            ToolError::new("query has no words to search for; give one or more words")
        })?;
        let messages = self
            .history
            .search(fts, channel.as_ref().map(|c| c.key().to_owned()), limit)
            .await
            .map_err(fail)?;
        let text = if messages.is_empty() {
            format!("No messages match {:?}.", p.query)
        } else {
            messages
                .iter()
                .map(|m| {
                    format!(
                        "[{}] {} <{}> {}",
                        m.time.format("%Y-%m-%d %H:%M:%S"),
                        m.channel,
                        m.nick,
                        m.text
                    )
                })
                .collect::<Vec<_>>()
                .join("\n")
        };
        Ok(ToolOutput::new(
            text,
            json!({"query": p.query, "messages": messages}),
        ))
    }
}

/// `read_messages`-style output: `[HH:MM:SS] <nick> text` lines, newest first.
fn messages_output(
    channel: &Channel,
    messages: &[Message],
    since: Option<DateTime<Utc>>,
    timed_out: bool,
) -> ToolOutput {
    let text = if messages.is_empty() {
        match since {
            Some(t) => format!("No messages in {channel} since {}.", iso(&t)),
            None => format!("No messages in {channel}."),
        }
    } else {
        let mut text = String::with_capacity(
            messages
                .iter()
                .map(|m| m.nick.len() + m.text.len() + 16)
                .sum(),
        );
        for (i, m) in messages.iter().enumerate() {
            use chrono::Timelike;
            use std::fmt::Write;
            if i > 0 {
                text.push('\n');
            }
            // By hand: chrono's `format` re-parses its pattern every call.
            let t = m.time;
            let _ = write!(
                text,
                "[{:02}:{:02}:{:02}] <{}> {}",
                t.hour(),
                t.minute(),
                t.second(),
                m.nick,
                m.text
            );
        }
        text
    };
    let mut structured = json!({"channel": channel.name(), "messages": messages});
    if timed_out {
        structured["timed_out"] = Value::Bool(true);
    }
    ToolOutput::new(text, structured)
}

fn bullets(items: &[String]) -> String {
    items
        .iter()
        .map(|i| format!("- {i}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Checks an optional integer parameter against `1..=max`.
fn bounded(name: &str, value: Option<i64>, default: i64, max: i64) -> Result<usize, ToolError> {
    let value = value.unwrap_or(default);
    if (1..=max).contains(&value) {
        Ok(value as usize)
    } else {
        Err(ToolError::new(format!(
            "{name} must be between 1 and {max} (got {value})"
        )))
    }
}

/// Parses `since`: RFC 3339 (`2026-11-30T22:15:00Z`, `…+02:00`), or a date
/// and time without zone (taken as UTC), or a bare date (midnight UTC).
pub fn parse_since(raw: &str) -> Result<DateTime<Utc>, ToolError> {
    let raw = raw.trim();
    if let Ok(t) = DateTime::parse_from_rfc3339(raw) {
        return Ok(t.with_timezone(&Utc));
    }
    for format in [
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%d %H:%M:%S%.f",
        "%Y-%m-%dT%H:%M",
    ] {
        if let Ok(t) = NaiveDateTime::parse_from_str(raw, format) {
            return Ok(t.and_utc());
        }
    }
    if let Ok(d) = NaiveDate::parse_from_str(raw, "%Y-%m-%d") {
        return Ok(d.and_hms_opt(0, 0, 0).unwrap_or_default().and_utc());
    }
    let shown: String = raw.chars().take(60).collect();
    Err(ToolError::new(format!(
        "since must be an ISO 8601 time such as 2026-11-30T22:15:00Z (got {shown:?})"
    )))
}

/// Turns free text into an FTS5 query: every word must occur (a word is
/// quoted, so FTS5 operators and punctuation in the input are plain text).
fn fts_query(raw: &str) -> Option<String> {
    let words: Vec<String> = raw
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .take(32)
        .map(|w| format!("\"{w}\""))
        .collect();
    (!words.is_empty()).then(|| words.join(" "))
}

fn tool_definitions() -> Vec<Tool> {
    let message_list = json!({
        "type": "object",
        "properties": {
            "channel": {"type": "string"},
            "messages": {"type": "array", "items": {
                "type": "object",
                "properties": {
                    "id": {"type": "integer"},
                    "channel": {"type": "string"},
                    "time": {"type": "string"},
                    "nick": {"type": "string"},
                    "text": {"type": "string"}
                }
            }},
            "timed_out": {"type": "boolean"}
        },
        "required": ["messages"]
    });
    let channel = json!({"type": "string", "description": "Channel, e.g. #general"});
    let since = json!({"type": "string", "description": "ISO 8601 time; only newer messages"});
    let read_only = ToolAnnotations::new()
        .read_only(true)
        .destructive(false)
        .idempotent(true)
        .open_world(false);
    let output = |v: Value| Arc::new(v.as_object().cloned().unwrap_or_default());
    vec![
        Tool::new(
            "send_message",
            "Post a message to a channel (created if missing). Each line of text is sent as one message.",
            object_schema(
                json!({
                    "channel": channel,
                    "text": {"type": "string"},
                    "sender": {"type": "string", "description": "Your nick (required except through the relay shim, which defaults to the agent's process name)"}
                }),
                &["channel", "text"],
            ),
        )
        .with_raw_output_schema(output(json!({
            "type": "object",
            "properties": {
                "channel": {"type": "string"},
                "sender": {"type": "string"},
                "lines": {"type": "integer"},
                "confirmed": {"type": "boolean"},
                "ids": {"type": "array", "items": {"type": "integer"}},
                "time": {"type": "string"}
            },
            "required": ["channel", "sender", "lines", "confirmed"]
        })))
        .with_annotations(
            ToolAnnotations::new()
                .read_only(false)
                .destructive(false)
                .idempotent(false)
                .open_world(false),
        ),
        Tool::new(
            "read_messages",
            "Read a channel's recent messages, newest first, as [HH:MM:SS] <nick> text (UTC).",
            object_schema(
                json!({
                    "channel": channel,
                    "since": since,
                    "limit": {"type": "integer", "minimum": 1, "maximum": READ_MAX, "default": READ_DEFAULT}
                }),
                &["channel"],
            ),
        )
        .with_raw_output_schema(output(message_list.clone()))
        .with_annotations(read_only.clone()),
        Tool::new(
            "create_channel",
            "Create a channel.",
            object_schema(json!({"name": channel}), &["name"]),
        )
        .with_raw_output_schema(output(json!({
            "type": "object",
            "properties": {"channel": {"type": "string"}, "created": {"type": "boolean"}},
            "required": ["channel", "created"]
        })))
        .with_annotations(
            ToolAnnotations::new()
                .read_only(false)
                .destructive(false)
                .idempotent(true)
                .open_world(false),
        ),
        Tool::new(
            "list_channels",
            "List the channels.",
            object_schema(json!({}), &[]),
        )
        .with_raw_output_schema(output(json!({
            "type": "object",
            "properties": {"channels": {"type": "array", "items": {"type": "string"}}},
            "required": ["channels"]
        })))
        .with_annotations(read_only.clone()),
        Tool::new(
            "get_members",
            "List the nicks in a channel.",
            object_schema(json!({"channel": channel}), &["channel"]),
        )
        .with_raw_output_schema(output(json!({
            "type": "object",
            "properties": {
                "channel": {"type": "string"},
                "members": {"type": "array", "items": {"type": "string"}}
            },
            "required": ["channel", "members"]
        })))
        .with_annotations(read_only.clone()),
        with_call_timeout(Tool::new(
            "wait_for_messages",
            "Block until a channel has messages newer than since (default: now), then return them like read_messages; returns empty after timeout_s.",
            object_schema(
                json!({
                    "channel": channel,
                    "since": since,
                    "timeout_s": {"type": "number", "minimum": 0, "maximum": WAIT_MAX_S, "default": WAIT_DEFAULT_S}
                }),
                &["channel"],
            ),
        )
        .with_raw_output_schema(output(message_list.clone()))
        .with_annotations(read_only.clone()),
        // Blocks up to 50 s; transports that time calls out must wait longer.
        Duration::from_secs(WAIT_MAX_S as u64 + 10)),
        Tool::new(
            "search_messages",
            "Full-text search of the message history (all words must match), best match first.",
            object_schema(
                json!({
                    "query": {"type": "string"},
                    "channel": {"type": "string", "description": "Only this channel"},
                    "limit": {"type": "integer", "minimum": 1, "maximum": SEARCH_MAX, "default": SEARCH_DEFAULT}
                }),
                &["query"],
            ),
        )
        .with_raw_output_schema(output(json!({
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "messages": message_list["properties"]["messages"]
            },
            "required": ["messages"]
        })))
        .with_annotations(read_only),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_accepts_common_iso_forms() {
        let z = parse_since("2026-11-30T22:15:00Z").unwrap();
        assert_eq!(parse_since("2026-11-30T23:15:00+01:00").unwrap(), z);
        assert_eq!(parse_since("2026-11-30T22:15:00").unwrap(), z);
        assert_eq!(parse_since("2026-11-30 22:15:00").unwrap(), z);
        assert_eq!(parse_since("2026-11-30T22:15").unwrap(), z);
        assert!(parse_since("2026-11-30").is_ok());
        let precise = parse_since("2026-11-30T22:15:00.123456Z").unwrap();
        assert_eq!(precise.timestamp_subsec_micros(), 123456);
    }

    #[test]
    fn since_refuses_non_iso_text() {
        for bad in [
            "yesterday",
            "",
            "30/11/2026",
            "2026-13-01T00:00:00Z",
            "12:00",
        ] {
            let err = parse_since(bad).unwrap_err();
            assert!(err.message().contains("ISO 8601"), "{bad}: {err}");
        }
    }

    #[test]
    fn limits_outside_the_range_are_refused() {
        assert_eq!(bounded("limit", None, 50, 500).unwrap(), 50);
        assert_eq!(bounded("limit", Some(500), 50, 500).unwrap(), 500);
        for bad in [0, -1, 501, i64::MAX] {
            assert!(bounded("limit", Some(bad), 50, 500).is_err());
        }
    }

    #[test]
    fn fts_queries_quote_every_word() {
        assert_eq!(
            fts_query("deploy AND \"x").unwrap(),
            "\"deploy\" \"AND\" \"x\""
        );
        assert_eq!(fts_query("  ^*()  "), None);
    }

    #[test]
    fn repeated_reads_see_every_acknowledged_send() {
        use crate::{LocalHub, history::Location};
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap();
        let history = History::open(&Location::Memory, Default::default()).unwrap();
        let tools = ChatTools::new(
            Arc::new(LocalHub::new(history.clone())),
            history.clone(),
            ChatLimits::default(),
        );
        let caller = Caller::new("test");
        let args = |v: Value| v.as_object().cloned().unwrap();
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
    fn tool_list_is_compact() {
        let json = serde_json::to_string(&tool_definitions()).unwrap();
        assert!(
            json.len() < 12 * 1024,
            "tools/list body is {} bytes",
            json.len()
        );
    }
}
