//! The body of the `argv_template` fuzz target (`fuzz/` at the repository
//! root): a command's `argv` template and a call's parameters, both from
//! the input. Built with the feature `fuzzing` only; the crate's tests run
//! it on the seed corpus with a stable toolchain.
//!
//! ```
//! switchboard_toolkit::fuzzing::argv_template(br#"["service", "{name}"]
//! {"name": "billing"}"#);
//! ```

use serde_json::{Value, json};
use switchboard_toolset::JsonObject;

use crate::{
    commands::argv::Argv,
    config::{ArgRule, ArgTemplate},
    schema::InputSchema,
};

/// Reads `data` as a JSON `argv` template on the first line and the call's
/// JSON parameters after it; compiles the template against a fixed input
/// schema (every parameter type a template can use), validates the
/// parameters as a call does, renders, and checks that the rendered argv
/// has no NUL, no more elements than the template and the list parameters
/// account for, no `{placeholder}` left over, no option-like element before
/// `--` that neither the template nor an `allow` list wrote, and a `--`
/// where it says the end of options is.
pub fn argv_template(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let (template, params) = text.split_once('\n').unwrap_or((&text, "{}"));
    let Ok(templates) = serde_json::from_str::<Vec<ArgTemplate>>(template) else {
        return;
    };
    let Ok(Value::Object(params)) = serde_json::from_str::<Value>(params) else {
        return;
    };
    let schema = schema();
    let Ok(argv) = Argv::compile("commands.actions[0].argv", &templates, &schema) else {
        return;
    };
    let Ok(params) = schema.check("fuzz", params) else {
        return;
    };
    let Ok(rendered) = argv.render(&params) else {
        return;
    };
    let again = argv.render(&params).expect("rendering is repeatable");
    assert_eq!(again, rendered, "two renderings differ");
    let args = &rendered.args;
    assert!(
        !args.iter().any(|a| a.contains('\0')),
        "a NUL reached argv: {args:?}"
    );
    if let Some(end) = rendered.end_of_options {
        assert_eq!(args.get(end).map(String::as_str), Some("--"), "{args:?}");
    }
    let most = templates
        .iter()
        .map(|t| most_elements(t, &params))
        .sum::<usize>();
    assert!(
        args.len() <= most,
        "{} elements from a template that makes at most {most}: {args:?}",
        args.len()
    );
    let texts: Vec<&str> = templates.iter().flat_map(template_texts).collect();
    let escapes = texts.iter().any(|t| t.contains("{{") || t.contains("}}"));
    if !escapes && !has_brace(&Value::Object(params.clone())) {
        assert!(
            !args.iter().any(|a| a.contains(['{', '}'])),
            "a placeholder was left in {args:?}"
        );
    }
    let literal_dash = texts.iter().any(|t| t.starts_with('-'));
    let allowed: Vec<&str> = templates
        .iter()
        .filter_map(rule)
        .flat_map(|r| r.allow.iter().map(String::as_str))
        .collect();
    let before_end = &args[..rendered.end_of_options.unwrap_or(args.len())];
    for (i, arg) in before_end.iter().enumerate() {
        let name = arg.split_once('=').map_or(arg.as_str(), |(name, _)| name);
        let after_option = i > 0 && allowed.contains(&before_end[i - 1].as_str());
        assert!(
            !arg.starts_with('-') || literal_dash || allowed.contains(&name) || after_option,
            "the value {arg:?} could be read as an option: {args:?}"
        );
    }
}

/// The input schema of the fuzzed action.
fn schema() -> InputSchema {
    let Value::Object(schema) = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "version": {"type": "string", "maxLength": 40},
            "count": {"type": "integer"},
            "ratio": {"type": "number"},
            "flag": {"type": "boolean"},
            "tags": {"type": "string"},
            "items": {"type": "array", "items": {"type": "string"}},
            "numbers": {"type": "array", "items": {"type": "integer"}},
            "opts": {"type": "array", "items": {"type": "string"}},
            "path": {"type": "string"}
        }
    }) else {
        unreachable!("an object literal");
    };
    InputSchema::compile("commands.actions[0].input_schema", &schema, &[], &[])
        .expect("the fuzz schema compiles")
}

fn rule(template: &ArgTemplate) -> Option<&ArgRule> {
    match template {
        ArgTemplate::Rule(rule) => Some(rule),
        ArgTemplate::Text(_) => None,
    }
}

/// The placeholder strings of a template element.
fn template_texts(template: &ArgTemplate) -> Vec<&str> {
    match template {
        ArgTemplate::Text(text) => vec![text],
        ArgTemplate::Rule(rule) => rule.args.iter().map(String::as_str).collect(),
    }
}

/// The most argv elements one template element can make from `params`.
fn most_elements(template: &ArgTemplate, params: &JsonObject) -> usize {
    let Some(rule) = rule(template) else {
        return 1;
    };
    let list = |param: &Option<String>| match param.as_ref().and_then(|p| params.get(p)) {
        Some(Value::Array(items)) => items.len(),
        Some(Value::String(s)) => rule.split.as_deref().map_or(1, |sep| s.split(sep).count()),
        _ => 0,
    };
    rule.args.len() + list(&rule.each) + list(&rule.options)
}

fn has_brace(value: &Value) -> bool {
    match value {
        Value::String(s) => s.contains(['{', '}']),
        Value::Array(items) => items.iter().any(has_brace),
        Value::Object(map) => map
            .iter()
            .any(|(k, v)| k.contains(['{', '}']) || has_brace(v)),
        _ => false,
    }
}
