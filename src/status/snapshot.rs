//! The status snapshot's JSON shape, as `GET /admin/status` answers it and `/ui` reads it:
//! field names and units here are the API (the page and operators' scripts read them).

use std::collections::HashMap;

use serde::Serialize;

use crate::budget::BucketView;

#[derive(Debug, Serialize)]
pub struct Bucket {
    pub available: u64,
    pub burst: u64,
    pub per_sec: u64,
}

impl From<BucketView> for Bucket {
    fn from(v: BucketView) -> Self {
        Self {
            available: v.available,
            burst: v.spec.burst,
            per_sec: v.spec.per_sec,
        }
    }
}

/// One limited dimension of a calendar quota, in its current window.
#[derive(Debug, Serialize)]
pub struct QuotaStatus {
    /// `hour`, `day` or `month`.
    pub window: &'static str,
    /// `records` or `bytes`.
    pub dimension: &'static str,
    pub used: u64,
    pub limit: u64,
    /// Seconds until the window turns.
    pub reset_in_s: u64,
}

impl QuotaStatus {
    pub fn of(dimension: crate::dimension::Dimension, v: crate::quota::QuotaView) -> Self {
        Self {
            window: v.window.as_str(),
            dimension: dimension.as_str(),
            used: v.used,
            limit: v.limit,
            reset_in_s: v.reset_in_s,
        }
    }
}

#[derive(Debug, Serialize)]
pub struct SecondRates {
    pub admitted_records: f64,
    pub refused_requests: f64,
}

#[derive(Debug, Serialize)]
pub struct TenantStatus {
    pub id: String,
    pub admitted_records_per_sec: f64,
    pub admitted_requests_per_sec: f64,
    pub refused_requests_per_sec: f64,
    /// Records of refused requests whose body was read, per second.
    pub refused_records_per_sec: f64,
    /// Refusals per second by reason, only the reasons that occurred in the window.
    pub refused_by_reason: HashMap<&'static str, f64>,
    /// Requests a limit in shadow mode would have refused since start, by the reason it would
    /// have given (admitted all the same): how a limit being rolled out would bite.
    pub shadowed_by_reason: HashMap<&'static str, u64>,
    /// Per second, oldest first (at most [`super::history::SECONDS`]).
    pub history: Vec<SecondRates>,
    pub records_bucket: Option<Bucket>,
    pub bytes_bucket: Option<Bucket>,
    /// Its calendar quotas, window by window, records before bytes (empty: none).
    pub quotas: Vec<QuotaStatus>,
    pub buffer_bytes: u64,
    pub buffer_records: u64,
    /// The share of the buffer this tenant may hold.
    pub buffer_share: f64,
}

#[derive(Debug, Serialize)]
pub struct BufferStatus {
    pub held_bytes: u64,
    pub max_bytes: u64,
    pub held_records: u64,
    pub max_records: u64,
    /// Occupancy above which `/readyz` says not ready.
    pub ready_high_water: f64,
}

#[derive(Debug, Serialize)]
pub struct BrokerStatus {
    pub name: String,
    pub rtt_ms: f64,
    pub throttle_ms: i64,
    pub inflight_requests: i64,
}

#[derive(Debug, Serialize)]
pub struct KafkaStatus {
    /// Over the window; `None` when nothing was delivered in it.
    pub delivery_p50_ms: Option<f64>,
    pub delivery_p99_ms: Option<f64>,
    pub queue_messages: u64,
    pub queue_bytes: u64,
    pub brokers: Vec<BrokerStatus>,
}

#[derive(Debug, Serialize)]
pub struct ClusterStatus {
    pub replica: String,
    pub members: u32,
    pub degraded: bool,
    pub lease_calls_per_sec: f64,
}

#[derive(Debug, Serialize)]
pub struct Snapshot {
    /// Seconds the rates cover (0 until two samples a second apart exist).
    pub window_secs: f64,
    /// How many tenants there are, and their traffic summed.
    pub tenant_count: usize,
    pub totals: Totals,
    /// The tenants asked for (`limit`, `sort`, `q`).
    pub tenants: Vec<TenantStatus>,
    pub global_records: Option<Bucket>,
    pub global_bytes: Option<Bucket>,
    /// The global calendar quotas (`[global] quotas`), as a tenant's are shown.
    pub global_quotas: Vec<QuotaStatus>,
    pub buffer: BufferStatus,
    pub kafka: KafkaStatus,
    pub cluster: Option<ClusterStatus>,
    /// The lag guards as `/admin/lag-guards` shows them (filled in by the admin route).
    pub lag_guards: Vec<serde_json::Value>,
    /// The adaptive limit as `/admin/adaptive` shows it (filled in by the admin route).
    pub adaptive: Option<serde_json::Value>,
}

/// Every tenant's traffic summed, per second over the window.
#[derive(Debug, Serialize)]
pub struct Totals {
    pub admitted_records_per_sec: f64,
    pub admitted_requests_per_sec: f64,
    pub refused_requests_per_sec: f64,
    pub refused_records_per_sec: f64,
}
