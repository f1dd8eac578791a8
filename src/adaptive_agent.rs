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
//! names the wait at the share the tenant's class would give it (`Allotment::claimed`), no sooner
//! than the next plan, so a client that honours it comes back while its demand is remembered.
//!
//! In cluster mode the limit is this replica's own: it protects the brokers this replica
//! talks to, on top of the shared budgets.
//!
//! A tick reads the signals (`signals`), steps the controller, shares the new limit out
//! (`shares`) and publishes the plan and what it did; the loop around it is `agent`'s.
//!
//! Layer: decisions and state. Imports admission (the buffer and global budget), tenants,
//! Kafka's statistics and the pure `adaptive` parts.

use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::adaptive::controller::{Controller, Move, Signals};
use crate::adaptive::{Allotment, Plan, PlanCell};
use crate::admission::Admission;
use crate::budget::Clock;
use crate::config::AdaptiveConfig;
use crate::kafka::KafkaMetrics;
use crate::tenant::Tenants;

mod shares;
mod signals;
mod stats;
pub use stats::{AdaptiveStats, Judged, Reading};

use signals::Previous;

/// A tenant's remembered demand halves over this many seconds of sending nothing.
pub const DEMAND_HALF_LIFE_S: f64 = 5.0;

/// The rates the limit is a fraction of, per dimension: the global budget's where set, else
/// the `[adaptive]` section's own (`None`: not limited in that dimension).
#[derive(Debug, Clone, Copy)]
struct Ceiling {
    records: Option<u64>,
    bytes: Option<u64>,
}

impl Ceiling {
    /// Demand and shares are counted in records when the ceiling counts records, else bytes.
    fn by_records(self) -> bool {
        self.records.is_some()
    }

    /// The dimension demand and shares are counted in.
    fn primary(self) -> Option<u64> {
        if self.by_records() {
            self.records
        } else {
            self.bytes
        }
    }
}

/// What a step of the controller left.
#[derive(Debug, Clone, Copy)]
struct Stepped {
    decision: Move,
    /// The limit now, as a fraction of the ceiling.
    limit: f64,
    target_ms: Option<f64>,
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
    /// Bumped by every settings change: the loop waiting for the next tick wakes and re-reads
    /// the interval (a long one put back to a short one takes effect at once).
    changed: tokio::sync::watch::Sender<u64>,
}

/// A tick every `interval_ms` on the agent's clock while enabled; the wait re-read whenever the
/// settings change (not slept out at the interval read before it).
impl crate::agent::Agent for AdaptiveAgent {
    const BLOCKING: bool = false;

    fn now_ns(&self) -> u64 {
        self.clock.now_ns()
    }

    fn wait(&self, last_ns: u64) -> Duration {
        Duration::from_nanos(self.wait_ns(last_ns))
    }

    fn due(&self, last_ns: u64) -> bool {
        self.wait_ns(last_ns) == 0
    }

    fn turn(&self) {
        if self.settings.load().enabled {
            self.tick();
        }
    }

    fn woken(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        Some(self.changed.subscribe())
    }
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
            changed: tokio::sync::watch::Sender::new(0),
        };
        AdaptiveStats::set_f64(&agent.stats.limit_ratio, 1.0);
        AdaptiveStats::set_f64(&agent.stats.p99_ms, f64::NAN);
        agent.stats.stand(&agent.controller(), None);
        agent
    }

    fn controller(&self) -> std::sync::MutexGuard<'_, Controller> {
        self.controller
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// librdkafka's latest per-broker statistics: where delivery time goes (queue, request
    /// buffer, round trip), beside the signal the controller follows.
    pub fn brokers(&self) -> Vec<crate::kafka::BrokerStats> {
        self.kafka.latest().brokers
    }

    pub fn settings(&self) -> AdaptiveConfig {
        (**self.settings.load()).clone()
    }

    /// Replaces the settings live (validated by the caller); the limit keeps its level.
    /// Switching it off lifts the limit at once.
    pub fn set_settings(&self, settings: AdaptiveConfig) {
        if settings.enabled && !self.settings.load().enabled {
            // Switched on: what was delivered while it was off is no reading of now.
            let _ = self.kafka.delivery_latency.take();
            self.previous
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .forget_window();
        }
        let mut controller = self.controller();
        if !settings.enabled {
            *controller = Controller::new(settings.clone());
            self.stats.stand(&controller, None);
            self.plan.publish(|epoch| Plan {
                active: false,
                epoch,
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
    fn ceiling(&self, settings: &AdaptiveConfig) -> Ceiling {
        let global = self.admission.global.spec();
        Ceiling {
            records: global
                .records
                .map(|r| r.per_sec)
                .or(settings.max_records_per_sec),
            bytes: global
                .bytes
                .map(|b| b.per_sec)
                .or(settings.max_bytes_per_sec),
        }
    }

    /// Runs until the process ends: a tick every `interval_ms`, the wait re-read whenever the
    /// settings change (not slept out at the interval read before it).
    pub fn start(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        crate::agent::start(self)
    }

    /// One interval: signals in, a new limit and plan out.
    pub fn tick(&self) -> Move {
        let settings = self.settings();
        let now = self.clock.now_ns();
        let registry = self.tenants.load();
        let counts = self.counts(registry.tenants());
        let mut previous = self
            .previous
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let ceiling = self.ceiling(&settings);
        let mut controller = self.controller();
        let (signals, reading) =
            self.signals(now, &counts, &mut previous, ceiling, controller.limit());
        let stepped = self.step(&mut controller, now, signals, ceiling);
        drop(controller);

        let secs = previous.secs(now);
        let (demands, seen) = shares::demands(
            registry.tenants(),
            &counts,
            &previous.tenants,
            secs,
            ceiling,
        );
        let (shares, class_rate) =
            shares::shares(&demands, ceiling, stepped.limit, settings.critical_reserve);
        self.publish(&settings, now, stepped.limit, shares);
        previous.remember(now, counts, seen);
        drop(previous);
        self.report(stepped, &signals, reading, ceiling, class_rate);
        stepped.decision
    }

    /// The controller's move on this interval's signals.
    fn step(
        &self,
        controller: &mut Controller,
        now: u64,
        signals: Signals,
        ceiling: Ceiling,
    ) -> Stepped {
        let decision = controller.step(now, signals);
        let stepped = Stepped {
            decision,
            limit: controller.limit(),
            target_ms: controller.target_ms(),
        };
        self.stats.stand(controller, ceiling.records);
        stepped
    }

    /// The plan admission follows until the next tick: active while the limit is below its
    /// ceiling.
    fn publish(
        &self,
        settings: &AdaptiveConfig,
        now: u64,
        limit: f64,
        shares: HashMap<String, Allotment>,
    ) {
        self.plan.publish(|epoch| Plan {
            active: settings.enabled && limit < 1.0,
            epoch,
            next_ns: now.saturating_add(settings.interval_ms.saturating_mul(1_000_000)),
            shares,
        });
    }

    /// What the tick did, for the metrics, the admin API and the log.
    fn report(
        &self,
        stepped: Stepped,
        signals: &Signals,
        reading: Reading,
        ceiling: Ceiling,
        class_rate: [f64; 3],
    ) {
        let Stepped {
            decision,
            limit,
            target_ms,
        } = stepped;
        let s = &self.stats;
        AdaptiveStats::set_f64(&s.limit_ratio, limit);
        AdaptiveStats::set_f64(&s.target_ms, target_ms.unwrap_or(0.0));
        AdaptiveStats::set_f64(&s.p99_ms, reading.p99_ms.unwrap_or(f64::NAN));
        s.reading
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .0 = reading;
        AdaptiveStats::set_f64(&s.stalled_ms, signals.stalled_ms);
        s.throttle_ms
            .store(u64::try_from(signals.throttle_ms).unwrap_or(0), Relaxed);
        s.limit_records.store(
            ceiling.records.map_or(0, |c| (c as f64 * limit) as u64),
            Relaxed,
        );
        s.limit_bytes.store(
            ceiling.bytes.map_or(0, |c| (c as f64 * limit) as u64),
            Relaxed,
        );
        for (i, r) in class_rate.iter().enumerate() {
            AdaptiveStats::set_f64(&s.class_rate[i], *r);
        }
        match decision {
            Move::Decrease(cause) => {
                s.decreases[cause as usize].fetch_add(1, Relaxed);
                tracing::warn!(cause = cause.as_str(), limit = format!("{:.0}%", limit * 100.0),
                    p90_ms = ?signals.latency_ms,
                    target_ms = ?target_ms, throttle_ms = signals.throttle_ms,
                    buffer_fill = format!("{:.2}", signals.buffer_fill),
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
    }
}

#[cfg(test)]
mod tests;
