//! Small helpers for writing compact JSON Schemas by hand.
//!
//! Every byte of a tool list is paid for in each agent turn, so schemas are
//! written by hand rather than derived (derived schemas carry `$schema`,
//! titles and formats that no model needs).

use std::sync::Arc;

use serde_json::Value;

use crate::JsonObject;

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
