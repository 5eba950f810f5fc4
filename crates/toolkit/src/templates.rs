//! The templates toolset: one scaffolding tool per `[[templates]]` entry,
//! rendered with minijinja from a file under the profile directory or from
//! inline source.
//!
//! A call's arguments are validated against the template's declared input
//! schema before anything is rendered. Every declared parameter is defined
//! in the template — its value, its schema `default`, or `none` (which
//! prints as nothing) — so the engine runs with strict undefined handling:
//! a misspelt variable is an error naming the template and line, not
//! silently empty output. Optional keys inside objects are read with the
//! `default` filter (`m.params | default([])`). The result is text (the
//! code plus the command that does the real thing) and mirrors it in
//! `structuredContent` as `{text, command}`.
//!
//! Rendering settings, the same for every template:
//! - `trim_blocks` and `lstrip_blocks` are on, so block tags on their own
//!   lines leave no blank lines behind;
//! - nothing is auto-escaped (the output is code, not HTML);
//! - `{% include %}` / `{% import %}` load further files from the profile
//!   directory;
//! - each render has a fuel budget, so no input can make it run away;
//! - one filter is added: `pascal_case` (`"user auth"` → `"UserAuth"`).

use std::{
    path::{Component, Path},
    sync::Arc,
};

use minijinja::{AutoEscape, Environment, ErrorKind, UndefinedBehavior, syntax::SyntaxConfig};
use serde_json::{Value, json};
use switchboard_toolset::{
    Caller, JsonObject, Session, ToolError, ToolFuture, ToolId, ToolOutput, ToolSpec, ToolTable,
    Toolset,
};

use crate::{
    config::{ConfigError, NameSet, TemplateConfig, check_not_blank},
    declared_reader,
    schema::InputSchema,
};

/// Instructions one render may execute (about 64 bytes of memory each).
const FUEL: u64 = 500_000;

/// The template tools of one config.
pub struct TemplateTools {
    env: Environment<'static>,
    /// Each tool with its position in `templates`.
    tools: ToolTable<usize>,
    templates: Vec<TemplateTool>,
}

struct TemplateTool {
    schema: InputSchema,
    /// The template's name in the environment.
    template: String,
    /// How errors name it: the file, or `inline source`.
    label: String,
    /// The environment name of the `command` template, if any.
    command: Option<String>,
}

/// Makes `{{ x }}` of an absent optional argument (`none`) print nothing,
/// rather than minijinja's `none`, in tool and prompt templates alike.
pub(crate) fn print_none_as_nothing(env: &mut Environment<'_>) {
    env.set_formatter(|out, state, value| {
        if value.is_none() {
            Ok(())
        } else {
            minijinja::escape_formatter(out, state, value)
        }
    });
}

/// Refuses a template (config key `key`) that uses a variable that is none
/// of `known` (its parameters) nor a global of `env` (`range`, …).
fn check_variables(
    env: &Environment<'_>,
    key: &str,
    template: &str,
    known: &[&str],
) -> Result<(), ConfigError> {
    let compiled = env
        .get_template(template)
        .map_err(|e| ConfigError::new(key, e.to_string()))?;
    let mut unknown: Vec<String> = compiled
        .undeclared_variables(false)
        .into_iter()
        .filter(|name| !known.contains(&name.as_str()))
        .filter(|name| !env.globals().any(|(global, _)| global == name))
        .collect();
    if unknown.is_empty() {
        return Ok(());
    }
    unknown.sort();
    Err(ConfigError::new(
        key,
        format!(
            "uses {}, which {} not a parameter of the tool (its parameters: {})",
            unknown.join(", "),
            if unknown.len() == 1 { "is" } else { "are" },
            if known.is_empty() {
                "none".to_owned()
            } else {
                known.join(", ")
            }
        ),
    ))
}

/// Arguments for a trial render: each parameter's default, else its first
/// allowed value, else an example of its type.
fn sample_arguments(schema: &InputSchema) -> JsonObject {
    schema
        .names()
        .map(|name| {
            let property = schema.property(name);
            let field = |key: &str| property.and_then(|p| p.get(key));
            let example = field("default")
                .or_else(|| field("enum").and_then(|e| e.get(0)))
                .cloned()
                .unwrap_or_else(|| match field("type").and_then(Value::as_str) {
                    Some("integer") => json!(1),
                    Some("number") => json!(1.5),
                    Some("boolean") => json!(true),
                    Some("array") => json!([]),
                    Some("object") => json!({}),
                    _ => json!("example"),
                });
            (name.to_owned(), example)
        })
        .collect()
}

/// Refuses a template (config key `key`) that names a filter, test,
/// function or included template that does not exist: a trial render with
/// `sample` arguments finds those on the paths it takes, at start-up rather
/// than at an agent's call. Errors that depend on the values are left to
/// the calls.
fn check_names(
    env: &Environment<'_>,
    key: &str,
    template: &str,
    label: &str,
    sample: &JsonObject,
) -> Result<(), ConfigError> {
    let rendered = env
        .get_template(template)
        .and_then(|t| t.render(minijinja::value::Serde(sample)));
    let Err(e) = rendered else {
        return Ok(());
    };
    let e = innermost(&e);
    match e.kind() {
        ErrorKind::UnknownFilter
        | ErrorKind::UnknownTest
        | ErrorKind::UnknownFunction
        | ErrorKind::TemplateNotFound
        | ErrorKind::BadInclude
        | ErrorKind::SyntaxError => Err(ConfigError::new(key, describe(label, e))),
        _ => Ok(()),
    }
}

/// The template environment: files from `profile_dir`, strict about
/// undefined names, bounded by fuel, no escaping (the output is code).
fn environment(profile_dir: &Path) -> Result<Environment<'static>, ConfigError> {
    let mut env = Environment::new();
    env.set_loader(loader(profile_dir));
    env.set_auto_reload(false);
    env.set_auto_escape_callback(|_| AutoEscape::None);
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    print_none_as_nothing(&mut env);
    env.set_fuel(Some(FUEL));
    let syntax = SyntaxConfig::builder()
        .trim_blocks(true)
        .lstrip_blocks(true)
        .build()
        .map_err(|e| ConfigError::new("templates", e.to_string()))?;
    env.set_syntax(syntax);
    env.add_filter("pascal_case", pascal_case);
    env.add_function("refuse", refuse);
    Ok(env)
}

/// Loads and checks one `[[templates]]` entry (`key`) in `env`: its schema,
/// its template and command, and that they name only declared parameters.
fn compile_template(
    env: &mut Environment<'static>,
    config: &TemplateConfig,
    key: &str,
    profile_dir: &Path,
) -> Result<TemplateTool, ConfigError> {
    check_not_blank(&format!("{key}.description"), &config.description)?;
    let reserved: &[&str] = if config.command.is_some() {
        &["command"]
    } else {
        &[]
    };
    let schema = InputSchema::compile(
        &format!("{key}.input_schema"),
        &config.input_schema,
        reserved,
        &[],
    )?;
    let (template, label) = match (&config.file, &config.source) {
        (Some(file), None) => {
            let name = template_path(&format!("{key}.file"), file)?;
            env.get_template(&name)
                .map_err(|e| load_error(&format!("{key}.file"), &name, profile_dir, &e))?;
            (name.clone(), name)
        }
        (None, Some(source)) => {
            let name = format!("{}:source", config.tool);
            env.add_template_owned(name.clone(), source.clone())
                .map_err(|e| {
                    load_error(&format!("{key}.source"), "inline source", profile_dir, &e)
                })?;
            (name, "inline source".to_owned())
        }
        _ => {
            return Err(ConfigError::new(
                key,
                "give the template as `file` (relative to the profile directory) or as `source`, exactly one of them",
            ));
        }
    };
    let command = match &config.command {
        Some(source) => {
            let name = format!("{}:command", config.tool);
            env.add_template_owned(name.clone(), source.clone())
                .map_err(|e| load_error(&format!("{key}.command"), "command", profile_dir, &e))?;
            Some(name)
        }
        None => None,
    };
    // A misspelt parameter would fail only when an agent calls the tool.
    let mut known: Vec<&str> = schema.names().collect();
    let (file_or_source, command_key) = (
        format!(
            "{key}.{}",
            if config.file.is_some() {
                "file"
            } else {
                "source"
            }
        ),
        format!("{key}.command"),
    );
    let mut sample = sample_arguments(&schema);
    if let Some(name) = &command {
        check_variables(env, &command_key, name, &known)?;
        check_names(env, &command_key, name, "command", &sample)?;
        known.push("command");
        sample.insert("command".into(), "example command".into());
    }
    check_variables(env, &file_or_source, &template, &known)?;
    check_names(env, &file_or_source, &template, &label, &sample)?;
    Ok(TemplateTool {
        schema,
        template,
        label,
        command,
    })
}

impl TemplateTools {
    /// Checks `configs` (the `[[templates]]` sections), loads and compiles
    /// every template; `profile_dir` is where template files are found.
    pub fn new(configs: &[TemplateConfig], profile_dir: &Path) -> Result<Self, ConfigError> {
        let mut env = environment(profile_dir)?;
        let mut names = NameSet::default();
        let mut tools = ToolTable::new();
        let mut templates = Vec::new();
        for (i, config) in configs.iter().enumerate() {
            let key = format!("templates[{i}]");
            names.claim(&format!("{key}.tool"), &config.tool)?;
            let template = compile_template(&mut env, config, &key, profile_dir)?;
            tools.push(
                templates.len(),
                declared_reader(
                    &config.tool,
                    &config.description,
                    config.title.as_deref(),
                    template.schema.exposed(),
                    output_schema(),
                ),
            );
            templates.push(template);
        }
        Ok(Self {
            env,
            tools,
            templates,
        })
    }

    fn render(
        &self,
        name: &str,
        tool: &TemplateTool,
        args: JsonObject,
    ) -> Result<ToolOutput, ToolError> {
        let mut context = tool.schema.check(name, args)?;
        for declared in tool.schema.names() {
            if !context.contains_key(declared) {
                context.insert(declared.to_owned(), Value::Null);
            }
        }
        let command = match &tool.command {
            Some(template) => {
                let rendered = self.render_one(name, template, "command", &context)?;
                let rendered = rendered.trim().to_owned();
                context.insert("command".into(), rendered.clone().into());
                Some(rendered)
            }
            None => None,
        };
        let text = self.render_one(name, &tool.template, &tool.label, &context)?;
        let mut structured = json!({ "text": text });
        if let Some(command) = command {
            structured["command"] = command.into();
        }
        Ok(ToolOutput::new(text, structured))
    }

    fn render_one(
        &self,
        tool: &str,
        template: &str,
        label: &str,
        context: &JsonObject,
    ) -> Result<String, ToolError> {
        self.env
            .get_template(template)
            .and_then(|t| t.render(minijinja::value::Serde(context)))
            .map_err(|e| render_error(tool, label, &e))
    }
}

impl Toolset for TemplateTools {
    fn name(&self) -> &str {
        "templates"
    }

    fn tools(&self) -> &[ToolSpec] {
        self.tools.specs()
    }

    fn instructions(&self, _session: Option<&Session>) -> Option<String> {
        let names: Vec<&str> = self.tools.specs().iter().map(|t| t.name.as_str()).collect();
        (!names.is_empty()).then(|| {
            format!(
                "{} render code from the project's templates and return it as text (with the \
command to run, where the template names one); they write no files: save the text where it belongs.",
                names.join(", ")
            )
        })
    }

    fn call<'a>(&'a self, tool: ToolId, args: JsonObject, _caller: &'a Caller) -> ToolFuture<'a> {
        let (index, spec) = self.tools.get(tool);
        Box::pin(async move { self.render(&spec.name, &self.templates[index], args) })
    }
}

/// Loads template files (`file`, `{% include %}`, `{% import %}`) by a
/// plain relative name, from inside `profile_dir` only. An include's name
/// may come from an agent's argument, so a symlink leading out of the
/// directory is refused, and so are dot-files and TOML files (the profile's
/// own settings, which may hold secrets in `[commands.env]`).
fn loader(
    profile_dir: &Path,
) -> impl Fn(&str) -> Result<Option<String>, minijinja::Error> + Send + Sync + 'static {
    let root = std::path::absolute(profile_dir).unwrap_or_else(|_| profile_dir.to_owned());
    move |name| {
        // A bad include, which the trial render at start-up refuses too.
        let refuse = |why: &str| {
            Err(minijinja::Error::new(
                ErrorKind::BadInclude,
                format!("cannot load {name}: {why}"),
            ))
        };
        let plain = !name.is_empty()
            && !name.contains('\\')
            && name
                .split('/')
                .all(|part| !part.is_empty() && !part.starts_with('.'));
        if !plain {
            return refuse(
                "name a template file plainly, relative to the profile directory (no `/` at the start, no part starting with `.`)",
            );
        }
        if Path::new(name)
            .extension()
            .is_some_and(|ext| ext.eq_ignore_ascii_case("toml"))
        {
            return refuse("templates do not load TOML files, which hold settings");
        }
        let real = match root.join(name).canonicalize() {
            Ok(real) => real,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return refuse(&e.to_string()),
        };
        if !root.canonicalize().is_ok_and(|root| real.starts_with(root)) {
            return refuse("it leads out of the profile directory");
        }
        match std::fs::read_to_string(&real) {
            Ok(text) => Ok(Some(text)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => refuse(&e.to_string()),
        }
    }
}

/// Turns a configured template path into a loader name: relative, UTF-8,
/// `/`-separated, no segment starting with `.`.
fn template_path(key: &str, file: &Path) -> Result<String, ConfigError> {
    let mut parts = Vec::new();
    for component in file.components() {
        match component {
            Component::Normal(part) => match part.to_str() {
                Some(part) if !part.starts_with('.') && !part.contains('\\') => parts.push(part),
                _ => {
                    return Err(ConfigError::new(
                        key,
                        format!(
                            "{} has a part that starts with `.` or is not UTF-8; name template files plainly, relative to the profile directory",
                            file.display()
                        ),
                    ));
                }
            },
            _ => {
                return Err(ConfigError::new(
                    key,
                    format!(
                        "{} must be a path relative to the profile directory, inside it (no `/` at the start, no `.` or `..`)",
                        file.display()
                    ),
                ));
            }
        }
    }
    if parts.is_empty() {
        return Err(ConfigError::new(key, "must name a template file"));
    }
    Ok(parts.join("/"))
}

fn load_error(key: &str, name: &str, profile_dir: &Path, e: &minijinja::Error) -> ConfigError {
    match e.kind() {
        ErrorKind::TemplateNotFound => ConfigError::new(
            key,
            format!(
                "{name} was not found in the profile directory {}",
                profile_dir.display()
            ),
        ),
        _ => ConfigError::new(key, describe(name, e)),
    }
}

fn render_error(tool: &str, label: &str, e: &minijinja::Error) -> ToolError {
    if let Some(refused) =
        std::error::Error::source(innermost(e)).and_then(|source| source.downcast_ref::<Refused>())
    {
        return ToolError::invalid_argument(
            &refused.argument,
            format!("{tool}: {}", refused.message),
        );
    }
    if e.kind() == ErrorKind::OutOfFuel {
        return ToolError::new(format!(
            "{tool}: rendering {label} took too much work for these arguments; pass fewer items"
        ));
    }
    ToolError::new(format!("{tool}: template error: {}", describe(label, e)))
}

/// The error an include (or a chain of them) wraps: where the template
/// really failed.
fn innermost(e: &minijinja::Error) -> &minijinja::Error {
    let mut e = e;
    while let Some(inner) =
        std::error::Error::source(e).and_then(|source| source.downcast_ref::<minijinja::Error>())
    {
        e = inner;
    }
    e
}

/// `file line N: kind: detail`, naming the innermost template (an included
/// file if that is where it failed).
fn describe(label: &str, e: &minijinja::Error) -> String {
    let e = innermost(e);
    let name = match e.name() {
        Some(name) if !name.ends_with(":source") && !name.ends_with(":command") => name,
        _ => label,
    };
    let mut text = name.to_owned();
    if let Some(line) = e.line() {
        text.push_str(&format!(" line {line}"));
    }
    text.push_str(&format!(": {}", e.kind()));
    if let Some(detail) = e.detail() {
        text.push_str(&format!(": {detail}"));
    }
    text
}

/// Why a template called [`refuse`]: the source of the render's error.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
struct Refused {
    argument: String,
    message: String,
}

/// `refuse(argument, message)`, for a template: arguments its schema lets
/// through but the template cannot make sense of (an optional parameter
/// before a required one, a name used twice) end the render with a tool
/// error naming the argument, rather than with code that does not compile.
fn refuse(argument: String, message: String) -> Result<String, minijinja::Error> {
    Err(
        minijinja::Error::new(ErrorKind::InvalidOperation, message.clone())
            .with_source(Refused { argument, message }),
    )
}

/// `"user-auth service"` → `"UserAuthService"`; `"UserService"` stays.
/// Runs of anything but ASCII letters and digits separate words; each word's
/// first letter is upper-cased and the rest kept.
fn pascal_case(value: &str) -> String {
    value
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(|w| {
            let mut chars = w.chars();
            chars
                .next()
                .map(|first| first.to_ascii_uppercase().to_string() + chars.as_str())
                .unwrap_or_default()
        })
        .collect()
}

fn output_schema() -> Arc<JsonObject> {
    let schema = json!({
        "type": "object",
        "properties": {
            "text": {"type": "string"},
            "command": {"type": "string", "description": "The command that does the real thing"}
        },
        "required": ["text"]
    });
    Arc::new(schema.as_object().cloned().unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn configs(toml_text: &str) -> Vec<TemplateConfig> {
        #[derive(serde::Deserialize)]
        struct Holder {
            templates: Vec<TemplateConfig>,
        }
        toml::from_str::<Holder>(toml_text).unwrap().templates
    }

    fn args(v: Value) -> JsonObject {
        v.as_object().cloned().unwrap()
    }

    const GREET: &str = r#"
        [[templates]]
        tool = "greet"
        description = "Greets."
        source = """
{% for n in names %}
Hello {{ n | pascal_case }}{{ punct }}
{% endfor %}
Run: {{ command }}"""
        command = "greet --all {{ names | join(' ') }}"
        [templates.input_schema]
        required = ["names"]
        properties.names = { type = "array", items = { type = "string" }, maxItems = 3 }
        properties.punct = { type = "string" }
    "#;

    async fn call(tools: &TemplateTools, name: &str, a: Value) -> Result<ToolOutput, ToolError> {
        let id = tools.tool_id(name).expect("a template tool");
        tools.call(id, args(a), &Caller::new("t")).await
    }

    #[tokio::test]
    async fn renders_inline_templates_with_the_command() {
        let dir = tempfile::tempdir().unwrap();
        let tools = TemplateTools::new(&configs(GREET), dir.path()).unwrap();
        let out = call(&tools, "greet", json!({"names": ["ann lee", "bo"]}))
            .await
            .unwrap();
        assert_eq!(
            out.text,
            "Hello AnnLee\nHello Bo\nRun: greet --all ann lee bo"
        );
        assert_eq!(out.structured["command"], "greet --all ann lee bo");
        assert_eq!(out.structured["text"], out.text);
    }

    #[tokio::test]
    async fn arguments_are_validated_before_rendering() {
        let dir = tempfile::tempdir().unwrap();
        let tools = TemplateTools::new(&configs(GREET), dir.path()).unwrap();
        let err = call(&tools, "greet", json!({"names": "bo"}))
            .await
            .unwrap_err();
        assert!(err.message().contains("is not of type \"array\""), "{err}");
        let err = call(&tools, "greet", json!({"names": ["a", "b", "c", "d"]}))
            .await
            .unwrap_err();
        assert!(err.message().contains("(at /names)"), "{err}");
        let err = call(&tools, "greet", json!({})).await.unwrap_err();
        assert!(err.message().contains("required"), "{err}");
        let err = call(&tools, "greet", json!({"names": [], "command": "x"}))
            .await
            .unwrap_err();
        assert!(
            err.message().contains("unknown parameter `command`"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_render_error_names_the_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("t.j2"),
            "line one\n{{ name.nope.deeper }}\n",
        )
        .unwrap();
        let config = r#"
            [[templates]]
            tool = "t"
            description = "T."
            file = "t.j2"
            input_schema = { properties = { name = { type = "string" } } }
        "#;
        let tools = TemplateTools::new(&configs(config), dir.path()).unwrap();
        let err = call(&tools, "t", json!({"name": "x"})).await.unwrap_err();
        assert!(
            err.message()
                .starts_with("t: template error: t.j2 line 2: undefined value"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn refuse_names_the_argument_even_from_an_include() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("check.j2"),
            "{% if n > 3 %}{{ refuse('n', 'n is at most 3; pass fewer') }}{% endif %}",
        )
        .unwrap();
        let config = r#"
            [[templates]]
            tool = "t"
            description = "T."
            source = "{% include 'check.j2' %}n={{ n }}"
            input_schema = { properties = { n = { type = "integer" } } }
        "#;
        let tools = TemplateTools::new(&configs(config), dir.path()).unwrap();
        let err = call(&tools, "t", json!({"n": 4})).await.unwrap_err();
        assert_eq!(err.message(), "t: n is at most 3; pass fewer");
        assert_eq!(err.structured().unwrap()["invalid_argument"], "n");
        assert_eq!(
            call(&tools, "t", json!({"n": 2})).await.unwrap().text,
            "n=2"
        );
    }

    #[tokio::test]
    async fn runaway_loops_run_out_of_fuel() {
        let dir = tempfile::tempdir().unwrap();
        let config = r#"
            [[templates]]
            tool = "t"
            description = "T."
            source = "{% for i in range(n) %}{% for j in range(n) %}.{% endfor %}{% endfor %}"
            input_schema = { properties = { n = { type = "integer" } } }
        "#;
        let tools = TemplateTools::new(&configs(config), dir.path()).unwrap();
        let err = call(&tools, "t", json!({"n": 10000})).await.unwrap_err();
        assert!(err.message().contains("too much work"), "{err}");
        assert_eq!(
            call(&tools, "t", json!({"n": 2})).await.unwrap().text,
            "...."
        );
    }

    #[test]
    fn config_errors_name_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let make = |body: &str| {
            TemplateTools::new(
                &configs(&format!(
                    "[[templates]]\ntool = \"t\"\ndescription = \"d\"\n{body}"
                )),
                dir.path(),
            )
            .err()
            .unwrap()
        };
        let err = make("file = \"missing.j2\"");
        assert_eq!(err.key(), "templates[0].file");
        assert!(err.message().contains("was not found"), "{err}");
        assert_eq!(make("file = \"../x.j2\"").key(), "templates[0].file");
        assert_eq!(make("file = \"/etc/passwd\"").key(), "templates[0].file");
        assert_eq!(make("").key(), "templates[0]");
        assert_eq!(make("file = \"a\"\nsource = \"b\"").key(), "templates[0]");
        let err = make("source = \"a\\n{% if %}\"");
        assert_eq!(err.key(), "templates[0].source");
        assert!(
            err.message()
                .starts_with("inline source line 2: syntax error"),
            "{err}"
        );
        let err = make("source = \"x\"\ncommand = \"{{\"");
        assert_eq!(err.key(), "templates[0].command");
        // A misspelt parameter, at start rather than at the first call.
        let err = make(
            "source = \"{% for m in methods %}{{ nme }}{% endfor %}{{ range(2) }}\"\ninput_schema = { properties = { name = {}, methods = {} } }",
        );
        assert_eq!(err.key(), "templates[0].source");
        assert_eq!(
            err.message(),
            "uses nme, which is not a parameter of the tool (its parameters: methods, name)"
        );
        let err = make("source = \"x\"\ncommand = \"run {{ nam }}\"");
        assert_eq!(err.key(), "templates[0].command");
        let err = make(
            "source = \"x\"\ncommand = \"c\"\ninput_schema = { properties = { command = {} } }",
        );
        assert_eq!(err.key(), "templates[0].input_schema.properties.command");
    }

    #[test]
    fn unknown_filters_tests_functions_and_includes_are_refused_at_start() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("part.j2"), "{{ name | nosuch }}").unwrap();
        std::fs::write(dir.path().join("fine.j2"), "{{ name | upper }}").unwrap();
        let make = |body: &str| {
            TemplateTools::new(
                &configs(&format!(
                    "[[templates]]\ntool = \"t\"\ndescription = \"d\"\ninput_schema = {{ properties = {{ name = {{ type = \"string\" }}, n = {{ type = \"integer\" }} }} }}\n{body}"
                )),
                dir.path(),
            )
        };
        let refused = |body: &str| {
            make(body)
                .err()
                .unwrap_or_else(|| panic!("accepted {body}"))
        };
        let err = refused("source = \"{{ name | nosuchfilter }}\"");
        assert_eq!(err.key(), "templates[0].source");
        assert!(
            err.message()
                .starts_with("inline source line 1: unknown filter"),
            "{err}"
        );
        assert!(
            refused("source = \"{% if name is nosuchtest %}x{% endif %}\"")
                .message()
                .contains("unknown test")
        );
        assert!(
            refused("source = \"{{ nosuchfunction() }}\"")
                .message()
                .contains("nosuchfunction")
        );
        let err = refused("source = \"{% include 'nope.j2' %}\"");
        assert!(err.message().contains("nope.j2"), "{err}");
        // The included file's own mistake names that file.
        let err = refused("source = \"{% include 'part.j2' %}\"");
        assert!(
            err.message().starts_with("part.j2 line 1: unknown filter"),
            "{err}"
        );
        let err = refused("source = \"x\"\ncommand = \"{{ name | nosuch }}\"");
        assert_eq!(err.key(), "templates[0].command");
        // Includes the loader refuses, whatever the arguments.
        std::fs::write(dir.path().join("settings.toml"), "x = 1").unwrap();
        for (include, why) in [
            ("../outside.txt", "no part starting with `.`"),
            ("settings.toml", "do not load TOML files"),
        ] {
            let err = refused(&format!("source = \"{{% include '{include}' %}}\""));
            assert!(err.message().contains(why), "{include}: {err}");
        }
        // What works, and mistakes that depend on the values, start.
        make("source = \"{% include 'fine.j2' %} {{ n + 1 }}\"").unwrap();
        make("source = \"{{ name | int }}\"").unwrap();
    }

    #[tokio::test]
    async fn includes_stay_inside_the_profile_directory_and_leave_its_settings() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret.txt"), "outside secret").unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("parts")).unwrap();
        std::fs::write(dir.path().join("parts/ok.j2"), "fine part").unwrap();
        std::os::unix::fs::symlink(
            outside.path().join("secret.txt"),
            dir.path().join("parts/link.j2"),
        )
        .unwrap();
        std::fs::write(
            dir.path().join("p.toml"),
            "[commands.env]\nTOKEN = \"inside secret\"",
        )
        .unwrap();
        std::fs::write(dir.path().join(".env"), "TOKEN=dot secret").unwrap();
        let config = r#"
            [[templates]]
            tool = "t"
            description = "T."
            source = "{% include part %}"
            input_schema = { properties = { part = { type = "string", default = "parts/ok.j2" } } }
        "#;
        let tools = TemplateTools::new(&configs(config), dir.path()).unwrap();
        assert_eq!(
            call(&tools, "t", json!({})).await.unwrap().text,
            "fine part"
        );
        for (part, why) in [
            ("parts/link.j2", "leads out of the profile directory"),
            ("p.toml", "do not load TOML files"),
            ("P.TOML", "do not load TOML files"),
            (".env", "no part starting with `.`"),
            ("parts/../p.toml", "no part starting with `.`"),
            ("/etc/passwd", "no `/` at the start"),
        ] {
            let err = call(&tools, "t", json!({"part": part})).await.unwrap_err();
            assert!(err.message().contains(why), "{part}: {err}");
            assert!(!err.message().contains("secret"), "{part}: {err}");
        }
    }

    #[test]
    fn pascal_case_joins_words() {
        assert_eq!(pascal_case("user"), "User");
        assert_eq!(pascal_case("UserService"), "UserService");
        assert_eq!(pascal_case("user-auth service"), "UserAuthService");
        assert_eq!(pascal_case("  "), "");
        assert_eq!(pascal_case("é x"), "X");
    }
}
