//! Where an application's relay socket lives.

use std::path::PathBuf;

/// The prefix used by switchboard and by applications that keep the default.
pub const DEFAULT_PREFIX: &str = "switchboard";

/// The socket path for `app_id`:
/// `$XDG_RUNTIME_DIR/<prefix>/<app_id>/relay.sock`, or, when
/// `XDG_RUNTIME_DIR` is unset or empty, `/tmp/<prefix>-<uid>/<app_id>/relay.sock`
/// (per-user, since `/tmp` is shared).
///
/// ```
/// let path = switchboard_relay::socket_path("switchboard", "dev.example.app");
/// assert!(path.ends_with("switchboard/dev.example.app/relay.sock")
///     || path.to_string_lossy().contains("/switchboard-"));
/// ```
pub fn socket_path(prefix: &str, app_id: &str) -> PathBuf {
    runtime_dir(prefix).join(app_id).join("relay.sock")
}

/// The per-user directory under which every app of `prefix` has its own.
///
/// ```
/// use switchboard_relay::paths::{runtime_dir, socket_path};
///
/// let dir = runtime_dir("switchboard");
/// assert_eq!(socket_path("switchboard", "dev.example.app"), dir.join("dev.example.app/relay.sock"));
/// ```
pub fn runtime_dir(prefix: &str) -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        Some(dir) => PathBuf::from(dir).join(prefix),
        None => {
            // SAFETY: getuid(2) has no failure mode.
            let uid = unsafe { libc::getuid() };
            PathBuf::from(format!("/tmp/{prefix}-{uid}"))
        }
    }
}

/// Whether `app_id` is usable as a directory name: non-empty, no `/`, not
/// `.` or `..`, printable ASCII only (at most 128 bytes).
///
/// ```
/// use switchboard_relay::paths::valid_app_id;
///
/// assert!(valid_app_id("dev.example.terminal"));
/// for bad in ["", ".", "..", "a/b", "has space", "é"] {
///     assert!(!valid_app_id(bad), "{bad:?}");
/// }
/// assert!(!valid_app_id(&"x".repeat(129)));
/// ```
pub fn valid_app_id(app_id: &str) -> bool {
    !app_id.is_empty()
        && app_id.len() <= 128
        && app_id != "."
        && app_id != ".."
        && app_id.bytes().all(|b| b.is_ascii_graphic() && b != b'/')
}
