//! Resident memory and open file descriptors of a run's processes, sampled
//! from `/proc` every [`EVERY`], and whether they grow.
//!
//! The daemon is killed and restarted, so its samples are judged per
//! incarnation: the median of the first [`WINDOW`] after [`WARM_UP`] against
//! the median of its last [`WINDOW`]. The shims and stdio servers live the
//! whole run: the first minute after warm-up against the last minute, per
//! process.

use std::{
    cell::Cell,
    fmt::Write,
    time::{Duration, Instant},
};

use crate::{
    report::median,
    sys::{Memory, open_fds},
};

pub const EVERY: Duration = Duration::from_secs(10);
/// Start-up allocations (caches, connections) settle within this.
const WARM_UP: Duration = Duration::from_secs(20);
/// The daemon's windows compared within an incarnation.
const WINDOW: Duration = Duration::from_secs(30);
/// The long-lived processes' windows compared across the run.
const LONG_WINDOW: Duration = Duration::from_secs(60);
/// Growth beyond both of these is flagged.
const RSS_GROWTH_KIB: f64 = 2048.0;
const RSS_GROWTH_RATIO: f64 = 0.10;
const FD_GROWTH: f64 = 4.0;

/// One process at one moment.
#[derive(Debug, Clone, Copy)]
pub struct Reading {
    pub rss_kib: u64,
    pub fds: usize,
}

impl Reading {
    fn of(pid: u32) -> Option<Self> {
        Some(Self {
            rss_kib: Memory::of(pid).ok()?.rss_kib,
            fds: open_fds(pid).ok()?,
        })
    }
}

/// Everything read at one moment.
#[derive(Debug, Clone)]
pub struct Sample {
    pub at: Duration,
    /// The daemon's incarnation (1 = first start) and its reading; none while
    /// it is down.
    pub daemon: Option<(usize, Reading)>,
    pub shims: Vec<Option<Reading>>,
    pub stdio: Vec<Option<Reading>>,
}

/// The daemon as the sampler finds it: incarnation and pid; none while it
/// is down.
pub type DaemonPid = Cell<Option<(usize, u32)>>;

/// Samples until `end`.
pub async fn sample(
    epoch: Instant,
    end: Instant,
    daemon: &DaemonPid,
    shims: &[u32],
    stdio: &[u32],
) -> Vec<Sample> {
    let mut samples = Vec::new();
    let mut next = Instant::now();
    while next <= end {
        tokio::time::sleep_until(next.into()).await;
        let daemon = daemon
            .get()
            .and_then(|(incarnation, pid)| Some((incarnation, Reading::of(pid)?)));
        samples.push(Sample {
            at: epoch.elapsed(),
            daemon,
            shims: shims.iter().map(|&pid| Reading::of(pid)).collect(),
            stdio: stdio.iter().map(|&pid| Reading::of(pid)).collect(),
        });
        next += EVERY;
    }
    samples
}

/// The curve as a markdown table.
pub fn table(samples: &[Sample]) -> String {
    let mib = |kib: f64| format!("{:.1}", kib / 1024.0);
    let spread =
        |readings: &[Option<Reading>], of: fn(&Reading) -> f64, show: &dyn Fn(f64) -> String| {
            let values: Vec<f64> = readings.iter().flatten().map(of).collect();
            if values.is_empty() {
                return "—".to_owned();
            }
            let max = values.iter().copied().fold(f64::MIN, f64::max);
            format!("{} / {}", show(median(&values)), show(max))
        };
    let count = |v: f64| format!("{v:.0}");
    let mut out = String::from(
        "| t | daemon # | daemon RSS MiB | daemon fds | shims RSS MiB (median / max) | shims fds | stdio servers RSS MiB | stdio fds |\n|---|---|---|---|---|---|---|---|\n",
    );
    for s in samples {
        let (incarnation, rss, fds) = match s.daemon {
            Some((i, r)) => (i.to_string(), mib(r.rss_kib as f64), r.fds.to_string()),
            None => ("down".into(), "—".into(), "—".into()),
        };
        let _ = writeln!(
            out,
            "| {}s | {incarnation} | {rss} | {fds} | {} | {} | {} | {} |",
            s.at.as_secs(),
            spread(&s.shims, |r| r.rss_kib as f64, &mib),
            spread(&s.shims, |r| r.fds as f64, &count),
            spread(&s.stdio, |r| r.rss_kib as f64, &mib),
            spread(&s.stdio, |r| r.fds as f64, &count),
        );
    }
    out
}

/// Growth of one series between two windows.
#[derive(Debug, Clone)]
pub struct Growth {
    pub what: String,
    pub rss_kib: (f64, f64),
    pub fds: (f64, f64),
}

impl Growth {
    fn between(what: String, first: &[Reading], last: &[Reading]) -> Option<Self> {
        if first.is_empty() || last.is_empty() {
            return None;
        }
        let rss = |r: &[Reading]| median(&r.iter().map(|r| r.rss_kib as f64).collect::<Vec<_>>());
        let fds = |r: &[Reading]| median(&r.iter().map(|r| r.fds as f64).collect::<Vec<_>>());
        Some(Self {
            what,
            rss_kib: (rss(first), rss(last)),
            fds: (fds(first), fds(last)),
        })
    }

    /// Whether memory or descriptors grew beyond the tolerance.
    pub fn grew(&self) -> bool {
        let (a, b) = self.rss_kib;
        (b - a > RSS_GROWTH_KIB && b > a * (1.0 + RSS_GROWTH_RATIO))
            || self.fds.1 - self.fds.0 > FD_GROWTH
    }

    pub fn describe(&self) -> String {
        format!(
            "{}: RSS {:.1} → {:.1} MiB, fds {:.0} → {:.0}{}",
            self.what,
            self.rss_kib.0 / 1024.0,
            self.rss_kib.1 / 1024.0,
            self.fds.0,
            self.fds.1,
            if self.grew() { " **GROWS**" } else { "" }
        )
    }
}

/// The growth of each daemon incarnation long enough to judge (`starts`:
/// each incarnation's start since the epoch), and of each long-lived
/// process, in that order.
pub fn growth(samples: &[Sample], starts: &[(usize, Duration)], run_end: Duration) -> Vec<Growth> {
    let mut out = Vec::new();
    for &(incarnation, started) in starts {
        let readings: Vec<(Duration, Reading)> = samples
            .iter()
            .filter_map(|s| match s.daemon {
                Some((i, r)) if i == incarnation && s.at >= started + WARM_UP => Some((s.at, r)),
                _ => None,
            })
            .collect();
        let (Some(&(from, _)), Some(&(to, _))) = (readings.first(), readings.last()) else {
            continue;
        };
        if to.saturating_sub(from) < WINDOW + WINDOW / 2 {
            continue;
        }
        let window = |lo: Duration, hi: Duration| -> Vec<Reading> {
            readings
                .iter()
                .filter(|(at, _)| *at >= lo && *at <= hi)
                .map(|&(_, r)| r)
                .collect()
        };
        out.extend(Growth::between(
            format!(
                "daemon #{incarnation} ({}–{} s)",
                from.as_secs(),
                to.as_secs()
            ),
            &window(from, from + WINDOW),
            &window(to.saturating_sub(WINDOW), to),
        ));
    }
    let long_lived = |name: &str, of: fn(&Sample) -> &Vec<Option<Reading>>| {
        let count = samples.first().map_or(0, |s| of(s).len());
        (0..count)
            .filter_map(|k| {
                let window = |lo: Duration, hi: Duration| -> Vec<Reading> {
                    samples
                        .iter()
                        .filter(|s| s.at >= lo && s.at <= hi)
                        .filter_map(|s| of(s)[k])
                        .collect()
                };
                if run_end < WARM_UP + LONG_WINDOW * 2 {
                    return None;
                }
                Growth::between(
                    format!("{name} {k}"),
                    &window(WARM_UP, WARM_UP + LONG_WINDOW),
                    &window(run_end - LONG_WINDOW, run_end),
                )
            })
            .collect::<Vec<_>>()
    };
    out.extend(long_lived("shim", |s| &s.shims));
    out.extend(long_lived("stdio server", |s| &s.stdio));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(rss_mib: u64, fds: usize) -> Reading {
        Reading {
            rss_kib: rss_mib * 1024,
            fds,
        }
    }

    #[test]
    fn growth_is_flagged_beyond_the_tolerance_only() {
        let flat = Growth::between("x".into(), &[reading(20, 30)], &[reading(21, 32)]).unwrap();
        assert!(!flat.grew());
        let leaking = Growth::between("x".into(), &[reading(20, 30)], &[reading(30, 30)]).unwrap();
        assert!(leaking.grew());
        let fds = Growth::between("x".into(), &[reading(20, 30)], &[reading(20, 40)]).unwrap();
        assert!(fds.grew());
    }

    #[test]
    fn each_daemon_incarnation_is_judged_on_its_own() {
        // Incarnation 1 from 0 s, 2 from 100 s (higher, but flat): no growth.
        let samples: Vec<Sample> = (0..20)
            .map(|i| {
                let at = Duration::from_secs(i * 10);
                let daemon = if i < 10 {
                    (1, reading(20, 30))
                } else {
                    (2, reading(40, 50))
                };
                Sample {
                    at,
                    daemon: Some(daemon),
                    shims: vec![],
                    stdio: vec![],
                }
            })
            .collect();
        let starts = [(1, Duration::ZERO), (2, Duration::from_secs(100))];
        let growth = growth(&samples, &starts, Duration::from_secs(200));
        assert_eq!(growth.len(), 2, "{growth:?}");
        assert!(growth.iter().all(|g| !g.grew()), "{growth:?}");
    }
}
