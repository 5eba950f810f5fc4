//! `switchboard`: connects AI agents to chat channels and tools over MCP.
//!
//! - [`cli`] — the command line.
//! - [`config`] — defaults, file, environment and flags, layered.
//! - [`serve`] — assembles toolsets and transports and runs until shutdown.
//! - [`mcp`] — the MCP server handler over the tool registry.
//! - [`transport`] — stdio, Streamable HTTP, legacy SSE.
//!
//! Exit status: 0 after a clean shutdown, 2 for bad configuration or usage,
//! 1 for a failure at run time.

mod cli;
mod config;
mod logging;
mod mcp;
mod serve;
mod transport;

use std::process::ExitCode;

use clap::Parser;

use crate::{cli::Command, config::ConfigError};

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    let env = |name: &str| std::env::var(name).ok();
    let result = match cli.command {
        Command::Serve(args) => match config::Config::load(&args, &env) {
            Ok(config) => serve::run(config),
            Err(e) => Err(e.into()),
        },
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.is::<ConfigError>() => {
            eprintln!("switchboard: {e}");
            ExitCode::from(2)
        }
        Err(e) => {
            tracing::error!("{e:#}");
            eprintln!("switchboard: {e:#}");
            ExitCode::FAILURE
        }
    }
}
