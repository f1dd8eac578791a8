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

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::budget::{BudgetSpec, RateSpec};
use crate::identity::{ApiKeyHash, TenantId, TopicPatterns};

/// The whole gateway configuration.
#[derive(Debug, Clone, Deserialize, Serialize)]
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
    /// Admin API settings.
    #[serde(default)]
    pub admin: AdminConfig,
    /// Confluent REST Proxy compatibility (the `/topics` v2 and `/v3` routes).
    #[serde(default)]
    pub compat: CompatConfig,
    /// Cluster mode: budgets shared by several replicas through Redis.
    #[serde(default)]
    pub cluster: ClusterConfig,
    /// Adaptive broker protection (off by default).
    #[serde(default)]
    pub adaptive: AdaptiveConfig,
    /// Lag guards: producers of a topic slowed while its consumers fall behind.
    #[serde(default)]
    pub lag_guards: Vec<LagGuardConfig>,
    /// Logging.
    #[serde(default)]
    pub log: LogConfig,
    /// Tenants known at start-up.
    #[serde(default)]
    pub tenants: Vec<TenantConfig>,
}

/// Listeners and connection-level bounds.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Address of the produce listener.
    pub listen: SocketAddr,
    /// Address of the admin listener (admin API, metrics, health). Never the same as `listen`.
    pub admin_listen: SocketAddr,
    /// Largest request body accepted, in bytes; larger bodies get 413 before they are read.
    pub max_body_bytes: u64,
    /// Connections served at once on the produce listener; further connections wait in the
    /// kernel's accept backlog.
    pub max_connections: usize,
    /// Time allowed for a new connection to finish its TLS handshake, show which HTTP version
    /// it speaks and send its first request head; and for every later HTTP/1 request head.
    /// In milliseconds.
    pub header_read_timeout_ms: u64,
    /// Time a connection may stay open with no request in flight (HTTP/1 keep-alive, an idle
    /// HTTP/2 session) before it is closed gracefully, in milliseconds.
    pub idle_timeout_ms: u64,
    /// HTTP/2 streams (concurrent requests) one connection may have open.
    pub http2_max_streams: u32,
    /// Request-body bytes held in memory at once, over all connections and HTTP/2 streams.
    /// A request reserves its declared length before its body is read (a chunked one, as its
    /// chunks arrive); when the budget is spent, new bodies are refused at once with
    /// `429 server_busy`.
    pub max_inflight_body_bytes: u64,
    /// Failed authentications (bad API keys, bad admin tokens) allowed per source address and
    /// second, after a burst of `auth_failures_burst`; beyond that, the address is answered
    /// 429 before its key is checked, until its allowance refills.
    pub auth_failures_per_sec: u32,
    pub auth_failures_burst: u32,
    /// Time allowed for a client to send its whole request body, in milliseconds
    /// (a slow upload is cut off with 408).
    pub body_read_timeout_ms: u64,
    /// Largest request head (request line plus headers), in bytes.
    pub max_header_bytes: usize,
    /// Time allowed for a graceful shutdown (drain requests, flush the producer), in milliseconds.
    pub shutdown_timeout_ms: u64,
    /// PEM certificate chain: with `tls_key_file`, both listeners speak TLS (HTTP/2 and 1.1).
    pub tls_cert_file: Option<PathBuf>,
    /// PEM private key for `tls_cert_file`.
    pub tls_key_file: Option<PathBuf>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            admin_listen: SocketAddr::from(([127, 0, 0, 1], 9090)),
            max_body_bytes: 8 * 1024 * 1024,
            max_connections: 4096,
            header_read_timeout_ms: 10_000,
            idle_timeout_ms: 60_000,
            http2_max_streams: 32,
            max_inflight_body_bytes: 64 * 1024 * 1024,
            auth_failures_per_sec: 10,
            auth_failures_burst: 100,
            body_read_timeout_ms: 30_000,
            max_header_bytes: 64 * 1024,
            shutdown_timeout_ms: 30_000,
            tls_cert_file: None,
            tls_key_file: None,
        }
    }
}

/// The Kafka cluster and the producer's librdkafka properties.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct KafkaConfig {
    /// `host:port[,host:port...]` of the brokers to bootstrap from.
    pub bootstrap_servers: String,
    /// librdkafka producer properties, passed through verbatim (`linger.ms`, `acks`,
    /// `compression.type`, `security.protocol`, `sasl.*`, `ssl.*`, ...). They override
    /// floodgate's defaults. The queue limits that keep librdkafka below our buffer,
    /// `message.timeout.ms` (always infinite) and `bootstrap.servers` are reserved under every
    /// name librdkafka knows them by, and a property may be set under one name only
    /// (`linger.ms` or its alias `queue.buffering.max.ms`, not both). Values of properties
    /// holding secrets (`*password*`, `*secret*`, `sasl.oauthbearer.*`, `ssl.key*`) are never
    /// printed.
    pub producer: ProducerProperties,
    /// How often the cluster's topic list (existence, partition counts) is refreshed in the
    /// background, in milliseconds. `/readyz` follows the last refresh, so this is also how
    /// soon readiness notices Kafka going away or coming back. A topic not in the list is
    /// looked up again at most once a second.
    pub metadata_ttl_ms: u64,
    /// How long a metadata lookup may take before the request fails with 503, in milliseconds.
    pub metadata_timeout_ms: u64,
    /// How long a sync request waits for Kafka's acknowledgements before answering 503
    /// `kafka_unavailable`. Its records stay queued and are still delivered when Kafka returns
    /// (librdkafka never times a record out: see `kafka::settings`).
    pub delivery_timeout_ms: u64,
}

impl Default for KafkaConfig {
    fn default() -> Self {
        Self {
            bootstrap_servers: "127.0.0.1:9092".into(),
            producer: ProducerProperties::default(),
            metadata_ttl_ms: 2_000,
            metadata_timeout_ms: 5_000,
            delivery_timeout_ms: 30_000,
        }
    }
}

/// The `[kafka.producer]` table. Its `Debug` form redacts secrets, so a configuration can be
/// logged or shown in an error without leaking a password.
#[derive(Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(transparent)]
pub struct ProducerProperties(pub BTreeMap<String, PropertyValue>);

impl std::ops::Deref for ProducerProperties {
    type Target = BTreeMap<String, PropertyValue>;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for ProducerProperties {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl std::fmt::Debug for ProducerProperties {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut map = f.debug_map();
        for (name, value) in &self.0 {
            if librdkafka::is_sensitive(name) {
                map.entry(name, &"<redacted>");
            } else {
                map.entry(name, value);
            }
        }
        map.finish()
    }
}

/// A librdkafka property value: TOML strings, integers, floats and booleans are all accepted
/// and handed to librdkafka as their text.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(untagged)]
pub enum PropertyValue {
    Text(String),
    Integer(i64),
    Float(f64),
    Bool(bool),
}

impl std::fmt::Display for PropertyValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Text(s) => f.write_str(s),
            Self::Integer(i) => write!(f, "{i}"),
            Self::Float(x) => write!(f, "{x}"),
            Self::Bool(b) => write!(f, "{b}"),
        }
    }
}

/// The bounded downstream buffer.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct BufferConfig {
    /// Most record bytes (key + value + header names and values) held between enqueue and
    /// Kafka's acknowledgement.
    pub max_bytes: u64,
    /// Most records held between enqueue and Kafka's acknowledgement.
    pub max_records: u64,
    /// Occupancy (fraction of bytes or records) above which `/readyz` answers 503, so a load
    /// balancer sends new clients elsewhere before this instance must refuse them.
    pub ready_high_water: f64,
}

impl Default for BufferConfig {
    fn default() -> Self {
        Self {
            max_bytes: 64 * 1024 * 1024,
            max_records: 200_000,
            ready_high_water: 0.9,
        }
    }
}

/// Per-request bounds (the `[limits]` section). Defaults stay below Kafka's default
/// `message.max.bytes` (1 MB).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RequestBounds {
    /// Most records in one request.
    pub max_records_per_request: usize,
    /// Largest record key, in bytes.
    pub max_key_bytes: usize,
    /// Largest record value, in bytes.
    pub max_value_bytes: usize,
    /// Largest sum of one record's header names and values, in bytes.
    pub max_headers_bytes: usize,
}

impl Default for RequestBounds {
    fn default() -> Self {
        Self {
            max_records_per_request: 10_000,
            max_key_bytes: 16 * 1024,
            max_value_bytes: 900 * 1024,
            max_headers_bytes: 16 * 1024,
        }
    }
}

/// The global broker-protection budget; unset rates mean "unlimited".
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct GlobalBudgetConfig {
    /// Records per second summed over all tenants.
    #[serde(
        default,
        deserialize_with = "whole_number",
        skip_serializing_if = "Option::is_none"
    )]
    pub records_per_sec: Option<u64>,
    /// Records the global bucket can hold (defaults to one second of `records_per_sec`).
    #[serde(
        default,
        deserialize_with = "whole_number",
        skip_serializing_if = "Option::is_none"
    )]
    pub records_burst: Option<u64>,
    /// Record bytes per second summed over all tenants.
    #[serde(
        default,
        deserialize_with = "whole_number",
        skip_serializing_if = "Option::is_none"
    )]
    pub bytes_per_sec: Option<u64>,
    /// Bytes the global bucket can hold (defaults to one second of `bytes_per_sec`).
    #[serde(
        default,
        deserialize_with = "whole_number",
        skip_serializing_if = "Option::is_none"
    )]
    pub bytes_burst: Option<u64>,
    /// Leave the global buckets out of every tenant's `RateLimit` fields, so no tenant learns
    /// how much the others are sending. A refusal for the global budget still says
    /// `global_records` / `global_bytes`, with its `Retry-After`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub hide_from_tenants: bool,
}

impl GlobalBudgetConfig {
    /// The budget this section describes, or the key of the first invalid value.
    pub fn spec(&self) -> Result<BudgetSpec, ConfigProblem> {
        budget_spec(
            "global",
            self.records_per_sec,
            self.records_burst,
            self.bytes_per_sec,
            self.bytes_burst,
        )
    }
}

/// Admin API settings.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdminConfig {
    /// Name of the environment variable that holds the admin bearer token (never the token).
    pub token_env: String,
    /// Where the tenant registry is persisted; unset keeps admin changes in memory only.
    pub state_file: Option<PathBuf>,
}

impl Default for AdminConfig {
    fn default() -> Self {
        Self {
            token_env: "FLOODGATE_ADMIN_TOKEN".into(),
            state_file: None,
        }
    }
}

/// Confluent REST Proxy compatibility.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct CompatConfig {
    /// The cluster id the v3 routes report; unset: the Kafka cluster's own id from metadata.
    pub cluster_id: Option<String>,
    /// Refuse v3 produce requests whose path names another cluster id (Confluent Platform does
    /// not check it; Confluent Cloud does).
    pub check_cluster_id: bool,
    /// Most entries in one v3 `records:batch` request (1 to 50).
    pub batch_max_entries: usize,
    /// Most records of one v3 stream handed to Kafka and not yet reported back; beyond that,
    /// floodgate stops reading the stream until reports have been sent.
    pub stream_max_unsettled: usize,
    /// Longest time a v3 stream may go without a new record, in milliseconds.
    pub stream_idle_timeout_ms: u64,
    /// Longest time one v3 stream may stay open, in milliseconds.
    pub stream_max_duration_ms: u64,
}

impl Default for CompatConfig {
    fn default() -> Self {
        Self {
            cluster_id: None,
            check_cluster_id: false,
            batch_max_entries: 10,
            stream_max_unsettled: 1000,
            stream_idle_timeout_ms: 30_000,
            stream_max_duration_ms: 300_000,
        }
    }
}

/// Cluster mode: tenant and global budgets shared by every replica through Redis, spent
/// locally from leased slices (see `cluster`).
#[derive(Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterConfig {
    /// `redis://host:port/db` or `rediss://...` (TLS); unset: budgets are this replica's own.
    pub redis_url: Option<String>,
    /// This replica's name among the members; default: hostname and produce port.
    pub replica_id: Option<String>,
    /// Prefix of every Redis key floodgate writes (several gateways may share one Redis).
    pub key_prefix: String,
    /// Time allowed to open a connection to Redis, in milliseconds.
    pub connect_timeout_ms: u64,
    /// Time allowed for one Redis command, in milliseconds; beyond it the replica counts the
    /// call failed and, if Redis keeps failing, runs on its local share.
    pub command_timeout_ms: u64,
    /// ε: the slices all replicas hold together stay within ε × burst (each replica at most
    /// ε × burst / members). The cluster-wide bound is burst × (1 + ε) + rate × T.
    pub slice_fraction: f64,
    /// A slice is sized for this much of the replica's observed demand, in milliseconds.
    pub slice_horizon_ms: u64,
    /// Tokens not spent within this time are given back to Redis, in milliseconds.
    pub slice_ttl_ms: u64,
    /// How often each replica announces itself (and counts the members), in milliseconds.
    pub heartbeat_ms: u64,
    /// A replica not heard from for this long no longer counts as a member, in milliseconds.
    pub member_ttl_ms: u64,
    /// Keep the tenant registry in a compacted Kafka topic shared by every replica, instead
    /// of this replica's configuration file and state file.
    pub shared_registry: bool,
    /// The registry's topic (created at start-up when missing: compacted, one partition).
    pub registry_topic: String,
    /// Replication factor of the registry topic when floodgate creates it; unset: as many
    /// brokers as the cluster has, at most 3.
    pub registry_replication: Option<u16>,
    /// How long an admin change waits for Kafka to take it (and for this replica to read it
    /// back) before answering 503, in milliseconds.
    pub registry_write_timeout_ms: u64,
}

impl ClusterConfig {
    fn problems(&self) -> Vec<ConfigProblem> {
        let mut problems = Vec::new();
        if let Some(url) = &self.redis_url {
            if !(url.starts_with("redis://") || url.starts_with("rediss://")) {
                problems.push(ConfigProblem::new(
                    "cluster.redis_url",
                    "must start with redis:// or rediss://",
                ));
            } else if redis::Client::open(url.as_str()).is_err() {
                problems.push(ConfigProblem::new(
                    "cluster.redis_url",
                    "is not a valid Redis URL",
                ));
            }
        }
        if !(self.slice_fraction > 0.0 && self.slice_fraction <= 1.0) {
            problems.push(ConfigProblem::new(
                "cluster.slice_fraction",
                "must be greater than 0 and at most 1",
            ));
        }
        let valid_name = |v: &str| {
            !v.is_empty()
                && v.len() <= 128
                && v.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':'))
        };
        if !valid_name(&self.key_prefix) {
            problems.push(ConfigProblem::new(
                "cluster.key_prefix",
                "must be 1 to 128 characters of a-z A-Z 0-9 - _ . :",
            ));
        }
        if let Some(id) = self.replica_id.as_deref().filter(|id| !valid_name(id)) {
            let _ = id;
            problems.push(ConfigProblem::new(
                "cluster.replica_id",
                "must be 1 to 128 characters of a-z A-Z 0-9 - _ . :",
            ));
        }
        if self.registry_topic.is_empty()
            || self.registry_topic.len() > 249
            || !self
                .registry_topic
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        {
            problems.push(ConfigProblem::new(
                "cluster.registry_topic",
                "must be a Kafka topic name: 1 to 249 characters of a-z A-Z 0-9 - _ .",
            ));
        }
        if self.registry_replication == Some(0) {
            problems.push(ConfigProblem::new(
                "cluster.registry_replication",
                "must be at least 1",
            ));
        }
        if self.registry_write_timeout_ms == 0 {
            problems.push(ConfigProblem::new(
                "cluster.registry_write_timeout_ms",
                "must be at least 1",
            ));
        }
        if self.member_ttl_ms <= self.heartbeat_ms {
            problems.push(ConfigProblem::new(
                "cluster.member_ttl_ms",
                "must be longer than cluster.heartbeat_ms",
            ));
        }
        problems
    }
}

impl Default for ClusterConfig {
    fn default() -> Self {
        Self {
            redis_url: None,
            replica_id: None,
            key_prefix: "fg".into(),
            connect_timeout_ms: 500,
            command_timeout_ms: 25,
            slice_fraction: 0.25,
            slice_horizon_ms: 100,
            slice_ttl_ms: 1000,
            heartbeat_ms: 500,
            member_ttl_ms: 2000,
            shared_registry: false,
            registry_topic: "_floodgate_registry".into(),
            registry_replication: None,
            registry_write_timeout_ms: 5000,
        }
    }
}

impl std::fmt::Debug for ClusterConfig {
    /// The Redis URL may carry a password: never printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterConfig")
            .field("redis_url", &self.redis_url.as_ref().map(|_| "<redacted>"))
            .field("replica_id", &self.replica_id)
            .field("key_prefix", &self.key_prefix)
            .field("slice_fraction", &self.slice_fraction)
            .field("shared_registry", &self.shared_registry)
            .field("registry_topic", &self.registry_topic)
            .finish_non_exhaustive()
    }
}

/// Logging.
#[derive(Debug, Clone, Deserialize, Serialize)]
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

#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

/// One tenant. `Default` is a tenant with no id, no keys and no topics (invalid until those are
/// set), so code and tests write only the fields they care about.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TenantConfig {
    /// Stable identifier, used in logs, metrics and the admin API.
    pub id: String,
    /// Lowercase hex SHA-256 digests of the tenant's API keys (`printf %s KEY | sha256sum`).
    #[serde(default)]
    pub api_key_sha256: Vec<String>,
    /// Patterns of the topics the tenant may write: topic-name characters and the wildcards
    /// `*` (any run of characters) and `?` (one character); 1 to 100 patterns.
    pub topics: Vec<String>,
    /// Records per second; unset: limited by the global budget only.
    #[serde(
        default,
        deserialize_with = "whole_number",
        skip_serializing_if = "Option::is_none"
    )]
    pub records_per_sec: Option<u64>,
    /// Records the bucket holds (defaults to one second of `records_per_sec`).
    #[serde(
        default,
        deserialize_with = "whole_number",
        skip_serializing_if = "Option::is_none"
    )]
    pub records_burst: Option<u64>,
    /// Record bytes per second; unset: limited by the global budget only.
    #[serde(
        default,
        deserialize_with = "whole_number",
        skip_serializing_if = "Option::is_none"
    )]
    pub bytes_per_sec: Option<u64>,
    /// Bytes the bucket holds (defaults to one second of `bytes_per_sec`).
    #[serde(
        default,
        deserialize_with = "whole_number",
        skip_serializing_if = "Option::is_none"
    )]
    pub bytes_burst: Option<u64>,
    /// Largest fraction of the downstream buffer (bytes and records) this tenant may hold.
    #[serde(default)]
    pub max_buffer_share: Option<f64>,
    /// Who is refused first when the adaptive limit (`[adaptive]`) is below demand: `batch`,
    /// then `standard` (the default); `critical` keeps a reserved share.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<Priority>,
}

/// A tenant's priority class under the adaptive limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    Critical,
    #[default]
    Standard,
    Batch,
}

impl Priority {
    pub const ALL: [Priority; 3] = [Priority::Critical, Priority::Standard, Priority::Batch];

    pub fn as_str(self) -> &'static str {
        match self {
            Priority::Critical => "critical",
            Priority::Standard => "standard",
            Priority::Batch => "batch",
        }
    }
}

/// Adaptive broker protection: an admission limit below the configured budgets that follows
/// Kafka's own signals (see `adaptive`). Off unless `enabled`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct AdaptiveConfig {
    pub enabled: bool,
    /// How often the controller looks at the signals, in milliseconds.
    pub interval_ms: u64,
    /// Delivery p99 above which Kafka counts as slow, in milliseconds; unset: `baseline_factor`
    /// times the lowest p99 observed under load (at least `min_target_ms`).
    pub target_delivery_ms: Option<u64>,
    pub baseline_factor: f64,
    pub min_target_ms: u64,
    /// Healthy only below this fraction of the target (between it and the target: hold).
    pub healthy_fraction: f64,
    /// Buffer occupancy counted as pressure.
    pub buffer_pressure: f64,
    /// The limit is multiplied by this on pressure.
    pub decrease_factor: f64,
    /// The limit grows by this fraction of the ceiling per step when healthy and reached.
    pub increase_step: f64,
    pub decrease_cooldown_ms: u64,
    pub increase_cooldown_ms: u64,
    /// The limit never goes below this fraction of the ceiling.
    pub floor: f64,
    /// Share of the limit only critical tenants may use.
    pub critical_reserve: f64,
    /// The ceiling in records/s when `[global]` sets none (one of the two is required).
    pub max_records_per_sec: Option<u64>,
    /// The ceiling in bytes/s when `[global]` sets none (optional).
    pub max_bytes_per_sec: Option<u64>,
}

impl Default for AdaptiveConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            interval_ms: 500,
            target_delivery_ms: None,
            baseline_factor: 4.0,
            min_target_ms: 50,
            healthy_fraction: 0.5,
            buffer_pressure: 0.5,
            decrease_factor: 0.7,
            increase_step: 0.05,
            decrease_cooldown_ms: 2000,
            increase_cooldown_ms: 1000,
            floor: 0.05,
            critical_reserve: 0.2,
            max_records_per_sec: None,
            max_bytes_per_sec: None,
        }
    }
}

impl AdaptiveConfig {
    /// The ceiling: the global budget where it is set, else the section's own.
    pub fn ceiling(&self, global: &GlobalBudgetConfig) -> (Option<u64>, Option<u64>) {
        (
            global.records_per_sec.or(self.max_records_per_sec),
            global.bytes_per_sec.or(self.max_bytes_per_sec),
        )
    }

    pub fn problems(&self, global: &GlobalBudgetConfig) -> Vec<ConfigProblem> {
        let mut problems = Vec::new();
        let fraction = |key: &str, v: f64, problems: &mut Vec<ConfigProblem>| {
            if !(v > 0.0 && v < 1.0) {
                problems.push(ConfigProblem::new(
                    format!("adaptive.{key}"),
                    "must be greater than 0 and less than 1",
                ));
            }
        };
        fraction("healthy_fraction", self.healthy_fraction, &mut problems);
        fraction("buffer_pressure", self.buffer_pressure, &mut problems);
        fraction("decrease_factor", self.decrease_factor, &mut problems);
        fraction("increase_step", self.increase_step, &mut problems);
        fraction("floor", self.floor, &mut problems);
        if !(0.0..1.0).contains(&self.critical_reserve) {
            problems.push(ConfigProblem::new(
                "adaptive.critical_reserve",
                "must be at least 0 and less than 1",
            ));
        }
        if !(self.baseline_factor >= 1.0 && self.baseline_factor <= 100.0) {
            problems.push(ConfigProblem::new(
                "adaptive.baseline_factor",
                "must be from 1 to 100",
            ));
        }
        const HOUR_MS: u64 = 3_600_000;
        for (key, v) in [
            ("interval_ms", Some(self.interval_ms)),
            ("min_target_ms", Some(self.min_target_ms)),
            ("decrease_cooldown_ms", Some(self.decrease_cooldown_ms)),
            ("increase_cooldown_ms", Some(self.increase_cooldown_ms)),
            ("target_delivery_ms", self.target_delivery_ms),
        ] {
            if v.is_some_and(|v| !(1..=HOUR_MS).contains(&v)) {
                problems.push(ConfigProblem::new(
                    format!("adaptive.{key}"),
                    "must be from 1 to 3600000 (one hour)",
                ));
            }
        }
        for (key, v) in [
            ("max_records_per_sec", self.max_records_per_sec),
            ("max_bytes_per_sec", self.max_bytes_per_sec),
        ] {
            if v.is_some_and(|v| !(1..=crate::budget::MAX_RATE_PER_SEC).contains(&v)) {
                problems.push(ConfigProblem::new(
                    format!("adaptive.{key}"),
                    "must be from 1 to 10000000000",
                ));
            }
        }
        if self.enabled && self.ceiling(global) == (None, None) {
            problems.push(ConfigProblem::new(
                "adaptive.max_records_per_sec",
                "is needed when [global] sets no records_per_sec or bytes_per_sec: the adaptive \
                 limit moves below a ceiling",
            ));
        }
        problems
    }
}

/// A lag guard: while consumer group `group` would need more than `max_recovery_s` to drain
/// its lag on `topics`, producers of those topics may add at most C / `headroom` records/s
/// (C: the group's observed consumption rate), so the lag shrinks.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LagGuardConfig {
    /// How the admin API and the metrics name it: 1 to 64 of a-z A-Z 0-9 - _ .
    pub name: String,
    /// Topic names or patterns ("orders.*").
    pub topics: Vec<String>,
    /// The consumer group whose lag counts (read, never joined).
    pub group: String,
    /// The longest acceptable time to drain the lag at the observed net drain rate.
    pub max_recovery_s: f64,
    /// Also act when the lag exceeds this many records.
    #[serde(default)]
    pub max_lag_records: Option<u64>,
    /// While active, producers may add at most C / headroom records/s.
    #[serde(default = "LagGuardConfig::default_headroom")]
    pub headroom: f64,
    /// How often offsets are read, in milliseconds.
    #[serde(default = "LagGuardConfig::default_interval_ms")]
    pub interval_ms: u64,
    /// The cap when the consumers have stopped (C = 0 while the lag grows).
    #[serde(default)]
    pub floor_records_per_sec: u64,
    /// The cap lifts once the recovery time (and the lag) is below this fraction of the limits.
    #[serde(default = "LagGuardConfig::default_release_fraction")]
    pub release_fraction: f64,
    /// A lag the consumers read within this many seconds counts as caught up (the distance
    /// between committing consumers and the log end is normal).
    #[serde(default = "LagGuardConfig::default_caught_up_s")]
    pub caught_up_s: f64,
    /// When offsets cannot be read, the last cap is kept this long, then released.
    #[serde(default = "LagGuardConfig::default_hold_s")]
    pub hold_s: f64,
    /// Rates are taken across this many seconds of readings (consumers that commit every
    /// few seconds still show a steady rate).
    #[serde(default = "LagGuardConfig::default_rate_window_s")]
    pub rate_window_s: f64,
    /// A group that commits nothing for this long while it has lag counts as stopped: C = 0
    /// and producers get the floor.
    #[serde(default = "LagGuardConfig::default_stopped_after_s")]
    pub stopped_after_s: f64,
}

impl LagGuardConfig {
    fn default_headroom() -> f64 {
        1.2
    }
    fn default_interval_ms() -> u64 {
        1000
    }
    fn default_release_fraction() -> f64 {
        0.5
    }
    fn default_caught_up_s() -> f64 {
        5.0
    }
    fn default_hold_s() -> f64 {
        30.0
    }
    fn default_rate_window_s() -> f64 {
        10.0
    }
    fn default_stopped_after_s() -> f64 {
        15.0
    }

    pub fn problems(&self, at: &str) -> Vec<ConfigProblem> {
        let mut problems = Vec::new();
        let mut bad = |key: &str, why: &str| {
            problems.push(ConfigProblem::new(format!("{at}.{key}"), why.to_string()));
        };
        if self.name.is_empty()
            || self.name.len() > 64
            || !self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        {
            bad("name", "must be 1 to 64 characters of a-z A-Z 0-9 - _ .");
        }
        problems.extend(topic_pattern_problems(at, &self.topics));
        let mut bad = |key: &str, why: &str| {
            problems.push(ConfigProblem::new(format!("{at}.{key}"), why.to_string()));
        };
        if self.group.is_empty() || self.group.len() > 255 {
            bad("group", "must be 1 to 255 characters");
        }
        const DAY_S: f64 = 86_400.0;
        if !(self.max_recovery_s > 0.0 && self.max_recovery_s <= DAY_S) {
            bad(
                "max_recovery_s",
                "must be greater than 0 and at most 86400 (a day)",
            );
        }
        if self
            .max_lag_records
            .is_some_and(|m| !(1..=crate::budget::MAX_RATE_PER_SEC).contains(&m))
        {
            bad("max_lag_records", "must be from 1 to 10000000000");
        }
        if !(self.headroom >= 1.0 && self.headroom <= 100.0) {
            bad("headroom", "must be from 1 to 100");
        }
        if !(10..=3_600_000).contains(&self.interval_ms) {
            bad("interval_ms", "must be from 10 to 3600000 (one hour)");
        }
        if self.floor_records_per_sec > crate::budget::MAX_RATE_PER_SEC {
            bad("floor_records_per_sec", "must be at most 10000000000");
        }
        if !(self.release_fraction > 0.0 && self.release_fraction < 1.0) {
            bad("release_fraction", "must be greater than 0 and less than 1");
        }
        if !(self.caught_up_s >= 0.0 && self.caught_up_s <= DAY_S) {
            bad("caught_up_s", "must be from 0 to 86400");
        }
        if !(self.hold_s >= 0.0 && self.hold_s <= DAY_S) {
            bad("hold_s", "must be from 0 to 86400");
        }
        if !(self.rate_window_s > 0.0 && self.rate_window_s <= 3_600.0) {
            bad("rate_window_s", "must be greater than 0 and at most 3600");
        }
        if !(self.stopped_after_s > 0.0 && self.stopped_after_s <= DAY_S) {
            bad(
                "stopped_after_s",
                "must be greater than 0 and at most 86400",
            );
        }
        problems
    }
}

/// Problems with a list of topic patterns (a tenant's or a lag guard's), at `{at}.topics`.
fn topic_pattern_problems(at: &str, topics: &[String]) -> Vec<ConfigProblem> {
    let mut problems = Vec::new();
    if topics.is_empty() || topics.len() > MAX_TOPIC_PATTERNS {
        problems.push(ConfigProblem::new(
            format!("{at}.topics"),
            format!("must list 1 to {MAX_TOPIC_PATTERNS} patterns"),
        ));
    }
    for (i, pattern) in topics.iter().enumerate() {
        let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '*' | '?');
        if pattern.is_empty() || pattern.len() > 249 || !pattern.chars().all(legal) {
            problems.push(ConfigProblem::new(
                format!("{at}.topics[{i}]"),
                "must be 1 to 249 characters of topic-name characters (a-z A-Z 0-9 . _ -) and the wildcards * and ?",
            ));
        }
    }
    if let Err((i, e)) = TopicPatterns::parse(topics) {
        problems.push(ConfigProblem::new(format!("{at}.topics[{i}]"), e));
    }
    problems
}

/// The most lag guards (each reads offsets with its own client).
pub const MAX_LAG_GUARDS: usize = 64;

/// The most topic patterns one tenant may list.
pub const MAX_TOPIC_PATTERNS: usize = 100;

/// Default `max_buffer_share` when a tenant does not set one.
pub const DEFAULT_BUFFER_SHARE: f64 = 0.5;

impl TenantConfig {
    /// The tenant's budget, or the key of the first invalid value.
    pub fn spec(&self) -> Result<BudgetSpec, ConfigProblem> {
        budget_spec(
            &format!("tenants[{}]", self.id),
            self.records_per_sec,
            self.records_burst,
            self.bytes_per_sec,
            self.bytes_burst,
        )
    }

    pub fn buffer_share(&self) -> f64 {
        self.max_buffer_share.unwrap_or(DEFAULT_BUFFER_SHARE)
    }

    /// The key digests, parsed (invalid ones are skipped: [`TenantConfig::problems`] reports
    /// them).
    pub fn key_digests(&self) -> impl Iterator<Item = ApiKeyHash> + '_ {
        self.api_key_sha256
            .iter()
            .filter_map(|h| ApiKeyHash::from_hex(h))
    }

    /// Every semantic problem with this tenant, keys prefixed by `at` (`tenants[0]`).
    pub fn problems(&self, at: &str) -> Vec<ConfigProblem> {
        let mut problems = Vec::new();
        if let Some(p) = TenantId::problem(&self.id) {
            problems.push(ConfigProblem::new(format!("{at}.id"), p));
        }
        let mut seen = std::collections::HashSet::new();
        for (i, h) in self.api_key_sha256.iter().enumerate() {
            match ApiKeyHash::from_hex(h) {
                None => problems.push(ConfigProblem::new(
                    format!("{at}.api_key_sha256[{i}]"),
                    "must be 64 lowercase hex digits (the SHA-256 of the key)",
                )),
                Some(d) if !seen.insert(d) => problems.push(ConfigProblem::new(
                    format!("{at}.api_key_sha256[{i}]"),
                    "is listed twice",
                )),
                Some(_) => {}
            }
        }
        problems.extend(topic_pattern_problems(at, &self.topics));
        if let Err(mut p) = self.spec() {
            p.key = p.key.replacen(&format!("tenants[{}]", self.id), at, 1);
            problems.push(p);
        }
        if let Some(share) = self.max_buffer_share {
            if !(share > 0.0 && share <= 1.0) {
                problems.push(ConfigProblem::new(
                    format!("{at}.max_buffer_share"),
                    "must be greater than 0 and at most 1",
                ));
            }
        }
        problems
    }
}

/// Problems that span tenants: a tenant id used twice, and a key digest held by two tenants
/// (which of them a request authenticates as would be a guess). `tenants` yields each
/// tenant with the key prefix its problems are reported under.
pub fn cross_tenant_problems<'a>(
    tenants: impl IntoIterator<Item = (String, &'a TenantConfig)>,
) -> Vec<ConfigProblem> {
    let mut problems = Vec::new();
    let mut ids = std::collections::HashSet::new();
    let mut owners: std::collections::HashMap<ApiKeyHash, &str> = Default::default();
    for (at, t) in tenants {
        if !ids.insert(t.id.as_str()) {
            problems.push(ConfigProblem::new(
                format!("{at}.id"),
                format!("duplicate tenant id {:?}", t.id),
            ));
        }
        for (i, digest) in t.api_key_sha256.iter().enumerate() {
            let Some(d) = ApiKeyHash::from_hex(digest) else {
                continue;
            };
            match owners.get(&d) {
                Some(owner) if *owner != t.id => problems.push(ConfigProblem::new(
                    format!("{at}.api_key_sha256[{i}]"),
                    format!("this key already belongs to tenant {owner:?}"),
                )),
                _ => {
                    owners.insert(d, t.id.as_str());
                }
            }
        }
    }
    problems
}

fn budget_spec(
    prefix: &str,
    records_per_sec: Option<u64>,
    records_burst: Option<u64>,
    bytes_per_sec: Option<u64>,
    bytes_burst: Option<u64>,
) -> Result<BudgetSpec, ConfigProblem> {
    let records = rate_spec(prefix, "records", records_per_sec, records_burst)?;
    let bytes = rate_spec(prefix, "bytes", bytes_per_sec, bytes_burst)?;
    Ok(BudgetSpec { records, bytes })
}

fn rate_spec(
    prefix: &str,
    unit: &str,
    per_sec: Option<u64>,
    burst: Option<u64>,
) -> Result<Option<RateSpec>, ConfigProblem> {
    match (per_sec, burst) {
        (None, None) => Ok(None),
        (None, Some(_)) => Err(ConfigProblem::new(
            format!("{prefix}.{unit}_burst"),
            format!("is set without {unit}_per_sec"),
        )),
        (Some(0), _) => Err(ConfigProblem::new(
            format!("{prefix}.{unit}_per_sec"),
            "must be at least 1",
        )),
        (Some(_), Some(0)) => Err(ConfigProblem::new(
            format!("{prefix}.{unit}_burst"),
            "must be at least 1",
        )),
        (Some(rate), burst) => {
            let spec = RateSpec {
                per_sec: rate,
                burst: burst.unwrap_or(rate),
            };
            match spec.problem() {
                Some(problem) => Err(ConfigProblem::new(
                    format!("{prefix}.{unit}_per_sec"),
                    problem,
                )),
                None => Ok(Some(spec)),
            }
        }
    }
}

/// An optional count written as a whole number: `82`, or `82.0` as some JSON writers and
/// generators put it. A fraction, a negative, a value beyond `u64` or an explicit `null` is an
/// error (an unset count is left out; the admin API's merge patch unsets with `null` before
/// this runs).
pub fn whole_number<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Number {
        Whole(u64),
        Float(f64),
    }
    match Option::<Number>::deserialize(d)? {
        None => Err(serde::de::Error::custom(
            "null is not a number; leave the field out to unset it",
        )),
        Some(Number::Whole(n)) => Ok(Some(n)),
        Some(Number::Float(x)) if x.fract() == 0.0 && (0.0..=u64::MAX as f64).contains(&x) => {
            Ok(Some(x as u64))
        }
        Some(Number::Float(x)) => Err(serde::de::Error::custom(format_args!(
            "{x} is not a whole number of at least 0"
        ))),
    }
}

/// One thing wrong with a configuration, naming its key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {message}")]
pub struct ConfigProblem {
    pub key: String,
    pub message: String,
}

impl ConfigProblem {
    pub fn new(key: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            message: message.into(),
        }
    }
}

/// Why a configuration could not be used: every problem found, one per key.
#[derive(Debug, thiserror::Error)]
#[error("{}", .problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
pub struct ConfigError {
    pub problems: Vec<ConfigProblem>,
}

impl Config {
    /// Every semantic problem (the parser already caught unknown keys and wrong types).
    pub fn validate(&self) -> Vec<ConfigProblem> {
        let mut problems = Vec::new();
        let s = &self.server;
        if s.listen == s.admin_listen {
            problems.push(ConfigProblem::new(
                "server.admin_listen",
                "must differ from server.listen (the admin API is never served on the produce listener)",
            ));
        }
        for (key, value) in [
            ("server.max_body_bytes", s.max_body_bytes),
            ("server.max_connections", s.max_connections as u64),
            ("server.header_read_timeout_ms", s.header_read_timeout_ms),
            ("server.idle_timeout_ms", s.idle_timeout_ms),
            ("server.http2_max_streams", u64::from(s.http2_max_streams)),
            ("server.max_inflight_body_bytes", s.max_inflight_body_bytes),
            (
                "server.auth_failures_per_sec",
                u64::from(s.auth_failures_per_sec),
            ),
            (
                "server.auth_failures_burst",
                u64::from(s.auth_failures_burst),
            ),
            ("server.body_read_timeout_ms", s.body_read_timeout_ms),
            ("server.max_header_bytes", s.max_header_bytes as u64),
            ("buffer.max_bytes", self.buffer.max_bytes),
            ("buffer.max_records", self.buffer.max_records),
            (
                "limits.max_records_per_request",
                self.limits.max_records_per_request as u64,
            ),
            ("limits.max_value_bytes", self.limits.max_value_bytes as u64),
            ("kafka.metadata_timeout_ms", self.kafka.metadata_timeout_ms),
            ("kafka.metadata_ttl_ms", self.kafka.metadata_ttl_ms),
            ("kafka.delivery_timeout_ms", self.kafka.delivery_timeout_ms),
            (
                "compat.stream_max_unsettled",
                self.compat.stream_max_unsettled as u64,
            ),
            (
                "compat.stream_idle_timeout_ms",
                self.compat.stream_idle_timeout_ms,
            ),
            (
                "compat.stream_max_duration_ms",
                self.compat.stream_max_duration_ms,
            ),
            (
                "cluster.connect_timeout_ms",
                self.cluster.connect_timeout_ms,
            ),
            (
                "cluster.command_timeout_ms",
                self.cluster.command_timeout_ms,
            ),
            ("cluster.slice_horizon_ms", self.cluster.slice_horizon_ms),
            ("cluster.slice_ttl_ms", self.cluster.slice_ttl_ms),
            ("cluster.heartbeat_ms", self.cluster.heartbeat_ms),
            ("cluster.member_ttl_ms", self.cluster.member_ttl_ms),
        ] {
            if value == 0 {
                problems.push(ConfigProblem::new(key, "must be at least 1"));
            }
        }
        // tokio's semaphore panics above its MAX_PERMITS; no machine serves a million sockets.
        if s.max_connections > 1_000_000 {
            problems.push(ConfigProblem::new(
                "server.max_connections",
                "must be at most 1000000",
            ));
        }
        if s.max_body_bytes > s.max_inflight_body_bytes {
            problems.push(ConfigProblem::new(
                "server.max_body_bytes",
                "must be at most server.max_inflight_body_bytes (a body that large could never be read)",
            ));
        }
        if s.max_body_bytes > u64::from(u32::MAX) {
            problems.push(ConfigProblem::new(
                "server.max_body_bytes",
                "must be at most 4294967295",
            ));
        }
        if !(1..=50).contains(&self.compat.batch_max_entries) {
            problems.push(ConfigProblem::new(
                "compat.batch_max_entries",
                "must be from 1 to 50",
            ));
        }
        if self.compat.stream_max_unsettled > 100_000 {
            problems.push(ConfigProblem::new(
                "compat.stream_max_unsettled",
                "must be at most 100000",
            ));
        }
        if let Some(id) = &self.compat.cluster_id {
            if id.is_empty()
                || id.len() > 128
                || !id
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            {
                problems.push(ConfigProblem::new(
                    "compat.cluster_id",
                    "must be 1 to 128 characters of a-z A-Z 0-9 - _ .",
                ));
            }
        }
        problems.extend(self.cluster.problems());
        problems.extend(self.adaptive.problems(&self.global));
        if self.lag_guards.len() > MAX_LAG_GUARDS {
            problems.push(ConfigProblem::new(
                "lag_guards",
                format!("at most {MAX_LAG_GUARDS} lag guards"),
            ));
        }
        let mut names = std::collections::HashSet::new();
        for (i, g) in self.lag_guards.iter().enumerate() {
            problems.extend(g.problems(&format!("lag_guards[{i}]")));
            if !names.insert(g.name.as_str()) {
                problems.push(ConfigProblem::new(
                    format!("lag_guards[{i}].name"),
                    format!("{:?} is used by an earlier guard", g.name),
                ));
            }
        }
        if s.tls_cert_file.is_some() != s.tls_key_file.is_some() {
            problems.push(ConfigProblem::new(
                "server.tls_key_file",
                "tls_cert_file and tls_key_file are set together or not at all",
            ));
        }
        if s.max_header_bytes < 8192 && s.max_header_bytes > 0 {
            problems.push(ConfigProblem::new(
                "server.max_header_bytes",
                "must be at least 8192 (hyper's smallest read buffer)",
            ));
        }
        if !(self.buffer.ready_high_water > 0.0 && self.buffer.ready_high_water <= 1.0) {
            problems.push(ConfigProblem::new(
                "buffer.ready_high_water",
                "must be greater than 0 and at most 1",
            ));
        }
        if self.kafka.bootstrap_servers.trim().is_empty() {
            problems.push(ConfigProblem::new(
                "kafka.bootstrap_servers",
                "must not be empty",
            ));
        }
        if let Err(p) = self.global.spec() {
            problems.push(p);
        }
        problems.extend(librdkafka::problems(&self.kafka.producer));
        for (i, t) in self.tenants.iter().enumerate() {
            problems.extend(t.problems(&format!("tenants[{i}]")));
        }
        problems.extend(cross_tenant_problems(
            self.tenants
                .iter()
                .enumerate()
                .map(|(i, t)| (format!("tenants[{i}]"), t)),
        ));
        problems
    }

    /// Server timeouts as durations.
    pub fn shutdown_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.server.shutdown_timeout_ms)
    }
}

pub mod librdkafka;
mod load;

#[cfg(test)]
mod tests;
