//! Section `sessions`: what a legacy SSE session costs the daemon.
//!
//! `serve --http --ephemeral`, started afresh for each figure, with one
//! session of the kind opened first (so that what the first connection sets
//! up is left out); then [`Plan::sse_sessions`] more, held open, and the
//! daemon's RSS before and after, per session:
//!
//! - **idle streams**: `GET /sse` and its `endpoint` event, nothing else
//!   (what an abusive or forgetful client leaves behind);
//! - **initialized sessions**: the stream plus the MCP handshake POSTed on
//!   a second connection (an agent that connected and went quiet).

use std::{future::Future, net::SocketAddr, time::Duration};

use anyhow::ensure;

use crate::{
    Plan,
    report::{Report, Row, Target, Unit},
    server::{Data, Switchboard},
    sys::Memory,
    web::{EventStream, SseSession},
};

/// Most KiB of the daemon's memory one idle stream may take (68 before
/// rmcp's service waited for the first POST and the channels were boxed; the
/// connection's buffers in hyper are most of what is left).
const IDLE_STREAM_KIB: f64 = 40.0;
/// Most KiB one initialized session may take, its POST connection included
/// (112 before; rmcp's own channels and service are most of it).
const INITIALIZED_KIB: f64 = 100.0;

pub async fn section(
    switchboard: &Switchboard,
    plan: &Plan,
    report: &mut Report,
) -> anyhow::Result<()> {
    let n = plan.sse_sessions;
    eprintln!("- memory: {n} idle GET /sse streams");
    let row = per_session(switchboard, n, idle_stream).await?;
    report.rows.push(row.named(
        format!("daemon memory per idle legacy SSE stream ({n} × GET /sse, no request)"),
        IDLE_STREAM_KIB,
    ));
    eprintln!("- memory: {n} initialized legacy SSE sessions");
    let row = per_session(switchboard, n, SseSession::open).await?;
    report.rows.push(row.named(
        format!(
            "daemon memory per initialized legacy SSE session ({n}, each quiet after the handshake)"
        ),
        INITIALIZED_KIB,
    ));
    Ok(())
}

/// `GET /sse` read up to its `endpoint` event.
async fn idle_stream(addr: SocketAddr) -> anyhow::Result<EventStream> {
    let mut stream = EventStream::open(addr, "/sse").await?;
    let endpoint = stream.next().await?;
    ensure!(endpoint.name == "endpoint", "no endpoint event");
    Ok(stream)
}

/// The RSS of a fresh daemon before and after `n` sessions made by `open`.
struct Measured {
    before: Memory,
    after: Memory,
    n: usize,
}

impl Measured {
    fn named(&self, metric: String, max_kib: f64) -> Row {
        let per = (self.after.rss_kib as f64 - self.before.rss_kib as f64) / self.n as f64;
        Row::new(metric, per, Unit::Kibibytes, Target::AtMost(max_kib)).detail(format!(
            "RSS {:.1} → {:.1} MiB",
            self.before.rss_kib as f64 / 1024.0,
            self.after.rss_kib as f64 / 1024.0
        ))
    }
}

async fn per_session<T, F, Fut>(
    switchboard: &Switchboard,
    n: usize,
    open: F,
) -> anyhow::Result<Measured>
where
    F: Fn(SocketAddr) -> Fut,
    Fut: Future<Output = anyhow::Result<T>>,
{
    let (server, addr) = switchboard.start_http(Data::Ephemeral).await?;
    let pid = server.pid()?;
    let first = open(addr).await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = Memory::of(pid)?;
    let mut held = Vec::with_capacity(n);
    for _ in 0..n {
        held.push(open(addr).await?);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = Memory::of(pid)?;
    drop(held);
    drop(first);
    server.stop().await?;
    Ok(Measured { before, after, n })
}
