//! A small terminal program that offers tools to an AI agent through
//! `switchboard shim`:
//!
//! - `set_session_title {title}` sets this terminal's title (an OSC 0
//!   escape sequence on the terminal) and prints it;
//! - `notify_user {text, bell?}` prints a notification line, and rings the
//!   terminal bell if asked;
//! - `roll_dice {sides?}` appears and disappears at run time (type `dice`
//!   and Enter), to show `notify tools_changed`.
//!
//! Any other line typed into it is pushed to the connected agents as a
//! `claude/channel` event: Claude Code shows it to the model as
//! `<channel source="…" user="…">your line</channel>` (load the server as a
//! channel: `claude --mcp-config <file> --dangerously-load-development-channels server:<name>`).
//!
//! Each call prints which process made it, with its ancestry (the shim, the
//! agent CLI, the shell, the terminal), as an application would use to map
//! a call to the tab that started the agent.
//!
//! # Running it
//!
//! ```text
//! cargo build -p switchboard                      # the shim: target/debug/switchboard
//! cargo run -p switchboard-relay --example terminal_app
//! ```
//!
//! It prints the socket it listens on and the `--mcp-config` file it wrote,
//! which starts `switchboard shim --app-id dev.switchboard.terminal-demo`.
//! In another terminal:
//!
//! ```text
//! claude --mcp-config <that file>
//! ```
//!
//! and ask the agent to "set the session title to something fitting" or to
//! "notify me when you are done". Options:
//!
//! - `--app-id ID` — another app id (and so another socket directory);
//! - `--socket PATH` — listen on PATH instead (the config then says
//!   `shim --socket PATH`).
//!
//! The `switchboard` binary written into the config is `$SWITCHBOARD_BIN`,
//! else the one built next to this example (`target/<profile>/switchboard`),
//! else the first on `PATH`. Quit with Ctrl-C (or Ctrl-D): the socket is
//! removed; the agent's shim then answers "Terminal Demo is not running"
//! until the app is back.

use std::{
    io::Write as _,
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{SystemTime, UNIX_EPOCH},
};

use serde_json::json;
use switchboard_relay::{
    Call, Event, Options, PeerInfo, Tool, ToolHandler, ToolResult, events, switchboard_command,
    write_mcp_config,
};
use tokio::io::{AsyncBufReadExt, BufReader};

const DEFAULT_APP_ID: &str = "dev.switchboard.terminal-demo";

struct Terminal {
    dice: Arc<AtomicBool>,
    rolls: AtomicU64,
}

impl ToolHandler for Terminal {
    fn tools(&self) -> Vec<Tool> {
        let mut tools = vec![
            Tool::new(
                "set_session_title",
                "Set the title of the user's terminal tab to say what this session is about.",
                json!({
                    "type": "object",
                    "properties": {"title": {"type": "string", "minLength": 1, "maxLength": 80}},
                    "required": ["title"],
                    "additionalProperties": false
                }),
            )
            .with_title("Set session title")
            .with_annotations(json!({"readOnlyHint": false, "idempotentHint": true})),
            Tool::new(
                "notify_user",
                "Show the user a one-line notification in their terminal, for example when a long task is done.",
                json!({
                    "type": "object",
                    "properties": {
                        "text": {"type": "string", "minLength": 1, "maxLength": 500},
                        "bell": {"type": "boolean", "description": "Also ring the terminal bell."}
                    },
                    "required": ["text"],
                    "additionalProperties": false
                }),
            )
            .with_title("Notify user")
            .with_timeout_ms(30_000),
        ];
        if self.dice.load(Ordering::SeqCst) {
            tools.push(Tool::new(
                "roll_dice",
                "Roll a die.",
                json!({
                    "type": "object",
                    "properties": {"sides": {"type": "integer", "minimum": 2, "maximum": 1000}},
                    "additionalProperties": false
                }),
            ));
        }
        tools
    }

    async fn call(&self, call: Call) -> ToolResult {
        println!("\n← {} from {}", call.name, describe(&call.peer));
        match call.name.as_str() {
            "set_session_title" => {
                let title = printable(call.arguments["title"].as_str().unwrap_or_default());
                if title.is_empty() {
                    return ToolResult::error("the title has no printable characters");
                }
                set_title(&title);
                println!("  title set to \"{title}\"");
                ToolResult::text(format!("title set to \"{title}\""))
            }
            "notify_user" => {
                let text = printable(call.arguments["text"].as_str().unwrap_or_default());
                let bell = call.arguments.get("bell").and_then(|b| b.as_bool()) == Some(true);
                println!("  🔔 {text}{}", if bell { "\x07" } else { "" });
                ToolResult::text("the user was notified")
            }
            "roll_dice" => {
                let sides = call
                    .arguments
                    .get("sides")
                    .and_then(|s| s.as_u64())
                    .unwrap_or(6);
                let roll = 1 + pseudo_random(self.rolls.fetch_add(1, Ordering::Relaxed)) % sides;
                println!("  rolled {roll} on a d{sides}");
                ToolResult::structured(
                    format!("rolled {roll}"),
                    json!({"roll": roll, "sides": sides}),
                )
            }
            other => ToolResult::error(format!("no tool named {other}")),
        }
    }
}

/// `pid 4242 (switchboard) ← 4200 (claude) ← 4100 (bash) ← …`
fn describe(peer: &PeerInfo) -> String {
    if peer.ancestry.is_empty() {
        return format!("pid {} (ancestry unavailable)", peer.pid);
    }
    let chain: Vec<String> = peer
        .ancestry
        .iter()
        .map(|p| format!("{} ({})", p.pid, p.name))
        .collect();
    format!("pid {}", chain.join(" ← "))
}

/// The text without control characters, so an agent cannot smuggle escape
/// sequences into the terminal.
fn printable(text: &str) -> String {
    text.chars().filter(|c| !c.is_control()).collect()
}

/// OSC 0 (icon name and window title), on the controlling terminal if
/// there is one, else on stderr.
fn set_title(title: &str) {
    let sequence = format!("\x1b]0;{title}\x07");
    let written = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/tty")
        .and_then(|mut tty| tty.write_all(sequence.as_bytes()));
    if written.is_err() {
        let _ = std::io::stderr().write_all(sequence.as_bytes());
    }
}

fn pseudo_random(n: u64) -> u64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut x = nanos ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^ (x >> 33)
}

/// The `switchboard` binary for the config: `$SWITCHBOARD_BIN`, the one
/// built beside this example, or the first on `PATH`.
fn switchboard_binary() -> PathBuf {
    if std::env::var_os("SWITCHBOARD_BIN").is_none()
        && let Ok(exe) = std::env::current_exe()
        && let Some(profile_dir) = exe.parent().and_then(|examples| examples.parent())
    {
        let built = profile_dir.join("switchboard");
        if built.is_file() {
            return built;
        }
    }
    switchboard_command()
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut app_id = DEFAULT_APP_ID.to_owned();
    let mut socket = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match (arg.as_str(), args.next()) {
            ("--app-id", Some(id)) => app_id = id,
            ("--socket", Some(path)) => socket = Some(PathBuf::from(path)),
            _ => {
                eprintln!("usage: terminal_app [--app-id ID] [--socket PATH]");
                std::process::exit(2);
            }
        }
    }

    let dice = Arc::new(AtomicBool::new(false));
    let mut options = Options::new(&app_id)
        .app_name("Terminal Demo")
        .events([events::CHANNEL]);
    if let Some(socket) = socket {
        options = options.socket_path(socket);
    }
    let server = options.bind(Terminal {
        dice: dice.clone(),
        rolls: AtomicU64::new(0),
    })?;
    println!("Terminal Demo (app id {app_id})");
    println!("  listening on   {}", server.socket_path().display());
    let config = server.mcp_config().with_command(switchboard_binary());
    match write_mcp_config(&config, &server.mcp_config_path()) {
        Some(path) => {
            println!("  MCP config     {}", path.display());
            println!(
                "  (runs: {} {})",
                config.command.display(),
                config.args.join(" ")
            );
            println!(
                "\nIn another terminal:  claude --mcp-config {}",
                path.display()
            );
        }
        None => println!("  (could not write an MCP config file; see the log)"),
    }
    println!(
        "Type `dice` + Enter to add or remove the roll_dice tool, any other line to send it to the agents; Ctrl-C quits."
    );

    let handle = server.handle();
    tokio::spawn(async move {
        let mut lines = BufReader::new(tokio::io::stdin()).lines();
        let user = std::env::var("USER").unwrap_or_else(|_| "user".into());
        while let Ok(Some(line)) = lines.next_line().await {
            let line = line.trim();
            if line.is_empty() {
                continue;
            }
            if line != "dice" {
                match handle.push(&Event::channel(line, [("user", user.as_str())])) {
                    Ok(n) => println!("sent to {n} agent(s)"),
                    Err(e) => println!("not sent: {e}"),
                }
                continue;
            }
            let on = !dice.fetch_xor(true, Ordering::SeqCst);
            match handle.tools_changed() {
                Ok(()) => println!(
                    "roll_dice {}; {} connected client(s) told",
                    if on { "added" } else { "removed" },
                    handle.connections()
                ),
                Err(e) => println!("cannot change the tools: {e}"),
            }
        }
        // stdin closed (Ctrl-D): quit as on Ctrl-C.
        handle.shutdown();
    });

    server
        .serve(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    println!("\nbye");
    Ok(())
}
