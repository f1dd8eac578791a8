//! What the adaptive agent shows of itself to the metrics, the admin API and the status page:
//! plain cells written by the agent's tick, read without locking the controller.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

use crate::adaptive::controller::{Cause, Controller};
use crate::config::Priority;

/// One interval's delivery latencies as the agent read them (ms, within 1 %; `None`: nothing
/// delivered). The controller follows `p90_ms`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Reading {
    /// Requests Kafka answered in the window.
    pub deliveries: u64,
    /// Intervals the window spans (intervals of too few deliveries are merged into the next).
    pub intervals: u32,
    pub p50_ms: Option<f64>,
    pub p90_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub max_ms: Option<f64>,
}

/// What the latency is judged against, as the controller stands after a step (ms).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Judged {
    /// The path's latency at its best (`None` until measured).
    pub baseline_ms: Option<f64>,
    /// How far healthy readings wander from it.
    pub noise_ms: f64,
    /// Healthy below, slow above the target (`None` while unknown).
    pub healthy_below_ms: Option<f64>,
    pub target_ms: Option<f64>,
    /// A p90 that cuts did not move, taken as the path's own (the lines follow it).
    pub accepted_ms: Option<f64>,
}

/// What the metrics and the admin API show of the agent.
#[derive(Debug, Default)]
pub struct AdaptiveStats {
    /// f64 bits: the limit as a fraction of the ceiling.
    pub(super) limit_ratio: AtomicU64,
    /// f64 bits: ms; 0 while unknown.
    pub(super) target_ms: AtomicU64,
    /// f64 bits: ms; NaN when the last interval measured none.
    pub(super) p99_ms: AtomicU64,
    /// f64 bits: how long records had waited with no delivery at the last interval, ms.
    pub(super) stalled_ms: AtomicU64,
    pub throttle_ms: AtomicU64,
    /// Records/s and bytes/s the limit allows now (0: not limited in that dimension).
    pub limit_records: AtomicU64,
    pub limit_bytes: AtomicU64,
    pub(super) decreases: [AtomicU64; Cause::ALL.len()],
    /// Additive steps above the recovery level (probing).
    pub increases: AtomicU64,
    /// Slow-start steps back toward the recovery level.
    pub recoveries: AtomicU64,
    /// f64 bits: the recovery level (fraction of the ceiling): learned, or the ceiling.
    pub(super) recover_to: AtomicU64,
    /// Whether it was learned (carried at healthy latency) rather than assumed.
    pub(super) level_learned: AtomicBool,
    /// f64 bits: seconds of healthy signals to reach it.
    pub(super) time_to_recover_s: AtomicU64,
    /// The recovery level in records/s (0: no records ceiling).
    pub recover_to_records: AtomicU64,
    /// Allocated records/s (or bytes/s) per class, indexed like `Priority::ALL`.
    pub(super) class_rate: [AtomicU64; 3],
    /// The last interval's latencies and what they were judged against.
    pub(super) reading: Mutex<(Reading, Judged)>,
    pub(super) last_move: Mutex<String>,
    /// Where the limit stands and why (`Controller::phase`, `Controller::reason`).
    pub(super) standing: Mutex<(&'static str, String)>,
}

impl AdaptiveStats {
    pub(super) fn set_f64(cell: &AtomicU64, v: f64) {
        cell.store(v.to_bits(), Relaxed);
    }

    fn get_f64(cell: &AtomicU64) -> f64 {
        f64::from_bits(cell.load(Relaxed))
    }

    pub fn limit_ratio(&self) -> f64 {
        Self::get_f64(&self.limit_ratio)
    }

    pub fn target_ms(&self) -> f64 {
        Self::get_f64(&self.target_ms)
    }

    /// The delivery p99 of the last interval, if it measured one.
    pub fn p99_ms(&self) -> Option<f64> {
        Some(Self::get_f64(&self.p99_ms)).filter(|v| v.is_finite())
    }

    pub fn stalled_ms(&self) -> f64 {
        Self::get_f64(&self.stalled_ms)
    }

    pub fn level_learned(&self) -> bool {
        self.level_learned.load(Relaxed)
    }

    pub fn decreases(&self, cause: Cause) -> u64 {
        self.decreases[cause as usize].load(Relaxed)
    }

    pub fn class_rate(&self, class: Priority) -> f64 {
        Self::get_f64(&self.class_rate[class as usize])
    }

    /// The last interval's latencies, and the baseline, noise and thresholds they were judged
    /// against.
    pub fn reading(&self) -> (Reading, Judged) {
        *self
            .reading
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn last_move(&self) -> String {
        self.last_move
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    pub fn recover_to(&self) -> f64 {
        Self::get_f64(&self.recover_to)
    }

    pub fn time_to_recover_s(&self) -> f64 {
        Self::get_f64(&self.time_to_recover_s)
    }

    /// The phase (`ceiling`, `cutting`, `floor`, `dead_band`, `recovering`, `probing`,
    /// `demand_below_limit`) and the reason in a sentence.
    pub fn standing(&self) -> (&'static str, String) {
        let s = self
            .standing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        (s.0, s.1.clone())
    }

    pub(super) fn stand(&self, controller: &Controller, ceiling_records: Option<u64>) {
        let level = controller.recover_to();
        self.recover_to_records.store(
            ceiling_records.map_or(0, |c| (c as f64 * level).round() as u64),
            Relaxed,
        );
        *self
            .standing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) =
            (controller.phase(), controller.reason());
        Self::set_f64(&self.recover_to, level);
        self.level_learned
            .store(controller.level_learned(), Relaxed);
        Self::set_f64(&self.time_to_recover_s, controller.time_to_recover_s());
        let baseline = controller.baseline();
        self.reading
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .1 = Judged {
            baseline_ms: baseline.value_ms(),
            noise_ms: baseline.noise_ms(),
            healthy_below_ms: controller.healthy_below_ms(),
            target_ms: controller.target_ms(),
            accepted_ms: controller.accepted_ms(),
        };
    }
}
