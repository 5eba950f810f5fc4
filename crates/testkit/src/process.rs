//! Running switchboard's binaries from tests and benchmarks: the environment
//! to clear so that the developer's own settings do not leak into a run, and
//! watching a process go away.

use std::time::{Duration, Instant};

/// Variables that change how `switchboard` or `switchboard-shim` behave.
/// Remove them from every child's environment (then set what the test
/// means to set), so a developer who has, say, `SWITCHBOARD_PROFILE`
/// exported still runs the suite as written.
pub const ISOLATED_ENV: &[&str] = &[
    "SWITCHBOARD_CONFIG",
    "SWITCHBOARD_PROFILE",
    "SWITCHBOARD_DATA_DIR",
    "SWITCHBOARD_HTTP",
    "SWITCHBOARD_HTTP_TOKEN",
    "SWITCHBOARD_LOG",
    "SWITCHBOARD_LOG_FILE",
    "SWITCHBOARD_NICK",
    "TRANSPORT_TYPE",
    "MCP_PORT",
    "IRC_SERVER",
    "IRC_PORT",
    "IRC_NICK",
    "SWITCHBOARD_SHIM_LOG",
    "SWITCHBOARD_SHIM_CONNECT_TIMEOUT_MS",
    "SWITCHBOARD_SHIM_LIST_TIMEOUT_MS",
    "SWITCHBOARD_SHIM_CALL_TIMEOUT_MS",
];

/// Whether process `pid` is gone, or is a zombie waiting for its parent to
/// reap it (it has ended either way).
pub fn gone(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |stat| {
        stat.rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with(['Z', 'X']))
    })
}

/// Waits up to `limit` for `pid` to be [`gone`]; true if it went.
///
/// ```
/// use std::time::Duration;
/// use switchboard_testkit::process::wait_gone;
///
/// let mut child = std::process::Command::new("true").spawn().unwrap();
/// assert!(wait_gone(child.id() as i32, Duration::from_secs(5)));
/// child.wait().unwrap();
/// ```
pub fn wait_gone(pid: i32, limit: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if gone(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    gone(pid)
}
