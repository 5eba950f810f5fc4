//! Results: samples summarised into rows, and the markdown report.

use std::{fmt::Write, time::Duration};

use crate::sys::Memory;

/// Percentile `q` (0–100) of `samples` by the nearest-rank method.
pub fn percentile(samples: &[f64], q: f64) -> f64 {
    assert!(!samples.is_empty(), "no samples");
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((q / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

pub fn median(samples: &[f64]) -> f64 {
    percentile(samples, 50.0)
}

/// Durations as fractional milliseconds or microseconds.
pub fn millis(samples: &[Duration]) -> Vec<f64> {
    samples.iter().map(|d| d.as_secs_f64() * 1e3).collect()
}

/// The tail of millisecond samples, for a row's detail: `p90 …, p99 …`.
pub fn tail_ms(ms: &[f64]) -> String {
    format!(
        "p90 {}, p99 {}",
        Unit::Millis.show(percentile(ms, 90.0)),
        Unit::Millis.show(percentile(ms, 99.0))
    )
}

pub fn micros(samples: &[Duration]) -> Vec<f64> {
    samples.iter().map(|d| d.as_secs_f64() * 1e6).collect()
}

/// The unit a row's value is in.
#[derive(Debug, Clone, Copy)]
pub enum Unit {
    Millis,
    Micros,
    Nanos,
    CallsPerSec,
    MessagesPerSec,
    Kibibytes,
    Mebibytes,
    Count,
}

impl Unit {
    pub fn show(self, value: f64) -> String {
        match self {
            Unit::Millis => format!("{value:.2} ms"),
            Unit::Micros => format!("{value:.0} µs"),
            Unit::Nanos => format!("{value:.0} ns"),
            Unit::CallsPerSec => format!("{} calls/s", thousands(value)),
            Unit::MessagesPerSec => format!("{} messages/s", thousands(value)),
            Unit::Kibibytes => format!("{value:.1} KiB"),
            Unit::Mebibytes => format!("{value:.1} MiB"),
            Unit::Count => thousands(value),
        }
    }
}

/// `12345.6` as `12,346`.
pub fn thousands(value: f64) -> String {
    let digits = format!("{:.0}", value.max(0.0));
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// What a measurement must meet.
#[derive(Debug, Clone, Copy)]
pub enum Target {
    AtMost(f64),
    AtLeast(f64),
    /// Reported for information only.
    None,
}

/// One line of the report.
#[derive(Debug, Clone)]
pub struct Row {
    metric: String,
    unit: Unit,
    value: f64,
    target: Target,
    /// Shown after the value, e.g. the p90 or the single rounds.
    detail: String,
}

impl Row {
    pub fn new(metric: impl Into<String>, value: f64, unit: Unit, target: Target) -> Self {
        Self {
            metric: metric.into(),
            unit,
            value,
            target,
            detail: String::new(),
        }
    }

    /// Resident memory now against `max_mib`, with the peak as detail.
    pub fn memory(metric: impl Into<String>, memory: Memory, max_mib: f64) -> Self {
        let mib = |kib: u64| kib as f64 / 1024.0;
        Row::new(
            metric,
            mib(memory.rss_kib),
            Unit::Mebibytes,
            Target::AtMost(max_mib),
        )
        .detail(format!(
            "peak {}",
            Unit::Mebibytes.show(mib(memory.peak_kib))
        ))
    }

    pub fn detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = detail.into();
        self
    }

    pub fn passed(&self) -> Option<bool> {
        match self.target {
            Target::AtMost(limit) => Some(self.value <= limit),
            Target::AtLeast(limit) => Some(self.value >= limit),
            Target::None => None,
        }
    }

    fn target_text(&self) -> String {
        match self.target {
            Target::AtMost(limit) => format!("≤ {}", self.unit.show(limit)),
            Target::AtLeast(limit) => format!("≥ {}", self.unit.show(limit)),
            Target::None => "—".into(),
        }
    }
}

/// A section that could not be measured.
#[derive(Debug)]
pub struct Failure {
    pub section: &'static str,
    pub error: String,
}

/// Everything the run found.
#[derive(Default)]
pub struct Report {
    pub rows: Vec<Row>,
    pub notes: Vec<String>,
    pub failures: Vec<Failure>,
}

impl Report {
    pub fn note(&mut self, note: impl Into<String>) {
        let note = note.into();
        eprintln!("  note: {note}");
        self.notes.push(note);
    }

    /// The report as markdown: `header` lines, the table, failures, notes.
    pub fn markdown(&self, header: &[String]) -> String {
        let mut out = String::from("# switchboard benchmark\n\n");
        for line in header {
            let _ = writeln!(out, "- {line}");
        }
        out.push_str("\n| metric | target | measured | result |\n|---|---|---|---|\n");
        for row in &self.rows {
            let mut measured = row.unit.show(row.value);
            if !row.detail.is_empty() {
                let _ = write!(measured, " ({})", row.detail);
            }
            let result = match row.passed() {
                Some(true) => "pass",
                Some(false) => "**FAIL**",
                None => "—",
            };
            let _ = writeln!(
                out,
                "| {} | {} | {measured} | {result} |",
                row.metric,
                row.target_text()
            );
        }
        for failure in &self.failures {
            let _ = writeln!(
                out,
                "| {} | — | not measured: {} | **FAIL** |",
                failure.section,
                failure.error.replace('\n', " ").replace('|', "\\|")
            );
        }
        if !self.notes.is_empty() {
            out.push_str("\nNotes:\n\n");
            for note in &self.notes {
                let _ = writeln!(out, "- {note}");
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_nearest_rank() {
        let samples: Vec<f64> = (1..=10).map(f64::from).collect();
        assert_eq!(median(&samples), 5.0);
        assert_eq!(percentile(&samples, 90.0), 9.0);
        assert_eq!(percentile(&samples, 99.0), 10.0);
        assert_eq!(percentile(&[3.0], 50.0), 3.0);
    }

    #[test]
    fn thousands_are_separated() {
        assert_eq!(thousands(0.4), "0");
        assert_eq!(thousands(999.0), "999");
        assert_eq!(thousands(15000.0), "15,000");
        assert_eq!(thousands(1234567.0), "1,234,567");
    }

    #[test]
    fn rows_pass_against_their_target() {
        let fast = Row::new("x", 8.0, Unit::Millis, Target::AtMost(10.0));
        let slow = Row::new("x", 12.0, Unit::Millis, Target::AtMost(10.0));
        let rate = Row::new("y", 9000.0, Unit::CallsPerSec, Target::AtLeast(8000.0));
        assert_eq!(
            (fast.passed(), slow.passed(), rate.passed()),
            (Some(true), Some(false), Some(true))
        );
    }
}
