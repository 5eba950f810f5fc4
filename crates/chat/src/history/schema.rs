//! The database schema and its migrations, keyed by SQLite's `user_version`.
//!
//! A new database is created at the current version in one script
//! ([`CURRENT`]); an older one is migrated step by step. Each `ALTER TABLE`
//! makes SQLite re-read the whole schema, FTS table included, which measured
//! as the largest part of an `--ephemeral` start; a test holds the fresh and
//! the migrated schema equal.

use std::time::{Duration, Instant};

use rusqlite::Connection;

use super::{HistoryError, LOCK_WAIT};

/// The schema this build reads and writes.
pub(super) const VERSION: i64 = 2;

/// How `messages_fts` splits text into terms (as [`CURRENT`] declares it),
/// for any other index that must match the same way.
pub(super) const TOKENIZER: &str = "porter unicode61 remove_diacritics 2";

/// Adds `searchable(text)` to `conn`: what the indexes hold of a message's
/// text, which is that text without IRC formatting. The tokenizer reads a
/// colour code's digits as part of the word after it (`\x0304alice` as
/// `04alice`), so neither a search nor a mention scan would find `alice`.
pub(super) fn add_searchable(conn: &Connection) -> rusqlite::Result<()> {
    use rusqlite::functions::FunctionFlags;
    conn.create_scalar_function(
        "searchable",
        1,
        FunctionFlags::SQLITE_UTF8
            | FunctionFlags::SQLITE_DETERMINISTIC
            | FunctionFlags::SQLITE_INNOCUOUS,
        |ctx| {
            let text = ctx.get_raw(0).as_str().map_err(rusqlite::Error::from)?;
            Ok(crate::text::without_formatting(text).into_owned())
        },
    )
}

/// Brings the database at `path` (for messages) to [`VERSION`].
pub(super) fn migrate(conn: &Connection, path: &str, wal: bool) -> Result<(), HistoryError> {
    // Before WAL mode, which would change the file.
    refuse_foreign(conn, path)?;
    if wal {
        use_wal(conn)?;
    }
    // Under the write lock from reading the version on: processes started
    // together on a new file must not both create the schema.
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let result = upgrade(conn, path);
    conn.execute_batch(if result.is_ok() { "COMMIT" } else { "ROLLBACK" })?;
    result
}

/// Puts the database in WAL mode. While another process opening a new file
/// does the same, SQLite may answer "database is locked" at once, without
/// waiting for the lock: try again, for up to [`LOCK_WAIT`].
fn use_wal(conn: &Connection) -> rusqlite::Result<()> {
    let deadline = Instant::now() + LOCK_WAIT;
    loop {
        match conn.query_row("PRAGMA journal_mode = WAL", [], |_| Ok(())) {
            Err(e)
                if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy)
                    && Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(2));
            }
            result => return result,
        }
    }
}

/// Refuses a database that has tables but no schema version: another
/// program's, which switchboard must not add to.
fn refuse_foreign(conn: &Connection, path: &str) -> Result<(), HistoryError> {
    // One statement, one snapshot: another process may be creating the
    // schema meanwhile.
    let (version, tables): (i64, Option<String>) = conn.query_row(
        "SELECT (SELECT user_version FROM pragma_user_version),
                (SELECT group_concat(name, ', ') FROM (
                    SELECT name FROM sqlite_master
                     WHERE type = 'table' AND name NOT LIKE 'sqlite%' ORDER BY name))",
        [],
        |row| Ok((row.get(0)?, row.get(1)?)),
    )?;
    match tables {
        Some(tables) if version == 0 => Err(HistoryError::Foreign {
            path: path.to_owned(),
            tables,
        }),
        _ => Ok(()),
    }
}

fn upgrade(conn: &Connection, path: &str) -> Result<(), HistoryError> {
    let version: i64 = conn.query_row("PRAGMA user_version", [], |row| row.get(0))?;
    if version > VERSION {
        return Err(HistoryError::NewerSchema {
            path: path.to_owned(),
            found: version,
        });
    }
    if version == 0 {
        conn.execute_batch(CURRENT)?;
    } else if version < 2 {
        conn.execute_batch(V2)?;
    }
    conn.execute_batch(SEARCH_PROGRESS)?;
    conn.execute_batch(NOTICES)?;
    conn.execute_batch(CLAIMS)?;
    for column in &ADDED_COLUMNS {
        add_column(conn, column)?;
    }
    Ok(())
}

/// A column added to any database without changing its version, so older
/// builds keep opening it; [`CURRENT`] has each already.
struct AddedColumn {
    table: &'static str,
    column: &'static str,
    /// What adds it (and any index on it).
    sql: &'static str,
}

const ADDED_COLUMNS: [AddedColumn; 3] = [
    // Until when (µs) a nick counts as an agent's in the channel, whichever
    // process hears its lines (see `History::mark_agent`).
    AddedColumn {
        table: "speakers",
        column: "agent_until",
        sql: "ALTER TABLE speakers ADD COLUMN agent_until INTEGER NOT NULL DEFAULT 0;",
    },
    // The services account the network vouched a heard line's sender was
    // logged in as (IRCv3 `account-tag`), which approvals by account check.
    AddedColumn {
        table: "messages",
        column: "account",
        sql: "ALTER TABLE messages ADD COLUMN account TEXT;",
    },
    // The commit that last wrote a cursor, counted across every process
    // sharing the file, so that each can load the cursors (joins above all)
    // the others moved since it last looked (see `tail`).
    AddedColumn {
        table: "cursors",
        column: "changed",
        sql: "ALTER TABLE cursors ADD COLUMN changed INTEGER NOT NULL DEFAULT 0;
              CREATE INDEX cursors_changed ON cursors(changed);",
    },
];

fn add_column(conn: &Connection, added: &AddedColumn) -> rusqlite::Result<()> {
    let present: bool = conn.query_row(
        "SELECT count(*) FROM pragma_table_info(?1) WHERE name = ?2",
        [added.table, added.column],
        |row| row.get(0),
    )?;
    if !present {
        conn.execute_batch(added.sql)?;
    }
    Ok(())
}

/// switchboard's own notices (kind 3) by channel, nick and time: how a
/// process finds the notice another process sharing the file posted and
/// stored when its observer hears it (see `Origin::Heard`). Added to any
/// database without changing its version, so older builds keep opening it;
/// [`CURRENT`] has it already.
const NOTICES: &str = "CREATE INDEX IF NOT EXISTS messages_notices
    ON messages(channel_id, nick_key, ts) WHERE kind = 3;";

/// Which process sharing the file answers for what (see `claims`). Added
/// to any database without changing its version, so older builds keep
/// opening it.
const CLAIMS: &str = "CREATE TABLE IF NOT EXISTS claims (
    key TEXT PRIMARY KEY,
    owner INTEGER NOT NULL,
    until INTEGER NOT NULL,
    data TEXT
) WITHOUT ROWID;";

/// How far the search index is known to be complete: every message up to
/// `indexed_through` is in `messages_fts`; newer ones may or may not be (a
/// build before batched indexing, sharing the file, indexes each of its
/// messages as it stores it). Added to any database without changing its
/// version, so such builds keep opening it; a database they made starts
/// from their index, which holds every message up to its newest.
const SEARCH_PROGRESS: &str = "
CREATE TABLE IF NOT EXISTS search_progress (indexed_through INTEGER NOT NULL);
INSERT INTO search_progress (indexed_through)
    SELECT coalesce((SELECT max(id) FROM messages_fts_docsize), 0)
     WHERE NOT EXISTS (SELECT 1 FROM search_progress);";

/// A new database at [`VERSION`]: what [`V1`] then [`V2`] make of an empty
/// one, with the columns in the same order.
const CURRENT: &str = "
CREATE TABLE channels (
    id INTEGER PRIMARY KEY,
    key TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE TABLE messages (
    id INTEGER PRIMARY KEY,
    channel_id INTEGER NOT NULL REFERENCES channels(id),
    ts INTEGER NOT NULL,
    nick TEXT NOT NULL,
    text TEXT NOT NULL,
    msgid TEXT,
    seq INTEGER NOT NULL DEFAULT 0,
    nick_key TEXT NOT NULL DEFAULT '',
    kind INTEGER NOT NULL DEFAULT 0,
    account TEXT
);
CREATE INDEX messages_by_channel_time ON messages(channel_id, ts, id);
CREATE UNIQUE INDEX messages_by_msgid ON messages(channel_id, msgid)
    WHERE msgid IS NOT NULL;
CREATE UNIQUE INDEX messages_by_channel_seq ON messages(channel_id, seq);
CREATE INDEX messages_notices ON messages(channel_id, nick_key, ts) WHERE kind = 3;
CREATE TABLE speakers (
    channel_id INTEGER NOT NULL REFERENCES channels(id),
    key TEXT NOT NULL,
    nick TEXT NOT NULL,
    last_seen INTEGER NOT NULL,
    kind INTEGER NOT NULL DEFAULT 0,
    agent_until INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (channel_id, key)
) WITHOUT ROWID;
CREATE VIRTUAL TABLE messages_fts USING fts5(
    text, content = 'messages', content_rowid = 'id',
    tokenize = 'porter unicode61 remove_diacritics 2'
);
CREATE TABLE cursors (
    identity TEXT NOT NULL,
    channel_id INTEGER NOT NULL REFERENCES channels(id),
    read_seq INTEGER NOT NULL,
    joined INTEGER NOT NULL,
    changed INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (identity, channel_id)
) WITHOUT ROWID;
CREATE INDEX cursors_changed ON cursors(changed);
PRAGMA user_version = 2;";

/// Version 1 as earlier builds created it (channels, messages with their
/// FTS index, who spoke where): where the migration tests start.
#[cfg(test)]
const V1: &str = "
CREATE TABLE channels (
    id INTEGER PRIMARY KEY,
    key TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE TABLE messages (
    id INTEGER PRIMARY KEY,
    channel_id INTEGER NOT NULL REFERENCES channels(id),
    ts INTEGER NOT NULL,
    nick TEXT NOT NULL,
    text TEXT NOT NULL,
    msgid TEXT
);
CREATE INDEX messages_by_channel_time ON messages(channel_id, ts, id);
CREATE UNIQUE INDEX messages_by_msgid ON messages(channel_id, msgid)
    WHERE msgid IS NOT NULL;
CREATE TABLE speakers (
    channel_id INTEGER NOT NULL REFERENCES channels(id),
    key TEXT NOT NULL,
    nick TEXT NOT NULL,
    last_seen INTEGER NOT NULL,
    PRIMARY KEY (channel_id, key)
) WITHOUT ROWID;
CREATE VIRTUAL TABLE messages_fts USING fts5(
    text, content = 'messages', content_rowid = 'id',
    tokenize = 'porter unicode61 remove_diacritics 2'
);
PRAGMA user_version = 1;";

/// Insertion order per channel (`seq`), who sent each message (`nick_key`
/// folded as RFC 1459, `kind`: 0 unknown, 1 agent, 2 human, 3 system; a
/// speaker's kind is that of its last message), and read cursors per
/// identity and channel. Messages stored before version 2 get their
/// channel's insertion order from their ids and kind 0.
const V2: &str = r"
ALTER TABLE messages ADD COLUMN seq INTEGER NOT NULL DEFAULT 0;
ALTER TABLE messages ADD COLUMN nick_key TEXT NOT NULL DEFAULT '';
ALTER TABLE messages ADD COLUMN kind INTEGER NOT NULL DEFAULT 0;
ALTER TABLE speakers ADD COLUMN kind INTEGER NOT NULL DEFAULT 0;
UPDATE messages SET seq = numbered.n
  FROM (SELECT id, row_number() OVER (PARTITION BY channel_id ORDER BY id) AS n FROM messages)
    AS numbered
 WHERE messages.id = numbered.id;
UPDATE messages SET nick_key =
    replace(replace(replace(replace(lower(nick), '[', '{'), ']', '}'), '\', '|'), '~', '^');
CREATE UNIQUE INDEX messages_by_channel_seq ON messages(channel_id, seq);
CREATE TABLE cursors (
    identity TEXT NOT NULL,
    channel_id INTEGER NOT NULL REFERENCES channels(id),
    read_seq INTEGER NOT NULL,
    joined INTEGER NOT NULL,
    PRIMARY KEY (identity, channel_id)
) WITHOUT ROWID;
PRAGMA user_version = 2;";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_declared_tokenizer_is_the_one_the_index_uses() {
        assert!(CURRENT.contains(&format!("tokenize = '{TOKENIZER}'")));
    }

    #[test]
    fn a_version_1_database_gets_insertion_order_and_nick_keys() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(V1).unwrap();
        conn.execute_batch(
            "INSERT INTO channels VALUES (1, '#a', '#a', 0), (2, '#b', '#b', 0);
             INSERT INTO messages (id, channel_id, ts, nick, text) VALUES
                 (1, 1, 10, 'Bob[x]', 'one'), (2, 2, 11, 'eve', 'two'), (3, 1, 5, 'bob', 'three');",
        )
        .unwrap();
        migrate(&conn, ":memory:", false).unwrap();
        let rows: Vec<(i64, i64, String, i64)> = conn
            .prepare("SELECT id, seq, nick_key, kind FROM messages ORDER BY id")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(
            rows,
            [
                (1, 1, "bob{x}".into(), 0),
                (2, 1, "eve".into(), 0),
                (3, 2, "bob".into(), 0)
            ]
        );
        let version: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(version, VERSION);
    }

    /// Every table's columns (name, type, not null, default, key) and every
    /// index's columns, uniqueness and condition, in a comparable form.
    fn shape(conn: &Connection) -> Vec<String> {
        let mut out = Vec::new();
        let objects: Vec<(String, String, String, Option<String>)> = conn
            .prepare("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        for (kind, name, table, sql) in objects {
            match kind.as_str() {
                "table" => {
                    let columns: Vec<String> = conn
                        .prepare(&format!("PRAGMA table_xinfo(\"{name}\")"))
                        .unwrap()
                        .query_map([], |r| {
                            Ok(format!(
                                "{}:{}:{}:{:?}:{}",
                                r.get::<_, String>(1)?,
                                r.get::<_, String>(2)?,
                                r.get::<_, i64>(3)?,
                                r.get::<_, Option<String>>(4)?,
                                r.get::<_, i64>(5)?
                            ))
                        })
                        .unwrap()
                        .collect::<Result<_, _>>()
                        .unwrap();
                    out.push(format!("table {name}: {}", columns.join(", ")));
                }
                "index" => {
                    let columns: Vec<String> = conn
                        .prepare(&format!("PRAGMA index_info(\"{name}\")"))
                        .unwrap()
                        .query_map([], |r| r.get::<_, Option<String>>(2))
                        .unwrap()
                        .map(|c| format!("{:?}", c.unwrap()))
                        .collect();
                    // The condition of a partial index is only in its SQL.
                    let condition = sql
                        .as_deref()
                        .and_then(|s| s.split_once(" WHERE "))
                        .map(|(_, c)| c.split_whitespace().collect::<Vec<_>>().join(" "));
                    let unique: bool = conn
                        .query_row(
                            "SELECT \"unique\" FROM pragma_index_list(?1) WHERE name = ?2",
                            [&table, &name],
                            |r| r.get(0),
                        )
                        .unwrap();
                    out.push(format!(
                        "index {name} on {table} ({}) unique={unique} where={condition:?}",
                        columns.join(", ")
                    ));
                }
                _ => out.push(format!("{kind} {name} on {table}")),
            }
        }
        out
    }

    #[test]
    fn a_new_database_has_the_schema_an_old_one_is_migrated_to() {
        let fresh = Connection::open_in_memory().unwrap();
        migrate(&fresh, ":memory:", false).unwrap();
        let old = Connection::open_in_memory().unwrap();
        old.execute_batch(V1).unwrap();
        migrate(&old, ":memory:", false).unwrap();
        let (fresh, old) = (shape(&fresh), shape(&old));
        assert!(
            fresh.iter().any(|t| t.starts_with("table messages: ")),
            "{fresh:#?}"
        );
        assert!(
            fresh
                .iter()
                .any(|t| t.starts_with("index messages_by_channel_seq ")),
            "{fresh:#?}"
        );
        assert_eq!(fresh, old);
    }

    #[test]
    fn a_newer_database_is_refused() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch("PRAGMA user_version = 99").unwrap();
        let err = migrate(&conn, "x.db", false).unwrap_err();
        assert!(err.to_string().contains("schema version 99"), "{err}");
    }
}
