//! The daemon's relay socket: the same tools as every other transport, for
//! `switchboard shim` (one per agent session), `switchboard tail` and `say`.
//!
//! The relay crate checks the peer (same uid, hello pid = kernel pid),
//! re-validates arguments against each tool's schema, and tells us which
//! process called. Calls go through [`McpServer::call`], so shutdown drains
//! them like any other.
//!
//! Each connection is one [`Session`]. Its identity is the nick the shim was
//! given (`--nick`), else the one its process settled on before; otherwise
//! the session carries the agent's process, which toolsets may name it
//! after until the agent speaks under a name of its own. When the shim agreed on
//! events, what toolsets push to the session goes out as relay events, and
//! the shim's events come back in as the client's notifications.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, OnceLock},
};

use switchboard_relay::{Call, Event, Handle, PeerInfo, Tool, ToolHandler, ToolResult, events};
use switchboard_toolset::{Caller, Notification, Process, Session, ToolSpec};
use tokio::sync::mpsc;

use super::NOTIFICATION_QUEUE;
use crate::mcp::McpServer;

/// Identities adopted by processes that may dial again, at most.
const REMEMBERED: usize = 4096;
/// The prefix of MCP notification methods that relay events leave out.
const NOTIFICATIONS: &str = "notifications/";

/// Serves the registry over the relay protocol.
pub struct RegistryHandler {
    server: McpServer,
    handle: OnceLock<Handle>,
    sessions: Mutex<HashMap<u64, Arc<Session>>>,
    /// The identity each client process settled on, so a shim that dials
    /// again (after the daemon restarted, say) keeps it.
    remembered: Mutex<HashMap<u32, String>>,
}

impl RegistryHandler {
    pub fn new(server: McpServer) -> Self {
        Self {
            server,
            handle: OnceLock::new(),
            sessions: Mutex::default(),
            remembered: Mutex::default(),
        }
    }

    /// The relay events the registry takes part in: the experimental
    /// capabilities its toolsets use, and for a permission relay the
    /// requests that come with it.
    pub fn events(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .server
            .registry()
            .experimental()
            .into_iter()
            .map(str::to_owned)
            .collect();
        if names.iter().any(|n| n == events::PERMISSION) {
            names.push(events::PERMISSION_REQUEST.to_owned());
        }
        names
    }

    /// Lets the handler push to its clients once the server is bound.
    pub fn set_handle(&self, handle: Handle) {
        let _ = self.handle.set(handle);
    }

    fn session(&self, peer: &PeerInfo) -> Option<Arc<Session>> {
        self.sessions
            .lock()
            .expect("sessions lock")
            .get(&peer.connection)
            .cloned()
    }

    fn caller(&self, peer: &PeerInfo) -> Caller {
        Caller {
            label: format!("relay pid {}", peer.pid),
            human: is_terminal(peer),
            session: self.session(peer),
            progress: None,
            grant: None,
        }
    }
}

/// A declared tool in the relay's shape: MCP's, plus the call timeout the
/// shim waits for.
fn relay_tool(spec: &ToolSpec) -> Tool {
    let schema = |s: &Arc<serde_json::Map<String, serde_json::Value>>| {
        serde_json::Value::Object((**s).clone())
    };
    Tool {
        name: spec.name.clone(),
        title: spec.title.clone(),
        description: Some(spec.description.clone()),
        input_schema: schema(&spec.input_schema),
        output_schema: spec.output_schema.as_ref().map(schema),
        // Plain optional fields: serialising them cannot fail.
        annotations: spec
            .annotations
            .as_ref()
            .and_then(|a| serde_json::to_value(a).ok()),
        timeout_ms: spec.timeout.map(|t| t.as_millis() as u64),
        extra: serde_json::Map::new(),
    }
}

/// `switchboard say` and `tail` speak for the person at the terminal.
fn is_terminal(peer: &PeerInfo) -> bool {
    peer.client.starts_with(crate::terminal::CLIENT_NAME)
}

impl ToolHandler for RegistryHandler {
    fn tools(&self) -> Vec<Tool> {
        self.server.registry().tools(None).map(relay_tool).collect()
    }

    fn connected(&self, peer: &Arc<PeerInfo>) {
        let mut session = Session::new(format!("relay pid {}", peer.pid));
        let remembered = self
            .remembered
            .lock()
            .expect("remembered lock")
            .get(&peer.pid)
            .cloned();
        session = match (peer.identity.clone(), remembered) {
            (Some(nick), _) | (None, Some(nick)) => session.with_identity(nick),
            // A person at a terminal names themselves when they speak.
            (None, None) if is_terminal(peer) => session,
            (None, None) => session.with_process(agent_process(peer)),
        };
        if !peer.events.is_empty() {
            let (tx, rx) = mpsc::channel(NOTIFICATION_QUEUE);
            session = session.with_notifications(tx);
            if let Some(handle) = self.handle.get() {
                tokio::spawn(forward(rx, handle.clone(), peer.connection));
            }
        }
        let session = Arc::new(session);
        self.sessions
            .lock()
            .expect("sessions lock")
            .insert(peer.connection, session.clone());
        self.server.registry().open_session(&session);
    }

    fn instructions(&self, peer: &PeerInfo) -> Option<String> {
        self.server.for_caller(self.caller(peer)).instructions()
    }

    async fn call(&self, call: Call) -> ToolResult {
        let server = self.server.for_caller(self.caller(&call.peer));
        match server.call(&call.name, call.arguments).await {
            // `resultType` belongs to MCP 2026-07-28; the shim's host may be older.
            Ok(mut result) => {
                result.result_type = None;
                serde_json::to_value(result)
                    .and_then(serde_json::from_value)
                    .unwrap_or_else(|e| {
                        ToolResult::error(format!("switchboard could not encode the result: {e}"))
                    })
            }
            Err(error) => ToolResult::error(error.message.to_string()),
        }
    }

    async fn event(&self, peer: Arc<PeerInfo>, event: Event) {
        if let Some(session) = self.session(&peer) {
            let method = format!("{NOTIFICATIONS}{}", event.name);
            self.server
                .registry()
                .on_notification(&session, &Notification::new(method, event.params));
        }
    }

    fn disconnected(&self, peer: &PeerInfo) {
        let session = self
            .sessions
            .lock()
            .expect("sessions lock")
            .remove(&peer.connection);
        let Some(session) = session else { return };
        session.close();
        if let Some(nick) = session.chosen_identity() {
            let mut remembered = self.remembered.lock().expect("remembered lock");
            if remembered.len() >= REMEMBERED {
                remembered.clear();
            }
            remembered.insert(peer.pid, nick);
        }
    }
}

/// Sends a session's notifications to its shim as relay events.
async fn forward(mut notifications: mpsc::Receiver<Notification>, handle: Handle, connection: u64) {
    while let Some(note) = notifications.recv().await {
        let Some(name) = note.method.strip_prefix(NOTIFICATIONS) else {
            continue;
        };
        let event = Event::new(name, note.params);
        if let Err(e) = handle.push_to(connection, &event) {
            tracing::debug!(connection, event = %event.name, error = %e, "an event was not pushed");
            if matches!(e, switchboard_relay::PushError::NoConnection(_)) {
                return;
            }
        }
    }
}

/// The agent behind the shim: the process that spawned it (`ancestry[1]`,
/// normally the agent CLI), else the shim itself.
fn agent_process(peer: &PeerInfo) -> Process {
    match peer.ancestry.get(1) {
        Some(process) => Process {
            name: process.name.clone(),
            pid: process.pid,
        },
        None => Process {
            name: String::new(),
            pid: peer.pid,
        },
    }
}
