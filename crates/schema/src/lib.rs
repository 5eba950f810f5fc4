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
//! assert_eq!(error, r#"invalid arguments for count: "three" is not of type "integer" (at /n)"#);
//! ```

use std::fmt::Write as _;

use serde_json::Value;

/// At most this many violations are listed in one report.
pub const MAX_LISTED_ERRORS: usize = 10;
/// Each listed violation is cut to this many bytes.
pub const MAX_ERROR_LEN: usize = 300;

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
    pub fn check(&self, tool: &str, arguments: &Value) -> Result<(), String> {
        if self.validator.is_valid(arguments) {
            return Ok(());
        }
        let mut text = format!("invalid arguments for {tool}:");
        let mut count = 0;
        for error in self.validator.iter_errors(arguments) {
            count += 1;
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
        Err(text)
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
        let error = schema.check("t", &Value::Object(arguments)).unwrap_err();
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
            .unwrap_err();
        assert!(error.len() < MAX_ERROR_LEN + 100, "{} bytes", error.len());
        assert!(error.contains('…'));
    }

    #[test]
    fn a_broken_schema_is_refused_with_the_reason() {
        assert!(ArgumentSchema::compile(&json!({"type": 5})).is_err());
    }
}
