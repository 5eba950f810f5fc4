//! Section 1, cold start: the time from spawning `serve --stdio` to reading
//! the reply to an `initialize` written on its stdin at once, which an agent
//! pays at the start of every session. Plain blocking I/O, no async runtime
//! in the timed path.
//!
//! Three histories: `--ephemeral`; `--data-dir` holding an existing history
//! (the usual case); and `--data-dir` on an empty directory, where the
//! server creates the database first (once per installation).
//!
//! [`time_runs`] and [`row`] serve any stdio MCP server; the `relay` section
//! times `switchboard shim` with them.

use std::{
    io::{BufRead, BufReader, Write},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, bail};

use crate::{
    Plan,
    report::{Report, Row, Target, Unit, median, millis, percentile},
    rpc::{self, Reply},
    server::{Data, Switchboard},
    sys::CpuWatch,
};

/// Untimed runs first, so the binary and its libraries are in the page cache.
const WARM_UP: usize = 3;
const TARGET_MS: f64 = 10.0;

/// Where the history of the server under test lives.
#[derive(Clone, Copy)]
enum History {
    Ephemeral,
    Existing,
    New,
}

impl History {
    fn label(self) -> &'static str {
        match self {
            History::Ephemeral => "--ephemeral",
            History::Existing => "--data-dir, existing history",
            History::New => "--data-dir, new history",
        }
    }

    /// Creating the database happens once per installation: informative only.
    fn target(self) -> Target {
        match self {
            History::Ephemeral | History::Existing => Target::AtMost(TARGET_MS),
            History::New => Target::None,
        }
    }
}

pub fn section(switchboard: &Switchboard, plan: &Plan, report: &mut Report) -> anyhow::Result<()> {
    let work = tempfile::tempdir()?;
    let existing = work.path().join("existing");
    let watch = CpuWatch::start(&[std::process::id()])?;
    for history in [History::Ephemeral, History::Existing, History::New] {
        let label = history.label();
        eprintln!("- cold start, {label} ({} runs)", plan.cold_runs);
        let samples = time_runs(plan.cold_runs, |run| {
            let new = work.path().join(format!("new-{run}"));
            let data = match history {
                History::Ephemeral => Data::Ephemeral,
                History::Existing => Data::Dir(&existing),
                History::New => Data::Dir(&new),
            };
            switchboard.command(&["--stdio"], data)
        })
        .with_context(|| format!("cold start, {label}"))?;
        report.rows.push(row(
            format!("cold start to initialize reply, stdio, {label} (median)"),
            &samples,
            history.target(),
        ));
    }
    report.note(format!(
        "cold starts: other processes (the servers started included) used {:.2} cores meanwhile",
        watch.stop()?.others
    ));
    Ok(())
}

/// Times `runs` cold starts of the stdio MCP server that `command(run)`
/// builds, after [`WARM_UP`] untimed ones (`run` counts those too).
pub fn time_runs(
    runs: usize,
    mut command: impl FnMut(usize) -> Command,
) -> anyhow::Result<Vec<Duration>> {
    let mut samples = Vec::with_capacity(runs);
    for run in 0..WARM_UP + runs {
        let elapsed = once(command(run))?;
        if run >= WARM_UP {
            samples.push(elapsed);
        }
    }
    Ok(samples)
}

/// A cold start row: the median against `target`, and the p90.
pub fn row(metric: String, samples: &[Duration], target: Target) -> Row {
    let ms = millis(samples);
    Row::new(metric, median(&ms), Unit::Millis, target)
        .detail(format!("p90 {}", Unit::Millis.show(percentile(&ms, 90.0))))
}

/// One cold start: spawn, write `initialize`, read the reply line, close
/// stdin and expect a clean exit.
fn once(mut cmd: Command) -> anyhow::Result<Duration> {
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let line = format!(
        "{}\n",
        rpc::request(1, "initialize", &rpc::initialize_params())
    );

    let started = Instant::now();
    let mut child = cmd.spawn().context("cannot start switchboard")?;
    let mut stdin = child.stdin.take().context("stdin is piped")?;
    let mut stdout = BufReader::new(child.stdout.take().context("stdout is piped")?);
    stdin.write_all(line.as_bytes())?;
    let mut reply = String::new();
    stdout.read_line(&mut reply)?;
    let elapsed = started.elapsed();

    drop(stdin);
    let output = child.wait_with_output()?;
    if reply.is_empty() || !output.status.success() {
        bail!(
            "no initialize reply (exit status {}); stderr:\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Reply::parse(reply)?.ok().context("initialize")?;
    Ok(elapsed)
}
