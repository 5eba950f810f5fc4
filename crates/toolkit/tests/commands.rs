//! The commands runner against a fake CLI that misbehaves on request: it
//! sleeps with a grandchild that ignores SIGTERM, prompts on stdin and on
//! /dev/tty, floods its output, dumps its environment, leaves a daemon.

mod common;

use std::{
    path::Path,
    time::{Duration, Instant},
};

use common::{call, path_with, read_pid, script};
use serde_json::{Value, json};
use switchboard_testkit::process::{gone, wait_gone};
use switchboard_toolkit::{CommandTools, CommandsConfig};
use switchboard_toolset::{ToolOutput, Toolset};

const FAKE: &str = r#"here=$(cd "$(dirname "$0")" && pwd)
case "$1" in
  echo) shift; for a in "$@"; do printf '[%s]\n' "$a"; done ;;
  tree)
    (trap '' TERM; exec sleep 60) &
    echo $! > "$here/grandchild.pid"
    echo "started"
    sleep 60 ;;
  service)
    sleep 30 &
    echo $! > "$here/service.pid"
    echo "service started" ;;
  daemon)
    sleep 30 > /dev/null 2>&1 &
    echo $! > "$here/daemon.pid"
    echo "daemon started" ;;
  prompt)
    printf 'Project name? '
    if read answer; then echo "got [$answer]"; else echo "no answer (EOF)"; exit 3; fi ;;
  ttyprompt)
    printf 'Password: '
    read answer < /dev/tty
    echo "tty gave [$answer]"; exit 4 ;;
  flood)
    yes 'flood line' | head -c 1000000
    echo
    # Two pipes have no common order: let the reader drain stdout first.
    sleep 0.3
    echo "tail on stderr" >&2
    sleep 0.3
    echo "THE-END" ;;
  env) env ;;
  pwd) pwd -P ;;
  exit) echo "failing"; exit 7 ;;
  signal) kill -9 $$ ;;
esac
"#;

const CONFIG: &str = r#"
program = "fake"
timeout_s = 20
kill_grace_s = 0.5
max_output_bytes = 4096

[env]
DECLARED = "yes"

[[actions]]
tool = "run"
description = "Runs the fake."
argv = ["{behaviour}", { each = "args" }]
[actions.input_schema]
required = ["behaviour"]
properties.behaviour = { enum = ["echo", "tree", "service", "daemon", "prompt", "ttyprompt", "flood", "env", "exit", "signal"] }
properties.args = { type = "array", items = { type = "string" } }

[[actions]]
tool = "hurry"
description = "Runs the fake with a 2 s timeout."
argv = ["{behaviour}"]
timeout_s = 2
[actions.input_schema]
required = ["behaviour"]
properties.behaviour = { enum = ["tree", "prompt"] }

[[actions]]
tool = "write"
description = "Echoes a file name."
argv = ["echo", "{file}"]
[actions.input_schema]
required = ["file"]
properties.file = { type = "string" }

[[actions]]
tool = "where"
description = "Prints where it runs."
argv = ["pwd"]
cwd = "{dir}"
[actions.input_schema]
required = ["dir"]
properties.dir = { type = "string" }
"#;

struct Fake {
    dir: tempfile::TempDir,
    tools: CommandTools,
}

fn fake_with(extra_env: &[(&str, &str)]) -> Fake {
    let dir = tempfile::tempdir().unwrap();
    script(dir.path(), "fake", FAKE);
    let config: CommandsConfig = toml::from_str(CONFIG).unwrap();
    let mut env = vec![
        ("PATH".to_owned(), path_with(dir.path())),
        ("HOME".to_owned(), dir.path().display().to_string()),
        ("LANG".to_owned(), "C.UTF-8".to_owned()),
    ];
    env.extend(
        extra_env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    let tools = CommandTools::with_environment(&config, dir.path(), env).unwrap();
    Fake { dir, tools }
}

fn fake() -> Fake {
    fake_with(&[])
}

impl Fake {
    async fn run(&self, behaviour: &str, args: &[&str]) -> ToolOutput {
        call(
            &self.tools,
            "run",
            json!({"behaviour": behaviour, "args": args}),
        )
        .await
        .unwrap_or_else(|e| panic!("{behaviour}: {e}"))
    }

    fn pid(&self, name: &str) -> i32 {
        read_pid(&self.dir.path().join(name))
    }
}

/// A relative `cwd` is reported as the directory the command ran in.
#[tokio::test]
async fn the_reported_cwd_is_where_the_command_ran() {
    let f = fake();
    let sub = f.dir.path().join("sub");
    std::fs::create_dir(&sub).unwrap();
    let out = call(
        &f.tools,
        "where",
        json!({"dir": format!("{}/..", sub.display())}),
    )
    .await
    .unwrap();
    let ran_in = out.structured["output"].as_str().unwrap().trim_end();
    assert_eq!(out.structured["cwd"], ran_in);
    assert_eq!(
        ran_in,
        f.dir.path().canonicalize().unwrap().display().to_string()
    );
    let err = call(&f.tools, "where", json!({"dir": "/definitely/not/here"}))
        .await
        .unwrap_err();
    assert!(err.message().contains("is not a directory"), "{err}");
}

#[tokio::test]
async fn arguments_reach_the_program_verbatim_without_a_shell() {
    let f = fake();
    let tricky = [
        "a b",
        "$HOME",
        "; rm -rf /",
        "'quoted'",
        "*",
        "`id`",
        "line\nbreak",
        "ünï",
    ];
    let out = f.run("echo", &tricky).await;
    let expected: String = tricky.iter().map(|a| format!("[{a}]\n")).collect();
    assert_eq!(out.structured["output"], expected);
    assert_eq!(out.structured["exit_code"], 0);
    assert_eq!(out.structured["mode"], "run");
    assert_eq!(out.structured["command"][0], "fake");
    assert_eq!(out.structured["command"][2], "a b");
    // No working directory configured: it runs, and says it runs, where
    // switchboard does.
    let here = std::env::current_dir().unwrap();
    assert_eq!(out.structured["cwd"], here.display().to_string());
    assert!(
        out.text
            .starts_with("`fake echo 'a b' '$HOME' '; rm -rf /' ''\\''quoted'\\''' '*'"),
        "{}",
        out.text
    );
}

#[tokio::test]
async fn a_timeout_kills_the_whole_process_group_and_leaves_no_orphan() {
    let f = fake();
    let start = Instant::now();
    let err = call(&f.tools, "hurry", json!({"behaviour": "tree"}))
        .await
        .unwrap_err();
    let elapsed = start.elapsed();
    assert!(
        err.message().starts_with(
            "`fake tree` did not finish within 2 s and was stopped (SIGTERM to its whole process group, SIGKILL 0.5 s later)."
        ),
        "{err}"
    );
    assert!(
        err.message().ends_with("started"),
        "the output so far is shown: {err}"
    );
    // 2 s timeout + 0.5 s grace (the grandchild ignores SIGTERM) + slack.
    assert!(elapsed >= Duration::from_millis(2400), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(6), "{elapsed:?}");
    let grandchild = f.pid("grandchild.pid");
    assert!(
        wait_gone(grandchild, Duration::from_secs(3)),
        "grandchild {grandchild} survived"
    );
}

#[tokio::test]
async fn a_program_that_exits_leaving_a_service_holding_its_output_returns() {
    let f = fake();
    let start = Instant::now();
    let out = f.run("service", &[]).await;
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "it waited for the service"
    );
    assert!(out.text.contains("service started"), "{}", out.text);
    assert!(out.text.contains("left running"), "{}", out.text);
    assert_eq!(out.structured["exit_code"], json!(0));
    assert_eq!(out.structured["left_running"], json!(true));
    let service = f.pid("service.pid");
    assert!(!gone(service), "the service was killed");
    // SAFETY: kill(2) with a pid this test's fake started.
    unsafe { libc::kill(service, libc::SIGKILL) };
}

#[tokio::test]
async fn a_cancelled_call_kills_the_group_too() {
    let f = fake();
    let pid_file = f.dir.path().join("grandchild.pid");
    let mut running = Box::pin(call(&f.tools, "run", json!({"behaviour": "tree"})));
    let start = Instant::now();
    // Poll the call until the grandchild exists, then drop the call.
    while std::fs::read_to_string(&pid_file).map_or(true, |t| t.trim().is_empty()) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the fake never started"
        );
        tokio::select! {
            outcome = &mut running => panic!("the call ended early: {outcome:?}"),
            () = tokio::time::sleep(Duration::from_millis(20)) => {}
        }
    }
    drop(running); // cancels the call: the future is gone
    let grandchild = f.pid("grandchild.pid");
    assert!(
        wait_gone(grandchild, Duration::from_secs(3)),
        "grandchild {grandchild} survived the cancelled call"
    );
}

#[tokio::test]
async fn a_normal_exit_leaves_background_processes_alone() {
    let f = fake();
    let out = f.run("daemon", &[]).await;
    assert_eq!(out.structured["exit_code"], 0);
    let daemon = f.pid("daemon.pid");
    assert!(
        !gone(daemon),
        "a service started in the background keeps running"
    );
    std::process::Command::new("kill")
        .arg(daemon.to_string())
        .status()
        .unwrap();
    assert!(wait_gone(daemon, Duration::from_secs(3)));
}

#[tokio::test]
async fn prompts_fail_fast_instead_of_hanging() {
    let f = fake();
    let start = Instant::now();
    let out = f.run("prompt", &[]).await;
    assert!(start.elapsed() < Duration::from_secs(5));
    assert_eq!(out.structured["exit_code"], 3);
    assert_eq!(out.structured["output"], "Project name? no answer (EOF)\n");
    assert!(
        out.text
            .starts_with("`fake prompt` failed with exit code 3.")
    );

    // No controlling terminal either: /dev/tty cannot be opened.
    let start = Instant::now();
    let out = f.run("ttyprompt", &[]).await;
    assert!(start.elapsed() < Duration::from_secs(5));
    let output = out.structured["output"].as_str().unwrap();
    assert!(
        output.contains("/dev/tty"),
        "the shell says it cannot open it: {output}"
    );
    assert!(output.contains("tty gave []"), "{output}");

    // Even with the shortest timeout a prompt is an answer, not a timeout.
    let out = call(&f.tools, "hurry", json!({"behaviour": "prompt"}))
        .await
        .unwrap();
    assert_eq!(out.structured["exit_code"], 3);
}

#[tokio::test]
async fn output_is_capped_to_its_tail_and_says_how_much_was_dropped() {
    let f = fake();
    let out = f.run("flood", &[]).await;
    let total = 1_000_000 + "\nTHE-END\n".len() + "tail on stderr\n".len();
    let kept = out.structured["output"].as_str().unwrap();
    assert_eq!(kept.len(), 4096);
    assert_eq!(out.structured["truncated_bytes"], (total - 4096) as u64);
    assert!(
        kept.ends_with("tail on stderr\nTHE-END\n"),
        "the end is kept, stderr too: {kept}"
    );
    assert!(
        out.text.contains(&format!(
            "[output truncated: the first {} bytes were dropped; the rest follows]\n",
            total - 4096
        )),
        "{}",
        &out.text[..200]
    );
}

#[tokio::test]
async fn the_child_sees_only_the_allow_list_and_declared_variables() {
    let f = fake_with(&[
        ("SECRET_TOKEN", "hunter2"),
        ("AWS_SECRET_ACCESS_KEY", "wJalr"),
        ("TERM", "xterm"),
    ]);
    let out = f.run("env", &[]).await;
    let env = out.structured["output"].as_str().unwrap();
    assert!(!env.contains("hunter2") && !env.contains("SECRET"), "{env}");
    assert!(!env.contains("wJalr"), "{env}");
    assert!(env.contains("DECLARED=yes\n"), "{env}");
    assert!(env.contains("TERM=xterm\n"), "{env}");
    assert!(env.contains("LANG=C.UTF-8\n"), "{env}");
    assert!(
        env.contains(&format!("PATH={}\n", path_with(f.dir.path()))),
        "{env}"
    );
}

#[tokio::test]
async fn exit_codes_and_signals_are_reported() {
    let f = fake();
    let out = f.run("exit", &[]).await;
    assert_eq!(out.structured["exit_code"], 7);
    assert!(
        out.text
            .starts_with("`fake exit` failed with exit code 7.\n\nfailing")
    );
    let out = f.run("signal", &[]).await;
    assert_eq!(out.structured["signal"], 9);
    assert_eq!(out.structured["exit_code"], Value::Null);
    assert!(
        out.text
            .starts_with("`fake signal` was killed by signal 9.")
    );
}

#[tokio::test]
async fn bad_input_is_refused_with_a_clear_error() {
    let f = fake();
    for (args, needle) in [
        (json!({}), "\"behaviour\" is a required property"),
        (json!({"behaviour": "rm"}), "(at /behaviour)"),
        (
            json!({"behaviour": "echo", "args": ["-rf"]}),
            "args: `-rf` starts with `-`",
        ),
        (
            json!({"behaviour": "echo", "args": ["a\u{0}b"]}),
            "args[0] contains a NUL character",
        ),
        (
            json!({"behaviour": "echo", "apply": true}),
            "unknown parameter `apply` for run",
        ),
        (
            json!({"behaviour": "echo", "timeout_s": 999}),
            "unknown parameter `timeout_s`",
        ),
    ] {
        let err = call(&f.tools, "run", args.clone()).await.unwrap_err();
        assert!(err.message().contains(needle), "{args}: {err}");
    }
    // An empty required text would be no argument at all, and the next
    // one would take its place.
    let err = call(&f.tools, "write", json!({"file": ""}))
        .await
        .unwrap_err();
    assert_eq!(
        err.message(),
        "write: file is required and must not be empty"
    );
    // An undeclared name never reaches the toolset: the registry finds no
    // tool by it and the transport answers "unknown tool".
    assert!(f.tools.tool_id("nope").is_none());
}

#[tokio::test]
async fn a_program_that_cannot_start_is_a_clear_error() {
    let f = fake();
    std::fs::write(f.dir.path().join("fake"), "#!/nonexistent/interpreter\n").unwrap();
    let err = call(&f.tools, "run", json!({"behaviour": "env"}))
        .await
        .unwrap_err();
    let fake = f.dir.path().join("fake");
    assert!(
        err.message()
            .starts_with(&format!("could not start {}:", Path::new(&fake).display())),
        "{err}"
    );
}
