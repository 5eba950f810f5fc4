//! The writer: the only connection that writes, committing in groups.
//!
//! Its thread takes every operation that is waiting, runs them in one
//! transaction, and only after the commit updates the cursors, wakes
//! waiters, publishes the new messages and acknowledges the callers — in
//! that order, so that whoever hears "stored" finds the message everywhere.
//! An in-memory history's callers run the writer themselves, one operation
//! at a time, in the same order (see `History::send`); its thread then only
//! does the idle work below.
//!
//! The full-text index follows in batches: FTS5 writes a segment (and
//! merges segments) at every commit that touched it, which measured as half
//! the writer's work when each send committed alone. Messages are indexed
//! [`INDEX_BATCH`] at a time, or once the writer has been idle for
//! [`INDEX_IDLE`], and before any search ([`Op::Index`]). The table
//! `search_progress` marks how far the index is complete; only messages
//! after the mark may be missing from it (see [`History::candidates`]).
//!
//! Read cursors are written the same way: a cursor moved by a read waits
//! for the next commit, or the same idle moment, so a read alone costs no
//! transaction (and, with `durability = "full"`, no fsync), and many reads
//! of one cursor are one write. Until then the in-memory cursor table is the
//! truth; at shutdown the writer saves what is left.
//!
//! Processes sharing the file on a network without message ids each hear
//! every line: the writer keeps the ids of the heard lines that are its own
//! (those it stored, and the copies other processes stored that its lines
//! matched), so that each line is stored once and a line said twice is
//! kept twice (see [`Origin::Heard`]).

use std::{
    collections::{HashMap, VecDeque},
    sync::{
        Arc, Mutex, Weak,
        mpsc::{Receiver, RecvTimeoutError, TryRecvError},
    },
    time::{Duration, Instant},
};

use chrono::Utc;
use rusqlite::{Connection, OptionalExtension, params};
use tokio::sync::oneshot;

use super::{
    AGENT_MARK, HEARD_WINDOW, HistoryError, Message, NewMessage, Origin, SenderKind, Shared,
    Unstored, commit_failure, from_micros, message_row, select_messages,
};
use crate::names::Channel;

/// Most operations committed in one transaction.
const MAX_GROUP: usize = 512;

/// Messages stored before the commit that stores more also indexes them.
const INDEX_BATCH: usize = 64;

/// How long the writer waits for more work before indexing what is left.
pub(super) const INDEX_IDLE: Duration = Duration::from_millis(20);

/// The longest wait before trying again to index, while it keeps failing
/// (a full disk): the wait doubles from [`INDEX_IDLE`] up to this.
const INDEX_RETRY_MAX: Duration = Duration::from_secs(5);

/// How far back (µs) the clock may step while message times still only
/// increase; further back, new messages follow the clock (see `stamp`).
const CLOCK_STEP_BACK: i64 = 1_000_000;

type Reply<T> = oneshot::Sender<Result<T, HistoryError>>;

/// A write for the writer thread; it fills in the result before replying.
pub(super) enum Op {
    Append {
        messages: Vec<NewMessage>,
        /// What the caller hears back: the messages stored, and the copies
        /// already stored of heard lines.
        stored: Vec<Message>,
        /// The ids of those copies (told already, by whoever stored them).
        copies: Vec<i64>,
        reply: oneshot::Sender<Result<Vec<Message>, Unstored>>,
    },
    EnsureChannel {
        channel: Channel,
        created: bool,
        reply: Reply<bool>,
    },
    /// Records `nick_key` as an agent's nick in `channel` (see
    /// [`History::mark_agent`](super::History::mark_agent)).
    MarkAgent {
        channel: Channel,
        nick: String,
        nick_key: String,
        reply: Reply<()>,
    },
    /// Ends every mark of `nick_key` as an agent's nick (see
    /// [`History::unmark_agent`](super::History::unmark_agent)).
    UnmarkAgent { nick_key: String, reply: Reply<()> },
    /// Takes a claim unless another process holds it (see
    /// [`History::claim`](super::History::claim)); `taken` says whether it
    /// did.
    Claim {
        claim: super::Claim,
        taken: bool,
        reply: Reply<bool>,
    },
    /// Brings the full-text index up to every stored message (of any
    /// process sharing the database); `reply`, if any, hears after the commit.
    Index { reply: Option<Reply<()>> },
    /// Writes a cursor with the next commit; nobody waits for it.
    SaveCursor {
        identity: String,
        channel_id: i64,
        read_seq: i64,
        joined: bool,
    },
    /// Wakes the thread to wait for the idle moment (see
    /// [`Writer::thread_must_wake`]).
    Wake,
}

pub(super) struct Writer {
    pub(super) conn: Connection,
    /// The database as the failure messages name it.
    pub(super) database: String,
    /// SQLite's `data_version` when this writer last held the write lock:
    /// it changes when another process sharing the file has committed, and
    /// then the cached ids, positions and last stamp are stale.
    pub(super) data_version: i64,
    pub(super) shared: Weak<Shared>,
    /// Each channel's id and stored name (the first spelling it was made
    /// with), by key.
    pub(super) channel_ids: HashMap<String, (i64, Arc<str>)>,
    /// Each channel's newest position, by id (filled on first use).
    pub(super) channel_seqs: HashMap<i64, i64>,
    /// The last timestamp (µs) the writer assigned; stamps strictly increase
    /// so that `since` = a message's time excludes exactly that message.
    pub(super) last_stamp: i64,
    /// Messages stored and not yet indexed (by this writer's count; the
    /// index itself is the truth).
    pub(super) unindexed: usize,
    /// How long to wait idle before indexing them (or saving cursors):
    /// [`INDEX_IDLE`], longer after failures.
    pub(super) index_wait: Duration,
    /// Cursors moved since the last commit: (identity, channel id) ->
    /// (read position, joined); written by the next commit.
    pub(super) unsaved_cursors: HashMap<(String, i64), (i64, bool)>,
    /// The change number the commit under way gave the cursors it saves
    /// (see `tail::CursorChanges`).
    pub(super) cursor_change: Option<i64>,
    /// When the writer last took an operation or did its idle work.
    pub(super) last_activity: Instant,
    /// Whether the thread sleeps with a deadline for the idle moment.
    pub(super) thread_waits_for_idle: bool,
    /// The heard lines that are this writer's: (stamp, id), oldest first,
    /// kept for twice [`HEARD_WINDOW`].
    pub(super) heard: VecDeque<(i64, i64)>,
    /// When the writer last found that another process sharing the file
    /// had committed: only then may a heard line have a copy it stored.
    pub(super) foreign_commit: Option<Instant>,
}

impl Writer {
    /// The writer thread: commits what the queue brings, in groups, and the
    /// index and cursors once nothing has happened for `index_wait`; when
    /// the queue closes, commits what is left and checkpoints.
    pub(super) fn run(writer: Arc<Mutex<Writer>>, rx: Receiver<Op>) {
        let lock = || writer.lock().expect("history writer lock");
        loop {
            let idle_in = lock().idle_in();
            let first = match idle_in {
                Some(wait) => match rx.recv_timeout(wait) {
                    Ok(op) => op,
                    Err(RecvTimeoutError::Timeout) => {
                        lock().idle();
                        continue;
                    }
                    Err(RecvTimeoutError::Disconnected) => break,
                },
                None => match rx.recv() {
                    Ok(op) => op,
                    Err(_) => break,
                },
            };
            let mut group = vec![first];
            while group.len() < MAX_GROUP {
                match rx.try_recv() {
                    Ok(op) => group.push(op),
                    Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
                }
            }
            lock().take(group);
        }
        lock().shut_down();
    }

    /// Runs `group` — a group from the queue, or the one operation of a
    /// caller committing its own (an in-memory history; see
    /// [`Writer::thread_must_wake`]).
    pub(super) fn take(&mut self, mut group: Vec<Op>) {
        group.retain_mut(|op| !self.hold_cursor(op) && !matches!(op, Op::Wake));
        if !group.is_empty() {
            self.commit_group(group);
        }
        self.last_activity = Instant::now();
    }

    /// True, once, when the writer thread sleeps without a deadline while
    /// there is idle work (left by a caller's own commit): it must be sent
    /// [`Op::Wake`] to do it later.
    pub(super) fn thread_must_wake(&mut self) -> bool {
        let must = self.has_idle_work() && !self.thread_waits_for_idle;
        self.thread_waits_for_idle |= must;
        must
    }

    fn has_idle_work(&self) -> bool {
        self.unindexed > 0 || !self.unsaved_cursors.is_empty()
    }

    /// How long the thread may sleep before the idle moment, if there is
    /// idle work; without any, it sleeps until an operation arrives.
    fn idle_in(&mut self) -> Option<Duration> {
        self.thread_waits_for_idle = self.has_idle_work();
        self.thread_waits_for_idle
            .then(|| self.index_wait.saturating_sub(self.last_activity.elapsed()))
    }

    /// Indexes and saves cursors if nothing has happened for `index_wait`
    /// (a caller may have committed while the thread slept); a failure
    /// doubles the wait before the next try.
    fn idle(&mut self) {
        if self.last_activity.elapsed() < self.index_wait {
            return;
        }
        self.index_wait = if self.commit_group(self.idle_group()) {
            INDEX_IDLE
        } else {
            (self.index_wait * 2).min(INDEX_RETRY_MAX)
        };
        self.last_activity = Instant::now();
    }

    /// Commits what is left and checkpoints the WAL: the writer's last act.
    fn shut_down(&mut self) {
        if self.has_idle_work() {
            // A failure is logged; the next start indexes what is left.
            let _ = self.commit_group(self.idle_group());
        }
        if let Err(e) = self
            .conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        {
            tracing::warn!(error = %e, "history checkpoint at shutdown failed");
        }
        tracing::debug!("history writer stopped");
    }

    /// What an idle moment (or shutdown) commits: the index brought up to
    /// date if it trails, and the unsaved cursors with it.
    fn idle_group(&self) -> Vec<Op> {
        if self.unindexed > 0 {
            vec![Op::Index { reply: None }]
        } else {
            Vec::new()
        }
    }

    /// Keeps a cursor save for the next commit; true when `op` was one.
    fn hold_cursor(&mut self, op: &mut Op) -> bool {
        let Op::SaveCursor {
            identity,
            channel_id,
            read_seq,
            joined,
        } = op
        else {
            return false;
        };
        let key = (std::mem::take(identity), *channel_id);
        // Saves carry the cursor as it is in memory, so the latest holds.
        self.unsaved_cursors.insert(key, (*read_seq, *joined));
        true
    }

    /// Runs and commits `group`, then tells each op's caller; true when it
    /// was committed.
    fn commit_group(&mut self, mut group: Vec<Op>) -> bool {
        let started = Instant::now();
        let keep_after = Utc::now().timestamp_micros() - 2 * HEARD_WINDOW.as_micros() as i64;
        while self
            .heard
            .front()
            .is_some_and(|&(stamp, _)| stamp < keep_after)
        {
            self.heard.pop_front();
        }
        let heard_before = self.heard.len();
        let result = self.run_group(&mut group);
        let only_indexing = group.iter().all(|op| matches!(op, Op::Index { .. }));
        if let Err(e) = &result {
            if !only_indexing {
                tracing::error!(error = %e, "history commit failed; its messages are reported as not stored");
            } else if !self.unsaved_cursors.is_empty() {
                tracing::warn!(error = %e, "read cursors were not saved; trying again later (they hold in memory meanwhile)");
            }
            let _ = self.conn.execute_batch("ROLLBACK");
            if let (Some(change), Some(shared)) = (self.cursor_change.take(), self.shared.upgrade())
            {
                shared.cursor_changes.rolled_back(change);
            }
            // Ids and positions assigned inside the rolled-back transaction are gone.
            self.channel_ids.clear();
            self.channel_seqs.clear();
            self.heard.truncate(heard_before);
        }
        tracing::trace!(
            ops = group.len(),
            elapsed_us = started.elapsed().as_micros() as u64,
            "history group committed"
        );
        if let (Some(shared), true) = (self.shared.upgrade(), result.is_ok()) {
            let stored: Vec<Message> = group
                .iter()
                .filter_map(|op| match op {
                    Op::Append { stored, copies, .. } => {
                        Some(stored.iter().filter(|m| !copies.contains(&m.id)).cloned())
                    }
                    _ => None,
                })
                .flatten()
                .collect();
            #[cfg(test)]
            shared
                .commits
                .fetch_add(1, std::sync::atomic::Ordering::Release);
            shared.publish_own(&self.conn, stored);
        }
        let committed = result.is_ok();
        let failure = result.err().map(|e| commit_failure(&self.database, &e));
        for op in group {
            op.finish(failure.as_deref());
        }
        committed
    }

    fn run_group(&mut self, group: &mut [Op]) -> rusqlite::Result<()> {
        self.exec("BEGIN IMMEDIATE")?;
        self.catch_up_with_other_writers()?;
        let mut index = false;
        for op in group.iter_mut() {
            match op {
                Op::Append {
                    messages,
                    stored,
                    copies,
                    ..
                } => {
                    for message in messages.iter() {
                        match self.insert(message)? {
                            Inserted::New(new) => stored.push(new),
                            Inserted::Copy(copy) => {
                                copies.push(copy.id);
                                stored.push(copy);
                            }
                            Inserted::Duplicate => {}
                        }
                    }
                }
                Op::EnsureChannel {
                    channel, created, ..
                } => *created = self.channel_id(channel)?.1,
                Op::MarkAgent {
                    channel,
                    nick,
                    nick_key,
                    ..
                } => {
                    let (channel_id, _) = self.channel_id(channel)?;
                    let until = Utc::now().timestamp_micros() + AGENT_MARK.as_micros() as i64;
                    self.conn
                        .prepare_cached(
                            "INSERT INTO speakers (channel_id, key, nick, last_seen, kind, agent_until)
                             VALUES (?1, ?2, ?3, 0, ?4, ?5)
                             ON CONFLICT (channel_id, key) DO UPDATE
                             SET kind = excluded.kind, agent_until = excluded.agent_until",
                        )?
                        .execute(params![
                            channel_id,
                            &*nick_key,
                            &*nick,
                            SenderKind::Agent as i64,
                            until
                        ])?;
                }
                Op::UnmarkAgent { nick_key, .. } => {
                    self.conn
                        .prepare_cached(
                            "UPDATE speakers SET agent_until = 0 WHERE key = ?1 AND agent_until > 0",
                        )?
                        .execute(params![&*nick_key])?;
                }
                Op::Claim { claim, taken, .. } => *taken = super::claims::take(&self.conn, claim)?,
                Op::Index { .. } => index = true,
                // Held before the group runs; written just below either way.
                Op::SaveCursor { .. } => {
                    self.hold_cursor(op);
                }
                Op::Wake => {}
            }
        }
        if !self.unsaved_cursors.is_empty() {
            self.save_cursors()?;
        }
        let index = index || self.unindexed >= INDEX_BATCH;
        if index {
            self.index_the_rest()?;
        }
        self.exec("COMMIT")?;
        if index {
            self.unindexed = 0;
        }
        self.unsaved_cursors.clear();
        self.cursor_change = None;
        Ok(())
    }

    /// Writes the unsaved cursors, numbered as one change after every
    /// change any process made before (under the write lock, so the numbers
    /// grow in commit order); the tail thread skips this process's own.
    fn save_cursors(&mut self) -> rusqlite::Result<()> {
        let change: i64 = self
            .conn
            .prepare_cached("SELECT coalesce(max(changed), 0) + 1 FROM cursors")?
            .query_row([], |row| row.get(0))?;
        // Only a file has other processes, and a tail thread to skip ours.
        if let Some(shared) = self.shared.upgrade().filter(|s| s.open.file) {
            shared.cursor_changes.own(change);
        }
        self.cursor_change = Some(change);
        for ((identity, channel_id), (read_seq, joined)) in &self.unsaved_cursors {
            self.conn
                .prepare_cached(
                    "INSERT INTO cursors (identity, channel_id, read_seq, joined, changed)
                     VALUES (?1, ?2, ?3, ?4, ?5)
                     ON CONFLICT (identity, channel_id) DO UPDATE
                     SET read_seq = max(read_seq, excluded.read_seq), joined = excluded.joined,
                         changed = excluded.changed",
                )?
                .execute(params![identity, channel_id, read_seq, joined, change])?;
        }
        Ok(())
    }

    /// Runs a statement without parameters, prepared once: `execute_batch`
    /// parses its SQL every time, which for `BEGIN` and `COMMIT` measured as
    /// 5 % of the chat workload.
    fn exec(&self, sql: &str) -> rusqlite::Result<()> {
        self.conn.prepare_cached(sql)?.execute([])?;
        Ok(())
    }

    /// Indexes every stored message after `search_progress` that is not
    /// in the index yet (another process may have indexed some), and moves
    /// the mark to the newest message. Runs under the write lock.
    fn index_the_rest(&mut self) -> rusqlite::Result<()> {
        self.conn
            .prepare_cached(
                "INSERT INTO messages_fts (rowid, text)
                 SELECT m.id, searchable(m.text) FROM messages m
                  WHERE m.id > (SELECT indexed_through FROM search_progress)
                    AND NOT EXISTS (SELECT 1 FROM messages_fts_docsize d WHERE d.id = m.id)
                  ORDER BY m.id",
            )?
            .execute([])?;
        self.conn
            .prepare_cached(
                "UPDATE search_progress
                    SET indexed_through = (SELECT coalesce(max(id), 0) FROM messages)",
            )?
            .execute([])?;
        Ok(())
    }

    /// Drops what other processes' commits made stale (several `serve
    /// --stdio` may share one data directory). Runs under the write lock.
    fn catch_up_with_other_writers(&mut self) -> rusqlite::Result<()> {
        let version: i64 = self
            .conn
            .prepare_cached("PRAGMA data_version")?
            .query_row([], |row| row.get(0))?;
        if version != self.data_version {
            self.data_version = version;
            self.foreign_commit = Some(Instant::now());
            self.channel_ids.clear();
            self.channel_seqs.clear();
            let newest: Option<i64> = self
                .conn
                .query_row(
                    "SELECT ts FROM messages ORDER BY id DESC LIMIT 1",
                    [],
                    |row| row.get(0),
                )
                .optional()?;
            self.last_stamp = self.last_stamp.max(newest.unwrap_or(0));
        }
        Ok(())
    }

    /// The id of `channel`, creating it if needed; true when it was created.
    fn channel_id(&mut self, channel: &Channel) -> rusqlite::Result<(i64, bool)> {
        if let Some((id, _)) = self.channel_ids.get(channel.key()) {
            return Ok((*id, false));
        }
        let inserted = self
            .conn
            .prepare_cached(
                "INSERT INTO channels (key, name, created_at) VALUES (?1, ?2, ?3)
                 ON CONFLICT (key) DO NOTHING",
            )?
            .execute(params![
                channel.key(),
                channel.name(),
                Utc::now().timestamp_micros()
            ])?;
        let (id, name): (i64, String) = self
            .conn
            .prepare_cached("SELECT id, name FROM channels WHERE key = ?1")?
            .query_row([channel.key()], |row| Ok((row.get(0)?, row.get(1)?)))?;
        self.channel_ids
            .insert(channel.key().to_owned(), (id, name.into()));
        Ok((id, inserted == 1))
    }

    /// The next insertion position in the channel.
    fn next_seq(&mut self, channel_id: i64) -> rusqlite::Result<i64> {
        let last = match self.channel_seqs.get(&channel_id) {
            Some(&seq) => seq,
            None => self
                .conn
                .prepare_cached("SELECT max(seq) FROM messages WHERE channel_id = ?1")?
                .query_row([channel_id], |row| row.get::<_, Option<i64>>(0))
                .optional()?
                .flatten()
                .unwrap_or(0),
        };
        self.channel_seqs.insert(channel_id, last + 1);
        Ok(last + 1)
    }

    /// A network's timestamp, kept unique: IRC's `server-time` has
    /// millisecond precision, so lines of one burst share a time; each gets
    /// the next free microsecond of that millisecond. Older times (history
    /// replayed after a reconnect) are kept as they are.
    fn stamp_from(&mut self, ts: i64) -> i64 {
        if ts <= self.last_stamp && ts.div_euclid(1000) == self.last_stamp.div_euclid(1000) {
            self.last_stamp += 1;
            return self.last_stamp;
        }
        self.last_stamp = self.last_stamp.max(ts);
        ts
    }

    /// The stamp and id of a message of the channel with `message`'s text
    /// from its nick in the millisecond of `ts` (stored times may be bumped
    /// within it).
    fn copy_at_same_time(
        &self,
        channel_id: i64,
        ts: i64,
        message: &NewMessage,
    ) -> rusqlite::Result<Option<(i64, i64)>> {
        // As precise as the server keeps times: a replay in whole seconds
        // (InspIRCd without msgid) matches the live copy's millisecond
        // within its second, a replay in milliseconds within the same one.
        let (start, width) = if ts.rem_euclid(1_000_000) == 0 {
            (ts, 999_999)
        } else {
            (ts.div_euclid(1000) * 1000, 999)
        };
        self.conn
            .prepare_cached(
                "SELECT ts, id FROM messages
                  WHERE channel_id = ?1 AND ts BETWEEN ?2 AND ?3 AND nick = ?4 AND text = ?5
                  LIMIT 1",
            )?
            .query_row(
                params![channel_id, start, start + width, message.nick, message.text],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .optional()
    }

    /// A time for a message said now: the clock's, kept increasing through
    /// small steps back. A clock that was ahead (the newest stored time is
    /// more than [`CLOCK_STEP_BACK`] past now) is followed, or every time
    /// after it would stay stuck where it was, across restarts too.
    fn stamp(&mut self) -> i64 {
        let now = Utc::now().timestamp_micros();
        if now < self.last_stamp - CLOCK_STEP_BACK {
            tracing::warn!(
                behind_s = (self.last_stamp - now) / 1_000_000,
                "the system clock is behind the newest message's time (it was ahead, or went back); new messages take the clock's time"
            );
            self.last_stamp = now;
        } else {
            self.last_stamp = now.max(self.last_stamp + 1);
        }
        self.last_stamp
    }

    /// The stored message `id`.
    fn stored_copy(&self, id: i64) -> rusqlite::Result<Message> {
        self.conn
            .prepare_cached(select_messages!(
                "FROM messages m JOIN channels c ON c.id = m.channel_id WHERE m.id = ?1"
            ))?
            .query_row([id], message_row)
    }

    /// The stamp and id of the channel's message with this `msgid`.
    fn with_msgid(&self, channel_id: i64, msgid: &str) -> rusqlite::Result<Option<(i64, i64)>> {
        self.conn
            .prepare_cached("SELECT ts, id FROM messages WHERE channel_id = ?1 AND msgid = ?2")?
            .query_row(params![channel_id, msgid], |row| {
                Ok((row.get(0)?, row.get(1)?))
            })
            .optional()
    }

    /// The stamp and id of the copy already stored of the heard line
    /// `message`: the message with its msgid, else one stored within
    /// [`HEARD_WINDOW`] by another process that no heard line of this
    /// writer has matched yet (looked for only while other processes
    /// commit). A line with a network msgid only matches a notice that way
    /// (a process stores its observer's own notices, not knowing the id the
    /// network gives them). The copy is then this writer's.
    fn heard_copy(
        &mut self,
        channel_id: i64,
        message: &NewMessage,
    ) -> rusqlite::Result<Option<(i64, i64)>> {
        if let Some(msgid) = &message.msgid
            && let Some(copy) = self.with_msgid(channel_id, msgid)?
        {
            self.heard.push_back(copy);
            return Ok(Some(copy));
        }
        let others_write = self
            .foreign_commit
            .is_some_and(|at| at.elapsed() < 2 * HEARD_WINDOW);
        if !others_write {
            return Ok(None);
        }
        let around = message
            .time
            .map_or_else(|| Utc::now().timestamp_micros(), |t| t.timestamp_micros());
        let window = HEARD_WINDOW.as_micros() as i64;
        // The kind is written out so that SQLite may use the notices' index.
        let mut query = self.conn.prepare_cached(if message.msgid.is_some() {
            "SELECT ts, id FROM messages
              WHERE channel_id = ?1 AND nick_key = ?2 AND ts BETWEEN ?3 AND ?4 AND text = ?5
                AND kind = 3
              ORDER BY id"
        } else {
            "SELECT ts, id FROM messages
              WHERE channel_id = ?1 AND nick_key = ?2 AND ts BETWEEN ?3 AND ?4 AND text = ?5
              ORDER BY id"
        })?;
        let mut copies = query.query(params![
            channel_id,
            message.nick_key,
            around - window,
            around + window,
            message.text
        ])?;
        while let Some(row) = copies.next()? {
            let copy: (i64, i64) = (row.get(0)?, row.get(1)?);
            if !self.heard.iter().any(|&(_, own)| own == copy.1) {
                self.heard.push_back(copy);
                return Ok(Some(copy));
            }
        }
        Ok(None)
    }

    /// The kind of the heard line `message`: an agent's while a process
    /// sharing the history has its nick marked as one of its agents in the
    /// channel (see [`Op::MarkAgent`]), else what the observer took it for.
    fn heard_kind(&self, channel_id: i64, message: &NewMessage) -> rusqlite::Result<SenderKind> {
        if message.kind != SenderKind::Human {
            return Ok(message.kind);
        }
        let marked: bool = self
            .conn
            .prepare_cached(
                "SELECT count(*) FROM speakers WHERE channel_id = ?1 AND key = ?2 AND agent_until >= ?3",
            )?
            .query_row(
                params![channel_id, message.nick_key, Utc::now().timestamp_micros()],
                |row| row.get(0),
            )?;
        Ok(if marked {
            SenderKind::Agent
        } else {
            message.kind
        })
    }

    /// Inserts one message, unless it duplicates a stored one (see
    /// [`NewMessage::msgid`] and [`Origin`]).
    fn insert(&mut self, message: &NewMessage) -> rusqlite::Result<Inserted> {
        let (channel_id, _) = self.channel_id(&message.channel)?;
        let known = match (message.origin, &message.msgid, message.time) {
            (Origin::Heard, ..) => self.heard_copy(channel_id, message)?,
            (_, Some(msgid), _) => self.with_msgid(channel_id, msgid)?,
            (Origin::Replayed, None, Some(time)) => {
                self.copy_at_same_time(channel_id, time.timestamp_micros(), message)?
            }
            _ => None,
        };
        if let Some((_, id)) = known {
            return Ok(match message.origin {
                Origin::Heard => Inserted::Copy(self.stored_copy(id)?),
                _ => Inserted::Duplicate,
            });
        }
        let kind = match message.origin {
            Origin::Heard => self.heard_kind(channel_id, message)?,
            _ => message.kind,
        };
        let ts = match message.time {
            Some(t) => self.stamp_from(t.timestamp_micros()),
            None => self.stamp(),
        };
        let seq = self.next_seq(channel_id)?;
        self.conn
            .prepare_cached(
                "INSERT INTO messages (channel_id, ts, nick, text, msgid, seq, nick_key, kind, account)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            )?
            .execute(params![
                channel_id,
                ts,
                message.nick,
                message.text,
                message.msgid,
                seq,
                message.nick_key,
                kind as i64,
                message.account
            ])?;
        let id = self.conn.last_insert_rowid();
        if message.origin == Origin::Heard {
            self.heard.push_back((ts, id));
        }
        self.unindexed += 1;
        if kind != SenderKind::System {
            self.conn
                .prepare_cached(
                    "INSERT INTO speakers (channel_id, key, nick, last_seen, kind) VALUES (?1, ?2, ?3, ?4, ?5)
                     ON CONFLICT (channel_id, key) DO UPDATE
                     SET nick = excluded.nick, last_seen = max(last_seen, excluded.last_seen),
                         kind = excluded.kind",
                )?
                .execute(params![
                    channel_id,
                    message.nick_key,
                    message.nick,
                    ts,
                    kind as i64
                ])?;
        }
        let stored_name = self.channel_ids.get(message.channel.key()).map_or_else(
            || message.channel.name().to_owned(),
            |(_, name)| name.to_string(),
        );
        Ok(Inserted::New(Message {
            id,
            channel: stored_name,
            time: from_micros(ts),
            nick: message.nick.clone(),
            text: message.text.clone(),
            kind,
            seq,
            channel_id,
            channel_key: message.channel.key().to_owned(),
            nick_key: message.nick_key.clone(),
            account: message.account.clone(),
        }))
    }
}

/// What became of a message the writer was given.
enum Inserted {
    New(Message),
    /// A heard line some process had stored already: that copy.
    Copy(Message),
    /// A duplicate of a stored message, dropped.
    Duplicate,
}

impl Op {
    /// Replies to the caller: the result on success, else the commit error.
    fn finish(self, failure: Option<&str>) {
        let error = |e: &str| HistoryError::Commit(e.to_owned());
        match self {
            Op::Append {
                messages,
                stored,
                reply,
                ..
            } => {
                let _ = reply.send(failure.map_or(Ok(stored), |e| {
                    Err(Unstored {
                        error: error(e),
                        messages,
                    })
                }));
            }
            Op::EnsureChannel { created, reply, .. } => {
                let _ = reply.send(failure.map_or(Ok(created), |e| Err(error(e))));
            }
            Op::Claim { taken, reply, .. } => {
                let _ = reply.send(failure.map_or(Ok(taken), |e| Err(error(e))));
            }
            Op::MarkAgent { reply, .. } | Op::UnmarkAgent { reply, .. } => {
                let _ = reply.send(failure.map_or(Ok(()), |e| Err(error(e))));
            }
            Op::Index { reply } => match reply {
                Some(reply) => {
                    let _ = reply.send(failure.map_or(Ok(()), |e| Err(error(e))));
                }
                None => {
                    if let Some(e) = failure {
                        tracing::warn!(error = %e, "the search index was not brought up to date; trying again later (searches meanwhile also read the messages it lacks)");
                    }
                }
            },
            // Held until a commit writes them (see `unsaved_cursors`).
            Op::SaveCursor { .. } | Op::Wake => {}
        }
    }
}
