//! What a caller holding a token may do: the toolsets it may use, the nicks
//! it may speak as, the channels it may read and write, and how many
//! messages it may send a minute.
//!
//! A [`Grant`] is shared by every request and session of one token. Its
//! [`Rules`] can be replaced while they run (a config reload), so a session
//! that outlives a reload follows the new rules; a token taken out of the
//! config is [`Rules::revoked`]. The send budget survives a reload.
//!
//! Matching of nicks and channels is left to the toolset that owns them
//! (chat folds case by the network's rules); [`glob_match`] is the pattern
//! language: `*` any run of characters, `?` one character.

use std::{
    sync::{Arc, Mutex, RwLock},
    time::{Duration, Instant},
};

/// The rules one token is held to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rules {
    /// Nicks (globs) it may speak as; the first is its default nick.
    pub nicks: Vec<String>,
    /// Channels (globs) it may read and write.
    pub channels: Vec<String>,
    /// Toolsets it may use, by name; `None` is all of them.
    pub toolsets: Option<Vec<String>>,
    /// Messages it may send a minute; `None` is no limit.
    pub sends_per_minute: Option<u32>,
    /// The holder is a person, not an agent.
    pub human: bool,
    /// The token is no longer in the config: it may do nothing.
    pub revoked: bool,
}

impl Rules {
    /// Everything: a token that only proves the caller may connect.
    pub fn unrestricted() -> Self {
        Self {
            nicks: vec!["*".into()],
            channels: vec!["*".into()],
            toolsets: None,
            sends_per_minute: None,
            human: false,
            revoked: false,
        }
    }

    /// The nick a caller of this token speaks as when it names none: the
    /// first of its nicks that is not a pattern.
    pub fn default_nick(&self) -> Option<&str> {
        self.nicks
            .iter()
            .find(|n| !n.contains(['*', '?']))
            .map(String::as_str)
    }
}

/// One token's rules and send budget.
#[derive(Debug)]
pub struct Grant {
    name: String,
    rules: RwLock<Arc<Rules>>,
    sends: Mutex<Bucket>,
}

impl Grant {
    /// A grant called `name` (for logs and errors: never the secret).
    ///
    /// ```
    /// use switchboard_toolset::{Grant, Rules};
    ///
    /// let grant = Grant::new("alice", Rules { sends_per_minute: Some(2), ..Rules::unrestricted() });
    /// assert!(grant.take_sends(1).is_ok());
    /// assert!(grant.take_sends(1).is_ok());
    /// let wait = grant.take_sends(1).unwrap_err();
    /// assert!(wait.as_secs() >= 29);
    /// ```
    pub fn new(name: impl Into<String>, rules: Rules) -> Self {
        Self {
            name: name.into(),
            sends: Mutex::new(Bucket::new(rules.sends_per_minute)),
            rules: RwLock::new(Arc::new(rules)),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The rules now.
    pub fn rules(&self) -> Arc<Rules> {
        self.rules.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Replaces the rules for every request and session holding this grant.
    pub fn replace(&self, rules: Rules) {
        self.sends
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .resize(rules.sends_per_minute);
        *self.rules.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(rules);
    }

    /// Whether the toolset called `toolset` is open to this token.
    pub fn may_use(&self, toolset: &str) -> bool {
        let rules = self.rules();
        !rules.revoked
            && rules
                .toolsets
                .as_ref()
                .is_none_or(|sets| sets.iter().any(|s| s == toolset))
    }

    /// Takes `messages` sends from the budget, or says how long until there
    /// are that many (a minute when there never will be: more than the
    /// budget holds).
    pub fn take_sends(&self, messages: u32) -> Result<(), Duration> {
        self.sends
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take(Instant::now(), messages)
    }
}

/// A token bucket of `per_minute` sends, refilled evenly over the minute.
#[derive(Debug)]
struct Bucket {
    per_minute: Option<u32>,
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn new(per_minute: Option<u32>) -> Self {
        Self {
            per_minute,
            tokens: per_minute.map_or(0.0, f64::from),
            at: Instant::now(),
        }
    }

    fn resize(&mut self, per_minute: Option<u32>) {
        if per_minute != self.per_minute {
            let now = Instant::now();
            self.refill(now);
            self.per_minute = per_minute;
            self.tokens = self.tokens.min(per_minute.map_or(0.0, f64::from));
        }
    }

    fn refill(&mut self, now: Instant) {
        if let Some(per_minute) = self.per_minute {
            let rate = f64::from(per_minute) / 60.0;
            let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
            self.tokens = (self.tokens + elapsed * rate).min(f64::from(per_minute));
        }
        self.at = now;
    }

    fn take(&mut self, now: Instant, n: u32) -> Result<(), Duration> {
        let Some(per_minute) = self.per_minute else {
            return Ok(());
        };
        self.refill(now);
        let wanted = f64::from(n);
        if self.tokens >= wanted {
            self.tokens -= wanted;
            return Ok(());
        }
        if n > per_minute {
            return Err(Duration::from_secs(60));
        }
        let rate = f64::from(per_minute) / 60.0;
        Err(Duration::from_secs_f64((wanted - self.tokens) / rate))
    }
}

/// Whether `text` matches `pattern`, where `*` is any run of characters
/// (also none) and `?` is one character. Both are compared as given: fold
/// case before calling.
///
/// ```
/// use switchboard_toolset::glob_match;
///
/// assert!(glob_match("#team-*", "#team-web"));
/// assert!(glob_match("agent-?", "agent-7"));
/// assert!(!glob_match("#team-*", "#ops"));
/// ```
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    let (mut pi, mut ti) = (0, 0);
    // Where the last `*` was, and the text position it has been tried up to.
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        match p.get(pi) {
            Some('*') => {
                star = Some((pi, ti));
                pi += 1;
            }
            Some(&c) if c == '?' || c == t[ti] => {
                pi += 1;
                ti += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    pi = sp + 1;
                    ti = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_runs_single_characters_and_literals() {
        for (pattern, text) in [
            ("*", ""),
            ("*", "#anything"),
            ("#a*b", "#ab"),
            ("#a*b", "#axxb"),
            ("#a*b*c", "#a-b-b-c"),
            ("a?c", "abc"),
            ("exact", "exact"),
            ("**", "x"),
        ] {
            assert!(glob_match(pattern, text), "{pattern} ~ {text}");
        }
        for (pattern, text) in [
            ("#a*b", "#abc"),
            ("a?c", "ac"),
            ("exact", "exactly"),
            ("", "x"),
            ("#team-*", "#tea"),
        ] {
            assert!(!glob_match(pattern, text), "{pattern} !~ {text}");
        }
    }

    #[test]
    fn the_budget_refills_over_the_minute_and_survives_a_reload() {
        let start = Instant::now();
        let mut bucket = Bucket::new(Some(60));
        bucket.at = start;
        for _ in 0..60 {
            assert!(bucket.take(start, 1).is_ok());
        }
        let wait = bucket.take(start, 1).unwrap_err();
        assert!(
            wait <= Duration::from_secs(1) && wait > Duration::ZERO,
            "{wait:?}"
        );
        assert!(bucket.take(start + Duration::from_secs(1), 1).is_ok());
        assert!(bucket.take(start + Duration::from_secs(1), 1).is_err());

        let grant = Grant::new(
            "a",
            Rules {
                sends_per_minute: Some(1),
                ..Rules::unrestricted()
            },
        );
        assert!(grant.take_sends(1).is_ok());
        assert!(grant.take_sends(1).is_err());
        // The same limit again keeps the spent budget; a larger one does not refill it.
        grant.replace(Rules {
            sends_per_minute: Some(1),
            ..Rules::unrestricted()
        });
        assert!(grant.take_sends(1).is_err());
        grant.replace(Rules::unrestricted());
        assert!(grant.take_sends(1).is_ok());
    }

    #[test]
    fn a_send_of_several_messages_takes_as_many() {
        let start = Instant::now();
        let mut bucket = Bucket::new(Some(6));
        bucket.at = start;
        assert!(bucket.take(start, 4).is_ok());
        // Two left: three more need one more, 10 s at six a minute.
        let wait = bucket.take(start, 3).unwrap_err();
        assert!(
            wait > Duration::from_secs(9) && wait <= Duration::from_secs(10),
            "{wait:?}"
        );
        assert!(bucket.take(start, 2).is_ok());
        // More than the budget holds never fits.
        assert_eq!(
            bucket.take(start + Duration::from_secs(600), 7),
            Err(Duration::from_secs(60))
        );
    }

    #[test]
    fn a_revoked_or_narrowed_grant_refuses_toolsets() {
        let grant = Grant::new("a", Rules::unrestricted());
        assert!(grant.may_use("docs"));
        grant.replace(Rules {
            toolsets: Some(vec!["chat".into()]),
            ..Rules::unrestricted()
        });
        assert!(grant.may_use("chat") && !grant.may_use("docs"));
        grant.replace(Rules {
            revoked: true,
            ..Rules::unrestricted()
        });
        assert!(!grant.may_use("chat"));
    }

    #[test]
    fn the_default_nick_is_the_first_that_is_not_a_pattern() {
        let rules = Rules {
            nicks: vec!["bot-*".into(), "alice".into()],
            ..Rules::unrestricted()
        };
        assert_eq!(rules.default_nick(), Some("alice"));
        assert_eq!(Rules::unrestricted().default_nick(), None);
    }
}
