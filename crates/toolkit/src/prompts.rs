//! Prompts a profile ships (MCP `prompts/list` and `prompts/get`): named
//! prompt templates with declared arguments, rendered with minijinja into
//! one user message, e.g. the imqueue profile's "author a service".

use minijinja::{AutoEscape, Environment, UndefinedBehavior};
use serde::Deserialize;
use serde_json::{Value, json};
use switchboard_toolset::{GetPromptResult, JsonObject, Prompt, PromptSource};

use crate::config::ConfigError;

/// One `[[prompts]]` section.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PromptConfig {
    /// The prompt's name, e.g. `author_service`.
    pub name: String,
    /// A short human-facing name.
    pub title: Option<String>,
    /// What the prompt is for; clients show it in their prompt pickers.
    pub description: String,
    /// The arguments it takes, in order.
    #[serde(default)]
    pub arguments: Vec<PromptArgumentConfig>,
    /// The message text, a minijinja template over the arguments (absent
    /// optional arguments are `none`).
    pub template: String,
}

/// One argument of a prompt.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PromptArgumentConfig {
    pub name: String,
    pub description: String,
    #[serde(default)]
    pub required: bool,
}

/// The prompts of a profile.
pub struct PromptTools {
    env: Environment<'static>,
    configs: Vec<PromptConfig>,
}

impl PromptTools {
    /// Checks and compiles every prompt template.
    pub fn new(configs: &[PromptConfig]) -> Result<Self, ConfigError> {
        let mut env = Environment::new();
        env.set_auto_escape_callback(|_| AutoEscape::None);
        env.set_undefined_behavior(UndefinedBehavior::Chainable);
        crate::templates::print_none_as_nothing(&mut env);
        for (i, prompt) in configs.iter().enumerate() {
            let key = format!("prompts[{i}]");
            if prompt.name.is_empty()
                || !prompt
                    .name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            {
                return Err(ConfigError::new(
                    format!("{key}.name"),
                    format!(
                        "{:?} is not a prompt name; use letters, digits, _ and -",
                        prompt.name
                    ),
                ));
            }
            if configs[..i].iter().any(|p| p.name == prompt.name) {
                return Err(ConfigError::new(
                    format!("{key}.name"),
                    format!("{} is declared twice", prompt.name),
                ));
            }
            env.add_template_owned(prompt.name.clone(), prompt.template.clone())
                .map_err(|e| ConfigError::new(format!("{key}.template"), e.to_string()))?;
        }
        Ok(Self {
            env,
            configs: configs.to_vec(),
        })
    }
}

impl PromptSource for PromptTools {
    fn name(&self) -> &str {
        "prompts"
    }

    fn prompts(&self) -> Vec<Prompt> {
        self.configs
            .iter()
            .filter_map(|p| {
                serde_json::from_value(json!({
                    "name": p.name,
                    "title": p.title,
                    "description": p.description,
                    "arguments": p.arguments.iter().map(|a| json!({
                        "name": a.name, "description": a.description, "required": a.required
                    })).collect::<Vec<_>>(),
                }))
                .ok()
            })
            .collect()
    }

    fn get(&self, name: &str, arguments: &JsonObject) -> Option<Result<GetPromptResult, String>> {
        let prompt = self.configs.iter().find(|p| p.name == name)?;
        Some(self.render(prompt, arguments))
    }
}

impl PromptTools {
    fn render(
        &self,
        prompt: &PromptConfig,
        arguments: &JsonObject,
    ) -> Result<GetPromptResult, String> {
        if let Some(unknown) = arguments
            .keys()
            .find(|k| !prompt.arguments.iter().any(|a| &a.name == *k))
        {
            return Err(format!(
                "prompt {} has no argument {unknown:?}",
                prompt.name
            ));
        }
        let mut context = serde_json::Map::new();
        for argument in &prompt.arguments {
            match arguments.get(&argument.name) {
                Some(Value::String(s)) if !s.trim().is_empty() => {
                    context.insert(argument.name.clone(), Value::String(s.clone()));
                }
                Some(Value::String(_)) | None if argument.required => {
                    return Err(format!(
                        "prompt {} needs the argument {}",
                        prompt.name, argument.name
                    ));
                }
                Some(Value::String(_)) | None => {
                    context.insert(argument.name.clone(), Value::Null);
                }
                Some(_) => {
                    return Err(format!(
                        "argument {} of prompt {} must be a string",
                        argument.name, prompt.name
                    ));
                }
            }
        }
        let text = self
            .env
            .get_template(&prompt.name)
            .and_then(|t| t.render(minijinja::value::Serde(&context)))
            .map_err(|e| format!("prompt {} failed to render: {e}", prompt.name))?;
        serde_json::from_value(json!({
            "description": prompt.description,
            "messages": [{"role": "user", "content": {"type": "text", "text": text}}],
        }))
        .map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tools() -> PromptTools {
        let configs: Vec<PromptConfig> = toml::from_str::<toml::Table>(
            r#"
[[prompts]]
name = "author_service"
description = "Write a service"
template = "Write a service named {{ name }}{% if methods %} with {{ methods }}{% endif %}.{{ methods }}"
arguments = [
  { name = "name", description = "Service name", required = true },
  { name = "methods", description = "Methods" },
]
"#,
        )
        .unwrap()["prompts"]
            .clone()
            .try_into()
            .unwrap();
        PromptTools::new(&configs).unwrap()
    }

    fn args(v: Value) -> JsonObject {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn renders_with_and_without_optional_arguments() {
        let t = tools();
        assert_eq!(t.prompts()[0].name, "author_service");
        let text = |r: GetPromptResult| {
            serde_json::to_value(r).unwrap()["messages"][0]["content"]["text"].clone()
        };
        let full = t
            .get(
                "author_service",
                &args(json!({"name": "Users", "methods": "get, put"})),
            )
            .unwrap()
            .unwrap();
        assert_eq!(
            text(full),
            "Write a service named Users with get, put.get, put"
        );
        let short = t
            .get("author_service", &args(json!({"name": "Users"})))
            .unwrap()
            .unwrap();
        // An absent argument, unguarded, prints nothing.
        assert_eq!(text(short), "Write a service named Users.");
        assert!(t.get("nope", &JsonObject::new()).is_none());
    }

    #[test]
    fn bad_arguments_are_refused_clearly() {
        let t = tools();
        let err = t
            .get("author_service", &JsonObject::new())
            .unwrap()
            .unwrap_err();
        assert!(err.contains("needs the argument name"), "{err}");
        let err = t
            .get("author_service", &args(json!({"name": "x", "extra": "y"})))
            .unwrap()
            .unwrap_err();
        assert!(err.contains("no argument \"extra\""), "{err}");
        let err = t
            .get("author_service", &args(json!({"name": 5})))
            .unwrap()
            .unwrap_err();
        assert!(err.contains("must be a string"), "{err}");
    }

    #[test]
    fn broken_templates_name_the_key() {
        let configs = vec![PromptConfig {
            name: "x".into(),
            title: None,
            description: "d".into(),
            arguments: vec![],
            template: "{% if %}".into(),
        }];
        let err = PromptTools::new(&configs).err().unwrap();
        assert_eq!(err.key(), "prompts[0].template");
    }
}
