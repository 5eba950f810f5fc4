//! Section 2, the chat workload: [`SENDERS`] concurrent senders, each with
//! one call in flight, each doing [`ITERATIONS`] × (`send_message`, then
//! `read_messages(limit = 50)`) on one channel. Throughput is all calls of a
//! round over the round's wall time; the report gives the median round.
//!
//! Over stdio the senders share the one connection a stdio server has; over
//! Streamable HTTP each sender is its own client with its own connection,
//! and over legacy SSE each has its own SSE session.

use std::{net::SocketAddr, time::Instant};

use anyhow::{Context, ensure};
use futures::future::{join_all, try_join_all};
use serde_json::json;

use crate::{
    Plan,
    report::{Report, Row, Target, Unit, median, thousands},
    rpc::Session,
    server::{Data, Switchboard},
    stdio::StdioConnection,
    sys::{CpuUse, CpuWatch},
    web::{HttpSession, SseSession},
};

const SENDERS: usize = 10;
const ITERATIONS: usize = 50;
const READ_LIMIT: usize = 50;
pub const CALLS_PER_ROUND: usize = SENDERS * ITERATIONS * 2;
const CHANNEL: &str = "#bench";

/// The rounds of one workload run, and the CPU both sides used meanwhile.
pub struct Outcome {
    /// Calls per second of each round.
    rates: Vec<f64>,
    /// The server, then the benchmark itself.
    cpu: CpuUse,
}

impl Outcome {
    pub fn median(&self) -> f64 {
        median(&self.rates)
    }

    /// The single rounds, for the report.
    pub fn rounds(&self) -> String {
        let rates: Vec<String> = self.rates.iter().map(|r| thousands(*r)).collect();
        format!("rounds: {}", rates.join(" / "))
    }

    /// How busy each side was, and how much other processes took.
    pub fn cpu(&self) -> String {
        format!(
            "switchboard used {:.2} cores, the benchmark client {:.2}, other processes {:.2}",
            self.cpu.cores[0], self.cpu.cores[1], self.cpu.others
        )
    }
}

/// Runs `rounds` rounds of the workload on `channel`, one sender per
/// session, and checks afterwards that every send was stored.
pub async fn run<S: Session>(
    sessions: &mut [S],
    channel: &str,
    rounds: usize,
    server_pid: u32,
) -> anyhow::Result<Outcome> {
    ensure!(
        sessions.len() == SENDERS,
        "the workload needs {SENDERS} sessions"
    );
    let (first_id, _) = newest(&mut sessions[0], channel).await?;
    let watch = CpuWatch::start(&[server_pid, std::process::id()])?;
    let mut rates = Vec::with_capacity(rounds);
    for round in 0..rounds {
        let started = Instant::now();
        let senders = sessions
            .iter_mut()
            .enumerate()
            .map(|(index, session)| sender(session, index, round, channel));
        for result in join_all(senders).await {
            result?;
        }
        rates.push(CALLS_PER_ROUND as f64 / started.elapsed().as_secs_f64());
    }
    let cpu = watch.stop()?;
    let (last_id, count) = newest(&mut sessions[0], channel).await?;
    let notices = pause_notices(&mut sessions[0], channel).await?;
    let sent = (rounds * SENDERS * ITERATIONS) as i64;
    ensure!(
        last_id - first_id == sent + notices && count == READ_LIMIT,
        "after {sent} sends (and {notices} notices of paused pushes) the newest message id \
         went from {first_id} to {last_id} and read_messages returned {count} messages"
    );
    Ok(Outcome { rates, cpu })
}

async fn sender<S: Session>(
    session: &mut S,
    index: usize,
    round: usize,
    channel: &str,
) -> anyhow::Result<()> {
    let nick = format!("sender{index}");
    for i in 0..ITERATIONS {
        let text = format!("round {round}, message {i} from {nick}: status is green");
        session
            .call_tool(
                "send_message",
                json!({"channel": channel, "text": text, "sender": nick}),
            )
            .await?;
        session
            .call_tool(
                "read_messages",
                json!({"channel": channel, "limit": READ_LIMIT}),
            )
            .await?;
    }
    Ok(())
}

/// How many times switchboard announced in `channel` that it paused pushes
/// (ten agents talking without a person is what its loop guard watches for).
async fn pause_notices<S: Session>(session: &mut S, channel: &str) -> anyhow::Result<i64> {
    let reply = session
        .call_tool(
            "search_messages",
            json!({"query": "Pausing notifications", "channel": channel, "limit": 100}),
        )
        .await?
        .json()?;
    let found = reply["result"]["structuredContent"]["messages"]
        .as_array()
        .context("search_messages returned no structuredContent.messages")?;
    Ok(found.iter().filter(|m| m["kind"] == "system").count() as i64)
}

/// The id of the newest message in `channel` (0 if none) and how many of the
/// [`READ_LIMIT`] newest messages there are.
async fn newest<S: Session>(session: &mut S, channel: &str) -> anyhow::Result<(i64, usize)> {
    let reply = session
        .call_tool(
            "read_messages",
            json!({"channel": channel, "limit": READ_LIMIT}),
        )
        .await?
        .json()?;
    let messages = reply["result"]["structuredContent"]["messages"]
        .as_array()
        .context("read_messages returned no structuredContent.messages")?;
    let newest = messages.first().map_or(Some(0), |m| m["id"].as_i64());
    Ok((newest.context("a message without an id")?, messages.len()))
}

/// The transports and history locations the section measures.
#[derive(Debug, Clone, Copy)]
enum Setup {
    StdioFile,
    StdioEphemeral,
    HttpFile,
    SseFile,
}

impl Setup {
    fn label(self) -> &'static str {
        match self {
            Setup::StdioFile => "chat workload, stdio, --data-dir",
            Setup::StdioEphemeral => "chat workload, stdio, --ephemeral",
            Setup::HttpFile => "chat workload, Streamable HTTP /mcp, --data-dir",
            Setup::SseFile => "chat workload, legacy SSE, --data-dir",
        }
    }

    fn target(self) -> Target {
        match self {
            Setup::StdioFile => Target::AtLeast(15_000.0),
            Setup::StdioEphemeral => Target::None,
            Setup::HttpFile => Target::AtLeast(8_000.0),
            Setup::SseFile => Target::AtLeast(5_000.0),
        }
    }
}

/// Measures every setup, each on a server of its own.
pub async fn section(
    switchboard: &Switchboard,
    plan: &Plan,
    report: &mut Report,
) -> anyhow::Result<()> {
    for setup in [
        Setup::StdioFile,
        Setup::StdioEphemeral,
        Setup::HttpFile,
        Setup::SseFile,
    ] {
        eprintln!(
            "- {} ({} rounds of {CALLS_PER_ROUND} calls)",
            setup.label(),
            plan.rounds
        );
        let dir = tempfile::tempdir()?;
        let data = match setup {
            Setup::StdioEphemeral => Data::Ephemeral,
            _ => Data::Dir(dir.path()),
        };
        let outcome = match setup {
            Setup::StdioFile | Setup::StdioEphemeral => {
                over_stdio(switchboard, data, CHANNEL, plan.rounds).await
            }
            Setup::HttpFile | Setup::SseFile => {
                let (server, addr) = switchboard.start_http(data).await?;
                let outcome = if matches!(setup, Setup::HttpFile) {
                    over_http(addr, server.pid()?, CHANNEL, plan.rounds).await
                } else {
                    over_sse(addr, server.pid()?, CHANNEL, plan.rounds).await
                };
                server.stop().await?;
                outcome
            }
        }
        .with_context(|| setup.label())?;
        report.note(format!("{}: {}", setup.label(), outcome.cpu()));
        report.rows.push(
            Row::new(
                setup.label(),
                outcome.median(),
                Unit::CallsPerSec,
                setup.target(),
            )
            .detail(outcome.rounds()),
        );
    }
    Ok(())
}

/// The workload over one `serve --stdio`, all senders on its connection.
async fn over_stdio(
    switchboard: &Switchboard,
    data: Data<'_>,
    channel: &str,
    rounds: usize,
) -> anyhow::Result<Outcome> {
    let mut server = switchboard.start_stdio(data)?;
    let connection = StdioConnection::open(&mut server.child).await?;
    let mut sessions = vec![connection.client.clone(); SENDERS];
    let outcome = run(&mut sessions, channel, rounds, server.pid()?).await?;
    drop(sessions);
    connection.close().await?;
    server.wait().await?;
    Ok(outcome)
}

/// The workload over Streamable HTTP, one client per sender.
pub async fn over_http(
    addr: SocketAddr,
    server_pid: u32,
    channel: &str,
    rounds: usize,
) -> anyhow::Result<Outcome> {
    let mut sessions = try_join_all((0..SENDERS).map(|_| HttpSession::open(addr))).await?;
    run(&mut sessions, channel, rounds, server_pid).await
}

/// The workload over legacy SSE, one SSE session per sender.
async fn over_sse(
    addr: SocketAddr,
    server_pid: u32,
    channel: &str,
    rounds: usize,
) -> anyhow::Result<Outcome> {
    let mut sessions = try_join_all((0..SENDERS).map(|_| SseSession::open(addr))).await?;
    run(&mut sessions, channel, rounds, server_pid).await
}
