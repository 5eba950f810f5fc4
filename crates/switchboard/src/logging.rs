//! Logging to stderr or a file, never to stdout (stdout may carry MCP).

use std::{fs::OpenOptions, io::IsTerminal, os::unix::fs::OpenOptionsExt, path::Path, sync::Mutex};

use tracing_subscriber::EnvFilter;

use crate::config::ConfigError;

/// Installs the global subscriber. `filter` was validated with the config;
/// a log file that cannot be opened is a config error naming `log.file`.
pub fn init(filter: &str, file: Option<&Path>) -> Result<(), ConfigError> {
    // A line that cannot be written (stderr a closed pipe) is dropped:
    // reporting it would write to the same place, and panic.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::new(filter))
        .with_target(false)
        .log_internal_errors(false);
    match file {
        Some(path) => {
            let file = OpenOptions::new()
                .create(true)
                .append(true)
                // Logs name agents, channels and addresses: the owner's to read.
                .mode(0o600)
                .open(path)
                .map_err(|e| ConfigError::Invalid {
                    key: "log.file".into(),
                    problem: format!(
                        "cannot open {} for appending: {e}; give a file in a directory that exists and is writable",
                        path.display()
                    ),
                })?;
            builder
                .with_ansi(false)
                .with_writer(Mutex::new(file))
                .init();
        }
        None => builder
            .with_ansi(std::io::stderr().is_terminal())
            .with_writer(std::io::stderr)
            .init(),
    }
    Ok(())
}
