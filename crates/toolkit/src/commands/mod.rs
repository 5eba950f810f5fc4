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
//!
//! The parts: `compile` turns the config into actions (once, at start),
//! [`argv`] renders their templates, [`runner`] runs a process under the
//! rules above, `report` words what happened; this file dispatches a call.

pub mod argv;
mod compile;
mod report;
pub mod runner;

use std::{collections::BTreeMap, path::PathBuf, time::Duration};

use serde_json::{Value, json};
use switchboard_toolset::{
    Caller, JsonObject, Session, ToolError, ToolFuture, ToolId, ToolOutput, ToolSpec, ToolTable,
    Toolset,
};

use self::{
    argv::{Argv, Text},
    report::{Report, display_command, ending_text, output_block},
    runner::{Ending, Invocation, find_program, not_executable, path_of},
};
use crate::{config::ActionKind, schema::InputSchema};

/// The commands tools of one config.
pub struct CommandTools {
    program: String,
    base_dir: PathBuf,
    working_dir: Option<PathBuf>,
    env: Vec<(String, String)>,
    version_args: Vec<String>,
    grace: Duration,
    max_output: usize,
    /// Each tool with its position in `actions`.
    tools: ToolTable<usize>,
    actions: Vec<Action>,
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
    /// Whether some case of it changes things (and so waits for `apply`).
    fn mutating(&self) -> bool {
        match &self.cases {
            Cases::One(case) => case.mutating,
            Cases::By { cases, .. } => cases.values().any(|case| case.mutating),
        }
    }

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

impl Toolset for CommandTools {
    fn name(&self) -> &str {
        "commands"
    }

    fn tools(&self) -> &[ToolSpec] {
        self.tools.specs()
    }

    fn instructions(&self, _session: Option<&Session>) -> Option<String> {
        let named = |pick: &dyn Fn(&Action) -> bool| -> Vec<&str> {
            self.tools
                .entries()
                .filter(|&(&index, _)| pick(&self.actions[index]))
                .map(|(_, spec)| spec.name.as_str())
                .collect()
        };
        let all = named(&|_| true);
        if all.is_empty() {
            return None;
        }
        let mut text = format!(
            "Run {} only through its tools ({}); no other command and no shell.",
            self.program,
            all.join(", ")
        );
        let mutating = named(&Action::mutating);
        if !mutating.is_empty() {
            text.push_str(&format!(
                " {} change things: without apply: true they run as a dry run or only show the \
command (the result's mode says which); call again with apply: true to carry it out.",
                mutating.join(", ")
            ));
        }
        if let Some(status) = named(&|a| a.kind == ActionKind::Status).first() {
            text.push_str(&format!(
                " {status} says whether {} is installed, and its version.",
                self.program
            ));
        }
        Some(text)
    }

    fn call<'a>(&'a self, tool: ToolId, args: JsonObject, _caller: &'a Caller) -> ToolFuture<'a> {
        let (index, spec) = self.tools.get(tool);
        let (tool, action) = (spec.name.as_str(), &self.actions[index]);
        Box::pin(async move {
            let mut params = action.schema.check(tool, args)?;
            // An empty text renders as no argument at all: a required one
            // would let the next argument (a dry-run flag) take its place.
            if let Some(empty) = action
                .schema
                .required()
                .find(|name| params.get(*name).and_then(Value::as_str) == Some(""))
            {
                return Err(ToolError::new(format!(
                    "{tool}: {empty} is required and must not be empty"
                )));
            }
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
        let (mode, program, args) = self.command_line(action, case, &params, apply)?;
        let shown = display_command(&program, &args);
        check_runnable(tool, &label, case, &shown, &params)?;
        let found = find_program(&program, path_of(&self.env), &self.base_dir);
        let cwd = match &action.cwd {
            Some(template) => template.render_plain(&params)?,
            None => None,
        };
        // Without one, the program runs where switchboard does; reports
        // name that directory rather than none.
        let cwd = self
            .working_dir(cwd)?
            .or_else(|| std::env::current_dir().ok());
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

    /// The mode a call runs in and the command it runs: the case's argv
    /// with its apply or dry-run options, under the configured program (an
    /// install action names its own).
    fn command_line(
        &self,
        action: &Action,
        case: &Case,
        params: &JsonObject,
        apply: bool,
    ) -> Result<(Mode, String, Vec<String>), ToolError> {
        let mut rendered = case.argv.render(params)?;
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
        Ok((mode, program, args))
    }

    /// Where the program is, looked up as a run would look it up, or what
    /// to tell the user when it cannot be run (with the install hint).
    pub fn locate_program(&self) -> Result<PathBuf, String> {
        find_program(&self.program, path_of(&self.env), &self.base_dir)
            .ok_or_else(|| self.missing_text(&self.program))
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

    /// What to say when `program` cannot be run: a path that names no
    /// executable file, or a name not on the child's `PATH`.
    fn missing_text(&self, program: &str) -> String {
        let mut text = if program.contains('/') {
            let path = self.base_dir.join(program);
            format!("{program} cannot be run: {}.", not_executable(&path))
        } else {
            let path = path_of(&self.env).unwrap_or("(PATH is not set)");
            format!(
                "{program} is not installed: it was not found on the PATH commands run with ({path})."
            )
        };
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
    /// configured working directory), else the configured one. A `cwd`
    /// is resolved (`..` and links), as reports show it.
    fn working_dir(&self, cwd: Option<String>) -> Result<Option<PathBuf>, ToolError> {
        let Some(cwd) = cwd else {
            return Ok(self.working_dir.clone());
        };
        let dir = match &self.working_dir {
            Some(base) => base.join(&cwd),
            None => PathBuf::from(&cwd),
        };
        match dir.canonicalize() {
            Ok(resolved) if resolved.is_dir() => Ok(Some(resolved)),
            _ => Err(ToolError::new(format!(
                "cwd: {} is not a directory",
                dir.display()
            ))),
        }
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

/// Refuses, before anything runs, a case that needs a terminal or a call
/// that leaves out a parameter the case requires.
fn check_runnable(
    tool: &str,
    label: &str,
    case: &Case,
    shown: &str,
    params: &JsonObject,
) -> Result<(), ToolError> {
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
    Ok(())
}

/// Whether a parameter is given, for a case's `required`.
fn is_present(value: Option<&Value>) -> bool {
    !matches!(value, None | Some(Value::Null)) && value.and_then(Value::as_str) != Some("")
}
