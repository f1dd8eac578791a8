//! The `[cluster]` section: cluster mode (budgets shared through Redis, the tenant registry
//! in a compacted Kafka topic) and its timeouts.

use serde::{Deserialize, Serialize};

use super::ConfigProblem;

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
    /// The environment variable holding the secret that authenticates registry entries
    /// (HMAC-SHA256; at least 16 bytes, the same on every replica; `new,old` while rotating:
    /// signed with the first, accepted with any). Required with `shared_registry`: a record in
    /// the registry topic without a valid MAC is never applied.
    pub registry_secret_env: Option<String>,
    /// How many replicas the cluster is expected to have: a replica that cannot reach Redis
    /// before it has counted the members takes 1/`expected_replicas` of each budget as its
    /// local share (never the whole budget). Set it to the deployment's replica count.
    pub expected_replicas: u32,
}

impl ClusterConfig {
    pub(super) fn problems(&self) -> Vec<ConfigProblem> {
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
