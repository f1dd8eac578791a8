//! The status snapshot behind `GET /admin/status` and the `/ui` page: who is being refused
//! and why, how full the buckets and the buffer are, how Kafka and the cluster are doing.
//!
//! Rates come from [`history`]: a sampler reads every tenant's counters once a second of the
//! budget clock, whether or not anyone is looking (and a snapshot samples too, when a second
//! has passed), and keeps the last minute for the tenants that had traffic — so a page opened
//! after an incident shows it. Rates are over the last [`WINDOW`] seconds, the history over
//! [`history::SECONDS`]. A snapshot holds the `limit` tenants asked for (the most refused
//! first, by default; `q` narrows by id prefix, searched on the server), with the totals over
//! all of them and the tenant count, so its size does not grow with the tenants: nothing is
//! added to the produce path.
//!
//! Layer: observability. Imports tenants, admission, Kafka's statistics and the cluster.

pub mod history;

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};

use serde::Serialize;

use crate::admission::Admission;
use crate::budget::{BucketView, Clock};
use crate::cluster::{Cluster, LeaseOutcome, Scope};
use crate::kafka::{KafkaMetrics, LatencyCounts, LATENCY_BUCKETS};
use crate::refusal::Reason;
use crate::tenant::{Tenant, Tenants};
use history::{History, Second};

/// Seconds the rates cover.
pub const WINDOW: usize = 10;
const SECOND_NS: u64 = 1_000_000_000;
/// Tenants in a snapshot unless asked otherwise, and at most.
pub const LIMIT_DEFAULT: usize = 50;
pub const LIMIT_MAX: usize = 1000;

/// Gateway-wide counters as read at one second.
#[derive(Debug, Clone)]
struct GlobalSample {
    second: u64,
    delivery: [u64; LATENCY_BUCKETS],
    lease_calls: u64,
    /// Every tenant's traffic in this second, summed (exact whatever is tracked).
    traffic: Second,
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
    history: Mutex<History>,
    global: Mutex<VecDeque<GlobalSample>>,
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
    /// Records of refused requests whose body was read, per second.
    pub refused_records_per_sec: f64,
    /// Refusals per second by reason, only the reasons that occurred in the window.
    pub refused_by_reason: HashMap<&'static str, f64>,
    /// Per second, oldest first (at most [`history::SECONDS`]).
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
    /// How many tenants there are, and their traffic summed.
    pub tenant_count: usize,
    pub totals: Totals,
    /// The tenants asked for (`limit`, `sort`, `q`).
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

/// Every tenant's traffic summed, per second over the window.
#[derive(Debug, Serialize)]
pub struct Totals {
    pub admitted_records_per_sec: f64,
    pub admitted_requests_per_sec: f64,
    pub refused_requests_per_sec: f64,
    pub refused_records_per_sec: f64,
}

/// Which tenants a snapshot holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    pub limit: usize,
    pub sort: Sort,
    /// Only ids that start with this.
    pub prefix: String,
}

impl Default for Query {
    fn default() -> Self {
        Self {
            limit: LIMIT_DEFAULT,
            sort: Sort::Refused,
            prefix: String::new(),
        }
    }
}

/// How the tenants are chosen and ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sort {
    /// The most refused requests per second first, then the most admitted.
    Refused,
    /// The most admitted records per second first.
    Admitted,
    /// By id.
    Id,
}

impl Sort {
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "refused" => Some(Self::Refused),
            "admitted" => Some(Self::Admitted),
            "id" => Some(Self::Id),
            _ => None,
        }
    }
}

fn per_sec(n: u64, secs: f64) -> f64 {
    if secs <= 0.0 {
        0.0
    } else {
        n as f64 / secs
    }
}

/// Sums of seconds: the window's traffic.
#[derive(Debug, Default, Clone, Copy)]
struct Sums {
    admitted_requests: u64,
    admitted_records: u64,
    refused_requests: u64,
    refused_records: u64,
    refused_by_reason: [u64; Reason::ALL.len()],
}

impl Sums {
    fn of<'a>(seconds: impl Iterator<Item = &'a Second>) -> Self {
        let mut sums = Self::default();
        for s in seconds {
            sums.admitted_requests += u64::from(s.admitted_requests);
            sums.admitted_records += u64::from(s.admitted_records);
            sums.refused_requests += u64::from(s.refused_requests);
            sums.refused_records += u64::from(s.refused_records);
            for (sum, n) in sums.refused_by_reason.iter_mut().zip(s.refused_by_reason) {
                *sum += u64::from(n);
            }
        }
        sums
    }
}

impl From<Sums> for Second {
    fn from(s: Sums) -> Self {
        let c = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
        Second {
            admitted_requests: c(s.admitted_requests),
            admitted_records: c(s.admitted_records),
            refused_requests: c(s.refused_requests),
            refused_records: c(s.refused_records),
            refused_by_reason: s
                .refused_by_reason
                .map(|n| u16::try_from(n).unwrap_or(u16::MAX)),
        }
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
            history: Mutex::new(History::default()),
            global: Mutex::new(VecDeque::new()),
        }
    }

    /// Samples once a second until the process ends (the budget clock decides what a second
    /// is; checking four times a second keeps a stepped clock's seconds too).
    pub fn start(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let board = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(std::time::Duration::from_millis(250));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                board.sample();
            }
        })
    }

    /// Takes this second's sample, unless it was taken.
    pub fn sample(&self) {
        let second = self.clock.now_ns() / SECOND_NS;
        let mut history = self
            .history
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if history.second == Some(second) {
            return;
        }
        let registry = self.tenants.load();
        let traffic = history.sample(second, registry.tenants());
        drop(history);
        let lease_calls = self.cluster.as_ref().map_or(0, |c| {
            Scope::ALL
                .iter()
                .flat_map(|s| LeaseOutcome::ALL.iter().map(move |o| (*s, *o)))
                .map(|(s, o)| c.stats.lease_calls(s, o))
                .sum()
        });
        let mut global = self
            .global
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        global.push_back(GlobalSample {
            second,
            delivery: self.kafka.delivery_counts.counts(),
            lease_calls,
            traffic,
        });
        while global.len() > history::SECONDS + 1 {
            global.pop_front();
        }
    }

    /// The status now (sampling first if a second has passed).
    pub fn snapshot(&self, query: &Query) -> Snapshot {
        self.sample();
        let global: Vec<GlobalSample> = self
            .global
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .cloned()
            .collect();
        let (first, last) = match (global.first(), global.last()) {
            (Some(f), Some(l)) => (f.clone(), l.clone()),
            _ => unreachable_sample(),
        };
        let now = last.second;
        let window = now.saturating_sub(first.second).min(WINDOW as u64);
        let span = now
            .saturating_sub(first.second)
            .min(history::SECONDS as u64);
        let from = now + 1 - window; // seconds in (now - window, now]
        let secs = window as f64;
        let oldest_in_window = global
            .iter()
            .rev()
            .find(|g| g.second + window <= now)
            .unwrap_or(&first);
        let totals = Sums::of(
            global
                .iter()
                .filter(|g| window > 0 && g.second >= from)
                .map(|g| &g.traffic),
        );
        let registry = self.tenants.load();
        let history = self
            .history
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let window_of = |id: &str| {
            let ring = history.rings.get(&crate::identity::TenantId::new(id));
            let sums = ring.map_or_else(Sums::default, |r| {
                if window == 0 {
                    Sums::default()
                } else {
                    Sums::of(r.since(from))
                }
            });
            (ring, sums)
        };
        let chosen = self.choose(&registry, &history, query, from, window);
        let tenants = chosen
            .into_iter()
            .map(|t| {
                let (ring, sums) = window_of(t.id.as_str());
                // Every second since sampling began (at most the history's length), quiet
                // ones included.
                let history_rates = (now + 1 - span..=now)
                    .map(|second| {
                        let s = ring
                            .and_then(|r| r.seconds.iter().find(|(at, _)| *at == second))
                            .map(|(_, s)| *s)
                            .unwrap_or_default();
                        SecondRates {
                            admitted_records: f64::from(s.admitted_records),
                            refused_requests: f64::from(s.refused_requests),
                        }
                    })
                    .collect();
                self.tenant_status(t, sums, history_rates, secs)
            })
            .collect();
        drop(history);
        let delivered: [u64; LATENCY_BUCKETS] =
            std::array::from_fn(|i| last.delivery[i].saturating_sub(oldest_in_window.delivery[i]));
        let (global_records, global_bytes) = self.admission.global.view(self.admission.now_ns());
        let buffer = &self.admission.buffer;
        let (held_bytes, held_records) = buffer.held();
        let stats = self.kafka.latest();
        Snapshot {
            window_secs: secs,
            tenant_count: registry.len(),
            totals: Totals {
                admitted_records_per_sec: per_sec(totals.admitted_records, secs),
                admitted_requests_per_sec: per_sec(totals.admitted_requests, secs),
                refused_requests_per_sec: per_sec(totals.refused_requests, secs),
                refused_records_per_sec: per_sec(totals.refused_records, secs),
            },
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
                lease_calls_per_sec: per_sec(
                    last.lease_calls
                        .saturating_sub(oldest_in_window.lease_calls),
                    secs,
                ),
            }),
            lag_guards: Vec::new(),
            adaptive: None,
        }
    }

    /// The tenants a query asks for: the busiest (by its order) among those with history,
    /// then — when fewer are busy than asked for, or ordered by id — the others by id.
    fn choose(
        &self,
        registry: &crate::tenant::Registry,
        history: &History,
        query: &Query,
        from: u64,
        window: u64,
    ) -> Vec<Arc<Tenant>> {
        let mut chosen: Vec<Arc<Tenant>> = Vec::with_capacity(query.limit);
        if query.sort != Sort::Id {
            let mut busy: Vec<(Sums, Arc<Tenant>)> = history
                .rings
                .iter()
                .filter(|(id, _)| id.as_str().starts_with(&query.prefix))
                .filter_map(|(id, ring)| {
                    let sums = if window == 0 {
                        Sums::default()
                    } else {
                        Sums::of(ring.since(from))
                    };
                    Some((sums, registry.get(id.as_str())?.clone()))
                })
                .collect();
            busy.sort_by(|(a, ta), (b, tb)| {
                let key = |s: &Sums| match query.sort {
                    Sort::Admitted => (s.admitted_records, s.refused_requests),
                    _ => (s.refused_requests, s.admitted_records),
                };
                key(b)
                    .cmp(&key(a))
                    .then_with(|| ta.id.as_str().cmp(tb.id.as_str()))
            });
            chosen.extend(busy.into_iter().take(query.limit).map(|(_, t)| t));
        }
        if chosen.len() < query.limit {
            let taken: std::collections::HashSet<&str> =
                chosen.iter().map(|t| t.id.as_str()).collect();
            let rest: Vec<Arc<Tenant>> = registry
                .tenants_from(&query.prefix)
                .take_while(|t| t.id.as_str().starts_with(&query.prefix))
                .filter(|t| !taken.contains(t.id.as_str()))
                .take(query.limit - chosen.len())
                .cloned()
                .collect();
            chosen.extend(rest);
        }
        chosen
    }

    fn tenant_status(
        &self,
        t: Arc<Tenant>,
        sums: Sums,
        history: Vec<SecondRates>,
        secs: f64,
    ) -> TenantStatus {
        let view = self.admission.view(&t);
        TenantStatus {
            id: t.id.as_str().to_string(),
            admitted_records_per_sec: per_sec(sums.admitted_records, secs),
            admitted_requests_per_sec: per_sec(sums.admitted_requests, secs),
            refused_requests_per_sec: per_sec(sums.refused_requests, secs),
            refused_records_per_sec: per_sec(sums.refused_records, secs),
            refused_by_reason: Reason::ALL
                .iter()
                .zip(sums.refused_by_reason)
                .filter(|(_, n)| *n > 0)
                .map(|(r, n)| (r.as_str(), per_sec(n, secs)))
                .collect(),
            history,
            records_bucket: view.tenant_records.map(Bucket::from),
            bytes_bucket: view.tenant_bytes.map(Bucket::from),
            buffer_bytes: t.usage.bytes.load(Relaxed),
            buffer_records: t.usage.records.load(Relaxed),
            buffer_share: t.buffer_share(),
        }
    }

    /// The `n` tenants with the most traffic in the last minute, busiest first.
    pub fn busiest(&self, n: usize) -> Vec<crate::identity::TenantId> {
        self.history
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .busiest(n)
    }
}

/// `sample` always leaves one: reached only if it did not.
fn unreachable_sample() -> (GlobalSample, GlobalSample) {
    let empty = GlobalSample {
        second: 0,
        delivery: [0; LATENCY_BUCKETS],
        lease_calls: 0,
        traffic: Second::default(),
    };
    (empty.clone(), empty)
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
