//! What a run reports: the text an agent reads (mode, command, ending, the
//! output's tail) and the same as `structuredContent`, with its schema.

use std::{path::Path, sync::Arc};

use serde_json::json;
use switchboard_toolset::{JsonObject, ToolOutput};

use super::{
    Mode,
    runner::{Ending, Finished},
};

/// What a run produced, as text and structure.
pub(super) struct Report<'a> {
    pub(super) tool: &'a str,
    pub(super) mode: Mode,
    pub(super) shown: &'a str,
    pub(super) command: &'a [String],
    pub(super) program: Option<&'a Path>,
    pub(super) cwd: Option<&'a Path>,
}

impl Report<'_> {
    pub(super) fn output(&self, finished: Option<&Finished>, note: &str) -> ToolOutput {
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

pub(super) fn ending_text(ending: Ending) -> String {
    match ending {
        Ending::Exited(0) => "exited with code 0".into(),
        Ending::Exited(code) => format!("failed with exit code {code}"),
        Ending::Signalled(signal) => format!("was killed by signal {signal}"),
        Ending::TimedOut => "timed out".into(),
    }
}

/// The captured output, with a note in front when its start was dropped
/// and one after when processes it started kept running.
pub(super) fn output_block(finished: &Finished) -> String {
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
            "[output truncated: the first {} bytes were dropped; the rest follows]\n{body}",
            finished.dropped,
        )
    }
}

/// The command as a person would type it: arguments quoted where a shell
/// would need it. For display only; nothing is ever run through a shell.
pub(super) fn display_command(program: &str, args: &[String]) -> String {
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

pub(super) fn run_output_schema() -> Arc<JsonObject> {
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

pub(super) fn status_output_schema() -> Arc<JsonObject> {
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
}
