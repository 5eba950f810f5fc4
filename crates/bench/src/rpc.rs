//! JSON-RPC as the benchmark speaks it: requests written as text, replies
//! read with one pass of the parser.
//!
//! The client must cost far less than the server it measures, so a reply is
//! parsed once, into only what every caller needs (its id and whether it
//! reports an error; serde skips everything else without building values);
//! the text is kept for the few checks that need more.

use anyhow::{Context, bail};
use serde::{Deserialize, de::IgnoredAny};
use serde_json::{Value, json};

/// The MCP revision the benchmark's clients announce.
pub const PROTOCOL_VERSION: &str = "2025-06-18";

/// A request line (no trailing newline).
pub fn request(id: u64, method: &str, params: &Value) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{params}}}"#)
}

/// The `notifications/initialized` line every client sends after `initialize`.
pub const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;

/// The parameters of `initialize`.
pub fn initialize_params() -> Value {
    json!({
        "protocolVersion": PROTOCOL_VERSION,
        "capabilities": {},
        "clientInfo": {"name": "switchboard-bench", "version": env!("CARGO_PKG_VERSION")}
    })
}

/// The parameters of a `tools/call`.
pub fn tool_params(name: &str, arguments: Value) -> Value {
    json!({"name": name, "arguments": arguments})
}

/// A reply, parsed just enough to route it and to tell success from failure.
#[derive(Debug)]
pub struct Reply {
    pub id: Option<u64>,
    /// A notification from the server (a `method`, no `id`), such as the
    /// shim's `notifications/tools/list_changed`, rather than a reply.
    pub notification: bool,
    /// Why the request failed: a JSON-RPC error or a tool result with
    /// `isError: true`.
    pub failure: Option<String>,
    pub text: String,
}

#[derive(Deserialize)]
struct Envelope {
    id: Option<u64>,
    method: Option<IgnoredAny>,
    result: Option<ResultHead>,
    error: Option<Value>,
}

#[derive(Deserialize)]
struct ResultHead {
    #[serde(rename = "isError", default)]
    is_error: bool,
}

impl Reply {
    pub fn parse(text: String) -> anyhow::Result<Self> {
        let envelope: Envelope = serde_json::from_str(&text)
            .with_context(|| format!("the server sent a line that is not JSON-RPC: {text:.200}"))?;
        let failure = match (envelope.error, envelope.result) {
            (Some(error), _) => Some(format!("JSON-RPC error {error}")),
            (None, Some(head)) if head.is_error => Some(format!("tool error: {text:.300}")),
            (None, Some(_)) => None,
            (None, None) => Some(format!(
                "a reply with neither result nor error: {text:.200}"
            )),
        };
        Ok(Self {
            id: envelope.id,
            notification: envelope.id.is_none() && envelope.method.is_some(),
            failure,
            text,
        })
    }

    /// The reply, or an error if it reports one.
    pub fn ok(self) -> anyhow::Result<Self> {
        match self.failure {
            Some(failure) => bail!("{failure}"),
            None => Ok(self),
        }
    }

    /// The whole reply as a JSON value (a second, full parse; not for timed loops).
    pub fn json(&self) -> anyhow::Result<Value> {
        Ok(serde_json::from_str(&self.text)?)
    }
}

/// One client's connection to the server, with one request in flight.
pub trait Session {
    /// Sends a request and waits for its reply.
    async fn request(&mut self, method: &str, params: &Value) -> anyhow::Result<Reply>;

    /// Calls a tool; a tool error is an error.
    async fn call_tool(&mut self, name: &str, arguments: Value) -> anyhow::Result<Reply> {
        self.request("tools/call", &tool_params(name, arguments))
            .await?
            .ok()
            .with_context(|| format!("tools/call {name}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_classified_by_error_and_is_error() {
        let ok = Reply::parse(
            r#"{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"hi"}]}}"#.into(),
        )
        .unwrap();
        assert_eq!((ok.id, ok.failure.is_none()), (Some(7), true));
        let tool_error = Reply::parse(
            r#"{"jsonrpc":"2.0","id":8,"result":{"content":[],"isError":true}}"#.into(),
        )
        .unwrap();
        assert!(tool_error.ok().is_err());
        let rpc_error = Reply::parse(
            r#"{"jsonrpc":"2.0","id":9,"error":{"code":-32602,"message":"no"}}"#.into(),
        )
        .unwrap();
        assert_eq!(rpc_error.id, Some(9));
        assert!(rpc_error.failure.unwrap().contains("-32602"));
        assert!(Reply::parse("not json".into()).is_err());
        let notification =
            Reply::parse(r#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#.into())
                .unwrap();
        assert!(notification.notification && !ok.notification);
    }

    #[test]
    fn requests_are_single_json_lines() {
        let line = request(
            3,
            "tools/call",
            &tool_params("read_messages", json!({"limit": 50})),
        );
        let value: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(value["id"], 3);
        assert_eq!(value["params"]["arguments"]["limit"], 50);
        assert!(!line.contains('\n'));
    }
}
