//! The page's files, embedded in the binary.
//!
//! The script and the style sheet are served under names that carry a hash
//! of their content (`/assets/app.3f2a….js`), cached for a year as
//! immutable; the page itself names them and is revalidated with its ETag.
//! Each file is gzipped once, on first use, and sent compressed to clients
//! that accept gzip.

use std::{io::Write, sync::OnceLock};

use axum::{
    Router,
    extract::Path,
    response::{IntoResponse, Response},
    routing::get,
};
use http::{HeaderMap, HeaderValue, StatusCode, header};

const HTML: &str = include_str!("../assets/index.html");
const CSS: &str = include_str!("../assets/app.css");
const JS: &str = include_str!("../assets/app.js");

/// One embedded file, ready to serve.
struct Asset {
    body: Vec<u8>,
    gzipped: Vec<u8>,
    content_type: &'static str,
    etag: String,
}

impl Asset {
    fn new(body: Vec<u8>, content_type: &'static str) -> Self {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        let gzipped = encoder
            .write_all(&body)
            .and_then(|()| encoder.finish())
            .unwrap_or_default();
        let etag = format!("\"{:016x}\"", fnv1a(&body));
        Self {
            body,
            gzipped,
            content_type,
            etag,
        }
    }

    fn respond(&self, request: &HeaderMap, cache: &'static str) -> Response {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(self.content_type),
        );
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
        headers.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
        if let Ok(etag) = HeaderValue::from_str(&self.etag) {
            headers.insert(header::ETAG, etag);
        }
        let unchanged = request
            .get(header::IF_NONE_MATCH)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|tags| tags.split(',').any(|t| t.trim() == self.etag));
        if unchanged {
            return (StatusCode::NOT_MODIFIED, headers).into_response();
        }
        let gzip = !self.gzipped.is_empty()
            && request
                .get(header::ACCEPT_ENCODING)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.split(',').any(|e| e.trim().starts_with("gzip")));
        if gzip {
            headers.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
            (headers, self.gzipped.clone()).into_response()
        } else {
            (headers, self.body.clone()).into_response()
        }
    }
}

/// The three files, with the page pointing at the hashed names.
struct Assets {
    page: Asset,
    script: Asset,
    style: Asset,
    script_name: String,
    style_name: String,
}

fn assets() -> &'static Assets {
    static ASSETS: OnceLock<Assets> = OnceLock::new();
    ASSETS.get_or_init(|| {
        let script_name = format!("app.{:016x}.js", fnv1a(JS.as_bytes()));
        let style_name = format!("app.{:016x}.css", fnv1a(CSS.as_bytes()));
        let page = HTML
            .replace("/assets/app.js", &format!("/assets/{script_name}"))
            .replace("/assets/app.css", &format!("/assets/{style_name}"));
        Assets {
            page: Asset::new(page.into_bytes(), "text/html; charset=utf-8"),
            script: Asset::new(JS.as_bytes().to_vec(), "text/javascript; charset=utf-8"),
            style: Asset::new(CSS.as_bytes().to_vec(), "text/css; charset=utf-8"),
            script_name,
            style_name,
        }
    })
}

/// Whether `path` is one of the hashed asset names.
pub fn is_asset(path: &str) -> bool {
    path.strip_prefix("/assets/")
        .is_some_and(|name| name.starts_with("app.") && !name.contains('/'))
}

/// The bytes of the page and its files, uncompressed (the page weight).
pub fn weight() -> usize {
    let a = assets();
    a.page.body.len() + a.script.body.len() + a.style.body.len()
}

pub fn routes() -> Router {
    Router::new()
        .route("/", get(page))
        .route("/assets/{name}", get(file))
}

async fn page(headers: HeaderMap) -> Response {
    assets().page.respond(&headers, "no-cache")
}

async fn file(Path(name): Path<String>, headers: HeaderMap) -> Response {
    let a = assets();
    let immutable = "public, max-age=31536000, immutable";
    if name == a.script_name {
        a.script.respond(&headers, immutable)
    } else if name == a.style_name {
        a.style.respond(&headers, immutable)
    } else {
        (StatusCode::NOT_FOUND, "no such file").into_response()
    }
}

/// FNV-1a, 64 bits: a content hash for names and ETags (not for secrecy).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_names_its_hashed_files_and_weighs_little() {
        let a = assets();
        let page = String::from_utf8(a.page.body.clone()).unwrap();
        assert!(
            page.contains(&format!("/assets/{}", a.script_name)),
            "{page}"
        );
        assert!(page.contains(&format!("/assets/{}", a.style_name)));
        assert!(weight() <= 150 * 1024, "{} bytes", weight());
        assert!(a.script.gzipped.len() < a.script.body.len());
    }

    #[test]
    fn unchanged_files_get_304_and_gzip_only_when_accepted() {
        let a = assets();
        let mut request = HeaderMap::new();
        request.insert(header::IF_NONE_MATCH, a.style.etag.parse().unwrap());
        assert_eq!(
            a.style.respond(&request, "x").status(),
            StatusCode::NOT_MODIFIED
        );
        let mut request = HeaderMap::new();
        request.insert(header::ACCEPT_ENCODING, "br, gzip".parse().unwrap());
        let zipped = a.style.respond(&request, "x");
        assert_eq!(zipped.headers()[header::CONTENT_ENCODING], "gzip");
        let plain = a.style.respond(&HeaderMap::new(), "x");
        assert!(plain.headers().get(header::CONTENT_ENCODING).is_none());
    }
}
