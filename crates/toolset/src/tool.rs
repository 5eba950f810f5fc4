//! A tool as a toolset declares it, once: a [`ToolSpec`] (name, schemas,
//! annotations, call timeout) in a [`ToolTable`] that also says what the
//! tool is to its toolset, so the toolset dispatches from its declaration
//! rather than by matching names again.
//!
//! The wire shapes are made at the edges: the MCP `Tool` in the MCP server,
//! the relay `Tool` (with `timeout_ms`) in the relay transport.

use std::{sync::Arc, time::Duration};

use rmcp::model::ToolAnnotations;

use crate::JsonObject;

/// One tool: what `tools/list` shows of it, and how long a call may take.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    /// Unique across every toolset a server offers.
    pub name: String,
    /// A human-readable title.
    pub title: Option<String>,
    /// What the tool does, for the model.
    pub description: String,
    /// The JSON Schema of the arguments (an object schema).
    pub input_schema: Arc<JsonObject>,
    /// The JSON Schema of the result's `structuredContent`.
    pub output_schema: Option<Arc<JsonObject>>,
    pub annotations: Option<ToolAnnotations>,
    /// How long a call may take, for transports that time calls out (the
    /// relay shim waits 15 s unless a tool says more).
    pub timeout: Option<Duration>,
}

impl ToolSpec {
    /// A tool named `name`, described by `description`, whose arguments
    /// match `input_schema`.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use switchboard_toolset::{ToolSpec, object_schema};
    /// let tool = ToolSpec::new("wait", "Waits.", object_schema(serde_json::json!({}), &[]))
    ///     .with_timeout(Duration::from_secs(60));
    /// assert_eq!(tool.timeout, Some(Duration::from_secs(60)));
    /// ```
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        input_schema: Arc<JsonObject>,
    ) -> Self {
        Self {
            name: name.into(),
            title: None,
            description: description.into(),
            input_schema,
            output_schema: None,
            annotations: None,
            timeout: None,
        }
    }

    #[must_use]
    pub fn with_title(mut self, title: impl Into<String>) -> Self {
        self.title = Some(title.into());
        self
    }

    #[must_use]
    pub fn with_output_schema(mut self, schema: Arc<JsonObject>) -> Self {
        self.output_schema = Some(schema);
        self
    }

    #[must_use]
    pub fn with_annotations(mut self, annotations: ToolAnnotations) -> Self {
        self.annotations = Some(annotations);
        self
    }

    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }
}

/// Which of its toolset's tools a call is for: the tool's position in the
/// toolset's [`Toolset::tools`](crate::Toolset::tools), found by the
/// [`Registry`](crate::Registry) from the name the client sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolId(usize);

impl ToolId {
    pub(crate) fn new(position: usize) -> Self {
        Self(position)
    }

    pub(crate) fn position(self) -> usize {
        self.0
    }
}

/// A toolset's tools in order, each with what it is to the toolset (`K`: an
/// enum of its tools, or an index into what its config declared).
///
/// ```
/// # use switchboard_toolset::{ToolSpec, ToolTable, object_schema};
/// #[derive(Clone, Copy, Debug, PartialEq)]
/// enum Clock { Now, Sleep }
/// let table = ToolTable::new()
///     .with(Clock::Now, ToolSpec::new("now", "The time.", object_schema(serde_json::json!({}), &[])))
///     .with(Clock::Sleep, ToolSpec::new("sleep", "Sleeps.", object_schema(serde_json::json!({}), &[])));
/// assert_eq!(table.specs()[1].name, "sleep");
/// ```
#[derive(Debug, Clone)]
pub struct ToolTable<K> {
    specs: Vec<ToolSpec>,
    kinds: Vec<K>,
}

impl<K> Default for ToolTable<K> {
    fn default() -> Self {
        Self {
            specs: Vec::new(),
            kinds: Vec::new(),
        }
    }
}

impl<K: Copy> ToolTable<K> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `spec`, which is `kind` to the toolset.
    pub fn push(&mut self, kind: K, spec: ToolSpec) {
        self.specs.push(spec);
        self.kinds.push(kind);
    }

    /// The table with `spec` added (see [`ToolTable::push`]).
    #[must_use]
    pub fn with(mut self, kind: K, spec: ToolSpec) -> Self {
        self.push(kind, spec);
        self
    }

    /// Every tool, in the order `tools/list` shows them.
    pub fn specs(&self) -> &[ToolSpec] {
        &self.specs
    }

    /// Each tool's kind with its declaration, in [`ToolTable::specs`] order.
    pub fn entries(&self) -> impl Iterator<Item = (&K, &ToolSpec)> {
        self.kinds.iter().zip(&self.specs)
    }

    /// What `tool` is to the toolset, and its declaration.
    ///
    /// `tool` comes from the registry, which found it in this table's
    /// [`ToolTable::specs`].
    pub fn get(&self, tool: ToolId) -> (K, &ToolSpec) {
        (self.kinds[tool.0], &self.specs[tool.0])
    }
}
