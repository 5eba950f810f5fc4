//! An identity's inbox: what it has not read in the channels it joined, and
//! every message anywhere that mentions it.
//!
//! Unread means "after the identity's cursor" (see
//! [`History::mark`]), in insertion order, never counting its own messages
//! or switchboard's notices. A mention is the nick as a whole word
//! (`alice:`, `alice,`, `@alice`, `hi alice`), compared case-folded with the
//! network's CASEMAPPING; a longer nick (`alice-2`) is not a mention of
//! `alice`. Mentions are found through the full-text index (each identity's
//! scan remembers how far it got, so each look only reads what is new) and
//! then checked exactly here.

use std::{
    collections::{HashMap, HashSet},
    sync::Mutex,
};

use crate::{
    history::{History, HistoryError, Message, SenderKind},
    names::{CaseMapping, Nick},
    text::without_formatting,
};

/// Mentions fetched from the index per look; the rest wait for the next.
const SCAN_PAGE: usize = 1000;
/// Unread mentions kept per identity (the newest ones).
const MAX_KEPT: usize = 1000;

/// A message in an inbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Item {
    pub message: Message,
    /// It names the identity (it may also be in a joined channel).
    pub mention: bool,
}

/// Per channel, what an identity has not seen.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    /// Messages after the identity's cursor (for a channel it has read or
    /// joined; they are in its inbox only when joined).
    pub unread: i64,
    /// Unread messages that mention the identity (any channel).
    pub mentions: i64,
    pub joined: bool,
}

/// Inboxes over one history.
pub(crate) struct Inbox {
    history: History,
    scans: Mutex<HashMap<String, Scan>>,
}

/// How far the index has been searched for one identity's mentions, and the
/// unread mentions found so far.
#[derive(Default)]
struct Scan {
    scanned_to: i64,
    found: Vec<Message>,
}

impl Inbox {
    pub(crate) fn new(history: History) -> Self {
        Self {
            history,
            scans: Mutex::default(),
        }
    }

    /// Up to `limit` inbox items of `me` that `allow` lets through, oldest
    /// first (by insertion); they stay unread until [`Inbox::mark_read`].
    pub(crate) fn peek(
        &self,
        me: &Nick,
        map: CaseMapping,
        limit: usize,
        allow: &dyn Fn(&Message) -> bool,
    ) -> Result<Vec<Item>, HistoryError> {
        let mut items: Vec<Item> = Vec::new();
        for cursor in self.history.cursors(me.key()) {
            if !cursor.joined || cursor.unread == 0 {
                continue;
            }
            for message in
                self.history
                    .read_after(cursor.channel_id, cursor.read_seq, me.key(), limit)?
            {
                if message.kind == SenderKind::System {
                    items.push(Item {
                        message,
                        mention: false,
                    });
                    continue;
                }
                let mention = mentions(&message.text, me.key(), map);
                items.push(Item { message, mention });
            }
        }
        let seen: HashSet<i64> = items.iter().map(|i| i.message.id).collect();
        for message in self.unread_mentions(me, map)? {
            if !seen.contains(&message.id) {
                items.push(Item {
                    message,
                    mention: true,
                });
            }
        }
        items.retain(|i| allow(&i.message));
        items.sort_by_key(|i| i.message.id);
        items.truncate(limit);
        Ok(items)
    }

    /// Marks `items` read: each channel's cursor moves to its newest item.
    pub(crate) fn mark_read(&self, me: &Nick, items: &[Item]) -> Result<(), HistoryError> {
        let mut newest: HashMap<i64, i64> = HashMap::new();
        for item in items {
            let seq = newest.entry(item.message.channel_id).or_default();
            *seq = (*seq).max(item.message.seq);
        }
        for (channel_id, seq) in newest {
            self.history.mark(me.key(), channel_id, Some(seq), None)?;
        }
        Ok(())
    }

    /// Puts `me` in the channel. A new cursor starts at the channel's newest
    /// message, or just before `me`'s oldest unread mention there, so that
    /// joining never marks a mention read.
    pub(crate) fn join(
        &self,
        me: &Nick,
        map: CaseMapping,
        channel_id: i64,
    ) -> Result<(), HistoryError> {
        let start = match self.history.cursor(me.key(), channel_id) {
            Some(_) => None,
            // The newest in the file, not as this process last heard of it:
            // another process's message committed just before is not unread.
            None => Some(
                self.unread_mentions(me, map)?
                    .iter()
                    .filter(|m| m.channel_id == channel_id)
                    .map(|m| m.seq - 1)
                    .min()
                    .map_or_else(|| self.history.newest_seq(channel_id), Ok)?,
            ),
        };
        self.history.mark(me.key(), channel_id, start, Some(true))?;
        Ok(())
    }

    /// Unread and mention counts of `me`, by channel id.
    pub(crate) fn counts(
        &self,
        me: &Nick,
        map: CaseMapping,
    ) -> Result<HashMap<i64, Counts>, HistoryError> {
        let mut counts: HashMap<i64, Counts> = HashMap::new();
        for cursor in self.history.cursors(me.key()) {
            let entry = counts.entry(cursor.channel_id).or_default();
            entry.joined = cursor.joined;
            entry.unread = cursor.unread;
        }
        for message in self.unread_mentions(me, map)? {
            counts.entry(message.channel_id).or_default().mentions += 1;
        }
        Ok(counts)
    }

    /// Whether a new message belongs in `me`'s inbox.
    pub(crate) fn concerns(&self, me: &Nick, map: CaseMapping, message: &Message) -> bool {
        self.concerns_folded(me, message, &for_mentions(&message.text, map))
    }

    /// [`Inbox::concerns`], with the message's text made ready by
    /// [`for_mentions`] by the caller (once for many identities).
    pub(crate) fn concerns_folded(&self, me: &Nick, message: &Message, folded: &str) -> bool {
        if message.nick_key == me.key() || !self.is_unread(me, message) {
            return false;
        }
        let joined = self
            .history
            .cursor(me.key(), message.channel_id)
            .is_some_and(|c| c.joined);
        joined || (message.kind != SenderKind::System && names_in(folded, me.key()))
    }

    /// Whether `me` has not read `message` yet: its cursor in the channel,
    /// if it has one, is before it.
    pub(crate) fn is_unread(&self, me: &Nick, message: &Message) -> bool {
        self.history
            .cursor(me.key(), message.channel_id)
            .is_none_or(|c| message.seq > c.read_seq)
    }

    /// `me`'s unread mentions, oldest first: the scan brought up to date,
    /// then pruned of what the cursors have passed.
    fn unread_mentions(&self, me: &Nick, map: CaseMapping) -> Result<Vec<Message>, HistoryError> {
        let Some(query) = fts_phrase(me.key()) else {
            return Ok(Vec::new());
        };
        let scanned_to = self.scans().get(me.key()).map_or(0, |s| s.scanned_to);
        let newest = self.history.newest_id()?;
        let mut fresh = Vec::new();
        let mut reached = scanned_to;
        if newest > scanned_to {
            let page = self
                .history
                .candidates(&query, scanned_to, newest, SCAN_PAGE)?;
            reached = if page.len() == SCAN_PAGE {
                page.last().map_or(newest, |m| m.id)
            } else {
                newest
            };
            fresh = page
                .into_iter()
                .filter(|m| {
                    m.kind != SenderKind::System
                        && m.nick_key != me.key()
                        && mentions(&m.text, me.key(), map)
                })
                .collect();
        }
        let mut scans = self.scans();
        let scan = scans.entry(me.key().to_owned()).or_default();
        if reached > scan.scanned_to {
            // Another look may have got here first: keep each message once.
            let known: HashSet<i64> = scan.found.iter().map(|m| m.id).collect();
            scan.found
                .extend(fresh.into_iter().filter(|m| !known.contains(&m.id)));
            scan.scanned_to = reached;
        }
        scan.found.retain(|m| {
            self.history
                .cursor(me.key(), m.channel_id)
                .is_none_or(|c| m.seq > c.read_seq)
        });
        if scan.found.len() > MAX_KEPT {
            let excess = scan.found.len() - MAX_KEPT;
            scan.found.drain(..excess);
        }
        Ok(scan.found.clone())
    }

    fn scans(&self) -> std::sync::MutexGuard<'_, HashMap<String, Scan>> {
        self.scans.lock().expect("mention scans lock")
    }
}

/// Characters that can be part of a nick; anything else ends a word.
fn nick_char(c: char) -> bool {
    c.is_alphanumeric() || "-_[]{}\\|^`".contains(c)
}

/// Whether `text` names `nick_key` (a folded nick) as a whole word
/// (`alice: look`, `@ALICE please`; not `malice`, `alice-2`, `[alice]`).
pub(crate) fn mentions(text: &str, nick_key: &str, map: CaseMapping) -> bool {
    names_in(&for_mentions(text, map), nick_key)
}

/// `text` as [`names_in`] reads it: without IRC formatting (a nick in
/// colour, `\x0304alice`, is still named), case-folded.
pub(crate) fn for_mentions(text: &str, map: CaseMapping) -> String {
    map.fold(&without_formatting(text))
}

/// [`mentions`] on a text made ready by [`for_mentions`].
pub(crate) fn names_in(folded: &str, nick_key: &str) -> bool {
    if nick_key.is_empty() {
        return false;
    }
    let mut from = 0;
    while let Some(at) = folded[from..].find(nick_key) {
        let start = from + at;
        let end = start + nick_key.len();
        let before = folded[..start].chars().next_back();
        let after = folded[end..].chars().next();
        if !before.is_some_and(nick_char) && !after.is_some_and(nick_char) {
            return true;
        }
        from = start + folded[start..].chars().next().map_or(1, char::len_utf8);
    }
    false
}

/// An FTS5 phrase that every text mentioning `nick_key` matches: its
/// letters-and-digits runs, in order. `None` for a nick without any (such
/// nicks cannot be found through the index).
fn fts_phrase(nick_key: &str) -> Option<String> {
    let words: Vec<&str> = nick_key
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect();
    (!words.is_empty()).then(|| format!("\"{}\"", words.join(" ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mention_is_the_nick_as_a_whole_word() {
        let map = CaseMapping::Rfc1459;
        for text in [
            "alice: look",
            "ok, Alice",
            "@ALICE please",
            "thanks alice.",
            "(alice)",
        ] {
            assert!(mentions(text, "alice", map), "{text}");
        }
        for text in ["alicebob", "alice-2: hi", "malice", "al ice", "[alice]"] {
            assert!(!mentions(text, "alice", map), "{text}");
        }
        assert!(mentions("ping Bob[1]", "bob{1}", map));
    }
    use crate::{
        history::{Durability, Location, NewMessage, Origin, tests::msg as line},
        names::NameRules,
    };

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn replayed_lines_with_older_times_still_count_as_unread() {
        let rt = runtime();
        let history = History::open(&Location::Memory, Durability::Full).unwrap();
        let inbox = Inbox::new(history.clone());
        let map = CaseMapping::Rfc1459;
        let bob = NameRules::default().nick("Bob").unwrap();
        let live = rt
            .block_on(history.append(vec![line("#c", "ann", "live one")]))
            .unwrap();
        inbox.join(&bob, map, live[0].channel_id).unwrap();
        assert!(inbox.peek(&bob, map, 10, &|_| true).unwrap().is_empty());
        // A server replays a line from an hour ago after the live one.
        let replayed = NewMessage {
            time: Some(live[0].time - chrono::Duration::hours(1)),
            origin: Origin::Replayed,
            ..line("#c", "eve", "said while you were away")
        };
        rt.block_on(history.append(vec![replayed])).unwrap();
        let items = inbox.peek(&bob, map, 10, &|_| true).unwrap();
        assert_eq!(items.len(), 1);
        assert_eq!(items[0].message.text, "said while you were away");
        let counts = inbox.counts(&bob, map).unwrap();
        assert_eq!(counts[&live[0].channel_id].unread, 1);
        inbox.mark_read(&bob, &items).unwrap();
        assert!(inbox.peek(&bob, map, 10, &|_| true).unwrap().is_empty());
        assert_eq!(
            inbox.counts(&bob, map).unwrap()[&live[0].channel_id].unread,
            0
        );
        history.close();
    }

    #[test]
    fn mentions_anywhere_are_found_once_and_own_lines_never_count() {
        let rt = runtime();
        let history = History::open(&Location::Memory, Durability::Full).unwrap();
        let inbox = Inbox::new(history.clone());
        let map = CaseMapping::Rfc1459;
        let bob = NameRules::default().nick("bob[1]").unwrap();
        rt.block_on(history.append(vec![
            line("#a", "ann", "hey BOB{1}, look"),
            line("#b", "eve", "bob[1]: and here"),
            line("#b", "eve", "bob[12] is someone else"),
            line("#b", "bob[1]", "bob[1] talking about himself"),
            line("#c", "ann", "nothing for you"),
        ]))
        .unwrap();
        let items = inbox.peek(&bob, map, 10, &|_| true).unwrap();
        let texts: Vec<&str> = items.iter().map(|i| i.message.text.as_str()).collect();
        assert_eq!(texts, ["hey BOB{1}, look", "bob[1]: and here"]);
        assert!(items.iter().all(|i| i.mention));
        // Looking again finds the same, without scanning twice.
        assert_eq!(inbox.peek(&bob, map, 10, &|_| true).unwrap(), items);
        let counts = inbox.counts(&bob, map).unwrap();
        assert_eq!(counts.values().map(|c| c.mentions).sum::<i64>(), 2);
        inbox.mark_read(&bob, &items[..1]).unwrap();
        let left = inbox.peek(&bob, map, 10, &|_| true).unwrap();
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].message.text, "bob[1]: and here");
        history.close();
    }

    #[test]
    fn phrases_keep_only_word_characters() {
        assert_eq!(fts_phrase("reviewer-2").as_deref(), Some("\"reviewer 2\""));
        assert_eq!(fts_phrase("{bot}").as_deref(), Some("\"bot\""));
        assert_eq!(fts_phrase("^^"), None);
    }

    #[test]
    fn a_mention_after_a_longer_nick_is_still_found() {
        let map = CaseMapping::Rfc1459;
        assert!(mentions("alice-2 and alice", "alice", map));
        assert!(!mentions("", "alice", map));
        assert!(mentions("ünïcode alice", "alice", map));
        assert!(mentions("\u{3}04,01alice\u{f}: look", "alice", map));
        assert!(mentions("\u{2}@Alice\u{2} please", "alice", map));
        assert!(!mentions("\u{3}04malice", "alice", map));
    }
}
