//! `switchboard shim`: the stdio MCP server an agent CLI spawns, relaying
//! `tools/list` and `tools/call` to a running application over its relay
//! socket (see `docs/relay-protocol.md`).
//!
//! It is its own crate so that it can be its own small binary,
//! `switchboard-shim`: one runs for every agent session, and without the
//! daemon's toolsets and transports it starts faster and needs a fraction of
//! the memory. `switchboard shim` runs that binary when it sits beside
//! `switchboard`, and this crate in-process otherwise.
//!
//! The shim answers `initialize`, `ping`, `tools/list` and `tools/call`
//! itself and never breaks the agent's session: every request gets exactly
//! one reply, whatever the application does. When the application is away,
//! `tools/list` serves the last list it saw (cached on disk) and calls fail
//! with "<app> is not running".
//!
//! It is hand-written rather than built on rmcp's server: it runs for every
//! agent session, so it must start in a few milliseconds and stay small, and
//! its few methods are simpler to get exactly right directly.

pub mod framing;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
mod outbox;
pub mod stdio;
mod upstream;

use std::{
    collections::HashMap,
    fs::OpenOptions,
    path::{Path, PathBuf},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use clap::Args;
use serde_json::{Map, Value, json};
use tokio::{
    io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufReader},
    sync::mpsc,
};
use tokio_util::{sync::CancellationToken, task::TaskTracker};

use crate::framing::{is_blank, line_reader};
use outbox::{Outbox, Queued};
use switchboard_jsonrpc::{Id, Kind, Message, Rejection, classify, code};
use switchboard_lines::Next;
use switchboard_relay::{Event, Tool, events};
use upstream::{CallFailure, Timeouts, Upstream, Upward};

/// Protocol revisions with an `initialize` handshake, oldest first.
const VERSIONS: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];

/// The app id under which `switchboard serve` listens on its relay socket,
/// and the shim's default.
pub const DAEMON_APP_ID: &str = "switchboard";

/// The shim's flags (`switchboard shim …` and `switchboard-shim …`).
#[derive(Debug, Args)]
pub struct ShimArgs {
    /// The application's relay socket.
    #[arg(long, value_name = "PATH", conflicts_with = "app_id")]
    pub socket: Option<PathBuf>,
    /// The application's id: its socket is $XDG_RUNTIME_DIR/switchboard/ID/relay.sock.
    #[arg(long, value_name = "ID", default_value = DAEMON_APP_ID, value_parser = app_id)]
    pub app_id: String,
    /// Write logs to FILE (nothing is logged otherwise).
    #[arg(long, value_name = "FILE", env = "SWITCHBOARD_SHIM_LOG")]
    pub log_file: Option<PathBuf>,
    /// How long to wait for the application's socket to accept.
    #[arg(
        long,
        value_name = "MS",
        env = "SWITCHBOARD_SHIM_CONNECT_TIMEOUT_MS",
        default_value_t = 1_000,
        value_parser = millis
    )]
    pub connect_timeout_ms: u64,
    /// How long to wait for the application's tool list.
    #[arg(
        long,
        value_name = "MS",
        env = "SWITCHBOARD_SHIM_LIST_TIMEOUT_MS",
        default_value_t = 3_000,
        value_parser = millis
    )]
    pub list_timeout_ms: u64,
    /// How long to wait for a tool call (a tool may declare longer).
    #[arg(
        long,
        value_name = "MS",
        env = "SWITCHBOARD_SHIM_CALL_TIMEOUT_MS",
        default_value_t = 15_000,
        value_parser = millis
    )]
    pub call_timeout_ms: u64,
    /// The agent's nick, told to the application (the switchboard daemon
    /// uses it as the agent's chat identity).
    #[arg(long, value_name = "NICK", env = "SWITCHBOARD_NICK", value_parser = nick)]
    pub nick: Option<String>,
}

/// A timeout flag's value: a whole number of milliseconds, at least 1 (at 0
/// nothing could answer in time).
pub fn millis(value: &str) -> Result<u64, String> {
    match value.parse::<u64>() {
        Ok(ms) if ms >= 1 => Ok(ms),
        _ => Err("give a whole number of milliseconds, 1 or more".into()),
    }
}

/// A `--nick` flag's value. The application has its own rules (the daemon's
/// chat has IRC's); what no application could take is refused here, before
/// every call fails over it.
pub fn nick(value: &str) -> Result<String, String> {
    if value.is_empty()
        || value.len() > 64
        || value
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == ',')
    {
        return Err(
            "a nick is 1 to 64 characters without spaces, commas or control characters".into(),
        );
    }
    Ok(value.to_owned())
}

/// An `--app-id` flag's value: the name of one directory under the runtime
/// directory, so no `/`, `.` or `..`.
pub fn app_id(value: &str) -> Result<String, String> {
    if switchboard_relay::paths::valid_app_id(value) {
        Ok(value.to_owned())
    } else {
        Err("an app id is 1 to 128 printable ASCII characters without spaces or `/`, and not `.` or `..`".into())
    }
}

/// Parses a command line that holds [`ShimArgs`], reading a variable set to
/// the empty string as unset, as `switchboard serve` does. (clap would take
/// it as an empty value: an error for a number or a file.)
///
/// A refused command line (and `--help`, `--version`) comes back as the
/// [`clap::Error`]; the binary says it with `exit()`, so this library never
/// ends the process itself.
pub fn parse_command_line<P: clap::Parser>() -> Result<P, clap::Error> {
    let command = empty_env_as_unset(P::command());
    let mut matches = command
        .clone()
        .try_get_matches()
        .map_err(|e| name_the_variable(e, &command))?;
    P::from_arg_matches_mut(&mut matches).map_err(|e| e.format(&mut P::command()))
}

/// A refused value that came from a flag's variable, not the command line,
/// is said as the variable's (`invalid value 'a b' for 'SWITCHBOARD_NICK'`):
/// that is what the user set, perhaps in an agent's MCP config.
fn name_the_variable(mut e: clap::Error, command: &clap::Command) -> clap::Error {
    use clap::error::{ContextKind, ContextValue};
    let Some(ContextValue::String(shown)) = e.get(ContextKind::InvalidArg) else {
        return e;
    };
    let given: Vec<String> = std::env::args_os()
        .filter_map(|a| a.into_string().ok())
        .collect();
    if let Some(variable) = variable_behind(command, shown, &given) {
        e.insert(ContextKind::InvalidArg, ContextValue::String(variable));
    }
    e
}

/// The variable behind the flag clap shows as `shown` (`--nick <NICK>`),
/// when the flag is not on the command line `given`.
fn variable_behind(command: &clap::Command, shown: &str, given: &[String]) -> Option<String> {
    for arg in command.get_arguments() {
        let (Some(long), Some(variable)) = (arg.get_long(), arg.get_env()) else {
            continue;
        };
        let flag = format!("--{long}");
        if shown != flag && !shown.starts_with(&format!("{flag} ")) {
            continue;
        }
        let on_the_line = given
            .iter()
            .any(|a| a == &flag || a.starts_with(&format!("{flag}=")));
        return (!on_the_line).then(|| variable.to_string_lossy().into_owned());
    }
    command
        .get_subcommands()
        .find_map(|sub| variable_behind(sub, shown, given))
}

/// `command` with every flag whose variable is set to nothing not reading it.
fn empty_env_as_unset(command: clap::Command) -> clap::Command {
    command
        .mut_args(|arg| {
            let empty = arg
                .get_env()
                .and_then(std::env::var_os)
                .is_some_and(|value| value.is_empty());
            if empty { arg.env(None) } else { arg }
        })
        .mut_subcommands(empty_env_as_unset)
}

/// Where the shim finds its application, and how long it waits for it.
struct Target {
    pub socket: PathBuf,
    pub cache_file: PathBuf,
    pub app_id: String,
    pub identity: Option<String>,
    pub timeouts: Timeouts,
}

impl Target {
    /// Resolves `--socket`/`--app-id` (default: the switchboard daemon).
    fn from_args(args: &ShimArgs) -> Self {
        let timeouts = Timeouts {
            connect: Duration::from_millis(args.connect_timeout_ms),
            list: Duration::from_millis(args.list_timeout_ms),
            call: Duration::from_millis(args.call_timeout_ms),
        };
        match &args.socket {
            Some(socket) => {
                let name = socket.parent().and_then(|d| d.file_name()).map_or_else(
                    || socket.display().to_string(),
                    |n| n.to_string_lossy().into_owned(),
                );
                let mut cache = socket.clone().into_os_string();
                cache.push(".tools.json");
                Self {
                    socket: socket.clone(),
                    cache_file: PathBuf::from(cache),
                    app_id: name,
                    identity: args.nick.clone().filter(|n| !n.is_empty()),
                    timeouts,
                }
            }
            None => {
                let socket =
                    switchboard_relay::socket_path(switchboard_relay::DEFAULT_PREFIX, &args.app_id);
                let cache_file = socket.with_file_name("tools-cache.json");
                Self {
                    socket,
                    cache_file,
                    app_id: args.app_id.clone(),
                    identity: args.nick.clone().filter(|n| !n.is_empty()),
                    timeouts,
                }
            }
        }
    }
}

/// Why the shim could not start. Nothing is written to stdout either way.
#[derive(Debug, thiserror::Error)]
pub enum ShimError {
    #[error("cannot open the log file {path} (--log-file, SWITCHBOARD_SHIM_LOG): {source}")]
    LogFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot start the async runtime: {0}")]
    Runtime(#[source] std::io::Error),
}

impl ShimError {
    /// 2 for a bad flag value, 1 for a failure of the machine.
    pub fn exit_code(&self) -> u8 {
        match self {
            ShimError::LogFile { .. } => 2,
            ShimError::Runtime(_) => 1,
        }
    }
}

/// Runs the shim on stdin/stdout until stdin closes.
pub fn run(args: &ShimArgs) -> Result<(), ShimError> {
    if let Some(file) = &args.log_file {
        log_to(file)?;
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(ShimError::Runtime)?;
    // The streams register with the runtime's reactor: made inside it.
    runtime
        .block_on(async { serve(Target::from_args(args), stdio::stdin(), stdio::stdout()).await });
    // A read of a terminal's stdin may still be blocking a thread; nothing
    // is left to wait for.
    runtime.shutdown_background();
    Ok(())
}

/// Logs (info and up) to `path`, appending; the shim logs nowhere else.
fn log_to(path: &Path) -> Result<(), ShimError> {
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|source| ShimError::LogFile {
            path: path.to_path_buf(),
            source,
        })?;
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_target(false)
        .with_ansi(false)
        .with_writer(std::sync::Mutex::new(file))
        .log_internal_errors(false)
        .init();
    Ok(())
}

/// How many tool-list changes and events may wait between the application's
/// link and stdout; events beyond are dropped.
const UPWARD_QUEUE: usize = 64;

/// How often a relayed call with a progress token reports progress.
const PROGRESS_EVERY: Duration = Duration::from_secs(10);

/// How long calls in flight may finish after the client closed stdin,
/// before they are cancelled (as `serve --stdio` does).
const LEFT_CALLS_GRACE: Duration = Duration::from_secs(10);

/// Requests answered at once; a client that sends more before any is
/// answered gets an error for each, rather than the shim holding them all.
const MAX_IN_FLIGHT: usize = 256;

/// What the reading side and the notifying side share about the client.
#[derive(Default)]
struct Client {
    initialized: AtomicBool,
    /// The events declared to the client as experimental capabilities.
    declared: std::sync::Mutex<Vec<String>>,
}

impl Client {
    fn declared(&self, name: &str) -> bool {
        self.declared
            .lock()
            .expect("declared lock")
            .iter()
            .any(|d| d == name)
    }
}

/// Serves one MCP client on `input`/`output` until it closes `input` (what
/// is in flight is answered first) or `output` (nobody is left to answer).
async fn serve<R, W>(target: Target, input: R, output: W)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (out, lines) = Outbox::new(outbox::BUDGET);
    let client_gone = CancellationToken::new();
    let writer = tokio::spawn(write_lines(output, lines, client_gone.clone()));
    let (upward_tx, upward) = mpsc::channel(UPWARD_QUEUE);
    let longest_call = target.timeouts.call.max(Duration::from_secs(1)) + target.timeouts.connect;
    let upstream = Upstream::new(
        target.socket,
        target.cache_file,
        target.app_id,
        target.identity,
        target.timeouts,
        upward_tx,
    );
    let shim = Shim {
        upstream,
        client: Arc::new(Client::default()),
        out,
        in_flight: TaskTracker::new(),
        running: Arc::default(),
    };
    tokio::spawn(forward_upward(
        upward,
        shim.client.clone(),
        shim.out.clone(),
    ));
    tokio::spawn(shim.upstream.clone().watch());
    let served = async {
        shim.read(input).await;
        // The client closed stdin: finish what is in flight (a client that
        // piped its requests in still gets the replies) for a while, then
        // cancel the rest, so the application stops them too.
        shim.in_flight.close();
        let finishing = longest_call.min(LEFT_CALLS_GRACE);
        if tokio::time::timeout(finishing, shim.in_flight.wait())
            .await
            .is_err()
        {
            shim.cancel_all();
            let _ = tokio::time::timeout(Duration::from_secs(1), shim.in_flight.wait()).await;
            // The cancels are written by tasks of their own.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        shim.out.finish();
        let _ = tokio::time::timeout(Duration::from_secs(2), writer).await;
    };
    tokio::select! {
        () = served => {}
        () = client_gone.cancelled() => tracing::debug!("stdout closed: the client is gone"),
    }
}

/// The application's tool-list changes and events, as notifications to the
/// client (once it is initialized; events only if they were declared to it).
async fn forward_upward(mut upward: mpsc::Receiver<Upward>, client: Arc<Client>, out: Outbox) {
    while let Some(up) = upward.recv().await {
        if !client.initialized.load(Ordering::Acquire) {
            continue;
        }
        let line = match up {
            // Rare, small, and not to be lost: it waits for room as a reply.
            Upward::ToolsChanged => {
                let line = json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"});
                out.reply(line.to_string()).await;
                continue;
            }
            Upward::Event(event) if client.declared(&event.name) => json!({
                "jsonrpc": "2.0",
                "method": format!("notifications/{}", event.name),
                "params": event.params,
            }),
            Upward::Event(event) => {
                tracing::debug!(event = %event.name, "dropped an event the client was not offered");
                continue;
            }
        };
        out.notify(line.to_string());
    }
}

/// What serving the client's messages needs.
struct Shim {
    upstream: Arc<Upstream>,
    client: Arc<Client>,
    /// Lines for stdout.
    out: Outbox,
    /// The requests being answered.
    in_flight: TaskTracker,
    /// How to stop each request being answered, by id: the client may
    /// cancel it (`notifications/cancelled`).
    running: Arc<Mutex<HashMap<Id, tokio::task::AbortHandle>>>,
}

impl Shim {
    /// Reads the client's messages until stdin closes, answering malformed
    /// ones at once and each request in a task of its own.
    async fn read<R: AsyncRead + Unpin>(&self, input: R) {
        let mut input = BufReader::with_capacity(64 * 1024, input);
        let mut lines = line_reader();
        loop {
            let text = match lines.next(&mut input).await {
                Ok(Next::Line(line)) => line,
                Ok(Next::TooLong) => {
                    self.out.reply(Rejection::too_long().to_json()).await;
                    continue;
                }
                Ok(Next::Eof) | Err(_) => return,
            };
            if is_blank(text) {
                continue;
            }
            let refusal = match classify(text) {
                Ok(message) => self.dispatch(message),
                Err(rejection) => Some(rejection.to_json()),
            };
            if let Some(refusal) = refusal {
                self.out.reply(refusal).await;
            }
        }
    }

    /// Takes one well-formed message: a request is answered (in a task of
    /// its own), a notification acted on, a response ignored (the shim never
    /// asks the client anything). Returns the error reply to send at once
    /// for a request beyond [`MAX_IN_FLIGHT`].
    fn dispatch(&self, message: Message) -> Option<String> {
        let method = message.method().map(str::to_owned)?;
        let Kind::Request(id) = message.kind().clone() else {
            if method == "notifications/cancelled" {
                self.cancel(message.params());
            } else {
                notification(&self.upstream, &self.client, &method, message.params());
            }
            return None;
        };
        if self.running.lock().expect("running lock").len() >= MAX_IN_FLIGHT {
            return Some(switchboard_jsonrpc::error_json(
                Some(id),
                -32000,
                &format!(
                    "{MAX_IN_FLIGHT} requests are already in progress; wait for their answers before sending more"
                ),
            ));
        }
        // The classifier let through requests whose params are an object,
        // null or absent.
        let params = match message.into_value() {
            Value::Object(mut object) => match object.remove("params") {
                Some(Value::Object(params)) => params,
                _ => Map::new(),
            },
            _ => Map::new(),
        };
        let (upstream, client, out, running) = (
            self.upstream.clone(),
            self.client.clone(),
            self.out.clone(),
            self.running.clone(),
        );
        let key = id.clone();
        let mut calls = self.running.lock().expect("running lock");
        let task = self.in_flight.spawn(async move {
            let progress = progress_token(&params)
                .map(|token| tokio::spawn(report_progress(token, out.clone())));
            let reply = match handle(&upstream, &id, &method, params, &client).await {
                Ok(result) => {
                    json!({"jsonrpc": "2.0", "id": Value::from(id.clone()), "result": result})
                        .to_string()
                }
                Err(rejection) => rejection.to_json(),
            };
            if let Some(progress) = progress {
                progress.abort();
            }
            running.lock().expect("running lock").remove(&id);
            out.reply(reply).await;
        });
        calls.insert(key, task.abort_handle());
        None
    }

    /// `notifications/cancelled`: the request it names is dropped unanswered,
    /// as MCP has it; a relayed call in it tells the application to stop.
    fn cancel(&self, params: Option<&Value>) {
        let Some(id) = params
            .and_then(|p| p.get("requestId"))
            .and_then(Id::from_json)
        else {
            return;
        };
        if let Some(task) = self.running.lock().expect("running lock").remove(&id) {
            tracing::debug!(?id, "the client cancelled a request");
            task.abort();
        }
    }

    fn cancel_all(&self) {
        for (_, task) in self.running.lock().expect("running lock").drain() {
            task.abort();
        }
    }
}

/// A notification from the client: `initialized`, and the permission
/// requests the application agreed to take.
fn notification(upstream: &Arc<Upstream>, client: &Client, method: &str, params: Option<&Value>) {
    if method == "notifications/initialized" {
        client.initialized.store(true, Ordering::Release);
        return;
    }
    let Some(name) = method.strip_prefix("notifications/") else {
        return;
    };
    if name != events::PERMISSION_REQUEST {
        return;
    }
    let Some(Value::Object(params)) = params else {
        tracing::warn!(%method, "ignored a permission request whose params are not an object");
        return;
    };
    let (upstream, event) = (upstream.clone(), Event::new(name, shortened(params)));
    tokio::spawn(async move { upstream.send_event(event).await });
}

/// The longest `description` or `input_preview` a permission request
/// carries upstream, in characters: more than any approval notice shows,
/// and little enough that the request fits a relay event (64 KiB) rather
/// than being dropped for its size.
const MAX_PERMISSION_TEXT: usize = 4096;

/// `params` of a permission request with its long texts cut to
/// [`MAX_PERMISSION_TEXT`] characters and `…`.
fn shortened(params: &Map<String, Value>) -> Map<String, Value> {
    let mut params = params.clone();
    for key in ["description", "input_preview"] {
        if let Some(Value::String(text)) = params.get_mut(key)
            && let Some((cut, _)) = text.char_indices().nth(MAX_PERMISSION_TEXT)
        {
            text.truncate(cut);
            text.push('…');
        }
    }
    params
}

/// The request's `_meta.progressToken`, if it is one MCP allows (a string
/// or an integer).
fn progress_token(params: &Map<String, Value>) -> Option<Value> {
    let token = params.get("_meta")?.get("progressToken")?;
    (token.is_string() || token.is_i64() || token.is_u64()).then(|| token.clone())
}

/// Reports progress every [`PROGRESS_EVERY`] until aborted: a relayed call
/// may wait long (`wait_for_messages`), and clients reset their idle timeout
/// on progress.
async fn report_progress(token: Value, out: Outbox) {
    let mut step = 0u64;
    loop {
        tokio::time::sleep(PROGRESS_EVERY).await;
        step += 1;
        let line = json!({
            "jsonrpc": "2.0",
            "method": "notifications/progress",
            "params": {"progressToken": token, "progress": step, "message": "waiting for the application"},
        });
        if !out.notify(line.to_string()) {
            return;
        }
    }
}

/// A request's result, or the error it is answered with.
type Reply = Result<Value, Rejection>;

/// Answers one request.
async fn handle(
    upstream: &Arc<Upstream>,
    id: &Id,
    method: &str,
    params: Map<String, Value>,
    client: &Client,
) -> Reply {
    match method {
        "initialize" => Ok(initialize(upstream, &params, client).await),
        "ping" => Ok(json!({})),
        "tools/list" => {
            let tools: Vec<Tool> = upstream
                .list()
                .await
                .into_iter()
                .map(|tool| Tool {
                    timeout_ms: None,
                    ..tool
                })
                .collect();
            Ok(json!({"tools": tools}))
        }
        "tools/call" => call_tool(upstream, id, &params).await,
        _ => Err(Rejection::method_not_found(id.clone(), method)),
    }
}

/// The `initialize` result: the protocol version agreed, and capabilities
/// and instructions from the application's welcome (or the cached events
/// when it is away).
async fn initialize(
    upstream: &Arc<Upstream>,
    params: &Map<String, Value>,
    client: &Client,
) -> Value {
    let requested = params
        .get("protocolVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    let version = VERSIONS
        .iter()
        .find(|v| **v == requested)
        .unwrap_or(&VERSIONS[VERSIONS.len() - 1]);
    // A running application's welcome says what it pushes and how
    // to guide the agent; an absent one fails at once.
    let welcome = upstream.welcome().await;
    let agreed = match &welcome {
        Some(w) => w.events.clone(),
        // Never seen: claude/channel, so that a host started before its
        // application still takes the messages it pushes once it is up
        // (capabilities are fixed at initialize). Not the permission relay,
        // which would send the host's prompts where nothing may answer.
        None => upstream
            .cached_events()
            .unwrap_or_else(|| vec![events::CHANNEL.to_owned()]),
    };
    // What the shim itself delivers to its client.
    let declared: Vec<String> = agreed
        .into_iter()
        .filter(|e| e == events::CHANNEL || e == events::PERMISSION)
        .collect();
    let mut capabilities = json!({"tools": {"listChanged": true}});
    if !declared.is_empty() {
        let experimental: Map<String, Value> =
            declared.iter().map(|e| (e.clone(), json!({}))).collect();
        capabilities["experimental"] = Value::Object(experimental);
    }
    *client.declared.lock().expect("declared lock") = declared;
    // Some hosts never send notifications/initialized.
    client.initialized.store(true, Ordering::Release);
    let instructions = welcome
        .and_then(|w| w.instructions)
        .unwrap_or_else(|| format!("Tools of {}, relayed by switchboard.", upstream.app_name()));
    json!({
        "protocolVersion": version,
        "capabilities": capabilities,
        "serverInfo": {"name": "switchboard-shim", "version": env!("CARGO_PKG_VERSION")},
        "instructions": instructions,
    })
}

/// Relays a `tools/call`; what goes wrong upstream is a tool error, so the
/// client always gets its one reply.
async fn call_tool(upstream: &Arc<Upstream>, id: &Id, params: &Map<String, Value>) -> Reply {
    let call = switchboard_jsonrpc::call_params(Some(params))
        .map_err(|problem| Rejection::invalid_params(id.clone(), problem))?;
    let (name, arguments) = (call.name, call.arguments.cloned().unwrap_or_default());
    let app = upstream.app_name();
    match upstream.call(name, arguments).await {
        Ok(result) => Ok(json!(result)),
        Err(CallFailure::Malformed(reason)) => Ok(tool_error(&format!(
            "{app} returned a malformed result for {name}: {reason}"
        ))),
        Err(CallFailure::Absent) => Ok(tool_error(&format!(
            "{app} is not running (nothing serves at {}); start it and try again",
            upstream.socket().display()
        ))),
        Err(CallFailure::TimedOut) => Ok(tool_error(&format!(
            "{app} did not respond in time; the call may still have run"
        ))),
        Err(CallFailure::Broken(reason)) => Ok(tool_error(&format!(
            "{app} dropped the connection during the call ({reason}); the call may have run"
        ))),
        Err(CallFailure::UnknownTool(message)) => Err(Rejection {
            id: Some(id.clone()),
            code: code::INVALID_PARAMS,
            message: format!("unknown tool {name:?}: {message}"),
        }),
        Err(CallFailure::Refused(message)) => {
            Ok(tool_error(&format!("{app} refused the call: {message}")))
        }
        Err(CallFailure::TooLarge(message)) => Ok(tool_error(&format!(
            "{name} was not sent to {app}: {message}; send less"
        ))),
        Err(CallFailure::Unusable(reason)) => {
            Ok(tool_error(&format!("{app} cannot be used: {reason}")))
        }
    }
}

fn tool_error(text: &str) -> Value {
    json!({"content": [{"type": "text", "text": text}], "isError": true})
}

/// Owns stdout; an empty line means "done". If the client has gone (stdout
/// closed), it cancels `client_gone` and stops: the shim has no one to serve.
async fn write_lines<W: AsyncWrite + Unpin>(
    mut output: W,
    mut lines: mpsc::UnboundedReceiver<Queued>,
    client_gone: CancellationToken,
) {
    let mut batch = String::new();
    // The lines of the batch hold their room in the outbox until written.
    let mut written = Vec::new();
    while let Some(queued) = lines.recv().await {
        let mut done = queued.line.is_empty();
        batch.clear();
        written.clear();
        if !done {
            batch.push_str(&queued.line);
            batch.push('\n');
        }
        written.push(queued);
        while !done && let Ok(more) = lines.try_recv() {
            done = more.line.is_empty();
            if !done {
                batch.push_str(&more.line);
                batch.push('\n');
            }
            written.push(more);
        }
        if output.write_all(batch.as_bytes()).await.is_err() || output.flush().await.is_err() {
            client_gone.cancel();
            return;
        }
        if done {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::duplex;

    /// A closed stdout ends `serve` (and so the shim, through its binary's
    /// exit code), with stdin still open: the library never exits the process.
    #[tokio::test]
    async fn serve_returns_when_the_client_closes_stdout() {
        let absent = std::env::temp_dir().join(format!("no-such-app-{}", std::process::id()));
        let target = Target {
            socket: absent.join("relay.sock"),
            cache_file: absent.join("tools-cache.json"),
            app_id: "absent".into(),
            identity: None,
            timeouts: Timeouts {
                connect: Duration::from_millis(100),
                list: Duration::from_millis(100),
                call: Duration::from_millis(100),
            },
        };
        let (mut stdin, shim_in) = duplex(1024);
        let (shim_out, stdout) = duplex(1024);
        drop(stdout);
        let served = tokio::spawn(serve(target, shim_in, shim_out));
        stdin.write_all(b"this is not json\n").await.unwrap();
        tokio::time::timeout(Duration::from_secs(5), served)
            .await
            .expect("serve returned once its reply could not be written")
            .unwrap();
        assert!(
            stdin.write_all(b"\n").await.is_err(),
            "stdin is no longer read"
        );
    }
}
