//! One soak run: its processes (the daemon, the agents' stdio servers and
//! shims, the IRC server), the faults injected into them, the shutdown and
//! the check of what was stored.

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    path::{Path, PathBuf},
    process::Stdio,
    time::{Duration, Instant},
};

use anyhow::{Context, anyhow, bail};
use switchboard_testkit::{Filler, IrcServer, ServerKind, ServerOptions, Tmpfs};
use tokio::process::{Child, Command};

use super::{
    Backend,
    agent::{self, Agent, Ledger, Link, Transport},
    faults::Schedule,
    report::{DiskFull, FaultLog, RunOutcome},
    samples::{self, DaemonPid},
    verify::{self, Tally},
};
use crate::{
    irc::{config_toml, panic_text, tail, utf8},
    server::{Data, ShimStart, Switchboard},
    stdio::StdioConnection,
};

/// The data directory's tmpfs.
const TMPFS_MIB: u64 = 64;
/// How long a (re)started daemon may take to accept connections.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a process may take to exit once asked.
const EXIT_TIMEOUT: Duration = Duration::from_secs(15);
/// The daemon's IRC observer.
const OBSERVER: &str = "sbsoak";

/// Runs one soak of `duration` on `backend`, keeping every log under `logs`.
pub async fn soak(
    switchboard: &Switchboard,
    backend: Backend,
    agents: usize,
    duration: Duration,
    logs: PathBuf,
) -> anyhow::Result<RunOutcome> {
    std::fs::create_dir_all(&logs).with_context(|| format!("cannot create {}", logs.display()))?;
    let schedule = Schedule::new(duration);
    let tmpfs = Tmpfs::mount(TMPFS_MIB)?;
    let scratch = tempfile::tempdir()?;
    let channels: Vec<String> = (0..agent::CHANNELS).map(agent::channel).collect();
    let mut irc = match backend {
        Backend::Local => None,
        Backend::Irc => Some(start_irc().await?),
    };
    let irc_config = |name: &str, nick: &str, channels: &[String]| -> anyhow::Result<PathBuf> {
        let port = irc.as_ref().expect("the irc run has a server").port();
        let channels: Vec<&str> = channels.iter().map(String::as_str).collect();
        let path = scratch.path().join(format!("{name}.toml"));
        std::fs::write(&path, config_toml(port, nick, &channels)?)?;
        Ok(path)
    };
    let daemon_config = match backend {
        Backend::Local => None,
        Backend::Irc => Some(irc_config("daemon", OBSERVER, &channels)?),
    };
    let mut daemon = Daemon {
        switchboard: switchboard.clone(),
        addr: free_port()?,
        socket: scratch.path().join("relay.sock"),
        data: tmpfs.path.join("data"),
        config: daemon_config,
        logs: logs.clone(),
        incarnation: 0,
        child: None,
    };
    daemon.start().await?;

    eprintln!("soak {}: starting {agents} agents", backend.name());
    let mut processes = Vec::new();
    let mut crew = Vec::new();
    for index in 0..agents {
        let transport = Transport::of(index);
        let link = match transport {
            Transport::Http => Link::Http {
                addr: daemon.addr,
                session: None,
            },
            Transport::Sse => Link::Sse {
                addr: daemon.addr,
                session: None,
            },
            Transport::Stdio => {
                let log = logs.join(format!("stdio-{index}.log"));
                let mut args = vec![
                    "--stdio".to_owned(),
                    "--log-file".into(),
                    utf8(&log)?.into(),
                ];
                if backend == Backend::Irc {
                    let config = irc_config(
                        &format!("stdio-{index}"),
                        &format!("sbobs{index}"),
                        &[agent::channel(index)],
                    )?;
                    args.extend(["--config".into(), utf8(&config)?.into()]);
                }
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                let command = switchboard.command(&args, Data::Dir(&daemon.data));
                let process = Process::start(command, &logs.join(format!("stdio-{index}.stderr")))
                    .await
                    .with_context(|| format!("stdio agent {index}"))?;
                let link = Link::Child(process.connection.client.clone());
                processes.push((transport, process));
                link
            }
            Transport::Shim => {
                let mut command = switchboard.shim_command(&daemon.socket, ShimStart::Binary);
                command
                    .arg("--log-file")
                    .arg(logs.join(format!("shim-{index}.log")));
                let process = Process::start(command, &logs.join(format!("shim-{index}.stderr")))
                    .await
                    .with_context(|| format!("shim agent {index}"))?;
                let link = Link::Child(process.connection.client.clone());
                processes.push((transport, process));
                link
            }
        };
        crew.push(Agent {
            run: backend.name(),
            index,
            link,
        });
    }
    let pids = |kind: Transport| -> Vec<u32> {
        processes
            .iter()
            .filter(|(t, _)| *t == kind)
            .filter_map(|(_, p)| p.child.id())
            .collect()
    };
    let (shim_pids, stdio_pids) = (pids(Transport::Shim), pids(Transport::Stdio));

    // The run proper starts now: faults are timed from here.
    let epoch = Instant::now();
    let end = epoch + duration;
    let daemon_pid = DaemonPid::new(daemon.pid().map(|pid| (daemon.incarnation, pid)));
    let mut starts = vec![(daemon.incarnation, Duration::ZERO)];
    eprintln!(
        "soak {}: running for {} s (kills every {} s{}, disk full at {}–{} s)",
        backend.name(),
        duration.as_secs(),
        schedule.kill_every.as_secs(),
        match backend {
            Backend::Irc => format!(
                ", IRC restarts every {} s",
                schedule.irc_restart_every.as_secs()
            ),
            Backend::Local => String::new(),
        },
        schedule.full_at.as_secs(),
        schedule.full_until().as_secs()
    );
    let (ran, samples, faults) = tokio::join!(
        futures::future::join_all(crew.into_iter().map(|agent| agent.run(epoch, end))),
        samples::sample(epoch, end, &daemon_pid, &shim_pids, &stdio_pids),
        inject(
            &schedule,
            epoch,
            &mut daemon,
            &mut irc,
            &daemon_pid,
            &tmpfs.path,
            &mut starts
        ),
    );
    let run_end = epoch.elapsed();
    eprintln!("soak {}: stopping", backend.name());

    let mut shutdown = Vec::new();
    let (crew, ledgers): (Vec<Agent>, Vec<Ledger>) = ran.into_iter().unzip();
    drop(crew);
    for (transport, process) in processes {
        if let Err(e) = process.stop().await {
            shutdown.push(format!("{}: {e:#}", transport.name()));
        }
    }
    if let Err(e) = daemon.stop().await {
        shutdown.push(format!("daemon: {e:#}"));
    }
    drop(irc);
    let faults = faults?;

    let daemon_history = daemon.data.join("history.db");
    let mut stored = BTreeMap::new();
    stored.insert("daemon".to_owned(), verify::stored_texts(&daemon_history)?);
    let mut tallies: BTreeMap<Transport, Tally> = BTreeMap::new();
    for (index, ledger) in ledgers.iter().enumerate() {
        let attempts: Vec<_> = ledger.sends.iter().collect();
        tallies
            .entry(Transport::of(index))
            .or_default()
            .add(&attempts, &stored["daemon"]);
    }
    let duplicates_anywhere = stored
        .iter()
        .map(|(name, texts)| (name.clone(), verify::duplicates_anywhere(texts)))
        .collect();
    let disk_full = DiskFull::from_ledgers(&ledgers, &faults, &tmpfs.path);
    let growth = samples::growth(&samples, &starts, run_end);
    let panics = verify::panics(&logs)?;
    Ok(RunOutcome {
        backend,
        agents,
        tmpfs_mib: TMPFS_MIB,
        tallies,
        ledgers,
        duplicates_anywhere,
        disk_full,
        faults,
        samples,
        growth,
        panics,
        shutdown,
        logs,
    })
}

/// Injects the faults of `schedule` until the run ends.
async fn inject(
    schedule: &Schedule,
    epoch: Instant,
    daemon: &mut Daemon,
    irc: &mut Option<IrcServer>,
    daemon_pid: &DaemonPid,
    tmpfs: &Path,
    starts: &mut Vec<(usize, Duration)>,
) -> anyhow::Result<FaultLog> {
    let mut log = FaultLog::default();
    let mut next_kill = schedule.kill_every;
    let mut next_irc = match irc {
        Some(_) => schedule.irc_restart_every,
        None => Duration::MAX,
    };
    let mut filler: Option<Filler> = None;
    let mut filled = false;
    loop {
        let disk_event = match (&filler, filled) {
            (None, false) => schedule.full_at,
            (Some(_), _) => schedule.full_until(),
            (None, true) => Duration::MAX,
        };
        let next = next_kill.min(next_irc).min(disk_event);
        if next >= schedule.duration {
            return Ok(log);
        }
        tokio::time::sleep_until((epoch + next).into()).await;
        if next == disk_event {
            match filler.take() {
                None => {
                    let (file, bytes) = Filler::fill(&tmpfs.join("filler"))?;
                    eprintln!("soak: disk full at {} s", epoch.elapsed().as_secs());
                    log.full = Some((epoch.elapsed(), None, bytes));
                    filler = Some(file);
                    filled = true;
                }
                Some(file) => {
                    file.remove()?;
                    eprintln!("soak: disk space back at {} s", epoch.elapsed().as_secs());
                    if let Some((_, freed, _)) = &mut log.full {
                        *freed = Some(epoch.elapsed());
                    }
                }
            }
        } else if next == next_kill {
            next_kill += schedule.kill_every;
            if filler.is_some() {
                // Not while the disk is full: a restart could not open the history.
                next_kill = next_kill.max(schedule.full_until() + Duration::from_secs(5));
                continue;
            }
            let at = epoch.elapsed();
            daemon_pid.set(None);
            daemon.kill9().await;
            let restarted = daemon.start().await?;
            daemon_pid.set(daemon.pid().map(|pid| (daemon.incarnation, pid)));
            starts.push((daemon.incarnation, epoch.elapsed()));
            eprintln!(
                "soak: daemon killed at {} s, back as #{} in {} ms",
                at.as_secs(),
                daemon.incarnation,
                restarted.as_millis()
            );
            log.kills.push((at, restarted));
        } else {
            next_irc += schedule.irc_restart_every;
            let at = epoch.elapsed();
            let mut server = irc
                .take()
                .expect("IRC restarts are scheduled with a server");
            let started = Instant::now();
            // The test kit panics when the server does not come back.
            let server = tokio::spawn(async move {
                server.restart().await;
                server
            })
            .await
            .map_err(|e| anyhow!("the IRC server did not restart: {}", panic_text(e)))?;
            *irc = Some(server);
            eprintln!("soak: IRC server restarted at {} s", at.as_secs());
            log.irc_restarts.push((at, started.elapsed()));
        }
    }
}

async fn start_irc() -> anyhow::Result<IrcServer> {
    tokio::spawn(IrcServer::start(
        ServerKind::InspIRCd,
        ServerOptions::default(),
    ))
    .await
    .map_err(|e| anyhow!("cannot start InspIRCd: {}", panic_text(e)))
}

/// A loopback port free right now, for a daemon that must come back on the
/// same address after each kill.
fn free_port() -> anyhow::Result<SocketAddr> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?)
}

/// The daemon: `serve --http ADDR --socket SOCKET --data-dir DATA`, each
/// incarnation logging to `daemon-N.log` (and `daemon-N.stderr`).
struct Daemon {
    switchboard: Switchboard,
    addr: SocketAddr,
    socket: PathBuf,
    data: PathBuf,
    config: Option<PathBuf>,
    logs: PathBuf,
    incarnation: usize,
    child: Option<Child>,
}

impl Daemon {
    /// Starts the next incarnation and waits until it accepts connections;
    /// returns how long that took.
    async fn start(&mut self) -> anyhow::Result<Duration> {
        let started = Instant::now();
        self.incarnation += 1;
        let log = self.logs.join(format!("daemon-{}.log", self.incarnation));
        let addr = self.addr.to_string();
        let mut args = vec![
            "--http",
            &addr,
            "--socket",
            utf8(&self.socket)?,
            "--log-file",
            utf8(&log)?,
        ];
        if let Some(config) = &self.config {
            args.extend(["--config", utf8(config)?]);
        }
        let stderr = self
            .logs
            .join(format!("daemon-{}.stderr", self.incarnation));
        let mut command = Command::from(self.switchboard.command(&args, Data::Dir(&self.data)));
        command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr)?)
            .kill_on_drop(true);
        let mut child = command.spawn().context("cannot start switchboard")?;
        loop {
            if tokio::net::TcpStream::connect(self.addr).await.is_ok() {
                break;
            }
            if let Some(status) = child.try_wait()? {
                bail!("the daemon exited with {status} at start; {}", tail(&log));
            }
            if started.elapsed() > START_TIMEOUT {
                bail!(
                    "the daemon did not listen within {START_TIMEOUT:?}; {}",
                    tail(&log)
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.child = Some(child);
        Ok(started.elapsed())
    }

    fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(Child::id)
    }

    /// `kill -9`, and waits until the process is gone.
    async fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.start_kill();
            let _ = child.wait().await;
        }
    }

    /// SIGTERM, expecting a clean exit.
    async fn stop(&mut self) -> anyhow::Result<()> {
        let Some(mut child) = self.child.take() else {
            bail!("the daemon is not running");
        };
        if let Some(pid) = child.id() {
            // SAFETY: kill(2) on our own child with a valid signal.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
        }
        let log = self.logs.join(format!("daemon-{}.log", self.incarnation));
        exits_cleanly(&mut child, &log).await
    }
}

/// An agent's own process (`serve --stdio` or `switchboard-shim`) and the
/// MCP connection over its pipes.
struct Process {
    child: Child,
    connection: StdioConnection,
    stderr: PathBuf,
}

impl Process {
    async fn start(command: std::process::Command, stderr: &Path) -> anyhow::Result<Self> {
        let mut command = Command::from(command);
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(stderr)?)
            .kill_on_drop(true);
        let mut child = command.spawn().context("cannot start the process")?;
        let connection = StdioConnection::open(&mut child)
            .await
            .with_context(|| tail(stderr))?;
        Ok(Self {
            child,
            connection,
            stderr: stderr.to_owned(),
        })
    }

    /// Closes its stdin, expecting a clean exit.
    async fn stop(mut self) -> anyhow::Result<()> {
        self.connection.close().await?;
        exits_cleanly(&mut self.child, &self.stderr).await
    }
}

/// Waits (up to [`EXIT_TIMEOUT`]) for `child` to exit with status 0; the
/// error quotes the end of `log`.
async fn exits_cleanly(child: &mut Child, log: &Path) -> anyhow::Result<()> {
    match tokio::time::timeout(EXIT_TIMEOUT, child.wait()).await {
        Ok(status) => {
            let status = status?;
            if !status.success() {
                bail!("exited with {status}; {}", tail(log));
            }
            Ok(())
        }
        Err(_) => bail!("did not exit within {EXIT_TIMEOUT:?}; {}", tail(log)),
    }
}
