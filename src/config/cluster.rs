//! The `[cluster]` section: cluster mode (budgets shared through Redis, the tenant registry
//! in a compacted Kafka topic) and its timeouts.

use serde::{Deserialize, Serialize};

use super::ConfigProblem;

/// Cluster mode: tenant and global budgets shared by every replica through Redis, spent
/// locally from leased slices (see `cluster`).
#[derive(Clone, Deserialize, Serialize, schemars::JsonSchema)]
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
    /// ε × burst / members). The cluster-wide bound is burst × (1 + ε) + rate × T. For a
    /// calendar quota, the allowances held stay within ε × quota, and without Redis the
    /// replicas admit at most ε × quota more per window.
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
    /// The environment variable holding the secret that authenticates registry entries
    /// (HMAC-SHA256; at least 16 bytes, the same on every replica; `new,old` while rotating:
    /// signed with the first, accepted with any). Required with `shared_registry`: a record in
    /// the registry topic without a valid MAC is never applied. `<name>_FILE` may name a file
    /// holding it instead (a mounted Secret).
    pub registry_secret_env: Option<String>,
    /// How many replicas the cluster is expected to have: a replica that cannot reach Redis
    /// before it has counted the members takes 1/`expected_replicas` of each budget as its
    /// local share (never the whole budget). Set it to the deployment's replica count.
    pub expected_replicas: u32,
}

/// Whether the Redis client (redis-rs, `Client::open`) takes `text`: a URL of one of its
/// schemes (`redis`, `rediss`, `redis+unix`, `unix`) with what that scheme needs — a host, a
/// database number, credentials that decode to UTF-8, a known `protocol`, at most `#insecure`
/// after `rediss`; or a path, and a numeric `db`. Checked with `url`, the parser redis-rs
/// uses, so that only `cluster` depends on the Redis client.
fn is_redis_url(text: &str) -> bool {
    let Ok(url) = url::Url::parse(text) else {
        return false;
    };
    let query: std::collections::HashMap<_, _> = url.query_pairs().collect();
    let protocol = query
        .get("protocol")
        .is_none_or(|p| matches!(p.as_ref(), "2" | "resp2" | "3" | "resp3"));
    let number = |n: &str| n.parse::<i64>().is_ok();
    match url.scheme() {
        "redis" | "rediss" => {
            let db = url.path().trim_matches('/');
            url.host().is_some()
                && (url.scheme() == "redis" || matches!(url.fragment(), None | Some("insecure")))
                && (db.is_empty() || number(db))
                && decodes_to_utf8(url.username())
                && url.password().is_none_or(decodes_to_utf8)
                && protocol
        }
        "redis+unix" | "unix" => {
            url.to_file_path().is_ok() && query.get("db").is_none_or(|db| number(db)) && protocol
        }
        _ => false,
    }
}

/// Whether percent-decoding `text` (`%` and two hex digits; any other `%` as it is) gives
/// UTF-8, as the Redis client requires of a URL's user name and password.
fn decodes_to_utf8(text: &str) -> bool {
    let hex = |b: u8| char::from(b).to_digit(16);
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%')
            .then(|| Some(hex(*bytes.get(i + 1)?)? * 16 + hex(*bytes.get(i + 2)?)?))
            .flatten();
        match escaped {
            Some(byte) => {
                decoded.push(byte as u8);
                i += 3;
            }
            None => {
                decoded.push(bytes[i]);
                i += 1;
            }
        }
    }
    std::str::from_utf8(&decoded).is_ok()
}

impl ClusterConfig {
    /// Several replicas may serve the same tenants: budgets in Redis or a shared registry.
    pub fn replicated(&self) -> bool {
        self.redis_url.is_some() || self.shared_registry
    }

    /// Replicas share tenants but count nothing together: a shared registry without Redis.
    /// Each would count a quota whole.
    pub fn counts_apart(&self) -> bool {
        self.shared_registry && self.redis_url.is_none()
    }

    pub(super) fn problems(&self) -> Vec<ConfigProblem> {
        let mut problems = Vec::new();
        if let Some(url) = &self.redis_url {
            if !(url.starts_with("redis://") || url.starts_with("rediss://")) {
                problems.push(ConfigProblem::new(
                    "cluster.redis_url",
                    "must start with redis:// or rediss://",
                ));
            } else if !is_redis_url(url) {
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
        if self.shared_registry && self.registry_secret_env.is_none() {
            problems.push(ConfigProblem::new(
                "cluster.registry_secret_env",
                "is required with cluster.shared_registry = true: the environment variable \
                 holding the secret that authenticates registry entries",
            ));
        }
        if let Some(name) = self.registry_secret_env.as_deref() {
            if name.is_empty() || name.contains('=') || name.contains('\0') {
                problems.push(ConfigProblem::new(
                    "cluster.registry_secret_env",
                    "must be an environment variable's name",
                ));
            }
        }
        if !(1..=10_000).contains(&self.expected_replicas) {
            problems.push(ConfigProblem::new(
                "cluster.expected_replicas",
                "must be from 1 to 10000",
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
            registry_secret_env: None,
            expected_replicas: 3,
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

#[cfg(test)]
mod tests {
    /// What the Redis client takes and refuses (checked case by case against
    /// the Redis client's `Client::open` when the check moved off it).
    #[test]
    fn redis_urls_are_checked_as_the_redis_client_does() {
        for ok in [
            "redis://127.0.0.1:6379",
            "redis://u%20x:p%2Fq@h/2?protocol=resp3",
            "rediss://u:p@h:1/3#insecure",
            "redis+unix:///tmp/r.sock?db=3",
            "unix:///tmp/redis.sock",
        ] {
            assert!(super::is_redis_url(ok), "{ok}");
        }
        for bad in [
            "redis://h/x",
            "redis://%ff@h",
            "redis://u:%c3@h",
            "redis://h/?protocol=4",
            "rediss://h/#x",
            "redis+unix:///tmp/r.sock?db=x",
            "unix:relative",
            "http://h",
        ] {
            assert!(!super::is_redis_url(bad), "{bad}");
        }
    }
}
