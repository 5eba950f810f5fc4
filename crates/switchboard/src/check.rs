//! `switchboard check`: loads the config as `serve` would, then asks what
//! `serve` will depend on — the IRC network, the docs sources, the commands
//! program, the HTTP address, the relay socket and the history's directory —
//! and prints one line per answer. Nothing is served and nothing is
//! written; the IRC check registers a throwaway nick and quits.
//!
//! Exit status: 0 when every check passed (warnings included), 1 when one
//! failed, 2 for a config `serve` would refuse (the error names the key).

use std::{
    fmt,
    net::TcpListener,
    os::unix::net::UnixStream,
    path::{Path, PathBuf},
};

use anyhow::bail;

use crate::{
    cli::{DAEMON_APP_ID, ServeArgs},
    config::{Backend, Config, env_var},
};

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Ok,
    /// Fine for `check`, worth knowing before `serve` (an address in use).
    Warn,
    Fail,
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `pad`, so that `{:<4}` lines the topics up.
        f.pad(match self {
            Verdict::Ok => "ok",
            Verdict::Warn => "warn",
            Verdict::Fail => "FAIL",
        })
    }
}

/// The lines printed so far, and how many failed.
#[derive(Default)]
struct Report {
    failed: usize,
}

impl Report {
    fn say(&mut self, verdict: Verdict, topic: &str, text: impl fmt::Display) {
        if verdict == Verdict::Fail {
            self.failed += 1;
        }
        println!("{verdict:<4}  {topic:<8}  {text}");
    }
}

/// Runs every check for the config `args` name.
pub fn run(args: &ServeArgs) -> anyhow::Result<()> {
    let env = env_var;
    let config = Config::load(args, &env)?;
    // What `serve` checks before it opens anything: each is a config error.
    let toolkit = config.build_toolkit()?;
    let irc = match (config.chat.enabled, config.chat.backend) {
        (true, Backend::Irc) => Some(config.irc_settings(&env)?),
        _ => None,
    };
    if config.chat.enabled {
        config.chat_settings()?;
    }
    config.tokens(&env)?;
    let docs = if config.docs.sources.is_empty() {
        None
    } else {
        Some(switchboard_docs::Library::new(&config.docs)?)
    };

    let mut report = Report::default();
    report.say(Verdict::Ok, "config", summary(&config, &toolkit));
    check_history(&mut report, &config);
    check_http(&mut report, &config);
    check_socket(&mut report, &config);
    if let Some(commands) = &toolkit.commands {
        match commands.locate_program() {
            Ok(path) => report.say(Verdict::Ok, "commands", format!("found {}", path.display())),
            Err(missing) => report.say(Verdict::Fail, "commands", missing),
        }
    }
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(async {
            if let Some(settings) = &irc {
                let server = format!(
                    "{}:{}{}",
                    settings.server,
                    settings.port,
                    if settings.tls.is_some() { " (TLS)" } else { "" }
                );
                let nick = format!("sbchk{:04}", std::process::id() % 10_000);
                match switchboard_chat::irc::probe(settings, &nick).await {
                    Ok(nick) => report.say(
                        Verdict::Ok,
                        "irc",
                        format!("{server}: registered as {nick}, then quit"),
                    ),
                    Err(e) => {
                        // Most errors name the server already.
                        let e = e.to_string();
                        let text = if e.contains(&settings.server) {
                            e
                        } else {
                            format!("{server}: {e}")
                        };
                        report.say(Verdict::Fail, "irc", text);
                    }
                }
            }
            if let Some(library) = &docs {
                for probe in library.probe().await {
                    match probe.outcome {
                        Ok(links) => report.say(
                            Verdict::Ok,
                            "docs",
                            format!("{}: {} lists {links} links", probe.name, probe.llms_txt),
                        ),
                        Err(e) => report.say(Verdict::Fail, "docs", e),
                    }
                }
            }
        });
    match report.failed {
        0 => Ok(()),
        1 => bail!("1 check failed"),
        n => bail!("{n} checks failed"),
    }
}

/// What the config turns on.
fn summary(config: &Config, toolkit: &switchboard_toolkit::Toolkit) -> String {
    let mut on = Vec::new();
    if config.chat.enabled {
        on.push(match config.chat.backend {
            Backend::Local => "chat (local hub)".to_owned(),
            Backend::Irc => "chat (IRC)".to_owned(),
        });
    }
    let count = |n: usize, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
    if !config.docs.sources.is_empty() {
        on.push(format!(
            "docs ({})",
            count(config.docs.sources.len(), "source")
        ));
    }
    let tools: usize = toolkit.toolsets.iter().map(|t| t.tools().len()).sum();
    if tools > 0 {
        on.push(count(tools, "catalog, template or command tool"));
    }
    if toolkit.prompts.is_some() {
        on.push(count(config.prompts.len(), "prompt"));
    }
    if on.is_empty() {
        "valid, but no toolset is on: clients would list no tools".to_owned()
    } else {
        format!("valid: {}", on.join(", "))
    }
}

fn check_history(report: &mut Report, config: &Config) {
    if !config.chat.enabled {
        return;
    }
    let Some(path) = config.history_path(&env_var) else {
        report.say(Verdict::Ok, "history", "in memory (--ephemeral)");
        return;
    };
    if path.exists() {
        report.say(Verdict::Ok, "history", format!("{} exists", path.display()));
        return;
    }
    match writable_ancestor(&path) {
        Ok(dir) => report.say(
            Verdict::Ok,
            "history",
            format!(
                "{} will be created (in {}, which is writable)",
                path.display(),
                dir.display()
            ),
        ),
        Err(why) => report.say(
            Verdict::Fail,
            "history",
            format!(
                "{} cannot be created: {why}; set data_dir (or --data-dir) to a directory you can write",
                path.display()
            ),
        ),
    }
}

/// The nearest existing directory above `path`, if this user may write in it.
fn writable_ancestor(path: &Path) -> Result<PathBuf, String> {
    let dir = path
        .ancestors()
        .skip(1)
        .find(|dir| dir.exists())
        .ok_or_else(|| "no directory above it exists".to_owned())?;
    if !dir.is_dir() {
        return Err(format!("{} is not a directory", dir.display()));
    }
    let c_dir = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())
        .map_err(|_| "its path contains a NUL byte".to_owned())?;
    // SAFETY: `c_dir` is a valid NUL-terminated string for the call.
    if unsafe { libc::access(c_dir.as_ptr(), libc::W_OK | libc::X_OK) } != 0 {
        return Err(format!("{} is not writable", dir.display()));
    }
    Ok(dir.to_owned())
}

fn check_http(report: &mut Report, config: &Config) {
    if !config.http.enabled {
        return;
    }
    let listen = config.http.listen;
    match TcpListener::bind(listen) {
        Ok(_) => report.say(Verdict::Ok, "http", format!("{listen} is free")),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => report.say(
            Verdict::Warn,
            "http",
            format!(
                "{listen} is in use (a running switchboard?): serve would stop; stop that one or set http.listen (--http)"
            ),
        ),
        Err(e) => report.say(
            Verdict::Fail,
            "http",
            format!("cannot listen on {listen}: {e}; set http.listen (--http) to an address of this host"),
        ),
    }
}

fn check_socket(report: &mut Report, config: &Config) {
    if !config.socket.enabled {
        return;
    }
    let path = config.socket.path.clone().unwrap_or_else(|| {
        switchboard_relay::socket_path(switchboard_relay::DEFAULT_PREFIX, DAEMON_APP_ID)
    });
    // sun_path holds 108 bytes, the terminating NUL included.
    let length = path.as_os_str().len();
    let shown = path.display();
    if length > 107 {
        report.say(
            Verdict::Fail,
            "socket",
            format!("{shown} is {length} bytes long, over the 107 a Unix socket path may have; set socket.path (--socket) to a shorter one"),
        );
    } else if UnixStream::connect(&path).is_ok() {
        report.say(
            Verdict::Warn,
            "socket",
            format!("{shown} is in use (a running switchboard?): serve would stop; stop that one or set socket.path (--socket)"),
        );
    } else if path.exists() && !is_socket(&path) {
        report.say(
            Verdict::Fail,
            "socket",
            format!("{shown} exists and is not a socket; remove it or set socket.path (--socket)"),
        );
    } else {
        match writable_ancestor(&path) {
            Ok(_) => report.say(Verdict::Ok, "socket", format!("{shown} is free")),
            Err(why) => report.say(
                Verdict::Fail,
                "socket",
                format!("{shown} cannot be made: {why}; set socket.path (--socket)"),
            ),
        }
    }
}

fn is_socket(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket())
}
