//! Configuration of the docs toolset: which documentation sites to search and
//! read, which hosts may be fetched for each, and the toolset's defaults.
//!
//! The types deserialise from the `[docs]` table of switchboard's config file
//! (unknown keys are refused). [`DocsConfig::validate`] checks everything a
//! type cannot, and its errors name the key, as in
//! `docs.sources[0].llms_txt: …`.

use std::time::Duration;

use serde::Deserialize;
pub use switchboard_toolset::ConfigError;
use url::{Host, Url};

/// The docs toolset's settings (`[docs]`).
///
/// ```toml
/// [docs]
/// page_chars = 20000
/// search_limit = 6
///
/// [[docs.sources]]
/// name = "imqueue"
/// llms_txt = "https://imqueue.org/llms.txt"
/// ```
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DocsConfig {
    /// The documentation sites, one `llms.txt` each. Names must be unique.
    pub sources: Vec<SourceConfig>,
    /// How many characters of a page one `get_doc` call returns when the
    /// caller gives no `max_chars`; small enough for an agent's tool-output
    /// cap. 1,000 to 100,000; default 20,000.
    pub page_chars: usize,
    /// How many results `search_docs` returns when the caller gives no
    /// `limit`. 1 to 50; default 6.
    pub search_limit: usize,
    /// The most bytes of fetched pages (llms.txt files included) kept in
    /// memory across all sources; the least recently used go first.
    /// At least 1 MiB; default 64 MiB.
    pub cache_bytes: usize,
}

impl Default for DocsConfig {
    fn default() -> Self {
        Self {
            sources: Vec::new(),
            page_chars: DEFAULT_PAGE_CHARS,
            search_limit: DEFAULT_SEARCH_LIMIT,
            cache_bytes: 64 * 1024 * 1024,
        }
    }
}

/// One documentation site (`[[docs.sources]]`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceConfig {
    /// A short name for the source (letters, digits, `-`, `_`, `.`), used in
    /// `search_docs`'s `source` parameter and in messages. Required.
    pub name: String,
    /// The absolute URL of the site's `llms.txt` index. Required.
    pub llms_txt: String,
    /// Hosts that may be fetched over https, each `host` or `host:port` (a
    /// port other than 443 must be given). Default: the host of `llms_txt`.
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
    /// Hosts that may also be fetched over plain http, each `host` or
    /// `host:port` (a port other than 80 must be given), e.g.
    /// `127.0.0.1:8123` for a local copy of a site. Default: none.
    #[serde(default)]
    pub http_hosts: Vec<String>,
    /// How long a fetched page or llms.txt is used without asking the site
    /// again, in seconds; after that it is revalidated (ETag /
    /// Last-Modified). Default: 3600.
    #[serde(default = "default_ttl_s")]
    pub ttl_s: u64,
    /// How long one fetch may take, redirects and body included, in seconds
    /// (fractions allowed). More than 0, at most 300; default 10.
    #[serde(default = "default_timeout_s")]
    pub timeout_s: f64,
    /// The largest page or llms.txt accepted, in bytes; a larger response is
    /// cut off and refused. 1 KiB to 64 MiB; default 2 MiB.
    #[serde(default = "default_max_page_bytes")]
    pub max_page_bytes: usize,
    /// How a page URL maps to its markdown copy. Default: `auto`.
    #[serde(default)]
    pub mirror: Mirror,
}

/// How `get_doc` finds the markdown copy of a page URL.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub enum Mirror {
    /// Per the llms.txt proposal: a URL ending in `.md` as it is, a URL
    /// ending in `/` plus `index.md`, any other URL plus `.md`.
    #[default]
    #[serde(rename = "auto")]
    Auto,
    /// Always the `index.md` inside the page's directory: `/a/b` and `/a/b/`
    /// both become `/a/b/index.md`.
    #[serde(rename = "index.md")]
    IndexMd,
    /// Always append `.md`; a URL ending in `/` gets `index.html.md`.
    #[serde(rename = "append-md")]
    AppendMd,
    /// Fetch the page URL itself (the site serves markdown there).
    #[serde(rename = "none")]
    None,
}

pub(crate) const DEFAULT_PAGE_CHARS: usize = 20_000;
pub(crate) const DEFAULT_SEARCH_LIMIT: usize = 6;
/// The largest `limit` `search_docs` accepts.
pub const MAX_SEARCH_LIMIT: usize = 50;
/// The largest `max_chars` `get_doc` accepts.
pub const MAX_PAGE_CHARS: usize = 100_000;
const MIN_PAGE_CHARS: usize = 1_000;
const MIN_CACHE_BYTES: usize = 1024 * 1024;
const MIN_PAGE_BYTES: usize = 1024;
const MAX_PAGE_BYTES: usize = 64 * 1024 * 1024;
const MAX_TIMEOUT_S: f64 = 300.0;

fn default_ttl_s() -> u64 {
    3600
}

fn default_timeout_s() -> f64 {
    10.0
}

fn default_max_page_bytes() -> usize {
    2 * 1024 * 1024
}

/// `host` or `host:port` from `allowed_hosts` / `http_hosts`, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPattern {
    pub host: Host<String>,
    /// `None`: the scheme's default port only.
    pub port: Option<u16>,
}

impl HostPattern {
    /// Parses `example.org`, `example.org:8443`, `127.0.0.1:8123` or
    /// `[::1]:8123`. The message says what is wrong with `raw`.
    pub fn parse(raw: &str) -> Result<Self, String> {
        let s = raw.trim();
        if s.is_empty() {
            return Err("a host must not be empty".into());
        }
        if s.contains("://") || s.contains('/') {
            return Err(format!(
                "{raw:?} is not a host; give a host name such as `docs.example.org` or `127.0.0.1:8123`, not a URL"
            ));
        }
        if s.contains('@') {
            return Err(format!("{raw:?} is not a host: it has a user name (`@`)"));
        }
        let wildcard = || format!("{raw:?}: wildcards are not supported; list each host");
        if s.contains('*') {
            return Err(wildcard());
        }
        let (host, port) = if let Some(rest) = s.strip_prefix('[') {
            let (inside, after) = rest
                .split_once(']')
                .ok_or_else(|| format!("{raw:?}: an IPv6 address needs a closing `]`"))?;
            let port =
                match after {
                    "" => None,
                    _ => Some(after.strip_prefix(':').ok_or_else(|| {
                        format!("{raw:?}: expected `:port` after the IPv6 address")
                    })?),
                };
            (format!("[{inside}]"), port)
        } else {
            match s.rsplit_once(':') {
                Some((h, p)) => (h.to_owned(), Some(p)),
                None => (s.to_owned(), None),
            }
        };
        let port = port
            .map(|p| match p.parse::<u16>() {
                Ok(n) if n > 0 => Ok(n),
                _ => Err(format!(
                    "{raw:?}: the port must be a number from 1 to 65535"
                )),
            })
            .transpose()?;
        let host = Host::parse(&host).map_err(|e| format!("{raw:?} is not a valid host: {e}"))?;
        // Parsing decodes `%2A` and maps `＊` (U+FF0A) to `*`.
        if host.to_string().contains('*') {
            return Err(wildcard());
        }
        // The URL standard lets a domain hold `"`, `!`, `~` and more, which
        // no DNS name has and the HTTP client refuses: a listed host must be
        // one a request can reach.
        if let Host::Domain(name) = &host
            && let Some(bad) = name
                .chars()
                .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_')))
        {
            return Err(format!(
                "{raw:?} is not a host name: {bad:?} cannot appear in one (letters, digits, `-`, `_` and `.`)"
            ));
        }
        Ok(Self { host, port })
    }

    /// Whether `url` (already known to be http or https) is on this host
    /// and port.
    pub(crate) fn matches(&self, url: &Url) -> bool {
        let Some(host) = url.host() else {
            return false;
        };
        let same_host = match (&self.host, host) {
            (Host::Domain(a), Host::Domain(b)) => a == b,
            (Host::Ipv4(a), Host::Ipv4(b)) => *a == b,
            (Host::Ipv6(a), Host::Ipv6(b)) => *a == b,
            _ => false,
        };
        let default = default_port(url.scheme());
        same_host && self.port.or(default) == url.port_or_known_default()
    }

    pub(crate) fn same_host(&self, url: &Url) -> bool {
        url.host().is_some_and(|h| h.to_owned() == self.host)
    }
}

impl std::fmt::Display for HostPattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.port {
            Some(port) => write!(f, "{}:{port}", self.host),
            None => write!(f, "{}", self.host),
        }
    }
}

fn default_port(scheme: &str) -> Option<u16> {
    match scheme {
        "https" => Some(443),
        "http" => Some(80),
        _ => None,
    }
}

/// A source after validation, ready to use.
#[derive(Debug, Clone)]
pub(crate) struct Source {
    pub name: String,
    pub llms_txt: Url,
    pub https_hosts: Vec<HostPattern>,
    pub http_hosts: Vec<HostPattern>,
    pub ttl: Duration,
    pub timeout: Duration,
    pub max_page_bytes: usize,
    pub mirror: Mirror,
}

impl DocsConfig {
    /// Checks every value; the error names the first bad key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.resolve().map(|_| ())
    }

    /// Validates and turns the sources into their working form.
    pub(crate) fn resolve(&self) -> Result<Vec<Source>, ConfigError> {
        ConfigError::check_range(
            "docs.page_chars",
            self.page_chars,
            MIN_PAGE_CHARS..=MAX_PAGE_CHARS,
            " characters",
        )?;
        ConfigError::check_range(
            "docs.search_limit",
            self.search_limit,
            1..=MAX_SEARCH_LIMIT,
            "",
        )?;
        if self.cache_bytes < MIN_CACHE_BYTES {
            return Err(ConfigError::new(
                "docs.cache_bytes",
                format!(
                    "must be at least {MIN_CACHE_BYTES} bytes (got {})",
                    self.cache_bytes
                ),
            ));
        }
        let mut sources: Vec<Source> = Vec::with_capacity(self.sources.len());
        for (i, source) in self.sources.iter().enumerate() {
            let resolved = source.resolve(&format!("docs.sources[{i}]"))?;
            if let Some(j) = sources.iter().position(|s| s.name == resolved.name) {
                return Err(ConfigError::new(
                    format!("docs.sources[{i}].name"),
                    format!(
                        "{:?} is already the name of docs.sources[{j}]; names must be unique",
                        resolved.name
                    ),
                ));
            }
            sources.push(resolved);
        }
        Ok(sources)
    }
}

impl SourceConfig {
    fn resolve(&self, key: &str) -> Result<Source, ConfigError> {
        let name = self.name.trim();
        if name.is_empty()
            || name.len() > 64
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        {
            return Err(ConfigError::new(
                format!("{key}.name"),
                format!(
                    "{:?} is not a usable name; use 1 to 64 letters, digits, `-`, `_` or `.`",
                    self.name
                ),
            ));
        }
        let llms_key = format!("{key}.llms_txt");
        let llms_txt = Url::parse(self.llms_txt.trim()).map_err(|e| {
            ConfigError::new(
                &llms_key,
                format!(
                    "{:?} is not an absolute URL ({e}); give e.g. https://docs.example.org/llms.txt",
                    self.llms_txt
                ),
            )
        })?;
        if !matches!(llms_txt.scheme(), "https" | "http") {
            return Err(ConfigError::new(
                &llms_key,
                format!("{llms_txt} is not an https URL"),
            ));
        }
        if !llms_txt.username().is_empty() || llms_txt.password().is_some() {
            return Err(ConfigError::new(
                &llms_key,
                "the URL must not carry a user name or password",
            ));
        }
        let Some(llms_host) = llms_txt.host() else {
            return Err(ConfigError::new(&llms_key, "the URL has no host"));
        };
        let patterns = |field: &str, list: &[String]| -> Result<Vec<HostPattern>, ConfigError> {
            list.iter()
                .enumerate()
                .map(|(j, raw)| {
                    HostPattern::parse(raw)
                        .map_err(|m| ConfigError::new(format!("{key}.{field}[{j}]"), m))
                })
                .collect()
        };
        let mut https_hosts = patterns("allowed_hosts", &self.allowed_hosts)?;
        let http_hosts = patterns("http_hosts", &self.http_hosts)?;
        if https_hosts.is_empty() {
            https_hosts.push(HostPattern {
                host: llms_host.to_owned(),
                port: llms_txt.port(),
            });
        }
        let listed = match llms_txt.scheme() {
            "http" => http_hosts.iter().any(|p| p.matches(&llms_txt)),
            _ => https_hosts
                .iter()
                .chain(&http_hosts)
                .any(|p| p.matches(&llms_txt)),
        };
        if !listed {
            let (field, scheme) = match llms_txt.scheme() {
                "http" => ("http_hosts", "plain http"),
                _ => ("allowed_hosts", "https"),
            };
            let host_port = match llms_txt.port() {
                Some(port) => format!("{llms_host}:{port}"),
                None => llms_host.to_string(),
            };
            return Err(ConfigError::new(
                &llms_key,
                format!(
                    "{llms_txt} may not be fetched over {scheme}: add {host_port:?} to {key}.{field}"
                ),
            ));
        }
        if !(self.timeout_s > 0.0 && self.timeout_s <= MAX_TIMEOUT_S) {
            return Err(ConfigError::new(
                format!("{key}.timeout_s"),
                format!(
                    "must be more than 0 and at most {MAX_TIMEOUT_S} seconds (got {})",
                    self.timeout_s
                ),
            ));
        }
        ConfigError::check_range(
            &format!("{key}.max_page_bytes"),
            self.max_page_bytes,
            MIN_PAGE_BYTES..=MAX_PAGE_BYTES,
            " bytes",
        )?;
        Ok(Source {
            name: name.to_owned(),
            llms_txt,
            https_hosts,
            http_hosts,
            ttl: Duration::from_secs(self.ttl_s),
            timeout: Duration::from_secs_f64(self.timeout_s),
            max_page_bytes: self.max_page_bytes,
            mirror: self.mirror,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(toml_text: &str) -> DocsConfig {
        toml::from_str(toml_text).expect("config parses")
    }

    fn err(toml_text: &str) -> String {
        parse(toml_text).validate().unwrap_err().to_string()
    }

    #[test]
    fn defaults_are_documented_values() {
        let config = parse(
            r#"
            [[sources]]
            name = "imqueue"
            llms_txt = "https://imqueue.org/llms.txt"
            "#,
        );
        assert_eq!(config.page_chars, 20_000);
        assert_eq!(config.search_limit, 6);
        assert_eq!(config.cache_bytes, 64 * 1024 * 1024);
        let source = &config.sources[0];
        assert_eq!(source.ttl_s, 3600);
        assert_eq!(source.timeout_s, 10.0);
        assert_eq!(source.max_page_bytes, 2 * 1024 * 1024);
        assert_eq!(source.mirror, Mirror::Auto);
        let resolved = config.resolve().unwrap();
        assert_eq!(resolved[0].https_hosts.len(), 1);
        assert_eq!(resolved[0].https_hosts[0].to_string(), "imqueue.org");
        assert!(resolved[0].http_hosts.is_empty());
    }

    #[test]
    fn mirror_names_parse() {
        for (raw, want) in [
            ("auto", Mirror::Auto),
            ("index.md", Mirror::IndexMd),
            ("append-md", Mirror::AppendMd),
            ("none", Mirror::None),
        ] {
            let config = parse(&format!(
                "[[sources]]\nname = \"a\"\nllms_txt = \"https://a.org/llms.txt\"\nmirror = \"{raw}\""
            ));
            assert_eq!(config.sources[0].mirror, want);
        }
    }

    #[test]
    fn a_host_no_request_could_reach_is_refused() {
        for (raw, bad) in [
            ("a.o\"rg", "'\"'"),
            ("docs!.example.org", "'!'"),
            ("docs.example.org~", "'~'"),
            ("%22docs.example.org", "'\"'"),
        ] {
            let e = HostPattern::parse(raw).unwrap_err();
            assert!(
                e.contains("is not a host name") && e.contains(bad),
                "{raw}: {e}"
            );
        }
        for raw in [
            "docs_internal.example.org",
            "xn--bcher-kva.example",
            "bücher.example",
        ] {
            assert!(HostPattern::parse(raw).is_ok(), "{raw}");
        }
    }

    #[test]
    fn an_encoded_wildcard_is_refused_as_a_wildcard() {
        for raw in [
            "%2A.docs.example.org",
            "\u{ff0a}.docs.example.org",
            "*.docs.example.org",
        ] {
            let e = HostPattern::parse(raw).unwrap_err();
            assert!(e.contains("wildcards are not supported"), "{raw}: {e}");
        }
        // What parses reads back as itself.
        let pattern = HostPattern::parse("%61.docs.example.org:8443").unwrap();
        assert_eq!(pattern.to_string(), "a.docs.example.org:8443");
        assert_eq!(HostPattern::parse(&pattern.to_string()), Ok(pattern));
    }

    #[test]
    fn unknown_keys_are_refused() {
        let e = toml::from_str::<DocsConfig>(
            "[[sources]]\nname = \"a\"\nllms_txt = \"https://a.org/llms.txt\"\nttl = 5",
        )
        .unwrap_err();
        assert!(e.to_string().contains("unknown field `ttl`"), "{e}");
    }

    #[test]
    fn errors_name_the_key() {
        let cases = [
            (
                "[[sources]]\nname = \"a\"\nllms_txt = \"imqueue.org/llms.txt\"",
                "docs.sources[0].llms_txt: ",
            ),
            (
                "[[sources]]\nname = \"a\"\nllms_txt = \"ftp://a.org/llms.txt\"",
                "docs.sources[0].llms_txt: ",
            ),
            (
                "[[sources]]\nname = \"a\"\nllms_txt = \"https://u:p@a.org/llms.txt\"",
                "user name",
            ),
            (
                "[[sources]]\nname = \"a b\"\nllms_txt = \"https://a.org/llms.txt\"",
                "docs.sources[0].name: ",
            ),
            (
                "[[sources]]\nname = \"a\"\nllms_txt = \"https://a.org/llms.txt\"\n[[sources]]\nname = \"a\"\nllms_txt = \"https://b.org/llms.txt\"",
                "docs.sources[1].name: \"a\" is already the name of docs.sources[0]",
            ),
            (
                "[[sources]]\nname = \"a\"\nllms_txt = \"https://a.org/llms.txt\"\nallowed_hosts = [\"https://a.org/\"]",
                "docs.sources[0].allowed_hosts[0]: ",
            ),
            (
                "[[sources]]\nname = \"a\"\nllms_txt = \"https://a.org/llms.txt\"\nallowed_hosts = [\"b.org\"]",
                "add \"a.org\" to docs.sources[0].allowed_hosts",
            ),
            (
                "[[sources]]\nname = \"a\"\nllms_txt = \"http://127.0.0.1:8123/llms.txt\"",
                "add \"127.0.0.1:8123\" to docs.sources[0].http_hosts",
            ),
            (
                "[[sources]]\nname = \"a\"\nllms_txt = \"http://127.0.0.1:8123/llms.txt\"\nhttp_hosts = [\"127.0.0.1\"]",
                "docs.sources[0].llms_txt: ",
            ),
            (
                "[[sources]]\nname = \"a\"\nllms_txt = \"https://a.org/llms.txt\"\nhttp_hosts = [\"a.org:99999\"]",
                "docs.sources[0].http_hosts[0]: ",
            ),
            (
                "[[sources]]\nname = \"a\"\nllms_txt = \"https://a.org/llms.txt\"\ntimeout_s = 0",
                "docs.sources[0].timeout_s: ",
            ),
            (
                "[[sources]]\nname = \"a\"\nllms_txt = \"https://a.org/llms.txt\"\nmax_page_bytes = 10",
                "docs.sources[0].max_page_bytes: ",
            ),
            ("page_chars = 10", "docs.page_chars: "),
            ("search_limit = 0", "docs.search_limit: "),
            ("search_limit = 51", "docs.search_limit: "),
            ("cache_bytes = 100", "docs.cache_bytes: "),
        ];
        for (text, want) in cases {
            let message = err(text);
            assert!(message.contains(want), "{text}\n→ {message}");
        }
    }

    #[test]
    fn loopback_over_http_with_an_explicit_port_is_accepted() {
        let config = parse(
            "[[sources]]\nname = \"local\"\nllms_txt = \"http://127.0.0.1:8123/llms.txt\"\nhttp_hosts = [\"127.0.0.1:8123\"]",
        );
        config.validate().unwrap();
    }

    #[test]
    fn host_patterns_parse_names_ips_and_ports() {
        let p = HostPattern::parse("Docs.Example.ORG").unwrap();
        assert_eq!(p.to_string(), "docs.example.org");
        assert_eq!(p.port, None);
        let p = HostPattern::parse("127.0.0.1:8123").unwrap();
        assert_eq!(p.port, Some(8123));
        assert!(matches!(p.host, Host::Ipv4(_)));
        let p = HostPattern::parse("[::1]:9000").unwrap();
        assert!(matches!(p.host, Host::Ipv6(_)));
        assert_eq!(p.port, Some(9000));
        for bad in [
            "", "a.org:0", "a.org:x", "*.a.org", "u@a.org", "[::1", "a.org/x",
        ] {
            assert!(HostPattern::parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn patterns_match_scheme_default_ports_only_unless_listed() {
        let plain = HostPattern::parse("a.org").unwrap();
        let url = |s: &str| Url::parse(s).unwrap();
        assert!(plain.matches(&url("https://a.org/x")));
        assert!(plain.matches(&url("https://a.org:443/x")));
        assert!(plain.matches(&url("http://a.org/x")));
        assert!(!plain.matches(&url("https://a.org:8443/x")));
        assert!(!plain.matches(&url("https://b.a.org/x")));
        let ported = HostPattern::parse("a.org:8443").unwrap();
        assert!(ported.matches(&url("https://a.org:8443/x")));
        assert!(!ported.matches(&url("https://a.org/x")));
    }
}
