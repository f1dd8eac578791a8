//! `[[lag_guards]]`: producers of a topic slowed while its consumers fall behind, with the
//! guards' validation.

use serde::{Deserialize, Serialize};

use super::{topic_pattern_problems, ConfigProblem};

/// A lag guard: once consumer group `group` would need more than `max_recovery_s` to drain
/// its lag on `topics`, producers of those topics are capped — at C / `headroom` records/s
/// while the lag is far behind (C: the group's observed consumption rate), rising with the
/// draining lag to C — until the consumers are shown to absorb what producers offer
/// (`lag::guard::release`).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, schemars::JsonSchema)]
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
