//! The web view: a page for the people working with the agents, served by
//! the same HTTP server as MCP. It shows every channel live, reads back
//! through the history, searches it, and lets a person write as themselves
//! and answer approvals.
//!
//! - [`assets`] — the page (one HTML, one CSS, one JS file) embedded in the
//!   binary, under content-hashed names, gzipped once, with ETags.
//! - [`api`] — the JSON endpoints under `/api/`, over the chat toolset's own
//!   operations ([`ChatTools`]), never a second implementation.
//! - [`stream`] — `/api/stream`, Server-Sent Events of every new message,
//!   which fills the gap from the history when a page reconnects.
//! - [`security`] — the headers every response carries (a strict
//!   Content-Security-Policy among them) and the same-origin check that
//!   state-changing requests must pass.
//!
//! Who may use it is the HTTP server's business (its Host/Origin guard and
//! bearer token): when a token is configured, the page asks for it once and
//! [`api`]'s login keeps it in an HttpOnly, SameSite=Strict cookie named
//! [`COOKIE`], which the guard accepts on the paths [`needs_auth`] names.
//! The API is documented in `docs/web.md`.

pub mod api;
pub mod assets;
pub mod security;
pub mod stream;

use std::sync::Arc;

use axum::Router;
use switchboard_chat::ChatTools;
use switchboard_toolset::Tokens;

/// The cookie that carries the bearer token for the page.
pub const COOKIE: &str = "switchboard_token";

/// The web view's routes: the page at `/`, its assets, and `/api/`.
///
/// `tokens` are the HTTP server's: when there are any, the page asks for
/// one, and the login checks it.
pub fn router(chat: Arc<ChatTools>, tokens: Arc<Tokens>) -> Router {
    let state = api::State::new(chat, tokens);
    Router::new()
        .merge(assets::routes())
        .merge(api::routes(state))
        .layer(axum::middleware::from_fn(security::headers))
}

/// Whether a request for `path` must carry the token (as a bearer header or
/// the [`COOKIE`]) when one is configured: everything of the web view but
/// the page, its assets and the login itself, which hold nothing secret.
///
/// ```
/// assert!(!switchboard_web::needs_auth("/"));
/// assert!(!switchboard_web::needs_auth("/api/login"));
/// assert!(switchboard_web::needs_auth("/api/channels"));
/// ```
pub fn needs_auth(path: &str) -> bool {
    !(path == "/" || path == "/api/session" || path == "/api/login" || assets::is_asset(path))
}

/// Whether `path` belongs to the web view (so the [`COOKIE`] may stand in
/// for a bearer header).
pub fn is_web(path: &str) -> bool {
    path == "/" || path.starts_with("/api/") || assets::is_asset(path)
}
