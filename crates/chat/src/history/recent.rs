//! The newest messages of recently read channels, kept in memory so that
//! the commonest reads — a channel's newest page, and the next page of a
//! reader following it by position — do not decode rows.
//!
//! A stored message never changes and positions in a channel run 1, 2, 3…
//! without gaps, so any run of a channel's messages stays true for ever,
//! whichever process wrote them. What a run cannot know is whether newer
//! messages exist: a read first asks the database for the channel's newest
//! position and serves from here only when the run covers the whole page
//! up to it. The page is then the one SQLite would return.
//!
//! Runs are filled by reads that missed (from the rows they decoded) and
//! extended by the writer after each commit; a run that would no longer be
//! contiguous is left as it is until a read replaces it.

use std::{
    collections::{HashMap, VecDeque},
    sync::Mutex,
};

use super::Message;

/// Messages kept per channel: a page of up to [`RUN_MAX`] − 1 (a page is
/// read with one extra message, to tell whether more follow).
const RUN_MAX: usize = 256;
/// Bytes kept per channel (a message may be 32 KiB): older messages make
/// way for newer ones, and a page larger than this is not kept.
const RUN_BYTES: usize = 256 * 1024;
/// Channels kept; the least recently read is dropped for a new one. With
/// [`RUN_BYTES`], at most 4 MiB in all.
const CHANNELS_MAX: usize = 16;

#[derive(Default)]
pub(super) struct Recent(Mutex<Channels>);

#[derive(Default)]
struct Channels {
    runs: HashMap<i64, Run>,
    /// Ticks at every lookup, to find the least recently read run.
    clock: u64,
}

/// Consecutive messages of one channel, oldest first.
struct Run {
    messages: VecDeque<Message>,
    /// What the messages take, by [`size`].
    bytes: usize,
    used: u64,
}

/// About what `message` takes in memory.
fn size(message: &Message) -> usize {
    std::mem::size_of::<Message>()
        + message.channel.len()
        + message.nick.len()
        + message.text.len()
        + message.channel_key.len()
        + message.nick_key.len()
}

impl Run {
    fn push(&mut self, message: Message) {
        self.bytes += size(&message);
        self.messages.push_back(message);
        while self.messages.len() > RUN_MAX || self.bytes > RUN_BYTES {
            match self.messages.pop_front() {
                Some(old) => self.bytes -= size(&old),
                None => break,
            }
        }
    }

    fn first_seq(&self) -> i64 {
        self.messages.front().map_or(0, |m| m.seq)
    }

    fn last_seq(&self) -> i64 {
        self.messages.back().map_or(0, |m| m.seq)
    }
}

impl Recent {
    /// The messages of `channel_id` at positions `from..=to`, newest first,
    /// if the run holds all of them.
    pub(super) fn get(&self, channel_id: i64, from: i64, to: i64) -> Option<Vec<Message>> {
        let mut channels = self.0.lock().expect("recent lock");
        channels.clock += 1;
        let clock = channels.clock;
        let run = channels.runs.get_mut(&channel_id)?;
        if from > to || from < run.first_seq() || to > run.last_seq() {
            return None;
        }
        run.used = clock;
        let start = (from - run.first_seq()) as usize;
        let end = (to - run.first_seq()) as usize;
        Some(run.messages.range(start..=end).rev().cloned().collect())
    }

    /// Keeps `page` (one channel's messages, newest first, as a read
    /// returned them) when they are consecutive and the run held so far
    /// neither reaches newer messages nor already holds them all.
    pub(super) fn fill(&self, page: &[Message]) {
        let (Some(newest), Some(oldest)) = (page.first(), page.last()) else {
            return;
        };
        let consecutive = page.windows(2).all(|w| w[0].seq == w[1].seq + 1)
            && page.iter().all(|m| m.channel_id == newest.channel_id);
        let bytes: usize = page.iter().map(size).sum();
        if !consecutive || page.len() > RUN_MAX || bytes > RUN_BYTES {
            return;
        }
        let mut channels = self.0.lock().expect("recent lock");
        let clock = channels.clock;
        if let Some(run) = channels.runs.get(&newest.channel_id)
            && (run.last_seq() > newest.seq
                || run.last_seq() == newest.seq && run.first_seq() <= oldest.seq)
        {
            return;
        }
        if !channels.runs.contains_key(&newest.channel_id) && channels.runs.len() >= CHANNELS_MAX {
            let stalest = channels.runs.iter().min_by_key(|(_, run)| run.used);
            if let Some((&id, _)) = stalest {
                channels.runs.remove(&id);
            }
        }
        let run = Run {
            messages: page.iter().rev().cloned().collect(),
            bytes,
            used: clock,
        };
        channels.runs.insert(newest.channel_id, run);
    }

    /// Appends messages just committed (in commit order) to the runs they
    /// continue. A stored message carries the channel name its sender
    /// wrote; the run keeps the name the database has.
    pub(super) fn extend(&self, committed: &[Message]) {
        let mut channels = self.0.lock().expect("recent lock");
        for message in committed {
            let Some(run) = channels.runs.get_mut(&message.channel_id) else {
                continue;
            };
            if message.seq != run.last_seq() + 1 {
                continue;
            }
            let mut message = message.clone();
            if let Some(last) = run.messages.back() {
                message.channel.clone_from(&last.channel);
            }
            run.push(message);
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::Utc;

    use super::*;
    use crate::history::SenderKind;

    fn message(channel_id: i64, seq: i64, channel: &str) -> Message {
        Message {
            id: channel_id * 1000 + seq,
            channel: channel.into(),
            time: Utc::now(),
            nick: "ann".into(),
            text: format!("line {seq}"),
            kind: SenderKind::Agent,
            seq,
            channel_id,
            channel_key: channel.to_lowercase(),
            nick_key: "ann".into(),
            account: None,
        }
    }

    /// Newest first, as reads return them.
    fn page(channel_id: i64, seqs: std::ops::RangeInclusive<i64>) -> Vec<Message> {
        seqs.rev().map(|s| message(channel_id, s, "#A")).collect()
    }

    fn seqs(page: &[Message]) -> Vec<i64> {
        page.iter().map(|m| m.seq).collect()
    }

    #[test]
    fn serves_only_ranges_the_run_holds() {
        let recent = Recent::default();
        recent.fill(&page(1, 3..=7));
        assert_eq!(seqs(&recent.get(1, 5, 7).unwrap()), [7, 6, 5]);
        assert_eq!(seqs(&recent.get(1, 3, 3).unwrap()), [3]);
        assert!(recent.get(1, 2, 7).is_none());
        assert!(recent.get(1, 5, 8).is_none());
        assert!(recent.get(2, 5, 7).is_none());
        assert!(recent.get(1, 6, 5).is_none());
    }

    #[test]
    fn a_gap_or_another_channel_is_not_kept() {
        let recent = Recent::default();
        let mut gap = page(1, 1..=5);
        gap.remove(2);
        recent.fill(&gap);
        assert!(recent.get(1, 5, 5).is_none());
        let mut mixed = page(1, 1..=3);
        mixed[1].channel_id = 2;
        recent.fill(&mixed);
        assert!(recent.get(1, 3, 3).is_none());
    }

    #[test]
    fn commits_extend_a_run_only_where_it_ends() {
        let recent = Recent::default();
        recent.fill(&page(1, 1..=3));
        let mut next = message(1, 4, "#a");
        next.text = "four".into();
        recent.extend(&[next, message(1, 6, "#A")]);
        let got = recent.get(1, 1, 4).unwrap();
        assert_eq!(seqs(&got), [4, 3, 2, 1]);
        assert_eq!(got[0].text, "four");
        assert_eq!(got[0].channel, "#A", "the run keeps the stored name");
        assert!(recent.get(1, 6, 6).is_none());
    }

    #[test]
    fn a_run_keeps_its_newest_messages_and_older_fills_do_not_replace_it() {
        let recent = Recent::default();
        recent.fill(&page(1, 1..=RUN_MAX as i64));
        recent.extend(&[message(1, RUN_MAX as i64 + 1, "#A")]);
        assert!(recent.get(1, 1, 1).is_none());
        let newest = RUN_MAX as i64 + 1;
        assert_eq!(recent.get(1, 2, newest).unwrap().len(), RUN_MAX);
        recent.fill(&page(1, 1..=10));
        assert!(recent.get(1, newest, newest).is_some());
    }

    #[test]
    fn long_messages_keep_fewer_and_a_page_too_large_is_not_kept() {
        let recent = Recent::default();
        let long = |seq: i64| {
            let mut m = message(1, seq, "#A");
            m.text = "x".repeat(32 * 1024);
            m
        };
        recent.fill(&[long(1)]);
        recent.extend(&(2..=20).map(long).collect::<Vec<_>>());
        assert!(recent.get(1, 20, 20).is_some());
        assert!(recent.get(1, 1, 20).is_none());
        let kept = (1..=20).filter(|&s| recent.get(1, s, 20).is_some()).count();
        assert!((6..8).contains(&kept), "{kept} kept");
        let too_large: Vec<Message> = (1..=20).rev().map(long).collect();
        let other = Recent::default();
        other.fill(&too_large);
        assert!(other.get(1, 20, 20).is_none());
    }

    #[test]
    fn the_least_recently_read_channel_makes_room() {
        let recent = Recent::default();
        for id in 0..CHANNELS_MAX as i64 {
            recent.fill(&page(id, 1..=2));
        }
        for id in 1..CHANNELS_MAX as i64 {
            recent.get(id, 1, 2).unwrap();
        }
        recent.fill(&page(100, 1..=2));
        assert!(recent.get(0, 1, 2).is_none());
        assert!(recent.get(1, 1, 2).is_some());
        assert!(recent.get(100, 1, 2).is_some());
    }
}
