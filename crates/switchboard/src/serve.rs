//! `switchboard serve`: opens the history, builds the toolsets into one
//! registry, starts the configured transports, and shuts down in order.
//!
//! Shutdown (SIGINT, SIGTERM, or the stdio client leaving): stop accepting
//! calls, release `wait_for_messages` callers, let in-flight calls finish
//! (bounded), stop the transports, then commit and close the history. Being
//! asked to shut down and stopping the transports are two tokens, so that
//! whatever asks (the stdio client leaving, too) only starts that sequence:
//! HTTP, legacy SSE and the relay socket keep serving, and answer new calls
//! with "shutting down", until the in-flight calls are done.
//!
//! SIGHUP reloads the config for the HTTP tokens and what they grant, in
//! place: no connection or session is dropped. A config that does not load
//! is refused (the error names the key) and the running one kept.

use std::{sync::Arc, time::Duration};

use anyhow::Context;
use switchboard_chat::{ChatBackend, ChatTools, History, LocalHub, Location, irc::IrcBackend};
use switchboard_docs::DocsTools;
use switchboard_toolkit::Toolkit;
use switchboard_toolset::{Caller, PromptSource, Registry, ResourceSource, Tokens, Toolset};
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio_util::sync::CancellationToken;

use crate::{
    cli::DAEMON_APP_ID,
    config::{Backend, Config, ConfigError, env_var},
    logging,
    mcp::{Drain, McpServer},
    transport::{guard::Guard, http, relay::RegistryHandler, stdio},
};

/// How long in-flight calls get to finish at shutdown.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves `config` until shutdown; `reload` loads the config anew for a
/// SIGHUP.
pub fn run(config: Config, reload: impl Fn() -> Result<Config, ConfigError>) -> anyhow::Result<()> {
    logging::init(&config.log.level, config.log.file.as_deref())?;
    let result = serve_logged(&config, reload);
    // The caller tells stderr; a log file gets the error the run ended with
    // too, beside what led to it.
    if let (Err(e), Some(_)) = (&result, &config.log.file) {
        tracing::error!("{e:#}");
    }
    result
}

/// [`run`] once logging is set up.
fn serve_logged(
    config: &Config,
    reload: impl Fn() -> Result<Config, ConfigError>,
) -> anyhow::Result<()> {
    let env = env_var;
    raise_open_files_limit();
    if config.commands.is_some() {
        hide_from_commands();
    }
    // Config errors of the toolkit sections surface here, before anything
    // is opened or connected.
    let toolkit = config.build_toolkit()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("switchboard")
        .build()
        .context("cannot start the async runtime")?;
    // Only chat keeps a history: a docs-only profile opens no database.
    let history = if config.chat.enabled {
        let location = match config.history_path(&env) {
            Some(path) => Location::File(path),
            None => Location::Memory,
        };
        Some(History::open(&location, config.chat.durability)?)
    } else {
        None
    };
    let result = runtime.block_on(serve(config, &reload, toolkit, history.as_ref(), &env));
    if let Some(history) = history {
        history.close();
    }
    runtime.shutdown_timeout(Duration::from_secs(1));
    result
}

/// Raises the soft limit on open files to the hard one. Every HTTP
/// connection, SSE session and blocked wait holds a descriptor, and the
/// usual soft limit (1024) is below `http.max_streams`: at it, every client
/// would be refused new connections.
fn raise_open_files_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid resource and a pointer to a
    // live rlimit.
    let raised = unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0
            && (limit.rlim_cur >= limit.rlim_max || {
                let wanted = libc::rlimit {
                    rlim_cur: limit.rlim_max,
                    rlim_max: limit.rlim_max,
                };
                libc::setrlimit(libc::RLIMIT_NOFILE, &wanted) == 0
            })
    };
    if !raised {
        tracing::warn!(
            soft = limit.rlim_cur,
            "cannot raise the limit on open files; connections beyond it will be refused"
        );
    }
}

/// Keeps the commands a profile runs out of this process. They run as
/// this user, and could otherwise read its environment (the tokens, the
/// variables `env_allow` does not pass on) in `/proc/<pid>/environ`, or
/// write to its stdout through `/proc/<pid>/fd/1`. A process that is not
/// dumpable has those entries owned by root; it also writes no core dumps.
/// Root's commands are not kept out: run switchboard as its own user.
fn hide_from_commands() {
    // SAFETY: prctl(PR_SET_DUMPABLE) takes integers and touches no memory.
    if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } != 0 {
        tracing::warn!(
            error = %std::io::Error::last_os_error(),
            "cannot keep the commands switchboard runs from reading its environment"
        );
    }
}

/// SIGHUP: the tokens of the config as it is now, or the old ones kept when
/// it does not load.
fn reload_tokens(
    running: &Config,
    reload: &dyn Fn() -> Result<Config, ConfigError>,
    tokens: &Tokens,
    env: &dyn Fn(&str) -> Option<String>,
) {
    let loaded = reload().and_then(|config| Ok((config.tokens(env)?, config)));
    match loaded {
        Ok((specs, _)) if specs.is_empty() && tokens.required() => tracing::error!(
            "SIGHUP: the new config has no [[http.tokens]], which would open HTTP to everyone who can reach it; the running tokens stay (restart switchboard to run without tokens)"
        ),
        Ok((specs, config)) => {
            let reloaded = tokens.reload(specs);
            tracing::info!(
                added = ?reloaded.added,
                changed = ?reloaded.changed,
                removed = ?reloaded.removed,
                "SIGHUP: reloaded the HTTP tokens (other settings take a restart)"
            );
            let waiting = running.changed_besides_tokens(&config);
            if !waiting.is_empty() {
                tracing::warn!(
                    "SIGHUP: {} changed and take effect only after a restart",
                    waiting.join(", ")
                );
            }
        }
        Err(e) => {
            tracing::error!("SIGHUP: the config was not reloaded, the running one stays: {e}")
        }
    }
}

/// Builds the registry of every configured toolset, resource source and
/// prompt source, and returns the chat toolset too (the web view serves
/// it). Runs inside the runtime: the IRC backend starts its connections
/// here.
fn registry(
    config: &Config,
    toolkit: Toolkit,
    history: Option<&History>,
    env: &dyn Fn(&str) -> Option<String>,
) -> anyhow::Result<Built> {
    let mut sets: Vec<Arc<dyn Toolset>> = Vec::new();
    let mut resources: Vec<Arc<dyn ResourceSource>> = Vec::new();
    let mut prompts: Vec<Arc<dyn PromptSource>> = Vec::new();
    let mut chat = None;
    let mut irc = None;
    if let Some(history) = history {
        let backend: Arc<dyn ChatBackend> = match config.chat.backend {
            Backend::Local => Arc::new(LocalHub::new(history.clone())),
            Backend::Irc => {
                let backend = Arc::new(IrcBackend::start(
                    config.irc_settings(env)?,
                    history.clone(),
                ));
                irc = Some(backend.clone());
                backend
            }
        };
        let tools = Arc::new(ChatTools::new(
            backend,
            history.clone(),
            config.chat_settings()?,
        ));
        sets.push(tools.clone());
        chat = Some(tools);
    }
    if !config.docs.sources.is_empty() {
        let docs = Arc::new(DocsTools::new(&config.docs)?);
        sets.push(docs.clone());
        resources.push(docs);
    }
    sets.extend(toolkit.toolsets);
    if let Some(toolkit_prompts) = toolkit.prompts {
        prompts.push(toolkit_prompts);
    }
    // Tool names come from the config, so a clash is a config error (exit 2).
    let registry = Registry::with_sources(sets, resources, prompts).map_err(|e| {
        anyhow::Error::from(ConfigError::Invalid {
            key: "tools".into(),
            problem: e.to_string(),
        })
    })?;
    if registry.tools(None).next().is_none() {
        tracing::warn!(
            "no toolset is on (chat.enabled = false and no docs, catalog, templates or commands): clients will list no tools"
        );
    }
    Ok(Built {
        registry,
        chat,
        irc,
    })
}

/// What [`registry`] built.
struct Built {
    registry: Registry,
    /// The chat toolset, which the web view serves.
    chat: Option<Arc<ChatTools>>,
    /// The IRC backend, whose observer may be refused its nick at start.
    irc: Option<Arc<IrcBackend>>,
}

async fn serve(
    config: &Config,
    reload: &dyn Fn() -> Result<Config, ConfigError>,
    toolkit: Toolkit,
    history: Option<&History>,
    env: &dyn Fn(&str) -> Option<String>,
) -> anyhow::Result<()> {
    // Before anything is served: a SIGTERM that came first would otherwise
    // kill the process outright, losing what a clean stop writes.
    let mut signals = Signals::new()?;
    let Built {
        registry,
        chat,
        irc,
    } = registry(config, toolkit, history, env)?;
    let drain = Drain::default();
    let server = McpServer::new(registry.clone(), drain.clone(), config.instructions.clone());
    // Fired by whatever asks for shutdown; the transports watch only
    // `Transports::stop`, fired once in-flight calls have drained.
    let shutdown_requested = CancellationToken::new();
    let tokens = Arc::new(Tokens::new(config.tokens(env)?));
    let mut transports = Transports::default();
    if config.http.enabled {
        transports.http(config, &server, chat, &tokens).await?;
    }
    if config.socket.enabled {
        transports.relay(config, &server)?;
    }
    // Said once every listener is bound: a second instance that fails on
    // the relay socket must not first claim to serve HTTP.
    for line in transports.serving.drain(..) {
        tracing::info!("{line}");
    }
    if config.stdio {
        transports.stdio(config, &server, shutdown_requested.clone());
    }

    let failure = signals
        .wait_for_shutdown(irc.as_deref(), &shutdown_requested, || {
            reload_tokens(config, reload, &tokens, env)
        })
        .await;

    drain.stop_accepting();
    if let Some(history) = history {
        history.release_waiters();
    }
    if tokio::time::timeout(DRAIN_TIMEOUT, drain.finished())
        .await
        .is_err()
    {
        tracing::warn!("in-flight calls did not finish within {DRAIN_TIMEOUT:?}; stopping anyway");
    }
    transports.stop().await;
    registry.close().await;
    match failure {
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
}

/// The signals the daemon answers: SIGINT and SIGTERM stop it, SIGHUP
/// reloads its tokens.
struct Signals {
    interrupt: Signal,
    terminate: Signal,
    hangup: Signal,
}

impl Signals {
    fn new() -> std::io::Result<Self> {
        Ok(Self {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            hangup: signal(SignalKind::hangup())?,
        })
    }

    /// Waits until something asks for shutdown: a signal, the stdio client
    /// leaving, or the IRC server refusing the observer's configured nick,
    /// which is returned as the configuration error to exit with. Each
    /// SIGHUP on the way runs `reload`.
    async fn wait_for_shutdown(
        &mut self,
        irc: Option<&IrcBackend>,
        requested: &CancellationToken,
        reload: impl Fn(),
    ) -> Option<ConfigError> {
        let refused_nick = async {
            match irc {
                Some(irc) => irc.refused_nick().await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(refused_nick);
        loop {
            tokio::select! {
                problem = &mut refused_nick => {
                    tracing::error!("chat.irc.nick: {problem}; shutting down");
                    return Some(ConfigError::Invalid {
                        key: "chat.irc.nick".into(),
                        problem: format!(
                            "{problem}; set chat.irc.nick (or IRC_NICK) to a free nick, or leave it unset for switchboard's default, which picks a free one"
                        ),
                    });
                }
                _ = self.interrupt.recv() => tracing::info!("SIGINT: shutting down"),
                _ = self.terminate.recv() => tracing::info!("SIGTERM: shutting down"),
                _ = self.hangup.recv() => {
                    reload();
                    continue;
                }
                () = requested.cancelled() => tracing::info!("the stdio client left: shutting down"),
            }
            return None;
        }
    }
}

/// The transports a daemon runs, each a task that stops when `stop_token`
/// fires, and the lines saying where they serve.
#[derive(Default)]
struct Transports {
    tasks: tokio::task::JoinSet<()>,
    serving: Vec<String>,
    stop_token: CancellationToken,
}

impl Transports {
    /// Binds `http.listen` and serves MCP (with legacy SSE and the web view
    /// as configured) on it.
    async fn http(
        &mut self,
        config: &Config,
        server: &McpServer,
        chat: Option<Arc<ChatTools>>,
        tokens: &Arc<Tokens>,
    ) -> anyhow::Result<()> {
        let listen = config.http.listen;
        let listener = http::bind(listen).await.with_context(|| {
            format!("cannot listen on {listen} (http.listen); is another switchboard running?")
        })?;
        let local = listener.local_addr()?;
        let guard = Guard::new(local, &config.http, tokens.clone());
        let web = chat
            .filter(|_| config.http.web)
            .map(|chat| switchboard_web::router(chat, tokens.clone()));
        let with_web = web.is_some();
        let app = http::router(
            server.clone(),
            guard,
            config.http.legacy_sse,
            http::Limits {
                max_streams: config.http.max_streams,
                max_sse_sessions: config.http.max_sse_sessions,
                sse_idle: config.http.sse_idle_timeout(),
            },
            web,
            self.stop_token.clone(),
        );
        self.serving.push(format!(
            "serving MCP at http://{local}/mcp (legacy SSE at /sse)"
        ));
        if with_web {
            self.serving
                .push(format!("serving the web view at http://{local}/"));
        }
        let write_timeout = config.http.write_timeout();
        let stop = self.stop_token.clone();
        self.tasks.spawn(async move {
            if let Err(e) = http::serve(listener, app, write_timeout, stop).await {
                tracing::error!(error = %e, "HTTP server failed");
            }
        });
        Ok(())
    }

    /// Binds the relay socket, for shims and `tail`/`say`.
    fn relay(&mut self, config: &Config, server: &McpServer) -> anyhow::Result<()> {
        let mut options = switchboard_relay::Options::new(DAEMON_APP_ID)
            .app_name("switchboard")
            .write_timeout(config.socket.write_timeout());
        if let Some(path) = &config.socket.path {
            options = options.socket_path(path.clone());
        }
        let handler = Arc::new(RegistryHandler::new(
            server.for_caller(Caller::new("relay")),
        ));
        let relay = options
            .events(handler.events())
            .bind(handler.clone())
            .context(
                "cannot serve the relay socket (socket.path); pass --no-socket or --socket PATH",
            )?;
        handler.set_handle(relay.handle());
        self.serving.push(format!(
            "serving the relay socket at {}",
            relay.socket_path().display()
        ));
        let stop = self.stop_token.clone();
        self.tasks.spawn(async move {
            if let Err(e) = relay.serve(stop.cancelled_owned()).await {
                tracing::error!(error = %e, "relay socket failed");
            }
        });
        Ok(())
    }

    /// Serves the one stdio client; its leaving fires `requested`, since
    /// the whole process is then done, in the same order as for a signal.
    fn stdio(&mut self, config: &Config, server: &McpServer, requested: CancellationToken) {
        let stop = self.stop_token.clone();
        let server = server.clone();
        let nick = config.chat.nick.clone();
        self.tasks.spawn(async move {
            stdio::serve(
                server,
                nick,
                switchboard_shim::stdio::stdin(),
                switchboard_shim::stdio::stdout(),
                stop,
                requested,
            )
            .await;
        });
    }

    /// Stops every transport and gives them 2 s to finish.
    async fn stop(mut self) {
        self.stop_token.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(2), async {
            while self.tasks.join_next().await.is_some() {}
        })
        .await;
    }
}
