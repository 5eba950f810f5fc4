//! Section 4, memory: the resident set (`VmRSS`) of `serve` in HTTP mode
//! with a file-backed history, idle right after start, and after the chat
//! workload over Streamable HTTP with the large history of section 3 as its
//! data directory (a copy, so the cached one stays as built).

use std::time::Duration;

use crate::{
    Plan, big_history,
    report::{Report, Row, thousands},
    server::{Data, Switchboard},
    sys::Memory,
    workload,
};

/// How long the server may settle after start before the idle reading.
const SETTLE: Duration = Duration::from_millis(500);

pub async fn section(
    switchboard: &Switchboard,
    plan: &Plan,
    report: &mut Report,
) -> anyhow::Result<()> {
    eprintln!("- RSS idle after start");
    let empty = tempfile::tempdir()?;
    let (server, _) = switchboard.start_http(Data::Dir(empty.path())).await?;
    tokio::time::sleep(SETTLE).await;
    let idle = Memory::of(server.pid()?)?;
    server.stop().await?;
    report.rows.push(Row::memory(
        "RSS of serve --http --data-dir, idle after start",
        idle,
        20.0,
    ));

    let copy = big_history::copied(plan, report).await?;
    eprintln!(
        "- RSS after the chat workload over HTTP on {} messages ({} × {} calls)",
        thousands(plan.messages as f64),
        plan.rounds,
        workload::CALLS_PER_ROUND
    );
    let (server, addr) = switchboard.start_http(Data::Dir(copy.path())).await?;
    let pid = server.pid()?;
    let outcome = workload::over_http(addr, pid, big_history::CHANNEL, plan.rounds).await?;
    let loaded = Memory::of(pid)?;
    server.stop().await?;
    report.note(format!(
        "the workload on the {} message history ran at {} calls/s (median; {}); {}",
        thousands(plan.messages as f64),
        thousands(outcome.median()),
        outcome.rounds(),
        outcome.cpu()
    ));
    report.rows.push(Row::memory(
        format!(
            "RSS of serve --http after the chat workload, {} message history",
            thousands(plan.messages as f64)
        ),
        loaded,
        40.0,
    ));
    Ok(())
}
