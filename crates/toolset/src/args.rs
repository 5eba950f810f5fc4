//! Turning a `tools/call` argument object into a typed request.

use serde::de::DeserializeOwned;
use serde_path_to_error::Segment;

use crate::{JsonObject, ToolError};

/// An optional whole-number argument that must lie in `1..=max`: its value,
/// `default` when it is absent, or an error naming it (as
/// [`ToolError::invalid_argument`]) when it is out of range. Schemas state
/// the range too, but a client need not check them.
///
/// ```
/// # use switchboard_toolset::bounded;
/// assert_eq!(bounded("limit", None, 20, 50).unwrap(), 20);
/// assert_eq!(bounded("limit", Some(50), 20, 50).unwrap(), 50);
/// let e = bounded("limit", Some(0), 20, 50).unwrap_err();
/// assert_eq!(e.message(), "limit must be between 1 and 50 (got 0)");
/// assert_eq!(e.structured().unwrap()["invalid_argument"], "limit");
/// assert!(bounded("limit", Some(-1), 20, 50).is_err());
/// assert!(bounded("limit", Some(i64::MAX), 20, 50).is_err());
/// ```
pub fn bounded(
    name: &str,
    value: Option<i64>,
    default: usize,
    max: usize,
) -> Result<usize, ToolError> {
    let Some(value) = value else {
        return Ok(default);
    };
    match usize::try_from(value) {
        Ok(v) if (1..=max).contains(&v) => Ok(v),
        _ => Err(ToolError::invalid_argument(
            name,
            format!("{name} must be between 1 and {max} (got {value})"),
        )),
    }
}

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
/// assert_eq!(err.structured().unwrap()["invalid_argument"], "chanel");
/// // A value of the wrong type is named.
/// let args = serde_json::json!({"channel": 5});
/// let err = parse_args::<Params>("read", args.as_object().unwrap().clone()).unwrap_err();
/// assert_eq!(
///     err.message(),
///     "invalid arguments for read: invalid type: integer `5`, expected a string (at /channel)"
/// );
/// // Programs tell it from a failure to carry the call out.
/// assert_eq!(err.structured().unwrap()["invalid_argument"], "channel");
///
/// // `3.0` is the integer 3, as JSON Schema's `integer` takes it; `3.5` is not.
/// #[derive(Debug, serde::Deserialize)]
/// struct Limit { limit: i64 }
/// let args = serde_json::json!({"limit": 3.0});
/// assert_eq!(parse_args::<Limit>("read", args.as_object().unwrap().clone()).unwrap().limit, 3);
/// let args = serde_json::json!({"limit": 3.5});
/// let err = parse_args::<Limit>("read", args.as_object().unwrap().clone()).unwrap_err();
/// assert!(err.message().contains("expected an integer"), "{}", err.message());
/// ```
pub fn parse_args<T: DeserializeOwned>(tool: &str, arguments: JsonObject) -> Result<T, ToolError> {
    let mut arguments = serde_json::Value::Object(arguments);
    whole_numbers_as_integers(&mut arguments);
    serde_path_to_error::deserialize(arguments).map_err(|e| {
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
        let head = match e.path().iter().next() {
            Some(Segment::Map { key }) => Some(key.clone()),
            _ => None,
        };
        let e = e.into_inner();
        // A missing or unknown field has no path; serde's message names it.
        let argument = head
            .or_else(|| named_field(&e.to_string()).map(str::to_owned))
            .unwrap_or_else(|| "arguments".to_owned());
        // Said as the schema says it, not as the Rust type behind it.
        let e = ["i64", "u64", "u32", "usize"]
            .iter()
            .fold(e.to_string(), |e, rust| {
                e.replace(&format!("expected {rust}"), "expected an integer")
            });
        let message = if pointer.is_empty() {
            format!("invalid arguments for {tool}: {e}")
        } else {
            format!("invalid arguments for {tool}: {e} (at {pointer})")
        };
        ToolError::invalid_argument(&argument, message)
    })
}

/// The field serde's message names, in "missing field `text`" or
/// "unknown field `chanel`, expected …".
fn named_field(message: &str) -> Option<&str> {
    message
        .strip_prefix("missing field `")
        .or_else(|| message.strip_prefix("unknown field `"))?
        .split('`')
        .next()
}

/// JSON Schema's `integer` takes `3.0`; serde's integers do not. A whole
/// number written with a fraction becomes the integer it is (a float field
/// takes an integer all the same).
fn whole_numbers_as_integers(value: &mut serde_json::Value) {
    use serde_json::Value;
    match value {
        Value::Number(n) if !n.is_i64() && !n.is_u64() => {
            if let Some(f) = n.as_f64()
                && f.fract() == 0.0
                && (i64::MIN as f64..=i64::MAX as f64).contains(&f)
            {
                *value = Value::from(f as i64);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(whole_numbers_as_integers),
        Value::Object(fields) => fields.values_mut().for_each(whole_numbers_as_integers),
        _ => {}
    }
}
