//! `switchboard serve --profile imqueue` end to end: the real binary over
//! stdio with rmcp's client, its docs source pointed (by a `--config`
//! override) at a fixture copy of imqueue.org served on loopback, and a fake
//! `imq` on the PATH that records its argv.

mod common;
#[path = "../../docs/tests/common/mod.rs"]
mod docs_site;

use std::{os::unix::fs::PermissionsExt, path::PathBuf, time::Duration};

use common::{
    Client, Daemon, RawClient, Server, call, command, is_error, post_json, runtime_dir,
    stdio_client, stdio_client_of, stdio_client_with, switchboard, text,
};
use docs_site::TestSite;
use rmcp::model::{GetPromptRequestParams, ProtocolVersion, ReadResourceRequestParams};
use serde_json::{Value, json};
use switchboard_testkit::process::wait_gone;

/// The 13 tools of @imqueue/mcp, in the profile's order.
const IMQUEUE_TOOLS: [&str; 13] = [
    "search_docs",
    "get_doc",
    "list_packages",
    "scaffold_service",
    "scaffold_client",
    "cli_status",
    "cli_help",
    "cli_install",
    "create_service",
    "generate_client",
    "fleet",
    "config",
    "logs",
];

/// A fake `imq`: records each call's argv (one argument a line) and answers
/// the few commands the tests use. `log` starts a grandchild, and one in a
/// session of its own, and hangs, for the timeout test.
const FAKE_IMQ: &str = r#"#!/bin/sh
here=$(cd "$(dirname "$0")" && pwd)
{ for a in "$@"; do printf '%s\n' "$a"; done; printf -- '--end--\n'; } >> "$here/calls.log"
case "$1 $2" in
  "--version ") echo "4.2.0" ;;
  "log "*) setsid sh -c 'echo $$ > "$0/escapee.pid"; exec sleep 300' "$here" &
    sleep 300 & echo $! > "$here/grandchild.pid"; wait ;;
  "service create") echo "Plan for $3" ;;
  *) echo "imq $*" ;;
esac
"#;

/// The profile, its docs source on `site`, a fake `imq` in `bin`.
struct Setup {
    dir: tempfile::TempDir,
    site: TestSite,
}

impl Setup {
    async fn new(extra_config: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let imq = bin.join("imq");
        std::fs::write(&imq, FAKE_IMQ).unwrap();
        std::fs::set_permissions(&imq, std::fs::Permissions::from_mode(0o755)).unwrap();
        let site = TestSite::start().await;
        let config = format!(
            "[[docs.sources]]\nname = \"imqueue\"\nllms_txt = \"{}/llms.txt\"\nhttp_hosts = [\"127.0.0.1:{}\"]\ntimeout_s = 5\n{extra_config}\n",
            site.base(),
            site.port()
        );
        std::fs::write(dir.path().join("override.toml"), config).unwrap();
        Self { dir, site }
    }

    fn config_path(&self) -> PathBuf {
        self.dir.path().join("override.toml")
    }

    fn bin(&self) -> PathBuf {
        self.dir.path().join("bin")
    }

    async fn client(&self, with_imq: bool) -> Client {
        let path = if with_imq {
            format!("{}:/usr/bin:/bin", self.bin().display())
        } else {
            "/usr/bin:/bin".to_owned()
        };
        let config = self.config_path();
        stdio_client_with(
            &["--profile", "imqueue", "--config", config.to_str().unwrap()],
            &[("PATH", path.as_str())],
            ProtocolVersion::V_2025_11_25,
        )
        .await
    }

    /// Every argv the fake `imq` recorded.
    fn calls(&self) -> Vec<Vec<String>> {
        let log = std::fs::read_to_string(self.bin().join("calls.log")).unwrap_or_default();
        log.split("--end--\n")
            .filter(|call| !call.is_empty())
            .map(|call| call.lines().map(str::to_owned).collect())
            .collect()
    }
}

fn structured(result: &rmcp::model::CallToolResult) -> Value {
    result
        .structured_content
        .clone()
        .expect("structuredContent")
}

#[tokio::test]
async fn the_profile_serves_exactly_the_13_tools_in_under_20_kb() {
    let setup = Setup::new("").await;
    let client = setup.client(true).await;
    let tools = client.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, IMQUEUE_TOOLS);
    let bytes = serde_json::to_vec(&json!({ "tools": tools }))
        .unwrap()
        .len();
    assert!(bytes < 20 * 1024, "tools/list is {bytes} bytes");
    let info = client.peer_info().expect("initialize result");
    assert!(
        info.instructions
            .as_deref()
            .is_some_and(|i| i.contains("cli_status")),
        "{info:?}"
    );
    assert!(info.capabilities.resources.is_some() && info.capabilities.prompts.is_some());
}

/// A copy of the profile (its config and template files) in a directory of
/// its own, with `edit` applied to the config.
fn profile_copy(edit: impl Fn(&str) -> String) -> (tempfile::TempDir, PathBuf) {
    let profiles = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../profiles");
    let dir = tempfile::tempdir().unwrap();
    let templates = dir.path().join("imqueue");
    std::fs::create_dir(&templates).unwrap();
    for file in std::fs::read_dir(profiles.join("imqueue")).unwrap() {
        let file = file.unwrap().path();
        std::fs::copy(&file, templates.join(file.file_name().unwrap())).unwrap();
    }
    let config = std::fs::read_to_string(profiles.join("imqueue.toml")).unwrap();
    let path = dir.path().join("imqueue.toml");
    std::fs::write(&path, edit(&config)).unwrap();
    (dir, path)
}

#[tokio::test]
async fn without_instructions_in_the_config_each_toolset_gives_its_own() {
    let (_dir, config) = profile_copy(|config| {
        config
            .lines()
            .filter(|line| !line.starts_with("instructions ="))
            .collect::<Vec<_>>()
            .join("\n")
    });
    let client = stdio_client(
        &["--config", config.to_str().unwrap()],
        ProtocolVersion::V_2025_11_25,
    )
    .await;
    let info = client.peer_info().expect("initialize result");
    let instructions = info.instructions.as_deref().unwrap_or_default();
    for expected in [
        "Documentation of imqueue: search_docs",
        "get_doc",
        "list_packages list what can be installed",
        "scaffold_service, scaffold_client render code",
        "Run imq only through its tools (cli_status, cli_help, cli_install, create_service",
        "create_service",
        "apply: true",
        "cli_status says whether imq is installed",
    ] {
        assert!(
            instructions.contains(expected),
            "{expected:?} in {instructions}"
        );
    }
    // Chat is off in the profile: nothing about channels.
    assert!(!instructions.contains("send_message"), "{instructions}");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn docs_search_then_read_from_the_configured_site() {
    let setup = Setup::new("").await;
    let client = setup.client(true).await;
    let found = call(
        &client,
        "search_docs",
        json!({"query": "how do I expose a method"}),
    )
    .await;
    assert!(!is_error(&found), "{}", text(&found));
    let results = structured(&found)["results"].as_array().unwrap().clone();
    let top = results[0]["url"].as_str().unwrap().to_owned();
    assert!(
        top.contains("/docs/guides/exposing-methods/") || top.contains("/api/rpc/expose"),
        "top result {top}; all: {}",
        text(&found)
    );
    assert!(text(&found).contains(&top), "the text names the url");

    let page = call(&client, "get_doc", json!({"url": top, "max_chars": 2000})).await;
    assert!(!is_error(&page), "{}", text(&page));
    let page = structured(&page);
    assert!(!page["content"].as_str().unwrap().is_empty());
    assert!(page["end"].as_u64().unwrap() <= 2000);

    // The same page as an MCP resource.
    let read = client
        .read_resource(ReadResourceRequestParams::new(top.clone()))
        .await
        .unwrap();
    let body = serde_json::to_value(&read.contents[0]).unwrap();
    assert_eq!(body["uri"], json!(top));
    assert!(!body["text"].as_str().unwrap().is_empty());
    let templates = client.list_all_resource_templates().await.unwrap();
    assert!(!templates.is_empty());
    // The docs site is not contacted for anything else.
    assert!(setup.site.hits("/llms.txt") >= 1);
}

#[tokio::test]
async fn catalog_and_templates_answer_offline() {
    let setup = Setup::new("").await;
    let client = setup.client(false).await;
    let packages = text(&call(&client, "list_packages", json!({})).await);
    for name in [
        "rpc",
        "core",
        "cli",
        "job",
        "pg-pubsub",
        "pg-cache",
        "async-logger",
        "http-protect",
    ] {
        assert!(packages.contains(&format!("@imqueue/{name}")), "{name}");
    }
    assert!(packages.contains("npm i @imqueue/rpc"));

    let service = call(
        &client,
        "scaffold_service",
        json!({"name": "UserService", "methods": [
            {"name": "getUser", "params": [{"name": "id", "type": "string"}], "returns": "User"}
        ]}),
    )
    .await;
    let code = text(&service);
    assert!(!is_error(&service), "{code}");
    assert!(code.contains("extends IMQService") && code.contains("@expose()"));
    assert!(code.contains("getUser") && code.contains(".start()"));
    assert!(code.contains("imq service create"));

    let client_code = text(
        &call(
            &client,
            "scaffold_client",
            json!({"service": "UserService"}),
        )
        .await,
    );
    assert!(
        client_code.contains("imq client generate UserService"),
        "{client_code}"
    );

    // No imq on PATH: the CLI tools say how to install it.
    let status = call(&client, "cli_status", json!({})).await;
    let status_text = text(&status);
    assert!(
        status_text.contains("npm install -g @imqueue/cli"),
        "{status_text}"
    );
    let create = call(&client, "create_service", json!({"name": "user"})).await;
    assert!(text(&create).contains("npm install -g @imqueue/cli"));
    assert!(setup.calls().is_empty());
}

/// A loopback port nothing listens on: bound, then released.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

#[tokio::test]
async fn resources_list_answers_while_the_docs_site_is_unreachable() {
    let dir = tempfile::tempdir().unwrap();
    let port = closed_port();
    let config = dir.path().join("override.toml");
    std::fs::write(
        &config,
        format!(
            "[[docs.sources]]\nname = \"imqueue\"\nllms_txt = \"http://127.0.0.1:{port}/llms.txt\"\nhttp_hosts = [\"127.0.0.1:{port}\"]\ntimeout_s = 2\n"
        ),
    )
    .unwrap();
    let log = dir.path().join("switchboard.log");
    let client = stdio_client_with(
        &[
            "--profile",
            "imqueue",
            "--config",
            config.to_str().unwrap(),
            "--log-file",
            log.to_str().unwrap(),
        ],
        &[("PATH", "/usr/bin:/bin")],
        ProtocolVersion::V_2025_11_25,
    )
    .await;

    // A client listing resources at start-up gets an answer, not an error:
    // the source's llms.txt, and no pages, since none could be loaded.
    let resources = tokio::time::timeout(Duration::from_secs(20), client.list_all_resources())
        .await
        .expect("resources/list answers in time")
        .expect("resources/list succeeds");
    let uris: Vec<&str> = resources.iter().map(|r| r.uri.as_str()).collect();
    assert_eq!(uris, [format!("http://127.0.0.1:{port}/llms.txt")]);

    // The tools still say what is wrong.
    let found = call(&client, "search_docs", json!({"query": "expose a method"})).await;
    assert!(is_error(&found), "{}", text(&found));
    assert!(
        text(&found).contains("cannot load its llms.txt")
            && text(&found).contains("nothing answers at 127.0.0.1")
            && text(&found).contains("point the source's llms_txt at a local copy"),
        "{}",
        text(&found)
    );
    // And the listing's failure is in the log.
    let logged = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        logged.contains("WARN") && logged.contains("cannot load its llms.txt"),
        "log: {logged}"
    );
}

#[tokio::test]
async fn cli_actions_are_dry_runs_unless_applied_and_refuse_option_injection() {
    let setup = Setup::new("").await;
    let client = setup.client(true).await;
    let status = text(&call(&client, "cli_status", json!({})).await);
    assert!(status.contains("4.2.0"), "{status}");

    let dry = call(&client, "create_service", json!({"name": "user"})).await;
    assert!(!is_error(&dry), "{}", text(&dry));
    assert!(text(&dry).contains("Plan for user"));
    let applied = call(
        &client,
        "create_service",
        json!({"name": "user", "apply": true}),
    )
    .await;
    assert!(!is_error(&applied), "{}", text(&applied));
    let calls = setup.calls();
    let creates: Vec<&Vec<String>> = calls.iter().filter(|c| c[0] == "service").collect();
    assert_eq!(creates.len(), 2, "{calls:?}");
    assert!(creates[0].contains(&"--dry-run".to_owned()), "{calls:?}");
    assert!(!creates[1].contains(&"--dry-run".to_owned()), "{calls:?}");

    let before = setup.calls().len();
    for name in ["--help", "-rf"] {
        let refused = call(&client, "create_service", json!({"name": name})).await;
        assert!(is_error(&refused), "{name}: {}", text(&refused));
    }
    // The agent cannot lift a safety setting through a parameter.
    let sneaky = call(
        &client,
        "create_service",
        json!({"name": "user", "timeout_s": 999}),
    )
    .await;
    assert!(is_error(&sneaky), "{}", text(&sneaky));
    assert_eq!(setup.calls().len(), before, "nothing ran");
}

#[tokio::test]
async fn a_hung_cli_is_killed_with_its_process_group() {
    // The override shortens the profile's timeout: tables merge key by key.
    let setup = Setup::new("[commands]\ntimeout_s = 1\nkill_grace_s = 1\n").await;
    let client = setup.client(true).await;
    let started = std::time::Instant::now();
    let result = call(&client, "logs", json!({})).await;
    assert!(is_error(&result), "{}", text(&result));
    assert!(
        text(&result).contains("did not finish within 1 s"),
        "{}",
        text(&result)
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    let pid: i32 = std::fs::read_to_string(setup.bin().join("grandchild.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        wait_gone(pid, Duration::from_secs(5)),
        "grandchild {pid} was left running"
    );
    let escapee: i32 = std::fs::read_to_string(setup.bin().join("escapee.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        wait_gone(escapee, Duration::from_secs(5)),
        "the grandchild {escapee} in a session of its own was left running"
    );
}

/// A command cannot read switchboard's own environment (its tokens, what
/// `env_allow` does not pass on) through `/proc`. Nothing keeps root's
/// commands out, so as root the server runs as `nobody`.
#[tokio::test]
async fn a_command_cannot_read_switchboards_environment() {
    let dir = tempfile::tempdir().unwrap();
    let open = |path: &std::path::Path, mode: u32| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    };
    open(dir.path(), 0o755);
    let peek = dir.path().join("peek");
    std::fs::write(
        &peek,
        "#!/bin/sh\ntr '\\0' '\\n' < /proc/$PPID/environ || echo unreadable\n",
    )
    .unwrap();
    open(&peek, 0o755);
    let config = dir.path().join("peek.toml");
    std::fs::write(
        &config,
        format!(
            "[commands]\nprogram = \"{}\"\n[[commands.actions]]\ntool = \"peek\"\ndescription = \"Shows what it can see.\"\n",
            peek.display()
        ),
    )
    .unwrap();
    open(&config, 0o644);
    let args = [
        "--stdio",
        "--ephemeral",
        "--no-http",
        "--no-socket",
        "--config",
        config.to_str().unwrap(),
    ];
    let mut cmd = if unsafe { libc::geteuid() } == 0 {
        let mut cmd = tokio::process::Command::new("setpriv");
        cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(env!("CARGO_BIN_EXE_switchboard"))
            .arg("serve");
        cmd
    } else {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_switchboard"));
        cmd.arg("serve");
        cmd
    };
    cmd.args(args)
        .current_dir(dir.path())
        .env("SWITCHBOARD_HTTP_TOKEN", "secret-token-not-for-commands")
        .env("CLOUD_SECRET", "secret-key-not-for-commands")
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true);
    let client = stdio_client_of(cmd, ProtocolVersion::V_2025_06_18).await;
    let result = call(&client, "peek", json!({})).await;
    let output = result.structured_content.as_ref().unwrap()["output"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(output.contains("unreadable"), "{output}");
    assert!(!output.contains("not-for-commands"), "{output}");
    client.cancel().await.unwrap();
}

impl Setup {
    /// The pid of the grandchild the fake `imq log` starts, once it has.
    async fn grandchild(&self) -> i32 {
        let file = self.bin().join("grandchild.pid");
        for _ in 0..200 {
            if let Some(pid) = std::fs::read_to_string(&file)
                .ok()
                .and_then(|s| s.trim().parse().ok())
            {
                return pid;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("imq log never started its grandchild");
    }
}

/// A call the client cancels stops its command at once, not at its
/// timeout: on the direct stdio path (2025-11-25) and through rmcp's
/// request lifecycle (2026-07-28).
#[tokio::test]
async fn a_cancelled_cli_call_stops_its_command() {
    for version in [ProtocolVersion::V_2025_11_25, ProtocolVersion::V_2026_07_28] {
        let setup = Setup::new("[commands]\ntimeout_s = 120\n").await;
        let path = format!("{}:/usr/bin:/bin", setup.bin().display());
        let config = setup.config_path();
        let client = stdio_client_with(
            &["--profile", "imqueue", "--config", config.to_str().unwrap()],
            &[("PATH", path.as_str())],
            version.clone(),
        )
        .await;
        let request = rmcp::model::ClientRequest::CallToolRequest(
            rmcp::model::CallToolRequest::new(rmcp::model::CallToolRequestParams::new("logs")),
        );
        let handle = client
            .peer()
            .send_cancellable_request(request, rmcp::service::PeerRequestOptions::no_options())
            .await
            .unwrap();
        let pid = setup.grandchild().await;
        handle.cancel(None).await.unwrap();
        assert!(
            wait_gone(pid, Duration::from_secs(5)),
            "{version:?}: the cancelled call's grandchild {pid} was left running"
        );
        // The session goes on.
        let status = call(&client, "cli_status", json!({})).await;
        assert!(!is_error(&status), "{}", text(&status));
    }
}

/// The daemon serving the profile and an agent on a shim, as a desktop
/// host runs them: a call the agent's host cancels stops its command in the
/// daemon too (the shim passes the cancel on over the relay).
#[tokio::test]
async fn a_call_cancelled_through_the_shim_stops_its_command_in_the_daemon() {
    let setup = Setup::new("").await;
    let mut config = std::fs::read_to_string(setup.config_path()).unwrap();
    config.push_str(&format!(
        "[commands]\ntimeout_s = 120\n[commands.env]\nPATH = \"{}:/usr/bin:/bin\"\n",
        setup.bin().display()
    ));
    std::fs::write(setup.config_path(), config).unwrap();
    let runtime = runtime_dir();
    let socket = setup.dir.path().join("relay.sock");
    let config = setup.config_path();
    let daemon = Daemon::start(
        &socket,
        runtime.path(),
        &["--profile", "imqueue", "--config", config.to_str().unwrap()],
    )
    .await;
    let agent = RawClient::spawn(switchboard(
        &[
            "shim",
            "--socket",
            socket.to_str().unwrap(),
            "--nick",
            "worker",
        ],
        runtime.path(),
    ));
    agent.initialize().await;
    agent
        .send_line(r#"{"jsonrpc":"2.0","id":77,"method":"tools/call","params":{"name":"logs","arguments":{}}}"#)
        .await;
    let pid = setup.grandchild().await;
    agent
        .notify("notifications/cancelled", json!({"requestId": 77}))
        .await;
    assert!(
        wait_gone(pid, Duration::from_secs(5)),
        "the cancelled call's grandchild {pid} was left running\n{}",
        daemon.log()
    );
    // The session goes on.
    let status = agent.call("cli_status", json!({})).await;
    assert_eq!(status["isError"], false, "{status}");
    assert!(daemon.stop().await.success());
}

/// A stdio client that leaves while a command runs: switchboard waits a
/// while for the call (a client that piped its requests in gets the
/// replies), then stops the command and exits, rather than staying until
/// the command's own timeout. The call is sent once `initialize` is
/// answered (switchboard's direct path) and piped in with it (rmcp's).
#[tokio::test]
async fn a_client_that_leaves_does_not_keep_its_command_running() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    for piped in [false, true] {
        let setup = Setup::new("[commands]\ntimeout_s = 600\n").await;
        let path = format!("{}:/usr/bin:/bin", setup.bin().display());
        let config = setup.config_path();
        let mut child = command(&[
            "--stdio",
            "--profile",
            "imqueue",
            "--config",
            config.to_str().unwrap(),
        ])
        .env("PATH", &path)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let mut stdout = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
        stdin
            .write_all(format!("{initialize}\n").as_bytes())
            .await
            .unwrap();
        if !piped {
            stdout
                .next_line()
                .await
                .unwrap()
                .expect("the initialize reply");
        }
        let rest = [
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "logs", "arguments": {}}}),
        ];
        for line in rest {
            stdin
                .write_all(format!("{line}\n").as_bytes())
                .await
                .unwrap();
        }
        stdin.flush().await.unwrap();
        let pid = setup.grandchild().await;
        drop(stdin);
        let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
            .await
            .unwrap_or_else(|_| panic!("piped {piped}: switchboard stayed after its client left"))
            .unwrap();
        assert!(status.success(), "piped {piped}: {status}");
        assert!(
            wait_gone(pid, Duration::from_secs(5)),
            "piped {piped}: the command's grandchild {pid} outlived switchboard"
        );
    }
}

#[tokio::test]
async fn the_profile_prompt_renders_and_refuses_bad_arguments() {
    let setup = Setup::new("").await;
    let client = setup.client(true).await;
    let prompts = client.list_all_prompts().await.unwrap();
    assert_eq!(prompts[0].name, "author_service");
    let mut args = serde_json::Map::new();
    args.insert("name".into(), json!("BillingService"));
    let prompt = client
        .get_prompt(GetPromptRequestParams::new("author_service").with_arguments(args))
        .await
        .unwrap();
    let rendered = serde_json::to_string(&prompt.messages).unwrap();
    assert!(rendered.contains("BillingService") && rendered.contains("search_docs"));
    assert!(
        client
            .get_prompt(GetPromptRequestParams::new("author_service"))
            .await
            .is_err(),
        "a missing required argument is an error"
    );
    assert!(
        client
            .get_prompt(GetPromptRequestParams::new("no_such_prompt"))
            .await
            .is_err()
    );
    assert!(
        client
            .read_resource(ReadResourceRequestParams::new("https://evil.example/x"))
            .await
            .is_err()
    );
}

#[tokio::test]
async fn profile_errors_exit_2_naming_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let bad_key = dir.path().join("bad_key.toml");
    std::fs::write(&bad_key, "[docs]\npage_size = 5\n").unwrap();
    let bad_value = dir.path().join("bad_value.toml");
    std::fs::write(&bad_value, "[commands]\ntimeout_s = -1\n").unwrap();
    let clash = dir.path().join("clash.toml");
    std::fs::write(
        &clash,
        "[[catalog]]\ntool = \"search_docs\"\ndescription = \"x\"\n[[catalog.entries]]\nname = \"a\"\nsummary = \"b\"\ninstall = \"c\"\n",
    )
    .unwrap();
    let cases: [(Vec<&str>, &str); 4] = [
        (vec!["--profile", "rails"], "imqueue"),
        (
            vec![
                "--profile",
                "imqueue",
                "--config",
                bad_key.to_str().unwrap(),
            ],
            "page_size",
        ),
        (
            vec![
                "--profile",
                "imqueue",
                "--config",
                bad_value.to_str().unwrap(),
            ],
            "commands.timeout_s",
        ),
        (
            vec!["--profile", "imqueue", "--config", clash.to_str().unwrap()],
            "tool `search_docs` is offered by both",
        ),
    ];
    for (args, expected) in cases {
        let mut all = vec!["--stdio"];
        all.extend(args.iter());
        let output = tokio::time::timeout(Duration::from_secs(10), command(&all).output())
            .await
            .unwrap()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert!(output.stdout.is_empty());
    }
}

/// A daemon stopped while HTTP calls run: the drain waits for them, then
/// the transports stop and drop what still runs, on the direct path (a
/// plain `tools/call` naming 2025-06-18) and on rmcp's (no version header).
/// The process exits in bounded time and leaves no command behind.
#[tokio::test]
async fn stopping_the_daemon_stops_commands_that_http_calls_started() {
    for version in [Some("2025-06-18"), None] {
        let setup = Setup::new("[commands]\ntimeout_s = 120\n").await;
        let path = format!("{}:/usr/bin:/bin", setup.bin().display());
        let config = setup.config_path();
        let server = Server::start_with(
            &[
                "--profile",
                "imqueue",
                "--config",
                config.to_str().unwrap(),
                "--ephemeral",
            ],
            &[("PATH", path.as_str())],
        )
        .await;
        let url = server.url("/mcp");
        let mut request = post_json(&reqwest::Client::new(), &url)
            .body(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"logs","arguments":{}}}"#);
        if let Some(version) = version {
            request = request.header("mcp-protocol-version", version);
        }
        let call = tokio::spawn(request.send());
        let pid = setup.grandchild().await;
        server.signal(libc::SIGTERM);
        let log = server.log.clone();
        let status = server.exit(Duration::from_secs(30)).await;
        assert!(
            status.success(),
            "{version:?}: {status:?}\n{}",
            log.lock().unwrap()
        );
        assert!(
            wait_gone(pid, Duration::from_secs(5)),
            "{version:?}: the HTTP call's grandchild {pid} outlived the daemon\n{}",
            log.lock().unwrap()
        );
        // The client learns its call is over, one way or another.
        let _ = tokio::time::timeout(Duration::from_secs(5), call)
            .await
            .expect("the HTTP call was left hanging");
    }
}

/// `switchboard check` on the profile: the docs site and the program it
/// needs are found, or each is named with what to do.
#[tokio::test]
async fn check_reports_the_docs_site_and_the_program() {
    let setup = Setup::new("").await;
    let config = setup.config_path();
    // The site is served on this test's runtime: the check must not block it.
    let check = |path: String| {
        let mut cmd = tokio::process::Command::new(common::BIN);
        cmd.args(["check", "--profile", "imqueue", "--config"])
            .arg(&config)
            .args(["--stdio", "--ephemeral"])
            .env("PATH", path);
        for var in switchboard_testkit::process::ISOLATED_ENV {
            cmd.env_remove(var);
        }
        async move { cmd.output().await.unwrap() }
    };
    let found = check(format!("{}:/usr/bin:/bin", setup.bin().display())).await;
    let stdout = String::from_utf8_lossy(&found.stdout);
    assert!(found.status.success(), "{stdout}");
    assert!(
        stdout.contains(&format!(
            "ok    docs      imqueue: {}/llms.txt lists",
            setup.site.base()
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!(
            "ok    commands  found {}/imq",
            setup.bin().display()
        )),
        "{stdout}"
    );

    let missing = check("/usr/bin:/bin".to_owned()).await;
    let stdout = String::from_utf8_lossy(&missing.stdout);
    assert_eq!(missing.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("FAIL  commands  imq is not installed")
            && stdout.contains("Install it with `npm install -g @imqueue/cli@latest`"),
        "{stdout}"
    );
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("1 check failed"),
        "{missing:?}"
    );
}
