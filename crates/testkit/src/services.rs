//! Atheme IRC services for an InspIRCd [`crate::IrcServer`] started with
//! [`crate::ServerOptions::services`]: NickServ to register accounts, SaslServ to log them in.
//!
//! Atheme 7.2 (Debian `atheme-services`) speaks InspIRCd 2.0's server protocol (1202), which
//! InspIRCd 3 still links with. It connects to the ircd's second loopback port as
//! `services.test`, runs in the foreground with its database in `atheme/` of the server's
//! temp dir, and logs everything, the raw server protocol included, to `atheme.log` there.
//! InspIRCd offers the `sasl` cap only while `services.test` is linked.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use crate::config;
use crate::server::{POLL, read_from, reap, spawn_logged, terminate};

/// How long Atheme may take to link and finish its burst (~50 ms on loopback).
const LINK_TIMEOUT: Duration = Duration::from_secs(10);
/// Atheme's log line once the ircd has answered the PING after both bursts: from then on
/// InspIRCd routes SASL to it and offers the `sasl` cap.
const LINKED: &str = "finished synching with uplink";
/// The file (in the temp dir) that gets Atheme's stdout and stderr: its whole log with `-n`.
pub(crate) const LOG_FILE: &str = "atheme.log";

/// An Atheme process (or none, while stopped) with its config, database and log in `dir`.
#[derive(Debug)]
pub(crate) struct Services {
    binary: PathBuf,
    dir: PathBuf,
    child: Option<Child>,
}

impl Services {
    /// Writes the config for linking to `link_port`; starts nothing yet.
    pub(crate) fn new(binary: PathBuf, dir: &Path, link_port: u16) -> Services {
        let services = Services {
            binary,
            dir: dir.to_path_buf(),
            child: None,
        };
        let data = services.data_dir();
        std::fs::create_dir_all(&data)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", data.display()));
        let conf = services.config_path();
        std::fs::write(&conf, config::render_atheme(link_port))
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", conf.display()));
        services
    }

    /// Starts Atheme and waits until it has linked; the ircd must be running. On failure
    /// the process is gone and the error says why (its log is in [`Services::log`]).
    pub(crate) async fn launch(&mut self) -> Result<(), String> {
        let log_path = self.dir.join(LOG_FILE);
        // Atheme refuses to start while its pid file names a live process; ours is reaped,
        // but a pid reused since then would look alive.
        let pid_file = self.dir.join("atheme.pid");
        let _ = std::fs::remove_file(&pid_file);
        let mut command = Command::new(&self.binary);
        command
            .arg("-n")
            .arg("-c")
            .arg(self.config_path())
            .arg("-D")
            .arg(self.data_dir())
            // -n already logs to stdout; the default log file is in /var/log.
            .args(["-l", "/dev/null", "-p"])
            .arg(&pid_file)
            .current_dir(&self.dir);
        let (mut child, start_offset) = spawn_logged(&mut command, &log_path);

        let deadline = Instant::now() + LINK_TIMEOUT;
        loop {
            if read_from(&log_path, start_offset).contains(LINKED) {
                self.child = Some(child);
                return Ok(());
            }
            if let Some(status) = child.try_wait().expect("poll atheme process") {
                return Err(format!(
                    "atheme-services exited with {status} before it linked"
                ));
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                reap(&mut child, LINK_TIMEOUT).await;
                return Err(format!(
                    "atheme-services had not linked after {LINK_TIMEOUT:?}"
                ));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Stops Atheme with SIGTERM, so it writes its database (accounts registered so far
    /// survive a restart), then SIGKILL if it lingers. Does nothing if it is not running.
    pub(crate) async fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            terminate(&mut child).await;
        }
    }

    /// Atheme's output of every run so far.
    pub(crate) fn log(&self) -> String {
        read_from(&self.dir.join(LOG_FILE), 0)
    }

    fn config_path(&self) -> PathBuf {
        self.dir.join("atheme.conf")
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.join("atheme")
    }
}

impl Drop for Services {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// How many SASL authentications the ircd has started with services in `log`: InspIRCd
/// relays each client's `AUTHENTICATE <mechanism>` as `ENCAP <sid> SASL <uid> * S
/// <mechanism>`, which Atheme logs as received (`-> :894 ENCAP 00A SASL 894AAAAAB * S
/// PLAIN`).
pub(crate) fn sasl_starts(log: &str) -> usize {
    log.lines()
        .filter(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            words
                .windows(4)
                .any(|w| w[0] == "SASL" && w[2] == "*" && w[3] == "S")
        })
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_sasl_starts_not_their_steps() {
        let log = "\
[2026-01-01 00:00:01] -> :894 ENCAP 00A SASL 894AAAAAH * H 127.0.0.1 127.0.0.1 P
[2026-01-01 00:00:01] -> :894 ENCAP 00A SASL 894AAAAAH * S PLAIN
[2026-01-01 00:00:01] <- :00A ENCAP 894 SASL 00AAAAAAC 894AAAAAH C +
[2026-01-01 00:00:01] -> :894 ENCAP 00A SASL 894AAAAAH 00AAAAAAC C Yg==
[2026-01-01 00:00:01] <- :00A ENCAP 894 SASL 00AAAAAAC 894AAAAAH D F
[2026-01-01 00:00:02] -> :894 ENCAP 00A SASL 894AAAAAI * S PLAIN
";
        assert_eq!(sasl_starts(log), 2);
        assert_eq!(sasl_starts(""), 0);
    }
}
