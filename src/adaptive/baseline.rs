//! The broker path's own latency when healthy, and how much it wanders: what the controller
//! judges "slow" against when no `target_delivery_ms` is configured.
//!
//! It follows one reading per interval (the delivery p90, see `controller::Signals`):
//! - **baseline**: falls quickly to a lower reading (half-way within [`DOWN_S`]) and rises
//!   slowly toward a higher one that is not slow (time constant [`UP_S`], and never more than
//!   1 % per interval): it sits near the
//!   path's latency at its best — at low load after start and right after each recovery, when
//!   the limit is low — not at its average under load;
//! - **noise**: how far *healthy* readings rise above the baseline (the mean of their upward
//!   distance; a plain mean over the first [`WARM_UP`] readings, then time constant
//!   [`NOISE_S`]). Only healthy readings teach it: one in the dead band, or above the target,
//!   would let the target chase a path that is getting slower;
//! - a reading above the target teaches neither: an unconfirmed one is an outlier, and pressure
//!   (confirmed) only lets the baseline creep up 1 % per interval, so a path that became
//!   slower for good is the new normal after minutes, while a 12 s fault moves it little (and
//!   the first healthy readings after the fault bring it back down).
//!
//! The target is then `baseline_factor` x the baseline plus four times the noise (as TCP's
//! retransmission timeout sits four deviations above the smoothed round trip), at least
//! `min_target_ms`, known once [`WARM_UP`] readings were learned (the first readings after
//! start include connecting to the brokers): a path whose p90 wanders between 20 and 40 ms
//! learns a noise that keeps 40 ms healthy (and 100 ms slow), a steady 8 ms path is slow
//! above 24 ms.
//!
//! Pure: stepped by the controller with the interval's length.

use crate::config::AdaptiveConfig;

/// Half-way toward a lower reading within this long (s): a lower reading is the path at its
/// best, learned at once.
pub const DOWN_S: f64 = 0.5;
/// Time constant (s) toward a higher reading that is not slow.
pub const UP_S: f64 = 30.0;
/// Time constant (s) of the noise's mean.
pub const NOISE_S: f64 = 10.0;
/// Readings learned before a target is set from them (5 s at the default interval).
pub const WARM_UP: u32 = 10;
/// Deviations of noise above the baseline before a reading counts as slow.
pub const NOISE_DEVIATIONS: f64 = 4.0;
/// Pressure lets the baseline creep toward the reading by this factor per interval at most.
const CREEP: f64 = 1.01;

#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Baseline {
    value_ms: Option<f64>,
    noise_ms: f64,
    /// Readings learned, up to [`WARM_UP`].
    readings: u32,
}

/// The fraction of the way to move toward a reading after `dt_s` with time constant `tau_s`.
fn toward(dt_s: f64, tau_s: f64) -> f64 {
    1.0 - (-dt_s.max(0.0) / tau_s).exp()
}

impl Baseline {
    /// The path's latency at its best (ms); `None` until a reading was measured.
    pub fn value_ms(&self) -> Option<f64> {
        self.value_ms
    }

    /// How far healthy readings wander from it (ms).
    pub fn noise_ms(&self) -> f64 {
        self.noise_ms
    }

    /// The reading above which the path is slow (ms): the configured target, or learned from
    /// the baseline and its noise; `None` while neither is known.
    pub fn target_ms(&self, s: &AdaptiveConfig) -> Option<f64> {
        if let Some(t) = s.target_delivery_ms {
            return Some(t as f64);
        }
        let b = self.value_ms.filter(|_| self.readings >= WARM_UP)?;
        let learned = b * s.baseline_factor + NOISE_DEVIATIONS * self.noise_ms;
        Some(learned.max(s.min_target_ms as f64))
    }

    /// The reading under which the path is healthy enough to grow the limit: `healthy_fraction`
    /// of the way from the baseline to the target (of the configured target, when one is set).
    pub fn healthy_below_ms(&self, s: &AdaptiveConfig) -> Option<f64> {
        let target = self.target_ms(s)?;
        match (s.target_delivery_ms, self.value_ms) {
            (None, Some(b)) if b < target => Some(b + (target - b) * s.healthy_fraction),
            _ => Some(target * s.healthy_fraction),
        }
    }

    /// Learns from one interval's reading `x` (ms), `dt_s` after the previous one; `pressure`:
    /// the controller confirmed the path slow this interval.
    pub fn learn(&mut self, x: f64, dt_s: f64, pressure: bool, s: &AdaptiveConfig) {
        if !x.is_finite() || x < 0.0 {
            return;
        }
        let Some(b) = self.value_ms else {
            self.value_ms = Some(x);
            self.readings = 1;
            return;
        };
        if pressure {
            if x > b {
                self.value_ms = Some((b * CREEP).min(x));
            }
            return;
        }
        if self.target_ms(s).is_some_and(|t| x > t) {
            return; // one slow reading, not confirmed: an outlier, learned from by nothing
        }
        // Healthy (or still warming up, nothing judged yet): how far it rose above the path's
        // best is its noise.
        if self.healthy_below_ms(s).is_none_or(|h| x < h) {
            let weight = if self.readings < WARM_UP {
                1.0 / f64::from(self.readings)
            } else {
                toward(dt_s, NOISE_S)
            };
            self.noise_ms += ((x - b).max(0.0) - self.noise_ms) * weight;
        }
        self.readings = self.readings.saturating_add(1).min(WARM_UP);
        self.value_ms = Some(if x < b {
            // Half-way within DOWN_S: 1 - 0.5^(dt / DOWN_S).
            b + (x - b) * (1.0 - 0.5f64.powf(dt_s.max(0.0) / DOWN_S))
        } else {
            // Never faster than the creep: readings that rise with the target (a path getting
            // slower) must not carry the target away with them.
            (b + (x - b) * toward(dt_s, UP_S)).min(b * CREEP)
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn learned() -> AdaptiveConfig {
        AdaptiveConfig {
            enabled: true,
            ..AdaptiveConfig::default()
        }
    }

    #[test]
    fn a_path_that_wanders_between_20_and_40_ms_learns_a_target_above_40() {
        let s = learned();
        let mut b = Baseline::default();
        for i in 0..240 {
            let x = if i % 2 == 0 { 20.0 } else { 40.0 };
            b.learn(x, 0.5, false, &s);
        }
        let base = b.value_ms().expect("baseline");
        assert!((20.0..26.0).contains(&base), "near the best: {base}");
        let target = b.target_ms(&s).expect("target");
        let healthy = b.healthy_below_ms(&s).expect("healthy");
        assert!(
            healthy > 40.0,
            "its wandering is healthy: {healthy} ({target})"
        );
        // Three times as slow as its worst healthy reading is slow.
        assert!(target < 3.0 * 40.0, "{target}");
    }

    #[test]
    fn a_steady_fast_path_is_judged_against_itself_not_a_fixed_50_ms() {
        let s = AdaptiveConfig {
            min_target_ms: 1,
            ..learned()
        };
        let mut b = Baseline::default();
        for _ in 0..120 {
            b.learn(8.0, 0.5, false, &s);
        }
        let target = b.target_ms(&s).expect("target");
        assert!(
            (24.0..25.0).contains(&target),
            "3 x 8 ms plus little noise: {target}"
        );
    }

    #[test]
    fn a_fault_moves_the_baseline_little_and_the_first_healthy_readings_bring_it_back() {
        let s = learned();
        let mut b = Baseline::default();
        for _ in 0..60 {
            b.learn(10.0, 0.5, false, &s);
        }
        // 12 s of a 600 ms path, confirmed pressure: 1 % an interval at most.
        for _ in 0..24 {
            b.learn(600.0, 0.5, true, &s);
        }
        let during = b.value_ms().expect("baseline");
        assert!(during < 10.0 * 1.01f64.powi(24) + 1e-9, "{during}");
        for _ in 0..4 {
            b.learn(10.0, 0.5, false, &s);
        }
        assert!(b.value_ms().expect("baseline") < 10.5, "{b:?}");
    }

    #[test]
    fn a_single_slow_reading_teaches_nothing() {
        let s = learned();
        let mut b = Baseline::default();
        for _ in 0..60 {
            b.learn(10.0, 0.5, false, &s);
        }
        let before = b;
        b.learn(500.0, 0.5, false, &s);
        assert_eq!(b, before);
    }

    #[test]
    fn the_first_readings_after_start_are_learned_not_judged() {
        let s = learned();
        let mut b = Baseline::default();
        // Connecting to the brokers: a slow first reading, then the path itself.
        b.learn(400.0, 0.5, false, &s);
        for _ in 0..(WARM_UP - 2) {
            b.learn(8.0, 0.5, false, &s);
            assert_eq!(b.target_ms(&s), None);
        }
        b.learn(8.0, 0.5, false, &s);
        let target = b.target_ms(&s).expect("target after the warm-up");
        // The start-up reading is no noise: the baseline fell to the path, nothing rose above it.
        assert!(target < 30.0, "{target} {b:?}");
    }

    #[test]
    fn a_path_getting_slower_does_not_raise_its_own_target_through_the_noise() {
        let s = learned();
        let mut b = Baseline::default();
        for _ in 0..60 {
            b.learn(10.0, 0.5, false, &s);
        }
        let before = b.target_ms(&s).expect("target");
        // Readings creep up through the dead band, each just under the target it has now.
        for _ in 0..40 {
            let x = b.target_ms(&s).expect("target") * 0.95;
            b.learn(x, 0.5, false, &s);
        }
        assert_eq!(b.noise_ms(), 0.0, "the dead band teaches no noise: {b:?}");
        let after = b.target_ms(&s).expect("target");
        // Only the baseline's slow rise moves it: 1 % an interval at most.
        assert!(after < 2.0 * before, "{before} -> {after}");
    }

    #[test]
    fn a_configured_target_wins() {
        let s = AdaptiveConfig {
            target_delivery_ms: Some(250),
            ..learned()
        };
        let b = Baseline::default();
        assert_eq!(b.target_ms(&s), Some(250.0));
        assert_eq!(b.healthy_below_ms(&s), Some(125.0));
    }
}
