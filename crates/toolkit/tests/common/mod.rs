//! Helpers shared by the integration tests: fake programs in a temp
//! directory, and calls through the `Toolset` trait.

#![allow(dead_code)] // each test binary uses its own subset

use std::{
    fs,
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use serde_json::Value;
use switchboard_toolset::{Caller, JsonObject, ToolError, ToolOutput, Toolset};

/// Writes an executable `/bin/sh` script `name` into `dir`.
pub fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    fs::write(&path, format!("#!/bin/sh\n{body}")).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// A `PATH` with `dir` first, then the system directories the fakes use.
pub fn path_with(dir: &Path) -> String {
    format!("{}:/usr/local/bin:/usr/bin:/bin", dir.display())
}

/// Calls `tool` on `set` with the JSON object `args`.
pub async fn call(set: &dyn Toolset, tool: &str, args: Value) -> Result<ToolOutput, ToolError> {
    let args: JsonObject = args.as_object().cloned().expect("arguments are an object");
    let id = set.tool_id(tool).expect("the toolset has the tool");
    set.call(id, args, &Caller::new("test")).await
}

/// Every call a fake recorded: one argv per call (written by `RECORD`).
pub fn calls(dir: &Path) -> Vec<Vec<String>> {
    let Ok(log) = fs::read_to_string(dir.join("calls.log")) else {
        return Vec::new();
    };
    let mut calls = Vec::new();
    let mut current = Vec::new();
    for line in log.lines() {
        if line == "--end--" {
            calls.push(std::mem::take(&mut current));
        } else {
            current.push(line.to_owned());
        }
    }
    calls
}

/// Shell that appends the script's arguments (one a line) and its working
/// directory to `calls.log` next to the script.
pub const RECORD: &str = r#"here=$(cd "$(dirname "$0")" && pwd)
{ for a in "$@"; do printf '%s\n' "$a"; done; printf 'cwd=%s\n--end--\n' "$(pwd)"; } >> "$here/calls.log"
"#;

/// Reads a pid a fake wrote to `file`, waiting for it to appear.
pub fn read_pid(file: &Path) -> i32 {
    let start = Instant::now();
    loop {
        if let Ok(text) = fs::read_to_string(file)
            && let Ok(pid) = text.trim().parse()
        {
            return pid;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{} never appeared",
            file.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
