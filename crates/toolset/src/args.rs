//! Turning a `tools/call` argument object into a typed request.

use serde::de::DeserializeOwned;

use crate::{JsonObject, ToolError};

/// Deserialises `arguments` into `T`, or explains to the agent what is wrong.
///
/// Request types use `#[serde(deny_unknown_fields)]` so that a misspelt
/// parameter is reported instead of silently ignored.
///
/// ```
/// # use switchboard_toolset::parse_args;
/// #[derive(Debug, serde::Deserialize)]
/// #[serde(deny_unknown_fields)]
/// struct Params { channel: String }
///
/// let args = serde_json::json!({"chanel": "x"});
/// let err = parse_args::<Params>("read", args.as_object().unwrap().clone()).unwrap_err();
/// assert!(err.message().contains("unknown field `chanel`"));
/// ```
pub fn parse_args<T: DeserializeOwned>(tool: &str, arguments: JsonObject) -> Result<T, ToolError> {
    serde_json::from_value(serde_json::Value::Object(arguments))
        .map_err(|e| ToolError::new(format!("invalid arguments for {tool}: {e}")))
}
