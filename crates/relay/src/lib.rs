//! Serve an application's tools to AI agents through `switchboard shim`.
//!
//! An agent CLI spawns `switchboard shim --app-id <id>` as an MCP server;
//! the shim forwards the agent's `tools/list` and `tools/call` over a Unix
//! socket to the application that embeds this crate. The wire format is the
//! relay protocol, specified in `docs/relay-protocol.md`; a program in any
//! language can implement either side from that document alone.
//!
//! # Serving tools
//!
//! Implement [`ToolHandler`] (the tool list and an async `call`), [`bind`]
//! the socket, and [`serve`](Server::serve) until a shutdown future
//! completes:
//!
//! ```
//! use std::time::Duration;
//!
//! use serde_json::json;
//! use switchboard_relay::{Call, Options, Tool, ToolHandler, ToolResult, client::Link};
//!
//! struct Echo;
//!
//! impl ToolHandler for Echo {
//!     fn tools(&self) -> Vec<Tool> {
//!         vec![Tool::new(
//!             "echo",
//!             "Say the text back.",
//!             json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
//!         )]
//!     }
//!
//!     async fn call(&self, call: Call) -> ToolResult {
//!         // The arguments were validated against the schema above.
//!         let text = call.arguments["text"].as_str().unwrap_or_default();
//!         ToolResult::text(format!("{text} (asked by pid {})", call.peer.pid))
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let dir = tempfile::tempdir().unwrap();
//! // A real application uses `switchboard_relay::bind("dev.example.echo", Echo)`,
//! // which binds the conventional path that `switchboard shim --app-id` dials.
//! let server = Options::new("dev.example.echo")
//!     .app_name("Echo")
//!     .socket_path(dir.path().join("relay.sock"))
//!     .bind(Echo)
//!     .unwrap();
//! let path = server.socket_path().to_owned();
//! let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
//! let serving = tokio::spawn(server.serve(async {
//!     let _ = stopped.await;
//! }));
//!
//! // The client side, as `switchboard shim` does it.
//! let (link, _events) = Link::connect(&path, Duration::from_secs(1), "doc test").await.unwrap();
//! let list = link.list_tools(Duration::from_secs(3)).await.unwrap();
//! assert_eq!(list.tools[0].name, "echo");
//! assert!(list.malformed.is_empty());
//! let text = |text: serde_json::Value| text.as_object().cloned().unwrap();
//! let result = link
//!     .call_tool("echo", text(json!({"text": "hi"})), Duration::from_secs(15))
//!     .await
//!     .unwrap();
//! assert!(!result.is_error);
//! assert!(result.content[0]["text"].as_str().unwrap().starts_with("hi (asked by pid "));
//!
//! // Arguments that do not match the schema never reach the handler.
//! let result = link
//!     .call_tool("echo", text(json!({"text": 17})), Duration::from_secs(15))
//!     .await
//!     .unwrap();
//! assert!(result.is_error);
//! assert_eq!(
//!     result.content[0]["text"],
//!     "invalid arguments for echo: 17 is not of type \"string\" (at /text)"
//! );
//!
//! stop.send(()).unwrap();
//! serving.await.unwrap().unwrap();
//! assert!(!path.exists(), "the socket is removed at shutdown");
//! # }
//! ```
//!
//! # Where the socket lives
//!
//! [`bind`] puts the socket at `$XDG_RUNTIME_DIR/<prefix>/<app_id>/relay.sock`
//! ([`socket_path`]; the prefix is [`DEFAULT_PREFIX`] unless
//! [`Options::prefix`] says otherwise). When `XDG_RUNTIME_DIR` is unset or
//! empty (a cron job, a container, `su`), it falls back to
//! `/tmp/<prefix>-<uid>/<app_id>/relay.sock`: per user, since `/tmp` is
//! shared. Either way:
//!
//! - the app's directory is created (with missing parents) and kept at mode
//!   `0700`; the prefix directory, if created here, is `0700` too, and an
//!   existing one must belong to this user and be writable by nobody else
//!   (otherwise [`BindError::Insecure`]: another user could swap the
//!   directories under `/tmp`);
//! - a socket left by an instance that died is replaced; a socket that still
//!   accepts connections is refused with [`BindError::InUse`]; an exclusive
//!   lock on `relay.sock.lock` beside it keeps two instances starting at the
//!   same moment from both replacing it;
//! - the socket file is removed again when the [`Server`] is dropped or
//!   `serve` returns — unless another instance has replaced it meanwhile.
//!
//! [`Options::socket_path`] binds an explicit path instead (switchboard's
//! own `--socket PATH`); then only missing parent directories are created.
//!
//! # Who is calling
//!
//! Every connection is checked with `SO_PEERCRED`: a peer running as another
//! user is refused (an `error` line, then the connection closes), as is a
//! `hello` whose pid is not the connecting process's, or another protocol
//! version. Each [`Call`] carries a [`PeerInfo`]: the client's pid and uid,
//! and its process ancestry read from `/proc` ([`proctree`]) — usually
//! `switchboard shim` ← the agent CLI ← a shell ← the terminal or tab, which
//! lets an application map a call to the window that started the agent.
//!
//! # Arguments are validated here
//!
//! The socket is reachable by any process of the user, so the client's
//! schema checks are no boundary: every call's arguments are validated
//! against the tool's `inputSchema` (compiled once, when the tool list is
//! read) before the handler runs. Invalid arguments are answered with an
//! `isError` result listing each problem and where it is (a JSON pointer
//! into the arguments); an unknown tool with an `unknown_tool` error.
//! External `$ref`s in schemas are never fetched.
//!
//! # Changing the tool list
//!
//! [`Handle::tools_changed`] re-reads [`ToolHandler::tools`] and sends
//! `notify tools_changed` to every connected client; the shim then tells
//! its agent (`notifications/tools/list_changed`).
//!
//! # Pointing an agent at the application
//!
//! [`write_mcp_config`] writes the `--mcp-config` file an agent CLI takes
//! (`{"mcpServers":{"<name>":{"command":"…/switchboard","args":["shim","--app-id","<id>"]}}}`),
//! atomically and best effort; [`Server::write_mcp_config`] writes the one
//! that matches how the server was bound.
//!
//! # Modules
//!
//! - [`protocol`] — messages and framing, shared by both sides.
//! - [`paths`] — where an application's socket lives.
//! - [`client`] — the client side of a connection (what the shim uses).
//! - [`events`] — events pushed to agents, and passed on from their hosts.
//! - [`proctree`] — a process's ancestry from `/proc`.
//! - `fuzzing` — the body of the `relay_line` fuzz target (feature
//!   `fuzzing`, off by default).

pub mod client;
pub mod events;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
mod mcp_config;
pub mod paths;
pub mod proctree;
pub mod protocol;
mod server;
mod shapes;
mod socket;
mod tools;

pub use events::{Event, PushError};
pub use mcp_config::{McpConfig, mcp_config_path, switchboard_command, write_mcp_config};
pub use paths::{DEFAULT_PREFIX, socket_path};
pub use proctree::ProcessInfo;
pub use server::{Handle, Options, Server, bind};
pub use socket::BindError;
pub use tools::{Call, ERROR_META, PeerInfo, Tool, ToolHandler, ToolResult, ToolTableError};
