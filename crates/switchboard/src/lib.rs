//! `switchboard`: connects AI agents to chat channels and tools over MCP.
//!
//! The program is this library's [`run`]; `main.rs` only chooses the
//! allocator and calls it. Nothing else is public but `fuzzing`, behind the
//! `fuzzing` feature.
//!
//! - `cli` — the command line.
//! - `config` — defaults, file, environment and flags, layered.
//! - `serve` — assembles toolsets and transports and runs until shutdown.
//! - `mcp` — the MCP server handler over the tool registry.
//! - `profiles` — the embedded profiles (`--profile NAME`).
//! - `transport` — stdio, Streamable HTTP, legacy SSE.
//! - `switchboard shim` is the `switchboard-shim` crate (and binary).
//! - `terminal` — `switchboard tail` and `say`, for a human at a terminal.
//! - `backup` — `switchboard backup`: a consistent copy of the history
//!   while the daemon runs.
//! - `packaging` — `switchboard completions` and `man`, generated from the
//!   CLI definitions.
//! - `token` — `switchboard token new`: a fresh secret for `[[http.tokens]]`.
//! - `fuzzing` — the bodies of the `daemon_stdio` and `config_toml` fuzz
//!   targets (with the `fuzzing` feature, which `fuzz/` enables, and in
//!   tests, which replay their seed corpora).
//!
//! Exit status: 0 after a clean shutdown, 2 for bad configuration or usage,
//! 1 for a failure at run time.

mod backup;
mod check;
mod cli;
mod config;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing;
mod logging;
mod mcp;
mod packaging;
mod profiles;
mod serve;
mod terminal;
mod token;
mod transport;

use std::process::ExitCode;

use switchboard_chat::history::BackupError;

use crate::{cli::Command, config::ConfigError};

/// `switchboard mcp-config`: writes the file and prints its path, or with
/// `--out -` prints the JSON itself.
fn write_mcp_config(args: &cli::McpConfigArgs) -> anyhow::Result<()> {
    use switchboard_relay::{DEFAULT_PREFIX, McpConfig, mcp_config_path};
    let mut config = match &args.socket {
        // Absolute: the agent CLI starts the shim in a directory of its own.
        Some(socket) => McpConfig::shim_socket(
            args.name.as_deref().unwrap_or(&args.app_id),
            &std::path::absolute(socket)?,
        ),
        None => McpConfig::shim(&args.app_id),
    };
    if let Some(name) = &args.name {
        config = config.with_server_name(name);
    }
    if let Ok(exe) = std::env::current_exe() {
        let small = exe.with_file_name("switchboard-shim");
        config = if small.is_file() && config.args.first().is_some_and(|a| a == "shim") {
            // The small binary itself: an agent start skips exec'ing this one.
            config.args.remove(0);
            config.with_command(small)
        } else {
            config.with_command(exe)
        };
    }
    if args.out.as_deref() == Some(std::path::Path::new("-")) {
        println!("{:#}", config.to_json());
        return Ok(());
    }
    let out = match &args.out {
        Some(out) => {
            // The app's own directory is made when missing; a file named here
            // goes only where the directory already is.
            if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty())
                && !dir.is_dir()
            {
                return Err(ConfigError::Invalid {
                    key: "--out".into(),
                    problem: format!("{} is not a directory; create it first", dir.display()),
                }
                .into());
            }
            out.clone()
        }
        None => mcp_config_path(DEFAULT_PREFIX, &args.app_id),
    };
    match switchboard_relay::write_mcp_config(&config, &out) {
        Some(path) => {
            println!("{}", path.display());
            Ok(())
        }
        None => anyhow::bail!(
            "cannot write {}; check that its directory is writable",
            out.display()
        ),
    }
}

/// Runs a small client command on a single-threaded runtime.
fn current_thread(
    task: impl std::future::Future<Output = anyhow::Result<()>>,
) -> anyhow::Result<()> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(task)
}

/// `switchboard shim …` becomes the `switchboard-shim` binary beside this
/// one when there is one, as `git foo` runs `git-foo`: the shim runs for
/// every agent session, and the small binary starts faster and needs about
/// half the memory. Without it (or if exec fails) the shim runs in-process.
fn become_small_shim() {
    use std::os::unix::process::CommandExt;
    let mut args = std::env::args_os().skip(1);
    if args.next().is_none_or(|command| command != "shim") {
        return;
    }
    let Ok(exe) = std::env::current_exe() else {
        return;
    };
    let small = exe.with_file_name("switchboard-shim");
    if small.is_file() {
        // exec returns only on failure, and then the shim runs in-process.
        let _ = std::process::Command::new(&small).args(args).exec();
    }
}

/// Writes a line to stderr, if it can: unlike `eprintln!`, which panics
/// when stderr is a closed pipe, turning any exit status into 101.
pub(crate) fn say_to_stderr(line: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// Bad configuration or a request that cannot be carried out as asked
/// (exit status 2), rather than a failure at run time (1).
fn is_usage_error(e: &anyhow::Error) -> bool {
    e.is::<ConfigError>()
        || e.is::<terminal::Misused>()
        || e.downcast_ref().is_some_and(BackupError::is_refusal)
}

/// The whole program: parses the command line, runs the command and says
/// how it ended (see the exit statuses above).
pub fn run() -> ExitCode {
    become_small_shim();
    let cli: cli::Cli = switchboard_shim::parse_command_line().unwrap_or_else(|e| e.exit());
    let env = config::env_var;
    let result = match cli.command {
        Command::Serve(args) => match config::Config::load(&args, &env) {
            Ok(config) => serve::run(config, || config::Config::load(&args, &env)),
            Err(e) => Err(e.into()),
        },
        Command::Check(args) => check::run(&args),
        Command::Shim(args) => match switchboard_shim::run(&args) {
            Ok(()) => Ok(()),
            Err(e) => {
                say_to_stderr(format_args!("switchboard shim: {e}"));
                return ExitCode::from(e.exit_code());
            }
        },
        Command::Tail(args) => current_thread(terminal::tail(
            cli::daemon_socket(&args.socket),
            args.channel,
            args.limit,
            !args.no_follow,
        )),
        Command::McpConfig(args) => write_mcp_config(&args),
        Command::Say(args) => current_thread(terminal::say(
            cli::daemon_socket(&args.socket),
            args.channel,
            args.text,
            args.nick,
        )),
        Command::Backup(args) => backup::run(&args, &env),
        Command::Token(args) => match &args.command {
            cli::TokenCommand::New(new) => token::new(new),
        },
        Command::Completions(args) => packaging::completions(args.shell),
        Command::Man(args) => match &args.out {
            Some(dir) => packaging::write_pages(dir),
            None => packaging::print_page(args.command.as_deref()),
        },
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if is_usage_error(&e) => {
            say_to_stderr(format_args!("switchboard: {e}"));
            ExitCode::from(2)
        }
        Err(e) => {
            say_to_stderr(format_args!("switchboard: {e:#}"));
            ExitCode::FAILURE
        }
    }
}
