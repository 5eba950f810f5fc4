//! Telling this process of every committed message, its own and those of
//! other processes sharing the database file (several `serve --stdio` may
//! share one data directory): the cursor table, the runs of recent
//! messages, the channel watchers (`wait_for_messages`) and the feed (inbox
//! waits, pushes, approvals) hear of each message once, in id order.
//!
//! [`Published`] holds the newest id told. Only messages after it are told,
//! under its lock, so a message is never told twice nor skipped, whoever
//! tells it:
//! - the writer tells its own commits at once, after first loading what
//!   other processes committed before them (ids between the newest told and
//!   its own first);
//! - a thread ([`run`]), woken when the file may have changed
//!   (`file_changes`), looks at SQLite's `data_version` and, when another
//!   connection has committed, tells whatever it finds after the newest id
//!   told (the writer's own messages included, if it gets there first).
//!
//! Ids are rowids given under the database's write lock, so they grow in
//! commit order across processes: a message committed later always has a
//! larger id.
//!
//! The same thread loads the read cursors other processes saved
//! ([`CursorChanges`]): joins and leaves above all, so that members, direct
//! channels and pushes agree across processes. Each commit that saves
//! cursors numbers them one change past the largest saved so far; the
//! thread loads the rows past the largest it has seen, skipping the
//! changes this process made itself (its memory may already be ahead of
//! them). A cursor only moves forward, whoever moved it.

use std::sync::{Mutex, MutexGuard, Weak};

use rusqlite::{Connection, params};

use super::{
    HistoryError, Message, Shared, file_changes::FileChanges, message_row, own_after,
    saved_cursors, select_messages,
};
use crate::history::cursors::Change;

/// Messages loaded at a time when another process has committed many.
const BATCH: i64 = 512;

/// The newest message id told to this process (see the module doc).
#[derive(Default)]
pub(super) struct Published(Mutex<i64>);

impl Published {
    /// Set when the database opens to its newest message: what is stored
    /// then is history, not news.
    pub(super) fn start_after(&self, newest: i64) {
        *self.lock() = newest;
    }

    fn lock(&self) -> MutexGuard<'_, i64> {
        self.0.lock().expect("published lock")
    }
}

/// The cursor changes this process knows of (see the module doc).
#[derive(Default)]
pub(super) struct CursorChanges(Mutex<ChangesSeen>);

#[derive(Default)]
struct ChangesSeen {
    /// The largest change loaded (or made here).
    seen: i64,
    /// Changes this process's writer made that may not be seen yet.
    own: Vec<i64>,
}

impl CursorChanges {
    /// Set when the database opens, after loading every cursor.
    pub(super) fn start_after(&self, change: i64) {
        self.lock().seen = change;
    }

    /// Notes a change the writer is about to commit.
    pub(super) fn own(&self, change: i64) {
        self.lock().own.push(change);
    }

    /// Forgets a change whose commit was rolled back: another process may
    /// commit a change with its number.
    pub(super) fn rolled_back(&self, change: i64) {
        self.lock().own.retain(|&c| c != change);
    }

    fn lock(&self) -> MutexGuard<'_, ChangesSeen> {
        self.0.lock().expect("cursor changes lock")
    }
}

impl Shared {
    /// Loads the cursors other processes saved since the last look.
    fn load_cursor_changes(&self, conn: &Connection) -> rusqlite::Result<()> {
        let after = self.cursor_changes.lock().seen;
        let saved = saved_cursors(conn, after)?;
        let Some(newest) = saved.last().map(|c| c.changed) else {
            return Ok(());
        };
        let own = std::mem::take(&mut self.cursor_changes.lock().own);
        for cursor in saved.iter().filter(|c| !own.contains(&c.changed)) {
            let (view, change) = self.cursors.update(
                &cursor.identity,
                cursor.channel_id,
                Some(cursor.read_seq),
                Some(cursor.joined),
            );
            if change == Change::Created {
                let mine = own_after(conn, &cursor.identity, cursor.channel_id, view.read_seq)?;
                self.cursors
                    .add_own(&cursor.identity, cursor.channel_id, &mine);
            }
        }
        let mut changes = self.cursor_changes.lock();
        changes.seen = changes.seen.max(newest);
        // Changes of this process not committed yet are kept for next time.
        changes.own.extend(own.into_iter().filter(|&c| c > newest));
        Ok(())
    }

    /// Tells this process of `own`, the messages its writer has just
    /// committed (in id order), after any message of another process
    /// committed before them; `conn` loads those.
    pub(super) fn publish_own(&self, conn: &Connection, own: Vec<Message>) {
        let Some(first) = own.first().map(|m| m.id) else {
            return;
        };
        let mut told = self.published.lock();
        if let Err(e) = self.tell_committed(&mut told, conn, first) {
            // Left for the thread, which finds them from the newest told on;
            // telling ours first would move that past them.
            tracing::warn!(error = %e, "cannot read what other processes committed; trying again shortly");
            return;
        }
        let own: Vec<Message> = own.into_iter().filter(|m| m.id > *told).collect();
        self.tell(&mut told, own);
    }

    /// Tells whatever is committed after the newest message told.
    fn publish_committed(&self, conn: &Connection) -> rusqlite::Result<()> {
        self.tell_committed(&mut self.published.lock(), conn, i64::MAX)
    }

    /// Tells the messages committed after `told` and before `before`, a
    /// batch at a time.
    fn tell_committed(
        &self,
        told: &mut i64,
        conn: &Connection,
        before: i64,
    ) -> rusqlite::Result<()> {
        while *told + 1 < before {
            let batch = load(conn, *told, before)?;
            let full = batch.len() as i64 == BATCH;
            self.tell(told, batch);
            if !full {
                break;
            }
        }
        Ok(())
    }

    /// Tells every listener of `batch` (ids after `told`, in order) and
    /// moves `told` to its last.
    fn tell(&self, told: &mut i64, batch: Vec<Message>) {
        let Some(last) = batch.last() else {
            return;
        };
        *told = last.id;
        self.cursors.committed(&batch);
        self.recent.extend(&batch);
        let mut touched: Vec<&str> = batch.iter().map(|m| m.channel_key.as_str()).collect();
        touched.sort_unstable();
        touched.dedup();
        self.watchers.bump(touched);
        // Nobody listening is fine: the feed is best effort.
        let _ = self.feed.send(batch.into());
    }
}

/// Up to [`BATCH`] messages with ids after `after` and before `before`, in
/// id order.
fn load(conn: &Connection, after: i64, before: i64) -> rusqlite::Result<Vec<Message>> {
    conn.prepare_cached(select_messages!(
        "FROM messages m JOIN channels c ON c.id = m.channel_id
          WHERE m.id > ?1 AND m.id < ?2 ORDER BY m.id LIMIT ?3"
    ))?
    .query_map(params![after, before, BATCH], message_row)?
    .collect()
}

/// The thread that tells this process of other processes' commits, until
/// `changes` is stopped (the history closes) or the history is gone.
pub(super) fn run(shared: Weak<Shared>, conn: Connection, mut changes: FileChanges) {
    let version = |conn: &Connection| -> rusqlite::Result<i64> {
        conn.prepare_cached("PRAGMA data_version")?
            .query_row([], |row| row.get(0))
    };
    // Unknown at first, so the first look tells what was committed since
    // the history opened.
    let mut seen = None;
    let mut failing = false;
    loop {
        let Some(history) = shared.upgrade() else {
            return;
        };
        let result = version(&conn).map_err(HistoryError::from).and_then(|now| {
            if seen == Some(now) {
                return Ok(false);
            }
            history.publish_committed(&conn)?;
            history.load_cursor_changes(&conn)?;
            seen = Some(now);
            Ok(true)
        });
        drop(history);
        // Whether this look found a commit (see `FileChanges::wait`).
        let found = !matches!(result, Ok(false));
        match result {
            Ok(_) => failing = false,
            Err(e) if !failing => {
                failing = true;
                tracing::warn!(error = %e, "cannot read what other processes committed; trying again when the file changes");
            }
            Err(_) => {}
        }
        if !changes.wait(found) {
            return;
        }
    }
}
