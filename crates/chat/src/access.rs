//! What a caller's token lets it do in chat: the nicks it may speak as, the
//! channels it may read and write, and its sends a minute (see
//! [`Grant`]). Tools and the web view ask an [`Access`] before acting, so a
//! refusal changes nothing; every refusal is logged with the token's name.
//!
//! Patterns are folded with the network's case mapping, as names are, so
//! `#Team-*` allows `#team-web`.

use std::sync::Arc;

use serde_json::json;
use switchboard_toolset::{Grant, Rules, ToolError, glob_match};

use crate::{
    names::{Channel, NameRules, Nick},
    tools::TOOLSET,
};

/// A caller's view of its grant; no grant allows everything. The rules are
/// read at each question, so a long-lived holder (a stream) follows a
/// reload, and a revoked token is allowed nothing.
pub struct Access {
    grant: Option<Arc<Grant>>,
    names: NameRules,
}

impl Access {
    pub fn new(grant: Option<&Arc<Grant>>, names: NameRules) -> Self {
        Self {
            grant: grant.cloned(),
            names,
        }
    }

    /// The grant and its rules now.
    fn rules(&self) -> Option<(&Grant, Arc<Rules>)> {
        self.grant.as_ref().map(|g| (&**g, g.rules()))
    }

    /// Whether the token has been removed from the config (or its secret
    /// changed) since: it is allowed nothing any more.
    pub fn revoked(&self) -> bool {
        self.rules().is_some_and(|(_, rules)| rules.revoked)
    }

    /// The token's name, for messages.
    fn token(&self) -> &str {
        self.grant.as_ref().map_or("", |g| g.name())
    }

    /// The nick a caller that names none speaks as: the token's own.
    pub fn default_nick(&self) -> Option<String> {
        self.rules()
            .and_then(|(_, r)| r.default_nick().map(str::to_owned))
    }

    /// The nick patterns of a token that names no plain nick (only globs
    /// such as `bot-*`), for a caller that must pick one.
    pub(crate) fn nick_patterns(&self) -> Option<String> {
        self.rules()
            .filter(|(_, r)| r.default_nick().is_none())
            .map(|(_, r)| r.nicks.join(", "))
    }

    /// Whether the token's holder is a person.
    pub fn human(&self) -> bool {
        self.rules().is_some_and(|(_, r)| r.human)
    }

    /// Whether the token is an agent's (not `human`): what it says is an
    /// agent's wherever it says it, the web view too.
    pub fn agent(&self) -> bool {
        self.rules().is_some_and(|(_, r)| !r.human)
    }

    /// Refuses a token that may not use the chat tools: the web view is
    /// chat too, so such a token may not use it either.
    pub fn chat(&self) -> Result<(), ToolError> {
        match &self.grant {
            Some(grant) if !grant.may_use(TOOLSET) => Err(ToolError::new(format!(
                "the token {:?} may not use the {TOOLSET} tools (nor the web view); add \"{TOOLSET}\" to its tools in [[http.tokens]]",
                grant.name()
            ))),
            _ => Ok(()),
        }
    }

    /// Refuses `nick` unless the token may speak as it (or read its inbox).
    pub fn nick(&self, nick: &Nick) -> Result<(), ToolError> {
        let Some((grant, rules)) = self.rules() else {
            return Ok(());
        };
        if !rules.revoked && self.matches(&rules.nicks, nick.key()) {
            return Ok(());
        }
        tracing::warn!(
            token = grant.name(),
            nick = nick.name(),
            "refused a nick the token does not hold"
        );
        if rules.revoked {
            return Err(revoked(grant.name()));
        }
        Err(ToolError::new(format!(
            "the token {:?} may act only as {}, not as {}; leave out sender/nick to use {}",
            self.token(),
            rules.nicks.join(", "),
            nick.name(),
            rules.default_nick().unwrap_or("your own nick"),
        )))
    }

    /// Refuses `channel` unless the token may read and write it.
    pub fn channel(&self, channel: &Channel) -> Result<(), ToolError> {
        if self.allows(channel.name()) {
            return Ok(());
        }
        tracing::warn!(
            token = self.token(),
            channel = channel.name(),
            "refused a channel the token does not open"
        );
        let open = match self.rules() {
            Some((_, rules)) if rules.revoked => return Err(revoked(self.token())),
            Some((_, rules)) if !rules.channels.is_empty() => {
                format!("it may use {}", rules.channels.join(", "))
            }
            _ => "it opens no channel".to_owned(),
        };
        Err(ToolError::new(format!(
            "the token {:?} may not use {channel}; {open}",
            self.token()
        )))
    }

    /// Whether the channel called `name` is open to the token.
    pub fn allows(&self, name: &str) -> bool {
        match self.rules() {
            None => true,
            Some((_, rules)) => {
                !rules.revoked && self.matches(&rules.channels, &self.names.fold(name))
            }
        }
    }

    /// Whether the token restricts channels at all (then listings filter).
    pub fn restricts_channels(&self) -> bool {
        self.rules()
            .is_some_and(|(_, r)| !r.channels.iter().any(|c| c == "*"))
    }

    /// Takes `messages` sends (one a line of the text) from the token's
    /// budget, or refuses saying when to retry (`retry_after`, in seconds,
    /// for programs).
    pub fn send(&self, messages: usize) -> Result<(), ToolError> {
        let Some((grant, rules)) = self.rules() else {
            return Ok(());
        };
        if let Some(limit) = rules.sends_per_minute
            && messages > limit as usize
        {
            tracing::warn!(
                token = grant.name(),
                lines = messages,
                limit,
                "refused a text of more lines than the token may send a minute"
            );
            return Err(ToolError::new(format!(
                "the token {:?} may send {limit} messages a minute, and this text makes {messages} (one a line); send fewer lines at a time",
                grant.name()
            )));
        }
        let messages = u32::try_from(messages).unwrap_or(u32::MAX);
        grant.take_sends(messages).map_err(|wait| {
            let seconds = wait.as_secs_f64().ceil().max(1.0) as u64;
            tracing::warn!(
                token = grant.name(),
                retry_after = seconds,
                "refused a send over the token's limit"
            );
            ToolError::new(format!(
                "the token {:?} may send {} messages a minute and has sent them; retry in {seconds} s",
                grant.name(),
                rules.sends_per_minute.unwrap_or_default()
            ))
            .with_structured(json!({"retry_after": seconds}))
        })
    }

    fn matches(&self, patterns: &[String], key: &str) -> bool {
        patterns
            .iter()
            .any(|p| glob_match(&self.names.fold(p), key))
    }
}

/// The refusal for a token taken out of the config (or whose secret
/// changed) since the caller presented it.
fn revoked(token: &str) -> ToolError {
    ToolError::new(format!(
        "the token {token:?} is revoked (no longer in the config, or its secret changed); sign in with a current one"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn access(rules: Rules) -> Access {
        Access::new(
            Some(&Arc::new(Grant::new("alice", rules))),
            NameRules::default(),
        )
    }

    #[test]
    fn nicks_and_channels_follow_the_globs_in_any_case() {
        let names = NameRules::default();
        let a = access(Rules {
            nicks: vec!["alice".into(), "alice-*".into()],
            channels: vec!["#Team-*".into(), "#general".into()],
            ..Rules::unrestricted()
        });
        for nick in ["alice", "ALICE", "alice-bot"] {
            assert!(a.nick(&names.nick(nick).unwrap()).is_ok(), "{nick}");
        }
        let refused = a.nick(&names.nick("bob").unwrap()).unwrap_err();
        assert!(
            refused
                .message()
                .contains("\"alice\" may act only as alice, alice-*"),
            "{refused}"
        );
        for channel in ["#team-web", "#TEAM-ops", "#General"] {
            assert!(
                a.channel(&names.channel(channel).unwrap()).is_ok(),
                "{channel}"
            );
        }
        assert!(a.channel(&names.channel("#ops").unwrap()).is_err());
        assert!(a.restricts_channels());
        assert_eq!(a.default_nick().as_deref(), Some("alice"));
        assert_eq!(a.nick_patterns(), None);
    }

    /// A token of globs alone has no nick to fall back on: a caller that
    /// names none is told the patterns it may pick from.
    #[test]
    fn a_token_of_globs_alone_names_its_patterns() {
        let a = access(Rules {
            nicks: vec!["bot-*".into(), "ci-?".into()],
            ..Rules::unrestricted()
        });
        assert_eq!(a.default_nick(), None);
        assert_eq!(a.nick_patterns().as_deref(), Some("bot-*, ci-?"));
    }

    #[test]
    fn a_revoked_token_is_told_so_rather_than_what_it_may_use() {
        let names = NameRules::default();
        let a = access(Rules {
            nicks: vec!["alice".into()],
            channels: vec!["#general".into()],
            revoked: true,
            ..Rules::unrestricted()
        });
        for refused in [
            a.channel(&names.channel("#general").unwrap()).unwrap_err(),
            a.nick(&names.nick("alice").unwrap()).unwrap_err(),
        ] {
            assert!(
                refused.message().contains("\"alice\" is revoked"),
                "{refused}"
            );
        }
    }

    #[test]
    fn no_grant_allows_everything() {
        let names = NameRules::default();
        let a = Access::new(None, names.clone());
        assert!(a.nick(&names.nick("anyone").unwrap()).is_ok());
        assert!(a.allows("#anything") && !a.restricts_channels());
        assert!(a.send(1).is_ok());
    }

    #[test]
    fn past_the_limit_a_send_says_when_to_retry() {
        let a = access(Rules {
            sends_per_minute: Some(1),
            ..Rules::unrestricted()
        });
        assert!(a.send(1).is_ok());
        let refused = a.send(1).unwrap_err();
        assert!(refused.message().contains("retry in"), "{refused}");
        let retry = refused.structured().unwrap()["retry_after"]
            .as_u64()
            .unwrap();
        assert!((1..=60).contains(&retry), "{retry}");
    }
}
