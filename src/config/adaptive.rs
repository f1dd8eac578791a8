//! `[adaptive]`: adaptive broker protection, with its validation.

use serde::{Deserialize, Serialize};

use super::{ConfigProblem, GlobalBudgetConfig};

/// Adaptive broker protection: an admission limit below the configured budgets that follows
/// Kafka's own signals (see `adaptive`). Off unless `enabled`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct AdaptiveConfig {
    /// Follow Kafka's own signals and lower an admission limit below the configured budgets
    /// when Kafka slows down, refusing the least important traffic first.
    pub enabled: bool,
    /// How often the controller looks at the signals, in milliseconds.
    pub interval_ms: u64,
    /// Delivery p90 above which Kafka counts as slow, in milliseconds (an operator's target:
    /// read the path's `baseline_ms` and `noise_ms` on `/admin/adaptive` or the status page);
    /// unset: learned from the path's own baseline, `baseline_factor` x the baseline + 4 x its
    /// noise, at least `min_target_ms`.
    pub target_delivery_ms: Option<u64>,
    /// How many times its own baseline the path's p90 may reach (besides its noise) before it
    /// counts as slow.
    pub baseline_factor: f64,
    /// The learned target is at least this, in milliseconds: a few ms more is the machine's
    /// scheduling, not a slower broker.
    pub min_target_ms: u64,
    /// Healthy only below this fraction of the way from the baseline to the target (of the
    /// configured target, when one is set); between it and the target: hold.
    pub healthy_fraction: f64,
    /// Buffer occupancy counted as pressure.
    pub buffer_pressure: f64,
    /// The limit is multiplied by this on pressure.
    pub decrease_factor: f64,
    /// Above the recovery level (what Kafka last carried at healthy latency), the limit grows
    /// by this fraction of the ceiling per step when healthy and reached (probing).
    pub increase_step: f64,
    /// Below the recovery level, the limit is multiplied by this once per healthy interval
    /// (slow start): back from the 5 % floor to the ceiling in 5 intervals at 2.0.
    pub recovery_factor: f64,
    /// Least time between two cuts, in milliseconds (doubled, up to 8 times, after a cut the
    /// latency did not answer).
    pub decrease_cooldown_ms: u64,
    /// Least time between two steps of growth above the recovery level, in milliseconds
    /// (doubled, up to 32 times, after a probe that brought pressure).
    pub increase_cooldown_ms: u64,
    /// The limit never goes below this fraction of the ceiling.
    pub floor: f64,
    /// Share of the limit only critical tenants may use.
    pub critical_reserve: f64,
    /// The ceiling in records/s when `[global]` sets none (one of the two is required).
    pub max_records_per_sec: Option<u64>,
    /// The ceiling in bytes/s when `[global]` sets none (optional).
    pub max_bytes_per_sec: Option<u64>,
}

impl Default for AdaptiveConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            interval_ms: 500,
            target_delivery_ms: None,
            baseline_factor: 3.0,
            min_target_ms: 10,
            healthy_fraction: 0.5,
            buffer_pressure: 0.5,
            decrease_factor: 0.7,
            increase_step: 0.05,
            recovery_factor: 2.0,
            decrease_cooldown_ms: 2000,
            increase_cooldown_ms: 1000,
            floor: 0.05,
            critical_reserve: 0.2,
            max_records_per_sec: None,
            max_bytes_per_sec: None,
        }
    }
}

impl AdaptiveConfig {
    /// The ceiling: the global budget where it is set, else the section's own.
    pub fn ceiling(&self, global: &GlobalBudgetConfig) -> (Option<u64>, Option<u64>) {
        (
            global.records_per_sec.or(self.max_records_per_sec),
            global.bytes_per_sec.or(self.max_bytes_per_sec),
        )
    }

    pub fn problems(&self, global: &GlobalBudgetConfig) -> Vec<ConfigProblem> {
        let mut problems = Vec::new();
        let fraction = |key: &str, v: f64, problems: &mut Vec<ConfigProblem>| {
            if !(v > 0.0 && v < 1.0) {
                problems.push(ConfigProblem::new(
                    format!("adaptive.{key}"),
                    "must be greater than 0 and less than 1",
                ));
            }
        };
        fraction("healthy_fraction", self.healthy_fraction, &mut problems);
        fraction("buffer_pressure", self.buffer_pressure, &mut problems);
        fraction("decrease_factor", self.decrease_factor, &mut problems);
        fraction("increase_step", self.increase_step, &mut problems);
        fraction("floor", self.floor, &mut problems);
        if !(self.recovery_factor > 1.0 && self.recovery_factor <= 10.0) {
            problems.push(ConfigProblem::new(
                "adaptive.recovery_factor",
                "must be greater than 1 and at most 10",
            ));
        }
        if !(0.0..1.0).contains(&self.critical_reserve) {
            problems.push(ConfigProblem::new(
                "adaptive.critical_reserve",
                "must be at least 0 and less than 1",
            ));
        }
        if !(self.baseline_factor >= 1.0 && self.baseline_factor <= 100.0) {
            problems.push(ConfigProblem::new(
                "adaptive.baseline_factor",
                "must be from 1 to 100",
            ));
        }
        const HOUR_MS: u64 = 3_600_000;
        // A window shorter than 100 ms holds too few deliveries to read (the agent merges
        // them over at most 8 intervals); longer than a minute is no control loop.
        if !(100..=60_000).contains(&self.interval_ms) {
            problems.push(ConfigProblem::new(
                "adaptive.interval_ms",
                "must be from 100 to 60000 (one minute)",
            ));
        }
        for (key, v) in [
            ("min_target_ms", Some(self.min_target_ms)),
            ("decrease_cooldown_ms", Some(self.decrease_cooldown_ms)),
            ("increase_cooldown_ms", Some(self.increase_cooldown_ms)),
            ("target_delivery_ms", self.target_delivery_ms),
        ] {
            if v.is_some_and(|v| !(1..=HOUR_MS).contains(&v)) {
                problems.push(ConfigProblem::new(
                    format!("adaptive.{key}"),
                    "must be from 1 to 3600000 (one hour)",
                ));
            }
        }
        for (key, v) in [
            ("max_records_per_sec", self.max_records_per_sec),
            ("max_bytes_per_sec", self.max_bytes_per_sec),
        ] {
            if v.is_some_and(|v| !(1..=crate::budget::MAX_RATE_PER_SEC).contains(&v)) {
                problems.push(ConfigProblem::new(
                    format!("adaptive.{key}"),
                    "must be from 1 to 10000000000",
                ));
            }
        }
        if self.enabled && self.ceiling(global) == (None, None) {
            problems.push(ConfigProblem::new(
                "adaptive.max_records_per_sec",
                "is needed when [global] sets no records_per_sec or bytes_per_sec: the adaptive \
                 limit moves below a ceiling",
            ));
        }
        problems
    }
}
