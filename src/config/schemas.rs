//! The `[schema_registry]` section (where schemas come from, within what bounds) and the
//! `[[schemas]]` list (a topic's data contract: what its record values must be).

use serde::{Deserialize, Serialize};

use super::{topic_pattern_problems, ConfigProblem};

/// The Confluent Schema Registry floodgate resolves schemas with.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct SchemaRegistryConfig {
    /// The registry's base URL (`http://` or `https://`); unset: no schema formats are served.
    pub url: Option<String>,
    /// Time allowed for one registry call, connection included, in milliseconds.
    pub timeout_ms: u64,
    /// Most compiled schemas kept in memory (also the most subject lookups remembered).
    pub cache_entries: usize,
    /// Most bytes the kept schemas may add up to, each counted as what its compile kept on the
    /// heap (measured), plus its patterns' match caches.
    pub cache_bytes: usize,
    /// Most bytes one compiled schema may take (measured as it is compiled): a larger one is
    /// refused with 422 `schema_too_costly` and never kept.
    pub max_schema_memory_bytes: usize,
    /// Most regexes (`pattern`, `patternProperties` keys) one JSON Schema may have.
    pub max_schema_patterns: usize,
    /// Most bytes one regex may compile to (the regex engine's `size_limit`).
    pub max_pattern_bytes: usize,
    /// Threads that compile schemas and check or convert values beyond a few KB, off the
    /// request workers.
    pub workers: usize,
    /// Of those, the most one tenant's work may hold at once: a tenant with expensive records
    /// waits for its own share.
    pub tenant_workers: usize,
    /// The longest a compile or a record waits for its tenant's share, in milliseconds; then
    /// it is refused 429 `schema_busy` with a Retry-After.
    pub wait_ms: u64,
    /// CPU one record's check or conversion may take, in milliseconds: past it the record is
    /// refused with 422 `schema_too_costly`.
    pub max_check_cpu_ms: u64,
    /// Schemas one tenant may register per second, sustained, and at once (a tenant's raw
    /// schemas are registered only for requests that passed every other check).
    pub tenant_registrations_per_sec: u64,
    /// The burst of `tenant_registrations_per_sec`: schemas one tenant may register at once.
    pub tenant_registrations_burst: u64,
    /// Registry lookups (an id or a subject's version the gateway has not cached) one tenant's
    /// requests may cause per second, sustained, and at once: refused requests naming unknown
    /// ids made 174 registry calls a second, slowing every tenant's first use of a schema.
    pub tenant_lookups_per_sec: u64,
    /// The burst of `tenant_lookups_per_sec`: lookups one tenant's requests may cause at once.
    pub tenant_lookups_burst: u64,
    /// CPU milliseconds of the schema step no budget pays for (every compile, and every check
    /// that refused its record) one tenant may cause per second, sustained, and at once: an
    /// admitted record pays for its check through the budgets, the rest is paid through this
    /// (then 429 `schema_busy` until it is paid off).
    pub tenant_unpaid_work_ms_per_sec: u64,
    /// The burst of `tenant_unpaid_work_ms_per_sec`: unpaid milliseconds one tenant may cause
    /// at once; also the most CPU one request's passed checks may take before it is admitted
    /// (past it, 422 `schema_too_costly`: send fewer records per request).
    pub tenant_unpaid_work_ms_burst: u64,
    /// CPU of a passing check that an admitted record's budgets pay for, in microseconds:
    /// `paid_check_us`, plus `paid_check_us_per_kib` for each KiB of the key or value checked
    /// (ten times what a check of ordinary schemas costs). The rest is the tenant's unpaid
    /// work: else a record of a few KB whose schema makes its check cost 0.3 s bought that
    /// much of a schema thread for one record of budget, and two tenants allowed 1 record/s
    /// held both threads.
    pub paid_check_us: u64,
    /// See `paid_check_us`: the microseconds paid for each KiB of the key or value checked.
    pub paid_check_us_per_kib: u64,
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
    /// See `username_env`: the variable holding the password.
    pub password_env: Option<String>,
    /// Registry calls in flight at once (more wait, within their timeout): a burst of unknown
    /// schema ids cannot open unbounded connections to the registry.
    pub max_concurrent_calls: usize,
    /// Of those, the most one tenant's requests may have in flight (its further calls wait
    /// for its own, within their timeout, then 429 `schema_busy`): else one tenant naming
    /// unknown ids on a slow registry holds every slot and the others get 503.
    pub tenant_concurrent_calls: usize,
}

impl Default for SchemaRegistryConfig {
    fn default() -> Self {
        Self {
            url: None,
            timeout_ms: 2_000,
            cache_entries: 1_000,
            cache_bytes: 64 * 1024 * 1024,
            max_schema_memory_bytes: 16 * 1024 * 1024,
            max_schema_patterns: 100,
            max_pattern_bytes: 256 * 1024,
            workers: 2,
            tenant_workers: 1,
            wait_ms: 2_000,
            max_check_cpu_ms: 1_000,
            tenant_registrations_per_sec: 1,
            tenant_registrations_burst: 10,
            tenant_lookups_per_sec: 10,
            tenant_lookups_burst: 100,
            tenant_unpaid_work_ms_per_sec: 200,
            tenant_unpaid_work_ms_burst: 1_000,
            paid_check_us: 1_000,
            paid_check_us_per_kib: 100,
            max_schema_bytes: 256 * 1024,
            open_subjects: Vec::new(),
            latest_ttl_ms: 30_000,
            auto_register: true,
            username_env: None,
            password_env: None,
            max_concurrent_calls: 16,
            tenant_concurrent_calls: 4,
        }
    }
}

/// A schema's format.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq, Hash, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SchemaFormat {
    Avro,
    Json,
    Protobuf,
}

/// What a contract does with a record's value.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ContractMode {
    /// The JSON value is checked against the JSON Schema and written unchanged.
    Validate,
    /// The JSON value is converted to the format's Confluent wire format.
    Serialize,
}

/// A data contract on topics: every record value written to them must fit the subject's
/// latest schema, whatever API wrote it.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ContractConfig {
    /// Topic patterns the contract covers (the first matching contract applies).
    pub topics: Vec<String>,
    /// The schema's format.
    pub format: SchemaFormat,
    /// `validate`: the JSON value is checked against the JSON Schema and written unchanged;
    /// `serialize`: it is converted to the format's Confluent wire format.
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
        problems.extend(self.work_problems());
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
        if self.tenant_concurrent_calls == 0
            || self.tenant_concurrent_calls > self.max_concurrent_calls.max(1)
        {
            problems.push(ConfigProblem::new(
                "schema_registry.tenant_concurrent_calls",
                "must be at least 1 and at most max_concurrent_calls",
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

    /// The bounds of the schema step's work: threads, waits, memory, registrations.
    fn work_problems(&self) -> Vec<ConfigProblem> {
        let mut problems = Vec::new();
        let mut check = |ok: bool, key: &str, what: &str| {
            if !ok {
                problems.push(ConfigProblem::new(format!("schema_registry.{key}"), what));
            }
        };
        check(
            (1..=64).contains(&self.workers),
            "workers",
            "must be 1 to 64",
        );
        check(
            (1..=self.workers.max(1)).contains(&self.tenant_workers),
            "tenant_workers",
            "must be 1 to workers",
        );
        check(
            (1..=60_000).contains(&self.wait_ms),
            "wait_ms",
            "must be 1 to 60000",
        );
        check(
            (1..=60_000).contains(&self.max_check_cpu_ms),
            "max_check_cpu_ms",
            "must be 1 to 60000",
        );
        check(
            (64 * 1024..=1024 * 1024 * 1024).contains(&self.max_schema_memory_bytes),
            "max_schema_memory_bytes",
            "must be 65536 to 1073741824",
        );
        check(
            self.max_schema_patterns <= 100_000,
            "max_schema_patterns",
            "must be at most 100000",
        );
        check(
            (1024..=64 * 1024 * 1024).contains(&self.max_pattern_bytes),
            "max_pattern_bytes",
            "must be 1024 to 67108864",
        );
        check(
            (1..=1_000_000).contains(&self.tenant_registrations_per_sec)
                && (1..=1_000_000).contains(&self.tenant_registrations_burst),
            "tenant_registrations_per_sec",
            "tenant_registrations_per_sec and tenant_registrations_burst must be 1 to 1000000",
        );
        check(
            (1..=1_000_000).contains(&self.tenant_lookups_per_sec)
                && (1..=1_000_000).contains(&self.tenant_lookups_burst),
            "tenant_lookups_per_sec",
            "tenant_lookups_per_sec and tenant_lookups_burst must be 1 to 1000000",
        );
        check(
            (1..=1_000_000).contains(&self.tenant_unpaid_work_ms_per_sec)
                && (1..=1_000_000).contains(&self.tenant_unpaid_work_ms_burst),
            "tenant_unpaid_work_ms_per_sec",
            "tenant_unpaid_work_ms_per_sec and tenant_unpaid_work_ms_burst must be 1 to 1000000",
        );
        check(
            self.paid_check_us <= 1_000_000 && self.paid_check_us_per_kib <= 1_000_000,
            "paid_check_us",
            "paid_check_us and paid_check_us_per_kib must be 0 to 1000000",
        );
        problems
    }

    /// The basic-auth credentials, read from their variables (or their `_FILE` twins).
    pub fn credentials(&self) -> Option<(String, String)> {
        let read = |var: &Option<String>| crate::env_secret::read(var.as_ref()?).ok().flatten();
        Some((read(&self.username_env)?, read(&self.password_env)?))
    }
}
