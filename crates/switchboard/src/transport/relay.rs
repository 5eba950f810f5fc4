//! The daemon's relay socket: the same tools as every other transport, for
//! `switchboard shim` (one per agent session), `switchboard tail` and `say`.
//!
//! The relay crate checks the peer (same uid, hello pid = kernel pid),
//! re-validates arguments against each tool's schema, and tells us which
//! process called. Calls go through [`McpServer::call`], so shutdown drains
//! them like any other.

use std::time::Duration;

use switchboard_relay::{Call, PeerInfo, Tool, ToolHandler, ToolResult};
use switchboard_toolset::{Caller, call_timeout};

use crate::mcp::McpServer;

/// Serves the registry over the relay protocol.
pub struct RegistryHandler {
    server: McpServer,
}

impl RegistryHandler {
    pub fn new(server: McpServer) -> Self {
        Self { server }
    }
}

impl ToolHandler for RegistryHandler {
    fn tools(&self) -> Vec<Tool> {
        self.server
            .registry()
            .tools()
            .iter()
            .filter_map(|tool| {
                let mut relayed: Tool = serde_json::to_value(tool)
                    .and_then(serde_json::from_value)
                    .map_err(
                        |e| tracing::error!(tool = %tool.name, error = %e, "tool not relayable"),
                    )
                    .ok()?;
                relayed.timeout_ms = call_timeout(tool).map(|t: Duration| t.as_millis() as u64);
                Some(relayed)
            })
            .collect()
    }

    async fn call(&self, call: Call) -> ToolResult {
        let caller = caller(&call.peer);
        let server = self.server.for_caller(caller);
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
}

/// Who called: the shim's pid, and as the default nick the agent that spawned
/// it (`ancestry[1]`), named after its process and pid, e.g. `claude-4242`.
fn caller(peer: &PeerInfo) -> Caller {
    let agent = peer.ancestry.get(1);
    let default_nick = match agent {
        Some(process) => nick_for(&process.name, process.pid),
        None => nick_for("agent", peer.pid),
    };
    Caller {
        label: format!("relay pid {}", peer.pid),
        pid: Some(peer.pid),
        default_nick: Some(default_nick),
    }
}

/// A valid IRC nick from a process name: letters, digits, `-` and `_` kept,
/// a letter first, at most 31 bytes with the pid.
fn nick_for(name: &str, pid: u32) -> String {
    let mut base: String = name
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
        .take(20)
        .collect();
    if !base.starts_with(|c: char| c.is_ascii_alphabetic()) {
        base.insert_str(0, "agent");
    }
    format!("{base}-{pid}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_nicks_are_valid_irc_nicks() {
        assert_eq!(nick_for("claude", 4242), "claude-4242");
        assert_eq!(nick_for("node (v22)", 7), "nodev22-7");
        assert_eq!(nick_for("9lives", 1), "agent9lives-1");
        assert_eq!(nick_for("", 5), "agent-5");
        let long = nick_for(&"x".repeat(50), u32::MAX);
        assert!(long.len() <= 31, "{long}");
        let rules = switchboard_chat::NameRules::default();
        for nick in [nick_for("ünïcode", 3), long] {
            assert!(rules.nick(&nick).is_ok(), "{nick}");
        }
    }
}
