//! The tokens a server accepts, each with the [`Grant`] it carries.
//!
//! Secrets are kept only as SHA-256 digests. A presented token is hashed
//! once and compared with every digest in constant time, so neither the
//! comparison nor which entry matched shows in the timing. The set can be
//! replaced while the server runs ([`Tokens::reload`]): a token whose name
//! and secret are unchanged keeps its grant (its sessions follow the new
//! rules, its send budget carries on); one that is gone, or whose secret
//! changed, has its old grant revoked.
//!
//! The web view keeps a token's **web key** in its cookie, not the secret:
//! a digest of the secret ([`Tokens::web_key`]). It opens the web view's
//! API ([`Tokens::check_web`]) and nothing else, so whoever reads the
//! cookie holds no bearer token for `/mcp`.

use std::sync::{Arc, RwLock};

use sha2::{Digest, Sha256};

use crate::{Grant, Rules};

/// One token as the config describes it, its secret already read.
pub struct TokenSpec {
    /// Its name, for logs and errors (never the secret).
    pub name: String,
    pub secret: String,
    pub rules: Rules,
}

impl std::fmt::Debug for TokenSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenSpec")
            .field("name", &self.name)
            .field("rules", &self.rules)
            .finish_non_exhaustive()
    }
}

/// The accepted tokens. Cheap to share; [`Tokens::reload`] swaps the set.
#[derive(Default)]
pub struct Tokens {
    entries: RwLock<Arc<[Entry]>>,
}

struct Entry {
    digest: [u8; 32],
    /// The digest of the token's web key.
    web_digest: [u8; 32],
    grant: Arc<Grant>,
}

/// What a reload changed, by token name.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Reloaded {
    pub added: Vec<String>,
    pub changed: Vec<String>,
    pub removed: Vec<String>,
}

impl Tokens {
    /// ```
    /// use switchboard_toolset::{Rules, TokenSpec, Tokens};
    ///
    /// let tokens = Tokens::new(vec![TokenSpec {
    ///     name: "alice".into(),
    ///     secret: "s3cret-s3cret-s3cret".into(),
    ///     rules: Rules::unrestricted(),
    /// }]);
    /// assert_eq!(tokens.check("s3cret-s3cret-s3cret").unwrap().name(), "alice");
    /// assert!(tokens.check("guess").is_none());
    /// ```
    pub fn new(specs: Vec<TokenSpec>) -> Self {
        let tokens = Self::default();
        tokens.reload(specs);
        tokens
    }

    /// Whether any token is configured (then every request needs one).
    pub fn required(&self) -> bool {
        !self.entries().is_empty()
    }

    /// The grant of the token `presented`, if it is one of them.
    pub fn check(&self, presented: &str) -> Option<Arc<Grant>> {
        self.find(&digest(presented.as_bytes()), |entry| &entry.digest)
    }

    /// The web key of the token whose secret is `secret`: what the web
    /// view's cookie carries instead of the secret (64 hex digits).
    ///
    /// ```
    /// use switchboard_toolset::{Rules, TokenSpec, Tokens};
    ///
    /// let secret = "s3cret-s3cret-s3cret";
    /// let tokens = Tokens::new(vec![TokenSpec {
    ///     name: "alice".into(),
    ///     secret: secret.into(),
    ///     rules: Rules::unrestricted(),
    /// }]);
    /// let key = Tokens::web_key(secret);
    /// assert_eq!(key.len(), 64);
    /// assert_eq!(tokens.check_web(&key).unwrap().name(), "alice");
    /// // Not a bearer token, and the secret is no web key.
    /// assert!(tokens.check(&key).is_none());
    /// assert!(tokens.check_web(secret).is_none());
    /// ```
    pub fn web_key(secret: &str) -> String {
        web_key_bytes(secret)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// The grant of the token whose web key ([`Tokens::web_key`]) is
    /// `presented`, if it is one of them.
    pub fn check_web(&self, presented: &str) -> Option<Arc<Grant>> {
        let bytes = presented.as_bytes();
        if bytes.len() != 64 {
            return None;
        }
        let key = (0..32)
            .map(|i| u8::from_str_radix(presented.get(2 * i..2 * i + 2)?, 16).ok())
            .collect::<Option<Vec<u8>>>()?;
        self.find(&digest(&key), |entry| &entry.web_digest)
    }

    /// The grant of the entry whose `field` is `wanted`, compared with
    /// every entry in constant time.
    fn find(&self, wanted: &[u8; 32], field: impl Fn(&Entry) -> &[u8; 32]) -> Option<Arc<Grant>> {
        let mut found = None;
        for entry in self.entries().iter() {
            if constant_time_eq(field(entry), wanted) {
                found = Some(entry.grant.clone());
            }
        }
        found
    }

    /// Replaces the set with `specs`.
    pub fn reload(&self, specs: Vec<TokenSpec>) -> Reloaded {
        let old = self.entries();
        let mut reloaded = Reloaded::default();
        let mut entries = Vec::with_capacity(specs.len());
        for spec in specs {
            let digest = digest(spec.secret.as_bytes());
            let web_digest = self::digest(&web_key_bytes(&spec.secret));
            let kept = old
                .iter()
                .find(|e| e.grant.name() == spec.name && constant_time_eq(&e.digest, &digest));
            let grant = match kept {
                Some(entry) => {
                    if *entry.grant.rules() != spec.rules {
                        reloaded.changed.push(spec.name.clone());
                    }
                    entry.grant.replace(spec.rules);
                    entry.grant.clone()
                }
                None => {
                    if old.iter().any(|e| e.grant.name() == spec.name) {
                        reloaded.changed.push(spec.name.clone());
                    } else {
                        reloaded.added.push(spec.name.clone());
                    }
                    Arc::new(Grant::new(spec.name, spec.rules))
                }
            };
            entries.push(Entry {
                digest,
                web_digest,
                grant,
            });
        }
        for entry in old.iter() {
            if !entries.iter().any(|e| Arc::ptr_eq(&e.grant, &entry.grant)) {
                let mut rules = (*entry.grant.rules()).clone();
                rules.revoked = true;
                entry.grant.replace(rules);
                if !entries.iter().any(|e| e.grant.name() == entry.grant.name()) {
                    reloaded.removed.push(entry.grant.name().to_owned());
                }
            }
        }
        *self.entries.write().unwrap_or_else(|e| e.into_inner()) = entries.into();
        reloaded
    }

    fn entries(&self) -> Arc<[Entry]> {
        self.entries
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

fn digest(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// A token's web key: a digest of its secret under a label of its own, so
/// that it differs from the digest kept to check the secret.
fn web_key_bytes(secret: &str) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(b"switchboard web view key\0");
    hasher.update(secret.as_bytes());
    hasher.finalize().into()
}

fn constant_time_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, secret: &str, rules: Rules) -> TokenSpec {
        TokenSpec {
            name: name.into(),
            secret: secret.into(),
            rules,
        }
    }

    #[test]
    fn a_reload_keeps_unchanged_grants_and_revokes_the_rest() {
        let tokens = Tokens::new(vec![
            spec("alice", "alice-secret-0001", Rules::unrestricted()),
            spec("bob", "bob-secret-000001", Rules::unrestricted()),
            spec("carol", "carol-secret-0001", Rules::unrestricted()),
        ]);
        let alice = tokens.check("alice-secret-0001").unwrap();
        let bob = tokens.check("bob-secret-000001").unwrap();
        let carol = tokens.check("carol-secret-0001").unwrap();
        let narrow = Rules {
            channels: vec!["#a".into()],
            ..Rules::unrestricted()
        };
        let reloaded = tokens.reload(vec![
            spec("alice", "alice-secret-0001", narrow.clone()),
            spec("bob", "bob-secret-000002", Rules::unrestricted()),
            spec("dave", "dave-secret-00001", Rules::unrestricted()),
        ]);
        assert_eq!(
            reloaded,
            Reloaded {
                added: vec!["dave".into()],
                changed: vec!["alice".into(), "bob".into()],
                removed: vec!["carol".into()],
            }
        );
        // Alice's sessions follow her new rules on the grant they hold.
        assert!(Arc::ptr_eq(
            &alice,
            &tokens.check("alice-secret-0001").unwrap()
        ));
        assert_eq!(*alice.rules(), narrow);
        // Bob's old secret is gone, and so is what it granted.
        assert!(tokens.check("bob-secret-000001").is_none());
        assert!(bob.rules().revoked);
        assert!(!tokens.check("bob-secret-000002").unwrap().rules().revoked);
        assert!(carol.rules().revoked && tokens.check("carol-secret-0001").is_none());
        assert!(tokens.required());
        tokens.reload(Vec::new());
        assert!(!tokens.required() && alice.rules().revoked);
    }

    #[test]
    fn wrong_empty_and_long_tokens_are_refused() {
        let tokens = Tokens::new(vec![spec("a", "the-right-secret", Rules::unrestricted())]);
        for wrong in [
            "",
            "the-right-secre",
            "the-right-secrett",
            &"x".repeat(100_000),
        ] {
            assert!(tokens.check(wrong).is_none(), "{wrong:.20}");
        }
    }
}
