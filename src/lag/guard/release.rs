//! How high a lag guard's cap is and when it lifts — the rule that keeps a guard from
//! surging and re-capping once per drain cycle.
//!
//! The cap, while capping (at least the floor):
//! - **behind** (the lag is more than the consumers read in `caught_up_s`): the highest rate at
//!   which the lag still drains within `release_fraction × max_recovery_s`, C − L / that time,
//!   never below C / headroom (the drain the operator asked for) and never above C. It rises
//!   as the lag falls, not all at once.
//! - **caught up with room** (the lag under `release_fraction` of that allowance): the cap is
//!   raised by [`PROBE_STEP`] per reading above what the consumers read — a caught-up consumer
//!   reads only what is produced, so C says nothing of what it *could* read, and the only way
//!   to learn it is to let a little more through and watch the lag;
//! - **in between**: the cap holds (a dead band, so it does not jump each reading).
//!
//! The cap lifts when lifting it changes nothing for the lag, shown one of two ways:
//! - the consumers read the demand with the guard's headroom (P plus what the cap holds back,
//!   D − cap, and at least D, times headroom ≤ C; a caught-up consumer's C is only what it is
//!   given, so this speaks while it is busy) and the lag would drain within
//!   `release_fraction × max_recovery_s` at that demand; or
//! - the cap has admitted all that was offered for a whole `rate_window_s`, the lag stayed
//!   caught up with room, and it is not growing: at P − C it would stay caught up for at least
//!   `max_recovery_s / release_fraction`, and the lag's trend since the cap stopped binding (a
//!   least-squares slope less two standard errors) does not surely grow fast enough to leave
//!   "caught up" within [`GROWTH_HORIZON_S`]. A consumer just below demand makes the lag
//!   grow slowly but surely: releasing it would only defer the next cap, so it stays capped.
//!
//! So a consumer slower than demand is capped once and stays capped — producers get about
//! what it reads — and one that becomes fast enough is released once, for good.

use crate::config::LagGuardConfig;

/// Each reading while caught up with room, the cap may rise this much (×).
pub const PROBE_STEP: f64 = 1.25;

/// A lag that surely grows (its trend's lower bound) and would leave "caught up" within this
/// many seconds keeps the cap: the consumers are slower than demand, however slightly.
pub const GROWTH_HORIZON_S: f64 = 86_400.0;

/// The lag's trend over the time the cap has admitted all that was offered: a least-squares
/// line through (seconds, lag), kept with centred sums (no precision lost to large lags).
#[derive(Debug, Clone, Copy, Default)]
pub struct Trend {
    n: f64,
    mean_t: f64,
    mean_lag: f64,
    /// Σ (t − t̄)², Σ (t − t̄)(lag − lag̅), Σ (lag − lag̅)².
    stt: f64,
    stl: f64,
    sll: f64,
}

impl Trend {
    pub fn add(&mut self, t: f64, lag: f64) {
        if !t.is_finite() || !lag.is_finite() {
            return;
        }
        self.n += 1.0;
        let dt = t - self.mean_t;
        let dl = lag - self.mean_lag;
        self.mean_t += dt / self.n;
        self.mean_lag += dl / self.n;
        self.stt += dt * (t - self.mean_t);
        self.stl += dt * (lag - self.mean_lag);
        self.sll += dl * (lag - self.mean_lag);
    }

    /// The lag's growth, records/s, as (lower, upper): the slope less and plus two standard
    /// errors; `None` with fewer than three readings.
    pub fn bounds(&self) -> Option<(f64, f64)> {
        if self.n < 3.0 || self.stt <= 0.0 {
            return None;
        }
        let slope = self.stl / self.stt;
        let residual = (self.sll - slope * self.stl).max(0.0) / (self.n - 2.0);
        let se = (residual / self.stt).sqrt();
        let (low, high) = (slope - 2.0 * se, slope + 2.0 * se);
        (low.is_finite() && high.is_finite()).then_some((low, high))
    }
}

/// What set the cap in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CapBasis {
    /// C / headroom: the lag is far behind and drains at the configured headroom.
    Drain,
    /// The highest rate at which the lag still drains within `release_fraction` of
    /// `max_recovery_s`: between C / headroom and C.
    Recovery,
    /// C itself: the lag is drained, producers get what the consumers read.
    ConsumerRate,
    /// Above C: the lag is caught up, the cap is raised in steps to learn whether the
    /// consumers keep up with more.
    Probe,
    /// `floor_records_per_sec`: the consumers are stopped or slower than the floor.
    Floor,
}

impl CapBasis {
    pub fn as_str(self) -> &'static str {
        match self {
            CapBasis::Drain => "drain",
            CapBasis::Recovery => "recovery",
            CapBasis::ConsumerRate => "consumer_rate",
            CapBasis::Probe => "probe",
            CapBasis::Floor => "floor",
        }
    }
}

/// Why a cap in force is not lifted yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blocker {
    /// The lag is over `release_fraction` of `max_lag_records`.
    Lag,
    /// The lag is not yet caught up with room (under `release_fraction` of what the consumers
    /// read in `caught_up_s`), and the consumers do not read the offered demand with headroom.
    Behind,
    /// The cap admits less than is offered.
    Demand,
    /// The cap has admitted all that is offered for less than `rate_window_s`.
    Settling,
    /// With all that is offered admitted, the lag grows: it would not stay caught up for
    /// `max_recovery_s / release_fraction`.
    Growing,
}

impl Blocker {
    pub fn as_str(self) -> &'static str {
        match self {
            Blocker::Lag => "lag",
            Blocker::Behind => "behind",
            Blocker::Demand => "demand",
            Blocker::Settling => "settling",
            Blocker::Growing => "growing",
        }
    }
}

/// One reading as the rule sees it (rates over the guard's window, records/s).
#[derive(Debug, Clone, Copy)]
pub struct Now {
    pub lag: u64,
    /// C, P (the log's growth) and D (what floodgate's producers offered, all replicas).
    pub consumer: f64,
    pub producer: f64,
    pub offered: f64,
    /// The cap in force over the window, if any.
    pub cap: Option<f64>,
    /// Seconds the cap in force has admitted all that was offered.
    pub unbound_s: f64,
    /// The lag's growth over that time, records/s (lower, upper bound; see [`Trend`]).
    pub growth: Option<(f64, f64)>,
}

impl Now {
    /// What the consumers read within `caught_up_s`: a lag up to this is caught up.
    fn allowance(&self, g: &LagGuardConfig) -> f64 {
        self.consumer * g.caught_up_s
    }
}

fn lag_over(g: &LagGuardConfig, lag: u64, fraction: f64) -> bool {
    g.max_lag_records
        .is_some_and(|m| lag as f64 > m as f64 * fraction)
}

/// Why the cap should stay, or `None` to lift it.
pub fn blocker(g: &LagGuardConfig, n: &Now) -> Option<Blocker> {
    let f = g.release_fraction;
    if lag_over(g, n.lag, f) {
        return Some(Blocker::Lag);
    }
    // Lifting the cap adds what it holds back to the log's growth (which includes producers
    // floodgate does not see). Busy consumers show what they read: if that demand fits with
    // headroom and the lag drains in time at it, lift.
    // P and C are rates over the window: P after a cap that rose during it is less than the
    // cap now lets through, so the demand is at least what floodgate's producers offer.
    let held_back = n.cap.map_or(0.0, |cap| (n.offered - cap).max(0.0));
    let demand = (n.producer + held_back).max(n.offered);
    let drains =
        super::recovery_s(n.lag, n.consumer, demand, g.caught_up_s) <= f * g.max_recovery_s;
    if demand * g.headroom <= n.consumer && drains {
        return None;
    }
    let allowance = n.allowance(g);
    if n.lag as f64 > f * allowance {
        return Some(Blocker::Behind);
    }
    if n.cap.is_none_or(|cap| n.offered > cap) {
        return Some(Blocker::Demand);
    }
    if n.unbound_s < g.rate_window_s {
        return Some(Blocker::Settling);
    }
    // P − C over the window says how fast the lag grows; the trend since the cap stopped
    // binding says whether it surely grows at all (a noisy lag proves nothing either way).
    let surely = n.growth.map_or(f64::NEG_INFINITY, |(low, _)| low);
    let room = (allowance - n.lag as f64).max(0.0);
    let stays_s = |growth: f64| {
        if growth > 0.0 {
            room / growth
        } else {
            f64::INFINITY
        }
    };
    (stays_s(surely) < GROWTH_HORIZON_S || stays_s(n.producer - n.consumer) < g.max_recovery_s / f)
        .then_some(Blocker::Growing)
}

/// The cap while capping, and what set it.
pub fn cap(g: &LagGuardConfig, n: &Now) -> (f64, CapBasis) {
    let f = g.release_fraction;
    let c = n.consumer;
    let drain = c / g.headroom;
    let lag = n.lag as f64;
    let keeps = c - lag / (f * g.max_recovery_s).max(1e-9);
    let (base, basis) = if lag_over(g, n.lag, f) || keeps <= drain {
        (drain, CapBasis::Drain)
    } else if keeps >= c {
        (c, CapBasis::ConsumerRate)
    } else {
        (keeps, CapBasis::Recovery)
    };
    let allowance = n.allowance(g);
    let held = n.cap.unwrap_or(base);
    let (cap, basis) = if lag > allowance || lag_over(g, n.lag, f) {
        (base, basis)
    } else {
        // Caught up: probe with room, hold in the band; never past what is offered with
        // headroom (more would teach nothing).
        let wanted = if lag <= f * allowance {
            held * PROBE_STEP
        } else {
            held
        };
        let top = n.offered.max(c) * g.headroom;
        let probe = wanted.min(top).max(base);
        if probe > base * (1.0 + 1e-9) {
            (probe, CapBasis::Probe)
        } else {
            (base, basis)
        }
    };
    let floor = g.floor_records_per_sec as f64;
    if floor >= cap {
        (floor, CapBasis::Floor)
    } else {
        (cap, basis)
    }
}
