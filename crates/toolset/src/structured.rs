//! A tool result's `structuredContent`, as a value or as JSON text written
//! once.
//!
//! A large result (a page of fifty messages) costs several times more as a
//! tree of values — built, serialised, dropped — than written straight to
//! JSON text. A toolset may hand over the text; a transport that writes the
//! reply itself copies it in as it is ([`call_result_json`]), and anyone who
//! needs the value gets it parsed on first use.

use std::{
    fmt,
    ops::Deref,
    sync::{Arc, OnceLock},
};

use serde_json::Value;

use crate::{ToolError, ToolOutput};

/// The structured half of a [`ToolOutput`]; reads as a [`Value`].
#[derive(Clone)]
pub struct Structured(Form);

#[derive(Clone)]
enum Form {
    Value(Value),
    Json {
        text: Arc<str>,
        parsed: OnceLock<Value>,
    },
}

impl Structured {
    /// A JSON object already written as text. The writer guarantees it is
    /// exactly what serialising its value gives (keys in order, serde_json's
    /// escaping), so replies are the same either way.
    pub fn json(text: String) -> Self {
        debug_assert!(
            serde_json::from_str::<Value>(&text).is_ok_and(|v| v.is_object()),
            "not a JSON object: {text}"
        );
        Self(Form::Json {
            text: text.into(),
            parsed: OnceLock::new(),
        })
    }

    /// The JSON text, when the toolset wrote it.
    pub fn as_json(&self) -> Option<&str> {
        match &self.0 {
            Form::Json { text, .. } => Some(text),
            Form::Value(_) => None,
        }
    }

    pub fn into_value(self) -> Value {
        match self.0 {
            Form::Value(value) => value,
            Form::Json { text, parsed } => parsed.into_inner().unwrap_or_else(|| parse(&text)),
        }
    }
}

fn parse(text: &str) -> Value {
    // `json` is given objects only; a broken one reads as null.
    serde_json::from_str(text).unwrap_or(Value::Null)
}

impl Deref for Structured {
    type Target = Value;

    fn deref(&self) -> &Value {
        match &self.0 {
            Form::Value(value) => value,
            Form::Json { text, parsed } => parsed.get_or_init(|| parse(text)),
        }
    }
}

impl From<Value> for Structured {
    fn from(value: Value) -> Self {
        Self(Form::Value(value))
    }
}

impl PartialEq for Structured {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl PartialEq<Value> for Structured {
    fn eq(&self, other: &Value) -> bool {
        **self == *other
    }
}

impl fmt::Debug for Structured {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

/// The `result` of a `tools/call` as rmcp writes it for a peer on a
/// protocol version before 2026-07-28, when the output carries its
/// structured content as JSON text; `None` otherwise (the caller then goes
/// through [`into_call_result`](crate::into_call_result)).
pub fn call_result_json(outcome: &Result<ToolOutput, ToolError>) -> Option<String> {
    let Ok(output) = outcome else { return None };
    let structured = output.structured.as_json()?;
    let mut out = Vec::with_capacity(output.text.len() + structured.len() + 80);
    out.extend_from_slice(br#"{"content":[{"type":"text","text":"#);
    serde_json::to_writer(&mut out, &output.text).ok()?;
    out.extend_from_slice(br#"}],"structuredContent":"#);
    out.extend_from_slice(structured.as_bytes());
    out.extend_from_slice(br#","isError":false}"#);
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use rmcp::model::ServerResult;
    use serde_json::json;

    use super::*;
    use crate::into_call_result;

    /// The `result` rmcp writes for `outcome` to a legacy peer.
    fn rmcp_result(outcome: Result<ToolOutput, ToolError>) -> String {
        let mut result = ServerResult::CallToolResult(into_call_result(outcome));
        result.strip_result_type_for_legacy_peer();
        result.strip_non_object_output_for_legacy_peer();
        serde_json::to_string(&result).unwrap()
    }

    #[test]
    fn written_results_are_the_bytes_rmcp_writes() {
        let value = json!({"b": [1, {"z": "\"q\"\n\u{1}", "a": null}], "a": "é🚀</script>"});
        let text = "line \"one\"\n\ttwo \\ \u{7f} ✓".to_owned();
        let written = ToolOutput::new(text.clone(), Structured::json(value.to_string()));
        assert_eq!(
            call_result_json(&Ok(written.clone())).unwrap(),
            rmcp_result(Ok(ToolOutput::new(text, value.clone())))
        );
        assert_eq!(written.structured, value);
        assert_eq!(written.structured["a"], "é🚀</script>");
    }

    #[test]
    fn values_and_errors_are_left_to_rmcp() {
        let value = ToolOutput::new("t", json!({"a": 1}));
        assert_eq!(call_result_json(&Ok(value)), None);
        assert_eq!(call_result_json(&Err(ToolError::new("no"))), None);
    }
}
