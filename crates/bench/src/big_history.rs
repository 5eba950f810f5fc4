//! Section 3, reading a large channel: `read_messages(limit = 50)` on a
//! channel holding [`Plan::messages`] messages, timed in-process through
//! [`History::read`] and as a sequential stdio round trip through the
//! server.
//!
//! The filled database is built with [`History::append`] itself (batches of
//! [`BATCH`] messages, one transaction each, so every row, index, full-text
//! entry and speaker is exactly what the server writes) and cached under
//! the cache directory, keyed by the message count; `--fresh` rebuilds it.

use std::{
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::{Context, ensure};
use serde_json::json;
use switchboard_chat::{Durability, History, Location, NameRules, NewMessage, SenderKind};
use tempfile::TempDir;

use crate::{
    Plan,
    report::{Report, Row, Target, Unit, micros, percentile, thousands},
    rpc::Session,
    server::{Data, Switchboard},
    stdio::StdioConnection,
    sys::CpuWatch,
};

/// The channel that holds the messages.
pub const CHANNEL: &str = "#big";
/// Messages per append (and per transaction) while filling.
const BATCH: usize = 20_000;
/// Marks a cache directory whose fill completed.
const COMPLETE: &str = "complete";
/// Untimed reads first: connections opened, statements prepared, pages cached.
const WARM_UP: usize = 200;
const READ_LIMIT: usize = 50;

/// The data directory (with `history.db`) holding [`CHANNEL`] filled with
/// `plan.messages` messages; built unless a complete one is cached.
pub async fn filled(plan: &Plan, report: &mut Report) -> anyhow::Result<PathBuf> {
    let dir = plan.cache_dir.join(format!("messages-{}", plan.messages));
    if dir.join(COMPLETE).exists() && !plan.fresh.get() {
        report.note(format!(
            "the {} message history was cached in {}",
            thousands(plan.messages as f64),
            dir.display()
        ));
        return Ok(dir);
    }
    if dir.exists() {
        std::fs::remove_dir_all(&dir)
            .with_context(|| format!("cannot remove {}", dir.display()))?;
    }
    eprintln!(
        "- filling {} with {} messages",
        dir.display(),
        plan.messages
    );
    let started = Instant::now();
    fill(&dir.join("history.db"), plan.messages).await?;
    std::fs::write(dir.join(COMPLETE), b"")?;
    plan.fresh.set(false);
    report.note(format!(
        "filled the {} message history with History::append in {:.1} s",
        thousands(plan.messages as f64),
        started.elapsed().as_secs_f64()
    ));
    Ok(dir)
}

async fn fill(path: &Path, count: usize) -> anyhow::Result<()> {
    // Normal durability: nothing depends on the fill surviving a power cut.
    let history = History::open(&Location::File(path.to_owned()), Durability::Normal)?;
    let rules = NameRules::default();
    let channel = rules.channel(CHANNEL)?;
    let nicks = (0..16)
        .map(|i| rules.nick(&format!("agent{i}")))
        .collect::<Result<Vec<_>, _>>()?;
    let mut next_report = 0;
    for start in (0..count).step_by(BATCH) {
        let batch = (start..count.min(start + BATCH))
            .map(|i| {
                let nick = &nicks[i % nicks.len()];
                NewMessage::live(
                    channel.clone(),
                    nick.name(),
                    nick.key(),
                    message_text(i),
                    SenderKind::Agent,
                )
            })
            .collect();
        history.append(batch).await?;
        if start >= next_report {
            eprintln!("  {start} messages");
            next_report += count / 10;
        }
    }
    history.close();
    Ok(())
}

/// A scratch copy of [`filled`], for a server that writes to it: the cached
/// one stays as built.
pub async fn copied(plan: &Plan, report: &mut Report) -> anyhow::Result<TempDir> {
    let cached = filled(plan, report).await?;
    let copy = tempfile::tempdir()?;
    for file in ["history.db", "history.db-wal"] {
        let from = cached.join(file);
        if from.exists() {
            std::fs::copy(&from, copy.path().join(file))
                .with_context(|| format!("cannot copy {}", from.display()))?;
        }
    }
    Ok(copy)
}

/// A plausible chat line of 8 to 15 words, different for every `i`.
pub fn message_text(i: usize) -> String {
    const WORDS: &[&str] = &[
        "build",
        "deploy",
        "review",
        "merge",
        "test",
        "release",
        "agent",
        "channel",
        "status",
        "green",
        "failed",
        "retry",
        "queue",
        "index",
        "cache",
        "latency",
        "the",
        "a",
        "is",
        "on",
        "after",
        "before",
        "branch",
        "ticket",
        "fixed",
        "flaky",
        "migration",
        "rollback",
        "config",
        "service",
        "alert",
        "done",
    ];
    // SplitMix64, so the words vary without a dependency on a RNG crate.
    let mut state = i as u64;
    let mut next = || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let words = 8 + next() % 8;
    let mut text = format!("#{i}");
    for _ in 0..words {
        text.push(' ');
        text.push_str(WORDS[next() as usize % WORDS.len()]);
    }
    text
}

pub async fn section(
    switchboard: &Switchboard,
    plan: &Plan,
    report: &mut Report,
) -> anyhow::Result<()> {
    let dir = filled(plan, report).await?;
    let count = thousands(plan.messages as f64);

    eprintln!("- History::read in-process ({} reads)", plan.reads);
    let watch = CpuWatch::start(&[std::process::id()])?;
    let samples = micros(&in_process(&dir, plan.reads)?);
    report.note(format!(
        "in-process reads: other processes used {:.2} cores meanwhile",
        watch.stop()?.others
    ));
    report.rows.push(latency_row(
        format!("read_messages(limit=50), {count} messages, in-process History::read (p50)"),
        &samples,
        200.0,
    ));

    eprintln!("- read_messages over stdio ({} round trips)", plan.reads);
    let samples = micros(&over_stdio(switchboard, &dir, plan.reads, report).await?);
    report.rows.push(latency_row(
        format!("read_messages(limit=50), {count} messages, stdio round trip (p50)"),
        &samples,
        300.0,
    ));
    Ok(())
}

/// A row for latencies in µs: the p50 against `limit_us`, and the p99.
fn latency_row(metric: String, samples: &[f64], limit_us: f64) -> Row {
    Row::new(
        metric,
        percentile(samples, 50.0),
        Unit::Micros,
        Target::AtMost(limit_us),
    )
    .detail(format!(
        "p99 {}",
        Unit::Micros.show(percentile(samples, 99.0))
    ))
}

fn in_process(dir: &Path, reads: usize) -> anyhow::Result<Vec<Duration>> {
    let history = History::open(&Location::File(dir.join("history.db")), Durability::Full)?;
    let key = NameRules::default().channel(CHANNEL)?.key().to_owned();
    let read = || history.read(&key, None, READ_LIMIT);
    let found = read()?.len();
    ensure!(
        found == READ_LIMIT,
        "History::read returned {found} messages, not {READ_LIMIT}"
    );
    for _ in 0..WARM_UP {
        read()?;
    }
    let mut samples = Vec::with_capacity(reads);
    for _ in 0..reads {
        let started = Instant::now();
        read()?;
        samples.push(started.elapsed());
    }
    history.close();
    Ok(samples)
}

async fn over_stdio(
    switchboard: &Switchboard,
    dir: &Path,
    reads: usize,
    report: &mut Report,
) -> anyhow::Result<Vec<Duration>> {
    let mut server = switchboard.start_stdio(Data::Dir(dir))?;
    let connection = StdioConnection::open(&mut server.child).await?;
    let mut client = connection.client.clone();
    let args = json!({"channel": CHANNEL, "limit": READ_LIMIT});
    let reply = client
        .call_tool("read_messages", args.clone())
        .await?
        .json()?;
    let found = reply["result"]["structuredContent"]["messages"]
        .as_array()
        .map_or(0, Vec::len);
    ensure!(
        found == READ_LIMIT,
        "read_messages returned {found} messages, not {READ_LIMIT}"
    );
    for _ in 0..WARM_UP {
        client.call_tool("read_messages", args.clone()).await?;
    }
    let watch = CpuWatch::start(&[server.pid()?, std::process::id()])?;
    let mut samples = Vec::with_capacity(reads);
    for _ in 0..reads {
        let args = args.clone();
        let started = Instant::now();
        client.call_tool("read_messages", args).await?;
        samples.push(started.elapsed());
    }
    let cpu = watch.stop()?;
    report.note(format!(
        "stdio round trips: switchboard used {:.2} cores, the benchmark client {:.2}, \
         other processes {:.2}",
        cpu.cores[0], cpu.cores[1], cpu.others
    ));
    drop(client);
    connection.close().await?;
    server.wait().await?;
    Ok(samples)
}
