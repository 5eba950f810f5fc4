//! The MCP server every transport runs: tools, resources and prompts over a
//! [`Registry`], plus the bookkeeping that makes shutdown graceful.
//!
//! Transports create one [`McpServer`] per client connection (or per request,
//! for stateless HTTP) with [`McpServer::for_caller`]; all of them share the
//! registry and one [`Drain`].
//!
//! The [`Grant`] of the token a request carried (which the HTTP guard puts
//! in the request's extensions) is the caller's, for that request: it
//! narrows what is listed and what may be called.

use std::sync::Arc;

use rmcp::{
    ErrorData, RoleServer, ServerHandler,
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, CustomNotification,
        ExperimentalCapabilities, GetPromptRequestParams, GetPromptResponse, Implementation,
        JsonObject, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult,
        ListToolsResult, PaginatedRequestParams, ProgressNotificationParam, PromptsCapability,
        ReadResourceRequestParams, ReadResourceResponse, ResourcesCapability, ServerCapabilities,
        ServerConfig, Tool,
    },
    service::{NotificationContext, RequestContext},
};
use serde_json::Value;
use switchboard_toolset::{
    Caller, Grant, Notification, Progress, Registry, ToolError, ToolOutput, ToolSpec,
    into_call_result,
};
use tokio_util::{sync::CancellationToken, task::TaskTracker};

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
    /// The config's `instructions`, which replace the toolsets' own.
    instructions: Option<Arc<str>>,
}

impl McpServer {
    /// A server for `registry`; `instructions` (from the config) replace the
    /// guidance the toolsets give.
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

    /// This handler's caller holding `grant`.
    pub fn with_grant(&self, grant: Arc<Grant>) -> Self {
        self.for_caller((*self.caller).clone().with_grant(Some(grant)))
    }

    /// The grant a request carried, else this handler's caller's.
    fn grant(&self, context: &RequestContext<RoleServer>) -> Option<Arc<Grant>> {
        context
            .extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Arc<Grant>>())
            .or(self.caller.grant.as_ref())
            .cloned()
    }
}

impl McpServer {
    /// The `initialize` guidance for this handler's client.
    pub fn instructions(&self) -> Option<String> {
        match &self.instructions {
            Some(text) => Some(text.to_string()),
            None => self.registry.instructions(self.caller.session.as_deref()),
        }
    }

    /// Runs a tool for this handler's caller, unless shutdown has begun.
    pub async fn call(
        &self,
        name: &str,
        arguments: JsonObject,
    ) -> Result<CallToolResult, ErrorData> {
        self.call_as(&self.caller, name, arguments).await
    }

    /// Like [`McpServer::call`], with the tool's own outcome, for a
    /// transport that writes the result itself.
    pub async fn run(
        &self,
        name: &str,
        arguments: JsonObject,
    ) -> Result<Result<ToolOutput, ToolError>, ErrorData> {
        self.run_as(&self.caller, name, arguments).await
    }

    /// Runs a tool for `caller` (this handler's, with per-call details such
    /// as progress reporting), unless shutdown has begun.
    async fn call_as(
        &self,
        caller: &Caller,
        name: &str,
        arguments: JsonObject,
    ) -> Result<CallToolResult, ErrorData> {
        self.run_as(caller, name, arguments)
            .await
            .map(into_call_result)
    }

    async fn run_as(
        &self,
        caller: &Caller,
        name: &str,
        arguments: JsonObject,
    ) -> Result<Result<ToolOutput, ToolError>, ErrorData> {
        if self.drain.stopping.is_cancelled() {
            return Err(ErrorData::internal_error(
                "switchboard is shutting down; the call was not run",
                None,
            ));
        }
        let _in_flight = self.drain.calls.token();
        tracing::debug!(tool = %name, caller = %caller.label, "tools/call");
        self.registry
            .run(name, arguments, caller)
            .await
            .ok_or_else(|| {
                ErrorData::invalid_params(
                    format!("unknown tool {name:?}; tools/list shows the tools this server offers"),
                    None,
                )
            })
    }

    /// `call_tool` for `context`'s token and progress token.
    async fn call_tool_for(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let arguments = request.arguments.unwrap_or_default();
        let grant = self.grant(&context);
        let same_grant = match (&grant, &self.caller.grant) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        };
        // A token of a type MCP does not allow reads as none: no progress.
        let progress = context.meta.get_progress_token();
        if progress.is_none() && same_grant {
            return self.call(&request.name, arguments).await.map(Into::into);
        }
        let mut caller = (*self.caller).clone().with_grant(grant);
        let Some(token) = progress else {
            return self
                .call_as(&caller, &request.name, arguments)
                .await
                .map(Into::into);
        };
        let peer = context.peer.clone();
        caller.progress = Some(Progress::new(move |progress, message| {
            let mut param = ProgressNotificationParam::new(token.clone(), progress);
            if let Some(message) = message {
                param = param.with_message(message);
            }
            let peer = peer.clone();
            tokio::spawn(async move {
                if let Err(e) = peer.notify_progress(param).await {
                    tracing::debug!(error = %e, "a progress notification was not delivered");
                }
            });
        }));
        self.call_as(&caller, &request.name, arguments)
            .await
            .map(Into::into)
    }

    pub fn registry(&self) -> &Registry {
        &self.registry
    }
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        let mut capabilities = ServerCapabilities::builder().enable_tools().build();
        // What toolsets push needs a client that can be notified.
        if self.caller.session.as_ref().is_some_and(|s| s.can_notify()) {
            let experimental: ExperimentalCapabilities = self
                .registry
                .experimental()
                .into_iter()
                .map(|name| (name.to_owned(), JsonObject::new()))
                .collect();
            if !experimental.is_empty() {
                capabilities.experimental = Some(experimental);
            }
        }
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
        match self.instructions() {
            Some(text) => info.with_instructions(text),
            None => info,
        }
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let grant = self.grant(&context);
        Ok(ListToolsResult::with_all_items(
            self.registry
                .tools(grant.as_deref())
                .map(mcp_tool)
                .collect(),
        ))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.registry.tool(name).map(mcp_tool)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        // A call the client cancels (or whose session ends) is dropped, and
        // what it started stops with it (a command's process group).
        let cancelled = context.ct.clone();
        cancelled
            .run_until_cancelled(self.call_tool_for(request, context))
            .await
            .unwrap_or_else(|| Err(ErrorData::internal_error("the call was cancelled", None)))
    }

    async fn on_custom_notification(
        &self,
        notification: CustomNotification,
        _context: NotificationContext<RoleServer>,
    ) {
        let Some(session) = &self.caller.session else {
            return;
        };
        let params = match notification.params {
            Some(Value::Object(params)) => params,
            None | Some(Value::Null) => JsonObject::new(),
            Some(_) => {
                tracing::warn!(method = %notification.method, "ignored a notification whose params are not an object");
                return;
            }
        };
        self.registry
            .on_notification(session, &Notification::new(notification.method, params));
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let resources = self
            .registry
            .resources(self.grant(&context).as_deref())
            .await
            .map_err(|e| ErrorData::internal_error(e, None))?;
        Ok(ListResourcesResult::with_all_items(resources))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(ListResourceTemplatesResult::with_all_items(
            self.registry
                .resource_templates(self.grant(&context).as_deref()),
        ))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let grant = self.grant(&context);
        match self
            .registry
            .read_resource(&request.uri, grant.as_deref())
            .await
        {
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
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        Ok(ListPromptsResult::with_all_items(
            self.registry.prompts(self.grant(&context).as_deref()),
        ))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let arguments = request.arguments.unwrap_or_default();
        let grant = self.grant(&context);
        match self
            .registry
            .prompt(&request.name, &arguments, grant.as_deref())
        {
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

/// A declared tool in MCP's shape. Its call timeout is not shown: MCP
/// clients time their calls themselves.
fn mcp_tool(spec: &ToolSpec) -> Tool {
    let mut tool = Tool::new(
        spec.name.clone(),
        spec.description.clone(),
        spec.input_schema.clone(),
    );
    tool.title = spec.title.clone();
    tool.output_schema = spec.output_schema.clone();
    tool.annotations = spec.annotations.clone();
    tool
}
