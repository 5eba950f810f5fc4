//! The imqueue profile's 11 catalog, template and command tools, from the
//! repository's `profiles/imqueue.toml`, against a fake `imq` (and `npm`) on
//! the PATH the commands toolset gives its children.

mod common;

use std::{
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use common::{RECORD, call, calls, path_with, script};
use serde_json::{Value, json};
use switchboard_toolkit::{CatalogTools, CommandTools, TemplateTools, ToolkitConfig};

/// The profile's directory: template paths in the profile start here.
fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../profiles")
}

/// The profile's toolkit sections (the rest of it configures switchboard).
fn config() -> ToolkitConfig {
    let text = std::fs::read_to_string(fixtures().join("imqueue.toml")).unwrap();
    let mut profile: toml::Table = text.parse().unwrap();
    let mut toolkit = toml::Table::new();
    for key in ["catalog", "templates", "commands", "prompts"] {
        if let Some(value) = profile.remove(key) {
            toolkit.insert(key.into(), value);
        }
    }
    toolkit.try_into().unwrap()
}

/// A fake `imq` that records each call and answers a few commands.
const FAKE_IMQ: &str = r#"
case " $* " in
  *" --help "*) echo "imq $* -- usage: imq service create [name] [path] [--dry-run]"; exit 0 ;;
esac
case "$1 $2" in
  "--version ") echo "4.2.0" ;;
  "ctl status") echo "UserService: running (pid 4242)" ;;
  "config check") echo "Config is not initialized"; exit 1 ;;
  "service create")
    case " $* " in
      *" --dry-run "*) echo "Plan: create service $3 (dry run, nothing written)" ;;
      *) echo "Created service $3" ;;
    esac ;;
  *) echo "imq $*" ;;
esac
"#;

struct Fixture {
    dir: tempfile::TempDir,
    commands: CommandTools,
}

impl Fixture {
    /// The commands toolset with `bin` (holding whatever fakes the test
    /// wrote) first on the children's PATH.
    fn new(with_imq: bool) -> Self {
        let dir = tempfile::tempdir().unwrap();
        if with_imq {
            script(dir.path(), "imq", &format!("{RECORD}{FAKE_IMQ}"));
        }
        let commands = config().commands.unwrap();
        let env = [
            ("PATH".to_owned(), path_with(dir.path())),
            ("HOME".to_owned(), dir.path().display().to_string()),
        ];
        let commands = CommandTools::with_environment(&commands, &fixtures(), env).unwrap();
        Self { dir, commands }
    }

    async fn ok(&self, tool: &str, args: Value) -> switchboard_toolset::ToolOutput {
        call(&self.commands, tool, args)
            .await
            .unwrap_or_else(|e| panic!("{tool}: {e}"))
    }

    async fn err(&self, tool: &str, args: Value) -> String {
        match call(&self.commands, tool, args).await {
            Ok(out) => panic!("{tool} should have failed but said: {}", out.text),
            Err(e) => e.message().to_owned(),
        }
    }

    fn calls(&self) -> Vec<Vec<String>> {
        calls(self.dir.path())
    }

    /// The last call's argv, without the recorded cwd.
    fn last_argv(&self) -> Vec<String> {
        let mut last = self.calls().pop().expect("imq was called");
        last.retain(|a| !a.starts_with("cwd="));
        last
    }
}

#[test]
fn the_fixture_declares_the_eleven_tools_with_honest_annotations() {
    let config = config();
    let toolkit = config.build(&fixtures()).unwrap();
    assert_eq!(toolkit.prompts.iter().count(), 1);
    let sets = toolkit.toolsets;
    let tools: Vec<_> = sets.iter().flat_map(|s| s.tools()).collect();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(
        names,
        [
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
            "logs"
        ]
    );
    let tool = |name: &str| tools.iter().find(|t| t.name == name).unwrap();
    let hints = |name: &str| {
        let a = tool(name).annotations.clone().unwrap();
        (
            a.read_only_hint.unwrap(),
            a.destructive_hint.unwrap(),
            a.open_world_hint.unwrap(),
        )
    };
    assert_eq!(hints("list_packages"), (true, false, false));
    assert_eq!(hints("scaffold_service"), (true, false, false));
    assert_eq!(hints("cli_status"), (true, false, true));
    assert_eq!(hints("cli_help"), (true, false, true));
    assert_eq!(hints("generate_client"), (false, false, true));
    for mutating in ["cli_install", "create_service", "fleet", "config", "logs"] {
        assert_eq!(hints(mutating), (false, true, true), "{mutating}");
        assert!(
            tool(mutating).input_schema["properties"]
                .get("apply")
                .is_some(),
            "{mutating} offers apply"
        );
    }
    for plain in ["cli_help", "generate_client", "scaffold_service"] {
        assert!(
            tool(plain).input_schema["properties"]
                .get("apply")
                .is_none()
        );
    }
    // The reference's parameter names.
    let params = |name: &str| {
        let mut p: Vec<String> = tool(name).input_schema["properties"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        p.sort();
        p
    };
    assert_eq!(
        params("create_service"),
        ["apply", "cwd", "flags", "name", "path"]
    );
    assert_eq!(
        params("fleet"),
        [
            "action", "apply", "calm", "cwd", "path", "services", "update", "verbose"
        ]
    );
    assert_eq!(
        params("config"),
        ["action", "apply", "cwd", "option", "value"]
    );
    assert_eq!(
        params("logs"),
        ["action", "apply", "cwd", "prefix", "services"]
    );
    assert_eq!(params("generate_client"), ["cwd", "path", "service"]);
    assert_eq!(params("cli_install"), ["apply", "version"]);
    assert_eq!(params("cli_help"), ["command"]);
    assert_eq!(params("scaffold_client"), ["methods", "service"]);
}

#[tokio::test]
async fn list_packages_is_a_readable_list_with_structure() {
    let catalog = CatalogTools::new(&config().catalog).unwrap();
    let out = call(&catalog, "list_packages", json!({})).await.unwrap();
    assert!(
        out.text
            .starts_with("# @imqueue packages\n\n- **@imqueue/rpc** — ")
    );
    assert!(out.text.contains("  `npm i -g @imqueue/cli`"));
    assert!(
        out.text
            .contains("Pick: Mutually exclusive with @imqueue/pg-sequelize")
    );
    assert!(
        out.text
            .ends_with("Full ecosystem and docs: https://imqueue.org")
    );
    assert_eq!(out.structured["entries"][0]["name"], "@imqueue/rpc");
    assert_eq!(
        out.structured["entries"][0]["install"],
        "npm i @imqueue/rpc"
    );
}

fn templates() -> TemplateTools {
    TemplateTools::new(&config().templates, &fixtures()).unwrap()
}

#[tokio::test]
async fn scaffold_service_emits_an_exposed_jsdoc_typed_service_and_a_bootstrap() {
    let out = call(
        &templates(),
        "scaffold_service",
        json!({
            "name": "user",
            "methods": [
                {
                    "name": "getUser",
                    "description": "Returns a user by id */ sneaky",
                    "params": [
                        {"name": "id", "type": "number", "description": "User id"},
                        {"name": "withRoles", "type": "boolean", "optional": true}
                    ],
                    "returns": "User"
                },
                {"name": "ping"},
                {"name": "list", "params": [{"name": "filter", "type": "UserFilter[]"}], "returns": "User[]"}
            ]
        }),
    )
    .await
    .unwrap();
    let text = &out.text;
    assert!(text.contains("**UserService.ts**"), "{text}");
    assert!(text.contains("import { IMQService, expose } from '@imqueue/rpc';"));
    assert!(
        text.contains("import { User, UserFilter } from './types';"),
        "{text}"
    );
    assert!(text.contains("export class UserService extends IMQService {"));
    assert!(text.contains(
        "    /**\n     * Returns a user by id *\\/ sneaky\n     *\n     * @param {number} id - User id\n     * @param {boolean} [withRoles] - boolean\n     * @return {Promise<User>}\n     */\n    @expose()\n    public async getUser(id: number, withRoles?: boolean): Promise<User> {\n        // TODO: implement\n        throw new Error('getUser() is not implemented yet');\n    }"
    ), "{text}");
    assert!(text.contains(
        "     * ping\n     *\n     * @return {Promise<void>}\n     */\n    @expose()\n    public async ping(): Promise<void> {\n        // TODO: implement\n    }"
    ), "{text}");
    assert!(text.contains("public async list(filter: UserFilter[]): Promise<User[]> {"));
    assert_eq!(text.matches("    @expose()\n").count(), 3);
    // The bootstrap starts it.
    assert!(text.contains("import { UserService } from './UserService';"));
    assert!(text.contains("    const service = new UserService();\n    await service.start();"));
    // Classes named in signatures get declarations to complete.
    assert!(text.contains("**types.ts**"));
    assert!(text.contains("@classType()\nexport class User {"));
    assert!(text.contains("@classType()\nexport class UserFilter {"));
    // And the real thing is pointed at.
    assert!(text.contains("use the CLI instead: `imq service create user`"));
    assert_eq!(out.structured["command"], "imq service create user");
    assert_eq!(out.structured["text"], *text);
    // Balanced braces: the class and every method close.
    let code = text.split("```typescript").nth(1).unwrap();
    assert_eq!(
        code.matches('{').count(),
        code.matches('}').count(),
        "{code}"
    );
}

/// Classes inside compound types are declared too (`User | null` is the
/// docs' own example); TypeScript's own generics are not; a return given as
/// `Promise<…>` is not wrapped twice.
#[tokio::test]
async fn scaffold_service_declares_the_classes_inside_compound_types() {
    let out = call(
        &templates(),
        "scaffold_service",
        json!({
            "name": "user-auth",
            "methods": [
                {
                    "name": "find",
                    "returns": "User | null",
                    "params": [
                        {"name": "id", "type": "string"},
                        {"name": "opts", "type": "Partial<FindOptions>", "optional": true}
                    ]
                },
                {"name": "all", "returns": "Promise<Array<Account>>"},
                {"name": "tags", "returns": "Record<string, 'A' | 'B'>"}
            ]
        }),
    )
    .await
    .unwrap();
    let text = &out.text;
    assert!(
        text.contains("import { User, FindOptions, Account } from './types';"),
        "{text}"
    );
    for class in ["User", "FindOptions", "Account"] {
        assert!(
            text.contains(&format!("@classType()\nexport class {class} {{")),
            "{class}: {text}"
        );
    }
    assert!(!text.contains("class Partial") && !text.contains("class Record"));
    assert!(
        text.contains(
            "public async find(id: string, opts?: Partial<FindOptions>): Promise<User | null> {"
        ),
        "{text}"
    );
    assert!(
        text.contains("public async all(): Promise<Array<Account>> {"),
        "{text}"
    );
}

/// What the schema lets through but TypeScript would not compile is
/// refused, naming the argument and the fix.
#[tokio::test]
async fn scaffold_service_refuses_what_would_not_compile() {
    let t = templates();
    for (methods, says) in [
        (
            json!([{"name": "a", "params": [
                {"name": "x", "type": "string", "optional": true},
                {"name": "y", "type": "string"}
            ]}]),
            "put optional parameters last",
        ),
        (json!([{"name": "a"}, {"name": "a"}]), "listed twice"),
        (
            json!([{"name": "a", "params": [
                {"name": "x", "type": "string"},
                {"name": "x", "type": "number"}
            ]}]),
            "two parameters named x",
        ),
    ] {
        let e = call(
            &t,
            "scaffold_service",
            json!({"name": "s", "methods": methods}),
        )
        .await
        .unwrap_err();
        assert!(e.message().contains(says), "{}", e.message());
        assert!(!e.message().contains("template error"), "{}", e.message());
        assert_eq!(e.structured().unwrap()["invalid_argument"], "methods");
    }
}

#[tokio::test]
async fn scaffold_service_without_methods_is_a_working_starter() {
    let out = call(
        &templates(),
        "scaffold_service",
        json!({"name": "OrderService"}),
    )
    .await
    .unwrap();
    let text = &out.text;
    assert!(text.contains("export class OrderService extends IMQService {"));
    assert!(text.contains(
        "     * @param {string} name - Who to greet\n     * @return {Promise<string>}\n     */\n    @expose()\n    public async hello(name: string): Promise<string> {\n        return `Hello, ${name}!`;\n    }\n}"
    ), "{text}");
    assert!(!text.contains("types.ts"));
    assert!(!text.contains("./types"));
    assert!(text.contains("`imq service create OrderService`"));
}

#[tokio::test]
async fn scaffold_client_gives_the_generate_command_and_a_snippet_never_a_client() {
    let out = call(
        &templates(),
        "scaffold_client",
        json!({"service": "user", "methods": [{"name": "getUser", "params": [{"name": "id", "type": "number"}, {"name": "deep", "type": "boolean"}]}]}),
    )
    .await
    .unwrap();
    let text = &out.text;
    assert_eq!(
        out.structured["command"],
        "imq client generate UserService ./clients"
    );
    assert!(text.contains("```bash\n# with UserService running (and Redis reachable):\nimq client generate UserService ./clients\n```"), "{text}");
    assert!(text.contains("import { userService } from './clients/UserService';"));
    assert!(text.contains("const client = new userService.UserClient();"));
    assert!(
        text.contains("await client.getUser(/* id: number */, /* deep: boolean */);"),
        "{text}"
    );
    assert!(!text.contains("extends IMQClient"), "no fabricated client");
    assert!(!text.contains("@remote"), "no fabricated client");
    let bare = call(
        &templates(),
        "scaffold_client",
        json!({"service": "OrderService"}),
    )
    .await
    .unwrap();
    assert!(
        bare.text
            .contains("await client.hello(/* name: string */);")
    );
    assert!(
        bare.text
            .contains("imq client generate OrderService ./clients")
    );
    // A misspelt key in a method is refused, as scaffold_service refuses it.
    let misspelt = call(
        &templates(),
        "scaffold_client",
        json!({"service": "user", "methods": [{"name": "find", "param": []}]}),
    )
    .await
    .unwrap_err();
    assert_eq!(
        misspelt.structured().unwrap()["invalid_argument"],
        "methods"
    );
}

#[tokio::test]
async fn scaffolds_refuse_bad_input_with_clear_errors() {
    let t = templates();
    let err = |args: Value| {
        let t = &t;
        async move {
            call(t, "scaffold_service", args)
                .await
                .unwrap_err()
                .message()
                .to_owned()
        }
    };
    let e = err(json!({"name": "--help"})).await;
    assert!(
        e.contains("does not match") && e.contains("(at /name)"),
        "{e}"
    );
    let e = err(json!({"name": "x", "methods": "getUser"})).await;
    assert!(e.contains("is not of type \"array\" (at /methods)"), "{e}");
    let e = err(json!({"name": "x", "methods": [{"name": "a b"}]})).await;
    assert!(e.contains("(at /methods/0/name)"), "{e}");
    let e = err(json!({"name": "x", "methods": [{"name": "a", "params": [{"name": "p"}]}]})).await;
    assert!(e.contains("\"type\" is a required property"), "{e}");
    let e = err(json!({"name": "x", "method": []})).await;
    assert_eq!(
        e,
        "unknown parameter `method` for scaffold_service; it takes: methods, name"
    );
    let e = err(json!({})).await;
    assert!(e.contains("\"name\" is a required property"), "{e}");
}

#[tokio::test]
async fn create_service_is_a_dry_run_unless_applied() {
    let f = Fixture::new(true);
    let out = f.ok("create_service", json!({"name": "user"})).await;
    assert_eq!(f.last_argv(), ["service", "create", "user", "--dry-run"]);
    assert_eq!(out.structured["mode"], "dry_run");
    assert_eq!(out.structured["ran"], true);
    assert_eq!(out.structured["exit_code"], 0);
    assert!(out.text.starts_with("Dry run (nothing was changed): `imq service create user --dry-run` exited with code 0. Call create_service again with apply: true"), "{}", out.text);
    assert!(
        out.text
            .contains("Plan: create service user (dry run, nothing written)")
    );
    // `--author` takes a value: last, it must not take `--dry-run` for it.
    f.ok(
        "create_service",
        json!({"name": "user", "flags": ["--author"]}),
    )
    .await;
    assert_eq!(
        f.last_argv(),
        ["service", "create", "user", "--dry-run", "--author"]
    );

    let out = f
        .ok(
            "create_service",
            json!({"name": "user", "path": "services/user", "flags": ["--vcs", "github", "-D", "--packages=job"], "apply": true}),
        )
        .await;
    assert_eq!(
        f.last_argv(),
        [
            "service",
            "create",
            "user",
            "services/user",
            "--yes",
            "--vcs",
            "github",
            "-D",
            "--packages=job"
        ]
    );
    assert_eq!(out.structured["mode"], "apply");
    assert!(out.text.starts_with("Ran for real: `imq service create user services/user --yes --vcs github -D --packages=job` exited with code 0."), "{}", out.text);
    assert!(out.text.contains("Created service user"));
    assert_eq!(
        out.structured["program"],
        f.dir.path().join("imq").display().to_string()
    );
}

#[tokio::test]
async fn option_injection_is_refused_before_anything_runs() {
    let f = Fixture::new(true);
    for (args, needle) in [
        (json!({"name": "--help"}), "does not match"),
        (json!({"name": "-rf"}), "does not match"),
        (
            json!({"name": "user", "path": "--help"}),
            "path: `--help` starts with `-`",
        ),
        (
            json!({"name": "user", "path": "-rf"}),
            "path: `-rf` starts with `-`",
        ),
        (
            json!({"name": "user", "flags": ["--"]}),
            "flags[0]: `--` is not an option",
        ),
        (
            json!({"name": "user", "flags": ["--no-dry-run"], "apply": false}),
            "`--no-dry-run` is not an option",
        ),
        (
            json!({"name": "user", "flags": ["--dry-run=false"]}),
            "`--dry-run=false` is not an option",
        ),
        (
            json!({"name": "user", "flags": ["--github-token", "x"]}),
            "`--github-token` is not an option",
        ),
        (
            json!({"name": "user", "flags": ["extra-positional"]}),
            "does not follow one",
        ),
        (
            json!({"name": "user", "cwd": "/definitely/not/here"}),
            "cwd: /definitely/not/here is not a directory",
        ),
        (
            json!({"name": "user", "apply": "yes"}),
            "is not of type \"boolean\"",
        ),
    ] {
        let e = f.err("create_service", args.clone()).await;
        assert!(e.contains(needle), "{args}: {e}");
    }
    let e = f.err("cli_help", json!({"command": "service --rm"})).await;
    assert!(e.starts_with("command: `--rm` starts with `-`"), "{e}");
    let e = f
        .err("config", json!({"action": "get", "option": "-x"}))
        .await;
    assert!(e.starts_with("option: `-x` starts with `-`"), "{e}");
    let e = f
        .err(
            "config",
            json!({"action": "set", "option": "ci.provider", "value": "--evil", "apply": true}),
        )
        .await;
    assert!(e.starts_with("value: `--evil` starts with `-`"), "{e}");
    assert!(f.calls().is_empty(), "nothing ran: {:?}", f.calls());
}

#[tokio::test]
async fn fleet_status_runs_and_state_changes_need_apply() {
    let f = Fixture::new(true);
    let out = f.ok("fleet", json!({"action": "status"})).await;
    assert_eq!(out.structured["mode"], "run");
    assert!(out.text.contains("UserService: running"));
    assert_eq!(f.last_argv(), ["ctl", "status"]);

    let out = f
        .ok("fleet", json!({"action": "start", "path": ".", "services": "user,auth", "update": true, "calm": false}))
        .await;
    assert_eq!(out.structured["mode"], "preview");
    assert_eq!(out.structured["ran"], false);
    assert_eq!(
        out.text,
        "Dry run: nothing was run. Call fleet again with apply: true to run:\n  imq ctl start --path=. --services=user,auth --update"
    );
    assert_eq!(f.calls().len(), 1, "start was not run");

    let sub = f.dir.path().join("services");
    std::fs::create_dir(&sub).unwrap();
    let out = f
        .ok("fleet", json!({"action": "restart", "verbose": true, "cwd": sub.display().to_string(), "apply": true}))
        .await;
    assert_eq!(out.structured["mode"], "apply");
    let last = f.calls().pop().unwrap();
    assert_eq!(
        last,
        [
            "ctl",
            "restart",
            "--verbose",
            &format!("cwd={}", sub.display())
        ]
    );

    let e = f.err("fleet", json!({"action": "nuke"})).await;
    assert!(e.contains("(at /action)"), "{e}");
    let e = f.err("fleet", json!({})).await;
    assert!(e.contains("\"action\" is a required property"), "{e}");
}

#[tokio::test]
async fn config_cases_check_get_set_and_init() {
    let f = Fixture::new(true);
    // A non-zero exit is an answer, not a tool error.
    let out = f.ok("config", json!({"action": "check"})).await;
    assert_eq!(out.structured["exit_code"], 1);
    assert!(
        out.text
            .starts_with("`imq config check` failed with exit code 1."),
        "{}",
        out.text
    );
    assert!(out.text.contains("Config is not initialized"));
    assert_eq!(f.last_argv(), ["config", "check"]);

    f.ok("config", json!({"action": "get", "option": "ci.provider"}))
        .await;
    assert_eq!(f.last_argv(), ["config", "get", "ci.provider"]);
    f.ok("config", json!({"action": "get"})).await;
    assert_eq!(f.last_argv(), ["config", "get"]);

    let e = f
        .err("config", json!({"action": "set", "option": "ci.provider"}))
        .await;
    assert_eq!(e, "config with action=set needs value");
    let out = f
        .ok(
            "config",
            json!({"action": "set", "option": "ci.provider", "value": "circleci"}),
        )
        .await;
    assert_eq!(out.structured["mode"], "preview");
    let before = f.calls().len();
    f.ok(
        "config",
        json!({"action": "set", "option": "ci.provider", "value": "circle ci", "apply": true}),
    )
    .await;
    assert_eq!(f.calls().len(), before + 1);
    assert_eq!(f.last_argv(), ["config", "set", "ci.provider", "circle ci"]);

    let start = Instant::now();
    let e = f.err("config", json!({"action": "init"})).await;
    assert!(start.elapsed() < Duration::from_secs(1));
    assert!(e.starts_with("`imq config init` is interactive"), "{e}");
    assert!(
        e.contains("config(action: \"set\", option, value, apply: true)"),
        "{e}"
    );
    assert_eq!(f.calls().len(), before + 1, "init was not run");
}

#[tokio::test]
async fn logs_dump_by_default_and_clean_needs_apply() {
    let f = Fixture::new(true);
    f.ok("logs", json!({})).await;
    assert_eq!(f.last_argv(), ["log", "--no-follow"]);
    f.ok("logs", json!({"services": "user,auth", "prefix": false}))
        .await;
    assert_eq!(
        f.last_argv(),
        ["log", "user", "auth", "--no-follow", "--no-prefix"]
    );
    let out = f
        .ok("logs", json!({"action": "clean", "services": "user"}))
        .await;
    assert_eq!(out.structured["mode"], "preview");
    assert!(out.text.ends_with("imq log user --clean"), "{}", out.text);
    f.ok("logs", json!({"action": "clean", "apply": true}))
        .await;
    assert_eq!(f.last_argv(), ["log", "--clean"]);
    let e = f.err("logs", json!({"services": "a,--rm"})).await;
    assert!(e.starts_with("services: `--rm` starts with `-`"), "{e}");
}

#[tokio::test]
async fn status_and_help_report_the_binary_its_version_and_its_help() {
    let f = Fixture::new(true);
    let imq = f.dir.path().join("imq").display().to_string();
    let out = f.ok("cli_status", json!({})).await;
    assert_eq!(
        out.text,
        format!("imq is installed at {imq}, version 4.2.0.")
    );
    assert_eq!(
        out.structured,
        json!({"program": "imq", "installed": true, "path": imq, "version": "4.2.0"})
    );

    let out = f
        .ok("cli_help", json!({"command": "service  create"}))
        .await;
    assert_eq!(f.last_argv(), ["service", "create", "--help"]);
    assert!(
        out.text
            .contains("usage: imq service create [name] [path] [--dry-run]")
    );
    assert_eq!(out.structured["program"], imq);
    f.ok("cli_help", json!({})).await;
    assert_eq!(f.last_argv(), ["--help"]);
}

#[tokio::test]
async fn generate_client_runs_in_the_given_directory() {
    let f = Fixture::new(true);
    let out = f
        .ok("generate_client", json!({"service": "UserService", "path": "clients", "cwd": f.dir.path().display().to_string()}))
        .await;
    assert_eq!(out.structured["mode"], "run");
    let last = f.calls().pop().unwrap();
    assert_eq!(
        last,
        [
            "client",
            "generate",
            "UserService",
            "clients",
            &format!("cwd={}", f.dir.path().display())
        ]
    );
}

#[tokio::test]
async fn a_missing_cli_gets_an_install_hint_while_offline_tools_keep_working() {
    let f = Fixture::new(false);
    let e = f
        .err("create_service", json!({"name": "user", "apply": true}))
        .await;
    assert!(
        e.starts_with("imq is not installed: it was not found on the PATH commands run with ("),
        "{e}"
    );
    assert!(e.contains("Install it with `npm install -g @imqueue/cli@latest` (cli_install with apply: true runs that)."), "{e}");

    let out = f.ok("cli_status", json!({})).await;
    assert_eq!(out.structured["installed"], false);
    assert_eq!(
        out.structured["install"],
        "npm install -g @imqueue/cli@latest"
    );
    assert_eq!(out.structured["install_tool"], "cli_install");
    assert!(
        out.text
            .contains("Install it with `npm install -g @imqueue/cli@latest`")
    );

    // A preview still shows the command, with the hint.
    let out = f.ok("fleet", json!({"action": "stop"})).await;
    assert!(
        out.text
            .contains("imq ctl stop\n\nNote: imq is not installed"),
        "{}",
        out.text
    );

    // Scaffolding needs no CLI.
    let out = call(&templates(), "scaffold_service", json!({"name": "user"}))
        .await
        .unwrap();
    assert!(out.text.contains("class UserService extends IMQService"));

    // cli_install: the command by default, npm for real with apply.
    let out = f.ok("cli_install", json!({})).await;
    assert_eq!(out.structured["mode"], "preview");
    assert!(
        out.text.starts_with("Dry run: nothing was run. Call cli_install again with apply: true to run:\n  npm install -g @imqueue/cli@latest"),
        "{}",
        out.text
    );
    script(f.dir.path(), "npm", RECORD);
    let out = f
        .ok("cli_install", json!({"version": "4.2.0", "apply": true}))
        .await;
    assert_eq!(out.structured["mode"], "apply");
    assert_eq!(f.last_argv(), ["install", "-g", "@imqueue/cli@4.2.0"]);
    let e = f
        .err("cli_install", json!({"version": "1.0 && rm -rf ~"}))
        .await;
    assert!(e.contains("(at /version)"), "{e}");
}
