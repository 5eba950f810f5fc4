//! The `--mcp-config` file an agent CLI takes to spawn `switchboard shim`.
//!
//! ```
//! use switchboard_relay::{McpConfig, write_mcp_config};
//!
//! let dir = tempfile::tempdir().unwrap();
//! let config = McpConfig::shim("dev.example.terminal").with_command("/usr/bin/switchboard");
//! let path = write_mcp_config(&config, &dir.path().join("mcp.json")).expect("written");
//! let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
//! assert_eq!(
//!     json,
//!     serde_json::json!({"mcpServers": {"dev_example_terminal": {
//!         "command": "/usr/bin/switchboard",
//!         "args": ["shim", "--app-id", "dev.example.terminal"]
//!     }}})
//! );
//! // Then: claude --mcp-config <path>
//! ```

use std::{
    collections::BTreeMap,
    fs::OpenOptions,
    io::{self, Write as _},
    os::unix::fs::OpenOptionsExt,
    path::{Path, PathBuf},
    sync::atomic::{AtomicU64, Ordering},
};

use serde_json::{Value, json};

/// One MCP server entry of an `mcpServers` file: how an agent CLI starts
/// the server (normally `switchboard shim` pointed at an application).
///
/// ```
/// use std::path::Path;
/// use serde_json::json;
/// use switchboard_relay::McpConfig;
///
/// let config = McpConfig::shim("dev.example.editor")
///     .with_command("/opt/switchboard/bin/switchboard")
///     .with_env("RUST_LOG", "debug");
/// assert_eq!(config.server_name, "dev_example_editor");
/// assert_eq!(
///     config.to_json(),
///     json!({"mcpServers": {"dev_example_editor": {
///         "command": "/opt/switchboard/bin/switchboard",
///         "args": ["shim", "--app-id", "dev.example.editor"],
///         "env": {"RUST_LOG": "debug"}
///     }}})
/// );
/// // An application bound at its own path is reached with `--socket`.
/// let config = McpConfig::shim_socket("editor", Path::new("/run/editor.sock"));
/// assert_eq!(config.args, ["shim", "--socket", "/run/editor.sock"]);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpConfig {
    /// The key under `mcpServers`; agents see tools as
    /// `mcp__<server_name>__<tool>`. Letters, digits, `_` and `-` only (CLIs
    /// refuse others), at most 64.
    pub server_name: String,
    /// The program to run.
    pub command: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// Extra environment variables (written only when not empty).
    pub env: BTreeMap<String, String>,
}

impl McpConfig {
    /// `switchboard shim --app-id <app_id>`, named after the app id, with
    /// the command from [`switchboard_command`].
    pub fn shim(app_id: &str) -> Self {
        Self {
            server_name: server_name(app_id),
            command: switchboard_command(),
            args: vec!["shim".into(), "--app-id".into(), app_id.into()],
            env: BTreeMap::new(),
        }
    }

    /// `switchboard shim --socket <socket>`, for an application bound at an
    /// explicit path or under another prefix.
    pub fn shim_socket(name: &str, socket: &Path) -> Self {
        Self {
            server_name: server_name(name),
            command: switchboard_command(),
            args: vec![
                "shim".into(),
                "--socket".into(),
                socket.to_string_lossy().into_owned(),
            ],
            env: BTreeMap::new(),
        }
    }

    /// Sets the program to run (for example `std::env::current_exe()` in
    /// switchboard itself).
    #[must_use]
    pub fn with_command(mut self, command: impl Into<PathBuf>) -> Self {
        self.command = command.into();
        self
    }

    /// Sets the key under `mcpServers` (made valid as in
    /// [`McpConfig::server_name`]).
    #[must_use]
    pub fn with_server_name(mut self, name: &str) -> Self {
        self.server_name = server_name(name);
        self
    }

    /// Adds an environment variable for the server process.
    #[must_use]
    pub fn with_env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(key.into(), value.into());
        self
    }

    /// The file's JSON: `{"mcpServers":{"<name>":{"command":…,"args":[…]}}}`.
    pub fn to_json(&self) -> Value {
        let mut server = json!({
            "command": self.command.to_string_lossy(),
            "args": self.args,
        });
        if !self.env.is_empty() {
            server["env"] = json!(self.env);
        }
        json!({ "mcpServers": { self.server_name.clone(): server } })
    }
}

/// A valid `mcpServers` key made from `name`: characters other than ASCII
/// letters, digits, `_` and `-` become `_`, cut to 64.
fn server_name(name: &str) -> String {
    let name: String = name
        .chars()
        .take(64)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if name.is_empty() {
        "switchboard".into()
    } else {
        name
    }
}

/// Where to find the `switchboard` binary: `$SWITCHBOARD_BIN` when set,
/// else the first `switchboard` on `PATH`, else the bare name (which the
/// agent CLI then looks up on its own `PATH`).
pub fn switchboard_command() -> PathBuf {
    if let Some(bin) = std::env::var_os("SWITCHBOARD_BIN").filter(|b| !b.is_empty()) {
        return PathBuf::from(bin);
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let candidate = dir.join("switchboard");
            if is_executable(&candidate) {
                return candidate;
            }
        }
    }
    PathBuf::from("switchboard")
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The conventional place of an application's config file:
/// `mcp-config.json` beside its socket in its runtime directory.
pub fn mcp_config_path(prefix: &str, app_id: &str) -> PathBuf {
    crate::paths::socket_path(prefix, app_id).with_file_name("mcp-config.json")
}

/// Writes `config` to `path` atomically (a temporary file in the same
/// directory, then a rename), creating missing directories (mode 0700); the
/// file is mode 0600.
///
/// Best effort: returns the path written, or `None` (after logging why) when
/// it could not be written, so the caller can simply leave out the
/// `--mcp-config` flag.
pub fn write_mcp_config(config: &McpConfig, path: &Path) -> Option<PathBuf> {
    let mut text = serde_json::to_string_pretty(&config.to_json()).expect("JSON values serialise");
    text.push('\n');
    match write_atomically(path, text.as_bytes()) {
        Ok(()) => Some(path.to_owned()),
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "cannot write the MCP config");
            None
        }
    }
}

fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let file_name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the path has no file name"))?;
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    crate::socket::create_missing_dirs(dir)?;
    let tmp = dir.join(format!(
        ".{}.{}.{}.tmp",
        file_name.to_string_lossy(),
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let written = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_names_are_made_valid() {
        assert_eq!(server_name("dev.example.app"), "dev_example_app");
        assert_eq!(server_name("my-app_2"), "my-app_2");
        assert_eq!(server_name(""), "switchboard");
        assert_eq!(server_name(&"x".repeat(100)).len(), 64);
    }

    #[test]
    fn the_file_replaces_an_old_one_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a/b/mcp.json");
        let config = McpConfig::shim_socket("daemon", Path::new("/run/x.sock"))
            .with_command("/bin/switchboard")
            .with_env("RUST_LOG", "debug");
        assert_eq!(write_mcp_config(&config, &path), Some(path.clone()));
        let again = config.clone().with_server_name("other");
        assert_eq!(write_mcp_config(&again, &path), Some(path.clone()));
        let json: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(
            json,
            json!({"mcpServers": {"other": {
                "command": "/bin/switchboard",
                "args": ["shim", "--socket", "/run/x.sock"],
                "env": {"RUST_LOG": "debug"}
            }}})
        );
        let names: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["mcp.json"]);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn failure_is_none() {
        let dir = tempfile::tempdir().unwrap();
        let blocker = dir.path().join("file");
        std::fs::write(&blocker, "").unwrap();
        // A directory cannot be made under a regular file.
        assert_eq!(
            write_mcp_config(&McpConfig::shim("x"), &blocker.join("mcp.json")),
            None
        );
        // Nor can a directory be replaced by the file.
        assert_eq!(write_mcp_config(&McpConfig::shim("x"), dir.path()), None);
    }
}
