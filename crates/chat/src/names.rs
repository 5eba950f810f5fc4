//! Channel names and nicks: normalisation, validation and case folding.
//!
//! The rules come from the backend (an IRC server announces them in
//! ISUPPORT; the local hub uses IRC-compatible defaults), so a name that the
//! local hub accepts is one an IRC network would accept too.

use std::fmt;

/// How a network compares names case-insensitively (ISUPPORT `CASEMAPPING`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CaseMapping {
    Ascii,
    /// ASCII plus `[]\~` as the upper case of `{}|^`.
    #[default]
    Rfc1459,
    /// ASCII plus `[]\` as the upper case of `{}|`.
    StrictRfc1459,
}

impl CaseMapping {
    /// Parses an ISUPPORT `CASEMAPPING` value; unknown mappings fold as ASCII.
    pub(crate) fn from_isupport(value: &str) -> Self {
        match value.to_ascii_lowercase().as_str() {
            "rfc1459" => Self::Rfc1459,
            "strict-rfc1459" => Self::StrictRfc1459,
            _ => Self::Ascii,
        }
    }

    /// The key under which `name` is compared and stored.
    pub fn fold(self, name: &str) -> String {
        name.chars()
            .map(|c| match (self, c) {
                (_, 'A'..='Z') => c.to_ascii_lowercase(),
                (Self::Rfc1459 | Self::StrictRfc1459, '[') => '{',
                (Self::Rfc1459 | Self::StrictRfc1459, ']') => '}',
                (Self::Rfc1459 | Self::StrictRfc1459, '\\') => '|',
                (Self::Rfc1459, '~') => '^',
                _ => c,
            })
            .collect()
    }
}

/// The naming rules of the network a backend talks to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameRules {
    /// Characters that may start a channel name (ISUPPORT `CHANTYPES`).
    pub chantypes: String,
    /// Longest channel name in bytes, prefix included (ISUPPORT `CHANNELLEN`).
    pub channellen: usize,
    /// Longest nick in bytes (ISUPPORT `NICKLEN`).
    pub nicklen: usize,
    pub casemapping: CaseMapping,
}

impl Default for NameRules {
    /// What the local hub uses: the limits of a typical modern IRC server.
    fn default() -> Self {
        Self {
            chantypes: "#".into(),
            channellen: 64,
            nicklen: 31,
            casemapping: CaseMapping::Rfc1459,
        }
    }
}

/// A valid, normalised channel name, with its case-folded key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Channel {
    name: String,
    key: String,
}

impl Channel {
    /// The name as the user wrote it, with its prefix: `#Agents`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The case-folded form used to compare and store: `#agents`.
    pub fn key(&self) -> &str {
        &self.key
    }
}

impl fmt::Display for Channel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

/// A valid nick, with its case-folded key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Nick {
    name: String,
    key: String,
}

impl Nick {
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn key(&self) -> &str {
        &self.key
    }
}

impl fmt::Display for Nick {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

/// Why a channel name or nick was refused. The message quotes the input
/// (with control characters escaped) and says what is allowed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("channel name is empty; use a name such as #general")]
    EmptyChannel,
    #[error("channel {shown} contains {what}, which channel names cannot contain")]
    ChannelChar { shown: String, what: &'static str },
    #[error("channel {shown} is {len} bytes long; this network allows at most {max}")]
    ChannelTooLong {
        shown: String,
        len: usize,
        max: usize,
    },
    #[error(
        "channel {shown} starts with {prefix:?}, but this network's channels start with one of {allowed:?}"
    )]
    ChannelPrefix {
        shown: String,
        prefix: char,
        allowed: String,
    },
    #[error("nick is empty; give a nick such as alice")]
    EmptyNick,
    #[error("nick {shown} is {len} bytes long; this network allows at most {max}")]
    NickTooLong {
        shown: String,
        len: usize,
        max: usize,
    },
    #[error(
        "nick {shown} {problem}; nicks start with an ASCII letter (a-z, A-Z) or one of _[]\\`^{{|}}, and go on with those, digits and -"
    )]
    NickChar { shown: String, problem: String },
}

/// Quotes user input for an error message with control characters escaped,
/// so that a bad name can never break the line it is reported on.
fn shown(input: &str) -> String {
    const MAX: usize = 80;
    let mut out: String = input
        .chars()
        .take(MAX)
        .collect::<String>()
        .escape_debug()
        .to_string();
    if input.chars().count() > MAX {
        out.push('…');
    }
    format!("\"{out}\"")
}

fn forbidden_channel_char(c: char) -> Option<&'static str> {
    match c {
        ' ' => Some("a space"),
        ',' => Some("a comma"),
        '\x07' => Some("a BEL character"),
        '\r' => Some("a carriage return"),
        '\n' => Some("a line feed"),
        '\0' => Some("a NUL character"),
        c if c.is_control() => Some("a control character"),
        c if c.is_whitespace() => Some("a space character"),
        c if crate::text::is_invisible(c) => Some("an invisible character"),
        _ => None,
    }
}

/// Characters that start a channel on some IRC network; a name starting with
/// one that this network does not use is refused rather than prefixed.
const ANY_CHANTYPE: &str = "#&+!";

impl NameRules {
    /// Validates a channel name and adds the default prefix when it has none
    /// (`agents` becomes `#agents`).
    pub fn channel(&self, raw: &str) -> Result<Channel, NameError> {
        let default_prefix = self.chantypes.chars().next().unwrap_or('#');
        let first = raw.chars().next().ok_or(NameError::EmptyChannel)?;
        let name = if self.chantypes.contains(first) {
            raw.to_owned()
        } else if ANY_CHANTYPE.contains(first) {
            return Err(NameError::ChannelPrefix {
                shown: shown(raw),
                prefix: first,
                allowed: self.chantypes.clone(),
            });
        } else {
            format!("{default_prefix}{raw}")
        };
        if name.chars().count() == 1 {
            return Err(NameError::EmptyChannel);
        }
        if let Some(what) = name.chars().find_map(forbidden_channel_char) {
            return Err(NameError::ChannelChar {
                shown: shown(raw),
                what,
            });
        }
        if name.len() > self.channellen {
            return Err(NameError::ChannelTooLong {
                shown: shown(raw),
                len: name.len(),
                max: self.channellen,
            });
        }
        let key = self.casemapping.fold(&name);
        Ok(Channel { name, key })
    }

    /// Validates a nick against RFC 2812's grammar and this network's length.
    pub fn nick(&self, raw: &str) -> Result<Nick, NameError> {
        const SPECIAL: &str = "_[]\\`^{|}";
        let first = raw.chars().next().ok_or(NameError::EmptyNick)?;
        if raw.len() > self.nicklen {
            return Err(NameError::NickTooLong {
                shown: shown(raw),
                len: raw.len(),
                max: self.nicklen,
            });
        }
        if !(first.is_ascii_alphabetic() || SPECIAL.contains(first)) {
            return Err(NameError::NickChar {
                shown: shown(raw),
                problem: format!("starts with {}", describe(first)),
            });
        }
        if let Some(bad) = raw
            .chars()
            .find(|&c| !(c.is_ascii_alphanumeric() || c == '-' || SPECIAL.contains(c)))
        {
            return Err(NameError::NickChar {
                shown: shown(raw),
                problem: format!("contains {}", describe(bad)),
            });
        }
        Ok(Nick {
            name: raw.to_owned(),
            key: self.casemapping.fold(raw),
        })
    }

    /// The case-folded key of a name that is already known to be valid.
    pub fn fold(&self, name: &str) -> String {
        self.casemapping.fold(name)
    }
}

fn describe(c: char) -> String {
    match c {
        ' ' => "a space".into(),
        c if c.is_control() => format!("the control character {:?}", c),
        c => format!("{c:?}"),
    }
}

/// The nick an agent goes by until it chooses one: its program's name (the
/// kernel's, say `claude`) with its pid, `claude-4242`. Letters, digits,
/// `-` and `_` are kept, a letter comes first, and it fits the 31 bytes
/// every network allows.
pub fn nick_for_process(name: &str, pid: u32) -> String {
    let mut base: String = name
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
        .take(20)
        .collect();
    if !base.starts_with(|c: char| c.is_ascii_alphabetic()) {
        base.insert_str(0, "agent");
    }
    format!("{base}-{pid}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> NameRules {
        NameRules::default()
    }

    #[test]
    fn channel_without_prefix_gets_the_default_one() {
        let c = rules().channel("agents").unwrap();
        assert_eq!(c.name(), "#agents");
        assert_eq!(c.key(), "#agents");
        assert_eq!(rules().channel("#Agents").unwrap().key(), "#agents");
    }

    #[test]
    fn channel_refuses_each_forbidden_character() {
        for (raw, what) in [
            ("#a b", "a space"),
            ("#a,b", "a comma"),
            ("#a\x07b", "a BEL character"),
            ("#a\rb", "a carriage return"),
            ("#a\nb", "a line feed"),
            ("#a\0b", "a NUL character"),
            ("#a\u{a0}b", "a space character"),
            ("#a\u{2028}b", "a space character"),
            ("#a\u{200b}b", "an invisible character"),
            ("#a\u{202e}b", "an invisible character"),
            ("#a\u{feff}b", "an invisible character"),
        ] {
            let err = rules().channel(raw).unwrap_err();
            assert!(
                matches!(&err, NameError::ChannelChar { what: w, .. } if *w == what),
                "{raw:?}: {err}"
            );
            assert!(!err.to_string().contains('\r') && !err.to_string().contains('\n'));
        }
    }

    #[test]
    fn channel_length_counts_bytes_with_prefix() {
        let ok = "a".repeat(63);
        assert!(rules().channel(&ok).is_ok());
        let long = "a".repeat(64);
        let err = rules().channel(&long).unwrap_err();
        assert!(matches!(
            err,
            NameError::ChannelTooLong {
                len: 65,
                max: 64,
                ..
            }
        ));
    }

    #[test]
    fn channel_empty_or_bare_prefix_is_refused() {
        assert_eq!(rules().channel("").unwrap_err(), NameError::EmptyChannel);
        assert_eq!(rules().channel("#").unwrap_err(), NameError::EmptyChannel);
    }

    #[test]
    fn channel_with_a_prefix_the_network_lacks_is_refused() {
        let err = rules().channel("&local").unwrap_err();
        assert!(matches!(err, NameError::ChannelPrefix { prefix: '&', .. }));
        let amp = NameRules {
            chantypes: "#&".into(),
            ..rules()
        };
        assert_eq!(amp.channel("&local").unwrap().name(), "&local");
    }

    #[test]
    fn nicks_follow_the_irc_grammar() {
        assert_eq!(rules().nick("alice").unwrap().name(), "alice");
        assert_eq!(rules().nick("[Bot]`-1").unwrap().key(), "{bot}`-1");
        for bad in [
            "",
            "1abc",
            "-x",
            "al ice",
            "a:b",
            "#chan",
            "émile",
            "a\r\nQUIT",
        ] {
            assert!(rules().nick(bad).is_err(), "{bad:?} must be refused");
        }
        let err = rules().nick(&"a".repeat(32)).unwrap_err();
        assert!(matches!(
            err,
            NameError::NickTooLong {
                len: 32,
                max: 31,
                ..
            }
        ));
    }

    #[test]
    fn casemappings_fold_as_announced() {
        assert_eq!(CaseMapping::Rfc1459.fold("A[]\\~"), "a{}|^");
        assert_eq!(CaseMapping::StrictRfc1459.fold("A[]\\~"), "a{}|~");
        assert_eq!(CaseMapping::Ascii.fold("A[]"), "a[]");
        assert_eq!(CaseMapping::from_isupport("ascii"), CaseMapping::Ascii);
    }

    #[test]
    fn errors_escape_control_characters() {
        let err = rules().nick("x\r\nQUIT :bye").unwrap_err().to_string();
        assert!(err.contains("\\r\\n"), "{err}");
    }

    #[test]
    fn default_nicks_are_valid_irc_nicks() {
        assert_eq!(nick_for_process("claude", 4242), "claude-4242");
        assert_eq!(nick_for_process("node (v22)", 7), "nodev22-7");
        assert_eq!(nick_for_process("9lives", 1), "agent9lives-1");
        assert_eq!(nick_for_process("", 5), "agent-5");
        let long = nick_for_process(&"x".repeat(50), u32::MAX);
        assert!(long.len() <= 31, "{long}");
        let rules = NameRules::default();
        for nick in [nick_for_process("ünïcode", 3), long] {
            assert!(rules.nick(&nick).is_ok(), "{nick}");
        }
    }
}
