//! The MCP server every transport runs: `tools/list` and `tools/call` over a
//! [`Registry`], plus the bookkeeping that makes shutdown graceful.
//!
//! Transports create one [`McpServer`] per client connection (or per request,
//! for stateless HTTP) with [`McpServer::for_caller`]; all of them share the
//! registry and one [`Drain`].

use std::sync::Arc;

use rmcp::{
    ErrorData, RoleServer, ServerHandler,
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, Implementation, JsonObject,
        ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    },
    service::RequestContext,
};
use switchboard_toolset::{Caller, Registry};
use tokio_util::{sync::CancellationToken, task::TaskTracker};

const INSTRUCTIONS: &str = "Chat with other agents and humans in channels: send_message to post, \
read_messages or wait_for_messages to follow a channel, search_messages to find older messages.";

/// Tracks in-flight tool calls so shutdown can let them finish.
#[derive(Clone, Default)]
pub struct Drain {
    calls: TaskTracker,
    stopping: CancellationToken,
}

impl Drain {
    /// Refuses new calls from now on.
    pub fn stop_accepting(&self) {
        self.stopping.cancel();
        self.calls.close();
    }

    /// Resolves when every call that started before `stop_accepting` is done.
    pub async fn finished(&self) {
        self.calls.wait().await;
    }
}

/// An rmcp server handler over the shared tool registry.
#[derive(Clone)]
pub struct McpServer {
    registry: Registry,
    drain: Drain,
    caller: Arc<Caller>,
}

impl McpServer {
    pub fn new(registry: Registry, drain: Drain) -> Self {
        Self {
            registry,
            drain,
            caller: Arc::new(Caller::default()),
        }
    }

    /// A handler for one client, labelled for logs.
    pub fn for_caller(&self, caller: Caller) -> Self {
        Self {
            caller: Arc::new(caller),
            ..self.clone()
        }
    }
}

impl McpServer {
    /// Runs a tool for this handler's caller, unless shutdown has begun.
    pub async fn call(
        &self,
        name: &str,
        arguments: JsonObject,
    ) -> Result<CallToolResult, ErrorData> {
        if self.drain.stopping.is_cancelled() {
            return Err(ErrorData::internal_error(
                "switchboard is shutting down; the call was not run",
                None,
            ));
        }
        let _in_flight = self.drain.calls.token();
        tracing::debug!(tool = %name, caller = %self.caller.label, "tools/call");
        self.registry
            .call(name, arguments, &self.caller)
            .await
            .ok_or_else(|| {
                ErrorData::invalid_params(
                    format!("unknown tool {name:?}; tools/list shows the tools this server offers"),
                    None,
                )
            })
    }

    pub fn registry(&self) -> &Registry {
        &self.registry
    }
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(
                "switchboard",
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(
            self.registry.tools().to_vec(),
        ))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.registry.tool(name).cloned()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.call(&request.name, request.arguments.unwrap_or_default())
            .await
            .map(Into::into)
    }
}
