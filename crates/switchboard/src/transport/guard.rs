//! Checks every HTTP request before it reaches MCP or the web view: the
//! `Host` and `Origin` headers (DNS-rebinding protection, as the MCP
//! transport spec asks) and, when tokens are configured, a bearer token,
//! whose [`Grant`] it puts in the request's extensions for what follows to
//! obey. The web view's page and assets need no token (they hold nothing
//! secret); its API takes the token from the page's HttpOnly cookie as well
//! as from a bearer header.
//!
//! A web page can make a browser send requests to 127.0.0.1; it cannot make
//! the browser send a `Host` header naming 127.0.0.1 for its own domain, nor
//! hide its `Origin`. Refusing foreign hosts and origins therefore keeps
//! pages out of a loopback server.

use std::{
    net::{IpAddr, Ipv4Addr, SocketAddr},
    sync::Arc,
    time::Duration,
};

use axum::{
    body::Body,
    extract::{ConnectInfo, Request, State},
    middleware::Next,
    response::Response,
};
use http::{HeaderMap, StatusCode, Uri, header};
use switchboard_toolset::{Grant, Refused, Tokens};

use crate::config::HttpConfig;

/// What a request must look like to be served.
#[derive(Clone)]
pub struct Guard {
    inner: Arc<Inner>,
}

struct Inner {
    /// Lower-case host names and IP literals, without ports.
    hosts: Vec<String>,
    /// Any `Host` is accepted (unspecified listen address, no host list).
    any_host: bool,
    /// Lower-case origins, without a trailing slash.
    origins: Vec<String>,
    tokens: Arc<Tokens>,
}

impl Guard {
    pub fn new(listen: SocketAddr, config: &HttpConfig, tokens: Arc<Tokens>) -> Self {
        let mut hosts: Vec<String> = ["localhost", "127.0.0.1", "::1"].map(String::from).to_vec();
        let ip = listen.ip();
        if !ip.is_unspecified() {
            hosts.push(ip.to_string());
        }
        hosts.extend(config.allowed_hosts.iter().map(|h| h.to_ascii_lowercase()));
        Self {
            inner: Arc::new(Inner {
                hosts,
                any_host: ip.is_unspecified() && config.allowed_hosts.is_empty(),
                origins: config
                    .allowed_origins
                    .iter()
                    .map(|o| o.trim_end_matches('/').to_ascii_lowercase())
                    .collect(),
                tokens,
            }),
        }
    }

    /// Whether the request may go on, and with which grant (`None` when no
    /// token is configured or `path` needs none).
    fn check(
        &self,
        peer: IpAddr,
        uri: &Uri,
        headers: &HeaderMap,
    ) -> Result<Option<Arc<Grant>>, Refusal> {
        let path = uri.path();
        let mut hosts = headers.get_all(header::HOST).iter();
        let (Some(host), None) = (hosts.next(), hosts.next()) else {
            return Err(refuse(
                StatusCode::BAD_REQUEST,
                "a request needs exactly one Host header",
            ));
        };
        let host = host
            .to_str()
            .map(host_of)
            .map_err(|_| refuse(StatusCode::BAD_REQUEST, "the Host header is not ASCII"))?;
        // A request line naming a host (`POST http://host/mcp`) names it too.
        let named =
            std::iter::once(host.clone()).chain(uri.authority().map(|a| host_of(a.as_str())));
        for host in named {
            if !self.inner.any_host && !self.host_allowed(&host) {
                return Err(refuse(
                    StatusCode::FORBIDDEN,
                    &format!(
                        "Host {host:?} is not allowed; add it to http.allowed_hosts if it is yours"
                    ),
                ));
            }
        }
        if let Some(origin) = headers.get(header::ORIGIN) {
            let origin = origin
                .to_str()
                .unwrap_or("")
                .trim_end_matches('/')
                .to_ascii_lowercase();
            if !self.origin_allowed(&origin, &host) {
                return Err(refuse(
                    StatusCode::FORBIDDEN,
                    &format!(
                        "Origin {origin:?} is not allowed; add it to http.allowed_origins if it is yours"
                    ),
                ));
            }
        }
        if !self.inner.tokens.required() {
            return Ok(None);
        }
        // The web view's cookie carries a web key, which only its paths take.
        let cookie = switchboard_web::is_web(path)
            .then(|| web_cookie(headers))
            .flatten();
        let presented = match (headers.get(header::AUTHORIZATION), cookie) {
            (Some(value), _) => bearer(value).map(|token| Some(Presented::Bearer(token))),
            (None, cookie) => Ok(cookie.map(Presented::WebKey)),
        };
        let tokens = &self.inner.tokens;
        let grant_of = |presented: &Presented| match presented {
            Presented::Bearer(token) => tokens.check_from(peer, token),
            Presented::WebKey(key) => tokens.check_web_from(peer, key),
        };
        // A path open to all still learns whose token came with it.
        if !switchboard_web::needs_auth(path) {
            return Ok(presented.ok().flatten().and_then(|p| grant_of(&p).ok()));
        }
        let Some(presented) = presented? else {
            return Err(refuse(
                StatusCode::UNAUTHORIZED,
                "a bearer token is required: send Authorization: Bearer <token>",
            ));
        };
        grant_of(&presented).map(Some).map_err(|refused| match refused {
            Refused::Unknown => refuse(
                StatusCode::UNAUTHORIZED,
                "that token is not one of this server's: check the token you send in Authorization: Bearer <token>",
            ),
            Refused::TooManyGuesses { retry_after } => Refusal {
                status: StatusCode::TOO_MANY_REQUESTS,
                message: refused.to_string(),
                retry_after: Some(retry_after),
            },
        })
    }

    fn host_allowed(&self, host: &str) -> bool {
        self.inner.hosts.iter().any(|h| h == host)
    }

    fn origin_allowed(&self, origin: &str, request_host: &str) -> bool {
        if self.inner.origins.iter().any(|o| o == origin) {
            return true;
        }
        let Some(rest) = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"))
        else {
            return false;
        };
        let host = host_of(rest);
        self.host_allowed(&host) || (!self.inner.any_host && host == request_host)
    }
}

/// What a request presents: a bearer token, or the web view's cookie.
enum Presented<'a> {
    Bearer(String),
    WebKey(&'a str),
}

/// The token of an `Authorization: Bearer <token>` header.
fn bearer(value: &http::HeaderValue) -> Result<String, Refusal> {
    let malformed = || {
        refuse(
            StatusCode::UNAUTHORIZED,
            "the Authorization header must be `Bearer <token>`, in ASCII",
        )
    };
    let value = value.to_str().map_err(|_| malformed())?;
    let (scheme, token) = value.split_once(' ').ok_or_else(malformed)?;
    let token = token.trim();
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
        return Err(malformed());
    }
    Ok(token.to_owned())
}

/// The web view's cookie, if the request carries it.
fn web_cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|pair| {
            let (name, value) = pair.trim().split_once('=')?;
            (name == switchboard_web::COOKIE).then_some(value)
        })
}

/// The host part of `host[:port]` or `[v6]:port`, lower-cased.
fn host_of(authority: &str) -> String {
    let authority = authority.trim();
    let host = if let Some(rest) = authority.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else {
        authority.rsplit_once(':').map_or(authority, |(h, _)| h)
    };
    host.to_ascii_lowercase()
}

/// Why a request was turned away.
#[derive(Debug)]
struct Refusal {
    status: StatusCode,
    message: String,
    /// When to ask again (`429`).
    retry_after: Option<Duration>,
}

fn refuse(status: StatusCode, message: &str) -> Refusal {
    Refusal {
        status,
        message: message.to_owned(),
        retry_after: None,
    }
}

impl Refusal {
    fn into_response(self) -> Response {
        let mut response = super::error_response(self.status, -32000, &self.message);
        let headers = response.headers_mut();
        if self.status == StatusCode::UNAUTHORIZED {
            headers.insert(
                header::WWW_AUTHENTICATE,
                http::HeaderValue::from_static("Bearer"),
            );
        }
        if let Some(wait) = self.retry_after {
            headers.insert(
                header::RETRY_AFTER,
                http::HeaderValue::from(Refused::seconds(wait)),
            );
        }
        response
    }
}

/// The axum middleware applying a [`Guard`] to every route.
pub async fn enforce(State(guard): State<Guard>, request: Request<Body>, next: Next) -> Response {
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map_or(IpAddr::V4(Ipv4Addr::LOCALHOST), |ConnectInfo(peer)| {
            peer.ip()
        });
    match guard.check(peer, request.uri(), request.headers()) {
        Ok(grant) => {
            let mut request = request;
            if let Some(grant) = grant {
                request.extensions_mut().insert(grant);
            }
            next.run(request).await
        }
        Err(refusal) => {
            tracing::warn!(status = %refusal.status, uri = %request.uri(), reason = %refusal.message, "refused an HTTP request");
            refusal.into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOCAL: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

    fn guard(listen: &str, token: Option<&str>) -> Guard {
        let specs = token.map(|secret| switchboard_toolset::TokenSpec {
            name: "test".into(),
            secret: secret.into(),
            rules: switchboard_toolset::Rules::unrestricted(),
        });
        Guard::new(
            listen.parse().unwrap(),
            &HttpConfig::default(),
            Arc::new(Tokens::new(specs.into_iter().collect())),
        )
    }

    fn uri(text: &str) -> Uri {
        text.parse().unwrap()
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn loopback_hosts_pass_and_foreign_hosts_are_forbidden() {
        let g = guard("127.0.0.1:8090", None);
        for host in [
            "127.0.0.1:8090",
            "localhost:8090",
            "LOCALHOST",
            "[::1]:8090",
        ] {
            assert!(
                g.check(LOCAL, &uri("/mcp"), &headers(&[("host", host)]))
                    .is_ok(),
                "{host}"
            );
        }
        let refused = g
            .check(
                LOCAL,
                &uri("/mcp"),
                &headers(&[("host", "evil.example:8090")]),
            )
            .unwrap_err();
        assert_eq!(refused.status, StatusCode::FORBIDDEN);
        // A second Host, or a host in the request line, cannot slip past.
        let two = headers(&[("host", "127.0.0.1:8090"), ("host", "evil.example")]);
        assert_eq!(
            g.check(LOCAL, &uri("/mcp"), &two).unwrap_err().status,
            StatusCode::BAD_REQUEST
        );
        let absolute = uri("http://evil.example/mcp");
        let loopback = headers(&[("host", "127.0.0.1:8090")]);
        assert_eq!(
            g.check(LOCAL, &absolute, &loopback).unwrap_err().status,
            StatusCode::FORBIDDEN
        );
        assert!(
            g.check(LOCAL, &uri("http://127.0.0.1:8090/mcp"), &loopback)
                .is_ok()
        );
    }

    #[test]
    fn foreign_origins_are_forbidden() {
        let g = guard("127.0.0.1:8090", None);
        let ok = headers(&[
            ("host", "localhost:8090"),
            ("origin", "http://localhost:6274"),
        ]);
        assert!(g.check(LOCAL, &uri("/mcp"), &ok).is_ok());
        let bad = headers(&[
            ("host", "localhost:8090"),
            ("origin", "https://evil.example"),
        ]);
        assert_eq!(
            g.check(LOCAL, &uri("/mcp"), &bad).unwrap_err().status,
            StatusCode::FORBIDDEN
        );
        let null = headers(&[("host", "localhost:8090"), ("origin", "null")]);
        assert_eq!(
            g.check(LOCAL, &uri("/mcp"), &null).unwrap_err().status,
            StatusCode::FORBIDDEN
        );
    }

    #[test]
    fn a_configured_token_is_required() {
        let g = guard("127.0.0.1:8090", Some("s3cret"));
        let host = ("host", "127.0.0.1:8090");
        assert_eq!(
            g.check(LOCAL, &uri("/mcp"), &headers(&[host]))
                .unwrap_err()
                .status,
            StatusCode::UNAUTHORIZED
        );
        let wrong = headers(&[host, ("authorization", "Bearer nope")]);
        assert_eq!(
            g.check(LOCAL, &uri("/mcp"), &wrong).unwrap_err().status,
            StatusCode::UNAUTHORIZED
        );
        let granted = g
            .check(
                LOCAL,
                &uri("/mcp"),
                &headers(&[host, ("authorization", "Bearer s3cret")]),
            )
            .unwrap();
        assert_eq!(granted.unwrap().name(), "test");
        for malformed in [
            "s3cret",
            "Basic czNjcmV0",
            "Bearer ",
            "Bearer s3 cret",
            "Bearer\ts3cret",
        ] {
            let refused = g
                .check(
                    LOCAL,
                    &uri("/mcp"),
                    &headers(&[host, ("authorization", malformed)]),
                )
                .unwrap_err();
            assert_eq!(refused.status, StatusCode::UNAUTHORIZED, "{malformed}");
        }
        let long = format!("Bearer {}", "x".repeat(16_000));
        assert!(
            g.check(
                LOCAL,
                &uri("/mcp"),
                &headers(&[host, ("authorization", &long)])
            )
            .is_err()
        );
    }

    #[test]
    fn the_web_view_takes_the_token_from_its_cookie_and_shows_its_page_without() {
        let g = guard("127.0.0.1:8090", Some("s3cret"));
        let host = ("host", "127.0.0.1:8090");
        assert!(g.check(LOCAL, &uri("/"), &headers(&[host])).is_ok());
        assert!(
            g.check(LOCAL, &uri("/api/login"), &headers(&[host]))
                .is_ok()
        );
        let api = "/api/channels";
        assert_eq!(
            g.check(LOCAL, &uri(api), &headers(&[host]))
                .unwrap_err()
                .status,
            StatusCode::UNAUTHORIZED
        );
        let key = switchboard_toolset::Tokens::web_key("s3cret");
        let with_cookie = |value: &str| format!("a=b; {}={value}", switchboard_web::COOKIE);
        for wrong in [&key[1..], "733363726574", "s3cret"] {
            let cookie = with_cookie(wrong);
            assert!(
                g.check(LOCAL, &uri(api), &headers(&[host, ("cookie", &cookie)]))
                    .is_err(),
                "{wrong}"
            );
        }
        let cookie = with_cookie(&key);
        assert!(
            g.check(LOCAL, &uri(api), &headers(&[host, ("cookie", &cookie)]))
                .is_ok()
        );
        // The cookie is the web view's: MCP still wants the bearer header,
        // and the web key is not one.
        assert!(
            g.check(LOCAL, &uri("/mcp"), &headers(&[host, ("cookie", &cookie)]))
                .is_err()
        );
        let bearer = format!("Bearer {key}");
        assert!(
            g.check(
                LOCAL,
                &uri("/mcp"),
                &headers(&[host, ("authorization", &bearer)])
            )
            .is_err()
        );
    }

    #[test]
    fn an_unspecified_listen_address_accepts_any_host() {
        let g = guard("0.0.0.0:8090", Some("t"));
        let h = headers(&[("host", "box.lan:8090"), ("authorization", "Bearer t")]);
        assert!(g.check(LOCAL, &uri("/mcp"), &h).is_ok());
    }
}
