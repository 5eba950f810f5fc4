//! ISUPPORT (`005`): what the server announces about its naming rules and
//! limits. Values we do not understand keep their defaults.

use crate::names::{CaseMapping, NameRules};

/// The parts of ISUPPORT switchboard uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerInfo {
    pub rules: NameRules,
    /// Membership prefixes in NAMES replies, e.g. `@+` (from `PREFIX=(ov)@+`).
    pub prefixes: String,
    /// Longest line including CRLF (`LINELEN`), 512 unless announced.
    pub linelen: usize,
    /// The server offers `CHATHISTORY` with at most this many messages a request.
    pub chathistory: Option<usize>,
}

impl Default for ServerInfo {
    /// What to assume before (or without) a `005`: RFC 2812's channel types
    /// and case mapping, with the lengths of modern servers so that a nick
    /// is not refused just because the server has not spoken yet (a server
    /// with smaller limits refuses it with a clear error).
    fn default() -> Self {
        Self {
            rules: NameRules {
                chantypes: "#&".into(),
                ..NameRules::default()
            },
            prefixes: "@+".into(),
            linelen: 512,
            chathistory: None,
        }
    }
}

impl ServerInfo {
    /// Applies one `005` reply's parameters (without the leading nick and the
    /// trailing "are supported by this server").
    pub fn apply<'a>(&mut self, tokens: impl IntoIterator<Item = &'a str>) {
        for token in tokens {
            let (key, value) = token.split_once('=').unwrap_or((token, ""));
            let number = || value.parse::<usize>().ok().filter(|&n| n > 0);
            match key {
                "CHANTYPES" if !value.is_empty() => self.rules.chantypes = value.to_owned(),
                "CHANNELLEN" => {
                    if let Some(n) = number() {
                        self.rules.channellen = n;
                    }
                }
                "NICKLEN" | "MAXNICKLEN" => {
                    if let Some(n) = number() {
                        self.rules.nicklen = n;
                    }
                }
                "CASEMAPPING" => self.rules.casemapping = CaseMapping::from_isupport(value),
                "LINELEN" => {
                    if let Some(n) = number().filter(|&n| n >= 512) {
                        self.linelen = n;
                    }
                }
                "PREFIX" => {
                    if let Some((_, symbols)) = value.split_once(')') {
                        self.prefixes = symbols.to_owned();
                    }
                }
                "CHATHISTORY" => self.chathistory = Some(number().unwrap_or(100)),
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inspircd_style_tokens_are_applied() {
        let mut info = ServerInfo::default();
        info.apply(
            "AWAYLEN=200 CASEMAPPING=ascii CHANNELLEN=64 CHANTYPES=# LINELEN=512 NICKLEN=31 PREFIX=(qaohv)~&@%+ CHATHISTORY=50"
                .split(' '),
        );
        assert_eq!(info.rules.channellen, 64);
        assert_eq!(info.rules.nicklen, 31);
        assert_eq!(info.rules.chantypes, "#");
        assert_eq!(info.rules.casemapping, CaseMapping::Ascii);
        assert_eq!(info.prefixes, "~&@%+");
        assert_eq!(info.chathistory, Some(50));
    }

    #[test]
    fn nonsense_values_keep_the_defaults() {
        let mut info = ServerInfo::default();
        info.apply([
            "NICKLEN=lots",
            "CHANNELLEN=0",
            "LINELEN=12",
            "PREFIX=garbage",
            "=",
            "",
        ]);
        assert_eq!(info, ServerInfo::default());
    }
}
