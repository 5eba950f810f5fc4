//! The message history: every channel message, in SQLite, durable on ack.
//!
//! One writer thread owns the only write connection and commits in groups:
//! it takes every append that is waiting, runs them in one transaction, and
//! acknowledges them all after the commit. A caller therefore never hears
//! "stored" before the rows are in the WAL, yet a burst of concurrent sends
//! costs one commit (one fsync with `synchronous = full`) instead of many.
//! An in-memory history has no fsync to share: its callers run the writer
//! themselves, one at a time, and its thread only does the idle work.
//!
//! The WAL is checkpointed by SQLite itself, on the commit that takes it
//! past 1,000 pages. A checkpointer thread of its own (a WAL hook asking it
//! for a passive checkpoint) measured slower on the chat workload: under
//! steady sends a passive checkpoint rarely catches the WAL's end, so the
//! WAL is not started over, grows, and every read looks through it.
//!
//! Reads use a small pool of read connections. They are indexed queries
//! bounded by a `LIMIT`, and run on the calling thread: a thread hop would
//! cost more than the query. A read by position (a channel's newest page,
//! or the page after a position) asks only for the channel's newest
//! position when the runs of recent messages (`recent`) hold the page.
//! Full-text search, which can touch many rows, runs on tokio's blocking
//! pool.
//!
//! The full-text index trails the messages by at most a batch (see
//! `writer`): a search has the writer index the rest first, and a mention
//! scan ([`History::candidates`]) reads the messages after the index's mark
//! as they are, so neither misses an acknowledged message.
//!
//! Waiters ([`History::wait_newer`]) subscribe to a per-channel counter that
//! the writer bumps after each commit, so they wake as soon as a message is
//! durable, without polling. Messages other processes commit to the same
//! file are told to the waiters, the feed and the in-memory tables too, by a
//! thread woken when the WAL is written (`tail`, `file_changes`). A line an
//! IRC channel says is heard by the observer of every such process and
//! stored once ([`Origin::Heard`]).
//!
//! A history on disk is opened (and migrated) by [`History::open`], so that a
//! database that cannot be used stops `serve` before any client connects. An
//! in-memory one cannot be refused and starts empty: it is created, and its
//! writer started, on first use, which keeps that work (most of an
//! `--ephemeral` start) out of the MCP handshake.

use std::{
    collections::{HashMap, VecDeque},
    path::{Path, PathBuf},
    sync::{
        Arc, Mutex, OnceLock, Weak,
        atomic::{AtomicBool, Ordering},
        mpsc::{self, Receiver, Sender},
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use chrono::{DateTime, Datelike, SecondsFormat, Timelike, Utc};
use rusqlite::{Connection, OpenFlags, OptionalExtension, params};
use serde::Serialize;
use tokio::sync::{broadcast, oneshot, watch};
use tokio_util::sync::CancellationToken;

use crate::names::Channel;

mod backup;
mod claims;
mod cursors;
mod file_changes;
mod recent;
mod schema;
mod tail;
mod writer;

pub use backup::{Backup, BackupError, backup_file};
pub(crate) use claims::{Claim, WHILE_IT_RUNS, this_process};
pub use cursors::CursorView;
use cursors::{Change, Cursors};
use writer::{Op, Writer};

/// Idle read connections kept open.
const MAX_IDLE_READERS: usize = 8;
/// Commit batches the feed keeps for a slow subscriber before it lags.
const FEED_CAPACITY: usize = 1024;

/// How hard a commit waits for the disk (SQLite's `synchronous` in WAL mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Durability {
    /// Every commit is fsynced: an acknowledged message survives a power cut.
    #[default]
    Full,
    /// Commits reach the OS, not the platter: an acknowledged message survives
    /// the process being killed, but maybe not a power cut.
    Normal,
}

/// Where the history lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// A database file (created with its directory if missing).
    File(PathBuf),
    /// Process memory, gone at exit (`--ephemeral`).
    Memory,
}

/// Who sent a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SenderKind {
    /// Stored before switchboard recorded senders.
    #[default]
    Unknown = 0,
    /// An agent served by this switchboard.
    Agent = 1,
    /// A person: an IRC nick switchboard does not manage, `switchboard say`.
    Human = 2,
    /// switchboard itself (notices such as a paused push or an approval).
    System = 3,
}

impl SenderKind {
    fn from_db(value: i64) -> Self {
        match value {
            1 => Self::Agent,
            2 => Self::Human,
            3 => Self::System,
            _ => Self::Unknown,
        }
    }
}

/// A message as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Message {
    pub id: i64,
    pub channel: String,
    #[serde(serialize_with = "serialize_time")]
    pub time: DateTime<Utc>,
    pub nick: String,
    pub text: String,
    pub kind: SenderKind,
    /// The message's position in its channel, in insertion order (1, 2, …).
    /// Lines an IRC server replays get the next position although their
    /// time is older.
    pub seq: i64,
    #[serde(skip)]
    pub channel_id: i64,
    /// The channel's key (case-folded name).
    #[serde(skip)]
    pub channel_key: String,
    /// The sender's nick, case-folded.
    #[serde(skip)]
    pub nick_key: String,
    /// The services account the network vouched its sender was logged in
    /// as when it was heard (see [`NewMessage::account`]).
    #[serde(skip)]
    pub account: Option<String>,
}

fn serialize_time<S: serde::Serializer>(t: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&iso(t))
}

/// A timestamp as `2026-11-30T22:15:03.123456Z`: precise enough that passing
/// it back as `since` selects exactly the later messages.
pub fn iso(t: &DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Micros, true)
}

/// Writes [`iso`]`(t)` to `out`, by hand for the years 0–9999 (chrono's
/// formatter allocates and interprets a pattern, and `write!` dispatches
/// each field: a cost per message of a page).
pub(crate) fn write_iso(out: &mut Vec<u8>, t: &DateTime<Utc>) {
    let nanos = t.timestamp_subsec_nanos();
    let Ok(year) = u32::try_from(t.year()) else {
        out.extend_from_slice(iso(t).as_bytes());
        return;
    };
    if year > 9999 || nanos >= 1_000_000_000 {
        out.extend_from_slice(iso(t).as_bytes());
        return;
    }
    push_digits(out, year, 4);
    out.push(b'-');
    push_digits(out, t.month(), 2);
    out.push(b'-');
    push_digits(out, t.day(), 2);
    out.push(b'T');
    push_digits(out, t.hour(), 2);
    out.push(b':');
    push_digits(out, t.minute(), 2);
    out.push(b':');
    push_digits(out, t.second(), 2);
    out.push(b'.');
    push_digits(out, nanos / 1000, 6);
    out.push(b'Z');
}

/// Appends the last `width` decimal digits of `n`, zero-padded.
fn push_digits(out: &mut Vec<u8>, n: u32, width: u32) {
    for place in (0..width).rev() {
        out.push(b'0' + (n / 10u32.pow(place) % 10) as u8);
    }
}

/// Where a channel's stored history ends: its row and its newest position
/// (0 while it has no message).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Tip {
    pub(crate) channel_id: i64,
    pub(crate) seq: i64,
}

/// Where a read of a channel starts (`since`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Since {
    /// After the message at this position ([`Message::seq`]): insertion
    /// order, which lines a server replays with older times follow too.
    Seq(i64),
    /// After this time. Lines a server replays keep their older times, so a
    /// reader following by time does not get them.
    Time(DateTime<Utc>),
}

/// Messages [`History::append`] did not store, handed back with why, so a
/// caller can tell whoever waits for each of them.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct Unstored {
    pub error: HistoryError,
    pub messages: Vec<NewMessage>,
}

impl From<Unstored> for HistoryError {
    fn from(unstored: Unstored) -> Self {
        unstored.error
    }
}

/// A message to append.
#[derive(Debug, Clone)]
pub struct NewMessage {
    pub channel: Channel,
    pub nick: String,
    /// The nick case-folded by the network's CASEMAPPING.
    pub nick_key: String,
    pub text: String,
    /// The server's timestamp, when the network supplies one; otherwise the
    /// writer stamps the message when it commits.
    pub time: Option<DateTime<Utc>>,
    /// The network's message id: a message whose id the channel already
    /// holds is dropped as a duplicate.
    pub msgid: Option<String>,
    /// Where it comes from, which says how a copy without `msgid` is found.
    pub origin: Origin,
    pub kind: SenderKind,
    /// The services account the network vouches its sender is logged in
    /// as (IRCv3 `account-tag`), if any.
    pub account: Option<String>,
}

/// Where a [`NewMessage`] comes from, which says what a duplicate of it is
/// when it has no `msgid`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// Said through this process (a send on the local hub, a notice):
    /// stored as it is.
    Here,
    /// Relayed live by a network. Every process sharing the history whose
    /// observer is in the channel hears it too, so it is dropped when
    /// another process has stored the same text from the same nick within
    /// [`HEARD_WINDOW`] and none of this process's lines has matched that
    /// copy yet; repeats of one line are each kept.
    Heard,
    /// Replayed by the network from its own history, so it may be one
    /// already stored: dropped if the channel has the same text from the
    /// same nick within the same millisecond (`server-time`'s precision),
    /// or the same second when the replay's time is a whole second (a
    /// server that keeps no more).
    Replayed,
}

/// How far apart in time two processes may record one heard line.
pub(crate) const HEARD_WINDOW: Duration = Duration::from_secs(10);

/// How long [`History::mark_agent`] makes a nick an agent's in a channel.
/// The marking process marks it again before its agent speaks once half of
/// this has passed, so a person who takes the nick after the agent has
/// gone is a person again.
pub(crate) const AGENT_MARK: Duration = Duration::from_secs(120);

impl NewMessage {
    /// A message said now through this process, by `nick` (whose folded
    /// form is `nick_key`): the writer stamps it.
    pub fn live(
        channel: Channel,
        nick: impl Into<String>,
        nick_key: impl Into<String>,
        text: impl Into<String>,
        kind: SenderKind,
    ) -> Self {
        Self {
            channel,
            nick: nick.into(),
            nick_key: nick_key.into(),
            text: text.into(),
            time: None,
            msgid: None,
            origin: Origin::Here,
            kind,
            account: None,
        }
    }
}

/// A history operation failed.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    /// The file cannot be opened or used; `problem` says why and what to
    /// do (see [`unusable`]).
    #[error("cannot use the history database {path}: {problem}")]
    Open { path: String, problem: String },
    #[error("cannot create the data directory {path}: {problem}")]
    CreateDir { path: String, problem: String },
    #[error(
        "the history database {path} has schema version {found}, newer than this switchboard understands ({}); upgrade switchboard or use another --data-dir",
        schema::VERSION
    )]
    NewerSchema { path: String, found: i64 },
    #[error(
        "{path} is an SQLite database of something else (its tables: {tables}); switchboard adds nothing to it. Move it away, or pass a --data-dir of switchboard's own"
    )]
    Foreign { path: String, tables: String },
    // Not `#[from]`: a source would print the same text twice in a chain.
    #[error("history database error: {0}")]
    Sqlite(rusqlite::Error),
    /// A group of writes was rolled back; the text says why and, for a full
    /// disk, which data directory needs room (see [`commit_failure`]).
    #[error("the message was not stored: {0}")]
    Commit(String),
    #[error("cannot start the history writer thread: {0}")]
    Thread(std::io::Error),
    #[error("the history is shut down; the server is stopping")]
    Closed,
}

/// A handle to the history. Cheap to clone; all clones share one database.
#[derive(Clone)]
pub struct History {
    shared: Arc<Shared>,
}

struct Shared {
    /// Counts the commits, for tests; see [`History::commits`].
    #[cfg(test)]
    commits: std::sync::atomic::AtomicU64,
    writer: Mutex<Option<Sender<Op>>>,
    /// An in-memory history's writer, which callers run themselves (see
    /// [`History::send`]); set when it starts. Its thread holds the only
    /// strong reference, so the database closes when the thread ends.
    inline: OnceLock<Weak<Mutex<Writer>>>,
    /// The writer's end of the queue until [`History::start`] hands it to
    /// the writer thread.
    unstarted: Mutex<Option<Receiver<Op>>>,
    /// Set once the database exists and the writer runs.
    started: AtomicBool,
    writer_thread: Mutex<Option<JoinHandle<()>>>,
    readers: Mutex<Vec<Connection>>,
    open: OpenSpec,
    watchers: Watchers,
    closing: CancellationToken,
    cursors: Cursors,
    recent: recent::Recent,
    /// Every committed message, in commit order, batch by batch (see
    /// `tail`).
    feed: broadcast::Sender<Arc<[Message]>>,
    /// The newest message told to the feed and the rest (see `tail`).
    published: tail::Published,
    /// Which cursor changes of other processes this one has loaded (see
    /// `tail`).
    cursor_changes: tail::CursorChanges,
    /// A history on disk: what stops the thread that looks for other
    /// processes' commits, and the thread.
    tail: Mutex<Option<(file_changes::Stop, JoinHandle<()>)>>,
}

/// How to open a connection to this history's database.
#[derive(Clone)]
struct OpenSpec {
    target: String,
    flags: OpenFlags,
    file: bool,
    durability: Durability,
}

/// How long a connection waits for a lock another connection holds.
const LOCK_WAIT: Duration = Duration::from_secs(5);

/// Retries of a lock taken before [`wait_for_lock`] starts sleeping.
const QUICK_RETRIES: i32 = 100;

/// SQLite's busy handler: whether to try a lock again after `retries`
/// failures. SQLite's own busy timeout sleeps a millisecond or more before
/// each retry, but an in-memory history has no WAL, so every read waits for
/// the write in progress (and a write for the reads), and those take tens
/// of microseconds: it measured as reads idling for milliseconds. The first
/// retries only yield the core; then it sleeps a millisecond per retry, for
/// [`LOCK_WAIT`] in all.
fn wait_for_lock(retries: i32) -> bool {
    if retries < QUICK_RETRIES {
        std::thread::yield_now();
        return true;
    }
    let slept = Duration::from_millis(u64::try_from(retries - QUICK_RETRIES).unwrap_or(0));
    if slept >= LOCK_WAIT {
        return false;
    }
    std::thread::sleep(Duration::from_millis(1));
    true
}

impl OpenSpec {
    fn open(&self) -> Result<Connection, HistoryError> {
        self.try_open().map_err(|e| unusable(&self.target, &e))
    }

    fn try_open(&self) -> rusqlite::Result<Connection> {
        let mut conn = Connection::open_with_flags(&self.target, self.flags)?;
        conn.busy_handler(Some(wait_for_lock))?;
        // Every statement of the readers and the writer (about 30) stays
        // prepared; rusqlite keeps 16 by default.
        conn.set_prepared_statement_cache_capacity(64);
        // Keep one plan per statement: the bundled SQLite (STAT4) otherwise
        // re-plans `prepare_cached` statements on every bind, which measured
        // as 11 % of the CPU of a chat workload.
        conn.set_db_config(
            rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
            true,
        )?;
        let sync = match self.durability {
            Durability::Full => "FULL",
            Durability::Normal => "NORMAL",
        };
        conn.execute_batch(&format!(
            "PRAGMA synchronous = {sync}; PRAGMA temp_store = MEMORY;"
        ))?;
        schema::add_searchable(&conn)?;
        Ok(conn)
    }
}

/// Per-channel counters bumped after each commit that touched the channel.
#[derive(Default)]
struct Watchers(Mutex<HashMap<String, watch::Sender<u64>>>);

impl Watchers {
    fn subscribe(&self, key: &str) -> watch::Receiver<u64> {
        let mut map = self.0.lock().expect("watchers lock");
        if map.len() >= 1024 {
            map.retain(|_, tx| tx.receiver_count() > 0);
        }
        map.entry(key.to_owned())
            .or_insert_with(|| watch::channel(0).0)
            .subscribe()
    }

    fn bump<'a>(&self, keys: impl IntoIterator<Item = &'a str>) {
        let map = self.0.lock().expect("watchers lock");
        for key in keys {
            if let Some(tx) = map.get(key) {
                tx.send_modify(|n| *n += 1);
            }
        }
    }
}

/// Whether a stored message may be missing from the full-text index: one
/// after the mark of `search_progress` (see `writer`).
const UNINDEXED_EXIST: &str = "SELECT (SELECT coalesce(max(id), 0) FROM messages)
      > (SELECT indexed_through FROM search_progress)";

/// The last message the full-text index surely holds.
const INDEXED_THROUGH: &str = "SELECT indexed_through FROM search_progress";

impl History {
    /// Opens (or creates) the history on disk and starts its writer thread;
    /// an in-memory history does both on first use.
    pub fn open(location: &Location, durability: Durability) -> Result<Self, HistoryError> {
        let rw = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_URI;
        let open = match location {
            Location::File(path) => {
                create_files(path)?;
                OpenSpec {
                    target: path.display().to_string(),
                    flags: rw,
                    file: true,
                    durability,
                }
            }
            // memdb databases whose name starts with "/" are shared by every
            // connection of this process that opens the same name.
            Location::Memory => OpenSpec {
                target: format!("file:/switchboard-{}?vfs=memdb", uuid::Uuid::new_v4()),
                flags: rw,
                file: false,
                durability,
            },
        };
        let (tx, rx) = mpsc::channel();
        let history = Self {
            shared: Arc::new(Shared {
                #[cfg(test)]
                commits: std::sync::atomic::AtomicU64::new(0),
                writer: Mutex::new(Some(tx)),
                inline: OnceLock::new(),
                unstarted: Mutex::new(Some(rx)),
                started: AtomicBool::new(false),
                writer_thread: Mutex::new(None),
                readers: Mutex::new(Vec::new()),
                open,
                watchers: Watchers::default(),
                closing: CancellationToken::new(),
                cursors: Cursors::default(),
                recent: recent::Recent::default(),
                feed: broadcast::channel(FEED_CAPACITY).0,
                published: tail::Published::default(),
                cursor_changes: tail::CursorChanges::default(),
                tail: Mutex::new(None),
            }),
        };
        if history.shared.open.file {
            history.start()?;
        }
        Ok(history)
    }

    /// Opens the database (creating or migrating its schema), loads the
    /// cursors and starts the writer thread: once, before the first read or
    /// write. Until it succeeds, every use tries again and reports why not.
    fn start(&self) -> Result<(), HistoryError> {
        if self.shared.started.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut unstarted = self.shared.unstarted.lock().expect("unstarted lock");
        // Started by another caller while this one waited, or closed.
        let Some(rx) = unstarted.take() else {
            return if self.shared.started.load(Ordering::Acquire) {
                Ok(())
            } else {
                Err(HistoryError::Closed)
            };
        };
        let writer = match self.writer() {
            Ok(writer) => writer,
            Err(e) => {
                *unstarted = Some(rx);
                return Err(e);
            }
        };
        let writer = Arc::new(Mutex::new(writer));
        let inline = Arc::downgrade(&writer);
        let handle = std::thread::Builder::new()
            .name("history-writer".into())
            .spawn(move || Writer::run(writer, rx))
            .map_err(HistoryError::Thread)?;
        if self.shared.open.file {
            self.start_tail()?;
        } else {
            // Set once: this is the only start that got the queue's end.
            let _ = self.shared.inline.set(inline);
        }
        *self
            .shared
            .writer_thread
            .lock()
            .expect("writer thread lock") = Some(handle);
        self.shared.started.store(true, Ordering::Release);
        tracing::debug!(database = %self.shared.open.target, "history opened");
        Ok(())
    }

    /// Starts the thread that tells this process of other processes'
    /// commits (see `tail`).
    fn start_tail(&self) -> Result<(), HistoryError> {
        let conn = self.shared.open.open()?;
        let (stop, changes) = file_changes::watch(Path::new(&self.shared.open.target));
        let shared = Arc::downgrade(&self.shared);
        let handle = std::thread::Builder::new()
            .name("history-tail".into())
            .spawn(move || tail::run(shared, conn, changes))
            .map_err(HistoryError::Thread)?;
        *self.shared.tail.lock().expect("tail lock") = Some((stop, handle));
        Ok(())
    }

    /// The writer over a fresh connection to the migrated database.
    fn writer(&self) -> Result<Writer, HistoryError> {
        let open = &self.shared.open;
        let conn = open.open()?;
        schema::migrate(&conn, &open.target, open.file).map_err(|e| match e {
            HistoryError::Sqlite(e) => unusable(&open.target, &e),
            other => other,
        })?;
        let last_stamp = conn
            .query_row(
                "SELECT ts FROM messages ORDER BY id DESC LIMIT 1",
                [],
                |row| row.get(0),
            )
            .optional()?
            .unwrap_or(0);
        load_cursors(&conn, &self.shared.cursors, &self.shared.cursor_changes)?;
        let newest_id: i64 =
            conn.query_row("SELECT coalesce(max(id), 0) FROM messages", [], |row| {
                row.get(0)
            })?;
        self.shared.published.start_after(newest_id);
        // A process that stopped without indexing its last messages left
        // them for the writer's first idle moment.
        let behind: bool = conn.query_row(UNINDEXED_EXIST, [], |row| row.get(0))?;
        Ok(Writer {
            data_version: conn.query_row("PRAGMA data_version", [], |row| row.get(0))?,
            database: open.target.clone(),
            conn,
            shared: Arc::downgrade(&self.shared),
            channel_ids: HashMap::new(),
            channel_seqs: HashMap::new(),
            last_stamp,
            unindexed: usize::from(behind),
            index_wait: writer::INDEX_IDLE,
            unsaved_cursors: HashMap::new(),
            cursor_change: None,
            last_activity: Instant::now(),
            thread_waits_for_idle: false,
            heard: VecDeque::new(),
            foreign_commit: None,
        })
    }

    fn submit<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<T, HistoryError>>) -> Op,
    ) -> Result<oneshot::Receiver<Result<T, HistoryError>>, HistoryError> {
        self.start()?;
        let (tx, rx) = oneshot::channel();
        self.send(make(tx)).map_err(|_| HistoryError::Closed)?;
        Ok(rx)
    }

    /// Hands `op` to the (started) writer; gives it back when the history
    /// is closed.
    ///
    /// An in-memory history's caller runs the writer itself: its commits
    /// take microseconds (no fsync, no other process), about what handing
    /// them to the writer thread and being woken by it costs (7 % of the
    /// server's CPU on the chat workload). The thread then only does the
    /// idle work. A history on disk keeps every commit on the thread, so an
    /// fsync or another process's lock never blocks the caller's runtime.
    fn send(&self, op: Op) -> Result<(), Op> {
        let queue = self.shared.writer.lock().expect("writer lock");
        let Some(queue) = queue.as_ref() else {
            return Err(op);
        };
        let Some(inline) = self.shared.inline.get() else {
            return queue.send(op).map_err(|refused| refused.0);
        };
        // Gone only if the thread died: then the history is closed.
        let Some(writer) = inline.upgrade() else {
            return Err(op);
        };
        let mut writer = writer.lock().expect("history writer lock");
        writer.take(vec![op]);
        if writer.thread_must_wake() {
            // The thread ends only once the queue is closed, and it is not.
            let _ = queue.send(Op::Wake);
        }
        Ok(())
    }

    /// How many groups this process's writer has committed (another
    /// process sharing the database is not counted).
    #[cfg(test)]
    pub(crate) fn commits(&self) -> u64 {
        self.shared.commits.load(Ordering::Acquire)
    }

    /// Appends messages (creating their channels) and returns them as stored,
    /// once they are committed; when they cannot be, hands them back with
    /// the reason. A duplicate (see [`NewMessage::msgid`] and [`Origin`]) is
    /// not stored again: a heard line returns the copy already stored (by
    /// another process sharing the file), anything else nothing.
    pub async fn append(&self, messages: Vec<NewMessage>) -> Result<Vec<Message>, Unstored> {
        if let Err(error) = self.start() {
            return Err(Unstored { error, messages });
        }
        let (reply, rx) = oneshot::channel();
        let op = Op::Append {
            messages,
            stored: Vec::new(),
            copies: Vec::new(),
            reply,
        };
        if let Err(Op::Append { messages, .. }) = self.send(op) {
            return Err(Unstored {
                error: HistoryError::Closed,
                messages,
            });
        }
        // The writer always replies unless its thread died.
        rx.await.unwrap_or_else(|_| {
            Err(Unstored {
                error: HistoryError::Closed,
                messages: Vec::new(),
            })
        })
    }

    /// Creates `channel` if it does not exist; true when it was created.
    pub(crate) async fn ensure_channel(&self, channel: &Channel) -> Result<bool, HistoryError> {
        let rx = self.submit(|reply| Op::EnsureChannel {
            channel: channel.clone(),
            created: false,
            reply,
        })?;
        rx.await.map_err(|_| HistoryError::Closed)?
    }

    /// Records `nick` (folded `nick_key`) as one of this process's agents
    /// in `channel` for [`AGENT_MARK`], before it speaks there: every
    /// process sharing the history stores that nick's heard lines as an
    /// agent's meanwhile, whoever hears them first.
    pub(crate) async fn mark_agent(
        &self,
        channel: &Channel,
        nick: &str,
        nick_key: &str,
    ) -> Result<(), HistoryError> {
        let rx = self.submit(|reply| Op::MarkAgent {
            channel: channel.clone(),
            nick: nick.to_owned(),
            nick_key: nick_key.to_owned(),
            reply,
        })?;
        rx.await.map_err(|_| HistoryError::Closed)?
    }

    /// Ends the marks [`History::mark_agent`] made for `nick_key` in every
    /// channel, once this process's agent no longer holds the nick: whoever
    /// takes it next is a person until marked again.
    pub(crate) async fn unmark_agent(&self, nick_key: &str) -> Result<(), HistoryError> {
        let rx = self.submit(|reply| Op::UnmarkAgent {
            nick_key: nick_key.to_owned(),
            reply,
        })?;
        rx.await.map_err(|_| HistoryError::Closed)?
    }

    fn with_reader<R>(
        &self,
        f: impl FnOnce(&Connection) -> rusqlite::Result<R>,
    ) -> Result<R, HistoryError> {
        self.start()?;
        let pooled = self.shared.readers.lock().expect("readers lock").pop();
        let conn = match pooled {
            Some(conn) => conn,
            None => self.shared.open.open()?,
        };
        let result = f(&conn);
        let mut idle = self.shared.readers.lock().expect("readers lock");
        if idle.len() < MAX_IDLE_READERS {
            idle.push(conn);
        }
        Ok(result?)
    }

    /// Messages of `channel` (by key), newest first in insertion order:
    /// without `since`, the newest `limit`; after a position, the `limit`
    /// right after it, so a reader following the channel pages forward and
    /// skips nothing; after a time, the newest `limit` of those later.
    pub fn read(
        &self,
        channel_key: &str,
        since: Option<Since>,
        limit: usize,
    ) -> Result<Vec<Message>, HistoryError> {
        let after = match since {
            Some(Since::Time(t)) => {
                return self
                    .with_reader(|conn| read_after_time(conn, channel_key, t, limit as i64));
            }
            Some(Since::Seq(after)) => Some(after),
            None => None,
        };
        match self.tip(channel_key)? {
            Some(tip) => self.read_to(tip, after, limit),
            None => Ok(Vec::new()),
        }
    }

    /// The page [`History::read`] gives by position (after `after`, or the
    /// newest) of a channel whose newest message was at `tip`: what came
    /// after `tip` is left for the next read. Served from memory
    /// (`recent`) when it holds every position of the page.
    pub(crate) fn read_to(
        &self,
        tip: Tip,
        after: Option<i64>,
        limit: usize,
    ) -> Result<Vec<Message>, HistoryError> {
        let limit = limit as i64;
        let (from, to) = match after {
            None => ((tip.seq - limit + 1).max(1), tip.seq),
            Some(after) => (
                after.saturating_add(1),
                tip.seq.min(after.saturating_add(limit)),
            ),
        };
        if from > to {
            return Ok(Vec::new());
        }
        if let Some(page) = self.shared.recent.get(tip.channel_id, from, to) {
            return Ok(page);
        }
        let page: Vec<Message> = self.with_reader(|conn| {
            conn.prepare_cached(select_messages!(
                "FROM channels c JOIN messages m ON m.channel_id = c.id
                  WHERE c.id = ?1 AND m.seq BETWEEN ?2 AND ?3 ORDER BY m.seq DESC"
            ))?
            .query_map(params![tip.channel_id, from, to], message_row)?
            .collect()
        })?;
        self.shared.recent.fill(&page);
        Ok(page)
    }

    /// Where `channel`'s (by key) stored history ends; `None` when the
    /// channel is not stored. Read from the database, so a position a
    /// reader has just seen is never newer than this.
    pub(crate) fn tip(&self, channel_key: &str) -> Result<Option<Tip>, HistoryError> {
        self.with_reader(|conn| {
            conn.prepare_cached(
                "SELECT c.id, coalesce((SELECT max(seq) FROM messages WHERE channel_id = c.id), 0)
                   FROM channels c WHERE c.key = ?1",
            )?
            .query_row([channel_key], |row| {
                Ok(Tip {
                    channel_id: row.get(0)?,
                    seq: row.get(1)?,
                })
            })
            .optional()
        })
    }

    /// The position of the newest message of the channel `channel_id` in
    /// the file (whichever process stored it); 0 when it has none.
    pub(crate) fn newest_seq(&self, channel_id: i64) -> Result<i64, HistoryError> {
        self.with_reader(|conn| {
            conn.prepare_cached("SELECT coalesce(max(seq), 0) FROM messages WHERE channel_id = ?1")?
                .query_row([channel_id], |row| row.get(0))
        })
    }

    /// The position of `channel`'s (by key) newest message; 0 when it has
    /// none.
    pub(crate) fn last_seq(&self, channel_key: &str) -> Result<i64, HistoryError> {
        Ok(self.tip(channel_key)?.map_or(0, |tip| tip.seq))
    }

    /// The time of `channel`'s (by key) newest message, if it has any.
    pub(crate) fn last_time(
        &self,
        channel_key: &str,
    ) -> Result<Option<DateTime<Utc>>, HistoryError> {
        let ts: Option<i64> = self.with_reader(|conn| {
            conn.prepare_cached(
                "SELECT max(m.ts) FROM channels c JOIN messages m ON m.channel_id = c.id
                  WHERE c.key = ?1",
            )?
            .query_row([channel_key], |row| row.get(0))
        })?;
        Ok(ts.map(from_micros))
    }

    /// Messages matching `query` (FTS5 syntax), best match first. Every
    /// stored message is searched: what the index lacks is indexed first,
    /// or, when that cannot be written (a full disk), searched through a
    /// temporary index in memory.
    pub async fn search(
        &self,
        query: String,
        channel_key: Option<String>,
        limit: usize,
    ) -> Result<Vec<Message>, HistoryError> {
        let behind: bool =
            self.with_reader(|conn| conn.query_row(UNINDEXED_EXIST, [], |row| row.get(0)))?;
        let mut in_memory = false;
        if behind {
            let indexed = self.submit(|reply| Op::Index { reply: Some(reply) })?;
            if let Err(e) = indexed.await.map_err(|_| HistoryError::Closed)? {
                tracing::warn!(error = %e, "the search index could not be brought up to date; searching the newest messages in memory");
                in_memory = true;
            }
        }
        let history = self.clone();
        tokio::task::spawn_blocking(move || {
            history.with_reader(|conn| {
                search_in(conn, &query, channel_key.as_deref(), limit, in_memory)
            })
        })
        .await
        .map_err(|_| HistoryError::Closed)?
    }

    /// Every channel's display name, ordered by key.
    pub fn channels(&self) -> Result<Vec<String>, HistoryError> {
        self.with_reader(|conn| {
            let mut stmt = conn.prepare_cached("SELECT name FROM channels ORDER BY key")?;
            stmt.query_map([], |row| row.get(0))?.collect()
        })
    }

    /// Who has spoken in `channel` (by key), ordered by key.
    pub(crate) fn speakers(&self, channel_key: &str) -> Result<Vec<Speaker>, HistoryError> {
        self.with_reader(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT s.key, s.nick, s.kind FROM speakers s JOIN channels c ON c.id = s.channel_id
                  WHERE c.key = ?1 ORDER BY s.key",
            )?;
            stmt.query_map([channel_key], |row| {
                Ok(Speaker {
                    key: row.get(0)?,
                    nick: row.get(1)?,
                    kind: SenderKind::from_db(row.get(2)?),
                })
            })?
            .collect()
        })
    }

    /// Up to `limit` messages of the channel before position `before_seq`
    /// (the newest, without it), in insertion order.
    pub fn page(
        &self,
        channel_id: i64,
        before_seq: Option<i64>,
        limit: usize,
    ) -> Result<Vec<Message>, HistoryError> {
        let before = before_seq.unwrap_or(i64::MAX);
        let mut page: Vec<Message> = self.with_reader(|conn| {
            let mut stmt = conn.prepare_cached(select_messages!(
                "FROM messages m JOIN channels c ON c.id = m.channel_id
                  WHERE m.channel_id = ?1 AND m.seq < ?2
                  ORDER BY m.seq DESC LIMIT ?3"
            ))?;
            stmt.query_map(params![channel_id, before, limit as i64], message_row)?
                .collect()
        })?;
        page.reverse();
        Ok(page)
    }

    /// Up to `limit` messages of any channel with ids above `after_id`, by id.
    pub fn after(&self, after_id: i64, limit: usize) -> Result<Vec<Message>, HistoryError> {
        self.with_reader(|conn| {
            let mut stmt = conn.prepare_cached(select_messages!(
                "FROM messages m JOIN channels c ON c.id = m.channel_id
                  WHERE m.id > ?1 ORDER BY m.id LIMIT ?2"
            ))?;
            stmt.query_map(params![after_id, limit as i64], message_row)?
                .collect()
        })
    }

    /// Every channel, ordered by key.
    pub(crate) fn channel_rows(&self) -> Result<Vec<ChannelRow>, HistoryError> {
        self.with_reader(|conn| {
            let mut stmt =
                conn.prepare_cached("SELECT id, key, name FROM channels ORDER BY key")?;
            stmt.query_map([], channel_row)?.collect()
        })
    }

    /// The channel with this key, if it exists.
    pub(crate) fn channel_row(
        &self,
        channel_key: &str,
    ) -> Result<Option<ChannelRow>, HistoryError> {
        self.with_reader(|conn| {
            conn.prepare_cached("SELECT id, key, name FROM channels WHERE key = ?1")?
                .query_row([channel_key], channel_row)
                .optional()
        })
    }

    /// Up to `limit` messages of the channel after position `after_seq`,
    /// oldest first, leaving out those sent by `except_nick_key`.
    pub(crate) fn read_after(
        &self,
        channel_id: i64,
        after_seq: i64,
        except_nick_key: &str,
        limit: usize,
    ) -> Result<Vec<Message>, HistoryError> {
        self.with_reader(|conn| {
            let mut stmt = conn.prepare_cached(select_messages!(
                "FROM messages m JOIN channels c ON c.id = m.channel_id
                  WHERE m.channel_id = ?1 AND m.seq > ?2 AND m.nick_key <> ?3
                  ORDER BY m.seq LIMIT ?4"
            ))?;
            stmt.query_map(
                params![channel_id, after_seq, except_nick_key, limit as i64],
                message_row,
            )?
            .collect()
        })
    }

    /// The id of the newest message (0 when there is none).
    pub fn newest_id(&self) -> Result<i64, HistoryError> {
        self.with_reader(|conn| {
            conn.prepare_cached("SELECT coalesce(max(id), 0) FROM messages")?
                .query_row([], |row| row.get(0))
        })
    }

    /// Messages with ids in `after_id+1 ..= up_to_id` that match `query`
    /// (FTS5 syntax) or come after the index's mark (so may not be indexed
    /// yet), by id, at most `limit`: a superset of the matches, which the
    /// caller narrows with its own test.
    /// Unlike [`History::search`] it never waits for the writer.
    pub(crate) fn candidates(
        &self,
        query: &str,
        after_id: i64,
        up_to_id: i64,
        limit: usize,
    ) -> Result<Vec<Message>, HistoryError> {
        self.with_reader(|conn| {
            let indexed: i64 = conn
                .prepare_cached(INDEXED_THROUGH)?
                .query_row([], |row| row.get(0))?;
            let mut stmt = conn.prepare_cached(select_messages!(
                "FROM messages_fts f
                   JOIN messages m ON m.id = f.rowid
                   JOIN channels c ON c.id = m.channel_id
                  WHERE messages_fts MATCH ?1 AND f.rowid > ?2 AND f.rowid <= ?3
                  ORDER BY f.rowid LIMIT ?4"
            ))?;
            let mut found: Vec<Message> = stmt
                .query_map(
                    params![query, after_id, up_to_id.min(indexed), limit as i64],
                    message_row,
                )?
                .collect::<Result<_, _>>()?;
            if found.len() < limit && up_to_id > indexed {
                let mut stmt = conn.prepare_cached(select_messages!(
                    "FROM messages m JOIN channels c ON c.id = m.channel_id
                      WHERE m.id > ?1 AND m.id <= ?2 ORDER BY m.id LIMIT ?3"
                ))?;
                let rest = stmt.query_map(
                    params![
                        after_id.max(indexed),
                        up_to_id,
                        (limit - found.len()) as i64
                    ],
                    message_row,
                )?;
                for message in rest {
                    found.push(message?);
                }
            }
            Ok(found)
        })
    }

    /// The identity's cursor in the channel, if it has one.
    pub fn cursor(&self, identity: &str, channel_id: i64) -> Option<CursorView> {
        self.shared.cursors.get(identity, channel_id)
    }

    /// Every cursor of the identity.
    pub fn cursors(&self, identity: &str) -> Vec<CursorView> {
        self.shared.cursors.all(identity)
    }

    /// The identities (folded nicks) that have joined the channel.
    pub fn joined(&self, channel_id: i64) -> Vec<String> {
        self.shared.cursors.joined(channel_id)
    }

    /// Moves the identity's cursor in the channel forward to `read` (it
    /// never moves back), creating it there — or, without `read`, at the
    /// channel's newest message — if it has none; `joined`, when given, says
    /// whether the identity is in the channel. Takes effect at once; the
    /// database is updated in the background.
    pub fn mark(
        &self,
        identity: &str,
        channel_id: i64,
        read: Option<i64>,
        joined: Option<bool>,
    ) -> Result<CursorView, HistoryError> {
        let (view, change) = self
            .shared
            .cursors
            .update(identity, channel_id, read, joined);
        if change == Change::None {
            return Ok(view);
        }
        if change == Change::Created {
            let own =
                self.with_reader(|conn| own_after(conn, identity, channel_id, view.read_seq))?;
            self.shared.cursors.add_own(identity, channel_id, &own);
        }
        let op = Op::SaveCursor {
            identity: identity.to_owned(),
            channel_id,
            read_seq: view.read_seq,
            joined: view.joined,
        };
        self.start()?;
        self.send(op).map_err(|_| HistoryError::Closed)?;
        Ok(self
            .shared
            .cursors
            .get(identity, channel_id)
            .unwrap_or(view))
    }

    /// Every message from now on, batch by batch as committed, by this
    /// process or another sharing the database file (see `tail`). A
    /// receiver that falls more than a thousand batches behind misses some
    /// (and is told so); the history itself has them all.
    pub fn feed(&self) -> broadcast::Receiver<Arc<[Message]>> {
        self.shared.feed.subscribe()
    }

    /// Waits until `channel` has messages after `since`, or `timeout`
    /// passes, or the history shuts down; returns them as
    /// [`History::read`] does (empty on timeout).
    pub(crate) async fn wait_newer(
        &self,
        channel_key: &str,
        since: Since,
        limit: usize,
        timeout: Duration,
    ) -> Result<Vec<Message>, HistoryError> {
        let deadline = tokio::time::Instant::now() + timeout;
        // Subscribe before reading, so a commit between the read and the
        // wait still wakes us.
        let mut changes = self.shared.watchers.subscribe(channel_key);
        loop {
            if self.shared.closing.is_cancelled() {
                return Err(HistoryError::Closed);
            }
            changes.borrow_and_update();
            let found = self.read(channel_key, Some(since), limit)?;
            if !found.is_empty() {
                return Ok(found);
            }
            tokio::select! {
                changed = changes.changed() => if changed.is_err() { return Ok(found) },
                () = tokio::time::sleep_until(deadline) => return Ok(found),
                () = self.shared.closing.cancelled() => return Err(HistoryError::Closed),
            }
        }
    }

    /// Completes once [`History::release_waiters`] has been called.
    pub async fn closing(&self) {
        self.shared.closing.cancelled().await;
    }

    /// Ends every [`History::wait_newer`] in progress (with
    /// [`HistoryError::Closed`]) and makes new ones fail at once; writes and
    /// reads go on. The first step of a shutdown.
    pub fn release_waiters(&self) {
        self.shared.closing.cancel();
    }

    /// Stops accepting writes, commits what is queued, checkpoints the WAL and
    /// closes the database. Waiters are released. Idempotent.
    pub fn close(&self) {
        self.release_waiters();
        let tail = self.shared.tail.lock().expect("tail lock").take();
        if let Some((stop, handle)) = tail {
            drop(stop);
            let _ = handle.join();
        }
        self.shared.writer.lock().expect("writer lock").take();
        self.shared.unstarted.lock().expect("unstarted lock").take();
        let handle = self
            .shared
            .writer_thread
            .lock()
            .expect("writer thread lock")
            .take();
        if let Some(handle) = handle {
            let _ = handle.join();
        }
        self.shared.readers.lock().expect("readers lock").clear();
    }

    /// The database file, when the history is on disk.
    pub fn path(&self) -> Option<&Path> {
        self.shared
            .open
            .file
            .then(|| Path::new(&self.shared.open.target))
    }
}

/// A `SELECT` of the columns [`message_row`] reads, followed by `$rest`
/// (which must join `messages m` and `channels c`).
macro_rules! select_messages {
    ($rest:literal) => {
        concat!(
            "SELECT m.id, c.name, m.ts, m.nick, m.text, m.kind, m.seq, m.channel_id, c.key, m.nick_key, m.account ",
            $rest
        )
    };
}
use select_messages;

/// How many columns [`select_messages`] selects: what a query adds comes
/// after them.
const MESSAGE_COLUMNS: usize = 11;

/// [`History::read`] after a time: chosen by the time index (bounded by the
/// limit), shown in insertion order.
fn read_after_time(
    conn: &Connection,
    channel_key: &str,
    t: DateTime<Utc>,
    limit: i64,
) -> rusqlite::Result<Vec<Message>> {
    let mut page: Vec<Message> = conn
        .prepare_cached(select_messages!(
            "FROM channels c JOIN messages m ON m.channel_id = c.id
              WHERE c.key = ?1 AND m.ts > ?2
              ORDER BY m.ts DESC, m.id DESC LIMIT ?3"
        ))?
        .query_map(
            params![channel_key, t.timestamp_micros(), limit],
            message_row,
        )?
        .collect::<Result<_, _>>()?;
    page.sort_unstable_by_key(|m| std::cmp::Reverse(m.seq));
    Ok(page)
}

fn message_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Message> {
    Ok(Message {
        id: row.get(0)?,
        channel: row.get(1)?,
        time: from_micros(row.get(2)?),
        nick: row.get(3)?,
        text: row.get(4)?,
        kind: SenderKind::from_db(row.get(5)?),
        seq: row.get(6)?,
        channel_id: row.get(7)?,
        channel_key: row.get(8)?,
        nick_key: row.get(9)?,
        account: row.get(10)?,
    })
}

/// [`History::search`] on one connection: the index, and, when `in_memory`
/// (the writer could not index), the messages it does not hold through a
/// temporary in-memory index of them (`temp_store = MEMORY`), merged by rank.
fn search_in(
    conn: &Connection,
    query: &str,
    channel_key: Option<&str>,
    limit: usize,
    in_memory: bool,
) -> rusqlite::Result<Vec<Message>> {
    let mut found = ranked_matches(conn, "messages_fts", query, channel_key, limit)?;
    if in_memory {
        conn.execute_batch(&format!(
            "CREATE VIRTUAL TABLE IF NOT EXISTS temp.unindexed USING fts5(text, tokenize = '{}');
             DELETE FROM temp.unindexed;
             INSERT INTO temp.unindexed (rowid, text)
               SELECT m.id, searchable(m.text) FROM messages m
                WHERE m.id > (SELECT indexed_through FROM search_progress)
                  AND NOT EXISTS (SELECT 1 FROM messages_fts_docsize d WHERE d.id = m.id);",
            schema::TOKENIZER
        ))?;
        let tail = ranked_matches(conn, "unindexed", query, channel_key, limit)?;
        conn.execute_batch("DELETE FROM temp.unindexed")?;
        found.extend(tail);
        found.sort_by(|a, b| a.1.total_cmp(&b.1).then(b.0.time.cmp(&a.0.time)));
        found.truncate(limit);
    }
    Ok(found.into_iter().map(|(message, _)| message).collect())
}

/// The best `limit` matches of `query` in the FTS5 table `index` (whose
/// rowids are message ids), with their rank.
fn ranked_matches(
    conn: &Connection,
    index: &str,
    query: &str,
    channel_key: Option<&str>,
    limit: usize,
) -> rusqlite::Result<Vec<(Message, f64)>> {
    let sql = format!(
        "{}, f.rank FROM {index} f
           JOIN messages m ON m.id = f.rowid
           JOIN channels c ON c.id = m.channel_id
          WHERE {index} MATCH ?1 AND (?2 IS NULL OR c.key = ?2)
          ORDER BY f.rank, m.ts DESC LIMIT ?3",
        select_messages!("")
    );
    conn.prepare_cached(&sql)?
        .query_map(params![query, channel_key, limit as i64], |row| {
            Ok((message_row(row)?, row.get::<_, f64>(MESSAGE_COLUMNS)?))
        })?
        .collect()
}

/// Fills the cursor table from the database (at start-up, before the writer
/// runs): every cursor, each channel's newest position, and the positions of
/// each identity's own messages after its cursor; later changes of other
/// processes are loaded by the tail thread.
fn load_cursors(
    conn: &Connection,
    cursors: &Cursors,
    changes: &tail::CursorChanges,
) -> Result<(), HistoryError> {
    let last: Vec<(i64, i64)> = conn
        .prepare(
            "SELECT id, (SELECT max(seq) FROM messages WHERE channel_id = channels.id)
               FROM channels",
        )?
        .query_map([], |row| {
            Ok((row.get(0)?, row.get::<_, Option<i64>>(1)?.unwrap_or(0)))
        })?
        .collect::<Result<_, _>>()?;
    cursors.set_last_seqs(last);
    let saved = saved_cursors(conn, -1)?;
    for cursor in &saved {
        cursors.update(
            &cursor.identity,
            cursor.channel_id,
            Some(cursor.read_seq),
            Some(cursor.joined),
        );
        cursors.add_own(
            &cursor.identity,
            cursor.channel_id,
            &own_after(conn, &cursor.identity, cursor.channel_id, cursor.read_seq)?,
        );
    }
    changes.start_after(saved.iter().map(|c| c.changed).max().unwrap_or(0));
    Ok(())
}

/// A cursor as the `cursors` table holds it.
struct SavedCursor {
    identity: String,
    channel_id: i64,
    read_seq: i64,
    joined: bool,
    /// The change that last wrote it (see `tail::CursorChanges`).
    changed: i64,
}

/// The saved cursors written after change `after`, oldest change first.
fn saved_cursors(conn: &Connection, after: i64) -> rusqlite::Result<Vec<SavedCursor>> {
    conn.prepare_cached(
        "SELECT identity, channel_id, read_seq, joined, changed FROM cursors
          WHERE changed > ?1 ORDER BY changed",
    )?
    .query_map([after], |row| {
        Ok(SavedCursor {
            identity: row.get(0)?,
            channel_id: row.get(1)?,
            read_seq: row.get(2)?,
            joined: row.get(3)?,
            changed: row.get(4)?,
        })
    })?
    .collect()
}

/// Positions of `identity`'s messages in the channel after `read_seq`.
fn own_after(
    conn: &Connection,
    identity: &str,
    channel_id: i64,
    read_seq: i64,
) -> rusqlite::Result<Vec<i64>> {
    conn.prepare_cached(
        "SELECT seq FROM messages
          WHERE channel_id = ?1 AND seq > ?2 AND nick_key = ?3 AND kind <> 3 ORDER BY seq",
    )?
    .query_map(params![channel_id, read_seq, identity], |row| row.get(0))?
    .collect()
}

/// A nick that has spoken in a channel, and who it was the last time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Speaker {
    pub key: String,
    pub nick: String,
    pub kind: SenderKind,
}

/// A channel as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ChannelRow {
    pub id: i64,
    /// The case-folded name.
    pub key: String,
    /// The name as first written.
    pub name: String,
}

fn channel_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<ChannelRow> {
    Ok(ChannelRow {
        id: row.get(0)?,
        key: row.get(1)?,
        name: row.get(2)?,
    })
}

fn from_micros(us: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_micros(us).unwrap_or_default()
}

/// Why a group was not committed, for everyone whose write was in it. A
/// full disk names the data directory and says that sends recover by
/// themselves: the writer keeps no state from a failed group, so the next
/// one succeeds as soon as there is room.
pub(super) fn commit_failure(database: &str, e: &rusqlite::Error) -> String {
    if e.sqlite_error_code() != Some(rusqlite::ErrorCode::DiskFull) {
        return format!("the history database {database} failed to commit ({e})");
    }
    let dir = Path::new(database)
        .parent()
        .filter(|dir| !dir.as_os_str().is_empty())
        .map_or_else(|| ".".to_owned(), |dir| dir.display().to_string());
    format!(
        "the disk holding the data directory {dir} is full (history database {database}: {e}); \
         free space there and send again, switchboard recovers by itself"
    )
}

/// Creates the data directory of the database at `path` (owner-only, 0700,
/// as chat history is private), and the database file itself (0600; SQLite
/// gives its `-wal` and `-shm` files the same mode) when there is none.
/// Existing ones keep their modes.
fn create_files(path: &Path) -> Result<(), HistoryError> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| HistoryError::CreateDir {
                    path: dir.display().to_string(),
                    problem: if dir.exists() && !dir.is_dir() {
                        "it is a file, not a directory; move it, or pass another --data-dir".into()
                    } else {
                        format!("{e}; pass a --data-dir this user may create")
                    },
                })?;
        }
        _ => {}
    }
    // An empty file is a new database to SQLite.
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => Err(HistoryError::Open {
            path: path.display().to_string(),
            problem: format!(
                "{e}; make its directory writable by this user, or pass another --data-dir"
            ),
        }),
        _ => Ok(()),
    }
}

impl From<rusqlite::Error> for HistoryError {
    fn from(e: rusqlite::Error) -> Self {
        Self::Sqlite(e)
    }
}

/// Why the database at `path` cannot be used, and what to do about it.
fn unusable(path: &str, e: &rusqlite::Error) -> HistoryError {
    use rusqlite::ErrorCode::*;
    let hint = match e.sqlite_error_code() {
        Some(DatabaseCorrupt | NotADatabase) => format!(
            "it is damaged or not a database. If it was just restored from a backup, delete {path}-wal and {path}-shm beside it (they belong to the file it replaced) and start again; otherwise move it aside to start a new history, or restore a backup"
        ),
        Some(ReadOnly) => {
            "switchboard may not write it: make the file and its directory writable by this user, or pass another --data-dir".into()
        }
        Some(CannotOpen | PermissionDenied) => {
            "make the file and its directory readable and writable by this user, or pass another --data-dir".into()
        }
        _ => "check the file, or pass another --data-dir".into(),
    };
    HistoryError::Open {
        path: path.to_owned(),
        problem: format!("{e}; {hint}"),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::time::Instant;

    use super::*;
    use crate::names::NameRules;

    pub(crate) fn msg(channel: &str, nick: &str, text: &str) -> NewMessage {
        let rules = NameRules::default();
        let channel = rules.channel(channel).unwrap();
        NewMessage::live(channel, nick, rules.fold(nick), text, SenderKind::Agent)
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn written_times_are_iso() {
        let times = [
            "2026-11-30T22:15:03.123456Z",
            "0001-01-01T00:00:00Z",
            "9999-12-31T23:59:59.999999Z",
            "1969-12-31T23:59:59.5Z",
        ]
        .map(|t| DateTime::parse_from_rfc3339(t).unwrap().with_timezone(&Utc));
        let year_10000 = DateTime::from_timestamp(253_402_300_800, 0).unwrap();
        let before_year_0 = DateTime::from_timestamp(-62_200_000_000, 0).unwrap();
        for t in times.into_iter().chain([year_10000, before_year_0]) {
            let mut out = Vec::new();
            write_iso(&mut out, &t);
            assert_eq!(String::from_utf8(out).unwrap(), iso(&t));
        }
    }

    #[test]
    fn reads_are_newest_first_and_since_is_exclusive() {
        let rt = runtime();
        let history = History::open(&Location::Memory, Durability::Full).unwrap();
        let stored = rt.block_on(async {
            let mut all = Vec::new();
            for i in 0..5 {
                all.extend(
                    history
                        .append(vec![msg("#a", "bob", &format!("m{i}"))])
                        .await
                        .unwrap(),
                );
            }
            all
        });
        let read = history.read("#a", None, 3).unwrap();
        assert_eq!(
            read.iter().map(|m| m.text.as_str()).collect::<Vec<_>>(),
            ["m4", "m3", "m2"]
        );
        let newer = history
            .read("#a", Some(Since::Time(stored[2].time)), 50)
            .unwrap();
        assert_eq!(
            newer.iter().map(|m| m.text.as_str()).collect::<Vec<_>>(),
            ["m4", "m3"]
        );
        assert!(history.read("#missing", None, 50).unwrap().is_empty());
        history.close();
    }

    #[test]
    fn history_survives_reopening_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/history.db");
        let rt = runtime();
        let history = History::open(&Location::File(path.clone()), Durability::Full).unwrap();
        rt.block_on(history.append(vec![msg("#a", "Bob", "kept")]))
            .unwrap();
        history.close();
        let reopened = History::open(&Location::File(path), Durability::Full).unwrap();
        assert_eq!(reopened.read("#a", None, 10).unwrap()[0].text, "kept");
        assert_eq!(reopened.channels().unwrap(), ["#a"]);
        assert_eq!(
            reopened.speakers("#a").unwrap(),
            [Speaker {
                key: "bob".into(),
                nick: "Bob".into(),
                kind: SenderKind::Agent
            }]
        );
        reopened.close();
    }

    #[test]
    fn closing_an_in_memory_history_frees_its_database() {
        let rt = runtime();
        let history = History::open(&Location::Memory, Durability::Full).unwrap();
        rt.block_on(history.append(vec![msg("#a", "bob", "one")]))
            .unwrap();
        let target = history.shared.open.target.clone();
        let tables = || {
            let conn = history.shared.open.open().unwrap();
            conn.query_row("SELECT count(*) FROM sqlite_master", [], |row| {
                row.get::<_, i64>(0)
            })
            .unwrap()
        };
        assert!(tables() > 0, "{target} has no tables while open");
        history.close();
        assert_eq!(tables(), 0, "{target} still holds the history after close");
    }

    #[test]
    fn writes_after_close_fail_cleanly() {
        let rt = runtime();
        let history = History::open(&Location::Memory, Durability::Full).unwrap();
        history.close();
        let err = rt
            .block_on(history.append(vec![msg("#a", "bob", "late")]))
            .unwrap_err();
        assert!(matches!(err.error, HistoryError::Closed));
        // The refused messages come back, for whoever waits on them.
        assert_eq!(err.messages.len(), 1);
        assert_eq!(err.messages[0].text, "late");
    }

    #[test]
    fn network_times_within_one_millisecond_stay_distinct_and_ordered() {
        let rt = runtime();
        let history = History::open(&Location::Memory, Durability::Full).unwrap();
        let at = DateTime::parse_from_rfc3339("2026-11-30T10:00:00.638Z")
            .unwrap()
            .with_timezone(&Utc);
        let batch: Vec<NewMessage> = ["a", "b", "c"]
            .iter()
            .map(|t| NewMessage {
                time: Some(at),
                ..msg("#a", "bob", t)
            })
            .collect();
        let stored = rt.block_on(history.append(batch)).unwrap();
        assert!(stored[0].time < stored[1].time && stored[1].time < stored[2].time);
        assert_eq!(stored[2].time.timestamp_millis(), at.timestamp_millis());
        let newer = history
            .read("#a", Some(Since::Time(stored[0].time)), 10)
            .unwrap();
        assert_eq!(
            newer.iter().map(|m| m.text.as_str()).collect::<Vec<_>>(),
            ["c", "b"]
        );
        let older = at - chrono::Duration::seconds(60);
        let replayed = rt
            .block_on(history.append(vec![NewMessage {
                time: Some(older),
                ..msg("#a", "eve", "old")
            }]))
            .unwrap();
        assert_eq!(replayed[0].time, older);
        history.close();
    }

    #[test]
    fn a_replay_in_whole_seconds_is_the_line_heard_within_that_second() {
        let rt = runtime();
        let history = History::open(&Location::Memory, Durability::Full).unwrap();
        let append = |m: NewMessage| rt.block_on(history.append(vec![m])).unwrap();
        let heard_at = DateTime::parse_from_rfc3339("2026-12-03T10:00:07.437Z")
            .unwrap()
            .with_timezone(&Utc);
        append(NewMessage {
            time: Some(heard_at),
            ..msg("#a", "bob", "deploying")
        });
        let replay = |at: &str, text: &str| NewMessage {
            time: Some(
                DateTime::parse_from_rfc3339(at)
                    .unwrap()
                    .with_timezone(&Utc),
            ),
            origin: Origin::Replayed,
            ..msg("#a", "bob", text)
        };
        assert!(append(replay("2026-12-03T10:00:07Z", "deploying")).is_empty());
        // Another second, another millisecond, another text: other lines.
        assert_eq!(append(replay("2026-12-03T10:00:08Z", "deploying")).len(), 1);
        assert_eq!(
            append(replay("2026-12-03T10:00:07.438Z", "deploying")).len(),
            1
        );
        assert_eq!(append(replay("2026-12-03T10:00:07Z", "deployed")).len(), 1);
        history.close();
    }

    #[test]
    fn reads_follow_insertion_order_when_replayed_times_go_backwards() {
        let rt = runtime();
        let history = History::open(&Location::Memory, Durability::Full).unwrap();
        let append = |m: NewMessage| rt.block_on(history.append(vec![m])).unwrap().remove(0);
        let live: Vec<Message> = (0..3)
            .map(|i| append(msg("#a", "bob", &format!("live {i}"))))
            .collect();
        // A server replays what was said while the observer was away, with
        // whole-second times: before the last line recorded live.
        let older = live[2].time - chrono::Duration::seconds(1);
        let replay = |text: &str| NewMessage {
            time: Some(older),
            origin: Origin::Replayed,
            ..msg("#a", "carol", text)
        };
        append(replay("away 1"));
        append(replay("away 2"));
        append(msg("#a", "bob", "back"));
        let texts = |page: &[Message]| page.iter().map(|m| m.text.clone()).collect::<Vec<_>>();

        let newest = history.read("#a", None, 10).unwrap();
        assert_eq!(
            texts(&newest),
            ["back", "away 2", "away 1", "live 2", "live 1", "live 0"]
        );
        assert!(newest[1].time < newest[3].time, "the replayed time is kept");
        let after = history
            .read("#a", Some(Since::Seq(live[2].seq)), 10)
            .unwrap();
        assert_eq!(texts(&after), ["back", "away 2", "away 1"]);
        // By time, the replayed lines are behind the reader.
        let by_time = history
            .read("#a", Some(Since::Time(live[2].time)), 10)
            .unwrap();
        assert_eq!(texts(&by_time), ["back"]);

        // Following page by page from the first line gets every later line
        // exactly once, in insertion order.
        let mut followed = Vec::new();
        let mut position = live[0].seq;
        loop {
            let page = history.read("#a", Some(Since::Seq(position)), 2).unwrap();
            let Some(newest) = page.first() else { break };
            position = newest.seq;
            followed.extend(texts(&page).into_iter().rev());
        }
        assert_eq!(followed, ["live 1", "live 2", "away 1", "away 2", "back"]);
        assert_eq!(history.last_seq("#a").unwrap(), position);
        assert_eq!(history.last_seq("#missing").unwrap(), 0);

        let woke = rt
            .block_on(history.wait_newer("#a", Since::Seq(live[2].seq), 10, Duration::from_secs(5)))
            .unwrap();
        assert_eq!(texts(&woke), ["back", "away 2", "away 1"]);
        history.close();
    }

    #[test]
    fn duplicate_msgids_are_stored_once() {
        let rt = runtime();
        let history = History::open(&Location::Memory, Durability::Full).unwrap();
        let mut m = msg("#a", "bob", "once");
        m.msgid = Some("abc".into());
        let first = rt.block_on(history.append(vec![m.clone()])).unwrap();
        let second = rt.block_on(history.append(vec![m])).unwrap();
        assert_eq!((first.len(), second.len()), (1, 0));
        assert_eq!(history.read("#a", None, 10).unwrap().len(), 1);
        history.close();
    }

    #[test]
    fn replayed_copies_without_msgid_are_dropped_but_live_repeats_are_kept() {
        let rt = runtime();
        let history = History::open(&Location::Memory, Durability::Full).unwrap();
        assert_eq!(history.last_time("#a").unwrap(), None);
        let at = DateTime::parse_from_rfc3339("2026-11-30T10:00:00.638Z")
            .unwrap()
            .with_timezone(&Utc);
        let at_ms = |text: &str| NewMessage {
            time: Some(at),
            ..msg("#a", "bob", text)
        };
        // An agent's two-line "ok\nok" shares a millisecond: both are kept.
        let live = rt
            .block_on(history.append(vec![at_ms("ok"), at_ms("ok")]))
            .unwrap();
        assert_eq!(live.len(), 2);
        assert_eq!(history.last_time("#a").unwrap(), Some(live[1].time));
        let replay = |text: &str, nick: &str| NewMessage {
            origin: Origin::Replayed,
            time: Some(at),
            ..msg("#a", nick, text)
        };
        let stored = rt
            .block_on(history.append(vec![
                replay("ok", "bob"),
                replay("ok", "eve"),
                replay("new", "bob"),
            ]))
            .unwrap();
        let texts: Vec<_> = stored
            .iter()
            .map(|m| (m.nick.as_str(), m.text.as_str()))
            .collect();
        assert_eq!(texts, [("eve", "ok"), ("bob", "new")]);
        assert_eq!(history.read("#a", None, 10).unwrap().len(), 4);
        history.close();
    }

    #[test]
    fn search_finds_stemmed_words_and_filters_by_channel() {
        let rt = runtime();
        let history = History::open(&Location::Memory, Durability::Full).unwrap();
        rt.block_on(history.append(vec![
            msg("#a", "bob", "deploying the release now"),
            msg("#b", "eve", "the deploy failed"),
            msg("#a", "bob", "lunch?"),
        ]))
        .unwrap();
        let all = rt
            .block_on(history.search("\"deploy\"".into(), None, 10))
            .unwrap();
        assert_eq!(all.len(), 2);
        let only_b = rt
            .block_on(history.search("\"deploy\"".into(), Some("#b".into()), 10))
            .unwrap();
        assert_eq!(only_b.len(), 1);
        assert_eq!(only_b[0].nick, "eve");
        history.close();
    }

    #[test]
    fn waiters_wake_on_commit_and_on_close() {
        let rt = runtime();
        let history = History::open(&Location::Memory, Durability::Full).unwrap();
        rt.block_on(async {
            let since = Since::Time(Utc::now());
            let waiter = {
                let history = history.clone();
                tokio::spawn(async move {
                    history
                        .wait_newer("#a", since, 50, Duration::from_secs(10))
                        .await
                })
            };
            tokio::time::sleep(Duration::from_millis(20)).await;
            let started = Instant::now();
            history
                .append(vec![msg("#a", "bob", "wake")])
                .await
                .unwrap();
            let got = waiter.await.unwrap().unwrap();
            assert_eq!(got[0].text, "wake");
            assert!(started.elapsed() < Duration::from_millis(50));

            let timed_out = history
                .wait_newer("#a", Since::Time(Utc::now()), 50, Duration::from_millis(30))
                .await
                .unwrap();
            assert!(timed_out.is_empty());

            let waiter = {
                let history = history.clone();
                tokio::spawn(async move {
                    history
                        .wait_newer("#a", Since::Time(Utc::now()), 50, Duration::from_secs(10))
                        .await
                })
            };
            tokio::time::sleep(Duration::from_millis(20)).await;
            history.close();
            assert!(matches!(waiter.await.unwrap(), Err(HistoryError::Closed)));
        });
    }

    #[test]
    fn concurrent_appends_in_memory_are_all_stored() {
        let rt = runtime();
        let history = History::open(&Location::Memory, Durability::Full).unwrap();
        rt.block_on(async {
            let tasks: Vec<_> = (0..20)
                .map(|i| {
                    let history = history.clone();
                    tokio::spawn(async move {
                        for j in 0..50 {
                            history
                                .append(vec![msg("#a", "bob", &format!("{i}-{j}"))])
                                .await
                                .unwrap();
                            history.read("#a", None, 50).unwrap();
                        }
                    })
                })
                .collect();
            for t in tasks {
                t.await.unwrap();
            }
        });
        assert_eq!(history.read("#a", None, 500).unwrap().len(), 500);
        let count: i64 = history
            .with_reader(|c| c.query_row("SELECT count(*) FROM messages", [], |r| r.get(0)))
            .unwrap();
        assert_eq!(count, 1000);
        history.close();
    }

    #[test]
    fn an_in_memory_history_is_created_by_its_first_use_whichever_comes_first() {
        let rt = runtime();
        let history = History::open(&Location::Memory, Durability::Full).unwrap();
        assert!(!history.shared.started.load(Ordering::Acquire));
        // Readers and writers racing to be first: the database is created
        // once, and nobody sees it without its tables.
        let handles: Vec<_> = (0..8)
            .map(|i| {
                let history = history.clone();
                std::thread::spawn(move || {
                    if i % 2 == 0 {
                        history.read("#a", None, 10).map(|_| ())
                    } else {
                        rt_block(history.append(vec![msg("#b", "ann", "first")]))
                            .map(|_| ())
                            .map_err(HistoryError::from)
                    }
                })
            })
            .collect();
        for handle in handles {
            handle.join().unwrap().unwrap();
        }
        assert!(history.shared.started.load(Ordering::Acquire));
        rt.block_on(history.append(vec![msg("#a", "bob", "hi")]))
            .unwrap();
        assert_eq!(history.read("#a", None, 10).unwrap().len(), 1);
        assert_eq!(history.read("#b", None, 10).unwrap().len(), 4);
        history.close();

        let dir = tempfile::tempdir().unwrap();
        let on_disk =
            History::open(&Location::File(dir.path().join("h.db")), Durability::Full).unwrap();
        assert!(on_disk.shared.started.load(Ordering::Acquire));
        on_disk.close();
    }

    #[test]
    fn a_read_waits_out_a_write_lock_and_gives_up_after_the_limit() {
        let history = History::open(&Location::Memory, Durability::Full).unwrap();
        assert!(history.read("#a", None, 10).unwrap().is_empty());
        // Another connection holds the in-memory database longer than the
        // quick retries last.
        let writer = history.shared.open.open().unwrap();
        writer.execute_batch("BEGIN EXCLUSIVE").unwrap();
        let (locked, held) = std::sync::mpsc::channel();
        let holder = std::thread::spawn(move || {
            locked.send(()).unwrap();
            std::thread::sleep(Duration::from_millis(50));
            writer.execute_batch("COMMIT").unwrap();
        });
        held.recv().unwrap();
        assert!(history.read("#a", None, 10).unwrap().is_empty());
        holder.join().unwrap();
        assert!(wait_for_lock(0));
        let limit = QUICK_RETRIES + i32::try_from(LOCK_WAIT.as_millis()).unwrap();
        assert!(!wait_for_lock(limit));
        history.close();
    }

    #[test]
    fn a_never_used_in_memory_history_once_closed_says_so() {
        let history = History::open(&Location::Memory, Durability::Full).unwrap();
        history.close();
        assert!(matches!(
            history.read("#a", None, 10),
            Err(HistoryError::Closed)
        ));
    }

    /// Whether the full-text index holds every stored message.
    fn fully_indexed(history: &History) -> bool {
        !history
            .with_reader(|conn| conn.query_row(UNINDEXED_EXIST, [], |row| row.get::<_, bool>(0)))
            .unwrap()
    }

    #[test]
    fn searches_and_mention_scans_see_every_message_indexed_or_not() {
        let rt = runtime();
        let dir = tempfile::tempdir().unwrap();
        let history =
            History::open(&Location::File(dir.path().join("h.db")), Durability::Normal).unwrap();
        // One send at a time, as agents do: the index takes them in batches.
        let mut ids = Vec::new();
        for i in 0..70 {
            let text = if i == 3 || i == 69 {
                format!("deploying build {i}")
            } else {
                format!("line {i}")
            };
            let stored = rt.block_on(history.append(vec![msg("#a", "bob", &text)]));
            ids.push(stored.unwrap()[0].id);
        }
        let newest = *ids.last().unwrap();
        // The index only grows: what it held before the scan, it held during it.
        let indexed: i64 = history
            .with_reader(|conn| conn.query_row(INDEXED_THROUGH, [], |row| row.get(0)))
            .unwrap();
        let candidates = history.candidates("\"deploy\"", 0, newest, 100).unwrap();
        for wanted in [ids[3], ids[69]] {
            assert!(
                candidates.iter().any(|m| m.id == wanted),
                "{wanted} missing"
            );
        }
        // Matches, and what the index did not hold yet.
        assert!(
            candidates
                .iter()
                .all(|m| m.text.starts_with("deploying") || m.id > indexed)
        );
        let found = rt
            .block_on(history.search("\"deploy\"".into(), None, 10))
            .unwrap();
        let mut texts: Vec<_> = found.iter().map(|m| m.text.as_str()).collect();
        texts.sort_unstable();
        assert_eq!(texts, ["deploying build 3", "deploying build 69"]);
        assert!(fully_indexed(&history));
        history.close();
    }

    #[test]
    fn words_in_irc_colours_or_bold_are_found() {
        let rt = runtime();
        let history = History::open(&Location::Memory, Durability::Full).unwrap();
        let texts = [
            "\u{3}04alice\u{3}: look",
            "\u{2}deploy\u{2} now",
            "plain line",
        ];
        let mut newest = 0;
        for text in texts {
            let stored = rt.block_on(history.append(vec![msg("#a", "bob", text)]));
            newest = stored.unwrap()[0].id;
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while !fully_indexed(&history) {
            assert!(Instant::now() < deadline, "not indexed after 5 s idle");
            std::thread::sleep(Duration::from_millis(5));
        }
        let candidates = history.candidates("\"alice\"", 0, newest, 10).unwrap();
        assert_eq!(candidates.len(), 1);
        assert_eq!(candidates[0].text, texts[0], "stored as sent");
        let found = rt
            .block_on(history.search("deploy".into(), None, 10))
            .unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].text, texts[1]);
        history.close();
    }

    #[test]
    fn an_idle_or_closing_writer_completes_the_index() {
        let rt = runtime();
        let history = History::open(&Location::Memory, Durability::Full).unwrap();
        // The second send finds the writer thread asleep with nothing to do:
        // the caller, committing it itself, must wake it for the idle work.
        for text in ["one", "two"] {
            rt.block_on(history.append(vec![msg("#a", "bob", text)]))
                .unwrap();
            let deadline = Instant::now() + Duration::from_secs(5);
            while !fully_indexed(&history) {
                assert!(
                    Instant::now() < deadline,
                    "{text:?} not indexed after 5 s idle"
                );
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        history.close();

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h.db");
        let history = History::open(&Location::File(path.clone()), Durability::Full).unwrap();
        rt.block_on(history.append(vec![msg("#a", "bob", "closing time")]))
            .unwrap();
        history.close();
        let conn = Connection::open(&path).unwrap();
        let indexed: i64 = conn
            .query_row(
                "SELECT count(*) FROM messages_fts WHERE messages_fts MATCH 'closing'",
                [],
                |row| row.get(0),
            )
            .unwrap();
        assert_eq!(indexed, 1);
    }

    #[test]
    fn messages_a_stopped_process_left_unindexed_are_searched() {
        let rt = runtime();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h.db");
        let history = History::open(&Location::File(path.clone()), Durability::Full).unwrap();
        let first = rt
            .block_on(history.append(vec![msg("#a", "bob", "indexed deploy")]))
            .unwrap();
        history.close();
        // Stored, committed and never indexed: a process killed in between.
        let conn = Connection::open(&path).unwrap();
        store_as_eve(&conn, &first[0], "orphan deploy");
        drop(conn);
        let reopened = History::open(&Location::File(path), Durability::Full).unwrap();
        let newest = reopened.newest_id().unwrap();
        let candidates = reopened.candidates("\"deploy\"", 0, newest, 10).unwrap();
        assert_eq!(candidates.len(), 2);
        assert_eq!(deploy_nicks(&rt, &reopened), ["bob", "eve"]);
        reopened.close();
    }

    /// Stores `text` from eve right after `after`, through `conn` alone (as
    /// another process, or another build, would), without indexing it.
    fn store_as_eve(conn: &Connection, after: &Message, text: &str) -> i64 {
        conn.execute(
            "INSERT INTO messages (channel_id, ts, nick, text, seq, nick_key, kind)
             VALUES (?1, ?2, 'eve', ?3, ?4, 'eve', 0)",
            params![
                after.channel_id,
                after.time.timestamp_micros() + 1,
                text,
                after.seq + 1
            ],
        )
        .unwrap();
        conn.last_insert_rowid()
    }

    /// The nicks of the messages a search for "deploy" finds, sorted.
    fn deploy_nicks(rt: &tokio::runtime::Runtime, history: &History) -> Vec<String> {
        let found = rt
            .block_on(history.search("\"deploy\"".into(), None, 10))
            .unwrap();
        let mut nicks: Vec<String> = found.into_iter().map(|m| m.nick).collect();
        nicks.sort_unstable();
        nicks
    }

    #[test]
    fn a_build_indexing_as_it_stores_beside_this_one_hides_nothing() {
        let rt = runtime();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h.db");
        let history = History::open(&Location::File(path.clone()), Durability::Full).unwrap();
        let ours = rt
            .block_on(history.append(vec![msg("#a", "bob", "deploy from this build")]))
            .unwrap();
        // Meanwhile an older build on the same file stores a newer message
        // and indexes it at once.
        let other = Connection::open(&path).unwrap();
        let id = store_as_eve(&other, &ours[0], "deploy from the old build");
        other
            .execute(
                "INSERT INTO messages_fts (rowid, text) VALUES (?1, 'deploy from the old build')",
                [id],
            )
            .unwrap();
        let newest = history.newest_id().unwrap();
        let candidates = history.candidates("\"deploy\"", 0, newest, 10).unwrap();
        assert_eq!(candidates.len(), 2, "{candidates:?}");
        assert_eq!(
            deploy_nicks(&rt, &history),
            ["bob", "eve"],
            "each found once"
        );
        history.close();
    }

    fn rt_block<T>(future: impl std::future::Future<Output = T>) -> T {
        runtime().block_on(future)
    }

    #[test]
    fn writers_sharing_a_file_take_turns_in_one_channel() {
        // As several `serve --stdio` on one data directory do.
        let rt = runtime();
        let dir = tempfile::tempdir().unwrap();
        let location = Location::File(dir.path().join("history.db"));
        let first = History::open(&location, Durability::Full).unwrap();
        let second = History::open(&location, Durability::Full).unwrap();
        rt.block_on(async {
            for i in 0..3 {
                for history in [&first, &second] {
                    history
                        .append(vec![msg("#a", "bob", &format!("m{i}"))])
                        .await
                        .unwrap();
                }
            }
        });
        let seqs: Vec<i64> = first
            .read("#a", None, 10)
            .unwrap()
            .iter()
            .map(|m| m.seq)
            .collect();
        assert_eq!(seqs, [6, 5, 4, 3, 2, 1]);
        let stamps: Vec<_> = first
            .read("#a", None, 10)
            .unwrap()
            .iter()
            .map(|m| m.time)
            .collect();
        assert!(stamps.windows(2).all(|w| w[0] > w[1]), "{stamps:?}");
        first.close();
        second.close();
    }

    /// What a reader gets for each way of reading by position, as
    /// `(seq, nick, text, channel)`.
    fn pages(history: &History, key: &str) -> Vec<Vec<(i64, String, String, String)>> {
        let reads = [
            None,
            Some(Since::Seq(0)),
            Some(Since::Seq(3)),
            Some(Since::Seq(7)),
        ];
        reads
            .into_iter()
            .flat_map(|since| [1, 2, 5, 50].map(|limit| (since, limit)))
            .map(|(since, limit)| {
                let page = history.read(key, since, limit).unwrap();
                page.into_iter()
                    .map(|m| (m.seq, m.nick, m.text, m.channel))
                    .collect()
            })
            .collect()
    }

    #[test]
    fn reads_by_position_see_what_another_process_wrote_since() {
        let rt = runtime();
        let (dir, ours, theirs) = two_processes();
        let send = |history: &History, channel: &str, text: &str| {
            rt.block_on(history.append(vec![msg(channel, "bob", text)]))
                .unwrap();
        };
        send(&ours, "#General", "created with capitals");
        for i in 1..5 {
            send(&ours, "#general", &format!("ours {i}"));
        }
        // Read twice: the second read is served from memory.
        assert_eq!(pages(&ours, "#general"), pages(&ours, "#general"));
        for i in 5..9 {
            send(&theirs, "#general", &format!("theirs {i}"));
            send(&ours, "#GENERAL", &format!("ours {i}"));
            let fresh = History::open(
                &Location::File(dir.path().join("history.db")),
                Durability::Normal,
            )
            .unwrap();
            assert_eq!(
                pages(&ours, "#general"),
                pages(&fresh, "#general"),
                "after send {i}"
            );
            fresh.close();
        }
        // Ours alone now: the page read last goes on from memory.
        send(&ours, "#GENERAL", "ours last");
        let newest = ours.read("#general", None, 3).unwrap();
        let texts: Vec<&str> = newest.iter().map(|m| m.text.as_str()).collect();
        assert_eq!(texts, ["ours last", "ours 8", "theirs 8"]);
        assert!(newest.iter().all(|m| m.channel == "#General"));
        ours.close();
        theirs.close();
    }

    #[test]
    fn histories_opened_together_on_a_new_file_all_start() {
        for round in 0..5 {
            let dir = tempfile::tempdir().unwrap();
            let location = Location::File(dir.path().join("history.db"));
            let start = std::sync::Barrier::new(6);
            let opened: Vec<Result<History, HistoryError>> = std::thread::scope(|scope| {
                let threads: Vec<_> = (0..6)
                    .map(|_| {
                        scope.spawn(|| {
                            start.wait();
                            History::open(&location, Durability::Normal)
                        })
                    })
                    .collect();
                threads.into_iter().map(|t| t.join().unwrap()).collect()
            });
            for history in opened {
                let history = history.unwrap_or_else(|e| panic!("round {round}: {e}"));
                history.close();
            }
        }
    }

    /// Two histories on one new file, as two processes sharing a data
    /// directory have; the directory holds the file.
    fn two_processes() -> (tempfile::TempDir, History, History) {
        let dir = tempfile::tempdir().unwrap();
        let location = Location::File(dir.path().join("history.db"));
        let ours = History::open(&location, Durability::Normal).unwrap();
        let theirs = History::open(&location, Durability::Normal).unwrap();
        (dir, ours, theirs)
    }

    #[test]
    fn a_new_history_is_private_to_its_user() {
        use std::os::unix::fs::PermissionsExt;
        let rt = runtime();
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let history =
            History::open(&Location::File(data.join("history.db")), Durability::Normal).unwrap();
        rt.block_on(history.append(vec![msg("#a", "ann", "private")]))
            .unwrap();
        let mode = |name: &str| {
            std::fs::metadata(data.join(name))
                .unwrap()
                .permissions()
                .mode()
                & 0o777
        };
        assert_eq!(mode(""), 0o700);
        for file in ["history.db", "history.db-wal", "history.db-shm"] {
            assert_eq!(mode(file), 0o600, "{file}");
        }
        history.close();
    }

    #[test]
    fn after_a_clock_that_ran_ahead_new_messages_take_the_clocks_time() {
        let rt = runtime();
        let dir = tempfile::tempdir().unwrap();
        let location = Location::File(dir.path().join("history.db"));
        let history = History::open(&location, Durability::Normal).unwrap();
        rt.block_on(history.append(vec![msg("#a", "ann", "said a day ahead")]))
            .unwrap();
        history.close();
        let day = 86_400_000_000_i64;
        Connection::open(dir.path().join("history.db"))
            .unwrap()
            .execute("UPDATE messages SET ts = ts + ?1", [day])
            .unwrap();
        let history = History::open(&location, Durability::Normal).unwrap();
        let stored = rt
            .block_on(history.append(vec![msg("#a", "ann", "now"), msg("#a", "ann", "then")]))
            .unwrap();
        let now = Utc::now().timestamp_micros();
        for m in &stored {
            let ts = m.time.timestamp_micros();
            assert!((now - ts).abs() < 60_000_000, "{} at {}", m.text, m.time);
        }
        assert!(stored[0].time < stored[1].time);
        history.close();
    }

    #[test]
    fn a_line_heard_by_two_processes_is_stored_once_and_a_repeated_line_twice() {
        let rt = runtime();
        let (_dir, ours, theirs) = two_processes();
        let mut feed = ours.feed();
        let heard = |text: &str| NewMessage {
            origin: Origin::Heard,
            ..msg("#a", "bob", text)
        };
        let ids = |messages: &[Message]| messages.iter().map(|m| m.id).collect::<Vec<_>>();
        // Their observer joined first and heard "ok" once and "bye"; ours
        // heard "ok" said twice, then "bye". Each hears back what is stored.
        let their_ok = rt.block_on(theirs.append(vec![heard("ok")])).unwrap();
        let our_oks = rt
            .block_on(ours.append(vec![heard("ok"), heard("ok")]))
            .unwrap();
        assert_eq!(our_oks.len(), 2);
        assert_eq!(our_oks[0].id, their_ok[0].id, "the copy they stored");
        assert!(
            our_oks[1].id > their_ok[0].id,
            "the second ok is a line of its own"
        );
        let their_bye = rt.block_on(theirs.append(vec![heard("bye")])).unwrap();
        let our_bye = rt.block_on(ours.append(vec![heard("bye")])).unwrap();
        assert_eq!(ids(&our_bye), ids(&their_bye));
        let texts: Vec<String> = ours
            .read("#a", None, 10)
            .unwrap()
            .into_iter()
            .map(|m| m.text)
            .collect();
        assert_eq!(texts, ["bye", "ok", "ok"]);
        // What is said through a process is its own: never a copy.
        let here = rt
            .block_on(ours.append(vec![msg("#a", "bob", "bye")]))
            .unwrap();
        assert!(here[0].id > their_bye[0].id);
        // The feed tells each stored line once, copies included.
        let mut told = Vec::new();
        while let Ok(batch) = feed.try_recv() {
            told.extend(ids(&batch));
        }
        let mut stored = ids(&ours.read("#a", None, 10).unwrap());
        stored.reverse();
        assert_eq!(told, stored);
        ours.close();
        theirs.close();
    }

    #[test]
    fn a_nick_marked_as_an_agent_is_one_for_every_process_until_the_mark_lapses() {
        let rt = runtime();
        let (dir, ours, theirs) = two_processes();
        let a = NameRules::default().channel("#a").unwrap();
        let heard = |nick: &str, text: &str| {
            let kinds: Vec<SenderKind> = rt
                .block_on(theirs.append(vec![NewMessage {
                    origin: Origin::Heard,
                    kind: SenderKind::Human,
                    ..msg("#a", nick, text)
                }]))
                .unwrap()
                .iter()
                .map(|m| m.kind)
                .collect();
            kinds
        };
        rt.block_on(ours.mark_agent(&a, "Bot", "bot")).unwrap();
        assert_eq!(heard("bot", "one"), [SenderKind::Agent]);
        assert_eq!(heard("ann", "hi"), [SenderKind::Human]);
        // AGENT_MARK later, with no mark since: whoever holds the nick now
        // is a person.
        let conn = Connection::open(dir.path().join("history.db")).unwrap();
        conn.execute("UPDATE speakers SET agent_until = 0", [])
            .unwrap();
        assert_eq!(heard("bot", "two"), [SenderKind::Human]);
        rt.block_on(ours.mark_agent(&a, "Bot", "bot")).unwrap();
        assert_eq!(heard("bot", "three"), [SenderKind::Agent]);
        // The agent's connection has quit: the nick is free at once.
        rt.block_on(ours.unmark_agent("bot")).unwrap();
        assert_eq!(heard("bot", "four"), [SenderKind::Human]);
        ours.close();
        theirs.close();
    }

    /// Polls `probe` until it holds, for at most five seconds.
    fn within_seconds(what: &str, probe: impl Fn() -> bool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !probe() {
            assert!(std::time::Instant::now() < deadline, "{what}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn joins_leaves_and_reads_of_another_process_are_loaded() {
        let rt = runtime();
        let (_dir, ours, theirs) = two_processes();
        rt.block_on(ours.append(vec![msg("#a", "ann", "one"), msg("#a", "ann", "two")]))
            .unwrap();
        let id = ours.channel_row("#a").unwrap().unwrap().id;
        ours.mark("ann", id, None, Some(true)).unwrap();
        // Another process's agent joins without speaking: this one sees it
        // a member.
        theirs.mark("bob", id, Some(1), Some(true)).unwrap();
        within_seconds("bob's join never reached this process", || {
            ours.joined(id) == ["ann", "bob"]
        });
        assert_eq!(ours.cursor("bob", id).unwrap().unread, 1);
        // Its read moves the cursor here too, and its leave is a leave.
        theirs.mark("bob", id, Some(2), Some(false)).unwrap();
        within_seconds("bob's leave never reached this process", || {
            ours.joined(id) == ["ann"]
        });
        assert_eq!(ours.cursor("bob", id).unwrap().unread, 0);
        // A cursor this process moved further is not moved back, and its
        // own join stands.
        ours.mark("carl", id, Some(2), Some(true)).unwrap();
        theirs.mark("carl", id, Some(1), Some(true)).unwrap();
        theirs.mark("dora", id, None, Some(true)).unwrap();
        within_seconds("dora's join never reached this process", || {
            ours.joined(id).contains(&"dora".to_owned())
        });
        assert_eq!(ours.cursor("carl", id).unwrap().read_seq, 2);
        assert_eq!(ours.cursor("ann", id).map(|c| c.joined), Some(true));
        ours.close();
        theirs.close();
    }

    #[test]
    fn a_wait_is_woken_by_a_message_another_process_commits() {
        let rt = runtime();
        let (_dir, ours, theirs) = two_processes();
        rt.block_on(ours.append(vec![msg("#a", "ann", "before")]))
            .unwrap();
        let since = Since::Seq(ours.last_seq("#a").unwrap());
        let waiting = {
            let ours = ours.clone();
            rt.spawn(async move {
                ours.wait_newer("#a", since, 10, Duration::from_secs(20))
                    .await
            })
        };
        std::thread::sleep(Duration::from_millis(100));
        rt.block_on(theirs.append(vec![msg("#a", "bob", "from another process")]))
            .unwrap();
        let woken = rt.block_on(waiting).unwrap().unwrap();
        let texts: Vec<&str> = woken.iter().map(|m| m.text.as_str()).collect();
        assert_eq!(texts, ["from another process"]);
        ours.close();
        theirs.close();
    }

    #[test]
    fn a_commit_tells_first_what_other_processes_committed_before_it() {
        let rt = runtime();
        let (_dir, ours, theirs) = two_processes();
        // Without the thread, only our writer's commit tells theirs.
        let (stop, thread) = ours.shared.tail.lock().unwrap().take().unwrap();
        drop(stop);
        thread.join().unwrap();
        let mut feed = ours.feed();
        let burst: Vec<NewMessage> = (0..1200)
            .map(|i| msg("#a", "bob", &format!("theirs {i}")))
            .collect();
        rt.block_on(theirs.append(burst)).unwrap();
        rt.block_on(ours.append(vec![msg("#a", "ann", "ours")]))
            .unwrap();
        let mut told: Vec<Message> = Vec::new();
        while let Ok(batch) = feed.try_recv() {
            told.extend(batch.iter().cloned());
        }
        assert_eq!(told.len(), 1201);
        assert!(told.windows(2).all(|w| w[0].id + 1 == w[1].id));
        assert_eq!(told.last().unwrap().text, "ours");
        ours.close();
        theirs.close();
    }

    #[test]
    fn the_feed_tells_every_message_of_every_process_once_in_order() {
        let rt = runtime();
        let (dir, ours, theirs) = two_processes();
        let mut feed = ours.feed();
        let senders: Vec<_> = [&ours, &theirs]
            .into_iter()
            .enumerate()
            .map(|(who, history)| {
                let history = history.clone();
                rt.spawn(async move {
                    for i in 0..150 {
                        let channel = ["#a", "#b"][i % 2];
                        let text = format!("{who}/{i}");
                        history
                            .append(vec![msg(channel, "bob", &text)])
                            .await
                            .unwrap();
                    }
                })
            })
            .collect();
        for sender in senders {
            rt.block_on(sender).unwrap();
        }
        let mut told: Vec<i64> = Vec::new();
        rt.block_on(async {
            while told.len() < 300 {
                let batch = tokio::time::timeout(Duration::from_secs(10), feed.recv())
                    .await
                    .unwrap_or_else(|_| panic!("the feed stopped at {} of 300", told.len()))
                    .unwrap();
                told.extend(batch.iter().map(|m| m.id));
            }
        });
        let stored: Vec<i64> = Connection::open(dir.path().join("history.db"))
            .unwrap()
            .prepare("SELECT id FROM messages ORDER BY id")
            .unwrap()
            .query_map([], |row| row.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(told, stored);
        // The unread counts here include what the other process sent.
        let channel = ours.channel_row("#b").unwrap().unwrap().id;
        ours.mark("cat", channel, Some(0), Some(true)).unwrap();
        assert_eq!(ours.cursor("cat", channel).unwrap().unread, 150);
        ours.close();
        theirs.close();
    }

    /// The read position of `identity`'s cursor in the database file, as
    /// another process would find it.
    fn saved_cursor(path: &Path, identity: &str) -> Option<i64> {
        let conn = Connection::open(path).unwrap();
        conn.query_row(
            "SELECT read_seq FROM cursors WHERE identity = ?1",
            [identity],
            |row| row.get(0),
        )
        .optional()
        .unwrap()
    }

    #[test]
    fn reads_moving_a_cursor_write_it_once_when_idle_and_at_close() {
        let rt = runtime();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("history.db");
        let history = History::open(&Location::File(path.clone()), Durability::Full).unwrap();
        let messages: Vec<NewMessage> = (0..20)
            .map(|i| msg("#a", "bob", &format!("m{i}")))
            .collect();
        let stored = rt.block_on(history.append(messages)).unwrap();
        let channel = stored[0].channel_id;
        // Let the writer go idle (it indexes the messages) before reading.
        rt.block_on(history.search("m1".into(), None, 1)).unwrap();
        let commits = history.commits();
        for message in &stored {
            history
                .mark("ann", channel, Some(message.seq), Some(true))
                .unwrap();
            std::thread::sleep(Duration::from_millis(2));
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while saved_cursor(&path, "ann") != Some(20) {
            assert!(
                Instant::now() < deadline,
                "the cursor never reached the file"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(
            history.commits() - commits <= 2,
            "{} commits for 20 reads",
            history.commits() - commits
        );
        // Moved just before the process stops: saved on the way out.
        history.mark("ann", channel, Some(20), Some(false)).unwrap();
        history.mark("cat", channel, Some(7), Some(true)).unwrap();
        history.close();
        assert_eq!(saved_cursor(&path, "cat"), Some(7));
        let reopened = History::open(&Location::File(path), Durability::Full).unwrap();
        let ann = reopened.cursor("ann", channel).unwrap();
        assert_eq!((ann.read_seq, ann.joined), (20, false));
        reopened.close();
    }

    #[test]
    fn a_full_disk_names_the_data_directory() {
        let full = rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_FULL),
            None,
        );
        let text = HistoryError::Commit(commit_failure("/srv/sb/history.db", &full)).to_string();
        assert!(text.starts_with("the message was not stored: "), "{text}");
        assert!(text.contains("data directory /srv/sb is full"), "{text}");
        assert!(text.contains("recovers by itself"), "{text}");
        let other = rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CONSTRAINT),
            None,
        );
        let text = commit_failure("/srv/sb/history.db", &other);
        assert!(
            text.contains("/srv/sb/history.db failed to commit"),
            "{text}"
        );
    }
}
