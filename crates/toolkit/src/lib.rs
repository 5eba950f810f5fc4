//! switchboard's config-declared toolsets.
//!
//! Three toolsets whose tools are declared in a config or profile file rather
//! than written in code:
//!
//! - [`CatalogTools`] (`[[catalog]]`): static list tools such as
//!   `list_packages` — names, one-line summaries, install commands;
//! - [`TemplateTools`] (`[[templates]]`): scaffolding tools such as
//!   `scaffold_service`, rendered with minijinja after validating the call
//!   against a declared JSON Schema;
//! - [`CommandTools`] (`[commands]`): a safe bridge to one local CLI — a
//!   tool per declared action, argv templates and never a shell, dry runs by
//!   default for anything that changes something.
//!
//! Each implements [`switchboard_toolset::Toolset`]. The config structs are
//! in [`config`]; [`ToolkitConfig`] holds all three sections for a profile
//! such as `imqueue` (see the repository's `profiles/imqueue.toml`).
//! With the feature `fuzzing`, `fuzzing` holds the body of the
//! `argv_template` fuzz target.

mod catalog;
pub mod commands;
pub mod config;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
mod prompts;
mod schema;
mod templates;

pub use catalog::CatalogTools;
pub use commands::CommandTools;
pub use config::{
    ActionConfig, ActionKind, ArgRule, ArgTemplate, CaseConfig, CatalogConfig, CatalogEntry,
    CommandsConfig, ConfigError, TemplateConfig, Toolkit, ToolkitConfig,
};
pub use prompts::{PromptArgumentConfig, PromptConfig, PromptTools};
pub use templates::TemplateTools;

use switchboard_toolset::{JsonObject, ToolAnnotations, ToolSpec};

/// A tool that only reads what the config declares (a catalog, a template):
/// read-only, idempotent, closed-world, with the config's title if any.
fn declared_reader(
    name: &str,
    description: &str,
    title: Option<&str>,
    input: std::sync::Arc<JsonObject>,
    output: std::sync::Arc<JsonObject>,
) -> ToolSpec {
    let tool = ToolSpec::new(name, description, input)
        .with_output_schema(output)
        .with_annotations(
            ToolAnnotations::new()
                .read_only(true)
                .destructive(false)
                .idempotent(true)
                .open_world(false),
        );
    match title {
        Some(title) => tool.with_title(title),
        None => tool,
    }
}
