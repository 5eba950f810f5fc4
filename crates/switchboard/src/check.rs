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
use switchboard_chat::irc::ConnError;

use crate::{
    cli::{self, ServeArgs},
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
    check_log(&mut report, &config);
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
                        // A TLS handshake to a plain port waits for ever.
                        let hint = match e {
                            ConnError::RegistrationTimeout { .. } if settings.tls.is_some() => {
                                "; a port that does not speak TLS never answers the handshake: check chat.irc.port and chat.irc.tls"
                            }
                            _ => "",
                        };
                        // Most errors name the server already.
                        let e = e.to_string();
                        let address = format!("{}:{}", settings.server, settings.port);
                        let text = if e.contains(&address) {
                            format!("{e}{hint}")
                        } else {
                            format!("{server}: {e}{hint}")
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

fn check_log(report: &mut Report, config: &Config) {
    let Some(path) = &config.log.file else {
        return;
    };
    let shown = path.display();
    let problem = match std::fs::metadata(path) {
        Ok(meta) if !meta.is_file() => Some("is not a file".to_owned()),
        Ok(_) if !access(path, libc::W_OK) => Some("is not writable".to_owned()),
        Ok(_) => None,
        Err(_) => writable_ancestor(path).err(),
    };
    match problem {
        None => report.say(Verdict::Ok, "log", format!("{shown} can be written")),
        Some(why) => report.say(
            Verdict::Fail,
            "log",
            format!("{shown} {why}; set log.file (--log-file) to a file you can write"),
        ),
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
    if std::fs::symlink_metadata(&path).is_ok() {
        match sqlite_file(&path) {
            Ok(()) => report.say(Verdict::Ok, "history", format!("{} exists", path.display())),
            Err(why) => report.say(
                Verdict::Fail,
                "history",
                format!(
                    "{} {why}; move it away, or set data_dir (or --data-dir) to another directory",
                    path.display()
                ),
            ),
        }
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

/// Whether `path` is a history database SQLite can open: a readable file
/// that is empty or starts with SQLite's header.
fn sqlite_file(path: &Path) -> Result<(), String> {
    use std::io::Read;
    let mut file = std::fs::File::open(path).map_err(|e| format!("cannot be opened: {e}"))?;
    if !file.metadata().is_ok_and(|m| m.is_file()) {
        return Err("is not a file".to_owned());
    }
    let mut header = [0u8; 16];
    let read = file
        .read(&mut header)
        .map_err(|e| format!("cannot be read: {e}"))?;
    if read == 0 || header == *b"SQLite format 3\0" {
        Ok(())
    } else {
        Err("is not an SQLite database".to_owned())
    }
}

/// The nearest existing directory above `path`, if this user may write in it.
fn writable_ancestor(path: &Path) -> Result<PathBuf, String> {
    let dir = path
        .ancestors()
        .skip(1)
        // A relative path's last ancestor is "": the working directory.
        .map(|dir| {
            if dir.as_os_str().is_empty() {
                Path::new(".")
            } else {
                dir
            }
        })
        .find(|dir| std::fs::symlink_metadata(dir).is_ok())
        .ok_or_else(|| "no directory above it exists".to_owned())?;
    if !dir.is_dir() {
        return Err(format!("{} is not a directory", dir.display()));
    }
    if !access(dir, libc::W_OK | libc::X_OK) {
        return Err(format!("{} is not writable", dir.display()));
    }
    Ok(dir.to_owned())
}

/// Whether this user may use `path` as `mode` (`access(2)`).
fn access(path: &Path, mode: libc::c_int) -> bool {
    let Ok(c_path) = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: `c_path` is a valid NUL-terminated string for the call.
    unsafe { libc::access(c_path.as_ptr(), mode) == 0 }
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
    let path = cli::daemon_socket(&config.socket.path);
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
