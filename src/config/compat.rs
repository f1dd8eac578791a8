//! `[compat]`: Confluent REST Proxy compatibility.

use serde::{Deserialize, Serialize};

/// Confluent REST Proxy compatibility.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
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
