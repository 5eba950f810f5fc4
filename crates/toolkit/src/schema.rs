//! Input schemas declared in config: checked and compiled once, then used to
//! validate every call's arguments before anything is rendered or run.

use std::sync::Arc;

use serde_json::Value;
use switchboard_schema::ArgumentSchema;
use switchboard_toolset::{JsonObject, ToolError};

use crate::config::ConfigError;

/// A tool's parameters: the schema agents see and its compiled validator.
pub(crate) struct InputSchema {
    exposed: Arc<JsonObject>,
    validator: ArgumentSchema,
    properties: JsonObject,
}

impl InputSchema {
    /// Checks `schema` (from config key `key`) and compiles it. `reserved`
    /// names may not be declared; `extra` properties are added by the toolset
    /// itself (such as `apply`).
    pub(crate) fn compile(
        key: &str,
        schema: &JsonObject,
        reserved: &[&str],
        extra: &[(&str, Value)],
    ) -> Result<Self, ConfigError> {
        let mut exposed = schema.clone();
        match exposed.get("type") {
            None => {
                exposed.insert("type".into(), "object".into());
            }
            Some(Value::String(t)) if t == "object" => {}
            Some(other) => {
                return Err(ConfigError::new(
                    format!("{key}.type"),
                    format!("a tool's input schema must have type \"object\" (got {other})"),
                ));
            }
        }
        let properties = match exposed.get("properties") {
            None => JsonObject::new(),
            Some(Value::Object(p)) => p.clone(),
            Some(_) => {
                return Err(ConfigError::new(
                    format!("{key}.properties"),
                    "must be a table of parameter schemas",
                ));
            }
        };
        for (name, property) in &properties {
            let at = format!("{key}.properties.{name}");
            if !is_identifier(name) {
                return Err(ConfigError::new(
                    at,
                    "parameter names must be letters, digits and `_`, starting with a letter or `_`",
                ));
            }
            if reserved.contains(&name.as_str()) {
                return Err(ConfigError::new(
                    at,
                    format!("`{name}` is reserved: switchboard provides it; remove it"),
                ));
            }
            if !property.is_object() {
                return Err(ConfigError::new(at, "must be a table (a JSON Schema)"));
            }
        }
        if let Some(required) = exposed.get("required") {
            let names = required.as_array().ok_or_else(|| {
                ConfigError::new(
                    format!("{key}.required"),
                    "must be a list of parameter names",
                )
            })?;
            for (i, name) in names.iter().enumerate() {
                let known = name.as_str().is_some_and(|n| properties.contains_key(n));
                if !known {
                    return Err(ConfigError::new(
                        format!("{key}.required[{i}]"),
                        format!("{name} is not a declared property"),
                    ));
                }
            }
        }
        let mut properties = properties;
        for (name, property) in extra {
            properties.insert((*name).to_owned(), property.clone());
        }
        exposed.insert("properties".into(), Value::Object(properties.clone()));
        let validator = ArgumentSchema::compile(&Value::Object(exposed.clone()))
            .map_err(|e| ConfigError::new(key, format!("not a usable JSON Schema: {e}")))?;
        Ok(Self {
            exposed: Arc::new(exposed),
            validator,
            properties,
        })
    }

    /// The schema as agents see it in `tools/list`.
    pub(crate) fn exposed(&self) -> Arc<JsonObject> {
        self.exposed.clone()
    }

    /// The schema of parameter `name`, if declared.
    pub(crate) fn property(&self, name: &str) -> Option<&Value> {
        self.properties.get(name)
    }

    /// The parameters the schema's `required` lists.
    pub(crate) fn required(&self) -> impl Iterator<Item = &str> {
        self.exposed
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
    }

    /// The declared parameter names, in order.
    pub(crate) fn names(&self) -> impl Iterator<Item = &str> {
        self.properties.keys().map(String::as_str)
    }

    /// Checks a call's arguments: no unknown parameter, every schema rule
    /// met. An optional parameter given as `null` counts as not given (many
    /// clients send `null` for what they leave out). Returns them with the
    /// top-level `default`s filled in.
    pub(crate) fn check(&self, tool: &str, mut args: JsonObject) -> Result<JsonObject, ToolError> {
        if let Some(unknown) = args.keys().find(|k| !self.properties.contains_key(*k)) {
            let mut expected = self.names().collect::<Vec<_>>();
            expected.sort_unstable();
            let shown: String = unknown.chars().take(60).collect();
            return Err(ToolError::invalid_argument(
                unknown,
                if expected.is_empty() {
                    format!("{tool} takes no parameters (got `{shown}`)")
                } else {
                    format!(
                        "unknown parameter `{shown}` for {tool}; it takes: {}",
                        expected.join(", ")
                    )
                },
            ));
        }
        let required: Vec<&str> = self.required().collect();
        args.retain(|name, value| !value.is_null() || required.contains(&name.as_str()));
        let value = Value::Object(args);
        self.validator
            .check(tool, &value)
            .map_err(|e| ToolError::invalid_argument(&e.argument, e.report))?;
        let Value::Object(mut args) = value else {
            return Err(ToolError::new(format!(
                "{tool} takes an object of parameters"
            )));
        };
        for (name, property) in &self.properties {
            if let Some(default) = property.get("default")
                && !args.contains_key(name)
            {
                args.insert(name.clone(), default.clone());
            }
        }
        Ok(args)
    }
}

/// `[A-Za-z_][A-Za-z0-9_]*`: a name a placeholder can refer to.
pub(crate) fn is_identifier(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn object(v: Value) -> JsonObject {
        v.as_object().cloned().unwrap()
    }

    fn schema() -> InputSchema {
        InputSchema::compile(
            "t.input_schema",
            &object(json!({
                "properties": {
                    "name": {"type": "string", "minLength": 1},
                    "limit": {"type": "integer", "default": 5}
                },
                "required": ["name"]
            })),
            &["apply"],
            &[("apply", json!({"type": "boolean"}))],
        )
        .unwrap()
    }

    #[test]
    fn valid_arguments_get_defaults() {
        let args = schema()
            .check("t", object(json!({"name": "x", "apply": true})))
            .unwrap();
        assert_eq!(args["limit"], 5);
        assert_eq!(args["apply"], true);
    }

    #[test]
    fn null_leaves_an_optional_parameter_out_and_is_no_required_value() {
        let args = schema()
            .check("t", object(json!({"name": "x", "limit": null})))
            .unwrap();
        assert_eq!(args["limit"], 5);
        let err = schema()
            .check("t", object(json!({"name": null})))
            .unwrap_err();
        assert!(err.message().contains("(at /name)"), "{err}");
    }

    #[test]
    fn unknown_parameters_are_named() {
        let err = schema()
            .check("t", object(json!({"nme": "x"})))
            .unwrap_err();
        assert_eq!(
            err.message(),
            "unknown parameter `nme` for t; it takes: apply, limit, name"
        );
    }

    #[test]
    fn schema_violations_say_where() {
        let err = schema().check("t", object(json!({"name": 5}))).unwrap_err();
        assert!(
            err.message().starts_with("invalid arguments for t:"),
            "{err}"
        );
        assert!(err.message().contains("(at /name)"), "{err}");
        let err = schema().check("t", JsonObject::new()).unwrap_err();
        assert!(
            err.message().contains("\"name\" is a required property"),
            "{err}"
        );
    }

    #[test]
    fn bad_schemas_name_the_key() {
        let bad = |v: Value| {
            InputSchema::compile("k", &object(v), &["apply"], &[])
                .err()
                .unwrap()
        };
        assert_eq!(bad(json!({"type": "array"})).key(), "k.type");
        assert_eq!(
            bad(json!({"properties": {"apply": {}}})).key(),
            "k.properties.apply"
        );
        assert_eq!(
            bad(json!({"properties": {"a-b": {}}})).key(),
            "k.properties.a-b"
        );
        assert_eq!(
            bad(json!({"properties": {}, "required": ["x"]})).key(),
            "k.required[0]"
        );
        let err = bad(json!({"properties": {"a": {"type": "wat"}}}));
        assert!(err.message().contains("not a usable JSON Schema"), "{err}");
    }

    #[test]
    fn identifiers() {
        assert!(is_identifier("cwd"));
        assert!(is_identifier("_x1"));
        assert!(!is_identifier("1x"));
        assert!(!is_identifier(""));
        assert!(!is_identifier("a b"));
    }
}
