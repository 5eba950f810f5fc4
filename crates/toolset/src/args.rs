//! Turning a `tools/call` argument object into a typed request.

use serde::de::DeserializeOwned;
use serde_path_to_error::Segment;

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
/// // A value of the wrong type is named.
/// let args = serde_json::json!({"channel": 5});
/// let err = parse_args::<Params>("read", args.as_object().unwrap().clone()).unwrap_err();
/// assert_eq!(
///     err.message(),
///     "invalid arguments for read: invalid type: integer `5`, expected a string (at /channel)"
/// );
/// // Programs tell it from a failure to carry the call out.
/// assert_eq!(err.structured().unwrap()["invalid_argument"], "channel");
/// ```
pub fn parse_args<T: DeserializeOwned>(tool: &str, arguments: JsonObject) -> Result<T, ToolError> {
    serde_path_to_error::deserialize(serde_json::Value::Object(arguments)).map_err(|e| {
        // Where, as a JSON pointer, as the schema checks say it; none for the
        // whole object (a missing or unknown field, named already).
        let pointer: String = e
            .path()
            .iter()
            .map(|segment| match segment {
                Segment::Map { key } => format!("/{key}"),
                Segment::Seq { index } => format!("/{index}"),
                Segment::Enum { variant } => format!("/{variant}"),
                Segment::Unknown => "/?".to_owned(),
            })
            .collect();
        let argument = match e.path().iter().next() {
            Some(Segment::Map { key }) => key.clone(),
            _ => "arguments".to_owned(),
        };
        let e = e.into_inner();
        let message = if pointer.is_empty() {
            format!("invalid arguments for {tool}: {e}")
        } else {
            format!("invalid arguments for {tool}: {e} (at {pointer})")
        };
        ToolError::invalid_argument(&argument, message)
    })
}
