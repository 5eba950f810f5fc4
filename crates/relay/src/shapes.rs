//! MCP's shapes of a `Tool` and a `CallToolResult` (revisions 2025-06-18 and
//! 2025-11-25), checked on the wire form. MCP hosts check them too, and the
//! official SDKs refuse a whole `tools/list` or `tools/call` answer for one
//! field of the wrong type, so what does not fit is set apart here instead:
//! a tool left out of its list, a result made a tool error. Each problem
//! names its field as a path (`content[0].text`).

use serde_json::{Map, Value};

/// What is wrong with a value, naming the field.
pub(crate) type Checked = Result<(), String>;

/// The longest tool name MCP hosts are asked to accept, in characters.
const MAX_NAME_CHARS: usize = 128;

/// Whether `name` is a tool name MCP hosts accept: 1 to 128 characters,
/// none of them whitespace or control characters.
pub(crate) fn tool_name(name: &str) -> bool {
    let mut count = 0;
    name.chars().all(|c| {
        count += 1;
        count <= MAX_NAME_CHARS && !c.is_whitespace() && !c.is_control()
    }) && count > 0
}

/// An MCP `Tool` object, with the relay's `timeout_ms`.
pub(crate) fn tool(entry: &Value) -> Checked {
    let tool = object(entry, "the tool")?;
    fields(
        tool,
        "",
        &[("name", Shape::String), ("inputSchema", Shape::Object)],
        &[
            ("title", Shape::String),
            ("description", Shape::String),
            ("outputSchema", Shape::Object),
            ("annotations", Shape::Object),
            ("icons", Shape::Array),
            ("execution", Shape::Object),
            ("_meta", Shape::Object),
            ("timeout_ms", Shape::Unsigned),
        ],
    )?;
    object_schema(&tool["inputSchema"], "inputSchema")?;
    if let Some(schema) = present(tool, "outputSchema") {
        object_schema(schema, "outputSchema")?;
    }
    if let Some(annotations) = present(tool, "annotations") {
        fields(
            object(annotations, "annotations")?,
            "annotations",
            &[],
            &[
                ("title", Shape::String),
                ("readOnlyHint", Shape::Boolean),
                ("destructiveHint", Shape::Boolean),
                ("idempotentHint", Shape::Boolean),
                ("openWorldHint", Shape::Boolean),
            ],
        )?;
    }
    if let Some(icons) = present(tool, "icons") {
        icon_list(icons, "icons")?;
    }
    if let Some(execution) = present(tool, "execution") {
        one_of(
            object(execution, "execution")?,
            "execution",
            "taskSupport",
            &["forbidden", "optional", "required"],
        )?;
    }
    Ok(())
}

/// An MCP `CallToolResult`. (`content` may be absent: the relay reads it as
/// empty.)
pub(crate) fn call_result(result: &Value) -> Checked {
    let result = object(result, "the result")?;
    fields(
        result,
        "",
        &[],
        &[
            ("content", Shape::Array),
            ("structuredContent", Shape::Object),
            ("isError", Shape::Boolean),
            ("_meta", Shape::Object),
        ],
    )?;
    if let Some(Value::Array(blocks)) = present(result, "content") {
        for (i, block) in blocks.iter().enumerate() {
            content_block(block, &format!("content[{i}]"))?;
        }
    }
    Ok(())
}

/// A content block: text, image, audio, resource_link or resource.
fn content_block(block: &Value, at: &str) -> Checked {
    let block = object(block, at)?;
    fields(
        block,
        at,
        &[("type", Shape::String)],
        &[("annotations", Shape::Object), ("_meta", Shape::Object)],
    )?;
    let kind = block["type"].as_str().unwrap_or_default();
    let required: &[(&str, Shape)] = match kind {
        "text" => &[("text", Shape::String)],
        "image" | "audio" => &[("data", Shape::String), ("mimeType", Shape::String)],
        "resource_link" => &[("uri", Shape::String), ("name", Shape::String)],
        "resource" => &[("resource", Shape::Object)],
        other => {
            return Err(format!(
                "`{at}.type` is {other:?}, not one of text, image, audio, resource_link, resource"
            ));
        }
    };
    let optional: &[(&str, Shape)] = if kind == "resource_link" {
        &[
            ("title", Shape::String),
            ("description", Shape::String),
            ("mimeType", Shape::String),
            ("size", Shape::Unsigned),
            ("icons", Shape::Array),
        ]
    } else {
        &[]
    };
    fields(block, at, required, optional)?;
    if let Some(annotations) = present(block, "annotations") {
        let at = path(at, "annotations");
        content_annotations(object(annotations, &at)?, &at)?;
    }
    if let Some(icons) = present(block, "icons") {
        icon_list(icons, &path(at, "icons"))?;
    }
    if let Some(resource) = present(block, "resource") {
        let at = path(at, "resource");
        let resource = object(resource, &at)?;
        fields(
            resource,
            &at,
            &[("uri", Shape::String)],
            &[
                ("mimeType", Shape::String),
                ("text", Shape::String),
                ("blob", Shape::String),
                ("_meta", Shape::Object),
            ],
        )?;
        if present(resource, "text").is_none() && present(resource, "blob").is_none() {
            return Err(format!("`{at}` has neither `text` nor `blob`"));
        }
    }
    Ok(())
}

/// A content block's `annotations`.
fn content_annotations(annotations: &Map<String, Value>, at: &str) -> Checked {
    fields(
        annotations,
        at,
        &[],
        &[
            ("audience", Shape::Array),
            ("priority", Shape::Number),
            ("lastModified", Shape::String),
        ],
    )?;
    if let Some(Value::Array(audience)) = present(annotations, "audience")
        && !audience
            .iter()
            .all(|role| role == "user" || role == "assistant")
    {
        return Err(format!(
            "`{at}.audience` holds a role other than \"user\" and \"assistant\""
        ));
    }
    if let Some(priority) = present(annotations, "priority").and_then(Value::as_f64)
        && !(0.0..=1.0).contains(&priority)
    {
        return Err(format!("`{at}.priority` is {priority}, not within 0 to 1"));
    }
    Ok(())
}

/// A JSON Schema as MCP wants a tool's: an object of `"type": "object"`.
fn object_schema(schema: &Value, at: &str) -> Checked {
    let schema = object(schema, at)?;
    if schema.get("type").and_then(Value::as_str) != Some("object") {
        return Err(format!("`{at}.type` must be \"object\""));
    }
    fields(
        schema,
        at,
        &[],
        &[
            ("properties", Shape::Object),
            ("required", Shape::Strings),
            ("$schema", Shape::String),
        ],
    )
}

/// A list of `Icon`s.
fn icon_list(icons: &Value, at: &str) -> Checked {
    let Value::Array(icons) = icons else {
        return Err(format!("`{at}` must be an array"));
    };
    for (i, icon) in icons.iter().enumerate() {
        let at = format!("{at}[{i}]");
        let icon = object(icon, &at)?;
        fields(
            icon,
            &at,
            &[("src", Shape::String)],
            &[("mimeType", Shape::String), ("sizes", Shape::Strings)],
        )?;
        one_of(icon, &at, "theme", &["light", "dark"])?;
    }
    Ok(())
}

/// The optional string `key` of `object`, one of `allowed` when present.
fn one_of(object: &Map<String, Value>, at: &str, key: &str, allowed: &[&str]) -> Checked {
    match present(object, key) {
        Some(Value::String(value)) if allowed.contains(&value.as_str()) => Ok(()),
        None => Ok(()),
        Some(other) => Err(format!(
            "`{}` is {other}, not one of {}",
            path(at, key),
            allowed.join(", ")
        )),
    }
}

/// What a field holds.
#[derive(Debug, Clone, Copy)]
enum Shape {
    String,
    Boolean,
    Unsigned,
    Number,
    Object,
    Array,
    Strings,
}

impl Shape {
    fn fits(self, value: &Value) -> bool {
        match self {
            Shape::String => value.is_string(),
            Shape::Boolean => value.is_boolean(),
            Shape::Unsigned => value.is_u64(),
            Shape::Number => value.is_number(),
            Shape::Object => value.is_object(),
            Shape::Array => value.is_array(),
            Shape::Strings => value
                .as_array()
                .is_some_and(|items| items.iter().all(Value::is_string)),
        }
    }

    fn described(self) -> &'static str {
        match self {
            Shape::String => "a string",
            Shape::Boolean => "a boolean",
            Shape::Unsigned => "a whole number of at least 0",
            Shape::Number => "a number",
            Shape::Object => "an object",
            Shape::Array => "an array",
            Shape::Strings => "an array of strings",
        }
    }
}

/// Checks the `required` fields of `object` (at `at`) are there and of
/// their shape, and the `optional` ones when present. A `null` counts as
/// absent, as the SDKs read it.
fn fields(
    object: &Map<String, Value>,
    at: &str,
    required: &[(&str, Shape)],
    optional: &[(&str, Shape)],
) -> Checked {
    for (key, shape) in required {
        if present(object, key).is_none() {
            return Err(format!("`{}` is missing", path(at, key)));
        }
        check(object, at, key, *shape)?;
    }
    for (key, shape) in optional {
        check(object, at, key, *shape)?;
    }
    Ok(())
}

fn check(object: &Map<String, Value>, at: &str, key: &str, shape: Shape) -> Checked {
    match present(object, key) {
        Some(value) if !shape.fits(value) => {
            Err(format!("`{}` must be {}", path(at, key), shape.described()))
        }
        _ => Ok(()),
    }
}

fn object<'a>(value: &'a Value, at: &str) -> Result<&'a Map<String, Value>, String> {
    value.as_object().ok_or_else(|| match at {
        "the tool" | "the result" => format!("{at} is not an object"),
        _ => format!("`{at}` must be an object"),
    })
}

/// `key` of `object`, unless absent or `null`.
fn present<'a>(object: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    object.get(key).filter(|v| !v.is_null())
}

fn path(at: &str, key: &str) -> String {
    if at.is_empty() {
        key.to_owned()
    } else {
        format!("{at}.{key}")
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn tool_names_are_1_to_128_characters_without_spaces_or_controls() {
        for good in ["a", "get_weather", "ns.tool-2", &"é".repeat(128)] {
            assert!(tool_name(good), "{good}");
        }
        for bad in [
            "",
            "with space",
            "new\nline",
            "tab\t",
            "nul\0",
            &"x".repeat(129),
        ] {
            assert!(!tool_name(bad), "{bad:?}");
        }
    }

    #[test]
    fn a_tool_of_the_wrong_shape_is_named_by_its_field() {
        let schema = json!({"type": "object"});
        assert_eq!(
            tool(&json!({"name": "t", "inputSchema": schema, "title": "T",
                "annotations": {"readOnlyHint": true}, "icons": [{"src": "x", "theme": "dark"}],
                "outputSchema": {"type": "object", "properties": {}}, "execution": {"taskSupport": "optional"},
                "_meta": {}, "timeout_ms": 5, "future_field": [1]})),
            Ok(())
        );
        let cases = [
            (json!({"inputSchema": schema}), "`name` is missing"),
            (
                json!({"name": 5, "inputSchema": schema}),
                "`name` must be a string",
            ),
            (
                json!({"name": "t", "inputSchema": schema, "title": 5}),
                "`title` must be a string",
            ),
            (
                json!({"name": "t", "inputSchema": schema, "annotations": "x"}),
                "`annotations` must be an object",
            ),
            (
                json!({"name": "t", "inputSchema": schema, "annotations": {"readOnlyHint": "yes"}}),
                "`annotations.readOnlyHint` must be a boolean",
            ),
            (
                json!({"name": "t", "inputSchema": schema, "outputSchema": "x"}),
                "`outputSchema` must be an object",
            ),
            (
                json!({"name": "t", "inputSchema": schema, "outputSchema": {"type": "array"}}),
                "`outputSchema.type` must be \"object\"",
            ),
            (
                json!({"name": "t", "inputSchema": {"type": "string"}}),
                "`inputSchema.type` must be \"object\"",
            ),
            (
                json!({"name": "t", "inputSchema": {}}),
                "`inputSchema.type` must be \"object\"",
            ),
            (
                json!({"name": "t", "inputSchema": {"type": "object", "required": [1]}}),
                "`inputSchema.required` must be an array of strings",
            ),
            (
                json!({"name": "t", "inputSchema": schema, "icons": "x"}),
                "`icons` must be an array",
            ),
            (
                json!({"name": "t", "inputSchema": schema, "icons": [{}]}),
                "`icons[0].src` is missing",
            ),
            (
                json!({"name": "t", "inputSchema": schema, "icons": [{"src": "x", "theme": "blue"}]}),
                "`icons[0].theme` is \"blue\", not one of light, dark",
            ),
            (
                json!({"name": "t", "inputSchema": schema, "execution": {"taskSupport": 1}}),
                "`execution.taskSupport` is 1, not one of forbidden, optional, required",
            ),
            (
                json!({"name": "t", "inputSchema": schema, "_meta": []}),
                "`_meta` must be an object",
            ),
            (
                json!({"name": "t", "inputSchema": schema, "timeout_ms": -5}),
                "`timeout_ms` must be a whole number of at least 0",
            ),
            (json!("t"), "the tool is not an object"),
        ];
        for (entry, expected) in cases {
            assert_eq!(tool(&entry), Err(expected.to_owned()), "{entry}");
        }
    }

    #[test]
    fn a_result_of_the_wrong_shape_is_named_by_its_field() {
        for good in [
            json!({"content": [{"type": "text", "text": "x", "annotations": {"audience": ["user"], "priority": 0.5}}]}),
            json!({"content": [
                {"type": "image", "data": "AA==", "mimeType": "image/png"},
                {"type": "audio", "data": "AA==", "mimeType": "audio/wav"},
                {"type": "resource_link", "uri": "file:///a", "name": "a", "size": 3},
                {"type": "resource", "resource": {"uri": "file:///a", "text": "x"}},
                {"type": "resource", "resource": {"uri": "file:///b", "blob": "AA=="}}
            ], "structuredContent": {"n": 1}, "isError": false, "_meta": {}}),
            json!({}),
        ] {
            assert_eq!(call_result(&good), Ok(()), "{good}");
        }
        let cases = [
            (
                json!({"content": [{"type": "text"}]}),
                "`content[0].text` is missing",
            ),
            (
                json!({"content": [{"type": "text", "text": 5}]}),
                "`content[0].text` must be a string",
            ),
            (
                json!({"content": [{"type": "hologram", "data": 1}]}),
                "`content[0].type` is \"hologram\", not one of text, image, audio, resource_link, resource",
            ),
            (
                json!({"content": ["plain string"]}),
                "`content[0]` must be an object",
            ),
            (
                json!({"content": [{"type": "text", "text": "a"}, {"type": "image"}]}),
                "`content[1].data` is missing",
            ),
            (
                json!({"content": [{"type": "resource", "resource": {"uri": "u"}}]}),
                "`content[0].resource` has neither `text` nor `blob`",
            ),
            (
                json!({"content": [{"type": "text", "text": "a", "annotations": {"priority": 2}}]}),
                "`content[0].annotations.priority` is 2, not within 0 to 1",
            ),
            (
                json!({"content": [{"type": "text", "text": "a", "annotations": {"audience": ["model"]}}]}),
                "`content[0].annotations.audience` holds a role other than \"user\" and \"assistant\"",
            ),
            (json!({"content": "text"}), "`content` must be an array"),
            (
                json!({"content": [], "structuredContent": [1, 2]}),
                "`structuredContent` must be an object",
            ),
            (
                json!({"content": [], "isError": "yes"}),
                "`isError` must be a boolean",
            ),
        ];
        for (result, expected) in cases {
            assert_eq!(call_result(&result), Err(expected.to_owned()), "{result}");
        }
    }
}
