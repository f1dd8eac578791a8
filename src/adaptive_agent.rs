//! The adaptive limit's agent: every `[adaptive] interval_ms` it reads Kafka's signals (the
//! delivery p99 of the interval, the brokers' throttle time, the buffer's fill), lets the
//! controller move the limit, and publishes a plan sharing the limit among tenants by priority
//! class and configured rate, from each tenant's demand over the interval. While the limit is
//! at its ceiling the plan is inactive and the configured budgets alone decide.
//!
//! In cluster mode the limit is this replica's own: it protects the brokers this replica
//! talks to, on top of the shared budgets.
//!
//! Layer: services. Imports admission (the buffer and global budget), tenants, Kafka's
//! statistics and the pure `adaptive` parts.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::adaptive::allocation::{allocate, Demand};
use crate::adaptive::controller::{Controller, Move, Signals};
use crate::adaptive::{Plan, PlanCell};
use crate::admission::Admission;
use crate::budget::{BudgetSpec, Clock, RateSpec};
use crate::config::AdaptiveConfig;
use crate::kafka::{KafkaMetrics, LatencyCounts, LATENCY_BUCKETS};
use crate::refusal::Reason;
use crate::tenant::Tenants;

mod stats;
pub use stats::AdaptiveStats;

/// Seconds of a tenant's share its adaptive bucket holds.
const BURST_SECS: u64 = 2;

/// Counters as they were at the last tick.
#[derive(Debug, Default)]
struct Previous {
    at_ns: u64,
    delivery: [u64; LATENCY_BUCKETS],
    offered: HashMap<String, (u64, u64)>,
    admitted_records: u64,
    admitted_bytes: u64,
    refused: u64,
}

#[derive(Debug)]
pub struct AdaptiveAgent {
    settings: arc_swap::ArcSwap<AdaptiveConfig>,
    controller: Mutex<Controller>,
    previous: Mutex<Previous>,
    pub plan: Arc<PlanCell>,
    pub stats: AdaptiveStats,
    tenants: Arc<Tenants>,
    admission: Arc<Admission>,
    kafka: KafkaMetrics,
    clock: Arc<dyn Clock>,
    epoch: AtomicU64,
}

/// The p99 of the observations between two bucket snapshots, in ms.
fn p99_ms(now: &[u64; LATENCY_BUCKETS], then: &[u64; LATENCY_BUCKETS]) -> (u64, Option<f64>) {
    let delta: Vec<u64> = now
        .iter()
        .zip(then)
        .map(|(a, b)| a.saturating_sub(*b))
        .collect();
    let total: u64 = delta.iter().sum();
    if total == 0 {
        return (0, None);
    }
    let rank = ((total as f64) * 0.99).ceil().max(1.0) as u64;
    let mut seen = 0;
    for (i, n) in delta.iter().enumerate() {
        seen += n;
        if seen >= rank {
            let i = i.min(LATENCY_BUCKETS - 2);
            return (total, Some(LatencyCounts::bound(i) * 1000.0));
        }
    }
    (total, None)
}

impl AdaptiveAgent {
    pub fn new(
        settings: AdaptiveConfig,
        plan: Arc<PlanCell>,
        tenants: Arc<Tenants>,
        admission: Arc<Admission>,
        kafka: KafkaMetrics,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let agent = Self {
            controller: Mutex::new(Controller::new(settings.clone())),
            settings: arc_swap::ArcSwap::from_pointee(settings),
            previous: Mutex::new(Previous::default()),
            plan,
            stats: AdaptiveStats::default(),
            tenants,
            admission,
            kafka,
            clock,
            epoch: AtomicU64::new(0),
        };
        AdaptiveStats::set_f64(&agent.stats.limit_ratio, 1.0);
        agent.stats.stand(
            &agent
                .controller
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
            None,
        );
        agent
    }

    pub fn settings(&self) -> AdaptiveConfig {
        (**self.settings.load()).clone()
    }

    /// Replaces the settings live (validated by the caller); the limit keeps its level.
    /// Switching it off lifts the limit at once.
    pub fn set_settings(&self, settings: AdaptiveConfig) {
        let mut controller = self
            .controller
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !settings.enabled {
            *controller = Controller::new(settings.clone());
            self.stats.stand(&controller, None);
            self.plan.store(Plan {
                active: false,
                epoch: self.epoch.fetch_add(1, Relaxed) + 1,
                shares: HashMap::new(),
            });
            AdaptiveStats::set_f64(&self.stats.limit_ratio, 1.0);
        } else {
            controller.set_settings(settings.clone());
        }
        self.settings.store(Arc::new(settings));
    }

    /// The ceiling now: the global budget's rates where set, else the section's own.
    fn ceiling(&self, settings: &AdaptiveConfig) -> (Option<u64>, Option<u64>) {
        let global = self.admission.global.spec();
        (
            global
                .records
                .map(|r| r.per_sec)
                .or(settings.max_records_per_sec),
            global
                .bytes
                .map(|b| b.per_sec)
                .or(settings.max_bytes_per_sec),
        )
    }

    /// Runs until the process ends.
    pub fn start(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let agent = self.clone();
        tokio::spawn(async move {
            loop {
                let every = Duration::from_millis(agent.settings.load().interval_ms.max(1));
                tokio::time::sleep(every).await;
                if agent.settings.load().enabled {
                    agent.tick();
                }
            }
        })
    }

    /// One interval: signals in, a new limit and plan out.
    pub fn tick(&self) -> Move {
        let settings = self.settings();
        let now = self.clock.now_ns();
        let registry = self.tenants.load();
        let delivery = self.kafka.delivery_counts.counts();
        let mut offered = HashMap::new();
        let (mut admitted_records, mut admitted_bytes, mut refused) = (0u64, 0u64, 0u64);
        for t in registry.tenants() {
            let Some(stats) = t.stats_if_any() else {
                continue; // never offered anything
            };
            offered.insert(
                t.id.as_str().to_string(),
                (
                    stats.offered_records.load(Relaxed),
                    stats.offered_bytes.load(Relaxed),
                ),
            );
            admitted_records += stats.admitted_records.load(Relaxed);
            admitted_bytes += stats.admitted_bytes.load(Relaxed);
            refused += stats.rejected_count(Reason::Adaptive);
        }
        let mut previous = self
            .previous
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let secs = (now.saturating_sub(previous.at_ns) as f64 / 1e9).max(1e-3);
        let (deliveries, p99) = p99_ms(&delivery, &previous.delivery);
        let (ceiling_r, ceiling_b) = self.ceiling(&settings);
        let mut controller = self
            .controller
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let limit = controller.limit();
        let used = |admitted: u64, before: u64, ceiling: Option<u64>| {
            ceiling.map_or(0.0, |c| {
                admitted.saturating_sub(before) as f64 / secs / (c as f64 * limit).max(1.0)
            })
        };
        let buffer = &self.admission.buffer;
        let (held_bytes, held_records) = buffer.held();
        let fill = (held_bytes as f64 / buffer.max_bytes().max(1) as f64)
            .max(held_records as f64 / buffer.max_records().max(1) as f64);
        let throttle = self
            .kafka
            .latest()
            .brokers
            .iter()
            .map(|b| b.throttle_ms)
            .max()
            .unwrap_or(0);
        let signals = Signals {
            deliveries,
            delivery_p99_ms: p99,
            throttle_ms: throttle,
            buffer_fill: fill,
            limit_used: used(admitted_records, previous.admitted_records, ceiling_r).max(used(
                admitted_bytes,
                previous.admitted_bytes,
                ceiling_b,
            )),
            refused: refused.saturating_sub(previous.refused),
        };
        let decision = controller.step(now, signals);
        let limit = controller.limit();
        let target = controller.target_ms();
        self.stats.stand(&controller, ceiling_r);
        drop(controller);

        // Demand per tenant over the interval, in the dimension the ceiling counts first.
        let by_records = ceiling_r.is_some();
        let demands: Vec<Demand> = registry
            .tenants()
            .map(|t| {
                let id = t.id.as_str().to_string();
                let (r, b) = offered.get(&id).copied().unwrap_or_default();
                let (pr, pb) = previous.offered.get(&id).copied().unwrap_or((r, b));
                let (now_n, then_n) = if by_records { (r, pr) } else { (b, pb) };
                let spec = t.spec();
                let weight = if by_records { spec.records } else { spec.bytes }
                    .map_or(ceiling_r.or(ceiling_b).unwrap_or(1) as f64, |s| {
                        s.per_sec as f64
                    });
                Demand {
                    id,
                    class: t.priority(),
                    weight,
                    offered: now_n.saturating_sub(then_n) as f64 / secs,
                }
            })
            .collect();
        let primary = if by_records { ceiling_r } else { ceiling_b }.unwrap_or(0) as f64 * limit;
        let rates = allocate(primary, settings.critical_reserve, &demands);
        let mut class_rate = [0.0f64; 3];
        let shares = demands
            .iter()
            .map(|d| {
                let rate = rates.get(&d.id).copied().unwrap_or(0.0);
                class_rate[d.class as usize] += rate;
                let fraction = if primary > 0.0 { rate / primary } else { 0.0 };
                let dim = |ceiling: Option<u64>| {
                    ceiling.map(|c| {
                        let per_sec = ((c as f64 * limit * fraction) as u64).max(1);
                        RateSpec {
                            per_sec,
                            burst: per_sec.saturating_mul(BURST_SECS).max(1),
                        }
                    })
                };
                (
                    d.id.clone(),
                    (
                        d.class,
                        BudgetSpec {
                            records: dim(ceiling_r),
                            bytes: dim(ceiling_b),
                        },
                    ),
                )
            })
            .collect();
        self.plan.store(Plan {
            active: settings.enabled && limit < 1.0,
            epoch: self.epoch.fetch_add(1, Relaxed) + 1,
            shares,
        });
        *previous = Previous {
            at_ns: now,
            delivery,
            offered,
            admitted_records,
            admitted_bytes,
            refused,
        };
        drop(previous);

        let s = &self.stats;
        AdaptiveStats::set_f64(&s.limit_ratio, limit);
        AdaptiveStats::set_f64(&s.target_ms, target.unwrap_or(0.0));
        AdaptiveStats::set_f64(&s.p99_ms, p99.unwrap_or(0.0));
        s.throttle_ms
            .store(u64::try_from(throttle).unwrap_or(0), Relaxed);
        s.limit_records
            .store(ceiling_r.map_or(0, |c| (c as f64 * limit) as u64), Relaxed);
        s.limit_bytes
            .store(ceiling_b.map_or(0, |c| (c as f64 * limit) as u64), Relaxed);
        for (i, r) in class_rate.iter().enumerate() {
            AdaptiveStats::set_f64(&s.class_rate[i], *r);
        }
        match decision {
            Move::Decrease(cause) => {
                s.decreases[cause as usize].fetch_add(1, Relaxed);
                tracing::warn!(cause = cause.as_str(), limit = format!("{:.0}%", limit * 100.0),
                    p99_ms = ?p99, throttle_ms = throttle, buffer_fill = format!("{fill:.2}"),
                    "adaptive limit lowered: Kafka is slow");
            }
            Move::Increase => {
                s.increases.fetch_add(1, Relaxed);
                tracing::info!(
                    limit = format!("{:.0}%", limit * 100.0),
                    "adaptive limit raised"
                );
            }
            Move::Recover => {
                s.recoveries.fetch_add(1, Relaxed);
                tracing::info!(
                    limit = format!("{:.0}%", limit * 100.0),
                    recover_to = format!("{:.0}%", s.recover_to() * 100.0),
                    "adaptive limit recovering: Kafka is healthy again"
                );
            }
            Move::Hold(_) => {}
        }
        *s.last_move
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = match decision {
            Move::Decrease(c) => format!("decrease ({})", c.as_str()),
            Move::Increase => "increase".into(),
            Move::Recover => "recover".into(),
            Move::Hold(why) => format!("hold ({why})"),
        };
        decision
    }
}
