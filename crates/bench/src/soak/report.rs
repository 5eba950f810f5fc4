//! What a soak run found, and the markdown the soak prints.

use std::{
    collections::{BTreeMap, HashMap},
    fmt::Write,
    path::{Path, PathBuf},
    time::Duration,
};

use super::{
    Backend, SoakArgs,
    agent::{Ledger, LookupKind, Outcome, Transport},
    faults::Schedule,
    samples::{self, Growth, Sample},
    verify::Tally,
};
use crate::{
    report::{median, thousands},
    server::Switchboard,
    sys,
};

/// The faults as they happened, since the run's start.
#[derive(Debug, Default)]
pub struct FaultLog {
    /// Each `kill -9` and how long the daemon took to listen again.
    pub kills: Vec<(Duration, Duration)>,
    /// Each IRC server restart and how long it took.
    pub irc_restarts: Vec<(Duration, Duration)>,
    /// When the disk filled, when space came back, and the filler's size.
    pub full: Option<(Duration, Option<Duration>, u64)>,
}

/// The full disk as the agents saw it.
#[derive(Debug, Default)]
pub struct DiskFull {
    pub window: Option<(Duration, Duration)>,
    pub sends: BTreeMap<&'static str, usize>,
    /// Failed sends in the window saying the disk is full and naming the
    /// data directory on the tmpfs, and failed sends in it that do not.
    pub naming_dir: usize,
    pub other_errors: Vec<String>,
    pub example: Option<String>,
    pub lookups_ok: usize,
    pub lookups_failed: usize,
    /// From space returning to the first send stored.
    pub recovered_after: Option<Duration>,
    /// From space returning to the last "disk is full" error.
    pub last_full_error_after: Option<Duration>,
}

impl DiskFull {
    pub fn from_ledgers(ledgers: &[Ledger], faults: &FaultLog, tmpfs: &Path) -> Self {
        let Some((from, Some(to), _)) = faults.full else {
            return Self::default();
        };
        let dir = tmpfs.display().to_string();
        let says_full = |e: &str| e.contains("is full") && e.contains(&dir);
        let mut out = Self {
            window: Some((from, to)),
            ..Self::default()
        };
        for ledger in ledgers {
            for send in &ledger.sends {
                if send.at >= from && send.at <= to {
                    *out.sends.entry(outcome_name(send.outcome)).or_default() += 1;
                    match &send.error {
                        Some(e) if says_full(e) => {
                            out.naming_dir += 1;
                            out.example.get_or_insert_with(|| e.clone());
                        }
                        Some(e) if out.other_errors.len() < 5 => out.other_errors.push(e.clone()),
                        _ => {}
                    }
                }
                if send.at > to {
                    let after = send.at - to;
                    if send.outcome == Outcome::Ok {
                        out.recovered_after =
                            Some(out.recovered_after.map_or(after, |a| a.min(after)));
                    }
                    if send.error.as_deref().is_some_and(says_full) {
                        out.last_full_error_after =
                            Some(out.last_full_error_after.map_or(after, |a| a.max(after)));
                    }
                }
            }
            for lookup in &ledger.lookups {
                if lookup.at >= from && lookup.at <= to {
                    if lookup.ok {
                        out.lookups_ok += 1;
                    } else {
                        out.lookups_failed += 1;
                    }
                }
            }
        }
        out
    }

    /// Sends failed on the full disk with the clear error, reads kept
    /// working, and sends recovered.
    pub fn held(&self) -> bool {
        self.window.is_some()
            && self.naming_dir > 0
            && self.lookups_failed == 0
            && self.recovered_after.is_some()
    }
}

fn outcome_name(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::Ok => "stored",
        Outcome::Failed => "failed",
        Outcome::Uncertain => "uncertain",
        Outcome::Unknown => "unknown",
    }
}

/// Everything one run found.
pub struct RunOutcome {
    pub backend: Backend,
    pub agents: usize,
    pub tmpfs_mib: u64,
    pub tallies: BTreeMap<Transport, Tally>,
    pub ledgers: Vec<Ledger>,
    /// Per history file, texts stored more than once.
    pub duplicates_anywhere: Vec<(String, Vec<String>)>,
    pub disk_full: DiskFull,
    pub faults: FaultLog,
    pub samples: Vec<Sample>,
    pub growth: Vec<Growth>,
    pub panics: Vec<String>,
    /// Processes that did not stop cleanly at the end.
    pub shutdown: Vec<String>,
    pub logs: PathBuf,
}

impl RunOutcome {
    pub fn held(&self) -> bool {
        self.tallies.values().all(Tally::held)
            && self.duplicates_anywhere.iter().all(|(_, d)| d.is_empty())
            && self.disk_full.held()
            && self.growth.iter().all(|g| !g.grew())
            && self.panics.is_empty()
            && self.shutdown.is_empty()
    }

    pub fn markdown(&self) -> String {
        let mut out = String::new();
        self.write_setup(&mut out);
        self.write_tallies(&mut out);
        self.write_failures(&mut out);
        self.write_growth(&mut out);
        let _ = writeln!(out, "\nPanics in the logs: {}", self.panics.len());
        for panic in self.panics.iter().take(5) {
            let _ = writeln!(out, "- `{panic}`");
        }
        let _ = writeln!(
            out,
            "Clean shutdown at the end: {}",
            if self.shutdown.is_empty() {
                "every process exited 0".to_owned()
            } else {
                format!("**no**: {:?}", self.shutdown)
            }
        );
        let _ = writeln!(
            out,
            "\n**{} run: {}**",
            self.backend.name(),
            if self.held() {
                "every check held"
            } else {
                "SOME CHECKS FAILED"
            }
        );
        out
    }

    /// The run's agents and the faults it injected, when.
    fn write_setup(&self, out: &mut String) {
        let _ = writeln!(out, "\n## {} run\n", self.backend.name());
        let _ = writeln!(
            out,
            "- {} agents ({}), data directory on a {} MiB tmpfs; logs in {}",
            self.agents,
            Transport::ALL
                .iter()
                .map(|t| format!(
                    "{} {}",
                    (0..self.agents).filter(|&i| Transport::of(i) == *t).count(),
                    t.name()
                ))
                .collect::<Vec<_>>()
                .join(", "),
            self.tmpfs_mib,
            self.logs.display()
        );
        let restarts: Vec<f64> = self
            .faults
            .kills
            .iter()
            .map(|(_, took)| took.as_secs_f64() * 1e3)
            .collect();
        let _ = writeln!(
            out,
            "- daemon killed (SIGKILL) at {} s{}",
            join(self.faults.kills.iter().map(|(at, _)| secs(*at))),
            if restarts.is_empty() {
                String::new()
            } else {
                format!(
                    "; listening again after {:.0} ms (median), {:.0} ms (max)",
                    median(&restarts),
                    restarts.iter().copied().fold(0.0, f64::max)
                )
            }
        );
        if self.backend == Backend::Irc {
            let _ = writeln!(
                out,
                "- IRC server restarted at {} s",
                join(self.faults.irc_restarts.iter().map(|(at, _)| secs(*at)))
            );
        }
        if let Some((from, to, bytes)) = self.faults.full {
            let _ = writeln!(
                out,
                "- disk full (a {:.1} MiB filler) from {} to {} s",
                bytes as f64 / 1_048_576.0,
                secs(from),
                to.map_or("the end".into(), secs)
            );
        }
    }

    /// Per transport: what the sends became, and every text stored twice.
    fn write_tallies(&self, out: &mut String) {
        out.push_str(
            "\n| transport | sends | stored (acked) | failed | uncertain | unknown (reply lost) | unsure ones stored | missing | duplicated | failed yet stored | reads ok / failed | waits ok / failed | searches ok / failed | daemon unreachable |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
        );
        for (transport, tally) in &self.tallies {
            let ledgers: Vec<&Ledger> = self
                .ledgers
                .iter()
                .enumerate()
                .filter(|(i, _)| Transport::of(*i) == *transport)
                .map(|(_, l)| l)
                .collect();
            let lookups = |kind: LookupKind| {
                let (ok, failed) = ledgers
                    .iter()
                    .flat_map(|l| &l.lookups)
                    .filter(|l| l.kind == kind)
                    .fold((0, 0), |(ok, failed), l| {
                        if l.ok {
                            (ok + 1, failed)
                        } else {
                            (ok, failed + 1)
                        }
                    });
                format!("{} / {}", thousands(ok as f64), thousands(failed as f64))
            };
            let sends = tally.acked + tally.failed + tally.uncertain + tally.unknown;
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                transport.name(),
                thousands(sends as f64),
                thousands(tally.acked as f64),
                tally.failed,
                tally.uncertain,
                tally.unknown,
                tally.unsure_stored,
                tally.missing.len(),
                tally.duplicates.len(),
                tally.failed_but_stored.len(),
                lookups(LookupKind::Read),
                lookups(LookupKind::Wait),
                lookups(LookupKind::Search),
                ledgers.iter().map(|l| l.unreachable).sum::<usize>(),
            );
        }
        for (name, tally) in self
            .tallies
            .iter()
            .map(|(t, tally)| (t.name(), tally))
            .filter(|(_, t)| !t.held())
        {
            let _ = writeln!(
                out,
                "\n{name}: missing {:?}, duplicated {:?}, failed yet stored {:?}",
                first(&tally.missing),
                first(&tally.duplicates),
                first(&tally.failed_but_stored)
            );
        }
        for (history, duplicates) in &self.duplicates_anywhere {
            if !duplicates.is_empty() {
                let _ = writeln!(
                    out,
                    "\n**{} texts stored more than once in the {history} history**: {:?}",
                    duplicates.len(),
                    first(duplicates)
                );
            }
        }
        let histories = self.duplicates_anywhere.len();
        let _ = writeln!(
            out,
            "\nTexts stored more than once in any of the {histories} history file(s): {}.",
            self.duplicates_anywhere
                .iter()
                .map(|(_, d)| d.len())
                .sum::<usize>()
        );
    }

    /// The errors the agents were given, and what the disk-full window did.
    fn write_failures(&self, out: &mut String) {
        out.push_str("\nErrors the agents were given (most frequent first, digits as N):\n\n");
        for (error, count) in frequent_errors(&self.ledgers, 8) {
            let _ = writeln!(out, "- {count} × `{error}`");
        }

        let d = &self.disk_full;
        out.push_str("\nDisk full:\n\n");
        match d.window {
            None => out.push_str("- **the disk was never filled**\n"),
            Some((from, to)) => {
                let _ = writeln!(
                    out,
                    "- sends in the {} s window: {}",
                    secs(to - from),
                    join(d.sends.iter().map(|(k, v)| format!("{v} {k}")))
                );
                let _ = writeln!(
                    out,
                    "- {} failed naming the full data directory, e.g. `{}`",
                    d.naming_dir,
                    d.example.as_deref().unwrap_or("(none)")
                );
                if !d.other_errors.is_empty() {
                    let _ = writeln!(out, "- other errors meanwhile: {:?}", d.other_errors);
                }
                let _ = writeln!(
                    out,
                    "- reads, waits and searches meanwhile: {} ok, {} failed",
                    d.lookups_ok, d.lookups_failed
                );
                let _ = writeln!(
                    out,
                    "- after space returned: first send stored after {}; last \"is full\" error after {}",
                    d.recovered_after
                        .map_or("**never**".into(), |t| format!("{} ms", t.as_millis())),
                    d.last_full_error_after
                        .map_or("none".into(), |t| format!("{} ms", t.as_millis()))
                );
            }
        }
    }

    /// Memory and descriptors over the run, and what grew.
    fn write_growth(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "\nMemory and descriptors every {} s (stdio servers are the agents' own `serve --stdio`):\n",
            samples::EVERY.as_secs()
        );
        out.push_str(&samples::table(&self.samples));
        out.push_str("\nGrowth (daemon: first vs last 30 s of each incarnation after a 20 s warm-up; shims and stdio servers: first vs last minute of the run):\n\n");
        if self.growth.is_empty() {
            out.push_str("- the run is too short to judge\n");
        }
        let flagged: Vec<&Growth> = self.growth.iter().filter(|g| g.grew()).collect();
        for growth in self.growth.iter().filter(|g| g.what.starts_with("daemon")) {
            let _ = writeln!(out, "- {}", growth.describe());
        }
        let long_lived: Vec<&Growth> = self
            .growth
            .iter()
            .filter(|g| !g.what.starts_with("daemon"))
            .collect();
        if let Some(worst) = long_lived
            .iter()
            .max_by(|a, b| (a.rss_kib.1 - a.rss_kib.0).total_cmp(&(b.rss_kib.1 - b.rss_kib.0)))
        {
            let _ = writeln!(
                out,
                "- {} shims and stdio servers; the largest RSS change: {}",
                long_lived.len(),
                worst.describe()
            );
        }
        for growth in flagged.iter().filter(|g| !g.what.starts_with("daemon")) {
            let _ = writeln!(out, "- {}", growth.describe());
        }
    }
}

/// Whole seconds.
fn secs(d: Duration) -> String {
    format!("{:.0}", d.as_secs_f64())
}

/// The report's opening lines.
pub fn header(switchboard: &Switchboard, args: &SoakArgs, logs: &Path) -> anyhow::Result<String> {
    let schedule = Schedule::new(Duration::from_secs(u64::from(args.minutes) * 60));
    Ok(format!(
        "# switchboard soak\n\n\
         - binary: {} ({})\n\
         - machine: {} CPUs, load average {} at the end\n\
         - {} min per run; kill -9 of the daemon every {} s, IRC server restart every {} s \
         (irc run), disk full for {} s from {} s; logs in {}\n\
         - what \"kill -9 the daemon\" means per transport: HTTP and SSE agents lose their \
         connection and reconnect; shim agents keep their shim, which redials; stdio agents \
         talk to their own `serve --stdio`, which is not the daemon and is not killed (in the \
         local run it shares the daemon's history file, so it lives through the daemon dying \
         mid-write; in the irc run it is another client of the IRC server)\n\
         - outcomes: stored = success; failed = an error saying it did not happen; uncertain \
         = an error saying it may have happened; unknown = no reply (the connection broke \
         after the request went out). Stored sends must be in the history exactly once, \
         failed ones not at all, uncertain and unknown ones at most once\n",
        switchboard.path.display(),
        switchboard.version()?,
        std::thread::available_parallelism().map_or(0, usize::from),
        sys::load_average().map_or("unknown".into(), |l| format!("{l:.2}")),
        args.minutes,
        schedule.kill_every.as_secs(),
        schedule.irc_restart_every.as_secs(),
        schedule.full_for.as_secs(),
        schedule.full_at.as_secs(),
        logs.display()
    ))
}

/// The `limit` most frequent error texts of sends, digits folded to `N`.
fn frequent_errors(ledgers: &[Ledger], limit: usize) -> Vec<(String, usize)> {
    let mut counts: HashMap<String, usize> = HashMap::new();
    for error in ledgers.iter().flat_map(|l| {
        l.sends
            .iter()
            .filter_map(|s| s.error.as_deref())
            .chain(l.lookup_errors.iter().map(String::as_str))
    }) {
        let folded: String = error
            .chars()
            .take(240)
            .map(|c| if c.is_ascii_digit() { 'N' } else { c })
            .collect();
        *counts.entry(folded).or_default() += 1;
    }
    let mut counts: Vec<_> = counts.into_iter().collect();
    counts.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    counts.truncate(limit);
    counts
}

fn join(items: impl Iterator<Item = String>) -> String {
    let items: Vec<String> = items.collect();
    if items.is_empty() {
        "—".into()
    } else {
        items.join(", ")
    }
}

fn first(texts: &[String]) -> &[String] {
    &texts[..texts.len().min(5)]
}
