//! Every config mistake is refused with the key that holds it and what to do.

use std::path::Path;

use switchboard_toolkit::{CommandTools, CommandsConfig, ToolkitConfig};

/// A valid `[commands]` section with room for one more action.
const BASE: &str = r#"
program = "imq"
[[actions]]
tool = "status"
kind = "status"
description = "Where imq is."
"#;

fn commands_error(extra: &str) -> String {
    let config: CommandsConfig =
        toml::from_str(&format!("{BASE}\n{extra}")).unwrap_or_else(|e| panic!("{e}\n{extra}"));
    CommandTools::with_environment(&config, Path::new("/"), [])
        .err()
        .unwrap_or_else(|| panic!("accepted:\n{extra}"))
        .to_string()
}

fn action(body: &str) -> String {
    commands_error(&format!(
        "[[actions]]\ntool = \"t\"\ndescription = \"d\"\n{body}"
    ))
}

#[test]
fn placeholders_must_name_declared_scalar_parameters() {
    let e = commands_error(
        r#"
[[actions]]
tool = "a"
description = "d"
argv = ["x"]
[[actions]]
tool = "b"
description = "d"
argv = ["service", "create", "x", "{nme}"]
input_schema = { properties = { name = { type = "string" } } }
"#,
    );
    assert_eq!(
        e,
        "commands.actions[2].argv[3]: unknown placeholder {nme}; the input schema declares: name"
    );
    let e = action(
        "argv = [\"{flags}\"]\ninput_schema = { properties = { flags = { type = \"array\" } } }",
    );
    assert!(
        e.starts_with("commands.actions[1].argv[0]: {flags} is an array: splice it with"),
        "{e}"
    );
    let e = action("cwd = \"{dir}\"");
    assert!(
        e.starts_with("commands.actions[1].cwd: unknown placeholder {dir}"),
        "{e}"
    );
}

#[test]
fn switches_need_an_enum_a_value_and_a_case_per_value() {
    let schema = "input_schema = { required = [\"action\"], properties = { action = { enum = [\"a\", \"b\"] } } }";
    let e = action(&format!(
        "switch = \"action\"\ncases = {{ a = {{}} }}\n{schema}"
    ));
    assert!(
        e.starts_with("commands.actions[1].cases: action can be \"b\", which has no case"),
        "{e}"
    );
    let e = action(&format!(
        "switch = \"action\"\ncases = {{ a = {{}}, b = {{}}, c = {{}} }}\n{schema}"
    ));
    assert!(
        e.starts_with("commands.actions[1].cases.c: \"c\" is not a value of action"),
        "{e}"
    );
    let e = action(
        "switch = \"action\"\ninput_schema = { properties = { action = { type = \"string\" } } }",
    );
    assert!(
        e.starts_with("commands.actions[1].switch: `action` must declare an enum of strings"),
        "{e}"
    );
    let e = action(
        "switch = \"action\"\ncases = { a = {} }\ninput_schema = { properties = { action = { enum = [\"a\"] } } }",
    );
    assert!(
        e.starts_with("commands.actions[1].switch: `action` must be required or have a default"),
        "{e}"
    );
    let e = action("cases = { a = {} }");
    assert!(
        e.starts_with("commands.actions[1].cases: cases need `switch`"),
        "{e}"
    );
    let e = action(&format!(
        "switch = \"action\"\ncases = {{ a = {{}}, b = {{ argv = [\"{{x}}\"] }} }}\n{schema}"
    ));
    assert!(
        e.starts_with("commands.actions[1].cases.b.argv[0]: unknown placeholder {x}"),
        "{e}"
    );
}

#[test]
fn safety_settings_must_make_sense() {
    let e = action("dry_run_args = [\"--dry-run\"]");
    assert_eq!(
        e,
        "commands.actions[1].dry_run_args: only applies to mutating cases; set mutating = true or remove it"
    );
    let e = action("mutating = true\ninteractive = \"  \"");
    assert_eq!(e, "commands.actions[1].interactive: must not be empty");
    let e = action("required = [\"who\"]");
    assert_eq!(
        e,
        "commands.actions[1].required[0]: `who` is not a declared parameter"
    );
    let e = action(
        "mutating = true\ninput_schema = { properties = { apply = { type = \"boolean\" } } }",
    );
    assert!(
        e.starts_with("commands.actions[1].input_schema.properties.apply: `apply` is reserved"),
        "{e}"
    );
    let e = action("timeout_s = 0");
    assert!(
        e.starts_with("commands.actions[1].timeout_s: must be more than 0"),
        "{e}"
    );
    let e = action("kind = \"status\"\nargv = [\"x\"]");
    assert!(
        e.starts_with("commands.actions[1].argv: a status action runs `program`"),
        "{e}"
    );
}

#[test]
fn install_actions_are_single_plain_and_render_from_defaults() {
    let e = action(
        "kind = \"install\"\nargv = [\"{tool}\", \"x\"]\ninput_schema = { properties = { tool = { type = \"string\", default = \"npm\" } } }",
    );
    assert!(
        e.starts_with(
            "commands.actions[1].argv[0]: an install action's argv starts with the installer"
        ),
        "{e}"
    );
    let e = action(
        "kind = \"install\"\nargv = [\"npm\", \"i\", \"x@{v}\"]\ninput_schema = { required = [\"v\"], properties = { v = { type = \"string\" } } }",
    );
    assert!(
        e.starts_with("commands.actions[1].input_schema: the install command is shown as a hint"),
        "{e}"
    );
    let e = commands_error(
        "[[actions]]\ntool = \"i1\"\ndescription = \"d\"\nkind = \"install\"\nargv = [\"npm\"]\n[[actions]]\ntool = \"i2\"\ndescription = \"d\"\nkind = \"install\"\nargv = [\"npm\"]\n",
    );
    assert_eq!(
        e,
        "commands.actions[2].kind: only one action may be kind = \"install\""
    );
}

#[test]
fn a_nul_anywhere_that_reaches_argv_is_refused_naming_the_key() {
    let status = "[[actions]]\ntool = \"s\"\nkind = \"status\"\ndescription = \"d\"\n";
    let config: CommandsConfig =
        toml::from_str(&format!("program = \"i\\u0000mq\"\n{status}")).unwrap();
    let program = CommandTools::with_environment(&config, Path::new("/"), [])
        .err()
        .unwrap()
        .to_string();
    let literal = action("argv = [\"st\\u0000atus\"]");
    let dry_run =
        action("mutating = true\nargv = [\"deploy\"]\ndry_run_args = [\"--dry\\u0000run\"]");
    for (e, key) in [
        (program, "commands.program:"),
        (literal, "commands.actions[1].argv[0]:"),
        (dry_run, "commands.actions[1].dry_run_args:"),
    ] {
        assert!(e.starts_with(key), "{key} {e}");
        assert!(e.contains("contains a NUL character"), "{e}");
    }
}

#[test]
fn section_level_settings_are_checked() {
    let section = |text: &str| {
        let config: CommandsConfig = toml::from_str(text).unwrap();
        CommandTools::with_environment(&config, Path::new("/"), [])
            .err()
            .unwrap()
            .to_string()
    };
    let tail = "\n[[actions]]\ntool = \"s\"\nkind = \"status\"\ndescription = \"d\"\n";
    assert!(
        section(&format!("program = \"imq\"\ntimeout_s = -1{tail}"))
            .starts_with("commands.timeout_s:")
    );
    assert!(
        section(&format!("program = \"imq\"\nkill_grace_s = 100{tail}"))
            .starts_with("commands.kill_grace_s:")
    );
    assert!(
        section(&format!("program = \"imq\"\nmax_output_bytes = 10{tail}"))
            .starts_with("commands.max_output_bytes: must be between 1024")
    );
    assert_eq!(
        section(&format!("program = \"imq\"\nenv_allow = [\"A=B\"]{tail}")),
        "commands.env_allow[0]: \"A=B\" is not a variable name"
    );
    assert!(
        section(&format!(
            "program = \"imq\"\nworking_dir = \"no/such/dir\"{tail}"
        ))
        .starts_with("commands.working_dir: /no/such/dir is not a directory")
    );
    assert!(
        section(&format!("program = \" \"{tail}"))
            .starts_with("commands.program: must not be empty")
    );
    assert!(
        section("program = \"imq\"\n").starts_with("commands.actions: declare at least one action")
    );
    assert_eq!(
        section(&format!("program = \"imq\"{tail}{tail}")),
        "commands.actions[1].tool: tool name `s` is already used by commands.actions[0].tool; tool names must be unique"
    );
}

#[test]
fn misspelt_keys_are_refused_when_parsing() {
    for (text, key) in [
        (
            "[commands]\nprogram = \"x\"\n[[commands.actions]]\ntool = \"a\"\ndescription = \"d\"\nmutatin = true\n",
            "mutatin",
        ),
        (
            "[[catalog]]\ntool = \"a\"\ndescription = \"d\"\nentries = []\nfilter = true\n",
            "filter",
        ),
        (
            "[[templates]]\ntool = \"a\"\ndescription = \"d\"\nsrc = \"x\"\n",
            "src",
        ),
        ("[docs]\n", "docs"),
    ] {
        let err = toml::from_str::<ToolkitConfig>(text)
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains(&format!("unknown field `{key}`")),
            "{text}: {err}"
        );
    }
}

#[test]
fn a_program_path_must_name_an_executable_file_at_start_up() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::fs::write(bin.join("plain"), "#!/bin/sh\n").unwrap();
    std::fs::write(bin.join("tool"), "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(bin.join("tool"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let build = |program: &str, install: bool| {
        let install = if install {
            "[[actions]]\ntool = \"i\"\nkind = \"install\"\ndescription = \"d\"\nargv = [\"pip\", \"install\", \"tool\"]\n"
        } else {
            ""
        };
        let text = format!(
            "program = \"{program}\"\n[[actions]]\ntool = \"s\"\nkind = \"status\"\ndescription = \"d\"\n{install}"
        );
        let config: CommandsConfig = toml::from_str(&text).unwrap();
        CommandTools::with_environment(&config, dir.path(), []).map(|_| ())
    };
    let refused = |program: &str, install: bool| build(program, install).unwrap_err().to_string();
    let shown = bin.display();
    assert_eq!(
        refused("bin/plain", false),
        format!(
            "commands.program: {shown}/plain is not executable (chmod +x {shown}/plain); give the path of an executable file (relative to the profile's directory), or a program name to find on PATH"
        )
    );
    assert!(
        refused("bin/nope", false)
            .starts_with(&format!("commands.program: {shown}/nope does not exist;")),
        "{}",
        refused("bin/nope", false)
    );
    assert!(refused("./bin", false).contains("bin is not a file"));
    // One the install action can create may be missing; a name is looked up
    // at each call; a working path is fine.
    build("bin/nope", true).unwrap();
    build("not-installed-anywhere", false).unwrap();
    build("bin/tool", false).unwrap();
    assert!(refused("bin/plain", true).contains("is not executable"));
}
