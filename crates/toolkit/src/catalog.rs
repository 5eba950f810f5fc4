//! The catalog toolset: static list tools (such as `list_packages`) whose
//! entries come from config.
//!
//! A catalog never changes at run time and touches nothing outside the
//! process, so its tools are read-only, idempotent and closed-world. The text
//! result is a readable list that stands on its own; `structuredContent`
//! carries the same entries.

use std::{collections::HashMap, sync::Arc};

use serde_json::{Value, json};
use switchboard_toolset::{
    Caller, JsonObject, Session, ToolError, ToolFuture, ToolId, ToolOutput, ToolSpec, ToolTable,
    Toolset, object_schema,
};

use crate::{
    config::{CatalogConfig, CatalogEntry, ConfigError, NameSet, check_not_blank},
    declared_reader,
};

/// The catalog tools of one config.
pub struct CatalogTools {
    /// Each tool with its position in `catalogs`.
    tools: ToolTable<usize>,
    catalogs: Vec<Catalog>,
}

struct Catalog {
    text: String,
    structured: Value,
}

impl CatalogTools {
    /// Checks `configs` (the `[[catalog]]` sections) and builds their tools.
    pub fn new(configs: &[CatalogConfig]) -> Result<Self, ConfigError> {
        let mut names = NameSet::default();
        let mut tools = ToolTable::new();
        let mut catalogs = Vec::new();
        for (i, config) in configs.iter().enumerate() {
            let key = format!("catalog[{i}]");
            names.claim(&format!("{key}.tool"), &config.tool)?;
            check_not_blank(&format!("{key}.description"), &config.description)?;
            check_entries(&key, &config.entries)?;
            tools.push(
                catalogs.len(),
                declared_reader(
                    &config.tool,
                    &config.description,
                    config.title.as_deref(),
                    object_schema(json!({}), &[]),
                    output_schema(),
                ),
            );
            catalogs.push(Catalog {
                text: render(config),
                structured: json!({ "entries": config.entries.iter().map(entry_json).collect::<Vec<_>>() }),
            });
        }
        Ok(Self { tools, catalogs })
    }
}

impl Toolset for CatalogTools {
    fn name(&self) -> &str {
        "catalog"
    }

    fn tools(&self) -> &[ToolSpec] {
        self.tools.specs()
    }

    fn instructions(&self, _session: Option<&Session>) -> Option<String> {
        let names: Vec<&str> = self.tools.specs().iter().map(|t| t.name.as_str()).collect();
        (!names.is_empty()).then(|| {
            format!(
                "{} list what can be installed, each entry with its install command; they take \
no parameters.",
                names.join(", ")
            )
        })
    }

    fn call<'a>(&'a self, tool: ToolId, args: JsonObject, _caller: &'a Caller) -> ToolFuture<'a> {
        let (index, spec) = self.tools.get(tool);
        let catalog = &self.catalogs[index];
        Box::pin(async move {
            if let Some(unknown) = args.keys().next() {
                let shown: String = unknown.chars().take(60).collect();
                return Err(ToolError::new(format!(
                    "{} takes no parameters (got `{shown}`)",
                    spec.name
                )));
            }
            Ok(ToolOutput::new(
                catalog.text.clone(),
                catalog.structured.clone(),
            ))
        })
    }
}

fn check_entries(key: &str, entries: &[CatalogEntry]) -> Result<(), ConfigError> {
    if entries.is_empty() {
        return Err(ConfigError::new(
            format!("{key}.entries"),
            "a catalog needs at least one entry ([[catalog.entries]] with name, summary, install)",
        ));
    }
    let mut seen = HashMap::new();
    for (j, entry) in entries.iter().enumerate() {
        let at = format!("{key}.entries[{j}]");
        check_not_blank(&format!("{at}.name"), &entry.name)?;
        check_not_blank(&format!("{at}.summary"), &entry.summary)?;
        check_not_blank(&format!("{at}.install"), &entry.install)?;
        if let Some(first) = seen.insert(entry.name.as_str(), j) {
            return Err(ConfigError::new(
                format!("{at}.name"),
                format!(
                    "`{}` is already listed as {key}.entries[{first}]; list each entry once",
                    entry.name
                ),
            ));
        }
    }
    Ok(())
}

/// The readable list: heading, one bullet per entry with its install command
/// (and choosing rule and link where given), footer.
fn render(config: &CatalogConfig) -> String {
    let mut lines = Vec::new();
    if let Some(heading) = &config.heading {
        lines.push(heading.clone());
        lines.push(String::new());
    }
    for entry in &config.entries {
        lines.push(format!("- **{}** — {}", entry.name, entry.summary));
        lines.push(format!("  `{}`", entry.install));
        if let Some(pick) = &entry.pick {
            lines.push(format!("  Pick: {pick}"));
        }
        if let Some(url) = &entry.url {
            lines.push(format!("  {url}"));
        }
    }
    if let Some(footer) = &config.footer {
        lines.push(String::new());
        lines.push(footer.clone());
    }
    lines.join("\n")
}

fn entry_json(entry: &CatalogEntry) -> Value {
    let mut object = json!({
        "name": entry.name,
        "summary": entry.summary,
        "install": entry.install,
    });
    if let Some(url) = &entry.url {
        object["url"] = url.clone().into();
    }
    if let Some(pick) = &entry.pick {
        object["pick"] = pick.clone().into();
    }
    object
}

fn output_schema() -> Arc<JsonObject> {
    let schema = json!({
        "type": "object",
        "properties": {
            "entries": {"type": "array", "items": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "summary": {"type": "string"},
                    "install": {"type": "string"},
                    "url": {"type": "string"},
                    "pick": {"type": "string"}
                },
                "required": ["name", "summary", "install"]
            }}
        },
        "required": ["entries"]
    });
    Arc::new(schema.as_object().cloned().unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(toml_text: &str) -> Vec<CatalogConfig> {
        #[derive(serde::Deserialize)]
        struct Holder {
            catalog: Vec<CatalogConfig>,
        }
        toml::from_str::<Holder>(toml_text).unwrap().catalog
    }

    const TWO: &str = r##"
        [[catalog]]
        tool = "list_packages"
        description = "The packages."
        heading = "# Packages"
        footer = "More at https://example.org"
        [[catalog.entries]]
        name = "a"
        summary = "Does A."
        install = "npm i a"
        [[catalog.entries]]
        name = "b"
        summary = "Does B."
        install = "npm i b"
        url = "https://example.org/b"
        pick = "b over a when you need B"
    "##;

    #[tokio::test]
    async fn lists_entries_as_text_and_structure() {
        let tools = CatalogTools::new(&config(TWO)).unwrap();
        assert_eq!(tools.tools()[0].name, "list_packages");
        let id = tools.tool_id("list_packages").unwrap();
        let out = tools
            .call(id, JsonObject::new(), &Caller::new("t"))
            .await
            .unwrap();
        assert_eq!(
            out.text,
            "# Packages\n\n- **a** — Does A.\n  `npm i a`\n- **b** — Does B.\n  `npm i b`\n  Pick: b over a when you need B\n  https://example.org/b\n\nMore at https://example.org"
        );
        assert_eq!(out.structured["entries"][1]["url"], "https://example.org/b");
        assert!(out.structured["entries"][0].get("url").is_none());
    }

    #[tokio::test]
    async fn parameters_are_refused() {
        let tools = CatalogTools::new(&config(TWO)).unwrap();
        let mut args = JsonObject::new();
        args.insert("filter".into(), "x".into());
        let id = tools.tool_id("list_packages").unwrap();
        let err = tools.call(id, args, &Caller::new("t")).await.unwrap_err();
        assert_eq!(
            err.message(),
            "list_packages takes no parameters (got `filter`)"
        );
    }

    #[test]
    fn bad_entries_name_the_key() {
        let err = CatalogTools::new(&config(&TWO.replace("npm i b", " ")))
            .err()
            .unwrap();
        assert_eq!(err.key(), "catalog[0].entries[1].install");
        let err = CatalogTools::new(&config(&TWO.replace("name = \"b\"", "name = \"a\"")))
            .err()
            .unwrap();
        assert_eq!(err.key(), "catalog[0].entries[1].name");
        assert!(err.message().contains("catalog[0].entries[0]"));
        let empty = "[[catalog]]\ntool = \"x\"\ndescription = \"d\"\nentries = []\n";
        assert_eq!(
            CatalogTools::new(&config(empty)).err().unwrap().key(),
            "catalog[0].entries"
        );
        let twice = format!("{TWO}\n{TWO}");
        assert_eq!(
            CatalogTools::new(&config(&twice)).err().unwrap().key(),
            "catalog[1].tool"
        );
    }
}
