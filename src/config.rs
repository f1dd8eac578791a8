//! Typed, documented configuration: one TOML file, overridable from the environment.
//!
//! Every field's `///` comment is the operator's documentation. Defaults sit next to the
//! struct they belong to. Unknown keys are errors (`deny_unknown_fields`), so a typo never
//! silently falls back to a default.
//!
//! Environment overrides: `FLOODGATE__<SECTION>__<KEY>=value`, e.g.
//! `FLOODGATE__SERVER__LISTEN=0.0.0.0:8080` or `FLOODGATE__BUFFER__MAX_BYTES=1048576`.
//! librdkafka properties are written with `_` for `.`:
//! `FLOODGATE__KAFKA__PRODUCER__LINGER_MS=20` sets `linger.ms` (librdkafka property names
//! contain no underscores, so the mapping is unambiguous). Tenants are not taken from the
//! environment; use the file or the admin API.
//!
//! Layer: configuration. It imports only the foundations (`budget`, `identity`); every other
//! module may read it, and it validates everything it holds, tenants included.

use serde::{Deserialize, Serialize};

/// The whole gateway configuration.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Listeners and connection-level bounds.
    #[serde(default)]
    pub server: ServerConfig,
    /// The Kafka cluster and the producer's librdkafka properties.
    #[serde(default)]
    pub kafka: KafkaConfig,
    /// The bounded downstream buffer: records handed to the producer and not yet acknowledged.
    #[serde(default)]
    pub buffer: BufferConfig,
    /// Per-request bounds on what a client may send (the `[limits]` section).
    #[serde(default)]
    pub limits: RequestBounds,
    /// The global broker-protection budget, summed over all tenants.
    #[serde(default)]
    pub global: GlobalBudgetConfig,
    /// Calendar quotas: where their windows turn.
    #[serde(default)]
    pub quotas: QuotasConfig,
    /// Usage by tenant and hour, for chargeback.
    #[serde(default)]
    pub usage: UsageConfig,
    /// Admin API settings.
    #[serde(default)]
    pub admin: AdminConfig,
    /// Confluent REST Proxy compatibility (the `/topics` v2 and `/v3` routes).
    #[serde(default)]
    pub compat: CompatConfig,
    /// Cluster mode: budgets shared by several replicas through Redis.
    #[serde(default)]
    pub cluster: ClusterConfig,
    /// `Idempotency-Key`: how long answers are kept for retries, and within what bounds.
    #[serde(default)]
    pub idempotency: IdempotencyConfig,
    /// Adaptive broker protection (off by default).
    #[serde(default)]
    pub adaptive: AdaptiveConfig,
    /// Lag guards: producers of a topic slowed while its consumers fall behind.
    #[serde(default)]
    pub lag_guards: Vec<LagGuardConfig>,
    /// Requests over budget held briefly for their tokens instead of refused (off by default).
    #[serde(default)]
    pub wait: WaitConfig,
    /// Logging.
    #[serde(default)]
    pub log: LogConfig,
    /// The `/metrics` exposition: per-tenant cardinality, access.
    #[serde(default)]
    pub metrics: MetricsConfig,
    /// Credentials besides API keys: JWT issuers, client-certificate names.
    #[serde(default)]
    pub auth: AuthConfig,
    /// The Confluent Schema Registry schemas are resolved with.
    #[serde(default)]
    pub schema_registry: SchemaRegistryConfig,
    /// Data contracts: what the record values of some topics must be.
    #[serde(default)]
    pub schemas: Vec<ContractConfig>,
    /// Tenants known at start-up.
    #[serde(default)]
    pub tenants: Vec<TenantConfig>,
}

/// The most lag guards (each reads offsets with its own client).
pub const MAX_LAG_GUARDS: usize = 64;

impl Config {
    /// Server timeouts as durations.
    pub fn shutdown_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.server.shutdown_timeout_ms)
    }
}

mod adaptive;
mod auth;
mod budget;
mod buffer;
mod cluster;
mod compat;
mod idempotency;
mod kafka;
mod lag;
pub mod librdkafka;
mod load;
mod problem;
mod quota;
mod reference;
mod schemas;
mod server;
mod split;
mod telemetry;
mod tenant;
mod topics;
mod usage;
mod validate;
mod wait;

pub use adaptive::AdaptiveConfig;
pub use auth::{
    jwks_url_problem, AuthConfig, CertName, ClientCertConfig, JwtIssuerConfig, ALGORITHMS,
    MAX_NAME_BYTES,
};
pub(crate) use budget::budget_spec;
pub use budget::{whole_number, GlobalBudgetConfig, LimitMode};
pub use buffer::{BufferConfig, RequestBounds};
pub use cluster::ClusterConfig;
pub use compat::CompatConfig;
pub use idempotency::{IdempotencyConfig, OnStoreError};
pub use kafka::{KafkaConfig, ProducerProperties, PropertyValue};
pub use lag::LagGuardConfig;
pub use problem::{ConfigError, ConfigProblem};
pub use quota::{quota_specs, QuotaConfig, QuotasConfig, WindowName, COUNTED_APART, MAX_QUOTAS};
pub use reference::reference_markdown;
pub use schemas::{
    check_subject, ContractConfig, ContractMode, SchemaFormat, SchemaRegistryConfig,
};
pub use server::{AdminConfig, ServerConfig};
pub use telemetry::{LogConfig, LogFormat, MetricsConfig, PerTenant};
pub use tenant::{cross_tenant_problems, JwtClaim, Priority, TenantConfig, DEFAULT_BUFFER_SHARE};
pub(crate) use topics::topic_pattern_problems;
pub use topics::MAX_TOPIC_PATTERNS;
pub use usage::UsageConfig;
pub use wait::{burst_costs, WaitConfig, MAX_WAIT_MS};

#[cfg(test)]
mod tests;
