//! After a run: each send's outcome against the history file it was
//! acknowledged into, read directly with SQLite, and the logs scanned for
//! panics.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
};

use anyhow::Context;
use rusqlite::{Connection, OpenFlags};

use super::agent::{Attempt, Outcome};

/// How many times each soak text is stored in one history file.
pub fn stored_texts(history: &Path) -> anyhow::Result<HashMap<String, usize>> {
    let conn = Connection::open_with_flags(history, OpenFlags::SQLITE_OPEN_READ_ONLY)
        .with_context(|| format!("cannot open {}", history.display()))?;
    let mut statement =
        conn.prepare("SELECT text, count(*) FROM messages WHERE text LIKE 'soak %' GROUP BY text")?;
    let rows = statement.query_map([], |row| Ok((row.get(0)?, row.get::<_, i64>(1)? as usize)))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// What the history says about a set of sends.
#[derive(Debug, Default, Clone)]
pub struct Tally {
    pub acked: usize,
    pub failed: usize,
    pub uncertain: usize,
    pub unknown: usize,
    /// Uncertain or unknown sends that were stored (once).
    pub unsure_stored: usize,
    /// Acknowledged but not in the history.
    pub missing: Vec<String>,
    /// Stored more than once (whatever the outcome).
    pub duplicates: Vec<String>,
    /// Reported as failed, yet stored.
    pub failed_but_stored: Vec<String>,
}

impl Tally {
    /// Checks `attempts` against `stored` (the history they were made on).
    pub fn add(&mut self, attempts: &[&Attempt], stored: &HashMap<String, usize>) {
        for attempt in attempts {
            let copies = stored.get(&attempt.text).copied().unwrap_or(0);
            if copies > 1 {
                self.duplicates.push(attempt.text.clone());
            }
            match attempt.outcome {
                Outcome::Ok => {
                    self.acked += 1;
                    if copies == 0 {
                        self.missing.push(attempt.text.clone());
                    }
                }
                Outcome::Failed => {
                    self.failed += 1;
                    if copies > 0 {
                        self.failed_but_stored.push(attempt.text.clone());
                    }
                }
                Outcome::Uncertain | Outcome::Unknown => {
                    if attempt.outcome == Outcome::Uncertain {
                        self.uncertain += 1;
                    } else {
                        self.unknown += 1;
                    }
                    if copies > 0 {
                        self.unsure_stored += 1;
                    }
                }
            }
        }
    }

    pub fn held(&self) -> bool {
        self.missing.is_empty() && self.duplicates.is_empty() && self.failed_but_stored.is_empty()
    }
}

/// Texts stored more than once in a history, whoever sent them (the IRC
/// observers also record other agents' lines, and replays after rejoining).
pub fn duplicates_anywhere(stored: &HashMap<String, usize>) -> Vec<String> {
    let mut texts: Vec<String> = stored
        .iter()
        .filter(|&(_, &n)| n > 1)
        .map(|(text, _)| text.clone())
        .collect();
    texts.sort();
    texts
}

/// Every line of every file under `dir` that reports a panic, as `file: line`.
pub fn panics(dir: &Path) -> anyhow::Result<Vec<String>> {
    let mut found = Vec::new();
    for file in files(dir)? {
        let text =
            std::fs::read(&file).with_context(|| format!("cannot read {}", file.display()))?;
        for line in String::from_utf8_lossy(&text).lines() {
            if line.contains("panicked") {
                found.push(format!("{}: {line}", file.display()));
            }
        }
    }
    Ok(found)
}

fn files(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            out.extend(files(&path)?);
        } else {
            out.push(path);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn attempt(text: &str, outcome: Outcome) -> Attempt {
        Attempt {
            text: text.into(),
            at: Duration::ZERO,
            outcome,
            error: None,
        }
    }

    #[test]
    fn acked_must_be_stored_once_and_failed_never() {
        let stored: HashMap<String, usize> = [("a", 1), ("b", 2), ("f", 1), ("u", 1)]
            .map(|(t, n)| (t.to_owned(), n))
            .into();
        let attempts = [
            attempt("a", Outcome::Ok),
            attempt("b", Outcome::Ok),
            attempt("c", Outcome::Ok),
            attempt("f", Outcome::Failed),
            attempt("g", Outcome::Failed),
            attempt("u", Outcome::Unknown),
            attempt("v", Outcome::Uncertain),
        ];
        let mut tally = Tally::default();
        tally.add(&attempts.iter().collect::<Vec<_>>(), &stored);
        assert_eq!(
            (tally.acked, tally.failed, tally.unknown, tally.uncertain),
            (3, 2, 1, 1)
        );
        assert_eq!(tally.missing, ["c"]);
        assert_eq!(tally.duplicates, ["b"]);
        assert_eq!(tally.failed_but_stored, ["f"]);
        assert_eq!(tally.unsure_stored, 1);
        assert!(!tally.held());
        assert_eq!(duplicates_anywhere(&stored), ["b"]);
    }
}
