//! Real IRC servers (InspIRCd 3, ngIRCd) on loopback, one per test.
//!
//! [`IrcServer::start`] renders the kit's config into a fresh temp dir, picks a free port on
//! 127.0.0.1, runs the Debian-packaged binary in the foreground with stdout/stderr going to
//! `server.log` in that dir, and returns once the server has logged that it is ready. The
//! process is killed when the [`IrcServer`] is dropped, and the temp dir is removed.
//! With [`ServerOptions::services`], Atheme services run alongside (see `services.rs`).
//! [`crate::IrcNetwork`] starts two InspIRCd servers linked to each other with
//! `IrcServer::start_linked`.
//! See `../shared/irc/README.md` for the measurements behind the settings used here.

use std::fmt;
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;
use tokio_rustls::rustls::pki_types::CertificateDer;

use crate::config;
use crate::human::Human;
use crate::services::{self, Services};
use crate::tls::TlsFiles;

/// How long a started server may take to log its ready line (both take ~10-20 ms).
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// How many fresh ports [`IrcServer::start`] tries when another process wins the bind race.
const PORT_ATTEMPTS: usize = 5;
/// How long [`IrcServer::restart`] keeps retrying while the old port cannot be bound yet.
const RESTART_BIND_TIMEOUT: Duration = Duration::from_secs(5);
/// How long [`IrcServer::stop`] waits after SIGTERM before it sends SIGKILL.
const STOP_TIMEOUT: Duration = Duration::from_secs(5);
/// How long [`IrcServer::register_account`] waits for NickServ's answer.
const REGISTER_ACCOUNT_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the log file and the process are polled while waiting.
pub(crate) const POLL: Duration = Duration::from_millis(5);

/// The name of the file (in the temp dir) that gets the server's stdout and stderr.
const LOG_FILE: &str = "server.log";

/// Which IRC server to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ServerKind {
    /// InspIRCd 3 (`/usr/sbin/inspircd`): IRCv3 caps (server-time, message-tags,
    /// echo-message, batch, ...) and chanhistory. Completes registration about 1 s after
    /// NICK/USER, on its once-per-second timer.
    InspIRCd,
    /// ngIRCd (`/usr/sbin/ngircd`): minimal (only the `multi-prefix` cap), registers at
    /// once, disconnects a client that sends a line over 512 bytes. Its listen backlog is
    /// 10, so pace bursts of connects.
    NgIRCd,
}

impl ServerKind {
    /// Both kinds, for tests that run against each server.
    pub const ALL: [ServerKind; 2] = [ServerKind::InspIRCd, ServerKind::NgIRCd];

    /// The executable's (and the Debian package's) name.
    pub fn binary_name(self) -> &'static str {
        match self {
            ServerKind::InspIRCd => "inspircd",
            ServerKind::NgIRCd => "ngircd",
        }
    }

    fn config_file(self) -> &'static str {
        match self {
            ServerKind::InspIRCd => "inspircd.conf",
            ServerKind::NgIRCd => "ngircd.conf",
        }
    }

    fn args(self, config: &Path) -> Vec<std::ffi::OsString> {
        let flags: &[&str] = match self {
            // --runasroot: it refuses to start as root otherwise (exit 8); --nopid: every
            // instance would write /var/run/inspircd/inspircd.pid.
            ServerKind::InspIRCd => &["--runasroot", "--nofork", "--nopid", "--config"],
            ServerKind::NgIRCd => &["--nodaemon", "--config"],
        };
        let mut args: Vec<_> = flags.iter().map(Into::into).collect();
        args.push(config.into());
        args
    }

    fn is_ready(self, log: &str) -> bool {
        match self {
            ServerKind::InspIRCd => log.contains("InspIRCd is now running as"),
            ServerKind::NgIRCd => log.lines().any(|l| l.ends_with(") ready.")),
        }
    }

    /// Whether the log shows that the listener could not be bound. InspIRCd keeps running
    /// without a listener; ngIRCd exits 1.
    fn bind_failed(self, log: &str) -> bool {
        match self {
            ServerKind::InspIRCd => log.contains("failed to bind"),
            ServerKind::NgIRCd => log.contains("isn't listening on a single port"),
        }
    }
}

impl fmt::Display for ServerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ServerKind::InspIRCd => "InspIRCd",
            ServerKind::NgIRCd => "ngIRCd",
        })
    }
}

/// Knobs for [`IrcServer::start`]. The defaults are test-friendly: plain text, no flood
/// throttling, no per-IP limit, InspIRCd history replay on.
///
/// ```
/// # use switchboard_testkit::ServerOptions;
/// let options = ServerOptions { tls: true, max_per_ip: Some(2), ..Default::default() };
/// # assert!(options.history);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerOptions {
    /// Listen with TLS (only) on the port, with a throwaway CA made at start; see
    /// [`IrcServer::ca_pem_path`]. [`crate::Human`] trusts that CA.
    pub tls: bool,
    /// Use the servers' stock flood control instead of the relaxed one. InspIRCd:
    /// `threshold="10" commandrate="1000" fakelag="yes"` (a 10-command burst, then 1
    /// command/s); ngIRCd: its default command penalties (`MaxPenaltyTime` unset).
    pub stock_flood: bool,
    /// Per-IP connection limit. InspIRCd: `<connect localmax globalmax>` (1000 if `None`);
    /// ngIRCd: `MaxConnectionsIP` (unlimited if `None`).
    pub max_per_ip: Option<u32>,
    /// InspIRCd only: every new channel gets chanhistory `+H 100:1d`, so a joiner gets
    /// `NOTICE #chan :Replaying up to 100 lines of pre-join history ...` followed by the
    /// earlier messages. ngIRCd has no history.
    pub history: bool,
    /// Maximum nick length (InspIRCd `<limits maxnick>`, ngIRCd `MaxNickLength`). `None`
    /// means 31 on both; ngIRCd clamps anything above 31.
    pub nicklen: Option<u32>,
    /// InspIRCd only, for load tests that push tens of thousands of lines a second through
    /// single connections: flood control that never applies (`threshold="1000000"`,
    /// `commandrate="1000000000"`; the relaxed default still allows only 100 commands/s
    /// after a 1000-command burst) and `hardsendq="256M"`, so a client that reads slower
    /// than the server sends is buffered rather than disconnected. ngIRCd needs nothing
    /// more: `MaxPenaltyTime = 0` already turns its penalties off. `stock_flood` wins.
    ///
    /// Even so, InspIRCd reads a plain-text client at most 10 KiB (`netbuffersize`) per
    /// event and comes back for a backlog only on the next turn of its event loop, which
    /// waits up to a second for other events: a client that writes a large burst at once
    /// is read at about 20 KB/s. To push lines fast, write blocks of under 10 KiB and wait
    /// for the reply to a `PING` at the end of each.
    pub unthrottled: bool,
    /// InspIRCd only: also run Atheme services (`atheme-services`, from the Debian package
    /// of that name) linked to the server over a second loopback port, so that clients can
    /// register accounts ([`IrcServer::register_account`]) and log in with SASL PLAIN.
    /// [`IrcServer::start`] returns once the link is up; the server offers the `sasl` cap
    /// only while it is. [`IrcServer::kill`] and [`IrcServer::stop`] stop the services
    /// too, [`IrcServer::restart`] brings both back with the accounts registered so far.
    pub services: bool,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            tls: false,
            stock_flood: false,
            max_per_ip: None,
            history: true,
            nicklen: None,
            unthrottled: false,
            services: false,
        }
    }
}

/// A running IRC server on `127.0.0.1:port()`, killed on drop.
///
/// All methods panic with the server's log on failure: this is test code, and a panic is
/// the clearest test failure.
#[derive(Debug)]
pub struct IrcServer {
    kind: ServerKind,
    options: ServerOptions,
    binary: PathBuf,
    port: u16,
    /// The port Atheme links to, with services.
    link_port: Option<u16>,
    /// The link to the other server, in an [`crate::IrcNetwork`].
    link: Option<config::Link>,
    tls: Option<TlsFiles>,
    child: Option<Child>,
    /// Killed on drop, after the server (see `Drop::drop`).
    services: Option<Services>,
    // Last field: dropped after `Drop::drop` has killed the processes.
    dir: TempDir,
}

impl IrcServer {
    /// Starts a server and waits (at most 10 s) until it is ready to accept clients, and
    /// with [`ServerOptions::services`] (at most 10 s more) until the services have linked.
    ///
    /// # Panics
    /// If the binary is not installed (`inspircd not found: apt-get install inspircd`, and
    /// likewise for `atheme-services` with services), if services are asked of ngIRCd, if
    /// the server or the services fail to start or do not become ready in time, or if 5
    /// fresh ports in a row are lost to other processes.
    pub async fn start(kind: ServerKind, options: ServerOptions) -> IrcServer {
        assert!(
            !options.services || kind == ServerKind::InspIRCd,
            "ServerOptions::services needs InspIRCd: the kit links Atheme to InspIRCd only, not to {kind}"
        );
        let mut server = IrcServer::new(kind, options, None);
        let atheme = server
            .options
            .services
            .then(|| find_binary("atheme-services"));
        for _ in 0..PORT_ATTEMPTS {
            server.port = free_port();
            server.link_port = atheme.is_some().then(|| free_port_except(server.port));
            server.write_config();
            match server.launch().await {
                Ok(child) => {
                    server.child = Some(child);
                    if let (Some(atheme), Some(link_port)) = (atheme, server.link_port) {
                        let services = Services::new(atheme, server.dir.path(), link_port);
                        server.services = Some(services);
                        server.launch_services().await;
                    }
                    return server;
                }
                // Another process took the port between our probe and the server's bind.
                Err(Launch::BindFailed) => continue,
                Err(Launch::Failed(why)) => server.fail(&why),
            }
        }
        server.fail(&format!(
            "lost the bind race on {PORT_ATTEMPTS} ports in a row"
        ))
    }

    /// Starts an InspIRCd server on client port `port` with `link` to another one, and
    /// waits (at most 10 s) until it is ready; or `None` if `port` or the server port of
    /// `link` could not be bound (the caller picks fresh ports for both servers and tries
    /// again). Whether the link comes up is for the caller to watch.
    ///
    /// # Panics
    /// As [`IrcServer::start`]; `options.services` is the caller's to refuse.
    pub(crate) async fn start_linked(
        options: ServerOptions,
        port: u16,
        link: config::Link,
    ) -> Option<IrcServer> {
        let mut server = IrcServer::new(ServerKind::InspIRCd, options, Some(link));
        server.port = port;
        server.write_config();
        match server.launch().await {
            Ok(child) => {
                server.child = Some(child);
                Some(server)
            }
            Err(Launch::BindFailed) => None,
            Err(Launch::Failed(why)) => server.fail(&why),
        }
    }

    /// A server not started yet, with its temp dir (and TLS files) made; port 0.
    fn new(kind: ServerKind, options: ServerOptions, link: Option<config::Link>) -> IrcServer {
        let binary = find_binary(kind.binary_name());
        let dir = tempfile::Builder::new()
            .prefix(&format!("testkit-{}-", kind.binary_name()))
            .tempdir()
            .expect("create temp dir");
        if kind == ServerKind::NgIRCd {
            // Its IncludeDir; a missing one only logs a warning, but keep the log clean.
            std::fs::create_dir(dir.path().join("ngircd.conf.d")).expect("create IncludeDir");
        }
        let tls = options.tls.then(|| TlsFiles::generate(dir.path()));
        IrcServer {
            kind,
            options,
            binary,
            port: 0,
            link_port: None,
            link,
            tls,
            child: None,
            services: None,
            dir,
        }
    }

    /// The TCP port on 127.0.0.1 (TLS-only when started with `tls: true`).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A switchboard config that chats through this server: `[chat]` with
    /// `backend = "irc"`, then `[chat.irc]` with the server's address
    /// followed by `more`, which may hold further `[chat.irc]` keys and then
    /// other tables.
    pub fn switchboard_config(&self, more: &str) -> String {
        format!(
            "[chat]\nbackend = \"irc\"\n[chat.irc]\nserver = \"{}\"\nport = {}\n{more}",
            self.host(),
            self.port
        )
    }

    /// The address the server listens on: always `"127.0.0.1"`.
    pub fn host(&self) -> &'static str {
        "127.0.0.1"
    }

    /// The server's process id, or `None` while it is not running (after
    /// [`IrcServer::kill`] or [`IrcServer::stop`]). For measuring its CPU or memory.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Which server this is.
    pub fn kind(&self) -> ServerKind {
        self.kind
    }

    /// The options it was started with.
    pub fn options(&self) -> &ServerOptions {
        &self.options
    }

    /// The PEM file of the throwaway CA that signed the server's certificate (for
    /// `127.0.0.1` and `localhost`), or `None` without TLS. Give it to the code under
    /// test as its trusted CA.
    pub fn ca_pem_path(&self) -> Option<&Path> {
        self.tls.as_ref().map(|t| t.ca_pem.as_path())
    }

    pub(crate) fn ca_der(&self) -> Option<&CertificateDer<'static>> {
        self.tls.as_ref().map(|t| &t.ca_der)
    }

    /// The server's output so far (stdout/stderr of every run, including restarts), for
    /// InspIRCd also its own log file (which is buffered, so it may lag behind), and with
    /// services Atheme's log. Meant for assertion messages.
    pub fn log(&self) -> String {
        let mut log = read_lossy(&self.log_path());
        if self.kind == ServerKind::InspIRCd {
            let own = read_lossy(&self.dir.path().join("inspircd.log"));
            if !own.is_empty() {
                log.push_str("\n--- inspircd.log ---\n");
                log.push_str(&own);
            }
        }
        if let Some(services) = &self.services {
            log.push_str(&format!("\n--- {} ---\n", services::LOG_FILE));
            log.push_str(&services.log());
        }
        log
    }

    /// Registers `account` with NickServ as a user would: a [`Human`] with the nick
    /// `account` sends `REGISTER <password> <account>@example.com`, waits (at most 10 s)
    /// for NickServ's answer, and quits. The account can log in with SASL PLAIN at once
    /// (e-mail verification is off).
    ///
    /// # Panics
    /// Without [`ServerOptions::services`], or if NickServ refuses: the account exists, or
    /// the password is too weak (Atheme wants at least 5 characters, not the account name,
    /// no spaces). The message quotes NickServ's answer.
    pub async fn register_account(&self, account: &str, password: &str) {
        self.expect_services("register_account");
        let human = Human::connect(self, account).await;
        human
            .privmsg(
                "NickServ",
                &format!("REGISTER {password} {account}@example.com"),
            )
            .await;
        let answer = human
            .expect(
                |l| l.is_from("NickServ", "NOTICE"),
                REGISTER_ACCOUNT_TIMEOUT,
            )
            .await;
        // Atheme puts names in bold (^B): keep the words only.
        let text: String = answer
            .trailing()
            .unwrap_or_default()
            .chars()
            .filter(|c| !c.is_control())
            .collect();
        assert!(
            text.contains(&format!("{account} is now registered")),
            "NickServ did not register {account}: {text}"
        );
        human.quit().await;
    }

    /// How many SASL authentications clients have started with the services so far: one
    /// per `AUTHENTICATE <mechanism>`, whatever its outcome, counted in Atheme's log. For
    /// asserting that a client does not retry a failed login.
    ///
    /// # Panics
    /// Without [`ServerOptions::services`].
    pub fn sasl_attempts(&self) -> usize {
        services::sasl_starts(&self.expect_services("sasl_attempts").log())
    }

    /// Kills the server with SIGKILL and waits for it to exit: every client connection
    /// drops at once, without an ERROR line. Then stops the services, if any, with
    /// SIGTERM (so they keep their accounts). Does nothing if it is not running.
    pub async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            reap(&mut child, STOP_TIMEOUT).await;
        }
        self.stop_services().await;
    }

    /// Stops the server with SIGTERM and waits (at most 5 s, then SIGKILL). Clients get an
    /// ERROR line first. The exit status is not checked: InspIRCd exits 10 on SIGTERM, and
    /// with TLS loaded it even segfaults while unloading modules. Then stops the services,
    /// if any, the same way. Does nothing if it is not running.
    pub async fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            terminate(&mut child).await;
        }
        self.stop_services().await;
    }

    /// Starts the server again on the same port with the same config (and certificate),
    /// killing it first if it still runs. For fault tests: kill the server mid-conversation,
    /// then bring it back. Retries for up to 5 s while the port cannot be bound yet. With
    /// services, starts them again too (with their accounts) and waits until they have
    /// linked.
    ///
    /// # Panics
    /// If the server (or the services) do not come back within that time.
    pub async fn restart(&mut self) {
        self.kill().await;
        let deadline = Instant::now() + RESTART_BIND_TIMEOUT;
        loop {
            match self.launch().await {
                Ok(child) => {
                    self.child = Some(child);
                    self.launch_services().await;
                    return;
                }
                Err(Launch::BindFailed) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(Launch::BindFailed) => self.fail(&format!(
                    "port {} still could not be bound after {RESTART_BIND_TIMEOUT:?}",
                    self.port
                )),
                Err(Launch::Failed(why)) => self.fail(&why),
            }
        }
    }

    /// Turns the `<autoconnect>` of a linked server on or off in its config file, which
    /// the running server reads on `REHASH` and a restarted one at start.
    pub(crate) fn set_autoconnect(&mut self, on: bool) {
        let link = self
            .link
            .as_mut()
            .expect("set_autoconnect on a server started with start_linked");
        link.autoconnect = on;
        self.write_config();
    }

    /// Starts the services (if any) and waits until they have linked to the running server.
    async fn launch_services(&mut self) {
        if let Some(services) = &mut self.services
            && let Err(why) = services.launch().await
        {
            self.fail(&why);
        }
    }

    async fn stop_services(&mut self) {
        if let Some(services) = &mut self.services {
            services.stop().await;
        }
    }

    fn expect_services(&self, what: &str) -> &Services {
        self.services.as_ref().unwrap_or_else(|| {
            panic!("IrcServer::{what} needs services: start with ServerOptions {{ services: true, .. }}")
        })
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join(LOG_FILE)
    }

    fn write_config(&self) {
        let config = config::render(
            self.kind,
            &self.options,
            self.port,
            self.link_port,
            self.link.as_ref(),
            self.dir.path(),
            self.tls.as_ref(),
        );
        let path = self.dir.path().join(self.kind.config_file());
        std::fs::write(&path, config)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
    }

    /// Spawns the server and waits for its ready line, its death, or the timeout.
    async fn launch(&self) -> Result<Child, Launch> {
        let log_path = self.log_path();
        let config = self.dir.path().join(self.kind.config_file());
        let mut command = Command::new(&self.binary);
        command
            .args(self.kind.args(&config))
            // InspIRCd raises its core-size limit and segfaults on SIGTERM with TLS loaded:
            // keep any core file inside the temp dir.
            .current_dir(self.dir.path());
        let (mut child, start_offset) = spawn_logged(&mut command, &log_path);

        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let output = read_from(&log_path, start_offset);
            // Both lines come from the same stream, so a bind warning precedes "ready".
            if self.kind.bind_failed(&output) {
                let _ = child.kill();
                reap(&mut child, STOP_TIMEOUT).await;
                return Err(Launch::BindFailed);
            }
            if self.kind.is_ready(&output) {
                return Ok(child);
            }
            if let Some(status) = child.try_wait().expect("poll server process") {
                let output = read_from(&log_path, start_offset);
                return Err(if self.kind.bind_failed(&output) {
                    Launch::BindFailed
                } else {
                    Launch::Failed(format!("exited with {status} before it was ready"))
                });
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                reap(&mut child, STOP_TIMEOUT).await;
                return Err(Launch::Failed(format!("not ready after {READY_TIMEOUT:?}")));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    fn fail(&self, why: &str) -> ! {
        panic!(
            "{} on 127.0.0.1:{} {why}\n--- server log ---\n{}",
            self.kind,
            self.port,
            self.log()
        )
    }
}

impl Drop for IrcServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            // SIGKILL takes effect at once; this does not block for long.
            let _ = child.wait();
        }
    }
}

enum Launch {
    /// The port was taken: retry (with a new port, or later on the same one).
    BindFailed,
    /// Anything else: give up.
    Failed(String),
}

/// A binary of the Debian package of the same name: `/usr/sbin/<name>` as Debian installs
/// the servers, else the first on `$PATH` (`atheme-services` is in `/usr/bin`).
fn find_binary(name: &str) -> PathBuf {
    let sbin = Path::new("/usr/sbin").join(name);
    if sbin.is_file() {
        return sbin;
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{name} not found: apt-get install {name}"))
}

/// A port that was free on 127.0.0.1 a moment ago (the OS picks it).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind 127.0.0.1:0 to find a free port")
        .port()
}

/// `N` different ports that were free on 127.0.0.1 a moment ago.
pub(crate) fn free_ports<const N: usize>() -> [u16; N] {
    // Held open together, so that the OS hands out N different ports.
    let listeners: [std::net::TcpListener; N] = std::array::from_fn(|_| {
        std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0 to find a free port")
    });
    listeners.map(|l| {
        l.local_addr()
            .expect("local address of a bound socket")
            .port()
    })
}

/// A free port (see [`free_port`]) other than `taken`.
fn free_port_except(taken: u16) -> u16 {
    loop {
        let port = free_port();
        if port != taken {
            return port;
        }
    }
}

/// Sends SIGTERM to `child` and waits (at most 5 s, then SIGKILL) for it to exit.
pub(crate) async fn terminate(child: &mut Child) {
    let pid = libc::pid_t::try_from(child.id()).expect("pid fits pid_t");
    // SAFETY: plain kill(2) on our own child, which has not been reaped yet (so the pid
    // cannot have been reused).
    unsafe { libc::kill(pid, libc::SIGTERM) };
    if reap(child, STOP_TIMEOUT).await.is_none() {
        let _ = child.kill();
        reap(child, STOP_TIMEOUT).await;
    }
}

/// Spawns `command` with stdin closed and stdout and stderr appended to `log_path`.
/// Returns the child and the log's length before it started: only this run's output
/// counts for readiness, while earlier runs stay in the file for [`IrcServer::log`].
pub(crate) fn spawn_logged(command: &mut Command, log_path: &Path) -> (Child, usize) {
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(log_path)
        .unwrap_or_else(|e| panic!("cannot open {}: {e}", log_path.display()));
    let start_offset = log.metadata().map(|m| m.len()).unwrap_or(0) as usize;
    let stderr = log.try_clone().expect("clone log file handle");
    let child = command
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(stderr)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {:?}: {e}", command.get_program()));
    (child, start_offset)
}

/// Waits (polling, without blocking the runtime) for `child` to exit.
pub(crate) async fn reap(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() < deadline => tokio::time::sleep(POLL).await,
            Ok(None) | Err(_) => return None,
        }
    }
}

fn read_lossy(path: &Path) -> String {
    read_from(path, 0)
}

/// The file's contents from byte `offset` on, lossily decoded; empty if it is unreadable.
pub(crate) fn read_from(path: &Path, offset: usize) -> String {
    let bytes = std::fs::read(path).unwrap_or_default();
    String::from_utf8_lossy(bytes.get(offset..).unwrap_or_default()).into_owned()
}
