//! One guard at run time: its state machine, the topics it watches, what the tenants offered
//! to them at its last reading and its last split of the cap; and what is shown of it
//! ([`GuardStatus`]).

use std::collections::HashMap;
use std::sync::Arc;

use crate::config::LagGuardConfig;
use crate::identity::TopicPatterns;
use crate::lag::guard::{Blocker, CapBasis, Guard, Phase};

/// What the metrics and the admin API show of one guard.
#[derive(Debug, Clone)]
pub struct GuardStatus {
    pub config: LagGuardConfig,
    pub phase: Phase,
    pub lag: u64,
    pub by_topic: Vec<(String, u64)>,
    /// Partitions with a rate (read twice in the window), and partitions in the last reading
    /// without an end or committed offset.
    pub partitions: (usize, usize),
    pub consumer_rate: f64,
    pub producer_rate: f64,
    /// What floodgate's producers offer to the guarded topics (all replicas), records/s.
    pub offered_rate: f64,
    pub recovery_s: f64,
    /// The cap over the whole cluster while capping, what set it and what keeps it.
    pub cap: Option<f64>,
    pub cap_basis: Option<CapBasis>,
    pub release_blocked_by: Option<Blocker>,
    /// Why the guard is where it is, in a sentence.
    pub reason: String,
    pub last_error: Option<String>,
    /// Times it started capping, and times it let go because offsets were unreadable.
    pub activations: u64,
    pub fail_opens: u64,
}

#[derive(Debug)]
pub(super) struct Slot {
    pub(super) guard: Guard,
    pub(super) topics: Arc<TopicPatterns>,
    pub(super) name: Arc<str>,
    pub(super) group: Arc<str>,
    /// When it was last read (ns); 0: never.
    pub(super) read_at: u64,
    /// Offered records per tenant at the last reading, for rates.
    pub(super) offered: HashMap<String, u64>,
    /// Records offered to the guarded topics by every tenant since the guard was made (the
    /// sum of the per-tenant increments, so tenants that go do not take theirs back).
    pub(super) offered_total: u64,
    pub(super) shares: HashMap<String, f64>,
    pub(super) newcomer: f64,
    pub(super) by_topic: Vec<(String, u64)>,
    pub(super) activations: u64,
    pub(super) fail_opens: u64,
}

impl Slot {
    pub(super) fn new(config: LagGuardConfig) -> Result<Self, String> {
        let topics = TopicPatterns::parse(&config.topics).map_err(|(_, e)| e)?;
        Ok(Self {
            name: config.name.as_str().into(),
            group: config.group.as_str().into(),
            topics: Arc::new(topics),
            guard: Guard::new(config),
            read_at: 0,
            offered: HashMap::new(),
            offered_total: 0,
            shares: HashMap::new(),
            newcomer: 0.0,
            by_topic: Vec::new(),
            activations: 0,
            fail_opens: 0,
        })
    }

    pub(super) fn status(&self) -> GuardStatus {
        GuardStatus {
            config: self.guard.config().clone(),
            phase: self.guard.phase(),
            lag: self.guard.lag(),
            by_topic: self.by_topic.clone(),
            partitions: self.guard.partitions(),
            consumer_rate: self.guard.consumer_rate(),
            producer_rate: self.guard.producer_rate(),
            offered_rate: self.guard.offered_rate(),
            recovery_s: self.guard.recovery_s(),
            cap: self.guard.cap(),
            cap_basis: self.guard.basis(),
            release_blocked_by: self.guard.blocker(),
            reason: self.guard.reason(),
            last_error: self.guard.last_error.clone(),
            activations: self.activations,
            fail_opens: self.fail_opens,
        }
    }
}
