//! A real HTTP server on loopback serving the imqueue docs fixture (with
//! `https://imqueue.org` rewritten to its own address) plus misbehaving
//! routes under `/t/`. Shared by the integration tests and the benchmark.

#![allow(dead_code)] // Each test binary uses a different part of it.

use std::{
    collections::HashMap,
    convert::Infallible,
    hash::{DefaultHasher, Hash, Hasher},
    net::SocketAddr,
    path::{Component, Path, PathBuf},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use axum::{
    Router,
    body::Body,
    extract::{Query, State},
    http::{HeaderMap, HeaderValue, StatusCode, Uri, header},
    response::{IntoResponse, Response},
};
use switchboard_docs::{DocsConfig, DocsTools};
use tokio::{sync::oneshot, task::JoinHandle};

pub const FIXTURE_SITE: &str = "https://imqueue.org";

/// The fixture site's files. Written relative to the including crate's
/// directory through the docs crate's, so that switchboard's own tests can
/// include this module too (every crate sits in `crates/`).
pub fn fixture_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/tests/fixtures/imqueue")
}

pub struct SiteState {
    root: PathBuf,
    base: String,
    hits: Mutex<HashMap<String, usize>>,
    not_modified: AtomicU64,
    /// Bumped by tests: changes `/t/etag`, `/t/lastmod` and `/t/llms-versioned.txt`.
    pub version: AtomicU64,
    /// Every request answers 500 while set.
    pub down: AtomicBool,
}

/// The server; stops when dropped.
pub struct TestSite {
    pub addr: SocketAddr,
    pub state: Arc<SiteState>,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl TestSite {
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(SiteState {
            root: fixture_root(),
            base: format!("http://{addr}"),
            hits: Mutex::default(),
            not_modified: AtomicU64::new(0),
            version: AtomicU64::new(1),
            down: AtomicBool::new(false),
        });
        let app = Router::new().fallback(serve).with_state(state.clone());
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = rx.await;
                })
                .await
                .expect("test server");
        });
        Self {
            addr,
            state,
            shutdown: Some(tx),
            task: Some(task),
        }
    }

    pub fn base(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Requests seen for `path` (without query).
    pub fn hits(&self, path: &str) -> usize {
        self.state
            .hits
            .lock()
            .unwrap()
            .get(path)
            .copied()
            .unwrap_or(0)
    }

    pub fn total_hits(&self) -> usize {
        self.state.hits.lock().unwrap().values().sum()
    }

    /// How many `304 Not Modified` answers were sent.
    pub fn not_modified(&self) -> u64 {
        self.state.not_modified.load(Ordering::SeqCst)
    }

    pub fn set_down(&self, down: bool) {
        self.state.down.store(down, Ordering::SeqCst);
    }

    pub fn bump(&self) {
        self.state.version.fetch_add(1, Ordering::SeqCst);
    }

    /// Stops listening and closes idle connections; later connects are refused.
    pub async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
        }
    }
}

impl Drop for TestSite {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// A docs toolset over `site` with one source, `imqueue`; `extra` is added
/// to the source's TOML table (e.g. `ttl_s = 0`).
pub fn tools_for(site: &TestSite, extra: &str) -> DocsTools {
    let toml_text = format!(
        "[[sources]]\nname = \"imqueue\"\nllms_txt = \"{}/llms.txt\"\nhttp_hosts = [\"127.0.0.1:{}\"]\ntimeout_s = 5\n{extra}\n",
        site.base(),
        site.port()
    );
    tools_from_toml(&toml_text)
}

pub fn tools_from_toml(toml_text: &str) -> DocsTools {
    let config: DocsConfig = toml::from_str(toml_text).expect("test config parses");
    DocsTools::new(&config).expect("test config is valid")
}

fn plain(status: StatusCode, text: impl Into<String>) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        text.into(),
    )
        .into_response()
}

fn redirect(to: &str) -> Response {
    let mut response = plain(StatusCode::FOUND, "moved");
    if let Ok(v) = HeaderValue::from_str(to) {
        response.headers_mut().insert(header::LOCATION, v);
    }
    response
}

fn with_etag(state: &SiteState, headers: &HeaderMap, etag: String, body: Response) -> Response {
    if headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        == Some(etag.as_str())
    {
        state.not_modified.fetch_add(1, Ordering::SeqCst);
        return StatusCode::NOT_MODIFIED.into_response();
    }
    let mut body = body;
    if let Ok(v) = HeaderValue::from_str(&etag) {
        body.headers_mut().insert(header::ETAG, v);
    }
    body
}

async fn serve(
    State(state): State<Arc<SiteState>>,
    uri: Uri,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let path = uri.path().to_owned();
    *state.hits.lock().unwrap().entry(path.clone()).or_default() += 1;
    if state.down.load(Ordering::SeqCst) {
        return plain(StatusCode::INTERNAL_SERVER_ERROR, "down for maintenance");
    }
    let version = state.version.load(Ordering::SeqCst);
    match path.as_str() {
        "/t/redirect" => redirect(query.get("to").map_or("/", String::as_str)),
        "/t/loop" => redirect("/t/loop"),
        "/t/no-location" => plain(StatusCode::FOUND, "moved, but where?"),
        "/t/slow" => {
            tokio::time::sleep(Duration::from_secs(10)).await;
            plain(StatusCode::OK, "# Finally\n")
        }
        "/t/big" => {
            // 3 MiB in 64 KiB chunks, no Content-Length.
            let chunks = (0..48).map(|_| Ok::<_, Infallible>(vec![b'x'; 64 * 1024]));
            Response::new(Body::from_stream(futures::stream::iter(chunks)))
        }
        "/t/big-declared" => plain(StatusCode::OK, "y".repeat(3 * 1024 * 1024)),
        "/t/etag" => with_etag(
            &state,
            &headers,
            format!("\"v{version}\""),
            plain(StatusCode::OK, format!("# Version {version}\n")),
        ),
        "/t/lastmod" => {
            let date = format!("Wed, 21 Oct 2015 07:{:02}:00 GMT", version % 60);
            if headers
                .get(header::IF_MODIFIED_SINCE)
                .and_then(|v| v.to_str().ok())
                == Some(date.as_str())
            {
                state.not_modified.fetch_add(1, Ordering::SeqCst);
                return StatusCode::NOT_MODIFIED.into_response();
            }
            let mut response = plain(StatusCode::OK, format!("# Dated {version}\n"));
            response
                .headers_mut()
                .insert(header::LAST_MODIFIED, HeaderValue::from_str(&date).unwrap());
            response
        }
        "/t/llms-versioned.txt" => {
            let mut text = format!(
                "# Versioned\n\n## Docs\n\n- [Stable Page]({}/stable/): always here\n",
                state.base
            );
            if version > 1 {
                text.push_str(&format!(
                    "- [Brand New Page]({}/brand-new/): appears in version 2\n",
                    state.base
                ));
            }
            with_etag(&state, &headers, format!("\"l{version}\""), plain(StatusCode::OK, text))
        }
        "/t/html/llms.txt" | "/t/html.md" => (
            [(header::CONTENT_TYPE, "text/html")],
            "<!DOCTYPE html>\n<html><head><title>Docs</title></head><body><h1>Docs</h1></body></html>",
        )
            .into_response(),
        "/t/binary/llms.txt" => (
            [(header::CONTENT_TYPE, "application/octet-stream")],
            vec![0x89u8, b'P', b'N', b'G', 0, 0, 0, 13],
        )
            .into_response(),
        "/t/words/llms.txt" => plain(StatusCode::OK, "Welcome! This site has no index.\n"),
        "/t/foreign/llms.txt" => plain(
            StatusCode::OK,
            format!(
                "# Mixed\n\n## Docs\n\n- [Local Page]({}/stable/): here\n- [Elsewhere Page](http://evil.example/steal): another host\n- [Other Port Page](http://127.0.0.1:1/x): another port\n",
                state.base
            ),
        ),
        chain if chain.starts_with("/t/chain/") => {
            match chain["/t/chain/".len()..].parse::<u32>() {
                Ok(n) if n < 5 => redirect(&format!("/t/chain/{}", n + 1)),
                Ok(_) => plain(StatusCode::OK, "# End of the chain\n"),
                Err(_) => plain(StatusCode::NOT_FOUND, "no such link"),
            }
        }
        _ => file(&state, &path, &headers),
    }
}

fn file(state: &SiteState, path: &str, headers: &HeaderMap) -> Response {
    let relative = Path::new(path.trim_start_matches('/'));
    if relative
        .components()
        .any(|c| !matches!(c, Component::Normal(_)))
    {
        return plain(StatusCode::BAD_REQUEST, "bad path");
    }
    let full = state.root.join(relative);
    let Ok(bytes) = std::fs::read(&full) else {
        return plain(StatusCode::NOT_FOUND, format!("no page at {path}"));
    };
    let ext = full.extension().and_then(|e| e.to_str()).unwrap_or("");
    let (content_type, body) = match ext {
        "md" | "txt" => {
            let text = String::from_utf8(bytes)
                .expect("fixture is UTF-8")
                .replace(FIXTURE_SITE, &state.base);
            let content_type = if ext == "md" {
                "text/markdown; charset=utf-8"
            } else {
                "text/plain; charset=utf-8"
            };
            (content_type, text.into_bytes())
        }
        _ => ("application/octet-stream", bytes),
    };
    let mut hasher = DefaultHasher::new();
    body.hash(&mut hasher);
    let etag = format!("\"{:x}\"", hasher.finish());
    with_etag(
        state,
        headers,
        etag,
        ([(header::CONTENT_TYPE, content_type)], body).into_response(),
    )
}
