//! Filling the history's gap from the server's own history, when the server
//! offers IRCv3 `draft/chathistory`.
//!
//! While the observer is away (an outage, or switchboard not running), the
//! channels go on without it. When it joins a channel again, [`Backfill`]
//! asks for everything after the last message the history holds —
//! `CHATHISTORY AFTER #chan timestamp=… <limit>` — and pages on with the
//! last message's `msgid` while the server returns full pages. The replies
//! arrive as `chathistory` batches of ordinary PRIVMSGs with their original
//! `time` and `msgid` tags; the observer records them like live messages,
//! and the history drops the ones it already has.
//!
//! This is a pure state machine: it turns what the server says into the
//! next command to send, and knows nothing of connections or storage.

use std::collections::HashMap;

use chrono::{DateTime, SecondsFormat, TimeDelta, Utc};
use irc_proto::{Command, Message};

use super::wire;
use crate::names::{CaseMapping, Channel};

/// Pages requested per channel and join at most: with the usual limit of
/// 100 a page, a gap of up to 5,000 messages a channel is filled.
pub(crate) const MAX_PAGES: usize = 50;

/// History batches open at once, at most. A server needs a handful; one that
/// opens batches and never closes them must not grow memory without bound.
const MAX_OPEN_BATCHES: usize = 64;

/// Backfill requests in flight and the server's open history batches.
#[derive(Debug, Default)]
pub(crate) struct Backfill {
    /// Requests in flight, by channel key.
    requests: HashMap<String, Request>,
    /// Open `chathistory` batches (ours, and replays the server sends on its
    /// own on join): batch id → channel key.
    batches: HashMap<String, String>,
}

#[derive(Debug)]
struct Request {
    channel: Channel,
    limit: usize,
    pages: usize,
    /// Messages in the page being received.
    in_page: usize,
    stored: usize,
    /// Where the next page starts: the last message received.
    last: Option<Anchor>,
}

#[derive(Debug, Clone)]
enum Anchor {
    Msgid(String),
    Time(DateTime<Utc>),
}

impl Anchor {
    fn param(&self) -> String {
        match self {
            Anchor::Msgid(id) => format!("msgid={id}"),
            Anchor::Time(t) => format!(
                "timestamp={}",
                t.to_rfc3339_opts(SecondsFormat::Millis, true)
            ),
        }
    }
}

impl Backfill {
    /// Forgets everything: the connection that carried it is gone.
    pub(crate) fn clear(&mut self) {
        self.requests.clear();
        self.batches.clear();
    }

    /// The command asking for `channel`'s messages after `last_stored`, up
    /// to `limit` a page; `None` if the command cannot be formed.
    ///
    /// The request starts a millisecond before `last_stored`: `server-time`
    /// has millisecond precision and `AFTER` excludes its bound, so messages
    /// sharing the last stored one's millisecond are asked for again rather
    /// than lost (the history drops the copies).
    pub(crate) fn start(
        &mut self,
        channel: &Channel,
        last_stored: DateTime<Utc>,
        limit: usize,
    ) -> Option<wire::WireLine> {
        let from = Anchor::Time(last_stored - TimeDelta::milliseconds(1));
        let line = request_line(channel, &from, limit)?;
        self.requests.insert(
            channel.key().to_owned(),
            Request {
                channel: channel.clone(),
                limit,
                pages: 1,
                in_page: 0,
                stored: 0,
                last: None,
            },
        );
        Some(line)
    }

    /// True when `message` belongs to a `chathistory` batch: the server is
    /// replaying it, so it may be one the history already holds.
    pub(crate) fn is_replay(&self, message: &Message) -> bool {
        wire::tag(message, "batch").is_some_and(|id| self.batches.contains_key(id))
    }

    /// Follows what the server says; returns the command for the next page
    /// when a full page has just ended.
    pub(crate) fn on_message(
        &mut self,
        message: &Message,
        map: CaseMapping,
    ) -> Option<wire::WireLine> {
        match &message.command {
            Command::BATCH(reference, kind, params) => {
                if let Some(id) = reference.strip_prefix('+') {
                    let is_history = kind
                        .as_ref()
                        .is_some_and(|k| k.to_str().eq_ignore_ascii_case("chathistory"));
                    if let (true, Some(target)) =
                        (is_history, params.as_ref().and_then(|p| p.first()))
                    {
                        if self.batches.len() >= MAX_OPEN_BATCHES {
                            tracing::warn!(
                                "the IRC server left too many history batches open; forgetting them"
                            );
                            self.batches.clear();
                        }
                        self.batches.insert(id.to_owned(), map.fold(target));
                    }
                    None
                } else {
                    let id = reference.strip_prefix('-')?;
                    let key = self.batches.remove(id)?;
                    self.page_done(&key)
                }
            }
            Command::PRIVMSG(..) | Command::NOTICE(..) => {
                let key = self.batches.get(wire::tag(message, "batch")?)?;
                let request = self.requests.get_mut(key)?;
                request.in_page += 1;
                request.last = match (wire::tag(message, "msgid"), wire::tag(message, "time")) {
                    (Some(id), _) => Some(Anchor::Msgid(id.to_owned())),
                    (None, Some(time)) => DateTime::parse_from_rfc3339(time)
                        .ok()
                        .map(|t| Anchor::Time(t.with_timezone(&Utc))),
                    (None, None) => None,
                };
                None
            }
            Command::Raw(command, params)
                if command.eq_ignore_ascii_case("FAIL")
                    && params
                        .first()
                        .is_some_and(|c| c.eq_ignore_ascii_case("CHATHISTORY")) =>
            {
                let failed: Vec<String> = params
                    .iter()
                    .map(|p| map.fold(p))
                    .filter(|p| self.requests.contains_key(p))
                    .collect();
                tracing::warn!(reply = %params.join(" "), "the IRC server refused a history request; the gap stays unfilled");
                for key in failed {
                    self.requests.remove(&key);
                }
                None
            }
            _ => None,
        }
    }

    /// A batch for `key` ended: ask for the next page if this one was full.
    fn page_done(&mut self, key: &str) -> Option<wire::WireLine> {
        let request = self.requests.get_mut(key)?;
        request.stored += request.in_page;
        let full = request.in_page >= request.limit;
        request.in_page = 0;
        if full
            && request.pages < MAX_PAGES
            && let Some(line) = request
                .last
                .as_ref()
                .and_then(|from| request_line(&request.channel, from, request.limit))
        {
            request.pages += 1;
            return Some(line);
        }
        let request = self.requests.remove(key)?;
        if full {
            tracing::warn!(channel = %request.channel, pages = request.pages, "history backfill stopped after its page limit; the newest messages of the gap are missing (pages run forward from the oldest)");
        }
        tracing::info!(channel = %request.channel, messages = request.stored, "history backfilled from the IRC server");
        None
    }
}

fn request_line(channel: &Channel, from: &Anchor, limit: usize) -> Option<wire::WireLine> {
    wire::WireLine::new(
        "CHATHISTORY",
        &["AFTER", channel.name(), &from.param(), &limit.to_string()],
    )
    .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::NameRules;

    fn chan(name: &str) -> Channel {
        NameRules::default().channel(name).unwrap()
    }

    fn feed(backfill: &mut Backfill, line: &str) -> Option<wire::WireLine> {
        let message = wire::parse(line).unwrap();
        backfill.on_message(&message, CaseMapping::Rfc1459)
    }

    #[test]
    fn full_pages_continue_from_the_last_msgid_and_a_short_page_ends() {
        let mut backfill = Backfill::default();
        let last = DateTime::parse_from_rfc3339("2026-12-01T10:00:00.500Z")
            .unwrap()
            .with_timezone(&Utc);
        let first = backfill.start(&chan("#Ops"), last, 2).unwrap();
        assert_eq!(
            first.as_str(),
            "CHATHISTORY AFTER #Ops timestamp=2026-12-01T10:00:00.499Z 2\r\n"
        );
        assert_eq!(feed(&mut backfill, ":irc BATCH +b1 chathistory #ops"), None);
        let m = wire::parse(
            "@batch=b1;msgid=m1;time=2026-12-01T10:00:01.000Z :al!u@h PRIVMSG #ops :one",
        )
        .unwrap();
        assert!(backfill.is_replay(&m));
        assert_eq!(backfill.on_message(&m, CaseMapping::Rfc1459), None);
        feed(
            &mut backfill,
            "@batch=b1;msgid=m2;time=2026-12-01T10:00:02.000Z :al!u@h PRIVMSG #ops :two",
        );
        let next = feed(&mut backfill, ":irc BATCH -b1").unwrap();
        assert_eq!(next.as_str(), "CHATHISTORY AFTER #Ops msgid=m2 2\r\n");
        feed(&mut backfill, ":irc BATCH +b2 chathistory #OPS");
        feed(
            &mut backfill,
            "@batch=b2;msgid=m3 :al!u@h PRIVMSG #ops :three",
        );
        assert_eq!(feed(&mut backfill, ":irc BATCH -b2"), None);
        // Done: a later batch for the channel asks for nothing more.
        feed(&mut backfill, ":irc BATCH +b3 chathistory #ops");
        let live = wire::parse(":al!u@h PRIVMSG #ops :live").unwrap();
        assert!(!backfill.is_replay(&live));
        assert_eq!(feed(&mut backfill, ":irc BATCH -b3"), None);
    }

    #[test]
    fn paging_stops_at_the_page_limit() {
        let mut backfill = Backfill::default();
        backfill.start(&chan("#c"), Utc::now(), 1).unwrap();
        let mut pages = 1;
        for n in 0.. {
            feed(&mut backfill, &format!(":irc BATCH +p{n} chathistory #c"));
            feed(
                &mut backfill,
                &format!("@batch=p{n};msgid=x{n} :a!u@h PRIVMSG #c :m"),
            );
            match feed(&mut backfill, &format!(":irc BATCH -p{n}")) {
                Some(_) => pages += 1,
                None => break,
            }
        }
        assert_eq!(pages, MAX_PAGES);
    }

    #[test]
    fn batches_left_open_are_bounded() {
        let mut backfill = Backfill::default();
        for n in 0..10_000 {
            feed(&mut backfill, &format!(":irc BATCH +b{n} chathistory #c"));
        }
        assert!(backfill.batches.len() <= MAX_OPEN_BATCHES);
        let newest = wire::parse("@batch=b9999 :a!u@h PRIVMSG #c :x").unwrap();
        assert!(backfill.is_replay(&newest));
    }

    #[test]
    fn a_refused_request_is_dropped_and_other_batches_are_only_replays() {
        let mut backfill = Backfill::default();
        backfill.start(&chan("#c"), Utc::now(), 1).unwrap();
        feed(
            &mut backfill,
            ":irc FAIL CHATHISTORY INVALID_TARGET AFTER #C :no such channel",
        );
        feed(&mut backfill, ":irc BATCH +r chathistory #c");
        let m = wire::parse("@batch=r;msgid=z :a!u@h PRIVMSG #c :replayed on join").unwrap();
        assert!(backfill.is_replay(&m));
        backfill.on_message(&m, CaseMapping::Rfc1459);
        assert_eq!(feed(&mut backfill, ":irc BATCH -r"), None);
        // Batches of other types are not history.
        feed(&mut backfill, ":irc BATCH +n netsplit a.irc b.irc");
        let q = wire::parse("@batch=n :a!u@h QUIT :a.irc b.irc").unwrap();
        assert!(!backfill.is_replay(&q));
    }
}
