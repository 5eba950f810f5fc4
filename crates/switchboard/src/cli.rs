//! The command line: subcommands and flags.
//!
//! Flags only record what the user typed (`None` when absent); layering them
//! over the environment and the config file is `config`'s job.

use std::{net::SocketAddr, path::PathBuf};

use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "switchboard",
    version,
    about = "Connects AI agents to chat channels and tools over the Model Context Protocol"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve MCP: Streamable HTTP at /mcp and legacy SSE at /sse (default), or stdio.
    Serve(ServeArgs),
}

#[derive(Debug, Default, Args)]
pub struct ServeArgs {
    /// TOML config file (also SWITCHBOARD_CONFIG).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Serve one MCP client on stdin/stdout; HTTP stays off unless --http is given too.
    #[arg(long)]
    pub stdio: bool,
    /// Listen for HTTP on ADDR (default 127.0.0.1:8090).
    #[arg(long, value_name = "ADDR", conflicts_with = "no_http")]
    pub http: Option<SocketAddr>,
    /// Do not serve HTTP.
    #[arg(long)]
    pub no_http: bool,
    /// Allow a non-loopback --http address without a bearer token.
    #[arg(long)]
    pub insecure_no_auth: bool,
    /// Where the history database lives (default $XDG_DATA_HOME/switchboard).
    #[arg(long, value_name = "DIR", conflicts_with = "ephemeral")]
    pub data_dir: Option<PathBuf>,
    /// Keep the history in memory only; it is gone when switchboard exits.
    #[arg(long)]
    pub ephemeral: bool,
    /// Write logs to FILE instead of stderr.
    #[arg(long, value_name = "FILE")]
    pub log_file: Option<PathBuf>,
}
