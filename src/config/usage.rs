//! `[usage]`: the ledger of each tenant's usage by hour, for chargeback (`usage`).

use serde::{Deserialize, Serialize};

use super::ConfigProblem;

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct UsageConfig {
    /// How often the tenants' counters are read into the ledger, in milliseconds (100 to
    /// 60,000): a request is counted in the hour of the first look after it, so at most this
    /// late. An answer of `GET /admin/usage` looks first.
    pub tick_ms: u64,
    /// How many hours of rows are kept (1 to 1,488: 62 days).
    pub retention_hours: u32,
    /// The most rows kept, one per tenant and hour with traffic (about 100 bytes each); past
    /// it the oldest hour goes first.
    pub max_rows: usize,
    /// A compacted topic the usage is exported to, one record per tenant and hour whose counts
    /// moved, every `export_ms` and at shutdown (created if missing; no tenant may write it).
    /// Unset: no export.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topic: Option<String>,
    /// How often the export writes, in milliseconds (1,000 to 3,600,000): what a process
    /// killed without draining may not have exported.
    pub export_ms: u64,
}

impl Default for UsageConfig {
    fn default() -> Self {
        Self {
            tick_ms: 10_000,
            retention_hours: 48,
            max_rows: 500_000,
            topic: None,
            export_ms: 60_000,
        }
    }
}

impl UsageConfig {
    pub(super) fn problems(&self) -> Vec<ConfigProblem> {
        let mut problems = Vec::new();
        if !(100..=60_000).contains(&self.tick_ms) {
            problems.push(ConfigProblem::new("usage.tick_ms", "must be 100 to 60000"));
        }
        if !(1..=1_488).contains(&self.retention_hours) {
            problems.push(ConfigProblem::new(
                "usage.retention_hours",
                "must be 1 to 1488 (62 days)",
            ));
        }
        if !(1..=50_000_000).contains(&self.max_rows) {
            problems.push(ConfigProblem::new(
                "usage.max_rows",
                "must be 1 to 50000000",
            ));
        }
        if !(1_000..=3_600_000).contains(&self.export_ms) {
            problems.push(ConfigProblem::new(
                "usage.export_ms",
                "must be 1000 to 3600000",
            ));
        }
        if let Some(topic) = &self.topic {
            if crate::identity::Topic::parse(topic).is_err() {
                problems.push(ConfigProblem::new(
                    "usage.topic",
                    "is not a valid topic name",
                ));
            }
        }
        problems
    }
}
