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
//! Here: the board, its sampler and the snapshot it builds. The snapshot's JSON shape is in
//! [`snapshot`], which tenants it holds in [`query`], the window's sums and rates in
//! `window`.
//!
//! Layer: decisions and state (observability). Imports tenants, admission, Kafka's statistics
//! and the cluster.

pub mod history;
mod query;
mod snapshot;
mod window;

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};

use crate::admission::Admission;
use crate::budget::Clock;
use crate::cluster::{Cluster, LeaseOutcome, Scope};
use crate::kafka::{KafkaMetrics, LATENCY_BUCKETS};
use crate::refusal::Reason;
use crate::tenant::{Tenant, Tenants};
use history::{History, Second};
pub use query::{Query, Sort, LIMIT_DEFAULT, LIMIT_MAX};
pub use snapshot::{
    BrokerStatus, Bucket, BufferStatus, ClusterStatus, KafkaStatus, QuotaStatus, SecondRates,
    Snapshot, TenantStatus, Totals,
};
use window::{per_sec, quantile, Sums};

/// Seconds the rates cover.
pub const WINDOW: usize = 10;
const SECOND_NS: u64 = 1_000_000_000;

/// Gateway-wide counters as read at one second.
#[derive(Debug, Clone)]
struct GlobalSample {
    second: u64,
    delivery: [u64; LATENCY_BUCKETS],
    lease_calls: u64,
    /// Every tenant's traffic in this second, summed (exact whatever is tracked).
    traffic: Second,
}

/// Where a snapshot's window lies among the samples.
#[derive(Debug)]
struct Span {
    /// The last second sampled.
    now: u64,
    /// Seconds the rates cover: `(now - window, now]`, starting at `from`.
    window: u64,
    from: u64,
    /// Seconds the per-second history covers.
    history: u64,
    /// The last sample, and the one the window's deltas count from.
    last: GlobalSample,
    oldest_in_window: GlobalSample,
}

impl Span {
    fn of(global: &[GlobalSample]) -> Self {
        let (first, last) = match (global.first(), global.last()) {
            (Some(f), Some(l)) => (f.clone(), l.clone()),
            _ => unreachable_sample(),
        };
        let now = last.second;
        let window = now.saturating_sub(first.second).min(WINDOW as u64);
        let history = now
            .saturating_sub(first.second)
            .min(history::SECONDS as u64);
        let oldest_in_window = global
            .iter()
            .rev()
            .find(|g| g.second + window <= now)
            .unwrap_or(&first)
            .clone();
        Self {
            now,
            window,
            from: now + 1 - window, // seconds in (now - window, now]
            history,
            last,
            oldest_in_window,
        }
    }

    fn secs(&self) -> f64 {
        self.window as f64
    }
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
        let span = Span::of(&global);
        let secs = span.secs();
        let totals = Sums::of(
            global
                .iter()
                .filter(|g| span.window > 0 && g.second >= span.from)
                .map(|g| &g.traffic),
        );
        let registry = self.tenants.load();
        let tenants = self.tenant_statuses(&registry, query, &span);
        let global = self.admission.global.view(self.admission.now_ns());
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
            global_records: global.records.map(Bucket::from),
            global_bytes: global.bytes.map(Bucket::from),
            global_quotas: (self.admission.global_quotas().into_iter())
                .map(|(d, q)| QuotaStatus::of(d, q))
                .collect(),
            buffer: self.buffer_status(),
            kafka: self.kafka_status(&span),
            cluster: self.cluster_status(&span),
            lag_guards: Vec::new(),
            adaptive: None,
        }
    }

    /// The tenants the query asks for, each with its window's rates and its history.
    fn tenant_statuses(
        &self,
        registry: &crate::tenant::Directory,
        query: &Query,
        span: &Span,
    ) -> Vec<TenantStatus> {
        let history = self
            .history
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        query::choose(registry, &history, query, span.from, span.window)
            .into_iter()
            .map(|t| {
                let ring = history.rings.get(&t.id);
                let sums =
                    ring.map_or_else(Sums::default, |r| Sums::of_ring(r, span.from, span.window));
                // Every second since sampling began (at most the history's length), quiet
                // ones included.
                let rates = window::history_rates(ring, span.now, span.history);
                self.tenant_status(t, sums, rates, span.secs())
            })
            .collect()
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
            shadowed_by_reason: t.stats_if_any().map_or_else(HashMap::new, |s| {
                Reason::ALL
                    .iter()
                    .map(|r| (r.as_str(), s.shadowed_flow(*r).requests))
                    .filter(|(_, n)| *n > 0)
                    .collect()
            }),
            history,
            records_bucket: view.tenant.records.map(Bucket::from),
            bytes_bucket: view.tenant.bytes.map(Bucket::from),
            quotas: view
                .quotas
                .iter()
                .flatten()
                .map(|(d, q)| QuotaStatus::of(*d, *q))
                .collect(),
            buffer_bytes: t.usage.bytes.load(Relaxed),
            buffer_records: t.usage.records.load(Relaxed),
            buffer_share: t.buffer_share(),
        }
    }

    fn buffer_status(&self) -> BufferStatus {
        let buffer = &self.admission.buffer;
        let (held_bytes, held_records) = buffer.held();
        BufferStatus {
            held_bytes,
            max_bytes: buffer.max_bytes(),
            held_records,
            max_records: buffer.max_records(),
            ready_high_water: self.ready_high_water,
        }
    }

    /// Delivery percentiles over the window, librdkafka's queue and brokers as last reported.
    fn kafka_status(&self, span: &Span) -> KafkaStatus {
        let (last, oldest) = (&span.last.delivery, &span.oldest_in_window.delivery);
        let delivered: [u64; LATENCY_BUCKETS] =
            std::array::from_fn(|i| last[i].saturating_sub(oldest[i]));
        let stats = self.kafka.latest();
        KafkaStatus {
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
        }
    }

    fn cluster_status(&self, span: &Span) -> Option<ClusterStatus> {
        self.cluster.as_ref().map(|c| ClusterStatus {
            replica: c.replica_id().to_string(),
            members: c.stats.members.load(Relaxed),
            degraded: c.is_degraded(),
            lease_calls_per_sec: per_sec(
                span.last
                    .lease_calls
                    .saturating_sub(span.oldest_in_window.lease_calls),
                span.secs(),
            ),
        })
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
