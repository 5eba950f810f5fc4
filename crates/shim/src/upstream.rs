//! The shim's side of the application: one lazily dialled relay link, the
//! cached tool list, and a watcher that notices the application appearing or
//! changing its tools.
//!
//! Requests never retry: a request that fails drops the link, and the next
//! request (or the watcher) dials again — that is what heals an application
//! restart. A failed attempt (nothing listening, a refusal, a welcome that
//! cannot be used, a connection closed before it answered anything) is
//! followed by a wait before the next, doubling from 1 s to 10 s while
//! attempts keep failing, so an application that accepts and then fails
//! every connection is not dialled thousands of times a second.

use std::{
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::Duration,
};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use switchboard_relay::{
    Event, Tool, ToolResult,
    client::{Hello, Incoming, Link, LinkError, ToolList, Welcome},
    events,
    protocol::{ErrorCode, TOOLS_CHANGED},
};
use tokio::{
    sync::{mpsc, watch},
    time::Instant,
};

const CLIENT_NAME: &str = concat!("switchboard-shim ", env!("CARGO_PKG_VERSION"));
/// How often the watcher looks at a link whose news it has followed to
/// the end.
const WATCH_INTERVAL: Duration = Duration::from_secs(1);
/// The wait after a first failed attempt to reach the application; it
/// doubles with each failure in a row, up to [`LONGEST_RETRY`].
const FIRST_RETRY: Duration = Duration::from_secs(1);
const LONGEST_RETRY: Duration = Duration::from_secs(10);

/// Timeouts for talking to the application.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub connect: Duration,
    pub list: Duration,
    pub call: Duration,
}

/// What the shim last learnt from the application, kept on disk so a new
/// shim can answer `tools/list` while the application is away.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// The application's display name (from its `welcome`).
    pub app: Option<String>,
    /// Tool definitions as the application sent them (with `timeout_ms`).
    pub tools: Vec<Tool>,
    /// The events the application agreed on last time.
    #[serde(default)]
    pub events: Vec<String>,
}

/// What the shim passes up to its MCP client from the application.
#[derive(Debug)]
pub enum Upward {
    /// The tool list changed: `notifications/tools/list_changed`.
    ToolsChanged,
    /// An event for the agent: `notifications/<name>`.
    Event(Event),
}

/// The events the shim can take part in: it delivers the first two to its
/// client and passes the third on from it.
pub const EVENTS: [&str; 3] = [
    events::CHANNEL,
    events::PERMISSION,
    events::PERMISSION_REQUEST,
];

/// Why a call did not produce a tool result.
#[derive(Debug)]
pub enum CallFailure {
    /// The application is not running (cannot be reached).
    Absent,
    /// No answer in time; the call may have run.
    TimedOut,
    /// The connection broke while waiting.
    Broken(String),
    /// The application says there is no such tool.
    UnknownTool(String),
    /// The application refused the request for another reason.
    Refused(String),
    /// The application answered with something that is not a tool result.
    Malformed(String),
    /// Not sent: the call is longer than a relay message may be.
    TooLarge(String),
    /// The application cannot be used (it broke the protocol, speaks another
    /// version, or refused the connection), with why.
    Unusable(String),
}

/// The link, and how the attempts to reach the application have gone.
#[derive(Default)]
struct Dialer {
    link: Option<Arc<Link>>,
    /// Failed attempts in a row since a link last worked.
    failures: u32,
    /// No attempt before this, after a failed one.
    retry_at: Option<Instant>,
    /// Why the last attempt failed; logged when it changes.
    failure: Option<LinkError>,
}

impl Dialer {
    /// Takes `link` out of use, counting it as a failed attempt if the
    /// application never answered on it or broke the protocol, else as one
    /// that worked. `error` is why it is dropped, when it is still open.
    fn retire(&mut self, link: &Link, error: Option<LinkError>, app: &str) {
        self.link = None;
        let error = link.closed_by().or(error);
        match error {
            Some(e @ LinkError::Unusable(_)) => self.failed(e, app),
            Some(e) if !link.answered() => self.failed(e, app),
            _ => self.worked(app),
        }
    }

    fn failed(&mut self, error: LinkError, app: &str) {
        self.failures += 1;
        let wait = FIRST_RETRY
            .saturating_mul(1 << (self.failures - 1).min(8))
            .min(LONGEST_RETRY);
        self.retry_at = Some(Instant::now() + wait);
        if self.failure.as_ref().map(ToString::to_string) != Some(error.to_string()) {
            match &error {
                LinkError::Connect { absent: true, .. } => tracing::info!(
                    %app,
                    "the application is not running ({error}); looking for it every {} s at most",
                    LONGEST_RETRY.as_secs()
                ),
                _ => tracing::warn!(
                    %app,
                    "cannot use the application: {error}; trying again after {} s at most",
                    LONGEST_RETRY.as_secs()
                ),
            }
        }
        self.failure = Some(error);
    }

    fn worked(&mut self, app: &str) {
        if self.failure.take().is_some() {
            tracing::info!(%app, "the application answers again");
        }
        self.failures = 0;
        self.retry_at = None;
    }

    /// The failure to answer a request with rather than dial now: the
    /// application is there but refuses its connections or cannot be used
    /// over them, and the wait after the last one is not over. (Otherwise a
    /// request dials at once: an absent application may have just started,
    /// a closed connection may have been a crash it has come back from.)
    fn refusal(&self) -> Option<LinkError> {
        let waiting = self.retry_at.is_some_and(|at| Instant::now() < at);
        self.failure
            .clone()
            .filter(|e| waiting && matches!(e, LinkError::Unusable(_)))
    }
}

/// The application behind the shim.
pub struct Upstream {
    socket: PathBuf,
    cache_file: PathBuf,
    fallback_name: String,
    /// The agent's nick, when the shim was given one.
    identity: Option<String>,
    timeouts: Timeouts,
    dialer: tokio::sync::Mutex<Dialer>,
    snapshot: Mutex<Snapshot>,
    /// The events of the newest link (and its number), for the watcher to
    /// follow.
    events: Mutex<Option<(u64, mpsc::Receiver<Incoming>)>>,
    /// The number of the newest link: bumped on every dial, so the watcher
    /// stops following a link the shim has dropped and replaced.
    generation: watch::Sender<u64>,
    /// What to tell the MCP client.
    upward: mpsc::Sender<Upward>,
}

impl Upstream {
    pub fn new(
        socket: PathBuf,
        cache_file: PathBuf,
        fallback_name: String,
        identity: Option<String>,
        timeouts: Timeouts,
        upward: mpsc::Sender<Upward>,
    ) -> Arc<Self> {
        let snapshot = read_cache(&cache_file).unwrap_or_default();
        Arc::new(Self {
            socket,
            cache_file,
            fallback_name,
            identity,
            timeouts,
            dialer: tokio::sync::Mutex::new(Dialer::default()),
            snapshot: Mutex::new(snapshot),
            events: Mutex::new(None),
            generation: watch::Sender::new(0),
            upward,
        })
    }

    /// The application's welcome, dialling if needed and waiting for it as
    /// long as for a connection; `None` when the application is away.
    pub async fn welcome(self: &Arc<Self>) -> Option<Welcome> {
        let link = self.link().await.ok()?;
        let welcome = link.wait_welcome(self.timeouts.connect).await?;
        let mut snapshot = self.snapshot.lock().expect("snapshot lock");
        if snapshot.events != welcome.events || snapshot.app.as_ref() != Some(&welcome.app) {
            snapshot.events = welcome.events.clone();
            snapshot.app = Some(welcome.app.clone());
            write_cache(&self.cache_file, &snapshot);
        }
        Some(welcome)
    }

    /// The events the application agreed on when last seen; `None` when it
    /// never was.
    pub fn cached_events(&self) -> Option<Vec<String>> {
        let snapshot = self.snapshot.lock().expect("snapshot lock");
        snapshot.app.is_some().then(|| snapshot.events.clone())
    }

    /// Passes `event` on to the application, if it is there and agreed.
    pub async fn send_event(self: &Arc<Self>, event: Event) {
        let link = match self.link().await {
            Ok(link) => link,
            Err(e) => {
                tracing::warn!(event = %event.name, error = %e, "an event could not be passed on: the application is away");
                return;
            }
        };
        if let Err(e) = link.send_event(&event, self.timeouts.call).await {
            tracing::warn!(event = %event.name, error = %e, "an event could not be passed on");
        }
    }

    /// The name to show in messages: from the application, else the id.
    /// The socket the application is reached at.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    pub fn app_name(&self) -> String {
        self.snapshot
            .lock()
            .expect("snapshot lock")
            .app
            .clone()
            .unwrap_or_else(|| self.fallback_name.clone())
    }

    /// The live link, dialling one if there is none (unless the wait after
    /// a failed attempt says not yet).
    async fn link(self: &Arc<Self>) -> Result<Arc<Link>, LinkError> {
        let mut dialer = self.dialer.lock().await;
        if let Some(link) = dialer.link.clone() {
            if !link.is_closed() {
                return Ok(link);
            }
            dialer.retire(&link, None, &self.app_name());
        }
        if let Some(refusal) = dialer.refusal() {
            return Err(refusal);
        }
        let hello = Hello {
            identity: self.identity.clone(),
            events: EVENTS.iter().map(|e| (*e).to_owned()).collect(),
            ..Hello::new(CLIENT_NAME)
        };
        let (link, events) =
            match Link::connect_as(&self.socket, self.timeouts.connect, hello).await {
                Ok(dialled) => dialled,
                Err(e) => {
                    dialer.failed(e.clone(), &self.app_name());
                    return Err(e);
                }
            };
        let link = Arc::new(link);
        dialer.link = Some(link.clone());
        let mut generation = 0;
        self.generation.send_modify(|g| {
            *g += 1;
            generation = *g;
        });
        *self.events.lock().expect("events lock") = Some((generation, events));
        Ok(link)
    }

    /// Forgets `link` after `error`, so the next request dials afresh.
    async fn drop_link(&self, link: &Arc<Link>, error: &LinkError) {
        let mut dialer = self.dialer.lock().await;
        if dialer.link.as_ref().is_some_and(|l| Arc::ptr_eq(l, link)) {
            dialer.retire(link, Some(error.clone()), &self.app_name());
        }
    }

    /// Waits until the wait after a failed attempt is over, or a request
    /// has dialled a link meanwhile.
    async fn wait_turn(&self, newest: &mut watch::Receiver<u64>) {
        let Some(retry_at) = self.dialer.lock().await.retry_at else {
            return;
        };
        newest.borrow_and_update();
        tokio::select! {
            () = tokio::time::sleep_until(retry_at) => {}
            _ = newest.changed() => {}
        }
    }

    /// The application's tools, fetched now; on failure the last known list.
    /// Tells the MCP side when the list differs from the last one.
    pub async fn list(self: &Arc<Self>) -> Vec<Tool> {
        match self.fetch_list().await {
            Ok((tools, changed)) => {
                if changed {
                    let _ = self.upward.send(Upward::ToolsChanged).await;
                }
                tools
            }
            Err(e) => {
                tracing::debug!(error = %e, "tools/list from cache");
                self.snapshot.lock().expect("snapshot lock").tools.clone()
            }
        }
    }

    /// Fetches the list; true when it differs from the last one.
    async fn fetch_list(self: &Arc<Self>) -> Result<(Vec<Tool>, bool), LinkError> {
        let link = self.link().await?;
        let list = match link.list_tools(self.timeouts.list).await {
            Ok(list) => list,
            Err(e) => {
                self.drop_link(&link, &e).await;
                return Err(e);
            }
        };
        self.dialer.lock().await.worked(&self.app_name());
        let app = link.welcome().map(|w| w.app);
        let tools = list.tools;
        let changed = {
            let mut snapshot = self.snapshot.lock().expect("snapshot lock");
            let changed = snapshot.tools != tools;
            snapshot.tools = tools.clone();
            if app.is_some() {
                snapshot.app = app;
            }
            if changed {
                write_cache(&self.cache_file, &snapshot);
                for malformed in &list.malformed {
                    tracing::warn!(
                        app = snapshot.app.as_deref().unwrap_or("the application"),
                        "a malformed tool is left out of the list: {malformed}"
                    );
                }
            }
            changed
        };
        Ok((tools, changed))
    }

    /// Whether the last list had `tool`.
    fn knows(&self, tool: &str) -> bool {
        let snapshot = self.snapshot.lock().expect("snapshot lock");
        snapshot.tools.iter().any(|t| t.name == tool)
    }

    /// The call timeout for `tool`: its `timeout_ms` if it declares a longer one.
    fn call_timeout(&self, tool: &str) -> Duration {
        let snapshot = self.snapshot.lock().expect("snapshot lock");
        snapshot
            .tools
            .iter()
            .find(|t| t.name == tool)
            .and_then(|t| t.timeout_ms)
            .map(Duration::from_millis)
            .map_or(self.timeouts.call, |declared| {
                declared.max(self.timeouts.call)
            })
    }

    /// Calls `tool` on the application.
    pub async fn call(
        self: &Arc<Self>,
        tool: &str,
        arguments: Map<String, Value>,
    ) -> Result<ToolResult, CallFailure> {
        let link = match self.link().await {
            Ok(link) => link,
            Err(LinkError::Unusable(reason)) => return Err(CallFailure::Unusable(reason)),
            Err(e @ LinkError::Connect { absent: false, .. }) => {
                return Err(CallFailure::Unusable(e.to_string()));
            }
            Err(e) => {
                tracing::debug!(error = %e, "the application is not reachable");
                return Err(CallFailure::Absent);
            }
        };
        // A host may call before it lists: learn the tool's declared timeout
        // (and the app's name) first. Only for a tool the shim has not seen.
        if !self.knows(tool) {
            self.list().await;
        }
        match link
            .call_tool(tool, arguments, self.call_timeout(tool))
            .await
        {
            Ok(result) => Ok(result),
            Err(LinkError::BadResult { reason, .. }) => Err(CallFailure::Malformed(reason)),
            Err(LinkError::Remote(body)) => Err(match body.code {
                ErrorCode::UnknownTool => CallFailure::UnknownTool(body.message),
                _ => CallFailure::Refused(body.message),
            }),
            Err(e @ LinkError::RequestTooLarge(_)) => Err(CallFailure::TooLarge(e.to_string())),
            Err(e) => {
                self.drop_link(&link, &e).await;
                Err(match e {
                    LinkError::Timeout(_) => CallFailure::TimedOut,
                    LinkError::Connect { absent: true, .. } => CallFailure::Absent,
                    LinkError::Unusable(reason) => CallFailure::Unusable(reason),
                    // Closed before the welcome: the application turned the
                    // connection away, and nothing it was sent ran.
                    other if link.welcome().is_none() => CallFailure::Unusable(format!(
                        "it closed the connection before welcoming it ({other}); the call did not run"
                    )),
                    other => CallFailure::Broken(other.to_string()),
                })
            }
        }
    }

    /// Keeps a link to the application when it is running, so that its
    /// appearance and its tool changes are noticed (and announced) without
    /// waiting for the agent to ask.
    pub async fn watch(self: Arc<Self>) {
        let mut present = false;
        let mut seen = false;
        let mut dropped = 0u64;
        let mut newest = self.generation.subscribe();
        loop {
            self.wait_turn(&mut newest).await;
            let up = self.link().await.is_ok();
            if up && !present {
                // It reappeared: refresh, and announce even an unchanged
                // list, since a host may have read an empty one meanwhile.
                // Found at start, only a list other than the cached one the
                // host may have been given is news.
                if self
                    .fetch_list()
                    .await
                    .is_ok_and(|(_, changed)| changed || seen)
                {
                    let _ = self.upward.send(Upward::ToolsChanged).await;
                }
                seen = true;
            }
            present = up;
            let events = if up {
                self.events.lock().expect("events lock").take()
            } else {
                None
            };
            match events {
                // Follow the link until it closes, or until a request drops
                // it and dials a newer one (the dropped link may stay open
                // for long, e.g. while the application still runs a call
                // that timed out, and only the newer one hears its news).
                Some((number, mut events)) => {
                    loop {
                        tokio::select! {
                            // What the link said before it was replaced
                            // (its close, above all) comes first.
                            biased;
                            event = events.recv() => match event {
                                Some(Incoming::Notify(name)) if name == TOOLS_CHANGED => {
                                    self.list().await;
                                }
                                Some(Incoming::Notify(_)) => {}
                                // Best effort: dropped (and counted) when the
                                // client is not keeping up.
                                Some(Incoming::Event(event)) => {
                                    if self.upward.try_send(Upward::Event(event)).is_err() {
                                        dropped += 1;
                                    } else if dropped > 0 {
                                        tracing::warn!(dropped, "dropped events: the MCP client was not keeping up");
                                        dropped = 0;
                                    }
                                }
                                Some(Incoming::Closed(reason)) => {
                                    tracing::debug!(%reason, "relay link closed");
                                    break;
                                }
                                None => break,
                            },
                            () = replaced(&mut newest, number) => break,
                        }
                    }
                    // A link that closed or was replaced after a failure means
                    // the application may be gone or may have restarted: the
                    // next link counts as an appearance (refreshed, announced).
                    present = false;
                }
                None => tokio::time::sleep(WATCH_INTERVAL).await,
            }
        }
    }
}

/// Completes once a link newer than `number` has been dialled. (Not
/// `wait_for` in a `select!`: its guard would make the future `!Send`.)
async fn replaced(newest: &mut watch::Receiver<u64>, number: u64) {
    if newest.wait_for(|n| *n != number).await.is_err() {
        std::future::pending::<()>().await;
    }
}

fn read_cache(path: &Path) -> Option<Snapshot> {
    let text = std::fs::read_to_string(path).ok()?;
    let mut snapshot: Snapshot = serde_json::from_str(&text).ok()?;
    // An older shim may have cached tools it did not check as closely.
    snapshot.tools = ToolList::from_result(serde_json::json!({"tools": snapshot.tools}))
        .ok()?
        .tools;
    Some(snapshot)
}

/// Writes the snapshot atomically (temp file + rename), best effort.
fn write_cache(path: &Path, snapshot: &Snapshot) {
    let Some(dir) = path.parent() else { return };
    let result = (|| -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        let tmp = dir.join(format!(".tools-cache.{}.tmp", std::process::id()));
        std::fs::write(&tmp, serde_json::to_vec(snapshot).unwrap_or_default())?;
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = result {
        tracing::warn!(path = %path.display(), error = %e, "cannot write the tool cache");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn failed_attempts_wait_longer_and_longer_until_one_works() {
        let mut dialer = Dialer::default();
        let unusable = LinkError::Unusable("a bad welcome".into());
        let mut waits = Vec::new();
        for _ in 0..6 {
            dialer.failed(unusable.clone(), "A");
            waits.push(dialer.retry_at.unwrap() - Instant::now());
        }
        let secs: Vec<u64> = waits.iter().map(Duration::as_secs).collect();
        assert_eq!(secs, [1, 2, 4, 8, 10, 10]);
        // Meanwhile a request is answered with the failure rather than dial.
        assert_eq!(dialer.refusal(), Some(unusable.clone()));
        tokio::time::advance(LONGEST_RETRY).await;
        assert_eq!(dialer.refusal(), None, "the wait is over");
        dialer.worked("A");
        assert_eq!((dialer.failures, dialer.retry_at), (0, None));
        dialer.failed(unusable, "A");
        assert_eq!(dialer.retry_at.unwrap() - Instant::now(), FIRST_RETRY);
    }

    #[tokio::test(start_paused = true)]
    async fn an_absent_application_is_still_dialled_by_requests() {
        let mut dialer = Dialer::default();
        let refused = LinkError::Connect {
            path: "/run/app/relay.sock".into(),
            reason: "Connection refused".into(),
            absent: true,
        };
        dialer.failed(refused, "A");
        assert!(dialer.retry_at.is_some(), "the watcher waits");
        assert_eq!(
            dialer.refusal(),
            None,
            "a request dials: the app may have just started"
        );
        dialer.failed(LinkError::Closed("reset".into()), "A");
        assert_eq!(dialer.refusal(), None, "nor after a crash");
    }

    #[test]
    fn a_cached_tool_that_does_not_fit_mcp_is_not_served() {
        let dir = std::env::temp_dir().join(format!("shim-cache-test-{}", std::process::id()));
        let path = dir.join("tools-cache.json");
        std::fs::create_dir_all(&dir).unwrap();
        let cached = serde_json::json!({"app": "A", "tools": [
            {"name": "ok", "inputSchema": {"type": "object"}},
            {"name": "bad", "inputSchema": {"type": "object"}, "annotations": "x"},
        ]});
        std::fs::write(&path, cached.to_string()).unwrap();
        let snapshot = read_cache(&path).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        let names: Vec<&str> = snapshot.tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["ok"]);
    }
}
