//! Section `irc`: the chat tools on a real IRC network. `serve --stdio` runs
//! with `chat.backend = "irc"` (a config file in a temp dir; flood control
//! raised out of the way, senders kept for an hour) against an InspIRCd 3
//! that `switchboard-testkit` starts on loopback with its flood control and
//! send-queue limit lifted ([`ServerOptions::unthrottled`]) and no history
//! replay. Each measurement gets a switchboard of its own:
//!
//! - **Bridge overhead**: a loopback TCP proxy inside the benchmark sits
//!   between switchboard and InspIRCd and notes when each probe PRIVMSG
//!   (a numbered text) arrives from switchboard. After a few untimed sends
//!   (the first opens the sender's connection and joins), [`Plan::irc_sends`]
//!   sequential `send_message` calls from one sender nick, one in flight,
//!   each timed from just before its request is written to switchboard's
//!   stdin until the proxy has read its PRIVMSG: p50 (target), p90 and p99.
//!   The figure includes the pipe write and the proxy's wake-up, so it is an
//!   upper bound. The full round trip (until the reply, which waits for the
//!   observer to hear the line back and the history to commit it) is
//!   reported beside it.
//! - **Observer ingest**: an operator client creates the channel, sets `-n`
//!   so that clients outside it may speak there, waits for switchboard's
//!   observer to join and leaves, so the server relays every line to the
//!   observer alone. [`LOADERS`] raw clients, not in the channel, then write
//!   [`Plan::irc_messages`] PRIVMSGs (unique texts, prepared in advance) as
//!   fast as the server takes them: each in blocks of under [`BLOCK_BYTES`]
//!   ending with a `PING`, the next block once the `PONG` is back. (InspIRCd
//!   3 reads a plain-text client 10 KiB at a time and reads a backlog only
//!   once per turn of its event loop, which waits up to a second for other
//!   events: a client that writes a large load at once is read at about
//!   20 KB/s, some 150 messages/s.) Timed from the first write until the
//!   history holds them all, polling `max(id)` of switchboard's SQLite file
//!   over a read-only connection every [`POLL`]; afterwards the distinct
//!   texts stored tell how many were lost. The same load is then sent to
//!   another channel where a raw client (with the observer's capabilities,
//!   `server-time` and `message-tags`) counts what the server delivers: the
//!   server's own delivery rate, a ceiling for the ingest on this machine.
//! - **Agent nicks**: 200 concurrent `send_message` calls from 200 distinct
//!   sender nicks, so 200 sender connections are open at once besides the
//!   observer; the channel's members as `get_members` and the server's
//!   NAMES list them, then `VmRSS` and `VmHWM` of switchboard.
//!
//! The raw IRC clients and the proxy are the benchmark's own (a few lines of
//! RFC 1459 on tokio sockets), all on its one thread; the load is prepared
//! before the clock starts, so that generating it costs little.

use std::{
    collections::HashMap,
    net::SocketAddr,
    path::{Path, PathBuf},
    process::Stdio,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use anyhow::{Context, anyhow, bail, ensure};
use futures::future::try_join_all;
use rusqlite::{Connection, OpenFlags};
use serde_json::json;
use switchboard_testkit::{IrcServer, Line, ServerKind, ServerOptions};
use tokio::{
    io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader},
    net::{
        TcpListener, TcpStream,
        tcp::{OwnedReadHalf, OwnedWriteHalf},
    },
    process::Child,
    task::{JoinHandle, JoinSet},
};

use crate::{
    Plan,
    report::{Report, Row, Target, Unit, millis, percentile, tail_ms, thousands},
    rpc::{self, Session},
    server::{Data, Switchboard},
    stdio::{StdioClient, StdioConnection},
    sys::{CpuWatch, Memory},
};

/// Untimed sends before the overhead is measured.
const WARM_UP: usize = 10;
/// What every overhead probe's text starts with; its number follows.
const PROBE: &str = "overhead probe ";
/// Raw clients that write the ingest load.
const LOADERS: usize = 4;
/// Sender nicks connected at once.
const NICKS: usize = 200;
/// The largest block a loader writes before it waits for the server's
/// `PONG`: below InspIRCd's read size (`netbuffersize`, 10,240 bytes).
const BLOCK_BYTES: usize = 8 * 1024;
/// How often the history is polled while the ingest load arrives.
const POLL: Duration = Duration::from_millis(10);
/// The ingest gives up when the history has not grown for this long.
const STALL: Duration = Duration::from_secs(15);
/// The longest any single IRC exchange (register, join, mode) may take.
const IRC_TIMEOUT: Duration = Duration::from_secs(15);
/// How long the 200 first sends may take together.
const POOL_TIMEOUT: Duration = Duration::from_secs(120);
/// How long the server may take to take in, or deliver, a load.
const LOAD_TIMEOUT: Duration = Duration::from_secs(300);
/// How long a switchboard may take to exit after its stdin closes.
const EXIT_TIMEOUT: Duration = Duration::from_secs(10);
/// Log lines of a switchboard quoted in an error.
const LOG_TAIL: usize = 40;

const LATENCY_CHANNEL: &str = "#latency";
const INGEST_CHANNEL: &str = "#ingest";
const CEILING_CHANNEL: &str = "#ceiling";
const POOL_CHANNEL: &str = "#pool";

pub async fn section(
    switchboard: &Switchboard,
    plan: &Plan,
    report: &mut Report,
) -> anyhow::Result<()> {
    let options = ServerOptions {
        history: false,
        max_per_ip: Some(1000),
        unthrottled: true,
        ..ServerOptions::default()
    };
    // The test kit panics when the server cannot start; here that is an error.
    let server = tokio::spawn(IrcServer::start(ServerKind::InspIRCd, options))
        .await
        .map_err(|e| anyhow!("cannot start InspIRCd: {}", panic_text(e)))?;
    report.note(format!(
        "irc: InspIRCd 3 on 127.0.0.1:{} started by switchboard-testkit with flood control \
         and the send-queue limit lifted, no history replay; switchboard with \
         chat.irc.flood_burst = 1,000,000 and a durable history (synchronous = FULL)",
        server.port()
    ));
    bridge_overhead(switchboard, &server, plan.irc_sends, report)
        .await
        .context("bridge overhead")?;
    observer_ingest(switchboard, &server, plan.irc_messages, report)
        .await
        .context("observer ingest")?;
    agent_nicks(switchboard, &server, report)
        .await
        .context("200 agent nicks")?;
    Ok(())
}

/// Measurement 1: `send_message` on stdin to its PRIVMSG on the wire.
async fn bridge_overhead(
    switchboard: &Switchboard,
    server: &IrcServer,
    sends: usize,
    report: &mut Report,
) -> anyhow::Result<()> {
    eprintln!("- bridge overhead: {sends} sequential sends through a timestamping proxy");
    let proxy = Proxy::start(server.port()).await?;
    let bridge = Bridge::start(switchboard, proxy.port(), "sblatency", &[]).await?;
    let mut client = bridge.client();
    for i in 0..WARM_UP {
        let text = format!("warm-up {i} before the overhead run");
        send(&mut client, LATENCY_CHANNEL, "prober", &text)
            .await
            .with_context(|| bridge.log())?;
    }
    let mut to_wire = Vec::with_capacity(sends);
    let mut round_trip = Vec::with_capacity(sends);
    for probe in 0..sends {
        let params = rpc::tool_params(
            "send_message",
            json!({
                "channel": LATENCY_CHANNEL,
                "sender": "prober",
                "text": format!("{PROBE}{probe} of the bridge overhead run"),
            }),
        );
        let started = Instant::now();
        client
            .request("tools/call", &params)
            .await?
            .ok()
            .with_context(|| format!("send_message of probe {probe}; {}", bridge.log()))?;
        round_trip.push(started.elapsed());
        // The reply waits for the line to come back through the proxy, so
        // the proxy has seen it by now.
        let on_wire = proxy
            .seen(probe)
            .with_context(|| format!("the proxy saw no PRIVMSG for probe {probe}"))?;
        to_wire.push(on_wire.saturating_duration_since(started));
    }
    drop(client);
    bridge.stop().await?;
    let to_wire = millis(&to_wire);
    let round_trip = millis(&round_trip);
    report.rows.push(
        Row::new(
            "IRC bridge overhead: send_message on stdin to its PRIVMSG on the wire (p50)",
            percentile(&to_wire, 50.0),
            Unit::Millis,
            Target::AtMost(1.0),
        )
        .detail(format!("{}; {sends} sequential sends", tail_ms(&to_wire))),
    );
    report.rows.push(
        Row::new(
            "IRC send_message round trip: stdin to the reply, heard back and committed (p50)",
            percentile(&round_trip, 50.0),
            Unit::Millis,
            Target::None,
        )
        .detail(tail_ms(&round_trip)),
    );
    Ok(())
}

/// Measurement 2: channel messages from the server into the history, and
/// the server's own delivery rate as a ceiling.
async fn observer_ingest(
    switchboard: &Switchboard,
    server: &IrcServer,
    messages: usize,
    report: &mut Report,
) -> anyhow::Result<()> {
    eprintln!(
        "- observer ingest: {} channel messages from {LOADERS} clients",
        thousands(messages as f64)
    );
    let port = server.port();
    let server_pid = server.pid().context("InspIRCd is not running")?;
    let (mut operator, mut loaders) = tokio::try_join!(
        RawClient::connect(port, "benchop", &[]),
        try_join_all(
            (0..LOADERS)
                .map(|i| async move { RawClient::connect(port, &format!("load{i}"), &[]).await })
        ),
    )?;
    operator.open_channel(INGEST_CHANNEL).await?;
    let bridge = Bridge::start(switchboard, port, "sbingest", &[INGEST_CHANNEL]).await?;
    operator
        .expect(
            |l| l.command == "JOIN" && l.nick() == Some("sbingest"),
            IRC_TIMEOUT,
        )
        .await
        .with_context(|| format!("the observer did not join {INGEST_CHANNEL}"))?;
    operator.part(INGEST_CHANNEL).await?;

    let history = HistoryFile::open(&bridge.history_path())?;
    let baseline = history.newest_id()?;
    let loads = prepare_load(INGEST_CHANNEL, messages);
    let watch = CpuWatch::start(&[bridge.pid()?, server_pid, std::process::id()])?;
    let started = Instant::now();
    let (written, stored) = tokio::try_join!(
        write_load(&mut loaders, &loads, started),
        history.wait_for(baseline, messages, started),
    )?;
    let cpu = watch.stop()?;
    let (rows, distinct) = history.count_texts(baseline, "ingest ")?;
    ensure!(
        distinct > 0,
        "the history stored none of the messages; {}",
        bridge.log()
    );
    let reconnects = bridge.log_lines("IRC connection down");
    bridge.stop().await?;

    let lost = messages.saturating_sub(distinct);
    let rate = distinct as f64 / stored.as_secs_f64();
    let [switchboard_cores, server_cores, bench_cores] = cpu.cores[..] else {
        bail!(
            "CpuWatch returned {} figures for 3 processes",
            cpu.cores.len()
        );
    };
    report.rows.push(
        Row::new(
            "IRC observer ingest: channel messages into the history",
            rate,
            Unit::MessagesPerSec,
            Target::AtLeast(20_000.0),
        )
        .detail(format!(
            "{} messages; the server had taken them all after {:.2} s, the history held \
             them after {:.2} s",
            thousands(messages as f64),
            written.as_secs_f64(),
            stored.as_secs_f64()
        )),
    );
    report.rows.push(Row::new(
        "IRC observer ingest: messages lost",
        lost as f64,
        Unit::Count,
        Target::AtMost(0.0),
    ));
    report.note(format!(
        "irc ingest: switchboard used {switchboard_cores:.2} cores, InspIRCd \
         {server_cores:.2}, the benchmark {bench_cores:.2}, other processes {:.2}; \
         {rows} rows stored for {distinct} distinct texts; the observer's connection \
         dropped {reconnects} times",
        cpu.others
    ));

    // The ceiling: the same load, delivered to a raw client.
    let mut counter =
        RawClient::connect(port, "benchcount", &["server-time", "message-tags"]).await?;
    counter.open_channel(CEILING_CHANNEL).await?;
    let loads = prepare_load(CEILING_CHANNEL, messages);
    let watch = CpuWatch::start(&[server_pid])?;
    let started = Instant::now();
    let (_, delivered) = tokio::try_join!(
        write_load(&mut loaders, &loads, started),
        counter.count_privmsgs(CEILING_CHANNEL, messages, started),
    )?;
    let ceiling_server_cores = watch.stop()?.cores.first().copied().unwrap_or_default();
    let ceiling = messages as f64 / delivered.as_secs_f64();
    report.rows.push(
        Row::new(
            "IRC ceiling: InspIRCd's delivery rate of the same load to a raw client",
            ceiling,
            Unit::MessagesPerSec,
            Target::None,
        )
        .detail(format!("InspIRCd used {ceiling_server_cores:.2} cores")),
    );
    if rate >= 0.8 * ceiling || server_cores >= 0.85 {
        report.note(format!(
            "irc ingest: the server is the likely bottleneck (InspIRCd is single-threaded and \
             used {server_cores:.2} cores; it delivers at most {} messages/s to a raw client \
             here), so the ingest figure is a lower bound of switchboard's",
            thousands(ceiling)
        ));
    }
    Ok(())
}

/// Measurement 3: 200 sender connections at once, and switchboard's memory.
async fn agent_nicks(
    switchboard: &Switchboard,
    server: &IrcServer,
    report: &mut Report,
) -> anyhow::Result<()> {
    eprintln!("- {NICKS} agent nicks: one send_message from each, concurrently");
    let bridge = Bridge::start(switchboard, server.port(), "sbpool", &[POOL_CHANNEL]).await?;
    let client = bridge.client();
    let nicks: Vec<String> = (0..NICKS).map(|i| format!("agent{i:03}")).collect();
    let started = Instant::now();
    let sends = nicks.iter().map(|nick| {
        let mut client = client.clone();
        async move {
            let text = format!("{nick} reporting for duty");
            send(&mut client, POOL_CHANNEL, nick, &text).await
        }
    });
    tokio::time::timeout(POOL_TIMEOUT, try_join_all(sends))
        .await
        .with_context(|| format!("the {NICKS} sends took over {POOL_TIMEOUT:?}"))?
        .with_context(|| bridge.log())?;
    let all_sent = started.elapsed();

    let reply = client
        .clone()
        .call_tool("get_members", json!({"channel": POOL_CHANNEL}))
        .await?
        .json()?;
    let members = reply["result"]["structuredContent"]["members"]
        .as_array()
        .context("get_members returned no structuredContent.members")?;
    let in_members = nicks
        .iter()
        .filter(|nick| members.iter().any(|m| m.as_str() == Some(nick.as_str())))
        .count();
    let mut looker = RawClient::connect(server.port(), "benchnames", &[]).await?;
    let names = looker.join(POOL_CHANNEL).await?;
    let in_names = nicks.iter().filter(|nick| names.contains(nick)).count();
    // Let the last replies' buffers go before reading the memory.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let memory = Memory::of(bridge.pid()?)?;
    drop(client);
    bridge.stop().await?;

    report.rows.push(
        Row::new(
            format!("IRC sender connections open at once (NAMES of {POOL_CHANNEL})"),
            in_names as f64,
            Unit::Count,
            Target::AtLeast(NICKS as f64),
        )
        .detail(format!(
            "get_members listed {in_members} of the {NICKS}; all {NICKS} first sends took \
             {:.2} s",
            all_sent.as_secs_f64()
        )),
    );
    report.rows.push(Row::memory(
        format!("RSS of serve --stdio on IRC with {NICKS} agent nicks connected"),
        memory,
        60.0,
    ));
    Ok(())
}

/// One `send_message`; a tool error is an error.
async fn send(
    client: &mut StdioClient,
    channel: &str,
    sender: &str,
    text: &str,
) -> anyhow::Result<()> {
    client
        .call_tool(
            "send_message",
            json!({"channel": channel, "sender": sender, "text": text}),
        )
        .await
        .with_context(|| format!("send_message as {sender}"))?;
    Ok(())
}

/// What a panic in a spawned task said.
pub(crate) fn panic_text(error: tokio::task::JoinError) -> String {
    match error.try_into_panic() {
        Ok(panic) => panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_else(|| "it panicked".into()),
        Err(error) => error.to_string(),
    }
}

/// `switchboard serve --stdio` on the IRC backend, with its config, data
/// directory and log in a temp dir. Killed if dropped without [`Bridge::stop`].
struct Bridge {
    connection: StdioConnection,
    child: Child,
    dir: tempfile::TempDir,
}

impl Bridge {
    /// Starts switchboard with observer `nick` on the server at
    /// `127.0.0.1:port`, joining `channels`, and runs the MCP handshake.
    async fn start(
        switchboard: &Switchboard,
        port: u16,
        nick: &str,
        channels: &[&str],
    ) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let config = dir.path().join("switchboard.toml");
        std::fs::write(&config, config_toml(port, nick, channels)?)
            .with_context(|| format!("cannot write {}", config.display()))?;
        let log = dir.path().join("switchboard.log");
        let stderr = std::fs::File::create(dir.path().join("stderr.log"))?;
        let data = dir.path().join("data");
        let mut cmd = tokio::process::Command::from(switchboard.command(
            &[
                "--stdio",
                "--config",
                utf8(&config)?,
                "--log-file",
                utf8(&log)?,
            ],
            Data::Dir(&data),
        ));
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .kill_on_drop(true);
        let mut child = cmd.spawn().context("cannot start switchboard")?;
        match StdioConnection::open(&mut child).await {
            Ok(connection) => Ok(Self {
                connection,
                child,
                dir,
            }),
            Err(e) => Err(e.context(format!(
                "switchboard on IRC did not start; {}",
                tail(&dir.path().join("stderr.log"))
            ))),
        }
    }

    fn client(&self) -> StdioClient {
        self.connection.client.clone()
    }

    fn pid(&self) -> anyhow::Result<u32> {
        self.child.id().context("switchboard has exited")
    }

    fn history_path(&self) -> PathBuf {
        self.dir.path().join("data").join("history.db")
    }

    /// The end of switchboard's log, for error messages.
    fn log(&self) -> String {
        tail(&self.dir.path().join("switchboard.log"))
    }

    /// How many lines of the log contain `text`.
    fn log_lines(&self, text: &str) -> usize {
        std::fs::read_to_string(self.dir.path().join("switchboard.log"))
            .unwrap_or_default()
            .lines()
            .filter(|line| line.contains(text))
            .count()
    }

    /// Closes switchboard's stdin (every client handed out must be dropped
    /// first) and expects a clean exit.
    async fn stop(self) -> anyhow::Result<()> {
        let Self {
            connection,
            mut child,
            dir,
        } = self;
        let log = || tail(&dir.path().join("switchboard.log"));
        connection.close().await.with_context(log)?;
        let status = tokio::time::timeout(EXIT_TIMEOUT, child.wait())
            .await
            .with_context(|| format!("switchboard did not exit; {}", log()))??;
        ensure!(
            status.success(),
            "switchboard exited with {status}; {}",
            log()
        );
        Ok(())
    }
}

/// The config file of a benchmark switchboard on the IRC backend.
pub(crate) fn config_toml(port: u16, nick: &str, channels: &[&str]) -> anyhow::Result<String> {
    Ok(format!(
        "[chat]\n\
         backend = \"irc\"\n\
         \n\
         [chat.irc]\n\
         server = \"127.0.0.1\"\n\
         port = {port}\n\
         nick = \"{nick}\"\n\
         channels = {}\n\
         sender_idle_s = 3600\n\
         send_timeout_s = 30\n\
         flood_burst = 1000000\n\
         flood_per_second = 1000000.0\n",
        serde_json::to_string(channels)?
    ))
}

pub(crate) fn utf8(path: &Path) -> anyhow::Result<&str> {
    path.to_str()
        .with_context(|| format!("{} is not UTF-8", path.display()))
}

/// The last [`LOG_TAIL`] lines of a log file.
pub(crate) fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let from = lines.len().saturating_sub(LOG_TAIL);
    format!(
        "the end of {}:\n{}",
        path.display(),
        lines[from..].join("\n")
    )
}

/// Switchboard's history, read-only, as the ingest watches it fill.
struct HistoryFile {
    db: Connection,
}

impl HistoryFile {
    fn open(path: &Path) -> anyhow::Result<Self> {
        let db = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .with_context(|| format!("cannot open {} read-only", path.display()))?;
        Ok(Self { db })
    }

    /// The id of the newest message (0 if none): a lookup in the primary
    /// key's b-tree, cheap enough to poll.
    fn newest_id(&self) -> anyhow::Result<i64> {
        Ok(self
            .db
            .query_row("SELECT coalesce(max(id), 0) FROM messages", [], |row| {
                row.get(0)
            })?)
    }

    /// Waits until `count` messages newer than `baseline` are stored; the
    /// time from `started` until then, or until the last growth if the
    /// history stops growing for [`STALL`].
    async fn wait_for(
        &self,
        baseline: i64,
        count: usize,
        started: Instant,
    ) -> anyhow::Result<Duration> {
        let mut stored = 0;
        let mut grew = started;
        loop {
            let now = self.newest_id()? - baseline;
            if now > stored {
                stored = now;
                grew = Instant::now();
            }
            if stored >= count as i64 || grew.elapsed() > STALL {
                return Ok(grew - started);
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Rows newer than `baseline` whose text starts with `prefix`, and how
    /// many distinct texts they hold.
    fn count_texts(&self, baseline: i64, prefix: &str) -> anyhow::Result<(usize, usize)> {
        let (rows, distinct): (i64, i64) = self.db.query_row(
            "SELECT count(*), count(DISTINCT text) FROM messages
             WHERE id > ?1 AND substr(text, 1, length(?2)) = ?2",
            rusqlite::params![baseline, prefix],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )?;
        Ok((usize::try_from(rows)?, usize::try_from(distinct)?))
    }
}

/// One loader's share of a load: blocks of PRIVMSG lines, each under
/// [`BLOCK_BYTES`] and ending with a `PING`.
type Load = Vec<Vec<u8>>;

/// The ingest load for `channel`: `messages` lines with unique texts,
/// dealt round-robin to the [`LOADERS`].
fn prepare_load(channel: &str, messages: usize) -> Vec<Load> {
    const PING: &[u8] = b"PING :block\r\n";
    let mut loads = vec![Load::new(); LOADERS];
    for i in 0..messages {
        let load = &mut loads[i % LOADERS];
        let line = format!(
            "PRIVMSG {channel} :ingest {i:07} from load{}: build 4711 passed on the first \
             try, deploying to staging next\r\n",
            i % LOADERS
        );
        match load.last_mut() {
            Some(block) if block.len() + line.len() + PING.len() <= BLOCK_BYTES => {
                block.extend_from_slice(line.as_bytes());
            }
            _ => load.push(line.into_bytes()),
        }
    }
    for block in loads.iter_mut().flatten() {
        block.extend_from_slice(PING);
    }
    loads
}

/// Writes each load through its loader, all loaders at once, each block
/// once the server has answered the previous one's `PING`; the time from
/// `started` until the server has processed every line.
async fn write_load(
    loaders: &mut [RawClient],
    loads: &[Load],
    started: Instant,
) -> anyhow::Result<Duration> {
    let writes = try_join_all(
        loaders
            .iter_mut()
            .zip(loads)
            .map(|(loader, load)| loader.write_blocks(load)),
    );
    tokio::time::timeout(LOAD_TIMEOUT, writes)
        .await
        .with_context(|| format!("the server did not take the load in {LOAD_TIMEOUT:?}"))??;
    Ok(started.elapsed())
}

/// A minimal IRC client: registers, joins, and reads lines, answering PING.
struct RawClient {
    nick: String,
    reader: BufReader<OwnedReadHalf>,
    writer: OwnedWriteHalf,
    buf: Vec<u8>,
}

impl RawClient {
    /// Connects to `127.0.0.1:port` as `nick`, requesting `caps`, and waits
    /// for the welcome (`001`).
    async fn connect(port: u16, nick: &str, caps: &[&str]) -> anyhow::Result<Self> {
        let stream = tokio::time::timeout(IRC_TIMEOUT, TcpStream::connect(("127.0.0.1", port)))
            .await
            .context("TCP connect timed out")?
            .with_context(|| format!("cannot connect to 127.0.0.1:{port}"))?;
        stream.set_nodelay(true)?;
        let (reader, writer) = stream.into_split();
        let mut client = Self {
            nick: nick.to_owned(),
            reader: BufReader::with_capacity(256 * 1024, reader),
            writer,
            buf: Vec::with_capacity(1024),
        };
        let mut hello = String::new();
        if !caps.is_empty() {
            hello.push_str(&format!("CAP REQ :{}\r\n", caps.join(" ")));
        }
        hello.push_str(&format!("NICK {nick}\r\nUSER {nick} 0 * :{nick}\r\n"));
        if !caps.is_empty() {
            hello.push_str("CAP END\r\n");
        }
        client.write_raw(hello.as_bytes()).await?;
        let answer = client
            .expect(
                |l| matches!(l.command.as_str(), "001" | "ERROR" | "432" | "433"),
                IRC_TIMEOUT,
            )
            .await?;
        ensure!(
            answer.command == "001",
            "{nick} could not register: {}",
            answer.raw
        );
        Ok(client)
    }

    async fn write_raw(&mut self, bytes: &[u8]) -> anyhow::Result<()> {
        self.writer
            .write_all(bytes)
            .await
            .with_context(|| format!("{} cannot write to the server", self.nick))
    }

    /// Writes `blocks`, each after the server has answered the `PING` that
    /// ends the one before.
    async fn write_blocks(&mut self, blocks: &[Vec<u8>]) -> anyhow::Result<()> {
        for block in blocks {
            self.write_raw(block).await?;
            loop {
                self.read_line().await?;
                if command(&self.buf).starts_with(b"PONG ") {
                    break;
                }
            }
        }
        Ok(())
    }

    async fn send(&mut self, line: &str) -> anyhow::Result<()> {
        self.write_raw(format!("{line}\r\n").as_bytes()).await
    }

    /// The next line's bytes (CR LF included) in `self.buf`; PINGs are
    /// answered on the way.
    async fn read_line(&mut self) -> anyhow::Result<()> {
        loop {
            self.buf.clear();
            let read = self.reader.read_until(b'\n', &mut self.buf).await?;
            ensure!(read > 0, "the server closed {}'s connection", self.nick);
            if let Some(token) = self.buf.strip_prefix(b"PING ") {
                let pong = [&b"PONG "[..], token].concat();
                self.writer.write_all(&pong).await?;
                continue;
            }
            return Ok(());
        }
    }

    /// Reads until a line matches `pred` (within `within`).
    async fn expect(
        &mut self,
        mut pred: impl FnMut(&Line) -> bool,
        within: Duration,
    ) -> anyhow::Result<Line> {
        let nick = self.nick.clone();
        let wanted = async {
            loop {
                self.read_line().await?;
                let line = Line::parse(&String::from_utf8_lossy(&self.buf));
                if pred(&line) {
                    return Ok(line);
                }
            }
        };
        tokio::time::timeout(within, wanted)
            .await
            .with_context(|| format!("{nick}: no awaited reply from the server in {within:?}"))?
    }

    /// Joins `channel`; the nicks its NAMES reply lists (without prefixes).
    async fn join(&mut self, channel: &str) -> anyhow::Result<Vec<String>> {
        self.send(&format!("JOIN {channel}")).await?;
        let mut names = Vec::new();
        let nick = self.nick.clone();
        self.expect(
            |l| {
                if l.command == "353" && l.param(2) == Some(channel) {
                    let list = l.trailing().unwrap_or_default();
                    names.extend(
                        list.split_whitespace()
                            .map(|n| n.trim_start_matches(['~', '&', '@', '%', '+']).to_owned()),
                    );
                }
                matches!(
                    l.command.as_str(),
                    "403" | "405" | "471" | "473" | "474" | "475"
                ) || (l.command == "366" && l.param(1) == Some(channel))
            },
            IRC_TIMEOUT,
        )
        .await
        .and_then(|end| {
            ensure!(
                end.command == "366",
                "{nick} cannot join {channel}: {}",
                end.raw
            );
            Ok(())
        })?;
        Ok(names)
    }

    /// Creates `channel` (its first member is its operator) and lets
    /// clients outside it speak there (`-n`).
    async fn open_channel(&mut self, channel: &str) -> anyhow::Result<()> {
        let names = self.join(channel).await?;
        ensure!(
            names == [self.nick.as_str()],
            "{channel} already existed (members: {names:?})"
        );
        self.send(&format!("MODE {channel} -n")).await?;
        self.expect(
            |l| l.command == "MODE" && l.param(0) == Some(channel),
            IRC_TIMEOUT,
        )
        .await?;
        Ok(())
    }

    async fn part(&mut self, channel: &str) -> anyhow::Result<()> {
        self.send(&format!("PART {channel}")).await?;
        let nick = self.nick.clone();
        self.expect(
            |l| l.command == "PART" && l.nick() == Some(nick.as_str()),
            IRC_TIMEOUT,
        )
        .await?;
        Ok(())
    }

    /// Reads until `count` PRIVMSGs to `channel` have arrived (within
    /// [`LOAD_TIMEOUT`] of `started`); the time from `started`. Lines are
    /// not parsed beyond their command and target.
    async fn count_privmsgs(
        &mut self,
        channel: &str,
        count: usize,
        started: Instant,
    ) -> anyhow::Result<Duration> {
        let deadline = tokio::time::Instant::from_std(started + LOAD_TIMEOUT);
        let mut seen = 0;
        while seen < count {
            // A ready line costs no timer: the timeout is only armed when
            // the read has to wait.
            match tokio::time::timeout_at(deadline, self.read_line()).await {
                Ok(read) => read?,
                Err(_) => bail!(
                    "only {seen} of {count} messages to {channel} arrived in {LOAD_TIMEOUT:?}"
                ),
            }
            if privmsg(&self.buf).is_some_and(|(target, _)| target == channel.as_bytes()) {
                seen += 1;
            }
        }
        Ok(started.elapsed())
    }
}

/// A line from its command on: without tags, source and CR LF.
fn command(line: &[u8]) -> &[u8] {
    let mut rest = line.strip_suffix(b"\n").unwrap_or(line);
    rest = rest.strip_suffix(b"\r").unwrap_or(rest);
    if rest.starts_with(b"@") {
        rest = skip_word(rest);
    }
    if rest.starts_with(b":") {
        rest = skip_word(rest);
    }
    rest
}

/// The target and text of a PRIVMSG line, or `None` for any other line.
fn privmsg(line: &[u8]) -> Option<(&[u8], &[u8])> {
    let rest = command(line).strip_prefix(b"PRIVMSG ")?;
    let end = rest.iter().position(|&b| b == b' ')?;
    let (target, text) = rest.split_at(end);
    let text = &text[1..];
    Some((target, text.strip_prefix(b":").unwrap_or(text)))
}

/// `bytes` after its first word and the spaces that follow it.
fn skip_word(bytes: &[u8]) -> &[u8] {
    let end = bytes.iter().position(|&b| b == b' ').unwrap_or(bytes.len());
    let after = &bytes[end..];
    let spaces = after.iter().take_while(|&&b| b == b' ').count();
    &after[spaces..]
}

/// The probe number of a line that switchboard wrote, if it is a probe.
fn probe_number(line: &[u8]) -> Option<usize> {
    let (_, text) = privmsg(line)?;
    let number = text.strip_prefix(PROBE.as_bytes())?;
    let digits = number.iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&number[..digits]).ok()?.parse().ok()
}

/// When each probe was first seen, by number.
type Seen = Arc<Mutex<HashMap<usize, Instant>>>;

/// A loopback TCP proxy in front of the IRC server that notes when each
/// probe PRIVMSG from switchboard arrives; stops when dropped.
struct Proxy {
    addr: SocketAddr,
    seen: Seen,
    task: JoinHandle<()>,
}

impl Proxy {
    async fn start(upstream: u16) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let seen = Seen::default();
        let task = tokio::spawn(accept(listener, upstream, seen.clone()));
        Ok(Self { addr, seen, task })
    }

    fn port(&self) -> u16 {
        self.addr.port()
    }

    fn seen(&self, probe: usize) -> Option<Instant> {
        self.seen.lock().ok()?.get(&probe).copied()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        // Dropping the accept task's JoinSet aborts every relay too.
        self.task.abort();
    }
}

async fn accept(listener: TcpListener, upstream: u16, seen: Seen) {
    let mut relays = JoinSet::new();
    while let Ok((client, _)) = listener.accept().await {
        // A relay ends with an error when either side goes away: normal.
        relays.spawn(relay(client, upstream, seen.clone()));
        while relays.try_join_next().is_some() {}
    }
}

/// Copies bytes both ways; times probe lines on the way to the server.
async fn relay(client: TcpStream, upstream: u16, seen: Seen) -> anyhow::Result<()> {
    client.set_nodelay(true)?;
    let server = TcpStream::connect(("127.0.0.1", upstream)).await?;
    server.set_nodelay(true)?;
    let (mut from_client, mut to_client) = client.into_split();
    let (mut from_server, mut to_server) = server.into_split();
    let upstream = async {
        let mut buf = vec![0u8; 64 * 1024];
        let mut pending = Vec::new();
        loop {
            let read = from_client.read(&mut buf).await?;
            let at = Instant::now();
            if read == 0 {
                to_server.shutdown().await?;
                return anyhow::Ok(());
            }
            to_server.write_all(&buf[..read]).await?;
            pending.extend_from_slice(&buf[..read]);
            if let Some(end) = pending.iter().rposition(|&b| b == b'\n') {
                for line in pending[..end].split(|&b| b == b'\n') {
                    if let Some(probe) = probe_number(line)
                        && let Ok(mut seen) = seen.lock()
                    {
                        seen.entry(probe).or_insert(at);
                    }
                }
                pending.drain(..=end);
            }
        }
    };
    let downstream = async {
        tokio::io::copy(&mut from_server, &mut to_client).await?;
        to_client.shutdown().await?;
        anyhow::Ok(())
    };
    tokio::try_join!(upstream, downstream)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn privmsg_lines_are_split_into_target_and_text() {
        assert_eq!(
            privmsg(b"PRIVMSG #c :hello there\r\n"),
            Some((&b"#c"[..], &b"hello there"[..]))
        );
        assert_eq!(
            privmsg(b"@time=2026-01-01T00:00:00.000Z;msgid=x :a!a@h PRIVMSG #c :hi\r\n"),
            Some((&b"#c"[..], &b"hi"[..]))
        );
        assert_eq!(
            privmsg(b"PRIVMSG #c word"),
            Some((&b"#c"[..], &b"word"[..]))
        );
        assert_eq!(privmsg(b":a!a@h JOIN #c\r\n"), None);
        assert_eq!(privmsg(b"PRIVMSG #c\r\n"), None);
        assert_eq!(privmsg(b""), None);
        assert_eq!(
            command(b":irc.test PONG irc.test :block\r\n"),
            b"PONG irc.test :block"
        );
    }

    #[test]
    fn probes_are_recognised_by_number() {
        assert_eq!(
            probe_number(b"PRIVMSG #latency :overhead probe 42 of the run\r\n"),
            Some(42)
        );
        assert_eq!(probe_number(b"PRIVMSG #latency :warm-up 3\r\n"), None);
        assert_eq!(probe_number(b"PING :overhead probe 1\r\n"), None);
        assert_eq!(
            probe_number(b"PRIVMSG #latency :overhead probe x\r\n"),
            None
        );
    }

    #[test]
    fn the_load_is_spread_over_the_loaders_in_small_blocks_with_unique_texts() {
        let loads = prepare_load("#c", 1000);
        assert_eq!(loads.len(), LOADERS);
        let blocks: Vec<&Vec<u8>> = loads.iter().flatten().collect();
        assert!(blocks.len() > LOADERS, "{} blocks", blocks.len());
        assert!(
            blocks
                .iter()
                .all(|b| b.len() <= BLOCK_BYTES && b.ends_with(b"PING :block\r\n"))
        );
        let lines: Vec<&[u8]> = blocks
            .iter()
            .flat_map(|block| block.split_inclusive(|&b| b == b'\n'))
            .filter(|line| !line.starts_with(b"PING"))
            .collect();
        assert_eq!(lines.len(), 1000);
        let mut texts: Vec<&[u8]> = lines
            .iter()
            .filter_map(|l| privmsg(l))
            .map(|p| p.1)
            .collect();
        assert!(texts.iter().all(|t| t.starts_with(b"ingest ")));
        texts.sort_unstable();
        texts.dedup();
        assert_eq!(texts.len(), 1000);
    }

    #[test]
    fn the_config_is_valid_toml_with_the_channels() {
        let toml = config_toml(6667, "sb", &["#a", "#b"]).unwrap();
        assert!(toml.contains("channels = [\"#a\",\"#b\"]\n"), "{toml}");
        assert!(toml.contains("port = 6667\n"));
    }
}
