//! The `[schema_registry]` section (where schemas come from, within what bounds) and the
//! `[[schemas]]` list (a topic's data contract: what its record values must be).

use serde::{Deserialize, Serialize};

use super::{topic_pattern_problems, ConfigProblem};

/// The Confluent Schema Registry floodgate resolves schemas with.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct SchemaRegistryConfig {
    /// The registry's base URL (`http://` or `https://`); unset: no schema formats are served.
    pub url: Option<String>,
    /// Time allowed for one registry call, connection included, in milliseconds.
    pub timeout_ms: u64,
    /// Most compiled schemas kept in memory (also the most subject lookups remembered).
    pub cache_entries: usize,
    /// Most bytes the kept schemas may add up to, each counted as its estimated compiled size
    /// (its text times 16 for Avro, 32 for JSON Schema, 160 for Protobuf, plus 1 KiB).
    pub cache_bytes: usize,
    /// Largest schema text compiled, from a record or from the registry.
    pub max_schema_bytes: usize,
    /// Subjects (glob patterns) a record may name outright or by `RECORD_NAME`, besides its
    /// topic's own `<topic>-...`: shared subjects every team may read and evolve.
    pub open_subjects: Vec<String>,
    /// How long "the latest version of a subject" is trusted before it is asked again, in
    /// milliseconds. While the registry is down the last answer keeps being used.
    pub latest_ttl_ms: u64,
    /// A raw schema not yet registered under its subject is registered (as kafka-rest does);
    /// `false`: such a record is refused with 422 `schema_not_found`.
    pub auto_register: bool,
    /// Environment variables holding the registry's basic-auth user name and password (each
    /// may instead be given as a file, named by `<name>_FILE`).
    pub username_env: Option<String>,
    pub password_env: Option<String>,
    /// Registry calls in flight at once (more wait, within their timeout): a burst of unknown
    /// schema ids cannot open unbounded connections to the registry.
    pub max_concurrent_calls: usize,
}

impl Default for SchemaRegistryConfig {
    fn default() -> Self {
        Self {
            url: None,
            timeout_ms: 2_000,
            cache_entries: 1_000,
            cache_bytes: 64 * 1024 * 1024,
            max_schema_bytes: 256 * 1024,
            open_subjects: Vec::new(),
            latest_ttl_ms: 30_000,
            auto_register: true,
            username_env: None,
            password_env: None,
            max_concurrent_calls: 16,
        }
    }
}

/// A schema's format.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum SchemaFormat {
    Avro,
    Json,
    Protobuf,
}

/// What a contract does with a record's value.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ContractMode {
    /// The JSON value is checked against the JSON Schema and written unchanged.
    Validate,
    /// The JSON value is converted to the format's Confluent wire format.
    Serialize,
}

/// A data contract on topics: every record value written to them must fit the subject's
/// latest schema, whatever API wrote it.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ContractConfig {
    /// Topic patterns the contract covers (the first matching contract applies).
    pub topics: Vec<String>,
    pub format: SchemaFormat,
    pub mode: ContractMode,
    /// The subject whose latest schema applies; default `<topic>-value` (TopicNameStrategy).
    #[serde(default)]
    pub subject: Option<String>,
}

/// Whether a subject name can be used in the registry's paths: 1 to 255 characters, no
/// control characters, not a dot segment (`.` and `..` would change the path a URL resolves
/// to).
pub fn check_subject(subject: &str) -> Result<(), String> {
    if subject.is_empty() || subject.len() > 255 {
        return Err("a subject is 1 to 255 characters".into());
    }
    if subject.chars().any(char::is_control) {
        return Err("a subject has no control characters".into());
    }
    // Path and query characters a registry or a proxy before it might decode and route by,
    // and the bidirectional controls that make a name read as another.
    let unsafe_char = |c: char| {
        matches!(c, '/' | '\\' | '?' | '#' | '%')
            || ('\u{202A}'..='\u{202E}').contains(&c)
            || ('\u{2066}'..='\u{2069}').contains(&c)
    };
    if let Some(c) = subject.chars().find(|c| unsafe_char(*c)) {
        return Err(format!("a subject has no {c:?}"));
    }
    if subject == "." || subject == ".." {
        return Err(format!("{subject:?} is not a subject"));
    }
    Ok(())
}

/// Most contracts in a configuration.
pub const MAX_CONTRACTS: usize = 1_000;

impl SchemaRegistryConfig {
    pub fn problems(&self, contracts: &[ContractConfig]) -> Vec<ConfigProblem> {
        let mut problems = Vec::new();
        match &self.url {
            Some(url) => match reqwest::Url::parse(url) {
                Ok(u) if matches!(u.scheme(), "http" | "https") && !u.cannot_be_a_base() => {}
                Ok(_) => problems.push(ConfigProblem::new(
                    "schema_registry.url",
                    "must be an http:// or https:// URL",
                )),
                Err(e) => problems.push(ConfigProblem::new("schema_registry.url", e.to_string())),
            },
            None if !contracts.is_empty() => problems.push(ConfigProblem::new(
                "schema_registry.url",
                "[[schemas]] contracts need a Schema Registry: set [schema_registry] url",
            )),
            None => {}
        }
        if !(1..=60_000).contains(&self.timeout_ms) {
            problems.push(ConfigProblem::new(
                "schema_registry.timeout_ms",
                "must be 1 to 60000",
            ));
        }
        if self.cache_entries == 0 || self.cache_bytes == 0 {
            problems.push(ConfigProblem::new(
                "schema_registry.cache_entries",
                "cache_entries and cache_bytes must be at least 1",
            ));
        }
        if !(1024..=16 * 1024 * 1024).contains(&self.max_schema_bytes) {
            problems.push(ConfigProblem::new(
                "schema_registry.max_schema_bytes",
                "must be 1024 to 16777216",
            ));
        }
        for (i, p) in self.open_subjects.iter().enumerate() {
            if let Err(e) = glob::Pattern::new(p) {
                problems.push(ConfigProblem::new(
                    format!("schema_registry.open_subjects[{i}]"),
                    e.to_string(),
                ));
            }
        }
        if self.max_concurrent_calls == 0 {
            problems.push(ConfigProblem::new(
                "schema_registry.max_concurrent_calls",
                "must be at least 1",
            ));
        }
        if self.username_env.is_some() != self.password_env.is_some() {
            problems.push(ConfigProblem::new(
                "schema_registry.password_env",
                "username_env and password_env are set together or not at all",
            ));
        }
        for (key, var) in [
            ("schema_registry.username_env", &self.username_env),
            ("schema_registry.password_env", &self.password_env),
        ] {
            if let Some(var) = var {
                match crate::env_secret::read(var) {
                    Ok(Some(v)) if !v.is_empty() => {}
                    Ok(_) => problems.push(ConfigProblem::new(
                        key,
                        format!("the environment variable {var} is not set (nor {var}_FILE)"),
                    )),
                    Err(e) => problems.push(ConfigProblem::new(key, e)),
                }
            }
        }
        if contracts.len() > MAX_CONTRACTS {
            problems.push(ConfigProblem::new(
                "schemas",
                format!("at most {MAX_CONTRACTS} contracts"),
            ));
        }
        for (i, c) in contracts.iter().enumerate() {
            let at = format!("schemas[{i}]");
            problems.extend(topic_pattern_problems(&at, &c.topics));
            if c.mode == ContractMode::Validate && c.format != SchemaFormat::Json {
                problems.push(ConfigProblem::new(
                    format!("{at}.mode"),
                    "validate keeps the JSON as it was sent, so it needs format = \"json\"; use mode = \"serialize\" for avro and protobuf",
                ));
            }
            if let Some(s) = &c.subject {
                if let Err(e) = check_subject(s) {
                    problems.push(ConfigProblem::new(format!("{at}.subject"), e));
                }
            }
        }
        problems
    }

    /// The basic-auth credentials, read from their variables (or their `_FILE` twins).
    pub fn credentials(&self) -> Option<(String, String)> {
        let read = |var: &Option<String>| crate::env_secret::read(var.as_ref()?).ok().flatten();
        Some((read(&self.username_env)?, read(&self.password_env)?))
    }
}
