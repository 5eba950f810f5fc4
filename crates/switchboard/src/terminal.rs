//! A human at a terminal, through the daemon's relay socket:
//! `switchboard tail #channel` prints a channel's history and then follows
//! it live; `switchboard say #channel TEXT --as NICK` posts to it. Both are
//! plain relay clients calling the chat tools, so they work on the local hub
//! and on IRC alike.

use std::{
    io::Write,
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::{Context, bail};
use chrono::{DateTime, Utc};
use serde_json::{Map, Value, json};
use switchboard_relay::{
    ERROR_META,
    client::{Link, LinkError},
};

/// How `tail` and `say` name themselves in their hello; the daemon takes
/// them for the person at the terminal.
pub const CLIENT_NAME: &str = "switchboard-terminal";
const CONNECT: Duration = Duration::from_secs(1);
const CALL: Duration = Duration::from_secs(15);
/// `wait_for_messages` blocks up to 50 s; allow for the round trip.
const WAIT_S: u64 = 50;
const WAIT_CALL: Duration = Duration::from_secs(WAIT_S + 10);

async fn connect(socket: &Path) -> anyhow::Result<Link> {
    let client = format!("{CLIENT_NAME} {}", env!("CARGO_PKG_VERSION"));
    let (link, _events) = Link::connect(socket, CONNECT, &client)
        .await
        .with_context(|| {
            format!(
                "switchboard is not running (no relay socket at {}); start `switchboard serve`",
                socket.display()
            )
        })?;
    Ok(link)
}

async fn call(
    link: &Link,
    tool: &str,
    arguments: Value,
    timeout: Duration,
) -> Result<Value, LinkError> {
    let mut params = Map::new();
    params.insert("name".into(), Value::String(tool.into()));
    params.insert("arguments".into(), arguments);
    link.request("tools/call", Some(params), timeout).await
}

/// A call the daemon refused as made, naming the argument (a malformed
/// channel name or nick): the command line was wrong, exit status 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Misused(String);

/// The text of a tool result, or its error: [`Misused`] when the daemon
/// refused an argument, else a failure to carry the call out.
fn checked(result: &Value) -> anyhow::Result<String> {
    let text = result["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n");
    if !result["isError"].as_bool().unwrap_or(false) {
        return Ok(text);
    }
    if result["_meta"][ERROR_META]["invalid_argument"].is_string() {
        return Err(Misused(text).into());
    }
    bail!("{text}")
}

/// Prints `messages` (as returned, newest first) oldest first; returns the
/// newest time.
fn print_messages(messages: &[Value], out: &mut impl Write) -> std::io::Result<Option<String>> {
    for message in messages.iter().rev() {
        let time = message["time"].as_str().unwrap_or_default();
        let clock = DateTime::parse_from_rfc3339(time)
            .map(|t| t.with_timezone(&Utc).format("%H:%M:%S").to_string())
            .unwrap_or_else(|_| "--:--:--".into());
        writeln!(
            out,
            "[{clock}] <{}> {}",
            printable(message["nick"].as_str().unwrap_or("?")),
            printable(message["text"].as_str().unwrap_or_default())
        )?;
    }
    out.flush()?;
    Ok(messages
        .first()
        .and_then(|m| m["time"].as_str())
        .map(str::to_owned))
}

/// `text` with every control character but tab written out (`\u{1b}`):
/// anyone in a channel could otherwise send the terminal escape sequences.
/// So are the invisible characters that reorder or hide what a line shows
/// (bidirectional overrides, zero-width spaces); the joiners that emoji and
/// some scripts need stay.
fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    let hidden = |c: char| {
        (c.is_control() && c != '\t')
            || matches!(
                c,
                '\u{200b}' | '\u{200e}' | '\u{200f}' | '\u{061c}' | '\u{2060}' | '\u{feff}'
            )
            || ('\u{202a}'..='\u{202e}').contains(&c)
            || ('\u{2066}'..='\u{2069}').contains(&c)
    };
    if !text.contains(hidden) {
        return text.into();
    }
    text.chars()
        .map(|c| {
            if hidden(c) {
                c.escape_unicode().to_string()
            } else {
                c.to_string()
            }
        })
        .collect::<String>()
        .into()
}

/// `switchboard tail`.
pub async fn tail(
    socket: PathBuf,
    channel: String,
    limit: u32,
    follow: bool,
) -> anyhow::Result<()> {
    let mut link = connect(&socket).await?;
    let result = call(
        &link,
        "read_messages",
        json!({"channel": channel, "limit": limit}),
        CALL,
    )
    .await?;
    checked(&result)?;
    let mut stdout = std::io::stdout().lock();
    let messages = result["structuredContent"]["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut since =
        print_messages(&messages, &mut stdout)?.unwrap_or_else(|| Utc::now().to_rfc3339());
    drop(stdout);
    if !follow {
        return Ok(());
    }
    loop {
        let arguments = json!({"channel": channel, "since": since, "timeout_s": WAIT_S});
        let answer = match call(&link, "wait_for_messages", arguments, WAIT_CALL).await {
            Ok(result) if result["_meta"][ERROR_META]["server_stopping"] == true => {
                Err("the server is stopping".to_owned())
            }
            Ok(result) => Ok(result),
            Err(e) => Err(e.to_string()),
        };
        match answer {
            Ok(result) => {
                checked(&result)?;
                let messages = result["structuredContent"]["messages"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                if let Some(newest) = print_messages(&messages, &mut std::io::stdout().lock())? {
                    since = newest;
                }
            }
            Err(why) => {
                // The daemon restarts or went away: keep following once it is back.
                crate::say_to_stderr(format_args!("switchboard tail: {why}; reconnecting…"));
                link = loop {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    if let Ok(link) = connect(&socket).await {
                        break link;
                    }
                };
            }
        }
    }
}

/// `switchboard say`.
pub async fn say(
    socket: PathBuf,
    channel: String,
    text: String,
    nick: String,
) -> anyhow::Result<()> {
    let link = connect(&socket).await?;
    let result = call(
        &link,
        "send_message",
        json!({"channel": channel, "text": text, "sender": nick}),
        CALL,
    )
    .await?;
    println!("{}", checked(&result)?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `tail`/`say` read the daemon's tool errors (written through the
    /// toolset) with the relay's name for the key: one key, two crates.
    #[test]
    fn the_daemon_and_the_relay_name_one_error_key() {
        assert_eq!(ERROR_META, switchboard_toolset::ERROR_META);
    }

    #[test]
    fn tail_prints_no_escape_sequence_a_sender_wrote() {
        let messages = [json!({
            "time": "2026-12-01T15:21:22Z",
            "nick": "eve",
            "text": "\u{1b}[31mred\u{7}\tand \u{9b}2J plain"
        })];
        let mut out = Vec::new();
        print_messages(&messages, &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "[15:21:22] <eve> \\u{1b}[31mred\\u{7}\tand \\u{9b}2J plain\n"
        );
    }

    #[test]
    fn tail_shows_the_invisible_characters_that_would_disguise_a_line() {
        let messages = [json!({
            "time": "2026-12-01T15:21:22Z",
            "nick": "eve\u{200b}",
            "text": "ok \u{202e}txt.exe\u{2069} 👨\u{200d}👩"
        })];
        let mut out = Vec::new();
        print_messages(&messages, &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "[15:21:22] <eve\\u{200b}> ok \\u{202e}txt.exe\\u{2069} 👨\u{200d}👩\n"
        );
    }
}
