//! The config sections this crate reads: `[[catalog]]`, `[[templates]]` and
//! `[commands]`.
//!
//! They are plain serde structs that deny unknown keys, so a misspelt key is
//! reported instead of silently ignored. Deserialising checks shapes only;
//! [`ToolkitConfig::build`] (the toolsets' constructors) checks meaning —
//! placeholders against schemas, template syntax, files — and its errors
//! name the key, e.g.
//! `commands.actions[2].argv[3]: unknown placeholder {nme}`.
//!
//! Safety settings (timeouts, output cap, environment, which actions are
//! mutating or interactive) live only here: no tool parameter can change them.

use std::{collections::BTreeMap, fmt, path::Path, path::PathBuf, sync::Arc};

use serde::{Deserialize, Deserializer, de};
pub use switchboard_toolset::ConfigError;
use switchboard_toolset::{JsonObject, Toolset};

use crate::{CatalogTools, CommandTools, PromptTools, TemplateTools};

/// Every section this crate reads, as top-level keys of a config file.
///
/// switchboard's own config struct can carry the three fields under the same
/// names; this struct exists so that a profile can be checked on its own.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolkitConfig {
    /// Static list tools (`[[catalog]]`).
    #[serde(default)]
    pub catalog: Vec<CatalogConfig>,
    /// Scaffolding tools rendered from templates (`[[templates]]`).
    #[serde(default)]
    pub templates: Vec<TemplateConfig>,
    /// The bridge to a local CLI (`[commands]`).
    pub commands: Option<CommandsConfig>,
    /// Prompt templates (`[[prompts]]`).
    #[serde(default)]
    pub prompts: Vec<crate::PromptConfig>,
}

/// What a [`ToolkitConfig`] declares, built.
pub struct Toolkit {
    /// One toolset per non-empty section.
    pub toolsets: Vec<Arc<dyn Toolset>>,
    /// The `[[prompts]]`, when there are any.
    pub prompts: Option<Arc<PromptTools>>,
    /// The `[commands]` toolset (also in `toolsets`), for checks of its
    /// program.
    pub commands: Option<Arc<CommandTools>>,
}

impl ToolkitConfig {
    /// Builds every section; building is checking (placeholders, template
    /// syntax, files), and nothing runs. `profile_dir` is where relative
    /// paths start. The commands toolset takes switchboard's own environment
    /// (see [`CommandTools::new`]).
    pub fn build(&self, profile_dir: &Path) -> Result<Toolkit, ConfigError> {
        let mut toolsets: Vec<Arc<dyn Toolset>> = Vec::new();
        if !self.catalog.is_empty() {
            toolsets.push(Arc::new(CatalogTools::new(&self.catalog)?));
        }
        if !self.templates.is_empty() {
            toolsets.push(Arc::new(TemplateTools::new(&self.templates, profile_dir)?));
        }
        let commands = match &self.commands {
            Some(config) => {
                let commands = Arc::new(CommandTools::new(config, profile_dir)?);
                toolsets.push(commands.clone());
                Some(commands)
            }
            None => None,
        };
        let prompts = if self.prompts.is_empty() {
            None
        } else {
            Some(Arc::new(PromptTools::new(&self.prompts)?))
        };
        Ok(Toolkit {
            toolsets,
            prompts,
            commands,
        })
    }
}

/// One static list tool, e.g. `list_packages`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CatalogConfig {
    /// The tool's name, e.g. `list_packages`.
    pub tool: String,
    /// A short human-facing name clients may show instead of `tool`.
    pub title: Option<String>,
    /// What the list holds and when to call the tool; the model reads this.
    pub description: String,
    /// The first line of the text result, e.g. `# @imqueue packages`.
    pub heading: Option<String>,
    /// The last line of the text result, e.g. where the full list lives.
    pub footer: Option<String>,
    /// The entries, in the order they are listed (reach-for-first first).
    pub entries: Vec<CatalogEntry>,
}

/// One entry of a catalog.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CatalogEntry {
    /// The package or thing's exact name, e.g. `@imqueue/rpc`.
    pub name: String,
    /// A one-line summary of what it is for.
    pub summary: String,
    /// The exact install command, e.g. `npm i @imqueue/rpc`.
    pub install: String,
    /// Where to read more.
    pub url: Option<String>,
    /// Where two entries cover the same ground: the rule for choosing.
    pub pick: Option<String>,
}

/// One scaffolding tool rendered from a minijinja template.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TemplateConfig {
    /// The tool's name, e.g. `scaffold_service`.
    pub tool: String,
    /// A short human-facing name clients may show instead of `tool`.
    pub title: Option<String>,
    /// What the tool produces; the model reads this.
    pub description: String,
    /// The JSON Schema of the tool's parameters (an object schema). Every
    /// call is validated against it before rendering; top-level `default`s
    /// are filled in, and absent optional parameters are `none` in the
    /// template.
    #[serde(default = "empty_object_schema")]
    pub input_schema: JsonObject,
    /// The template file, relative to the profile directory (no `..`).
    /// Give `file` or `source`, not both.
    pub file: Option<PathBuf>,
    /// The template text itself, for short templates.
    pub source: Option<String>,
    /// A one-line template for the command that does the real thing (e.g.
    /// `imq client generate …`). It is rendered first, passed to the main
    /// template as `command`, and returned in `structuredContent.command`.
    pub command: Option<String>,
}

/// The bridge to one local CLI: the program and the actions agents may run.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandsConfig {
    /// The program every `run` action starts: a name looked up on the
    /// child's `PATH` at each call (so a later install is picked up), or a
    /// path containing `/` (relative to the profile directory).
    pub program: String,
    /// The arguments that make the program print its version; the `status`
    /// action runs them.
    #[serde(default = "default_version_args")]
    pub version_args: Vec<String>,
    /// The directory commands run in, unless an action's `cwd` says
    /// otherwise; relative to the profile directory. Default: switchboard's
    /// own working directory.
    pub working_dir: Option<PathBuf>,
    /// Seconds a command may run before its whole process group is stopped.
    #[serde(default = "default_timeout_s")]
    pub timeout_s: f64,
    /// Seconds between SIGTERM and SIGKILL when a command is stopped.
    #[serde(default = "default_kill_grace_s")]
    pub kill_grace_s: f64,
    /// Bytes of output (stdout and stderr, interleaved) kept per run; the
    /// tail is kept and the result says how much was dropped.
    #[serde(default = "default_max_output_bytes")]
    pub max_output_bytes: usize,
    /// Names of the variables passed through from switchboard's environment;
    /// nothing else reaches the child. Replaces the default list.
    #[serde(default = "default_env_allow")]
    pub env_allow: Vec<String>,
    /// Variables set for every command; they win over passed-through ones.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The tools, one per action.
    #[serde(default)]
    pub actions: Vec<ActionConfig>,
}

/// What an action does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ActionKind {
    /// Runs `program` with the rendered `argv`.
    #[default]
    Run,
    /// Reports where `program` is (on the child's `PATH`) and its version;
    /// takes no parameters and no `argv`.
    Status,
    /// Installs the program: `argv` is the whole install command, starting
    /// with the installer (e.g. `npm`). Always mutating; without `apply` it
    /// only shows the command. At most one per config; its command is the
    /// hint given when `program` is missing.
    Install,
}

/// One tool that runs the program.
///
/// The fields after `switch` and `cases` are defaults for every case; a case
/// may override them. Without `switch` there is exactly one case: the action
/// itself.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActionConfig {
    /// The tool's name, e.g. `fleet`.
    pub tool: String,
    /// A short human-facing name clients may show instead of `tool`.
    pub title: Option<String>,
    /// What the tool does, including what a mutating case changes.
    pub description: String,
    /// What the action does; see [`ActionKind`].
    #[serde(default)]
    pub kind: ActionKind,
    /// The JSON Schema of the tool's parameters (an object schema).
    /// Property names are what placeholders refer to; `apply` is reserved
    /// (switchboard adds it when a case is mutating).
    #[serde(default = "empty_object_schema")]
    pub input_schema: JsonObject,
    /// The arguments after the program; see the grammar in
    /// [`commands::argv`](crate::commands::argv) (strings with `{param}` placeholders,
    /// and `{ if = … }`, `{ unless = … }`, `{ each = … }`, `{ options = … }`
    /// tables).
    #[serde(default)]
    pub argv: Vec<ArgTemplate>,
    /// The working directory, as a placeholder string (e.g. `"{cwd}"`);
    /// relative results start at `working_dir`. Absent or empty: `working_dir`.
    pub cwd: Option<String>,
    /// A parameter with a string `enum` whose value selects the case in
    /// `cases`; it must be required or have a default.
    pub switch: Option<String>,
    /// Per-value settings when `switch` is set: one entry for every enum
    /// value, no more.
    #[serde(default)]
    pub cases: BTreeMap<String, CaseConfig>,
    /// Whether running it changes something. A mutating case runs in its
    /// dry-run form unless the call passes `apply: true`.
    #[serde(default)]
    pub mutating: bool,
    /// Arguments that make a mutating case a dry run (e.g. `--dry-run`).
    /// Without them the dry run only shows the command and runs nothing.
    /// Inserted before the agent's options, else before a literal `--`,
    /// else appended.
    #[serde(default)]
    pub dry_run_args: Vec<String>,
    /// Arguments added when a mutating case runs for real (e.g. `--yes`, to
    /// skip a confirmation the call's `apply: true` already gave).
    #[serde(default)]
    pub apply_args: Vec<String>,
    /// Set when the CLI cannot do this without a terminal (it prompts): the
    /// call fails at once with this guidance instead of running.
    pub interactive: Option<String>,
    /// Parameters that must be present for this case (beyond the schema's
    /// `required`), e.g. `option` and `value` for `config set`.
    #[serde(default)]
    pub required: Vec<String>,
    /// Overrides `commands.timeout_s`.
    pub timeout_s: Option<f64>,
    /// Overrides the `readOnlyHint` (by default: true when no case is
    /// mutating). Set `false` for an action that writes without being gated.
    pub read_only: Option<bool>,
}

/// Settings for one value of an action's `switch` parameter; absent fields
/// take the action's.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CaseConfig {
    /// Replaces the action's `argv` for this case.
    pub argv: Option<Vec<ArgTemplate>>,
    /// See [`ActionConfig::mutating`].
    pub mutating: Option<bool>,
    /// See [`ActionConfig::dry_run_args`].
    pub dry_run_args: Option<Vec<String>>,
    /// See [`ActionConfig::apply_args`].
    pub apply_args: Option<Vec<String>>,
    /// See [`ActionConfig::interactive`].
    pub interactive: Option<String>,
    /// See [`ActionConfig::required`].
    pub required: Option<Vec<String>>,
    /// See [`ActionConfig::timeout_s`].
    pub timeout_s: Option<f64>,
}

/// One element of an `argv` template: a string, or a rule table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArgTemplate {
    /// Literal text with `{param}` placeholders (`{{` and `}}` for braces).
    Text(String),
    /// A conditional, repeated or agent-supplied group of elements.
    Rule(ArgRule),
}

impl<'de> Deserialize<'de> for ArgTemplate {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> de::Visitor<'de> for Visit {
            type Value = ArgTemplate;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string or a table such as { if = \"param\", args = [\"--flag\"] }")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ArgTemplate, E> {
                Ok(ArgTemplate::Text(v.to_owned()))
            }
            fn visit_map<A: de::MapAccess<'de>>(self, map: A) -> Result<ArgTemplate, A::Error> {
                ArgRule::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(ArgTemplate::Rule)
            }
        }
        deserializer.deserialize_any(Visit)
    }
}

/// A table element of `argv`. Exactly one of `if`, `unless`, `each` and
/// `options` is given.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArgRule {
    /// Include `args` when this parameter is set: present and not `false`,
    /// `null`, `""` or `[]`.
    #[serde(rename = "if")]
    pub when: Option<String>,
    /// Include `args` when this parameter is not set (see `if`).
    pub unless: Option<String>,
    /// The elements `if` / `unless` include (placeholder strings).
    #[serde(default)]
    pub args: Vec<String>,
    /// One element per item of this parameter: an array, or a string cut at
    /// `split` (pieces trimmed, empty ones skipped).
    pub each: Option<String>,
    /// The separator for a string `each` parameter, e.g. `","` or `" "`.
    pub split: Option<String>,
    /// Splice agent-supplied options from this array parameter. An item that
    /// starts with `-` must be listed in `allow` (a `--name=value` item is
    /// checked by its name); any other item is a value and must follow an
    /// option. `--` is never accepted.
    pub options: Option<String>,
    /// The option names `options` accepts, e.g. `["--vcs", "-D"]`.
    #[serde(default)]
    pub allow: Vec<String>,
}

fn empty_object_schema() -> JsonObject {
    let mut schema = JsonObject::new();
    schema.insert("type".into(), "object".into());
    schema.insert("properties".into(), JsonObject::new().into());
    schema
}

fn default_version_args() -> Vec<String> {
    vec!["--version".into()]
}

fn default_timeout_s() -> f64 {
    60.0
}

fn default_kill_grace_s() -> f64 {
    2.0
}

fn default_max_output_bytes() -> usize {
    64 * 1024
}

/// The variables a CLI commonly needs to find itself, its home and its
/// locale; nothing that usually carries a secret.
fn default_env_allow() -> Vec<String> {
    [
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "LANG",
        "LC_ALL",
        "LC_CTYPE",
        "LC_MESSAGES",
        "TERM",
        "TZ",
        "TMPDIR",
    ]
    .map(String::from)
    .to_vec()
}

/// Checks a tool name: 1 to 64 of `A-Z a-z 0-9 _ - .`, as MCP clients expect.
pub(crate) fn check_tool_name(key: &str, name: &str) -> Result<(), ConfigError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(ConfigError::new(
            key,
            format!(
                "tool name {name:?} must be 1 to 64 letters, digits, `_`, `-` or `.`, e.g. list_packages"
            ),
        ))
    }
}

/// Checks that a human-facing text field has something in it.
pub(crate) fn check_not_blank(key: &str, value: &str) -> Result<(), ConfigError> {
    if value.trim().is_empty() {
        Err(ConfigError::new(key, "must not be empty"))
    } else {
        Ok(())
    }
}

/// Records tool names and refuses a second use of one within a toolset.
#[derive(Default)]
pub(crate) struct NameSet(BTreeMap<String, String>);

impl NameSet {
    pub(crate) fn claim(&mut self, key: &str, name: &str) -> Result<(), ConfigError> {
        check_tool_name(key, name)?;
        if let Some(first) = self.0.get(name) {
            return Err(ConfigError::new(
                key,
                format!("tool name `{name}` is already used by {first}; tool names must be unique"),
            ));
        }
        self.0.insert(name.to_owned(), key.to_owned());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argv_elements_are_strings_or_rule_tables_with_named_errors() {
        #[derive(Deserialize)]
        struct Holder {
            argv: Vec<ArgTemplate>,
        }
        let ok: Holder =
            toml::from_str(r#"argv = ["ctl", { if = "update", args = ["--update"] }]"#).unwrap();
        assert_eq!(ok.argv[0], ArgTemplate::Text("ctl".into()));
        let ArgTemplate::Rule(rule) = &ok.argv[1] else {
            panic!("expected a rule");
        };
        assert_eq!(rule.when.as_deref(), Some("update"));

        let err = toml::from_str::<Holder>(r#"argv = [{ iff = "x" }]"#)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("unknown field `iff`"), "{err}");
        let err = toml::from_str::<Holder>("argv = [3]")
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("a string or a table"), "{err}");
    }

    #[test]
    fn unknown_keys_are_refused() {
        let err = toml::from_str::<ToolkitConfig>("[commands]\nprogram = \"x\"\ntimeout = 3\n")
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("unknown field `timeout`"), "{err}");
    }

    #[test]
    fn defaults_are_sensible() {
        let config: ToolkitConfig = toml::from_str("[commands]\nprogram = \"imq\"\n").unwrap();
        let commands = config.commands.unwrap();
        assert_eq!(commands.timeout_s, 60.0);
        assert_eq!(commands.version_args, ["--version"]);
        assert!(commands.env_allow.iter().any(|v| v == "PATH"));
        assert!(commands.actions.is_empty());
    }

    #[test]
    fn tool_names_are_checked_and_unique() {
        let mut names = NameSet::default();
        names.claim("a[0].tool", "fleet").unwrap();
        let err = names.claim("a[1].tool", "fleet").unwrap_err();
        assert_eq!(err.key(), "a[1].tool");
        assert!(err.message().contains("already used by a[0].tool"));
        assert!(names.claim("a[2].tool", "has space").is_err());
        assert!(names.claim("a[3].tool", "").is_err());
    }
}
