//! `switchboard-shim`: the shim alone, the process `switchboard shim`
//! becomes. It links only the shim (no toolsets, no HTTP, no SQLite), so
//! the one an agent session keeps running starts fast and stays small.
//! Same flags as `switchboard shim`; see the `switchboard-shim` crate.

use std::{io::Write as _, process::ExitCode};

#[derive(Debug, clap::Parser)]
#[command(
    name = "switchboard-shim",
    version,
    about = "The stdio MCP server an agent CLI spawns: relays tools of a running app"
)]
struct Cli {
    #[command(flatten)]
    args: switchboard_shim::ShimArgs,
}

fn main() -> ExitCode {
    let cli: Cli = switchboard_shim::parse_command_line().unwrap_or_else(|e| e.exit());
    match switchboard_shim::run(&cli.args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Not eprintln!, which panics when stderr is a closed pipe.
            let _ = writeln!(std::io::stderr(), "switchboard-shim: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}
