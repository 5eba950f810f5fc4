//! `switchboard backup PATH`: copies the history database that `serve`
//! would open (same `--config`, `--profile`, `--data-dir` and environment)
//! into PATH, while the daemon keeps running; the copy itself is
//! [`switchboard_chat::history::backup_file`].

use switchboard_chat::history::backup_file;

use crate::{
    cli::{BackupArgs, ServeArgs},
    config::{Config, ConfigError},
};

pub fn run(args: &BackupArgs, env: &dyn Fn(&str) -> Option<String>) -> anyhow::Result<()> {
    let serve = ServeArgs {
        config: args.config.clone(),
        profile: args.profile.clone(),
        data_dir: args.data_dir.clone(),
        ..ServeArgs::default()
    };
    // Layered, not validated: a backup run from a shell needs to know where
    // the history is, not the daemon's token or IRC secrets.
    let config = Config::layered(&serve, env)?;
    if !config.chat.enabled {
        return Err(ConfigError::Invalid {
            key: "chat.enabled".into(),
            problem: "chat is off in this configuration, so there is no history to back up".into(),
        }
        .into());
    }
    let Some(from) = config.history_path(env) else {
        return Err(ConfigError::Invalid {
            key: "ephemeral".into(),
            problem: "this configuration keeps the history in memory only; there is no database to back up".into(),
        }
        .into());
    };
    let done = backup_file(&from, &args.path, args.force)?;
    println!(
        "backed up {} ({} message{}, {} bytes) to {}",
        from.display(),
        done.messages,
        if done.messages == 1 { "" } else { "s" },
        done.bytes,
        args.path.display()
    );
    Ok(())
}
