//! The seam between what a tool does and how an agent reaches it.
//!
//! A [`Toolset`] is a group of MCP tools (chat, docs, commands, ...) that knows
//! nothing about transports. A transport (stdio, Streamable HTTP, legacy SSE,
//! the relay socket) holds a [`Registry`] and knows nothing about toolsets: it
//! asks the registry for the tool list and hands it every `tools/call`.
//!
//! A [`Grant`] on the [`Caller`] says what the token behind a call allows;
//! the registry keeps a caller to the toolsets it is granted, and each
//! toolset to the rest (chat: nicks, channels, sends a minute).
//!
//! Tools report failures the agent can act on as [`ToolError`]s, which reach
//! the model as `isError` results carrying the message; only an unknown tool
//! name is a protocol-level error, and that decision belongs to the transport.

mod args;
mod caller;
mod config_error;
mod extras;
mod grant;
mod registry;
mod schema;
mod session;
mod structured;
mod tokens;
mod tool;

use std::{future::Future, pin::Pin, sync::Arc};

pub use args::{bounded, parse_args};
pub use caller::{Caller, Process, Progress};
pub use config_error::ConfigError;
pub use extras::{
    GetPromptResult, Prompt, PromptSource, ReadResourceResult, Resource, ResourceSource,
    ResourceTemplate,
};
pub use grant::{Grant, Rules, glob_match};
pub use registry::{Registry, RegistryError};
pub use rmcp::model::{CallToolResult, JsonObject, ToolAnnotations};
pub use schema::object_schema;
pub use session::{Notification, Session};
pub use structured::{Structured, call_result_json};
pub use tokens::{GUESS_BURST, GUESS_REFILL, Refused, Reloaded, TokenSpec, Tokens};
pub use tool::{ToolId, ToolSpec, ToolTable};

/// The future a tool call returns. Boxed so toolsets can live behind `dyn`.
pub type ToolFuture<'a> = Pin<Box<dyn Future<Output = Result<ToolOutput, ToolError>> + Send + 'a>>;

/// A group of tools served together, independent of any transport.
pub trait Toolset: Send + Sync + 'static {
    /// A short name for logs and errors (`chat`, `docs`, ...).
    fn name(&self) -> &str;

    /// The tools this toolset offers, in the order `tools/list` shows them
    /// (usually [`ToolTable::specs`]). Read once when the registry is built.
    fn tools(&self) -> &[ToolSpec];

    /// Runs `tool` (a position in [`Toolset::tools`], usually looked up
    /// with [`ToolTable::get`]) with `arguments`.
    fn call<'a>(
        &'a self,
        tool: ToolId,
        arguments: JsonObject,
        caller: &'a Caller,
    ) -> ToolFuture<'a>;

    /// The id of the tool called `name`, for a caller of this toolset alone
    /// (a test, a bench); the [`Registry`] indexes every toolset's names.
    fn tool_id(&self, name: &str) -> Option<ToolId> {
        self.tools()
            .iter()
            .position(|t| t.name == name)
            .map(ToolId::new)
    }

    /// Guidance for the agent in the `initialize` result (how to use these
    /// tools; who the agent is in `session`, when known).
    fn instructions(&self, _session: Option<&Session>) -> Option<String> {
        None
    }

    /// Experimental MCP capabilities (such as `claude/channel`) the toolset
    /// uses with a client that can be notified.
    fn experimental(&self) -> Vec<&'static str> {
        Vec::new()
    }

    /// A client's session began. The toolset may follow it (and notify the
    /// client) until it closes; it must not keep it alive after that.
    fn open_session(&self, _session: &Arc<Session>) {}

    /// The client sent a notification that MCP itself does not define.
    fn on_notification(&self, _session: &Arc<Session>, _notification: &Notification) {}

    /// Releases outside resources (network connections) at shutdown, after
    /// the last call. The default has nothing to release.
    fn close(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(async {})
    }
}

/// A successful tool result: text for the model, JSON for programs.
///
/// The text must carry everything the agent needs on its own, because many
/// hosts show the model only the text; `structured` mirrors it and conforms to
/// the tool's `outputSchema`.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    pub text: String,
    pub structured: Structured,
}

impl ToolOutput {
    pub fn new(text: impl Into<String>, structured: impl Into<Structured>) -> Self {
        Self {
            text: text.into(),
            structured: structured.into(),
        }
    }
}

/// The `_meta` key of a failed result's facts for programs (see
/// [`ToolError::with_structured`]); the relay names it
/// `switchboard_relay::ERROR_META`.
pub const ERROR_META: &str = "dev.switchboard/error";

/// A failure the calling agent should read: bad arguments, a peer that is
/// down, a message that was not delivered. The message says what happened and
/// what to do about it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct ToolError {
    message: String,
    /// Facts a program acts on (such as `retry_after`), in the result's
    /// `_meta` under [`ERROR_META`].
    structured: Option<serde_json::Value>,
}

impl ToolError {
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            structured: None,
        }
    }

    /// Arguments the tool cannot act on as given (a malformed channel name,
    /// a missing field), as opposed to a failure to carry out a valid call.
    /// Programs tell the two apart by `invalid_argument` in the result's
    /// `_meta` (under [`ERROR_META`]), the argument's name (`arguments` for
    /// the whole object).
    ///
    /// ```
    /// let e = switchboard_toolset::ToolError::invalid_argument("channel", "no spaces in a channel name");
    /// assert_eq!(e.structured().unwrap()["invalid_argument"], "channel");
    /// ```
    pub fn invalid_argument(argument: &str, message: impl Into<String>) -> Self {
        Self::new(message).with_structured(serde_json::json!({ "invalid_argument": argument }))
    }

    /// The server is shutting down and cannot finish the call: clients call
    /// again once it is back (`{"server_stopping": true}` under [`ERROR_META`]).
    pub fn server_stopping() -> Self {
        Self::new("the server is stopping; call again once it is back")
            .with_structured(serde_json::json!({ "server_stopping": true }))
    }

    /// The same error carrying `structured` for programs. A failed result
    /// carries it in `_meta`, not as `structuredContent`: clients check
    /// `structuredContent` against the tool's `outputSchema`, which
    /// describes success, and some refuse the whole result when it does not
    /// fit.
    #[must_use]
    pub fn with_structured(mut self, structured: serde_json::Value) -> Self {
        self.structured = Some(structured);
        self
    }

    pub fn message(&self) -> &str {
        &self.message
    }

    /// The facts for programs, if any.
    pub fn structured(&self) -> Option<&serde_json::Value> {
        self.structured.as_ref()
    }
}

/// Converts a tool's outcome into the MCP result shape: a failure's facts
/// go in `_meta` under [`ERROR_META`].
///
/// ```
/// use serde_json::json;
/// use switchboard_toolset::{ToolError, into_call_result};
///
/// let result = into_call_result(Err(ToolError::invalid_argument("limit", "limit must be 1 to 50")));
/// let wire = serde_json::to_value(&result).unwrap();
/// assert_eq!(wire["isError"], true);
/// assert_eq!(wire["_meta"]["dev.switchboard/error"], json!({"invalid_argument": "limit"}));
/// assert!(wire.get("structuredContent").is_none());
/// ```
pub fn into_call_result(outcome: Result<ToolOutput, ToolError>) -> CallToolResult {
    use rmcp::model::{ContentBlock, MetaObject};
    match outcome {
        Ok(output) => {
            let mut result = CallToolResult::success(vec![ContentBlock::text(output.text)]);
            result.structured_content = Some(output.structured.into_value());
            result
        }
        Err(error) => {
            let mut result = CallToolResult::error(vec![ContentBlock::text(error.message)]);
            result.meta = error.structured.map(|facts| {
                let mut meta = MetaObject::new();
                meta.insert(ERROR_META.to_owned(), facts);
                meta
            });
            result
        }
    }
}
