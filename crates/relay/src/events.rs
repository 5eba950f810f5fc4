//! Events: what an application pushes to the agents behind its clients, and
//! what a client passes on from its host, outside any request.
//!
//! Both sides list the events they take part in (the client in its `hello`,
//! the application in [`Options::events`](crate::Options::events)); only
//! those both list are ever sent, so a client or application that predates
//! events never receives one. `switchboard shim` delivers an application's
//! [`CHANNEL`] event to its agent as `notifications/claude/channel` (Claude
//! Code shows it as a `<channel>` event), a [`PERMISSION`] event as
//! `notifications/claude/channel/permission`, and passes its host's
//! `notifications/claude/channel/permission_request` on as a
//! [`PERMISSION_REQUEST`] event.

use serde_json::{Map, Value};

pub use crate::protocol::MAX_EVENT;

/// A message for the agent: `content`, with `meta` attributes.
pub const CHANNEL: &str = "claude/channel";
/// The answer to a permission request: `request_id` and `behavior`
/// (`allow` or `deny`).
pub const PERMISSION: &str = "claude/channel/permission";
/// The agent's host asks for permission to run a tool (`request_id`,
/// `tool_name`, `description`, `input_preview`).
pub const PERMISSION_REQUEST: &str = "claude/channel/permission_request";

/// One event: a name both sides agreed on, and an object of params.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub name: String,
    pub params: Map<String, Value>,
}

impl Event {
    /// An event named `name` with `params`.
    ///
    /// ```
    /// use serde_json::json;
    /// use switchboard_relay::{Event, events};
    ///
    /// let params = json!({"request_id": "r1", "behavior": "allow"});
    /// let answer = Event::new(events::PERMISSION, params.as_object().unwrap().clone());
    /// assert_eq!(answer.name, "claude/channel/permission");
    /// assert_eq!(answer.params["behavior"], "allow");
    /// ```
    pub fn new(name: impl Into<String>, params: Map<String, Value>) -> Self {
        Self {
            name: name.into(),
            params,
        }
    }

    /// A [`CHANNEL`] event: `content` for the agent to read, and `meta`
    /// attributes about it. Claude Code drops attributes whose key is not
    /// made of ASCII letters, digits and `_` (not starting with a digit);
    /// so does this constructor, and the key `source`, which the host sets.
    ///
    /// ```
    /// use switchboard_relay::Event;
    ///
    /// let event = Event::channel("build failed", [("run_id", "1234"), ("bad-key", "x")]);
    /// assert_eq!(event.params["content"], "build failed");
    /// assert_eq!(event.params["meta"], serde_json::json!({"run_id": "1234"}));
    /// ```
    pub fn channel<K: Into<String>, V: Into<String>>(
        content: impl Into<String>,
        meta: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        let meta: Map<String, Value> = meta
            .into_iter()
            .map(|(k, v)| (k.into(), Value::String(v.into())))
            .filter(|(k, _)| meta_key(k))
            .collect();
        let mut params = Map::new();
        params.insert("content".into(), Value::String(content.into()));
        params.insert("meta".into(), Value::Object(meta));
        Self::new(CHANNEL, params)
    }
}

/// Whether `key` is an attribute name a host shows.
fn meta_key(key: &str) -> bool {
    let mut chars = key.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && key != "source"
}

/// Why an event was not pushed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PushError {
    #[error("no client is connected as connection {0}")]
    NoConnection(u64),
    #[error("the client did not ask for {0} events")]
    NotAgreed(String),
    #[error("the event is {0} bytes long; events are at most {MAX_EVENT} bytes")]
    TooLarge(usize),
    #[error("the client is not reading fast enough; the event was dropped")]
    Full,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meta_keys_are_identifiers() {
        for good in ["a", "_x", "chat_id", "A9"] {
            assert!(meta_key(good), "{good}");
        }
        for bad in ["", "9a", "bad-key", "a b", "é", "source"] {
            assert!(!meta_key(bad), "{bad}");
        }
    }
}
