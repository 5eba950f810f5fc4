//! The allow-listed fetcher: the only way the docs toolset reaches the
//! network.
//!
//! A URL is fetched only if its host (and port) is on the source's lists:
//! https for `allowed_hosts`, plain http only for `http_hosts`. URLs with a
//! user name or password are refused outright (`https://docs.org@evil/` has
//! the host `evil`), an IP address or a port other than the scheme's default
//! must be listed as such, and redirects are followed by hand so that every
//! hop is checked again (at most [`MAX_REDIRECTS`]). The body is read in
//! chunks and the fetch fails as soon as it passes the size cap; the whole
//! exchange, redirects included, has one deadline.

use std::time::Duration;

use reqwest::{StatusCode, header};
use url::{Host, Url};

use crate::config::HostPattern;

/// The most redirects one fetch follows.
pub const MAX_REDIRECTS: usize = 5;

/// Which hosts a source may fetch, and how.
#[derive(Debug, Clone)]
pub struct HostPolicy {
    https: Vec<HostPattern>,
    http: Vec<HostPattern>,
}

/// Why a URL may not be fetched.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("only https URLs are fetched, not {0}:")]
    Scheme(String),
    #[error(
        "the URL carries a user name or password (`…@host`), which is refused; give the plain URL"
    )]
    Userinfo,
    #[error("the URL has no host")]
    NoHost,
    #[error("plain http is not allowed for {0}; use https, or list the host in http_hosts")]
    PlainHttp(String),
    #[error("the IP address {0} is not an allowed host; list it in allowed_hosts to fetch it")]
    IpNotListed(String),
    #[error("port {port} of {host} is not allowed; list `{host}:{port}` to fetch it")]
    PortNotListed { host: String, port: u16 },
    #[error("{host} is not an allowed host (allowed: {allowed})")]
    HostNotListed { host: String, allowed: String },
}

impl HostPolicy {
    /// `https`: hosts for https; `http`: hosts for plain http (and https).
    pub fn new(https: Vec<HostPattern>, http: Vec<HostPattern>) -> Self {
        Self { https, http }
    }

    /// Whether `url` may be fetched, and if not, why.
    pub fn check(&self, url: &Url) -> Result<(), Refusal> {
        let scheme = url.scheme();
        if !matches!(scheme, "https" | "http") {
            return Err(Refusal::Scheme(scheme.to_owned()));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(Refusal::Userinfo);
        }
        let host = url.host().ok_or(Refusal::NoHost)?;
        let candidates: Vec<&HostPattern> = if scheme == "http" {
            self.http.iter().collect()
        } else {
            self.https.iter().chain(&self.http).collect()
        };
        if candidates.iter().any(|p| p.matches(url)) {
            return Ok(());
        }
        let host_text = host.to_string();
        // The host is listed for this scheme, on another port.
        if candidates.iter().any(|p| p.same_host(url)) {
            return Err(Refusal::PortNotListed {
                host: host_text,
                port: url.port_or_known_default().unwrap_or_default(),
            });
        }
        if scheme == "http" && self.https.iter().any(|p| p.same_host(url)) {
            return Err(Refusal::PlainHttp(host_text));
        }
        if matches!(host, Host::Ipv4(_) | Host::Ipv6(_)) {
            return Err(Refusal::IpNotListed(host_text));
        }
        Err(Refusal::HostNotListed {
            host: host_text,
            allowed: self.describe(),
        })
    }

    /// The allowed hosts, for messages: `a.org, http://127.0.0.1:8123`.
    pub fn describe(&self) -> String {
        let https = self.https.iter().map(|p| p.to_string());
        let http = self.http.iter().map(|p| format!("http://{p}"));
        https.chain(http).collect::<Vec<_>>().join(", ")
    }
}

/// ETag and Last-Modified of a cached copy, sent back to revalidate it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Validators {
    pub etag: Option<String>,
    pub last_modified: Option<String>,
}

impl Validators {
    pub fn is_empty(&self) -> bool {
        self.etag.is_none() && self.last_modified.is_none()
    }
}

/// A response body that was read in full.
#[derive(Debug, Clone)]
pub struct Body {
    /// The URL that answered, after redirects.
    pub final_url: Url,
    pub bytes: Vec<u8>,
    /// The `Content-Type` header, if any.
    pub content_type: Option<String>,
    pub validators: Validators,
}

/// What a (conditional) GET brought back.
#[derive(Debug, Clone)]
pub enum Fetched {
    /// `304 Not Modified`: the copy whose validators were sent is current.
    NotModified,
    Body(Body),
}

/// A fetch that failed. Every message names the URL.
#[derive(Debug, Clone, thiserror::Error)]
pub enum FetchError {
    #[error("refused to fetch {url}: {reason}")]
    Refused { url: String, reason: Refusal },
    #[error("refused to follow the redirect from {from} to {to}: {reason}")]
    RedirectRefused {
        from: String,
        to: String,
        reason: Refusal,
    },
    #[error("{url} redirected with an unusable Location ({detail})")]
    BadRedirect { url: String, detail: String },
    #[error("{url}: more than {MAX_REDIRECTS} redirects; giving up")]
    TooManyRedirects { url: String },
    #[error("{url} answered HTTP {status}")]
    Status { url: String, status: StatusCode },
    #[error(
        "{url} is larger than the limit of {limit} bytes; raise max_page_bytes of the source if the page is genuine"
    )]
    TooLarge { url: String, limit: usize },
    #[error("{url} did not answer within {} s (the source's timeout_s)", .after.as_secs_f64())]
    Timeout { url: String, after: Duration },
    #[error("cannot connect to {url}: {detail}")]
    Connect { url: String, detail: String },
    #[error("fetching {url} failed: {detail}")]
    Transport { url: String, detail: String },
    #[error("{url} is not text: {why}")]
    NotText { url: String, why: &'static str },
}

impl FetchError {
    /// Whether the site looks down or overloaded (no connection, a timeout,
    /// a 5xx answer, a broken transfer) rather than refusing or lacking the
    /// page; a cached copy may then be served, marked stale.
    pub fn is_unavailable(&self) -> bool {
        match self {
            Self::Timeout { .. } | Self::Connect { .. } | Self::Transport { .. } => true,
            Self::Status { status, .. } => {
                status.is_server_error() || *status == StatusCode::TOO_MANY_REQUESTS
            }
            _ => false,
        }
    }
}

/// Fetches URLs for one source under its [`HostPolicy`], deadline and size
/// cap. Cheap to clone; clones share one connection pool.
#[derive(Debug, Clone)]
pub struct Fetcher {
    client: reqwest::Client,
    policy: HostPolicy,
    timeout: Duration,
    max_bytes: usize,
}

/// Builds the HTTP client every [`Fetcher`] shares: no automatic redirects
/// (they are followed by hand), no proxy from the environment (the allow-list
/// is about where requests really go), rustls.
pub fn http_client() -> Result<reqwest::Client, reqwest::Error> {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .user_agent(concat!("switchboard-docs/", env!("CARGO_PKG_VERSION")))
        .pool_idle_timeout(Duration::from_secs(60))
        .build()
}

impl Fetcher {
    pub fn new(
        client: reqwest::Client,
        policy: HostPolicy,
        timeout: Duration,
        max_bytes: usize,
    ) -> Self {
        Self {
            client,
            policy,
            timeout,
            max_bytes,
        }
    }

    pub fn policy(&self) -> &HostPolicy {
        &self.policy
    }

    /// GETs `url`, sending `validators` (if any) to make it conditional.
    pub async fn get(&self, url: &Url, validators: &Validators) -> Result<Fetched, FetchError> {
        self.policy
            .check(url)
            .map_err(|reason| FetchError::Refused {
                url: url.to_string(),
                reason,
            })?;
        match tokio::time::timeout(self.timeout, self.follow(url, validators)).await {
            Ok(outcome) => outcome,
            Err(_) => Err(FetchError::Timeout {
                url: url.to_string(),
                after: self.timeout,
            }),
        }
    }

    async fn follow(&self, start: &Url, validators: &Validators) -> Result<Fetched, FetchError> {
        let mut url = start.clone();
        for _ in 0..=MAX_REDIRECTS {
            let mut request = self
                .client
                .get(url.clone())
                .header(header::ACCEPT, "text/markdown, text/plain;q=0.9, */*;q=0.5");
            if let Some(etag) = &validators.etag {
                request = request.header(header::IF_NONE_MATCH, etag);
            }
            if let Some(date) = &validators.last_modified {
                request = request.header(header::IF_MODIFIED_SINCE, date);
            }
            let response = request.send().await.map_err(|e| send_error(&url, &e))?;
            let status = response.status();
            if status.is_redirection() && status != StatusCode::NOT_MODIFIED {
                let next = redirect_target(&url, &response)?;
                self.policy
                    .check(&next)
                    .map_err(|reason| FetchError::RedirectRefused {
                        from: url.to_string(),
                        to: next.to_string(),
                        reason,
                    })?;
                url = next;
                continue;
            }
            if status == StatusCode::NOT_MODIFIED && !validators.is_empty() {
                return Ok(Fetched::NotModified);
            }
            if !status.is_success() {
                return Err(FetchError::Status {
                    url: url.into(),
                    status,
                });
            }
            return self.read_body(url, response).await.map(Fetched::Body);
        }
        Err(FetchError::TooManyRedirects {
            url: start.to_string(),
        })
    }

    async fn read_body(
        &self,
        url: Url,
        mut response: reqwest::Response,
    ) -> Result<Body, FetchError> {
        let too_large = |url: &Url| FetchError::TooLarge {
            url: url.to_string(),
            limit: self.max_bytes,
        };
        if response
            .content_length()
            .is_some_and(|n| n > self.max_bytes as u64)
        {
            return Err(too_large(&url));
        }
        let headers = response.headers();
        let text_header = |name: header::HeaderName| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let content_type = text_header(header::CONTENT_TYPE);
        let validators = Validators {
            etag: text_header(header::ETAG),
            last_modified: text_header(header::LAST_MODIFIED),
        };
        let mut bytes = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| FetchError::Transport {
            url: url.to_string(),
            detail: error_chain(&e),
        })? {
            if bytes.len() + chunk.len() > self.max_bytes {
                return Err(too_large(&url));
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok(Body {
            final_url: url,
            bytes,
            content_type,
            validators,
        })
    }
}

/// The absolute URL a redirect response points to.
pub(crate) fn redirect_target(from: &Url, response: &reqwest::Response) -> Result<Url, FetchError> {
    let bad = |detail: String| FetchError::BadRedirect {
        url: from.to_string(),
        detail,
    };
    let location = response.headers().get(header::LOCATION).ok_or_else(|| {
        bad(format!(
            "HTTP {} without a Location header",
            response.status()
        ))
    })?;
    let location = location
        .to_str()
        .map_err(|_| bad("the Location header is not ASCII".into()))?;
    from.join(location)
        .map_err(|e| bad(format!("{location:?}: {e}")))
}

fn send_error(url: &Url, e: &reqwest::Error) -> FetchError {
    if e.is_connect() {
        FetchError::Connect {
            url: url.to_string(),
            detail: connect_detail(url, e),
        }
    } else {
        FetchError::Transport {
            url: url.to_string(),
            detail: error_chain(e),
        }
    }
}

/// Why no connection was made, in words: the innermost cause (reqwest's
/// outer ones repeat the URL) and what it most likely means.
fn connect_detail(url: &Url, e: &reqwest::Error) -> String {
    let chain = error_chain(e);
    let mut innermost: &dyn std::error::Error = e;
    while let Some(inner) = innermost.source() {
        innermost = inner;
    }
    let cause = innermost.to_string();
    let host = url.host_str().unwrap_or("the host");
    if chain.contains("dns error") || chain.contains("failed to lookup address") {
        format!(
            "{host} does not resolve ({cause}): this machine may be offline, or the host name is wrong"
        )
    } else if chain.contains("Connection refused") {
        format!("nothing answers at {host} ({cause}): the site may be down")
    } else {
        chain
    }
}

/// An error and its causes on one line; reqwest's own message alone is
/// often just "error sending request".
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut parts = vec![e.to_string()];
    let mut cause = e.source();
    while let Some(inner) = cause {
        let text = inner.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        cause = inner.source();
    }
    parts.join(": ")
}

/// Decodes a fetched body as text: UTF-8 (a byte-order mark is dropped),
/// without NUL bytes.
pub fn decode_text(body: &Body) -> Result<String, FetchError> {
    let bytes = body
        .bytes
        .strip_prefix(b"\xEF\xBB\xBF")
        .unwrap_or(&body.bytes);
    if bytes.contains(&0) {
        return Err(FetchError::NotText {
            url: body.final_url.to_string(),
            why: "it contains NUL bytes (binary data)",
        });
    }
    String::from_utf8(bytes.to_vec()).map_err(|_| FetchError::NotText {
        url: body.final_url.to_string(),
        why: "it is not valid UTF-8",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> HostPolicy {
        HostPolicy::new(
            vec![HostPattern::parse("imqueue.org").unwrap()],
            vec![HostPattern::parse("127.0.0.1:8123").unwrap()],
        )
    }

    fn check(url: &str) -> Result<(), Refusal> {
        policy().check(&Url::parse(url).unwrap())
    }

    #[test]
    fn allowed_urls_pass() {
        check("https://imqueue.org/docs/").unwrap();
        check("https://IMQUEUE.org:443/docs/").unwrap();
        check("http://127.0.0.1:8123/llms.txt").unwrap();
        check("https://127.0.0.1:8123/llms.txt").unwrap();
    }

    #[test]
    fn a_host_listed_for_plain_http_on_another_port_is_a_port_refusal() {
        let policy = HostPolicy::new(
            vec![HostPattern::parse("127.0.0.1").unwrap()],
            vec![HostPattern::parse("127.0.0.1:8124").unwrap()],
        );
        assert!(matches!(
            policy.check(&Url::parse("http://127.0.0.1:9/").unwrap()),
            Err(Refusal::PortNotListed { port: 9, .. })
        ));
    }

    #[test]
    fn userinfo_tricks_are_refused() {
        assert_eq!(
            check("https://imqueue.org@evil.com/"),
            Err(Refusal::Userinfo)
        );
        assert_eq!(
            check("https://imqueue.org:x@evil.com/"),
            Err(Refusal::Userinfo)
        );
        assert_eq!(check("https://user@imqueue.org/"), Err(Refusal::Userinfo));
    }

    #[test]
    fn other_hosts_schemes_ports_and_ips_are_refused() {
        assert!(matches!(
            check("https://evil.com/"),
            Err(Refusal::HostNotListed { .. })
        ));
        assert!(matches!(
            check("https://docs.imqueue.org/"),
            Err(Refusal::HostNotListed { .. })
        ));
        assert_eq!(
            check("http://imqueue.org/"),
            Err(Refusal::PlainHttp("imqueue.org".into()))
        );
        assert!(matches!(
            check("https://imqueue.org:8443/"),
            Err(Refusal::PortNotListed { port: 8443, .. })
        ));
        assert!(matches!(
            check("http://127.0.0.1:8124/"),
            Err(Refusal::PortNotListed { port: 8124, .. })
        ));
        assert!(matches!(
            check("http://127.0.0.1/"),
            Err(Refusal::PortNotListed { .. })
        ));
        assert!(matches!(
            check("https://10.0.0.1/"),
            Err(Refusal::IpNotListed(_))
        ));
        assert!(matches!(
            check("https://[::1]/"),
            Err(Refusal::IpNotListed(_))
        ));
        // Decimal and hex spellings of an address are still addresses.
        assert!(matches!(
            check("https://167772161/"),
            Err(Refusal::IpNotListed(_))
        ));
        assert!(matches!(
            check("https://0xa.0.0.1/"),
            Err(Refusal::IpNotListed(_))
        ));
        assert!(matches!(
            check("file:///etc/passwd"),
            Err(Refusal::Scheme(_))
        ));
        assert!(matches!(
            check("ftp://imqueue.org/"),
            Err(Refusal::Scheme(_))
        ));
    }

    #[test]
    fn messages_say_how_to_allow() {
        let text = check("https://imqueue.org:8443/").unwrap_err().to_string();
        assert!(text.contains("list `imqueue.org:8443`"), "{text}");
        let text = check("https://evil.com/").unwrap_err().to_string();
        assert!(
            text.contains("allowed: imqueue.org, http://127.0.0.1:8123"),
            "{text}"
        );
    }

    #[test]
    fn text_must_be_utf8_without_nul() {
        let body = |bytes: &[u8]| Body {
            final_url: Url::parse("https://imqueue.org/x").unwrap(),
            bytes: bytes.to_vec(),
            content_type: None,
            validators: Validators::default(),
        };
        assert_eq!(decode_text(&body(b"\xEF\xBB\xBF# T")).unwrap(), "# T");
        assert!(decode_text(&body(b"a\0b")).is_err());
        assert!(decode_text(&body(b"\xff\xfe")).is_err());
    }
}
