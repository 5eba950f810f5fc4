//! One client's session, as toolsets see it: who the agent is, and whether
//! (and how) it can be told things between its own calls.
//!
//! A transport makes a [`Session`] for each client it serves over time (a
//! stdio client, a shim's relay connection, a legacy SSE stream) and gives it
//! to every toolset through [`Registry::open_session`](crate::Registry::open_session);
//! stateless HTTP requests have none. Toolsets never learn which transport
//! made it.

use std::sync::Mutex;

use tokio::sync::mpsc;
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

use crate::{JsonObject, Process};

/// A notification outside any request, as MCP carries it: a method such as
/// `notifications/claude/channel`, and its params.
#[derive(Debug, Clone, PartialEq)]
pub struct Notification {
    pub method: String,
    pub params: JsonObject,
}

impl Notification {
    pub fn new(method: impl Into<String>, params: JsonObject) -> Self {
        Self {
            method: method.into(),
            params,
        }
    }
}

/// How sure a session is of its identity.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Identity {
    Unknown,
    /// A default (the agent's process name); the first name the agent
    /// sends under replaces it.
    Provisional(String),
    /// Configured for the session (`--nick`); never replaced.
    Fixed(String),
}

/// One client's session.
///
/// ```
/// # use switchboard_toolset::Session;
/// let session = Session::new("stdio");
/// assert_eq!(session.identity(), None);
/// session.adopt("alice");
/// session.adopt("bob"); // only the first name sticks
/// assert_eq!(session.identity().as_deref(), Some("alice"));
///
/// let named = Session::new("relay");
/// named.propose("claude-4242"); // a default, until the agent chooses
/// assert_eq!(named.chosen_identity(), None);
/// named.adopt("alice");
/// assert_eq!(named.chosen_identity().as_deref(), Some("alice"));
///
/// let fixed = Session::new("stdio").with_identity("reviewer");
/// fixed.adopt("alice");
/// assert_eq!(fixed.identity().as_deref(), Some("reviewer"));
/// ```
#[derive(Debug)]
pub struct Session {
    label: String,
    identity: Mutex<Identity>,
    notifications: Option<mpsc::Sender<Notification>>,
    process: Option<Process>,
    closed: CancellationToken,
}

impl Session {
    /// A session labelled for logs (`stdio`, `relay pid 4242`), with no
    /// identity yet and no way to notify the client.
    pub fn new(label: impl Into<String>) -> Self {
        Self {
            label: label.into(),
            identity: Mutex::new(Identity::Unknown),
            notifications: None,
            process: None,
            closed: CancellationToken::new(),
        }
    }

    /// Sets the identity configured for the session (`--nick`): the agent
    /// cannot replace it.
    #[must_use]
    pub fn with_identity(self, nick: impl Into<String>) -> Self {
        let nick = nick.into();
        *self.identity.lock().expect("identity lock") = Identity::Fixed(nick);
        self
    }

    /// Records the client program, for toolsets that name a session after it.
    #[must_use]
    pub fn with_process(mut self, process: Process) -> Self {
        self.process = Some(process);
        self
    }

    /// The client program, when the transport knows it.
    pub fn process(&self) -> Option<&Process> {
        self.process.as_ref()
    }

    /// Lets toolsets notify the client: what they send arrives on the
    /// receiver of `sender`, for the transport to deliver.
    #[must_use]
    pub fn with_notifications(mut self, sender: mpsc::Sender<Notification>) -> Self {
        self.notifications = Some(sender);
        self
    }

    pub fn label(&self) -> &str {
        &self.label
    }

    /// The name the agent goes by, once known.
    pub fn identity(&self) -> Option<String> {
        match &*self.identity.lock().expect("identity lock") {
            Identity::Unknown => None,
            Identity::Provisional(nick) | Identity::Fixed(nick) => Some(nick.clone()),
        }
    }

    /// Takes `nick` as a default identity when the session has none yet; the
    /// agent's first own choice replaces it.
    pub fn propose(&self, nick: &str) {
        let mut identity = self.identity.lock().expect("identity lock");
        if *identity == Identity::Unknown {
            *identity = Identity::Provisional(nick.to_owned());
        }
    }

    /// The identity configured for the session or chosen by the agent; not
    /// a default.
    pub fn chosen_identity(&self) -> Option<String> {
        match &*self.identity.lock().expect("identity lock") {
            Identity::Fixed(nick) => Some(nick.clone()),
            Identity::Unknown | Identity::Provisional(_) => None,
        }
    }

    /// Takes `nick` as the identity unless one was configured or already
    /// chosen: the first name an agent speaks under is who it is.
    pub fn adopt(&self, nick: &str) {
        let mut identity = self.identity.lock().expect("identity lock");
        if matches!(*identity, Identity::Unknown | Identity::Provisional(_)) {
            *identity = Identity::Fixed(nick.to_owned());
        }
    }

    /// Whether the client can be notified at all.
    pub fn can_notify(&self) -> bool {
        self.notifications.is_some()
    }

    /// Queues `notification` for the client without waiting. False when the
    /// client cannot be notified, is gone, or is too far behind; toolsets
    /// treat notifications as best effort.
    pub fn notify(&self, notification: Notification) -> bool {
        self.notifications
            .as_ref()
            .is_some_and(|tx| tx.try_send(notification).is_ok())
    }

    /// Ends the session: toolsets watching it stop.
    pub fn close(&self) {
        self.closed.cancel();
    }

    pub fn is_closed(&self) -> bool {
        self.closed.is_cancelled()
    }

    /// Completes when the session ends.
    pub fn closed(&self) -> WaitForCancellationFuture<'_> {
        self.closed.cancelled()
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.closed.cancel();
    }
}
