//! A small parsed view of one IRC line, as a test wants to look at it.
//!
//! Written from RFC 1459 §2.3.1 / RFC 2812 §2.3.1 (`[":" prefix SPACE] command params`,
//! the last parameter may be a `:`-trailing one) plus the IRCv3 message-tags prefix
//! (`@key=value;key2 ...`). It is deliberately forgiving: it never fails, so a test can
//! always see what the server really sent.

use std::collections::BTreeMap;
use std::fmt;

/// One line received from (or meant for) an IRC server, without its CR LF.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// The line exactly as received (lossy UTF-8), without the trailing CR LF.
    pub raw: String,
    /// IRCv3 message tags, values unescaped (`\:` → `;`, `\s` → space, ...). A tag without
    /// a value maps to `""`.
    pub tags: BTreeMap<String, String>,
    /// The prefix (source) without its leading `:`, e.g. `alice!alice@127.0.0.1` or
    /// `irc.test`.
    pub prefix: Option<String>,
    /// The command, upper-cased (`PRIVMSG`, `001`, ...).
    pub command: String,
    /// The parameters; a trailing (`:`-prefixed) parameter is the last one, without its `:`.
    pub params: Vec<String>,
}

impl Line {
    /// Parses one line. A trailing CR LF (or LF) is ignored. Never fails: a line that is
    /// not valid IRC gets whatever could be read from it (possibly an empty command).
    pub fn parse(raw: &str) -> Line {
        let raw = raw.trim_end_matches(['\r', '\n']);
        let mut rest = raw;
        let mut tags = BTreeMap::new();
        if let Some(after) = rest.strip_prefix('@') {
            let (tag_str, tail) = after.split_once(' ').unwrap_or((after, ""));
            for tag in tag_str.split(';').filter(|t| !t.is_empty()) {
                let (key, value) = tag.split_once('=').unwrap_or((tag, ""));
                tags.insert(key.to_string(), unescape_tag_value(value));
            }
            rest = tail.trim_start_matches(' ');
        }
        let mut prefix = None;
        if let Some(after) = rest.strip_prefix(':') {
            let (p, tail) = after.split_once(' ').unwrap_or((after, ""));
            prefix = Some(p.to_string());
            rest = tail.trim_start_matches(' ');
        }
        let (command, mut rest) = rest.split_once(' ').unwrap_or((rest, ""));
        let mut params = Vec::new();
        loop {
            rest = rest.trim_start_matches(' ');
            if rest.is_empty() {
                break;
            }
            if let Some(trailing) = rest.strip_prefix(':') {
                params.push(trailing.to_string());
                break;
            }
            let (param, tail) = rest.split_once(' ').unwrap_or((rest, ""));
            params.push(param.to_string());
            rest = tail;
        }
        Line {
            raw: raw.to_string(),
            tags,
            prefix,
            command: command.to_ascii_uppercase(),
            params,
        }
    }

    /// The nick part of the prefix (`alice` of `alice!alice@127.0.0.1`). For a server
    /// prefix (`irc.test`) this is the server name.
    pub fn nick(&self) -> Option<&str> {
        let prefix = self.prefix.as_deref()?;
        Some(prefix.split(['!', '@']).next().unwrap_or(prefix))
    }

    /// The `i`-th parameter, if present.
    pub fn param(&self, i: usize) -> Option<&str> {
        self.params.get(i).map(String::as_str)
    }

    /// The last parameter (the message text of a PRIVMSG, the reason of an ERROR).
    pub fn trailing(&self) -> Option<&str> {
        self.params.last().map(String::as_str)
    }

    /// True if this is `command` (case-insensitive) sent by `nick` (IRC case-insensitive,
    /// ASCII only).
    pub fn is_from(&self, nick: &str, command: &str) -> bool {
        self.command.eq_ignore_ascii_case(command)
            && self.nick().is_some_and(|n| n.eq_ignore_ascii_case(nick))
    }
}

impl fmt::Display for Line {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.raw)
    }
}

fn unescape_tag_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some(':') => out.push(';'),
            Some('s') => out.push(' '),
            Some('\\') => out.push('\\'),
            Some('r') => out.push('\r'),
            Some('n') => out.push('\n'),
            Some(other) => out.push(other),
            None => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_prefix_command_and_trailing() {
        let line = Line::parse(":alice!~alice@127.0.0.1 PRIVMSG #test :hello there\r\n");
        assert_eq!(line.prefix.as_deref(), Some("alice!~alice@127.0.0.1"));
        assert_eq!(line.nick(), Some("alice"));
        assert_eq!(line.command, "PRIVMSG");
        assert_eq!(line.params, ["#test", "hello there"]);
        assert_eq!(line.trailing(), Some("hello there"));
        assert!(line.is_from("ALICE", "privmsg"));
        assert_eq!(
            line.raw,
            ":alice!~alice@127.0.0.1 PRIVMSG #test :hello there"
        );
    }

    #[test]
    fn parses_tags_and_middle_params() {
        let line = Line::parse(
            "@time=2024-01-01T00:00:00.000Z;msgid=a\\:b\\sc;flag :irc.test 353 bob = #test :@alice bob",
        );
        assert_eq!(line.tags["time"], "2024-01-01T00:00:00.000Z");
        assert_eq!(line.tags["msgid"], "a;b c");
        assert_eq!(line.tags["flag"], "");
        assert_eq!(line.nick(), Some("irc.test"));
        assert_eq!(line.command, "353");
        assert_eq!(line.params, ["bob", "=", "#test", "@alice bob"]);
    }

    #[test]
    fn parses_lines_without_prefix_or_params() {
        let ping = Line::parse("PING :irc.test");
        assert_eq!(ping.prefix, None);
        assert_eq!(ping.command, "PING");
        assert_eq!(ping.params, ["irc.test"]);

        let bare = Line::parse("QUIT");
        assert_eq!(bare.command, "QUIT");
        assert!(bare.params.is_empty());

        let empty_trailing = Line::parse("PRIVMSG #a :");
        assert_eq!(empty_trailing.params, ["#a", ""]);
    }
}
