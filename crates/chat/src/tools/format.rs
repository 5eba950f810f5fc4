//! The chat tools' text: the fixed formats clients of the original IRC bridge
//! parse, and the parsing of what agents pass in.

use std::fmt::Write;

use chrono::{DateTime, NaiveDate, NaiveDateTime, Timelike, Utc};
use serde_json::{Value, json};
use switchboard_toolset::{ToolError, ToolOutput};

use crate::{
    history::{Message, iso},
    inbox::Item,
    names::Channel,
};

/// Writes `[HH:MM:SS] <nick> text`, by hand: chrono's `format` re-parses its
/// pattern every call.
fn write_line(text: &mut String, m: &Message) {
    let t = m.time;
    let _ = write!(
        text,
        "[{:02}:{:02}:{:02}] <{}> {}",
        t.hour(),
        t.minute(),
        t.second(),
        m.nick,
        m.text
    );
}

/// `read_messages`-style output: `[HH:MM:SS] <nick> text` lines, newest first.
pub(super) fn messages_output(
    channel: &Channel,
    messages: &[Message],
    since: Option<DateTime<Utc>>,
    timed_out: bool,
) -> ToolOutput {
    let text = if messages.is_empty() {
        match since {
            Some(t) => format!("No messages in {channel} since {}.", iso(&t)),
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
        text
    };
    let mut structured = json!({"channel": channel.name(), "messages": messages});
    if timed_out {
        structured["timed_out"] = Value::Bool(true);
    }
    ToolOutput::new(text, structured)
}

/// An inbox: `#channel [HH:MM:SS] <nick> text` lines, oldest first.
pub(super) fn inbox_output(nick: &str, items: &[Item], timed_out: bool) -> ToolOutput {
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
        text
    };
    let messages: Vec<Value> = items
        .iter()
        .map(|item| {
            let mut value = json!(item.message);
            value["mention"] = Value::Bool(item.mention);
            value
        })
        .collect();
    let mut structured = json!({"nick": nick, "messages": messages});
    if timed_out {
        structured["timed_out"] = Value::Bool(true);
    }
    ToolOutput::new(text, structured)
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

/// Checks an optional integer parameter against `1..=max`.
pub(super) fn bounded(
    name: &str,
    value: Option<i64>,
    default: i64,
    max: i64,
) -> Result<usize, ToolError> {
    let value = value.unwrap_or(default);
    if (1..=max).contains(&value) {
        Ok(value as usize)
    } else {
        Err(ToolError::new(format!(
            "{name} must be between 1 and {max} (got {value})"
        )))
    }
}

/// Parses `since`: RFC 3339 (`2026-11-30T22:15:00Z`, `…+02:00`), or a date
/// and time without zone (taken as UTC), or a bare date (midnight UTC).
pub fn parse_since(raw: &str) -> Result<DateTime<Utc>, ToolError> {
    let raw = raw.trim();
    if let Ok(t) = DateTime::parse_from_rfc3339(raw) {
        return Ok(t.with_timezone(&Utc));
    }
    for format in [
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%d %H:%M:%S%.f",
        "%Y-%m-%dT%H:%M",
    ] {
        if let Ok(t) = NaiveDateTime::parse_from_str(raw, format) {
            return Ok(t.and_utc());
        }
    }
    if let Ok(d) = NaiveDate::parse_from_str(raw, "%Y-%m-%d") {
        return Ok(d.and_hms_opt(0, 0, 0).unwrap_or_default().and_utc());
    }
    let shown: String = raw.chars().take(60).collect();
    Err(ToolError::new(format!(
        "since must be an ISO 8601 time such as 2026-11-30T22:15:00Z (got {shown:?})"
    )))
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
    use super::*;

    #[test]
    fn since_accepts_common_iso_forms() {
        let z = parse_since("2026-11-30T22:15:00Z").unwrap();
        assert_eq!(parse_since("2026-11-30T23:15:00+01:00").unwrap(), z);
        assert_eq!(parse_since("2026-11-30T22:15:00").unwrap(), z);
        assert_eq!(parse_since("2026-11-30 22:15:00").unwrap(), z);
        assert_eq!(parse_since("2026-11-30T22:15").unwrap(), z);
        assert!(parse_since("2026-11-30").is_ok());
        let precise = parse_since("2026-11-30T22:15:00.123456Z").unwrap();
        assert_eq!(precise.timestamp_subsec_micros(), 123456);
    }

    #[test]
    fn since_refuses_non_iso_text() {
        for bad in [
            "yesterday",
            "",
            "30/11/2026",
            "2026-13-01T00:00:00Z",
            "12:00",
        ] {
            let err = parse_since(bad).unwrap_err();
            assert!(err.message().contains("ISO 8601"), "{bad}: {err}");
        }
    }

    #[test]
    fn limits_outside_the_range_are_refused() {
        assert_eq!(bounded("limit", None, 50, 500).unwrap(), 50);
        assert_eq!(bounded("limit", Some(500), 50, 500).unwrap(), 500);
        for bad in [0, -1, 501, i64::MAX] {
            assert!(bounded("limit", Some(bad), 50, 500).is_err());
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
