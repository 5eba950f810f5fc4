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
    /// The stdio MCP server an agent CLI spawns: relays tools of a running app.
    Shim(switchboard_shim::ShimArgs),
    /// Check a config as serve would load it, and probe what it needs: the IRC
    /// server, docs sources, commands program, HTTP address and relay socket.
    Check(ServeArgs),
    /// Print a channel's recent messages, then follow it live.
    Tail(TailArgs),
    /// Post a message to a channel.
    Say(SayArgs),
    /// Write the mcpServers JSON an agent CLI takes with --mcp-config.
    McpConfig(McpConfigArgs),
    /// Copy the history database, consistently, while the daemon keeps writing.
    Backup(BackupArgs),
    /// Print the shell completion script for bash, zsh, fish, elvish or powershell.
    Completions(CompletionsArgs),
    /// Print a manual page (roff), or write them all into a directory.
    Man(ManArgs),
    /// Make per-agent HTTP tokens ([[http.tokens]]).
    Token(TokenArgs),
}

#[derive(Debug, Args)]
pub struct BackupArgs {
    /// The file to write, e.g. history-backup.db (its directory must exist).
    #[arg(value_name = "PATH")]
    pub path: PathBuf,
    /// Replace PATH if it exists.
    #[arg(long)]
    pub force: bool,
    /// The config file serve uses (also SWITCHBOARD_CONFIG).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The profile serve uses (also SWITCHBOARD_PROFILE).
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,
    /// The data dir serve uses (default $XDG_DATA_HOME/switchboard).
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Debug, Args)]
pub struct ManArgs {
    /// The command whose page to print, e.g. serve (default: switchboard's own).
    #[arg(value_name = "COMMAND", conflicts_with = "out")]
    pub command: Option<String>,
    /// Write switchboard.1 and one page per command (switchboard-serve.1, …) into DIR.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct McpConfigArgs {
    /// Where to write it (default: mcp-config.json beside the app's socket); - prints it.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// The application whose tools the shim relays (default: the switchboard daemon).
    #[arg(
        long,
        value_name = "ID",
        default_value = DAEMON_APP_ID,
        conflicts_with = "socket",
        value_parser = switchboard_shim::app_id
    )]
    pub app_id: String,
    /// Relay the application at this socket instead.
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// The server's name under mcpServers (default: the app id).
    #[arg(long)]
    pub name: Option<String>,
}

#[derive(Debug, Args)]
pub struct TailArgs {
    /// The channel, e.g. #general.
    pub channel: String,
    /// How many recent messages to print first (1-500).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=500))]
    pub limit: u32,
    /// Print the history and exit.
    #[arg(long)]
    pub no_follow: bool,
    /// The daemon's relay socket (default: its standard path).
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct SayArgs {
    /// The channel, e.g. #general.
    pub channel: String,
    /// The text; each line is sent as one message.
    pub text: String,
    /// The nick to speak as.
    #[arg(long = "as", value_name = "NICK")]
    pub nick: String,
    /// The daemon's relay socket (default: its standard path).
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
}

/// The daemon's relay socket: `--socket`, or the standard path.
pub fn daemon_socket(socket: &Option<PathBuf>) -> PathBuf {
    socket.clone().unwrap_or_else(|| {
        switchboard_relay::socket_path(switchboard_relay::DEFAULT_PREFIX, DAEMON_APP_ID)
    })
}

pub use switchboard_shim::DAEMON_APP_ID;

#[derive(Debug, Default, Args)]
pub struct ServeArgs {
    /// TOML config file (also SWITCHBOARD_CONFIG).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Start from an embedded profile, e.g. imqueue (also SWITCHBOARD_PROFILE);
    /// --config is merged over it.
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,
    /// Serve one MCP client on stdin/stdout; HTTP stays off unless --http is given too.
    #[arg(long)]
    pub stdio: bool,
    /// Listen for HTTP on ADDR (default 127.0.0.1:8090).
    #[arg(long, value_name = "ADDR", conflicts_with = "no_http", value_parser = crate::config::parse_listen)]
    pub http: Option<SocketAddr>,
    /// Do not serve HTTP.
    #[arg(long)]
    pub no_http: bool,
    /// Serve the relay socket at PATH (default $XDG_RUNTIME_DIR/switchboard/switchboard/relay.sock).
    #[arg(long, value_name = "PATH", conflicts_with = "no_socket")]
    pub socket: Option<PathBuf>,
    /// Do not serve the relay socket.
    #[arg(long)]
    pub no_socket: bool,
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
    /// The agent's chat nick for --stdio (also SWITCHBOARD_NICK, chat.nick).
    #[arg(long, value_name = "NICK")]
    pub nick: Option<String>,
    /// Do not serve the web view at / (http.web = false).
    #[arg(long)]
    pub no_web: bool,
}

#[derive(Debug, Args)]
pub struct TokenArgs {
    #[command(subcommand)]
    pub command: TokenCommand,
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Make a fresh random token for NAME and print the config lines for it.
    New(TokenNewArgs),
}

#[derive(Debug, Args)]
pub struct TokenNewArgs {
    /// Who the token is for (an agent or a person); by default also the nick it speaks as.
    #[arg(value_parser = crate::token::parse_name)]
    pub name: String,
    /// Write the secret to FILE (created, readable by its owner only) instead of printing it.
    #[arg(long, value_name = "FILE")]
    pub file: Option<PathBuf>,
}
