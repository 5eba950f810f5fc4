//! Section `hosts`: many hosts, one network. Two `switchboard serve --http`
//! daemons on the IRC backend (each with its own config, data directory and
//! relay socket: two hosts) are connected to the two servers of an InspIRCd
//! network that `switchboard-testkit` runs and links on loopback
//! ([`IrcNetwork`]; flood control and the send-queue limit lifted, no history
//! replay). Each daemon's observer joins the channel at start.
//!
//! - **Cross-host delivery**: agent `bob` on host B has spoken in the
//!   channel, so its lines are in his inbox. Each round he blocks in
//!   `wait_for_messages` (his inbox, over Streamable HTTP); [`SETTLE`] later
//!   agent `alice` on host A sends one numbered line over Streamable HTTP,
//!   timed from just before her request is written until bob's wait returns
//!   with that line. The line travels A's sender connection → `irc0` → the
//!   server link → `irc1` → B's observer → B's history (committed) → the
//!   wait. After [`WARM_UP`] untimed rounds (the first opens alice's sender
//!   connection), [`Plan::irc_sends`] sequential rounds: p50 (target), p90
//!   and p99. A wait that was not parked yet when the line arrived finds it
//!   in the inbox at once, so no round is lost. The send's own round trip
//!   (acknowledged once A's observer has heard the line back and A's history
//!   has committed it) is reported beside it.

use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, ensure};
use serde_json::json;
use switchboard_testkit::{IrcNetwork, ServerOptions};

use crate::{
    Plan,
    report::{Report, Row, Target, Unit, millis, percentile, tail_ms},
    rpc::{self, Session},
    server::{Data, Server, Switchboard},
    web::HttpSession,
};

const CHANNEL: &str = "#hosts";
/// Untimed rounds before the measured ones.
const WARM_UP: usize = 10;
/// How long after bob's wait is sent alice sends: time for the wait to
/// reach host B and park (well under 1 ms on loopback).
const SETTLE: Duration = Duration::from_millis(5);
/// How long a daemon may take to have its observer in the channel (InspIRCd
/// registers a client about 1 s after it connects).
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one round may take.
const ROUND_TIMEOUT: Duration = Duration::from_secs(20);
const DELIVERY_P50_MS: f64 = 5.0;

pub async fn section(
    switchboard: &Switchboard,
    plan: &Plan,
    report: &mut Report,
) -> anyhow::Result<()> {
    let options = ServerOptions {
        history: false,
        unthrottled: true,
        ..ServerOptions::default()
    };
    // The test kit panics when a server or the link does not come up; here
    // that is an error (the join error quotes the panic).
    let network = tokio::spawn(IrcNetwork::start(options))
        .await
        .map_err(|e| anyhow!("cannot start the two-server InspIRCd network: {e}"))?;
    report.note(format!(
        "hosts: two InspIRCd 3 servers linked on loopback by switchboard-testkit \
         (irc0 on 127.0.0.1:{}, irc1 on 127.0.0.1:{}), flood control and the send-queue \
         limit lifted, no history replay; one serve --http per server, each with its own \
         durable history (synchronous = FULL) and chat.irc.flood_burst = 1,000,000",
        network.server(0).port(),
        network.server(1).port()
    ));
    let a = Host::start(switchboard, network.server(0).port(), "sbhosta").await?;
    let b = Host::start(switchboard, network.server(1).port(), "sbhostb").await?;
    let measured = cross_host_delivery(&a, &b, plan.irc_sends, report).await;
    let stopped = tokio::try_join!(a.stop(), b.stop());
    drop(network);
    measured?;
    stopped?;
    Ok(())
}

async fn cross_host_delivery(
    a: &Host,
    b: &Host,
    rounds: usize,
    report: &mut Report,
) -> anyhow::Result<()> {
    eprintln!("- cross-host delivery: {rounds} sequential rounds, host A to host B");
    let mut alice = a.session().await?;
    let mut bob = b.session().await?;
    // Both observers in the channel, each seeing the other's.
    for (host, session) in [(a, &mut alice), (b, &mut bob)] {
        wait_members(session, &[a.nick, b.nick])
            .await
            .with_context(|| format!("host {}: {}", host.nick, host.server.log()))?;
    }
    // Speaking puts bob in the channel: its lines reach his inbox.
    bob.call_tool(
        "send_message",
        json!({"channel": CHANNEL, "sender": "bob", "text": "bob on host B, listening"}),
    )
    .await
    .with_context(|| b.server.log())?;

    let mut delivery = Vec::with_capacity(rounds);
    let mut acknowledged = Vec::with_capacity(rounds);
    for round in 0..WARM_UP + rounds {
        let text = format!("cross-host probe {round} from alice on host A");
        let wait = tokio::spawn(async move {
            let args = json!({"nick": "bob", "timeout_s": ROUND_TIMEOUT.as_secs()});
            let reply = bob.call_tool("wait_for_messages", args).await;
            let at = Instant::now();
            (bob, reply, at)
        });
        tokio::time::sleep(SETTLE).await;
        let started = Instant::now();
        alice
            .call_tool(
                "send_message",
                json!({"channel": CHANNEL, "sender": "alice", "text": text}),
            )
            .await
            .with_context(|| format!("round {round}: {}", a.server.log()))?;
        let sent = started.elapsed();
        let (session, reply, at) = tokio::time::timeout(ROUND_TIMEOUT * 2, wait)
            .await
            .with_context(|| format!("round {round}: bob's wait did not return"))??;
        bob = session;
        let reply = reply.with_context(|| format!("round {round}: {}", b.server.log()))?;
        ensure!(
            reply.text.contains(&text),
            "round {round}: bob's wait returned without the line: {:.300}",
            reply.text
        );
        if round >= WARM_UP {
            delivery.push(at.saturating_duration_since(started));
            acknowledged.push(sent);
        }
    }
    let delivery = millis(&delivery);
    let acknowledged = millis(&acknowledged);
    report.rows.push(
        Row::new(
            "cross-host delivery: send_message on host A to the blocked wait_for_messages \
             returning on host B, over two linked InspIRCd servers (p50)",
            percentile(&delivery, 50.0),
            Unit::Millis,
            Target::AtMost(DELIVERY_P50_MS),
        )
        .detail(format!(
            "{}; {rounds} sequential rounds",
            tail_ms(&delivery)
        )),
    );
    report.rows.push(
        Row::new(
            "cross-host: the same send_message acknowledged on host A, heard back and \
             committed (p50)",
            percentile(&acknowledged, 50.0),
            Unit::Millis,
            Target::None,
        )
        .detail(tail_ms(&acknowledged)),
    );
    Ok(())
}

/// Waits until `get_members` of the channel lists every nick of `nicks`
/// (it fails while the observer is not in the channel yet).
async fn wait_members(session: &mut HttpSession, nicks: &[&str]) -> anyhow::Result<()> {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        let reply = session
            .request(
                "tools/call",
                &rpc::tool_params("get_members", json!({"channel": CHANNEL})),
            )
            .await?;
        let members = match reply.ok() {
            Ok(reply) => reply.json()?["result"]["structuredContent"]["members"].clone(),
            Err(e) => json!(e.to_string()),
        };
        let listed = |nick: &&str| {
            members
                .as_array()
                .is_some_and(|m| m.iter().any(|m| m == *nick))
        };
        if nicks.iter().all(listed) {
            return Ok(());
        }
        ensure!(
            Instant::now() < deadline,
            "{CHANNEL} did not list {nicks:?} within {READY_TIMEOUT:?}: {members}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One host: `serve --http` on the IRC backend against `127.0.0.1:port`,
/// with observer `nick`, its config and history in a temp dir.
struct Host {
    nick: &'static str,
    server: Server,
    addr: std::net::SocketAddr,
    /// Removed after the server has stopped.
    _dir: tempfile::TempDir,
}

impl Host {
    async fn start(
        switchboard: &Switchboard,
        port: u16,
        nick: &'static str,
    ) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let config = dir.path().join("switchboard.toml");
        std::fs::write(
            &config,
            format!(
                "[chat]\n\
                 backend = \"irc\"\n\
                 \n\
                 [chat.irc]\n\
                 server = \"127.0.0.1\"\n\
                 port = {port}\n\
                 nick = \"{nick}\"\n\
                 channels = [\"{CHANNEL}\"]\n\
                 sender_idle_s = 3600\n\
                 send_timeout_s = 30\n\
                 flood_burst = 1000000\n\
                 flood_per_second = 1000000.0\n"
            ),
        )
        .with_context(|| format!("cannot write {}", config.display()))?;
        let config = config.to_str().context("the temp dir is not UTF-8")?;
        let data = dir.path().join("data");
        let (server, addr) = switchboard
            .start_http_with(&["--config", config], Data::Dir(&data))
            .await?;
        Ok(Self {
            nick,
            server,
            addr,
            _dir: dir,
        })
    }

    async fn session(&self) -> anyhow::Result<HttpSession> {
        HttpSession::open(self.addr).await
    }

    async fn stop(self) -> anyhow::Result<()> {
        self.server.stop().await
    }
}
