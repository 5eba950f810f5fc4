//! The observer's default nick, and the variants it falls back to when that
//! is taken, so that switchboards on several hosts (or several on one host)
//! share a network with no configuration.
//!
//! The default is `switchboard`; when it is taken, `switchboard-<host>` (the
//! host name's first label, reduced to characters a nick may hold), then
//! `switchboard-<host>-2` … `-9`. Each is cut to 30 characters, and the same
//! list follows cut to 16 for networks with a shorter `NICKLEN`, then to 9
//! (RFC 1459's, still stock ngIRCd's).

/// The observer's nick when `chat.irc.nick` is not set.
pub const DEFAULT_OBSERVER_NICK: &str = "switchboard";

/// Lengths the variants are cut to: most servers allow 30 (InspIRCd,
/// Solanum's default), some networks 16 (Libera.Chat), stock ngIRCd 9.
const CUTS: [usize; 3] = [30, 16, 9];
/// Variants per length: `-2` … `-9` after the plain one.
const NUMBERED: u32 = 9;

/// The nicks to try, in order, when `nick` is taken, for a host named `host`.
pub(super) fn fallbacks(nick: &str, host: &str) -> Vec<String> {
    let host = host_label(host);
    let stem = if host.is_empty() {
        nick.to_owned()
    } else {
        format!("{nick}-{host}")
    };
    let mut out: Vec<String> = Vec::new();
    for cut in CUTS {
        for n in 1..=NUMBERED {
            let suffix = if n == 1 {
                String::new()
            } else {
                format!("-{n}")
            };
            let kept: String = stem
                .chars()
                .take(cut.saturating_sub(suffix.len()))
                .collect();
            let variant = format!("{}{suffix}", kept.trim_end_matches('-'));
            if variant != nick && !out.contains(&variant) {
                out.push(variant);
            }
        }
    }
    out
}

/// This host's name, or an empty string when it cannot be read.
pub(super) fn host_name() -> String {
    ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .iter()
        .find_map(|path| std::fs::read_to_string(path).ok())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|name| name.trim().to_owned())
        .unwrap_or_default()
}

/// The first label of a host name, lower case, with anything a nick cannot
/// hold turned into `-` (runs of them into one, none at the ends).
fn host_label(host: &str) -> String {
    let label = host.split('.').next().unwrap_or_default();
    let mut out = String::with_capacity(label.len());
    for c in label.chars() {
        let c = if c.is_ascii_alphanumeric() {
            c.to_ascii_lowercase()
        } else {
            '-'
        };
        if !(c == '-' && (out.is_empty() || out.ends_with('-'))) {
            out.push(c);
        }
    }
    out.trim_end_matches('-').to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::NameRules;

    #[test]
    fn variants_name_the_host_and_fit_both_cuts() {
        let all = fallbacks("switchboard", "build_Runner 7.example.com");
        assert_eq!(
            all[..3],
            [
                "switchboard-build-runner-7",
                "switchboard-build-runner-7-2",
                "switchboard-build-runner-7-3"
            ]
        );
        // Then cut to 16, for networks with a short NICKLEN.
        assert_eq!(all[9..11], ["switchboard-buil", "switchboard-bu-2"]);
        // And to 9, for RFC 1459's.
        assert_eq!(all[18..20], ["switchboa", "switchb-2"]);
        let rules = NameRules::default();
        for nick in &all {
            assert!(nick.len() <= 30 && rules.nick(nick).is_ok(), "{nick}");
        }
        let unique: std::collections::HashSet<_> = all.iter().collect();
        assert_eq!(unique.len(), all.len());
    }

    #[test]
    fn a_long_host_is_cut_and_a_nameless_one_gets_numbers() {
        let long = fallbacks("switchboard", &"x".repeat(80));
        assert_eq!(long[0], format!("switchboard-{}", "x".repeat(18)));
        assert_eq!(long[1].len(), 30);
        let nameless = fallbacks("switchboard", "...");
        assert_eq!(nameless[..2], ["switchboard-2", "switchboard-3"]);
        assert!(!nameless.contains(&"switchboard".to_owned()));
    }
}
