//! The chat tools as `tools/list` shows them. Every byte here is paid for in
//! each agent turn, so descriptions are short and schemas written by hand.

use std::{sync::Arc, time::Duration};

use serde_json::{Value, json};
use switchboard_toolset::{ToolAnnotations, ToolSpec, ToolTable, object_schema};

pub(super) const READ_DEFAULT: usize = 50;
pub(super) const READ_MAX: usize = 500;
pub(super) const SEARCH_DEFAULT: usize = 20;
pub(super) const SEARCH_MAX: usize = 100;
pub(super) const WAIT_DEFAULT_S: f64 = 30.0;
pub(super) const WAIT_MAX_S: f64 = 50.0;
/// How long a relay client (the shim) should wait for `send_message`. The
/// backend answers every send within its own bound (on IRC, `send_timeout_s`
/// stretched by the flood pacing of the lines), which may pass the shim's
/// default wait; this only keeps the client waiting for that answer.
const SEND_WAIT: Duration = Duration::from_secs(15 * 60);

/// What each chat tool is, to dispatch a call from its declaration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ChatTool {
    SendMessage,
    ReadMessages,
    CreateChannel,
    ListChannels,
    GetMembers,
    WaitForMessages,
    SearchMessages,
    JoinChannel,
}

impl ChatTool {
    /// Whether the tool answers from what the history recorded (rather
    /// than acting on the network).
    pub(super) fn reads_history(self) -> bool {
        matches!(
            self,
            ChatTool::ReadMessages | ChatTool::WaitForMessages | ChatTool::SearchMessages
        )
    }
}

pub(super) fn tool_definitions() -> ToolTable<ChatTool> {
    let message = json!({
        "type": "object",
        "properties": {
            "id": {"type": "integer"},
            "channel": {"type": "string"},
            "time": {"type": "string"},
            "nick": {"type": "string"},
            "text": {"type": "string"},
            "kind": {"enum": ["agent", "human", "system", "unknown"]},
            "seq": {"type": "integer"},
            "mention": {"type": "boolean"}
        }
    });
    let message_list = json!({
        "type": "object",
        "properties": {
            "channel": {"type": "string"},
            "nick": {"type": "string"},
            "messages": {"type": "array", "items": message},
            "more": {"type": "boolean"},
            "timed_out": {"type": "boolean"}
        },
        "required": ["messages"]
    });
    let channel = json!({"type": "string", "description": "Channel, e.g. #general"});
    let inbox_channel = json!({"type": "string", "description": "Channel; omit for your inbox (unread + mentions)"});
    let since = json!({"type": ["integer", "string"], "description": "A message's seq (only messages recorded after it; follow a channel with this) or an ISO 8601 time"});
    let nick = json!({"type": "string", "description": "Your nick, if this session has none yet"});
    let read_only = ToolAnnotations::new()
        .read_only(true)
        .destructive(false)
        .idempotent(true)
        .open_world(false);
    let writes = |idempotent: bool| {
        ToolAnnotations::new()
            .read_only(false)
            .destructive(false)
            .idempotent(idempotent)
            .open_world(false)
    };
    let output = |v: Value| Arc::new(v.as_object().cloned().unwrap_or_default());
    ToolTable::new()
        .with(
            ChatTool::SendMessage,
            ToolSpec::new(
            "send_message",
            "Post a message to a channel (created if missing). Each line of text is sent as one message.",
            object_schema(
                json!({
                    "channel": channel,
                    "text": {"type": "string"},
                    "sender": {"type": "string", "description": "Your nick (defaults to this session's)"}
                }),
                &["channel", "text"],
            ),
        )
        .with_output_schema(output(json!({
            "type": "object",
            "properties": {
                "channel": {"type": "string"},
                "sender": {"type": "string"},
                "lines": {"type": "integer"},
                "confirmed": {"type": "boolean"},
                "ids": {"type": "array", "items": {"type": "integer"}},
                "time": {"type": "string"},
                "seq": {"type": "integer"}
            },
            "required": ["channel", "sender", "lines", "confirmed"]
        })))
        .with_annotations(writes(false))
        .with_timeout(SEND_WAIT))
        .with(
            ChatTool::ReadMessages,
            ToolSpec::new(
            "read_messages",
            "Read a channel's recent messages, newest first, as [HH:MM:SS] <nick> text (UTC); with since=seq, the next ones after it. Without channel: your inbox, oldest first. Marks them read.",
            object_schema(
                json!({
                    "channel": inbox_channel,
                    "since": since,
                    "limit": {"type": "integer", "minimum": 1, "maximum": READ_MAX, "default": READ_DEFAULT},
                    "nick": nick
                }),
                &[],
            ),
        )
        .with_output_schema(output(message_list.clone()))
        // Marking messages read is bookkeeping, not a change to the world.
        .with_annotations(read_only.clone()))
        .with(
            ChatTool::CreateChannel,
            ToolSpec::new(
            "create_channel",
            "Create a channel.",
            object_schema(json!({"name": channel}), &["name"]),
        )
        .with_output_schema(output(json!({
            "type": "object",
            "properties": {"channel": {"type": "string"}, "created": {"type": "boolean"}},
            "required": ["channel", "created"]
        })))
        .with_annotations(writes(true)))
        .with(
            ChatTool::ListChannels,
            ToolSpec::new(
            "list_channels",
            "List the channels, with members and your unread and mention counts.",
            object_schema(json!({"nick": nick}), &[]),
        )
        .with_output_schema(output(json!({
            "type": "object",
            "properties": {
                "channels": {"type": "array", "items": {"type": "string"}},
                "details": {"type": "array", "items": {"type": "object", "properties": {
                    "channel": {"type": "string"},
                    "members": {"type": "integer"},
                    "joined": {"type": "boolean"},
                    "unread": {"type": "integer"},
                    "mentions": {"type": "integer"}
                }}}
            },
            "required": ["channels"]
        })))
        .with_annotations(read_only.clone()))
        .with(
            ChatTool::GetMembers,
            ToolSpec::new(
            "get_members",
            "List the nicks in a channel.",
            object_schema(json!({"channel": channel}), &["channel"]),
        )
        .with_output_schema(output(json!({
            "type": "object",
            "properties": {
                "channel": {"type": "string"},
                "members": {"type": "array", "items": {"type": "string"}}
            },
            "required": ["channel", "members"]
        })))
        .with_annotations(read_only.clone()))
        // Blocks up to 50 s; transports that time calls out must wait longer.
        .with(
            ChatTool::WaitForMessages,
            ToolSpec::new(
            "wait_for_messages",
            "Block until a channel has messages after since (default: now), then return them like read_messages; without channel, until your inbox has any. Empty after timeout_s.",
            object_schema(
                json!({
                    "channel": inbox_channel,
                    "since": since,
                    "timeout_s": {"type": "number", "minimum": 0, "maximum": WAIT_MAX_S, "default": WAIT_DEFAULT_S},
                    "nick": nick
                }),
                &[],
            ),
        )
        .with_output_schema(output(message_list.clone()))
        .with_annotations(read_only.clone())
        .with_timeout(Duration::from_secs(WAIT_MAX_S as u64 + 10)))
        .with(
            ChatTool::SearchMessages,
            ToolSpec::new(
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
        .with_output_schema(output(json!({
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "messages": message_list["properties"]["messages"]
            },
            "required": ["messages"]
        })))
        .with_annotations(read_only))
        .with(
            ChatTool::JoinChannel,
            ToolSpec::new(
            "join_channel",
            "Join a channel: its new messages reach your inbox (and may be pushed to you). leave=true leaves it.",
            object_schema(
                json!({
                    "channel": channel,
                    "leave": {"type": "boolean", "default": false},
                    "nick": nick
                }),
                &["channel"],
            ),
        )
        .with_output_schema(output(json!({
            "type": "object",
            "properties": {
                "channel": {"type": "string"},
                "nick": {"type": "string"},
                "joined": {"type": "boolean"}
            },
            "required": ["channel", "nick", "joined"]
        })))
        .with_annotations(writes(true)))
}
