//! `switchboard`: connects AI agents to chat channels and tools over MCP.
//!
//! - [`cli`] — the command line.
//! - [`config`] — defaults, file, environment and flags, layered.
//! - [`serve`] — assembles toolsets and transports and runs until shutdown.
//! - [`mcp`] — the MCP server handler over the tool registry.
//! - [`transport`] — stdio, Streamable HTTP, legacy SSE.
//! - [`shim`] — `switchboard shim`, the stdio MCP relay to an app's socket.
//! - [`terminal`] — `switchboard tail` and `say`, for a human at a terminal.
//!
//! Exit status: 0 after a clean shutdown, 2 for bad configuration or usage,
//! 1 for a failure at run time.

mod cli;
mod config;
mod lines;
mod logging;
mod mcp;
mod serve;
mod shim;
mod terminal;
mod transport;

use std::process::ExitCode;

use clap::Parser;

use crate::{cli::Command, config::ConfigError};

/// Runs a small client command on a single-threaded runtime.
fn current_thread(
    task: impl std::future::Future<Output = anyhow::Result<()>>,
) -> anyhow::Result<()> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(task)
}

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    let env = |name: &str| std::env::var(name).ok();
    let result = match cli.command {
        Command::Serve(args) => match config::Config::load(&args, &env) {
            Ok(config) => serve::run(config),
            Err(e) => Err(e.into()),
        },
        Command::Shim(args) => {
            if let Some(file) = &args.log_file
                && let Err(e) = logging::init("info", Some(file))
            {
                eprintln!("switchboard shim: {e:#}");
                return ExitCode::from(2);
            }
            shim::run(shim::Target::from_args(&args))
        }
        Command::Tail(args) => current_thread(terminal::tail(
            cli::daemon_socket(&args.socket),
            args.channel,
            args.limit,
            !args.no_follow,
        )),
        Command::Say(args) => current_thread(terminal::say(
            cli::daemon_socket(&args.socket),
            args.channel,
            args.text,
            args.nick,
        )),
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
