//! Starting and stopping the real `switchboard serve` (and `switchboard
//! shim`) as a child process.

use std::{
    collections::VecDeque,
    net::SocketAddr,
    path::{Path, PathBuf},
    process::{ExitStatus, Stdio},
    sync::{Arc, Mutex},
    time::Duration,
};

use anyhow::{Context, bail};
use switchboard_testkit::process::ISOLATED_ENV;
use tokio::{
    io::{AsyncBufReadExt, BufReader},
    process::{Child, ChildStderr},
    sync::oneshot,
};

/// What a server logs once it serves HTTP (the address follows) and once it
/// serves its relay socket (the path follows).
const HTTP_READY: &str = "serving MCP at http://";
const RELAY_READY: &str = "serving the relay socket at ";

/// Log lines kept from a server's stderr, for error messages.
const LOG_TAIL: usize = 40;

/// Where a server keeps its history.
#[derive(Debug, Clone, Copy)]
pub enum Data<'a> {
    /// `--ephemeral`: in memory.
    Ephemeral,
    /// `--data-dir DIR`: `DIR/history.db`, durable on acknowledgement.
    Dir(&'a Path),
}

impl Data<'_> {
    fn args(self) -> Vec<String> {
        match self {
            Data::Ephemeral => vec!["--ephemeral".into()],
            Data::Dir(dir) => vec!["--data-dir".into(), dir.display().to_string()],
        }
    }
}

/// How a shim is started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShimStart {
    /// `switchboard-shim …`, the small binary `switchboard mcp-config` names.
    Binary,
    /// `switchboard shim …`, which execs the small binary.
    Subcommand,
}

/// The binary under test.
#[derive(Debug, Clone)]
pub struct Switchboard {
    pub path: PathBuf,
}

impl Switchboard {
    /// `switchboard ARGS…` with a clean environment.
    fn isolated(&self, args: &[&str]) -> std::process::Command {
        self.isolated_program(&self.path, args)
    }

    fn isolated_program(&self, program: &Path, args: &[&str]) -> std::process::Command {
        let mut cmd = std::process::Command::new(program);
        cmd.args(args);
        for var in ISOLATED_ENV {
            cmd.env_remove(var);
        }
        cmd
    }

    /// `switchboard serve ARGS… DATA` with a clean environment, logging at
    /// the default level (`info,rmcp=warn`).
    pub fn command(&self, args: &[&str], data: Data<'_>) -> std::process::Command {
        let mut cmd = self.isolated(&["serve"]);
        cmd.args(args).args(data.args());
        cmd
    }

    /// The shim started `how`, with `--socket SOCKET` and a clean
    /// environment (the shim's defaults: no log, 1 s connect, 15 s call
    /// timeouts).
    pub fn shim_command(&self, socket: &Path, how: ShimStart) -> std::process::Command {
        let mut cmd = match how {
            ShimStart::Binary => {
                self.isolated_program(&self.path.with_file_name("switchboard-shim"), &["--socket"])
            }
            ShimStart::Subcommand => self.isolated(&["shim", "--socket"]),
        };
        cmd.arg(socket);
        cmd
    }

    /// Starts `serve --stdio`, with stdin and stdout piped for a client.
    pub fn start_stdio(&self, data: Data<'_>) -> anyhow::Result<Server> {
        let mut cmd = tokio::process::Command::from(self.command(&["--stdio"], data));
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
        let (server, _) = Server::spawn(cmd, None)?;
        Ok(server)
    }

    /// Starts `switchboard-shim --socket SOCKET`, with stdin and stdout
    /// piped for a client.
    pub fn start_shim(&self, socket: &Path) -> anyhow::Result<Server> {
        let mut cmd = tokio::process::Command::from(self.shim_command(socket, ShimStart::Binary));
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
        let (server, _) = Server::spawn(cmd, None)?;
        Ok(server)
    }

    /// Starts `serve --http 127.0.0.1:0` and waits until it is listening. It
    /// serves its relay socket, as a daemon does, but in a directory of its
    /// own rather than at the standard path, so that runs beside a running
    /// daemon or another benchmark do not collide.
    pub async fn start_http(&self, data: Data<'_>) -> anyhow::Result<(Server, SocketAddr)> {
        self.start_http_with(&[], data).await
    }

    /// [`Switchboard::start_http`] with more `args` (such as `--config FILE`).
    pub async fn start_http_with(
        &self,
        args: &[&str],
        data: Data<'_>,
    ) -> anyhow::Result<(Server, SocketAddr)> {
        let scratch = tempfile::tempdir().context("cannot create a temp dir")?;
        let socket = scratch.path().join("relay.sock");
        let socket = socket.to_str().context("the temp dir is not UTF-8")?;
        let mut all = vec!["--http", "127.0.0.1:0", "--socket", socket];
        all.extend_from_slice(args);
        let mut cmd = tokio::process::Command::from(self.command(&all, data));
        cmd.stdin(Stdio::null()).stdout(Stdio::null());
        let (mut server, ready) = Server::spawn(cmd, Some(HTTP_READY))?;
        server.scratch = Some(scratch);
        let rest = server.ready("serving HTTP", ready).await?;
        let addr = rest
            .split('/')
            .next()
            .and_then(|addr| addr.parse().ok())
            .with_context(|| format!("no address in the log line {HTTP_READY}{rest}"))?;
        Ok((server, addr))
    }

    /// Starts `serve --no-http --socket SOCKET` (no stdio, no HTTP: the relay
    /// socket only) and waits until it serves the socket.
    pub async fn start_relay(&self, socket: &Path, data: Data<'_>) -> anyhow::Result<Server> {
        let socket = socket.to_str().context("the socket path is not UTF-8")?;
        let mut cmd =
            tokio::process::Command::from(self.command(&["--no-http", "--socket", socket], data));
        cmd.stdin(Stdio::null()).stdout(Stdio::null());
        let (mut server, ready) = Server::spawn(cmd, Some(RELAY_READY))?;
        server.ready("serving its relay socket", ready).await?;
        Ok(server)
    }

    /// `switchboard --version`, for the report's header.
    pub fn version(&self) -> anyhow::Result<String> {
        let output = std::process::Command::new(&self.path)
            .arg("--version")
            .output()
            .with_context(|| format!("cannot run {}", self.path.display()))?;
        if !output.status.success() {
            bail!("{} --version failed", self.path.display());
        }
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
    }
}

/// A running `switchboard serve` (or `shim`). Killed if dropped without
/// [`Server::stop`] or [`Server::wait`].
pub struct Server {
    pub child: Child,
    log: Arc<Mutex<VecDeque<String>>>,
    /// A directory the server uses, removed after it.
    scratch: Option<tempfile::TempDir>,
}

impl Server {
    /// Spawns `cmd` with stderr captured; the receiver gets the rest of the
    /// first log line that contains `ready`, if given.
    fn spawn(
        mut cmd: tokio::process::Command,
        ready: Option<&'static str>,
    ) -> anyhow::Result<(Self, oneshot::Receiver<String>)> {
        cmd.stderr(Stdio::piped()).kill_on_drop(true);
        let mut child = cmd.spawn().context("cannot start switchboard")?;
        let stderr = child.stderr.take().context("stderr is piped")?;
        let log = Arc::new(Mutex::new(VecDeque::new()));
        let (ready_tx, ready_rx) = oneshot::channel();
        tokio::spawn(capture_log(stderr, log.clone(), ready, ready_tx));
        Ok((
            Self {
                child,
                log,
                scratch: None,
            },
            ready_rx,
        ))
    }

    /// Waits (up to 15 s) for the log line `ready` was given for; fails with
    /// the log if the server exits or stays silent.
    async fn ready(
        &mut self,
        doing: &str,
        ready: oneshot::Receiver<String>,
    ) -> anyhow::Result<String> {
        match tokio::time::timeout(Duration::from_secs(15), ready).await {
            Ok(Ok(rest)) => Ok(rest),
            _ => {
                let status = self.child.try_wait().ok().flatten();
                bail!(
                    "switchboard did not start {doing} (exit status: {status:?}); its log:\n{}",
                    self.log()
                )
            }
        }
    }

    /// A child started elsewhere (whose stderr is not captured), killed
    /// when dropped.
    pub fn adopt(child: Child) -> Self {
        Self {
            child,
            log: Arc::default(),
            scratch: None,
        }
    }

    pub fn pid(&self) -> anyhow::Result<u32> {
        self.child.id().context("switchboard has exited")
    }

    /// The last lines the server logged.
    pub fn log(&self) -> String {
        let log = self.log.lock().expect("log lock");
        log.iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Asks the server to shut down (SIGTERM) and waits for it; fails if it
    /// does not exit cleanly within 10 s.
    pub async fn stop(self) -> anyhow::Result<()> {
        if let Some(pid) = self.child.id() {
            // SAFETY: kill(2) on our own child process with a valid signal.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
        }
        self.wait().await
    }

    /// Waits (up to 10 s) for the server to exit by itself, as a stdio server
    /// does when its stdin closes; fails unless it exits with status 0.
    pub async fn wait(mut self) -> anyhow::Result<()> {
        let status: ExitStatus =
            match tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await {
                Ok(status) => status?,
                Err(_) => bail!(
                    "switchboard did not exit within 10 s; its log:\n{}",
                    self.log()
                ),
            };
        if !status.success() {
            bail!("switchboard exited with {status}; its log:\n{}", self.log());
        }
        Ok(())
    }
}

async fn capture_log(
    stderr: ChildStderr,
    log: Arc<Mutex<VecDeque<String>>>,
    ready: Option<&'static str>,
    ready_tx: oneshot::Sender<String>,
) {
    let mut ready_tx = ready.map(|_| ready_tx);
    let mut lines = BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        if let Some(marker) = ready
            && let Some(rest) = line.split(marker).nth(1)
            && let Some(tx) = ready_tx.take()
        {
            let _ = tx.send(rest.to_owned());
        }
        let mut log = log.lock().expect("log lock");
        if log.len() == LOG_TAIL {
            log.pop_front();
        }
        log.push_back(line);
    }
}
