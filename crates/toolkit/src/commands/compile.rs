//! Compiling the `[commands]` section once, at start: each action's schema,
//! argv templates, cases, timeouts and environment are checked (errors name
//! the key) and turned into what a call runs. Nothing here runs a program.

use std::{collections::BTreeMap, path::Path, time::Duration};

use serde_json::{Value, json};
use switchboard_toolset::{JsonObject, ToolAnnotations, ToolSpec, ToolTable};

use super::{
    Action, Case, Cases, CommandTools, InstallHint,
    argv::{Argv, compile_text, refuse_nul_in_config},
    report::{display_command, run_output_schema, status_output_schema},
    runner::{is_env_name, is_executable, not_executable},
};
use crate::{
    config::{
        ActionConfig, ActionKind, ArgTemplate, CaseConfig, CommandsConfig, ConfigError, NameSet,
        check_not_blank,
    },
    schema::InputSchema,
};

/// The longest timeout config may set, in seconds.
const MAX_TIMEOUT_S: f64 = 3600.0;
/// The longest SIGTERM-to-SIGKILL grace config may set, in seconds.
const MAX_GRACE_S: f64 = 60.0;
/// The output cap config may set, in bytes.
const OUTPUT_RANGE: std::ops::RangeInclusive<usize> = 1024..=16 * 1024 * 1024;

impl CommandTools {
    /// Checks `config` (the `[commands]` section) and builds its tools. The
    /// child's environment is drawn from switchboard's own, through
    /// `env_allow`; `profile_dir` is where relative paths start.
    pub fn new(config: &CommandsConfig, profile_dir: &Path) -> Result<Self, ConfigError> {
        let environment = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)));
        Self::with_environment(config, profile_dir, environment)
    }

    /// Like [`CommandTools::new`], with `environment` standing for
    /// switchboard's environment (for embedding and tests).
    pub fn with_environment(
        config: &CommandsConfig,
        profile_dir: &Path,
        environment: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, ConfigError> {
        check_not_blank("commands.program", &config.program)?;
        refuse_nul_in_config("commands.program", &config.program)?;
        let default_timeout =
            seconds("commands.timeout_s", config.timeout_s, MAX_TIMEOUT_S, false)?;
        let grace = seconds(
            "commands.kill_grace_s",
            config.kill_grace_s,
            MAX_GRACE_S,
            true,
        )?;
        ConfigError::check_range(
            "commands.max_output_bytes",
            config.max_output_bytes,
            OUTPUT_RANGE,
            " bytes",
        )?;
        let env = child_environment(config, environment)?;
        let working_dir = match &config.working_dir {
            Some(dir) => {
                let dir = profile_dir.join(dir);
                if !dir.is_dir() {
                    return Err(ConfigError::new(
                        "commands.working_dir",
                        format!("{} is not a directory", dir.display()),
                    ));
                }
                Some(dir)
            }
            None => None,
        };
        let has_install = config.actions.iter().any(|a| a.kind == ActionKind::Install);
        check_program_path(&config.program, profile_dir, has_install)?;
        if config.actions.is_empty() {
            return Err(ConfigError::new(
                "commands.actions",
                "declare at least one action ([[commands.actions]] with tool, description, argv)",
            ));
        }

        let mut names = NameSet::default();
        let mut tools = ToolTable::new();
        let mut actions = Vec::new();
        let mut install = None;
        for (i, action_config) in config.actions.iter().enumerate() {
            let key = format!("commands.actions[{i}]");
            names.claim(&format!("{key}.tool"), &action_config.tool)?;
            check_not_blank(&format!("{key}.description"), &action_config.description)?;
            let (action, tool) = compile_action(&key, action_config, default_timeout)?;
            if action.kind == ActionKind::Install {
                if install.is_some() {
                    return Err(ConfigError::new(
                        format!("{key}.kind"),
                        "only one action may be kind = \"install\"",
                    ));
                }
                install = Some(InstallHint {
                    tool: action_config.tool.clone(),
                    command: install_command(&key, &action_config.tool, &action)?,
                });
            }
            // A relay client (the shim) must wait at least as long as the
            // program may run and be killed; a second covers the reply.
            let deadline = action.longest_timeout() + grace + Duration::from_secs(1);
            tools.push(actions.len(), tool.with_timeout(deadline));
            actions.push(action);
        }
        Ok(Self {
            program: config.program.clone(),
            base_dir: profile_dir.to_path_buf(),
            working_dir,
            env,
            version_args: config.version_args.clone(),
            grace,
            max_output: config.max_output_bytes,
            tools,
            actions,
            install,
        })
    }
}

/// A `program` given as a path (it has a `/`) must name an executable file
/// at start-up; one that does not exist yet is left for the install
/// action, when there is one, to create. A name is looked up on `PATH` at
/// each call, since it may be installed later.
fn check_program_path(
    program: &str,
    profile_dir: &Path,
    has_install: bool,
) -> Result<(), ConfigError> {
    if !program.contains('/') {
        return Ok(());
    }
    let path = profile_dir.join(program);
    if is_executable(&path) || (has_install && !path.exists()) {
        return Ok(());
    }
    Err(ConfigError::new(
        "commands.program",
        format!(
            "{}; give the path of an executable file (relative to the profile's directory), or a program name to find on PATH",
            not_executable(&path)
        ),
    ))
}

fn seconds(key: &str, value: f64, max: f64, zero_ok: bool) -> Result<Duration, ConfigError> {
    let low_ok = if zero_ok { value >= 0.0 } else { value > 0.0 };
    if value.is_finite() && low_ok && value <= max {
        Ok(Duration::from_secs_f64(value))
    } else {
        let range = if zero_ok {
            format!("from 0 to {max} seconds")
        } else {
            format!("more than 0 and at most {max} seconds")
        };
        Err(ConfigError::new(
            key,
            format!("must be {range} (got {value})"),
        ))
    }
}

/// The child's whole environment: allow-listed variables from `environment`,
/// then the declared ones.
fn child_environment(
    config: &CommandsConfig,
    environment: impl IntoIterator<Item = (String, String)>,
) -> Result<Vec<(String, String)>, ConfigError> {
    for (i, name) in config.env_allow.iter().enumerate() {
        if !is_env_name(name) {
            return Err(ConfigError::new(
                format!("commands.env_allow[{i}]"),
                format!("{name:?} is not a variable name"),
            ));
        }
    }
    let mut env: BTreeMap<String, String> = environment
        .into_iter()
        .filter(|(k, _)| config.env_allow.contains(k))
        .collect();
    for (name, value) in &config.env {
        if !is_env_name(name) || value.contains('\0') {
            return Err(ConfigError::new(
                format!("commands.env.{name}"),
                "is not a usable variable (a name without `=`, values without NUL)",
            ));
        }
        env.insert(name.clone(), value.clone());
    }
    Ok(env.into_iter().collect())
}

/// Checks one action and builds it and its tool definition.
fn compile_action(
    key: &str,
    config: &ActionConfig,
    default_timeout: Duration,
) -> Result<(Action, ToolSpec), ConfigError> {
    let action_timeout = match config.timeout_s {
        Some(t) => seconds(&format!("{key}.timeout_s"), t, MAX_TIMEOUT_S, false)?,
        None => default_timeout,
    };
    if config.kind == ActionKind::Status {
        check_status_action(key, config)?;
    }
    if config.switch.is_none() && !config.cases.is_empty() {
        return Err(ConfigError::new(
            format!("{key}.cases"),
            "cases need `switch`: the parameter whose value selects the case",
        ));
    }
    let install = config.kind == ActionKind::Install;
    if install && config.switch.is_some() {
        return Err(ConfigError::new(
            format!("{key}.switch"),
            "an install action has a single command; remove switch",
        ));
    }
    let mutating_any = install
        || match &config.switch {
            None => config.mutating,
            Some(_) => config
                .cases
                .values()
                .any(|c| c.mutating.unwrap_or(config.mutating)),
        };
    let apply = json!({
        "type": "boolean",
        "description": "Omitted or false: a dry run that changes nothing. true: run it for real."
    });
    let extra: Vec<(&str, Value)> = if mutating_any {
        vec![("apply", apply)]
    } else {
        Vec::new()
    };
    let schema = InputSchema::compile(
        &format!("{key}.input_schema"),
        &config.input_schema,
        &["apply"],
        &extra,
    )?;
    let cwd = config
        .cwd
        .as_ref()
        .map(|raw| compile_text(&format!("{key}.cwd"), raw, &schema))
        .transpose()?;

    let cases = compile_cases(key, config, install, action_timeout, &schema)?;
    if install {
        check_install_argv(key, &config.argv)?;
    }

    let tool = action_tool(config, &schema, mutating_any);
    Ok((
        Action {
            kind: config.kind,
            schema,
            cwd,
            cases,
            timeout: action_timeout,
        },
        tool,
    ))
}

/// Builds an action's one case, or with `switch` one case per value of the
/// switch parameter: every value needs a case and every case a value.
fn compile_cases(
    key: &str,
    config: &ActionConfig,
    install: bool,
    action_timeout: Duration,
    schema: &InputSchema,
) -> Result<Cases, ConfigError> {
    let defaults = CaseConfig::default();
    Ok(match &config.switch {
        None => Cases::One(compile_case(
            key,
            key,
            config,
            &defaults,
            install,
            action_timeout,
            schema,
        )?),
        Some(param) => {
            let values = switch_values(key, param, schema)?;
            let mut cases = BTreeMap::new();
            for value in &values {
                let case_key = format!("{key}.cases.{value}");
                let case_config = config.cases.get(value).ok_or_else(|| {
                    ConfigError::new(
                        format!("{key}.cases"),
                        format!(
                            "{param} can be {value:?}, which has no case; add `{value} = {{}}` (or its settings) to cases"
                        ),
                    )
                })?;
                let case = compile_case(
                    key,
                    &case_key,
                    config,
                    case_config,
                    false,
                    action_timeout,
                    schema,
                )?;
                cases.insert(value.clone(), case);
            }
            if let Some(extra) = config.cases.keys().find(|k| !values.contains(*k)) {
                return Err(ConfigError::new(
                    format!("{key}.cases.{extra}"),
                    format!(
                        "{extra:?} is not a value of {param} (its enum is {})",
                        values.join(", ")
                    ),
                ));
            }
            Cases::By {
                param: param.clone(),
                cases,
            }
        }
    })
}

/// An action's tool: its schema, the output schema of its kind, and
/// annotations that say whether it can change anything.
fn action_tool(config: &ActionConfig, schema: &InputSchema, mutating_any: bool) -> ToolSpec {
    let read_only = config.read_only.unwrap_or(!mutating_any);
    let mut tool = ToolSpec::new(&config.tool, &config.description, schema.exposed())
        .with_output_schema(if config.kind == ActionKind::Status {
            status_output_schema()
        } else {
            run_output_schema()
        })
        .with_annotations(
            ToolAnnotations::new()
                .read_only(read_only)
                .destructive(mutating_any)
                .idempotent(read_only)
                .open_world(true),
        );
    if let Some(title) = &config.title {
        tool = tool.with_title(title.clone());
    }
    tool
}

/// Merges a case's settings over the action's and checks them.
fn compile_case(
    action_key: &str,
    case_key: &str,
    action: &ActionConfig,
    case: &CaseConfig,
    force_mutating: bool,
    action_timeout: Duration,
    schema: &InputSchema,
) -> Result<Case, ConfigError> {
    let (argv_key, templates): (String, &[ArgTemplate]) = match &case.argv {
        Some(argv) => (format!("{case_key}.argv"), argv),
        None => (format!("{action_key}.argv"), &action.argv),
    };
    let argv = Argv::compile(&argv_key, templates, schema)?;
    let mutating = force_mutating || case.mutating.unwrap_or(action.mutating);
    let pick = |own: &Option<Vec<String>>, field: &str, inherited: &[String]| {
        let (key, list) = match own {
            Some(list) => (format!("{case_key}.{field}"), list.clone()),
            None => (format!("{action_key}.{field}"), inherited.to_vec()),
        };
        if !list.is_empty() && !mutating {
            return Err(ConfigError::new(
                key,
                "only applies to mutating cases; set mutating = true or remove it",
            ));
        }
        for arg in &list {
            refuse_nul_in_config(&key, arg)?;
        }
        Ok(list)
    };
    let dry_run_args = pick(&case.dry_run_args, "dry_run_args", &action.dry_run_args)?;
    let apply_args = pick(&case.apply_args, "apply_args", &action.apply_args)?;
    let (interactive_key, interactive) = match &case.interactive {
        Some(text) => (format!("{case_key}.interactive"), Some(text.clone())),
        None => (
            format!("{action_key}.interactive"),
            action.interactive.clone(),
        ),
    };
    if let Some(text) = &interactive {
        check_not_blank(&interactive_key, text)?;
    }
    let (required_key, required) = match &case.required {
        Some(list) => (format!("{case_key}.required"), list.clone()),
        None => (format!("{action_key}.required"), action.required.clone()),
    };
    for (j, name) in required.iter().enumerate() {
        if schema.property(name).is_none() {
            return Err(ConfigError::new(
                format!("{required_key}[{j}]"),
                format!("`{name}` is not a declared parameter"),
            ));
        }
    }
    let timeout = match case.timeout_s {
        Some(t) => seconds(&format!("{case_key}.timeout_s"), t, MAX_TIMEOUT_S, false)?,
        None => action_timeout,
    };
    Ok(Case {
        argv,
        mutating,
        dry_run_args,
        apply_args,
        interactive,
        required,
        timeout,
    })
}

/// The string values of the `switch` parameter's enum.
fn switch_values(key: &str, param: &str, schema: &InputSchema) -> Result<Vec<String>, ConfigError> {
    let at = format!("{key}.switch");
    let property = schema
        .property(param)
        .ok_or_else(|| ConfigError::new(&at, format!("`{param}` is not a declared parameter")))?;
    let values: Option<Vec<String>> =
        property
            .get("enum")
            .and_then(Value::as_array)
            .and_then(|values| {
                values
                    .iter()
                    .map(|v| v.as_str().map(str::to_owned))
                    .collect()
            });
    let values = values.filter(|v| !v.is_empty()).ok_or_else(|| {
        ConfigError::new(
            &at,
            format!("`{param}` must declare an enum of strings, one per case"),
        )
    })?;
    let required = schema
        .exposed()
        .get("required")
        .and_then(Value::as_array)
        .is_some_and(|r| r.iter().any(|n| n.as_str() == Some(param)));
    if !required && property.get("default").is_none() {
        return Err(ConfigError::new(
            &at,
            format!(
                "`{param}` must be required or have a default, so that every call selects a case"
            ),
        ));
    }
    Ok(values)
}

fn check_status_action(key: &str, config: &ActionConfig) -> Result<(), ConfigError> {
    let has_params = config
        .input_schema
        .get("properties")
        .and_then(Value::as_object)
        .is_some_and(|p| !p.is_empty());
    let extra = [
        ("argv", !config.argv.is_empty()),
        ("input_schema", has_params),
        ("cwd", config.cwd.is_some()),
        ("switch", config.switch.is_some()),
        ("mutating", config.mutating),
        ("dry_run_args", !config.dry_run_args.is_empty()),
        ("apply_args", !config.apply_args.is_empty()),
        ("interactive", config.interactive.is_some()),
        ("required", !config.required.is_empty()),
    ];
    match extra.iter().find(|(_, present)| *present) {
        Some((field, _)) => Err(ConfigError::new(
            format!("{key}.{field}"),
            "a status action runs `program` with `version_args` and takes no parameters; remove this",
        )),
        None => Ok(()),
    }
}

fn check_install_argv(key: &str, argv: &[ArgTemplate]) -> Result<(), ConfigError> {
    match argv.first() {
        Some(ArgTemplate::Text(program)) if !program.is_empty() && !program.contains('{') => Ok(()),
        _ => Err(ConfigError::new(
            format!("{key}.argv[0]"),
            "an install action's argv starts with the installer program, written plainly (e.g. \"npm\")",
        )),
    }
}

/// The install command as shown in hints: the install action rendered with
/// its parameters' defaults.
fn install_command(key: &str, tool: &str, action: &Action) -> Result<String, ConfigError> {
    let unusable = |why: String| {
        ConfigError::new(
            format!("{key}.input_schema"),
            format!(
                "the install command is shown as a hint when the program is missing, so it must render from defaults alone: {why}"
            ),
        )
    };
    let params = action
        .schema
        .check(tool, JsonObject::new())
        .map_err(|e| unusable(e.message().to_owned()))?;
    let Cases::One(case) = &action.cases else {
        return Err(unusable("it has cases".into()));
    };
    let rendered = case
        .argv
        .render(&params)
        .map_err(|e| unusable(e.message().to_owned()))?;
    let Some((program, args)) = rendered.args.split_first() else {
        return Err(unusable("it renders to nothing".into()));
    };
    Ok(display_command(program, args))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_bounded() {
        assert!(seconds("k", 0.0, 10.0, false).is_err());
        assert!(seconds("k", 0.0, 10.0, true).is_ok());
        assert!(seconds("k", f64::NAN, 10.0, true).is_err());
        assert_eq!(seconds("k", 11.0, 10.0, true).unwrap_err().key(), "k");
        assert_eq!(
            seconds("k", 1.5, 10.0, false).unwrap(),
            Duration::from_millis(1500)
        );
    }
}
