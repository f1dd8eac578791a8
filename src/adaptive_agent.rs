//! The adaptive limit's agent: every `[adaptive] interval_ms` it reads Kafka's signals (the
//! delivery p99 of the interval, how long records have waited with no delivery at all, the
//! brokers' throttle time, the buffer's fill), lets the controller move the limit, and
//! publishes a plan sharing the limit among tenants by priority class and configured rate.
//! While the limit is at its ceiling the plan is inactive and the configured budgets alone
//! decide.
//!
//! A tenant's demand is what it offered (admitted or refused) over the interval; over an
//! interval it offered nothing in, what it offered last, halving every [`DEMAND_HALF_LIFE_S`]
//! — so a tenant that sends a request every few seconds, or waits out a `Retry-After`, keeps a
//! share between its requests. A refused request counts its records as offered. A refusal
//! names the wait at the share the tenant's class would give it (`Share::claimed`), no sooner
//! than the next plan, so a client that honours it comes back while its demand is remembered.
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

use crate::adaptive::allocation::{share, Demand};
use crate::adaptive::controller::{Controller, Move, Signals};
use crate::adaptive::{Plan, PlanCell, Share};
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

/// A tenant's remembered demand halves over this many seconds of sending nothing.
pub const DEMAND_HALF_LIFE_S: f64 = 5.0;

/// A remembered demand below this (per second) is forgotten.
const FORGOTTEN: f64 = 1e-3;

/// One tenant as the last tick saw it.
#[derive(Debug, Default, Clone)]
struct Seen {
    /// Offered records and bytes, ever.
    records: u64,
    bytes: u64,
    /// Remembered demand, per second, in the dimension the ceiling counts first.
    demand: f64,
}

/// Counters as they were at the last tick.
#[derive(Debug, Default)]
struct Previous {
    at_ns: u64,
    delivery: [u64; LATENCY_BUCKETS],
    tenants: HashMap<String, Seen>,
    admitted_records: u64,
    admitted_bytes: u64,
    refused: u64,
    /// Since when records have been waiting (held in the buffer at every tick since), and the
    /// last tick whose interval delivered something: how long nothing was delivered while
    /// records waited is a lower bound on the age of the oldest record in flight.
    waiting_since_ns: Option<u64>,
    delivered_at_ns: u64,
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
    /// Bumped by every settings change: the loop waiting for the next tick wakes and re-reads
    /// the interval (a long one put back to a short one takes effect at once).
    changed: tokio::sync::watch::Sender<u64>,
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
            changed: tokio::sync::watch::Sender::new(0),
        };
        AdaptiveStats::set_f64(&agent.stats.limit_ratio, 1.0);
        AdaptiveStats::set_f64(&agent.stats.p99_ms, f64::NAN);
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
                next_ns: 0,
                shares: HashMap::new(),
            });
            AdaptiveStats::set_f64(&self.stats.limit_ratio, 1.0);
        } else {
            controller.set_settings(settings.clone());
        }
        self.settings.store(Arc::new(settings));
        drop(controller);
        self.changed.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// How long the loop waits for the next tick after one at `last_ns` (0: due now), at the
    /// interval in force now.
    fn wait_ns(&self, last_ns: u64) -> u64 {
        let every = self
            .settings
            .load()
            .interval_ms
            .max(1)
            .saturating_mul(1_000_000);
        last_ns
            .saturating_add(every)
            .saturating_sub(self.clock.now_ns())
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

    /// Runs until the process ends: a tick every `interval_ms`, the wait re-read whenever the
    /// settings change (not slept out at the interval read before it).
    pub fn start(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let agent = self.clone();
        let mut changed = self.changed.subscribe();
        tokio::spawn(async move {
            let mut last = agent.clock.now_ns();
            loop {
                let wait = agent.wait_ns(last);
                if wait == 0 {
                    last = agent.clock.now_ns();
                    if agent.settings.load().enabled {
                        agent.tick();
                    }
                    continue;
                }
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_nanos(wait)) => {}
                    // A change: wait again at the new interval, from the same last tick.
                    r = changed.changed() => {
                        if r.is_err() {
                            tokio::time::sleep(Duration::from_nanos(wait)).await;
                        }
                    }
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
        let mut seen_now: HashMap<String, (u64, u64, u64)> = HashMap::new();
        let (mut admitted_records, mut admitted_bytes, mut refused) = (0u64, 0u64, 0u64);
        for t in registry.tenants() {
            let Some(stats) = t.stats_if_any() else {
                continue; // never offered anything
            };
            let adaptive_refusals = stats.rejected_count(Reason::Adaptive);
            seen_now.insert(
                t.id.as_str().to_string(),
                (
                    stats.offered_records.load(Relaxed),
                    stats.offered_bytes.load(Relaxed),
                    adaptive_refusals,
                ),
            );
            admitted_records += stats.admitted_records.load(Relaxed);
            admitted_bytes += stats.admitted_bytes.load(Relaxed);
            refused += adaptive_refusals;
        }
        let mut previous = self
            .previous
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let secs = (now.saturating_sub(previous.at_ns) as f64 / 1e9).max(1e-3);
        let (deliveries, p99) = p99_ms(&delivery, &previous.delivery);
        let (ceiling_r, ceiling_b) = self.ceiling(&settings);
        let buffer = &self.admission.buffer;
        let (held_bytes, held_records) = buffer.held();
        let fill = (held_bytes as f64 / buffer.max_bytes().max(1) as f64)
            .max(held_records as f64 / buffer.max_records().max(1) as f64);
        // Records waiting at this tick and every one since `waiting_since`, and nothing
        // delivered since `delivered_at`: the oldest of them has waited at least this long.
        if deliveries > 0 {
            previous.delivered_at_ns = now;
        }
        let waiting = held_records > 0 || held_bytes > 0;
        let stalled_ms = match (waiting, previous.waiting_since_ns) {
            (false, _) => {
                previous.waiting_since_ns = None;
                0.0
            }
            (true, None) => {
                previous.waiting_since_ns = Some(now);
                0.0
            }
            (true, Some(since)) => {
                let from = since.max(previous.delivered_at_ns);
                now.saturating_sub(from) as f64 / 1e6
            }
        };
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
            stalled_ms,
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

        // Demand per tenant, in the dimension the ceiling counts first: the rate offered over
        // the interval, or the remembered one decayed over an interval it sent nothing in.
        let by_records = ceiling_r.is_some();
        let decay = 0.5f64.powf(secs / DEMAND_HALF_LIFE_S);
        let mut tenants = HashMap::with_capacity(seen_now.len());
        let demands: Vec<Demand> = registry
            .tenants()
            .map(|t| {
                let id = t.id.as_str().to_string();
                let (r, b, _) = seen_now.get(&id).copied().unwrap_or_default();
                // Not seen at the last tick: its counters started since (all they hold is new).
                let before = previous.tenants.get(&id).cloned().unwrap_or_default();
                let (now_n, then_n) = if by_records {
                    (r, before.records)
                } else {
                    (b, before.bytes)
                };
                let offered = now_n.saturating_sub(then_n) as f64 / secs;
                // Measured while it sends; remembered (decaying) only over intervals it sends nothing
                // in — a client waiting out a Retry-After, or sending every few seconds. (The
                // highest of recent intervals, kept while it sends, held a busy tenant's share
                // at its peak and shrank the others': tests/adaptive.rs.)
                let mut demand = if offered > 0.0 {
                    offered
                } else {
                    before.demand * decay
                };
                if !demand.is_finite() || demand < FORGOTTEN {
                    demand = 0.0;
                }
                let spec = t.spec();
                let weight = if by_records { spec.records } else { spec.bytes }
                    .map_or(ceiling_r.or(ceiling_b).unwrap_or(1) as f64, |s| {
                        s.per_sec as f64
                    });
                if seen_now.contains_key(&id) {
                    tenants.insert(
                        id.clone(),
                        Seen {
                            records: r,
                            bytes: b,
                            demand,
                        },
                    );
                }
                Demand {
                    id,
                    class: t.priority(),
                    weight,
                    offered: demand,
                    // No claims from the agent: a claimed share the tenant does not use is
                    // refused to the others (tests/adaptive.rs: a critical tenant refused once
                    // held its whole weight and starved standard). The remembered demand — a
                    // refused request counts its records — and a wait no longer than the next
                    // plan give a client that honours Retry-After its share back instead.
                    claiming: false,
                }
            })
            .collect();
        let primary = if by_records { ceiling_r } else { ceiling_b }.unwrap_or(0) as f64 * limit;
        let allocation = share(primary, settings.critical_reserve, &demands);
        let mut class_rate = [0.0f64; 3];
        let per_sec = |ceiling: Option<u64>, fraction: f64| {
            ceiling.map(|c| ((c as f64 * limit * fraction) as u64).max(1))
        };
        let shares = demands
            .iter()
            .map(|d| {
                let rate = allocation.rates.get(&d.id).copied().unwrap_or(0.0);
                class_rate[d.class as usize] += rate;
                let fraction = |rate: f64| {
                    if primary > 0.0 && rate.is_finite() {
                        (rate / primary).clamp(0.0, 1.0)
                    } else {
                        0.0
                    }
                };
                let own = fraction(rate);
                let dim = |ceiling: Option<u64>| {
                    per_sec(ceiling, own).map(|per_sec| RateSpec {
                        per_sec,
                        burst: per_sec.saturating_mul(BURST_SECS).max(1),
                    })
                };
                let present = d.claiming || d.offered > 0.0;
                let claimed = fraction(allocation.claimed(d.class, d.weight, present)).max(own);
                (
                    d.id.clone(),
                    Share {
                        class: d.class,
                        spec: BudgetSpec {
                            records: dim(ceiling_r),
                            bytes: dim(ceiling_b),
                        },
                        claimed: (per_sec(ceiling_r, claimed), per_sec(ceiling_b, claimed)),
                    },
                )
            })
            .collect();
        self.plan.store(Plan {
            active: settings.enabled && limit < 1.0,
            epoch: self.epoch.fetch_add(1, Relaxed) + 1,
            next_ns: now.saturating_add(settings.interval_ms.saturating_mul(1_000_000)),
            shares,
        });
        previous.at_ns = now;
        previous.delivery = delivery;
        previous.tenants = tenants;
        previous.admitted_records = admitted_records;
        previous.admitted_bytes = admitted_bytes;
        previous.refused = refused;
        drop(previous);

        let s = &self.stats;
        AdaptiveStats::set_f64(&s.limit_ratio, limit);
        AdaptiveStats::set_f64(&s.target_ms, target.unwrap_or(0.0));
        AdaptiveStats::set_f64(&s.p99_ms, p99.unwrap_or(f64::NAN));
        AdaptiveStats::set_f64(&s.stalled_ms, stalled_ms);
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
                    learned = s.level_learned(),
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

#[cfg(test)]
mod tests;
