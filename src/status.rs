//! The status snapshot behind `GET /admin/status` and the `/ui` page: who is being refused
//! and why, how full the buckets and the buffer are, how Kafka and the cluster are doing.
//!
//! Built only when asked, from the same live state the metrics read (tenant counters, bucket
//! levels, the buffer's word, Kafka's statistics): nothing is added to the produce path. Rates
//! come from samples of the counters taken at most once a second of the budget clock, when a
//! snapshot is asked for, and kept for [`WINDOW`]: an open page (which asks every second) keeps
//! the last ten seconds; the first snapshot after a quiet spell has no rates yet.
//!
//! Layer: observability. Imports tenants, admission, Kafka's statistics and the cluster.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};

use serde::Serialize;

use crate::admission::Admission;
use crate::budget::{BucketView, Clock};
use crate::cluster::{Cluster, LeaseOutcome, Scope};
use crate::kafka::{KafkaMetrics, LatencyCounts, LATENCY_BUCKETS};
use crate::refusal::Reason;
use crate::tenant::Tenants;

/// Seconds of history the rates cover.
pub const WINDOW: usize = 10;
const SECOND_NS: u64 = 1_000_000_000;

#[derive(Debug, Clone, Default)]
struct TenantCounts {
    admitted_requests: u64,
    admitted_records: u64,
    refused: [u64; Reason::ALL.len()],
}

impl TenantCounts {
    fn refused_total(&self) -> u64 {
        self.refused.iter().sum()
    }
}

#[derive(Debug, Clone)]
struct Sample {
    at_ns: u64,
    tenants: HashMap<String, TenantCounts>,
    delivery: [u64; LATENCY_BUCKETS],
    lease_calls: u64,
}

/// Everything the snapshot reads.
#[derive(Debug)]
pub struct StatusBoard {
    tenants: Arc<Tenants>,
    admission: Arc<Admission>,
    kafka: KafkaMetrics,
    cluster: Option<Arc<Cluster>>,
    clock: Arc<dyn Clock>,
    ready_high_water: f64,
    history: Mutex<VecDeque<Sample>>,
}

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
    /// Refusals per second by reason, only the reasons that occurred in the window.
    pub refused_by_reason: HashMap<&'static str, f64>,
    /// Per second, oldest first (at most [`WINDOW`]).
    pub history: Vec<SecondRates>,
    pub records_bucket: Option<Bucket>,
    pub bytes_bucket: Option<Bucket>,
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
    pub tenants: Vec<TenantStatus>,
    pub global_records: Option<Bucket>,
    pub global_bytes: Option<Bucket>,
    pub buffer: BufferStatus,
    pub kafka: KafkaStatus,
    pub cluster: Option<ClusterStatus>,
    /// The lag guards as `/admin/lag-guards` shows them (filled in by the admin route).
    pub lag_guards: Vec<serde_json::Value>,
    /// The adaptive limit as `/admin/adaptive` shows it (filled in by the admin route).
    pub adaptive: Option<serde_json::Value>,
}

fn rate(now: u64, then: u64, secs: f64) -> f64 {
    if secs <= 0.0 {
        0.0
    } else {
        now.saturating_sub(then) as f64 / secs
    }
}

/// The latency below which a `q` share of the observations lie (bucket upper bounds).
fn quantile(counts: &[u64; LATENCY_BUCKETS], q: f64) -> Option<f64> {
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return None;
    }
    let rank = (q * total as f64).ceil().max(1.0) as u64;
    let mut seen = 0;
    for (i, n) in counts.iter().enumerate() {
        seen += n;
        if seen >= rank {
            // The last bucket has no upper bound: report its lower one.
            let i = i.min(LATENCY_BUCKETS - 2);
            return Some(LatencyCounts::bound(i) * 1000.0);
        }
    }
    None
}

impl StatusBoard {
    pub fn new(
        tenants: Arc<Tenants>,
        admission: Arc<Admission>,
        kafka: KafkaMetrics,
        cluster: Option<Arc<Cluster>>,
        clock: Arc<dyn Clock>,
        ready_high_water: f64,
    ) -> Self {
        Self {
            tenants,
            admission,
            kafka,
            cluster,
            clock,
            ready_high_water,
            history: Mutex::new(VecDeque::new()),
        }
    }

    fn sample(&self, now: u64) -> Sample {
        let registry = self.tenants.load();
        let tenants = registry
            .tenants()
            .map(|t| {
                let counts = TenantCounts {
                    admitted_requests: t.stats.admitted_requests.load(Relaxed),
                    admitted_records: t.stats.admitted_records.load(Relaxed),
                    refused: std::array::from_fn(|i| t.stats.rejected_count(Reason::ALL[i])),
                };
                (t.id.as_str().to_string(), counts)
            })
            .collect();
        let lease_calls = self.cluster.as_ref().map_or(0, |c| {
            Scope::ALL
                .iter()
                .flat_map(|s| LeaseOutcome::ALL.iter().map(move |o| (*s, *o)))
                .map(|(s, o)| c.stats.lease_calls(s, o))
                .sum()
        });
        Sample {
            at_ns: now,
            tenants,
            delivery: self.kafka.delivery_counts.counts(),
            lease_calls,
        }
    }

    /// The status now. Takes a sample when the last one is a second old or more.
    pub fn snapshot(&self) -> Snapshot {
        let now = self.clock.now_ns();
        let current = self.sample(now);
        let (samples, oldest) = {
            let mut history = self
                .history
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if history
                .back()
                .is_none_or(|last| now.saturating_sub(last.at_ns) >= SECOND_NS)
            {
                history.push_back(current.clone());
                while history.len() > WINDOW + 1 {
                    history.pop_front();
                }
            }
            let samples: Vec<Sample> = history.iter().cloned().collect();
            let oldest = samples.first().cloned();
            (samples, oldest)
        };
        let newest = samples.last().cloned().unwrap_or(current);
        let oldest = oldest.unwrap_or_else(|| newest.clone());
        let secs = newest.at_ns.saturating_sub(oldest.at_ns) as f64 / 1e9;
        let registry = self.tenants.load();
        let empty = TenantCounts::default();
        let tenants = registry
            .tenants()
            .map(|t| {
                let id = t.id.as_str();
                let new = newest.tenants.get(id).unwrap_or(&empty);
                let old = oldest.tenants.get(id).unwrap_or(&empty);
                let refused_by_reason = Reason::ALL
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| new.refused[*i] > old.refused[*i])
                    .map(|(i, r)| (r.as_str(), rate(new.refused[i], old.refused[i], secs)))
                    .collect();
                let history = samples
                    .windows(2)
                    .map(|w| {
                        let (a, b) = (&w[0], &w[1]);
                        let span = b.at_ns.saturating_sub(a.at_ns) as f64 / 1e9;
                        let ca = a.tenants.get(id).unwrap_or(&empty);
                        let cb = b.tenants.get(id).unwrap_or(&empty);
                        SecondRates {
                            admitted_records: rate(cb.admitted_records, ca.admitted_records, span),
                            refused_requests: rate(cb.refused_total(), ca.refused_total(), span),
                        }
                    })
                    .collect();
                let view = self.admission.view(t);
                TenantStatus {
                    id: id.to_string(),
                    admitted_records_per_sec: rate(
                        new.admitted_records,
                        old.admitted_records,
                        secs,
                    ),
                    admitted_requests_per_sec: rate(
                        new.admitted_requests,
                        old.admitted_requests,
                        secs,
                    ),
                    refused_requests_per_sec: rate(new.refused_total(), old.refused_total(), secs),
                    refused_by_reason,
                    history,
                    records_bucket: view.tenant_records.map(Bucket::from),
                    bytes_bucket: view.tenant_bytes.map(Bucket::from),
                    buffer_bytes: t.usage.bytes.load(Relaxed),
                    buffer_records: t.usage.records.load(Relaxed),
                    buffer_share: t.buffer_share(),
                }
            })
            .collect();
        let (global_records, global_bytes) = self.admission.global.view(self.admission.now_ns());
        let buffer = &self.admission.buffer;
        let (held_bytes, held_records) = buffer.held();
        let delivered: [u64; LATENCY_BUCKETS] =
            std::array::from_fn(|i| newest.delivery[i].saturating_sub(oldest.delivery[i]));
        let stats = self.kafka.latest();
        Snapshot {
            window_secs: secs,
            tenants,
            global_records: global_records.map(Bucket::from),
            global_bytes: global_bytes.map(Bucket::from),
            buffer: BufferStatus {
                held_bytes,
                max_bytes: buffer.max_bytes(),
                held_records,
                max_records: buffer.max_records(),
                ready_high_water: self.ready_high_water,
            },
            kafka: KafkaStatus {
                delivery_p50_ms: quantile(&delivered, 0.5),
                delivery_p99_ms: quantile(&delivered, 0.99),
                queue_messages: stats.queue_messages,
                queue_bytes: stats.queue_bytes,
                brokers: stats
                    .brokers
                    .iter()
                    .map(|b| BrokerStatus {
                        name: b.name.clone(),
                        rtt_ms: b.rtt_us as f64 / 1000.0,
                        throttle_ms: b.throttle_ms,
                        inflight_requests: b.inflight_requests,
                    })
                    .collect(),
            },
            cluster: self.cluster.as_ref().map(|c| ClusterStatus {
                replica: c.replica_id().to_string(),
                members: c.stats.members.load(Relaxed),
                degraded: c.is_degraded(),
                lease_calls_per_sec: rate(newest.lease_calls, oldest.lease_calls, secs),
            }),
            lag_guards: Vec::new(),
            adaptive: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_come_from_the_bucket_bounds() {
        let mut counts = [0u64; LATENCY_BUCKETS];
        assert_eq!(quantile(&counts, 0.5), None);
        counts[1] = 98; // ≤ 1 ms
        counts[5] = 2; // ≤ 16 ms
        assert_eq!(quantile(&counts, 0.5), Some(1.0));
        assert_eq!(quantile(&counts, 0.99), Some(16.0));
    }
}
