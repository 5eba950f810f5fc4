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
//! A client that presents wrong tokens or web keys is slowed down
//! ([`Tokens::check_from`], [`Tokens::check_web_from`]): after
//! [`GUESS_BURST`] wrong ones from one address (an IPv6 /64 counts as one),
//! it may try one more every [`GUESS_REFILL`], and until then everything it
//! presents, right or wrong, is refused unchecked
//! ([`Refused::TooManyGuesses`]). Guessing a weak secret then takes years
//! rather than hours.
//!
//! The web view keeps a token's **web key** in its cookie, not the secret:
//! a digest of the secret ([`Tokens::web_key`]). It opens the web view's
//! API ([`Tokens::check_web`]) and nothing else, so whoever reads the
//! cookie holds no bearer token for `/mcp`.

use std::{
    collections::HashMap,
    net::IpAddr,
    sync::{Arc, Mutex, RwLock},
    time::{Duration, Instant},
};

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

/// How many wrong tokens one address may present before it must wait.
pub const GUESS_BURST: u32 = 20;

/// How often an address that used up [`GUESS_BURST`] may try once more.
pub const GUESS_REFILL: Duration = Duration::from_secs(3);

/// How many addresses' wrong tokens are remembered; beyond that, the
/// addresses no entry has room for share one allowance.
const GUESSERS_MAX: usize = 4096;

/// The accepted tokens. Cheap to share; [`Tokens::reload`] swaps the set.
#[derive(Default)]
pub struct Tokens {
    entries: RwLock<Arc<[Entry]>>,
    guesses: Mutex<Guesses>,
}

/// Why a presented token opened nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// It is not one of the server's tokens.
    Unknown,
    /// Its address presented too many wrong tokens: nothing it presents is
    /// checked until `retry_after` has passed.
    TooManyGuesses { retry_after: Duration },
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::Unknown => f.write_str("that token is not one of this server's"),
            Refused::TooManyGuesses { retry_after } => write!(
                f,
                "too many wrong tokens from this address; try again in {} s",
                Refused::seconds(*retry_after)
            ),
        }
    }
}

impl Refused {
    /// A wait in whole seconds, rounded up (at least 1), as `Retry-After`
    /// gives it.
    pub fn seconds(wait: Duration) -> u64 {
        (wait.as_secs() + u64::from(wait.subsec_nanos() > 0)).max(1)
    }
}

/// The wrong tokens each address has presented lately: a bucket of
/// [`GUESS_BURST`] tries per address, one back every [`GUESS_REFILL`].
#[derive(Default)]
struct Guesses {
    /// Tries left (with the fraction refilled so far) and when counted.
    by_address: HashMap<IpAddr, (f64, Instant)>,
}

impl Guesses {
    /// The tries `address` has left at `now`.
    fn left(&self, address: IpAddr, now: Instant) -> f64 {
        self.by_address
            .get(&self.key(address))
            .map_or(f64::from(GUESS_BURST), |&(left, at)| {
                refilled(left, at, now)
            })
    }

    /// Counts a wrong token from `address` at `now`.
    fn count(&mut self, address: IpAddr, now: Instant) {
        if self.key(address) == OVERFLOW {
            // Addresses whose allowance is whole again are forgotten.
            self.by_address
                .retain(|_, &mut (left, at)| refilled(left, at, now) < f64::from(GUESS_BURST));
        }
        let key = self.key(address);
        let left = self.left(address, now) - 1.0;
        self.by_address.insert(key, (left.max(0.0), now));
    }

    /// Where `address`'s tries are kept: its own entry, or the shared one
    /// once [`GUESSERS_MAX`] addresses are remembered.
    fn key(&self, address: IpAddr) -> IpAddr {
        if self.by_address.contains_key(&address) || self.by_address.len() < GUESSERS_MAX {
            address
        } else {
            OVERFLOW
        }
    }
}

/// The entry of the addresses beyond [`GUESSERS_MAX`] (no client has it).
const OVERFLOW: IpAddr = IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED);

/// A bucket's tries: `left` at `at`, refilled up to `now`.
fn refilled(left: f64, at: Instant, now: Instant) -> f64 {
    let back = now.saturating_duration_since(at).as_secs_f64() / GUESS_REFILL.as_secs_f64();
    (left + back).min(f64::from(GUESS_BURST))
}

/// The address whose wrong tokens count together: an IPv6 client usually
/// holds a whole /64, and an IPv4-mapped address is its IPv4 one.
fn guesser(peer: IpAddr) -> IpAddr {
    match peer {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let mut octets = v6.octets();
                octets[8..].fill(0);
                IpAddr::from(octets)
            }
        },
        v4 => v4,
    }
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

    /// [`Tokens::check`] for a client at `peer`, counting a wrong token
    /// against its address (see the module's documentation).
    ///
    /// ```
    /// use std::net::IpAddr;
    /// use switchboard_toolset::{GUESS_BURST, Refused, Rules, TokenSpec, Tokens};
    ///
    /// let tokens = Tokens::new(vec![TokenSpec {
    ///     name: "alice".into(),
    ///     secret: "s3cret-s3cret-s3cret".into(),
    ///     rules: Rules::unrestricted(),
    /// }]);
    /// let guesser: IpAddr = "203.0.113.9".parse().unwrap();
    /// for _ in 0..GUESS_BURST {
    ///     assert_eq!(tokens.check_from(guesser, "guess").unwrap_err(), Refused::Unknown);
    /// }
    /// // Now even the right token is refused from there, for a while...
    /// assert!(matches!(
    ///     tokens.check_from(guesser, "s3cret-s3cret-s3cret"),
    ///     Err(Refused::TooManyGuesses { .. })
    /// ));
    /// // ...and only from there.
    /// let other: IpAddr = "198.51.100.7".parse().unwrap();
    /// assert!(tokens.check_from(other, "s3cret-s3cret-s3cret").is_ok());
    /// ```
    pub fn check_from(&self, peer: IpAddr, presented: &str) -> Result<Arc<Grant>, Refused> {
        self.guarded(peer, Instant::now(), || self.check(presented))
    }

    /// [`Tokens::check_web`] for a client at `peer`, counted with its
    /// bearer tokens: a web key is a digest anyone can compute from a
    /// guessed secret, so guessing through the cookie is guessing too.
    pub fn check_web_from(&self, peer: IpAddr, presented: &str) -> Result<Arc<Grant>, Refused> {
        self.guarded(peer, Instant::now(), || self.check_web(presented))
    }

    /// Runs `check` unless `peer`'s address has no tries left at `now`, and
    /// counts a wrong token against it.
    fn guarded(
        &self,
        peer: IpAddr,
        now: Instant,
        check: impl FnOnce() -> Option<Arc<Grant>>,
    ) -> Result<Arc<Grant>, Refused> {
        let address = guesser(peer);
        let mut guesses = self.guesses.lock().unwrap_or_else(|e| e.into_inner());
        let left = guesses.left(address, now);
        if left < 1.0 {
            let retry_after = GUESS_REFILL.mul_f64(1.0 - left);
            return Err(Refused::TooManyGuesses { retry_after });
        }
        match check() {
            Some(grant) => Ok(grant),
            None => {
                guesses.count(address, now);
                Err(Refused::Unknown)
            }
        }
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
    fn wrong_tokens_use_up_an_allowance_that_comes_back_with_time() {
        let tokens = Tokens::new(vec![spec(
            "alice",
            "alice-secret-0001",
            Rules::unrestricted(),
        )]);
        let right = || tokens.check("alice-secret-0001");
        let peer: IpAddr = "192.0.2.1".parse().unwrap();
        let t0 = Instant::now();
        for _ in 0..GUESS_BURST {
            assert_eq!(
                tokens.guarded(peer, t0, || None).unwrap_err(),
                Refused::Unknown
            );
        }
        let Err(Refused::TooManyGuesses { retry_after }) = tokens.guarded(peer, t0, right) else {
            panic!("the right token was checked after {GUESS_BURST} wrong ones");
        };
        assert_eq!(retry_after, GUESS_REFILL);
        // Half a refill later, still waiting, for half as long.
        let half = t0 + GUESS_REFILL / 2;
        assert!(matches!(
            tokens.guarded(peer, half, right),
            Err(Refused::TooManyGuesses { retry_after }) if retry_after == GUESS_REFILL / 2
        ));
        // One refill later: one try, which a wrong token uses up again.
        let later = t0 + GUESS_REFILL;
        assert_eq!(
            tokens.guarded(peer, later, || None).unwrap_err(),
            Refused::Unknown
        );
        assert!(tokens.guarded(peer, later, right).is_err());
        assert!(tokens.guarded(peer, later + GUESS_REFILL, right).is_ok());
        // A right token uses nothing up.
        let other: IpAddr = "192.0.2.2".parse().unwrap();
        for _ in 0..3 * GUESS_BURST {
            assert!(tokens.guarded(other, t0, right).is_ok());
        }
    }

    #[test]
    fn an_ipv6_client_counts_as_its_64_and_a_mapped_ipv4_as_itself() {
        let of = |text: &str| guesser(text.parse().unwrap());
        assert_eq!(of("2001:db8:1:2:aaaa::1"), of("2001:db8:1:2:bbbb::9"));
        assert_ne!(of("2001:db8:1:2::1"), of("2001:db8:1:3::1"));
        assert_eq!(of("::ffff:192.0.2.1"), of("192.0.2.1"));
    }

    #[test]
    fn the_addresses_remembered_are_bounded() {
        let tokens = Tokens::new(vec![spec(
            "alice",
            "alice-secret-0001",
            Rules::unrestricted(),
        )]);
        let t0 = Instant::now();
        for i in 0..(GUESSERS_MAX as u32 + 100) {
            let peer = IpAddr::from((0x0a00_0000 + i).to_be_bytes());
            let _ = tokens.guarded(peer, t0, || None);
        }
        assert!(tokens.guesses.lock().unwrap().by_address.len() <= GUESSERS_MAX + 1);
        // The addresses beyond share one allowance, which they used up.
        let newcomer = IpAddr::from([172, 16, 0, 1]);
        assert!(matches!(
            tokens.guarded(newcomer, t0, || tokens.check("alice-secret-0001")),
            Err(Refused::TooManyGuesses { .. })
        ));
        // Once the allowances are whole again, the newcomer has its own.
        let later = t0 + GUESS_REFILL * GUESS_BURST;
        let _ = tokens.guarded(newcomer, later, || None);
        assert!(
            tokens
                .guesses
                .lock()
                .unwrap()
                .by_address
                .contains_key(&newcomer)
        );
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
