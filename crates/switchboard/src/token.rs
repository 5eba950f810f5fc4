//! `switchboard token new NAME`: a fresh random secret for one agent or
//! person, and the `[[http.tokens]]` lines that give it to them.
//!
//! The secret is 32 bytes from the operating system's random source, written
//! as `sbt_` and 64 hex digits. It is printed once (or written to a file
//! only its owner can read); the config names where it lives, never the
//! secret itself.

use std::{
    fs::OpenOptions,
    io::{ErrorKind, Read, Write},
    os::unix::fs::OpenOptionsExt,
    path::Path,
};

use anyhow::Context;
use switchboard_chat::NameRules;

use crate::{
    cli::TokenNewArgs,
    config::{ConfigError, is_token_name},
};

/// The name a token may have, for clap: 1 to 64 characters, no spaces.
pub fn parse_name(name: &str) -> Result<String, String> {
    if is_token_name(name) {
        Ok(name.to_owned())
    } else {
        Err("use 1 to 64 characters without spaces".into())
    }
}

/// Makes the token and prints what to do with it.
pub fn new(args: &TokenNewArgs) -> anyhow::Result<()> {
    let name = args.name.as_str();
    let secret = fresh_secret()?;
    // A name that is no nick needs a `nicks` line to speak at all.
    let rules = NameRules::default();
    let nicks = if rules.nick(name).is_ok() {
        String::new()
    } else {
        let nick: String = name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "-_[]{}|^`\\".contains(c) {
                    c
                } else {
                    '-'
                }
            })
            .collect();
        // A nick may not start with a digit or `-`: `_` in front makes it
        // one; too long, it is cut to the longest nick every network takes.
        let nick = [nick.clone(), format!("_{nick}")]
            .into_iter()
            .map(|n| n.chars().take(rules.nicklen).collect::<String>())
            .find(|n| rules.nick(n).is_ok())
            .unwrap_or_else(|| "…".into());
        format!("nicks = [{nick:?}]   # the nicks it speaks as ({name:?} is not a nick)\n")
    };
    let (source, shown) = match &args.file {
        Some(path) => {
            // Absolute: the config reads a relative path from its own directory.
            let path = std::path::absolute(path)?;
            write_secret(&path, &secret)?;
            (
                format!("secret_file = {:?}", path.display().to_string()),
                format!(
                    "The secret is in {} (readable by you only); give it to {name}.",
                    path.display()
                ),
            )
        }
        None => (
            format!("secret_env = \"{}\"", env_name(name)),
            format!(
                "The secret for {name} (shown once; switchboard reads it from ${}):\n\n    {secret}",
                env_name(name)
            ),
        ),
    };
    println!(
        "{shown}\n\nAdd to the config (then `systemctl reload switchboard` or SIGHUP):\n\n\
         [[http.tokens]]\n\
         name = {name:?}\n\
         {source}\n\
         {nicks}\
         channels = [\"*\"]                 # the channels it may use (globs)\n\
         # tools = [\"chat\"]               # the toolsets it may use; all when left out\n\
         # sends_per_minute = 120\n\
         # human = true                   # for a person (the web view)"
    );
    Ok(())
}

/// `sbt_` and 32 random bytes in hex.
fn fresh_secret() -> anyhow::Result<String> {
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut random| random.read_exact(&mut bytes))
        .context("cannot read /dev/urandom for a random secret")?;
    Ok(format!(
        "sbt_{}",
        bytes.iter().map(|b| format!("{b:02x}")).collect::<String>()
    ))
}

/// `SWITCHBOARD_TOKEN_` and the name, upper-cased, other characters as `_`.
fn env_name(name: &str) -> String {
    let tail: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect();
    format!("SWITCHBOARD_TOKEN_{tail}")
}

/// Writes `secret` to a new file at `path`, mode 0600. A file already
/// there or a directory missing is the user's to fix: a config error
/// naming `--file` (exit 2).
fn write_secret(path: &Path, secret: &str) -> anyhow::Result<()> {
    let mut file = match OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(file) => file,
        Err(e) if matches!(e.kind(), ErrorKind::AlreadyExists | ErrorKind::NotFound) => {
            return Err(ConfigError::Invalid {
                key: "--file".into(),
                problem: format!(
                    "cannot create {}: {e} (it must not exist yet, and its directory must)",
                    path.display()
                ),
            }
            .into());
        }
        Err(e) => {
            return Err(e).with_context(|| format!("cannot create {}", path.display()));
        }
    };
    writeln!(file, "{secret}")
        .and_then(|()| file.sync_all())
        .with_context(|| format!("cannot write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_fresh_and_long_and_env_names_are_plain() {
        let (a, b) = (fresh_secret().unwrap(), fresh_secret().unwrap());
        assert_ne!(a, b);
        assert_eq!(a.len(), 4 + 64);
        assert!(a[4..].chars().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(env_name("ci-bot.2"), "SWITCHBOARD_TOKEN_CI_BOT_2");
    }
}
