//! Section `relay`: `switchboard shim`, the stdio MCP server an agent CLI
//! spawns for every session, which relays `tools/list` and `tools/call` to
//! an application over the application's relay socket
//! (`docs/relay-protocol.md`).
//!
//! - **Cold start**: spawn `switchboard-shim --socket PATH` (what
//!   `switchboard mcp-config` writes), write `initialize` at once, time
//!   until its reply line arrives ([`cold_start::time_runs`], as for
//!   `serve --stdio`); with a switchboard daemon listening on PATH (the shim
//!   dials it in the background meanwhile) and with nothing at PATH; and,
//!   for information, `switchboard shim --socket PATH`, which execs the
//!   small binary. The shims of the other measurements are `switchboard-shim`.
//! - **Overhead per `tools/call`**: sequential calls (one in flight) of the
//!   cheap chat tool `list_channels` on `serve --stdio --ephemeral`, and
//!   through a shim to a daemon (`serve --no-http --socket PATH
//!   --ephemeral`), [`Plan::reads`] calls per route (2,000; 500 with
//!   `--quick`); the overhead is the difference of the two p50s. Two more
//!   routes tell where it goes: the same tool on the daemon's socket from a
//!   relay client inside the benchmark (no shim), and a trivial `echo`
//!   through a shim to a `switchboard-relay` application inside the
//!   benchmark (the relay path without switchboard's tools). The routes take
//!   turns in blocks of [`BLOCK`] calls, so that load from other processes
//!   falls on all of them alike.
//! - **Memory**: `VmRSS` and `VmHWM` of each shim after its calls.
//!
//! The in-benchmark application and relay client run on the benchmark's one
//! thread; with one call in flight they never compete with its MCP client.

use std::{
    path::Path,
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use serde_json::{Map, Value, json};
use switchboard_relay::{Call, Options, Tool, ToolHandler, ToolResult, client::Link};
use tokio::{sync::oneshot, task::JoinHandle};

use crate::{
    Plan, cold_start,
    report::{Report, Row, Target, Unit, micros, percentile},
    rpc::Session,
    server::{Data, Server, ShimStart, Switchboard},
    stdio::StdioConnection,
    sys::{CpuWatch, Memory},
};

const COLD_START_TARGET_MS: f64 = 3.0;
const OVERHEAD_TARGET_US: f64 = 100.0;
const RSS_TARGET_MIB: f64 = 6.0;
/// The chat tool timed on every route to the daemon: it only lists the
/// hub's channels (none, in a fresh ephemeral history).
const CHAT_TOOL: &str = "list_channels";
/// Untimed calls on each route first.
const WARM_UP: usize = 200;
/// Calls on one route before the next route takes its turn.
const BLOCK: usize = 50;
/// How long the in-benchmark relay client waits for a call.
const CALL_TIMEOUT: Duration = Duration::from_secs(15);

pub async fn section(
    switchboard: &Switchboard,
    plan: &Plan,
    report: &mut Report,
) -> anyhow::Result<()> {
    let work = tempfile::tempdir()?;
    let daemon_socket = work.path().join("daemon").join("relay.sock");
    let daemon = switchboard
        .start_relay(&daemon_socket, Data::Ephemeral)
        .await?;
    cold_starts(
        switchboard,
        plan,
        report,
        daemon.pid()?,
        &daemon_socket,
        &work.path().join("absent").join("relay.sock"),
    )
    .await?;

    let echo_socket = work.path().join("echo").join("relay.sock");
    let echo = EchoApp::start(&echo_socket)?;
    let mut stdio = Route::mcp(
        switchboard.start_stdio(Data::Ephemeral)?,
        CHAT_TOOL,
        json!({}),
    )
    .await
    .context("serve --stdio")?;
    let mut shim = Route::mcp(
        switchboard.start_shim(&daemon_socket)?,
        CHAT_TOOL,
        json!({}),
    )
    .await
    .context("shim → daemon")?;
    let mut direct = Route::relay(&daemon_socket, CHAT_TOOL, json!({}))
        .await
        .context("relay client → daemon")?;
    let mut echo_shim = Route::mcp(
        switchboard.start_shim(&echo_socket)?,
        "echo",
        json!({"text": "ping"}),
    )
    .await
    .context("shim → echo application")?;

    let calls = plan.reads;
    eprintln!(
        "- tools/call round trips, one in flight: {calls} per route after {WARM_UP} untimed, \
         in turns of {BLOCK}"
    );
    let pids = [
        stdio.pid()?,
        daemon.pid()?,
        shim.pid()?,
        echo_shim.pid()?,
        std::process::id(),
    ];
    let watch = CpuWatch::start(&pids)?;
    take_turns(
        &mut [&mut stdio, &mut shim, &mut direct, &mut echo_shim],
        calls,
    )
    .await?;
    let cpu = watch.stop()?;
    report.note(format!(
        "relay round trips: serve --stdio used {:.2} cores, the daemon {:.2}, its shim {:.2}, \
         the echo application's shim {:.2}, the benchmark (client, relay client and echo \
         application) {:.2}, other processes {:.2}",
        cpu.cores[0], cpu.cores[1], cpu.cores[2], cpu.cores[3], cpu.cores[4], cpu.others
    ));

    let (stdio_us, shim_us) = (micros(&stdio.samples), micros(&shim.samples));
    report.rows.push(latency_row(
        format!("{CHAT_TOOL} on serve --stdio --ephemeral, sequential (p50)"),
        &stdio_us,
    ));
    report.rows.push(latency_row(
        format!("{CHAT_TOOL} through shim → daemon relay socket, sequential (p50)"),
        &shim_us,
    ));
    report.rows.push(
        Row::new(
            "relay overhead per tools/call: shim → daemon minus serve --stdio (p50)",
            percentile(&shim_us, 50.0) - percentile(&stdio_us, 50.0),
            Unit::Micros,
            Target::AtMost(OVERHEAD_TARGET_US),
        )
        .detail(format!(
            "p90 {}",
            Unit::Micros.show(percentile(&shim_us, 90.0) - percentile(&stdio_us, 90.0))
        )),
    );
    report.rows.push(latency_row(
        format!(
            "{CHAT_TOOL} on the daemon relay socket, relay client in the benchmark, no shim (p50)"
        ),
        &micros(&direct.samples),
    ));
    report.rows.push(latency_row(
        "echo through shim → switchboard-relay app in the benchmark (p50)".into(),
        &micros(&echo_shim.samples),
    ));

    for (route, label) in [(&shim, "to the daemon"), (&echo_shim, "to the echo app")] {
        let memory = Memory::of(route.pid()?)?;
        report.rows.push(Row::memory(
            format!("RSS of shim {label}, after its {calls} timed calls"),
            memory,
            RSS_TARGET_MIB,
        ));
    }

    for route in [stdio, shim, direct, echo_shim] {
        route.close().await?;
    }
    daemon.stop().await?;
    echo.stop().await
}

/// Shim cold starts with the daemon listening on its socket, then with no
/// application at all.
async fn cold_starts(
    switchboard: &Switchboard,
    plan: &Plan,
    report: &mut Report,
    daemon_pid: u32,
    daemon_socket: &Path,
    absent_socket: &Path,
) -> anyhow::Result<()> {
    let watch = CpuWatch::start(&[daemon_pid])?;
    for (label, socket, how) in [
        (
            "switchboard-shim, daemon listening",
            daemon_socket,
            ShimStart::Binary,
        ),
        (
            "switchboard-shim, no application at the socket",
            absent_socket,
            ShimStart::Binary,
        ),
        (
            "switchboard shim (execs switchboard-shim), daemon listening",
            daemon_socket,
            ShimStart::Subcommand,
        ),
    ] {
        eprintln!("- shim cold start, {label} ({} runs)", plan.cold_runs);
        let (switchboard, socket, runs) = (switchboard.clone(), socket.to_owned(), plan.cold_runs);
        // Blocking I/O, off the runtime, which keeps draining the daemon's log.
        let samples = tokio::task::spawn_blocking(move || {
            cold_start::time_runs(runs, |_| switchboard.shim_command(&socket, how))
        })
        .await?
        .with_context(|| format!("shim cold start, {label}"))?;
        let target = match how {
            ShimStart::Binary => Target::AtMost(COLD_START_TARGET_MS),
            ShimStart::Subcommand => Target::None,
        };
        report.rows.push(cold_start::row(
            format!("shim cold start to initialize reply, {label} (median)"),
            &samples,
            target,
        ));
    }
    let cpu = watch.stop()?;
    report.note(format!(
        "shim cold starts: the daemon used {:.2} cores, other processes (the shims included) {:.2}",
        cpu.cores[0], cpu.others
    ));
    Ok(())
}

/// A latency row for information: the p50 in µs, and the p90.
fn latency_row(metric: String, samples_us: &[f64]) -> Row {
    Row::new(
        metric,
        percentile(samples_us, 50.0),
        Unit::Micros,
        Target::None,
    )
    .detail(format!(
        "p90 {}",
        Unit::Micros.show(percentile(samples_us, 90.0))
    ))
}

/// Warms every route up, then times `calls` calls on each, the routes
/// taking turns.
async fn take_turns(routes: &mut [&mut Route], calls: usize) -> anyhow::Result<()> {
    for route in routes.iter_mut() {
        for _ in 0..WARM_UP {
            route.call().await?;
        }
    }
    let mut done = 0;
    while done < calls {
        let turn = BLOCK.min(calls - done);
        for route in routes.iter_mut() {
            for _ in 0..turn {
                let elapsed = route.call().await?;
                route.samples.push(elapsed);
            }
        }
        done += turn;
    }
    Ok(())
}

/// One way of calling a tool, and how long its timed calls took.
struct Route {
    way: Way,
    tool: &'static str,
    arguments: Value,
    samples: Vec<Duration>,
}

enum Way {
    /// MCP over a child's stdin/stdout: `serve --stdio` or a shim.
    Mcp {
        // Boxed: a child is much larger than a link.
        child: Box<Server>,
        connection: StdioConnection,
    },
    /// The relay protocol, straight from the benchmark to a socket.
    Relay(Link),
}

impl Route {
    /// MCP to `child` (handshake done, one call checked).
    async fn mcp(mut child: Server, tool: &'static str, arguments: Value) -> anyhow::Result<Self> {
        let connection = StdioConnection::open(&mut child.child).await?;
        let child = Box::new(child);
        Self::checked(Way::Mcp { child, connection }, tool, arguments).await
    }

    /// A relay connection to the application at `socket` (one call checked).
    async fn relay(socket: &Path, tool: &'static str, arguments: Value) -> anyhow::Result<Self> {
        let (link, _events) =
            Link::connect(socket, Duration::from_secs(1), "switchboard-bench").await?;
        Self::checked(Way::Relay(link), tool, arguments).await
    }

    async fn checked(way: Way, tool: &'static str, arguments: Value) -> anyhow::Result<Self> {
        let mut route = Self {
            way,
            tool,
            arguments,
            samples: Vec::new(),
        };
        route.call().await?;
        Ok(route)
    }

    /// One call; a tool error is an error.
    async fn call(&mut self) -> anyhow::Result<Duration> {
        let arguments = self.arguments.clone();
        let started = Instant::now();
        match &mut self.way {
            Way::Mcp { connection, .. } => {
                connection.client.call_tool(self.tool, arguments).await?;
            }
            Way::Relay(link) => {
                let mut params = Map::new();
                params.insert("name".into(), self.tool.into());
                params.insert("arguments".into(), arguments);
                let result = link
                    .request("tools/call", Some(params), CALL_TIMEOUT)
                    .await
                    .with_context(|| format!("tools/call {} over the relay socket", self.tool))?;
                if result.get("isError") != Some(&Value::Bool(false)) {
                    let result = result.to_string();
                    bail!(
                        "tools/call {} over the relay socket: {result:.300}",
                        self.tool
                    );
                }
            }
        }
        Ok(started.elapsed())
    }

    /// The child's pid (a relay connection has none).
    fn pid(&self) -> anyhow::Result<u32> {
        match &self.way {
            Way::Mcp { child, .. } => child.pid(),
            Way::Relay(_) => bail!("a relay connection has no child process"),
        }
    }

    /// Closes the connection; a child must then exit cleanly.
    async fn close(self) -> anyhow::Result<()> {
        match self.way {
            Way::Mcp { child, connection } => {
                connection.close().await?;
                child.wait().await
            }
            Way::Relay(link) => {
                drop(link);
                Ok(())
            }
        }
    }
}

/// A trivial tool, so the echo route measures the relay path alone.
struct Echo;

impl ToolHandler for Echo {
    fn tools(&self) -> Vec<Tool> {
        vec![Tool::new(
            "echo",
            "Say the text back.",
            json!({
                "type": "object",
                "properties": {"text": {"type": "string"}},
                "required": ["text"]
            }),
        )]
    }

    async fn call(&self, call: Call) -> ToolResult {
        ToolResult::text(call.arguments["text"].as_str().unwrap_or_default())
    }
}

/// The [`Echo`] application, served on the benchmark's runtime until
/// stopped or dropped.
struct EchoApp {
    stop: oneshot::Sender<()>,
    serving: JoinHandle<std::io::Result<()>>,
}

impl EchoApp {
    fn start(socket: &Path) -> anyhow::Result<Self> {
        let server = Options::new("dev.switchboard.bench-echo")
            .app_name("switchboard-bench echo")
            .socket_path(socket)
            .bind(Echo)
            .context("cannot bind the echo application's socket")?;
        let (stop, stopped) = oneshot::channel::<()>();
        // Dropping `stop` ends the wait as well.
        let serving = tokio::spawn(server.serve(async {
            let _ = stopped.await;
        }));
        Ok(Self { stop, serving })
    }

    async fn stop(self) -> anyhow::Result<()> {
        let _ = self.stop.send(());
        self.serving.await??;
        Ok(())
    }
}
