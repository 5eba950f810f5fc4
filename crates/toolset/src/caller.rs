//! Who is calling a tool, as far as the transport can tell.

use std::sync::Arc;

use crate::{Grant, Session};

/// Facts about the client behind a tool call, filled in by the transport.
///
/// Toolsets may use them (for example as a default identity) but must not
/// depend on which transport set them: who is calling is the client program
/// ([`Caller::process`]), the token ([`Caller::token`]) and the session's
/// identity ([`Caller::identity`]), each when the transport knows it.
#[derive(Debug, Clone, Default)]
pub struct Caller {
    /// A short human-readable label for logs: `stdio`, `http`, `sse 4f1c…`.
    pub label: String,
    /// The caller is a person (at a terminal, in a browser), not an agent.
    pub human: bool,
    /// The client's session, when it has one (stateless HTTP has none).
    pub session: Option<Arc<Session>>,
    /// Reports progress of this call to the client, when it asked for that.
    pub progress: Option<Progress>,
    /// What the token the client presented allows; `None` when it presented
    /// none (stdio, the relay socket, HTTP without tokens): no limits.
    pub grant: Option<Arc<Grant>>,
}

impl Caller {
    pub fn new(label: impl Into<String>) -> Self {
        Self {
            label: label.into(),
            ..Self::default()
        }
    }

    /// The same caller within `session`.
    #[must_use]
    pub fn in_session(mut self, session: Arc<Session>) -> Self {
        self.session = Some(session);
        self
    }

    /// The same caller holding `grant`.
    #[must_use]
    pub fn with_grant(mut self, grant: Option<Arc<Grant>>) -> Self {
        self.grant = grant;
        self
    }

    /// The session's identity, if the caller has a session that knows it.
    pub fn identity(&self) -> Option<String> {
        self.session.as_ref().and_then(|s| s.identity())
    }

    /// The client program, when the transport could verify it (the relay
    /// socket asks the kernel who is at the other end); it lasts as long as
    /// the session, so it is kept there.
    pub fn process(&self) -> Option<&Process> {
        self.session.as_deref().and_then(Session::process)
    }

    /// The name of the token the client presented, if any.
    pub fn token(&self) -> Option<&str> {
        self.grant.as_deref().map(Grant::name)
    }
}

/// A client program: the agent behind a shim, say, as the kernel names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Process {
    /// The kernel's name for it (`comm`, at most 15 bytes), e.g. `claude`.
    pub name: String,
    pub pid: u32,
}

/// Tells a client how far a long call has got (MCP `notifications/progress`),
/// which also keeps clients from timing the call out.
#[derive(Clone)]
pub struct Progress(Arc<dyn Fn(f64, Option<String>) + Send + Sync>);

impl Progress {
    pub fn new(report: impl Fn(f64, Option<String>) + Send + Sync + 'static) -> Self {
        Self(Arc::new(report))
    }

    /// Reports `progress` (growing with each report), with a message.
    pub fn report(&self, progress: f64, message: Option<String>) {
        (self.0)(progress, message);
    }
}

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Progress")
    }
}
