//! The application's side of the tools: their definitions ([`Tool`]), the
//! handler that runs them ([`ToolHandler`]), what a call carries ([`Call`],
//! [`PeerInfo`]) and what it returns ([`ToolResult`]).
//!
//! The shapes are MCP's: a [`Tool`] serialises as an MCP `Tool` object (plus
//! the relay-only `timeout_ms`) and a [`ToolResult`] as an MCP
//! `CallToolResult`, so a program that already has MCP tool definitions (for
//! example from an MCP SDK) can convert them with `serde_json` alone:
//!
//! ```
//! use switchboard_relay::Tool;
//!
//! let mcp_tool = serde_json::json!({
//!     "name": "notify_user",
//!     "description": "Show a notification to the user.",
//!     "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
//!     "icons": [{"src": "https://example.com/bell.png"}]
//! });
//! let tool: Tool = serde_json::from_value(mcp_tool.clone()).unwrap();
//! assert_eq!(tool.name, "notify_user");
//! // Fields this crate does not model are kept and sent as they were.
//! assert_eq!(serde_json::to_value(&tool).unwrap(), mcp_tool);
//! ```

use std::{collections::HashMap, future::Future, pin::Pin, sync::Arc};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use switchboard_schema::ArgumentSchema;

use crate::{events::Event, proctree::ProcessInfo, shapes};

/// One tool, as the application offers it: an MCP `Tool` plus the relay-only
/// `timeout_ms`.
///
/// Build one with [`Tool::new`] and the `with_*` methods, with a struct
/// literal (`..Default::default()` fills the rest), or deserialise an MCP
/// `Tool` object.
///
/// ```
/// use serde_json::json;
/// use switchboard_relay::Tool;
///
/// let built = Tool::new("count_windows", "Count the open windows.", json!({"type": "object"}))
///     .with_annotations(json!({"readOnlyHint": true}))
///     .with_output_schema(json!({"type": "object", "properties": {"windows": {"type": "integer"}}}));
/// let literal = Tool {
///     name: "count_windows".into(),
///     description: Some("Count the open windows.".into()),
///     annotations: Some(json!({"readOnlyHint": true})),
///     output_schema: Some(json!({"type": "object", "properties": {"windows": {"type": "integer"}}})),
///     ..Default::default()
/// };
/// assert_eq!(built, literal);
/// assert_eq!(serde_json::to_value(&built).unwrap()["annotations"]["readOnlyHint"], true);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tool {
    /// The tool's name, unique among the application's tools.
    pub name: String,
    /// A human-readable title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// What the tool does, for the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The JSON Schema of the arguments: a JSON object (MCP requires
    /// `"type": "object"`). Every call's arguments are validated against it
    /// before the handler runs.
    #[serde(rename = "inputSchema")]
    pub input_schema: Value,
    /// The JSON Schema of the result's `structuredContent`, if the tool
    /// returns one.
    #[serde(
        rename = "outputSchema",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub output_schema: Option<Value>,
    /// MCP tool annotations (`readOnlyHint`, `destructiveHint`, …), as is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Value>,
    /// How long a client should wait for a call to this tool, when longer
    /// (or shorter) than its default (15 s for `switchboard shim`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Any other MCP `Tool` field (`icons`, `_meta`, …), sent as is.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Default for Tool {
    /// A tool with an empty name and a schema accepting any object.
    fn default() -> Self {
        Self {
            name: String::new(),
            title: None,
            description: None,
            input_schema: json!({"type": "object"}),
            output_schema: None,
            annotations: None,
            timeout_ms: None,
            extra: Map::new(),
        }
    }
}

impl Tool {
    /// A tool named `name`, described by `description`, whose arguments
    /// must match `input_schema`.
    ///
    /// ```
    /// use serde_json::json;
    /// use switchboard_relay::Tool;
    ///
    /// let tool = Tool::new(
    ///     "set_session_title",
    ///     "Set the terminal tab's title.",
    ///     json!({"type": "object", "properties": {"title": {"type": "string"}}, "required": ["title"]}),
    /// )
    /// .with_title("Set title")
    /// .with_timeout_ms(30_000);
    /// let wire = serde_json::to_value(&tool).unwrap();
    /// assert_eq!(wire["inputSchema"]["required"], json!(["title"]));
    /// assert_eq!(wire["timeout_ms"], 30_000);
    /// ```
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        input_schema: Value,
    ) -> Self {
        Self {
            name: name.into(),
            description: Some(description.into()),
            input_schema,
            ..Self::default()
        }
    }

    /// Sets the human-readable title.
    #[must_use]
    pub fn with_title(mut self, title: impl Into<String>) -> Self {
        self.title = Some(title.into());
        self
    }

    /// Sets the schema of the result's `structuredContent`.
    #[must_use]
    pub fn with_output_schema(mut self, schema: Value) -> Self {
        self.output_schema = Some(schema);
        self
    }

    /// Sets the MCP annotations (for example `{"readOnlyHint": true}`).
    #[must_use]
    pub fn with_annotations(mut self, annotations: Value) -> Self {
        self.annotations = Some(annotations);
        self
    }

    /// Sets how long a client should wait for a call to this tool.
    #[must_use]
    pub fn with_timeout_ms(mut self, timeout_ms: u64) -> Self {
        self.timeout_ms = Some(timeout_ms);
        self
    }
}

/// The `_meta` key under which a failed [`ToolResult`] carries facts for
/// programs ([`ToolResult::with_error_facts`]); the daemon's own tools use
/// the same key.
pub const ERROR_META: &str = "dev.switchboard/error";

/// The result of a tool call, serialised as an MCP `CallToolResult`:
/// `{"content":[{"type":"text","text":…}],"structuredContent":…,"isError":…}`.
///
/// ```
/// use serde_json::json;
/// use switchboard_relay::ToolResult;
///
/// let ok = ToolResult::text("title set");
/// assert_eq!(
///     serde_json::to_value(&ok).unwrap(),
///     json!({"content": [{"type": "text", "text": "title set"}], "isError": false})
/// );
/// let failed = ToolResult::error("no terminal attached");
/// assert!(failed.is_error);
/// let both = ToolResult::structured("3 windows", json!({"windows": 3}));
/// assert_eq!(serde_json::to_value(&both).unwrap()["structuredContent"], json!({"windows": 3}));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResult {
    /// MCP content blocks; [`ToolResult::text`] makes one `text` block.
    #[serde(default)]
    pub content: Vec<Value>,
    /// Machine-readable result, matching the tool's `outputSchema`.
    #[serde(
        rename = "structuredContent",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub structured_content: Option<Value>,
    /// Whether the tool failed; the content then says why, for the agent.
    #[serde(rename = "isError", default)]
    pub is_error: bool,
    /// Any other MCP `CallToolResult` field (`_meta`, …), sent as is.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl ToolResult {
    /// A successful result carrying `text`.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            content: vec![text_block(text.into())],
            structured_content: None,
            is_error: false,
            extra: Map::new(),
        }
    }

    /// A failed result (`isError: true`) whose text tells the agent what
    /// went wrong and, ideally, what to do about it.
    pub fn error(text: impl Into<String>) -> Self {
        Self {
            is_error: true,
            ..Self::text(text)
        }
    }

    /// The same failed result with `facts` for programs (such as
    /// `{"invalid_argument": "title"}`), in `_meta` under [`ERROR_META`]:
    /// `structuredContent` is checked against the tool's `outputSchema`,
    /// which describes success, and some clients refuse a result whose
    /// `structuredContent` does not fit it, error or not.
    ///
    /// ```
    /// use serde_json::json;
    /// use switchboard_relay::ToolResult;
    ///
    /// let failed = ToolResult::error("title is too long").with_error_facts(json!({"invalid_argument": "title"}));
    /// let wire = serde_json::to_value(&failed).unwrap();
    /// assert_eq!(wire["_meta"]["dev.switchboard/error"]["invalid_argument"], "title");
    /// assert!(wire.get("structuredContent").is_none());
    /// ```
    #[must_use]
    pub fn with_error_facts(mut self, facts: Value) -> Self {
        let meta = self
            .extra
            .entry("_meta")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(meta) = meta {
            meta.insert(ERROR_META.to_owned(), facts);
        }
        self
    }

    /// A successful result with both `text` (for the model) and
    /// `structured` content (for programs).
    pub fn structured(text: impl Into<String>, structured: Value) -> Self {
        Self {
            structured_content: Some(structured),
            ..Self::text(text)
        }
    }
}

fn text_block(text: String) -> Value {
    json!({"type": "text", "text": text})
}

/// Who is on the other end of a connection, as the kernel tells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerInfo {
    /// The connection's number, unique while the server runs (for
    /// [`Handle::push_to`](crate::Handle::push_to)).
    pub connection: u64,
    /// The client's process id (checked against its `hello`).
    pub pid: u32,
    /// The client's user id (always the application's own: others are
    /// refused).
    pub uid: u32,
    /// The client's group id.
    pub gid: u32,
    /// The `client` text of the `hello` (for logs; not verified).
    pub client: String,
    /// The name the client says its user goes by (`hello`'s `identity`;
    /// not verified beyond the uid).
    pub identity: Option<String>,
    /// The events this connection and the application agreed on.
    pub events: Vec<String>,
    /// The client process and its ancestors, nearest first: `ancestry[0]`
    /// is the client itself (normally `switchboard shim`), `ancestry[1]` the
    /// process that spawned it (normally the agent CLI), and so on up to
    /// pid 1. Read from `/proc` when the connection said hello; it ends early
    /// where a process had already exited or could not be read, and is
    /// empty where `/proc` is not available.
    pub ancestry: Vec<ProcessInfo>,
}

/// One `tools/call`, after its arguments passed the tool's `inputSchema`.
#[derive(Debug, Clone)]
pub struct Call {
    /// The tool's name (one of [`ToolHandler::tools`]).
    pub name: String,
    /// The arguments, valid against the tool's `inputSchema`.
    pub arguments: Map<String, Value>,
    /// Who called, shared by every call of one connection.
    pub peer: Arc<PeerInfo>,
}

/// The application's tools: what they are and how to run them.
///
/// The server calls [`tools`](ToolHandler::tools) when it is bound and again
/// on every [`Handle::tools_changed`](crate::Handle::tools_changed); it
/// validates each call's arguments against the tool's `inputSchema` before it
/// calls [`call`](ToolHandler::call). Calls run concurrently, several per
/// connection, each on its own task.
///
/// ```
/// use serde_json::json;
/// use switchboard_relay::{Call, Tool, ToolHandler, ToolResult};
///
/// struct Greeter;
///
/// impl ToolHandler for Greeter {
///     fn tools(&self) -> Vec<Tool> {
///         vec![Tool::new(
///             "greet",
///             "Greet someone.",
///             json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}),
///         )]
///     }
///
///     async fn call(&self, call: Call) -> ToolResult {
///         match call.name.as_str() {
///             "greet" => ToolResult::text(format!("hello, {}", call.arguments["name"].as_str().unwrap())),
///             other => ToolResult::error(format!("no tool named {other}")),
///         }
///     }
/// }
/// ```
pub trait ToolHandler: Send + Sync + 'static {
    /// The tools, in the order `tools/list` shows them.
    fn tools(&self) -> Vec<Tool>;

    /// Runs one call. A failure the agent should read is a
    /// [`ToolResult::error`]; a panic becomes an `internal` error response.
    fn call(&self, call: Call) -> impl Future<Output = ToolResult> + Send;

    /// A client said hello; it is welcomed once this returns.
    fn connected(&self, _peer: &Arc<PeerInfo>) {}

    /// Guidance for the agent behind `peer`, sent in the `welcome` (the
    /// shim passes it on as its `initialize` instructions).
    fn instructions(&self, _peer: &PeerInfo) -> Option<String> {
        None
    }

    /// The client sent an event both sides agreed on. Its params are an
    /// object of at most [`MAX_EVENT`](crate::events::MAX_EVENT) bytes
    /// (others never reach here).
    fn event(&self, _peer: Arc<PeerInfo>, _event: Event) -> impl Future<Output = ()> + Send {
        async {}
    }

    /// The client's connection closed.
    fn disconnected(&self, _peer: &PeerInfo) {}
}

/// A shared handler serves like the handler itself, so an application can
/// keep a reference (to reach its own state) while the server runs it.
impl<H: ToolHandler> ToolHandler for Arc<H> {
    fn tools(&self) -> Vec<Tool> {
        (**self).tools()
    }
    fn call(&self, call: Call) -> impl Future<Output = ToolResult> + Send {
        (**self).call(call)
    }
    fn connected(&self, peer: &Arc<PeerInfo>) {
        (**self).connected(peer);
    }
    fn instructions(&self, peer: &PeerInfo) -> Option<String> {
        (**self).instructions(peer)
    }
    fn event(&self, peer: Arc<PeerInfo>, event: Event) -> impl Future<Output = ()> + Send {
        (**self).event(peer, event)
    }
    fn disconnected(&self, peer: &PeerInfo) {
        (**self).disconnected(peer);
    }
}

/// A boxed future, as the type-erased handler returns it.
pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// [`ToolHandler`] behind `dyn`.
pub(crate) trait DynHandler: Send + Sync + 'static {
    fn tools(&self) -> Vec<Tool>;
    fn call(&self, call: Call) -> BoxFuture<'_, ToolResult>;
    fn connected(&self, peer: &Arc<PeerInfo>);
    fn instructions(&self, peer: &PeerInfo) -> Option<String>;
    fn event(&self, peer: Arc<PeerInfo>, event: Event) -> BoxFuture<'_, ()>;
    fn disconnected(&self, peer: &PeerInfo);
}

impl<H: ToolHandler> DynHandler for H {
    fn tools(&self) -> Vec<Tool> {
        ToolHandler::tools(self)
    }
    fn call(&self, call: Call) -> BoxFuture<'_, ToolResult> {
        Box::pin(ToolHandler::call(self, call))
    }
    fn connected(&self, peer: &Arc<PeerInfo>) {
        ToolHandler::connected(self, peer);
    }
    fn instructions(&self, peer: &PeerInfo) -> Option<String> {
        ToolHandler::instructions(self, peer)
    }
    fn event(&self, peer: Arc<PeerInfo>, event: Event) -> BoxFuture<'_, ()> {
        Box::pin(ToolHandler::event(self, peer, event))
    }
    fn disconnected(&self, peer: &PeerInfo) {
        ToolHandler::disconnected(self, peer);
    }
}

impl Tool {
    /// The checks a tool list makes of each tool short of compiling its
    /// schema: a name MCP hosts accept, not `taken` by an earlier tool, an
    /// object as `inputSchema`, and every field in MCP's shape (the `shapes`
    /// module), so that no host refuses the list for it.
    pub(crate) fn check_shape(&self, taken: impl Fn(&str) -> bool) -> Result<(), ToolTableError> {
        if self.name.is_empty() {
            return Err(ToolTableError::EmptyName);
        }
        if !shapes::tool_name(&self.name) {
            return Err(ToolTableError::BadName(shown(&self.name)));
        }
        if taken(&self.name) {
            return Err(ToolTableError::Duplicate(self.name.clone()));
        }
        if !self.input_schema.is_object() {
            return Err(ToolTableError::SchemaNotObject(self.name.clone()));
        }
        let wire = serde_json::to_value(self).expect("a tool always serialises");
        shapes::tool(&wire).map_err(|problem| ToolTableError::NotMcp {
            tool: self.name.clone(),
            problem,
        })
    }
}

/// `name` cut to 64 characters, for messages.
pub(crate) fn shown(name: &str) -> String {
    match name.char_indices().nth(64) {
        Some((end, _)) => format!("{}…", &name[..end]),
        None => name.to_owned(),
    }
}

/// A tool list the server cannot serve.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolTableError {
    /// A tool has an empty name.
    #[error("a tool has an empty name")]
    EmptyName,
    /// A tool's name is one MCP hosts refuse (cut to 64 characters here).
    #[error(
        "the tool name {0:?} is not one MCP hosts accept: 1 to 128 characters, none of them whitespace or control characters"
    )]
    BadName(String),
    /// Two tools have the same name.
    #[error("two tools are named `{0}`")]
    Duplicate(String),
    /// A tool's `inputSchema` is not a JSON object.
    #[error("the inputSchema of `{0}` is not a JSON object")]
    SchemaNotObject(String),
    /// A field of the tool is not in the shape MCP gives it (named in
    /// `problem`, as `annotations.readOnlyHint`).
    #[error("the tool `{tool}` does not fit MCP's Tool: {problem}")]
    NotMcp { tool: String, problem: String },
    /// A tool's `inputSchema` is not a valid JSON Schema (or refers to an
    /// external document: those are never fetched).
    #[error("the inputSchema of `{tool}` is not a usable JSON Schema: {reason}")]
    InvalidSchema { tool: String, reason: String },
}

/// The tools with their compiled schemas, and the `tools/list` answer.
pub(crate) struct Table {
    entries: Vec<(Tool, ArgumentSchema)>,
    by_name: HashMap<String, usize>,
    list: Value,
}

impl Table {
    /// Checks and compiles `tools`.
    pub(crate) fn new(tools: Vec<Tool>) -> Result<Self, ToolTableError> {
        let mut entries = Vec::with_capacity(tools.len());
        let mut by_name = HashMap::with_capacity(tools.len());
        for tool in tools {
            tool.check_shape(|name| by_name.contains_key(name))?;
            let validator = ArgumentSchema::compile(&tool.input_schema).map_err(|reason| {
                ToolTableError::InvalidSchema {
                    tool: tool.name.clone(),
                    reason,
                }
            })?;
            by_name.insert(tool.name.clone(), entries.len());
            entries.push((tool, validator));
        }
        let list = json!({
            "tools": entries.iter().map(|(tool, _)| tool).collect::<Vec<_>>()
        });
        Ok(Self {
            entries,
            by_name,
            list,
        })
    }

    /// The `tools/list` result.
    pub(crate) fn list(&self) -> &Value {
        &self.list
    }

    /// Validates `arguments` for the tool `name`: `None` when the tool does
    /// not exist, `Some(Err(invalid))` listing every problem when they do
    /// not match its schema.
    pub(crate) fn validate(
        &self,
        name: &str,
        arguments: &Value,
    ) -> Option<Result<(), switchboard_schema::Invalid>> {
        let (_, schema) = &self.entries[*self.by_name.get(name)?];
        Some(schema.check(name, arguments))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> Table {
        Table::new(vec![Tool::new(
            "t",
            "test",
            json!({
                "type": "object",
                "properties": {
                    "title": {"type": "string", "maxLength": 5},
                    "n": {"type": "integer"}
                },
                "required": ["title"],
                "additionalProperties": false
            }),
        )])
        .unwrap()
    }

    #[test]
    fn valid_arguments_pass_and_unknown_tools_are_none() {
        let table = table();
        assert_eq!(table.validate("t", &json!({"title": "ok"})), Some(Ok(())));
        assert_eq!(table.validate("nope", &json!({})), None);
    }

    #[test]
    fn every_schema_error_is_listed_with_its_instance_path() {
        let text = table()
            .validate("t", &json!({"title": 17, "n": "x", "extra": true}))
            .unwrap()
            .unwrap_err()
            .report;
        assert!(text.starts_with("invalid arguments for t: "), "{text}");
        assert!(
            text.contains("17 is not of type \"string\" (at /title)"),
            "{text}"
        );
        assert!(text.contains("(at /n)"), "{text}");
        assert!(text.contains("(at /)"), "{text}");
        let missing = table().validate("t", &json!({})).unwrap().unwrap_err();
        assert_eq!(missing.argument, "title");
        let missing = missing.report;
        assert!(
            missing.contains("\"title\" is a required property (at /)"),
            "{missing}"
        );
    }

    #[test]
    fn long_error_messages_are_cut() {
        let huge = "é".repeat(100_000);
        let text = table()
            .validate("t", &json!({ "title": huge }))
            .unwrap()
            .unwrap_err()
            .report;
        assert!(text.len() < 1000, "{} bytes", text.len());
        assert!(text.contains("(at /title)"));
    }

    #[test]
    fn bad_tool_lists_are_refused() {
        let schema = json!({"type": "object"});
        assert_eq!(
            Table::new(vec![Tool::new("", "", schema.clone())]).err(),
            Some(ToolTableError::EmptyName)
        );
        assert_eq!(
            Table::new(vec![
                Tool::new("a", "", schema.clone()),
                Tool::new("a", "", schema.clone())
            ])
            .err(),
            Some(ToolTableError::Duplicate("a".into()))
        );
        assert_eq!(
            Table::new(vec![Tool::new("a", "", json!(true))]).err(),
            Some(ToolTableError::SchemaNotObject("a".into()))
        );
        assert!(matches!(
            Table::new(vec![Tool::new(
                "a",
                "",
                json!({"type": "object", "properties": {"n": {"type": "nonsense"}}})
            )]),
            Err(ToolTableError::InvalidSchema { .. })
        ));
        // External references are never fetched.
        assert!(matches!(
            Table::new(vec![Tool::new(
                "a",
                "",
                json!({"type": "object", "$ref": "https://example.com/schema.json"})
            )]),
            Err(ToolTableError::InvalidSchema { .. })
        ));
        // What MCP hosts would refuse is refused at once.
        assert_eq!(
            Table::new(vec![Tool::new("a b", "", schema.clone())]).err(),
            Some(ToolTableError::BadName("a b".into()))
        );
        assert_eq!(
            Table::new(vec![Tool::new("a", "", json!({"type": "string"}))])
                .err()
                .map(|e| e.to_string()),
            Some(
                "the tool `a` does not fit MCP's Tool: `inputSchema.type` must be \"object\""
                    .into()
            )
        );
        assert_eq!(
            Table::new(vec![
                Tool::new("a", "", schema.clone()).with_annotations(json!({"readOnlyHint": "yes"}))
            ])
            .err()
            .map(|e| e.to_string()),
            Some("the tool `a` does not fit MCP's Tool: `annotations.readOnlyHint` must be a boolean".into())
        );
    }

    #[test]
    fn the_list_is_the_mcp_tools_with_timeout() {
        let table = Table::new(vec![
            Tool::new("a", "first", json!({"type": "object"})).with_timeout_ms(500),
        ])
        .unwrap();
        assert_eq!(
            table.list(),
            &json!({"tools": [{"name": "a", "description": "first", "inputSchema": {"type": "object"}, "timeout_ms": 500}]})
        );
    }
}
