//! The set of toolsets one server offers, indexed by tool name.
//!
//! Every listing and call takes the caller's [`Grant`], if any: a toolset
//! the grant does not open is not listed, and calling one of its tools is a
//! tool error naming the token and the fix.

use std::{collections::HashMap, sync::Arc};

use crate::{
    CallToolResult, Caller, GetPromptResult, Grant, JsonObject, Notification, Prompt, PromptSource,
    ReadResourceResult, Resource, ResourceSource, ResourceTemplate, Session, ToolError, ToolId,
    ToolOutput, ToolSpec, Toolset, into_call_result,
};

/// Two toolsets offered a tool under the same name.
#[derive(Debug, thiserror::Error)]
#[error(
    "tool `{tool}` is offered by both the {first} and the {second} toolset; rename one in the config"
)]
pub struct RegistryError {
    pub tool: String,
    pub first: String,
    pub second: String,
}

/// All tools a server offers, built once at start-up.
///
/// Cloning is cheap; every transport and session shares one registry.
#[derive(Clone)]
pub struct Registry {
    inner: Arc<Inner>,
}

struct Inner {
    /// Every tool: the toolset that owns it and its id there.
    tools: Vec<(usize, ToolId)>,
    by_name: HashMap<String, usize>,
    toolsets: Vec<Arc<dyn Toolset>>,
    resources: Vec<Arc<dyn ResourceSource>>,
    prompts: Vec<Arc<dyn PromptSource>>,
}

impl Registry {
    /// A registry of tools only.
    pub fn new(toolsets: Vec<Arc<dyn Toolset>>) -> Result<Self, RegistryError> {
        Self::with_sources(toolsets, Vec::new(), Vec::new())
    }

    /// A registry of tools, resources and prompts.
    pub fn with_sources(
        toolsets: Vec<Arc<dyn Toolset>>,
        resources: Vec<Arc<dyn ResourceSource>>,
        prompts: Vec<Arc<dyn PromptSource>>,
    ) -> Result<Self, RegistryError> {
        let mut tools: Vec<(usize, ToolId)> = Vec::new();
        let mut by_name: HashMap<String, usize> = HashMap::new();
        for (set_index, set) in toolsets.iter().enumerate() {
            for (position, tool) in set.tools().iter().enumerate() {
                if let Some(&existing) = by_name.get(&tool.name) {
                    return Err(RegistryError {
                        tool: tool.name.clone(),
                        first: toolsets[tools[existing].0].name().to_owned(),
                        second: set.name().to_owned(),
                    });
                }
                by_name.insert(tool.name.clone(), tools.len());
                tools.push((set_index, ToolId::new(position)));
            }
        }
        Ok(Self {
            inner: Arc::new(Inner {
                tools,
                by_name,
                toolsets,
                resources,
                prompts,
            }),
        })
    }

    pub fn has_resources(&self) -> bool {
        !self.inner.resources.is_empty()
    }

    pub fn has_prompts(&self) -> bool {
        !self.inner.prompts.is_empty()
    }

    /// Every source's resources `grant` opens; a source that fails is
    /// skipped unless every source fails.
    pub async fn resources(&self, grant: Option<&Grant>) -> Result<Vec<Resource>, String> {
        let mut all = Vec::new();
        let mut last_error = None;
        for source in self.resource_sources(grant) {
            match source.list().await {
                Ok(list) => all.extend(list),
                Err(e) => last_error = Some(e),
            }
        }
        match last_error {
            Some(e) if all.is_empty() => Err(e),
            _ => Ok(all),
        }
    }

    pub fn resource_templates(&self, grant: Option<&Grant>) -> Vec<ResourceTemplate> {
        self.resource_sources(grant)
            .flat_map(|s| s.templates())
            .collect()
    }

    /// Reads `uri` from the source that owns it, if `grant` opens it; `None`
    /// when none does.
    pub async fn read_resource(
        &self,
        uri: &str,
        grant: Option<&Grant>,
    ) -> Option<Result<ReadResourceResult, String>> {
        for source in self.resource_sources(grant) {
            if let Some(result) = source.read(uri).await {
                return Some(result);
            }
        }
        None
    }

    fn resource_sources(&self, grant: Option<&Grant>) -> impl Iterator<Item = &dyn ResourceSource> {
        self.inner
            .resources
            .iter()
            .filter(move |s| opens(grant, s.name()))
            .map(|s| &**s)
    }

    fn prompt_sources(&self, grant: Option<&Grant>) -> impl Iterator<Item = &dyn PromptSource> {
        self.inner
            .prompts
            .iter()
            .filter(move |s| opens(grant, s.name()))
            .map(|s| &**s)
    }

    pub fn prompts(&self, grant: Option<&Grant>) -> Vec<Prompt> {
        self.prompt_sources(grant)
            .flat_map(|s| s.prompts())
            .collect()
    }

    /// Renders prompt `name`, if `grant` opens its source; `None` when no
    /// such source has it.
    pub fn prompt(
        &self,
        name: &str,
        arguments: &JsonObject,
        grant: Option<&Grant>,
    ) -> Option<Result<GetPromptResult, String>> {
        self.prompt_sources(grant)
            .find_map(|s| s.get(name, arguments))
    }

    /// Every tool `grant` opens, in the order the toolsets declared them.
    pub fn tools(&self, grant: Option<&Grant>) -> impl Iterator<Item = &ToolSpec> {
        self.inner
            .tools
            .iter()
            .filter(move |(set, _)| opens(grant, self.inner.toolsets[*set].name()))
            .map(|&(set, id)| self.spec(set, id))
    }

    /// The definition of `name`, if some toolset offers it.
    pub fn tool(&self, name: &str) -> Option<&ToolSpec> {
        let &(set, id) = &self.inner.tools[*self.inner.by_name.get(name)?];
        Some(self.spec(set, id))
    }

    fn spec(&self, set: usize, id: ToolId) -> &ToolSpec {
        &self.inner.toolsets[set].tools()[id.position()]
    }

    /// Every toolset's guidance for `session`, one paragraph each; `None`
    /// when no toolset has any.
    pub fn instructions(&self, session: Option<&Session>) -> Option<String> {
        let parts: Vec<String> = self
            .inner
            .toolsets
            .iter()
            .filter_map(|set| set.instructions(session))
            .collect();
        (!parts.is_empty()).then(|| parts.join("\n\n"))
    }

    /// The experimental capabilities some toolset uses with clients that can
    /// be notified, without repeats.
    pub fn experimental(&self) -> Vec<&'static str> {
        let mut names: Vec<&'static str> = self
            .inner
            .toolsets
            .iter()
            .flat_map(|set| set.experimental())
            .collect();
        names.sort_unstable();
        names.dedup();
        names
    }

    /// Tells every toolset that `session` began (see [`Toolset::open_session`]).
    pub fn open_session(&self, session: &Arc<Session>) {
        for set in &self.inner.toolsets {
            set.open_session(session);
        }
    }

    /// Hands a client's own notification to every toolset.
    pub fn on_notification(&self, session: &Arc<Session>, notification: &Notification) {
        for set in &self.inner.toolsets {
            set.on_notification(session, notification);
        }
    }

    /// Closes every toolset (see [`Toolset::close`]).
    pub async fn close(&self) {
        for set in &self.inner.toolsets {
            set.close().await;
        }
    }

    /// Calls `name`; `None` when no toolset offers a tool of that name.
    pub async fn call(
        &self,
        name: &str,
        arguments: JsonObject,
        caller: &Caller,
    ) -> Option<CallToolResult> {
        Some(into_call_result(self.run(name, arguments, caller).await?))
    }

    /// Runs `name` and returns the tool's own outcome, for a transport that
    /// writes the result itself (see [`call_result_json`](crate::call_result_json));
    /// `None` when no toolset offers a tool of that name.
    pub async fn run(
        &self,
        name: &str,
        arguments: JsonObject,
        caller: &Caller,
    ) -> Option<Result<ToolOutput, ToolError>> {
        let &(set, id) = &self.inner.tools[*self.inner.by_name.get(name)?];
        let set = &self.inner.toolsets[set];
        if let Some(grant) = &caller.grant
            && !grant.may_use(set.name())
        {
            tracing::warn!(
                token = grant.name(),
                tool = name,
                toolset = set.name(),
                "refused a tool the token does not open"
            );
            return Some(Err(ToolError::new(format!(
                "the token {:?} may not use the {} tools ({name}); add \"{}\" to its tools in [[http.tokens]]",
                grant.name(),
                set.name(),
                set.name()
            ))));
        }
        Some(set.call(id, arguments, caller).await)
    }
}

/// Whether `grant` opens the toolset called `name` (no grant opens all).
fn opens(grant: Option<&Grant>, name: &str) -> bool {
    grant.is_none_or(|g| g.may_use(name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ToolFuture, ToolOutput, ToolTable, object_schema};

    struct Echo(&'static str, ToolTable<()>);

    fn echo(toolset: &'static str) -> Arc<dyn Toolset> {
        let spec = |name| ToolSpec::new(name, "echo", object_schema(serde_json::json!({}), &[]));
        let table = ToolTable::new()
            .with((), spec("echo"))
            .with((), spec(&format!("{toolset}_only")));
        Arc::new(Echo(toolset, table))
    }

    impl Toolset for Echo {
        fn name(&self) -> &str {
            self.0
        }
        fn tools(&self) -> &[ToolSpec] {
            self.1.specs()
        }
        fn call<'a>(&'a self, tool: ToolId, args: JsonObject, _: &'a Caller) -> ToolFuture<'a> {
            let ((), spec) = self.1.get(tool);
            let said = format!("{} {}", self.0, spec.name);
            Box::pin(async move { Ok(ToolOutput::new(said, serde_json::Value::Object(args))) })
        }
    }

    #[test]
    fn duplicate_tool_names_are_refused_naming_both_toolsets() {
        let err = Registry::new(vec![echo("a"), echo("b")])
            .err()
            .expect("duplicate must be refused");
        assert_eq!(err.tool, "echo");
        assert!(err.to_string().contains("a and the b toolset"));
    }

    #[tokio::test]
    async fn calls_reach_the_owning_toolset_and_unknown_names_are_none() {
        let registry = Registry::new(vec![echo("a")]).unwrap();
        let caller = Caller::new("test");
        for name in ["echo", "a_only"] {
            let result = registry.run(name, JsonObject::new(), &caller).await;
            assert_eq!(result.unwrap().unwrap().text, format!("a {name}"));
        }
        assert!(
            registry
                .call("nope", JsonObject::new(), &caller)
                .await
                .is_none()
        );
    }
}
