//! The bodies of the `daemon_stdio` and `config_toml` fuzz targets (`fuzz/`
//! at the repository root), public with the `fuzzing` feature; the tests
//! here replay their seed corpora on a stable toolchain.

use std::{path::PathBuf, time::Duration};

use switchboard_shim::fuzzing::{Answers, check_replies, written_by};
use switchboard_toolset::Registry;
use tokio_util::sync::CancellationToken;

use crate::{
    cli::ServeArgs,
    config::{Config, ConfigError},
    mcp::{Drain, McpServer},
};

/// The daemon's tools while fuzzing its stdio transport: a catalog, which
/// answers `tools/call` without touching anything outside the process.
const STDIO_CONFIG: &str = r#"
[[catalog]]
tool = "list_packages"
description = "Packages to pick from."

[[catalog.entries]]
name = "@imqueue/rpc"
summary = "RPC over a message queue."
install = "npm i @imqueue/rpc"
"#;

/// The most a session may take before it counts as hung.
const SESSION_DEADLINE: Duration = Duration::from_secs(30);

/// Serves `data` as one client's stdin through `switchboard serve
/// --stdio` (framing, classification, rmcp and the direct `tools/call`
/// path), and checks that stdout carries only well-formed JSON-RPC replies
/// to ids the client sent, at most one a line, and that the session ends
/// when stdin does.
pub fn daemon_stdio(data: &[u8]) {
    let output = stdio_session(data);
    check_replies(data, &output, Answers::AtMostOneALine);
}

/// What `switchboard serve --stdio` writes to stdout when `data` is its
/// stdin.
fn stdio_session(data: &[u8]) -> Vec<u8> {
    let config = Config::from_toml(STDIO_CONFIG).expect("the fuzz config parses");
    let toolkit = config.build_toolkit().expect("the fuzz config builds");
    let registry = Registry::new(toolkit.toolsets).expect("the fuzz tools register");
    let server = McpServer::new(registry, Drain::default(), None);
    let input = std::io::Cursor::new(data.to_vec());
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime starts")
        .block_on(written_by(|stdout| async {
            let session = crate::transport::stdio::serve(
                server,
                None,
                input,
                stdout,
                CancellationToken::new(),
                CancellationToken::new(),
            );
            tokio::time::timeout(SESSION_DEADLINE, session)
                .await
                .expect("the session ends when stdin does");
        }))
}

/// The environment the config loader sees while fuzzing: one secret for
/// `secret_env` and `password_env` keys to name.
fn fuzz_env(name: &str) -> Option<String> {
    (name == "FUZZ_SECRET").then(|| "fuzz-secret-0123456789".to_owned())
}

/// Loads `data` as the config file of `switchboard serve` (over the
/// embedded `imqueue` profile when it starts with `#profile`) and builds
/// its toolkit, as `serve` does before opening anything: it either loads or
/// fails with a [`ConfigError`] that names the key, variable or file at
/// fault; it never panics.
pub fn config_toml(data: &[u8]) {
    let path = config_file();
    std::fs::write(&path, data).expect("the fuzz config file is writable");
    let args = ServeArgs {
        config: Some(path.clone()),
        profile: data.starts_with(b"#profile").then(|| "imqueue".to_owned()),
        ..ServeArgs::default()
    };
    let loaded = Config::load(&args, &fuzz_env).and_then(|config| config.build_toolkit());
    let Err(error) = loaded else {
        return;
    };
    let message = error.to_string();
    match &error {
        ConfigError::Invalid { key, problem } => {
            assert!(
                is_config_key(key),
                "the error names no config key: {message}"
            );
            assert!(
                !problem.trim().is_empty(),
                "the error says nothing: {message}"
            );
        }
        ConfigError::Parse {
            path: named,
            message: problem,
        } => {
            assert!(
                named.contains(&*path.to_string_lossy()),
                "the error names no file: {message}"
            );
            assert!(
                !problem.trim().is_empty(),
                "the error says nothing: {message}"
            );
        }
        ConfigError::Read { path: named, .. } => {
            assert_eq!(named, &*path.to_string_lossy(), "{message}");
        }
        ConfigError::Env { .. } | ConfigError::Profile { .. } => {
            panic!("the environment and the profile are fixed, yet: {message}");
        }
    }
}

/// Whether `key` starts with a top-level key of the config file (or names
/// the flag or variable that set it).
fn is_config_key(key: &str) -> bool {
    const TOP_LEVEL: &[&str] = &[
        "instructions",
        "data_dir",
        "ephemeral",
        "log",
        "http",
        "socket",
        "chat",
        "docs",
        "catalog",
        "templates",
        "commands",
        "prompts",
    ];
    let first = key.split(['.', '[', ' ']).next().unwrap_or_default();
    TOP_LEVEL.contains(&first)
}

/// This process's scratch config file: the loader reads a file, as it does
/// for `--config`.
fn config_file() -> PathBuf {
    static FILE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    FILE.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("switchboard-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("the fuzz scratch directory is creatable");
        dir.join("config.toml")
    })
    .clone()
}

#[cfg(test)]
#[path = "../../../fuzz/replay.rs"]
mod replay;

#[cfg(test)]
mod tests {
    use super::replay;

    #[test]
    fn the_daemon_stdio_seeds_pass_the_fuzz_target() {
        replay::replay("daemon_stdio", 12, super::daemon_stdio);
    }

    #[test]
    fn the_config_seeds_pass_the_fuzz_target() {
        replay::replay("config_toml", 12, super::config_toml);
    }

    /// Found by the `daemon_stdio` target: a line of spaces, tabs or form
    /// feeds got a -32700 reply, unlike in the shim.
    #[test]
    fn blank_lines_get_no_reply() {
        let output = super::stdio_session(b" \n\t\r\n\x0c\n\n");
        assert_eq!(String::from_utf8_lossy(&output), "");
    }

    #[test]
    fn a_config_error_names_its_key() {
        assert!(super::is_config_key("chat.irc.port"));
        assert!(super::is_config_key("http.tokens[0].name"));
        assert!(super::is_config_key("chat.nick (--nick, SWITCHBOARD_NICK)"));
        assert!(!super::is_config_key("port"));
    }
}
