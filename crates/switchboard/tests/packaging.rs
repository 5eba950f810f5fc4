//! What a deployment installs beside the binary: shell completions and man
//! pages generated from the CLI, the MCP registry's `server.json`, the
//! systemd unit, and release builds that are stripped.

use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
};

use serde_json::Value;
use switchboard_testkit::process::ISOLATED_ENV;

const BIN: &str = env!("CARGO_BIN_EXE_switchboard");
const VERSION: &str = env!("CARGO_PKG_VERSION");

fn repo_file(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(name)
}

fn switchboard(args: &[&str]) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.args(args);
    for var in ISOLATED_ENV {
        cmd.env_remove(var);
    }
    cmd.output().expect("run switchboard")
}

/// Runs `switchboard ARGS`, asserts success, returns stdout.
fn stdout_of(args: &[&str]) -> String {
    let out = switchboard(args);
    assert!(
        out.status.success(),
        "switchboard {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

/// roff escapes every `-` as `\-`.
fn unroff(page: &str) -> String {
    page.replace("\\-", "-")
}

#[test]
fn completions_know_the_commands_and_their_flags() {
    let bash = stdout_of(&["completions", "bash"]);
    for word in [
        "serve",
        "shim",
        "tail",
        "say",
        "mcp-config",
        "backup",
        "completions",
        "--data-dir",
        "--stdio",
        "--no-socket",
        "--config",
        "--profile",
        "--force",
    ] {
        assert!(
            bash.contains(word),
            "{word} missing from the bash completions"
        );
    }
    assert!(bash.contains("complete -F _switchboard"), "{bash}");
    for shell in ["zsh", "fish"] {
        let script = stdout_of(&["completions", shell]);
        assert!(
            script.contains("serve") && script.contains("data-dir"),
            "{shell}: {script}"
        );
    }
}

#[test]
fn an_unknown_shell_is_a_usage_error() {
    let out = switchboard(&["completions", "tcsh"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("invalid value 'tcsh'") && err.contains("bash") && err.contains("fish"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn man_pages_describe_every_command_and_the_flags_of_serve() {
    let main = unroff(&stdout_of(&["man"]));
    assert!(main.contains(".TH switchboard 1"), "{main}");
    assert!(main.contains(&format!("switchboard {VERSION}")), "{main}");
    for section in [".SH NAME", ".SH SYNOPSIS", ".SH SUBCOMMANDS"] {
        assert!(main.contains(section), "{section} missing: {main}");
    }
    assert!(main.contains("switchboard-serve(1)"), "{main}");

    let serve = unroff(&stdout_of(&["man", "serve"]));
    assert!(serve.contains(".TH switchboard-serve 1"), "{serve}");
    assert!(
        serve.contains(".SH NAME\nswitchboard-serve - Serve MCP"),
        "{serve}"
    );
    assert!(
        serve.contains(".SH SYNOPSIS\n\\fBswitchboard serve\\fR"),
        "{serve}"
    );
    for flag in [
        "--config",
        "--profile",
        "--stdio",
        "--http",
        "--data-dir",
        "--no-socket",
    ] {
        assert!(serve.contains(flag), "{flag} missing: {serve}");
    }

    let out = switchboard(&["man", "serv"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no command \"serv\""));

    let dir = tempfile::tempdir().unwrap();
    stdout_of(&["man", "--out", dir.path().to_str().unwrap()]);
    for page in [
        "switchboard.1",
        "switchboard-serve.1",
        "switchboard-backup.1",
    ] {
        let text = std::fs::read_to_string(dir.path().join(page)).expect(page);
        assert!(text.contains(".SH SYNOPSIS"), "{page}");
    }
    assert!(!dir.path().join("switchboard-help.1").exists());
    // Every page a page refers to is written.
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        for line in text.lines() {
            let Some(page) = line.strip_suffix("(1)") else {
                continue;
            };
            let page = page.replace("\\-", "-");
            assert!(
                dir.path().join(format!("{page}.1")).is_file(),
                "{page}(1) is named but not written"
            );
        }
    }
    let nested = unroff(&stdout_of(&["man", "token new"]));
    assert!(nested.contains("switchboard-token-new"), "{nested}");
}

/// `server.json` for the MCP registry: the fields the registry requires,
/// in the forms its schema accepts, at this build's version.
#[test]
fn server_json_is_a_registry_entry_for_this_version() {
    let path = repo_file("server.json");
    let text = std::fs::read_to_string(&path).expect("server.json at the repo root");
    let server: Value = serde_json::from_str(&text).expect("server.json is JSON");
    let str_of = |v: &Value, key: &str| -> String {
        v[key]
            .as_str()
            .unwrap_or_else(|| panic!("{key} missing or not a string in {v}"))
            .to_owned()
    };

    assert!(
        str_of(&server, "$schema").starts_with("https://static.modelcontextprotocol.io/schemas/")
    );
    let name = str_of(&server, "name");
    assert_eq!(name, "io.github.switchboard-mcp/switchboard");
    let (namespace, short) = name.split_once('/').expect("one slash");
    let allowed = |s: &str, extra: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || ".-".contains(c) || extra.contains(c))
    };
    assert!(allowed(namespace, "") && allowed(short, "_"), "{name}");
    let description = str_of(&server, "description");
    assert!(
        (1..=100).contains(&description.chars().count()),
        "the registry takes 1 to 100 characters: {description:?}"
    );
    assert_eq!(str_of(&server, "version"), VERSION);
    assert_eq!(
        str_of(&server["repository"], "url"),
        "https://github.com/switchboard-mcp/switchboard"
    );
    assert_eq!(str_of(&server["repository"], "source"), "github");

    let packages = server["packages"].as_array().expect("packages");
    assert!(!packages.is_empty());
    for package in packages {
        assert_eq!(str_of(package, "registryType"), "cargo");
        assert_eq!(str_of(package, "identifier"), env!("CARGO_PKG_NAME"));
        assert_eq!(str_of(package, "version"), VERSION);
        assert_eq!(str_of(&package["transport"], "type"), "stdio");
        // The arguments make a command this binary accepts.
        let mut args: Vec<String> = package["packageArguments"]
            .as_array()
            .expect("packageArguments")
            .iter()
            .map(|a| {
                assert_eq!(str_of(a, "type"), "positional");
                str_of(a, "value")
            })
            .collect();
        assert_eq!(args, ["serve", "--stdio"]);
        args.push("--help".into());
        stdout_of(&args.iter().map(String::as_str).collect::<Vec<_>>());
    }

    let remotes = server["remotes"].as_array().expect("remotes");
    assert_eq!(remotes.len(), 1);
    assert_eq!(str_of(&remotes[0], "type"), "streamable-http");
    // The default HTTP address of `serve`.
    assert_eq!(str_of(&remotes[0], "url"), "http://127.0.0.1:8090/mcp");
}

/// The systemd unit: hardened, running a `serve` command line this binary
/// accepts; and, where `systemd-analyze` is installed (CI must have it),
/// a unit systemd itself accepts.
#[test]
fn the_systemd_unit_is_hardened_and_verifies() {
    let path = repo_file("contrib/systemd/switchboard.service");
    let unit = std::fs::read_to_string(&path).expect("the systemd unit");
    let lines: Vec<&str> = unit
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    for setting in [
        "DynamicUser=yes",
        "StateDirectory=switchboard",
        "ProtectSystem=strict",
        "ProtectHome=yes",
        "PrivateTmp=yes",
        "NoNewPrivileges=yes",
        "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6",
        "SystemCallFilter=@system-service",
        "ExecReload=/bin/kill -HUP $MAINPID",
        "WantedBy=multi-user.target",
    ] {
        assert!(
            lines.contains(&setting),
            "{setting} missing from {}",
            path.display()
        );
    }
    let exec = lines
        .iter()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("ExecStart");
    let args: Vec<&str> = exec
        .strip_prefix("/usr/bin/switchboard ")
        .expect("ExecStart runs /usr/bin/switchboard")
        .split_whitespace()
        .collect();
    assert_eq!(&args[..3], ["serve", "--data-dir", "${STATE_DIRECTORY}"]);
    let state = tempfile::tempdir().unwrap();
    let mut check: Vec<&str> = args
        .iter()
        .map(|a| match *a {
            "${STATE_DIRECTORY}" => state.path().to_str().unwrap(),
            a => a,
        })
        .collect();
    check.push("--help");
    stdout_of(&check);

    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_err()
    {
        assert!(
            std::env::var_os("CI").is_none(),
            "systemd-analyze is missing: CI must verify the unit (apt-get install systemd)"
        );
        eprintln!("systemd-analyze is not installed; the unit was not verified");
        return;
    }
    // The unit as installed, with this build standing in for
    // /usr/bin/switchboard (verify checks that the program exists).
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("switchboard.service");
    std::fs::write(&copy, unit.replace("/usr/bin/switchboard", BIN)).unwrap();
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&copy)
        .output()
        .expect("run systemd-analyze");
    let report = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && report.trim().is_empty(),
        "systemd-analyze verify: {report}"
    );
}

/// `cargo install` builds the release profile: it must strip the binaries;
/// the benchmark's profiling build keeps line tables.
#[test]
fn release_builds_are_stripped_and_profiling_builds_are_not() {
    let manifest: toml::Table = std::fs::read_to_string(repo_file("Cargo.toml"))
        .unwrap()
        .parse()
        .unwrap();
    let profile = &manifest["profile"];
    let release = &profile["release"];
    assert!(
        release.get("strip").and_then(|s| s.as_str()) == Some("symbols")
            || release.get("strip").and_then(|s| s.as_bool()) == Some(true),
        "[profile.release] must strip: {release}"
    );
    let profiling = &profile["profiling"];
    assert_eq!(profiling["inherits"].as_str(), Some("release"));
    assert_eq!(profiling["debug"].as_str(), Some("line-tables-only"));
    assert_eq!(profiling["strip"].as_str(), Some("none"));
}
