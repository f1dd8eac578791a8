//! The lag guards at run time: every interval, each guard's consumer-group offsets are read
//! from Kafka (by an [`OffsetSource`], a client that never joins the group), fed to the
//! guard's state machine (`lag::guard`), and the resulting cap is split among the tenants that
//! write to the guarded topics — by priority class, then by their configured rates — and
//! published as the plan admission follows.
//!
//! Cluster mode: each replica reads the offsets itself (they are the cluster's truth, not
//! ours) and enforces cap / live replicas, so the replicas together stay within the cap.
//!
//! Layer: decisions and state (with `adaptive_agent`); imports the pure `lag` parts, tenants,
//! the Kafka client and the cluster's member count.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::allocation::{allocate, Demand};
use crate::budget::Clock;
use crate::config::LagGuardConfig;
#[cfg(test)]
use crate::identity::Topic;
use crate::identity::TopicPatterns;
use crate::kafka::KafkaOffsets;
use crate::lag::guard::{PartitionOffsets, Phase, Reading};
use crate::lag::{GuardPlan, LagPlan, LagPlanCell};
use crate::tenant::Tenants;

mod slot;
pub use slot::GuardStatus;
use slot::Slot;

/// One reading of a guard's partitions: each partition's end and committed offsets, as
/// Kafka answered them (the guard takes rates per partition, over the ones read twice).
#[derive(Debug, Clone, Default)]
pub struct OffsetReading {
    pub partitions: Vec<PartitionOffsets>,
}

/// Where offsets come from: Kafka in production ([`KafkaOffsets`]). Blocking.
pub trait OffsetSource: Send + Sync + std::fmt::Debug {
    fn read(&self, guard: &LagGuardConfig, topics: &TopicPatterns)
        -> Result<OffsetReading, String>;

    /// Only these groups are still guarded: clients for others may go.
    fn retain(&self, _groups: &[&str]) {}
}

/// How many replicas share the cap now (1 outside cluster mode).
#[derive(Clone)]
pub struct Members(pub Arc<dyn Fn() -> u32 + Send + Sync>);

impl Members {
    pub fn one() -> Self {
        Self(Arc::new(|| 1))
    }
}

impl std::fmt::Debug for Members {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Members({})", (self.0)())
    }
}

#[derive(Debug)]
pub struct LagAgent {
    slots: Mutex<Vec<Slot>>,
    pub plan: Arc<LagPlanCell>,
    tenants: Arc<Tenants>,
    members: Members,
    source: Arc<dyn OffsetSource>,
    clock: Arc<dyn Clock>,
}

/// The loop looks every `interval_ms` of the most frequent guard (10 ms to 1 s, slept on the
/// runtime's timer); each tick reads the guards that are due by the agent's clock.
impl crate::agent::Agent for LagAgent {
    // Offsets are read with blocking client calls.
    const BLOCKING: bool = true;

    fn now_ns(&self) -> u64 {
        self.clock.now_ns()
    }

    fn wait(&self, _last_ns: u64) -> Duration {
        let every = self
            .slots()
            .iter()
            .map(|s| s.guard.config().interval_ms)
            .min()
            .unwrap_or(1000)
            .clamp(10, 1000);
        Duration::from_millis(every)
    }

    fn due(&self, _last_ns: u64) -> bool {
        true
    }

    fn turn(&self) {
        self.tick();
    }
}

impl LagAgent {
    /// Guards from a validated configuration.
    pub fn new(
        guards: Vec<LagGuardConfig>,
        plan: Arc<LagPlanCell>,
        tenants: Arc<Tenants>,
        members: Members,
        source: Arc<dyn OffsetSource>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let agent = Self {
            slots: Mutex::new(Vec::new()),
            plan,
            tenants,
            members,
            source,
            clock,
        };
        // Validated by the caller; a guard that still fails to parse is left out.
        let _ = agent.set_guards(guards);
        agent
    }

    fn slots(&self) -> std::sync::MutexGuard<'_, Vec<Slot>> {
        self.slots
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn guards(&self) -> Vec<LagGuardConfig> {
        self.slots()
            .iter()
            .map(|s| s.guard.config().clone())
            .collect()
    }

    pub fn statuses(&self) -> Vec<GuardStatus> {
        self.slots().iter().map(Slot::status).collect()
    }

    /// Replaces the guards live. A guard keeping its name, topics and group keeps its readings,
    /// rates and cap (new settings act from its next reading); any other starts afresh (other
    /// offsets: the old rates mean nothing).
    pub fn set_guards(&self, guards: Vec<LagGuardConfig>) -> Result<(), String> {
        let mut slots = self.slots();
        let mut old: HashMap<String, Slot> =
            slots.drain(..).map(|s| (s.name.to_string(), s)).collect();
        let mut next = Vec::with_capacity(guards.len());
        for config in guards {
            match old.remove(&config.name) {
                Some(mut slot)
                    if slot.guard.config().topics == config.topics
                        && slot.guard.config().group == config.group =>
                {
                    slot.guard.set_config(config);
                    next.push(slot);
                }
                _ => next.push(Slot::new(config)?),
            }
        }
        *slots = next;
        let groups: Vec<&str> = slots.iter().map(|s| &*s.group).collect();
        self.source.retain(&groups);
        self.publish(&slots);
        Ok(())
    }

    /// Runs until the process ends: each guard is read at its own interval.
    pub fn start(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        crate::agent::start(self)
    }

    /// Reads every guard that is due and publishes the new plan.
    pub fn tick(&self) {
        let now = self.clock.now_ns();
        let due: Vec<(usize, LagGuardConfig, Arc<TopicPatterns>)> = self
            .slots()
            .iter()
            .enumerate()
            .filter(|(_, s)| {
                s.read_at == 0 || now.saturating_sub(s.read_at) >= s.guard.interval_ns()
            })
            .map(|(i, s)| (i, s.guard.config().clone(), s.topics.clone()))
            .collect();
        if due.is_empty() {
            return;
        }
        // Read without holding the lock: a slow broker must not stall the admin API.
        let readings: Vec<_> = due
            .into_iter()
            .map(|(i, config, topics)| {
                let r = self.source.read(&config, &topics);
                (i, config.name, r, self.clock.now_ns())
            })
            .collect();
        let mut slots = self.slots();
        for (i, name, reading, at) in readings {
            // The guards may have been replaced while reading.
            let Some(slot) = slots.get_mut(i).filter(|s| *s.name == *name) else {
                continue;
            };
            self.apply(slot, reading, at);
        }
        self.publish(&slots);
    }

    /// One reading (or failure) into one guard, and its new split.
    fn apply(&self, slot: &mut Slot, reading: Result<OffsetReading, String>, at: u64) {
        let was = slot.guard.phase();
        let since = std::mem::replace(&mut slot.read_at, at);
        let secs = at.saturating_sub(since) as f64 / 1e9;
        let members = (self.members.0)().max(1);
        let demands = self.demands(slot, if since == 0 { 0.0 } else { secs });
        let phase = match reading {
            Ok(r) => {
                let phase = slot.guard.read(Reading {
                    at_ns: at,
                    partitions: r.partitions,
                    offered: slot.offered_total,
                    replicas: members,
                });
                slot.by_topic = slot.guard.lag_by_topic().to_vec();
                phase
            }
            Err(e) => {
                if was != Phase::Holding && was != Phase::Released {
                    tracing::warn!(guard = %slot.name, group = %slot.group, error = %e,
                        hold_s = slot.guard.config().hold_s,
                        "lag guard cannot read offsets; keeping its last cap for at most hold_s");
                }
                slot.guard.unreadable(at, e)
            }
        };
        match (was, phase) {
            (w, Phase::Capping) if w != Phase::Capping && w != Phase::Holding => {
                slot.activations += 1;
                tracing::info!(guard = %slot.name, group = %slot.group,
                    lag = slot.guard.lag(), recovery_s = slot.guard.recovery_s(),
                    cap = slot.guard.cap().unwrap_or(0.0),
                    "lag guard caps producers: consumers are behind");
            }
            (Phase::Capping | Phase::Holding, Phase::Idle) => {
                tracing::info!(guard = %slot.name, group = %slot.group,
                    recovery_s = slot.guard.recovery_s(), "lag guard lifts its cap");
            }
            // A cap dropped because offsets stayed unreadable (an idle guard drops nothing).
            (Phase::Holding, Phase::Released) => {
                slot.fail_opens += 1;
                tracing::warn!(guard = %slot.name, group = %slot.group,
                    error = slot.guard.last_error.as_deref().unwrap_or(""),
                    "lag guard released: offsets unreadable, producers follow the static budgets");
            }
            _ => {}
        }
        self.split(slot, &demands, members);
    }

    /// What each tenant offered to the guarded topics since the last reading, per second (the
    /// ones that offered anything); adds it all to the guard's total.
    fn demands(&self, slot: &mut Slot, secs: f64) -> Vec<Demand> {
        let secs = secs.max(1e-3);
        let directory = self.tenants.load();
        let mut offered = HashMap::new();
        let mut demands = Vec::new();
        for t in directory.tenants() {
            let Some(state) = t.admission_if_live() else {
                continue; // never charged: offered nothing
            };
            let Some(b) = state.lag.iter().find(|b| b.guard == slot.name) else {
                continue;
            };
            let id = t.id.as_str().to_string();
            // A bucket first seen now was created since the last reading: all it counted is new.
            let before = slot.offered.get(&id).copied().unwrap_or(0);
            let new = b.offered.saturating_sub(before);
            slot.offered_total = slot.offered_total.saturating_add(new);
            let rate = new as f64 / secs;
            offered.insert(id.clone(), b.offered);
            if rate > 0.0 {
                let weight = state
                    .buckets
                    .spec()
                    .records
                    .map_or(1.0, |r| r.per_sec as f64);
                demands.push(Demand {
                    id,
                    class: state.priority,
                    weight,
                    offered: rate,
                    claiming: false,
                });
            }
        }
        slot.offered = offered;
        demands
    }

    /// This replica's part of the cap, split by what each tenant offered since the last
    /// reading: priority classes first (batch gives way first), then by configured rate.
    fn split(&self, slot: &mut Slot, demands: &[Demand], members: u32) {
        match slot.guard.cap() {
            Some(cap) => {
                let local = cap / members as f64;
                slot.shares = allocate(local, 0.0, demands);
                // A tenant that did not write last interval gets a fair part as if it had.
                slot.newcomer = local / (demands.len() + 1) as f64;
            }
            None => {
                slot.shares.clear();
                slot.newcomer = 0.0;
            }
        }
    }

    fn publish(&self, slots: &[Slot]) {
        let guards = slots
            .iter()
            .map(|s| GuardPlan {
                name: s.name.clone(),
                group: s.group.clone(),
                topics: s.topics.clone(),
                capping: s.guard.cap().is_some(),
                shares: s.shares.clone(),
                newcomer: s.newcomer,
                interval_ns: s.guard.interval_ns(),
            })
            .collect();
        self.plan.publish(|epoch| LagPlan { epoch, guards });
    }
}

/// Offsets read from Kafka by a client per group that never joins it, each request waiting
/// up to the guard's interval (between 0.5 and 5 s).
impl OffsetSource for KafkaOffsets {
    fn read(
        &self,
        guard: &LagGuardConfig,
        topics: &TopicPatterns,
    ) -> Result<OffsetReading, String> {
        let timeout = Duration::from_millis(guard.interval_ms.clamp(500, 5000));
        let partitions = KafkaOffsets::read(self, &guard.group, topics, timeout)?;
        Ok(OffsetReading { partitions })
    }

    fn retain(&self, groups: &[&str]) {
        KafkaOffsets::retain(self, groups);
    }
}

#[cfg(test)]
mod tests;
