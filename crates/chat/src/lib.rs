//! Chat for agents: channels, members and a durable, searchable history,
//! carried by a pluggable backend.
//!
//! - `tools` — the chat toolset ([`ChatTools`]) agents call over MCP.
//! - `access` — what a caller's token allows ([`Access`]): nicks, channels, sends.
//! - `inbox` — an identity's unread messages and mentions.
//! - `push` — new inbox items pushed into sessions that can be woken.
//! - `approvals` — a client's permission prompts, answered in a channel.
//! - `backend` — the [`ChatBackend`] seam between the tools and a network.
//! - `local` — the in-process hub ([`LocalHub`]), the embedded default.
//! - [`irc`] — the IRC backend.
//! - [`history`] — the SQLite message store every backend records into.
//! - `names`, `text` — IRC-compatible rules for names and message text.
//! - `fuzzing` — the body of the `irc_lines` fuzz target (feature `fuzzing`).

mod access;
mod approvals;
mod backend;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
pub mod history;
mod inbox;
pub mod irc;
mod local;
mod names;
mod push;
mod text;
mod tools;

pub use access::Access;
pub use approvals::ApprovalSettings;
pub use backend::{ChatBackend, ChatError, Delivery, Member};
pub use history::{
    Durability, History, HistoryError, Location, Message, NewMessage, Origin, SenderKind, Since,
};
pub use local::{LocalHub, SYSTEM_NICK};
pub use names::{CaseMapping, Channel, NameError, NameRules, Nick, nick_for_process};
pub use push::{PushMode, PushSettings};
pub use tools::{ChatSettings, ChatTools};
