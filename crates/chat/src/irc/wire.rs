//! IRC lines on the wire: reading them bounded and lossily decoded, parsing
//! them with `irc-proto`, and writing commands that cannot smuggle a second
//! command in.
//!
//! A server can send anything: lines longer than any limit, invalid UTF-8,
//! garbage. None of it may panic or grow memory without bound. Lines longer
//! than [`MAX_LINE`] (IRCv3 allows 8191 bytes of tags plus 512 of message)
//! are discarded; invalid UTF-8 is decoded with replacement characters;
//! unparsable lines are logged and skipped.

use irc_proto::Message;
use switchboard_lines::{LineReader, Next};
use tokio::io::AsyncBufRead;

/// The longest line accepted from a server, tags included.
pub(crate) const MAX_LINE: usize = 8191 + 512;

/// One line read from the server.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Incoming {
    Line(String),
    /// A line longer than [`MAX_LINE`] was discarded.
    TooLong,
    Eof,
}

/// The reader of a connection's lines, bounded by [`MAX_LINE`]. It keeps a
/// partly read line across cancelled reads (the connection reads inside
/// `select!`).
pub(crate) fn line_reader() -> LineReader {
    LineReader::new(MAX_LINE)
}

/// Reads the next line (without CR/LF), lossily decoded. Cancel-safe.
pub(crate) async fn read_line<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    lines: &mut LineReader,
) -> std::io::Result<Incoming> {
    Ok(match lines.next(reader).await? {
        Next::Line(line) => Incoming::Line(String::from_utf8_lossy(line).into_owned()),
        Next::TooLong => Incoming::TooLong,
        Next::Eof => Incoming::Eof,
    })
}

/// Parses a line; `None` (logged) for lines that are not IRC messages.
pub(crate) fn parse(line: &str) -> Option<Message> {
    if line.trim().is_empty() {
        return None;
    }
    match line.parse::<Message>() {
        Ok(message) => Some(message),
        Err(e) => {
            tracing::debug!(line = %line.escape_debug(), error = %e, "ignoring an unparsable line from the server");
            None
        }
    }
}

/// One command ready for the wire: a command and its parameters, ending in
/// CRLF.
///
/// Only [`WireLine::new`] makes one, and everything a connection writes is a
/// `WireLine`, so every line on the wire went through its checks: every
/// parameter must already be free of CR, LF and NUL (names are validated,
/// texts are split into lines); this is checked again here, and a violating
/// command is refused rather than sent, so no caller bug can put a second
/// command on the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireLine(String);

impl WireLine {
    /// `command` with `params`; the last parameter becomes a trailing one
    /// (`:text`) when it needs to, and always for PRIVMSG and NOTICE.
    pub fn new(command: &'static str, params: &[&str]) -> Result<Self, UnsafeParam> {
        if command.is_empty() || !command.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Err(UnsafeParam);
        }
        let mut out = String::with_capacity(64);
        out.push_str(command);
        for (i, param) in params.iter().enumerate() {
            if param.contains(['\r', '\n', '\0']) {
                return Err(UnsafeParam);
            }
            let last = i + 1 == params.len();
            let needs_trailing = param.is_empty() || param.starts_with(':') || param.contains(' ');
            if needs_trailing && !last {
                return Err(UnsafeParam);
            }
            out.push(' ');
            if last && (needs_trailing || command == "PRIVMSG" || command == "NOTICE") {
                out.push(':');
            }
            out.push_str(param);
        }
        out.push_str("\r\n");
        Ok(Self(out))
    }

    /// The line as written, CRLF included.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A parameter contained CR, LF or NUL, or a middle parameter contained a
/// space or started with `:`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("refused to send an IRC command with a line break, NUL or misplaced space in a parameter")]
pub struct UnsafeParam;

/// The nick of a message's source, if it came from a user.
pub(crate) fn source_nick(message: &Message) -> Option<&str> {
    match &message.prefix {
        Some(irc_proto::Prefix::Nickname(nick, _, _)) => Some(nick),
        _ => None,
    }
}

/// The value of tag `key`, if present.
pub(crate) fn tag<'a>(message: &'a Message, key: &str) -> Option<&'a str> {
    message
        .tags
        .as_ref()?
        .iter()
        .find(|t| t.0 == key)
        .and_then(|t| t.1.as_deref())
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn lines(input: &[u8]) -> Vec<Incoming> {
        let mut reader = tokio::io::BufReader::new(input);
        let mut buf = line_reader();
        let mut out = Vec::new();
        loop {
            let line = read_line(&mut reader, &mut buf).await.unwrap();
            let eof = line == Incoming::Eof;
            out.push(line);
            if eof {
                return out;
            }
        }
    }

    #[tokio::test]
    async fn reads_crlf_lf_and_a_last_unterminated_line() {
        let got = lines(b"PING :a\r\nPING :b\nPING :c").await;
        assert_eq!(
            got,
            [
                Incoming::Line("PING :a".into()),
                Incoming::Line("PING :b".into()),
                Incoming::Line("PING :c".into()),
                Incoming::Eof
            ]
        );
    }

    #[tokio::test]
    async fn overlong_lines_are_dropped_and_reading_goes_on() {
        let mut input = vec![b'x'; MAX_LINE + 100];
        input.extend_from_slice(b"\r\nPING :ok\r\n");
        let got = lines(&input).await;
        assert_eq!(got[0], Incoming::TooLong);
        assert_eq!(got[1], Incoming::Line("PING :ok".into()));
    }

    #[tokio::test]
    async fn invalid_utf8_is_decoded_lossily() {
        let got = lines(b":a!b@c PRIVMSG #x :caf\xe9\r\n").await;
        assert_eq!(
            got[0],
            Incoming::Line(":a!b@c PRIVMSG #x :caf\u{FFFD}".into())
        );
    }

    #[test]
    fn garbage_never_panics() {
        for junk in [
            "",
            " ",
            ":",
            ":only-prefix",
            "@",
            "@a=b",
            "@a=b :p",
            "\u{0}\u{1}",
            "PRIVMSG",
            ":x 001",
            "@;;; :x!y@z PRIVMSG",
        ] {
            let _ = parse(junk);
        }
    }

    #[test]
    fn commands_are_built_safely() {
        let line = |command, params: &[&str]| {
            WireLine::new(command, params).map(|l| l.as_str().to_owned())
        };
        assert_eq!(
            line("PRIVMSG", &["#c", "hi there"]).unwrap(),
            "PRIVMSG #c :hi there\r\n"
        );
        assert_eq!(
            line("PRIVMSG", &["#c", "one"]).unwrap(),
            "PRIVMSG #c :one\r\n"
        );
        assert_eq!(line("JOIN", &["#c"]).unwrap(), "JOIN #c\r\n");
        assert_eq!(
            line("USER", &["u", "0", "*", "Real Name"]).unwrap(),
            "USER u 0 * :Real Name\r\n"
        );
        assert_eq!(
            line("PRIVMSG", &["#c", "hi\r\nQUIT :bye"]),
            Err(UnsafeParam)
        );
        assert_eq!(line("PRIVMSG", &["#c d", "x"]), Err(UnsafeParam));
        assert_eq!(line("NICK", &["a\0"]), Err(UnsafeParam));
        assert_eq!(line("PING :x\r\nQUIT", &[]), Err(UnsafeParam));
    }

    #[test]
    fn tags_and_sources_are_read() {
        let m = parse("@time=2026-11-30T10:00:00.000Z;msgid=abc :al!u@h PRIVMSG #c :hi").unwrap();
        assert_eq!(tag(&m, "msgid"), Some("abc"));
        assert_eq!(source_nick(&m), Some("al"));
    }
}
