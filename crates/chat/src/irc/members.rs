//! Who is in which channel, as the observer hears it: NAMES, JOIN, PART,
//! KICK, QUIT and NICK, keyed by the server's case folding so that `Alice`
//! and `alice` are one member.

use std::collections::{BTreeMap, HashMap};

use crate::names::CaseMapping;

/// Channels the observer is in, with their members.
#[derive(Debug, Default)]
pub(crate) struct Membership {
    /// Channel key → (display name, nick key → nick).
    channels: HashMap<String, Channel>,
}

#[derive(Debug, Default)]
struct Channel {
    name: String,
    members: BTreeMap<String, String>,
    /// A NAMES reply in progress (353s until the 366).
    pending_names: Option<BTreeMap<String, String>>,
}

impl Membership {
    /// We joined `name`.
    pub(crate) fn joined(&mut self, key: String, name: &str) {
        self.channels.entry(key).or_default().name = name.to_owned();
    }

    /// We left (parted, were kicked from) a channel.
    pub(crate) fn left(&mut self, key: &str) {
        self.channels.remove(key);
    }

    /// Forget everything (the connection dropped).
    pub(crate) fn clear(&mut self) {
        self.channels.clear();
    }

    pub(crate) fn add(&mut self, map: CaseMapping, channel: &str, nick: &str) {
        if let Some(c) = self.channels.get_mut(channel) {
            c.members.insert(map.fold(nick), nick.to_owned());
        }
    }

    pub(crate) fn remove(&mut self, map: CaseMapping, channel: &str, nick: &str) {
        if let Some(c) = self.channels.get_mut(channel) {
            c.members.remove(&map.fold(nick));
        }
    }

    /// `nick` quit: it leaves every channel.
    pub(crate) fn quit(&mut self, map: CaseMapping, nick: &str) {
        let key = map.fold(nick);
        for c in self.channels.values_mut() {
            c.members.remove(&key);
        }
    }

    /// `old` is now `new`, in every channel it is in.
    pub(crate) fn rename(&mut self, map: CaseMapping, old: &str, new: &str) {
        let (old, new_key) = (map.fold(old), map.fold(new));
        for c in self.channels.values_mut() {
            if c.members.remove(&old).is_some() {
                c.members.insert(new_key.clone(), new.to_owned());
            }
        }
    }

    /// One `353` line: `entries` are nicks with membership prefixes (several
    /// with `multi-prefix`) and maybe `!user@host` (`userhost-in-names`).
    pub(crate) fn names(&mut self, map: CaseMapping, prefixes: &str, channel: &str, entries: &str) {
        if let Some(c) = self.channels.get_mut(channel) {
            let pending = c.pending_names.get_or_insert_with(BTreeMap::new);
            for entry in entries.split(' ').filter(|e| !e.is_empty()) {
                let nick = entry.trim_start_matches(|ch| prefixes.contains(ch));
                let nick = nick.split('!').next().unwrap_or(nick);
                if !nick.is_empty() {
                    pending.insert(map.fold(nick), nick.to_owned());
                }
            }
        }
    }

    /// `366`: the NAMES reply is complete and replaces what we knew.
    pub(crate) fn names_end(&mut self, channel: &str) {
        if let Some(c) = self.channels.get_mut(channel) {
            c.members = c.pending_names.take().unwrap_or_default();
        }
    }

    /// Members of a channel, ordered by key.
    pub(crate) fn members(&self, channel: &str) -> Option<Vec<String>> {
        self.channels
            .get(channel)
            .map(|c| c.members.values().cloned().collect())
    }

    /// Display names of the channels we are in, ordered by key.
    pub(crate) fn channel_names(&self) -> Vec<String> {
        let mut keys: Vec<&String> = self.channels.keys().collect();
        keys.sort();
        keys.into_iter()
            .map(|k| self.channels[k].name.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAP: CaseMapping = CaseMapping::Rfc1459;

    #[test]
    fn names_join_part_kick_quit_nick_keep_one_entry_per_member() {
        let mut m = Membership::default();
        m.joined("#c".into(), "#C");
        m.names(MAP, "@+", "#c", "@+Alice bob!u@h +carol");
        m.names(MAP, "@+", "#c", "dave");
        assert_eq!(
            m.members("#c").unwrap(),
            Vec::<String>::new(),
            "applied only at 366"
        );
        m.names_end("#c");
        assert_eq!(m.members("#c").unwrap(), ["Alice", "bob", "carol", "dave"]);
        m.add(MAP, "#c", "alice"); // a JOIN echo in other case: no duplicate
        assert_eq!(m.members("#c").unwrap().len(), 4);
        m.remove(MAP, "#c", "BOB");
        m.rename(MAP, "carol", "Caroline");
        m.quit(MAP, "dave");
        assert_eq!(m.members("#c").unwrap(), ["alice", "Caroline"]);
        assert_eq!(m.channel_names(), ["#C"]);
        m.left("#c");
        assert!(m.members("#c").is_none());
    }
}
