//! What keeps the page and its API safe in a browser.
//!
//! Every response carries a strict Content-Security-Policy (the page's own
//! script and style only: no inline script, no other origin, no framing),
//! `X-Content-Type-Options: nosniff` and `Referrer-Policy: no-referrer`.
//! Message text is never HTML: the script puts it in the page as text.
//!
//! A request that changes something (`POST`) must come from the page
//! itself: its `Origin` must be this server's (the HTTP guard has already
//! refused foreign ones; here it must also be present), a browser's
//! `Sec-Fetch-Site`, when sent, must say `same-origin`, and the body must be
//! JSON — which a cross-site form cannot send without a preflight this
//! server never answers. With the token kept in a SameSite=Strict cookie,
//! that is the CSRF defence.

use axum::{extract::Request, middleware::Next, response::Response};
use http::{HeaderMap, HeaderValue, Method, header};

const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; \
frame-ancestors 'none'";

/// Adds the security headers to every response of the web view.
pub async fn headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    response
}

/// Why a state-changing request is refused, if it is: it must be a JSON
/// POST from this server's own page.
pub fn same_origin(method: &Method, headers: &HeaderMap) -> Result<(), &'static str> {
    if method != Method::POST {
        return Ok(());
    }
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .ok_or("the Host header is missing")?;
    let origin = headers
        .get(header::ORIGIN)
        .and_then(|v| v.to_str().ok())
        .ok_or("a request that changes something must come from the page (it has no Origin)")?;
    let origin_host = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
        .unwrap_or("");
    if !origin_host.eq_ignore_ascii_case(host) {
        return Err("a request that changes something must come from this server's own page");
    }
    if let Some(site) = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok())
        && site != "same-origin"
    {
        return Err("a request that changes something must come from this server's own page");
    }
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(';').next().unwrap_or("").trim() == "application/json");
    if !json {
        return Err("send JSON (Content-Type: application/json)");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn posts_need_this_origin_and_json() {
        let good = [
            ("host", "127.0.0.1:8090"),
            ("origin", "http://127.0.0.1:8090"),
            ("content-type", "application/json"),
            ("sec-fetch-site", "same-origin"),
        ];
        assert!(same_origin(&Method::POST, &headers(&good)).is_ok());
        assert!(same_origin(&Method::GET, &headers(&[])).is_ok());
        for (drop, replace) in [
            ("origin", None),
            ("origin", Some("http://127.0.0.1:9999")),
            ("origin", Some("null")),
            ("sec-fetch-site", Some("cross-site")),
            ("content-type", Some("text/plain")),
            ("content-type", None),
        ] {
            let mut h = headers(&good);
            h.remove(drop);
            if let Some(value) = replace {
                h.insert(drop, value.parse().unwrap());
            }
            assert!(
                same_origin(&Method::POST, &h).is_err(),
                "{drop}: {replace:?}"
            );
        }
    }
}
