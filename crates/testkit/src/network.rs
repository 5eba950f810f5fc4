//! Two InspIRCd servers on loopback linked into one IRC network, standing for two hosts:
//! a switchboard daemon (or a [`Human`]) on each side, and netsplits on demand.
//!
//! [`IrcNetwork::start`] runs `irc0.test` (SID `0AA`) and `irc1.test` (SID `1AA`), each
//! with its own client port and server port, linked with spanningtree. `irc1.test` dials:
//! its `<autoconnect>` brings the link back after a restart of either side. Each server
//! also has one client of the kit's own (`testkit-net0`, `testkit-net1`), an IRC operator
//! that probes the link and cuts it. They count as users (LUSERS, WHO, per-IP limits) but
//! join no channel.
//!
//! The link counts as up when each side lists the other in `LINKS` and a `TIME` sent to
//! the other server comes back: that reply travels behind the other server's burst, so
//! every user and channel of the other side is known by then. It counts as split when
//! neither side lists the other.
//!
//! Each side drops the other itself (`SQUIT`) rather than wait to see the link's socket
//! close: InspIRCd 3 reads a server socket edge-triggered and reads again only after a
//! full buffer, so when the last data and the peer's FIN arrive together it misses the
//! close, and keeps the dead link (and the other side's users) until it next writes to
//! it (it pings the other server once a minute).
//!
//! ```no_run
//! use std::time::Duration;
//! use switchboard_testkit::{Human, IrcNetwork, ServerOptions};
//!
//! # async fn demo() {
//! let mut network = IrcNetwork::start(ServerOptions::default()).await;
//! let (alice, bob) = tokio::join!(
//!     Human::connect(network.server(0), "alice"),
//!     Human::connect(network.server(1), "bob"),
//! );
//! alice.join("#test").await;
//! bob.join("#test").await;
//! network.split().await;
//! // Each side sees the other's users quit with "<own server> <lost server>".
//! let quit = alice
//!     .expect(|l| l.is_from("bob", "QUIT"), Duration::from_secs(5))
//!     .await;
//! assert_eq!(quit.trailing(), Some("irc0.test irc1.test"));
//! network.heal().await;
//! # }
//! ```

use std::time::Duration;

use tokio::time::Instant;

use crate::config::{Link, OPER_NAME, OPER_PASSWORD};
use crate::human::Human;
use crate::line::Line;
use crate::server::{IrcServer, ServerOptions, free_ports};

/// The servers' names, by index.
const NAMES: [&str; 2] = ["irc0.test", "irc1.test"];
/// The servers' SIDs, by index.
const SIDS: [&str; 2] = ["0AA", "1AA"];
/// The nicks of the kit's own client on each server.
const WATCHERS: [&str; 2] = ["testkit-net0", "testkit-net1"];
/// The server that dials the other (`<autoconnect>`, `CONNECT`).
const DIALER: usize = 1;

/// How many fresh sets of ports [`IrcNetwork::start`] tries when another process wins
/// the bind race.
const PORT_ATTEMPTS: usize = 5;
/// How long the link may take to come up: at once after `CONNECT`, but after a restart
/// only on the autoconnect, which InspIRCd checks every 5 s (1-6 s after a start).
const LINK_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a server may take to drop the other after `SQUIT` (a few ms).
const SPLIT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a `REHASH` may take (a few ms, with [`REHASH_NUDGE`]).
const REHASH_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the operator sends a `PING` while a `REHASH` is under way: InspIRCd applies
/// the config it has read only when its event loop next wakes up, else within 1 s.
const REHASH_NUDGE: Duration = Duration::from_millis(10);
/// How long a server may take to answer a local command (`LINKS`, `OPER`).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a `TIME` to the other server may take to come back (under 1 ms on loopback;
/// never, if the link went away meanwhile).
const ROUND_TRIP_TIMEOUT: Duration = Duration::from_secs(2);
/// The pause between two looks at the link.
const PROBE_INTERVAL: Duration = Duration::from_millis(20);
/// How many of the lines its kit client received a failure lists, per server.
const RECENT_LINES: usize = 30;

/// Two linked InspIRCd servers on 127.0.0.1: `server(0)` is `irc0.test`, `server(1)` is
/// `irc1.test`. Every process it started is killed when it is dropped.
///
/// All methods panic on failure, with both servers' logs.
#[derive(Debug)]
pub struct IrcNetwork {
    /// The kit's own client on each server (dropped before the servers).
    watchers: [Human; 2],
    servers: [IrcServer; 2],
    /// Whether [`IrcNetwork::split`] cut the link (and dropped the autoconnect).
    split: bool,
}

impl IrcNetwork {
    /// Starts both servers with `options` (on each), links them and waits until the link
    /// is up; about 1 s, InspIRCd's registration delay for the kit's own clients. These
    /// count against `options.max_per_ip`, and InspIRCd's `globalmax` counts the clients
    /// from 127.0.0.1 on the whole network; flood control does not apply to them.
    ///
    /// # Panics
    /// If InspIRCd is not installed (`inspircd not found: apt-get install inspircd`), with
    /// `options.services` (the kit links Atheme to a single server only), if a server does
    /// not start, or if the link is not up within 20 s.
    pub async fn start(options: ServerOptions) -> IrcNetwork {
        assert!(
            !options.services,
            "IrcNetwork runs no services: ServerOptions::services is for IrcServer::start"
        );
        let servers = launch(options).await;
        let (net0, net1) = tokio::join!(
            Human::connect(&servers[0], WATCHERS[0]),
            Human::connect(&servers[1], WATCHERS[1]),
        );
        tokio::join!(oper(&net0), oper(&net1));
        let network = IrcNetwork {
            watchers: [net0, net1],
            servers,
            split: false,
        };
        // Dial now rather than wait up to 6 s for the autoconnect.
        network.connect().await;
        network.wait_link(true, "start").await;
        network
    }

    /// Server `i` (0 or 1): its port for clients, its log.
    ///
    /// # Panics
    /// If `i` is not 0 or 1.
    pub fn server(&self, i: usize) -> &IrcServer {
        &self.servers[i]
    }

    /// The name of server `i` (`irc0.test`, `irc1.test`), as in a netsplit's QUIT reason:
    /// users of the other side quit with `"<own server> <other server>"`.
    ///
    /// # Panics
    /// If `i` is not 0 or 1.
    pub fn server_name(&self, i: usize) -> &'static str {
        NAMES[i]
    }

    /// Cuts the link while both servers keep running and keep their clients: `irc1.test`
    /// `REHASH`es without its autoconnect, so that the link stays down until
    /// [`IrcNetwork::heal`] (or a restart), then the operator on each side sends `SQUIT`
    /// for the other server. Returns once neither server lists the other; clients on each
    /// side have then been sent the other side's users' QUITs.
    ///
    /// # Panics
    /// If the link is already split, or a server does not confirm in time.
    pub async fn split(&mut self) {
        assert!(!self.split, "IrcNetwork::split: the link is already split");
        self.servers[DIALER].set_autoconnect(false);
        self.rehash().await;
        tokio::join!(self.squit(0), self.squit(1));
        self.split = true;
        self.wait_link(false, "SQUIT").await;
    }

    /// Restores the link cut by [`IrcNetwork::split`]: the operator on `irc1.test` sends
    /// `CONNECT irc0.test` and `REHASH`es with the autoconnect back. Returns once the link
    /// is up and each server knows the other side's users and channels.
    ///
    /// # Panics
    /// If the link is not split, or is not up within 20 s.
    pub async fn heal(&mut self) {
        assert!(self.split, "IrcNetwork::heal: the link is not split");
        self.connect().await;
        self.servers[DIALER].set_autoconnect(true);
        self.rehash().await;
        self.split = false;
        self.wait_link(true, "CONNECT").await;
    }

    /// Kills server `i` (0 or 1) with SIGKILL and starts it again on the same ports (see
    /// [`IrcServer::restart`]): its clients are disconnected, and the other side's
    /// operator drops it (`SQUIT`), so that its users quit there with the netsplit reason.
    /// Returns once the autoconnect has brought the link back (1-6 s: InspIRCd checks it
    /// every 5 s). A split link comes back too.
    ///
    /// # Panics
    /// If `i` is not 0 or 1, if the server does not come back, or if the link is not up
    /// within 20 s.
    pub async fn restart(&mut self, i: usize) {
        if self.split {
            self.servers[DIALER].set_autoconnect(true);
            if i != DIALER {
                self.rehash().await;
            }
            self.split = false;
        }
        let what = format!("restarting {}", NAMES[i]);
        self.servers[i].kill().await;
        // While it is down, so that this cannot cut the link it makes when back.
        self.squit(1 - i).await;
        let deadline = Instant::now() + SPLIT_TIMEOUT;
        self.wait_side(1 - i, false, deadline, &what).await;

        self.servers[i].restart().await;
        let watcher = Human::connect(&self.servers[i], WATCHERS[i]).await;
        oper(&watcher).await;
        self.watchers[i] = watcher;
        self.wait_link(true, &what).await;
    }

    /// Has the operator on server `i` (0 or 1) `KILL` `nick` off the network, as an
    /// operator would an abusive user: the nick's channels see it QUIT.
    pub async fn kill_user(&self, i: usize, nick: &str) {
        self.watchers[i]
            .send_raw(&format!("KILL {nick} :testkit kill"))
            .await;
    }

    /// Has the dialing server connect to the other one.
    async fn connect(&self) {
        self.watchers[DIALER]
            .send_raw(&format!("CONNECT {}", NAMES[1 - DIALER]))
            .await;
    }

    /// Has server `side` drop its link to the other one, if it has it (else it answers
    /// with a NOTICE that nothing waits for).
    async fn squit(&self, side: usize) {
        self.watchers[side]
            .send_raw(&format!("SQUIT {}", NAMES[1 - side]))
            .await;
    }

    /// Has the dialing server reread its config (for its autoconnect) and waits until it
    /// has.
    async fn rehash(&self) {
        let operator = &self.watchers[DIALER];
        operator.send_raw("REHASH").await;
        let done = |l: &Line| {
            l.command == "NOTICE"
                && l.trailing()
                    .is_some_and(|t| t.contains("Successfully rehashed"))
        };
        let deadline = Instant::now() + REHASH_TIMEOUT;
        while operator.try_expect(done, REHASH_NUDGE).await.is_none() {
            if Instant::now() >= deadline {
                self.fail(&format!(
                    "{} did not confirm REHASH within {REHASH_TIMEOUT:?}",
                    NAMES[DIALER]
                ));
            }
            operator.send_raw("PING :rehash").await;
        }
    }

    /// Waits until the link is up (`up`) or split, as seen from both sides; `after` names
    /// what should have brought that about, for the panic message.
    async fn wait_link(&self, up: bool, after: &str) {
        let deadline = Instant::now() + if up { LINK_TIMEOUT } else { SPLIT_TIMEOUT };
        for side in 0..2 {
            self.wait_side(side, up, deadline, after).await;
        }
    }

    /// Waits until server `side` is linked to the other one with all of its state (`up`)
    /// or does not list it (`!up`), until `deadline`.
    async fn wait_side(&self, side: usize, up: bool, deadline: Instant, after: &str) {
        let (watcher, peer) = (&self.watchers[side], NAMES[1 - side]);
        let started = Instant::now();
        loop {
            let linked = lists(watcher, peer).await && (!up || answers(watcher, peer).await);
            if linked == up {
                return;
            }
            if Instant::now() >= deadline {
                let state = if up { "linked to" } else { "split from" };
                self.fail(&format!(
                    "{} was still not {state} {peer} {:?} after {after}",
                    NAMES[side],
                    started.elapsed()
                ));
            }
            tokio::time::sleep(PROBE_INTERVAL).await;
        }
    }

    /// Panics with `why`, each server's log and the last lines its kit client received.
    fn fail(&self, why: &str) -> ! {
        let sides: Vec<String> = (0..2)
            .map(|i| {
                let lines = self.watchers[i].received();
                let recent = &lines[lines.len().saturating_sub(RECENT_LINES)..];
                let recent: Vec<&str> = recent.iter().map(|l| l.raw.as_str()).collect();
                format!(
                    "--- {} (127.0.0.1:{}) log ---\n{}\n--- last lines to {} ---\n  {}",
                    NAMES[i],
                    self.servers[i].port(),
                    self.servers[i].log(),
                    WATCHERS[i],
                    recent.join("\n  ")
                )
            })
            .collect();
        panic!("IrcNetwork: {why}\n{}", sides.join("\n"))
    }
}

/// Starts both servers on fresh ports, each with a link to the other; `irc1.test` has the
/// autoconnect.
async fn launch(options: ServerOptions) -> [IrcServer; 2] {
    for _ in 0..PORT_ATTEMPTS {
        let [client0, link0, client1, link1] = free_ports();
        let link = |i: usize, port, peer_port| Link {
            name: NAMES[i],
            sid: SIDS[i],
            port,
            peer: NAMES[1 - i],
            peer_port,
            autoconnect: i == DIALER,
        };
        // Another process took a port between our probe and the server's bind: start over.
        let Some(server0) =
            IrcServer::start_linked(options.clone(), client0, link(0, link0, link1)).await
        else {
            continue;
        };
        let Some(server1) =
            IrcServer::start_linked(options.clone(), client1, link(1, link1, link0)).await
        else {
            continue;
        };
        return [server0, server1];
    }
    panic!("IrcNetwork: lost the bind race on {PORT_ATTEMPTS} sets of ports in a row")
}

/// Makes `watcher` an IRC operator (allowed `CONNECT`, `SQUIT`, `REHASH` and `KILL`).
async fn oper(watcher: &Human) {
    watcher
        .send_raw(&format!("OPER {OPER_NAME} {OPER_PASSWORD}"))
        .await;
    // 381 RPL_YOUREOPER
    watcher.expect(|l| l.command == "381", ANSWER_TIMEOUT).await;
}

/// Whether `watcher`'s server lists `server` in `LINKS`.
async fn lists(watcher: &Human, server: &str) -> bool {
    watcher.send_raw("LINKS").await;
    let mut listed = false;
    // 364 RPL_LINKS <nick> <server> <uplink> :<hops> <description>, then 365 RPL_ENDOFLINKS.
    // Each call takes its reply up to the 365, so the next one starts at its own.
    loop {
        let line = watcher
            .expect(|l| l.command == "364" || l.command == "365", ANSWER_TIMEOUT)
            .await;
        if line.command == "365" {
            return listed;
        }
        listed |= line.param(1) == Some(server);
    }
}

/// Whether a `TIME` sent by `watcher` to `server` comes back from it (391 RPL_TIME); an
/// unknown server gets no reply at all.
async fn answers(watcher: &Human, server: &str) -> bool {
    let from_server = |l: &Line| l.command == "391" && l.prefix.as_deref() == Some(server);
    // A late reply to an earlier probe would answer for this one.
    while watcher
        .try_expect(from_server, Duration::ZERO)
        .await
        .is_some()
    {}
    watcher.send_raw(&format!("TIME {server}")).await;
    watcher
        .try_expect(from_server, ROUND_TRIP_TIMEOUT)
        .await
        .is_some()
}
