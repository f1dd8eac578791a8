//! `[buffer]` (the bounded downstream buffer) and `[limits]` (per-request bounds).

use serde::{Deserialize, Serialize};

/// The bounded downstream buffer.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
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
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
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
