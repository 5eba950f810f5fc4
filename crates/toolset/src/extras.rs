//! Resources and prompts: what a toolset may offer besides tools. Like
//! tools, they know nothing of transports; the MCP handler lists and serves
//! them through the [`Registry`](crate::Registry).

use std::{future::Future, pin::Pin};

pub use rmcp::model::{GetPromptResult, Prompt, ReadResourceResult, Resource, ResourceTemplate};

use crate::JsonObject;

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A source of MCP resources (e.g. documentation pages).
pub trait ResourceSource: Send + Sync + 'static {
    /// The toolset it belongs to, whose grant opens it (`docs`, ...).
    fn name(&self) -> &str;

    /// Every resource it can list. Errors are written for the user.
    fn list(&self) -> BoxFuture<'_, Result<Vec<Resource>, String>>;

    /// URI templates for resources it can read but does not list.
    fn templates(&self) -> Vec<ResourceTemplate>;

    /// Reads `uri`; `None` when the URI is not this source's.
    fn read<'a>(
        &'a self,
        uri: &'a str,
    ) -> BoxFuture<'a, Option<Result<ReadResourceResult, String>>>;
}

/// A source of MCP prompts (prompt templates a profile ships).
pub trait PromptSource: Send + Sync + 'static {
    /// The toolset it belongs to, whose grant opens it (`prompts`, ...).
    fn name(&self) -> &str;

    fn prompts(&self) -> Vec<Prompt>;

    /// Renders prompt `name`; `None` when it is not this source's.
    fn get(&self, name: &str, arguments: &JsonObject) -> Option<Result<GetPromptResult, String>>;
}
