//! Section `notice`: agents that notice — pushes, waits and unread counts.
//!
//! - **Fan-out**: a daemon (`serve --no-http --socket PATH --ephemeral`)
//!   with [`Plan::fan_out`] `switchboard-shim --nick agentN` sessions (200),
//!   each under a minimal stdio client of the benchmark that notes when a
//!   `notifications/claude/channel` line arrives. A relay client in the
//!   benchmark sends one message that mentions every agent; the latency of
//!   each event is counted from the send's acknowledgement. [`ROUNDS`]
//!   messages, spaced beyond the coalescing window.
//! - **Memory per subscribed session**: the daemon's RSS before and after
//!   [`SESSIONS`] relay connections that agreed on `claude/channel` (each a
//!   subscribed session), from the benchmark itself.
//! - **Blocked waits**: `serve --http` with [`SESSIONS`] Streamable HTTP
//!   connections each blocked in `wait_for_messages` on one channel; one
//!   message from another connection wakes them all; latency from its
//!   acknowledgement to each reply, and the daemon's RSS per waiting call.
//! - **Across processes**: two `serve --stdio --data-dir DIR` sharing one
//!   history file; one blocked in `wait_for_messages`, the other sends;
//!   latency from the send's acknowledgement to the wait's reply, over
//!   [`CROSS_ROUNDS`] rounds.
//! - **Unread counts**: `list_channels` for an agent in [`CHANNELS`] (100)
//!   channels of [`Plan::channel_messages`] messages each (100,000), its
//!   read cursors halfway, sequential stdio round trips; the history is
//!   built with `History::append` and cached like the `read` section's.

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use anyhow::{Context, bail, ensure};
use serde_json::{Value, json};
use switchboard_chat::{Durability, History, Location, NameRules, NewMessage, SenderKind};
use switchboard_relay::{
    client::{Hello, Link},
    events,
};
use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader},
    task::JoinHandle,
};

use crate::{
    Plan,
    report::{Report, Row, Target, Unit, millis, percentile, thousands},
    rpc::{self, Session},
    server::{Data, ShimStart, Switchboard},
    stdio::StdioConnection,
    sys::Memory,
    web::HttpSession,
};

/// Messages that mention every agent, for the fan-out.
const ROUNDS: usize = 5;
/// Longer than the push coalescing window (250 ms), so every message is
/// its own event.
const SPACING: Duration = Duration::from_millis(400);
/// Subscribed sessions (and blocked waits) measured for memory.
const SESSIONS: usize = 1000;
/// Channels of the unread-count history.
const CHANNELS: usize = 100;
/// The agent whose unread counts are read.
const READER: &str = "reader";
const FAN_OUT_P50_MS: f64 = 5.0;
const FAN_OUT_P99_MS: f64 = 50.0;
const WAKE_P99_MS: f64 = 100.0;
/// Sends of the cross-process wake-up.
const CROSS_ROUNDS: usize = 50;
const CROSS_P99_MS: f64 = 10.0;
const SESSION_KIB: f64 = 64.0;
const LIST_P50_MS: f64 = 2.0;
const CALL: Duration = Duration::from_secs(60);

pub async fn section(
    switchboard: &Switchboard,
    plan: &Plan,
    report: &mut Report,
) -> anyhow::Result<()> {
    fan_out(switchboard, plan, report).await?;
    subscribed_memory(switchboard, report).await?;
    blocked_waits(switchboard, report).await?;
    cross_process_waits(switchboard, report).await?;
    unread_counts(switchboard, plan, report).await
}

/// One shim session whose pushes are timed.
struct Agent {
    server: crate::server::Server,
    arrivals: Arc<Mutex<Vec<Instant>>>,
    reader: JoinHandle<()>,
}

async fn fan_out(
    switchboard: &Switchboard,
    plan: &Plan,
    report: &mut Report,
) -> anyhow::Result<()> {
    let work = tempfile::tempdir()?;
    let socket = work.path().join("relay.sock");
    let daemon = switchboard.start_relay(&socket, Data::Ephemeral).await?;
    let count = plan.fan_out;
    eprintln!("- fan-out: {count} shims subscribed to the daemon");
    let mut agents = Vec::with_capacity(count);
    for i in 0..count {
        agents.push(start_agent(switchboard, &socket, &format!("agent{i}")).await?);
    }
    let hello = Hello {
        identity: Some("boss".into()),
        ..Hello::new("switchboard-bench")
    };
    let (link, _incoming) = Link::connect_as(&socket, Duration::from_secs(1), hello).await?;
    let everyone: Vec<String> = (0..count).map(|i| format!("agent{i}")).collect();
    let text = format!("{}: please pull and rebuild", everyone.join(", "));
    let mut samples = Vec::with_capacity(count * ROUNDS);
    for round in 0..ROUNDS {
        let acked = call(
            &link,
            "send_message",
            json!({"channel": "#all", "text": text}),
        )
        .await?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while agents
            .iter()
            .any(|a| a.arrivals.lock().expect("arrivals").len() <= round)
        {
            ensure!(
                Instant::now() < deadline,
                "round {round}: only {} of {count} sessions were pushed the message within 10 s",
                agents
                    .iter()
                    .filter(|a| a.arrivals.lock().expect("arrivals").len() > round)
                    .count()
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        for agent in &agents {
            let arrived = agent.arrivals.lock().expect("arrivals")[round];
            samples.push(arrived.saturating_duration_since(acked));
        }
        tokio::time::sleep(SPACING).await;
    }
    let ms = millis(&samples);
    report.rows.push(
        Row::new(
            format!("push fan-out: one message mentioning {count} shim sessions, event after the send's ack (p50)"),
            percentile(&ms, 50.0),
            Unit::Millis,
            Target::AtMost(FAN_OUT_P50_MS),
        )
        .detail(format!("{} events, all delivered", samples.len())),
    );
    report.rows.push(Row::new(
        format!("push fan-out to {count} sessions (p99)"),
        percentile(&ms, 99.0),
        Unit::Millis,
        Target::AtMost(FAN_OUT_P99_MS),
    ));
    for agent in agents {
        agent.reader.abort();
        drop(agent.server);
    }
    daemon.stop().await
}

/// `switchboard-shim --socket SOCKET --nick NICK`, initialized, its pushes
/// timed as they arrive.
async fn start_agent(
    switchboard: &Switchboard,
    socket: &Path,
    nick: &str,
) -> anyhow::Result<Agent> {
    let mut cmd =
        tokio::process::Command::from(switchboard.shim_command(socket, ShimStart::Binary));
    cmd.args(["--nick", nick])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    let mut child = cmd.spawn().context("cannot start switchboard-shim")?;
    let mut stdin = child.stdin.take().context("stdin is piped")?;
    let stdout = child.stdout.take().context("stdout is piped")?;
    stdin
        .write_all(
            format!(
                "{}\n{}\n",
                rpc::request(1, "initialize", &rpc::initialize_params()),
                rpc::INITIALIZED
            )
            .as_bytes(),
        )
        .await?;
    let mut lines = BufReader::new(stdout).lines();
    let first = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
        .await
        .context("the shim did not answer initialize")??
        .context("the shim closed stdout")?;
    ensure!(
        first.contains("\"claude/channel\""),
        "the shim offered no channel events: {first:.300}"
    );
    let arrivals = Arc::new(Mutex::new(Vec::new()));
    let reader = {
        let arrivals = arrivals.clone();
        tokio::spawn(async move {
            let _stdin = stdin;
            while let Ok(Some(line)) = lines.next_line().await {
                if line.contains("notifications/claude/channel") {
                    arrivals.lock().expect("arrivals").push(Instant::now());
                }
            }
        })
    };
    Ok(Agent {
        server: crate::server::Server::adopt(child),
        arrivals,
        reader,
    })
}

/// Calls a tool over a relay link; returns when the answer arrived.
async fn call(link: &Link, tool: &str, arguments: Value) -> anyhow::Result<Instant> {
    let params = json!({"name": tool, "arguments": arguments});
    let result = link
        .request("tools/call", params.as_object().cloned(), CALL)
        .await?;
    let at = Instant::now();
    ensure!(result["isError"] == false, "{tool} failed: {result}");
    Ok(at)
}

async fn subscribed_memory(switchboard: &Switchboard, report: &mut Report) -> anyhow::Result<()> {
    let work = tempfile::tempdir()?;
    let socket = work.path().join("relay.sock");
    let daemon = switchboard.start_relay(&socket, Data::Ephemeral).await?;
    eprintln!("- memory: {SESSIONS} subscribed relay sessions");
    // One session first, so the per-session figure leaves out what every
    // first connection sets up.
    let hello = |i: usize| Hello {
        identity: Some(format!("listener{i}")),
        events: vec![events::CHANNEL.to_owned()],
        ..Hello::new("switchboard-bench")
    };
    let (first, _first_in) = Link::connect_as(&socket, Duration::from_secs(1), hello(0)).await?;
    first
        .wait_welcome(Duration::from_secs(5))
        .await
        .context("no welcome")?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = Memory::of(daemon.pid()?)?;
    let mut links = Vec::with_capacity(SESSIONS);
    for i in 1..=SESSIONS {
        let (link, incoming) = Link::connect_as(&socket, Duration::from_secs(1), hello(i)).await?;
        link.wait_welcome(Duration::from_secs(5))
            .await
            .context("no welcome")?;
        links.push((link, incoming));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = Memory::of(daemon.pid()?)?;
    let per = (after.rss_kib as f64 - before.rss_kib as f64) / SESSIONS as f64;
    report.rows.push(
        Row::new(
            format!("daemon memory per subscribed session ({SESSIONS} relay sessions with push)"),
            per,
            Unit::Kibibytes,
            Target::AtMost(SESSION_KIB),
        )
        .detail(format!(
            "RSS {:.1} → {:.1} MiB",
            before.rss_kib as f64 / 1024.0,
            after.rss_kib as f64 / 1024.0
        )),
    );
    drop(links);
    drop(first);
    daemon.stop().await
}

async fn blocked_waits(switchboard: &Switchboard, report: &mut Report) -> anyhow::Result<()> {
    let (daemon, addr) = switchboard.start_http(Data::Ephemeral).await?;
    eprintln!("- wake-up: {SESSIONS} wait_for_messages blocked over Streamable HTTP");
    let mut sender = HttpSession::open(addr).await?;
    sender
        .request(
            "tools/call",
            &rpc::tool_params("create_channel", json!({"name": "#wake"})),
        )
        .await?
        .ok()?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = Memory::of(daemon.pid()?)?;
    let mut waits = Vec::with_capacity(SESSIONS);
    for _ in 0..SESSIONS {
        let mut session = HttpSession::open(addr).await?;
        waits.push(tokio::spawn(async move {
            let args = json!({"channel": "#wake", "timeout_s": 50});
            let reply = session
                .request("tools/call", &rpc::tool_params("wait_for_messages", args))
                .await;
            (Instant::now(), reply)
        }));
    }
    // Every wait is in (its request sent and parked) well within this.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let blocked = Memory::of(daemon.pid()?)?;
    let reply = sender
        .request(
            "tools/call",
            &rpc::tool_params(
                "send_message",
                json!({"channel": "#wake", "text": "wake up", "sender": "bell"}),
            ),
        )
        .await?
        .ok()?;
    let acked = Instant::now();
    drop(reply);
    let mut samples = Vec::with_capacity(SESSIONS);
    for wait in waits {
        let (at, reply) = wait.await?;
        let reply = reply?.ok()?;
        ensure!(
            reply.text.contains("wake up"),
            "a wait returned without the message: {:.300}",
            reply.text
        );
        samples.push(at.saturating_duration_since(acked));
    }
    let ms = millis(&samples);
    report.rows.push(
        Row::new(
            format!(
                "{SESSIONS} blocked wait_for_messages over Streamable HTTP woken by one send (p99)"
            ),
            percentile(&ms, 99.0),
            Unit::Millis,
            Target::AtMost(WAKE_P99_MS),
        )
        .detail(format!(
            "p50 {}, all {} woken",
            Unit::Millis.show(percentile(&ms, 50.0)),
            samples.len()
        )),
    );
    let per = (blocked.rss_kib as f64 - before.rss_kib as f64) / SESSIONS as f64;
    report.rows.push(Row::new(
        format!("daemon memory per blocked wait ({SESSIONS} HTTP connections)"),
        per,
        Unit::Kibibytes,
        Target::AtMost(SESSION_KIB),
    ));
    daemon.stop().await
}

/// `serve --stdio` over `dir`, handshaken.
async fn stdio_on(
    switchboard: &Switchboard,
    dir: &Path,
) -> anyhow::Result<(tokio::process::Child, StdioConnection)> {
    let mut cmd = tokio::process::Command::from(switchboard.command(&["--stdio"], Data::Dir(dir)));
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    let mut child = cmd
        .spawn()
        .context("cannot start switchboard serve --stdio")?;
    let connection = StdioConnection::open(&mut child).await?;
    Ok((child, connection))
}

async fn cross_process_waits(switchboard: &Switchboard, report: &mut Report) -> anyhow::Result<()> {
    eprintln!(
        "- wake-up across processes: two serve --stdio sharing a data dir, {CROSS_ROUNDS} sends"
    );
    let dir = tempfile::tempdir()?;
    let (_waiter_child, waiter) = stdio_on(switchboard, dir.path()).await?;
    let (_sender_child, sender) = stdio_on(switchboard, dir.path()).await?;
    let mut sending = sender.client.clone();
    let send = |i: usize| {
        rpc::tool_params(
            "send_message",
            json!({"channel": "#cross", "text": format!("ping {i}"), "sender": "bell"}),
        )
    };
    sending.request("tools/call", &send(0)).await?.ok()?;
    let mut samples = Vec::with_capacity(CROSS_ROUNDS);
    for i in 1..=CROSS_ROUNDS {
        let mut waiting = waiter.client.clone();
        let wait = tokio::spawn(async move {
            let args = json!({"channel": "#cross", "timeout_s": 20});
            let reply = waiting
                .request("tools/call", &rpc::tool_params("wait_for_messages", args))
                .await;
            (Instant::now(), reply)
        });
        // The wait is parked well within this.
        tokio::time::sleep(Duration::from_millis(100)).await;
        sending.request("tools/call", &send(i)).await?.ok()?;
        let acked = Instant::now();
        let (at, reply) = wait.await?;
        let reply = reply?.ok()?;
        ensure!(
            reply.text.contains(&format!("ping {i}")),
            "the wait returned without the other process's message: {:.300}",
            reply.text
        );
        samples.push(at.saturating_duration_since(acked));
    }
    let ms = millis(&samples);
    report.rows.push(
        Row::new(
            "wait_for_messages woken by a send in another serve --stdio sharing the data dir (p99)",
            percentile(&ms, 99.0),
            Unit::Millis,
            Target::AtMost(CROSS_P99_MS),
        )
        .detail(format!(
            "p50 {}, {} sends",
            Unit::Millis.show(percentile(&ms, 50.0)),
            samples.len()
        )),
    );
    drop(sending);
    sender.close().await?;
    waiter.close().await
}

async fn unread_counts(
    switchboard: &Switchboard,
    plan: &Plan,
    report: &mut Report,
) -> anyhow::Result<()> {
    let dir = filled(plan, report).await?;
    // A scratch copy: the reader's cursors are written into it.
    let scratch = tempfile::tempdir()?;
    std::fs::copy(dir.join("history.db"), scratch.path().join("history.db"))?;
    set_cursors(
        &scratch.path().join("history.db"),
        plan.channel_messages / 2,
    )?;
    let mut cmd = tokio::process::Command::from(
        switchboard.command(&["--stdio", "--nick", READER], Data::Dir(scratch.path())),
    );
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    let started = Instant::now();
    let mut child = cmd.spawn()?;
    let connection = StdioConnection::open(&mut child).await?;
    let opened = started.elapsed();
    let mut client = connection.client.clone();
    let per_channel = thousands(plan.channel_messages as f64);
    eprintln!(
        "- list_channels with {CHANNELS} channels × {per_channel} messages ({} calls)",
        plan.reads
    );
    let first = client
        .request("tools/call", &rpc::tool_params("list_channels", json!({})))
        .await?
        .ok()?;
    let half = plan.channel_messages / 2;
    ensure!(
        first.text.contains(&format!("{half} unread")),
        "list_channels did not show {half} unread: {:.400}",
        first.text
    );
    let mut samples = Vec::with_capacity(plan.reads);
    for _ in 0..plan.reads {
        let at = Instant::now();
        client
            .request("tools/call", &rpc::tool_params("list_channels", json!({})))
            .await?
            .ok()?;
        samples.push(at.elapsed());
    }
    let ms = millis(&samples);
    report.rows.push(
        Row::new(
            format!("list_channels with unread counts, {CHANNELS} channels × {per_channel} messages, stdio round trip (p50)"),
            percentile(&ms, 50.0),
            Unit::Millis,
            Target::AtMost(LIST_P50_MS),
        )
        .detail(format!("p99 {}", Unit::Millis.show(percentile(&ms, 99.0)))),
    );
    report.note(format!(
        "unread counts: serve --stdio opened the {} message history with {CHANNELS} read cursors in {:.0} ms",
        thousands((CHANNELS * plan.channel_messages) as f64),
        opened.as_secs_f64() * 1e3
    ));
    drop(client);
    connection.close().await?;
    let _ = child.wait().await;
    Ok(())
}

/// Cursors for [`READER`] in every channel at `read_seq`, as if it had
/// joined them all and read half of each.
fn set_cursors(db: &Path, read_seq: usize) -> anyhow::Result<()> {
    let conn = rusqlite::Connection::open(db)?;
    let changed = conn.execute(
        "INSERT OR REPLACE INTO cursors (identity, channel_id, read_seq, joined)
         SELECT ?1, id, ?2, 1 FROM channels",
        rusqlite::params![READER, read_seq as i64],
    )?;
    if changed != CHANNELS {
        bail!(
            "expected {CHANNELS} channels in {}, found {changed}",
            db.display()
        );
    }
    Ok(())
}

/// The data directory with [`CHANNELS`] channels of `plan.channel_messages`
/// messages each; built unless a complete one is cached.
async fn filled(plan: &Plan, report: &mut Report) -> anyhow::Result<PathBuf> {
    let dir = plan
        .cache_dir
        .join(format!("channels-{CHANNELS}x{}", plan.channel_messages));
    let complete = dir.join("complete");
    if complete.exists() && !plan.fresh.get() {
        return Ok(dir);
    }
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    eprintln!(
        "- filling {} ({CHANNELS} channels × {} messages)",
        dir.display(),
        plan.channel_messages
    );
    let started = Instant::now();
    let history = History::open(&Location::File(dir.join("history.db")), Durability::Normal)?;
    let rules = NameRules::default();
    let nicks = (0..16)
        .map(|i| rules.nick(&format!("agent{i}")))
        .collect::<Result<Vec<_>, _>>()?;
    const BATCH: usize = 20_000;
    for c in 0..CHANNELS {
        let channel = rules.channel(&format!("#c{c}"))?;
        for start in (0..plan.channel_messages).step_by(BATCH) {
            let batch = (start..plan.channel_messages.min(start + BATCH))
                .map(|i| {
                    let nick = &nicks[i % nicks.len()];
                    NewMessage::live(
                        channel.clone(),
                        nick.name(),
                        nick.key(),
                        crate::big_history::message_text(i),
                        SenderKind::Agent,
                    )
                })
                .collect();
            history.append(batch).await?;
        }
        if c % 10 == 9 {
            eprintln!("  {} channels", c + 1);
        }
    }
    history.close();
    std::fs::write(&complete, b"")?;
    report.note(format!(
        "filled the {CHANNELS} × {} message history in {:.1} s",
        thousands(plan.channel_messages as f64),
        started.elapsed().as_secs_f64()
    ));
    Ok(dir)
}
