//! Read cursors: per identity and channel, the insertion position (`seq`)
//! read up to, and whether the identity has joined the channel.
//!
//! The table in memory is the truth while the process runs; the writer thread
//! writes changes to the `cursors` table with its next commit (or when idle,
//! and at shutdown), without making the reader wait for the commit.
//! Alongside each cursor it keeps the positions
//! of the identity's own messages after it, so that an unread count — the
//! channel's newest position minus the cursor minus one's own messages — is
//! arithmetic, not a scan.
//!
//! The own-message lists are exact: the writer adds to them (under the same
//! lock) after every commit, and a cursor created later fills its list from
//! a database read made after the cursor exists, so every message is seen by
//! one or the other (or both, and kept once).

use std::{collections::HashMap, sync::Mutex};

use super::{Message, SenderKind};

/// One identity's position in one channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CursorView {
    /// The channel's database id.
    pub channel_id: i64,
    /// Everything at or before this position has been read.
    pub read_seq: i64,
    pub joined: bool,
    /// Messages after the cursor, not counting the identity's own.
    pub unread: i64,
}

/// What [`Cursors::update`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Change {
    None,
    Moved,
    /// A new cursor: its own-message list must be filled
    /// ([`Cursors::add_own`]).
    Created,
}

#[derive(Default)]
pub(super) struct Cursors {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Each channel's newest position, by channel id.
    last_seq: HashMap<i64, i64>,
    /// By identity key (the folded nick), then channel id.
    identities: HashMap<String, HashMap<i64, Cursor>>,
}

struct Cursor {
    read_seq: i64,
    joined: bool,
    /// Positions of the identity's own messages after `read_seq`, ascending.
    own: Vec<i64>,
}

impl Cursors {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("cursors lock")
    }

    /// Records each channel's newest position (at start-up).
    pub(super) fn set_last_seqs(&self, seqs: impl IntoIterator<Item = (i64, i64)>) {
        self.state().last_seq.extend(seqs);
    }

    /// Called by the writer after a commit, before anyone is told of it.
    pub(super) fn committed(&self, messages: &[Message]) {
        let mut state = self.state();
        for m in messages {
            let last = state.last_seq.entry(m.channel_id).or_default();
            *last = (*last).max(m.seq);
            if m.kind == SenderKind::System {
                continue;
            }
            if let Some(cursor) = state
                .identities
                .get_mut(&m.nick_key)
                .and_then(|channels| channels.get_mut(&m.channel_id))
                && m.seq > cursor.read_seq
                && cursor.own.last().is_none_or(|&s| s < m.seq)
            {
                cursor.own.push(m.seq);
            }
        }
    }

    /// The cursor, if the identity has one in the channel.
    pub(super) fn get(&self, identity: &str, channel_id: i64) -> Option<CursorView> {
        let state = self.state();
        let cursor = state.identities.get(identity)?.get(&channel_id)?;
        Some(state.view(channel_id, cursor))
    }

    /// Every cursor of the identity.
    pub(super) fn all(&self, identity: &str) -> Vec<CursorView> {
        let state = self.state();
        state
            .identities
            .get(identity)
            .map_or_else(Vec::new, |channels| {
                channels
                    .iter()
                    .map(|(&id, cursor)| state.view(id, cursor))
                    .collect()
            })
    }

    /// Identities that have joined the channel.
    pub(super) fn joined(&self, channel_id: i64) -> Vec<String> {
        let state = self.state();
        let mut names: Vec<String> = state
            .identities
            .iter()
            .filter(|(_, channels)| channels.get(&channel_id).is_some_and(|c| c.joined))
            .map(|(identity, _)| identity.clone())
            .collect();
        names.sort_unstable();
        names
    }

    /// Creates or moves a cursor. `read` moves it forward (never back); a
    /// new cursor starts at `read`, else at the channel's newest position.
    /// `joined`, when given, replaces the flag. Returns the new state and
    /// what happened.
    pub(super) fn update(
        &self,
        identity: &str,
        channel_id: i64,
        read: Option<i64>,
        joined: Option<bool>,
    ) -> (CursorView, Change) {
        let mut state = self.state();
        let start = read.unwrap_or_else(|| state.last_seq.get(&channel_id).copied().unwrap_or(0));
        let channels = state.identities.entry(identity.to_owned()).or_default();
        let mut change = Change::None;
        let cursor = channels.entry(channel_id).or_insert_with(|| {
            change = Change::Created;
            Cursor {
                read_seq: start,
                joined: false,
                own: Vec::new(),
            }
        });
        if let Some(read) = read
            && read > cursor.read_seq
        {
            cursor.read_seq = read;
            cursor.own.retain(|&s| s > read);
            change = change.max(Change::Moved);
        }
        if let Some(joined) = joined
            && joined != cursor.joined
        {
            cursor.joined = joined;
            change = change.max(Change::Moved);
        }
        let cursor = &state.identities[identity][&channel_id];
        (state.view(channel_id, cursor), change)
    }

    /// Adds own-message positions read from the database for a new cursor.
    pub(super) fn add_own(&self, identity: &str, channel_id: i64, seqs: &[i64]) {
        let mut state = self.state();
        if let Some(cursor) = state
            .identities
            .get_mut(identity)
            .and_then(|channels| channels.get_mut(&channel_id))
        {
            cursor
                .own
                .extend(seqs.iter().filter(|&&s| s > cursor.read_seq));
            cursor.own.sort_unstable();
            cursor.own.dedup();
        }
    }
}

impl State {
    fn view(&self, channel_id: i64, cursor: &Cursor) -> CursorView {
        let last = self.last_seq.get(&channel_id).copied().unwrap_or(0);
        let unread = (last - cursor.read_seq - cursor.own.len() as i64).max(0);
        CursorView {
            channel_id,
            read_seq: cursor.read_seq,
            joined: cursor.joined,
            unread,
        }
    }
}
