//! The timings and sizes cluster mode works with, and who this replica is.

use std::time::Duration;

use crate::config::ClusterConfig;

/// The timings and sizes the agent works with (from `[cluster]`).
#[derive(Debug, Clone)]
pub struct Settings {
    pub replica_id: String,
    /// This process, among all that ever held `replica_id` (random per start).
    pub instance: String,
    /// Members assumed until they have been counted.
    pub expected_replicas: u32,
    pub slice_fraction: f64,
    pub slice_horizon: Duration,
    pub slice_ttl: Duration,
    pub heartbeat: Duration,
    pub member_ttl: Duration,
}

impl Settings {
    pub fn from_config(config: &ClusterConfig, produce_port: u16) -> Self {
        Self {
            replica_id: config
                .replica_id
                .clone()
                .unwrap_or_else(|| format!("{}:{produce_port}", hostname())),
            instance: instance_id(),
            expected_replicas: config.expected_replicas.max(1),
            slice_fraction: config.slice_fraction,
            slice_horizon: Duration::from_millis(config.slice_horizon_ms),
            slice_ttl: Duration::from_millis(config.slice_ttl_ms),
            heartbeat: Duration::from_millis(config.heartbeat_ms),
            member_ttl: Duration::from_millis(config.member_ttl_ms),
        }
    }
}

/// A random id for this process (OS randomness; never fails in practice, and a clash is only
/// as bad as the duplicate check missing once).
fn instance_id() -> String {
    let mut bytes = [0u8; 12];
    let _ = getrandom::fill(&mut bytes);
    hex::encode(bytes)
}

/// The machine's name, as the kernel has it (no extra dependency for one file read).
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "floodgate".into())
}
