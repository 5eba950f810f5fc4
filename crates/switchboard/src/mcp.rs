//! The MCP server every transport runs: tools, resources and prompts over a
//! [`Registry`], plus the bookkeeping that makes shutdown graceful.
//!
//! Transports create one [`McpServer`] per client connection (or per request,
//! for stateless HTTP) with [`McpServer::for_caller`]; all of them share the
//! registry and one [`Drain`].

use std::sync::Arc;

use rmcp::{
    ErrorData, RoleServer, ServerHandler,
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, GetPromptRequestParams,
        GetPromptResponse, Implementation, JsonObject, ListPromptsResult,
        ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
        PromptsCapability, ReadResourceRequestParams, ReadResourceResponse, ResourcesCapability,
        ServerCapabilities, ServerConfig, Tool,
    },
    service::RequestContext,
};
use switchboard_toolset::{Caller, Registry};
use tokio_util::{sync::CancellationToken, task::TaskTracker};

/// The guidance given at `initialize` when the config has none and chat is on.
pub const CHAT_INSTRUCTIONS: &str = "Chat with other agents and humans in channels: send_message to post, \
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
    instructions: Option<Arc<str>>,
}

impl McpServer {
    pub fn new(registry: Registry, drain: Drain, instructions: Option<String>) -> Self {
        Self {
            registry,
            drain,
            caller: Arc::new(Caller::default()),
            instructions: instructions.map(Into::into),
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
        let mut capabilities = ServerCapabilities::builder().enable_tools().build();
        if self.registry.has_resources() {
            capabilities.resources = Some(ResourcesCapability::default());
        }
        if self.registry.has_prompts() {
            capabilities.prompts = Some(PromptsCapability::default());
        }
        let info = ServerConfig::new(capabilities).with_server_info(Implementation::new(
            "switchboard",
            env!("CARGO_PKG_VERSION"),
        ));
        match &self.instructions {
            Some(text) => info.with_instructions(text.to_string()),
            None => info,
        }
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

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let resources = self
            .registry
            .resources()
            .await
            .map_err(|e| ErrorData::internal_error(e, None))?;
        Ok(ListResourcesResult::with_all_items(resources))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(ListResourceTemplatesResult::with_all_items(
            self.registry.resource_templates(),
        ))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        match self.registry.read_resource(&request.uri).await {
            Some(Ok(result)) => Ok(result.into()),
            Some(Err(e)) => Err(ErrorData::internal_error(e, None)),
            None => Err(ErrorData::resource_not_found(
                format!(
                    "no resource {:?}; resources/list and resources/templates/list show what this server offers",
                    request.uri
                ),
                None,
            )),
        }
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        Ok(ListPromptsResult::with_all_items(self.registry.prompts()))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let arguments = request.arguments.unwrap_or_default();
        match self.registry.prompt(&request.name, &arguments) {
            Some(Ok(result)) => Ok(result.into()),
            Some(Err(e)) => Err(ErrorData::invalid_params(e, None)),
            None => Err(ErrorData::invalid_params(
                format!(
                    "no prompt {:?}; prompts/list shows the prompts this server offers",
                    request.name
                ),
                None,
            )),
        }
    }
}
