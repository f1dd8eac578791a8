//! `[metrics]` and `[log]`: what the gateway tells its operators and how.

use serde::{Deserialize, Serialize};

/// `/metrics`: how many per-tenant series, and who may read them.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    /// Which tenants get series of their own: `all` (every tenant: a scrape grows with the
    /// tenants), `top` (the `top_tenants` busiest of the last minute, the rest summed under
    /// `tenant="_other"`, so totals stay exact; every tenant has its own while there are no
    /// more than `top_tenants`), or `none` (everything under `_other`).
    pub per_tenant: PerTenant,
    /// How many tenants `top` shows on their own (1 to 10,000).
    pub top_tenants: usize,
    /// The environment variable holding a bearer token `/metrics` then requires (or
    /// `<name>_FILE`, naming a file that holds it); unset: open (as `/healthz` and `/readyz`
    /// are).
    pub token_env: Option<String>,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        Self {
            per_tenant: PerTenant::Top,
            top_tenants: 100,
            token_env: None,
        }
    }
}

/// `[metrics] per_tenant`.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum PerTenant {
    All,
    Top,
    None,
}

/// Logging.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// `text` for people, `json` for log pipelines.
    pub format: LogFormat,
    /// A tracing filter (`info`, `floodgate=debug`, ...); `RUST_LOG` wins when set.
    pub level: String,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            format: LogFormat::Text,
            level: "info".into(),
        }
    }
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}
