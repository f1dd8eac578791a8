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

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::budget::{BudgetSpec, RateSpec};
use crate::identity::TopicPatterns;

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
    /// `Idempotency-Key`: how long answers are kept for retries, and within what bounds.
    #[serde(default)]
    pub idempotency: IdempotencyConfig,
    /// Adaptive broker protection (off by default).
    #[serde(default)]
    pub adaptive: AdaptiveConfig,
    /// Lag guards: producers of a topic slowed while its consumers fall behind.
    #[serde(default)]
    pub lag_guards: Vec<LagGuardConfig>,
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
    /// Failed authentications (bad API keys, bad admin tokens) allowed per client address and
    /// second, after a burst of `auth_failures_burst`, counted for each listener on its own;
    /// beyond that, the address's failing requests are answered 429 instead of 401 until its
    /// allowance refills. A request with a valid key or token is never refused for them.
    pub auth_failures_per_sec: u32,
    pub auth_failures_burst: u32,
    /// Reverse proxies and load balancers (CIDR blocks or addresses) whose `forwarded_header`
    /// says who the client is, so failed authentications are counted against the client, not
    /// the proxy. Empty (the default): the peer is the client and no header is read.
    pub trusted_proxies: Vec<String>,
    /// The one header the trusted proxies write the client's address into:
    /// `"x-forwarded-for"` (the default) or `"forwarded"` (RFC 7239). Only this header is read
    /// (from the right, past trusted hops); the other is ignored even when present, since a
    /// proxy passes a client's own copy of it through.
    pub forwarded_header: crate::forwarded::ForwardedHeader,
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
    /// PEM certificates of the CAs whose client certificates the produce listener verifies
    /// (mTLS): a verified certificate names its tenant (`[auth.client_cert]`). Needs
    /// `tls_cert_file`. The admin listener never asks for client certificates.
    pub tls_client_ca_file: Option<PathBuf>,
    /// With `tls_client_ca_file`: refuse connections without a client certificate in the
    /// handshake (true, the default), or accept them and authenticate their requests by API
    /// key or JWT (false). A certificate that is presented is always verified.
    pub require_client_cert: bool,
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
            trusted_proxies: Vec::new(),
            forwarded_header: crate::forwarded::ForwardedHeader::XForwardedFor,
            max_inflight_body_bytes: 64 * 1024 * 1024,
            auth_failures_per_sec: 10,
            auth_failures_burst: 100,
            body_read_timeout_ms: 30_000,
            max_header_bytes: 64 * 1024,
            shutdown_timeout_ms: 30_000,
            tls_cert_file: None,
            tls_key_file: None,
            tls_client_ca_file: None,
            require_client_cert: true,
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

/// `/metrics`: how many per-tenant series, and who may read them.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    /// Which tenants get series of their own: `all` (every tenant: a scrape grows with the
    /// tenants), `top` (the `top_tenants` busiest of the last minute, the rest summed under
    /// `tenant="_other"`, so totals stay exact; every tenant has its own while there are no
    /// more than `top_tenants`), or `none` (everything under `_other`).
    pub per_tenant: PerTenant,
    /// How many tenants `top` shows on their own (1 to 10,000).
    pub top_tenants: usize,
    /// The environment variable holding a bearer token `/metrics` then requires; unset: open
    /// (as `/healthz` and `/readyz` are).
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
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum PerTenant {
    All,
    Top,
    None,
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
            let overhead = crate::record::RECORD_OVERHEAD_BYTES;
            match spec.problem() {
                Some(problem) => Err(ConfigProblem::new(
                    format!("{prefix}.{unit}_per_sec"),
                    problem,
                )),
                // Every record costs its overhead besides its key, value and headers: a bucket
                // smaller than that could never admit one.
                None if unit == "bytes" && spec.burst < overhead => Err(ConfigProblem::new(
                    format!("{prefix}.bytes_burst"),
                    format!(
                        "must be at least {overhead} (every record costs {overhead} bytes of \
                         overhead besides its key, value and headers, so a smaller bucket could \
                         never admit one){}",
                        if burst.is_none() {
                            "; unset, it is bytes_per_sec"
                        } else {
                            ""
                        }
                    ),
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
        problems.extend(self.idempotency.problems());
        // An answer that does not fit the store is not kept, and a retry of it writes again:
        // the store must hold the largest answer a request may have.
        let largest = idempotency::largest_answer(self.limits.max_records_per_request);
        if self.idempotency.max_bytes < largest {
            problems.push(ConfigProblem::new(
                "idempotency.max_bytes",
                format!(
                    "must hold the largest answer [limits] max_records_per_request = {} allows: at least {largest}",
                    self.limits.max_records_per_request
                ),
            ));
        }
        if !(1..=10_000).contains(&self.metrics.top_tenants) {
            problems.push(ConfigProblem::new(
                "metrics.top_tenants",
                "must be from 1 to 10000",
            ));
        }
        if self
            .metrics
            .token_env
            .as_deref()
            .is_some_and(|n| n.is_empty() || n.contains('='))
        {
            problems.push(ConfigProblem::new(
                "metrics.token_env",
                "must be an environment variable's name",
            ));
        }
        problems.extend(self.adaptive.problems(&self.global));
        problems.extend(self.schema_registry.problems(&self.schemas));
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
        if s.tls_client_ca_file.is_some() && s.tls_cert_file.is_none() {
            problems.push(ConfigProblem::new(
                "server.tls_client_ca_file",
                "client certificates need TLS: set tls_cert_file and tls_key_file too",
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
        if let Err((i, text)) = crate::forwarded::TrustedProxies::parse(
            &self.server.trusted_proxies,
            self.server.forwarded_header,
        ) {
            problems.push(ConfigProblem::new(
                format!("server.trusted_proxies[{i}]"),
                format!("{text:?} is not a CIDR block or an address"),
            ));
        }
        for (i, pattern) in self.kafka.internal_topics.iter().enumerate() {
            if let Err(e) = glob::Pattern::new(pattern) {
                problems.push(ConfigProblem::new(
                    format!("kafka.internal_topics[{i}]"),
                    format!("is not a valid pattern: {e}"),
                ));
            }
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
        problems.extend(self.auth.problems());
        for (i, t) in self.tenants.iter().enumerate() {
            problems.extend(t.problems(&format!("tenants[{i}]")));
            for (j, claim) in t.jwt_claims.iter().enumerate() {
                if !self.auth.has_issuer(&claim.issuer) {
                    problems.push(ConfigProblem::new(
                        format!("tenants[{i}].jwt_claims[{j}].issuer"),
                        "is not an issuer of [[auth.jwt]]",
                    ));
                }
            }
        }
        problems.extend(cross_tenant_problems(
            self.tenants
                .iter()
                .enumerate()
                .map(|(i, t)| (format!("tenants[{i}]"), t)),
        ));
        problems
    }

    /// What is valid but probably not meant: printed by `check-config` and logged at start-up,
    /// never refused.
    pub fn warnings(&self) -> Vec<ConfigProblem> {
        let mut warnings = self.auth.warnings(self.server.tls_client_ca_file.is_some());
        warnings.extend(self.proxy_warnings());
        warnings
    }

    fn proxy_warnings(&self) -> Vec<ConfigProblem> {
        crate::forwarded::trusts_everyone(&self.server.trusted_proxies)
            .into_iter()
            .map(|i| {
                ConfigProblem::new(
                    format!("server.trusted_proxies[{i}]"),
                    format!(
                        "{:?} trusts every address: any client can name itself in {} and \
                         get a fresh allowance of failed authentications per name; list only \
                         your proxies",
                        self.server
                            .trusted_proxies
                            .get(i)
                            .map_or("", String::as_str),
                        match self.server.forwarded_header {
                            crate::forwarded::ForwardedHeader::XForwardedFor => "X-Forwarded-For",
                            crate::forwarded::ForwardedHeader::Forwarded => "Forwarded",
                        }
                    ),
                )
            })
            .collect()
    }

    /// Server timeouts as durations.
    pub fn shutdown_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.server.shutdown_timeout_ms)
    }
}

mod auth;
mod cluster;
mod guards;
mod idempotency;
mod kafka;
pub mod librdkafka;
mod load;
mod schemas;
mod split;
mod tenant;

pub use auth::{
    jwks_url_problem, AuthConfig, CertName, ClientCertConfig, JwtIssuerConfig, ALGORITHMS,
    MAX_NAME_BYTES,
};
pub use cluster::ClusterConfig;
pub use guards::{AdaptiveConfig, LagGuardConfig};
pub use idempotency::{IdempotencyConfig, OnStoreError};
pub use kafka::{KafkaConfig, ProducerProperties, PropertyValue};
pub use schemas::{
    check_subject, ContractConfig, ContractMode, SchemaFormat, SchemaRegistryConfig,
};
pub use tenant::{cross_tenant_problems, JwtClaim, Priority, TenantConfig, DEFAULT_BUFFER_SHARE};

#[cfg(test)]
mod tests;
