//! switchboard's binary crate (`crates/switchboard/src`) compiled as a
//! library, so that fuzz targets can call the bodies in its `fuzzing`
//! module (`daemon_stdio`, `config_toml`). The binary has no library of its
//! own; rather than give it one, this lists its modules as `main.rs` does
//! (a module added there and used by these must be added here too: the
//! build fails until it is).

#![allow(dead_code, unused_imports)]

#[path = "../../crates/switchboard/src/backup.rs"]
mod backup;
#[path = "../../crates/switchboard/src/cli.rs"]
mod cli;
#[path = "../../crates/switchboard/src/config.rs"]
mod config;
#[path = "../../crates/switchboard/src/fuzzing.rs"]
pub mod fuzzing;
#[path = "../../crates/switchboard/src/logging.rs"]
mod logging;
#[path = "../../crates/switchboard/src/mcp.rs"]
mod mcp;
#[path = "../../crates/switchboard/src/packaging.rs"]
mod packaging;
#[path = "../../crates/switchboard/src/profiles.rs"]
mod profiles;
#[path = "../../crates/switchboard/src/serve.rs"]
mod serve;
#[path = "../../crates/switchboard/src/terminal.rs"]
mod terminal;
#[path = "../../crates/switchboard/src/token.rs"]
mod token;
#[path = "../../crates/switchboard/src/transport/mod.rs"]
mod transport;
