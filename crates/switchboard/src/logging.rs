//! Logging to stderr or a file, never to stdout (stdout may carry MCP).

use std::{fs::OpenOptions, io::IsTerminal, path::Path, sync::Mutex};

use anyhow::Context;
use tracing_subscriber::EnvFilter;

/// Installs the global subscriber. `filter` was validated with the config.
pub fn init(filter: &str, file: Option<&Path>) -> anyhow::Result<()> {
    let builder = tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::new(filter))
        .with_target(false);
    match file {
        Some(path) => {
            let file = OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .with_context(|| format!("cannot open the log file {}", path.display()))?;
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
