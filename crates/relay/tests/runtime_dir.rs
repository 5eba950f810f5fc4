//! Binding at the conventional path under `$XDG_RUNTIME_DIR` (or the
//! `/tmp` fallback): directories, modes, stale and live sockets.
//!
//! One test only: it changes the process's environment and umask, which
//! must not race with other tests in the same binary.

use std::{
    os::unix::fs::{MetadataExt, PermissionsExt},
    path::Path,
};

use serde_json::json;
use switchboard_relay::{BindError, Call, Options, Tool, ToolHandler, ToolResult, socket_path};

struct Nothing;

impl ToolHandler for Nothing {
    fn tools(&self) -> Vec<Tool> {
        vec![Tool::new(
            "noop",
            "Does nothing.",
            json!({"type": "object"}),
        )]
    }
    async fn call(&self, _: Call) -> ToolResult {
        ToolResult::text("")
    }
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn the_conventional_path_is_private_and_owned() {
    let temp = tempfile::tempdir().unwrap();
    let xdg = temp.path().join("run/user/1000");
    // SAFETY: the only test in this binary; no other thread reads the
    // environment meanwhile.
    unsafe { std::env::set_var("XDG_RUNTIME_DIR", &xdg) };

    // Everything is created, mode 0700, even under a hostile umask.
    // SAFETY: umask(2) has no failure mode.
    let old_umask = unsafe { libc::umask(0o777) };
    let server = switchboard_relay::bind("dev.test.conventional", Nothing).unwrap();
    unsafe { libc::umask(old_umask) };
    let path = xdg.join("switchboard/dev.test.conventional/relay.sock");
    assert_eq!(server.socket_path(), path);
    assert_eq!(socket_path("switchboard", "dev.test.conventional"), path);
    assert_eq!(mode(&xdg), 0o700);
    assert_eq!(mode(&xdg.join("switchboard")), 0o700);
    assert_eq!(mode(path.parent().unwrap()), 0o700);
    assert_eq!(mode(&path), 0o600);

    // The MCP config for the default prefix names the app id, and sits
    // beside the socket.
    let config = server.write_mcp_config().unwrap();
    assert_eq!(config, path.with_file_name("mcp-config.json"));
    assert_eq!(
        config,
        switchboard_relay::mcp_config_path("switchboard", "dev.test.conventional")
    );
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&config).unwrap()).unwrap();
    assert_eq!(
        json["mcpServers"]["dev_test_conventional"]["args"],
        json!(["shim", "--app-id", "dev.test.conventional"])
    );

    // A live instance is refused; the socket survives the attempt.
    let error = switchboard_relay::bind("dev.test.conventional", Nothing).unwrap_err();
    assert!(matches!(error, BindError::InUse { .. }), "{error}");
    assert!(path.exists());
    drop(server);
    assert!(!path.exists(), "dropping the server removes its socket");

    // A stale socket (its owner died without cleaning up) is replaced, and
    // an app directory someone loosened is made private again.
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    assert!(path.exists());
    chmod(path.parent().unwrap(), 0o755);
    let server = switchboard_relay::bind("dev.test.conventional", Nothing).unwrap();
    assert_eq!(mode(path.parent().unwrap()), 0o700);
    assert!(std::os::unix::net::UnixStream::connect(&path).is_ok());
    drop(server);

    // Another prefix, another directory; its MCP config needs `--socket`.
    let server = Options::new("dev.test.conventional")
        .prefix("sbtest")
        .bind(Nothing)
        .unwrap();
    assert_eq!(
        server.socket_path(),
        xdg.join("sbtest/dev.test.conventional/relay.sock")
    );
    assert_eq!(
        server.mcp_config().args,
        ["shim", "--socket", server.socket_path().to_str().unwrap()]
    );
    drop(server);

    // A prefix directory others can write to is refused.
    let loose = xdg.join("loose");
    std::fs::create_dir(&loose).unwrap();
    chmod(&loose, 0o777);
    let error = Options::new("dev.test.conventional")
        .prefix("loose")
        .bind(Nothing)
        .unwrap_err();
    assert!(matches!(error, BindError::Insecure { .. }), "{error}");
    assert!(
        error.to_string().contains("writable by other users"),
        "{error}"
    );
    assert!(!loose.join("dev.test.conventional").exists());

    // So is one that belongs to another user (root can set that up).
    // SAFETY: plain syscall.
    if unsafe { libc::geteuid() } == 0 {
        let foreign = xdg.join("foreign");
        std::fs::create_dir(&foreign).unwrap();
        chmod(&foreign, 0o755);
        std::os::unix::fs::chown(&foreign, Some(65534), Some(65534)).unwrap();
        let error = Options::new("dev.test.conventional")
            .prefix("foreign")
            .bind(Nothing)
            .unwrap_err();
        assert!(
            error.to_string().contains("belongs to uid 65534"),
            "{error}"
        );
    } else {
        // CI runs as root: there, not running this case is a failure.
        assert!(
            std::env::var_os("CI").is_none(),
            "the foreign-owner case needs root (to chown), and CI must run it"
        );
        eprintln!("not run: the foreign-owner case needs root to chown");
    }

    // Without XDG_RUNTIME_DIR: /tmp/<prefix>-<uid>/<app_id>/relay.sock.
    // SAFETY: as above.
    unsafe { std::env::remove_var("XDG_RUNTIME_DIR") };
    let prefix = format!("sbtest{}", std::process::id());
    let uid = unsafe { libc::geteuid() };
    let base = Path::new("/tmp").join(format!("{prefix}-{uid}"));
    let server = Options::new("dev.test.conventional")
        .prefix(&prefix)
        .bind(Nothing)
        .unwrap();
    assert_eq!(
        server.socket_path(),
        base.join("dev.test.conventional/relay.sock")
    );
    assert_eq!(mode(&base), 0o700);
    assert_eq!(std::fs::metadata(&base).unwrap().uid(), uid);
    drop(server);
    std::fs::remove_dir_all(&base).unwrap();
}
