//! Reading a configuration: TOML text, then `FLOODGATE__*` environment overrides, then
//! validation. Errors name the key (`server.listen`) or, for TOML syntax, the line.

use std::path::Path;

use serde::Deserialize;

use super::split;
use super::{Config, ConfigError, ConfigProblem, TenantConfig};

impl Config {
    /// Reads `path`, applies `FLOODGATE__*` environment overrides, and validates the result.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        Self::load_with_env(path, std::env::vars())
    }

    /// As [`Config::load`] with an explicit environment, so tests need not touch the process's.
    pub fn load_with_env(
        path: &Path,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, ConfigError> {
        if !path.exists() {
            return Err(ConfigError {
                problems: vec![ConfigProblem::new(
                    path.display().to_string(),
                    "file not found",
                )],
            });
        }
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            problems: vec![ConfigProblem::new(
                path.display().to_string(),
                e.to_string(),
            )],
        })?;
        Self::from_toml_with_env(&text, env)
    }

    /// Parses TOML text (plus overrides) and validates it.
    pub fn from_toml_with_env(
        text: &str,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, ConfigError> {
        let env: Vec<(String, String)> = env.into_iter().collect();
        let read = split::split(text).and_then(|parts| Self::read_split(&parts, &env));
        let config = match read {
            Some(config) => config,
            None => Self::read_whole(text, &env)?,
        };
        let problems = config.validate();
        if problems.is_empty() {
            Ok(config)
        } else {
            Err(ConfigError { problems })
        }
    }
}

impl Config {
    /// The document cut at its `[[tenants]]` headers, read a tenant at a time (see
    /// [`split`]). `None` if any part fails: reading the whole document gives the error, with
    /// the line and the tenant's index it names.
    fn read_split(parts: &split::Split<'_>, env: &[(String, String)]) -> Option<Self> {
        let (mut config, inline) = read_document(&parts.rest, env).ok()?;
        if let Some(tenants) = inline {
            if !parts.tenants.is_empty() {
                return None; // `tenants = [...]` beside `[[tenants]]`: TOML's error to give
            }
            config.tenants = read_tenants(tenants).ok()?;
        }
        let mut tenants = Vec::with_capacity(parts.tenants.len());
        for part in &parts.tenants {
            let mut document = toml::de::DeTable::parse(part).ok()?;
            let value = document.get_mut().remove("tenants")?;
            if !document.get_ref().is_empty() {
                return None;
            }
            let mut one =
                Vec::<TenantConfig>::deserialize(toml::de::ValueDeserializer::from(value)).ok()?;
            if one.len() != 1 {
                return None;
            }
            tenants.extend(one.pop());
        }
        if !tenants.is_empty() {
            config.tenants = tenants;
        }
        Some(config)
    }

    pub(super) fn read_whole(text: &str, env: &[(String, String)]) -> Result<Self, ConfigError> {
        let (mut config, tenants) = read_document(text, env)?;
        if let Some(tenants) = tenants {
            config.tenants = read_tenants(tenants)?;
        }
        Ok(config)
    }
}

fn one(key: String, message: String) -> ConfigError {
    ConfigError {
        problems: vec![ConfigProblem::new(key, message)],
    }
}

/// Everything but the tenants, with the environment's overrides; and the tenants' value.
fn read_document<'t>(
    text: &'t str,
    env: &[(String, String)],
) -> Result<(Config, Option<TomlValue<'t>>), ConfigError> {
    let syntax = |e: toml::de::Error| {
        let key = e
            .span()
            .map(|span| format!("line {}", line_of(text, span.start)))
            .unwrap_or_else(|| "config".into());
        one(key, e.message().to_string())
    };
    // Read borrowing the text; the tenants are taken out before the rest becomes an owned
    // table (copied per attempt below).
    let mut document = toml::de::DeTable::parse(text).map_err(syntax)?;
    let tenants = document.get_mut().remove("tenants");
    let mut table =
        toml::Table::deserialize(toml::de::Deserializer::from(document)).map_err(syntax)?;
    // Every override goes in as the string it is; only where the field refuses a string
    // (a number, a boolean) is it read as a TOML value. So a string field — a password,
    // a file name — gets exactly what was written, even `0x1F`, `1_000`, `inf` or `true`.
    let mut overrides: Vec<(Vec<String>, String)> = Vec::new();
    for (name, value) in env {
        if let Some(path) = env_key(name) {
            if path[0] == "tenants" {
                return Err(one(
                    name.clone(),
                    "tenants are set in the file or through the admin API, not the environment"
                        .into(),
                ));
            }
            set_path(&mut table, &path, toml::Value::String(value.clone()));
            overrides.push((path, value.clone()));
        }
    }
    let config: Config = loop {
        match serde_path_to_error::deserialize(toml::Value::Table(table.clone())) {
            Ok(config) => break config,
            Err(e) => {
                let path = e.path().to_string();
                let message = e.into_inner().message().to_string();
                let retyped = overrides.iter().position(|(p, _)| {
                    p.join(".") == path && message.contains("invalid type: string")
                });
                if let Some(i) = retyped {
                    let (keys, value) = overrides.swap_remove(i);
                    set_path(&mut table, &keys, parse_scalar(&value));
                    continue;
                }
                let key = if path == "." { "config".into() } else { path };
                return Err(one(key, message));
            }
        }
    };
    Ok((config, tenants))
}

type TomlValue<'t> = toml::Spanned<toml::de::DeValue<'t>>;

fn read_tenants(value: TomlValue<'_>) -> Result<Vec<TenantConfig>, ConfigError> {
    serde_path_to_error::deserialize(toml::de::ValueDeserializer::from(value)).map_err(|e| {
        let key = format!("tenants{}", e.path()).replace("tenants.", "tenants");
        one(key, e.into_inner().message().to_string())
    })
}

/// `FLOODGATE__KAFKA__PRODUCER__LINGER_MS` -> `["kafka", "producer", "linger.ms"]`;
/// `FLOODGATE__SERVER__LISTEN` -> `["server", "listen"]`. Other variables are not ours.
fn env_key(name: &str) -> Option<Vec<String>> {
    let rest = name.strip_prefix("FLOODGATE__")?;
    let mut parts: Vec<String> = rest.split("__").map(str::to_ascii_lowercase).collect();
    if parts.iter().any(String::is_empty) {
        return None;
    }
    if parts.len() == 3 && parts[0] == "kafka" && parts[1] == "producer" {
        parts[2] = parts[2].replace('_', ".");
    }
    Some(parts)
}

/// An environment value as TOML would read it (`42`, `true`, `1.5`), else as a string.
fn parse_scalar(value: &str) -> toml::Value {
    toml::from_str::<toml::Table>(&format!("v = {value}"))
        .ok()
        .and_then(|mut t| t.remove("v"))
        .filter(|v| !v.is_table())
        .unwrap_or_else(|| toml::Value::String(value.to_string()))
}

fn set_path(table: &mut toml::Table, path: &[String], value: toml::Value) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut current = table;
    for key in parents {
        let entry = current
            .entry(key.clone())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        if !entry.is_table() {
            *entry = toml::Value::Table(toml::Table::new());
        }
        let toml::Value::Table(next) = entry else {
            return;
        };
        current = next;
    }
    current.insert(last.clone(), value);
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}
