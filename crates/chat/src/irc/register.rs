//! Registering with an IRC server: CAP negotiation (`CAP LS 302`), SASL
//! PLAIN, `NICK`/`USER` with fallback nicks, up to the `001` welcome.
//!
//! This is a pure state machine, like [`super::backfill`]: [`Registration`]
//! turns each message the server sends into the lines to write next, and
//! knows nothing of sockets or timeouts; the connection feeds it and writes
//! what it returns.

use std::collections::{HashMap, HashSet};

use base64::Engine;
use irc_proto::{Command, Message, Response};

use super::{
    connection::{ConnError, Identity, Sasl, classify_error},
    wire::{UnsafeParam, WireLine},
};
use crate::names::NameRules;

/// Capabilities requested when the server offers them.
const WANTED_CAPS: [&str; 7] = [
    "server-time",
    "message-tags",
    "echo-message",
    "multi-prefix",
    "batch",
    "draft/chathistory",
    "account-tag",
];

/// `_` suffixes tried on a taken nick, at most.
const MAX_SUFFIXES: usize = 8;

/// Where registration stands after a message from the server.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Progress {
    /// Write these lines (possibly none) and read on.
    Write(Vec<WireLine>),
    /// The server welcomed us: [`Registration::nick`] and
    /// [`Registration::caps`] are final.
    Welcomed,
}

/// One registration attempt, from the first lines to `001`.
pub(super) struct Registration<'a> {
    identity: &'a Identity,
    fallbacks: std::slice::Iter<'a, String>,
    nick: String,
    offered: HashMap<String, String>,
    caps: HashSet<String>,
    suffixes: usize,
    /// Whether the server said the SASL login succeeded.
    logged_in: bool,
}

impl<'a> Registration<'a> {
    /// A registration as `identity`, trying `fallbacks` in order when its
    /// nick is taken.
    pub(super) fn new(identity: &'a Identity, fallbacks: &'a [String]) -> Self {
        Self {
            identity,
            fallbacks: fallbacks.iter(),
            nick: identity.nick.clone(),
            offered: HashMap::new(),
            caps: HashSet::new(),
            suffixes: 0,
            logged_in: false,
        }
    }

    /// The nick being registered (the server's choice once welcomed).
    pub(super) fn nick(&self) -> &str {
        &self.nick
    }

    /// The capabilities the server acknowledged.
    pub(super) fn into_caps(self) -> HashSet<String> {
        self.caps
    }

    /// The first lines: `CAP LS 302`, `PASS` when the network wants one,
    /// `NICK` and `USER`.
    pub(super) fn start(&self, password: Option<&str>) -> Result<Vec<WireLine>, ConnError> {
        let mut lines = vec![line("CAP", &["LS", "302"])?];
        if let Some(password) = password {
            lines.push(line("PASS", &[password])?);
        }
        lines.push(line("NICK", &[&self.nick])?);
        lines.push(line(
            "USER",
            &[&self.identity.user, "0", "*", &self.identity.realname],
        )?);
        Ok(lines)
    }

    /// What to do after `message`; an error ends the attempt.
    pub(super) fn on_message(&mut self, message: &Message) -> Result<Progress, ConnError> {
        let lines = match &message.command {
            Command::PING(token, _) => vec![line("PONG", &[token])?],
            Command::ERROR(text) => return Err(classify_error(text)),
            Command::CAP(_, sub, arg, last) => {
                // `CAP * LS * :caps` (more follow) or `CAP * LS :caps`.
                let (more, list) = match (arg.as_deref(), last.as_deref()) {
                    (Some("*"), Some(list)) => (true, list),
                    (Some(list), None) | (None, Some(list)) | (Some(_), Some(list)) => {
                        (false, list)
                    }
                    (None, None) => (false, ""),
                };
                self.on_cap(sub.to_str(), more, list)?
            }
            Command::AUTHENTICATE(arg) if arg == "+" => match &self.identity.sasl {
                Some(sasl) => sasl_plain_chunks(sasl)
                    .iter()
                    .map(|chunk| line("AUTHENTICATE", &[chunk]))
                    .collect::<Result<_, _>>()?,
                None => Vec::new(),
            },
            Command::Response(code, params) => return self.on_numeric(*code, params),
            _ => Vec::new(),
        };
        Ok(Progress::Write(lines))
    }

    fn on_cap(&mut self, sub: &str, more: bool, list: &str) -> Result<Vec<WireLine>, ConnError> {
        let caps = list.split(' ').filter(|c| !c.is_empty());
        match sub {
            "LS" => {
                for cap in caps {
                    let (name, value) = cap.split_once('=').unwrap_or((cap, ""));
                    self.offered.insert(name.to_owned(), value.to_owned());
                }
                if more {
                    return Ok(Vec::new());
                }
                let mut request: Vec<&str> = WANTED_CAPS
                    .iter()
                    .copied()
                    .filter(|c| self.offered.contains_key(*c))
                    .collect();
                if self.identity.sasl.is_some() {
                    if !self.offered.contains_key("sasl") {
                        return Err(self.sasl_failed("the server does not offer SASL"));
                    }
                    request.push("sasl");
                }
                if request.is_empty() {
                    Ok(vec![cap_end()?])
                } else {
                    Ok(vec![line("CAP", &["REQ", &request.join(" ")])?])
                }
            }
            "ACK" => {
                for cap in caps {
                    self.caps
                        .insert(cap.trim_start_matches(['-', '~', '=']).to_owned());
                }
                if self.caps.contains("sasl") && self.identity.sasl.is_some() {
                    Ok(vec![line("AUTHENTICATE", &["PLAIN"])?])
                } else {
                    Ok(vec![cap_end()?])
                }
            }
            "NAK" => {
                if self.identity.sasl.is_some() && list.split(' ').any(|c| c == "sasl") {
                    return Err(self.sasl_failed("the server refused the sasl capability"));
                }
                Ok(vec![cap_end()?])
            }
            _ => Ok(Vec::new()),
        }
    }

    fn on_numeric(&mut self, code: Response, params: &[String]) -> Result<Progress, ConnError> {
        let reason = || params.last().cloned().unwrap_or_default();
        let lines = match code {
            Response::RPL_WELCOME => {
                // A server that ignores CAP welcomes NICK and USER at once:
                // never connect without the login the config asks for.
                if self.identity.sasl.is_some() && !self.logged_in {
                    return Err(self.sasl_failed(
                        "the server registered the connection without SASL (it does not negotiate IRCv3 capabilities; unset chat.irc.sasl_account to connect without logging in)",
                    ));
                }
                if let Some(nick) = params.first() {
                    self.nick.clone_from(nick);
                }
                return Ok(Progress::Welcomed);
            }
            Response::RPL_SASLSUCCESS => {
                self.logged_in = true;
                vec![cap_end()?]
            }
            Response::ERR_SASLFAIL
            | Response::ERR_SASLTOOLONG
            | Response::ERR_SASLABORT
            | Response::ERR_NICKLOCKED => return Err(self.sasl_failed(reason())),
            Response::ERR_NICKNAMEINUSE
            | Response::ERR_NICKCOLLISION
            | Response::ERR_UNAVAILRESOURCE => vec![self.next_nick()?],
            Response::ERR_ERRONEOUSNICKNAME | Response::ERR_NONICKNAMEGIVEN => {
                vec![self.shorter_nick(reason())?]
            }
            Response::ERR_PASSWDMISMATCH | Response::ERR_YOUREBANNEDCREEP => {
                return Err(ConnError::Closed(reason()));
            }
            _ => Vec::new(),
        };
        Ok(Progress::Write(lines))
    }

    /// Our nick is taken: the next fallback, else the nick with one more
    /// `_` when the identity allows it, else a clear error.
    fn next_nick(&mut self) -> Result<WireLine, ConnError> {
        if let Some(next) = self.fallbacks.next() {
            tracing::info!(taken = %self.nick, trying = %next, "IRC nick in use; trying another");
            self.nick.clone_from(next);
        } else if self.identity.suffix_on_collision
            && self.nick.len() < NameRules::default().nicklen
            && self.suffixes < MAX_SUFFIXES
        {
            self.suffixes += 1;
            self.nick.push('_');
        } else {
            return Err(ConnError::NickInUse(self.identity.nick.clone()));
        }
        line("NICK", &[&self.nick])
    }

    /// The server refused our nick as invalid: it may be too long for it
    /// (the default `switchboard` on a server with RFC 1459's nine), so on to
    /// a shorter fallback; without one (a configured nick has none) it is an
    /// error.
    fn shorter_nick(&mut self, reason: String) -> Result<WireLine, ConnError> {
        let length = self.nick.chars().count();
        if let Some(next) = self.fallbacks.find(|f| f.chars().count() < length) {
            tracing::info!(refused = %self.nick, trying = %next, "IRC nick refused; trying a shorter one");
            self.nick.clone_from(next);
            return line("NICK", &[&self.nick]);
        }
        Err(ConnError::BadNick {
            nick: self.nick.clone(),
            reason,
        })
    }

    fn sasl_failed(&self, reason: impl Into<String>) -> ConnError {
        ConnError::SaslFailed {
            account: self
                .identity
                .sasl
                .as_ref()
                .map(|s| s.account.clone())
                .unwrap_or_default(),
            reason: reason.into(),
        }
    }
}

fn line(command: &'static str, params: &[&str]) -> Result<WireLine, ConnError> {
    WireLine::new(command, params).map_err(|e: UnsafeParam| ConnError::Unsafe(e.to_string()))
}

fn cap_end() -> Result<WireLine, ConnError> {
    line("CAP", &["END"])
}

/// `AUTHENTICATE` payloads for SASL PLAIN: base64 of
/// `account\0account\0password`, in 400-byte chunks, with a final `+` when
/// the last chunk is exactly 400 bytes.
fn sasl_plain_chunks(sasl: &Sasl) -> Vec<String> {
    let raw = format!("{}\0{}\0{}", sasl.account, sasl.account, sasl.password);
    let encoded = base64::engine::general_purpose::STANDARD.encode(raw);
    let mut chunks: Vec<String> = encoded
        .as_bytes()
        .chunks(400)
        .map(|c| String::from_utf8_lossy(c).into_owned())
        .collect();
    if chunks.last().is_none_or(|c| c.len() == 400) {
        chunks.push("+".into());
    }
    chunks
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::irc::wire;

    fn identity(sasl: bool) -> Identity {
        Identity {
            nick: "bot".into(),
            user: "sb".into(),
            realname: "switchboard".into(),
            sasl: sasl.then(|| Sasl {
                account: "acct".into(),
                password: "pw".into(),
            }),
            suffix_on_collision: false,
            persistent: false,
        }
    }

    /// Feeds a server line; the lines written in answer, or the outcome.
    fn feed(r: &mut Registration<'_>, server: &str) -> Result<Vec<String>, ConnError> {
        let message = wire::parse(server).expect("a valid test line");
        Ok(match r.on_message(&message)? {
            Progress::Write(lines) => lines.iter().map(|l| l.as_str().to_owned()).collect(),
            Progress::Welcomed => vec!["<welcomed>".into()],
        })
    }

    #[test]
    fn capabilities_offered_over_several_lines_are_requested_once() {
        let id = identity(false);
        let mut r = Registration::new(&id, &[]);
        let start: Vec<_> = r.start(Some("secret")).unwrap();
        let start: Vec<&str> = start.iter().map(WireLine::as_str).collect();
        assert_eq!(
            start,
            [
                "CAP LS 302\r\n",
                "PASS secret\r\n",
                "NICK bot\r\n",
                "USER sb 0 * switchboard\r\n"
            ]
        );
        assert!(
            feed(&mut r, ":irc CAP * LS * :batch server-time=x")
                .unwrap()
                .is_empty()
        );
        assert_eq!(
            feed(&mut r, ":irc CAP * LS :echo-message sasl").unwrap(),
            ["CAP REQ :server-time echo-message batch\r\n"]
        );
        assert_eq!(
            feed(&mut r, ":irc CAP * ACK :server-time echo-message batch").unwrap(),
            ["CAP END\r\n"]
        );
        assert_eq!(feed(&mut r, "PING :t1").unwrap(), ["PONG t1\r\n"]);
        assert_eq!(
            feed(&mut r, ":irc 001 bot_ :Welcome").unwrap(),
            ["<welcomed>"]
        );
        assert_eq!(r.nick(), "bot_");
        assert!(r.into_caps().contains("echo-message"));
    }

    #[test]
    fn sasl_plain_logs_in_then_ends_negotiation() {
        let id = identity(true);
        let mut r = Registration::new(&id, &[]);
        assert_eq!(
            feed(&mut r, ":irc CAP * LS :sasl").unwrap(),
            ["CAP REQ sasl\r\n"]
        );
        assert_eq!(
            feed(&mut r, ":irc CAP * ACK :sasl").unwrap(),
            ["AUTHENTICATE PLAIN\r\n"]
        );
        assert_eq!(
            feed(&mut r, "AUTHENTICATE +").unwrap(),
            ["AUTHENTICATE YWNjdABhY2N0AHB3\r\n"]
        );
        assert_eq!(
            feed(&mut r, ":irc 903 bot :SASL authentication successful").unwrap(),
            ["CAP END\r\n"]
        );
        assert!(matches!(
            feed(&mut r, ":irc 904 bot :SASL authentication failed"),
            Err(ConnError::SaslFailed { account, .. }) if account == "acct"
        ));
    }

    #[test]
    fn a_welcome_before_the_sasl_login_is_an_error() {
        let id = identity(true);
        // A server without IRCv3: CAP is an unknown command, NICK and USER
        // register at once.
        let mut r = Registration::new(&id, &[]);
        assert!(
            feed(&mut r, ":irc 421 * CAP :Unknown command")
                .unwrap()
                .is_empty()
        );
        assert!(matches!(
            feed(&mut r, ":irc 001 bot :Welcome"),
            Err(ConnError::SaslFailed { account, reason })
                if account == "acct" && reason.contains("without SASL")
        ));
        // Logged in first, the welcome is the end of registration.
        let mut r = Registration::new(&id, &[]);
        feed(&mut r, ":irc CAP * LS :sasl").unwrap();
        feed(&mut r, ":irc CAP * ACK :sasl").unwrap();
        feed(&mut r, "AUTHENTICATE +").unwrap();
        feed(&mut r, ":irc 903 bot :SASL authentication successful").unwrap();
        assert_eq!(
            feed(&mut r, ":irc 001 bot :Welcome").unwrap(),
            ["<welcomed>"]
        );
    }

    #[test]
    fn sasl_without_the_capability_is_an_error() {
        let id = identity(true);
        let mut r = Registration::new(&id, &[]);
        assert!(matches!(
            feed(&mut r, ":irc CAP * LS :batch"),
            Err(ConnError::SaslFailed { reason, .. }) if reason.contains("does not offer")
        ));
    }

    #[test]
    fn a_taken_nick_moves_through_fallbacks_then_fails_naming_the_nick() {
        let id = identity(false);
        let fallbacks = vec!["bot-host".to_owned(), "bot-2".to_owned()];
        let mut r = Registration::new(&id, &fallbacks);
        let taken = ":irc 433 * bot :Nickname is already in use";
        assert_eq!(feed(&mut r, taken).unwrap(), ["NICK bot-host\r\n"]);
        assert_eq!(feed(&mut r, taken).unwrap(), ["NICK bot-2\r\n"]);
        assert_eq!(feed(&mut r, taken), Err(ConnError::NickInUse("bot".into())));
    }

    #[test]
    fn a_fallback_too_long_for_the_server_gives_way_to_a_shorter_one() {
        let id = identity(false);
        let fallbacks = vec!["bot-a-very-long-host".to_owned(), "bot-2".to_owned()];
        let mut r = Registration::new(&id, &fallbacks);
        feed(&mut r, ":irc 433 * bot :in use").unwrap();
        assert_eq!(
            feed(
                &mut r,
                ":irc 432 * bot-a-very-long-host :Erroneous nickname"
            )
            .unwrap(),
            ["NICK bot-2\r\n"]
        );
        let mut r = Registration::new(&id, &fallbacks);
        assert!(matches!(
            feed(&mut r, ":irc 432 * bot :Erroneous nickname"),
            Err(ConnError::BadNick { nick, .. }) if nick == "bot"
        ));
        // The default nick itself, too long for a server allowing nine.
        let mut id = identity(false);
        id.nick = "switchboard".into();
        let fallbacks = crate::irc::nicks::fallbacks("switchboard", "host");
        let mut r = Registration::new(&id, &fallbacks);
        assert_eq!(
            feed(
                &mut r,
                ":irc 432 * switchboard :Nickname too long, max. 9 characters"
            )
            .unwrap(),
            ["NICK switchboa\r\n"]
        );
        assert_eq!(
            feed(&mut r, ":irc 433 * switchboa :in use").unwrap(),
            ["NICK switchb-2\r\n"]
        );
    }

    #[test]
    fn suffixes_are_bounded() {
        let mut id = identity(false);
        id.suffix_on_collision = true;
        let mut r = Registration::new(&id, &[]);
        let taken = ":irc 433 * x :in use";
        for n in 1..=MAX_SUFFIXES {
            assert_eq!(
                feed(&mut r, taken).unwrap(),
                [format!("NICK bot{}\r\n", "_".repeat(n))]
            );
        }
        assert_eq!(feed(&mut r, taken), Err(ConnError::NickInUse("bot".into())));
    }

    #[test]
    fn sasl_plain_payload_is_base64_in_400_byte_chunks() {
        let short = sasl_plain_chunks(&Sasl {
            account: "bot".into(),
            password: "pw".into(),
        });
        assert_eq!(short, ["Ym90AGJvdABwdw=="]);
        let long = sasl_plain_chunks(&Sasl {
            account: "a".into(),
            password: "p".repeat(297),
        });
        // 1+1+1+1+297 = 301 bytes -> 404 base64 chars: a full chunk and 4 more.
        assert_eq!(long.iter().map(String::len).collect::<Vec<_>>(), [400, 4]);
        // 300 bytes -> exactly 400 chars: a final "+" says there is no more.
        let exact = sasl_plain_chunks(&Sasl {
            account: "a".repeat(149),
            password: String::new(),
        });
        assert_eq!(exact.iter().map(String::len).collect::<Vec<_>>(), [400, 1]);
        assert_eq!(exact[1], "+");
    }

    #[test]
    fn a_server_error_ends_registration() {
        let id = identity(false);
        let mut r = Registration::new(&id, &[]);
        assert!(feed(&mut r, "ERROR :Closing link: banned").is_err());
    }
}
