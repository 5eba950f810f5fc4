//! Dev-only test kit for switchboard's IRC backend: real IRC servers on loopback and a
//! scripted human on the other end.
//!
//! - [`IrcServer`] runs a Debian-packaged InspIRCd 3 or ngIRCd on `127.0.0.1` with the
//!   kit's config (relaxed flood control, no DNS/ident, optional TLS with a throwaway CA),
//!   and can kill, stop and restart it on the same port for fault tests. InspIRCd can run
//!   with Atheme services linked (`ServerOptions { services: true, .. }`), for SASL PLAIN
//!   against real NickServ accounts ([`IrcServer::register_account`]).
//! - [`IrcNetwork`] is two InspIRCd servers linked into one network, standing for two
//!   hosts: a client on each side, a netsplit and its healing on demand, and restarting
//!   either server with the link coming back.
//! - [`Human`] is a raw-socket IRC client (RFC 1459/2812, no IRC crate) that registers,
//!   joins, talks, and lets a test wait for and inspect what the server sent.
//! - [`Line`] is the parsed view of one received line.
//! - [`process`] has the environment to clear when running switchboard's binaries, and
//!   waiting for a process to end.
//! - [`Browser`] is Debian's Chromium, headless, driven over WebDriver by
//!   `chromedriver` (both from Debian's `chromium` and `chromium-driver`).
//!
//! A missing server binary is a test failure (a panic telling what to install), never a
//! skip. Note that InspIRCd completes registration about 1 s after NICK/USER, so connect
//! several humans concurrently.
//!
//! ```no_run
//! use std::time::Duration;
//! use switchboard_testkit::{Human, IrcServer, ServerKind, ServerOptions};
//!
//! # async fn demo() {
//! let server = IrcServer::start(ServerKind::NgIRCd, ServerOptions::default()).await;
//! let (alice, bob) = tokio::join!(
//!     Human::connect(&server, "alice"),
//!     Human::connect(&server, "bob"),
//! );
//! alice.join("#test").await;
//! bob.join("#test").await;
//! alice.privmsg("#test", "hi bob").await;
//! let line = bob
//!     .expect(|l| l.is_from("alice", "PRIVMSG"), Duration::from_secs(5))
//!     .await;
//! assert_eq!(line.params, ["#test", "hi bob"]);
//! # }
//! ```

mod browser;
mod config;
mod disk;
mod human;
mod line;
mod network;
pub mod process;
mod server;
mod services;
mod tls;

pub use browser::{Browser, BrowserOptions};
pub use disk::{Filler, Tmpfs};
pub use human::{ConnectError, Human, JOIN_TIMEOUT, REGISTER_TIMEOUT};
pub use line::Line;
pub use network::IrcNetwork;
pub use server::{IrcServer, ServerKind, ServerOptions};

#[cfg(test)]
mod tests {
    /// Tests may share servers and humans across tasks (`Arc<Human>`, spawned tasks).
    #[test]
    fn handles_are_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<super::IrcServer>();
        check::<super::IrcNetwork>();
        check::<super::Human>();
        check::<super::Line>();
        check::<super::ConnectError>();
    }
}
