//! Checks every HTTP request before it reaches MCP or the web view: the
//! `Host` and `Origin` headers (DNS-rebinding protection, as the MCP
//! transport spec asks) and, when configured, a bearer token. The web view's
//! page and assets need no token (they hold nothing secret); its API takes
//! the token from the page's HttpOnly cookie as well as from a bearer header.
//!
//! A web page can make a browser send requests to 127.0.0.1; it cannot make
//! the browser send a `Host` header naming 127.0.0.1 for its own domain, nor
//! hide its `Origin`. Refusing foreign hosts and origins therefore keeps
//! pages out of a loopback server.

use std::{net::SocketAddr, sync::Arc};

use axum::{
    body::Body,
    extract::{Request, State},
    middleware::Next,
    response::Response,
};
use http::{HeaderMap, StatusCode, header};

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
    token: Option<String>,
}

impl Guard {
    pub fn new(listen: SocketAddr, config: &HttpConfig, token: Option<String>) -> Self {
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
                token,
            }),
        }
    }

    fn check(&self, path: &str, headers: &HeaderMap) -> Result<(), Refusal> {
        let host = headers
            .get(header::HOST)
            .and_then(|v| v.to_str().ok())
            .map(host_of)
            .ok_or_else(|| {
                refuse(
                    StatusCode::BAD_REQUEST,
                    "the Host header is missing or not ASCII",
                )
            })?;
        if !self.inner.any_host && !self.host_allowed(&host) {
            return Err(refuse(
                StatusCode::FORBIDDEN,
                &format!(
                    "Host {host:?} is not allowed; add it to http.allowed_hosts if it is yours"
                ),
            ));
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
        if let Some(token) = &self.inner.token
            && switchboard_web::needs_auth(path)
        {
            let presented = headers
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .unwrap_or("");
            let bearer = constant_time_eq(presented.as_bytes(), token.as_bytes());
            let cookie = switchboard_web::is_web(path)
                && web_cookie(headers).is_some_and(|value| {
                    constant_time_eq(
                        value.as_bytes(),
                        switchboard_web::api::cookie_value(token).as_bytes(),
                    )
                });
            if !(bearer || cookie) {
                return Err(refuse(
                    StatusCode::UNAUTHORIZED,
                    "a bearer token is required: send Authorization: Bearer <token>",
                ));
            }
        }
        Ok(())
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

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Why a request was turned away.
struct Refusal {
    status: StatusCode,
    message: String,
}

fn refuse(status: StatusCode, message: &str) -> Refusal {
    Refusal {
        status,
        message: message.to_owned(),
    }
}

impl Refusal {
    fn into_response(self) -> Response {
        let mut response = super::error_response(self.status, -32000, &self.message);
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                http::HeaderValue::from_static("Bearer"),
            );
        }
        response
    }
}

/// The axum middleware applying a [`Guard`] to every route.
pub async fn enforce(State(guard): State<Guard>, request: Request<Body>, next: Next) -> Response {
    match guard.check(request.uri().path(), request.headers()) {
        Ok(()) => next.run(request).await,
        Err(refusal) => {
            tracing::warn!(status = %refusal.status, uri = %request.uri(), reason = %refusal.message, "refused an HTTP request");
            refusal.into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard(listen: &str, token: Option<&str>) -> Guard {
        Guard::new(
            listen.parse().unwrap(),
            &HttpConfig::default(),
            token.map(String::from),
        )
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
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
                g.check("/mcp", &headers(&[("host", host)])).is_ok(),
                "{host}"
            );
        }
        let refused = g
            .check("/mcp", &headers(&[("host", "evil.example:8090")]))
            .unwrap_err();
        assert_eq!(refused.status, StatusCode::FORBIDDEN);
    }

    #[test]
    fn foreign_origins_are_forbidden() {
        let g = guard("127.0.0.1:8090", None);
        let ok = headers(&[
            ("host", "localhost:8090"),
            ("origin", "http://localhost:6274"),
        ]);
        assert!(g.check("/mcp", &ok).is_ok());
        let bad = headers(&[
            ("host", "localhost:8090"),
            ("origin", "https://evil.example"),
        ]);
        assert_eq!(
            g.check("/mcp", &bad).unwrap_err().status,
            StatusCode::FORBIDDEN
        );
        let null = headers(&[("host", "localhost:8090"), ("origin", "null")]);
        assert_eq!(
            g.check("/mcp", &null).unwrap_err().status,
            StatusCode::FORBIDDEN
        );
    }

    #[test]
    fn a_configured_token_is_required() {
        let g = guard("127.0.0.1:8090", Some("s3cret"));
        let host = ("host", "127.0.0.1:8090");
        assert_eq!(
            g.check("/mcp", &headers(&[host])).unwrap_err().status,
            StatusCode::UNAUTHORIZED
        );
        let wrong = headers(&[host, ("authorization", "Bearer nope")]);
        assert_eq!(
            g.check("/mcp", &wrong).unwrap_err().status,
            StatusCode::UNAUTHORIZED
        );
        assert!(
            g.check(
                "/mcp",
                &headers(&[host, ("authorization", "Bearer s3cret")])
            )
            .is_ok()
        );
    }

    #[test]
    fn the_web_view_takes_the_token_from_its_cookie_and_shows_its_page_without() {
        let g = guard("127.0.0.1:8090", Some("s3cret"));
        let host = ("host", "127.0.0.1:8090");
        assert!(g.check("/", &headers(&[host])).is_ok());
        assert!(g.check("/api/login", &headers(&[host])).is_ok());
        let api = "/api/channels";
        assert_eq!(
            g.check(api, &headers(&[host])).unwrap_err().status,
            StatusCode::UNAUTHORIZED
        );
        let cookie = format!("a=b; {}={}", switchboard_web::COOKIE, "73336372657"); // one digit short
        assert!(
            g.check(api, &headers(&[host, ("cookie", &cookie)]))
                .is_err()
        );
        let cookie = format!("a=b; {}={}", switchboard_web::COOKIE, "733363726574");
        assert!(g.check(api, &headers(&[host, ("cookie", &cookie)])).is_ok());
        // The cookie is the web view's: MCP still wants the bearer header.
        assert!(
            g.check("/mcp", &headers(&[host, ("cookie", &cookie)]))
                .is_err()
        );
    }

    #[test]
    fn an_unspecified_listen_address_accepts_any_host() {
        let g = guard("0.0.0.0:8090", Some("t"));
        let h = headers(&[("host", "box.lan:8090"), ("authorization", "Bearer t")]);
        assert!(g.check("/mcp", &h).is_ok());
    }
}
