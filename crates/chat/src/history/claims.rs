//! Claims: which of the processes sharing a history answers for something,
//! so that exactly one does. A claim is a key held by a process (its pid)
//! until a time, with a little data for the others to read; another
//! process may take it over once it has lapsed or its holder has exited.
//!
//! Approvals use them: the process whose agent asked holds the request's
//! id, and the first process to claim a reply answers it when nobody holds
//! the id it names.

use chrono::Utc;
use rusqlite::{Connection, OptionalExtension, params};

use super::{History, HistoryError, writer::Op};

/// A claim as the `claims` table holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Claim {
    pub key: String,
    /// The holder's process id.
    pub owner: u32,
    /// Until when it holds (µs since the epoch).
    pub until: i64,
    pub data: Option<String>,
}

impl Claim {
    /// Whether it still holds: not lapsed, and its holder still runs.
    pub fn holds(&self) -> bool {
        self.until > Utc::now().timestamp_micros() && process_runs(self.owner)
    }
}

/// A claim's `until` that never lapses: it holds while its holder runs.
pub(crate) const WHILE_IT_RUNS: i64 = i64::MAX;

/// This process's id, which its claims carry.
pub(crate) fn this_process() -> u32 {
    std::process::id()
}

/// Whether a process with id `pid` runs on this host (the processes
/// sharing a history file share the host).
fn process_runs(pid: u32) -> bool {
    pid == this_process() || std::path::Path::new(&format!("/proc/{pid}")).exists()
}

impl History {
    /// Takes `key` for this process until `until` (µs since the epoch),
    /// with `data`, unless another process holds it; true when taken. The
    /// holder may claim again, to change the time or the data.
    pub(crate) async fn claim(
        &self,
        key: &str,
        until: i64,
        data: Option<String>,
    ) -> Result<bool, HistoryError> {
        let rx = self.submit(|reply| Op::Claim {
            claim: Claim {
                key: key.to_owned(),
                owner: this_process(),
                until,
                data,
            },
            taken: false,
            reply,
        })?;
        rx.await.map_err(|_| HistoryError::Closed)?
    }

    /// The claims whose keys start with `prefix`, held or lapsed (see
    /// [`Claim::holds`]).
    pub(crate) fn claims(&self, prefix: &str) -> Result<Vec<Claim>, HistoryError> {
        self.with_reader(|conn| {
            conn.prepare_cached(
                "SELECT key, owner, until, data FROM claims
                  WHERE substr(key, 1, length(?1)) = ?1 ORDER BY key",
            )?
            .query_map([prefix], claim_row)?
            .collect()
        })
    }

    /// The claim on `key`, whether or not it still holds.
    pub(crate) fn claim_on(&self, key: &str) -> Result<Option<Claim>, HistoryError> {
        self.with_reader(|conn| {
            conn.prepare_cached("SELECT key, owner, until, data FROM claims WHERE key = ?1")?
                .query_row([key], claim_row)
                .optional()
        })
    }
}

fn claim_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Claim> {
    Ok(Claim {
        key: row.get(0)?,
        owner: row.get(1)?,
        until: row.get(2)?,
        data: row.get(3)?,
    })
}

/// The writer's half of [`History::claim`]: takes the claim unless another
/// process holds it, and drops claims that lapsed an hour ago.
pub(super) fn take(conn: &Connection, claim: &Claim) -> rusqlite::Result<bool> {
    let now = Utc::now().timestamp_micros();
    conn.prepare_cached("DELETE FROM claims WHERE until < ?1")?
        .execute([now - 3_600_000_000])?;
    let held = conn
        .prepare_cached("SELECT key, owner, until, data FROM claims WHERE key = ?1")?
        .query_row([&claim.key], claim_row)
        .optional()?;
    if held.is_some_and(|h| h.owner != claim.owner && h.holds()) {
        return Ok(false);
    }
    conn.prepare_cached(
        "INSERT INTO claims (key, owner, until, data) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (key) DO UPDATE
         SET owner = excluded.owner, until = excluded.until, data = excluded.data",
    )?
    .execute(params![claim.key, claim.owner, claim.until, claim.data])?;
    Ok(true)
}
