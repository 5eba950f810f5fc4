//! Profiles: named config files compiled into the binary, selected with
//! `--profile NAME`, so `switchboard serve --profile imqueue` works from any
//! directory without the repository.
//!
//! A profile is an ordinary config file (`profiles/NAME.toml`) plus the
//! template files it names. Embedding turns each template's `file` into an
//! inline `source`, so nothing is read from disk at run time. A user's
//! `--config` file is merged over the profile table by table: its tables
//! extend the profile's, and its values and arrays replace the profile's
//! (a `[[docs.sources]]` list in the file replaces the profile's list).

use toml::{Table, Value};

/// One embedded profile.
struct Profile {
    name: &'static str,
    toml: &'static str,
    /// The template files, by the path the profile names them with.
    files: &'static [(&'static str, &'static str)],
}

const PROFILES: &[Profile] = &[Profile {
    name: "imqueue",
    toml: include_str!("../../../profiles/imqueue.toml"),
    files: &[
        (
            "imqueue/service.ts.j2",
            include_str!("../../../profiles/imqueue/service.ts.j2"),
        ),
        (
            "imqueue/client.ts.j2",
            include_str!("../../../profiles/imqueue/client.ts.j2"),
        ),
    ],
}];

/// The names `--profile` accepts.
pub fn names() -> Vec<&'static str> {
    PROFILES.iter().map(|p| p.name).collect()
}

/// The profile's config table, templates inlined.
pub fn table(name: &str) -> Result<Table, String> {
    let profile = PROFILES.iter().find(|p| p.name == name).ok_or_else(|| {
        format!(
            "no profile named {name:?}; the profiles are: {}",
            names().join(", ")
        )
    })?;
    let mut table: Table = profile
        .toml
        .parse()
        .map_err(|e| format!("the embedded profile {name} does not parse: {e}"))?;
    if let Some(Value::Array(templates)) = table.get_mut("templates") {
        for template in templates.iter_mut().filter_map(Value::as_table_mut) {
            let Some(Value::String(file)) = template.get("file") else {
                continue;
            };
            let (_, text) = profile
                .files
                .iter()
                .find(|(path, _)| path == file)
                .ok_or_else(|| {
                    format!("the embedded profile {name} names a missing file {file}")
                })?;
            template.remove("file");
            template.insert("source".into(), Value::String((*text).to_owned()));
        }
    }
    Ok(table)
}

/// Merges `over` into `base`: tables recursively, anything else replaced.
pub fn merge(base: &mut Table, over: Table) {
    for (key, value) in over {
        match (base.get_mut(&key), value) {
            (Some(Value::Table(base_table)), Value::Table(over_table)) => {
                merge(base_table, over_table);
            }
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_embedded_profile_inlines_its_templates() {
        for name in names() {
            let table = table(name).unwrap();
            for template in table["templates"].as_array().into_iter().flatten() {
                assert!(template.get("file").is_none(), "{name}: {template:?}");
                assert!(template["source"].as_str().is_some_and(|s| !s.is_empty()));
            }
        }
    }

    #[test]
    fn an_unknown_profile_lists_the_known_ones() {
        let err = table("rails").unwrap_err();
        assert!(
            err.contains("\"rails\"") && err.contains("imqueue"),
            "{err}"
        );
    }

    #[test]
    fn merge_extends_tables_and_replaces_values_and_arrays() {
        let mut base: Table = "a = 1\nlist = [1, 2]\n[t]\nx = 1\ny = 2\n".parse().unwrap();
        let over: Table = "list = [3]\n[t]\ny = 3\nz = 4\n".parse().unwrap();
        merge(&mut base, over);
        let expected: Table = "a = 1\nlist = [3]\n[t]\nx = 1\ny = 3\nz = 4\n"
            .parse()
            .unwrap();
        assert_eq!(base, expected);
    }
}
