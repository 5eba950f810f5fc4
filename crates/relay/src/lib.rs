//! Serve an application's tools to AI agents through `switchboard shim`.
//!
//! An agent CLI spawns `switchboard shim --app-id <id>` as an MCP server;
//! the shim forwards the agent's `tools/list` and `tools/call` over a Unix
//! socket to the application that embeds this crate. The wire format is the
//! relay protocol, specified in `docs/relay-protocol.md`.
//!
//! - [`protocol`] — messages and framing, shared by both sides.
//! - [`paths`] — where an application's socket lives.
//! - [`client`] — the client side of a connection (what the shim uses).

pub mod client;
pub mod paths;
pub mod protocol;

pub use paths::{DEFAULT_PREFIX, socket_path};
