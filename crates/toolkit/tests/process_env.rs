//! `CommandTools::new` draws the child's environment from switchboard's own
//! process environment, through the allow-list only. This is the only test
//! in its binary, because it sets a variable in the process environment.

mod common;

use common::{call, script};
use serde_json::json;
use switchboard_toolkit::{CommandTools, CommandsConfig};

#[tokio::test]
async fn a_secret_in_switchboards_environment_does_not_reach_the_child() {
    // SAFETY: this binary has no other test, and no thread reads or writes
    // the environment while it is set (the runtime has not spawned anything).
    unsafe {
        std::env::set_var("SWITCHBOARD_TOOLKIT_TEST_SECRET", "hunter2");
    }
    let dir = tempfile::tempdir().unwrap();
    let fake = script(dir.path(), "fake", "/usr/bin/env\n");
    let config: CommandsConfig = toml::from_str(&format!(
        "program = {:?}\n[[actions]]\ntool = \"env\"\ndescription = \"Prints the environment.\"\n",
        fake.display().to_string()
    ))
    .unwrap();
    let tools = CommandTools::new(&config, dir.path()).unwrap();
    let out = call(&tools, "env", json!({})).await.unwrap();
    let env = out.structured["output"].as_str().unwrap();
    assert!(!env.contains("hunter2"), "{env}");
    assert!(!env.contains("SWITCHBOARD_TOOLKIT_TEST_SECRET"), "{env}");
    if let Ok(path) = std::env::var("PATH") {
        assert!(
            env.contains(&format!("PATH={path}\n")),
            "PATH is passed through: {env}"
        );
    }
}
