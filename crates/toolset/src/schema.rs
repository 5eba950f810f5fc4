//! Small helpers for writing compact JSON Schemas by hand.
//!
//! Every byte of a tool list is paid for in each agent turn, so schemas are
//! written by hand rather than derived (derived schemas carry `$schema`,
//! titles and formats that no model needs).

use std::{sync::Arc, time::Duration};

use serde_json::Value;

use crate::JsonObject;

/// The `_meta` key under which a tool declares how long a call may take,
/// for transports that time calls out (the relay shim waits 15 s unless a
/// tool says more).
const CALL_TIMEOUT_KEY: &str = "dev.switchboard/timeoutMs";

/// Declares that calls of `tool` may take up to `timeout`.
///
/// ```
/// # use std::time::Duration;
/// # use switchboard_toolset::{Tool, call_timeout, object_schema, with_call_timeout};
/// let tool = with_call_timeout(Tool::new("t", "d", object_schema(serde_json::json!({}), &[])), Duration::from_secs(60));
/// assert_eq!(call_timeout(&tool), Some(Duration::from_secs(60)));
/// ```
pub fn with_call_timeout(mut tool: crate::Tool, timeout: Duration) -> crate::Tool {
    let mut meta = tool.meta.take().unwrap_or_default();
    meta.0.insert(
        CALL_TIMEOUT_KEY.into(),
        Value::from(timeout.as_millis() as u64),
    );
    tool.meta = Some(meta);
    tool
}

/// The call timeout `tool` declares, if any.
pub fn call_timeout(tool: &crate::Tool) -> Option<Duration> {
    tool.meta
        .as_ref()?
        .0
        .get(CALL_TIMEOUT_KEY)?
        .as_u64()
        .map(Duration::from_millis)
}

/// An object schema with `properties` and the names in `required`.
///
/// ```
/// # use switchboard_toolset::object_schema;
/// let s = object_schema(serde_json::json!({"name": {"type": "string"}}), &["name"]);
/// assert_eq!(s["required"][0], "name");
/// ```
pub fn object_schema(properties: Value, required: &[&str]) -> Arc<JsonObject> {
    let mut schema = JsonObject::new();
    schema.insert("type".into(), Value::from("object"));
    schema.insert("properties".into(), properties);
    if !required.is_empty() {
        schema.insert("required".into(), Value::from(required.to_vec()));
    }
    Arc::new(schema)
}
