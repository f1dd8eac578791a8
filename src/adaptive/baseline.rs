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
//!   [`NOISE_S`]), never more than [`NOISE_CAP`] x the baseline. Only healthy readings teach
//!   it: one in the dead band, or above the target, would let the target chase a path that is
//!   getting slower. The cap is what makes that true of a *ramp* too: "healthy" is judged
//!   against a line the noise itself raises (by two noises for one), so on a path getting
//!   slower a little every interval an uncapped noise fed itself and carried the target to
//!   ~100 x the baseline without a single cut;
//! - **floor**: the lowest baseline of the last [`FLOOR_WINDOW_S`]; the baseline never rises
//!   above [`FLOOR_FACTOR`] x it. A path may become slower for good (another zone, a busier
//!   broker): it is the new normal after minutes, a doubling per window at most, while a ramp
//!   of any speed within the window is judged against where the path stood before it;
//! - a reading above the target teaches neither: an unconfirmed one is an outlier, and pressure
//!   (confirmed) only lets the baseline creep up 1 % per interval (under the floor's bound), so
//!   a 12 s fault moves it little (and the first healthy readings after the fault bring it
//!   back down).
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
/// The noise is at most this share of the baseline: the target at most
/// (`baseline_factor` + 4 x this) x the baseline.
pub const NOISE_CAP: f64 = 0.5;
/// The window whose lowest baseline bounds the baseline's rise (s), kept as
/// [`FLOOR_BUCKETS`] buckets of their own minimum.
pub const FLOOR_WINDOW_S: f64 = 300.0;
const FLOOR_BUCKETS: usize = 5;
/// The baseline rises at most to this many times its floor.
pub const FLOOR_FACTOR: f64 = 2.0;

#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Baseline {
    value_ms: Option<f64>,
    noise_ms: f64,
    /// Readings learned, up to [`WARM_UP`].
    readings: u32,
    /// The lowest baseline of each of the last [`FLOOR_BUCKETS`] parts of the floor's window
    /// (`floor[at]` the part being filled, `age_s` into it).
    floor: [Option<f64>; FLOOR_BUCKETS],
    at: usize,
    age_s: f64,
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

    /// The lowest baseline of the last [`FLOOR_WINDOW_S`] (ms): the baseline stays within
    /// [`FLOOR_FACTOR`] x it.
    pub fn floor_ms(&self) -> Option<f64> {
        self.floor.iter().flatten().copied().reduce(f64::min)
    }

    /// Moves the floor's window on by `dt_s`: a part older than the window is forgotten.
    fn age(&mut self, dt_s: f64) {
        const PART_S: f64 = FLOOR_WINDOW_S / FLOOR_BUCKETS as f64;
        self.age_s += dt_s.max(0.0);
        let mut turned = 0;
        while self.age_s >= PART_S && turned < FLOOR_BUCKETS {
            self.at = (self.at + 1) % FLOOR_BUCKETS;
            self.floor[self.at] = None;
            self.age_s -= PART_S;
            turned += 1;
        }
        self.age_s = self.age_s.min(PART_S);
    }

    /// The baseline becomes `v`: no higher than the floor allows (nor than it already is),
    /// and the floor remembers it.
    fn set(&mut self, v: f64) {
        let b = self.value_ms.unwrap_or(v);
        let v = match self.floor_ms() {
            Some(f) if v > b => v.min((f * FLOOR_FACTOR).max(b)),
            _ => v,
        };
        self.value_ms = Some(v);
        let part = &mut self.floor[self.at];
        *part = Some(part.map_or(v, |m| m.min(v)));
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
        self.age(dt_s);
        let Some(b) = self.value_ms else {
            self.set(x);
            self.readings = 1;
            return;
        };
        if pressure {
            if x > b {
                self.set((b * CREEP).min(x));
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
        let v = if x < b {
            // Half-way within DOWN_S: 1 - 0.5^(dt / DOWN_S).
            b + (x - b) * (1.0 - 0.5f64.powf(dt_s.max(0.0) / DOWN_S))
        } else {
            // Never faster than the creep: readings that rise with the target (a path getting
            // slower) must not carry the target away with them.
            (b + (x - b) * toward(dt_s, UP_S)).min(b * CREEP)
        };
        self.set(v);
        // Bounded by the baseline it judges against (also when the baseline fell).
        self.noise_ms = self.noise_ms.min(NOISE_CAP * v);
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
        assert_eq!(
            (b.value_ms(), b.noise_ms(), b.target_ms(&s)),
            (before.value_ms(), before.noise_ms(), before.target_ms(&s))
        );
    }

    /// Readings growing by `growth` per 0.5 s interval from 7 ms after a healthy minute, judged
    /// as the controller does (over the target in this interval and the one before: pressure):
    /// the reading at which the path is first judged slow, if it is before `end_ms`.
    fn first_pressure_on_a_ramp(growth: f64, end_ms: f64) -> Option<f64> {
        let s = learned();
        let mut b = Baseline::default();
        for _ in 0..120 {
            b.learn(7.0, 0.5, false, &s);
        }
        let (mut x, mut before) = (7.0, false);
        while x < end_ms {
            x *= growth;
            let above = b.target_ms(&s).is_some_and(|t| x > t);
            if above && before {
                return Some(x);
            }
            before = above;
            b.learn(x, 0.5, false, &s);
        }
        None
    }

    #[test]
    fn a_latency_ramp_does_not_carry_the_target_away_with_its_noise() {
        // The hostile review's ramp (x1.04 per interval, 7 to 157 ms over 40 s), and slower
        // ones: the noise fed itself (healthy is judged against a line the noise raises), the
        // target went 100 -> 949 ms and nothing was ever cut. Now each is slow well before it
        // is 20 x the path.
        for growth in [1.04, 1.02, 1.009, 1.005] {
            let at = first_pressure_on_a_ramp(growth, 20.0 * 7.0);
            assert!(
                at.is_some_and(|x| x <= 12.0 * 7.0),
                "x{growth} per interval: judged slow at {at:?} ms"
            );
        }
    }

    #[test]
    fn the_noise_stays_within_its_share_of_the_baseline() {
        let s = learned();
        let mut b = Baseline::default();
        // Bursty readings: the path at 10 ms with every other reading just under healthy.
        for i in 0..2_000 {
            let x = if i % 2 == 0 {
                10.0
            } else {
                b.healthy_below_ms(&s).map_or(10.0, |h| h * 0.99)
            };
            b.learn(x, 0.5, false, &s);
        }
        let base = b.value_ms().expect("baseline");
        assert!(b.noise_ms() <= NOISE_CAP * base + 1e-9, "{b:?}");
        let target = b.target_ms(&s).expect("target");
        assert!(target <= (s.baseline_factor + 4.0 * NOISE_CAP) * base + 1e-9);
    }

    #[test]
    fn a_path_slower_for_good_is_the_new_normal_after_minutes() {
        let s = learned();
        let mut b = Baseline::default();
        for _ in 0..120 {
            b.learn(5.0, 0.5, false, &s);
        }
        let mut before = false;
        let mut last_pressure_s = 0.0;
        for i in 1..=(20 * 60 * 2) {
            let above = b.target_ms(&s).is_some_and(|t| 25.0 > t);
            let pressure = above && before;
            if pressure {
                last_pressure_s = f64::from(i) / 2.0;
            }
            before = above;
            b.learn(25.0, 0.5, pressure, &s);
        }
        // Judged slow at first (a broker 5 x slower), not for ever: within the floor's window
        // twice over, 25 ms is healthy.
        assert!(last_pressure_s > 0.0, "a step to 5 x is slow at first");
        assert!(
            last_pressure_s < 2.0 * FLOOR_WINDOW_S,
            "slow until {last_pressure_s} s"
        );
        let healthy = b.healthy_below_ms(&s).expect("healthy");
        assert!(25.0 < healthy, "{healthy} {b:?}");
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
