//! Argument templates: how an action's `argv` is written in config, checked
//! once against the action's input schema, and rendered from each call's
//! validated parameters.
//!
//! There is no shell anywhere: each rendered element is one argv entry,
//! handed to the program exactly as it is.
//!
//! # Grammar
//!
//! An `argv` is a list. Each element is one of:
//!
//! - **a string** with `{param}` placeholders: `"service"`, `"{name}"`,
//!   `"--path={path}"`, `"@imqueue/cli@{version}"`; `{{` and `}}` are literal
//!   braces. A placeholder names a string, integer, number or boolean
//!   parameter (booleans render as `true` / `false`). When a parameter it
//!   names is absent — missing, `null` or `""` — the whole element is left
//!   out: that is how optional positionals and `--opt={value}` work.
//! - **`{ if = "param", args = [...] }`**: the `args` (strings as above)
//!   when the parameter is set — present and not `false`, `null`, `""` or
//!   `[]`; **`{ unless = "param", args = [...] }`** when it is not.
//! - **`{ each = "param" }`**: one element per item of an array parameter;
//!   **`{ each = "param", split = "," }`**: one per piece of a string
//!   parameter cut at the separator (pieces trimmed, empty ones skipped).
//! - **`{ options = "param", allow = ["--vcs", "-D"] }`**: options supplied
//!   by the agent in an array parameter. An item starting with `-` must be an
//!   allowed name, alone or as `--name=value`; any other item is a value and
//!   must directly follow an option written without `=`. `--` is never
//!   accepted, so an agent cannot turn later arguments (such as a dry-run
//!   flag) into positionals. Whether an allowed option takes a value is not
//!   known here: keep the list to options that are safe with any value.
//!   A dry-run or apply flag goes before the agent's options, so a last
//!   option that takes a value cannot take the flag for its value.
//!
//! # Values that look like options
//!
//! A value starting with `-` is refused wherever the program could parse it
//! as an option: a placeholder at the very start of an element, and every
//! `each` item. Elements after a literal `"--"` element — the end of options
//! for most CLIs — are exempt, so an action that must accept such values
//! declares `--` before them. That `--` does not count when the agent's
//! options just before it end with an option and no value: the option could
//! take `--` as its value. Values never contain NUL.

use std::collections::BTreeSet;

use serde_json::Value;
use switchboard_toolset::{JsonObject, ToolError};

use crate::{
    config::{ArgRule, ArgTemplate, ConfigError},
    schema::{InputSchema, is_identifier},
};

/// At most this many elements after rendering.
const MAX_ARGS: usize = 256;
/// At most this many bytes in all rendered elements together.
const MAX_ARGV_BYTES: usize = 128 * 1024;

/// A string with `{param}` placeholders.
#[derive(Debug)]
pub(crate) struct Text(Vec<Segment>);

#[derive(Debug)]
enum Segment {
    Literal(String),
    Param(String),
}

/// A rendered [`Text`]: its text, and the parameter it starts with, if any.
struct Piece<'a> {
    text: String,
    leading_param: Option<&'a str>,
}

impl Text {
    /// Parses `raw`; the error says what is wrong, without the key.
    pub(crate) fn parse(raw: &str) -> Result<Self, String> {
        let mut segments = Vec::new();
        let mut literal = String::new();
        let mut chars = raw.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '{' if chars.peek() == Some(&'{') => {
                    chars.next();
                    literal.push('{');
                }
                '}' if chars.peek() == Some(&'}') => {
                    chars.next();
                    literal.push('}');
                }
                '{' => {
                    let mut name = String::new();
                    loop {
                        match chars.next() {
                            Some('}') => break,
                            Some(c) => name.push(c),
                            None => {
                                return Err(format!(
                                    "unclosed {{ in {raw:?}; write {{{{ for a literal brace"
                                ));
                            }
                        }
                    }
                    if !is_identifier(&name) {
                        return Err(format!(
                            "{{{name}}} is not a placeholder: a name is letters, digits and `_` (write {{{{ for a literal brace)"
                        ));
                    }
                    if !literal.is_empty() {
                        segments.push(Segment::Literal(std::mem::take(&mut literal)));
                    }
                    segments.push(Segment::Param(name));
                }
                '}' => {
                    return Err(format!(
                        "unmatched }} in {raw:?}; write }}}} for a literal brace"
                    ));
                }
                c => literal.push(c),
            }
        }
        if !literal.is_empty() {
            segments.push(Segment::Literal(literal));
        }
        Ok(Self(segments))
    }

    /// The parameters it names.
    pub(crate) fn params(&self) -> impl Iterator<Item = &str> {
        self.0.iter().filter_map(|s| match s {
            Segment::Param(p) => Some(p.as_str()),
            Segment::Literal(_) => None,
        })
    }

    /// Whether it is exactly the literal `text`.
    fn is_literal(&self, text: &str) -> bool {
        matches!(self.0.as_slice(), [Segment::Literal(l)] if l == text)
    }

    /// Renders it; `None` when a parameter it names is absent.
    pub(crate) fn render_plain(&self, params: &JsonObject) -> Result<Option<String>, ToolError> {
        Ok(self.render(params)?.map(|p| p.text))
    }

    fn render(&self, params: &JsonObject) -> Result<Option<Piece<'_>>, ToolError> {
        let mut text = String::new();
        let mut leading_param = None;
        for (i, segment) in self.0.iter().enumerate() {
            match segment {
                Segment::Literal(l) => text.push_str(l),
                Segment::Param(name) => {
                    let Some(value) = scalar_text(name, params.get(name))? else {
                        return Ok(None);
                    };
                    if i == 0 {
                        leading_param = Some(name.as_str());
                    }
                    text.push_str(&value);
                }
            }
        }
        Ok(Some(Piece {
            text,
            leading_param,
        }))
    }
}

/// One element of a compiled `argv`.
#[derive(Debug)]
enum Arg {
    Text(Text),
    Cond {
        param: String,
        when_set: bool,
        args: Vec<Text>,
    },
    Each {
        param: String,
        split: Option<String>,
    },
    Options {
        param: String,
        allow: BTreeSet<String>,
    },
}

/// A compiled `argv` template.
#[derive(Debug)]
pub(crate) struct Argv(Vec<Arg>);

/// A rendered argv, where the agent's options begin and where its literal
/// `--` is (extra arguments such as `--dry-run` go before both).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Rendered {
    pub(crate) args: Vec<String>,
    pub(crate) agent_options: Option<usize>,
    pub(crate) end_of_options: Option<usize>,
}

impl Rendered {
    /// Inserts `extra` before the agent's options (an agent's `--out` at
    /// their end would otherwise take `--dry-run` as its value), else before
    /// the literal `--`, else at the end.
    pub(crate) fn insert_options(&mut self, extra: &[String]) {
        let at = self
            .agent_options
            .or(self.end_of_options)
            .unwrap_or(self.args.len());
        self.args.splice(at..at, extra.iter().cloned());
        if let Some(eoo) = &mut self.end_of_options {
            *eoo += extra.len();
        }
    }
}

impl Argv {
    /// Checks `templates` (config key `key`) against `schema` and compiles them.
    pub(crate) fn compile(
        key: &str,
        templates: &[ArgTemplate],
        schema: &InputSchema,
    ) -> Result<Self, ConfigError> {
        let mut args = Vec::with_capacity(templates.len());
        let mut after_end_of_options = false;
        for (i, template) in templates.iter().enumerate() {
            let at = format!("{key}[{i}]");
            let arg = match template {
                ArgTemplate::Text(raw) => {
                    let text = compile_text(&at, raw, schema)?;
                    after_end_of_options |= text.is_literal("--");
                    Arg::Text(text)
                }
                ArgTemplate::Rule(rule) => compile_rule(&at, rule, schema, after_end_of_options)?,
            };
            args.push(arg);
        }
        Ok(Self(args))
    }

    /// Renders the template from validated parameters.
    pub(crate) fn render(&self, params: &JsonObject) -> Result<Rendered, ToolError> {
        let mut out: Vec<String> = Vec::new();
        let mut agent_options = None;
        let mut end_of_options = None;
        // The agent's options end with an option that may take the next
        // element as its value: a `--` there may be that value, not the
        // end of options, so what follows it is not exempt.
        let mut dangling = false;
        for arg in &self.0 {
            let exempt = end_of_options.is_some();
            let rendered = out.len();
            match arg {
                Arg::Text(text) if text.is_literal("--") && !exempt && !dangling => {
                    end_of_options = Some(out.len());
                    out.push("--".into());
                }
                Arg::Text(text) => push_text(&mut out, text, params, exempt)?,
                Arg::Cond {
                    param,
                    when_set,
                    args,
                } => {
                    if is_set(params.get(param)) == *when_set {
                        for text in args {
                            push_text(&mut out, text, params, exempt)?;
                        }
                    }
                }
                Arg::Each { param, split } => {
                    for item in each_items(param, split.as_deref(), params.get(param))? {
                        if !exempt {
                            refuse_option_like(param, &item)?;
                        }
                        out.push(item);
                    }
                }
                Arg::Options { param, allow } => {
                    agent_options.get_or_insert(out.len());
                    let options = checked_options(param, allow, params.get(param))?;
                    dangling = options.dangling;
                    out.extend(options.args);
                    continue;
                }
            }
            dangling &= out.len() == rendered;
        }
        let bytes: usize = out.iter().map(String::len).sum();
        if out.len() > MAX_ARGS || bytes > MAX_ARGV_BYTES {
            return Err(ToolError::new(format!(
                "the command would have {} arguments of {bytes} bytes; the limit is {MAX_ARGS} arguments and {MAX_ARGV_BYTES} bytes — pass fewer or shorter values",
                out.len()
            )));
        }
        Ok(Rendered {
            args: out,
            agent_options,
            end_of_options,
        })
    }
}

/// A config value that would reach argv: NUL cannot be passed to a program.
pub(crate) fn refuse_nul_in_config(key: &str, raw: &str) -> Result<(), ConfigError> {
    if raw.contains('\0') {
        return Err(ConfigError::new(
            key,
            format!("{raw:?} contains a NUL character, which cannot be passed to a program"),
        ));
    }
    Ok(())
}

pub(crate) fn compile_text(
    key: &str,
    raw: &str,
    schema: &InputSchema,
) -> Result<Text, ConfigError> {
    refuse_nul_in_config(key, raw)?;
    let text = Text::parse(raw).map_err(|e| ConfigError::new(key, e))?;
    for param in text.params() {
        check_scalar_param(key, param, schema)?;
    }
    Ok(text)
}

/// Compiles one table element of an argv: exactly one of `if`/`unless`
/// (elements included when a parameter is set or not), `each` (one element
/// per item) or `options` (agent-chosen options from an allow-list).
fn compile_rule(
    key: &str,
    rule: &ArgRule,
    schema: &InputSchema,
    after_end_of_options: bool,
) -> Result<Arg, ConfigError> {
    check_rule_fields(key, rule)?;
    if let Some(param) = &rule.when {
        return compile_cond(key, "if", param, true, &rule.args, schema);
    }
    if let Some(param) = &rule.unless {
        return compile_cond(key, "unless", param, false, &rule.args, schema);
    }
    if let Some(param) = &rule.each {
        return compile_each(key, param, rule.split.as_deref(), schema);
    }
    let Some(param) = &rule.options else {
        return Err(ConfigError::new(key, "a table element needs a rule"));
    };
    compile_options(key, param, &rule.allow, schema, after_end_of_options)
}

/// A rule names one kind, and each field goes only with its kind.
fn check_rule_fields(key: &str, rule: &ArgRule) -> Result<(), ConfigError> {
    let kinds = [
        rule.when.is_some(),
        rule.unless.is_some(),
        rule.each.is_some(),
        rule.options.is_some(),
    ];
    if kinds.iter().filter(|k| **k).count() != 1 {
        return Err(ConfigError::new(
            key,
            "a table element takes exactly one of `if`, `unless`, `each` or `options`",
        ));
    }
    let misplaced = |field: &str, goes_with: &str| {
        ConfigError::new(
            format!("{key}.{field}"),
            format!("`{field}` only goes with {goes_with}"),
        )
    };
    if !rule.args.is_empty() && rule.when.is_none() && rule.unless.is_none() {
        return Err(misplaced("args", "`if` or `unless`"));
    }
    if rule.split.is_some() && rule.each.is_none() {
        return Err(misplaced("split", "`each`"));
    }
    if !rule.allow.is_empty() && rule.options.is_none() {
        return Err(misplaced("allow", "`options`"));
    }
    Ok(())
}

/// `if = "param"` / `unless = "param"` with the elements they include.
fn compile_cond(
    key: &str,
    field: &str,
    param: &str,
    when_set: bool,
    raw_args: &[String],
    schema: &InputSchema,
) -> Result<Arg, ConfigError> {
    declared(&format!("{key}.{field}"), param, schema)?;
    if raw_args.is_empty() {
        return Err(ConfigError::new(
            format!("{key}.args"),
            "list the elements to include, e.g. args = [\"--update\"]",
        ));
    }
    let args = raw_args
        .iter()
        .enumerate()
        .map(|(j, raw)| compile_text(&format!("{key}.args[{j}]"), raw, schema))
        .collect::<Result<_, _>>()?;
    Ok(Arg::Cond {
        param: param.to_owned(),
        when_set,
        args,
    })
}

/// `each = "param"`: an array's items, or a string cut at `split`.
fn compile_each(
    key: &str,
    param: &str,
    split: Option<&str>,
    schema: &InputSchema,
) -> Result<Arg, ConfigError> {
    let at = format!("{key}.each");
    let property = declared(&at, param, schema)?;
    match (type_of(property), split) {
        (Some("array"), None) => Ok(Arg::Each {
            param: param.to_owned(),
            split: None,
        }),
        (Some("string"), Some(sep)) if !sep.is_empty() => Ok(Arg::Each {
            param: param.to_owned(),
            split: Some(sep.to_owned()),
        }),
        (Some("string"), _) => Err(ConfigError::new(
            format!("{key}.split"),
            format!("{{{param}}} is a string: give the separator to cut it at, e.g. split = \",\""),
        )),
        (Some("array"), Some(_)) => Err(ConfigError::new(
            format!("{key}.split"),
            format!("{{{param}}} is an array already; remove split"),
        )),
        _ => Err(ConfigError::new(
            at,
            format!("{{{param}}} must be declared with type \"array\" or \"string\""),
        )),
    }
}

/// `options = "param"`: option names an agent may pass, from `allow`, and
/// only before a literal `--`.
fn compile_options(
    key: &str,
    param: &str,
    allow: &[String],
    schema: &InputSchema,
    after_end_of_options: bool,
) -> Result<Arg, ConfigError> {
    let at = format!("{key}.options");
    let property = declared(&at, param, schema)?;
    if type_of(property) != Some("array") {
        return Err(ConfigError::new(
            at,
            format!("{{{param}}} must be declared with type \"array\" (of strings)"),
        ));
    }
    if after_end_of_options {
        return Err(ConfigError::new(
            at,
            "options after a literal `--` would be read as positionals; move this before `--`",
        ));
    }
    if allow.is_empty() {
        return Err(ConfigError::new(
            format!("{key}.allow"),
            "list the option names agents may pass, e.g. allow = [\"--vcs\", \"-D\"]",
        ));
    }
    for (j, name) in allow.iter().enumerate() {
        let ok = name.starts_with('-') && name != "--" && !name.contains('=') && name.len() > 1;
        if !ok {
            return Err(ConfigError::new(
                format!("{key}.allow[{j}]"),
                format!(
                    "{name:?} is not an option name: write it as `-x` or `--name`, without `=`"
                ),
            ));
        }
    }
    Ok(Arg::Options {
        param: param.to_owned(),
        allow: allow.iter().cloned().collect(),
    })
}

/// The schema of `param`, or an error naming the unknown placeholder.
fn declared<'s>(key: &str, param: &str, schema: &'s InputSchema) -> Result<&'s Value, ConfigError> {
    schema.property(param).ok_or_else(|| {
        let known = schema.names().collect::<Vec<_>>();
        ConfigError::new(
            key,
            if known.is_empty() {
                format!("unknown placeholder {{{param}}}: the input schema declares no parameters")
            } else {
                format!(
                    "unknown placeholder {{{param}}}; the input schema declares: {}",
                    known.join(", ")
                )
            },
        )
    })
}

fn check_scalar_param(key: &str, param: &str, schema: &InputSchema) -> Result<(), ConfigError> {
    let property = declared(key, param, schema)?;
    let scalar_enum = property
        .get("enum")
        .and_then(Value::as_array)
        .is_some_and(|values| {
            values
                .iter()
                .all(|v| v.is_string() || v.is_number() || v.is_boolean())
        });
    match type_of(property) {
        Some("string" | "integer" | "number" | "boolean") => Ok(()),
        None if scalar_enum => Ok(()),
        Some("array") => Err(ConfigError::new(
            key,
            format!(
                "{{{param}}} is an array: splice it with {{ each = \"{param}\" }} or {{ options = \"{param}\", allow = [...] }}"
            ),
        )),
        _ => Err(ConfigError::new(
            key,
            format!(
                "{{{param}}} must be declared with type string, integer, number or boolean to be placed in an argument"
            ),
        )),
    }
}

fn type_of(property: &Value) -> Option<&str> {
    property.get("type").and_then(Value::as_str)
}

fn push_text(
    out: &mut Vec<String>,
    text: &Text,
    params: &JsonObject,
    exempt: bool,
) -> Result<(), ToolError> {
    if let Some(piece) = text.render(params)? {
        if let Some(param) = piece.leading_param
            && !exempt
        {
            refuse_option_like(param, &piece.text)?;
        }
        out.push(piece.text);
    }
    Ok(())
}

/// Whether a parameter counts as set for `if` / `unless`.
fn is_set(value: Option<&Value>) -> bool {
    match value {
        None | Some(Value::Null | Value::Bool(false)) => false,
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Array(a)) => !a.is_empty(),
        Some(_) => true,
    }
}

/// A scalar parameter as argument text; `None` when absent.
fn scalar_text(name: &str, value: Option<&Value>) -> Result<Option<String>, ToolError> {
    let text = match value {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(s)) if s.is_empty() => return Ok(None),
        Some(Value::String(s)) => s.clone(),
        // `3.0` is the integer 3 to JSON Schema, and to the program.
        Some(Value::Number(n)) => match n.as_f64() {
            Some(f) if n.is_f64() && f.fract() == 0.0 && f.abs() < 9e15 => (f as i64).to_string(),
            _ => n.to_string(),
        },
        Some(Value::Bool(b)) => b.to_string(),
        Some(Value::Array(_) | Value::Object(_)) => {
            return Err(ToolError::new(format!(
                "{name} must be a single value, not a list or a table"
            )));
        }
    };
    refuse_nul(name, &text)?;
    Ok(Some(text))
}

fn each_items(
    param: &str,
    split: Option<&str>,
    value: Option<&Value>,
) -> Result<Vec<String>, ToolError> {
    match (value, split) {
        (None | Some(Value::Null), _) => Ok(Vec::new()),
        (Some(Value::String(s)), Some(sep)) => {
            refuse_nul(param, s)?;
            Ok(s.split(sep)
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .map(str::to_owned)
                .collect())
        }
        (Some(Value::Array(items)), None) => {
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                if let Some(text) = scalar_text(&format!("{param}[{i}]"), Some(item))? {
                    out.push(text);
                }
            }
            Ok(out)
        }
        _ => Err(ToolError::new(format!(
            "{param} has the wrong type for this command"
        ))),
    }
}

/// The agent's options, checked against the allow-list.
struct AgentOptions {
    args: Vec<String>,
    /// The last is an option written without `=` and no value after it.
    dangling: bool,
}

fn checked_options(
    param: &str,
    allow: &BTreeSet<String>,
    value: Option<&Value>,
) -> Result<AgentOptions, ToolError> {
    let items = match value {
        None | Some(Value::Null) => {
            return Ok(AgentOptions {
                args: Vec::new(),
                dangling: false,
            });
        }
        Some(Value::Array(items)) => items,
        Some(_) => return Err(ToolError::new(format!("{param} must be a list of strings"))),
    };
    let allowed = || {
        allow
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut out = Vec::with_capacity(items.len());
    let mut expects_value = false;
    for (i, item) in items.iter().enumerate() {
        let at = format!("{param}[{i}]");
        let Some(text) = item.as_str() else {
            return Err(ToolError::new(format!("{at} must be a string")));
        };
        refuse_nul(&at, text)?;
        let shown = shorten(text);
        if text.starts_with('-') {
            let name = text.split_once('=').map_or(text, |(name, _)| name);
            if text == "--" || !allow.contains(name) {
                return Err(ToolError::new(format!(
                    "{at}: `{shown}` is not an option this tool accepts; allowed: {}",
                    allowed()
                )));
            }
            expects_value = !text.contains('=');
        } else if expects_value {
            expects_value = false;
        } else {
            return Err(ToolError::new(format!(
                "{at}: `{shown}` is not an option and does not follow one; write an option (one of {}) and then its value",
                allowed()
            )));
        }
        out.push(text.to_owned());
    }
    Ok(AgentOptions {
        args: out,
        dangling: expects_value,
    })
}

fn refuse_option_like(param: &str, text: &str) -> Result<(), ToolError> {
    if text.starts_with('-') {
        return Err(ToolError::new(format!(
            "{param}: `{}` starts with `-`, so the program could read it as an option; pass a value that does not start with `-` (for a path, write ./{0})",
            shorten(text)
        )));
    }
    Ok(())
}

fn refuse_nul(param: &str, text: &str) -> Result<(), ToolError> {
    if text.contains('\0') {
        return Err(ToolError::new(format!(
            "{param} contains a NUL character, which cannot be passed to a program"
        )));
    }
    Ok(())
}

fn shorten(text: &str) -> String {
    let mut shown = text.to_owned();
    switchboard_schema::truncate(&mut shown, 60);
    shown
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn schema() -> InputSchema {
        let schema = json!({
            "properties": {
                "name": {"type": "string"},
                "path": {"type": "string"},
                "count": {"type": "integer"},
                "verbose": {"type": "boolean"},
                "prefix": {"type": "boolean"},
                "services": {"type": "string"},
                "words": {"type": "array", "items": {"type": "string"}},
                "flags": {"type": "array", "items": {"type": "string"}},
                "mode": {"enum": ["a", "b"]},
                "meta": {"type": "object"}
            }
        });
        InputSchema::compile("s", schema.as_object().unwrap(), &[], &[]).unwrap()
    }

    fn argv(toml_argv: &str) -> Result<Argv, ConfigError> {
        #[derive(serde::Deserialize)]
        struct Holder {
            argv: Vec<ArgTemplate>,
        }
        let holder: Holder = toml::from_str(&format!("argv = {toml_argv}")).unwrap();
        Argv::compile("a.argv", &holder.argv, &schema())
    }

    fn render(toml_argv: &str, params: Value) -> Result<Vec<String>, ToolError> {
        argv(toml_argv)
            .unwrap()
            .render(params.as_object().unwrap())
            .map(|r| r.args)
    }

    #[test]
    fn placeholders_fill_and_absent_ones_drop_their_element() {
        let t = r#"["service", "create", "{name}", "{path}", "--count={count}", "x{{y}}"]"#;
        assert_eq!(
            render(t, json!({"name": "user", "count": 3})).unwrap(),
            ["service", "create", "user", "--count=3", "x{y}"]
        );
        assert_eq!(
            render(t, json!({"name": "user", "path": "", "count": null})).unwrap(),
            ["service", "create", "user", "x{y}"]
        );
    }

    #[test]
    fn conditions_each_and_options() {
        let t = r#"["log", { each = "services", split = "," }, { if = "verbose", args = ["-v"] },
                   { unless = "prefix", args = ["--no-prefix"] }, { each = "words" },
                   { options = "flags", allow = ["--vcs", "-D"] }]"#;
        assert_eq!(
            render(
                t,
                json!({"services": "a, b,,c", "verbose": true, "prefix": true,
                       "words": ["x", 2], "flags": ["--vcs", "github", "-D", "--vcs=gitlab"]})
            )
            .unwrap(),
            [
                "log",
                "a",
                "b",
                "c",
                "-v",
                "x",
                "2",
                "--vcs",
                "github",
                "-D",
                "--vcs=gitlab"
            ]
        );
        assert_eq!(
            render(t, json!({"verbose": false, "prefix": false})).unwrap(),
            ["log", "--no-prefix"]
        );
    }

    #[test]
    fn option_like_values_are_refused_before_end_of_options() {
        for bad in ["--help", "-rf", "-"] {
            let err = render(r#"["create", "{name}"]"#, json!({"name": bad})).unwrap_err();
            assert!(
                err.message()
                    .starts_with(&format!("name: `{bad}` starts with `-`")),
                "{err}"
            );
        }
        let err = render(
            r#"[{ each = "services", split = " " }, "--help"]"#,
            json!({"services": "service --rm"}),
        )
        .unwrap_err();
        assert!(err.message().starts_with("services: `--rm`"), "{err}");
        // Not at the start of the element: cannot be an option.
        assert_eq!(
            render(r#"["--path={path}"]"#, json!({"path": "-x"})).unwrap(),
            ["--path=-x"]
        );
        // After `--`: allowed, and extra options go before it.
        let mut rendered = argv(r#"["rm", "--", "{name}"]"#)
            .unwrap()
            .render(json!({"name": "-rf"}).as_object().unwrap())
            .unwrap();
        assert_eq!(rendered.args, ["rm", "--", "-rf"]);
        rendered.insert_options(&["--dry-run".into()]);
        assert_eq!(rendered.args, ["rm", "--dry-run", "--", "-rf"]);
        assert_eq!(rendered.end_of_options, Some(2));
    }

    #[test]
    fn a_whole_number_sent_as_a_float_is_an_integer_argument() {
        assert_eq!(
            render(r#"["{count}"]"#, json!({"count": 3.0})).unwrap(),
            ["3"]
        );
        assert_eq!(
            render(r#"["{count}"]"#, json!({"count": 2.5})).unwrap(),
            ["2.5"]
        );
        assert_eq!(
            render(r#"["{count}"]"#, json!({"count": 7})).unwrap(),
            ["7"]
        );
    }

    #[test]
    fn a_dry_run_flag_goes_before_the_agents_options() {
        // `--out` may take a value: after it, `--dry-run` would be that
        // value and the command would run for real.
        let t = r#"["make", "{name}", { options = "flags", allow = ["--out"] }, "--", "{path}"]"#;
        let mut rendered = argv(t)
            .unwrap()
            .render(
                json!({"name": "b.txt", "flags": ["--out"], "path": "p"})
                    .as_object()
                    .unwrap(),
            )
            .unwrap();
        rendered.insert_options(&["--dry-run".into()]);
        assert_eq!(
            rendered.args,
            ["make", "b.txt", "--dry-run", "--out", "--", "p"]
        );
    }

    #[test]
    fn a_last_option_without_its_value_cannot_turn_the_end_of_options_into_its_value() {
        // `--vcs -- -D`: a program whose `--vcs` takes a value reads `--`
        // as that value and `-D` as an option.
        let t = r#"["run", { options = "flags", allow = ["--vcs", "-D"] }, "--", "{path}"]"#;
        for flags in [json!(["--vcs"]), json!(["-D"]), json!(["--vcs", "x", "-D"])] {
            let err = render(t, json!({"flags": flags, "path": "-D"})).unwrap_err();
            assert!(
                err.message().starts_with("path: `-D` starts with `-`"),
                "{flags}: {err}"
            );
            // A value that cannot be an option is still passed.
            assert_eq!(
                render(t, json!({"flags": flags, "path": "file"}))
                    .unwrap()
                    .last()
                    .unwrap(),
                "file"
            );
        }
        // Options that end with a value, or none at all: `--` ends them.
        for flags in [json!(["--vcs=x"]), json!(["--vcs", "x"]), json!([])] {
            let rendered = render(t, json!({"flags": flags, "path": "-D"})).unwrap();
            assert_eq!(rendered[rendered.len() - 2..], ["--", "-D"], "{flags}");
        }
    }

    #[test]
    fn agent_options_are_held_to_the_allow_list() {
        let t = r#"["create", { options = "flags", allow = ["--vcs", "-D"] }, "--dry-run"]"#;
        for (flags, needle) in [
            (json!(["--"]), "`--` is not an option"),
            (json!(["--no-dry-run"]), "`--no-dry-run` is not an option"),
            (
                json!(["--dry-run=false"]),
                "`--dry-run=false` is not an option",
            ),
            (json!(["stray"]), "does not follow one"),
            (json!(["--vcs=x", "y"]), "does not follow one"),
            (json!(["--vcs", "a", "b"]), "does not follow one"),
            (json!([1]), "must be a string"),
        ] {
            let err = render(t, json!({ "flags": flags })).unwrap_err();
            assert!(err.message().contains(needle), "{flags}: {err}");
        }
    }

    #[test]
    fn nul_and_oversized_argv_are_refused() {
        let err = render(r#"["{name}"]"#, json!({"name": "a\u{0}b"})).unwrap_err();
        assert!(err.message().contains("NUL"), "{err}");
        let long = "x".repeat(200 * 1024);
        let err = render(r#"["{name}"]"#, json!({ "name": long })).unwrap_err();
        assert!(err.message().contains("the limit is"), "{err}");
    }

    #[test]
    fn config_mistakes_name_the_element() {
        let err = |t: &str| argv(t).err().unwrap();
        let e = err(r#"["a", "b", "c", "{nme}"]"#);
        assert_eq!(e.key(), "a.argv[3]");
        assert!(e.message().starts_with("unknown placeholder {nme};"), "{e}");
        assert_eq!(err(r#"["{name"]"#).key(), "a.argv[0]");
        assert_eq!(err(r#"["name}"]"#).key(), "a.argv[0]");
        assert_eq!(err(r#"["{na me}"]"#).key(), "a.argv[0]");
        assert!(err(r#"["{words}"]"#).message().contains("splice it"));
        assert!(
            err(r#"["{meta}"]"#)
                .message()
                .contains("must be declared with type")
        );
        assert_eq!(err(r#"[{ if = "verbose" }]"#).key(), "a.argv[0].args");
        assert_eq!(
            err(r#"[{ if = "x", args = ["-v"] }]"#).key(),
            "a.argv[0].if"
        );
        assert_eq!(
            err(r#"[{ if = "verbose", each = "words" }]"#).key(),
            "a.argv[0]"
        );
        assert_eq!(err(r#"[{ each = "services" }]"#).key(), "a.argv[0].split");
        assert_eq!(
            err(r#"[{ each = "words", split = "," }]"#).key(),
            "a.argv[0].split"
        );
        assert_eq!(err(r#"[{ each = "count" }]"#).key(), "a.argv[0].each");
        assert_eq!(err(r#"[{ options = "flags" }]"#).key(), "a.argv[0].allow");
        assert_eq!(
            err(r#"[{ options = "flags", allow = ["--"] }]"#).key(),
            "a.argv[0].allow[0]"
        );
        assert_eq!(
            err(r#"["--", { options = "flags", allow = ["-x"] }]"#).key(),
            "a.argv[1].options"
        );
        assert_eq!(
            err(r#"[{ each = "words", allow = ["-x"] }]"#).key(),
            "a.argv[0].allow"
        );
        assert!(argv(r#"["{mode}"]"#).is_ok());
    }
}
