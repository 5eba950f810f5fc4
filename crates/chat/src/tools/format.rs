//! The chat tools' text: the fixed formats clients of the original IRC bridge
//! parse, and the parsing of what agents pass in.

use std::fmt::Write as _;

use chrono::{DateTime, NaiveDate, NaiveDateTime, Timelike, Utc};
use serde_json::Value;
use switchboard_toolset::{Structured, ToolError, ToolOutput};

use crate::{
    history::{Message, Since, iso, write_iso},
    inbox::Item,
    names::Channel,
};

/// Writes `[HH:MM:SS] <nick> text`, by hand: chrono's `format` re-parses its
/// pattern every call.
fn write_line(text: &mut String, m: &Message) {
    let t = m.time;
    text.push('[');
    for (i, field) in [t.hour(), t.minute(), t.second()].into_iter().enumerate() {
        if i > 0 {
            text.push(':');
        }
        text.push(char::from(b'0' + (field / 10 % 10) as u8));
        text.push(char::from(b'0' + (field % 10) as u8));
    }
    text.push_str("] <");
    text.push_str(&m.nick);
    text.push_str("> ");
    text.push_str(&m.text);
}

/// `read_messages`-style output: `[HH:MM:SS] <nick> text` lines, newest
/// first. A reader that follows by position (`since` a seq) also gets the
/// newest position shown, and whether `more` follow it.
pub(super) fn messages_output(
    channel: &Channel,
    messages: &[Message],
    since: Option<Since>,
    more: bool,
    timed_out: bool,
) -> ToolOutput {
    let text = if messages.is_empty() {
        match since {
            Some(since) => format!("No messages in {channel} {}.", describe_since(&since)),
            None => format!("No messages in {channel}."),
        }
    } else {
        let mut text = String::with_capacity(
            messages
                .iter()
                .map(|m| m.nick.len() + m.text.len() + 16)
                .sum(),
        );
        for (i, m) in messages.iter().enumerate() {
            if i > 0 {
                text.push('\n');
            }
            write_line(&mut text, m);
        }
        if let (Some(Since::Seq(_)), Some(newest)) = (since, messages.first()) {
            let _ = write!(text, "\n(up to seq {}", newest.seq);
            text.push_str(if more { "; more follow)" } else { ")" });
        }
        text
    };
    let mut json = JsonObject::with_capacity(text.len() * 2 + 64);
    json.string("channel", channel.name());
    json.messages(messages.iter().map(|m| (m, None)));
    json.flag("more", more);
    json.flag("timed_out", timed_out);
    ToolOutput::new(text, json.finish())
}

/// `after seq 57` or `since 2026-11-30T22:15:03.123456Z`.
pub(super) fn describe_since(since: &Since) -> String {
    match since {
        Since::Seq(seq) => format!("after seq {seq}"),
        Since::Time(t) => format!("since {}", iso(t)),
    }
}

/// An inbox: `#channel [HH:MM:SS] <nick> text` lines, oldest first.
/// An inbox read: `#channel [HH:MM:SS] <nick> text` lines, oldest first,
/// and `(more unread follow)` when `more` wait beyond them.
pub(super) fn inbox_output(nick: &str, items: &[Item], timed_out: bool, more: bool) -> ToolOutput {
    let text = if items.is_empty() {
        format!("Nothing unread for {nick}.")
    } else {
        let mut text = String::new();
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                text.push('\n');
            }
            text.push_str(&item.message.channel);
            text.push(' ');
            write_line(&mut text, &item.message);
        }
        if more {
            text.push_str("\n(more unread follow)");
        }
        text
    };
    let mut json = JsonObject::with_capacity(text.len() * 2 + 64);
    json.messages(items.iter().map(|item| (&item.message, Some(item.mention))));
    json.string("nick", nick);
    json.flag("timed_out", timed_out);
    json.flag("more", more);
    ToolOutput::new(text, json.finish())
}

/// `search_messages` output: `lines`, and the `query` with the messages.
pub(super) fn search_output(text: String, query: &str, messages: &[Message]) -> ToolOutput {
    let mut json = JsonObject::with_capacity(text.len() * 2 + 64);
    json.messages(messages.iter().map(|m| (m, None)));
    json.string("query", query);
    ToolOutput::new(text, json.finish())
}

/// Writes the JSON object of a result with messages, as serialising its
/// [`Value`] would (keys in sorted order, serde_json's escaping), without
/// building the value. Callers add the keys in order.
struct JsonObject(Vec<u8>);

impl JsonObject {
    fn with_capacity(bytes: usize) -> Self {
        let mut out = Vec::with_capacity(bytes);
        out.push(b'{');
        Self(out)
    }

    fn key(&mut self, key: &str) {
        if self.0.len() > 1 {
            self.0.push(b',');
        }
        self.str(key);
        self.0.push(b':');
    }

    fn str(&mut self, value: &str) {
        // Writing to a Vec cannot fail.
        let _ = serde_json::to_writer(&mut self.0, value);
    }

    fn string(&mut self, key: &str, value: &str) {
        self.key(key);
        self.str(value);
    }

    /// `"key":true` when `set`; nothing otherwise.
    fn flag(&mut self, key: &str, set: bool) {
        if set {
            self.key(key);
            self.0.extend_from_slice(b"true");
        }
    }

    /// `"messages":[…]`: each message as [`Message`] serialises, with
    /// `mention` when given.
    fn messages<'a>(&mut self, messages: impl Iterator<Item = (&'a Message, Option<bool>)>) {
        self.key("messages");
        self.0.push(b'[');
        for (i, (m, mention)) in messages.enumerate() {
            if i > 0 {
                self.0.push(b',');
            }
            let out = &mut self.0;
            out.extend_from_slice(b"{\"channel\":");
            let _ = serde_json::to_writer(&mut *out, &m.channel);
            out.extend_from_slice(b",\"id\":");
            let _ = serde_json::to_writer(&mut *out, &m.id);
            out.extend_from_slice(b",\"kind\":");
            let _ = serde_json::to_writer(&mut *out, &m.kind);
            if let Some(mention) = mention {
                out.extend_from_slice(if mention {
                    b",\"mention\":true"
                } else {
                    b",\"mention\":false"
                });
            }
            out.extend_from_slice(b",\"nick\":");
            let _ = serde_json::to_writer(&mut *out, &m.nick);
            out.extend_from_slice(b",\"seq\":");
            let _ = serde_json::to_writer(&mut *out, &m.seq);
            out.extend_from_slice(b",\"text\":");
            let _ = serde_json::to_writer(&mut *out, &m.text);
            out.extend_from_slice(b",\"time\":\"");
            write_iso(out, &m.time);
            out.extend_from_slice(b"\"}");
        }
        self.0.push(b']');
    }

    fn finish(mut self) -> Structured {
        self.0.push(b'}');
        // Every piece written is UTF-8.
        let text = String::from_utf8(self.0)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
        Structured::json(text)
    }
}

/// `search_messages` lines: `[YYYY-MM-DD HH:MM:SS] #channel <nick> text`.
pub(super) fn search_line(m: &Message) -> String {
    format!(
        "[{}] {} <{}> {}",
        m.time.format("%Y-%m-%d %H:%M:%S"),
        m.channel,
        m.nick,
        m.text
    )
}

pub(super) fn bullets(items: &[String]) -> String {
    items
        .iter()
        .map(|i| format!("- {i}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// What `since` must be, for error messages.
const SINCE_FORMS: &str =
    "a message's seq (0 or more, e.g. 42) or an ISO 8601 time such as 2026-11-30T22:15:00Z";

/// Parses `since`: a message's position (`seq`, a whole number, also as a
/// string of digits since agents often quote numbers), else a time (see
/// [`parse_time`]). Whether the position or time exists is the caller's
/// check.
pub(crate) fn parse_since(raw: &Value) -> Result<Since, ToolError> {
    let refuse = |shown: &str| {
        let shown: String = shown.chars().take(60).collect();
        ToolError::invalid_argument(
            "since",
            format!("since must be {SINCE_FORMS} (got {shown})"),
        )
    };
    match raw {
        Value::Number(n) => match n.as_i64() {
            Some(seq) if seq >= 0 => Ok(Since::Seq(seq)),
            _ => Err(refuse(&n.to_string())),
        },
        Value::String(s) => {
            let trimmed = s.trim();
            let digits = trimmed.strip_prefix('-').unwrap_or(trimmed);
            if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
                return match trimmed.parse::<i64>() {
                    Ok(seq) if seq >= 0 => Ok(Since::Seq(seq)),
                    _ => Err(refuse(&format!("{trimmed:?}"))),
                };
            }
            parse_time(trimmed)
                .map(Since::Time)
                .ok_or_else(|| refuse(&format!("{trimmed:?}")))
        }
        other => Err(refuse(&other.to_string())),
    }
}

/// Parses a time: RFC 3339 (`2026-11-30T22:15:00Z`, `…+02:00`), or a date
/// and time without zone (taken as UTC), or a bare date (midnight UTC).
fn parse_time(raw: &str) -> Option<DateTime<Utc>> {
    if let Ok(t) = DateTime::parse_from_rfc3339(raw) {
        return Some(t.with_timezone(&Utc));
    }
    for format in [
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%d %H:%M:%S%.f",
        "%Y-%m-%dT%H:%M",
    ] {
        if let Ok(t) = NaiveDateTime::parse_from_str(raw, format) {
            return Some(t.and_utc());
        }
    }
    NaiveDate::parse_from_str(raw, "%Y-%m-%d")
        .ok()
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .map(|t| t.and_utc())
}

/// Turns free text into an FTS5 query: every word must occur (a word is
/// quoted, so FTS5 operators and punctuation in the input are plain text).
pub(super) fn fts_query(raw: &str) -> Option<String> {
    let words: Vec<String> = raw
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .take(32)
        .map(|w| format!("\"{w}\""))
        .collect();
    (!words.is_empty()).then(|| words.join(" "))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn since(raw: &str) -> Result<Since, ToolError> {
        parse_since(&json!(raw))
    }

    #[test]
    fn since_accepts_common_iso_forms() {
        let Since::Time(z) = since("2026-11-30T22:15:00Z").unwrap() else {
            panic!("not a time")
        };
        for same in [
            "2026-11-30T23:15:00+01:00",
            "2026-11-30T22:15:00",
            "2026-11-30 22:15:00",
            "2026-11-30T22:15",
        ] {
            assert_eq!(since(same).unwrap(), Since::Time(z), "{same}");
        }
        assert!(since("2026-11-30").is_ok());
        let Since::Time(precise) = since("2026-11-30T22:15:00.123456Z").unwrap() else {
            panic!("not a time")
        };
        assert_eq!(precise.timestamp_subsec_micros(), 123456);
    }

    #[test]
    fn since_accepts_positions_as_numbers_and_digit_strings() {
        assert_eq!(parse_since(&json!(42)).unwrap(), Since::Seq(42));
        assert_eq!(parse_since(&json!(0)).unwrap(), Since::Seq(0));
        assert_eq!(since(" 42 ").unwrap(), Since::Seq(42));
    }

    #[test]
    fn since_refuses_anything_else() {
        for bad in [
            "yesterday",
            "",
            "30/11/2026",
            "2026-13-01T00:00:00Z",
            "12:00",
            "-1",
            "99999999999999999999",
        ] {
            let err = since(bad).unwrap_err();
            assert!(err.message().contains("ISO 8601"), "{bad}: {err}");
            assert!(err.message().contains("seq"), "{bad}: {err}");
        }
        for bad in [json!(-1), json!(1.5), json!(true), json!(null), json!([1])] {
            let err = parse_since(&bad).unwrap_err();
            assert!(err.message().contains("seq"), "{bad}: {err}");
        }
    }

    #[test]
    fn fts_queries_quote_every_word() {
        assert_eq!(
            fts_query("deploy AND \"x").unwrap(),
            "\"deploy\" \"AND\" \"x\""
        );
        assert_eq!(fts_query("  ^*()  "), None);
    }
}
