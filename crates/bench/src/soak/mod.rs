//! `switchboard-bench soak`: agents on every transport for `--minutes N`
//! while faults are injected, then a check that nothing acknowledged was
//! lost or stored twice.
//!
//! Two runs, side by side, each with its own daemon (`serve --http` with its
//! relay socket) whose data directory is a small tmpfs mounted for the run:
//!
//! In both, stdio agents spawn their own `serve --stdio` on the daemon's
//! data directory, as agent CLIs do, so every process shares one history
//! file.
//!
//! - **local**: the local hub.
//! - **irc**: the IRC backend on an InspIRCd that `switchboard-testkit` runs
//!   on loopback; each stdio server's observer also hears its agent's
//!   channel, and the history holds each line once.
//!
//! In each run, `--agents` agents (50) are spread over stdio, Streamable
//! HTTP, legacy SSE and `switchboard-shim`, each looping over sends, reads,
//! waits and searches with unique texts, and recording every outcome. The
//! faults ([`faults`]): `kill -9` of the daemon every 90 s and a restart
//! (HTTP and SSE agents reconnect, shims redial; the stdio agents' own
//! servers are not the daemon and are not killed, but in the local run they
//! share its database through the kill); a restart of the IRC server every
//! 120 s (irc run); once, the tmpfs filled to ENOSPC for 20 s. Runs shorter
//! than 5 minutes scale the intervals down so that each fault still happens.
//!
//! Afterwards ([`verify`]) the history files are read directly: every send
//! acknowledged as stored is there exactly once; every send reported as
//! failed is absent; a send whose outcome is unknown (its reply was lost to a
//! kill, or the server said it may or may not have been delivered) is there
//! at most once. Resident memory and open file descriptors of the daemon,
//! the shims and the stdio servers are sampled every 10 s ([`samples`]) and
//! every log is scanned for a panic.

mod agent;
mod cluster;
mod faults;
mod report;
mod samples;
mod verify;

use std::{path::PathBuf, time::Duration};

use anyhow::Context;
use clap::{Args, ValueEnum};

use crate::server::Switchboard;

/// The soak's command line.
#[derive(Debug, Args)]
pub struct SoakArgs {
    /// How long each run lasts.
    #[arg(long, default_value_t = 10, value_name = "N")]
    minutes: u32,
    /// Agents per run, spread evenly over stdio, HTTP, SSE and shim.
    #[arg(long, default_value_t = 50, value_name = "N")]
    agents: usize,
    /// Which backends to soak (both run side by side).
    #[arg(long, value_enum, default_value_t = Backends::Both)]
    backend: Backends,
    /// Where the logs of every process are kept [default: $TMPDIR/switchboard-soak-<time>].
    #[arg(long, value_name = "DIR")]
    logs: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Backends {
    Local,
    Irc,
    Both,
}

/// The chat backend a run soaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Local,
    Irc,
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Backend::Local => "local",
            Backend::Irc => "irc",
        }
    }
}

/// Runs the soak and prints its report; true when every check held.
pub fn run(switchboard: &Switchboard, args: &SoakArgs) -> anyhow::Result<bool> {
    anyhow::ensure!(args.minutes > 0, "--minutes must be at least 1");
    anyhow::ensure!(
        args.agents >= 4,
        "--agents must be at least 4 (one per transport)"
    );
    let logs = match &args.logs {
        Some(dir) => dir.clone(),
        None => std::env::temp_dir().join(format!(
            "switchboard-soak-{}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)?
                .as_secs()
        )),
    };
    std::fs::create_dir_all(&logs).with_context(|| format!("cannot create {}", logs.display()))?;
    let backends = match args.backend {
        Backends::Local => vec![Backend::Local],
        Backends::Irc => vec![Backend::Irc],
        Backends::Both => vec![Backend::Local, Backend::Irc],
    };
    let duration = Duration::from_secs(u64::from(args.minutes) * 60);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    eprintln!(
        "soak: {} × {} agents for {} min, logs in {}",
        backends.len(),
        args.agents,
        args.minutes,
        logs.display()
    );
    let results = runtime.block_on(futures::future::join_all(backends.iter().map(|&backend| {
        cluster::soak(
            switchboard,
            backend,
            args.agents,
            duration,
            logs.join(backend.name()),
        )
    })));
    let mut text = report::header(switchboard, args, &logs)?;
    let mut all_held = true;
    for (backend, result) in backends.iter().zip(results) {
        match result {
            Ok(outcome) => {
                all_held &= outcome.held();
                text.push_str(&outcome.markdown());
            }
            Err(e) => {
                all_held = false;
                text.push_str(&format!(
                    "\n## {} run\n\n**the run failed**: {e:#}\n",
                    backend.name()
                ));
            }
        }
    }
    text.push_str(&format!(
        "\n**{}**\n",
        if all_held {
            "every check held"
        } else {
            "SOME CHECKS FAILED"
        }
    ));
    print!("{text}");
    Ok(all_held)
}
