//! The commands toolset: a safe bridge to one local CLI, with one tool per
//! declared action.
//!
//! What an agent can and cannot do through these tools:
//!
//! - It runs only the declared actions, with `argv` built from templates
//!   (see [`argv`]) — never a shell, never a program of its choosing.
//! - Its parameters are validated against the action's input schema, and a
//!   value that could be parsed as an option is refused (or placed after a
//!   declared `--`).
//! - A **mutating** case runs in its dry-run form unless the call passes
//!   `apply: true`: with declared `dry_run_args` the program runs with them;
//!   without, nothing runs and the result shows the command. The result
//!   always says which happened (`mode`: `run`, `dry_run`, `preview` or
//!   `apply`).
//! - An **interactive** case fails at once with the configured guidance.
//! - Every run happens under [`runner`]'s rules: new session and process
//!   group, stdin closed, environment limited to the allow-list plus
//!   declared variables, output capped to its tail, timeout that kills the
//!   whole group.
//! - When the program is missing, the error names the install command (from
//!   the `install` action); the other toolsets, which need no program, keep
//!   working. A `status` action reports where the program is — looked up on
//!   the `PATH` the child gets — and its version.
//!
//! None of the safety settings is a tool parameter: only config sets them.

pub mod argv;
pub mod runner;

use std::{
    collections::{BTreeMap, HashMap},
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use serde_json::{Value, json};
use switchboard_toolset::{
    Caller, JsonObject, Tool, ToolAnnotations, ToolError, ToolFuture, ToolOutput, Toolset,
    with_call_timeout,
};

use self::{
    argv::{Argv, Text, compile_text},
    runner::{Ending, Finished, Invocation, find_program, is_env_name, path_of},
};
use crate::{
    config::{
        ActionConfig, ActionKind, ArgTemplate, CaseConfig, CommandsConfig, ConfigError, NameSet,
        check_not_blank,
    },
    schema::InputSchema,
};

/// The longest timeout config may set, in seconds.
const MAX_TIMEOUT_S: f64 = 3600.0;
/// The longest SIGTERM-to-SIGKILL grace config may set, in seconds.
const MAX_GRACE_S: f64 = 60.0;
/// The output cap config may set, in bytes.
const OUTPUT_RANGE: std::ops::RangeInclusive<usize> = 1024..=16 * 1024 * 1024;

/// The commands tools of one config.
pub struct CommandTools {
    program: String,
    base_dir: PathBuf,
    working_dir: Option<PathBuf>,
    env: Vec<(String, String)>,
    version_args: Vec<String>,
    grace: Duration,
    max_output: usize,
    tools: Vec<Tool>,
    actions: HashMap<String, Action>,
    install: Option<InstallHint>,
}

/// The install action's tool and command, named when the program is missing.
struct InstallHint {
    tool: String,
    command: String,
}

struct Action {
    kind: ActionKind,
    schema: InputSchema,
    cwd: Option<Text>,
    cases: Cases,
    timeout: Duration,
}

enum Cases {
    One(Case),
    By {
        param: String,
        cases: BTreeMap<String, Case>,
    },
}

impl Action {
    /// The longest any of its cases may run.
    fn longest_timeout(&self) -> Duration {
        match &self.cases {
            Cases::One(case) => case.timeout,
            Cases::By { cases, .. } => cases
                .values()
                .map(|case| case.timeout)
                .max()
                .unwrap_or(self.timeout),
        }
    }
}

struct Case {
    argv: Argv,
    mutating: bool,
    dry_run_args: Vec<String>,
    apply_args: Vec<String>,
    interactive: Option<String>,
    required: Vec<String>,
    timeout: Duration,
}

/// Which form of a command a call ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// A non-mutating command, run as declared.
    Run,
    /// A mutating command run with its dry-run arguments.
    DryRun,
    /// A mutating command without dry-run arguments: shown, not run.
    Preview,
    /// A mutating command run for real (`apply: true`).
    Apply,
}

impl Mode {
    fn as_str(self) -> &'static str {
        match self {
            Mode::Run => "run",
            Mode::DryRun => "dry_run",
            Mode::Preview => "preview",
            Mode::Apply => "apply",
        }
    }
}

impl CommandTools {
    /// Checks `config` (the `[commands]` section) and builds its tools. The
    /// child's environment is drawn from switchboard's own, through
    /// `env_allow`; `profile_dir` is where relative paths start.
    pub fn new(config: &CommandsConfig, profile_dir: &Path) -> Result<Self, ConfigError> {
        let environment = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)));
        Self::with_environment(config, profile_dir, environment)
    }

    /// Like [`CommandTools::new`], with `environment` standing for
    /// switchboard's environment (for embedding and tests).
    pub fn with_environment(
        config: &CommandsConfig,
        profile_dir: &Path,
        environment: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, ConfigError> {
        check_not_blank("commands.program", &config.program)?;
        if config.program.contains('\0') {
            return Err(ConfigError::new(
                "commands.program",
                "contains a NUL character",
            ));
        }
        let default_timeout =
            seconds("commands.timeout_s", config.timeout_s, MAX_TIMEOUT_S, false)?;
        let grace = seconds(
            "commands.kill_grace_s",
            config.kill_grace_s,
            MAX_GRACE_S,
            true,
        )?;
        if !OUTPUT_RANGE.contains(&config.max_output_bytes) {
            return Err(ConfigError::new(
                "commands.max_output_bytes",
                format!(
                    "must be between {} and {} bytes (got {})",
                    OUTPUT_RANGE.start(),
                    OUTPUT_RANGE.end(),
                    config.max_output_bytes
                ),
            ));
        }
        let env = child_environment(config, environment)?;
        let working_dir = match &config.working_dir {
            Some(dir) => {
                let dir = profile_dir.join(dir);
                if !dir.is_dir() {
                    return Err(ConfigError::new(
                        "commands.working_dir",
                        format!("{} is not a directory", dir.display()),
                    ));
                }
                Some(dir)
            }
            None => None,
        };
        if config.actions.is_empty() {
            return Err(ConfigError::new(
                "commands.actions",
                "declare at least one action ([[commands.actions]] with tool, description, argv)",
            ));
        }

        let mut names = NameSet::default();
        let mut tools = Vec::new();
        let mut actions = HashMap::new();
        let mut install = None;
        for (i, action_config) in config.actions.iter().enumerate() {
            let key = format!("commands.actions[{i}]");
            names.claim(&format!("{key}.tool"), &action_config.tool)?;
            check_not_blank(&format!("{key}.description"), &action_config.description)?;
            let (action, tool) = compile_action(&key, action_config, default_timeout)?;
            if action.kind == ActionKind::Install {
                if install.is_some() {
                    return Err(ConfigError::new(
                        format!("{key}.kind"),
                        "only one action may be kind = \"install\"",
                    ));
                }
                install = Some(InstallHint {
                    tool: action_config.tool.clone(),
                    command: install_command(&key, &action_config.tool, &action)?,
                });
            }
            // A relay client (the shim) must wait at least as long as the
            // program may run and be killed; a second covers the reply.
            let deadline = action.longest_timeout() + grace + Duration::from_secs(1);
            tools.push(with_call_timeout(tool, deadline));
            actions.insert(action_config.tool.clone(), action);
        }
        Ok(Self {
            program: config.program.clone(),
            base_dir: profile_dir.to_path_buf(),
            working_dir,
            env,
            version_args: config.version_args.clone(),
            grace,
            max_output: config.max_output_bytes,
            tools,
            actions,
            install,
        })
    }
}

impl Toolset for CommandTools {
    fn name(&self) -> &str {
        "commands"
    }

    fn tools(&self) -> Vec<Tool> {
        self.tools.clone()
    }

    fn call<'a>(&'a self, tool: &'a str, args: JsonObject, _caller: &'a Caller) -> ToolFuture<'a> {
        Box::pin(async move {
            let action = self.actions.get(tool).ok_or_else(|| {
                ToolError::new(format!("the commands toolset has no tool {tool}"))
            })?;
            let mut params = action.schema.check(tool, args)?;
            let apply = params.remove("apply") == Some(Value::Bool(true));
            match action.kind {
                ActionKind::Status => self.status(action).await,
                ActionKind::Run | ActionKind::Install => {
                    self.run_action(tool, action, params, apply).await
                }
            }
        })
    }
}

impl CommandTools {
    async fn run_action(
        &self,
        tool: &str,
        action: &Action,
        params: JsonObject,
        apply: bool,
    ) -> Result<ToolOutput, ToolError> {
        let (label, case) = action.case(&params)?;
        let mut rendered = case.argv.render(&params)?;
        let mode = match (case.mutating, apply) {
            (false, _) => Mode::Run,
            (true, true) => Mode::Apply,
            (true, false) if case.dry_run_args.is_empty() => Mode::Preview,
            (true, false) => Mode::DryRun,
        };
        match mode {
            Mode::Apply => rendered.insert_options(&case.apply_args),
            Mode::DryRun => rendered.insert_options(&case.dry_run_args),
            Mode::Run | Mode::Preview => {}
        }
        let mut args = rendered.args;
        let program = match action.kind {
            ActionKind::Install if !args.is_empty() => args.remove(0),
            _ => self.program.clone(),
        };
        let shown = display_command(&program, &args);
        if let Some(guidance) = &case.interactive {
            return Err(ToolError::new(format!(
                "`{shown}` is interactive: it asks its questions on a terminal, and commands here run without one, so it was not run. {guidance}"
            )));
        }
        let missing: Vec<&str> = case
            .required
            .iter()
            .filter(|name| !is_present(params.get(name.as_str())))
            .map(String::as_str)
            .collect();
        if !missing.is_empty() {
            return Err(ToolError::new(format!(
                "{tool}{label} needs {}",
                missing.join(" and ")
            )));
        }
        let found = find_program(&program, path_of(&self.env), &self.base_dir);
        let cwd = match &action.cwd {
            Some(template) => template.render_plain(&params)?,
            None => None,
        };
        let cwd = self.working_dir(cwd)?;
        let command: Vec<String> = std::iter::once(program.clone())
            .chain(args.iter().cloned())
            .collect();
        let report = Report {
            tool,
            mode,
            shown: &shown,
            command: &command,
            program: found.as_deref(),
            cwd: cwd.as_deref(),
        };
        if mode == Mode::Preview {
            let note = match found {
                Some(_) => String::new(),
                None => format!("\n\nNote: {}", self.missing_text(&program)),
            };
            return Ok(report.output(None, &note));
        }
        let Some(program_path) = found.as_deref() else {
            return Err(ToolError::new(self.missing_text(&program)));
        };
        let finished = runner::run(Invocation {
            program: program_path,
            args: &args,
            env: &self.env,
            cwd: cwd.as_deref(),
            timeout: case.timeout,
            grace: self.grace,
            max_output: self.max_output,
        })
        .await
        .map_err(|e| ToolError::new(format!("could not start {}: {e}", program_path.display())))?;
        if finished.ending == Ending::TimedOut {
            return Err(ToolError::new(format!(
                "`{shown}` did not finish within {} s and was stopped (SIGTERM to its whole process group, SIGKILL {} s later). If it was waiting for input, pass what it asked for as parameters.\n\n{}",
                case.timeout.as_secs_f64(),
                self.grace.as_secs_f64(),
                output_block(&finished)
            )));
        }
        Ok(report.output(Some(&finished), ""))
    }

    async fn status(&self, action: &Action) -> Result<ToolOutput, ToolError> {
        let path_var = path_of(&self.env);
        let Some(path) = find_program(&self.program, path_var, &self.base_dir) else {
            let text = self.missing_text(&self.program);
            let mut structured = json!({
                "program": self.program,
                "installed": false,
                "path": null,
                "version": null,
            });
            if let Some(hint) = &self.install {
                structured["install"] = hint.command.clone().into();
                structured["install_tool"] = hint.tool.clone().into();
            }
            return Ok(ToolOutput::new(text, structured));
        };
        let mut text = format!("{} is installed at {}", self.program, path.display());
        let mut version = None;
        if !self.version_args.is_empty() {
            let shown = display_command(&self.program, &self.version_args);
            let finished = runner::run(Invocation {
                program: &path,
                args: &self.version_args,
                env: &self.env,
                cwd: self.working_dir.as_deref(),
                timeout: action.timeout,
                grace: self.grace,
                max_output: self.max_output,
            })
            .await
            .map_err(|e| ToolError::new(format!("could not start {}: {e}", path.display())))?;
            let first_line = finished
                .output
                .lines()
                .map(str::trim)
                .find(|l| !l.is_empty())
                .map(str::to_owned);
            match (finished.ending, first_line) {
                (Ending::Exited(0), Some(line)) => {
                    text.push_str(&format!(", version {line}."));
                    version = Some(line);
                }
                (ending, _) => text.push_str(&format!(
                    ", but `{shown}` {} and printed no version.\n\n{}",
                    ending_text(ending),
                    output_block(&finished)
                )),
            }
        } else {
            text.push('.');
        }
        Ok(ToolOutput::new(
            text,
            json!({
                "program": self.program,
                "installed": true,
                "path": path.display().to_string(),
                "version": version,
            }),
        ))
    }

    /// What to say when `program` is not on the child's `PATH`.
    fn missing_text(&self, program: &str) -> String {
        let path = path_of(&self.env).unwrap_or("(PATH is not set)");
        let mut text = format!(
            "{program} is not installed: it was not found on the PATH commands run with ({path})."
        );
        match &self.install {
            Some(hint) if program == self.program => text.push_str(&format!(
                " Install it with `{}` ({} with apply: true runs that).",
                hint.command, hint.tool
            )),
            _ => text.push_str(
                " Install it, or add its directory to PATH in switchboard's environment.",
            ),
        }
        text
    }

    /// The directory to run in: `cwd` from the call (relative to the
    /// configured working directory), else the configured one.
    fn working_dir(&self, cwd: Option<String>) -> Result<Option<PathBuf>, ToolError> {
        let Some(cwd) = cwd else {
            return Ok(self.working_dir.clone());
        };
        let dir = match &self.working_dir {
            Some(base) => base.join(&cwd),
            None => PathBuf::from(&cwd),
        };
        if !dir.is_dir() {
            return Err(ToolError::new(format!(
                "cwd: {} is not a directory",
                dir.display()
            )));
        }
        Ok(Some(dir))
    }
}

impl Action {
    /// The case the call selects, and a label for messages (` with action=set`).
    fn case(&self, params: &JsonObject) -> Result<(String, &Case), ToolError> {
        match &self.cases {
            Cases::One(case) => Ok((String::new(), case)),
            Cases::By { param, cases } => {
                let value = params.get(param).and_then(Value::as_str).unwrap_or("");
                let case = cases.get(value).ok_or_else(|| {
                    ToolError::new(format!(
                        "{param} must be one of {}",
                        cases.keys().cloned().collect::<Vec<_>>().join(", ")
                    ))
                })?;
                Ok((format!(" with {param}={value}"), case))
            }
        }
    }
}

/// What a run produced, as text and structure.
struct Report<'a> {
    tool: &'a str,
    mode: Mode,
    shown: &'a str,
    command: &'a [String],
    program: Option<&'a Path>,
    cwd: Option<&'a Path>,
}

impl Report<'_> {
    fn output(&self, finished: Option<&Finished>, note: &str) -> ToolOutput {
        let (tool, shown) = (self.tool, self.shown);
        let text = match (self.mode, finished) {
            (Mode::Preview, _) | (_, None) => format!(
                "Dry run: nothing was run. Call {tool} again with apply: true to run:\n  {shown}{note}"
            ),
            (mode, Some(finished)) => {
                let ending = ending_text(finished.ending);
                let head = match mode {
                    Mode::DryRun => format!(
                        "Dry run (nothing was changed): `{shown}` {ending}. Call {tool} again with apply: true to do it for real."
                    ),
                    Mode::Apply => format!("Ran for real: `{shown}` {ending}."),
                    _ => format!("`{shown}` {ending}."),
                };
                format!("{head}\n\n{}", output_block(finished))
            }
        };
        let mut structured = json!({
            "mode": self.mode.as_str(),
            "ran": finished.is_some(),
            "command": self.command,
            "program": self.program.map(|p| p.display().to_string()),
            "cwd": self.cwd.map(|p| p.display().to_string()),
        });
        if let Some(finished) = finished {
            let (code, signal) = match finished.ending {
                Ending::Exited(code) => (Some(code), None),
                Ending::Signalled(signal) => (None, Some(signal)),
                Ending::TimedOut => (None, None),
            };
            structured["exit_code"] = code.into();
            structured["signal"] = signal.into();
            structured["output"] = finished.output.clone().into();
            structured["truncated_bytes"] = finished.dropped.into();
            structured["left_running"] = finished.left_running.into();
        }
        ToolOutput::new(text, structured)
    }
}

fn ending_text(ending: Ending) -> String {
    match ending {
        Ending::Exited(0) => "exited with code 0".into(),
        Ending::Exited(code) => format!("failed with exit code {code}"),
        Ending::Signalled(signal) => format!("was killed by signal {signal}"),
        Ending::TimedOut => "timed out".into(),
    }
}

/// The captured output, with a note in front when its start was dropped
/// and one after when processes it started kept running.
fn output_block(finished: &Finished) -> String {
    let mut body = if finished.output.trim().is_empty() {
        "(no output)".to_owned()
    } else {
        finished.output.trim_end().to_owned()
    };
    if finished.left_running {
        body.push_str(
            "\n[processes it started still held its output when it exited; they were left running, and what they print later is not shown]",
        );
    }
    if finished.dropped == 0 {
        body
    } else {
        format!(
            "[output truncated: the first {} bytes were dropped; the last {} follow]\n{body}",
            finished.dropped,
            finished.output.len()
        )
    }
}

/// The command as a person would type it: arguments quoted where a shell
/// would need it. For display only; nothing is ever run through a shell.
fn display_command(program: &str, args: &[String]) -> String {
    std::iter::once(program)
        .chain(args.iter().map(String::as_str))
        .map(|arg| {
            let plain = !arg.is_empty()
                && arg
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "@%+=:,./_-".contains(c));
            if plain {
                arg.to_owned()
            } else {
                format!("'{}'", arg.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether a parameter is given, for a case's `required`.
fn is_present(value: Option<&Value>) -> bool {
    !matches!(value, None | Some(Value::Null)) && value.and_then(Value::as_str) != Some("")
}

fn seconds(key: &str, value: f64, max: f64, zero_ok: bool) -> Result<Duration, ConfigError> {
    let low_ok = if zero_ok { value >= 0.0 } else { value > 0.0 };
    if value.is_finite() && low_ok && value <= max {
        Ok(Duration::from_secs_f64(value))
    } else {
        let low = if zero_ok { "0" } else { "more than 0" };
        Err(ConfigError::new(
            key,
            format!("must be {low} and at most {max} seconds (got {value})"),
        ))
    }
}

/// The child's whole environment: allow-listed variables from `environment`,
/// then the declared ones.
fn child_environment(
    config: &CommandsConfig,
    environment: impl IntoIterator<Item = (String, String)>,
) -> Result<Vec<(String, String)>, ConfigError> {
    for (i, name) in config.env_allow.iter().enumerate() {
        if !is_env_name(name) {
            return Err(ConfigError::new(
                format!("commands.env_allow[{i}]"),
                format!("{name:?} is not a variable name"),
            ));
        }
    }
    let mut env: BTreeMap<String, String> = environment
        .into_iter()
        .filter(|(k, _)| config.env_allow.contains(k))
        .collect();
    for (name, value) in &config.env {
        if !is_env_name(name) || value.contains('\0') {
            return Err(ConfigError::new(
                format!("commands.env.{name}"),
                "is not a usable variable (a name without `=`, values without NUL)",
            ));
        }
        env.insert(name.clone(), value.clone());
    }
    Ok(env.into_iter().collect())
}

/// Checks one action and builds it and its tool definition.
fn compile_action(
    key: &str,
    config: &ActionConfig,
    default_timeout: Duration,
) -> Result<(Action, Tool), ConfigError> {
    let action_timeout = match config.timeout_s {
        Some(t) => seconds(&format!("{key}.timeout_s"), t, MAX_TIMEOUT_S, false)?,
        None => default_timeout,
    };
    if config.kind == ActionKind::Status {
        check_status_action(key, config)?;
    }
    if config.switch.is_none() && !config.cases.is_empty() {
        return Err(ConfigError::new(
            format!("{key}.cases"),
            "cases need `switch`: the parameter whose value selects the case",
        ));
    }
    let install = config.kind == ActionKind::Install;
    if install && config.switch.is_some() {
        return Err(ConfigError::new(
            format!("{key}.switch"),
            "an install action has a single command; remove switch",
        ));
    }
    let mutating_any = install
        || match &config.switch {
            None => config.mutating,
            Some(_) => config
                .cases
                .values()
                .any(|c| c.mutating.unwrap_or(config.mutating)),
        };
    let apply = json!({
        "type": "boolean",
        "description": "Omitted or false: a dry run that changes nothing. true: run it for real."
    });
    let extra: Vec<(&str, Value)> = if mutating_any {
        vec![("apply", apply)]
    } else {
        Vec::new()
    };
    let schema = InputSchema::compile(
        &format!("{key}.input_schema"),
        &config.input_schema,
        &["apply"],
        &extra,
    )?;
    let cwd = config
        .cwd
        .as_ref()
        .map(|raw| compile_text(&format!("{key}.cwd"), raw, &schema))
        .transpose()?;

    let defaults = CaseConfig::default();
    let cases = match &config.switch {
        None => Cases::One(compile_case(
            key,
            key,
            config,
            &defaults,
            install,
            action_timeout,
            &schema,
        )?),
        Some(param) => {
            let values = switch_values(key, param, &schema)?;
            let mut cases = BTreeMap::new();
            for value in &values {
                let case_key = format!("{key}.cases.{value}");
                let case_config = config.cases.get(value).ok_or_else(|| {
                    ConfigError::new(
                        format!("{key}.cases"),
                        format!(
                            "{param} can be {value:?}, which has no case; add `{value} = {{}}` (or its settings) to cases"
                        ),
                    )
                })?;
                let case = compile_case(
                    key,
                    &case_key,
                    config,
                    case_config,
                    false,
                    action_timeout,
                    &schema,
                )?;
                cases.insert(value.clone(), case);
            }
            if let Some(extra) = config.cases.keys().find(|k| !values.contains(*k)) {
                return Err(ConfigError::new(
                    format!("{key}.cases.{extra}"),
                    format!(
                        "{extra:?} is not a value of {param} (its enum is {})",
                        values.join(", ")
                    ),
                ));
            }
            Cases::By {
                param: param.clone(),
                cases,
            }
        }
    };
    if install {
        check_install_argv(key, &config.argv)?;
    }

    let read_only = config.read_only.unwrap_or(!mutating_any);
    let mut tool = Tool::new(
        config.tool.clone(),
        config.description.clone(),
        schema.exposed(),
    )
    .with_raw_output_schema(if config.kind == ActionKind::Status {
        status_output_schema()
    } else {
        run_output_schema()
    })
    .with_annotations(
        ToolAnnotations::new()
            .read_only(read_only)
            .destructive(mutating_any)
            .idempotent(read_only)
            .open_world(true),
    );
    if let Some(title) = &config.title {
        tool = tool.with_title(title.clone());
    }
    Ok((
        Action {
            kind: config.kind,
            schema,
            cwd,
            cases,
            timeout: action_timeout,
        },
        tool,
    ))
}

/// Merges a case's settings over the action's and checks them.
fn compile_case(
    action_key: &str,
    case_key: &str,
    action: &ActionConfig,
    case: &CaseConfig,
    force_mutating: bool,
    action_timeout: Duration,
    schema: &InputSchema,
) -> Result<Case, ConfigError> {
    let (argv_key, templates): (String, &[ArgTemplate]) = match &case.argv {
        Some(argv) => (format!("{case_key}.argv"), argv),
        None => (format!("{action_key}.argv"), &action.argv),
    };
    let argv = Argv::compile(&argv_key, templates, schema)?;
    let mutating = force_mutating || case.mutating.unwrap_or(action.mutating);
    let pick = |own: &Option<Vec<String>>, field: &str, inherited: &[String]| {
        let (key, list) = match own {
            Some(list) => (format!("{case_key}.{field}"), list.clone()),
            None => (format!("{action_key}.{field}"), inherited.to_vec()),
        };
        if !list.is_empty() && !mutating {
            return Err(ConfigError::new(
                key,
                "only applies to mutating cases; set mutating = true or remove it",
            ));
        }
        if let Some(bad) = list.iter().find(|a| a.contains('\0')) {
            return Err(ConfigError::new(
                key,
                format!("{bad:?} contains a NUL character"),
            ));
        }
        Ok(list)
    };
    let dry_run_args = pick(&case.dry_run_args, "dry_run_args", &action.dry_run_args)?;
    let apply_args = pick(&case.apply_args, "apply_args", &action.apply_args)?;
    let (interactive_key, interactive) = match &case.interactive {
        Some(text) => (format!("{case_key}.interactive"), Some(text.clone())),
        None => (
            format!("{action_key}.interactive"),
            action.interactive.clone(),
        ),
    };
    if let Some(text) = &interactive {
        check_not_blank(&interactive_key, text)?;
    }
    let (required_key, required) = match &case.required {
        Some(list) => (format!("{case_key}.required"), list.clone()),
        None => (format!("{action_key}.required"), action.required.clone()),
    };
    for (j, name) in required.iter().enumerate() {
        if schema.property(name).is_none() {
            return Err(ConfigError::new(
                format!("{required_key}[{j}]"),
                format!("`{name}` is not a declared parameter"),
            ));
        }
    }
    let timeout = match case.timeout_s {
        Some(t) => seconds(&format!("{case_key}.timeout_s"), t, MAX_TIMEOUT_S, false)?,
        None => action_timeout,
    };
    Ok(Case {
        argv,
        mutating,
        dry_run_args,
        apply_args,
        interactive,
        required,
        timeout,
    })
}

/// The string values of the `switch` parameter's enum.
fn switch_values(key: &str, param: &str, schema: &InputSchema) -> Result<Vec<String>, ConfigError> {
    let at = format!("{key}.switch");
    let property = schema
        .property(param)
        .ok_or_else(|| ConfigError::new(&at, format!("`{param}` is not a declared parameter")))?;
    let values: Option<Vec<String>> =
        property
            .get("enum")
            .and_then(Value::as_array)
            .and_then(|values| {
                values
                    .iter()
                    .map(|v| v.as_str().map(str::to_owned))
                    .collect()
            });
    let values = values.filter(|v| !v.is_empty()).ok_or_else(|| {
        ConfigError::new(
            &at,
            format!("`{param}` must declare an enum of strings, one per case"),
        )
    })?;
    let required = schema
        .exposed()
        .get("required")
        .and_then(Value::as_array)
        .is_some_and(|r| r.iter().any(|n| n.as_str() == Some(param)));
    if !required && property.get("default").is_none() {
        return Err(ConfigError::new(
            &at,
            format!(
                "`{param}` must be required or have a default, so that every call selects a case"
            ),
        ));
    }
    Ok(values)
}

fn check_status_action(key: &str, config: &ActionConfig) -> Result<(), ConfigError> {
    let has_params = config
        .input_schema
        .get("properties")
        .and_then(Value::as_object)
        .is_some_and(|p| !p.is_empty());
    let extra = [
        ("argv", !config.argv.is_empty()),
        ("input_schema", has_params),
        ("cwd", config.cwd.is_some()),
        ("switch", config.switch.is_some()),
        ("mutating", config.mutating),
        ("dry_run_args", !config.dry_run_args.is_empty()),
        ("apply_args", !config.apply_args.is_empty()),
        ("interactive", config.interactive.is_some()),
        ("required", !config.required.is_empty()),
    ];
    match extra.iter().find(|(_, present)| *present) {
        Some((field, _)) => Err(ConfigError::new(
            format!("{key}.{field}"),
            "a status action runs `program` with `version_args` and takes no parameters; remove this",
        )),
        None => Ok(()),
    }
}

fn check_install_argv(key: &str, argv: &[ArgTemplate]) -> Result<(), ConfigError> {
    match argv.first() {
        Some(ArgTemplate::Text(program)) if !program.is_empty() && !program.contains('{') => Ok(()),
        _ => Err(ConfigError::new(
            format!("{key}.argv[0]"),
            "an install action's argv starts with the installer program, written plainly (e.g. \"npm\")",
        )),
    }
}

/// The install command as shown in hints: the install action rendered with
/// its parameters' defaults.
fn install_command(key: &str, tool: &str, action: &Action) -> Result<String, ConfigError> {
    let unusable = |why: String| {
        ConfigError::new(
            format!("{key}.input_schema"),
            format!(
                "the install command is shown as a hint when the program is missing, so it must render from defaults alone: {why}"
            ),
        )
    };
    let params = action
        .schema
        .check(tool, JsonObject::new())
        .map_err(|e| unusable(e.message().to_owned()))?;
    let Cases::One(case) = &action.cases else {
        return Err(unusable("it has cases".into()));
    };
    let rendered = case
        .argv
        .render(&params)
        .map_err(|e| unusable(e.message().to_owned()))?;
    let Some((program, args)) = rendered.args.split_first() else {
        return Err(unusable("it renders to nothing".into()));
    };
    Ok(display_command(program, args))
}

fn run_output_schema() -> Arc<JsonObject> {
    let schema = json!({
        "type": "object",
        "properties": {
            "mode": {"enum": ["run", "dry_run", "preview", "apply"]},
            "ran": {"type": "boolean"},
            "command": {"type": "array", "items": {"type": "string"}},
            "program": {"type": ["string", "null"]},
            "cwd": {"type": ["string", "null"]},
            "exit_code": {"type": ["integer", "null"]},
            "signal": {"type": ["integer", "null"]},
            "output": {"type": "string"},
            "truncated_bytes": {"type": "integer"},
            "left_running": {"type": "boolean"}
        },
        "required": ["mode", "ran", "command"]
    });
    Arc::new(schema.as_object().cloned().unwrap_or_default())
}

fn status_output_schema() -> Arc<JsonObject> {
    let schema = json!({
        "type": "object",
        "properties": {
            "program": {"type": "string"},
            "installed": {"type": "boolean"},
            "path": {"type": ["string", "null"]},
            "version": {"type": ["string", "null"]},
            "install": {"type": "string"},
            "install_tool": {"type": "string"}
        },
        "required": ["program", "installed"]
    });
    Arc::new(schema.as_object().cloned().unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_displayed_quoted() {
        assert_eq!(
            display_command(
                "imq",
                &["ctl".into(), "a b".into(), "it's".into(), "".into()]
            ),
            r"imq ctl 'a b' 'it'\''s' ''"
        );
        assert_eq!(
            display_command(
                "npm",
                &["install".into(), "-g".into(), "@imqueue/cli@latest".into()]
            ),
            "npm install -g @imqueue/cli@latest"
        );
    }

    #[test]
    fn durations_are_bounded() {
        assert!(seconds("k", 0.0, 10.0, false).is_err());
        assert!(seconds("k", 0.0, 10.0, true).is_ok());
        assert!(seconds("k", f64::NAN, 10.0, true).is_err());
        assert_eq!(seconds("k", 11.0, 10.0, true).unwrap_err().key(), "k");
        assert_eq!(
            seconds("k", 1.5, 10.0, false).unwrap(),
            Duration::from_millis(1500)
        );
    }
}
