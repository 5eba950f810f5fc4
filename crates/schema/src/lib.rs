//! Tool arguments checked against the tool's JSON Schema, with a report an
//! agent can act on: each violation with where it is, a bounded number of
//! them, each cut to a bounded length (a violation may quote the offending
//! value, which can be large).
//!
//! The relay (an app's tools) and the config-declared toolsets (catalog,
//! templates, commands) check arguments the same way and word their errors
//! the same way.
//!
//! ```
//! use serde_json::json;
//! use switchboard_schema::ArgumentSchema;
//!
//! let schema = ArgumentSchema::compile(&json!({
//!     "type": "object",
//!     "properties": {"n": {"type": "integer"}},
//!     "required": ["n"]
//! }))
//! .unwrap();
//! assert!(schema.check("count", &json!({"n": 3})).is_ok());
//! let error = schema.check("count", &json!({"n": "three"})).unwrap_err();
//! assert_eq!(error.to_string(), r#"invalid arguments for count: "three" is not of type "integer" (at /n)"#);
//! assert_eq!(error.argument, "n");
//! ```

use std::fmt::Write as _;

use serde_json::Value;

/// At most this many violations are listed in one report.
pub const MAX_LISTED_ERRORS: usize = 10;
/// Each listed violation is cut to this many bytes.
pub const MAX_ERROR_LEN: usize = 300;

/// Arguments that do not match a tool's schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    /// What is wrong, starting `invalid arguments for <tool>:`.
    pub report: String,
    /// The argument of the first violation (a missing or unexpected one
    /// included), or `arguments` when it concerns the object as a whole.
    pub argument: String,
}

impl std::fmt::Display for Invalid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.report)
    }
}

impl std::error::Error for Invalid {}

/// The top-level argument a violation concerns.
fn argument_of(error: &jsonschema::ValidationError<'_>) -> Option<String> {
    use jsonschema::error::ValidationErrorKind as Kind;
    let path = error.instance_path().as_str();
    if let Some(first) = path.strip_prefix('/') {
        let first = first.split('/').next().unwrap_or_default();
        return Some(first.replace("~1", "/").replace("~0", "~"));
    }
    match error.kind() {
        Kind::Required { property } => property.as_str().map(str::to_owned),
        Kind::AdditionalProperties { unexpected } | Kind::UnevaluatedProperties { unexpected } => {
            unexpected.first().cloned()
        }
        _ => None,
    }
}

/// A compiled input schema.
pub struct ArgumentSchema {
    validator: jsonschema::Validator,
}

impl std::fmt::Debug for ArgumentSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ArgumentSchema")
    }
}

impl ArgumentSchema {
    /// Compiles `schema`; the error says why it is not a usable JSON Schema.
    pub fn compile(schema: &Value) -> Result<Self, String> {
        jsonschema::validator_for(schema)
            .map(|validator| Self { validator })
            .map_err(|e| e.to_string())
    }

    /// Checks the arguments of a call to `tool`; the error lists what is
    /// wrong, starting `invalid arguments for <tool>:`.
    pub fn check(&self, tool: &str, arguments: &Value) -> Result<(), Invalid> {
        if self.validator.is_valid(arguments) {
            return Ok(());
        }
        let mut text = format!("invalid arguments for {tool}:");
        let mut argument = None;
        let mut count = 0;
        for error in self.validator.iter_errors(arguments) {
            count += 1;
            if argument.is_none() {
                argument = argument_of(&error);
            }
            if count > MAX_LISTED_ERRORS {
                continue;
            }
            let path = error.instance_path().as_str();
            let path = if path.is_empty() { "/" } else { path };
            let mut message = error.to_string();
            truncate(&mut message, MAX_ERROR_LEN);
            let sep = if count == 1 { " " } else { "; " };
            let _ = write!(text, "{sep}{message} (at {path})");
        }
        if count > MAX_LISTED_ERRORS {
            let _ = write!(text, "; and {} more", count - MAX_LISTED_ERRORS);
        }
        if count == 0 {
            text.push_str(" they do not match the tool's inputSchema");
        }
        Err(Invalid {
            report: text,
            argument: argument.unwrap_or_else(|| "arguments".to_owned()),
        })
    }
}

/// Cuts `text` to at most `max` bytes on a character boundary, marking the
/// cut with `…`.
///
/// ```
/// let mut text = String::from("héllo");
/// switchboard_schema::truncate(&mut text, 2);
/// assert_eq!(text, "h…");
/// ```
pub fn truncate(text: &mut String, max: usize) {
    if text.len() <= max {
        return;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push('…');
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn many_violations_are_counted_past_the_listed_ones() {
        let properties: serde_json::Map<String, Value> = (0..15)
            .map(|i| (format!("p{i}"), json!({"type": "integer"})))
            .collect();
        let schema =
            ArgumentSchema::compile(&json!({"type": "object", "properties": properties})).unwrap();
        let arguments: serde_json::Map<String, Value> =
            (0..15).map(|i| (format!("p{i}"), json!("x"))).collect();
        let error = schema
            .check("t", &Value::Object(arguments))
            .unwrap_err()
            .report;
        assert_eq!(error.matches(" (at /p").count(), MAX_LISTED_ERRORS);
        assert!(error.ends_with("; and 5 more"), "{error}");
    }

    #[test]
    fn a_huge_offending_value_is_cut() {
        let schema = ArgumentSchema::compile(
            &json!({"type": "object", "properties": {"s": {"maxLength": 1}}}),
        )
        .unwrap();
        let error = schema
            .check("t", &json!({"s": "é".repeat(10_000)}))
            .unwrap_err()
            .report;
        assert!(error.len() < MAX_ERROR_LEN + 100, "{} bytes", error.len());
        assert!(error.contains('…'));
    }

    #[test]
    fn the_first_violation_names_its_argument() {
        let schema = ArgumentSchema::compile(&json!({
            "type": "object",
            "properties": {"a/b": {"type": "integer"}, "n": {"type": "integer"}},
            "required": ["n"],
            "additionalProperties": false
        }))
        .unwrap();
        let argument = |args: Value| schema.check("t", &args).unwrap_err().argument;
        assert_eq!(argument(json!({})), "n");
        assert_eq!(argument(json!({"n": 1, "x": 2})), "x");
        assert_eq!(argument(json!({"n": 1, "a/b": "x"})), "a/b");
        assert_eq!(argument(json!([1])), "arguments");
    }

    #[test]
    fn a_broken_schema_is_refused_with_the_reason() {
        assert!(ArgumentSchema::compile(&json!({"type": 5})).is_err());
    }
}
