//! `[adaptive]` and `[[lag_guards]]`: adaptive broker protection and the consumer-lag
//! guards, with their validation.

use serde::{Deserialize, Serialize};

use super::{topic_pattern_problems, ConfigProblem, GlobalBudgetConfig};

/// Adaptive broker protection: an admission limit below the configured budgets that follows
/// Kafka's own signals (see `adaptive`). Off unless `enabled`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct AdaptiveConfig {
    pub enabled: bool,
    /// How often the controller looks at the signals, in milliseconds.
    pub interval_ms: u64,
    /// Delivery p99 above which Kafka counts as slow, in milliseconds; unset: `baseline_factor`
    /// times the lowest p99 observed under load (at least `min_target_ms`).
    pub target_delivery_ms: Option<u64>,
    pub baseline_factor: f64,
    pub min_target_ms: u64,
    /// Healthy only below this fraction of the target (between it and the target: hold).
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
    pub decrease_cooldown_ms: u64,
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
            baseline_factor: 4.0,
            min_target_ms: 50,
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
        for (key, v) in [
            ("interval_ms", Some(self.interval_ms)),
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

/// A lag guard: once consumer group `group` would need more than `max_recovery_s` to drain
/// its lag on `topics`, producers of those topics are capped — at C / `headroom` records/s
/// while the lag is far behind (C: the group's observed consumption rate), rising with the
/// draining lag to C — until the consumers are shown to absorb what producers offer
/// (`lag::guard::release`).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LagGuardConfig {
    /// How the admin API and the metrics name it: 1 to 64 of a-z A-Z 0-9 - _ .
    pub name: String,
    /// Topic names or patterns ("orders.*").
    pub topics: Vec<String>,
    /// The consumer group whose lag counts (read, never joined).
    pub group: String,
    /// The longest acceptable time to drain the lag at the observed net drain rate.
    pub max_recovery_s: f64,
    /// Also act when the lag exceeds this many records.
    #[serde(default)]
    pub max_lag_records: Option<u64>,
    /// While far behind, producers may add at most C / headroom records/s (the least the cap
    /// is); the cap lifts early only when C is at least the demand times this.
    #[serde(default = "LagGuardConfig::default_headroom")]
    pub headroom: f64,
    /// How often offsets are read, in milliseconds.
    #[serde(default = "LagGuardConfig::default_interval_ms")]
    pub interval_ms: u64,
    /// The cap when the consumers have stopped (C = 0 while the lag grows).
    #[serde(default)]
    pub floor_records_per_sec: u64,
    /// While capping, the cap is the most that drains the lag within this fraction of
    /// `max_recovery_s`; it lifts once the lag would drain in that time at the offered demand
    /// (and the lag is under this fraction of `max_lag_records`), or once all that is offered
    /// has been admitted for `rate_window_s` with the lag under this fraction of caught-up.
    #[serde(default = "LagGuardConfig::default_release_fraction")]
    pub release_fraction: f64,
    /// A lag the consumers read within this many seconds counts as caught up (the distance
    /// between committing consumers and the log end is normal).
    #[serde(default = "LagGuardConfig::default_caught_up_s")]
    pub caught_up_s: f64,
    /// When offsets cannot be read, the last cap is kept this long, then released.
    #[serde(default = "LagGuardConfig::default_hold_s")]
    pub hold_s: f64,
    /// Rates are taken across this many seconds of readings (consumers that commit every
    /// few seconds still show a steady rate).
    #[serde(default = "LagGuardConfig::default_rate_window_s")]
    pub rate_window_s: f64,
    /// A group that commits nothing for this long while it has lag counts as stopped: C = 0
    /// and producers get the floor.
    #[serde(default = "LagGuardConfig::default_stopped_after_s")]
    pub stopped_after_s: f64,
}

impl LagGuardConfig {
    fn default_headroom() -> f64 {
        1.2
    }
    fn default_interval_ms() -> u64 {
        1000
    }
    fn default_release_fraction() -> f64 {
        0.5
    }
    fn default_caught_up_s() -> f64 {
        5.0
    }
    fn default_hold_s() -> f64 {
        30.0
    }
    fn default_rate_window_s() -> f64 {
        10.0
    }
    fn default_stopped_after_s() -> f64 {
        15.0
    }

    pub fn problems(&self, at: &str) -> Vec<ConfigProblem> {
        let mut problems = Vec::new();
        let mut bad = |key: &str, why: &str| {
            problems.push(ConfigProblem::new(format!("{at}.{key}"), why.to_string()));
        };
        if self.name.is_empty()
            || self.name.len() > 64
            || !self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        {
            bad("name", "must be 1 to 64 characters of a-z A-Z 0-9 - _ .");
        }
        problems.extend(topic_pattern_problems(at, &self.topics));
        let mut bad = |key: &str, why: &str| {
            problems.push(ConfigProblem::new(format!("{at}.{key}"), why.to_string()));
        };
        if self.group.is_empty() || self.group.len() > 255 {
            bad("group", "must be 1 to 255 characters");
        }
        const DAY_S: f64 = 86_400.0;
        if !(self.max_recovery_s > 0.0 && self.max_recovery_s <= DAY_S) {
            bad(
                "max_recovery_s",
                "must be greater than 0 and at most 86400 (a day)",
            );
        }
        if self
            .max_lag_records
            .is_some_and(|m| !(1..=crate::budget::MAX_RATE_PER_SEC).contains(&m))
        {
            bad("max_lag_records", "must be from 1 to 10000000000");
        }
        if !(self.headroom >= 1.0 && self.headroom <= 100.0) {
            bad("headroom", "must be from 1 to 100");
        }
        if !(10..=3_600_000).contains(&self.interval_ms) {
            bad("interval_ms", "must be from 10 to 3600000 (one hour)");
        }
        if self.floor_records_per_sec > crate::budget::MAX_RATE_PER_SEC {
            bad("floor_records_per_sec", "must be at most 10000000000");
        }
        if !(self.release_fraction > 0.0 && self.release_fraction < 1.0) {
            bad("release_fraction", "must be greater than 0 and less than 1");
        }
        if !(self.caught_up_s >= 0.0 && self.caught_up_s <= DAY_S) {
            bad("caught_up_s", "must be from 0 to 86400");
        }
        if !(self.hold_s >= 0.0 && self.hold_s <= DAY_S) {
            bad("hold_s", "must be from 0 to 86400");
        }
        if !(self.rate_window_s > 0.0 && self.rate_window_s <= 3_600.0) {
            bad("rate_window_s", "must be greater than 0 and at most 3600");
        }
        if !(self.stopped_after_s > 0.0 && self.stopped_after_s <= DAY_S) {
            bad(
                "stopped_after_s",
                "must be greater than 0 and at most 86400",
            );
        }
        problems
    }
}
