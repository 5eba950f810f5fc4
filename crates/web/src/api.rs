//! The JSON API under `/api/`, documented in `docs/web.md`: the chat
//! toolset's operations ([`ChatTools`]) for a person in a browser.
//!
//! The person names themselves (`viewer` in queries, `nick` when sending),
//! or is the nick their token binds them to; it must be a valid nick, and what they send is stored as a person's
//! message (`kind: human`), as `switchboard say` does, unless their token
//! is an agent's. Errors are `{"error": "…"}` with a 4xx status, malformed
//! queries and bodies included ([`Params`], [`Body`]).

use std::{
    net::{IpAddr, Ipv4Addr, SocketAddr},
    sync::Arc,
};

use axum::{
    Json, Router,
    extract::{self, FromRequest, FromRequestParts, Query, Request},
    middleware::{self, Next},
    response::{IntoResponse, Response},
    routing::{any, get, post},
};
use http::{HeaderMap, HeaderValue, StatusCode, header, request::Parts};
use serde::{Deserialize, de::DeserializeOwned};
use serde_json::{Value, json};
use switchboard_chat::{Access, ChatTools, Nick};
use switchboard_toolset::{Grant, Refused, Tokens, ToolError};

use crate::{COOKIE, security, stream};

/// How long the browser keeps the login cookie: 30 days.
const COOKIE_MAX_AGE_S: u64 = 30 * 24 * 3600;

/// Messages a page asks for at most at once.
const MAX_PAGE: usize = 500;
const DEFAULT_PAGE: usize = 100;

/// What every handler shares.
#[derive(Clone)]
pub struct State {
    pub(crate) chat: Arc<ChatTools>,
    /// The server's tokens: the login checks the one it is given.
    tokens: Arc<Tokens>,
    /// Names this server process for its pages. Message ids are the
    /// history's, and the history a page saw may be gone after a restart
    /// (an in-memory one, or a file restored from a backup): a page's
    /// stream from another instance starts afresh (see `stream.rs`).
    pub(crate) instance: Arc<str>,
}

impl State {
    pub fn new(chat: Arc<ChatTools>, tokens: Arc<Tokens>) -> Self {
        let started = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let instance = format!("{:x}-{:x}", started.as_nanos(), std::process::id());
        Self {
            chat,
            tokens,
            instance: instance.into(),
        }
    }
}

/// A refusal: the status and what to tell the person.
pub struct ApiError {
    status: StatusCode,
    message: String,
    /// Seconds to wait (`Retry-After`), for a refusal that passes.
    retry_after: Option<u64>,
}

impl ApiError {
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            retry_after: None,
        }
    }

    pub(crate) fn bad(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    fn retry_after(mut self, seconds: u64) -> Self {
        self.retry_after = Some(seconds);
        self
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, Json(json!({"error": self.message}))).into_response();
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

impl From<switchboard_toolset::ToolError> for ApiError {
    fn from(e: switchboard_toolset::ToolError) -> Self {
        Self::bad(e.message())
    }
}

type ApiResult = Result<Response, ApiError>;

pub fn routes(state: State) -> Router {
    Router::new()
        .route("/api/session", get(session))
        .route("/api/login", post(login))
        .route("/api/channels", get(channels))
        .route("/api/messages", get(messages))
        .route("/api/around", get(around))
        .route("/api/members", get(members))
        .route("/api/search", get(search))
        .route("/api/approvals", get(approvals))
        .route("/api/send", post(send))
        .route("/api/read", post(read))
        .route("/api/stream", get(stream::stream))
        .route("/api/{*rest}", any(no_such_path))
        .method_not_allowed_fallback(wrong_method)
        .layer(middleware::from_fn(same_origin))
        .with_state(state)
}

/// Any other path under `/api/`: a JSON error like the API's others.
async fn no_such_path(uri: http::Uri) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        format!(
            "there is no {} in the web view's API (see docs/web.md)",
            uri.path()
        ),
    )
}

/// A path of the API asked with a method it does not take.
async fn wrong_method(method: http::Method, uri: http::Uri) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("{} does not take {method} (see docs/web.md)", uri.path()),
    )
}

/// Refuses state-changing requests that do not come from the page.
async fn same_origin(request: Request, next: Next) -> Response {
    match security::same_origin(request.method(), request.headers()) {
        Ok(()) => next.run(request).await,
        Err(why) => ApiError::new(StatusCode::FORBIDDEN, why).into_response(),
    }
}

/// What the request's token allows (everything, without one). A token
/// that may not use the chat tools may not use the web view: `403`.
pub struct Allowed(pub Access);

impl FromRequestParts<State> for Allowed {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &State) -> Result<Self, Self::Rejection> {
        let grant = parts.extensions.get::<Arc<Grant>>();
        let access = Access::new(grant, state.chat.rules());
        access.chat().map_err(forbidden)?;
        Ok(Self(access))
    }
}

/// A query string; one that does not fit is the API's JSON `400`.
pub struct Params<T>(pub T);

impl<S: std::marker::Send + Sync, T: DeserializeOwned> FromRequestParts<S> for Params<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(q)| Self(q))
            .map_err(|e| ApiError::new(e.status(), e.body_text()))
    }
}

/// A JSON body; one that is not JSON, or does not fit, is the API's JSON
/// error (`400`, `415` or `422`, as axum judges it).
pub struct Body<T>(pub T);

impl<S: std::marker::Send + Sync, T: DeserializeOwned> FromRequest<S> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        Json::<T>::from_request(request, state)
            .await
            .map(|Json(body)| Self(body))
            .map_err(|e| ApiError::new(e.status(), e.body_text()))
    }
}

/// A refusal of the token's rules: `403`.
fn forbidden(e: ToolError) -> ApiError {
    ApiError::new(StatusCode::FORBIDDEN, e.message().to_owned())
}

impl State {
    /// The channel `raw` names, if the token opens it.
    fn channel(&self, raw: &str, allowed: &Allowed) -> Result<switchboard_chat::Channel, ApiError> {
        let channel = self
            .chat
            .rules()
            .channel(raw)
            .map_err(|e| ApiError::bad(e.to_string()))?;
        allowed.0.channel(&channel).map_err(forbidden)?;
        Ok(channel)
    }

    /// The nick `raw` names (`what` in errors), if the token holds it.
    fn nick(&self, raw: &str, what: &str, allowed: &Allowed) -> Result<Nick, ApiError> {
        let nick = self
            .chat
            .rules()
            .nick(raw)
            .map_err(|e| ApiError::bad(format!("{what}: {e}")))?;
        allowed.0.nick(&nick).map_err(forbidden)?;
        Ok(nick)
    }

    /// The person named `raw`, or when it is absent (or empty) the nick
    /// their token binds them to, if any.
    fn person(
        &self,
        raw: Option<&str>,
        what: &str,
        allowed: &Allowed,
    ) -> Result<Option<Nick>, ApiError> {
        match raw.filter(|v| !v.is_empty()) {
            Some(raw) => self.nick(raw, what, allowed).map(Some),
            None => allowed
                .0
                .default_nick()
                .map(|own| self.nick(&own, what, allowed))
                .transpose(),
        }
    }

    /// [`State::person`] where one is needed: absent with no token nick to
    /// stand in, it is a missing field, as a body without it is.
    fn required_person(
        &self,
        raw: Option<&str>,
        what: &str,
        allowed: &Allowed,
    ) -> Result<Nick, ApiError> {
        self.person(raw, what, allowed)?.ok_or_else(|| {
            ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                format!("missing field `{what}`: the nick to act as"),
            )
        })
    }
}

async fn session(extract::State(state): extract::State<State>, allowed: Allowed) -> ApiResult {
    Ok(Json(json!({
        "token_required": state.tokens.required(),
        "nick": allowed.0.default_nick(),
        "approvals_channel": state.chat.approvals_channel(),
        "newest_id": state.chat.newest_id()?,
        "instance": &*state.instance,
    }))
    .into_response())
}

#[derive(Deserialize)]
struct Login {
    token: String,
}

/// Checks the token and keeps its web key (not the secret: see
/// [`switchboard_toolset::Tokens::web_key`]) in an HttpOnly,
/// SameSite=Strict cookie.
async fn login(
    extract::State(state): extract::State<State>,
    extensions: http::Extensions,
    headers: HeaderMap,
    Body(body): Body<Login>,
) -> ApiResult {
    if !state.tokens.required() {
        return Ok(StatusCode::NO_CONTENT.into_response());
    }
    let token = body.token.trim();
    // Wrong tokens count against the address they come from (the server
    // always says which; a router without it counts them as loopback's).
    let peer = extensions.get::<extract::ConnectInfo<SocketAddr>>().map_or(
        IpAddr::V4(Ipv4Addr::LOCALHOST),
        |extract::ConnectInfo(peer)| peer.ip(),
    );
    let grant = match state.tokens.check_from(peer, token) {
        Ok(grant) => grant,
        Err(Refused::Unknown) => {
            tracing::warn!(%peer, "the web view's login was refused: not one of the server's tokens");
            return Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "that is not one of this server's tokens",
            ));
        }
        Err(refused @ Refused::TooManyGuesses { retry_after }) => {
            tracing::warn!(%peer, "the web view's login was refused: too many wrong tokens");
            return Err(
                ApiError::new(StatusCode::TOO_MANY_REQUESTS, refused.to_string())
                    .retry_after(Refused::seconds(retry_after)),
            );
        }
    };
    // A token that may not use the web view gets no cookie: the page asks
    // for another one rather than holding this one for 30 days.
    Access::new(Some(&grant), state.chat.rules())
        .chat()
        .map_err(forbidden)?;
    tracing::info!(token = grant.name(), "the web view's login was accepted");
    let secure = headers
        .get("x-forwarded-proto")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"https"));
    // Kept across browser restarts ("asks once"); a revoked token stops
    // working whatever the cookie's age.
    let cookie = format!(
        "{COOKIE}={}; HttpOnly; SameSite=Strict; Path=/; Max-Age={COOKIE_MAX_AGE_S}{}",
        switchboard_toolset::Tokens::web_key(token),
        if secure { "; Secure" } else { "" }
    );
    let mut response = StatusCode::NO_CONTENT.into_response();
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    Ok(response)
}

#[derive(Deserialize)]
struct ViewerQuery {
    viewer: Option<String>,
}

async fn channels(
    extract::State(state): extract::State<State>,
    allowed: Allowed,
    Params(q): Params<ViewerQuery>,
) -> ApiResult {
    let viewer = state.person(q.viewer.as_deref(), "viewer", &allowed)?;
    let mut summaries = state.chat.summaries(viewer.as_ref()).await?;
    summaries.retain(|s| allowed.0.allows(&s.channel));
    Ok(Json(json!({"channels": summaries})).into_response())
}

#[derive(Deserialize)]
struct PageQuery {
    channel: String,
    before: Option<i64>,
    after: Option<i64>,
    limit: Option<usize>,
    viewer: Option<String>,
}

/// A page of a channel, oldest first: the newest, the one before position
/// `before` (`more`: older ones precede it) or the one after position
/// `after` (`newer`: newer ones follow it). The newest page marks the
/// channel read for the viewer.
async fn messages(
    extract::State(state): extract::State<State>,
    allowed: Allowed,
    Params(q): Params<PageQuery>,
) -> ApiResult {
    let channel = state.channel(&q.channel, &allowed)?;
    let viewer = state.person(q.viewer.as_deref(), "viewer", &allowed)?;
    let limit = page_limit(q.limit)?;
    if let Some(after) = q.after {
        if q.before.is_some() {
            return Err(ApiError::bad(
                "give before (an older page) or after (a newer one), not both",
            ));
        }
        let (messages, newer) = state.chat.page_after(&channel, after, limit)?;
        return Ok(
            Json(json!({"channel": channel.name(), "messages": messages, "newer": newer}))
                .into_response(),
        );
    }
    let messages = state.chat.page(&channel, q.before, limit)?;
    if let (Some(viewer), None, Some(newest)) = (&viewer, q.before, messages.last()) {
        state.chat.mark_read(viewer, &channel, newest.seq)?;
    }
    let more = messages.first().is_some_and(|m| m.seq > 1);
    Ok(
        Json(json!({"channel": channel.name(), "messages": messages, "more": more}))
            .into_response(),
    )
}

fn page_limit(limit: Option<usize>) -> Result<usize, ApiError> {
    match limit.unwrap_or(DEFAULT_PAGE) {
        n @ 1..=MAX_PAGE => Ok(n),
        n => Err(ApiError::bad(format!(
            "limit must be 1 to {MAX_PAGE} (got {n})"
        ))),
    }
}

#[derive(Deserialize)]
struct AroundQuery {
    channel: String,
    seq: i64,
    context: Option<usize>,
}

/// A message with the messages around it (a search result in its place).
async fn around(
    extract::State(state): extract::State<State>,
    allowed: Allowed,
    Params(q): Params<AroundQuery>,
) -> ApiResult {
    let channel = state.channel(&q.channel, &allowed)?;
    let context = q.context.unwrap_or(20);
    if context > MAX_PAGE / 2 {
        return Err(ApiError::bad(format!(
            "context must be at most {}",
            MAX_PAGE / 2
        )));
    }
    let messages = state.chat.around(&channel, q.seq, context)?;
    let more = messages.first().is_some_and(|m| m.seq > 1);
    Ok(
        Json(json!({"channel": channel.name(), "messages": messages, "more": more}))
            .into_response(),
    )
}

#[derive(Deserialize)]
struct ChannelQuery {
    channel: String,
}

async fn members(
    extract::State(state): extract::State<State>,
    allowed: Allowed,
    Params(q): Params<ChannelQuery>,
) -> ApiResult {
    let channel = state.channel(&q.channel, &allowed)?;
    let members = state.chat.members(&channel).await?;
    Ok(Json(json!({"channel": channel.name(), "members": members})).into_response())
}

#[derive(Deserialize)]
struct SearchQuery {
    q: String,
    channel: Option<String>,
    limit: Option<usize>,
}

async fn search(
    extract::State(state): extract::State<State>,
    allowed: Allowed,
    Params(q): Params<SearchQuery>,
) -> ApiResult {
    let channel = q
        .channel
        .as_deref()
        .filter(|c| !c.is_empty())
        .map(|c| state.channel(c, &allowed))
        .transpose()?;
    let limit = match q.limit.unwrap_or(50) {
        n @ 1..=100 => n,
        n => return Err(ApiError::bad(format!("limit must be 1 to 100 (got {n})"))),
    };
    // A token limited to some channels reads the best matches of all and
    // keeps its own.
    let wanted = if channel.is_none() && allowed.0.restricts_channels() {
        100
    } else {
        limit
    };
    let mut messages = state.chat.search(&q.q, channel.as_ref(), wanted).await?;
    messages.retain(|m| allowed.0.allows(&m.channel));
    messages.truncate(limit);
    Ok(Json(json!({"query": q.q, "messages": messages})).into_response())
}

/// Pending approvals, for a token that opens the approvals channel.
async fn approvals(extract::State(state): extract::State<State>, allowed: Allowed) -> Json<Value> {
    let channel = state
        .chat
        .approvals_channel()
        .filter(|c| allowed.0.allows(c));
    let pending = if channel.is_some() {
        state.chat.pending_approvals()
    } else {
        Vec::new()
    };
    Json(json!({"channel": channel, "pending": pending}))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Send {
    channel: String,
    text: String,
    nick: Option<String>,
}

/// Posts as the person `nick`.
async fn send(
    extract::State(state): extract::State<State>,
    allowed: Allowed,
    Body(body): Body<Send>,
) -> ApiResult {
    let channel = state.channel(&body.channel, &allowed)?;
    let nick = state.required_person(body.nick.as_deref(), "nick", &allowed)?;
    let delivery = state
        .chat
        .say(&channel, &nick, &body.text, &allowed.0)
        .await
        .map_err(|e| {
            match e.structured().and_then(|s| s.get("retry_after")?.as_u64()) {
                // Over the token's sends a minute.
                Some(seconds) => {
                    ApiError::new(StatusCode::TOO_MANY_REQUESTS, e.message().to_owned())
                        .retry_after(seconds)
                }
                None => ApiError::bad(e.message()),
            }
        })?;
    let ids: Vec<i64> = delivery.stored.iter().map(|m| m.id).collect();
    Ok(Json(json!({
        "channel": channel.name(),
        "sent_as": delivery.sent_as,
        "lines": delivery.lines,
        "ids": ids,
    }))
    .into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Read {
    channel: String,
    seq: i64,
    viewer: Option<String>,
}

/// The viewer has seen `channel` up to position `seq`.
async fn read(
    extract::State(state): extract::State<State>,
    allowed: Allowed,
    Body(body): Body<Read>,
) -> ApiResult {
    let channel = state.channel(&body.channel, &allowed)?;
    let viewer = state.required_person(body.viewer.as_deref(), "viewer", &allowed)?;
    state.chat.mark_read(&viewer, &channel, body.seq)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
