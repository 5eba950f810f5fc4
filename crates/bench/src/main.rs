//! `switchboard-bench`: measures the real `switchboard` release binary against
//! its performance targets and prints a markdown table (metric, target,
//! measured, pass/fail) on stdout; progress goes to stderr.
//!
//! The binary under test runs as a child process, exactly as an agent starts
//! it. Sections (`--only NAME` runs one):
//!
//! - `cold-start` ([`cold_start`]): spawn `serve --stdio` to the `initialize`
//!   reply; median and p90 of 30 runs.
//! - `workload` ([`workload`]): 10 concurrent senders × 50 × (`send_message`,
//!   `read_messages(limit=50)`) over stdio, Streamable HTTP and legacy SSE,
//!   with a durable file-backed history (and stdio also `--ephemeral`);
//!   calls/s, median of 3 rounds.
//! - `read` ([`big_history`]): `read_messages(limit=50)` on a channel of
//!   1,000,000 messages, in-process and as a stdio round trip; p50 and p99.
//! - `rss` ([`rss`]): resident memory of `serve --http`, idle and after the
//!   workload on the 1,000,000 message history.
//! - `relay` ([`relay`]): `switchboard shim`: cold start to the `initialize`
//!   reply; `tools/call` through shim and relay socket against the same call
//!   on `serve --stdio`, 2,000 sequential calls each; the shim's RSS.
//! - `irc` ([`irc`]): `serve --stdio` on the IRC backend against a real
//!   InspIRCd on loopback: the bridge's overhead from a `send_message` on
//!   stdin to its PRIVMSG on the wire (p50 of 500 sequential sends), the
//!   observer's ingest of 100,000 channel messages into the history, and
//!   resident memory with 200 agent nicks connected at once.
//! - `hosts` ([`hosts`]): two `serve --http` on the IRC backend, one on each
//!   server of two InspIRCd linked on loopback: an agent's `send_message` on
//!   one host to another agent's blocked `wait_for_messages` returning on the
//!   other (p50 and p99 of sequential rounds).
//! - `notice` ([`notice`]): pushes fanned out to 200 shim sessions, 1,000
//!   blocked `wait_for_messages` over Streamable HTTP woken at once, the
//!   daemon's memory per subscribed or waiting session, and `list_channels`
//!   with unread counts over 100 channels of 100,000 messages.
//! - `web-view` ([`web_view`]): the page at `/` in headless Chromium: first
//!   paint of the 1,000,000 message channel, opening another channel, an
//!   agent's message on an open page; 100 pages' live streams.
//! - `tokens` ([`tokens`]): the per-request cost of checking a token among
//!   100 configured, in-process and over HTTP.
//! - `sessions` ([`sessions`]): the daemon's memory per legacy SSE session,
//!   idle streams and initialized sessions (500 of each).
//!
//! The clients are built to cost far less than the server: a hand-written
//! JSON-RPC client over the child's pipes (ids correlate concurrent calls on
//! the one stdio connection) and bare hyper HTTP/1.1 connections, all driven
//! by one current-thread tokio runtime, so the benchmark itself uses at most
//! about one core. The CPU each side used is reported with every workload.
//!
//! `switchboard-bench soak --minutes N` is not a performance section but a
//! soak under faults ([`soak`]): agents on every transport for N minutes
//! while the daemon is killed, the IRC server restarted and the disk filled.
//!
//! `--quick` is a smoke run: 10 cold starts, 1 round, 100,000 messages, 500
//! reads (and relay calls), 200 IRC sends, 20,000 IRC channel messages, 50
//! pushed sessions, 100 channels of 10,000 messages, 100 SSE sessions. The
//! exit status is 1 when a section could not be measured, not when a target
//! is missed.

mod big_history;
mod cold_start;
mod hosts;
mod irc;
mod notice;
mod relay;
mod report;
mod rpc;
mod rss;
mod server;
mod sessions;
mod soak;
mod stdio;
mod sys;
mod tokens;
mod web;
mod web_view;
mod workload;

use std::{cell::Cell, path::PathBuf, process::ExitCode, time::Instant};

use anyhow::{Context, bail};
use clap::{Parser, Subcommand, ValueEnum};

use crate::{
    report::{Failure, Report, thousands},
    server::Switchboard,
};

#[derive(Debug, Parser)]
#[command(
    name = "switchboard-bench",
    version,
    about = "Measures the switchboard binary against its performance targets"
)]
struct Cli {
    /// The switchboard binary to measure [default: `switchboard` next to this binary].
    #[arg(long, value_name = "PATH")]
    switchboard: Option<PathBuf>,
    /// A smoke run: fewer runs and rounds, 100,000 messages instead of 1,000,000.
    #[arg(long)]
    quick: bool,
    /// Run one section only.
    #[arg(long, value_enum, value_name = "NAME")]
    only: Option<Section>,
    /// Rebuild the cached large history instead of reusing it.
    #[arg(long)]
    fresh: bool,
    /// Where the large history is cached [default: $TMPDIR/switchboard-bench].
    #[arg(long, value_name = "DIR")]
    cache_dir: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// A soak under faults: agents on every transport while the daemon is
    /// killed, the IRC server restarted and the disk filled; then every
    /// acknowledged send is checked in the history (needs root to mount tmpfs).
    Soak(soak::SoakArgs),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Section {
    ColdStart,
    Workload,
    Read,
    Rss,
    Relay,
    Irc,
    Hosts,
    Notice,
    WebView,
    Tokens,
    Sessions,
}

impl Section {
    fn name(self) -> &'static str {
        match self {
            Section::ColdStart => "cold-start",
            Section::Workload => "workload",
            Section::Read => "read",
            Section::Rss => "rss",
            Section::Relay => "relay",
            Section::Irc => "irc",
            Section::Hosts => "hosts",
            Section::Notice => "notice",
            Section::WebView => "web-view",
            Section::Tokens => "tokens",
            Section::Sessions => "sessions",
        }
    }
}

/// How much to measure.
pub struct Plan {
    /// Timed cold starts per history kind.
    pub cold_runs: usize,
    /// Workload rounds per transport.
    pub rounds: usize,
    /// Messages in the large channel.
    pub messages: usize,
    /// Timed reads of the large channel, per way of reading.
    pub reads: usize,
    /// Timed sequential `send_message` calls on the IRC backend.
    pub irc_sends: usize,
    /// Channel messages the IRC observer ingests.
    pub irc_messages: usize,
    /// Shim sessions one message is pushed to.
    pub fan_out: usize,
    /// Messages in each of the unread-count history's channels.
    pub channel_messages: usize,
    /// Legacy SSE sessions held open per memory figure.
    pub sse_sessions: usize,
    pub cache_dir: PathBuf,
    /// Rebuild the cached large history (cleared once rebuilt).
    pub fresh: Cell<bool>,
}

impl Plan {
    fn new(cli: &Cli) -> Self {
        let cache_dir = cli
            .cache_dir
            .clone()
            .unwrap_or_else(|| std::env::temp_dir().join("switchboard-bench"));
        let (cold_runs, rounds, messages, reads) = if cli.quick {
            (10, 1, 100_000, 500)
        } else {
            (30, 3, 1_000_000, 2_000)
        };
        Self {
            cold_runs,
            rounds,
            messages,
            reads,
            irc_sends: if cli.quick { 200 } else { 500 },
            irc_messages: if cli.quick { 20_000 } else { 100_000 },
            fan_out: if cli.quick { 50 } else { 200 },
            channel_messages: if cli.quick { 10_000 } else { 100_000 },
            sse_sessions: if cli.quick { 100 } else { 500 },
            cache_dir,
            fresh: Cell::new(cli.fresh),
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(Command::Soak(args)) = &cli.command {
        return match binary_path(&cli).and_then(|path| soak::run(&Switchboard { path }, args)) {
            Ok(true) => ExitCode::SUCCESS,
            Ok(false) => ExitCode::FAILURE,
            Err(e) => {
                eprintln!("switchboard-bench soak: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    match run(&cli) {
        Ok(report) if report.failures.is_empty() => ExitCode::SUCCESS,
        Ok(_) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("switchboard-bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: &Cli) -> anyhow::Result<Report> {
    let started = Instant::now();
    let switchboard = Switchboard {
        path: binary_path(cli)?,
    };
    let plan = Plan::new(cli);
    std::fs::create_dir_all(&plan.cache_dir)
        .with_context(|| format!("cannot create {}", plan.cache_dir.display()))?;
    let header = header(&switchboard, &plan, cli.quick)?;
    for line in &header {
        eprintln!("{line}");
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut report = Report::default();
    for section in Section::value_variants() {
        if cli.only.is_some_and(|only| only != *section) {
            continue;
        }
        eprintln!("\n## {}", section.name());
        let result = match section {
            Section::ColdStart => cold_start::section(&switchboard, &plan, &mut report),
            Section::Workload => {
                runtime.block_on(workload::section(&switchboard, &plan, &mut report))
            }
            Section::Read => {
                runtime.block_on(big_history::section(&switchboard, &plan, &mut report))
            }
            Section::Rss => runtime.block_on(rss::section(&switchboard, &plan, &mut report)),
            Section::Relay => runtime.block_on(relay::section(&switchboard, &plan, &mut report)),
            Section::Irc => runtime.block_on(irc::section(&switchboard, &plan, &mut report)),
            Section::Hosts => runtime.block_on(hosts::section(&switchboard, &plan, &mut report)),
            Section::Notice => runtime.block_on(notice::section(&switchboard, &plan, &mut report)),
            Section::WebView => {
                runtime.block_on(web_view::section(&switchboard, &plan, &mut report))
            }
            Section::Tokens => runtime.block_on(tokens::section(&switchboard, &plan, &mut report)),
            Section::Sessions => {
                runtime.block_on(sessions::section(&switchboard, &plan, &mut report))
            }
        };
        if let Err(e) = result {
            eprintln!("section {} failed: {e:#}", section.name());
            report.failures.push(Failure {
                section: section.name(),
                error: format!("{e:#}"),
            });
        }
    }
    report.note(format!(
        "the run took {:.1} s",
        started.elapsed().as_secs_f64()
    ));
    print!("{}", report.markdown(&header));
    Ok(report)
}

/// `--switchboard`, or `switchboard` beside this binary (both are built
/// into the same `target/release`).
fn binary_path(cli: &Cli) -> anyhow::Result<PathBuf> {
    let path = match &cli.switchboard {
        Some(path) => path.clone(),
        None => std::env::current_exe()?
            .parent()
            .context("this binary has no directory")?
            .join("switchboard"),
    };
    if !path.is_file() {
        bail!(
            "{} does not exist; build it with `cargo build --release -p switchboard` \
             or name the binary with --switchboard PATH",
            path.display()
        );
    }
    Ok(path)
}

/// What the reader of the report needs to know about how it was measured.
fn header(switchboard: &Switchboard, plan: &Plan, quick: bool) -> anyhow::Result<Vec<String>> {
    let cpus = std::thread::available_parallelism().map_or(0, usize::from);
    let temp = std::env::temp_dir();
    let fs = |path: &std::path::Path| sys::fs_type(path).unwrap_or_else(|| "unknown".into());
    Ok(vec![
        format!(
            "binary: {} ({})",
            switchboard.path.display(),
            switchboard.version()?
        ),
        format!(
            "machine: {cpus} CPUs, shared by the server and the benchmark's client \
             (one thread: a current-thread tokio runtime); load average {} at the start \
             (other processes running meanwhile skew the results: see the notes)",
            sys::load_average().map_or("unknown".into(), |l| format!("{l:.2}"))
        ),
        format!(
            "mode: {} ({} cold starts, {} workload rounds, {} messages, {} reads)",
            if quick { "quick" } else { "full" },
            plan.cold_runs,
            plan.rounds,
            thousands(plan.messages as f64),
            plan.reads
        ),
        format!(
            "data directories in {} ({}), large history cached in {} ({}); the history \
             is durable on acknowledgement (SQLite WAL, synchronous = FULL)",
            temp.display(),
            fs(&temp),
            plan.cache_dir.display(),
            fs(&plan.cache_dir),
        ),
        "clients: stdio = hand-written JSON-RPC over the child's pipes, ids correlating \
         the 10 concurrent calls on one connection; HTTP = one hyper HTTP/1.1 connection \
         per sender; SSE = one event stream and one POST connection per sender"
            .into(),
    ])
}
