//! Configuration: built-in defaults, overridden by the TOML file, overridden
//! by environment variables, overridden by flags.
//!
//! Every key is documented in `docs/configuration.md`. Errors name the key
//! (or variable, or flag) and what would be accepted, and make the binary
//! exit with status 2.

use std::{
    net::{IpAddr, Ipv4Addr, SocketAddr},
    path::{Path, PathBuf},
    time::Duration,
};

use serde::Deserialize;
use switchboard_chat::{
    ApprovalSettings, ChatSettings, Durability, NameRules, PushMode, PushSettings, SYSTEM_NICK,
    irc::{DEFAULT_OBSERVER_NICK, FloodSettings, IrcSettings, Sasl, Tls},
};
use switchboard_docs::DocsConfig;
use switchboard_toolkit::{
    CatalogConfig, CommandsConfig, PromptConfig, TemplateConfig, Toolkit, ToolkitConfig,
};
use switchboard_toolset::{Rules, TokenSpec};

use crate::cli::ServeArgs;

/// The bearer token variable used when `http.token_env` is not set.
pub const DEFAULT_TOKEN_ENV: &str = "SWITCHBOARD_HTTP_TOKEN";
/// `http.tokens[].sends_per_minute` when unset.
const DEFAULT_SENDS_PER_MINUTE: u32 = 120;
/// The shortest secret a token may have.
pub const MIN_SECRET_CHARS: usize = 16;
/// The toolsets a token's `tools` may name.
const TOOLSETS: &[&str] = &[
    "chat",
    "docs",
    "catalog",
    "templates",
    "commands",
    "prompts",
];
const MAX_TEXT_LIMIT: usize = 1024 * 1024;

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// What the server tells clients at `initialize` about how to use its
    /// tools; the chat toolset's own guidance when unset.
    pub instructions: Option<String>,
    /// Directory of the history database.
    pub data_dir: Option<PathBuf>,
    /// Keep history in memory only.
    pub ephemeral: bool,
    /// Serve on stdin/stdout (set by `--stdio`; not a file key).
    #[serde(skip)]
    pub stdio: bool,
    pub log: LogConfig,
    pub http: HttpConfig,
    pub socket: SocketConfig,
    pub chat: ChatConfig,
    pub docs: DocsConfig,
    pub catalog: Vec<CatalogConfig>,
    pub templates: Vec<TemplateConfig>,
    pub commands: Option<CommandsConfig>,
    pub prompts: Vec<PromptConfig>,
    /// Where relative paths in the config start: the config file's
    /// directory, else the working directory.
    #[serde(skip)]
    pub base_dir: PathBuf,
    /// The config file (alone or merged over a profile), for errors to
    /// point into.
    #[serde(skip)]
    overlay: Option<Overlay>,
}

/// A config file: how errors name it (`over.toml`, or `over.toml over
/// --profile imqueue` when merged over a profile), and its text, to find a
/// key's line in.
#[derive(Debug, Clone, Default)]
struct Overlay {
    origin: String,
    text: String,
}

impl Config {
    /// The sections of `other` that differ from this config's, HTTP tokens
    /// aside: what a reload cannot apply in place.
    pub fn changed_besides_tokens(&self, other: &Config) -> Vec<&'static str> {
        let without_tokens = |http: &HttpConfig| HttpConfig {
            tokens: Vec::new(),
            ..http.clone()
        };
        let sections: [(&'static str, bool); 12] = [
            ("instructions", self.instructions == other.instructions),
            ("data_dir", self.data_dir == other.data_dir),
            ("ephemeral", self.ephemeral == other.ephemeral),
            ("[log]", self.log == other.log),
            (
                "[http] (besides tokens)",
                without_tokens(&self.http) == without_tokens(&other.http),
            ),
            ("[socket]", self.socket == other.socket),
            ("[chat]", self.chat == other.chat),
            ("[docs]", self.docs == other.docs),
            ("[[catalog]]", self.catalog == other.catalog),
            ("[[templates]]", self.templates == other.templates),
            ("[commands]", self.commands == other.commands),
            ("[[prompts]]", self.prompts == other.prompts),
        ];
        sections
            .into_iter()
            .filter(|(_, same)| !same)
            .map(|(name, _)| name)
            .collect()
    }
}

/// The relay socket for `switchboard shim`, `tail` and `say`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SocketConfig {
    pub enabled: bool,
    /// The socket's path; the standard per-user path when unset.
    pub path: Option<PathBuf>,
    /// Seconds one line (a reply, an event) may wait for its client to take
    /// it before the connection is closed; 0 waits for good.
    pub write_timeout_s: u64,
}

impl Default for SocketConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            path: None,
            write_timeout_s: 60,
        }
    }
}

impl SocketConfig {
    /// `write_timeout_s`; `None` for 0, which waits for good.
    pub fn write_timeout(&self) -> Option<Duration> {
        unless_zero(self.write_timeout_s)
    }
}

/// A setting in seconds where 0 means "no limit".
fn unless_zero(seconds: u64) -> Option<Duration> {
    (seconds > 0).then(|| Duration::from_secs(seconds))
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// A tracing filter such as `info` or `switchboard=debug,info`.
    pub level: String,
    /// Log file; stderr when unset.
    pub file: Option<PathBuf>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpConfig {
    pub enabled: bool,
    #[serde(deserialize_with = "deserialize_listen")]
    pub listen: SocketAddr,
    /// Host names accepted in the `Host` header besides loopback names and
    /// the listen address.
    pub allowed_hosts: Vec<String>,
    /// Origins (`scheme://host[:port]`) accepted besides those of allowed hosts.
    pub allowed_origins: Vec<String>,
    /// The environment variable holding the bearer token.
    pub token_env: String,
    /// Allow a non-loopback listen address without a token.
    pub insecure_no_auth: bool,
    /// Serve the legacy HTTP+SSE endpoints (`/sse`, `/messages/`).
    pub legacy_sse: bool,
    /// Most legacy SSE sessions (`GET /sse` streams) open at once.
    pub max_sse_sessions: usize,
    /// Seconds a legacy SSE session may pass without a message either way
    /// (a POST from the client, a reply or notification to it) before it is
    /// closed; 0 never closes one.
    pub sse_idle_timeout_s: u64,
    /// Seconds a response (a reply, an event stream) may wait for the client
    /// to take any of it before the connection is closed; 0 waits for good.
    pub write_timeout_s: u64,
    /// Most requests to `/mcp` and the web view in progress at once (each
    /// from its arrival until its response, JSON or event stream, is done:
    /// an open page's live stream holds one).
    pub max_streams: usize,
    /// Serve the web view at `/` (with chat on).
    pub web: bool,
    /// `[[http.tokens]]`: one token per agent or person.
    pub tokens: Vec<TokenConfig>,
}

/// `[[http.tokens]]`: a token for one agent or person, and what it allows.
/// The secret itself is never in the file: it is read from `secret_env` or
/// `secret_file`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenConfig {
    /// Its name in logs and errors.
    pub name: String,
    /// The environment variable holding the secret.
    pub secret_env: Option<String>,
    /// The file holding the secret (its first line).
    pub secret_file: Option<PathBuf>,
    /// Nicks (globs) it may speak as; just its name when unset.
    pub nicks: Option<Vec<String>>,
    /// Channels (globs) it may read and write.
    #[serde(default = "every_channel")]
    pub channels: Vec<String>,
    /// Toolsets it may use (`chat`, `docs`, ...); all when unset.
    pub tools: Option<Vec<String>>,
    /// Messages it may send a minute.
    #[serde(default = "default_sends_per_minute")]
    pub sends_per_minute: u32,
    /// The holder is a person (their messages count as a person's).
    #[serde(default)]
    pub human: bool,
}

fn every_channel() -> Vec<String> {
    vec!["*".into()]
}

fn default_sends_per_minute() -> u32 {
    DEFAULT_SENDS_PER_MINUTE
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ChatConfig {
    pub enabled: bool,
    pub backend: Backend,
    /// The agent's nick for `serve --stdio` (also `--nick`, `SWITCHBOARD_NICK`).
    pub nick: Option<String>,
    pub max_text_bytes: usize,
    pub durability: Durability,
    pub push: PushConfig,
    pub approvals: Option<ApprovalsConfig>,
    pub irc: IrcConfig,
}

/// `[chat.push]`: what is pushed into sessions that can be woken.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PushConfig {
    pub mode: PushMode,
    pub per_minute: u32,
    pub coalesce_ms: u64,
    /// Pause a channel's pushes after this many agent messages in a row
    /// (0: never).
    pub loop_messages: usize,
    pub loop_window_s: u64,
}

impl Default for PushConfig {
    fn default() -> Self {
        let push = PushSettings::default();
        Self {
            mode: push.mode,
            per_minute: push.per_minute,
            coalesce_ms: push.coalesce.as_millis() as u64,
            loop_messages: push.loop_messages,
            loop_window_s: push.loop_window.as_secs(),
        }
    }
}

/// `[chat.approvals]`: permission prompts answered in a channel.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalsConfig {
    pub channel: String,
    /// Nicks that may answer; any human when empty.
    #[serde(default)]
    pub approvers: Vec<String>,
    /// IRC services accounts that may answer, instead of nicks: a reply
    /// counts only when the network vouches (IRCv3 `account-tag`) that its
    /// sender is logged in as one of them.
    #[serde(default)]
    pub approver_accounts: Vec<String>,
    #[serde(default = "default_approval_timeout")]
    pub timeout_s: u64,
}

fn default_approval_timeout() -> u64 {
    600
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// The in-process hub (`TRANSPORT_TYPE=memory`).
    #[serde(alias = "memory")]
    Local,
    Irc,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IrcConfig {
    pub server: Option<String>,
    pub port: u16,
    pub tls: bool,
    /// PEM file of the CA that signed the server's certificate; the system's
    /// roots when unset.
    pub ca_file: Option<PathBuf>,
    /// The observer's nick. Unset: `switchboard`, or when that is taken a
    /// free variant naming this host; set: a nick taken at start is an error.
    pub nick: Option<String>,
    pub username: String,
    pub realname: String,
    /// Environment variable holding the server password (`PASS`).
    pub password_env: Option<String>,
    /// SASL PLAIN account of the observer.
    pub sasl_account: Option<String>,
    /// Environment variable holding the SASL password.
    pub sasl_password_env: String,
    /// Channels to join at start.
    pub channels: Vec<String>,
    pub sender_idle_s: u64,
    pub send_timeout_s: u64,
    pub register_timeout_s: u64,
    pub flood_burst: u32,
    pub flood_per_second: f64,
    pub nick_in_use: NickInUse,
}

/// What a sender does when its nick is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NickInUse {
    /// The send fails with a tool error saying the nick is taken.
    Error,
    /// The sender becomes `nick_` (then `nick__`, …).
    Suffix,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            level: "info,rmcp=warn".into(),
            file: None,
        }
    }
}

impl HttpConfig {
    /// `sse_idle_timeout_s`; `None` for 0, which never ends an idle stream.
    pub fn sse_idle_timeout(&self) -> Option<Duration> {
        unless_zero(self.sse_idle_timeout_s)
    }

    /// `write_timeout_s`; `None` for 0, which waits for good.
    pub fn write_timeout(&self) -> Option<Duration> {
        unless_zero(self.write_timeout_s)
    }
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            listen: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 8090),
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            token_env: DEFAULT_TOKEN_ENV.into(),
            insecure_no_auth: false,
            legacy_sse: true,
            max_sse_sessions: 512,
            sse_idle_timeout_s: 300,
            write_timeout_s: 60,
            max_streams: 2048,
            web: true,
            tokens: Vec::new(),
        }
    }
}

impl Default for ChatConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            backend: Backend::Local,
            nick: None,
            max_text_bytes: 32 * 1024,
            durability: Durability::Full,
            push: PushConfig::default(),
            approvals: None,
            irc: IrcConfig::default(),
        }
    }
}

impl Default for IrcConfig {
    fn default() -> Self {
        let flood = FloodSettings::default();
        Self {
            server: None,
            port: 6667,
            tls: false,
            ca_file: None,
            nick: None,
            username: "switchboard".into(),
            realname: "switchboard MCP bridge".into(),
            password_env: None,
            sasl_account: None,
            sasl_password_env: "IRC_SASL_PASSWORD".into(),
            channels: Vec::new(),
            sender_idle_s: 600,
            send_timeout_s: 15,
            register_timeout_s: 30,
            flood_burst: flood.burst,
            flood_per_second: flood.per_second,
            nick_in_use: NickInUse::Error,
        }
    }
}

/// A configuration problem; the binary exits with status 2.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read the config file {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("config file {path}: {message}")]
    Parse { path: String, message: String },
    #[error("environment variable {var}={value:?}: {problem}")]
    Env {
        var: &'static str,
        value: String,
        problem: String,
    },
    #[error("{key}: {problem}")]
    Invalid { key: String, problem: String },
    /// `given` is the profile as the user gave it: `--profile imqueue` or
    /// `SWITCHBOARD_PROFILE="imqueue"`.
    #[error("{given}: {problem}")]
    Profile { given: String, problem: String },
}

/// Whether `name` may name a token: 1 to 64 characters, no spaces.
pub fn is_token_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && !name.chars().any(|c| c.is_control() || c.is_whitespace())
}

/// Reads one `[[http.tokens]]` entry's secret and checks its rules; errors
/// name `key`'s fields.
fn token_spec(
    token: &TokenConfig,
    key: &str,
    base_dir: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<TokenSpec, ConfigError> {
    let name = token.name.trim();
    if !is_token_name(name) {
        return Err(invalid(
            format!("{key}.name"),
            format!(
                "{:?} is not a token name; use 1 to 64 characters without spaces",
                token.name
            ),
        ));
    }
    let secret = token_secret(token, name, key, base_dir, env)?;
    let nicks = token.nicks.clone().unwrap_or_else(|| vec![name.to_owned()]);
    check_token_rules(token, name, &nicks, key)?;
    Ok(TokenSpec {
        name: name.to_owned(),
        secret,
        rules: Rules {
            nicks,
            channels: token.channels.clone(),
            toolsets: token.tools.clone(),
            sends_per_minute: Some(token.sends_per_minute),
            human: token.human,
            revoked: false,
        },
    })
}

/// The secret of the token `name`, from its `secret_env` or `secret_file`
/// (exactly one), long enough to be unguessable.
fn token_secret(
    token: &TokenConfig,
    name: &str,
    key: &str,
    base_dir: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<String, ConfigError> {
    let secret = match (&token.secret_env, &token.secret_file) {
        (Some(var), None) => env(var).filter(|s| !s.trim().is_empty()).ok_or_else(|| {
            invalid(
                format!("{key}.secret_env"),
                format!("the environment variable {var} is not set; `switchboard token new {name}` makes a secret"),
            )
        })?,
        (None, Some(file)) => {
            let path = base_dir.join(file);
            std::fs::read_to_string(&path)
                .map_err(|e| invalid(format!("{key}.secret_file"), format!("cannot read {}: {e}", path.display())))?
                .lines()
                .next()
                .unwrap_or("")
                .to_owned()
        }
        _ => {
            return Err(invalid(
                key,
                format!("the token {name:?} needs exactly one of secret_env and secret_file (never the secret itself)"),
            ));
        }
    };
    let secret = secret.trim().to_owned();
    if secret.chars().count() < MIN_SECRET_CHARS {
        let source = if token.secret_env.is_some() {
            "secret_env"
        } else {
            "secret_file"
        };
        return Err(invalid(
            format!("{key}.{source}"),
            format!(
                "the secret of {name:?} is shorter than {MIN_SECRET_CHARS} characters; `switchboard token new {name}` makes a strong one"
            ),
        ));
    }
    Ok(secret)
}

/// Checks the token `name`'s nicks, channels, toolsets and send rate.
fn check_token_rules(
    token: &TokenConfig,
    name: &str,
    nicks: &[String],
    key: &str,
) -> Result<(), ConfigError> {
    let rules = NameRules::default();
    if nicks.is_empty() {
        return Err(invalid(
            format!("{key}.nicks"),
            format!(
                "an empty list leaves {name:?} no nick to speak or wait as; list at least one, or leave the key out for the token's name"
            ),
        ));
    }
    if token.channels.is_empty() {
        return Err(invalid(
            format!("{key}.channels"),
            format!(
                "an empty list opens no channel to {name:?}; list patterns such as \"#team-*\", or leave the key out for every channel"
            ),
        ));
    }
    for nick in nicks {
        if rules.nick(&nick.replace(['*', '?'], "a")).is_err() {
            return Err(invalid(
                format!("{key}.nicks"),
                format!("{nick:?} is not a nick or a nick pattern (`*` and `?` are wildcards)"),
            ));
        }
    }
    for channel in &token.channels {
        let sample = channel.replace(['*', '?'], "a");
        if channel != "*" && !(channel.starts_with(['#', '&']) && rules.channel(&sample).is_ok()) {
            return Err(invalid(
                format!("{key}.channels"),
                format!(
                    "{channel:?} is not a channel or a channel pattern such as \"#team-*\" or \"*\""
                ),
            ));
        }
    }
    if let Some(unknown) = token
        .tools
        .iter()
        .flatten()
        .find(|t| !TOOLSETS.contains(&t.as_str()))
    {
        return Err(invalid(
            format!("{key}.tools"),
            format!(
                "{unknown:?} is not a toolset; use some of {}",
                TOOLSETS.join(", ")
            ),
        ));
    }
    if token.sends_per_minute == 0 {
        return Err(invalid(
            format!("{key}.sends_per_minute"),
            "0 would forbid every message; leave chat out of tools instead, or allow at least 1",
        ));
    }
    Ok(())
}

/// An address to listen on (`--http`, `SWITCHBOARD_HTTP`, `http.listen`):
/// an IP address and a port. What is wrong with anything else is said.
pub fn parse_listen(text: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = text.parse() {
        return Ok(addr);
    }
    if let Ok(ip) = text.parse::<std::net::IpAddr>() {
        let ip = SocketAddr::new(ip, 8090);
        return Err(format!("{text} has no port; add one, as in {ip}"));
    }
    let host = text.rsplit_once(':').map_or(text, |(host, _)| host);
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    if bare.parse::<std::net::IpAddr>().is_ok() {
        return Err(format!(
            "the port of {text} is not a number from 0 to 65535"
        ));
    }
    if !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || ".-".contains(c))
    {
        return Err(format!(
            "{text} names a host; give an IP address and a port, such as 127.0.0.1:8090 or [::1]:8090 (switchboard does not look names up to listen)"
        ));
    }
    Err(format!(
        "{text} is not an IP address and a port, such as 127.0.0.1:8090"
    ))
}

fn deserialize_listen<'de, D: serde::Deserializer<'de>>(de: D) -> Result<SocketAddr, D::Error> {
    let text = String::deserialize(de)?;
    parse_listen(&text).map_err(serde::de::Error::custom)
}

fn invalid(key: impl Into<String>, problem: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key: key.into(),
        problem: problem.into(),
    }
}

/// Checks `[chat.irc]`'s nick, channels, username and realname.
fn check_irc_names(irc: &IrcConfig) -> Result<(), ConfigError> {
    let rules = NameRules::default();
    if let Some(nick) = &irc.nick {
        rules
            .nick(nick)
            .map_err(|e| invalid("chat.irc.nick", e.to_string()))?;
    }
    for channel in &irc.channels {
        rules
            .channel(channel)
            .map_err(|e| invalid("chat.irc.channels", e.to_string()))?;
    }
    if irc.username.is_empty() || irc.username.contains([' ', '@', '\r', '\n', '\0']) {
        return Err(invalid(
            "chat.irc.username",
            "use a short word without spaces or @",
        ));
    }
    if irc.realname.contains(['\r', '\n', '\0']) {
        return Err(invalid("chat.irc.realname", "must not contain line breaks"));
    }
    Ok(())
}

/// Checks `[chat.irc]`'s port, timeouts and flood limits: what can be judged
/// without the environment, whichever backend is in use.
fn check_irc_limits(irc: &IrcConfig) -> Result<(), ConfigError> {
    if irc.port == 0 {
        return Err(invalid("chat.irc.port", "0 is not a port; use 1 to 65535"));
    }
    for (key, value) in [
        ("chat.irc.sender_idle_s", irc.sender_idle_s),
        ("chat.irc.send_timeout_s", irc.send_timeout_s),
        ("chat.irc.register_timeout_s", irc.register_timeout_s),
    ] {
        if value == 0 {
            return Err(invalid(key, "must be at least 1 second"));
        }
    }
    if irc.flood_burst == 0 {
        return Err(invalid("chat.irc.flood_burst", "must be at least 1 line"));
    }
    if !irc.flood_per_second.is_finite() || irc.flood_per_second <= 0.0 {
        return Err(invalid(
            "chat.irc.flood_per_second",
            "must be a number above 0 (lines a second)",
        ));
    }
    Ok(())
}

/// An error naming `key` unless `value` lies in `range`.
fn within<T: PartialOrd + std::fmt::Display>(
    key: &str,
    value: T,
    range: std::ops::RangeInclusive<T>,
) -> Result<(), ConfigError> {
    switchboard_toolset::ConfigError::check_range(key, value, range, "")
        .map_err(|e| invalid(e.key(), e.message()))
}

/// `[chat.push]`, checked.
fn push_settings(push: &PushConfig) -> Result<PushSettings, ConfigError> {
    within("chat.push.per_minute", push.per_minute, 1..=600)?;
    within("chat.push.coalesce_ms", push.coalesce_ms, 0..=10_000)?;
    if push.loop_messages == 1 || push.loop_messages > 1000 {
        return Err(invalid(
            "chat.push.loop_messages",
            format!(
                "must be 0 (off) or between 2 and 1000 (got {})",
                push.loop_messages
            ),
        ));
    }
    within("chat.push.loop_window_s", push.loop_window_s, 1..=86_400)?;
    Ok(PushSettings {
        mode: push.mode,
        per_minute: push.per_minute,
        coalesce: Duration::from_millis(push.coalesce_ms),
        loop_messages: push.loop_messages,
        loop_window: Duration::from_secs(push.loop_window_s),
    })
}

/// `[chat.approvals]`, checked: its approvers are nicks, or accounts where
/// the `backend` has them.
fn approval_settings(
    a: &ApprovalsConfig,
    backend: Backend,
) -> Result<ApprovalSettings, ConfigError> {
    let rules = NameRules::default();
    rules
        .channel(&a.channel)
        .map_err(|e| invalid("chat.approvals.channel", e.to_string()))?;
    for nick in &a.approvers {
        rules
            .nick(nick)
            .map_err(|e| invalid("chat.approvals.approvers", e.to_string()))?;
    }
    if !a.approver_accounts.is_empty() {
        const KEY: &str = "chat.approvals.approver_accounts";
        if !a.approvers.is_empty() {
            return Err(invalid(
                KEY,
                "set either approvers (nicks) or approver_accounts, not both",
            ));
        }
        if backend != Backend::Irc {
            return Err(invalid(
                KEY,
                "accounts are an IRC network's (its services); the local hub has none: list nicks in approvers, with a token per person",
            ));
        }
        if let Some(bad) = a
            .approver_accounts
            .iter()
            .find(|a| a.is_empty() || a.contains(|c: char| c.is_whitespace() || c.is_control()))
        {
            return Err(invalid(KEY, format!("{bad:?} is not an account name")));
        }
    }
    within("chat.approvals.timeout_s", a.timeout_s, 1..=86_400)?;
    Ok(ApprovalSettings {
        channel: a.channel.clone(),
        approvers: a.approvers.clone(),
        approver_accounts: a.approver_accounts.clone(),
        timeout: Duration::from_secs(a.timeout_s),
    })
}

/// What is wrong with `server` as `chat.irc.server` (a host name or an
/// address, nothing else), if anything.
fn server_problem(server: &str) -> Option<String> {
    let host_and_port = server.rsplit_once(':').is_some_and(|(host, port)| {
        !host.contains(':') && port.bytes().all(|b| b.is_ascii_digit())
    });
    if server.contains("://") || server.contains('/') || host_and_port {
        Some(format!(
            "{server:?} is not a host name: give the host alone (e.g. irc.libera.chat), the port in chat.irc.port (IRC_PORT) and TLS in chat.irc.tls"
        ))
    } else if server.chars().any(|c| c.is_whitespace() || c.is_control()) {
        Some(format!(
            "{server:?} has spaces in it; give the host name alone"
        ))
    } else {
        None
    }
}

/// Why `filter` is not a log filter we take: levels and `target=level`
/// pairs, comma-separated. A bare word is a level or a mistake (`warning`):
/// tracing would read it as a target and log nothing else, errors included.
fn log_filter_problem(filter: &str) -> Option<String> {
    let bare_word_not_a_level = filter.split(',').map(str::trim).find(|directive| {
        !directive.contains('=')
            && directive
                .parse::<tracing_subscriber::filter::LevelFilter>()
                .is_err()
    });
    if bare_word_not_a_level.is_none() && tracing_subscriber::EnvFilter::try_new(filter).is_ok() {
        return None;
    }
    Some(format!(
        "{filter:?} is not a log filter; use error, warn, info, debug, trace or off, or target=level pairs"
    ))
}

/// The process's environment variable `name`; set to the empty string, it
/// counts as unset (`SWITCHBOARD_DATA_DIR= switchboard serve` is the
/// default data directory, not the working directory).
pub fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|value| !value.is_empty())
}

impl Config {
    /// Builds the configuration for `serve` from every layer.
    pub fn load(
        args: &ServeArgs,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let config = Self::layered(args, env)?;
        config.validate(env).map_err(|e| config.placed(e))?;
        Ok(config)
    }

    /// `error`, naming the config file and the key's line in it when the
    /// key is set there (as a parse error of the file does).
    fn placed(&self, error: ConfigError) -> ConfigError {
        match (error, &self.overlay) {
            (ConfigError::Invalid { key, problem }, Some(overlay)) => {
                let place = line_of(&overlay.text, &key)
                    .map(|n| format!(" (line {n})"))
                    .unwrap_or_default();
                ConfigError::Parse {
                    path: overlay.origin.clone(),
                    message: format!("{key}{place}: {problem}"),
                }
            }
            (error, _) => error,
        }
    }

    /// Every layer, unchecked beyond parsing: for commands that only need to
    /// know where things are (`switchboard backup` needs the data dir, not
    /// the daemon's secrets).
    pub fn layered(
        args: &ServeArgs,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let file = args
            .config
            .clone()
            .or_else(|| env("SWITCHBOARD_CONFIG").map(PathBuf::from));
        // Named as the user gave it, in errors and in config file origins.
        let profile = match (&args.profile, env("SWITCHBOARD_PROFILE")) {
            (Some(name), _) => Some((name.clone(), format!("--profile {name}"))),
            (None, Some(name)) => Some((name.clone(), format!("SWITCHBOARD_PROFILE={name:?}"))),
            (None, None) => None,
        };
        let mut config = match (&profile, &file) {
            (None, None) => Self::default(),
            (None, Some(path)) => Self::from_file(path)?,
            (Some((name, given)), file) => Self::from_profile(name, given, file.as_deref())?,
        };
        config.base_dir = match file.as_deref().and_then(Path::parent) {
            Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
            _ => PathBuf::from("."),
        };
        config.apply_env(env)?;
        config.apply_flags(args);
        Ok(config)
    }

    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        let mut config = Self::from_toml(&text).map_err(|message| ConfigError::Parse {
            path: path.display().to_string(),
            message,
        })?;
        // Its checks name the file and the key's line, as over a profile.
        config.overlay = Some(Overlay {
            origin: path.display().to_string(),
            text,
        });
        Ok(config)
    }

    /// The embedded profile `name` (`given` as the user gave it: `--profile
    /// imqueue`), with the config file (if any) merged over it.
    fn from_profile(name: &str, given: &str, file: Option<&Path>) -> Result<Self, ConfigError> {
        let mut table = crate::profiles::table(name).map_err(|problem| ConfigError::Profile {
            given: given.to_owned(),
            problem,
        })?;
        let mut origin = given.to_owned();
        let mut file_text = None;
        if let Some(path) = file {
            let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                path: path.display().to_string(),
                source,
            })?;
            let over = text
                .parse()
                .map_err(|e: toml::de::Error| ConfigError::Parse {
                    path: path.display().to_string(),
                    message: e.to_string().trim_end().to_owned(),
                })?;
            crate::profiles::merge(&mut table, over);
            origin = format!("{} over {origin}", path.display());
            file_text = Some(text);
        }
        // Deserialised from text, not from the table, so that an error can
        // be traced to its key and line.
        let merged = toml::to_string(&table).map_err(|e| ConfigError::Parse {
            path: origin.clone(),
            message: e.to_string(),
        })?;
        let mut config: Self = toml::from_str(&merged).map_err(|e| ConfigError::Parse {
            path: origin.clone(),
            message: merged_error(&merged, file_text.as_deref(), &e),
        })?;
        config.overlay = file_text.map(|text| Overlay { origin, text });
        Ok(config)
    }

    pub fn from_toml(text: &str) -> Result<Self, String> {
        toml::from_str(text).map_err(|e| in_toml_words(e.to_string().trim_end()))
    }

    /// Applies the environment variables, including the original bridge's
    /// `TRANSPORT_TYPE`, `MCP_PORT`, `IRC_SERVER`, `IRC_PORT` and `IRC_NICK`.
    pub fn apply_env(&mut self, env: &dyn Fn(&str) -> Option<String>) -> Result<(), ConfigError> {
        let bad = |var: &'static str, value: &str, problem: &str| ConfigError::Env {
            var,
            value: value.to_owned(),
            problem: problem.to_owned(),
        };
        if let Some(v) = env("SWITCHBOARD_DATA_DIR") {
            // A directory to keep the history in, as `--data-dir` says.
            self.data_dir = Some(PathBuf::from(v));
            self.ephemeral = false;
        }
        if let Some(v) = env("SWITCHBOARD_HTTP") {
            self.http.listen = parse_listen(&v).map_err(|e| bad("SWITCHBOARD_HTTP", &v, &e))?;
        }
        if let Some(v) = env("MCP_PORT") {
            let port: u16 = v
                .parse()
                .map_err(|_| bad("MCP_PORT", &v, "expected a port number from 0 to 65535"))?;
            self.http.listen.set_port(port);
        }
        if let Some(v) = env("TRANSPORT_TYPE") {
            self.chat.backend = match v.to_ascii_lowercase().as_str() {
                "memory" | "local" => Backend::Local,
                "irc" => Backend::Irc,
                _ => {
                    return Err(bad(
                        "TRANSPORT_TYPE",
                        &v,
                        "expected memory or local (the local hub), or irc",
                    ));
                }
            };
        }
        if let Some(v) = env("IRC_SERVER") {
            self.chat.irc.server = Some(v);
        }
        if let Some(v) = env("IRC_PORT") {
            self.chat.irc.port = v
                .parse()
                .ok()
                .filter(|&port: &u16| port != 0)
                .ok_or_else(|| bad("IRC_PORT", &v, "expected a port number from 1 to 65535"))?;
        }
        if let Some(v) = env("IRC_NICK") {
            self.chat.irc.nick = Some(v);
        }
        if let Some(v) = env("SWITCHBOARD_NICK") {
            self.chat.nick = Some(v);
        }
        if let Some(v) = env("SWITCHBOARD_LOG") {
            log_filter_problem(&v).map_or(Ok(()), |p| Err(bad("SWITCHBOARD_LOG", &v, &p)))?;
            self.log.level = v;
        }
        if let Some(v) = env("SWITCHBOARD_LOG_FILE") {
            self.log.file = Some(PathBuf::from(v));
        }
        Ok(())
    }

    pub fn apply_flags(&mut self, args: &ServeArgs) {
        if args.stdio {
            self.stdio = true;
            // One client on stdin/stdout; a daemon's port and socket are not
            // ours to take.
            self.http.enabled = false;
            self.socket.enabled = false;
        }
        if let Some(addr) = args.http {
            self.http.enabled = true;
            self.http.listen = addr;
        }
        if args.no_http {
            self.http.enabled = false;
        }
        if let Some(path) = &args.socket {
            self.socket.enabled = true;
            self.socket.path = Some(path.clone());
        }
        if args.no_socket {
            self.socket.enabled = false;
        }
        if args.insecure_no_auth {
            self.http.insecure_no_auth = true;
        }
        if let Some(dir) = &args.data_dir {
            self.data_dir = Some(dir.clone());
            self.ephemeral = false;
        }
        if args.ephemeral {
            self.ephemeral = true;
        }
        if let Some(file) = &args.log_file {
            self.log.file = Some(file.clone());
        }
        if let Some(nick) = &args.nick {
            self.chat.nick = Some(nick.clone());
        }
        if args.no_web {
            self.http.web = false;
        }
    }

    fn validate(&self, env: &dyn Fn(&str) -> Option<String>) -> Result<(), ConfigError> {
        if !self.stdio && !self.http.enabled && !self.socket.enabled {
            return Err(invalid(
                "http.enabled",
                "nothing to serve: HTTP and the relay socket are off and --stdio was not given",
            ));
        }
        if let Some(problem) = log_filter_problem(&self.log.level) {
            return Err(invalid("log.level", problem));
        }
        // sun_path holds 108 bytes, the terminating NUL included.
        if let Some(path) = self.socket.path.as_ref().filter(|_| self.socket.enabled)
            && path.as_os_str().len() > 107
        {
            return Err(invalid(
                "socket.path",
                format!(
                    "{} is {} bytes long, over the 107 a Unix socket path may have; choose a shorter path (--socket)",
                    path.display(),
                    path.as_os_str().len()
                ),
            ));
        }
        let tokens = self.tokens(env)?;
        if self.http.enabled
            && !self.http.listen.ip().is_loopback()
            && !self.http.insecure_no_auth
            && tokens.is_empty()
        {
            return Err(invalid(
                "http.listen",
                format!(
                    "{} is not a loopback address; configure [[http.tokens]], or set a bearer token in the environment variable {} (http.token_env), or pass --insecure-no-auth",
                    self.http.listen, self.http.token_env
                ),
            ));
        }
        if self.http.max_sse_sessions == 0 {
            return Err(invalid(
                "http.max_sse_sessions",
                "must be at least 1; to serve no legacy SSE, set http.legacy_sse = false",
            ));
        }
        if self.http.max_streams == 0 {
            return Err(invalid(
                "http.max_streams",
                "must be at least 1 (Streamable HTTP exchanges at once)",
            ));
        }
        for host in &self.http.allowed_hosts {
            if host.is_empty() || host.contains(['/', ' ', ',']) {
                return Err(invalid(
                    "http.allowed_hosts",
                    format!(
                        "{host:?} is not a host name; write entries such as \"mcp.example.com\""
                    ),
                ));
            }
        }
        for origin in &self.http.allowed_origins {
            // What a browser sends: a scheme and a host (and port), no path
            // (a trailing `/` is forgiven).
            let bare = origin.strip_suffix('/').unwrap_or(origin);
            let host = bare
                .strip_prefix("http://")
                .or_else(|| bare.strip_prefix("https://"));
            if host.is_none_or(|h| h.is_empty() || h.contains(['/', '?', '#', ' ', ',', '*'])) {
                return Err(invalid(
                    "http.allowed_origins",
                    format!(
                        "{origin:?} is not an origin (a scheme and a host, no path); write entries such as \"https://app.example.com\""
                    ),
                ));
            }
        }
        self.validate_chat()?;
        if self.chat.enabled && self.chat.backend == Backend::Irc {
            self.validate_irc(env)?;
        } else {
            // Unused until the backend is switched, but a mistake all the same.
            check_irc_limits(&self.chat.irc)?;
        }
        self.docs
            .validate()
            .map_err(|e| invalid(e.key(), e.message()))?;
        Ok(())
    }

    /// Builds the `[[catalog]]`, `[[templates]]`, `[commands]` and
    /// `[[prompts]]` sections. Building them is what checks them, so it is
    /// done once, by `serve`, before anything is opened or started.
    pub fn build_toolkit(&self) -> Result<Toolkit, ConfigError> {
        ToolkitConfig {
            catalog: self.catalog.clone(),
            templates: self.templates.clone(),
            commands: self.commands.clone(),
            prompts: self.prompts.clone(),
        }
        .build(&self.base_dir)
        .map_err(|e| self.placed(invalid(e.key(), e.message())))
    }

    /// The chat toolset's settings, checked: nicks and channels against the
    /// naming rules every network accepts, limits within their ranges.
    pub fn chat_settings(&self) -> Result<ChatSettings, ConfigError> {
        let chat = &self.chat;
        let rules = NameRules::default();
        within(
            "chat.max_text_bytes",
            chat.max_text_bytes,
            1..=MAX_TEXT_LIMIT,
        )?;
        if let Some(nick) = &chat.nick {
            const KEY: &str = "chat.nick (--nick, SWITCHBOARD_NICK)";
            let nick = rules.nick(nick).map_err(|e| invalid(KEY, e.to_string()))?;
            let own = match chat.backend {
                Backend::Local => SYSTEM_NICK,
                Backend::Irc => chat.irc.nick.as_deref().unwrap_or(DEFAULT_OBSERVER_NICK),
            };
            if rules.nick(own).is_ok_and(|own| own.key() == nick.key()) {
                return Err(invalid(
                    KEY,
                    format!(
                        "{} is the nick of switchboard's own notices; choose another",
                        nick.name()
                    ),
                ));
            }
        }
        Ok(ChatSettings {
            max_text_bytes: chat.max_text_bytes,
            push: push_settings(&chat.push)?,
            approvals: chat
                .approvals
                .as_ref()
                .map(|a| approval_settings(a, chat.backend))
                .transpose()?,
        })
    }

    fn validate_chat(&self) -> Result<(), ConfigError> {
        self.chat_settings().map(drop)
    }

    fn validate_irc(&self, env: &dyn Fn(&str) -> Option<String>) -> Result<(), ConfigError> {
        self.irc_settings(env).map(drop)
    }

    /// The IRC backend's settings, with secrets read from the environment.
    pub fn irc_settings(
        &self,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<IrcSettings, ConfigError> {
        let irc = &self.chat.irc;
        let server = irc
            .server
            .clone()
            .filter(|s| !s.trim().is_empty())
            .ok_or_else(|| {
                invalid(
                    "chat.irc.server",
                    "the IRC backend needs a server (or set IRC_SERVER)",
                )
            })?;
        if let Some(problem) = server_problem(&server) {
            return Err(invalid("chat.irc.server", problem));
        }
        check_irc_names(irc)?;
        check_irc_limits(irc)?;
        let secret = |key: &'static str, var: &str| {
            env(var)
                .filter(|v| !v.is_empty())
                .ok_or_else(|| invalid(key, format!("the environment variable {var} is not set")))
        };
        let password = irc
            .password_env
            .as_deref()
            .map(|var| secret("chat.irc.password_env", var))
            .transpose()?;
        let sasl = match &irc.sasl_account {
            Some(account) => Some(Sasl {
                account: account.clone(),
                password: secret("chat.irc.sasl_password_env", &irc.sasl_password_env)?,
            }),
            None => None,
        };
        let tls = if irc.tls {
            Some(
                Tls::new(irc.ca_file.as_deref())
                    .map_err(|e| invalid("chat.irc.ca_file", e.to_string()))?,
            )
        } else {
            None
        };
        Ok(IrcSettings {
            tls,
            password,
            sasl,
            observer_nick: irc
                .nick
                .clone()
                .unwrap_or_else(|| DEFAULT_OBSERVER_NICK.into()),
            observer_nick_configured: irc.nick.is_some(),
            username: irc.username.clone(),
            realname: irc.realname.clone(),
            channels: irc.channels.clone(),
            sender_idle: Duration::from_secs(irc.sender_idle_s),
            send_timeout: Duration::from_secs(irc.send_timeout_s),
            register_timeout: Duration::from_secs(irc.register_timeout_s),
            flood: FloodSettings {
                burst: irc.flood_burst,
                per_second: irc.flood_per_second,
            },
            nick_suffix: irc.nick_in_use == NickInUse::Suffix,
            ..IrcSettings::new(server, irc.port)
        })
    }

    /// The tokens HTTP clients may present, their secrets read: the
    /// `[[http.tokens]]`, and the one in `http.token_env` if it is set,
    /// which may do everything.
    pub fn tokens(
        &self,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Vec<TokenSpec>, ConfigError> {
        let mut specs = Vec::with_capacity(self.http.tokens.len() + 1);
        if let Some(secret) = env(&self.http.token_env).filter(|t| !t.is_empty()) {
            // A header value loses its surrounding spaces on the way in.
            if secret.trim() != secret || secret.contains(|c: char| c.is_control()) {
                return Err(invalid(
                    self.http.token_env.clone(),
                    "the token has spaces at its ends or control characters, which no client can present; set a plain secret (switchboard token new makes one)",
                ));
            }
            if secret.chars().count() < MIN_SECRET_CHARS {
                return Err(invalid(
                    self.http.token_env.clone(),
                    format!(
                        "the token is shorter than {MIN_SECRET_CHARS} characters, which anyone who can reach the port may guess; set a long random one (switchboard token new makes one)"
                    ),
                ));
            }
            specs.push(TokenSpec {
                name: self.http.token_env.clone(),
                secret,
                rules: Rules::unrestricted(),
            });
        }
        for (i, token) in self.http.tokens.iter().enumerate() {
            let spec = token_spec(token, &format!("http.tokens[{i}]"), &self.base_dir, env)?;
            if specs.iter().any(|s| s.name == spec.name) {
                return Err(invalid(
                    format!("http.tokens[{i}].name"),
                    format!("{:?} names two tokens; give each its own name", spec.name),
                ));
            }
            if let Some(twin) = specs.iter().find(|s| s.secret == spec.secret) {
                return Err(invalid(
                    format!("http.tokens[{i}]"),
                    format!(
                        "the token {:?} has the same secret as {:?}; give each its own (switchboard token new {})",
                        spec.name, twin.name, spec.name
                    ),
                ));
            }
            specs.push(spec);
        }
        Ok(specs)
    }

    /// The history database file, or `None` for an in-memory history.
    pub fn history_path(&self, env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
        if self.ephemeral {
            return None;
        }
        let dir = self.data_dir.clone().unwrap_or_else(|| {
            env("XDG_DATA_HOME")
                .map(PathBuf::from)
                .or_else(|| env("HOME").map(|h| Path::new(&h).join(".local/share")))
                .unwrap_or_else(|| PathBuf::from("."))
                .join("switchboard")
        });
        Some(dir.join("history.db"))
    }
}

/// An error in a profile merged with a config file, told by its key, and by
/// its line in the file when the line comes from there: the merged
/// document's own line numbers mean nothing to the user.
/// The line (from 1) of `text`, a TOML file, that sets `key`
/// (`commands.actions[1].argv`): the `key = …` line in its table, or the
/// table's own header; for a key inside a value the file sets whole (an
/// inline value, an entry of an array of tables), the line that starts
/// it. A key of a plain table the file only adds to may be the profile's:
/// no line.
fn line_of(text: &str, key: &str) -> Option<usize> {
    // Each array of tables counts its headers, to name them as keys do.
    let mut arrays: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    let mut table = String::new();
    let mut best: Option<(usize, usize)> = None;
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        let (here, whole) =
            if let Some(name) = line.strip_prefix("[[").and_then(|l| l.split_once("]]")) {
                let name = name.0.trim().to_owned();
                let count = arrays.entry(name.clone()).or_default();
                table = format!("{name}[{count}]");
                *count += 1;
                (table.clone(), true)
            } else if let Some(name) = line.strip_prefix('[').and_then(|l| l.split_once(']')) {
                table = name.0.trim().to_owned();
                (table.clone(), false)
            } else if let Some((name, _)) = line.split_once('=')
                && !line.starts_with('#')
            {
                let name: Vec<&str> = name.trim().split('.').map(str::trim).collect();
                let name = name.join(".");
                if table.is_empty() {
                    (name, true)
                } else {
                    (format!("{table}.{name}"), true)
                }
            } else {
                continue;
            };
        let exact = here == key;
        let within = whole
            && key
                .strip_prefix(here.as_str())
                .is_some_and(|rest| rest.starts_with(['.', '[']));
        // The exact line wins; else the longest key that holds it.
        let rank = if exact { usize::MAX } else { here.len() };
        if (exact || within) && best.is_none_or(|(_, r)| rank > r) {
            best = Some((n + 1, rank));
        }
    }
    best.map(|(n, _)| n)
}

/// serde says which Rust type it wanted (`expected u16`, `expected struct
/// HttpConfig`); whoever writes the file knows TOML's words.
fn in_toml_words(message: &str) -> String {
    const WORDS: &[(&str, &str)] = &[
        (" as i128", ""),
        ("expected u8", "expected a whole number from 0 to 255"),
        ("expected u16", "expected a whole number from 0 to 65535"),
        (
            "expected u32",
            "expected a whole number from 0 to 4294967295",
        ),
        ("expected u64", "expected a whole number, 0 or more"),
        ("expected usize", "expected a whole number, 0 or more"),
        ("expected i32", "expected a whole number"),
        ("expected i64", "expected a whole number"),
        ("expected f32", "expected a number"),
        ("expected f64", "expected a number"),
        (
            "expected a sequence",
            "expected an array (a list of tables is written [[name]], with two brackets)",
        ),
    ];
    let mut message = WORDS
        .iter()
        .fold(message.to_owned(), |m, (rust, toml)| m.replace(rust, toml));
    while let Some(at) = message.find("expected struct ") {
        let name = &message[at + "expected struct ".len()..];
        let end = name
            .find(|c: char| !c.is_ascii_alphanumeric() && c != '_')
            .unwrap_or(name.len());
        let name_end = at + "expected struct ".len() + end;
        message.replace_range(at..name_end, "expected a table");
    }
    message
}

fn merged_error(merged: &str, file: Option<&str>, e: &toml::de::Error) -> String {
    let message = in_toml_words(e.message().trim_end());
    let Some(start) = e.span().map(|span| span.start) else {
        return message;
    };
    let before = merged.get(..start).unwrap_or(merged);
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let line = merged[line_start..].lines().next().unwrap_or("").trim();
    let header = |l: &str| {
        let l = l.trim();
        l.starts_with('[')
            .then(|| l.trim_matches(['[', ']']).trim().to_owned())
    };
    let path = match header(line) {
        Some(table) => table,
        None => {
            let key = line.split_once('=').map_or(line, |(key, _)| key).trim();
            match merged[..line_start].lines().rev().find_map(header) {
                Some(table) => format!("{table}.{key}"),
                None => key.to_owned(),
            }
        }
    };
    let place = file
        .and_then(|text| text.lines().position(|l| l.trim() == line))
        .map(|n| format!(" (line {})", n + 1))
        .unwrap_or_default();
    format!("{path}{place}: {message}")
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn an_irc_server_is_a_host_alone() {
        for ok in [
            "irc.libera.chat",
            "127.0.0.1",
            "::1",
            "2001:db8::1",
            "localhost",
        ] {
            assert_eq!(server_problem(ok), None, "{ok}");
        }
        for bad in [
            "127.0.0.1:6667",
            "irc://irc.example",
            "irc.example/x",
            "irc example",
        ] {
            assert!(server_problem(bad).is_some(), "{bad}");
        }
    }

    #[test]
    fn a_reload_names_the_sections_that_changed_besides_tokens() {
        let config = |secret_env: &str, timeout_s: u32, nick: &str| {
            Config::from_toml(&format!(
                "[[http.tokens]]\nname = \"ci\"\nsecret_env = \"{secret_env}\"\n\
                 [chat.irc]\nnick = \"{nick}\"\n\
                 [commands]\nprogram = \"tool\"\ntimeout_s = {timeout_s}\n\
                 env = {{ B = \"2\", A = \"1\" }}\n"
            ))
            .unwrap()
        };
        let running = config("CI_TOKEN", 30, "sb");
        assert!(running.changed_besides_tokens(&running.clone()).is_empty());
        assert!(
            running
                .changed_besides_tokens(&config("OTHER_TOKEN", 30, "sb"))
                .is_empty()
        );
        assert_eq!(
            running.changed_besides_tokens(&config("OTHER_TOKEN", 60, "sb2")),
            ["[chat]", "[commands]"]
        );
    }

    #[test]
    fn defaults_are_the_embedded_setup() {
        let c = Config::load(&ServeArgs::default(), &env_of(&[("HOME", "/home/a")])).unwrap();
        assert_eq!(c.http.listen.to_string(), "127.0.0.1:8090");
        assert!(c.http.enabled && c.chat.enabled && !c.stdio);
        assert_eq!(c.chat.backend, Backend::Local);
        assert_eq!(
            c.history_path(&env_of(&[("HOME", "/home/a")])).unwrap(),
            PathBuf::from("/home/a/.local/share/switchboard/history.db")
        );
    }

    #[test]
    fn errors_in_a_file_over_a_profile_name_the_key_and_the_files_line() {
        let dir = tempfile::tempdir().unwrap();
        let error = |text: &str| {
            let file = dir.path().join("over.toml");
            std::fs::write(&file, text).unwrap();
            Config::from_profile("imqueue", "--profile imqueue", Some(&file))
                .unwrap_err()
                .to_string()
        };
        let bad_value = error("# mine\n\n[chat]\nmax_text_bytes = \"lots\"\n");
        assert!(
            bad_value.contains(": chat.max_text_bytes (line 4): invalid type: string \"lots\""),
            "{bad_value}"
        );
        assert!(!bad_value.contains("line 7"), "{bad_value}");
        let unknown_key = error("[docs]\npage_size = 5\n");
        assert!(
            unknown_key.contains("docs.page_size (line 2): unknown field `page_size`"),
            "{unknown_key}"
        );
        let unknown_table = error("[nope]\nx = 1\n");
        assert!(
            unknown_table.contains("nope (line 1): unknown field `nope`"),
            "{unknown_table}"
        );
    }

    #[test]
    fn checks_of_a_file_over_a_profile_name_the_file_and_its_line() {
        let dir = tempfile::tempdir().unwrap();
        let error = |text: &str| {
            let file = dir.path().join("over.toml");
            std::fs::write(&file, text).unwrap();
            let args = ServeArgs {
                profile: Some("imqueue".into()),
                config: Some(file),
                ..Default::default()
            };
            let config = Config::load(&args, &env_of(&[("HOME", "/home/a")]));
            match config {
                Err(e) => e.to_string(),
                Ok(config) => config.build_toolkit().err().unwrap().to_string(),
            }
        };
        let no_actions = error(
            "# mine
[commands]
actions = []
",
        );
        assert!(
            no_actions.starts_with("config file ")
                && no_actions.contains("over.toml over --profile imqueue: commands.actions (line 3): declare at least one action"),
            "{no_actions}"
        );
        let zero = error(
            "[chat]
max_text_bytes = 0
",
        );
        assert!(
            zero.contains("over --profile imqueue: chat.max_text_bytes (line 2): "),
            "{zero}"
        );
    }

    #[test]
    fn a_keys_line_is_found_where_the_file_sets_it() {
        let text = "top = 1\n[commands]\ntimeout_s = 2\n[[commands.actions]]\ntool = \"a\"\n[[commands.actions]]\ntool = \"b\"\nargv = [\n  \"{x}\",\n]\n[chat.irc]\nnick = \"n\"\n[http]\ntokens = [{ name = \"t\" }]\n";
        for (key, line) in [
            ("top", Some(1)),
            ("commands.timeout_s", Some(3)),
            ("commands.actions[0].tool", Some(5)),
            ("commands.actions[1].tool", Some(7)),
            ("commands.actions[1].argv[0]", Some(8)),
            ("commands.actions[1].cwd", Some(6)),
            ("chat.irc.nick", Some(12)),
            ("http.tokens[0].secret_env", Some(14)),
            // A plain table the file adds to may hold the profile's keys.
            ("commands.program", None),
            ("docs.sources", None),
        ] {
            assert_eq!(line_of(text, key), line, "{key}");
        }
    }

    #[test]
    fn flags_beat_env_which_beats_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.toml");
        std::fs::write(
            &file,
            "[http]\nlisten = \"127.0.0.1:7000\"\n[chat]\nmax_text_bytes = 100\n",
        )
        .unwrap();
        let args = ServeArgs {
            config: Some(file.clone()),
            ..Default::default()
        };
        let c = Config::load(&args, &env_of(&[])).unwrap();
        assert_eq!(c.http.listen.port(), 7000);
        assert_eq!(c.chat.max_text_bytes, 100);
        let c = Config::load(&args, &env_of(&[("MCP_PORT", "7001")])).unwrap();
        assert_eq!(c.http.listen.port(), 7001);
        let args = ServeArgs {
            config: Some(file),
            http: Some("127.0.0.1:7002".parse().unwrap()),
            ..Default::default()
        };
        let c = Config::load(&args, &env_of(&[("MCP_PORT", "7001")])).unwrap();
        assert_eq!(c.http.listen.port(), 7002);
    }

    #[test]
    fn transport_type_memory_means_the_local_hub() {
        let mut c = Config::default();
        c.chat.backend = Backend::Irc;
        c.apply_env(&env_of(&[("TRANSPORT_TYPE", "memory")]))
            .unwrap();
        assert_eq!(c.chat.backend, Backend::Local);
        c.apply_env(&env_of(&[
            ("IRC_SERVER", "irc.example"),
            ("IRC_PORT", "6697"),
            ("IRC_NICK", "obs"),
        ]))
        .unwrap();
        assert_eq!(c.chat.irc.server.as_deref(), Some("irc.example"));
        assert_eq!(
            (c.chat.irc.port, c.chat.irc.nick.as_deref()),
            (6697, Some("obs"))
        );
    }

    #[test]
    fn a_data_dir_from_the_environment_keeps_the_history_on_disk_like_the_flag() {
        let mut c = Config::from_toml("ephemeral = true").unwrap();
        c.apply_env(&env_of(&[("SWITCHBOARD_DATA_DIR", "/var/lib/sb")]))
            .unwrap();
        assert!(!c.ephemeral);
        assert_eq!(
            c.history_path(&env_of(&[])),
            Some(PathBuf::from("/var/lib/sb/history.db"))
        );
    }

    #[test]
    fn irc_limits_are_checked_whichever_backend_is_in_use() {
        for backend in [Backend::Local, Backend::Irc] {
            type Spoil = fn(&mut IrcConfig);
            let cases: [(&str, Spoil); 6] = [
                ("chat.irc.port", |irc| irc.port = 0),
                ("chat.irc.flood_burst", |irc| irc.flood_burst = 0),
                ("chat.irc.flood_per_second", |irc| {
                    irc.flood_per_second = 0.0
                }),
                ("chat.irc.flood_per_second", |irc| {
                    irc.flood_per_second = f64::NAN
                }),
                ("chat.irc.flood_per_second", |irc| {
                    irc.flood_per_second = f64::INFINITY
                }),
                ("chat.irc.sender_idle_s", |irc| irc.sender_idle_s = 0),
            ];
            for (key, spoil) in cases {
                let mut c = Config::default();
                c.chat.backend = backend;
                c.chat.irc.server = Some("irc.example.net".into());
                spoil(&mut c.chat.irc);
                let err = c.validate(&env_of(&[])).unwrap_err().to_string();
                assert!(err.starts_with(key), "{backend:?} {key}: {err}");
            }
        }
    }

    #[test]
    fn an_unreadable_ca_file_is_named_once_with_its_path() {
        let mut c = Config::default();
        c.chat.backend = Backend::Irc;
        c.chat.irc.server = Some("irc.example.net".into());
        c.chat.irc.tls = true;
        c.chat.irc.ca_file = Some("/nonexistent/ca.pem".into());
        let err = c.validate(&env_of(&[])).unwrap_err().to_string();
        assert!(
            err.starts_with("chat.irc.ca_file: /nonexistent/ca.pem: "),
            "{err}"
        );
        assert_eq!(err.matches("chat.irc.ca_file").count(), 1, "{err}");
    }

    #[test]
    fn allowed_origins_are_origins_as_browsers_send_them() {
        for origin in [
            "https://app.example.com/path",
            "*",
            "app.example.com",
            "https://",
        ] {
            let mut c = Config::default();
            c.http.allowed_origins = vec![origin.into()];
            let err = c.validate(&env_of(&[])).unwrap_err().to_string();
            assert!(err.starts_with("http.allowed_origins:"), "{origin}: {err}");
        }
        let mut c = Config::default();
        c.http.allowed_origins = vec![
            "https://app.example.com".into(),
            "http://10.0.0.5:8080/".into(),
        ];
        assert!(c.validate(&env_of(&[])).is_ok());
    }

    #[test]
    fn a_profile_error_names_where_the_profile_was_given() {
        let err = Config::load(
            &ServeArgs::default(),
            &env_of(&[("SWITCHBOARD_PROFILE", "nope")]),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with("SWITCHBOARD_PROFILE=\"nope\": no profile named"),
            "{err}"
        );
        let args = ServeArgs {
            profile: Some("nope".into()),
            ..Default::default()
        };
        let err = Config::load(&args, &env_of(&[])).unwrap_err().to_string();
        assert!(err.starts_with("--profile nope: no profile named"), "{err}");
    }

    #[test]
    fn a_listen_address_that_is_no_ip_and_port_says_what_is_missing() {
        assert_eq!(
            parse_listen("[::1]:9000").unwrap(),
            "[::1]:9000".parse().unwrap()
        );
        for (text, said) in [
            (
                "localhost:8090",
                "names a host; give an IP address and a port",
            ),
            ("example.com", "names a host"),
            ("127.0.0.1", "has no port; add one, as in 127.0.0.1:8090"),
            ("::1", "as in [::1]:8090"),
            ("1.2.3.4:99999", "the port of 1.2.3.4:99999 is not a number"),
            ("[::1]:http", "is not a number"),
            ("127.0.0.1 :80", "is not an IP address and a port"),
            ("", "is not an IP address and a port"),
        ] {
            let err = parse_listen(text).unwrap_err();
            assert!(err.contains(said), "{text:?}: {err}");
        }
        let err = Config::from_toml("[http]\nlisten = \"localhost:8090\"\n").unwrap_err();
        assert!(
            err.contains("listen = \"localhost:8090\"") && err.contains("names a host"),
            "{err}"
        );
    }

    #[test]
    fn a_token_no_client_can_present_is_refused() {
        for secret in ["   ", " padded", "tab\there", "s3cret", "fifteen-chars-x"] {
            let err = Config::default()
                .tokens(&env_of(&[(DEFAULT_TOKEN_ENV, secret)]))
                .unwrap_err()
                .to_string();
            assert!(err.starts_with(DEFAULT_TOKEN_ENV), "{secret:?}: {err}");
        }
    }

    #[test]
    fn bad_env_values_name_the_variable() {
        for (var, value) in [
            ("MCP_PORT", "eighty"),
            ("IRC_PORT", "99999"),
            ("IRC_PORT", "0"),
            ("SWITCHBOARD_LOG", "warning"),
            ("SWITCHBOARD_LOG", "info,switchboard=loud"),
            ("TRANSPORT_TYPE", "carrier-pigeon"),
            ("SWITCHBOARD_HTTP", "localhost"),
        ] {
            let err = Config::default()
                .apply_env(&env_of(&[(var, value)]))
                .unwrap_err();
            assert!(
                err.to_string()
                    .starts_with(&format!("environment variable {var}=")),
                "{err}"
            );
        }
    }

    #[test]
    fn unknown_and_mistyped_file_keys_are_named() {
        let err = Config::from_toml("[http]\nlisten_addr = \"x\"\n").unwrap_err();
        assert!(err.contains("listen_addr"), "{err}");
        let err = Config::from_toml("[chat]\nmax_text_bytes = \"lots\"\n").unwrap_err();
        assert!(err.contains("max_text_bytes"), "{err}");
        let err = Config::from_toml("[chat]\nbackend = \"carrier-pigeon\"\n").unwrap_err();
        assert!(err.contains("backend"), "{err}");
    }

    #[test]
    fn mistyped_values_are_told_in_toml_words() {
        for (text, want) in [
            (
                "[chat.irc]\nport = 70000\n",
                "expected a whole number from 0 to 65535",
            ),
            (
                "[chat]\nmax_text_bytes = -5\n",
                "expected a whole number, 0 or more",
            ),
            (
                "[http]\nmax_streams = 99999999999999999999\n",
                "expected a whole number, 0 or more",
            ),
            ("http = \"on\"\n", "expected a table"),
            ("[http.tokens]\nname = \"x\"\n", "written [[name]]"),
            (
                "[chat.irc]\nflood_per_second = \"x\"\n",
                "expected a number",
            ),
        ] {
            let err = Config::from_toml(text).unwrap_err();
            assert!(err.contains(want), "{text}: {err}");
            for rust in ["u16", "usize", "i128", "struct", "sequence", "f64"] {
                assert!(!err.contains(rust), "{text}: {err}");
            }
        }
    }

    #[test]
    fn non_loopback_http_needs_a_token_or_an_explicit_flag() {
        let args = ServeArgs {
            http: Some("0.0.0.0:8090".parse().unwrap()),
            ..Default::default()
        };
        let err = Config::load(&args, &env_of(&[])).unwrap_err();
        assert!(err.to_string().starts_with("http.listen:"), "{err}");
        assert!(err.to_string().contains(DEFAULT_TOKEN_ENV));
        assert!(Config::load(&args, &env_of(&[(DEFAULT_TOKEN_ENV, "s3cret-long-enough")])).is_ok());
        let args = ServeArgs {
            insecure_no_auth: true,
            ..args
        };
        assert!(Config::load(&args, &env_of(&[])).is_ok());
    }

    #[test]
    fn stdio_turns_http_off_unless_asked_for() {
        let args = ServeArgs {
            stdio: true,
            ..Default::default()
        };
        let c = Config::load(&args, &env_of(&[])).unwrap();
        assert!(c.stdio && !c.http.enabled);
        let args = ServeArgs {
            stdio: true,
            http: Some("127.0.0.1:9".parse().unwrap()),
            ..Default::default()
        };
        assert!(Config::load(&args, &env_of(&[])).unwrap().http.enabled);
    }

    #[test]
    fn out_of_range_values_name_the_key() {
        let mut c = Config::default();
        c.chat.max_text_bytes = 0;
        let err = c.validate(&env_of(&[])).unwrap_err();
        assert!(err.to_string().starts_with("chat.max_text_bytes:"));
        // A bare word that is no level would turn off every other log line.
        for level in ["loud=[", "warning", "verbose!!", "info,chatty"] {
            let mut c = Config::default();
            c.log.level = level.into();
            assert!(
                c.validate(&env_of(&[]))
                    .unwrap_err()
                    .to_string()
                    .starts_with("log.level:"),
                "{level}"
            );
        }
        for level in [
            "warn",
            "INFO",
            "off",
            "info,switchboard_chat=debug",
            " debug ",
        ] {
            let mut c = Config::default();
            c.log.level = level.into();
            assert!(c.validate(&env_of(&[])).is_ok(), "{level}");
        }
    }

    #[test]
    fn push_approval_and_nick_settings_are_checked_naming_the_key() {
        let cases = [
            ("[chat.push]\nper_minute = 0", "chat.push.per_minute:"),
            ("[chat.push]\ncoalesce_ms = 60000", "chat.push.coalesce_ms:"),
            ("[chat.push]\nloop_messages = 1", "chat.push.loop_messages:"),
            ("[chat.push]\nloop_window_s = 0", "chat.push.loop_window_s:"),
            (
                "[chat.approvals]\nchannel = \"#a b\"",
                "chat.approvals.channel:",
            ),
            (
                "[chat.approvals]\nchannel = \"#a\"\napprovers = [\"9lives\"]",
                "chat.approvals.approvers:",
            ),
            (
                "[chat.approvals]\nchannel = \"#a\"\ntimeout_s = 0",
                "chat.approvals.timeout_s:",
            ),
            // Accounts are an IRC network's.
            (
                "[chat.approvals]\nchannel = \"#a\"\napprover_accounts = [\"ann\"]",
                "chat.approvals.approver_accounts:",
            ),
            (
                "[chat]\nbackend = \"irc\"\n[chat.approvals]\nchannel = \"#a\"\napprovers = [\"ann\"]\napprover_accounts = [\"ann\"]",
                "chat.approvals.approver_accounts:",
            ),
            (
                "[chat]\nbackend = \"irc\"\n[chat.approvals]\nchannel = \"#a\"\napprover_accounts = [\"a b\"]",
                "chat.approvals.approver_accounts:",
            ),
            (
                "[chat]\nnick = \"two words\"",
                "chat.nick (--nick, SWITCHBOARD_NICK):",
            ),
            // switchboard's own notices' nick, in any case; on IRC the
            // observer's.
            (
                "[chat]\nnick = \"SwitchBoard\"",
                "chat.nick (--nick, SWITCHBOARD_NICK): SwitchBoard is the nick of switchboard's own notices",
            ),
            (
                "[chat]\nbackend = \"irc\"\nnick = \"watcher\"\n[chat.irc]\nserver = \"irc.example\"\nnick = \"Watcher\"",
                "chat.nick (--nick, SWITCHBOARD_NICK): watcher is the nick",
            ),
        ];
        for (toml, key) in cases {
            let c = Config::from_toml(toml).unwrap();
            let err = c.validate(&env_of(&[])).unwrap_err().to_string();
            assert!(err.starts_with(key), "{toml}: {err}");
        }
        for (toml, word) in [
            ("[chat.push]\nmode = \"loud\"", "mode"),
            ("[chat.approvals]\napprovers = []", "channel"),
        ] {
            let err = Config::from_toml(toml).unwrap_err();
            assert!(err.contains(word), "{toml}: {err}");
        }
        let args = ServeArgs {
            nick: Some("reviewer-2".into()),
            ..Default::default()
        };
        let c = Config::load(&args, &env_of(&[("SWITCHBOARD_NICK", "ignored")])).unwrap();
        assert_eq!(c.chat.nick.as_deref(), Some("reviewer-2"));
        let c = Config::load(
            &ServeArgs::default(),
            &env_of(&[("SWITCHBOARD_NICK", "bob")]),
        )
        .unwrap();
        assert_eq!(c.chat.nick.as_deref(), Some("bob"));
        let push = Config::from_toml("[chat.push]\nmode = \"all\"\nper_minute = 5")
            .unwrap()
            .chat_settings()
            .unwrap()
            .push;
        assert_eq!((push.mode, push.per_minute), (PushMode::All, 5));
    }
}
